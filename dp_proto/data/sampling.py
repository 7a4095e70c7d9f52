"""Class-stratified subsampling of rows (the 10% / 30% shuttle variants of Park 2022)."""

from __future__ import annotations

import numpy as np

from dp_proto.data._checks import RandomState, _check_count, _rng

__all__ = ["stratified_subsample"]


# --------------------------------------------------------------------------- subsampling
def stratified_subsample(
    X: np.ndarray,
    y: np.ndarray,
    fraction: float | None = None,
    random_state: RandomState = None,
    *,
    n_samples: int | None = None,
    return_indices: bool = False,
) -> tuple[np.ndarray, ...]:
    """A class-stratified random subset of the rows, without replacement.

    The subset size is ``m = round(fraction * n)`` (or ``n_samples``). Class
    ``k`` with ``n_k`` rows gets ``floor(m * n_k / n)`` rows, and the
    ``m - sum(floor)`` rows left go to the classes with the largest remainders
    (ties: smaller label first), so class proportions are kept as closely as
    integers allow. Within a class the rows are drawn uniformly. The returned
    rows keep their original order.

    Parameters
    ----------
    X : array-like of shape (n, ...)
        Features (any dtype; preserved).
    y : array-like of shape (n,)
        Labels used for stratification (preserved).
    fraction : float in (0, 1], optional
        Fraction of the rows to keep, e.g. 0.1 and 0.3 for Table 7.3 of Park (2022).
    random_state : int, numpy.random.Generator or None
        Seed or generator.
    n_samples : int, keyword-only, optional
        Number of rows to keep (1..n) instead of ``fraction``.
    return_indices : bool, keyword-only, default False
        Also return the sorted row indices of the subset.

    Returns
    -------
    X_sub : ndarray of shape (m, ...)
    y_sub : ndarray of shape (m,)
    indices : ndarray of shape (m,), dtype int64
        Only if ``return_indices``.

    Raises
    ------
    ValueError
        Neither or both of ``fraction`` and ``n_samples``; ``fraction`` not in
        (0, 1]; ``n_samples`` not in 1..n; ``X`` and ``y`` of different length;
        ``y`` not 1-D; empty input; a fraction that keeps no row.
    """
    X = np.asarray(X)
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"y must be 1-D, got shape {y.shape}")
    if X.ndim == 0 or len(X) != len(y):
        raise ValueError(f"X and y must have the same number of rows, got X shape {X.shape} and y shape {y.shape}")
    n = len(y)
    if n == 0:
        raise ValueError("cannot subsample an empty data set")
    if (fraction is None) == (n_samples is None):
        raise ValueError(f"give exactly one of fraction and n_samples (got fraction={fraction}, n_samples={n_samples})")
    if fraction is not None:
        fraction = float(fraction)
        if not np.isfinite(fraction) or not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        m = int(round(fraction * n))
        if m == 0:
            raise ValueError(f"fraction {fraction} of {n} rows keeps no row")
    else:
        m = _check_count("n_samples", n_samples, minimum=1)
        if m > n:
            raise ValueError(f"n_samples must be <= the number of rows {n}, got {m}")
    rng = _rng(random_state)
    classes, inverse, counts = np.unique(y, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    quota = m * counts / n
    take = np.floor(quota).astype(np.int64)
    left = m - int(take.sum())
    if left:
        order = np.lexsort((np.arange(len(classes)), -(quota - take)))
        take[order[:left]] += 1
    chosen = []
    for k, t in enumerate(take):
        rows = np.flatnonzero(inverse == k)
        chosen.append(rng.permutation(rows)[:t])
    idx = np.sort(np.concatenate(chosen)).astype(np.int64)
    if return_indices:
        return X[idx], y[idx], idx
    return X[idx], y[idx]
