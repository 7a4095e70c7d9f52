"""The DP-SGD recipe for prototype models, and ``fit_dp_sgd``, its engine dispatch.

The "SGD" scheme of Brinkrolf, Göpfert & Hammer (2019) (Brinkrolf 2023, Sec. 3.4 A),
as the frozen recipe ``DPSGD``:

1. DP class-mean initialisation with budget ``epsilon1 = init_fraction * epsilon``
   (``dp_proto.lvq.private.dp_class_mean_prototypes``);
2. DP-SGD (Abadi et al. 2016) for ``T = ceil(epochs * int(1 / q))`` steps (the
   ``DPSGDPlan`` of the recipe): Poisson sampling with rate ``q``, per-sample gradients
   clipped jointly over prototypes and Omega to l2 norm ``C``, Gaussian noise
   ``N(0, (sigma C)^2)``, by the fused engine (``dp_proto.lvq.private.fused``) or by
   Opacus (``dp_proto.lvq.private.opacus_engine``) with the closed-form per-sample
   gradients of ``dp_proto.lvq.private.grad_samplers``.

Noise calibration:

* ``calibration="ledger"`` (default): the smallest noise multiplier ``sigma`` for
  which the ledger's total epsilon (initialisation *and* SGD, composed with privacy
  loss distributions) meets the target at ``delta``;
* ``calibration="paper"``: the ``sigma = 2 q sqrt(T log(1/delta)) / epsilon2``
  with ``epsilon2 = epsilon - epsilon1`` of Brinkrolf, Göpfert & Hammer (2019), for
  reproduction; the ledger still reports the epsilon it actually certifies for that sigma.

The ledger reserves each epoch's steps *before* they run, so a budget stops training
cleanly between epochs.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import Tensor

from dp_proto._threads import fit_threads, step_work
from dp_proto.exceptions import PrivacyBudgetExceededError
from dp_proto.lvq.init import prototype_counts
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private.dp_init import INIT_MECHANISMS, DPInitResult, dp_class_mean_prototypes, dp_init_events
from dp_proto.lvq.private.engine_run import DPSGDResult, EngineRun
from dp_proto.lvq.private.fused import CLIPPING_MODES, check_fusable, fit_dp_sgd_fused
from dp_proto.lvq.private.opacus_adapter import check_expected_batch_size
from dp_proto.lvq.private.opacus_engine import fit_opacus
from dp_proto.lvq.private.per_record import fit_per_record
from dp_proto.lvq.sparse import check_penalty, check_sparsifiable, metric_parameter, sparsify_step_
from dp_proto.lvq.training import parameter_groups
from dp_proto.privacy.data_parallel import DataParallel
from dp_proto.privacy.dpsgd_plan import (  # the budget and its calibration live in the privacy core
    DPSGDPlan,
    calibrate_noise_multiplier,
    check_dp_sgd_settings,
    noise_multiplier_for,
    paper_noise_multiplier,
    sgd_steps,
    steps_per_epoch,
    warn_noisy_size,
)
from dp_proto.privacy.ledger import PrivacyEvent, PrivacyLedger, dp_sgd_event
from dp_proto.privacy.mechanisms import noise_rng

__all__ = [
    "SGDSettings",
    "DPSGD",
    "RecipeRun",
    "DPSGDResult",
    "fit_dp_sgd",
    "fixed_noise_recipe",
    "sgd_steps",
    "paper_noise_multiplier",
    "calibrate_noise_multiplier",
    "check_dp_sgd_settings",
    "warn_noisy_size",
    "noise_multiplier_for",
    "precheck_plan",
]

ENGINES = ("auto", "fused", "opacus", "per_record")
GRAD_SAMPLE_MODES = ("hooks", "ghost", "functorch")
OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class SGDSettings:
    """How a DP-SGD run turns its noisy gradients into steps (post-processing).

    Attributes
    ----------
    lr : float > 0, default 0.05
        Step size of the prototypes (and of a trainable backbone).
    metric_lr_scale : float > 0, default 1.0
        Step size of the metric (Omega) relative to ``lr``. Every coordinate of Omega
        receives the same noise as a prototype coordinate, and ``r d`` of them
        random-walk the metric away from its initialisation; a smaller rate keeps that
        walk short while the averaged signal still moves the metric.
    momentum : float >= 0, default 0.0
        Heavy-ball momentum (``optimizer="sgd"`` only).
    optimizer : {"sgd", "adam"}, default "sgd"
    average_last : float in [0, 1), default 0.0
        Release the average of the iterates of the last ``average_last * steps`` steps
        instead of the last iterate (0: the last iterate).
    group_lasso : float >= 0, default 0.0
        After every step (and on the averaged iterate), the group soft-threshold of the
        feature columns of the metric (``dp_proto.lvq.sparse.sparsify_step_`` with the
        metric's step size): feature sparsity with exact zeros (Brinkrolf 2023, ch. 5).
    """

    lr: float = 0.05
    metric_lr_scale: float = 1.0
    momentum: float = 0.0
    optimizer: str = "sgd"
    average_last: float = 0.0
    group_lasso: float = 0.0

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr!r}")
        if not self.metric_lr_scale > 0:
            raise ValueError(f"metric_lr_scale must be > 0, got {self.metric_lr_scale!r}")
        if not self.momentum >= 0:
            raise ValueError(f"momentum must be >= 0, got {self.momentum!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be 'sgd' or 'adam', got {self.optimizer!r}")
        if not 0 <= self.average_last < 1:
            raise ValueError(f"average_last must lie in [0, 1), got {self.average_last!r}")
        object.__setattr__(self, "group_lasso", check_penalty("group_lasso", self.group_lasso))

    def make_optimizer(self, model: PrototypeModel) -> torch.optim.Optimizer:
        """SGD or Adam over ``model``'s trainable parameters, the metric at ``lr * metric_lr_scale``."""
        groups = parameter_groups(model, self.lr, self.metric_lr_scale)
        if self.optimizer == "sgd":
            return torch.optim.SGD(groups, lr=self.lr, momentum=self.momentum)
        return torch.optim.Adam(groups, lr=self.lr)


@dataclass(frozen=True)
class DPSGD:
    """DP-SGD with its DP initialisation: the public settings of one private training run.

    Build it once; ``planned_events`` says what the run will release (from public
    settings alone, before any data are read) and ``run`` trains a model. The DP
    estimators (``DPGLVQ``, ``DPGMLVQ``, ``DPLGMLVQ``) build one from their parameters.

    Attributes
    ----------
    plan : DPSGDPlan
        The budget ``(epsilon, delta)``, the sampling rate ``q``, the epochs, the
        initialisation's share of epsilon and the noise calibration.
    max_grad_norm : float > 0, default 0.5
        ``C``: every record's gradient is clipped to this l2 norm.
    init_mechanism : {"gaussian", "laplace"}, default "gaussian"
        The DP class-mean initialisation's noise on the class sums.
    sgd : SGDSettings
        Step sizes, optimizer and iterate averaging (post-processing).
    clipping : {"joint", "per_parameter"}, default "joint"
        ``joint``: every per-sample gradient clipped to ``C`` over all parameters (the
        papers); ``per_parameter``: each of the ``P`` trainable parameters clipped to
        ``C / sqrt(P)`` (same sensitivity ``C``, same noise; Opacus' ``per_layer``).
    engine : {"auto", "fused", "opacus", "per_record"}, default "auto"
        ``fused`` (``dp_proto.lvq.private.fused``): the DP-SGD step run directly on
        tensors, for models whose trainable parameters all lie in the prototype layer;
        ``per_record`` (``dp_proto.lvq.private.per_record``): every record's gradient
        computed alone, a batch of one, so a trainable backbone's features cannot
        follow the batch's rounding (the proved bound, at one forward and backward
        pass per record); ``opacus``: Opacus' ``PrivacyEngine`` over whole batches
        (faster with a trainable backbone, but a record near a tie or a kink of the
        network can change with the batch: its bound is measured, not proved, see
        docs/privacy-model.md); ``auto``: ``fused`` where the model allows it, else
        ``per_record``.
    grad_sample_mode : {"hooks", "ghost", "functorch"}, default "hooks"
        Opacus engine only. ``hooks`` uses the registered closed-form samplers; ``ghost``
        Opacus' ghost clipping with their norms; ``functorch`` Opacus' generic
        per-sample gradients. Every engine runs the prototype layer in float64
        (``TRAINING_DTYPE``).
    transfer_fn : str, default "identity"; beta : float, default 1.0
        The GLVQ cost's transfer function and its slope.
    secure_mode : bool, default False
        Noise and sampling coins from ``os.urandom`` instead of a generator seeded with
        fresh entropy (Opacus engine: needs ``torchcsprng``).
    """

    plan: DPSGDPlan
    max_grad_norm: float = 0.5
    init_mechanism: str = "gaussian"
    sgd: SGDSettings = field(default_factory=SGDSettings)
    clipping: str = "joint"
    engine: str = "auto"
    grad_sample_mode: str = "hooks"
    transfer_fn: str = "identity"
    beta: float = 1.0
    secure_mode: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.plan, DPSGDPlan):
            raise TypeError(f"plan must be a DPSGDPlan, got {type(self.plan).__name__}")
        if not isinstance(self.sgd, SGDSettings):
            raise TypeError(f"sgd must be SGDSettings, got {type(self.sgd).__name__}")
        if isinstance(self.max_grad_norm, bool) or not self.max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be > 0, got {self.max_grad_norm!r}")
        if self.init_mechanism not in INIT_MECHANISMS:
            raise ValueError(f"init_mechanism must be one of {INIT_MECHANISMS}, got {self.init_mechanism!r}")
        if self.clipping not in CLIPPING_MODES:
            raise ValueError(f"clipping must be one of {CLIPPING_MODES}, got {self.clipping!r}")
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {self.engine!r}")
        if self.grad_sample_mode not in GRAD_SAMPLE_MODES:
            raise ValueError(f"grad_sample_mode must be 'hooks', 'ghost' or 'functorch', got {self.grad_sample_mode!r}")
        if self.clipping == "per_parameter" and self.grad_sample_mode == "ghost" and self.engine == "opacus":
            raise ValueError("clipping='per_parameter' needs grad_sample_mode 'hooks' or 'functorch'")

    @property
    def sampling_rate(self) -> float:
        """``q``, the Poisson sampling rate of every step."""
        return self.plan.sampling_rate

    @property
    def steps(self) -> int:
        """``T = ceil(epochs * int(1 / q))``."""
        return self.plan.steps

    def init_events(self, n_features: int) -> tuple[PrivacyEvent, ...]:
        """The DP initialisation's releases on ``n_features`` features (none when the plan
        gives it no share of epsilon)."""
        if self.plan.init_fraction == 0:
            return ()
        return dp_init_events(n_features, self.plan.init_epsilon, mechanism=self.init_mechanism, delta=self.plan.delta)

    def planned_events(self, n_features: int) -> tuple[PrivacyEvent, ...]:
        """Every release ``run`` makes on ``n_features`` features, from public settings
        only: the DP initialisation's and the DP-SGD steps' (a ``DPPipeline`` or a shared
        ledger checks them against a budget before anything is fitted)."""
        init_events = self.init_events(n_features)
        sigma = self.plan.noise_multiplier(init_events)
        return (*init_events, dp_sgd_event(sigma, self.sampling_rate, self.steps))

    def run(
        self,
        model: PrototypeModel,
        x: Tensor,
        y: Tensor,
        ledger: PrivacyLedger | None = None,
        *,
        expected_batch_size: float | None = None,
        generator: torch.Generator | None = None,
        progress: bool = False,
    ) -> RecipeRun:
        """Train ``model`` privately on ``x (n, d)``, ``y (n,)`` (class indices): the DP
        class-mean initialisation into its prototypes, then ``fit_dp_sgd``.

        Parameters
        ----------
        model : PrototypeModel
            Its prototype labels must be ``make_prototype_labels(c, k)`` (``k`` per
            class, in class order), where the initialisation puts them.
        ledger : PrivacyLedger, optional
            Where every release is recorded; default ``plan.new_ledger()``.
        expected_batch_size : float, optional
            The public normaliser of the noisy gradient sums. Default (and required
            without an initialisation): ``q`` times the sum of the initialisation's
            noisy class counts, never ``q n`` with the private ``n``.
        generator : torch.Generator, optional
            Reproducible noise and coins (warns ``PrivacyLeakWarning``); default fresh
            entropy.
        progress : bool
            A bar over the epochs on stderr, shown once the run has taken two seconds.
        """
        _resolve_engine(model, self)  # settings the model refuses fail before the first release
        ledger = self.plan.new_ledger() if ledger is None else ledger
        init = None
        if self.plan.init_fraction > 0:
            k = _prototypes_per_class(model)
            init = dp_class_mean_prototypes(
                x,
                y,
                model.num_classes,
                self.plan.init_epsilon,
                ledger=ledger,
                prototypes_per_class=k,
                generator=None if self.secure_mode else generator,
                secure_mode=self.secure_mode,
                mechanism=self.init_mechanism,
                delta=self.plan.delta,
            )
            with torch.no_grad():
                model.layer.prototypes.copy_(init.prototypes.to(model.layer.prototypes))
            if expected_batch_size is None:
                expected_batch_size = self.plan.expected_batch_size(float(init.noisy_counts.sum()))
        if expected_batch_size is None:
            raise ValueError("a run without the DP initialisation needs the public expected_batch_size")
        with fit_threads(step_work(expected_batch_size, model), x.device):
            result = fit_dp_sgd(
                model,
                x,
                y,
                self,
                ledger=ledger,
                expected_batch_size=expected_batch_size,
                generator=None if self.secure_mode else generator,
                progress=progress,
            )
        return RecipeRun(init, result, ledger)


class RecipeRun(NamedTuple):
    """What ``DPSGD.run`` did: the initialisation's release (None without one), the
    DP-SGD run, and the ledger holding every release."""

    init: DPInitResult | None
    result: DPSGDResult
    ledger: PrivacyLedger


def fixed_noise_recipe(sampling_rate: float, steps: int, **settings: Any) -> DPSGD:
    """A recipe of exactly ``steps`` steps at rate ``sampling_rate`` (other fields from
    ``settings``), for runs at a given noise multiplier (audits, studies): pass
    ``noise_multiplier=`` to ``fit_dp_sgd``, whose ledger then certifies what it gives.
    The plan's budget (epsilon 1, delta 1e-5) only matters to a run that calibrates."""
    epochs = steps / steps_per_epoch(sampling_rate)
    recipe = DPSGD(DPSGDPlan(1.0, 1e-5, sampling_rate, epochs, init_fraction=0.0), **settings)
    if recipe.steps != steps:  # pragma: no cover - sgd_steps rounds epochs * int(1 / q) up
        raise ValueError(f"no recipe has exactly {steps} steps at q = {sampling_rate}")
    return recipe


def _prototypes_per_class(model: PrototypeModel) -> int:
    """``k`` for a model whose labels are ``make_prototype_labels(c, k)``, else ValueError."""
    counts = prototype_counts(model.prototype_labels)
    if len(set(counts)) != 1:
        raise ValueError(f"the DP initialisation needs the same number of prototypes for every class, got {counts}")
    return counts[0]


def fit_dp_sgd(
    model: PrototypeModel,
    x: Tensor,
    y: Tensor,
    recipe: DPSGD,
    *,
    ledger: PrivacyLedger,
    expected_batch_size: float,
    noise_multiplier: float | None = None,
    generator: torch.Generator | None = None,
    progress: bool = False,
    distributed: bool = False,
    process_group: Any = None,
) -> DPSGDResult:
    """Train ``model`` on ``(x, y)`` with the DP-SGD steps of ``recipe`` (no initialisation).

    Before every epoch (``~1/q`` steps) the ledger reserves the epoch's Poisson-subsampled
    Gaussian steps; if the budget refuses, training stops there (``stopped_by_budget``).
    The metric is renormalised after every step where the layer asks for it.

    Parameters
    ----------
    x : Tensor, shape (n, ...); y : Tensor, shape (n,)
    recipe : DPSGD
        The run's public settings; ``recipe.steps`` steps at rate ``recipe.sampling_rate``.
    ledger : PrivacyLedger
        Where the steps are spent (its budget, if any, is enforced).
    expected_batch_size : float
        The public normaliser of the noisy gradient sum (Opacus divides by
        ``q * len(dataset)``, which depends on the private ``n``). The DP estimators pass
        ``q n~`` with ``n~`` the sum of the DP initialisation's noisy class counts.
    noise_multiplier : float, optional
        ``sigma``; default: the one ``recipe.plan`` calibrates after the releases already
        in ``ledger``. Pass one to study a fixed noise level (the ledger certifies what it
        gives).
    generator : torch.Generator or None
        Noise and Poisson sampling coins. None (the default): a generator seeded with
        fresh operating-system entropy; a caller's generator makes the run reproducible
        (warns ``PrivacyLeakWarning``; the ledger records it).
    progress : bool
        A bar over the epochs on stderr, shown once the run has taken two seconds.
    distributed : bool, default False
        Data-parallel DP-SGD (fused engine) across the ranks of an initialised
        ``torch.distributed`` group (``process_group``, default the world): call it on every
        rank with that rank's disjoint shard ``(x, y)``, the same recipe and the same
        ``ledger`` state; every rank samples its shard at the global rate ``q``, rank 0
        adds the noise once, one all-reduce gives every rank the same update
        (``dp_proto.lvq.private.launch``; ``launch_dp_sgd`` starts the processes on
        one machine). ``expected_batch_size`` is the global one (``q`` times all records).
    """
    if not isinstance(recipe, DPSGD):
        raise TypeError(f"recipe must be a DPSGD, got {type(recipe).__name__}")
    sigma = recipe.plan.noise_multiplier(ledger.events) if noise_multiplier is None else float(noise_multiplier)
    if not sigma >= 0:
        raise ValueError(f"noise_multiplier must be >= 0, got {noise_multiplier!r}")
    engine = _resolve_engine(model, recipe)
    data_parallel = _join_data_parallel(engine, process_group, x.device) if distributed else None
    run = EngineRun(
        noise_multiplier=sigma,
        sampling_rate=recipe.sampling_rate,
        max_grad_norm=float(recipe.max_grad_norm),
        steps=recipe.steps,
        expected_batch_size=check_expected_batch_size(expected_batch_size),
        ledger=ledger,
        generator=noise_rng(ledger, generator, recipe.secure_mode, None, "dp_sgd"),
        secure_mode=recipe.secure_mode,
        clipping=recipe.clipping,
        grad_sample_mode=recipe.grad_sample_mode,
        transfer_fn=recipe.transfer_fn,
        beta=recipe.beta,
        progress=progress and (data_parallel is None or data_parallel.rank == 0),
    )
    with layer_in_training_dtype(model):
        return _train(model, x, y, recipe, run, engine, data_parallel)


#: The dtype in which ``fit_dp_sgd`` runs a model's prototype layer, whatever the layer's
#: own: the clipped sum's sensitivity bound is proved in float64 (docs/privacy-model.md).
#: ``None``: the layer's own dtype (only the audits' twins of the engines before the fix).
TRAINING_DTYPE: torch.dtype | None = torch.float64


@contextlib.contextmanager
def layer_in_training_dtype(model: PrototypeModel) -> Iterator[None]:
    """``model.layer`` cast to ``TRAINING_DTYPE`` inside the block and back to its own
    dtype after it (a cast of the trained parameters: post-processing), in place: the
    parameters stay the same objects. A backbone keeps its dtype; the layer casts its
    input features."""
    stored = model.layer.prototypes.dtype
    target = TRAINING_DTYPE
    if target is None or stored == target:
        yield
        return
    model.layer.to(target)
    try:
        yield
    finally:
        model.layer.to(stored)


def _train(
    model: PrototypeModel,
    x: Tensor,
    y: Tensor,
    recipe: DPSGD,
    run: EngineRun,
    engine: str,
    data_parallel: DataParallel | None,
) -> DPSGDResult:
    """``fit_dp_sgd``'s optimizer, post-step and engine loop, on the layer as it is."""
    sigma = run.noise_multiplier
    settings = recipe.sgd
    opt = settings.make_optimizer(model)
    steps = run.steps
    # the last floor(average_last * steps) iterates: steps start..steps (1-based)
    average = (
        IterateAverage(model, start=steps - math.floor(settings.average_last * steps) + 1)
        if settings.average_last
        else None
    )
    sparsify = _sparsifier(model, settings.lr * settings.metric_lr_scale, settings.group_lasso)

    def post_step() -> None:
        model.layer.normalize_()
        sparsify()
        if average is not None:
            average.update(result.steps + 1)

    result = DPSGDResult(
        steps=0,
        noise_multiplier=sigma,
        sampling_rate=run.sampling_rate,
        expected_batch_size=run.expected_batch_size,
    )
    if run.ledger.budget is not None:
        precheck_plan(run.ledger, dp_sgd_event(sigma, run.sampling_rate, steps))
    if engine == "fused":
        fit_dp_sgd_fused(model, x, y, run, opt, result, post_step, data_parallel)
    elif engine == "per_record":
        fit_per_record(model, x, y, run, opt, result, post_step)
    else:
        fit_opacus(model, x, y, run, opt, result, post_step)
    if average is not None:
        average.release()
        sparsify()
    return result


def _resolve_engine(model: PrototypeModel, recipe: DPSGD) -> str:
    """The engine of a run (``"auto"`` is ``fused`` where the model allows it, else
    ``per_record``; no record is read)."""
    engine = recipe.engine
    if engine == "auto":
        try:
            check_fusable(model)
            engine = "fused"
        except ValueError:
            engine = "per_record"
    return engine


def _join_data_parallel(engine: str, process_group: Any, device: torch.device) -> DataParallel:
    """This rank's place in a data-parallel run (the fused engine only)."""
    if engine != "fused":
        raise ValueError(
            "distributed=True runs the fused engine (prototype layers on a frozen backbone); a trainable "
            "backbone trains across processes with Lightning's DDP strategy (dp_proto.lightning.DPLVQModule)"
        )
    return DataParallel.join(process_group, device)


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
