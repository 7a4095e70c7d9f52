"""Checkpoints of the anonymizer modules: they hold plain data only (they load
with ``torch.load``'s default ``weights_only=True``), ``load_from_checkpoint(path)``
rebuilds the networks without being handed them, and ``trainer.fit(..., ckpt_path=path)``
resumes a DP run written by another process with the privacy spend continuing."""

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from dp_proto.anonymizer import Anonymizer, MLPHead
from dp_proto.data import make_entangled_task
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.lightning.anonymizer import AnonymizerModule, anonymizer_from_spec, describe_anonymizer
from dp_proto.lightning.datamodule import resumed_seed
from dp_proto.lightning.dp_anonymizer import DPAnonymizerModule
from dp_proto.privacy import PoissonDataLoader
from dp_proto.privacy.events import PrivacyEvent
from dp_proto.privacy.ledger import PrivacyLedger, dp_sgd_event
from dp_proto.privacy.randomness import fresh_generator, noise_generator
from tests._checkpoints import cpu_trainer, dp_sgd_steps, has_generator_state, is_plain, write_in_fresh_process

Q = 0.1  # 10 Poisson steps per epoch
SIGMA = 1.0
DELTA = 1e-5

# Writes the checkpoints in a process of its own; the tests load and resume them.
WRITER = """
import json, sys, warnings
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from dp_proto.privacy import PoissonDataLoader
from torch.utils.data import DataLoader, TensorDataset

from dp_proto.anonymizer import Anonymizer
from dp_proto.data import make_entangled_task
from dp_proto.lightning.anonymizer import AnonymizerModule
from dp_proto.lightning.dp_anonymizer import DPAnonymizerModule
from dp_proto.privacy.ledger import PrivacyLedger, dp_sgd_event
from dp_proto.privacy.mechanisms import noisy_histogram
from dp_proto.privacy.randomness import fresh_generator, noise_generator

warnings.simplefilter("ignore")
out = Path(sys.argv[1])
task = make_entangled_task(200, seed=0)
x, y, s = torch.tensor(task.x), torch.tensor(task.regular), torch.tensor(task.private)


def trainer(name):
    return L.Trainer(
        max_epochs=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
        accelerator="cpu", num_sanity_val_steps=0,
        callbacks=[ModelCheckpoint(dirpath=out / name, save_last=True)],
    )


# DP: a noisy prior charged to the ledger, then 2 of the 3 epochs the budget allows
ledger = PrivacyLedger(default_delta=1e-5)
counts = noisy_histogram(s, 8, 0.1, ledger=ledger, name="private_prior")
prior = counts.clamp_min(1.0) / counts.clamp_min(1.0).sum()
budget = PrivacyLedger.epsilon_of([*ledger.events, dp_sgd_event(1.0, 0.1, 30)], 1e-5) * (1 + 1e-6)
ledger.budget = (budget, 1e-5)
torch.manual_seed(0)
dp = DPAnonymizerModule(
    Anonymizer.mlp(20, 4, 8, representation_dim=8, encoder_hidden=(16,), head_hidden=(8,)),
    prior,
    np.int64(4),  # NumPy values, as a calibration may return them
    ledger=ledger,
    noise_multiplier=np.float64(1.0),
    max_grad_norm=1.0,
    sampling_rate=0.1,
    expected_batch_size=np.float64(20.0),
    generator=noise_generator(7),  # reproducible noise: re-seeded on resume
    pretrain_regular_epochs=1,
    pretrain_private_epochs=0,
    toggle_steps=5,
    lr=0.05,
)
loader = PoissonDataLoader(TensorDataset(x, y, s), 0.1, generator=fresh_generator())
trainer("dp").fit(dp, loader)

# non-private, with a CNN encoder (records as 1x4x5 images) and dropout
images = x.reshape(-1, 1, 4, 5)
plain = AnonymizerModule(
    Anonymizer.cnn((1, 4, 5), 4, 8, representation_dim=8, channels=(4,), head_hidden=(8,), dropout=0.1),
    torch.full((8,), 1 / 8),
    4,
    pretrain_regular_epochs=1,
    pretrain_private_epochs=1,
)
trainer("plain").fit(plain, DataLoader(TensorDataset(images, y, s), batch_size=50, shuffle=True))

with torch.no_grad():
    result = {
        "budget": budget,
        "dp": {
            "z": dp.anonymizer.eval().encode(x).tolist(),
            "prior": dp.prior.tolist(),
            "epsilon": ledger.get_epsilon(1e-5),
            "events": ledger.state_dict()["events"],
            "steps_recorded": dp.steps_recorded,
            "adversarial_step": dp.adversarial_step,
        },
        "plain": {"z": plain.anonymizer.eval().encode(images).tolist()},
    }
(out / "result.json").write_text(json.dumps(result))
"""


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Checkpoints written by another process: ``dp/last.ckpt`` (DP-SGD, 2 epochs of a
    3-epoch budget, after a noisy prior) and ``plain/last.ckpt`` (non-private), with what
    that process saw."""
    out = tmp_path_factory.mktemp("written")
    return out, write_in_fresh_process(WRITER, out)


def _task():
    task = make_entangled_task(200, seed=0)
    return torch.tensor(task.x), torch.tensor(task.regular), torch.tensor(task.private)


def _anonymizer():
    return Anonymizer.mlp(20, 4, 8, representation_dim=8, encoder_hidden=(16,), head_hidden=(8,))


def _loader(n=200):
    x, y, s = _task()
    return PoissonDataLoader(TensorDataset(x[:n], y[:n], s[:n]), Q, generator=fresh_generator())


# -- what a checkpoint holds ----------------------------------------------------------------------------------
def test_a_dp_anonymizer_checkpoint_holds_plain_data_only(tmp_path):
    with pytest.warns(PrivacyLeakWarning):
        generator = noise_generator(3)  # the worst case: reproducible noise
    module = DPAnonymizerModule(
        _anonymizer(),
        torch.full((8,), 1 / 8),
        np.int64(4),
        ledger=PrivacyLedger(budget=(50.0, DELTA)),
        noise_multiplier=np.float64(SIGMA),
        max_grad_norm=np.float32(1.0),
        sampling_rate=np.float64(Q),
        expected_batch_size=np.float64(5.0),
        generator=generator,
        lam=np.float64(2.0),
        toggle_steps=3,
        pretrain_regular_epochs=1,
        pretrain_private_epochs=0,
    )
    cpu_trainer(1, ckpt_dir=tmp_path).fit(module, _loader(50))
    checkpoint = torch.load(tmp_path / "last.ckpt")  # torch's default: weights_only=True
    assert set(checkpoint) >= {
        "state_dict",
        "optimizer_states",
        "hyper_parameters",
        "anonymizer_adversarial_step",
        "privacy_ledger",
        "privacy_ledger_origins",
        "dp_sgd",
    }
    for key in ("hyper_parameters", "privacy_ledger", "privacy_ledger_origins", "dp_sgd"):
        assert is_plain(checkpoint[key]), key
    hparams = checkpoint["hyper_parameters"]
    assert not {"anonymizer", "prior", "ledger", "generator"} & set(hparams)
    assert type(hparams["noise_multiplier"]) is float and type(hparams["num_regular"]) is int
    assert hparams["sampling_rate"] == Q and hparams["toggle_steps"] == 3 and hparams["lam"] == 2.0
    assert hparams["anonymizer_spec"]["encoder"] == describe_anonymizer(module.anonymizer)["encoder"]
    assert checkpoint["dp_sgd"] == {"steps_recorded": 10, "noise": "reproducible"}
    assert checkpoint["privacy_ledger"]["budget"] == [50.0, DELTA]
    assert set(checkpoint["state_dict"]) >= {"prior", "anonymizer.encoder.net.0.weight"}
    assert not has_generator_state(checkpoint)  # nothing that replays the noise, even when reproducible


def test_the_anonymizer_spec_rebuilds_the_networks():
    for anonymizer in (
        _anonymizer(),
        Anonymizer.cnn((1, 8, 8), 3, 5, representation_dim=6, channels=(4, 2), head_hidden=(7, 5), dropout=0.2),
        _anonymizer().double(),
    ):
        spec = describe_anonymizer(anonymizer)
        assert is_plain(spec)
        rebuilt = anonymizer_from_spec(spec)
        assert describe_anonymizer(rebuilt) == spec
        rebuilt.load_state_dict(anonymizer.state_dict())
        x = torch.rand(4, *anonymizer.encoder.input_shape, dtype=next(anonymizer.parameters()).dtype)
        torch.testing.assert_close(rebuilt.eval()(x), anonymizer.eval()(x))

    custom = Anonymizer(nn.Linear(20, 8), MLPHead(8, 4), MLPHead(8, 8))
    assert describe_anonymizer(custom) is None  # a custom encoder: load_from_checkpoint needs anonymizer=
    module = AnonymizerModule(custom, torch.full((8,), 1 / 8), 4)
    assert module.hparams["anonymizer_spec"] is None
    with pytest.raises(TypeError, match="needs an anonymizer"):
        AnonymizerModule(**module.hparams)
    with pytest.raises(ValueError, match="none of the built-in encoders"):
        anonymizer_from_spec({**describe_anonymizer(_anonymizer()), "encoder": {"encoder": "os.system"}})


# -- from a checkpoint written by another process ----------------------------------------------------------------
@pytest.mark.slow
def test_load_from_checkpoint_in_a_new_process_encodes_identically_and_keeps_the_spend(written):
    out, result = written
    path = out / "dp" / "last.ckpt"
    assert is_plain(torch.load(path)["hyper_parameters"])  # torch's default: weights_only=True
    loaded = DPAnonymizerModule.load_from_checkpoint(path)  # no networks, no prior, no ledger
    x, _, _ = _task()
    with torch.no_grad():
        z = loaded.anonymizer.eval().encode(x)
    torch.testing.assert_close(z, torch.tensor(result["dp"]["z"]))
    assert torch.equal(loaded.prior, torch.tensor(result["dp"]["prior"]))  # the released noisy prior
    assert loaded.noise_multiplier == SIGMA and loaded.sampling_rate == Q and loaded.expected_batch_size == 20.0
    assert loaded.num_regular == 4 and loaded.num_private == 8 and loaded.toggle_steps == 5
    assert loaded.steps_recorded == result["dp"]["steps_recorded"] == 20
    assert loaded.adversarial_step == result["dp"]["adversarial_step"] == 10
    # a new ledger holding the checkpoint's history (the prior and 20 steps) and budget
    assert loaded.ledger.state_dict()["events"] == result["dp"]["events"]
    assert [e.name for e in loaded.ledger.events] == ["private_prior", "dp_sgd"]
    assert loaded.ledger.get_epsilon(DELTA) == pytest.approx(result["dp"]["epsilon"])
    assert loaded.ledger.budget == (result["budget"], DELTA)

    # the networks and the ledger may still be passed explicitly
    ledger = PrivacyLedger()
    again = DPAnonymizerModule.load_from_checkpoint(path, anonymizer=_anonymizer(), ledger=ledger, weights_only=True)
    assert again.ledger is ledger and ledger.get_epsilon(DELTA) == pytest.approx(result["dp"]["epsilon"])
    with torch.no_grad():
        assert torch.equal(again.anonymizer.eval().encode(x), z)

    plain = AnonymizerModule.load_from_checkpoint(out / "plain" / "last.ckpt")  # the non-private module, too
    with torch.no_grad():
        z_plain = plain.anonymizer.eval().encode(x.reshape(-1, 1, 4, 5))
    torch.testing.assert_close(z_plain, torch.tensor(result["plain"]["z"]))
    assert plain.anonymizer.encoder.dropout == 0.1 and plain.anonymizer.encoder.channels == (4,)


@pytest.mark.slow
def test_fit_resumes_a_checkpoint_of_another_process_without_resetting_the_budget(written):
    out, result = written
    path = out / "dp" / "last.ckpt"
    checkpoint = torch.load(path, weights_only=True)
    with pytest.warns(PrivacyLeakWarning):
        generator = noise_generator(7)
    ledger = PrivacyLedger()  # a new process: a new ledger (without a budget: the checkpoint's applies)
    module = DPAnonymizerModule(
        _anonymizer(),
        torch.full((8,), 1 / 8),  # replaced by the checkpoint's prior
        4,
        ledger=ledger,
        noise_multiplier=SIGMA,
        max_grad_norm=1.0,
        sampling_rate=Q,
        expected_batch_size=20.0,
        generator=generator,
        pretrain_regular_epochs=1,
        pretrain_private_epochs=0,
        toggle_steps=5,
        lr=0.05,
    )
    trainer = cpu_trainer(4)
    trainer.fit(module, _loader(), ckpt_path=path, weights_only=True)
    # epoch 3 runs (30 steps: the budget), epoch 4 is refused before its first step
    assert dp_sgd_steps(ledger) == 30 and module.steps_recorded == 30 and trainer.global_step == 30
    assert module.stopped_by_budget and ledger.budget == (result["budget"], DELTA)
    prior_event = PrivacyEvent.from_dict(result["dp"]["events"][0])  # the writer's noisy prior
    assert prior_event.name == "private_prior"
    all_events = [prior_event, dp_sgd_event(SIGMA, Q, 30)]  # epsilon of all steps, as one uninterrupted run
    assert ledger.get_epsilon(DELTA) == pytest.approx(PrivacyLedger.epsilon_of(all_events, DELTA))
    assert result["dp"]["epsilon"] < ledger.get_epsilon(DELTA) <= result["budget"] * (1 + 1e-9)
    assert torch.equal(module.prior, torch.tensor(result["dp"]["prior"]))
    assert module.adversarial_step == 20  # the adversarial phase's step count went on
    # the reproducible noise: re-seeded from its seed and the checkpoint's step, not replayed
    assert checkpoint["global_step"] == 20 and generator.initial_seed() == resumed_seed(7, 20)
