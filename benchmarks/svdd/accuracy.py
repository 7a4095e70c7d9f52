"""Accuracy of the private SVDD equilibrium-point classifier against the private SVM baselines.

Reproduces the protocol of Park (2022), Section 7 (``benchmarks/svdd/protocol.py`` holds
the settings, the target numbers and every fill of what the thesis leaves open): the
eight data sets of Table 7.1 with their hyperparameters, epsilon in {0.01, 0.1, 1, 5,
10, 100} plus non-private, 5 stratified 80/20 splits (features standardised with the
training split), and Table 7.3: shuttle (3 classes) subsampled to 10 % and 30 %.

Methods (all on F = 400 random Fourier features, one fit per split and epsilon):

* ``proposed`` -- :class:`dp_proto.svdd.PrivateSVDDClassifier`, the sound default
  (``starts="auto"``): half of epsilon on the centre, 5 % on a noisy record count, the rest
  on noisy votes (total epsilon, recorded in the ledger). The count picks the cells: the
  public grid of cubes of side 2 r_max when a cube needs at most 1/200 of the records to
  be released (sparse noisy histogram), else cells of N(0, I) starts drawn independently
  of the data, as many as the count and budget allow (``n_starts="auto"``). The JSON's
  ``start_modes`` says which one each fit used;
* ``proposed_training_starts`` -- the thesis' variant (``starts="training"``): dynamics from the
  training points, epsilon on the centre and epsilon on the votes as published. Not
  differentially private (see the estimator's docstring); reported for comparison only;
* ``svm_weight`` -- :class:`dp_proto.svdd.baselines.PrivateSVMWeight` (Rubinstein et al.);
* ``svm_output`` -- :class:`dp_proto.svdd.baselines.PrivateSVMOutput` (output perturbation;
  epsilon per answered query, so not a releasable model: the thesis' reference level).
  Both are released at every epsilon from one exact fit per split (see
  :func:`svm_accuracies`); on sets with more than 6000 training rows (shuttle) the SVM
  solve takes minutes, so they run on the first split only there;
* reference: scikit-learn's ``SVC`` (RBF, non-private, its default ``C = 1``, the SVM columns'
  gamma; with ``C = C/n`` its one-vs-one machines underfit: 0.61 on iris).

Prints per-set tables, writes ``benchmarks/svdd/results/svdd_accuracy.json`` and
``benchmarks/svdd/figures/svdd_accuracy.png``, and ends with one JSON line
``{"benchmark": "svdd_accuracy", "results": ..., "headline": ...}``.

``--quick`` (under a minute) runs the synthetic sets at three epsilons and the Table 7.3
sets on a tenth of their shuttle subsample (``shuttle10``: 1 % = 580 rows, ``shuttle30``:
3 % = 1740 rows, ``QUICK_TABLE_7_3_SETS``) at the Table 7.3 epsilons, one split each, so its
headline has every key of the full run, computed on that reduced setting (not comparable
one-to-one with the thesis); it writes ``svdd_accuracy_quick.json`` / ``.png`` unless told
otherwise.

    python -m benchmarks.svdd.accuracy --data-dir ../shared/data
    python -m benchmarks.svdd.accuracy --data-dir ../shared/data --quick
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.svm import SVC
from tqdm import tqdm

from benchmarks.common import emit_json, resolve_data_dir, run_metadata
from benchmarks.svdd import protocol as protocol
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.privacy.mechanisms import laplace_mechanism
from dp_proto.privacy.randomness import seeded_generator
from dp_proto.svdd import PrivateSVDDClassifier
from dp_proto.svdd.baselines import PrivateSVMWeight, svm_sensitivity

BENCHMARK = "svdd_accuracy"
ROOT = Path(__file__).resolve().parent
METHODS = ("proposed", "proposed_training_starts", "svm_weight", "svm_output")
LABELS = {
    "proposed": "proposed (sound default)",
    "proposed_training_starts": "proposed, thesis variant (not DP)",
    "svm_weight": "SVM WEIGHT",
    "svm_output": "SVM OUTPUT (per query)",
    "svc": "sklearn SVC",
}
SYNTHETIC = ("three_moons", "five_gaussians")
TABLE_7_3_SETS = {"shuttle10": 0.1, "shuttle30": 0.3}
#: --quick: the Table 7.3 sets on a tenth of their subsample (the SVM baselines solve in
#: seconds there instead of minutes)
QUICK_TABLE_7_3_SETS = {"shuttle10": 0.01, "shuttle30": 0.03}
SVM_MAX_ITER = 500_000


def eps_key(eps: float) -> str:
    return "non-private" if math.isinf(eps) else f"{eps:g}"


def make_proposed(method: str, row, eps: float, seed: int, n_starts, starts: str = "auto") -> PrivateSVDDClassifier:
    p = row.proposed
    return PrivateSVDDClassifier(
        c_over_n=p.c_over_n,
        gamma=p.gamma,
        num_features=protocol.N_RANDOM_FEATURES,
        epsilon=None if math.isinf(eps) else eps,
        lr=p.lr,
        iters=p.iters,
        r_max=p.r_max,
        n_starts=n_starts,
        starts="training" if method == "proposed_training_starts" else starts,
        classes=np.arange(row.classes),
        random_state=seed,
        noise_seed=seed,
    )  # reproducible noise: benchmark numbers only


def exact_svm(setting, X_train, y_train, seed: int) -> PrivateSVMWeight:
    """The exact (non-private) one-vs-all SVM of a Table 7.1 SVM column."""
    return PrivateSVMWeight(
        c_over_n=setting.c_over_n,
        gamma=setting.gamma,
        num_features=protocol.N_RANDOM_FEATURES,
        epsilon=None,
        random_state=seed,
        max_iter=SVM_MAX_ITER,
    ).fit(X_train, y_train)


def svm_accuracies(method: str, exact: PrivateSVMWeight, X_test, y_test, epsilons, seed: int) -> dict:
    """Accuracy of SVM WEIGHT or SVM OUTPUT at every epsilon from one exact fit.

    The exact one-vs-all weights do not depend on epsilon, so they are computed once
    (:func:`exact_svm`) and released at each epsilon with the mechanisms of
    :mod:`dp_proto.svdd.baselines`: Laplace noise of l1 sensitivity
    ``K sqrt(F) svm_sensitivity`` on the weights (SVM WEIGHT) or ``K svm_sensitivity`` on
    every test point's scores (SVM OUTPUT) -- what ``fit`` / ``predict`` of the estimators
    do, without solving the same problem once per epsilon.
    """
    weights = exact.weights_.to(torch.float64)
    K, F = weights.shape
    l2 = svm_sensitivity(exact.c_over_n, exact.tol)
    phi = exact.features_(torch.as_tensor(X_test, dtype=exact.dtype)).to(torch.float64)
    y_index = np.searchsorted(exact.classes_, y_test)
    out = {}
    with warnings.catch_warnings():
        # a seeded noise stream keeps the benchmark's numbers reproducible; the
        # PrivacyLeakWarning that says so is expected here
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        gen = seeded_generator(seed, owner="svdd_accuracy benchmark")
        for eps in epsilons:
            if math.isinf(eps):
                scores = phi @ weights.T
            elif method == "svm_weight":
                scores = phi @ laplace_mechanism(weights, K * math.sqrt(F) * l2, eps, generator=gen, ledger=None).T
            else:
                scores = laplace_mechanism(phi @ weights.T, K * l2, eps, generator=gen, ledger=None)
            out[eps_key(eps)] = float((scores.argmax(1).numpy() == y_index).mean())
    return out


def load(name: str, data_dir, seed: int, fractions: dict[str, float] = TABLE_7_3_SETS):
    """Data set ``name``; the Table 7.3 sets are ``fractions[name]`` of the merged shuttle."""
    if name in TABLE_7_3_SETS:
        return protocol.load_dataset("shuttle", data_dir, random_state=seed, shuttle_fraction=fractions[name])
    return protocol.load_dataset(name, data_dir, random_state=seed)


def run_set(name: str, args, data_dir, bar) -> tuple[dict, list[float], dict]:
    """``{method: {eps_key: [accuracy per run]}}``, the SVC accuracies of one data set and
    ``{eps_key: {start mode: fits}}`` of the sound default."""
    row = protocol.TABLE_7_1["shuttle" if name in TABLE_7_3_SETS else name]
    epsilons = args.table_7_3_epsilons if name in TABLE_7_3_SETS else args.epsilons
    acc: dict = {m: {eps_key(e): [] for e in epsilons} for m in args.methods}
    svc: list[float] = []
    modes: dict = {}
    for run in range(args.runs):
        # the synthetic generators and the size-matching subsamples are drawn per run
        X, y = load(name, data_dir, seed=run, fractions=args.table_7_3_fractions)
        train, test = protocol.split_indices(y, run)
        X_train, X_test = protocol.standardize(X[train], X[test])
        # the one-vs-all SVM solve is slow on the largest sets (minutes): fewer runs there
        svm_runs = args.runs if len(train) <= args.svm_full_runs_max_n else min(args.runs, args.svm_runs_large)
        y_train, y_test = y[train], y[test]
        reference = SVC(C=1.0, gamma=row.svm_weight.gamma).fit(X_train, y_train)
        svc.append(float(reference.score(X_test, y_test)))
        fits: dict = {}  # one exact SVM per distinct (C/n, gamma) of the split
        for method in args.methods:
            seed = 1000 * run + 1
            if method.startswith("svm"):
                if run >= svm_runs:
                    bar.update(len(epsilons))
                    continue
                setting = row.svm_weight if method == "svm_weight" else row.svm_output
                if setting not in fits:
                    fits[setting] = exact_svm(setting, X_train, y_train, seed)
                for key, value in svm_accuracies(method, fits[setting], X_test, y_test, epsilons, seed).items():
                    acc[method][key].append(value)
                bar.update(len(epsilons))
                continue
            for eps in epsilons:
                model = make_proposed(method, row, eps, seed=seed, n_starts=args.n_starts, starts=args.starts)
                with warnings.catch_warnings():
                    # expected: noise_seed (reproducible noise) and starts="training" (not DP)
                    warnings.simplefilter("ignore", PrivacyLeakWarning)
                    model.fit(X_train, y_train)
                acc[method][eps_key(eps)].append(float((model.predict(X_test) == y_test).mean()))
                if method == "proposed":
                    by_mode = modes.setdefault(eps_key(eps), {})
                    by_mode[model.starts_] = by_mode.get(model.starts_, 0) + 1
                bar.update(1)
    return acc, svc, modes


def summarise(raw: dict) -> dict:
    return {
        name: {
            method: {
                k: {
                    "mean": round(float(np.mean(v)), 4),
                    "std": round(float(np.std(v)), 4),
                    "runs": [round(a, 4) for a in v],
                }
                for k, v in by_eps.items()
            }
            for method, by_eps in methods.items()
        }
        for name, methods in raw.items()
    }


def compare_with_weight(results: dict) -> dict:
    """Per set: does the sound default beat SVM WEIGHT (mean accuracy) at every epsilon <= 1?"""
    out = {}
    for name, methods in results.items():
        if "proposed" not in methods or "svm_weight" not in methods:
            continue
        keys = [k for k in methods["proposed"] if k != "non-private" and float(k) <= 1]
        out[name] = {k: methods["proposed"][k]["mean"] > methods["svm_weight"][k]["mean"] for k in keys}
    return out


def table_7_3_check(results: dict) -> dict:
    """The sound default's means against the thesis' Table 7.3 row 'Proposed'."""
    out = {}
    for name, fraction in TABLE_7_3_SETS.items():
        if name not in results or "proposed" not in results[name]:
            continue
        target = protocol.TABLE_7_3[fraction]["Proposed"]
        out[name] = {
            eps_key(e): {
                "ours": results[name]["proposed"][eps_key(e)]["mean"],
                "thesis": t,
                "met": results[name]["proposed"][eps_key(e)]["mean"] >= t,
            }
            for e, t in target.items()
            if eps_key(e) in results[name]["proposed"]
        }
    return out


def print_tables(results: dict, svc: dict) -> None:
    for name, methods in results.items():
        keys = list(next(iter(methods.values())))
        print(f"\n{name}  (sklearn SVC, non-private: {np.mean(svc[name]):.3f})")
        print(f"{'method':<36}" + "".join(f"{k:>12}" for k in keys))
        for method, by_eps in methods.items():
            print(f"{LABELS[method]:<36}" + "".join(f"{by_eps[k]['mean']:>12.3f}" for k in keys))


def plot(results: dict, svc: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    cols = min(5, len(names))
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.9 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        for method, by_eps in results[name].items():
            keys = [k for k in by_eps if k != "non-private"]
            xs = [float(k) for k in keys]
            (line,) = ax.plot(xs, [by_eps[k]["mean"] for k in keys], marker="o", ms=3, label=LABELS[method])
            if "non-private" in by_eps:
                ax.axhline(by_eps["non-private"]["mean"], color=line.get_color(), ls=":", lw=0.8)
        ax.axhline(np.mean(svc[name]), color="k", ls="--", lw=0.8, label="sklearn SVC")
        if name in TABLE_7_3_SETS:
            target = protocol.TABLE_7_3[TABLE_7_3_SETS[name]]["Proposed"]
            finite = [e for e in target if not math.isinf(e)]
            ax.plot(finite, [target[e] for e in finite], "k*", ms=7, label="thesis Table 7.3")
        ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("epsilon", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    extra = [
        (h, lab)
        for ax in axes.flat
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=False)
        if lab == "thesis Table 7.3"
    ][:1]
    for h, lab in extra:
        handles.append(h)
        labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.suptitle("Test accuracy vs epsilon (mean of the splits; dotted: non-private)", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data-dir", default=None, help="shared data directory (UCI sets, shuttle)")
    p.add_argument("--datasets", nargs="+", default=[*protocol.TABLE_7_1, *TABLE_7_3_SETS])
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--epsilons", nargs="+", type=float, default=[*protocol.EPSILONS, math.inf])
    p.add_argument("--table-7-3-epsilons", nargs="+", type=float, default=[*protocol.EPSILONS_TABLE_7_3, math.inf])
    p.add_argument("--runs", type=int, default=protocol.N_RUNS, help="random 80/20 splits (5)")
    p.add_argument(
        "--starts",
        default="auto",
        choices=("auto", "normal", "grid"),
        help="start points of the sound default (the estimator's default: auto)",
    )
    p.add_argument(
        "--n-starts",
        default="auto",
        help="public starts of the sound default: an int or 'auto' (the estimator's default)",
    )
    p.add_argument(
        "--svm-full-runs-max-n",
        type=int,
        default=6000,
        help="sets with more training rows than this run the SVM baselines --svm-runs-large times",
    )
    p.add_argument("--svm-runs-large", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 1 run; the synthetic sets at 3 epsilons, shuttle10 / shuttle30 on 1 %% / 3 %% of shuttle",
    )
    p.add_argument(
        "--json", default=None, help="results file (default benchmarks/svdd/results/svdd_accuracy[_quick].json)"
    )
    p.add_argument(
        "--figure", default=None, help="plot file (default benchmarks/svdd/figures/svdd_accuracy[_quick].png)"
    )
    args = p.parse_args(argv)
    args.table_7_3_fractions = dict(TABLE_7_3_SETS)
    if args.quick:
        keep = (*SYNTHETIC, *TABLE_7_3_SETS)
        args.datasets = [d for d in args.datasets if d in keep] or list(keep)
        args.runs, args.epsilons = 1, [0.1, 10.0, math.inf]
        args.table_7_3_fractions = dict(QUICK_TABLE_7_3_SETS)
    suffix = "_quick" if args.quick else ""
    args.json = args.json or str(ROOT / "results" / f"{BENCHMARK}{suffix}.json")
    args.figure = args.figure or str(ROOT / "figures" / f"{BENCHMARK}{suffix}.png")
    if args.n_starts != "auto":
        args.n_starts = int(args.n_starts)
    unknown = [d for d in args.datasets if d not in protocol.TABLE_7_1 and d not in TABLE_7_3_SETS]
    if unknown:
        p.error(f"unknown data sets {unknown}; known: {[*protocol.TABLE_7_1, *TABLE_7_3_SETS]}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    needs_files = any(d not in SYNTHETIC for d in args.datasets)
    data_dir = resolve_data_dir(args.data_dir) if needs_files else None
    torch.set_num_threads(args.threads)
    total = sum(
        args.runs * len(args.methods) * len(args.table_7_3_epsilons if d in TABLE_7_3_SETS else args.epsilons)
        for d in args.datasets
    )
    raw, svc, start_modes = {}, {}, {}
    with tqdm(total=total, desc=BENCHMARK, unit="fit", file=sys.stderr, dynamic_ncols=True) as bar:
        for name in args.datasets:
            bar.set_postfix_str(name)
            raw[name], svc[name], start_modes[name] = run_set(name, args, data_dir, bar)
    results = summarise(raw)
    print_tables(results, svc)
    versus_weight = compare_with_weight(results)
    beats = {name: sum(flags.values()) > len(flags) / 2 for name, flags in versus_weight.items() if flags}
    check = table_7_3_check(results)
    headline = {name: {k: v["ours"] for k, v in cells.items() if k != "non-private"} for name, cells in check.items()}
    headline["beats_svm_weight_eps_le_1"] = f"{sum(beats.values())}/{len(beats)}" if beats else None
    print(f"\nTable 7.3 check (sound default vs thesis 'Proposed'): {check}")
    print(f"beats SVM WEIGHT at most epsilon <= 1: {beats}")
    print(f"headline: {headline}")
    plot(results, svc, Path(args.figure))
    notes = [
        "accuracy on the 20 % test split, mean and std over the runs; run r uses split seed r and model "
        "seed 1000 r + 1; the synthetic sets and the size-matched subsamples are redrawn per run",
        "features standardised with the training split (not private, as in the thesis; see "
        "svdd_protocol.UNSPECIFIED['preprocessing'])",
        f"proposed: sound default, starts={args.starts!r} (auto: the public grid of side 2 r_max when its release "
        "threshold is at most n^/200, else N(0, I) starts with n_starts='auto'; see start_modes), centre_fraction "
        "0.5, total epsilon; proposed_training_starts: the thesis' variant, epsilon on the centre and epsilon on the votes, "
        "NOT differentially private",
        "svm_weight: strict one-vs-all split (epsilon / K per classifier); svm_output: epsilon per answered "
        "query (the thesis' reference level, not a releasable model); both from one exact fit per split, "
        f"first {args.svm_runs_large} split(s) only on sets with more than {args.svm_full_runs_max_n} "
        "training rows",
        "svc: sklearn SVC(C = 1, gamma of the SVM columns), non-private",
    ]
    if args.quick:
        notes.append(
            "--quick: one split; shuttle10 / shuttle30 are "
            + " / ".join(f"{100 * f:g} %" for f in args.table_7_3_fractions.values())
            + " of the merged shuttle (a tenth of Table 7.3's subsamples), so the headline is not "
            "comparable one-to-one with the thesis"
        )
    payload = {
        "benchmark": BENCHMARK,
        "results": results,
        "headline": headline,
        "svc": {k: round(float(np.mean(v)), 4) for k, v in svc.items()},
        "table_7_3_check": check,
        "beats_svm_weight": versus_weight,
        "start_modes": start_modes,
        "settings": {
            "datasets": args.datasets,
            "methods": args.methods,
            "epsilons": [eps_key(e) for e in args.epsilons],
            "table_7_3_epsilons": [eps_key(e) for e in args.table_7_3_epsilons],
            "runs": args.runs,
            "starts": args.starts,
            "n_starts": args.n_starts,
            "threads": args.threads,
            "quick": args.quick,
            **({"table_7_3_fractions": args.table_7_3_fractions} if args.quick else {}),
        },
        **run_metadata(started),
        "notes": notes,
    }
    emit_json(payload, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
