"""Smoke run of benchmarks/svdd/accuracy.py: tables, JSON line, figure; shuttle when the data exist."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"


def _run(tmp_path, *args: str) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.svdd.accuracy",
            "--json",
            str(tmp_path / "r.json"),
            "--figure",
            str(tmp_path / "f.png"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == json.loads((tmp_path / "r.json").read_text())
    assert (tmp_path / "f.png").stat().st_size > 10_000
    return out


def test_quick_run_on_the_synthetic_sets(tmp_path):
    # no data directory needed for these two (the default --quick adds shuttle10 / shuttle30:
    # test_headlines.py)
    out = _run(tmp_path, "--quick", "--datasets", "three_moons", "five_gaussians")
    assert out["benchmark"] == "svdd_accuracy"
    assert set(out["results"]) == {"three_moons", "five_gaussians"}
    moons = out["results"]["three_moons"]
    assert set(moons) == {"proposed", "proposed_training_starts", "svm_weight", "svm_output"}
    assert set(moons["proposed"]) == {"0.1", "10", "non-private"}
    assert moons["proposed"]["non-private"]["mean"] >= 0.9  # non-private sanity
    assert 0.9 <= out["svc"]["three_moons"] <= 1.0
    assert set(out["beats_svm_weight"]["three_moons"]) == {"0.1"}


@pytest.mark.skipif(not (DATA / "uci").is_dir(), reason="needs ../shared/data (shuttle)")
def test_table_7_3_cell_reports_its_headline(tmp_path):
    out = _run(
        tmp_path,
        "--data-dir",
        str(DATA),
        "--datasets",
        "shuttle10",
        "--methods",
        "proposed",
        "--table-7-3-epsilons",
        "1",
        "--runs",
        "1",
    )
    check = out["table_7_3_check"]["shuttle10"]["1"]
    assert check["thesis"] == 0.908 and math.isfinite(check["ours"])
    assert out["headline"]["shuttle10"] == {"1": check["ours"]}
    assert check["ours"] > 0.85
