"""Probabilistic outputs of pairwise GMLVQ and the reject option (Brinkrolf 2023, section 4.6, Tables 4.2-4.4).

Run it as ``python -m benchmarks.confidence.confidence``.

For every data set (UCI Image Segmentation and Letter): the accuracy without reject and
the area under the accuracy-reject curve (ARC) of

* ``PKPD``, ``HT``, ``WLW1``, ``WLW2``, ``Voting``: one :class:`dp_proto.lvq.PairwiseGMLVQ`
  per fold (one-vs-one GMLVQ, one prototype per class, Platt sigmoids fitted on a
  stratified fifth of the training part, ``calibration_fraction=0.2``); its pairwise
  matrix ``pairwise_proba`` is computed once per fold and coupled by every method of
  :mod:`dp_proto.lvq.coupling` (HT weighted by the pair sample counts ``pair_counts_``);
  certainty ``max_k p_k`` (:func:`dp_proto.lvq.max_proba`; for Voting the largest vote
  share, not a calibrated probability; Voting has no ARC in Table 4.3);
* ``GMLVQ+RelSim`` and ``LGMLVQ+RelSim``: multi-class GMLVQ / LGMLVQ, one prototype per
  class, on the whole training part, certainty RelSim (:func:`dp_proto.lvq.relsim_score`);

beside Brinkrolf (2023), Tables 4.2 (accuracy) and 4.3 (ARC area), and the training and
prediction seconds per fold beside Table 4.4 (Matlab on 2 x Xeon X5690; ours: torch on
one thread, ``torch.set_num_threads(1)``). ``timing`` gives, per fold, the pairwise fit
divided by ``GMLVQ fit x K / 10`` (``K = c(c-1)/2`` pairs): the issue's target is a
ratio of at most 1 (the pairs are trained jointly in one batched L-BFGS run).

Protocol (Brinkrolf 2023, section 4.6; thesis digest section 3.5): 10 times repeated
stratified 10-fold cross-validation; z-scoring fitted on the training part, features of
zero variance there dropped; no PCA (19 and 16 features); ARC by
:func:`dp_proto.lvq.accuracy_reject_curve` / :func:`dp_proto.lvq.arc_area` (every
distinct certainty as threshold, the point (1, 1) added, trapezoid rule), per fold, then
mean (std) over the folds.

Certified robustness (``segmentation_certified_fraction_at_radius_0.1``): for the
multi-class GMLVQ with the RelSim reject option at the fixed threshold ``theta = 0.1``
(``CERTIFY_THETA``), the share of test points that are accepted and certified
(:func:`dp_proto.lvq.certify`, ``norm="euclidean"``) against every perturbation of
Euclidean norm 0.1 in z-scored units; mean over the folds. The reject rate at that
threshold is reported beside it (``certified.reject_rate``).

Private variant (``private``): :class:`dp_proto.lvq.private.DPPairwiseGMLVQ` (PKPD, its
defaults) at epsilon 1 and 5 (delta 1e-5, public bounds [-4, 4] of the z-scored features)
on the first ``--private-folds`` folds (default 10, the first repeat: the DP fits take
10-20 s each); its accuracy and ARC area beside the non-private ones. Without that
estimator the output says so in ``notes`` and carries no private numbers; the headline
never carries them.

``--quick`` runs 1 repeat of 5-fold CV (instead of 10 x 10) with ``max_iter`` 200, the
private variant on 1 fold of Image Segmentation only (none on Letter) and, on Letter, a
stratified subsample of 4000 of the 20000 points; same headline keys; it writes
``confidence_<dataset>_quick.json`` (about 1-2 minutes on 2 idle cores).

Usage::

    python -m benchmarks.confidence.confidence --data-dir ../shared/data
    python -m benchmarks.confidence.confidence --data-dir ../shared/data --datasets segmentation
    python -m benchmarks.confidence.confidence --data-dir ../shared/data --quick

One JSON line per data set (``{"benchmark": "confidence", "dataset": .., "results": {METHOD:
{"accuracy": [mean, std], "arc_area": [mean, std]}}, "headline": {...}, "timing": ...,
"targets": ..., "notes": [...], "meta": ...}``), each also written to
``benchmarks/confidence/results/confidence_<dataset>[_quick].json`` (``--out X.json``
writes ``X_<dataset>.json``; a CV other than 10x10 outside ``--quick`` appends it:
``confidence_letter_2x10.json``). The headline keys of
the issue (``segmentation_pkpd_accuracy``, ...) are in the headline of their data set's
line; the keys of the other data set are left out of it.

Exit code 2 if the data directory or a data file is missing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import RepeatedStratifiedKFold, train_test_split
from tqdm import tqdm

from benchmarks.common import emit_json, load_benchmark_sets, machine_description, resolve_data_dir
from dp_proto.lvq import GMLVQ, LGMLVQ, PairwiseGMLVQ, arc_area, certify, max_proba, relsim_score
from dp_proto.lvq.coupling import couple

BENCHMARK = "confidence"
HERE = Path(__file__).resolve().parent
DATASETS = ("segmentation", "letter")
COUPLINGS = {"PKPD": "pkpd", "HT": "ht", "WLW1": "wlw1", "WLW2": "wlw2", "Voting": "voting"}
METHODS = (*COUPLINGS, "GMLVQ+RelSim", "LGMLVQ+RelSim")
CERTIFY_THETA = 0.1
CERTIFY_RADIUS = 0.1
QUICK_REPEATS, QUICK_FOLDS, QUICK_MAX_ITER, QUICK_LETTER_SAMPLES = 1, 5, 200, 4000
#: The private variant: DPPairwiseGMLVQ (PKPD) at these budgets, delta and public bounds
#: of the z-scored features (records outside are clipped by the estimator).
PRIVATE_EPSILONS = (1.0, 5.0)
PRIVATE_DELTA = 1e-5
PRIVATE_BOUNDS = (-4.0, 4.0)

#: Brinkrolf (2023), Table 4.2 (accuracy without reject) and 4.3 (ARC area), means.
TARGETS = {
    "segmentation": {
        "accuracy": {
            "HT": 0.952,
            "PKPD": 0.953,
            "WLW1": 0.952,
            "WLW2": 0.953,
            "Voting": 0.95,
            "GMLVQ+RelSim": 0.913,
            "LGMLVQ+RelSim": 0.937,
        },
        "arc_area": {
            "HT": 0.9946,
            "PKPD": 0.9923,
            "WLW1": 0.9946,
            "WLW2": 0.9941,
            "GMLVQ+RelSim": 0.9847,
            "LGMLVQ+RelSim": 0.9922,
        },
    },
    "letter": {
        "accuracy": {
            "HT": 0.853,
            "PKPD": 0.849,
            "WLW1": 0.853,
            "WLW2": 0.85,
            "Voting": 0.843,
            "GMLVQ+RelSim": 0.702,
            "LGMLVQ+RelSim": 0.877,
        },
        "arc_area": {
            "HT": 0.9668,
            "PKPD": 0.9666,
            "WLW1": 0.9668,
            "WLW2": 0.9676,
            "GMLVQ+RelSim": 0.9173,
            "LGMLVQ+RelSim": 0.9856,
        },
    },
}
#: Brinkrolf (2023), Table 4.4: mean seconds (Matlab, 2 x Xeon X5690).
TARGET_TIMES = {
    "segmentation": {
        "train": {"pairwise": 9.4710, "GMLVQ": 2.6320, "LGMLVQ": 4.0310},
        "test": {"HT": 3.3000, "PKPD": 0.0030, "WLW1": 0.0064, "WLW2": 0.0093, "GMLVQ": 0.0006, "LGMLVQ": 0.0004},
    },
    "letter": {
        "train": {"pairwise": 105.7960, "GMLVQ": 26.2580, "LGMLVQ": 78.7070},
        "test": {"HT": 186.0, "PKPD": 0.0443, "WLW1": 0.1300, "WLW2": 0.1730, "GMLVQ": 0.0095, "LGMLVQ": 0.0051},
    },
}


def zscore(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """z-score fitted on ``train``; features of zero variance there are dropped."""
    mean, std = train.mean(0), train.std(0)
    keep = std > 1e-12
    return (train[:, keep] - mean[keep]) / std[keep], (test[:, keep] - mean[keep]) / std[keep]


def ht_weights(model: PairwiseGMLVQ) -> torch.Tensor:
    """HT's symmetric pair weights ``n_lm`` (the training samples of every pair)."""
    c = len(model.classes_)
    n = torch.zeros((c, c), dtype=torch.float64)
    pairs = torch.as_tensor(model.pairs_)
    counts = torch.as_tensor(model.pair_counts_, dtype=torch.float64)
    n[pairs[:, 0], pairs[:, 1]] = counts
    n[pairs[:, 1], pairs[:, 0]] = counts
    return n


def private_estimator():
    """``dp_proto.lvq.private.DPPairwiseGMLVQ`` if it exists, else ``None``."""
    try:
        from dp_proto.lvq import private
    except ImportError:
        return None
    return getattr(private, "DPPairwiseGMLVQ", None)


def run_fold(Xtr, ytr, Xte, yte, *, max_iter: int, seed: int) -> dict:
    """Correctness, certainty and seconds of every method on one fold."""
    out: dict[str, dict] = {}
    times: dict[str, float] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        t0 = time.perf_counter()
        pair = PairwiseGMLVQ("pkpd", calibration_fraction=0.2, max_iter=max_iter, random_state=seed).fit(Xtr, ytr)
        times["train_pairwise"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        R = torch.as_tensor(pair.pairwise_proba(Xte))
        times["test_pairwise_matrix"] = time.perf_counter() - t0
        n = ht_weights(pair)
        for name, method in COUPLINGS.items():
            t0 = time.perf_counter()
            p = couple(R, method, n=n).numpy()
            times[f"test_{name}"] = times["test_pairwise_matrix"] + time.perf_counter() - t0
            out[name] = {"correct": pair.classes_[p.argmax(1)] == yte, "certainty": max_proba(p)}
        for name, cls in (("GMLVQ", GMLVQ), ("LGMLVQ", LGMLVQ)):
            t0 = time.perf_counter()
            model = cls(prototypes_per_class=1, max_iter=max_iter, random_state=seed).fit(Xtr, ytr)
            times[f"train_{name}"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            pred = model.predict(Xte)
            certainty = relsim_score(model, Xte)
            times[f"test_{name}"] = time.perf_counter() - t0
            out[f"{name}+RelSim"] = {"correct": pred == yte, "certainty": np.asarray(certainty)}
            if name == "GMLVQ":
                accepted = np.asarray(certainty) >= CERTIFY_THETA
                certified = np.asarray(certify(model, Xte, CERTIFY_THETA, CERTIFY_RADIUS, norm="euclidean"))
                out["certified"] = {
                    "fraction": float(certified.mean()),
                    "reject_rate": float(1.0 - accepted.mean()),
                    "certified_correct": float((certified & (pred == yte)).mean()),
                }
    return {"methods": out, "times": times, "n_classes": len(pair.classes_)}


def mean_std(values, digits: int = 4) -> list[float]:
    return [round(float(np.mean(values)), digits), round(float(np.std(values)), digits)]


def run_private(dp_cls, Xtr, ytr, Xte, yte, classes, *, seed: int) -> dict[str, dict[str, float]]:
    """DP pairwise GMLVQ (PKPD) at every epsilon of ``PRIVATE_EPSILONS`` on one fold."""
    out = {}
    for eps in PRIVATE_EPSILONS:
        t0 = time.perf_counter()
        model = dp_cls(epsilon=eps, delta=PRIVATE_DELTA, bounds=PRIVATE_BOUNDS, classes=classes, noise_seed=None)
        model.fit(Xtr, ytr)
        fit_s = time.perf_counter() - t0
        p = model.predict_proba(Xte)
        correct = model.classes_[p.argmax(1)] == yte
        out[f"{eps:g}"] = {
            "accuracy": float(correct.mean()),
            "arc_area": arc_area(max_proba(p), correct),
            "fit_s": fit_s,
            "epsilon_": float(model.epsilon_),
        }
    return out


def evaluate(
    name: str,
    X: np.ndarray,
    y: np.ndarray,
    *,
    repeats: int,
    folds: int,
    max_iter: int,
    seed: int,
    private_folds: int = 0,
) -> dict:
    """Repeated stratified k-fold CV; per method accuracy and ARC area (mean, std over folds)."""
    cv = RepeatedStratifiedKFold(n_splits=folds, n_repeats=repeats, random_state=seed)
    acc: dict[str, list[float]] = {m: [] for m in METHODS}
    area: dict[str, list[float]] = {m: [] for m in METHODS}
    times: dict[str, list[float]] = {}
    certified: dict[str, list[float]] = {"fraction": [], "reject_rate": [], "certified_correct": []}
    ratio: list[float] = []
    # untimed warm-up (torch's first calls pay one-off costs)
    warm = np.concatenate([np.flatnonzero(y == c)[:10] for c in np.unique(y)])
    Xw, _ = zscore(X[warm], X[warm])
    run_fold(Xw, y[warm], Xw, y[warm], max_iter=2, seed=seed)
    dp_cls = private_estimator() if private_folds > 0 else None
    private: dict[str, dict[str, list[float]]] = {}
    with tqdm(total=cv.get_n_splits(), desc=name, unit="fold", file=sys.stderr, dynamic_ncols=True) as bar:
        for i, (train, test) in enumerate(cv.split(X, y)):
            Xtr, Xte = zscore(X[train], X[test])
            fold = run_fold(Xtr, y[train], Xte, y[test], max_iter=max_iter, seed=seed)
            if dp_cls is not None and i < private_folds:
                for eps, r in run_private(dp_cls, Xtr, y[train], Xte, y[test], np.unique(y), seed=seed + i).items():
                    rec = private.setdefault(eps, {"accuracy": [], "arc_area": [], "fit_s": [], "epsilon_": []})
                    for k, v in r.items():
                        rec[k].append(v)
            for m in METHODS:
                r = fold["methods"][m]
                acc[m].append(float(r["correct"].mean()))
                area[m].append(arc_area(r["certainty"], r["correct"]))
            for k, v in fold["times"].items():
                times.setdefault(k, []).append(v)
            for k, v in fold["methods"]["certified"].items():
                certified[k].append(v)
            c = fold["n_classes"]
            t = fold["times"]
            ratio.append(t["train_pairwise"] / (t["train_GMLVQ"] * (c * (c - 1) / 2) / 10))
            bar.set_postfix_str(f"PKPD acc={acc['PKPD'][-1]:.3f} pair fit={t['train_pairwise']:.1f}s")
            bar.update(1)
    results = {m: {"accuracy": mean_std(acc[m], 4), "arc_area": mean_std(area[m], 5)} for m in METHODS}
    return {
        "results": results,
        "times": {k: [round(float(np.mean(v)), 5), round(float(np.std(v)), 5)] for k, v in times.items()},
        "ratio": ratio,
        "certified": {k: mean_std(v, 4) for k, v in certified.items()},
        "n_classes": c,
        "private": {
            f"DP-PKPD eps={eps}": {
                "accuracy": mean_std(r["accuracy"], 4),
                "arc_area": mean_std(r["arc_area"], 5),
                "fit_s": mean_std(r["fit_s"], 3),
                "epsilon_certified": round(max(r["epsilon_"]), 4),
                "n_folds": len(r["accuracy"]),
            }
            for eps, r in private.items()
        },
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Pairwise GMLVQ probabilities and the reject option (Brinkrolf 2023, Tables 4.2-4.4)."
    )
    p.add_argument("--data-dir", default=None, help="directory holding uci/*.tsv.gz ($DP_PROTO_DATA_DIR)")
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_REPEATS}x{QUICK_FOLDS}-fold CV, max_iter {QUICK_MAX_ITER}, Letter subsampled to "
        f"{QUICK_LETTER_SAMPLES} points",
    )
    p.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    p.add_argument("--repeats", type=int, default=10, help="repeats of the k-fold split (default 10)")
    p.add_argument("--folds", type=int, default=10, help="k of the stratified k-fold split (default 10)")
    p.add_argument("--max-iter", type=int, default=500, help="L-BFGS iterations of every LVQ fit")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--private-folds",
        type=int,
        default=10,
        help="run the private variant (DPPairwiseGMLVQ at epsilon 1 and 5) on the first N folds only "
        "(default 10, the first repeat; 0: off; --quick: 1)",
    )
    p.add_argument(
        "--out",
        default=None,
        help="JSON file stem (default benchmarks/confidence/results/confidence[_quick].json; "
        "the data set is appended: confidence_<dataset>[_quick].json)",
    )
    args = p.parse_args(argv)
    if args.repeats < 1 or args.max_iter < 1 or args.folds < 2:
        p.error("--repeats and --max-iter must be >= 1, --folds >= 2")
    if args.quick:
        args.repeats, args.folds, args.max_iter = QUICK_REPEATS, QUICK_FOLDS, min(args.max_iter, QUICK_MAX_ITER)
        args.private_folds = min(args.private_folds, 1)
    if args.out is None:
        args.out = str(HERE / "results" / f"{BENCHMARK}{'_quick' if args.quick else ''}.json")
    return args


def out_path(out: str, dataset: str, quick: bool, protocol: str = "") -> str:
    """``out`` with ``_<dataset>`` appended to its stem (before ``_quick``), and ``_RxK``
    (``protocol``) where the CV is not the dissertation's 10x10 outside ``--quick``."""
    path = Path(out)
    stem = path.stem[: -len("_quick")] if quick and path.stem.endswith("_quick") else path.stem
    tail = "_quick" if quick else (f"_{protocol}" if protocol else "")
    return str(path.with_name(f"{stem}_{dataset}{tail}{path.suffix or '.json'}"))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data_dir = resolve_data_dir(args.data_dir)
    datasets = list(dict.fromkeys(args.datasets))
    data = load_benchmark_sets(datasets, data_dir)  # every file first: fail early
    torch.set_num_threads(1)
    machine = machine_description()
    print(f"machine: {machine}")
    dp_cls = private_estimator()
    for name in datasets:
        started = time.perf_counter()
        X, y = data[name]
        notes = [
            f"protocol: {args.repeats}x{args.folds}-fold stratified CV (Brinkrolf 2023: 10x10); z-score fitted on "
            "the training part, zero-variance features dropped; one prototype per class; L-BFGS "
            f"max_iter={args.max_iter}, float64",
            "pairwise: one PairwiseGMLVQ(calibration_fraction=0.2) per fold (4/5 of the training part train the "
            "pairs, 1/5 fits the Platt sigmoids); its pairwise_proba coupled by each method of "
            "dp_proto.lvq.coupling (HT weighted by pair_counts_); certainty max_k p_k (Voting: the largest vote "
            "share; Table 4.3 has no Voting row)",
            "GMLVQ+RelSim, LGMLVQ+RelSim: multi-class estimators on the whole training part, certainty "
            "dp_proto.lvq.relsim_score",
            "ARC: dp_proto.lvq.arc_area per fold (every distinct certainty a threshold, (1, 1) added, trapezoid "
            "rule), mean (std) over the folds",
            "times: wall seconds per fold on one torch thread (torch.set_num_threads(1)); test_<coupling> = "
            "pairwise_proba on the test fold + the coupling; test_GMLVQ/LGMLVQ = predict + relsim_score; "
            "Table 4.4 is Matlab on 2 x Xeon X5690 (its HT row timed an iterative implementation per sample)",
            f"certified: multi-class GMLVQ, RelSim reject at theta={CERTIFY_THETA} (fixed), the share of test "
            f"points accepted and certified (dp_proto.lvq.certify, norm='euclidean') at radius {CERTIFY_RADIUS} "
            "in z-scored units; certified_correct: of those, also correctly classified",
        ]
        key = name
        if args.quick:
            if name == "letter":
                X, _, y, _ = train_test_split(X, y, train_size=QUICK_LETTER_SAMPLES, stratify=y, random_state=args.seed)
            key = f"{name} (quick)"
            notes.append(
                f"--quick: {args.repeats}x{args.folds}-fold CV instead of 10x10, max_iter {args.max_iter}"
                + (
                    f", a stratified subsample of {QUICK_LETTER_SAMPLES} of the 20000 points"
                    if name == "letter"
                    else ""
                )
                + "; not comparable one-to-one with the targets"
            )
        elif (args.repeats, args.folds) != (10, 10):
            key = f"{name} ({args.repeats}x{args.folds} folds)"
            notes.append(f"{args.repeats}x{args.folds}-fold CV instead of the dissertation's 10x10")
        print(f"\n{key}: {X.shape[0]} samples, {X.shape[1]} features, {len(np.unique(y))} classes", flush=True)
        ev = evaluate(
            key,
            X,
            y,
            repeats=args.repeats,
            folds=args.folds,
            max_iter=args.max_iter,
            seed=args.seed,
            private_folds=0 if args.quick and name == "letter" else args.private_folds,
        )
        results = ev["results"]
        c = ev["n_classes"]
        pairs = c * (c - 1) // 2
        ratio = ev["ratio"]
        timing = {
            "seconds": ev["times"],
            "paper_seconds": TARGET_TIMES[name],
            "n_pairs": pairs,
            "pairwise_over_gmlvq_times_pairs_over_10": [
                round(float(np.mean(ratio)), 3),
                round(float(np.median(ratio)), 3),
                round(float(np.max(ratio)), 3),
            ],
            "target_ratio_at_most": 1.0,
            "ratio_note": "train_pairwise / (train_GMLVQ x K / 10) per fold: mean, median, max",
        }
        if dp_cls is None:
            notes.append(
                "private variant (DP-GMLVQ pairs at epsilon 1 and 5) not run: dp_proto.lvq.private has no "
                "DPPairwiseGMLVQ"
            )
        elif not ev["private"]:
            notes.append(f"private variant not run (--private-folds {args.private_folds})")
        else:
            n_private = next(iter(ev["private"].values()))["n_folds"]
            notes.append(
                f"private variant: dp_proto.lvq.private.DPPairwiseGMLVQ (PKPD, estimator defaults: DP-SGD pairs, "
                f"DP Platt on a calibration part, DP class-mean initialisation) at epsilon {PRIVATE_EPSILONS}, "
                f"delta {PRIVATE_DELTA:g}, public bounds {PRIVATE_BOUNDS} of the z-scored features, on the first "
                f"{n_private} folds only (the DP fits are slower); the z-scoring itself is fitted on the training "
                "part without noise (taken as public, as for the non-private models): the guarantee covers the "
                "model fit, not the preprocessing"
            )
            for k, r in ev["private"].items():
                print(f"{k}: accuracy {r['accuracy'][0]:.4f}, ARC area {r['arc_area'][0]:.4f} ({r['n_folds']} folds)")
        print(f"\n{'method':<15} {'accuracy':>16} {'paper':>6} {'ARC area':>18} {'paper':>7}")
        for m in METHODS:
            a, s = results[m]["accuracy"]
            ar, ars = results[m]["arc_area"]
            pa = TARGETS[name]["accuracy"].get(m)
            pr = TARGETS[name]["arc_area"].get(m)
            print(
                f"{m:<15} {f'{a:.4f} ({s:.4f})':>16} {pa if pa is not None else '—':>6} "
                f"{f'{ar:.4f} ({ars:.4f})':>18} {pr if pr is not None else '—':>7}"
            )
        print("\nseconds per fold (mean), ours vs Table 4.4:")
        for k, (mean, _) in ev["times"].items():
            print(f"  {k:<22} {mean:.4f}")
        print(
            f"pairwise fit / (GMLVQ fit x {pairs}/10): mean {timing['pairwise_over_gmlvq_times_pairs_over_10'][0]}, "
            f"max {timing['pairwise_over_gmlvq_times_pairs_over_10'][2]} (target <= 1)"
        )
        print(
            f"GMLVQ certified at radius {CERTIFY_RADIUS} (theta {CERTIFY_THETA}): {ev['certified']['fraction'][0]:.4f} "
            f"(reject rate {ev['certified']['reject_rate'][0]:.4f})"
        )
        headline = {
            f"{name}_pkpd_accuracy": results["PKPD"]["accuracy"][0],
            f"{name}_pkpd_arc_area": results["PKPD"]["arc_area"][0],
        }
        if name == "segmentation":
            headline["segmentation_certified_fraction_at_radius_0.1"] = ev["certified"]["fraction"][0]
        payload = {
            "benchmark": BENCHMARK,
            "dataset": key,
            "results": results,
            "headline": headline,
            "timing": timing,
            **({"private": ev["private"]} if ev["private"] else {}),
            "certified": {
                "model": "GMLVQ+RelSim",
                "theta": CERTIFY_THETA,
                "radius": CERTIFY_RADIUS,
                "norm": "euclidean (z-scored units)",
                **ev["certified"],
            },
            "targets": {
                "source": "Brinkrolf (2023), Tables 4.2, 4.3 and 4.4",
                **TARGETS[name],
                "times": TARGET_TIMES[name],
            },
            "protocol": {
                "n_samples": int(X.shape[0]),
                "n_features": int(X.shape[1]),
                "n_classes": c,
                "repeats": args.repeats,
                "folds": args.folds,
                "max_iter": args.max_iter,
                "seed": args.seed,
                "calibration_fraction": 0.2,
                "torch_threads": 1,
                "private_folds": args.private_folds,
            },
            "machine": machine,
            "load_avg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "elapsed_s": round(time.perf_counter() - started, 1),
            "notes": notes,
        }
        protocol = "" if (args.repeats, args.folds) == (10, 10) else f"{args.repeats}x{args.folds}"
        out = out_path(args.out, name, args.quick, protocol)
        print(f"results: {out}")
        emit_json(payload, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
