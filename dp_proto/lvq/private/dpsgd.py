"""DP-SGD for prototype models through Opacus, with the spend in the privacy ledger.

The "SGD" scheme of Brinkrolf, Göpfert & Hammer (2019) (Brinkrolf 2023, Sec. 3.4 A):

1. DP class-mean initialisation with budget ``epsilon1 = init_fraction * epsilon``
   (:func:`dp_proto.lvq.private.dp_class_mean_prototypes`);
2. DP-SGD (Abadi et al. 2016) for ``T = ceil(epochs / q)`` steps: Poisson sampling with
   rate ``q``, per-sample gradients clipped jointly over prototypes and Omega to l2
   norm ``C``, Gaussian noise ``N(0, (sigma C)^2)``. Opacus samples, clips and noises,
   using the closed-form per-sample gradients of :mod:`dp_proto.lvq.private.grad_samplers`.

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

import functools
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch.utils.data import TensorDataset

from dp_proto.exceptions import PrivacyBudgetExceededError
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private import grad_samplers  # noqa: F401  (registers the closed-form samplers)
from dp_proto.lvq.private.fused import CLIPPING_MODES, check_fusable, fit_dp_sgd_fused
from dp_proto.lvq.training import parameter_groups
from dp_proto.privacy.calibration import check_delta, check_epsilon
from dp_proto.privacy.ledger import PrivacyEvent, PrivacyLedger, dp_sgd_event
from dp_proto.privacy.mechanisms import noise_rng
from dp_proto.privacy.opacus_noise import check_expected_batch_size, make_noise_sound
from dp_proto.privacy.randomness import fresh_generator

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


def sgd_steps(epochs: float, sampling_rate: float) -> int:
    """``T = ceil(E / q)``: the number of DP-SGD steps of ``epochs`` passes at rate ``q``."""
    if not epochs > 0:
        raise ValueError(f"epochs must be > 0, got {epochs!r}")
    if not 0 < sampling_rate <= 1:
        raise ValueError(f"sampling_rate must lie in (0, 1], got {sampling_rate!r}")
    return max(math.ceil(epochs / sampling_rate - 1e-9), 1)


def paper_noise_multiplier(epsilon_sgd: float, delta: float, sampling_rate: float, steps: int) -> float:
    """The ``sigma = 2 q sqrt(T log(1/delta)) / epsilon2`` of Brinkrolf, Göpfert & Hammer (2019) (an unproven constant
    ``c2 = 2`` in Abadi et al.'s Thm 1; the ledger certifies its actual epsilon)."""
    epsilon_sgd = check_epsilon(epsilon_sgd, "epsilon for DP-SGD")
    delta = check_delta(delta, allow_zero=False)
    return 2.0 * sampling_rate * math.sqrt(steps * math.log(1.0 / delta)) / epsilon_sgd


def _total_epsilon(prior: Sequence[PrivacyEvent], sigma: float, q: float, steps: int, delta: float,
                   accountant: str, discretization: float = 1e-4) -> float:
    return PrivacyLedger.epsilon_of([*prior, dp_sgd_event(sigma, q, steps)], delta, accountant, discretization)


def _smallest_sigma(feasible, hi: float, rtol: float) -> float:
    """Smallest sigma in (0, hi] with ``feasible(sigma)``, for monotone ``feasible``;
    ``feasible(hi)`` must hold."""
    lo = hi / 2.0
    while feasible(lo):
        hi, lo = lo, lo / 2.0
        if lo < 1e-3:
            return hi
    while hi - lo > rtol * hi:
        mid = math.sqrt(lo * hi)
        if feasible(mid):
            hi = mid
        else:
            lo = mid
    return hi


def calibrate_noise_multiplier(
    target_epsilon: float,
    delta: float,
    sampling_rate: float,
    steps: int,
    *,
    prior_events: Sequence[PrivacyEvent] = (),
    accountant: str = "pld",
    rtol: float = 1e-3,
) -> float:
    """Smallest ``sigma`` such that ``prior_events`` followed by ``steps`` Poisson-subsampled
    Gaussian steps (rate ``sampling_rate``, multiplier ``sigma``) are
    ``(target_epsilon, delta)``-DP according to the ledger's accountant.

    The search first brackets with a fast valid bound (basic composition of the prior
    events with the RDP epsilon of the steps), then refines with the ledger's accountant
    to 1 %. Below sigma = 0.5 (very large epsilons) PLDs get expensive and the bracketed
    value is returned: still valid, only slightly conservative. Results are cached (the
    search is deterministic), so cross-validation folds with equal settings calibrate once.

    Raises ``ValueError`` naming the smallest feasible epsilon if the prior events
    alone (plus one very noisy step) already exceed the target.
    """
    return _calibrate_cached(float(target_epsilon), float(delta), float(sampling_rate), int(steps),
                             tuple(prior_events), accountant, float(rtol))


@functools.lru_cache(maxsize=256)
def _calibrate_cached(
    target_epsilon: float,
    delta: float,
    sampling_rate: float,
    steps: int,
    prior_events: tuple[PrivacyEvent, ...],
    accountant: str,
    rtol: float,
) -> float:
    target_epsilon = check_epsilon(target_epsilon, "target epsilon")
    delta = check_delta(delta, allow_zero=False)

    def feasible_with(acc: str, discretization: float = 1e-4):
        return lambda sigma: _total_epsilon(prior_events, sigma, sampling_rate, steps, delta, acc,
                                            discretization) <= target_epsilon

    # Fast, valid upper bound for the bracket: basic composition of the prior events'
    # epsilon with the RDP epsilon of the SGD steps (deltas split when the prior has one).
    prior_ledger = PrivacyLedger()
    if prior_events:
        prior_ledger.spend(*prior_events)
    prior_pure = all(e.pure_epsilon is not None for e in prior_events)
    prior_eps = prior_ledger.get_epsilon(0.0 if prior_pure else delta / 2)
    sgd_delta = delta if prior_pure else delta / 2

    def fast_ok(sigma: float) -> bool:
        return prior_eps + _total_epsilon((), sigma, sampling_rate, steps, sgd_delta, "rdp") <= target_epsilon

    if prior_eps >= target_epsilon:
        raise ValueError(
            f"epsilon = {target_epsilon:g} is too small for these settings: the initialisation alone "
            f"spends {prior_eps:.4g}; choose a larger epsilon or a smaller init_fraction"
        )
    hi = 1.0
    while not fast_ok(hi):
        hi *= 2.0
        if hi > 1e4:
            smallest = _total_epsilon(prior_events, 1e4, sampling_rate, steps, delta, accountant)
            raise ValueError(
                f"epsilon = {target_epsilon:g} is too small for these settings (the initialisation "
                f"and even a very noisy DP-SGD exceed it); the smallest feasible epsilon is about "
                f"{smallest:.4g} at delta = {delta:g}"
            )
    sigma = _smallest_sigma(fast_ok, hi, rtol)
    if sigma < 0.5:  # PLDs of nearly noiseless steps are expensive; sigma is valid as it is
        return sigma
    # Refine on a coarser (still pessimistic, so still valid) PLD grid for speed, then
    # confirm on the ledger's own grid.
    sigma = _smallest_sigma(feasible_with(accountant, 1e-3), sigma, max(rtol, 1e-2))
    fine = feasible_with(accountant)
    while not fine(sigma):  # pragma: no cover - coarse grids over-estimate epsilon
        sigma *= 1.01
    # The coarse grid over-estimates epsilon (by more at small epsilons): take the slack
    # back on the ledger's own grid, walking down in 5 % steps, then bisecting.
    lo, hi = 0.95 * sigma, sigma
    while fine(lo):
        hi, lo = lo, 0.95 * lo
    for _ in range(4):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if fine(mid) else (mid, hi)
    return hi


def noise_multiplier_for(
    calibration: str,
    epsilon: float,
    delta: float,
    sampling_rate: float,
    steps: int,
    *,
    prior_events: Sequence[PrivacyEvent] = (),
) -> float:
    """The noise multiplier of a DP-SGD run that follows ``prior_events`` (e.g. the DP
    initialisation) within a total ``(epsilon, delta)``.

    ``calibration="ledger"``: :func:`calibrate_noise_multiplier` on the whole run;
    ``"paper"``: :func:`paper_noise_multiplier` with ``epsilon2 = epsilon`` minus the
    prior events' epsilon (basic composition, as in Brinkrolf, Göpfert & Hammer (2019)).
    """
    if calibration == "ledger":
        return calibrate_noise_multiplier(epsilon, delta, sampling_rate, steps, prior_events=prior_events)
    if calibration == "paper":
        prior = PrivacyLedger.epsilon_of(prior_events, 0.0) if prior_events else 0.0
        return paper_noise_multiplier(epsilon - prior, delta, sampling_rate, steps)
    raise ValueError(f"calibration must be 'ledger' or 'paper', got {calibration!r}")


def check_dp_sgd_settings(epsilon: float, delta: float, sampling_rate: float) -> None:
    """Clear errors for public settings that cannot give a private model: epsilon <= 0,
    delta outside (0, 1), a sampling rate outside (0, 1] (``ValueError``).

    The private ``n`` is not looked at: an error or warning whose presence depends on
    one record would tell neighbouring data sets apart. See :func:`warn_noisy_size` for
    the same checks on a released (noisy) record count."""
    check_epsilon(epsilon)
    check_delta(delta, allow_zero=False)
    if not 0 < sampling_rate <= 1:
        raise ValueError(f"sampling_rate must lie in (0, 1], got {sampling_rate!r}")


def warn_noisy_size(noisy_n: float, sampling_rate: float, delta: float) -> None:
    """Warnings about the data size computed from a *released* noisy count ``noisy_n``
    (post-processing, so they reveal nothing beyond the release): an expected batch
    ``q n~ < 1``, or ``delta >= 1 / n~``."""
    if sampling_rate * noisy_n < 1:
        warnings.warn(
            f"sampling_rate {sampling_rate:g} with a noisy record count of about {noisy_n:.0f} gives "
            f"an expected batch below one record; most DP-SGD steps will see no data",
            UserWarning, stacklevel=3)
    if delta * noisy_n >= 1:
        warnings.warn(
            f"delta = {delta:g} is not below 1/n for the noisy record count n~ = {noisy_n:.0f}: a "
            f"mechanism may then publish a whole record with probability delta; use delta << 1/n",
            UserWarning, stacklevel=3)


@dataclass
class DPSGDResult:
    """What :func:`fit_dp_sgd` did: steps run and the noise multiplier.

    ``epoch_losses`` (mean GLVQ cost of the private batches per epoch) is for the data
    curator's diagnostics only: it is computed on the private data without noise, so it
    must not be released with the model (the DP estimators do not keep it).
    """

    steps: int
    noise_multiplier: float
    epoch_losses: list[float] = field(default_factory=list)
    stopped_by_budget: bool = False
    opacus_epsilon: float | None = None


def _glvq_criterion(model: PrototypeModel, transfer_fn: str, beta: float):
    def criterion(distances: Tensor, targets: Tensor) -> Tensor:
        return model.loss(distances, targets, transfer_fn=transfer_fn, beta=beta)  # type: ignore[arg-type]
    return criterion


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
        ``fused`` (:mod:`dp_proto.lvq.private.fused`): the same DP-SGD step run
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
        (``opacus_epsilon``; about 0.2 s, for cross-checking the ledger).
    """
    from opacus import PrivacyEngine
    from opacus.data_loader import DPDataLoader

    if not max_grad_norm > 0:
        raise ValueError(f"max_grad_norm must be > 0, got {max_grad_norm!r}")
    if not noise_multiplier >= 0:
        raise ValueError(f"noise_multiplier must be >= 0, got {noise_multiplier!r}")
    if engine not in ("auto", "fused", "opacus"):
        raise ValueError(f"engine must be 'auto', 'fused' or 'opacus', got {engine!r}")
    if engine == "auto":
        try:
            check_fusable(model)
            engine = "fused"
        except ValueError:
            engine = "opacus"
    if not metric_lr_scale > 0:
        raise ValueError(f"metric_lr_scale must be > 0, got {metric_lr_scale!r}")
    if not 0 <= average_last < 1:
        raise ValueError(f"average_last must lie in [0, 1), got {average_last!r}")
    if clipping not in CLIPPING_MODES:
        raise ValueError(f"clipping must be one of {CLIPPING_MODES}, got {clipping!r}")
    expected_batch_size = check_expected_batch_size(expected_batch_size)
    generator = noise_rng(ledger, generator, secure_mode, None, "dp_sgd")
    opt = _make_optimizer(model, optimizer, lr, metric_lr_scale, momentum)
    # the last floor(average_last * steps) iterates: steps start..steps (1-based)
    average = IterateAverage(model, start=steps - math.floor(average_last * steps) + 1) if average_last else None

    def post_step() -> None:
        model.layer.normalize_()
        if average is not None:
            average.update(result.steps + 1)

    result = DPSGDResult(steps=0, noise_multiplier=noise_multiplier)
    if ledger.budget is not None:
        precheck_plan(ledger, dp_sgd_event(noise_multiplier, sampling_rate, steps))
    if engine == "fused":
        fit_dp_sgd_fused(model, x, y, ledger=ledger, noise_multiplier=noise_multiplier,
                         sampling_rate=sampling_rate, max_grad_norm=max_grad_norm, steps=steps,
                         expected_batch_size=expected_batch_size, optimizer=opt, sgd_event=dp_sgd_event, result=result, post_step=post_step,
                         generator=generator, secure_mode=secure_mode, clipping=clipping,
                         transfer_fn=transfer_fn, beta=beta)
        if average is not None:
            average.release()
        if report_opacus_epsilon:
            result.opacus_epsilon = _opacus_rdp_epsilon(noise_multiplier, sampling_rate, result.steps, delta)
        return result
    if secure_mode:
        import importlib.util

        if importlib.util.find_spec("torchcsprng") is None:
            raise ValueError("secure_mode with engine='opacus' needs Opacus' torchcsprng package, which is "
                             "not installed; engine='fused' draws its noise from os.urandom instead")
    # Poisson sampling at exactly q (Opacus' make_private(poisson_sampling=True) would
    # use 1 / len(loader), which depends on the private n).
    # Sampling coins: the run's generator, or in secure mode a generator seeded from
    # os.urandom (never torch's global generator, which seeding a run makes predictable).
    loader = DPDataLoader(TensorDataset(x, y), sample_rate=sampling_rate,
                          generator=fresh_generator() if secure_mode else generator)
    with warnings.catch_warnings():
        # Opacus warns that its own noise is not from a secure RNG; make_noise_sound below
        # replaces that noise with ours (fresh entropy, or os.urandom in secure mode).
        warnings.filterwarnings("ignore", message="Secure RNG turned off")
        privacy_engine = PrivacyEngine(accountant="rdp", secure_mode=secure_mode)
    criterion = _glvq_criterion(model, transfer_fn, beta)
    kwargs: dict = {"criterion": criterion} if grad_sample_mode == "ghost" else {}
    clip_bound: float | list[float] = max_grad_norm
    if clipping == "per_parameter":
        if grad_sample_mode == "ghost":
            raise ValueError("clipping='per_parameter' needs grad_sample_mode 'hooks' or 'functorch'")
        trainable = [p for p in model.parameters() if p.requires_grad]
        clip_bound = [max_grad_norm / math.sqrt(len(trainable))] * len(trainable)
        kwargs["clipping"] = "per_layer"
    made = privacy_engine.make_private(
        module=model, optimizer=opt, data_loader=loader, noise_multiplier=noise_multiplier,
        max_grad_norm=clip_bound, poisson_sampling=False, grad_sample_mode=grad_sample_mode,
        noise_generator=None if secure_mode else generator, **kwargs,
    )
    if grad_sample_mode == "ghost":
        private_model, dp_opt, criterion, dp_loader = made
    else:
        private_model, dp_opt, dp_loader = made
    # float64 noise with tails, from our generator; the public normaliser, not q * n
    make_noise_sound(dp_opt, expected_batch_size=expected_batch_size, generator=generator, secure=secure_mode)
    q = float(dp_loader.sample_rate)  # = sampling_rate
    private_model.train()
    while result.steps < steps:
        epoch_steps = min(len(dp_loader), steps - result.steps)
        try:
            ledger.spend(dp_sgd_event(noise_multiplier, q, epoch_steps))
        except PrivacyBudgetExceededError:  # stop cleanly between epochs
            result.stopped_by_budget = True
            break
        total, count = 0.0, 0
        for i, (xb, yb) in enumerate(dp_loader):
            if i >= epoch_steps:
                break
            dp_opt.zero_grad(set_to_none=True)
            loss = criterion(private_model(xb), yb)
            loss.backward()
            dp_opt.step()
            post_step()  # renormalisation, iterate averaging: post-processing
            total += float(loss.detach()) * len(xb)
            count += len(xb)
            result.steps += 1
        result.epoch_losses.append(total / max(count, 1))
    if report_opacus_epsilon:
        result.opacus_epsilon = float(privacy_engine.accountant.get_epsilon(delta)) if result.steps else 0.0
    _unwrap(private_model)
    if average is not None:
        average.release()
    return result


def _make_optimizer(model: PrototypeModel, name: str, lr: float, metric_lr_scale: float,
                    momentum: float) -> torch.optim.Optimizer:
    """SGD or Adam with the layer's metric parameters at ``lr * metric_lr_scale``."""
    groups = parameter_groups(model, lr, metric_lr_scale)
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=momentum)
    if name == "adam":
        return torch.optim.Adam(groups, lr=lr)
    raise ValueError(f"optimizer must be 'sgd' or 'adam', got {name!r}")


class IterateAverage:
    """Running mean of a model's trainable parameters over the steps ``>= start``
    (1-based); :meth:`release` writes it into the model (and renormalises the metric)."""

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
