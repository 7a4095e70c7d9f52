"""Smoke run of benchmarks/leakage/leakage.py, and a check that its 2 + 1 private pipelines are the
library's schemes (built from the same pieces) rather than something else."""

import importlib
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from dp_proto.exceptions import PrivacyLeakWarning
from tests.benchmarks.test_headlines import assert_same_headline

ROOT = Path(__file__).resolve().parents[2]
MODULE = "benchmarks.leakage.leakage"
STORED = "leakage/results/leakage.json"  # the full run, relative to benchmarks/
PRIVATE = {"dp_sgd", "saa", "coa"}


def test_quick_run_ends_with_the_documented_json(tmp_path):
    out_file = tmp_path / "leakage.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", MODULE, "--quick", "--threads", "1", "--out", str(out_file)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    out = json.loads(last)
    assert json.loads(out_file.read_text()) == out
    assert list(out)[:4] == ["benchmark", "results", "headline", "settings"]
    assert out["benchmark"] == "leakage"
    assert {"machine", "notes"} <= set(out) and isinstance(out["notes"], list)
    assert out["settings"]["quick"] is True and out["settings"]["pairs"] == 100

    head = out["headline"]
    assert_same_headline(out, STORED)  # the keys of the full run, none of them null
    # enough pairs to show the leak: vanilla p 2e-8 to 6e-7 on seeds 0-7, the private
    # schemes' 0.12-0.78 on seeds 0-3 (with 20 pairs vanilla was 0.006-0.09)
    assert head["outlier_extreme_vanilla_p"] < 0.01
    assert set(head["outlier_extreme_private_p"]) == PRIVATE
    assert all(1e-3 < p <= 1.0 for p in head["outlier_extreme_private_p"].values())
    assert len(head["xor_vanilla_fraction"]) == 2
    assert all(0.0 <= f <= 1.0 for f in head["xor_vanilla_fraction"])
    assert set(head["xor_private_fraction"]) == PRIVATE
    assert all(len(v) == 2 and all(0.0 <= f <= 1.0 for f in v) for v in head["xor_private_fraction"].values())
    assert set(head["audit"]) == PRIVATE
    for claimed, bound in head["audit"].values():
        assert claimed == 1.0 and bound >= 0.0

    res = out["results"]
    assert set(res["outlier_shift"]) == {"vanilla"} | PRIVATE
    extreme = res["outlier_shift"]["vanilla"]["extreme"]
    assert 0.05 < extreme["mean_shift"] < 0.2  # Brinkrolf (2023): 0.1119; robust even with 20 pairs
    assert extreme["paired_t_p"] < 1e-6
    assert res["xor"]["vanilla"]["unbalanced_fraction"] == 1.0  # Brinkrolf (2023): always bottom-left


@pytest.fixture(scope="module")
def leakage():
    return importlib.import_module("benchmarks.leakage.leakage")


def _outlier_data(seed: int = 0):
    rng = np.random.default_rng(seed)
    X = np.concatenate([rng.normal((-10.0, 0.0), 1.0, (50, 2)), rng.normal((10.0, 0.0), 1.0, (50, 2))])
    return X, np.repeat([0, 1], 50)


def test_pieces_reproduce_the_library_scheme(leakage):
    """With equal counts the DP-SGD pipeline used for the 2 + 1 XOR model must equal
    DPGLVQ(noise_seed=seed) exactly (same seed, same draws, same public normaliser q n~)."""
    X, y = _outlier_data()
    setup = leakage.Setup((1, 1))
    a, b = leakage.dp_sgd_from_pieces(X, y, setup, 7), leakage.train_dp_sgd(X, y, setup, 7)
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_allclose(a.prototypes, b.prototypes, rtol=0, atol=1e-9)
    assert a.info == b.info


def test_private_schemes_opt_in_to_reproducible_noise_quietly(leakage):
    """Every private scheme is seeded (the same seed gives the same release, another seed
    another one) and silences its own PrivacyLeakWarning about the seed."""
    X, y = _outlier_data()
    setup = leakage.Setup((1, 1))
    for name in leakage.PRIVATE_SCHEMES:
        train = leakage.SCHEMES[name]
        with warnings.catch_warnings():
            warnings.simplefilter("error", PrivacyLeakWarning)
            first, again, other = train(X, y, setup, 5), train(X, y, setup, 5), train(X, y, setup, 6)
        np.testing.assert_array_equal(first.prototypes, again.prototypes, err_msg=name)
        assert not np.array_equal(first.prototypes, other.prototypes), name


def test_registry_schemes_train_the_xor_model(leakage):
    rng = np.random.default_rng(1)
    X, y = leakage.xor_data(rng, 0)
    setup = leakage.Setup((2, 1), saa_bins=30, reference=((-10.0, 10.0), (10.0, -10.0), (0.0, 0.0)))
    for name, train in leakage.SCHEMES.items():
        fit = train(X, y, setup, 3)
        assert fit.prototypes.shape == (3, 2), name
        assert fit.labels.tolist() == [0, 0, 1], name
        assert np.isfinite(fit.prototypes).all(), name
