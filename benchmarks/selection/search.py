"""Private hyperparameter selection against the defaults and against grid search.

``python -m benchmarks.selection.search --data-dir ../shared/data [--quick] [--jobs 2]``

On each data set (features mapped from their public range onto ``[-1, 1]``, as
``benchmarks.dpsgd.peers`` does), for each seed, one stratified 70/30 split; the test
split is only scored. DP-GMLVQ at a total budget ``(1, 1e-5)``, three protocols:

* ``defaults``: one fit with the estimator's defaults at epsilon 1;
* ``private selection``: ``PrivateSearchCV`` over the grid at total epsilon 1 (Papernot &
  Steinke 2022), the selected run's model scored;
* ``grid search at equal epsilon``: scikit-learn's ``GridSearchCV`` (3 folds, refit), each
  fit at the epsilon that makes all of its fits compose to 1 (its selection on noise-free
  validation scores is not private at all, which only favours it);
* ``grid search, epsilon-1 fits``: the same with each fit at epsilon 1, what a user who
  forgets the composition runs; reported with its honestly composed epsilon.

The headline: each protocol's test accuracy (mean over sets and seeds; per set in
``table``), and on how many sets private selection beats the defaults and the
equal-epsilon grid search. One torch
thread per fit; the DP fits take seeded noise (``noise_seed``) so that a run repeats.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import emit_json, machine_description, resolve_data_dir, run_tasks
from benchmarks.dpsgd.peers import load_sets

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "selection" / "results" / "search.json"
FIGURE = ROOT / "benchmarks" / "selection" / "figures" / "private_selection.png"
EPSILON, DELTA = 1.0, 1e-5
SETS, QUICK_SETS = ("segmentation", "optdigits", "pendigits"), ("segmentation",)
SEEDS, QUICK_SEEDS = (0, 1), (0,)
GRID = {"lr": [0.02, 0.05, 0.2, 0.5], "metric_lr_scale": [0.1, 1.0]}
QUICK_GRID = {"lr": [0.05, 0.5]}
MEAN_RUNS, QUICK_MEAN_RUNS = 10.0, 2.0
FOLDS = 3
PROTOCOLS = ("defaults", "private selection", "grid search at equal epsilon", "grid search, epsilon-1 fits")


def _estimator(epsilon: float, classes: list[int], seed: int, quick: bool):
    from dp_proto.lvq.private import DPGMLVQ

    extra = {"epochs": 5} if quick else {}
    return DPGMLVQ(
        epsilon=epsilon, delta=DELTA, bounds=(-1.0, 1.0), classes=classes, random_state=seed, noise_seed=seed, **extra
    )


def _equal_epsilon_per_fit(base, grid: dict, n_features: int) -> tuple[float, int]:
    """The per-fit epsilon at which GridSearchCV's fits compose to ``EPSILON``, and the fit count."""
    from sklearn.model_selection import ParameterGrid

    from dp_proto.privacy import PrivacyLedger

    fits = len(ParameterGrid(grid)) * FOLDS + 1

    def total(eps: float) -> float:
        events = base.set_params(epsilon=eps).planned_privacy_events(n_features)
        return PrivacyLedger.epsilon_of(tuple(e.with_count(e.count * fits) for e in events), DELTA)

    lo, hi = 0.01 * EPSILON, EPSILON
    for _ in range(12):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if total(mid) <= EPSILON else (lo, mid)
    return lo, fits


def run_one(task: tuple[str, int], *, sets: dict, quick: bool) -> dict[str, Any]:
    """All protocols on one (set, seed)."""
    import warnings

    import torch
    from sklearn.model_selection import GridSearchCV, train_test_split

    from dp_proto.exceptions import PrivacyLeakWarning
    from dp_proto.privacy import PrivacyLedger, PrivateSearchCV

    warnings.simplefilter("ignore", PrivacyLeakWarning)  # seeded noise, on purpose
    torch.set_num_threads(1)
    name, seed = task
    X, y = sets[name]["X"], sets[name]["y"]
    classes = sorted(set(y.tolist()))
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=seed)
    grid = QUICK_GRID if quick else GRID
    out: dict[str, Any] = {"set": name, "seed": seed, "n_train": len(ytr)}
    t = time.perf_counter()
    out["defaults"] = float(_estimator(EPSILON, classes, seed, quick).fit(Xtr, ytr).score(Xte, yte))
    out["defaults_seconds"] = time.perf_counter() - t

    t = time.perf_counter()
    search = PrivateSearchCV(
        _estimator(EPSILON, classes, seed, quick),
        grid,
        epsilon=EPSILON,
        delta=DELTA,
        mean_runs=QUICK_MEAN_RUNS if quick else MEAN_RUNS,
        noise_seed=seed,
    ).fit(Xtr, ytr)
    out["private selection"] = float(search.score(Xte, yte))
    out["private_selection_epsilon"] = float(search.epsilon_)
    out["private_selection_runs"] = int(search.n_runs_)
    out["private_selection_run_epsilon"] = float(search.run_epsilon_)
    out["private_selection_params"] = search.best_params_
    out["private_selection_seconds"] = time.perf_counter() - t

    per_fit, fits = _equal_epsilon_per_fit(_estimator(EPSILON, classes, seed, quick), grid, X.shape[1])
    for protocol, eps in (("grid search at equal epsilon", per_fit), ("grid search, epsilon-1 fits", EPSILON)):
        t = time.perf_counter()
        gs = GridSearchCV(_estimator(eps, classes, seed, quick), grid, cv=FOLDS).fit(Xtr, ytr)
        out[protocol] = float(gs.score(Xte, yte))
        events = gs.best_estimator_.ledger_.events
        out[f"{protocol} epsilon"] = PrivacyLedger.epsilon_of(
            tuple(e.with_count(e.count * fits) for e in events), DELTA
        )
        out[f"{protocol} seconds"] = time.perf_counter() - t
    out["grid_search_fits"] = fits
    out["grid_search_epsilon_per_fit"] = per_fit
    return out


def summarise(rows: list[dict], sets: tuple[str, ...]) -> dict[str, Any]:
    table = {}
    for name in sets:
        mine = [r for r in rows if r["set"] == name]
        table[name] = {p: float(np.mean([r[p] for r in mine])) for p in PROTOCOLS}
        table[name]["grid search, epsilon-1 fits: composed epsilon"] = float(
            np.mean([r["grid search, epsilon-1 fits epsilon"] for r in mine])
        )
    beats_defaults = sum(table[s]["private selection"] > table[s]["defaults"] for s in sets)
    beats_grid = sum(table[s]["private selection"] > table[s]["grid search at equal epsilon"] for s in sets)

    def mean(key: str) -> float:
        return float(np.mean([table[s][key] for s in sets]))

    headline = {
        "defaults_accuracy": mean("defaults"),
        "private_selection_accuracy": mean("private selection"),
        "equal_epsilon_grid_accuracy": mean("grid search at equal epsilon"),
        "epsilon1_fits_grid_accuracy": mean("grid search, epsilon-1 fits"),
        "epsilon1_fits_grid_composed_epsilon": mean("grid search, epsilon-1 fits: composed epsilon"),
        "beats_defaults": beats_defaults,
        "beats_equal_epsilon_grid": beats_grid,
        "sets": len(sets),
    }
    return {"headline": headline, "table": table}


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(summary["table"])
    width = 0.8 / len(PROTOCOLS)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for i, protocol in enumerate(PROTOCOLS):
        values = [summary["table"][n][protocol] for n in names]
        ax.bar(np.arange(len(names)) + i * width, values, width, label=protocol)
    ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2, names)
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0, 1)
    ax.set_title("DP-GMLVQ at total (1, 1e-5) (epsilon-1 fits: composed, see table)")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--quick", action="store_true", help="one set, one seed, two candidates, short fits")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--out", default=None, help=f"JSON file (default: {RESULTS.relative_to(ROOT)} for a full run)")
    args = parser.parse_args(argv)
    data_dir = resolve_data_dir(args.data_dir)
    sets = QUICK_SETS if args.quick else SETS
    seeds = QUICK_SEEDS if args.quick else SEEDS
    print(machine_description(), file=sys.stderr)
    data = load_sets(sets, data_dir, max_n=1500 if args.quick else 6000)
    plain = {n: {"X": d["X"], "y": d["y"]} for n, d in data.items()}
    worker = functools.partial(run_one, sets=plain, quick=args.quick)
    rows = run_tasks([(n, s) for n in sets for s in seeds], worker, jobs=args.jobs, desc="selection")
    summary = summarise(rows, sets)
    for name, row in summary["table"].items():
        print(name + ": " + ", ".join(f"{k} {v:.4f}" for k, v in row.items()), file=sys.stderr)
    out = args.out or (None if args.quick else RESULTS)
    if not args.quick:
        plot(summary, FIGURE)
    emit_json({"benchmark": "private_selection", "quick": args.quick, **summary, "rows": rows}, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
