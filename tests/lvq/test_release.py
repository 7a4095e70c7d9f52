"""The LVQ estimators in the release format: saved, loaded, predicting exactly as before.

Every estimator class is fitted once on iris (a module-scoped fixture), written with
``save`` / ``save_release`` and loaded with ``dp_proto.load_release``. The release must
restore every fitted attribute except a documented set (``RELEASE_DROPS``, asserted
literally below, so a new fitted attribute needs a decision), drop everything
curator-only, and hold no pickle, generator state or noise seed.
"""

import json
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_digits, load_iris
from sklearn.exceptions import NotFittedError

import dp_proto
from dp_proto.lvq import GLVQ, GMLVQ, LGMLVQ
from dp_proto.lvq.private import DPGLVQ, DPGMLVQ, DPLGMLVQ, BinTraining, SubsampleAggregateGLVQ
from dp_proto.privacy.release import ReleasedLedger
from dp_proto.release import CARD_FILE, MANIFEST_FILE, TENSORS_FILE, read_release
from tests._release import (
    check_attribute_coverage,
    check_no_pickle,
    check_no_seed_values,
    check_safetensors_layout,
    curator_only_attributes,
    load_in_fresh_process,
    release_files,
)

X, Y = load_iris(return_X_y=True)
PRIVATE = {"bounds": (0, 8), "classes": [0, 1, 2], "sampling_rate": 0.1, "epochs": 2}
SETTINGS = {
    GLVQ: {"random_state": 0},
    GMLVQ: {"rank": 2, "random_state": 0},
    LGMLVQ: {"max_iter": 30, "random_state": 0},
    DPGLVQ: PRIVATE,
    DPGMLVQ: {**PRIVATE, "rank": 2, "omega_init": "random", "random_state": 0},
    DPLGMLVQ: {**PRIVATE, "dtype": "float64"},
    SubsampleAggregateGLVQ: {"bounds": (0, 8), "classes": range(3), "num_bins": 5, "training": BinTraining(epochs=3)},
}
# What each release leaves out: the documented decision (RELEASE_DROPS), written out here
# so that a new fitted attribute, or a change of the decision, fails this file.
EXPECTED_DROPS = {
    GLVQ: {"loss_curve_"},
    GMLVQ: {"loss_curve_"},
    LGMLVQ: {"loss_curve_"},
    DPGLVQ: {"curator_"},
    DPGMLVQ: {"curator_"},
    DPLGMLVQ: {"curator_"},
    SubsampleAggregateGLVQ: {"curator_"},
}
PRIVATE_CLASSES = (DPGLVQ, DPGMLVQ, DPLGMLVQ, SubsampleAggregateGLVQ)


@pytest.fixture(scope="module", params=list(SETTINGS), ids=lambda cls: cls.__name__)
def fitted(request):
    cls = request.param
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(**SETTINGS[cls]).fit(X, Y)


def _probe():
    """Iris, and points around and beyond the bounds (predictions do not clip)."""
    rng = np.random.default_rng(0)
    return np.vstack([X, rng.uniform(-2, 10, size=(50, 4))])


def _save(est, path):
    return est.save_release(path) if hasattr(est, "save_release") else est.save(path)


def test_loaded_model_predicts_identically(fitted, tmp_path):
    path = _save(fitted, tmp_path / "release")
    loaded = dp_proto.load_release(path)
    assert type(loaded) is type(fitted)
    Xp = _probe()
    np.testing.assert_array_equal(loaded.predict(Xp), fitted.predict(Xp))
    np.testing.assert_array_equal(loaded.decision_function(Xp), fitted.decision_function(Xp))
    assert loaded.score(X, Y) == fitted.score(X, Y)
    np.testing.assert_array_equal(type(fitted).load(path).predict(Xp), fitted.predict(Xp))
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    assert manifest["model"] == f"dp_proto.{type(fitted).__name__}"
    if isinstance(fitted, PRIVATE_CLASSES):
        assert manifest["privacy"]["epsilon"] == fitted.ledger_.get_epsilon() == fitted.epsilon_
        assert isinstance(loaded.ledger_, ReleasedLedger)
        assert loaded.ledger_.get_epsilon() == fitted.ledger_.get_epsilon()  # composed afresh
        assert loaded.privacy_ == fitted.privacy_ == loaded.model_.privacy_
        assert manifest["privacy"]["scope"] == fitted.privacy_scope_
    else:
        assert manifest["privacy"] == {"private": False}


def test_every_fitted_attribute_is_restored_or_a_documented_drop(fitted, tmp_path):
    cls = type(fitted)
    loaded = dp_proto.load_release(_save(fitted, tmp_path / "release"))
    assert set(cls.RELEASE_DROPS) == EXPECTED_DROPS[cls]
    restored = check_attribute_coverage(fitted, loaded, EXPECTED_DROPS[cls])
    attributes = restored | EXPECTED_DROPS[cls]  # every fitted attribute, as just checked
    curator = {a for a in attributes if "curator" in a} | curator_only_attributes(cls)
    assert curator <= set(cls.RELEASE_DROPS)
    if cls in PRIVATE_CLASSES:
        assert curator == {"curator_"}
    manifest = json.loads((tmp_path / "release" / MANIFEST_FILE).read_text())
    assert manifest["dropped"] == sorted(EXPECTED_DROPS[cls])


def test_hyperparameters_round_trip(fitted, tmp_path):
    loaded = dp_proto.load_release(_save(fitted, tmp_path / "release"))
    ours, theirs = fitted.get_params(), loaded.get_params()
    if isinstance(fitted, PRIVATE_CLASSES):
        assert theirs["noise_seed"] is None  # never published
    for key, value in ours.items():
        if key == "noise_seed":
            continue
        if isinstance(value, (tuple, range)):  # JSON has lists only
            value = list(value)
        assert theirs[key] == value, key


def test_a_release_holds_no_pickle_no_generator_and_nothing_curator_only(tmp_path):
    seed = 918273645
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # 3 X: most records lie outside the bounds, so the curator-only count is large
        est = DPGMLVQ(noise_seed=seed, **SETTINGS[DPGMLVQ]).fit(3 * X, Y)
    assert est.curator_["num_clipped"] > 0
    path = est.save_release(tmp_path / "release")
    files = release_files(path)
    assert set(files) == {MANIFEST_FILE, TENSORS_FILE, CARD_FILE}
    check_no_pickle(files)
    header = check_safetensors_layout(files[TENSORS_FILE])
    assert header["__metadata__"] == {"format": "dp-proto-release"}
    text = files[MANIFEST_FILE].decode()
    assert str(seed) not in text and "num_clipped" not in text
    card = files[CARD_FILE].decode()  # the card is written from the manifest: nothing more
    assert str(seed) not in card and "num_clipped" not in card and "curator_" not in card
    assert text.count("curator_") == 1  # the name in "dropped", no value
    manifest = json.loads(text)
    published = {k: v for k, v in manifest.items() if k != "hyperparameters_not_saved"}  # reasons, no values
    check_no_seed_values(published)
    assert manifest["hyperparameters_not_saved"].keys() == {"noise_seed", "ledger"}
    assert manifest["privacy"]["noise"] == "reproducible"  # said, not the seed
    release = read_release(path)
    assert set(release.tensors) == {
        "prototypes",
        "prototype_labels",
        "omega",
        "scaler.lower",
        "scaler.upper",
        "class_counts",
    }


@pytest.mark.parametrize("cls", list(SETTINGS), ids=lambda cls: cls.__name__)
def test_an_unfitted_estimator_is_refused(cls, tmp_path):
    est = cls(**SETTINGS[cls])
    with pytest.raises(NotFittedError):
        _save(est, tmp_path / "release")
    assert not (tmp_path / "release").exists()


def test_load_checks_the_class(tmp_path):
    path = GLVQ(random_state=0).fit(X, Y).save(tmp_path / "glvq")
    with pytest.raises(TypeError, match="holds a GLVQ, not a GMLVQ"):
        GMLVQ.load(path)


def test_string_labels_mappings_and_unserialisable_parameters(tmp_path):
    names = np.array(["setosa", "versicolor", "virginica"])[Y]
    est = GLVQ(prototypes_per_class={"setosa": 1, "virginica": 2}, random_state=np.random.RandomState(0))
    est.fit(X, names)
    path = est.save(tmp_path / "release")
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    assert "RandomState" in manifest["hyperparameters_not_saved"]["random_state"]
    loaded = GLVQ.load(path)
    assert loaded.random_state is None  # the class default
    assert loaded.prototypes_per_class == {"setosa": 1, "virginica": 2}
    assert loaded.classes_.dtype == est.classes_.dtype
    np.testing.assert_array_equal(loaded.predict(X), est.predict(X))
    np.testing.assert_array_equal(loaded.prototype_labels_, est.prototype_labels_)

    est = GMLVQ(prototypes_per_class={0: 2, 2: 1}, random_state=0).fit(X, Y)
    loaded = GMLVQ.load(est.save(tmp_path / "int_keys"))
    assert loaded.prototypes_per_class == {0: 2, 2: 1}
    np.testing.assert_array_equal(loaded.decision_function(X), est.decision_function(X))


def test_the_layer_must_fit_the_manifest(tmp_path):
    path = GMLVQ(random_state=0).fit(X, Y).save(tmp_path / "release")
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    manifest["public"]["n_features"] = 5
    (path / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="tensor 'prototypes' of the release has shape"):
        dp_proto.load_release(path)


def test_a_private_release_is_not_loaded_as_a_public_model(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = DPGLVQ(**PRIVATE).fit(X, Y).save_release(tmp_path / "release")
    with pytest.raises(ValueError, match="not 'dp_proto.GLVQ'"):
        GLVQ.from_release(read_release(path))


@pytest.mark.slow
def test_a_fresh_process_loads_a_private_model_and_predicts_identically(tmp_path):
    """DP-GMLVQ on digits, saved here, loaded by another Python: the same labels and
    decision values bit for bit (at the same torch thread count: matmul blocking moves
    float32 results by an ulp across thread counts), and the same epsilon composed afresh
    from the events."""
    Xd, yd = load_digits(return_X_y=True)
    est = DPGMLVQ(epsilon=1.0, bounds=(0, 16), classes=range(10), sampling_rate=0.1, epochs=2).fit(Xd, yd)
    path = est.save_release(tmp_path / "release")
    got = load_in_fresh_process(path, Xd[:300], ["predict", "decision_function"], tmp_path)
    assert got["type"] == "DPGMLVQ"
    np.testing.assert_array_equal(np.array(got["predict"]), est.predict(Xd[:300]))
    scores = est.decision_function(Xd[:300])
    np.testing.assert_array_equal(np.array(got["decision_function"], dtype=scores.dtype), scores)
    assert got["epsilon"] == est.ledger_.get_epsilon() == est.epsilon_


def test_load_refuses_a_subclass_release(tmp_path):
    from dp_proto.lvq.private import DPGMLVQ

    path = DPGMLVQ(epsilon=1.0, bounds=(0, 8), classes=[0, 1, 2], sampling_rate=0.2, epochs=1).fit(X, Y)
    path = path.save_release(tmp_path / "dp")
    with pytest.raises(TypeError, match="holds a DPGMLVQ, not a GMLVQ"):
        GMLVQ.load(path)
    assert type(DPGMLVQ.load(path)) is DPGMLVQ


def test_release_files_are_readable_by_others_under_the_umask(tmp_path):
    import os
    import stat

    old = os.umask(0o022)
    try:
        path = GLVQ(random_state=0).fit(X, Y).save(tmp_path / "glvq")
    finally:
        os.umask(old)
    for name in ("model.safetensors", "manifest.json"):
        assert stat.S_IMODE((path / name).stat().st_mode) == 0o644, name
