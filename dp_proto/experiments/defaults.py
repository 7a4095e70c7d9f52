"""The experiments' config defaults and loaders, without the experiments' imports.

``dp-proto`` reads and checks a config (``load_config`` and friends, typed by
``dp_proto.experiments.schema``) before it imports torch, Lightning and the experiment
that runs it, so that a bad key or value ends the command in a fraction of a second.
Each experiment module re-exports its defaults and loader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dp_proto.experiments.config import read_config

__all__ = [
    "DEFAULT_CONFIG",
    "SVDD_DEFAULTS",
    "LLP_DEFAULTS",
    "ANONYMIZER_DEFAULTS",
    "load_config",
    "load_svdd_config",
    "load_llp_config",
    "load_anonymizer_config",
]

DEFAULT_CONFIG: dict[str, Any] = {
    "seed": 0,
    "data": {
        "source": "bundled",
        "name": "digits",
        "data_dir": None,
        "val_size": 0.1,
        "test_size": 0.2,
        "scaling": "standard",
        "pca": None,
        "batch_size": 64,
        "subsample": None,
    },
    "model": {
        "type": "gmlvq",
        "prototypes_per_class": 1,
        "rank": None,
        "omega_init": "identity",
        "normalize": True,
        "backbone": None,
        "backbone_features": 32,
    },
    "training": {
        "optimizer": "adam",
        "lr": 0.01,
        "momentum": 0.9,
        "metric_lr_scale": 1.0,
        "group_lasso": 0.0,
        "max_epochs": 30,
        "max_lbfgs_iter": 20,
        "transfer_fn": "identity",
        "beta": 1.0,
        "accelerator": "auto",
        "progress_bar": True,
    },
    "logging": {"log_dir": "runs", "name": None, "image_shape": None, "image_every_n_epochs": 5},
    # devices > 1: data-parallel training in one process per device (Lightning's DDP)
    "trainer": {"devices": 1},
    # DP-SGD (the DP-LVQ "SGD" scheme) when epsilon is set; see DPLVQModule.
    # expected_batch_size: the public normaliser (null: q times the DP init's noisy count);
    # noise_seed: null = fresh noise (an int makes the noise reproducible and warns).
    "privacy": {
        "epsilon": None,
        "delta": 1e-5,
        "sampling_rate": 0.01,
        "max_grad_norm": 0.5,
        "init_fraction": 0.2,
        "calibration": "ledger",
        "bounds": None,
        "classes": None,
        "expected_batch_size": None,
        "noise_seed": None,
        "per_record": None,
    },
}

SVDD_DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "data": {"source": "bundled", "name": "iris", "data_dir": None, "test_size": 0.2, "scaling": "standard"},
    "privacy": {"epsilon": None, "bounds": None, "classes": None, "noise_seed": None},
    # every parameter of PrivateSVDDClassifier with its default, less those set elsewhere
    # (epsilon, classes and noise_seed from privacy, random_state from seed, ledger)
    "svdd": {
        "c_over_n": 0.05,
        "gamma": 1.0,
        "num_features": 400,
        "centre_fraction": 0.5,
        "bounds": None,
        "starts": "auto",
        "n_starts": "auto",
        "count_fraction": 0.05,
        "max_starts": 2000,
        "lr": 0.001,
        "iters": 20,
        "merge_tol": None,
        "r_max": None,
        "min_count": None,
        "release": "support_function",
        "n_neighbors": 1,
        "grid_step": None,
        "false_cells": 1.0,
        "grid_ratio": 200.0,
        "tol": 1e-08,
        "device": None,
        "dtype": "float32",
        "verbose": None,
    },
    "logging": {"log_dir": "runs", "name": None},
}

LLP_DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "data": {"data_dir": None, "nodes": 4, "anchor": 0, "neighbours": None, "folds": 10, "fold": 0},
    "llp": {
        "batch_size": 32,
        "k": 16,
        "epsilon": 0.1,
        "estimator": "clipped",
        "n_starts": 32,
        "noise_seed": None,
        "learner": "kmeans",
        "own_proportions": "exact",
    },
    "run": {"distributed": False, "compare": False, "threads": 1},
    "logging": {"log_dir": "runs", "name": None},
}

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
    "privacy": {
        "epsilon": None,
        "delta": 1e-5,
        "sampling_rate": 0.05,
        "max_grad_norm": 1.0,
        "prior_fraction": 0.05,
        "expected_batch_size": None,
        "num_regular": None,
        "num_private": None,
        "noise_seed": None,
    },
}


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> dict[str, Any]:
    """``DEFAULT_CONFIG``, overlaid with a YAML file, overlaid with ``key.sub=value``
    strings (values parsed as YAML, so ``model.rank=10`` gives an int)."""
    return read_config(DEFAULT_CONFIG, path, overrides)


def load_svdd_config(path: str | Path | None = None, overrides: list[str] | None = None) -> dict[str, Any]:
    """``SVDD_DEFAULTS``, updated by a YAML file and by ``key.subkey=value`` overrides."""
    return read_config(SVDD_DEFAULTS, path, overrides)


def load_llp_config(path: str | Path | None = None, overrides: list[str] | None = None) -> dict[str, Any]:
    """``LLP_DEFAULTS``, updated by a YAML file and by ``key.subkey=value`` overrides."""
    return read_config(LLP_DEFAULTS, path, overrides)


def load_anonymizer_config(path: str | Path | None = None, overrides: list[str] | None = None) -> dict:
    """``ANONYMIZER_DEFAULTS``, updated by a YAML file and by ``key.subkey=value`` overrides."""
    return read_config(ANONYMIZER_DEFAULTS, path, overrides)
