"""Statistical checks shared by the noise tests."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats


def discrete_laplace_pvalue(noise: np.ndarray, epsilon: float, kmax: int) -> float:
    """Chi-square goodness of fit of integer noise to the discrete Laplace pmf
    ``P(k) = (1 - p) / (1 + p) p^|k|``, ``p = exp(-epsilon)``: one cell per ``|k| <= kmax``
    and one per tail, ``P(k > kmax) = P(k < -kmax) = p^(kmax + 1) / (1 + p)``."""
    assert np.array_equal(noise, np.round(noise)), "discrete Laplace noise is integer"
    p = math.exp(-epsilon)
    ks = np.arange(-kmax, kmax + 1)
    tail = p ** (kmax + 1) / (1 + p)
    probs = np.concatenate([[tail], (1 - p) / (1 + p) * p ** np.abs(ks), [tail]])
    observed = np.concatenate([[np.sum(noise < -kmax)], [np.sum(noise == k) for k in ks], [np.sum(noise > kmax)]])
    return stats.chisquare(observed, probs * noise.size).pvalue


def pin_gaussian_uniforms(monkeypatch, *, restarts: int = 5) -> None:
    """Make every ``gaussian_noise`` draw its extreme: the Box-Muller uniforms (one 2-D
    draw) at ``2^-60`` for the radius and ``~0`` for the angle (``cos = 1``), and the
    radius's next ``restarts`` fresh draws past ``exp(-8)`` too, so each radius is
    ``sqrt(2 (8 (restarts + 1) + ln 2))`` (9.9 standard deviations at 5) and the sampler
    still ends (an exact-tailed sampler pinned forever never would)."""
    import torch

    import dp_proto.privacy.noise as noise

    real = noise.uniform_open
    left = {"restarts": 0}

    def pinned(shape, **kwargs):
        u = real(shape, **kwargs)
        if u.dim() == 2:  # the Box-Muller pair: radius row, angle row
            u[0], u[1] = 2.0**-60, 0.5 / 2.0**53
            left["restarts"] = restarts
        elif left["restarts"] > 0:
            left["restarts"] -= 1
            u.fill_(2.0**-60)
        else:
            u.fill_(0.5)
        return u.to(torch.float64)

    monkeypatch.setattr(noise, "uniform_open", pinned)
