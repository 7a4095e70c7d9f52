"""Membership inference against prototype models and their plain DP-SGD peer (LiRA).

Brinkrolf, Göpfert & Hammer (2019) show that a vanilla LVQ model reveals single records
through its prototypes; here the leak is measured the way the field now measures it:
the likelihood-ratio attack of Carlini et al. (2022) with shadow models
(``dp_proto.privacy.membership_inference``), TPR at 0.1 % and 1 % FPR and the ROC on a
log scale.

Protocol:

* Sets: Image Segmentation and optdigits, each feature mapped from its public range onto
  ``[-1, 1]`` (as ``benchmarks.dpsgd.peers``).
* ``--models`` (16) models per target: every record trains each of them by a fair coin
  (seed 0, the same halves for every model type); every model is attacked in
  turn with the others as shadows (online LiRA, one pooled variance per side), and the
  ROC pools all (model, record) pairs.
* Statistic per record: the margin of ``decision_function`` (prototype models:
  ``(d_other - d_true) / (d_other + d_true)``) or the logit of the true class's
  probability (softmax).
* Models: GMLVQ (L-BFGS, defaults; and with 5 prototypes per class); DP-GMLVQ at epsilon 1, 4 and 8 (defaults, delta
  1e-5, public bounds ``[-1, 1]`` and label set); softmax regression trained by the peer
  benchmark's loop without noise, and by Opacus DP-SGD at epsilon 1, 4 and 8 (30
  epochs, batch 128, clip 1, lr 0.2, momentum 0.9); a random forest (100 trees) as the
  positive control, a model known to memorise its training records. Seeded noise per model (a
  reproducible run; a release would use fresh noise). One torch thread per fit.
* The DP bound beside each private model: no test can exceed TPR ``e^eps FPR + delta``
  against an ``(eps, delta)``-DP training run (``dp_tpr_bound``).
* The one-run audit (Steinke, Nasr & Jagielski 2023) of model 0 alone: "member" for the
  5 % of records with the highest statistic, "non-member" for the 5 % lowest, and the
  95 % lower bound on epsilon at delta 1e-5 (``one_run_epsilon``): what one fit shows.

Usage::

    python -m benchmarks.membership.membership --data-dir ../shared/data --jobs 2
    python -m benchmarks.membership.membership --data-dir ../shared/data --quick   # < 1 min

Ends with one JSON line (``headline``: ``tpr_at_0.1%``, ``tpr_at_1%``, ``auc``,
``one_run_epsilon_lower``, each ``{set: {model: value}}``); the figure goes to ``figures/membership_roc.png``.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import emit_json, machine_description, resolve_data_dir, run_tasks
from benchmarks.dpsgd.peers import DELTA, PEER_SETTINGS, load_sets, opacus_train

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK = "membership"
SETS = ("segmentation", "optdigits")
EPSILONS = (1.0, 4.0, 8.0)
FPRS = (0.001, 0.01)
QUICK = {"sets": ("segmentation",), "models": 4, "max_n": 600, "epsilons": (1.0, 8.0)}


def model_names(epsilons: tuple[float, ...]) -> list[str]:
    """The attacked models, non-private first."""
    return [
        "GMLVQ", "GMLVQ, 5 per class", *(f"DP-GMLVQ eps {e:g}" for e in epsilons), "softmax",
        *(f"Opacus softmax eps {e:g}" for e in epsilons), "random forest (control)",
    ]  # fmt: skip


def _epsilon(name: str) -> float | None:
    return float(name.rsplit(" ", 1)[1]) if " eps " in name else None


class SoftmaxPeer:
    """The peer's softmax regression as an estimator: ``fit`` trains it by
    ``opacus_train`` (Opacus DP-SGD at ``epsilon``, plain SGD for None)."""

    def __init__(self, epsilon: float | None, n_classes: int, seed: int) -> None:
        self.epsilon, self.n_classes, self.seed = epsilon, n_classes, seed

    def fit(self, X: np.ndarray, y: np.ndarray) -> SoftmaxPeer:
        self.net_ = opacus_train("Opacus softmax", self.epsilon, X, y, self.n_classes, self.seed)
        self.classes_ = np.arange(self.n_classes)
        return self

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            return torch.softmax(self.net_(torch.as_tensor(X)), 1).double().numpy()

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.predict_proba(X).argmax(1)


def make_estimator(name: str, n_classes: int, seed: int):
    from dp_proto.lvq import GMLVQ
    from dp_proto.lvq.private import DPGMLVQ

    epsilon = _epsilon(name)
    if name.startswith("softmax") or name.startswith("Opacus"):
        return SoftmaxPeer(epsilon, n_classes, seed)
    if name.startswith("random forest"):
        from sklearn.ensemble import RandomForestClassifier

        return RandomForestClassifier(100, random_state=seed)
    if epsilon is None:
        return GMLVQ(prototypes_per_class=5 if "5 per class" in name else 1, random_state=seed)
    return DPGMLVQ(
        epsilon=epsilon, delta=DELTA, bounds=(-1.0, 1.0), classes=list(range(n_classes)), random_state=seed,
        noise_seed=seed,
    )  # fmt: skip


def fit_one(task: dict[str, Any]) -> dict[str, Any]:
    """Model ``task["index"]`` of one type on its half: every record's statistic and the
    accuracy on the other half."""
    import torch

    from dp_proto.privacy import true_class_score

    torch.set_num_threads(task["threads"])
    X, y, inside = task["X"], task["y"], task["inside"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seeded noise (PrivacyLeakWarning), Opacus' notices
        estimator = make_estimator(task["model"], task["n_classes"], task["index"]).fit(X[inside], y[inside])
        statistics = true_class_score(estimator, X, y)
        held_out = float(np.mean(estimator.predict(X[~inside]) == y[~inside]))
    return {"statistics": statistics, "test_accuracy": held_out}


def summarise(rows, tasks, membership: dict[str, np.ndarray], names: list[str]) -> dict[str, Any]:
    """LiRA per (set, model) from the fits' statistics."""
    from dp_proto.privacy import dp_tpr_bound, lira_attack, one_run_epsilon
    from dp_proto.privacy.membership import one_run_guesses

    out: dict[str, Any] = {"tpr_at": {}, "auc": {}, "test_accuracy": {}, "dp_bound": {}, "roc": {}, "one_run": {}}
    for s, mask in membership.items():
        for name in names:
            mine = [(t["index"], r) for t, r in zip(tasks, rows, strict=True) if t["set"] == s and t["model"] == name]
            mine.sort(key=lambda item: item[0])
            statistics = np.stack([r["statistics"] for _, r in mine])
            fpr, tpr, tpr_at, auc, _ = lira_attack(statistics, mask, fprs=FPRS)
            out["tpr_at"].setdefault(s, {})[name] = {f"{a:g}": v for a, v in tpr_at.items()}
            out["auc"].setdefault(s, {})[name] = auc
            out["test_accuracy"].setdefault(s, {})[name] = float(np.mean([r["test_accuracy"] for _, r in mine]))
            # the one-run audit of model 0 alone (one fit): 5 % "member" and 5 % "non-member"
            # guesses on its raw statistic, fixed in advance, at the peers' delta
            k = len(mask[0]) // 20
            guesses, correct = one_run_guesses(statistics[0], mask[0], k, k)
            out["one_run"].setdefault(s, {})[name] = {
                "epsilon_lower": one_run_epsilon(len(mask[0]), guesses, correct, delta=DELTA),
                "guesses": guesses, "correct": correct,
            }  # fmt: skip
            eps = _epsilon(name)
            if eps is not None:
                out["dp_bound"].setdefault(s, {})[name] = {f"{a:g}": dp_tpr_bound(eps, DELTA, a) for a in FPRS}
            keep = np.unique(np.r_[np.searchsorted(fpr, np.geomspace(1e-4, 1, 200)).clip(0, len(fpr) - 1)])
            out["roc"].setdefault(s, {})[name] = {"fpr": fpr[keep].tolist(), "tpr": tpr[keep].tolist()}
    return out


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = list(summary["roc"])
    fig, axes = plt.subplots(1, len(sets), figsize=(5.2 * len(sets), 4.4), squeeze=False)
    for ax, s in zip(axes[0], sets, strict=True):
        for name, curve in summary["roc"][s].items():
            style = "--" if "softmax" in name else "-"
            ax.plot(np.maximum(curve["fpr"], 1e-4), np.maximum(curve["tpr"], 1e-4), style, label=name)
        grid = np.geomspace(1e-4, 1, 50)
        ax.plot(grid, grid, ":", color="grey", label="chance")
        ax.set(xscale="log", yscale="log", xlim=(1e-4, 1), ylim=(1e-4, 1), xlabel="false-positive rate")
        ax.set(ylabel="true-positive rate", title=f"LiRA on {s}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=None, help="the shared data directory (../shared/data)")
    p.add_argument("--quick", action="store_true", help="segmentation, 600 records, 4 models, epsilon 1 and 8")
    p.add_argument("--models", type=int, default=16, help="models per target type (16, even)")
    p.add_argument("--max-n", type=int, default=20000, help="stratified subsample of larger sets (20000)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per fit (1)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (1)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    started = time.time()
    sets = QUICK["sets"] if args.quick else SETS
    n_models = QUICK["models"] if args.quick else args.models
    epsilons = QUICK["epsilons"] if args.quick else EPSILONS
    suffix = "_quick" if args.quick else ""
    out = Path(args.out) if args.out else ROOT / "benchmarks" / BENCHMARK / "results" / f"{BENCHMARK}{suffix}.json"
    figure = ROOT / "benchmarks" / BENCHMARK / "figures" / f"membership_roc{suffix}.png"

    from dp_proto.privacy.membership import random_membership

    data = load_sets(sets, resolve_data_dir(args.data_dir), QUICK["max_n"] if args.quick else args.max_n)
    names = model_names(epsilons)
    membership = {s: random_membership(n_models, len(data[s]["y"]), np.random.default_rng(0)) for s in sets}
    tasks = [
        {
            "set": s, "model": name, "index": m, "X": data[s]["X"], "y": data[s]["y"], "inside": membership[s][m],
            "n_classes": int(data[s]["y"].max()) + 1, "threads": args.threads,
        }
        for s in sets for name in names for m in range(n_models)
    ]  # fmt: skip
    rows = run_tasks(tasks, fit_one, jobs=args.jobs, desc=BENCHMARK, postfix=lambda t, r: f"{t['set']} {t['model']}")
    summary = summarise(rows, tasks, membership, names)
    print(
        f"\n{'set':<13}{'model':<24}{'test acc':>9}{'AUC':>7}{'TPR@0.1%':>10}{'TPR@1%':>9}{'DP bound@1%':>13}{'one-run eps':>12}"
    )
    for s in sets:
        for name in names:
            bound = summary["dp_bound"].get(s, {}).get(name, {}).get("0.01")
            at = summary["tpr_at"][s][name]
            print(
                f"{s:<13}{name:<24}{summary['test_accuracy'][s][name]:>9.3f}{summary['auc'][s][name]:>7.3f}"
                f"{at['0.001']:>10.4f}{at['0.01']:>9.4f}{'' if bound is None else f'{bound:.4f}':>13}"
                f"{summary['one_run'][s][name]['epsilon_lower']:>12.3f}"
            )
    plot(summary, figure)
    headline = {
        "tpr_at_0.1%": {s: {n: summary["tpr_at"][s][n]["0.001"] for n in names} for s in sets},
        "tpr_at_1%": {s: {n: summary["tpr_at"][s][n]["0.01"] for n in names} for s in sets},
        "auc": {s: dict(summary["auc"][s]) for s in sets},
        "one_run_epsilon_lower": {s: {n: summary["one_run"][s][n]["epsilon_lower"] for n in names} for s in sets},
    }
    payload = {
        "benchmark": BENCHMARK,
        "headline": headline,
        "results": summary,
        "settings": {
            "sets": list(sets),
            "models": names,
            "shadows_per_target": n_models - 1,
            "models_per_type": n_models,
            "epsilons": list(epsilons),
            "delta": DELTA,
            "fprs": list(FPRS),
            "attack": "online LiRA, pooled variance",
            "peer": PEER_SETTINGS,
            "n": {s: int(len(data[s]["y"])) for s in sets},
            "threads": args.threads,
            "ranges": {s: data[s]["range"] for s in sets},
        },  # fmt: skip
        "machine": machine_description(),
        "elapsed_s": round(time.time() - started, 1),
        "figure": str(figure.relative_to(ROOT)),
    }
    emit_json(payload, out)


if __name__ == "__main__":
    main()
