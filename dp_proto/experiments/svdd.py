"""Run the (private) SVDD equilibrium-point classifier from a config
(``dp-proto svdd [--config FILE] [key.sub=value ...]``).

Sections and defaults (unknown keys are rejected)::

    seed: 0        # the split, the random Fourier features and the start points (never the noise)
    data:    {source: bundled, name: iris, data_dir: null, test_size: 0.2, scaling: standard}
    privacy: {epsilon: null, bounds: null, classes: null, noise_seed: null}
    svdd:    {c_over_n: 0.05, gamma: 1.0, num_features: 400, starts: auto, r_max: null, ...}
    logging: {log_dir: runs, name: null}   # where a run writes its logs (and a private run its release)

``svdd`` holds every parameter of ``PrivateSVDDClassifier`` except
those set elsewhere (``epsilon``, ``classes`` and ``noise_seed`` from ``privacy``,
``random_state`` from ``seed``); ``SVDD_DEFAULTS`` lists them with the estimator's
defaults. ``svdd.bounds`` is the public box of the start points and of the grid, in the
scaled features: left null, a private run uses ``[-1, 1]`` (where the public bounds put
the data) and a non-private run the estimator's default ``(-4, 4)`` (standardised data).

Privacy. With ``privacy.epsilon`` set, the fit is ``epsilon``-DP (pure; every release is
in ``result["ledger"]``): features are mapped from the public ``privacy.bounds``
``[lower, upper]`` (floats, or one value per feature) onto ``[-1, 1]`` and clipped, so
``data.scaling`` must be ``none`` (a standard scaler's mean and spread would be computed
from the private records). Choose ``svdd.gamma`` for that scale: the kernel
``exp(-gamma ||x - y||^2)`` has length ``1 / sqrt(2 gamma)`` in units of half the public
range. ``privacy.classes`` is the public label set; left null, a private fit reads it
from the data and warns (``PrivacyLeakWarning``).

Scope of the guarantee: the training split only (add/remove one of its records). The
stratified split is drawn on all records and labels, and ``test_acc`` is computed
without noise on the held-out records: neither is private. A private run reports no
accuracy on the training split.

Randomness: every noise draw comes from fresh operating-system entropy unless
``privacy.noise_seed`` is given (reproducible noise, for tests and benchmarks: it warns
and the ledger says ``"noise": "reproducible"``).

Release. A private run ends by writing the fitted ``PrivateSVDDClassifier`` in the
release format (``dp_proto.release``) to ``<log_dir>/<name>/version_N/release/``
(``logging.log_dir``, ``logging.name``, default ``<data.name>_svdd``; ``N`` the next free
version): the labelled equilibrium points (or the support function, ``svdd.release``)
with the ledger, and under ``source`` the config (less ``privacy.noise_seed`` and the
local paths ``data.data_dir`` and ``logging.log_dir``), the scope above and the input
the model takes: features mapped from ``privacy.bounds`` onto ``[-1, 1]`` and clipped
(``dp_proto.experiments.data.scale_to_public_bounds``), the scale it was fitted on.
``dp_proto.load_release(path)`` loads it; ``result["release_dir"]`` is the path.

Logs. Every run writes TensorBoard logs into its ``version_N`` folder
(``result["log_dir"]``, ``log_svdd_run``): the published config, the accuracies, the fit
time and, for a private run, ``privacy/epsilon`` and the ledger, as the Lightning
trainers log them.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np

from dp_proto.experiments._release import new_run_dir, published_config
from dp_proto.experiments.config import merge_config, validate_config
from dp_proto.experiments.data import load_arrays, scale_to_public_bounds
from dp_proto.experiments.defaults import SVDD_DEFAULTS, load_svdd_config
from dp_proto.svdd import PrivateSVDDClassifier

__all__ = [
    "SVDD_DEFAULTS",
    "SVDD_PRIVACY_SCOPE",
    "SVDD_RELEASE_INPUT",
    "load_svdd_config",
    "log_svdd_run",
    "run_svdd_experiment",
    "write_svdd_release",
]

#: What the guarantee of a private run covers (printed with it).
SVDD_PRIVACY_SCOPE = (
    "the epsilon guarantee covers the training split only; the split (drawn on all records and "
    "labels) and the test accuracy (computed on held-out records) are not private"
)

_SCALINGS = ("standard", "none")

# Config keys a release does not publish: local paths, and the noise seed (it replays the noise).
_NOT_PUBLISHED = (("data", "data_dir"), ("logging", "log_dir"), ("privacy", "noise_seed"))

#: The input of a released model (the manifest's ``source["input"]``).
SVDD_RELEASE_INPUT = (
    "features mapped from the public privacy.bounds [lower, upper] onto [-1, 1] and clipped "
    "(dp_proto.experiments.data.scale_to_public_bounds), the scale of the fit"
)


def _split_and_scale(config: dict[str, Any], private: bool) -> tuple[np.ndarray, ...]:
    """``(X_train, X_test, y_train, y_test)``: a stratified split of the configured data,
    the features on the public scale (private) or standardised with the training split."""
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    data, seed = config["data"], int(config["seed"])
    if data["scaling"] not in _SCALINGS:
        raise ValueError(f"unknown data.scaling {data['scaling']!r}; expected one of {_SCALINGS}")
    if private and data["scaling"] != "none":
        raise ValueError(
            "a private run needs data.scaling: none (a standard scaler is fitted on the private "
            "records); give the public privacy.bounds instead"
        )
    x, y = load_arrays(data, seed)
    x = x.reshape(len(x), -1)
    if config["privacy"]["bounds"] is not None or private:
        x = scale_to_public_bounds(x, config["privacy"]["bounds"])
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=data["test_size"], random_state=seed, stratify=y
    )
    if data["scaling"] == "standard":
        scaler = StandardScaler().fit(x_train)
        x_train, x_test = scaler.transform(x_train), scaler.transform(x_test)
    return x_train, x_test, y_train, y_test


def run_svdd_experiment(config: dict[str, Any]) -> dict[str, Any]:
    """Fit ``PrivateSVDDClassifier`` on the training split and test it.

    Returns
    -------
    dict with ``test_acc``, ``train_acc`` (``None`` for a private run: not computed),
    ``epsilon`` (``None`` when non-private), ``starts`` (the start mode used),
    ``labelled_points`` (equilibrium points the model classifies with), ``fit_seconds``,
    ``privacy_scope`` (private runs), ``release_dir`` (private runs: the release written,
    see the module docstring; else ``None``), ``log_dir`` (the run's folder, with its
    TensorBoard logs: ``log_svdd_run``), ``ledger``, the fitted ``estimator`` and
    ``config``. A private fit's ``estimator.curator_`` holds curator-only diagnostics
    (the written release leaves them out): delete it before publishing the estimator
    another way.

    Raises
    ------
    ConfigError
        A key the experiment does not have, or a value of the wrong type (one line,
        ``dp_proto.experiments.config.validate_config``).
    ValueError
        A private run with ``data.scaling`` other than ``none`` or without
        ``privacy.bounds``.
    """
    config = merge_config(SVDD_DEFAULTS, config)
    validate_config(config, "svdd")
    privacy, params = config["privacy"], dict(config["svdd"])
    epsilon = privacy["epsilon"]
    private = epsilon is not None
    if private and params["bounds"] is None:
        params["bounds"] = (-1.0, 1.0)  # where the public bounds put the features
    estimator = PrivateSVDDClassifier(
        epsilon=epsilon,
        classes=privacy["classes"],
        noise_seed=privacy["noise_seed"],
        random_state=int(config["seed"]),
        **params,
    )
    x_train, x_test, y_train, y_test = _split_and_scale(config, private)
    start = time.perf_counter()
    estimator.fit(x_train, y_train)
    fit_seconds = time.perf_counter() - start
    ledger = estimator.ledger_
    name = config["logging"]["name"] or f"{config['data']['name']}_svdd"
    run_dir = new_run_dir(config["logging"]["log_dir"], name)
    release_dir = None
    if private:
        release_dir = str(write_svdd_release(config, estimator, run_dir / "release").resolve())
    result = {
        "test_acc": float(estimator.score(x_test, y_test)),
        "train_acc": None if private else float(estimator.score(x_train, y_train)),
        "epsilon": ledger.get_epsilon(0.0) if private else None,
        "starts": estimator.starts_,
        "labelled_points": len(estimator.labelled_points_),
        "fit_seconds": fit_seconds,
        "privacy_scope": SVDD_PRIVACY_SCOPE if private else None,
        "release_dir": release_dir,
        "log_dir": str(run_dir.resolve()),
        "ledger": ledger,
        "estimator": estimator,
        "config": config,
    }
    log_svdd_run(run_dir, result)
    return result


def log_svdd_run(run_dir: Path, result: dict[str, Any]) -> None:
    """Write a run's TensorBoard logs into ``run_dir`` (``<log_dir>/<name>/version_N``), as
    the Lightning trainers do: the config (less local paths and the noise seed) as
    hyperparameters; ``test_acc``, ``train_acc`` (non-private runs), ``fit_seconds`` and
    ``labelled_points``; for a private run ``privacy/epsilon``, ``privacy/delta`` and the
    ledger as the text ``privacy/ledger``."""
    from lightning.pytorch.loggers import TensorBoardLogger

    from dp_proto.lightning.callbacks import ledger_text

    logger = TensorBoardLogger(
        str(run_dir.parent.parent), name=run_dir.parent.name, version=run_dir.name, default_hp_metric=False
    )
    logger.log_hyperparams(published_config(result["config"], _NOT_PUBLISHED))
    keys = ("test_acc", "train_acc", "fit_seconds", "labelled_points")
    metrics = {k: float(result[k]) for k in keys if result[k] is not None}
    if result["epsilon"] is not None:
        metrics.update({"privacy/epsilon": float(result["epsilon"]), "privacy/delta": 0.0})
        logger.experiment.add_text("privacy/ledger", ledger_text(result["ledger"], result["privacy_scope"]), 0)
    logger.log_metrics(metrics, step=0)
    logger.finalize("success")


def write_svdd_release(config: dict[str, Any], estimator: PrivateSVDDClassifier, path: str | Path) -> Path:
    """Write the fitted estimator of a run in the release format to the directory
    ``path``, with ``source``: the command, the config less local paths and
    ``privacy.noise_seed``, ``SVDD_PRIVACY_SCOPE`` and ``SVDD_RELEASE_INPUT``.

    Parameters
    ----------
    config : dict
        The run's full config.
    estimator : PrivateSVDDClassifier
        The fitted estimator.
    path : str or Path
        The release directory (created if needed).

    Returns
    -------
    Path
        The directory.
    """
    source = {
        "command": "dp-proto svdd",
        "config": published_config(config, _NOT_PUBLISHED),
        "privacy_scope": SVDD_PRIVACY_SCOPE,
        "input": SVDD_RELEASE_INPUT,
    }
    return dataclasses.replace(estimator.to_release(), source=source).save(path)
