"""Smoke run of benchmarks/dpsgd/private_pipelines.py --quick on tiny synthetic stand-ins of
its data files (MNIST idx, UCI Image Segmentation and optdigits), with the DDP timing of
``benchmarks.dpsgd.ddp_timing`` replaced by a stub (it starts processes; it has tests of
its own); and the public bounds table against the real file's columns (skipped without it)."""

from __future__ import annotations

import gzip
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from benchmarks.dpsgd import private_pipelines as pp

HEADLINE_KEYS = {
    "mnist_scatter_dpgmlvq_acc_eps1",
    "mnist_scatter_dpgmlvq_acc_eps3",
    "segmentation_fully_private_dpgmlvq_err_eps1",
    "ddp2_over_single_epoch_time",
}


def _write_idx(path: Path, array: np.ndarray) -> None:
    """``array`` (uint8) in the idx format of the MNIST files, gzipped."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in array.shape)
    path.write_bytes(gzip.compress(header + array.astype(np.uint8).tobytes()))


def _digits(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(n, 28, 28)`` uint8 images whose class is a bright bar at a class-dependent place."""
    y = np.arange(n) % 10
    X = rng.integers(0, 40, (n, 28, 28))
    for i, label in enumerate(y):
        X[i, 4 + 2 * label : 7 + 2 * label, 6:22] = 255
    return X.astype(np.uint8), y.astype(np.uint8)


def _write_tsv(path: Path, X: np.ndarray, y: np.ndarray, names: list[str]) -> None:
    rows = ["\t".join([*names, "target"])]
    rows += ["\t".join([*(f"{v:g}" for v in x), str(label)]) for x, label in zip(X, y, strict=True)]
    path.write_bytes(gzip.compress(("\n".join(rows) + "\n").encode()))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    (tmp_path / "mnist").mkdir()
    (tmp_path / "uci").mkdir()
    for n, prefix in ((300, "train"), (100, "t10k")):
        X, y = _digits(n, rng)
        _write_idx(tmp_path / "mnist" / f"{prefix}-images-idx3-ubyte.gz", X)
        _write_idx(tmp_path / "mnist" / f"{prefix}-labels-idx1-ubyte.gz", y)
    y = np.arange(210) % 7
    names = [row[0] for row in pp.SEGMENTATION_BOUNDS]
    centre = np.array([(lo + hi) / 2 if lo is not None else 9.0 for _, lo, hi, _ in pp.SEGMENTATION_BOUNDS])
    half = np.array([(hi - lo) / 2 if lo is not None else 0.0 for _, lo, hi, _ in pp.SEGMENTATION_BOUNDS])
    X = centre + half * np.clip(0.3 * rng.normal(size=(210, 19)) + 0.1 * (y[:, None] - 3), -1, 1)
    _write_tsv(tmp_path / "uci" / "segmentation.tsv.gz", X, y, names)
    y = np.arange(200) % 10
    X = np.clip(rng.integers(0, 6, (200, 64)) + 10 * (np.arange(64)[None, :] % 10 == y[:, None]), 0, 16)
    _write_tsv(tmp_path / "uci" / "optdigits.tsv.gz", X, y, [f"p{i}" for i in range(64)])
    return tmp_path


@pytest.fixture
def ddp_stub(monkeypatch) -> list[bool]:
    calls: list[bool] = []

    def ddp_epoch_times(quick: bool) -> dict:
        calls.append(quick)
        return {"single_epoch_s": 2.0, "ddp2_epoch_s": 1.2, "ratio": 0.6}

    stub = types.ModuleType("benchmarks.dpsgd.ddp_timing")
    stub.ddp_epoch_times = ddp_epoch_times  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "benchmarks.dpsgd.ddp_timing", stub)
    return calls


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:sampling_rate .* expected batch below one record")  # the tiny stand-ins
def test_quick_run_ends_with_the_documented_json(data_dir, ddp_stub, tmp_path, capsys, monkeypatch):
    # short fits and one candidate per data set: this checks the plumbing, not the accuracy
    import benchmarks.dpsgd.accuracy as accuracy

    monkeypatch.setattr(accuracy, "EPOCHS", 2)
    monkeypatch.setattr(
        pp, "SCATTER_SETTINGS", {eps: {"epochs": 2, "lr": s["lr"]} for eps, s in pp.SCATTER_SETTINGS.items()}
    )
    monkeypatch.setattr(pp, "CANDIDATES", {name: cands[:1] for name, cands in pp.CANDIDATES.items()})
    out_file = tmp_path / "out" / "pp.json"
    assert pp.main(["--data-dir", str(data_dir), "--quick", "--out", str(out_file)]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert json.loads(out_file.read_text()) == out
    assert list(out)[:3] == ["benchmark", "results", "headline"]
    assert out["benchmark"] == "private_pipelines"
    head = out["headline"]
    assert set(head) == HEADLINE_KEYS
    assert ddp_stub == [True] and head["ddp2_over_single_epoch_time"] == 0.6
    for key in HEADLINE_KEYS - {"ddp2_over_single_epoch_time"}:
        assert 0.0 <= head[key] <= 1.0

    scatter = out["results"]["mnist_scatter"]
    assert (scatter["n_train"], scatter["n_test"], scatter["n_features"]) == (300, 100, 3969)
    for eps in ("1", "3"):
        cell = scatter[f"eps{eps}"]
        assert head[f"mnist_scatter_dpgmlvq_acc_eps{eps}"] == cell["acc"][0]
        assert len(cell["per_run"]) == 1
        # the feature map and the normaliser cost nothing: the pipeline's epsilon is the estimator's
        assert cell["pipeline_epsilon"] == cell["estimator_epsilon"]
        assert cell["pipeline_epsilon"][0] <= float(eps) * (1 + 1e-6)
    assert scatter["nonprivate_gmlvq"] is None  # --quick skips it

    side = out["results"]["side_by_side"]
    assert set(side) == {"segmentation", "optdigits", "mnist"}
    for name, by_eps in side.items():
        cell = by_eps["1"]
        assert cell["composed_epsilon"] <= 1.0 + 1e-9
        assert len(cell["per_fold"]["fully_private"]) == len(cell["per_fold"]["papers_protocol"]) == 1
        assert len(cell["selection"]) == len(pp.candidates(name))
        # the part epsilons use the budget: more than 0.99 of it once composed
        assert cell["composed_epsilon"] > 0.99
    assert head["segmentation_fully_private_dpgmlvq_err_eps1"] == side["segmentation"]["1"]["fully_private"][0]


def test_missing_data_directory_exits_with_code_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        pp.main(["--data-dir", str(tmp_path / "nowhere"), "--quick"])
    assert exc.value.code == 2
    assert "does not exist" in capsys.readouterr().err


def test_missing_file_exits_with_code_2(data_dir, capsys):
    (data_dir / "uci" / "optdigits.tsv.gz").unlink()
    with pytest.raises(SystemExit) as exc:
        pp.main(["--data-dir", str(data_dir), "--quick"])
    assert exc.value.code == 2
    assert "optdigits" in capsys.readouterr().err


def test_public_maps_read_nothing_from_the_data():
    """The maps in front of the fully private pipeline are per record: a record's output does
    not change when the others do."""
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 16, (20, 64))
    out = pp.public_map("optdigits", X)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0)
    np.testing.assert_array_equal(pp.public_map("optdigits", X[:5]), out[:5])
    seg = np.array([[(lo + hi) / 2 if lo is not None else 9.0 for _, lo, hi, _ in pp.SEGMENTATION_BOUNDS]])
    np.testing.assert_allclose(pp.public_map("segmentation", seg), 0.0, atol=1e-12)
    assert pp.public_map("segmentation", seg).shape == (1, 18)


def test_calibrated_parts_compose_to_the_budget():
    parts, composed = pp.calibrated_parts("segmentation", {"scale": 0.2}, 1.0, 18, np.arange(7))
    assert set(parts) == {"scale", "gmlvq"}
    assert parts["scale"] / parts["gmlvq"] == pytest.approx(0.2 / 0.8)
    assert 0.99 < composed <= 1.0


@pytest.mark.data
def test_segmentation_bounds_name_the_file_columns(real_data_dir):
    from dp_proto.data.loaders.uci import read_tsv

    _, _, names = read_tsv(real_data_dir / "uci" / "segmentation.tsv.gz")
    assert names == [row[0] for row in pp.SEGMENTATION_BOUNDS]
