"""Noise samplers: seeded (reproducible) or secure (operating-system entropy).

Every sampler takes ``generator`` (a ``torch.Generator``) or ``secure_mode=True`` (bits from
``os.urandom``; the generator must then be None). ``generator=None`` draws from a
fresh generator seeded with 64 bits of operating-system entropy
(``fresh_generator``), never from torch's global
generator, which seeding a run makes predictable. Samples are drawn in float64 and cast
to the requested dtype.

Tails
-----
Gaussian noise is drawn by Box-Muller from 53-bit uniforms in float64, so its largest
attainable value is ``sqrt(2 ln 2^54) ~ 8.65`` standard deviations (tail mass beyond:
below 1e-17). torch's float32 ``randn`` stops near 5.77 (24-bit uniforms): the outputs
of a neighbouring data set can then fall outside the support, and the delta of a
Gaussian release is understated (about 1e-6 at epsilon 1). Never draw privacy noise
in float32.

Floating-point caveat
---------------------
Continuous noise is sampled on a computer from a finite set of doubles. Mironov
(CCS 2012) showed that the textbook Laplace sampler ``-b sign(u) log(1 - 2|u|)``
leaves gaps in the set of reachable outputs that depend on the exact input, so an
adversary who sees the full-precision output may learn the input. Two defences here:

* ``discrete_laplace_noise`` samples integers (a two-sided geometric
  distribution). A mechanism that rounds its value to a public grid and adds
  ``grid * discrete_laplace`` (see ``laplace_mechanism(..., grid=...)``) has
  outputs on the grid only, so there are no input-dependent gaps. The sampler
  still uses floating-point logarithms to draw geometric variables, so its
  probabilities are exact only up to double rounding (about 1e-16 relative),
  which is far below any epsilon used in practice.
* ``discrete_gaussian_noise`` samples the discrete Gaussian by rejection from the
  discrete Laplace (Canonne, Kamath & Steinke 2020, Alg. 3);
  ``gaussian_mechanism(..., grid=...)`` adds ``grid`` times it to the value rounded to
  the grid (the default), with the same float64 caveat for its acceptance test.
* Secure mode draws 53-bit uniform variates from ``os.urandom`` and never from a
  seedable PRNG, so noise cannot be reproduced from a leaked seed.

Why not OpenDP's exact sampler: ``benchmarks/privacy/noise_samplers.py`` compares this
discrete Laplace sampler with OpenDP's ``make_laplace`` on integers (exact rational
arithmetic in Rust). Both fit the exact pmf (chi-square p 0.3-0.9 at 10^6 draws), and
OpenDP takes 120-200 times as long per draw (7-14 us against 24-96 ns on the 2-core
machine); it also cannot be seeded (no reproducible tests), draws only on the CPU and
would add a dependency. The remaining inexactness here, double rounding in one logarithm
(about 1e-16 relative in each probability), is far below any delta in use, so this
sampler is the default.

Use the seeded path for experiments and tests; use ``secure_mode=True`` (and a grid
for Laplace releases) when releasing to untrusted parties.
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch
from torch import Tensor

from dp_proto._deprecation import renamed_keyword
from dp_proto.privacy.randomness import fresh_generator

__all__ = [
    "uniform_open",
    "laplace_noise",
    "gaussian_noise",
    "geometric_noise",
    "discrete_laplace_noise",
    "discrete_gaussian_noise",
]

_TWO_POW_53 = float(2**53)


def _shape(shape) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)


@renamed_keyword("secure", "secure_mode")
def uniform_open(
    shape,
    *,
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
    device: torch.device | str | None = None,
) -> Tensor:
    """Uniform variates on the open interval ``(0, 1)``, float64 on a 53-bit lattice.

    ``os.urandom`` (``secure_mode``): ``(k + 0.5) / 2^53``, ``k`` a uniform 53-bit integer. A
    generator: torch's float64 ``rand`` (``k / 2^53``, the same 53 random bits) with
    ``k = 0`` moved to ``2^-54``. Either way the smallest value is ``2^-54``, which bounds
    the Gaussian sampler's largest output at ``sqrt(2 ln 2^54) ~ 8.65`` sigma."""
    shape = _shape(shape)
    n = math.prod(shape)
    if secure_mode:
        if generator is not None:
            raise ValueError("secure_mode=True draws from os.urandom; do not pass a generator as well")
        words = np.frombuffer(os.urandom(8 * n), dtype=np.uint64) >> np.uint64(11)
        k = torch.from_numpy(words.astype(np.float64)).reshape(shape)
        return ((k + 0.5) / _TWO_POW_53).to(device)
    if generator is None:
        generator = fresh_generator(device)
    u = torch.rand(shape, generator=generator, dtype=torch.float64, device=generator.device)
    return u.clamp_min_(0.5 / _TWO_POW_53).to(device)  # k = 0 -> 2^-54; every other k / 2^53 as drawn


@renamed_keyword("secure", "secure_mode")
def laplace_noise(
    shape,
    scale: float,
    *,
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    """I.i.d. ``Lap(0, scale)``: density ``exp(-|x|/scale) / (2 scale)``, drawn as the
    difference of two exponential variables ``scale (log u2 - log u1)``."""
    if not scale >= 0:
        raise ValueError(f"Laplace scale must be >= 0, got {scale!r}")
    u = uniform_open((2, *_shape(shape)), generator=generator, secure_mode=secure_mode, device=device)
    return (scale * (torch.log(u[1]) - torch.log(u[0]))).to(dtype)


@renamed_keyword("secure", "secure_mode")
def gaussian_noise(
    shape,
    std: float,
    *,
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    """I.i.d. ``N(0, std^2)`` by Box-Muller on 53-bit uniforms (see Tails above), from
    ``generator`` (fresh entropy for None) or ``os.urandom`` (``secure_mode``). Each pair of
    uniforms gives two independent normals (``r cos t``, ``r sin t``). The radius, which
    carries the tails, is computed in float64; the angle's cosine and sine in the output
    dtype when that is narrower (the angle only rotates, it cannot cut a tail)."""
    if not std >= 0:
        raise ValueError(f"Gaussian std must be >= 0, got {std!r}")
    shape = _shape(shape)
    n = math.prod(shape)
    work = torch.float64 if dtype == torch.float64 else torch.float32
    u = uniform_open((2, (n + 1) // 2), secure_mode=secure_mode, generator=generator, device=device)
    radius = torch.sqrt(-2.0 * torch.log(u[0])).mul_(std).to(work)
    angle = ((2.0 * math.pi) * u[1]).to(work)
    z = torch.cat([radius * torch.cos(angle), radius * torch.sin(angle)])[:n].reshape(shape)
    return z.to(dtype)


@renamed_keyword("secure", "secure_mode")
def discrete_laplace_noise(
    shape,
    scale: float,
    *,
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
    device: torch.device | str | None = None,
) -> Tensor:
    """I.i.d. discrete Laplace integers: ``P(k) proportional to exp(-|k| / scale)``, int64.

    Drawn as the difference of two geometric variables with success probability
    ``1 - exp(-1/scale)``. Adding it to an integer-valued query of sensitivity
    ``s`` gives ``(s / scale)``-DP (Canonne, Kamath & Steinke 2020).
    """
    if not scale > 0:
        raise ValueError(f"discrete Laplace scale must be > 0, got {scale!r}")
    geometric = geometric_noise((2, *_shape(shape)), scale, generator=generator, secure_mode=secure_mode, device=device)
    return geometric[0] - geometric[1]


@renamed_keyword("secure", "secure_mode")
def geometric_noise(
    shape,
    scale: float,
    *,
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
    device: torch.device | str | None = None,
) -> Tensor:
    """I.i.d. geometric integers ``P(G = k) = (1 - p) p^k``, ``k >= 0``, ``p = exp(-1/scale)``,
    int64: ``floor(log(u) / log(p))`` from 53-bit uniforms (double rounding in the
    logarithm only)."""
    if not scale > 0:
        raise ValueError(f"geometric scale must be > 0, got {scale!r}")
    u = uniform_open(shape, generator=generator, secure_mode=secure_mode, device=device)
    return torch.floor(torch.log(u) / (-1.0 / scale)).to(torch.int64)


@renamed_keyword("secure", "secure_mode")
def discrete_gaussian_noise(
    shape,
    sigma: float,
    *,
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
    device: torch.device | str | None = None,
) -> Tensor:
    """I.i.d. discrete Gaussian integers: ``P(k) proportional to exp(-k^2 / (2 sigma^2))``, int64.

    Rejection sampling from the discrete Laplace law (Canonne, Kamath & Steinke 2020,
    Alg. 3): with ``t = floor(sigma) + 1``, a discrete Laplace ``Y`` of scale ``t`` is kept
    with probability ``exp(-(|Y| - sigma^2 / t)^2 / (2 sigma^2))``; about 1.3 to 1.6
    candidates per kept value. As in ``discrete_laplace_noise``, the geometric draws
    and the acceptance test use float64 logarithms and exponentials, exact up to double
    rounding (about 1e-16 relative in each probability). Vectorised: candidates are drawn
    in batches on ``device`` until every slot is filled.
    """
    if not sigma > 0:
        raise ValueError(f"discrete Gaussian sigma must be > 0, got {sigma!r}")
    shape = _shape(shape)
    n = math.prod(shape)
    t = math.floor(sigma) + 1
    centre, two_var = sigma * sigma / t, 2.0 * sigma * sigma
    chunks: list[Tensor] = []
    filled = 0
    while filled < n or not chunks:
        batch = int(1.7 * (n - filled)) + 16
        y = discrete_laplace_noise(batch, t, generator=generator, secure_mode=secure_mode, device=device)
        u = uniform_open(batch, generator=generator, secure_mode=secure_mode, device=device)
        kept = y[u < torch.exp(-((y.abs().to(torch.float64) - centre) ** 2) / two_var)][: n - filled]
        chunks.append(kept)  # on the draws' device (the generator's when device is None)
        filled += kept.numel()
    return torch.cat(chunks).reshape(shape)
