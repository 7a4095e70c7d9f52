"""Losses of the adversarial anonymizer (Feutry et al. 2018, eqs. 10-15), as pure functions.

With ``p`` the empirical prior of the private labels on the training set and ``q(x)``
the private branch's predicted distribution:

* ``CE_regular``: cross-entropy of the regular branch on the regular labels;
* ``CE_private``: cross-entropy of the private branch on the private labels;
* ``CE_random = mean_x ( -sum_k p_k log q_k(x) )``: the cross-entropy between the prior
  and the predictions, i.e. the loss a random-guessing predictor would have if the
  branch reproduced the prior. It is minimal (= H(p)) when ``q(x) = p``;
* the encoder objective ``CE_regular + lambda |CE_private - CE_random|``: the private
  branch is driven to the loss of random guessing, not beyond it (minus a cross-entropy
  has no lower bound; the absolute value removes the incentive to overshoot).

``misclassification_lower_bound`` is eq. (13)-(14) of Feutry et al. (2018): Fano's inequality
``H(S | Z) <= h(P_e) + P_e log(M - 1)``, solved for ``P_e``, with the conditional entropy
estimated by the private cross-entropy (eq. 11).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "check_labels",
    "empirical_prior",
    "regular_cross_entropy",
    "private_cross_entropy",
    "random_guess_cross_entropy",
    "anonymizer_objective",
    "per_record_objective",
    "fano_function",
    "misclassification_lower_bound",
]


def check_labels(labels: Tensor, num_classes: int, what: str) -> None:
    """Labels must be integer class indices in ``0..num_classes-1``."""
    if labels.dim() != 1:
        raise ValueError(f"{what} labels must be a 1-D tensor, got shape {tuple(labels.shape)}")
    if labels.is_floating_point() or labels.is_complex():
        raise ValueError(f"{what} labels must be integer class indices, got dtype {labels.dtype}")
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise ValueError(
            f"{what} labels must lie in 0..{num_classes - 1}, got values in {int(labels.min())}..{int(labels.max())}"
        )


def empirical_prior(labels: Tensor, num_classes: int) -> Tensor:
    """Class frequencies ``(num_classes,)`` of the private training labels ``(n,)``.

    Every class must occur: a private class unseen in training has prior 0, and its
    random-guessing loss would be undefined for records of that class."""
    check_labels(labels, num_classes, "private")
    if num_classes < 2:
        raise ValueError(f"the private label needs at least 2 classes, got {num_classes}")
    counts = torch.bincount(labels, minlength=num_classes).to(torch.float64)
    missing = torch.nonzero(counts == 0).flatten().tolist()
    if missing:
        raise ValueError(
            f"private class(es) {missing} have no training records; the empirical prior "
            "needs every private class in the training set"
        )
    return (counts / counts.sum()).to(torch.float32)


def regular_cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy of the regular branch; ``logits (B, C)``, ``labels (B,)``."""
    return F.cross_entropy(logits, labels)


def private_cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy of the private branch; ``logits (B, K)``, ``labels (B,)``."""
    return F.cross_entropy(logits, labels)


def random_guess_cross_entropy(logits: Tensor, prior: Tensor) -> Tensor:
    """``mean_x ( -sum_k prior_k log softmax(logits(x))_k )``; ``logits (B, K)``,
    ``prior (K,)`` summing to 1."""
    if prior.shape != logits.shape[-1:]:
        raise ValueError(f"prior must have shape ({logits.shape[-1]},), got {tuple(prior.shape)}")
    log_q = F.log_softmax(logits, dim=-1)
    return -(log_q * prior.to(log_q)).sum(-1).mean()


def anonymizer_objective(ce_regular: Tensor, ce_private: Tensor, ce_random: Tensor, lam: float) -> Tensor:
    """The encoder's objective ``CE_regular + lam |CE_private - CE_random|`` (eq. 15)."""
    if not lam >= 0:  # also rejects NaN
        raise ValueError(f"lambda must be >= 0, got {lam}")
    return ce_regular + lam * (ce_private - ce_random).abs()


def per_record_objective(
    regular_logits: Tensor, private_logits: Tensor, y: Tensor, s: Tensor, prior: Tensor, lam: float
) -> Tensor:
    """Mean over records of ``CE_regular_i + lam |CE_private_i - CE_random_i|``: the
    encoder objective of DP training, a sum over records (the batch-level absolute value
    of ``anonymizer_objective`` is not, so its per-record gradient is undefined)."""
    ce_regular = F.cross_entropy(regular_logits, y, reduction="none")
    log_q = F.log_softmax(private_logits, dim=-1)
    ce_private = -log_q.gather(1, s[:, None]).squeeze(1)
    ce_random = -(log_q * prior.to(log_q)).sum(-1)
    return (ce_regular + lam * (ce_private - ce_random).abs()).mean()


def fano_function(p: Tensor, num_classes: int) -> Tensor:
    """``phi(p) = h(p) + p log(M - 1)`` (nats): continuous and increasing on
    ``[0, (M - 1) / M]`` from 0 to ``log M``."""
    p = p.to(torch.float64)
    entropy = -(torch.xlogy(p, p) + torch.xlogy(1 - p, 1 - p))
    return entropy + p * math.log(num_classes - 1)


def misclassification_lower_bound(conditional_entropy: Tensor | float, num_classes: int) -> Tensor:
    """Smallest ``P_e`` with ``phi(P_e) >= H(S | Z)`` (Fano; Feutry et al. 2018, eq. 13-14).

    ``conditional_entropy`` in nats, estimated by the private cross-entropy on held-out
    data (eq. 11). Values at or above ``log M`` give ``(M - 1) / M`` (random guessing),
    0 gives 0. Because a classifier's cross-entropy over-estimates ``H(S | Z)``, the
    result estimates the bound; it is not a certified guarantee.
    """
    if num_classes < 2:
        raise ValueError(f"need at least 2 classes, got {num_classes}")
    h = torch.as_tensor(conditional_entropy, dtype=torch.float64)
    if bool((h < 0).any()) or bool(h.isnan().any()):
        raise ValueError("a conditional entropy must be a number >= 0 (got a negative value or NaN)")
    h = h.clamp(max=math.log(num_classes))
    low = torch.zeros_like(h)
    high = torch.full_like(h, (num_classes - 1) / num_classes)
    for _ in range(60):  # bisection on the increasing phi: 2^-60 of the interval
        mid = (low + high) / 2
        below = fano_function(mid, num_classes) < h
        low = torch.where(below, mid, low)
        high = torch.where(below, high, mid)
    return high
