"""Noise calibration check values and statistical tests of every noise sampler.

Seeded tests are deterministic. The secure-mode tests draw from os.urandom; each
uses a Kolmogorov-Smirnov test at level 1e-4, so one fails by chance with
probability at most 1e-4 per run (stated false-failure probability).
"""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from dp_proto.privacy import (
    analytic_gaussian_delta,
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    discrete_laplace_noise,
    gaussian_noise,
    laplace_noise,
    laplace_scale,
)
from dp_proto.privacy.noise import uniform_open

ALPHA = 1e-4


@pytest.mark.parametrize(
    "epsilon, sensitivity, analytic, classic",
    [
        (1.0, 1.0, 3.731, 4.845),
        (1.0, math.sqrt(30), 20.434, 26.536),
        (2.0, math.sqrt(30), 10.921, 13.268),
        (5.0, math.sqrt(30), 4.885, 5.307),
    ],
)
def test_gaussian_check_values(epsilon, sensitivity, analytic, classic):
    assert analytic_gaussian_sigma(epsilon, 1e-5, sensitivity) == pytest.approx(analytic, abs=1e-3)
    assert classic_gaussian_sigma(epsilon, 1e-5, sensitivity) == pytest.approx(classic, abs=1e-3)


@pytest.mark.parametrize("epsilon", [0.05, 0.5, 1.0, 4.0, 20.0])
def test_analytic_sigma_is_the_smallest_valid_one(epsilon):
    sigma = analytic_gaussian_sigma(epsilon, 1e-6, 2.0)
    assert analytic_gaussian_delta(sigma, epsilon, 2.0) <= 1e-6
    assert analytic_gaussian_delta(sigma * 0.999, epsilon, 2.0) > 1e-6


def test_laplace_scale_and_bad_parameters():
    assert laplace_scale(0.5, 2.0) == 4.0
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="epsilon"):
            laplace_scale(bad, 1.0)
    with pytest.raises(ValueError, match="sensitivity"):
        laplace_scale(1.0, -1.0)
    for bad in (0.0, 1.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="delta"):
            analytic_gaussian_sigma(1.0, bad, 1.0)


def test_uniform_is_open_and_uniform():
    u = uniform_open(200_000, generator=torch.Generator().manual_seed(0))
    assert u.min() > 0 and u.max() < 1 and u.dtype == torch.float64
    assert stats.kstest(u.numpy(), "uniform").pvalue > ALPHA


@pytest.mark.parametrize("secure", [False, True])
def test_laplace_noise_distribution(secure):
    gen = None if secure else torch.Generator().manual_seed(1)
    x = laplace_noise(50_000, 2.5, generator=gen, secure_mode=secure).numpy()
    assert stats.kstest(x, stats.laplace(scale=2.5).cdf).pvalue > ALPHA


@pytest.mark.parametrize("secure", [False, True])
def test_gaussian_noise_distribution(secure):
    gen = None if secure else torch.Generator().manual_seed(2)
    x = gaussian_noise(50_000, 3.0, generator=gen, secure_mode=secure).numpy()
    assert stats.kstest(x, stats.norm(scale=3.0).cdf).pvalue > ALPHA


@pytest.mark.parametrize("secure", [False, True])
def test_discrete_laplace_distribution(secure):
    scale = 2.0
    gen = None if secure else torch.Generator().manual_seed(3)
    k = discrete_laplace_noise(100_000, scale, generator=gen, secure_mode=secure).numpy()
    assert k.dtype == np.int64
    values = np.arange(-12, 13)
    p = np.exp(-np.abs(values) / scale)
    p /= np.exp(-np.abs(np.arange(-200, 201)) / scale).sum()
    observed = np.array([(k == v).sum() for v in values])
    expected = p * len(k)
    tail_obs = len(k) - observed.sum()
    tail_exp = len(k) - expected.sum()
    chi2 = stats.chisquare(np.append(observed, tail_obs), np.append(expected, tail_exp))
    assert chi2.pvalue > ALPHA


def test_seeded_noise_is_reproducible_and_secure_is_not():
    a = laplace_noise(10, 1.0, generator=torch.Generator().manual_seed(5))
    b = laplace_noise(10, 1.0, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    assert not torch.equal(laplace_noise(10, 1.0, secure_mode=True), laplace_noise(10, 1.0, secure_mode=True))
    with pytest.raises(ValueError, match="os.urandom"):
        laplace_noise(3, 1.0, secure_mode=True, generator=torch.Generator())


def test_optional_epsilon_maps_none_and_inf_to_non_private():
    import math

    from dp_proto.privacy.calibration import optional_epsilon

    assert optional_epsilon(None) is None and optional_epsilon(math.inf) is None
    assert optional_epsilon(0.5) == 0.5
    for bad in (0.0, -1.0, -math.inf, math.nan, True, "1"):
        with pytest.raises(ValueError, match="epsilon"):
            optional_epsilon(bad)
