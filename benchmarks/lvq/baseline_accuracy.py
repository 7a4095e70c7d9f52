"""Non-private baseline accuracy of GLVQ, GMLVQ and LGMLVQ (Brinkrolf 2023, Table 2.2).

Protocol (one prototype per class):

* 5-times repeated stratified 5-fold cross-validation
  (``RepeatedStratifiedKFold(n_splits=5, n_repeats=5, random_state=seed)``);
* a scikit-learn ``Pipeline``: ``StandardScaler`` (z-scoring) and, for data with
  more than 30 features (optdigits: 64, MNIST: 784), ``PCA(30)``, both fitted on
  the training folds only, then the estimator;
* estimators with their defaults (full-batch L-BFGS stopped by the relative-cost rule,
  float32, identity Omega
  initialisation), ``max_iter`` from the command line; no hyperparameter is tuned.

Data sets: UCI Image Segmentation (2310 x 19), UCI optdigits (5620 x 64) and
MNIST (train + test = 70000 x 784). ``--quick`` (a few minutes on 2 cores) runs a
single k-fold split (1 repeat) of every set and replaces MNIST by a stratified subsample
of 10000 points; the result keys say so, e.g. ``"segmentation (quick: 1x5 folds)"`` and
``"mnist (quick: 10000 samples, 1x5 folds)"``.

Usage::

    python -m benchmarks.lvq.baseline_accuracy --data-dir ../shared/data
    python -m benchmarks.lvq.baseline_accuracy --data-dir ../shared/data --datasets mnist --quick

The script prints a table and ends with one JSON line::

    {"benchmark": "baseline_accuracy", "results": {DATASET: {MODEL: [mean, std]}},
     "fit_time_s": {DATASET: {MODEL: mean_seconds}}, "targets": ..., "machine": ...,
     "notes": [...], ...}

Exit code 2 if the data directory or a data file is missing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch
from sklearn.decomposition import PCA
from sklearn.model_selection import RepeatedStratifiedKFold, train_test_split
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from tqdm import tqdm

from benchmarks.common import (
    emit_json,
    load_benchmark_sets,
    machine_description,
    resolve_data_dir,
)
from dp_proto.lvq import GLVQ, GMLVQ, LGMLVQ

BENCHMARK = "baseline_accuracy"
DATASETS = ("segmentation", "optdigits", "mnist")
MODELS = {"GLVQ": GLVQ, "GMLVQ": GMLVQ, "LGMLVQ": LGMLVQ}

#: Brinkrolf (2023), Table 2.2: mean test accuracy with one prototype per class.
TARGETS: dict[str, dict[str, float]] = {
    "segmentation": {"GLVQ": 0.836, "GMLVQ": 0.912, "LGMLVQ": 0.946},
    "optdigits": {"GLVQ": 0.916, "GMLVQ": 0.940, "LGMLVQ": 0.978},
    "mnist": {"GLVQ": 0.813, "GMLVQ": 0.852, "LGMLVQ": 0.943},
}

PCA_DIM = 30
QUICK_MNIST_SAMPLES = 10_000
QUICK_MNIST_REPEATS = 1
QUICK_UCI_REPEATS = 1


#: Transfer functions tried by ``--transfer select`` (name -> estimator keywords).
TRANSFER_CANDIDATES: dict[str, dict[str, object]] = {
    "identity": {"transfer_fn": "identity"},
    "sigmoid5": {"transfer_fn": "sigmoid", "beta": 5.0},
}


def make_pipeline(model: str, n_features: int, *, max_iter: int, seed: int, transfer: str = "identity") -> Pipeline:
    """z-scoring, PCA to 30 dimensions if ``n_features > 30``, then the estimator."""
    steps: list[tuple[str, object]] = [("scale", StandardScaler())]
    if n_features > PCA_DIM:
        steps.append(("pca", PCA(n_components=PCA_DIM, random_state=seed)))
    steps.append(
        (
            "lvq",
            MODELS[model](
                prototypes_per_class=1, max_iter=max_iter, random_state=seed, **TRANSFER_CANDIDATES[transfer]
            ),
        )
    )
    return Pipeline(steps)


def select_transfer(model: str, X: np.ndarray, y: np.ndarray, *, max_iter: int, seed: int) -> str:
    """The transfer function with the best accuracy on an inner stratified 80/20 split of
    the *training* fold (nested model selection: the test fold is never seen)."""
    a, b, ya, yb = train_test_split(X, y, test_size=0.2, stratify=y, random_state=seed)
    scores = {
        name: make_pipeline(model, X.shape[1], max_iter=max_iter, seed=seed, transfer=name).fit(a, ya).score(b, yb)
        for name in TRANSFER_CANDIDATES
    }
    return max(scores, key=scores.get)


def cross_validate(
    key: str,
    X: np.ndarray,
    y: np.ndarray,
    models: list[str],
    *,
    repeats: int,
    folds: int,
    max_iter: int,
    seed: int,
    transfer: str = "identity",
) -> dict[str, dict]:
    """Test accuracy, fit time and L-BFGS iterations of every model on every fold.

    ``transfer="select"`` chooses the transfer function per fold and model by
    :func:`select_transfer` on the training fold; the fit time is then that of the
    final fit only."""
    cv = RepeatedStratifiedKFold(n_splits=folds, n_repeats=repeats, random_state=seed)
    per_model = {m: {"acc": [], "fit_s": [], "n_iter": [], "transfer": []} for m in models}
    total = cv.get_n_splits() * len(models)
    # Untimed warm-up (torch's first call pays one-off set-up costs): 5 points per class.
    warm = np.concatenate([np.flatnonzero(y == c)[:5] for c in np.unique(y)])
    for m in models:
        try:
            make_pipeline(m, X.shape[1], max_iter=2, seed=seed).fit(X[warm], y[warm])
        except ValueError:  # e.g. fewer warm-up points than PCA components: skip warm-up
            pass
    with tqdm(total=total, desc=key, unit="fit", file=sys.stderr, dynamic_ncols=True) as bar:
        for train, test in cv.split(X, y):
            for m in models:
                chosen = (
                    transfer
                    if transfer != "select"
                    else select_transfer(m, X[train], y[train], max_iter=max_iter, seed=seed)
                )
                pipe = make_pipeline(m, X.shape[1], max_iter=max_iter, seed=seed, transfer=chosen)
                start = time.perf_counter()
                pipe.fit(X[train], y[train])
                fit_s = time.perf_counter() - start
                acc = float(pipe.score(X[test], y[test]))
                rec = per_model[m]
                rec["acc"].append(acc)
                rec["fit_s"].append(fit_s)
                rec["n_iter"].append(int(pipe[-1].n_iter_))
                rec["transfer"].append(chosen)
                bar.set_postfix_str(f"{m} acc={acc:.3f} fit={fit_s:.1f}s")
                bar.update(1)
    return per_model


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="GLVQ / GMLVQ / LGMLVQ baseline accuracy (Brinkrolf 2023, Table 2.2).")
    p.add_argument(
        "--data-dir",
        default=None,
        help="directory holding uci/*.tsv.gz and mnist/*-ubyte.gz (default: $DP_PROTO_DATA_DIR)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"1 repeat of the k folds on every set; MNIST: a stratified subsample of {QUICK_MNIST_SAMPLES} points",
    )
    p.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    p.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    p.add_argument("--repeats", type=int, default=5, help="repeats of the k-fold split")
    p.add_argument("--folds", type=int, default=5, help="k of the stratified k-fold split")
    p.add_argument("--max-iter", type=int, default=500, help="L-BFGS iterations (max_iter)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads (default: torch's choice, one per core; --quick: 1, which is fastest for "
        "these small tensors on a shared machine)",
    )
    p.add_argument("--out", default=None, help="also write the JSON summary to this file")
    p.add_argument(
        "--transfer",
        choices=[*TRANSFER_CANDIDATES, "select"],
        default="identity",
        help="GLVQ transfer function; 'select' picks identity or sigmoid (beta 5) per "
        "fold on an inner split of the training fold (default: identity, as in "
        "Brinkrolf 2023)",
    )
    args = p.parse_args(argv)
    if args.quick and args.threads is None:
        args.threads = 1
    if args.threads is not None and args.threads < 1:
        p.error("--threads must be >= 1")
    for name in ("repeats", "max_iter"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.folds < 2:
        p.error("--folds must be >= 2")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data_dir = resolve_data_dir(args.data_dir)
    datasets = list(dict.fromkeys(args.datasets))
    models = list(dict.fromkeys(args.models))

    data = load_benchmark_sets(datasets, data_dir)  # all files first: fail early

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    machine = machine_description()
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    notes = [
        "one prototype per class; estimator defaults (L-BFGS with stopping='relative_cost', float32, "
        "identity Omega init, "
        f"LGMLVQ without local normalisation), max_iter={args.max_iter}, transfer={args.transfer}"
        + (
            " (chosen per fold on an inner 80/20 split of the training fold; test folds unseen)"
            if args.transfer == "select"
            else ", no hyperparameter tuning"
        ),
        f"StandardScaler and PCA({PCA_DIM}, only if >{PCA_DIM} features) fitted on the training "
        "folds inside a sklearn Pipeline",
        "fit_time_s: mean wall-clock seconds of Pipeline.fit (scaler + PCA + estimator) per fold",
    ]
    print(f"machine: {machine}")
    print(f"data dir: {data_dir}")

    results: dict[str, dict[str, list[float]]] = {}
    fit_time: dict[str, dict[str, float]] = {}
    fit_median: dict[str, dict[str, float]] = {}
    targets: dict[str, dict[str, float]] = {}
    n_iter: dict[str, dict[str, list[float]]] = {}
    protocol: dict[str, dict[str, int]] = {}
    per_fold: dict[str, dict[str, dict[str, list[float]]]] = {}
    for name in datasets:
        X, y = data[name]
        repeats = args.repeats
        key = name
        if name == "mnist" and args.quick:
            X, _, y, _ = train_test_split(X, y, train_size=QUICK_MNIST_SAMPLES, stratify=y, random_state=args.seed)
            repeats = QUICK_MNIST_REPEATS
            key = f"mnist (quick: {QUICK_MNIST_SAMPLES} samples, {repeats}x{args.folds} folds)"
            notes.append(
                f"--quick: MNIST is a stratified subsample of {QUICK_MNIST_SAMPLES} of the 70000 "
                f"points (seed {args.seed}) with {repeats}x{args.folds}-fold CV instead of "
                f"{args.repeats}x{args.folds}; not comparable one-to-one with the 70000-point target"
            )
        elif args.quick:
            repeats = QUICK_UCI_REPEATS
            key = f"{name} (quick: {repeats}x{args.folds} folds)"
            notes.append(f"--quick: {key} with {repeats}x{args.folds}-fold CV instead of {args.repeats}x{args.folds}")
        elif (repeats, args.folds) != (5, 5):  # not the Table 2.2 protocol: say so in the key
            key = f"{name} ({repeats}x{args.folds} folds)"
        dims = f"{X.shape[1]}->{PCA_DIM}" if X.shape[1] > PCA_DIM else str(X.shape[1])
        print(
            f"\n{key}: {X.shape[0]} samples, {len(np.unique(y))} classes, dims {dims}, {repeats}x{args.folds}-fold CV",
            flush=True,
        )
        per_model = cross_validate(
            key,
            X,
            y,
            models,
            repeats=repeats,
            folds=args.folds,
            max_iter=args.max_iter,
            seed=args.seed,
            transfer=args.transfer,
        )
        results[key] = {
            m: [round(float(np.mean(r["acc"])), 4), round(float(np.std(r["acc"])), 4)] for m, r in per_model.items()
        }
        fit_time[key] = {m: round(float(np.mean(r["fit_s"])), 3) for m, r in per_model.items()}
        fit_median[key] = {m: round(float(np.median(r["fit_s"])), 3) for m, r in per_model.items()}
        targets[key] = {m: TARGETS[name][m] for m in models}
        n_iter[key] = {
            m: [float(np.mean(r["n_iter"])), int(np.min(r["n_iter"])), int(np.max(r["n_iter"]))]
            for m, r in per_model.items()
        }
        per_fold[key] = {
            m: {
                "acc": [round(a, 4) for a in r["acc"]],
                "fit_s": [round(t, 2) for t in r["fit_s"]],
                "transfer": r["transfer"],
            }
            for m, r in per_model.items()
        }
        protocol[key] = {
            "n_samples": int(X.shape[0]),
            "n_features": int(X.shape[1]),
            "repeats": repeats,
            "folds": args.folds,
        }
        for m, r in per_model.items():
            hits = sum(k >= args.max_iter for k in r["n_iter"])
            if hits:
                notes.append(f"{key} {m}: L-BFGS reached max_iter={args.max_iter} in {hits}/{len(r['n_iter'])} folds")

    if load_start is not None:
        load_end = os.getloadavg()
        notes.append(
            f"1-min load average {load_start[0]:.2f} at start, {load_end[0]:.2f} at end "
            f"({os.cpu_count()} CPUs, {torch.get_num_threads()} torch threads); this run itself "
            "adds about its thread count, a clearly higher load means other processes shared "
            "the CPUs and fit times are inflated"
        )

    # Human-readable table.
    header = (
        f"{'dataset':<44} {'model':<7} {'ours mean (std)':>16} {'target':>7} "
        f"{'diff':>7} {'fit s mean':>10} {'median':>7} {'L-BFGS iters mean [min,max]':>28}"
    )
    print("\n" + header)
    print("-" * len(header))
    for key, by_model in results.items():
        for m, (mean, std) in by_model.items():
            tgt = targets[key][m]
            it = n_iter[key][m]
            print(
                f"{key:<44} {m:<7} {f'{mean:.3f} ({std:.3f})':>16} {tgt:>7.3f} "
                f"{mean - tgt:>+7.3f} {fit_time[key][m]:>10.2f} {fit_median[key][m]:>7.2f} "
                f"{f'{it[0]:.0f} [{it[1]},{it[2]}]':>28}"
            )

    payload: dict[str, object] = {
        "benchmark": BENCHMARK,
        "results": results,
        "fit_time_s": fit_time,
        "fit_time_median_s": fit_median,
        "targets": targets,
        "machine": machine,
        "notes": notes,
        "n_iter": n_iter,
        "protocol": protocol,
        "per_fold": per_fold,
        "max_iter": args.max_iter,
        "seed": args.seed,
        "transfer": args.transfer,
    }
    opt = f"optdigits (quick: {QUICK_UCI_REPEATS}x{args.folds} folds)" if args.quick else "optdigits"
    if opt in fit_time and "GMLVQ" in fit_time[opt]:
        gm = fit_time[opt]["GMLVQ"]
        payload["gmlvq_lbfgs_optdigits_fit_s"] = gm
        print(
            f"\nGMLVQ (L-BFGS) on {opt}, PCA {PCA_DIM}: {gm:.2f} s per fit (mean; median "
            f"{fit_median[opt]['GMLVQ']:.2f} s) "
            f"({protocol[opt]['n_samples'] * (args.folds - 1) // args.folds} "
            f"training points)"
        )
    print()
    emit_json(payload, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
