"""Smoke tests of the confidence runners (Brinkrolf 2023, chapter 4): their ``--quick``
modes print the headline keys of the stored full runs.

``benchmarks.confidence.confidence --quick`` takes about a minute on 2 shared cores (both
data sets), ``benchmarks.confidence.time_integration --quick --classifiers pairwise-pkpd``
a few minutes; both need the real data directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks.test_headlines import assert_same_headline, stored_payload

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.data


def _lines(module: str, *args: str) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, "-m", f"benchmarks.confidence.{module}", "--quick", *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_confidence_quick_prints_the_headline_keys(real_data_dir, tmp_path):
    lines = _lines("confidence", "--data-dir", str(real_data_dir), "--out", str(tmp_path / "confidence.json"))
    by_set = {line["dataset"].split(" ")[0]: line for line in lines}
    assert set(by_set) == {"segmentation", "letter"}
    for name, line in by_set.items():
        assert line["benchmark"] == "confidence"
        assert set(line["results"]) == {
            "PKPD",
            "HT",
            "WLW1",
            "WLW2",
            "Voting",
            "GMLVQ+RelSim",
            "LGMLVQ+RelSim",
        }
        for method in line["results"].values():
            assert 0.0 <= method["accuracy"][0] <= 1.0 and 0.0 <= method["arc_area"][0] <= 1.0
        assert (tmp_path / f"confidence_{name}_quick.json").is_file()
    assert set(by_set["segmentation"]["headline"]) == {
        "segmentation_pkpd_accuracy",
        "segmentation_pkpd_arc_area",
        "segmentation_certified_fraction_at_radius_0.1",
    }
    assert set(by_set["letter"]["headline"]) == {"letter_pkpd_accuracy", "letter_pkpd_arc_area"}
    assert_same_headline(by_set["segmentation"], "confidence/results/confidence_segmentation.json")
    # the PKPD accuracy of the quick run is close to the dissertation's (0.953 on 10x10 folds)
    assert by_set["segmentation"]["headline"]["segmentation_pkpd_accuracy"] > 0.9


def test_time_integration_quick_prints_the_headline_keys(real_data_dir, tmp_path):
    (line,) = _lines(
        "time_integration",
        "--data-dir",
        str(real_data_dir),
        "--classifiers",
        "pairwise-pkpd",
        "--out",
        str(tmp_path / "time_integration.json"),
    )
    assert line["benchmark"] == stored_payload("confidence/results/time_integration.json")["benchmark"]
    assert_same_headline(line, "confidence/results/time_integration.json")
