"""Lightning callbacks: the privacy spend in TensorBoard, and the ledger in checkpoints.

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
import uuid
import weakref
from typing import Any

import lightning as L

from dp_proto.privacy.ledger import PrivacyEvent, PrivacyLedger

__all__ = ["PrivacySpendCallback", "save_ledger", "restore_ledger", "PRIVACY_SCOPE"]

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
            pl_module.log(name, float(value), on_step=False, on_epoch=True, prog_bar=name == "privacy/epsilon")

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        lines = str(self.ledger).splitlines()
        if self.scope:
            lines.append(f"scope: {self.scope}")
        text = "\n".join("    " + line for line in lines)  # markdown code block
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
