"""Synthetic 2-D (and d-D) data sets used in the experiments of the implemented papers.

The sets come from Brinkrolf, Göpfert & Hammer (2019), Brinkrolf (2023) and Park (2022)
(see ``REFERENCES.md``).

Every generator takes ``random_state`` (an int seed, a
:class:`numpy.random.Generator`, or ``None`` for fresh entropy) and returns
``(X, y)`` with ``X`` float64 of shape (n_samples, n_features) and ``y`` int64
of shape (n_samples,). Rows are ordered by component (not shuffled); the order
is documented per generator.

It also holds the small helpers the kernel-support (SVDD) experiments of Park
(2022) need besides the generators: :func:`merge_classes`,
:func:`load_shuttle_3class` (UCI shuttle merged to 3 classes) and
:func:`stratified_subsample` (the 10% / 30% shuttle variants of Table 7.3).
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping

import numpy as np

from dp_proto.data.files import load_uci

__all__ = [
    "FIVE_GAUSSIANS_MEANS",
    "OUTLIER_MEANS",
    "SHUTTLE_3CLASS_MAPPING",
    "SHUTTLE_CLASS_NAMES",
    "XOR_CENTERS",
    "five_gaussians",
    "five_gaussians_covariances",
    "load_shuttle_3class",
    "merge_classes",
    "noisy_xor",
    "noisy_xor_unbalanced",
    "stratified_subsample",
    "three_gaussians",
    "three_gaussians_means",
    "three_moons",
    "two_gaussians_with_outlier",
]

RandomState = int | np.random.Generator | None

#: Mean of the single class-1 outlier of :func:`two_gaussians_with_outlier`.
OUTLIER_MEANS: dict[str, tuple[float, float]] = {
    "extreme": (10.0, 10.0),
    "medium": (10.0, 5.0),
    "weak": (10.0, 2.0),
}

#: Cluster centres of :func:`noisy_xor` -> class label (XOR of the signs).
XOR_CENTERS: dict[tuple[float, float], int] = {
    (10.0, 10.0): 1,  # top right
    (-10.0, 10.0): 0,  # top left
    (10.0, -10.0): 0,  # bottom right
    (-10.0, -10.0): 1,  # bottom left
}

#: Means of the five classes of :func:`five_gaussians`.
FIVE_GAUSSIANS_MEANS: tuple[tuple[float, float], ...] = (
    (2.0, 3.0),
    (5.0, 1.0),
    (1.0, 0.0),
    (-1.0, 3.0),
    (4.5, 3.0),
)
# Rotation angle per class (None: identity covariance).
_FIVE_ANGLES: tuple[float | None, ...] = (np.pi / 4, np.pi / 4, None, np.pi / 8, np.pi / 4)
# Axis variances before rotation: our choice, the source does not give them.
_FIVE_AXIS_VARIANCES = (1.0, 0.25)


def _rng(random_state: RandomState) -> np.random.Generator:
    if random_state is None or isinstance(random_state, np.random.Generator):
        return np.random.default_rng(random_state)
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValueError(f"random_state must be a non-negative int, got {random_state}")
        return np.random.default_rng(int(random_state))
    raise TypeError(
        "random_state must be an int, a numpy.random.Generator or None, "
        f"got {type(random_state).__name__}"
    )


def _check_count(name: str, value: int, minimum: int = 0) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _check_positive(name: str, value: float, allow_zero: bool = False) -> float:
    value = float(value)
    if not np.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be finite and {bound}, got {value}")
    return value


def two_gaussians_with_outlier(
    setting: str | None = "extreme",
    n_per_class: int = 50,
    random_state: RandomState = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Two unit-variance Gaussians plus (optionally) one class-1 outlier.

    Class 0 ~ N((-10, 0), I), class 1 ~ N((10, 0), I). If ``setting`` is not
    ``None``, one extra class-1 point ~ N(mu_out, I) is appended, with
    mu_out = (10, 10) for ``"extreme"``, (10, 5) for ``"medium"`` and (10, 2)
    for ``"weak"`` (see :data:`OUTLIER_MEANS`).

    Parameters
    ----------
    setting : {"extreme", "medium", "weak"} or None, default "extreme"
        Outlier strength, or ``None`` for no outlier.
    n_per_class : int, default 50
        Points per Gaussian (>= 1).
    random_state : int, numpy.random.Generator or None
        Seed or generator.

    Returns
    -------
    X : ndarray of shape (2 * n_per_class [+ 1], 2), dtype float64
        Rows: ``n_per_class`` of class 0, then ``n_per_class`` of class 1,
        then the outlier (last row) if any.
    y : ndarray of shape (2 * n_per_class [+ 1],), dtype int64
    """
    if setting is not None and setting not in OUTLIER_MEANS:
        raise ValueError(
            f"unknown outlier setting {setting!r}; valid: {', '.join(OUTLIER_MEANS)} or None"
        )
    n = _check_count("n_per_class", n_per_class, minimum=1)
    rng = _rng(random_state)
    parts = [
        rng.standard_normal((n, 2)) + np.array([-10.0, 0.0]),
        rng.standard_normal((n, 2)) + np.array([10.0, 0.0]),
    ]
    labels = [np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.int64)]
    if setting is not None:
        parts.append(rng.standard_normal((1, 2)) + np.asarray(OUTLIER_MEANS[setting]))
        labels.append(np.ones(1, dtype=np.int64))
    return np.concatenate(parts), np.concatenate(labels)


def noisy_xor(
    n_per_cluster: int = 300,
    extra_bottom_left: int = 0,
    std: float = 1.0,
    random_state: RandomState = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Noisy XOR: four isotropic Gaussians at (+-10, +-10).

    Class 0: top-left (-10, 10) and bottom-right (10, -10); class 1:
    bottom-left (-10, -10) and top-right (10, 10) (see :data:`XOR_CENTERS`).

    Parameters
    ----------
    n_per_cluster : int, default 300
        Points per cluster (>= 1).
    extra_bottom_left : int, default 0
        Extra class-1 points drawn from the bottom-left cluster and appended
        at the end; 10 gives the "unbalanced" variant of
        Brinkrolf, Göpfert & Hammer (2019).
    std : float, default 1.0
        Standard deviation of every coordinate.
    random_state : int, numpy.random.Generator or None
        Seed or generator.

    Returns
    -------
    X : ndarray of shape (4 * n_per_cluster + extra_bottom_left, 2), dtype float64
        Rows by cluster in the order top-right, top-left, bottom-right,
        bottom-left, then the extra bottom-left points.
    y : ndarray of shape (4 * n_per_cluster + extra_bottom_left,), dtype int64
    """
    n = _check_count("n_per_cluster", n_per_cluster, minimum=1)
    extra = _check_count("extra_bottom_left", extra_bottom_left)
    std = _check_positive("std", std)
    rng = _rng(random_state)
    counts = [n, n, n, n + extra]  # XOR_CENTERS order ends with bottom-left
    parts = [
        np.asarray(center) + std * rng.standard_normal((count, 2))
        for center, count in zip(XOR_CENTERS, counts, strict=True)
    ]
    labels = [
        np.full(count, label, dtype=np.int64)
        for label, count in zip(XOR_CENTERS.values(), counts, strict=True)
    ]
    return np.concatenate(parts), np.concatenate(labels)


def noisy_xor_unbalanced(
    n_per_cluster: int = 300,
    std: float = 1.0,
    random_state: RandomState = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The unbalanced noisy XOR of Brinkrolf, Göpfert & Hammer (2019).

    :func:`noisy_xor` with ``extra_bottom_left=10``.

    Returns
    -------
    X : ndarray of shape (4 * n_per_cluster + 10, 2), dtype float64
    y : ndarray of shape (4 * n_per_cluster + 10,), dtype int64
    """
    return noisy_xor(n_per_cluster, extra_bottom_left=10, std=std, random_state=random_state)


def three_gaussians_means(n_features: int = 2, scale: float = 5.0) -> np.ndarray:
    """Class means of :func:`three_gaussians`.

    Returns
    -------
    ndarray of shape (3, n_features)
        For ``n_features == 2``: (scale, 0), (-scale, 0), (0, scale); for
        ``n_features >= 3``: scale * e1, scale * e2, scale * e3.
    """
    d = _check_count("n_features", n_features, minimum=2)
    means = np.zeros((3, d))
    if d == 2:
        means[0, 0], means[1, 0], means[2, 1] = scale, -scale, scale
    else:
        means[[0, 1, 2], [0, 1, 2]] = scale
    return means


def three_gaussians(
    n_per_class: int = 3000,
    n_features: int = 2,
    scale: float = 5.0,
    random_state: RandomState = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Three identity-covariance Gaussians.

    Means (see :func:`three_gaussians_means`): in 2-D (5, 0), (-5, 0), (0, 5);
    in ``n_features >= 3`` dimensions the first three unit vectors scaled by
    5 (``scale``), as in Brinkrolf, Göpfert & Hammer (2019).

    Parameters
    ----------
    n_per_class : int, default 3000
        Points per class (>= 1).
    n_features : int, default 2
        Dimension (>= 2).
    scale : float, default 5.0
        Distance of the means from the origin.
    random_state : int, numpy.random.Generator or None
        Seed or generator.

    Returns
    -------
    X : ndarray of shape (3 * n_per_class, n_features), dtype float64
        Rows ordered by class 0, 1, 2.
    y : ndarray of shape (3 * n_per_class,), dtype int64
    """
    n = _check_count("n_per_class", n_per_class, minimum=1)
    scale = _check_positive("scale", scale, allow_zero=True)
    means = three_gaussians_means(n_features, scale)
    rng = _rng(random_state)
    X = rng.standard_normal((3 * n, means.shape[1])) + np.repeat(means, n, axis=0)
    y = np.repeat(np.arange(3, dtype=np.int64), n)
    return X, y


def three_moons(
    n_samples: int = 400,
    noise: float = 0.1,
    random_state: RandomState = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Three interleaving half-moons in 2-D (a 3-class version of ``make_moons``).

    The unit-radius half circles, for t uniform in [0, pi], are

    * class 0: (cos t, sin t) - upper moon centred at (0, 0) (scikit-learn's first);
    * class 1: (1 - cos t, 0.5 - sin t) - lower moon centred at (1, 0.5)
      (scikit-learn's second);
    * class 2: (2.5 + cos t, 0.5 + sin t) - upper moon centred at (2.5, 0.5).

    Class 1 interleaves with class 0 as in scikit-learn, and class 1's right
    tip (2, 0.5) passes class 2's left tip (1.5, 0.5), so the three moons hook
    into each other in a chain; no two noiseless moons come closer than 0.5
    (the gap of scikit-learn's two moons).
    Isotropic Gaussian noise with standard deviation ``noise`` is added.

    Parameters
    ----------
    n_samples : int, default 400
        Total number of points (>= 3); split as evenly as possible, the first
        ``n_samples % 3`` classes get one point more.
    noise : float, default 0.1
        Standard deviation of the added Gaussian noise (>= 0).
    random_state : int, numpy.random.Generator or None
        Seed or generator.

    Returns
    -------
    X : ndarray of shape (n_samples, 2), dtype float64
        Rows ordered by class 0, 1, 2.
    y : ndarray of shape (n_samples,), dtype int64
    """
    n_samples = _check_count("n_samples", n_samples, minimum=3)
    noise = _check_positive("noise", noise, allow_zero=True)
    rng = _rng(random_state)
    counts = [n_samples // 3 + (k < n_samples % 3) for k in range(3)]
    parts = []
    for k, count in enumerate(counts):
        t = rng.uniform(0.0, np.pi, count)
        c, s = np.cos(t), np.sin(t)
        if k == 0:
            pts = np.column_stack([c, s])
        elif k == 1:
            pts = np.column_stack([1.0 - c, 0.5 - s])
        else:
            pts = np.column_stack([2.5 + c, 0.5 + s])
        parts.append(pts)
    X = np.concatenate(parts)
    if noise > 0:
        X = X + noise * rng.standard_normal(X.shape)
    y = np.repeat(np.arange(3, dtype=np.int64), counts)
    return X, y


def five_gaussians_covariances() -> np.ndarray:
    """Covariance matrices of :func:`five_gaussians`.

    Class 2 has the identity. The others are R(a) diag(1.0, 0.25) R(a)^T with
    a = pi/4 for classes 0, 1 and 4 and a = pi/8 for class 3. The source gives
    only the rotations; the axis variances (1.0, 0.25) are our choice.

    Returns
    -------
    ndarray of shape (5, 2, 2)
    """
    covs = np.empty((5, 2, 2))
    base = np.diag(_FIVE_AXIS_VARIANCES)
    for k, angle in enumerate(_FIVE_ANGLES):
        if angle is None:
            covs[k] = np.eye(2)
        else:
            c, s = np.cos(angle), np.sin(angle)
            rot = np.array([[c, -s], [s, c]])
            covs[k] = rot @ base @ rot.T
    return covs


def five_gaussians(
    n_per_class: int | None = None,
    random_state: RandomState = None,
    *,
    n_samples: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Five 2-D Gaussians with rotated, elongated covariances.

    Means (:data:`FIVE_GAUSSIANS_MEANS`): (2, 3), (5, 1), (1, 0), (-1, 3),
    (4.5, 3). Class 2 has identity covariance; classes 0, 1 and 4 have
    diag(1.0, 0.25) rotated by pi/4, class 3 the same rotated by pi/8 (see
    :func:`five_gaussians_covariances`; the axis variances are our choice,
    the source gives only the rotations).

    The construction is the artificial data set of Brinkrolf (2023, Sec. 4.6.1; 1500 points
    per class). Park (2022) uses a "five gaussians" set of 1000 points (800
    train / 200 test, Table 7.1) without defining it; ``n_samples=1000`` (or
    ``n_per_class=200``) gives that size with this construction.

    Parameters
    ----------
    n_per_class : int or None, default None
        Points per class (>= 1); ``None`` means 1500 unless ``n_samples`` is
        given. Give at most one of ``n_per_class`` and ``n_samples``.
    random_state : int, numpy.random.Generator or None
        Seed or generator.
    n_samples : int or None, keyword-only
        Total number of points (>= 5), split as evenly as possible: the first
        ``n_samples % 5`` classes get one point more.

    Returns
    -------
    X : ndarray of shape (n_total, 2), dtype float64
        Rows ordered by class 0..4.
    y : ndarray of shape (n_total,), dtype int64
    """
    if n_per_class is not None and n_samples is not None:
        raise ValueError(
            f"give n_per_class or n_samples, not both (got n_per_class={n_per_class}, "
            f"n_samples={n_samples})"
        )
    if n_samples is not None:
        total = _check_count("n_samples", n_samples, minimum=5)
        counts = [total // 5 + (k < total % 5) for k in range(5)]
    else:
        n = _check_count("n_per_class", 1500 if n_per_class is None else n_per_class, minimum=1)
        counts = [n] * 5
    rng = _rng(random_state)
    covs = five_gaussians_covariances()
    parts = []
    for mean, cov, count in zip(FIVE_GAUSSIANS_MEANS, covs, counts, strict=True):
        chol = np.linalg.cholesky(cov)
        parts.append(np.asarray(mean) + rng.standard_normal((count, 2)) @ chol.T)
    y = np.repeat(np.arange(5, dtype=np.int64), counts)
    return np.concatenate(parts), y


# --------------------------------------------------------------------------- class merging
#: Names of the seven classes of the UCI Statlog shuttle data (labels 1..7).
SHUTTLE_CLASS_NAMES: dict[int, str] = {
    1: "Rad Flow",
    2: "Fpv Close",
    3: "Fpv Open",
    4: "High",
    5: "Bypass",
    6: "Bpv Close",
    7: "Bpv Open",
}

#: Shuttle label (1..7) -> merged label (0..2) of :func:`load_shuttle_3class`.
#: Park (2022, Section 7.2) "divided shuttle into three classes to alleviate the
#: class imbalance" without giving the mapping. We keep the two large classes and
#: pool the rest: 0 = Rad Flow (1; 45586 rows), 1 = High (4; 8903 rows),
#: 2 = Bypass (5; 3267) with the four rare classes Fpv Close, Fpv Open,
#: Bpv Close, Bpv Open (2, 3, 6, 7; 244 rows together) -> 3511 rows.
SHUTTLE_3CLASS_MAPPING: dict[int, int] = {1: 0, 4: 1, 5: 2, 2: 2, 3: 2, 6: 2, 7: 2}


def merge_classes(y: np.ndarray, mapping: Mapping[object, int]) -> np.ndarray:
    """Relabel ``y`` through ``mapping`` (several old labels may share a new one).

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        Labels (ints or strings).
    mapping : mapping old label -> new int label
        Must cover every label that occurs in ``y``; new labels must be ints.

    Returns
    -------
    ndarray of shape (n_samples,), dtype int64

    Raises
    ------
    ValueError
        If ``y`` is not 1-D, or holds a label that ``mapping`` does not cover
        (the message lists them).
    TypeError
        If a new label is not an int.
    """
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"y must be 1-D, got shape {y.shape}")
    for old, new in mapping.items():
        if not isinstance(new, numbers.Integral) or isinstance(new, bool):
            raise TypeError(f"mapping values must be ints, got {new!r} for label {old!r}")
    classes, inverse = np.unique(y, return_inverse=True)
    keys = [c.item() for c in classes]  # numpy scalars -> Python int / float / str
    missing = [k for k in keys if k not in mapping]
    if missing:
        raise ValueError(
            f"labels {missing} occur in y but are not in the mapping (covers {list(mapping)})"
        )
    lookup = np.array([int(mapping[k]) for k in keys], dtype=np.int64)
    return lookup[inverse.reshape(-1)]


def load_shuttle_3class(
    data_dir: str | os.PathLike | None = None,
    mapping: Mapping[int, int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """UCI Statlog shuttle with its 7 classes merged to 3 (Park 2022, Section 7.2).

    Reads ``data_dir/uci/shuttle.tsv.gz`` through :func:`dp_proto.data.load_uci`
    (58000 x 9; rows 0..43499 are the original ``shuttle.trn`` file, rows
    43500.. ``shuttle.tst``) and relabels with :data:`SHUTTLE_3CLASS_MAPPING`:
    0 = Rad Flow (45586 rows), 1 = High (8903), 2 = Bypass and the four rare
    classes (3511). Park (2022) does not state its mapping; this one is ours
    (documented in ``benchmarks/svdd_protocol.py``).

    Parameters
    ----------
    data_dir : str, os.PathLike or None
        The data directory; ``None`` uses ``$DP_PROTO_DATA_DIR``.
    mapping : mapping int -> int, optional
        Another merge of the labels 1..7 (default :data:`SHUTTLE_3CLASS_MAPPING`).

    Returns
    -------
    X : ndarray of shape (58000, 9), dtype float64
        The raw (unscaled) features, in file order.
    y : ndarray of shape (58000,), dtype int64
        Merged labels.

    Raises
    ------
    FileNotFoundError
        If the shuttle file is not in the data directory.
    DataValidationError
        If the file is malformed.
    ValueError
        If the file holds a label the mapping does not cover.
    """
    X, y = load_uci("shuttle", data_dir)
    return np.asarray(X, dtype=np.float64), merge_classes(y, mapping or SHUTTLE_3CLASS_MAPPING)


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
        raise ValueError(
            f"X and y must have the same number of rows, got X shape {X.shape} and y shape "
            f"{y.shape}"
        )
    n = len(y)
    if n == 0:
        raise ValueError("cannot subsample an empty data set")
    if (fraction is None) == (n_samples is None):
        raise ValueError(
            f"give exactly one of fraction and n_samples (got fraction={fraction}, "
            f"n_samples={n_samples})"
        )
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
