"""Small data sets bundled with scikit-learn (no files, no internet needed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["BUNDLED_NAMES", "load_bundled"]


def _loaders() -> dict[str, Callable[..., Any]]:
    # Imported lazily: sklearn.datasets is comparatively slow to import.
    from sklearn import datasets

    return {
        "digits": datasets.load_digits,
        "iris": datasets.load_iris,
        "wine": datasets.load_wine,
        "breast_cancer": datasets.load_breast_cancer,
    }


#: Names accepted by ``load_bundled``.
BUNDLED_NAMES: tuple[str, ...] = ("digits", "iris", "wine", "breast_cancer")


def load_bundled(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Load one of scikit-learn's bundled classification data sets.

    Parameters
    ----------
    name : str
        One of ``"digits"`` (1797 x 64, 10 classes), ``"iris"`` (150 x 4,
        3 classes), ``"wine"`` (178 x 13, 3 classes) or ``"breast_cancer"``
        (569 x 30, 2 classes). Case-insensitive; ``-`` is read as ``_``.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features), dtype float64
        Features (a fresh, C-contiguous array).
    y : ndarray of shape (n_samples,), dtype int64
        Class labels ``0..K-1``.

    Raises
    ------
    ValueError
        If ``name`` is not one of ``BUNDLED_NAMES``.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    key = name.strip().lower().replace("-", "_")
    if key not in BUNDLED_NAMES:
        raise ValueError(f"unknown bundled data set {name!r}; valid names are: {', '.join(BUNDLED_NAMES)}")
    X, y = _loaders()[key](return_X_y=True)
    return np.ascontiguousarray(X, dtype=np.float64), np.ascontiguousarray(y, dtype=np.int64)
