"""Equilibrium points of an SVDD support function (Park 2022, Phase II, Sec. 5.2).

With random Fourier features (``||phi(x)|| = 1``) the support function of a centre
``a (F,)`` is

    f(x) = ||phi(x) - a||^2 = 1 - 2 phi(x) . a + ||a||^2,

and with ``P = x W`` (``W (d, F/2)`` the frequencies, cosine and sine of a frequency
interleaved in ``phi``)

    grad f(x) = -2 sqrt(2/F) (a_sin * cos(P) - a_cos * sin(P)) W^T.

Phase II runs the gradient dynamics ``dx/dt = -grad f(x)`` from many starting points at
once (one ``(m, d)`` tensor), with the schedule of Park 2022 (a fixed learning rate, divided
by 5 for the last 20 % of the iterations), merges end points closer than a tolerance
into equilibrium points and maps every start to its equilibrium point (its basin).

The support function, its gradient and so the dynamics of a point are rounded
independently of the other points evaluated with it (``dp_proto._rowwise``): a
record's score and end point do not depend on the batch, which the private releases of
``dp_proto.svdd.estimators`` rely on.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from dp_proto._rowwise import ordered_matmul, ordered_row_sum
from dp_proto.svdd.features import RandomFourierFeatures

__all__ = ["support_function", "support_gradient", "descend", "merge_points", "Equilibria", "find_equilibria"]


def _split_centre(features: RandomFourierFeatures, centre: Tensor) -> tuple[Tensor, Tensor]:
    if centre.shape != (features.num_features,):
        raise ValueError(f"centre must have shape ({features.num_features},), got {tuple(centre.shape)}")
    return centre[0::2], centre[1::2]  # cosine and sine coefficients, each (F/2,)


def support_function(features: RandomFourierFeatures, centre: Tensor, x: Tensor) -> Tensor:
    """``f(x) = ||phi(x) - a||^2`` for ``x (m, d)``: shape ``(m,)``."""
    phi = features(x)
    return ordered_row_sum((phi - centre.to(phi)).square())


def support_gradient(features: RandomFourierFeatures, centre: Tensor, x: Tensor) -> Tensor:
    """``grad f(x)`` for ``x (m, d)`` in closed form: shape ``(m, d)``, cost ``O(m d F)``."""
    a_cos, a_sin = _split_centre(features, centre)
    w = features.frequencies.to(x)
    p = ordered_matmul(x, w)  # (m, F/2)
    inner = a_sin.to(x) * torch.cos(p) - a_cos.to(x) * torch.sin(p)
    return -2.0 * math.sqrt(2.0 / features.num_features) * ordered_matmul(inner, w.T)


def descend(
    features: RandomFourierFeatures,
    centre: Tensor,
    starts: Tensor,
    *,
    lr: float,
    iters: int,
    decay_at: float = 0.8,
    decay: float = 0.2,
) -> Tensor:
    """``iters`` gradient steps ``x <- x - eta grad f(x)`` from every row of ``starts
    (m, d)`` at once; ``eta = lr``, times ``decay`` from iteration ``decay_at * iters``
    on (the schedule of Park 2022: 1/5 after 80 %). Returns the end points ``(m, d)``."""
    if not lr > 0 or iters < 0:
        raise ValueError(f"need lr > 0 and iters >= 0, got lr={lr}, iters={iters}")
    x = starts.clone()
    switch = int(math.floor(decay_at * iters))
    for t in range(iters):
        eta = lr * (decay if t >= switch else 1.0)
        x = x - eta * support_gradient(features, centre, x)
    return x


def merge_points(points: Tensor, tol: float) -> tuple[Tensor, Tensor]:
    """Merge points that fall into the same cell of a grid of width ``tol``.

    Returns the cell means ``(k, d)`` and every point's cell index ``(m,)``. Points
    closer than ``tol`` can still land in neighbouring cells when they straddle a cell
    boundary; after the dynamics have converged, distinct equilibrium points lie far
    more than ``tol`` apart, so this matters only for unconverged runs.
    """
    if not tol > 0:
        raise ValueError(f"tol must be > 0, got {tol}")
    if points.dim() != 2:
        raise ValueError(f"expected points (m, d), got {tuple(points.shape)}")
    cells = torch.round(points / tol).to(torch.int64)
    _, index = torch.unique(cells, dim=0, return_inverse=True)
    k = int(index.max()) + 1 if index.numel() else 0
    sums = torch.zeros((k, points.shape[1]), dtype=points.dtype, device=points.device).index_add_(0, index, points)
    counts = torch.bincount(index, minlength=k).to(points.dtype)
    return sums / counts[:, None], index


class Equilibria(NamedTuple):
    """Equilibrium points ``(k, d)``, the basin (equilibrium index) of every start
    ``(m,)``, the end points of the dynamics ``(m, d)`` and the gradient norm at each
    equilibrium point ``(k,)`` (small where the dynamics converged)."""

    points: Tensor
    basin: Tensor
    ends: Tensor
    gradient_norm: Tensor


def find_equilibria(
    features: RandomFourierFeatures,
    centre: Tensor,
    starts: Tensor,
    *,
    lr: float,
    iters: int,
    tol: float = 1e-3,
    decay_at: float = 0.8,
    decay: float = 0.2,
) -> Equilibria:
    """Phase II: run the dynamics from ``starts (m, d)``, merge the end points closer
    than ``tol`` into equilibrium points and assign every start to its basin.

    The equilibrium points depend on ``starts``: for a differentially private release
    the starts must not be training records (use a grid or random points of the public
    domain); the centre must be the private one.
    """
    if starts.dim() != 2 or starts.shape[1] != features.in_features:
        raise ValueError(f"starts must have shape (m, {features.in_features}), got {tuple(starts.shape)}")
    ends = descend(features, centre, starts, lr=lr, iters=iters, decay_at=decay_at, decay=decay)
    points, basin = merge_points(ends, tol)
    gradient_norm = torch.linalg.vector_norm(support_gradient(features, centre, points), dim=-1)
    return Equilibria(points, basin, ends, gradient_norm)
