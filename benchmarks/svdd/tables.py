"""Markdown tables of ``benchmarks/svdd/results/svdd_accuracy.json`` (the per-set tables of RESULTS.md).

``python -m benchmarks.svdd.tables [--json benchmarks/svdd/results/svdd_accuracy.json]`` prints, per
data set, the mean accuracy of every method at every epsilon, the scikit-learn SVC reference and
which cells the sound default used (``start_modes``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

LABELS = {
    "proposed": "proposed (sound)",
    "proposed_training_starts": "thesis variant (not DP)",
    "svm_weight": "SVM WEIGHT",
    "svm_output": "SVM OUTPUT (per query)",
}


def cells_sentence(modes: dict) -> str:
    """``"grid at 1, 5, non-private, normal starts elsewhere"`` from ``{eps: {mode: count}}``."""
    grid = [eps for eps, counts in modes.items() if counts.get("grid", 0) > counts.get("normal", 0)]
    if not grid:
        return "normal starts at every epsilon."
    if len(grid) == len(modes):
        return "grid at every epsilon."
    return f"grid at {', '.join(grid)}, normal starts elsewhere."


def tables(payload: dict) -> str:
    out = []
    for name, methods in payload["results"].items():
        epsilons = list(next(iter(methods.values())).keys())
        out.append(f"**{name}** (sklearn SVC, non-private: {payload['svc'][name]:.3f})\n")
        out.append("| method | " + " | ".join(epsilons) + " |")
        out.append("|---|" + "---|" * len(epsilons))
        for method, cells in methods.items():
            out.append(
                f"| {LABELS.get(method, method)} | " + " | ".join(f"{cells[e]['mean']:.3f}" for e in epsilons) + " |"
            )
        out.append(f"\nSound default's cells: {cells_sentence(payload['start_modes'][name])}\n")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default=str(Path(__file__).resolve().parent / "results" / "svdd_accuracy.json"))
    args = p.parse_args()
    print(tables(json.loads(Path(args.json).read_text())))


if __name__ == "__main__":
    main()
