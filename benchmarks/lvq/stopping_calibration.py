"""How the relative-cost stopping rule's ``tol`` and window were chosen (issue 28), on
validation data only.

For optdigits (64 features), Image Segmentation, Letter and MNIST (a stratified subsample
of 10000 images, PCA 30), the training rows of the first of 3 stratified folds are split
80/20 (stratified) into a fitting and a validation part; the test fold is not read. On the
fitting part GLVQ, GMLVQ and LGMLVQ (float32, one prototype per class) run L-BFGS for
``max_iter`` iterations under the old rule (``stopping="lbfgs"``, tol 1e-9) with a callback
that records the cost, the validation accuracy and the fit's own time (scoring excluded)
after every iteration. For every (``tol``, window) of the grid, :func:`settled` (the
rule the estimators use) picks the iteration where the rule would have stopped; the table
gives the worst validation-accuracy loss at that iteration against the last one over the
12 (data set, model) pairs, and the share of the fits' time spent up to it. The
estimators' default (``tol=1e-3``, window 10) is the row marked ``default``.

Usage::

    python -m benchmarks.lvq.stopping_calibration --data-dir ../shared/data
    python -m benchmarks.lvq.stopping_calibration --data-dir ../shared/data --quick

Ends with one JSON line ``{"benchmark": "stopping_calibration", "results": {"tol=T,window=W":
{"worst_loss": .., "time_fraction": .., "stops": {PAIR: n_iter}}}, "default": ..}`` (also
``benchmarks/lvq/results/stopping_calibration.json``, ``_quick`` with ``--quick``, ``--out``).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.decomposition import PCA
from sklearn.model_selection import StratifiedKFold, train_test_split
from sklearn.preprocessing import StandardScaler

from benchmarks.common import emit_json, load_benchmark_sets, resolve_data_dir, run_metadata
from dp_proto.lvq import GLVQ, GMLVQ, LGMLVQ
from dp_proto.lvq.training import DEFAULT_TOL, settled

BENCHMARK = "stopping_calibration"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
DATASETS = ("optdigits", "segmentation", "letter", "mnist")
MODELS = {"GLVQ": GLVQ, "GMLVQ": GMLVQ, "LGMLVQ": LGMLVQ}
TOLS = (3e-3, 1e-3, 3e-4, 1e-4)
WINDOWS = (5, 10, 20)
DEFAULT = (DEFAULT_TOL["relative_cost"], 10)
MNIST_ROWS = 10_000
QUICK_ROWS = 1500


def fitting_and_validation(X: np.ndarray, y: np.ndarray, seed: int) -> tuple[np.ndarray, ...]:
    """The 80/20 split of the first training fold, z-scored (PCA 30 above 64 features)."""
    train, _ = next(StratifiedKFold(3, shuffle=True, random_state=seed).split(X, y))
    a, b, ya, yb = train_test_split(X[train], y[train], test_size=0.2, stratify=y[train], random_state=seed)
    scaler = StandardScaler().fit(a)
    a, b = scaler.transform(a), scaler.transform(b)
    if a.shape[1] > 64:
        pca = PCA(30, random_state=seed).fit(a)
        a, b = pca.transform(a), pca.transform(b)
    return a, b, ya, yb


def trace(model: str, a, b, ya, yb, *, max_iter: int) -> dict[str, list[float]]:
    """Cost (start included), validation accuracy and fit seconds after every iteration."""
    est = MODELS[model](random_state=0, stopping="lbfgs", max_iter=max_iter)
    costs, accs, times = [], [], []
    paused, start = 0.0, time.perf_counter()

    def record(n_iter: int, cost: float) -> None:
        nonlocal paused
        now = time.perf_counter()
        costs.append(cost)
        accs.append(float(est.score(b, yb)))
        times.append(now - start - paused)
        paused += time.perf_counter() - now

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(a, ya, callback=record)
    return {"costs": [est.loss_curve_[0], *costs], "accs": accs, "times": times}


def stop_index(costs: list[float], tol: float, window: int) -> int:
    """The iteration (1-based) where the rule stops, or the last one."""
    for k in range(1, len(costs)):
        if settled(costs[: k + 1], tol=tol, window=window):
            return k
    return len(costs) - 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Calibration of the relative-cost stopping rule on validation splits.")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    p.add_argument("--max-iter", type=int, default=500)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help=f"{QUICK_ROWS} rows per set, max_iter 100")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    data = load_benchmark_sets(args.datasets, resolve_data_dir(args.data_dir))
    max_iter = 100 if args.quick else args.max_iter
    traces: dict[str, dict[str, list[float]]] = {}
    for name in args.datasets:
        X, y = data[name]
        rows = QUICK_ROWS if args.quick else (MNIST_ROWS if name == "mnist" else None)
        if rows is not None and rows < len(y):
            X, _, y, _ = train_test_split(X, y, train_size=rows, stratify=y, random_state=args.seed)
        a, b, ya, yb = fitting_and_validation(X, y, args.seed)
        for model in MODELS:
            traces[f"{name}/{model}"] = trace(model, a, b, ya, yb, max_iter=max_iter)
            print(f"{name}/{model}: {len(traces[f'{name}/{model}']['accs'])} iterations", file=sys.stderr, flush=True)
    total = sum(t["times"][-1] for t in traces.values())
    results: dict[str, dict] = {}
    print(f"{'tol':>7} {'window':>6} {'worst validation loss':>22} {'time share':>10}")
    for tol in TOLS:
        for window in WINDOWS:
            stops = {pair: stop_index(t["costs"], tol, window) for pair, t in traces.items()}
            losses = {pair: t["accs"][-1] - t["accs"][stops[pair] - 1] for pair, t in traces.items()}
            share = sum(t["times"][stops[pair] - 1] for pair, t in traces.items()) / total
            key = f"tol={tol:g},window={window}"
            results[key] = {
                "worst_loss": round(max(losses.values()), 4),
                "time_fraction": round(share, 3),
                "stops": stops,
                "losses": {k: round(v, 4) for k, v in losses.items()},
            }
            mark = "  default" if (tol, window) == DEFAULT else ""
            print(f"{tol:>7g} {window:>6} {max(losses.values()):>22.4f} {share:>10.2f}{mark}")
    payload = {
        "benchmark": BENCHMARK,
        "results": results,
        "default": f"tol={DEFAULT[0]:g},window={DEFAULT[1]}",
        "final_accuracy": {pair: round(t["accs"][-1], 4) for pair, t in traces.items()},
        "iterations": {pair: len(t["accs"]) for pair, t in traces.items()},
        "max_iter": max_iter,
        "quick": args.quick,
        "notes": [
            "validation accuracy only (an 80/20 split of the first of 3 training folds); worst_loss: the largest "
            "drop of the validation accuracy at the rule's stop against the last iteration over the "
            "(data set, model) pairs (negative: the stop was better); time_fraction: the fits' time up to "
            "the stops over their time to the end"
        ],
        **run_metadata(started),
    }
    out = args.out or str(RESULTS_DIR / (f"{BENCHMARK}_quick.json" if args.quick else f"{BENCHMARK}.json"))
    emit_json(payload, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
