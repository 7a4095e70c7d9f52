"""A classification set with planted feature relevance, in the manner of the FRI sets of
Brinkrolf (2023), section 5.5 (generated there with the toolbox of Göpfert, Pfannschmidt
& Hammer 2017): a linearly separable two-class problem on a few strongly relevant
features, redundant features that are linear combinations of them, and irrelevant
uniform noise. A feature selector should keep the strongly relevant features (or
redundant ones carrying the same information) and drop the irrelevant ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.utils import check_random_state

__all__ = ["FEATURE_KINDS", "feature_relevance_set"]

#: The kinds of ``feature_relevance_set``'s features, in the order of its columns.
FEATURE_KINDS = ("strong", "redundant", "irrelevant")


def _count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def feature_relevance_set(
    n_samples: int = 3000,
    *,
    n_strong: int = 3,
    n_redundant: int = 10,
    n_irrelevant: int = 37,
    random_state: Any = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(X, y, kinds)``: ``n_samples`` points with ``n_strong + n_redundant +
    n_irrelevant`` features (defaults: 3 + 10 + 37 = 50, the shape of the FRI set of
    Brinkrolf 2023, Table 5.1).

    * strongly relevant: ``x_s ~ N(0, I)``; the label is ``y = [w . x_s > 0]`` for a
      random direction ``w``, so the classes are linearly separable (about balanced);
    * redundant: ``x_s A`` for a random ``(n_strong, n_redundant)`` matrix ``A``: linear
      combinations of the strong features, each rescaled to unit variance;
    * irrelevant: independent uniform on ``[-sqrt(3), sqrt(3)]`` (unit variance).

    Returns
    -------
    X : ndarray (n_samples, n_features) float64
        Columns in the order strong, redundant, irrelevant.
    y : ndarray (n_samples,) int64, 0 or 1
    kinds : ndarray (n_features,) of str
        ``"strong"``, ``"redundant"`` or ``"irrelevant"`` for every column.
    """
    n = _count("n_samples", n_samples, 2)
    n_s = _count("n_strong", n_strong, 1)
    n_r = _count("n_redundant", n_redundant, 0)
    n_i = _count("n_irrelevant", n_irrelevant, 0)
    rng = check_random_state(random_state)
    strong = rng.standard_normal((n, n_s))
    w = rng.standard_normal(n_s)
    y = (strong @ w > 0).astype(np.int64)
    mix = rng.standard_normal((n_s, n_r))
    redundant = strong @ mix
    redundant /= np.maximum(redundant.std(0), 1e-12)
    irrelevant = rng.uniform(-np.sqrt(3.0), np.sqrt(3.0), size=(n, n_i))
    X = np.concatenate([strong, redundant, irrelevant], axis=1)
    kinds = np.array(["strong"] * n_s + ["redundant"] * n_r + ["irrelevant"] * n_i)
    return X, y, kinds
