"""Private hyperparameter selection (Papernot & Steinke 2022): the repeat-and-select
event, the distribution of the number of runs, and ``PrivateSearchCV``."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from dp_accounting import dp_event as dpe
from dp_accounting.rdp import rdp_privacy_accountant as rdp
from sklearn.datasets import load_iris

from dp_proto.exceptions import PrivacyBudgetExceededError, PrivacyLeakWarning
from dp_proto.lvq.private import DPGLVQ
from dp_proto.privacy import (
    ApproxEvent,
    DiscreteLaplaceEvent,
    PrivacyEvent,
    PrivacyLedger,
    PrivateSearchCV,
    RepeatAndSelectEvent,
    SharedLedger,
    SubsampledGaussianEvent,
    session_ledger,
)
from dp_proto.privacy.selection import sample_runs

RUN = (SubsampledGaussianEvent(1.1, sampling_rate=0.01, count=200, name="dp_sgd"), DiscreteLaplaceEvent(0.1))
BASE = {"bounds": (0, 8), "classes": [0, 1, 2], "sampling_rate": 0.2, "epochs": 2}


@pytest.mark.parametrize("shape", [0.0, 1.0, float("inf")])
def test_the_event_is_accounted_by_dp_accountings_renyi_curve(shape):
    event = RepeatAndSelectEvent(inner=RUN, mean=10.0, shape=shape, name="selection")
    accountant = rdp.RdpAccountant()
    accountant.compose(dpe.RepeatAndSelectDpEvent(dpe.ComposedDpEvent([e.to_dp_event() for e in RUN]), 10.0, shape))
    ledger = PrivacyLedger()
    ledger.spend(event)
    assert ledger.get_epsilon(1e-5) == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-6)
    one_run = PrivacyLedger(accountant="rdp")
    one_run.spend(*RUN)
    assert one_run.get_epsilon(1e-5) < ledger.get_epsilon(1e-5) < 10 * one_run.get_epsilon(1e-5)
    assert PrivacyEvent.from_dict(event.to_dict()) == event  # ledger checkpoints and releases


def test_the_event_checks_its_parameters():
    with pytest.raises(ValueError, match="Renyi-DP curve"):
        RepeatAndSelectEvent(inner=(ApproxEvent(1.0, delta=1e-6),), mean=5.0, shape=0.0)
    with pytest.raises(ValueError, match="at least 1"):
        RepeatAndSelectEvent(inner=RUN, mean=0.5, shape=0.0)
    with pytest.raises(ValueError, match="shape"):
        RepeatAndSelectEvent(inner=RUN, mean=5.0, shape=-1.0)
    with pytest.raises(ValueError, match="inner"):
        RepeatAndSelectEvent(inner=(), mean=5.0, shape=0.0)


@pytest.mark.parametrize("shape", [0.0, 1.0, 3.0])
def test_the_number_of_runs_has_the_asked_mean(shape):
    rng = np.random.default_rng(0)
    draws = np.array([sample_runs(10.0, shape, rng) for _ in range(20000)])
    assert draws.min() >= 1
    assert abs(draws.mean() - 10.0) < 5 * draws.std() / np.sqrt(len(draws))


def _iris():
    return load_iris(return_X_y=True)


def test_a_search_spends_its_budget_once_and_releases_the_best_run(caplog):
    X, y = _iris()
    search = PrivateSearchCV(DPGLVQ(**BASE), {"lr": [0.05, 0.5]}, epsilon=2.0, mean_runs=3)
    with caplog.at_level(logging.WARNING, logger="dp_proto.budget"):
        search.fit(X, y)
    assert search.epsilon_ <= 2.0 and search.ledger_.budget == (2.0, 1e-5)
    assert [e.kind for e in search.ledger_.events] == ["discrete_laplace", "repeat_and_select"]
    assert search.best_params_ in ({"lr": 0.05}, {"lr": 0.5}) and search.n_runs_ >= 1
    assert 0.0 <= search.best_score_ <= 1.0 and search.run_epsilon_ < 2.0
    np.testing.assert_array_equal(search.predict(X), search.best_estimator_.predict(X))
    # the released model is the output of the whole search, and says so
    best = search.best_estimator_
    assert best.ledger_ is search.ledger_ and best.epsilon_ == pytest.approx(search.epsilon_)
    privacy = best.to_release().privacy
    assert [e["kind"] for e in privacy["events"]] == ["discrete_laplace", "repeat_and_select"]
    assert privacy["epsilon"] == pytest.approx(search.epsilon_) and "PrivateSearchCV" in privacy["scope"]
    # the runs are parts of one mechanism: the session holds the search's events only
    assert not [r for r in caplog.records if r.name == "dp_proto.budget"]
    assert session_ledger().get_epsilon(1e-5) == pytest.approx(search.epsilon_, rel=1e-6)


def test_bad_grids_and_budgets_are_refused_before_the_data_are_read():
    X, y = _iris()
    never = np.full_like(X, np.nan)  # reading it would fail differently
    with pytest.raises(ValueError, match="changes the privacy events"):
        PrivateSearchCV(DPGLVQ(**BASE), {"epochs": [1, 2]}, epsilon=2.0, mean_runs=3).fit(never, y)
    with pytest.raises(ValueError, match="epsilon"):
        PrivateSearchCV(DPGLVQ(**BASE), {"epsilon": [1.0, 2.0]}, epsilon=2.0).fit(never, y)
    spent = SharedLedger(budget=(2.0, 1e-5))
    spent.spend(DiscreteLaplaceEvent(1.5))
    with pytest.raises(PrivacyBudgetExceededError, match="above the budget"):
        PrivateSearchCV(DPGLVQ(**BASE), {"lr": [0.05, 0.5]}, epsilon=2.0, mean_runs=3, ledger=spent).fit(never, y)
    with pytest.raises(ValueError, match="mean_runs"):
        PrivateSearchCV(DPGLVQ(**BASE), {"lr": [0.05]}, mean_runs=0.5).fit(never, y)


def test_a_noise_seed_reproduces_the_search_and_says_so():
    X, y = _iris()
    make = lambda: PrivateSearchCV(DPGLVQ(**BASE), {"lr": [0.05, 0.5]}, epsilon=2.0, mean_runs=3, noise_seed=7)  # noqa: E731
    with pytest.warns(PrivacyLeakWarning):
        first = make().fit(X, y)
    with pytest.warns(PrivacyLeakWarning):
        second = make().fit(X, y)
    assert (first.n_runs_, first.best_params_, first.best_score_) == (
        second.n_runs_,
        second.best_params_,
        second.best_score_,
    )
    np.testing.assert_array_equal(first.predict(X), second.predict(X))
    assert first.ledger_.noise == "reproducible"
