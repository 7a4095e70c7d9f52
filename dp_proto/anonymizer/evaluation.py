"""Honest anonymity evaluation: fresh attackers trained on frozen representations.

The private branch trained jointly with the encoder is the adversary the encoder was
trained to fool, so its accuracy says little. After training, the encoder is frozen,
a held-out split is encoded, and new private-label classifiers are trained on one part
of it and scored on the rest (``fresh_attacker_accuracy``; ``groups`` keeps records that
share samples, such as overlapping windows of one recording, on one side), or trained on
the released representations of enrolment records with known labels and scored on the
held-out ones (``enrolled_attacker_accuracy``: closed-set identification); the best of
them is reported.

Attackers: ``logistic`` regression, an ``mlp`` (one hidden layer of 128; early stopping
on a tenth of its training records from ``MLP_EARLY_STOPPING_RECORDS`` on), ``knn``
(1-nearest neighbour), each on standardised representations, and ``cnn``
(``RepresentationCNN``: two 1-D convolutions over the representation's coordinates and a
linear layer, in torch); ``ATTACKERS`` are the first three, the default.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
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
    "ALL_ATTACKERS",
    "RepresentationCNN",
    "enrolled_attacker_accuracy",
    "fresh_probes",
    "restart_score",
    "evaluate_held_out",
]

ATTACKERS = ("logistic", "mlp", "knn")
ALL_ATTACKERS = (*ATTACKERS, "cnn")


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


class RepresentationCNN(ClassifierMixin, BaseEstimator):
    """A small convolutional attacker on vector representations ``z (n, r)``: the
    coordinates as a one-channel sequence of length ``r``, two 1-D convolutions (16 and
    32 channels, kernel 3, ReLU), then a linear layer of 64 units and the class scores;
    Adam (learning rate 0.003), ``epochs`` passes over mini-batches of 256, weights and
    batch order from ``seed``. A scikit-learn classifier (``fit`` / ``predict`` /
    ``score``), so that it fits in a ``Pipeline`` after a ``StandardScaler``.
    """

    def __init__(self, seed: int = 0, epochs: int = 60) -> None:
        self.seed = seed
        self.epochs = epochs

    def _network(self, r: int, k: int) -> nn.Module:
        return nn.Sequential(
            nn.Unflatten(1, (1, r)),
            nn.Conv1d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv1d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(32 * r, 64),
            nn.ReLU(),
            nn.Linear(64, k),
        )

    def fit(self, z, s) -> RepresentationCNN:
        z = torch.as_tensor(np.asarray(z), dtype=torch.float32)
        self.classes_, codes = np.unique(np.asarray(s), return_inverse=True)
        target = torch.as_tensor(codes, dtype=torch.long)
        generator = torch.Generator().manual_seed(int(self.seed))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(self.seed))
            self.network_ = self._network(z.shape[1], len(self.classes_))
        optimiser = torch.optim.Adam(self.network_.parameters(), lr=0.003)
        self.network_.train()
        for _ in range(int(self.epochs)):
            for batch in torch.randperm(len(z), generator=generator).split(256):
                optimiser.zero_grad()
                nn.functional.cross_entropy(self.network_(z[batch]), target[batch]).backward()
                optimiser.step()
        self.network_.eval()
        return self

    def predict(self, z) -> np.ndarray:
        with torch.no_grad():
            scores = self.network_(torch.as_tensor(np.asarray(z), dtype=torch.float32))
        return self.classes_[scores.argmax(1).numpy()]


#: From this many training records on, the MLP attacker holds a tenth of them back and
#: stops when its accuracy there no longer improves; below, it trains to convergence (why:
#: docs/anonymizer.md, "Usage").
MLP_EARLY_STOPPING_RECORDS = 1000


def _make_attacker(name: str, seed: int, n_train: int = 0):
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if name == "logistic":
        model = LogisticRegression(max_iter=2000, C=1.0)
    elif name == "mlp":
        early = n_train >= MLP_EARLY_STOPPING_RECORDS
        model = MLPClassifier(hidden_layer_sizes=(128,), max_iter=2000, early_stopping=early, random_state=seed)
    elif name == "knn":
        model = KNeighborsClassifier(n_neighbors=1)
    elif name == "cnn":
        model = RepresentationCNN(seed)
    else:
        raise ValueError(f"unknown attacker {name!r}; choose from {ALL_ATTACKERS}")
    return make_pipeline(StandardScaler(), model)


def _labelled(z, s, what: str) -> tuple[np.ndarray, np.ndarray]:
    """``(z (n, r), s (n,))`` as numpy arrays, their shapes checked."""
    z = z.detach().cpu().numpy() if isinstance(z, Tensor) else np.asarray(z)
    s = s.detach().cpu().numpy() if isinstance(s, Tensor) else np.asarray(s)
    if z.ndim != 2 or s.shape != (len(z),):
        raise ValueError(f"expected z (n, r) and s (n,) of the {what} records, got {z.shape} and {s.shape}")
    return z, s


def _correct_predictions(name: str, seed: int, z_train, s_train, z_test, s_test) -> int:
    """How many of ``z_test`` attacker ``name``, trained on ``(z_train, s_train)``, labels right."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    model = _make_attacker(name, seed, len(s_train))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(z_train, s_train)
    return int(np.sum(model.predict(z_test) == s_test))


def _report(correct: dict[str, int], s: np.ndarray) -> AttackerReport:
    accuracies = {name: c / len(s) for name, c in correct.items()}
    best = max(accuracies, key=accuracies.get)
    counts = np.unique(s, return_counts=True)[1]
    return AttackerReport(accuracies, best, accuracies[best], float(counts.max() / len(s)), len(s))


def fresh_attacker_accuracy(
    z: Tensor | np.ndarray,
    s: Tensor | np.ndarray,
    *,
    folds: int = 2,
    attackers=ATTACKERS,
    seed: int = 0,
    groups: Tensor | np.ndarray | None = None,
) -> AttackerReport:
    """Fresh private-label attackers on held-out representations, cross-fitted: split
    ``(z, s)`` into ``folds`` stratified parts, train each attacker on all parts but one
    and score it on that one, so every record is scored once by attackers that never saw
    it (``folds=2``: train on one half, score the other, and the reverse).

    Parameters
    ----------
    z : (n, r) representations of held-out records (never seen by the encoder's training)
    s : (n,) private labels
    folds : number of parts, 2..n
    attackers : names from ``ALL_ATTACKERS``
    seed : the parts' shuffle and the attackers' initialisation
    groups : (n,), optional
        Records of one group stay in one part (``StratifiedGroupKFold``): for records
        that share data, such as overlapping windows of one recording, which a 1-NN
        attacker would otherwise match to each other.
    """
    from sklearn.model_selection import KFold, StratifiedGroupKFold, StratifiedKFold

    z, s = _labelled(z, s, "held-out")
    if folds < 2 or folds > len(s):
        raise ValueError(f"folds must lie in 2..n = {len(s)}, got {folds}")
    classes, counts = np.unique(s, return_counts=True)
    if len(classes) < 2:
        raise ValueError("the held-out records hold a single private class")
    if groups is not None:
        groups = groups.detach().cpu().numpy() if isinstance(groups, Tensor) else np.asarray(groups)
        if groups.shape != s.shape:
            raise ValueError(f"groups must have shape {s.shape}, got {groups.shape}")
        if len(np.unique(groups)) < folds:
            raise ValueError(f"{len(np.unique(groups))} groups cannot fill {folds} folds")
        parts = StratifiedGroupKFold(folds, shuffle=True, random_state=seed).split(z, s, groups)
    elif counts.min() >= folds:
        parts = StratifiedKFold(folds, shuffle=True, random_state=seed).split(z, s)
    else:
        parts = KFold(folds, shuffle=True, random_state=seed).split(z, s)
    correct = dict.fromkeys(attackers, 0)
    for train, test in parts:
        if len(np.unique(s[train])) < 2:
            raise ValueError("an attacker's training part holds a single private class; use fewer folds")
        for name in attackers:
            correct[name] += _correct_predictions(name, seed, z[train], s[train], z[test], s[test])
    return _report(correct, s)


def enrolled_attacker_accuracy(
    z_enrol: Tensor | np.ndarray,
    s_enrol: Tensor | np.ndarray,
    z_test: Tensor | np.ndarray,
    s_test: Tensor | np.ndarray,
    *,
    attackers=ATTACKERS,
    seed: int = 0,
) -> AttackerReport:
    """Fresh attackers trained on the released representations of enrolment records
    with known private labels (``z_enrol (m, r)``, ``s_enrol (m,)``, e.g. the encoder's
    own training records) and scored on held-out records ``z_test (n, r)``, ``s_test
    (n,)`` of the same private classes: closed-set identification. ``chance`` is the
    largest class share of ``s_test``."""
    z_enrol, s_enrol = _labelled(z_enrol, s_enrol, "enrolment")
    z_test, s_test = _labelled(z_test, s_test, "test")
    if z_enrol.shape[1] != z_test.shape[1]:
        raise ValueError(f"enrolment and test representations differ in width: {z_enrol.shape[1]}, {z_test.shape[1]}")
    if len(np.unique(s_enrol)) < 2:
        raise ValueError("the enrolment records hold a single private class")
    if len(s_test) == 0:
        raise ValueError("no test record")
    return _report(
        {name: _correct_predictions(name, seed, z_enrol, s_enrol, z_test, s_test) for name in attackers}, s_test
    )


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
