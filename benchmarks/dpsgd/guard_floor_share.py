"""How often the cancellation guard sets a record's clipping norm, and what that costs.

Every DP-SGD engine clips a record by ``max(||g_i||, kappa m_i)``, ``m_i`` the size of
the terms through which the record enters the arithmetic
(``dp_proto.lvq.private.grad_samplers.CANCELLATION_GUARD`` is ``kappa``;
docs/privacy-model.md). The floor ``kappa m_i`` makes the computed clipped sum's slack
``s <= 2 gamma_N (B + 1) / kappa``, so a smaller ``kappa`` trades a larger proved slack
for fewer records clipped harder than their gradients need. This study fits DP-GMLVQ at
the estimator's defaults with ``kappa`` patched to each value of ``--kappas`` (0: no
guard, the unguarded ceiling, which is not private in every state) and reports, per set
and ``kappa``:

* ``floor_share``: the fraction of the per-sample clipping norms (prototypes and metric
  counted separately, over every step of the fit) at which the floor exceeded the norm;
* the development accuracy (the peers' first training fold, split 75/25: the peers'
  test folds are never touched), mean over ``--seeds`` noise seeds;
* the proved slack bound at ``B = 1000``, ``d = r = 784`` for each ``kappa``.

Usage::

    python -m benchmarks.dpsgd.guard_floor_share --data-dir ../shared/data --jobs 2   # ~4 min
    python -m benchmarks.dpsgd.guard_floor_share --data-dir ../shared/data --quick    # ~1 min

Ends with one JSON line ``{"benchmark": "dpsgd_guard_floor_share", "headline": {...}}``;
the headline compares the library's ``kappa`` with ``1e-2`` (the guard before) and 0.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import emit_json, machine_description, resolve_data_dir, run_tasks
from benchmarks.dpsgd.defaults_study import dev_split, run_variant
from benchmarks.dpsgd.peers import load_sets

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK = "dpsgd_guard_floor_share"
SETS = ("motion", "optdigits", "segmentation")
QUICK_SETS = ("optdigits",)
KAPPAS = (1e-2, 1e-3, 0.0)
UNIT_ROUNDOFF = 2.0**-53


def proved_slack(kappa: float, batch: int = 1000, d: int = 784, r: int = 784) -> float | None:
    """``2 gamma_N (B + 1) / kappa``, ``N = B + d + r + 8``, float64 (None for ``kappa = 0``)."""
    if kappa <= 0:
        return None
    n = batch + d + r + 8
    gamma = n * UNIT_ROUNDOFF / (1 - n * UNIT_ROUNDOFF)
    return 2 * gamma * (batch + 1) / kappa


def run_fit(task: dict[str, Any]) -> dict[str, Any]:
    """One DP-GMLVQ fit at its defaults with ``kappa`` patched (``defaults_study.run_variant``):
    development accuracy, fit seconds and the share of clipping norms the floor set."""
    from dp_proto.lvq.private import grad_samplers

    counts = [0, 0]
    guarded, kappa = grad_samplers._guarded, grad_samplers.CANCELLATION_GUARD

    def counting(norm, magnitude):
        out = guarded(norm, magnitude)
        counts[0] += int((out > norm).sum())
        counts[1] += norm.numel()
        return out

    grad_samplers._guarded, grad_samplers.CANCELLATION_GUARD = counting, task["kappa"]
    try:
        row = run_variant(task | {"model": "DP-GMLVQ", "variant": "defaults"})
    finally:
        grad_samplers._guarded, grad_samplers.CANCELLATION_GUARD = guarded, kappa
    keys = ("set", "kappa", "epsilon", "seed")
    return {k: task[k] for k in keys} | {
        "acc": row["acc"],
        "floor_share": counts[0] / max(counts[1], 1),
        "fit_s": row["fit_s"],
    }


def summarise(rows: list[dict[str, Any]], sets: tuple[str, ...], kappas: tuple[float, ...]) -> dict[str, Any]:
    """``{set: {kappa: {"acc", "floor_share", "fit_s"}}}``, means over seeds."""
    out: dict[str, Any] = {}
    for name in sets:
        out[name] = {}
        for kappa in kappas:
            cell = [r for r in rows if r["set"] == name and r["kappa"] == kappa]
            out[name][repr(kappa)] = {
                key: round(float(np.mean([r[key] for r in cell])), 4) for key in ("acc", "floor_share", "fit_s")
            }
    return out


def headline(summary: dict[str, Any], library_kappa: float) -> dict[str, Any]:
    """The library's ``kappa`` against ``1e-2`` and against no guard, over the sets."""
    lib, before, none = repr(library_kappa), repr(1e-2), repr(0.0)
    out: dict[str, Any] = {"library_kappa": library_kappa, "proved_slack_b1000": proved_slack(library_kappa)}
    out["floor_share_max"] = max(cells[lib]["floor_share"] for cells in summary.values())
    if all(before in cells for cells in summary.values()):
        out["floor_share_max_kappa_1e-2"] = max(cells[before]["floor_share"] for cells in summary.values())
        out["acc_gain_over_kappa_1e-2_pt_max"] = max(
            round(100 * (cells[lib]["acc"] - cells[before]["acc"]), 2) for cells in summary.values()
        )
    if all(none in cells for cells in summary.values()):
        out["acc_gap_to_unguarded_pt_max"] = max(
            round(100 * (cells[none]["acc"] - cells[lib]["acc"]), 2) for cells in summary.values()
        )
    return out


def main(argv: list[str] | None = None) -> None:
    from dp_proto.lvq.private import grad_samplers

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--quick", action="store_true", help="optdigits, one seed")
    p.add_argument("--sets", nargs="+", default=None, choices=SETS)
    p.add_argument("--kappas", nargs="+", type=float, default=list(KAPPAS))
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--seeds", type=int, default=None, help="noise seeds per cell (3; quick: 1)")
    p.add_argument("--max-n", type=int, default=20000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    started = time.time()
    sets = tuple(args.sets or (QUICK_SETS if args.quick else SETS))
    seeds = args.seeds or (1 if args.quick else 3)
    kappas = tuple(dict.fromkeys([grad_samplers.CANCELLATION_GUARD, *args.kappas]))
    suffix = "_quick" if args.quick else ""
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "dpsgd" / "results" / f"{BENCHMARK}{suffix}.json"
    data = load_sets(sets, resolve_data_dir(args.data_dir), args.max_n)
    tasks = []
    for name, d in data.items():
        Xtr, ytr, Xva, yva = dev_split(d["X"], d["y"])
        base = {"set": name, "threads": args.threads, "n_classes": int(d["y"].max()) + 1, "epsilon": args.epsilon}
        base |= {"Xtr": Xtr, "ytr": ytr, "Xva": Xva, "yva": yva}
        tasks += [base | {"kappa": kappa, "seed": seed} for kappa in kappas for seed in range(seeds)]
    rows = run_tasks(
        tasks,
        run_fit,
        jobs=args.jobs,
        desc=BENCHMARK,
        postfix=lambda t, r: f"{t['set']} kappa {t['kappa']:g}: {r['acc']:.3f}, floor {r['floor_share']:.2f}",
    )
    summary = summarise(rows, sets, kappas)
    print(f"\nDP-GMLVQ at epsilon {args.epsilon:g}, development accuracy / floor share, mean over {seeds} seed(s)")
    for name, cells in summary.items():
        text = "  ".join(f"kappa {float(k):g}: {c['acc']:.4f} / {c['floor_share']:.3f}" for k, c in cells.items())
        print(f"  {name:<13} {text}")
    head = headline(summary, grad_samplers.CANCELLATION_GUARD)
    for key, value in head.items():
        print(f"{key:34s} {value}")
    emit_json(
        {
            "benchmark": BENCHMARK,
            "headline": head,
            "results": summary,
            "proved_slack_b1000": {repr(k): proved_slack(k) for k in kappas},
            "settings": {"sets": list(sets), "kappas": list(kappas), "epsilon": args.epsilon, "seeds": seeds},
            "threads": args.threads,
            "machine": machine_description(),
            "elapsed_s": round(time.time() - started, 1),
        },
        out,
    )


if __name__ == "__main__":
    main()
