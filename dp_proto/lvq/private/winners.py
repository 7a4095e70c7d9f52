"""Winners and winner distances that do not depend on the rest of the batch.

A BLAS product rounds row ``i`` of a batch's distances ``D (B, W)`` differently
depending on how many rows the batch holds and where row ``i`` sits. Two things the
DP-SGD step takes from a record's row are not continuous in it: which prototypes win
(``w+``, ``w-``) and whether ``d+ + d-`` is at the clamp of ``mu``. A record within a few
ulps of a tie could change its winner when another record joins the batch, which moves
its clipped gradient by up to ``2 C``. And near two prototypes the expanded form
``|x|^2 + |w|^2 - 2 x.w`` loses the winners' distances to cancellation, so the ratio of
the two derivatives, and with it the direction of the clipped gradient, would follow the
batch's rounding.

``settled_winners`` therefore

1. bounds the rounding error of every row, ``e_i`` (``DistanceTerms.rounding_bound``,
   from the norms of the record, the prototypes and the metric: the worst case of
   ``gamma_n`` times the operands' sizes, for the batch's product and for the
   index-order one alike);
2. takes the winners of rows whose decisions are clear by more than ``4 e_i`` (the gap
   to the runner-up in the target's class and in the other classes, and the distance of
   ``d+ + d-`` from the clamp) from the batch's distances: they equal the winners in exact
   arithmetic, whatever the batch;
3. recomputes the other rows in index order (``dp_proto._rowwise``: the same bits
   in any batch) and takes their winners from those;
4. returns the winners' distances from explicit differences, ``||x_i - w_k||^2`` (GLVQ)
   or ``||Omega x_i - Omega w_k||^2`` (the metric layers), and for the recomputed rows in
   index order.

A row that is clear in one batch has, in exact arithmetic, a gap above ``2 e_i``, so the
index-order values of any other batch pick the same winners: the decisions are those of
the record and the model alone. Only float64 is settled (the dtype the clipped sum's
bound is proved for); in float32 ``e_i`` is ``2^29`` times larger and would send most
rows down the slow path.
"""

from __future__ import annotations

from typing import Protocol

from torch import Tensor

from dp_proto.lvq.losses import DISTANCE_SUM_CLAMP, glvq_winners, glvq_winners_and_runner_up_gaps
from dp_proto.lvq.settle import SETTLED_DTYPES

__all__ = ["DistanceTerms", "settled_winners"]


class DistanceTerms(Protocol):
    """A batch's distances with what ``settled_winners`` needs of their layer."""

    distances: Tensor  # (B, W), as the layer's forward computes them

    def rounding_bound(self) -> Tensor:
        """``(B,)``: a bound on the rounding error of every entry of row ``i`` of
        ``distances`` and of ``ordered_rows``."""
        ...

    def ordered_rows(self, rows: Tensor) -> Tensor:
        """``(m, W)``: the distances of the records ``rows (m,)``, each row a fixed
        sequence of IEEE operations on that record and the parameters."""
        ...

    def winner_distances(self, index: Tensor) -> Tensor:
        """``(B, 2)``: the distances to the winners ``index (B, 2)`` from explicit
        differences (kept for the clipping norms and sums)."""
        ...


def settled_winners(
    terms: DistanceTerms, targets: Tensor, prototype_labels: Tensor, *, check: bool = True
) -> tuple[Tensor, Tensor]:
    """The winners ``(B, 2)`` (``w+``, ``w-``) of every record and their distances
    ``(B, 2)``, as functions of the record and the model alone (float64; see the module
    docstring). One host sync: whether any row is near a decision."""
    distances = terms.distances
    if distances.dtype not in SETTLED_DTYPES or distances.shape[0] == 0:
        index, _ = glvq_winners(distances, targets, prototype_labels, check=check)
        return index, terms.winner_distances(index)
    index, gaps = glvq_winners_and_runner_up_gaps(distances, targets, prototype_labels, check=check)
    winner_distances = terms.winner_distances(index)
    margin = 4.0 * terms.rounding_bound()
    near = (gaps <= margin) | ((winner_distances.sum(1) - DISTANCE_SUM_CLAMP).abs() <= 2.0 * margin)
    if not bool(near.any()):
        return index, winner_distances
    rows = near.nonzero().squeeze(1)
    ordered = terms.ordered_rows(rows)
    ordered_index, ordered_distances = glvq_winners(ordered, targets[rows], prototype_labels, check=False)
    index = index.index_put((rows,), ordered_index)
    winner_distances = terms.winner_distances(index).index_put((rows,), ordered_distances)
    return index, winner_distances
