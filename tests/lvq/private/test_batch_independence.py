"""A record's clipped gradient does not depend on the rest of its batch (float64, every engine).

BLAS rounds a row of the batch's distances differently by batch size and row position.
Two states turn those last bits into large moves of other records' clipped gradients:

* records near two close prototypes of different classes: the expanded distances
  ``|x|^2 + |w|^2 - 2 x.w`` lose ``d+`` and ``d-`` to cancellation, and the ratio of the
  derivatives (the direction of the clipped gradient) followed the batch: 63 such
  records and a canary moved the GLVQ sum by 1.013 ``C`` at ``d = 617`` (0.1 ``C`` for
  one record's own gradient) before the winners' distances were taken from explicit
  differences;
* records on an exact tie of two prototypes of one class: the winner followed the batch
  (0.059 ``C`` here for GLVQ at ``d = 617``; up to ``2 C`` per record) before near-tie rows
  were recomputed in index order.
"""

from __future__ import annotations

import pytest
import torch

from dp_proto.lvq.layers import GLVQLayer, GMLVQLayer, LGMLVQLayer
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private.fused import CLIPPED_SUM_SLACK
from tests.lvq.private.clipped_sums import ENGINES, engine_sum

DTYPE = torch.float64
SLACK = CLIPPED_SUM_SLACK[DTYPE]
LAYERS = {"glvq": GLVQLayer, "gmlvq": GMLVQLayer, "lgmlvq": LGMLVQLayer}
CLIP = 1e-3
DIMENSIONS = {"glvq": 617, "gmlvq": 64, "lgmlvq": 16}


def _model(kind: str, prototypes: torch.Tensor, labels: list[int]) -> PrototypeModel:
    layer = LAYERS[kind](prototypes.shape[1], len(labels)).to(DTYPE)
    with torch.no_grad():
        layer.prototypes.copy_(prototypes)
    return PrototypeModel(layer, torch.tensor(labels))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("kind", sorted(LAYERS))
def test_records_near_a_close_pair_keep_their_gradient(kind: str, engine: str) -> None:
    d = DIMENSIONS[kind]
    worst = 0.0
    for seed in range(8):
        gen = torch.Generator().manual_seed(seed)
        base = torch.rand(d, generator=gen, dtype=DTYPE) * 2 - 1
        offset = 10.0 ** -(4 + seed % 4)
        far = torch.rand(d, generator=gen, dtype=DTYPE) * 2 - 1
        pair = base + offset * torch.randn(d, generator=gen, dtype=DTYPE)
        model = _model(kind, torch.stack([base, pair, far]), [0, 1, 1])
        x = base + 0.3 * offset * torch.randn(63, d, generator=gen, dtype=DTYPE)
        y = torch.zeros(63, dtype=torch.long)
        canary = torch.rand(1, d, generator=gen, dtype=DTYPE) * 2 - 1
        # the canary first, so that every other row moves; C small, so every record is clipped
        with_canary = engine_sum(engine, model, torch.cat([canary, x]), torch.cat([y[:1], y]), CLIP)
        moved = float(torch.linalg.vector_norm(with_canary - engine_sum(engine, model, x, y, CLIP))) / CLIP
        worst = max(worst, moved)
    assert worst <= 1.0 + SLACK, f"{kind} {engine}: the sum moved by {worst:.6g} C"


def _tie_state(kind: str, seed: int) -> tuple[PrototypeModel, torch.Tensor]:
    """A class-0 record exactly as far from two class-1 prototypes (one the other with
    two coordinates swapped, where the record's coordinates are equal), and its model."""
    d = DIMENSIONS[kind]
    gen = torch.Generator().manual_seed(seed)
    record = torch.rand(d, generator=gen, dtype=DTYPE) * 2 - 1
    record[1] = record[0]
    first = torch.rand(d, generator=gen, dtype=DTYPE) * 2 - 1
    second = first.clone()
    second[[0, 1]] = first[[1, 0]]
    own = record + 0.5 * torch.randn(d, generator=gen, dtype=DTYPE)
    return _model(kind, torch.stack([own, first, second]), [0, 1, 1]), record


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("kind", sorted(LAYERS))
def test_a_record_on_a_tie_keeps_its_winner_in_any_batch(kind: str, engine: str) -> None:
    d = DIMENSIONS[kind]
    worst = 0.0
    for seed in range(8):
        model, record = _tie_state(kind, seed)
        gen = torch.Generator().manual_seed(100 + seed)
        others = torch.rand(64, d, generator=gen, dtype=DTYPE) * 2 - 1
        alone = engine_sum(engine, model, record[None], torch.zeros(1, dtype=torch.long), 1.0)
        for size, position in ((1, 1), (2, 1), (7, 3), (15, 9), (63, 0), (63, 31)):
            batch = torch.cat([others[:position], record[None], others[position:size]])
            labels = torch.zeros(len(batch), dtype=torch.long)
            with_record = engine_sum(engine, model, batch, labels, 1.0)
            without = engine_sum(engine, model, others[:size], torch.zeros(size, dtype=torch.long), 1.0)
            worst = max(worst, float(torch.linalg.vector_norm(with_record - without - alone)))
    assert worst <= SLACK, f"{kind} {engine}: the record's clipped gradient moved by {worst:.6g} C with its batch"


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("kind", sorted(LAYERS))
def test_records_next_to_coincident_prototypes_keep_their_gradient(kind: str, engine: str) -> None:
    """Records within 1e-8 of two coincident prototypes of different classes on a corner:
    their distances are about the rounding error of the expansion. A per-sample engine
    that differentiates one record's forward (functorch) took the derivative of the
    expansion, zero where it rounded below zero and clamped; that followed the batch
    (LGMLVQ, ``d = 3``: 2.38 ``C`` with the canary placed first)."""
    d = 3
    worst = 0.0
    for seed in range(4):
        gen = torch.Generator().manual_seed(seed)
        corner = -torch.ones(d, dtype=DTYPE)
        far = torch.rand(d, generator=gen, dtype=DTYPE) * 2 - 1
        model = _model(kind, torch.stack([corner, corner, far]), [0, 1, 2])
        x = corner + 1e-8 * torch.randn(64, d, generator=gen, dtype=DTYPE)
        y = torch.zeros(64, dtype=torch.long)
        canary = corner + 1e-12 * torch.randn(1, d, generator=gen, dtype=DTYPE)
        with_canary = engine_sum(engine, model, torch.cat([canary, x]), torch.cat([y[:1], y]), 1.0)
        moved = float(torch.linalg.vector_norm(with_canary - engine_sum(engine, model, x, y, 1.0)))
        worst = max(worst, moved)
    assert worst <= 1.0 + SLACK, f"{kind} {engine}: the sum moved by {worst:.6g} C"
