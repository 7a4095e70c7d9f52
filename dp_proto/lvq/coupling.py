"""Pairwise coupling: class probabilities from pairwise probabilities (batched).

Every method takes pairwise probabilities ``R (B, c, c)`` with ``R[:, l, m] = r_lm``,
the probability of class ``l`` given that the class is ``l`` or ``m``, so that
``r_lm + r_ml = 1`` (the diagonal is ignored), and returns ``p (B, c)`` on the simplex
(non-negative rows that sum to 1). All of them work on the whole batch at once; ``ht``
loops over its iterations (and over the ``c`` classes inside one sweep), never over
samples.

=========  ==================================================================  ==============
method     rule                                                                source
=========  ==================================================================  ==============
voting     ``p_l`` = pairwise wins of ``l`` / ``c(c-1)/2`` (a tie: half a win)  Friedman (1996)
ht         weighted KL fit ``sum n_lm r_lm log(r_lm / rho_lm)``, Algorithm 4.1  Hastie & Tibshirani (1998)
pkpd       ``p_l = 1 / (sum_{m != l} 1/r_lm - (c - 2))``, then normalised       Price et al. (1994)
wlw1       ``p_l = sum_{m != l} (p_l + p_m) r_lm / (c - 1)``: c equations        Wu, Lin & Weng (2004)
wlw2       ``min sum_l sum_{m != l} (r_ml p_l - r_lm p_m)^2``: c + 1 equations   Wu, Lin & Weng (2004)
=========  ==================================================================  ==============

Brinkrolf (2023), section 4.4, compares the four refined methods for pairwise GMLVQ
with Platt-scaled scores (``dp_proto.lvq.pairwise``) and recommends PKPD as the
cheapest; the four agree closely when the classes are about balanced.

Choices where the dissertation leaves room (each is documented at its function):
voting divides by the number of pairs ``c(c-1)/2`` instead of ``c``, so that the rows
sum to 1; PKPD, HT and WLW clip ``r`` to ``[eps, 1 - eps]`` (PKPD divides by ``r``; HT
and WLW need ``0 < r < 1`` for a unique positive solution); the WLW solutions are
clipped at 0 and renormalised.

Examples
--------
>>> import torch
>>> from dp_proto.lvq.coupling import consistent_pairwise, pkpd
>>> p = torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64)
>>> R = consistent_pairwise(p)  # r_lm = p_l / (p_l + p_m)
>>> pkpd(R)
tensor([[0.5000, 0.3000, 0.2000]], dtype=torch.float64)
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "COUPLING_METHODS",
    "CouplingMethod",
    "check_pairwise",
    "consistent_pairwise",
    "couple",
    "ht",
    "pairs_to_matrix",
    "pkpd",
    "voting",
    "wlw1",
    "wlw2",
]

CouplingMethod = Literal["voting", "ht", "pkpd", "wlw1", "wlw2"]
#: The method names ``couple`` (and ``PairwiseGMLVQ(coupling=...)``) accept.
COUPLING_METHODS: tuple[str, ...] = ("voting", "ht", "pkpd", "wlw1", "wlw2")

#: Default clip of ``r`` into ``[eps, 1 - eps]`` for PKPD, HT and WLW.
DEFAULT_EPS = 1e-7


def _atol(dtype: torch.dtype) -> float:
    """Tolerance of the ``r_lm + r_ml = 1`` check: loose enough for float32 rounding."""
    return max(1e-6, 100.0 * torch.finfo(dtype).eps)


def check_pairwise(R: Tensor | np.ndarray, *, atol: float | None = None) -> Tensor:
    """Validate pairwise probabilities and return them as a floating tensor.

    Parameters
    ----------
    R : Tensor or ndarray, shape (B, c, c)
        ``R[:, l, m] = r_lm``; the diagonal is ignored.
    atol : float, optional
        Allowed deviation of ``r_lm + r_ml`` from 1 (default: ``1e-6``, or more for a
        low-precision dtype).

    Returns
    -------
    Tensor, shape (B, c, c)
        ``R`` (an integer input as torch's default float dtype), diagonal set to 0.5.

    Raises
    ------
    ValueError
        On a wrong shape, fewer than 2 classes, NaN or inf, values outside ``[0, 1]``,
        or ``r_lm + r_ml != 1``; the message names the first offending entry.
    """
    R = torch.as_tensor(R)
    if not R.is_floating_point():
        R = R.to(torch.get_default_dtype())
    if R.dim() != 3 or R.shape[1] != R.shape[2]:
        raise ValueError(
            f"expected pairwise probabilities of shape (B, c, c) with R[:, l, m] = r_lm, got {tuple(R.shape)}"
        )
    c = R.shape[1]
    if c < 2:
        raise ValueError(f"pairwise coupling needs at least 2 classes, got c = {c}")
    off = ~torch.eye(c, dtype=torch.bool, device=R.device)
    values = R[:, off]
    if not bool(torch.isfinite(values).all()):
        bad = (~torch.isfinite(R) & off).nonzero()[0].tolist()
        raise ValueError(
            f"pairwise probabilities contain NaN or inf; R[{bad[0]}, {bad[1]}, {bad[2]}] = "
            f"{float(R[bad[0], bad[1], bad[2]])}"
        )
    if values.numel() and (bool((values < 0).any()) or bool((values > 1).any())):
        bad = (((R < 0) | (R > 1)) & off).nonzero()[0].tolist()
        raise ValueError(
            f"pairwise probabilities must lie in [0, 1]; R[{bad[0]}, {bad[1]}, {bad[2]}] = "
            f"{float(R[bad[0], bad[1], bad[2]]):g}"
        )
    tol = _atol(R.dtype) if atol is None else atol
    gap = (R + R.transpose(1, 2) - 1.0).abs() * off
    if gap.numel() and bool((gap > tol).any()):
        b, i, j = (gap > tol).nonzero()[0].tolist()
        raise ValueError(
            f"pairwise probabilities must satisfy r_lm + r_ml = 1; sample {b}: "
            f"r_{i}{j} + r_{j}{i} = {float(R[b, i, j] + R[b, j, i]):.6g}"
        )
    eye = torch.eye(c, dtype=torch.bool, device=R.device)
    return torch.where(eye, torch.full_like(R, 0.5), R)


def pairs_to_matrix(r: Tensor, num_classes: int) -> Tensor:
    """Pairwise probabilities ``(B, K)`` for the pairs ``l < m`` in
    ``torch.triu_indices(c, c, 1)`` order into ``R (B, c, c)`` with ``R[:, m, l] = 1 - r``
    (diagonal 0.5).

    Examples
    --------
    >>> import torch
    >>> pairs_to_matrix(torch.tensor([[0.9, 0.8, 0.6]]), 3)
    tensor([[[0.5000, 0.9000, 0.8000],
             [0.1000, 0.5000, 0.6000],
             [0.2000, 0.4000, 0.5000]]])
    """
    K = num_classes * (num_classes - 1) // 2
    if r.dim() != 2 or r.shape[1] != K:
        raise ValueError(
            f"expected pairwise probabilities of shape (B, {K}) for {num_classes} classes, got {tuple(r.shape)}"
        )
    rows, cols = torch.triu_indices(num_classes, num_classes, 1, device=r.device)
    R = torch.full((r.shape[0], num_classes, num_classes), 0.5, dtype=r.dtype, device=r.device)
    R[:, rows, cols] = r
    R[:, cols, rows] = 1.0 - r
    return R


def consistent_pairwise(p: Tensor) -> Tensor:
    """The pairwise probabilities ``r_lm = p_l / (p_l + p_m)`` of class probabilities
    ``p (B, c)`` (Bradley-Terry); every refined coupling method recovers ``p`` from them."""
    if p.dim() != 2:
        raise ValueError(f"expected class probabilities of shape (B, c), got {tuple(p.shape)}")
    total = p[:, :, None] + p[:, None, :]
    return torch.where(total > 0, p[:, :, None] / total.clamp_min(torch.finfo(p.dtype).tiny), 0.5)


def _off_diagonal(c: int, R: Tensor) -> Tensor:
    return ~torch.eye(c, dtype=torch.bool, device=R.device)


def _clip(R: Tensor, eps: float) -> Tensor:
    if not 0.0 <= eps < 0.5:
        raise ValueError(f"eps must lie in [0, 0.5), got {eps!r}")
    return R.clamp(eps, 1.0 - eps)


def _normalise(p: Tensor) -> Tensor:
    return p / p.sum(1, keepdim=True)


def voting(R: Tensor | np.ndarray) -> Tensor:
    """Pairwise voting (Friedman 1996): ``p_l`` = wins of class ``l`` over the others.

    Class ``l`` wins against ``m`` when ``r_lm > 1/2``; an exact tie gives half a win to
    each. The wins are divided by the number of pairs ``c(c-1)/2``, so the rows sum
    to 1. (Brinkrolf (2023) divides by ``c``, which only rescales; the argmax and the
    order are the same.)

    Parameters
    ----------
    R : Tensor or ndarray, shape (B, c, c)

    Returns
    -------
    Tensor, shape (B, c)
    """
    R = check_pairwise(R)
    c = R.shape[1]
    off = _off_diagonal(c, R)
    wins = ((R > 0.5).to(R.dtype) + 0.5 * (R == 0.5).to(R.dtype)) * off
    return wins.sum(2) / (c * (c - 1) / 2)


def pkpd(R: Tensor | np.ndarray, *, eps: float = DEFAULT_EPS) -> Tensor:
    """Price, Knerr, Personnaz & Dreyfus (1994): ``p_l = 1 / (sum_{m != l} 1/r_lm - (c - 2))``,
    then normalised (Brinkrolf 2023, eq. 4.22).

    ``r`` is clipped to ``[eps, 1 - eps]`` first: ``1 / r_lm`` blows up as ``r_lm -> 0``.
    The denominator is then at least 1 (every ``1/r_lm >= 1``), so ``p > 0``.

    Parameters
    ----------
    R : Tensor or ndarray, shape (B, c, c)
    eps : float, default 1e-7

    Returns
    -------
    Tensor, shape (B, c)
    """
    R = _clip(check_pairwise(R), eps)
    c = R.shape[1]
    inv = (1.0 / R) * _off_diagonal(c, R)
    return _normalise(1.0 / (inv.sum(2) - (c - 2)))


def _pair_weights(n: Tensor | np.ndarray | None, R: Tensor) -> Tensor:
    """HT's weights ``n_lm`` as ``(B, c, c)`` or ``(1, c, c)``, off-diagonal positive."""
    c = R.shape[1]
    if n is None:
        return torch.ones((1, c, c), dtype=R.dtype, device=R.device)
    n = torch.as_tensor(n, dtype=R.dtype, device=R.device)
    if n.dim() == 2:
        n = n[None]
    if n.dim() != 3 or n.shape[1:] != (c, c) or n.shape[0] not in (1, R.shape[0]):
        raise ValueError(f"expected pair weights n of shape (c, c) or (B, c, c) with c = {c}, got {tuple(n.shape)}")
    off = _off_diagonal(c, R)
    weights = n[:, off]
    if not bool(torch.isfinite(weights).all()) or bool((weights <= 0).any()):
        raise ValueError("pair weights n_lm must be finite and positive for every pair l != m")
    if not torch.allclose(n, n.transpose(1, 2)):
        raise ValueError("pair weights must be symmetric: n_lm = n_ml (the samples of classes l and m)")
    return n


def ht(
    R: Tensor | np.ndarray,
    n: Tensor | np.ndarray | None = None,
    *,
    tol: float = 1e-10,
    max_iter: int = 1000,
    eps: float = DEFAULT_EPS,
    return_n_iter: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Hastie & Tibshirani (1998) coupling, Algorithm 4.1 of Brinkrolf (2023).

    Finds ``p`` with ``sum_{m != l} n_lm rho_lm = sum_{m != l} n_lm r_lm`` for every
    ``l``, ``rho_lm = p_l / (p_l + p_m)``, ``sum p = 1``: the minimiser of the weighted
    Kullback-Leibler divergence ``sum_{l != m} n_lm r_lm log(r_lm / rho_lm)`` (eq. 4.19-4.20).
    Starting from ``p = 1/c``, every sweep multiplies each ``p_l`` in turn by
    ``alpha = sum_m n_lm r_lm / sum_m n_lm rho_lm`` (``rho`` recomputed from the current
    ``p``, which equals the update of lines 8-9), then normalises ``p``. A sample stops
    (its ``p`` is frozen) after the first sweep in which every ``|alpha - 1| < tol``, so
    its result does not depend on the rest of the batch.

    Parameters
    ----------
    R : Tensor or ndarray, shape (B, c, c)
    n : Tensor or ndarray, shape (c, c) or (B, c, c), optional
        ``n_lm``: the number of training samples of classes ``l`` and ``m`` (symmetric,
        positive); ``None`` weights every pair 1.
    tol : float, default 1e-10
        Convergence threshold on ``|alpha - 1|``.
    max_iter : int, default 1000
        Maximum number of sweeps.
    eps : float, default 1e-7
        ``r`` is clipped to ``[eps, 1 - eps]`` so that the fixed point is positive.
    return_n_iter : bool, default False
        Also return the sweeps every sample took ``(B,)`` (``max_iter`` where it did not
        converge).

    Returns
    -------
    Tensor, shape (B, c), or (p, n_iter)
    """
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")
    if not tol > 0:
        raise ValueError(f"tol must be positive, got {tol!r}")
    R = _clip(check_pairwise(R), eps)
    B, c = R.shape[0], R.shape[1]
    off = _off_diagonal(c, R).to(R.dtype)
    weights = _pair_weights(n, R) * off  # (B or 1, c, c), zero diagonal
    target = (weights * R).sum(2)  # (B, c): sum_m n_lm r_lm, fixed
    p = torch.full((B, c), 1.0 / c, dtype=R.dtype, device=R.device)
    active = torch.ones(B, dtype=torch.bool, device=R.device)
    n_iter = torch.full((B,), max_iter, dtype=torch.long, device=R.device)
    for it in range(max_iter):
        deviation = torch.zeros(B, dtype=R.dtype, device=R.device)
        new = p.clone()
        for k in range(c):  # class l = k
            rho = new[:, k : k + 1] / (new[:, k : k + 1] + new)  # (B, c): rho_lm
            alpha = target[:, k] / (weights[:, k] * rho).sum(1)
            new[:, k] = new[:, k] * alpha
            deviation = torch.maximum(deviation, (alpha - 1.0).abs())
        new = _normalise(new)
        p = torch.where(active[:, None], new, p)
        done = active & (deviation < tol)
        n_iter = torch.where(done, torch.full_like(n_iter, it + 1), n_iter)
        active = active & ~done
        if not bool(active.any()):
            break
    return (p, n_iter) if return_n_iter else p


def _solve(A: Tensor, rhs: Tensor) -> Tensor:
    """Batched ``A x = rhs``; a singular system falls back to the least-squares solution."""
    x, info = torch.linalg.solve_ex(A, rhs)
    bad = info != 0
    if bool(bad.any()):
        x = x.clone()
        x[bad] = (torch.linalg.pinv(A[bad]) @ rhs[bad][..., None])[..., 0]
    return x


def _clip_simplex(p: Tensor) -> Tensor:
    """Clip negative entries to 0 and renormalise (the WLW solutions)."""
    p = p.clamp_min(0.0)
    total = p.sum(1, keepdim=True)
    uniform = torch.full_like(p, 1.0 / p.shape[1])
    return torch.where(total > 0, p / total.clamp_min(torch.finfo(p.dtype).tiny), uniform)


def wlw1(R: Tensor | np.ndarray, *, eps: float = DEFAULT_EPS) -> Tensor:
    """Wu, Lin & Weng (2004), method 1 (Brinkrolf 2023, eq. 4.23-4.24).

    ``p_l = sum_{m != l} (p_l + p_m) r_lm / (c - 1)`` is ``Q p = 0`` with
    ``Q_ll = sum_{m != l} r_ml`` and ``Q_lm = -r_lm``: ``p`` is the stationary
    distribution of a Markov chain, and ``min ||Q p||^2`` of eq. 4.24 has the value 0
    there. The columns of ``Q`` sum to 0, so one equation is redundant; it is replaced by
    ``sum p = 1``, which leaves ``c`` equations, solved batched with
    ``torch.linalg.solve``. ``r`` is clipped to ``[eps, 1 - eps]`` (then the chain is
    irreducible and the solution unique and positive); negative entries from rounding
    are clipped to 0 and the rows renormalised.

    Parameters
    ----------
    R : Tensor or ndarray, shape (B, c, c)
    eps : float, default 1e-7

    Returns
    -------
    Tensor, shape (B, c)
    """
    R = _clip(check_pairwise(R), eps)
    B, c = R.shape[0], R.shape[1]
    off = _off_diagonal(c, R).to(R.dtype)
    Roff = R * off
    Q = torch.diag_embed(Roff.sum(1)) - Roff  # Q_ll = sum_m r_ml, Q_lm = -r_lm
    A = Q.clone()
    A[:, -1, :] = 1.0
    rhs = torch.zeros((B, c), dtype=R.dtype, device=R.device)
    rhs[:, -1] = 1.0
    return _clip_simplex(_solve(A, rhs))


def wlw2(R: Tensor | np.ndarray, *, eps: float = DEFAULT_EPS) -> Tensor:
    """Wu, Lin & Weng (2004), method 2 (Brinkrolf 2023, eq. 4.25).

    ``min_p sum_l sum_{m != l} (r_ml p_l - r_lm p_m)^2 = 2 p^T Q p`` subject to
    ``sum p = 1``, with ``Q_ll = sum_{m != l} r_ml^2`` and ``Q_lm = -r_ml r_lm``. Its
    optimality conditions are the ``c + 1`` equations ``[[Q, 1], [1^T, 0]] [p; b] = [0; 1]``,
    solved batched with ``torch.linalg.solve``. ``r`` is clipped to ``[eps, 1 - eps]``;
    negative entries are clipped to 0 and the rows renormalised.

    Parameters
    ----------
    R : Tensor or ndarray, shape (B, c, c)
    eps : float, default 1e-7

    Returns
    -------
    Tensor, shape (B, c)
    """
    R = _clip(check_pairwise(R), eps)
    B, c = R.shape[0], R.shape[1]
    off = _off_diagonal(c, R).to(R.dtype)
    Rt = R.transpose(1, 2)  # Rt[:, l, m] = r_ml
    Q = torch.diag_embed((Rt.pow(2) * off).sum(2)) - Rt * R * off
    A = torch.zeros((B, c + 1, c + 1), dtype=R.dtype, device=R.device)
    A[:, :c, :c] = Q
    A[:, :c, c] = 1.0
    A[:, c, :c] = 1.0
    rhs = torch.zeros((B, c + 1), dtype=R.dtype, device=R.device)
    rhs[:, c] = 1.0
    return _clip_simplex(_solve(A, rhs)[:, :c])


def couple(
    R: Tensor | np.ndarray,
    method: str = "pkpd",
    *,
    n: Tensor | np.ndarray | None = None,
    **options,
) -> Tensor:
    """Class probabilities ``(B, c)`` from ``R (B, c, c)`` by ``method`` (one of
    ``COUPLING_METHODS``); ``n`` are HT's pair weights (ignored by the other methods),
    ``options`` go to the method (``eps``; ``tol``, ``max_iter`` for HT)."""
    if method == "ht":
        return ht(R, n, **options)  # type: ignore[return-value]
    functions = {"voting": voting, "pkpd": pkpd, "wlw1": wlw1, "wlw2": wlw2}
    if method not in functions:
        raise ValueError(f"unknown coupling method {method!r}; expected one of {list(COUPLING_METHODS)}")
    return functions[method](R, **options)
