"""A fused DP-SGD step for bare prototype layers: Opacus' algorithm without its overhead.

Opacus wraps the model in hooks, collates Poisson batches through a ``DataLoader`` and
clips in a generic ``DPOptimizer``; for a prototype layer, whose whole forward pass is
one small matrix product, that bookkeeping costs more than the arithmetic. This engine
runs the *same* DP-SGD step (Abadi et al. 2016, as in Opacus with Poisson sampling and
``loss_reduction="mean"``) directly on tensors:

1. Poisson sampling: every record joins the batch independently with probability ``q``
   (a public setting: neither ``q`` nor the number of steps depends on ``n``);
2. the distances ``D (B, W)`` and, in closed form, each record's cost and its gradient
   ``G = dL_i/dD_i`` (non-zero at the two winners only);
3. per-sample gradient norms in closed form (the norm samplers of
   ``dp_proto.lvq.private.grad_samplers``; no ``(B, r, d)`` tensor is built), clip
   factors ``min(1, C / (norm + 1e-6))`` jointly over all parameters, or per parameter
   with ``C / sqrt(P)`` each (``clipping="per_parameter"``, same sensitivity ``C``);
4. the *clipped sum* ``sum_i c_i grad L_i = sum_ij c_i G_ij grad D_ij`` in closed form
   (``dp_proto.lvq.gradients``: a few matrix products; autograd through the layer for
   other layer types). ``L_i``
   depends on row ``i`` of the distances only, so this is exact (ghost clipping);
5. Gaussian noise ``N(0, (sigma C)^2)`` on every coordinate of the sum, division by the
   expected batch size ``q n``, and an optimizer step (post-processing).

Its privacy accounting is that of Opacus' with the same ``(sigma, q, T)``: the ledger
records ``T`` Poisson-subsampled Gaussian steps. It needs a model whose trainable
parameters all sit in the prototype layer (a frozen, public backbone is allowed); a
trainable backbone needs Opacus' samplers (``engine="opacus"``).
"""

from __future__ import annotations

import math
from typing import cast

import torch
from torch import Tensor, nn

from dp_proto.lvq.gradients import DistanceEvaluation
from dp_proto.lvq.layers import GLVQLayer, GMLVQLayer, LGMLVQLayer
from dp_proto.lvq.losses import glvq_cost_and_gradient
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private.data_parallel import DataParallel
from dp_proto.lvq.private.grad_samplers import (
    glvq_norm_sample,
    gmlvq_norm_sample,
    lgmlvq_norm_sample,
)
from dp_proto.privacy.dpsgd_plan import BudgetedEpochs
from dp_proto.privacy.noise import gaussian_noise
from dp_proto.privacy.randomness import fresh_generator
from dp_proto.privacy.testing import intercept

__all__ = [
    "CLIPPED_SUM_SLACK",
    "clipped_gradient_sum",
    "dp_sgd_step",
    "poisson_batch_index",
    "fit_dp_sgd_fused",
    "check_fusable",
]

# Most specific class first (GMLVQLayer and LGMLVQLayer subclass GLVQLayer).
_NORM_SAMPLERS = ((LGMLVQLayer, lgmlvq_norm_sample), (GMLVQLayer, gmlvq_norm_sample), (GLVQLayer, glvq_norm_sample))

# Opacus' guard in the clip factor C / (norm + 1e-6).
_NORM_GUARD = 1e-6

#: Relative slack ``s`` of a full-batch step's declared sensitivity ``C (1 + s)`` in the
#: neighbour check: rounding of the clipped sum as computed (docs/privacy-model.md).
CLIPPED_SUM_SLACK = {torch.float32: 1e-4, torch.float64: 1e-9}


def _norm_sampler(layer: GLVQLayer):
    for cls, sampler in _NORM_SAMPLERS:
        if type(layer) is cls:
            return sampler
    raise TypeError(f"no closed-form norm sampler for {type(layer).__name__}")  # pragma: no cover


def check_fusable(model: PrototypeModel) -> None:
    """``ValueError`` unless the layer is a ``GLVQLayer``, ``GMLVQLayer`` or
    ``LGMLVQLayer`` (exactly: a subclass may compute another distance, whose per-sample
    gradient norms the closed forms do not know) and every trainable parameter of
    ``model`` is in it."""
    if type(model.layer) not in (GLVQLayer, GMLVQLayer, LGMLVQLayer):
        raise ValueError(
            f"the fused DP-SGD engine knows the per-sample gradient norms of GLVQLayer, GMLVQLayer and "
            f"LGMLVQLayer only, not of {type(model.layer).__name__} (its distance may differ). Use "
            "engine='opacus' (per-sample gradients of the layer's own forward)."
        )
    layer_params = {id(p) for p in model.layer.parameters()}
    outside = [name for name, p in model.named_parameters() if p.requires_grad and id(p) not in layer_params]
    if outside:
        raise ValueError(
            "the fused DP-SGD engine trains prototype layers only; these trainable parameters "
            f"lie outside the layer: {outside[:3]}{'...' if len(outside) > 3 else ''}. "
            "Use engine='opacus' (Opacus' per-sample gradients for the backbone)."
        )


CLIPPING_MODES = ("joint", "per_parameter")


def clipped_gradient_sum(
    model: PrototypeModel,
    x: Tensor,
    y: Tensor,
    max_grad_norm: float,
    *,
    clipping: str = "joint",
    transfer_fn: str = "identity",
    beta: float = 1.0,
    check_labels: bool = True,
) -> tuple[Tensor, Tensor]:
    """Accumulate the clipped per-sample gradients' sum into ``p.grad`` of the layer's
    trainable parameters, ``g_i`` the gradient of record ``i``'s GLVQ cost.

    ``clipping="joint"``: ``sum_i min(1, C / (||g_i|| + 1e-6)) g_i`` over all parameters
    together (the DP-LVQ papers, Opacus' default). ``"per_parameter"``: each of the ``P``
    trainable parameters (prototypes, Omega) is clipped to ``C / sqrt(P)`` on its own,
    so that a large metric gradient does not crowd the prototypes out of the budget;
    the concatenated clipped gradient still has norm at most ``C``, so the sensitivity
    and the noise ``N(0, (sigma C)^2)`` are unchanged (Opacus' ``per_layer`` clipping).

    Parameters
    ----------
    x : Tensor, shape (B, ...); y : Tensor, shape (B,); ``B`` may be 0.
    check_labels : bool
        Check that every target has a prototype (a host sync per call; the training
        loop checks once up front and passes False).

    A record whose distances or norms overflow (features far beyond any public bound)
    contributes zero: a NaN in one row would otherwise make the whole sum NaN.

    Returns
    -------
    (joint per-sample clipping norms ``(B,)``, not finite for a record that contributes
    zero; per-sample costs ``(B,)``), both detached.
    """
    if clipping not in CLIPPING_MODES:
        raise ValueError(f"clipping must be one of {CLIPPING_MODES}, got {clipping!r}")
    layer = model.layer
    with torch.no_grad():
        features = model.features(x).reshape(x.shape[0], layer.in_features).to(layer.prototypes.dtype)
        if features.shape[0] == 0:
            empty = features.new_zeros(0)
            return empty, empty
        # distances (B, W) once; the norms and the clipped sum reuse its projections
        evaluation = DistanceEvaluation(layer, features)
        distances = evaluation.distances
        projections = evaluation.projections  # GMLVQ: (x Omega^T, w Omega^T), else None
        # backprops[i] = dL_i/dD_i: L_i depends on row i of the distances only.
        costs, backprops, winners, coef = glvq_cost_and_gradient(
            distances,
            y,
            model.prototype_labels,
            check=check_labels,
            transfer_fn=transfer_fn,  # type: ignore[arg-type]
            beta=beta,
            return_winners=True,
        )
        if type(layer) is GLVQLayer:
            return _glvq_clipped_sum(layer, features, winners, coef, max_grad_norm), costs
        norms_by_param = _per_sample_norms(layer, features, backprops, projections)
        if not norms_by_param:
            return distances.new_zeros(distances.shape[0]), costs
        norms = torch.stack(list(norms_by_param.values()), 0).pow(2).sum(0).sqrt()
        if not bool(torch.isfinite(norms).all()):  # a record whose distances overflow contributes 0
            overflowed = ~torch.isfinite(norms)
            features = torch.where(overflowed[:, None], 0.0, features)
            backprops = torch.where(overflowed[:, None], 0.0, backprops)
            norms = torch.where(overflowed, math.inf, norms)  # clip factor C / inf = 0
            norms_by_param = {p: torch.where(overflowed, math.inf, n) for p, n in norms_by_param.items()}
            evaluation = DistanceEvaluation(layer, features)  # no inf left for a zero weight to meet
        if clipping == "joint":
            factor = (max_grad_norm / (norms + _NORM_GUARD)).clamp(max=1.0)
            weights = {p: backprops * factor[:, None] for p in norms_by_param}
        else:
            bound = max_grad_norm / math.sqrt(len(norms_by_param))
            weights = {
                p: backprops * (bound / (n + _NORM_GUARD)).clamp(max=1.0)[:, None] for p, n in norms_by_param.items()
            }
        for param, grad in evaluation.gradients(weights).items():
            if param.grad is None:
                param.grad = grad
            else:
                param.grad.add_(grad)
    return norms, costs


def _glvq_clipped_sum(layer: GLVQLayer, x: Tensor, index: Tensor, coef: Tensor, max_grad_norm: float) -> Tensor:
    """GLVQ's clipped sum from explicit per-record vectors, accumulated into
    ``prototypes.grad``; returns the per-sample gradient norms ``(B,)`` (not finite for a
    record that contributes zero).

    Record ``i``'s gradient is ``-2 G_ik (x_i - w_k)`` at its two winners ``k``
    (``index``, ``coef``: ``(B, 2)``), on two distinct rows of the prototypes: formed
    from the differences and clipped by their own norm, so no cancellation can hide a
    large term (the guard of the closed forms is not needed), and one ``index_add`` of
    ``(2B, d)`` rows replaces the dense ``(W, B) @ (B, d)`` product.
    """
    w = layer.prototypes
    if not w.requires_grad:
        return x.new_zeros(x.shape[0])
    flat = index.reshape(-1)
    diff = x.unsqueeze(1) - w.index_select(0, flat).view(*index.shape, -1)  # (B, 2, d)
    norms = 2.0 * torch.linalg.vector_norm(coef * torch.linalg.vector_norm(diff, dim=-1), dim=1)
    factor = (max_grad_norm / (norms + _NORM_GUARD)).clamp(max=1.0)
    weight = torch.where(torch.isfinite(norms), factor, 0.0)[:, None] * coef
    weight = torch.where(weight.isfinite(), weight * -2.0, 0.0)  # a NaN row (overflow) adds nothing
    update = (weight.unsqueeze(2) * diff).reshape(-1, diff.shape[-1])
    grad = torch.zeros_like(w).index_add_(0, flat, update)
    if w.grad is None:
        w.grad = grad
    else:
        w.grad.add_(grad)
    return norms


def _per_sample_norms(
    layer: GLVQLayer,
    x: Tensor,
    backprops: Tensor,
    projections: tuple[Tensor, Tensor] | None,
) -> dict[nn.Parameter, Tensor]:
    """Per-sample clipping norms ``(B,)`` of each trainable parameter of the layer: the
    gradient norm, at least ``CANCELLATION_GUARD`` times the record's term magnitude
    (``dp_proto.lvq.private.grad_samplers``), so that no clipped record's terms in the
    closed-form sum can outgrow ``C / CANCELLATION_GUARD``.

    GMLVQ reuses the distances' projections; LGMLVQ: its norm sampler (GLVQ takes
    ``_glvq_clipped_sum``).
    """
    if projections is not None:
        return gmlvq_norm_sample(cast(GMLVQLayer, layer), [x], backprops, projections)
    return _norm_sampler(layer)(layer, [x], backprops)


def fit_dp_sgd_fused(
    model: PrototypeModel,
    x: Tensor,
    y: Tensor,
    *,
    ledger,
    noise_multiplier: float,
    sampling_rate: float,
    max_grad_norm: float,
    steps: int,
    expected_batch_size: float,
    optimizer: torch.optim.Optimizer,
    result,
    post_step,
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
    clipping: str = "joint",
    transfer_fn: str = "identity",
    beta: float = 1.0,
    progress: bool = False,
    data_parallel: DataParallel | None = None,
):
    """The training loop of ``dp_proto.lvq.private.fit_dp_sgd`` with ``engine="fused"``
    (call that function; this one expects its validated arguments). With
    ``data_parallel``, ``(x, y)`` is this rank's shard (``dp_proto.lvq.private.data_parallel``)."""
    check_fusable(model)
    n = x.shape[0]
    _check_targets(y, model.prototype_labels)  # once here, not at every step
    expected_batch = expected_batch_size  # public; never q * n (n is private)
    std = noise_multiplier * max_grad_norm
    # secure mode: batch membership from a generator seeded with operating-system entropy
    sampling_gen = fresh_generator(x.device) if secure_mode else generator
    dp = data_parallel
    if dp is not None:
        dp.check_same(
            ["noise_multiplier", "sampling_rate", "max_grad_norm", "steps", "expected_batch_size", "clipping"],
            [noise_multiplier, sampling_rate, max_grad_norm, steps, expected_batch, CLIPPING_MODES.index(clipping)],
        )
        dp.broadcast_parameters(model)
        sampling_gen = dp.sampling_generator(sampling_gen, x.device)
    model.train()
    # each epoch spent before it runs (data-parallel: checked per epoch, spent per step)
    epochs = BudgetedEpochs(ledger, noise_multiplier, sampling_rate, steps, progress=progress, per_step=dp is not None)
    for epoch_steps in epochs:
        total, count = x.new_zeros((), dtype=torch.float64), 0  # summed on the device: no sync per step
        for _ in range(epoch_steps):
            if dp is not None and not epochs.record(1):
                break
            index = poisson_batch_index(n, sampling_rate, sampling_gen, x.device)
            costs = dp_sgd_step(
                model,
                x[index],
                y[index],
                optimizer,
                max_grad_norm=max_grad_norm,
                noise_std=std,
                expected_batch=expected_batch,
                generator=generator,
                secure_mode=secure_mode,
                clipping=clipping,
                transfer_fn=transfer_fn,
                beta=beta,
                check_labels=False,
                data_parallel=dp,
                full_batch=sampling_rate >= 1.0 and dp is None,
            )
            post_step()  # renormalisation, iterate averaging: post-processing
            total += costs.detach().sum()
            count += len(index)
            result.steps += 1
        result.epoch_losses.append(float(total) / max(count, 1))
    result.stopped_by_budget = epochs.stopped_by_budget
    if dp is not None:  # one run, one ledger: every rank ran and spent the same steps
        dp.check_same(["steps", "stopped_by_budget"], [result.steps, float(result.stopped_by_budget)])
    return result


def _check_targets(y: Tensor, prototype_labels: Tensor) -> None:
    """Every target class has a prototype, and there are prototypes of two classes."""
    missing = torch.unique(y)[~torch.isin(torch.unique(y), prototype_labels.to(y.device))]
    if missing.numel():
        raise ValueError(f"no prototype carries the target class(es) {missing.tolist()}")
    if torch.unique(prototype_labels).numel() < 2:
        raise ValueError("GLVQ needs prototypes of at least two classes")


def _grad(param: Tensor) -> Tensor:
    """``param.grad``, which the step allocated (zeros) before the clipped sum."""
    if param.grad is None:
        raise RuntimeError("the DP-SGD step's gradient buffer is missing")
    return param.grad


def poisson_batch_index(
    n: int, sampling_rate: float, generator: torch.Generator | None, device: torch.device | str
) -> Tensor:
    """Indices ``(B,)`` of a Poisson sample: each of ``n`` records independently with
    probability ``q = sampling_rate`` (``B`` varies, and may be 0).

    Drawn as a Bernoulli process in ``O(q n)`` rather than ``O(n)``: the gaps between
    successive members are i.i.d. geometric, ``P(gap = k) = (1 - q)^(k-1) q``
    (``Tensor.geometric_``); the same distribution as ``rand(n) < q``.
    """
    if sampling_rate >= 1.0:
        return torch.arange(n, device=device)
    gen_device = generator.device if generator is not None else torch.device(device)
    chunks, last, expected = [], -1.0, sampling_rate * n
    while True:
        k = max(int(expected + 6.0 * math.sqrt(expected + 1.0)) + 8, 16)
        gaps = torch.empty(k, dtype=torch.float64, device=gen_device).geometric_(sampling_rate, generator=generator)
        positions = torch.cumsum(gaps, 0).add_(last)  # exact: integers far below 2^53
        end = float(positions[-1])
        chunks.append(positions[positions < n])
        if end >= n:  # the process has run past the last record
            break
        last, expected = end, sampling_rate * (n - 1 - end)
    return (chunks[0] if len(chunks) == 1 else torch.cat(chunks)).to(device=device, dtype=torch.long)


def dp_sgd_step(
    model: PrototypeModel,
    x: Tensor,
    y: Tensor,
    optimizer: torch.optim.Optimizer,
    *,
    max_grad_norm: float,
    noise_std: float,
    expected_batch: float,
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
    clipping: str = "joint",
    transfer_fn: str = "identity",
    beta: float = 1.0,
    check_labels: bool = True,
    data_parallel: DataParallel | None = None,
    full_batch: bool = False,
) -> Tensor:
    """One DP-SGD step on the (Poisson-sampled) batch ``x (B, ...)``, ``y (B,)``: clipped
    gradient sum, ``N(0, noise_std^2)`` per coordinate, division by ``expected_batch``,
    ``optimizer.step()``. Returns the per-sample costs ``(B,)`` (curator diagnostics).

    ``full_batch=True`` (sampling rate 1: the batch is the whole data set) declares the
    clipped sum's sensitivity ``max_grad_norm (1 + CLIPPED_SUM_SLACK)`` in l2 to the
    neighbour check (``dp_proto.privacy.testing``), which then checks every step; a
    subsampled step's batch differs between neighbours and declares none.

    With ``data_parallel``, ``x`` is this rank's part of the batch: rank 0 adds the
    noise to its partial sum and one all-reduce gives every rank the noisy total."""
    params = [p for p in model.layer.parameters() if p.requires_grad]
    optimizer.zero_grad(set_to_none=False)
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    _, costs = clipped_gradient_sum(
        model, x, y, max_grad_norm, clipping=clipping, transfer_fn=transfer_fn, beta=beta, check_labels=check_labels
    )
    with torch.no_grad():
        grads = [_grad(p) for p in params]
        summed = torch.cat([g.reshape(-1) for g in grads])

        def draw() -> Tensor:  # float64 Box-Muller noise (unbounded tails), then cast
            if noise_std == 0 or (data_parallel is not None and not data_parallel.draws_noise):
                return summed.clone()
            return summed + gaussian_noise(
                summed.shape,
                noise_std,
                generator=generator,
                secure_mode=secure_mode,
                dtype=summed.dtype,
                device=summed.device,
            )

        if full_batch:
            bound = max_grad_norm * (1.0 + CLIPPED_SUM_SLACK.get(summed.dtype, CLIPPED_SUM_SLACK[torch.float32]))
            noisy = intercept("dp_sgd", summed, bound, "l2", draw)
        else:  # subsampled: the clipped sums are checked on their own (test_clipped_sum_states)
            noisy = intercept("dp_sgd", summed, None, None, draw)
        if data_parallel is not None:  # sum_ranks (partial sum [+ noise on rank 0])
            noisy = data_parallel.all_reduce_sum(noisy, what="the all-reduce of the noisy gradient sum")
        offset = 0
        for p, g in zip(params, grads, strict=True):
            g.copy_(noisy[offset : offset + p.numel()].view_as(p)).div_(expected_batch)
            offset += p.numel()
    optimizer.step()
    return costs
