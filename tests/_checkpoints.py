"""Shared by the Lightning checkpoint tests: a quiet CPU trainer, what a checkpoint may
hold, the DP-SGD steps a ledger recorded, and checkpoints written by another Python process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint


def cpu_trainer(
    epochs: int, callbacks: Sequence[L.Callback] = (), ckpt_dir: Path | None = None, logger: Any = False
) -> L.Trainer:
    """A CPU ``L.Trainer`` for ``epochs`` epochs with ``callbacks``, no progress bar, model
    summary or sanity check; it checkpoints (``last.ckpt``) to ``ckpt_dir`` when given, else
    not at all."""
    callbacks = list(callbacks)
    if ckpt_dir is not None:
        callbacks.append(ModelCheckpoint(dirpath=ckpt_dir, save_last=True))
    return L.Trainer(
        max_epochs=epochs,
        logger=logger,
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        num_sanity_val_steps=0,
        enable_checkpointing=ckpt_dir is not None,
    )


def dp_sgd_steps(ledger: Any) -> int:
    """The DP-SGD steps ``ledger`` recorded (its ``dp_sgd`` events' counts)."""
    return sum(e.count for e in ledger.events if e.name == "dp_sgd")


def is_plain(obj: Any) -> bool:
    """``obj`` is plain data: ``None``, a bool, int, float or str, or lists, tuples and
    dicts with string keys of those."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return True
    if isinstance(obj, (list, tuple)):
        return all(is_plain(v) for v in obj)
    if isinstance(obj, dict):
        return all(isinstance(k, str) and is_plain(v) for k, v in obj.items())
    return False


def has_generator_state(obj: Any) -> bool:
    """``obj`` holds a ``torch.Generator`` or what looks like a generator's state, anywhere
    in its dicts, lists and tuples."""
    if isinstance(obj, torch.Generator):
        return True
    if isinstance(obj, torch.Tensor):  # a generator's state is a uint8 tensor (5056 bytes on CPU)
        return obj.dtype == torch.uint8 and obj.numel() >= 5000
    if isinstance(obj, dict):
        return any(has_generator_state(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(has_generator_state(v) for v in obj)
    return False


def write_in_fresh_process(script: str, out: Path) -> dict:
    """Run ``script`` (Python source) in a new Python with ``out`` as its one argument; it
    writes its checkpoints under ``out`` and what it saw to ``out / "result.json"``, which
    is returned."""
    path = Path(out) / "writer.py"
    path.write_text(script)
    proc = subprocess.run([sys.executable, str(path), str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((Path(out) / "result.json").read_text())
