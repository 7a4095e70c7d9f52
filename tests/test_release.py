"""The release format core (dp_proto.release): manifest checks, the registry, JSON values.

The models' own round trips are in tests/lvq/test_release.py; here a small GLVQ serves as
the release whose manifest and tensor file are tampered with.
"""

import importlib
import json

import numpy as np
import pytest
from sklearn.datasets import load_iris

import dp_proto
from dp_proto.lvq import GLVQ
from dp_proto.privacy import PureEvent
from dp_proto.privacy.ledger import PrivacyLedger
from dp_proto.privacy.release import ledger_from_manifest, ledger_manifest, summary_from_manifest
from dp_proto.release import (
    BUILTIN_MODELS,
    FORMAT_VERSION,
    MANIFEST_FILE,
    TENSORS_FILE,
    Release,
    decode_hyperparameters,
    decode_labels,
    encode_hyperparameters,
    encode_labels,
    load_release,
    model_class,
    read_release,
    register_model,
    registered_name,
)

X, Y = load_iris(return_X_y=True)


@pytest.fixture(scope="module")
def glvq():
    return GLVQ(random_state=0).fit(X, Y)


@pytest.fixture
def release_dir(glvq, tmp_path):
    return glvq.save(tmp_path / "release")


def _edit_manifest(path, edit):
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    edit(manifest)
    (path / MANIFEST_FILE).write_text(json.dumps(manifest))


def test_top_level_load_release(release_dir, glvq):
    assert dp_proto.load_release is load_release
    np.testing.assert_array_equal(dp_proto.load_release(release_dir / MANIFEST_FILE).predict(X), glvq.predict(X))


def test_the_manifest_is_sorted_readable_json(release_dir):
    text = (release_dir / MANIFEST_FILE).read_text()
    manifest = json.loads(text)
    assert text == json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    assert manifest["format"] == {"name": "dp-proto-release", "version": FORMAT_VERSION}
    assert manifest["dp_proto_version"] == dp_proto.__version__
    # the model's own tensors, float32 (the estimators' default training dtype)
    assert manifest["tensors"]["entries"]["prototypes"] == {"dtype": "float32", "shape": [3, 4]}
    assert manifest["public"]["classes"] == {"values": [0, 1, 2], "dtype": np.dtype(np.int64).str}
    assert manifest["public"]["n_features"] == 4
    assert set(manifest["fitted"]) == {"n_iter_", "loss_"}


def test_a_newer_format_version_is_refused(release_dir):
    _edit_manifest(release_dir, lambda m: m["format"].update(version=FORMAT_VERSION + 1))
    with pytest.raises(ValueError, match=f"format version {FORMAT_VERSION + 1}.*upgrade dp-proto"):
        load_release(release_dir)


def test_an_unknown_model_is_refused(release_dir):
    _edit_manifest(release_dir, lambda m: m.update(model="somebody.EvilModel"))
    with pytest.raises(ValueError, match="'somebody.EvilModel', which this dp-proto does not know"):
        load_release(release_dir)


def test_a_tensor_shape_that_disagrees_with_the_manifest_is_refused(release_dir):
    _edit_manifest(release_dir, lambda m: m["tensors"]["entries"]["prototypes"].update(shape=[4, 4]))
    with pytest.raises(
        ValueError, match=r"'prototypes' is float32 of shape \(3, 4\).*manifest says float32 of shape \(4, 4\)"
    ):
        load_release(release_dir)


def test_a_changed_tensor_file_is_refused(release_dir):
    data = bytearray((release_dir / TENSORS_FILE).read_bytes())
    data[-1] ^= 1
    (release_dir / TENSORS_FILE).write_bytes(bytes(data))
    with pytest.raises(ValueError, match="SHA-256"):
        load_release(release_dir)


def test_missing_or_extra_tensors_and_other_folders_are_refused(release_dir, tmp_path):
    _edit_manifest(release_dir, lambda m: m["tensors"]["entries"].pop("prototype_labels"))
    with pytest.raises(ValueError, match="but the manifest lists"):
        load_release(release_dir)
    with pytest.raises(ValueError, match="has no manifest.json"):
        load_release(tmp_path)
    _edit_manifest(release_dir, lambda m: m.update(format={"name": "other", "version": 1}))
    with pytest.raises(ValueError, match="not a dp-proto release"):
        load_release(release_dir)


def test_the_tensor_file_must_lie_in_the_release(release_dir):
    _edit_manifest(release_dir, lambda m: m["tensors"].update(file="../x.safetensors"))
    with pytest.raises(ValueError, match="must lie in the release directory"):
        load_release(release_dir)


def test_every_builtin_model_registers_under_its_name():
    for name, module in BUILTIN_MODELS.items():
        cls = model_class(name)
        assert cls.__module__ == module and cls._release_name == name
        assert importlib.import_module(module) is not None


def test_an_unregistered_subclass_cannot_be_saved(tmp_path):
    class MyGLVQ(GLVQ):
        pass

    est = MyGLVQ(random_state=0).fit(X, Y)
    with pytest.raises(TypeError, match="has no release format of its own"):
        est.save(tmp_path / "release")
    assert registered_name(GLVQ()) == "dp_proto.GLVQ"


def test_register_model_checks_the_class():
    with pytest.raises(TypeError, match="has no to_release"):
        register_model("test.Nothing")(type("Nothing", (), {}))
    with pytest.raises(ValueError, match="is taken by"):
        register_model("dp_proto.GLVQ")(type("Impostor", (), {"to_release": len, "from_release": len}))


def test_a_third_party_model_plugs_in(tmp_path):
    @register_model("tests.Constant")
    class Constant:
        def __init__(self, value=None):
            self.value = value

        def to_release(self):
            return Release(model=registered_name(self), tensors={"value": np.asarray(self.value)})

        @classmethod
        def from_release(cls, release):
            return cls(release.tensor("value", ndim=1))

    Constant(np.arange(3.0)).to_release().save(tmp_path / "c")
    loaded = load_release(tmp_path / "c")
    assert isinstance(loaded, Constant) and loaded.value.tolist() == [0.0, 1.0, 2.0]
    assert read_release(tmp_path / "c").privacy == {"private": False}


def test_hyperparameters_become_json_and_back():
    params = {
        "bounds": (np.zeros(2), np.float64(16.0)),
        "classes": range(3),
        "per_class": {0: 2, "a": 1},
        "names": {"x": [1, 2]},
        "flag": np.bool_(True),
        "n": np.int64(5),
        "rng": np.random.RandomState(0),
        "noise_seed": 7,
    }
    encoded, not_saved = encode_hyperparameters(params, withheld={"noise_seed": "replays the noise"})
    assert json.loads(json.dumps(encoded)) == encoded
    assert encoded["bounds"] == [[0.0, 0.0], 16.0] and encoded["classes"] == [0, 1, 2]
    assert encoded["rng"] is None and encoded["noise_seed"] is None
    assert set(not_saved) == {"rng", "noise_seed"} and "RandomState" in not_saved["rng"]
    decoded = decode_hyperparameters(encoded, not_saved)
    assert decoded["per_class"] == {0: 2, "a": 1} and decoded["names"] == {"x": [1, 2]}
    assert decoded["flag"] is True and decoded["n"] == 5 and "rng" not in decoded


def test_labels_keep_their_dtype():
    for labels in (np.array([3, 1]), np.array(["b", "a"]), np.array([0.5, 2.0]), np.array(["x", 1], dtype=object)):
        back = decode_labels(json.loads(json.dumps(encode_labels(labels))))
        assert back.dtype == labels.dtype and back.tolist() == labels.tolist()
    with pytest.raises(ValueError, match="numbers or strings"):
        encode_labels(np.array([object()], dtype=object))


def test_a_release_writes_numeric_tensors_only(tmp_path):
    with pytest.raises(TypeError, match="numeric tensors only"):
        Release(model="x", tensors={"s": np.array(["a"])}).save(tmp_path / "r")
    assert not (tmp_path / "r" / MANIFEST_FILE).exists()


def test_the_ledger_section_round_trips_and_is_read_only():
    ledger = PrivacyLedger(budget=(2.0, 1e-5))
    ledger.spend(PureEvent(0.5, name="counts"))
    ledger.note_noise_source("fresh")
    ledger.get_epsilon()  # fills the caches, which the section never holds
    section = json.loads(json.dumps(ledger_manifest(ledger, scope="the records passed to fit")))
    assert set(section) == {
        "private", "epsilon", "delta", "accountant", "neighbouring", "budget", "noise",
        "default_delta", "noise_sources", "ledger_version", "events", "scope",
    }  # fmt: skip
    assert section["epsilon"] == ledger.get_epsilon() and section["events"] == [e.to_dict() for e in ledger.events]
    released = ledger_from_manifest(section)
    assert released.get_epsilon() == ledger.get_epsilon() and released.budget == ledger.budget
    assert summary_from_manifest(section) == ledger.summary()
    with pytest.raises(RuntimeError, match="read-only"):
        released.spend(PureEvent(0.1))
    with pytest.raises(ValueError, match="not private"):
        ledger_from_manifest({"private": False})
    with pytest.raises(ValueError, match=r"states epsilon 0.4 at delta 1e-05, but its events compose to 0\.49998"):
        ledger_from_manifest({**section, "epsilon": 0.4})
    # another composition order moves epsilon in the last digits: the stated value stands
    assert ledger_from_manifest({**section, "epsilon": 0.5 * (1 - 1e-9)}).get_epsilon() == 0.5 * (1 - 1e-9)


def test_a_release_as_bytes_round_trips_and_is_checked(glvq):
    from dp_proto.release import release_from_bytes

    data = glvq.to_release().to_bytes()
    release = release_from_bytes(data)
    loaded = model_class(release.model).from_release(release)
    np.testing.assert_array_equal(loaded.prototypes_, glvq.prototypes_)
    assert release.manifest(sha256="x")["hyperparameters"] == glvq.to_release().manifest(sha256="x")["hyperparameters"]
    changed = bytearray(data)
    changed[-1] ^= 1
    with pytest.raises(ValueError, match="SHA-256"):
        release_from_bytes(bytes(changed))
    with pytest.raises(ValueError, match="too short"):
        release_from_bytes(b"\x01")
    with pytest.raises(ValueError, match="announce"):
        release_from_bytes((10**6).to_bytes(8, "little") + data[8:])
    with pytest.raises(ValueError, match="not valid JSON"):
        release_from_bytes((3).to_bytes(8, "little") + b"{{{" + data[8:])


def test_saving_over_a_release_is_refused_unless_asked(release_dir, glvq):
    before = (release_dir / MANIFEST_FILE).read_bytes()
    other = GLVQ(prototypes_per_class=2, random_state=0).fit(X, Y)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        other.save(release_dir)
    assert (release_dir / MANIFEST_FILE).read_bytes() == before  # nothing was written
    other.save_release(release_dir, overwrite=True)
    np.testing.assert_array_equal(load_release(release_dir).predict(X), other.predict(X))


def test_a_release_carries_a_card_written_from_its_manifest(tmp_path):
    """README.md beside the manifest: the guarantee, every noisy release, the sampling
    assumption, the public inputs and the versions (Ponomareva et al. 2023); it is never
    read back, so a release without it (or with it edited) loads the same."""
    from dp_proto.lvq.private import DPGLVQ
    from dp_proto.release import CARD_FILE, release_card

    model = DPGLVQ(epsilon=1.0, bounds=(0, 8), classes=[0, 1, 2], sampling_rate=0.2, epochs=2).fit(X, Y)
    path = model.save_release(tmp_path / "dp")
    card = (path / CARD_FILE).read_text(encoding="utf-8")
    manifest = json.loads((path / MANIFEST_FILE).read_text(encoding="utf-8"))
    assert card == release_card(manifest)
    epsilon = manifest["privacy"]["epsilon"]
    assert f"| guarantee | ({epsilon:.4g}, 1e-05)-DP |" in card
    assert "| neighbouring datasets | add/remove one record |" in card
    assert "| dp_sgd | DP-SGD" in card and "sampling rate 0.2" in card and "Sampling assumption" in card
    assert "- label set: [0, 1, 2]" in card and manifest["tensors"]["sha256"] in card
    assert "membership inference (TPR at low FPR): not measured" in card
    (path / CARD_FILE).unlink()
    np.testing.assert_array_equal(load_release(path).predict(X), model.predict(X))

    plain = GLVQ(random_state=0).fit(X, Y).save(tmp_path / "plain")
    assert "**This model is not differentially private.**" in (plain / CARD_FILE).read_text(encoding="utf-8")


def test_a_registered_settings_object_round_trips_as_plain_json():
    from dp_proto.lvq.private import BinTraining
    from dp_proto.release import decode_hyperparameters, encode_hyperparameters

    encoded, not_saved = encode_hyperparameters({"training": BinTraining(epochs=3, lr=0.02), "num_bins": 5})
    assert not_saved == {}
    assert json.loads(json.dumps(encoded))["training"] == {
        "__recipe__": "dp_proto.BinTraining",
        "fields": {"epochs": 3, "batch_size": 64, "lr": 0.02},
    }
    assert decode_hyperparameters(encoded) == {"training": BinTraining(epochs=3, lr=0.02), "num_bins": 5}
    forged = {"training": {"__recipe__": "os.system", "fields": {}}}
    with pytest.raises(ValueError, match="not registered"):
        decode_hyperparameters(forged)
