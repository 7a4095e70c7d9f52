"""A public grid of cubes and its sparse noisy histogram (the ``starts="grid"`` cells).

Park (2022) groups equilibrium points into hypercubes of half-width ``r_max`` around
leaders taken from the training data (eq. 5.6), which makes the cells data-dependent.
Here the cubes are fixed in advance: a lattice of step ``h = 2 r_max`` anchored at 0,
cut to a public box. A record's cell is the lattice point nearest to the end of its
dynamics (clamped into the box), so the partition is a public function of the record
and the private centre, and the class counts per cube are one histogram.

The box has ``M = prod_j (hi_j - lo_j + 1)`` cubes, far too many to noise one by one in
nine or more dimensions. ``sparse_noisy_histogram`` releases exactly what this
would release -- every cube's class counts plus discrete Laplace noise of scale
``1/epsilon`` (``P(k)`` proportional to ``exp(-epsilon |k|)``, Canonne, Kamath and
Steinke 2020), keeping the cubes whose largest noisy count reaches an integer
threshold ``t >= 1`` -- while drawing noise only for the occupied cubes and simulating
the empty ones (Cormode, Procopiuc, Srivastava and Tran, "Differentially private
summaries for sparse data", ICDT 2012): the number of empty cubes that pass is
binomial, their positions are uniform among the empty cubes, and their noisy counts
follow the discrete Laplace law conditioned on passing. The output has the distribution
of the dense mechanism, so it is epsilon-DP (pure) by the same argument: one record
changes one count by one.

The noise is integer-valued on purpose: continuous floating-point Laplace noise leaves
input-dependent gaps in the set of reachable doubles (Mironov, "On significance of the
least significant bits for differential privacy", CCS 2012), and the released counts
are exactly the kind of full-precision output that attack reads. Counts plus integer
noise are integers (stored as float64), with no such gaps. With ``p = exp(-epsilon)``
the tail is ``P(DL >= t) = p^t / (1 + p)`` for ``t >= 1``, and a passing coordinate is
``t`` plus a geometric variable (the tail is memoryless).

Noise comes from fresh operating-system entropy unless the caller passes a generator
(reproducible; it warns, see ``dp_proto.privacy.randomness``). The whole release goes
through the hook ``intercept`` as one release. Its
pre-noise quantity, the dense ``(M, c)`` table, is never formed (the occupied cubes'
counts have no fixed shape), so it declares no sensitivity to the neighbour check; the
votes' sensitivity (one record changes one count of the dense table by one) is tested on
``cube_counts`` directly (``tests/svdd/test_privacy_soundness.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from dp_proto.privacy.calibration import check_epsilon
from dp_proto.privacy.events import PureEvent
from dp_proto.privacy.ledger import PrivacyLedger
from dp_proto.privacy.mechanisms import noise_rng
from dp_proto.privacy.noise import discrete_laplace_noise, geometric_noise, uniform_open
from dp_proto.privacy.testing import intercept

__all__ = ["PublicGrid", "cube_counts", "grid_threshold", "sparse_noisy_histogram"]

#: Largest number of cubes a grid may have: the binomial count of passing empty cubes
#: and the uniform positions are drawn with exact int64 arithmetic below this.
MAX_CELLS = 2**62
#: Largest expected number of empty cubes a release may pass (a lower threshold is refused).
MAX_FALSE_CELLS = 100_000


@dataclass(frozen=True)
class PublicGrid:
    """Lattice ``h Z^d`` inside the public box ``[lower, upper]`` (numbers or ``(d,)``).

    ``index(x)`` is the nearest lattice point of ``x`` clamped into the box, as integer
    coordinates ``(n, d)``; ``centres(idx)`` maps them back. Every cube is an
    l-infinity ball of radius ``h / 2`` around its lattice point.
    """

    step: float
    lo: tuple[int, ...]
    hi: tuple[int, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]

    @classmethod
    def from_box(cls, step: float, lower, upper, dim: int) -> PublicGrid:
        if not (isinstance(step, (int, float)) and math.isfinite(step) and step > 0):
            raise ValueError(f"grid step must be a finite number > 0, got {step!r}")
        low = torch.broadcast_to(torch.as_tensor(lower, dtype=torch.float64), (dim,))
        up = torch.broadcast_to(torch.as_tensor(upper, dtype=torch.float64), (dim,))
        if not bool(torch.isfinite(low).all() and torch.isfinite(up).all()) or not bool((up > low).all()):
            raise ValueError("the grid's box needs finite bounds with every upper bound above its lower bound")
        lo = torch.round(low / step).long()
        hi = torch.round(up / step).long()
        return cls(float(step), tuple(lo.tolist()), tuple(hi.tolist()), tuple(low.tolist()), tuple(up.tolist()))

    @property
    def dim(self) -> int:
        return len(self.lo)

    @property
    def widths(self) -> tuple[int, ...]:
        """Number of lattice points along every axis."""
        return tuple(h - lo + 1 for lo, h in zip(self.lo, self.hi, strict=True))

    @property
    def num_cells(self) -> int:
        """``M``, the number of cubes in the box (a Python int, exact)."""
        return math.prod(self.widths)

    def clamp(self, x: Tensor) -> Tensor:
        """``x (n, d)`` clamped into the box."""
        return torch.clamp(
            x,
            torch.tensor(self.lower, dtype=x.dtype, device=x.device),
            torch.tensor(self.upper, dtype=x.dtype, device=x.device),
        )

    def index(self, x: Tensor) -> Tensor:
        """Integer lattice coordinates ``(n, d)`` (int64) of the cube of every row of ``x``."""
        idx = torch.round(self.clamp(x).to(torch.float64) / self.step).long()
        return torch.clamp(idx, torch.tensor(self.lo, device=x.device), torch.tensor(self.hi, device=x.device))

    def centres(self, idx: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
        """Lattice points ``idx * step`` of integer coordinates ``idx (k, d)``."""
        return idx.to(dtype) * self.step

    def uniform_indices(self, k: int, generator: torch.Generator | None, device=None) -> Tensor:
        """``k`` cubes drawn uniformly (with replacement) from the box: ``(k, d)`` int64."""
        u = uniform_open((k, self.dim), generator=generator, device=device)
        width = torch.tensor(self.widths, dtype=torch.float64, device=device)
        offset = torch.minimum(torch.floor(u * width), width - 1).long()
        return offset + torch.tensor(self.lo, device=device)

    def flat(self, idx: Tensor) -> Tensor:
        """A unique int64 key per cube of ``idx (k, d)`` (mixed radix; exact below ``MAX_CELLS``)."""
        key = torch.zeros(idx.shape[0], dtype=torch.int64, device=idx.device)
        for j, (lo, width) in enumerate(zip(self.lo, self.widths, strict=True)):
            key = key * width + (idx[:, j] - lo)
        return key


def cube_counts(cells: Tensor, labels: Tensor, grid: PublicGrid, num_classes: int) -> tuple[Tensor, Tensor, Tensor]:
    """Exact class counts of the occupied cubes (CPU): ``keys (m,)`` sorted (``PublicGrid.flat``),
    their integer cubes ``(m, d)`` and counts ``(m, c)`` (float64), for ``cells (n, d)``
    (``PublicGrid.index``) and ``labels (n,)``."""
    cells = cells.long().cpu()
    labels = labels.long().cpu()
    keys, inverse = torch.unique(grid.flat(cells), return_inverse=True)
    occupied = torch.zeros(keys.numel(), grid.dim, dtype=torch.int64)
    occupied[inverse] = cells
    counts = torch.bincount(inverse * num_classes + labels, minlength=keys.numel() * num_classes)
    return keys, occupied, counts.reshape(-1, num_classes).to(torch.float64)


def _log_tail(threshold: int, scale: float) -> float:
    """``log P(DL >= threshold)`` for discrete Laplace of ``scale`` and an integer
    ``threshold >= 1``: ``P = p^t / (1 + p)`` with ``p = exp(-1/scale)`` (no underflow)."""
    log_p = -1.0 / scale
    return threshold * log_p - math.log1p(math.exp(log_p))


def _discrete_tail(threshold: int, scale: float) -> float:
    """``P(DL >= threshold) = p^t / (1 + p)`` for an integer ``threshold >= 1``, ``p = exp(-1/scale)``."""
    return math.exp(_log_tail(threshold, scale))


def _expected_false_cells(num_cells: int, num_classes: int, threshold: int, scale: float) -> float:
    """Expected number of empty cubes whose largest of ``c`` noisy counts reaches ``threshold``:
    ``M (1 - (1 - q)^c)`` with ``q = P(DL >= threshold)``."""
    q = _discrete_tail(threshold, scale)
    return num_cells * -math.expm1(num_classes * math.log1p(-q))


def grid_threshold(num_cells: int, num_classes: int, epsilon: float, false_cells: float = 1.0) -> int:
    """Integer noisy count a cube needs, so that at most ``false_cells`` empty cubes pass on average.

    The counts get discrete Laplace noise of scale ``1/epsilon``; with ``p = exp(-epsilon)``
    one noisy count of an empty cube reaches an integer ``t >= 1`` with probability
    ``q = p^t / (1 + p)`` (exact), so the cube passes with probability ``1 - (1 - q)^c``.
    Returns the smallest integer ``t >= 1`` with ``M (1 - (1 - q)^c) <= false_cells`` over
    ``M`` cubes: at most ``ceil(ln(c M / ((1 + p) false_cells)) / epsilon)`` (where
    ``c q M <= false_cells``) and at least 1 (one record).
    """
    epsilon = check_epsilon(epsilon)
    if not false_cells > 0:
        raise ValueError(f"false_cells must be > 0, got {false_cells!r}")
    scale = 1.0 / epsilon
    p = math.exp(-epsilon)
    t = max(1, math.ceil(math.log(max(num_classes * num_cells / ((1.0 + p) * false_cells), 1.0)) / epsilon))
    while _expected_false_cells(num_cells, num_classes, t, scale) > false_cells:
        t += 1  # guards against rounding in the bound above
    while t > 1 and _expected_false_cells(num_cells, num_classes, t - 1, scale) <= false_cells:
        t -= 1
    return t


def _binomial(trials: int, prob: float, generator: torch.Generator | None) -> int:
    """One ``Binomial(trials, prob)`` draw by inversion (``trials`` up to ``2^62``; meant
    for a small mean ``trials * prob``: the loop runs about that many times)."""
    if trials <= 0 or prob <= 0.0:
        return 0
    u = float(uniform_open(1, generator=generator, device="cpu")[0])
    log_pmf = trials * math.log1p(-prob)  # P(K = 0)
    cdf = math.exp(log_pmf)
    k = 0
    ratio = prob / (1.0 - prob)
    while u > cdf and k < trials:
        log_pmf += math.log((trials - k) / (k + 1) * ratio)
        k += 1
        cdf += math.exp(log_pmf)
        if k > 10 * trials * prob + 1000 and math.exp(log_pmf) < 1e-300:
            break  # the remaining mass is below float resolution
    return k


def _discrete_below(shape, scale: float, threshold: int, generator: torch.Generator | None) -> Tensor:
    """I.i.d. discrete Laplace of ``scale`` conditioned on being ``< threshold``, int64
    (rejection; ``threshold >= 1``, so at most ``p / (1 + p) < 1/2`` of the draws are redrawn)."""
    out = discrete_laplace_noise(shape, scale, generator=generator, device="cpu")
    bad = out >= threshold
    while bool(bad.any()):
        out[bad] = discrete_laplace_noise(int(bad.sum()), scale, generator=generator, device="cpu")
        bad = out >= threshold
    return out


def _passing_empty_counts(
    k: int, num_classes: int, scale: float, threshold: int, generator: torch.Generator | None
) -> Tensor:
    """Noisy counts ``(k, c)`` (integers, float64) of empty cubes conditioned on their
    largest reaching the integer ``threshold >= 1``.

    With ``q = P(DL >= threshold)`` the number ``J`` of passing coordinates is
    ``Binomial(c, q)`` conditioned on ``J >= 1``; which ones is uniform; a passing
    coordinate is ``threshold + G`` with ``P(G = j) = (1 - p) p^j`` (the discrete Laplace
    tail beyond ``t >= 1`` is geometric: ``P(t + j | >= t) = (1 - p) p^j``), the others
    are discrete Laplace conditioned below ``threshold``.
    """
    c = num_classes
    if k <= 0:
        return torch.zeros(0, c, dtype=torch.float64)
    log_q = _log_tail(threshold, scale)
    log_1mq = math.log1p(-math.exp(log_q))
    log_w = torch.tensor(
        [math.log(math.comb(c, j)) + j * log_q + (c - j) * log_1mq for j in range(1, c + 1)], dtype=torch.float64
    )
    weights = torch.exp(log_w - log_w.max())
    out = _discrete_below((k, c), scale, threshold, generator).to(torch.float64)
    cdf = torch.cumsum(weights, 0) / weights.sum()
    passing = torch.searchsorted(cdf, uniform_open(k, generator=generator, device="cpu")).clamp(max=c - 1) + 1
    # a uniform subset of `passing` coordinates per row: the ones of lowest random rank
    rank = torch.argsort(torch.argsort(uniform_open((k, c), generator=generator, device="cpu"), dim=1), dim=1)
    chosen = rank < passing.unsqueeze(1)
    beyond = geometric_noise((k, c), scale, generator=generator, device="cpu").to(torch.float64)
    return torch.where(chosen, threshold + beyond, out)


def _empty_indices(grid: PublicGrid, k: int, occupied: Tensor, generator: torch.Generator | None) -> Tensor:
    """``k`` distinct cubes drawn uniformly among those whose key is not in ``occupied``."""
    taken = set(occupied.tolist())
    rows: list[Tensor] = []
    while len(rows) < k:
        cand = grid.uniform_indices(2 * (k - len(rows)) + 8, generator, device="cpu")
        for row, key in zip(cand, grid.flat(cand).tolist(), strict=True):
            if key not in taken and len(rows) < k:
                taken.add(key)
                rows.append(row)
    return torch.stack(rows) if rows else torch.zeros(0, grid.dim, dtype=torch.int64)


def _empty_max(n_empty: int, scale: float, threshold: int, generator: torch.Generator | None) -> tuple[int, float]:
    """The largest of ``N = n_empty`` i.i.d. discrete Laplace draws conditioned below the
    integer ``threshold >= 1``, with the uniform tie-breaking priority of the winner.

    Every draw ``X`` gets an independent ``U ~ Uniform(0, 1)``; the winner maximises
    ``Y = X + U`` (largest ``X``, ties broken by ``U``). ``Y`` has the continuous CDF
    ``H(y) = F(x - 1) + P(X = x) (y - x)`` on ``[x, x + 1)``, where ``F`` is the discrete
    Laplace CDF, ``F(x) = 1 - p^(x+1) / (1 + p)`` for ``x >= 0`` and ``p^(-x) / (1 + p)``
    for ``x < 0``; the largest of ``N`` has CDF ``(H(y) / F(t - 1))^N``, inverted here:
    ``v = F(t - 1) u^(1/N)``, ``x`` the smallest integer with ``F(x) >= v`` (so ``x`` has
    CDF ``(F(x) / F(t - 1))^N``), ``U = (v - F(x - 1)) / P(X = x)``. ``1 - v`` is kept
    accurate for the huge ``N`` of a large grid. Returns ``(x, U)``.
    """
    log_p = -1.0 / scale
    p = math.exp(log_p)
    one_minus_p = -math.expm1(log_p)
    q = _discrete_tail(threshold, scale)  # 1 - F(t - 1)
    u = float(uniform_open(1, generator=generator, device="cpu")[0])
    s = math.log(u) / n_empty
    v = (1.0 - q) * math.exp(s)
    if v > p / (1.0 + p):  # x >= 0: F(x) >= v iff p^(x+1) <= r = (1 + p)(1 - v)
        r = (1.0 + p) * (q - (1.0 - q) * math.expm1(s))
        x = math.ceil(math.log(r) / log_p) - 1
        frac = -math.expm1(math.log(r) - x * log_p) / one_minus_p
    else:  # x < 0: F(x) >= v iff p^(-x) >= r = (1 + p) v
        r = (1.0 + p) * v
        x = math.ceil(-math.log(r) / log_p)
        frac = p * math.expm1(math.log(r) + x * log_p - log_p) / one_minus_p
    return min(x, threshold - 1), min(max(frac, 0.0), 1.0)


def _noisy_max_cube(
    grid: PublicGrid, noisy: Tensor, scale: float, threshold: int, generator: torch.Generator | None
) -> tuple[int | None, int, float]:
    """The dense mechanism's fallback when no cube passed: the cube with the largest noisy
    count (all of them below the integer ``threshold``), that count's class and value.

    ``noisy (m, c)`` holds the occupied cubes' noisy counts. Returns ``(None, class,
    value)`` when an empty cube wins (its position and class are then uniform), else
    ``(row, class, value)`` with the row into the occupied cubes. Ties between the integer
    counts are broken uniformly at random over all ``M c`` entries of the dense table: an
    independent uniform priority per entry, the largest wins. The largest of the ``N``
    empty entries comes from ``_empty_max`` (discrete Laplace conditioned below ``t``).
    """
    num_classes = noisy.shape[1]
    n_empty = num_classes * (grid.num_cells - noisy.shape[0])
    best_row, best_cls, best_occ, best_priority = -1, 0, -math.inf, -math.inf
    if noisy.numel():
        best_occ = float(noisy.max())
        tied = torch.nonzero(noisy.reshape(-1) == best_occ).reshape(-1)
        priority = uniform_open(tied.numel(), generator=generator, device="cpu")
        winner = int(torch.argmax(priority))
        best_row, best_cls = divmod(int(tied[winner]), num_classes)
        best_priority = float(priority[winner])
    if n_empty > 0:
        value, priority = _empty_max(n_empty, scale, threshold, generator)
        if value > best_occ or (value == best_occ and priority > best_priority):
            cls = min(int(uniform_open(1, generator=generator, device="cpu")[0] * num_classes), num_classes - 1)
            return None, cls, float(value)
    return best_row, best_cls, best_occ


def sparse_noisy_histogram(
    cells: Tensor,
    labels: Tensor,
    grid: PublicGrid,
    num_classes: int,
    epsilon: float,
    threshold: float,
    *,
    ledger: PrivacyLedger | None = None,
    generator: torch.Generator | None = None,
    name: str = "svdd/grid_votes",
) -> tuple[Tensor, Tensor]:
    """Noisy class counts of the cubes whose largest noisy count reaches ``threshold``.

    ``cells (n, d)``: the integer cube of every record (``PublicGrid.index``),
    ``labels (n,)`` in ``0..c-1``. Equivalent in distribution to adding discrete Laplace
    noise of scale ``1/epsilon`` (``P(k)`` proportional to ``exp(-epsilon |k|)``) to all
    ``M c`` counts of the box and keeping the cubes whose largest noisy count is
    ``>= t``; the empty cubes are simulated, not noised one by one (Cormode, Procopiuc,
    Srivastava and Tran, ICDT 2012; see the module docstring). The noise is integer, not
    continuous floating-point Laplace, which leaks through the gaps between reachable
    doubles (Mironov, CCS 2012): the released counts are integers (float64).

    ``threshold`` must be a finite number ``> 0``; as the noisy counts are integers it acts
    as the integer ``t = ceil(threshold) >= 1`` (``grid_threshold`` returns one).
    If no cube passes, the single cube with the largest noisy count is kept (report noisy
    max over the dense table, ties broken uniformly at random among the tied entries)
    with only that largest count (the other classes' entries are ``-inf``: not
    released). Epsilon-DP; one ``pure`` event in ``ledger``.

    Returns
    -------
    idx : Tensor ``(k, d)`` int64, the kept cubes sorted by key (real and false cubes are
        not told apart); counts : Tensor ``(k, c)`` float64, their noisy counts.
    """
    epsilon = check_epsilon(epsilon)
    if cells.dim() != 2 or cells.shape[1] != grid.dim or labels.shape != (cells.shape[0],):
        raise ValueError(
            f"cells must be (n, {grid.dim}) and labels (n,), got {tuple(cells.shape)}, {tuple(labels.shape)}"
        )
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise ValueError(f"labels must lie in 0..{num_classes - 1}")
    if cells.numel() and not bool(
        (
            (cells >= torch.tensor(grid.lo, device=cells.device))
            & (cells <= torch.tensor(grid.hi, device=cells.device))
        ).all()
    ):
        raise ValueError("cells must be cubes of the grid (PublicGrid.index clamps points into its box)")
    if grid.num_cells > MAX_CELLS:
        raise ValueError(
            f"the grid has {grid.num_cells:.3g} cubes, more than 2^62: use a coarser step or a smaller box"
        )
    if not (threshold > 0 and math.isfinite(threshold)):
        raise ValueError(f"threshold must be a finite number > 0, got {threshold!r}")
    t = math.ceil(float(threshold))  # the noisy counts are integers: count >= threshold iff count >= t
    scale = 1.0 / epsilon
    q = _discrete_tail(t, scale)
    p_pass = -math.expm1(num_classes * math.log1p(-q))  # an empty cube's largest noisy count reaches t
    if grid.num_cells * p_pass > MAX_FALSE_CELLS:
        raise ValueError(
            f"threshold {threshold:g} would release about {grid.num_cells * p_pass:.3g} empty cubes "
            f"(more than {MAX_FALSE_CELLS}): raise it (see grid_threshold) or use fewer cubes"
        )
    if ledger is not None:
        ledger.spend(PureEvent(epsilon, name=name, sensitivity=1.0))
    generator = noise_rng(ledger, generator, False, "cpu", name)
    keys, occupied, counts = cube_counts(cells, labels, grid, num_classes)

    def draw() -> tuple[Tensor, Tensor]:
        noise = discrete_laplace_noise(counts.shape, scale, generator=generator, device="cpu")
        noisy = counts + noise.to(torch.float64)
        keep = noisy.max(1).values >= t
        n_false = _binomial(grid.num_cells - keys.numel(), p_pass, generator)
        false_idx = _empty_indices(grid, n_false, keys, generator)
        false_counts = _passing_empty_counts(n_false, num_classes, scale, t, generator)
        idx = torch.cat([occupied[keep], false_idx])
        out = torch.cat([noisy[keep], false_counts])
        if idx.shape[0] == 0:
            row, cls, value = _noisy_max_cube(grid, noisy, scale, t, generator)
            idx = _empty_indices(grid, 1, keys, generator) if row is None else occupied[row].reshape(1, -1)
            out = torch.full((1, num_classes), -math.inf, dtype=torch.float64)
            out[0, cls] = value
        order = torch.argsort(grid.flat(idx))
        return idx[order], out[order]

    # no fixed-shape pre-noise tensor (see the module docstring): no declared sensitivity
    return intercept(name, None, None, None, draw)
