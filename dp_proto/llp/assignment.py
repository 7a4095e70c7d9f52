"""Cluster-to-label assignment from label proportions: vectorised multi-start local search.

Given a clustering of a node's records and the label proportions ``P`` of
time batches, the LLP algorithm (Sachweh, Boiar and Liebig, Sec. 3, after
Stolpe, Liebig and Morik 2015 and Stolpe and Morik 2011) labels every cluster
so that the proportions the labelled clustering predicts for the batches match
``P``: each cluster starts with a random label and labels are changed by local
search from several random starts, keeping a change whenever the loss improves.

Notation: ``C (B, k)`` holds the number of a batch's records in each cluster,
``n_b = sum_c C_bc`` the batch's size, ``R = C / n`` the cluster shares of a batch.
An assignment ``a (k,)`` maps cluster ``c`` to label ``a_c``; with ``A =
onehot(a) (k, L)`` the predicted proportions are ``Q_a = R A (B, L)``.

Loss (Sachweh, Boiar & Liebig (2021) do not state it): the squared error of the proportion matrices,
``loss(a) = sum_b w_b ||Q_a[b] - P[b]||_2^2``, summed over batches with weight
``w_b`` (0 for batches without records). It is the error of Stolpe and Morik's
LLPC as we read it, it is smooth in the proportions (noisy proportions from the
Laplace release are penalised in proportion to the noise energy rather than
their largest error), and it makes every candidate move's loss change an affine
function of one ``(k, L)`` contraction ``G = R^T diag(w) (Q_a - P)``, so all
moves of all starts are evaluated with one batched matrix product per step:

* relabel cluster ``c`` to ``l != a_c``: ``2 (G[c, l] - G[c, a_c] + s_c)`` with
  ``s_c = sum_b w_b R_bc^2``;
* swap the labels of clusters ``c, c'`` (``a_c != a_c'``): ``2 (G[c, a_c'] -
  G[c', a_c'] - G[c, a_c] + G[c', a_c]) + 2 (s_c + s_c' - 2 K_cc')`` with
  ``K = R^T diag(w) R``.

Steepest descent: every step applies, for every start that can still improve,
its best move (relabel or swap; ties to the first in the order relabels by
``(c, l)``, then swaps by ``(c, c')``), until no start improves or ``max_iter``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from dp_proto.exceptions import DataValidationError

__all__ = [
    "AssignmentResult",
    "candidate_deltas",
    "local_search",
    "predicted_proportions",
    "proportion_loss",
]


@dataclass(frozen=True)
class AssignmentResult:
    """Outcome of ``local_search``.

    Attributes
    ----------
    assignment : Tensor of shape (k,), int64
        Label of every cluster: the best start's local optimum.
    loss : float
        Its loss (recomputed from scratch).
    n_iter : int
        Steps taken (all starts step together).
    converged : bool
        ``True`` if no start could improve any more (a local optimum of every
        start with respect to relabels and, with ``swaps``, pairwise swaps);
        ``False`` if ``max_iter`` stopped the search.
    start_losses : Tensor of shape (S,), float64
        Final loss of every start.
    assignments : Tensor of shape (S, k), int64
        Final assignment of every start.
    """

    assignment: Tensor
    loss: float
    n_iter: int
    converged: bool
    start_losses: Tensor
    assignments: Tensor


def _prepare(cluster_counts: Tensor, proportions: Tensor, weights: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """``R (B, k)`` shares, ``P (B, L)`` float64, ``w (B,)`` (0 where a batch has no records)."""
    c = torch.as_tensor(cluster_counts)
    if c.dim() != 2:
        raise ValueError(f"cluster_counts must have shape (B, k), got {tuple(c.shape)}")
    p = torch.as_tensor(proportions, device=c.device)
    if p.dim() != 2 or p.shape[0] != c.shape[0]:
        raise ValueError(
            f"proportions must have shape (B, L) with B={c.shape[0]} (the rows of cluster_counts), got {tuple(p.shape)}"
        )
    if p.shape[1] < 1 or c.shape[1] < 1:
        raise ValueError("need at least one cluster and one label")
    c = c.to(torch.float64)
    p = p.to(torch.float64)
    if not bool(torch.isfinite(c).all()) or bool((c < 0).any()):
        raise DataValidationError("cluster_counts must be finite and >= 0")
    if not bool(torch.isfinite(p).all()):
        rows = torch.nonzero(~torch.isfinite(p).all(1)).flatten()[:10].tolist()
        raise DataValidationError(f"proportions contain NaN or inf (batch row(s) {rows})")
    sizes = c.sum(1)
    w = (sizes > 0).to(torch.float64)
    if weights is not None:
        wt = torch.as_tensor(weights, device=c.device).to(torch.float64)
        if wt.shape != (c.shape[0],):
            raise ValueError(f"weights must have shape ({c.shape[0]},), got {tuple(wt.shape)}")
        if not bool(torch.isfinite(wt).all()) or bool((wt < 0).any()):
            raise DataValidationError("weights must be finite and >= 0")
        w = w * wt
    r = c / sizes.clamp_min(1.0)[:, None]
    return r, p, w


def _check_assignments(assignments: Tensor, k: int, num_labels: int, device) -> Tensor:
    a = torch.as_tensor(assignments, device=device)
    squeeze = a.dim() == 1
    a = a.reshape(1, -1) if squeeze else a
    if a.dim() != 2 or a.shape[1] != k:
        raise ValueError(f"assignments must have shape (k,) or (S, k) with k={k}, got {tuple(a.shape)}")
    if a.is_floating_point() or a.dtype == torch.bool:
        raise DataValidationError(f"assignments must hold integers, got dtype {a.dtype}")
    if a.numel() and (int(a.min()) < 0 or int(a.max()) >= num_labels):
        raise DataValidationError(f"assignments must lie in 0..{num_labels - 1}")
    return a.long()


def predicted_proportions(cluster_counts: Tensor, assignments: Tensor, num_labels: int) -> Tensor:
    """``Q_a = R onehot(a)``: label proportions a labelled clustering predicts per batch.

    Parameters
    ----------
    cluster_counts : Tensor of shape (B, k)
    assignments : Tensor of shape (k,) or (S, k), integer in ``0 .. num_labels - 1``
    num_labels : int

    Returns
    -------
    Tensor of shape (B, L) or (S, B, L), float64
        Rows of batches without records are 0.
    """
    c = torch.as_tensor(cluster_counts).to(torch.float64)
    a = _check_assignments(assignments, c.shape[1], num_labels, c.device)
    r = c / c.sum(1).clamp_min(1.0)[:, None]
    q = r @ torch.nn.functional.one_hot(a, num_labels).to(torch.float64)
    return q[0] if torch.as_tensor(assignments).dim() == 1 else q


def proportion_loss(
    cluster_counts: Tensor, proportions: Tensor, assignments: Tensor, *, weights: Tensor | None = None
) -> Tensor:
    """``sum_b w_b ||Q_a[b] - P[b]||^2`` for one assignment ``(k,)`` or several ``(S, k)``.

    Returns
    -------
    Tensor of shape () or (S,), float64
    """
    r, p, w = _prepare(cluster_counts, proportions, weights)
    a = _check_assignments(assignments, r.shape[1], p.shape[1], r.device)
    e = r @ torch.nn.functional.one_hot(a, p.shape[1]).to(torch.float64) - p
    loss = (w[:, None] * e * e).sum((1, 2))
    return loss[0] if torch.as_tensor(assignments).dim() == 1 else loss


def _deltas(r: Tensor, p: Tensor, w: Tensor, s: Tensor, kk: Tensor | None, a: Tensor) -> tuple[Tensor, Tensor | None]:
    num_labels = p.shape[1]
    onehot = torch.nn.functional.one_hot(a, num_labels).to(torch.float64)  # (S, k, L)
    e = r @ onehot - p  # (S, B, L)
    g = r.T @ (w[:, None] * e)  # (S, k, L)
    g_own = g.gather(2, a[:, :, None])  # (S, k, 1)
    moves = 2.0 * (g - g_own + s[None, :, None])
    moves = moves.masked_fill(onehot.bool(), math.inf)
    if kk is None:
        return moves, None
    k = a.shape[1]
    ga = g.gather(2, a[:, None, :].expand(-1, k, k))  # ga[s, c, c'] = G[s, c, a_c']
    diag = ga.diagonal(dim1=1, dim2=2)  # G[s, c, a_c]
    swaps = 2.0 * (ga + ga.transpose(1, 2) - diag[:, None, :] - diag[:, :, None])
    swaps = swaps + 2.0 * (s[:, None] + s[None, :] - 2.0 * kk)
    same = a[:, :, None] == a[:, None, :]
    lower = torch.ones(k, k, dtype=torch.bool, device=a.device).tril()
    return moves, swaps.masked_fill(same | lower, math.inf)


def candidate_deltas(
    cluster_counts: Tensor,
    proportions: Tensor,
    assignments: Tensor,
    *,
    weights: Tensor | None = None,
    swaps: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """Loss change of every single move, for every assignment, in closed form.

    Parameters
    ----------
    cluster_counts : Tensor of shape (B, k)
    proportions : Tensor of shape (B, L)
    assignments : Tensor of shape (S, k), integer
    weights : Tensor of shape (B,), optional
        Extra non-negative batch weights (e.g. the ``valid`` mask of a release).
    swaps : bool, default True

    Returns
    -------
    moves : Tensor of shape (S, k, L)
        ``loss(a with a_c := l) - loss(a)``; ``inf`` where ``l == a_c``.
    swaps : Tensor of shape (S, k, k) or None
        ``loss(a with a_c, a_c' exchanged) - loss(a)`` for ``c < c'`` with
        ``a_c != a_c'``; ``inf`` elsewhere.
    """
    r, p, w = _prepare(cluster_counts, proportions, weights)
    a = _check_assignments(assignments, r.shape[1], p.shape[1], r.device)
    s = (w[:, None] * r * r).sum(0)
    kk = r.T @ (w[:, None] * r) if swaps else None
    return _deltas(r, p, w, s, kk, a)


def local_search(
    cluster_counts: Tensor,
    proportions: Tensor,
    *,
    n_starts: int = 32,
    max_iter: int = 1000,
    swaps: bool = True,
    weights: Tensor | None = None,
    init: Tensor | None = None,
    generator: torch.Generator | None = None,
    tol: float = 1e-12,
) -> AssignmentResult:
    """Best cluster labels for the proportions: steepest-descent local search, many starts at once.

    Parameters
    ----------
    cluster_counts : Tensor of shape (B, k)
        Records of each batch in each cluster (finite, >= 0). Batches without
        records get weight 0.
    proportions : Tensor of shape (B, L)
        Target label proportions of the batches (exact or noisy; finite).
    n_starts : int, default 32
        Random starts ``S`` (labels drawn uniformly from ``generator``); ignored
        when ``init`` is given.
    max_iter : int, default 1000
        Most steps. Every step lowers the loss of every start that moves, so the
        search ends at a local optimum well before this in practice.
    swaps : bool, default True
        Also consider exchanging the labels of two clusters (a move that keeps
        the number of clusters per label; cheap: one ``(S, k, k)`` gather).
    weights : Tensor of shape (B,), optional
        Extra non-negative batch weights, e.g. the ``valid`` mask of a release or
        the batches a receiver shares with a sender.
    init : Tensor of shape (S, k), optional
        Starting assignments instead of random ones.
    generator : torch.Generator, optional
        Source of the random starts, on the device of ``cluster_counts``.
    tol : float, default 1e-12
        A move must lower the loss by more than ``tol * sum(w)``.

    Returns
    -------
    AssignmentResult

    Raises
    ------
    ValueError
        Bad shapes or parameters; no batch with records and positive weight.
    DataValidationError
        NaN/inf or negative counts, NaN/inf proportions, bad ``init``.
    """
    r, p, w = _prepare(cluster_counts, proportions, weights)
    num_batches, k = r.shape
    num_labels = p.shape[1]
    total_w = float(w.sum())
    if total_w <= 0:
        raise ValueError("no batch has both records and a positive weight: the proportions give nothing to fit")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 0:
        raise ValueError(f"max_iter must be an int >= 0, got {max_iter!r}")
    if init is not None:
        a = _check_assignments(init, k, num_labels, r.device)
        a = a.clone()
    else:
        if isinstance(n_starts, bool) or not isinstance(n_starts, int) or n_starts < 1:
            raise ValueError(f"n_starts must be an int >= 1, got {n_starts!r}")
        a = torch.randint(0, num_labels, (n_starts, k), generator=generator, device=r.device)
    n_s = a.shape[0]
    s = (w[:, None] * r * r).sum(0)
    kk = r.T @ (w[:, None] * r) if swaps else None
    threshold = -float(tol) * total_w
    n_moves = k * num_labels
    n_iter = 0
    converged = False
    for _ in range(max_iter):
        moves, swap = _deltas(r, p, w, s, kk, a)
        cand = moves.reshape(n_s, n_moves)
        if swap is not None:
            cand = torch.cat([cand, swap.reshape(n_s, k * k)], 1)
        best, idx = cand.min(1)
        improve = best < threshold
        if not bool(improve.any()):
            converged = True
            break
        n_iter += 1
        # relabel moves: idx < k L -> cluster idx // L gets label idx % L
        is_move = improve & (idx < n_moves)
        c_m = (idx // num_labels).clamp(max=k - 1)[:, None]
        a = a.scatter(1, c_m, torch.where(is_move[:, None], idx[:, None] % num_labels, a.gather(1, c_m)))
        if swap is not None:
            is_swap = improve & (idx >= n_moves)
            j = (idx - n_moves).clamp_min(0)
            c1, c2 = (j // k)[:, None], (j % k)[:, None]
            l1, l2 = a.gather(1, c1), a.gather(1, c2)
            a = a.scatter(1, c1, torch.where(is_swap[:, None], l2, l1))
            a = a.scatter(1, c2, torch.where(is_swap[:, None], l1, l2))
    else:
        moves, swap = _deltas(r, p, w, s, kk, a)
        converged = not bool((moves < threshold).any()) and not (swap is not None and bool((swap < threshold).any()))
    e = r @ torch.nn.functional.one_hot(a, num_labels).to(torch.float64) - p
    losses = (w[:, None] * e * e).sum((1, 2))
    best_start = int(losses.argmin())
    return AssignmentResult(
        assignment=a[best_start].clone(),
        loss=float(losses[best_start]),
        n_iter=n_iter,
        converged=converged,
        start_losses=losses,
        assignments=a,
    )
