"""How the stopping rule's ``tol`` and window were chosen, on validation data
only.

For optdigits (64 features), Image Segmentation, Letter and MNIST (a stratified subsample
of 10000 images, PCA 30), and for every seed, the training rows of the first of 3
stratified folds (shuffled by the seed) are split 80/20 (stratified) into a fitting and
a validation part; the test fold is not read. On the fitting part GLVQ, GMLVQ and LGMLVQ
(float32, one prototype per class) run L-BFGS for ``max_iter`` iterations under the old
rule (``stopping="lbfgs"``, tol 1e-9) with a callback that records, after every
iteration, the cost, the training and validation accuracies and the fit's own time
(scoring excluded). Each candidate rule then picks the iteration where it would have
stopped:

* ``relative_cost``: :func:`dp_proto.lvq.training.settled` (the estimators' rule);
* ``relative_cost+train_accuracy``: the same, and no new best training accuracy within
  the window.

Per candidate the run reports the validation-accuracy loss at the stop against the last
iteration (per (data set, model) pair, averaged over the seeds; and the worst single fit)
and the share of the fits' time spent up to the stops.

**Selection rule.** The issue asks that fitting faster keeps the accuracy of the old
rule for every model. The selected candidate is therefore the fastest (smallest time
share) whose seed-averaged validation loss is at most ``MAX_PAIR_LOSS`` (0.0005) for
every (data set, model) pair; this bound was fixed before the first five-seed run. That
run found no candidate within it, the slowest ones included (0.0007 at 85 % of the time:
the bound lies below the noise of five validation splits), so where none meets it the
rule falls back to the candidate with the smallest worst pair loss, the faster one on a
tie (added after that run). The estimators' default is the candidate marked
``default``; the run says whether it is the selected one.

Usage::

    python -m benchmarks.lvq.stopping_calibration --data-dir ../shared/data
    python -m benchmarks.lvq.stopping_calibration --data-dir ../shared/data --quick

Ends with one JSON line ``{"benchmark": "stopping_calibration", "results": {"rule=R,tol=T,
window=W": {"worst_pair_loss": .., "worst_loss": .., "mean_loss": .., "time_fraction": ..,
"meets": .., "pair_losses": {PAIR: ..}, "pair_stops": {PAIR: ..}}}, "selected": .., "default": ..}`` (also
``benchmarks/lvq/results/stopping_calibration.json``, ``_quick`` with ``--quick``, ``--out``).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from sklearn.model_selection import StratifiedKFold, train_test_split
from tqdm.auto import tqdm

from benchmarks.common import emit_json, load_benchmark_sets, resolve_data_dir, run_metadata
from benchmarks.lvq.fit_speed import DATASETS, MODELS, prepare_fold, subsample
from dp_proto.lvq.training import DEFAULT_N_ITER_NO_CHANGE, DEFAULT_TOL, settled

BENCHMARK = "stopping_calibration"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
TOLS = (3e-3, 1e-3, 5e-4, 3e-4, 1e-4, 3e-5)
WINDOWS = (5, 10, 20)
SEEDS = (0, 1, 2, 3, 4)
#: The selection rule's bound on every pair's seed-averaged validation loss.
MAX_PAIR_LOSS = 5e-4
DEFAULT = ("relative_cost", DEFAULT_TOL["relative_cost"], DEFAULT_N_ITER_NO_CHANGE)
MNIST_ROWS = 10_000
QUICK_ROWS = 1500

Trace = dict[str, list[float]]


def fitting_and_validation(name: str, X: np.ndarray, y: np.ndarray, seed: int) -> tuple[np.ndarray, ...]:
    """The 80/20 split of the first training fold, z-scored (and PCA 30 for MNIST) as
    ``fit_speed`` prepares its folds."""
    train, _ = next(StratifiedKFold(3, shuffle=True, random_state=seed).split(X, y))
    fitting, validation = train_test_split(train, test_size=0.2, stratify=y[train], random_state=seed)
    fold = prepare_fold(name, X, y, fitting, validation, seed)
    return fold["X_train"], fold["X_test"], fold["y_train"], fold["y_test"]


def trace(model: str, a, b, ya, yb, *, max_iter: int, seed: int) -> Trace:
    """Cost (start included), training and validation accuracy and fit seconds after
    every iteration."""
    est = MODELS[model](random_state=seed, stopping="lbfgs", max_iter=max_iter)
    costs, train_accs, accs, times = [], [], [], []
    paused, start = 0.0, time.perf_counter()

    def record(n_iter: int, cost: float) -> None:
        nonlocal paused
        now = time.perf_counter()
        costs.append(cost)
        train_accs.append(float(est.score(a, ya)))
        accs.append(float(est.score(b, yb)))
        times.append(now - start - paused)
        paused += time.perf_counter() - now

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(a, ya, callback=record)
    return {"costs": [est.loss_curve_[0], *costs], "train_accs": train_accs, "accs": accs, "times": times}


def accuracy_settled(train_accs: list[float], window: int) -> bool:
    """No new best training accuracy within the last ``window`` iterations
    (``train_accs``: after iterations 1..k)."""
    k = len(train_accs)
    return k > window and max(train_accs[k - window :]) <= max(train_accs[: k - window])


def stop_index(costs: list[float], tol: float, window: int, train_accs: list[float] | None = None) -> int:
    """The iteration (1-based) where the relative-cost rule (and, given ``train_accs``,
    the training-accuracy condition) stops, or the last one."""
    for k in range(1, len(costs)):
        if settled(costs[: k + 1], tol=tol, window=window) and (
            train_accs is None or accuracy_settled(train_accs[:k], window)
        ):
            return k
    return len(costs) - 1


RULES: dict[str, Callable[[Trace, float, int], int]] = {
    "relative_cost": lambda t, tol, window: stop_index(t["costs"], tol, window),
    "relative_cost+train_accuracy": lambda t, tol, window: stop_index(t["costs"], tol, window, t["train_accs"]),
}


def candidate_key(rule: str, tol: float, window: int) -> str:
    return f"rule={rule},tol={tol:g},window={window}"


def evaluate(traces: dict[tuple[int, str], Trace], rule: str, tol: float, window: int) -> dict:
    """Validation losses and time share of one candidate over all (seed, pair) traces."""
    stops = {key: RULES[rule](t, tol, window) for key, t in traces.items()}
    losses = {key: t["accs"][-1] - t["accs"][stops[key] - 1] for key, t in traces.items()}
    pairs = sorted({pair for _, pair in traces})
    pair_losses = {pair: float(np.mean([v for (_, p), v in losses.items() if p == pair])) for pair in pairs}
    share = sum(t["times"][stops[key] - 1] for key, t in traces.items()) / sum(t["times"][-1] for t in traces.values())
    worst_pair = max(pair_losses.values())
    return {
        "worst_pair_loss": round(worst_pair, 5),
        "worst_loss": round(max(losses.values()), 4),
        "mean_loss": round(float(np.mean(list(losses.values()))), 5),
        "time_fraction": round(share, 3),
        "meets": bool(worst_pair <= MAX_PAIR_LOSS),
        "pair_losses": {pair: round(v, 5) for pair, v in pair_losses.items()},
        "pair_stops": {pair: float(np.mean([n for (_, p), n in stops.items() if p == pair])) for pair in pairs},
    }


def select(results: dict[str, dict]) -> str:
    """The fastest candidate within ``MAX_PAIR_LOSS``; where none is, the one with the
    smallest worst pair loss (the faster one on a tie)."""
    meeting = [key for key, cell in results.items() if cell["meets"]]
    if meeting:
        return min(meeting, key=lambda key: results[key]["time_fraction"])
    return min(results, key=lambda key: (results[key]["worst_pair_loss"], results[key]["time_fraction"]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Calibration of the relative-cost stopping rule on validation splits.")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    p.add_argument("--max-iter", type=int, default=500)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    p.add_argument("--quick", action="store_true", help=f"{QUICK_ROWS} rows per set, max_iter 100, the first seed")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    data = load_benchmark_sets(args.datasets, resolve_data_dir(args.data_dir))
    max_iter = 100 if args.quick else args.max_iter
    seeds = args.seeds[:1] if args.quick else args.seeds
    traces: dict[tuple[int, str], Trace] = {}
    bar = tqdm(total=len(seeds) * len(args.datasets) * len(MODELS), desc="fits", unit="fit", file=sys.stderr)
    for seed in seeds:
        for name in args.datasets:
            X, y = data[name]
            rows = QUICK_ROWS if args.quick else (MNIST_ROWS if name == "mnist" else None)
            if rows is not None:
                X, y = subsample(X, y, rows, seed)
            a, b, ya, yb = fitting_and_validation(name, X, y, seed)
            for model in MODELS:
                traces[seed, f"{name}/{model}"] = trace(model, a, b, ya, yb, max_iter=max_iter, seed=seed)
                bar.set_postfix_str(f"seed {seed} {name}/{model}", refresh=False)
                bar.update()
    bar.close()
    results = {
        candidate_key(rule, tol, window): evaluate(traces, rule, tol, window)
        for rule in RULES
        for tol in TOLS
        for window in WINDOWS
    }
    selected, default = select(results), candidate_key(*DEFAULT)
    print(f"{'rule':>28} {'tol':>7} {'window':>6} {'worst pair loss':>15} {'worst loss':>10} {'time share':>10}")
    for key, cell in results.items():
        rule, tol, window = (part.split("=")[1] for part in key.split(","))
        marks = ("  selected" if key == selected else "") + ("  default" if key == default else "")
        print(
            f"{rule:>28} {tol:>7} {window:>6} {cell['worst_pair_loss']:>15.4f} {cell['worst_loss']:>10.4f} "
            f"{cell['time_fraction']:>10.2f}{marks}"
        )
    pairs = sorted({pair for _, pair in traces})
    payload = {
        "benchmark": BENCHMARK,
        "results": results,
        "selected": selected,
        "default": default,
        "default_is_selected": selected == default,
        "max_pair_loss": MAX_PAIR_LOSS,
        "seeds": seeds,
        "final_accuracy": {
            pair: round(float(np.mean([traces[s, pair]["accs"][-1] for s in seeds])), 4) for pair in pairs
        },
        "iterations": {pair: round(float(np.mean([len(traces[s, pair]["accs"]) for s in seeds])), 1) for pair in pairs},
        "max_iter": max_iter,
        "quick": args.quick,
        "notes": [
            "validation accuracy only (an 80/20 split of the first of 3 training folds per seed); losses: the "
            "validation accuracy at the last iteration minus the one at the rule's stop (negative: the stop was "
            "better); worst_pair_loss: the largest seed-averaged loss over the (data set, model) pairs; "
            "time_fraction: the fits' time up to the stops over their time to the end",
            f"selection rule: the fastest candidate whose worst_pair_loss is at most {MAX_PAIR_LOSS:g} (fixed "
            "before the first five-seed run); where none is, the smallest worst_pair_loss, the faster on a tie "
            "(added after that run found none within the bound)",
        ],
        **run_metadata(started),
    }
    out = args.out or str(RESULTS_DIR / (f"{BENCHMARK}_quick.json" if args.quick else f"{BENCHMARK}.json"))
    emit_json(payload, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
