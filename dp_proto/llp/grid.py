"""The public time grid of the LLP protocol: which batch a window belongs to.

Every node cuts its windows into batches of ``b`` consecutive time slots on ONE grid,
``origin + k b <= t < origin + (k + 1) b``, so batch ``k`` is the same period at every node
and neighbours' proportions can be matched row by row. The grid is public: ``(origin,
stop)`` is the recording period and fixes ``num_batches = ceil((stop - origin) / b)``,
the number of rows of every release.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dp_proto._validation import as_time_index, check_int

__all__ = ["BatchGrid", "time_batches"]


def time_batches(time_index: np.ndarray | Sequence[int], batch_size: int, *, origin: int = 0) -> np.ndarray:
    """Batch id of each sample on a global grid of ``batch_size`` slots.

    Batch ``k`` holds the samples with ``origin + k * batch_size <= t <
    origin + (k + 1) * batch_size``. With the same ``origin`` for every node,
    batch ``k`` covers the same period at every node, so label proportions of
    neighbours can be matched batch by batch. Where windows were dropped
    (missing values) a batch holds fewer than ``batch_size`` samples;
    Sachweh, Boiar & Liebig (2021) instead cut each node's rows into consecutive
    groups of ``b``, which equals this grid only when no window is missing.

    Parameters
    ----------
    time_index : array-like of shape (m,) of int
        Global slots, e.g. ``NodeData.time``; all ``>= origin``.
    batch_size : int
        Slots per batch (``b``), >= 1.
    origin : int, default 0
        Start of batch 0.

    Returns
    -------
    ndarray of shape (m,), dtype int64
    """
    batch_size = check_int("batch_size", batch_size, 1)
    t = as_time_index(time_index)
    if t.size and t.min() < origin:
        raise ValueError(f"time_index has values below origin={origin} (min {t.min()})")
    return (t - int(origin)) // batch_size


@dataclass(frozen=True)
class BatchGrid:
    """Batches of ``batch_size`` slots over the public recording period ``[origin, stop)``.

    Attributes
    ----------
    origin, stop : int
        The recording period, ``stop`` exclusive; ``stop - origin >= batch_size``.
    batch_size : int
        ``b``, slots per batch, >= 1.
    """

    origin: int
    stop: int
    batch_size: int

    def __post_init__(self) -> None:
        batch_size = check_int("batch_size", self.batch_size, 1)
        origin, stop = int(self.origin), int(self.stop)
        if stop - origin < batch_size:
            raise ValueError(f"batch_size={batch_size} is longer than the time range [{origin}, {stop})")
        object.__setattr__(self, "origin", origin)
        object.__setattr__(self, "stop", stop)
        object.__setattr__(self, "batch_size", batch_size)

    @classmethod
    def from_time_range(cls, time_range: tuple[int, int], batch_size: int) -> BatchGrid:
        """The grid of ``time_range = (origin, stop)``, checked."""
        if time_range is None or isinstance(time_range, (str, bytes)) or len(time_range) != 2:
            raise ValueError(f"time_range must be (origin, stop), the public recording period, got {time_range!r}")
        return cls(int(time_range[0]), int(time_range[1]), batch_size)

    @property
    def num_batches(self) -> int:
        """``ceil((stop - origin) / batch_size)``: the rows of every release."""
        return -(-(self.stop - self.origin) // self.batch_size)

    def contains(self, time_index: np.ndarray | Sequence[int]) -> np.ndarray:
        """Boolean mask (m,) of the slots inside ``[origin, stop)``."""
        t = as_time_index(time_index)
        return (t >= self.origin) & (t < self.stop)

    def batch_ids(self, time_index: np.ndarray | Sequence[int]) -> np.ndarray:
        """``time_batches`` on this grid; every slot must lie inside it. Shape (m,), int64."""
        return time_batches(time_index, self.batch_size, origin=self.origin)
