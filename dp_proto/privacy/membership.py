"""Membership inference with shadow models: the likelihood-ratio attack (LiRA).

Carlini, Chien, Nasr, Song, Terzis & Tramèr (2022), "Membership inference attacks from
first principles". ``M`` models are trained on random halves of a data set, every record
in each model by an independent fair coin (``random_membership``). Each model scores every record
with a per-record statistic ``phi`` (``true_class_score``: the logit of the true class's
probability, or the margin of a decision function). The attack on one target model
uses the other ``M - 1`` as shadows:

* **online**: for record ``i``, Gaussians fitted to ``phi_i`` over the shadows that
  trained on it (``mu_in``) and those that did not (``mu_out``), one variance per side
  pooled over all records (the fixed-variance variant, stable with few shadows); the
  attack score is ``log N(phi; mu_in, s_in^2) - log N(phi; mu_out, s_out^2)``;
* **offline**: out-shadows only; the score is ``(phi - mu_out) / s_out``.

Every model takes the target's place in turn (leave one model out), and the scores of
all (model, record) pairs give one ROC curve: the true-positive rate (members called
members) against the false-positive rate. The field's headline is the TPR at a low FPR
(0.1 %, 1 %), read from the curve on a log scale, not the AUC or the accuracy.

A differentially private training run bounds every such attack: at ``(epsilon, delta)``
the TPR at FPR ``a`` is at most ``e^epsilon a + delta`` (and ``1 - e^-epsilon (1 - a -
delta)``; Kairouz, Oh & Viswanath 2015), ``dp_tpr_bound``.

**One-run audit** (Steinke, Nasr & Jagielski 2023): one model, trained on the records
whose fair coins came up heads; the auditor guesses "member" for the ``k+`` records of
highest statistic and "non-member" for the ``k-`` lowest. Under ``(epsilon, delta)``-DP
the number of correct guesses ``W`` of ``r = k+ + k-`` satisfies
``P[W >= v] <= P[Bin(r, q) >= v] + 2 m delta max_i P[v - i <= Bin(r, q) < v] / i`` with
``q = e^epsilon / (1 + e^epsilon)`` and ``m`` the number of canaries; the largest
epsilon this rejects at the chosen confidence is an empirical lower bound
(``one_run_epsilon``). It costs one fit, and it is weak unless some records leak.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

__all__ = [
    "MembershipInferenceResult",
    "OneRunAudit",
    "one_run_audit",
    "one_run_epsilon",
    "one_run_p_value",
    "dp_tpr_bound",
    "lira_attack",
    "lira_scores",
    "membership_inference",
    "random_membership",
    "roc_curve",
    "true_class_score",
]

#: The false-positive rates whose TPR is reported by default.
DEFAULT_FPRS = (0.001, 0.01, 0.1)
_MIN_STD = 1e-12


def random_membership(n_models: int, n_records: int, rng: np.random.Generator) -> np.ndarray:
    """``(M, n)`` booleans: record ``i`` trains model ``m`` with probability 1/2, by
    independent coins (``M >= 2``). Independence matters to the leave-one-model-out
    attack: with exactly ``M / 2`` models per record, the shadows would hold one member
    fewer whenever the target holds the record, a bias that pushes the attack below
    chance with few models."""
    if n_models < 2:
        raise ValueError(f"n_models must be >= 2, got {n_models}")
    return rng.random((n_models, n_records)) < 0.5


def true_class_score(estimator: Any, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``(n,)`` per-record statistic ``phi``: with ``predict_proba``, the logit of the true
    class's probability ``log p_y - log(1 - p_y)`` (probabilities clipped to
    ``[1e-12, 1 - 1e-12]``); otherwise the margin of ``decision_function`` (true class's
    score minus the best other class's; for two classes the signed score). ``y`` holds
    labels of ``estimator.classes_``."""
    classes = np.asarray(estimator.classes_)
    index = np.searchsorted(classes, y)
    if hasattr(estimator, "predict_proba"):
        p = np.clip(np.asarray(estimator.predict_proba(X), dtype=np.float64), 1e-12, 1 - 1e-12)
        p_true = p[np.arange(len(y)), index]
        return np.log(p_true) - np.log1p(-p_true)
    scores = np.asarray(estimator.decision_function(X), dtype=np.float64)
    if scores.ndim == 1:  # two classes: the score of classes_[1]
        return np.where(index == 1, scores, -scores)
    true = scores[np.arange(len(y)), index]
    others = scores.copy()
    others[np.arange(len(y)), index] = -np.inf
    return true - others.max(1)


def lira_scores(statistics: np.ndarray, membership: np.ndarray, target: int, *, online: bool = True) -> np.ndarray:
    """LiRA's scores ``(n,)`` against model ``target`` (module docstring), from the
    statistics ``(M, n)`` of every model on every record and the membership ``(M, n)``;
    the other models are the shadows. Larger means "member"."""
    statistics = np.asarray(statistics, dtype=np.float64)
    membership = np.asarray(membership, dtype=bool)
    shadows = np.arange(statistics.shape[0]) != target
    phi, inside = statistics[shadows], membership[shadows]
    out_mean, out_std = _side(phi, ~inside)
    x = statistics[target]
    if not online:
        return (x - out_mean) / out_std
    in_mean, in_std = _side(phi, inside)
    return _log_normal(x, in_mean, in_std) - _log_normal(x, out_mean, out_std)


def _side(phi: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, float]:
    """Per-record means ``(n,)`` of ``phi`` over the models in ``mask`` (records with
    none take the mean over all records) and one standard deviation pooled over all."""
    counts = mask.sum(0)
    sums = np.where(mask, phi, 0.0).sum(0)
    overall = sums.sum() / max(counts.sum(), 1)
    mean = np.where(counts > 0, sums / np.maximum(counts, 1), overall)
    residual = np.where(mask, phi - mean, 0.0)
    dof = max(int(counts.sum()) - int((counts > 0).sum()), 1)
    return mean, max(math.sqrt(float((residual**2).sum()) / dof), _MIN_STD)


def _log_normal(x: np.ndarray, mean: np.ndarray, std: float) -> np.ndarray:
    return -0.5 * ((x - mean) / std) ** 2 - math.log(std)


def roc_curve(scores: np.ndarray, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(fpr, tpr)`` of the rule "member if score >= t" over every threshold, from
    ``(0, 0)`` to ``(1, 1)``; tied scores move both rates at once."""
    scores = np.asarray(scores, dtype=np.float64).ravel()
    members = np.asarray(members, dtype=bool).ravel()
    positives, negatives = int(members.sum()), int((~members).sum())
    if positives == 0 or negatives == 0:
        raise ValueError("the ROC needs members and non-members")
    order = np.argsort(-scores, kind="stable")
    s, m = scores[order], members[order]
    last = np.r_[np.flatnonzero(np.diff(s) != 0), len(s) - 1]  # the last index of every tie group
    tp, fp = np.cumsum(m)[last], np.cumsum(~m)[last]
    return np.r_[0.0, fp / negatives], np.r_[0.0, tp / positives]


def _tpr_at(fpr: np.ndarray, tpr: np.ndarray, at: float) -> float:
    """The largest TPR of the curve at an FPR of at most ``at``."""
    return float(tpr[fpr <= at].max())


def dp_tpr_bound(epsilon: float, delta: float, fpr: float) -> float:
    """The largest TPR at FPR ``fpr`` that any membership test can reach against an
    ``(epsilon, delta)``-DP training run (Kairouz, Oh & Viswanath 2015)."""
    return float(min(1.0, math.exp(epsilon) * fpr + delta, 1.0 - math.exp(-epsilon) * (1.0 - fpr - delta)))


@dataclass
class MembershipInferenceResult:
    """What ``membership_inference`` measured.

    ``fpr``, ``tpr``: the ROC over all (target model, record) pairs; ``tpr_at``: TPR at
    the requested FPRs; ``auc``; ``accuracy``: the best balanced accuracy of one
    threshold; ``n_models``, ``n_records``; ``statistics`` ``(M, n)`` and ``membership``
    ``(M, n)`` (to re-run the attack, e.g. offline); ``test_accuracy``: each model's
    accuracy on the records it did not train on, ``(M,)``."""

    fpr: np.ndarray
    tpr: np.ndarray
    tpr_at: dict[float, float]
    auc: float
    accuracy: float
    n_models: int
    n_records: int
    online: bool
    statistics: np.ndarray = field(repr=False)
    membership: np.ndarray = field(repr=False)
    test_accuracy: np.ndarray = field(repr=False)


def lira_attack(
    statistics: np.ndarray, membership: np.ndarray, *, online: bool = True, fprs: Sequence[float] = DEFAULT_FPRS
) -> tuple[np.ndarray, np.ndarray, dict[float, float], float, float]:
    """LiRA against every model in turn: ``(fpr, tpr, tpr_at, auc, accuracy)``."""
    scores = np.stack([lira_scores(statistics, membership, m, online=online) for m in range(len(statistics))])
    fpr, tpr = roc_curve(scores, membership)
    auc = float(np.trapezoid(tpr, fpr))
    accuracy = float(0.5 * (1.0 + (tpr - fpr).max()))
    return fpr, tpr, {float(a): _tpr_at(fpr, tpr, a) for a in fprs}, auc, accuracy


def membership_inference(
    make_estimator: Callable[[int], Any],
    X: np.ndarray,
    y: np.ndarray,
    *,
    n_models: int = 16,
    online: bool = True,
    score: Callable[[Any, np.ndarray, np.ndarray], np.ndarray] = true_class_score,
    fprs: Sequence[float] = DEFAULT_FPRS,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> MembershipInferenceResult:
    """LiRA against an estimator: ``n_models`` fits of ``make_estimator(m)`` (``m`` the
    model's index, e.g. for its seed) on random halves of ``(X, y)`` (every record in
    each by a fair coin); each fit scores every record (``score``), and every model is
    attacked with the others as shadows (module docstring). ``progress(done, total)`` is
    called after each fit. ``seed`` fixes the halves (the attacker's choice, public).

    Costs ``n_models`` fits on ``n / 2`` records each. The records' true labels must all
    occur in every half (a label missing from a fit makes its statistic undefined)."""
    X, y = np.asarray(X), np.asarray(y)
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X and y hold different numbers of records: {X.shape[0]} and {y.shape[0]}")
    membership = random_membership(n_models, len(y), np.random.default_rng(seed))
    statistics = np.empty((n_models, len(y)))
    test_accuracy = np.empty(n_models)
    for m in range(n_models):
        estimator = make_estimator(m).fit(X[membership[m]], y[membership[m]])
        statistics[m] = score(estimator, X, y)
        held_out = ~membership[m]
        test_accuracy[m] = float(np.mean(estimator.predict(X[held_out]) == y[held_out]))
        if progress is not None:
            progress(m + 1, n_models)
    fpr, tpr, tpr_at, auc, accuracy = lira_attack(statistics, membership, online=online, fprs=fprs)
    return MembershipInferenceResult(
        fpr, tpr, tpr_at, auc, accuracy, n_models, len(y), online, statistics, membership, test_accuracy
    )


def one_run_p_value(canaries: int, guesses: int, correct: int, epsilon: float, delta: float) -> float:
    """The probability of at least ``correct`` right guesses out of ``guesses`` against
    an ``(epsilon, delta)``-DP algorithm with ``canaries`` fair-coin canaries (Steinke,
    Nasr & Jagielski 2023, Theorem 3; module docstring)."""
    if not 0 <= correct <= guesses <= canaries:
        raise ValueError(f"need 0 <= correct <= guesses <= canaries, got {correct}, {guesses}, {canaries}")
    if epsilon < 0 or not 0 <= delta <= 1:
        raise ValueError(f"need epsilon >= 0 and delta in [0, 1], got {epsilon}, {delta}")
    q = 1.0 / (1.0 + math.exp(-epsilon))
    tail = float(stats.binom.sf(correct - 1, guesses, q))
    if delta == 0 or correct == 0:
        return min(tail, 1.0)
    below = np.cumsum(stats.binom.pmf(np.arange(correct - 1, -1, -1), guesses, q))  # P[v - i <= Bin < v], i = 1..v
    worst = float((below / np.arange(1, correct + 1)).max())
    return min(tail + 2.0 * canaries * delta * worst, 1.0)


def one_run_epsilon(
    canaries: int, guesses: int, correct: int, *, delta: float = 0.0, confidence: float = 0.95
) -> float:
    """The largest epsilon that ``correct`` of ``guesses`` rejects at ``confidence``: an
    empirical lower bound on the epsilon of the audited run (0 when none is rejected)."""
    alpha = 1.0 - confidence
    if one_run_p_value(canaries, guesses, correct, 0.0, delta) >= alpha:
        return 0.0
    low, high = 0.0, 1.0
    while one_run_p_value(canaries, guesses, correct, high, delta) < alpha:
        low, high = high, 2.0 * high
    for _ in range(50):  # p grows with epsilon: keep p(low) < alpha <= p(high)
        mid = 0.5 * (low + high)
        if one_run_p_value(canaries, guesses, correct, mid, delta) < alpha:
            low = mid
        else:
            high = mid
    return low


@dataclass
class OneRunAudit:
    """What ``one_run_audit`` measured: the lower bound ``epsilon_lower`` at
    ``confidence`` (for the run's ``delta``), from ``correct`` right guesses of
    ``guesses`` on ``canaries`` records; ``statistics`` ``(n,)`` and ``included`` ``(n,)``."""

    epsilon_lower: float
    guesses: int
    correct: int
    canaries: int
    delta: float
    confidence: float
    statistics: np.ndarray = field(repr=False)
    included: np.ndarray = field(repr=False)


def one_run_guesses(statistics: np.ndarray, included: np.ndarray, positive: int, negative: int) -> tuple[int, int]:
    """``(guesses, correct)``: "member" for the ``positive`` highest statistics,
    "non-member" for the ``negative`` lowest (ties broken by index)."""
    order = np.argsort(np.asarray(statistics, dtype=np.float64), kind="stable")
    included = np.asarray(included, dtype=bool)
    if positive + negative > len(order):
        raise ValueError(f"{positive} + {negative} guesses for {len(order)} canaries")
    right = int(included[order[len(order) - positive :]].sum()) if positive else 0
    right += int((~included[order[:negative]]).sum())
    return positive + negative, right


def one_run_audit(
    make_estimator: Callable[[], Any],
    X: np.ndarray,
    y: np.ndarray,
    *,
    positive: int,
    negative: int = 0,
    delta: float = 0.0,
    confidence: float = 0.95,
    score: Callable[[Any, np.ndarray, np.ndarray], np.ndarray] = true_class_score,
    seed: int | None = None,
) -> OneRunAudit:
    """The one-run audit of ``make_estimator()`` (module docstring): every record of
    ``(X, y)`` is a canary, kept by a fair coin (``seed``; None: fresh entropy), one fit
    on the kept records, ``positive`` / ``negative`` guesses fixed in advance, and the
    lower bound on epsilon at the claimed ``delta``. Costs one fit."""
    X, y = np.asarray(X), np.asarray(y)
    included = random_membership(2, len(y), np.random.default_rng(seed))[0]
    estimator = make_estimator().fit(X[included], y[included])
    statistics = score(estimator, X, y)
    guesses, correct = one_run_guesses(statistics, included, positive, negative)
    bound = one_run_epsilon(len(y), guesses, correct, delta=delta, confidence=confidence)
    return OneRunAudit(bound, guesses, correct, len(y), delta, confidence, statistics, included)
