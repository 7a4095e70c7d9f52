"""Old import paths kept for one release after the issue-21 restructure.

A moved module leaves a two-line shim at its old path that calls :func:`alias_module`;
a package that lost names defines ``__getattr__ = moved_names(__name__, {...})``. Both
import the new location lazily (by name, so the package layering stays one-way) and warn
with :class:`DeprecationWarning`.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

REMOVAL = "the release after 0.1"


def alias_module(old: str, new: str) -> None:
    """Make the module being imported as ``old`` the module ``new`` (same object)."""
    warnings.warn(f"{old} moved to {new}; the old path will be removed in {REMOVAL}",
                  DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)


def moved_names(package: str, new_homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` serving ``name`` from ``new_homes[name]`` with a warning."""

    def __getattr__(name: str) -> Any:
        home = new_homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        warnings.warn(f"{package}.{name} moved to {home}.{name}; the old path will be removed in "
                      f"{REMOVAL}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(home), name)

    return __getattr__
