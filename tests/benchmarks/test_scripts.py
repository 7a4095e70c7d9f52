"""Smoke runs of the DP-SGD benchmark scripts: they finish and end with their JSON line."""

import importlib
import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from dp_proto.exceptions import PrivacyLeakWarning

ROOT = Path(__file__).resolve().parents[2]


def _run(module: str, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_speed_benchmark_reports_the_fused_engine():
    out = _run("dpsgd.speed", "--quick", "--threads", "1", "--modes", "nonprivate", "dp_fused")
    assert out["benchmark"] == "dpsgd_speed"
    for model in ("glvq_d784", "gmlvq_d784", "lgmlvq_d30"):
        assert out["results"][model]["dp_fused"] > 0
    assert out["headline"]["glvq784_dp_over_nonprivate"] > 0


def test_accuracy_cells_opt_in_to_reproducible_noise():
    """The private cells pass their seed as noise_seed (random_state alone no longer
    reaches the noise); the opt-in is written into the fitted model's ledger."""
    make_private = importlib.import_module("benchmarks.dpsgd.accuracy").make_private
    est = make_private("GLVQ", epsilon=5.0, calibration="paper", bound=3.0, lr=None, seed=11, classes=np.arange(2))
    assert est.noise_seed == 11
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(-1.0, 0.5, (100, 3)), rng.normal(1.0, 0.5, (100, 3))])
    y = np.repeat([0, 1], 100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        fits = [
            make_private("GLVQ", epsilon=5.0, calibration="paper", bound=3.0, lr=None, seed=11, classes=np.arange(2))
            .set_params(epochs=1)
            .fit(X, y)
            for _ in range(2)
        ]
    np.testing.assert_array_equal(fits[0].prototypes_, fits[1].prototypes_)
    assert fits[0].privacy_["noise"] == "reproducible"


@pytest.mark.data
def test_accuracy_benchmark_runs_one_cell(real_data_dir):
    out = _run(
        "dpsgd.accuracy",
        "--data-dir",
        str(real_data_dir),
        "--datasets",
        "segmentation",
        "--quick",
        "--folds",
        "2",
        "--epsilons",
        "5",
        "--models",
        "GLVQ",
        "--calibrations",
        "ledger",
        "--threads",
        "1",
    )
    (key,) = out["results"]
    assert key.startswith("segmentation (quick")
    mean_error, _ = out["results"][key]["GLVQ"]["ledger"]["5"]
    assert mean_error < 0.35  # Table B.1: 0.183
    assert out["certified_epsilon"][key]["GLVQ"]["ledger"]["5"] <= 5.0


@pytest.mark.data
def test_gmlvq_diagnosis_separates_clipping_from_noise(real_data_dir):
    unclipped, clipped = "trace 1, C 100, lr 0.005, Omega x1, noise free", "trace 1, C 0.5, lr 0.05, Omega x0.1"
    out = _run(
        "studies.dpsgd_gmlvq_diagnosis",
        "--data-dir",
        str(real_data_dir),
        "--splits",
        "1",
        "--epsilons",
        "5",
        "--threads",
        "1",
        "--configs",
        unclipped,
        clipped,
    )
    results = out["results"]
    assert set(results) == {unclipped, clipped} and out["nonprivate"] < 0.15
    # without clipping and noise DP-GMLVQ gets far closer to L-BFGS than with them
    assert results[unclipped]["5"] < results[clipped]["5"] - 0.03


def test_plot_loader_merges_runs_of_other_models_of_a_data_set(tmp_path):
    load = importlib.import_module("benchmarks.dpsgd.plot_accuracy").load
    glvq = {"results": {"seg": {"GLVQ": {"ledger": {"1": [0.2, 0.01]}}}}, "nonprivate": {"seg": {"GLVQ": [0.1, 0.0]}}}
    gmlvq = {
        "results": {"seg": {"GMLVQ": {"paper": {"1": [0.3, 0.02]}}}},
        "nonprivate": {"seg": {"GMLVQ": [0.09, 0.0]}},
    }
    paths = []
    for i, payload in enumerate((glvq, gmlvq)):
        path = tmp_path / f"{i}.json"
        path.write_text("progress\n" + json.dumps(payload))
        paths.append(str(path))
    merged = load(paths)
    assert set(merged["results"]["seg"]) == {"GLVQ", "GMLVQ"}
    assert merged["nonprivate"]["seg"] == {"GLVQ": [0.1, 0.0], "GMLVQ": [0.09, 0.0]}


@pytest.mark.data
def test_tuning_compares_optimizers_and_transfers(real_data_dir):
    out = _run(
        "studies.dpsgd_tuning",
        "--data-dir",
        str(real_data_dir),
        "--model",
        "glvq",
        "--datasets",
        "vowel",
        "--epsilons",
        "5",
        "--splits",
        "1",
        "--solvers",
        "sgd",
        "adam",
        "--sigmoid-betas",
        "0",
        "8",
        "--lrs",
        "0.05",
        "--average-last",
        "0",
    )
    # SGD (the default) stays out of the labels; a transfer that was asked for is named, the
    # identity too (the estimators' own default is the sigmoid)
    assert set(out["results"]) == {
        "transfer_fn=identity lr=0.05 average_last=0",
        "solver=adam transfer_fn=identity lr=0.05 average_last=0",
        "transfer_fn=sigmoid beta=8 lr=0.05 average_last=0",
        "solver=adam transfer_fn=sigmoid beta=8 lr=0.05 average_last=0",
    }
    # plain SGD learns (vowel: 11 classes, chance error 10/11; measured 0.50-0.57); Adam at
    # lr 0.05 is near chance for some noise seeds (identity transfer: 0.76-0.91 over six seeds,
    # the reason it was not adopted), so only its error is checked to be a rate
    assert all(err < 0.8 for name, err in out["results"].items() if not name.startswith("solver=adam"))
    assert all(0.0 <= err <= 1.0 for err in out["results"].values())
