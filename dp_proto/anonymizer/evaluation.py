"""Honest anonymity evaluation: fresh attackers trained on frozen representations.

The private branch trained jointly with the encoder is the adversary the encoder was
trained to fool, so its accuracy says little. After training, the encoder is frozen,
a held-out split is encoded, and new private-label classifiers are trained on one part
of it and scored on the rest; the best of them is reported.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor, nn

from dp_proto.anonymizer.losses import (
    misclassification_lower_bound,
    private_cross_entropy,
    random_guess_cross_entropy,
)

__all__ = [
    "encode",
    "AttackerReport",
    "fresh_attacker_accuracy",
    "ATTACKERS",
    "fresh_probes",
    "restart_score",
    "evaluate_held_out",
]

ATTACKERS = ("logistic", "mlp", "knn")


@torch.no_grad()
def encode(encoder: nn.Module, x: Tensor, batch_size: int = 1024) -> Tensor:
    """Representations ``(n, r)`` of ``x`` with the encoder in eval mode (restored after)."""
    was_training = encoder.training
    encoder.eval()
    try:
        parts = [encoder(x[i : i + batch_size]) for i in range(0, len(x), batch_size)]
    finally:
        encoder.train(was_training)
    return torch.cat(parts) if parts else x.new_zeros((0, 0))


class AttackerReport(NamedTuple):
    """Cross-fitted accuracy of every attacker, the best one, and chance (the largest
    private class frequency: always guessing that class)."""

    accuracies: dict[str, float]
    best: str
    accuracy: float
    chance: float
    n: int


def _make_attacker(name: str, seed: int):
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if name == "logistic":
        model = LogisticRegression(max_iter=2000, C=1.0)
    elif name == "mlp":
        model = MLPClassifier(hidden_layer_sizes=(128,), max_iter=2000, random_state=seed)
    elif name == "knn":
        model = KNeighborsClassifier(n_neighbors=1)
    else:
        raise ValueError(f"unknown attacker {name!r}; choose from {ATTACKERS}")
    return make_pipeline(StandardScaler(), model)


def fresh_attacker_accuracy(
    z: Tensor | np.ndarray, s: Tensor | np.ndarray, *, folds: int = 2, attackers=ATTACKERS, seed: int = 0
) -> AttackerReport:
    """Fresh private-label attackers on held-out representations, cross-fitted: split
    ``(z, s)`` into ``folds`` stratified parts, train each attacker on all parts but one
    and score it on that one, so every record is scored once by attackers that never saw
    it (``folds=2``: train on one half, score the other, and the reverse).

    Parameters
    ----------
    z : (n, r) representations of held-out records (never seen by the encoder's training)
    s : (n,) private labels
    """
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.model_selection import KFold, StratifiedKFold

    z = z.detach().cpu().numpy() if isinstance(z, Tensor) else np.asarray(z)
    s = s.detach().cpu().numpy() if isinstance(s, Tensor) else np.asarray(s)
    if z.ndim != 2 or s.shape != (len(z),):
        raise ValueError(f"expected z (n, r) and s (n,), got {z.shape} and {s.shape}")
    if folds < 2 or folds > len(s):
        raise ValueError(f"folds must lie in 2..n = {len(s)}, got {folds}")
    classes, counts = np.unique(s, return_counts=True)
    if len(classes) < 2:
        raise ValueError("the held-out records hold a single private class")
    splitter = (
        StratifiedKFold(folds, shuffle=True, random_state=seed)
        if counts.min() >= folds
        else KFold(folds, shuffle=True, random_state=seed)
    )
    correct = dict.fromkeys(attackers, 0)
    for train, test in splitter.split(z, s):
        if len(np.unique(s[train])) < 2:
            raise ValueError("an attacker's training part holds a single private class; use fewer folds")
        for name in attackers:
            model = _make_attacker(name, seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                model.fit(z[train], s[train])
            correct[name] += int(np.sum(model.predict(z[test]) == s[test]))
    accuracies = {name: c / len(s) for name, c in correct.items()}
    best = max(accuracies, key=accuracies.get)
    return AttackerReport(accuracies, best, accuracies[best], float(counts.max() / len(s)), len(s))


def fresh_probes(anonymizer, x: Tensor, regular: Tensor, private: Tensor, *, folds: int = 2, seed: int = 0):
    """The frozen representation ``z (n, r)`` of ``x`` by ``anonymizer.encoder`` and the
    cross-fitted fresh probes on it (``fresh_attacker_accuracy``): ``(z, regular
    report, private report)``; the same probes for both labels."""
    z = encode(anonymizer.encoder, x)
    return (
        z,
        fresh_attacker_accuracy(z, regular, folds=folds, seed=seed),
        fresh_attacker_accuracy(z, private, folds=folds, seed=seed),
    )


def restart_score(
    anonymizer, x: Tensor, regular: Tensor, private: Tensor, *, lam: float, folds: int = 2, seed: int = 0
) -> dict:
    """How well a trained anonymizer trades the two labels off on its own training
    records ``x (n, ...)``, as fresh probes see it: the cross-fitted accuracies of fresh
    regular classifiers (``regular_accuracy``) and of fresh attackers
    (``attacker_accuracy``; chance = the largest private class share) on the frozen
    representation, and ``score = regular_accuracy - lam * max(attacker_accuracy -
    chance, 0)``: the encoder objective's trade-off, in accuracies. Training restarts
    are compared by it; it uses the training records only."""
    _, probe_regular, attack = fresh_probes(anonymizer, x, regular, private, folds=folds, seed=seed)
    leak = max(attack.accuracy - attack.chance, 0.0)
    return {
        "regular_accuracy": probe_regular.accuracy,
        "attacker_accuracy": attack.accuracy,
        "chance": attack.chance,
        "score": probe_regular.accuracy - lam * leak,
    }


def evaluate_held_out(
    anonymizer, prior: Tensor, x: Tensor, regular: Tensor, private: Tensor, *, folds: int = 2, seed: int = 0
) -> dict:
    """The honest evaluation on held-out records ``x (n, ...)``: the regular branch's
    accuracy, fresh regular classifiers' and fresh attackers' cross-fitted accuracies on
    the frozen representation, the jointly trained private branch's accuracy and
    cross-entropies (``prior (K_p,)``: the private labels' prior of training), and the
    Fano estimate from that cross-entropy (``fano_error_bound``; an estimate, not a
    guarantee)."""
    z, fresh_regular, attack = fresh_probes(anonymizer, x, regular, private, folds=folds, seed=seed)
    with torch.no_grad():
        regular_logits = anonymizer.regular_head(z)
        private_logits = anonymizer.private_head(z)
        ce_private = float(private_cross_entropy(private_logits, private))
        ce_random = float(random_guess_cross_entropy(private_logits, prior.to(private_logits)))
    return {
        "regular_accuracy": float((regular_logits.argmax(1) == regular).float().mean()),
        "fresh_regular_accuracy": fresh_regular.accuracy,
        "attacker_accuracy": attack.accuracy,
        "attacker_by_model": attack.accuracies,
        "attacker_chance": attack.chance,
        "branch_private_accuracy": float((private_logits.argmax(1) == private).float().mean()),
        "ce_private": ce_private,
        "ce_random": ce_random,
        "fano_error_bound": float(misclassification_lower_bound(ce_private, int(prior.numel()))),
    }
