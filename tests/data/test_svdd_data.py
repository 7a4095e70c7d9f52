"""Data of the SVDD / equilibrium-point experiments (Park 2022) and benchmarks/svdd/protocol.py."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

from dp_proto.data import (
    SHUTTLE_3CLASS_MAPPING,
    five_gaussians,
    load_shuttle_3class,
    load_uci,
    merge_classes,
    stratified_subsample,
    three_moons,
)


@pytest.fixture(scope="module")
def protocol():
    """benchmarks/svdd/protocol.py imported as a module (benchmarks/ is not a package)."""
    return importlib.import_module("benchmarks.svdd.protocol")


# --------------------------------------------------------------------------- synthetic sets
def test_three_moons_table_7_1_size_and_determinism():
    X, y = three_moons(n_samples=400, random_state=7)
    assert X.shape == (400, 2) and X.dtype == np.float64 and y.dtype == np.int64
    assert np.bincount(y).tolist() == [134, 133, 133]
    X2, y2 = three_moons(n_samples=400, random_state=7)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)
    assert not np.array_equal(X, three_moons(n_samples=400, random_state=8)[0])


@pytest.mark.parametrize("n, counts", [(1000, [200] * 5), (1003, [201, 201, 201, 200, 200]), (5, [1] * 5)])
def test_five_gaussians_n_samples(n, counts):
    X, y = five_gaussians(n_samples=n, random_state=0)
    assert X.shape == (n, 2) and X.dtype == np.float64 and y.dtype == np.int64
    assert np.bincount(y, minlength=5).tolist() == counts
    assert np.all(np.diff(y) >= 0)  # rows ordered by class


def test_five_gaussians_n_samples_equals_n_per_class_when_divisible():
    Xa, ya = five_gaussians(n_samples=1000, random_state=3)
    Xb, yb = five_gaussians(n_per_class=200, random_state=3)
    np.testing.assert_array_equal(Xa, Xb)
    np.testing.assert_array_equal(ya, yb)
    assert five_gaussians(random_state=0)[0].shape == (7500, 2)  # old default kept
    np.testing.assert_array_equal(five_gaussians(random_state=1)[0], five_gaussians(1500, 1)[0])


@pytest.mark.parametrize(
    "kwargs, exc",
    [
        ({"n_samples": 1000, "n_per_class": 200}, ValueError),
        ({"n_samples": 4}, ValueError),
        ({"n_samples": 10.0}, TypeError),
        ({"n_per_class": 0}, ValueError),
    ],
)
def test_five_gaussians_bad_args(kwargs, exc):
    with pytest.raises(exc):
        five_gaussians(**kwargs)


# --------------------------------------------------------------------------- merge_classes
def test_merge_classes_shuttle_mapping():
    y = np.array([1, 2, 3, 4, 5, 6, 7, 1, 4])
    out = merge_classes(y, SHUTTLE_3CLASS_MAPPING)
    assert out.dtype == np.int64
    assert out.tolist() == [0, 2, 2, 1, 2, 2, 2, 0, 1]
    assert sorted(set(SHUTTLE_3CLASS_MAPPING)) == list(range(1, 8))
    assert sorted(set(SHUTTLE_3CLASS_MAPPING.values())) == [0, 1, 2]


def test_merge_classes_strings_and_errors():
    assert merge_classes(np.array(["a", "b", "a"]), {"a": 1, "b": 0}).tolist() == [1, 0, 1]
    with pytest.raises(ValueError, match=r"\[3\]"):
        merge_classes(np.array([1, 2, 3]), {1: 0, 2: 1})
    with pytest.raises(TypeError):
        merge_classes(np.array([1]), {1: "x"})
    with pytest.raises(ValueError, match="1-D"):
        merge_classes(np.zeros((2, 2)), {0: 0})


# --------------------------------------------------------------------------- subsampling
def _imbalanced(n0=700, n1=250, n2=50):
    y = np.repeat(np.arange(3), [n0, n1, n2])
    X = np.arange(len(y) * 2, dtype=np.float64).reshape(-1, 2)
    return X, y


@pytest.mark.parametrize(
    "fraction, expected", [(0.1, [70, 25, 5]), (0.3, [210, 75, 15]), (0.123, [86, 31, 6]), (1.0, [700, 250, 50])]
)
def test_stratified_subsample_keeps_proportions(fraction, expected):
    X, y = _imbalanced()
    Xs, ys, idx = stratified_subsample(X, y, fraction, random_state=0, return_indices=True)
    assert len(ys) == round(fraction * len(y))
    assert np.bincount(ys, minlength=3).tolist() == expected
    assert np.all(np.diff(idx) > 0)  # sorted, no repeats: original order kept
    np.testing.assert_array_equal(Xs, X[idx])
    np.testing.assert_array_equal(ys, y[idx])


def test_stratified_subsample_determinism_and_n_samples():
    X, y = _imbalanced()
    a = stratified_subsample(X, y, 0.2, random_state=5)
    b = stratified_subsample(X, y, 0.2, random_state=5)
    c = stratified_subsample(X, y, 0.2, random_state=6)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], c[0])
    Xs, ys = stratified_subsample(X, y, n_samples=7, random_state=0)
    assert len(ys) == 7 and np.bincount(ys, minlength=3).tolist() == [5, 2, 0]
    gen = np.random.default_rng(0)
    assert len(stratified_subsample(X, y, 0.5, random_state=gen)[1]) == 500


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"fraction": 0.1, "n_samples": 3},
        {"fraction": 0.0},
        {"fraction": 1.5},
        {"fraction": float("nan")},
        {"n_samples": 0},
        {"n_samples": 1001},
        {"fraction": 1e-5},
    ],
)
def test_stratified_subsample_bad_args(kwargs):
    X, y = _imbalanced()
    with pytest.raises(ValueError):
        stratified_subsample(X, y, **kwargs)


def test_stratified_subsample_shape_mismatch():
    with pytest.raises(ValueError, match="same number of rows"):
        stratified_subsample(np.zeros((3, 2)), np.zeros(4), 0.5)


# --------------------------------------------------------------------------- shuttle (real data)
@pytest.mark.data
def test_shuttle_3class(real_data_dir):
    X, y = load_shuttle_3class(real_data_dir)
    assert X.shape == (58000, 9) and X.dtype == np.float64 and y.dtype == np.int64
    assert np.bincount(y).tolist() == [45586, 8903, 3511]
    X7, y7 = load_uci("shuttle", real_data_dir)
    np.testing.assert_array_equal(X, X7)
    for old, new in SHUTTLE_3CLASS_MAPPING.items():
        assert np.all(y[y7 == old] == new)
    # rows 0..43499 are the original shuttle.trn file (its class counts)
    assert np.bincount(y7[:43500]).tolist()[1:] == [34108, 37, 132, 6748, 2458, 6, 11]


@pytest.mark.data
@pytest.mark.parametrize("fraction, counts", [(0.1, [4559, 890, 351]), (0.3, [13676, 2671, 1053])])
def test_shuttle_table_7_3_subsamples(real_data_dir, fraction, counts):
    X, y = load_shuttle_3class(real_data_dir)
    Xs, ys = stratified_subsample(X, y, fraction, random_state=0)
    assert Xs.shape == (round(fraction * 58000), 9)
    assert np.bincount(ys).tolist() == counts


# --------------------------------------------------------------------------- protocol module
def test_protocol_table_7_3_targets(protocol):
    t = protocol.TABLE_7_3
    assert set(t) == {0.1, 0.3}
    assert [t[0.1]["Proposed"][e] for e in (0.01, 0.1, 1.0, 5.0)] == [0.456, 0.644, 0.908, 0.983]
    assert [t[0.3]["Proposed"][e] for e in (0.01, 0.1, 1.0, 5.0)] == [0.635, 0.786, 0.958, 0.981]
    assert t[0.1]["Proposed"][math.inf] == 0.987 and t[0.3]["Proposed"][math.inf] == 0.986
    for ratio in t.values():
        assert set(ratio) == set(protocol.METHODS)
        for accs in ratio.values():
            assert set(accs) == {*protocol.EPSILONS_TABLE_7_3, math.inf}
            assert all(0 < a < 1 for a in accs.values())


def test_protocol_table_7_1_and_7_2(protocol):
    t = protocol.TABLE_7_1
    assert list(t) == ["three_moons", "five_gaussians", "iris", "wine", "vowel", "satimage", "segment", "shuttle"]
    for row in t.values():
        assert row.n_test == math.ceil(round(0.2 * row.n_total, 9))  # the 80/20 split
    assert (t["iris"].dims, t["iris"].classes) == (4, 3)
    assert (t["wine"].dims, t["wine"].classes) == (13, 3)
    assert t["shuttle"].proposed == protocol.ProposedSetting(0.01, 1, 0.001, 20, 0.5)
    assert t["three_moons"].proposed.r_max is None
    assert set(protocol.TABLE_7_2) == {"SVM WEIGHT", "SVM SEMI", "Proposed"}
    for times in protocol.TABLE_7_2.values():
        assert set(times) == set(t)
    assert protocol.EPSILONS == (0.01, 0.1, 1.0, 5.0, 10.0, 100.0)
    assert protocol.N_RUNS == 5 and protocol.N_RANDOM_FEATURES == 400
    for item in protocol.UNSPECIFIED.values():
        assert item.proposal and all(1 <= line <= 638 for line in item.lines)


def test_protocol_helpers(protocol):
    steps = protocol.lr_schedule(0.001, 20)
    assert steps.shape == (20,)
    np.testing.assert_allclose(steps[:16], 0.001)
    np.testing.assert_allclose(steps[16:], 0.0002)
    assert len(protocol.lr_schedule(0.1, 30)) == 30
    assert protocol.svdd_laplace_scale(0.05, 1.0) == pytest.approx(2.0)
    assert protocol.svdd_laplace_scale(0.01, 0.1) == pytest.approx(4.0)
    assert protocol.svdd_laplace_scale(0.05, math.inf) == 0.0
    with pytest.raises(ValueError):
        protocol.svdd_laplace_scale(0.05, 1.0, n_features=401)
    y = np.repeat(np.arange(3), [50, 30, 20])
    tr, te = protocol.split_indices(y, run=0)
    assert len(te) == 20 and len(tr) == 80
    assert np.bincount(y[te]).tolist() == [10, 6, 4]
    assert sorted(np.concatenate([tr, te]).tolist()) == list(range(100))
    assert not np.array_equal(te, protocol.split_indices(y, run=1)[1])
    summary = protocol.summary()
    assert summary["table_7_3"]["0.1"]["Proposed"]["non-private"] == 0.987


@pytest.mark.parametrize("name", ["three_moons", "five_gaussians"])
def test_protocol_synthetic_sets(protocol, name):
    row = protocol.TABLE_7_1[name]
    X, y = protocol.load_dataset(name, random_state=0)
    assert X.shape == (row.n_total, row.dims) and len(np.unique(y)) == row.classes
    tr, te = protocol.split_indices(y, run=0)
    assert (len(tr), len(te)) == (row.n_train, row.n_test)


@pytest.mark.data
@pytest.mark.parametrize("name", ["iris", "wine", "vowel", "satimage", "segment", "shuttle"])
def test_protocol_uci_sets_match_table_7_1(protocol, real_data_dir, name):
    row = protocol.TABLE_7_1[name]
    X, y = protocol.load_dataset(name, real_data_dir, random_state=0)
    assert X.shape == (row.n_total, row.dims) and X.dtype == np.float64
    assert np.unique(y).tolist() == list(range(row.classes))
    tr, te = protocol.split_indices(y, run=0)
    assert (len(tr), len(te)) == (row.n_train, row.n_test)
