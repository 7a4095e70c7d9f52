"""Noise calibration: the scale a mechanism needs for a target (epsilon, delta).

All functions validate their arguments and raise ``ValueError`` naming the bad one.
"""

from __future__ import annotations

import math
import numbers

from scipy.special import log_ndtr

from dp_proto._validation import as_real, check_positive

__all__ = [
    "check_epsilon",
    "check_sampling_rate",
    "optional_epsilon",
    "check_delta",
    "check_sensitivity",
    "laplace_scale",
    "classic_gaussian_sigma",
    "analytic_gaussian_sigma",
    "analytic_gaussian_delta",
]


def check_epsilon(epsilon: float, name: str = "epsilon") -> float:
    """``epsilon`` must be a finite number > 0."""
    return check_positive(name, epsilon)


def check_sampling_rate(sampling_rate: float, name: str = "sampling_rate") -> float:
    """A Poisson sampling rate ``q`` must lie in ``(0, 1]``."""
    value = as_real(name, sampling_rate)
    if not 0 < value <= 1:
        raise ValueError(f"{name} must lie in (0, 1], got {sampling_rate!r}")
    return value


def optional_epsilon(epsilon, name: str = "epsilon") -> float | None:
    """``None`` for a non-private setting (``None`` or ``+inf``), else the checked ``epsilon``."""
    if epsilon is None:
        return None
    if isinstance(epsilon, numbers.Real) and not isinstance(epsilon, bool) and epsilon == math.inf:
        return None
    return check_epsilon(epsilon, name)


def check_delta(delta: float, name: str = "delta", *, allow_zero: bool = True) -> float:
    """``delta`` must lie in ``[0, 1)`` (``(0, 1)`` with ``allow_zero=False``)."""
    value = as_real(name, delta)
    if not math.isfinite(value) or value < 0 or value >= 1 or (value == 0 and not allow_zero):
        interval = "[0, 1)" if allow_zero else "(0, 1)"
        raise ValueError(f"{name} must lie in {interval}, got {delta!r}")
    return value


def check_sensitivity(sensitivity: float, name: str = "sensitivity") -> float:
    """``sensitivity`` must be a finite number >= 0."""
    value = as_real(name, sensitivity)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {sensitivity!r}")
    return value


def laplace_scale(epsilon: float, l1_sensitivity: float) -> float:
    """``b = Delta_1 / epsilon`` (Dwork & Roth, Thm 3.6; Brinkrolf 2023, Def. 7)."""
    return check_sensitivity(l1_sensitivity, "l1_sensitivity") / check_epsilon(epsilon)


def classic_gaussian_sigma(epsilon: float, delta: float, l2_sensitivity: float) -> float:
    """``sigma = sqrt(2 ln(1.25/delta)) Delta_2 / epsilon`` (Dwork & Roth, Thm A.1).

    Only valid for ``epsilon < 1``; kept for reference and comparison (it is
    looser than ``analytic_gaussian_sigma`` everywhere).
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta, allow_zero=False)
    return math.sqrt(2 * math.log(1.25 / delta)) * check_sensitivity(l2_sensitivity) / epsilon


def _log_sub_exp(a: float, b: float) -> float:
    """``log(exp(a) - exp(b))`` for ``a >= b``."""
    if b == -math.inf:
        return a
    return a + math.log1p(-math.exp(b - a)) if a > b else -math.inf


def analytic_gaussian_delta(sigma: float, epsilon: float, l2_sensitivity: float = 1.0) -> float:
    """The exact ``delta`` of the Gaussian mechanism (Balle & Wang 2018, Thm 8):

        delta = Phi(D/(2s) - e s/D) - exp(e) Phi(-D/(2s) - e s/D),

    with ``D`` the l2 sensitivity and ``s = sigma``. Computed in log space.
    """
    if sigma <= 0:
        raise ValueError(f"sigma must be > 0, got {sigma!r}")
    sens = check_sensitivity(l2_sensitivity, "l2_sensitivity")
    if sens == 0:
        return 0.0
    a = sens / (2 * sigma) - epsilon * sigma / sens
    b = -sens / (2 * sigma) - epsilon * sigma / sens
    log_delta = _log_sub_exp(float(log_ndtr(a)), epsilon + float(log_ndtr(b)))
    return max(math.exp(log_delta), 0.0)


def analytic_gaussian_sigma(epsilon: float, delta: float, l2_sensitivity: float, *, tol: float = 1e-12) -> float:
    """Smallest ``sigma`` for which the Gaussian mechanism is (epsilon, delta)-DP
    (the analytic Gaussian mechanism, Balle & Wang 2018, Alg. 1; Brinkrolf 2023, Alg. 3.1,
    with its misprinted ``Delta^alpha`` corrected to ``sigma = alpha * Delta / sqrt(2 epsilon)``).

    The exact condition ``analytic_gaussian_delta`` is monotone in ``sigma``;
    we bracket it by doubling and bisect in log-sigma, which gives the same value as
    Balle & Wang's search over ``v``/``u`` and is valid for every ``epsilon > 0``.
    Check value: epsilon = 1, delta = 1e-5, sensitivity 1 gives sigma = 3.7308.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta, allow_zero=False)
    sens = check_sensitivity(l2_sensitivity, "l2_sensitivity")
    if sens == 0:
        return 0.0
    lo, hi = 1e-3 * sens, sens
    while analytic_gaussian_delta(hi, epsilon, sens) > delta:
        lo, hi = hi, 2 * hi
    while analytic_gaussian_delta(lo, epsilon, sens) <= delta and lo > 1e-12 * sens:
        lo /= 2
    while hi - lo > tol * hi:
        mid = math.sqrt(lo * hi)
        if analytic_gaussian_delta(mid, epsilon, sens) > delta:
            lo = mid
        else:
            hi = mid
    return hi
