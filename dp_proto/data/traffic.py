"""SCATS traffic counts as a network of sensor nodes, for learning from label proportions.

The setting of Sachweh, Boiar and Liebig, "Differentially private learning from
label proportions": every traffic detector is a node that keeps its own
measurements; a node's samples are sliding windows of the last ``w = 5``
15-minute counts and the label is the count at horizon ``r = 1`` discretised
into flow ranges; nodes exchange (noisy) label proportions of time batches
with their ``c`` nearest neighbours.

Data
----
``load_scats_counts(data_dir=None, *, min_days=14, outage_zero_fraction=0.5)``
    VicRoads SCATS counts (``scats_counts_oct2006.csv``: one row per site,
    approach and day, columns ``V00..V95`` = vehicles per 15 minutes) ->
    :class:`TrafficNetwork`, one series per detector on a global grid of
    15-minute slots, NaN where missing; detectors without coordinates or with
    too few days are dropped and listed in ``TrafficNetwork.dropped``.

Samples
-------
``discretize_flow(counts, bin_edges=FLOW_BIN_EDGES)``
    Counts -> class indices: ``[0, 5) [5, 30) [30, 60) [60, 150) [150, 260) [260, inf)``.
``sliding_windows(series, time=None, window=5, horizon=1)``
    ``(X (m, w), y_counts (m,), t (m,))``, windows touching a missing value dropped.
``node_datasets(network, window=5, horizon=1, bin_edges=FLOW_BIN_EDGES)``
    One :class:`NodeData` (features, labels, time, counts) per detector.

Network and time
----------------
``haversine_distances(coordinates)``, ``nearest_neighbours(coordinates, c, metric="haversine")``
    Great-circle distances (km) and the ``c`` nearest other nodes, ties to the lower index.
``time_block_folds(time_index, n_folds=10, time_range=None, gap=0)``
    Cross-validation over contiguous blocks of the global time range.

Time is a global slot index: ``day * 96 + slot``, ``day`` counted from
``TrafficNetwork.start_date`` and ``slot`` the 15-minute column (``V00`` =
00:00). Only numpy and :mod:`csv` are used; nothing touches the network.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import numbers
import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dp_proto._deprecation import moved_names
from dp_proto._validation import as_time_index, format_indices
from dp_proto.data.files import _read_bytes, _resolve_data_dir
from dp_proto.exceptions import DataValidationError

__all__ = [
    "EARTH_RADIUS_KM",
    "FLOW_BIN_EDGES",
    "FLOW_CLASS_NAMES",
    "SCATS_COUNTS_FILE",
    "SLOTS_PER_DAY",
    "NodeData",
    "TrafficNetwork",
    "discretize_flow",
    "haversine_distances",
    "load_scats_counts",
    "nearest_neighbours",
    "node_datasets",
    "sliding_windows",
    "time_block_folds",
]

#: ``time_batches`` is the LLP protocol's batch grid now (:mod:`dp_proto.llp.grid`).
__getattr__ = moved_names(__name__, {"time_batches": "dp_proto.llp.grid"})

PathLike = str | os.PathLike
DetectorId = tuple[int, int]

#: Lower edges of the flow classes (vehicles per 15 minutes). Class ``k`` is
#: ``[FLOW_BIN_EDGES[k], FLOW_BIN_EDGES[k + 1])``, the last class ``[260, inf)``.
#: The ranges of Sachweh et al. (2021) are 0-5, 5-30, 30-60, 60-150, 150-260; counts
#: above 260 (present in the VicRoads data) form a sixth class.
FLOW_BIN_EDGES: tuple[float, ...] = (0, 5, 30, 60, 150, 260)

#: Human-readable ranges of the classes of :data:`FLOW_BIN_EDGES`.
FLOW_CLASS_NAMES: tuple[str, ...] = (
    "[0, 5)",
    "[5, 30)",
    "[30, 60)",
    "[60, 150)",
    "[150, 260)",
    "[260, inf)",
)

#: Number of 15-minute slots (columns ``V00..V95``) per day.
SLOTS_PER_DAY = 96

#: Mean Earth radius used by :func:`haversine_distances`, in km.
EARTH_RADIUS_KM = 6371.0088

#: Location of the counts file inside a data directory.
SCATS_COUNTS_FILE = Path("traffic") / "scats_vicroads_2006" / "scats_counts_oct2006.csv"

_COL_SITE = "SCATS Number"
_COL_LOCATION = "Location"
_COL_LAT = "NB_LATITUDE"
_COL_LON = "NB_LONGITUDE"
_COL_APPROACH = "VR Internal Loc"
_COL_DATE = "Date"
_COUNT_COLUMNS = tuple(f"V{i:02d}" for i in range(SLOTS_PER_DAY))
_REQUIRED = (_COL_SITE, _COL_LAT, _COL_LON, _COL_APPROACH, _COL_DATE, *_COUNT_COLUMNS)
_HEADER_SEARCH_ROWS = 5
# The network-wide outage rule only fires when at least this many detectors report.
_OUTAGE_MIN_DETECTORS = 3
# Distances are compared after rounding to this many decimals of a km (1 mm), so
# geometrically equal distances tie and go to the lower index.
_DISTANCE_DECIMALS = 6


# --------------------------------------------------------------------------- containers
@dataclass(frozen=True)
class TrafficNetwork:
    """Detector series on a common grid of 15-minute slots.

    Attributes
    ----------
    detectors : list of (int, int)
        ``(site, approach)`` of each node: the SCATS site number and the
        approach code of the file's ``VR Internal Loc`` column (compass
        direction of the approach: 1 N, 2 NE, 3 E, 4 SE, 5 S, 6 SW, 7 W, 8 NW),
        sorted.
    locations : list of str
        The ``Location`` text of each detector (e.g. ``"WARRIGAL_RD N of
        HIGH STREET_RD"``); not unique in the VicRoads file.
    coordinates : ndarray of shape (N, 2), dtype float64
        Latitude and longitude in degrees.
    series : ndarray of shape (N, T), dtype float64
        Vehicles per 15 minutes; NaN where missing (no row for that day, a
        blank or negative cell, or a zero masked by the outage rule).
    time : ndarray of shape (T,), dtype int64
        Global slot index of each column of ``series``: ``0 .. T - 1`` with
        ``T = 96 * number of days`` from ``start_date`` to the last date of the file.
    start_date : datetime.date
        Day of slot 0 (its 00:00-00:15 interval).
    dropped : dict of str to list of (int, int)
        Detectors left out, by reason: ``"no_coordinates"`` (latitude or
        longitude 0, blank or out of range) and ``"too_few_days"`` (fewer than
        ``min_days`` days with a count); both keys are always present.
    outage_slots : ndarray of shape (k,), dtype int64
        Global slots where the network-wide outage rule of
        :func:`load_scats_counts` turned zero counts into NaN.
    n_outage_values : int
        Number of zero counts turned into NaN by that rule.
    source : str
        Path of the file read.
    """

    detectors: list[DetectorId]
    locations: list[str]
    coordinates: np.ndarray
    series: np.ndarray
    time: np.ndarray
    start_date: dt.date
    dropped: dict[str, list[DetectorId]] = field(default_factory=dict)
    outage_slots: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    n_outage_values: int = 0
    source: str = ""

    def __len__(self) -> int:
        return len(self.detectors)

    @property
    def n_dropped(self) -> int:
        """Number of detectors left out, over all reasons."""
        return sum(len(v) for v in self.dropped.values())

    def days_with_data(self) -> np.ndarray:
        """``(N,)`` int64: number of days on which each detector has at least one count."""
        n, t = self.series.shape
        per_day = np.isfinite(self.series.reshape(n, t // SLOTS_PER_DAY, SLOTS_PER_DAY))
        return per_day.any(axis=2).sum(axis=1).astype(np.int64)

    def timestamps(self, time: np.ndarray | None = None) -> np.ndarray:
        """Start of the 15-minute interval of global slot(s) ``time`` (default ``self.time``).

        Returns
        -------
        ndarray of datetime64[m], same shape as ``time``
            Local (clock) time as written in the file.
        """
        t = self.time if time is None else np.asarray(time, dtype=np.int64)
        start = np.datetime64(self.start_date, "m")
        return start + t * np.timedelta64(15, "m")


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
        Flow class of the target count (see :func:`discretize_flow`).
    time : ndarray of shape (m,), dtype int64
        Global slot index of the target count (``day * 96 + slot``), increasing.
    counts : ndarray of shape (m,), dtype float64
        The target counts themselves.
    num_classes : int
        The public label set ``0 .. num_classes - 1``: the flow classes of the bin
        edges the labels were made with (``len(bin_edges)``; 6 for
        :data:`FLOW_BIN_EDGES`), whether or not every class occurs.
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
def _check_int(name: str, value: int, minimum: int) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _check_edges(bin_edges: Sequence[float]) -> np.ndarray:
    edges = np.asarray(bin_edges, dtype=np.float64)
    if edges.ndim != 1 or edges.size < 1:
        raise ValueError(f"bin_edges must be a non-empty 1-d sequence, got {bin_edges!r}")
    if not np.all(np.isfinite(edges)) or np.any(np.diff(edges) <= 0):
        raise ValueError(f"bin_edges must be finite and strictly increasing, got {bin_edges!r}")
    return edges


# --------------------------------------------------------------------------- labels
def discretize_flow(
    counts: np.ndarray | Sequence[float], bin_edges: Sequence[float] = FLOW_BIN_EDGES
) -> np.ndarray:
    """Flow classes of vehicle counts.

    Class ``k`` is the half-open range ``[bin_edges[k], bin_edges[k + 1])``
    and the last class is ``[bin_edges[-1], inf)``. With the default
    :data:`FLOW_BIN_EDGES` the classes are ``0: [0, 5)``, ``1: [5, 30)``,
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
        missing values must be removed first, :func:`sliding_windows` does so).
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


# --------------------------------------------------------------------------- reading
def _find_counts_file(data_dir: PathLike | None) -> Path:
    hint = (
        "Expected the VicRoads SCATS counts (scats_counts_oct2006.csv) in "
        f"<data_dir>/{SCATS_COUNTS_FILE.as_posix()}."
    )
    if data_dir is not None and Path(data_dir).expanduser().is_file():
        return Path(data_dir).expanduser()
    root = _resolve_data_dir(data_dir, hint)
    name = SCATS_COUNTS_FILE.name
    candidates = [
        root / SCATS_COUNTS_FILE,
        root / SCATS_COUNTS_FILE.relative_to("traffic"),
        root / name,
    ]
    candidates += [p.with_name(name + ".gz") for p in candidates]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        listing = "\n  ".join(str(p) for p in candidates)
        raise FileNotFoundError(f"SCATS counts file not found; tried:\n  {listing}\n{hint}")
    return path


def _parse_date(text: str, path: Path, line: int) -> dt.date:
    text = text.strip()
    m = re.fullmatch(r"(\d{1,2})/(\d{1,2})/(\d{2}|\d{4})", text)
    try:
        if m:
            day, month, year = (int(g) for g in m.groups())
            if len(m.group(3)) == 2:
                year += 2000
            return dt.date(year, month, day)
        return dt.date.fromisoformat(text)
    except ValueError:
        pass
    raise DataValidationError(
        f"{path}: line {line}: unreadable date {text!r} (expected d/m/yy, d/m/yyyy or yyyy-mm-dd)"
    )


def _parse_int(text: str, what: str, path: Path, line: int) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise DataValidationError(
            f"{path}: line {line}: {what} {text!r} is not an integer"
        ) from None


def _parse_coordinate(text: str, what: str, path: Path, line: int) -> float:
    text = text.strip()
    if not text:
        return float("nan")
    try:
        return float(text)
    except ValueError:
        raise DataValidationError(f"{path}: line {line}: {what} {text!r} is not a number") from None


def _parse_counts(cells: list[str], path: Path, line: int) -> np.ndarray:
    """96 counts; blank, ``-``-prefixed (negative) and non-finite cells -> NaN."""
    out = np.empty(SLOTS_PER_DAY, dtype=np.float64)
    for j, cell in enumerate(cells):
        cell = cell.strip()
        if not cell:
            out[j] = np.nan
            continue
        try:
            value = float(cell)
        except ValueError:
            raise DataValidationError(
                f"{path}: line {line}: non-numeric count {cell!r} in column {_COUNT_COLUMNS[j]}"
            ) from None
        out[j] = value if np.isfinite(value) and value >= 0 else np.nan
    return out


def _read_rows(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    raw = _read_bytes(path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    for _ in range(_HEADER_SEARCH_ROWS):
        try:
            row = next(reader)
        except StopIteration:
            break
        names = [c.strip() for c in row]
        if _COL_SITE in names and _COL_DATE in names:
            header = names
            break
    if header is None:
        raise DataValidationError(
            f"{path}: no header row with {_COL_SITE!r} and {_COL_DATE!r} in the first "
            f"{_HEADER_SEARCH_ROWS} rows (expected a banner row followed by the header)"
        )
    missing = [c for c in _REQUIRED if c not in header]
    if missing:
        shown = missing if len(missing) <= 8 else [*missing[:8], "..."]
        raise DataValidationError(
            f"{path}: missing column(s) {shown} ({len(missing)} in all); columns found: {header}"
        )
    rows = []
    for row in reader:
        if not any(c.strip() for c in row):
            continue
        rows.append((reader.line_num, row))
    return header, rows


# --------------------------------------------------------------------------- loader
def load_scats_counts(
    data_dir: PathLike | None = None,
    *,
    min_days: int = 14,
    outage_zero_fraction: float | None = 0.5,
) -> TrafficNetwork:
    """Load VicRoads SCATS 15-minute counts as one series per detector.

    Reads ``<data_dir>/traffic/scats_vicroads_2006/scats_counts_oct2006.csv``
    (also ``<data_dir>/scats_vicroads_2006/...``, ``<data_dir>/<file>``, or
    ``data_dir`` itself when it is the file; ``.gz`` copies are accepted). The
    file has a banner row, then a header with ``SCATS Number``, ``Location``,
    ``NB_LATITUDE``, ``NB_LONGITUDE``, ``VR Internal Loc`` (approach code),
    ``Date`` (d/m/yy) and ``V00..V95``, one row per (site, approach, day).

    Rules, applied in this order:

    1. A *detector* (node) is a ``(site, approach)`` pair. The ``Location``
       text is not used as a key: in the VicRoads file two approaches of site
       4335 share one text.
    2. Detectors with latitude or longitude 0, blank or out of range are
       dropped (``dropped["no_coordinates"]``); coordinates that differ
       between a detector's rows are an error.
    3. Missing values: a day without a row, a blank cell and a negative count
       (SCATS' marker for a faulty detector) are NaN.
    4. Network-wide outage rule (``outage_zero_fraction``): at a slot where at
       least that fraction of the detectors reporting (and at least 3) count
       exactly 0, those zeros are treated as missing (NaN). Such a slot is a
       recording gap, not empty roads: in the October 2006 file this is the
       hour skipped when daylight saving started (29 October, slots 01:45 to
       02:30 are 0 at about 80% of the detectors), while at other slots at
       most a few percent of the detectors count 0. ``None`` disables the rule.
    5. Detectors with fewer than ``min_days`` days holding a count are dropped
       (``dropped["too_few_days"]``).

    A :class:`UserWarning` says how many detectors were dropped and why.

    Parameters
    ----------
    data_dir : str, os.PathLike or None
        The data directory (or the file); ``None`` uses
        :func:`dp_proto.data.default_data_dir`.
    min_days : int, default 14
        Fewest days with at least one count for a detector to be kept.
    outage_zero_fraction : float in (0, 1] or None, default 0.5
        Threshold of the outage rule (4.); ``None`` keeps all zeros.

    Returns
    -------
    TrafficNetwork
        ``series (N, T)`` with ``T = 96 * days`` from the first to the last
        date of the file, detectors sorted by ``(site, approach)``.

    Raises
    ------
    FileNotFoundError
        If the file is not found (the message lists the paths tried).
    DataValidationError
        Missing header or columns, a row with too few fields, an unreadable
        site, approach, coordinate, date or count, two rows for the same
        detector and day, or coordinates that change between a detector's rows.
    ValueError
        If ``min_days`` or ``outage_zero_fraction`` is out of range.
    """
    min_days = _check_int("min_days", min_days, 0)
    if outage_zero_fraction is not None:
        outage_zero_fraction = float(outage_zero_fraction)
        if not 0 < outage_zero_fraction <= 1:
            raise ValueError(
                f"outage_zero_fraction must be in (0, 1] or None, got {outage_zero_fraction}"
            )
    path = _find_counts_file(data_dir)
    header, rows = _read_rows(path)
    col = {name: header.index(name) for name in _REQUIRED}
    loc_col = header.index(_COL_LOCATION) if _COL_LOCATION in header else None
    count_cols = [col[c] for c in _COUNT_COLUMNS]
    needed = max(col.values()) + 1

    days: dict[DetectorId, dict[dt.date, np.ndarray]] = {}
    coords: dict[DetectorId, tuple[float, float]] = {}
    names: dict[DetectorId, str] = {}
    for line, row in rows:
        if len(row) < needed:
            raise DataValidationError(
                f"{path}: line {line} has {len(row)} fields, the columns need at least {needed}"
            )
        site = _parse_int(row[col[_COL_SITE]], "site number", path, line)
        approach = _parse_int(row[col[_COL_APPROACH]], "approach (VR Internal Loc)", path, line)
        key = (site, approach)
        date = _parse_date(row[col[_COL_DATE]], path, line)
        lat = _parse_coordinate(row[col[_COL_LAT]], "latitude", path, line)
        lon = _parse_coordinate(row[col[_COL_LON]], "longitude", path, line)
        counts = _parse_counts([row[j] for j in count_cols], path, line)
        per_day = days.setdefault(key, {})
        if date in per_day:
            raise DataValidationError(
                f"{path}: line {line}: second row for detector (site {site}, approach "
                f"{approach}) on {date.isoformat()}"
            )
        per_day[date] = counts
        latlon = (lat, lon)
        if key in coords:
            if not np.allclose(coords[key], latlon, equal_nan=True, rtol=0, atol=1e-9):
                raise DataValidationError(
                    f"{path}: line {line}: detector (site {site}, approach {approach}) has "
                    f"coordinates {latlon}, earlier rows {coords[key]}"
                )
        else:
            coords[key] = latlon
            names[key] = row[loc_col].strip() if loc_col is not None else ""
    if not days:
        raise DataValidationError(f"{path}: no data rows after the header")

    all_dates = [d for per_day in days.values() for d in per_day]
    start = min(all_dates)
    n_days = (max(all_dates) - start).days + 1
    n_slots = n_days * SLOTS_PER_DAY

    def has_coordinates(key: DetectorId) -> bool:
        lat, lon = coords[key]
        finite = np.isfinite(lat) and np.isfinite(lon)
        in_range = finite and abs(lat) <= 90 and abs(lon) <= 180
        return bool(in_range and lat != 0 and lon != 0)

    all_keys = sorted(days)
    no_coords = [k for k in all_keys if not has_coordinates(k)]
    keys = [k for k in all_keys if has_coordinates(k)]

    series = np.full((len(keys), n_slots), np.nan, dtype=np.float64)
    for i, key in enumerate(keys):
        for date, counts in days[key].items():
            d = (date - start).days
            series[i, d * SLOTS_PER_DAY : (d + 1) * SLOTS_PER_DAY] = counts

    outage_slots = np.zeros(0, dtype=np.int64)
    n_outage = 0
    if outage_zero_fraction is not None and len(keys):
        reporting = np.isfinite(series).sum(axis=0)
        zeros = (series == 0).sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.where(reporting > 0, zeros / np.maximum(reporting, 1), 0.0)
        hit = (reporting >= _OUTAGE_MIN_DETECTORS) & (frac >= outage_zero_fraction) & (zeros > 0)
        outage_slots = np.flatnonzero(hit).astype(np.int64)
        if outage_slots.size:
            block = series[:, outage_slots]
            n_outage = int((block == 0).sum())
            block[block == 0] = np.nan
            series[:, outage_slots] = block

    per_day = np.isfinite(series.reshape(len(keys), n_days, SLOTS_PER_DAY)).any(axis=2)
    n_days_kept = per_day.sum(axis=1)
    keep = n_days_kept >= min_days
    too_few = [k for k, ok in zip(keys, keep, strict=True) if not ok]
    kept = [k for k, ok in zip(keys, keep, strict=True) if ok]
    series = np.ascontiguousarray(series[keep])

    dropped = {"no_coordinates": no_coords, "too_few_days": too_few}
    if no_coords or too_few:
        few_days = {k: int(n) for k, n in zip(keys, n_days_kept, strict=True) if n < min_days}
        warnings.warn(
            f"SCATS counts: kept {len(kept)} of {len(all_keys)} detectors; dropped "
            f"{len(no_coords)} without coordinates {no_coords} and {len(too_few)} with fewer "
            f"than {min_days} days of data {few_days}",
            UserWarning,
            stacklevel=2,
        )
    return TrafficNetwork(
        detectors=kept,
        locations=[names[k] for k in kept],
        coordinates=np.array([coords[k] for k in kept], dtype=np.float64).reshape(len(kept), 2),
        series=series,
        time=np.arange(n_slots, dtype=np.int64),
        start_date=start,
        dropped=dropped,
        outage_slots=outage_slots,
        n_outage_values=n_outage,
        source=str(path),
    )


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
    window = _check_int("window", window, 1)
    horizon = _check_int("horizon", horizon, 1)
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
        From :func:`load_scats_counts`.
    window : int, default 5
        Counts per window (``w = 5`` in Sachweh et al. 2021).
    horizon : int, default 1
        Steps ahead of the target (``r = 1`` in Sachweh et al. 2021: the next 15 minutes).
    bin_edges : sequence of float, default FLOW_BIN_EDGES
        Flow classes, see :func:`discretize_flow`.

    Returns
    -------
    list of NodeData
        In the order of ``network.detectors``. Windows touching a missing
        value are dropped (see :func:`sliding_windows`); ``time`` is the
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


# --------------------------------------------------------------------------- neighbours
def _check_coordinates(coordinates: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    c = np.asarray(coordinates, dtype=np.float64)
    if c.ndim != 2 or c.shape[1] != 2:
        raise ValueError(f"coordinates must have shape (N, 2) (lat, lon), got {c.shape}")
    if not np.all(np.isfinite(c)):
        raise DataValidationError("coordinates contain NaN or inf")
    if np.any(np.abs(c[:, 0]) > 90) or np.any(np.abs(c[:, 1]) > 180):
        raise DataValidationError(
            "coordinates out of range: latitude must be in [-90, 90], longitude in [-180, 180]"
        )
    return c


def haversine_distances(coordinates: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    """Great-circle distances between points given as (latitude, longitude) in degrees.

    Parameters
    ----------
    coordinates : array-like of shape (N, 2)

    Returns
    -------
    ndarray of shape (N, N), dtype float64
        Distances in km on a sphere of radius :data:`EARTH_RADIUS_KM`; symmetric,
        zero diagonal.
    """
    c = np.radians(_check_coordinates(coordinates))
    lat, lon = c[:, 0][:, None], c[:, 1][:, None]
    dlat = lat - lat.T
    dlon = lon - lon.T
    a = np.sin(dlat / 2) ** 2 + np.cos(lat) * np.cos(lat.T) * np.sin(dlon / 2) ** 2
    d = 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))
    d = (d + d.T) / 2  # exact symmetry
    np.fill_diagonal(d, 0.0)
    return d


def nearest_neighbours(
    coordinates: np.ndarray | Sequence[Sequence[float]],
    c: int,
    *,
    metric: str = "haversine",
) -> np.ndarray:
    """The ``c`` nearest other nodes of every node.

    Parameters
    ----------
    coordinates : array-like of shape (N, 2)
        Latitude and longitude in degrees.
    c : int
        Neighbours per node, ``1 <= c <= N - 1``.
    metric : {"haversine", "euclidean"}, default "haversine"
        Great-circle distance, or the Euclidean distance of the raw
        (lat, lon) degrees (the wording of Sachweh et al. 2021; at Melbourne's latitude it
        overweights latitude differences by about 1 / cos(37.8 deg) = 1.27).

    Returns
    -------
    ndarray of shape (N, c), dtype int64
        Row ``i``: indices of the neighbours of node ``i``, nearest first,
        never ``i`` itself. Distances are compared after rounding to 1e-6
        (km or degrees), and equal distances go to the lower index.

    Raises
    ------
    ValueError
        If ``c < 1`` or ``c >= N`` (not enough other nodes), bad shape or metric.
    DataValidationError
        Non-finite or out-of-range coordinates.
    """
    if not isinstance(c, numbers.Integral) or isinstance(c, bool):
        raise TypeError(f"c must be an int, got {type(c).__name__}")
    coords = _check_coordinates(coordinates)
    n = len(coords)
    if c < 1:
        raise ValueError(f"c must be >= 1, got {c}")
    if c >= n:
        raise ValueError(
            f"c={c} neighbours requested but there are only {n} nodes, so each node has "
            f"{n - 1} possible neighbours; use c <= {n - 1}"
        )
    if metric == "haversine":
        d = haversine_distances(coords)
    elif metric == "euclidean":
        diff = coords[:, None, :] - coords[None, :, :]
        d = np.sqrt((diff**2).sum(axis=2))
    else:
        raise ValueError(f"metric must be 'haversine' or 'euclidean', got {metric!r}")
    d = np.round(d, _DISTANCE_DECIMALS)
    np.fill_diagonal(d, np.inf)
    order = np.argsort(d, axis=1, kind="stable")  # stable: ties keep index order
    return np.ascontiguousarray(order[:, :c]).astype(np.int64)


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
        Time of each sample (e.g. :attr:`NodeData.time`); need not be sorted.
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
    n_folds = _check_int("n_folds", n_folds, 2)
    gap = _check_int("gap", gap, 0)
    t = as_time_index(time_index)
    if time_range is None:
        if t.size == 0:
            raise ValueError("time_index is empty; pass time_range to define the blocks")
        start, stop = int(t.min()), int(t.max()) + 1
    else:
        start, stop = (int(v) for v in time_range)
    if stop - start < n_folds:
        raise ValueError(
            f"time range [{start}, {stop}) has {stop - start} slots, fewer than n_folds={n_folds}"
        )
    if t.size and (t.min() < start or t.max() >= stop):
        raise ValueError(
            f"time_index has values outside time_range [{start}, {stop}): "
            f"min {t.min()}, max {t.max()}"
        )
    length = stop - start
    edges = [start + length * k // n_folds for k in range(n_folds + 1)]
    folds = []
    for k in range(n_folds):
        lo, hi = edges[k], edges[k + 1]
        test = (t >= lo) & (t < hi)
        train = (t < lo - gap) | (t >= hi + gap)
        folds.append((train, test))
    return folds
