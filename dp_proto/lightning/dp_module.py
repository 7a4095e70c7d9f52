"""LightningModule for DP-SGD training of a prototype model (Opacus inside Lightning)."""

from __future__ import annotations

import math
from typing import Any

import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer

from dp_proto.lightning.callbacks import restore_ledger, save_ledger
from dp_proto.lightning.datamodule import resumed_seed
from dp_proto.lightning.module import LVQModule
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private.guard import ClippingGuard
from dp_proto.lvq.private.opacus_adapter import check_expected_batch_size, make_noise_sound
from dp_proto.lvq.private.per_record import noisy_gradients, per_record_clipped_sum
from dp_proto.privacy.data_parallel import DataParallel
from dp_proto.privacy.dpsgd_plan import BudgetedEpochs
from dp_proto.privacy.ledger import PrivacyLedger
from dp_proto.privacy.mechanisms import noise_rng
from dp_proto.privacy.randomness import noise_source
from dp_proto.privacy.sampling import PoissonBatchSampler

__all__ = ["DPLVQModule", "EpochBudgetMixin", "check_poisson_loader"]


def check_poisson_loader(loader, sampling_rate: float) -> None:
    """The training loader must sample Poisson batches at exactly the module's rate ``q``.

    The noise multiplier was calibrated for Poisson-subsampled steps at ``q``; a shuffled
    loader, or a Poisson loader at another rate, would make the ledger's epsilon wrong.
    Opacus' ``DPDataLoader`` is refused too: its float32 coins round ``q`` up.
    Raises ``ValueError`` before any step runs (the check reads public settings only)."""
    sampler = getattr(loader, "batch_sampler", None)
    if not isinstance(sampler, PoissonBatchSampler):
        raise ValueError(
            f"DP-SGD needs a Poisson-sampling training loader with float64 coins "
            f"(dp_proto.privacy.PoissonDataLoader, e.g. from ArrayDataModule(sampling_rate=q)): the privacy "
            f"accounting assumes it; got {type(loader).__name__} with batch sampler {type(sampler).__name__}"
        )
    rate = sampler.sample_rate
    if not math.isclose(float(rate), float(sampling_rate), rel_tol=1e-12):
        raise ValueError(
            f"the training loader samples at rate {float(rate):g} but the module's noise was calibrated "
            f"for sampling_rate={float(sampling_rate):g}; take both from one DPSGDPlan"
        )


def check_data_parallel_run(trainer, dp: DataParallel, settings: dict[str, float]) -> None:
    """Before the first step of a data-parallel DP-SGD run: every rank must sample its own
    shard at the global rate (``ArrayDataModule`` does, under ``use_distributed_sampler=False``)
    and share the public settings; ``ValueError`` otherwise, on every rank."""
    shard = getattr(trainer.train_dataloader, "data_parallel_shard", None)
    table = dp.gather([float(shard == (dp.rank, dp.world_size))], what="the check of the training loaders")
    if not bool(torch.all(table == 1.0)):
        raise ValueError(
            "data-parallel DP-SGD needs every rank to Poisson-sample its own shard of the training records at "
            "the global rate: use ArrayDataModule(sampling_rate=q) and Trainer(use_distributed_sampler=False) "
            "(a distributed sampler with a per-rank batch would change the rate the accountant assumes); "
            f"ranks with another loader: {[r for r in range(dp.world_size) if table[r, 0] != 1.0]}"
        )
    dp.check_same(list(settings), list(settings.values()))


class EpochBudgetMixin:
    """Privacy accounting for DP-SGD LightningModules with ``ledger``,
    ``noise_multiplier`` and ``sampling_rate``: every step is recorded exactly once, before
    its noise is drawn, and the budget is checked epoch by epoch, through the same
    ``BudgetedEpochs`` the estimators' epoch loop uses.

    * ``reserve_epoch_steps`` (call it from ``on_train_epoch_start``) checks that
      the epoch's ``num_training_batches`` steps fit the budget, recording nothing. If
      they do not, no step of the epoch runs: training stops cleanly
      (``stopped_by_budget = True``, ``trainer.should_stop``; no exception).
    * ``on_train_batch_start`` records the step in the ledger before the optimizer
      draws its noise (a step the budget refuses stops training the same way). The
      ledger therefore holds exactly the steps that ran, also in a checkpoint saved
      in the middle of an epoch.
    * the ledger goes into every checkpoint and is restored from it
      (``restore_ledger``): resuming with the same
      ledger (in the same process) adds nothing, resuming with a new ledger takes over
      the checkpoint's history, so each step counts once; a resumed epoch that would
      pass the budget is refused before any of its noise is drawn.

    Checkpoint keys (plain data): ``"privacy_ledger"`` and ``"privacy_ledger_origins"``
    (``save_ledger``) and ``"dp_sgd"``: ``{"steps_recorded": int, "noise": source}``
    (the steps of the model's lineage and the noise's source, ``"fresh"``,
    ``"secure"`` or ``"reproducible"``). No generator and no generator state is saved.
    On loading a checkpoint the noise comes from:

    * fresh entropy (the default): a new fresh generator, as for every fit;
    * ``secure_mode``: ``os.urandom``;
    * a reproducible generator (``noise_seed``, or a caller's own): the generator is
      re-seeded in place with ``resumed_seed(its seed, the checkpoint's global_step)``
      (``dp_proto.lightning.datamodule``): the resumed noise is reproducible from the
      seed and the checkpoint, and never a replay of the stream the first steps drew
      (identical noise in two steps would cancel in their difference). A resumed run
      therefore differs from an uninterrupted one.
    """

    # DP-SGD steps of this model's lineage: the steps this module recorded in the ledger,
    # plus those of the checkpoint it was loaded from (the ledger counts every step that ran)
    steps_recorded = 0

    @staticmethod
    def check_dp_settings(
        noise_multiplier: float,
        max_grad_norm: float,
        sampling_rate: float,
        generator: torch.Generator | None,
        secure_mode: bool,
    ) -> None:
        """Clear errors for bad public DP-SGD settings (call before ``__init__`` of the module)."""
        if not noise_multiplier >= 0 or not max_grad_norm > 0 or not 0 < sampling_rate <= 1:
            raise ValueError(
                f"need noise_multiplier >= 0, max_grad_norm > 0 and 0 < sampling_rate <= 1, got "
                f"{noise_multiplier}, {max_grad_norm}, {sampling_rate}"
            )
        if secure_mode and generator is not None:
            raise ValueError("secure_mode draws the noise from os.urandom; do not pass a generator as well")

    def set_dp_settings(
        self,
        ledger: PrivacyLedger | None,
        noise_multiplier: float,
        max_grad_norm: float,
        sampling_rate: float,
        expected_batch_size: float,
        generator: torch.Generator | None,
        secure_mode: bool,
    ) -> None:
        """Store the DP-SGD settings (after ``__init__``); the generator stays private,
        never a hyperparameter, log entry or checkpoint item."""
        self.ledger = ledger if ledger is not None else PrivacyLedger()
        self.noise_multiplier = float(noise_multiplier)
        self.max_grad_norm = float(max_grad_norm)
        self.sampling_rate = float(sampling_rate)
        self.expected_batch_size = check_expected_batch_size(expected_batch_size)
        self._noise_generator = generator
        # the seed a reproducible generator started from (in memory only), for resuming
        self._noise_seed_base = generator.initial_seed() if generator is not None else None
        self.secure_mode = bool(secure_mode)

    _budgeted: BudgetedEpochs | None = None

    def _budget(self) -> BudgetedEpochs:
        """This fit's budgeted steps (``BudgetedEpochs``, the object
        the estimators' epoch loop uses too)."""
        if self._budgeted is None:
            self._budgeted = BudgetedEpochs(self.ledger, self.noise_multiplier, self.sampling_rate)
        return self._budgeted

    @property
    def stopped_by_budget(self) -> bool:
        """True once the budget refused an epoch or a step of this fit."""
        return self._budgeted is not None and self._budgeted.stopped_by_budget

    def on_fit_start(self) -> None:
        super().on_fit_start()
        self._budgeted = None  # a new fit starts unstopped

    def setup(self, stage: str) -> None:
        super().setup(stage)
        dp = self.data_parallel()
        if dp is not None and stage == "fit":
            # One run, one normaliser: rank 0's (e.g. q times its DP initialisation's noisy
            # count; another rank's own draw is discarded, like its initial prototypes, which
            # Lightning's DDP replaces by rank 0's).
            (self.expected_batch_size,) = dp.broadcast_values(
                [self.expected_batch_size], what="the broadcast of the expected batch size"
            )

    def on_train_start(self) -> None:
        super().on_train_start()
        check_poisson_loader(self.trainer.train_dataloader, self.sampling_rate)
        dp = self.data_parallel()
        if dp is not None:
            check_data_parallel_run(self.trainer, dp, self.public_dp_settings())

    def data_parallel(self) -> DataParallel | None:
        """This rank's place when the trainer runs several processes (Lightning's DDP), else None."""
        trainer = self._trainer
        if trainer is None or trainer.world_size <= 1:
            return None
        return DataParallel.join(None, self.device)

    def public_dp_settings(self) -> dict[str, float]:
        """The settings every rank of a data-parallel run must share."""
        return {
            "noise_multiplier": self.noise_multiplier,
            "max_grad_norm": self.max_grad_norm,
            "sampling_rate": self.sampling_rate,
            "expected_batch_size": self.expected_batch_size,
            "steps_recorded": float(self.steps_recorded),
        }

    def on_train_end(self) -> None:
        super().on_train_end()
        dp = self.data_parallel()
        if dp is not None:  # one run, one ledger: every rank spent the same steps
            dp.check_same(["steps_recorded"], [float(self.steps_recorded)])

    def reserve_epoch_steps(self) -> None:
        """Check the epoch's steps against the budget (nothing is recorded here); if they
        do not fit, no step of the epoch runs and training stops cleanly."""
        steps = self.trainer.num_training_batches
        if not math.isfinite(steps) or steps < 1:
            return  # every step is still checked when it is recorded
        if not self._budget().reserve(int(steps)):
            self.trainer.should_stop = True

    def on_train_batch_start(self, batch, batch_idx: int):
        if not self._budget().record(1):  # before the optimizer draws this step's noise
            self.trainer.should_stop = True
            return -1  # Lightning: -1 skips the rest of the epoch
        self.steps_recorded += 1
        return None

    def _noise_source(self) -> str:
        return "secure" if self.secure_mode else noise_source(self._noise_generator)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        save_ledger(checkpoint, self.ledger)
        checkpoint["dp_sgd"] = {"steps_recorded": int(self.steps_recorded), "noise": self._noise_source()}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        # Raises for a checkpoint without a ledger; idempotent (PrivacySpendCallback
        # may restore as well), so the spend continues from the checkpoint's.
        restore_ledger(checkpoint, self.ledger)
        if "dp_sgd" in checkpoint:  # (absent from checkpoints of older versions)
            self.steps_recorded = int(checkpoint["dp_sgd"]["steps_recorded"])
        if self._noise_generator is not None and self._noise_source() == "reproducible":
            seed = self._noise_seed_base if self._noise_seed_base is not None else self._noise_generator.initial_seed()
            self._noise_generator.manual_seed(resumed_seed(seed, int(checkpoint.get("global_step", 0))))

    def _sound_optimizer(
        self,
        optimizer: DPOptimizer,
        generator: torch.Generator | None,
        name: str,
        norm_floors: ClippingGuard | None = None,
    ) -> DPOptimizer:
        """Float64 noise from fresh entropy (or the caller's generator, or ``os.urandom``
        with ``secure_mode``) and the public normaliser, its source noted in the ledger;
        under a data-parallel trainer the noise is drawn on rank 0 only and the ranks'
        clipped sums are all-reduced (``make_noise_sound(data_parallel=...)``)."""
        generator = noise_rng(self.ledger, None if self.secure_mode else generator, self.secure_mode, None, name)
        return make_noise_sound(
            optimizer,
            expected_batch_size=self.expected_batch_size,
            generator=generator,
            secure_mode=self.secure_mode,
            name=name,
            data_parallel=self.data_parallel(),
            norm_floors=norm_floors,
        )


class DPLVQModule(EpochBudgetMixin, LVQModule):
    """DP-SGD on the GLVQ cost: Opacus' per-sample clipping, sound noise, Lightning's loop.

    The training data must come from a Poisson-sampling loader
    (``ArrayDataModule(..., sampling_rate=q)`` provides one), so that every record
    enters each step independently with probability ``q``. Every step is recorded in
    ``ledger`` before its noise is drawn, and before every epoch the epoch's steps are
    checked against the budget (see ``EpochBudgetMixin``: a budget that would be
    exceeded stops training cleanly, also when resuming). Pair it with
    ``PrivacySpendCallback`` to log epsilon; the module keeps
    the ledger in its checkpoints itself.

    The prototype layer trains in float64, where the clipped sum's sensitivity bound is
    proved (docs/privacy-model.md): a layer of another dtype is cast in place (the
    hyperparameters' ``model_spec`` keeps the dtype it was given in); a backbone keeps
    its own dtype, and the layer casts its features.

    The noise is float64 Box-Muller noise (``make_noise_sound``;
    Opacus' float32 ``torch.normal`` has no tails beyond about 5.8 sigma) from a
    generator seeded with fresh operating-system entropy, never from torch's global
    generator (which ``seed_everything`` makes predictable).

    Neither the generator nor the ledger is a hyperparameter: nothing that could replay
    the noise lands in ``hparams.yaml`` or in a checkpoint. Checkpoints hold plain data
    only and load with ``torch.load``'s default ``weights_only=True``: the weights, the
    optimizer state, the hyperparameters (with ``model_spec``, see ``LVQModule``), the
    ledger's state and ``"dp_sgd"`` (see ``EpochBudgetMixin``).
    ``DPLVQModule.load_from_checkpoint(path)`` rebuilds the module with a new ledger
    holding the checkpoint's history and budget (pass ``ledger=`` to restore into your
    own, ``model=`` for a model that ``model_spec`` cannot describe);
    ``trainer.fit(module, datamodule=dm, ckpt_path=path)`` resumes, the privacy spend
    continuing from the checkpoint's.

    Parameters
    ----------
    model : PrototypeModel, optional
        Required unless ``model_spec`` is given (see ``LVQModule``).
    ledger : PrivacyLedger, optional
        The run's ledger (default: a new one without budget).
    noise_multiplier : float
        ``sigma``: the noise std is ``sigma * max_grad_norm``.
    max_grad_norm : float
        Per-sample clipping norm ``C`` over all trainable parameters jointly.
    sampling_rate : float
        The Poisson rate ``q`` of the training loader (recorded in the ledger; checked against
        the loader before the first step).
    expected_batch_size : float
        The **public** normaliser of the noisy gradient sum (Opacus divides by
        ``q * len(dataset)``, which depends on the private ``n``). Pass a public value,
        or ``q`` times a released noisy record count (the private experiment passes
        ``q * max(sum of the DP initialisation's noisy class counts, 1)``).
    optimizer, lr : see ``LVQModule`` (``lbfgs`` is not available for DP-SGD).
    generator : torch.Generator, optional
        None (the default): fresh operating-system entropy. A generator of
        ``noise_generator`` with a ``noise_seed`` (or a caller's own, which warns
        ``PrivacyLeakWarning``) makes the noise reproducible; the ledger then records
        ``"noise": "reproducible"``. Resuming from a checkpoint re-seeds such a generator
        (see ``EpochBudgetMixin``).
    secure_mode : bool
        Noise read from ``os.urandom`` directly.
    per_record : bool, optional
        Differentiate every record alone, a batch of one
        (``dp_proto.lvq.private.per_record``), instead of Opacus' per-sample gradients
        of one batched pass. None (the default): per record exactly when the model has
        a backbone, whose batched forward rounds a record's features with the batch
        (a record near a tie or a kink can then change with the batch, which the
        sensitivity proof does not allow); a bare prototype layer runs Opacus'
        batched closed forms, which the proof covers. Per record, a record's gradient,
        its norm and its clip factor (jointly clipped) are the same bits in any batch;
        the clipped sum is formed in float64 in index order and noised as above. It
        costs one forward and backward pass per record and runs in one process: pass
        ``False`` to train a backbone data-parallel or batched (its bound is then
        measured, not proved; docs/privacy-model.md).
    """

    def __init__(
        self,
        model: PrototypeModel | None = None,
        *,
        ledger: PrivacyLedger | None = None,
        noise_multiplier: float,
        max_grad_norm: float,
        sampling_rate: float,
        expected_batch_size: float,
        optimizer: str = "sgd",
        lr: float = 0.05,
        generator: torch.Generator | None = None,
        secure_mode: bool = False,
        per_record: bool | None = None,
        **kwargs,
    ) -> None:
        if optimizer == "lbfgs":
            raise ValueError("DP-SGD needs a first-order optimizer ('sgd' or 'adam'), not 'lbfgs'")
        self.check_dp_settings(noise_multiplier, max_grad_norm, sampling_rate, generator, secure_mode)
        super().__init__(model, optimizer=optimizer, lr=lr, **kwargs)  # hparams: no ledger, no generator
        self.model.layer.to(torch.float64)  # the clipped sum's bound is proved in float64
        self.set_dp_settings(
            ledger, noise_multiplier, max_grad_norm, sampling_rate, expected_batch_size, generator, secure_mode
        )
        self.per_record = self.model.has_backbone if per_record is None else bool(per_record)
        self.private_model = self.model if self.per_record else GradSampleModule(self.model)
        self._clipping_guard: ClippingGuard | None = None
        self._per_record_noise: torch.Generator | None = None

    def forward(self, x):
        return self.private_model(x)

    def training_step(self, batch, batch_idx: int):
        # Nothing computed from the training batch is logged: a training loss or accuracy
        # would be a release about the private data that no mechanism accounts for.
        x, y = batch
        if self.per_record:
            return self._per_record_step(x, y)
        return self.model.loss(self.private_model(x), y, transfer_fn=self.transfer_fn, beta=self.beta)  # type: ignore[arg-type]

    def _per_record_step(self, x, y):
        """The noisy clipped sum of the batch's per-record gradients, over the public
        expected batch size, as the gradient of a surrogate ``sum_p <p, g_p>`` (whose
        gradient is ``g_p`` exactly), which Lightning's loop backpropagates and steps."""
        summed, _ = per_record_clipped_sum(
            self.model,
            x,
            y,
            self.max_grad_norm,
            transfer_fn=self.transfer_fn,
            beta=self.beta,
        )
        params = [p for p in self.model.parameters() if p.requires_grad]
        grads = noisy_gradients(
            summed,
            params,
            self.noise_multiplier * self.max_grad_norm,
            self.expected_batch_size,
            generator=self._per_record_noise,
            secure_mode=self.secure_mode,
        )
        surrogate = sum(((p * g).sum() for p, g in zip(params, grads, strict=True)), start=summed.new_zeros(()))
        return surrogate

    def on_train_start(self) -> None:
        super().on_train_start()
        if self.per_record and self.data_parallel() is not None:
            raise ValueError(
                "per-record DP-SGD (the default with a backbone) runs in one process; pass per_record=False to "
                "train data-parallel with Opacus' batched per-sample gradients (their bound is measured, not proved)"
            )

    def on_train_epoch_start(self) -> None:
        self.reserve_epoch_steps()

    def configure_optimizers(self):
        base = super().configure_optimizers()
        if self.per_record:  # clipping and noise in the training step; the base optimizer steps
            self._per_record_noise = noise_rng(
                self.ledger, None if self.secure_mode else self._noise_generator, self.secure_mode, None, "dp_sgd"
            )
            return base
        optimizer = DPOptimizer(
            base,
            noise_multiplier=self.noise_multiplier,
            max_grad_norm=self.max_grad_norm,
            expected_batch_size=self.expected_batch_size,
        )  # type: ignore[arg-type]
        if self._clipping_guard is None:  # the prototype layer's cancellation guard
            self._clipping_guard = ClippingGuard(self.model, loss_reduction="mean")
        return self._sound_optimizer(optimizer, self._noise_generator, "dp_sgd", norm_floors=self._clipping_guard)
