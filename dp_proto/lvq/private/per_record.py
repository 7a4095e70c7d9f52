"""The per-record engine of ``fit_dp_sgd``: every record's gradient computed on its own.

Opacus' engines run the model once over the whole batch. A BLAS product rounds a row
differently for different batch sizes, so a trainable backbone's features, and with
them another record's winners and clipped gradient, follow the batch: a record near a
tie in feature space can change its winner when one record joins it (a move of up to
``2 C`` for that record), and every network with a kink (ReLU, max pooling) has the
same exposure. This engine computes each record's forward and backward alone, as a
batch of one: record ``i``'s gradient, its norm and its clip factor are the same bits
in any batch, so adding or removing one record moves the clipped sum by that record's
contribution, at most ``C``, plus the rounding of the float64 sum of at most ``B + 1``
terms of norm at most ``C`` (docs/privacy-model.md). The prototype layer's cancellation
guard (``dp_proto.lvq.private.guard``), which the batched engines need because their
rounding follows the batch, has nothing to bound here and is not applied.

The step is the DP-SGD step of the other engines (Abadi et al. 2016, Poisson sampling,
the library's float64 Gaussian noise, division by the public expected batch size) and
the ledger records the same events. A record is clipped jointly over every trainable
parameter (``clipping="joint"``) or per parameter to ``C / sqrt(P)``
(``"per_parameter"``); a record whose gradient is not finite contributes zero. It costs
one forward and backward pass per record: use it where the proof matters more than the
speed (a trainable backbone).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private.engine_run import DPSGDResult, EngineRun
from dp_proto.lvq.private.fused import _NORM_GUARD, CLIPPED_SUM_SLACK, add_gaussian_noise
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
) -> tuple[Tensor, Tensor]:
    """The clipped gradient sum ``(P,)`` (float64, the trainable parameters flattened in
    ``model.parameters()`` order) and the per-record costs ``(B,)`` of the batch
    ``x (B, ...)``, ``y (B,)``, every record differentiated on its own."""
    params = [p for p in model.parameters() if p.requires_grad]

    def record_cost(i: int) -> Tensor:
        return model.loss(model(x[i : i + 1]), y[i : i + 1], transfer_fn=transfer_fn, beta=beta, reduction="sum")  # type: ignore[arg-type]

    return clipped_record_sum(record_cost, x.shape[0], params, max_grad_norm, clipping=clipping)


def clipped_record_sum(
    record_cost: Callable[[int], Tensor],
    count: int,
    params: list[nn.Parameter],
    max_grad_norm: float,
    *,
    clipping: str = "joint",
) -> tuple[Tensor, Tensor]:
    """``sum_i clip_C(grad record_cost(i))`` over ``i < count`` ``(P,)`` in float64 (the
    ``params`` flattened in order, each record's gradient formed, measured and clipped
    alone, added in index order) and the costs ``(count,)``. A record whose gradient is
    not finite contributes zero."""
    sizes = [p.numel() for p in params]
    total = torch.zeros(sum(sizes), dtype=torch.float64)
    costs = torch.zeros(count, dtype=torch.float64)
    if params:
        total, costs = total.to(params[0].device), costs.to(params[0].device)
    for i in range(count):
        cost = record_cost(i)
        grads = torch.autograd.grad(cost, params, allow_unused=True)
        costs[i] = cost.detach()
        flat = torch.cat(
            [
                (g if g is not None else torch.zeros_like(p)).detach().reshape(-1)
                for p, g in zip(params, grads, strict=True)
            ]
        ).double()
        _add_clipped(total, flat, sizes, max_grad_norm, clipping)
    return total, costs


def _add_clipped(total: Tensor, flat: Tensor, sizes: list[int], max_grad_norm: float, clipping: str) -> None:
    """Add one record's gradient ``flat (P,)`` (float64), clipped jointly to ``C`` or per
    parameter (of ``sizes``) to ``C / sqrt(len(sizes))``, to ``total``; nothing where
    ``flat`` is not finite."""
    if clipping == "joint":
        clipped = flat.mul_((max_grad_norm / (torch.linalg.vector_norm(flat) + _NORM_GUARD)).clamp(max=1.0))
    else:
        bound = max_grad_norm / math.sqrt(len(sizes))
        parts = flat.split(sizes)
        norms = torch.stack([torch.linalg.vector_norm(part) for part in parts])
        factors = (bound / (norms + _NORM_GUARD)).clamp(max=1.0)
        clipped = torch.cat([part * f for part, f in zip(parts, factors, strict=True)])
    # a record with a non-finite gradient or norm keeps a non-finite entry: it adds zero (no host sync)
    total.add_(clipped.masked_fill_(~torch.isfinite(clipped).all(), 0.0))


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
    epochs = BudgetedEpochs(run.ledger, run.noise_multiplier, q, run.steps, progress=run.progress)
    model.train()
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
