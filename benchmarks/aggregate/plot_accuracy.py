"""Plot error against epsilon from an ``aggregate_accuracy.py`` JSON file.

One panel per data set: subsample-and-aggregate and the centre of attention for every
domain at the largest ``m`` (the artificial panels also show the smaller ``m`` for SAA
on the ball domain, dotted), DP-SGD where it was run, and the non-private references
as horizontal lines.

Usage::

    python -m benchmarks.aggregate.accuracy --data-dir ../shared/data --out agg.json
    python -m benchmarks.aggregate.plot_accuracy agg.json --out benchmarks/aggregate/figures/aggregate_accuracy.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SCHEME_COLOURS = {"saa": "tab:blue", "coa": "tab:orange", "dp_sgd": "tab:green"}
DOMAIN_STYLES = ["o-", "s--", "^-."]


def _curve(ax, cells: dict, style: str, colour: str, label: str, alpha: float = 1.0) -> None:
    eps = sorted(cells, key=float)
    ax.errorbar(
        [float(e) for e in eps],
        [cells[e][0] for e in eps],
        yerr=[cells[e][1] for e in eps],
        fmt=style,
        color=colour,
        capsize=2,
        ms=4,
        label=label,
        alpha=alpha,
    )


def plot(data: dict, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(data["results"])
    cols = min(len(names), 3)
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        for scheme, domains in data["results"][name].items():
            colour = SCHEME_COLOURS.get(scheme, "black")
            for style, (domain, by_m) in zip(DOMAIN_STYLES, domains.items(), strict=False):
                largest = max(by_m, key=lambda m: -1 if m == "-" else int(m))
                label = scheme if scheme == "dp_sgd" else f"{scheme} {domain} m={largest}"
                _curve(ax, by_m[largest], style, colour, label)
                if scheme == "saa" and domain == "ball" and name.startswith("artificial"):
                    for m in by_m:
                        if m != largest:
                            _curve(ax, by_m[m], ":", colour, f"saa ball m={m}", alpha=0.5)
        for label, value in data.get("reference", {}).get(name, {}).items():
            if label.startswith("GLVQ") or label == f"bin mean m={max(data['settings']['bins'])}":
                ax.axhline(value, color="grey", ls="--", lw=0.8)
                ax.annotate(label, (ax.get_xlim()[0], value), fontsize=6, color="grey", va="bottom")
        ax.set_xscale("log")
        ticks = [float(e) for e in data["settings"]["epsilons"]]
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("epsilon (delta = 1e-5)")
        ax.set_ylabel("test error")
        ax.set_title(name)
        ax.set_ylim(0, 1)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    if len(names) > 3:
        axes.flat[3].legend(fontsize=6)
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", help="output file of aggregate_accuracy.py (--out)")
    parser.add_argument("--out", default="benchmarks/aggregate/figures/aggregate_accuracy.png")
    args = parser.parse_args(argv)
    text = Path(args.json).read_text().strip().splitlines()[-1]
    plot(json.loads(text), args.out)


if __name__ == "__main__":
    main()
