"""The ``--quick`` mode of every reproduction runner prints the headline keys of its stored
full run (``benchmarks/<capability>/results/<name>.json``), computed on its reduced setting:
no key dropped, none left null that the full run fills.

Only the quick modes that finish in well under a minute run here. The slower ones are
checked against the same stored files by their own smoke tests (``test_leakage.py``,
``test_aggregate_accuracy.py``, ``test_anonymizer_tradeoff.py``, ``test_llp_accuracy.py``) through
:func:`stored_headline`; ``benchmarks.dpsgd.accuracy`` and ``benchmarks.lvq.baseline_accuracy``
have no headline (their quick modes take minutes).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


def stored_payload(result: str) -> dict:
    """The JSON line of a stored run, ``result`` relative to ``benchmarks/``."""
    return json.loads((BENCHMARKS / result).read_text(encoding="utf-8").strip().splitlines()[-1])


def stored_headline(result: str) -> dict | None:
    """The ``headline`` of a stored run (``None`` when the runner has none)."""
    return stored_payload(result).get("headline")


def key_shape(value, depth: int = 2):
    """The keys of a headline down to ``depth`` levels (dicts only; values are dropped)."""
    if not isinstance(value, dict) or depth == 0:
        return None
    return {k: key_shape(v, depth - 1) for k, v in value.items()}


def filled(value) -> set[str]:
    """The top-level keys of a headline whose value is not null."""
    return {k for k, v in (value or {}).items() if v is not None}


def assert_same_headline(out: dict, result: str) -> None:
    """``out``'s headline has the keys (two levels deep) of the stored run ``result`` and
    fills every key the stored run fills."""
    full = stored_headline(result)
    quick = out.get("headline")
    assert key_shape(quick) == key_shape(full), f"headline keys differ from {result}"
    assert filled(quick) >= filled(full), f"null in --quick where {result} has a value: {filled(full) - filled(quick)}"


def _run(module: str, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", "--quick", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


#: (runner, stored full run, extra arguments ({tmp}: a temporary directory), needs real data).
#: Quick wall times on 2 shared cores: 2-40 s each.
CHEAP = [
    pytest.param("privacy.noise_samplers", "privacy/results/noise_samplers.json", [], False, id="noise_samplers"),
    pytest.param("privacy.audit", "privacy/results/privacy_audit.json", [], False, id="privacy_audit"),
    pytest.param("privacy.trainer_audit", "privacy/results/trainer_audit.json", [], False, id="trainer_audit"),
    pytest.param("privacy.black_box_audit", "privacy/results/black_box_audit.json", [], False, id="black_box_audit"),
    pytest.param("dpsgd.speed", "dpsgd/results/dpsgd_speed.json", ["--threads", "1"], False, id="dpsgd_speed"),
    pytest.param(
        "dpsgd.per_record_cost", "dpsgd/results/dpsgd_per_record_cost.json", [], False, id="dpsgd_per_record_cost"
    ),
    pytest.param(
        "dpsgd.guard_floor_share",
        "dpsgd/results/dpsgd_guard_floor_share.json",
        ["--out", "{tmp}/dpsgd_guard_floor_share.json"],
        True,
        id="dpsgd_guard_floor_share",
        marks=pytest.mark.data,
    ),
    pytest.param(
        "svdd.accuracy",
        "svdd/results/svdd_accuracy.json",
        ["--json", "{tmp}/svdd_accuracy.json", "--figure", "{tmp}/svdd_accuracy.png"],
        True,
        id="svdd_accuracy",
        marks=pytest.mark.data,
    ),
    pytest.param(
        "svdd.speed",
        "svdd/results/svdd_speed.json",
        ["--out", "{tmp}/svdd_speed.json"],
        True,
        id="svdd_speed",
        marks=pytest.mark.data,
    ),
    pytest.param("selection.search", "selection/results/search.json", [], True, id="selection", marks=pytest.mark.data),
]


@pytest.mark.parametrize(("module", "result", "extra", "needs_data"), CHEAP)
def test_quick_run_prints_the_full_runs_headline_keys(module, result, extra, needs_data, request, tmp_path):
    args = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    if needs_data:
        args += ["--data-dir", str(request.getfixturevalue("real_data_dir"))]
    out = _run(module, *args)
    assert out["benchmark"] == stored_payload(result)["benchmark"]
    assert_same_headline(out, result)


def test_the_helpers_compare_keys_not_values():
    full = {"a": 1.0, "b": {"x": 1, "y": 2}, "c": None}
    assert key_shape({"a": 0.5, "b": {"y": 0, "x": 9}, "c": 3}) == key_shape(full)
    assert key_shape({"a": 0.5, "b": {"x": 9}, "c": None}) != key_shape(full)
    assert filled({"a": 0.5, "b": {}, "c": None}) >= filled(full)
    assert not filled({"a": None, "b": {}}) >= filled(full)
