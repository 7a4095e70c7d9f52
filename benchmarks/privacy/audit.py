"""Empirical privacy audit of the mechanisms of :mod:`dp_proto.privacy`.

For each mechanism and claimed epsilon, :func:`dp_proto.privacy.audit.audit_epsilon`
plays the distinguishing game on a neighbouring pair (``D1`` = ``D0`` plus one record)
and reports a lower bound on the true epsilon that holds with 95 % confidence
(Clopper-Pearson, test chosen on half of the trials and certified on the other half):

* ``laplace_eps*``: a count query through ``laplace_mechanism`` (sensitivity 1);
* ``gaussian_eps*``: the same count through ``gaussian_mechanism`` (analytic
  calibration, delta = 1e-5; the bound is for that delta);
* ``dp_init_eps*``: ``dp_class_mean_prototypes`` (1 feature, 2 classes) with a canary
  at the domain corner +1 added to a class of 50 records at -1; statistic: the
  class-0 prototype. Runs the real function once per trial (slower, ``--init-trials``);
* ``broken_laplace_claims1``: a deliberately under-noised Laplace mechanism (scale
  halved: claims epsilon 1, is 2-DP) that the audit must flag.

Whole trainers, each with a deliberately broken variant the audit must flag:

* ``saa``: ``SubsampleAggregateGLVQ`` end to end (i.i.d. bins, per-bin GLVQ,
  projection, Gaussian noise; 16 bins, epsilon 2) with a class-0 canary at the domain's
  corner; ``broken_saa_fixed_seed``: the same release with one noise seed for every run
  (the library's old public default), which an attacker who knows it exploits;
* ``llp_release``: one node's label-proportion release (Laplace, epsilon 1) with one
  extra window; ``broken_llp_fixed_seed``: the same with a fixed noise seed;
* ``dp_sgd``: a small DP-GLVQ training through ``fit_dp_sgd`` (noise multiplier 2,
  claim from the ledger) with a canary; ``broken_dp_sgd``: the noise scaled by 1/50
  under the same claim.

One DP-SGD step of each engine, white box, from a worst-case state
(``dp_proto.lvq.private.audit.dp_sgd_step_audit_setup``): ``step_<engine>_<layer>_<canary>_eps<E>``
for the engines ``fused``, ``hooks`` and ``ghost`` of ``fit_dp_sgd``, GLVQ / GMLVQ / LGMLVQ
layers in float32 (which ``fit_dp_sgd`` runs in float64; before the fix: in float32), with
prototypes of classes 0 and 1 both at the corner (1, 1), 40 class-0
records at (-1, -1) and a class-0 canary on the coincident pair (``pair``) or at the centre
(``centre``, where its clipped contribution is largest: exactly C for a correct engine); one
full-batch step (q = 1) at the noise multiplier calibrated to epsilon E in (1, 2, 4, 8), claimed
at the epsilon the ledger certifies for it (delta 1e-5); statistic: the noisy clipped sum's
projection on the direction of the pre-noise difference. ``..._before_fix``: the engine before
commit 87dfabc (``CANCELLATION_GUARD`` patched to 0.0, the layer run in its own
float32), which moved by 40 C on the pair.

An honest mechanism must give a lower bound below its claim (up to the 5 % chance the
confidence allows); a bound above the claim is a detected violation.

Usage::

    python -m benchmarks.privacy.audit                      # defaults, a few minutes
    python -m benchmarks.privacy.audit --quick              # fewer trials, same rows, about 20 s
    python -m benchmarks.privacy.audit --trials 200000 --init-trials 5000 --step-trials 1000000 --seed 1

Ends with one JSON line::

    {"benchmark": "privacy_audit", "results": {NAME: {"claimed": EPS, "audited_lower_bound": LB, ...}}, ...}

(the step rows add ``engine``, ``layer``, ``canary``, ``before_fix``, ``target_epsilon``,
``noise_multiplier`` and ``movement``: ``||S(D1) - S(D0)|| / C`` of the pre-noise sums).
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from tqdm import tqdm

from benchmarks.common import emit_json, machine_description
from dp_proto.llp.audit import llp_release_audit_setup
from dp_proto.lvq.private.audit import (
    StepAuditSetup,
    dp_init_audit_setup,
    dp_sgd_audit_setup,
    dp_sgd_step_audit_setup,
    saa_audit_setup,
)
from dp_proto.privacy.audit import (
    AuditSetup,
    gaussian_audit_setup,
    laplace_audit_setup,
)

BENCHMARK = "privacy_audit"
EPSILONS = (0.5, 1.0, 2.0)
GAUSSIAN_DELTA = 1e-5
#: The per-step audits: epsilons the noise multiplier is calibrated to, engines, layers.
STEP_EPSILONS = (1.0, 2.0, 4.0, 8.0)
STEP_ENGINES = ("fused", "hooks", "ghost")
STEP_LAYERS = ("glvq", "gmlvq", "lgmlvq")
#: (canary, before_fix) of the rows of each engine and layer
STEP_VARIANTS = (("pair", False), ("centre", False), ("pair", True))


def build_setups() -> list[tuple[AuditSetup, str, str]]:
    """(setup, description, trial kind) for every audited release; the trial kind picks
    ``--trials`` (vectorised), ``--init-trials`` or ``--trainer-trials`` (one run each), or
    ``--step-trials`` (the vectorised per-step audits)."""
    setups: list[tuple[AuditSetup, str, str]] = []
    for eps in EPSILONS:
        setups.append((laplace_audit_setup(eps), "laplace_mechanism, count", "vector"))
    for eps in EPSILONS:
        setups.append((gaussian_audit_setup(eps, GAUSSIAN_DELTA), "gaussian_mechanism, count", "vector"))
    for eps in EPSILONS:
        setups.append((dp_init_audit_setup(eps, dim=1), "dp_class_mean_prototypes, canary", "init"))
    setups.append((laplace_audit_setup(1.0, noise_factor=0.5), "BROKEN: Laplace scale halved", "vector"))
    trainers = [
        ("saa", saa_audit_setup(2.0), "SubsampleAggregateGLVQ, canary", "trainer"),
        ("broken_saa_fixed_seed", saa_audit_setup(2.0, fixed_noise_seed=0), "BROKEN: SAA, one noise seed", "trainer"),
        ("llp_release", llp_release_audit_setup(1.0), "LLP label proportions, +1 window", "trainer"),
        (
            "broken_llp_fixed_seed",
            llp_release_audit_setup(1.0, fixed_noise_seed=0),
            "BROKEN: LLP, one noise seed",
            "trainer",
        ),
        ("dp_sgd", dp_sgd_audit_setup(2.0), "fit_dp_sgd (fused), canary", "trainer"),
        ("broken_dp_sgd", dp_sgd_audit_setup(2.0, noise_factor=0.02), "BROKEN: DP-SGD noise / 50", "trainer"),
    ]
    for name, setup, what, kind in trainers:
        setups.append(
            (
                AuditSetup(
                    name,
                    setup.claimed_epsilon,
                    setup.delta,
                    setup.mechanism,
                    setup.dataset_0,
                    setup.dataset_1,
                    setup.statistic,
                    setup.batch,
                ),
                what,
                kind,
            )
        )
    return setups + build_step_setups()


def build_step_setups() -> list[tuple[AuditSetup, str, str]]:
    """The per-step audits: engine x layer x (canary, before the fix) x epsilon."""
    setups: list[tuple[AuditSetup, str, str]] = []
    for engine in STEP_ENGINES:
        for layer in STEP_LAYERS:
            for canary, before_fix in STEP_VARIANTS:
                what = f"{'BEFORE FIX: ' if before_fix else ''}{engine} step, {layer.upper()}, canary {canary}"
                for eps in STEP_EPSILONS:
                    setup = dp_sgd_step_audit_setup(
                        eps, engine=engine, layer=layer, canary=canary, before_fix=before_fix
                    )
                    setups.append((setup, what, "step"))
    return setups


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--trials",
        type=int,
        default=1_000_000,
        help="trials per data set for the vectorised Laplace/Gaussian audits (default 1e6)",
    )
    p.add_argument(
        "--init-trials",
        type=int,
        default=20_000,
        help="trials per data set for the DP initialisation (one call each; default 20000)",
    )
    p.add_argument(
        "--trainer-trials",
        type=int,
        default=2_000,
        help="trials per data set for the whole trainers (one fit each; default 2000)",
    )
    p.add_argument(
        "--step-trials",
        type=int,
        default=10_000_000,
        help="trials per data set for the per-step DP-SGD audits (vectorised; default 1e7)",
    )
    p.add_argument(
        "--quick", action="store_true", help="fewer trials (20000 / 1000 / 300 / 100000), the same rows and keys"
    )
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--seed", type=int, default=0, help="seed of every audit (reproducible)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--out", default=None, help="also write the JSON summary to this file")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.trials, args.init_trials, args.trainer_trials, args.step_trials = 20_000, 1_000, 300, 100_000
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    setups = build_setups()
    rows, results = [], {}
    with tqdm(setups, desc=BENCHMARK, unit="audit", file=sys.stderr, dynamic_ncols=True) as bar:
        for setup, what, kind in bar:
            bar.set_postfix_str(setup.name)
            n = {
                "vector": args.trials,
                "init": args.init_trials,
                "trainer": args.trainer_trials,
                "step": args.step_trials,
            }[kind]
            t0 = time.perf_counter()
            r = setup.audit(n, confidence=args.confidence, generator_seed=args.seed)
            seconds = time.perf_counter() - t0
            violated = r.epsilon_lower_bound > setup.claimed_epsilon
            results[setup.name] = {
                "claimed": round(setup.claimed_epsilon, 4),
                "audited_lower_bound": round(r.epsilon_lower_bound, 4),
                "delta": setup.delta,
                "epsilon_estimate": round(r.epsilon_estimate, 4),
                "n_trials": n,
                "violation_detected": violated,
                "seconds": round(seconds, 2),
            }
            if isinstance(setup, StepAuditSetup):
                results[setup.name].update(
                    engine=setup.engine,
                    layer=setup.layer,
                    canary=setup.canary,
                    before_fix=setup.before_fix,
                    target_epsilon=setup.target_epsilon,
                    noise_multiplier=round(setup.noise_multiplier, 6),
                    movement=round(setup.movement, 6),
                )
            rows.append((setup.name, what, setup.claimed_epsilon, setup.delta, n, r, violated))
    elapsed = time.perf_counter() - start

    header = (
        f"{'name':<34} {'mechanism':<40} {'claimed':>7} {'delta':>6} {'trials':>9} "
        f"{'lower bound':>11} {'LB/claim':>8} {'estimate':>8}  verdict"
    )
    print(f"\nPrivacy audit: {args.confidence:.0%} lower bounds on epsilon (trials per data set)")
    print(header)
    print("-" * len(header))
    for name, what, eps, delta, n, r, violated in rows:
        verdict = "VIOLATION (lower bound > claim)" if violated else "ok (below claim)"
        print(
            f"{name:<34} {what:<40} {eps:>7g} {delta:>6g} {n:>9d} {r.epsilon_lower_bound:>11.3f} "
            f"{r.epsilon_lower_bound / eps:>8.2f} {r.epsilon_estimate:>8.3f}  {verdict}"
        )
    print(f"\n{elapsed:.1f} s on {machine_description()}\n")

    emit_json(
        {
            "benchmark": BENCHMARK,
            "results": results,
            "confidence": args.confidence,
            "seed": args.seed,
            "trials": args.trials,
            "init_trials": args.init_trials,
            "trainer_trials": args.trainer_trials,
            "step_trials": args.step_trials,
            "quick": args.quick,
            "elapsed_s": round(elapsed, 1),
            "machine": machine_description(),
        },
        args.out,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
