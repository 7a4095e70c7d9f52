"""One budget across fits: a SharedLedger accumulates the fits of a model selection and
refuses the fit that would pass its budget, before that fit releases anything."""

import copy
import pickle
import warnings

import pytest
from sklearn.datasets import load_iris
from sklearn.model_selection import cross_val_score

import dp_proto.lvq.private.dpsgd as dpsgd_module
from dp_proto.exceptions import PrivacyBudgetExceededError
from dp_proto.lvq.private import DPGLVQ, DPGMLVQ
from dp_proto.privacy import PrivacyLedger, SharedLedger

X, Y = load_iris(return_X_y=True)
SETTINGS = dict(bounds=(0, 8), classes=[0, 1, 2], sampling_rate=0.1, epochs=2)


def _fit(est):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # small data: small expected batches
        return est.fit(X, Y)


def test_cross_validation_spends_on_the_shared_ledger_with_tight_composition():
    shared = SharedLedger(budget=(3.0, 1e-5))
    est = DPGMLVQ(epsilon=1.0, ledger=shared, **SETTINGS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        cross_val_score(est, X, Y, cv=3)  # clone keeps the shared ledger by reference
    fits = [e for e in shared.events if e.name.endswith("class_counts")]
    assert len(fits) == 3
    total = shared.get_epsilon()
    assert 1.0 < total < 3.0 * 0.7  # three (1, 1e-5)-DP fits: basic composition says 3.0
    assert est.ledger is shared and not hasattr(est, "ledger_")  # the unfitted original


def test_the_fit_that_would_pass_the_budget_is_refused_before_it_releases(monkeypatch):
    shared = SharedLedger(budget=(2.0, 1e-5))
    est = DPGLVQ(epsilon=1.0, ledger=shared, **SETTINGS)
    history = []
    with pytest.raises(PrivacyBudgetExceededError):
        for _ in range(10):
            fitted = _fit(est)
            assert fitted.epsilon_ <= 1.0 and fitted.ledger_ is not shared  # the fit's own guarantee
            history.append(shared.get_epsilon())
    assert 2 <= len(history) <= 6 and history[-1] <= 2.0
    assert history[-1] < len(history) * 1.0  # tighter than adding the epsilons
    events = shared.events
    # a refused fit releases nothing: the DP initialisation is never reached
    monkeypatch.setattr(dpsgd_module, "dp_class_mean_prototypes", lambda *a, **k: pytest.fail("the data were released"))
    with pytest.raises(PrivacyBudgetExceededError):
        _fit(est)
    assert shared.events == events


def test_only_a_shared_ledger_is_accepted_and_it_survives_copies():
    with pytest.raises(TypeError, match="ledger must be a SharedLedger or None, got PrivacyLedger"):
        _fit(DPGLVQ(ledger=PrivacyLedger(budget=(1.0, 1e-5)), **SETTINGS))
    shared = SharedLedger(budget=(1.0, 1e-5))
    assert copy.copy(shared) is shared and copy.deepcopy({"a": shared})["a"] is shared
    with pytest.raises(ValueError, match="needs a budget"):
        SharedLedger(budget=None)  # type: ignore[arg-type]


def test_a_shared_ledger_refuses_to_record_in_another_process():
    """Worker processes (n_jobs > 1) would spend on a pickled copy: refused."""
    copied = pickle.loads(pickle.dumps(SharedLedger(budget=(1.0, 1e-5))))
    copied._pid = -1  # as if unpickled in a worker
    with pytest.raises(RuntimeError, match="another process"):
        _fit(DPGLVQ(ledger=copied, **SETTINGS))


def test_missing_bounds_warn_the_same_whatever_the_data():
    """bounds=None is a public setting: the warning names bounds= and does not depend on
    whether any record lies outside [-1, 1] (that count stays curator-only)."""
    from dp_proto.exceptions import DomainWarning

    inside = X / 8.0  # iris in [0, 1)
    seen = []
    for data in (inside, X):  # X reaches 7.9: clipped
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            DPGLVQ(classes=[0, 1, 2], sampling_rate=0.1, epochs=1).fit(data, Y)
        seen.append(sorted(str(w.message) for w in caught if issubclass(w.category, DomainWarning)))
    assert seen[0] == seen[1] and len(seen[0]) == 1
    assert "bounds=None takes the data to lie in [-1, 1]^d" in seen[0][0] and "bounds=(lower, upper)" in seen[0][0]


def test_the_domain_warning_names_the_bounds_in_use():
    import numpy as np

    from dp_proto.exceptions import DomainWarning
    from dp_proto.privacy import PublicBoundsScaler

    with pytest.warns(DomainWarning, match=r"1 of 2 records lay outside the public domain \[0, 16\]\^d"):
        PublicBoundsScaler(0, 16).fit_transform(np.array([[1.0, 2.0], [17.0, 3.0]]))
    with pytest.warns(DomainWarning, match=r"per-feature bounds \[0, 1\], \[0, 2\]"):
        PublicBoundsScaler([0, 0], [1, 2]).fit_transform(np.array([[5.0, 1.0]]))


@pytest.mark.parametrize("init_mechanism", ["laplace", "gaussian"])
def test_planned_events_are_the_recorded_ones_and_the_run_meets_its_budget(init_mechanism):
    X, y = load_iris(return_X_y=True)
    est = DPGMLVQ(epsilon=1.0, bounds=(0, 8), classes=[0, 1, 2], epochs=2, init_mechanism=init_mechanism).fit(X, y)
    planned = est.planned_privacy_events(X.shape[1])
    assert [repr(e) for e in planned] == [repr(e) for e in est.ledger_.events]
    assert est.ledger_.events[1].kind == {"laplace": "pure", "gaussian": "discrete_gaussian"}[init_mechanism]
    assert est.epsilon_ <= 1.0 + 1e-6  # (fresh noise: no accuracy claim on two epochs)


def test_an_unknown_init_mechanism_is_refused():
    X, y = load_iris(return_X_y=True)
    with pytest.raises(ValueError, match="init_mechanism must be one of"):
        DPGMLVQ(epsilon=1.0, bounds=(0, 8), classes=[0, 1, 2], init_mechanism="uniform").fit(X, y)
