"""The public grid of cubes and its sparse noisy histogram: exact lattice helpers, the
same output distribution as noising every cube, the ledger, an empirical audit."""

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
    _passing_empty_counts,
    grid_threshold,
    sparse_noisy_histogram,
)

# These tests seed the noise on purpose (exact distributions, empirical audits): the
# PrivacyLeakWarning that a caller's generator raises is expected here.
pytestmark = pytest.mark.filterwarnings("ignore:.*caller's torch.Generator:dp_proto.exceptions.PrivacyLeakWarning")

SMALL = PublicGrid.from_box(1.0, -2.0, 2.0, 2)  # 5 x 5 cubes


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
    t = grid_threshold(9**9, 3, 2.0, false_cells=4.0)
    assert t == pytest.approx(math.log(3 * 9**9 / 8.0) / 2.0)
    q = 0.5 * math.exp(-2.0 * t)
    assert 9**9 * (1 - (1 - q) ** 3) == pytest.approx(4.0, rel=1e-3)
    assert grid_threshold(1, 2, 1e6) == 0.5  # at least half a record
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
    """Against rejection sampling from Lap^c conditioned on the largest reaching t."""
    gen = torch.Generator().manual_seed(2)
    scale, t, c = 1.0, 0.8, 3
    ours = _passing_empty_counts(20000, c, scale, t, gen)
    assert bool((ours.max(1).values >= t).all())
    raw = torch.distributions.Laplace(0.0, scale).sample((200000, c))
    ref = raw[raw.max(1).values >= t][:20000].double()
    for stat in (lambda v: v.max(1).values.mean(), lambda v: (v >= t).sum(1).double().mean(),
                 lambda v: v.min(1).values.mean(), lambda v: v[:, 0].mean()):
        assert float(stat(ours)) == pytest.approx(float(stat(ref)), abs=0.04)


def _dense_reference(cells, labels, grid, c, eps, threshold, gen):
    """Noise all M c counts, keep the cubes whose largest count reaches the threshold;
    none: the single cube of the largest count. Returns the set of kept keys."""
    every = torch.cartesian_prod(*[torch.arange(lo, hi + 1) for lo, hi in zip(grid.lo, grid.hi, strict=True)])
    assert torch.equal(grid.flat(every), torch.arange(every.shape[0]))  # row r is the cube of key r
    counts = torch.zeros(every.shape[0], c, dtype=torch.float64)
    for cell, label in zip(grid.flat(cells).tolist(), labels.tolist(), strict=True):
        counts[cell, label] += 1
    noisy = counts + torch.distributions.Laplace(0.0, 1.0 / eps).sample(counts.shape).double()
    keep = noisy.max(1).values >= threshold
    if not bool(keep.any()):
        keep[int(torch.argmax(noisy.max(1).values))] = True
    return set(grid.flat(every[keep]).tolist())


@pytest.mark.parametrize("threshold", [1.5, 6.0])
def test_sparse_release_has_the_distribution_of_the_dense_mechanism(threshold):
    """Per-cube release frequencies agree with noising every cube (threshold 6: mostly
    the report-noisy-max fallback)."""
    cells = torch.tensor([[0, 0], [0, 0], [0, 0], [1, 1], [1, 1], [-2, 2]])
    labels = torch.tensor([0, 0, 1, 1, 1, 0])
    trials = 3000
    gen = torch.Generator().manual_seed(3)
    torch.manual_seed(4)
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
        kept = _dense_reference(cells, labels, SMALL, 2, 1.0, threshold, None)
        dense[list(kept)] += 1
        sizes[1].append(len(kept))
    assert np.abs(sparse - dense).max() / trials < 0.04
    assert np.mean(sizes[0]) == pytest.approx(np.mean(sizes[1]), abs=0.1 * max(1.0, np.mean(sizes[1])))


def test_release_is_recorded_and_bad_input_is_refused():
    ledger = PrivacyLedger()
    cells = torch.tensor([[0, 0], [1, 0]])
    idx, counts = sparse_noisy_histogram(cells, torch.tensor([0, 1]), SMALL, 2, 2.0, 1.0, ledger=ledger,
                                         generator=torch.Generator().manual_seed(0))
    assert [e.name for e in ledger.events] == ["svdd/grid_votes"]
    assert ledger.get_epsilon() == pytest.approx(2.0, rel=1e-3)
    with pytest.raises(ValueError, match="labels"):
        sparse_noisy_histogram(cells, torch.tensor([0, 2]), SMALL, 2, 1.0, 1.0)
    with pytest.raises(ValueError, match="cells must be"):
        sparse_noisy_histogram(cells[:, :1], torch.tensor([0, 1]), SMALL, 2, 1.0, 1.0)
    with pytest.raises(ValueError, match="cubes of the grid"):
        sparse_noisy_histogram(torch.tensor([[0, 0], [3, 0]]), torch.tensor([0, 1]), SMALL, 2, 1.0, 1.0)
    with pytest.raises(ValueError, match="threshold"):
        sparse_noisy_histogram(cells, torch.tensor([0, 1]), SMALL, 2, 1.0, 0.0)
    huge = PublicGrid.from_box(0.1, -4.0, 4.0, 12)
    with pytest.raises(ValueError, match="2\\^62"):
        sparse_noisy_histogram(torch.zeros(1, 12, dtype=torch.long), torch.tensor([0]), huge, 2, 1.0, 1.0)


def test_false_cubes_on_a_large_grid_average_false_cells():
    grid = PublicGrid.from_box(1.0, -4.0, 4.0, 9)  # 9^9 cubes
    gen = torch.Generator().manual_seed(5)
    cells = torch.zeros(50, 9, dtype=torch.long)
    labels = torch.zeros(50, dtype=torch.long)
    t = grid_threshold(grid.num_cells, 2, 1.0, false_cells=3.0)
    extra = [sparse_noisy_histogram(cells, labels, grid, 2, 1.0, t, generator=gen)[0].shape[0] - 1
             for _ in range(800)]
    assert np.mean(extra) == pytest.approx(3.0, abs=0.25)


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
        idx, counts = sparse_noisy_histogram(data[0], data[1], SMALL, 2, eps / noise_factor, 1.0,
                                             generator=generator)
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
        sparse_noisy_histogram(torch.zeros(3, 9, dtype=torch.long), torch.zeros(3, dtype=torch.long), grid, 2,
                               1.0, 0.5, ledger=ledger)
    assert len(ledger.events) == 0  # refused before anything is spent
