"""Choose the DP-SGD defaults of DP-GLVQ / DP-GMLVQ on development data sets only.

The evaluation sets of ``dpsgd_accuracy.py`` (Image Segmentation, MNIST, optdigits)
are never touched here: the optimizer (plain SGD or Adam on the noisy gradient), the
transfer function of the cost (identity or sigmoid), the learning rate, the metric's
relative learning rate and iterate averaging (and, for GMLVQ, joint against
per-parameter clipping and whether Omega is renormalised after every step) are compared
on UCI vowel (990 x 10), satimage (6435 x 36, PCA 30) and pendigits (10992 x 16), with the Table B.1 protocol otherwise (delta = 1e-5,
q = 0.01, C = 0.5, E = 50, epsilon1 = 0.2 epsilon, ledger calibration, features
z-scored and mapped onto [-1, 1] with the public bounds (-3, 3)). Each configuration is
scored by its test error averaged over the data sets, the epsilons and ``--splits``
stratified 80/20 splits. Every fit passes ``noise_seed`` (the split's index): the
benchmark opts in to reproducible noise (the estimators' ``PrivacyLeakWarning`` is
silenced), so all configurations of a split see the same seed.

Usage::

    python -m benchmarks.studies.dpsgd_tuning --data-dir ../shared/data --model gmlvq

Prints a table (best first) and one JSON line
``{"benchmark": "dpsgd_tuning", "model": ..., "results": {CONFIG: mean_error}, "best": CONFIG, ...}``.
"""

from __future__ import annotations

import argparse
import itertools
import time
import warnings

import numpy as np
import torch
from sklearn.decomposition import PCA
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from tqdm import tqdm

from benchmarks.common import (
    emit_json,
    load_benchmark_sets,
    machine_description,
    resolve_data_dir,
)
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.lvq.private.estimators import DPGLVQ, DPGMLVQ

DEV_SETS = ("vowel", "satimage", "pendigits")


def _grid(model: str, args: argparse.Namespace) -> list[dict]:
    scales = args.metric_lr_scales if model == "gmlvq" else [None]
    clippings = args.clippings if model == "gmlvq" else [None]
    normalize = args.normalize_omega if model == "gmlvq" else [None]
    out = []
    betas = args.sigmoid_betas if args.sigmoid_betas is not None else [None]
    for solver, beta, lr, scale, avg, clip, norm in itertools.product(
        args.solvers, betas, args.lrs, scales, args.average_last, clippings, normalize
    ):
        cfg = {"lr": lr, "average_last": avg}
        # None: the estimator's transfer (out of the label); otherwise always passed and named
        if beta is not None:
            transfer = {"transfer_fn": "sigmoid", "beta": beta} if beta > 0 else {"transfer_fn": "identity"}
            cfg = {**transfer, **cfg}
        if solver != "sgd":  # the default; its name stays out of the configuration labels
            cfg = {"solver": solver, **cfg}
        if scale is not None:
            cfg["metric_lr_scale"] = scale
        if clip is not None:
            cfg["clipping"] = clip
        if norm is not None:
            cfg["normalize_omega"] = norm
        out.append(cfg)
    return out


def _name(cfg: dict) -> str:
    return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in cfg.items())


def _prepare(X: np.ndarray, y: np.ndarray, seed: int):
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, stratify=y, random_state=seed)
    scaler = StandardScaler().fit(Xtr)
    Xtr, Xte = scaler.transform(Xtr), scaler.transform(Xte)
    if X.shape[1] > 30:
        pca = PCA(30, random_state=seed).fit(Xtr)
        Xtr, Xte = pca.transform(Xtr), pca.transform(Xte)
    return Xtr, Xte, ytr, yte


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", choices=("glvq", "gmlvq"), default="gmlvq")
    parser.add_argument("--datasets", nargs="+", default=list(DEV_SETS))
    parser.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 2.5])
    parser.add_argument("--splits", type=int, default=2)
    parser.add_argument(
        "--solvers",
        nargs="+",
        choices=("sgd", "adam"),
        default=["sgd"],
        help="optimizer applied to the noisy clipped gradient (post-processing; default: sgd)",
    )
    parser.add_argument(
        "--sigmoid-betas",
        nargs="+",
        type=float,
        default=None,
        help="slopes of the sigmoid transfer of the cost, 0 for the identity (default: the estimator's own transfer)",
    )
    parser.add_argument("--lrs", nargs="+", type=float, default=[0.05, 0.2])
    parser.add_argument("--metric-lr-scales", nargs="+", type=float, default=[1.0, 0.1, 0.01])
    parser.add_argument("--average-last", nargs="+", type=float, default=[0.0, 0.5])
    parser.add_argument(
        "--clippings",
        nargs="+",
        choices=("joint", "per_parameter"),
        default=["joint"],
        help="GMLVQ: joint or per-parameter clipping (default: joint)",
    )
    parser.add_argument(
        "--normalize-omega",
        nargs="+",
        choices=("yes", "no"),
        default=["yes"],
        help="GMLVQ: renormalise Omega to trace(Lambda) = 1 after every step "
        "(default: yes) or keep Omega at its identity scale",
    )
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    args.normalize_omega = [v == "yes" for v in args.normalize_omega]
    overlap = set(args.datasets) & {"segmentation", "mnist", "optdigits"}
    if overlap:
        parser.error(f"{sorted(overlap)} are evaluation sets of dpsgd_accuracy.py; tune on others")
    if any(beta < 0 for beta in args.sigmoid_betas or ()):
        parser.error("--sigmoid-betas must be >= 0 (0: the identity transfer)")
    torch.set_num_threads(args.threads)
    data = load_benchmark_sets(args.datasets, resolve_data_dir(args.data_dir))
    estimator = DPGMLVQ if args.model == "gmlvq" else DPGLVQ
    grid = _grid(args.model, args)
    errors: dict[str, list[float]] = {_name(c): [] for c in grid}
    per_set: dict[str, dict[str, list[float]]] = {_name(c): {} for c in grid}
    jobs = list(itertools.product(args.datasets, range(args.splits), args.epsilons))
    classes = {name: np.unique(y) for name, (_, y) in data.items()}  # public label sets
    start = time.time()
    with warnings.catch_warnings():
        # the benchmark opts in to reproducible noise (noise_seed)
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        for name, split, eps in tqdm(jobs, desc=f"tuning DP-{args.model.upper()}"):
            Xtr, Xte, ytr, yte = _prepare(*data[name], seed=split)
            for cfg in grid:
                model = estimator(
                    epsilon=eps, bounds=(-3.0, 3.0), classes=classes[name], noise_seed=split, random_state=split, **cfg
                ).fit(Xtr, ytr)
                err = 1.0 - model.score(Xte, yte)
                errors[_name(cfg)].append(err)
                per_set[_name(cfg)].setdefault(f"{name}@{eps:g}", []).append(err)
    means = {k: float(np.mean(v)) for k, v in errors.items()}
    ranked = sorted(means, key=means.get)
    cols = sorted(next(iter(per_set.values())))
    print(f"\nDP-{args.model.upper()} on development sets, mean test error over {args.splits} splits")
    print(f"{'config':42s} {'mean':>6s} " + " ".join(f"{c:>16s}" for c in cols))
    for k in ranked:
        print(f"{k:42s} {means[k]:6.3f} " + " ".join(f"{np.mean(per_set[k][c]):16.3f}" for c in cols))
    out = {
        "benchmark": "dpsgd_tuning",
        "model": args.model,
        "datasets": args.datasets,
        "epsilons": args.epsilons,
        "splits": args.splits,
        "results": means,
        "best": ranked[0],
        "per_set": {k: {c: float(np.mean(v)) for c, v in d.items()} for k, d in per_set.items()},
        "seconds": round(time.time() - start, 1),
        "machine": machine_description(),
    }
    emit_json(out)
    return out


if __name__ == "__main__":
    main()
