"""Accuracy of (differentially private) learning from label proportions over traffic sensor nodes.

Reproduces the evaluation of Sachweh, Boiar & Liebig (2021), "Differentially private learning
from label proportions" (Sec. 4, Figures 2 and 3) on the VicRoads SCATS counts
(Melbourne, October 2006; the paper used Dublin SCATS, January 2013, which is not public
here): windows of w = 5 fifteen-minute counts, label = flow class of the next count
(r = 1, the six classes of :data:`dp_proto.data.sensors.FLOW_BIN_EDGES`), c = 3 nearest
neighbours per node, 10-fold cross-validation over contiguous time blocks.

Settings

* ``four_nodes`` -- the paper's "4 sensor nodes and their 3 closest neighbors": the
  first group (in detector order) of 4 detectors that are exactly each other's 3 nearest
  neighbours by haversine distance in the whole network (:func:`mutual_group`). In this
  file such groups are the approaches of one intersection; the first is site 970
  (Warrigal Rd / High Street Rd), approaches 1, 3, 5, 7.
* ``network`` -- every detector of the file (138 after the loader's drops), c = 3.

Sweeps (as the paper): batch size b in {8, 16, 32, 64, 128} at k = 16 and cluster count
k in {8, 16, 32, 64} at b = 50, both non-private (LLP) and private at epsilon = 0.1
(p-LLP, Figure 2); epsilon in {0.01, 0.05, 0.1, 0.5, 1, 5} at b = 32, k = 16 (Figure 3),
p-LLP with the paper's clipped release (``estimator="clipped"``, the default; every node
fits its own model to its exact proportions, which never leave it) and, secondary, the
unbiased release (``estimator="unbiased"``), the algorithm as the paper writes it (the own
model also fitted to the node's noisy release, ``own_proportions="released"``) and that
with the unbiased release (``VARIANTS``). On the whole network the epsilon sweep and
the non-private b = 32, k = 16 point by default, on ``--network-folds`` (5) of the folds
spread evenly over the month and ``--network-noise-seeds`` (1) seed: an LLP run over 138
nodes takes 12-18 s on one core, so the full 10 x 3 would exceed the run-time budget
(``--network-sweeps`` adds the b and k sweeps there).

The bag learner (``LLPConfig(learner="bag")``, ``dp_proto.llp.bags``): a small network per
node trained directly on the bags' proportions, on the 4 nodes, non-private against b and
private against epsilon in {0.01, 0.1, 1} at b = 32, on the node's own proportions
(``bag_own``), on its own and its neighbours' (``bag_all``), and on the node's own noisy
release alone (``bag_released``: the unbiased release and the cross-entropy bag loss, linear
in the proportions; the model is then label-DP at the release's epsilon), ``--bag-seeds``
(1) seed per configuration and fold; headline ``bag_llp_accuracy_b32``,
``bag_pllp_accuracy_b32_eps0.1`` (and ``bag_all_...``, ``bag_released_...``).

Baseline: centralised kNN (k = 16, all labels): the training windows of all nodes of the
setting pooled, every node's test windows predicted (on the whole network a seeded random
``--network-knn-fraction`` (5 %) of the test windows of every fold, as brute-force kNN
over ~360k training windows costs ~3-7 ms per test window on one core).

Every configuration runs ``--noise-seeds`` times per fold (seed ``1000 fold + s``: the
Laplace noise through the explicit opt-in ``noise_seed``, so that the numbers are
reproducible -- such releases are not private against whoever knows the seed, and their
ledgers say ``"noise": "reproducible"`` -- and, as ``seed``, the k-means seeding and the
local-search starts; the public recording period of the data file is the ``time_range``
of every run); the reported accuracy is
the pooled accuracy over the nodes' test windows (majority vote of the c + 1 models),
averaged over seeds, then over folds. The own-model-only accuracy is reported as a
secondary number.

Prints tables, writes ``benchmarks/llp/results/llp_accuracy.json`` and
``benchmarks/llp/figures/llp_accuracy.png`` and ends with one JSON line
``{"benchmark": "llp_accuracy", "results": ..., "headline": ...}``.

    python -m benchmarks.llp.accuracy --data-dir ../shared/data
    python -m benchmarks.llp.accuracy --data-dir ../shared/data --quick   # under a minute

``--quick`` runs the 4-node setting on 3 folds with 1 seed, b in {8, 32}, k in {8, 16} and
epsilon in {0.01, 0.1, 1}, and on the whole network only the one timed run of the headline's
``whole_network_seconds`` (b = 32, k = 16, epsilon = 0.1, fold 0 of the 3, seed 0; no sweeps, no
kNN there); it writes ``llp_accuracy_quick.json`` / ``.png`` unless told otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from benchmarks.common import (
    die,
    emit_json,
    resolve_data_dir,
    run_metadata,
)
from dp_proto._neighbours import knn_predict
from dp_proto.data.geometry import nearest_neighbours
from dp_proto.data.loaders.scats import load_scats_counts
from dp_proto.data.sensors import FLOW_BIN_EDGES, node_datasets, time_block_folds
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.llp import evaluate, simulate_network

BENCHMARK = "llp_accuracy"
ROOT = Path(__file__).resolve().parent
NUM_CLASSES = len(FLOW_BIN_EDGES)
C_NEIGHBOURS = 3
WINDOW, HORIZON = 5, 1
GAP = WINDOW + HORIZON - 1  # training windows sharing a count with a test window are left out
KNN_K = 16
BATCH_SIZES = (8, 16, 32, 64, 128)
CLUSTER_COUNTS = (8, 16, 32, 64)
EPSILONS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0)
B_AT_K_SWEEP, K_AT_B_SWEEP = 50, 16
B_MAIN, K_MAIN, EPS_MAIN = 32, 16, 0.1
SETTING_LABELS = {"four_nodes": "4 nodes", "network": "whole network"}
#: Secondary p-LLP variants of the 4-node epsilon sweep: "ESTIMATOR[+released]" (the
#: own model on the node's noisy release instead of its exact proportions) -> (JSON
#: key, table column, plot label, plot style).
VARIANTS = {
    "unbiased": ("pllp_unbiased", "unbiased", "p-LLP (unbiased release)", "^--"),
    "clipped+released": (
        "pllp_released_own",
        "as paper",
        "p-LLP (own model on its noisy release, as the paper)",
        "v--",
    ),
    "unbiased+released": ("pllp_unbiased_released_own", "paper+unb", "p-LLP (as the paper, unbiased release)", "D:"),
}
VARIANT_COLOURS = ("tab:orange", "tab:red", "tab:purple")
#: The bag learner (dp_proto.llp.bags, LLPConfig(learner="bag")), as "@bag-SOURCES" on the
#: estimator of a configuration -> (JSON key, table column, plot label, colour).
BAG_LEARNERS = {
    "clipped@bag-own": ("bag_own", "bag own", "bag learner, own proportions", "tab:brown"),
    "clipped@bag-all": ("bag_all", "bag all", "bag learner, own + neighbours' proportions", "tab:pink"),
    # the own model fitted to the node's own noisy release only, unbiased estimator and the
    # cross-entropy bag loss (linear in the proportions): label-DP at the release's epsilon
    "unbiased+released@bag-own": (
        "bag_released",
        "bag rel.",
        "bag learner, own noisy release (label-DP)",
        "tab:olive",
    ),
}
BAG_EPSILONS = (0.01, 0.1, 1.0)


def eps_key(eps: float | None) -> str:
    return "non-private" if eps is None else f"{eps:g}"


def mutual_group(coordinates: np.ndarray, size: int = 4) -> list[int]:
    """The first group (lowest first index) of ``size`` nodes that are exactly each other's
    ``size - 1`` nearest neighbours (haversine; ties to the lower index)."""
    nb = nearest_neighbours(coordinates, size - 1)
    for i in range(len(coordinates)):
        group = sorted({i, *nb[i].tolist()})
        if all(sorted({j, *nb[j].tolist()}) == group for j in group):
            return group
    raise ValueError(f"no group of {size} mutually nearest detectors")


class Setting:
    """The nodes, neighbours and time-aligned folds of one setting, with a run cache."""

    def __init__(self, name, nodes, indices, coordinates, n_folds, time_range, device):
        self.name = name
        self.indices = list(indices)
        self.nodes = [nodes[i] for i in self.indices]
        self.neighbours = nearest_neighbours(coordinates[self.indices], C_NEIGHBOURS)
        self.time_range = time_range
        self.device = device
        per_node = [time_block_folds(n.time, n_folds, time_range=time_range, gap=GAP) for n in self.nodes]
        self.folds = [([p[f][0] for p in per_node], [p[f][1] for p in per_node]) for f in range(n_folds)]
        self.cache: dict = {}

    def run(self, fold: int, b: int, k: int, eps: float | None, estimator: str, seed: int) -> dict:
        key = (fold, b, k, eps, estimator, seed)
        if key not in self.cache:
            train, test = self.folds[fold]
            t0 = time.perf_counter()
            estimator, _, bag = estimator.partition("@")  # "clipped@bag-own": the bag learner
            estimator, _, own = estimator.partition("+")  # "clipped+released": the paper's own model
            learner = {"learner": "bag", "bag_sources": bag.split("-")[1]} if bag else {}
            with warnings.catch_warnings():
                # noise_seed: the deliberate opt-in to reproducible noise of a benchmark
                warnings.simplefilter("ignore", PrivacyLeakWarning)
                result = simulate_network(
                    self.nodes,
                    self.neighbours,
                    batch_size=b,
                    k=k,
                    epsilon=eps,
                    train_masks=train,
                    seed=seed,
                    noise_seed=seed,
                    device=self.device,
                    time_range=self.time_range,
                    estimator=estimator,
                    own_proportions=own or "exact",
                    **learner,
                )
            seconds = time.perf_counter() - t0
            ev = evaluate(result, self.nodes, test)
            self.cache[key] = {
                "accuracy": float(ev.accuracy),
                "own": float(ev.own_accuracy),
                "node": ev.node_accuracy.astype(float),
                "seconds": seconds,
            }
        return self.cache[key]

    def knn(self, fold: int, fraction: float, seed: int) -> float:
        train, test = self.folds[fold]
        x_tr = np.concatenate([n.features[m] for n, m in zip(self.nodes, train, strict=True)])
        y_tr = np.concatenate([n.labels[m] for n, m in zip(self.nodes, train, strict=True)])
        x_te = np.concatenate([n.features[m] for n, m in zip(self.nodes, test, strict=True)])
        y_te = np.concatenate([n.labels[m] for n, m in zip(self.nodes, test, strict=True)])
        if fraction < 1:
            rng = np.random.default_rng([seed, fold])
            keep = np.sort(rng.choice(len(y_te), size=max(1, round(fraction * len(y_te))), replace=False))
            x_te, y_te = x_te[keep], y_te[keep]
        pred = knn_predict(x_tr, y_tr, x_te, KNN_K, NUM_CLASSES, device=self.device).cpu().numpy()
        return float((pred == y_te).mean())

    def majority_share(self) -> float:
        labels = np.concatenate([n.labels for n in self.nodes])
        return float(np.bincount(labels, minlength=NUM_CLASSES).max() / len(labels))


def time_whole_network(nodes, coordinates, args, time_range) -> dict:
    """One timed ``simulate_network`` call on every node (b = 32, k = 16, epsilon = 0.1,
    fold 0 of ``args.folds``, seed 0): the headline's ``whole_network_seconds`` of --quick."""
    setting = Setting("network", nodes, range(len(nodes)), coordinates, args.folds, time_range, args.device)
    run = setting.run(0, B_MAIN, K_MAIN, EPS_MAIN, "clipped", seed=0)
    return {
        "fold0_seed0": round(run["seconds"], 2),
        "accuracy": round(run["accuracy"], 4),
        "own_accuracy": round(run["own"], 4),
        "n_nodes": len(setting.nodes),
        "fold": 0,
        "of_folds": args.folds,
        "b": B_MAIN,
        "k": K_MAIN,
        "epsilon": EPS_MAIN,
    }


def plan(args, network: bool) -> dict[str, list[tuple]]:
    """``{sweep: [(b, k, eps, estimator), ...]}`` of one setting."""
    sweeps: dict[str, list[tuple]] = {}
    if not network or args.network_sweeps:
        sweeps["batch"] = [(b, K_AT_B_SWEEP, e, "clipped") for b in args.batch_sizes for e in (None, EPS_MAIN)]
        sweeps["cluster"] = [(B_AT_K_SWEEP, k, e, "clipped") for k in args.cluster_counts for e in (None, EPS_MAIN)]
    sweeps["epsilon"] = [(B_MAIN, K_MAIN, None, "clipped")] + [(B_MAIN, K_MAIN, e, "clipped") for e in args.epsilons]
    if args.unbiased and not network:
        sweeps["epsilon"] += [(B_MAIN, K_MAIN, e, variant) for variant in VARIANTS for e in args.epsilons]
    if not network:  # the bag learner: b sweep (non-private) and epsilon sweep, 4 nodes
        for learner in BAG_LEARNERS:
            sweeps[learner] = [(b, K_MAIN, None, learner) for b in args.batch_sizes]
            sweeps[learner] += [(B_MAIN, K_MAIN, e, learner) for e in args.bag_epsilons]
    return sweeps


def spread_folds(n_folds: int, count: int | None) -> list[int]:
    """``count`` fold ids spread evenly over ``0 .. n_folds - 1`` (all of them for ``None``)."""
    if count is None or count >= n_folds:
        return list(range(n_folds))
    return sorted({int(round(v)) for v in np.linspace(0, n_folds - 1, count)})


def run_setting(
    setting: Setting, sweeps: dict, seeds: int, args, bar, knn_fraction: float, fold_ids: list[int]
) -> dict:
    configs = list(dict.fromkeys(c for cs in sweeps.values() for c in cs))
    per_fold: dict = {c: [] for c in configs}  # per fold: seed-averaged accuracy, own accuracy, node acc
    knn = []
    t_start = time.perf_counter()
    for fold in fold_ids:
        for cfg in configs:
            runs = []
            for s in range(args.bag_seeds if cfg[3] in BAG_LEARNERS else seeds):
                bar.set_postfix_str(
                    f"{setting.name} fold {fold} b={cfg[0]} k={cfg[1]} eps={eps_key(cfg[2])}"
                    + ("" if cfg[3] == "clipped" else f" {cfg[3]}")
                )
                runs.append(setting.run(fold, *cfg, seed=1000 * fold + s))
                bar.update(1)
            per_fold[cfg].append(
                {
                    "accuracy": float(np.mean([r["accuracy"] for r in runs])),
                    "own": float(np.mean([r["own"] for r in runs])),
                    "node": np.nanmean(np.stack([r["node"] for r in runs]), axis=0),
                    "seconds": float(np.mean([r["seconds"] for r in runs])),
                }
            )
        bar.set_postfix_str(f"{setting.name} fold {fold} kNN")
        knn.append(setting.knn(fold, knn_fraction, seed=args.knn_seed))
        bar.update(1)

    def summary(cfg) -> dict:
        acc = [f["accuracy"] for f in per_fold[cfg]]
        own = [f["own"] for f in per_fold[cfg]]
        return {
            "accuracy": round(float(np.mean(acc)), 4),
            "std": round(float(np.std(acc)), 4),
            "own_accuracy": round(float(np.mean(own)), 4),
            "folds": [round(a, 4) for a in acc],
            "own_folds": [round(a, 4) for a in own],
            "seconds_per_run": round(float(np.mean([f["seconds"] for f in per_fold[cfg]])), 3),
        }

    out: dict = {
        "detectors": [list(map(int, setting.nodes[i].detector)) for i in range(len(setting.nodes))],
        "n_nodes": len(setting.nodes),
        "n_windows": int(sum(len(n) for n in setting.nodes)),
        "folds": len(fold_ids),
        "fold_ids": fold_ids,
        "of_folds": len(setting.folds),
        "seeds": seeds,
        "chance": {"majority_share": round(setting.majority_share(), 4), "uniform": round(1 / NUM_CLASSES, 4)},
        "knn": {
            "accuracy": round(float(np.mean(knn)), 4),
            "std": round(float(np.std(knn)), 4),
            "folds": [round(a, 4) for a in knn],
            "k": KNN_K,
            "test_fraction": knn_fraction,
        },
    }
    if len(setting.nodes) <= 8:
        out["neighbours"] = setting.neighbours.tolist()
    if "batch" in sweeps:
        out["batch_sweep"] = {
            "k": K_AT_B_SWEEP,
            "epsilon": EPS_MAIN,
            "llp": {str(b): summary((b, K_AT_B_SWEEP, None, "clipped")) for b in args.batch_sizes},
            "pllp": {str(b): summary((b, K_AT_B_SWEEP, EPS_MAIN, "clipped")) for b in args.batch_sizes},
        }
        out["cluster_sweep"] = {
            "b": B_AT_K_SWEEP,
            "epsilon": EPS_MAIN,
            "llp": {str(k): summary((B_AT_K_SWEEP, k, None, "clipped")) for k in args.cluster_counts},
            "pllp": {str(k): summary((B_AT_K_SWEEP, k, EPS_MAIN, "clipped")) for k in args.cluster_counts},
        }
    main_np = (B_MAIN, K_MAIN, None, "clipped")
    out["epsilon_sweep"] = {
        "b": B_MAIN,
        "k": K_MAIN,
        "llp": summary(main_np),
        "pllp": {eps_key(e): summary((B_MAIN, K_MAIN, e, "clipped")) for e in args.epsilons},
    }
    for variant, (key, *_) in VARIANTS.items():
        if any(c[3] == variant for c in sweeps["epsilon"]):
            out["epsilon_sweep"][key] = {eps_key(e): summary((B_MAIN, K_MAIN, e, variant)) for e in args.epsilons}
    bag = {}
    for learner, (key, *_) in BAG_LEARNERS.items():
        if learner in sweeps:
            bag[key] = {
                "batch_sweep": {str(b): summary((b, K_MAIN, None, learner)) for b in args.batch_sizes},
                "epsilon_sweep": {eps_key(e): summary((B_MAIN, K_MAIN, e, learner)) for e in args.bag_epsilons},
            }
    if bag:
        out["bag_learner"] = {
            "batch_sweep_epsilon": None,
            "epsilon_sweep_b": B_MAIN,
            "seeds": args.bag_seeds,
            "epochs": 300,
            "hidden": 64,
            **bag,
        }
    # per-node accuracy (mean over folds) of the main point, non-private and at EPS_MAIN
    node_acc = {}
    for label, cfg in (("llp", main_np), ("pllp_eps0.1", (B_MAIN, K_MAIN, EPS_MAIN, "clipped"))):
        if cfg in per_fold:
            node_acc[label] = [round(float(v), 4) for v in np.nanmean(np.stack([f["node"] for f in per_fold[cfg]]), 0)]
    out["node_accuracy_b32_k16"] = node_acc
    out["elapsed_s"] = round(time.perf_counter() - t_start, 1)
    return out


def _within_4_points(llp: float, pllp: float) -> bool:
    return bool(llp - pllp <= 0.04)


def _collapsed(llp: float, pllp: float, chance: float) -> bool:
    """Closer to the majority-class share than to non-private LLP."""
    return bool(abs(pllp - chance) < abs(llp - pllp))


def targets(res: dict) -> dict:
    sweep = res["epsilon_sweep"]
    llp = sweep["llp"]["accuracy"]
    chance = res["chance"]["majority_share"]
    out = {}
    if "0.1" in sweep["pllp"]:
        p = sweep["pllp"]["0.1"]["accuracy"]
        out["pllp_eps0.1_within_4_points"] = {
            "llp": llp,
            "pllp": p,
            "difference_points": round(100 * (llp - p), 2),
            "met": _within_4_points(llp, p),
        }
    if "0.01" in sweep["pllp"]:
        p = sweep["pllp"]["0.01"]["accuracy"]
        out["pllp_eps0.01_collapse"] = {
            "pllp": p,
            "llp": llp,
            "majority_share": chance,
            "uniform": res["chance"]["uniform"],
            "above_majority_share_points": round(100 * (p - chance), 2),
            "closer_to_chance_than_to_llp": _collapsed(llp, p, chance),
        }
    # Does any release variant show both halves of the paper's shape at once?
    shape = {}
    for key in ["pllp", *(v[0] for v in VARIANTS.values())]:
        curve = sweep.get(key, {})
        if "0.1" in curve and "0.01" in curve:
            shape[key] = {
                "within_4_points_at_0.1": _within_4_points(llp, curve["0.1"]["accuracy"]),
                "collapse_at_0.01": _collapsed(llp, curve["0.01"]["accuracy"], chance),
            }
    if shape:
        out["paper_shape_by_variant"] = shape
    bag = res.get("bag_learner", {})
    knn = res["knn"]["accuracy"]
    for key, *_ in BAG_LEARNERS.values():
        if key not in bag or str(B_MAIN) not in bag[key]["batch_sweep"]:
            continue
        kmeans_b = res.get("batch_sweep", {}).get("llp", {}).get(str(B_MAIN), {}).get("accuracy", llp)
        acc = bag[key]["batch_sweep"][str(B_MAIN)]["accuracy"]
        private = bag[key]["epsilon_sweep"].get("0.1", {}).get("accuracy")
        out[f"{key}_closes_half_the_gap_b{B_MAIN}"] = {
            "bag": acc,
            "kmeans_llp": kmeans_b,
            "knn": knn,
            "gap_closed": round((acc - kmeans_b) / (knn - kmeans_b), 3) if knn != kmeans_b else None,
            "met": bool(acc - kmeans_b >= 0.5 * (knn - kmeans_b)),
        }
        if private is not None:
            out[f"{key}_pllp_eps0.1_within_4_points"] = {
                "bag": acc,
                "bag_private": private,
                "difference_points": round(100 * (acc - private), 2),
                "met": _within_4_points(acc, private),
            }
    return out


def print_tables(name: str, res: dict, seconds: float | None) -> None:
    folds = (
        f"{res['folds']} folds" if res["folds"] == res["of_folds"] else f"folds {res['fold_ids']} of {res['of_folds']}"
    )
    print(
        f"\n=== {SETTING_LABELS[name]}: {res['n_nodes']} nodes, {res['n_windows']} windows, "
        f"{folds} x {res['seeds']} seed(s) ==="
    )
    if res["n_nodes"] <= 8:
        print("detectors (site, approach):", ", ".join(f"{s}/{a}" for s, a in res["detectors"]))
    knn = res["knn"]
    frac = "" if knn["test_fraction"] >= 1 else f" (on {knn['test_fraction']:.0%} of the test windows)"
    print(
        f"kNN (k={KNN_K}, all labels){frac}: {knn['accuracy']:.4f} +- {knn['std']:.4f};  chance: majority class "
        f"share {res['chance']['majority_share']:.4f}, uniform {res['chance']['uniform']:.4f}"
    )
    cols = f"{'LLP':>8}{'p-LLP':>8}{'LLP own':>9}{'p-LLP own':>10}"
    for sweep, var, fixed in (("batch_sweep", "b", f"k={K_AT_B_SWEEP}"), ("cluster_sweep", "k", f"b={B_AT_K_SWEEP}")):
        if sweep not in res:
            continue
        s = res[sweep]
        print(f"\naccuracy vs {var} ({fixed}; p-LLP: epsilon={EPS_MAIN:g})")
        print(f"{var:>5}" + cols)
        for key in s["llp"]:
            a, p = s["llp"][key], s["pllp"][key]
            print(
                f"{key:>5}{a['accuracy']:>8.4f}{p['accuracy']:>8.4f}{a['own_accuracy']:>9.4f}{p['own_accuracy']:>10.4f}"
            )
    s = res["epsilon_sweep"]
    variants = [(column, s[key]) for key, column, *_ in VARIANTS.values() if key in s]
    print(
        f"\naccuracy vs epsilon (b={B_MAIN}, k={K_MAIN}); LLP (non-private): {s['llp']['accuracy']:.4f} "
        f"(own model {s['llp']['own_accuracy']:.4f})"
    )
    print(f"{'eps':>6}{'p-LLP':>8}{'+-':>7}{'own':>8}" + "".join(f"{column:>10}{'own':>8}" for column, _ in variants))
    for key, p in s["pllp"].items():
        line = f"{key:>6}{p['accuracy']:>8.4f}{p['std']:>7.4f}{p['own_accuracy']:>8.4f}"
        line += "".join(f"{v[key]['accuracy']:>10.4f}{v[key]['own_accuracy']:>8.4f}" for _, v in variants)
        print(line)
    bag = res.get("bag_learner")
    if bag:
        learners = [(column, bag[key]) for key, column, *_ in BAG_LEARNERS.values() if key in bag]
        print(f"\nbag learner ({bag['seeds']} seed(s)): accuracy vs b (non-private) and vs epsilon (b={B_MAIN})")
        print(f"{'b':>6}" + "".join(f"{column:>10}" for column, _ in learners))
        for b in next(iter(learners))[1]["batch_sweep"]:
            print(f"{b:>6}" + "".join(f"{v['batch_sweep'][b]['accuracy']:>10.4f}" for _, v in learners))
        print(f"{'eps':>6}" + "".join(f"{column:>10}" for column, _ in learners))
        for e in next(iter(learners))[1]["epsilon_sweep"]:
            print(f"{e:>6}" + "".join(f"{v['epsilon_sweep'][e]['accuracy']:>10.4f}" for _, v in learners))
    if seconds is not None:
        print(
            f"whole-network training, one simulate_network call (b={B_MAIN}, k={K_MAIN}, eps={EPS_MAIN:g}): "
            f"{seconds:.1f} s"
        )


def _bag_lines(ax, res: dict, sweep: str) -> None:
    """The bag learner's curves of ``sweep`` ("batch_sweep": non-private against b,
    "epsilon_sweep": private against epsilon) on ``ax``."""
    for key, _, label, colour in BAG_LEARNERS.values():
        curve = res.get("bag_learner", {}).get(key, {}).get(sweep, {})
        points = [(float(x), v["accuracy"]) for x, v in curve.items() if x != "non-private"]
        if points:
            suffix = "" if sweep == "batch_sweep" else " (private)"
            ax.plot(*zip(*points, strict=True), "D-", color=colour, label=label + suffix)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    fig, axes = plt.subplots(len(names), 3, figsize=(13, 3.6 * len(names)), squeeze=False)
    for row, name in zip(axes, names, strict=True):
        res = results[name]
        knn, chance = res["knn"]["accuracy"], res["chance"]["majority_share"]
        for ax, sweep, var in ((row[0], "batch_sweep", "batch size b"), (row[1], "cluster_sweep", "clusters k")):
            if sweep not in res:
                ax.text(
                    0.5,
                    0.5,
                    f"{var} sweep not run\n(--network-sweeps)",
                    ha="center",
                    va="center",
                    transform=ax.transAxes,
                    fontsize=9,
                )
                ax.set_axis_off()
                continue
            s = res[sweep]
            xs = [int(v) for v in s["llp"]]
            ax.plot(xs, [s["llp"][str(v)]["accuracy"] for v in xs], "o-", color="tab:blue", label="LLP")
            ax.plot(xs, [s["pllp"][str(v)]["accuracy"] for v in xs], "s-", color="k", label=f"p-LLP (eps={EPS_MAIN:g})")
            ax.plot(
                xs,
                [s["llp"][str(v)]["own_accuracy"] for v in xs],
                "o:",
                color="tab:blue",
                alpha=0.5,
                label="LLP, own model only",
            )
            if sweep == "batch_sweep":
                _bag_lines(ax, res, "batch_sweep")
            ax.axhline(knn, color="tab:green", ls="--", label=f"kNN (k={KNN_K})")
            ax.axhline(chance, color="grey", ls=":", lw=0.8, label="majority class")
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs, [str(v) for v in xs])
            ax.set_xlabel(var)
            fixed = f"k={s['k']}" if sweep == "batch_sweep" else f"b={s['b']}"
            ax.set_title(f"{SETTING_LABELS[name]}: accuracy vs {var.split()[-1]} ({fixed})", fontsize=9)
        ax = row[2]
        s = res["epsilon_sweep"]
        eps = [float(e) for e in s["pllp"]]
        ax.plot(eps, [p["accuracy"] for p in s["pllp"].values()], "s-", color="k", label="p-LLP (clipped release)")
        for (key, _, label, style), colour in zip(VARIANTS.values(), VARIANT_COLOURS, strict=True):
            if key in s:
                ax.plot(eps, [p["accuracy"] for p in s[key].values()], style, color=colour, label=label)
        ax.plot(
            eps,
            [p["own_accuracy"] for p in s["pllp"].values()],
            "s:",
            color="k",
            alpha=0.4,
            label="p-LLP, own model only",
        )
        _bag_lines(ax, res, "epsilon_sweep")
        ax.axhline(s["llp"]["accuracy"], color="tab:blue", label="LLP (non-private)")
        ax.axhline(s["llp"]["own_accuracy"], color="tab:blue", ls=":", alpha=0.5, label="LLP, own model only")
        ax.axhline(knn, color="tab:green", ls="--", label=f"kNN (k={KNN_K})")
        ax.axhline(chance, color="grey", ls=":", lw=0.8, label="majority class")
        ax.set_xscale("log")
        ax.set_xlabel("epsilon")
        ax.set_title(f"{SETTING_LABELS[name]}: accuracy vs epsilon (b={s['b']}, k={s['k']})", fontsize=9)
        for a in row:
            if a.axison:
                a.set_ylabel("accuracy")
                a.grid(alpha=0.3)
        top = max([knn] + [float(np.max(line.get_ydata())) for a in row for line in a.get_lines()])
        for a in row:
            if a.axison:
                a.set_ylim(0.1, min(1.0, top + 0.05))
    handles: dict = {}
    for a in axes.flat:
        for h, lab in zip(*a.get_legend_handles_labels(), strict=True):
            handles.setdefault(lab, h)
    columns = 3  # the labels are long: three columns fit the figure's width
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=columns, fontsize=8, frameon=False)
    fig.suptitle("LLP / p-LLP on SCATS traffic nodes (pooled test accuracy, mean over time-block folds)", fontsize=10)
    legend_rows = -(-len(handles) // columns)
    fig.tight_layout(rect=(0, (0.2 + 0.16 * legend_rows) / fig.get_figheight(), 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data-dir", default=None, help="shared data directory (holds traffic/scats_vicroads_2006)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 3 folds, 1 seed, b {8, 32}, k {8, 16}, eps {0.01, 0.1, 1} on the 4 nodes; on the "
        "whole network only the timed run of whole_network_seconds",
    )
    p.add_argument("--folds", type=int, default=None, help="time-block folds (default 10; --quick: 3)")
    p.add_argument("--noise-seeds", type=int, default=None, help="runs per configuration and fold, 4 nodes (3)")
    p.add_argument("--network-noise-seeds", type=int, default=1, help="runs per configuration and fold, network")
    p.add_argument("--network-sweeps", action="store_true", help="also the b and k sweeps on the whole network")
    p.add_argument(
        "--network-folds",
        type=int,
        default=5,
        help="folds (of --folds, spread evenly, fold 0 first) evaluated on the network (default 5)",
    )
    p.add_argument(
        "--network-knn-fraction",
        type=float,
        default=0.05,
        help="share of the test windows the network's kNN predicts (seeded; default 0.05)",
    )
    p.add_argument("--knn-seed", type=int, default=0)
    p.add_argument(
        "--no-unbiased",
        dest="unbiased",
        action="store_false",
        help="skip the secondary epsilon curves of VARIANTS (4 nodes)",
    )
    p.add_argument("--bag-seeds", type=int, default=1, help="runs per bag-learner configuration and fold, 4 nodes (1)")
    p.add_argument("--skip-network", action="store_true", help="4-node setting only")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument(
        "--json", default=None, help="results file (default benchmarks/llp/results/llp_accuracy[_quick].json)"
    )
    p.add_argument("--figure", default=None, help="plot (default benchmarks/llp/figures/llp_accuracy[_quick].png)")
    args = p.parse_args(argv)
    args.batch_sizes, args.cluster_counts, args.epsilons = BATCH_SIZES, CLUSTER_COUNTS, EPSILONS
    args.bag_epsilons = BAG_EPSILONS
    if args.quick:
        args.batch_sizes, args.cluster_counts, args.epsilons = (8, 32), (8, 16), (0.01, 0.1, 1.0)
        args.bag_epsilons = (0.1,)
        args.skip_network, args.unbiased = True, False
    args.folds = args.folds or (3 if args.quick else 10)
    args.noise_seeds = args.noise_seeds or (1 if args.quick else 3)
    suffix = "_quick" if args.quick else ""
    args.json = args.json or str(ROOT / "results" / f"{BENCHMARK}{suffix}.json")
    args.figure = args.figure or str(ROOT / "figures" / f"{BENCHMARK}{suffix}.png")
    if args.folds < 2 or min(args.noise_seeds, args.network_noise_seeds, args.network_folds, args.bag_seeds) < 1:
        p.error("--folds must be >= 2 and the seed counts >= 1")
    if not 0 < args.network_knn_fraction <= 1:
        p.error("--network-knn-fraction must be in (0, 1]")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    data_dir = resolve_data_dir(args.data_dir)
    torch.set_num_threads(args.threads)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            net = load_scats_counts(data_dir)
        except FileNotFoundError as err:
            die(f"SCATS counts not found in {str(data_dir)!r}:\n{err}")
    for w in caught:
        print(f"note: {w.message}", file=sys.stderr)
    nodes = node_datasets(net, window=WINDOW, horizon=HORIZON)
    time_range = (int(net.time[0]), int(net.time[-1]) + 1)
    group = mutual_group(net.coordinates, C_NEIGHBOURS + 1)
    print(
        f"4-node setting: detectors {[net.detectors[i] for i in group]} (indices {group}; "
        f"{net.locations[group[0]]} ...), the first group of 4 mutually 3-nearest detectors (haversine)"
    )

    settings = {
        "four_nodes": (
            Setting("four_nodes", nodes, group, net.coordinates, args.folds, time_range, args.device),
            args.noise_seeds,
            1.0,
            list(range(args.folds)),
        )
    }
    if not args.skip_network:
        settings["network"] = (
            Setting("network", nodes, range(len(nodes)), net.coordinates, args.folds, time_range, args.device),
            args.network_noise_seeds,
            args.network_knn_fraction,
            spread_folds(args.folds, args.network_folds),
        )
    sweeps = {name: plan(args, name == "network") for name in settings}
    total = sum(
        len(ids)
        * (
            sum(
                args.bag_seeds if c[3] in BAG_LEARNERS else seeds
                for c in dict.fromkeys(c for cs in sweeps[name].values() for c in cs)
            )
            + 1
        )
        for name, (_, seeds, _, ids) in settings.items()
    )
    # --quick: no network sweep, only the timed whole-network run of the headline
    quick_network = args.quick and "network" not in settings
    results: dict = {}
    network_timing = None
    with tqdm(total=total + quick_network, desc=BENCHMARK, unit="run", file=sys.stderr, dynamic_ncols=True) as bar:
        for name, (setting, seeds, knn_fraction, fold_ids) in settings.items():
            results[name] = run_setting(setting, sweeps[name], seeds, args, bar, knn_fraction, fold_ids)
        if quick_network:
            bar.set_postfix_str(f"network fold 0 b={B_MAIN} k={K_MAIN} eps={EPS_MAIN:g} (timed)")
            network_timing = time_whole_network(nodes, net.coordinates, args, time_range)
            bar.update(1)

    network_seconds = None
    if network_timing is not None:
        network_seconds = network_timing["fold0_seed0"]
        print(
            f"\nwhole network ({network_timing['n_nodes']} nodes), one simulate_network call (b={B_MAIN}, "
            f"k={K_MAIN}, eps={EPS_MAIN:g}, fold 0 of {args.folds}, seed 0): {network_seconds:.1f} s, "
            f"accuracy {network_timing['accuracy']:.4f}"
        )
    if "network" in settings:
        timed = settings["network"][0].cache[(0, B_MAIN, K_MAIN, EPS_MAIN, "clipped", 0)]["seconds"]
        network_seconds = round(timed, 2)
        results["network"]["training_seconds_b32_k16_eps0.1"] = {
            "fold0_seed0": network_seconds,
            "mean_over_folds": results["network"]["epsilon_sweep"]["pllp"]["0.1"]["seconds_per_run"],
        }
    for name, res in results.items():
        res["targets"] = targets(res)
        print_tables(name, res, network_seconds if name == "network" else None)
        for tname, t in res["targets"].items():
            print(f"target {tname}: {t}")

    four = results["four_nodes"]["epsilon_sweep"]
    headline = {
        "llp_accuracy_b32_k16": four["llp"]["accuracy"],
        "pllp_accuracy_b32_k16_eps0.1": four["pllp"].get("0.1", {}).get("accuracy"),
        "pllp_accuracy_b32_k16_eps0.01": four["pllp"].get("0.01", {}).get("accuracy"),
        "knn_accuracy": results["four_nodes"]["knn"]["accuracy"],
        "whole_network_seconds": network_seconds,
    }
    bag = results["four_nodes"].get("bag_learner", {})
    for key, prefix in (("bag_own", "bag"), ("bag_all", "bag_all"), ("bag_released", "bag_released")):
        if key in bag:
            headline[f"{prefix}_llp_accuracy_b32"] = bag[key]["batch_sweep"][str(B_MAIN)]["accuracy"]
            headline[f"{prefix}_pllp_accuracy_b32_eps0.1"] = bag[key]["epsilon_sweep"]["0.1"]["accuracy"]
    print(f"\nheadline: {headline}")
    if network_timing is not None:
        results["network_timing"] = network_timing
    notes = [
        "data: VicRoads SCATS counts, Melbourne, October 2006 (Sachweh, Boiar & Liebig 2021: Dublin SCATS, "
        "January 2013); windows "
        f"of w={WINDOW} counts, label = flow class of the count r={HORIZON} step later, {NUM_CLASSES} classes "
        f"(bin edges {list(FLOW_BIN_EDGES)}; the paper lists 5 ranges up to 260, here counts >= 260 are a 6th class)",
        "four_nodes: the first group (detector order) of 4 detectors that are exactly each other's 3 nearest "
        "neighbours by haversine distance (the 4 approaches of one intersection); neighbours nearest first",
        f"cross-validation: {args.folds} contiguous time blocks of the whole period, the same for every node; "
        f"training windows within {GAP} slots of the test block are left out (no shared count); the whole "
        f"network is evaluated on folds {spread_folds(args.folds, args.network_folds)} only, "
        f"{args.network_noise_seeds} seed(s) per configuration (run-time budget: ~12-18 s per LLP run over all "
        "nodes on one core)",
        "accuracy: pooled over the nodes' test windows, majority vote of the c+1 models (ties to the own model); "
        "mean over seeds (seed 1000 fold + s: noise via noise_seed, k-means and local search via seed), "
        "then mean (std) over folds; the noise is reproducible (benchmark only: not private against whoever "
        "knows the seed); time_range = the data file's recording period; "
        "own_accuracy: each node's own model alone",
        "p-LLP: estimator='clipped' (Lap(1/eps) on counts, clip to [0.001, b], normalise), own model on the "
        "node's exact proportions (nothing leaves the node); pllp_unbiased: estimator='unbiased'; "
        "pllp_released_own: the paper's algorithm as written, own model on the noisy release; pllp_unbiased_released_own: "
        "the same with estimator='unbiased'. Each fold is a separate release "
        "(epsilon per fold, not composed over folds)",
        f"kNN: k={KNN_K}, Euclidean, training windows of all nodes pooled, ties to the nearest neighbour's class; "
        f"on the network a random {args.network_knn_fraction:g} of each fold's test windows",
        "whole_network_seconds: wall time of one simulate_network call (all nodes, b=32, k=16, eps=0.1, fold 0, "
        f"seed 0) on {args.threads} torch thread(s), device {args.device}",
        "bag learner (4 nodes): LLPConfig(learner='bag'), a two-layer MLP (64 units) per node trained by 300 "
        "full-batch Adam steps on the bag proportion loss (KL of given to mean predicted proportions, DLLP of "
        "Ardehaly & Culotta 2017); bag_own: the node's own exact proportions only (reads no release: its private "
        "run is the same model), bag_all: own and the c neighbours' (released) proportions; bag_released: the "
        "own model fitted to the node's own noisy release alone (estimator 'unbiased', cross-entropy bag loss "
        "linear in the proportions; label-DP at the release's epsilon); "
        f"{args.bag_seeds} seed(s) per configuration and fold",
    ]
    if network_timing is not None:
        notes.append(
            f"--quick: the whole network runs only the timed call of whole_network_seconds (fold 0 of {args.folds}, "
            "so its training period is shorter than fold 0 of the full run's 10); results.network_timing"
        )
    payload = {
        "benchmark": BENCHMARK,
        "results": results,
        "headline": headline,
        "settings": {
            "folds": args.folds,
            "noise_seeds": args.noise_seeds,
            "network_noise_seeds": None if args.skip_network else args.network_noise_seeds,
            "network_folds": None if args.skip_network else spread_folds(args.folds, args.network_folds),
            "network_knn_fraction": None if args.skip_network else args.network_knn_fraction,
            "batch_sizes": list(args.batch_sizes),
            "cluster_counts": list(args.cluster_counts),
            "epsilons": list(args.epsilons),
            "unbiased": args.unbiased,
            "network": not args.skip_network,
            "network_sweeps": args.network_sweeps,
            "threads": args.threads,
            "device": args.device,
            "quick": args.quick,
            "four_node_detectors": [list(map(int, net.detectors[i])) for i in group],
        },
        **run_metadata(started),
        "notes": notes,
    }
    emit_json(payload, args.json)
    # after the JSON, so that its run metadata sees the tree before the figure changes it
    plot({name: res for name, res in results.items() if name in SETTING_LABELS}, Path(args.figure))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
