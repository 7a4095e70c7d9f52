"""Empirical privacy audit: lower bounds stay below honest claims and catch a broken one."""

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy.stats import binomtest

from dp_proto.lvq.private.audit import dp_init_audit_setup
from dp_proto.privacy import noisy_count
from dp_proto.privacy.audit import (
    AuditResult,
    audit_epsilon,
    clopper_pearson_upper,
    gaussian_audit_setup,
    gaussian_dp_lower_bound,
    laplace_audit_setup,
)

# -- honest mechanisms: the certified lower bound stays below the claim ------------------


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
def test_laplace_count_bound_is_below_claim_and_tight(epsilon):
    result = laplace_audit_setup(epsilon).audit(40_000, generator_seed=1)
    assert isinstance(result, AuditResult)
    assert 0.8 * epsilon < result.epsilon_lower_bound < epsilon
    assert result.direction == ">" and result.delta == 0.0 and result.n_trials == 40_000
    assert result.statistics_0.shape == result.statistics_1.shape == (40_000,)


def test_gaussian_bound_is_below_claim():
    setup = gaussian_audit_setup(1.0, 1e-5)
    result = setup.audit(100_000, generator_seed=2)
    assert result.delta == 1e-5
    assert 0.2 < result.epsilon_lower_bound < 1.0


def test_dp_init_canary_at_corner_bound_is_below_claim():
    setup = dp_init_audit_setup(2.0, dim=2)  # canary at the corner (+1, +1), others at (-1, -1)
    result = setup.audit(1_000, generator_seed=3)
    assert 0.0 < result.epsilon_lower_bound < 2.0
    assert result.direction == ">"  # the canary pulls the class-0 prototype up


def test_unbatched_path_with_the_scalar_noisy_count():
    def mechanism(dataset, generator):
        return noisy_count(len(dataset), 1.0, generator=generator, ledger=None)

    result = audit_epsilon(mechanism, list(range(10)), list(range(11)), statistic=float, n_trials=2_000)
    assert 0.5 < result.epsilon_lower_bound < 1.0


def test_reversed_direction_is_found():
    setup = laplace_audit_setup(1.0)
    result = audit_epsilon(setup.mechanism, setup.dataset_1, setup.dataset_0, n_trials=10_000, batch=10_000)
    assert result.direction == "<=" and 0.7 < result.epsilon_lower_bound < 1.0


# -- broken mechanisms: the audit detects the violation -----------------------------------


def test_under_noised_laplace_violates_its_claim():
    setup = laplace_audit_setup(1.0, noise_factor=0.5)  # claims 1, is 2-DP
    assert setup.name == "broken_laplace_claims1"
    result = setup.audit(4_000, generator_seed=4)
    assert result.epsilon_lower_bound > 1.0 + 0.4


def test_noiseless_release_gets_a_large_bound():
    result = audit_epsilon(lambda ds, g: torch.tensor([float(len(ds))]), [0] * 5, [0] * 6, n_trials=2_000)
    level = math.sqrt(0.95)
    fpr_u = 1 - (1 - level) ** (1 / 1_000)  # zero errors in 1000 evaluation trials per side
    assert result.fpr == result.fnr == 0.0
    assert result.epsilon_lower_bound == pytest.approx(math.log((1 - fpr_u) / fpr_u), rel=1e-6)


# -- the statistics of the audit -----------------------------------------------------------


def test_identical_datasets_certify_nothing():
    setup = laplace_audit_setup(1.0)
    result = audit_epsilon(setup.mechanism, setup.dataset_0, setup.dataset_0, n_trials=20_000, batch=20_000)
    assert result.epsilon_lower_bound < 0.05


def test_coverage_of_the_confidence_level():
    # Laplace attains likelihood ratio exactly e^epsilon in its tail, the hardest case for
    # validity; at confidence 0.8 at most ~20 % of audits may overshoot the true epsilon.
    setup = laplace_audit_setup(1.0)
    over = [setup.audit(400, confidence=0.8, generator_seed=s).epsilon_lower_bound > 1.0 for s in range(150)]
    assert np.mean(over) <= 0.2 + 3 * math.sqrt(0.2 * 0.8 / 150)


def test_reproducible_from_the_seed():
    setup = laplace_audit_setup(1.0, batch=300)  # several batches, each with its own seed
    a, b = setup.audit(1_000, generator_seed=7), setup.audit(1_000, generator_seed=7)
    c = setup.audit(1_000, generator_seed=8)
    assert a == b and np.array_equal(a.statistics_1, b.statistics_1)
    assert not np.array_equal(a.statistics_0, c.statistics_0)
    assert not np.array_equal(a.statistics_0 - 100, a.statistics_1 - 101)  # independent streams


def test_clopper_pearson_upper_matches_scipy_exact_interval():
    level = 0.975
    for k, n in [(0, 50), (3, 50), (25, 50), (50, 50), (120, 1000)]:
        two_sided = binomtest(k, n).proportion_ci(confidence_level=2 * level - 1, method="exact").high
        assert clopper_pearson_upper(k, n, level) == pytest.approx(two_sided, abs=1e-9)


def test_explicit_thresholds_and_summary():
    setup = laplace_audit_setup(1.0)
    result = setup.audit(10_000, thresholds=[101.0])
    assert result.threshold == 101.0
    assert set(result.summary()) >= {"epsilon_lower_bound", "threshold", "fpr", "fnr", "n_trials"}
    assert result.epsilon_estimate == pytest.approx(1.0, abs=0.15)


@pytest.mark.parametrize(
    "kwargs", [{"n_trials": 10}, {"confidence": 1.0}, {"delta": 1.0}, {"batch": 0}, {"thresholds": []}]
)
def test_rejects_bad_arguments(kwargs):
    setup = laplace_audit_setup(1.0)
    kwargs = {"n_trials": 100, "batch": 100, **kwargs}
    with pytest.raises(ValueError):
        audit_epsilon(setup.mechanism, setup.dataset_0, setup.dataset_1, **kwargs)


def test_batched_statistic_must_match_batch_size():
    with pytest.raises(ValueError, match="batch"):
        audit_epsilon(lambda ds, g, size: torch.zeros(size + 1), 0, 1, n_trials=100, batch=50)


def test_point_estimate_is_never_negative():
    from dp_proto.privacy.audit import _point_epsilon

    assert _point_epsilon(0.6, 0.6, 1e-5) == 0.0  # a test worse than guessing
    assert _point_epsilon(0.1, 0.1, 0.0) == pytest.approx(math.log(9.0))


@pytest.mark.parametrize("epsilon", [1.0, 4.0, 8.0])
def test_gaussian_dp_bound_is_below_the_claim_and_close_to_it(epsilon):
    """Under a Gaussian trade-off curve one central test bounds mu; the bound at delta
    comes close to the claim where the assumption-free bound cannot reach the tails."""
    setup = gaussian_audit_setup(epsilon, 1e-5)
    result = setup.audit(20_000, generator_seed=1)
    bound, mu = gaussian_dp_lower_bound(result)
    assert result.epsilon_lower_bound < bound <= setup.claimed_epsilon
    assert bound > 0.6 * setup.claimed_epsilon and mu > 0


def test_gaussian_dp_bound_flags_halved_noise_and_inverts_the_calibration():
    from dp_proto.privacy.audit import _gdp_epsilon
    from dp_proto.privacy.calibration import analytic_gaussian_sigma

    for eps in (0.5, 2.0, 8.0):
        assert _gdp_epsilon(1.0 / analytic_gaussian_sigma(eps, 1e-5, 1.0), 1e-5) == pytest.approx(eps, rel=1e-6)
    honest = gaussian_audit_setup(1.0, 1e-5)

    def half_noise(dataset, generator, size):  # the honest draw at half its scale
        return len(dataset) + (honest.mechanism(dataset, generator, size) - len(dataset)) / 2

    broken = replace(honest, mechanism=half_noise)
    bound, _ = gaussian_dp_lower_bound(broken.audit(20_000))
    assert bound > honest.claimed_epsilon
    with pytest.raises(ValueError, match="raw statistics"):
        gaussian_dp_lower_bound(AuditResult(1.0, 0.0, 0.1, 0.1, 100, 0.95, 1e-5))
