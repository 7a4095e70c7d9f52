"""``dp-proto llp``: the 4-node setting on a small SCATS file, simulated and distributed."""

from __future__ import annotations

import numpy as np
import pytest

from dp_proto.cli import main
from dp_proto.data.loaders.scats import SCATS_COUNTS_FILE
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


def test_llp_simulated(scats_dir, capsys):
    assert main(["llp", "--data-dir", str(scats_dir), *ARGS]) == 0
    out = capsys.readouterr().out
    assert "simulated (one process)" in out and out.count("epsilon 0.1") == 3
    accuracy = float(out.split("\naccuracy ")[1].split()[0])
    assert 0.3 < accuracy <= 1.0


@pytest.mark.slow
def test_llp_distributed_equals_the_simulation(scats_dir, capsys):
    assert main(["llp", "--data-dir", str(scats_dir), *ARGS, "--distributed", "--compare", "--noise-seed", "0"]) == 0
    out = capsys.readouterr().out
    assert "distributed (one process per node)" in out and "identical models and releases: True" in out
    # each node sends its (1344 / 16 = 84 batches, 6 classes) float64 table to its 2 neighbours
    assert out.count("sent 8064 B") == 3


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
    import json

    config = tmp_path / "llp.yaml"
    config.write_text(
        f"data: {{data_dir: {scats_dir}, nodes: 3, folds: 3}}\n"
        "llp: {k: 4, batch_size: 16, n_starts: 4, epsilon: 0.5}\n"
    )
    assert main(["llp", "--config", str(config), "llp.epsilon=0.2", "--epsilon", "0.3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [node["epsilon"] for node in result["nodes"]] == [0.3, 0.3, 0.3]
    assert len(result["detectors"]) == 3 and 0.3 < result["accuracy"] <= 1.0
    assert main(["llp", "--config", str(config), "llp.epsilon=0.2", "--json"]) == 0
    assert [node["epsilon"] for node in json.loads(capsys.readouterr().out)["nodes"]] == [0.2, 0.2, 0.2]
