"""Speed of the private SVDD / equilibrium-point classifier (Park 2022, Table 7.2) and of its
SVDD dual solver against a general QP solver.

Part 1, per data set of Table 7.1 (``svdd_protocol.TABLE_7_1``; the UCI sets come from
``--data-dir`` and are skipped with a note when their files are missing): split run 0
(stratified 80/20, ``split_indices(y, 0)``), z-scored with the training split's mean and
std, then training plus inference (``fit`` on the training split, ``predict`` on the test
split) of

* ``proposed_auto`` -- the headline: :class:`~dp_proto.svdd.PrivateSVDDClassifier` with
  the Table 7.1 "proposed" hyperparameters (``C/n, gamma, lr, iters, r_max``), ``F = 400``,
  ``epsilon = 1``, the sound default ``starts="auto"`` (the public grid of cubes where the
  records are many per cube, else public normal starts);
* ``proposed_normal``: the same with ``starts="normal"`` (up to 2000 public start points);
* ``proposed_training``: the same with the thesis' variant ``starts="training"`` (the
  dynamics start from the training records; not differentially private, its
  ``PrivacyLeakWarning`` is silenced here). This is what the thesis timed;
* ``svc_rbf``: non-private reference, scikit-learn ``SVC(kernel="rbf",
  gamma=<Table 7.1 SVM WEIGHT gamma>)`` with its default ``C = 1`` (one-vs-one, exact
  kernel);
* ``svm_weight``: :class:`dp_proto.svdd.baselines.PrivateSVMWeight` (``C/n`` and ``gamma``
  of the table's SVM WEIGHT column, ``epsilon = 1``) when that module imports; a fit that
  raises is recorded with its error and not repeated. Skipped on training sets larger than
  ``--svm-weight-max-n`` (its solver cost grows with ``n``).

Timings are medians of ``--repeats`` runs after one untimed warm-up (on sets with more
than 10000 training rows the warm-up uses a 1000-row subsample, and every method except
``proposed_auto`` -- the headline -- runs ``--large-repeats`` times). Next to each
proposed row: the thesis' Table 7.2 seconds for "Proposed" (its machine: Xeon Gold
5218R, Python 3.7, not the same hardware) and the ratio thesis / ours.

Part 2, the SVDD dual (eq. 4.2) at ``n = --qp-n`` (2000): F = 400 random Fourier features
of a stratified 2000-row subsample of shuttle's standardised run-0 training split with
the Table 7.1 proposed ``gamma = 1`` and ``C/n = 0.01`` (``--qp-data shuttle``; when the
data are missing, and with ``--quick``, ``five_gaussians(n_samples=n)`` with its
``gamma = 5``, ``C/n = 0.1``), solved by

* ``solve_svdd_dual(phi, C, tol=1e-8)`` (median of several runs), and
* ``scipy.optimize.minimize(method="SLSQP")`` on the same dual with the ``n x n`` kernel
  ``K = Phi Phi^T`` (formed inside the timed region), the analytic gradient
  ``2 K beta - q``, bounds ``[0, C/n]``, the equality constraint ``sum beta = 1``,
  ``ftol = 1e-12``, ``maxiter = 10000``; stopped after ``--qp-time-limit`` seconds, in
  which case the iterate it reached is reported, the speed-up is a lower bound and the
  objective gap is also measured at ``--qp-check-n`` where SLSQP finishes;
* ``cvxopt.solvers.qp`` too, if cvxopt happens to be installed.

``W(beta) = q^T beta - beta^T K beta`` (maximised) is evaluated in float64 by the same
formula for every solver. Everything runs with ``--threads`` torch threads and the same
BLAS/OpenMP limit (threadpoolctl) for NumPy/SciPy, 1 by default, so the comparison is
fair.

Usage::

    python -m benchmarks.svdd.speed --threads 1            # full run, several minutes
    python -m benchmarks.svdd.speed --quick                # smoke run, under a minute

``--quick``: three_moons and iris with every method and shuttle with the headline method
only (``proposed_auto``, so ``shuttle_end_to_end_s`` is measured as in the full run, from one
timed run instead of the median of three; it stays null when the shuttle file is missing),
one timed run per method, and the solver comparison at ``n = 200`` on five_gaussians.

Ends with one JSON line ``{"benchmark": "svdd_speed", "results": {...}, "headline":
{"shuttle_end_to_end_s": ..., "solver_speedup_vs_qp": ..., "solver_objective_gap": ...}, ...}``,
also written to ``--out`` (default ``benchmarks/svdd/results/svdd_speed.json``, with
``--quick`` ``svdd_speed_quick.json``).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.svm import SVC
from tqdm import tqdm

from benchmarks.common import cpu_model, emit_json, machine_description
from benchmarks.svdd.protocol import (
    TABLE_7_1,
    TABLE_7_2,
    load_dataset,
    split_indices,
    standardize,
)
from dp_proto.data import five_gaussians, stratified_subsample
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.svdd import PrivateSVDDClassifier, RandomFourierFeatures, solve_svdd_dual

BENCHMARK = "svdd_speed"
ROOT = Path(__file__).resolve().parents[2]  # the repository
DEFAULT_OUT = ROOT / "benchmarks" / "svdd" / "results" / f"{BENCHMARK}.json"
QUICK_OUT = ROOT / "benchmarks" / "svdd" / "results" / f"{BENCHMARK}_quick.json"
EPSILON = 1.0
NUM_FEATURES = 400
SOLVER_TOL = 1e-8
LARGE_N = 10000  # training sets above this size: subsample warm-up, --large-repeats
WARMUP_ROWS = 1000
QUICK_DATASETS = ("three_moons", "iris", "shuttle")
#: --quick times only the headline method on these sets (the others take minutes there)
QUICK_HEADLINE_ONLY = ("shuttle",)
SYNTHETIC = ("three_moons", "five_gaussians")
METHODS = ("proposed_auto", "proposed_normal", "proposed_training", "svc_rbf", "svm_weight")
HEADLINE_METHOD = "proposed_auto"
LABELS = {
    "proposed_auto": "proposed (auto)",
    "proposed_normal": "proposed (normal)",
    "proposed_training": "proposed (training)*",
    "svc_rbf": "SVC rbf, non-private",
    "svm_weight": "SVM WEIGHT (ours)",
}
THESIS_COLUMN = {
    "proposed_auto": "Proposed",
    "proposed_normal": "Proposed",
    "proposed_training": "Proposed",
    "svm_weight": "SVM WEIGHT",
}


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------


def default_data_dir() -> Path:
    env = os.environ.get("DP_PROTO_DATA_DIR", "").strip()
    return Path(env).expanduser() if env else ROOT.parent / "shared" / "data"


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


class _TimeLimit(Exception):
    """Raised inside the QP objective once the wall-clock budget is spent."""


def _load_svm_weight():
    """``PrivateSVMWeight`` or ``None`` with the reason (it is written separately)."""
    try:
        from dp_proto.svdd.baselines import PrivateSVMWeight
    except ImportError as err:  # the module may not exist yet
        return None, f"dp_proto.svdd.baselines.PrivateSVMWeight not importable: {err}"
    return PrivateSVMWeight, None


# --------------------------------------------------------------------------------------
# part 1: the classifiers per data set
# --------------------------------------------------------------------------------------


def make_models(name: str, args, svm_weight_cls) -> dict[str, Any]:
    """Factories ``method -> () -> estimator`` for data set ``name``."""
    row = TABLE_7_1[name]
    p = row.proposed

    def proposed(starts: str):
        return lambda: PrivateSVDDClassifier(
            c_over_n=p.c_over_n,
            gamma=p.gamma,
            num_features=NUM_FEATURES,
            epsilon=EPSILON,
            lr=p.lr,
            iters=p.iters,
            r_max=p.r_max,
            starts=starts,
            classes=np.arange(row.classes),
            random_state=args.seed,
            noise_seed=args.seed,
            device=args.device,
        )  # reproducible accuracies

    models: dict[str, Any] = {
        "proposed_auto": proposed("auto"),
        "proposed_normal": proposed("normal"),
        "proposed_training": proposed("training"),
        "svc_rbf": lambda: SVC(kernel="rbf", gamma=row.svm_weight.gamma),
    }
    if svm_weight_cls is not None:
        models["svm_weight"] = lambda: svm_weight_cls(
            c_over_n=row.svm_weight.c_over_n,
            gamma=row.svm_weight.gamma,
            num_features=NUM_FEATURES,
            epsilon=EPSILON,
            classes=np.arange(row.classes),
            random_state=args.seed,
            noise_seed=args.seed,
            device=args.device,
        )
    return models


def _fit_predict(factory, X_tr, y_tr, X_te, device: str) -> tuple[float, float, np.ndarray]:
    model = factory()
    with warnings.catch_warnings():
        # expected: noise_seed (reproducible noise for the accuracies) and starts="training" (not DP)
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        _sync(device)
        t0 = time.perf_counter()
        model.fit(X_tr, y_tr)
        _sync(device)
        t1 = time.perf_counter()
        pred = np.asarray(model.predict(X_te))
        _sync(device)
        t2 = time.perf_counter()
    return t1 - t0, t2 - t1, pred


def time_method(factory, X_tr, y_tr, X_te, y_te, repeats: int, warmup, device: str) -> dict:
    """Median fit / predict / total seconds over ``repeats`` runs after one warm-up on
    ``warmup = (X, y)`` (or none); the accuracy of the first timed run (the runs share the
    seed, so they agree)."""
    if warmup is not None:
        _fit_predict(factory, *warmup, X_te[:50], device)
    fits, preds, totals = [], [], []
    accuracy = None
    for _ in range(repeats):
        fit_s, pred_s, pred = _fit_predict(factory, X_tr, y_tr, X_te, device)
        fits.append(fit_s)
        preds.append(pred_s)
        totals.append(fit_s + pred_s)
        if accuracy is None:
            accuracy = float(np.mean(pred == y_te))
    return {
        "fit_s": _r(statistics.median(fits)),
        "predict_s": _r(statistics.median(preds)),
        "total_s": _r(statistics.median(totals)),
        "accuracy": _r(accuracy),
        "repeats": repeats,
        "all_total_s": [_r(t) for t in totals],
    }


def _warmup_set(X_tr: np.ndarray, y_tr: np.ndarray, seed: int):
    """The whole training set for small sets, else a 1000-row stratified subsample."""
    if len(y_tr) <= LARGE_N:
        return X_tr, y_tr
    Xw, yw = stratified_subsample(X_tr, y_tr, n_samples=WARMUP_ROWS, random_state=seed)
    return (Xw, yw) if len(np.unique(yw)) >= 2 else None


def run_dataset(name: str, X: np.ndarray, y: np.ndarray, args, svm_weight_cls, svm_weight_note, bar) -> dict:
    row = TABLE_7_1[name]
    train, test = split_indices(y, run=0)
    X_tr, X_te = standardize(X[train], X[test])
    y_tr, y_te = y[train], y[test]
    large = len(y_tr) > LARGE_N
    warmup = _warmup_set(X_tr, y_tr, args.seed)
    out: dict[str, Any] = {
        "n_train": int(len(y_tr)),
        "n_test": int(len(y_te)),
        "dims": int(X.shape[1]),
        "classes": int(len(np.unique(y))),
        "proposed_setting": {
            "c_over_n": row.proposed.c_over_n,
            "gamma": row.proposed.gamma,
            "lr": row.proposed.lr,
            "iters": row.proposed.iters,
            "r_max": row.proposed.r_max,
            "num_features": NUM_FEATURES,
            "epsilon": EPSILON,
        },
        "svm_setting": {"c_over_n": row.svm_weight.c_over_n, "gamma": row.svm_weight.gamma},
        "methods": {},
        "thesis_table_7_2_s": {col: TABLE_7_2[col].get(name) for col in ("Proposed", "SVM WEIGHT")},
        "ratio_thesis_over_ours": {},
    }
    models = make_models(name, args, svm_weight_cls)
    for method in METHODS:
        bar.set_postfix_str(f"{name} {method}")
        if args.quick and name in QUICK_HEADLINE_ONLY and method != HEADLINE_METHOD:
            out["methods"][method] = {"skipped": f"--quick: only {HEADLINE_METHOD} on {name}"}
            bar.update(1)
            continue
        if method == "svm_weight" and method not in models:
            out["methods"][method] = {"skipped": svm_weight_note}
            bar.update(1)
            continue
        if method == "svm_weight" and len(y_tr) > args.svm_weight_max_n:
            out["methods"][method] = {"skipped": f"n_train {len(y_tr)} > --svm-weight-max-n {args.svm_weight_max_n}"}
            bar.update(1)
            continue
        repeats = args.repeats if (not large or method == HEADLINE_METHOD) else args.large_repeats
        try:
            res = time_method(models[method], X_tr, y_tr, X_te, y_te, repeats, warmup, args.device)
        except Exception as err:  # a baseline that fails is reported, not fatal
            if method.startswith("proposed"):
                raise
            res = {"error": f"{type(err).__name__}: {err}"}
        out["methods"][method] = res
        column = THESIS_COLUMN.get(method)
        thesis = TABLE_7_2[column].get(name) if column else None
        if thesis is not None and res.get("total_s"):
            out["ratio_thesis_over_ours"][method] = _r(thesis / res["total_s"], 2)
        bar.update(1)
    return out


# --------------------------------------------------------------------------------------
# part 2: solve_svdd_dual against a general QP solver
# --------------------------------------------------------------------------------------


def qp_problem(n: int, args, data_dir: Path) -> tuple[np.ndarray, dict]:
    """``X (n, d)`` standardised rows and the problem's description."""
    source = args.qp_data
    if source == "auto":
        source = "five_gaussians" if args.quick else "shuttle"
    if source == "shuttle":
        try:
            X, y = load_dataset("shuttle", data_dir, random_state=0)
        except (FileNotFoundError, OSError) as err:
            print(f"note: shuttle not available for the QP comparison ({err}); using five_gaussians", file=sys.stderr)
            source = "five_gaussians"
    if source == "shuttle":
        train, test = split_indices(y, run=0)
        X_tr, _ = standardize(X[train], X[test])
        if n < len(train):
            X_tr, _ = stratified_subsample(X_tr, y[train], n_samples=n, random_state=args.seed)
        p = TABLE_7_1["shuttle"].proposed
        desc = (
            f"shuttle: stratified {len(X_tr)}-row subsample of the standardised run-0 "
            f"training split, Table 7.1 proposed gamma={p.gamma:g}, C/n={p.c_over_n:g}"
        )
        return X_tr, {"data": "shuttle", "gamma": p.gamma, "c_over_n": p.c_over_n, "description": desc}
    X, _ = five_gaussians(n_samples=n, random_state=args.seed)
    X, _ = standardize(X, X)
    p = TABLE_7_1["five_gaussians"].proposed
    desc = f"five_gaussians(n_samples={n}), standardised, Table 7.1 proposed gamma={p.gamma:g}, C/n={p.c_over_n:g}"
    return X, {"data": "five_gaussians", "gamma": p.gamma, "c_over_n": p.c_over_n, "description": desc}


def dual_objective(beta: np.ndarray, K: np.ndarray, q: np.ndarray) -> float:
    """``W(beta) = q^T beta - beta^T K beta`` (eq. 4.2), float64."""
    return float(q @ beta - beta @ (K @ beta))


def violation(beta: np.ndarray, cap: float) -> float:
    return float(max(-beta.min(), beta.max() - cap, abs(beta.sum() - 1.0), 0.0)) + 0.0  # no -0.0


def solve_slsqp(phi64: np.ndarray, cap: float, time_limit: float) -> dict:
    """SLSQP on the dual with the n x n kernel; stops after ``time_limit`` seconds."""
    from scipy.optimize import minimize

    n = phi64.shape[0]
    start = time.perf_counter()
    K = phi64 @ phi64.T
    q = np.einsum("ij,ij->i", phi64, phi64)
    deadline = start + time_limit
    state = {"x": np.full(n, 1.0 / n), "nit": 0}

    def fun(beta):
        if time.perf_counter() > deadline:
            raise _TimeLimit
        kb = K @ beta
        return float(beta @ kb - q @ beta), 2.0 * kb - q

    def callback(xk):
        state["x"] = np.array(xk, copy=True)
        state["nit"] += 1

    limited = False
    try:
        res = minimize(
            fun,
            np.full(n, 1.0 / n),
            jac=True,
            method="SLSQP",
            bounds=[(0.0, cap)] * n,
            constraints=[{"type": "eq", "fun": lambda b: np.array([b.sum() - 1.0]), "jac": lambda b: np.ones((1, n))}],
            options={"ftol": 1e-12, "maxiter": 10000},
            callback=callback,
        )
        beta, nit, success, message = res.x, int(res.nit), bool(res.success), str(res.message)
    except _TimeLimit:
        limited = True
        beta, nit, success = state["x"], state["nit"], False
        message = f"stopped by the time limit of {time_limit:g} s"
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "beta": beta,
        "K": K,
        "q": q,
        "iterations": nit,
        "success": success,
        "message": message,
        "time_limited": limited,
    }


def solve_cvxopt(phi64: np.ndarray, cap: float) -> dict | None:
    """``cvxopt.solvers.qp`` on the same dual, or ``None`` when cvxopt is not installed."""
    try:
        import cvxopt
        from cvxopt import solvers
    except ImportError:
        return None
    n = phi64.shape[0]
    start = time.perf_counter()
    K = phi64 @ phi64.T
    q = np.einsum("ij,ij->i", phi64, phi64)
    eye = np.eye(n)
    solvers.options.update(
        {"show_progress": False, "abstol": 1e-12, "reltol": 1e-12, "feastol": 1e-12, "maxiters": 200}
    )
    sol = solvers.qp(
        cvxopt.matrix(2.0 * K),
        cvxopt.matrix(-q),
        cvxopt.matrix(np.vstack([-eye, eye])),
        cvxopt.matrix(np.concatenate([np.zeros(n), np.full(n, cap)])),
        cvxopt.matrix(np.ones((1, n))),
        cvxopt.matrix(1.0),
    )
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "beta": np.asarray(sol["x"]).ravel(),
        "status": sol["status"],
        "iterations": int(sol["iterations"]),
    }


def _stage(bar, label: str | None) -> None:
    """Close the previous stage of the solver bar (if any) and name the next one."""
    if bar is None:
        return
    if label is None:
        bar.update(1)
    else:
        bar.set_postfix_str(label)


def compare_solvers(n: int, args, data_dir: Path, *, check: bool = False, bar=None) -> dict:
    """Ours vs SLSQP (and cvxopt) on the RFF SVDD dual with ``n`` rows; ``bar`` (a tqdm bar)
    advances by one per solver (two with ``check``, else three)."""
    X, problem = qp_problem(n, args, data_dir)
    n = X.shape[0]
    gen = torch.Generator().manual_seed(args.seed)
    features = RandomFourierFeatures(
        X.shape[1], NUM_FEATURES, problem["gamma"], generator=gen, dtype=torch.float64, device=args.device
    )
    phi = features(torch.as_tensor(X, dtype=torch.float64, device=args.device))
    C = problem["c_over_n"] * n
    cap = C / n
    _stage(bar, f"n={n} solve_svdd_dual")
    solve_svdd_dual(phi, C, tol=SOLVER_TOL)  # warm-up
    times = []
    sol = None
    for _ in range(args.solver_repeats):
        _sync(args.device)
        t0 = time.perf_counter()
        sol = solve_svdd_dual(phi, C, tol=SOLVER_TOL)
        _sync(args.device)
        times.append(time.perf_counter() - t0)
    t_ours = statistics.median(times)
    phi64 = phi.detach().cpu().numpy().astype(np.float64)
    beta_ours = sol.beta.detach().cpu().numpy().astype(np.float64)
    _stage(bar, None)

    _stage(bar, f"n={n} SLSQP (time limit {args.qp_time_limit:g} s)")
    qp = solve_slsqp(phi64, cap, args.qp_time_limit)
    _stage(bar, None)
    K, q = qp["K"], qp["q"]
    w_ours = dual_objective(beta_ours, K, q)
    w_qp = dual_objective(qp["beta"], K, q)
    out: dict[str, Any] = {
        "n": n,
        "num_features": NUM_FEATURES,
        **{k: problem[k] for k in ("data", "gamma", "c_over_n")},
        "problem": problem["description"],
        "C": C,
        "ours": {
            "seconds_median": _r(t_ours, 5),
            "seconds_all": [_r(t, 5) for t in times],
            "W": w_ours,
            "W_solver": float(sol.objective),
            "fw_gap": float(sol.gap),
            "iterations": int(sol.iterations),
            "converged": bool(sol.converged),
            "support_vectors": int((sol.beta > 0).sum()),
            "tol": SOLVER_TOL,
            "device": args.device,
        },
        "slsqp": {
            "seconds": _r(qp["seconds"], 3),
            "W": w_qp,
            "iterations": qp["iterations"],
            "success": qp["success"],
            "message": qp["message"],
            "time_limited": qp["time_limited"],
            "time_limit_s": args.qp_time_limit,
            "constraint_violation": violation(qp["beta"], cap),
            "support_vectors": int((qp["beta"] > 1e-12).sum()),
            "options": {"ftol": 1e-12, "maxiter": 10000, "jac": "analytic"},
        },
        "objective_gap": abs(w_ours - w_qp),
        "W_ours_minus_W_qp": w_ours - w_qp,
        "speedup_vs_slsqp": _r(qp["seconds"] / t_ours, 1),
        "speedup_is_lower_bound": qp["time_limited"],
    }
    if check:
        return out
    cvx = None
    _stage(bar, f"n={n} cvxopt")
    try:
        cvx = solve_cvxopt(phi64, cap)
    except Exception as err:  # an installed but failing cvxopt is reported, not fatal
        out["cvxopt"] = {"error": f"{type(err).__name__}: {err}"}
    _stage(bar, None)
    if cvx is None and "cvxopt" not in out:
        out["cvxopt"] = {"skipped": "cvxopt is not installed"}
    elif cvx is not None:
        w_cvx = dual_objective(cvx["beta"], K, q)
        out["cvxopt"] = {
            "seconds": _r(cvx["seconds"], 3),
            "W": w_cvx,
            "status": cvx["status"],
            "iterations": cvx["iterations"],
            "objective_gap": abs(w_ours - w_cvx),
            "constraint_violation": violation(cvx["beta"], cap),
            "speedup_vs_cvxopt": _r(cvx["seconds"] / t_ours, 1),
        }
    return out


# --------------------------------------------------------------------------------------
# output
# --------------------------------------------------------------------------------------


def _fmt(value, spec: str, width: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:{width}{spec}}"


def print_tables(datasets: dict, skipped: dict, solver: dict | None, check: dict | None) -> None:
    print("\n== Table 7.2 setting: fit + predict of split run 0, epsilon = 1, medians ==")
    header = (
        f"{'dataset':15s} {'n_tr/n_te':>11s}  {'method':22s} {'fit s':>8s} {'pred s':>8s} "
        f"{'total s':>8s} {'acc':>6s}  {'thesis s':>9s} {'thesis/ours':>11s}"
    )
    print(header)
    print("-" * len(header))
    for name, d in datasets.items():
        first = True
        for method in METHODS:
            res = d["methods"].get(method, {})
            left = f"{name:15s} {str(d['n_train']) + '/' + str(d['n_test']):>11s}" if first else " " * 27
            first = False
            if "total_s" not in res:
                why = res.get("skipped") or res.get("error") or "not run"
                print(f"{left}  {LABELS[method]:22s} ({why[:90]})")
                continue
            column = THESIS_COLUMN.get(method)
            thesis = d["thesis_table_7_2_s"].get(column) if column else None
            print(
                f"{left}  {LABELS[method]:22s} {_fmt(res['fit_s'], '.3f', 8)} "
                f"{_fmt(res['predict_s'], '.3f', 8)} {_fmt(res['total_s'], '.3f', 8)} "
                f"{_fmt(res['accuracy'], '.3f', 6)}  {_fmt(thesis, '.2f', 9)} "
                f"{_fmt(d['ratio_thesis_over_ours'].get(method), '.1f', 11)}"
            )
    for name, why in skipped.items():
        print(f"{name:15s} skipped: {why}")
    print("* starts='training' is the thesis' variant; not differentially private.")
    if solver is None:
        return
    o, s = solver["ours"], solver["slsqp"]
    print(
        f"\n== SVDD dual (eq. 4.2), n = {solver['n']}, F = {solver['num_features']}: solve_svdd_dual vs scipy SLSQP =="
    )
    print(f"problem: {solver['problem']} (C = {solver['C']:g})")
    print(
        f"  solve_svdd_dual (tol {o['tol']:g}): {o['seconds_median']:.4f} s (median of "
        f"{len(o['seconds_all'])}), {o['iterations']} iterations, FW gap {o['fw_gap']:.2e}, "
        f"{o['support_vectors']} SVs, W = {o['W']:.12f}"
    )
    print(
        f"  SLSQP (K = Phi Phi^T, analytic gradient, ftol 1e-12): {s['seconds']:.2f} s, "
        f"{s['iterations']} iterations, {s['message']}, W = {s['W']:.12f}, "
        f"constraint violation {s['constraint_violation']:.1e}"
    )
    bound = " (lower bound: SLSQP was stopped)" if solver["speedup_is_lower_bound"] else ""
    print(
        f"  |W_ours - W_qp| = {solver['objective_gap']:.3e} (W_ours - W_qp = "
        f"{solver['W_ours_minus_W_qp']:+.3e}); speed-up t_qp / t_ours = "
        f"{solver['speedup_vs_slsqp']:.1f}{bound}"
    )
    cvx = solver.get("cvxopt", {})
    if "seconds" in cvx:
        print(
            f"  cvxopt qp: {cvx['seconds']:.2f} s, status {cvx['status']}, W = {cvx['W']:.12f}, "
            f"gap {cvx['objective_gap']:.2e}, speed-up {cvx['speedup_vs_cvxopt']:.1f}"
        )
    else:
        print(f"  cvxopt: {cvx.get('skipped') or cvx.get('error')}")
    if check is not None:
        c = check
        print(
            f"  check at n = {c['n']} (SLSQP to completion): ours {c['ours']['seconds_median']:.4f} s, "
            f"SLSQP {c['slsqp']['seconds']:.2f} s ({c['slsqp']['message']}), "
            f"|W_ours - W_qp| = {c['objective_gap']:.3e}, speed-up {c['speedup_vs_slsqp']:.1f}"
        )


# --------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--data-dir",
        default=None,
        help="data directory with uci/*.tsv.gz (default $DP_PROTO_DATA_DIR or ../shared/data)",
    )
    p.add_argument(
        "--datasets",
        nargs="+",
        default=None,
        choices=list(TABLE_7_1),
        help="subset of Table 7.1 (default all; --quick: three_moons iris shuttle, shuttle with proposed_auto only)",
    )
    p.add_argument("--repeats", type=int, default=3, help="timed runs per method (median), default 3")
    p.add_argument(
        "--large-repeats",
        type=int,
        default=1,
        help=f"timed runs of the non-headline methods on sets with > {LARGE_N} training rows (default 1)",
    )
    p.add_argument("--qp-n", type=int, default=2000, help="rows of the QP comparison (2000)")
    p.add_argument(
        "--qp-data",
        default="auto",
        choices=["auto", "shuttle", "five_gaussians"],
        help="data of the QP comparison (auto: shuttle, five_gaussians with --quick)",
    )
    p.add_argument(
        "--qp-time-limit", type=float, default=300.0, help="seconds after which SLSQP is stopped (default 300)"
    )
    p.add_argument(
        "--qp-check-n",
        type=int,
        default=800,
        help="if SLSQP hits the limit at --qp-n: also compare at this n (0: never)",
    )
    p.add_argument("--solver-repeats", type=int, default=7, help="runs of solve_svdd_dual (median)")
    p.add_argument(
        "--svm-weight-max-n", type=int, default=5000, help="time PrivateSVMWeight only on training sets up to this size"
    )
    p.add_argument("--no-qp", dest="qp", action="store_false", help="skip the solver comparison")
    p.add_argument("--threads", type=int, default=1, help="torch and BLAS threads (default 1)")
    p.add_argument("--device", default="cpu", help="torch device: cpu or cuda (default cpu)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: three_moons, iris and shuttle (proposed_auto only), qp-n 200, repeats 1",
    )
    p.add_argument("--out", default=None, help=f"JSON output (default {DEFAULT_OUT}; --quick: {QUICK_OUT.name})")
    args = p.parse_args(argv)
    if args.quick:
        args.datasets = args.datasets or list(QUICK_DATASETS)
        args.qp_n, args.repeats, args.large_repeats, args.solver_repeats = 200, 1, 1, 3
    args.out = args.out or str(QUICK_OUT if args.quick else DEFAULT_OUT)
    args.datasets = args.datasets or list(TABLE_7_1)
    if args.repeats < 1 or args.large_repeats < 1 or args.solver_repeats < 1 or args.qp_n < 10:
        p.error("--repeats, --large-repeats and --solver-repeats must be >= 1, --qp-n >= 10")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device cuda: CUDA is not available")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    try:
        from threadpoolctl import threadpool_limits

        limiter = threadpool_limits(limits=args.threads)
    except ImportError:  # comes with scikit-learn; without it BLAS keeps its own setting
        limiter = None
    try:
        payload = _run(args, started)
    finally:
        if limiter is not None:
            limiter.restore_original_limits()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    emit_json(payload, out)
    return 0


def _run(args, started: float) -> dict:
    data_dir = Path(args.data_dir).expanduser() if args.data_dir else default_data_dir()
    svm_weight_cls, svm_weight_note = _load_svm_weight()
    loaded: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    skipped: dict[str, str] = {}
    for name in args.datasets:
        if name not in SYNTHETIC and not data_dir.is_dir():
            skipped[name] = f"data directory {str(data_dir)!r} not found (pass --data-dir)"
            continue
        try:
            loaded[name] = load_dataset(name, data_dir, random_state=0)
        except (FileNotFoundError, OSError) as err:
            skipped[name] = f"data file missing: {str(err).splitlines()[0]}"
    for name, why in skipped.items():
        print(f"note: {name} skipped: {why}", file=sys.stderr)

    datasets: dict[str, dict] = {}
    with tqdm(
        total=len(loaded) * len(METHODS), desc=BENCHMARK, unit="method", file=sys.stderr, dynamic_ncols=True
    ) as bar:
        for name, (X, y) in loaded.items():
            datasets[name] = run_dataset(name, X, y, args, svm_weight_cls, svm_weight_note, bar)

    solver = check = None
    if args.qp:
        with tqdm(
            total=3, desc=f"{BENCHMARK} solvers", unit="solver", file=sys.stderr, dynamic_ncols=True
        ) as solver_bar:
            solver = compare_solvers(args.qp_n, args, data_dir, bar=solver_bar)
            if solver["slsqp"]["time_limited"] and 0 < args.qp_check_n < args.qp_n:
                tqdm.write(
                    f"SLSQP hit the time limit; checking the objective at n = {args.qp_check_n} ...", file=sys.stderr
                )
                solver_bar.total += 2
                solver_bar.refresh()
                check = compare_solvers(args.qp_check_n, args, data_dir, check=True, bar=solver_bar)
                solver["check_at_smaller_n"] = check

    print_tables(datasets, skipped, solver, check)

    shuttle = datasets.get("shuttle", {}).get("methods", {}).get(HEADLINE_METHOD, {})
    gap_source = check if check is not None and not check["slsqp"]["time_limited"] else solver
    cvx = (solver or {}).get("cvxopt", {})
    if cvx.get("status") == "optimal":
        # the thesis' own general QP solver (CVXOPT, L523), run to its optimum at --qp-n
        headline_qp = {
            "solver_reference": "cvxopt.solvers.qp",
            "solver_speedup_vs_qp": cvx["speedup_vs_cvxopt"],
            "solver_objective_gap": cvx["objective_gap"],
            "solver_objective_gap_n": solver["n"],
            "solver_speedup_is_lower_bound": False,
        }
    else:
        headline_qp = {
            "solver_reference": "scipy SLSQP",
            "solver_speedup_vs_qp": solver["speedup_vs_slsqp"] if solver else None,
            "solver_objective_gap": gap_source["objective_gap"] if gap_source else None,
            "solver_objective_gap_n": gap_source["n"] if gap_source else None,
            "solver_speedup_is_lower_bound": solver["speedup_is_lower_bound"] if solver else None,
        }
    headline = {
        "shuttle_end_to_end_s": shuttle.get("total_s"),
        **headline_qp,
        "solver_qp_n": solver["n"] if solver else None,
        "solver_speedup_vs_slsqp": solver["speedup_vs_slsqp"] if solver else None,
        # SLSQP at --qp-n itself (it may have been stopped by the time limit there)
        "solver_objective_gap_slsqp_at_qp_n": solver["objective_gap"] if solver else None,
    }
    print(f"\nheadline: {headline}")
    notes = [
        "times: wall-clock seconds of fit (training split) + predict (test split), median of the "
        "timed runs after one untimed warm-up; data loading and standardisation not timed",
        "accuracy: of the first timed run on the run-0 test split (all runs share the seed)",
        "thesis_table_7_2_s: Park (2022) Table 7.2 seconds on a Xeon Gold 5218R (Python 3.7, "
        "scikit-learn/SciPy/CVXOPT); ratio_thesis_over_ours = thesis seconds / our median total",
        "proposed_training (starts='training') is the thesis' variant and not differentially "
        "private; proposed_auto is the sound default (starts='auto': the public grid of side 2 r_max when "
        "its release threshold is at most n^/200, else public N(0, I) starts); proposed_normal always takes "
        "the N(0, I) starts (n_starts='auto')",
        "svc_rbf: non-private sklearn SVC(kernel='rbf', gamma=Table 7.1 SVM gamma, C=1), one-vs-one",
        "solver comparison: all single-threaded at --threads; SLSQP's and cvxopt's times include "
        "forming K = Phi Phi^T; W(beta) = q.beta - beta'K beta evaluated by the same float64 formula; "
        "the headline uses cvxopt (the thesis' QP solver) when it is installed and reaches its "
        "optimum, else SLSQP",
    ]
    device_name = args.device
    if args.device.startswith("cuda"):
        device_name = f"{args.device} ({torch.cuda.get_device_name()})"
    return {
        "benchmark": BENCHMARK,
        "results": {"datasets": datasets, "skipped": skipped, "solver_vs_qp": solver},
        "headline": headline,
        "settings": {
            "epsilon": EPSILON,
            "num_features": NUM_FEATURES,
            "split_run": 0,
            "repeats": args.repeats,
            "large_repeats": args.large_repeats,
            "solver_repeats": args.solver_repeats,
            "qp_n": args.qp_n,
            "qp_time_limit_s": args.qp_time_limit,
            "qp_check_n": args.qp_check_n,
            "solver_tol": SOLVER_TOL,
            "seed": args.seed,
            "quick": args.quick,
            "datasets": args.datasets,
            "data_dir": str(data_dir),
        },
        "device": device_name,
        "threads": args.threads,
        "torch_version": torch.__version__,
        "cpu_model": cpu_model(),
        "machine": machine_description(),
        "python": platform.python_version(),
        "load_avg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "elapsed_s": round(time.perf_counter() - started, 1),
        "notes": notes,
    }


if __name__ == "__main__":
    raise SystemExit(main())
