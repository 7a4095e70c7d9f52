"""Smoke run of benchmarks/svdd/speed.py: ``--quick`` ends with the JSON line, its headline
keys, and a solver comparison whose objectives agree."""

from __future__ import annotations

import importlib
import json

import pytest

from tests.benchmarks.test_headlines import stored_headline


@pytest.fixture(scope="module")
def bench():
    """benchmarks/svdd/speed.py imported as a module (benchmarks/ is not a package)."""
    return importlib.import_module("benchmarks.svdd.speed")


def test_quick_run_ends_with_the_json_line(bench, tmp_path, capsys):
    out_file = tmp_path / "x.json"
    assert bench.main(["--quick", "--threads", "1", "--out", str(out_file)]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert json.loads(out_file.read_text()) == line
    assert line["benchmark"] == "svdd_speed"
    assert set(line) >= {"benchmark", "results", "headline"}
    headline = line["headline"]
    assert set(headline) == set(stored_headline("svdd/results/svdd_speed.json"))
    # --quick times the headline method on shuttle when the data directory has it
    if "shuttle" in line["results"]["datasets"]:
        shuttle = line["results"]["datasets"]["shuttle"]["methods"]
        assert headline["shuttle_end_to_end_s"] == shuttle["proposed_auto"]["total_s"] > 0
        assert all("skipped" in row for method, row in shuttle.items() if method != "proposed_auto")
    else:
        assert headline["shuttle_end_to_end_s"] is None and "shuttle" in line["results"]["skipped"]

    # the solver comparison at the quick size: same optimum, both converged
    solver = line["results"]["solver_vs_qp"]
    assert solver["n"] == 200
    assert solver["ours"]["converged"] and solver["slsqp"]["success"]
    assert headline["solver_objective_gap"] < 1e-4
    cvx = solver.get("cvxopt", {})
    if cvx.get("status") == "optimal":  # Park's (2022) QP solver, when installed, is the reference
        assert headline["solver_reference"] == "cvxopt.solvers.qp"
        assert headline["solver_objective_gap"] == cvx["objective_gap"]
    else:
        assert headline["solver_reference"] == "scipy SLSQP"
        assert headline["solver_objective_gap"] == solver["objective_gap"]
    assert headline["solver_speedup_vs_qp"] > 0

    # three_moons is synthetic, so it always runs; the proposed rows carry Park's (2022) seconds
    moons = line["results"]["datasets"]["three_moons"]
    assert (moons["n_train"], moons["n_test"]) == (320, 80)
    for method in ("proposed_auto", "proposed_normal", "proposed_training", "svc_rbf"):
        row = moons["methods"][method]
        assert row["total_s"] > 0 and 0 <= row["accuracy"] <= 1
    assert moons["thesis_table_7_2_s"]["Proposed"] == 0.90
    assert moons["ratio_thesis_over_ours"]["proposed_normal"] > 0
    # iris needs the data directory: measured, or skipped with a note
    assert "iris" in line["results"]["datasets"] or "iris" in line["results"]["skipped"]
