"""LightningModule for the adversarial anonymizer: manual optimisation, three phases.

The procedure of Feutry et al. (2018, Sec. III):

1. ``pretrain_regular_epochs``: encoder and regular branch on ``CE_regular``;
2. ``pretrain_private_epochs``: encoder frozen, private branch on ``CE_private``;
3. adversarial epochs, either

   * ``mode="toggle"``: ``toggle_steps`` updates of both branches on their own
     cross-entropies (encoder fixed), then ``toggle_steps`` (or ``encoder_steps``)
     updates of the encoder on ``CE_regular + lam |CE_private - CE_random|`` (branches
     fixed), and so on, ending with a branch block; or
   * ``mode="simultaneous"``: every step updates the branches on their
     cross-entropies and the encoder on the objective at once.

The encoder has its own (lower) learning rate in phase 3; Nesterov SGD as in Feutry et al. (2018),
or Adam. Logged every step (``train/...``) and every validation epoch (``val/...``):
``ce_regular``, ``ce_private``, ``ce_random``, ``acc_regular``, ``acc_private``,
``lambda``, ``phase`` (0, 1, 2), and on validation the Fano bound estimate
``private_error_bound``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

import lightning as L
import torch
from torch import Tensor

from dp_proto.anonymizer.losses import (
    anonymizer_objective,
    check_labels,
    misclassification_lower_bound,
    private_cross_entropy,
    random_guess_cross_entropy,
    regular_cross_entropy,
)
from dp_proto.anonymizer.modules import Anonymizer

__all__ = ["AnonymizerModule", "PHASES", "EpochTimer", "AnonymizerFit", "fit_anonymizer", "evaluate_held_out",
           "fresh_probes", "restart_score"]

PHASES = ("pretrain_regular", "pretrain_private", "adversarial")
MODES = ("toggle", "simultaneous")


class AnonymizerModule(L.LightningModule):
    """Trains an :class:`~dp_proto.anonymizer.Anonymizer` (see the module docstring).

    Parameters
    ----------
    anonymizer : Anonymizer
    prior : Tensor (K,)
        Empirical prior of the private labels on the training set
        (:func:`~dp_proto.anonymizer.losses.empirical_prior`).
    num_regular : int
    lam : float
        Weight of ``|CE_private - CE_random|`` in the encoder objective (0: a plain
        classifier).
    mode : {"toggle", "simultaneous"}
    pretrain_regular_epochs, pretrain_private_epochs : int
    toggle_steps : int or None
        Length of a toggle block in steps; ``None``: one epoch of batches.
    encoder_steps : int or None
        Length of the encoder's blocks if different from the branches' (``toggle_steps``).
    final_branch_block : bool
        End the run with a branch block (default), so that the released regular branch
        fits the final encoder.
    lr : float
        Learning rate of the branches (and of the encoder while pre-training).
    encoder_lr : float
        Learning rate of the encoder in the adversarial phase.
    optimizer : {"nesterov", "adam"}
    momentum, weight_decay : float
    """

    def __init__(self, anonymizer: Anonymizer, prior: Tensor, num_regular: int, *, lam: float = 1.0,
                 mode: str = "toggle", pretrain_regular_epochs: int = 10, pretrain_private_epochs: int = 10,
                 toggle_steps: int | None = None, lr: float = 0.01, encoder_lr: float = 0.001,
                 optimizer: str = "nesterov", momentum: float = 0.9, weight_decay: float = 0.0,
                 encoder_steps: int | None = None, final_branch_block: bool = True) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if optimizer not in ("nesterov", "adam"):
            raise ValueError(f"optimizer must be 'nesterov' or 'adam', got {optimizer!r}")
        if not lam >= 0:  # also rejects NaN
            raise ValueError(f"lam must be >= 0, got {lam}")
        if optimizer == "nesterov" and not momentum > 0:
            raise ValueError(f"Nesterov SGD needs momentum > 0, got {momentum}; use optimizer='adam' or a momentum")
        if min(pretrain_regular_epochs, pretrain_private_epochs) < 0:
            raise ValueError("pre-training epochs must be >= 0")
        for name, value in (("toggle_steps", toggle_steps), ("encoder_steps", encoder_steps)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {value}")
        if not (lr > 0 and encoder_lr > 0):
            raise ValueError(f"learning rates must be > 0, got lr={lr}, encoder_lr={encoder_lr}")
        prior = torch.as_tensor(prior, dtype=torch.float32)
        if prior.dim() != 1 or prior.numel() < 2 or abs(float(prior.sum()) - 1) > 1e-4 or bool((prior < 0).any()):
            raise ValueError("prior must be a probability vector over at least 2 private classes")
        self.anonymizer = anonymizer
        self.register_buffer("prior", prior)
        self.num_regular = num_regular
        self.num_private = prior.numel()
        self.lam = float(lam)
        self.mode = mode
        self.pretrain_regular_epochs = pretrain_regular_epochs
        self.pretrain_private_epochs = pretrain_private_epochs
        self.toggle_steps = toggle_steps
        self.encoder_steps = encoder_steps
        self.final_branch_block = final_branch_block
        self.lr, self.encoder_lr = lr, encoder_lr
        self.optimizer_name, self.momentum, self.weight_decay = optimizer, momentum, weight_decay
        self.automatic_optimization = False
        self.adversarial_step = 0
        # Never hyperparameters: the networks, and a DP subclass's ledger and noise generator
        # (whose state would replay the noise from hparams.yaml or a checkpoint).
        self.save_hyperparameters(ignore=["anonymizer", "prior", "ledger", "generator", "noise_generator"])

    # -- set-up ------------------------------------------------------------------------
    def _optimizer(self, params, lr: float) -> torch.optim.Optimizer:
        if self.optimizer_name == "adam":
            return torch.optim.Adam(params, lr=lr, weight_decay=self.weight_decay)
        return torch.optim.SGD(params, lr=lr, momentum=self.momentum, nesterov=True,
                               weight_decay=self.weight_decay)

    def configure_optimizers(self):
        a = self.anonymizer
        return [self._optimizer(a.encoder.parameters(), self.lr),
                self._optimizer(a.regular_head.parameters(), self.lr),
                self._optimizer(a.private_head.parameters(), self.lr)]

    def phase(self, epoch: int | None = None) -> str:
        epoch = self.current_epoch if epoch is None else epoch
        if epoch < self.pretrain_regular_epochs:
            return PHASES[0]
        if epoch < self.pretrain_regular_epochs + self.pretrain_private_epochs:
            return PHASES[1]
        return PHASES[2]

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
        return {"ce_regular": regular_cross_entropy(regular_logits, y),
                "ce_private": private_cross_entropy(private_logits, s),
                "ce_random": random_guess_cross_entropy(private_logits, self.prior)}

    def _log(self, prefix: str, losses: dict[str, Tensor], regular_logits: Tensor, private_logits: Tensor,
             y: Tensor, s: Tensor, **kwargs) -> None:
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

    def training_step(self, batch, batch_idx: int) -> None:
        x, y, s = batch
        self._check_batch(y, s)
        enc_opt, reg_opt, priv_opt = self.optimizers()
        a = self.anonymizer
        phase = self.phase()
        if phase == PHASES[0]:
            z = a.encoder(x)
            regular_logits = a.regular_head(z)
            with torch.no_grad():
                private_logits = a.private_head(z)
            losses = self.losses(regular_logits, private_logits, y, s)
            self._step((enc_opt, reg_opt), losses["ce_regular"], self.manual_backward)
        elif phase == PHASES[1]:
            with torch.no_grad():
                z = a.encoder(x)
                regular_logits = a.regular_head(z)
            private_logits = a.private_head(z)
            losses = self.losses(regular_logits, private_logits, y, s)
            self._step((priv_opt,), losses["ce_private"], self.manual_backward)
        elif self.mode == "toggle":
            update_encoder = self._encoder_turn()
            self.adversarial_step += 1
            if update_encoder:
                regular_logits, private_logits = a(x)
                losses = self.losses(regular_logits, private_logits, y, s)
                objective = anonymizer_objective(losses["ce_regular"], losses["ce_private"],
                                                 losses["ce_random"], self.lam)
                self._step((enc_opt,), objective, self.manual_backward)
                for opt in (reg_opt, priv_opt):  # the branches' gradients of this update are discarded
                    opt.zero_grad(set_to_none=True)
            else:
                z = a.encoder(x).detach()
                regular_logits, private_logits = a.regular_head(z), a.private_head(z)
                losses = self.losses(regular_logits, private_logits, y, s)
                self._step((reg_opt, priv_opt), losses["ce_regular"] + losses["ce_private"], self.manual_backward)
        else:
            regular_logits, private_logits = a(x)
            losses = self.losses(regular_logits, private_logits, y, s)
            objective = anonymizer_objective(losses["ce_regular"], losses["ce_private"], losses["ce_random"],
                                             self.lam)
            encoder_params = list(a.encoder.parameters())
            branch_params = a.branch_parameters()
            encoder_grads = torch.autograd.grad(objective, encoder_params, retain_graph=True)
            branch_grads = torch.autograd.grad(losses["ce_regular"] + losses["ce_private"], branch_params)
            for opt in (enc_opt, reg_opt, priv_opt):
                opt.zero_grad(set_to_none=True)
            for p, g in zip([*encoder_params, *branch_params], [*encoder_grads, *branch_grads], strict=True):
                p.grad = g
            for opt in (enc_opt, reg_opt, priv_opt):
                opt.step()
        self._log("train", losses, regular_logits, private_logits, y, s, on_step=True, on_epoch=True)

    def _encoder_turn(self) -> bool:
        """Toggle schedule: ``toggle_steps`` branch updates, then ``encoder_steps``
        encoder updates (default: as many), repeated; ``None``: one epoch of batches.
        The run always ends with a full branch block, so that the released regular
        branch (and the private one) fit the final encoder."""
        per_epoch = max(int(self.trainer.num_training_batches), 1)
        branch = self.toggle_steps or per_epoch
        encoder = self.encoder_steps or branch
        adversarial_epochs = int(self.trainer.max_epochs) - self.pretrain_regular_epochs - self.pretrain_private_epochs
        if self.final_branch_block and self.adversarial_step >= adversarial_epochs * per_epoch - branch:
            return False
        return self.adversarial_step % (branch + encoder) >= branch

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
        checkpoint["anonymizer_adversarial_step"] = self.adversarial_step

    def on_load_checkpoint(self, checkpoint: dict) -> None:
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

    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning",
                 "lightning.pytorch.utilities.rank_zero", "lightning.pytorch.accelerators.cuda",
                 "lightning.fabric.utilities.seed"):
        logging.getLogger(name).setLevel(logging.ERROR)


class AnonymizerFit(NamedTuple):
    """What :func:`fit_anonymizer` returns: the trained module, its trainer and the
    training epochs' wall times by phase; with ``restarts > 1`` also every restart's
    :func:`restart_score` (``restarts``, in order) and the index of the kept one."""

    module: AnonymizerModule
    trainer: L.Trainer
    epoch_times: dict[str, list[float]]
    restarts: list[dict] | None = None
    chosen: int = 0


def _val_loader(val_data):
    """A loader over held-out ``(x, regular, private)`` or None."""
    if val_data is None:
        return None
    from torch.utils.data import DataLoader, TensorDataset

    vx, vy, vs = val_data
    return DataLoader(TensorDataset(vx, _label_tensor(vy, "regular"), _label_tensor(vs, "private")), batch_size=1024)


def _label_tensor(labels, what: str) -> Tensor:
    """Integer class indices as a long tensor; float labels are refused, not truncated."""
    labels = torch.as_tensor(labels)
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"{what} labels must be integer class indices, got dtype {labels.dtype}")
    return labels.long()


def training_labels(x: Tensor, regular, private) -> tuple[Tensor, Tensor]:
    """Both label vectors as long tensors, checked for integer dtype and equal lengths."""
    if not (len(x) == len(regular) == len(private)):
        raise ValueError(f"x, regular and private labels differ in length: {len(x)}, {len(regular)}, {len(private)}")
    return _label_tensor(regular, "regular"), _label_tensor(private, "private")


def default_anonymizer(x: Tensor, num_regular: int, num_private: int) -> Anonymizer:
    """:meth:`Anonymizer.cnn` for images ``(n, C, H, W)``, else :meth:`Anonymizer.mlp`."""
    if x.dim() == 4:
        return Anonymizer.cnn(tuple(x.shape[1:]), num_regular, num_private)
    return Anonymizer.mlp(int(x[0].numel()), num_regular, num_private)


def train_module(module: AnonymizerModule, loader, val_data, *, max_epochs: int, accelerator: str, logger,
                 enable_progress_bar: bool, **trainer_kwargs) -> AnonymizerFit:
    """Fit ``module`` with a quiet single-device Trainer that times every epoch; the
    module is returned in eval mode."""
    timer = EpochTimer()
    quiet_lightning()
    trainer = L.Trainer(max_epochs=max_epochs, accelerator=accelerator, devices=1, logger=logger,
                        enable_checkpointing=False, enable_progress_bar=enable_progress_bar,
                        enable_model_summary=False, callbacks=[timer], num_sanity_val_steps=0, **trainer_kwargs)
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


def fresh_probes(module: AnonymizerModule, x: Tensor, regular: Tensor, private: Tensor, *, folds: int = 2,
                 seed: int = 0):
    """The frozen representation ``z (n, r)`` of ``x`` and the cross-fitted fresh probes on
    it (:func:`~dp_proto.anonymizer.evaluation.fresh_attacker_accuracy`): ``(z, regular
    report, private report)``; the same probes for both labels."""
    from dp_proto.anonymizer.evaluation import encode, fresh_attacker_accuracy

    z = encode(module.anonymizer.encoder, x)
    return (z, fresh_attacker_accuracy(z, regular, folds=folds, seed=seed),
            fresh_attacker_accuracy(z, private, folds=folds, seed=seed))


def restart_score(module: AnonymizerModule, x: Tensor, regular: Tensor, private: Tensor, *, lam: float,
                  folds: int = 2, seed: int = 0) -> dict:
    """How well a trained anonymizer trades the two labels off on its own training
    records ``x (n, ...)``, as fresh probes see it: the cross-fitted accuracies of fresh
    regular classifiers (``regular_accuracy``) and of fresh attackers
    (``attacker_accuracy``; chance = the largest private class share) on the frozen
    representation (:func:`~dp_proto.anonymizer.evaluation.fresh_attacker_accuracy`),
    and ``score = regular_accuracy - lam * max(attacker_accuracy - chance, 0)``: the
    encoder objective's trade-off, in accuracies. Uses the training records only."""
    _, probe_regular, attack = fresh_probes(module, x, regular, private, folds=folds, seed=seed)
    leak = max(attack.accuracy - attack.chance, 0.0)
    return {"regular_accuracy": probe_regular.accuracy, "attacker_accuracy": attack.accuracy,
            "chance": attack.chance, "score": probe_regular.accuracy - lam * leak}


def fit_anonymizer(x: Tensor, regular: Tensor, private: Tensor, *,
                   anonymizer: Anonymizer | Callable[[], Anonymizer] | None = None,
                   lam: float = 1.0, mode: str = "toggle", adversarial_epochs: int = 20,
                   pretrain_regular_epochs: int = 10, pretrain_private_epochs: int = 10,
                   batch_size: int = 32, val_data: tuple[Tensor, Tensor, Tensor] | None = None, seed: int = 0,
                   restarts: int = 1, logger=False, enable_progress_bar: bool = False, accelerator: str = "cpu",
                   **module_kwargs) -> AnonymizerFit:
    """Train an anonymizer on ``x (n, ...)`` with regular labels ``(n,)`` and private
    labels ``(n,)`` (integer class indices; every private class must occur).

    ``anonymizer=None`` builds :meth:`Anonymizer.mlp` (flattened inputs) or, for images
    ``(n, C, H, W)``, :meth:`Anonymizer.cnn`; a callable is a factory of new, untrained
    anonymizers. ``module_kwargs`` go to :class:`AnonymizerModule` (``lr``,
    ``encoder_lr``, ``optimizer``, ``toggle_steps``...). Returns the module in eval mode
    on the CPU/GPU it trained on.

    ``restarts = k > 1`` trains ``k`` anonymizers from the seeds ``seed, seed + 1, ...``
    (so ``anonymizer`` must be ``None`` or a factory) and keeps the one with the best
    :func:`restart_score` on the training records. Adversarial training on small data
    ends in outcomes that differ from one initialisation to the next (the encoder keeps
    the private label, or drops it with or without the regular one); fresh probes on the
    training records tell them apart about as well as on held-out records. Only the
    training records are used, so held-out evaluations stay honest. A TensorBoard
    ``logger`` gets a sub-folder ``restart_<k>`` per restart.
    """
    from torch.utils.data import DataLoader, TensorDataset

    from dp_proto.anonymizer.losses import empirical_prior

    if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 1:
        raise ValueError(f"restarts must be an int >= 1, got {restarts!r}")
    if restarts > 1:
        if isinstance(anonymizer, torch.nn.Module):
            raise ValueError("restarts > 1 trains several new anonymizers: pass anonymizer=None or a factory "
                             "(a callable returning a new, untrained Anonymizer), not a module")
        kwargs = {"lam": lam, "mode": mode, "adversarial_epochs": adversarial_epochs,
                  "pretrain_regular_epochs": pretrain_regular_epochs,
                  "pretrain_private_epochs": pretrain_private_epochs, "batch_size": batch_size,
                  "val_data": val_data, "enable_progress_bar": enable_progress_bar,
                  "accelerator": accelerator, **module_kwargs}
        fits, scores = [], []
        for k in range(restarts):
            fit = fit_anonymizer(x, regular, private, anonymizer=anonymizer, seed=seed + k,
                                 logger=_restart_logger(logger, k), **kwargs)
            fits.append(fit)
            scores.append(restart_score(fit.module, x.to(fit.module.device), torch.as_tensor(regular),
                                        torch.as_tensor(private), lam=lam, seed=seed))
        best = max(range(restarts), key=lambda k: scores[k]["score"])
        return fits[best]._replace(restarts=scores, chosen=best)

    regular, private = training_labels(x, regular, private)
    num_regular = int(regular.max()) + 1 if len(regular) else 0
    num_private = int(private.max()) + 1 if len(private) else 0
    if num_private < 2 or len(torch.unique(private)) < 2:
        raise ValueError("the private label needs at least 2 classes in the training data")
    if num_regular < 2:
        raise ValueError("the regular label needs at least 2 classes in the training data")
    prior = empirical_prior(private, num_private)
    L.seed_everything(seed, workers=True, verbose=False)
    if anonymizer is None:
        anonymizer = default_anonymizer(x, num_regular, num_private)
    elif not isinstance(anonymizer, torch.nn.Module):
        anonymizer = anonymizer()
    module = AnonymizerModule(anonymizer, prior, num_regular, lam=lam, mode=mode,
                              pretrain_regular_epochs=pretrain_regular_epochs,
                              pretrain_private_epochs=pretrain_private_epochs, **module_kwargs)
    loader = DataLoader(TensorDataset(x, regular, private), batch_size=batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    return train_module(module, loader, val_data,
                        max_epochs=pretrain_regular_epochs + pretrain_private_epochs + adversarial_epochs,
                        accelerator=accelerator, logger=logger, enable_progress_bar=enable_progress_bar,
                        deterministic=True)


def evaluate_held_out(module: AnonymizerModule, x: Tensor, regular: Tensor, private: Tensor, *, folds: int = 2,
                      seed: int = 0) -> dict:
    """The honest evaluation on held-out records ``x (n, ...)``: the regular branch's
    accuracy, fresh regular classifiers' and fresh attackers' cross-fitted accuracies on
    the frozen representation (:func:`~dp_proto.anonymizer.evaluation.fresh_attacker_accuracy`),
    the jointly trained private branch's accuracy and cross-entropies, and the Fano
    estimate from that cross-entropy (``fano_error_bound``; an estimate, not a guarantee)."""
    z, fresh_regular, attack = fresh_probes(module, x, regular, private, folds=folds, seed=seed)
    with torch.no_grad():
        regular_logits = module.anonymizer.regular_head(z)
        private_logits = module.anonymizer.private_head(z)
        losses = module.losses(regular_logits, private_logits, regular, private)
    ce_private = float(losses["ce_private"])
    return {
        "regular_accuracy": float((regular_logits.argmax(1) == regular).float().mean()),
        "fresh_regular_accuracy": fresh_regular.accuracy,
        "attacker_accuracy": attack.accuracy,
        "attacker_by_model": attack.accuracies,
        "attacker_chance": attack.chance,
        "branch_private_accuracy": float((private_logits.argmax(1) == private).float().mean()),
        "ce_private": ce_private,
        "ce_random": float(losses["ce_random"]),
        "fano_error_bound": float(misclassification_lower_bound(ce_private, module.num_private)),
    }
