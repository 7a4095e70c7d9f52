"""Lightning callbacks: the privacy spend in TensorBoard, the ledger in checkpoints, and
progress bars on stderr (``StderrProgressBar``).

Resuming and the ledger
-----------------------
A checkpoint carries the ledger's ``state_dict`` (``"privacy_ledger"``) and, under
``"privacy_ledger_origins"``, which ledger recorded which releases: every ledger gets an
identity the first time it is saved or restored here, and a checkpoint lists, per
identity, the releases that ledger recorded itself or took over from checkpoints of
others. Restoring a checkpoint (``restore_ledger``) adds only the releases the
ledger does not hold yet, so each release counts exactly once:

* resuming in the same process with the same ledger (``trainer.fit(..., ckpt_path=...)``)
  adds nothing: the ledger recorded the checkpoint's steps when they ran (before, the
  checkpoint's events were added a second time, and epsilon doubled silently);
* a new ledger (a new process) takes over the checkpoint's history, before any release
  it makes itself;
* restoring twice (the module and ``PrivacySpendCallback`` both restore), or a
  checkpoint of a run that was itself resumed, adds nothing twice.

Every step that ran counts, including the steps of a run that went on after the
checkpoint it is resumed from: those noisy updates were computed, and whoever saw them
learnt from them.
"""

from __future__ import annotations

import hashlib
import math
import sys
import uuid
import weakref
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

from dp_proto.privacy.ledger import PrivacyEvent, PrivacyLedger

__all__ = ["PrivacySpendCallback", "StderrProgressBar", "save_ledger", "restore_ledger", "ledger_text", "PRIVACY_SCOPE"]

#: What the guarantee of a private Lightning run covers (printed and logged with it).
PRIVACY_SCOPE = (
    "the (epsilon, delta) guarantee covers the training split only; the split (drawn on all records "
    "and labels) and the validation/test metrics (computed on held-out records) are not private"
)

# ledger -> {"id": its identity, "absorbed": {identity: {mechanism: count}}} of the
# releases it took over from checkpoints of other ledgers
_ORIGINS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _mechanism(event: PrivacyEvent | dict) -> PrivacyEvent:
    """The event's mechanism: the event itself with ``count`` 1 (a hashable key)."""
    if isinstance(event, dict):
        event = PrivacyEvent.from_dict({**event, "count": 1})
    return event.with_count(1)


def _tally(events) -> dict[PrivacyEvent, int]:
    out: dict[PrivacyEvent, int] = {}
    for event in events:
        count = event["count"] if isinstance(event, dict) else event.count
        key = _mechanism(event)
        out[key] = out.get(key, 0) + int(count)
    return out


def _origins(ledger: PrivacyLedger) -> dict[str, Any]:
    record = _ORIGINS.get(ledger)
    if record is None:
        record = {"id": uuid.uuid4().hex, "absorbed": {}}
        _ORIGINS[ledger] = record
    return record


def _encode(tally: dict[PrivacyEvent, int]) -> list:
    return [
        [{k: v for k, v in key.to_dict().items() if k != "count"}, count] for key, count in tally.items() if count > 0
    ]


def _decode(items: list) -> dict[PrivacyEvent, int]:
    return {_mechanism(mechanism): int(count) for mechanism, count in items}


def save_ledger(checkpoint: dict[str, Any], ledger: PrivacyLedger) -> None:
    """Write ``ledger`` into ``checkpoint``: its ``state_dict`` under ``"privacy_ledger"``
    and the releases per recording ledger under ``"privacy_ledger_origins"``."""
    record = _origins(ledger)
    own = _tally(ledger.events)
    for taken in record["absorbed"].values():
        for key, count in taken.items():
            own[key] = max(own.get(key, 0) - count, 0)
    checkpoint["privacy_ledger"] = ledger.state_dict()
    checkpoint["privacy_ledger_origins"] = {
        record["id"]: _encode(own),
        **{oid: _encode(taken) for oid, taken in record["absorbed"].items()},
    }


def restore_ledger(checkpoint: dict[str, Any], ledger: PrivacyLedger) -> int:
    """Add the releases of ``checkpoint`` that ``ledger`` does not hold yet (see the
    module docstring); returns how many releases (steps) were added.

    Raises ``RuntimeError`` for a checkpoint without a ledger: resuming from it would
    reset the privacy spend."""
    state = checkpoint.get("privacy_ledger")
    if state is None:
        raise RuntimeError("the checkpoint holds no privacy ledger; resuming would reset the privacy spend")
    origins = checkpoint.get("privacy_ledger_origins")
    if origins is None:  # a checkpoint of an older version: one origin, named by its content
        digest = hashlib.sha256(repr(state["events"]).encode()).hexdigest()[:16]
        origins = {f"legacy-{digest}": _encode(_tally(state["events"]))}
    record = _origins(ledger)
    new: dict[PrivacyEvent, int] = {}
    for oid, items in origins.items():
        if oid == record["id"]:  # this ledger wrote it: it recorded those releases itself
            continue
        have = record["absorbed"].setdefault(oid, {})
        for key, count in _decode(items).items():
            if count > have.get(key, 0):
                new[key] = new.get(key, 0) + count - have.get(key, 0)
                have[key] = count
    for source in state.get("noise_sources", ()):
        ledger.note_noise_source(source)
    if not new:
        return 0
    # the new releases as events, in the checkpoint's order (composition is commutative)
    order = [*dict.fromkeys(_mechanism(e) for e in state["events"]), *new]
    events = [key.with_count(new[key]).to_dict() for key in dict.fromkeys(order) if new.get(key, 0) > 0]
    # Releases made in this process before resuming (if any) are kept after the
    # checkpoint's history: both happened, both count. A budget given to this ledger
    # stays (the checkpoint's applies to a ledger without one).
    budget = ledger.budget
    ledger.load_state_dict({**state, "events": events}, keep_current=True)
    if budget is not None:
        ledger.budget = budget
    return sum(new.values())


def ledger_text(ledger: PrivacyLedger, scope: str | None = None) -> str:
    """The ledger (and what its guarantee covers) as a markdown code block, the
    ``privacy/ledger`` text of a run's TensorBoard logs."""
    lines = str(ledger).splitlines()
    if scope:
        lines.append(f"scope: {scope}")
    return "\n".join("    " + line for line in lines)


class PrivacySpendCallback(L.Callback):
    """Logs the run's privacy spend and keeps the ledger in checkpoints.

    * after every training epoch: ``privacy/epsilon`` (at ``delta``), ``privacy/delta``
      and, with a budget, ``privacy/budget_epsilon`` and ``privacy/remaining_epsilon``;
    * at the end of fitting: the ledger's events as text (TensorBoard's Text tab), with
      ``scope`` (what the guarantee covers) when given;
    * in every checkpoint: the ledger (``save_ledger``); loading a checkpoint adds
      the releases the ledger does not hold yet (``restore_ledger``), so resuming
      never resets the spend and never counts a step twice.

    Parameters
    ----------
    ledger : PrivacyLedger
        The run's ledger (the same object the mechanisms and trainers record into).
    delta : float, optional
        Delta at which to report epsilon (default: the ledger's).
    scope : str, optional
        What the guarantee covers, logged with the ledger.
    """

    def __init__(self, ledger: PrivacyLedger, delta: float | None = None, scope: str | None = None) -> None:
        self.ledger = ledger
        self.delta = delta
        self.scope = scope

    def _metrics(self) -> dict[str, float]:
        delta = self.delta if self.delta is not None else self.ledger.default_delta
        metrics = {"privacy/epsilon": self.ledger.get_epsilon(delta), "privacy/delta": delta}
        if self.ledger.budget is not None:
            metrics["privacy/budget_epsilon"] = self.ledger.budget[0]
            metrics["privacy/remaining_epsilon"] = self.ledger.remaining()
        return metrics

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for name, value in self._metrics().items():
            # sync_dist: under data-parallel training every process holds the same ledger (the mean is its value)
            pl_module.log(
                name, float(value), on_step=False, on_epoch=True, prog_bar=name == "privacy/epsilon", sync_dist=True
            )

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        text = ledger_text(self.ledger, self.scope)
        for logger in trainer.loggers:
            experiment = getattr(logger, "experiment", None)
            if hasattr(experiment, "add_text"):
                experiment.add_text("privacy/ledger", text, trainer.global_step)

    def _check_module(self, pl_module: L.LightningModule) -> None:
        other = getattr(pl_module, "ledger", None)
        if isinstance(other, PrivacyLedger) and other is not self.ledger:
            raise ValueError("PrivacySpendCallback's ledger is not the module's ledger: pass the same object")

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self._check_module(pl_module)
        save_ledger(checkpoint, self.ledger)

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self._check_module(pl_module)
        restore_ledger(checkpoint, self.ledger)


class StderrProgressBar(TQDMProgressBar):
    """Lightning's progress bars on stderr, so that stdout stays free for results (the
    CLI's ``--json``); ``TQDMProgressBar`` writes to stdout.

    * On a terminal (stderr is a TTY): Lightning's tqdm bars (training with the
      progress-bar metrics, validation, test), drawn on stderr.
    * Elsewhere (a log file, a pipe, CI, a captured stream): no per-step output. One
      line per epoch, at most about ``max_lines`` per fit (every k-th epoch, and the
      last), with the epoch's progress-bar metrics, e.g.
      ``epoch 3/20  val_loss=0.41  val_acc=0.91  privacy/epsilon=0.52``.

    ``LightningModule.print`` writes to stderr as well. The trainers of
    ``dp_proto.experiments.lvq.run_experiment`` use this bar
    (``training.progress_bar``); pass it to your own as
    ``L.Trainer(callbacks=[StderrProgressBar()])``.

    Parameters
    ----------
    refresh_rate : int
        Update the terminal bars every this many batches (default 1).
    process_position : int
        Offset of the terminal bars in lines (several trainers at once).
    leave : bool
        Leave each epoch's terminal bar on the screen.
    max_lines : int
        Off a terminal: about the most epoch lines per fit (default 10).
    """

    def __init__(
        self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False, *, max_lines: int = 10
    ) -> None:
        super().__init__(refresh_rate=refresh_rate, process_position=process_position, leave=leave)
        if max_lines < 1:
            raise ValueError(f"max_lines must be at least 1, got {max_lines}")
        self.max_lines = int(max_lines)
        self._every = 1
        self._pending: tuple[int, bool] | None = None  # (epoch, due) of the last finished epoch

    @staticmethod
    def on_terminal() -> bool:
        """Whether ``sys.stderr`` (looked up now: pytest and the CLI may swap it) is a TTY."""
        isatty = getattr(sys.stderr, "isatty", None)
        try:
            return bool(isatty is not None and isatty())
        except ValueError:  # a closed stream
            return False

    def _tqdm(self, desc: str, *, offset: int = 0, **kwargs: Any) -> Tqdm:
        return Tqdm(
            desc=desc,
            position=2 * self.process_position + offset,
            disable=self.is_disabled or not self.on_terminal(),
            dynamic_ncols=True,
            file=sys.stderr,
            bar_format=self.BAR_FORMAT,
            **kwargs,
        )

    def init_sanity_tqdm(self) -> Tqdm:
        return self._tqdm(self.sanity_check_description, leave=False)

    def init_train_tqdm(self) -> Tqdm:
        return self._tqdm(self.train_description, leave=True, smoothing=0)

    def init_predict_tqdm(self) -> Tqdm:
        return self._tqdm(self.predict_description, leave=True, smoothing=0)

    def init_validation_tqdm(self) -> Tqdm:
        has_main_bar = self.trainer.state.fn != "validate"  # as Lightning's
        return self._tqdm(self.validation_description, offset=int(has_main_bar), leave=not has_main_bar)

    def init_test_tqdm(self) -> Tqdm:
        return self._tqdm(self.test_description, leave=True)

    def print(self, *args: Any, sep: str = " ", **kwargs: Any) -> None:
        kwargs["file"] = sys.stderr
        if self.on_terminal():
            super().print(*args, sep=sep, **kwargs)  # above the bars (tqdm.write)
        else:
            sys.stderr.write(sep.join(map(str, args)) + kwargs.get("end", "\n"))

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        """Close the open bars of a fit that raised (Lightning leaves them open)."""
        for name in ("_train_progress_bar", "_val_progress_bar", "_test_progress_bar", "_predict_progress_bar"):
            bar = getattr(self, name, None)
            if bar is not None:
                bar.close()
        self._pending = None

    # -- one line per epoch off a terminal ---------------------------------------------
    # The epoch's metrics are final only after every on_train_epoch_end hook ran (the
    # privacy callback logs epsilon there): the line is written at the next epoch's start.
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        epochs = trainer.max_epochs
        self._every = max(1, math.ceil(epochs / self.max_lines)) if epochs is not None and epochs > 0 else 1
        self._pending = None

    def on_train_epoch_start(self, trainer: L.Trainer, *args: Any) -> None:
        super().on_train_epoch_start(trainer, *args)
        if self._pending is not None and self._pending[1]:
            self._write_epoch(trainer, trainer.lightning_module, self._pending[0])
        self._pending = None

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        epoch = trainer.current_epoch
        self._pending = (epoch, (epoch + 1) % self._every == 0)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        if self._pending is not None:  # the last epoch: always
            self._write_epoch(trainer, pl_module, self._pending[0])
        self._pending = None

    def _write_epoch(self, trainer: L.Trainer, pl_module: L.LightningModule, epoch: int) -> None:
        if self.is_disabled or self.on_terminal():
            return
        line = f"epoch {epoch + 1}" + (f"/{trainer.max_epochs}" if trainer.max_epochs not in (None, -1) else "")
        for name, value in self.get_metrics(trainer, pl_module).items():
            if name != "v_num":
                line += f"  {name}={value:.4g}" if isinstance(value, float) else f"  {name}={value}"
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
