"""Private prototype models against what a user would pick instead, at equal epsilon.

DP-GLVQ, DP-GMLVQ and DP-LGMLVQ (the library's estimators, defaults) against plain
Opacus DP-SGD on a softmax regression and on a one-hidden-layer tanh MLP, on every
labelled set of the data directory, at ``epsilon`` in {0.5, 1, 2, 4, 8} and
``delta = 1e-5``; the non-private GLVQ, GMLVQ and logistic regression on the same folds
beside them.

Protocol (the same for every model):

* **Public domain.** Every feature is mapped from a public range onto ``[-1, 1]`` and
  clipped: the range its data dictionary states (optdigits 0-16, pendigits 0-100, letter
  0-15, MNIST pixels 0-255) or, where there is none (Image Segmentation, satimage, the
  HAPT window features), the per-feature minimum and maximum of the whole set, taken as
  public knowledge (not privatised). The DP estimators get ``bounds=(-1, 1)`` and the
  public label set.
* **MNIST on public features**: 4 x 4 average pooling of the pixels (7 x 7 = 49
  features, a map that reads no data).
* **Folds**: ``StratifiedKFold(3, shuffle=True, random_state=0)``; sets larger than
  ``--max-n`` (default 20000) are stratified-subsampled first (MNIST).
* **Tuning: defaults only.** The DP estimators run at their defaults. A DP-SGD model
  has no defaults, so the peers run one fixed, common setting: 30 epochs, expected batch
  128 (Poisson), clip 1, SGD with momentum 0.9, learning rate 0.2 (softmax) and 0.05
  (MLP), Opacus' own noise calibration and accountant. Nothing is tuned on test folds.
* **Noise**: seeded per fold (the DP estimators' ``noise_seed`` opt-in; its
  ``PrivacyLeakWarning`` is silenced), so a run is reproducible; a release would use
  fresh noise. ``--threads`` (default 1) intra-op threads in every fit.

diffprivlib (``LogisticRegression``, ``GaussianNB``) is run when it imports and works
with the installed scikit-learn; version 0.6.6 does not (it passes ``multi_class`` to
scikit-learn's ``LogisticRegression``), and the run records that.

Reported per set and epsilon: the mean test accuracy over the folds of every model, the
best prototype model against the best peer (difference in points), and fit times.
Headline: how many sets the prototypes win at every epsilon, the worst gap, the fit-time
ratio of DP-GMLVQ at epsilon 1 to the non-private GMLVQ, and the cold noise calibration
time of the estimators' default plan.

Usage::

    python -m benchmarks.dpsgd.peers --data-dir ../shared/data          # hours on 2 cores
    python -m benchmarks.dpsgd.peers --data-dir ../shared/data --quick  # a few minutes

``--quick``: Image Segmentation and optdigits, epsilon 1 and 4, the first fold. Ends with
one JSON line (``emit_json``) and writes ``--out`` and the plot ``--plot``.
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import emit_json, load_benchmark_sets, machine_description, resolve_data_dir, run_tasks

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK = "dpsgd_peers"
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
DELTA = 1e-5
SETS = ("segmentation", "optdigits", "pendigits", "satimage", "letter", "motion", "mnist")
QUICK_SETS = ("segmentation", "optdigits")
QUICK_EPSILONS = (1.0, 4.0)
#: the public range the data dictionary states, where it states one
DICTIONARY_RANGES = {"optdigits": (0.0, 16.0), "pendigits": (0.0, 100.0), "letter": (0.0, 15.0), "mnist": (0.0, 255.0)}
PROTOTYPE_MODELS = ("DP-GLVQ", "DP-GMLVQ", "DP-LGMLVQ")
PEER_MODELS = ("Opacus softmax", "Opacus MLP")
NONPRIVATE_MODELS = ("GLVQ", "GMLVQ", "logistic regression")
PEER_SETTINGS = {
    "epochs": 30,
    "batch": 128,
    "clip": 1.0,
    "momentum": 0.9,
    "lr": {"Opacus softmax": 0.2, "Opacus MLP": 0.05},
}


# --------------------------------------------------------------------------- data
def _pooled_mnist(X: np.ndarray) -> np.ndarray:
    """``(n, 784)`` pixels -> ``(n, 49)`` means of 4 x 4 blocks (a public map)."""
    return X.reshape(-1, 7, 4, 7, 4).mean(axis=(2, 4)).reshape(len(X), 49)


def public_unit_box(name: str, X: np.ndarray) -> tuple[np.ndarray, str]:
    """``X`` mapped from its public range onto ``[-1, 1]`` (clipped), and where the range came from."""
    if name in DICTIONARY_RANGES:
        lo, hi = DICTIONARY_RANGES[name]
        low, high, source = np.full(X.shape[1], lo), np.full(X.shape[1], hi), "data dictionary"
    else:
        low, high, source = X.min(axis=0), X.max(axis=0), "whole-set min/max (taken as public)"
    span = np.where(high > low, high - low, 1.0)
    Z = np.clip(2.0 * (X - low) / span - 1.0, -1.0, 1.0)
    return np.where(high > low, Z, 0.0), source


def load_sets(names: tuple[str, ...], data_dir: Path, max_n: int) -> dict[str, dict[str, Any]]:
    """``{name: {"X": (n, d) in [-1, 1], "y": (n,), "range": str, "n_full": int}}``."""
    from sklearn.model_selection import train_test_split

    from dp_proto.data import load_hapt_windows

    uci = [n for n in names if n != "motion"]
    raw = load_benchmark_sets(uci, data_dir)
    if "motion" in names:
        windows = load_hapt_windows(data_dir)
        raw["motion"] = (windows.features, windows.labels)
    out = {}
    for name in names:
        X, y = raw[name]
        if name == "mnist":
            X = _pooled_mnist(X)
        n_full = len(y)
        if n_full > max_n:
            X, _, y, _ = train_test_split(X, y, train_size=max_n, stratify=y, random_state=0)
        Z, source = public_unit_box(name, np.asarray(X, dtype=np.float64))
        _, y = np.unique(y, return_inverse=True)
        out[name] = {"X": Z.astype(np.float32), "y": y.astype(np.int64), "range": source, "n_full": n_full}
    return out


# --------------------------------------------------------------------------- models
def _prototype_estimator(model: str, epsilon: float | None, classes: list[int], seed: int):
    from dp_proto.lvq import GLVQ, GMLVQ
    from dp_proto.lvq.private import DPGLVQ, DPGMLVQ, DPLGMLVQ

    if epsilon is None:
        return {"GLVQ": GLVQ, "GMLVQ": GMLVQ}[model](random_state=seed)
    cls = {"DP-GLVQ": DPGLVQ, "DP-GMLVQ": DPGMLVQ, "DP-LGMLVQ": DPLGMLVQ}[model]
    return cls(epsilon=epsilon, delta=DELTA, bounds=(-1.0, 1.0), classes=classes, random_state=seed, noise_seed=seed)


def opacus_train(model: str, epsilon: float | None, Xtr, ytr, n_classes: int, seed: int):
    """Train the peer ``model`` ("Opacus softmax" or "Opacus MLP") by Opacus DP-SGD at
    ``epsilon`` (plain SGD with the same loop when None); returns the torch network."""
    import torch
    from opacus import PrivacyEngine
    from torch import nn

    torch.manual_seed(seed)
    d = Xtr.shape[1]
    net = (
        nn.Linear(d, n_classes)
        if model == "Opacus softmax"
        else nn.Sequential(nn.Linear(d, 64), nn.Tanh(), nn.Linear(64, n_classes))
    )
    data = torch.utils.data.TensorDataset(torch.as_tensor(Xtr), torch.as_tensor(ytr))
    loader = torch.utils.data.DataLoader(data, batch_size=PEER_SETTINGS["batch"], shuffle=True)
    opt = torch.optim.SGD(net.parameters(), lr=PEER_SETTINGS["lr"][model], momentum=PEER_SETTINGS["momentum"])
    if epsilon is not None:
        net, opt, loader = PrivacyEngine().make_private_with_epsilon(
            module=net, optimizer=opt, data_loader=loader, target_epsilon=epsilon, target_delta=DELTA,
            epochs=PEER_SETTINGS["epochs"], max_grad_norm=PEER_SETTINGS["clip"],
        )  # fmt: skip
    loss = nn.CrossEntropyLoss()
    for _ in range(PEER_SETTINGS["epochs"]):
        for xb, yb in loader:
            if len(yb) == 0:
                continue
            opt.zero_grad()
            loss(net(xb), yb).backward()
            opt.step()
    return net


def _opacus_fit(model: str, epsilon: float | None, Xtr, ytr, n_classes: int, seed: int):
    """The peer trained by ``opacus_train``, as a ``predict(X)`` function."""
    import torch

    net = opacus_train(model, epsilon, Xtr, ytr, n_classes, seed)

    def predict(X):
        with torch.no_grad():
            return net(torch.as_tensor(X)).argmax(1).numpy()

    return predict


def _diffprivlib_fit(model: str, epsilon: float, Xtr, ytr, seed: int):
    from diffprivlib.models import GaussianNB, LogisticRegression

    d = Xtr.shape[1]
    if model == "diffprivlib logistic":
        est = LogisticRegression(epsilon=epsilon, data_norm=math.sqrt(d), random_state=seed)
    else:
        est = GaussianNB(epsilon=epsilon, bounds=(-np.ones(d), np.ones(d)), random_state=seed)
    return est.fit(Xtr, ytr).predict


def diffprivlib_status() -> str | None:
    """None when diffprivlib imports and fits here, else why not."""
    try:
        from diffprivlib.models import LogisticRegression

        X = np.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5], [0.0, 0.0]])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            LogisticRegression(epsilon=1.0, data_norm=2.0).fit(X, [0, 1, 0, 1])
    except Exception as err:  # noqa: BLE001 - any failure means: not run
        return f"diffprivlib not run: {type(err).__name__}: {err}"
    return None


def run_fit(task: dict[str, Any]) -> dict[str, Any]:
    """One model on one fold at one epsilon: test accuracy and fit seconds."""
    import torch

    torch.set_num_threads(task["threads"])
    Xtr, ytr, Xte, yte = task["Xtr"], task["ytr"], task["Xte"], task["yte"]
    model, eps, seed, k = task["model"], task["epsilon"], task["seed"], task["n_classes"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # noise_seed opt-in, Opacus' secure-RNG notice
        start = time.perf_counter()
        if model in PEER_MODELS:
            predict = _opacus_fit(model, eps, Xtr, ytr, k, seed)
        elif model.startswith("diffprivlib"):
            predict = _diffprivlib_fit(model, eps, Xtr, ytr, seed)
        elif model == "logistic regression":
            from sklearn.linear_model import LogisticRegression

            predict = LogisticRegression(max_iter=2000).fit(Xtr, ytr).predict
        else:
            predict = _prototype_estimator(model, eps, list(range(k)), seed).fit(Xtr, ytr).predict
        fit_s = time.perf_counter() - start
        acc = float(np.mean(predict(Xte) == yte))
    return {"set": task["set"], "fold": task["fold"], "model": model, "epsilon": eps, "acc": acc, "fit_s": fit_s}


# --------------------------------------------------------------------------- calibration
def cold_calibration_seconds(epsilons: tuple[float, ...], d: int = 40) -> dict[str, float]:
    """Seconds of the DP estimators' default noise calibration (DP-GMLVQ's plan and init
    events at ``d`` features) per epsilon, every cache cleared first."""
    from dp_proto.lvq.private import DPGMLVQ
    from dp_proto.privacy import dpsgd_plan, events, ledger

    out = {}
    for eps in epsilons:
        caches = (dpsgd_plan._calibrate_cached, ledger._epsilon_of, ledger._renyi_epsilons_cached, events._event_pld)
        for cache in caches:
            cache.cache_clear()
        est = DPGMLVQ(epsilon=eps, delta=DELTA, bounds=(-1.0, 1.0), classes=[0, 1])
        start = time.perf_counter()
        est.planned_privacy_events(d)
        out[_key(eps)] = time.perf_counter() - start
    return out


# --------------------------------------------------------------------------- summary
def _key(eps: float | None) -> str:
    return "nonprivate" if eps is None else f"{eps:g}"


def summarise(rows: list[dict[str, Any]], sets: tuple[str, ...], epsilons: tuple[float, ...]) -> dict[str, Any]:
    """Means over folds per set, model and epsilon; the best prototype model against the best peer."""
    table: dict[str, dict[str, dict[str, list[float]]]] = {}
    times: dict[str, dict[str, dict[str, float]]] = {}
    for r in rows:
        table.setdefault(r["set"], {}).setdefault(r["model"], {}).setdefault(_key(r["epsilon"]), []).append(r["acc"])
        times.setdefault(r["set"], {}).setdefault(r["model"], {}).setdefault(_key(r["epsilon"]), 0.0)
        times[r["set"]][r["model"]][_key(r["epsilon"])] += r["fit_s"]
    accuracy = {
        s: {m: {e: float(np.mean(v)) for e, v in per.items()} for m, per in models.items()}
        for s, models in table.items()
    }
    fit_s = {
        s: {m: {e: t / len(table[s][m][e]) for e, t in per.items()} for m, per in models.items()}
        for s, models in times.items()
    }
    gaps: dict[str, dict[str, float]] = {}
    for s in sets:
        gaps[s] = {}
        for eps in map(_key, epsilons):
            ours = max(accuracy[s][m][eps] for m in PROTOTYPE_MODELS if m in accuracy[s])
            peers = [accuracy[s][m][eps] for m in accuracy[s] if m not in PROTOTYPE_MODELS and eps in accuracy[s][m]]
            gaps[s][eps] = 100.0 * (ours - max(peers))
    won = [s for s in sets if all(g >= 0 for g in gaps[s].values())]
    within = [s for s in sets if all(g >= -1.0 for g in gaps[s].values())]
    ratio = [
        fit_s[s]["DP-GMLVQ"]["1"] / fit_s[s]["GMLVQ"]["nonprivate"]
        for s in sets
        if "1" in fit_s[s].get("DP-GMLVQ", {}) and "nonprivate" in fit_s[s].get("GMLVQ", {})
    ]
    headline = {
        "sets": len(sets),
        "sets_prototypes_win_every_epsilon": len(won),
        "sets_prototypes_within_1pt_every_epsilon": len(within),
        "worst_gap_pt": round(min(g for per in gaps.values() for g in per.values()), 2),
        "dp_gmlvq_eps1_fit_over_gmlvq_median": round(float(np.median(ratio)), 2) if ratio else None,
    }
    return {"accuracy": accuracy, "fit_s": fit_s, "gap_pt": gaps, "won": won, "headline": headline}


def plot(summary: dict[str, Any], sets: tuple[str, ...], epsilons: tuple[float, ...], path: Path) -> None:
    """Accuracy against epsilon per set: prototype models solid, peers dashed, non-private dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(4, len(sets))
    rows = math.ceil(len(sets) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
    for ax, s in zip(axes.flat, sets, strict=False):
        acc = summary["accuracy"][s]
        for m in (*PROTOTYPE_MODELS, *PEER_MODELS, "diffprivlib logistic", "diffprivlib GaussianNB"):
            if m in acc:
                ys = [acc[m].get(_key(e), np.nan) for e in epsilons]
                ax.plot(epsilons, ys, "-o" if m in PROTOTYPE_MODELS else "--s", label=m, ms=3)
        for m, style in zip(NONPRIVATE_MODELS, (":", "-.", (0, (1, 3))), strict=True):
            if m in acc:
                ax.axhline(acc[m]["nonprivate"], ls=style, lw=0.8, color="grey", label=f"{m} (non-private)")
        ax.set_xscale("log", base=2)
        ax.set_title(s)
        ax.set_xlabel("epsilon (delta 1e-5)")
        ax.set_ylabel("test accuracy")
    for ax in list(axes.flat)[len(sets) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------- main
def make_tasks(
    data: dict[str, dict[str, Any]], epsilons, folds: int, fold_limit: int, threads: int, extra: tuple[str, ...]
):
    from sklearn.model_selection import StratifiedKFold

    tasks = []
    for name, d in data.items():
        split = StratifiedKFold(folds, shuffle=True, random_state=0).split(d["X"], d["y"])
        for fold, (tr, te) in enumerate(split):
            if fold >= fold_limit:
                break
            base = {
                "set": name,
                "fold": fold,
                "seed": 1000 * fold + 7,
                "threads": threads,
                "n_classes": int(d["y"].max()) + 1,
            }
            base |= {"Xtr": d["X"][tr], "ytr": d["y"][tr], "Xte": d["X"][te], "yte": d["y"][te]}
            for model in NONPRIVATE_MODELS:
                tasks.append(base | {"model": model, "epsilon": None})
            for eps in epsilons:
                for model in (*PROTOTYPE_MODELS, *PEER_MODELS, *extra):
                    tasks.append(base | {"model": model, "epsilon": eps})
    return tasks


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=None, help="the shared data directory (../shared/data)")
    p.add_argument("--quick", action="store_true", help="segmentation and optdigits, epsilon 1 and 4, one fold")
    p.add_argument("--sets", nargs="+", default=None, choices=SETS)
    p.add_argument("--epsilons", nargs="+", type=float, default=None)
    p.add_argument("--folds", type=int, default=3, help="stratified folds (3)")
    p.add_argument("--max-n", type=int, default=20000, help="stratified subsample of larger sets (20000)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per fit (1)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (1)")
    p.add_argument("--out", default=None)
    p.add_argument("--plot", default=None)
    args = p.parse_args(argv)
    started = time.time()
    sets = tuple(args.sets or (QUICK_SETS if args.quick else SETS))
    epsilons = tuple(args.epsilons or (QUICK_EPSILONS if args.quick else EPSILONS))
    suffix = "_quick" if args.quick else ""
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "dpsgd" / "results" / f"{BENCHMARK}{suffix}.json"
    figure = Path(args.plot) if args.plot else ROOT / "benchmarks" / "dpsgd" / "figures" / f"{BENCHMARK}{suffix}.png"

    import torch

    torch.set_num_threads(args.threads)
    data = load_sets(sets, resolve_data_dir(args.data_dir), args.max_n)
    dpl = diffprivlib_status()
    extra = () if dpl else ("diffprivlib logistic", "diffprivlib GaussianNB")
    tasks = make_tasks(data, epsilons, args.folds, 1 if args.quick else args.folds, args.threads, extra)
    rows = run_tasks(
        tasks, run_fit, jobs=args.jobs, desc=BENCHMARK, postfix=lambda t, r: f"{t['set']} {t['model']} {r['acc']:.3f}"
    )
    summary = summarise(rows, sets, epsilons)
    calibration = cold_calibration_seconds(epsilons)
    headline = summary.pop("headline") | {"calibration_cold_s_max": round(max(calibration.values()), 3)}

    print(
        f"\n{'set':<13}{'eps':>6}  " + "".join(f"{m:>16}" for m in (*PROTOTYPE_MODELS, *PEER_MODELS)) + f"{'gap pt':>9}"
    )
    for s in sets:
        for eps in map(_key, epsilons):
            accs = "".join(
                f"{summary['accuracy'][s].get(m, {}).get(eps, float('nan')):>16.3f}"
                for m in (*PROTOTYPE_MODELS, *PEER_MODELS)
            )
            print(f"{s:<13}{eps:>6}  {accs}{summary['gap_pt'][s][eps]:>9.2f}")
    plot(summary, sets, epsilons, figure)
    payload = {
        "benchmark": BENCHMARK,
        "headline": headline,
        "results": summary,
        "calibration_cold_s": calibration,
        "settings": {
            "sets": list(sets),
            "epsilons": list(epsilons),
            "delta": DELTA,
            "folds": args.folds,
            "folds_run": 1 if args.quick else args.folds,
            "max_n": args.max_n,
            "threads": args.threads,
            "peer": PEER_SETTINGS,
            "tuning": "defaults only (see the module docstring)",
            "ranges": {s: data[s]["range"] for s in sets},
            "n": {s: int(len(data[s]["y"])) for s in sets},
            "n_full": {s: data[s]["n_full"] for s in sets},
        },  # fmt: skip
        "machine": machine_description(),
        "elapsed_s": round(time.time() - started, 1),
        "notes": [n for n in (dpl,) if n],
        "figure": str(figure.relative_to(ROOT)) if figure.is_relative_to(ROOT) else str(figure),
    }
    emit_json(payload, out)


if __name__ == "__main__":
    main()
