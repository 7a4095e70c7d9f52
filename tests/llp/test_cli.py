"""``dp-proto llp``: the 4-node setting on a small SCATS file, simulated and distributed;
a private run writes every node's release."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import dp_proto
from dp_proto.cli import main
from dp_proto.data.loaders.scats import SCATS_COUNTS_FILE
from dp_proto.exceptions import PrivacyLeakWarning
from tests.data.test_traffic import _row, _write


@pytest.fixture(scope="module")
def scats_dir(tmp_path_factory):
    """Four detectors close together, 14 days of counts with a daily cycle (all six flow classes)."""
    rng = np.random.default_rng(0)
    slot = np.arange(96)
    rows = []
    for site in range(4):
        for day in range(1, 15):
            cycle = 140 + 130 * np.sin(2 * np.pi * (slot - 30) / 96) * (1 + 0.1 * site)
            counts = np.clip(np.round(cycle + rng.normal(0, 15, 96)), 0, None).astype(int)
            rows.append(_row(100 + site, 1, day, counts.tolist(), lat=-37.8 + 0.001 * site, lon=145.0))
    directory = tmp_path_factory.mktemp("scats")
    _write(directory / SCATS_COUNTS_FILE, rows)
    return directory


ARGS = ["--nodes", "3", "--k", "4", "--batch-size", "16", "--n-starts", "4", "--folds", "3"]


def test_llp_simulated(scats_dir, capsys, tmp_path):
    assert main(["llp", "--data-dir", str(scats_dir), "--log-dir", str(tmp_path), *ARGS]) == 0
    out = capsys.readouterr().out
    assert "simulated (one process)" in out and out.count("epsilon 0.1") == 3
    accuracy = float(out.split("\naccuracy ")[1].split()[0])
    assert 0.3 < accuracy <= 1.0


@pytest.mark.slow
def test_llp_with_the_bag_learner_distributed_equals_the_simulation(scats_dir, capsys, tmp_path):
    argv = ["llp", "--data-dir", str(scats_dir), "--log-dir", str(tmp_path), *ARGS, "--learner", "bag"]
    assert main([*argv, "--distributed", "--compare", "--noise-seed", "0", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "identical models and releases: True" in out
    accuracy = float(out.split("\naccuracy ")[1].split()[0])
    assert 0.5 < accuracy <= 1.0


@pytest.mark.slow
def test_llp_distributed_equals_the_simulation(scats_dir, capsys, tmp_path):
    argv = ["llp", "--data-dir", str(scats_dir), "--log-dir", str(tmp_path), *ARGS]
    assert main([*argv, "--distributed", "--compare", "--noise-seed", "0"]) == 0
    out = capsys.readouterr().out
    assert "distributed (one process per node)" in out and "identical models and releases: True" in out
    # each node sends its (1344 / 16 = 84 batches, 6 classes) float64 table to its 2 neighbours
    assert out.count("sent 8064 B") == 3
    release = tmp_path / "scats_llp" / "version_0" / "release"
    assert sorted(p.name for p in release.iterdir()) == ["node_0", "node_1", "node_2"]
    assert all(dp_proto.load_release(release / f"node_{i}").epsilon == 0.1 for i in range(3))


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--compare"], "(--compare) needs run.distributed (--distributed"),
        (["--distributed", "--compare"], "(--compare) needs llp.noise_seed (--noise-seed)"),
        (["--anchor", "9"], "(--anchor) must lie in"),
        (["llp.clusters=4"], "unknown config key 'llp.clusters'"),
    ],
)
def test_llp_errors(scats_dir, capsys, extra, match):
    assert main(["llp", "--data-dir", str(scats_dir), *ARGS, *extra]) == 2
    assert match in capsys.readouterr().err


def test_llp_config_file_overrides_and_flags(scats_dir, tmp_path, capsys):
    """One loader: the file overlays the defaults, ``key=value`` overlays the file, a flag wins."""
    config = tmp_path / "llp.yaml"
    config.write_text(
        f"data: {{data_dir: {scats_dir}, nodes: 3, folds: 3}}\n"
        "llp: {k: 4, batch_size: 16, n_starts: 4, epsilon: 0.5}\n"
        f"logging: {{log_dir: {tmp_path / 'runs'}}}\n"
    )
    assert main(["llp", "--config", str(config), "llp.epsilon=0.2", "--epsilon", "0.3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [node["epsilon"] for node in result["nodes"]] == [0.3, 0.3, 0.3]
    assert len(result["detectors"]) == 3 and 0.3 < result["accuracy"] <= 1.0
    assert main(["llp", "--config", str(config), "llp.epsilon=0.2", "--json"]) == 0
    assert [node["epsilon"] for node in json.loads(capsys.readouterr().out)["nodes"]] == [0.2, 0.2, 0.2]


def test_a_private_llp_run_writes_each_nodes_release(scats_dir, tmp_path, capsys, monkeypatch):
    """Every node's noisy label-proportion table, with its ledger, in
    <log_dir>/<name>/version_N/release/node_<i>/; the path is printed and in --json; the
    loaded tables are the run's; no noise seed, no local path."""
    import dp_proto.experiments.llp as llp_experiment
    from dp_proto.llp import LLPNodeRelease

    runs = []
    real_run = llp_experiment.run_llp_experiment
    monkeypatch.setattr(llp_experiment, "run_llp_experiment", lambda config: runs.append(real_run(config)) or runs[-1])
    argv = ["llp", "--data-dir", str(scats_dir), "--log-dir", str(tmp_path), *ARGS, "--noise-seed", "31337"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)  # the noise seed (reproducible test)
        assert main(argv) == 0
    (result,) = runs
    release = Path(result["release_dir"])
    assert release == (tmp_path / "scats_llp" / "version_0" / "release").resolve()
    out = capsys.readouterr().out
    assert f"releases {release}: node_<i>/" in out and f"dp_proto.load_release('{release / 'node_0'}')" in out
    assert sorted(p.name for p in release.iterdir()) == ["node_0", "node_1", "node_2"]
    network = result["network"]
    for i, detector in enumerate(result["detectors"]):
        text = (release / f"node_{i}" / "manifest.json").read_text()
        assert "31337" not in text and str(tmp_path) not in text and str(scats_dir) not in text
        source = json.loads(text)["source"]
        assert source["command"] == "dp-proto llp" and source["detector"] == list(detector)
        assert "noise_seed" not in source["config"]["llp"] and "data_dir" not in source["config"]["data"]
        loaded = dp_proto.load_release(release / f"node_{i}")
        assert isinstance(loaded, LLPNodeRelease) and loaded.node == i and loaded.epsilon == 0.1
        assert torch.equal(loaded.proportions.proportions, network.proportions[i].proportions)
        assert torch.equal(loaded.proportions.valid, network.proportions[i].valid)
        assert loaded.ledger.get_epsilon(0.0) == pytest.approx(result["nodes"][i]["epsilon"])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        assert main([*argv, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["release_dir"] == str((tmp_path / "scats_llp" / "version_1" / "release").resolve())


def test_an_exact_llp_run_writes_no_release(scats_dir, tmp_path, capsys):
    assert (
        main(["llp", "--data-dir", str(scats_dir), "--log-dir", str(tmp_path), *ARGS, "--epsilon", "0", "--json"]) == 0
    )
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["release_dir"] is None
    assert list(tmp_path.iterdir()) == []
