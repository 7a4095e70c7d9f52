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
from tqdm.auto import tqdm

from dp_proto.lvq.model import PrototypeModel

__all__ = ["FitResult", "minimize_lbfgs", "fit_lbfgs", "fit_minibatch", "make_optimizer", "Solver"]

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


def minimize_lbfgs(
    params: Sequence[Tensor],
    cost: Callable[[], Tensor],
    *,
    max_iter: int,
    tol: float,
    history_size: int = 20,
    progress: bool = False,
    desc: str = "L-BFGS",
) -> tuple[int, list[float]]:
    """Full-batch L-BFGS with a strong-Wolfe line search on ``cost()`` (a scalar of
    ``params``), stopping when the cost or the parameters change by less than ``tol``
    or after ``max_iter`` iterations.

    Returns
    -------
    (int, list of float)
        The iterations run (``max_iter`` means not converged) and the cost of every
        evaluation. ``progress``: a bar over the evaluations on stderr, shown once the
        fit has run for two seconds.
    """
    max_eval = int(max_iter * 1.25) + 1
    optimizer = torch.optim.LBFGS(
        list(params),
        lr=1.0,
        max_iter=max_iter,
        max_eval=max_eval,
        tolerance_grad=tol,
        tolerance_change=tol,
        history_size=history_size,
        line_search_fn="strong_wolfe",
    )
    losses: list[float] = []
    bar = tqdm(total=max_eval, desc=desc, unit="eval", file=sys.stderr, delay=2.0, disable=not progress, leave=False)

    def closure() -> Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = cost()
        loss.backward()
        losses.append(float(loss.detach()))
        bar.update()
        bar.set_postfix(cost=f"{losses[-1]:.4g}", refresh=False)
        return loss

    try:
        optimizer.step(closure)
    finally:
        bar.close()
    n_iter = int(optimizer.state[params[0]].get("n_iter", 0)) if params else 0
    return n_iter, losses


def fit_lbfgs(
    model: PrototypeModel,
    x: Tensor,
    y: Tensor,
    *,
    max_iter: int = 500,
    tol: float = 1e-9,
    history_size: int = 20,
    transfer_fn: str = "identity",
    beta: float = 1.0,
    progress: bool = False,
) -> FitResult:
    """Full-batch L-BFGS with a strong-Wolfe line search on the mean GLVQ cost.

    Parameters
    ----------
    x : Tensor, shape (n, ...)
    y : Tensor, shape (n,), class indices
    max_iter : int
        Maximum number of L-BFGS iterations.
    tol : float
        Stop when the cost or the parameters change by less than ``tol``.
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
        lambda: model.loss(model(x), y, transfer_fn=transfer_fn, beta=beta),  # type: ignore[arg-type]
        max_iter=max_iter,
        tol=tol,
        history_size=history_size,
        progress=progress,
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
