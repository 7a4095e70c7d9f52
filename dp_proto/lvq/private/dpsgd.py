"""DP-SGD for prototype models through Opacus, with the spend in the privacy ledger.

The "SGD" scheme of Brinkrolf, Göpfert & Hammer (2019) (Brinkrolf 2023, Sec. 3.4 A):

1. DP class-mean initialisation with budget ``epsilon1 = init_fraction * epsilon``
   (``dp_proto.lvq.private.dp_class_mean_prototypes``);
2. DP-SGD (Abadi et al. 2016) for ``T = ceil(epochs * int(1 / q))`` steps (the
   ``DPSGDPlan`` of the run): Poisson sampling with
   rate ``q``, per-sample gradients clipped jointly over prototypes and Omega to l2
   norm ``C``, Gaussian noise ``N(0, (sigma C)^2)``. Opacus samples, clips and noises,
   using the closed-form per-sample gradients of ``dp_proto.lvq.private.grad_samplers``.

Noise calibration:

* ``calibration="ledger"`` (default): the smallest noise multiplier ``sigma`` for
  which the ledger's total epsilon (initialisation *and* SGD, composed with privacy
  loss distributions) meets the target at ``delta``;
* ``calibration="paper"``: the ``sigma = 2 q sqrt(T log(1/delta)) / epsilon2``
  with ``epsilon2 = epsilon - epsilon1`` of Brinkrolf, Göpfert & Hammer (2019), for reproduction; the ledger still reports
  the epsilon it actually certifies for that sigma.

The ledger reserves each epoch's steps *before* they run, so a budget stops training
cleanly between epochs.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import TensorDataset

from dp_proto.exceptions import PrivacyBudgetExceededError
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private.fused import CLIPPING_MODES, FUSABLE_LAYERS, check_fusable, finite_records, fit_dp_sgd_fused
from dp_proto.lvq.private.guard import ClippingGuard
from dp_proto.lvq.private.opacus_adapter import check_expected_batch_size, make_noise_sound
from dp_proto.lvq.sparse import check_penalty, check_sparsifiable, metric_parameter, sparsify_step_
from dp_proto.lvq.training import parameter_groups
from dp_proto.privacy.data_parallel import DataParallel
from dp_proto.privacy.dpsgd_plan import (  # the recipe and its calibration live in the privacy core
    BudgetedEpochs,
    calibrate_noise_multiplier,
    check_dp_sgd_settings,
    noise_multiplier_for,
    paper_noise_multiplier,
    sgd_steps,
    warn_noisy_size,
)
from dp_proto.privacy.ledger import PrivacyEvent, PrivacyLedger, dp_sgd_event
from dp_proto.privacy.mechanisms import noise_rng
from dp_proto.privacy.randomness import fresh_generator
from dp_proto.privacy.sampling import PoissonDataLoader

__all__ = [
    "sgd_steps",
    "paper_noise_multiplier",
    "calibrate_noise_multiplier",
    "check_dp_sgd_settings",
    "warn_noisy_size",
    "noise_multiplier_for",
    "DPSGDResult",
    "fit_dp_sgd",
    "precheck_plan",
]


@dataclass
class DPSGDResult:
    """What ``fit_dp_sgd`` did: steps run and the noise multiplier.

    ``epoch_losses`` (mean GLVQ cost of the private batches per epoch) is for the data
    curator's diagnostics only: it is computed on the private data without noise, so it
    must not be released with the model (the DP estimators do not keep it).
    """

    steps: int
    noise_multiplier: float
    epoch_losses: list[float] = field(default_factory=list)
    stopped_by_budget: bool = False
    opacus_epsilon: float | None = None


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


def fit_dp_sgd(
    model: PrototypeModel,
    x: Tensor,
    y: Tensor,
    *,
    ledger: PrivacyLedger,
    noise_multiplier: float,
    sampling_rate: float,
    max_grad_norm: float,
    steps: int,
    expected_batch_size: float,
    lr: float = 0.05,
    metric_lr_scale: float = 1.0,
    average_last: float = 0.0,
    clipping: str = "joint",
    momentum: float = 0.0,
    optimizer: str = "sgd",
    engine: str = "auto",
    grad_sample_mode: str = "hooks",
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
    transfer_fn: str = "identity",
    beta: float = 1.0,
    delta: float = 1e-5,
    report_opacus_epsilon: bool = False,
    progress: bool = False,
    group_lasso: float = 0.0,
    distributed: bool = False,
    process_group: Any = None,
) -> DPSGDResult:
    """Train ``model`` on ``(x, y)`` with DP-SGD for ``steps`` steps.

    Before every epoch (``~1/q`` steps) the ledger reserves the epoch's Poisson-subsampled
    Gaussian steps; if the budget refuses, training stops there (``stopped_by_budget``).
    The metric is renormalised after every step where the layer asks for it.

    Parameters
    ----------
    x : Tensor, shape (n, ...); y : Tensor, shape (n,)
    expected_batch_size : float
        The public normaliser of the noisy gradient sum (Opacus divides by
        ``q * len(dataset)``, which depends on the private ``n``). The DP estimators pass
        ``q n~`` with ``n~`` the sum of the DP initialisation's noisy class counts.
    generator : torch.Generator or None
        Noise and Poisson sampling coins. None (the default): a generator seeded with
        fresh operating-system entropy; a caller's generator makes the run reproducible
        (warns ``PrivacyLeakWarning``; the ledger records it).
    engine : {"auto", "fused", "opacus"}
        ``fused`` (``dp_proto.lvq.private.fused``): the same DP-SGD step run
        directly on tensors, for models whose trainable parameters all lie in the
        prototype layer; ``opacus``: Opacus' ``PrivacyEngine`` (needed for a trainable
        backbone); ``auto``: ``fused`` where possible, else ``opacus``.
    grad_sample_mode : {"hooks", "ghost", "functorch"}
        Opacus engine only. ``hooks`` uses the registered closed-form samplers; ``ghost`` Opacus' ghost
        clipping with our norm samplers; ``functorch`` Opacus' generic per-sample
        gradients (for comparison).
    metric_lr_scale : float
        Learning rate of the metric (Omega) relative to ``lr``. Every coordinate of
        Omega receives the same noise as a prototype coordinate, and ``r d`` of them
        random-walk the metric away from its (identity) initialisation; a smaller rate
        keeps that walk short while the averaged signal still moves the metric.
    clipping : {"joint", "per_parameter"}
        ``joint``: every per-sample gradient clipped to ``C`` over all parameters (the
        papers); ``per_parameter``: each of the ``P`` trainable parameters clipped to
        ``C / sqrt(P)`` (same sensitivity ``C``, same noise; Opacus' ``per_layer``).
    average_last : float in [0, 1)
        Release the average of the iterates of the last ``average_last * steps`` steps
        instead of the last iterate (0: the last iterate). Averaging T' noisy iterates
        shrinks the noise of the released model; it is post-processing, free of charge.
    report_opacus_epsilon : bool
        Also compute the epsilon of Opacus' own RDP accountant for the SGD steps
        (``opacus_epsilon``; one more accounting pass, for cross-checking the ledger).
    progress : bool
        A bar over the epochs on stderr, shown once the run has taken two seconds.
    group_lasso : float, default 0.0
        After every step (and on the averaged iterate), the group soft-threshold of the
        feature columns of the metric (``dp_proto.lvq.sparse.sparsify_step_`` with the
        metric's step size): feature sparsity with exact zeros (Brinkrolf 2023, ch. 5).
        It reads only the released noisy iterate, so it is post-processing: the privacy
        plan and the guarantee are those of ``group_lasso=0``.
    distributed : bool, default False
        Data-parallel DP-SGD (fused engine) across the ranks of an initialised
        ``torch.distributed`` group (``process_group``, default the world): call it on every
        rank with that rank's disjoint shard ``(x, y)``, the same public settings and the
        same ``ledger`` state; every rank samples its shard at the global rate ``q``, rank 0
        adds the noise once, one all-reduce gives every rank the same update
        (``dp_proto.lvq.private.launch``; ``launch_dp_sgd`` starts the processes on
        one machine). ``expected_batch_size`` is the global one (``q`` times all records).
    """
    from opacus import PrivacyEngine

    engine = _check_settings(model, max_grad_norm, noise_multiplier, engine, metric_lr_scale, average_last, clipping)
    data_parallel = _join_data_parallel(engine, process_group, x.device) if distributed else None
    expected_batch_size = check_expected_batch_size(expected_batch_size)
    generator = noise_rng(ledger, generator, secure_mode, None, "dp_sgd")
    opt = _make_optimizer(model, optimizer, lr, metric_lr_scale, momentum)
    # the last floor(average_last * steps) iterates: steps start..steps (1-based)
    average = IterateAverage(model, start=steps - math.floor(average_last * steps) + 1) if average_last else None

    sparsify = _sparsifier(model, lr * metric_lr_scale, group_lasso)

    def post_step() -> None:
        model.layer.normalize_()
        sparsify()
        if average is not None:
            average.update(result.steps + 1)

    result = DPSGDResult(steps=0, noise_multiplier=noise_multiplier)
    if ledger.budget is not None:
        precheck_plan(ledger, dp_sgd_event(noise_multiplier, sampling_rate, steps))
    if engine == "fused":
        fit_dp_sgd_fused(
            model,
            x,
            y,
            ledger=ledger,
            noise_multiplier=noise_multiplier,
            sampling_rate=sampling_rate,
            max_grad_norm=max_grad_norm,
            steps=steps,
            expected_batch_size=expected_batch_size,
            optimizer=opt,
            result=result,
            post_step=post_step,
            generator=generator,
            secure_mode=secure_mode,
            clipping=clipping,
            transfer_fn=transfer_fn,
            beta=beta,
            progress=progress and (data_parallel is None or data_parallel.rank == 0),
            data_parallel=data_parallel,
        )
        if average is not None:
            average.release()
            sparsify()
        if report_opacus_epsilon:
            result.opacus_epsilon = _opacus_rdp_epsilon(noise_multiplier, sampling_rate, result.steps, delta)
        return result
    if secure_mode:
        _check_torchcsprng()
    # Poisson sampling at exactly q, float64 coins (Opacus' make_private(poisson_sampling=True)
    # would use 1 / len(loader), which depends on the private n, and float32 coins).
    # Sampling coins: the run's generator, or in secure mode a generator seeded from
    # os.urandom (never torch's global generator, which seeding a run makes predictable).
    loader = PoissonDataLoader(
        TensorDataset(x, y), sampling_rate, generator=fresh_generator() if secure_mode else generator
    )
    with warnings.catch_warnings():
        # Opacus warns that its own noise is not from a secure RNG; make_noise_sound below
        # replaces that noise with ours (fresh entropy, or os.urandom in secure mode).
        warnings.filterwarnings("ignore", message="Secure RNG turned off")
        privacy_engine = PrivacyEngine(accountant="rdp", secure_mode=secure_mode)
    criterion = _GLVQCriterion(model, transfer_fn, beta)
    kwargs: dict = {"criterion": criterion} if grad_sample_mode == "ghost" else {}
    clip_bound = _opacus_clip_bound(model, max_grad_norm, clipping, grad_sample_mode, kwargs)
    made = privacy_engine.make_private(
        module=model,
        optimizer=opt,
        data_loader=loader,
        noise_multiplier=noise_multiplier,
        max_grad_norm=clip_bound,
        poisson_sampling=False,
        grad_sample_mode=grad_sample_mode,
        noise_generator=None if secure_mode else generator,
        **kwargs,
    )
    if grad_sample_mode == "ghost":
        private_model, dp_opt, criterion, dp_loader = made
    else:
        private_model, dp_opt, dp_loader = made
    # float64 noise with tails, from our generator; the public normaliser, not q * n; the
    # fused engine's cancellation guard for the per-sample modes (ghost's norm samplers hold it)
    guard = ClippingGuard(model, loss_reduction="mean") if grad_sample_mode != "ghost" else None
    make_noise_sound(
        dp_opt, expected_batch_size=expected_batch_size, generator=generator, secure_mode=secure_mode, norm_floors=guard
    )
    private_model.train()
    finite = None
    if grad_sample_mode == "ghost" and type(model.layer) in FUSABLE_LAYERS:
        finite = partial(_finite_batch, model, transfer_fn=transfer_fn, beta=beta)
    step = partial(_opacus_step, private_model, dp_opt, criterion, post_step, result)
    epochs = BudgetedEpochs(ledger, noise_multiplier, float(dp_loader.sample_rate), steps, progress=progress)
    try:
        for epoch_steps in epochs:  # int(1 / q) steps each
            result.epoch_losses.append(_opacus_epoch(dp_loader, epoch_steps, step, finite))
    finally:
        if guard is not None:
            guard.remove()
    result.stopped_by_budget = epochs.stopped_by_budget
    if report_opacus_epsilon:
        result.opacus_epsilon = float(privacy_engine.accountant.get_epsilon(delta)) if result.steps else 0.0
    _unwrap(private_model)
    if average is not None:
        average.release()
        sparsify()
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


def _check_settings(
    model: PrototypeModel,
    max_grad_norm: float,
    noise_multiplier: float,
    engine: str,
    metric_lr_scale: float,
    average_last: float,
    clipping: str,
) -> str:
    """Check the public settings of ``fit_dp_sgd``; returns the engine (``"auto"``
    resolved: ``fused`` where the model allows it, else ``opacus``)."""
    if not max_grad_norm > 0:
        raise ValueError(f"max_grad_norm must be > 0, got {max_grad_norm!r}")
    if not noise_multiplier >= 0:
        raise ValueError(f"noise_multiplier must be >= 0, got {noise_multiplier!r}")
    if engine not in ("auto", "fused", "opacus"):
        raise ValueError(f"engine must be 'auto', 'fused' or 'opacus', got {engine!r}")
    if not metric_lr_scale > 0:
        raise ValueError(f"metric_lr_scale must be > 0, got {metric_lr_scale!r}")
    if not 0 <= average_last < 1:
        raise ValueError(f"average_last must lie in [0, 1), got {average_last!r}")
    if clipping not in CLIPPING_MODES:
        raise ValueError(f"clipping must be one of {CLIPPING_MODES}, got {clipping!r}")
    if engine != "auto":
        return engine
    try:
        check_fusable(model)
    except ValueError:
        return "opacus"
    return "fused"


def _join_data_parallel(engine: str, process_group: Any, device: torch.device) -> DataParallel:
    """This rank's place in a data-parallel run (the fused engine only)."""
    if engine != "fused":
        raise ValueError(
            "distributed=True runs the fused engine (prototype layers on a frozen backbone); a trainable "
            "backbone trains across processes with Lightning's DDP strategy (dp_proto.lightning.DPLVQModule)"
        )
    return DataParallel.join(process_group, device)


def _check_torchcsprng() -> None:
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


def _make_optimizer(
    model: PrototypeModel, name: str, lr: float, metric_lr_scale: float, momentum: float
) -> torch.optim.Optimizer:
    """SGD or Adam with the layer's metric parameters at ``lr * metric_lr_scale``."""
    groups = parameter_groups(model, lr, metric_lr_scale)
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=momentum)
    if name == "adam":
        return torch.optim.Adam(groups, lr=lr)
    raise ValueError(f"optimizer must be 'sgd' or 'adam', got {name!r}")


def _sparsifier(model: PrototypeModel, step: float, group_lasso: float) -> Callable[[], None]:
    """The post-step group soft-threshold of ``fit_dp_sgd`` (a no-op at ``group_lasso=0``)."""
    if check_penalty("group_lasso", group_lasso) == 0:
        return lambda: None
    check_sparsifiable(model)
    metric = metric_parameter(model)

    def sparsify() -> None:
        sparsify_step_(metric, step, group_lasso)

    return sparsify


class IterateAverage:
    """Running mean of a model's trainable parameters over the steps ``>= start``
    (1-based); ``release`` writes it into the model (and renormalises the metric)."""

    def __init__(self, model: PrototypeModel, start: int) -> None:
        self.model, self.start, self.count = model, max(int(start), 1), 0
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.mean = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def update(self, step: int) -> None:
        if step < self.start:
            return
        self.count += 1
        for m, p in zip(self.mean, self.params, strict=True):
            m.add_(p.detach() - m, alpha=1.0 / self.count)

    @torch.no_grad()
    def release(self) -> None:
        if self.count == 0:  # stopped by the budget before averaging began: keep the iterate
            return
        for m, p in zip(self.mean, self.params, strict=True):
            p.copy_(m)
        self.model.layer.normalize_()


def precheck_plan(ledger: PrivacyLedger, event: PrivacyEvent) -> bool:
    """Check all of a run's planned steps against the budget at once. If they fit, the
    per-epoch spends that follow are prefixes of the plan and need no new composition;
    if not, nothing is recorded and every epoch is checked (training then stops cleanly
    at the budget)."""
    try:
        ledger.check(event)
    except PrivacyBudgetExceededError:
        return False
    return True


def _opacus_rdp_epsilon(noise_multiplier: float, sampling_rate: float, steps: int, delta: float) -> float:
    """Opacus' RDP accountant's epsilon for ``steps`` subsampled Gaussian steps."""
    from opacus.accountants import RDPAccountant

    if steps == 0:
        return 0.0
    accountant = RDPAccountant()
    accountant.history.append((noise_multiplier, sampling_rate, steps))
    return float(accountant.get_epsilon(delta))


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
