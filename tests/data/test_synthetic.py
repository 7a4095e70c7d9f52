"""Tests of dp_proto.data.synthetic."""

from __future__ import annotations

import numpy as np
import pytest

from dp_proto.data import (
    FIVE_GAUSSIANS_MEANS,
    OUTLIER_MEANS,
    XOR_CENTERS,
    five_gaussians,
    five_gaussians_covariances,
    noisy_xor,
    noisy_xor_unbalanced,
    three_gaussians,
    three_gaussians_means,
    three_moons,
    two_gaussians_with_outlier,
)

GENERATORS = [
    lambda rs: two_gaussians_with_outlier("medium", random_state=rs),
    lambda rs: noisy_xor(n_per_cluster=20, random_state=rs),
    lambda rs: noisy_xor_unbalanced(n_per_cluster=20, random_state=rs),
    lambda rs: three_gaussians(n_per_class=30, n_features=4, random_state=rs),
    lambda rs: three_moons(n_samples=60, random_state=rs),
    lambda rs: five_gaussians(n_per_class=20, random_state=rs),
]
IDS = ["outlier", "xor", "xor_unbalanced", "three_gaussians", "three_moons", "five_gaussians"]


@pytest.mark.parametrize("make", GENERATORS, ids=IDS)
def test_dtypes_and_reproducibility(make):
    X, y = make(7)
    assert X.dtype == np.float64 and y.dtype == np.int64
    assert X.ndim == 2 and y.shape == (len(X),)
    assert np.all(np.isfinite(X))
    X2, y2 = make(7)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)
    X3, _ = make(8)
    assert not np.array_equal(X, X3)
    X4, _ = make(np.random.default_rng(7))
    np.testing.assert_array_equal(X, X4)  # an int seed equals default_rng(seed)
    make(None)


@pytest.mark.parametrize("make", GENERATORS, ids=IDS)
@pytest.mark.parametrize("bad", [1.5, "seed", True, np.random.RandomState(0)])
def test_bad_random_state(make, bad):
    with pytest.raises(TypeError, match="random_state"):
        make(bad)


# --------------------------------------------------------------------------- outlier
@pytest.mark.parametrize("setting", ["extreme", "medium", "weak"])
def test_two_gaussians_with_outlier(setting):
    X, y = two_gaussians_with_outlier(setting, random_state=0)
    assert X.shape == (101, 2)
    assert np.bincount(y).tolist() == [50, 51]
    assert y[-1] == 1
    assert np.linalg.norm(X[-1] - np.asarray(OUTLIER_MEANS[setting])) < 5.0
    np.testing.assert_allclose(X[:50].mean(0), [-10, 0], atol=0.6)
    np.testing.assert_allclose(X[50:100].mean(0), [10, 0], atol=0.6)
    assert np.all(y[:50] == 0) and np.all(y[50:] == 1)


def test_outlier_means_constant():
    assert OUTLIER_MEANS == {"extreme": (10, 10), "medium": (10, 5), "weak": (10, 2)}


def test_outlier_near_its_mean_statistically():
    rng = np.random.default_rng(3)
    last = np.array([two_gaussians_with_outlier("weak", 5, rng)[0][-1] for _ in range(400)])
    np.testing.assert_allclose(last.mean(0), [10, 2], atol=0.2)
    np.testing.assert_allclose(last.std(0), [1, 1], atol=0.15)


def test_two_gaussians_no_outlier():
    X, y = two_gaussians_with_outlier(None, n_per_class=40, random_state=1)
    assert X.shape == (80, 2)
    assert np.bincount(y).tolist() == [40, 40]


@pytest.mark.parametrize("kwargs", [{"setting": "huge"}, {"n_per_class": 0}, {"n_per_class": -3}])
def test_two_gaussians_bad_args(kwargs):
    with pytest.raises(ValueError):
        two_gaussians_with_outlier(**kwargs)


# --------------------------------------------------------------------------- XOR
def test_noisy_xor_labels_match_clusters():
    X, y = noisy_xor(n_per_cluster=100, random_state=0)
    assert X.shape == (400, 2)
    assert np.bincount(y).tolist() == [200, 200]
    # class 1 = same sign quadrants (top right, bottom left), class 0 = the others
    np.testing.assert_array_equal(y, (np.sign(X[:, 0]) == np.sign(X[:, 1])).astype(int))
    for center, label in XOR_CENTERS.items():
        near = np.linalg.norm(X - np.asarray(center), axis=1) < 5
        assert near.sum() == 100
        assert np.all(y[near] == label)
        np.testing.assert_allclose(X[near].mean(0), center, atol=0.3)
        np.testing.assert_allclose(X[near].std(0), [1, 1], atol=0.2)
    assert XOR_CENTERS[(-10.0, 10.0)] == 0 and XOR_CENTERS[(10.0, -10.0)] == 0
    assert XOR_CENTERS[(-10.0, -10.0)] == 1 and XOR_CENTERS[(10.0, 10.0)] == 1


def test_noisy_xor_unbalanced_extra_points():
    X, y = noisy_xor_unbalanced(n_per_cluster=50, random_state=0)
    assert X.shape == (210, 2)
    assert np.bincount(y).tolist() == [100, 110]
    bottom_left = np.linalg.norm(X - [-10, -10], axis=1) < 5
    assert bottom_left.sum() == 60
    assert np.all(bottom_left[-10:]) and np.all(y[-10:] == 1)
    X2, y2 = noisy_xor(50, extra_bottom_left=10, random_state=0)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)


def test_noisy_xor_std():
    X, _ = noisy_xor(200, std=0.1, random_state=0)
    np.testing.assert_allclose(np.abs(X).std(0), [0.1, 0.1], atol=0.02)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n_per_cluster": 0},
        {"extra_bottom_left": -1},
        {"std": 0.0},
        {"std": -1.0},
        {"std": float("nan")},
    ],
)
def test_noisy_xor_bad_args(kwargs):
    with pytest.raises(ValueError):
        noisy_xor(**kwargs)


# --------------------------------------------------------------------------- three Gaussians
def test_three_gaussians_2d():
    X, y = three_gaussians(n_per_class=2000, random_state=0)
    assert X.shape == (6000, 2)
    assert np.bincount(y).tolist() == [2000] * 3
    expected = np.array([[5, 0], [-5, 0], [0, 5]])
    np.testing.assert_array_equal(three_gaussians_means(2), expected)
    for k in range(3):
        np.testing.assert_allclose(X[y == k].mean(0), expected[k], atol=0.08)
        np.testing.assert_allclose(np.cov(X[y == k].T), np.eye(2), atol=0.1)


def test_three_gaussians_8d():
    X, y = three_gaussians(n_per_class=2000, n_features=8, random_state=0)
    assert X.shape == (6000, 8)
    expected = 5.0 * np.eye(8)[:3]
    np.testing.assert_array_equal(three_gaussians_means(8), expected)
    for k in range(3):
        np.testing.assert_allclose(X[y == k].mean(0), expected[k], atol=0.08)


def test_three_gaussians_3d_and_scale():
    np.testing.assert_array_equal(three_gaussians_means(3, scale=2.0), 2.0 * np.eye(3))
    X, y = three_gaussians(n_per_class=10, n_features=3, scale=0.0, random_state=0)
    assert X.shape == (30, 3)


@pytest.mark.parametrize("kwargs", [{"n_features": 1}, {"n_per_class": 0}, {"scale": -1.0}])
def test_three_gaussians_bad_args(kwargs):
    with pytest.raises(ValueError):
        three_gaussians(**kwargs)


# --------------------------------------------------------------------------- three moons
@pytest.mark.parametrize("n", [3, 400, 401, 402])
def test_three_moons_balance(n):
    X, y = three_moons(n_samples=n, random_state=0)
    assert X.shape == (n, 2)
    counts = np.bincount(y, minlength=3)
    assert counts.sum() == n and counts.max() - counts.min() <= 1


def test_three_moons_noiseless_on_arcs():
    X, y = three_moons(n_samples=300, noise=0.0, random_state=0)
    centres = {0: (0.0, 0.0), 1: (1.0, 0.5), 2: (2.5, 0.5)}
    for k, c in centres.items():
        pts = X[y == k] - np.asarray(c)
        np.testing.assert_allclose(np.linalg.norm(pts, axis=1), 1.0)
        if k == 1:
            assert np.all(pts[:, 1] <= 1e-12)  # lower half circle
        else:
            assert np.all(pts[:, 1] >= -1e-12)  # upper half circles
    # the moons are disjoint: min gap between classes is 0.5
    for a in range(3):
        for b in range(a + 1, 3):
            d = np.linalg.norm(X[y == a][:, None] - X[y == b][None], axis=2)
            assert d.min() > 0.45


def test_three_moons_classes_are_learnable():
    from sklearn.neighbors import KNeighborsClassifier

    X, y = three_moons(n_samples=600, noise=0.1, random_state=0)
    Xt, yt = three_moons(n_samples=600, noise=0.1, random_state=1)
    assert KNeighborsClassifier(5).fit(X, y).score(Xt, yt) > 0.97


@pytest.mark.parametrize("kwargs", [{"n_samples": 2}, {"noise": -0.1}])
def test_three_moons_bad_args(kwargs):
    with pytest.raises(ValueError):
        three_moons(**kwargs)


# --------------------------------------------------------------------------- five Gaussians
def test_five_gaussians():
    X, y = five_gaussians(n_per_class=3000, random_state=0)
    assert X.shape == (15000, 2)
    assert np.bincount(y).tolist() == [3000] * 5
    covs = five_gaussians_covariances()
    np.testing.assert_allclose(covs[2], np.eye(2))
    for k, angle in [(0, np.pi / 4), (1, np.pi / 4), (4, np.pi / 4), (3, np.pi / 8)]:
        evals, evecs = np.linalg.eigh(covs[k])
        np.testing.assert_allclose(evals, [0.25, 1.0])
        major = evecs[:, 1] * np.sign(evecs[0, 1])
        np.testing.assert_allclose(major, [np.cos(angle), np.sin(angle)], atol=1e-12)
    for k in range(5):
        np.testing.assert_allclose(X[y == k].mean(0), FIVE_GAUSSIANS_MEANS[k], atol=0.06)
        np.testing.assert_allclose(np.cov(X[y == k].T), covs[k], atol=0.08)
    assert FIVE_GAUSSIANS_MEANS == ((2, 3), (5, 1), (1, 0), (-1, 3), (4.5, 3))


def test_five_gaussians_bad_args():
    with pytest.raises(ValueError):
        five_gaussians(n_per_class=-1)
    with pytest.raises(TypeError):
        five_gaussians(n_per_class=2.5)


def test_feature_relevance_set_plants_its_kinds():
    from sklearn.linear_model import LogisticRegression

    from dp_proto.data import FEATURE_KINDS, feature_relevance_set

    X, y, kinds = feature_relevance_set(600, random_state=0)
    assert X.shape == (600, 50) and y.shape == (600,) and set(np.unique(y)) == {0, 1}
    assert [int((kinds == k).sum()) for k in FEATURE_KINDS] == [3, 10, 37]
    assert 0.35 < y.mean() < 0.65  # about balanced
    strong, redundant = X[:, kinds == "strong"], X[:, kinds == "redundant"]
    # redundant columns are exact linear combinations of the strong ones
    coef, *_ = np.linalg.lstsq(strong, redundant, rcond=None)
    np.testing.assert_allclose(strong @ coef, redundant, atol=1e-10)
    np.testing.assert_allclose(X[:, kinds != "strong"].std(0), 1.0, atol=0.15)
    # separable on the strong features alone; nothing to learn from the irrelevant ones
    assert LogisticRegression(C=1e4, max_iter=2000).fit(strong, y).score(strong, y) > 0.99
    assert (
        LogisticRegression()
        .fit(X[:, kinds == "irrelevant"][:300], y[:300])
        .score(X[:, kinds == "irrelevant"][300:], y[300:])
        < 0.65
    )
    again, _, _ = feature_relevance_set(600, random_state=0)
    np.testing.assert_array_equal(again, X)
    with pytest.raises(ValueError, match="n_strong must be an integer >= 1"):
        feature_relevance_set(n_strong=0)
    with pytest.raises(ValueError, match="n_samples must be"):
        feature_relevance_set(1)
