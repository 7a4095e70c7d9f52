"""The session ledger: every private fit of the process, composed, and a notice when fits
without a shared ledger add up (a model selection that spends its budget invisibly)."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.model_selection import GridSearchCV

from dp_proto.lvq.private import DPGLVQ
from dp_proto.privacy import DPPipeline, DPStandardScaler, SharedLedger, reset_session, session_ledger

SETTINGS = {"epsilon": 1.0, "bounds": (0, 8), "classes": [0, 1, 2], "sampling_rate": 0.2, "epochs": 1}


def _iris():
    return load_iris(return_X_y=True)


def _notices(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "dp_proto.budget" and r.levelno == logging.WARNING]


def test_a_grid_search_shows_its_composed_spend(caplog):
    X, y = _iris()
    with caplog.at_level(logging.WARNING, logger="dp_proto.budget"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        search = GridSearchCV(DPGLVQ(**SETTINGS), {"lr": [0.05, 0.5]}, cv=2).fit(X, y)
    # the notice is a log record, never a warnings warning (a fit's own warnings about its
    # noisy record count may come and go with the noise)
    assert not [w for w in caught if "private fits" in str(w.message)]
    # 2 candidates x 2 folds + the refit: 5 fits; notices at the 2nd and the 4th
    notices = _notices(caplog)
    assert len(notices) == 2
    assert "DPGLVQ: 2 private fits in this process without a shared ledger" in notices[0]
    assert "DPGLVQ: 4 private fits" in notices[1]
    total = session_ledger().get_epsilon(1e-5)
    assert search.best_estimator_.epsilon_ <= 1.0 < total < 5.0  # composed: more than one fit, less than 5


def test_fits_under_a_shared_ledger_are_recorded_without_a_notice(caplog):
    X, y = _iris()
    shared = SharedLedger(budget=(4.0, 1e-5))
    with caplog.at_level(logging.WARNING, logger="dp_proto.budget"):
        for lr in (0.05, 0.1, 0.5):
            DPGLVQ(**SETTINGS, lr=lr, ledger=shared).fit(X, y)
    assert not _notices(caplog)
    assert session_ledger().get_epsilon(1e-5) == pytest.approx(shared.get_epsilon(), rel=0.2)  # RDP vs PLD


def test_a_pipeline_counts_as_one_fit(caplog):
    X, y = _iris()
    make = lambda: DPPipeline(  # noqa: E731
        [("scale", DPStandardScaler(epsilon=0.5, bounds=(0, 8))), ("lvq", DPGLVQ(**{**SETTINGS, "bounds": (-4, 4)}))],
        budget=(2.0, 1e-5),
    )
    with caplog.at_level(logging.WARNING, logger="dp_proto.budget"):
        make().fit(X, y)
        assert not _notices(caplog)  # its two private steps share the pipeline's budget
        make().fit(X, y)
    assert len(_notices(caplog)) == 1 and "DPPipeline: 2 private fits" in _notices(caplog)[0]


def test_reset_session_starts_a_new_count(caplog):
    X, y = _iris()
    DPGLVQ(**SETTINGS).fit(X, y)
    assert session_ledger().events
    reset_session()
    assert not session_ledger().events
    with caplog.at_level(logging.WARNING, logger="dp_proto.budget"):
        DPGLVQ(**SETTINGS).fit(X, y)
    assert not _notices(caplog)
    assert np.isfinite(session_ledger().get_epsilon(1e-5))


def test_the_notice_states_a_finite_guarantee_when_the_fits_deltas_use_up_delta(caplog):
    """Approximate-DP fits (each with its own delta 1e-5) compose to no epsilon at all at
    delta 1e-5: the notice moves to a delta where the composition is finite."""
    from dp_proto.lvq.private import SubsampleAggregateGLVQ

    X, y = _iris()
    settings = {"num_bins": 5, "epsilon": 1.0, "bounds": (0, 8), "classes": [0, 1, 2]}
    with caplog.at_level(logging.WARNING, logger="dp_proto.budget"):
        for _ in range(2):
            SubsampleAggregateGLVQ(**settings, aggregation="centre_of_attention").fit(X, y)
    (notice,) = _notices(caplog)
    assert session_ledger().get_epsilon(1e-5) == float("inf")
    assert "(inf" not in notice and "0.0001)-DP" in notice
