"""SubsampleAggregateGLVQ: the scikit-learn face of the bin-based schemes."""

import numpy as np
import pytest

from dp_proto.lvq.private import BinTraining, SubsampleAggregateGLVQ
from dp_proto.lvq.private.saa import saa_sensitivity
from dp_proto.privacy.mechanisms import renyi_noise_multiplier


def _discrete_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """The SAA sum's noise std: the Renyi-DP noise multiplier times the sensitivity in
    steps of the automatic grid (``1024 sqrt(k) + sqrt(k)`` steps of ``Delta / (1024 sqrt(k))``)."""
    return renyi_noise_multiplier(epsilon, delta) * sensitivity * 1025 / 1024


def _three_gaussians(n_per_class: int, seed: int, dim: int = 2):
    rng = np.random.default_rng(seed)
    means = 5.0 * np.eye(dim)[[0, 0, 1]] * np.array([[1.0], [-1.0], [1.0]])  # (5, 0), (-5, 0), (0, 5)
    X = np.concatenate([rng.normal(m, 1.0, (n_per_class, dim)) for m in means])
    return X, np.repeat(np.array(["a", "b", "c"]), n_per_class)


def test_mean_aggregation_learns_the_three_gaussians_and_carries_its_ledger():
    X, y = _three_gaussians(1000, 0)
    X_test, y_test = _three_gaussians(1000, 1)
    est = SubsampleAggregateGLVQ(num_bins=20, epsilon=2.0, bounds=(-10, 10), radius=0.6, noise_seed=0).fit(X, y)
    assert est.score(X_test, y_test) > 0.95
    assert est.prototypes_.shape == (3, 2) and est.prototype_labels_.tolist() == ["a", "b", "c"]
    assert est.epsilon_ == pytest.approx(2.0, rel=1e-6)
    assert est.privacy_["events"][0]["sensitivity"] == pytest.approx(saa_sensitivity(3, 2, radius=0.6))
    assert est.noise_std_ == pytest.approx(_discrete_sigma(2.0, 1e-5, saa_sensitivity(3, 2, radius=0.6)) / 20)
    assert np.linalg.norm(est.prototypes_ / 10, axis=1).max() <= 0.6 + 1e-9  # projected release
    assert est.model_.privacy_ == est.privacy_


def test_public_classes_keep_a_class_absent_from_the_private_data():
    X, y = _three_gaussians(300, 0)
    # epsilon 20: the mechanics, not the noise, are under test (at epsilon 2 and 10 bins the
    # noise std per coordinate is 1.2 on [-1, 1], and the score depends on the draw)
    est = SubsampleAggregateGLVQ(
        num_bins=10, epsilon=20.0, bounds=(-10, 10), classes=["a", "b", "c"], noise_seed=0
    ).fit(X[y != "c"], y[y != "c"])
    assert est.prototype_labels_.tolist() == ["a", "b", "c"] and np.isfinite(est.prototypes_).all()
    assert est.score(X[y != "c"], y[y != "c"]) > 0.9  # "c" sits at the box centre, between "a" and "b"


def test_same_noise_seed_same_model_and_several_prototypes_need_a_reference():
    X, y = _three_gaussians(200, 2)
    a = SubsampleAggregateGLVQ(num_bins=5, bounds=(-10, 10), noise_seed=3).fit(X, y)
    b = SubsampleAggregateGLVQ(num_bins=5, bounds=(-10, 10), noise_seed=3).fit(X, y)
    np.testing.assert_array_equal(a.prototypes_, b.prototypes_)
    with pytest.raises(ValueError, match="reference"):
        SubsampleAggregateGLVQ({"a": 2}, num_bins=5, bounds=(-10, 10)).fit(X, y)
    reference = [[5, -2], [5, 2], [-5, 0], [0, 5]]
    est = SubsampleAggregateGLVQ({"a": 2}, num_bins=5, bounds=(-10, 10), reference=reference, random_state=0).fit(X, y)
    assert est.prototype_labels_.tolist() == ["a", "a", "b", "c"]


def test_centre_of_attention_aggregation_records_an_approx_event():
    X, y = _three_gaussians(200, 4)
    est = SubsampleAggregateGLVQ(
        num_bins=10, aggregation="centre_of_attention", epsilon=1.0, bounds=(-10, 10), random_state=0
    ).fit(X, y)
    assert est.privacy_["events"][0]["kind"] == "approx"
    assert np.abs(est.prototypes_).max() <= 10 + 1e-9
    assert not hasattr(est, "noise_std_")  # S(Z)/alpha depends on the data without noise


@pytest.mark.parametrize(
    "params, match",
    [
        ({"aggregation": "median"}, "aggregation"),
        ({"num_bins": 0}, "num_bins"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"delta": 1.0}, "delta"),
        ({"radius": -1.0}, "radius"),
    ],
)
def test_bad_parameters(params, match):
    X, y = _three_gaussians(20, 5)
    with pytest.raises(ValueError, match=match):
        SubsampleAggregateGLVQ(**params).fit(X, y)


def test_the_bins_training_is_a_recipe_object():
    X, y = _three_gaussians(20, 5)
    with pytest.raises(TypeError, match="BinTraining"):
        SubsampleAggregateGLVQ(training={"epochs": 3}).fit(X, y)
    with pytest.raises(ValueError, match="epochs"):
        BinTraining(epochs=0)
    est = SubsampleAggregateGLVQ(bounds=(-10, 10), classes=["a", "b", "c"], training=BinTraining(epochs=2, lr=0.02))
    recipe = est.aggregation_recipe()
    assert recipe.training.epochs == 2 and recipe.planned_events(3, 2) == est.planned_privacy_events(2)
    assert est.fit(X, y).n_iter_ == 2


def test_more_bins_than_records_still_releases_a_finite_model():
    X, y = _three_gaussians(5, 6)
    est = SubsampleAggregateGLVQ(num_bins=40, bounds=(-10, 10), random_state=0, training=BinTraining(epochs=1)).fit(
        X, y
    )
    assert est.curator_["empty_bins"] >= 25 and np.isfinite(est.prototypes_).all()


def test_num_bins_above_the_record_count_is_told_to_the_curator_only(caplog):
    """num_bins > n: the curator hears of the empty bins (curator_ and the dp_proto.curator
    logger); the user-visible warnings are those of a fit with num_bins <= n, since a
    warning that appears when one record is removed would tell the neighbours apart."""
    import logging
    import warnings

    X, y = _three_gaussians(4, 7)  # 12 records
    params = dict(bounds=(-10, 10), classes=["a", "b", "c"], training=BinTraining(epochs=1), random_state=0)
    seen = {}
    for bins in (12, 13):  # n = 12 and the 12 records with a 13th bin
        with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.DEBUG, "dp_proto.curator"):
            warnings.simplefilter("always")
            caplog.clear()
            est = SubsampleAggregateGLVQ(num_bins=bins, **params).fit(X, y)
        seen[bins] = sorted(str(w.message) for w in caught)
        curator_messages = [r.getMessage() for r in caplog.records if "bins got no record" in r.getMessage()]
        if bins == 13:
            assert est.curator_["empty_bins"] >= 1 and len(curator_messages) == 1
            assert "of num_bins=13 bins got no record" in curator_messages[0]
    assert seen[12] == seen[13]
