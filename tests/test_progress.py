"""Progress bars: in interactive use by default (``verbose=None``), never with 0, always with 1."""

from __future__ import annotations

import io
import sys

import numpy as np

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


def _bar_output(monkeypatch, estimator, X, y) -> str:
    """What ``estimator.fit`` writes on stderr with the two-second delay taken away."""
    import dp_proto._progress as progress

    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    original = progress.progress_bar

    def no_delay(*args, **kwargs):
        bar = original(*args, **kwargs)
        bar.delay = 0.0
        return bar

    monkeypatch.setattr(progress, "progress_bar", no_delay)
    monkeypatch.setattr("dp_proto.svdd.estimators.progress_bar", no_delay)
    estimator.fit(X, y)
    return stream.getvalue()


def test_svdd_fits_show_their_phases(monkeypatch):
    from sklearn.datasets import load_iris

    from dp_proto.svdd import PrivateSVDD, PrivateSVDDClassifier

    X, y = load_iris(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    assert PrivateSVDDClassifier().verbose is None and PrivateSVDD().verbose is None
    shown = _bar_output(monkeypatch, PrivateSVDDClassifier(epsilon=None, verbose=1, random_state=0), X, y)
    assert "PrivateSVDDClassifier" in shown and "centre" in shown and "votes" in shown
    private = _bar_output(
        monkeypatch, PrivateSVDDClassifier(epsilon=1.0, classes=[0, 1, 2], bounds=(-4, 4), verbose=1), X / 4, y
    )
    assert "centre" in private and "gap" not in private  # a private fit shows its phases only
    assert _bar_output(monkeypatch, PrivateSVDD(epsilon=None, verbose=0), X, None) == ""
    # a solve in working-set rounds shows its gap (non-private only)
    big = np.random.default_rng(0).normal(size=(3000, 2))
    assert "centre: gap" in _bar_output(monkeypatch, PrivateSVDD(epsilon=None, verbose=1, random_state=0), big, None)


def test_a_fast_svdd_fit_draws_no_bar(monkeypatch):
    """Two seconds first: the phase labels must not draw the bar earlier."""
    from sklearn.datasets import load_iris

    from dp_proto.svdd import PrivateSVDDClassifier

    X, y = load_iris(return_X_y=True)
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    PrivateSVDDClassifier(epsilon=None, verbose=1, random_state=0).fit((X - X.mean(0)) / X.std(0), y)
    assert stream.getvalue() == ""
