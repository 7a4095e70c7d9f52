"""Run an anonymizer experiment from a config (``dp-proto anonymize --config FILE``).

Sections and defaults (unknown keys are rejected)::

    seed: 0
    data:     {source: synthetic, data_dir: null, path: null, pattern: null, holdout: 0.5,
               synthetic: {n: 3000, num_regular: 4, num_private: 8, entanglement: 0.5, dim: 20}}
    model:    {encoder: mlp, representation_dim: 32, encoder_hidden: [256], head_hidden: [64],
               channels: [16, 32], dropout: 0.0}
    training: {lam: 1.0, mode: toggle, pretrain_regular_epochs: 10, pretrain_private_epochs: 10,
               adversarial_epochs: 20, toggle_steps: null, encoder_steps: null, batch_size: 32, lr: 0.01,
               encoder_lr: 0.001, optimizer: nesterov, restarts: 1, accelerator: cpu, progress_bar: true}
    logging:  {log_dir: runs, name: null}

``data.source``: ``synthetic`` (``make_entangled_task``), ``yale``
(``data_dir``), ``folder`` (``path`` and a regex ``pattern`` with groups ``regular`` and
``private``) or ``csv`` (``path`` to a CSV with columns ``path``, ``regular``, ``private``).
A stratified ``holdout`` share of the records is never trained on: it is the validation
set logged to TensorBoard and the data of the fresh attackers after training.
``training.restarts`` > 1 trains that many anonymizers from the seeds ``seed, seed + 1, ...``
and keeps the best on the training records
(``fit_anonymizer``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from dp_proto.anonymizer.modules import Anonymizer
from dp_proto.experiments.config import merge_config, read_config
from dp_proto.lightning.anonymizer import evaluate_held_out, fit_anonymizer

__all__ = ["ANONYMIZER_DEFAULTS", "load_anonymizer_config", "run_anonymizer_experiment"]

ANONYMIZER_DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "data": {
        "source": "synthetic",
        "data_dir": None,
        "path": None,
        "pattern": None,
        "holdout": 0.5,
        "synthetic": {"n": 3000, "num_regular": 4, "num_private": 8, "entanglement": 0.5, "dim": 20},
    },
    "model": {
        "encoder": "mlp",
        "representation_dim": 32,
        "encoder_hidden": [256],
        "head_hidden": [64],
        "channels": [16, 32],
        "dropout": 0.0,
    },
    "training": {
        "lam": 1.0,
        "mode": "toggle",
        "pretrain_regular_epochs": 10,
        "pretrain_private_epochs": 10,
        "adversarial_epochs": 20,
        "toggle_steps": None,
        "encoder_steps": None,
        "batch_size": 32,
        "lr": 0.01,
        "encoder_lr": 0.001,
        "optimizer": "nesterov",
        "restarts": 1,
        "accelerator": "cpu",
        "progress_bar": True,
    },
    "logging": {"log_dir": "runs", "name": None},
}


def load_anonymizer_config(path: str | Path | None = None, overrides: list[str] | None = None) -> dict:
    """``ANONYMIZER_DEFAULTS``, updated by a YAML file and by ``key.subkey=value`` overrides."""
    return read_config(ANONYMIZER_DEFAULTS, path, overrides)


def _load_data(cfg: dict, seed: int) -> dict:
    from dp_proto import data as datasets

    source = cfg["source"]
    if source == "synthetic":
        task = datasets.make_entangled_task(seed=seed, **cfg["synthetic"])
        return {"x": task.x, "regular": task.regular, "private": task.private}
    if source == "yale":
        images = datasets.load_yale_faces(cfg["data_dir"])
    elif source == "folder":
        if not cfg["path"] or not cfg["pattern"]:
            raise ValueError("data.source 'folder' needs data.path and data.pattern")
        images = datasets.load_image_folder(cfg["path"], cfg["pattern"])
    elif source == "csv":
        if not cfg["path"]:
            raise ValueError("data.source 'csv' needs data.path")
        images = datasets.load_two_label_csv(cfg["path"])
    else:
        raise ValueError(f"data.source must be synthetic, yale, folder or csv, got {source!r}")
    return {"x": images.images, "regular": images.regular, "private": images.private}


def _build_model(cfg: dict, x: torch.Tensor, num_regular: int, num_private: int) -> Anonymizer:
    common = {
        "representation_dim": cfg["representation_dim"],
        "head_hidden": tuple(cfg["head_hidden"]),
        "dropout": cfg["dropout"],
    }
    if cfg["encoder"] == "cnn":
        if x.dim() != 4:
            raise ValueError("model.encoder 'cnn' needs image data (n, C, H, W)")
        return Anonymizer.cnn(tuple(x.shape[1:]), num_regular, num_private, channels=tuple(cfg["channels"]), **common)
    if cfg["encoder"] != "mlp":
        raise ValueError(f"model.encoder must be 'mlp' or 'cnn', got {cfg['encoder']!r}")
    return Anonymizer.mlp(
        int(x[0].numel()), num_regular, num_private, encoder_hidden=tuple(cfg["encoder_hidden"]), **common
    )


def run_anonymizer_experiment(config: dict) -> dict[str, Any]:
    """Train on the non-held-out records, then evaluate on the held-out ones: the regular
    branch's accuracy, that of fresh regular classifiers on the representation, the
    fresh attackers' private accuracy, chance and the Fano estimate."""
    from lightning.pytorch.loggers import TensorBoardLogger
    from sklearn.model_selection import train_test_split

    config = merge_config(ANONYMIZER_DEFAULTS, config)
    seed = int(config["seed"])
    data = _load_data(config["data"], seed)
    x = torch.as_tensor(np.asarray(data["x"]), dtype=torch.float32)
    y, s = torch.as_tensor(data["regular"]).long(), torch.as_tensor(data["private"]).long()
    num_regular, num_private = int(y.max()) + 1, int(s.max()) + 1
    counts = torch.bincount(s)
    train, held = train_test_split(
        np.arange(len(s)),
        test_size=config["data"]["holdout"],
        random_state=seed,
        stratify=s.numpy() if int(counts.min()) >= 2 else None,
    )

    def model() -> Anonymizer:  # built after fit_anonymizer seeds torch: the same seed, the same start
        return _build_model(config["model"], x, num_regular, num_private)

    model()  # check the model section before any training
    t = dict(config["training"])
    log = config["logging"]
    logger = TensorBoardLogger(log["log_dir"], name=log["name"] or f"anonymizer_{config['data']['source']}")
    fit = fit_anonymizer(
        x[train],
        y[train],
        s[train],
        anonymizer=model,
        lam=t.pop("lam"),
        mode=t.pop("mode"),
        adversarial_epochs=t.pop("adversarial_epochs"),
        pretrain_regular_epochs=t.pop("pretrain_regular_epochs"),
        pretrain_private_epochs=t.pop("pretrain_private_epochs"),
        batch_size=t.pop("batch_size"),
        val_data=(x[held], y[held], s[held]),
        seed=seed,
        logger=logger,
        enable_progress_bar=t.pop("progress_bar"),
        accelerator=t.pop("accelerator"),
        **t,
    )
    result = evaluate_held_out(fit.module.cpu(), x[held], y[held], s[held], seed=seed)
    return {
        "regular_accuracy": result["regular_accuracy"],
        "fresh_regular_accuracy": result["fresh_regular_accuracy"],
        "attacker_accuracy": result["attacker_accuracy"],
        "attacker_by_model": result["attacker_by_model"],
        "chance": result["attacker_chance"],
        "attacker_error": 1 - result["attacker_accuracy"],
        "fano_error_estimate": result["fano_error_bound"],
        "train_records": len(train),
        "held_out_records": len(held),
        "epoch_times": {k: float(np.mean(v)) for k, v in fit.epoch_times.items()},
        "restarts": fit.restarts,
        "chosen_restart": fit.chosen,
        "log_dir": logger.log_dir,
        "config": config,
    }
