"""The public grid of cubes and its sparse noisy histogram: exact lattice helpers, the
same output distribution as noising every cube with discrete Laplace noise, integer
outputs, the ledger, an empirical audit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dp_proto.privacy import PrivacyLedger
from dp_proto.privacy.audit import audit_epsilon
from dp_proto.svdd.grid import (
    PublicGrid,
    _binomial,
    _noisy_max_cube,
    _passing_empty_counts,
    grid_threshold,
    sparse_noisy_histogram,
)

# These tests seed the noise on purpose (exact distributions, empirical audits): the
# PrivacyLeakWarning that a caller's generator raises is expected here.
pytestmark = pytest.mark.filterwarnings("ignore:.*caller's torch.Generator:dp_proto.exceptions.PrivacyLeakWarning")

SMALL = PublicGrid.from_box(1.0, -2.0, 2.0, 2)  # 5 x 5 cubes


def _discrete_laplace(rng: np.random.Generator, eps: float, size) -> np.ndarray:
    """Reference sampler, independent of the library: the difference of two geometric
    variables, ``P(k)`` proportional to ``exp(-eps |k|)``."""
    p = math.exp(-eps)
    return rng.geometric(1.0 - p, size) - rng.geometric(1.0 - p, size)


def _discrete_cdf(x: int, eps: float) -> float:
    """``P(DL <= x)`` for discrete Laplace with ``p = exp(-eps)``."""
    p = math.exp(-eps)
    return 1.0 - p ** (x + 1) / (1.0 + p) if x >= 0 else p ** (-x) / (1.0 + p)


def test_lattice_index_clamp_centres_and_keys():
    grid = PublicGrid.from_box(0.5, [-1.0, 0.0], [1.0, 2.0], 2)
    assert grid.num_cells == 5 * 5
    x = torch.tensor([[0.26, 0.74], [-9.0, 9.0], [0.1, -0.3]])
    idx = grid.index(x)
    assert idx.tolist() == [[1, 1], [-2, 4], [0, 0]]
    assert torch.allclose(grid.centres(idx), torch.tensor([[0.5, 0.5], [-1.0, 2.0], [0.0, 0.0]]))
    every = torch.cartesian_prod(torch.arange(-2, 3), torch.arange(0, 5))
    keys = grid.flat(every)
    assert sorted(keys.tolist()) == list(range(25))
    draws = grid.uniform_indices(5000, torch.Generator().manual_seed(0))
    freq = torch.bincount(grid.flat(draws), minlength=25).double() / 5000
    assert float((freq - 1 / 25).abs().max()) < 0.02


def test_grid_needs_a_positive_step_and_a_proper_box():
    with pytest.raises(ValueError, match="step"):
        PublicGrid.from_box(0.0, -1, 1, 2)
    with pytest.raises(ValueError, match="upper bound"):
        PublicGrid.from_box(1.0, 1, -1, 2)


def test_threshold_gives_the_stated_expected_number_of_false_cubes():
    """The smallest integer t >= 1 whose exact expected number of passing empty cubes,
    M (1 - (1 - p^t / (1 + p))^c), is at most false_cells."""

    def expected(m, c, eps, t):
        p = math.exp(-eps)
        return m * (1.0 - (1.0 - p**t / (1.0 + p)) ** c)

    for m, c, eps, false_cells in [
        (9**9, 3, 2.0, 4.0),
        (9**9, 2, 1.0, 3.0),
        (25, 2, 1.0, 1.0),
        (10**6, 5, 0.3, 0.5),
        (40, 20, 1.5, 1.0),
        (1000, 3, 0.05, 2.0),
    ]:
        t = grid_threshold(m, c, eps, false_cells=false_cells)
        assert isinstance(t, int) and t >= 1
        assert expected(m, c, eps, t) <= false_cells
        if t > 1:
            assert expected(m, c, eps, t - 1) > false_cells
    assert grid_threshold(9**9, 3, 2.0, false_cells=4.0) == 10  # ln(3 9^9 / (4 (1 + e^-2))) / 2 = 9.7
    assert grid_threshold(1, 2, 1e6) == 1  # at least one record
    assert grid_threshold(10, 2, 1.0, false_cells=50.0) == 1
    with pytest.raises(ValueError):
        grid_threshold(10, 2, 1.0, false_cells=0.0)


def test_binomial_matches_its_mean_and_variance():
    gen = torch.Generator().manual_seed(1)
    draws = np.array([_binomial(40, 0.1, gen) for _ in range(6000)])
    assert draws.mean() == pytest.approx(4.0, abs=0.1)
    assert draws.var() == pytest.approx(3.6, rel=0.1)
    huge = np.array([_binomial(2**60, 3.0 / 2**60, gen) for _ in range(3000)])
    assert huge.mean() == pytest.approx(3.0, abs=0.12)
    assert _binomial(0, 0.5, gen) == 0 and _binomial(10, 0.0, gen) == 0


def test_passing_empty_counts_follow_the_conditioned_laplace_law():
    """Against rejection sampling from i.i.d. discrete Laplace^c conditioned on the largest
    reaching t, and the exact law of the largest: the probability masses agree."""
    gen = torch.Generator().manual_seed(2)
    rng = np.random.default_rng(2)
    eps, t, c = 1.0, 2, 3
    ours = _passing_empty_counts(40000, c, 1.0 / eps, t, gen)
    assert ours.dtype == torch.float64 and ours.shape == (40000, c)
    assert torch.equal(ours, torch.round(ours))  # integers
    assert bool((ours.max(1).values >= t).all())
    raw = _discrete_laplace(rng, eps, (300000, c))
    ref = torch.as_tensor(raw[raw.max(1) >= t], dtype=torch.float64)
    assert ref.shape[0] > 60000

    def pmf(v: torch.Tensor, values) -> np.ndarray:
        return np.array([float((v == k).double().mean()) for k in values])

    stats = [
        (lambda v: v.max(1).values, range(t, t + 6)),  # the largest: t + geometric
        (lambda v: (v >= t).sum(1), range(1, c + 1)),  # how many pass: conditioned binomial
        (lambda v: v.min(1).values, range(-4, t + 2)),
        (lambda v: v[:, 0], range(-4, t + 4)),
    ]  # one coordinate (uniform choice of the passing ones)
    for stat, values in stats:
        assert np.abs(pmf(stat(ours), values) - pmf(stat(ref), values)).max() < 0.012
    # the largest exactly: P(max <= x | max >= t) = (F(x)^c - F(t-1)^c) / (1 - F(t-1)^c)
    below = _discrete_cdf(t - 1, eps) ** c
    exact = np.diff([(_discrete_cdf(x, eps) ** c - below) / (1 - below) for x in range(t - 1, t + 6)])
    assert np.abs(pmf(ours.max(1).values, range(t, t + 6)) - exact).max() < 0.01


def _dense_reference(cells, labels, grid, c, eps, threshold, rng):
    """Add discrete Laplace noise to all M c counts, keep the cubes whose largest count
    reaches the threshold; none: the single cube of the largest count (ties broken
    uniformly at random among the tied entries). Returns the set of kept keys."""
    every = torch.cartesian_prod(*[torch.arange(lo, hi + 1) for lo, hi in zip(grid.lo, grid.hi, strict=True)])
    assert torch.equal(grid.flat(every), torch.arange(every.shape[0]))  # row r is the cube of key r
    counts = np.zeros((every.shape[0], c))
    for cell, label in zip(grid.flat(cells).tolist(), labels.tolist(), strict=True):
        counts[cell, label] += 1
    noisy = counts + _discrete_laplace(rng, eps, counts.shape)
    keep = noisy.max(1) >= threshold
    if not keep.any():
        tied = np.flatnonzero(noisy == noisy.max())
        keep[int(rng.choice(tied)) // c] = True
    return set(grid.flat(every[torch.as_tensor(keep)]).tolist())


@pytest.mark.slow
@pytest.mark.parametrize("threshold", [1.5, 6.0])
def test_sparse_release_has_the_distribution_of_the_dense_mechanism(threshold):
    """Per-cube release frequencies agree with noising every cube (threshold 1.5 acts as 2;
    threshold 6: mostly the report-noisy-max fallback, with many ties)."""
    cells = torch.tensor([[0, 0], [0, 0], [0, 0], [1, 1], [1, 1], [-2, 2]])
    labels = torch.tensor([0, 0, 1, 1, 1, 0])
    trials = 3000
    gen = torch.Generator().manual_seed(3)
    rng = np.random.default_rng(4)
    sparse = np.zeros(25)
    dense = np.zeros(25)
    sizes = [[], []]
    for _ in range(trials):
        idx, counts = sparse_noisy_histogram(cells, labels, SMALL, 2, 1.0, threshold, generator=gen)
        assert counts.shape == (idx.shape[0], 2)
        keys = SMALL.flat(idx).tolist()
        assert len(set(keys)) == len(keys)
        sparse[keys] += 1
        sizes[0].append(len(keys))
        kept = _dense_reference(cells, labels, SMALL, 2, 1.0, threshold, rng)
        dense[list(kept)] += 1
        sizes[1].append(len(kept))
    assert np.abs(sparse - dense).max() / trials < 0.04
    assert np.mean(sizes[0]) == pytest.approx(np.mean(sizes[1]), abs=0.1 * max(1.0, np.mean(sizes[1])))


def test_fallback_noisy_max_matches_the_dense_draws_conditioned_below_the_threshold():
    """Brute force on 9 cubes x 2 classes: noise every count, keep the tables where nothing
    reaches t; the largest entry's value, whether an empty cube holds it (ties broken
    uniformly) and which occupied cube and class it is have the law of the fallback."""
    grid = PublicGrid.from_box(1.0, -1.0, 1.0, 2)  # 3 x 3 cubes
    c, eps, t = 2, 1.0, 3
    occupied_keys = [4, 7]
    counts = np.zeros((9, c))
    counts[4] = [2, 0]
    counts[7] = [0, 1]
    rng = np.random.default_rng(6)
    noisy = counts + _discrete_laplace(rng, eps, (150000, 9, c))
    noisy = noisy[noisy.max((1, 2)) < t]  # nothing passes
    assert noisy.shape[0] > 40000
    flat = noisy.reshape(len(noisy), -1)
    winner = np.argmax(flat + rng.random(flat.shape), 1)  # uniform among the tied largest entries
    dense_value = flat.max(1)
    dense_cube, dense_cls = np.divmod(winner, c)
    dense_cube = np.where(np.isin(dense_cube, occupied_keys), dense_cube, -1)  # -1: an empty cube
    gen = torch.Generator().manual_seed(7)
    n = 8000
    value, cube, cls = np.zeros(n), np.zeros(n, dtype=int), np.zeros(n, dtype=int)
    for i in range(n):  # the occupied cubes' noisy counts of accepted tables: conditioned below t
        occ = torch.as_tensor(noisy[i, occupied_keys])
        row, cls[i], value[i] = _noisy_max_cube(grid, occ, 1.0 / eps, t, gen)
        cube[i] = -1 if row is None else occupied_keys[row]
        if row is not None:
            assert value[i] == float(occ[row, cls[i]]) == float(occ.max())
    assert np.all(value < t) and np.all(value == np.round(value))
    for ours, ref, support in [
        (value, dense_value, range(-2, t)),
        (cube, dense_cube, [-1, *occupied_keys]),
        (cls, dense_cls, range(c)),
    ]:
        for k in support:
            assert np.mean(ours == k) == pytest.approx(np.mean(ref == k), abs=0.025), (k, list(support))


def test_released_counts_are_integers():
    """Passing cubes (real and simulated) and the fallback's single count are integers;
    the fallback's other classes are -inf (not released)."""
    gen = torch.Generator().manual_seed(8)
    cells = torch.tensor([[0, 0], [0, 0], [1, 1]])
    labels = torch.tensor([0, 1, 1])
    fallbacks = 0
    for threshold in (1.0, 2.5, 9.0):
        for _ in range(30):
            idx, counts = sparse_noisy_histogram(cells, labels, SMALL, 2, 1.0, threshold, generator=gen)
            finite = counts[torch.isfinite(counts)]
            assert torch.equal(finite, torch.round(finite))
            if bool(torch.isinf(counts).any()):
                fallbacks += 1
                assert counts.shape[0] == 1 and int(torch.isfinite(counts).sum()) == 1
                assert float(finite[0]) < math.ceil(threshold)
                assert bool((counts[torch.isinf(counts)] < 0).all())
            else:
                assert bool((counts.max(1).values >= math.ceil(threshold)).all())
    assert fallbacks > 10
    grid = PublicGrid.from_box(1.0, -4.0, 4.0, 9)
    t = grid_threshold(grid.num_cells, 2, 1.0, false_cells=100.0)  # 100 / e to 100 expected
    idx, counts = sparse_noisy_histogram(
        torch.zeros(1, 9, dtype=torch.long), torch.tensor([0]), grid, 2, 1.0, t, generator=gen
    )
    assert idx.shape[0] > 10 and torch.equal(counts, torch.round(counts))  # simulated empty cubes too
    assert bool((counts.max(1).values >= t).all())


def test_release_is_recorded_and_bad_input_is_refused():
    ledger = PrivacyLedger()
    cells = torch.tensor([[0, 0], [1, 0]])
    idx, counts = sparse_noisy_histogram(
        cells, torch.tensor([0, 1]), SMALL, 2, 2.0, 1.0, ledger=ledger, generator=torch.Generator().manual_seed(0)
    )
    assert [e.name for e in ledger.events] == ["svdd/grid_votes"]
    assert ledger.get_epsilon() == pytest.approx(2.0, rel=1e-3)
    with pytest.raises(ValueError, match="labels"):
        sparse_noisy_histogram(cells, torch.tensor([0, 2]), SMALL, 2, 1.0, 1.0)
    with pytest.raises(ValueError, match="cells must be"):
        sparse_noisy_histogram(cells[:, :1], torch.tensor([0, 1]), SMALL, 2, 1.0, 1.0)
    with pytest.raises(ValueError, match="cubes of the grid"):
        sparse_noisy_histogram(torch.tensor([[0, 0], [3, 0]]), torch.tensor([0, 1]), SMALL, 2, 1.0, 1.0)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="threshold"):
            sparse_noisy_histogram(cells, torch.tensor([0, 1]), SMALL, 2, 1.0, bad)
    # a real threshold acts as its ceiling: the same draws for 1.2 and 2, others for 2.0001 (acts as 3)
    runs = [
        [
            sparse_noisy_histogram(
                cells, torch.tensor([0, 1]), SMALL, 2, 1.0, th, generator=torch.Generator().manual_seed(seed)
            )
            for seed in range(20)
        ]
        for th in (1.2, 2.0, 2.0001)
    ]
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(runs[0], runs[1], strict=True))
    assert not all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(runs[1], runs[2], strict=True))
    huge = PublicGrid.from_box(0.1, -4.0, 4.0, 12)
    with pytest.raises(ValueError, match="2\\^62"):
        sparse_noisy_histogram(torch.zeros(1, 12, dtype=torch.long), torch.tensor([0]), huge, 2, 1.0, 1.0)


def test_false_cubes_on_a_large_grid_average_false_cells():
    grid = PublicGrid.from_box(1.0, -4.0, 4.0, 9)  # 9^9 cubes
    gen = torch.Generator().manual_seed(5)
    cells = torch.zeros(50, 9, dtype=torch.long)
    labels = torch.zeros(50, dtype=torch.long)
    t = grid_threshold(grid.num_cells, 2, 1.0, false_cells=3.0)
    p = math.exp(-1.0)
    expected = grid.num_cells * (1 - (1 - p**t / (1 + p)) ** 2)
    assert 3.0 / math.e < expected <= 3.0  # one record less than t would release more than 3
    extra = [sparse_noisy_histogram(cells, labels, grid, 2, 1.0, t, generator=gen)[0].shape[0] - 1 for _ in range(800)]
    assert np.mean(extra) == pytest.approx(expected, abs=0.15)


@pytest.mark.slow
@pytest.mark.parametrize("noise_factor, honest", [(1.0, True), (0.1, False)])
def test_empirical_audit_of_the_grid_votes(noise_factor, honest):
    """One extra record in cube (0, 0): the audited epsilon stays below the budget; a
    10x under-noised release is caught."""
    eps = 1.0
    base = torch.tensor([[0, 0], [0, 0], [1, 1]])
    d0 = (base, torch.tensor([0, 0, 1]))
    d1 = (torch.cat([base, torch.tensor([[0, 0]])]), torch.tensor([0, 0, 1, 0]))
    key = int(SMALL.flat(torch.tensor([[0, 0]]))[0])

    def mechanism(data, generator):
        idx, counts = sparse_noisy_histogram(data[0], data[1], SMALL, 2, eps / noise_factor, 1.0, generator=generator)
        hit = SMALL.flat(idx) == key
        return float(counts[hit, 0][0]) if bool(hit.any()) else -5.0

    result = audit_epsilon(mechanism, d0, d1, statistic=lambda o: o, n_trials=4000, generator_seed=11)
    if honest:
        assert 0.0 <= result.epsilon_lower_bound < eps
    else:
        assert result.epsilon_lower_bound > eps


def test_a_threshold_that_would_release_most_empty_cubes_is_refused():
    grid = PublicGrid.from_box(1.0, -4.0, 4.0, 9)
    ledger = PrivacyLedger()
    with pytest.raises(ValueError, match="empty cubes"):
        sparse_noisy_histogram(
            torch.zeros(3, 9, dtype=torch.long), torch.zeros(3, dtype=torch.long), grid, 2, 1.0, 0.5, ledger=ledger
        )
    assert len(ledger.events) == 0  # refused before anything is spent
