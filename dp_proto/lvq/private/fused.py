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
4. the *clipped sum* ``sum_i c_i grad L_i = sum_ij c_i G_ij grad D_ij`` in closed form,
   reusing the distances' projections (GLVQ: from explicit per-record vectors; GMLVQ:
   three products of the batch's size with ``Omega``, the distances' included;
   LGMLVQ: ``dp_proto.lvq.gradients``). ``L_i`` depends on row ``i`` of the distances
   only, so this is exact (ghost clipping);
5. Gaussian noise ``N(0, (sigma C)^2)`` on every coordinate of the sum (the library's
   float64 Box-Muller sampler, ``add_gaussian_noise``), division by the expected batch
   size ``q n``, and an optimizer step (post-processing).

Its privacy accounting is that of Opacus' with the same ``(sigma, q, T)``: the ledger
records ``T`` Poisson-subsampled Gaussian steps. It needs a model whose trainable
parameters all sit in the prototype layer (a frozen, public backbone is allowed: its
features are computed once, record by record); a trainable backbone needs Opacus'
samplers (``engine="opacus"``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from dp_proto.lvq.distances import _pairwise_sq
from dp_proto.lvq.gradients import DistanceEvaluation, quadratic_layout
from dp_proto.lvq.layers import GLVQLayer, GMLVQLayer, LGMLVQLayer
from dp_proto.lvq.losses import glvq_winner_terms
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private.engine_run import DPSGDResult, EngineRun
from dp_proto.lvq.private.grad_samplers import (
    gmlvq_clipping_norms,
    lgmlvq_clipping_norms,
    winner_differences,
)
from dp_proto.lvq.private.winners import settled_winners
from dp_proto.privacy.data_parallel import DataParallel
from dp_proto.privacy.dpsgd_plan import BudgetedEpochs
from dp_proto.privacy.noise import gaussian_noise
from dp_proto.privacy.randomness import fresh_generator
from dp_proto.privacy.sampling import poisson_batch_index
from dp_proto.privacy.testing import intercept

__all__ = [
    "CLIPPED_SUM_SLACK",
    "clipped_gradient_sum",
    "dp_sgd_step",
    "add_gaussian_noise",
    "NOISE_CHUNK",
    "fit_dp_sgd_fused",
    "check_fusable",
    "record_features",
]

# Opacus' guard in the clip factor C / (norm + 1e-6).
_NORM_GUARD = 1e-6

#: Relative slack ``s`` of a full-batch step's declared sensitivity ``C (1 + s)`` in the
#: neighbour check: rounding of the clipped sum as computed (docs/privacy-model.md).
CLIPPED_SUM_SLACK = {torch.float32: 1e-4, torch.float64: 1e-9}


#: The layer types (exactly) whose per-sample clipping norms and clipped sums the closed forms know.
FUSABLE_LAYERS = (GLVQLayer, GMLVQLayer, LGMLVQLayer)


def check_fusable(model: PrototypeModel) -> None:
    """``ValueError`` unless the layer is a ``GLVQLayer``, ``GMLVQLayer`` or
    ``LGMLVQLayer`` (exactly: a subclass may compute another distance, whose per-sample
    gradient norms the closed forms do not know) and every trainable parameter of
    ``model`` is in it."""
    if type(model.layer) not in FUSABLE_LAYERS:
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
    with torch.no_grad():
        sums, norms, costs = _clipped_sums(
            model, x, y, max_grad_norm, clipping=clipping, transfer_fn=transfer_fn, beta=beta, check_labels=check_labels
        )
        for param, grad in sums.items():
            if param.grad is None:
                param.grad = grad
            else:
                param.grad.add_(grad)
    return norms, costs


def _clipped_sums(
    model: PrototypeModel,
    x: Tensor,
    y: Tensor,
    max_grad_norm: float,
    *,
    clipping: str,
    transfer_fn: str,
    beta: float,
    check_labels: bool,
) -> tuple[dict[nn.Parameter, Tensor], Tensor, Tensor]:
    """The clipped sum per trainable parameter of the layer (none for an empty batch),
    the joint clipping norms ``(B,)`` and the per-sample costs ``(B,)`` (no autograd).

    The distances ``(B, W)`` are computed once; the norms and the sum reuse their
    projections. ``G = dL_i/dD_i`` is kept sparse, as the winners ``(B, 2)`` and their
    entries: ``L_i`` depends on row ``i`` of the distances only, so the clip-weighted
    sum is exact (ghost clipping). One host sync: whether every norm, and every term the
    sum reads, is finite; if not, records with non-finite norms get weight zero and the
    non-finite terms (which then meet only zero weights) are set to zero.
    """
    evaluated = _record_norms(model, x, y, transfer_fn=transfer_fn, beta=beta, check_labels=check_labels)
    terms, coef, norms_by_param, norms = evaluated.terms, evaluated.coef, evaluated.norms_by_param, evaluated.norms
    if terms is None or coef is None:
        return {}, norms, evaluated.costs
    if clipping == "joint":
        factor = (max_grad_norm / (norms + _NORM_GUARD)).clamp(max=1.0)
        weights = dict.fromkeys(norms_by_param, coef * factor[:, None])  # one tensor for all
    else:
        bound = max_grad_norm / math.sqrt(len(norms_by_param))
        weights = {p: coef * (bound / (n + _NORM_GUARD)).clamp(max=1.0)[:, None] for p, n in norms_by_param.items()}
    finite = torch.isfinite(norms).all()
    extra = terms.finite()
    if not bool(finite if extra is None else finite & extra):  # the one host sync
        contributes = torch.isfinite(norms)[:, None]
        weights = {p: torch.where(contributes, a, 0.0) for p, a in weights.items()}
        terms.sanitize()
    return terms.sums(weights), norms, evaluated.costs


class _RecordNorms(NamedTuple):
    """A batch's terms (None for an empty batch or a frozen layer), costs ``(B,)``, cost
    derivatives at the winners ``(B, 2)``, clipping norms per parameter and jointly ``(B,)``."""

    terms: Any
    costs: Tensor
    coef: Tensor | None
    norms_by_param: dict[nn.Parameter, Tensor]
    norms: Tensor


def _record_norms(
    model: PrototypeModel, x: Tensor, y: Tensor, *, transfer_fn: str, beta: float, check_labels: bool
) -> _RecordNorms:
    """Every record's clipping norm (``dp_proto.lvq.private.grad_samplers``): its
    gradient's norm or, when larger, ``kappa`` times the size of its terms; not finite
    for a record whose gradient or terms are not."""
    layer = model.layer
    features = model.features(x).reshape(x.shape[0], layer.in_features).to(layer.prototypes.dtype)
    if features.shape[0] == 0:
        empty = features.new_zeros(0)
        return _RecordNorms(None, empty, None, {}, empty)
    terms_class = _TERMS.get(type(layer))
    if terms_class is None:
        raise TypeError(f"no closed-form norm sampler for {type(layer).__name__}")
    terms = terms_class(layer, features)  # the distances, and what the norms and sums reuse
    index, winner_distances = settled_winners(terms, y, model.prototype_labels, check=check_labels)
    costs, coef = glvq_winner_terms(winner_distances, transfer_fn=transfer_fn, beta=beta)  # type: ignore[arg-type]
    if not any(p.requires_grad for p in layer.parameters()):
        return _RecordNorms(None, costs, None, {}, features.new_zeros(features.shape[0]))
    norms_by_param = terms.norms(index, coef)
    norm_list = list(norms_by_param.values())
    if len(norm_list) == 1:
        norms = norm_list[0]
    else:
        norms = torch.stack(norm_list, 0).pow(2).sum(0).sqrt()
    return _RecordNorms(terms, costs, coef, norms_by_param, norms)


def finite_records(
    model: PrototypeModel, x: Tensor, y: Tensor, *, transfer_fn: str = "identity", beta: float = 1.0
) -> Tensor:
    """``(B,)`` bool: the records of ``x (B, ...)``, ``y (B,)`` whose clipping norm is
    finite, i.e. whose gradient and every term through which they enter the clipped sum
    are finite (no autograd). The engines without per-sample gradients (Opacus' ghost
    clipping) train on these only, so that a record with extreme inputs contributes
    zero instead of turning the noisy sum into NaN."""
    with torch.no_grad():
        return torch.isfinite(_record_norms(model, x, y, transfer_fn=transfer_fn, beta=beta, check_labels=False).norms)


def _finite(t: Tensor) -> Tensor:
    """``t`` with its non-finite entries set to zero."""
    return torch.where(torch.isfinite(t), t, 0.0)


def _dense(values: Tensor, index: Tensor, num_prototypes: int) -> Tensor:
    """``(B, W)`` zeros with ``values (B, K)`` at the winners ``index (B, K)`` (distinct per row)."""
    return values.new_zeros(values.shape[0], num_prototypes).scatter_(1, index, values)


class _LayerTerms:
    """What every layer's terms share: the rounding bound and the index-order rows of the
    layer at the batch ``x (B, d)`` (``dp_proto.lvq.private.winners.DistanceTerms``)."""

    layer: Any
    x: Tensor

    def rounding_bound(self) -> Tensor:
        return self.layer.rounding_bound(self.x)

    def ordered_rows(self, rows: Tensor) -> Tensor:
        return self.layer.ordered_distances(self.x[rows])


class _GLVQTerms(_LayerTerms):
    """GLVQ's clipped sum from explicit per-record vectors: record ``i``'s gradient is
    ``-2 G_ik (x_i - w_k)`` at its two winners ``k``, on two distinct rows of the
    prototypes; formed from the differences and clipped by their own norm, so no
    cancellation can hide a large term (the guard of the closed forms is not needed),
    and one ``index_add`` of ``(2B, d)`` rows replaces the dense ``(W, B) @ (B, d)``
    product."""

    def __init__(self, layer: GLVQLayer, x: Tensor):
        self.layer, self.w, self.x = layer, layer.prototypes, x
        self.distances = _pairwise_sq(x, self.w)  # as the layer's forward
        self.diff: Tensor | None = None

    def winner_distances(self, index: Tensor) -> Tensor:
        self.index = index
        self.diff = winner_differences(self.x, self.w, index)  # (B, K, d)
        return self.diff.square().sum(-1)

    def norms(self, index: Tensor, coef: Tensor) -> dict[nn.Parameter, Tensor]:
        if not self.w.requires_grad or self.diff is None:
            return {}
        return {self.w: 2.0 * torch.linalg.vector_norm(coef * torch.linalg.vector_norm(self.diff, dim=-1), dim=1)}

    def finite(self) -> Tensor | None:
        return None  # only the winners' explicit terms: finite with their norms

    def sanitize(self) -> None:
        if self.diff is not None:
            self.diff = _finite(self.diff)

    def sums(self, weights: dict[nn.Parameter, Tensor]) -> dict[nn.Parameter, Tensor]:
        if self.diff is None or not self.w.requires_grad:
            return {}
        update = self.diff.mul_(weights[self.w].unsqueeze(2)).flatten(0, 1)  # in place: the norms are taken
        return {self.w: torch.zeros_like(self.w).index_add_(0, self.index.reshape(-1), update, alpha=-2.0)}


class _GMLVQTerms(_LayerTerms):
    """GMLVQ with the distances' projections ``u = x Omega^T``, ``Omega w``:

    * prototypes: ``-2 sum_ik A_ik Omega^T p_ik = -2 (A^T Z - a * Z_w)`` with
      ``Z = u Omega``, ``Z_w = (Omega w) Omega`` (their norms' explicit differences
      come from the same products), ``a = A^T 1``;
    * Omega: ``2 sum_ik A_ik p_ik v_ik^T = 2 (u^T V - (Omega w)^T (A^T x - a * w))``,
      ``V_i = sum_k A_ik v_ik`` from the explicit differences ``v_ik = x_i - w_k``.

    Every term is bounded by the term magnitudes of the clipping norms
    (``dp_proto.lvq.private.grad_samplers``)."""

    def __init__(self, layer: GMLVQLayer, x: Tensor):
        self.layer, self.x = layer, x
        self.u, self.pw = x @ layer.omega.T, layer.prototypes @ layer.omega.T  # (B, r), (W, r)
        self.distances = _pairwise_sq(self.u, self.pw)  # as the layer's forward (omega_distance)
        self.v: Tensor | None = None
        self.p: Tensor | None = None
        self.metric: tuple[Tensor, Tensor] | None = None

    def winner_distances(self, index: Tensor) -> Tensor:
        self.index = index
        self.p = winner_differences(self.u, self.pw, index)  # (B, K, r)
        return self.p.square().sum(-1)

    def norms(self, index: Tensor, coef: Tensor) -> dict[nn.Parameter, Tensor]:
        omega, w = self.layer.omega, self.layer.prototypes
        v = p = self.u.new_zeros(0)
        if omega.requires_grad and self.p is not None:
            self.v = v = winner_differences(self.x, w, index)  # (B, K, d)
            p = self.p
        if w.requires_grad:
            self.metric = (self.u @ omega, self.pw @ omega)  # Omega^T Omega x (B, d), Omega^T Omega w (W, d)
        return gmlvq_clipping_norms(self.layer, self.x, index, coef, v, p, (self.u, self.pw), self.metric)

    def finite(self) -> Tensor | None:
        # the prototypes' rows enter the products whether or not they are winners
        check = torch.isfinite(self.pw).all()
        if self.metric is not None:
            check = check & torch.isfinite(self.metric[1]).all()
        return check

    def sanitize(self) -> None:
        self.x, self.u, self.pw = _finite(self.x), _finite(self.u), _finite(self.pw)
        if self.v is not None:
            self.v = _finite(self.v)
        if self.metric is not None:
            self.metric = (_finite(self.metric[0]), _finite(self.metric[1]))

    def sums(self, weights: dict[nn.Parameter, Tensor]) -> dict[nn.Parameter, Tensor]:
        layer, out = self.layer, {}
        w, omega, n_prototypes = layer.prototypes, layer.omega, layer.num_prototypes
        if self.metric is not None:
            z, zw = self.metric
            a = _dense(weights[w] * -2.0, self.index, n_prototypes)  # (B, W)
            out[w] = (a.T @ z).sub_(a.sum(0)[:, None] * zw)
        if self.v is not None:
            a2 = weights[omega] * 2.0  # (B, K)
            a = _dense(a2, self.index, n_prototypes)
            per_record = torch.bmm(a2.unsqueeze(1), self.v).squeeze(1)  # (B, d): sum_k A_ik v_ik
            per_prototype = (a.T @ self.x).sub_(a.sum(0)[:, None] * w)  # (W, d): sum_i A_ik (x_i - w_k)
            out[omega] = (self.u.T @ per_record).addmm_(self.pw.T, per_prototype, alpha=-1.0)
        return out


class _LGMLVQTerms(_LayerTerms):
    """LGMLVQ: the projections ``p_ik = Omega_k (x_i - w_k)`` of the distances (their
    ``(B, W, r)`` differences; for few features, where the distances take the quadratic
    form, from the gathered ``Omega_k``), ``Omega_k^T p_ik`` for the prototypes' norms
    (one ``(W, B, r) @ (W, r, d)`` product: the cost of the distances' projection, and no
    ``(B, K, r, d)`` gather), and the closed-form sums of ``DistanceEvaluation``."""

    def __init__(self, layer: LGMLVQLayer, x: Tensor):
        self.layer, self.x = layer, x
        self.evaluation = DistanceEvaluation(layer, x)
        self.distances = self.evaluation.distances

    def winner_distances(self, index: Tensor) -> Tensor:
        omegas, w = self.layer.omegas, self.layer.prototypes
        self.index = index
        self.v = winner_differences(self.x, w, index)  # (B, K, d)
        if quadratic_layout(self.layer):
            self.gathered = omegas.detach()[index]  # (B, K, r, d); few features
            self.p = torch.einsum("bkrd,bkd->bkr", self.gathered, self.v)
        else:
            diff = self.evaluation.diff  # (B, W, r)
            self.p = diff.gather(1, index.unsqueeze(2).expand(-1, -1, diff.shape[2]))  # (B, K, r)
        return self.p.square().sum(-1)

    def norms(self, index: Tensor, coef: Tensor) -> dict[nn.Parameter, Tensor]:
        omegas, w = self.layer.omegas, self.layer.prototypes
        v, p = self.v, self.p
        back_sq = None
        if quadratic_layout(self.layer):
            if w.requires_grad:
                back_sq = torch.einsum("bkrd,bkr->bkd", self.gathered, p).pow(2).sum(-1)
        else:
            diff = self.evaluation.diff  # (B, W, r)
            if w.requires_grad:
                back = torch.bmm(diff.transpose(0, 1), omegas.detach())  # (W, B, d): Omega_j^T p_ij
                back_sq = back.pow(2).sum(-1).T.gather(1, index)
        return lgmlvq_clipping_norms(self.layer, self.x, index, coef, v, p, back_sq)

    def finite(self) -> Tensor | None:
        # every (record, prototype) term enters the closed forms; the distances show them all
        return torch.isfinite(self.evaluation.distances).all()

    def sanitize(self) -> None:
        evaluation = self.evaluation
        evaluation.x = _finite(evaluation.x)
        for name in ("diff", "outer", "lambdas", "lambda_w"):
            if hasattr(evaluation, name):
                setattr(evaluation, name, _finite(getattr(evaluation, name)))

    def sums(self, weights: dict[nn.Parameter, Tensor]) -> dict[nn.Parameter, Tensor]:
        dense: dict[nn.Parameter, Tensor] = {}
        for p, a in weights.items():  # joint clipping: one dense matrix, which the closed forms share
            same = [dense[q] for q in dense if weights[q] is a]
            dense[p] = same[0] if same else _dense(a, self.index, self.layer.num_prototypes)
        return self.evaluation.gradients(dense)


_TERMS: dict[type, type] = {GLVQLayer: _GLVQTerms, GMLVQLayer: _GMLVQTerms, LGMLVQLayer: _LGMLVQTerms}


def fit_dp_sgd_fused(
    model: PrototypeModel,
    x: Tensor,
    y: Tensor,
    run: EngineRun,
    optimizer: torch.optim.Optimizer,
    result: DPSGDResult,
    post_step: Callable[[], None],
    data_parallel: DataParallel | None = None,
) -> DPSGDResult:
    """The training loop of ``dp_proto.lvq.private.fit_dp_sgd`` with ``engine="fused"``
    (call that function; this one expects its resolved settings). With
    ``data_parallel``, ``(x, y)`` is this rank's shard (``dp_proto.lvq.private.launch``)."""
    check_fusable(model)
    if model.has_backbone:  # frozen: its features once, record by record
        x = record_features(model, x)
        model = PrototypeModel(model.layer, model.prototype_labels)  # the same layer, trained in place
    n = x.shape[0]
    _check_targets(y, model.prototype_labels)  # once here, not at every step
    q = run.sampling_rate
    # secure mode: batch membership from a generator seeded with operating-system entropy
    sampling_gen = fresh_generator(x.device) if run.secure_mode else run.generator
    dp = data_parallel
    if dp is not None:
        dp.check_same(
            ["noise_multiplier", "sampling_rate", "max_grad_norm", "steps", "expected_batch_size", "clipping"],
            [
                run.noise_multiplier,
                q,
                run.max_grad_norm,
                run.steps,
                run.expected_batch_size,
                CLIPPING_MODES.index(run.clipping),
            ],
        )
        dp.broadcast_parameters(model)
        sampling_gen = dp.sampling_generator(sampling_gen, x.device)
    model.train()
    # each epoch spent before it runs (data-parallel: checked per epoch, spent per step)
    epochs = BudgetedEpochs(
        run.ledger, run.noise_multiplier, q, run.steps, progress=run.progress, per_step=dp is not None
    )
    for epoch_steps in epochs:
        total, count = x.new_zeros((), dtype=torch.float64), 0  # summed on the device: no sync per step
        for _ in range(epoch_steps):
            if dp is not None and not epochs.record(1):
                break
            index = poisson_batch_index(n, q, sampling_gen, x.device)
            costs = dp_sgd_step(
                model,
                x[index],
                y[index],
                optimizer,
                max_grad_norm=run.max_grad_norm,
                noise_std=run.noise_std,
                expected_batch=run.expected_batch_size,  # public; never q * n (n is private)
                generator=run.generator,
                secure_mode=run.secure_mode,
                clipping=run.clipping,
                transfer_fn=run.transfer_fn,
                beta=run.beta,
                check_labels=False,
                data_parallel=dp,
                full_batch=q >= 1.0 and dp is None,
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


def record_features(model: PrototypeModel, x: Tensor) -> Tensor:
    """The backbone's features ``(n, d)`` of ``x (n, ...)``, each record computed alone
    (a batch of one, no autograd): a record's features are then the same bits whatever
    else the data set or a batch holds, which a batched forward does not give (BLAS
    rounds a row differently for different batch sizes), and the prototype layer's
    sensitivity bound needs (docs/privacy-model.md)."""
    with torch.no_grad():
        rows = [model.features(x[i : i + 1]).reshape(1, model.layer.in_features) for i in range(x.shape[0])]
    if not rows:
        return x.new_zeros((0, model.layer.in_features))
    return torch.cat(rows)


def _check_targets(y: Tensor, prototype_labels: Tensor) -> None:
    """Every target class has a prototype, and there are prototypes of two classes."""
    missing = torch.unique(y)[~torch.isin(torch.unique(y), prototype_labels.to(y.device))]
    if missing.numel():
        raise ValueError(f"no prototype carries the target class(es) {missing.tolist()}")
    if torch.unique(prototype_labels).numel() < 2:
        raise ValueError("GLVQ needs prototypes of at least two classes")


#: Coordinates per call of the Gaussian sampler in ``add_gaussian_noise`` (even: Box-Muller
#: pairs): its float64 temporaries stay near a MiB, reused by the allocator from step to
#: step instead of being mapped afresh (page faults) for every step's whole gradient.
NOISE_CHUNK = 1 << 17


def add_gaussian_noise(
    summed: Tensor, std: float, *, generator: torch.Generator | None = None, secure_mode: bool = False
) -> Tensor:
    """``summed + N(0, std^2)`` on every coordinate of the 1-d ``summed``, as a new tensor.

    The noise is ``dp_proto.privacy.noise.gaussian_noise`` (float64 Box-Muller, unbounded
    tails), drawn in consecutive chunks of ``NOISE_CHUNK`` coordinates from the same
    generator (or the operating system's entropy): its coordinates are i.i.d., so the
    chunks together have exactly the distribution of one call, and up to ``NOISE_CHUNK``
    coordinates they are the same draw.
    """
    if summed.numel() <= NOISE_CHUNK:
        noise = gaussian_noise(
            summed.shape, std, generator=generator, secure_mode=secure_mode, dtype=summed.dtype, device=summed.device
        )
        return noise.add_(summed)  # summed + noise: the sampler's tensor is this call's own
    noisy = torch.empty_like(summed)
    for start in range(0, summed.numel(), NOISE_CHUNK):
        part = summed[start : start + NOISE_CHUNK]
        noise = gaussian_noise(
            part.shape, std, generator=generator, secure_mode=secure_mode, dtype=summed.dtype, device=summed.device
        )
        torch.add(part, noise, out=noisy[start : start + NOISE_CHUNK])
    return noisy


def _zero_other_grads(optimizer: torch.optim.Optimizer, params: list[nn.Parameter]) -> None:
    """``optimizer.zero_grad(set_to_none=False)`` for every parameter but ``params``
    (whose gradients the step overwrites)."""
    skip = {id(p) for p in params}
    for group in optimizer.param_groups:
        for q in group["params"]:
            if q.grad is not None and id(q) not in skip:
                if q.grad.grad_fn is not None:
                    q.grad.detach_()
                else:
                    q.grad.requires_grad_(False)
                q.grad.zero_()


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
    if clipping not in CLIPPING_MODES:
        raise ValueError(f"clipping must be one of {CLIPPING_MODES}, got {clipping!r}")
    params = [p for p in model.layer.parameters() if p.requires_grad]
    _zero_other_grads(optimizer, params)  # the layer's gradients are overwritten below
    with torch.no_grad():
        sums, _, costs = _clipped_sums(
            model, x, y, max_grad_norm, clipping=clipping, transfer_fn=transfer_fn, beta=beta, check_labels=check_labels
        )
        parts = [sums[p].reshape(-1) if p in sums else p.new_zeros(p.numel()) for p in params]
        if len(parts) == 1:  # already flat: no copy
            summed = parts[0]
        else:
            summed = torch.cat(parts) if parts else model.layer.prototypes.new_zeros(0)

        def draw() -> Tensor:  # float64 Box-Muller noise (unbounded tails), then cast
            if noise_std == 0 or (data_parallel is not None and not data_parallel.draws_noise):
                return summed.clone()
            return add_gaussian_noise(summed, noise_std, generator=generator, secure_mode=secure_mode)

        if full_batch:
            bound = max_grad_norm * (1.0 + CLIPPED_SUM_SLACK.get(summed.dtype, CLIPPED_SUM_SLACK[torch.float32]))
            noisy = intercept("dp_sgd", summed, bound, "l2", draw)
        else:  # subsampled: the clipped sums are checked on their own (test_clipped_sum_states)
            noisy = intercept("dp_sgd", summed, None, None, draw)
        if data_parallel is not None:  # sum_ranks (partial sum [+ noise on rank 0])
            noisy = data_parallel.all_reduce_sum(noisy, what="the all-reduce of the noisy gradient sum")
        offset = 0
        for p in params:
            part = noisy[offset : offset + p.numel()].view_as(p)
            if p.grad is None:
                p.grad = part / expected_batch
            else:
                torch.div(part, expected_batch, out=p.grad)
            offset += p.numel()
    optimizer.step()
    return costs
