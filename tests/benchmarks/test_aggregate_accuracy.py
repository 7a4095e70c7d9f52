"""Smoke runs of benchmarks/aggregate/accuracy.py: they finish with the JSON line and headline keys."""

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks.test_headlines import stored_headline

ROOT = Path(__file__).resolve().parents[2]
#: the headline keys of the stored full run
HEADLINE_KEYS = set(stored_headline("aggregate/results/aggregate_accuracy.json"))


def _run(*args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.aggregate.accuracy", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_artificial_target_cell_and_speed():
    out = _run(
        "--datasets",
        "artificial",
        "--dims",
        "2",
        "--bins",
        "50",
        "--epsilons",
        "1.25",
        "--repeats",
        "3",
        "--speed-repeats",
        "1",
    )
    assert out["benchmark"] == "aggregate_accuracy"
    headline = out["headline"]
    assert set(headline) == HEADLINE_KEYS
    assert headline["sa_error_d2_eps1.25_m50"] <= 0.05  # the headline target
    assert 0 < headline["bins_vs_single_fit_time_ratio"] <= 2.0
    assert set(out["results"]["artificial d=2"]) == {"saa", "coa"}
    assert out["reference"]["artificial d=2"]["bin mean m=50"] < 0.01


def test_artificial_data_follow_the_seeds():
    bench = importlib.import_module("benchmarks.aggregate.accuracy")
    assert bench.artificial_means(2).tolist() == [[5, 0], [-5, 0], [0, 5]]
    assert bench.artificial_means(4).tolist() == [[5, 0, 0, 0], [0, 5, 0, 0], [0, 0, 5, 0]]


@pytest.mark.data
def test_real_data_rows(real_data_dir):
    out = _run(
        "--data-dir",
        str(real_data_dir),
        "--datasets",
        "segmentation",
        "--bins",
        "15",
        "--epsilons",
        "5",
        "--folds",
        "2",
        "--no-speed",
    )
    rows = out["results"]["segmentation"]
    assert set(rows) == {"saa", "coa", "dp_sgd"}
    assert set(rows["saa"]) == {"box", "ball r=0.5", "ball r=1"}
    assert rows["dp_sgd"]["box"]["-"]["5"][0] < 0.35
    assert set(out["headline"]) == HEADLINE_KEYS
    assert out["headline"]["sa_error_d2_eps1.25_m50"] is None  # no artificial data in this run
