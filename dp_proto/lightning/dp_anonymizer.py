"""DP-SGD for the adversarial anonymizer (Opacus' per-sample gradients, clipping, noise).

Guarantee: the whole training transcript (encoder, regular branch *and* private branch)
is ``(epsilon, delta)``-DP for the training set under add/remove one record, so the
released encoder and regular branch are too (post-processing). Every training step of
every phase is one Poisson-subsampled Gaussian step recorded in the ledger:

* records enter a step independently with probability ``q`` (Opacus' ``DPDataLoader``);
* the per-sample gradients (Opacus' ``GradSampleModule``) of the parameters updated in
  that step, and only those, are clipped jointly to ``C`` and get ``N(0, (sigma C)^2)``
  noise: frozen parameters are neither read through their gradients nor noised, so the
  parameters that touch the private training data in a step are the ones charged;
* the private branch is trained on the private data as well, and it shapes the
  encoder's updates, so its steps are DP steps too (they are counted);
* the encoder objective is taken per record, ``CE_regular_i + lam |CE_private_i -
  CE_random_i|`` (the batch-level absolute value of the non-private version is not a
  sum over records, so its per-record gradient is undefined);
* the private labels' prior (for ``CE_random``) is public or released by a Laplace
  histogram charged to the ledger (:func:`fit_dp_anonymizer`).

Only toggle training is supported: each step updates one parameter set with one loss.
Nothing computed from a training batch is logged (that would be a release outside the
ledger); validation metrics on held-out records are.
"""

from __future__ import annotations

import warnings

import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer
from torch import Tensor

from dp_proto.anonymizer.losses import check_labels
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.lightning.anonymizer import PHASES, AnonymizerModule
from dp_proto.lightning.dp_module import EpochBudgetMixin
from dp_proto.privacy.ledger import PrivacyLedger

__all__ = ["DPAnonymizerModule", "per_record_objective"]


def per_record_objective(regular_logits: Tensor, private_logits: Tensor, y: Tensor, s: Tensor, prior: Tensor,
                         lam: float) -> Tensor:
    """Mean over records of ``CE_regular_i + lam |CE_private_i - CE_random_i|``."""
    import torch.nn.functional as F

    ce_regular = F.cross_entropy(regular_logits, y, reduction="none")
    log_q = F.log_softmax(private_logits, dim=-1)
    ce_private = -log_q.gather(1, s[:, None]).squeeze(1)
    ce_random = -(log_q * prior.to(log_q)).sum(-1)
    return (ce_regular + lam * (ce_private - ce_random).abs()).mean()


class DPAnonymizerModule(EpochBudgetMixin, AnonymizerModule):
    """:class:`AnonymizerModule` trained by DP-SGD (see the module docstring).

    Parameters (besides those of :class:`AnonymizerModule`)
    ----------
    ledger : PrivacyLedger
        Receives one subsampled-Gaussian event per epoch's steps (reserved before the
        epoch runs; a budget that would be exceeded stops training cleanly).
    noise_multiplier : float; max_grad_norm : float
    sample_rate : float
        The Poisson rate ``q`` of the training loader.
    expected_batch_size : float
        ``q n``: the noisy sum is divided by it.
    """

    def __init__(self, anonymizer, prior, num_regular, *, ledger: PrivacyLedger, noise_multiplier: float,
                 max_grad_norm: float, sample_rate: float, expected_batch_size: float,
                 noise_generator: torch.Generator | None = None, secure_mode: bool = False, **kwargs) -> None:
        if kwargs.get("mode", "toggle") != "toggle":
            raise ValueError("DP training supports mode='toggle' only (one parameter set and one loss per step)")
        if noise_multiplier < 0 or not max_grad_norm > 0 or not 0 < sample_rate <= 1:
            raise ValueError(f"need noise_multiplier >= 0, max_grad_norm > 0 and 0 < sample_rate <= 1, got "
                             f"{noise_multiplier}, {max_grad_norm}, {sample_rate}")
        super().__init__(anonymizer, prior, num_regular, **kwargs)
        self.ledger = ledger
        self.noise_multiplier = noise_multiplier
        self.max_grad_norm = max_grad_norm
        self.sample_rate = sample_rate
        self.expected_batch_size = expected_batch_size
        self.noise_generator = noise_generator
        self.secure_mode = secure_mode
        # One GradSampleModule per part: its hooks can be switched off while the part is
        # frozen (Opacus' backward hook would otherwise look for activations it never stored).
        self._per_sample = [GradSampleModule(part) for part in
                            (self.anonymizer.encoder, self.anonymizer.regular_head, self.anonymizer.private_head)]

    def configure_optimizers(self):
        a = self.anonymizer
        groups = [{"params": list(a.encoder.parameters())}, {"params": list(a.regular_head.parameters())},
                  {"params": list(a.private_head.parameters())}]
        base = self._optimizer(groups, self.lr)
        return DPOptimizer(base, noise_multiplier=self.noise_multiplier, max_grad_norm=self.max_grad_norm,
                           expected_batch_size=max(int(round(self.expected_batch_size)), 1),
                           generator=self.noise_generator, secure_mode=self.secure_mode)

    def on_train_epoch_start(self) -> None:
        self.optimizers().param_groups[0]["lr"] = self.encoder_lr_now()  # group 0: the encoder
        self.reserve_epoch_steps()

    def _train_only(self, *parts) -> None:
        for wrapper in self._per_sample:
            trainable = any(wrapper._module is p for p in parts)
            wrapper._module.requires_grad_(trainable)
            wrapper.enable_hooks() if trainable else wrapper.disable_hooks()

    def training_step(self, batch, batch_idx: int) -> None:
        x, y, s = batch
        a = self.anonymizer
        phase = self.phase()
        if phase == PHASES[0]:
            task = "regular"
            self._train_only(a.encoder, a.regular_head)
        elif phase == PHASES[1]:
            task = "private"
            self._train_only(a.private_head)
        else:
            task = "encoder" if self._encoder_turn() else "branches"
            self.adversarial_step += 1
            self._train_only(a.encoder) if task == "encoder" else self._train_only(a.regular_head, a.private_head)
        optimizer = self.optimizers()
        optimizer.zero_grad(set_to_none=True)
        if len(y) == 0:  # an empty Poisson batch still takes its step: noise only
            for p in optimizer.optimizer.params:
                p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device)
            optimizer.step()
            return
        check_labels(y, self.num_regular, "regular")
        check_labels(s, self.num_private, "private")
        cross_entropy = torch.nn.functional.cross_entropy
        if task == "regular":
            loss = cross_entropy(a.regular_head(a.encoder(x)), y)
        elif task == "encoder":
            z = a.encoder(x)
            loss = per_record_objective(a.regular_head(z), a.private_head(z), y, s, self.prior, self.lam)
        else:
            with torch.no_grad():
                z = a.encoder(x)
            loss = cross_entropy(a.private_head(z), s)
            if task == "branches":
                loss = loss + cross_entropy(a.regular_head(z), y)
        self.manual_backward(loss)
        optimizer.step()

    def on_fit_end(self) -> None:
        self.anonymizer.requires_grad_(True)


def fit_dp_anonymizer(x: Tensor, regular: Tensor, private: Tensor, *, epsilon: float, delta: float,
                      sample_rate: float = 0.05, max_grad_norm: float = 1.0, num_regular: int | None = None,
                      num_private: int | None = None, prior: Tensor | None = None, prior_fraction: float = 0.05,
                      anonymizer=None, lam: float = 1.0, adversarial_epochs: int = 20,
                      pretrain_regular_epochs: int = 10, pretrain_private_epochs: int = 10,
                      noise_multiplier: float | None = None, val_data=None, seed: int = 0, logger=False,
                      enable_progress_bar: bool = False, accelerator: str = "cpu", secure_mode: bool = False,
                      **module_kwargs):
    """Train an anonymizer whose whole transcript is ``(epsilon, delta)``-DP.

    ``num_regular`` / ``num_private`` are public (default: from the labels' maxima, with a
    :class:`~dp_proto.exceptions.PrivacyLeakWarning`). The private prior is ``prior`` (public) or a Laplace
    histogram with ``prior_fraction * epsilon`` (counts clamped at 1, normalised). The
    noise multiplier is calibrated by the ledger's accountant so that the prior and all
    ``T = epochs * int(1 / sample_rate)`` steps compose to ``(epsilon, delta)``; pass
    ``noise_multiplier`` to fix it instead (0: a noise-free check run, epsilon infinite).
    Returns ``(AnonymizerFit, ledger)``.
    """
    import lightning as L
    from opacus.data_loader import DPDataLoader
    from torch.utils.data import TensorDataset

    from dp_proto.lightning.anonymizer import default_anonymizer, train_module, training_labels
    from dp_proto.privacy.dpsgd import calibrate_noise_multiplier
    from dp_proto.privacy.mechanisms import noisy_histogram

    regular, private = training_labels(x, regular, private)
    if num_regular is None or num_private is None:
        warnings.warn("num_regular / num_private not given: the class counts are read from the private "
                      "labels' maxima and the released model shows them; pass the public counts",
                      PrivacyLeakWarning, stacklevel=2)
    num_regular = int(regular.max()) + 1 if num_regular is None else num_regular
    num_private = int(private.max()) + 1 if num_private is None else num_private
    check_labels(regular, num_regular, "regular")
    check_labels(private, num_private, "private")
    if num_private < 2 or num_regular < 2:
        raise ValueError("both labels need at least 2 classes")
    # A noise-free check run (noise_multiplier=0) is recorded but has no budget to stop it.
    ledger = PrivacyLedger(budget=None if noise_multiplier == 0 else (epsilon, delta), default_delta=delta)
    generator = None if secure_mode else torch.Generator().manual_seed(seed)
    if prior is None:
        if not 0 < prior_fraction < 1:
            raise ValueError(f"prior_fraction must lie in (0, 1), got {prior_fraction}")
        counts = noisy_histogram(private, num_private, prior_fraction * epsilon, ledger=ledger, name="private_prior",
                                 generator=generator, secure=secure_mode)
        prior = counts.clamp_min(1.0) / counts.clamp_min(1.0).sum()
    prior = torch.as_tensor(prior, dtype=torch.float32)
    epochs = pretrain_regular_epochs + pretrain_private_epochs + adversarial_epochs
    steps_per_epoch = int(1 / sample_rate)
    if noise_multiplier is None:
        noise_multiplier = calibrate_noise_multiplier(epsilon, delta, sample_rate, epochs * steps_per_epoch,
                                                      prior_events=ledger.events)
    L.seed_everything(seed, workers=True, verbose=False)
    anonymizer = anonymizer if anonymizer is not None else default_anonymizer(x, num_regular, num_private)
    module = DPAnonymizerModule(
        anonymizer, prior, num_regular, ledger=ledger, noise_multiplier=noise_multiplier,
        max_grad_norm=max_grad_norm, sample_rate=sample_rate, expected_batch_size=sample_rate * len(x),
        noise_generator=generator, secure_mode=secure_mode, lam=lam, mode="toggle",
        pretrain_regular_epochs=pretrain_regular_epochs, pretrain_private_epochs=pretrain_private_epochs,
        **module_kwargs)
    loader = DPDataLoader(TensorDataset(x, regular, private), sample_rate=sample_rate, generator=generator)
    fit = train_module(module, loader, val_data, max_epochs=epochs, accelerator=accelerator, logger=logger,
                       enable_progress_bar=enable_progress_bar, use_distributed_sampler=False)
    return fit, ledger
