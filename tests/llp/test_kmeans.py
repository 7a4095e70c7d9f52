"""k-means: agreement with scikit-learn, degenerate data, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans

from dp_proto.exceptions import DataValidationError
from dp_proto.llp import kmeans, predict


def _blobs(seed: int, n_per: int = 60, k: int = 5, d: int = 3, spread: float = 1.5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-8, 8, (k, d))
    return np.concatenate([rng.normal(c, spread, (n_per, d)) for c in centres])


@pytest.mark.parametrize("seed", range(3))
def test_inertia_matches_scikit_learn(seed):
    for x, k in ((_blobs(seed), 5), (np.random.default_rng(seed).uniform(size=(400, 2)), 8)):
        ours = kmeans(torch.tensor(x), k, n_init=3, generator=torch.Generator().manual_seed(seed))
        ref = KMeans(k, n_init=3, random_state=seed, tol=1e-6).fit(x)
        # both are local optima of k-means++ restarts: ours may be better, not worse by > 5%
        assert 0.85 * ref.inertia_ <= ours.inertia <= 1.05 * ref.inertia_
        # the result is a Lloyd fixed point: labels are the nearest centres, inertia their sum
        assert torch.equal(ours.labels, predict(ours.centres, torch.tensor(x)))
        direct = ((torch.tensor(x) - ours.centres[ours.labels]) ** 2).sum()
        assert ours.inertia == pytest.approx(float(direct))


def test_more_restarts_never_hurt_and_reproducible():
    x = torch.tensor(_blobs(5, k=8, spread=3.0))
    one = kmeans(x, 8, n_init=1, generator=torch.Generator().manual_seed(0))
    again = kmeans(x, 8, n_init=1, generator=torch.Generator().manual_seed(0))
    assert torch.equal(one.centres, again.centres)
    many = kmeans(x, 8, n_init=6, generator=torch.Generator().manual_seed(0))
    assert many.inertia <= one.inertia * (1 + 1e-12)  # the first restart is the same draw


def test_fewer_distinct_points_than_clusters():
    x = torch.tensor([[0.0, 0.0], [1.0, 1.0], [5.0, 5.0]]).repeat(10, 1)
    res = kmeans(x, 5, n_init=2, generator=torch.Generator().manual_seed(0))
    assert res.inertia == pytest.approx(0.0, abs=1e-9)
    assert res.centres.shape == (5, 2) and torch.isfinite(res.centres).all()


def test_kmeans_errors():
    with pytest.raises(ValueError, match="at least k=4"):
        kmeans(torch.zeros(3, 2), 4)
    with pytest.raises(DataValidationError, match="NaN"):
        kmeans(torch.tensor([[0.0, math.nan], [1.0, 1.0]]), 1)
    with pytest.raises(ValueError, match="shape"):
        kmeans(torch.zeros(5), 2)
    with pytest.raises(ValueError, match="n_init"):
        kmeans(torch.zeros(5, 2), 2, n_init=0)
    with pytest.raises(ValueError, match="features"):
        predict(torch.zeros(2, 3), torch.zeros(4, 2))


def test_mean_inertia_ratio_to_scikit_learn_is_one():
    ratios = []
    for seed in range(10):
        x = np.random.default_rng(100 + seed).uniform(size=(300, 2))
        ours = kmeans(torch.tensor(x), 8, n_init=3, generator=torch.Generator().manual_seed(seed))
        ratios.append(ours.inertia / KMeans(8, n_init=3, random_state=seed, tol=1e-6).fit(x).inertia_)
    assert np.mean(ratios) == pytest.approx(1.0, abs=0.02)
