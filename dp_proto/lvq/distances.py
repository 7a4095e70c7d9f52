"""Dissimilarities between a batch of inputs and a set of prototypes.

All functions are pure, differentiable, device-agnostic and return a matrix of
shape ``(B, W)``: one row per input, one column per prototype.

Values come from the expansion ``|a|^2 + |b|^2 - 2 a.b`` (one matmul), clamped at zero.
For a single input (``B = 1``) the derivative is that of the explicit differences
``x - w_j``: generic per-sample gradient engines (Opacus' functorch mode) differentiate
one record's forward at a time, and the expansion's derivative next to a prototype is a
difference of large terms, zero wherever the value rounded below zero.

Notation: ``x`` is ``(B, d)``, prototypes ``w`` are ``(W, d)``, a global
projection ``omega`` is ``(r, d)`` and local projections ``omegas`` are
``(W, r, d)``; ``r`` may be smaller than ``d`` (limited-rank metric).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["squared_euclidean_distance", "omega_distance", "lomega_distance"]


def _check_pair(x: Tensor, w: Tensor) -> None:
    if x.dim() != 2 or w.dim() != 2:
        raise ValueError(
            f"expected x of shape (B, d) and prototypes of shape (W, d), "
            f"got x {tuple(x.shape)} and prototypes {tuple(w.shape)}"
        )
    if x.shape[1] != w.shape[1]:
        raise ValueError(f"x has {x.shape[1]} features but the prototypes have {w.shape[1]}")


def _pairwise_sq(a: Tensor, b: Tensor) -> Tensor:
    """``||a_i - b_j||^2`` for ``a (B, k)``, ``b (W, k)`` via the expansion
    ``|a|^2 + |b|^2 - 2 a.b`` (one matmul), clamped at zero against rounding."""
    sq = a.pow(2).sum(1, keepdim=True) + b.pow(2).sum(1) - 2.0 * (a @ b.T)
    return sq.clamp_min(0.0)


def _single_input_derivative(sq: Tensor, x: Tensor, w: Tensor, projection: Tensor | None = None) -> Tensor:
    """``sq (B, W)`` unchanged for a batch; for one input (``B = 1``) the same values with
    the derivative of the explicit differences ``x - w_j`` (projected by ``projection``,
    ``(d, r)`` or per prototype ``(W, d, r)``): no difference of large terms and no clamp
    at zero, which the expansion's derivative has next to a prototype."""
    if x.shape[0] != 1:
        return sq
    diff = x.unsqueeze(1) - w  # (1, W, d)
    if projection is not None:
        diff = diff @ projection if projection.dim() == 2 else (diff.transpose(0, 1) @ projection).transpose(0, 1)
    explicit = diff.square().sum(-1)
    return sq.detach() + (explicit - explicit.detach())


def squared_euclidean_distance(x: Tensor, w: Tensor) -> Tensor:
    """Squared Euclidean distance ``d(x, w) = (x - w)^T (x - w)`` (Brinkrolf 2023, eq. 2.9).

    Parameters
    ----------
    x : Tensor, shape (B, d)
        Inputs.
    w : Tensor, shape (W, d)
        Prototypes.

    Returns
    -------
    Tensor, shape (B, W)
        The squared distance of every input to every prototype.

    Examples
    --------
    >>> import torch
    >>> from dp_proto.lvq import squared_euclidean_distance
    >>> x = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    >>> w = torch.tensor([[0.0, 0.0], [3.0, 4.0]])
    >>> squared_euclidean_distance(x, w)
    tensor([[ 0., 25.],
            [ 2., 13.]])
    """
    _check_pair(x, w)
    return _single_input_derivative(_pairwise_sq(x, w), x, w)


def omega_distance(x: Tensor, w: Tensor, omega: Tensor) -> Tensor:
    """Adaptive quadratic form ``d(x, w) = (x - w)^T Omega^T Omega (x - w)`` (eq. 2.15).

    Computed as the squared Euclidean distance between the projections
    ``Omega x`` and ``Omega w``, which costs ``O((B + W) r d)``.

    Parameters
    ----------
    x : Tensor, shape (B, d)
        Inputs.
    w : Tensor, shape (W, d)
        Prototypes.
    omega : Tensor, shape (r, d)
        The projection ``Omega``.

    Returns
    -------
    Tensor, shape (B, W)
        The distance of every input to every prototype.

    Examples
    --------
    >>> import torch
    >>> from dp_proto.lvq import omega_distance
    >>> x = torch.tensor([[1.0, 1.0]])
    >>> w = torch.zeros(1, 2)
    >>> omega_distance(x, w, torch.tensor([[2.0, 0.0]]))  # only the first feature, scaled by 2
    tensor([[4.]])
    """
    _check_pair(x, w)
    if omega.dim() != 2 or omega.shape[1] != x.shape[1]:
        raise ValueError(f"expected omega of shape (r, {x.shape[1]}), got {tuple(omega.shape)}")
    return _single_input_derivative(_pairwise_sq(x @ omega.T, w @ omega.T), x, w, omega.T)


def lomega_distance(x: Tensor, w: Tensor, omegas: Tensor) -> Tensor:
    """Local adaptive distance ``d_j(x, w_j) = ||Omega_j (x - w_j)||^2`` (eq. 2.21).

    Every prototype ``j`` has its own projection ``Omega_j``.

    Parameters
    ----------
    x : Tensor, shape (B, d)
    w : Tensor, shape (W, d)
    omegas : Tensor, shape (W, r, d)

    Returns
    -------
    Tensor, shape (B, W)
    """
    _check_pair(x, w)
    if omegas.dim() != 3 or omegas.shape[0] != w.shape[0] or omegas.shape[2] != x.shape[1]:
        raise ValueError(f"expected omegas of shape ({w.shape[0]}, r, {x.shape[1]}), got {tuple(omegas.shape)}")
    if quadratic_form_is_cheaper(omegas):
        sq = _lomega_quadratic(x, w, omegas)
    else:
        # Project the inputs once per prototype: (B, W, r); the prototypes: (W, r).
        x_proj = torch.einsum("bd,wrd->bwr", x, omegas)
        w_proj = torch.einsum("wd,wrd->wr", w, omegas)
        sq = (x_proj - w_proj).pow(2).sum(-1)
    return _single_input_derivative(sq, x, w, omegas.transpose(1, 2))


def quadratic_form_is_cheaper(omegas: Tensor) -> bool:
    """Whether ``lomega_distance`` computes local metrics ``omegas (W, r, d)`` as the
    quadratic form (``d^2 <= W r``: few features, many local metrics) rather than by
    projecting the inputs."""
    n_prototypes, rank, d = omegas.shape
    return d * d <= n_prototypes * rank


def outer_products(x: Tensor) -> Tensor:
    """``x_i x_i^T`` of every row, flattened: ``(B, d^2)`` (the quadratic form's input; a
    full-batch fit computes it once)."""
    return (x.unsqueeze(2) * x.unsqueeze(1)).flatten(1)


def _lomega_quadratic(x: Tensor, w: Tensor, omegas: Tensor) -> Tensor:
    """``lomega_distance`` as the quadratic form ``x^T L_j x - 2 (L_j w_j)^T x + w_j^T L_j w_j``
    with ``L_j = Omega_j^T Omega_j``: one ``(B, d^2) @ (d^2, W)`` matmul instead of the
    ``(B, W, r)`` projections, the cheaper layout when ``d^2 <= W r`` (few features, many
    local metrics). Clamped at zero against rounding, as ``_pairwise_sq``."""
    lambdas = omegas.transpose(1, 2) @ omegas  # (W, d, d)
    outer = outer_products(x)  # (B, d^2)
    lambda_w = torch.einsum("wde,we->wd", lambdas, w)  # (W, d)
    sq = outer @ lambdas.flatten(1).T - 2.0 * (x @ lambda_w.T) + (lambda_w * w).sum(1)
    return sq.clamp_min(0.0)
