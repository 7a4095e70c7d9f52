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
    privacy:  {epsilon: null, delta: 1.0e-5, sampling_rate: 0.05, max_grad_norm: 1.0, prior_fraction: 0.05,
               expected_batch_size: null, num_regular: null, num_private: null, noise_seed: null}

``data.source``: ``synthetic`` (``make_entangled_task``), ``yale``
(``data_dir``), ``folder`` (``path`` and a regex ``pattern`` with groups ``regular`` and
``private``) or ``csv`` (``path`` to a CSV with columns ``path``, ``regular``, ``private``).
A stratified ``holdout`` share of the records is never trained on: it is the validation
set logged to TensorBoard and the data of the fresh attackers after training.
``training.restarts`` > 1 trains that many anonymizers from the seeds ``seed, seed + 1, ...``
and keeps the best on the training records
(``fit_anonymizer``).

DP mode. With ``privacy.epsilon`` set, the anonymizer is trained by
``fit_dp_anonymizer``: DP-SGD with Poisson sampling at ``privacy.sampling_rate`` (so
``training.batch_size`` is not used), per-record clipping to ``privacy.max_grad_norm``,
the private labels' prior a Laplace histogram with ``prior_fraction * epsilon``, and the
noise calibrated so that the whole training transcript is ``(epsilon, delta)``-DP for
the training records. ``training.mode`` must be ``toggle`` and ``training.restarts`` 1
(choosing among restarts by their scores on the training records would be a release
outside the ledger). ``privacy.num_regular`` / ``privacy.num_private`` are the public
class counts; left null they are those of ``data.synthetic`` for synthetic data, else
read from the labels with a ``PrivacyLeakWarning``. ``privacy.expected_batch_size`` is
the public normaliser of the noisy gradient sums (null: from the noisy prior's total).
Every noise draw and sampling coin comes from fresh operating-system entropy unless
``privacy.noise_seed`` is given (reproducible, for tests: it warns). The guarantee
covers the training records only (``ANONYMIZER_PRIVACY_SCOPE``): the held-out split and
every accuracy on held-out records are not private.

Release. A DP run ends by writing its encoder in the release format
(``AnonymizerFit.save_release``: the weights, the architecture as JSON, the ledger) to
``<log_dir>/<name>/version_N/release/``, the run's TensorBoard folder, with under
``source`` the command and the config less ``seed``, ``privacy.noise_seed`` and the local
paths ``data.data_dir``, ``data.path`` and ``logging.log_dir`` (the encoder's release
holds no seed of its run). ``dp_proto.load_release(path)`` loads it;
``result["release_dir"]`` is the path. A non-private run writes nothing.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dp_proto.anonymizer.modules import Anonymizer
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.experiments._release import published_config
from dp_proto.experiments.config import merge_config, validate_config
from dp_proto.experiments.defaults import ANONYMIZER_DEFAULTS, load_anonymizer_config
from dp_proto.experiments.schema import check_accelerator
from dp_proto.lightning.anonymizer import evaluate_held_out, fit_anonymizer

__all__ = [
    "ANONYMIZER_DEFAULTS",
    "ANONYMIZER_PRIVACY_SCOPE",
    "load_anonymizer_config",
    "run_anonymizer_experiment",
    "write_anonymizer_release",
]

#: What the guarantee of a DP run covers (printed with it).
ANONYMIZER_PRIVACY_SCOPE = (
    "the (epsilon, delta) guarantee covers the training records only (add/remove one record); the held-out "
    "split (drawn on all records and the private labels) and every accuracy on held-out records are not private"
)

# Config keys a release does not publish: local paths, the seeds (the encoder's release
# holds no seed of its run; the noise seed would replay the noise).
_NOT_PUBLISHED = (
    ("seed",),
    ("data", "data_dir"),
    ("data", "path"),
    ("logging", "log_dir"),
    ("privacy", "noise_seed"),
)


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


def _public_counts(config: dict, num_regular: int, num_private: int) -> tuple[int, int]:
    """The class counts of a DP run: ``privacy.num_regular`` / ``num_private``, else those
    of ``data.synthetic`` (synthetic data), else the data's (with a ``PrivacyLeakWarning``)."""
    privacy, data = config["privacy"], config["data"]
    regular, private = privacy["num_regular"], privacy["num_private"]
    if data["source"] == "synthetic":
        regular = data["synthetic"]["num_regular"] if regular is None else regular
        private = data["synthetic"]["num_private"] if private is None else private
    if regular is None or private is None:
        warnings.warn(
            "privacy.num_regular / privacy.num_private is null: the class counts are read from the private "
            "labels (which classes occur is then not covered by the guarantee); give the public counts",
            PrivacyLeakWarning,
            stacklevel=3,
        )
    return int(num_regular if regular is None else regular), int(num_private if private is None else private)


def run_anonymizer_experiment(config: dict) -> dict[str, Any]:
    """Train on the non-held-out records, then evaluate on the held-out ones: the regular
    branch's accuracy, that of fresh regular classifiers on the representation, the
    fresh attackers' private accuracy, chance and the Fano estimate.

    With ``privacy.epsilon`` set the training is DP (``fit_dp_anonymizer``) and the
    encoder's release is written (see the module docstring).

    Returns
    -------
    dict
        The accuracies above (``regular_accuracy``, ``fresh_regular_accuracy``,
        ``attacker_accuracy``, ``attacker_by_model``, ``chance``, ``attacker_error``,
        ``fano_error_estimate``), ``train_records`` (``None`` for a DP run: the
        number of training records is private under add/remove), ``held_out_records``,
        ``epoch_times``, ``restarts``, ``chosen_restart``, ``log_dir``, ``epsilon``,
        ``privacy_scope``, ``release_dir`` and ``ledger`` (``None`` for a non-private
        run), ``fit`` (the ``AnonymizerFit``) and ``config``.

    Raises
    ------
    ConfigError
        A key the experiment does not have, or a value of the wrong type (one line,
        ``dp_proto.experiments.config.validate_config``).
    ValueError
        A bad data or model section; a DP run with ``training.restarts`` > 1 or
        ``training.mode`` other than ``toggle``.
    """
    from lightning.pytorch.loggers import TensorBoardLogger
    from sklearn.model_selection import train_test_split

    config = merge_config(ANONYMIZER_DEFAULTS, config)
    validate_config(config, "anonymizer")
    check_accelerator(config["training"]["accelerator"])
    privacy = config["privacy"]
    private = privacy["epsilon"] is not None
    if private and config["training"]["restarts"] != 1:
        raise ValueError(
            "a DP run (privacy.epsilon set) trains one anonymizer: training.restarts must be 1 (choosing among "
            "restarts by their scores on the training records would be a release outside the ledger)"
        )
    if private and config["training"]["mode"] != "toggle":
        raise ValueError("a DP run (privacy.epsilon set) needs training.mode: toggle (one parameter set per step)")
    seed = int(config["seed"])
    data = _load_data(config["data"], seed)
    x = torch.as_tensor(np.asarray(data["x"]), dtype=torch.float32)
    y, s = torch.as_tensor(data["regular"]).long(), torch.as_tensor(data["private"]).long()
    num_regular, num_private = int(y.max()) + 1, int(s.max()) + 1
    if private:
        num_regular, num_private = _public_counts(config, num_regular, num_private)
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
    common = {
        "anonymizer": model,
        "lam": t.pop("lam"),
        "adversarial_epochs": t.pop("adversarial_epochs"),
        "pretrain_regular_epochs": t.pop("pretrain_regular_epochs"),
        "pretrain_private_epochs": t.pop("pretrain_private_epochs"),
        "val_data": (x[held], y[held], s[held]),
        "seed": seed,
        "logger": logger,
        "enable_progress_bar": t.pop("progress_bar"),
        "accelerator": t.pop("accelerator"),
    }
    if private:
        from dp_proto.lightning.dp_anonymizer import fit_dp_anonymizer

        del t["batch_size"], t["restarts"]  # Poisson sampling at privacy.sampling_rate; one anonymizer
        fit = fit_dp_anonymizer(
            x[train],
            y[train],
            s[train],
            epsilon=float(privacy["epsilon"]),
            delta=float(privacy["delta"]),
            sampling_rate=float(privacy["sampling_rate"]),
            max_grad_norm=float(privacy["max_grad_norm"]),
            num_regular=num_regular,
            num_private=num_private,
            prior_fraction=float(privacy["prior_fraction"]),
            expected_batch_size=privacy["expected_batch_size"],
            noise_seed=privacy["noise_seed"],
            **common,
            **t,
        )
    else:
        fit = fit_anonymizer(x[train], y[train], s[train], batch_size=t.pop("batch_size"), **common, **t)
    release_dir = None
    if private:
        path = Path(logger.log_dir) / "release"
        release_dir = str(write_anonymizer_release(config, fit, path).resolve())
    result = evaluate_held_out(fit.module.cpu(), x[held], y[held], s[held], seed=seed)
    ledger = fit.ledger if private else None
    return {
        "regular_accuracy": result["regular_accuracy"],
        "fresh_regular_accuracy": result["fresh_regular_accuracy"],
        "attacker_accuracy": result["attacker_accuracy"],
        "attacker_by_model": result["attacker_by_model"],
        "chance": result["attacker_chance"],
        "attacker_error": 1 - result["attacker_accuracy"],
        "fano_error_estimate": result["fano_error_bound"],
        "train_records": None if private else len(train),  # a DP run's n is private (add/remove)
        "held_out_records": len(held),
        "epoch_times": {k: float(np.mean(v)) for k, v in fit.epoch_times.items()},
        "restarts": fit.restarts,
        "chosen_restart": fit.chosen,
        "log_dir": logger.log_dir,
        "epsilon": ledger.get_epsilon(float(privacy["delta"])) if ledger is not None else None,
        "privacy_scope": ANONYMIZER_PRIVACY_SCOPE if private else None,
        "release_dir": release_dir,
        "ledger": ledger,
        "fit": fit,
        "config": config,
    }


def write_anonymizer_release(config: dict, fit: Any, path: str | Path) -> Path:
    """Write the encoder of a run (``fit.to_release()``) to the directory ``path``, with
    ``source``: the encoder's training settings, the command and the config less the
    seeds and local paths.

    Parameters
    ----------
    config : dict
        The run's full config.
    fit : AnonymizerFit
        What ``fit_dp_anonymizer`` (or ``fit_anonymizer``) returned.
    path : str or Path
        The release directory (created if needed).

    Returns
    -------
    Path
        The directory.
    """
    release = fit.to_release()
    source = {
        **dict(release.source or {}),
        "command": "dp-proto anonymize",
        "config": published_config(config, _NOT_PUBLISHED),
        "privacy_scope": ANONYMIZER_PRIVACY_SCOPE,
    }
    return dataclasses.replace(release, source=source).save(path)
