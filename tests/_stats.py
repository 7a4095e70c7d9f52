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
