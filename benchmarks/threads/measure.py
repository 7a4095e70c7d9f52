"""Seconds per training step of the LVQ estimators with 1 and with 2 torch threads, on an
idle machine and with every core kept busy, against the work per step of
``dp_proto._threads`` (rows per step x trainable parameters).

Every case fits one prototype per class on uniform features in ``[-1, 1]`` with random
labels (so L-BFGS never converges early): the non-private models full-batch L-BFGS for a
fixed number of iterations (rows per step = ``n``), the private ones DP-SGD at sampling
rate ``q`` (rows per step about ``q n``, seeded noise). The thread count is forced with
``DP_PROTO_NUM_THREADS`` (the library's override). "busy" runs the same fits while
``--busy`` processes (``python -c "while True: pass"``, started and killed here) spin.
A time is the fastest of ``--repeats`` fits divided by the steps run, after a warm-up
fit with the same settings on 500 rows (it caches the private fits' noise calibration).

Usage::

    python -m benchmarks.threads.measure            # 1 and 2 threads, idle and busy
    python -m benchmarks.threads.measure --quick    # three small cases, fewer steps

Ends with one JSON line ``{"benchmark": "threads", "threads": [1, 2], "results": [{"case",
"work", "busy", "s_per_step": {"1": .., "2": ..}, "ratio_2_over_1"}, ..], ...}``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import warnings

import numpy as np

from benchmarks.common import emit_json, run_metadata
from dp_proto._threads import NUM_THREADS_ENV, step_work

# (label, estimator, n, d, classes, steps, sampling rate or None for full-batch L-BFGS)
CASES = [
    ("DPGLVQ 10000x16 q=0.01", "DPGLVQ", 10000, 16, 2, 400, 0.01),
    ("DPGMLVQ 10000x50 q=0.01", "DPGMLVQ", 10000, 50, 2, 400, 0.01),
    ("DPGMLVQ 10000x50 q=0.1", "DPGMLVQ", 10000, 50, 2, 200, 0.1),
    ("GLVQ 10000x50 c=10", "GLVQ", 10000, 50, 10, 100, None),
    ("DPGMLVQ 20000x100 q=0.1", "DPGMLVQ", 20000, 100, 2, 100, 0.1),
    ("GMLVQ 10000x50", "GMLVQ", 10000, 50, 2, 60, None),
    ("GMLVQ 20000x100", "GMLVQ", 20000, 100, 2, 20, None),
    ("GMLVQ 40000x200", "GMLVQ", 40000, 200, 2, 8, None),
]
QUICK = (0, 2, 5)


def make(model: str, n: int, steps: int, q: float | None, classes: list[int]):
    import dp_proto.lvq as lvq
    import dp_proto.lvq.private as private

    if q is None:
        return getattr(lvq, model)(max_iter=steps, stopping="lbfgs", tol=1e-12, random_state=0)
    return getattr(private, model)(
        sampling_rate=q, epochs=steps / int(1 / q), bounds=(-1, 1), classes=classes, noise_seed=0, random_state=0
    )


def seconds_per_step(case, threads: int, repeats: int, scale: float) -> tuple[float, float]:
    """(fastest seconds per step over ``repeats`` fits, work per step) at ``threads``."""
    _, model, n, d, c, steps, q = case
    steps = max(2, int(steps * scale))
    rng = np.random.default_rng(0)
    X, y = rng.uniform(-1, 1, (n, d)), rng.integers(0, c, n)
    os.environ[NUM_THREADS_ENV] = str(threads)
    best, work = float("inf"), 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning, seeded noise's PrivacyLeakWarning
        make(model, n, steps, q, list(range(c))).fit(X[:500], y[:500])  # warm-up; caches the noise calibration
        for _ in range(repeats):
            est = make(model, n, steps, q, list(range(c)))
            start = time.perf_counter()
            est.fit(X, y)
            best = min(best, (time.perf_counter() - start) / est.n_iter_)
            work = step_work(n if q is None else q * n, est.model_)
    return best, work


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch thread counts to compare")
    p.add_argument(
        "--busy", type=int, default=os.cpu_count() or 2, help="busy-loop processes of the busy runs (0: idle runs only)"
    )
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="three small cases, a fifth of the steps, 1 repeat")
    p.add_argument("--out", default=None, help="also write the JSON line to this file")
    args = p.parse_args(argv)
    started = time.perf_counter()
    cases = [CASES[i] for i in QUICK] if args.quick else CASES
    scale, repeats = (0.2, 1) if args.quick else (1.0, args.repeats)
    print(f"threads compared: {args.threads}; busy runs: {args.busy} busy-loop processes, {os.cpu_count()} cores")
    print(
        f"{'case':<26} {'work/step':>10} {'cores':<5} {'load':>5} "
        + " ".join(f"{f'{t} thr s/step':>14}" for t in args.threads)
    )
    results = []
    for busy in sorted({0, args.busy}):
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
        try:
            for case in cases:
                times = {}
                for t in args.threads:
                    times[str(t)], work = seconds_per_step(case, t, repeats, scale)
                load = os.getloadavg()[0]
                row = {"case": case[0], "work": work, "busy": busy, "load_1min": load, "s_per_step": times}
                if {"1", "2"} <= times.keys():
                    row["ratio_2_over_1"] = round(times["2"] / times["1"], 3)
                results.append(row)
                cells = " ".join(f"{times[str(t)]:14.5f}" for t in args.threads)
                print(f"{case[0]:<26} {work:10.2e} {'busy' if busy else 'idle':<5} {load:5.1f} {cells}", flush=True)
        finally:
            for proc in spinners:
                proc.kill()
                proc.wait()
    payload = {
        "benchmark": "threads",
        "threads": args.threads,
        "busy_processes": args.busy,
        "repeats": repeats,
        "quick": args.quick,
        "results": results,
        **run_metadata(started),
    }
    emit_json(payload, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
