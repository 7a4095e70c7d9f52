"""Smoke run of the motion anonymizer benchmark on a small synthetic HAPT file."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks.anonymizer.motion import best_point, scaled_signals
from tests.benchmarks.test_headlines import stored_headline
from tests.data.test_motion import _many_segments, _raw_arrays, _write

ROOT = Path(__file__).resolve().parents[2]


def test_motion_benchmark_quick_on_a_synthetic_file(tmp_path):
    _write(tmp_path, _raw_arrays(_many_segments()))  # 3 volunteers, about 250 windows
    out_file, figure = tmp_path / "motion.json", tmp_path / "motion.png"
    args = [sys.executable, "-m", "benchmarks.anonymizer.motion", "--data-dir", str(tmp_path), "--quick"]
    args += ["--splits", "1", "--modes", "toggle", "--epsilons", "8", "--figure", str(figure), "--out", str(out_file)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert json.loads(out_file.read_text())["headline"] == out["headline"]
    assert out["benchmark"] == "anonymizer_motion" and out["data"]["volunteers"] == 3
    for encoder in ("signal_cnn", "stats_mlp"):
        curve = out["results"]["plain"][encoder]["toggle"]
        assert set(curve) == {"0", "10", "20"}
        by_model = curve["0"]["attacker_by_model"]
        assert set(by_model) == {
            f"{p}/{m}" for p in ("enrolled", "held_out") for m in ("logistic", "mlp", "knn", "cnn")
        }
        assert curve["0"]["attacker_accuracy"][0] == max(by_model.values())  # the strongest, one split
    dp = out["results"]["dp"]["8"]
    assert set(dp) == {"0", "5"} and dp["5"]["epsilon_spent"] <= 8.0 + 1e-6
    best = out["headline"]["motion_best"]
    assert best["target_attacker"] == round(2 / 3, 4) and best["splits"] == 1
    assert out["headline"]["motion_dp_eps8"]["epsilon"] == 8.0
    full = stored_headline("anonymizer/results/anonymizer_motion.json")  # the full run's keys
    assert set(out["headline"]) == set(full) - {"motion_dp_eps1"}  # this run has epsilon 8 only
    assert figure.exists()


def test_best_point_keeps_activity_within_three_points():
    def point(activity, attacker):
        return {
            "activity_accuracy": [activity, 0.01],
            "attacker_accuracy": [attacker, 0.01],
            "chance": [0.04, 0],
            "per_split": [[activity, attacker]] * 5,
        }

    curve = {"0": point(0.95, 0.30), "5": point(0.93, 0.10), "10": point(0.90, 0.05), "20": point(0.50, 0.03)}
    best = best_point(curve, target=2 / 30)
    assert best["lambda"] == 5.0 and not best["met"]  # lambda 10 drops 5 points
    assert best["activity_accuracy_lambda0"] == 0.95 and best["attacker_accuracy_lambda0"] == 0.30
    assert best_point(curve, target=0.2)["met"]


def test_signals_are_scaled_by_public_ranges():
    signals = np.zeros((2, 128, 6), dtype=np.float32)
    signals[0, :, 0], signals[0, :, 3], signals[1, :, 1] = 1.0, 2.5, -7.0
    x = scaled_signals(signals)
    assert x.shape == (2, 6, 128)
    assert float(x[0, 0, 0]) == 0.5 and float(x[0, 3, 0]) == 0.5 and float(x[1, 1, 0]) == -1.0  # clamped
