"""SCATS traffic counts as a network of sensor nodes, for learning from label proportions.

The setting of Sachweh, Boiar and Liebig (2021): every traffic detector is a node that
keeps its own measurements; a node's samples are sliding windows of the last ``w = 5``
15-minute counts and the label is the count at horizon ``r = 1`` discretised into flow
ranges; nodes exchange (noisy) label proportions of time batches with their ``c``
nearest neighbours (``dp_proto.data.geometry``). The counts come from
``dp_proto.data.loaders.scats.load_scats_counts``.

``discretize_flow(counts, bin_edges=FLOW_BIN_EDGES)``
    Counts -> class indices: ``[0, 5) [5, 30) [30, 60) [60, 150) [150, 260) [260, inf)``.
``sliding_windows(series, time=None, window=5, horizon=1)``
    ``(X (m, w), y_counts (m,), t (m,))``, windows touching a missing value dropped.
``node_datasets(network, window=5, horizon=1, bin_edges=FLOW_BIN_EDGES)``
    One ``NodeData`` (features, labels, time, counts) per detector.
``time_block_folds(time_index, n_folds=10, time_range=None, gap=0)``
    Cross-validation over contiguous blocks of the global time range.

Time is a global slot index: ``day * 96 + slot``, ``day`` counted from
``TrafficNetwork.start_date`` and ``slot`` the 15-minute column (``V00`` = 00:00).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dp_proto._validation import as_time_index, format_indices
from dp_proto.data._checks import _check_count
from dp_proto.data.loaders.scats import DetectorId, TrafficNetwork
from dp_proto.exceptions import DataValidationError

__all__ = [
    "FLOW_BIN_EDGES",
    "FLOW_CLASS_NAMES",
    "NodeData",
    "discretize_flow",
    "sliding_windows",
    "node_datasets",
    "time_block_folds",
]


#: Lower edges of the flow classes (vehicles per 15 minutes). Class ``k`` is
#: ``[FLOW_BIN_EDGES[k], FLOW_BIN_EDGES[k + 1])``, the last class ``[260, inf)``.
#: The ranges of Sachweh et al. (2021) are 0-5, 5-30, 30-60, 60-150, 150-260; counts
#: above 260 (present in the VicRoads data) form a sixth class.
FLOW_BIN_EDGES: tuple[float, ...] = (0, 5, 30, 60, 150, 260)


#: Human-readable ranges of the classes of ``FLOW_BIN_EDGES``.
FLOW_CLASS_NAMES: tuple[str, ...] = (
    "[0, 5)",
    "[5, 30)",
    "[30, 60)",
    "[60, 150)",
    "[150, 260)",
    "[260, inf)",
)


@dataclass(frozen=True)
class NodeData:
    """The samples of one node (detector).

    Attributes
    ----------
    detector : (int, int)
        ``(site, approach)``.
    features : ndarray of shape (m, w), dtype float64
        The ``w`` counts before the target, oldest first.
    labels : ndarray of shape (m,), dtype int64
        Flow class of the target count (see ``discretize_flow``).
    time : ndarray of shape (m,), dtype int64
        Global slot index of the target count (``day * 96 + slot``), increasing.
    counts : ndarray of shape (m,), dtype float64
        The target counts themselves.
    num_classes : int
        The public label set ``0 .. num_classes - 1``: the flow classes of the bin
        edges the labels were made with (``len(bin_edges)``; 6 for
        ``FLOW_BIN_EDGES``), whether or not every class occurs.
    """

    detector: DetectorId
    features: np.ndarray
    labels: np.ndarray
    time: np.ndarray
    counts: np.ndarray
    num_classes: int = len(FLOW_BIN_EDGES)

    def __len__(self) -> int:
        return len(self.labels)


# --------------------------------------------------------------------------- checks
def _check_edges(bin_edges: Sequence[float]) -> np.ndarray:
    edges = np.asarray(bin_edges, dtype=np.float64)
    if edges.ndim != 1 or edges.size < 1:
        raise ValueError(f"bin_edges must be a non-empty 1-d sequence, got {bin_edges!r}")
    if not np.all(np.isfinite(edges)) or np.any(np.diff(edges) <= 0):
        raise ValueError(f"bin_edges must be finite and strictly increasing, got {bin_edges!r}")
    return edges


# --------------------------------------------------------------------------- labels
def discretize_flow(counts: np.ndarray | Sequence[float], bin_edges: Sequence[float] = FLOW_BIN_EDGES) -> np.ndarray:
    """Flow classes of vehicle counts.

    Class ``k`` is the half-open range ``[bin_edges[k], bin_edges[k + 1])``
    and the last class is ``[bin_edges[-1], inf)``. With the default
    ``FLOW_BIN_EDGES`` the classes are ``0: [0, 5)``, ``1: [5, 30)``,
    ``2: [30, 60)``, ``3: [60, 150)``, ``4: [150, 260)``, ``5: [260, inf)``;
    so a count of exactly 5 is class 1 and exactly 260 is class 5.

    Parameters
    ----------
    counts : array-like of any shape
        Vehicles per 15 minutes; must be finite and ``>= bin_edges[0]``.
    bin_edges : sequence of float, default FLOW_BIN_EDGES
        Strictly increasing lower edges of the classes.

    Returns
    -------
    ndarray of int64, same shape as ``counts``
        Class indices ``0 .. len(bin_edges) - 1``.

    Raises
    ------
    DataValidationError
        If a count is NaN/inf or below the first edge (e.g. a negative count:
        missing values must be removed first, ``sliding_windows`` does so).
    ValueError
        If ``bin_edges`` is not finite and strictly increasing.
    """
    edges = _check_edges(bin_edges)
    values = np.asarray(counts, dtype=np.float64)
    flat = values.reshape(-1)
    bad = ~np.isfinite(flat)
    if bad.any():
        raise DataValidationError(
            f"counts contain NaN or inf at flat index(es) {format_indices(np.flatnonzero(bad))}; "
            f"drop missing values before discretizing"
        )
    low = flat < edges[0]
    if low.any():
        idx = np.flatnonzero(low)
        raise DataValidationError(
            f"counts below the first flow range [{edges[0]:g}, ...) at flat index(es) "
            f"{format_indices(idx)} (e.g. {flat[idx[0]]:g}); negative counts are not flows "
            f"(SCATS marks missing values that way: treat them as missing)"
        )
    labels = np.searchsorted(edges, flat, side="right") - 1
    return labels.astype(np.int64).reshape(values.shape)


# --------------------------------------------------------------------------- windows
def sliding_windows(
    series: np.ndarray | Sequence[float],
    time: np.ndarray | Sequence[int] | None = None,
    window: int = 5,
    horizon: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Windows of the last ``window`` values and the value ``horizon`` steps after the last.

    For an end position ``i`` the features are ``series[i - window + 1 .. i]``
    (oldest first) and the target is ``series[i + horizon]``; ``horizon = 1``
    is the next measurement. A window is kept only if its ``window`` values
    and its target are all finite (NaN marks a missing value; for ``horizon >
    1`` the values between window and target are not part of the sample and
    may be missing) and the times
    they cover are consecutive slots (``time[i + horizon] - time[i - window +
    1] == window + horizon - 1``), so no window spans a gap in ``time``.

    Parameters
    ----------
    series : array-like of shape (T,)
        Measurements in time order; NaN = missing.
    time : array-like of shape (T,) of int, optional
        Strictly increasing slot index of each measurement; default ``0 .. T-1``.
    window : int, default 5
        Number of measurements per window (``w``), >= 1.
    horizon : int, default 1
        Steps from the last window value to the target (``r``), >= 1.

    Returns
    -------
    X : ndarray of shape (m, window), dtype float64
    y_counts : ndarray of shape (m,), dtype float64
        The target values.
    t : ndarray of shape (m,), dtype int64
        ``time`` of each target, increasing.

    Raises
    ------
    ValueError
        ``series`` not 1-d, ``time`` of another length or not strictly
        increasing, or ``window``/``horizon`` < 1.
    """
    window = _check_count("window", window, 1)
    horizon = _check_count("horizon", horizon, 1)
    x = np.asarray(series, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"series must be 1-d, got shape {x.shape}")
    n = x.size
    if time is None:
        tt = np.arange(n, dtype=np.int64)
    else:
        tt = np.asarray(time)
        if tt.shape != x.shape:
            raise ValueError(f"time must have the shape of series {x.shape}, got {tt.shape}")
        if tt.size and not np.issubdtype(tt.dtype, np.integer):
            raise ValueError(f"time must hold integers, got dtype {tt.dtype}")
        tt = tt.astype(np.int64)
        if np.any(np.diff(tt) <= 0):
            raise ValueError("time must be strictly increasing")
    span = window + horizon - 1
    m = n - span
    if m <= 0:
        return (
            np.empty((0, window), dtype=np.float64),
            np.empty(0, dtype=np.float64),
            np.empty(0, dtype=np.int64),
        )
    X = np.lib.stride_tricks.sliding_window_view(x, window)[:m]
    y = x[span:]
    t = tt[span:]
    ok = np.isfinite(X).all(axis=1) & np.isfinite(y) & (t - tt[:m] == span)
    return np.array(X[ok], dtype=np.float64), y[ok].copy(), t[ok].copy()


def node_datasets(
    network: TrafficNetwork,
    window: int = 5,
    horizon: int = 1,
    bin_edges: Sequence[float] = FLOW_BIN_EDGES,
) -> list[NodeData]:
    """Sliding-window samples of every detector of ``network``.

    Parameters
    ----------
    network : TrafficNetwork
        From ``load_scats_counts``.
    window : int, default 5
        Counts per window (``w = 5`` in Sachweh et al. 2021).
    horizon : int, default 1
        Steps ahead of the target (``r = 1`` in Sachweh et al. 2021: the next 15 minutes).
    bin_edges : sequence of float, default FLOW_BIN_EDGES
        Flow classes, see ``discretize_flow``.

    Returns
    -------
    list of NodeData
        In the order of ``network.detectors``. Windows touching a missing
        value are dropped (see ``sliding_windows``); ``time`` is the
        global slot of the target, so equal values across nodes mean the
        same 15 minutes.
    """
    out = []
    for i, key in enumerate(network.detectors):
        X, y, t = sliding_windows(network.series[i], network.time, window, horizon)
        out.append(
            NodeData(
                detector=key,
                features=X,
                labels=discretize_flow(y, bin_edges),
                time=t,
                counts=y,
                num_classes=len(bin_edges),
            )
        )
    return out


# --------------------------------------------------------------------------- time
def time_block_folds(
    time_index: np.ndarray | Sequence[int],
    n_folds: int = 10,
    *,
    time_range: tuple[int, int] | None = None,
    gap: int = 0,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Cross-validation folds over contiguous blocks of time.

    The range ``[start, stop)`` is cut into ``n_folds`` contiguous blocks of
    (nearly) equal length in time, block ``k`` being ``[start + (stop -
    start) * k // n_folds, start + (stop - start) * (k + 1) // n_folds)``.
    Fold ``k`` tests on the samples whose time falls in block ``k`` and
    trains on the others, except those within ``gap`` slots of block ``k``.
    Blocks are defined by time, not by sample counts, so passing the same
    ``time_range`` for every node gives time-aligned folds across nodes; a
    block in which a node has no sample gives it an empty test mask.

    Parameters
    ----------
    time_index : array-like of shape (m,) of int
        Time of each sample (e.g. ``NodeData.time``); need not be sorted.
    n_folds : int, default 10
        Number of blocks (Sachweh et al. 2021 use 10-fold cross-validation), >= 2.
    time_range : (int, int), optional
        ``(start, stop)``, stop exclusive; default ``(min, max + 1)`` of
        ``time_index``. For a network, use ``(network.time[0], network.time[-1] + 1)``.
    gap : int, default 0
        Slots on both sides of the test block left out of training. Windows of
        ``w`` values and horizon ``r`` share a measurement iff their target
        times differ by at most ``w + r - 1``, so ``gap = w + r - 1`` (5 in the
        setting of Sachweh et al. 2021) keeps every training window disjoint from the
        test windows.

    Returns
    -------
    list of (train_mask, test_mask)
        ``n_folds`` pairs of boolean arrays of shape (m,); the test masks
        partition the samples, and train and test never overlap.

    Raises
    ------
    ValueError
        Bad ``n_folds``/``gap``, an empty ``time_index`` without ``time_range``,
        a range shorter than ``n_folds`` slots, or times outside the range.
    """
    n_folds = _check_count("n_folds", n_folds, 2)
    gap = _check_count("gap", gap, 0)
    t = as_time_index(time_index)
    if time_range is None:
        if t.size == 0:
            raise ValueError("time_index is empty; pass time_range to define the blocks")
        start, stop = int(t.min()), int(t.max()) + 1
    else:
        start, stop = (int(v) for v in time_range)
    if stop - start < n_folds:
        raise ValueError(f"time range [{start}, {stop}) has {stop - start} slots, fewer than n_folds={n_folds}")
    if t.size and (t.min() < start or t.max() >= stop):
        raise ValueError(f"time_index has values outside time_range [{start}, {stop}): min {t.min()}, max {t.max()}")
    length = stop - start
    edges = [start + length * k // n_folds for k in range(n_folds + 1)]
    folds = []
    for k in range(n_folds):
        lo, hi = edges[k], edges[k + 1]
        test = (t >= lo) & (t < hi)
        train = (t < lo - gap) | (t >= hi + gap)
        folds.append((train, test))
    return folds
