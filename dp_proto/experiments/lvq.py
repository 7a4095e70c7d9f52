"""Run a training experiment described by a config (a nested dict, or a YAML file).

The config has these sections; every key has a default (``DEFAULT_CONFIG``), and
unknown keys are rejected so that typos do not pass silently::

    seed: 0
    data:     {source: bundled, name: digits, data_dir: null, val_size: 0.1, test_size: 0.2,
               scaling: standard, pca: null, batch_size: 64, subsample: null}
    model:    {type: gmlvq, prototypes_per_class: 1, rank: null, omega_init: identity,
               normalize: true, backbone: null, backbone_features: 32}
    training: {optimizer: adam, lr: 0.01, momentum: 0.9, metric_lr_scale: 1.0, group_lasso: 0.0,
               max_epochs: 30, max_lbfgs_iter: 20,
               transfer_fn: identity, beta: 1.0, accelerator: auto, progress_bar: true}
    logging:  {log_dir: runs, name: null, image_shape: null, image_every_n_epochs: 5}
    trainer:  {devices: 1}
    privacy:  {epsilon: null, delta: 1.0e-5, sampling_rate: 0.01, max_grad_norm: 0.5,
               init_fraction: 0.2, calibration: ledger, bounds: null, classes: null,
               expected_batch_size: null, noise_seed: null}

With ``privacy.epsilon`` set, the run is differentially private: features are mapped
from the public ``privacy.bounds`` ``[lower, upper]`` onto ``[-1, 1]`` (``data.scaling``
must be ``none`` and ``data.pca`` null: both would be fitted on private data), the
prototypes get the DP class-mean initialisation (``init_fraction * epsilon``) and
training is DP-SGD with Poisson sampling at ``sampling_rate``, the noise calibrated so
that the whole run is ``(epsilon, delta)``-DP. ``privacy/epsilon`` is logged every epoch.
``training.progress_bar`` shows the progress on stderr (``StderrProgressBar``: bars on a
terminal, else one line per epoch), never on stdout.
``privacy.classes`` is the public label set (one prototype group per class, even for a
class without records); left null, a private run reads it from the data and warns
(``PrivacyLeakWarning``).

Scope of the guarantee
    The ``(epsilon, delta)`` guarantee covers the **training split only** (add/remove
    one of its records). The train/validation/test split is drawn on all records and
    their labels (stratified), and the validation and test metrics (``val_acc``,
    ``test_acc``) are computed without noise on the held-out records: they are not
    private, and whoever publishes them publishes facts about those records. Nothing
    computed on the training split without noise is logged (no training loss or
    accuracy; the prototype and relevance pictures show the noisy model). A private run
    prints this scope (``result["privacy_scope"]``) and writes it with the ledger to
    TensorBoard.

Randomness
    ``seed`` governs the non-private randomness only: the split, the (non-private)
    model initialisation and the jitter of several prototypes per class. Every noise
    draw (the DP initialisation and every DP-SGD step) and every Poisson sampling coin
    comes from fresh operating-system entropy, so two runs with the same ``seed`` give
    different private models. ``privacy.noise_seed`` (an int) makes the noise and the
    batches reproducible, for tests and benchmarks: it warns
    ``PrivacyLeakWarning`` and the ledger's summary records
    ``"noise": "reproducible"``. No generator, its state or the noise seed is saved as a
    hyperparameter or logged.

Normaliser
    DP-SGD divides the noisy gradient sum by a **public** expected batch size, never by
    ``q * n`` (``n``, the number of training records, is private under add/remove):
    ``privacy.expected_batch_size`` if given (a public number), else
    ``q * max(n~, 1)`` with ``n~`` the sum of the noisy class counts the DP
    initialisation releases (post-processing, free of charge). A run without the DP
    initialisation (``model.backbone``) needs ``privacy.expected_batch_size``.

Release
    A private run without a backbone ends by writing its model in the release format
    (``dp_proto.release``) to ``<log_dir>/<name>/version_N/release/``: the trained
    prototypes and metric as the DP estimator of its ``model.type``
    (``DPGLVQ``/``DPGMLVQ``/``DPLGMLVQ``, see ``release_estimator``), which predicts on raw
    features inside ``privacy.bounds``, with the ledger, the scope above and the config
    (less ``privacy.noise_seed`` and local paths). ``dp_proto.load_release(path)`` loads
    it; ``result["release_dir"]`` is the path.

Several processes
    ``trainer.devices=N`` (N > 1) trains with Lightning's DDP strategy, one process per
    device (GPUs with NCCL, or CPU processes with gloo under ``training.accelerator: cpu``),
    started by Lightning from the same command. A private run is one DP-SGD run over
    all the processes (``dp_proto.privacy.data_parallel``): each process Poisson-samples
    its shard of the training records at the global ``sampling_rate``, the clipped sums
    are all-reduced, the noise is drawn once (process 0), and every process keeps the same
    ledger, so the guarantee is that of one process. Every process computes the DP
    initialisation (its own noise); process 0's prototypes and noisy count are the ones
    used (Lightning's DDP broadcasts its parameters, the module its normaliser), the
    others' are discarded unreleased. Process 0 alone tests, writes the release and
    returns the result (the others return ``{"rank": r}``).

``data.source`` is ``bundled`` (scikit-learn sets), ``uci`` or ``mnist`` (files in
``data.data_dir`` or ``$DP_PROTO_DATA_DIR``) or ``synthetic`` (a generator of
``dp_proto.data.synthetic``).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from dp_proto._threads import fit_threads, step_work
from dp_proto.backbones import small_cnn
from dp_proto.experiments.config import merge_config, validate_config
from dp_proto.experiments.data import load_arrays, scale_to_public_bounds, warn_classes_from_data
from dp_proto.experiments.defaults import DEFAULT_CONFIG, load_config
from dp_proto.experiments.schema import check_accelerator
from dp_proto.lightning.callbacks import PRIVACY_SCOPE, PrivacySpendCallback, StderrProgressBar
from dp_proto.lightning.datamodule import ArrayDataModule, poisson_seed
from dp_proto.lightning.dp_module import DPLVQModule
from dp_proto.lightning.module import LVQModule
from dp_proto.lvq.init import make_prototype_labels
from dp_proto.lvq.layers import GLVQLayer, GMLVQLayer, LGMLVQLayer
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private.dp_init import dp_class_mean_prototypes
from dp_proto.lvq.private.estimators import DPGLVQ, DPGMLVQ, DPLGMLVQ
from dp_proto.lvq.private.opacus_adapter import check_expected_batch_size
from dp_proto.privacy.clipping import clip_box
from dp_proto.privacy.curator import curator_log
from dp_proto.privacy.dpsgd_plan import DPSGDPlan
from dp_proto.privacy.ledger import PrivacyLedger
from dp_proto.privacy.noise import gaussian_noise
from dp_proto.privacy.randomness import noise_generator

__all__ = [
    "DEFAULT_CONFIG",
    "PRIVACY_SCOPE",
    "load_config",
    "merge_config",
    "build_data",
    "build_private_module",
    "release_estimator",
    "write_release",
    "run_experiment",
]

_LAYERS = {"glvq": GLVQLayer, "gmlvq": GMLVQLayer, "lgmlvq": LGMLVQLayer}
_DP_ESTIMATORS = {"glvq": DPGLVQ, "gmlvq": DPGMLVQ, "lgmlvq": DPLGMLVQ}
# Config keys a release does not publish: local paths, and the noise seed (it replays the noise).
_NOT_PUBLISHED = (("data", "data_dir"), ("logging", "log_dir"), ("privacy", "noise_seed"))


def dp_sgd_plan(config: Mapping[str, Any]) -> DPSGDPlan | None:
    """The ``DPSGDPlan`` of a private config (``None`` for a non-private
    one): the Poisson loader's rate, the ledger, the steps and the noise multiplier all come
    from it."""
    privacy = config["privacy"]
    if privacy["epsilon"] is None:
        return None
    return DPSGDPlan(
        float(privacy["epsilon"]),
        float(privacy["delta"]),
        float(privacy["sampling_rate"]),
        int(config["training"]["max_epochs"]),
        init_fraction=float(privacy["init_fraction"]),
        calibration=privacy["calibration"],
    )


def build_data(config: Mapping[str, Any]) -> ArrayDataModule:
    """The ``ArrayDataModule`` described by ``config['data']``."""
    cfg, seed = config["data"], int(config["seed"])
    x, y = load_arrays(cfg, seed)
    if config["model"]["backbone"] is None and x.ndim > 2:
        x = x.reshape(len(x), -1)
    privacy = config["privacy"]
    if privacy["epsilon"] is not None:
        if cfg["scaling"] != "none" or cfg["pca"]:
            raise ValueError(
                "a private run needs data.scaling: none and data.pca: null (both would be "
                "fitted on the private data); give public privacy.bounds instead"
            )
        x = scale_to_public_bounds(x, privacy["bounds"])
        if privacy["classes"] is None:
            warn_classes_from_data()
    if cfg["subsample"] and cfg["subsample"] < len(y):
        from sklearn.model_selection import train_test_split

        keep, _ = train_test_split(np.arange(len(y)), train_size=int(cfg["subsample"]), random_state=seed, stratify=y)
        x, y = x[keep], y[keep]
    plan = dp_sgd_plan(config)
    private = plan is not None
    noise_seed = privacy["noise_seed"]
    return ArrayDataModule(
        x,
        y,
        val_size=cfg["val_size"],
        test_size=cfg["test_size"],
        scaling=cfg["scaling"],
        pca=cfg["pca"],
        batch_size=cfg["batch_size"],
        seed=seed,
        sampling_rate=plan.sampling_rate if private else None,
        classes=privacy["classes"] if private else None,
        # Poisson coins: fresh entropy, or a stream of their own derived from noise_seed
        sampling_seed=poisson_seed(noise_seed) if private and noise_seed is not None else None,
    )


def build_model(config: Mapping[str, Any], dm: ArrayDataModule) -> PrototypeModel:
    """The ``PrototypeModel`` described by ``config['model']`` for the data of ``dm``."""
    cfg, seed = config["model"], int(config["seed"])
    kind = str(cfg["type"]).lower()
    if kind not in _LAYERS:
        raise ValueError(f"unknown model.type {cfg['type']!r}; expected one of {sorted(_LAYERS)}")
    backbone = None
    n_features = dm.num_features
    if cfg["backbone"] == "cnn":
        if len(dm.input_shape) != 3:
            raise ValueError(f"the cnn backbone needs image input (C, H, W), got {dm.input_shape}")
        backbone = small_cnn(dm.input_shape[0], cfg["backbone_features"])
        n_features = cfg["backbone_features"]
    elif cfg["backbone"] is not None:
        raise ValueError(f"unknown model.backbone {cfg['backbone']!r}; expected null or 'cnn'")
    ppc = cfg["prototypes_per_class"]
    labels = make_prototype_labels(dm.num_classes, ppc)
    kwargs: dict[str, Any] = {}
    if kind != "glvq":
        kwargs = {
            "rank": cfg["rank"],
            "omega_init": cfg["omega_init"],
            "normalize": cfg["normalize"],
            "generator": torch.Generator().manual_seed(seed),
        }
    layer = _LAYERS[kind](n_features, len(labels), prototypes="zeros", **kwargs)  # the module places them
    return PrototypeModel(layer, labels, backbone=backbone)


def backbone_spec(config: Mapping[str, Any], dm: ArrayDataModule) -> dict[str, Any] | None:
    """The backbone ``build_model`` makes, as a plain spec (``dp_proto.lightning.module.describe_model``)
    that lets ``load_from_checkpoint`` rebuild it; None without a backbone."""
    if config["model"]["backbone"] != "cnn":
        return None
    return {
        "name": "small_cnn",
        "in_channels": int(dm.input_shape[0]),
        "out_features": int(config["model"]["backbone_features"]),
    }


def run_experiment(config: Mapping[str, Any]) -> dict[str, Any]:
    """Train and test the model a config describes; returns accuracies, timing and the log dir.

    A private run's guarantee covers the training split only (see the module docstring,
    "Scope of the guarantee"); ``val_acc`` and ``test_acc`` are not private.

    Returns
    -------
    dict with ``test_acc``, ``val_acc``, ``train_acc`` (NaN for a private run: not
    logged), ``fit_seconds``, ``log_dir``, ``config``, the trained ``module`` and
    ``datamodule``, and for a private run ``epsilon``, ``ledger`` and ``privacy_scope``.
    """
    config = merge_config(DEFAULT_CONFIG, config)
    validate_config(config, "lvq")  # a config built in code gets the CLI's one-line errors
    check_accelerator(config["training"]["accelerator"])
    if int(config["trainer"]["devices"]) < 1:
        raise ValueError(f"trainer.devices must be >= 1, got {config['trainer']['devices']}")
    seed = int(config["seed"])
    L.seed_everything(seed, workers=True, verbose=False)
    dm = build_data(config)
    dm.setup()
    model = build_model(config, dm)
    train, log = config["training"], config["logging"]
    image_shape = log["image_shape"]
    module_kwargs = dict(
        optimizer=train["optimizer"],
        lr=train["lr"],
        momentum=train["momentum"],
        metric_lr_scale=train["metric_lr_scale"],
        group_lasso=train["group_lasso"],
        transfer_fn=train["transfer_fn"],
        beta=train["beta"],
        image_shape=image_shape,
        image_every_n_epochs=log["image_every_n_epochs"],
        display_transform=dm.inverse_transform if image_shape and dm.pca is None else None,
        model_spec={"backbone": backbone_spec(config, dm)},  # the layer is read from the model
    )
    generator = torch.Generator().manual_seed(seed)  # non-private randomness only
    private = config["privacy"]["epsilon"] is not None
    callbacks: list[L.Callback] = []
    ledger = None
    if private:
        x_train, y_train = dm.train_tensors()
        module, ledger = build_private_module(config, x_train, y_train, dm.num_classes, model, module_kwargs)
        callbacks.append(PrivacySpendCallback(ledger, scope=PRIVACY_SCOPE))
    else:
        module = LVQModule(model, max_lbfgs_iter=train["max_lbfgs_iter"], **module_kwargs)
        if config["model"]["backbone"] is None:
            x_train, y_train = dm.train_tensors()
            module.init_prototypes(x_train, y_train, generator=generator)
    if config["model"]["backbone"] is not None:
        # Class means of an untrained backbone's features nearly coincide, which starts
        # the cost on its mu = 0 plateau; standard-normal prototypes train (mnist_cnn_gmlvq).
        # They are data-independent, so a private run spends nothing on them.
        with torch.no_grad():
            protos = model.layer.prototypes
            protos.copy_(torch.randn(protos.shape, generator=generator, dtype=protos.dtype))
    if train["progress_bar"]:
        callbacks.append(StderrProgressBar())  # stdout stays free for results (the CLI's --json)
    name = log["name"] or f"{config['data']['name']}_{config['model']['type']}"
    logger = TensorBoardLogger(log["log_dir"], name=name, default_hp_metric=False)
    devices = int(config["trainer"]["devices"])
    trainer = L.Trainer(
        max_epochs=train["max_epochs"],
        accelerator=train["accelerator"],
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        # DP-SGD: each process Poisson-samples its own shard (ArrayDataModule), never a distributed sampler
        use_distributed_sampler=not private,
        logger=logger,
        enable_progress_bar=bool(train["progress_bar"]),
        enable_checkpointing=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        deterministic=False,
        num_sanity_val_steps=0,
        callbacks=callbacks,
    )
    start = time.perf_counter()
    with fit_threads(*_thread_work(config, dm, model)):
        trainer.fit(module, datamodule=dm)
    fit_seconds = time.perf_counter() - start
    if trainer.global_rank != 0:  # a data-parallel worker: process 0 tests and reports
        return {"rank": trainer.global_rank}
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    test = _test_trainer(trainer, train["accelerator"]).test(module, datamodule=dm, verbose=False)[0]
    release_dir = None
    if private and config["model"]["backbone"] is None:
        release_dir = str(write_release(config, module, dm, Path(logger.log_dir) / "release").resolve())
    return {
        "test_acc": float(test["test_acc"]),
        "val_acc": metrics.get("val_acc", float("nan")),
        "train_acc": metrics.get("train_acc", float("nan")),
        "fit_seconds": fit_seconds,
        "log_dir": str(Path(logger.log_dir).resolve()),
        "config": config,
        "module": module,
        "datamodule": dm,
        "epsilon": ledger.get_epsilon(config["privacy"]["delta"]) if ledger is not None else None,
        "ledger": ledger,
        "privacy_scope": PRIVACY_SCOPE if ledger is not None else None,
        "release_dir": release_dir,
    }


def _thread_work(config: Mapping[str, Any], dm: ArrayDataModule, model: PrototypeModel) -> tuple[float, str]:
    """``(work per step, device)`` for ``dp_proto._threads.fit_threads``, as the estimators
    choose their threads: a prototype model on raw features on the CPU trains on one torch
    thread unless its steps are large. A backbone, data-parallel training and other
    devices keep torch's setting (infinite work, or the device)."""
    accelerator = str(config["training"]["accelerator"])
    on_gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    if on_gpu or config["model"]["backbone"] is not None or int(config["trainer"]["devices"]) > 1:
        return float("inf"), "cuda" if on_gpu else "cpu"
    n_train = len(dm.train_tensors()[0])
    private = config["privacy"]["epsilon"] is not None
    rows = float(config["privacy"]["sampling_rate"]) * n_train if private else (dm.batch_size or n_train)
    return step_work(rows, model), "cpu"


def _test_trainer(trainer: L.Trainer, accelerator: str) -> L.Trainer:
    """The trainer that tests: the training one, or after data-parallel training a
    single-device trainer in process 0 (every test record counted once, no collective)."""
    if trainer.world_size == 1:
        return trainer
    if torch.distributed.is_initialized():  # the other processes have finished; nothing more is exchanged
        torch.distributed.destroy_process_group()
    return L.Trainer(accelerator=accelerator, devices=1, logger=False, enable_progress_bar=False,
                     enable_model_summary=False, enable_checkpointing=False)  # fmt: skip


def release_estimator(config: Mapping[str, Any], module: DPLVQModule, dm: ArrayDataModule) -> Any:
    """The trained private run as a fitted ``DPGLVQ`` / ``DPGMLVQ`` / ``DPLGMLVQ``
    (``model.type``) that predicts on raw features, for ``write_release``.

    Its hyperparameters are the config's where the estimator has them (``privacy.*``,
    ``training.optimizer`` as ``solver``, ``lr``, ``metric_lr_scale``,
    ``transfer_fn``, ``beta``, ``max_epochs`` as ``epochs``, ``model.*``, ``seed`` as
    ``random_state``; ``classes`` is the run's public label set); its ``scaler_`` maps
    ``privacy.bounds`` onto ``[-1, 1]`` like the run's data; its ``model_`` is a copy of
    the module's; ``privacy_scope_`` is ``PRIVACY_SCOPE``.

    Parameters
    ----------
    config : mapping
        The run's full config (private, ``model.backbone`` null).
    module : DPLVQModule
        The trained module (its model, ledger and DP-SGD settings).
    dm : ArrayDataModule
        The run's data (its ``classes_``).
    """
    privacy, train, model_cfg = config["privacy"], config["training"], config["model"]
    if model_cfg["backbone"] is not None:
        raise ValueError("a model with a backbone has no release format yet")
    cls = _DP_ESTIMATORS[str(model_cfg["type"]).lower()]
    params = {
        "prototypes_per_class": model_cfg["prototypes_per_class"],
        "epsilon": float(privacy["epsilon"]),
        "delta": float(privacy["delta"]),
        "sampling_rate": float(privacy["sampling_rate"]),
        "max_grad_norm": float(privacy["max_grad_norm"]),
        "epochs": train["max_epochs"],
        "init_fraction": float(privacy["init_fraction"]),
        "calibration": privacy["calibration"],
        "bounds": privacy["bounds"],
        "classes": dm.classes_.tolist(),
        "solver": train["optimizer"],
        "lr": train["lr"],
        "metric_lr_scale": train["metric_lr_scale"],
        "group_lasso": train["group_lasso"],
        "transfer_fn": train["transfer_fn"],
        "beta": train["beta"],
        "rank": model_cfg["rank"],
        "omega_init": model_cfg["omega_init"],
        "normalize_omega": model_cfg["normalize"],
        "random_state": int(config["seed"]),
        "dtype": str(module.model.layer.prototypes.dtype).removeprefix("torch."),
    }
    fitted = {
        "n_iter_": int(module.steps_recorded),
        "noise_multiplier_": float(module.noise_multiplier),
        "sampling_rate_": float(module.sampling_rate),
        "expected_batch_size_": float(module.expected_batch_size),
        "stopped_by_budget_": bool(module.stopped_by_budget),
    }
    names = set(cls._get_param_names())
    return cls.from_trained(
        module.model,
        module.ledger,
        fitted=fitted,
        privacy_scope=PRIVACY_SCOPE,
        **{k: v for k, v in params.items() if k in names},
    )


def write_release(config: Mapping[str, Any], module: DPLVQModule, dm: ArrayDataModule, path: str | Path) -> Path:
    """Write the private run's model (``release_estimator``) in the release format to the
    directory ``path``, with the config (less local paths and ``privacy.noise_seed``) as
    the manifest's ``source``; returns the directory."""
    published = copy.deepcopy(dict(config))
    for section, key in _NOT_PUBLISHED:
        published.get(section, {}).pop(key, None)
    release = release_estimator(config, module, dm).to_release()
    release = dataclasses.replace(release, source={"command": "dp-proto train", "config": published})
    return release.save(path)


def build_private_module(
    config: Mapping[str, Any],
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    num_classes: int,
    model: PrototypeModel,
    module_kwargs: Mapping[str, Any],
) -> tuple[DPLVQModule, PrivacyLedger]:
    """The DP class-mean initialisation of ``model`` and a calibrated ``DPLVQModule``
    for the training split ``(x_train, y_train)`` (features already in ``[-1, 1]``).

    Noise from fresh entropy (or ``privacy.noise_seed``); the DP-SGD normaliser is
    ``privacy.expected_batch_size`` or ``q`` times the initialisation's noisy count
    (public; see the module docstring). Only public settings raise; the training split's
    size goes to the curator log (``dp_proto.curator``)."""
    privacy = config["privacy"]
    plan = dp_sgd_plan(config)  # public settings only
    with_init = config["model"]["backbone"] is None
    public_size = privacy["expected_batch_size"]
    if public_size is not None:
        public_size = check_expected_batch_size(public_size)
    elif not with_init:
        raise ValueError(
            "a private run without the DP initialisation (model.backbone) needs the public "
            "privacy.expected_batch_size: q * n would divide by the private record count"
        )
    curator_log("private experiment: %d training records", len(y_train))
    generator = noise_generator(privacy["noise_seed"], owner="the private experiment (privacy.noise_seed)")
    ledger = plan.new_ledger()
    expected_batch_size = public_size
    if with_init:
        init = dp_class_mean_prototypes(
            x_train.flatten(1),
            y_train,
            num_classes,
            plan.init_epsilon,
            ledger=ledger,
            prototypes_per_class=1,
            generator=generator,
        )
        ppc = int(config["model"]["prototypes_per_class"])
        prototypes = init.prototypes.to(torch.float64)[make_prototype_labels(num_classes, ppc)]
        if ppc > 1:  # data-independent jitter of the copies: non-private, from the config seed
            jitter = torch.Generator().manual_seed(int(config["seed"]))
            prototypes = clip_box(prototypes + gaussian_noise(prototypes.shape, 0.05, generator=jitter)).values
        with torch.no_grad():
            model.layer.prototypes.copy_(prototypes.to(model.layer.prototypes.dtype))
        from_release = plan.expected_batch_size(float(init.noisy_counts.sum()))  # post-processing of a release
        if expected_batch_size is None:
            expected_batch_size = from_release
    module = DPLVQModule(
        model,
        ledger=ledger,
        noise_multiplier=plan.noise_multiplier(ledger.events),
        max_grad_norm=float(privacy["max_grad_norm"]),
        sampling_rate=plan.sampling_rate,
        expected_batch_size=expected_batch_size,
        generator=generator,
        per_record=privacy["per_record"],  # validated: null (per record exactly when there is a backbone) or a bool
        **module_kwargs,
    )
    return module, ledger
