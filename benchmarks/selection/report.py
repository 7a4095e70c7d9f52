"""Renders ``benchmarks/selection/RESULTS.md`` from the stored results (``python -m benchmarks.report``)."""

from __future__ import annotations

from typing import Any

from benchmarks.reporting import Results, bullets, figure, header, num, table


def render(res: Results, t: dict[str, Any]) -> list[str]:
    out = header(t)
    stored = res.get("search.json")
    out += ["### Test accuracy at a total of (1, 1e-5)", ""]
    if stored is None:
        return out + ["No stored run.", ""]
    protocols = ("defaults", "private selection", "grid search at equal epsilon", "grid search, epsilon-1 fits")
    rows = []
    for name, row in stored["table"].items():
        composed = row["grid search, epsilon-1 fits: composed epsilon"]
        rows.append([name, *(num(row[p], 4) for p in protocols), num(composed, 2)])
    heads = [
        "set",
        "defaults (eps 1)",
        "private selection (total 1)",
        "grid search, equal total 1",
        "grid search, eps-1 fits",
    ]
    out += table([*heads, "its composed epsilon"], rows, right=range(1, 6))
    seeds = sorted({r["seed"] for r in stored["rows"]})
    out += [f"Means over seeds {', '.join(map(str, seeds))}.", ""]
    out += bullets(t["notes"])
    return out + figure(res.folder, "private_selection.png", "Test accuracy by protocol")
