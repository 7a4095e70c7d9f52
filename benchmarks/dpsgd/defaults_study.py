"""Which DP-SGD settings should the private LVQ estimators default to? A study on
development splits only.

For every set of :mod:`benchmarks.dpsgd.peers` (same public domain, same subsampling),
the training part of the peers' first fold is split 75/25 (stratified, seed 1) into a
development training and a development validation part; the test folds of the peer
benchmark are never read. Each variant (the estimator's defaults with a few settings
changed, ``VARIANTS``; the defaults of the commit in the run's ``meta``) is fitted on the development training part at each epsilon
(``delta = 1e-5``, seeded noise) and scored on the validation part. Reported: the
validation accuracy per set, epsilon and variant, its mean over sets, the mean rank of
each variant, and the mean fit time.

Usage::

    python -m benchmarks.dpsgd.defaults_study --data-dir ../shared/data --jobs 2
    python -m benchmarks.dpsgd.defaults_study --data-dir ../shared/data --quick

``--quick``: Image Segmentation and optdigits at epsilon 1. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import emit_json, machine_description, resolve_data_dir, run_tasks
from benchmarks.dpsgd.peers import DELTA, QUICK_SETS, SETS, load_sets

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK = "dpsgd_defaults_study"
EPSILONS = (1.0, 4.0)
#: name -> settings changed from the estimator's defaults
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "q 0.03": {"sampling_rate": 0.03},
    "q 0.1": {"sampling_rate": 0.1},
    "q 0.03, 15 epochs": {"sampling_rate": 0.03, "epochs": 15},
    "q 0.1, 15 epochs": {"sampling_rate": 0.1, "epochs": 15},
    "15 epochs": {"epochs": 15},
    "lr 0.02": {"lr": 0.02},
    "lr 0.2": {"lr": 0.2},
    "gaussian init": {"init_mechanism": "gaussian"},
    "init 0.1": {"init_fraction": 0.1},
    "init 0.3": {"init_fraction": 0.3},
    "init 0.4": {"init_fraction": 0.4},
    "init 0.5": {"init_fraction": 0.5},
    "clip 0.25": {"max_grad_norm": 0.25},
    "clip 1": {"max_grad_norm": 1.0},
    "average last 0.5": {"average_last": 0.5},
    "metric lr x0.3": {"metric_lr_scale": 0.3},
    "adam lr 0.01": {"solver": "adam", "lr": 0.01},
    # capacity: several prototypes per class (copies of the noisy class mean, jittered)
    "2 prototypes per class": {"prototypes_per_class": 2},
    "3 prototypes per class": {"prototypes_per_class": 3},
    # second stage: the step size scaled with the sampling rate, with the first stage's winners
    "q 0.03, lr 0.15": {"sampling_rate": 0.03, "lr": 0.15},
    "q 0.1, lr 0.5": {"sampling_rate": 0.1, "lr": 0.5},
    "gaussian init, lr 0.1": {"init_mechanism": "gaussian", "lr": 0.1},
    "gaussian init, clip 1": {"init_mechanism": "gaussian", "max_grad_norm": 1.0},
    "gaussian init, init 0.1": {"init_mechanism": "gaussian", "init_fraction": 0.1},
    "gaussian init, q 0.03, lr 0.15": {"init_mechanism": "gaussian", "sampling_rate": 0.03, "lr": 0.15},
    "gaussian init, q 0.03, lr 0.15, 20 epochs": {
        "init_mechanism": "gaussian",
        "sampling_rate": 0.03,
        "lr": 0.15,
        "epochs": 20,
    },
    "gaussian init, q 0.1, lr 0.5, 20 epochs": {
        "init_mechanism": "gaussian",
        "sampling_rate": 0.1,
        "lr": 0.5,
        "epochs": 20,
    },
    # third stage: fewer metric parameters (a random low-rank Omega), the sigmoid's slope, the step
    "rank 2": {"rank": 2, "omega_init": "random"},
    "rank 5": {"rank": 5, "omega_init": "random"},
    "beta 4": {"beta": 4.0},
    "beta 32": {"beta": 32.0},
    "lr 0.1": {"lr": 0.1},
}
MODELS = ("DP-GMLVQ",)


def dev_split(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Development train / validation parts of the peers' first training fold."""
    from sklearn.model_selection import StratifiedKFold, train_test_split

    train, _ = next(StratifiedKFold(3, shuffle=True, random_state=0).split(X, y))
    Xtr, Xva, ytr, yva = train_test_split(X[train], y[train], test_size=0.25, stratify=y[train], random_state=1)
    return Xtr, ytr, Xva, yva


def run_variant(task: dict[str, Any]) -> dict[str, Any]:
    """One variant on one set at one epsilon: validation accuracy and fit seconds."""
    import torch

    from dp_proto.lvq.private import DPGLVQ, DPGMLVQ, DPLGMLVQ

    torch.set_num_threads(task["threads"])
    cls = {"DP-GLVQ": DPGLVQ, "DP-GMLVQ": DPGMLVQ, "DP-LGMLVQ": DPLGMLVQ}[task["model"]]
    est = cls(
        epsilon=task["epsilon"],
        delta=DELTA,
        bounds=(-1.0, 1.0),
        classes=list(range(task["n_classes"])),
        random_state=task["seed"],
        noise_seed=task["seed"],
        **VARIANTS[task["variant"]],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        est.fit(task["Xtr"], task["ytr"])
        fit_s = time.perf_counter() - start
    acc = float(np.mean(est.predict(task["Xva"]) == task["yva"]))
    keys = ("set", "model", "variant", "epsilon", "seed")
    return {k: task[k] for k in keys} | {"acc": acc, "fit_s": fit_s}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean validation accuracy per (model, variant, epsilon) over sets and seeds, and mean ranks."""
    acc: dict[str, dict[str, dict[str, dict[str, list[float]]]]] = {}
    for r in rows:
        cell = acc.setdefault(r["model"], {}).setdefault(r["variant"], {}).setdefault(f"{r['epsilon']:g}", {})
        cell.setdefault(r["set"], []).append(r["acc"])
    per_set = {m: {v: {e: {s: float(np.mean(a)) for s, a in sets.items()} for e, sets in eps.items()} for v, eps in vs.items()} for m, vs in acc.items()}  # fmt: skip
    mean = {m: {v: {e: float(np.mean(list(s.values()))) for e, s in eps.items()} for v, eps in vs.items()} for m, vs in per_set.items()}  # fmt: skip
    ranks: dict[str, dict[str, float]] = {}
    for m, vs in per_set.items():
        cells = [(e, s) for e, sets in next(iter(vs.values())).items() for s in sets]
        r: dict[str, list[int]] = {v: [] for v in vs}
        for e, s in cells:
            order = sorted(vs, key=lambda v: -vs[v][e][s])
            for i, v in enumerate(order):
                r[v].append(i + 1)
        ranks[m] = {v: float(np.mean(x)) for v, x in r.items()}
    fit_s = {}
    for r_ in rows:
        fit_s.setdefault(r_["model"], {}).setdefault(r_["variant"], []).append(r_["fit_s"])
    return {
        "per_set": per_set,
        "mean_over_sets": mean,
        "mean_rank": ranks,
        "mean_fit_s": {m: {v: float(np.mean(t)) for v, t in vs.items()} for m, vs in fit_s.items()},
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--quick", action="store_true", help="segmentation and optdigits at epsilon 1")
    p.add_argument("--sets", nargs="+", default=None, choices=SETS)
    p.add_argument("--epsilons", nargs="+", type=float, default=None)
    p.add_argument("--variants", nargs="+", default=None, choices=list(VARIANTS))
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=["DP-GLVQ", "DP-GMLVQ", "DP-LGMLVQ"])
    p.add_argument("--seeds", type=int, default=1, help="noise seeds per cell (1)")
    p.add_argument("--max-n", type=int, default=20000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    started = time.time()
    sets = tuple(args.sets or (QUICK_SETS if args.quick else SETS))
    epsilons = tuple(args.epsilons or ((1.0,) if args.quick else EPSILONS))
    variants = tuple(args.variants or VARIANTS)
    suffix = "_quick" if args.quick else ""
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "dpsgd" / "results" / f"{BENCHMARK}{suffix}.json"
    data = load_sets(sets, resolve_data_dir(args.data_dir), args.max_n)
    tasks = []
    for name, d in data.items():
        Xtr, ytr, Xva, yva = dev_split(d["X"], d["y"])
        base = {"set": name, "threads": args.threads, "n_classes": int(d["y"].max()) + 1}
        base |= {"Xtr": Xtr, "ytr": ytr, "Xva": Xva, "yva": yva}
        for model in args.models:
            for eps in epsilons:
                for variant in variants:
                    for seed in range(args.seeds):
                        tasks.append(base | {"model": model, "epsilon": eps, "variant": variant, "seed": 11 + seed})
    rows = run_tasks(
        tasks,
        run_variant,
        jobs=args.jobs,
        desc=BENCHMARK,
        postfix=lambda t, r: f"{t['set']} {t['variant']} {r['acc']:.3f}",
    )
    summary = summarise(rows)
    for m in args.models:
        print(f"\n{m}: validation accuracy, mean over {len(sets)} sets; mean rank; mean fit s")
        for v in sorted(variants, key=lambda v: summary["mean_rank"][m][v]):
            accs = "  ".join(f"eps {e}: {a:.4f}" for e, a in summary["mean_over_sets"][m][v].items())
            print(f"  {v:<22} {accs}  rank {summary['mean_rank'][m][v]:5.2f}  {summary['mean_fit_s'][m][v]:6.2f} s")
    best = {m: min(variants, key=lambda v: summary["mean_rank"][m][v]) for m in args.models}
    emit_json(
        {
            "benchmark": BENCHMARK,
            "headline": {"best_variant": best, "best_mean_rank": {m: summary["mean_rank"][m][best[m]] for m in best}},
            "results": summary,
            "settings": {
                "sets": list(sets),
                "epsilons": list(epsilons),
                "variants": {v: VARIANTS[v] for v in variants},
                "seeds": args.seeds,
                "threads": args.threads,
            },  # fmt: skip
            "machine": machine_description(),
            "elapsed_s": round(time.time() - started, 1),
        },
        out,
    )


if __name__ == "__main__":
    main()
