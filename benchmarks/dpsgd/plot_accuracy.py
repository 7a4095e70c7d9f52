"""Plot error against epsilon from ``dpsgd_accuracy.py`` JSON files, beside Table B.1.

One panel per data set; per model the ledger and paper calibrations (mean and std over
the folds), the Table B.1 row of Brinkrolf (2023) where it has one, and the non-private
L-BFGS error as a dashed line.

Usage::

    python -m benchmarks.dpsgd.accuracy --data-dir ../shared/data --out seg.json ...
    python -m benchmarks.dpsgd.plot_accuracy seg.json mnist.json --out benchmarks/dpsgd/figures/dpsgd_accuracy.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

COLOURS = {"GLVQ": "tab:blue", "GMLVQ": "tab:red"}


def _merge_into(target: dict, new: dict) -> None:
    """Recursive update: files that cover other models or calibrations of a data set add to it."""
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge_into(target[key], value)
        else:
            target[key] = value


def load(paths: list[str]) -> dict:
    """Merge the ``results``, ``nonprivate`` and ``targets`` of several JSON files (e.g. a
    GLVQ-only and a GMLVQ-only run of the same data set; later files win on conflicts)."""
    merged: dict = {"results": {}, "nonprivate": {}, "targets": {}}
    for path in paths:
        text = Path(path).read_text().strip().splitlines()[-1]
        data = json.loads(text)
        for key in merged:
            _merge_into(merged[key], data.get(key, {}))
    return merged


def plot(merged: dict, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(merged["results"])
    fig, axes = plt.subplots(1, len(keys), figsize=(4.6 * len(keys), 3.6), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        for model, by_cal in merged["results"][key].items():
            colour = COLOURS.get(model, "black")
            for cal, style in (("ledger", "o-"), ("paper", "s:")):
                if cal not in by_cal:
                    continue
                eps = sorted(by_cal[cal], key=float)
                mean = [by_cal[cal][e][0] for e in eps]
                std = [by_cal[cal][e][1] for e in eps]
                ax.errorbar(
                    [float(e) for e in eps],
                    mean,
                    yerr=std,
                    fmt=style,
                    color=colour,
                    capsize=2,
                    ms=4,
                    label=f"{model} {cal}",
                )
            target = merged["targets"].get(key, {}).get(model)
            if target:
                eps_t = [e for e in target if e.replace(".", "", 1).isdigit()]
                ax.plot(
                    [float(e) for e in eps_t],
                    [target[e][0] for e in eps_t],
                    "x--",
                    color=colour,
                    alpha=0.6,
                    label=f"{model} Table B.1",
                )
            base = merged["nonprivate"].get(key, {}).get(model)
            if base:
                ax.axhline(base[0], color=colour, ls="--", lw=0.8, alpha=0.5)
        ax.set_xscale("log")
        ticks = sorted(
            {float(e) for by_cal in merged["results"][key].values() for per_eps in by_cal.values() for e in per_eps}
        )
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("epsilon (delta = 1e-5)")
        ax.set_ylabel("test error")
        ax.set_title(key)
        ax.set_ylim(0, None)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="+", help="output files of dpsgd_accuracy.py (--out)")
    parser.add_argument("--out", default="benchmarks/dpsgd/figures/dpsgd_accuracy.png")
    args = parser.parse_args(argv)
    plot(load(args.json), args.out)


if __name__ == "__main__":
    main()
