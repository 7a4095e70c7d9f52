"""What the per-record DP-SGD path costs against Opacus' batched per-sample gradients.

With a network in front of the prototypes (or in the anonymizer), the library's
default differentiates every record alone, a batch of one, so that a record's clipped
gradient does not follow the batch's rounding (docs/privacy-model.md); Opacus' batched
pass (``engine="opacus"``, ``per_record=False``) is faster, and its bound is measured,
not proved. This benchmark times both, and the non-private batched fit, in one run:

* ``backbone``: ``fit_dp_sgd`` on a GMLVQ head (10 classes, one prototype each, rank 16)
  over a trainable MLP backbone (30 -> 32 tanh -> 16), synthetic Gaussian classes,
  ``n = 2560``, Poisson rate ``64 / n``, noise multiplier 1, ``C = 1``, SGD lr 0.05:
  ``engine="per_record"`` (the default here) against ``engine="opacus"`` (hooks), and
  the same number of plain batched SGD steps of 64 records;
* ``anonymizer``: ``fit_dp_anonymizer`` on the library's entangled synthetic task
  (``n = 400``, 20 features, 4 regular and 8 private classes), one epoch per phase at
  ``q = 0.1``, ``per_record=True`` (the default) against ``False``.

The variants take turns for ``--repeats`` rounds (round robin, so that load changes hit
them alike); the median wall seconds are reported with the ratios. One torch thread
by default (``--threads``). Usage::

    python -m benchmarks.dpsgd.per_record_cost            # about 2 minutes on 2 cores
    python -m benchmarks.dpsgd.per_record_cost --quick    # under 30 s, same headline keys

Ends with one JSON line ``{"benchmark": "dpsgd_per_record_cost", "headline": {...}}``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections.abc import Callable

import torch
from torch import nn
from tqdm import tqdm

from benchmarks.common import emit_json, machine_description
from dp_proto.anonymizer import Anonymizer
from dp_proto.data.synthetic import make_entangled_task
from dp_proto.lightning.dp_anonymizer import fit_dp_anonymizer
from dp_proto.lvq import GMLVQLayer, PrototypeModel
from dp_proto.lvq.private.dpsgd import SGDSettings, fit_dp_sgd, fixed_noise_recipe
from dp_proto.privacy.ledger import PrivacyLedger

BENCHMARK = "dpsgd_per_record_cost"
CLASSES, D_IN, D_FEATURES, BATCH, LR = 10, 30, 16, 64, 0.05


def _backbone_model(seed: int) -> PrototypeModel:
    torch.manual_seed(seed)
    backbone = nn.Sequential(nn.Linear(D_IN, 32), nn.Tanh(), nn.Linear(32, D_FEATURES))
    return PrototypeModel(GMLVQLayer(D_FEATURES, CLASSES, rank=D_FEATURES), range(CLASSES), backbone=backbone)


def _classes(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % CLASSES
    centres = torch.randn(CLASSES, D_IN, generator=gen)
    return (centres[y] + 0.5 * torch.randn(n, D_IN, generator=gen)).clamp(-3, 3), y


def backbone_variants(n: int, steps: int, seed: int) -> dict[str, Callable[[], None]]:
    """The three fits of the backbone comparison, each a fresh model."""
    x, y = _classes(n, seed)
    q = BATCH / n

    def private(engine: str) -> Callable[[], None]:
        def fit() -> None:
            recipe = fixed_noise_recipe(q, steps, max_grad_norm=1.0, engine=engine, sgd=SGDSettings(lr=LR))
            fit_dp_sgd(
                _backbone_model(seed),
                x,
                y,
                recipe,
                ledger=PrivacyLedger(),
                expected_batch_size=float(BATCH),
                noise_multiplier=1.0,
                generator=torch.Generator().manual_seed(seed),
            )

        return fit

    def nonprivate() -> None:
        model = _backbone_model(seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
        for step in range(steps):
            index = order[(step * BATCH) % n :][:BATCH]
            optimizer.zero_grad()
            model.loss(model(x[index]), y[index]).backward()
            optimizer.step()

    return {"nonprivate": nonprivate, "opacus": private("opacus"), "per_record": private("per_record")}


def anonymizer_variants(n: int, seed: int) -> dict[str, Callable[[], None]]:
    """``fit_dp_anonymizer`` per record and batched, one epoch per phase."""
    task = make_entangled_task(n, seed=seed)

    def fit(per_record: bool) -> Callable[[], None]:
        def run() -> None:
            torch.manual_seed(seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the seeded noise's PrivacyLeakWarning, Lightning's notes
                fit_dp_anonymizer(
                    task.x,
                    task.regular,
                    task.private,
                    epsilon=8.0,
                    delta=1e-5,
                    sampling_rate=0.1,
                    noise_multiplier=1.0,
                    num_regular=4,
                    num_private=8,
                    anonymizer=Anonymizer.mlp(20, 4, 8, representation_dim=8, encoder_hidden=(16,), head_hidden=(8,)),
                    pretrain_regular_epochs=1,
                    pretrain_private_epochs=1,
                    adversarial_epochs=1,
                    enable_progress_bar=False,
                    per_record=per_record,
                    noise_seed=seed,
                    seed=seed,
                )

        return run

    return {"batched": fit(False), "per_record": fit(True)}


def time_round_robin(variants: dict[str, dict[str, Callable[[], None]]], repeats: int) -> dict[str, dict[str, float]]:
    """Median wall seconds of every variant, the variants taking turns for ``repeats`` rounds."""
    times: dict[str, dict[str, list[float]]] = {g: {v: [] for v in vs} for g, vs in variants.items()}
    total = repeats * sum(len(vs) for vs in variants.values())
    with tqdm(total=total, desc=BENCHMARK, unit="fit", file=sys.stderr, dynamic_ncols=True) as bar:
        for _ in range(repeats):
            for group, fits in variants.items():
                for name, fit in fits.items():
                    t0 = time.perf_counter()
                    fit()
                    times[group][name].append(time.perf_counter() - t0)
                    bar.set_postfix_str(f"{group} {name} {times[group][name][-1]:.2f} s")
                    bar.update(1)
    return {g: {v: round(statistics.median(ts), 4) for v, ts in vs.items()} for g, vs in times.items()}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer steps and records, one round (under 30 s)")
    p.add_argument("--steps", type=int, default=None, help="DP-SGD steps of the backbone fits (default 200; quick 20)")
    p.add_argument("--repeats", type=int, default=None, help="rounds (default 3; quick 1)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="also write the JSON summary to this file")
    args = p.parse_args(argv)
    args.steps = args.steps or (20 if args.quick else 200)
    args.repeats = args.repeats or (1 if args.quick else 3)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    n_backbone, n_anonymizer = (640, 200) if args.quick else (2560, 400)
    variants = {
        "backbone": backbone_variants(n_backbone, args.steps, args.seed),
        "anonymizer": anonymizer_variants(n_anonymizer, args.seed),
    }
    seconds = time_round_robin(variants, args.repeats)
    backbone, anonymizer = seconds["backbone"], seconds["anonymizer"]
    headline = {
        "backbone_per_record_over_opacus": round(backbone["per_record"] / backbone["opacus"], 2),
        "backbone_opacus_over_nonprivate": round(backbone["opacus"] / backbone["nonprivate"], 2),
        "backbone_per_record_over_nonprivate": round(backbone["per_record"] / backbone["nonprivate"], 2),
        "anonymizer_per_record_over_batched": round(anonymizer["per_record"] / anonymizer["batched"], 2),
    }
    print(f"\nbackbone, {args.steps} steps of ~{BATCH} records (median s): {backbone}")
    print(f"anonymizer, one epoch per phase (median s): {anonymizer}")
    for key, value in headline.items():
        print(f"{key:38s} {value}")
    emit_json(
        {
            "benchmark": BENCHMARK,
            "headline": headline,
            "seconds": seconds,
            "config": {
                "steps": args.steps,
                "repeats": args.repeats,
                "threads": args.threads,
                "n_backbone": n_backbone,
                "n_anonymizer": n_anonymizer,
                "quick": args.quick,
                "torch": torch.__version__,
            },
            "machine": machine_description(),
        },
        args.out,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
