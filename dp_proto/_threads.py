"""How many CPU threads torch uses while an estimator fits.

A fit's work per training step is counted as ``rows per step x trainable parameters``
(about the multiply-adds of one forward pass: a GMLVQ model with ``P`` prototypes and an
``(r, d)`` metric has ``(P + r) d`` parameters). On the CPU, a fit whose work per step is
below ``SERIAL_WORK`` runs with one torch thread; a larger fit keeps torch's setting. The
environment variable ``DP_PROTO_NUM_THREADS`` (a positive integer) replaces the rule: every
CPU fit then runs with exactly that many threads; any other non-empty value raises
``ValueError`` (on every device). On other devices the thread count is left alone.

``torch.set_num_threads`` is process-wide: the setting changes for the whole process while
the fit runs and is restored afterwards, also when the fit raises.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["NUM_THREADS_ENV", "SERIAL_WORK", "env_num_threads", "fit_num_threads", "fit_threads", "step_work"]

#: Environment variable: a positive integer, the torch threads of every CPU fit.
NUM_THREADS_ENV = "DP_PROTO_NUM_THREADS"

#: Work per step (rows x trainable parameters) below which a CPU fit runs on one thread.
SERIAL_WORK = 2e9

_lock = threading.Lock()
_active = 0  # contexts that changed the setting and have not exited yet
_original = 0  # the setting before the first of them


def env_num_threads() -> int | None:
    """``DP_PROTO_NUM_THREADS`` as an int, or None when it is unset or empty.

    Raises ``ValueError`` when it is set to anything but a positive integer."""
    raw = os.environ.get(NUM_THREADS_ENV, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{NUM_THREADS_ENV} must be a positive integer (torch threads for fits), got {raw!r}")
    return value


def step_work(rows_per_step: float, module: torch.nn.Module) -> float:
    """Work of one training step: ``rows_per_step`` times the trainable parameters
    (elements) of ``module``."""
    return float(rows_per_step) * sum(p.numel() for p in module.parameters() if p.requires_grad)


def fit_num_threads(work: float, device: str | torch.device) -> int | None:
    """The torch thread count for a fit with ``work`` per step on ``device``, or None
    to leave torch's setting alone.

    Not a CPU device: None. ``DP_PROTO_NUM_THREADS`` set: that count. Otherwise 1 when
    ``work < SERIAL_WORK``, else None."""
    override = env_num_threads()  # a bad value fails on every device
    if torch.device(device).type != "cpu":
        return None
    if override is not None:
        return override
    return 1 if work < SERIAL_WORK else None


@contextmanager
def fit_threads(work: float, device: str | torch.device) -> Iterator[None]:
    """Run the body with ``fit_num_threads(work, device)`` torch threads (when not None),
    then restore the previous count, also on an exception.

    ``work`` is the work per training step (``step_work``). Nested contexts restore in
    order; contexts that overlap in several Python threads leave the count they found
    first once the last of them exits."""
    global _active, _original
    n = fit_num_threads(work, device)
    if n is None:
        yield
        return
    with _lock:
        previous = torch.get_num_threads()
        if _active == 0:
            _original = previous
        _active += 1
        if n != previous:
            torch.set_num_threads(n)
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            restore = _original if _active == 0 else previous
            if torch.get_num_threads() != restore:
                torch.set_num_threads(restore)
