"""Smoke test of the sparse and federated runner (Brinkrolf 2023, chapters 5 and 6): its
``--quick`` mode (2 folds, subsampled sparse sets, the private variant at epsilon 1; about
two minutes on 2 shared cores) prints both parts with their headline keys."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.data, pytest.mark.slow]


def test_quick_run_prints_both_parts_with_the_headline_keys(real_data_dir, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.sparse_federated.sparse_federated",
            "--quick",
            "--data-dir",
            str(real_data_dir),
            "--out",
            str(tmp_path / "sf.json"),
            "--figure",
            str(tmp_path / "sf.png"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = {
        line["part"]: line for line in map(json.loads, filter(lambda s: s.startswith("{"), proc.stdout.splitlines()))
    }
    assert set(lines) == {"sparse", "federated"}
    sparse, federated = lines["sparse"], lines["federated"]
    assert all(line["benchmark"] == "sparse_federated" for line in lines.values())
    assert set(sparse["headline"]) == {"sparse_optdigits_accuracy_at_0.9", "sparse_fri_accuracy_at_0.9"}
    assert set(federated["headline"]) == {
        "federated_segmentation_gmlvq_f1",
        "federated_segmentation_lgmlvq_f1",
        "federated_segmentation_dp_gmlvq_f1_eps1",
        "federated_segmentation_dp_gmlvq_default_split_f1_eps1",
        "federated_processes_equal_simulation",
    }
    assert federated["headline"]["federated_processes_equal_simulation"] is True
    for name in ("optdigits", "fri"):
        for method in ("SLGMLVQ", "LR", "RF"):
            for level in ("0.5", "0.75", "0.9"):
                value = sparse["results"][name][method][level][0]
                assert 0.0 <= value <= 1.0 and not math.isnan(value), (name, method, level)
    assert len(federated["headline"]["federated_segmentation_gmlvq_f1"]) == 2
    assert federated["headline"]["federated_segmentation_lgmlvq_f1"][0] > 0.85
    assert (tmp_path / "sf_sparse_quick.json").is_file() and (tmp_path / "sf_federated_quick.json").is_file()
    assert (tmp_path / "sf.png").stat().st_size > 10_000
