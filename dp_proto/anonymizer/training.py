"""The anonymizer's training procedure, free of any training framework.

Feutry et al. (2018, Sec. III) train in three phases:

1. ``pretrain_regular`` epochs: encoder and regular branch on ``CE_regular``;
2. ``pretrain_private`` epochs: encoder frozen, private branch on ``CE_private``;
3. ``adversarial`` epochs, either

   * ``mode="toggle"``: blocks of ``toggle_steps`` updates of both branches on their
     own cross-entropies (encoder fixed), then ``encoder_steps`` (default: as many)
     updates of the encoder on ``CE_regular + lam |CE_private - CE_random|`` (branches
     fixed), and so on, ending with a branch block; or
   * ``mode="simultaneous"``: every step updates the branches on their cross-entropies
     and the encoder on the objective at once.

Every step is one *task*: which parameters it trains on which loss
(``TASK_PARTS``). ``AnonymizerSchedule`` says which task a step is;
``task_logits`` runs the forward pass with a graph through the trained parts only;
``task_loss`` (batch objective) and ``dp_task_loss`` (mean of per-record losses,
for DP-SGD) give its loss. The Lightning modules of ``dp_proto.lightning.anonymizer``
and ``dp_proto.lightning.dp_anonymizer`` drive these with their optimizers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from dp_proto.anonymizer.losses import (
    anonymizer_objective,
    per_record_objective,
    private_cross_entropy,
    random_guess_cross_entropy,
    regular_cross_entropy,
)
from dp_proto.anonymizer.modules import Anonymizer
from dp_proto.anonymizer.validation import check_count

__all__ = [
    "PHASES",
    "MODES",
    "TASK_PARTS",
    "AnonymizerSchedule",
    "task_logits",
    "task_loss",
    "dp_task_loss",
    "anonymizer_losses",
    "check_optimizer",
    "make_optimizer",
    "check_prior",
    "label_tensor",
    "training_labels",
    "default_anonymizer",
]

PHASES = ("pretrain_regular", "pretrain_private", "adversarial")
MODES = ("toggle", "simultaneous")
#: The parts each task trains: ``regular`` (phase 1), ``private`` (phase 2), and in the
#: adversarial phase ``encoder`` and ``branches`` (toggle) or ``simultaneous``.
TASK_PARTS: dict[str, tuple[str, ...]] = {
    "regular": ("encoder", "regular_head"),
    "private": ("private_head",),
    "encoder": ("encoder",),
    "branches": ("regular_head", "private_head"),
    "simultaneous": ("encoder", "regular_head", "private_head"),
}


def _check_steps(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name} must be an int >= 1 or None, got {value!r}")


@dataclass(frozen=True)
class AnonymizerSchedule:
    """Which task each step of a run is (see the module docstring).

    ``toggle_steps=None``: a toggle block is one epoch of batches; ``encoder_steps=None``:
    the encoder's blocks are as long as the branches'. ``final_branch_block``: end the run
    with a full branch block, so that the released regular branch (and the private one)
    fit the final encoder.
    """

    pretrain_regular_epochs: int = 10
    pretrain_private_epochs: int = 10
    mode: str = "toggle"
    toggle_steps: int | None = None
    encoder_steps: int | None = None
    final_branch_block: bool = True

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        check_count("pretrain_regular_epochs", self.pretrain_regular_epochs, 0)
        check_count("pretrain_private_epochs", self.pretrain_private_epochs, 0)
        _check_steps("toggle_steps", self.toggle_steps)
        _check_steps("encoder_steps", self.encoder_steps)

    @property
    def pretrain_epochs(self) -> int:
        return self.pretrain_regular_epochs + self.pretrain_private_epochs

    def phase(self, epoch: int) -> str:
        if epoch < self.pretrain_regular_epochs:
            return PHASES[0]
        if epoch < self.pretrain_epochs:
            return PHASES[1]
        return PHASES[2]

    def encoder_turn(self, adversarial_step: int, steps_per_epoch: int, max_epochs: int) -> bool:
        """Whether adversarial step ``adversarial_step`` (0-based) of a toggle run updates
        the encoder: ``toggle_steps`` branch updates, then ``encoder_steps`` encoder
        updates, repeated, the last block a branch block."""
        per_epoch = max(int(steps_per_epoch), 1)
        branch = self.toggle_steps or per_epoch
        encoder = self.encoder_steps or branch
        adversarial_epochs = int(max_epochs) - self.pretrain_epochs
        if self.final_branch_block and adversarial_step >= adversarial_epochs * per_epoch - branch:
            return False
        return adversarial_step % (branch + encoder) >= branch

    def task(self, epoch: int, adversarial_step: int, steps_per_epoch: int, max_epochs: int) -> str:
        """The task of a step in ``epoch`` (``adversarial_step``: adversarial steps so far)."""
        phase = self.phase(epoch)
        if phase == PHASES[0]:
            return "regular"
        if phase == PHASES[1]:
            return "private"
        if self.mode == "simultaneous":
            return "simultaneous"
        return "encoder" if self.encoder_turn(adversarial_step, steps_per_epoch, max_epochs) else "branches"


def task_logits(anonymizer: Anonymizer, task: str, x: Tensor) -> tuple[Tensor, Tensor]:
    """``(regular_logits (n, K_r), private_logits (n, K_p))`` of ``x``, with a graph only
    through the parts ``task`` trains (the other outputs are computed without one)."""
    a = anonymizer
    if task in ("encoder", "simultaneous"):
        return a(x)
    if task == "regular":
        z = a.encoder(x)
        with torch.no_grad():
            private_logits = a.private_head(z)
        return a.regular_head(z), private_logits
    if task not in TASK_PARTS:
        raise ValueError(f"unknown task {task!r}; expected one of {tuple(TASK_PARTS)}")
    with torch.no_grad():
        z = a.encoder(x)
    if task == "private":
        with torch.no_grad():
            regular_logits = a.regular_head(z)
        return regular_logits, a.private_head(z)
    return a.regular_head(z), a.private_head(z)  # branches


def anonymizer_losses(
    regular_logits: Tensor, private_logits: Tensor, y: Tensor, s: Tensor, prior: Tensor
) -> dict[str, Tensor]:
    """The batch's ``ce_regular``, ``ce_private`` and ``ce_random`` (scalars)."""
    return {
        "ce_regular": regular_cross_entropy(regular_logits, y),
        "ce_private": private_cross_entropy(private_logits, s),
        "ce_random": random_guess_cross_entropy(private_logits, prior),
    }


def task_loss(task: str, losses: dict[str, Tensor], lam: float) -> Tensor:
    """The loss ``task`` minimises over its parts (non-private training; for
    ``simultaneous`` the branches' loss, the encoder's being ``anonymizer_objective``)."""
    if task == "regular":
        return losses["ce_regular"]
    if task == "private":
        return losses["ce_private"]
    if task == "encoder":
        return anonymizer_objective(losses["ce_regular"], losses["ce_private"], losses["ce_random"], lam)
    return losses["ce_regular"] + losses["ce_private"]


def dp_task_loss(
    anonymizer: Anonymizer, task: str, x: Tensor, y: Tensor, s: Tensor, prior: Tensor, lam: float
) -> Tensor:
    """The mean of per-record losses of ``task`` on the batch ``x``, as DP-SGD needs them
    (its per-sample gradients are those of each record's own loss): the encoder's
    objective is taken per record (``per_record_objective``).
    Only the outputs the loss needs are computed."""
    a = anonymizer
    if task == "regular":
        return regular_cross_entropy(a.regular_head(a.encoder(x)), y)
    if task == "encoder":
        z = a.encoder(x)
        return per_record_objective(a.regular_head(z), a.private_head(z), y, s, prior, lam)
    if task not in ("private", "branches"):
        raise ValueError(f"DP training has no task {task!r} (one parameter set and one loss per step)")
    with torch.no_grad():
        z = a.encoder(x)
    loss = private_cross_entropy(a.private_head(z), s)
    return loss + regular_cross_entropy(a.regular_head(z), y) if task == "branches" else loss


def check_optimizer(name: str, momentum: float) -> None:
    """``name`` is ``"nesterov"`` (with ``momentum > 0``) or ``"adam"``."""
    if name not in ("nesterov", "adam"):
        raise ValueError(f"optimizer must be 'nesterov' or 'adam', got {name!r}")
    if name == "nesterov" and not momentum > 0:
        raise ValueError(f"Nesterov SGD needs momentum > 0, got {momentum}; use optimizer='adam' or a momentum")


def make_optimizer(
    params, name: str, lr: float, momentum: float = 0.9, weight_decay: float = 0.0
) -> torch.optim.Optimizer:
    """Nesterov SGD (Feutry et al. 2018) or Adam over ``params``."""
    check_optimizer(name, momentum)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    return torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=True, weight_decay=weight_decay)


def check_prior(prior) -> Tensor:
    """The private labels' prior as a float32 probability vector ``(K_p,)``, ``K_p >= 2``."""
    prior = torch.as_tensor(prior, dtype=torch.float32)
    if prior.dim() != 1 or prior.numel() < 2 or abs(float(prior.sum()) - 1) > 1e-4 or bool((prior < 0).any()):
        raise ValueError("prior must be a probability vector over at least 2 private classes")
    return prior


def label_tensor(labels, what: str) -> Tensor:
    """Integer class indices as a long tensor; float labels are refused, not truncated."""
    labels = torch.as_tensor(labels)
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"{what} labels must be integer class indices, got dtype {labels.dtype}")
    return labels.long()


def training_labels(x: Tensor, regular, private) -> tuple[Tensor, Tensor]:
    """Both label vectors as long tensors, checked for integer dtype and equal lengths."""
    if not (len(x) == len(regular) == len(private)):
        raise ValueError(f"x, regular and private labels differ in length: {len(x)}, {len(regular)}, {len(private)}")
    return label_tensor(regular, "regular"), label_tensor(private, "private")


def default_anonymizer(x: Tensor, num_regular: int, num_private: int) -> Anonymizer:
    """``Anonymizer.cnn`` for images ``(n, C, H, W)``, else ``Anonymizer.mlp``."""
    if x.dim() == 4:
        return Anonymizer.cnn(tuple(x.shape[1:]), num_regular, num_private)
    return Anonymizer.mlp(int(x[0].numel()), num_regular, num_private)
