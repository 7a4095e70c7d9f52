"""Row-independent products: every output row is a fixed sequence of IEEE operations on
that row's inputs alone.

A BLAS product ``a @ b`` rounds a row of its result differently depending on the
number of rows, their position and the thread count (blocking, small-matrix kernels,
split reductions). When the rows are records and a private release counts how many
scores fall below a threshold, one record more can then move *other* records' scores
across it. The helpers here accumulate over the contraction index in index order, one
elementwise multiplication and one elementwise addition per term, so the value of row
``i`` depends on ``a[i]`` and ``b`` only, bit for bit.

The cost is ``k`` passes over an ``(m, n)`` buffer instead of one GEMM; it is meant for
the record-wise maps of private SVDD (``k`` the input dimension or the number of random
features) and the few near-tie rows of a DP-SGD batch (``dp_proto.lvq.private.winners``).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["ordered_matmul", "ordered_row_sum", "ordered_sq_distances", "rounding_gamma"]


def ordered_matmul(a: Tensor, b: Tensor) -> Tensor:
    """``a (..., k) @ b (k, n)`` with ``out[..., j] = (((a_0 b_0j + a_1 b_1j) + a_2 b_2j) + ...)``
    in index order: shape ``(..., n)``, dtype of ``a`` and ``b`` promoted."""
    if b.dim() != 2 or a.shape[-1] != b.shape[0]:
        raise ValueError(f"cannot multiply shapes {tuple(a.shape)} and {tuple(b.shape)}")
    k = b.shape[0]
    if k == 0:
        return torch.zeros((*a.shape[:-1], b.shape[1]), dtype=torch.result_type(a, b), device=a.device)
    cols = a.movedim(-1, 0).unsqueeze(-1)  # (k, ..., 1)
    out = cols[0] * b[0]
    for j in range(1, k):
        out.add_(cols[j] * b[j])
    return out


def ordered_row_sum(t: Tensor) -> Tensor:
    """Sum of ``t (..., k)`` over its last dimension in index order: shape ``(...)``."""
    k = t.shape[-1]
    if k == 0:
        return torch.zeros(t.shape[:-1], dtype=t.dtype, device=t.device)
    cols = t.movedim(-1, 0)
    out = cols[0].clone()
    for j in range(1, k):
        out.add_(cols[j])
    return out


def ordered_sq_distances(points: Tensor, refs: Tensor) -> Tensor:
    """Squared Euclidean distances ``||points_i - refs_j||^2`` of ``points (m, d)`` and
    ``refs (r, d)``, summed over the coordinates in index order: shape ``(m, r)``."""
    if points.dim() != 2 or refs.dim() != 2 or points.shape[1] != refs.shape[1]:
        raise ValueError(f"expected (m, d) and (r, d), got {tuple(points.shape)} and {tuple(refs.shape)}")
    out = torch.zeros((points.shape[0], refs.shape[0]), dtype=torch.result_type(points, refs), device=points.device)
    for j in range(points.shape[1]):
        out.add_((points[:, j, None] - refs[:, j]).square())
    return out


def rounding_gamma(n: int, dtype: torch.dtype) -> float:
    """``gamma_n = n u / (1 - n u)`` for the unit roundoff ``u`` of ``dtype``: the relative
    error bound of a sum or dot product of ``n`` terms (Higham 2002, section 3.1)."""
    nu = n * torch.finfo(dtype).eps / 2.0
    if nu >= 0.5:
        raise ValueError(f"gamma_{n} is not defined for {dtype}: n u = {nu}")
    return nu / (1.0 - nu)
