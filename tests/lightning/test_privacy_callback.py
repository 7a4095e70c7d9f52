"""PrivacySpendCallback: epsilon per epoch in TensorBoard, the ledger in checkpoints."""

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from sklearn.datasets import load_iris

from dp_proto.lightning import ArrayDataModule, LVQModule, PrivacySpendCallback
from dp_proto.lvq import GLVQLayer, PrototypeModel
from dp_proto.privacy import PrivacyLedger
from dp_proto.privacy.events import SubsampledGaussianEvent

STEP = SubsampledGaussianEvent(noise_multiplier=1.0, sampling_rate=0.1, name="sgd")


class SpendingModule(LVQModule):
    """Stands in for a DP trainer: records one DP-SGD step per batch into the ledger."""

    def __init__(self, ledger, **kwargs):
        super().__init__(PrototypeModel(GLVQLayer(4, 3), [0, 1, 2]), **kwargs)
        self.ledger = ledger

    def on_train_batch_end(self, outputs, batch, batch_idx):
        super().on_train_batch_end(outputs, batch, batch_idx)
        self.ledger.spend(STEP)


def _fit(tmp_path, ledger, epochs, ckpt_path=None, version=0):
    X, y = load_iris(return_X_y=True)
    dm = ArrayDataModule(X, y, batch_size=30, seed=0)
    module = SpendingModule(ledger, lr=0.05)
    logger = TensorBoardLogger(tmp_path, name="run", version=version)
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    trainer = L.Trainer(
        max_epochs=epochs,
        logger=logger,
        callbacks=[PrivacySpendCallback(ledger), checkpoint],
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        num_sanity_val_steps=0,
    )
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path)
    return logger.log_dir, tmp_path / "ckpt" / "last.ckpt"


def test_epsilon_is_logged_every_epoch_and_grows(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ledger = PrivacyLedger(budget=(10.0, 1e-5))
    log_dir, _ = _fit(tmp_path, ledger, epochs=3)
    acc = EventAccumulator(log_dir, size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    eps = [e.value for e in acc.Scalars("privacy/epsilon")]
    assert len(eps) == 3 and eps[0] < eps[1] < eps[2]
    assert eps[-1] == pytest.approx(ledger.get_epsilon(), rel=1e-4)
    assert [e.value for e in acc.Scalars("privacy/budget_epsilon")] == [10.0] * 3
    assert "privacy/ledger/text_summary" in acc.Tags()["tensors"]


@pytest.mark.slow
def test_resume_restores_the_spend(tmp_path):
    ledger = PrivacyLedger()
    _, ckpt = _fit(tmp_path, ledger, epochs=2)
    spent = ledger.get_epsilon()
    saved = torch.load(ckpt, weights_only=False)["privacy_ledger"]
    assert PrivacyLedger.from_state_dict(saved).get_epsilon() == pytest.approx(spent)

    fresh = PrivacyLedger()  # a new process: the ledger starts empty
    _fit(tmp_path, fresh, epochs=3, ckpt_path=ckpt, version=1)
    steps = sum(e.count for e in fresh.events)
    assert steps == 3 * 4  # 2 epochs from the checkpoint + 1 resumed epoch, 4 batches each
    assert fresh.get_epsilon() > spent


def test_checkpoint_without_ledger_is_refused(tmp_path):
    X, y = load_iris(return_X_y=True)
    dm = ArrayDataModule(X, y, batch_size=30)
    module = SpendingModule(PrivacyLedger(), lr=0.05)
    trainer = L.Trainer(
        max_epochs=1,
        logger=False,
        enable_progress_bar=False,
        accelerator="cpu",
        default_root_dir=tmp_path,
        enable_model_summary=False,
    )
    trainer.fit(module, datamodule=dm)
    path = tmp_path / "plain.ckpt"
    trainer.save_checkpoint(path)
    ledger = PrivacyLedger()
    trainer2 = L.Trainer(
        max_epochs=2,
        logger=False,
        enable_progress_bar=False,
        accelerator="cpu",
        callbacks=[PrivacySpendCallback(ledger)],
        default_root_dir=tmp_path,
        enable_model_summary=False,
    )
    with pytest.raises(RuntimeError, match="reset the privacy spend"):
        trainer2.fit(SpendingModule(ledger, lr=0.05), datamodule=dm, ckpt_path=path)


def _saved(ledger):
    """A checkpoint dict with ``ledger``, through torch.save / torch.load(weights_only=True)."""
    import io

    from dp_proto.lightning.callbacks import save_ledger

    checkpoint = {}
    save_ledger(checkpoint, ledger)
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)  # plain data only


def _count(ledger):
    return sum(e.count for e in ledger.events)


def test_restoring_counts_every_release_once_along_a_chain_of_resumes():
    from dp_proto.lightning.callbacks import restore_ledger

    a = PrivacyLedger()
    for _ in range(3):
        a.spend(STEP)
    ckpt_a = _saved(a)
    assert restore_ledger(ckpt_a, a) == 0 and _count(a) == 3  # its own checkpoint: recorded already
    b = PrivacyLedger()  # another process resumes A's checkpoint, twice (module and callback)
    assert restore_ledger(ckpt_a, b) == 3 and restore_ledger(ckpt_a, b) == 0
    b.spend(STEP, STEP)
    ckpt_b = _saved(b)  # 5 steps: 3 of A's, 2 of B's
    a.spend(STEP)
    ckpt_a2 = _saved(a)  # A went on after its first checkpoint: 4 steps
    c = PrivacyLedger(budget=(50.0, 1e-5))
    assert restore_ledger(ckpt_b, c) == 5
    assert restore_ledger(ckpt_a, c) == 0  # A's first 3 steps came with B's checkpoint
    assert restore_ledger(ckpt_a2, c) == 1  # only A's later step is new
    assert _count(c) == 6 and c.budget == (50.0, 1e-5)  # this ledger's own budget stays
    assert restore_ledger(ckpt_a2, b) == 1 and _count(b) == 6


def test_a_checkpoint_of_an_older_version_is_restored_once():
    from dp_proto.lightning.callbacks import restore_ledger

    old = PrivacyLedger()
    old.spend(STEP, STEP)
    checkpoint = {"privacy_ledger": old.state_dict()}  # no "privacy_ledger_origins"
    fresh = PrivacyLedger()
    assert restore_ledger(checkpoint, fresh) == 2 and restore_ledger(checkpoint, fresh) == 0
    assert _count(fresh) == 2


@pytest.mark.slow
def test_a_new_process_takes_over_every_kind_of_release():
    """Each mechanism's parameters survive the checkpoint's per-origin tally (before typed
    events the discrete-Laplace grid steps were dropped, and such a run could not resume)."""
    from dp_proto.lightning.callbacks import restore_ledger, save_ledger
    from dp_proto.privacy import noisy_histogram
    from dp_proto.privacy.events import ApproxEvent, DiscreteGaussianEvent, PureEvent

    ledger = PrivacyLedger()
    noisy_histogram(torch.tensor([0, 1, 1]), 2, 0.5, ledger=ledger)  # a discrete-Laplace release
    ledger.spend(
        PureEvent(0.2, name="vote"),
        ApproxEvent(0.1, 1e-8, name="centre"),
        DiscreteGaussianEvent(8.0, name="sum"),
        STEP.with_count(10),
    )
    checkpoint: dict = {}
    save_ledger(checkpoint, ledger)
    fresh = PrivacyLedger()
    assert restore_ledger(checkpoint, fresh) == 1 + 1 + 1 + 1 + 10
    assert fresh.events == ledger.events and fresh.get_epsilon() == pytest.approx(ledger.get_epsilon())
