"""Accuracy and speed of the bin-based DP-LVQ schemes: subsample-and-aggregate (SAA) and
the centre of attention (COA), beside DP-SGD (Brinkrolf, Göpfert & Hammer 2019;
Brinkrolf 2023, Sec. 3.5.2, Figs. 3.8-3.10).

Protocol (one prototype per class, ``delta = 1e-5``, vanilla GLVQ on every bin with
Adam, 30 epochs, batch 64, lr 0.01: the library defaults):

* **Artificial data** (of Brinkrolf, Göpfert & Hammer 2019 and Brinkrolf 2023): three Gaussians with identity covariance at
  ``(5, 0), (-5, 0), (0, 5)`` in 2-D and at ``5 e_1, 5 e_2, 5 e_3`` for d > 2; 3000
  training records per class and a fresh test set of 3000 per class from the same
  generator; ``d`` in {2, 4, 8}, ``m`` in {15, 30, 50}, ``epsilon`` in
  {0.5, 1, 1.25, 1.5, 2, 5}; ``--repeats`` independent data sets (10). Public domain:
  bounds ``(-10, 10)`` per feature mapped onto ``[-1, 1]``.
* **Image Segmentation, MNIST (PCA 30)**: stratified ``--folds``-fold cross-validation
  (5, one repeat); preprocessing fitted on the training folds as in
  ``dpsgd_accuracy.py`` (NOT private: z-scoring, PCA 30 on MNIST's raw pixels then
  z-scoring) and bounds ``(-3, 3)``; DP-SGD is ``DPGLVQ`` with the Table B.1 protocol
  (``dpsgd_accuracy.make_private``, ledger calibration); the non-private GLVQ (L-BFGS)
  and the noise-free mean of the bins are reference rows.

Domains of the bin prototypes (the noise scales with their diameter):

* ``box``: ``[-1, 1]^d``, the issue's domain; sensitivity ``2 sqrt(W d)``;
* ``ball``: also the l2 ball of radius ``r`` around the origin; sensitivity
  ``2 r sqrt(W)``. Artificial data: ``r = 0.6`` (6 data units, 1.2 times the norm 5 of
  the generator's public means). Real data: ``r`` in {0.5, 1.0} (1.5 and 3 standard
  deviations), both reported, neither chosen on these data.

The bins of a (data set, m) are trained once and released at every epsilon and domain
(each release is its own experiment; sharing the non-private half only correlates the
cells). The noisy releases are projected into the domain (post-processing). Every bin
model is trained on its own (per-bin Adam state and shuffle, ``fit_glvq_bins``).

Reproducible noise: bins, releases and the DP-SGD rows are seeded (seeded
``torch.Generator`` objects; ``DPGLVQ(noise_seed=...)``), the library's explicit opt-in to
reproducible noise; its ``PrivacyLeakWarning`` is silenced here. A release would draw
fresh noise.

Speed: fitting all ``m = 50`` bins (``train_bin_models``) against one non-private
minibatch GLVQ fit on the whole training set with the same epochs, batch size and
optimiser (``GLVQ(solver="adam", max_iter=30, batch_size=64)``), on MNIST's first
training fold (or the artificial d = 8 set if MNIST is not run), same thread count.

Usage::

    python -m benchmarks.aggregate.accuracy --data-dir ../shared/data
    python -m benchmarks.aggregate.accuracy --datasets artificial --quick

Ends with one JSON line ``{"benchmark": "aggregate_accuracy", "results": {...},
"headline": {"sa_error_d2_eps1.25_m50": ..., "bins_vs_single_fit_time_ratio": ...}, ...}``;
``results[DATASET][SCHEME][DOMAIN][m][epsilon] = [mean error, std]`` (artificial
datasets are named ``artificial d=D``). Exit code 2 if a real data set is missing.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
import zlib

import numpy as np
import torch
from sklearn.model_selection import StratifiedKFold
from tqdm import tqdm

from benchmarks.common import (
    emit_json,
    load_benchmark_sets,
    resolve_data_dir,
    run_metadata,
)
from benchmarks.dpsgd.accuracy import PIXEL_DATASETS, make_private, preprocess
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.lvq import GLVQ
from dp_proto.lvq.private.coa import coa_bin_models
from dp_proto.lvq.private.saa import aggregate_bin_models, train_bin_models

BENCHMARK = "aggregate_accuracy"
DELTA = 1e-5
EPSILONS = (0.5, 1.0, 1.25, 1.5, 2.0, 5.0)
BINS = (15, 30, 50)
DIMS = (2, 4, 8)
REAL_DATASETS = ("segmentation", "mnist")
BIN_EPOCHS, BIN_BATCH, BIN_LR = 30, 64, 0.01
ARTIFICIAL_PER_CLASS, ARTIFICIAL_BOUND, ARTIFICIAL_RADIUS = 3000, 10.0, 0.6
REAL_BOUND, REAL_RADII = 3.0, (0.5, 1.0)
SCHEMES = ("saa", "coa")


def artificial_means(dim: int) -> np.ndarray:
    """The class means ``(3, dim)`` of Brinkrolf (2023)."""
    if dim == 2:
        return np.array([[5.0, 0.0], [-5.0, 0.0], [0.0, 5.0]])
    return 5.0 * np.eye(dim)[:3]


def artificial_data(dim: int, per_class: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    means = artificial_means(dim)
    X = np.concatenate([rng.normal(mu, 1.0, (per_class, dim)) for mu in means])
    return X, np.repeat(np.arange(3), per_class)


def eps_key(eps: float) -> str:
    return f"{eps:g}"


def _seed(*parts) -> int:
    return zlib.crc32(repr(parts).encode()) & 0x7FFFFFFF


def _error(prototypes: torch.Tensor, x_test: torch.Tensor, y_test: np.ndarray) -> float:
    predicted = torch.cdist(x_test, prototypes.to(x_test)).argmin(1).numpy()
    return float(np.mean(predicted != y_test))


def release_cells(
    models: torch.Tensor, x_test: torch.Tensor, y_test: np.ndarray, domains: dict, epsilons, key: tuple
) -> dict:
    """Errors of every (scheme, domain, epsilon) release of the same bin ``models``."""
    out: dict = {}
    for domain, radius in domains.items():
        for eps in epsilons:
            for scheme in SCHEMES:
                gen = torch.Generator().manual_seed(_seed(*key, domain, eps, scheme))
                with warnings.catch_warnings():
                    # the benchmark opts in to reproducible noise (a seeded generator)
                    warnings.simplefilter("ignore", PrivacyLeakWarning)
                    if scheme == "saa":
                        protos, _ = aggregate_bin_models(models, eps, DELTA, radius=radius, generator=gen, ledger=None)
                    else:
                        protos, _ = coa_bin_models(models, eps, DELTA, radius=radius, generator=gen, ledger=None)
                out[(scheme, domain, eps)] = _error(protos, x_test, y_test)
    return out


def _bins(x: torch.Tensor, y: np.ndarray, m: int, seed: int) -> torch.Tensor:
    models, _ = train_bin_models(
        x,
        torch.as_tensor(y, dtype=torch.long),
        torch.arange(int(y.max()) + 1),
        m,
        epochs=BIN_EPOCHS,
        batch_size=BIN_BATCH,
        lr=BIN_LR,
        generator=torch.Generator().manual_seed(seed),
    )
    return models


def _to_domain(X: np.ndarray, bound: float, clip: bool) -> torch.Tensor:
    z = X / bound
    return torch.as_tensor(np.clip(z, -1, 1) if clip else z, dtype=torch.float64)


def _collect(store: dict, name: str, cells: dict, m: int) -> None:
    for (scheme, domain, eps), err in cells.items():
        store.setdefault(name, {}).setdefault(scheme, {}).setdefault(domain, {}).setdefault(str(m), {}).setdefault(
            eps_key(eps), []
        ).append(err)


def run_artificial(args, bar, raw: dict, reference: dict) -> None:
    domains = {"box": None, "ball": ARTIFICIAL_RADIUS}
    for dim in args.dims:
        name = f"artificial d={dim}"
        for rep in range(args.repeats):
            rng = np.random.default_rng(_seed(args.seed, dim, rep))
            X, y = artificial_data(dim, ARTIFICIAL_PER_CLASS, rng)
            X_test, y_test = artificial_data(dim, ARTIFICIAL_PER_CLASS, rng)
            x, x_test = _to_domain(X, ARTIFICIAL_BOUND, True), _to_domain(X_test, ARTIFICIAL_BOUND, False)
            for m in args.bins:
                models = _bins(x, y, m, _seed(args.seed, dim, rep, m))
                _collect(
                    raw,
                    name,
                    release_cells(models, x_test, y_test, domains, args.epsilons, (args.seed, dim, rep, m)),
                    m,
                )
                reference.setdefault(name, {}).setdefault(f"bin mean m={m}", []).append(
                    _error(models.mean(0), x_test, y_test)
                )
                bar.update(1)
            bar.set_postfix_str(f"{name} rep {rep}")


def run_real(name: str, X: np.ndarray, y: np.ndarray, args, bar, raw: dict, reference: dict, timings: dict) -> None:
    domains = {"box": None, **{f"ball r={r:g}": r for r in REAL_RADII}}
    classes, y_index = np.unique(y, return_inverse=True)
    folds = StratifiedKFold(n_splits=args.folds, shuffle=True, random_state=args.seed)
    for fold, (train, test) in enumerate(folds.split(X, y_index)):
        Z_tr, Z_te = preprocess(X[train], X[test], args.seed, pixels=name in PIXEL_DATASETS)
        y_tr, y_te = y_index[train], y_index[test]
        x, x_test = _to_domain(Z_tr, REAL_BOUND, True), _to_domain(Z_te, REAL_BOUND, False)
        est = GLVQ(random_state=fold).fit(Z_tr, y_tr)
        reference.setdefault(name, {}).setdefault("GLVQ L-BFGS", []).append(1 - est.score(Z_te, y_te))
        if name == "mnist" and fold == 0 and args.speed:
            timings.update(measure_speed(name, x, Z_tr, y_tr, args))
        for m in args.bins:
            start = time.perf_counter()
            models = _bins(x, y_tr, m, _seed(args.seed, name, fold, m))
            reference[name].setdefault(f"bin training s m={m}", []).append(time.perf_counter() - start)
            reference[name].setdefault(f"bin mean m={m}", []).append(_error(models.mean(0), x_test, y_te))
            _collect(
                raw, name, release_cells(models, x_test, y_te, domains, args.epsilons, (args.seed, name, fold, m)), m
            )
            bar.update(1)
        for eps in args.epsilons if args.dpsgd else ():
            dp = make_private(
                "GLVQ",
                epsilon=eps,
                calibration="ledger",
                bound=REAL_BOUND,
                lr=None,
                seed=fold,
                classes=np.arange(len(classes)),
            )
            with warnings.catch_warnings():
                # the benchmark opts in to reproducible noise (noise_seed, set by make_private)
                warnings.simplefilter("ignore", PrivacyLeakWarning)
                dp.fit(Z_tr, y_tr)
            raw.setdefault(name, {}).setdefault("dp_sgd", {}).setdefault("box", {}).setdefault("-", {}).setdefault(
                eps_key(eps), []
            ).append(1 - dp.score(Z_te, y_te))
            bar.update(1)
        bar.set_postfix_str(f"{name} fold {fold}")


def measure_speed(name: str, x: torch.Tensor, Z: np.ndarray, y: np.ndarray, args) -> dict:
    """Wall time of all ``m = 50`` bins against one full-data minibatch GLVQ fit (best of
    ``args.speed_repeats`` each)."""
    bins_s, single_s = [], []
    for r in range(args.speed_repeats):
        start = time.perf_counter()
        _bins(x, y, 50, _seed("speed", r))
        bins_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        GLVQ(solver="adam", max_iter=BIN_EPOCHS, batch_size=BIN_BATCH, lr=BIN_LR, random_state=r).fit(Z, y)
        single_s.append(time.perf_counter() - start)
    return {
        "dataset": name,
        "records": int(len(y)),
        "features": int(Z.shape[1]),
        "bins": 50,
        "epochs": BIN_EPOCHS,
        "bins_s": min(bins_s),
        "single_fit_s": min(single_s),
        "ratio": min(bins_s) / min(single_s),
        "threads": torch.get_num_threads(),
    }


def summarise(raw: dict) -> dict:
    def walk(node):
        if isinstance(node, list):
            return [round(float(np.mean(node)), 4), round(float(np.std(node)), 4)]
        return {k: walk(v) for k, v in node.items()}

    return walk(raw)


def print_tables(results: dict, reference: dict) -> None:
    for name, schemes in results.items():
        print(f"\n== {name} ==  (error, mean over repeats/folds)")
        for scheme, domains in schemes.items():
            for domain, by_m in domains.items():
                for m, cells in by_m.items():
                    row = "  ".join(f"eps {e:>4}: {v[0]:.3f}" for e, v in cells.items())
                    print(f"  {scheme:6s} {domain:10s} m={m:>2}  {row}")
        for label, values in reference.get(name, {}).items():
            print(f"  {label}: {np.mean(values):.4f}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data-dir", default=None, help="shared data directory (real data sets)")
    p.add_argument(
        "--datasets", nargs="+", default=["artificial", *REAL_DATASETS], choices=["artificial", *REAL_DATASETS]
    )
    p.add_argument("--dims", nargs="+", type=int, default=list(DIMS))
    p.add_argument("--bins", nargs="+", type=int, default=list(BINS))
    p.add_argument("--epsilons", nargs="+", type=float, default=list(EPSILONS))
    p.add_argument("--repeats", type=int, default=10, help="artificial data sets per d (10)")
    p.add_argument("--folds", type=int, default=5, help="cross-validation folds of the real sets (5)")
    p.add_argument("--no-dpsgd", dest="dpsgd", action="store_false", help="skip the DP-SGD rows")
    p.add_argument("--no-speed", dest="speed", action="store_false", help="skip the speed measurement")
    p.add_argument("--speed-repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="2 repeats, 2 folds (smoke run)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--out", default=None, help="also write the JSON line to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.folds, args.speed_repeats = min(args.repeats, 2), 2, 1
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    real = [d for d in args.datasets if d in REAL_DATASETS]
    data = load_benchmark_sets(real, resolve_data_dir(args.data_dir)) if real else {}
    torch.set_num_threads(args.threads)
    raw: dict = {}
    reference: dict = {}
    timings: dict = {}
    total = len(args.dims) * args.repeats * len(args.bins) if "artificial" in args.datasets else 0
    total += len(real) * args.folds * (len(args.bins) + (len(args.epsilons) if args.dpsgd else 0))
    with tqdm(total=total, desc=BENCHMARK, unit="cell", file=sys.stderr, dynamic_ncols=True) as bar:
        if "artificial" in args.datasets:
            run_artificial(args, bar, raw, reference)
        for name in real:
            run_real(name, *data[name], args, bar, raw, reference, timings)
    if args.speed and not timings:  # no MNIST in this run: time the artificial d = 8 set
        X, y = artificial_data(8, ARTIFICIAL_PER_CLASS, np.random.default_rng(args.seed))
        timings = measure_speed("artificial d=8", _to_domain(X, ARTIFICIAL_BOUND, True), X, y, args)
    results = summarise(raw)
    print_tables(results, reference)

    def cell(domain: str):
        try:
            return results["artificial d=2"]["saa"][domain]["50"]["1.25"][0]
        except KeyError:
            return None

    headline = {
        "sa_error_d2_eps1.25_m50": cell("ball"),
        "sa_error_d2_eps1.25_m50_box": cell("box"),
        "bins_vs_single_fit_time_ratio": timings.get("ratio"),
        "bins_vs_single_fit_dataset": timings.get("dataset"),
    }
    if timings:
        print(
            f"\nspeed ({timings['dataset']}, {timings['records']} records): all 50 bins "
            f"{timings['bins_s']:.2f} s, one full-data GLVQ fit {timings['single_fit_s']:.2f} s, "
            f"ratio {timings['ratio']:.3f}"
        )
    print(f"headline: {headline}")
    notes = [
        "errors: misclassification rate on held-out data (artificial: a fresh test set from the "
        "generator; real: the test fold), mean and std over repeats/folds",
        f"artificial: bounds (-{ARTIFICIAL_BOUND:g}, {ARTIFICIAL_BOUND:g}) mapped onto [-1, 1]; 'ball' "
        f"radius {ARTIFICIAL_RADIUS:g} (= 6 data units, 1.2 x the public mean norm 5)",
        f"real data: preprocessing fitted on the training folds is NOT private (as in "
        f"dpsgd_accuracy.py); bounds (-{REAL_BOUND:g}, {REAL_BOUND:g}); ball radii {list(REAL_RADII)} "
        "both reported; dp_sgd = DPGLVQ, Table B.1 protocol, ledger calibration (m does not apply: key '-')",
        "the bins of a (data set, m) are trained once and released at every epsilon and domain; "
        "noisy releases projected into the domain (post-processing); every bin trains on its own "
        "(per-bin Adam state and shuffle)",
        "reproducible noise: seeded generators for bins and releases, DPGLVQ(noise_seed=...) for dp_sgd "
        "(the library's explicit opt-in; PrivacyLeakWarning silenced); SAA's sum gets "
        "discrete Gaussian noise on a public grid and COA's float64 Box-Muller release is rounded to a "
        "public grid (since the float-safe releases of 2026-11)",
        "reference: 'bin mean' = the noise-free mean of the bins' clipped prototypes (what SAA "
        "converges to as epsilon grows); 'GLVQ L-BFGS' = non-private GLVQ on the full training fold",
    ]
    payload = {
        "benchmark": BENCHMARK,
        "results": results,
        "headline": headline,
        "reference": {
            k: {label: round(float(np.mean(v)), 4) for label, v in refs.items()} for k, refs in reference.items()
        },
        "speed": timings,
        "settings": {
            "delta": DELTA,
            "epsilons": args.epsilons,
            "bins": args.bins,
            "dims": args.dims,
            "repeats": args.repeats,
            "folds": args.folds,
            "seed": args.seed,
            "quick": args.quick,
            "threads": args.threads,
            "bin_training": {"epochs": BIN_EPOCHS, "batch_size": BIN_BATCH, "lr": BIN_LR, "optimizer": "adam"},
        },
        **run_metadata(started),
        "notes": notes,
    }
    emit_json(payload, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
