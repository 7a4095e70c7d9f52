"""The anonymizer's encoder in the release format: saved, loaded, encoding exactly as before.

A trained anonymizer is published as its encoder (``AnonymizerFit.save_release``); the
branches, the prior, the trainer, timings and seeds are left out (``RELEASE_DROPS``,
asserted literally below, so a new part of the fit needs a decision). The DP encoder
carries the ledger. Nothing in a release is a pickle, a generator or a seed.
"""

import json
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import dp_proto
from dp_proto.anonymizer import Anonymizer, MLPEncoder
from dp_proto.anonymizer.release import AnonymizerEncoder, DPAnonymizerEncoder
from dp_proto.data import make_entangled_task
from dp_proto.lightning.anonymizer import AnonymizerFit, fit_anonymizer
from dp_proto.lightning.dp_anonymizer import fit_dp_anonymizer
from dp_proto.privacy.release import ReleasedLedger
from dp_proto.release import CARD_FILE, MANIFEST_FILE, TENSORS_FILE, read_release
from tests._release import check_no_pickle, check_no_seed_values, load_in_fresh_process, release_files

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*does not have many workers"),
    pytest.mark.filterwarnings("ignore:.*isinstance\\(treespec, LeafSpec\\)"),
    pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`"),
]

NOISE_SEED, SEED = 918273645, 424242  # must never appear in a release
QUICK = dict(pretrain_regular_epochs=1, pretrain_private_epochs=1, adversarial_epochs=1, enable_progress_bar=False)
# What a release leaves out: the documented decision (RELEASE_DROPS), written out here so
# that a new part of the fit, or a change of the decision, fails this file.
EXPECTED_DROPS = {
    "AnonymizerEncoder": {"regular_head", "private_head", "prior", "trainer", "epoch_times", "restarts", "chosen"},
    "DPAnonymizerEncoder": {
        "regular_head",
        "private_head",
        "prior",
        "trainer",
        "epoch_times",
        "restarts",
        "chosen",
        "noise_generator",
    },
}


def _task(n=200):
    t = make_entangled_task(n, seed=0)
    return t.x, t.regular, t.private  # numpy arrays


def _small():
    return Anonymizer.mlp(20, 4, 8, representation_dim=6, encoder_hidden=(12,), head_hidden=(8,), dropout=0.1)


def _fit(kind):
    x, y, s = _task()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "mlp":
            return fit_anonymizer(x, y, s, anonymizer=_small, batch_size=50, seed=SEED, **QUICK), x
        if kind == "cnn":
            images = torch.rand(24, 1, 8, 8, generator=torch.Generator().manual_seed(0))
            y, s = torch.arange(24) % 2, torch.arange(24) % 3
            model = lambda: Anonymizer.cnn((1, 8, 8), 2, 3, representation_dim=5, channels=(4,), head_hidden=(4,))  # noqa: E731
            return fit_anonymizer(images, y, s, anonymizer=model, batch_size=8, seed=SEED, **QUICK), images
        fit = fit_dp_anonymizer(
            x,
            y,
            s,
            epsilon=4.0,
            delta=1e-5,
            sampling_rate=0.25,
            num_regular=4,
            num_private=8,
            anonymizer=_small,
            seed=SEED,
            noise_seed=NOISE_SEED,
            **QUICK,
        )
        return fit, x


@pytest.fixture(scope="module", params=["mlp", "cnn", "dp"])
def fitted(request):
    return _fit(request.param)


@pytest.fixture(scope="module")
def dp_fitted():
    return _fit("dp")


def _encode(module, x):
    with torch.no_grad():
        return module(torch.as_tensor(x, dtype=torch.float32))


def test_loaded_encoder_encodes_identically(fitted, tmp_path):
    fit, x = fitted
    path = fit.save_release(tmp_path / "release")
    loaded = dp_proto.load_release(path)
    expected = DPAnonymizerEncoder if fit.ledger is not None else AnonymizerEncoder
    assert type(loaded) is expected and not loaded.training
    trained = fit.module.anonymizer.encoder
    probe = torch.cat([torch.as_tensor(x, dtype=torch.float32), 3 * torch.randn(10, *x.shape[1:])])
    z = _encode(trained, probe)
    assert torch.equal(_encode(loaded, probe), z)
    np.testing.assert_array_equal(loaded.transform(probe.numpy().astype(np.float64)), z.numpy())
    assert loaded.input_shape == tuple(trained.input_shape) and loaded.representation_dim == z.shape[1]
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    assert manifest["model"] == f"dp_proto.{expected.__name__}"
    assert manifest["hyperparameters"]["encoder"] == type(trained).__name__
    assert loaded.settings_ == fit.to_encoder().settings_ and loaded.fitted_ == fit.to_encoder().fitted_
    if fit.ledger is None:
        assert manifest["privacy"] == {"private": False}
    else:
        assert isinstance(loaded.ledger_, ReleasedLedger)
        assert loaded.ledger_.get_epsilon() == fit.ledger.get_epsilon() == manifest["privacy"]["epsilon"]
        assert loaded.privacy_ == fit.to_encoder().privacy_
        assert loaded.privacy_scope_ == manifest["privacy"]["scope"]


def test_the_release_leaves_out_exactly_the_documented_parts(fitted, tmp_path):
    fit, _ = fitted
    encoder = fit.to_encoder()
    name = type(encoder).__name__
    assert set(type(encoder).RELEASE_DROPS) == EXPECTED_DROPS[name]
    fit.save_release(tmp_path / "release")
    manifest = json.loads((tmp_path / "release" / MANIFEST_FILE).read_text())
    assert manifest["dropped"] == sorted(EXPECTED_DROPS[name])
    # every field of the fit is released (module -> encoder, ledger -> privacy) or dropped
    assert set(AnonymizerFit._fields) - EXPECTED_DROPS[name] == {"module", "ledger"}
    # of the module: the encoder is released, the branches and the prior buffer are dropped
    assert {n for n, _ in fit.module.anonymizer.named_children()} - EXPECTED_DROPS[name] == {"encoder"}
    assert {n for n, _ in fit.module.named_buffers()} <= EXPECTED_DROPS[name]
    # the tensors are the encoder's and nothing else
    assert set(read_release(tmp_path / "release").tensors) == set(fit.module.anonymizer.encoder.state_dict())


def test_a_dp_release_holds_no_pickle_no_generator_no_seed_and_no_branch(dp_fitted, tmp_path):
    fit, _ = dp_fitted
    path = fit.save_release(tmp_path / "release")
    files = release_files(path)
    assert set(files) == {MANIFEST_FILE, TENSORS_FILE, CARD_FILE}
    check_no_pickle(files)
    text = files[MANIFEST_FILE].decode()
    assert str(NOISE_SEED) not in text and str(SEED) not in text
    card = files[CARD_FILE].decode()  # the card: from the manifest only
    assert str(NOISE_SEED) not in card and str(SEED) not in card
    manifest = json.loads(text)
    published = {k: v for k, v in manifest.items() if k != "hyperparameters_not_saved"}  # reasons, no values
    check_no_seed_values(published)
    assert set(manifest["hyperparameters_not_saved"]) == {"seed", "noise_seed"}
    assert manifest["privacy"]["noise"] == "reproducible"  # said, not the seed
    assert "num_regular" not in text and "num_private" not in text  # not needed to encode
    prior = fit.module.prior.tolist()
    assert not any(f"{p!r}" in text for p in prior)
    header_names = set(read_release(path).tensors)
    assert not any(n.startswith(("regular_head", "private_head", "prior")) for n in header_names)


def test_only_the_built_in_encoders_are_released():
    custom = nn.Sequential(nn.Flatten(), nn.Linear(20, 4), nn.ReLU())
    with pytest.raises(TypeError, match="only the built-in encoders"):
        AnonymizerEncoder(custom)

    class MyEncoder(MLPEncoder):  # a subclass may change forward: not rebuilt from JSON
        pass

    with pytest.raises(TypeError, match="only the built-in encoders"):
        AnonymizerEncoder(MyEncoder(20, 4))


def test_the_release_is_a_snapshot_of_the_encoder():
    encoder = MLPEncoder(5, 3, hidden=(4,))
    released = AnonymizerEncoder(encoder)
    x = torch.randn(7, 5)
    before = _encode(released, x)
    with torch.no_grad():
        next(encoder.parameters()).add_(1.0)  # training the original further...
    assert torch.equal(_encode(released, x), before)  # ...leaves the release as it was
    assert not any(p.requires_grad for p in released.parameters())


def test_private_and_public_releases_are_not_mixed_up(dp_fitted, tmp_path):
    fit, _ = dp_fitted
    release = read_release(fit.save_release(tmp_path / "dp"))
    with pytest.raises(ValueError, match="not 'dp_proto.AnonymizerEncoder'"):
        AnonymizerEncoder.from_release(release)
    public = AnonymizerEncoder(fit.module.anonymizer.encoder).to_release()
    with pytest.raises(ValueError, match="not 'dp_proto.DPAnonymizerEncoder'"):
        DPAnonymizerEncoder.from_release(public)


def test_an_architecture_that_does_not_fit_the_tensors_is_refused(tmp_path):
    path = AnonymizerEncoder(MLPEncoder(5, 3, hidden=(4,))).save_release(tmp_path / "release")
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    manifest["hyperparameters"]["hidden"] = [6]
    (path / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=r"tensor 'net.0.weight' of the release is float32 of shape \(4, 5\)"):
        dp_proto.load_release(path)
    manifest["hyperparameters"] = {"encoder": "torch.nn.Sequential"}
    (path / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="none of the built-in encoders"):
        dp_proto.load_release(path)


def test_the_dp_fit_is_an_anonymizer_fit_with_the_ledger(dp_fitted):
    fit, _ = dp_fitted
    assert type(fit) is AnonymizerFit and fit.ledger is not None


@pytest.mark.slow
def test_a_fresh_process_loads_the_dp_encoder_and_encodes_identically(dp_fitted, tmp_path):
    """Saved here, loaded by another Python: the same representation bit for bit (at the
    same torch thread count) and the same epsilon, composed afresh from the events."""
    fit, x = dp_fitted
    path = fit.save_release(tmp_path / "release")
    got = load_in_fresh_process(path, np.asarray(x[:100], dtype=np.float32), ["transform"], tmp_path)
    assert got["type"] == "DPAnonymizerEncoder"
    z = _encode(fit.module.anonymizer.encoder, x[:100]).numpy()
    np.testing.assert_array_equal(np.array(got["transform"], dtype=np.float32), z)
    assert got["epsilon"] == fit.ledger.get_epsilon()
