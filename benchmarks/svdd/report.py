"""Renders ``benchmarks/svdd/RESULTS.md`` from the stored results (``python -m benchmarks.report``)."""

from __future__ import annotations

from typing import Any

from benchmarks.reporting import (
    DASH,
    Results,
    bold,
    bullets,
    eps_label,
    figure,
    header,
    met_mark,
    num,
    source,
    table,
)
from benchmarks.svdd import tables as svdd_tables


def render(res: Results, t: dict[str, Any]) -> list[str]:
    acc, votes = res.get("svdd_accuracy.json"), res.get("svdd_accuracy_table73_discrete_votes.json")
    out = header(t) + bullets(t["notes"]["accuracy"])
    if acc is not None:
        out += _svdd_table_7_3(acc, votes, t)
        spec = t["table_7_1"]
        out += ["### Accuracy of every method on Table 7.1's data sets", ""] + source(spec["source"])
        out += [spec["paper_values"], ""]
        beats = acc.get("headline", {}).get("beats_svm_weight_eps_le_1")
        if beats is not None:
            out += [f"The sound default beats SVM WEIGHT at most epsilons <= 1 on {beats} data sets.", ""]
        out += [svdd_tables.tables(acc).rstrip("\n"), ""]
        out += figure(res.folder, "svdd_accuracy.png", "Test accuracy against epsilon, every method")
    speed = res.get("svdd_speed.json")
    if speed is not None:
        out += _svdd_speed(speed, t)
    out += figure(
        res.folder, "svdd_regions.png", "Decision regions, non-private and private (cf. Park 2022, Figure 5.1)"
    )
    return out


def _svdd_table_7_3(acc: dict[str, Any], votes: dict[str, Any] | None, t: dict[str, Any]) -> list[str]:
    spec, methods = t["table_7_3"], t["methods"]
    epsilons = spec["epsilons"]
    out = ["### Table 7.3: shuttle subsampled", ""] + source(spec["source"])
    for ds, targets in spec["targets"].items():
        rows = []
        for method, paper_method in spec["paper_method"].items():
            ours = acc["results"].get(ds, {}).get(method)
            rows.append([methods[method], *[_vs(ours, targets[paper_method], e) for e in epsilons]])
        if votes is not None and ds in votes["results"]:
            label = f"{methods['proposed']}, re-run with discrete Laplace votes"
            rows.append([label, *[_vs(votes["results"][ds]["proposed"], targets["Proposed"], e) for e in epsilons]])
        out += [f"**{spec['labels'][ds]}** (ours / Park 2022)", ""]
        out += table(["method", *[eps_label(e) for e in epsilons]], rows, right=range(1, 1 + len(epsilons)))
        modes = acc.get("start_modes", {}).get(ds)
        if modes:
            out += [f"Sound default's cells: {svdd_tables.cells_sentence(modes)}", ""]
    return out


def _vs(ours: dict[str, Any] | None, paper: dict[str, float], e: str) -> str:
    value = None if ours is None or e not in ours else ours[e]["mean"]
    text = f"{num(value)} / {num(paper.get(e))}"
    return bold(text, value is not None and e in paper and value >= paper[e])


def _svdd_speed(p: dict[str, Any], t: dict[str, Any]) -> list[str]:
    spec = t["table_7_2"]
    paper = spec["targets"]
    out = ["### Table 7.2: run time", ""] + source(spec["source"]) + bullets(t["notes"]["speed"])
    rows = []
    for ds, d in p["results"]["datasets"].items():
        m = d["methods"]
        ours = m["proposed_auto"]["total_s"]
        rows.append(
            [
                ds,
                str(d["n_train"]),
                f"{ours:.3f}",
                f"{m['proposed_normal']['total_s']:.3f}",
                f"{m['proposed_training']['total_s']:.3f}",
                str(paper["Proposed"][ds]),
                f"{paper['Proposed'][ds] / ours:.0f}",
                f"{m['svm_weight']['total_s']:.3f}" if "total_s" in m.get("svm_weight", {}) else f"{DASH} (not run)",
                str(paper["SVM WEIGHT"][ds]),
            ]
        )
    head = ["data set", "n train", "sound default (s)", "N(0, I) starts (s)", "thesis variant (s)"]
    head += ["Park (2022) Proposed (s)", "Park / ours", "SVM WEIGHT (s)", "Park (2022) SVM WEIGHT (s)"]
    out += table(head, rows, right=range(1, len(head)))
    h, hspec = p["headline"], t["headline"]
    rows = []
    for key, target in hspec["targets"].items():
        value = h[key]
        label = target["label"] + (
            f" ({h['solver_reference']}, n = {h['solver_qp_n']})" if key.startswith("solver") else ""
        )
        rows.append([label, f"{value:.3g}", f"{target['op']} {target['value']:g}", met_mark(value, target)])
    out += ["Headline:", ""] + source(hspec["source"], paper=False)
    out += table(["quantity", "measured", "target", ""], rows, right=(1, 2))
    if "solver_speedup_vs_slsqp" in h:
        bound = (
            " (a lower bound: SLSQP stopped at its time limit)"
            if p["results"]["solver_vs_qp"].get("speedup_is_lower_bound")
            else ""
        )
        out += [f"Speed-up over scipy's SLSQP on the same problem: {h['solver_speedup_vs_slsqp']:g}{bound}.", ""]
    return out
