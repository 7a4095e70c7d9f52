"""Smoke runs of the DP-SGD benchmark scripts: they finish and end with their JSON line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_speed_benchmark_reports_the_fused_engine():
    out = _run("dpsgd_speed.py", "--quick", "--threads", "1", "--modes", "nonprivate", "dp_fused")
    assert out["benchmark"] == "dpsgd_speed"
    for model in ("glvq_d784", "gmlvq_d784", "lgmlvq_d30"):
        assert out["results"][model]["dp_fused"] > 0
    assert out["headline"]["glvq784_dp_over_nonprivate"] > 0


@pytest.mark.data
def test_accuracy_benchmark_runs_one_cell(real_data_dir):
    out = _run("dpsgd_accuracy.py", "--data-dir", str(real_data_dir), "--datasets", "segmentation",
               "--quick", "--folds", "2", "--epsilons", "5", "--models", "GLVQ", "--calibrations",
               "ledger", "--threads", "1")
    (key,) = out["results"]
    assert key.startswith("segmentation (quick")
    mean_error, _ = out["results"][key]["GLVQ"]["ledger"]["5"]
    assert mean_error < 0.35  # Table B.1: 0.183
    assert out["certified_epsilon"][key]["GLVQ"]["ledger"]["5"] <= 5.0


@pytest.mark.data
def test_gmlvq_diagnosis_separates_clipping_from_noise(real_data_dir):
    out = _run("dpsgd_gmlvq_diagnosis.py", "--data-dir", str(real_data_dir), "--splits", "1",
               "--epsilons", "5", "--threads", "1")
    results = out["results"]
    assert len(results) == 7 and out["nonprivate"] < 0.15
    # without clipping and noise DP-GMLVQ gets far closer to L-BFGS than the default
    assert results["C 100, lr 0.005, Omega x1, noise free"]["5"] < results["default (C 0.5, lr 0.05, Omega x0.1)"]["5"] - 0.03
