"""Phase II: support-function gradient, batched descent, merging into equilibrium points."""

import math

import pytest
import torch

from dp_proto.svdd import RandomFourierFeatures, solve_svdd_dual
from dp_proto.svdd.equilibrium import (
    descend,
    find_equilibria,
    merge_points,
    support_function,
    support_gradient,
)


def _features(d=2, F=400, gamma=1.0, seed=0):
    return RandomFourierFeatures(d, F, gamma, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_closed_form_gradient_equals_autograd():
    features = _features(d=3, F=64)
    centre = torch.randn(64, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 0.1
    x = torch.randn(20, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64).requires_grad_(True)
    support_function(features, centre, x).sum().backward()
    torch.testing.assert_close(support_gradient(features, centre, x.detach()), x.grad)
    with pytest.raises(ValueError, match="centre"):
        support_gradient(features, centre[:10], x.detach())


def test_support_function_uses_the_unit_norm_of_the_features():
    features = _features(F=32)
    centre = torch.randn(32, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 0.2
    x = torch.randn(10, 2, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    expected = 1 - 2 * features(x) @ centre + centre.square().sum()
    torch.testing.assert_close(support_function(features, centre, x), expected)


def test_descent_lowers_the_support_function_and_follows_the_schedule():
    features = _features()
    x0 = torch.tensor([[0.3, -0.2], [1.0, 1.0]], dtype=torch.float64)
    centre = features(torch.zeros(1, 2, dtype=torch.float64))[0]  # f has its minimum 0 at the origin
    ends = descend(features, centre, x0, lr=0.5, iters=200)
    assert (support_function(features, centre, ends) < support_function(features, centre, x0)).all()
    assert ends[0].norm() < 1e-3  # a start near the origin converges to it
    five = descend(features, centre, x0, lr=0.1, iters=5)  # 4 full steps, then 1/5 of a step
    x = x0
    for eta in (0.1, 0.1, 0.1, 0.1, 0.02):
        x = x - eta * support_gradient(features, centre, x)
    torch.testing.assert_close(five, x)
    with pytest.raises(ValueError, match="lr"):
        descend(features, centre, x0, lr=0.0, iters=5)


def test_merge_points_groups_nearby_points():
    points = torch.tensor([[0.0, 0.0], [1e-5, -1e-5], [1.0, 1.0], [1.0 + 2e-5, 1.0]], dtype=torch.float64)
    centres, index = merge_points(points, 1e-3)
    assert len(centres) == 2 and index[0] == index[1] and index[2] == index[3] and index[0] != index[2]
    torch.testing.assert_close(centres[index[2]], points[2:].mean(0))
    with pytest.raises(ValueError, match="tol"):
        merge_points(points, 0.0)


def test_two_clusters_give_two_equilibria_with_their_basins():
    """SVDD on two well-separated Gaussian clusters: the support function has one
    minimum per cluster; starts near each cluster end in its own equilibrium point."""
    g = torch.Generator().manual_seed(5)
    data = torch.cat(
        [
            torch.randn(150, 2, generator=g, dtype=torch.float64) * 0.3 + torch.tensor([-2.0, 0.0]),
            torch.randn(150, 2, generator=g, dtype=torch.float64) * 0.3 + torch.tensor([2.0, 0.0]),
        ]
    )
    features = _features(gamma=1.0, F=800)
    centre = solve_svdd_dual(features(data), 0.05 * 300).centre
    starts = torch.tensor([[-2.5, 0.4], [-1.6, -0.3], [2.4, 0.2], [1.7, -0.4]], dtype=torch.float64)
    eq = find_equilibria(features, centre, starts, lr=0.5, iters=300, tol=1e-2)
    assert len(eq.points) == 2
    assert eq.basin[0] == eq.basin[1] and eq.basin[2] == eq.basin[3] and eq.basin[0] != eq.basin[2]
    left, right = eq.points[eq.basin[0]], eq.points[eq.basin[2]]
    assert abs(left[0] + 2) < 0.5 and abs(right[0] - 2) < 0.5
    assert (eq.gradient_norm < 1e-3).all()  # converged
    assert math.isfinite(float(eq.ends.sum()))
