"""Speed of one DP-SGD epoch with our closed-form per-sample gradients vs Opacus' defaults.

For GLVQ and GMLVQ (full-rank ``Omega``, ``r = d``) at ``d = 784`` and LGMLVQ at
``d = 30`` (10 classes, one prototype per class, prototypes initialised at the class
means, ``Omega = I`` (GMLVQ: ``I / sqrt(d)``, normalised after every step)), one
training epoch is timed in five modes:

* ``nonprivate``: plain torch; a shuffled ``DataLoader`` with ``--batch-size``;
  forward, GLVQ cost (mean), backward, ``SGD(lr=0.01)`` step;
* ``dp_fused``: the fused engine of :mod:`dp_proto.lvq.private.fused` (the default
  of the DP estimators): Poisson index sampling, our norm samplers, one backward pass
  of the clip-weighted output gradients, Gaussian noise (float64 Box-Muller, as every
  private release draws it), the same ``SGD`` step; no Opacus wrappers;
* ``dp_hooks``: ``PrivacyEngine().make_private(..., grad_sample_mode="hooks")`` with
  the grad samplers of :mod:`dp_proto.lvq.private.grad_samplers` (per-sample gradients
  materialised, then clipped by the DP optimizer);
* ``dp_ghost``: ``grad_sample_mode="ghost"`` (ghost clipping: our norm samplers give
  per-sample gradient norms, a second backward pass sums the clipped gradients); the
  GLVQ cost is passed as a criterion ``criterion(distances, targets)`` with a
  ``reduction`` attribute, which Opacus wraps;
* ``dp_functorch``: ``grad_sample_mode="functorch"`` (Opacus ignores our samplers and
  computes per-sample gradients with ``torch.func.vmap(grad(...))``).

The three Opacus modes get the noise of the library's Opacus engine
(:func:`dp_proto.lvq.private.opacus_adapter.make_noise_sound`: float64 Box-Muller noise instead
of Opacus' float32 ``torch.normal``, the public expected batch as normaliser), so every
DP mode draws the same noise. The noise comes from seeded generators (a timing run
releases nothing).

All DP modes use Poisson sampling with rate ``batch_size / n`` (``n`` is a multiple
of the batch size, so the expected batch equals the non-private batch and every mode
takes ``n / batch_size`` steps per epoch), ``noise_multiplier=1.0``,
``max_grad_norm=1.0``. Batches are fetched with one tensor index per batch in every
mode (``__getitems__``), so that per-sample Python collation does not hide the
model's cost. After ``--warmup-steps`` steps, ``--repeats`` full epochs are timed with
``time.perf_counter`` and the median is reported (CPU time, ``time.process_time``,
is recorded too: on a shared machine it is less affected by other processes). The
modes of a model take turns epoch by epoch (round robin), so that a change in the load
of a shared machine affects all of them alike. A mode
whose epochs are slow stops repeating when one more epoch would take its timed epochs
past ``--mode-budget-s`` (default 180 s; in practice DP hooks and functorch for
GMLVQ at ``d = 784``), so the default run stays under about 10 minutes on 2 cores.

The non-private mode runs float32; the DP modes run the prototype layer in float64, as
every DP-SGD engine of the library does (``dp_proto.lvq.private.dpsgd.TRAINING_DTYPE``;
the data stays float32 and the layer casts it). ``--dp-dtype float32`` times the DP modes
as they ran before that change.

Data: synthetic Gaussian classes by default; with ``--data-dir``, ``n`` random MNIST
training images (the test split if only that is present; ``n`` defaults to 9984 then)
as pixels / 255 for ``d = 784`` and their PCA(30) projection (z-scored; non-private
preprocessing, timing only) for ``d = 30``.

Usage::

    python -m benchmarks.dpsgd.speed                 # about 5-10 minutes on 2 cores
    python -m benchmarks.dpsgd.speed --quick         # n = 1280, < 1 minute
    python -m benchmarks.dpsgd.speed --profile gmlvq_d784   # torch.profiler breakdown

Ends with one JSON line::

    {"benchmark": "dpsgd_speed", "results": {"glvq_d784": {"nonprivate": s, "dp_hooks": s,
     "dp_ghost": s|null, "dp_functorch": s|null}, "gmlvq_d784": {...}, "lgmlvq_d30": {...}},
     "headline": {...}, "machine": ..., "notes": [...], ...}
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import opacus
import torch
from opacus import PrivacyEngine
from opacus.grad_sample import GradSampleHooks
from opacus.grad_sample.grad_sample_module_fast_gradient_clipping import (
    GradSampleHooksFastGradientClipping,
)
from opacus.validators import ModuleValidator
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from benchmarks.common import emit_json, machine_description, resolve_data_dir
from dp_proto.lvq.layers import GLVQLayer, GMLVQLayer, LGMLVQLayer
from dp_proto.lvq.losses import glvq_loss
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private.fused import dp_sgd_step
from dp_proto.lvq.private.opacus_adapter import make_noise_sound  # (and registers our samplers)
from dp_proto.privacy.sampling import poisson_batch_index

BENCHMARK = "dpsgd_speed"
MODELS = ("glvq_d784", "gmlvq_d784", "lgmlvq_d30")
MODES = ("nonprivate", "dp_fused", "dp_hooks", "dp_ghost", "dp_functorch")
#: Our DP modes (the headline takes the fastest); ``dp_functorch`` is Opacus' generic one.
OUR_DP_MODES = ("dp_fused", "dp_hooks", "dp_ghost")
NUM_CLASSES = 10
LR = 0.01
NOISE_MULTIPLIER = 1.0
MAX_GRAD_NORM = 1.0
DEFAULT_N, QUICK_N = 10_240, 1_280
DTYPES = {"float64": torch.float64, "float32": torch.float32}

#: Targets of the issue: DP (fastest of our modes) over non-private, functorch over DP.
TARGETS = {
    "glvq784_dp_over_nonprivate": ("<=", 1.5),
    "gmlvq784_dp_over_nonprivate": ("<=", 3.0),
    "gmlvq784_functorch_over_ours": (">=", 10.0),  # or functorch runs out of memory
}


# -- data ------------------------------------------------------------------------------
class BatchTensorDataset(Dataset):
    """``(X[i], y[i])``; ``__getitems__`` fetches a whole batch with one index."""

    def __init__(self, X: Tensor, y: Tensor) -> None:
        self.X, self.y = X, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        return self.X[i], self.y[i]

    def __getitems__(self, indices: list[int]) -> tuple[Tensor, Tensor]:
        idx = torch.as_tensor(indices, dtype=torch.long)
        return self.X[idx], self.y[idx]


def keep_batch(batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    """Collate function for :class:`BatchTensorDataset`: the batch is already stacked."""
    return batch


def synthetic(n: int, d: int, seed: int) -> tuple[Tensor, Tensor]:
    """10 Gaussian classes in ``d`` dimensions (unit noise, overlapping means)."""
    g = torch.Generator().manual_seed(seed)
    means = torch.randn(NUM_CLASSES, d, generator=g) * (3.0 / math.sqrt(d))
    y = torch.arange(n) % NUM_CLASSES
    y = y[torch.randperm(n, generator=g)]
    X = means[y] + torch.randn(n, d, generator=g)
    return X.float(), y.long()


def mnist(n: int, data_dir: Path, seed: int) -> tuple[Tensor, Tensor, Tensor, str]:
    """``n`` random MNIST images (the training split; the test split if the training files
    are missing): pixels / 255 ``(n, 784)``, labels, PCA(30) z-scored, the split used."""
    try:
        from dp_proto.data import load_mnist
    except ImportError:
        from dp_proto.data.loaders.mnist import load_mnist
    try:
        X, y = load_mnist(data_dir, split="train", flatten=True)
        split = "train"
    except FileNotFoundError:
        X, y = load_mnist(data_dir, split="test", flatten=True)
        split = "test (training files missing)"
    if len(y) < n:
        raise ValueError(f"MNIST {split} has {len(y)} images, fewer than n = {n}")
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(y))[:n]
    X = torch.from_numpy(X[idx].astype(np.float32) / 255.0)
    y = torch.from_numpy(np.asarray(y[idx], dtype=np.int64))
    centred = X.double() - X.double().mean(0)
    _, _, vh = torch.linalg.svd(centred, full_matrices=False)
    Z = centred @ vh[:30].T
    Z = ((Z - Z.mean(0)) / Z.std(0).clamp_min(1e-12)).float()
    return X, y, Z, split


def class_means(X: Tensor, y: Tensor) -> Tensor:
    return torch.stack([X[y == c].mean(0) for c in range(NUM_CLASSES)])


def make_model(name: str, X: Tensor, y: Tensor) -> tuple[PrototypeModel, GLVQLayer]:
    d = X.shape[1]
    protos = class_means(X, y)
    if name.startswith("glvq"):
        layer: GLVQLayer = GLVQLayer(d, NUM_CLASSES, prototypes=protos)
    elif name.startswith("gmlvq"):
        layer = GMLVQLayer(d, NUM_CLASSES, rank=d, prototypes=protos, omega_init="identity", normalize=True)
    elif name.startswith("lgmlvq"):
        layer = LGMLVQLayer(d, NUM_CLASSES, rank=d, prototypes=protos, omega_init="identity")
    else:
        raise ValueError(name)
    return PrototypeModel(layer, range(NUM_CLASSES)), layer


class GLVQCriterion(nn.Module):
    """The GLVQ cost as a loss ``criterion(distances, targets)`` with a ``reduction``
    attribute, as Opacus' ghost clipping wants it (it sets ``reduction = "none"`` to get
    the per-sample costs)."""

    def __init__(self, prototype_labels: Tensor, reduction: str = "mean") -> None:
        super().__init__()
        self.register_buffer("prototype_labels", prototype_labels.detach().clone())
        self.reduction = reduction

    def forward(self, distances: Tensor, targets: Tensor) -> Tensor:
        return glvq_loss(distances, targets, self.prototype_labels, reduction=self.reduction)


# -- training --------------------------------------------------------------------------
class Setup:
    """Model, optimizer, criterion and loader of one (model, mode) pair."""

    def __init__(
        self, model_name: str, mode: str, X: Tensor, y: Tensor, batch_size: int, seed: int, dp_dtype: torch.dtype
    ) -> None:
        torch.manual_seed(seed)
        model, self.layer = make_model(model_name, X, y)
        if mode != "nonprivate":  # as fit_dp_sgd runs it (the layer casts its float32 input)
            model.layer.to(dp_dtype)
        ModuleValidator.validate(model, strict=True)  # raises if Opacus would refuse it
        criterion = GLVQCriterion(model.prototype_labels)
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        dataset = BatchTensorDataset(X, y)
        gen = torch.Generator().manual_seed(seed)
        self.mode = mode
        if mode == "dp_fused":
            self.model, self.optimizer = model, optimizer
            self.loader = PoissonBatches(X, y, batch_size / len(y), len(y) // batch_size, gen)
            return
        if mode == "nonprivate":
            self.loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, collate_fn=keep_batch, generator=gen)
            self.model, self.optimizer, self.criterion = model, optimizer, criterion
            return
        loader = DataLoader(dataset, batch_size=batch_size, collate_fn=keep_batch, generator=gen)
        kwargs: dict[str, Any] = dict(
            module=model,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=NOISE_MULTIPLIER,
            max_grad_norm=MAX_GRAD_NORM,
            poisson_sampling=True,
            grad_sample_mode=mode.removeprefix("dp_"),
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # secure_mode / RNG advice
            engine = PrivacyEngine()
            if mode == "dp_ghost":
                self.model, self.optimizer, self.criterion, self.loader = engine.make_private(
                    criterion=criterion, **kwargs
                )
            else:
                self.model, self.optimizer, self.loader = engine.make_private(**kwargs)
                self.criterion = criterion
        # the library's Opacus engine: float64 noise, the public expected batch as normaliser
        make_noise_sound(
            self.optimizer, expected_batch_size=batch_size, generator=torch.Generator().manual_seed(seed + 1)
        )
        self.engine = engine

    def step(self, xb: Tensor, yb: Tensor) -> None:
        if self.mode == "dp_fused":
            # labels checked once up front, as in fit_dp_sgd (no host sync per step)
            dp_sgd_step(
                self.model,
                xb,
                yb,
                self.optimizer,
                max_grad_norm=MAX_GRAD_NORM,
                noise_std=NOISE_MULTIPLIER * MAX_GRAD_NORM,
                expected_batch=self.loader.expected_batch,
                generator=self.loader.generator,
                check_labels=False,
            )
            self.layer.normalize_()
            return
        self.optimizer.zero_grad()
        loss = self.criterion(self.model(xb), yb)
        loss.backward()
        self.optimizer.step()
        self.layer.normalize_()  # GMLVQ: trace(Lambda) = 1; no-op for GLVQ / LGMLVQ here

    def run(self, max_steps: int | None = None) -> tuple[float, float, int, int]:
        """One epoch (or its first ``max_steps`` steps): wall and CPU seconds, steps, samples."""
        steps = samples = 0
        c0, t0 = time.process_time(), time.perf_counter()
        for xb, yb in self.loader:
            self.step(xb, yb)
            steps += 1
            samples += len(yb)
            if max_steps is not None and steps >= max_steps:
                break
        return time.perf_counter() - t0, time.process_time() - c0, steps, samples


class PoissonBatches:
    """``steps`` Poisson batches (rate ``q``) of ``(X, y)`` per pass, one index per batch."""

    def __init__(self, X: Tensor, y: Tensor, q: float, steps: int, generator: torch.Generator) -> None:
        self.X, self.y, self.q, self.steps, self.generator = X, y, q, steps, generator
        self.expected_batch = q * len(y)

    def __iter__(self):
        for _ in range(self.steps):
            index = poisson_batch_index(len(self.y), self.q, self.generator, self.X.device)
            yield self.X[index], self.y[index]


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(exc).lower()
    return "out of memory" in text or "can't allocate memory" in text or "not enough memory" in text


def _failure(out: dict[str, Any], exc: BaseException) -> None:
    oom = is_oom(exc)
    out["status"] = ("out_of_memory: " if oom else "error: ") + f"{type(exc).__name__}: {exc}"[:300]
    out["out_of_memory"] = oom


def time_model(
    model_name: str,
    modes: list[str],
    X: Tensor,
    y: Tensor,
    args: argparse.Namespace,
    log: Callable[[str], None],
    bar: tqdm | None = None,
) -> dict[str, dict[str, Any]]:
    """Seconds per epoch of every mode of one model, median over up to ``args.repeats`` epochs.

    The modes take turns (round robin: epoch 1 of every mode, then epoch 2, ...), so that a
    change in the load of a shared machine hits all modes alike. Every mode first runs
    ``args.warmup_steps`` untimed steps, and one more untimed step before each later epoch
    (caches; another mode ran in between). A mode stops repeating when one more epoch would
    take its timed epochs past ``args.mode_budget_s``.

    ``bar`` (a tqdm progress bar) advances by ``len(modes) * (1 + args.repeats)``: one per
    warm-up and per epoch, skipped epochs included.
    """
    outs: dict[str, dict[str, Any]] = {}
    setups: dict[str, Setup] = {}

    def advance(label: str) -> None:
        if bar is not None:
            bar.set_postfix_str(label)
            bar.update(1)

    for mode in modes:
        out = outs[mode] = {"seconds": None, "cpu_seconds": None, "epochs_s": [], "epochs_cpu_s": [], "status": "ok"}
        try:
            setups[mode] = Setup(model_name, mode, X, y, args.batch_size, args.seed, DTYPES[args.dp_dtype])
            warm_s, _, warm_steps, _ = setups[mode].run(max_steps=args.warmup_steps)
            out["warmup_s_per_step"] = warm_s / max(warm_steps, 1)
        except Exception as exc:  # noqa: BLE001 -- reported in the table and the JSON
            _failure(out, exc)
            setups.pop(mode, None)
            log(f"  {model_name:11s} {mode:13s} FAILED: {out['status']}")
        advance(f"{model_name} {mode} warm-up")
    for r in range(args.repeats):
        for mode in modes:
            out = outs[mode]
            if mode not in setups:
                advance(f"{model_name} {mode} (stopped)")
                continue
            try:
                if r > 0:
                    setups[mode].run(max_steps=1)
                sec, cpu, steps, samples = setups[mode].run()
            except Exception as exc:  # noqa: BLE001
                _failure(out, exc)
                del setups[mode]
                log(f"  {model_name:11s} {mode:13s} FAILED: {out['status']}")
                advance(f"{model_name} {mode} failed")
                continue
            advance(f"{model_name} {mode} epoch {r + 1}: {sec:.2f} s")
            out["epochs_s"].append(sec)
            out["epochs_cpu_s"].append(cpu)
            out["steps"], out["mean_batch"] = steps, samples / max(steps, 1)
            log(
                f"  {model_name:11s} {mode:13s} epoch {r + 1}/{args.repeats}: {sec:8.3f} s wall, "
                f"{cpu:8.3f} s CPU ({steps} steps, mean batch {samples / max(steps, 1):.1f})"
            )
            if r + 1 < args.repeats and sum(out["epochs_s"]) + sec > args.mode_budget_s:
                out["status"] = (
                    f"ok, {r + 1} of {args.repeats} epochs (one more would pass --mode-budget-s {args.mode_budget_s:g})"
                )
                log(f"  {model_name:11s} {mode:13s} stops after {r + 1} epoch(s) (time budget)")
                del setups[mode]  # frees its per-sample gradients
    for out in outs.values():
        if out["epochs_s"] and "out_of_memory" not in out:
            out["seconds"] = statistics.median(out["epochs_s"])
            out["cpu_seconds"] = statistics.median(out["epochs_cpu_s"])
    setups.clear()
    rss = round(peak_rss_mib(), 1)
    for out in outs.values():
        out["peak_rss_mib_so_far"] = rss
    return outs


def peak_rss_mib() -> float:
    """The process' peak resident memory so far (MiB; Linux reports KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# -- profiling -------------------------------------------------------------------------
def _labelled(fn: Callable, label: str) -> Callable:
    def wrapper(*a, **k):
        with torch.profiler.record_function(label):
            return fn(*a, **k)

    return wrapper


def profile(model_name: str, X: Tensor, y: Tensor, args: argparse.Namespace) -> None:
    """torch.profiler over ``--profile-steps`` steps of the DP modes of one model; our
    samplers are re-registered (in this process only) inside ``record_function`` labels."""
    from torch.profiler import ProfilerActivity, record_function
    from torch.profiler import profile as tprofile

    for registry, kind in (
        (GradSampleHooks.GRAD_SAMPLERS, "grad_sampler"),
        (GradSampleHooksFastGradientClipping.GRAD_SAMPLERS, "grad_sampler"),
        (GradSampleHooksFastGradientClipping.NORM_SAMPLERS, "norm_sampler"),
    ):
        for cls in (GLVQLayer, GMLVQLayer, LGMLVQLayer):
            if cls in registry:
                registry[cls] = _labelled(registry[cls], f"## {cls.__name__}.{kind}")
    modes = [m for m in args.modes if m != "nonprivate"] + ["nonprivate"]
    for mode in modes:
        if mode == "dp_functorch" and model_name != "lgmlvq_d30" and not args.profile_functorch:
            print(f"\n[profile] {model_name} {mode}: skipped (--profile-functorch to include)")
            continue
        setup = Setup(model_name, mode, X, y, args.batch_size, args.seed, DTYPES[args.dp_dtype])
        setup.run(max_steps=args.warmup_steps)
        it = iter(setup.loader)
        batches = [next(it) for _ in range(args.profile_steps)]
        with tprofile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for xb, yb in batches:
                if mode == "dp_fused":  # one call: sampling aside, the whole step
                    with record_function("## step.dp_sgd_step+normalize"):
                        setup.step(xb, yb)
                    continue
                with record_function("## step.zero_grad"):
                    setup.optimizer.zero_grad()
                with record_function("## step.forward+loss"):
                    loss = setup.criterion(setup.model(xb), yb)
                with record_function("## step.backward"):
                    loss.backward()
                with record_function("## step.optimizer"):
                    setup.optimizer.step()
                with record_function("## step.normalize"):
                    setup.layer.normalize_()
        print(f"\n[profile] {model_name} {mode}: {args.profile_steps} steps, torch threads {torch.get_num_threads()}")
        table = prof.key_averages(group_by_input_shape=True).table(
            sort_by="cpu_time_total", row_limit=args.profile_rows, max_name_column_width=48, max_shapes_column_width=60
        )
        print(table)


# -- main ------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--quick", action="store_true", help=f"n = {QUICK_N}, 1 warm-up step, --mode-budget-s 10 (under a minute)"
    )
    p.add_argument(
        "--n",
        type=int,
        default=None,
        help=f"training samples (default {DEFAULT_N}, 9984 with --data-dir, --quick {QUICK_N})",
    )
    p.add_argument("--batch-size", type=int, default=256, help="batch size = expected Poisson batch (default 256)")
    p.add_argument("--repeats", type=int, default=3, help="timed epochs (default 3)")
    p.add_argument("--warmup-steps", type=int, default=None, help="untimed steps first (default 3, --quick 1)")
    p.add_argument(
        "--mode-budget-s",
        type=float,
        default=None,
        help="a mode stops repeating when one more epoch would take its timed "
        "epochs past this many seconds (default 180, --quick 10; keeps the "
        "slow modes at d = 784 from dominating the run)",
    )
    p.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument(
        "--data-dir", default=None, help="use MNIST pixels from this data directory (default: synthetic data)"
    )
    p.add_argument(
        "--dp-dtype",
        choices=tuple(DTYPES),
        default="float64",
        help="the DP modes' prototype layer dtype (default float64, what every DP-SGD engine of the "
        "library runs; float32: the engines before that, for comparison); non-private runs float32",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument(
        "--profile",
        choices=MODELS,
        default=None,
        help="instead of timing, print a torch.profiler table per mode of this model",
    )
    p.add_argument("--profile-steps", type=int, default=5)
    p.add_argument("--profile-rows", type=int, default=25)
    p.add_argument("--profile-functorch", action="store_true", help="also profile functorch mode at d = 784 (slow)")
    p.add_argument("--out", default=None, help="also write the JSON summary to this file")
    args = p.parse_args(argv)
    if args.n is None:
        args.n = QUICK_N if args.quick else DEFAULT_N
        if args.data_dir is not None and not args.quick:
            args.n = 9_984  # 39 batches of 256: fits MNIST's 10000 test images too
    if args.mode_budget_s is None:
        args.mode_budget_s = 10.0 if args.quick else 180.0
    if args.warmup_steps is None:
        args.warmup_steps = 1 if args.quick else 3
    return args


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else round(a / b, 3)


def fastest(*values: float | None) -> float | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def epoch_cells(per_mode: dict[str, dict[str, Any]], seconds: dict[str, float | None], modes) -> list[str]:
    """One table row's cells: seconds per epoch and the ratio over non-private, or why
    there is no number (OOM, failed)."""
    base = seconds.get("nonprivate")
    cells = []
    for mode in modes:
        s = seconds[mode]
        if s is None:
            cells.append("OOM" if per_mode[mode].get("out_of_memory") else "failed")
        elif mode == "nonprivate" or base is None:
            cells.append(f"{s:.3f} s")
        else:
            cells.append(f"{s:.3f} s ({s / base:.2f}x)")
    return cells


def check_targets(headline: dict[str, Any], functorch_oom: bool | None) -> dict[str, bool | None]:
    """Whether each headline ratio meets its target (None: not measured); functorch
    running out of memory meets its target."""
    met: dict[str, bool | None] = {}
    for key, (op, bound) in TARGETS.items():
        value = headline[key]
        if key == "gmlvq784_functorch_over_ours" and functorch_oom:
            met[key] = True
        elif value is None:
            met[key] = None
        else:
            met[key] = value <= bound if op == "<=" else value >= bound
    return met


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    # Our inputs never require grad, so torch notes that full backward hooks fire on outputs.
    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    load_start = os.getloadavg()
    log = lambda s: tqdm.write(s, file=sys.stderr)  # noqa: E731  (above the progress bar)
    t_start = time.perf_counter()

    if args.data_dir is not None:
        X784, y784, X30, split = mnist(args.n, resolve_data_dir(args.data_dir), args.seed)
        y30 = y784
        data_desc = (
            f"MNIST {split}: {args.n} images of a seeded permutation, pixels/255; their PCA(30), z-scored, for d=30"
        )
    else:
        X784, y784 = synthetic(args.n, 784, args.seed)
        X30, y30 = synthetic(args.n, 30, args.seed + 1)
        data_desc = f"synthetic Gaussian, 10 balanced classes, n={args.n}"
    data = {"glvq_d784": (X784, y784), "gmlvq_d784": (X784, y784), "lgmlvq_d30": (X30, y30)}

    if args.profile:
        X, y = data[args.profile]
        print(f"load average at start: {load_start}")
        profile(args.profile, X, y, args)
        print(f"load average at end: {os.getloadavg()}")
        return 0

    steps_per_epoch = math.ceil(args.n / args.batch_size)
    log(
        f"{BENCHMARK}: n={args.n}, batch {args.batch_size}, {steps_per_epoch} steps/epoch, "
        f"{args.repeats} timed epoch(s) after {args.warmup_steps} warm-up steps, "
        f"{args.threads} thread(s), load average {load_start}"
    )
    raw: dict[str, dict[str, dict[str, Any]]] = {}
    total = len(args.models) * len(args.modes) * (1 + args.repeats)
    with tqdm(total=total, desc=BENCHMARK, unit="epoch", file=sys.stderr, dynamic_ncols=True) as bar:
        for model_name in args.models:
            X, y = data[model_name]
            raw[model_name] = time_model(model_name, list(args.modes), X, y, args, log, bar)
    load_end = os.getloadavg()
    wall = time.perf_counter() - t_start

    results = {
        m: {mode: (None if r["seconds"] is None else round(r["seconds"], 4)) for mode, r in per.items()}
        for m, per in raw.items()
    }

    def dp_best(m: str, table: dict = results) -> float | None:
        r = table.get(m, {})
        return fastest(*(r.get(mode) for mode in OUR_DP_MODES))

    g784, gm784 = results.get("glvq_d784", {}), results.get("gmlvq_d784", {})
    ft_raw = raw.get("gmlvq_d784", {}).get("dp_functorch", {})
    ft_oom = bool(ft_raw.get("out_of_memory", False)) if ft_raw else None  # None: not run
    headline = {
        "glvq784_dp_over_nonprivate": ratio(dp_best("glvq_d784"), g784.get("nonprivate")),
        "gmlvq784_dp_over_nonprivate": ratio(dp_best("gmlvq_d784"), gm784.get("nonprivate")),
        "gmlvq784_functorch_over_ours": ratio(gm784.get("dp_functorch"), dp_best("gmlvq_d784")),
        "functorch_out_of_memory": ft_oom,
    }
    cpu = {m: {mode: r["cpu_seconds"] for mode, r in per.items()} for m, per in raw.items()}
    g784c, gm784c = cpu.get("glvq_d784", {}), cpu.get("gmlvq_d784", {})
    headline_cpu = {
        "glvq784_dp_over_nonprivate": ratio(dp_best("glvq_d784", cpu), g784c.get("nonprivate")),
        "gmlvq784_dp_over_nonprivate": ratio(dp_best("gmlvq_d784", cpu), gm784c.get("nonprivate")),
        "gmlvq784_functorch_over_ours": ratio(gm784c.get("dp_functorch"), dp_best("gmlvq_d784", cpu)),
    }
    targets_met = check_targets(headline, ft_oom)

    # -- table ---------------------------------------------------------------------
    print()
    print(
        f"DP-SGD speed, seconds per epoch (median of {args.repeats}; n={args.n}, "
        f"batch {args.batch_size}, {steps_per_epoch} steps; x = over non-private)"
    )
    header = f"{'model':12s}" + "".join(f"{m:>22s}" for m in args.modes)
    print(header)
    print("-" * len(header))
    for m, per in raw.items():
        for mode in args.modes:
            if results[m][mode] is None:
                log(f"{m} {mode}: {per[mode]['status']}")
        print(f"{m:12s}" + "".join(f"{c:>22s}" for c in epoch_cells(per, results[m], args.modes)))
    print("\nCPU seconds per epoch (time.process_time, median)")
    for m, per in raw.items():
        cells = [
            "-" if per[mode]["cpu_seconds"] is None else f"{per[mode]['cpu_seconds']:.3f} s" for mode in args.modes
        ]
        print(f"{m:12s}" + "".join(f"{c:>22s}" for c in cells))
    print()
    print("markdown:")
    print("| model | " + " | ".join(args.modes) + " |")
    print("|---|" + "---:|" * len(args.modes))
    for m in raw:
        print(f"| {m} | " + " | ".join(epoch_cells(raw[m], results[m], args.modes)) + " |")
    print()
    for key, value in headline.items():
        target = TARGETS.get(key)
        suffix = (
            ""
            if target is None
            else f"   target {target[0]} {target[1]:g}: "
            f"{ {True: 'met', False: 'NOT met', None: 'n/a'}[targets_met[key]] }"
        )
        print(f"{key:32s} {value}{suffix}")
    print("same ratios from CPU time: " + ", ".join(f"{k} {v}" for k, v in headline_cpu.items()))
    print(
        f"load average: start {tuple(round(v, 2) for v in load_start)}, "
        f"end {tuple(round(v, 2) for v in load_end)}; wall clock {wall:.0f} s"
    )

    notes = [
        f"data: {data_desc}; d=784 for GLVQ/GMLVQ (GMLVQ full rank r=784), d=30 for LGMLVQ (r=30); "
        "10 prototypes (1 per class) at the class means; non-private float32, the DP modes' prototype layer "
        f"{args.dp_dtype} (the data float32, cast by the layer)",
        f"one epoch = {steps_per_epoch} steps; non-private: shuffled DataLoader, batch {args.batch_size}; "
        f"DP: Poisson sampling rate {args.batch_size}/{args.n} (expected batch {args.batch_size}), "
        f"noise_multiplier {NOISE_MULTIPLIER}, max_grad_norm {MAX_GRAD_NORM}, SGD lr {LR}, "
        "loss_reduction mean; GMLVQ Omega renormalised after every step in every mode",
        f"seconds per epoch: wall clock (time.perf_counter), median of up to {args.repeats} timed "
        f"epoch(s) after {args.warmup_steps} warm-up step(s); cpu_s_per_epoch: time.process_time; "
        "batches fetched with one tensor index (no per-sample collation)",
        "noise: float64 Box-Muller in every DP mode (fused: dp_sgd_step; Opacus modes: "
        "dp_proto.lvq.private.opacus_adapter.make_noise_sound, as the library's Opacus engine), from seeded "
        "generators; the normaliser is the expected batch",
        "dp_ghost: the GLVQ cost works as an Opacus ghost-clipping criterion (an nn.Module with a "
        "'reduction' attribute; Opacus sets it to 'none' to get per-sample costs, then runs two backward passes)",
        "dp_functorch: grad_sample_mode='functorch' (force_functorch=True, our samplers unused)",
        "DP in the headline = fastest of our modes: " + ", ".join(OUR_DP_MODES),
        "modes of a model run round robin (epoch 1 of every mode, then epoch 2, ...) so that load "
        "changes on a shared machine hit all modes alike; one untimed step precedes every later epoch",
        "peak_rss_mib_so_far: the process' ru_maxrss after each model (monotone; models run in the "
        "order listed); functorch_out_of_memory is null if GMLVQ functorch did not run",
        f"load average (1, 5, 15 min) at start {tuple(round(v, 2) for v in load_start)}, "
        f"at end {tuple(round(v, 2) for v in load_end)}; torch threads {args.threads}",
    ]
    for m, per in raw.items():
        for mode, r in per.items():
            if r["status"] != "ok":
                notes.append(f"{m} {mode}: {r['status']}")
    payload = {
        "benchmark": BENCHMARK,
        "results": results,
        "headline": headline,
        "headline_cpu": headline_cpu,
        "targets": {k: f"{op} {b:g}" for k, (op, b) in TARGETS.items()},
        "targets_met": targets_met,
        "epochs_s": {
            m: {mode: [round(s, 4) for s in r["epochs_s"]] for mode, r in per.items()} for m, per in raw.items()
        },
        "peak_rss_mib_so_far": {
            m: {mode: r.get("peak_rss_mib_so_far") for mode, r in per.items()} for m, per in raw.items()
        },
        "cpu_s_per_epoch": {
            m: {mode: (None if r["cpu_seconds"] is None else round(r["cpu_seconds"], 4)) for mode, r in per.items()}
            for m, per in raw.items()
        },
        "config": {
            "n": args.n,
            "batch_size": args.batch_size,
            "steps_per_epoch": steps_per_epoch,
            "repeats": args.repeats,
            "warmup_steps": args.warmup_steps,
            "threads": args.threads,
            "dp_dtype": args.dp_dtype,
            "quick": args.quick,
            "seed": args.seed,
            "data": "mnist" if args.data_dir else "synthetic",
            "opacus": opacus.__version__,
            "torch": torch.__version__,
        },
        "load_average": {"start": [round(v, 2) for v in load_start], "end": [round(v, 2) for v in load_end]},
        "wall_s": round(wall, 1),
        "machine": machine_description(),
        "notes": notes,
    }
    emit_json(payload, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
