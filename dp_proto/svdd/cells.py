"""Cells of Phase III: nearest equilibrium points and the hypercube grouping (eq. 5.6).

Pure tensor helpers used by ``dp_proto.svdd.estimators``; memory is bounded by
chunking, so ``n`` query points against ``k`` equilibrium points never allocate more
than about ``2^24`` distances at once.
"""

from __future__ import annotations

import torch
from torch import Tensor

from dp_proto._rowwise import ordered_sq_distances

__all__ = ["nearest_index", "group_hypercubes"]

_CHUNK_ELEMENTS = 1 << 24


def _chunks(n: int, k: int):
    step = max(1, _CHUNK_ELEMENTS // max(k, 1))
    for start in range(0, n, step):
        yield slice(start, min(n, start + step))


def nearest_index(points: Tensor, refs: Tensor) -> Tensor:
    """Index of the nearest row of ``refs (k, d)`` (Euclidean) for every row of
    ``points (n, d)``: shape ``(n,)``, int64. Ties go to the lower index. A point's
    index depends on that point and ``refs`` alone, not on the other points."""
    if refs.shape[0] == 0:
        raise ValueError("refs is empty: there is no point to be nearest to")
    out = torch.empty(points.shape[0], dtype=torch.int64, device=points.device)
    for sl in _chunks(points.shape[0], refs.shape[0]):
        out[sl] = ordered_sq_distances(points[sl], refs).argmin(1)
    return out


def group_hypercubes(points: Tensor, r_max: float, order: Tensor) -> Tensor:
    """Greedy leader grouping of equilibrium points into hypercubes (eq. 5.6).

    Visit ``points (k, d)`` in ``order`` (a permutation, e.g. by decreasing basin size);
    an unassigned point becomes a leader ``s_0`` and takes every unassigned point ``s_j``
    with ``||s_0 - s_j||_inf <= r_max``. Returns the cube index of every point ``(k,)``,
    cubes numbered in order of their leaders. The grouping uses nothing but ``points``
    and ``order``; it is data-independent whenever they are.
    """
    if not r_max > 0:
        raise ValueError(f"r_max must be > 0, got {r_max!r}")
    k = points.shape[0]
    cube = torch.full((k,), -1, dtype=torch.int64, device=points.device)
    ordered = points[order]
    free = torch.ones(k, dtype=torch.bool, device=points.device)
    pos = 0
    n_cubes = 0
    while True:
        # next unassigned leader in visiting order
        remaining = torch.nonzero(free[pos:], as_tuple=False)
        if remaining.numel() == 0:
            break
        pos += int(remaining[0, 0])
        dist = (ordered - ordered[pos]).abs().amax(1)
        take = free & (dist <= r_max)
        cube[order[take]] = n_cubes
        free &= ~take
        n_cubes += 1
    return cube
