"""benchmarks/lvq/fit_speed.py (time to accuracy of the L-BFGS settings): a ``--quick`` smoke run and a
full-mode run on tiny synthetic stand-ins of the data files, the pure helpers, the targets
against ``benchmarks/lvq/targets.json``, and the report section on a stored-format result."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.lvq import fit_speed as fs
from benchmarks.lvq import report as lvq_report
from benchmarks.reporting import Results, metadata

ROOT = Path(__file__).resolve().parents[2]
LVQ = ROOT / "benchmarks" / "lvq"


def _write_idx(path: Path, array: np.ndarray) -> None:
    """``array`` (uint8) in the idx format of the MNIST files, gzipped."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in array.shape)
    path.write_bytes(gzip.compress(header + array.astype(np.uint8).tobytes()))


def _write_tsv(path: Path, X: np.ndarray, y: np.ndarray) -> None:
    rows = ["\t".join([*(f"f{i}" for i in range(X.shape[1])), "target"])]
    rows += ["\t".join([*(f"{v:g}" for v in x), str(label)]) for x, label in zip(X, y, strict=True)]
    path.write_bytes(gzip.compress(("\n".join(rows) + "\n").encode()))


def _blobs(rng: np.random.Generator, n: int, d: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points in ``d`` dimensions, class ``c`` shifted along feature ``c % d``."""
    y = np.arange(n) % k
    X = rng.normal(size=(n, d))
    X[np.arange(n), y % d] += 3.0
    return X, y + 1


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """optdigits (240 x 64), segmentation (210 x 19), letter (260 x 16, 26 classes) and MNIST
    (300 + 100 images of 28 x 28) stand-ins, small enough for seconds of fitting."""
    root = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(0)
    (root / "uci").mkdir()
    (root / "mnist").mkdir()
    for name, (n, d, k) in {"optdigits": (240, 64, 10), "segmentation": (210, 19, 7), "letter": (260, 16, 26)}.items():
        _write_tsv(root / "uci" / f"{name}.tsv.gz", *_blobs(rng, n, d, k))
    for n, prefix in ((300, "train"), (100, "t10k")):
        y = np.arange(n) % 10
        X = rng.integers(0, 40, (n, 28, 28))
        for i, label in enumerate(y):
            X[i, 4 + 2 * label : 7 + 2 * label, 6:22] = 255
        _write_idx(root / "mnist" / f"{prefix}-images-idx3-ubyte.gz", X)
        _write_idx(root / "mnist" / f"{prefix}-labels-idx1-ubyte.gz", y)
    return root


def _run(capsys, *args: str) -> dict:
    assert fs.main(list(args)) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _check_curves(out: dict) -> None:
    for by_model in out["results"].values():
        for by_setting in by_model.values():
            for cell in by_setting.values():
                times = [t for t, _ in cell["curve"]]
                assert 0 < len(times) <= fs.CURVE_POINTS
                assert all(b >= a for a, b in zip(times, times[1:], strict=False)), "curve not monotone in time"
                assert all(0.0 <= acc <= 1.0 for _, acc in cell["curve"])
                assert len(cell["curve_n_iter"]) == len(cell["curve"])
                # the callback runs after every iteration, the last one included
                assert cell["curve_n_iter"][-1] == cell["per_fold"]["n_iter"][0]


def test_quick_smoke_run(data_dir, tmp_path, capsys):
    out = _run(
        capsys,
        "--quick",
        "--data-dir",
        str(data_dir),
        "--threads",
        "1",  # robust to a loaded machine: two spinning torch threads on a shared core crawl
        "--no-peer",
        "--out",
        str(tmp_path / "fit_speed_quick.json"),
        "--figure",
        str(tmp_path / "fit_speed_quick.png"),
    )
    assert json.loads((tmp_path / "fit_speed_quick.json").read_text(encoding="utf-8")) == out
    assert (tmp_path / "fit_speed_quick.png").stat().st_size > 0
    assert out["benchmark"] == "fit_speed"
    assert {"results", "warm_start", "peer", "threads", "headline", "targets", "targets_met", "notes", "meta"} <= set(
        out
    )
    assert list(out["headline"]) == list(fs.HEADLINE_KEYS)
    assert all(v is not None for v in out["headline"].values())
    assert set(out["results"]) == set(fs.DATASETS)
    for by_model in out["results"].values():
        assert set(by_model) == set(fs.MODELS)
        for by_setting in by_model.values():
            assert list(by_setting) == list(fs.QUICK_SETTINGS)
            for cell in by_setting.values():
                assert {"acc", "fit_s_median", "n_iter_median", "curve"} <= set(cell)
                assert len(cell["per_fold"]["acc"]) == 1  # --quick: the first fold only
    for by_model in out["warm_start"].values():
        for cell in by_model.values():
            assert cell["folds"] == [1]
            assert {"cold", "warm", "warm_over_cold"} <= set(cell)
    _check_curves(out)
    assert out["peer"] == {"skipped": "--no-peer"}
    assert out["threads"] == 1
    assert out["targets"] == fs.TARGETS and set(out["targets_met"]) == set(fs.TARGETS)


def test_full_mode_has_the_quick_modes_headline_keys(data_dir, tmp_path, capsys):
    """The full protocol (3 folds, 4 settings, warm starts over the folds) on one tiny set,
    with the peer where sklvq is installed; the headline keys are those of --quick."""
    out = _run(
        capsys,
        "--data-dir",
        str(data_dir),
        "--datasets",
        "segmentation",
        "--models",
        "GLVQ",
        "GMLVQ",
        "--threads",
        "1",
        "--no-plot",
        "--out",
        str(tmp_path / "fit_speed.json"),
    )
    assert list(out["headline"]) == list(fs.HEADLINE_KEYS)
    assert all(v is None for v in out["headline"].values())  # neither optdigits nor letter ran
    assert set(out["targets_met"].values()) == {None}
    cells = out["results"]["segmentation"]
    assert list(cells["GMLVQ"]) == list(fs.SETTINGS)
    assert len(cells["GMLVQ"]["legacy"]["per_fold"]["fit_s"]) == fs.FOLDS
    assert out["warm_start"]["segmentation"]["GLVQ"]["folds"] == [1, 2]
    _check_curves(out)
    if "results" in out["peer"]:
        peer = out["peer"]["results"]["segmentation"]
        assert set(peer) == {"GLVQ", "GMLVQ"}
        assert peer["GLVQ"]["sklvq_over_ours"] > 0
    else:
        assert "sklvq" in out["peer"]["skipped"]
    assert not (tmp_path / "fit_speed.png").exists()


def test_missing_data_exits_2(tmp_path, capsys):
    (tmp_path / "uci").mkdir()
    with pytest.raises(SystemExit) as exc:
        fs.main(["--data-dir", str(tmp_path), "--datasets", "letter", "--no-plot", "--out", str(tmp_path / "x.json")])
    assert exc.value.code == 2
    assert "letter" in capsys.readouterr().err


def test_default_outputs_follow_the_convention():
    quick, full = fs.parse_args(["--quick"]), fs.parse_args([])
    assert quick.out == fs.RESULTS_DIR / "fit_speed_quick.json" and full.out == fs.RESULTS_DIR / "fit_speed.json"
    assert quick.figure == fs.FIGURES_DIR / "fit_speed_quick.png" and full.figure == fs.FIGURES_DIR / "fit_speed.png"
    assert quick.settings == list(fs.QUICK_SETTINGS) and full.settings == list(fs.SETTINGS)
    assert fs.parse_args(["--settings", "legacy"]).settings == ["default", "legacy"]  # ratios need the default


# --------------------------------------------------------------------------- helpers
def test_thin_curve_keeps_the_ends_and_the_order():
    points = [(i, float(i)) for i in range(500)]
    thin = fs.thin_curve(points, 60)
    assert 2 <= len(thin) <= 60
    assert thin[0] == points[0] and thin[-1] == points[-1]
    assert [p[0] for p in thin] == sorted({p[0] for p in thin})
    early = sum(p[0] < 50 for p in thin)
    assert early > len(thin) / 4  # dense at the start, as a log time axis shows it
    assert fs.thin_curve(points[:10], 60) == points[:10]
    assert fs.thin_curve([], 60) == []
    with pytest.raises(ValueError):
        fs.thin_curve(points, 1)


def test_ratio_and_targets():
    assert fs.ratio(3.0, 2.0) == 1.5
    assert fs.ratio(1.0, 3.0, 2) == 0.33
    assert fs.ratio(None, 2.0) is None and fs.ratio(1.0, None) is None and fs.ratio(1.0, 0.0) is None
    assert fs.target_met("optdigits_lgmlvq_fit_s", 9.9) is True
    assert fs.target_met("optdigits_lgmlvq_fit_s", 10.1) is False
    assert fs.target_met("optdigits_gmlvq_acc", 0.95) is True
    assert fs.target_met("optdigits_gmlvq_acc", None) is None
    assert fs.target_met("letter_gmlvq_acc", 0.80, reference=0.80) is True  # relative: the legacy setting's
    assert fs.target_met("letter_gmlvq_acc", 0.79, reference=0.80) is False
    assert fs.target_met("letter_gmlvq_acc", 0.79) is None


def test_headline_from_results():
    def cell(acc: float, fit_s: float) -> dict:
        return {"acc": [acc, 0.0], "fit_s_median": fit_s}

    results = {
        "optdigits": {
            "LGMLVQ": {"default": cell(0.98, 2.0), "legacy": cell(0.98, 9.0)},
            "GMLVQ": {"default": cell(0.95, 0.5)},
        },
        "letter": {"GMLVQ": {"default": cell(0.80, 3.0), "legacy": cell(0.81, 6.0)}},
    }
    head = fs.headline(results)
    assert list(head) == list(fs.HEADLINE_KEYS)
    assert head["optdigits_lgmlvq_fit_s"] == 2.0 and head["optdigits_gmlvq_acc"] == 0.95
    assert head["legacy_over_default_optdigits_lgmlvq"] == 4.5
    met = fs.targets_met(results, head)
    assert met["optdigits_lgmlvq_acc"] and met["optdigits_lgmlvq_fit_s"] and met["optdigits_gmlvq_fit_s"]
    assert met["letter_gmlvq_acc"] is False  # below the legacy setting's 0.81


def test_curve_recorder_pauses_the_clock_while_scoring():
    class SlowScorer:
        def score(self, X, y):
            import time

            time.sleep(0.05)
            return 0.5

    rec = fs.CurveRecorder(SlowScorer(), None, None)
    rec.restart()
    for i in range(1, 4):
        rec(i, 1.0 / i)
    times = [p[3] for p in rec.points]
    assert [p[0] for p in rec.points] == [1, 2, 3]
    assert times == sorted(times) and times[-1] < 0.05  # the three 50 ms scorings are not counted


# --------------------------------------------------------------------------- targets and report
def test_targets_match_targets_json():
    spec = json.loads((LVQ / "targets.json").read_text(encoding="utf-8"))["fit_speed"]
    assert spec["targets"] == fs.TARGETS
    assert spec["command"] in json.loads((LVQ / "targets.json").read_text(encoding="utf-8"))["regenerate"]


def test_report_section_without_and_with_a_stored_run(tmp_path):
    spec = json.loads((LVQ / "targets.json").read_text(encoding="utf-8"))
    folder = tmp_path / "lvq"
    (folder / "results").mkdir(parents=True)
    text = "\n".join(lvq_report.render(Results(folder), spec))
    assert "### Time to accuracy" in text and "No stored run yet" in text

    def cell(acc: float, fit_s: float, n_iter: float) -> dict:
        return {"acc": [acc, 0.004], "fit_s_median": fit_s, "n_iter_median": n_iter, "curve": [[0.1, 0.5]]}

    results = {
        "optdigits": {
            "GMLVQ": {"default": cell(0.95, 0.5, 30), "legacy": cell(0.955, 2.0, 150)},
            "LGMLVQ": {"default": cell(0.97, 12.0, 100), "legacy": cell(0.98, 40.0, 500)},
        },
    }
    head = fs.headline(results)
    payload = {
        "benchmark": "fit_speed",
        "results": results,
        "warm_start": {
            "optdigits": {
                "GMLVQ": {
                    "folds": [1, 2],
                    "cold": {"acc": [0.95, 0.0], "fit_s_median": 0.5, "n_iter_median": 30},
                    "warm": {"acc": [0.95, 0.0], "fit_s_median": 0.2, "n_iter_median": 12},
                    "warm_over_cold": 0.4,
                }
            }
        },
        "peer": {
            "name": "sklvq 0.1.2",
            "solver": "lbfgs",
            "fold": 0,
            "results": {
                "optdigits": {
                    "GMLVQ": {"fit_s": 80.0, "acc": 0.94, "ours_fit_s": 0.5, "ours_acc": 0.95, "sklvq_over_ours": 160.0}
                }
            },
        },
        "threads": 2,
        "load_avg_1min": {"start": 0.1, "end": 2.0},
        "headline": head,
        "targets": fs.TARGETS,
        "targets_met": fs.targets_met(results, head),
        "target_bounds": fs.target_bounds(results),
        "meta": {"date": "2026-11-21T10:00:00+00:00", "machine": "m", "commit": "abc1234", "command": "python -m x"},
    }
    (folder / "results" / "fit_speed.json").write_text(json.dumps(payload), encoding="utf-8")
    res = Results(folder)
    text = "\n".join(lvq_report.render(res, spec) + metadata(res))
    assert "No stored run yet: `python -m benchmarks.lvq.fit_speed" not in text and res.orphans() == []
    assert "| **0.500** | <= 1.5 |" in text  # optdigits GMLVQ fit time: met, bold
    assert "| 12.000 | <= 10 |" in text  # optdigits LGMLVQ fit time: not met, plain
    assert "| 3.33x |" in text  # legacy / default, optdigits LGMLVQ
    assert "160.0x" in text and "0.40x" in text
    assert "`abc1234`" in text


# ------------------------------------------------------------------ fit_profile, dp_epoch_time
def test_fit_profile_quick_run(data_dir, tmp_path, capsys):
    from benchmarks.lvq import fit_profile

    out_file = tmp_path / "profile.json"
    args = ["--data-dir", str(data_dir), "--quick", "--datasets", "optdigits", "letter", "--threads", "1"]
    assert fit_profile.main([*args, "--out", str(out_file)]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out == json.loads(out_file.read_text()) and out["benchmark"] == "fit_profile"
    for name in ("optdigits", "letter"):
        for model in fit_profile.MODELS:
            for dtype in fit_profile.DTYPES:
                cell = out["results"][name][model][dtype]
                assert all(
                    cell[f"{k}_ms"] > 0 for k in ("distances", "cost", "gradient", "closed_eval", "autograd_eval")
                )
                for rule in ("default", "lbfgs_rule"):
                    assert cell[rule]["evaluations"] >= cell[rule]["n_iter"] >= 1


def test_dp_epoch_time_quick_run(data_dir, tmp_path, capsys):
    from benchmarks.lvq import dp_epoch_time

    out_file = tmp_path / "dp.json"
    args = ["--data-dir", str(data_dir), "--quick", "--threads", "1", "--label", "after", "--out", str(out_file)]
    assert dp_epoch_time.main(args) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out == json.loads(out_file.read_text()) and out["label"] == "after"
    cells = out["results"]["optdigits"]
    assert set(cells) == set(dp_epoch_time.MODELS)
    assert all(set(rates) == {"q=0.01", "q=0.1"} and all(np.isfinite(list(rates.values()))) for rates in cells.values())


def test_stopping_calibration_quick_run(data_dir, tmp_path, capsys):
    from benchmarks.lvq import stopping_calibration as sc

    out_file = tmp_path / "calibration.json"
    args = ["--data-dir", str(data_dir), "--quick", "--datasets", "optdigits", "segmentation", "--threads", "1"]
    assert sc.main([*args, "--out", str(out_file)]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out == json.loads(out_file.read_text()) and out["default"] in out["results"]
    assert len(out["results"]) == len(sc.RULES) * len(sc.TOLS) * len(sc.WINDOWS)
    assert out["seeds"] == [0]  # --quick: the first seed only
    for cell in out["results"].values():
        assert 0.0 < cell["time_fraction"] <= 1.0
        assert cell["meets"] == (cell["worst_pair_loss"] <= sc.MAX_PAIR_LOSS)
        assert all(1 <= n <= out["iterations"][pair] for pair, n in cell["pair_stops"].items())
    assert out["selected"] == sc.select(out["results"])
    assert out["default_is_selected"] == (out["selected"] == out["default"])


def test_calibration_selects_the_fastest_candidate_within_the_loss_bound():
    from benchmarks.lvq.stopping_calibration import MAX_PAIR_LOSS, select

    cells = {
        "fast but lossy": {"meets": False, "time_fraction": 0.1, "worst_pair_loss": 10 * MAX_PAIR_LOSS},
        "slow": {"meets": True, "time_fraction": 0.9, "worst_pair_loss": 0.0},
        "fast enough": {"meets": True, "time_fraction": 0.3, "worst_pair_loss": MAX_PAIR_LOSS},
    }
    assert select(cells) == "fast enough"
    lossy = {
        "fast but lossy": cells["fast but lossy"],
        "slow, less lossy": {"meets": False, "time_fraction": 0.9, "worst_pair_loss": 2 * MAX_PAIR_LOSS},
        "faster, as lossy": {"meets": False, "time_fraction": 0.5, "worst_pair_loss": 2 * MAX_PAIR_LOSS},
    }
    assert select(lossy) == "faster, as lossy"  # none within the bound: the smallest loss, then time


def test_accuracy_condition_waits_for_a_new_best_training_accuracy():
    from benchmarks.lvq.stopping_calibration import accuracy_settled, stop_index

    assert not accuracy_settled([0.5, 0.6, 0.7], 2)  # too few iterations
    assert accuracy_settled([0.5, 0.7, 0.6, 0.7], 2)  # no new best in the last two
    assert not accuracy_settled([0.5, 0.7, 0.6, 0.8], 2)
    costs = [0.0, -0.5, -0.8, -0.9, -0.9001, -0.9001, -0.9001, -0.9001]
    train_accs = [0.5, 0.6, 0.7, 0.7, 0.8, 0.8, 0.8]
    assert stop_index(costs, 1e-3, 2) == 5
    assert stop_index(costs, 1e-3, 2, train_accs) == 7  # the best (0.8) came at iteration 5


def test_stop_index_uses_the_estimators_rule():
    from benchmarks.lvq.stopping_calibration import stop_index

    costs = [0.0, -0.5, -0.8, -0.9, -0.9001, -0.9001, -0.9001]
    assert stop_index(costs, 1e-3, 2) == 5  # iterations 3..5 gain 1e-4 of 0.9
    assert stop_index(costs, 0.0, 10) == 6  # never settled: the last iteration


def test_the_estimators_default_is_the_stored_calibrations_selection():
    """The stored full calibration run selected the rule the estimators use by default."""
    from benchmarks.lvq.stopping_calibration import DEFAULT, RESULTS_DIR, candidate_key

    stored = json.loads((RESULTS_DIR / "stopping_calibration.json").read_text())
    assert not stored["quick"] and stored["default"] == candidate_key(*DEFAULT)
    assert stored["selected"] == stored["default"] and stored["default_is_selected"]
