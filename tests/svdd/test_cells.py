"""Phase III cells: the hypercube grouping against a direct greedy loop."""

import pytest
import torch

from dp_proto.svdd.cells import group_hypercubes, nearest_index


def _reference(points: torch.Tensor, r_max: float, order: torch.Tensor) -> torch.Tensor:
    """Eq. 5.6 as written: visit in order, a free point leads and takes its free cube."""
    cube = torch.full((points.shape[0],), -1, dtype=torch.int64)
    n = 0
    for leader in order.tolist():
        if cube[leader] >= 0:
            continue
        take = (cube < 0) & ((points - points[leader]).abs().amax(1) <= r_max)
        cube[take] = n
        n += 1
    return cube


@pytest.mark.parametrize(
    "k, d, r_max, scale",
    [
        (1, 3, 0.5, 1.0),
        (2, 1, 0.5, 0.1),
        (300, 2, 0.3, 1.0),
        (500, 9, 0.5, 1.0),
        (400, 4, 0.2, 0.1),
        (50, 3, 10.0, 1.0),
    ],
)
@pytest.mark.parametrize("seed", [0, 1])
def test_grouping_equals_the_greedy_definition(k, d, r_max, scale, seed):
    gen = torch.Generator().manual_seed(seed)
    points = scale * torch.randn(k, d, generator=gen)
    order = torch.randperm(k, generator=gen)
    assert torch.equal(group_hypercubes(points, r_max, order), _reference(points, r_max, order))


def test_grouping_with_ties_and_duplicates():
    points = torch.tensor([[0.0, 0.0], [0.5, 0.0], [1.0, 0.0], [1.0, 0.0], [2.0, 2.0]])
    order = torch.arange(5)
    # distances exactly r_max are inside; duplicates fall into the same cube
    assert group_hypercubes(points, 0.5, order).tolist() == [0, 0, 1, 1, 2]
    assert torch.equal(group_hypercubes(points, 0.5, order.flip(0)), _reference(points, 0.5, order.flip(0)))


def test_grouping_rejects_bad_radius_and_handles_no_points():
    with pytest.raises(ValueError, match="r_max"):
        group_hypercubes(torch.zeros(3, 2), 0.0, torch.arange(3))
    assert group_hypercubes(torch.zeros(0, 2), 1.0, torch.arange(0)).shape == (0,)


def test_nearest_index_ties_go_to_the_lower_index():
    refs = torch.tensor([[0.0], [2.0], [2.0]])
    assert nearest_index(torch.tensor([[1.0], [1.9], [5.0]]), refs).tolist() == [0, 1, 1]
