"""The clipped per-sample gradient sum of every DP-SGD engine, as one function each.

``engine_sum(engine, model, x, y, C)`` returns the pre-noise sum ``sum_i clip_C(g_i)``
that the engine would noise at one step, flattened over the trainable parameters,
computed in the model's dtype: the fused engine (joint or per-parameter clipping),
Opacus' ``hooks``, ``functorch`` and ``ghost`` modes (with noise 0 and no scaling), and
the per-record engine (in float64).
"""

from __future__ import annotations

import copy
import warnings

import torch
from opacus import GradSampleModule
from opacus.grad_sample import GradSampleModuleFastGradientClipping
from opacus.optimizers import DPOptimizer, DPOptimizerFastGradientClipping
from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping
from torch import Tensor

from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private import opacus_adapter  # noqa: F401  (registers the samplers)
from dp_proto.lvq.private.fused import clipped_gradient_sum
from dp_proto.lvq.private.guard import ClippingGuard
from dp_proto.lvq.private.opacus_adapter import make_noise_sound
from dp_proto.lvq.private.opacus_engine import _finite_batch, _GLVQCriterion
from dp_proto.lvq.private.per_record import per_record_clipped_sum

ENGINES = ("fused", "fused_per_parameter", "hooks", "functorch", "ghost", "per_record")


def engine_sum(
    engine: str,
    model: PrototypeModel,
    x: Tensor,
    y: Tensor,
    max_grad_norm: float,
    *,
    transfer_fn: str = "identity",
    beta: float = 1.0,
) -> Tensor:
    """The clipped gradient sum ``(P,)`` of ``engine`` on the batch ``x (B, d)``, ``y (B,)``."""
    model = copy.deepcopy(model)
    params = [p for p in model.parameters() if p.requires_grad]
    if engine == "per_record":
        return per_record_clipped_sum(model, x, y, max_grad_norm, transfer_fn=transfer_fn, beta=beta)[0]
    if engine.startswith("fused"):
        clipping = "per_parameter" if engine == "fused_per_parameter" else "joint"
        for p in params:
            p.grad = torch.zeros_like(p)
        clipped_gradient_sum(model, x, y, max_grad_norm, clipping=clipping, transfer_fn=transfer_fn, beta=beta)
        return torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None])
    criterion = _GLVQCriterion(model, transfer_fn, beta)  # the library's own (ghost sets its reduction)
    criterion.reduction = "sum"
    base = torch.optim.SGD(params, lr=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if engine == "ghost":  # as fit_dp_sgd: records whose clipping norm is not finite are left out
            x, y = _finite_batch(model, x, y, transfer_fn, beta)
            gsm = GradSampleModuleFastGradientClipping(
                model, batch_first=True, loss_reduction="sum", max_grad_norm=max_grad_norm, use_ghost_clipping=True
            )
            opt = DPOptimizerFastGradientClipping(
                base, noise_multiplier=0.0, max_grad_norm=max_grad_norm, expected_batch_size=1, loss_reduction="sum"
            )
            DPLossFastGradientClipping(gsm, opt, criterion, loss_reduction="sum")(gsm(x), y).backward()
            return torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None])
        gsm = GradSampleModule(model, batch_first=True, loss_reduction="sum", force_functorch=engine == "functorch")
        opt = DPOptimizer(
            base, noise_multiplier=0.0, max_grad_norm=max_grad_norm, expected_batch_size=1, loss_reduction="sum"
        )
        # as fit_dp_sgd: the records' norms raised to the layer's cancellation guard
        make_noise_sound(opt, expected_batch_size=1, norm_floors=ClippingGuard(model, loss_reduction="sum"))
        criterion(gsm(x), y).backward()
        opt.clip_and_accumulate()
    return torch.cat([p.summed_grad.reshape(-1) for p in params])
