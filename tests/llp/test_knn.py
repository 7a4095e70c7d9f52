"""Brute-force kNN: agreement with scikit-learn, tie rules, chunking, devices, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.neighbors import KNeighborsClassifier

from dp_proto.exceptions import DataValidationError
from dp_proto.llp import knn_neighbours, knn_predict


def _problem(seed: int, n: int = 400, m: int = 150, d: int = 4, classes: int = 3):
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 2, (classes, d))
    y = rng.integers(0, classes, n)
    x = centres[y] + rng.normal(size=(n, d))
    yt = rng.integers(0, classes, m)
    xt = centres[yt] + rng.normal(size=(m, d))
    return x, y, xt


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("k", [1, 5, 16])
def test_neighbours_match_scikit_learn(seed, k):
    x, y, xt = _problem(seed)
    ref = KNeighborsClassifier(k, algorithm="brute").fit(x, y)
    dist, idx = ref.kneighbors(xt)
    ours_idx, ours_d2 = knn_neighbours(x, xt, k, chunk=37)
    assert np.array_equal(ours_idx.numpy(), idx)  # continuous data: no equal distances
    np.testing.assert_allclose(ours_d2.numpy(), dist**2, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("k", [5, 16])
def test_predictions_match_scikit_learn_where_the_vote_has_one_winner(seed, k):
    x, y, xt = _problem(seed)
    ref = KNeighborsClassifier(k, algorithm="brute").fit(x, y)
    _, idx = ref.kneighbors(xt)
    votes = np.stack([np.bincount(row, minlength=3) for row in y[idx]])
    single = (votes == votes.max(1, keepdims=True)).sum(1) == 1
    ours = knn_predict(x, y, xt, k=k, num_classes=3).numpy()
    assert single.sum() > 100
    assert np.array_equal(ours[single], ref.predict(xt)[single])
    # the proportion of winners agrees everywhere: a tied vote goes to a tied class
    assert np.all(votes[np.arange(len(ours)), ours] == votes.max(1))


def test_two_classes_odd_k_equal_scikit_learn_everywhere():
    x, y, xt = _problem(7, classes=2)
    ref = KNeighborsClassifier(15, algorithm="brute").fit(x, y).predict(xt)
    assert np.array_equal(knn_predict(x, y, xt, k=15).numpy(), ref)


def test_tied_vote_goes_to_the_nearest_neighbours_class():
    # neighbours of 0: class 2 at 0.1, class 0 at 0.2, class 0 at 0.3, class 2 at 0.4 -> 2 : 2
    x = np.array([[0.1], [0.2], [0.3], [0.4], [5.0]])
    y = np.array([2, 0, 0, 2, 1])
    assert knn_predict(x, y, np.array([[0.0]]), k=4).tolist() == [2]
    # scikit-learn resolves the same tie to the smallest label
    assert KNeighborsClassifier(4, algorithm="brute").fit(x, y).predict([[0.0]]).tolist() == [0]
    # from the other side the nearest is class 2 again (0.4), and at 0.25 class 0
    assert knn_predict(x, y, np.array([[0.25]]), k=4).tolist() == [0]


def test_equal_distances_go_to_the_lower_training_index():
    x = np.zeros((10, 2))
    x[5:] = 1.0  # ten points, two locations
    idx, d2 = knn_neighbours(x, np.array([[0.0, 0.0], [1.0, 1.0], [0.5, 0.5]]), 3)
    assert idx.tolist() == [[0, 1, 2], [5, 6, 7], [0, 1, 2]]
    assert d2[0].tolist() == [0.0, 0.0, 0.0]
    # partly equal: order by distance, then index
    x = np.array([[2.0], [1.0], [1.0], [0.0], [1.0], [3.0]])
    idx, _ = knn_neighbours(x, np.array([[0.0]]), 3)
    assert idx.tolist() == [[3, 1, 2]]


@pytest.mark.parametrize("chunk", [1, 7, 64, None])
def test_integer_features_with_many_ties_do_not_depend_on_the_chunk(chunk):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 4, (300, 2))
    y = rng.integers(0, 4, 300)
    xt = rng.integers(0, 4, (80, 2))
    ref_idx, _ = knn_neighbours(x, xt, 16, chunk=80)
    idx, d2 = knn_neighbours(x, xt, 16, chunk=chunk)
    assert torch.equal(idx, ref_idx)
    assert d2.dtype == torch.float64
    # the selected set is the k smallest (distance, index) pairs
    full = ((xt[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    order = np.lexsort((np.broadcast_to(np.arange(300), full.shape), full), axis=1)[:, :16]
    assert np.array_equal(idx.numpy(), order)
    assert torch.equal(knn_predict(x, y, xt, 16, chunk=chunk), knn_predict(x, y, xt, 16, chunk=80))


def test_tensor_inputs_and_dtypes():
    x, y, xt = _problem(1)
    a = knn_predict(torch.tensor(x, dtype=torch.float32), torch.tensor(y), torch.tensor(xt, dtype=torch.float32))
    b = knn_predict(x, y, xt)
    assert a.dtype == torch.int64 and a.shape == (len(xt),)
    assert (a == b).float().mean() > 0.97  # float32 rounding may swap near-equal neighbours
    assert knn_predict(x, y, xt[:0]).shape == (0,)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 50, (3000, 5)).astype(np.float64)
    y = rng.integers(0, 6, 3000)
    xt = rng.integers(0, 50, (500, 5)).astype(np.float64)
    cpu = knn_predict(x, y, xt, 16, 6)
    gpu = knn_predict(x, y, xt, 16, 6, device="cuda", chunk=100)
    assert gpu.device.type == "cuda"
    assert torch.equal(gpu.cpu(), cpu)


def test_errors():
    x, y, xt = _problem(0, n=20, m=5)
    with pytest.raises(ValueError, match="k must be"):
        knn_predict(x, y, xt, k=21)
    with pytest.raises(ValueError, match="k must be"):
        knn_predict(x, y, xt, k=0)
    with pytest.raises(ValueError, match="features"):
        knn_predict(x, y, xt[:, :2])
    with pytest.raises(ValueError, match="outside"):
        knn_predict(x, y, xt, num_classes=2)
    with pytest.raises(ValueError, match="shape"):
        knn_predict(x, y[:-1], xt)
    with pytest.raises(ValueError, match="integers"):
        knn_predict(x, y.astype(float), xt)
    with pytest.raises(ValueError, match="chunk"):
        knn_neighbours(x, xt, 3, chunk=0)
    bad = xt.copy()
    bad[1, 0] = np.nan
    with pytest.raises(DataValidationError):
        knn_predict(x, y, bad)
