"""GroupNormalizer: torch's group_norm numbers, per-record independence (no privacy cost),
errors, the scikit-learn API, and its place in a (DP) pipeline."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline

from dp_proto.exceptions import DataValidationError, PrivacyLeakWarning
from dp_proto.features import GroupNormalizer
from dp_proto.lvq.private import DPGLVQ
from dp_proto.privacy import DPPipeline


def _features(n: int = 12, channels: int = 6, positions: int = 5, seed: int = 0) -> np.ndarray:
    """``(n, channels * positions)`` with channel-dependent scales and offsets."""
    rng = np.random.default_rng(seed)
    scale = rng.uniform(0.1, 10.0, (1, channels, 1))
    offset = rng.normal(0.0, 5.0, (1, channels, 1))
    return (rng.normal(size=(n, channels, positions)) * scale + offset).reshape(n, -1)


@pytest.mark.parametrize("groups", [1, 2, 3, 6])
def test_matches_torch_group_norm(groups: int) -> None:
    X = _features()
    expected = torch.nn.functional.group_norm(torch.as_tensor(X).reshape(len(X), 6, 5), groups, eps=1e-5)
    out = GroupNormalizer(channels=6, groups=groups).fit_transform(X)
    np.testing.assert_allclose(out, expected.reshape(len(X), -1).numpy(), rtol=1e-10, atol=1e-12)


def test_groups_are_standardised_over_channels_and_positions() -> None:
    X = _features(channels=6, positions=4)
    out = GroupNormalizer(channels=6, groups=3, eps=1e-12).fit_transform(X).reshape(len(X), 3, 8)
    np.testing.assert_allclose(out.mean(axis=2), 0.0, atol=1e-12)
    np.testing.assert_allclose(out.var(axis=2), 1.0, atol=1e-9)


def test_float32_stays_float32_and_matches_float64() -> None:
    X = _features()
    out32 = GroupNormalizer(6, 2).fit_transform(X.astype(np.float32))
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32, GroupNormalizer(6, 2).fit_transform(X), rtol=1e-5, atol=1e-5)


def test_constant_group_maps_to_zeros() -> None:
    X = np.ones((3, 12))
    np.testing.assert_array_equal(GroupNormalizer(4, 2).fit_transform(X), 0.0)


def test_a_record_does_not_depend_on_the_others() -> None:
    """The neighbour check: removing (or adding) a record leaves every other output unchanged,
    whatever the data set it was fitted on."""
    X = _features(n=30)
    full = GroupNormalizer(6, 3).fit(X)
    out = full.transform(X)
    for removed in (0, 7, 29):
        rest = np.delete(X, removed, axis=0)
        neighbour = GroupNormalizer(6, 3).fit(rest)
        np.testing.assert_array_equal(neighbour.transform(rest), np.delete(out, removed, axis=0))
    # a record far outside the others changes nothing either
    extreme = np.vstack([X, np.full((1, 30), 1e6)])
    np.testing.assert_array_equal(GroupNormalizer(6, 3).fit(extreme).transform(X), out)
    # and one record alone gets the numbers it gets in a batch
    np.testing.assert_array_equal(full.transform(X[4:5]), out[4:5])


def test_rows_beyond_one_chunk_are_normalised_alike() -> None:
    X = _features(n=2500)
    out = GroupNormalizer(6, 3).fit_transform(X)
    np.testing.assert_array_equal(out[2100:2101], GroupNormalizer(6, 3).fit_transform(X[2100:2101]))


@pytest.mark.parametrize(
    ("params", "match"),
    [
        (dict(channels=7, groups=7), "does not divide the number of features 30"),
        (dict(channels=6, groups=4), "groups=4 does not divide channels=6"),
        (dict(channels=0, groups=1), "channels must be an int >= 1"),
        (dict(channels=6, groups=2.0), "groups must be an int >= 1"),
        (dict(channels=6, groups=2, eps=0.0), "eps must be a number > 0"),
    ],
)
def test_bad_settings_are_refused(params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        GroupNormalizer(**params).fit(_features())


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_are_refused(bad: float) -> None:
    X = _features()
    norm = GroupNormalizer(6, 3).fit(X)
    X[3, 4] = bad
    with pytest.raises(DataValidationError, match=r"NaN or inf in 1 row\(s\) \(first: \[3\]\)"):
        norm.transform(X)
    with pytest.raises(DataValidationError, match="NaN or inf"):
        GroupNormalizer(6, 3).fit(X)


def test_transform_checks_the_width_seen_in_fit() -> None:
    norm = GroupNormalizer(6, 3).fit(_features())
    with pytest.raises(ValueError, match="features"):
        norm.transform(_features(positions=4))


def test_transform_before_fit_raises() -> None:
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        GroupNormalizer(6, 3).transform(_features())


def test_clone_and_get_params() -> None:
    norm = GroupNormalizer(channels=81, groups=27, eps=1e-3)
    assert norm.get_params() == {"channels": 81, "groups": 27, "eps": 1e-3}
    copy = clone(norm)
    assert copy is not norm and copy.get_params() == norm.get_params()
    assert clone(norm.set_params(groups=9)).groups == 9


def test_in_a_sklearn_pipeline() -> None:
    rng = np.random.default_rng(1)
    X = _features(n=200, seed=1)
    y = (X.reshape(200, 6, 5)[:, 0].mean(axis=1) > np.median(X.reshape(200, 6, 5)[:, 0].mean(axis=1))).astype(int)
    pipe = Pipeline([("norm", GroupNormalizer(6, 6)), ("clf", LogisticRegression(max_iter=500))]).fit(X, y)
    assert pipe.predict(X[rng.permutation(200)[:10]]).shape == (10,)
    np.testing.assert_array_equal(pipe.named_steps["norm"].transform(X), GroupNormalizer(6, 6).fit_transform(X))


def test_in_a_dp_pipeline_costs_nothing() -> None:
    """Before a DP estimator the pipeline's ledger holds the estimator's releases only."""
    rng = np.random.default_rng(2)
    X = np.concatenate([rng.normal(-1.0, 1.0, (150, 12)), rng.normal(1.0, 1.0, (150, 12))])
    X = X * np.repeat([1.0, 10.0, 0.1, 3.0], 3)  # 4 channels of 3 positions, different scales
    y = np.repeat([0, 1], 150)

    def fit(steps):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyLeakWarning)
            return DPPipeline(steps, budget=(1.0, 1e-5)).fit(X, y)

    estimator = dict(epsilon=1.0, bounds=(-3, 3), classes=[0, 1], epochs=2, sampling_rate=0.1, noise_seed=0)
    with_norm = fit([("norm", GroupNormalizer(4, 2)), ("lvq", DPGLVQ(**estimator))])
    alone = fit([("lvq", DPGLVQ(**estimator))])
    assert [e.name for e in with_norm.ledger_.events] == [e.name for e in alone.ledger_.events]
    assert with_norm.ledger_.get_epsilon(1e-5) == pytest.approx(alone.ledger_.get_epsilon(1e-5))
    assert with_norm.planned_privacy_events(12) == alone.planned_privacy_events(12)
    assert with_norm.score(X, y) > 0.5
