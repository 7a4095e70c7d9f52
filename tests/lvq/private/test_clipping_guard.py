"""The cancellation guard in Opacus' per-sample modes: floors of the clipping norms."""

from __future__ import annotations

import pytest
import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer, DPOptimizerFastGradientClipping, DPPerLayerOptimizer

from dp_proto.lvq.layers import GLVQLayer, GMLVQLayer
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private import fit_dp_sgd
from dp_proto.lvq.private.dpsgd import fixed_noise_recipe
from dp_proto.lvq.private.guard import ClippingGuard
from dp_proto.lvq.private.opacus_adapter import make_noise_sound
from dp_proto.privacy import PrivacyLedger


def _clipped_sum(model: PrototypeModel, x, y, floors, *, per_layer: bool = False) -> torch.Tensor:
    gsm = GradSampleModule(model, batch_first=True, loss_reduction="sum")
    params = [p for p in model.parameters() if p.requires_grad]
    base = torch.optim.SGD(params, lr=0.0)
    if per_layer:
        opt = DPPerLayerOptimizer(
            base, noise_multiplier=0.0, max_grad_norm=[1.0] * len(params), expected_batch_size=1, loss_reduction="sum"
        )
    else:
        opt = DPOptimizer(base, noise_multiplier=0.0, max_grad_norm=1.0, expected_batch_size=1, loss_reduction="sum")
    make_noise_sound(opt, expected_batch_size=1, norm_floors=floors)
    model.loss(gsm(x), y, reduction="sum").backward()
    opt.clip_and_accumulate()
    out = torch.cat([p.summed_grad.reshape(-1) for p in params])
    gsm._close()
    return out


def _model(dtype=torch.float64) -> PrototypeModel:
    layer = GMLVQLayer(2, 2, prototypes=torch.tensor([[0.5, 0.5], [-0.5, 0.2]], dtype=dtype), normalize=False)
    return PrototypeModel(layer.to(dtype), [0, 1])


@pytest.mark.parametrize("per_layer", [False, True])
def test_a_record_is_clipped_by_its_norm_raised_to_the_floor(per_layer):
    x = torch.tensor([[0.9, 0.1], [-0.3, 0.4]], dtype=torch.float64)
    y = torch.tensor([0, 1])
    plain = _clipped_sum(_model(), x, y, None, per_layer=per_layer)
    none = _clipped_sum(_model(), x, y, lambda: {}, per_layer=per_layer)
    torch.testing.assert_close(none, plain)  # no floors: Opacus' own clipping
    model = _model()
    huge = {p: torch.full((2,), 1e6, dtype=torch.float64) for p in model.parameters()}
    floored = _clipped_sum(model, x, y, lambda: huge, per_layer=per_layer)
    assert 0 < floored.norm() < 1e-5 * plain.norm()  # every record scaled by about C / 1e6
    model = _model()
    nan = {p: torch.tensor([float("nan"), 0.0], dtype=torch.float64) for p in model.parameters()}
    second_only = _clipped_sum(model, x, y, lambda: nan, per_layer=per_layer)
    alone = _clipped_sum(_model(), x[1:], y[1:], None, per_layer=per_layer)
    torch.testing.assert_close(second_only, alone)  # a NaN floor: the record contributes zero


def test_the_guard_gives_the_norm_samplers_clipping_norms():
    model = _model()
    guard = ClippingGuard(model, loss_reduction="sum")
    x = torch.tensor([[0.9, 0.1], [0.5, 0.5 + 1e-9]], dtype=torch.float64)  # the second on a prototype
    distances = model(x)
    model.loss(distances, torch.tensor([0, 1]), reduction="sum").backward()
    floors = guard()
    assert set(floors) == {model.layer.prototypes, model.layer.omega}
    assert all(f.shape == (2,) and bool(torch.isfinite(f).all()) for f in floors.values())
    assert guard() == {}  # a step is read once
    guard.remove()
    assert not model.layer._forward_hooks


def test_the_mean_reduction_is_scaled_back_by_the_batch_size():
    x = torch.tensor([[0.9, 0.1], [-0.3, 0.4], [0.1, 0.1]], dtype=torch.float64)
    y = torch.tensor([0, 1, 0])
    floors = {}
    for reduction in ("sum", "mean"):
        model = _model()
        guard = ClippingGuard(model, loss_reduction=reduction)
        model.loss(model(x), y, reduction=reduction).backward()
        floors[reduction] = guard()[model.layer.omega]
    torch.testing.assert_close(floors["mean"], floors["sum"])


def test_ghost_clipping_takes_no_floors_and_a_layer_without_sampler_gives_none():
    params = [torch.nn.Parameter(torch.zeros(2))]
    opt = DPOptimizerFastGradientClipping(
        torch.optim.SGD(params, lr=0.1), noise_multiplier=1.0, max_grad_norm=1.0, expected_batch_size=1
    )
    with pytest.raises(ValueError, match="ghost clipping"):
        make_noise_sound(opt, expected_batch_size=1, norm_floors=lambda: {})

    class OtherLayer(GLVQLayer):
        pass

    model = PrototypeModel(OtherLayer(2, 2), [0, 1])
    guard = ClippingGuard(model)
    model.loss(model(torch.rand(3, 2)), torch.tensor([0, 1, 0])).backward()
    assert guard() == {}


def test_fit_dp_sgd_takes_the_guard_off_the_layer_when_done():
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(40, 2, generator=gen, dtype=torch.float64) * 2 - 1
    y = torch.arange(40) % 2
    for mode in ("hooks", "functorch"):
        model = _model()
        fit_dp_sgd(
            model,
            x,
            y,
            fixed_noise_recipe(0.5, 2, max_grad_norm=1.0, engine="opacus", grad_sample_mode=mode),
            ledger=PrivacyLedger(),
            expected_batch_size=20,
            noise_multiplier=1.0,
            generator=torch.Generator().manual_seed(1),
        )
        assert not model.layer._forward_hooks
