"""One-versus-one GMLVQ with Platt-scaled, coupled class probabilities.

Brinkrolf (2023), section 4.4: train ``K = c(c-1)/2`` binary GMLVQ models, one per pair
of classes ``l < m``, each with one prototype per class and its own metric
``Lambda_k = Omega_k^T Omega_k``, on the samples of classes ``l`` and ``m`` only; turn
each model's signed relative-distance score

    h_lm(x) = (d(x, w_m) - d(x, w_l)) / (d(x, w_l) + d(x, w_m))   in [-1, 1]

into a pairwise probability ``r_lm(x) = 1 / (1 + exp(a_lm h_lm(x) + b_lm))`` by Platt
(1999) scaling fitted on a held-out calibration fold (eq. 4.13-4.18); and couple the
``r_lm`` into class probabilities ``p (c,)`` (``dp_proto.lvq.coupling``: voting, HT,
PKPD, WLW1, WLW2).

The dissertation's RelSim (eq. 4.17) is non-negative for both winners; the signed score
above is its pairwise version (positive when ``x`` is closer to ``w_l``), so ``a < 0`` is
expected. Platt's smoothed targets ``(N+ + 1)/(N+ + 2)`` and ``1/(N- + 2)`` are used.

All ``K`` pairs are trained as ONE batched computation: prototypes ``(K, 2, d)``,
projections ``(K, r, d)``, and one L-BFGS run on the sum of the ``K`` per-pair mean GLVQ
costs, each over its own samples only. The terms share no parameters, so the joint
optimum is the per-pair optimum. The Platt fit is batched over the pairs too (Newton's
method on ``K`` 2x2 systems at once).

The three steps are separate functions, so that a private variant can replace them one
by one: ``fit_pairwise_gmlvq`` (pairs), ``fit_platt`` (sigmoids), ``dp_proto.lvq.coupling``
(post-processing, free under differential privacy). ``PairwiseGMLVQ`` calls the first two
through its ``_fit_pairs`` and ``_fit_calibration`` methods.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted
from torch import Tensor, nn

from dp_proto._progress import wants_progress
from dp_proto._threads import fit_threads
from dp_proto._validation import torch_device, torch_dtype
from dp_proto.exceptions import DataValidationError
from dp_proto.lvq.coupling import COUPLING_METHODS, couple, pairs_to_matrix
from dp_proto.lvq.estimators import ValidatedClassifierMixin
from dp_proto.lvq.losses import TRANSFER_FUNCTIONS, transfer
from dp_proto.lvq.release import PublicReleaseHooks
from dp_proto.lvq.training import minimize_lbfgs
from dp_proto.release import (
    Releasable,
    Release,
    decode_labels,
    encode_hyperparameters,
    encode_labels,
    register_model,
    registered_name,
)

__all__ = [
    "PairwiseFit",
    "PairwiseGMLVQ",
    "PlattFit",
    "class_pairs",
    "fit_pairwise_gmlvq",
    "fit_platt",
    "pair_membership",
    "pairwise_cost",
    "pairwise_distances",
    "pairwise_scores",
    "platt_probabilities",
]

# Guards 0/0 when a sample sits on both prototypes of a pair (as in dp_proto.lvq.losses).
_EPS = 1e-12


# ----------------------------------------------------------------------------- pairs
def class_pairs(num_classes: int, *, device: torch.device | str | None = None) -> Tensor:
    """The ``K = c(c-1)/2`` class pairs ``(l, m)``, ``l < m``, as a ``(K, 2)`` long tensor
    in ``torch.triu_indices`` order: ``(0, 1), (0, 2), ..., (c-2, c-1)``."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 2:
        raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    return torch.triu_indices(int(num_classes), int(num_classes), 1, device=device).T.contiguous()


def pair_membership(y: Tensor, pairs: Tensor) -> Tensor:
    """Role of every sample in every pair, ``(n, K)`` int8: 1 where ``y`` is the pair's
    first class ``l`` (Platt's positive class), 0 where it is the second class ``m``,
    -1 where the sample belongs to neither."""
    y = y.to(pairs.device)
    first = y[:, None] == pairs[None, :, 0]
    second = y[:, None] == pairs[None, :, 1]
    out = torch.full(first.shape, -1, dtype=torch.int8, device=pairs.device)
    out[second] = 0
    out[first] = 1
    return out


def _check_pair_parameters(prototypes: Tensor, omegas: Tensor) -> None:
    if prototypes.dim() != 3 or prototypes.shape[1] != 2:
        raise ValueError(f"expected pair prototypes of shape (K, 2, d), got {tuple(prototypes.shape)}")
    K, _, d = prototypes.shape
    if omegas.dim() != 3 or omegas.shape[0] != K or omegas.shape[2] != d:
        raise ValueError(f"expected pair projections of shape ({K}, r, {d}), got {tuple(omegas.shape)}")


def pairwise_distances(x: Tensor, prototypes: Tensor, omegas: Tensor) -> Tensor:
    """``d_k(x, w_kj) = ||Omega_k (x - w_kj)||^2`` for every pair ``k`` and its two
    prototypes ``j``: ``x (B, d)``, ``prototypes (K, 2, d)``, ``omegas (K, r, d)`` ->
    ``(B, K, 2)``. Costs ``O(B K r d)`` (every sample under every pair's metric)."""
    _check_pair_parameters(prototypes, omegas)
    if x.dim() != 2 or x.shape[1] != prototypes.shape[2]:
        raise ValueError(f"expected x of shape (B, {prototypes.shape[2]}), got {tuple(x.shape)}")
    K, r, d = omegas.shape
    xp = (x @ omegas.reshape(K * r, d).T).reshape(x.shape[0], K, r)  # (B, K, r)
    wp = torch.einsum("kjd,krd->kjr", prototypes, omegas)  # (K, 2, r)
    sq = xp.pow(2).sum(-1)[:, :, None] + wp.pow(2).sum(-1)[None] - 2.0 * torch.einsum("bkr,kjr->bkj", xp, wp)
    return sq.clamp_min(0.0)


def pairwise_scores(x: Tensor, prototypes: Tensor, omegas: Tensor) -> Tensor:
    """Signed relative-distance scores ``h_lm(x) = (d_m - d_l) / (d_l + d_m)`` in
    ``[-1, 1]``, ``(B, K)``: positive when ``x`` is closer to the prototype of the pair's
    first class ``l``; 0 on the pair's decision boundary (the pairwise RelSim of
    Brinkrolf (2023), eq. 4.17, with a sign)."""
    dist = pairwise_distances(x, prototypes, omegas)
    d_l, d_m = dist[..., 0], dist[..., 1]
    return (d_m - d_l) / (d_l + d_m).clamp_min(_EPS)


def pairwise_cost(
    distances: Tensor,
    membership: Tensor,
    *,
    transfer_fn: str = "identity",
    beta: float = 1.0,
) -> Tensor:
    """Mean GLVQ cost of every pair over its own samples, ``(K,)``.

    ``distances (B, K, 2)`` from ``pairwise_distances``, ``membership (B, K)`` from
    ``pair_membership``. For a sample of class ``l`` in pair ``(l, m)``
    ``mu = (d_l - d_m) / (d_l + d_m)`` (and the reverse for class ``m``); samples of other
    classes are masked out. This is the dense reference of the class-blocked cost that
    ``fit_pairwise_gmlvq`` minimises (the tests check that the two agree).
    """
    if distances.dim() != 3 or distances.shape[2] != 2 or membership.shape != distances.shape[:2]:
        raise ValueError(
            f"expected distances (B, K, 2) and membership (B, K), got {tuple(distances.shape)} "
            f"and {tuple(membership.shape)}"
        )
    inside = membership >= 0
    own_first = membership == 1
    d_own = torch.where(own_first, distances[..., 0], distances[..., 1])
    d_other = torch.where(own_first, distances[..., 1], distances[..., 0])
    mu = (d_own - d_other) / (d_own + d_other).clamp_min(_EPS)
    cost = torch.where(inside, transfer(mu, transfer_fn, beta), torch.zeros_like(mu))  # type: ignore[arg-type]
    counts = inside.sum(0)
    return cost.sum(0) / counts.clamp_min(1).to(cost.dtype)


# ----------------------------------------------------------------------------- training
@dataclass
class _ClassBlocks:
    """Training data laid out by class for the batched cost: every sample enters once
    per pair it belongs to (``c - 1`` pairs), not ``K`` times.

    The quadratic term ``x^T Lambda_k x`` is computed one of two ways: by projecting ``x``
    with the ``c - 1`` matrices ``Omega_k`` of its class's pairs (``n (c-1) r d`` products
    and elementwise work on an ``(n, c-1, r)`` tensor), or, when ``rank >= (d+1)/2`` and
    the ``d(d+1)/2`` quadratic features of the data fit in memory, as one product of those
    features with the upper triangles of the ``Lambda_k`` (``n (c-1) d(d+1)/2`` products,
    no large elementwise work).
    """

    x: Tensor  # (c, n_max, d), zero padded
    valid: Tensor  # (c, n_max) bool
    pair: Tensor  # (c, c-1): the pair index of class l and its j-th partner
    side: Tensor  # (c, c-1): 0 if l is the pair's first class, 1 if the second
    counts: Tensor  # (K,): samples of the pair (n_lm)
    quad: Tensor | None = None  # (c, n_max, d(d+1)/2): x_i x_j for i <= j, off-diagonal doubled
    triu: Tensor | None = None  # (2, d(d+1)/2): the upper-triangle indices of quad

    #: Largest quadratic-feature tensor (elements) the quadratic path builds.
    QUAD_LIMIT: ClassVar[int] = 2**24

    @classmethod
    def build(
        cls,
        x: Tensor,
        y: Tensor,
        num_classes: int,
        pairs: Tensor,
        *,
        rank: int | None = None,
        quadratic: bool | None = None,
    ) -> _ClassBlocks:
        """``quadratic``: force (True) or refuse (False) the quadratic-feature path; None
        chooses it when ``rank >= (d+1)/2`` and the features fit ``QUAD_LIMIT``."""
        c = num_classes
        per_class = torch.bincount(y, minlength=c)
        n_max = int(per_class.max())
        order = torch.argsort(y, stable=True)
        starts = torch.cumsum(per_class, 0) - per_class
        slot = torch.arange(len(y), device=y.device) - starts[y[order]]  # position inside its class
        blocks = torch.zeros((c, n_max, x.shape[1]), dtype=x.dtype, device=x.device)
        blocks[y[order], slot] = x[order]
        valid = torch.zeros((c, n_max), dtype=torch.bool, device=x.device)
        valid[y[order], slot] = True
        index = torch.full((c, c), -1, dtype=torch.long, device=x.device)
        K = pairs.shape[0]
        index[pairs[:, 0], pairs[:, 1]] = torch.arange(K, device=x.device)
        index[pairs[:, 1], pairs[:, 0]] = torch.arange(K, device=x.device)
        partners = torch.stack([torch.cat([torch.arange(0, k), torch.arange(k + 1, c)]) for k in range(c)])
        partners = partners.to(x.device)
        pair = index.gather(1, partners)  # (c, c-1)
        side = (torch.arange(c, device=x.device)[:, None] > partners).long()  # l is second when l > m
        counts = per_class[pairs[:, 0]] + per_class[pairs[:, 1]]
        d = x.shape[1]
        n_feat = d * (d + 1) // 2
        if quadratic is None:
            r = d if rank is None else rank
            quadratic = 2 * r >= d + 1 and c * n_max * n_feat <= cls.QUAD_LIMIT
        if not quadratic:
            return cls(blocks, valid, pair, side, counts)
        triu = torch.triu_indices(d, d, device=x.device)
        scale = torch.where(triu[0] == triu[1], 1.0, 2.0).to(dtype=x.dtype, device=x.device)
        quad = blocks[:, :, triu[0]] * blocks[:, :, triu[1]] * scale  # zero rows stay zero
        return cls(blocks, valid, pair, side, counts, quad, triu)

    def cost(self, prototypes: Tensor, omegas: Tensor, *, transfer_fn: str = "identity", beta: float = 1.0) -> Tensor:
        """Per-pair mean GLVQ cost ``(K,)``; equals ``pairwise_cost`` on the same data."""
        c, n_max, d = self.x.shape
        K, r, _ = omegas.shape
        # d_k(x, w) = x^T L_k x - 2 x^T (L_k w) + w^T L_k w with L_k = Omega_k^T Omega_k: the
        # quadratic term needs x projected by the c-1 metrics of its class's pairs (the one
        # large product), the cross terms only the d-vectors L_k w.
        if self.quad is not None and self.triu is not None:
            lam = omegas.transpose(1, 2) @ omegas  # (K, d, d)
            upper = lam[:, self.triu[0], self.triu[1]][self.pair]  # (c, c-1, d(d+1)/2)
            x_sq = torch.bmm(self.quad, upper.transpose(1, 2))  # (c, n_max, c-1)
        else:
            gathered = omegas[self.pair]  # (c, c-1, r, d)
            xp = torch.bmm(self.x, gathered.reshape(c, (c - 1) * r, d).transpose(1, 2))  # (c, n_max, (c-1) r)
            x_sq = xp.reshape(c, n_max, c - 1, r).pow(2).sum(-1)  # (c, n_max, c-1)
        wp = torch.einsum("kjd,krd->kjr", prototypes, omegas)  # (K, 2, r)
        w_sq = wp.pow(2).sum(-1)  # (K, 2)
        lw = torch.einsum("kjr,krd->kjd", wp, omegas)  # (K, 2, d): L_k w
        sides = torch.stack([self.side, 1 - self.side], -1)  # (c, c-1, 2): own, other
        lw_cls = lw[self.pair[..., None], sides]  # (c, c-1, 2, d)
        cross = torch.bmm(self.x, lw_cls.reshape(c, (c - 1) * 2, d).transpose(1, 2)).reshape(c, n_max, c - 1, 2)
        dist = (x_sq[..., None] - 2.0 * cross + w_sq[self.pair[..., None], sides][:, None]).clamp_min(0.0)
        d_own, d_other = dist[..., 0], dist[..., 1]
        mu = (d_own - d_other) / (d_own + d_other).clamp_min(_EPS)
        cost = transfer(mu, transfer_fn, beta) * self.valid[:, :, None]  # type: ignore[arg-type]
        per_class_pair = cost.sum(1)  # (c, c-1)
        total = torch.zeros(K, dtype=cost.dtype, device=cost.device)
        total = total.index_add(0, self.pair.reshape(-1), per_class_pair.reshape(-1))
        return total / self.counts.to(cost.dtype)


@dataclass
class PairwiseFit:
    """What ``fit_pairwise_gmlvq`` returns: the ``K`` trained pair models.

    ``prototypes (K, 2, d)``: row ``k`` holds the prototypes of ``pairs[k, 0]`` and
    ``pairs[k, 1]``; ``omegas (K, r, d)``, each normalised to ``trace(Lambda_k) = 1``;
    ``pair_counts (K,)``: training samples of each pair (HT's ``n_lm``); ``pair_losses
    (K,)``: the final mean GLVQ cost of each pair; ``losses``: the joint cost (the sum over
    pairs) at every evaluation.
    """

    pairs: Tensor
    prototypes: Tensor
    omegas: Tensor
    pair_counts: Tensor
    pair_losses: Tensor
    n_iter: int
    losses: list[float] = field(default_factory=list)
    converged: bool = True

    @property
    def final_loss(self) -> float:
        return self.losses[-1] if self.losses else float("nan")


def _initial_omegas(K: int, rank: int, d: int, dtype: torch.dtype, device) -> Tensor:
    """The first ``rank`` rows of the identity, scaled to ``trace(Lambda) = 1``: the start
    of ``GMLVQ(omega_init="identity")`` after its normalisation, for every pair."""
    eye = torch.eye(rank, d, dtype=dtype, device=device) / math.sqrt(min(rank, d))
    return eye.expand(K, rank, d).clone()


def fit_pairwise_gmlvq(
    x: Tensor,
    y: Tensor,
    num_classes: int,
    *,
    rank: int | None = None,
    max_iter: int = 500,
    tol: float = 1e-9,
    history_size: int = 20,
    transfer_fn: str = "identity",
    beta: float = 1.0,
    progress: bool = False,
) -> PairwiseFit:
    """Train the ``K = c(c-1)/2`` one-versus-one GMLVQ models jointly (one batched L-BFGS).

    Every pair ``(l, m)`` starts at its two class means, with ``Omega_k`` the identity (its
    first ``rank`` rows) scaled to ``trace(Lambda_k) = 1``, as ``GMLVQ`` starts. The
    objective is ``sum_k C_k``, ``C_k`` the mean GLVQ cost of pair ``k`` over the samples of
    its two classes. No parameter is shared between the terms, so the optimum is every
    pair's own optimum; one L-BFGS run with a strong-Wolfe line search (as
    ``dp_proto.lvq.training.fit_lbfgs``) minimises them together. The data are laid out by
    class so that a sample enters only the ``c - 1`` pairs of its class.

    Parameters
    ----------
    x : Tensor, shape (n, d)
    y : Tensor, shape (n,), class indices ``0..num_classes-1``; every class needs a sample.
    num_classes : int
    rank : int, optional
        Rows of every ``Omega_k``; None means ``d``.
    max_iter, tol, history_size :
        L-BFGS settings (as ``fit_lbfgs``).
    transfer_fn, beta :
        Transfer of the GLVQ cost (``"identity"``, as in Brinkrolf (2023), or ``"sigmoid"``).
    progress : bool
        A progress bar over the cost evaluations on stderr, after two seconds.

    Returns
    -------
    PairwiseFit
        ``converged`` is False when L-BFGS stopped at ``max_iter``.
    """
    if x.dim() != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"expected x (n, d) and y (n,), got {tuple(x.shape)} and {tuple(y.shape)}")
    if transfer_fn not in TRANSFER_FUNCTIONS:
        raise ValueError(f"unknown transfer {transfer_fn!r}; expected one of {TRANSFER_FUNCTIONS}")
    pairs = class_pairs(num_classes, device=x.device)
    y = y.to(device=x.device, dtype=torch.long)
    per_class = torch.bincount(y, minlength=num_classes)
    if per_class.numel() != num_classes or bool((per_class == 0).any()):
        empty = torch.nonzero(per_class[:num_classes] == 0).flatten().tolist()
        raise DataValidationError(f"every class needs training samples; class index(es) {empty} have none")
    d = x.shape[1]
    r = d if rank is None else int(rank)
    if r < 1:
        raise ValueError(f"rank must be a positive integer, got {rank!r}")
    K = pairs.shape[0]
    means = torch.zeros((num_classes, d), dtype=x.dtype, device=x.device).index_add(0, y, x)
    means = means / per_class[:, None].to(x.dtype)
    prototypes = nn.Parameter(means[pairs].clone())  # (K, 2, d)
    omegas = nn.Parameter(_initial_omegas(K, r, d, x.dtype, x.device))
    blocks = _ClassBlocks.build(x, y, num_classes, pairs, rank=r)

    n_iter, losses = minimize_lbfgs(
        [prototypes, omegas],
        lambda: blocks.cost(prototypes, omegas, transfer_fn=transfer_fn, beta=beta).sum(),
        max_iter=max_iter,
        tol=tol,
        history_size=history_size,
        progress=progress,
        desc="pairwise L-BFGS",
    )
    with torch.no_grad():
        omegas.div_(omegas.flatten(1).norm(dim=1).clamp_min(_EPS)[:, None, None])  # exact: mu is scale free
        pair_losses = blocks.cost(prototypes, omegas, transfer_fn=transfer_fn, beta=beta)
    return PairwiseFit(
        pairs=pairs,
        prototypes=prototypes.detach().clone(),
        omegas=omegas.detach().clone(),
        pair_counts=blocks.counts.clone(),
        pair_losses=pair_losses,
        n_iter=n_iter,
        losses=losses,
        converged=n_iter < max_iter,
    )


# ----------------------------------------------------------------------------- Platt
@dataclass
class PlattFit:
    """Platt sigmoids of the ``K`` pairs: ``r = 1 / (1 + exp(a h + b))``; ``a, b (K,)``;
    ``positives, negatives (K,)``: the calibration samples of each pair's first and second
    class; ``n_iter``: Newton iterations; ``converged``: every pair met the tolerance."""

    a: Tensor
    b: Tensor
    positives: Tensor
    negatives: Tensor
    n_iter: int
    converged: bool


def platt_probabilities(scores: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """``r = 1 / (1 + exp(a h + b))`` for scores ``(B, K)`` and parameters ``(K,)``."""
    return torch.sigmoid(-(scores * a + b))


def _platt_nll(f: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """Per-pair ``-sum [t log p + (1 - t) log(1 - p)]`` with ``p = 1/(1 + e^f)``:
    ``sum softplus(f) - (1 - t) f`` over the masked samples, ``(K,)``."""
    return torch.where(mask, nn.functional.softplus(f) - (1.0 - target) * f, torch.zeros_like(f)).sum(0)


def fit_platt(
    scores: Tensor,
    labels: Tensor,
    *,
    max_iter: int = 100,
    tol: float = 1e-10,
    ridge: float = 1e-12,
    pair_names: list[str] | None = None,
) -> PlattFit:
    """Fit Platt's sigmoid ``r = 1 / (1 + exp(a h + b))`` for ``K`` pairs at once.

    Minimises, for every pair, ``-sum_i [t_i log r_i + (1 - t_i) log(1 - r_i)]`` over its
    calibration samples (Brinkrolf 2023, eq. 4.14) with Platt's (1999) targets
    ``t = (N+ + 1)/(N+ + 2)`` for the positive and ``1/(N- + 2)`` for the negative samples.
    Newton's method with a backtracking line search (the scheme of Platt's
    pseudo-code as refined by Lin, Lin & Weng 2007), on the ``K`` 2x2 systems batched;
    it starts from ``a = 0``, ``b = log((N- + 1)/(N+ + 1))``.

    Parameters
    ----------
    scores : Tensor, shape (n, K)
        The pair scores ``h`` of the calibration samples (entries of samples outside a
        pair are ignored, they may be anything finite or not).
    labels : Tensor, shape (n, K)
        ``pair_membership``: 1 positive (first class), 0 negative, -1 not in the pair.
    max_iter : int, default 100
        Newton iterations.
    tol : float, default 1e-10
        Stop once the gradient of every pair's mean negative log-likelihood is below ``tol``.
    ridge : float, default 1e-12
        Added to the Hessian's diagonal.
    pair_names : list of str, optional
        Names of the pairs for error messages.

    Raises
    ------
    DataValidationError
        If some pair has no positive or no negative calibration sample.
    """
    if scores.dim() != 2 or labels.shape != scores.shape:
        raise ValueError(
            f"expected scores and labels of the same shape (n, K), got {tuple(scores.shape)} and {tuple(labels.shape)}"
        )
    positive = labels == 1
    negative = labels == 0
    mask = positive | negative
    n_pos = positive.sum(0)
    n_neg = negative.sum(0)
    lacking = torch.nonzero((n_pos == 0) | (n_neg == 0)).flatten().tolist()
    if lacking:
        names = [pair_names[k] if pair_names else f"pair {k}" for k in lacking]
        raise DataValidationError(
            f"the calibration fold lacks one of the two classes of {', '.join(names)}: Platt scaling "
            f"needs samples of both classes of every pair (use more data or a larger calibration_fraction)"
        )
    dtype = scores.dtype
    h = torch.where(mask, scores, torch.zeros_like(scores))
    pos, neg = n_pos.to(dtype), n_neg.to(dtype)
    t_pos = (pos + 1.0) / (pos + 2.0)
    t_neg = 1.0 / (neg + 2.0)
    target = torch.where(positive, t_pos, t_neg)
    count = mask.sum(0).to(dtype)
    a = torch.zeros(scores.shape[1], dtype=dtype, device=scores.device)
    b = torch.log((neg + 1.0) / (pos + 1.0))
    maskf = mask.to(dtype)

    def objective(a_: Tensor, b_: Tensor) -> Tensor:
        return _platt_nll(h * a_ + b_, target, mask)

    value = objective(a, b)
    n_iter = 0
    done = torch.zeros_like(a, dtype=torch.bool)
    failed = torch.zeros_like(done)
    for n_iter in range(1, max_iter + 1):  # noqa: B007 (n_iter is reported)
        p = torch.sigmoid(-(h * a + b))  # r_i
        g_f = (target - p) * maskf  # d nll / d f
        grad = torch.stack([(g_f * h).sum(0), g_f.sum(0)], 1)  # (K, 2)
        done = done | ((grad.abs().amax(1) / count) < tol)
        if bool(done.all()):
            break
        w = p * (1.0 - p) * maskf
        h_aa, h_ab, h_bb = (w * h * h).sum(0) + ridge, (w * h).sum(0), w.sum(0) + ridge
        hess = torch.stack([torch.stack([h_aa, h_ab], 1), torch.stack([h_ab, h_bb], 1)], 1)  # (K, 2, 2)
        step = -torch.linalg.solve(hess, grad[..., None])[..., 0]  # (K, 2)
        step = torch.where(done[:, None], torch.zeros_like(step), step)
        slope = (grad * step).sum(1)  # -(Newton decrement)^2 < 0
        # Where the predicted decrease is at the rounding level of the objective, the
        # Armijo test is noise: take the full Newton step and stop that pair.
        final = ~done & (-slope <= 64 * torch.finfo(dtype).eps * (1.0 + value.abs()))
        scale = torch.ones_like(a)
        accepted = done | final
        new_a = torch.where(final, a + step[:, 0], a)
        new_b = torch.where(final, b + step[:, 1], b)
        new_value = value.clone()
        for _ in range(40):  # backtracking, halving the step of pairs not yet accepted
            if bool(accepted.all()):
                break
            trial_a = a + scale * step[:, 0]
            trial_b = b + scale * step[:, 1]
            trial = objective(trial_a, trial_b)
            ok = ~accepted & (trial <= value + 1e-4 * scale * slope)
            new_a = torch.where(ok, trial_a, new_a)
            new_b = torch.where(ok, trial_b, new_b)
            new_value = torch.where(ok, trial, new_value)
            accepted = accepted | ok
            scale = torch.where(accepted, scale, scale / 2)
        failed = failed | ~accepted
        done = done | final | ~accepted  # a failed line search: no further progress possible
        a, b = new_a, new_b
        value = torch.where(final, objective(a, b), new_value) if bool(final.any()) else new_value
    converged = bool(done.all()) and not bool(failed.any())
    return PlattFit(a=a, b=b, positives=n_pos, negatives=n_neg, n_iter=n_iter, converged=converged)


# ----------------------------------------------------------------------------- estimator
def _calibration_split(
    y_index: np.ndarray, num_classes: int, fraction: float, rng: np.random.RandomState, classes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Stratified split into the pair-training fold and the calibration fold: a share
    ``fraction`` of every class (rounded, at least 1 and at most all but one sample) goes
    to calibration."""
    counts = np.bincount(y_index, minlength=num_classes)
    short = [classes[k] for k in range(num_classes) if counts[k] < 2]
    if short:
        raise DataValidationError(
            f"class(es) {np.asarray(short).tolist()} have fewer than 2 samples; PairwiseGMLVQ needs at least 2 "
            f"per class: one to train the pairwise models and one for the calibration fold of Platt scaling"
        )
    order = rng.permutation(len(y_index))
    calibrate = np.zeros(len(y_index), dtype=bool)
    for k in range(num_classes):  # a loop over classes, not samples
        members = order[y_index[order] == k]
        n_cal = int(np.clip(round(fraction * counts[k]), 1, counts[k] - 1))
        calibrate[members[:n_cal]] = True
    return np.flatnonzero(~calibrate), np.flatnonzero(calibrate)


@register_model("dp_proto.PairwiseGMLVQ")
class PairwiseGMLVQ(ValidatedClassifierMixin, PublicReleaseHooks, Releasable, ClassifierMixin, BaseEstimator):
    """One-versus-one GMLVQ with probabilistic outputs (Brinkrolf 2023, section 4.4).

    ``fit`` splits the data (stratified) into a pair-training fold and a calibration
    fold; trains ``c(c-1)/2`` binary GMLVQ models (one prototype per class, one metric
    each) jointly on the training fold (``fit_pairwise_gmlvq``); fits one Platt sigmoid
    per pair on the calibration fold (``fit_platt``); ``predict_proba`` couples the
    pairwise probabilities (``dp_proto.lvq.coupling``) and ``predict`` takes its argmax.

    Parameters
    ----------
    coupling : {"pkpd", "ht", "wlw1", "wlw2", "voting"}, default "pkpd"
        How the pairwise probabilities become class probabilities; PKPD is the cheapest
        and the one Brinkrolf (2023) recommends. HT weights the pairs by their training
        sample counts ``n_lm``. ``"voting"`` gives vote shares, not calibrated probabilities.
    calibration_fraction : float in (0, 1), default 0.2
        Share of every class held out for the Platt fit (the dissertation trains on 4 of
        5 folds and calibrates on the fifth). Every class needs at least 2 samples.
    rank : int or None, default None
        Rows of every pair's ``Omega_k (r, d)``; None means ``r = d``.
    max_iter : int, default 500
        L-BFGS iterations of the joint pair training; stopping there without meeting
        ``tol`` warns ``ConvergenceWarning``.
    tol : float, default 1e-9
        L-BFGS tolerance on cost and parameter changes.
    transfer_fn : {"identity", "sigmoid"}, default "identity"
        Transfer of the GLVQ cost of every pair.
    beta : float, default 1.0
        Slope of the sigmoid transfer.
    random_state : int, RandomState or None, default None
        Seeds the calibration split.
    verbose : int or None, default None
        A progress bar on stderr for a fit longer than two seconds: None in interactive
        use only (a terminal or a notebook), 0 never, 1 or more always.
    device : str, default "cpu"
        Torch device.
    dtype : {"float64", "float32"}, default "float64"
        Torch dtype.

    Attributes
    ----------
    classes_ : ndarray (c,)
        The class labels seen in ``fit``, sorted; the columns of ``predict_proba``.
    n_features_in_ : int
        Number of features seen in ``fit``.
    pairs_ : ndarray (K, 2)
        Class indices ``(l, m)``, ``l < m``, of every pair model.
    prototypes_ : ndarray (K, 2, d)
        The prototypes of ``classes_[l]`` and ``classes_[m]`` in every pair model.
    omegas_ : ndarray (K, r, d)
        The projection of every pair, ``trace(Omega_k^T Omega_k) = 1``.
    platt_a_, platt_b_ : ndarray (K,)
        The sigmoid of every pair: ``r_lm = 1 / (1 + exp(a h_lm + b))``.
    pair_counts_ : ndarray (K,)
        Training samples of every pair (HT's ``n_lm``).
    n_iter_ : int
        L-BFGS iterations run.
    loss_ : float
        Final joint cost: the sum over pairs of the mean GLVQ cost.
    pair_loss_ : ndarray (K,)
        Final mean GLVQ cost of every pair.
    loss_curve_ : list of float
        The joint cost at every evaluation.

    Notes
    -----
    With one prototype per class each pair model is a linear classifier, and ``h_lm``
    is 0 on its decision boundary. Fitting costs one L-BFGS run over ``K (2 + r) d``
    parameters; each evaluation projects every training sample under the ``c - 1``
    metrics of its class's pairs. Prediction scores every sample under all ``K`` pairs.

    References
    ----------
    Brinkrolf (2023), section 4.4. Platt (1999). Price, Knerr, Personnaz & Dreyfus (1994).
    Hastie & Tibshirani (1998). Wu, Lin & Weng (2004). Friedman (1996).

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from dp_proto.lvq import PairwiseGMLVQ
    >>> X, y = load_iris(return_X_y=True)
    >>> model = PairwiseGMLVQ(random_state=0).fit(X, y)
    >>> model.prototypes_.shape, model.predict_proba(X[:2]).sum(1).round(6).tolist()
    ((3, 2, 4), [1.0, 1.0])
    """

    def __init__(
        self,
        coupling: str = "pkpd",
        *,
        calibration_fraction: float = 0.2,
        rank: int | None = None,
        max_iter: int = 500,
        tol: float = 1e-9,
        transfer_fn: str = "identity",
        beta: float = 1.0,
        random_state: int | np.random.RandomState | None = None,
        verbose: int | None = None,
        device: str = "cpu",
        dtype: str = "float64",
    ) -> None:
        self.coupling = coupling
        self.calibration_fraction = calibration_fraction
        self.rank = rank
        self.max_iter = max_iter
        self.tol = tol
        self.transfer_fn = transfer_fn
        self.beta = beta
        self.random_state = random_state
        self.verbose = verbose
        self.device = device
        self.dtype = dtype

    # -- validation --------------------------------------------------------------------
    def _validate_params(self) -> None:
        if self.coupling not in COUPLING_METHODS:
            raise ValueError(f"coupling must be one of {list(COUPLING_METHODS)}, got {self.coupling!r}")
        fraction = self.calibration_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float, np.floating)) or not 0 < fraction < 1:
            raise ValueError(f"calibration_fraction must be a number in (0, 1), got {fraction!r}")
        if self.rank is not None and (
            isinstance(self.rank, bool) or not isinstance(self.rank, (int, np.integer)) or self.rank < 1
        ):
            raise ValueError(f"rank must be a positive integer or None, got {self.rank!r}")
        if isinstance(self.max_iter, bool) or not isinstance(self.max_iter, (int, np.integer)) or self.max_iter < 1:
            raise ValueError(f"max_iter must be a positive integer, got {self.max_iter!r}")
        if not self.tol > 0:
            raise ValueError(f"tol must be positive, got {self.tol!r}")
        if self.transfer_fn not in TRANSFER_FUNCTIONS:
            raise ValueError(f"transfer_fn must be one of {list(TRANSFER_FUNCTIONS)}, got {self.transfer_fn!r}")
        if not self.beta > 0:
            raise ValueError(f"beta must be positive, got {self.beta!r}")
        torch_dtype(self.dtype)
        torch_device(self.device)

    # -- the replaceable steps (a private variant overrides these two) ------------------
    def _fit_pairs(self, x: Tensor, y: Tensor, num_classes: int) -> PairwiseFit:
        """Train the pair models on the training fold (``fit_pairwise_gmlvq``)."""
        return fit_pairwise_gmlvq(
            x,
            y,
            num_classes,
            rank=self.rank,
            max_iter=self.max_iter,
            tol=self.tol,
            transfer_fn=self.transfer_fn,
            beta=self.beta,
            progress=wants_progress(self.verbose),
        )

    def _fit_calibration(self, scores: Tensor, labels: Tensor) -> PlattFit:
        """Fit the Platt sigmoids on the calibration fold (``fit_platt``)."""
        names = [f"classes ({self.classes_[i]!r}, {self.classes_[j]!r})" for i, j in self.pairs_.tolist()]
        return fit_platt(scores, labels, pair_names=names)

    def _pairs_work(self, rows: float, num_classes: int, n_features: int) -> float:
        """Work per training step of the pair models (``dp_proto._threads.step_work``'s
        measure): ``rows`` times the ``K (2 + r) d`` parameters of the ``K`` pairs."""
        pairs, r = num_classes * (num_classes - 1) // 2, n_features if self.rank is None else int(self.rank)
        return float(rows) * pairs * (2 + r) * n_features

    # -- API ---------------------------------------------------------------------------
    def fit(self, X, y) -> PairwiseGMLVQ:
        """Split, train the pair models, fit the Platt sigmoids; ``X (n, d)``, ``y (n,)``."""
        self._validate_params()
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        X, y = self._check_X(X, reset=True, y=y)
        check_classification_targets(y)
        self.classes_, y_index = np.unique(y, return_inverse=True)
        c = len(self.classes_)
        if c < 2:
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes; got 1 class ({self.classes_.tolist()})"
            )
        rng = check_random_state(self.random_state)
        train, calibrate = _calibration_split(y_index, c, float(self.calibration_fraction), rng, self.classes_)
        tdtype = torch_dtype(self.dtype)
        x_t = torch.as_tensor(np.array(X, copy=True), dtype=tdtype, device=self.device)
        y_t = torch.as_tensor(y_index, dtype=torch.long, device=self.device)
        self.pairs_ = class_pairs(c).numpy()

        with fit_threads(self._pairs_work(len(train), c, X.shape[1]), self.device):
            result = self._fit_pairs(x_t[train], y_t[train], c)
        if not result.converged:
            warnings.warn(
                f"{type(self).__name__}: L-BFGS stopped at max_iter={self.max_iter} iterations without "
                f"converging (tol={self.tol:g}); increase max_iter",
                ConvergenceWarning,
                stacklevel=2,
            )
        self.prototypes_ = result.prototypes.cpu().numpy()
        self.omegas_ = result.omegas.cpu().numpy()
        self.pair_counts_ = result.pair_counts.cpu().numpy()
        self.pair_loss_ = result.pair_losses.cpu().numpy()
        self.n_iter_ = result.n_iter
        self.loss_ = result.final_loss
        self.loss_curve_ = result.losses

        x_cal = x_t[calibrate]
        scores = pairwise_scores(x_cal, result.prototypes, result.omegas)
        labels = pair_membership(y_t[calibrate], result.pairs)
        with fit_threads(2 * scores.numel(), self.device):  # rows x the 2 K sigmoid parameters
            platt = self._fit_calibration(scores, labels)
        self.platt_a_ = platt.a.cpu().numpy()
        self.platt_b_ = platt.b.cpu().numpy()
        return self

    def _tensors(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        tdtype = torch_dtype(self.dtype)
        return tuple(  # type: ignore[return-value]
            torch.as_tensor(a, dtype=tdtype, device=self.device)
            for a in (self.prototypes_, self.omegas_, self.platt_a_, self.platt_b_)
        )

    def _input(self, X) -> Tensor:
        check_is_fitted(self)
        X = self._check_X(X, reset=False)
        return torch.tensor(X, dtype=torch_dtype(self.dtype), device=self.device)

    def pairwise_scores(self, X) -> np.ndarray:
        """The signed scores ``h_lm(x)`` of every pair, ``(n, K)``, pairs in ``pairs_`` order."""
        x = self._input(X)
        prototypes, omegas, _, _ = self._tensors()
        with torch.no_grad():
            return pairwise_scores(x, prototypes, omegas).cpu().numpy()

    def pairwise_proba(self, X) -> np.ndarray:
        """The Platt-scaled pairwise probabilities ``R (n, c, c)``, ``R[:, l, m] = r_lm``
        (diagonal 0.5), in ``classes_`` order."""
        return self._pairwise_matrix(self._input(X)).cpu().numpy()

    def _pairwise_matrix(self, x: Tensor) -> Tensor:
        prototypes, omegas, a, b = self._tensors()
        with torch.no_grad():
            r = platt_probabilities(pairwise_scores(x, prototypes, omegas), a, b)
            return pairs_to_matrix(r, len(self.classes_))

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities ``(n, c)`` by the ``coupling`` method; rows sum to 1,
        columns in ``classes_`` order."""
        R = self._pairwise_matrix(self._input(X))
        c = len(self.classes_)
        n = None
        if self.coupling == "ht":
            n = torch.zeros((c, c), dtype=R.dtype, device=R.device)
            pairs = torch.as_tensor(self.pairs_, device=R.device)
            counts = torch.as_tensor(self.pair_counts_, dtype=R.dtype, device=R.device)
            n[pairs[:, 0], pairs[:, 1]] = counts
            n[pairs[:, 1], pairs[:, 0]] = counts
        with torch.no_grad():
            p = couple(R, self.coupling, n=n)
        return p.cpu().numpy()

    def predict_log_proba(self, X) -> np.ndarray:
        """``log(predict_proba(X))`` (``-inf`` where a vote share is 0)."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def predict(self, X) -> np.ndarray:
        """The class of highest probability (the first such class on ties)."""
        proba = self.predict_proba(X)
        return self.classes_[proba.argmax(1)]

    # -- the release format (dp_proto.release) -----------------------------------------
    #: Fitted attributes that a release leaves out, with the reason. Every other fitted
    #: attribute is written and restored by ``load``; the tests check that the two sets
    #: cover ``vars(est)``, so a new attribute needs a decision here.
    RELEASE_DROPS: ClassVar[dict[str, str]] = {
        "loss_curve_": "the joint cost of every evaluation: a trace of the fit, not needed to predict "
        "(n_iter_, loss_ and pair_loss_ are kept)",
    }
    # public fitted scalars written to the manifest's "fitted" section
    _RELEASE_FITTED: ClassVar[tuple[str, ...]] = ("n_iter_", "loss_")
    # hyperparameters never published, with the reason (none for the non-private model)
    _RELEASE_WITHHELD: ClassVar[dict[str, str]] = {}

    def to_release(self) -> Release:
        """The fitted estimator in the release format (in memory; ``save`` writes it).

        Tensors, in the fit's dtype (so a loaded model computes the same numbers):
        ``prototypes (K, 2, d)``, ``omegas (K, r, d)``, ``platt_a``, ``platt_b (K,)``,
        ``pairs (K, 2)`` (int64, the ``torch.triu_indices`` order of ``class_pairs``),
        ``pair_counts (K,)`` (int64, HT's ``n_lm``) and ``pair_loss (K,)``. Manifest: the
        hyperparameters, the label set, the feature count, ``n_iter_`` and ``loss_``.

        ``pair_counts`` are training counts: the sizes of the two classes of every pair in
        the training fold. This estimator is not private, so they are published with the
        rest of the model (they are needed for ``coupling="ht"``); ``DPPairwiseGMLVQ``
        publishes its noisy counts instead, under its guarantee. Raises
        ``NotFittedError`` before ``fit``.
        """
        check_is_fitted(self)
        hyperparameters, not_saved = encode_hyperparameters(
            self.get_params(deep=False), withheld=self._RELEASE_WITHHELD
        )
        public: dict[str, Any] = {
            "classes": encode_labels(self.classes_),
            "n_features": int(self.n_features_in_),
            "n_pairs": int(len(self.pairs_)),
            "rank": int(self.omegas_.shape[1]),
        }
        if hasattr(self, "feature_names_in_"):
            public["feature_names"] = [str(name) for name in self.feature_names_in_]
        domain = self._release_domain()
        if domain is not None:
            public["domain"] = domain
        return Release(
            model=registered_name(self),
            tensors={**self._release_tensors(), **self._release_domain_tensors()},
            hyperparameters=hyperparameters,
            hyperparameters_not_saved=not_saved,
            public=public,
            privacy=self._release_privacy(),
            fitted={k: getattr(self, k) for k in self._RELEASE_FITTED if k in vars(self)},
            dropped=tuple(k for k in self.RELEASE_DROPS if k in vars(self)),
        )

    def _release_tensors(self) -> dict[str, np.ndarray]:
        tensors = {
            "prototypes": np.array(self.prototypes_, copy=True),
            "omegas": np.array(self.omegas_, copy=True),
            "pairs": np.asarray(self.pairs_, dtype=np.int64).copy(),
        }
        for name in self._release_tensors_per_pair():
            tensors[name] = np.array(getattr(self, f"{name}_"), copy=True)
        tensors["pair_counts"] = tensors["pair_counts"].astype(self._PAIR_COUNTS_DTYPE)
        return tensors

    # the dtype of the released pair counts: exact training counts here
    _PAIR_COUNTS_DTYPE: ClassVar[type] = np.int64

    @classmethod
    def _release_tensors_per_pair(cls) -> tuple[str, ...]:
        """The release's tensors of shape ``(K,)``, each the fitted attribute of its
        name with a trailing underscore."""
        return ("platt_a", "platt_b", "pair_counts", "pair_loss")

    @classmethod
    def from_release(cls, release: Release, *, device: str = "cpu") -> Any:
        """The fitted estimator of ``release`` (``read_release``), on ``device``.

        Its ``predict_proba`` (and so ``predict``) equals the saved estimator's exactly;
        ``loss_curve_`` is absent. ``ValueError`` for a release of another model, a private
        release, or tensors whose shapes disagree with the label set and feature count.
        """
        estimator = cls.estimator_from_release(release, device=device)
        estimator._restore_release(release)
        return estimator

    def _restore_release(self, release: Release) -> None:
        public = release.public
        self._restore_domain(release)
        classes = decode_labels(public["classes"])
        d = int(public["n_features"])
        c = len(classes)
        K = c * (c - 1) // 2
        prototypes = release.tensor("prototypes", ndim=3)
        omegas = release.tensor("omegas", ndim=3)
        r = omegas.shape[1]
        expected = {"prototypes": (K, 2, d), "omegas": (K, r, d), "pairs": (K, 2)}
        expected.update({name: (K,) for name in self._release_tensors_per_pair()})
        for name, shape in expected.items():
            got = tuple(release.tensor(name).shape)
            if got != shape:
                raise ValueError(
                    f"tensor {name!r} of the release has shape {got}, but {c} classes and {d} features need {shape}"
                )
        pairs = release.tensor("pairs")
        if c < 2 or not np.array_equal(pairs, class_pairs(c).numpy()):
            raise ValueError(f"tensor 'pairs' of the release must be the class pairs (l, m), l < m, of {c} classes")
        self.classes_ = classes
        self.n_features_in_ = d
        if "feature_names" in public:
            self.feature_names_in_ = np.asarray(public["feature_names"], dtype=object)
        self.pairs_ = pairs.astype(np.int64)
        self.prototypes_ = prototypes.copy()
        self.omegas_ = omegas.copy()
        for name in self._release_tensors_per_pair():
            setattr(self, f"{name}_", release.tensor(name).copy())
        for name in self._RELEASE_FITTED:
            if name in release.fitted:
                setattr(self, name, release.fitted[name])
        self._restore_privacy(release)
