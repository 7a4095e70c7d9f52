"""Smoke run of benchmarks/dpsgd/feature_heads.py --quick on a tiny synthetic MNIST stand-in
(short fits: the plumbing and the JSON, not the accuracy), and its pieces."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from benchmarks.dpsgd import feature_heads as fh
from tests.benchmarks.test_private_pipelines import _digits, _write_idx

HEADLINE_KEYS = {
    f"mnist_{name}_acc_eps{eps}" for name in ("scatter", "random_conv", "dp_cnn_gmlvq") for eps in ("1", "3")
}


@pytest.fixture
def data_dir(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "mnist").mkdir()
    for n, prefix in ((200, "train"), (60, "t10k")):
        X, y = _digits(n, rng)
        _write_idx(tmp_path / "mnist" / f"{prefix}-images-idx3-ubyte.gz", X)
        _write_idx(tmp_path / "mnist" / f"{prefix}-labels-idx1-ubyte.gz", y)
    return tmp_path


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:sampling_rate .* expected batch below one record")  # the tiny stand-in
def test_quick_run_ends_with_the_documented_json(data_dir, tmp_path, capsys, monkeypatch):
    settings = {eps: {"epochs": 1, "lr": s["lr"]} for eps, s in fh.pp.SCATTER_SETTINGS.items()}
    monkeypatch.setattr(fh.pp, "SCATTER_SETTINGS", settings)
    monkeypatch.setattr(fh, "QUICK_CNN_EPOCHS", 1)
    out_file = tmp_path / "out.json"
    assert fh.main(["--data-dir", str(data_dir), "--quick", "--out", str(out_file)]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert json.loads(out_file.read_text()) == out and out["benchmark"] == "feature_heads"
    assert set(out["headline"]) == HEADLINE_KEYS
    assert all(0.0 <= v <= 1.0 for v in out["headline"].values())
    res = out["results"]
    assert (res["n_train"], res["n_test"]) == (200, 60)
    for name in fh.FEATURES:
        for eps in ("1", "3"):
            cell = res[name][eps]
            assert len(cell["per_run"]) == 1
            assert max(cell["epsilon"]) <= float(eps) * (1 + 1e-6)  # every model within its budget
    assert res["dp_cnn"]["3"]["noise_multiplier"] < res["dp_cnn"]["1"]["noise_multiplier"]


def test_random_conv_features_are_per_record():
    X = np.random.default_rng(1).integers(0, 256, (6, 784)).astype(np.float64)
    out = fh.random_conv_features(X)
    assert out.shape == (6, 64 * 49) and out.dtype == np.float32
    np.testing.assert_array_equal(fh.random_conv_features(X[:2]), out[:2])


def test_the_cnn_head_is_seeded_and_public():
    a, b = fh.cnn_model(3), fh.cnn_model(3)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)
    assert a(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
