"""Privacy soundness of the private Lightning training: fresh noise, no generator in
hyperparameters, logs or checkpoints, resuming counts each step once and stops at the
budget, a public normaliser, noise with tails, no data-dependent messages and the stated
scope."""

import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml
from lightning.pytorch.loggers import TensorBoardLogger
from sklearn.datasets import load_iris

from dp_proto.cli import main
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.experiments.lvq import (
    DEFAULT_CONFIG,
    build_private_module,
    merge_config,
    run_experiment,
)
from dp_proto.lightning import ArrayDataModule, DPLVQModule, PrivacySpendCallback
from dp_proto.lvq import GMLVQLayer, PrototypeModel
from dp_proto.privacy import PrivacyLedger, PublicBoundsScaler, dp_sgd_event
from dp_proto.privacy.randomness import noise_generator
from dp_proto.privacy.testing import adversarial_removals, capture_releases, neighbour_check
from tests._checkpoints import cpu_trainer, dp_sgd_steps, has_generator_state
from tests._stats import pin_gaussian_uniforms

Q = 0.1  # 10 Poisson steps per epoch


def _config(tmp_path, **privacy):
    """A tiny private run: iris, public bounds 0..8 and labels, 2 epochs of 10 steps.
    ``calibration: paper`` keeps the noise calibration instant."""
    return {
        "seed": 0,
        "data": {"source": "bundled", "name": "iris", "scaling": "none"},
        "model": {"type": "gmlvq"},
        "training": {
            "optimizer": "sgd",
            "lr": 0.2,
            "momentum": 0.0,
            "max_epochs": 2,
            "progress_bar": False,
            "accelerator": "cpu",
        },
        "privacy": {
            "epsilon": 5.0,
            "sampling_rate": Q,
            "bounds": [0.0, 8.0],
            "classes": [0, 1, 2],
            "calibration": "paper",
            **privacy,
        },
        "logging": {"log_dir": str(tmp_path)},
    }


def _data(**kwargs):
    X, y = load_iris(return_X_y=True)
    return ArrayDataModule(
        PublicBoundsScaler(0.0, 8.0).fit_transform(X), y, scaling="none", sampling_rate=Q, seed=0, **kwargs
    )


def _model():
    return PrototypeModel(GMLVQLayer(4, 3, prototypes=torch.zeros(3, 4)), [0, 1, 2])


def _module(ledger, noise=2.0, **kwargs):
    """A DP-SGD module; its normaliser 10 is public (q times a public size of 100)."""
    return DPLVQModule(
        _model(),
        ledger=ledger,
        noise_multiplier=noise,
        max_grad_norm=1.0,
        sampling_rate=Q,
        expected_batch_size=10.0,
        lr=0.05,
        **kwargs,
    )


def _trainer(ledger, epochs, tmp_path=None, logger=False):
    """Spending to ``ledger``; checkpointing to ``tmp_path / "ckpt"`` when given."""
    ckpt_dir = tmp_path / "ckpt" if tmp_path is not None else None
    return cpu_trainer(epochs, [PrivacySpendCallback(ledger)], ckpt_dir, logger=logger)


def _noisy_steps(recorder, module):
    """DP-SGD steps that drew noise: one release per trainable parameter and step."""
    per_step = len([p for p in module.model.parameters() if p.requires_grad])
    draws = [r for r in recorder.releases if r.name == "dp_sgd"]
    assert len(draws) % per_step == 0
    return len(draws) // per_step


# -- fresh noise by default, reproducible only on request ------------------------------------------------
@pytest.mark.slow
def test_same_seed_gives_fresh_noise_and_noise_seed_reproduces_with_a_warning(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)  # no seed of the noise: no leak warning
        first, second = (run_experiment(_config(tmp_path)) for _ in range(2))
    assert not torch.equal(first["module"].model.layer.prototypes, second["module"].model.layer.prototypes)
    assert first["ledger"].summary()["noise"] == "fresh"

    runs = []
    for _ in range(2):
        with pytest.warns(PrivacyLeakWarning, match="noise_seed"):
            runs.append(run_experiment(_config(tmp_path, noise_seed=7)))
    for a, b in zip(runs[0]["module"].model.parameters(), runs[1]["module"].model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert runs[0]["ledger"].summary()["noise"] == "reproducible"
    assert "REPRODUCIBLE" in str(runs[0]["ledger"])
    # neither the seed nor a generator lands in the hyperparameters or their file
    text = Path(runs[0]["log_dir"], "hparams.yaml").read_text()
    assert "seed" not in text and "generator" not in text.lower()
    assert not has_generator_state(dict(runs[0]["module"].hparams))


def test_poisson_coins_are_fresh_even_after_seed_everything():
    def batches(dm):
        return [sorted(x[:, 0].tolist()) for x, _ in dm.train_dataloader()]

    L.seed_everything(0, verbose=False)
    dm = _data()
    first = batches(dm)
    L.seed_everything(0, verbose=False)
    assert batches(dm) != first  # the same config seed, new coins
    with pytest.warns(PrivacyLeakWarning, match="sampling_seed"):
        seeded, again = _data(sampling_seed=3), _data(sampling_seed=3)
    assert batches(seeded) == batches(seeded) == batches(again)


# -- no generator in hyperparameters, logs or checkpoints; checkpoints load ---------------------------------
def test_no_generator_in_hparams_or_checkpoints_and_checkpoints_load(tmp_path):
    ledger = PrivacyLedger()
    with pytest.warns(PrivacyLeakWarning):
        generator = noise_generator(3)  # the worst case: a reproducible generator is passed
    module = _module(ledger, generator=generator)
    assert "generator" not in module.hparams and "ledger" not in module.hparams
    assert not has_generator_state(dict(module.hparams))
    logger = TensorBoardLogger(tmp_path, name="run", version=0)
    _trainer(ledger, 1, tmp_path, logger=logger).fit(module, datamodule=_data())
    text = (tmp_path / "run" / "version_0" / "hparams.yaml").read_text()
    assert "generator" not in text.lower() and "python/object" not in text
    assert set(yaml.safe_load(text)) >= {"noise_multiplier", "expected_batch_size", "sampling_rate"}

    path = tmp_path / "ckpt" / "last.ckpt"
    checkpoint = torch.load(path, weights_only=True)  # plain data only (torch 2.6+ default)
    assert not has_generator_state(checkpoint)
    restored = PrivacyLedger()
    loaded = DPLVQModule.load_from_checkpoint(path, model=_model(), ledger=restored)
    assert dp_sgd_steps(restored) == 10 and loaded.expected_batch_size == 10.0
    torch.testing.assert_close(loaded.model.layer.prototypes, module.model.layer.prototypes)
    fresh = PrivacyLedger()
    trainer = _trainer(fresh, 2)
    trainer.fit(_module(fresh), datamodule=_data(), ckpt_path=path)
    assert trainer.current_epoch == 2 and dp_sgd_steps(fresh) == 20


# -- resuming counts each step once and stops at the budget -------------------------------------------------
def test_resume_in_process_counts_each_step_once(tmp_path):
    """The same ledger object resumes its own checkpoint: the old code added the
    checkpoint's 20 steps a second time (60 recorded for 40 run; with a budget, the
    epsilon jumped past it without an error)."""
    ledger = PrivacyLedger()
    module = _module(ledger)
    with capture_releases() as recorder:
        _trainer(ledger, 2, tmp_path).fit(module, datamodule=_data())
        assert dp_sgd_steps(ledger) == 20
        _trainer(ledger, 4, tmp_path).fit(module, datamodule=_data(), ckpt_path=tmp_path / "ckpt" / "last.ckpt")
    assert dp_sgd_steps(ledger) == 40
    assert _noisy_steps(recorder, module) == 40  # the steps that drew noise, each recorded once
    assert ledger.get_epsilon() == pytest.approx(PrivacyLedger.epsilon_of(ledger.events, 1e-5))


def test_resume_from_a_checkpoint_file_takes_over_its_history_once(tmp_path):
    first = PrivacyLedger()
    _trainer(first, 2, tmp_path).fit(_module(first), datamodule=_data())
    path = tmp_path / "ckpt" / "last.ckpt"

    fresh = PrivacyLedger()  # a new process: new module, new ledger
    module = _module(fresh)
    with capture_releases() as recorder:
        _trainer(fresh, 4).fit(module, datamodule=_data(), ckpt_path=path)
    assert dp_sgd_steps(fresh) == 20 + 20  # the checkpoint's steps, once (module and callback both restore)
    resumed = _noisy_steps(recorder, module)
    # resuming the same checkpoint again with this ledger adds only the new steps
    with capture_releases() as recorder:
        _trainer(fresh, 3).fit(module, datamodule=_data(), ckpt_path=path)
    assert dp_sgd_steps(fresh) == 50
    assert resumed == 20 and _noisy_steps(recorder, module) == 10


def test_a_resumed_epoch_past_the_budget_is_refused_before_any_noise(tmp_path):
    """Two epochs exhaust the budget; resuming for more (in the same process with the
    same ledger, or from the checkpoint file with a new one) stops cleanly before the
    third epoch: no exception, no noise drawn, epsilon within the budget."""
    budget = PrivacyLedger.epsilon_of([dp_sgd_event(2.0, Q, 20)], 1e-5)  # exactly two epochs
    ledger = PrivacyLedger(budget=(budget, 1e-5))
    module = _module(ledger)
    _trainer(ledger, 2, tmp_path).fit(module, datamodule=_data())
    assert not module.stopped_by_budget and dp_sgd_steps(ledger) == 20
    path = tmp_path / "ckpt" / "last.ckpt"
    for where in ("in_process", "checkpoint_file"):
        if where == "checkpoint_file":
            ledger = PrivacyLedger(budget=(budget, 1e-5))
            module = _module(ledger)
        with capture_releases() as recorder:
            _trainer(ledger, 4).fit(module, datamodule=_data(), ckpt_path=path)
        assert ledger.get_epsilon(1e-5) <= budget * (1 + 1e-9), where
        assert dp_sgd_steps(ledger) == 20, where
        assert module.stopped_by_budget, where  # a clean stop, no exception
        assert _noisy_steps(recorder, module) == 0, where  # refused before any noise was drawn


# -- the normaliser is public --------------------------------------------------------------------------------
def test_the_experiment_normalises_by_a_released_count_never_by_the_private_n():
    """Under the neighbour check (the neighbour sees the DP initialisation's outputs on
    D), removing a training record changes nothing the private setup exposes: the
    normaliser is q times the noisy count, not q * n."""
    X, y = load_iris(return_X_y=True)
    x = torch.as_tensor(PublicBoundsScaler(0.0, 8.0).fit_transform(X), dtype=torch.float32)
    y = torch.as_tensor(y)
    config = merge_config(
        DEFAULT_CONFIG,
        {
            "privacy": {
                "epsilon": 5.0,
                "sampling_rate": Q,
                "calibration": "paper",
                "bounds": [0.0, 8.0],
                "classes": [0, 1, 2],
            },
            "training": {"max_epochs": 1},
        },
    )

    def release(x, y):
        module, ledger = build_private_module(config, x, y, 3, _model(), {})
        optimizer = module.configure_optimizers()
        return module.expected_batch_size, optimizer.expected_batch_size, module.model.layer.prototypes.detach()

    with capture_releases() as recorder:
        size, optimizer_size, _ = release(x, y)
    (counts,) = [r.output for r in recorder.releases if r.name == "dp_init/class_counts"]
    assert size == optimizer_size == pytest.approx(Q * max(float(counts.sum()), 1.0))
    neighbour_check(release, (x, y), removals=adversarial_removals(x, y)[:3]).assert_ok()

    public = merge_config(config, {"privacy": {"expected_batch_size": 12.5}})
    module, _ = build_private_module(public, x, y, 3, _model(), {})
    assert module.expected_batch_size == module.configure_optimizers().expected_batch_size == 12.5
    backbone = merge_config(config, {"model": {"backbone": "cnn"}})
    with pytest.raises(ValueError, match="privacy.expected_batch_size"):
        build_private_module(backbone, x, y, 3, _model(), {})


# -- float64 noise with tails --------------------------------------------------------------------------------
def test_dp_sgd_noise_reaches_beyond_six_sigma(monkeypatch):
    """Deterministic: pinned uniforms make the sampler return 9.9 sigma, which Opacus'
    float32 torch.normal never reaches (about 5.8 sigma at most on CPU)."""
    pin_gaussian_uniforms(monkeypatch)  # radius 9.9 sigma, angle ~ 0
    ledger = PrivacyLedger()
    module = _module(ledger, noise=1.0)
    trainer = _trainer(ledger, 1)
    with capture_releases() as recorder:
        trainer.fit(module, datamodule=_data())
    assert type(trainer.optimizers[0]).__name__.startswith("Sound")
    draws = [r for r in recorder.releases if r.name == "dp_sgd"]
    assert len(draws) == 2 * 10  # prototypes and Omega, 10 steps
    for r in draws:  # std = noise_multiplier * max_grad_norm = 1
        z = r.output.double() - r.pre_noise
        cos_half = z.reshape(-1)[: (z.numel() + 1) // 2]  # r cos(0); the sin half is r sin(0) = 0
        assert bool((cos_half > 9.8).all()), cos_half.min()


# -- no data-dependent messages; the scope is stated ---------------------------------------------------------
@pytest.mark.slow
def test_a_private_run_prints_its_scope_and_logs_nothing_from_the_training_split(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_config(tmp_path)))
    assert main(["train", "--config", str(path), "training.max_epochs=1"]) == 0
    out = capsys.readouterr().out
    assert "covers the training split only" in out and "not private" in out
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log_dir = next((tmp_path / "iris_gmlvq").glob("version_*"))
    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    assert not any(tag.startswith("train") for tag in acc.Tags()["scalars"])
    assert "privacy/ledger/text_summary" in acc.Tags()["tensors"]
