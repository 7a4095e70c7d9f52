"""``dp-proto train ... trainer.devices=2``: Lightning's DDP in two CPU processes (gloo)
runs one private DP-SGD run whose ledger is the one-process run's; process 0 alone reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dp_proto.experiments.lvq import load_config, run_experiment

CONFIG = Path(__file__).resolve().parents[2] / "training" / "configs" / "digits_dp_gmlvq.yaml"
OVERRIDES = ["training.accelerator=cpu", "training.max_epochs=1", "training.progress_bar=false"]


@pytest.mark.slow
def test_train_with_two_processes_reports_once_with_the_single_process_epsilon(tmp_path):
    command = [sys.executable, "-m", "dp_proto.cli", "train", "--config", str(CONFIG), "--json"]
    command += ["--log-dir", str(tmp_path / "runs"), "trainer.devices=2", *OVERRIDES]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1  # process 0 reports; the other process prints nothing
    summary = json.loads(lines[0])
    assert summary["test_acc"] > 0.3 and summary["release_dir"]

    config = load_config(CONFIG, [*OVERRIDES, f"logging.log_dir={tmp_path / 'single'}"])
    single = run_experiment(config)
    assert summary["epsilon"] == pytest.approx(single["epsilon"], rel=1e-9)


def test_devices_below_one_are_refused():
    config = load_config(CONFIG, ["trainer.devices=0"])
    with pytest.raises(ValueError, match="trainer.devices must be >= 1"):
        run_experiment(config)
