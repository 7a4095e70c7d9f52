"""Float-safe Gaussian releases: the discrete Gaussian sampler (Canonne, Kamath & Steinke
2020), the grid and its rounding slack, the Renyi-DP calibration and the ledger's
composition of discrete Gaussian releases with the rest."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from dp_accounting import dp_event as dpe
from dp_accounting.rdp import rdp_privacy_accountant as rdp
from scipy import stats

from dp_proto.privacy import PrivacyLedger, gaussian_mechanism, laplace_mechanism
from dp_proto.privacy.calibration import analytic_gaussian_sigma
from dp_proto.privacy.events import ApproxEvent, DiscreteGaussianEvent
from dp_proto.privacy.mechanisms import plan_gaussian, renyi_noise_multiplier
from dp_proto.privacy.noise import discrete_gaussian_noise

# Seeded noise on purpose (exact distributions): the PrivacyLeakWarning is expected.
pytestmark = pytest.mark.filterwarnings("ignore:.*caller's torch.Generator:dp_proto.exceptions.PrivacyLeakWarning")
ALPHA = 1e-4


def _chi_square_pvalue(draws: np.ndarray, sigma: float) -> float:
    """Goodness of fit to ``P(k) ~ exp(-k^2 / 2 sigma^2)``: one cell per ``|k| <= 3 sigma``
    (at least 2) and one per tail."""
    kmax = max(2, int(3 * sigma))
    support = np.arange(-int(40 * sigma) - 40, int(40 * sigma) + 41)
    weights = np.exp(-(support.astype(np.float64) ** 2) / (2 * sigma**2))
    pmf = weights / weights.sum()
    inner = np.abs(support) <= kmax
    probs = np.concatenate([[pmf[support < -kmax].sum()], pmf[inner], [pmf[support > kmax].sum()]])
    observed = np.concatenate(
        [[np.sum(draws < -kmax)], [np.sum(draws == k) for k in support[inner]], [np.sum(draws > kmax)]]
    )
    return stats.chisquare(observed, probs * draws.size).pvalue


@pytest.mark.parametrize("sigma", [0.4, 1.0, 3.7, 25.0])
@pytest.mark.parametrize("secure", [False, True])
def test_discrete_gaussian_sampler_fits_the_exact_pmf(sigma, secure):
    gen = None if secure else torch.Generator().manual_seed(int(10 * sigma))
    draws = discrete_gaussian_noise(200_000, sigma, generator=gen, secure_mode=secure)
    assert draws.dtype == torch.int64 and draws.shape == (200_000,)
    assert _chi_square_pvalue(draws.numpy(), sigma) > ALPHA


def test_discrete_gaussian_sampler_large_sigma_shape_and_bad_input():
    draws = discrete_gaussian_noise((300, 400), 1e6, generator=torch.Generator().manual_seed(0)).double()
    assert draws.shape == (300, 400)
    assert draws.std().item() == pytest.approx(1e6, rel=0.01)
    assert abs(draws.mean().item()) < 5 * 1e6 / math.sqrt(draws.numel())
    with pytest.raises(ValueError, match="sigma"):
        discrete_gaussian_noise(3, 0.0)


def _rdp_epsilon(multiplier: float, delta: float) -> float:
    acc = rdp.RdpAccountant()
    acc.compose(dpe.GaussianDpEvent(multiplier))
    return acc.get_epsilon(delta)


def test_renyi_multiplier_is_the_smallest_that_meets_the_target():
    for epsilon, delta in [(0.1, 1e-5), (1.0, 1e-5), (8.0, 1e-6)]:
        nm = renyi_noise_multiplier(epsilon, delta)
        assert nm > analytic_gaussian_sigma(epsilon, delta, 1.0)  # the price of Renyi accounting

        assert _rdp_epsilon(nm, delta) <= epsilon < _rdp_epsilon(nm * (1 - 1e-6), delta)
    assert renyi_noise_multiplier(1.0, 1e-5) == pytest.approx(4.0454, abs=1e-3)


def test_gaussian_release_lies_on_the_grid_with_the_planned_noise():
    ledger = PrivacyLedger(budget=(1.0, 1e-5))
    value = torch.rand(40_000, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    out = gaussian_mechanism(value, 2.0, 1.0, 1e-5, ledger=ledger, generator=torch.Generator().manual_seed(1))
    plan = plan_gaussian(1.0, 1e-5, 2.0, value.numel())
    assert plan.grid == pytest.approx(2.0 / (1024 * math.sqrt(value.numel())))
    # nothing below the public grid: every output is the double nearest k * grid, k integer
    assert torch.equal(torch.round(out / plan.grid) * plan.grid, out)
    assert plan.sigma == pytest.approx(renyi_noise_multiplier(1.0, 1e-5) * 2.0 * 1025 / 1024)
    noise = (out - value).numpy()
    assert stats.kstest(noise, stats.norm(scale=plan.sigma).cdf).pvalue > ALPHA
    (event,) = ledger.events
    assert event.kind == "discrete_gaussian" and event.sensitivity == 2.0
    assert ledger.get_epsilon(1e-5) <= 1.0 and ledger.get_epsilon(1e-5) == pytest.approx(1.0, rel=1e-6)
    with pytest.raises(Exception, match="refused"):  # the budget is spent
        gaussian_mechanism(value[:3], 2.0, 0.1, 1e-5, ledger=ledger)


def test_rounding_slack_is_needed_and_covered():
    """Adversarial neighbours: every coordinate rounds down on one side and up on the
    other, so the rounded values move by more than ``Delta / grid`` steps; the declared
    ``Delta / grid + sqrt(k)`` covers it."""
    k, sens = 64, 1.0
    plan = plan_gaussian(1.0, 1e-5, sens, k)
    g = plan.grid  # sens / (1024 sqrt(k))
    a = torch.full((k,), 0.49 * g, dtype=torch.float64)  # every coordinate rounds down
    shift = torch.full((k,), 1023.02 * g, dtype=torch.float64)  # a + shift = 1023.51 g rounds up
    shift[-1] = math.sqrt(sens**2 - (k - 1) * (1023.02 * g) ** 2)  # ||shift|| = sens
    b = a + shift
    assert torch.linalg.vector_norm(b - a).item() == pytest.approx(sens, rel=1e-12)
    moved = torch.linalg.vector_norm(torch.round(b / g) - torch.round(a / g)).item()
    assert moved > sens / g + 7  # the slack is needed: nearly sqrt(k) = 8 steps of it
    assert moved <= plan.steps_sensitivity  # and enough


def test_counts_on_an_integer_grid_need_no_slack():
    plan = plan_gaussian(1.0, 1e-5, 1.0, 10, grid=1.0, value_on_grid=True)
    assert plan.steps_sensitivity == 1.0
    out = gaussian_mechanism(torch.arange(10.0), 1.0, 1.0, 1e-5, grid=1.0, value_on_grid=True, ledger=None)
    assert torch.equal(out, torch.round(out))
    refused = PrivacyLedger()
    with pytest.raises(ValueError, match="off the grid"):
        gaussian_mechanism(torch.tensor([0.5]), 1.0, 1.0, 1e-5, grid=1.0, value_on_grid=True, ledger=refused)
    assert refused.events == ()  # refused before anything is spent
    with pytest.raises(ValueError, match="explicit grid"):
        gaussian_mechanism(torch.tensor([1.0]), 1.0, 1.0, 1e-5, value_on_grid=True, ledger=None)


def test_ledger_composes_discrete_gaussians_with_the_rest():
    """RDP alone for discrete Gaussians; with PLD-accounted releases, basic composition
    over a split of delta, never worse than either valid bound."""
    nm = renyi_noise_multiplier(1.0, 1e-5)
    only = PrivacyLedger()
    only.spend(DiscreteGaussianEvent(noise_multiplier=nm, name="sum"))
    assert only.get_epsilon(1e-5) == pytest.approx(1.0, rel=1e-6)
    rdp_ledger = PrivacyLedger(accountant="rdp")
    rdp_ledger.spend(DiscreteGaussianEvent(noise_multiplier=nm, name="sum"))
    assert rdp_ledger.get_epsilon(1e-5) == pytest.approx(1.0, rel=1e-6)

    mixed = PrivacyLedger()
    laplace_mechanism(torch.zeros(3), 1.0, 0.5, ledger=mixed)
    gaussian_mechanism(torch.zeros(4), 1.0, 1.0, 1e-5, ledger=mixed)
    eps = mixed.get_epsilon(1e-5)
    assert 1.0 < eps <= 1.5 + 1e-9  # at most basic composition of the two guarantees
    approx = PrivacyLedger()  # an (epsilon, delta) event has no Renyi curve: the split alone
    approx.spend(ApproxEvent(epsilon=0.5, delta=1e-6, name="coa"))
    approx.spend(DiscreteGaussianEvent(noise_multiplier=nm, name="sum"))
    assert 1.5 < approx.get_epsilon(1e-5) < 2.0
    state = approx.state_dict()
    assert PrivacyLedger.from_state_dict(state).get_epsilon(1e-5) == approx.get_epsilon(1e-5)
    assert PrivacyLedger.epsilon_of(approx.events, 1e-5, discretization=1e-3) == approx.get_epsilon(1e-5)
    with pytest.raises(ValueError, match="Renyi-DP"):
        DiscreteGaussianEvent(noise_multiplier=nm).to_pld()
