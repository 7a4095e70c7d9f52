"""PairwiseGMLVQ in the release format: saved, loaded, predicting exactly as before.

The estimator is fitted on wine (3 classes, 3 pairs) and digits restricted to 4 classes
(6 pairs, a rank-limited metric), written with ``save`` and loaded with
``dp_proto.load_release``. The release must restore every fitted attribute except a
documented set (``RELEASE_DROPS``, asserted literally below, so a new fitted attribute
needs a decision), and give the same ``predict_proba`` bit for bit under every coupling.
"""

import json
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_digits, load_wine
from sklearn.exceptions import NotFittedError

import dp_proto
from dp_proto.lvq import GMLVQ, PairwiseGMLVQ
from dp_proto.lvq.coupling import COUPLING_METHODS
from dp_proto.release import MANIFEST_FILE, TENSORS_FILE, read_release
from tests._release import check_attribute_coverage

# What the release leaves out: the documented decision (RELEASE_DROPS), written out here
# so that a new fitted attribute, or a change of the decision, fails this file.
EXPECTED_DROPS = {"loss_curve_"}
EXPECTED_TENSORS = {"prototypes", "omegas", "platt_a", "platt_b", "pairs", "pair_counts", "pair_loss"}


def _wine():
    X, y = load_wine(return_X_y=True)
    return (X - X.mean(0)) / X.std(0), y


def _digits4():
    X, y = load_digits(return_X_y=True)
    keep = y < 4
    return X[keep] / 16.0, np.array(["zero", "one", "two", "three"])[y[keep]]


SETTINGS = {
    "wine-ht": (_wine, {"coupling": "ht", "max_iter": 100, "random_state": 0}),
    "digits4-rank3-float32": (
        _digits4,
        {"rank": 3, "max_iter": 60, "dtype": "float32", "random_state": np.random.RandomState(1)},
    ),
}


@pytest.fixture(scope="module", params=list(SETTINGS))
def fitted(request):
    data, params = SETTINGS[request.param]
    X, y = data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning of the short fits
        return PairwiseGMLVQ(**params).fit(X, y), X, y


def _probe(X):
    rng = np.random.default_rng(0)
    return np.vstack([X, rng.normal(0, 3, size=(40, X.shape[1]))])


def test_loaded_model_predicts_identically(fitted, tmp_path):
    est, X, y = fitted
    path = est.save(tmp_path / "release")
    loaded = dp_proto.load_release(path)
    assert type(loaded) is PairwiseGMLVQ
    Xp = _probe(X)
    np.testing.assert_array_equal(loaded.predict_proba(Xp), est.predict_proba(Xp))
    np.testing.assert_array_equal(loaded.predict(Xp), est.predict(Xp))
    np.testing.assert_array_equal(loaded.pairwise_proba(Xp), est.pairwise_proba(Xp))
    assert loaded.score(X, y) == est.score(X, y)
    np.testing.assert_array_equal(PairwiseGMLVQ.load(path).predict_proba(Xp), est.predict_proba(Xp))
    coupling = est.coupling
    try:
        for method in COUPLING_METHODS:  # pair_counts_ travel, so every coupling works after loading
            np.testing.assert_array_equal(
                loaded.set_params(coupling=method).predict_proba(Xp),
                est.set_params(coupling=method).predict_proba(Xp),
            )
    finally:
        est.set_params(coupling=coupling)  # the fixture is shared by the module
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    assert manifest["model"] == "dp_proto.PairwiseGMLVQ"
    assert manifest["privacy"] == {"private": False}
    assert set(manifest["tensors"]["entries"]) == EXPECTED_TENSORS
    assert (path / TENSORS_FILE).is_file()


def test_every_fitted_attribute_is_restored_or_a_documented_drop(fitted, tmp_path):
    est, _, _ = fitted
    loaded = dp_proto.load_release(est.save(tmp_path / "release"))
    assert set(PairwiseGMLVQ.RELEASE_DROPS) == EXPECTED_DROPS
    check_attribute_coverage(est, loaded, EXPECTED_DROPS)
    manifest = json.loads((tmp_path / "release" / MANIFEST_FILE).read_text())
    assert manifest["dropped"] == sorted(EXPECTED_DROPS)
    assert manifest["fitted"] == {"n_iter_": est.n_iter_, "loss_": est.loss_}


def test_tensors_keep_their_dtype_and_shapes(fitted, tmp_path):
    est, X, _ = fitted
    release = read_release(est.save(tmp_path / "release"))
    c, d = len(est.classes_), X.shape[1]
    K, r = c * (c - 1) // 2, est.omegas_.shape[1]
    t = release.tensors
    assert t["prototypes"].shape == (K, 2, d) and t["omegas"].shape == (K, r, d)
    assert t["platt_a"].shape == t["platt_b"].shape == t["pair_counts"].shape == (K,)
    assert t["pairs"].dtype == t["pair_counts"].dtype == np.int64
    assert t["prototypes"].dtype == np.dtype(est.dtype)
    np.testing.assert_array_equal(t["pair_counts"], est.pair_counts_)


def test_hyperparameters_round_trip(fitted, tmp_path):
    est, _, _ = fitted
    path = est.save(tmp_path / "release")
    loaded = dp_proto.load_release(path)
    ours, theirs = est.get_params(), loaded.get_params()
    for key, value in ours.items():
        if isinstance(value, np.random.RandomState):  # not JSON: the class default, and the reason
            assert theirs[key] is None
            manifest = json.loads((path / MANIFEST_FILE).read_text())
            assert "not JSON-serialisable" in manifest["hyperparameters_not_saved"][key]
            continue
        assert theirs[key] == value, key


def test_feature_names_travel(tmp_path):
    pd = pytest.importorskip("pandas")
    X, y = _wine()
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = PairwiseGMLVQ(max_iter=30, random_state=0).fit(frame, y)
    loaded = dp_proto.load_release(est.save(tmp_path / "release"))
    np.testing.assert_array_equal(loaded.feature_names_in_, est.feature_names_in_)
    np.testing.assert_array_equal(loaded.predict_proba(frame), est.predict_proba(frame))


def test_unfitted_and_mismatched_releases_are_refused(tmp_path):
    with pytest.raises(NotFittedError):
        PairwiseGMLVQ().to_release()
    X, y = _wine()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = PairwiseGMLVQ(max_iter=20, random_state=0).fit(X, y)
        other = GMLVQ(max_iter=20, random_state=0).fit(X, y)
    with pytest.raises(TypeError, match="not a PairwiseGMLVQ"):
        PairwiseGMLVQ.load(other.save(tmp_path / "gmlvq"))
    release = est.to_release()
    bad = dict(release.tensors, pairs=release.tensors["pairs"][::-1].copy())
    with pytest.raises(ValueError, match="must be the class pairs"):
        PairwiseGMLVQ.from_release(type(release)(**{**vars(release), "tensors": bad}))
    bad = dict(release.tensors, platt_a=release.tensors["platt_a"][:2].copy())
    with pytest.raises(ValueError, match="'platt_a' of the release has shape"):
        PairwiseGMLVQ.from_release(type(release)(**{**vars(release), "tensors": bad}))
    private = type(release)(**{**vars(release), "privacy": {"private": True}})
    with pytest.raises(ValueError, match="is private"):
        PairwiseGMLVQ.from_release(private)


def test_an_unregistered_subclass_cannot_be_saved(tmp_path):
    class MyPairwise(PairwiseGMLVQ):
        pass

    X, y = _wine()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = MyPairwise(max_iter=10, random_state=0).fit(X, y)
    with pytest.raises(TypeError, match="has no release format of its own"):
        est.save(tmp_path / "release")
