"""The benchmark report (``python -m benchmarks.report``, ``make results``): it is generated from
the stored JSON alone, the committed files are up to date, every stored result is read, every
figure link resolves, and the paper targets agree with what the runners embed; plus the run
metadata that :func:`benchmarks.common.emit_json` adds to every result."""

from __future__ import annotations

import ast
import io
import json
import math
import re
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from benchmarks import report
from benchmarks.common import emit_json, git_commit, run_command
from benchmarks.lvq import report as lvq_report
from benchmarks.reporting import Results, metadata

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
STORED = sorted(p for p in BENCH.glob("*/results/*.json") if not p.name.endswith("_quick.json"))
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


@pytest.fixture(scope="module")
def built():
    return report.build()


def test_generator_runs_without_torch_and_is_deterministic():
    code = "import sys, benchmarks.report as r; a = r.build(); b = r.build(); print(a == b, 'torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["True", "False"]


def test_check_passes_on_the_committed_files():
    """`make results` has been run: the files on disk are what the generator writes."""
    assert report.main(["--check"]) == 0


def test_every_stored_json_is_read_by_the_report(built):
    _, orphans = built
    assert orphans == {}
    folders = {path.parent.parent.name for path in STORED}
    assert folders <= {*report.CAPABILITIES, report.STUDIES}, "a results folder the report does not scan"
    assert len(STORED) >= 50


def test_outputs_and_fragments(built):
    outputs, _ = built
    expected = {BENCH / cap / "RESULTS.md" for cap in (*report.CAPABILITIES, report.STUDIES)} | {BENCH / "RESULTS.md"}
    assert set(outputs) == expected
    top = outputs[BENCH / "RESULTS.md"]
    assert "do not edit" in top and "(studies/RESULTS.md)" in top
    for cap in report.CAPABILITIES:
        fragment = outputs[BENCH / cap / "RESULTS.md"]
        levels = _heading_levels(fragment)
        assert min(levels) == 2, f"{cap}: a self-contained fragment starts at ##"
        assert "### Run metadata" in fragment
        for link in IMAGE.findall(fragment):
            assert link.startswith("figures/") and link.endswith(".png"), (cap, link)
        assert fragment.replace("](figures/", f"]({cap}/figures/") in top


def _heading_levels(text: str) -> list[int]:
    """Levels of the Markdown headings outside code fences."""
    levels, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"(#+) ", line)):
            levels.append(len(m.group(1)))
    return levels


def test_every_image_link_points_at_an_existing_png(built):
    outputs, _ = built
    links = 0
    for path, text in outputs.items():
        for link in IMAGE.findall(text):
            assert link.endswith(".png")
            assert (path.parent / link).is_file(), f"{path.relative_to(ROOT)}: {link}"
            links += 1
    assert links > 0


def test_table_2_2_fills_from_a_stored_run(tmp_path):
    """No baseline run is stored yet; a result in the runner's format fills the table."""
    folder = tmp_path / "lvq"
    (folder / "results").mkdir(parents=True)
    spec = json.loads((BENCH / "lvq" / "targets.json").read_text(encoding="utf-8"))
    payload = {
        "benchmark": "baseline_accuracy",
        "results": {
            "segmentation": {"GLVQ": [0.86, 0.015]},
            "mnist (quick: 10000 samples, 1x5 folds)": {"GMLVQ": [0.8, 0.01]},
        },
        "transfer": "identity",
        "meta": {"date": "2026-11-21T10:00:00+00:00", "machine": "m", "commit": "abc1234", "command": "python -m x"},
    }
    (folder / "results" / "baseline_accuracy.json").write_text(json.dumps(payload), encoding="utf-8")
    res = Results(folder)
    text = "\n".join(lvq_report.render(res, spec) + metadata(res))
    assert "| **0.860 (0.015)** | +0.024 |" in text  # above the target 0.836: bold
    assert "| 0.800 (0.010) | -0.052 |" in text
    assert text.count("no stored run") == 7
    assert "`abc1234`" in text and res.orphans() == []


def test_every_stored_json_carries_run_metadata():
    for path in STORED:
        meta = json.loads(path.read_text(encoding="utf-8")).get("meta")
        assert meta is not None, path
        assert {"date", "machine", "commit", "command"} <= set(meta), path
        assert meta["date"].endswith("+00:00"), path
        assert meta["command"] is None or meta["command"].split()[0] in ("python", "OMP_NUM_THREADS=1"), path


# --------------------------------------------------------------------------- targets as data
def _targets(cap: str) -> dict:
    return json.loads((BENCH / cap / "targets.json").read_text(encoding="utf-8"))


def _literal(path: Path, name: str):
    """A module-level constant of a runner, read without importing it (no torch)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return ast.literal_eval(node.value)
    raise KeyError(name)


def test_table_2_2_targets_match_the_runner():
    runner = _literal(BENCH / "lvq" / "baseline_accuracy.py", "TARGETS")
    ours = {
        ds: {m: v[0] for m, v in by_model.items()} for ds, by_model in _targets("lvq")["table_2_2"]["targets"].items()
    }
    assert ours == runner


def test_table_b1_targets_match_what_the_runs_embed():
    spec = _targets("dpsgd")
    checked = 0
    for path in sorted((BENCH / "dpsgd" / "results").glob("dpsgd_accuracy_*.json")):
        for key, by_model in json.loads(path.read_text(encoding="utf-8"))["targets"].items():
            for model, cells in by_model.items():
                assert cells == spec["table_b1"]["targets"][key.split(" ")[0]][model], (path.name, model)
                checked += 1
    assert checked >= 8
    speed = json.loads((BENCH / "dpsgd" / "results" / "dpsgd_speed.json").read_text(encoding="utf-8"))
    for key, target in spec["speed"]["targets"].items():
        assert speed["targets"][key] == f"{target['op']} {target['value']:g}"


def test_park_targets_match_the_protocol_and_the_runs():
    from benchmarks.svdd import protocol

    spec = _targets("svdd")
    for ratio, ds in ((0.1, "shuttle10"), (0.3, "shuttle30")):
        for method, cells in protocol.TABLE_7_3[ratio].items():
            as_keys = {("non-private" if math.isinf(e) else f"{e:g}"): v for e, v in cells.items()}
            assert spec["table_7_3"]["targets"][ds][method] == as_keys, (ds, method)
    assert spec["table_7_2"]["targets"] == protocol.TABLE_7_2
    accuracy = json.loads((BENCH / "svdd" / "results" / "svdd_accuracy.json").read_text(encoding="utf-8"))
    for ds, cells in accuracy["table_7_3_check"].items():
        for eps, check in cells.items():
            assert spec["table_7_3"]["targets"][ds]["Proposed"][eps] == check["thesis"], (ds, eps)
    speed = json.loads((BENCH / "svdd" / "results" / "svdd_speed.json").read_text(encoding="utf-8"))
    for ds, d in speed["results"]["datasets"].items():
        for method, seconds in d["thesis_table_7_2_s"].items():
            assert spec["table_7_2"]["targets"][method][ds] == seconds, (ds, method)


def test_leakage_targets_match_the_run():
    spec = _targets("leakage")
    ref = json.loads((BENCH / "leakage" / "results" / "leakage.json").read_text(encoding="utf-8"))["results"][
        "reference"
    ]
    for setting, target in spec["outlier"]["targets"].items():
        assert ref["outlier_shift"][setting] == {"mean_shift": target["mean_shift"], "p": target["p"]}
    assert ref["xor_fraction"] == spec["xor"]["targets"]


# --------------------------------------------------------------------------- run metadata of new runs
def test_emit_json_adds_run_metadata(tmp_path):
    payload = {"benchmark": "x", "results": {"a": 1}, "machine": "test machine"}
    out = tmp_path / "sub" / "x.json"
    with redirect_stdout(io.StringIO()) as stdout:
        emit_json(payload, out)
    line = json.loads(stdout.getvalue().strip().splitlines()[-1])
    assert json.loads(out.read_text(encoding="utf-8")) == line
    assert "meta" not in payload  # the caller's dict is left alone
    meta = line.pop("meta")
    assert line == payload and list(line) == list(payload)
    assert meta["machine"] == "test machine"
    assert meta["date"].endswith("+00:00")
    assert meta["commit"] == git_commit()
    assert meta["command"] == run_command()


def test_emit_json_keeps_a_given_meta():
    with redirect_stdout(io.StringIO()) as stdout:
        emit_json({"benchmark": "x", "meta": {"date": "then"}})
    assert json.loads(stdout.getvalue())["meta"] == {"date": "then"}


def test_git_commit_and_command(tmp_path):
    commit = git_commit()
    assert commit is None or re.fullmatch(r"[0-9a-f]{4,40}(\+dirty)?", commit)
    assert git_commit(tmp_path) is None  # not a git checkout
    code = "from benchmarks.common import run_command; print(run_command())"
    proc = subprocess.run(
        [sys.executable, "-c", code, "--quick", "a b"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.stdout.strip() == "python -c --quick 'a b'"
    assert run_command(["--x"]).endswith(" --x")
