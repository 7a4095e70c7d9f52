"""Markdown tables of ``benchmarks/confidence/results/time_integration.json`` (Brinkrolf 2023, Table 4.5).

Standard library only, so that ``benchmarks.report`` can import it without torch.
``python -m benchmarks.confidence.tables [--json FILE]`` prints the tables of a stored run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

DASH = "—"
HERE = Path(__file__).resolve().parent

#: The columns of the ARC-area table: (classifier, order, mode, header).
COLUMNS = (
    ("pairwise-pkpd", "activity_blocks", "centred", "pairwise PKPD, activity blocks"),
    ("pairwise-pkpd", "time", "centred", "pairwise PKPD, time order"),
    ("pairwise-pkpd", "time", "causal", "pairwise PKPD, time order, causal"),
    ("gmlvq-platt", "activity_blocks", "centred", "GMLVQ + LR, activity blocks"),
    ("gmlvq-platt", "time", "centred", "GMLVQ + LR, time order"),
    ("logreg", "activity_blocks", "centred", "LR, activity blocks"),
    ("logreg", "time", "centred", "LR, time order"),
)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    return out + ["| " + " | ".join(row) + " |" for row in rows] + [""]


def _cell(payload: dict[str, Any], clf: str, order: str, mode: str, t: str) -> dict[str, Any] | None:
    return payload.get("results", {}).get(clf, {}).get(order, {}).get(mode, {}).get(t)


def table_4_5(payload: dict[str, Any] | None, spec: dict[str, Any]) -> list[str]:
    """Markdown lines: the area under the ARC for every window t (mean over the test
    volunteers) beside Brinkrolf (2023), Table 4.5, bold where at least the paper's value;
    then the accuracy at reject rate 0.2 (t = 0 and 4) and the test accuracies."""
    if payload is None:
        return ["No stored run (`results/time_integration.json`).", ""]
    targets = spec["targets"]["motion"]
    columns = [c for c in COLUMNS if _cell(payload, c[0], c[1], c[2], "0") is not None]
    rows = []
    for t in (str(w) for w in spec["windows"]):
        paper = targets.get(t)
        cells = []
        for clf, order, mode, _ in columns:
            value = _cell(payload, clf, order, mode, t)["arc_area"][0]
            text = f"{value:.4f}"
            cells.append(f"**{text}**" if paper is not None and value >= paper else text)
        rows.append([t, DASH if paper is None else f"{paper:.4f}", *cells])
    out = _table(["t", "Brinkrolf (2023)", *[c[3] for c in columns]], rows)
    if any("**" in cell for row in rows for cell in row):
        out += ["**Bold**: at least the value of Brinkrolf (2023) for the same t.", ""]
    else:
        out += ["No column reaches the value of Brinkrolf (2023) at any t.", ""]

    acc_spec = spec.get("accuracy_at_reject_0.2", {})
    acc_targets = acc_spec.get("targets", {})
    rows = []
    for clf, order, mode, label in columns:
        cells = [f"{_cell(payload, clf, order, mode, t)['accuracy_at_reject']['0.2']:.4f}" for t in acc_targets]
        rows.append([label, *cells])
    rows.append(["Brinkrolf (2023)", *[f"{v:.5f}" for v in acc_targets.values()]])
    if acc_targets:
        out += ["Accuracy at reject rate 0.2 (the per-volunteer curves averaged):", ""]
        out += _table(["", *[f"t = {t}" for t in acc_targets]], rows)
    accuracy = payload.get("test_accuracy", {})
    if accuracy:
        parts = [f"{clf} {mean:.3f} ({std:.3f})" for clf, (mean, std) in accuracy.items()]
        out += [
            "Test accuracy without reject or integration, mean (std) over the volunteers: " + ", ".join(parts) + ".",
            "",
        ]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default=str(HERE / "results" / "time_integration.json"))
    args = p.parse_args(argv)
    payload = json.loads(Path(args.json).read_text(encoding="utf-8").strip().splitlines()[-1])
    spec = json.loads((HERE / "targets.json").read_text(encoding="utf-8"))["table_4_5"]
    print("\n".join(table_4_5(payload, spec)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
