"""Black-box audits of the DP estimators' DP-SGD runs: the final model only, from a worst-case start.

For DP-GLVQ, DP-GMLVQ and DP-LGMLVQ under the fused engine and Opacus (``hooks``),
``dp_proto.lvq.private.trainer_audit.black_box_audit`` runs the estimator's own DP-SGD
recipe ``--fits`` times on ``D0 = {}`` and on ``D1 = {canary}`` from the worst-case state
of the white-box audit (a canary whose gradient exceeds ``C`` there, step size 1e-6),
keeps only each run's final prototypes, projects them on the direction the canary pushes
them, and bounds epsilon from below with the best threshold test (chosen on half the
fits, certified on the other half, 95 % confidence): assumption-free (Clopper-Pearson)
and under a Gaussian trade-off curve (Nasr et al. 2023). The estimators run with the
full batch (``sampling_rate=1``, 10 epochs: 10 steps), the setting in which the final
model carries what every step released; with Poisson subsampling a black-box audit
cannot see which steps the canary joined. Claim: what the ledger certifies for the
run's DP-SGD steps at the estimator's epsilon 8 (and, for DP-GMLVQ under the fused
engine, 1, 2 and 4). The broken twins (noise halved, clipping skipped) run DP-GMLVQ at
epsilon 1 under each engine and must exceed the claim. (The third white-box twin, the
canary in every batch, is the honest run at ``q = 1``.)

Usage::

    python -m benchmarks.privacy.black_box_audit --jobs 2 --out benchmarks/privacy/results/black_box_audit.json \
        --figure benchmarks/privacy/figures/black_box_audit.png
    python -m benchmarks.privacy.black_box_audit --quick      # 100 fits per data set: same keys, about 20 s
    python -m benchmarks.privacy.black_box_audit --plot benchmarks/privacy/results/black_box_audit.json \
        --figure benchmarks/privacy/figures/black_box_audit.png   # the figure from a stored run

Ends with one JSON line (``headline``: ``honest_rows``, ``honest_below_claim``,
``honest_below_claim_gdp``, ``min_ratio``, ``min_ratio_gdp``, ``eps8_min_ratio``,
``eps8_min_ratio_gdp``, ``twins``, ``twins_flagged``, ``twins_flagged_gdp``).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.common import emit_json, machine_description, run_tasks
from benchmarks.privacy.trainer_audit import _plain

BENCHMARK = "black_box_audit"
ESTIMATORS = ("DPGLVQ", "DPGMLVQ", "DPLGMLVQ")
ENGINES = ("fused", "opacus")
#: (estimator, engine, epsilon) of the honest rows: every pair at epsilon 8, and the trend
#: over epsilon for one of them.
HONEST = [(name, engine, 8.0) for name in ESTIMATORS for engine in ENGINES] + [
    ("DPGMLVQ", "fused", eps) for eps in (1.0, 2.0, 4.0)
]
TWINS = ("noise_halved", "clipping_skipped")
TWIN_ESTIMATOR, TWIN_EPSILON = "DPGMLVQ", 1.0
SAMPLING_RATE, EPOCHS = 1.0, 10


def audit_row(task: tuple[str, str, float, str | None, int], seed: int, threads: int) -> dict[str, Any]:
    """One audit: the row of the results table."""
    import torch

    from dp_proto.lvq.private import DPGLVQ, DPGMLVQ, DPLGMLVQ
    from dp_proto.lvq.private.trainer_audit import black_box_audit

    torch.set_num_threads(threads)
    logging.getLogger("dp_proto").setLevel(logging.ERROR)  # the session notice of repeated fits
    name, engine, eps, twin, fits = task
    cls = {"DPGLVQ": DPGLVQ, "DPGMLVQ": DPGMLVQ, "DPLGMLVQ": DPLGMLVQ}[name]
    estimator = cls(
        epsilon=eps, bounds=(-1, 1), classes=[0, 1], engine=engine, sampling_rate=SAMPLING_RATE, epochs=EPOCHS
    )
    start = time.perf_counter()
    audit = black_box_audit(estimator, fits=fits, twin=twin, seed=seed)
    row: dict[str, Any] = {"estimator": name, "engine": engine, "epsilon": eps, "twin": twin}
    row |= {k: _plain(v) for k, v in audit.summary().items()}
    row["ratio"] = round(audit.epsilon_lower_bound / audit.claimed_epsilon, 4)
    row["ratio_gdp"] = round(audit.epsilon_lower_bound_gdp / audit.claimed_epsilon, 4)
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def headline(rows: list[dict[str, Any]]) -> dict[str, Any]:
    honest = [r for r in rows if r["twin"] is None]
    twins = [r for r in rows if r["twin"] is not None]
    at8 = [r for r in honest if r["epsilon"] == 8.0]
    return {
        "honest_rows": len(honest),
        "honest_below_claim": sum(not r["violation"] for r in honest),
        "honest_below_claim_gdp": sum(not r["violation_gdp"] for r in honest),
        "min_ratio": min(r["ratio"] for r in honest),
        "min_ratio_gdp": min(r["ratio_gdp"] for r in honest),
        "eps8_min_ratio": min(r["ratio"] for r in at8),
        "eps8_min_ratio_gdp": min(r["ratio_gdp"] for r in at8),
        "twins": len(twins),
        "twins_flagged": sum(r["violation"] for r in twins),
        "twins_flagged_gdp": sum(r["violation_gdp"] for r in twins),
    }


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Both lower bounds over the claim for every row (honest runs, then broken twins);
    bars above the plot's top are cut and labelled with their ratio."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    top = 2.0
    labels = [
        f"{r['estimator']} {r['engine']} eps {r['epsilon']:g}"
        + (f" {r['twin'].replace('_', ' ')}" if r["twin"] else "")
        for r in rows
    ]
    fig, ax = plt.subplots(figsize=(max(8.0, 0.75 * len(rows)), 4.8))
    for offset, key, label in ((-0.2, "ratio", "assumption-free"), (0.2, "ratio_gdp", "Gaussian trade-off")):
        ratios = [r[key] for r in rows]
        bars = ax.bar([i + offset for i in range(len(rows))], [min(v, top) for v in ratios], 0.4, label=label)
        for bar, value in zip(bars, ratios, strict=True):
            if value > top:
                ax.text(bar.get_x() + bar.get_width() / 2, top, f"{value:.0f}", ha="center", va="bottom", fontsize=7)
    ax.axhline(1.0, color="black", lw=1, label="claim")
    ax.axhline(0.5, color="grey", lw=0.8, ls="--", label="target at epsilon 8 (0.5)")
    ax.set_ylim(0, top * 1.08)
    ax.set_xticks(range(len(rows)), labels, rotation=35, ha="right", fontsize=7)
    ax.set_ylabel("lower bound / claimed epsilon")
    ax.set_title("Black-box DP-SGD audits from a worst-case start (final model only, 95 %, delta 1e-5)")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fits", type=int, default=20_000, help="runs per data set of each honest audit (default 20000)")
    p.add_argument("--twin-fits", type=int, default=2_000, help="runs per data set of each broken twin (default 2000)")
    p.add_argument("--quick", action="store_true", help="100 fits per data set: the same rows and keys")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="also write the JSON summary to this file")
    p.add_argument("--figure", type=Path, default=None, help="plot the bounds against the claims into this file")
    p.add_argument("--plot", type=Path, default=None, help="only plot a stored run's JSON (with --figure)")
    args = p.parse_args(argv)
    if args.plot is not None:
        if args.figure is None:
            p.error("--plot needs --figure")
        plot(json.loads(args.plot.read_text())["rows"], args.figure)
        return 0
    if args.quick:
        args.fits = args.twin_fits = 100
    tasks = [(name, engine, eps, None, args.fits) for name, engine, eps in HONEST]
    tasks += [(TWIN_ESTIMATOR, engine, TWIN_EPSILON, twin, args.twin_fits) for engine in ENGINES for twin in TWINS]
    start = time.perf_counter()
    rows = run_tasks(
        tasks,
        partial(audit_row, seed=args.seed, threads=args.threads),
        jobs=args.jobs,
        desc=BENCHMARK,
        postfix=lambda task, row: f"{task[0]} {task[1]} eps {task[2]:g}: {row['ratio_gdp']:.2f}",
    )
    elapsed = time.perf_counter() - start
    head = headline(rows)
    print(f"\nBlack-box DP-SGD audits (q {SAMPLING_RATE:g}, {EPOCHS} epochs), 95 % lower bounds")
    print(f"{'estimator':<9} {'engine':<7} {'eps':>4} {'twin':<17} {'fits':>6} {'claim':>7} {'CP':>8} {'GDP':>8}")
    for r in rows:
        print(
            f"{r['estimator']:<9} {r['engine']:<7} {r['epsilon']:>4g} {r['twin'] or '-':<17} {r['fits']:>6} "
            f"{r['claimed_epsilon']:>7.3f} {r['epsilon_lower_bound']:>8.3f} {r['epsilon_lower_bound_gdp']:>8.3f}"
        )
    print(f"\n{elapsed:.1f} s on {machine_description()}\n")
    if args.figure is not None:
        plot(rows, args.figure)
    emit_json(
        {
            "benchmark": BENCHMARK,
            "headline": head,
            "rows": rows,
            "fits": args.fits,
            "twin_fits": args.twin_fits,
            "sampling_rate": SAMPLING_RATE,
            "epochs": EPOCHS,
            "quick": args.quick,
            "seed": args.seed,
            "elapsed_s": round(elapsed, 1),
            "machine": machine_description(),
        },
        args.out,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
