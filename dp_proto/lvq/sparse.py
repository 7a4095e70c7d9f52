"""Feature sparsity for GMLVQ and LGMLVQ (Brinkrolf 2023, chapter 5).

The group-lasso penalty (Yuan & Lin 2006) of eq. 5.5 has one group per input feature ``f``: column ``f``
of every projection matrix (the one ``Omega (r, d)`` of GMLVQ, or all ``Omega_k (W, r,
d)`` of LGMLVQ), so feature ``f`` is unused exactly when that column is zero everywhere:

    P(Omega) = sum_f ||[Omega_1[:, f]; ...; Omega_W[:, f]]||_2

Brinkrolf (2023) minimises ``E + S P`` by a (sub)gradient method, which never reaches
exact zeros (hence its OMP post-processing); here ``fit_proximal`` takes proximal
gradient steps instead: a gradient step on the GLVQ cost ``E``, then the group
soft-threshold ``col_f <- max(0, 1 - t S / ||col_f||) col_f`` (``group_soft_threshold_``),
which sets whole columns to exactly zero. Since ``E`` does not change when all the
Omegas are scaled by one factor, ``P`` alone would shrink them towards zero without
changing the classifier; the metric is therefore kept on the sphere ``sum_k
||Omega_k||_F^2 = 1`` (renormalised after every step, which keeps the zeros). The
dissertation's per-matrix trace normalisation of LGMLVQ would undo the shrinkage of a
column in one matrix but not the others, so the global one is used (thesis digest,
decision 12). Brinkrolf (2023)'s subgradient also tested a single entry for zero
instead of the group's norm; the proximal step has no such case.

``simultaneous_omp`` is the OMP post-processing of section 5.4.2, as one support shared
by all rows (simultaneous OMP, Tropp, Gilbert & Strauss 2006): the sparse ``Omega_bar`` that reproduces the projected
differences ``Omega_k (x_i - w_k)`` of the training data within a relative tolerance.
The dissertation runs OMP per row, which gives each row its own support (the feature
count is then their union), and leaves the atoms' normalisation and the stopping rule
open; here the atoms are the difference columns scaled to unit norm and the stopping
rule is a feature count or a tolerance.

``refit_on_support`` retrains a selected model without the penalty, the unused columns
held at zero (L-BFGS on the masked gradient): the group lasso shrinks the kept columns
too, and on held-out data the refitted model is clearly better (wine, half split,
SparseGMLVQ at penalty 0.1: 9 features, test accuracy 0.899 selected, 0.955 refitted).
This "relaxed" refit is not in Brinkrolf (2023).

``sparsity`` is eq. 5.8: the fraction of features whose column is zero in every matrix.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Callable

import torch
from torch import Tensor
from tqdm import tqdm

from dp_proto.lvq.layers import GMLVQLayer, LGMLVQLayer
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.training import FitResult, fit_lbfgs

__all__ = [
    "feature_group_norms",
    "group_penalty",
    "group_soft_threshold_",
    "normalize_metric_",
    "sparsify_step_",
    "sparsity",
    "selected_features",
    "simultaneous_omp",
    "omp_refit_",
    "fit_proximal",
    "refit_on_support",
    "metric_parameter",
    "check_penalty",
    "LOCAL_NORMALISATION_ERROR",
    "check_sparsifiable",
]

#: Why group lasso refuses LGMLVQ's per-matrix normalisation (every caller says it alike).
LOCAL_NORMALISATION_ERROR = (
    "group_lasso needs normalize_omega=False (normalize=False on an LGMLVQLayer) for LGMLVQ: per-matrix "
    "renormalisation would undo the shrinkage of a feature in one matrix"
)


def check_penalty(name: str, value: object) -> float:
    """``value`` as a float if it is a real number (not a bool), finite and ``>= 0``;
    ``ValueError`` naming ``name`` otherwise. The one check of every group-lasso
    strength (``SparseGMLVQ(penalty=)``, ``fit_proximal``, ``DPGMLVQ(group_lasso=)``,
    ``fit_dp_sgd``, the Lightning modules)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    number = float(value)
    if not (math.isfinite(number) and number >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return number


def check_sparsifiable(model: PrototypeModel) -> None:
    """``ValueError`` unless group lasso can act on ``model``'s metric: a GMLVQ layer, or an
    LGMLVQ layer without per-matrix normalisation."""
    layer = model.layer
    if not isinstance(layer, (GMLVQLayer, LGMLVQLayer)):
        raise ValueError(f"group_lasso needs a GMLVQ or LGMLVQ layer (a metric), got {type(layer).__name__}")
    if isinstance(layer, LGMLVQLayer) and layer.normalize:
        raise ValueError(LOCAL_NORMALISATION_ERROR)


def _as_stack(omega: Tensor) -> Tensor:
    """``(r, d)`` or ``(W, r, d)`` as ``(W, r, d)`` (a view)."""
    if omega.dim() == 2:
        return omega.unsqueeze(0)
    if omega.dim() == 3:
        return omega
    raise ValueError(f"expected omega of shape (r, d) or omegas of shape (W, r, d), got {tuple(omega.shape)}")


def feature_group_norms(omega: Tensor) -> Tensor:
    """The norm of every feature's group: ``||[Omega_1[:, f]; ...; Omega_W[:, f]]||_2``.

    Parameters
    ----------
    omega : Tensor, shape (r, d) or (W, r, d)

    Returns
    -------
    Tensor, shape (d,)
    """
    stack = _as_stack(omega)
    return stack.pow(2).sum(dim=(0, 1)).sqrt()


def group_penalty(omega: Tensor) -> Tensor:
    """The group-lasso penalty ``P = sum_f ||group_f||_2`` (Brinkrolf 2023, eq. 5.5, without ``S``)."""
    return feature_group_norms(omega).sum()


@torch.no_grad()
def group_soft_threshold_(omega: Tensor, threshold: float) -> Tensor:
    """The proximal map of ``threshold * P``, in place: every feature's group is scaled
    by ``max(0, 1 - threshold / ||group_f||)``, so groups of norm at most ``threshold``
    become exactly zero. Returns the new group norms ``(d,)``."""
    if not threshold >= 0:
        raise ValueError(f"threshold must be >= 0, got {threshold!r}")
    norms = feature_group_norms(omega)
    scale = (1.0 - threshold / norms.clamp_min(torch.finfo(norms.dtype).tiny)).clamp_min(0.0)
    _as_stack(omega).mul_(scale)
    return norms * scale


@torch.no_grad()
def normalize_metric_(omega: Tensor) -> None:
    """Scale all matrices by one factor so that ``sum_k ||Omega_k||_F^2 = 1`` (zeros stay zero)."""
    total = omega.pow(2).sum().sqrt()
    if total > 0:
        omega.div_(total)


@torch.no_grad()
def sparsify_step_(omega: Tensor, step: float, penalty: float) -> int:
    """The proximal step of ``step * penalty * P`` in units of the metric's own scale, in
    place: the group soft-threshold ``step * penalty * ||Omega||_F``, then the metric
    rescaled to the Frobenius norm it had (the GLVQ cost ignores the scale, and the zeros
    stay zero). On a unit-norm metric this is ``fit_proximal``'s step. A threshold that
    would zero every feature is skipped (the metric is left as it was). Returns the
    number of features kept. Used after every noisy DP-SGD step (post-processing)."""
    if not (step >= 0 and penalty >= 0):
        raise ValueError(f"step and penalty must be >= 0, got {step!r} and {penalty!r}")
    scale = float(omega.pow(2).sum().sqrt())
    if scale == 0.0 or step * penalty == 0.0:
        return int((feature_group_norms(omega) > 0).sum())
    before = omega.clone()
    kept = int((group_soft_threshold_(omega, step * penalty * scale) > 0).sum())
    if kept == 0:
        omega.copy_(before)
        return int((feature_group_norms(omega) > 0).sum())
    omega.mul_(scale / float(omega.pow(2).sum().sqrt()))
    return kept


def selected_features(omega: Tensor) -> Tensor:
    """Indices ``(k,)`` of the features whose group is not exactly zero."""
    return torch.nonzero(feature_group_norms(omega) > 0).flatten()


def sparsity(omega: Tensor) -> float:
    """Brinkrolf (2023), eq. 5.8: ``1 - ||s||_0 / d``, the fraction of features whose
    column is zero in every matrix."""
    norms = feature_group_norms(omega)
    return 1.0 - int((norms > 0).sum()) / norms.numel()


def simultaneous_omp(differences: Tensor, omega: Tensor, *, n_features: int | None = None, tol: float = 1e-3) -> Tensor:
    """A sparse ``Omega_bar`` with one feature support for all matrices and rows such that
    ``Omega_bar_k diff ~ Omega_k diff`` for the differences ``diff`` of every matrix.

    Greedy (simultaneous orthogonal matching pursuit): add the feature whose unit-norm
    difference column correlates most with the residual of all rows together, refit every
    ``Omega_bar_k`` on the chosen features by least squares, and stop at ``n_features``
    features or when the relative residual ``||R||_F / ||Omega diff||_F`` is at most ``tol``.

    Parameters
    ----------
    differences : Tensor, shape (W, N, d)
        For matrix ``k`` the differences ``x_i - w_k`` it is applied to (GMLVQ: ``W = 1``
        and every ``x_i - w_j`` stacked).
    omega : Tensor, shape (r, d) or (W, r, d)
    n_features : int, optional
        Stop at this many features (at most ``d``).
    tol : float, default 1e-3
        Stop when the relative residual is at most ``tol``.

    Returns
    -------
    Tensor, the shape of ``omega``, zero outside the support.
    """
    stack = _as_stack(omega).detach()
    W, r, d = stack.shape
    if differences.dim() != 3 or differences.shape[0] != W or differences.shape[2] != d:
        raise ValueError(f"expected differences of shape ({W}, N, {d}), got {tuple(differences.shape)}")
    if n_features is not None and not 1 <= n_features <= d:
        raise ValueError(f"n_features must be in [1, {d}], got {n_features!r}")
    if not tol >= 0:
        raise ValueError(f"tol must be >= 0, got {tol!r}")
    X = differences.to(stack.dtype)
    targets = torch.bmm(X, stack.transpose(1, 2))  # (W, N, r): the projected differences
    target_norm = targets.norm()
    atoms = X / X.norm(dim=1, keepdim=True).clamp_min(torch.finfo(X.dtype).tiny)  # unit columns per matrix
    support: list[int] = []
    residual = targets
    sparse = torch.zeros_like(stack)
    limit = d if n_features is None else n_features
    while len(support) < limit and residual.norm() > tol * target_norm:
        scores = torch.bmm(atoms.transpose(1, 2), residual).pow(2).sum(dim=(0, 2))  # (d,)
        scores[support] = -1.0
        support.append(int(scores.argmax()))
        A = X[:, :, support]  # (W, N, s)
        coef = torch.linalg.lstsq(A, targets).solution  # (W, s, r)
        residual = targets - torch.bmm(A, coef)
        sparse.zero_()
        sparse[:, :, support] = coef.transpose(1, 2)
    return sparse.reshape(omega.shape)


def metric_parameter(model: PrototypeModel) -> torch.nn.Parameter:
    """The metric of a GMLVQ (``omega``) or LGMLVQ (``omegas``) model; ``TypeError`` otherwise."""
    layer = model.layer
    if isinstance(layer, LGMLVQLayer):
        return layer.omegas
    if isinstance(layer, GMLVQLayer):
        return layer.omega
    raise TypeError(f"feature sparsity needs a GMLVQLayer or LGMLVQLayer, got {type(layer).__name__}")


def _layer_differences(model: PrototypeModel, x: Tensor) -> Tensor:
    """The differences each matrix acts on: ``(W, n, d)`` for LGMLVQ (``x - w_k``), and
    ``(1, n W, d)`` for GMLVQ (every ``x_i - w_j``)."""
    w = model.layer.prototypes.detach()
    diff = x.unsqueeze(0) - w.unsqueeze(1)  # (W, n, d)
    if isinstance(model.layer, LGMLVQLayer):
        return diff
    return diff.reshape(1, -1, x.shape[1])


@torch.no_grad()
def omp_refit_(model: PrototypeModel, x: Tensor, *, n_features: int | None = None, tol: float = 1e-3) -> Tensor:
    """Replace the metric of ``model`` (GMLVQ or LGMLVQ, no backbone) by its
    ``simultaneous_omp`` on the training inputs ``x (n, d)``, renormalised; returns the
    selected features."""
    param = metric_parameter(model)
    sparse = simultaneous_omp(_layer_differences(model, x), param, n_features=n_features, tol=tol)
    param.copy_(sparse)
    normalize_metric_(param)
    return selected_features(param)


def fit_proximal(
    model: PrototypeModel,
    x: Tensor,
    y: Tensor,
    *,
    penalty: float,
    lr: float = 1.0,
    max_iter: int = 1000,
    tol: float = 1e-9,
    transfer_fn: str = "identity",
    beta: float = 1.0,
    progress: bool = False,
    callback: Callable[[int, float], None] | None = None,
) -> FitResult:
    """Full-batch proximal gradient descent on ``E + penalty * P`` (see the module docstring).

    Every iteration: a gradient step of size ``t`` on the mean GLVQ cost ``E`` for the
    prototypes and the metric, the group soft-threshold ``t * penalty`` on the metric and
    the renormalisation ``sum ||Omega_k||_F^2 = 1``; ``t`` starts at ``lr``, doubles after
    an accepted step and halves until the penalised cost does not increase (so it never
    does). Stops when the penalised cost changes by less than ``tol`` (relative), when no
    step size down to ``1e-12 * lr`` decreases it, or after ``max_iter`` iterations.

    Parameters
    ----------
    model : PrototypeModel
        With a ``GMLVQLayer`` or ``LGMLVQLayer`` (a backbone is trained by plain gradient
        steps).
    x : Tensor, shape (n, d)
    y : Tensor, shape (n,), class indices
    penalty : float
        ``S >= 0``; 0 gives plain gradient descent on the sphere.

    Returns
    -------
    FitResult
        ``losses``: the penalised cost after every iteration; ``converged`` False when
        ``max_iter`` was reached.
    """
    penalty = check_penalty("penalty", penalty)
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr!r}")
    metric = metric_parameter(model)
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    with torch.no_grad():
        normalize_metric_(metric)

    def smooth() -> Tensor:
        return model.loss(model(x), y, transfer_fn=transfer_fn, beta=beta)  # type: ignore[arg-type]

    with torch.no_grad():
        current = float(smooth()) + penalty * float(group_penalty(metric))
    losses = [current]
    step = float(lr)
    converged = False
    n_iter = 0
    bar = tqdm(total=max_iter, desc="proximal", unit="it", file=sys.stderr, delay=2.0, disable=not progress)
    try:
        for n_iter in range(1, max_iter + 1):
            for p in params:
                p.grad = None
            cost = smooth()
            cost.backward()
            smooth_now = float(cost.detach())
            start = [p.detach().clone() for p in params]
            grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params]
            accepted = False
            while step >= 1e-12 * lr:
                with torch.no_grad():
                    for p, p0, g in zip(params, start, grads, strict=True):
                        p.copy_(p0 - step * g)
                    kept = int((group_soft_threshold_(metric, step * penalty) > 0).sum())
                    normalize_metric_(metric)
                    # the quadratic model of the GLVQ cost at this step size must bound it
                    # (the usual backtracking of proximal gradient methods) ...
                    moved = [p - p0 for p, p0 in zip(params, start, strict=True)]
                    model_bound = smooth_now + sum(float((g * m).sum()) for g, m in zip(grads, moved, strict=True))
                    model_bound += sum(float(m.pow(2).sum()) for m in moved) / (2.0 * step)
                    smooth_new = float(smooth())
                # ... and the penalised cost must not increase; an all-zero metric is off the
                # sphere (and classifies nothing): too long a step
                candidate = smooth_new + penalty * float(group_penalty(metric.detach())) if kept > 0 else math.inf
                if candidate <= current and smooth_new <= model_bound + 1e-12 * abs(smooth_now):
                    accepted = True
                    break
                step /= 2.0
            if not accepted:  # no step decreases the penalised cost: a stationary point
                with torch.no_grad():
                    for p, p0 in zip(params, start, strict=True):
                        p.copy_(p0)
                converged = True
                break
            change = abs(current - candidate) / max(abs(current), 1e-12)
            current = candidate
            losses.append(current)
            step *= 2.0
            bar.update()
            if callback is not None:
                callback(n_iter, current)
            if change < tol:
                converged = True
                break
    finally:
        bar.close()
        for p in params:
            p.grad = None
    return FitResult(n_iter=n_iter, losses=losses, converged=converged)


def refit_on_support(
    model: PrototypeModel,
    x: Tensor,
    y: Tensor,
    *,
    max_iter: int = 500,
    tol: float = 1e-9,
    transfer_fn: str = "identity",
    beta: float = 1.0,
    progress: bool = False,
) -> FitResult:
    """Retrain ``model`` (prototypes and metric) by L-BFGS on the GLVQ cost without the
    penalty, with every feature whose group is zero now held at zero (its gradient
    masked), so ``selected_features`` does not change. Returns ``fit_lbfgs``'s result."""
    metric = metric_parameter(model)
    keep = (feature_group_norms(metric.detach()) > 0).to(metric.dtype)
    handle = metric.register_hook(lambda grad: grad * keep)
    try:
        return fit_lbfgs(model, x, y, max_iter=max_iter, tol=tol, transfer_fn=transfer_fn, beta=beta, progress=progress)
    finally:
        handle.remove()
