"""Progress bars: in interactive use by default (``verbose=None``), never with 0, always with 1."""

from __future__ import annotations

import io
import sys

from dp_proto._progress import interactive, wants_progress
from dp_proto.lvq import GMLVQ
from dp_proto.lvq.private import DPGMLVQ


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_none_means_interactive_use_only(monkeypatch):
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not interactive() and not wants_progress(None)
    assert wants_progress(1) and not wants_progress(0)
    monkeypatch.setattr(sys, "stderr", _Terminal())
    assert interactive() and wants_progress(None) and not wants_progress(0)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    monkeypatch.setitem(sys.modules, "ipykernel", object())  # a Jupyter kernel
    assert wants_progress(None)


def test_estimators_default_to_interactive_progress():
    assert GMLVQ().verbose is None and DPGMLVQ().verbose is None
