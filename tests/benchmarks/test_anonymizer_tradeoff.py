"""Smoke runs of the anonymizer trade-off benchmark and of `dp-proto anonymize`."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks.test_headlines import stored_headline

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def test_tradeoff_benchmark_quick_synthetic(tmp_path):
    figure = tmp_path / "tradeoff.png"
    proc = _run(
        [
            sys.executable,
            "-m",
            "benchmarks.anonymizer.tradeoff",
            "--datasets",
            "synthetic",
            "--quick",
            "--figure",
            str(figure),
        ]
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["benchmark"] == "anonymizer_tradeoff"
    curve = out["results"]["synthetic"]["toggle"]
    assert set(curve) == {"0", "1", "10"}
    # lambda 0 is a plain classifier on an easy task; a large lambda pushes the attacker down
    assert curve["0"]["regular_accuracy"][0] > 0.85
    assert curve["10"]["attacker_accuracy"][0] < curve["0"]["attacker_accuracy"][0]
    assert 0 < out["headline"]["epoch_time_ratio"] < 3
    # the full run's headline keys but the Yale ones (this run has no Yale data)
    full = stored_headline("anonymizer/results/anonymizer_tradeoff.json")
    assert set(out["headline"]) == {k for k in full if not k.startswith("yale_")}
    assert figure.exists()
    # Two worker processes give the same fits: every fit seeds itself, and the workers
    # get the --quick settings of the parent.
    parallel = _run(
        [
            sys.executable,
            "-m",
            "benchmarks.anonymizer.tradeoff",
            "--datasets",
            "synthetic",
            "--quick",
            "--jobs",
            "2",
            "--figure",
            "",
        ]
    )
    assert json.loads(parallel.stdout.strip().splitlines()[-1])["results"] == out["results"]


def test_anonymize_cli_on_the_synthetic_config(tmp_path):
    proc = _run(
        [
            sys.executable,
            "-m",
            "dp_proto.cli",
            "anonymize",
            "--config",
            str(ROOT / "training" / "configs" / "synthetic_anonymizer.yaml"),
            "--json",
            "--no-progress",
            "--log-dir",
            str(tmp_path),
            "training.adversarial_epochs=4",
            "training.pretrain_regular_epochs=4",
            "training.pretrain_private_epochs=2",
            "data.synthetic.n=1000",
            "training.lam=1",
        ]
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["held_out_records"] == 500 and 0 <= out["attacker_accuracy"] <= 1
    assert out["regular_accuracy"] > 0.4  # chance 0.25
    assert Path(out["log_dir"]).is_dir()  # TensorBoard events written there


def test_anonymize_cli_rejects_unknown_keys(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "dp_proto.cli", "anonymize", "training.lamda=3"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 2 and "lamda" in proc.stderr


@pytest.mark.data
def test_anonymize_cli_on_yale(real_data_dir, tmp_path):
    proc = _run(
        [
            sys.executable,
            "-m",
            "dp_proto.cli",
            "anonymize",
            "--config",
            str(ROOT / "training" / "configs" / "yale_anonymizer.yaml"),
            "--json",
            "--no-progress",
            "--log-dir",
            str(tmp_path),
            f"data.data_dir={real_data_dir}",
            "training.adversarial_epochs=2",
            "training.pretrain_regular_epochs=2",
            "training.pretrain_private_epochs=1",
        ]
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["held_out_records"] == 82 and out["train_records"] == 82
    assert out["chance"] == pytest.approx(6 / 82, abs=0.02)


@pytest.mark.data
def test_yale_crops_benchmark(real_data_dir):
    proc = _run(
        [sys.executable, "-m", "benchmarks.studies.yale_crops", "--data-dir", str(real_data_dir), "--splits", "2"]
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(out["results"]) == {"box", "face"}
    for crop in out["results"].values():
        assert 1 / 11 < crop["condition"][0] < crop["identity"][0] <= 1
