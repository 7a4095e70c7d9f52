"""Multi-start local search for the cluster labels: planted solutions, closed-form moves."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from dp_proto.exceptions import DataValidationError
from dp_proto.llp import (
    candidate_deltas,
    local_search,
    predicted_proportions,
    proportion_loss,
)


def _planted(seed: int, num_batches: int = 150, k: int = 8, num_labels: int = 3, size: int = 40):
    """Batches with varying cluster mixtures and the exact proportions of a planted map."""
    gen = torch.Generator().manual_seed(seed)
    planted = torch.randint(0, num_labels, (k,), generator=gen)
    planted[:num_labels] = torch.arange(num_labels)  # every label used
    mix = torch.distributions.Dirichlet(torch.full((k,), 0.5)).sample((num_batches,))
    idx = torch.multinomial(mix, size, replacement=True, generator=gen)  # (B, size) cluster per record
    counts = torch.zeros(num_batches, k, dtype=torch.float64).scatter_add_(
        1, idx, torch.ones(idx.shape, dtype=torch.float64)
    )
    return counts, planted, predicted_proportions(counts, planted, num_labels)


@pytest.mark.parametrize("seed", range(3))
def test_finds_the_planted_assignment(seed):
    torch.manual_seed(seed)
    counts, planted, props = _planted(seed)
    res = local_search(counts, props, n_starts=16, generator=torch.Generator().manual_seed(seed))
    assert res.converged
    assert res.loss == pytest.approx(0.0, abs=1e-20)
    assert torch.equal(res.assignment, planted)
    assert res.start_losses.shape == (16,) and res.assignments.shape == (16, 8)


def test_closed_form_deltas_equal_brute_force():
    counts, _, props = _planted(11, num_batches=6, k=4, num_labels=3, size=5)
    counts[2] = 0  # an empty batch: weight 0
    props = props + 0.1 * torch.rand(props.shape, generator=torch.Generator().manual_seed(1))
    weights = torch.tensor([1.0, 0.5, 1.0, 2.0, 0.0, 1.0])
    starts = torch.tensor([[0, 0, 1, 2], [2, 2, 2, 2], [1, 0, 2, 1]])
    moves, swaps = candidate_deltas(counts, props, starts, weights=weights)
    base = proportion_loss(counts, props, starts, weights=weights)
    for s, c, lab in itertools.product(range(3), range(4), range(3)):
        a = starts[s].clone()
        if a[c] == lab:
            assert math.isinf(moves[s, c, lab])
            continue
        a[c] = lab
        want = proportion_loss(counts, props, a, weights=weights) - base[s]
        assert float(moves[s, c, lab]) == pytest.approx(float(want), abs=1e-12)
    for s, c1, c2 in itertools.product(range(3), range(4), range(4)):
        a = starts[s].clone()
        if c1 >= c2 or a[c1] == a[c2]:
            assert math.isinf(swaps[s, c1, c2])
            continue
        a[c1], a[c2] = starts[s, c2], starts[s, c1]
        want = proportion_loss(counts, props, a, weights=weights) - base[s]
        assert float(swaps[s, c1, c2]) == pytest.approx(float(want), abs=1e-12)


def _naive_step(counts, props, a, num_labels, swaps=True):
    """One steepest-descent step by trying every move in a Python loop (same tie order)."""
    k = a.numel()
    cur = float(proportion_loss(counts, props, a))
    best, best_a = 0.0, None
    candidates = [("m", c, lab) for c in range(k) for lab in range(num_labels)]
    if swaps:
        candidates += [("s", c1, c2) for c1 in range(k) for c2 in range(k)]
    for kind, i, j in candidates:
        b = a.clone()
        if kind == "m":
            if a[i] == j:
                continue
            b[i] = j
        else:
            if i >= j or a[i] == a[j]:
                continue
            b[i], b[j] = a[j], a[i]
        d = float(proportion_loss(counts, props, b)) - cur
        if d < best - 1e-12:
            best, best_a = d, b
    return best, best_a


@pytest.mark.parametrize("swaps", [True, False])
def test_vectorised_search_follows_the_naive_loop(swaps):
    counts, _, props = _planted(4, num_batches=10, k=5, num_labels=3, size=8)
    props = props + 0.2 * torch.rand(props.shape, generator=torch.Generator().manual_seed(2))
    props = props / props.sum(1, keepdim=True)
    a = torch.tensor([[0, 0, 0, 0, 0], [2, 1, 0, 2, 1]])
    for _step in range(20):
        res = local_search(counts, props, init=a, max_iter=1, swaps=swaps)
        for s in range(a.shape[0]):
            gain, naive = _naive_step(counts, props, a[s], 3, swaps)
            if naive is None:
                assert torch.equal(res.assignments[s], a[s])
            else:
                assert torch.equal(res.assignments[s], naive)
                drop = float(proportion_loss(counts, props, res.assignments[s]) - proportion_loss(counts, props, a[s]))
                assert drop == pytest.approx(gain, abs=1e-12)
        if torch.equal(res.assignments, a):
            assert res.converged
            break
        a = res.assignments
    else:
        pytest.fail("the search did not stop within 20 steps")


def test_swaps_escape_a_relabel_local_optimum():
    # two clusters, two labels, every batch half/half: any single relabel from the
    # swapped solution breaks the balance, only a swap reaches the optimum
    counts = torch.tensor([[3.0, 1.0], [1.0, 3.0], [2.0, 2.0]])
    props = predicted_proportions(counts, torch.tensor([0, 1]), 2)
    wrong = torch.tensor([[1, 0]])
    only_moves = local_search(counts, props, init=wrong, swaps=False)
    with_swaps = local_search(counts, props, init=wrong, swaps=True)
    assert torch.equal(only_moves.assignment, torch.tensor([1, 0]))
    assert torch.equal(with_swaps.assignment, torch.tensor([0, 1]))
    assert with_swaps.loss < only_moves.loss


def test_empty_batches_are_ignored_and_errors():
    counts, planted, props = _planted(2, num_batches=30, k=4, num_labels=2, size=10)
    counts[5] = 0
    props[5] = torch.tensor([1.0, 0.0], dtype=torch.float64)  # anything: weight 0
    res = local_search(counts, props, n_starts=8, generator=torch.Generator().manual_seed(0))
    assert res.loss == pytest.approx(0.0, abs=1e-20)
    with pytest.raises(ValueError, match="no batch"):
        local_search(torch.zeros(3, 2), torch.ones(3, 2) / 2)
    with pytest.raises(ValueError, match="no batch"):
        local_search(counts, props, weights=torch.zeros(30))
    bad = props.clone()
    bad[0, 0] = math.nan
    with pytest.raises(DataValidationError, match="NaN"):
        local_search(counts, bad)
    nan_counts = counts.clone()
    nan_counts[0, 0] = math.nan
    with pytest.raises(DataValidationError, match="finite"):
        local_search(nan_counts, props)
    with pytest.raises(ValueError, match="rows of cluster_counts"):
        local_search(counts, props[:-1])
    with pytest.raises(DataValidationError, match="0..1"):
        local_search(counts, props, init=torch.tensor([[0, 1, 2, 0]]))
