"""Centre of attention: smooth-sensitivity aggregation of per-bin models (NRS07).

The DP-LVQ "COA" scheme (Brinkrolf, Göpfert & Hammer 2019; Brinkrolf 2023, Sec. 3.4 C),
in the original form of Nissim, Raskhodnikova and Smith (2007, Sec. 4): the formula printed
for the DP-LVQ scheme drops NRS07's factor 2, its ``s`` step, the ``e^{-beta k}`` decay and
the ``1 / alpha`` scaling, which are restored here:

* ``m`` bin models ``z_1..z_m``, each the concatenation of a bin's ``W`` prototypes
  clipped into ``[low, high]^d`` (so ``D = W d`` dimensions and domain diameter
  ``Lambda = (high - low) sqrt(D)``); each record influences at most ``s`` of them;
* ``r_i(t)``: distance from ``z_i`` to its ``t``-th nearest point of ``Z`` (``z_i``
  itself is the first), ``rho(t) = min_i r_i(t)`` and ``rho(t) = Lambda`` for ``t > m``;
* ``t0 = floor((m + s) / 2) + 1``; the centre of attention ``g(Z)`` is the ``z_i``
  with the smallest ``t0``-radius;
* ``S(Z) = 2 max_{k >= 0} rho(t0 + (k + 1) s) e^{-beta k}``: a ``beta``-smooth upper
  bound on the local sensitivity of ``g``;
* release ``g(Z) + (S(Z) / alpha) N(0, I_D)`` with the Gaussian's admissibility
  parameters ``alpha = epsilon / (5 sqrt(2 ln(2 / delta)))`` and
  ``beta = epsilon / (4 (D + ln(2 / delta)))``: ``(epsilon, delta)``-DP.

Design choice (the overlapping bins of Brinkrolf, Göpfert & Hammer (2019) and Brinkrolf
(2023), re-sampled until no record lies in more than ``sqrt(m)`` of them, are infeasible
at the sizes used): disjoint bins from i.i.d. bin labels, so ``s = 1``. The noise std
``S(Z) / alpha`` is *not* returned: it is a noise-free function of the bins' models (two
neighbouring data sets can give different values with certainty), so releasing it would
void the guarantee.
Float safety: the smooth-sensitivity argument needs the continuous Gaussian (its noise
is scaled by the data-dependent ``S(Z) / alpha``), so the noise cannot be discrete. The
noisy centre is instead rounded to a public grid of step ``Lambda / (2^20 sqrt(D))``
(post-processing, so the guarantee is unchanged): the output carries none of the
low-order bits by which Mironov (2012) reads the input from a floating-point sample.

Because ``beta`` shrinks with the dimension ``D``, ``e^{-beta k}`` barely decays over
the ``m / 2`` steps to ``rho = Lambda``, and the noise is of the order of the domain
diameter unless ``epsilon`` is large: the finding of Brinkrolf, Göpfert & Hammer (2019) and Brinkrolf (2023)
that COA gives no useful model is expected.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from dp_proto.lvq.private.saa import (
    project_to_domain,
    saa_sensitivity,
)
from dp_proto.privacy.calibration import check_delta, check_epsilon
from dp_proto.privacy.events import ApproxEvent
from dp_proto.privacy.ledger import PrivacyLedger
from dp_proto.privacy.mechanisms import LEDGER_REQUIRED, noise_rng, require_ledger
from dp_proto.privacy.noise import gaussian_noise
from dp_proto.privacy.testing import intercept

__all__ = [
    "gaussian_admissibility",
    "coa_grid",
    "t_radii",
    "centre_of_attention",
    "smooth_sensitivity",
    "COAResult",
    "centre_of_attention_mechanism",
    "coa_bin_models",
]


def gaussian_admissibility(epsilon: float, delta: float, dim: int) -> tuple[float, float]:
    """``(alpha, beta)`` for which ``N(0, I_dim)`` is admissible noise (NRS07):
    ``alpha = epsilon / (5 sqrt(2 ln(2/delta)))``, ``beta = epsilon / (4 (dim + ln(2/delta)))``."""
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta, allow_zero=False)
    log_term = math.log(2.0 / delta)
    return epsilon / (5.0 * math.sqrt(2.0 * log_term)), epsilon / (4.0 * (dim + log_term))


def t_radii(points: Tensor) -> Tensor:
    """``R[i, t-1]`` = distance from ``points[i]`` to its ``t``-th nearest point (itself
    first), shape ``(m, m)``."""
    return torch.cdist(points, points).sort(dim=1).values


def centre_of_attention(points: Tensor, t0: int, *, radii: Tensor | None = None) -> int:
    """Index of the point with the smallest ``t0``-radius (ties: the lowest index);
    ``radii``: ``t_radii`` of ``points`` if already computed."""
    if not 1 <= t0 <= points.shape[0]:
        raise ValueError(f"t0 must lie in 1..{points.shape[0]}, got {t0}")
    radii = t_radii(points) if radii is None else radii
    return int(radii[:, t0 - 1].argmin())


def smooth_sensitivity(
    points: Tensor, t0: int, beta: float, diameter: float, multiplicity: int = 1, *, radii: Tensor | None = None
) -> float:
    """``S(Z) = 2 max_{k >= 0} rho(t0 + (k+1) s) e^{-beta k}``, ``rho(t) = min_i r_i(t)``
    for ``t <= m`` and the domain ``diameter`` beyond; ``radii`` as in
    ``centre_of_attention``."""
    m = points.shape[0]
    rho = (t_radii(points) if radii is None else radii).min(0).values  # rho[t - 1]
    best, k = 0.0, 0
    while True:
        t = t0 + (k + 1) * multiplicity
        value = (float(rho[t - 1]) if t <= m else diameter) * math.exp(-beta * k)
        best = max(best, value)
        if t > m:  # rho = diameter from here on and e^{-beta k} only decreases
            return 2.0 * best
        k += 1


def coa_grid(diameter: float, dim: int) -> float:
    """The public grid ``diameter / (2^20 sqrt(dim))`` a centre-of-attention release is
    rounded to: far finer than its noise (of the order of the diameter), far coarser than
    float64 resolution."""
    return diameter / (2.0**20 * math.sqrt(max(dim, 1)))


class COAResult(NamedTuple):
    """The release ``(D,)`` and ``t0`` (public: a function of ``m`` and ``s``). The noise
    std ``S(Z) / alpha`` is data-dependent and deliberately absent."""

    value: Tensor
    t0: int


def centre_of_attention_mechanism(
    points: Tensor,
    epsilon: float,
    delta: float,
    *,
    diameter: float,
    multiplicity: int = 1,
    ledger: PrivacyLedger | None = LEDGER_REQUIRED,
    name: str = "coa",
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
) -> COAResult:
    """``(epsilon, delta)``-DP release of the centre of attention of ``points (m, D)``
    (each record in at most ``multiplicity`` of them; all in a domain of l2 ``diameter``).

    The guarantee comes from smooth sensitivity, not from a Gaussian of fixed
    sensitivity, so the ledger records an ``approx`` event: an ``(epsilon, delta)``
    release composed by its worst-case privacy loss distribution. The release is rounded
    to multiples of ``coa_grid`` (public; see the module docstring).
    """
    ledger = require_ledger(ledger, "centre_of_attention_mechanism")
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta, allow_zero=False)
    if points.dim() != 2 or points.shape[0] < 1:
        raise ValueError(f"expected points of shape (m, D) with m >= 1, got {tuple(points.shape)}")
    m, dim = points.shape
    t0 = min((m + multiplicity) // 2 + 1, m)
    alpha, beta = gaussian_admissibility(epsilon, delta, dim)
    pts = points.to(torch.float64)
    radii = t_radii(pts)  # (m, m), shared by the centre and the smooth bound
    if float(radii[:, -1].max()) > diameter * (1 + 1e-9):
        raise ValueError(
            f"points lie farther apart ({float(radii[:, -1].max()):.4g}) than the declared "
            f"domain diameter {diameter:.4g}: clip them into the domain first"
        )
    if ledger is not None:
        ledger.spend(ApproxEvent(epsilon, delta, name=name))
    generator = noise_rng(ledger, generator, secure_mode, pts.device, name)
    centre = pts[centre_of_attention(pts, t0, radii=radii)]
    std = smooth_sensitivity(pts, t0, beta, diameter, multiplicity, radii=radii) / alpha

    step = coa_grid(diameter, dim)

    def draw() -> Tensor:  # smooth sensitivity: no fixed sensitivity for the harness to check
        noisy = centre + gaussian_noise(
            centre.shape, std, generator=generator, secure_mode=secure_mode, device=pts.device
        )
        return torch.round(noisy / step) * step

    return COAResult(intercept(name, centre, None, None, draw), t0)


def coa_bin_models(
    bin_models: Tensor,
    epsilon: float,
    delta: float,
    *,
    low: float = -1.0,
    high: float = 1.0,
    radius: float | None = None,
    project_release: bool = True,
    ledger: PrivacyLedger | None = LEDGER_REQUIRED,
    name: str = "coa",
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
) -> tuple[Tensor, COAResult]:
    """The private half of the scheme: project the bins' models ``(m, W, d)`` into the
    domain (the box ``[low, high]^d``, optionally intersected with the ball of
    ``radius``; diameter of the concatenated model
    ``saa_sensitivity``) and release their centre of
    attention. Returns the prototypes ``(W, d)`` (projected into the domain with
    ``project_release``, post-processing) and the raw result."""
    ledger = require_ledger(ledger, "coa_bin_models")
    if bin_models.dim() != 3 or bin_models.shape[0] < 1:
        raise ValueError(f"expected bin models of shape (m, W, d) with m >= 1, got {tuple(bin_models.shape)}")
    m, num_prototypes, d = bin_models.shape
    projected = project_to_domain(bin_models.to(torch.float64), low, high, radius)
    diameter = saa_sensitivity(num_prototypes, d, low, high, radius)
    result = centre_of_attention_mechanism(
        projected.reshape(m, -1),
        epsilon,
        delta,
        diameter=diameter,
        ledger=ledger,
        name=name,
        generator=generator,
        secure_mode=secure_mode,
    )
    prototypes = result.value.reshape(num_prototypes, d)
    if project_release:
        prototypes = project_to_domain(prototypes, low, high, radius)
    return prototypes, result
