"""LightningModule for the adversarial anonymizer: manual optimisation, three phases.

An adapter: the procedure (phases, toggle or simultaneous updates, which parts each step
trains on which loss) is ``dp_proto.anonymizer.training`` (Feutry et al. 2018,
Sec. III); this module runs it with Lightning's optimisers, logging and checkpoints, and
``fit_anonymizer`` drives a Trainer (with restarts chosen by
``restart_score``).

The encoder has its own (lower) learning rate in phase 3; Nesterov SGD as in Feutry et al. (2018),
or Adam. Logged every step (``train/...``) and every validation epoch (``val/...``):
``ce_regular``, ``ce_private``, ``ce_random``, ``acc_regular``, ``acc_private``,
``lambda``, ``phase`` (0, 1, 2), and on validation the Fano bound estimate
``private_error_bound``.

``fit_anonymizer`` checks its inputs as the estimators do (records as tensors or numpy
arrays, NaN and inf refused; rates, learning rates and epoch counts range-checked by
name), shows Lightning's progress bar on stderr unless ``enable_progress_bar=False``,
and returns an ``AnonymizerFit``, whose ``save_release(path)`` publishes the trained
encoder (``dp_proto.anonymizer.release``).
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import lightning as L
import torch
from torch import Tensor, nn

from dp_proto._validation import check_nonnegative, check_positive, check_unit_interval
from dp_proto.anonymizer import evaluation
from dp_proto.anonymizer.losses import (
    check_labels,
    misclassification_lower_bound,
)
from dp_proto.anonymizer.modules import Anonymizer, MLPHead
from dp_proto.anonymizer.training import (
    PHASES,
    TASK_PARTS,
    AnonymizerSchedule,
    anonymizer_losses,
    check_optimizer,
    check_prior,
    default_anonymizer,
    make_optimizer,
    task_logits,
    task_loss,
    training_labels,
)
from dp_proto.anonymizer.validation import as_records, check_anonymizer, check_count, check_seed
from dp_proto.lightning.callbacks import StderrProgressBar
from dp_proto.lightning.module import plain_hparams

if TYPE_CHECKING:
    from dp_proto.anonymizer.release import AnonymizerEncoder
    from dp_proto.privacy.ledger import PrivacyLedger
    from dp_proto.release import Release

__all__ = [
    "AnonymizerModule",
    "describe_anonymizer",
    "anonymizer_from_spec",
    "PHASES",
    "EpochTimer",
    "AnonymizerFit",
    "StderrProgressBar",
    "fit_anonymizer",
    "evaluate_held_out",
    "fresh_probes",
    "restart_score",
]


# Arguments of AnonymizerModule and its DP subclass that are never hyperparameters: the
# networks, the prior (a buffer of the state_dict), a DP subclass's ledger and noise generator
# (whose state would replay the noise).
_NOT_HPARAMS = ("anonymizer", "prior", "ledger", "generator")
_HEAD_KEYS = ("regular_head", "private_head")


def _same_structure(a: nn.Module, b: nn.Module) -> bool:
    """Same module classes, dropout rates and parameter (buffer) names and shapes."""
    kinds_a = [(type(m), getattr(m, "p", None)) for m in a.modules()]
    if kinds_a != [(type(m), getattr(m, "p", None)) for m in b.modules()]:
        return False
    shapes_a = {k: tuple(v.shape) for k, v in a.state_dict().items()}
    return shapes_a == {k: tuple(v.shape) for k, v in b.state_dict().items()}


def _describe_head(head: nn.Module) -> dict[str, Any] | None:
    """``MLPHead``'s constructor arguments, read from its layers (None for another class)."""
    if type(head) is not MLPHead:
        return None
    linears = [m for m in head.net if isinstance(m, nn.Linear)]
    dropouts = [float(m.p) for m in head.net if isinstance(m, nn.Dropout)]
    if not linears:
        return None
    return {
        "in_features": int(linears[0].in_features),
        "num_classes": int(head.num_classes),
        "hidden": [int(m.out_features) for m in linears[:-1]],
        "dropout": dropouts[0] if dropouts else 0.0,
    }


def describe_anonymizer(anonymizer: nn.Module) -> dict[str, Any] | None:
    """A plain-data description of ``anonymizer``'s architecture (no weights), from which
    ``anonymizer_from_spec`` builds an equal network to load a ``state_dict`` into.

    Parameters
    ----------
    anonymizer : Anonymizer
        Exactly an ``Anonymizer`` with a built-in encoder (``MLPEncoder`` or
        ``ConvEncoder``) and ``MLPHead`` branches, all parameters of one floating dtype.

    Returns
    -------
    dict or None
        ``{"encoder": {"encoder": class name, **architecture()}, "regular_head": {...},
        "private_head": {...}, "dtype": "float32"}`` (the encoder entry is the release
        format's, ``dp_proto.anonymizer.release.describe_encoder``; a branch's entry is
        ``MLPHead``'s arguments); None for any other network.
    """
    from dp_proto.anonymizer.release import describe_encoder

    if type(anonymizer) is not Anonymizer:
        return None
    encoder = describe_encoder(anonymizer.encoder)
    heads = {key: _describe_head(getattr(anonymizer, key)) for key in _HEAD_KEYS}
    dtypes = {p.dtype for p in anonymizer.parameters()}
    if encoder is None or None in heads.values() or len(dtypes) != 1:
        return None
    spec = {"encoder": encoder, **heads, "dtype": str(dtypes.pop()).removeprefix("torch.")}
    try:  # the check copy: no memory, and torch's global generator left as it was
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            rebuilt = anonymizer_from_spec(spec)
    except ValueError:
        return None
    return spec if _same_structure(rebuilt, anonymizer) else None


def anonymizer_from_spec(spec: Mapping[str, Any]) -> Anonymizer:
    """A new ``Anonymizer`` of the architecture ``spec`` describes (``describe_anonymizer``);
    its weights are placeholders, to be replaced by a ``state_dict``. Only built-in encoders
    and ``MLPHead`` branches are built; ``ValueError`` for anything else."""
    from dp_proto.anonymizer.release import encoder_from_architecture

    if not isinstance(spec, Mapping) or "encoder" not in spec or any(key not in spec for key in _HEAD_KEYS):
        raise ValueError(f"an anonymizer spec needs 'encoder', 'regular_head' and 'private_head', got {spec!r}")
    dtype = getattr(torch, str(spec.get("dtype", "float32")), None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"unknown dtype {spec.get('dtype')!r} in the anonymizer spec")
    encoder = encoder_from_architecture(spec["encoder"])
    heads = []
    for key in _HEAD_KEYS:
        head = dict(spec[key])
        try:
            heads.append(
                MLPHead(
                    int(head.pop("in_features")),
                    int(head.pop("num_classes")),
                    hidden=[int(h) for h in head.pop("hidden", (64,))],
                    dropout=float(head.pop("dropout", 0.0)),
                )
            )
        except (KeyError, TypeError) as err:
            raise ValueError(f"the anonymizer spec's {key} {spec[key]!r} does not build an MLPHead: {err}") from err
        if head:
            raise ValueError(f"unknown arguments {sorted(head)} of the {key} in the anonymizer spec")
    return Anonymizer(encoder, *heads).to(dtype)


class AnonymizerModule(L.LightningModule):
    """Trains an ``Anonymizer`` (see the module docstring).

    Checkpoints hold plain data only (they load with ``torch.load``'s default
    ``weights_only=True``): the weights (the prior among them, as the buffer ``prior``),
    the optimizer states, the step count of the adversarial phase
    (``"anonymizer_adversarial_step"``) and the hyperparameters as plain values, among
    them ``anonymizer_spec``, the networks' architecture (``describe_anonymizer``), so
    that ``AnonymizerModule.load_from_checkpoint(path)`` rebuilds them by itself (pass
    ``anonymizer=`` and ``prior=`` for networks that ``anonymizer_spec`` cannot
    describe). The networks and the prior are never hyperparameters.

    Parameters
    ----------
    anonymizer : Anonymizer, optional
        The model to train; required unless ``anonymizer_spec`` is given.
    prior : Tensor (K,), optional
        Empirical prior of the private labels on the training set
        (``empirical_prior``); required unless ``anonymizer_spec`` is given (then a
        uniform placeholder over the private branch's classes, which loading a
        checkpoint's ``state_dict`` replaces by the checkpoint's prior).
    num_regular : int
        Number of regular classes.
    lam : float, default 1.0
        Weight of ``|CE_private - CE_random|`` in the encoder objective (0: a plain
        classifier).
    mode : {"toggle", "simultaneous"}, default "toggle"
        Toggle between branch and encoder blocks (Feutry et al. 2018), or update all
        parts at every step.
    pretrain_regular_epochs : int, default 10
        Epochs of pre-training the encoder and the regular branch.
    pretrain_private_epochs : int, default 10
        Epochs of pre-training the private branch on the frozen encoder.
    toggle_steps : int or None, default None
        Length of a toggle block in steps; ``None``: one epoch of batches.
    lr : float, default 0.01
        Learning rate of the branches (and of the encoder while pre-training).
    encoder_lr : float, default 0.001
        Learning rate of the encoder in the adversarial phase.
    optimizer : {"nesterov", "adam"}, default "nesterov"
        Nesterov SGD (with ``momentum``) or Adam.
    momentum : float, default 0.9
        Momentum of Nesterov SGD.
    weight_decay : float, default 0.0
        Weight decay of every optimizer.
    encoder_steps : int or None, default None
        Length of the encoder's blocks if different from the branches' (``toggle_steps``).
    final_branch_block : bool, default True
        End the run with a branch block, so that the released regular branch fits the
        final encoder.
    anonymizer_spec : dict, optional
        The architecture (``describe_anonymizer``; ``load_from_checkpoint`` passes the
        checkpoint's). Without ``anonymizer``, the networks are built from it
        (``anonymizer_from_spec``).

    References
    ----------
    Feutry, Piantanida, Bengio & Duhamel (2018). Learning anonymized representations
    with adversarial neural networks. arXiv:1802.09386.
    """

    def __init__(
        self,
        anonymizer: Anonymizer | None = None,
        prior: Tensor | None = None,
        num_regular: int | None = None,
        *,
        lam: float = 1.0,
        mode: str = "toggle",
        pretrain_regular_epochs: int = 10,
        pretrain_private_epochs: int = 10,
        toggle_steps: int | None = None,
        lr: float = 0.01,
        encoder_lr: float = 0.001,
        optimizer: str = "nesterov",
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        encoder_steps: int | None = None,
        final_branch_block: bool = True,
        anonymizer_spec: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if anonymizer is None:
            if anonymizer_spec is None:
                raise TypeError(f"{type(self).__name__} needs an anonymizer (or the anonymizer_spec of a checkpoint)")
            anonymizer = anonymizer_from_spec(anonymizer_spec)
        if prior is None:
            if anonymizer_spec is None:
                raise TypeError(f"{type(self).__name__} needs the private labels' prior")
            k = int((anonymizer_spec.get("private_head") or {}).get("num_classes", 0))
            if k < 2:
                raise ValueError(f"the anonymizer_spec {anonymizer_spec!r} names no private branch's class count")
            prior = torch.full((k,), 1.0 / k)  # a placeholder: the checkpoint's state_dict holds the prior
        lam = check_nonnegative("lam", lam)
        check_optimizer(optimizer, momentum)
        lr, encoder_lr = check_positive("lr", lr), check_positive("encoder_lr", encoder_lr)
        momentum = check_unit_interval("momentum", momentum, low="[", high=")")
        weight_decay = check_nonnegative("weight_decay", weight_decay)
        check_count("num_regular", num_regular, 2)
        self.schedule = AnonymizerSchedule(
            pretrain_regular_epochs, pretrain_private_epochs, mode, toggle_steps, encoder_steps, final_branch_block
        )
        prior = check_prior(prior)
        self.anonymizer = anonymizer
        self.register_buffer("prior", prior)
        self.num_regular = num_regular
        self.num_private = prior.numel()
        self.lam = float(lam)
        self.lr, self.encoder_lr = lr, encoder_lr
        self.optimizer_name, self.momentum, self.weight_decay = optimizer, momentum, weight_decay
        self.automatic_optimization = False
        self.adversarial_step = 0
        # Never hyperparameters: the networks, the prior, and a DP subclass's ledger and noise
        # generator (whose state would replay the noise from hparams.yaml or a checkpoint).
        self.save_hyperparameters(ignore=list(_NOT_HPARAMS))
        # Saved again as plain data (a NumPy float would make torch.load(weights_only=True)
        # refuse the checkpoint), with the architecture in place of the networks.
        self.save_hyperparameters({**plain_hparams(self.hparams), "anonymizer_spec": describe_anonymizer(anonymizer)})

    # The schedule's settings, read from the one schedule (never a second copy).
    mode = property(lambda self: self.schedule.mode)
    pretrain_regular_epochs = property(lambda self: self.schedule.pretrain_regular_epochs)
    pretrain_private_epochs = property(lambda self: self.schedule.pretrain_private_epochs)
    toggle_steps = property(lambda self: self.schedule.toggle_steps)
    encoder_steps = property(lambda self: self.schedule.encoder_steps)
    final_branch_block = property(lambda self: self.schedule.final_branch_block)

    # -- set-up ------------------------------------------------------------------------
    def _optimizer(self, params, lr: float) -> torch.optim.Optimizer:
        return make_optimizer(params, self.optimizer_name, lr, self.momentum, self.weight_decay)

    def configure_optimizers(self):
        a = self.anonymizer
        return [
            self._optimizer(a.encoder.parameters(), self.lr),
            self._optimizer(a.regular_head.parameters(), self.lr),
            self._optimizer(a.private_head.parameters(), self.lr),
        ]

    def phase(self, epoch: int | None = None) -> str:
        return self.schedule.phase(self.current_epoch if epoch is None else epoch)

    def encoder_lr_now(self) -> float:
        """The encoder's learning rate in the current phase: ``lr`` while pre-training
        with the regular branch, ``encoder_lr`` afterwards."""
        return self.lr if self.phase() == PHASES[0] else self.encoder_lr

    def on_train_epoch_start(self) -> None:
        for group in self.optimizers()[0].param_groups:
            group["lr"] = self.encoder_lr_now()

    # -- losses ------------------------------------------------------------------------
    def _check_batch(self, y: Tensor, s: Tensor) -> None:
        if y.shape != s.shape:
            raise ValueError(f"regular and private labels differ in length: {tuple(y.shape)} vs {tuple(s.shape)}")
        check_labels(y, self.num_regular, "regular")
        check_labels(s, self.num_private, "private")

    def losses(self, regular_logits: Tensor, private_logits: Tensor, y: Tensor, s: Tensor) -> dict[str, Tensor]:
        return anonymizer_losses(regular_logits, private_logits, y, s, self.prior)

    def _log(
        self,
        prefix: str,
        losses: dict[str, Tensor],
        regular_logits: Tensor,
        private_logits: Tensor,
        y: Tensor,
        s: Tensor,
        **kwargs,
    ) -> None:
        values = {f"{prefix}/{k}": v.detach() for k, v in losses.items()}
        values[f"{prefix}/acc_regular"] = (regular_logits.argmax(-1) == y).float().mean()
        values[f"{prefix}/acc_private"] = (private_logits.argmax(-1) == s).float().mean()
        values[f"{prefix}/lambda"] = torch.tensor(self.lam)
        values[f"{prefix}/phase"] = torch.tensor(float(PHASES.index(self.phase())))
        self.log_dict(values, batch_size=len(y), **kwargs)

    # -- updates -----------------------------------------------------------------------
    @staticmethod
    def _step(optimizers, loss: Tensor, manual_backward) -> None:
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        manual_backward(loss)
        for opt in optimizers:
            opt.step()

    def _task(self) -> str:
        """This step's task (``AnonymizerSchedule.task``); counts adversarial steps."""
        task = self.schedule.task(
            self.current_epoch, self.adversarial_step, self.trainer.num_training_batches, self.trainer.max_epochs
        )
        if task in ("encoder", "branches"):  # toggle blocks are counted in adversarial steps
            self.adversarial_step += 1
        return task

    def training_step(self, batch, batch_idx: int) -> None:
        x, y, s = batch
        self._check_batch(y, s)
        enc_opt, reg_opt, priv_opt = self.optimizers()
        optimizers = {"encoder": enc_opt, "regular_head": reg_opt, "private_head": priv_opt}
        task = self._task()
        regular_logits, private_logits = task_logits(self.anonymizer, task, x)
        losses = self.losses(regular_logits, private_logits, y, s)
        if task == "simultaneous":  # the encoder on the objective, the branches on their losses, at once
            objective = task_loss("encoder", losses, self.lam)
            encoder_params = list(self.anonymizer.encoder.parameters())
            branch_params = self.anonymizer.branch_parameters()
            encoder_grads = torch.autograd.grad(objective, encoder_params, retain_graph=True)
            branch_grads = torch.autograd.grad(task_loss("branches", losses, self.lam), branch_params)
            for opt in optimizers.values():
                opt.zero_grad(set_to_none=True)
            for p, g in zip([*encoder_params, *branch_params], [*encoder_grads, *branch_grads], strict=True):
                p.grad = g
            for opt in optimizers.values():
                opt.step()
        else:
            self._step(
                [optimizers[part] for part in TASK_PARTS[task]], task_loss(task, losses, self.lam), self.manual_backward
            )
            if task == "encoder":  # the branches' gradients of this update are discarded
                for opt in (reg_opt, priv_opt):
                    opt.zero_grad(set_to_none=True)
        self._log("train", losses, regular_logits, private_logits, y, s, on_step=True, on_epoch=True)

    # -- evaluation --------------------------------------------------------------------
    def _evaluate(self, batch, prefix: str) -> None:
        x, y, s = batch
        self._check_batch(y, s)
        regular_logits, private_logits = self.anonymizer(x)
        losses = self.losses(regular_logits, private_logits, y, s)
        self._log(prefix, losses, regular_logits, private_logits, y, s, on_epoch=True)
        self._ce_private_sum += float(losses["ce_private"]) * len(y)
        self._ce_private_count += len(y)

    def _log_bound(self, prefix: str) -> None:
        """Fano bound from the epoch's mean private cross-entropy (eq. 11, 14)."""
        if self._ce_private_count:
            ce = self._ce_private_sum / self._ce_private_count
            self.log(f"{prefix}/private_error_bound", float(misclassification_lower_bound(ce, self.num_private)))
        self._ce_private_sum, self._ce_private_count = 0.0, 0

    _ce_private_sum, _ce_private_count = 0.0, 0

    def validation_step(self, batch, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def on_validation_epoch_end(self) -> None:
        self._log_bound("val")

    def test_step(self, batch, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def on_test_epoch_end(self) -> None:
        self._log_bound("test")

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["anonymizer_adversarial_step"] = int(self.adversarial_step)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        self.adversarial_step = int(checkpoint.get("anonymizer_adversarial_step", 0))


class EpochTimer(L.Callback):
    """Wall time of every training epoch with its phase: ``times[phase] = [s, ...]``."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {}
        self._start = 0.0

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        phase = pl_module.phase() if isinstance(pl_module, AnonymizerModule) else "train"
        self.times.setdefault(phase, []).append(time.perf_counter() - self._start)


def quiet_lightning() -> None:
    """Silence Lightning's start-up notices (accelerator, tips, seeds) for scripted runs."""
    import logging

    for name in (
        "lightning",
        "lightning.pytorch",
        "lightning.fabric",
        "pytorch_lightning",
        "lightning.pytorch.utilities.rank_zero",
        "lightning.pytorch.accelerators.cuda",
        "lightning.fabric.utilities.seed",
    ):
        logging.getLogger(name).setLevel(logging.ERROR)


class AnonymizerFit(NamedTuple):
    """What ``fit_anonymizer`` and ``fit_dp_anonymizer`` return.

    Publish the trained encoder with ``save_release(path)`` (``to_encoder`` for the
    encoder itself, ``to_release`` for the release in memory); see
    ``dp_proto.anonymizer.release`` for what is released and what is left out.

    Attributes
    ----------
    module : AnonymizerModule
        The trained module (``DPAnonymizerModule`` for a DP run), in eval mode.
    trainer : L.Trainer
        Its trainer.
    epoch_times : dict str -> list of float
        Wall time in seconds of every training epoch, by phase.
    restarts : list of dict or None
        With ``restarts > 1``: every restart's ``restart_score``, in order.
    chosen : int
        The index of the kept restart (0 without restarts).
    ledger : PrivacyLedger or None
        The ledger of a DP run (``fit_dp_anonymizer``); None otherwise.
    """

    module: AnonymizerModule
    trainer: L.Trainer
    epoch_times: dict[str, list[float]]
    restarts: list[dict] | None = None
    chosen: int = 0
    ledger: PrivacyLedger | None = None

    def _ledger(self) -> PrivacyLedger | None:
        return self.ledger if self.ledger is not None else getattr(self.module, "ledger", None)

    def to_encoder(self) -> AnonymizerEncoder:
        """The trained encoder as a releasable ``AnonymizerEncoder`` (a
        ``DPAnonymizerEncoder`` with the ledger for a DP run): a CPU copy in eval mode,
        with the public training settings. Only ``MLPEncoder`` and ``ConvEncoder`` are
        released (``TypeError`` for another encoder)."""
        from dp_proto.anonymizer.release import AnonymizerEncoder, DPAnonymizerEncoder

        module: Any = self.module  # AnonymizerModule, or DPAnonymizerModule for a DP run
        ledger = self._ledger()
        settings: dict[str, Any] = {
            "trainer": "fit_anonymizer" if ledger is None else "fit_dp_anonymizer",
            "lam": float(module.lam),
            "mode": module.mode,
            "max_epochs": int(self.trainer.max_epochs or 0),
            "pretrain_regular_epochs": int(module.pretrain_regular_epochs),
            "pretrain_private_epochs": int(module.pretrain_private_epochs),
            "toggle_steps": module.toggle_steps,
            "encoder_steps": module.encoder_steps,
            "final_branch_block": bool(module.final_branch_block),
            "optimizer": module.optimizer_name,
            "lr": float(module.lr),
            "encoder_lr": float(module.encoder_lr),
            "momentum": float(module.momentum),
            "weight_decay": float(module.weight_decay),
            "restarts": len(self.restarts) if self.restarts else 1,
        }
        fitted: dict[str, Any] = {"epochs_": int(self.trainer.current_epoch)}
        encoder = module.anonymizer.encoder
        if ledger is None:
            return AnonymizerEncoder(encoder, settings=settings, fitted=fitted)
        settings.update(
            max_grad_norm=float(module.max_grad_norm),
            sampling_rate=float(module.sampling_rate),
            secure_mode=bool(module.secure_mode),
        )
        fitted.update(
            noise_multiplier_=float(module.noise_multiplier),
            expected_batch_size_=float(module.expected_batch_size),
            stopped_by_budget_=bool(module.stopped_by_budget),
        )
        return DPAnonymizerEncoder(encoder, ledger=ledger, settings=settings, fitted=fitted)

    def to_release(self) -> Release:
        """The trained encoder in the release format, in memory (``to_encoder().to_release()``)."""
        return self.to_encoder().to_release()

    def save_release(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Publish the trained encoder to the directory ``path`` (``to_encoder().save_release``):
        its weights, architecture, input shape, training settings and, for a DP run, the
        ledger; the branches, the prior, the trainer, timings and seeds are left out. An
        existing release there is kept (``FileExistsError``) unless ``overwrite``."""
        return self.to_encoder().save_release(path, overwrite=overwrite)


def _val_loader(val_data):
    """A loader over held-out ``(x, regular, private)`` or None (checked like the training data)."""
    if val_data is None:
        return None
    from torch.utils.data import DataLoader, TensorDataset

    if not isinstance(val_data, (tuple, list)) or len(val_data) != 3:
        raise ValueError("val_data must be a tuple (x, regular, private) of held-out records and their labels")
    vx = as_records(val_data[0], "val_data x")
    vy, vs = training_labels(vx, val_data[1], val_data[2])
    return DataLoader(TensorDataset(vx, vy, vs), batch_size=1024)


def check_fit_settings(
    *,
    lam: float,
    adversarial_epochs: int,
    pretrain_regular_epochs: int,
    pretrain_private_epochs: int,
    seed: int,
    batch_size: int | None = None,
) -> None:
    """The settings ``fit_anonymizer`` and ``fit_dp_anonymizer`` share, checked by name
    before anything is built (``ValueError``)."""
    check_nonnegative("lam", lam)
    epochs = [
        check_count(name, value, 0)
        for name, value in (
            ("pretrain_regular_epochs", pretrain_regular_epochs),
            ("pretrain_private_epochs", pretrain_private_epochs),
            ("adversarial_epochs", adversarial_epochs),
        )
    ]
    if sum(epochs) < 1:
        raise ValueError(
            "the run has no epoch: pretrain_regular_epochs + pretrain_private_epochs + adversarial_epochs must be >= 1"
        )
    check_seed(seed)
    if batch_size is not None:
        check_count("batch_size", batch_size, 1)


def check_module_settings(module_kwargs: dict[str, Any]) -> None:
    """The ``AnonymizerModule`` settings among ``module_kwargs``, checked by name before
    any data is read (the module checks them again when it is built); ``TypeError`` for a
    name the module does not take."""
    taken_by_fit = {"self", "anonymizer", "prior", "num_regular", "anonymizer_spec", "lam"}
    taken_by_fit |= {"pretrain_regular_epochs", "pretrain_private_epochs"}  # the fit functions' own settings
    known = set(inspect.signature(AnonymizerModule.__init__).parameters) - taken_by_fit
    unknown = sorted(set(module_kwargs) - known)
    if unknown:
        raise TypeError(f"unknown AnonymizerModule setting(s) {unknown}; it takes {sorted(known)}")
    for name in ("lr", "encoder_lr"):
        if name in module_kwargs:
            check_positive(name, module_kwargs[name])
    momentum = module_kwargs.get("momentum", 0.9)
    check_optimizer(module_kwargs.get("optimizer", "nesterov"), momentum)
    check_unit_interval("momentum", momentum, low="[", high=")")
    if "weight_decay" in module_kwargs:
        check_nonnegative("weight_decay", module_kwargs["weight_decay"])
    AnonymizerSchedule(
        mode=module_kwargs.get("mode", "toggle"),
        toggle_steps=module_kwargs.get("toggle_steps"),
        encoder_steps=module_kwargs.get("encoder_steps"),
    )


def train_module(
    module: AnonymizerModule,
    loader,
    val_data,
    *,
    max_epochs: int,
    accelerator: str,
    logger,
    enable_progress_bar: bool,
    **trainer_kwargs,
) -> AnonymizerFit:
    """Fit ``module`` with a quiet single-device Trainer that times every epoch; the
    module is returned in eval mode."""
    timer = EpochTimer()
    quiet_lightning()
    callbacks: list[L.Callback] = [timer]
    if enable_progress_bar:
        callbacks.append(StderrProgressBar())
    trainer = L.Trainer(
        max_epochs=max_epochs,
        accelerator=accelerator,
        devices=1,
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=bool(enable_progress_bar),
        enable_model_summary=False,
        callbacks=callbacks,
        num_sanity_val_steps=0,
        **trainer_kwargs,
    )
    trainer.fit(module, loader, _val_loader(val_data))
    module.eval()
    return AnonymizerFit(module, trainer, timer.times)


def _restart_logger(logger, k: int):
    """A TensorBoard logger's run gets one sub-folder per restart (``restart_<k>``), so that
    the restarts' curves do not overwrite each other; other loggers are shared."""
    from lightning.pytorch.loggers import TensorBoardLogger

    if isinstance(logger, TensorBoardLogger):
        return TensorBoardLogger(logger.save_dir, name=logger.name, version=logger.version, sub_dir=f"restart_{k}")
    return logger


def fresh_probes(
    module: AnonymizerModule, x: Tensor, regular: Tensor, private: Tensor, *, folds: int = 2, seed: int = 0
):
    """``dp_proto.anonymizer.evaluation.fresh_probes`` of a trained module's anonymizer."""
    return evaluation.fresh_probes(module.anonymizer, x, regular, private, folds=folds, seed=seed)


def restart_score(
    module: AnonymizerModule, x: Tensor, regular: Tensor, private: Tensor, *, lam: float, folds: int = 2, seed: int = 0
) -> dict:
    """``dp_proto.anonymizer.evaluation.restart_score`` of a trained module's anonymizer."""
    return evaluation.restart_score(module.anonymizer, x, regular, private, lam=lam, folds=folds, seed=seed)


def fit_anonymizer(
    x: Any,
    regular: Any,
    private: Any,
    *,
    anonymizer: Anonymizer | Callable[[], Anonymizer] | None = None,
    lam: float = 1.0,
    mode: str = "toggle",
    adversarial_epochs: int = 20,
    pretrain_regular_epochs: int = 10,
    pretrain_private_epochs: int = 10,
    batch_size: int = 32,
    val_data: tuple[Any, Any, Any] | None = None,
    seed: int = 0,
    restarts: int = 1,
    logger=False,
    enable_progress_bar: bool = True,
    accelerator: str = "cpu",
    **module_kwargs,
) -> AnonymizerFit:
    """Train an anonymizer (Feutry, Piantanida, Bengio & Duhamel 2018).

    ``restarts = k > 1`` trains ``k`` anonymizers from the seeds ``seed, seed + 1, ...``
    (so ``anonymizer`` must be ``None`` or a factory) and keeps the one with the best
    ``restart_score`` on the training records. Adversarial training on small data
    ends in outcomes that differ from one initialisation to the next (the encoder keeps
    the private label, or drops it with or without the regular one); fresh probes on the
    training records tell them apart about as well as on held-out records. Only the
    training records are used, so held-out evaluations stay honest. A TensorBoard
    ``logger`` gets a sub-folder ``restart_<k>`` per restart.

    Parameters
    ----------
    x : Tensor or array-like of shape (n, ...)
        The training records: features ``(n, d)`` or images ``(n, C, H, W)``; a numpy
        array or a tensor, used as float32. NaN and inf are refused.
    regular, private : Tensor or array-like of shape (n,)
        Integer class indices ``0..K-1`` of the regular and the private label (every
        private class must occur).
    anonymizer : Anonymizer, callable or None, default None
        The networks: ``None`` builds ``Anonymizer.mlp`` (flattened inputs) or, for
        images ``(n, C, H, W)``, ``Anonymizer.cnn``; a callable is a factory of new,
        untrained anonymizers (called after seeding).
    lam : float, default 1.0
        Weight ``>= 0`` of ``|CE_private - CE_random|`` in the encoder objective.
    mode : {"toggle", "simultaneous"}, default "toggle"
        The adversarial phase's updates (``AnonymizerSchedule``).
    adversarial_epochs, pretrain_regular_epochs, pretrain_private_epochs : int
        Epochs ``>= 0`` of each phase (default 20, 10, 10; at least one in all).
    batch_size : int, default 32
        Records per step.
    val_data : tuple (x, regular, private), optional
        Held-out records and labels, checked like the training data; their metrics are
        logged every epoch.
    seed : int, default 0
        Seeds the initialisation and the shuffling (an int in ``[0, 2**32)``).
    restarts : int, default 1
        See above.
    logger : Lightning logger or False, default False
        Where the metrics go.
    enable_progress_bar : bool, default True
        Lightning's progress bar, on stderr; ``False`` for none.
    accelerator : str, default "cpu"
        Lightning's accelerator.
    **module_kwargs
        Passed to ``AnonymizerModule`` (``lr``, ``encoder_lr``, ``optimizer``,
        ``momentum``, ``weight_decay``, ``toggle_steps``, ``encoder_steps``...).

    Returns
    -------
    AnonymizerFit
        The module in eval mode on the CPU/GPU it trained on, its trainer, the epoch
        times; ``save_release(path)`` publishes the encoder.

    Raises
    ------
    DataValidationError
        ``x`` is not numeric, has no record or holds NaN/inf.
    ValueError
        A setting out of range (the message names it), labels that are not integer
        class indices or differ in length, a label with fewer than 2 classes.
    """
    from torch.utils.data import DataLoader, TensorDataset

    from dp_proto.anonymizer.losses import empirical_prior

    if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 1:
        raise ValueError(f"restarts must be an int >= 1, got {restarts!r}")
    check_fit_settings(
        lam=lam,
        adversarial_epochs=adversarial_epochs,
        pretrain_regular_epochs=pretrain_regular_epochs,
        pretrain_private_epochs=pretrain_private_epochs,
        seed=seed,
        batch_size=batch_size,
    )
    check_module_settings({"mode": mode, **module_kwargs})
    x = as_records(x)
    regular, private = training_labels(x, regular, private)
    if restarts > 1:
        if isinstance(anonymizer, torch.nn.Module):
            raise ValueError(
                "restarts > 1 trains several new anonymizers: pass anonymizer=None or a factory "
                "(a callable returning a new, untrained Anonymizer), not a module"
            )
        kwargs = {
            "lam": lam,
            "mode": mode,
            "adversarial_epochs": adversarial_epochs,
            "pretrain_regular_epochs": pretrain_regular_epochs,
            "pretrain_private_epochs": pretrain_private_epochs,
            "batch_size": batch_size,
            "val_data": val_data,
            "enable_progress_bar": enable_progress_bar,
            "accelerator": accelerator,
            **module_kwargs,
        }
        fits, scores = [], []
        for k in range(restarts):
            fit = fit_anonymizer(
                x, regular, private, anonymizer=anonymizer, seed=seed + k, logger=_restart_logger(logger, k), **kwargs
            )
            fits.append(fit)
            scores.append(
                restart_score(
                    fit.module,
                    x.to(fit.module.device),
                    regular,
                    private,
                    lam=lam,
                    seed=seed,
                )
            )
        best = max(range(restarts), key=lambda k: scores[k]["score"])
        return fits[best]._replace(restarts=scores, chosen=best)

    num_regular = int(regular.max()) + 1 if len(regular) else 0
    num_private = int(private.max()) + 1 if len(private) else 0
    if num_private < 2 or len(torch.unique(private)) < 2:
        raise ValueError("the private label needs at least 2 classes in the training data")
    if num_regular < 2:
        raise ValueError("the regular label needs at least 2 classes in the training data")
    prior = empirical_prior(private, num_private)
    L.seed_everything(seed, workers=True, verbose=False)
    anonymizer = build_anonymizer(anonymizer, x, num_regular, num_private)
    module = AnonymizerModule(
        anonymizer,
        prior,
        num_regular,
        lam=lam,
        mode=mode,
        pretrain_regular_epochs=pretrain_regular_epochs,
        pretrain_private_epochs=pretrain_private_epochs,
        **module_kwargs,
    )
    loader = DataLoader(
        TensorDataset(x, regular, private),
        batch_size=batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
    )
    return train_module(
        module,
        loader,
        val_data,
        max_epochs=pretrain_regular_epochs + pretrain_private_epochs + adversarial_epochs,
        accelerator=accelerator,
        logger=logger,
        enable_progress_bar=enable_progress_bar,
        deterministic=True,
    )


def build_anonymizer(anonymizer, x: Tensor, num_regular: int, num_private: int) -> Anonymizer:
    """The networks of a fit: ``default_anonymizer`` for ``None``, the module as given,
    or a factory's new one (checked to be an ``Anonymizer``)."""
    if anonymizer is None:
        return default_anonymizer(x, num_regular, num_private)
    if isinstance(anonymizer, torch.nn.Module):
        return check_anonymizer(anonymizer, "anonymizer")
    if not callable(anonymizer):
        raise TypeError(f"anonymizer must be an Anonymizer, a factory of one or None, got {type(anonymizer).__name__}")
    return check_anonymizer(anonymizer(), "the anonymizer factory's result")


def evaluate_held_out(
    module: AnonymizerModule, x: Tensor, regular: Tensor, private: Tensor, *, folds: int = 2, seed: int = 0
) -> dict:
    """``dp_proto.anonymizer.evaluation.evaluate_held_out`` of a trained module (its
    anonymizer and the prior it trained with) on held-out records ``x (n, ...)``."""
    return evaluation.evaluate_held_out(module.anonymizer, module.prior, x, regular, private, folds=folds, seed=seed)
