"""The per-record engine: every record differentiated alone, so a trainable backbone's
features, and the clipped sum, do not follow the batch's rounding."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dp_proto.lvq import GLVQLayer, GMLVQLayer, LGMLVQLayer, PrototypeModel
from dp_proto.lvq.private.dpsgd import DPSGD, fit_dp_sgd, fixed_noise_recipe
from dp_proto.lvq.private.per_record import per_record_clipped_sum
from dp_proto.privacy import PrivacyLedger
from dp_proto.privacy.dpsgd_plan import DPSGDPlan
from dp_proto.privacy.testing import capture_releases, sum_movement
from tests.lvq.private.clipped_sums import engine_sum


def _tie_state(seed: int) -> tuple[PrototypeModel, torch.Tensor, torch.Tensor]:
    """A trainable linear backbone that maps 8 features into the null space of its first
    row: the tie of two class-0 prototypes, which a batched forward rounds differently
    for a batch of one and of two."""
    gen = torch.Generator().manual_seed(seed)
    backbone = nn.Linear(8, 2, bias=False).double()
    with torch.no_grad():
        backbone.weight.copy_(torch.randn(2, 8, generator=gen, dtype=torch.float64))
        backbone.weight[0] *= 1e6
    prototypes = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 3.0]], dtype=torch.float64)
    model = PrototypeModel(GLVQLayer(2, 3, prototypes=prototypes, dtype=torch.float64), [0, 0, 1], backbone=backbone)
    tie = backbone.weight[0].detach() / backbone.weight[0].detach().norm()
    x = torch.rand(5, 8, generator=gen, dtype=torch.float64) * 2 - 1
    return model, x - (x @ tie)[:, None] * tie, torch.zeros(5, dtype=torch.long)


def _worst(engine_of) -> float:
    clip, worst = 0.05, 0.0  # every record's gradient clipped to C
    for seed in range(20):
        model, x, y = _tie_state(seed)
        for i in range(4):  # a batch of one against a batch of two
            worst = max(
                worst,
                sum_movement(
                    lambda xb, yb, m=model: engine_of(m, xb, yb, clip),
                    (x[i : i + 1], y[i : i + 1]),
                    (x[4:], y[4:]),
                    clip,
                    placements=("last", "first"),
                ),
            )
    return worst


def test_a_trainable_backbone_at_a_tie_moves_the_per_record_sum_by_at_most_c():
    """Opacus' hooks engine, which runs the backbone over the batch, moves by 2.08 C here;
    the per-record engine by at most C (1 + 1e-9)."""
    assert _worst(lambda m, xb, yb, c: engine_sum("hooks", m, xb, yb, c)) > 1.5
    assert _worst(lambda m, xb, yb, c: per_record_clipped_sum(m, xb, yb, c)[0]) <= 1.0 + 1e-9


@pytest.mark.parametrize("layer", [GLVQLayer, GMLVQLayer, LGMLVQLayer])
def test_the_per_record_sum_is_the_other_engines_clipped_sum(layer):
    """Away from ties and kinks the engines clip the same per-sample gradients: Opacus'
    hooks with a trainable backbone (joint clipping), the fused engine per parameter."""
    gen = torch.Generator().manual_seed(1)
    backbone = nn.Sequential(nn.Linear(5, 4), nn.Tanh()).double()
    model = PrototypeModel(layer(4, 3, dtype=torch.float64), [0, 1, 2], backbone=backbone)
    x, y = torch.rand(12, 5, generator=gen, dtype=torch.float64) * 2 - 1, torch.arange(12) % 3
    ours, costs = per_record_clipped_sum(model, x, y, 0.3, transfer_fn="sigmoid", beta=4.0)
    theirs = engine_sum("hooks", model, x, y, 0.3, transfer_fn="sigmoid", beta=4.0)
    assert costs.shape == (12,) and ours.dtype == torch.float64
    assert torch.allclose(ours, theirs.double(), rtol=1e-9, atol=1e-12)
    head = PrototypeModel(layer(4, 3, dtype=torch.float64), [0, 1, 2])
    features = backbone(x).detach()
    ours, _ = per_record_clipped_sum(head, features, y, 0.3, clipping="per_parameter", transfer_fn="sigmoid", beta=4.0)
    theirs = engine_sum("fused_per_parameter", head, features, y, 0.3, transfer_fn="sigmoid", beta=4.0)
    assert torch.allclose(ours, theirs.double(), rtol=1e-9, atol=1e-12)


def test_fit_dp_sgd_trains_with_the_per_record_engine():
    """The same steps and ledger events as the other engines; the full-batch steps
    declare their sensitivity, and the backbone trains."""
    gen = torch.Generator().manual_seed(2)
    x, y = torch.rand(30, 5, generator=gen) * 2 - 1, torch.arange(30) % 2
    model = PrototypeModel(GMLVQLayer(3, 2), [0, 1], backbone=nn.Linear(5, 3))
    before = model.backbone.weight.detach().clone()
    recipe = DPSGD(plan=DPSGDPlan(epsilon=1.0, delta=1e-5, sampling_rate=0.5, epochs=2), engine="per_record")
    ledger = PrivacyLedger()
    result = fit_dp_sgd(model, x, y, recipe, ledger=ledger, expected_batch_size=15.0)
    assert result.steps == recipe.steps == 4 and ledger.events
    assert not torch.equal(before, model.backbone.weight)
    with capture_releases() as recorder, pytest.warns(Warning):
        fit_dp_sgd(
            model,
            x,
            y,
            fixed_noise_recipe(1.0, 2, engine="per_record"),
            ledger=PrivacyLedger(),
            expected_batch_size=30.0,
            noise_multiplier=1.0,
            generator=torch.Generator().manual_seed(0),
        )
    steps = [r for r in recorder.releases if r.name == "dp_sgd"]
    assert len(steps) == 2 and all(r.sensitivity is not None for r in steps)
