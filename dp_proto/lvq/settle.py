"""Distances whose decisions do not depend on the rest of the batch.

A BLAS product rounds row ``i`` of a batch's distances ``D (B, W)`` differently
depending on how many rows the batch holds and where row ``i`` sits. The GLVQ cost takes
two things from a row that are not continuous in it: the order of its entries (which
prototypes win) and whether the two winners' sum is at the clamp of ``mu``; and near a
prototype the expanded form ``|x|^2 + |w|^2 - 2 x.w`` loses the distance to
cancellation, so the ratio of the winners' derivatives would follow the batch's rounding.

``settle_distances`` (used by ``PrototypeModel.forward``; float64 only) takes the layer's
rounding bound ``e_i`` per row (``rounding_bound``) and, without looking at labels,

* recomputes in index order (``ordered_distances``: the same bits in any batch) every row
  with two entries within ``4 e_i`` of each other, or whose second-smallest entry lies
  within ``8 e_i`` of the clamp: their order and clamp are then those of the record and
  the model alone, and a row clear of them has the exact-arithmetic order in any batch;
* replaces every other entry below ``2^40 e_i`` by its value from explicit differences
  (``pair_distances``), so that an entry's relative error is at most ``2^-40`` or
  ``gamma_n``.

The result carries the values of the settled distances and the gradient of the layer's
(straight through), so Opacus' hooks see the usual backprops at the layer's output.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from dp_proto.lvq.layers import GLVQLayer
from dp_proto.lvq.losses import DISTANCE_SUM_CLAMP

__all__ = ["settle_distances", "SETTLED_DTYPES", "EXPLICIT_BELOW"]

#: The dtypes whose distances ``settle_distances`` settles (the dtype the clipped sum's
#: bound is proved for; in float32 ``e_i`` is ``2^29`` times larger and most rows would
#: take the slow path).
SETTLED_DTYPES = (torch.float64,)

#: Entries below this multiple of the row's rounding bound are recomputed from explicit
#: differences.
EXPLICIT_BELOW = 2.0**40


class _StraightThrough(torch.autograd.Function):
    """Forward: the settled values; backward: the gradient passed on to the layer's output."""

    @staticmethod
    def forward(ctx: Any, distances: Tensor, settled: Tensor) -> Tensor:
        return settled.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad, None


def settle_distances(layer: GLVQLayer, x: Tensor, distances: Tensor) -> Tensor:
    """``distances (B, W)`` of ``layer`` at ``x (B, d)`` (flattened, in the layer's dtype)
    with the rows near a decision recomputed in index order and the entries near zero from
    explicit differences (see the module docstring). One host sync; unchanged (the same
    tensor) outside ``SETTLED_DTYPES`` or when nothing is near."""
    if distances.dtype not in SETTLED_DTYPES or distances.numel() == 0:
        return distances
    with torch.no_grad():
        values = distances.detach()
        bound = layer.rounding_bound(x)  # (B,)
        margin = 4.0 * bound
        near_row = torch.zeros_like(bound, dtype=torch.bool)
        if values.shape[1] > 1:
            ordered = values.sort(1).values
            near_row = ((ordered[:, 1:] - ordered[:, :-1]) <= margin[:, None]).any(1)
            near_row |= ordered[:, 1] <= DISTANCE_SUM_CLAMP + 2.0 * margin
        near_zero = (values <= EXPLICIT_BELOW * bound[:, None]) & ~near_row[:, None]
        if not bool(near_row.any() | near_zero.any()):
            return distances
        settled = values.clone()
        rows, cols = near_zero.nonzero(as_tuple=True)
        if rows.numel():
            settled[rows, cols] = layer.pair_distances(x[rows].detach(), cols[:, None]).squeeze(1)
        rows = near_row.nonzero().squeeze(1)
        if rows.numel():
            settled[rows] = layer.ordered_distances(x[rows].detach())
    return _StraightThrough.apply(distances, settled)
