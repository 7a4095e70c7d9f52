"""A synthetic two-label task with a known, tunable dependence between the regular and
the private label (for the anonymizer of Feutry et al. 2018): ``make_entangled_task``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dp_proto._validation import check_nonnegative
from dp_proto.data._checks import RandomState, _check_count, _rng

__all__ = ["EntangledTask", "entangled_label_joint", "make_entangled_task"]


@dataclass(frozen=True)
class EntangledTask:
    """A synthetic task whose regular and private labels depend on each other in a known way.

    Attributes
    ----------
    x : ndarray of shape (n, dim), dtype float32
        Features.
    regular : ndarray of shape (n,), dtype int64
        Regular labels ``y`` in ``0..num_regular-1``.
    private : ndarray of shape (n,), dtype int64
        Private labels ``s`` in ``0..num_private-1``.
    regular_basis : ndarray of shape (dim, num_regular), dtype float64
        Orthonormal columns; column ``k`` is the direction of regular class ``k``.
    private_basis : ndarray of shape (dim, num_private), dtype float64
        Orthonormal columns, orthogonal to ``regular_basis``; column ``k`` is the
        direction of private class ``k``.
    label_joint : ndarray of shape (num_private, num_regular), dtype float64
        The exact joint probabilities P(s, y) of the generative model.
    chance_private : float
        Largest prior probability of ``s`` (``1 / num_private``): the accuracy of
        guessing ``s`` without any information.
    best_private_accuracy_given_regular : float
        Bayes-optimal accuracy of guessing ``s`` from ``y`` alone,
        ``sum_y max_s P(s, y)``; an encoder that keeps ``y`` perfectly cannot
        push an adversary's accuracy on ``s`` below this.
    entanglement : float
        The ``entanglement`` the task was drawn with.
    """

    x: np.ndarray
    regular: np.ndarray
    private: np.ndarray
    regular_basis: np.ndarray
    private_basis: np.ndarray
    label_joint: np.ndarray
    chance_private: float
    best_private_accuracy_given_regular: float
    entanglement: float

    def __len__(self) -> int:
        return len(self.x)


# --------------------------------------------------------------------------- synthetic
def _check_probability(name: str, value: float) -> float:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a float, got bool")
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}") from None
    if not 0.0 <= value <= 1.0:  # also rejects NaN
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    return value


def entangled_label_joint(num_regular: int, num_private: int, entanglement: float) -> np.ndarray:
    """Exact joint distribution P(s, y) of the labels of ``make_entangled_task``.

    P(s) = 1 / num_private and P(y | s) = entanglement * [y == s mod num_regular]
    + (1 - entanglement) / num_regular.

    Returns
    -------
    ndarray of shape (num_private, num_regular), dtype float64
        Sums to 1.
    """
    num_regular = _check_count("num_regular", num_regular, minimum=2)
    num_private = _check_count("num_private", num_private, minimum=2)
    entanglement = _check_probability("entanglement", entanglement)
    s = np.arange(num_private)
    cond = np.full((num_private, num_regular), (1.0 - entanglement) / num_regular)
    cond[s, s % num_regular] += entanglement
    return cond / num_private


def make_entangled_task(
    n: int,
    *,
    num_regular: int = 4,
    num_private: int = 8,
    entanglement: float = 0.5,
    dim: int = 20,
    signal: float = 3.0,
    noise: float = 1.0,
    seed: RandomState = 0,
) -> EntangledTask:
    """A tabular two-label task with a known, tunable dependence between the labels.

    Generative model, independently per row:

    * private label ``s`` uniform on ``0..num_private-1``;
    * regular label ``y = s mod num_regular`` with probability
      ``entanglement``, else uniform on ``0..num_regular-1``;
    * features ``x = signal * R[:, y] + signal * P[:, s] + noise * N(0, I_dim)``,

    where the columns of ``R`` (dim x num_regular) and ``P`` (dim x num_private)
    are together orthonormal (a random rotation of unit vectors), so the
    regular and private subspaces are orthogonal. An encoder that projects out
    the private subspace removes everything about ``s`` except what ``y``
    reveals: an adversary can then still guess ``s`` from ``y`` with the
    accuracy ``best_private_accuracy_given_regular``
    (= ``(min(num_regular, num_private) * e + 1 - e) / num_private`` for
    entanglement ``e``), which no encoder can go below without hurting ``y``.
    ``entanglement = 0`` makes the labels independent (that bound is then the
    chance level ``1 / num_private``); ``entanglement = 1`` makes ``y`` a
    function of ``s``.

    Parameters
    ----------
    n : int
        Number of rows (>= 1).
    num_regular : int, default 4
        Number of regular classes (>= 2).
    num_private : int, default 8
        Number of private classes (>= 2).
    entanglement : float, default 0.5
        Probability in [0, 1] that ``y`` is tied to ``s``.
    dim : int, default 20
        Feature dimension (>= num_regular + num_private).
    signal : float, default 3.0
        Length of each class direction (>= 0).
    noise : float, default 1.0
        Standard deviation of the isotropic Gaussian noise (>= 0).
    seed : int, numpy.random.Generator or None, default 0
        Seed of a ``numpy.random.default_rng`` generator; the same seed
        gives the same task (the bases depend only on the seed and ``dim``,
        ``num_regular``, ``num_private``).

    Returns
    -------
    EntangledTask
        ``x`` float32 (n, dim); ``regular`` and ``private`` int64 (n,);
        ``regular_basis`` (dim, num_regular) and ``private_basis``
        (dim, num_private); ``label_joint`` (num_private, num_regular);
        ``chance_private`` and ``best_private_accuracy_given_regular`` exact.

    Raises
    ------
    TypeError
        If a count is not an int, or ``seed`` is of the wrong type.
    ValueError
        If ``n < 1``, ``num_regular < 2``, ``num_private < 2``,
        ``entanglement`` is outside [0, 1], ``dim < num_regular + num_private``,
        or ``signal`` / ``noise`` is negative or not finite.
    """
    n = _check_count("n", n, minimum=1)
    num_regular = _check_count("num_regular", num_regular, minimum=2)
    num_private = _check_count("num_private", num_private, minimum=2)
    entanglement = _check_probability("entanglement", entanglement)
    dim = _check_count("dim", dim, minimum=1)
    if dim < num_regular + num_private:
        raise ValueError(
            f"dim must be >= num_regular + num_private = {num_regular + num_private} to hold "
            f"the two orthogonal subspaces, got dim={dim}"
        )
    signal = check_nonnegative("signal", signal)
    noise = check_nonnegative("noise", noise)
    try:
        rng = _rng(seed)
    except (TypeError, ValueError) as exc:
        raise type(exc)(str(exc).replace("random_state", "seed")) from None

    q, r = np.linalg.qr(rng.standard_normal((dim, dim)))
    q = q * np.where(np.diag(r) < 0, -1.0, 1.0)  # a uniformly random rotation
    regular_basis = np.ascontiguousarray(q[:, :num_regular])
    private_basis = np.ascontiguousarray(q[:, num_regular : num_regular + num_private])

    private = rng.integers(0, num_private, size=n, dtype=np.int64)
    tied = rng.random(n) < entanglement
    free = rng.integers(0, num_regular, size=n, dtype=np.int64)
    regular = np.where(tied, private % num_regular, free).astype(np.int64)
    x = signal * (regular_basis.T[regular] + private_basis.T[private])
    x = x + noise * rng.standard_normal((n, dim))

    joint = entangled_label_joint(num_regular, num_private, entanglement)
    return EntangledTask(
        x=x.astype(np.float32),
        regular=regular,
        private=private,
        regular_basis=regular_basis,
        private_basis=private_basis,
        label_joint=joint,
        chance_private=float(joint.sum(axis=1).max()),
        best_private_accuracy_given_regular=float(joint.max(axis=0).sum()),
        entanglement=entanglement,
    )
