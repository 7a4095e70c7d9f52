"""Noise samplers: seeded (reproducible) or secure (operating-system entropy).

Every sampler takes ``generator`` (a ``torch.Generator``) or ``secure_mode=True`` (bits from
``os.urandom``; the generator must then be None). ``generator=None`` draws from a
fresh generator whose whole state comes from ``os.urandom`` (``fresh_generator``),
never from torch's global generator, which seeding a run makes predictable. Samples are
drawn in float64 and cast to the requested dtype.

Tails
-----
The discrete samplers (``geometric_noise``, ``discrete_laplace_noise``,
``discrete_gaussian_noise``) have unbounded tails for every scale they accept
(``0 < scale <= 2^50``): a geometric variable is assembled from an inverse CDF over its
first values and a fresh start beyond them (memorylessness), and every Bernoulli
``exp(-g)`` coin, however small its probability, is a product of coins of probability at
least ``exp(-8)``. Every integer can come out, with the probability the pmf gives it
(up to the rounding below), so a discrete Laplace release is ``epsilon``-DP at every
epsilon; a sampler of the form ``floor(log(u) / log(p))`` on 53-bit uniforms stops near
``37 scale`` (it returns only 0 below ``scale = 1/37``), which leaves a delta of about
``1e-16`` and, for a shift larger than that bound, an infinite privacy loss. The
outputs are int64: at ``scale = 2^50`` a value beyond ``2^62`` has probability
``exp(-4096)``.

Gaussian noise is drawn by Box-Muller in float64 with an exponential radius
``r^2 / 2 ~ Exp(1)`` whose tail is unbounded (``-log u`` below 8, a fresh start beyond:
``_exponential``), so every value is attainable; the logarithm of a single 53-bit
uniform would stop at ``sqrt(2 ln 2^54) ~ 8.65`` standard deviations. torch's float32
``randn`` stops near 5.77 (24-bit uniforms): the outputs of a neighbouring data set can
then fall outside the support, and the delta of a Gaussian release is understated
(about 1e-6 at epsilon 1). Never draw privacy noise in float32.

Floating-point caveat
---------------------
Continuous noise is sampled on a computer from a finite set of doubles. Mironov
(CCS 2012) showed that the textbook Laplace sampler ``-b sign(u) log(1 - 2|u|)``
leaves gaps in the set of reachable outputs that depend on the exact input, so an
adversary who sees the full-precision output may learn the input. Two defences here:

* ``discrete_laplace_noise`` samples integers (a two-sided geometric
  distribution). A mechanism that rounds its value to a public grid and adds
  ``grid * discrete_laplace`` (see ``laplace_mechanism(..., grid=...)``) has
  outputs on the grid only, so there are no input-dependent gaps.
* ``discrete_gaussian_noise`` samples the discrete Gaussian by rejection from the
  discrete Laplace (Canonne, Kamath & Steinke 2020, Alg. 3);
  ``gaussian_mechanism(..., grid=...)`` adds ``grid`` times it to the value rounded to
  the grid (the default).
* Secure mode draws 53-bit uniform variates from ``os.urandom`` and never from a
  seedable PRNG, so noise cannot be reproduced from a leaked seed.

What remains inexact in the discrete samplers is double rounding: each uniform
decides, by a comparison ``u < pr`` or an inverse CDF with float64 logarithms and
exponentials, between outcomes of probability at least ``exp(-2) / 512`` (about
``2.6e-4``), so the 53-bit lattice of the uniforms and the rounding of the boundaries
leave every realised probability within a relative error of about ``1e-12`` of the exact
one (the discrete Gaussian's acceptance probability ``exp(-g)`` also carries the
rounding of ``g``: about ``1e-16 g`` relative). No value has probability zero, so the
privacy loss of a discrete release exceeds its epsilon by at most a few times ``1e-12``.

Exact samplers with rational arithmetic exist (OpenDP's ``make_laplace`` and
``make_gaussian`` on integers); they cannot be seeded (no reproducible tests), draw on
the CPU only and would add a dependency. Their speed and fit against these samplers:
docs/privacy-core.md ("Reproduced results").

Use the seeded path for experiments and tests; use ``secure_mode=True`` (and a grid
for Laplace releases) when releasing to untrusted parties.
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch
from torch import Tensor

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
    ``k = 0`` moved to ``2^-54``. Either way the smallest value is ``2^-54``; the samplers
    built on it reach beyond that bound by drawing again (see Tails above)."""
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
    uniforms gives two independent normals (``r cos t``, ``r sin t``); ``r^2 / 2`` is an
    ``Exp(1)`` variate with an unbounded tail (a rare fresh draw for values beyond 8). The
    radius, which carries the tails, is computed in float64; the angle's cosine and sine
    in the output dtype when that is narrower (the angle only rotates, it cannot cut a
    tail)."""
    if not std >= 0:
        raise ValueError(f"Gaussian std must be >= 0, got {std!r}")
    shape = _shape(shape)
    n = math.prod(shape)
    work = torch.float64 if dtype == torch.float64 else torch.float32
    u = uniform_open((2, (n + 1) // 2), secure_mode=secure_mode, generator=generator, device=device)
    radius = _exponential(u[0], _uniform_source(generator, secure_mode, device))
    radius = radius.mul_(2.0).sqrt_().mul_(std).to(work)  # sqrt(2 E) std
    angle = u[1].mul_(2.0 * math.pi).to(work)
    z = torch.empty((2, angle.shape[0]), dtype=work, device=angle.device)  # (r cos t, r sin t), no concatenation
    torch.cos(angle, out=z[0])
    torch.sin(angle, out=z[1])
    return z.mul_(radius).view(-1)[:n].reshape(shape).to(dtype)


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
    ``1 - exp(-1/scale)`` (``geometric_noise``: unbounded tails). Adding it to an
    integer-valued query of sensitivity ``s`` gives ``(s / scale)``-DP (Canonne, Kamath &
    Steinke 2020). ``0 < scale <= 2^50`` (larger scales would overflow int64).
    """
    _check_scale(scale, "discrete Laplace scale")
    geometric = geometric_noise((2, *_shape(shape)), scale, generator=generator, secure_mode=secure_mode, device=device)
    return geometric[0] - geometric[1]


def geometric_noise(
    shape,
    scale: float,
    *,
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
    device: torch.device | str | None = None,
) -> Tensor:
    """I.i.d. geometric integers ``P(G = k) = (1 - p) p^k``, ``k >= 0``, ``p = exp(-1/scale)``,
    int64, with unbounded tails; ``0 < scale <= 2^50``.

    ``G = H 2^b + R`` with ``H`` and ``R`` independent (the pmf factorises over the
    binary digits of ``G``), ``b >= 0`` chosen per ``scale`` to use the fewest uniforms
    (``b = 0``, no ``R``, below ``scale`` about 950):

    * ``H``, geometric with ``P(H >= h) = exp(-h 2^b / scale)``, has no upper limit
      (``_count``): the inverse CDF ``floor(-log(u) scale / 2^b)`` over its first values,
      as deep as every outcome keeps a probability of at least ``exp(-2) / 512``, and,
      beyond that depth, a fresh start (memorylessness); below ``scale`` about 0.12,
      where even ``P(H >= 1)`` is smaller, ``H`` counts exact-tailed
      ``Bernoulli(exp(-1 / scale))`` coins (``_bernoulli_exp``);
    * ``R``, the ``b`` low binary digits, comes in independent groups of at most 9
      digits, each drawn from one uniform by the inverse CDF of its truncated geometric
      law (``_digits``).

    Floating point: every uniform decides between outcomes of probability at least
    ``exp(-2) / 512`` (about ``2.6e-4``), so the 53-bit lattice of the uniforms and double
    rounding in the logarithms leave each realised probability within a relative error
    of about ``1e-12`` of the exact one, at every distance from zero: no value has
    probability zero and none is cut off.
    """
    _check_scale(scale, "geometric scale")
    shape = _shape(shape)
    if generator is None and not secure_mode:
        generator = fresh_generator(device)  # one fresh generator for all of this call's draws
    draw = _uniform_source(generator, secure_mode, device)
    n = math.prod(shape)
    low, depth = _plan(scale)
    out = _count(float(2**low) / scale, depth, n, draw) << low
    at = 0
    for width in _groups(low):
        out += _digits(draw(n), at, width, scale) << at
        at += width
    return out.reshape(shape)


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
    with probability ``exp(-g)``, ``g = (|Y| - sigma^2 / t)^2 / (2 sigma^2)``; about 1.3
    to 1.6 candidates per kept value. The candidates have unbounded tails
    (``geometric_noise``) and the acceptance is an exact-tailed ``Bernoulli(exp(-g))``
    (``_bernoulli_exp``), so no value far out is lost. Floating point: relative errors of
    about ``1e-12`` in the candidates' and the coins' probabilities (as in
    ``geometric_noise``), plus the rounding of ``g`` (about ``1e-16 g`` relative in the
    acceptance probability). ``0 < sigma < 2^50``. Vectorised: candidates are drawn in
    batches on ``device`` until every slot is filled.
    """
    if not 0 < sigma < _MAX_SCALE:
        raise ValueError(f"discrete Gaussian sigma must be > 0 and below 2^50 (int64 outputs), got {sigma!r}")
    shape = _shape(shape)
    n = math.prod(shape)
    t = math.floor(sigma) + 1
    if generator is None and not secure_mode:
        generator = fresh_generator(device)  # one fresh generator for all of this call's draws
    draw = _uniform_source(generator, secure_mode, device)
    centre, two_var = sigma * sigma / t, 2.0 * sigma * sigma
    chunks: list[Tensor] = []
    filled = 0
    while filled < n or not chunks:
        batch = int(1.7 * (n - filled)) + 16
        y = discrete_laplace_noise(batch, t, generator=generator, secure_mode=secure_mode, device=device)
        accept = _bernoulli_exp((y.abs().to(torch.float64) - centre) ** 2 / two_var, batch, draw)
        kept = y[accept][: n - filled]
        chunks.append(kept)  # on the draws' device (the generator's when device is None)
        filled += kept.numel()
    return torch.cat(chunks).reshape(shape)


# -- exact-tailed building blocks ---------------------------------------------------------------
# Every uniform below decides between outcomes of probability at least _MIN_OUTCOME: the
# 53-bit lattice of the uniforms (2^-53 per boundary) and the rounding of the boundaries
# then cost each probability a relative error of about 1e-12 at most.
_GROUP_BITS = 9
_MIN_OUTCOME = math.exp(-2.0) / 2**_GROUP_BITS  # ~2.6e-4
_CHUNK = 8.0  # exp(-8) ~ 3.4e-4 >= _MIN_OUTCOME; a power of two: gamma - 8 floor(gamma / 8) is exact
_EXP_MINUS_CHUNK = math.exp(-_CHUNK)
_MAX_SCALE = float(2**50)


def _check_scale(scale: float, what: str) -> None:
    if not 0 < scale <= _MAX_SCALE:
        raise ValueError(f"{what} must be > 0 and at most 2^50 (int64 outputs), got {scale!r}")


def _uniform_source(generator: torch.Generator | None, secure_mode: bool, device):
    """``draw(k)``: ``k`` uniforms from ``uniform_open`` (looked up at each call, so a
    test may replace it)."""

    def draw(k: int) -> Tensor:
        return uniform_open(k, generator=generator, secure_mode=secure_mode, device=device)

    return draw


def _exponential(u: Tensor, draw) -> Tensor:
    """``Exp(1)`` variates ``(k,)`` with unbounded tails from uniforms ``u (k,)``:
    ``-log u`` where ``u > exp(-8)`` (values below 8, probability ratios exact to about
    ``2^-53 e^8 ~ 3e-13``), and ``8 + Exp(1)`` from fresh uniforms (``draw``) for the
    rest, by memorylessness (``P(E > 8) = exp(-8)``, and ``E - 8`` given ``E > 8`` is
    ``Exp(1)``). The float64 logarithm of one 53-bit uniform alone stops at ``37.4``."""
    out = torch.log(u).neg_()
    tail = (u <= _EXP_MINUS_CHUNK).nonzero().squeeze(1)
    if tail.numel():
        out[tail] = _CHUNK
    while tail.numel():
        fresh = draw(tail.numel()).to(out.device)
        again = fresh <= _EXP_MINUS_CHUNK
        out[tail[~again]] -= torch.log(fresh[~again])
        out[tail[again]] += _CHUNK
        tail = tail[again]
    return out


def _depth(gamma: float) -> int:
    """The largest ``T`` such that ``min(H, T)``, ``P(H >= h) = exp(-gamma h)``, has only
    outcomes of probability at least ``_MIN_OUTCOME``: ``exp(-gamma k) (1 - exp(-gamma))``
    for ``k < T`` and ``exp(-gamma T)``. 0 when even ``T = 1`` has a smaller one."""
    step = -math.expm1(-gamma)
    if step < _MIN_OUTCOME or gamma > -math.log(_MIN_OUTCOME):
        return 0
    return math.floor(min(1.0 + math.log(step / _MIN_OUTCOME) / gamma, -math.log(_MIN_OUTCOME) / gamma))


def _groups(bits: int) -> list[int]:
    """``bits`` split into as few groups of at most ``_GROUP_BITS`` as possible, of
    nearly equal widths, lowest group first."""
    count = -(-bits // _GROUP_BITS)
    return [bits // count + (1 if j < bits % count else 0) for j in range(count)] if bits else []


def _plan(scale: float) -> tuple[int, int]:
    """``(b, T)`` for ``geometric_noise``: the low digits ``b`` drawn in groups and the
    depth ``T`` of ``H``'s inverse CDF (0: ``Bernoulli`` trials), for the least expected
    work per value (a uniform per group, one for ``H`` and about three per fresh start). ``b > 0`` only with ``2^b / scale <= 2``, so every group has
    outcomes of probability at least ``exp(-2) / 2^9``."""
    best: tuple[float, int, int] | None = None
    for low in range(0, 52):
        gamma = float(2**low) / scale
        if low > 0 and gamma > 2.0:
            break
        depth = _depth(gamma)
        if depth == 0 and gamma < 1.0:
            continue  # H's first outcomes too fine for one uniform: more digits in groups
        restart = math.exp(-gamma * depth) if depth else 0.0
        cost = 1.0 + 3.0 * restart / (1.0 - restart) + len(_groups(low))  # a fresh start: ~3 uniforms' time
        if best is None or cost < best[0] - 1e-9:
            best = (cost, low, depth)
    assert best is not None  # low = 0 qualifies unless 1/scale < 2.6e-4; then low <= 50 does
    return best[1], best[2]


def _bernoulli_exp(gamma: float | Tensor, n: int, draw) -> Tensor:
    """``n`` independent booleans, each True with probability ``exp(-gamma)`` (``gamma >= 0``,
    a float or a float64 tensor of ``n`` values; infinity gives False).

    Exact-tailed for every ``gamma``: with ``j = floor(gamma / 8)``,
    ``exp(-gamma) = exp(-8)^j exp(-(gamma - 8 j))``, drawn as one
    ``Bernoulli(exp(-(gamma - 8 j)))`` and ``j`` ``Bernoulli(exp(-8))`` trials, the
    trials run on the survivors only and stop when none is left (a huge ``gamma`` costs
    a few rounds). Each is ``u < pr`` with ``pr >= exp(-8)``: relative error about
    ``1e-12`` (Canonne, Kamath & Steinke 2020, Alg. 1, with uniforms in place of exact
    rational coins)."""
    if isinstance(gamma, Tensor):
        trials = torch.floor(gamma / _CHUNK)
        alive = draw(n) < torch.exp(trials * _CHUNK - gamma)  # infinity: nan, never True
        idx = (alive & (trials > 0)).nonzero().squeeze(1)
        left = trials[idx]
        while idx.numel():
            ok = draw(idx.numel()) < _EXP_MINUS_CHUNK
            alive[idx[~ok]] = False
            idx, left = idx[ok], left[ok] - 1.0
            more = left > 0
            idx, left = idx[more], left[more]
        return alive
    if math.isinf(gamma):
        return draw(n) < 0.0  # False everywhere, on the draws' device
    whole = math.floor(gamma / _CHUNK)
    alive = draw(n) < math.exp(whole * _CHUNK - gamma)
    if whole == 0:
        return alive
    idx = alive.nonzero().squeeze(1)
    for _ in range(whole):
        if not idx.numel():
            break
        idx = idx[draw(idx.numel()) < _EXP_MINUS_CHUNK]
    alive.zero_()
    alive[idx] = True
    return alive


def _count(gamma: float, depth: int, n: int, draw) -> Tensor:
    """``n`` independent int64 counts with ``P(H >= h) = exp(-gamma h)``, no upper limit.

    ``depth`` ``T >= 1`` (``_depth``): ``min(H, T) = min(floor(-log(u) / gamma), T)`` from
    one uniform, and when it reaches ``T`` (probability ``exp(-gamma T)``) the count goes
    on afresh (memorylessness). ``T = 0``: ``H`` counts the successes of
    ``Bernoulli(exp(-gamma))`` (``_bernoulli_exp``) before the first failure, on the slots
    still counting."""
    if depth == 0:
        ok = _bernoulli_exp(gamma, n, draw)
        count = ok.to(torch.int64)
        idx = ok.nonzero().squeeze(1)
        while idx.numel():
            idx = idx[_bernoulli_exp(gamma, idx.numel(), draw)]
            count[idx] += 1
        return count
    step = _truncated_count(draw(n), gamma, depth)
    count = step.to(torch.int64)
    idx = (step == depth).nonzero().squeeze(1)
    while idx.numel():
        step = _truncated_count(draw(idx.numel()), gamma, depth)
        count[idx] += step.to(torch.int64)
        idx = idx[step == depth]
    return count


def _truncated_count(u: Tensor, gamma: float, depth: int) -> Tensor:
    """``min(floor(-log(u) / gamma), depth)`` (float64): ``k < depth`` with probability
    ``exp(-gamma k) (1 - exp(-gamma))``, ``depth`` with probability ``exp(-gamma depth)``."""
    return torch.floor(torch.log(u) / -gamma).clamp_(max=depth)


def _digits(v: Tensor, low: int, width: int, scale: float) -> Tensor:
    """The group of ``width`` binary digits of ``R`` from bit ``low`` (int64, in
    ``[0, 2^width)``) from uniforms ``v``: ``P(D = d)`` proportional to ``r^d``,
    ``r = exp(-2^low / scale)``, by the inverse CDF
    ``floor(log(1 - v (1 - r^(2^width))) / log r)``."""
    log_ratio = -float(2**low) / scale
    mass = -math.expm1(-float(2 ** (low + width)) / scale)  # 1 - r^(2^width), in (0, 1 - exp(-2)]
    return torch.floor(torch.log1p(v * -mass) / log_ratio).clamp_(0, 2**width - 1).to(torch.int64)
