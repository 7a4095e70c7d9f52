"""Synthetic 2-D (and d-D) data sets used in the experiments of the implemented papers.

The sets come from Brinkrolf, Göpfert & Hammer (2019), Brinkrolf (2023) and Park (2022)
(see ``REFERENCES.md``).

Every generator takes ``random_state`` (an int seed, a
``numpy.random.Generator``, or ``None`` for fresh entropy) and returns
``(X, y)`` with ``X`` float64 of shape (n_samples, n_features) and ``y`` int64
of shape (n_samples,). Rows are ordered by component (not shuffled); the order
is documented per generator.

The shuttle helpers of Park (2022) are in ``dp_proto.data.loaders.uci`` and the
stratified subsampler in ``dp_proto.data.sampling``.
"""

from __future__ import annotations

import numpy as np

from dp_proto._validation import check_nonnegative, check_positive
from dp_proto.data._checks import RandomState, _check_count, _rng

__all__ = [
    "OUTLIER_MEANS",
    "XOR_CENTERS",
    "FIVE_GAUSSIANS_MEANS",
    "two_gaussians_with_outlier",
    "noisy_xor",
    "noisy_xor_unbalanced",
    "three_gaussians_means",
    "three_gaussians",
    "three_moons",
    "five_gaussians_covariances",
    "five_gaussians",
]


#: Mean of the single class-1 outlier of ``two_gaussians_with_outlier``.
OUTLIER_MEANS: dict[str, tuple[float, float]] = {
    "extreme": (10.0, 10.0),
    "medium": (10.0, 5.0),
    "weak": (10.0, 2.0),
}


#: Cluster centres of ``noisy_xor`` -> class label (XOR of the signs).
XOR_CENTERS: dict[tuple[float, float], int] = {
    (10.0, 10.0): 1,  # top right
    (-10.0, 10.0): 0,  # top left
    (10.0, -10.0): 0,  # bottom right
    (-10.0, -10.0): 1,  # bottom left
}


#: Means of the five classes of ``five_gaussians``.
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


def two_gaussians_with_outlier(
    setting: str | None = "extreme",
    n_per_class: int = 50,
    random_state: RandomState = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Two unit-variance Gaussians plus (optionally) one class-1 outlier.

    Class 0 ~ N((-10, 0), I), class 1 ~ N((10, 0), I). If ``setting`` is not
    ``None``, one extra class-1 point ~ N(mu_out, I) is appended, with
    mu_out = (10, 10) for ``"extreme"``, (10, 5) for ``"medium"`` and (10, 2)
    for ``"weak"`` (see ``OUTLIER_MEANS``).

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
        raise ValueError(f"unknown outlier setting {setting!r}; valid: {', '.join(OUTLIER_MEANS)} or None")
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
    bottom-left (-10, -10) and top-right (10, 10) (see ``XOR_CENTERS``).

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
    std = check_positive("std", std)
    rng = _rng(random_state)
    counts = [n, n, n, n + extra]  # XOR_CENTERS order ends with bottom-left
    parts = [
        np.asarray(center) + std * rng.standard_normal((count, 2))
        for center, count in zip(XOR_CENTERS, counts, strict=True)
    ]
    labels = [np.full(count, label, dtype=np.int64) for label, count in zip(XOR_CENTERS.values(), counts, strict=True)]
    return np.concatenate(parts), np.concatenate(labels)


def noisy_xor_unbalanced(
    n_per_cluster: int = 300,
    std: float = 1.0,
    random_state: RandomState = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The unbalanced noisy XOR of Brinkrolf, Göpfert & Hammer (2019).

    ``noisy_xor`` with ``extra_bottom_left=10``.

    Returns
    -------
    X : ndarray of shape (4 * n_per_cluster + 10, 2), dtype float64
    y : ndarray of shape (4 * n_per_cluster + 10,), dtype int64
    """
    return noisy_xor(n_per_cluster, extra_bottom_left=10, std=std, random_state=random_state)


def three_gaussians_means(n_features: int = 2, scale: float = 5.0) -> np.ndarray:
    """Class means of ``three_gaussians``.

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

    Means (see ``three_gaussians_means``): in 2-D (5, 0), (-5, 0), (0, 5);
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
    scale = check_nonnegative("scale", scale)
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
    noise = check_nonnegative("noise", noise)
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
    """Covariance matrices of ``five_gaussians``.

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

    Means (``FIVE_GAUSSIANS_MEANS``): (2, 3), (5, 1), (1, 0), (-1, 3),
    (4.5, 3). Class 2 has identity covariance; classes 0, 1 and 4 have
    diag(1.0, 0.25) rotated by pi/4, class 3 the same rotated by pi/8 (see
    ``five_gaussians_covariances``; the axis variances are our choice,
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
            f"give n_per_class or n_samples, not both (got n_per_class={n_per_class}, n_samples={n_samples})"
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
