"""LightningModule for DP-SGD training of a prototype model (Opacus inside Lightning)."""

from __future__ import annotations

import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer

from dp_proto.exceptions import PrivacyBudgetExceededError
from dp_proto.lightning.module import LVQModule
from dp_proto.lvq.model import PrototypeModel
from dp_proto.privacy import grad_samplers  # noqa: F401  (registers the closed-form samplers)
from dp_proto.privacy.dpsgd import _sgd_event
from dp_proto.privacy.ledger import PrivacyLedger

__all__ = ["DPLVQModule", "EpochBudgetMixin"]


class EpochBudgetMixin:
    """For DP-SGD LightningModules with ``ledger``, ``noise_multiplier`` and
    ``sample_rate``: :meth:`reserve_epoch_steps` spends an epoch's steps in the ledger
    before any of them runs; a budget that would be exceeded stops training cleanly
    (``stopped_by_budget``), and the epoch's batches are skipped."""

    stopped_by_budget = False

    def reserve_epoch_steps(self) -> None:
        steps = int(self.trainer.num_training_batches)
        try:
            self.ledger.spend(_sgd_event(self.noise_multiplier, self.sample_rate, steps))
        except PrivacyBudgetExceededError:  # stop cleanly: no step of this epoch runs
            self.stopped_by_budget = True
            self.trainer.should_stop = True

    def on_train_batch_start(self, batch, batch_idx: int):
        return -1 if self.stopped_by_budget else None  # Lightning: -1 skips the rest of the epoch


class DPLVQModule(EpochBudgetMixin, LVQModule):
    """DP-SGD on the GLVQ cost: Opacus' per-sample clipping and noise, Lightning's loop.

    The training data must come from a Poisson-sampling loader
    (``ArrayDataModule(..., sampling_rate=q)`` provides one), so that every record
    enters each step independently with probability ``q``. Before every training epoch
    the module reserves the epoch's steps in ``ledger`` (a budget that would be exceeded
    stops training before any of them run). Pair it with
    :class:`~dp_proto.lightning.PrivacySpendCallback` to log epsilon and keep the
    ledger in checkpoints.

    Parameters
    ----------
    model : PrototypeModel
    ledger : PrivacyLedger
    noise_multiplier : float
        ``sigma``: the noise std is ``sigma * max_grad_norm``.
    max_grad_norm : float
        Per-sample clipping norm ``C`` over all trainable parameters jointly.
    sample_rate : float
        The Poisson rate of the training loader (recorded in the ledger).
    expected_batch_size : int
        ``q n``: Opacus divides the noisy sum by it.
    optimizer, lr : see :class:`LVQModule` (``lbfgs`` is not available for DP-SGD).
    noise_generator : torch.Generator, optional
    secure_mode : bool
    """

    def __init__(
        self,
        model: PrototypeModel,
        *,
        ledger: PrivacyLedger,
        noise_multiplier: float,
        max_grad_norm: float,
        sample_rate: float,
        expected_batch_size: int,
        optimizer: str = "sgd",
        lr: float = 0.05,
        noise_generator: torch.Generator | None = None,
        secure_mode: bool = False,
        **kwargs,
    ) -> None:
        if optimizer == "lbfgs":
            raise ValueError("DP-SGD needs a first-order optimizer ('sgd' or 'adam'), not 'lbfgs'")
        super().__init__(model, optimizer=optimizer, lr=lr, **kwargs)
        self.ledger = ledger
        self.noise_multiplier = noise_multiplier
        self.max_grad_norm = max_grad_norm
        self.sample_rate = sample_rate
        self.expected_batch_size = expected_batch_size
        self.noise_generator = noise_generator
        self.secure_mode = secure_mode
        self.stopped_by_budget = False
        self.private_model = GradSampleModule(model)

    def forward(self, x):
        return self.private_model(x)

    def training_step(self, batch, batch_idx: int):
        # Nothing computed from the training batch is logged: a training loss or accuracy
        # would be a release about the private data that no mechanism accounts for.
        x, y = batch
        return self.model.loss(self.private_model(x), y, transfer_fn=self.transfer_fn, beta=self.beta)  # type: ignore[arg-type]

    def on_train_epoch_start(self) -> None:
        self.reserve_epoch_steps()

    def configure_optimizers(self):
        base = super().configure_optimizers()
        return DPOptimizer(
            base, noise_multiplier=self.noise_multiplier, max_grad_norm=self.max_grad_norm,
            expected_batch_size=self.expected_batch_size, generator=self.noise_generator,
            secure_mode=self.secure_mode,
        )
