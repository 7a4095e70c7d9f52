"""Where the time of an L-BFGS fit of GLVQ, GMLVQ and LGMLVQ goes (the fit-speed profile).

For each data set (the first of 3 stratified training folds, z-scored; MNIST also
``PCA(30)``), model and dtype, one cost evaluation is split into its parts, each timed as
the best of ``--repeats`` batches of ``--calls`` calls:

``distances``   the layer's distances ``(n, W)`` with what the gradient needs
                (``DistanceEvaluation``: the Omega products; LGMLVQ's ``(n, W, r)``
                projections or its quadratic form);
``cost``        the GLVQ cost and its gradient with respect to the distances
                (``glvq_cost_and_gradient``, closed form);
``gradient``    the parameters' gradients from those (``DistanceEvaluation.gradients``);
``closed_eval`` the whole evaluation as the fits run it (``FullBatchCost``);
``autograd_eval`` the same value and gradients by autograd through the layer (the fits'
                evaluation before this change);
``compiled_eval`` with ``--compile``: ``torch.compile`` (inductor) of the autograd
                evaluation, and ``compile_s``, its first call (tracing, code generation).

Then a default fit (``stopping="relative_cost"``) and an old-rule fit (``stopping="lbfgs"``,
``tol=1e-9``) of the estimator give iterations, evaluations (the line search's extra ones
included) and seconds; ``overhead_per_iter_ms`` is the fit's time not spent in evaluations
(L-BFGS's two-loop recursion, the line search's bookkeeping, Python), per iteration.

Usage::

    python -m benchmarks.lvq.fit_profile --data-dir ../shared/data
    python -m benchmarks.lvq.fit_profile --data-dir ../shared/data --quick

Ends with one JSON line ``{"benchmark": "fit_profile", "results": {DATASET: {MODEL:
{DTYPE: {...}}}}, ...}`` (also ``benchmarks/lvq/results/fit_profile.json``, ``--out``).
Run it on an idle machine: the numbers are milliseconds.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from sklearn.decomposition import PCA
from sklearn.model_selection import StratifiedKFold
from sklearn.preprocessing import StandardScaler

from benchmarks.common import emit_json, load_benchmark_sets, resolve_data_dir, run_metadata
from benchmarks.lvq.fit_speed import MODELS, subsample
from dp_proto.lvq.gradients import DistanceEvaluation
from dp_proto.lvq.losses import glvq_cost_and_gradient
from dp_proto.lvq.training import FullBatchCost

BENCHMARK = "fit_profile"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
DATASETS = ("optdigits", "letter", "mnist")
DTYPES = ("float32", "float64")
QUICK_ROWS = 3000


def best_ms(fn: Callable[[], object], *, calls: int, repeats: int) -> float:
    """The fastest of ``repeats`` batches of ``calls`` calls, in milliseconds per call."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return 1e3 * min(times)


def training_fold(
    name: str, X: np.ndarray, y: np.ndarray, rows: int | None, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The first of 3 stratified training folds, z-scored (and PCA 30 for > 64 features)."""
    if rows is not None:
        X, y = subsample(X, y, rows, seed)
    train, _ = next(StratifiedKFold(3, shuffle=True, random_state=seed).split(X, y))
    Z = StandardScaler().fit_transform(X[train])
    if Z.shape[1] > 64:
        Z = PCA(30, random_state=seed).fit_transform(Z)
    return Z, y[train]


def compiled_evaluation(net, x: torch.Tensor, targets: torch.Tensor, *, calls: int, repeats: int) -> dict:
    """``torch.compile`` (inductor) of the autograd evaluation: the first call's seconds
    (tracing and code generation) and the compiled call's milliseconds."""
    torch._dynamo.reset()  # a fresh compile per model: no recompilation limit across cells
    forward = torch.compile(lambda: net.loss(net(x), targets))

    def evaluate() -> None:
        for p in net.parameters():
            p.grad = None
        forward().backward()

    start = time.perf_counter()
    evaluate()
    compile_s = time.perf_counter() - start
    return {
        "compile_s": round(compile_s, 2),
        "compiled_eval_ms": round(best_ms(evaluate, calls=calls, repeats=repeats), 3),
    }


def profile_model(
    model: str, X: np.ndarray, y: np.ndarray, dtype: str, *, calls: int, repeats: int, compile: bool = False
) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        est = MODELS[model](random_state=0, dtype=dtype).fit(X, y)
        fit_s = time.perf_counter() - start
        start = time.perf_counter()
        old = MODELS[model](random_state=0, dtype=dtype, stopping="lbfgs").fit(X, y)
        old_fit_s = time.perf_counter() - start
    net = est.model_
    x = torch.as_tensor(X, dtype=getattr(torch, dtype))
    targets = torch.as_tensor(np.unique(y, return_inverse=True)[1])
    evaluation = DistanceEvaluation(net.layer, x)
    _, backprops = glvq_cost_and_gradient(evaluation.distances, targets, net.prototype_labels, check=False)
    full = FullBatchCost(net, x, targets)

    def autograd_eval() -> None:
        for p in net.parameters():
            p.grad = None
        net.loss(net(x), targets).backward()

    parts = {
        "distances": lambda: DistanceEvaluation(net.layer, x, outer=full.outer),
        "cost": lambda: glvq_cost_and_gradient(evaluation.distances, targets, net.prototype_labels, check=False),
        "gradient": lambda: evaluation.gradients(backprops),
        "closed_eval": full,
        "autograd_eval": autograd_eval,
    }
    out = {f"{k}_ms": round(best_ms(fn, calls=calls, repeats=repeats), 3) for k, fn in parts.items()}
    if compile:
        out.update(compiled_evaluation(net, x, targets, calls=calls, repeats=repeats))
    for key, fitted, seconds in (("default", est, fit_s), ("lbfgs_rule", old, old_fit_s)):
        evals = len(fitted.loss_curve_)
        out[key] = {
            "fit_s": round(seconds, 3),
            "n_iter": int(fitted.n_iter_),
            "evaluations": evals,
            "overhead_per_iter_ms": round(
                1e3 * max(seconds - evals * out["closed_eval_ms"] / 1e3, 0.0) / max(fitted.n_iter_, 1), 3
            ),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Where the time of an LVQ L-BFGS fit goes.")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help=f"{QUICK_ROWS} rows per data set, 3 calls x 2 repeats")
    p.add_argument("--compile", action="store_true", help="also time torch.compile of the autograd evaluation")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    data = load_benchmark_sets(args.datasets, resolve_data_dir(args.data_dir))
    calls, repeats = (3, 2) if args.quick else (args.calls, args.repeats)
    warm_x, warm_y = np.random.default_rng(0).normal(size=(40, 4)), np.arange(40) % 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for cls in MODELS.values():  # untimed: torch's first calls pay one-off costs
            for dtype in DTYPES:
                cls(max_iter=2, dtype=dtype).fit(warm_x, warm_y)
    results: dict[str, dict] = {}
    header = f"{'data':<10} {'model':<7} {'dtype':<8} {'dist':>7} {'cost':>7} {'grad':>7} {'closed':>7} {'autograd':>8} {'iters':>6} {'evals':>6} {'fit s':>7} {'ovh/it':>7} {'old rule: iters':>16} {'fit s':>7}"
    print(header + "\n" + "-" * len(header))
    for name in args.datasets:
        X, y = training_fold(name, *data[name], QUICK_ROWS if args.quick else None, args.seed)
        for model in MODELS:
            for dtype in DTYPES:
                r = profile_model(model, X, y, dtype, calls=calls, repeats=repeats, compile=args.compile)
                results.setdefault(name, {}).setdefault(model, {})[dtype] = r
                d, o = r["default"], r["lbfgs_rule"]
                print(
                    f"{name:<10} {model:<7} {dtype:<8} {r['distances_ms']:>7.2f} {r['cost_ms']:>7.2f} "
                    f"{r['gradient_ms']:>7.2f} {r['closed_eval_ms']:>7.2f} {r['autograd_eval_ms']:>8.2f} "
                    f"{d['n_iter']:>6} {d['evaluations']:>6} {d['fit_s']:>7.2f} {d['overhead_per_iter_ms']:>7.2f} "
                    f"{o['n_iter']:>16} {o['fit_s']:>7.2f}"
                    + (
                        f"  compiled {r['compiled_eval_ms']:.2f} ms ({r['compile_s']:.1f} s to compile)"
                        if args.compile
                        else ""
                    ),
                    flush=True,
                )
    payload = {
        "benchmark": BENCHMARK,
        "results": results,
        "threads": torch.get_num_threads(),
        "quick": args.quick,
        "compile": args.compile,
        "notes": [
            "milliseconds per call, best of repeats; training rows of the first of 3 stratified folds, "
            "z-scored (MNIST: PCA 30 of 70000 images), one prototype per class",
            "closed_eval: the fits' evaluation (closed form); autograd_eval: autograd through the layer",
            "default: stopping='relative_cost'; lbfgs_rule: stopping='lbfgs', tol=1e-9 (same dtype)",
        ],
        **run_metadata(started),
    }
    out = args.out or str(RESULTS_DIR / (f"{BENCHMARK}_quick.json" if args.quick else f"{BENCHMARK}.json"))
    emit_json(payload, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
