"""PrivateSVDD and PrivateSVDDClassifier in the release format: saved, loaded, predicting as before.

Every setting is fitted once on standardised iris (a module-scoped fixture), written with
``save_release`` and loaded with ``dp_proto.load_release``. The release must restore every
fitted attribute except a documented set (``RELEASE_DROPS``; the drops of each setting
are written out literally below, so a new fitted attribute needs a decision), and hold
nothing curator-only, no pickle, no generator state and no noise seed.
"""

import json
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.exceptions import NotFittedError
from sklearn.preprocessing import StandardScaler

import dp_proto
from dp_proto.privacy.release import ReleasedLedger
from dp_proto.release import CARD_FILE, MANIFEST_FILE, TENSORS_FILE, read_release
from dp_proto.svdd import PrivateSVDD, PrivateSVDDClassifier
from tests._release import (
    check_attribute_coverage,
    check_no_pickle,
    check_no_seed_values,
    curator_only_attributes,
    load_in_fresh_process,
    release_files,
)

X, Y = load_iris(return_X_y=True)
X = StandardScaler().fit_transform(X)
CLASSES = [0, 1, 2]
STARTS = np.random.default_rng(5).uniform(-2, 2, size=(30, 4))  # public start points
SETTINGS = {
    "svdd": (PrivateSVDD, {"epsilon": 1.0, "random_state": 0}),
    "svdd_exact": (PrivateSVDD, {"epsilon": None, "random_state": 0}),
    "normal": (PrivateSVDDClassifier, {"epsilon": 2.0, "r_max": 0.5, "classes": CLASSES, "random_state": 0}),
    "grid": (
        PrivateSVDDClassifier,
        {"epsilon": 50.0, "starts": "grid", "r_max": 0.5, "classes": CLASSES, "random_state": 0},
    ),
    "given_starts": (
        PrivateSVDDClassifier,
        {"epsilon": 3.0, "starts": STARTS, "classes": CLASSES, "dtype": "float64", "random_state": 0},
    ),
    "equilibrium_points": (
        PrivateSVDDClassifier,
        {
            "epsilon": 5.0,
            "release": "equilibrium_points",
            "n_neighbors": 3,
            "starts": "normal",
            "n_starts": 100,
            "classes": CLASSES,
            "random_state": 0,
        },
    ),
    "exact_grid": (PrivateSVDDClassifier, {"epsilon": None, "starts": "grid", "r_max": 0.5, "random_state": 0}),
    "training": (
        PrivateSVDDClassifier,
        {"epsilon": 1.0, "starts": "training", "r_max": 0.5, "classes": CLASSES, "random_state": 0},
    ),
}
# What each release leaves out: the documented decision (RELEASE_DROPS), written out here
# so that a new fitted attribute, or a change of the decision, fails this file.
CELLS = {"equilibria_", "ep_cell_", "cell_counts_", "cell_labels_", "cubes_"}
EXPECTED_DROPS = {
    "svdd": {"curator_"},
    "svdd_exact": {"ledger_"},
    "normal": CELLS | {"curator_"},
    "grid": CELLS | {"curator_"},
    "given_starts": CELLS | {"curator_"},
    "equilibrium_points": CELLS | {"curator_", "features_", "centre_"},
    "exact_grid": CELLS | {"ledger_"},
    "training": CELLS | {"curator_", "ledger_"},
}
RELEASE_DROPS = {
    PrivateSVDD: {"curator_", "ledger_"},
    PrivateSVDDClassifier: CELLS | {"curator_", "ledger_", "features_", "centre_"},
}
PRIVATE = {"svdd", "normal", "grid", "given_starts", "equilibrium_points"}


def _fit(name, **extra):
    cls, params = SETTINGS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(**{**params, **extra}).fit(X, Y)


@pytest.fixture(scope="module", params=list(SETTINGS))
def fitted(request):
    return request.param, _fit(request.param)


def _probe():
    """Iris, and points well beyond it (outside the grid's box too)."""
    return np.vstack([X, np.random.default_rng(0).normal(scale=3.0, size=(50, 4)), np.full((1, 4), 50.0)])


def test_loaded_model_predicts_identically(fitted, tmp_path):
    name, est = fitted
    path = est.save_release(tmp_path / "release")
    loaded = dp_proto.load_release(path)
    assert type(loaded) is type(est)
    Xp = _probe()
    np.testing.assert_array_equal(loaded.predict(Xp), est.predict(Xp))
    if isinstance(est, PrivateSVDD) or est.release == "support_function":
        np.testing.assert_array_equal(loaded.score_samples(Xp), est.score_samples(Xp))
    if isinstance(est, PrivateSVDD):
        np.testing.assert_array_equal(loaded.decision_function(Xp), est.decision_function(Xp))
    else:
        assert loaded.score(X, Y) == est.score(X, Y)
    np.testing.assert_array_equal(type(est).load(path).predict(Xp), est.predict(Xp))
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    assert manifest["model"] == f"dp_proto.{type(est).__name__}"
    if name in PRIVATE:
        assert manifest["privacy"]["private"] is True
        assert manifest["privacy"]["epsilon"] == est.ledger_.get_epsilon()
        assert manifest["privacy"]["epsilon"] == pytest.approx(est.epsilon, rel=1e-3)
        assert isinstance(loaded.ledger_, ReleasedLedger)
        assert loaded.ledger_.get_epsilon() == est.ledger_.get_epsilon()  # composed afresh, checked
        assert "add/remove one record" in manifest["privacy"]["scope"]
    elif name == "training":
        assert manifest["privacy"]["private"] is False
        assert "not differentially private" in manifest["privacy"]["note"]
    else:
        assert manifest["privacy"] == {"private": False}


def test_every_fitted_attribute_is_restored_or_a_documented_drop(fitted, tmp_path):
    name, est = fitted
    cls = type(est)
    loaded = dp_proto.load_release(est.save_release(tmp_path / "release"))
    assert set(cls.RELEASE_DROPS) == RELEASE_DROPS[cls]
    assert EXPECTED_DROPS[name] <= set(cls.RELEASE_DROPS)
    restored = check_attribute_coverage(est, loaded, EXPECTED_DROPS[name])
    attributes = restored | EXPECTED_DROPS[name]  # every fitted attribute, as just checked
    curator = {a for a in attributes if "curator" in a} | curator_only_attributes(cls)
    assert curator == {"curator_"} and curator <= set(cls.RELEASE_DROPS)
    assert ("curator_" in attributes) == (name != "svdd_exact" and name != "exact_grid")
    manifest = json.loads((tmp_path / "release" / MANIFEST_FILE).read_text())
    assert manifest["dropped"] == sorted(EXPECTED_DROPS[name])


def test_hyperparameters_round_trip(fitted, tmp_path):
    _, est = fitted
    loaded = dp_proto.load_release(est.save_release(tmp_path / "release"))
    ours, theirs = est.get_params(), loaded.get_params()
    assert theirs["noise_seed"] is None and theirs["ledger"] is None  # never published
    for key, value in ours.items():
        if key in ("noise_seed", "ledger"):
            continue
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(np.asarray(theirs[key]), value)
        else:
            assert theirs[key] == value, key
    # a loaded model saves the same release again (a private one with its read-only ledger)
    again = read_release(loaded.save_release(tmp_path / "again"))
    first = read_release(tmp_path / "release")
    assert again.privacy == first.privacy and again.public == first.public and again.fitted == first.fitted
    assert again.tensors.keys() == first.tensors.keys()
    for key in first.tensors:
        np.testing.assert_array_equal(again.tensors[key], first.tensors[key])


@pytest.mark.parametrize("name", ["svdd", "normal", "grid"])
def test_a_release_holds_no_pickle_no_generator_and_nothing_curator_only(name, tmp_path):
    seed = 918273645
    est = _fit(name, noise_seed=seed)
    assert est.curator_["n_records"] == len(X)
    path = est.save_release(tmp_path / "release")
    files = release_files(path)
    assert set(files) == {MANIFEST_FILE, TENSORS_FILE, CARD_FILE}
    check_no_pickle(files)
    text = files[MANIFEST_FILE].decode()
    assert str(seed) not in text
    assert str(seed) not in files[CARD_FILE].decode()  # the card: from the manifest only
    for curator_key in est.curator_:
        assert curator_key not in text, curator_key
    assert text.count("curator_") == 1  # the name in "dropped", no value
    manifest = json.loads(text)
    published = {k: v for k, v in manifest.items() if k != "hyperparameters_not_saved"}  # reasons, no values
    check_no_seed_values(published)
    assert manifest["hyperparameters_not_saved"].keys() == {"noise_seed", "ledger"}
    assert manifest["privacy"]["noise"] == "reproducible"  # said, not the seed
    release = read_release(path)
    if name == "svdd":
        assert set(release.tensors) == {"features.frequencies", "centre"}
        assert set(release.fitted) == {"radius2_", "offset_"}
        return
    assert set(release.tensors) == {"features.frequencies", "centre", "labelled_points", "labelled_classes"}
    # no training record among the published points: they come from public starts or cubes
    points = release.tensors["labelled_points"].astype(np.float64)
    assert not (np.abs(points[:, None, :] - X[None, :, :]).max(-1) < 1e-6).any()


def test_the_label_set_read_from_private_data_is_named_in_the_scope(tmp_path):
    est = _fit("normal", classes=None)
    manifest = json.loads((est.save_release(tmp_path / "release") / MANIFEST_FILE).read_text())
    assert "classes=None" in manifest["privacy"]["scope"]


@pytest.mark.parametrize("name", ["svdd", "normal"])
def test_an_unfitted_estimator_is_refused(name, tmp_path):
    cls, params = SETTINGS[name]
    with pytest.raises(NotFittedError):
        cls(**params).save_release(tmp_path / "release")
    assert not (tmp_path / "release").exists()


def test_load_checks_the_class(tmp_path):
    path = _fit("svdd").save(tmp_path / "svdd")
    with pytest.raises(TypeError, match="holds a PrivateSVDD, not a PrivateSVDDClassifier"):
        PrivateSVDDClassifier.load(path)
    with pytest.raises(ValueError, match="not 'dp_proto.PrivateSVDDClassifier'"):
        PrivateSVDDClassifier.from_release(read_release(path))


def test_an_equilibrium_point_release_has_no_support_function(tmp_path):
    loaded = dp_proto.load_release(_fit("equilibrium_points").save_release(tmp_path / "release"))
    assert set(read_release(tmp_path / "release").tensors) == {"labelled_points", "labelled_classes"}
    loaded.set_params(release="support_function")
    with pytest.raises(ValueError, match="published with release='equilibrium_points'"):
        loaded.predict(X)
    with pytest.raises(NotFittedError):
        loaded.score_samples(X)


def test_the_tensors_must_fit_the_manifest(tmp_path):
    path = _fit("normal").save_release(tmp_path / "release")
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    manifest["public"]["n_features"] = 5
    (path / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="tensor 'labelled_points' of the release has shape"):
        dp_proto.load_release(path)


@pytest.mark.slow
def test_a_fresh_process_loads_a_private_classifier_and_predicts_identically(tmp_path):
    """A private classifier (support function), saved here, loaded by another Python: the
    same labels and support-function values bit for bit (at the same torch thread count),
    and the same epsilon composed afresh from the events."""
    est = _fit("normal")
    path = est.save_release(tmp_path / "release")
    got = load_in_fresh_process(path, _probe(), ["predict", "score_samples"], tmp_path)
    assert got["type"] == "PrivateSVDDClassifier"
    np.testing.assert_array_equal(np.array(got["predict"]), est.predict(_probe()))
    scores = est.score_samples(_probe())
    np.testing.assert_array_equal(np.array(got["score_samples"], dtype=scores.dtype), scores)
    assert got["epsilon"] == est.ledger_.get_epsilon()
