"""The GLVQ cost and winner-takes-all prediction, as pure functions of distances.

Given distances ``(B, W)`` from a prototype layer, the targets ``(B,)`` and the
prototype labels ``(W,)``, GLVQ (Brinkrolf 2023, eq. 2.11) uses, per sample,

    mu(x) = (d+ - d-) / (d+ + d-)   in [-1, 1],

where ``d+`` is the distance to the closest prototype of the sample's own class
and ``d-`` the distance to the closest prototype of any other class. ``mu < 0``
means correctly classified. The cost is ``sum_i Phi(mu(x_i))`` for a monotone
transfer function ``Phi`` (identity in Brinkrolf (2023), or a sigmoid).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch
from torch import Tensor

__all__ = [
    "GLVQMargins",
    "glvq_margins",
    "glvq_mu",
    "glvq_loss",
    "glvq_cost_and_gradient",
    "glvq_cost_and_winners",
    "glvq_winners",
    "glvq_winners_and_runner_up_gaps",
    "glvq_winner_terms",
    "transfer",
    "wtac",
    "TRANSFER_FUNCTIONS",
]

TRANSFER_FUNCTIONS = ("identity", "sigmoid")
Transfer = Literal["identity", "sigmoid"]

# Guards 0/0 when a sample sits exactly on both winners.
_EPS = 1e-12


class GLVQMargins(NamedTuple):
    """Per-sample quantities of the GLVQ cost; every field has shape ``(B,)``."""

    mu: Tensor
    d_plus: Tensor
    d_minus: Tensor
    index_plus: Tensor
    index_minus: Tensor


def glvq_margins(distances: Tensor, targets: Tensor, prototype_labels: Tensor, *, check: bool = True) -> GLVQMargins:
    """Closest correct and closest wrong prototype of every sample, and ``mu``.

    Parameters
    ----------
    distances : Tensor, shape (B, W)
    targets : Tensor, shape (B,), integer class indices
    prototype_labels : Tensor, shape (W,), integer class index of each prototype

    Returns
    -------
    GLVQMargins
        ``mu = (d+ - d-) / (d+ + d-)``, the two distances and the indices of the
        two winning prototypes ``w+`` and ``w-``.

    Raises
    ------
    ValueError
        If a target class has no prototype, or every prototype has the target's
        class (then there is no ``w-``).
    """
    _check_shapes(distances, targets, prototype_labels)
    prototype_labels = prototype_labels.to(distances.device)
    targets = targets.to(distances.device)
    same = targets[:, None] == prototype_labels[None, :]  # (B, W)
    if check and distances.shape[0] > 0:  # check=False: the caller validated the labels
        _check_labels(same, targets)
    inf = torch.tensor(float("inf"), dtype=distances.dtype, device=distances.device)
    d_plus, index_plus = torch.where(same, distances, inf).min(1)
    d_minus, index_minus = torch.where(same, inf, distances).min(1)
    mu = (d_plus - d_minus) / (d_plus + d_minus).clamp_min(_EPS)
    return GLVQMargins(mu, d_plus, d_minus, index_plus, index_minus)


def _check_shapes(distances: Tensor, targets: Tensor, prototype_labels: Tensor) -> None:
    if distances.dim() != 2:
        raise ValueError(f"expected distances of shape (B, W), got {tuple(distances.shape)}")
    if targets.shape != (distances.shape[0],):
        raise ValueError(f"expected targets of shape ({distances.shape[0]},), got {tuple(targets.shape)}")
    if prototype_labels.shape != (distances.shape[1],):
        raise ValueError(
            f"expected prototype_labels of shape ({distances.shape[1]},), got {tuple(prototype_labels.shape)}"
        )


def _check_labels(same: Tensor, targets: Tensor) -> None:
    """``ValueError`` unless every row of ``same (B, W)`` (target class == prototype class)
    has a prototype of its class and one of another class (host syncs)."""
    if not bool(same.any(1).all()):
        missing = torch.unique(targets.to(same.device)[~same.any(1)]).tolist()
        raise ValueError(f"no prototype carries the target class(es) {missing}")
    if bool(same.all(1).any()):
        raise ValueError("GLVQ needs prototypes of at least two classes")


def glvq_mu(distances: Tensor, targets: Tensor, prototype_labels: Tensor) -> Tensor:
    """``mu(x) = (d+ - d-) / (d+ + d-)`` per sample, shape ``(B,)``. See ``glvq_margins``."""
    return glvq_margins(distances, targets, prototype_labels).mu


def transfer(mu: Tensor, kind: Transfer = "identity", beta: float = 1.0) -> Tensor:
    """Monotone transfer function ``Phi`` of the GLVQ cost.

    ``identity``: ``Phi(mu) = mu`` (the choice of Brinkrolf (2023)).
    ``sigmoid``: ``Phi(mu) = 1 / (1 + exp(-beta mu))``; a larger ``beta`` concentrates
    the cost on samples near the decision border.
    """
    if kind == "identity":
        return mu
    if kind == "sigmoid":
        if not beta > 0:
            raise ValueError(f"sigmoid transfer needs beta > 0, got {beta}")
        return torch.sigmoid(beta * mu)
    raise ValueError(f"unknown transfer {kind!r}; expected one of {TRANSFER_FUNCTIONS}")


def glvq_loss(
    distances: Tensor,
    targets: Tensor,
    prototype_labels: Tensor,
    *,
    transfer_fn: Transfer = "identity",
    beta: float = 1.0,
    reduction: Literal["mean", "sum", "none"] = "mean",
) -> Tensor:
    """GLVQ cost ``Phi(mu(x))`` (eq. 2.11), reduced over the batch.

    Parameters
    ----------
    distances : Tensor, shape (B, W)
    targets : Tensor, shape (B,)
    prototype_labels : Tensor, shape (W,)
    transfer_fn : {"identity", "sigmoid"}
    beta : float
        Slope of the sigmoid transfer.
    reduction : {"mean", "sum", "none"}
        ``none`` returns the per-sample costs ``(B,)``.
    """
    cost = transfer(glvq_mu(distances, targets, prototype_labels), transfer_fn, beta)
    if reduction == "mean":
        return cost.mean() if cost.numel() else cost.sum()
    if reduction == "sum":
        return cost.sum()
    if reduction == "none":
        return cost
    raise ValueError(f"unknown reduction {reduction!r}; expected 'mean', 'sum' or 'none'")


def glvq_cost_and_gradient(
    distances: Tensor,
    targets: Tensor,
    prototype_labels: Tensor,
    *,
    transfer_fn: Transfer = "identity",
    beta: float = 1.0,
    check: bool = True,
    return_winners: bool = False,
) -> tuple[Tensor, ...]:
    """Per-sample costs ``Phi(mu_i)`` ``(B,)`` and their gradients with respect to the
    distances, ``G_ij = dPhi(mu_i)/dD_ij`` ``(B, W)``, in closed form (no autograd).

    Only the two winners of a row are non-zero: with ``s = d+ + d-``,
    ``dmu/dd+ = 2 d- / s^2`` and ``dmu/dd- = -2 d+ / s^2`` (both times ``Phi'(mu)``).
    ``check=False`` skips the label checks of ``glvq_margins`` (no host sync).
    ``return_winners=True`` also returns the winners' indices ``(B, 2)`` (``w+``,
    ``w-``) and their gradient entries ``(B, 2)`` (``glvq_cost_and_winners``).
    """
    cost, index, coef = glvq_cost_and_winners(
        distances, targets, prototype_labels, transfer_fn=transfer_fn, beta=beta, check=check
    )
    grad = torch.zeros_like(distances).scatter_(1, index, coef)  # the two winners are distinct
    if return_winners:
        return cost, grad, index, coef
    return cost, grad


def glvq_cost_and_winners(
    distances: Tensor,
    targets: Tensor,
    prototype_labels: Tensor,
    *,
    transfer_fn: Transfer = "identity",
    beta: float = 1.0,
    check: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    """The GLVQ cost and its gradient in sparse form: per-sample costs ``Phi(mu_i)``
    ``(B,)``, the winners' indices ``(B, 2)`` (``w+``, ``w-``: distinct prototypes) and the
    non-zero entries ``(G_i+, G_i-)`` ``(B, 2)`` of ``G = dPhi(mu)/dD``
    (``glvq_cost_and_gradient`` gives the dense ``(B, W)`` matrix; ``glvq_winners`` and
    ``glvq_winner_terms`` are its two halves). ``check=False`` skips the label checks
    (no host sync).
    """
    index, winner_distances = glvq_winners(distances, targets, prototype_labels, check=check)
    cost, coef = glvq_winner_terms(winner_distances, transfer_fn=transfer_fn, beta=beta)
    return cost, index, coef


def glvq_winners(
    distances: Tensor, targets: Tensor, prototype_labels: Tensor, *, check: bool = True
) -> tuple[Tensor, Tensor]:
    """The winners of every row of ``distances (B, W)``: their indices ``(B, 2)`` (``w+``
    the closest prototype of the target's class, ``w-`` the closest of another class) and
    their distances ``(B, 2)`` (``d+``, ``d-``). ``check=False`` skips the label checks."""
    own, other = _class_masked(distances, targets, prototype_labels, check=check)
    d_plus, index_plus = own.min(1)
    d_minus, index_minus = other.min(1)
    return torch.stack([index_plus, index_minus], 1), torch.stack([d_plus, d_minus], 1)


def glvq_winners_and_runner_up_gaps(
    distances: Tensor, targets: Tensor, prototype_labels: Tensor, *, check: bool = True
) -> tuple[Tensor, Tensor]:
    """``glvq_winners``' indices ``(B, 2)``, and per row the smaller of the two gaps
    ``(B,)`` between a winner and the runner-up of its group (the target's class, the
    other classes); ``inf`` for a group of one prototype."""
    own, other = _class_masked(distances, targets, prototype_labels, check=check)
    if distances.shape[1] < 3:  # each group holds one prototype
        index = torch.stack([own.argmin(1), other.argmin(1)], 1)
        return index, torch.full_like(distances[:, 0], torch.inf)
    values, index = torch.stack([own, other]).topk(2, dim=2, largest=False)  # (2, B, 2)
    gaps = (values[..., 1] - values[..., 0]).amin(0)  # inf - finite = inf: a group of one
    return index[..., 0].T, gaps


def _class_masked(
    distances: Tensor, targets: Tensor, prototype_labels: Tensor, *, check: bool
) -> tuple[Tensor, Tensor]:
    """``distances (B, W)`` with ``inf`` outside the target's class, and inside it."""
    _check_shapes(distances, targets, prototype_labels)
    same = targets.to(distances.device)[:, None] == prototype_labels.to(distances.device)[None, :]  # (B, W)
    if check and distances.shape[0] > 0:
        _check_labels(same, targets)
    return torch.where(same, distances, torch.inf), torch.where(same, torch.inf, distances)


def glvq_winner_terms(
    winner_distances: Tensor, *, transfer_fn: Transfer = "identity", beta: float = 1.0
) -> tuple[Tensor, Tensor]:
    """Per-sample costs ``Phi(mu_i)`` ``(B,)`` and the cost's derivatives ``(G_i+, G_i-)``
    ``(B, 2)`` at the winners, from the winners' distances ``(d+, d-)`` ``(B, 2)``.

    With ``s = d+ + d-`` clamped at ``1e-12``: ``mu = (d+ - d-) / s``,
    ``G_i+ = 2 d- / s^2`` and ``G_i- = -2 d+ / s^2`` (``+-1e12`` where ``s`` is clamped),
    times ``Phi'(mu_i)``.
    """
    d_plus, d_minus = winner_distances.unbind(1)
    s = d_plus + d_minus
    clamped = s <= _EPS  # mu = (d+ - d-) / _EPS there: derivatives +-1/_EPS
    s = s.clamp_min(_EPS)
    mu = (d_plus - d_minus) / s
    signs, at_clamp = _winner_constants(winner_distances.dtype, winner_distances.device)
    coef = winner_distances.flip(1).mul_(signs).div_(s.pow(2)[:, None])  # (2 d-, -2 d+) / s^2
    coef = torch.where(clamped[:, None], at_clamp, coef)
    cost = transfer(mu, transfer_fn, beta)
    if transfer_fn == "sigmoid":  # Phi' = beta Phi (1 - Phi)
        coef = (beta * cost * (1.0 - cost))[:, None] * coef
    return cost, coef


#: ``d+ + d-`` at or below which ``glvq_winner_terms`` clamps (and its derivatives are constant).
DISTANCE_SUM_CLAMP = _EPS


_WINNER_CONSTANTS: dict[tuple[torch.dtype, torch.device], tuple[Tensor, Tensor]] = {}


def _winner_constants(dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor]:
    """``(2, -2)`` and ``(1e12, -1e12)`` (the derivatives where ``d+ + d-`` is clamped) as
    ``(2,)`` tensors of ``dtype`` on ``device``, made once."""
    key = (dtype, device)
    if key not in _WINNER_CONSTANTS:
        _WINNER_CONSTANTS[key] = (
            torch.tensor([2.0, -2.0], dtype=dtype, device=device),
            torch.tensor([1.0 / _EPS, -1.0 / _EPS], dtype=dtype, device=device),
        )
    return _WINNER_CONSTANTS[key]


def wtac(distances: Tensor, prototype_labels: Tensor) -> Tensor:
    """Winner-takes-all classification (eq. 2.8): the label of the closest prototype.

    Parameters
    ----------
    distances : Tensor, shape (B, W)
    prototype_labels : Tensor, shape (W,)

    Returns
    -------
    Tensor, shape (B,)
    """
    if distances.dim() != 2 or prototype_labels.shape != (distances.shape[1],):
        raise ValueError(
            f"expected distances (B, W) and prototype_labels (W,), got "
            f"{tuple(distances.shape)} and {tuple(prototype_labels.shape)}"
        )
    return prototype_labels.to(distances.device)[distances.argmin(1)]
