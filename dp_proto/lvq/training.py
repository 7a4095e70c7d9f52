"""Plain-torch, non-private training loops for a ``PrototypeModel``.

These are the baselines of Brinkrolf, Göpfert & Hammer (2019) and Brinkrolf (2023):
full-batch L-BFGS and minibatch SGD/Adam.
The estimators use them directly (no Lightning overhead); Lightning users get
the same optimisers through ``dp_proto.lightning.LVQModule``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor
from tqdm import tqdm

from dp_proto.lvq.gradients import DistanceEvaluation, outer_products, quadratic_layout
from dp_proto.lvq.layers import GLVQLayer, GMLVQLayer, LGMLVQLayer
from dp_proto.lvq.losses import glvq_cost_and_gradient
from dp_proto.lvq.model import PrototypeModel

__all__ = [
    "DEFAULT_N_ITER_NO_CHANGE",
    "DEFAULT_TOL",
    "FitResult",
    "FullBatchCost",
    "Solver",
    "Stopping",
    "fit_lbfgs",
    "fit_minibatch",
    "make_optimizer",
    "minimize_lbfgs",
    "settled",
]

Solver = Literal["lbfgs", "adam", "sgd"]


@dataclass
class FitResult:
    """What a training loop reports: iterations (L-BFGS) or epochs, and the cost history."""

    n_iter: int
    losses: list[float] = field(default_factory=list)
    converged: bool = True

    @property
    def final_loss(self) -> float:
        return self.losses[-1] if self.losses else float("nan")


def make_optimizer(
    solver: str, params, lr: float, *, momentum: float = 0.9, nesterov: bool = False
) -> torch.optim.Optimizer:
    """``sgd`` (with momentum) or ``adam``; ``lbfgs`` is handled by ``fit_lbfgs``."""
    if solver == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=nesterov and momentum > 0)
    if solver == "adam":
        return torch.optim.Adam(params, lr=lr)
    raise ValueError(f"unknown minibatch solver {solver!r}; expected 'sgd' or 'adam'")


def parameter_groups(model: PrototypeModel, lr: float, metric_lr_scale: float = 1.0) -> list[dict]:
    """Optimizer parameter groups: the layer's metric (``omega``/``omegas``) at
    ``lr * metric_lr_scale``, every other trainable parameter at ``lr``."""
    if not metric_lr_scale > 0:
        raise ValueError(f"metric_lr_scale must be > 0, got {metric_lr_scale!r}")
    metric = [p for name, p in model.layer.named_parameters() if name != "prototypes" and p.requires_grad]
    metric_ids = {id(p) for p in metric}
    rest = [p for p in model.parameters() if p.requires_grad and id(p) not in metric_ids]
    return [{"params": rest, "lr": lr}] + ([{"params": metric, "lr": lr * metric_lr_scale}] if metric else [])


#: Stopping rules of :func:`minimize_lbfgs`.
Stopping = Literal["relative_cost", "lbfgs"]

#: The default ``tol`` of each stopping rule (``tol=None``).
DEFAULT_TOL: dict[str, float] = {"relative_cost": 3e-4, "lbfgs": 1e-9}

#: The default window of the relative-cost rule (how this and ``DEFAULT_TOL["relative_cost"]``
#: were selected: docs/lvq.md, "Fitting fast").
DEFAULT_N_ITER_NO_CHANGE = 5

#: Line-search evaluations allowed in one L-BFGS iteration (torch's strong-Wolfe default).
_MAX_LINE_SEARCH = 25


def resolve_tol(stopping: str, tol: float | None) -> float:
    """``tol``, or the stopping rule's default when None; ``ValueError`` for an unknown rule
    or a negative tolerance."""
    if stopping not in DEFAULT_TOL:
        raise ValueError(f"stopping must be one of {sorted(DEFAULT_TOL)}, got {stopping!r}")
    value = DEFAULT_TOL[stopping] if tol is None else float(tol)
    if not value >= 0:
        raise ValueError(f"tol must be >= 0, got {tol!r}")
    return value


def settled(costs: Sequence[float], *, tol: float, window: int) -> bool:
    """The relative-cost stopping rule: the last ``window`` iterations lowered the cost by
    at most a fraction ``tol`` of its size,
    ``f[k - window] - f[k] <= tol * max(|f[k]|, f[0] - f[k])``.

    ``costs`` holds the cost at the start and after every iteration (``f[0..k]``). The
    scale is the cost itself or, where the cost ends near zero (the GLVQ cost lies in
    [-1, 1]), the decrease achieved so far, so the rule ends a cold start once its gains
    have flattened out and a warm start near an optimum after ``window`` iterations. The
    window keeps one short step of the line search from ending the fit.
    """
    k = len(costs) - 1
    if k < window:
        return False
    return costs[k - window] - costs[k] <= tol * max(abs(costs[k]), costs[0] - costs[k])


class _EvaluationCache:
    """Cost and gradients of the last few evaluations, keyed by the parameter values.

    torch's L-BFGS evaluates the cost where every ``step`` starts. Run one iteration per
    ``step`` (to test a stopping rule between iterations) and that point is the one the
    line search has just accepted and evaluated; the cache answers from memory, so
    stepping one iteration at a time costs no extra evaluation.
    """

    def __init__(self, params: Sequence[Tensor], size: int = 4) -> None:
        self.params = list(params)
        self.size = size
        self.entries: list[tuple[Tensor, Tensor, list[Tensor | None]]] = []

    def flat(self) -> Tensor:
        """The current parameter values as one vector."""
        return torch.cat([p.detach().reshape(-1) for p in self.params])

    def lookup(self) -> tuple[Tensor, list[Tensor | None]] | None:
        """The cached (cost, gradients) of the current parameter values, or None."""
        flat = self.flat()
        for values, loss, grads in reversed(self.entries):
            if torch.equal(values, flat):
                return loss, grads
        return None

    def store(self, loss: Tensor) -> None:
        grads = [None if p.grad is None else p.grad.detach().clone() for p in self.params]
        self.entries.append((self.flat(), loss.detach(), grads))
        del self.entries[: -self.size]


def minimize_lbfgs(
    params: Sequence[Tensor],
    cost: Callable[[], Tensor],
    *,
    max_iter: int,
    tol: float | None = None,
    stopping: Stopping = "lbfgs",
    n_iter_no_change: int = DEFAULT_N_ITER_NO_CHANGE,
    history_size: int = 20,
    progress: bool = False,
    desc: str = "L-BFGS",
    callback: Callable[[int, float], bool | None] | None = None,
) -> tuple[int, list[float]]:
    """Full-batch L-BFGS with a strong-Wolfe line search on ``cost()`` (a scalar of
    ``params``), one iteration at a time, until a stopping rule or ``max_iter``.

    Parameters
    ----------
    params : sequence of Tensor
        The parameters (``requires_grad``), changed in place.
    cost : callable
        Evaluates the scalar cost at the current parameter values: a tensor to
        backpropagate, or a detached one after setting every parameter's ``grad`` itself
        (:class:`FullBatchCost`'s closed form).
    max_iter : int
        Maximum number of L-BFGS iterations.
    tol : float, optional
        Tolerance of the stopping rule (None: ``DEFAULT_TOL[stopping]``).
    stopping : {"relative_cost", "lbfgs"}, default "lbfgs"
        ``"relative_cost"``: stop when the last ``n_iter_no_change`` iterations lowered
        the cost by at most ``tol`` relative to its size (:func:`settled`), which ends
        once the cost, and with it the classifier, has settled, long before the
        parameters stop moving. ``"lbfgs"``: torch's tests, the cost, the step or the
        largest gradient entry changing by less than ``tol``. Both end at a point where
        the gradient vanishes.
    n_iter_no_change : int, default 5
        The window of the relative-cost rule.
    progress : bool
        A progress bar over the evaluations on stderr, shown once the fit has run for
        two seconds.
    callback : callable, optional
        ``callback(n_iter, cost)`` after every iteration, with the cost at the accepted
        point; returning True stops the fit.

    Returns
    -------
    (int, list of float)
        The iterations run (``max_iter`` means not converged) and the cost of every
        evaluation.
    """
    params = list(params)
    tol = resolve_tol(stopping, tol)
    if isinstance(n_iter_no_change, bool) or not isinstance(n_iter_no_change, int) or n_iter_no_change < 1:
        raise ValueError(f"n_iter_no_change must be a positive integer, got {n_iter_no_change!r}")
    if not params:
        return 0, []
    # torch's own tests carry the "lbfgs" rule; under the relative rule they only catch
    # an exact stationary point.
    torch_tol = tol if stopping == "lbfgs" else 0.0
    optimizer = torch.optim.LBFGS(
        params,
        lr=1.0,
        max_iter=1,
        max_eval=1 + _MAX_LINE_SEARCH,
        tolerance_grad=torch_tol,
        tolerance_change=torch_tol,
        history_size=history_size,
        line_search_fn="strong_wolfe",
    )
    max_eval = int(max_iter * 1.25) + 1
    losses: list[float] = []
    cache = _EvaluationCache(params)
    bar = tqdm(total=max_eval, desc=desc, unit="eval", file=sys.stderr, delay=2.0, disable=not progress, leave=False)

    def closure() -> Tensor:
        hit = cache.lookup()
        if hit is not None:
            loss, grads = hit
            for p, g in zip(params, grads, strict=True):
                p.grad = None if g is None else g.clone()
            return loss
        optimizer.zero_grad(set_to_none=True)
        loss = cost()
        if loss.requires_grad:  # else cost() has set the gradients itself (closed form)
            loss.backward()
        cache.store(loss)
        losses.append(float(loss.detach()))
        bar.update()
        bar.set_postfix(cost=f"{losses[-1]:.4g}", refresh=False)
        return loss

    state = optimizer.state[params[0]]
    n_iter = 0
    try:
        accepted = [float(closure().detach())]  # the cost at the start and after every iteration
        while n_iter < max_iter and len(losses) < max_eval:
            before = cache.flat()
            optimizer.step(closure)
            if int(state["n_iter"]) == n_iter:
                break  # the gradient test held where the step began: a stationary point
            n_iter = int(state["n_iter"])
            accepted.append(float(closure().detach()))  # from the cache: the line search evaluated it
            if callback is not None and callback(n_iter, accepted[-1]):
                break
            if torch.equal(before, cache.flat()):
                break  # no descent direction left: the step did not move
            if stopping == "lbfgs" and (
                abs(accepted[-1] - accepted[-2]) < tol or float((state["d"] * state["t"]).abs().max()) <= tol
            ):
                break
            if stopping == "relative_cost" and settled(accepted, tol=tol, window=n_iter_no_change):
                break
    finally:
        bar.close()
    return n_iter, losses


class FullBatchCost:
    """The mean GLVQ cost of ``model`` on a fixed batch ``x (n, ...)``, ``y (n,)``, for
    L-BFGS: ``cost()`` returns it detached and sets the parameters' gradients.

    A bare standard layer (no backbone; ``GLVQLayer``, ``GMLVQLayer``, ``LGMLVQLayer``)
    takes the closed form of ``dp_proto.lvq.gradients`` (the cost's gradient with
    respect to the distances from ``glvq_cost_and_gradient``, then a few matrix products;
    the batch's outer products are kept for LGMLVQ with few features). Anything else (a
    backbone, another layer type, or a parameter with a gradient hook, which only
    autograd would call) goes through autograd. The labels are checked on the first
    evaluation only.
    """

    def __init__(
        self, model: PrototypeModel, x: Tensor, y: Tensor, *, transfer_fn: str = "identity", beta: float = 1.0
    ):
        self.model, self.y, self.transfer_fn, self.beta = model, y, transfer_fn, beta
        layer = model.layer
        hooked = any(getattr(p, "_backward_hooks", None) for p in model.parameters())
        self.closed_form = not model.has_backbone and type(layer) in (GLVQLayer, GMLVQLayer, LGMLVQLayer) and not hooked
        self.x = x
        self.outer = None
        if self.closed_form:
            self.x = layer._flatten(x)
            if type(layer) is LGMLVQLayer and quadratic_layout(layer):
                self.outer = outer_products(self.x)  # (n, d^2), constant over the fit
        self._checked = False

    def __call__(self) -> Tensor:
        model = self.model
        if not self.closed_form:
            return model.loss(model(self.x), self.y, transfer_fn=self.transfer_fn, beta=self.beta)  # type: ignore[arg-type]
        evaluation = DistanceEvaluation(model.layer, self.x, outer=self.outer)
        costs, backprops = glvq_cost_and_gradient(
            evaluation.distances,
            self.y,
            model.prototype_labels,
            transfer_fn=self.transfer_fn,  # type: ignore[arg-type]
            beta=self.beta,
            check=not self._checked,
        )
        self._checked = True
        n = max(costs.shape[0], 1)
        for param, grad in evaluation.gradients(backprops / n).items():
            param.grad = grad
        return costs.sum() / n


def fit_lbfgs(
    model: PrototypeModel,
    x: Tensor,
    y: Tensor,
    *,
    max_iter: int = 500,
    tol: float | None = None,
    stopping: Stopping = "lbfgs",
    n_iter_no_change: int = DEFAULT_N_ITER_NO_CHANGE,
    history_size: int = 20,
    transfer_fn: str = "identity",
    beta: float = 1.0,
    progress: bool = False,
    callback: Callable[[int, float], bool | None] | None = None,
) -> FitResult:
    """Full-batch L-BFGS with a strong-Wolfe line search on the mean GLVQ cost.

    Parameters
    ----------
    x : Tensor, shape (n, ...)
    y : Tensor, shape (n,), class indices
    max_iter : int
        Maximum number of L-BFGS iterations.
    tol, stopping, n_iter_no_change, callback :
        The stopping rule, as :func:`minimize_lbfgs` (default: torch's tests with
        ``tol=1e-9``; the estimators use ``"relative_cost"``).
    progress : bool
        A progress bar over the cost evaluations on stderr, shown once the fit has run
        for two seconds.

    Returns
    -------
    FitResult
        ``converged`` is False when L-BFGS stopped at ``max_iter`` iterations.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    n_iter, losses = minimize_lbfgs(
        params,
        FullBatchCost(model, x, y, transfer_fn=transfer_fn, beta=beta),
        max_iter=max_iter,
        tol=tol,
        stopping=stopping,
        n_iter_no_change=n_iter_no_change,
        history_size=history_size,
        progress=progress,
        callback=callback,
    )
    model.layer.normalize_()  # exact: the cost is invariant to a global metric's scale
    return FitResult(n_iter=n_iter, losses=losses, converged=n_iter < max_iter)


def fit_minibatch(
    model: PrototypeModel,
    x: Tensor,
    y: Tensor,
    *,
    solver: str = "adam",
    lr: float = 0.01,
    epochs: int = 50,
    batch_size: int = 128,
    generator: torch.Generator | None = None,
    transfer_fn: str = "identity",
    beta: float = 1.0,
    progress: bool = False,
) -> FitResult:
    """Minibatch SGD or Adam with reshuffling every epoch; the metric is
    renormalised after every step where the layer asks for it.

    Returns the mean cost of every epoch (``epochs`` always run: no convergence test).
    ``progress``: a bar over the epochs on stderr, shown once the fit has run for two
    seconds.
    """
    optimizer = make_optimizer(solver, [p for p in model.parameters() if p.requires_grad], lr)
    n = x.shape[0]
    losses: list[float] = []
    model.train()
    bar = tqdm(range(epochs), desc=solver, unit="epoch", file=sys.stderr, delay=2.0, disable=not progress, leave=False)
    for _ in bar:
        order = torch.randperm(n, generator=generator).to(x.device)
        total = 0.0
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = model.loss(model(x[idx]), y[idx], transfer_fn=transfer_fn, beta=beta)  # type: ignore[arg-type]
            loss.backward()
            optimizer.step()
            model.layer.normalize_()
            total += float(loss.detach()) * len(idx)
        losses.append(total / max(n, 1))
        bar.set_postfix(cost=f"{losses[-1]:.4g}", refresh=False)
    return FitResult(n_iter=epochs, losses=losses)
