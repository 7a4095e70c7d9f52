"""Lightning callbacks: the privacy spend in TensorBoard, and the ledger in checkpoints."""

from __future__ import annotations

from typing import Any

import lightning as L

from dp_proto.privacy.ledger import PrivacyLedger

__all__ = ["PrivacySpendCallback"]


class PrivacySpendCallback(L.Callback):
    """Logs the run's privacy spend and keeps the ledger in checkpoints.

    * after every training epoch: ``privacy/epsilon`` (at ``delta``), ``privacy/delta``
      and, with a budget, ``privacy/budget_epsilon`` and ``privacy/remaining_epsilon``;
    * at the end of fitting: the ledger's events as text (TensorBoard's Text tab);
    * in every checkpoint: the ledger's ``state_dict`` under ``"privacy_ledger"``;
      loading a checkpoint restores it, so resuming never resets the spend.

    Parameters
    ----------
    ledger : PrivacyLedger
        The run's ledger (the same object the mechanisms and trainers record into).
    delta : float, optional
        Delta at which to report epsilon (default: the ledger's).
    """

    def __init__(self, ledger: PrivacyLedger, delta: float | None = None) -> None:
        self.ledger = ledger
        self.delta = delta

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
        text = "\n".join("    " + line for line in str(self.ledger).splitlines())  # markdown code block
        for logger in trainer.loggers:
            experiment = getattr(logger, "experiment", None)
            if hasattr(experiment, "add_text"):
                experiment.add_text("privacy/ledger", text, trainer.global_step)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        checkpoint["privacy_ledger"] = self.ledger.state_dict()

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get("privacy_ledger")
        if state is None:
            raise RuntimeError(
                "the checkpoint holds no privacy ledger; resuming would reset the privacy spend"
            )
        # Releases made in this process before resuming (if any) are kept after the
        # checkpoint's history: both happened, both count.
        self.ledger.load_state_dict(state, keep_current=True)
