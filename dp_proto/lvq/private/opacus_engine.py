"""The Opacus engine of ``fit_dp_sgd``: Opacus' ``PrivacyEngine`` made sound for prototype models.

Opacus samples nothing here: batches come from ``dp_proto.privacy.PoissonDataLoader`` at
exactly the public rate ``q`` with float64 coins (Opacus' ``make_private(poisson_sampling=True)``
would use ``1 / len(loader)``, which depends on the private ``n``, and float32 coins).
Opacus computes the per-sample gradients (``hooks``: the closed forms registered by
``dp_proto.lvq.private.opacus_adapter``; ``ghost``: ghost clipping with their norms;
``functorch``: Opacus' generic ones) and clips them; ``make_noise_sound`` replaces its
noise by the library's (float64, unbounded tails, fresh entropy) and its normaliser by
the public ``expected_batch_size``, and gives the per-sample modes the fused engine's
cancellation guard (``dp_proto.lvq.private.guard``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor
from torch.utils.data import TensorDataset

from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private.engine_run import DPSGDResult, EngineRun
from dp_proto.lvq.private.fused import FUSABLE_LAYERS, finite_records
from dp_proto.lvq.private.guard import ClippingGuard
from dp_proto.lvq.private.opacus_adapter import make_noise_sound
from dp_proto.privacy.dpsgd_plan import BudgetedEpochs
from dp_proto.privacy.randomness import fresh_generator
from dp_proto.privacy.sampling import PoissonDataLoader

__all__ = ["fit_opacus", "check_torchcsprng"]


class _GLVQCriterion:
    """The GLVQ cost of ``model`` as a criterion ``(distances (B, W), targets (B,)) ->
    loss``, reduced as its ``reduction`` says ("mean" by default). Opacus' ghost
    clipping sets ``reduction = "none"`` to get per-sample losses: a criterion that
    ignored it would hand Opacus one batch mean, and the noised sum would be the mean
    clip factor times the unclipped gradient sum instead of a clipped sum."""

    def __init__(self, model: PrototypeModel, transfer_fn: str, beta: float) -> None:
        self.model, self.transfer_fn, self.beta = model, transfer_fn, beta
        self.reduction = "mean"

    def __call__(self, distances: Tensor, targets: Tensor) -> Tensor:
        return self.model.loss(
            distances,
            targets,
            transfer_fn=self.transfer_fn,  # type: ignore[arg-type]
            beta=self.beta,
            reduction=self.reduction,  # type: ignore[arg-type]
        )


def fit_opacus(
    model: PrototypeModel,
    x: Tensor,
    y: Tensor,
    run: EngineRun,
    optimizer: torch.optim.Optimizer,
    result: DPSGDResult,
    post_step: Callable[[], None],
) -> DPSGDResult:
    """The training loop of ``dp_proto.lvq.private.fit_dp_sgd`` with ``engine="opacus"``
    (call that function; this one expects its resolved settings)."""
    from opacus import PrivacyEngine

    if run.secure_mode:
        check_torchcsprng()
    # Sampling coins: the run's generator, or in secure mode a generator seeded from
    # os.urandom (never torch's global generator, which seeding a run makes predictable).
    loader = PoissonDataLoader(
        TensorDataset(x, y), run.sampling_rate, generator=fresh_generator() if run.secure_mode else run.generator
    )
    with warnings.catch_warnings():
        # Opacus warns that its own noise is not from a secure RNG; make_noise_sound below
        # replaces that noise with ours (fresh entropy, or os.urandom in secure mode).
        warnings.filterwarnings("ignore", message="Secure RNG turned off")
        privacy_engine = PrivacyEngine(accountant="rdp", secure_mode=run.secure_mode)
    criterion = _GLVQCriterion(model, run.transfer_fn, run.beta)
    ghost = run.grad_sample_mode == "ghost"
    kwargs: dict = {"criterion": criterion} if ghost else {}
    clip_bound = _opacus_clip_bound(model, run.max_grad_norm, run.clipping, run.grad_sample_mode, kwargs)
    made = privacy_engine.make_private(
        module=model,
        optimizer=optimizer,
        data_loader=loader,
        noise_multiplier=run.noise_multiplier,
        max_grad_norm=clip_bound,
        poisson_sampling=False,
        grad_sample_mode=run.grad_sample_mode,
        noise_generator=None if run.secure_mode else run.generator,
        **kwargs,
    )
    if ghost:
        private_model, dp_opt, criterion, dp_loader = made
    else:
        private_model, dp_opt, dp_loader = made
    # float64 noise with tails, from our generator; the public normaliser, not q * n; the
    # fused engine's cancellation guard for the per-sample modes (ghost's norm samplers hold it)
    guard = None if ghost else ClippingGuard(model, loss_reduction="mean")
    make_noise_sound(
        dp_opt,
        expected_batch_size=run.expected_batch_size,
        generator=run.generator,
        secure_mode=run.secure_mode,
        norm_floors=guard,
    )
    private_model.train()
    finite = None
    if ghost and type(model.layer) in FUSABLE_LAYERS:
        finite = partial(_finite_batch, model, transfer_fn=run.transfer_fn, beta=run.beta)
    step = partial(_opacus_step, private_model, dp_opt, criterion, post_step, result)
    epochs = BudgetedEpochs(
        run.ledger, run.noise_multiplier, float(dp_loader.sample_rate), run.steps, progress=run.progress
    )
    try:
        for epoch_steps in epochs:  # int(1 / q) steps each
            result.epoch_losses.append(_opacus_epoch(dp_loader, epoch_steps, step, finite))
    finally:
        if guard is not None:
            guard.remove()
    result.stopped_by_budget = epochs.stopped_by_budget
    _unwrap(private_model)
    return result


def _opacus_step(private_model, dp_opt, criterion, post_step: Callable[[], None], result: DPSGDResult, xb, yb) -> float:
    """One Opacus DP-SGD step on the sampled batch; returns the batch's summed loss."""
    dp_opt.zero_grad(set_to_none=True)
    loss = criterion(private_model(xb), yb)
    loss.backward()
    dp_opt.step()
    post_step()  # renormalisation, iterate averaging: post-processing
    result.steps += 1
    return float(loss.detach()) * len(xb)


def _opacus_epoch(loader, epoch_steps: int, step: Callable[[Tensor, Tensor], float], finite: Callable | None) -> float:
    """``epoch_steps`` steps over the Poisson batches of ``loader``; the records whose
    clipping norm is not finite are first left out of a batch by ``finite`` (ghost
    clipping: no per-sample gradients to drop them from later). Returns the mean loss."""
    total, count = 0.0, 0
    for i, (xb, yb) in enumerate(loader):
        if i >= epoch_steps:
            break
        if finite:
            xb, yb = finite(xb, yb)
        total += step(xb, yb)
        count += len(xb)
    return total / max(count, 1)


def _finite_batch(model: PrototypeModel, x: Tensor, y: Tensor, transfer_fn: str, beta: float) -> tuple[Tensor, Tensor]:
    """The batch without the records whose clipping norm is not finite (they contribute zero)."""
    keep = finite_records(model, x, y, transfer_fn=transfer_fn, beta=beta)
    return (x, y) if bool(keep.all()) else (x[keep], y[keep])


def check_torchcsprng() -> None:
    """Opacus' secure mode draws from torchcsprng; refuse early when it is missing."""
    import importlib.util

    if importlib.util.find_spec("torchcsprng") is None:
        raise ValueError(
            "secure_mode with engine='opacus' needs Opacus' torchcsprng package, which is "
            "not installed; engine='fused' draws its noise from os.urandom instead"
        )


def _opacus_clip_bound(
    model: PrototypeModel, max_grad_norm: float, clipping: str, grad_sample_mode: str, kwargs: dict
) -> float | list[float]:
    """Opacus' ``max_grad_norm``: ``C`` (joint), or ``C / sqrt(P)`` for each of the ``P``
    trainable parameters (``per_parameter``, which also sets Opacus' ``per_layer``
    clipping in ``kwargs``); the sensitivity is ``C`` either way."""
    if clipping != "per_parameter":
        return max_grad_norm
    if grad_sample_mode == "ghost":
        raise ValueError("clipping='per_parameter' needs grad_sample_mode 'hooks' or 'functorch'")
    trainable = [p for p in model.parameters() if p.requires_grad]
    kwargs["clipping"] = "per_layer"
    return [max_grad_norm / math.sqrt(len(trainable))] * len(trainable)


def _unwrap(private_model) -> None:
    """Remove Opacus' hooks so the trained model is a plain module again."""
    for name in ("_close", "remove_hooks"):
        fn = getattr(private_model, name, None)
        if callable(fn):
            try:
                fn()
            except Exception:  # noqa: BLE001 - best effort, hooks may already be gone
                pass
            return
