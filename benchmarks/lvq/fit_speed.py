"""Time to accuracy of GLVQ, GMLVQ and LGMLVQ under four L-BFGS settings.

How fast does a non-private fit reach its test accuracy, with the estimators' defaults
(the relative-cost stopping rule, float32) against the rule and dtype they had before
(torch's L-BFGS tests with ``tol=1e-9``, float64)?

Data (``--data-dir``, as :func:`benchmarks.common.load_benchmark_sets` reads it):

* optdigits (5620 x 64, all 64 features), UCI Image Segmentation (2310 x 19) and UCI
  Letter (20000 x 16, 26 classes), z-scored;
* MNIST (train + test, 70000 x 784), z-scored, then ``PCA(30)``.

Protocol: ``StratifiedKFold(3, shuffle=True, random_state=seed)``; ``StandardScaler`` (and
``PCA(30)`` for MNIST) fitted on the training fold only; one prototype per class; every
setting fits every fold from the class means (a cold start).

Solver settings (``SETTINGS``; everything else at the estimator defaults, ``max_iter=500``):

``default``           the defaults: ``stopping="relative_cost"`` (tol 1e-3 over 10 iterations), float32;
``legacy``            ``stopping="lbfgs", dtype="float64"``: dp-proto's defaults before this change;
``legacy_float32``    ``stopping="lbfgs", dtype="float32"``;
``relative_float64``  ``stopping="relative_cost", dtype="float64"``.

Timing. ``fit_s`` is the wall clock of ``est.fit`` alone (the scaler and PCA are excluded)
in a fit **without** callback; the median over the folds is reported. The curve (test
accuracy against time) comes from a second fit of the first fold with a callback that
scores the test fold after every L-BFGS iteration; its clock is paused while the callback
runs, so the curve's time axis is the fit's own time. The callback does not change the
iterates: the curve ends at the timed fit's accuracy (a note says so when it does not).
Before any timed fit every model is fitted for 2 iterations in both dtypes (untimed
warm-up: torch's first calls pay one-off costs).

Warm starts (the cross-validation use case): for the ``default`` setting one estimator with
``warm_start=True`` fits the folds in turn, fold k+1 starting from fold k's model; the
warm fits (every fold but the first) are reported beside the cold fits of the same folds.
For MNIST the PCA basis is refitted per fold (its components may flip sign), so a warm
start there begins in slightly different coordinates.

Peer: sklvq 0.1.2 (``benchmarks.lvq.peers``), GLVQ and GMLVQ with ``solver_type="lbfgs"``
(scipy's L-BFGS-B, float64, scipy's default tolerances) on optdigits and segmentation, the
first fold only, its BLAS limited to ``--threads`` threads; ratio = sklvq's fit time / our
``default`` fit time on that fold. About 80 s for sklvq's GMLVQ on optdigits. ``--no-peer``
skips it.

Threads and load. ``--threads`` (default 2) sets ``torch.set_num_threads``; the thread count
and the 1-minute load average are printed and stored at the start and the end. Run it on an
idle machine: in our measurements a concurrent multi-threaded process (another BLAS or
torch job) slowed an LGMLVQ fit from about 10 s to about 230 s.

``--quick`` (a few minutes on 2 cores): optdigits and segmentation in full, Letter and MNIST
stratified subsamples of 5000 rows, the first of the 3 folds only (the warm start fits the
second fold from the first, beside a cold fit of it), the ``default`` and ``legacy``
settings with ``max_iter`` 200 for ``legacy``, and the peer on segmentation GLVQ only; the
same headline keys (``HEADLINE_KEYS``) as the full run.

Usage::

    python -m benchmarks.lvq.fit_speed --data-dir ../shared/data
    python -m benchmarks.lvq.fit_speed --data-dir ../shared/data --quick

Prints a table (data set, model, setting, accuracy, median fit seconds, iterations, fit time
over the ``default`` setting's), writes the figure ``benchmarks/lvq/figures/fit_speed.png``
(accuracy against time, one panel per data set; ``fit_speed_quick.png`` with ``--quick``,
``--figure`` elsewhere, ``--no-plot`` none) and ends with one JSON line, also written to
``benchmarks/lvq/results/fit_speed.json`` (``fit_speed_quick.json`` with ``--quick``, or
``--out``)::

    {"benchmark": "fit_speed",
     "results": {DATASET: {MODEL: {SETTING: {"acc": [mean, std], "fit_s_median": ..,
                                              "n_iter_median": .., "curve": [[t, acc], ...], ...}}}},
     "warm_start": {DATASET: {MODEL: {"cold": {...}, "warm": {...}, "warm_over_cold": ..}}},
     "peer": {...}, "threads": .., "headline": {"optdigits_lgmlvq_fit_s": .., ...},
     "targets": {...}, "targets_met": {...}, "notes": [...], ...}

Exit code 2 if the data directory or a data file is missing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.decomposition import PCA
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import StratifiedKFold, train_test_split
from sklearn.preprocessing import StandardScaler
from tqdm import tqdm

from benchmarks.common import emit_json, load_benchmark_sets, resolve_data_dir, run_metadata
from dp_proto.lvq import GLVQ, GMLVQ, LGMLVQ

BENCHMARK = "fit_speed"
HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"
FIGURES_DIR = HERE / "figures"

DATASETS = ("optdigits", "segmentation", "letter", "mnist")
MODELS = {"GLVQ": GLVQ, "GMLVQ": GMLVQ, "LGMLVQ": LGMLVQ}

#: Solver settings: estimator keywords on top of the defaults (``{}``: the defaults).
SETTINGS: dict[str, dict[str, Any]] = {
    "default": {},
    "legacy": {"stopping": "lbfgs", "dtype": "float64"},
    "legacy_float32": {"stopping": "lbfgs", "dtype": "float32"},
    "relative_float64": {"stopping": "relative_cost", "dtype": "float64"},
}
QUICK_SETTINGS = ("default", "legacy")
QUICK_LEGACY_MAX_ITER = 200
#: ``--quick``: stratified subsamples of these sets (rows); the others stay whole.
QUICK_ROWS = {"letter": 5000, "mnist": 5000}

FOLDS = 3
PCA_DIM = 30
#: Data sets reduced by PCA after z-scoring.
PCA_SETS = ("mnist",)
CURVE_POINTS = 60

#: The sklvq peer: data sets and models (full run), and the ``--quick`` subset.
PEER_DATASETS = ("optdigits", "segmentation")
PEER_MODELS = ("GLVQ", "GMLVQ")
QUICK_PEER = (("segmentation", "GLVQ"),)

#: Headline quantities of the ``default`` setting: key -> (data set, model, "fit_s" | "acc").
HEADLINE_CELLS: dict[str, tuple[str, str, str]] = {
    "optdigits_lgmlvq_fit_s": ("optdigits", "LGMLVQ", "fit_s"),
    "optdigits_lgmlvq_acc": ("optdigits", "LGMLVQ", "acc"),
    "letter_gmlvq_fit_s": ("letter", "GMLVQ", "fit_s"),
    "letter_gmlvq_acc": ("letter", "GMLVQ", "acc"),
    "optdigits_gmlvq_fit_s": ("optdigits", "GMLVQ", "fit_s"),
    "optdigits_gmlvq_acc": ("optdigits", "GMLVQ", "acc"),
}
#: Speed-ups: key -> (data set, model, setting): that setting's median fit time / default's.
HEADLINE_RATIOS: dict[str, tuple[str, str, str]] = {
    "legacy_over_default_optdigits_lgmlvq": ("optdigits", "LGMLVQ", "legacy"),
}
#: The headline keys, the same in the full run and ``--quick`` (null where a set was not run).
HEADLINE_KEYS = (*HEADLINE_CELLS, *HEADLINE_RATIOS)

#: The fit-speed targets on the headline (``reference``: the value of that setting in the same run).
TARGETS: dict[str, dict[str, Any]] = {
    "optdigits_lgmlvq_fit_s": {"label": "optdigits LGMLVQ: median fit time per fold (s)", "op": "<=", "value": 10.0},
    "optdigits_lgmlvq_acc": {"label": "optdigits LGMLVQ: test accuracy", "op": ">=", "value": 0.975},
    "optdigits_gmlvq_fit_s": {"label": "optdigits GMLVQ: median fit time per fold (s)", "op": "<=", "value": 1.5},
    "optdigits_gmlvq_acc": {"label": "optdigits GMLVQ: test accuracy", "op": ">=", "value": 0.945},
    "letter_gmlvq_fit_s": {"label": "Letter GMLVQ: median fit time per fold (s)", "op": "<=", "value": 10.0},
    "letter_gmlvq_acc": {
        "label": "Letter GMLVQ: test accuracy, at least the legacy setting's",
        "op": ">=",
        "reference": "legacy",
    },
}


# --------------------------------------------------------------------------- helpers
def thin_curve(points: list, max_points: int = CURVE_POINTS) -> list:
    """At most ``max_points`` of ``points``, in order: the first and the last always, the
    others at geometrically spaced positions (dense early, as a log time axis shows them)."""
    n = len(points)
    if n <= max_points:
        return list(points)
    if max_points < 2:
        raise ValueError(f"max_points must be >= 2, got {max_points}")
    picks = np.unique(np.round(np.geomspace(1, n, max_points)).astype(int) - 1)
    return [points[i] for i in picks]


def ratio(numerator: float | None, denominator: float | None, digits: int = 3) -> float | None:
    """``numerator / denominator`` rounded, or None if either is missing or the denominator is not positive."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return round(float(numerator) / float(denominator), digits)


def target_met(key: str, value: float | None, reference: float | None = None) -> bool | None:
    """Whether a headline value meets ``TARGETS[key]`` (None when it or its reference is missing)."""
    spec = TARGETS[key]
    bound = reference if "reference" in spec else spec["value"]
    if value is None or bound is None:
        return None
    return bool(value <= bound) if spec["op"] == "<=" else bool(value >= bound)


def subsample(X: np.ndarray, y: np.ndarray, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A stratified subsample of ``n`` rows (all of them if there are not more)."""
    if n >= len(y):
        return X, y
    X, _, y, _ = train_test_split(X, y, train_size=n, stratify=y, random_state=seed)
    return X, y


def prepare_fold(name: str, X: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray, seed: int) -> dict:
    """z-scoring (and PCA for MNIST) fitted on the training fold; both folds transformed."""
    scaler = StandardScaler().fit(X[train])
    a, b = scaler.transform(X[train]), scaler.transform(X[test])
    if name in PCA_SETS and X.shape[1] > PCA_DIM:
        pca = PCA(n_components=PCA_DIM, random_state=seed).fit(a)
        a, b = pca.transform(a), pca.transform(b)
    return {"X_train": a, "y_train": y[train], "X_test": b, "y_test": y[test]}


def make_estimator(model: str, setting: str, *, seed: int, max_iter: int | None = None, **extra: Any):
    kwargs: dict[str, Any] = {"prototypes_per_class": 1, "random_state": seed, **SETTINGS[setting], **extra}
    if max_iter is not None:
        kwargs["max_iter"] = max_iter
    return MODELS[model](**kwargs)


class CurveRecorder:
    """A fit callback: after every L-BFGS iteration, the iteration, the cost, the test
    accuracy and the fit's elapsed seconds, the clock paused while the callback runs."""

    def __init__(self, est, X_test: np.ndarray, y_test: np.ndarray):
        self.est, self.X_test, self.y_test = est, X_test, y_test
        self.points: list[tuple[int, float, float, float]] = []
        self.start = time.perf_counter()
        self.paused = 0.0

    def restart(self) -> None:
        self.points, self.start, self.paused = [], time.perf_counter(), 0.0

    def __call__(self, n_iter: int, cost: float) -> None:
        entered = time.perf_counter()
        elapsed = entered - self.start - self.paused
        acc = float(self.est.score(self.X_test, self.y_test))
        self.points.append((int(n_iter), float(cost), acc, elapsed))
        self.paused += time.perf_counter() - entered


def timed_fit(est, fold: dict, callback: Callable | None = None) -> dict[str, Any]:
    """Fit ``est`` on the training fold; wall seconds of ``fit``, iterations, test accuracy
    and whether L-BFGS stopped at ``max_iter``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        start = time.perf_counter()
        est.fit(fold["X_train"], fold["y_train"], callback=callback)
        fit_s = time.perf_counter() - start
    return {
        "fit_s": fit_s,
        "n_iter": int(est.n_iter_),
        "acc": float(est.score(fold["X_test"], fold["y_test"])),
        "max_iter_hit": any(issubclass(w.category, ConvergenceWarning) for w in caught),
    }


def record_curve(model: str, setting: str, fold: dict, *, seed: int, max_iter: int | None) -> dict[str, Any]:
    """A second fit of ``fold`` with a :class:`CurveRecorder`; its points and final accuracy."""
    est = make_estimator(model, setting, seed=seed, max_iter=max_iter)
    recorder = CurveRecorder(est, fold["X_test"], fold["y_test"])
    recorder.restart()
    out = timed_fit(est, fold, callback=recorder)
    return {"points": recorder.points, "acc": out["acc"], "fit_s_with_callback": out["fit_s"]}


def warm_up(fold: dict, settings: list[str], seed: int) -> None:
    """Untimed 2-iteration fits of every model in every dtype on a few points per class."""
    y = fold["y_train"]
    idx = np.concatenate([np.flatnonzero(y == c)[:5] for c in np.unique(y)])
    small = {"X_train": fold["X_train"][idx], "y_train": y[idx], "X_test": fold["X_test"], "y_test": fold["y_test"]}
    seen = set()
    for setting in settings:
        dtype = SETTINGS[setting].get("dtype", "float32")
        for model in MODELS:
            if (model, dtype) not in seen:
                seen.add((model, dtype))
                timed_fit(make_estimator(model, setting, seed=seed, max_iter=2), small)


def max_iter_for(setting: str, quick: bool) -> int | None:
    return QUICK_LEGACY_MAX_ITER if quick and setting == "legacy" else None


def mean_std(values: list[float]) -> list[float]:
    return [round(float(np.mean(values)), 4), round(float(np.std(values)), 4)]


# --------------------------------------------------------------------------- the runs
def run_dataset(name: str, X: np.ndarray, y: np.ndarray, args: argparse.Namespace, notes: list[str]) -> dict:
    """Every model and setting on the folds of one data set, the warm-start chain, and the
    prepared first fold (for the peer)."""
    splits = list(StratifiedKFold(n_splits=FOLDS, shuffle=True, random_state=args.seed).split(X, y))
    run_folds = [0] if args.quick else list(range(FOLDS))
    warm_folds = [0, 1] if args.quick else run_folds
    folds = {k: prepare_fold(name, X, y, *splits[k], args.seed) for k in sorted({*run_folds, *warm_folds})}
    warm_up(folds[0], args.settings, args.seed)
    per_fold: dict[str, dict[str, list[dict]]] = {m: {s: [] for s in args.settings} for m in args.models}
    curves: dict[str, dict[str, dict]] = {m: {} for m in args.models}
    total = (len(run_folds) + 1) * len(args.models) * len(args.settings)  # timed fits and one curve each
    total += len(args.models) * (len(warm_folds) + len(set(warm_folds[1:]) - set(run_folds)))
    with tqdm(total=total, desc=name, unit="fit", file=sys.stderr, dynamic_ncols=True) as bar:
        for k in run_folds:
            for model in args.models:
                for setting in args.settings:
                    max_iter = max_iter_for(setting, args.quick)
                    out = timed_fit(make_estimator(model, setting, seed=args.seed, max_iter=max_iter), folds[k])
                    per_fold[model][setting].append(out)
                    bar.set_postfix_str(f"fold {k} {model} {setting}: acc={out['acc']:.3f} {out['fit_s']:.2f}s")
                    bar.update(1)
                    if k == run_folds[0]:
                        curves[model][setting] = record_curve(
                            model, setting, folds[k], seed=args.seed, max_iter=max_iter
                        )
                        bar.update(1)
        warm = {
            model: warm_chain(model, folds, warm_folds, run_folds, per_fold[model]["default"], args, bar)
            for model in args.models
        }
    results = {m: {s: summarize(per_fold[m][s], curves[m][s]) for s in args.settings} for m in args.models}
    for m in args.models:
        for s in args.settings:
            hits = sum(r["max_iter_hit"] for r in per_fold[m][s])
            if hits:
                notes.append(f"{name} {m} {s}: L-BFGS reached max_iter in {hits}/{len(per_fold[m][s])} folds")
            if abs(curves[m][s]["acc"] - per_fold[m][s][0]["acc"]) > 1e-12:
                notes.append(
                    f"{name} {m} {s}: the curve's fit ended at accuracy {curves[m][s]['acc']:.4f}, the timed fit "
                    f"at {per_fold[m][s][0]['acc']:.4f} (not bit-identical iterates)"
                )
    return {"results": results, "warm_start": warm, "first_fold": folds[run_folds[0]]}


def warm_chain(
    model: str,
    folds: dict[int, dict],
    warm_folds: list[int],
    run_folds: list[int],
    cold_runs: list[dict],
    args: argparse.Namespace,
    bar,
) -> dict[str, Any]:
    """One ``warm_start=True`` estimator (``default`` setting) over ``warm_folds`` in turn;
    the warm fits (all but the first) beside cold fits of the same folds."""
    est = make_estimator(model, "default", seed=args.seed, warm_start=True)
    warm, cold = [], []
    for i, k in enumerate(warm_folds):
        out = timed_fit(est, folds[k])
        bar.update(1)
        if i == 0:
            continue
        warm.append(out)
        if k in run_folds:
            cold.append(cold_runs[run_folds.index(k)])
        else:
            cold.append(timed_fit(make_estimator(model, "default", seed=args.seed), folds[k]))
            bar.update(1)

    def cell(runs: list[dict]) -> dict[str, Any]:
        return {
            "acc": mean_std([r["acc"] for r in runs]),
            "fit_s_median": round(float(np.median([r["fit_s"] for r in runs])), 4),
            "n_iter_median": float(np.median([r["n_iter"] for r in runs])),
        }

    c, w = cell(cold), cell(warm)
    return {
        "folds": warm_folds[1:],
        "cold": c,
        "warm": w,
        "warm_over_cold": ratio(w["fit_s_median"], c["fit_s_median"]),
    }


def summarize(runs: list[dict], curve: dict) -> dict[str, Any]:
    points = thin_curve(curve["points"])
    return {
        "acc": mean_std([r["acc"] for r in runs]),
        "fit_s_median": round(float(np.median([r["fit_s"] for r in runs])), 4),
        "n_iter_median": float(np.median([r["n_iter"] for r in runs])),
        "per_fold": {
            "acc": [round(r["acc"], 4) for r in runs],
            "fit_s": [round(r["fit_s"], 4) for r in runs],
            "n_iter": [r["n_iter"] for r in runs],
        },
        "curve": [[round(p[3], 4), round(p[2], 4)] for p in points],
        "curve_n_iter": [p[0] for p in points],
        "curve_cost": [round(p[1], 6) for p in points],
        "curve_fit_s_with_callback": round(curve["fit_s_with_callback"], 4),
    }


def run_peer(first_folds: dict[str, dict], ours: dict[str, dict], args: argparse.Namespace) -> dict[str, Any]:
    """sklvq's GLVQ and GMLVQ (L-BFGS-B) on the first fold, against our ``default`` there."""
    if not args.peer:
        return {"skipped": "--no-peer"}
    try:
        from benchmarks.lvq.peers import PEER_NAME, load_sklvq, sklvq_estimator

        load_sklvq()
    except ImportError as err:
        return {"skipped": f"sklvq not available: {err}"}
    from threadpoolctl import threadpool_limits

    cells = QUICK_PEER if args.quick else tuple((d, m) for d in PEER_DATASETS for m in PEER_MODELS)
    cells = tuple((d, m) for d, m in cells if d in first_folds and m in args.models)
    results: dict[str, dict[str, Any]] = {}
    for ds, model in tqdm(cells, desc="sklvq", unit="fit", file=sys.stderr, dynamic_ncols=True):
        fold = first_folds[ds]
        est = sklvq_estimator(model, solver="lbfgs", random_state=args.seed)
        with threadpool_limits(limits=args.threads), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            est.fit(fold["X_train"], fold["y_train"])
            fit_s = time.perf_counter() - start
            acc = float(np.mean(est.predict(fold["X_test"]) == fold["y_test"]))
        mine = ours[ds][model]["default"]["per_fold"]
        results.setdefault(ds, {})[model] = {
            "fit_s": round(fit_s, 4),
            "acc": round(acc, 4),
            "ours_fit_s": mine["fit_s"][0],
            "ours_acc": mine["acc"][0],
            "sklvq_over_ours": ratio(fit_s, mine["fit_s"][0]),
        }
    return {"name": PEER_NAME, "solver": "lbfgs (scipy L-BFGS-B, float64)", "fold": 0, "results": results}


def headline(results: dict[str, Any]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key, (ds, model, quantity) in HEADLINE_CELLS.items():
        cell = results.get(ds, {}).get(model, {}).get("default")
        out[key] = None if cell is None else (cell["fit_s_median"] if quantity == "fit_s" else cell["acc"][0])
    for key, (ds, model, setting) in HEADLINE_RATIOS.items():
        by_setting = results.get(ds, {}).get(model, {})
        num, den = (by_setting.get(s, {}).get("fit_s_median") for s in (setting, "default"))
        out[key] = ratio(num, den, 2)
    return out


def target_bounds(results: dict[str, Any]) -> dict[str, float | None]:
    """The bound of every target: its value, or the ``reference`` setting's accuracy in this run."""
    bounds: dict[str, float | None] = {}
    for key, spec in TARGETS.items():
        if "reference" in spec:
            ds, model, _ = HEADLINE_CELLS[key]
            ref = results.get(ds, {}).get(model, {}).get(spec["reference"])
            bounds[key] = None if ref is None else ref["acc"][0]
        else:
            bounds[key] = spec["value"]
    return bounds


def targets_met(results: dict[str, Any], head: dict[str, float | None]) -> dict[str, bool | None]:
    bounds = target_bounds(results)
    return {key: target_met(key, head[key], bounds[key]) for key in TARGETS}


# --------------------------------------------------------------------------- output
def print_table(results: dict[str, Any]) -> None:
    header = f"{'data set':<13} {'model':<7} {'setting':<17} {'acc mean (std)':>16} {'fit s med':>10} {'iters':>6} {'/ default':>10}"
    print("\n" + header)
    print("-" * len(header))
    for ds, by_model in results.items():
        for model, by_setting in by_model.items():
            base = by_setting.get("default", {}).get("fit_s_median")
            for setting, cell in by_setting.items():
                mean, std = cell["acc"]
                r = ratio(cell["fit_s_median"], base, 2)
                print(
                    f"{ds:<13} {model:<7} {setting:<17} {f'{mean:.4f} ({std:.4f})':>16} "
                    f"{cell['fit_s_median']:>10.3f} {cell['n_iter_median']:>6.0f} {'-' if r is None else f'{r:.2f}x':>10}"
                )


def print_extras(warm: dict[str, Any], peer: dict[str, Any], head: dict, met: dict) -> None:
    if warm:
        print(
            f"\n{'warm start':<13} {'model':<7} {'cold acc':>8} {'warm acc':>8} {'cold s':>8} {'warm s':>8} {'warm/cold':>9}"
        )
        for ds, by_model in warm.items():
            for model, w in by_model.items():
                r = w["warm_over_cold"]
                print(
                    f"{ds:<13} {model:<7} {w['cold']['acc'][0]:>8.4f} {w['warm']['acc'][0]:>8.4f} "
                    f"{w['cold']['fit_s_median']:>8.3f} {w['warm']['fit_s_median']:>8.3f} {'-' if r is None else f'{r:.2f}x':>9}"
                )
    if "results" in peer:
        print(
            f"\n{peer['name']:<13} {'model':<7} {'acc':>7} {'fit s':>8} {'ours acc':>8} {'ours s':>8} {'sklvq/ours':>10}"
        )
        for ds, by_model in peer["results"].items():
            for model, c in by_model.items():
                rel = "-" if c["sklvq_over_ours"] is None else f"{c['sklvq_over_ours']:.1f}x"
                print(
                    f"{ds:<13} {model:<7} {c['acc']:>7.4f} {c['fit_s']:>8.2f} {c['ours_acc']:>8.4f} "
                    f"{c['ours_fit_s']:>8.3f} {rel:>10}"
                )
    else:
        print(f"\npeer skipped: {peer.get('skipped')}")
    print("\nheadline (default setting):")
    for key in HEADLINE_KEYS:
        flag = met.get(key)
        print(f"  {key:<40} {head[key]!s:>10}  {'' if flag is None else ('target met' if flag else 'target NOT met')}")


def plot(results: dict[str, Any], path: Path) -> None:
    """Test accuracy against wall time (log x), one panel per data set, one line per
    (model, setting) from the first fold's curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.6), squeeze=False)
    colours = dict(zip(MODELS, ("tab:blue", "tab:orange", "tab:green"), strict=True))
    styles = dict(zip(SETTINGS, ("-", "--", ":", "-."), strict=True))
    for ax, ds in zip(axes[0], names, strict=True):
        for model, by_setting in results[ds].items():
            for setting, cell in by_setting.items():
                if not cell["curve"]:
                    continue
                t, acc = zip(*cell["curve"], strict=True)
                ax.plot(t, acc, styles[setting], color=colours[model], lw=1.3, label=f"{model} {setting}")
                ax.plot(t[-1], acc[-1], "o", color=colours[model], ms=3)
        ax.set_xscale("log")
        ax.set_title(ds)
        ax.set_xlabel("fit time (s, scoring excluded)")
        ax.grid(alpha=0.3)
        lows = [c["curve"][-1][1] for by_s in results[ds].values() for c in by_s.values() if c["curve"]]
        if lows:
            ax.set_ylim(max(0.0, min(lows) - 0.15), min(1.0, max(lows) + 0.03))
    axes[0][0].set_ylabel("test accuracy (first fold)")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Time to accuracy of GLVQ / GMLVQ / LGMLVQ under four L-BFGS settings.")
    p.add_argument(
        "--data-dir", default=None, help="directory with uci/*.tsv.gz and mnist/ (default: $DP_PROTO_DATA_DIR)"
    )
    p.add_argument("--quick", action="store_true", help="reduced setting, same headline keys (a few minutes)")
    p.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    p.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    p.add_argument(
        "--settings",
        nargs="+",
        choices=list(SETTINGS),
        default=None,
        help="default: all four (--quick: default legacy)",
    )
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--peer", action=argparse.BooleanOptionalAction, default=True, help="the sklvq peer (default: on)")
    p.add_argument("--plot", action=argparse.BooleanOptionalAction, default=True, help="write the figure (default: on)")
    p.add_argument("--figure", default=None, help="figure file (default: benchmarks/lvq/figures/fit_speed[_quick].png)")
    p.add_argument("--out", default=None, help="JSON file (default: benchmarks/lvq/results/fit_speed[_quick].json)")
    args = p.parse_args(argv)
    if args.threads < 1:
        p.error("--threads must be >= 1")
    args.datasets = list(dict.fromkeys(args.datasets))
    args.models = list(dict.fromkeys(args.models))
    if args.settings is None:
        args.settings = list(QUICK_SETTINGS if args.quick else SETTINGS)
    args.settings = list(dict.fromkeys(["default", *args.settings]))  # the ratios need the default
    suffix = "_quick" if args.quick else ""
    if args.out is None:
        args.out = RESULTS_DIR / f"{BENCHMARK}{suffix}.json"
    if args.figure is None:
        args.figure = FIGURES_DIR / f"{BENCHMARK}{suffix}.png"
    return args


def load_average() -> float | None:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    data_dir = resolve_data_dir(args.data_dir)
    data = load_benchmark_sets(args.datasets, data_dir)  # every file first: fail early
    torch.set_num_threads(args.threads)
    threads_start, load_start = torch.get_num_threads(), load_average()
    print(f"data dir: {data_dir}")
    print(f"torch threads {threads_start}, 1-min load average {load_start} at start ({os.cpu_count()} CPUs)")
    notes = [
        "one prototype per class; StratifiedKFold(3, shuffle=True), StandardScaler (and PCA(30) for MNIST) "
        "fitted on the training fold; every fit starts at the class means unless stated (warm_start)",
        "fit_s: wall clock of est.fit alone (scaler and PCA excluded) in a fit without callback; fit_s_median: "
        "median over the folds; acc: mean (std) test accuracy over the folds",
        "curve: a second fit of the first fold with a callback scoring the test fold after every L-BFGS "
        f"iteration, the clock paused while it runs; thinned to at most {CURVE_POINTS} points [seconds, accuracy]",
        "settings: " + "; ".join(f"{s}: {SETTINGS[s] or 'estimator defaults'}" for s in args.settings),
    ]
    if args.quick:
        notes.append(
            "--quick: the first of the 3 folds only; Letter and MNIST stratified subsamples of 5000 rows; "
            f"settings {', '.join(args.settings)}, legacy with max_iter={QUICK_LEGACY_MAX_ITER}; the warm start "
            "fits the second fold from the first; the peer on segmentation GLVQ only"
        )
    results: dict[str, Any] = {}
    warm: dict[str, Any] = {}
    first_folds: dict[str, dict] = {}
    protocol: dict[str, Any] = {}
    for name in args.datasets:
        X, y = data.pop(name)
        if args.quick and name in QUICK_ROWS:
            X, y = subsample(X, y, QUICK_ROWS[name], args.seed)
        dims = f"{X.shape[1]}->{PCA_DIM}" if name in PCA_SETS and X.shape[1] > PCA_DIM else str(X.shape[1])
        print(f"\n{name}: {X.shape[0]} samples, {len(np.unique(y))} classes, dims {dims}", flush=True)
        protocol[name] = {"n_samples": int(X.shape[0]), "n_features": int(X.shape[1]), "dims": dims}
        out = run_dataset(name, X, y, args, notes)
        results[name], warm[name], first_folds[name] = out["results"], out["warm_start"], out["first_fold"]
    peer = run_peer(first_folds, results, args)
    notes.append(
        "warm_start: one warm_start=True estimator (default setting) fits the folds in turn, each from the "
        "previous fold's model; cold: fits of the same folds from the class means"
        + (
            "; for MNIST the PCA basis is refitted per fold, so a warm start begins in other coordinates"
            if "mnist" in results
            else ""
        )
    )
    if "results" in peer:
        notes.append(
            f"peer: {peer['name']} with solver_type='lbfgs' (scipy L-BFGS-B, float64, scipy's default tolerances), "
            f"first fold, BLAS limited to {args.threads} threads (threadpoolctl); sklvq_over_ours: its fit time over "
            "our default setting's on the same fold"
        )
    head = headline(results)
    met = targets_met(results, head)
    threads_end, load_end = torch.get_num_threads(), load_average()
    print(f"\ntorch threads {threads_end}, 1-min load average {load_end} at end")
    notes.append(
        f"1-min load average {load_start} at start, {load_end} at end ({os.cpu_count()} CPUs, {threads_start} torch "
        "threads): a clearly higher load than the thread count means other processes shared the CPUs and the "
        "times are inflated"
    )
    print_table(results)
    print_extras(warm, peer, head, met)
    if args.plot:
        plot(results, Path(args.figure))
        print(f"\nfigure: {args.figure}")
    print()
    payload: dict[str, Any] = {
        "benchmark": BENCHMARK,
        "results": results,
        "warm_start": warm,
        "peer": peer,
        "threads": threads_start,
        "threads_end": threads_end,
        "load_avg_1min": {"start": load_start, "end": load_end},
        "headline": head,
        "targets": TARGETS,
        "targets_met": met,
        "target_bounds": target_bounds(results),
        "protocol": {
            "folds": FOLDS,
            "quick": args.quick,
            "seed": args.seed,
            "settings": SETTINGS,
            "datasets": protocol,
        },
        "notes": notes,
        **run_metadata(started),
    }
    emit_json(payload, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
