"""k-means in torch: greedy k-means++ seeding and Lloyd iterations, all restarts at once.

The models of the LLP algorithm (Sachweh, Boiar and Liebig, Sec. 3, after
Stolpe, Liebig and Morik 2015) are k-means clusterings of a node's own
windows whose clusters are then labelled from label proportions. This module
is the clustering: the ``n_init`` restarts run side by side as one batch of
tensors ``(n_init, n, k)``, so the cost per Lloyd step is a few batched matrix
products whatever ``n_init`` is, and everything runs on the device of ``x``.

The algorithm follows scikit-learn's ``KMeans(init="k-means++",
algorithm="lloyd")``: greedy k-means++ with ``2 + floor(ln k)`` candidate
centres per step (the candidate that lowers the potential most is kept),
Lloyd iterations until the squared centre shift is at most ``tol`` times the
mean per-feature variance of ``x``, empty clusters moved to the points
farthest from their centres, and the restart with the lowest inertia returned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from dp_proto._neighbours import check_points, squared_distances

__all__ = ["KMeansResult", "kmeans", "predict", "squared_distances"]


@dataclass(frozen=True)
class KMeansResult:
    """The best of the restarts of ``kmeans``.

    Attributes
    ----------
    centres : Tensor of shape (k, d)
        In the dtype of the input (float64 for integer input).
    labels : Tensor of shape (n,), int64
        Nearest centre of every point (ties to the lower index).
    inertia : float
        Sum of squared distances of the points to their centres.
    n_iter : int
        Lloyd iterations of the returned restart.
    """

    centres: Tensor
    labels: Tensor
    inertia: float
    n_iter: int


def predict(centres: Tensor, x: Tensor) -> Tensor:
    """Index of the nearest centre for every row of ``x``.

    Parameters
    ----------
    centres : Tensor of shape (k, d)
    x : Tensor of shape (n, d)
        Finite; moved to the device and dtype of ``centres``.

    Returns
    -------
    Tensor of shape (n,), int64
        Ties go to the lower index.
    """
    if centres.dim() != 2 or centres.shape[0] < 1:
        raise ValueError(f"centres must have shape (k, d) with k >= 1, got {tuple(centres.shape)}")
    x = check_points(x).to(device=centres.device, dtype=centres.dtype)
    if x.shape[1] != centres.shape[1]:
        raise ValueError(f"x has {x.shape[1]} features, the centres {centres.shape[1]}")
    if x.shape[0] == 0:
        return torch.zeros(0, dtype=torch.int64, device=centres.device)
    return squared_distances(x, centres).argmin(1)


def _kmeans_plusplus(x: Tensor, k: int, n_runs: int, generator: torch.Generator | None) -> Tensor:
    """Greedy k-means++ seeds for ``n_runs`` runs at once: ``(n_runs, k, d)``."""
    n = x.shape[0]
    trials = 2 + int(math.log(k))
    rows = torch.arange(n_runs, device=x.device)
    first = torch.randint(0, n, (n_runs,), generator=generator, device=x.device)
    centres = x.new_empty((n_runs, k, x.shape[1]))
    centres[:, 0] = x[first]
    closest = squared_distances(x, centres[:, :1]).squeeze(2)  # (S, n)
    for c in range(1, k):
        pot = closest.sum(1, keepdim=True)
        # all points on the chosen centres (fewer distinct points than k): draw uniformly
        weights = torch.where(pot > 0, closest, torch.ones_like(closest))
        cand = torch.multinomial(weights, trials, replacement=True, generator=generator)  # (S, T)
        d = squared_distances(x, x[cand])  # (S, n, T)
        d = torch.minimum(d, closest[:, :, None])
        best = d.sum(1).argmin(1)  # (S,)
        centres[:, c] = x[cand[rows, best]]
        closest = d[rows, :, best]
    return centres


def kmeans(
    x: Tensor,
    k: int,
    *,
    n_init: int = 3,
    max_iter: int = 100,
    tol: float = 1e-6,
    generator: torch.Generator | None = None,
) -> KMeansResult:
    """k-means clustering (greedy k-means++ seeding, Lloyd iterations), restarts batched.

    Parameters
    ----------
    x : Tensor of shape (n, d)
        Finite points, ``n >= k``. Integer input is converted to float64.
    k : int
        Number of clusters, >= 1.
    n_init : int, default 3
        Restarts; all run at once, the one with the lowest inertia is returned.
    max_iter : int, default 100
        Most Lloyd iterations per restart.
    tol : float, default 1e-6
        A restart stops when the summed squared shift of its centres is at most
        ``tol * mean(var(x, axis=0))`` (scikit-learn's rule; 0 iterates until the
        assignment no longer changes or ``max_iter``).
    generator : torch.Generator, optional
        Source of all random draws (first centres, then the k-means++
        candidates), on the device of ``x``.

    Returns
    -------
    KMeansResult

    Raises
    ------
    ValueError
        ``x`` not 2-d, ``n < k``, or a bad ``k``, ``n_init``, ``max_iter``, ``tol``.
    DataValidationError
        NaN or inf in ``x``.
    """
    x = check_points(x)
    for name, value, low in (("k", k, 1), ("n_init", n_init, 1), ("max_iter", max_iter, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if not (isinstance(tol, (int, float)) and math.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")
    n = x.shape[0]
    if n < k:
        raise ValueError(f"k-means needs at least k={k} points, got {n}")
    tol_abs = float(tol) * float(x.var(0, correction=0).mean()) if n > 1 else 0.0

    centres = _kmeans_plusplus(x, k, n_init, generator)
    ks = torch.arange(k, device=x.device)
    active = torch.ones(n_init, dtype=torch.bool, device=x.device)
    n_iter = torch.zeros(n_init, dtype=torch.int64, device=x.device)
    for _ in range(max_iter):
        dist = squared_distances(x, centres)  # (S, n, k)
        mind, labels = dist.min(2)
        onehot = (labels[:, :, None] == ks).to(x.dtype)  # (S, n, k)
        counts = onehot.sum(1)  # (S, k)
        new = onehot.transpose(1, 2) @ x / counts.clamp_min(1.0)[:, :, None]
        empty = counts == 0
        if bool(empty.any()):
            # move empty clusters to the points farthest from their centres, one each
            far = mind.argsort(1, descending=True)  # (S, n)
            rank = (empty.cumsum(1) - 1).clamp_min(0)
            new = torch.where(empty[:, :, None], x[far.gather(1, rank)], new)
        shift = ((new - centres) ** 2).sum((1, 2))
        centres = torch.where(active[:, None, None], new, centres)
        n_iter += active.long()
        active = active & (shift > tol_abs)
        if not bool(active.any()):
            break
    dist = squared_distances(x, centres)
    mind, labels = dist.min(2)
    inertia = mind.sum(1)
    best = int(inertia.argmin())
    return KMeansResult(centres[best].clone(), labels[best].clone(), float(inertia[best]), int(n_iter[best]))
