"""The per-record engine of ``fit_dp_sgd``: every record's gradient computed on its own.

Opacus' engines run the model once over the whole batch. A BLAS product rounds a row
differently for different batch sizes, so a trainable backbone's features, and with
them another record's winners and clipped gradient, follow the batch: a record near a
tie in feature space can change its winner when one record joins it (a move of up to
``2 C`` for that record), and every network with a kink (ReLU, max pooling) has the
same exposure. This engine computes each record's forward and backward alone, as a
batch of one: record ``i``'s clipped gradient is the same bits in any batch, so adding
or removing one record moves the clipped sum by that record's contribution, at most
``C``, plus the rounding of the sum of at most ``B + 1`` terms of norm at most ``C``,
accumulated in index order in float64 (docs/privacy-model.md).

The step is the DP-SGD step of the other engines (Abadi et al. 2016, Poisson sampling,
the library's float64 Gaussian noise, division by the public expected batch size) and
the ledger records the same events. A record is clipped jointly over every trainable
parameter (``clipping="joint"``) or per parameter to ``C / sqrt(P)``
(``"per_parameter"``), its norm raised to the prototype layer's cancellation guard
(``dp_proto.lvq.private.guard``); a record whose gradient or guard is not finite
contributes zero. It costs one forward and backward pass per record: use it where the
proof matters more than the speed (a trainable backbone).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private.engine_run import DPSGDResult, EngineRun
from dp_proto.lvq.private.fused import _NORM_GUARD, CLIPPED_SUM_SLACK, add_gaussian_noise
from dp_proto.lvq.private.guard import ClippingGuard
from dp_proto.privacy.dpsgd_plan import BudgetedEpochs
from dp_proto.privacy.randomness import fresh_generator
from dp_proto.privacy.sampling import poisson_batch_index
from dp_proto.privacy.testing import intercept

__all__ = ["fit_per_record", "per_record_clipped_sum", "clipped_record_sum", "noisy_gradients"]


def per_record_clipped_sum(
    model: PrototypeModel,
    x: Tensor,
    y: Tensor,
    max_grad_norm: float,
    *,
    clipping: str = "joint",
    transfer_fn: str = "identity",
    beta: float = 1.0,
    guard: ClippingGuard | None = None,
) -> tuple[Tensor, Tensor]:
    """The clipped gradient sum ``(P,)`` (float64, the trainable parameters flattened in
    ``model.parameters()`` order) and the per-record costs ``(B,)`` of the batch
    ``x (B, ...)``, ``y (B,)``, every record differentiated on its own and the clipped
    gradients added in index order.

    ``guard``: the prototype layer's ``ClippingGuard`` (``loss_reduction="sum"``), whose
    floors raise each record's per-parameter norms; one is made (and removed) if None.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    own = guard is None
    guard = ClippingGuard(model, loss_reduction="sum") if guard is None else guard

    def record_cost(i: int) -> Tensor:
        return model.loss(model(x[i : i + 1]), y[i : i + 1], transfer_fn=transfer_fn, beta=beta, reduction="sum")  # type: ignore[arg-type]

    try:
        return clipped_record_sum(record_cost, x.shape[0], params, max_grad_norm, clipping=clipping, floors=guard)
    finally:
        if own:
            guard.remove()


def clipped_record_sum(
    record_cost: Callable[[int], Tensor],
    count: int,
    params: list[nn.Parameter],
    max_grad_norm: float,
    *,
    clipping: str = "joint",
    floors: Callable[[], dict[Tensor, Tensor]] | None = None,
) -> tuple[Tensor, Tensor]:
    """``sum_i clip_C(grad record_cost(i))`` over ``i < count`` ``(P,)`` in float64 (the
    ``params`` flattened in order, each record's gradient formed alone and added in
    index order) and the costs ``(count,)``. ``floors``, called after each record's
    backward pass, gives per-parameter floors of its norms (the cancellation guard); a
    record whose gradient or floor is not finite contributes zero."""
    total = torch.zeros(sum(p.numel() for p in params), dtype=torch.float64)
    costs = torch.zeros(count, dtype=torch.float64)
    if params:
        total, costs = total.to(params[0].device), costs.to(params[0].device)
    bound = max_grad_norm / math.sqrt(len(params)) if params else 0.0
    for i in range(count):
        cost = record_cost(i)
        grads = torch.autograd.grad(cost, params, allow_unused=True)
        costs[i] = cost.detach()
        clipped = _clip_record(params, grads, floors() if floors is not None else {}, max_grad_norm, bound, clipping)
        if clipped is not None:
            total.add_(clipped)
    return total, costs


def _clip_record(
    params: list[nn.Parameter],
    grads: tuple[Tensor | None, ...],
    floors: dict[Tensor, Tensor],
    max_grad_norm: float,
    bound: float,
    clipping: str,
) -> Tensor | None:
    """One record's clipped gradient ``(P,)`` in float64, or None where it contributes zero
    (a gradient or a floor that is not finite)."""
    flat = [
        (g if g is not None else torch.zeros_like(p)).detach().reshape(-1).double()
        for p, g in zip(params, grads, strict=True)
    ]
    norms = []
    for p, g in zip(params, flat, strict=True):
        norm = torch.linalg.vector_norm(g)
        floor = floors.get(p)
        if floor is not None:
            norm = torch.maximum(norm, floor.reshape(()).to(norm.dtype))
        norms.append(norm)
    joint = torch.stack(norms).norm() if norms else torch.zeros((), dtype=torch.float64)
    if not bool(torch.isfinite(joint)) or not all(bool(torch.isfinite(g).all()) for g in flat):
        return None
    if clipping == "joint":
        factor = (max_grad_norm / (joint + _NORM_GUARD)).clamp(max=1.0)
        return torch.cat(flat).mul_(factor)
    return torch.cat([g * (bound / (n + _NORM_GUARD)).clamp(max=1.0) for g, n in zip(flat, norms, strict=True)])


def fit_per_record(
    model: PrototypeModel,
    x: Tensor,
    y: Tensor,
    run: EngineRun,
    optimizer: torch.optim.Optimizer,
    result: DPSGDResult,
    post_step: Callable[[], None],
) -> DPSGDResult:
    """The training loop of ``dp_proto.lvq.private.fit_dp_sgd`` with ``engine="per_record"``
    (call that function; this one expects its resolved settings)."""
    params = [p for p in model.parameters() if p.requires_grad]
    n, q = x.shape[0], run.sampling_rate
    sampling_gen = fresh_generator(x.device) if run.secure_mode else run.generator
    guard = ClippingGuard(model, loss_reduction="sum")
    epochs = BudgetedEpochs(run.ledger, run.noise_multiplier, q, run.steps, progress=run.progress)
    model.train()
    try:
        for epoch_steps in epochs:
            total, count = 0.0, 0
            for _ in range(epoch_steps):
                index = poisson_batch_index(n, q, sampling_gen, x.device)
                summed, costs = per_record_clipped_sum(
                    model,
                    x[index],
                    y[index],
                    run.max_grad_norm,
                    clipping=run.clipping,
                    transfer_fn=run.transfer_fn,
                    beta=run.beta,
                    guard=guard,
                )

                # a full batch declares its sensitivity to the neighbour check; a subsampled one cannot
                sensitivity = run.max_grad_norm * (1.0 + CLIPPED_SUM_SLACK[torch.float64]) if q >= 1.0 else None
                grads = noisy_gradients(
                    summed,
                    params,
                    run.noise_std,
                    run.expected_batch_size,
                    generator=run.generator,
                    secure_mode=run.secure_mode,
                    sensitivity=sensitivity,
                )
                for p, g in zip(params, grads, strict=True):
                    p.grad = g
                optimizer.step()
                post_step()  # renormalisation, iterate averaging: post-processing
                result.steps += 1
                total += float(costs.sum())
                count += len(index)
            result.epoch_losses.append(total / max(count, 1))
    finally:
        guard.remove()
    result.stopped_by_budget = epochs.stopped_by_budget
    return result


def noisy_gradients(
    summed: Tensor,
    params: list[nn.Parameter],
    noise_std: float,
    expected_batch: float,
    *,
    generator: torch.Generator | None,
    secure_mode: bool,
    sensitivity: float | None = None,
) -> list[Tensor]:
    """The ``"dp_sgd"`` release of the flat clipped sum ``summed (P,)`` (plus
    ``N(0, noise_std^2)`` per coordinate, the library's float64 sampler; ``sensitivity``
    in l2 declared to the neighbour check where known), split into ``params``' shapes and
    dtypes and divided by the public ``expected_batch``."""

    def draw() -> Tensor:
        if noise_std == 0:
            return summed.clone()
        return add_gaussian_noise(summed, noise_std, generator=generator, secure_mode=secure_mode)

    noisy = intercept("dp_sgd", summed, sensitivity, "l2" if sensitivity is not None else None, draw)
    sizes = [p.numel() for p in params]
    return [part.view(p.shape).to(p.dtype) / expected_batch for p, part in zip(params, noisy.split(sizes), strict=True)]
