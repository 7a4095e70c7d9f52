"""Checkpoints and resume: checkpoints hold plain data only (they load with
``torch.load``'s default ``weights_only=True``), ``load_from_checkpoint(path)`` and
``trainer.fit(..., ckpt_path=path)`` work from a checkpoint another process wrote, the
privacy spend continues from the checkpoint's (a budget stop still triggers), the noise
is re-seeded on resume only when it is reproducible, and progress goes to stderr."""

import io
import json
import math
import sys
from types import SimpleNamespace

import lightning as L
import numpy as np
import pytest
import torch
import yaml
from sklearn.datasets import load_iris
from torch import nn

from dp_proto.cli import main
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.lightning import ArrayDataModule, DPLVQModule, LVQModule, PrivacySpendCallback
from dp_proto.lightning.callbacks import StderrProgressBar
from dp_proto.lightning.datamodule import resumed_seed
from dp_proto.lightning.module import describe_model, model_from_spec, plain_value
from dp_proto.lvq import GLVQLayer, GMLVQLayer, LGMLVQLayer, PrototypeModel
from dp_proto.privacy import PrivacyLedger, PublicBoundsScaler, dp_sgd_event
from dp_proto.privacy.randomness import fresh_generator, noise_generator
from tests._checkpoints import cpu_trainer, dp_sgd_steps, has_generator_state, is_plain, write_in_fresh_process

Q = 0.1  # 10 Poisson steps per epoch on iris' 105 training records
SIGMA = 2.0

# Writes the checkpoints in a process of its own; the tests load and resume them.
WRITER = """
import json, sys, warnings
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from sklearn.datasets import load_iris

from dp_proto.lightning import ArrayDataModule, DPLVQModule, LVQModule, PrivacySpendCallback
from dp_proto.lvq import GMLVQLayer, PrototypeModel
from dp_proto.privacy import PrivacyLedger, PublicBoundsScaler, dp_sgd_event

warnings.simplefilter("ignore")
out = Path(sys.argv[1])
X, y = load_iris(return_X_y=True)
X = PublicBoundsScaler(0.0, 8.0).fit_transform(X)
probe = torch.as_tensor(X, dtype=torch.float32)


def fit(module, dm, name, callbacks=()):
    trainer = L.Trainer(
        max_epochs=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
        accelerator="cpu", num_sanity_val_steps=0,
        callbacks=[*callbacks, ModelCheckpoint(dirpath=out / name, save_last=True)],
    )
    trainer.fit(module, datamodule=dm)


budget = PrivacyLedger.epsilon_of([dp_sgd_event(2.0, 0.1, 30)], 1e-5)  # exactly three epochs
ledger = PrivacyLedger(budget=(budget, 1e-5))
dp = DPLVQModule(
    PrototypeModel(GMLVQLayer(4, 3, prototypes=torch.zeros(3, 4)), [0, 1, 2]),
    ledger=ledger,
    noise_multiplier=np.float64(2.0),  # NumPy scalars, as a calibration may return them
    max_grad_norm=1.0,
    sampling_rate=0.1,
    expected_batch_size=np.float64(10.0),
    lr=0.05,
)
fit(dp, ArrayDataModule(X, y, scaling="none", sampling_rate=0.1, seed=0), "dp", [PrivacySpendCallback(ledger)])

lvq = LVQModule(PrototypeModel(GMLVQLayer(4, 3, rank=2), [0, 1, 2]), lr=0.05, image_shape=(2, 2))
plain = ArrayDataModule(X, y, scaling="none", seed=0, batch_size=32)
lvq.init_prototypes(*plain.train_tensors())
fit(lvq, plain, "lvq")

with torch.no_grad():
    result = {
        "budget": budget,
        "dp": {"distances": dp.model(probe).tolist(), "epsilon": ledger.get_epsilon(1e-5),
               "events": ledger.state_dict()["events"], "steps_recorded": dp.steps_recorded},
        "lvq": {"distances": lvq.model(probe).tolist()},
    }
(out / "result.json").write_text(json.dumps(result))
"""


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Checkpoints written by another process: ``dp/last.ckpt`` (DP-SGD, 2 epochs of a
    3-epoch budget) and ``lvq/last.ckpt`` (non-private), with what that process saw."""
    out = tmp_path_factory.mktemp("written")
    return out, write_in_fresh_process(WRITER, out)


def _probe():
    X, _ = load_iris(return_X_y=True)
    return torch.as_tensor(PublicBoundsScaler(0.0, 8.0).fit_transform(X), dtype=torch.float32)


def _data(**kwargs):
    X, y = load_iris(return_X_y=True)
    return ArrayDataModule(
        PublicBoundsScaler(0.0, 8.0).fit_transform(X), y, scaling="none", sampling_rate=Q, seed=0, **kwargs
    )


def _model(layer=None):
    return PrototypeModel(layer if layer is not None else GMLVQLayer(4, 3, prototypes=torch.zeros(3, 4)), [0, 1, 2])


def _module(ledger, **kwargs):
    return DPLVQModule(
        _model(),
        ledger=ledger,
        noise_multiplier=SIGMA,
        max_grad_norm=1.0,
        sampling_rate=Q,
        expected_batch_size=10.0,
        lr=0.05,
        **kwargs,
    )


class _OptimizerAtStart(L.Callback):
    """The optimizer's state when training (re)starts, after a checkpoint was restored."""

    def on_train_start(self, trainer, pl_module):
        self.state = {
            k: {n: t.clone() for n, t in v.items()} for k, v in trainer.optimizers[0].state_dict()["state"].items()
        }


# -- what a checkpoint holds ----------------------------------------------------------------------------------
def test_a_private_checkpoint_holds_plain_data_only(tmp_path):
    ledger = PrivacyLedger(budget=(50.0, 1e-5))
    with pytest.warns(PrivacyLeakWarning):
        generator = noise_generator(3)  # the worst case: reproducible noise
    module = DPLVQModule(
        _model(),
        ledger=ledger,
        noise_multiplier=np.float64(SIGMA),
        max_grad_norm=np.float32(1.0),
        sampling_rate=Q,
        expected_batch_size=np.float64(10.0),
        lr=0.05,
        image_shape=(2, 2),
        generator=generator,
    )
    cpu_trainer(1, [PrivacySpendCallback(ledger)], tmp_path).fit(module, datamodule=_data())
    path = tmp_path / "last.ckpt"
    checkpoint = torch.load(path)  # torch's default: weights_only=True
    assert set(checkpoint) >= {"state_dict", "optimizer_states", "hyper_parameters", "privacy_ledger", "dp_sgd"}
    for key in ("hyper_parameters", "privacy_ledger", "privacy_ledger_origins", "dp_sgd"):
        assert is_plain(checkpoint[key]), key
    hparams = checkpoint["hyper_parameters"]
    assert not {"model", "ledger", "generator", "display_transform"} & set(hparams)
    assert type(hparams["noise_multiplier"]) is float and hparams["image_shape"] == [2, 2]
    assert hparams["model_spec"]["layer"] == "gmlvq" and hparams["model_spec"]["prototype_labels"] == [0, 1, 2]
    assert checkpoint["dp_sgd"] == {"steps_recorded": 10, "noise": "reproducible"}
    assert checkpoint["privacy_ledger"]["budget"] == [50.0, 1e-5]
    assert not has_generator_state(checkpoint)  # nothing that replays the noise, even when reproducible


def test_hyperparameters_become_plain_data():
    assert plain_value(np.float64(0.5), "x") == 0.5 and type(plain_value(np.int64(3), "x")) is int
    assert plain_value((1, np.array([2.0, 3.0])), "x") == [1, [2.0, 3.0]]
    assert plain_value({"a": torch.tensor(1.5), 2: np.bool_(True)}, "x") == {"a": 1.5, "2": True}
    with pytest.raises(TypeError, match="'x' is a Generator"):
        plain_value(torch.Generator(), "x")


@pytest.mark.parametrize(
    "layer",
    [
        GLVQLayer(4, 3),
        GMLVQLayer(4, 3, rank=2, dtype=torch.float64),
        LGMLVQLayer(4, 3, rank=3, normalize=True),
    ],
    ids=["glvq", "gmlvq-rank2-float64", "lgmlvq"],
)
def test_model_spec_rebuilds_the_architecture(layer):
    model = _model(layer)
    spec = describe_model(model)
    assert is_plain(spec)
    rebuilt = model_from_spec(spec)
    assert type(rebuilt.layer) is type(layer) and describe_model(rebuilt) == spec
    rebuilt.load_state_dict(model.state_dict())
    x = torch.rand(5, 4, dtype=layer.prototypes.dtype)
    torch.testing.assert_close(rebuilt(x), model(x))


def test_a_backbone_is_rebuilt_only_from_the_allowlist():
    from dp_proto.backbones import small_cnn

    model = PrototypeModel(GMLVQLayer(8, 2), [0, 1], backbone=small_cnn(1, 8))
    assert describe_model(model) is None  # an unnamed backbone: load_from_checkpoint needs model=
    spec = describe_model(model, backbone={"name": "small_cnn", "in_channels": 1, "out_features": 8})
    model_from_spec(spec).load_state_dict(model.state_dict())
    with pytest.raises(ValueError, match="does not match"):
        describe_model(model, backbone={"name": "small_cnn", "in_channels": 3, "out_features": 8})
    with pytest.raises(ValueError, match="unknown backbone 'os.system'"):
        model_from_spec({**spec, "backbone": {"name": "os.system"}})

    module = LVQModule(PrototypeModel(GLVQLayer(2, 2), [0, 1], backbone=nn.Linear(3, 2)))
    assert module.hparams["model_spec"] is None
    with pytest.raises(TypeError, match="needs a model"):
        LVQModule(**module.hparams)


# -- noise and coins on resume ------------------------------------------------------------------------------
def test_the_noise_is_reseeded_on_resume_only_when_reproducible(tmp_path):
    with pytest.warns(PrivacyLeakWarning):
        generator = noise_generator(5)
    ledger = PrivacyLedger()
    cpu_trainer(1, [PrivacySpendCallback(ledger)], tmp_path).fit(
        _module(ledger, generator=generator), datamodule=_data()
    )
    checkpoint = torch.load(tmp_path / "last.ckpt", weights_only=True)

    # reproducible: a stream of its own, derived from the seed and the checkpoint's step
    with pytest.warns(PrivacyLeakWarning):
        resumed = [noise_generator(5), noise_generator(5)]
    for gen in resumed:
        _module(PrivacyLedger(), generator=gen).on_load_checkpoint(checkpoint)
    assert resumed[0].initial_seed() == resumed[1].initial_seed() == resumed_seed(5, 10) != 5
    assert torch.equal(resumed[0].get_state(), resumed[1].get_state())  # reproducible from seed and checkpoint

    # fresh entropy: nothing is restored, the generator is left alone (None: a fresh one per fit)
    fresh = fresh_generator()
    state = fresh.get_state()
    module = _module(PrivacyLedger(), generator=fresh)
    module.on_load_checkpoint(checkpoint)
    assert torch.equal(fresh.get_state(), state)
    default = _module(PrivacyLedger())
    default.on_load_checkpoint(checkpoint)
    assert default._noise_generator is None and default.steps_recorded == 10


def test_seeded_poisson_coins_do_not_replay_after_resume(tmp_path):
    with pytest.warns(PrivacyLeakWarning):
        dm = _data(sampling_seed=3)

    def batches(step):
        dm.trainer = SimpleNamespace(global_step=step) if step is not None else None
        return [sorted(x[:, 0].tolist()) for x, _ in dm.train_dataloader()]

    assert batches(None) == batches(0)  # a first fit: the seed's stream, as before
    assert batches(20) == batches(20) != batches(0)  # resumed at step 20: a stream of its own

    # in a real resume the step is restored before the training loader is made
    seen = []
    original = dm.train_dataloader

    def recording():
        seen.append(dm.trainer.global_step)
        return original()

    ledger = PrivacyLedger()
    cpu_trainer(1, [PrivacySpendCallback(ledger)], tmp_path).fit(_module(ledger), datamodule=dm)
    dm.train_dataloader = recording  # type: ignore[method-assign]
    cpu_trainer(2, [PrivacySpendCallback(ledger)]).fit(_module(ledger), datamodule=dm, ckpt_path=tmp_path / "last.ckpt")
    assert seen == [10]


# -- from a checkpoint written by another process ----------------------------------------------------------------
@pytest.mark.slow
def test_load_from_checkpoint_in_a_new_process_predicts_identically_and_keeps_the_spend(written):
    out, result = written
    path = out / "dp" / "last.ckpt"
    loaded = DPLVQModule.load_from_checkpoint(path)  # no model, no ledger: torch's default weights_only=True
    again = DPLVQModule.load_from_checkpoint(path, weights_only=True)
    probe = _probe()
    with torch.no_grad():
        distances = loaded.model(probe)
        # the DP module trains its layer in float64; the writer stored those distances
        torch.testing.assert_close(distances, torch.tensor(result["dp"]["distances"], dtype=distances.dtype))
        assert torch.equal(again.model(probe), distances)
    assert loaded.noise_multiplier == SIGMA and loaded.expected_batch_size == 10.0 and loaded.sampling_rate == Q
    assert loaded.steps_recorded == result["dp"]["steps_recorded"] == 20
    # a new ledger holding the checkpoint's history and budget
    assert loaded.ledger.state_dict()["events"] == result["dp"]["events"]
    assert loaded.ledger.get_epsilon(1e-5) == pytest.approx(result["dp"]["epsilon"])
    assert loaded.ledger.budget == (result["budget"], 1e-5)

    # training the loaded module goes on spending from the checkpoint's epsilon: one more
    # epoch fits the budget, the next is refused before any step (a clean stop)
    cpu_trainer(1, [PrivacySpendCallback(loaded.ledger)]).fit(loaded, datamodule=_data())
    assert dp_sgd_steps(loaded.ledger) == 30 and not loaded.stopped_by_budget
    assert loaded.ledger.get_epsilon(1e-5) > result["dp"]["epsilon"]
    cpu_trainer(1, [PrivacySpendCallback(loaded.ledger)]).fit(loaded, datamodule=_data())
    assert loaded.stopped_by_budget and dp_sgd_steps(loaded.ledger) == 30
    assert loaded.ledger.get_epsilon(1e-5) <= result["budget"] * (1 + 1e-9)

    # loading and then resuming the same file counts the checkpoint's steps once
    cpu_trainer(3, [PrivacySpendCallback(again.ledger)]).fit(again, datamodule=_data(), ckpt_path=path)
    assert dp_sgd_steps(again.ledger) == 30 and again.steps_recorded == 30 and not again.stopped_by_budget

    plain = LVQModule.load_from_checkpoint(out / "lvq" / "last.ckpt")  # the non-private module, too
    with torch.no_grad():
        torch.testing.assert_close(plain.model(probe), torch.tensor(result["lvq"]["distances"]))
    assert plain.image_shape == (2, 2) and plain.model.layer.rank == 2


@pytest.mark.slow
def test_fit_resumes_a_checkpoint_of_another_process_without_resetting_the_budget(written):
    out, result = written
    path = out / "dp" / "last.ckpt"
    checkpoint = torch.load(path, weights_only=True)
    ledger = PrivacyLedger()  # a new process: new ledger (without a budget: the checkpoint's applies)
    module = _module(ledger)
    optimizer = _OptimizerAtStart()
    trainer = cpu_trainer(5, [PrivacySpendCallback(ledger), optimizer])
    trainer.fit(module, datamodule=_data(), ckpt_path=path, weights_only=True)
    # epoch 3 runs (30 steps: exactly the budget), epoch 4 is refused before its first step
    assert dp_sgd_steps(ledger) == 30 and module.steps_recorded == 30 and trainer.global_step == 30
    assert module.stopped_by_budget
    assert ledger.budget == (result["budget"], 1e-5)
    assert ledger.get_epsilon(1e-5) == pytest.approx(PrivacyLedger.epsilon_of([dp_sgd_event(SIGMA, Q, 30)], 1e-5))
    assert result["dp"]["epsilon"] < ledger.get_epsilon(1e-5) <= result["budget"] * (1 + 1e-9)
    # the optimizer resumed with the checkpoint's state (SGD momentum buffers)
    saved = checkpoint["optimizer_states"][0]["state"]
    assert saved.keys() == optimizer.state.keys()
    for key in saved:
        assert torch.equal(saved[key]["momentum_buffer"], optimizer.state[key]["momentum_buffer"])

    plain = LVQModule(_model(GMLVQLayer(4, 3, rank=2)), lr=0.05)
    plain_trainer = cpu_trainer(3)
    X, y = load_iris(return_X_y=True)
    dm = ArrayDataModule(PublicBoundsScaler(0.0, 8.0).fit_transform(X), y, scaling="none", seed=0, batch_size=32)
    plain_trainer.fit(plain, datamodule=dm, ckpt_path=out / "lvq" / "last.ckpt", weights_only=True)
    assert plain_trainer.current_epoch == 3 and plain_trainer.global_step == 3 * math.ceil(105 / 32)


# -- progress on stderr ------------------------------------------------------------------------------------------
def _tiny_config(tmp_path, **training):
    return {
        "data": {"source": "bundled", "name": "iris", "batch_size": 32},
        "model": {"type": "gmlvq"},
        "training": {"max_epochs": 2, "lr": 0.05, "progress_bar": True, "accelerator": "cpu", **training},
        "logging": {"log_dir": str(tmp_path)},
    }


def test_cli_json_stdout_parses_with_the_progress_bar_on(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_tiny_config(tmp_path)))
    assert main(["train", "--config", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)  # all of stdout: one JSON document
    assert 0 <= out["test_acc"] <= 1
    assert "epoch 1/2" in captured.err and "epoch 2/2" in captured.err and "val_acc=" in captured.err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bars_go_to_stderr_on_a_terminal_and_epoch_lines_elsewhere(capsys, monkeypatch):
    X, y = load_iris(return_X_y=True)
    dm = ArrayDataModule(X, y, batch_size=32, seed=0)

    def fit(epochs, bar):
        trainer = L.Trainer(
            max_epochs=epochs,
            logger=False,
            callbacks=[bar],
            enable_checkpointing=False,
            enable_model_summary=False,
            accelerator="cpu",
            num_sanity_val_steps=0,
        )
        trainer.fit(LVQModule(_model(GMLVQLayer(4, 3)), lr=0.05), datamodule=dm)
        trainer.test(trainer.lightning_module, datamodule=dm, verbose=False)

    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    fit(1, StderrProgressBar())
    monkeypatch.undo()
    assert "Epoch 0: 100%|" in terminal.getvalue() and "Testing DataLoader 0: 100%|" in terminal.getvalue()
    captured = capsys.readouterr()
    assert captured.out == "" and "epoch 1/1" not in captured.err

    fit(5, StderrProgressBar(max_lines=2))  # off a terminal: every 3rd epoch and the last, no bars
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert [line.split()[:2] for line in lines if line.startswith("epoch")] == [["epoch", "3/5"], ["epoch", "5/5"]]
    assert "%|" not in captured.err
