"""``dp-proto svdd`` and :func:`dp_proto.experiments.svdd.run_svdd_experiment`."""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path

import numpy as np
import pytest

from dp_proto.cli import main
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.experiments.svdd import SVDD_DEFAULTS, load_svdd_config, run_svdd_experiment
from dp_proto.svdd import PrivateSVDDClassifier

CONFIG = Path(__file__).resolve().parents[2] / "training" / "configs" / "five_gaussians_svdd.yaml"


def test_the_svdd_section_is_every_estimator_parameter_not_set_elsewhere():
    params = PrivateSVDDClassifier().get_params()
    elsewhere = {"epsilon", "classes", "noise_seed", "random_state", "ledger"}
    assert set(SVDD_DEFAULTS["svdd"]) == set(params) - elsewhere
    assert all(SVDD_DEFAULTS["svdd"][k] == params[k] for k in SVDD_DEFAULTS["svdd"])


def _scalars(log_dir: str) -> dict[str, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(log_dir)
    acc.Reload()
    return {tag: acc.Scalars(tag)[-1].value for tag in acc.Tags()["scalars"]}


def test_non_private_default_run_on_iris(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run_svdd_experiment({})
    assert result["epsilon"] is None and result["privacy_scope"] is None and result["release_dir"] is None
    assert result["test_acc"] > 0.85 and result["train_acc"] > 0.85  # measured 0.97 / 0.96
    assert [e.name for e in result["ledger"].events] == ["svdd/non_private"]
    assert result["log_dir"] == str((tmp_path / "runs" / "iris_svdd" / "version_0").resolve())
    logged = _scalars(result["log_dir"])
    assert logged["test_acc"] == pytest.approx(result["test_acc"]) and "privacy/epsilon" not in logged


@pytest.mark.slow
def test_private_config_file_is_fully_private_and_reports_its_guarantee(caplog, tmp_path):
    config = load_svdd_config(CONFIG, [f"logging.log_dir={tmp_path}"])
    with warnings.catch_warnings(), caplog.at_level(logging.DEBUG, logger="dp_proto.curator"):
        warnings.simplefilter("error")  # public bounds, classes and fresh noise: nothing leaks, nothing warns
        result = run_svdd_experiment(config)
    assert result["epsilon"] == pytest.approx(1.0) and result["train_acc"] is None
    assert "training split only" in result["privacy_scope"]
    assert sorted(e.name for e in result["ledger"].events) == ["svdd/centre", "svdd/record_count", "svdd/votes"]
    assert result["ledger"].noise == "fresh"
    # chance is 0.2; fresh noise measured 0.90-0.92 over three seeds (non-private 0.92)
    assert result["test_acc"] > 0.7
    estimator = result["estimator"]
    assert estimator.bounds == (-1.0, 1.0) and estimator.random_state == config["seed"]
    np.testing.assert_array_equal(estimator.classes_, np.arange(5))
    assert result["release_dir"] == str((tmp_path / "five_gaussians_svdd" / "version_0" / "release").resolve())
    logged = _scalars(result["log_dir"])  # the same TensorBoard logs as the Lightning trainers
    assert logged["privacy/epsilon"] == pytest.approx(1.0) and logged["test_acc"] == pytest.approx(result["test_acc"])


def test_private_run_maps_the_public_bounds_onto_the_unit_box():
    from sklearn.model_selection import train_test_split

    from dp_proto.data import five_gaussians
    from dp_proto.experiments.svdd import _split_and_scale

    config = load_svdd_config(CONFIG)
    x_train, x_test, _, y_test = _split_and_scale(config, private=True)
    x, y = five_gaussians(random_state=config["seed"])
    _, raw_test, _, raw_y = train_test_split(x, y, test_size=0.2, random_state=config["seed"], stratify=y)
    np.testing.assert_allclose(x_test, raw_test / 10.0)  # [-10, 10] -> [-1, 1], nothing fitted
    np.testing.assert_array_equal(y_test, raw_y)
    assert np.abs(x_train).max() <= 1.0


@pytest.mark.parametrize(
    ("path", "overrides", "error", "match"),
    [
        (None, ["privacy.epsilon=1"], ValueError, "data.scaling: none"),
        (CONFIG, ["privacy.bounds=null"], ValueError, r"privacy.bounds: \[lower, upper\]"),
        (None, ["data.scaling=minmax"], ValueError, "data.scaling: expected one of 'standard', 'none', got 'minmax'"),
        (CONFIG, ["svdd.epsilon=1"], KeyError, "unknown config key 'svdd.epsilon'"),
        (None, ["data.source=web"], ValueError, "data.source: expected one of 'bundled', .*, got 'web'"),
    ],
)
def test_bad_configs_are_refused(path, overrides, error, match):
    with pytest.raises(error, match=match):
        run_svdd_experiment(load_svdd_config(path, overrides))


@pytest.mark.slow
def test_a_private_run_without_public_classes_warns(tmp_path):
    with pytest.warns(PrivacyLeakWarning, match="classes"):
        run_svdd_experiment(load_svdd_config(CONFIG, ["privacy.classes=null", f"logging.log_dir={tmp_path}"]))


@pytest.mark.slow
def test_cli_svdd_text_and_json(capsys, tmp_path, monkeypatch):
    assert main(["svdd", "--config", str(CONFIG), "--log-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "private SVDD equilibrium-point classifier on synthetic:five_gaussians" in out
    assert "1-DP, certified by the ledger" in out and "not computed (private)" in out
    assert f"release    {(tmp_path / 'five_gaussians_svdd' / 'version_0' / 'release').resolve()}" in out
    assert f"TensorBoard logs in {(tmp_path / 'five_gaussians_svdd' / 'version_0').resolve()}" in out
    monkeypatch.chdir(tmp_path)
    assert main(["svdd", "--json", "data.name=wine"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["epsilon"] is None and summary["test_acc"] > 0.85  # measured 0.97
    assert summary["release_dir"] is None
    assert main(["svdd", "privacy.epsilon=1"]) == 2
    assert "data.scaling: none" in capsys.readouterr().err
