"""Deprecated: moved to ``dp_proto._neighbours`` (this path is removed in the next release)."""

from dp_proto._deprecation import alias_module

alias_module(__name__, "dp_proto._neighbours")
