"""Private preprocessing (dp_proto.privacy.preprocessing): the DP standard scaler, DP-PCA
(Analyze Gauss, Dwork, Talwar, Thakurta & Zhang 2014) and a pipeline with one budget."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer

from dp_proto.exceptions import DataValidationError, PrivacyBudgetExceededError
from dp_proto.lvq.private import DPGLVQ, BinTraining, SubsampleAggregateGLVQ
from dp_proto.privacy import SharedLedger
from dp_proto.privacy.preprocessing import DPPCA, DPPipeline, DPStandardScaler, PublicMap
from dp_proto.privacy.testing import adversarial_removals, neighbour_check


def _data(n=40, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(2.0, 1.5, (n, d))
    X[0] = 50.0  # outside the public bounds: clipped, never shown
    X[1] = -50.0
    y = (X[:, 0] > 2).astype(int)
    return X, y


def test_the_scaler_passes_the_neighbour_check():
    X, _ = _data()
    report = neighbour_check(
        lambda X: DPStandardScaler(bounds=(-3, 7), epsilon=1.0).fit(X),
        (X,),
        removals=[*adversarial_removals(X), 0, 1, 5],
        curator_only=("curator_",),
    )
    report.assert_ok()
    assert report.releases == ["dp_standard_scaler"]
    assert 0.5 < report.max_ratio["dp_standard_scaler"] <= 1.0 + 1e-9  # the extreme records reach the bound


def test_dp_pca_passes_the_neighbour_check():
    X, _ = _data(d=5)
    report = neighbour_check(
        lambda X: DPPCA(2, epsilon=1.0, norm_bound=3.0).fit(X),
        (X,),
        removals=[*adversarial_removals(X), 0, 1],
        curator_only=("curator_",),
    )
    report.assert_ok()
    assert report.releases == ["dp_pca_second_moment"]
    assert 0.9 < report.max_ratio["dp_pca_second_moment"] <= 1.0 + 1e-9  # a clipped row has norm C


def test_a_whole_pipeline_passes_the_neighbour_check():
    X, y = _data(n=30, d=3)

    def release(X, y):
        steps = [
            ("scale", DPStandardScaler(bounds=(-3, 7), epsilon=1.0)),
            ("pca", DPPCA(2, epsilon=1.0, norm_bound=2.0)),
            ("glvq", DPGLVQ(epsilon=1.0, delta=1e-5, bounds=(-2, 2), classes=[0, 1], epochs=1, sampling_rate=0.2)),
        ]
        return DPPipeline(steps, budget=(5.0, 1e-5)).fit(X, y)

    report = neighbour_check(release, (X, y), removals=[*adversarial_removals(X, y), 0], curator_only=("curator_",))
    report.assert_ok()
    assert report.releases[:2] == ["dp_standard_scaler", "dp_pca_second_moment"]


def test_a_model_fitted_without_noise_cannot_be_built_into_a_private_pipeline():
    """The configuration the pipeline refuses releases a model that moves with every
    record (the neighbour check flags its coef_); refused, it releases nothing at all."""
    X, y = _data(n=30, d=3)
    steps = lambda: [  # noqa: E731
        ("scale", DPStandardScaler(bounds=(-3, 7), epsilon=0.5)),
        ("clf", LogisticRegression()),
    ]
    removals = [0, 5, 17]
    leaky = neighbour_check(
        lambda X, y: Pipeline(steps()).fit(X, y), (X, y), removals=removals, curator_only=("curator_",)
    )
    assert len(leaky.violations) == len(removals) and all("coef_" in v for v in leaky.violations)

    with pytest.raises(TypeError, match="'clf' \\(LogisticRegression\\) is neither private nor declared public"):
        DPPipeline(steps(), budget=(1.0, 1e-5))
    refused = neighbour_check(
        lambda X, y: DPPipeline(steps(), budget=(1.0, 1e-5)).fit(X, y), (X, y), removals=removals
    ).assert_ok()
    assert refused.releases == []  # the same refusal on every neighbour, before any release


def test_a_pipeline_with_a_public_map_and_subsample_and_aggregate_passes_the_neighbour_check():
    X, y = _data(n=30, d=3)

    def release(X, y):
        steps = [
            ("tanh", PublicMap(FunctionTransformer(np.tanh))),
            ("scale", DPStandardScaler(bounds=(-1, 1), epsilon=1.0)),
            (
                "saa",
                SubsampleAggregateGLVQ(
                    num_bins=4, epsilon=1.0, bounds=(-3, 3), classes=[0, 1], training=BinTraining(epochs=2)
                ),
            ),
        ]
        return DPPipeline(steps, budget=(3.0, 1e-5)).fit(X, y)

    report = neighbour_check(release, (X, y), removals=[*adversarial_removals(X, y), 0], curator_only=("curator_",))
    report.assert_ok()
    assert report.releases == ["dp_standard_scaler", "saa"]
    pipe = release(X, y)
    # the release of the step without a ledger parameter is on the pipeline's ledger too
    assert [e.name for e in pipe.ledger_.events] == ["dp_standard_scaler", "saa"]
    assert pipe.step_roles_ == {"tanh": "public map", "scale": "private", "saa": "private"}


def test_the_scaler_estimates_mean_and_deviation():
    rng = np.random.default_rng(1)
    X = rng.normal([0.0, 5.0, -2.0], [1.0, 2.0, 0.5], (200000, 3))
    scaler = DPStandardScaler(bounds=(-10, 15), epsilon=2.0).fit(X)
    np.testing.assert_allclose(scaler.mean_, X.mean(0), atol=0.05)
    np.testing.assert_allclose(scaler.scale_, X.std(0), atol=0.05)
    assert abs(scaler.noisy_count_ - 200000) < 50
    Z = scaler.transform(X)
    assert abs(Z.mean()) < 0.05 and abs(Z.std() - 1) < 0.05
    lo, hi = scaler.output_bounds_
    assert (Z >= lo - 1e-12).all() and (Z <= hi + 1e-12).all()
    assert scaler.transform(np.full((1, 3), 1e6)).ravel().tolist() == pytest.approx(hi.tolist())  # clipped
    (event,) = scaler.ledger_.events
    assert event.name == "dp_standard_scaler" and event.sensitivity == pytest.approx(np.sqrt(3))
    assert scaler.privacy_["epsilon"] <= 2.0 + 1e-9


def test_dp_pca_is_orthonormal_and_finds_the_subspace():
    rng = np.random.default_rng(2)
    basis = np.linalg.qr(rng.normal(size=(8, 2)))[0]  # a planted 2-d subspace of R^8
    X = rng.normal(size=(5000, 2)) @ basis.T * 0.5 + 0.01 * rng.normal(size=(5000, 8))
    pca = DPPCA(2, epsilon=1.0, norm_bound=2.0).fit(X)
    np.testing.assert_allclose(pca.components_ @ pca.components_.T, np.eye(2), atol=1e-10)
    overlap = np.linalg.svd(basis.T @ pca.components_.T, compute_uv=False)
    assert overlap.min() > 0.99  # cosines of the principal angles
    assert pca.explained_variance_[0] >= pca.explained_variance_[1]
    Z = pca.transform(np.vstack([X, 100 * np.ones((1, 8))]))
    assert Z.shape == (5001, 2) and np.linalg.norm(Z, axis=1).max() <= 2.0 + 1e-9
    (event,) = pca.ledger_.events
    assert event.name == "dp_pca_second_moment" and event.sensitivity == pytest.approx(4.0)
    assert pca.ledger_.get_epsilon(1e-5) <= 1.0 + 1e-9


def test_a_pipeline_has_one_guarantee_and_refuses_before_any_noise():
    X, y = _data(n=200, d=4)
    steps = lambda eps: [  # noqa: E731
        ("scale", DPStandardScaler(bounds=(-3, 7), epsilon=eps)),
        ("pca", DPPCA(2, epsilon=eps, norm_bound=2.0)),
        ("glvq", DPGLVQ(epsilon=eps, delta=1e-5, bounds=(-2, 2), classes=[0, 1], epochs=2)),
    ]
    pipe = DPPipeline(steps(0.5), budget=(2.0, 1e-5)).fit(X, y)
    names = [e.name for e in pipe.ledger_.events]
    assert names[:2] == ["dp_standard_scaler", "dp_pca_second_moment"] and names[-1] == "dp_sgd"
    composed = pipe.ledger_.get_epsilon(1e-5)
    assert 0.5 < composed <= 2.0
    assert pipe.privacy_["epsilon"] == pytest.approx(composed)
    for _, step in pipe.steps:
        assert step.ledger is pipe.ledger_  # every private step spent on the one ledger
    assert pipe.predict(X).shape == (200,)

    refused = DPPipeline(steps(1.0), budget=(1.2, 1e-5))
    with pytest.raises(PrivacyBudgetExceededError, match="refused"):
        refused.fit(X, y)
    for _, step in refused.steps:  # nothing was fitted, so no noise was drawn
        assert not hasattr(step, "ledger_")

    shared = SharedLedger(budget=(4.0, 1e-5))
    DPPipeline(steps(0.5), ledger=shared).fit(X, y)
    assert len(shared.events) == len(pipe.ledger_.events)


def test_bad_input_gets_clear_errors():
    X, y = _data()
    with pytest.raises(ValueError, match="needs public bounds"):
        DPStandardScaler(epsilon=1.0).fit(X)
    with pytest.raises(ValueError, match="lower < upper"):
        DPStandardScaler(bounds=(1, 1)).fit(X)
    with pytest.raises(ValueError, match="pair"):
        DPStandardScaler(bounds=5).fit(X)
    with pytest.raises(ValueError, match="n_components must be an int in 1..4"):
        DPPCA(5).fit(X)
    with pytest.raises(ValueError, match="norm_bound"):
        DPPCA(2, norm_bound=0).fit(X)
    with pytest.raises(TypeError, match="SharedLedger"):
        DPPCA(2, ledger=object()).fit(X)
    nan = X.copy()
    nan[3, 1] = np.nan
    with pytest.raises(DataValidationError, match="NaN or inf"):
        DPStandardScaler(bounds=(0, 1)).fit(nan)
    with pytest.raises(ValueError, match="epsilon"):
        DPStandardScaler(bounds=(0, 1), epsilon=0).fit(X)
    with pytest.raises(ValueError, match="exactly one of budget"):
        DPPipeline([("s", DPStandardScaler(bounds=(0, 1)))]).fit(X)
    with pytest.raises(ValueError, match="exactly one of budget"):
        DPPipeline([("s", DPStandardScaler(bounds=(0, 1)))], budget=(1, 1e-5), ledger=SharedLedger((1, 1e-5))).fit(X)
    scaler = DPStandardScaler(bounds=(0, 1)).fit(X)
    with pytest.raises(ValueError, match="features"):
        scaler.transform(X[:, :2])
