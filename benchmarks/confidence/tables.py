"""Markdown tables of ``benchmarks/confidence/results/``: ``time_integration.json``
(Brinkrolf 2023, Table 4.5) and ``confidence_<dataset>*.json`` (Tables 4.2, 4.3 and 4.4).

Standard library only, so that ``benchmarks.report`` can import it without torch.
``python -m benchmarks.confidence.tables [--json FILE]`` prints the Table 4.5 tables of a
stored run; ``--confidence`` prints Tables 4.2-4.4 of the stored confidence runs.
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


def _mean_std(pair: list[float] | None, digits: int) -> str:
    if not pair:
        return DASH
    return f"{pair[0]:.{digits}f} ({pair[1]:.{digits}f})"


def _paper(value: float | None, digits: int) -> str:
    return DASH if value is None else f"{value:.{digits}f}"


def table_4_2_4_3(payloads: dict[str, dict[str, Any] | None], spec: dict[str, Any]) -> list[str]:
    """Markdown lines: accuracy without reject (Table 4.2) and area under the ARC (Table 4.3),
    mean (std) over the folds, beside Brinkrolf (2023), per data set of ``spec["datasets"]``
    (``payloads``: data set -> stored run or None); bold where at least the paper's mean."""
    out: list[str] = []
    methods = list(spec["methods"])
    for metric, table, digits in (("accuracy", "Table 4.2", 3), ("arc_area", "Table 4.3", 4)):
        header = ["method"]
        for ds in spec["datasets"].values():
            header += [f"{ds['paper_name']}: ours", f"{ds['paper_name']}: Brinkrolf (2023)"]
        rows = []
        for m in methods:
            row = [m]
            for name in spec["datasets"]:
                payload = payloads.get(name)
                paper = spec["targets"][name][metric].get(m)
                cell = (payload or {}).get("results", {}).get(m, {}).get(metric)
                text = _mean_std(cell, digits)
                if cell and paper is not None and round(cell[0], digits) >= paper:
                    text = f"**{text}**"
                row += [text, _paper(paper, digits)]
            rows.append(row)
        label = "accuracy without reject" if metric == "accuracy" else "area under the accuracy-reject curve"
        out += [f"{table}: {label}, mean (std) over the folds.", ""] + _table(header, rows)
    out += ["**Bold**: at least the mean of Brinkrolf (2023) at the printed precision.", ""]
    runs = []
    for name, ds in spec["datasets"].items():
        payload = payloads.get(name)
        if payload is None:
            runs.append(f"{ds['paper_name']}: no stored run")
            continue
        proto = payload.get("protocol", {})
        runs.append(
            f"{ds['paper_name']}: `{payload.get('dataset', name)}`, {proto.get('repeats')}x{proto.get('folds')}-fold "
            f"CV, {proto.get('n_samples')} samples"
        )
    out += ["Runs: " + "; ".join(runs) + ".", ""]
    private_rows = []
    for name, ds in spec["datasets"].items():
        payload = payloads.get(name) or {}
        for label, r in (payload.get("private") or {}).items():
            pkpd = payload["results"]["PKPD"]
            private_rows.append(
                [
                    ds["paper_name"],
                    label,
                    _mean_std(r["accuracy"], 3),
                    _mean_std(r["arc_area"], 4),
                    str(r["n_folds"]),
                    f"{pkpd['accuracy'][0]:.3f} / {pkpd['arc_area'][0]:.4f}",
                ]
            )
    if private_rows:
        out += [
            "Private variant (`DPPairwiseGMLVQ`, PKPD; not in the dissertation), on the first folds of the run:",
            "",
        ]
        out += _table(
            ["data set", "model", "accuracy", "ARC area", "folds", "non-private PKPD (all folds): accuracy / ARC"],
            private_rows,
        )
    seg = payloads.get("segmentation")
    if seg and "certified" in seg:
        c = seg["certified"]
        out += [
            f"Certified robustness (Img. Seg., {c['model']}, RelSim reject at theta = {c['theta']:g}): "
            f"{c['fraction'][0]:.4f} ({c['fraction'][1]:.4f}) of the test points are accepted and certified at "
            f"Euclidean radius {c['radius']:g} in z-scored units (reject rate {c['reject_rate'][0]:.4f}); "
            "the dissertation reports no such number.",
            "",
        ]
    return out


#: Rows of Table 4.4: (label, our timing key, the paper's (phase, key)).
TIME_ROWS = (
    ("One vs. One (train)", "train_pairwise", ("train", "pairwise")),
    ("GMLVQ (train)", "train_GMLVQ", ("train", "GMLVQ")),
    ("LGMLVQ (train)", "train_LGMLVQ", ("train", "LGMLVQ")),
    ("HT (test)", "test_HT", ("test", "HT")),
    ("PKPD (test)", "test_PKPD", ("test", "PKPD")),
    ("WLW1 (test)", "test_WLW1", ("test", "WLW1")),
    ("WLW2 (test)", "test_WLW2", ("test", "WLW2")),
    ("Voting (test)", "test_Voting", None),
    ("GMLVQ (test)", "test_GMLVQ", ("test", "GMLVQ")),
    ("LGMLVQ (test)", "test_LGMLVQ", ("test", "LGMLVQ")),
)


def table_4_4(payloads: dict[str, dict[str, Any] | None], spec: dict[str, Any]) -> list[str]:
    """Markdown lines: mean seconds per fold (ours: one torch thread) beside Brinkrolf (2023),
    Table 4.4 (Matlab), and the ratio of the pairwise fit to ``GMLVQ fit x K / 10``."""
    header = ["phase"]
    for ds in spec["datasets"].values():
        header += [f"{ds['paper_name']}: ours", f"{ds['paper_name']}: Brinkrolf (2023)"]
    rows = []
    for label, key, paper_key in TIME_ROWS:
        row = [label]
        for name in spec["datasets"]:
            seconds = ((payloads.get(name) or {}).get("timing") or {}).get("seconds", {})
            ours = seconds.get(key)
            paper = spec["times"][name][paper_key[0]].get(paper_key[1]) if paper_key else None
            row += [DASH if ours is None else f"{ours[0]:.4f}", DASH if paper is None else f"{paper:.4f}"]
        rows.append(row)
    out = ["Table 4.4: mean seconds per fold (ours: one torch thread; Brinkrolf 2023: Matlab).", ""]
    out += _table(header, rows)
    ratios = []
    for name, ds in spec["datasets"].items():
        timing = (payloads.get(name) or {}).get("timing")
        if timing:
            mean, median, worst = timing["pairwise_over_gmlvq_times_pairs_over_10"]
            verdict = "meets" if mean <= timing.get("target_ratio_at_most", 1.0) else "misses"
            ratios.append(
                f"{ds['paper_name']} {mean:.3f} (median {median:.3f}, max {worst:.3f}; K = {timing['n_pairs']}, "
                f"{verdict} the target <= 1 on the mean)"
            )
    if ratios:
        out += ["Pairwise fit / (GMLVQ fit x K / 10) per fold: " + "; ".join(ratios) + ".", ""]
    return out


def _load(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8").strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default=str(HERE / "results" / "time_integration.json"))
    p.add_argument("--confidence", action="store_true", help="print Tables 4.2-4.4 of the stored confidence runs")
    args = p.parse_args(argv)
    if args.confidence:
        spec = json.loads((HERE / "targets.json").read_text(encoding="utf-8"))["table_4_2_4_3"]
        payloads = {name: _load(HERE / "results" / ds["result"]) for name, ds in spec["datasets"].items()}
        print("\n".join(table_4_2_4_3(payloads, spec) + table_4_4(payloads, spec)))
        return 0
    payload = json.loads(Path(args.json).read_text(encoding="utf-8").strip().splitlines()[-1])
    spec = json.loads((HERE / "targets.json").read_text(encoding="utf-8"))["table_4_5"]
    print("\n".join(table_4_5(payload, spec)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
