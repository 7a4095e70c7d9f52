"""DPPairwiseGMLVQ in the release format: the private pairs, Platt parameters and noisy
pair counts, with the ledger as the privacy section; nothing curator-only, no seed and
no public-calibration records published.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_wine

import dp_proto
from dp_proto.lvq import PairwiseGMLVQ
from dp_proto.lvq.coupling import COUPLING_METHODS
from dp_proto.lvq.private import DPPairwiseGMLVQ
from dp_proto.privacy.release import ReleasedLedger
from dp_proto.release import MANIFEST_FILE, read_release
from tests._release import check_attribute_coverage, load_in_fresh_process

FAST = dict(sampling_rate=0.2, epochs=3, platt_sampling_rate=0.5, platt_epochs=2)
# What the release leaves out, written out so that a new fitted attribute needs a decision.
EXPECTED_DROPS = {"curator_"}
EXPECTED_TENSORS = {
    "prototypes",
    "omegas",
    "platt_a",
    "platt_b",
    "pairs",
    "pair_counts",
    "scaler.lower",
    "scaler.upper",
}
SEED = 918273645


def _wine():
    X, y = load_wine(return_X_y=True)
    return (X - X.mean(0)) / X.std(0), np.array(["a", "b", "c"])[y]


@pytest.fixture(scope="module")
def fitted():
    X, y = _wine()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PrivacyLeakWarning of the reproducible noise
        # 2 X: many records outside the bounds, so the curator-only count is large
        est = DPPairwiseGMLVQ("ht", epsilon=2.0, bounds=(-3, 3), classes=["a", "b", "c"], noise_seed=SEED, **FAST).fit(
            2 * X, y
        )
    return est, X, y


def _probe(X):
    return np.vstack([X, np.random.default_rng(0).normal(0, 4, size=(40, X.shape[1]))])


def test_loaded_model_predicts_identically_under_every_coupling(fitted, tmp_path):
    est, X, _ = fitted
    assert est.curator_["num_clipped"] > 0
    loaded = dp_proto.load_release(est.save_release(tmp_path / "release"))
    assert type(loaded) is DPPairwiseGMLVQ
    Xp = _probe(X)
    coupling = est.coupling
    try:
        for method in COUPLING_METHODS:  # HT reads the noisy pair counts
            np.testing.assert_array_equal(
                loaded.set_params(coupling=method).predict_proba(Xp),
                est.set_params(coupling=method).predict_proba(Xp),
            )
    finally:
        est.set_params(coupling=coupling)
    np.testing.assert_array_equal(loaded.set_params(coupling=coupling).predict(Xp), est.predict(Xp))
    assert isinstance(loaded.ledger_, ReleasedLedger)
    assert loaded.ledger_.get_epsilon(est.delta) == est.epsilon_ == loaded.epsilon_
    assert loaded.privacy_ == est.privacy_ and loaded.privacy_scope_ == est.privacy_scope_


def test_every_fitted_attribute_is_restored_or_a_documented_drop(fitted, tmp_path):
    est, _, _ = fitted
    loaded = dp_proto.load_release(est.save_release(tmp_path / "release"))
    assert set(DPPairwiseGMLVQ.RELEASE_DROPS) == EXPECTED_DROPS
    check_attribute_coverage(est, loaded, EXPECTED_DROPS)


def test_the_manifest_holds_the_guarantee_and_nothing_curator_only(fitted, tmp_path):
    est, _, _ = fitted
    path = est.save_release(tmp_path / "release")
    text = (path / MANIFEST_FILE).read_text()
    manifest = json.loads(text)
    assert manifest["model"] == "dp_proto.DPPairwiseGMLVQ"
    assert manifest["privacy"]["private"] is True
    assert manifest["privacy"]["epsilon"] == pytest.approx(est.epsilon_)
    assert [e["name"] for e in manifest["privacy"]["events"]] == [e.name for e in est.ledger_.events]
    assert manifest["privacy"]["noise"] == "reproducible"  # said, not the seed
    assert str(SEED) not in text and "num_clipped" not in text
    assert manifest["hyperparameters_not_saved"].keys() == {"noise_seed", "ledger", "public_calibration"}
    assert manifest["dropped"] == ["curator_"]
    assert "pair_loss_" not in vars(est)
    release = read_release(path)
    assert set(release.tensors) == EXPECTED_TENSORS
    assert release.tensors["pair_counts"].dtype == np.float64  # noisy counts, not rounded
    np.testing.assert_array_equal(release.tensors["pair_counts"], est.pair_counts_)
    assert (manifest["public"]["domain"]["lower"], manifest["public"]["domain"]["upper"]) == (-3.0, 3.0)


def test_public_calibration_records_are_not_published(tmp_path):
    X, y = _wine()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = DPPairwiseGMLVQ(
            epsilon=2.0,
            bounds=(-3, 3),
            classes=["a", "b", "c"],
            calibration="public",
            public_calibration=(X[::3], y[::3]),  # every third record, declared public
            **FAST,
        ).fit(X, y)
    path = est.save_release(tmp_path / "release")
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    assert manifest["hyperparameters"]["public_calibration"] is None
    assert manifest["fitted"]["platt_noise_multiplier_"] is None
    loaded = dp_proto.load_release(path)
    assert loaded.public_calibration is None
    np.testing.assert_array_equal(loaded.predict_proba(X), est.predict_proba(X))


def test_mismatched_releases_are_refused(fitted, tmp_path):
    est, X, y = fitted
    release = est.to_release()
    with pytest.raises(ValueError, match="not 'dp_proto.PairwiseGMLVQ'"):
        PairwiseGMLVQ.from_release(release)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        public = PairwiseGMLVQ(max_iter=10, random_state=0).fit(X, y).to_release()
    with pytest.raises(ValueError, match="not 'dp_proto.DPPairwiseGMLVQ'"):
        DPPairwiseGMLVQ.from_release(public)
    unprivate = type(release)(**{**vars(release), "privacy": {"private": False}})
    with pytest.raises(ValueError, match="not private"):
        DPPairwiseGMLVQ.from_release(unprivate)


@pytest.mark.slow
def test_a_fresh_process_loads_the_model_and_predicts_identically(fitted, tmp_path):
    est, X, _ = fitted
    path = est.save_release(tmp_path / "release")
    got = load_in_fresh_process(path, _probe(X), ["predict_proba"], tmp_path)
    assert got["type"] == "DPPairwiseGMLVQ"
    np.testing.assert_array_equal(np.array(got["predict_proba"]), est.predict_proba(_probe(X)))
    assert got["epsilon"] == est.ledger_.get_epsilon()
