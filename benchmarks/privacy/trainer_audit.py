"""White-box audits of the DP estimators' DP-SGD runs: the measured mechanism against the claim.

For DP-GLVQ, DP-GMLVQ and DP-LGMLVQ at their defaults (epsilon 1, 2, 4 and 8, delta
1e-5, ``q = 0.01``, 50 epochs: 5000 steps, ``C = 0.5``), under the fused engine and Opacus
(``hooks``), ``dp_proto.lvq.private.trainer_audit.white_box_audit`` runs the estimator's
own DP-SGD recipe ``--runs`` times on ``D1 = {canary}``, a record whose gradient exceeds
``C`` at a worst-case state the runs hold, and measures from every step's release the
noise's standard deviation (an upper bound), the canary's sampling rate (a lower bound)
and its clipped contribution; the lower bound on epsilon is what the accountant gives
those measurements (95 % confidence, both bounds together). Claim: what the ledger
certifies for the run's DP-SGD steps (the DP initialisation's share is audited by
``benchmarks.privacy.audit``'s ``dp_init_*`` rows). The broken twins (noise halved,
clipping skipped, the canary in every batch) run DP-GMLVQ at epsilon 1 under each engine
and must exceed the claim.

Usage::

    python -m benchmarks.privacy.trainer_audit --out benchmarks/privacy/results/trainer_audit.json
    python -m benchmarks.privacy.trainer_audit --quick      # 5 epochs, 2 runs: same keys, about 30 s

Ends with one JSON line (``headline``: ``honest_rows``, ``honest_below_claim``,
``min_ratio``, ``rows_at_least_0.8``, ``twins_flagged``, ``twins``).
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time

import torch
from tqdm import tqdm

from benchmarks.common import emit_json, machine_description
from dp_proto.lvq.private import DPGLVQ, DPGMLVQ, DPLGMLVQ
from dp_proto.lvq.private.trainer_audit import BROKEN_TWINS, white_box_audit

BENCHMARK = "trainer_audit"
ESTIMATORS = {"DPGLVQ": DPGLVQ, "DPGMLVQ": DPGMLVQ, "DPLGMLVQ": DPLGMLVQ}
ENGINES = ("fused", "opacus")
EPSILONS = (1.0, 2.0, 4.0, 8.0)
TWIN_ESTIMATOR, TWIN_EPSILON = "DPGMLVQ", 1.0


def _plain(value):
    """A JSON value: floats rounded to 6 places, an undefined one (NaN) as null."""
    if isinstance(value, float):
        return round(value, 6) if math.isfinite(value) else None
    return value


def _tasks() -> list[tuple[str, str, float, str | None]]:
    honest = [(name, engine, eps, None) for name in ESTIMATORS for engine in ENGINES for eps in EPSILONS]
    twins = [(TWIN_ESTIMATOR, engine, TWIN_EPSILON, twin) for engine in ENGINES for twin in BROKEN_TWINS]
    return honest + twins


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=16, help="runs of the whole DP-SGD recipe per audit (default 16)")
    p.add_argument("--epochs", type=float, default=50, help="the estimators' epochs (default 50, their default)")
    p.add_argument("--quick", action="store_true", help="5 epochs and 2 runs: the same rows and keys")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="also write the JSON summary to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.runs, args.epochs = 2, 5
    torch.set_num_threads(args.threads)
    logging.getLogger("dp_proto").setLevel(logging.ERROR)  # the session notice of repeated fits
    start = time.perf_counter()
    rows = []
    tasks = _tasks()
    with tqdm(tasks, desc=BENCHMARK, unit="audit", file=sys.stderr, dynamic_ncols=True) as bar:
        for name, engine, eps, twin in bar:
            bar.set_postfix_str(f"{name} {engine} eps {eps:g} {twin or ''}")
            estimator = ESTIMATORS[name](epsilon=eps, bounds=(-1, 1), classes=[0, 1], engine=engine, epochs=args.epochs)
            t0 = time.perf_counter()
            audit = white_box_audit(estimator, runs=args.runs, twin=twin, seed=args.seed)
            row = {"estimator": name, "engine": engine, "epsilon": eps, "twin": twin}
            row |= {k: _plain(v) for k, v in audit.summary().items()}
            row["ratio"] = round(audit.epsilon_lower_bound / audit.claimed_epsilon, 4)
            row["seconds"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
    elapsed = time.perf_counter() - start

    honest = [r for r in rows if r["twin"] is None]
    twins = [r for r in rows if r["twin"] is not None]
    headline = {
        "honest_rows": len(honest),
        "honest_below_claim": sum(not r["violation"] for r in honest),
        "min_ratio": min(r["ratio"] for r in honest),
        "rows_at_least_0.8": sum(r["ratio"] >= 0.8 for r in honest),
        "twins": len(twins),
        "twins_flagged": sum(r["violation"] for r in twins),
    }
    print(f"\nWhite-box DP-SGD audits ({args.runs} runs, {args.epochs:g} epochs), 95 % lower bounds")
    print(f"{'estimator':<9} {'engine':<7} {'eps':>4} {'twin':<17} {'claim':>7} {'lower':>9} {'ratio':>7}  verdict")
    for r in rows:
        verdict = "VIOLATION" if r["violation"] else "ok"
        print(
            f"{r['estimator']:<9} {r['engine']:<7} {r['epsilon']:>4g} {r['twin'] or '-':<17} "
            f"{r['claimed_epsilon']:>7.3f} {r['epsilon_lower_bound']:>9.3f} {r['ratio']:>7.3f}  {verdict}"
        )
    print(f"\n{elapsed:.1f} s on {machine_description()}\n")
    emit_json(
        {
            "benchmark": BENCHMARK,
            "headline": headline,
            "rows": rows,
            "runs": args.runs,
            "epochs": args.epochs,
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
