"""Discrete Laplace and Gaussian samplers: dp-proto's vectorised samplers against OpenDP's exact ones.

Float-safe releases add integer noise ``P(k) ~ exp(-|k| / b)`` to values on a
public grid. Two samplers can draw it:

* ``dp_proto``: :func:`dp_proto.privacy.noise.discrete_laplace_noise`, the difference of
  two geometric variables with unbounded tails (an inverse CDF over branches of
  probability at least about 2.6e-4, a fresh start beyond them), vectorised in torch on
  the tensor's device, from a generator (fresh operating-system entropy by default,
  seeded for reproducible tests) or ``os.urandom``. Each outcome's probability is within
  about 1e-12 relative of the pmf.
* ``opendp``: OpenDP's ``make_laplace`` on integers (Rust, exact rational arithmetic,
  the operating system's CSPRNG; CPU only, cannot be seeded), if the ``opendp`` package
  is installed (``pip install opendp``; not a dependency of dp-proto).

The discrete Gaussian ``P(k) ~ exp(-k^2 / 2 sigma^2)`` (float-safe Gaussian releases)
likewise: ``dp_proto_gaussian`` is :func:`dp_proto.privacy.noise.discrete_gaussian_noise`
(rejection from the discrete Laplace, Canonne, Kamath & Steinke 2020, Alg. 3, vectorised,
an exact-tailed Bernoulli acceptance), ``opendp_gaussian`` OpenDP's ``make_gaussian`` on integers.

For each scale the script draws ``n`` values with each sampler, times it, and tests the
goodness of fit to the exact pmf (chi-square over ``|k| <= 3 scale`` plus the two tails).

Usage::

    python -m benchmarks.privacy.noise_samplers            # n = 1,000,000 per scale
    python -m benchmarks.privacy.noise_samplers --quick    # n = 100,000

Ends with one JSON line ``{"benchmark": "noise_samplers", "results": {SAMPLER: {...}},
"speed_ratio_opendp_over_dp_proto": R, "speed_ratio_opendp_over_dp_proto_gaussian": R}``
(SAMPLER: ``dp_proto``, ``opendp`` for the Laplace, ``..._gaussian`` for the Gaussian).
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

from benchmarks.common import emit_json, machine_description
from dp_proto.privacy.noise import discrete_gaussian_noise, discrete_laplace_noise

BENCHMARK = "noise_samplers"
SCALES = (1.0, 10.0, 1025.0)  # a count at epsilon 1 and 0.1; an "auto" grid release at epsilon 1
# a count at epsilon 1 (delta 1e-5); an "auto" grid release of one coordinate at epsilon 1
SIGMAS = (4.045, 4146.5)


def pmf_pvalue(noise: np.ndarray, scale: float) -> float:
    """Chi-square p-value of integer ``noise`` against ``P(k) = (1 - p)/(1 + p) p^|k|``,
    ``p = exp(-1/scale)``, one cell per ``|k| <= K`` (``K = ceil(3 scale)``, at most 2000
    cells) plus both tails."""
    p = math.exp(-1.0 / scale)
    kmax = min(math.ceil(3 * scale), 1000)
    ks = np.arange(-kmax, kmax + 1)
    tail = p ** (kmax + 1) / (1 + p)
    probs = np.concatenate([[tail], (1 - p) / (1 + p) * p ** np.abs(ks), [tail]])
    return _chi_square(noise, probs, kmax)


def _chi_square(noise: np.ndarray, probs: np.ndarray, kmax: int) -> float:
    """Chi-square p-value of integer ``noise`` against cell probabilities ``probs``: the
    lower tail, ``k = -kmax..kmax``, the upper tail."""
    counts = np.bincount(np.clip(noise, -kmax - 1, kmax + 1).astype(np.int64) + kmax + 1, minlength=2 * kmax + 3)
    return float(stats.chisquare(counts, probs * noise.size).pvalue)


def gaussian_pmf_pvalue(noise: np.ndarray, sigma: float) -> float:
    """Chi-square p-value of integer ``noise`` against ``P(k) ~ exp(-k^2 / 2 sigma^2)``,
    cells as in :func:`pmf_pvalue` with ``K = ceil(3 sigma)`` (at most 1000)."""
    kmax = min(math.ceil(3 * sigma), 1000)
    support = np.arange(-math.ceil(40 * sigma) - 40, math.ceil(40 * sigma) + 41)
    weights = np.exp(-(support.astype(np.float64) ** 2) / (2 * sigma**2))
    pmf = weights / weights.sum()
    inner = np.abs(support) <= kmax
    probs = np.concatenate([[pmf[support < -kmax].sum()], pmf[inner], [pmf[support > kmax].sum()]])
    return _chi_square(noise, probs, kmax)


def draw_dp_proto(n: int, scale: float) -> np.ndarray:
    return discrete_laplace_noise(n, scale).numpy()


def draw_dp_proto_gaussian(n: int, sigma: float) -> np.ndarray:
    return discrete_gaussian_noise(n, sigma).numpy()


def opendp_samplers():
    """OpenDP's integer Laplace and Gaussian as ``draw(n, scale)``, or None if it is not installed."""
    try:
        import opendp.prelude as dp
    except ImportError:
        return None
    dp.enable_features("contrib")

    def laplace(n: int, scale: float) -> np.ndarray:
        meas = dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int), scale=scale)
        return np.asarray(meas([0] * n), dtype=np.int64)

    def gaussian(n: int, sigma: float) -> np.ndarray:
        meas = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T=int)), dp.l2_distance(T=int), scale=sigma)
        return np.asarray(meas([0] * n), dtype=np.int64)

    return laplace, gaussian


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
    # name: (draw, scales, goodness of fit)
    samplers = {
        "dp_proto": (draw_dp_proto, SCALES, pmf_pvalue),
        "dp_proto_gaussian": (draw_dp_proto_gaussian, SIGMAS, gaussian_pmf_pvalue),
    }
    opendp = opendp_samplers()
    if opendp is not None:
        samplers["opendp"] = (opendp[0], SCALES, pmf_pvalue)
        samplers["opendp_gaussian"] = (opendp[1], SIGMAS, gaussian_pmf_pvalue)
    results: dict[str, dict] = {}
    jobs = [(name, scale) for name, (_, scales, _) in samplers.items() for scale in scales]
    for name, scale in tqdm(jobs, desc=BENCHMARK, file=sys.stderr, dynamic_ncols=True):
        draw, _, fit = samplers[name]
        draw(1000, scale)  # warm-up
        t0 = time.perf_counter()
        noise = draw(n, scale)
        seconds = time.perf_counter() - t0
        row = results.setdefault(name, {"n": n, "seconds": {}, "ns_per_draw": {}, "pvalue": {}})
        row["seconds"][f"{scale:g}"] = round(seconds, 4)
        row["ns_per_draw"][f"{scale:g}"] = round(1e9 * seconds / n, 1)
        row["pvalue"][f"{scale:g}"] = round(fit(noise, scale), 4)

    print(f"\nDiscrete Laplace and Gaussian samplers, {n:,} draws per scale")
    print(f"{'sampler':<18} {'scale':>7} {'ns/draw':>9} {'chi2 p':>8}")
    for name, row in results.items():
        for key in row["seconds"]:
            print(f"{name:<18} {key:>7} {row['ns_per_draw'][key]:>9.1f} {row['pvalue'][key]:>8.3f}")
    ratios: dict[str, float | None] = {"": None, "_gaussian": None}
    if opendp is not None:
        total = {k: sum(v["seconds"].values()) for k, v in results.items()}
        for law in ratios:
            ratios[law] = round(total[f"opendp{law}"] / total[f"dp_proto{law}"], 2)
            print(f"\nOpenDP{law.replace('_', ' ')} takes {ratios[law]}x the time of dp-proto's sampler")
    else:
        print("\nOpenDP is not installed (pip install opendp): only dp-proto's samplers were measured")
    print(f"{machine_description()}\n")
    emit_json(
        {
            "benchmark": BENCHMARK,
            "results": results,
            "speed_ratio_opendp_over_dp_proto": ratios[""],
            "speed_ratio_opendp_over_dp_proto_gaussian": ratios["_gaussian"],
            "quick": args.quick,
            "machine": machine_description(),
        },
        args.out,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
