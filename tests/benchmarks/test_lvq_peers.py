"""benchmarks/lvq/peers.py: sklvq 0.1.2 fits and predicts under scikit-learn >= 1.6 once
``load_sklvq`` has applied its shim (skipped when sklvq is not installed)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.preprocessing import StandardScaler

from benchmarks.lvq.peers import MODELS, PEER_NAME, SOLVERS, load_sklvq, sklvq_estimator

pytest.importorskip("sklvq")


@pytest.fixture(scope="module")
def digits():
    """600 training and 600 test rows of scikit-learn's digits, z-scored on the training rows."""
    X, y = load_digits(return_X_y=True)
    idx = np.random.default_rng(0).permutation(len(y))
    train, test = idx[:600], idx[600:1200]
    scaler = StandardScaler().fit(X[train])
    return scaler.transform(X[train]), y[train], scaler.transform(X[test]), y[test]


def test_load_sklvq_is_idempotent():
    from sklvq.models import LVQBaseClass, _base

    first = load_sklvq()
    patched = (LVQBaseClass.__dict__["_validate_data"], _base.check_array)
    assert load_sklvq() is first
    assert (LVQBaseClass.__dict__["_validate_data"], _base.check_array) == patched
    assert PEER_NAME.startswith("sklvq ")


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("model", MODELS)
def test_fits_and_beats_chance(digits, model, solver):
    X_train, y_train, X_test, y_test = digits
    est = sklvq_estimator(model, solver=solver, max_iter=2 if solver == "default" else 30)
    pred = est.fit(X_train, y_train).predict(X_test)
    assert pred.shape == y_test.shape
    assert est.prototypes_.shape == (10, 64)
    assert np.mean(pred == y_test) > 0.5


def test_rejects_unknown_names():
    with pytest.raises(ValueError, match="model"):
        sklvq_estimator("GRLVQ")
    with pytest.raises(ValueError, match="solver"):
        sklvq_estimator("GLVQ", solver="adam")
