"""UCI tables as tab-separated files in ``<data_dir>/uci/<name>.tsv.gz``, and the class
merging the kernel-support experiments of Park (2022) use (UCI shuttle in 3 classes)."""

from __future__ import annotations

import csv
import io
import numbers
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from dp_proto.data.loaders.common import PathLike, _check_name, _read_bytes, _resolve_data_dir
from dp_proto.exceptions import DataValidationError

__all__ = [
    "UCI_DATASETS",
    "read_tsv",
    "load_uci",
    "SHUTTLE_CLASS_NAMES",
    "SHUTTLE_3CLASS_MAPPING",
    "merge_classes",
    "load_shuttle_3class",
]


#: UCI data sets known to ``load_uci``: name -> (n_samples, n_features, n_classes)
#: as returned by ``load_uci`` (vowel: after dropping its 3 bookkeeping columns).
UCI_DATASETS: dict[str, tuple[int, int, int]] = {
    "segmentation": (2310, 19, 7),
    "optdigits": (5620, 64, 10),
    "pendigits": (10992, 16, 10),
    "letter": (20000, 16, 26),
    "satimage": (6435, 36, 6),
    "vowel": (990, 10, 11),
    "shuttle": (58000, 9, 7),
    "iris": (150, 4, 3),
    "wine_recognition": (178, 13, 3),
}


# Leading feature columns that are bookkeeping, not features: dropped by load_uci.
# Deterding vowel: "Train or Test" flag, "Speaker Number", "Sex".
_UCI_DROP_LEADING: dict[str, int] = {"vowel": 3}


_UCI_EXPECTED_RAW_FEATURES: dict[str, int] = {"vowel": 13}


# --------------------------------------------------------------------------- tsv / UCI
def _parse_labels(values: np.ndarray, path: Path, target: str, first_line: int) -> np.ndarray:
    """Labels as int64 when they are all integers (``"3"`` or ``"3.0"``), else strings."""
    empty = np.flatnonzero(values == "")
    if empty.size:
        i = int(empty[0])
        raise DataValidationError(
            f"{path}: empty label in column {target!r} at data row {i + 1} (line {first_line + i})"
        )
    try:
        return values.astype(np.int64)
    except (ValueError, OverflowError):
        pass
    try:
        as_float = values.astype(np.float64)
    except ValueError:
        return values
    if np.all(np.isfinite(as_float)) and np.all(as_float == np.round(as_float)):
        return as_float.astype(np.int64)
    return values


def _find_bad_cell(cells: np.ndarray) -> tuple[int, int, str]:
    """(row, column, value) of the first cell that does not parse as a float."""
    for j in range(cells.shape[1]):
        col = cells[:, j]
        try:
            col.astype(np.float64)
        except ValueError:
            for i, value in enumerate(col):
                try:
                    float(value)
                except ValueError:
                    return i, j, str(value)
    raise AssertionError("unreachable: no bad cell found")  # pragma: no cover


def read_tsv(path: PathLike, target: str = "target") -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Read a tab-separated table with a header row and a label column.

    Parameters
    ----------
    path : str or os.PathLike
        The file, optionally gzip-compressed (detected from its first bytes).
        Blank lines are ignored; every other line must have as many fields as
        the header.
    target : str, default "target"
        Name of the label column (it may be at any position).

    Returns
    -------
    X : ndarray of shape (n_samples, n_features), dtype float64
        All columns except ``target``, in file order.
    y : ndarray of shape (n_samples,)
        Labels: int64 if every label is an integer (``"3"`` or ``"3.0"``),
        otherwise the labels as a numpy string array.
    feature_names : list of str
        Header names of the columns of ``X``.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    DataValidationError
        Empty file, missing ``target`` column (the message lists the columns
        found), a row with the wrong number of fields, an empty label, or a
        non-numeric feature value (the message names column and row).
    """
    path = Path(path)
    text = _read_bytes(path).decode("utf-8-sig")
    reader = csv.reader(io.StringIO(text), delimiter="\t")
    try:
        header = [name.strip() for name in next(reader)]
    except StopIteration:
        raise DataValidationError(f"{path}: empty file (no header row)") from None
    if target not in header:
        raise DataValidationError(f"{path}: no target column {target!r}; columns found: {header}")
    if header.count(target) > 1:
        raise DataValidationError(f"{path}: target column {target!r} appears more than once")
    n_cols = len(header)
    t_idx = header.index(target)
    feature_idx = [j for j in range(n_cols) if j != t_idx]
    feature_names = [header[j] for j in feature_idx]

    rows: list[list[str]] = []
    line_numbers: list[int] = []
    for row in reader:
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) != n_cols:
            raise DataValidationError(f"{path}: line {reader.line_num} has {len(row)} fields, the header has {n_cols}")
        rows.append(row)
        line_numbers.append(reader.line_num)

    if not rows:
        return (
            np.empty((0, len(feature_idx)), dtype=np.float64),
            np.empty(0, dtype=np.int64),
            feature_names,
        )
    cells = np.char.strip(np.array(rows, dtype=str))
    features = cells[:, feature_idx]
    try:
        X = features.astype(np.float64)
    except ValueError:
        i, j, value = _find_bad_cell(features)
        raise DataValidationError(
            f"{path}: non-numeric value {value!r} in column {feature_names[j]!r} at data row "
            f"{i + 1} (line {line_numbers[i]})"
        ) from None
    y = _parse_labels(cells[:, t_idx], path, target, line_numbers[0])
    return np.ascontiguousarray(X), y, feature_names


def load_uci(name: str, data_dir: PathLike | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Load a UCI benchmark stored as ``<name>.tsv.gz`` in a data directory.

    Reads ``data_dir/uci/<name>.tsv.gz``, else ``data_dir/<name>.tsv.gz``
    (uncompressed ``.tsv`` is accepted too). The known names are the keys of
    ``UCI_DATASETS``: segmentation, optdigits, pendigits, letter,
    satimage, vowel, shuttle, iris, wine_recognition; any other name works if
    its file exists (e.g. one fetched with ``dp_proto.data.download_uci``).

    ``"vowel"``: the file's first three columns are bookkeeping (train/test
    flag, speaker number, sex) and are dropped, leaving the 10 acoustic
    features (990 x 10, 11 classes).

    Labels are returned as the file gives them (e.g. satimage keeps 1-5 and 7,
    wine_recognition 1-3); they are not remapped to ``0..K-1``.

    Parameters
    ----------
    name : str
        Data set name (file stem without ``.tsv.gz``).
    data_dir : str, os.PathLike or None
        The data directory; ``None`` uses ``default_data_dir``.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features), dtype float64
    y : ndarray of shape (n_samples,)
        int64 for integer labels, else a string array.

    Raises
    ------
    FileNotFoundError
        If no file is found (the message lists the paths tried).
    DataValidationError
        If the file is malformed.
    """
    name = _check_name(name)
    hint = "Use dp_proto.data.download_uci(name, data_dir, url) to fetch a file."
    root = _resolve_data_dir(data_dir, hint)
    candidates = [
        root / "uci" / f"{name}.tsv.gz",
        root / f"{name}.tsv.gz",
        root / "uci" / f"{name}.tsv",
        root / f"{name}.tsv",
    ]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        listing = "\n  ".join(str(p) for p in candidates)
        raise FileNotFoundError(
            f"UCI data set {name!r} not found; tried:\n  {listing}\nKnown names: {', '.join(UCI_DATASETS)}. {hint}"
        )
    X, y, _ = read_tsv(path)
    drop = _UCI_DROP_LEADING.get(name, 0)
    if drop:
        expected = _UCI_EXPECTED_RAW_FEATURES[name]
        if X.shape[1] != expected:
            raise DataValidationError(
                f"{path}: expected {expected} columns besides 'target' for {name!r} "
                f"(the first {drop} are dropped), found {X.shape[1]}"
            )
        X = np.ascontiguousarray(X[:, drop:])
    return X, y


# --------------------------------------------------------------------------- class merging
#: Names of the seven classes of the UCI Statlog shuttle data (labels 1..7).
SHUTTLE_CLASS_NAMES: dict[int, str] = {
    1: "Rad Flow",
    2: "Fpv Close",
    3: "Fpv Open",
    4: "High",
    5: "Bypass",
    6: "Bpv Close",
    7: "Bpv Open",
}


#: Shuttle label (1..7) -> merged label (0..2) of ``load_shuttle_3class``.
#: Park (2022, Section 7.2) "divided shuttle into three classes to alleviate the
#: class imbalance" without giving the mapping. We keep the two large classes and
#: pool the rest: 0 = Rad Flow (1; 45586 rows), 1 = High (4; 8903 rows),
#: 2 = Bypass (5; 3267) with the four rare classes Fpv Close, Fpv Open,
#: Bpv Close, Bpv Open (2, 3, 6, 7; 244 rows together) -> 3511 rows.
SHUTTLE_3CLASS_MAPPING: dict[int, int] = {1: 0, 4: 1, 5: 2, 2: 2, 3: 2, 6: 2, 7: 2}


def merge_classes(y: np.ndarray, mapping: Mapping[object, int]) -> np.ndarray:
    """Relabel ``y`` through ``mapping`` (several old labels may share a new one).

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        Labels (ints or strings).
    mapping : mapping old label -> new int label
        Must cover every label that occurs in ``y``; new labels must be ints.

    Returns
    -------
    ndarray of shape (n_samples,), dtype int64

    Raises
    ------
    ValueError
        If ``y`` is not 1-D, or holds a label that ``mapping`` does not cover
        (the message lists them).
    TypeError
        If a new label is not an int.
    """
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"y must be 1-D, got shape {y.shape}")
    for old, new in mapping.items():
        if not isinstance(new, numbers.Integral) or isinstance(new, bool):
            raise TypeError(f"mapping values must be ints, got {new!r} for label {old!r}")
    classes, inverse = np.unique(y, return_inverse=True)
    keys = [c.item() for c in classes]  # numpy scalars -> Python int / float / str
    missing = [k for k in keys if k not in mapping]
    if missing:
        raise ValueError(f"labels {missing} occur in y but are not in the mapping (covers {list(mapping)})")
    lookup = np.array([int(mapping[k]) for k in keys], dtype=np.int64)
    return lookup[inverse.reshape(-1)]


def load_shuttle_3class(
    data_dir: str | os.PathLike | None = None,
    mapping: Mapping[int, int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """UCI Statlog shuttle with its 7 classes merged to 3 (Park 2022, Section 7.2).

    Reads ``data_dir/uci/shuttle.tsv.gz`` through ``dp_proto.data.load_uci``
    (58000 x 9; rows 0..43499 are the original ``shuttle.trn`` file, rows
    43500.. ``shuttle.tst``) and relabels with ``SHUTTLE_3CLASS_MAPPING``:
    0 = Rad Flow (45586 rows), 1 = High (8903), 2 = Bypass and the four rare
    classes (3511). Park (2022) does not state its mapping; this one is ours
    (documented in the data-set card, datasets/uci-shuttle.md).

    Parameters
    ----------
    data_dir : str, os.PathLike or None
        The data directory; ``None`` uses ``$DP_PROTO_DATA_DIR``.
    mapping : mapping int -> int, optional
        Another merge of the labels 1..7 (default ``SHUTTLE_3CLASS_MAPPING``).

    Returns
    -------
    X : ndarray of shape (58000, 9), dtype float64
        The raw (unscaled) features, in file order.
    y : ndarray of shape (58000,), dtype int64
        Merged labels.

    Raises
    ------
    FileNotFoundError
        If the shuttle file is not in the data directory.
    DataValidationError
        If the file is malformed.
    ValueError
        If the file holds a label the mapping does not cover.
    """
    X, y = load_uci("shuttle", data_dir)
    return np.asarray(X, dtype=np.float64), merge_classes(y, mapping or SHUTTLE_3CLASS_MAPPING)
