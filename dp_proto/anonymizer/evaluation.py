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

__all__ = ["encode", "AttackerReport", "fresh_attacker_accuracy", "ATTACKERS"]

ATTACKERS = ("logistic", "mlp", "knn")


@torch.no_grad()
def encode(encoder: nn.Module, x: Tensor, batch_size: int = 1024) -> Tensor:
    """Representations ``(n, r)`` of ``x`` with the encoder in eval mode (restored after)."""
    was_training = encoder.training
    encoder.eval()
    try:
        parts = [encoder(x[i:i + batch_size]) for i in range(0, len(x), batch_size)]
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


def fresh_attacker_accuracy(z: Tensor | np.ndarray, s: Tensor | np.ndarray, *, folds: int = 2,
                            attackers=ATTACKERS, seed: int = 0) -> AttackerReport:
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
    splitter = (StratifiedKFold(folds, shuffle=True, random_state=seed) if counts.min() >= folds
                else KFold(folds, shuffle=True, random_state=seed))
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
