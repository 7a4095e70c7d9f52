"""LVQModule, the experiment runner, the dp-proto CLI and the training configs."""

import json
import logging
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import yaml

from dp_proto.cli import main
from dp_proto.exceptions import DataValidationError, PrivacyLeakWarning
from dp_proto.experiments.lvq import (
    DEFAULT_CONFIG,
    build_data,
    load_config,
    merge_config,
    run_experiment,
)

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "training" / "configs").glob("*.yaml"))


def _tiny(tmp_path, **sections):
    config = {
        "data": {"source": "bundled", "name": "iris", "batch_size": 32},
        "model": {"type": "gmlvq"},
        "training": {"max_epochs": 15, "lr": 0.05, "progress_bar": False, "accelerator": "cpu"},
        "logging": {"log_dir": str(tmp_path), "image_shape": [2, 2], "image_every_n_epochs": 5},
    }
    for key, value in sections.items():
        config[key].update(value)
    return config


def _event_tags(log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(log_dir, size_guidance={"images": 0, "scalars": 0})
    acc.Reload()
    return acc.Tags()


@pytest.mark.parametrize("kind", ["glvq", "gmlvq", "lgmlvq"])
def test_run_experiment_logs_scalars_and_images(tmp_path, kind):
    result = run_experiment(_tiny(tmp_path, model={"type": kind}))
    assert result["test_acc"] >= 0.8
    tags = _event_tags(result["log_dir"])
    assert {"train_loss", "train_acc", "val_acc", "test_acc"} <= set(tags["scalars"])
    assert "prototypes" in tags["images"]
    if kind == "gmlvq":
        assert "relevance_matrix" in tags["images"]
    if kind == "lgmlvq":
        assert "relevance_matrix/prototype_0" in tags["images"]


def test_lbfgs_full_batch(tmp_path):
    result = run_experiment(
        _tiny(tmp_path, data={"batch_size": None}, training={"optimizer": "lbfgs", "max_epochs": 5})
    )
    assert result["test_acc"] >= 0.85


def test_trace_normalised_after_training(tmp_path):
    result = run_experiment(_tiny(tmp_path, training={"max_epochs": 2}))
    lam = result["module"].model.layer.relevance_matrix
    assert torch.trace(lam).item() == pytest.approx(1.0, abs=1e-5)


def test_config_merging_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"model": {"type": "glvq"}}))
    config = load_config(path, ["training.max_epochs=3", "model.rank=4", "data.pca=null"])
    assert config["model"]["type"] == "glvq" and config["training"]["max_epochs"] == 3
    assert config["model"]["rank"] == 4 and config["data"]["pca"] is None
    assert config["data"]["name"] == DEFAULT_CONFIG["data"]["name"]
    with pytest.raises(KeyError, match="unknown config key 'model.rnak'"):
        merge_config(DEFAULT_CONFIG, {"model": {"rnak": 3}})
    with pytest.raises(ValueError, match="key.subkey=value"):
        load_config(None, ["training.max_epochs"])


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_shipped_configs_are_valid(path):
    if path.stem.endswith("_anonymizer"):  # `dp-proto anonymize` configs have their own schema
        from dp_proto.experiments.anonymizer import load_anonymizer_config

        config = load_anonymizer_config(path)
        assert config["model"]["encoder"] in ("mlp", "cnn") and config["training"]["mode"] == "toggle"
        return
    if path.stem.endswith("_llp"):  # `dp-proto llp` configs
        from dp_proto.experiments.llp import LLP_DEFAULTS, load_llp_config

        assert load_llp_config(path) == LLP_DEFAULTS  # the shipped file spells out the defaults
        return
    if path.stem.endswith("_svdd"):  # `dp-proto svdd` configs
        from dp_proto.experiments.svdd import load_svdd_config

        config = load_svdd_config(path)
        assert config["privacy"]["epsilon"] is None or config["data"]["scaling"] == "none"
        return
    config = load_config(path)
    assert config["model"]["type"] in ("glvq", "gmlvq", "lgmlvq")


def test_cli_train_json(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_tiny(tmp_path)))
    assert main(["train", "--config", str(path), "training.max_epochs=3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert 0 <= out["test_acc"] <= 1 and Path(out["log_dir"]).is_dir()


def test_cli_reports_bad_config_cleanly(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"model": {"type": "svm"}}))
    assert main(["train", "--config", str(path), "--no-progress"]) == 2
    assert "model.type: expected one of 'glvq', 'gmlvq', 'lgmlvq', got 'svm'" in capsys.readouterr().err


@pytest.mark.slow
def test_demo_entry_point_quick(tmp_path):
    """The `make demo` path: the installed console script on the bundled digits,
    DP-GMLVQ at epsilon 1 next to non-private GMLVQ."""
    exe = Path(sys.executable).with_name("dp-proto")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "dp_proto.cli"]
    proc = subprocess.run(
        [*cmd, "demo", "--quick", "--no-progress", "--json", "--log-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    private, public = out["private"], out["nonprivate"]
    assert 0.9 < private["epsilon"] <= 1.0  # the ledger certifies the target
    assert public["epsilon"] is None and not private["train_acc"] == private["train_acc"]  # NaN: not logged
    # chance is 0.1. The noise is fresh on every run (no seed reaches it): 3 noisy epochs
    # measured 0.21-0.57 over 36 runs (mean 0.35, sd 0.08), so this bound fails ~0.2% of runs.
    assert private["test_acc"] > 0.12
    assert public["test_acc"] > 0.5  # 3 epochs only; the full demo reaches about 0.90
    assert Path(private["log_dir"]).is_dir() and Path(public["log_dir"]).is_dir()


@pytest.mark.slow
@pytest.mark.data
def test_mnist_cnn_config_runs_on_real_data(tmp_path, real_data_dir):
    config = load_config(
        ROOT / "training/configs/mnist_cnn_gmlvq.yaml",
        [
            "data.subsample=8000",
            "training.max_epochs=3",
            "training.progress_bar=false",
            f"data.data_dir={real_data_dir}",
            f"logging.log_dir={tmp_path}",
        ],
    )
    result = run_experiment(config)
    assert result["test_acc"] > 0.3  # chance is 0.1; 3 short epochs reach 0.45-0.7 depending on threads


@pytest.mark.slow
def test_private_config_runs_and_reports_its_guarantee(tmp_path, capsys):
    config = load_config(
        ROOT / "training/configs/digits_dp_gmlvq.yaml",
        ["training.max_epochs=2", "training.progress_bar=false", f"logging.log_dir={tmp_path}"],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)  # public bounds and classes: no leak
        result = run_experiment(config)
    assert result["epsilon"] <= 5.0 and result["epsilon"] > 4.5
    names = [e.name for e in result["ledger"].events]
    assert names == ["dp_init/class_counts", "dp_init/class_sums", "dp_sgd"]
    assert result["ledger"].events[-1].count == 2 * 20
    tags = _event_tags(result["log_dir"])
    assert "privacy/epsilon" in tags["scalars"] and "train_acc" not in tags["scalars"]
    bad = load_config(ROOT / "training/configs/digits_dp_gmlvq.yaml", ["data.scaling=standard"])
    with pytest.raises(ValueError, match="scaling: none"):
        run_experiment(bad)


def test_private_train_writes_a_release_that_predicts_like_the_module(tmp_path, capsys, monkeypatch):
    """`dp-proto train` on a private config ends by writing runs/<name>/version_N/release/
    and printing where; the release loads into a DPGMLVQ that predicts on raw features
    exactly like the trained module on the run's scaled features."""
    import numpy as np
    from sklearn.datasets import load_iris

    import dp_proto
    import dp_proto.experiments.lvq as lvq_experiment
    from dp_proto.experiments.data import scale_to_public_bounds
    from dp_proto.lightning.callbacks import PRIVACY_SCOPE

    runs = []
    real_run = lvq_experiment.run_experiment
    monkeypatch.setattr(lvq_experiment, "run_experiment", lambda config: runs.append(real_run(config)) or runs[-1])
    config = {
        "data": {"source": "bundled", "name": "iris", "scaling": "none", "batch_size": 32},
        "model": {"type": "gmlvq"},
        "training": {"max_epochs": 2, "optimizer": "sgd", "lr": 0.5, "momentum": 0.0, "progress_bar": False},
        "privacy": {
            "epsilon": 5.0,
            "sampling_rate": 0.1,
            "bounds": [0.0, 8.0],
            "classes": [0, 1, 2],
            "noise_seed": 31337,
        },
        "logging": {"log_dir": str(tmp_path), "name": "iris_dp", "image_shape": None},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)  # the noise seed (reproducible test)
        assert main(["train", "--config", str(path), "training.accelerator=cpu", "--no-progress"]) == 0
    (result,) = runs
    release_dir = Path(result["release_dir"])
    assert release_dir == (tmp_path / "iris_dp" / "version_0" / "release").resolve()
    assert f"release    {release_dir}" in capsys.readouterr().out
    assert {p.name for p in release_dir.iterdir()} == {"README.md", "manifest.json", "model.safetensors"}
    manifest_text = (release_dir / "manifest.json").read_text()
    assert "31337" not in manifest_text and str(tmp_path) not in manifest_text  # no seed, no local path

    est = dp_proto.load_release(release_dir)
    assert type(est).__name__ == "DPGMLVQ"
    X, y = load_iris(return_X_y=True)
    x_model = torch.as_tensor(scale_to_public_bounds(X, [0.0, 8.0]), dtype=torch.float32)
    module = result["module"]
    with torch.no_grad():
        distances = module.model(x_model)
    assert torch.equal(est.model_(x_model), distances)
    expected = result["datamodule"].classes_[module.model.predict(x_model).numpy()]
    np.testing.assert_array_equal(est.predict(X), expected)
    assert est.ledger_.get_epsilon() == result["epsilon"] == est.epsilon_
    assert est.privacy_scope_ == PRIVACY_SCOPE and est.n_iter_ == 2 * 10
    source = dp_proto.release.read_release(release_dir).source
    assert source["command"] == "dp-proto train" and "noise_seed" not in source["config"]["privacy"]


def test_private_config_takes_its_label_set_from_privacy_classes():
    path = ROOT / "training/configs/digits_dp_gmlvq.yaml"
    with pytest.warns(PrivacyLeakWarning, match="privacy.classes"):
        build_data(load_config(path, ["privacy.classes=null"]))
    with pytest.raises(DataValidationError, match="outside the public classes"):
        build_data(load_config(path, ["privacy.classes=[0, 1, 2, 3, 4, 5, 6, 7, 8]"]))
    # a public class without records keeps its place (labels are indices into the public set)
    dm = build_data(load_config(path, ["privacy.classes=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"]))
    assert dm.num_classes == 11


def test_private_data_clipped_into_the_bounds_raise_no_warning(caplog):
    """How many records the public bounds clip depends on the private data: the count goes
    to the curator log, never to a warning (one record outside the bounds must not show)."""
    path = ROOT / "training/configs/digits_dp_gmlvq.yaml"
    with warnings.catch_warnings(), caplog.at_level(logging.DEBUG, logger="dp_proto.curator"):
        warnings.simplefilter("error")
        build_data(load_config(path, ["privacy.bounds=[0, 8]"]))  # digits' pixels reach 16
    assert any("clipped" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
@pytest.mark.data
@pytest.mark.parametrize("name", ["segmentation_dp_gmlvq", "optdigits_dp_gmlvq", "mnist_dp_gmlvq"])
def test_private_benchmark_configs_run_on_real_data(name, tmp_path, real_data_dir):
    """Every DP config of the accuracy benchmark's data sets trains (one short epoch on a
    subsample) and reports its guarantee."""
    config = load_config(
        ROOT / f"training/configs/{name}.yaml",
        [
            "data.subsample=3000",
            "training.max_epochs=1",
            "training.progress_bar=false",
            f"data.data_dir={real_data_dir}",
            f"logging.log_dir={tmp_path}",
        ],
    )
    result = run_experiment(config)
    assert 0 < result["epsilon"] <= config["privacy"]["epsilon"]
    assert result["test_acc"] >= 0.0
    assert [e.name for e in result["ledger"].events][-1] == "dp_sgd"
