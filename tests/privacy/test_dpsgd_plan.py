"""DPSGDPlan: one recipe (ledger, steps, noise multiplier) for every DP-SGD trainer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris

from dp_proto.exceptions import PrivacyBudgetExceededError
from dp_proto.lvq.private import DPGLVQ
from dp_proto.privacy import (
    BudgetedEpochs,
    DPSGDPlan,
    PrivacyLedger,
    calibrate_noise_multiplier,
    dp_sgd_event,
    laplace_mechanism,
)
from dp_proto.privacy.dpsgd_plan import paper_noise_multiplier, sgd_steps, steps_per_epoch


def test_an_epoch_is_what_the_poisson_loader_yields():
    assert steps_per_epoch(0.01) == 100 and steps_per_epoch(0.3) == 3 and steps_per_epoch(1.0) == 1
    assert sgd_steps(50, 0.01) == 5000 and sgd_steps(2, 0.3) == 6 and sgd_steps(0.1, 0.05) == 2
    plan = DPSGDPlan(1.0, 1e-5, 0.3, 2)
    assert (plan.steps_per_epoch, plan.steps, plan.init_epsilon) == (3, 6, pytest.approx(0.2))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"delta": 1.0}, "delta"),
        ({"sampling_rate": 0.0}, "sampling_rate"),
        ({"sampling_rate": 1.5}, "sampling_rate"),
        ({"epochs": 0}, "epochs"),
        ({"epochs": float("inf")}, "epochs"),
        ({"init_fraction": 1.0}, "init_fraction"),
        ({"calibration": "abadi"}, "calibration"),
    ],
)
def test_bad_settings_raise(kwargs, match):
    settings = {"epsilon": 1.0, "delta": 1e-5, "sampling_rate": 0.1, "epochs": 5, **kwargs}
    with pytest.raises(ValueError, match=match):
        DPSGDPlan(**settings)


@pytest.mark.slow
def test_ledger_and_noise_multiplier_follow_the_calibration():
    ledger_plan = DPSGDPlan(1.0, 1e-5, 0.1, 5)
    assert ledger_plan.new_ledger().budget == (1.0, 1e-5)
    assert ledger_plan.noise_multiplier() == calibrate_noise_multiplier(1.0, 1e-5, 0.1, 50)
    paper = DPSGDPlan(1.0, 1e-5, 0.1, 5, calibration="paper")
    assert paper.new_ledger().budget is None
    prior = PrivacyLedger()
    laplace_mechanism(torch.zeros(3), 1.0, 0.2, ledger=prior)  # a pure-DP release before training
    assert paper.noise_multiplier(prior.events) == paper_noise_multiplier(1.0 - 0.2, 1e-5, 0.1, 50)
    assert ledger_plan.noise_multiplier(prior.events) > ledger_plan.noise_multiplier()


def test_expected_batch_size_comes_from_the_released_count():
    plan = DPSGDPlan(1.0, 1e-5, 0.1, 5)
    assert plan.expected_batch_size(250.4) == pytest.approx(25.04)
    with pytest.warns(UserWarning, match="expected batch below one record"):
        assert plan.expected_batch_size(-3.0) == pytest.approx(0.1)  # clamped at one record


def test_budgeted_epochs_spend_each_epoch_before_it_runs_and_stop_cleanly():
    ledger = PrivacyLedger()
    epochs = BudgetedEpochs(ledger, 1.0, 0.3, 7)
    assert list(epochs) == [3, 3, 1] and not epochs.stopped_by_budget
    assert sum(e.count for e in ledger.events) == 7  # (the ledger merges equal consecutive events)
    sigma = 1.0
    one_epoch = PrivacyLedger.epsilon_of([dp_sgd_event(sigma, 0.3, 3)], 1e-5)
    tight = PrivacyLedger(budget=(one_epoch * 1.01, 1e-5))  # room for one epoch, not two
    epochs = BudgetedEpochs(tight, sigma, 0.3, 9)
    ran = []
    for count in epochs:
        ran.append(count)
    assert ran == [3] and epochs.stopped_by_budget and sum(e.count for e in tight.events) == 3
    with pytest.raises(PrivacyBudgetExceededError):
        tight.spend(dp_sgd_event(sigma, 0.3, 3))  # the refused epoch was not recorded either


@pytest.mark.slow
def test_the_estimator_runs_the_plan():
    X, y = load_iris(return_X_y=True)
    est = DPGLVQ(epsilon=3.0, delta=1e-5, sampling_rate=0.3, epochs=2, bounds=(0, 8), classes=[0, 1, 2], noise_seed=0)
    with pytest.warns(Warning):  # noise_seed: the explicit opt-in to reproducible noise
        est.fit(X, y)
    plan = est.dp_sgd_recipe().plan
    assert plan.steps == 6 and est.n_iter_ == 6  # 2 epochs of int(1 / 0.3) = 3 steps (was ceil(2 / 0.3) = 7)
    assert sum(e.count for e in est.ledger_.events if e.kind == "subsampled_gaussian") == 6
    init_events = [e for e in est.ledger_.events if e.kind != "subsampled_gaussian"]  # the DP initialisation
    assert est.noise_multiplier_ == pytest.approx(plan.noise_multiplier(init_events))
    assert np.isfinite(est.epsilon_) and est.epsilon_ <= 3.0 * 1.001


def test_budgeted_steps_reserve_and_record_stop_cleanly():
    """The step-by-step use of the Lightning modules: reserve an epoch, record each step."""
    sigma = 1.0
    budget = PrivacyLedger.epsilon_of([dp_sgd_event(sigma, 0.3, 5)], 1e-5)
    ledger = PrivacyLedger(budget=(budget, 1e-5))
    steps = BudgetedEpochs(ledger, sigma, 0.3)
    assert steps.reserve(3) and ledger.events == ()  # reserving records nothing
    assert all(steps.record(1) for _ in range(3)) and ledger.events[0].count == 3
    assert not steps.reserve(3) and steps.stopped_by_budget  # 6 > 5 steps: refused before any runs
    assert not steps.record(1) and ledger.events[0].count == 3  # stopped stays stopped
    with pytest.raises(TypeError, match="no epochs to iterate"):
        iter(BudgetedEpochs(ledger, sigma, 0.3)).__next__()


@pytest.mark.parametrize("epsilon", [0.5, 2.0, 8.0])
@pytest.mark.parametrize("epochs", [1, 50])
def test_calibration_is_tight_and_takes_few_compositions(monkeypatch, epsilon, epochs):
    """The search composes a handful of times (a cold calibration stays well under a
    second), and the ledger's own finer accountant certifies at most the target and at
    least 99 % of it."""
    from dp_proto.privacy import dpsgd_plan
    from dp_proto.privacy.events import LaplaceEvent

    prior = (LaplaceEvent(noise_multiplier=5.5 / epsilon, name="init"),)
    calls = []
    composed = dpsgd_plan._total_epsilon
    monkeypatch.setattr(dpsgd_plan, "_total_epsilon", lambda *a, **k: calls.append(a) or composed(*a, **k))
    steps = sgd_steps(epochs, 0.01)
    sigma = dpsgd_plan._calibrate_cached.__wrapped__(epsilon, 1e-5, 0.01, steps, prior, "pld", 1e-3)
    assert len(calls) <= 8
    spent = PrivacyLedger.epsilon_of([*prior, dp_sgd_event(sigma, 0.01, steps)], 1e-5)
    assert 0.99 * epsilon <= spent <= epsilon


@pytest.mark.parametrize("epsilon", [1e3, 1e6])
def test_calibration_at_a_huge_epsilon_is_small_and_fast(epsilon):
    """The Gaussian-DP starting guess multiplied exp(epsilon) by a tiny cdf: from epsilon
    1000 on it overflowed (OverflowError) before any accounting ran."""
    sigma = calibrate_noise_multiplier(epsilon, 1e-5, 0.05, 20)
    assert 0 < sigma < 0.4
