"""VicRoads SCATS loop-detector counts (``scats_counts_oct2006.csv``) -> ``TrafficNetwork``:
one 15-minute series per detector on a global grid of slots, NaN where missing;
detectors without coordinates or with too few days are dropped and listed. Only numpy
and ``csv`` are used; nothing touches the network."""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dp_proto.data._checks import _check_count
from dp_proto.data.loaders.common import PathLike, _read_bytes, _resolve_data_dir
from dp_proto.exceptions import DataValidationError

DetectorId = tuple[int, int]

__all__ = ["SLOTS_PER_DAY", "SCATS_COUNTS_FILE", "TrafficNetwork", "load_scats_counts"]


#: Number of 15-minute slots (columns ``V00..V95``) per day.
SLOTS_PER_DAY = 96


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
        ``load_scats_counts`` turned zero counts into NaN.
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


# --------------------------------------------------------------------------- reading
def _find_counts_file(data_dir: PathLike | None) -> Path:
    hint = (
        f"Expected the VicRoads SCATS counts (scats_counts_oct2006.csv) in <data_dir>/{SCATS_COUNTS_FILE.as_posix()}."
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
        raise DataValidationError(f"{path}: line {line}: {what} {text!r} is not an integer") from None


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
        raise DataValidationError(f"{path}: missing column(s) {shown} ({len(missing)} in all); columns found: {header}")
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

    A ``UserWarning`` says how many detectors were dropped and why.

    Parameters
    ----------
    data_dir : str, os.PathLike or None
        The data directory (or the file); ``None`` uses
        ``dp_proto.data.default_data_dir``.
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
    min_days = _check_count("min_days", min_days, 0)
    if outage_zero_fraction is not None:
        outage_zero_fraction = float(outage_zero_fraction)
        if not 0 < outage_zero_fraction <= 1:
            raise ValueError(f"outage_zero_fraction must be in (0, 1] or None, got {outage_zero_fraction}")
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
            raise DataValidationError(f"{path}: line {line} has {len(row)} fields, the columns need at least {needed}")
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
                f"{path}: line {line}: second row for detector (site {site}, approach {approach}) on {date.isoformat()}"
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
