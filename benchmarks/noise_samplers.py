"""Discrete Laplace samplers: dp-proto's vectorised sampler against OpenDP's exact one.

Float-safe releases (issue 20) add integer noise ``P(k) ~ exp(-|k| / b)`` to values on a
public grid. Two samplers can draw it:

* ``dp_proto``: :func:`dp_proto.privacy.noise.discrete_laplace_noise`, the difference of
  two geometric variables ``floor(log(u) / log(p))`` from 53-bit uniforms, vectorised in
  torch on the tensor's device, from a generator (fresh operating-system entropy by
  default, seeded for reproducible tests) or ``os.urandom``. Its probabilities are exact
  up to double rounding in the logarithm (about 1e-16 relative).
* ``opendp``: OpenDP's ``make_laplace`` on integers (Rust, exact rational arithmetic,
  the operating system's CSPRNG; CPU only, cannot be seeded), if the ``opendp`` package
  is installed (``pip install opendp``; not a dependency of dp-proto).

For each scale ``b`` the script draws ``n`` values with each sampler, times it, and tests
the goodness of fit to the exact pmf (chi-square over ``|k| <= 3b`` plus the two tails).

Usage::

    python benchmarks/noise_samplers.py            # n = 1,000,000 per scale
    python benchmarks/noise_samplers.py --quick    # n = 100,000

Ends with one JSON line ``{"benchmark": "noise_samplers", "results": {SAMPLER: {...}},
"speed_ratio_opendp_over_dp_proto": R}``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np
import torch
from scipy import stats
from tqdm import tqdm

try:  # run as a script: benchmarks/ is on sys.path
    from _common import emit_json, machine_description
except ImportError:  # imported as benchmarks.noise_samplers
    from benchmarks._common import emit_json, machine_description

from dp_proto.privacy.noise import discrete_laplace_noise

BENCHMARK = "noise_samplers"
SCALES = (1.0, 10.0, 1025.0)  # a count at epsilon 1 and 0.1; an "auto" grid release at epsilon 1


def pmf_pvalue(noise: np.ndarray, scale: float) -> float:
    """Chi-square p-value of integer ``noise`` against ``P(k) = (1 - p)/(1 + p) p^|k|``,
    ``p = exp(-1/scale)``, one cell per ``|k| <= K`` (``K = ceil(3 scale)``, at most 2000
    cells) plus both tails."""
    p = math.exp(-1.0 / scale)
    kmax = min(math.ceil(3 * scale), 1000)
    ks = np.arange(-kmax, kmax + 1)
    tail = p ** (kmax + 1) / (1 + p)
    probs = np.concatenate([[tail], (1 - p) / (1 + p) * p ** np.abs(ks), [tail]])
    counts = np.bincount(np.clip(noise, -kmax - 1, kmax + 1).astype(np.int64) + kmax + 1, minlength=2 * kmax + 3)
    return float(stats.chisquare(counts, probs * noise.size).pvalue)


def draw_dp_proto(n: int, scale: float) -> np.ndarray:
    return discrete_laplace_noise(n, scale).numpy()


def opendp_sampler():
    """OpenDP's integer Laplace as ``draw(n, scale)``, or None if it is not installed."""
    try:
        import opendp.prelude as dp
    except ImportError:
        return None
    dp.enable_features("contrib")

    def draw(n: int, scale: float) -> np.ndarray:
        meas = dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int), scale=scale)
        return np.asarray(meas([0] * n), dtype=np.int64)
    return draw


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1_000_000, help="draws per scale and sampler")
    p.add_argument("--quick", action="store_true", help="n = 100,000")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None, help="also write the JSON summary to this file")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    n = 100_000 if args.quick else args.n
    torch.set_num_threads(args.threads)
    samplers = {"dp_proto": draw_dp_proto}
    opendp = opendp_sampler()
    if opendp is not None:
        samplers["opendp"] = opendp
    results: dict[str, dict] = {}
    jobs = [(name, scale) for name in samplers for scale in SCALES]
    for name, scale in tqdm(jobs, desc=BENCHMARK, file=sys.stderr, dynamic_ncols=True):
        draw = samplers[name]
        draw(1000, scale)  # warm-up
        t0 = time.perf_counter()
        noise = draw(n, scale)
        seconds = time.perf_counter() - t0
        row = results.setdefault(name, {"n": n, "seconds": {}, "ns_per_draw": {}, "pvalue": {}})
        row["seconds"][f"{scale:g}"] = round(seconds, 4)
        row["ns_per_draw"][f"{scale:g}"] = round(1e9 * seconds / n, 1)
        row["pvalue"][f"{scale:g}"] = round(pmf_pvalue(noise, scale), 4)

    print(f"\nDiscrete Laplace samplers, {n:,} draws per scale")
    print(f"{'sampler':<10} {'scale':>7} {'ns/draw':>9} {'chi2 p':>8}")
    for name, row in results.items():
        for scale in SCALES:
            key = f"{scale:g}"
            print(f"{name:<10} {key:>7} {row['ns_per_draw'][key]:>9.1f} {row['pvalue'][key]:>8.3f}")
    ratio = None
    if "opendp" in results:
        total = {k: sum(v["seconds"].values()) for k, v in results.items()}
        ratio = round(total["opendp"] / total["dp_proto"], 2)
        print(f"\nOpenDP takes {ratio}x the time of dp-proto's sampler")
    else:
        print("\nOpenDP is not installed (pip install opendp): only dp-proto's sampler was measured")
    print(f"{machine_description()}\n")
    emit_json({"benchmark": BENCHMARK, "results": results, "speed_ratio_opendp_over_dp_proto": ratio,
               "quick": args.quick, "machine": machine_description()}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
