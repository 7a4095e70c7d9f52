"""Smoke run of benchmarks/llp/accuracy.py --quick on the SCATS counts (skipped without them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks.test_headlines import assert_same_headline, stored_headline

ROOT = Path(__file__).resolve().parents[2]
MODULE = "benchmarks.llp.accuracy"
DATA_DIR = ROOT.parent / "shared" / "data"
HEADLINE_KEYS = set(stored_headline("llp/results/llp_accuracy.json"))  # the full run's


@pytest.mark.data
@pytest.mark.slow
@pytest.mark.skipif(not (DATA_DIR / "traffic").is_dir(), reason=f"traffic data not found in {DATA_DIR}")
def test_quick_run_ends_with_the_documented_json(tmp_path):
    out_file, figure = tmp_path / "llp.json", tmp_path / "llp.png"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            MODULE,
            "--data-dir",
            str(DATA_DIR),
            "--quick",
            "--threads",
            "1",
            "--json",
            str(out_file),
            "--figure",
            str(figure),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert json.loads(out_file.read_text()) == out
    assert list(out)[:3] == ["benchmark", "results", "headline"]
    assert out["benchmark"] == "llp_accuracy"
    assert set(out["headline"]) == HEADLINE_KEYS
    assert_same_headline(out, "llp/results/llp_accuracy.json")  # two levels deep, every key filled
    assert figure.is_file() and figure.stat().st_size > 10_000

    head = out["headline"]
    for key in HEADLINE_KEYS - {"whole_network_seconds"}:
        assert 0.0 <= head[key] <= 1.0
    # --quick: the whole network runs only the timed call of the headline
    assert "network" not in out["results"]
    timing = out["results"]["network_timing"]
    assert head["whole_network_seconds"] == timing["fold0_seed0"] > 0
    assert timing["n_nodes"] > 100 and (timing["fold"], timing["of_folds"]) == (0, 3)
    four = out["results"]["four_nodes"]
    assert four["detectors"] == out["settings"]["four_node_detectors"] and len(four["detectors"]) == 4
    assert four["folds"] == 3 and set(four["targets"]) == {
        "pllp_eps0.1_within_4_points",
        "pllp_eps0.01_collapse",
        "paper_shape_by_variant",
        "bag_own_closes_half_the_gap_b32",
        "bag_own_pllp_eps0.1_within_4_points",
        "bag_all_closes_half_the_gap_b32",
        "bag_all_pllp_eps0.1_within_4_points",
        "bag_released_closes_half_the_gap_b32",
        "bag_released_pllp_eps0.1_within_4_points",
    }
    # the bag learner on the node's own proportions reads no release: its private run is the same model
    assert head["bag_pllp_accuracy_b32_eps0.1"] == head["bag_llp_accuracy_b32"] > head["llp_accuracy_b32_k16"]
    # --quick runs the default release only
    assert set(four["targets"]["paper_shape_by_variant"]) == {"pllp"}
    # the centralised kNN with every label beats chance clearly; epsilon 0.01 is near chance
    assert head["knn_accuracy"] > four["chance"]["majority_share"] + 0.2
    assert head["pllp_accuracy_b32_k16_eps0.01"] < head["llp_accuracy_b32_k16"]
