"""Private releases of the SVDD: sensitivity, noise scale, ledger, empirical audit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from dp_proto.privacy import PrivacyLedger
from dp_proto.privacy.audit import audit_epsilon
from dp_proto.svdd import (
    RandomFourierFeatures,
    centre_sensitivity,
    noisy_cell_counts,
    private_quantile,
    release_centre,
    solve_svdd_dual,
)
from tests._stats import discrete_laplace_pvalue

# These tests seed the noise on purpose (exact distributions, empirical audits): the
# PrivacyLeakWarning that a caller's generator raises is expected here.
pytestmark = pytest.mark.filterwarnings("ignore:.*caller's torch.Generator:dp_proto.exceptions.PrivacyLeakWarning")


def _centre(x: torch.Tensor, features: RandomFourierFeatures, c_over_n: float, tol: float = 1e-10):
    phi = features(x)
    sol = solve_svdd_dual(phi, c_over_n * x.shape[0], tol=tol)
    assert sol.converged
    return sol.centre


def test_sensitivity_formula():
    assert centre_sensitivity(0.01, 400) == pytest.approx(20 * 0.02)  # Cor. 4.2: 2 C kappa sqrt(F) / n
    assert centre_sensitivity(0.01, 400, tol=1e-8) == pytest.approx(20 * (0.02 + 2e-4))
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="C/n"):
            centre_sensitivity(bad, 400)


@pytest.mark.parametrize("seed", range(4))
def test_neighbouring_centres_move_less_than_the_bound(seed):
    """Add/remove one record (at an extreme position) moves the centre by at most 2 C/n in l2."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(60, 2, generator=gen, dtype=torch.float64) * 0.3
    features = RandomFourierFeatures(2, 200, 2.0, generator=gen, dtype=torch.float64)
    cap = 0.05
    base = _centre(x, features, cap)
    for canary in (torch.tensor([[3.0, 3.0]]), x[:1] + 0.01, torch.randn(1, 2, generator=gen) * 2):
        other = _centre(torch.cat([x, canary.to(x)]), features, cap)
        assert torch.linalg.vector_norm(other - base) <= 2 * cap + 1e-6
        assert torch.linalg.vector_norm(other - base, ord=1) <= centre_sensitivity(cap, 200) + 1e-6


def test_release_noise_has_the_stated_laplace_scale_and_is_projected():
    cap, eps, F = 0.0005, 2.0, 400
    centre = torch.zeros(F, dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    ledger = PrivacyLedger()
    draws = []
    for _ in range(25):
        # a tiny centre: the noisy vector has norm ~ sqrt(2 F) * scale < 1, no projection
        draws.append(release_centre(centre, cap, eps, tol=1e-10, ledger=ledger, generator=gen))
    noise = torch.stack(draws).reshape(-1).numpy()
    scale = centre_sensitivity(cap, F, tol=1e-10) / eps
    assert stats.kstest(noise, stats.laplace(scale=scale).cdf).pvalue > 1e-3
    assert np.mean(np.abs(noise)) == pytest.approx(scale, rel=0.05)
    assert ledger.get_epsilon() == pytest.approx(25 * eps, rel=1e-3)
    big = release_centre(centre, 0.5, 0.1, tol=1e-10, generator=gen)  # huge noise: projected
    assert torch.linalg.vector_norm(big) == pytest.approx(1.0)


def test_noisy_cell_counts_scale_shape_and_ledger():
    cells = torch.tensor([0, 0, 1, 2, 2, 2])
    labels = torch.tensor([0, 1, 1, 0, 0, 1])
    ledger = PrivacyLedger()
    gen = torch.Generator().manual_seed(1)
    out = noisy_cell_counts(cells, labels, 4, 2, 0.5, ledger=ledger, generator=gen)
    assert out.shape == (4, 2)
    assert ledger.get_epsilon() == pytest.approx(0.5, rel=1e-3)
    exact = torch.tensor([[1, 1], [0, 1], [2, 1], [0, 0]], dtype=torch.float64)
    noise = torch.cat([noisy_cell_counts(cells, labels, 4, 2, 0.5, generator=gen) - exact for _ in range(500)])
    assert torch.equal(out, out.round())  # integer counts, integer noise (float-safe)
    (event,) = ledger.events
    assert event.kind == "discrete_laplace" and event.epsilon == 0.5 and event.grid_steps == 1
    # 4000 draws of P(k) ~ exp(-0.5 |k|): chi-square test, false failure probability 1e-3;
    # the continuous Lap(2) is rejected (non-integer) and so is a discrete Laplace of scale 3
    noise = noise.reshape(-1).numpy()
    assert discrete_laplace_pvalue(noise, 0.5, kmax=8) > 1e-3
    assert discrete_laplace_pvalue(noise, 0.5 / 1.5, kmax=8) < 1e-6
    with pytest.raises(ValueError, match="lie in"):
        noisy_cell_counts(cells, labels, 2, 2, 1.0)
    with pytest.raises(ValueError, match="shape"):
        noisy_cell_counts(cells, labels[:3], 4, 2, 1.0)


def test_private_quantile_is_close_with_a_large_budget_and_recorded():
    gen = torch.Generator().manual_seed(2)
    scores = torch.rand(5000, generator=gen, dtype=torch.float64) * 4
    grid = torch.linspace(0, 4, 401, dtype=torch.float64)
    ledger = PrivacyLedger()
    q = private_quantile(scores, 0.9, 5.0, grid, ledger=ledger, generator=gen)
    assert abs(q - 3.6) < 0.05
    assert ledger.get_epsilon() == pytest.approx(5.0, rel=1e-3)
    with pytest.raises(ValueError, match="level"):
        private_quantile(scores, 1.5, 1.0, grid)


def test_private_quantile_satisfies_the_exponential_mechanism_ratio():
    """Output distributions on neighbours differ by at most e^epsilon (exact probabilities)."""
    grid = torch.linspace(0, 1, 11, dtype=torch.float64)
    eps = 1.0

    def probs(scores):
        counts = np.array([(scores <= t).sum() for t in grid.numpy()], dtype=float)
        logits = -0.5 * eps * np.abs(counts - 0.5 * len(scores))
        p = np.exp(logits - logits.max())
        return p / p.sum()

    base = np.linspace(0.05, 0.95, 9)
    worst = max(np.max(np.abs(np.log(probs(base) / probs(np.append(base, extra))))) for extra in (0.0, 0.5, 1.0))
    assert worst <= eps + 1e-12
    # the sampler follows these probabilities
    gen = torch.Generator().manual_seed(3)
    draws = [private_quantile(torch.as_tensor(base), 0.5, eps, grid, generator=gen) for _ in range(4000)]
    freq = np.array([np.mean(np.isclose(draws, t)) for t in grid.numpy()])
    assert np.abs(freq - probs(base)).max() < 0.03


def _centre_audit_pair():
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(20, 2, generator=gen, dtype=torch.float64) * 0.2
    features = RandomFourierFeatures(2, 8, 1.0, generator=gen, dtype=torch.float64)
    canary = torch.tensor([[4.0, -4.0]], dtype=torch.float64)  # far from everything
    cap = 0.1
    a0 = _centre(x, features, cap)
    a1 = _centre(torch.cat([x, canary]), features, cap)
    return cap, a0, a1


@pytest.mark.parametrize("noise_factor, honest", [(1.0, True), (0.05, False)])
def test_empirical_audit_of_the_centre_release(noise_factor, honest):
    """The audited lower bound stays below epsilon; a 20x under-noised release is caught."""
    cap, a0, a1 = _centre_audit_pair()
    eps = 1.0
    direction = (a1 - a0) / torch.linalg.vector_norm(a1 - a0)

    def mechanism(centre, generator):
        return release_centre(centre, cap, eps / noise_factor, tol=1e-10, generator=generator)

    result = audit_epsilon(mechanism, a0, a1, statistic=lambda o: float(o @ direction), n_trials=4000, generator_seed=7)
    if honest:
        assert 0.0 <= result.epsilon_lower_bound < eps
    else:
        assert result.epsilon_lower_bound > eps
    assert math.isfinite(result.epsilon_lower_bound)
