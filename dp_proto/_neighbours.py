"""Nearest-neighbour helpers shared by LLP and SVDD: checked point sets, squared
distances and brute-force k-nearest-neighbour classification in torch.

Sachweh, Boiar and Liebig compare (private) LLP with a centralised, fully supervised
kNN (``k = 16``) that sees every label. ``knn_predict`` is that reference:
squared Euclidean distances of a chunk of test points to all training points
(one matrix product, as ``torch.cdist``'s matrix-product mode but without the
square root, which does not change the order), the ``k`` smallest by
``torch.topk``, then a majority vote. It runs on the device of its inputs (or
``device``), CPU or CUDA, and holds one ``(chunk, n)`` block of distances at a time.

Ties are resolved deterministically, so CPU and CUDA give the same answer:

* equal distances at the ``k``-th place go to the lower training index (as
  ``nearest_neighbours``); integer-valued features such
  as traffic counts have many exactly equal distances, computed exactly in float64;
* classes with the same number of votes go to the class of the nearest of their
  neighbours (scikit-learn's ``KNeighborsClassifier`` takes the smallest label instead;
  both agree whenever the vote has a single winner).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from dp_proto.exceptions import DataValidationError

__all__ = ["check_points", "knn_neighbours", "knn_predict", "squared_distances"]


def check_points(x: Tensor, name: str = "x") -> Tensor:
    """``x`` as a floating ``(n, d)`` tensor without NaN or inf rows (else an error naming them)."""
    if not isinstance(x, Tensor):
        x = torch.as_tensor(x)
    if x.dim() != 2:
        raise ValueError(f"{name} must have shape (n, d), got {tuple(x.shape)}")
    if not x.is_floating_point():
        x = x.to(torch.float64)
    bad = ~torch.isfinite(x).all(1)
    if bool(bad.any()):
        rows = torch.nonzero(bad).flatten()
        shown = rows[:10].tolist()
        raise DataValidationError(
            f"{name} contains NaN or inf in row(s) {shown}{' ...' if rows.numel() > 10 else ''} "
            f"({rows.numel()} in all); remove or impute them"
        )
    return x


def squared_distances(x: Tensor, centres: Tensor) -> Tensor:
    """Squared Euclidean distances ``||x_i - c_j||^2``, clamped at 0.

    Parameters
    ----------
    x : Tensor of shape (n, d)
    centres : Tensor of shape (k, d) or (S, k, d)

    Returns
    -------
    Tensor of shape (n, k) or (S, n, k)
    """
    x2 = (x * x).sum(-1)
    c2 = (centres * centres).sum(-1)
    if centres.dim() == 2:
        d = torch.addmm(x2[:, None] + c2[None, :], x, centres.T, alpha=-2.0)
    else:
        base = x2[None, :, None] + c2[:, None, :]
        d = torch.baddbmm(base, x.expand(centres.shape[0], *x.shape), centres.transpose(1, 2), alpha=-2.0)
    return d.clamp_min_(0.0)


#: Distances held at once by the automatic chunk size (``chunk * n``, about 32 MiB in float64).
DEFAULT_BLOCK = 1 << 22


def _as_points(x, name: str, device) -> Tensor:
    t = x if isinstance(x, Tensor) else torch.as_tensor(np.asarray(x))
    if device is not None:
        t = t.to(device)
    return check_points(t, name)


def _select(d: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The ``k`` smallest entries of every row of ``d`` (chunk, n), ties to the lower column.

    Returns indices and distances of shape (chunk, k), ordered by (distance, index).
    """
    vals, idx = torch.topk(d, k, dim=1, largest=False, sorted=True)
    kth = vals[:, -1:]
    # rows where more than k points are within the k-th distance: topk's choice
    # among the points at exactly that distance is arbitrary; redo them by index
    ambiguous = torch.nonzero((d <= kth).sum(1) > k).flatten()
    if ambiguous.numel():
        sub = d[ambiguous]
        sub_kth = kth[ambiguous]
        below = sub < sub_kth
        at = sub == sub_kth
        room = k - below.sum(1, keepdim=True)
        keep = below | (at & (torch.cumsum(at, dim=1) <= room))
        cols = torch.nonzero(keep)[:, 1].view(-1, k)  # ascending index within each row
        idx[ambiguous] = cols
        vals[ambiguous] = sub.gather(1, cols)
    # order by distance, equal distances by training index
    idx, perm = idx.sort(dim=1)
    vals = vals.gather(1, perm)
    vals, perm = vals.sort(dim=1, stable=True)
    return idx.gather(1, perm), vals


def knn_neighbours(
    train_x,
    test_x,
    k: int = 16,
    *,
    chunk: int | None = None,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor]:
    """Indices and squared distances of the ``k`` nearest training points of every test point.

    Parameters
    ----------
    train_x : array-like or Tensor of shape (n, d)
    test_x : array-like or Tensor of shape (m, d)
    k : int, default 16
        ``1 <= k <= n``.
    chunk : int, optional
        Test points per block; default ``max(1, 2**22 // n)``.
    device : torch.device or str, optional
        Where to compute; default the device of ``train_x`` (CPU for arrays).

    Returns
    -------
    idx : Tensor of shape (m, k), int64
        Nearest first; equal distances in order of the training index.
    dist2 : Tensor of shape (m, k)
        Squared Euclidean distances, in the common floating dtype (float64 for integers).
    """
    train = _as_points(train_x, "train_x", device)
    test = _as_points(test_x, "test_x", train.device)
    dtype = torch.promote_types(train.dtype, test.dtype)
    train, test = train.to(dtype), test.to(dtype)
    n, m = train.shape[0], test.shape[0]
    if test.shape[1] != train.shape[1]:
        raise ValueError(f"test_x has {test.shape[1]} features, train_x {train.shape[1]}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n:
        raise ValueError(f"k must be an int in 1..{n} (the training points), got {k!r}")
    if chunk is None:
        chunk = max(1, DEFAULT_BLOCK // max(n, 1))
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ValueError(f"chunk must be an int >= 1, got {chunk!r}")
    idx = torch.empty((m, int(k)), dtype=torch.int64, device=train.device)
    dist = torch.empty((m, int(k)), dtype=dtype, device=train.device)
    for lo in range(0, m, int(chunk)):
        hi = min(m, lo + int(chunk))
        idx[lo:hi], dist[lo:hi] = _select(squared_distances(test[lo:hi], train), int(k))
    return idx, dist


def knn_predict(
    train_x,
    train_y,
    test_x,
    k: int = 16,
    num_classes: int | None = None,
    *,
    chunk: int | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Majority vote of the ``k`` nearest training points (Euclidean), ties to the nearest.

    Parameters
    ----------
    train_x : array-like or Tensor of shape (n, d)
    train_y : array-like or Tensor of shape (n,), int in ``0 .. num_classes - 1``
    test_x : array-like or Tensor of shape (m, d)
    k : int, default 16
        Neighbours, ``1 <= k <= n``.
    num_classes : int, optional
        Default ``max(train_y) + 1``.
    chunk : int, optional
        Test points per block of distances (memory ``chunk * n``); default
        ``max(1, 2**22 // n)``.
    device : torch.device or str, optional
        Where to compute; default the device of ``train_x``.

    Returns
    -------
    Tensor of shape (m,), int64
        On the compute device. A class with more votes wins; among classes with
        equally many votes, the class of the nearest neighbour among them (equal
        distances: lower training index).

    Raises
    ------
    ValueError
        Shapes that do not match, ``k`` out of range, labels outside the classes.
    DataValidationError
        NaN or inf features.
    """
    train = _as_points(train_x, "train_x", device)
    y = train_y if isinstance(train_y, Tensor) else torch.as_tensor(np.asarray(train_y))
    y = y.to(train.device)
    if y.shape != (train.shape[0],):
        raise ValueError(f"train_y must have shape ({train.shape[0]},), got {tuple(y.shape)}")
    if y.is_floating_point() or y.dtype == torch.bool:
        raise ValueError(f"train_y must hold integers, got {y.dtype}")
    y = y.long()
    if num_classes is None:
        num_classes = int(y.max()) + 1 if y.numel() else 1
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        raise ValueError(f"train_y has labels outside 0..{num_classes - 1}")
    idx, _ = knn_neighbours(train, test_x, k, chunk=chunk)
    labels = y[idx]  # (m, k), nearest first
    votes = torch.zeros((labels.shape[0], int(num_classes)), dtype=torch.int64, device=labels.device)
    votes.scatter_add_(1, labels, torch.ones_like(labels))
    tied = votes == votes.max(1, keepdim=True).values  # (m, C): the classes with the most votes
    first = tied.gather(1, labels).to(torch.uint8).argmax(1)  # nearest neighbour of a winning class
    return labels.gather(1, first[:, None]).squeeze(1)
