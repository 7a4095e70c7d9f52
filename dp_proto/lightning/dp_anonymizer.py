"""DP-SGD for the adversarial anonymizer (Opacus' per-sample gradients, clipping, noise).

Guarantee: the whole training transcript (encoder, regular branch *and* private branch)
is ``(epsilon, delta)``-DP for the training set under add/remove one record, so the
released encoder and regular branch are too (post-processing). Every training step of
every phase is one Poisson-subsampled Gaussian step recorded in the ledger:

* records enter a step independently with probability ``q`` (``dp_proto.privacy.PoissonDataLoader``, float64 coins);
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
  histogram charged to the ledger (``fit_dp_anonymizer``).

Only toggle training is supported: each step updates one parameter set with one loss.
Nothing computed from a training batch is logged (that would be a release outside the
ledger); validation metrics on held-out records are (they are not private).

Randomness: every noise draw and every Poisson sampling coin comes from fresh
operating-system entropy (``secure_mode``: the noise from ``os.urandom`` directly);
``seed`` governs the network's initialisation only. ``noise_seed=`` makes the run
reproducible (warns ``PrivacyLeakWarning``; the ledger
records ``"noise": "reproducible"``). The Gaussian noise is float64 Box-Muller noise
(``make_noise_sound``), not Opacus' float32 draw.

Normaliser: the noisy gradient sum is divided by a public expected batch size, never
by ``q * n`` (``n`` is private under add/remove): see ``expected_batch_size`` of
``fit_dp_anonymizer``.

Checkpoints hold plain data only and load with ``torch.load``'s default
``weights_only=True`` (see ``DPAnonymizerModule``): ``DPAnonymizerModule.load_from_checkpoint(path)``
rebuilds the networks and a ledger holding the checkpoint's history and budget, and
``trainer.fit(module, loader, ckpt_path=path)`` resumes with the privacy spend continuing
from the checkpoint's.

Result: ``fit_dp_anonymizer`` returns an ``AnonymizerFit`` like ``fit_anonymizer``,
with the run's ledger as ``fit.ledger``; ``fit.save_release(path)`` publishes the
encoder with the ledger (``dp_proto.anonymizer.release.DPAnonymizerEncoder``).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer

from dp_proto._validation import check_nonnegative, check_positive, check_unit_interval
from dp_proto.anonymizer.losses import check_labels
from dp_proto.anonymizer.training import TASK_PARTS, check_prior, dp_task_loss
from dp_proto.anonymizer.validation import as_records, check_count
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.lightning.anonymizer import AnonymizerFit, AnonymizerModule
from dp_proto.lightning.dp_module import EpochBudgetMixin
from dp_proto.lvq.private.opacus_adapter import check_expected_batch_size
from dp_proto.lvq.private.per_record import clipped_record_sum, noisy_gradients
from dp_proto.privacy.ledger import PrivacyLedger
from dp_proto.privacy.mechanisms import noise_rng

__all__ = ["DPAnonymizerModule", "AnonymizerFit", "fit_dp_anonymizer"]


class DPAnonymizerModule(EpochBudgetMixin, AnonymizerModule):
    """``AnonymizerModule`` trained by DP-SGD (see the module docstring).

    Checkpoints hold plain data only and load with ``torch.load``'s default
    ``weights_only=True``: the weights (the prior among them: a public or a released
    noisy prior, the buffer ``prior``), the optimizer states, the hyperparameters as
    plain values (with ``anonymizer_spec``, the networks' architecture; see
    ``AnonymizerModule``), ``"anonymizer_adversarial_step"``, the ledger's state
    (``"privacy_ledger"``, ``"privacy_ledger_origins"``) and ``"dp_sgd"`` (the steps
    recorded and the noise's source; see ``EpochBudgetMixin``). Neither the generator
    nor a seed is ever saved. ``DPAnonymizerModule.load_from_checkpoint(path)`` rebuilds
    the networks from ``anonymizer_spec`` and the module with a new ledger holding the
    checkpoint's history and budget (pass ``ledger=`` to restore into your own,
    ``anonymizer=`` and ``prior=`` for networks ``anonymizer_spec`` cannot describe);
    ``trainer.fit(module, loader, ckpt_path=path)`` resumes, the step count and the
    privacy spend continuing from the checkpoint's, a reproducible generator re-seeded
    from its seed and the checkpoint's step (never a replay of the first steps' noise).

    Parameters
    ----------
    anonymizer : Anonymizer, optional
        The model to train (``Anonymizer``); required unless ``anonymizer_spec`` is
        given (``load_from_checkpoint`` passes that).
    prior : Tensor (K,), optional
        Prior of the private labels: public, or a noisy histogram charged to ``ledger``
        (optional only with ``anonymizer_spec``; see ``AnonymizerModule``).
    num_regular : int
        Number of regular classes (public).
    ledger : PrivacyLedger, optional
        The run's ledger (default: a new one without budget).
        Every step is recorded before its noise is drawn; each epoch's steps are checked
        against the budget before it runs (a budget that would be exceeded stops
        training cleanly; see ``EpochBudgetMixin``).
        The ledger is kept in checkpoints and restored without counting a step twice.
    noise_multiplier : float
        ``sigma / C`` of every step.
    max_grad_norm : float
        Per-record clipping norm ``C``.
    sampling_rate : float
        The Poisson rate ``q`` of the training loader.
    expected_batch_size : float
        The public normaliser of the noisy sum (never ``q n`` of the private ``n``).
    generator : torch.Generator, optional
        None: fresh operating-system entropy. A seeded one makes the noise reproducible
        (the ledger records it). Never saved as a hyperparameter.
    secure_mode : bool, default False
        Noise from ``os.urandom``.
    per_record : bool, default True
        Differentiate every record's loss alone, a batch of one
        (``dp_proto.lvq.private.per_record.clipped_record_sum``): a record's clipped
        gradient is then the same bits in any batch, summed in float64 in index order,
        at one forward and backward pass per record. ``False``: Opacus' per-sample
        gradients of one batched pass, faster, but their rounding follows the batch (a
        record at a ReLU's kink can switch it when another record joins), so their
        bound is measured, not proved (docs/privacy-model.md).
    **kwargs
        The other parameters of ``AnonymizerModule`` (``mode="toggle"`` only).
    """

    def __init__(
        self,
        anonymizer=None,
        prior=None,
        num_regular=None,
        *,
        ledger: PrivacyLedger | None = None,
        noise_multiplier: float,
        max_grad_norm: float,
        sampling_rate: float,
        expected_batch_size: float,
        generator: torch.Generator | None = None,
        secure_mode: bool = False,
        per_record: bool = True,
        **kwargs,
    ) -> None:
        if kwargs.get("mode", "toggle") != "toggle":
            raise ValueError("DP training supports mode='toggle' only (one parameter set and one loss per step)")
        self.check_dp_settings(noise_multiplier, max_grad_norm, sampling_rate, generator, secure_mode)
        super().__init__(anonymizer, prior, num_regular, **kwargs)  # hparams: no ledger, no generator
        self.set_dp_settings(
            ledger, noise_multiplier, max_grad_norm, sampling_rate, expected_batch_size, generator, secure_mode
        )
        self.per_record = bool(per_record)
        self._per_record_noise: torch.Generator | None = None
        parts = (self.anonymizer.encoder, self.anonymizer.regular_head, self.anonymizer.private_head)
        # One GradSampleModule per part: its hooks can be switched off while the part is
        # frozen (Opacus' backward hook would otherwise look for activations it never stored).
        self._per_sample = [] if self.per_record else [GradSampleModule(part) for part in parts]

    def configure_optimizers(self):
        a = self.anonymizer
        groups = [
            {"params": list(a.encoder.parameters())},
            {"params": list(a.regular_head.parameters())},
            {"params": list(a.private_head.parameters())},
        ]
        base = self._optimizer(groups, self.lr)
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
        return self._sound_optimizer(optimizer, self._noise_generator, "dp_sgd")

    def on_train_epoch_start(self) -> None:
        self.optimizers().param_groups[0]["lr"] = self.encoder_lr_now()  # group 0: the encoder
        self.reserve_epoch_steps()

    def _train_only(self, *parts) -> None:
        if self.per_record:
            a = self.anonymizer
            for part in (a.encoder, a.regular_head, a.private_head):
                part.requires_grad_(any(part is p for p in parts))
            return
        for wrapper in self._per_sample:
            trainable = any(wrapper._module is p for p in parts)
            wrapper._module.requires_grad_(trainable)
            wrapper.enable_hooks() if trainable else wrapper.disable_hooks()

    def training_step(self, batch, batch_idx: int) -> None:
        x, y, s = batch
        task = self._task()  # the shared schedule: regular, private, then branches / encoder blocks
        self._train_only(*(getattr(self.anonymizer, part) for part in TASK_PARTS[task]))
        if self.per_record:
            self._per_record_step(task, x, y, s)
            return
        optimizer = self.optimizers()
        optimizer.zero_grad(set_to_none=True)
        if len(y) == 0:  # an empty Poisson batch still takes its step: noise only
            for p in optimizer.optimizer.params:
                p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device)
            optimizer.step()
            return
        check_labels(y, self.num_regular, "regular")
        check_labels(s, self.num_private, "private")
        self.manual_backward(dp_task_loss(self.anonymizer, task, x, y, s, self.prior, self.lam))
        optimizer.step()

    def _per_record_step(self, task: str, x, y, s) -> None:
        """One DP-SGD step of ``task`` from the records' own gradients: clipped to ``C``
        jointly over the task's parameters, summed in float64 in index order, Gaussian
        noise from the module's generator (the ``"dp_sgd"`` release), divided by the
        public expected batch size; the base optimizer steps (an empty batch: noise only)."""
        if len(y):
            check_labels(y, self.num_regular, "regular")
            check_labels(s, self.num_private, "private")
        params = [p for part in TASK_PARTS[task] for p in getattr(self.anonymizer, part).parameters()]

        def record_cost(i: int) -> torch.Tensor:
            return dp_task_loss(self.anonymizer, task, x[i : i + 1], y[i : i + 1], s[i : i + 1], self.prior, self.lam)

        summed, _ = clipped_record_sum(record_cost, len(y), params, self.max_grad_norm)
        grads = noisy_gradients(
            summed,
            params,
            self.noise_multiplier * self.max_grad_norm,
            self.expected_batch_size,
            generator=self._per_record_noise,
            secure_mode=self.secure_mode,
        )
        optimizer = self.optimizers()
        optimizer.zero_grad(set_to_none=True)
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        optimizer.step()

    def on_fit_end(self) -> None:
        self.anonymizer.requires_grad_(True)


def check_dp_fit_settings(
    *,
    epsilon: float,
    delta: float,
    sampling_rate: float | None,
    max_grad_norm: float,
    noise_multiplier: float | None,
    prior_fraction: float | None,
    num_regular: int | None,
    num_private: int | None,
) -> None:
    """The DP settings of ``fit_dp_anonymizer``, checked by name before anything runs
    (``prior_fraction=None``: a public prior, no fraction spent)."""
    from dp_proto.privacy.calibration import check_delta, check_epsilon, check_sampling_rate

    check_epsilon(epsilon)
    check_delta(delta, allow_zero=False)
    if sampling_rate is not None:
        check_sampling_rate(sampling_rate)
    check_positive("max_grad_norm", max_grad_norm)
    if noise_multiplier is not None:
        check_nonnegative("noise_multiplier", noise_multiplier)
    if prior_fraction is not None:
        check_unit_interval("prior_fraction", prior_fraction)
    for name, value in (("num_regular", num_regular), ("num_private", num_private)):
        if value is not None:
            check_count(name, value, 2)


def fit_dp_anonymizer(
    x: Any,
    regular: Any,
    private: Any,
    *,
    epsilon: float,
    delta: float,
    sampling_rate: float | None = None,
    max_grad_norm: float = 1.0,
    num_regular: int | None = None,
    num_private: int | None = None,
    prior: Any = None,
    prior_fraction: float = 0.05,
    anonymizer=None,
    lam: float = 1.0,
    adversarial_epochs: int = 20,
    pretrain_regular_epochs: int = 10,
    pretrain_private_epochs: int = 10,
    noise_multiplier: float | None = None,
    val_data=None,
    seed: int = 0,
    logger=False,
    enable_progress_bar: bool = True,
    accelerator: str = "cpu",
    secure_mode: bool = False,
    expected_batch_size: float | None = None,
    noise_seed: int | None = None,
    per_record: bool = True,
    **module_kwargs,
) -> AnonymizerFit:
    """Train an anonymizer whose whole transcript is ``(epsilon, delta)``-DP (DP-SGD,
    Abadi et al. 2016, on the procedure of Feutry, Piantanida, Bengio & Duhamel 2018).

    The private prior is ``prior`` (public) or a Laplace histogram with
    ``prior_fraction * epsilon`` (counts clamped at 1, normalised). The noise multiplier
    is calibrated by the ledger's accountant so that the prior and all ``T = epochs *
    int(1 / sampling_rate)`` steps (a ``DPSGDPlan``) compose to ``(epsilon, delta)``.

    ``seed`` governs the non-private randomness (the network's initialisation). The
    noise and the Poisson sampling coins come from fresh operating-system entropy;
    ``noise_seed`` (an int) makes them reproducible, for tests and benchmarks only: it
    warns ``PrivacyLeakWarning`` and the ledger's summary records ``"noise":
    "reproducible"``.

    Parameters
    ----------
    x : Tensor or array-like of shape (n, ...)
        The private training records (features ``(n, d)`` or images ``(n, C, H, W)``),
        used as float32; NaN and inf are refused.
    regular, private : Tensor or array-like of shape (n,)
        Integer class indices of the two labels.
    epsilon : float
        Target epsilon ``> 0`` of the whole run.
    delta : float
        Target delta in ``(0, 1)``.
    sampling_rate : float, optional
        Poisson rate ``q`` in ``(0, 1]`` of every step (default 0.05).
    max_grad_norm : float, default 1.0
        Per-record clipping norm ``C > 0``.
    num_regular, num_private : int, optional
        The public class counts (``>= 2``); left out, they are read from the labels'
        maxima with a ``PrivacyLeakWarning``.
    prior : array-like of shape (num_private,), optional
        A public prior of the private labels (then ``expected_batch_size`` is needed).
    prior_fraction : float, default 0.05
        Share of epsilon in ``(0, 1)`` spent on the noisy prior.
    anonymizer : Anonymizer, callable or None, default None
        As in ``fit_anonymizer``: the networks, a factory of new ones (called after
        seeding), or ``None`` for the default MLP / CNN.
    lam : float, default 1.0
        Weight ``>= 0`` of the per-record ``|CE_private_i - CE_random_i|``.
    adversarial_epochs, pretrain_regular_epochs, pretrain_private_epochs : int
        Epochs ``>= 0`` of each phase (default 20, 10, 10; at least one in all).
    noise_multiplier : float, optional
        Fix ``sigma / C`` (``>= 0``) instead of calibrating it (0: a noise-free check
        run, epsilon infinite).
    val_data : tuple (x, regular, private), optional
        Held-out records (not private) whose metrics are logged.
    seed : int, default 0
        Seeds the initialisation (an int in ``[0, 2**32)``).
    logger : Lightning logger or False, default False
        Where the validation metrics go (nothing computed from a training batch is logged).
    enable_progress_bar : bool, default True
        Lightning's progress bar, on stderr; ``False`` for none.
    accelerator : str, default "cpu"
        Lightning's accelerator.
    secure_mode : bool, default False
        Noise read from ``os.urandom``.
    expected_batch_size : float, optional
        The public normaliser of the noisy gradient sums. Left None, it is
        ``sampling_rate * max(n~, 1)`` with ``n~`` the total of the released Laplace
        histogram of the private labels (post-processing of a release already charged
        for the prior: free); with a public ``prior`` there is no such release, so it
        must then be given (``ValueError`` otherwise). It is never ``sampling_rate *
        len(x)``: ``len(x)`` is private under add/remove.
    noise_seed : int, optional
        Reproducible noise and coins (tests and benchmarks only; see above).
    per_record : bool, default True
        Every record's gradient formed alone (``DPAnonymizerModule``), for a clipped
        sum that does not follow the batch's rounding; one pass per record. ``False``:
        Opacus' batched per-sample gradients (faster; their bound is measured, not
        proved).
    **module_kwargs
        Passed to ``DPAnonymizerModule`` (``lr``, ``encoder_lr``, ``optimizer``,
        ``toggle_steps``...).

    Returns
    -------
    AnonymizerFit
        As ``fit_anonymizer``'s, with ``ledger`` set to the run's ``PrivacyLedger``;
        ``save_release(path)`` publishes the encoder with the ledger.

    Raises
    ------
    DataValidationError
        ``x`` is not numeric, has no record or holds NaN/inf.
    ValueError
        A setting out of range (the message names it), labels outside the public class
        counts, a public prior without ``expected_batch_size``.
    """
    import lightning as L
    from torch.utils.data import TensorDataset

    from dp_proto.anonymizer.training import training_labels
    from dp_proto.lightning.anonymizer import (
        build_anonymizer,
        check_fit_settings,
        check_module_settings,
        train_module,
    )
    from dp_proto.lightning.datamodule import poisson_seed, route_opacus_notices
    from dp_proto.privacy.dpsgd_plan import DPSGDPlan
    from dp_proto.privacy.mechanisms import noisy_histogram
    from dp_proto.privacy.randomness import fresh_generator, noise_generator, seeded_generator
    from dp_proto.privacy.sampling import PoissonDataLoader

    check_fit_settings(
        lam=lam,
        adversarial_epochs=adversarial_epochs,
        pretrain_regular_epochs=pretrain_regular_epochs,
        pretrain_private_epochs=pretrain_private_epochs,
        seed=seed,
    )
    if module_kwargs.pop("mode", "toggle") != "toggle":
        raise ValueError("DP training supports mode='toggle' only (one parameter set and one loss per step)")
    check_module_settings(module_kwargs)
    check_dp_fit_settings(
        epsilon=epsilon,
        delta=delta,
        sampling_rate=sampling_rate,
        max_grad_norm=max_grad_norm,
        noise_multiplier=noise_multiplier,
        prior_fraction=prior_fraction if prior is None else None,
        num_regular=num_regular,
        num_private=num_private,
    )
    x = as_records(x)
    regular, private = training_labels(x, regular, private)
    if num_regular is None or num_private is None:
        warnings.warn(
            "num_regular / num_private not given: the class counts are read from the private "
            "labels' maxima and the released model shows them; pass the public counts",
            PrivacyLeakWarning,
            stacklevel=2,
        )
    num_regular = int(regular.max()) + 1 if num_regular is None else int(num_regular)
    num_private = int(private.max()) + 1 if num_private is None else int(num_private)
    check_labels(regular, num_regular, "regular")
    check_labels(private, num_private, "private")
    if num_private < 2 or num_regular < 2:
        raise ValueError("both labels need at least 2 classes")
    if prior is not None:
        prior = check_prior(prior)
        if prior.numel() != num_private:
            raise ValueError(f"prior must have num_private = {num_private} entries, got {prior.numel()}")
    epochs = pretrain_regular_epochs + pretrain_private_epochs + adversarial_epochs
    plan = DPSGDPlan(
        epsilon,
        delta,
        0.05 if sampling_rate is None else sampling_rate,
        epochs,
        init_fraction=prior_fraction if prior is None else 0.0,
    )
    if expected_batch_size is not None:
        expected_batch_size = check_expected_batch_size(expected_batch_size)
    elif prior is not None:
        raise ValueError(
            "with a public prior, pass the public expected_batch_size (the normaliser of the noisy "
            "gradient sums): sampling_rate * len(x) would divide by the private record count"
        )
    if secure_mode and noise_seed is not None:
        raise ValueError("secure_mode draws the noise from os.urandom; noise_seed cannot reproduce it")
    # The networks first (seeded; a bad factory fails before any release): the noise and
    # the coins below never use torch's global generator, so the order changes nothing else.
    L.seed_everything(seed, workers=True, verbose=False)
    anonymizer = build_anonymizer(anonymizer, x, num_regular, num_private)
    # A noise-free check run (noise_multiplier=0) is recorded but has no budget to stop it.
    ledger = PrivacyLedger(default_delta=delta) if noise_multiplier == 0 else plan.new_ledger()
    generator = None if secure_mode else noise_generator(noise_seed, owner="fit_dp_anonymizer (noise_seed)")
    if prior is None:
        counts = noisy_histogram(
            private,
            num_private,
            plan.init_epsilon,
            ledger=ledger,
            name="private_prior",
            generator=generator,
            secure_mode=secure_mode,
        )
        prior = counts.clamp_min(1.0) / counts.clamp_min(1.0).sum()
        from_release = plan.expected_batch_size(float(counts.sum()))  # post-processing of a release
        if expected_batch_size is None:
            expected_batch_size = from_release
    prior = torch.as_tensor(prior, dtype=torch.float32)
    if noise_multiplier is None:
        noise_multiplier = plan.noise_multiplier(ledger.events)
    module = DPAnonymizerModule(
        anonymizer,
        prior,
        num_regular,
        ledger=ledger,
        noise_multiplier=noise_multiplier,
        max_grad_norm=max_grad_norm,
        sampling_rate=plan.sampling_rate,
        expected_batch_size=expected_batch_size,
        generator=generator,
        secure_mode=secure_mode,
        per_record=per_record,
        lam=lam,
        mode="toggle",
        pretrain_regular_epochs=pretrain_regular_epochs,
        pretrain_private_epochs=pretrain_private_epochs,
        **module_kwargs,
    )
    # Poisson coins: fresh entropy (also in secure mode, never torch's global generator),
    # or a stream of their own derived from noise_seed.
    route_opacus_notices()
    coins = fresh_generator() if noise_seed is None else seeded_generator(poisson_seed(noise_seed), warn=False)
    loader = PoissonDataLoader(TensorDataset(x, regular, private), plan.sampling_rate, generator=coins)
    fit = train_module(
        module,
        loader,
        val_data,
        max_epochs=epochs,
        accelerator=accelerator,
        logger=logger,
        enable_progress_bar=enable_progress_bar,
        use_distributed_sampler=False,
    )
    return fit._replace(ledger=ledger)
