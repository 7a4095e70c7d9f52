"""Sparse LGMLVQ and federated LVQ (Brinkrolf 2023, chapters 5 and 6; Tables 5.2 and 6.1).

Run it as ``python -m benchmarks.sparse_federated.sparse_federated``.

Sparse part (Table 5.2 shape): on UCI optdigits (5620 x 64) and a synthetic set with planted
strongly relevant, redundant and irrelevant features (``dp_proto.data.feature_relevance_set``,
3000 x 50, the shape of the dissertation's FRI set), stratified 5-fold CV, z-score fitted
on the training part, test accuracy at sparsity 0.5, 0.75 and 0.9, i.e. with
``k = round((1 - s) d)`` features kept, of

* ``SLGMLVQ``: ``SparseLGMLVQ(penalty=0.02, rank=5, omp_features=k, max_iter=300)``: a short
  proximal fit, simultaneous OMP to ``k`` features, the unpenalised refit on them;
* ``LR``: the ``k`` features that enter the L1-penalised logistic-regression path first
  (``liblinear``, one-vs-rest, ``C`` over ``[1e-5, 1]`` as in the dissertation), with a
  logistic regression refitted on them;
* ``RF``: a random forest's impurity importances on all features, a new forest on the top ``k``.

Federated part (Table 6.1 shape): UCI Image Segmentation (19 features) and optdigits (PCA 30
fitted on the training part), stratified 5-fold CV, z-score on the training part, five nodes
(``dp_proto.lvq.federated.node_splits``; scenario 1: a random split, scenario 2: node ``i``
without class ``i``); GMLVQ and LGMLVQ (one prototype per class) per node, merged by
``merge_models``; class-wise F1 averaged over the classes (macro F1) of the merged model,
the best single node and the model trained on the pooled training part. Private variant:
``DPGMLVQ`` per node (public bounds [-4, 4] of the z-scored features; the z-scoring itself is
fitted without noise and taken as public, so the guarantee covers the fits), scenario 1, at
epsilon 0.5, 1, 2 and 5 per node, in two recipes: the default budget split and an
init-heavy one (95% of epsilon on the noisy class means, one DP-SGD epoch; chosen on
satimage by ``benchmarks.studies.federated_private_nodes``, the headline); the merged
model is as private as its nodes (parallel composition).

The first Img. Seg. fold also runs scenario 1 (GMLVQ) with the nodes as 5 processes
(``launch_federated``, gloo on localhost) and checks that the merged model equals the
simulation's (headline ``federated_processes_equal_simulation``), with both wall times.

The figure ``figures/sparse_federated.png`` plots accuracy against sparsity and the private
federated F1 against epsilon; ``--plot-only`` redraws it from the stored JSON.

``--quick``: 2 folds instead of 5, optdigits subsampled to 1500 records for the sparse part,
FRI to 1000, and the private variant at epsilon 1 only (the headline key); same headline keys.

One JSON line per part (``{"benchmark": "sparse_federated", "part": "sparse" | "federated",
"results": ..., "headline": ..., ...}``), each written to
``benchmarks/sparse_federated/results/sparse_federated_<part>[_quick].json``.
Headline keys: ``sparse_optdigits_accuracy_at_0.9``, ``sparse_fri_accuracy_at_0.9``,
``federated_segmentation_gmlvq_f1`` ([scenario 1, scenario 2]),
``federated_segmentation_lgmlvq_f1``, ``federated_segmentation_dp_gmlvq_f1_eps1``,
``federated_processes_equal_simulation``.

Exit code 2 if the data directory or a data file is missing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.decomposition import PCA
from sklearn.ensemble import RandomForestClassifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score
from sklearn.model_selection import StratifiedKFold, train_test_split
from sklearn.multiclass import OneVsRestClassifier
from sklearn.preprocessing import StandardScaler
from tqdm import tqdm

from benchmarks.common import emit_json, load_benchmark_sets, machine_description, resolve_data_dir
from dp_proto.data import feature_relevance_set
from dp_proto.lvq import GMLVQ, LGMLVQ, SparseLGMLVQ
from dp_proto.lvq.distributed import federated_fit, launch_federated
from dp_proto.lvq.federated import node_splits
from dp_proto.lvq.private import DPGMLVQ

BENCHMARK = "sparse_federated"
HERE = Path(__file__).resolve().parent
SPARSITIES = (0.5, 0.75, 0.9)
EPSILONS = (0.5, 1.0, 2.0, 5.0)
N_NODES = 5
FOLDS, QUICK_FOLDS = 5, 2
QUICK_SAMPLES = {"optdigits": 1500, "fri": 1000}
PRIVATE_BOUNDS = (-4.0, 4.0)
#: The private node recipes, keyed by their result label: DPGMLVQ settings besides epsilon,
#: bounds and classes. "init-heavy" spends 95% of epsilon on the noisy class means, chosen
#: for federated nodes on satimage (python -m benchmarks.studies.federated_private_nodes),
#: not on these sets.
PRIVATE_RECIPES = {
    "DP-GMLVQ": {"sampling_rate": 0.05, "epochs": 20},
    "DP-GMLVQ init-heavy": {"sampling_rate": 0.05, "epochs": 1, "init_fraction": 0.95},
}

#: Brinkrolf (2023), Table 5.2 (FRI, m = 5) and Table 6.1 (Img. Seg., average F1), from targets.json.
TARGETS = json.loads((HERE / "targets.json").read_text(encoding="utf-8"))["targets"]


def zscore(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scaler = StandardScaler().fit(train)
    keep = scaler.scale_ > 1e-12
    return scaler.transform(train)[:, keep], scaler.transform(test)[:, keep]


def mean_std(values) -> list[float]:
    return [round(float(np.mean(values)), 4), round(float(np.std(values)), 4)]


# --------------------------------------------------------------------------- sparse part
def l1_entry_order(Xtr, ytr) -> np.ndarray:
    """Features in the order they enter the L1 logistic-regression path (one-vs-rest
    ``liblinear``, 30 values of ``C`` in ``[1e-5, 1]``; ties by the coefficients' size
    where they enter; features that never enter last)."""
    entry = np.full(Xtr.shape[1], np.inf)
    size = np.zeros(Xtr.shape[1])
    for step, C in enumerate(np.geomspace(1e-5, 1.0, 30)):
        model = OneVsRestClassifier(LogisticRegression(l1_ratio=1.0, C=C, solver="liblinear", max_iter=200))
        model.fit(Xtr, ytr)
        weight = np.abs(np.vstack([e.coef_ for e in model.estimators_])).sum(0)
        new = (weight > 0) & np.isinf(entry)
        entry[new], size[new] = step, weight[new]
    return np.lexsort((-size, entry))


def rf_order(Xtr, ytr, seed: int) -> np.ndarray:
    """Features by a random forest's impurity importance (100 trees), largest first."""
    ranking = RandomForestClassifier(n_estimators=100, random_state=seed, n_jobs=1).fit(Xtr, ytr)
    return np.argsort(ranking.feature_importances_)[::-1]


def lr_on(Xtr, ytr, Xte, yte, features) -> float:
    return float(LogisticRegression(max_iter=1000).fit(Xtr[:, features], ytr).score(Xte[:, features], yte))


def rf_on(Xtr, ytr, Xte, yte, features, seed: int) -> float:
    model = RandomForestClassifier(n_estimators=100, random_state=seed, n_jobs=1).fit(Xtr[:, features], ytr)
    return float(model.score(Xte[:, features], yte))


def slgmlvq_at(Xtr, ytr, Xte, yte, k: int, seed: int) -> float:
    model = SparseLGMLVQ(penalty=0.02, rank=5, omp_features=k, max_iter=300, random_state=seed).fit(Xtr, ytr)
    return float(model.score(Xte, yte))


def sparse_part(sets: dict, folds: int, seed: int) -> dict:
    results: dict = {}
    for name, (X, y) in sets.items():
        cv = StratifiedKFold(folds, shuffle=True, random_state=seed)
        scores: dict = {m: {str(s): [] for s in SPARSITIES} for m in ("SLGMLVQ", "LR", "RF")}
        for train, test in tqdm(list(cv.split(X, y)), desc=f"sparse {name}", unit="fold", file=sys.stderr):
            Xtr, Xte = zscore(X[train], X[test])
            d = Xtr.shape[1]
            by_lr, by_rf = l1_entry_order(Xtr, y[train]), rf_order(Xtr, y[train], seed)
            for s in SPARSITIES:
                k = max(1, round((1 - s) * d))
                scores["SLGMLVQ"][str(s)].append(slgmlvq_at(Xtr, y[train], Xte, y[test], k, seed))
                scores["LR"][str(s)].append(lr_on(Xtr, y[train], Xte, y[test], by_lr[:k]))
                scores["RF"][str(s)].append(rf_on(Xtr, y[train], Xte, y[test], by_rf[:k], seed))
        results[name] = {m: {s: mean_std(v) for s, v in per.items()} for m, per in scores.items()}
        results[name]["n_features"] = int(X.shape[1])
    return results


# ------------------------------------------------------------------------ federated part
def macro_f1(model, X, y, labels) -> float:
    return float(f1_score(y, model.predict(X), labels=labels, average="macro", zero_division=0))


def federated_fold(Xtr, ytr, Xte, yte, labels, seed: int, epsilons) -> dict:
    out: dict = {}
    for cls in (GMLVQ, LGMLVQ):
        pooled = cls(random_state=seed).fit(Xtr, ytr)
        out[f"{cls.__name__} vanilla"] = macro_f1(pooled, Xte, yte, labels)
        for scenario, drop in (("1", False), ("2", True)):
            nodes = node_splits(ytr, N_NODES, drop_class_per_node=drop, random_state=seed)
            fed = federated_fit(cls(), Xtr, ytr, nodes, classes=labels, random_state=seed)
            out[f"{cls.__name__} {scenario}"] = macro_f1(fed.merged, Xte, yte, labels)
            out[f"{cls.__name__} {scenario} best node"] = max(macro_f1(m, Xte, yte, labels) for m in fed.nodes)
    nodes = node_splits(ytr, N_NODES, random_state=seed)
    for eps in epsilons:
        for recipe, settings in PRIVATE_RECIPES.items():
            node = DPGMLVQ(epsilon=eps, bounds=PRIVATE_BOUNDS, classes=labels, **settings)
            fed = federated_fit(node, Xtr, ytr, nodes, random_state=seed)  # fresh noise at every node
            out[f"{recipe} eps={eps:g}"] = macro_f1(fed.merged, Xte, yte, labels)
            out[f"{recipe} eps={eps:g} mean node"] = float(np.mean([macro_f1(m, Xte, yte, labels) for m in fed.nodes]))
    return out


def processes_check(Xtr, ytr, labels, seed: int) -> dict:
    """Scenario 1 with GMLVQ once as 5 processes (launch_federated) and once simulated."""
    nodes = node_splits(ytr, N_NODES, random_state=seed)
    started = time.perf_counter()
    simulated = federated_fit(GMLVQ(), Xtr, ytr, nodes, classes=labels, random_state=seed)
    simulated_s = time.perf_counter() - started
    started = time.perf_counter()
    launched = launch_federated(GMLVQ(), [(Xtr[i], ytr[i]) for i in nodes], classes=labels, random_state=seed)
    launched_s = time.perf_counter() - started
    equal = bool(
        np.array_equal(launched.merged.prototypes_, simulated.merged.prototypes_)
        and np.array_equal(launched.merged.omega_, simulated.merged.omega_)
    )
    return {
        "processes": N_NODES,
        "merged_equal_to_simulation": equal,
        "simulation_s": round(simulated_s, 2),
        "processes_s": round(launched_s, 2),
        "slowest_node_s": {k: round(v, 3) for k, v in launched.seconds.items()},
        "release_bytes": launched.release_bytes,
    }


def federated_part(sets: dict, folds: int, seed: int, epsilons) -> dict:
    results: dict = {}
    for name, (X, y) in sets.items():
        labels = np.unique(y)
        cv = StratifiedKFold(folds, shuffle=True, random_state=seed)
        per_fold: dict = {}
        for train, test in tqdm(list(cv.split(X, y)), desc=f"federated {name}", unit="fold", file=sys.stderr):
            Xtr, Xte = zscore(X[train], X[test])
            if name == "optdigits":  # PCA 30 fitted on the training part, as in the dissertation
                pca = PCA(30, random_state=seed).fit(Xtr)
                Xtr, Xte = zscore(pca.transform(Xtr), pca.transform(Xte))
            # only the private nodes see epsilons; the public models are the same for every epsilon
            fold = federated_fold(Xtr, y[train], Xte, y[test], labels, seed, epsilons if name == "segmentation" else ())
            for key, value in fold.items():
                per_fold.setdefault(key, []).append(value)
            if name == "segmentation" and "processes" not in results:  # first fold: the nodes as processes
                results["processes"] = processes_check(Xtr, y[train], labels, seed)
        results[name] = {key: mean_std(v) for key, v in per_fold.items()}
    return results


# --------------------------------------------------------------------------------- figure
def plot(sparse: dict, federated: dict, path: Path) -> None:
    """Accuracy against sparsity (both sets, with the FRI targets) and private federated F1 against epsilon."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    levels = [str(v) for v in SPARSITIES]
    styles = {"SLGMLVQ": ("o-", "tab:blue"), "LR": ("s--", "tab:orange"), "RF": ("^:", "tab:green")}
    for ax, name in zip(axes[:2], ("optdigits", "fri"), strict=True):
        for method, (style, colour) in styles.items():
            values = [sparse["results"][name][method][v][0] for v in levels]
            ax.plot(SPARSITIES, values, style, color=colour, label=method)
            if name == "fri":
                paper = [TARGETS["sparse_fri"][method][v] for v in levels]
                ax.plot(SPARSITIES, paper, "x", color=colour, markersize=8, label=f"{method}, Brinkrolf (2023)")
        ax.set(title=f"{name}: test accuracy against sparsity", xlabel="sparsity (share of features removed)")
        ax.set_xticks(SPARSITIES)
        ax.legend(fontsize=7)
    seg = federated["results"]["segmentation"]
    eps = sorted(float(k.split("=")[1]) for k in seg if k.startswith("DP-GMLVQ eps=") and not k.endswith("node"))
    ax = axes[2]
    for recipe, colour in zip(PRIVATE_RECIPES, ("k", "tab:purple"), strict=True):
        if f"{recipe} eps={eps[0]:g}" not in seg:
            continue
        ax.plot(eps, [seg[f"{recipe} eps={e:g}"][0] for e in eps], "o-", color=colour, label=f"{recipe}: merged")
        ax.plot(
            eps, [seg[f"{recipe} eps={e:g} mean node"][0] for e in eps], "s--", color=colour, alpha=0.6,
            label=f"{recipe}: mean node",
        )  # fmt: skip
    ax.axhline(seg["GMLVQ 1"][0], color="tab:blue", ls=":", label="merged, non-private")
    ax.axhline(seg["GMLVQ vanilla"][0], color="tab:gray", ls="-.", label="pooled, non-private")
    ax.set(title="Img. Seg.: federated DP-GMLVQ", xlabel="epsilon per node", ylabel="macro F1", xscale="log")
    ax.set_xticks(eps, [f"{e:g}" for e in eps])
    ax.minorticks_off()
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------------- main
def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Sparse LGMLVQ and federated LVQ (Brinkrolf 2023, Tables 5.2 and 6.1).")
    p.add_argument("--data-dir", default=None, help="directory holding uci/*.tsv.gz ($DP_PROTO_DATA_DIR)")
    p.add_argument("--quick", action="store_true", help="2 folds, subsampled sparse sets, private variant at epsilon 1")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write X_<part>.json instead of results/sparse_federated_<part>.json")
    p.add_argument("--figure", default=None, help="plot (default figures/sparse_federated[_quick].png)")
    p.add_argument("--plot-only", action="store_true", help="only plot the stored results (of --quick with --quick)")
    args = p.parse_args(argv)
    args.figure = Path(args.figure or HERE / "figures" / f"{BENCHMARK}{'_quick' if args.quick else ''}.png")
    return args


def out_path(out: str | None, part: str, quick: bool) -> Path:
    suffix = "_quick" if quick else ""
    if out is None:
        return HERE / "results" / f"{BENCHMARK}_{part}{suffix}.json"
    base = Path(out)
    return base.with_name(f"{base.stem}_{part}{suffix}{base.suffix or '.json'}")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.plot_only:
        stored = [out_path(args.out, part, args.quick) for part in ("sparse", "federated")]
        missing = [str(p) for p in stored if not p.is_file()]
        if missing:
            print(f"no stored result {missing}: run the benchmark first", file=sys.stderr)
            return 2
        plot(*(json.loads(p.read_text(encoding="utf-8")) for p in stored), args.figure)
        print(f"wrote {args.figure}", file=sys.stderr)
        return 0
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", ConvergenceWarning)
    started = time.perf_counter()
    data = load_benchmark_sets(("optdigits", "segmentation"), resolve_data_dir(args.data_dir))
    folds = QUICK_FOLDS if args.quick else FOLDS
    X_fri, y_fri, kinds = feature_relevance_set(3000, random_state=args.seed)
    sparse_sets = {"optdigits": data["optdigits"], "fri": (X_fri, y_fri)}
    if args.quick:
        sparse_sets = {
            name: tuple(train_test_split(X, y, train_size=QUICK_SAMPLES[name], stratify=y, random_state=args.seed)[::2])
            for name, (X, y) in sparse_sets.items()
        }
    notes = [
        f"sparse: stratified {folds}-fold CV, z-score on the training part; k = round((1 - s) d) features",
        "sparse SLGMLVQ: SparseLGMLVQ(penalty=0.02, rank=5, omp_features=k, max_iter=300), refit on the k features",
        "sparse LR: the k features that enter the L1 logistic-regression path first (liblinear, one-vs-rest, 30 "
        "log-spaced C in [1e-5, 1]), logistic regression (L2, default C) refitted on them",
        "sparse RF: 100 trees, impurity importances on all features, 100 new trees on the top k",
        "fri: dp_proto.data.feature_relevance_set(3000): 3 strong, 10 redundant, 37 irrelevant features",
    ]
    if args.quick:
        notes.append(f"--quick: {folds} folds, sparse sets subsampled to {QUICK_SAMPLES}, private variant at epsilon 1")
    sparse = sparse_part(sparse_sets, folds, args.seed)
    machine = machine_description()
    payload = {
        "benchmark": BENCHMARK,
        "part": "sparse",
        "results": sparse,
        "headline": {
            "sparse_optdigits_accuracy_at_0.9": sparse["optdigits"]["SLGMLVQ"]["0.9"][0],
            "sparse_fri_accuracy_at_0.9": sparse["fri"]["SLGMLVQ"]["0.9"][0],
        },
        "targets": {"source": "Brinkrolf (2023), Table 5.2 (FRI, m = 5)", **TARGETS["sparse_fri"]},
        "machine": machine,
        "elapsed_s": round(time.perf_counter() - started, 1),
        "notes": notes,
    }
    emit_json(payload, out_path(args.out, "sparse", args.quick))
    sparse_payload = payload

    epsilons = (1.0,) if args.quick else EPSILONS
    federated = federated_part(
        {"segmentation": data["segmentation"], "optdigits": data["optdigits"]}, folds, args.seed, epsilons
    )
    seg = federated["segmentation"]
    payload = {
        "benchmark": BENCHMARK,
        "part": "federated",
        "results": federated,
        "headline": {
            "federated_segmentation_gmlvq_f1": [seg["GMLVQ 1"][0], seg["GMLVQ 2"][0]],
            "federated_segmentation_lgmlvq_f1": [seg["LGMLVQ 1"][0], seg["LGMLVQ 2"][0]],
            "federated_segmentation_dp_gmlvq_f1_eps1": seg["DP-GMLVQ init-heavy eps=1"][0],
            "federated_segmentation_dp_gmlvq_default_split_f1_eps1": seg["DP-GMLVQ eps=1"][0],
            "federated_processes_equal_simulation": federated["processes"]["merged_equal_to_simulation"],
        },
        "targets": {
            "source": "Brinkrolf (2023), Table 6.1 (Img. Seg., average class-wise F1)",
            **TARGETS["federated_segmentation"],
        },
        "machine": machine,
        "elapsed_s": round(time.perf_counter() - started, 1),
        "notes": [
            f"federated: stratified {folds}-fold CV, z-score on the training part (optdigits: then PCA 30 and "
            "z-score again, fitted on the training part), 5 nodes (node_splits), one prototype per class, macro F1",
            "private: DPGMLVQ per node (bounds [-4, 4] of the z-scored features), two recipes: the default "
            "split (sampling_rate=0.05, epochs=20, init_fraction=0.2) and init-heavy (epochs=1, init_fraction=0.95, "
            "chosen on satimage by benchmarks.studies.federated_private_nodes; the headline), "
            "scenario 1, merged weighted by the noisy class counts; the z-scoring is taken as public",
        ],
    }
    emit_json(payload, out_path(args.out, "federated", args.quick))
    plot(sparse_payload, payload, args.figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
