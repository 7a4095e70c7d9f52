"""Renders ``benchmarks/membership/RESULTS.md`` from the stored results (``python -m benchmarks.report``)."""

from __future__ import annotations

from typing import Any

from benchmarks.reporting import DASH, Results, bullets, figure, header, num, table


def render(res: Results, t: dict[str, Any]) -> list[str]:
    out = header(t)
    stored = res.get("membership.json")
    if stored is None:
        return out + ["No stored run.", ""]
    r = stored["results"]
    out += ["### LiRA: true-positive rate at a low false-positive rate", ""]
    for s in stored["settings"]["sets"]:
        rows = []
        for name in stored["settings"]["models"]:
            bound = r["dp_bound"].get(s, {}).get(name)
            rows.append([
                name, num(r["test_accuracy"][s][name], 3), num(r["auc"][s][name], 3),
                num(r["tpr_at"][s][name]["0.001"], 4), num(r["tpr_at"][s][name]["0.01"], 4),
                DASH if bound is None else num(bound["0.01"], 4),
                num(r["one_run"][s][name]["epsilon_lower"], 3) if "one_run" in r else DASH,
            ])  # fmt: skip
        n = stored["settings"]["n"][s]
        out += [f"{s} ({n} records, {stored['settings']['models_per_type']} models per type):", ""]
        heads = ["model", "held-out accuracy", "AUC", "TPR at 0.1 % FPR", "TPR at 1 % FPR", "DP bound at 1 % FPR"]
        out += table([*heads, "one-run epsilon lower bound"], rows, right=range(1, 7))
    out += bullets(t["notes"])
    return out + figure(res.folder, "membership_roc.png", "LiRA ROC curves on a log scale")
