"""Readers for benchmark files kept in a local data directory.

A *data directory* holds the files laid out like this::

    <data_dir>/mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz
    <data_dir>/uci/<name>.tsv.gz

The loaders also look for the files directly in ``<data_dir>``. Nothing here
touches the network; :mod:`dp_proto.data.download` fetches the files for users
with internet. Only numpy, :mod:`csv` and :mod:`gzip` are used.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import zlib
from pathlib import Path

import numpy as np

from dp_proto.exceptions import DataValidationError

__all__ = [
    "DATA_DIR_ENV_VAR",
    "IDX_DTYPES",
    "MNIST_FILES",
    "UCI_DATASETS",
    "default_data_dir",
    "load_mnist",
    "load_uci",
    "read_idx",
    "read_tsv",
]

PathLike = str | os.PathLike

#: Environment variable naming the default data directory.
DATA_DIR_ENV_VAR = "DP_PROTO_DATA_DIR"

#: idx type codes (third byte of the magic number) -> big-endian numpy dtype.
IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

#: File names of the four MNIST files, by (split, kind).
MNIST_FILES: dict[tuple[str, str], str] = {
    ("train", "images"): "train-images-idx3-ubyte.gz",
    ("train", "labels"): "train-labels-idx1-ubyte.gz",
    ("test", "images"): "t10k-images-idx3-ubyte.gz",
    ("test", "labels"): "t10k-labels-idx1-ubyte.gz",
}

#: UCI data sets known to :func:`load_uci`: name -> (n_samples, n_features, n_classes)
#: as returned by :func:`load_uci` (vowel: after dropping its 3 bookkeeping columns).
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

_GZIP_MAGIC = b"\x1f\x8b"


# --------------------------------------------------------------------------- helpers
def default_data_dir() -> Path | None:
    """The data directory named by the environment, if any.

    Returns
    -------
    pathlib.Path or None
        ``Path($DP_PROTO_DATA_DIR)`` (with ``~`` expanded) if that variable is
        set and non-empty, else ``None``.
    """
    value = os.environ.get(DATA_DIR_ENV_VAR, "").strip()
    return Path(value).expanduser() if value else None


def _resolve_data_dir(data_dir: PathLike | None, hint: str) -> Path:
    if data_dir is not None:
        return Path(data_dir).expanduser()
    env = default_data_dir()
    if env is None:
        raise FileNotFoundError(
            f"no data directory given and ${DATA_DIR_ENV_VAR} is not set; pass data_dir "
            f"or set ${DATA_DIR_ENV_VAR}. {hint}"
        )
    return env


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"data set name must be a non-empty str, got {name!r}")
    name = name.strip()
    if "/" in name or "\\" in name or name in (".", ".."):
        raise ValueError(f"data set name must not contain path separators: {name!r}")
    return name


def _read_bytes(path: Path) -> bytes:
    """Read a file, transparently gunzipping it when it starts with the gzip magic."""
    raw = path.read_bytes()
    if raw[:2] == _GZIP_MAGIC:
        try:
            return gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as exc:
            raise DataValidationError(f"{path}: truncated or corrupt gzip stream ({exc})") from exc
    if path.suffix == ".gz":
        raise DataValidationError(f"{path}: has a .gz suffix but is not gzip-compressed")
    return raw


# --------------------------------------------------------------------------- idx / MNIST
def read_idx(path: PathLike) -> np.ndarray:
    """Read an array stored in the idx format of the MNIST files.

    The file may be gzip-compressed (detected from its first bytes, whatever
    its suffix). The magic number is ``0x00 0x00 <type code> <ndim>``, followed
    by ``ndim`` big-endian uint32 sizes and the big-endian data in C order.

    Parameters
    ----------
    path : str or os.PathLike
        The idx file (e.g. ``train-images-idx3-ubyte.gz``).

    Returns
    -------
    ndarray of shape (d_1, ..., d_ndim)
        A writable array in native byte order; dtype given by the type code
        (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32,
        0x0E float64). MNIST images: (n, 28, 28) uint8; labels: (n,) uint8.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    DataValidationError
        Bad magic number, unknown type code, or a file whose length does not
        match its header (truncated, or trailing bytes).
    """
    path = Path(path)
    data = _read_bytes(path)
    if len(data) < 4:
        raise DataValidationError(
            f"{path}: truncated idx file ({len(data)} bytes, the magic number needs 4)"
        )
    zero0, zero1, code, ndim = data[0], data[1], data[2], data[3]
    if zero0 != 0 or zero1 != 0 or code not in IDX_DTYPES or ndim == 0:
        raise DataValidationError(
            f"{path}: bad idx magic number 0x{data[:4].hex()}; expected 0x0000 followed by a "
            f"type code ({', '.join(f'0x{c:02x}' for c in IDX_DTYPES)}) and a number of "
            f"dimensions >= 1"
        )
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataValidationError(
            f"{path}: truncated idx file: header needs {header} bytes for {ndim} dimensions, "
            f"file has {len(data)}"
        )
    dims = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    dtype = IDX_DTYPES[code]
    count = int(np.prod(dims, dtype=np.int64))
    expected = count * dtype.itemsize
    actual = len(data) - header
    if actual < expected:
        raise DataValidationError(
            f"{path}: truncated idx file: shape {dims} of {dtype.name} needs {expected} data "
            f"bytes, found {actual}"
        )
    if actual > expected:
        raise DataValidationError(
            f"{path}: idx file has {actual - expected} trailing bytes after the {expected} "
            f"data bytes of shape {dims}"
        )
    arr = np.frombuffer(data, dtype=dtype, count=count, offset=header).reshape(dims)
    # Copy to native byte order; also makes the array writable (frombuffer of bytes is not).
    return arr.astype(dtype.newbyteorder("="), copy=True)


def _mnist_candidates(root: Path, filename: str) -> list[Path]:
    plain = filename.removesuffix(".gz")
    return [root / "mnist" / filename, root / filename, root / "mnist" / plain, root / plain]


def load_mnist(
    data_dir: PathLike | None = None,
    split: str = "train",
    flatten: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Load MNIST from idx files in a data directory.

    Looks for ``{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz`` first in
    ``data_dir/mnist/`` and then directly in ``data_dir`` (uncompressed files
    without ``.gz`` are accepted as well).

    Parameters
    ----------
    data_dir : str, os.PathLike or None
        The data directory; ``None`` uses :func:`default_data_dir`.
    split : {"train", "test"}
        ``"train"`` (60000 images) or ``"test"`` (the 10000 ``t10k`` images).
    flatten : bool, default False
        Return images as rows of 784 pixels instead of 28 x 28.

    Returns
    -------
    X : ndarray of shape (n, 28, 28), or (n, 784) if ``flatten``, dtype uint8
        Grey values 0..255 (not scaled).
    y : ndarray of shape (n,), dtype int64
        Digit labels 0..9.

    Raises
    ------
    ValueError
        If ``split`` is not ``"train"`` or ``"test"``.
    FileNotFoundError
        If a file is missing; the message lists the paths tried and points to
        :func:`dp_proto.data.download_mnist`.
    DataValidationError
        If the files are corrupt or inconsistent.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    hint = "Use dp_proto.data.download_mnist(data_dir) to fetch the files (needs internet)."
    root = _resolve_data_dir(data_dir, hint)

    found: dict[str, Path] = {}
    tried: list[Path] = []
    for kind in ("images", "labels"):
        candidates = _mnist_candidates(root, MNIST_FILES[(split, kind)])
        hit = next((p for p in candidates if p.is_file()), None)
        if hit is None:
            tried.extend(candidates)
        else:
            found[kind] = hit
    if tried:
        listing = "\n  ".join(str(p) for p in tried)
        raise FileNotFoundError(f"MNIST {split} files not found; tried:\n  {listing}\n{hint}")

    X = read_idx(found["images"])
    y = read_idx(found["labels"])
    if X.ndim != 3 or X.dtype != np.uint8:
        raise DataValidationError(
            f"{found['images']}: expected a 3-d uint8 image array, got shape {X.shape} "
            f"dtype {X.dtype}"
        )
    if y.ndim != 1 or len(y) != len(X):
        raise DataValidationError(
            f"{found['labels']}: expected {len(X)} labels (one per image), got shape {y.shape}"
        )
    if flatten:
        X = X.reshape(len(X), -1)
    return X, y.astype(np.int64)


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
            raise DataValidationError(
                f"{path}: line {reader.line_num} has {len(row)} fields, the header has {n_cols}"
            )
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
    :data:`UCI_DATASETS`: segmentation, optdigits, pendigits, letter,
    satimage, vowel, shuttle, iris, wine_recognition; any other name works if
    its file exists (e.g. one fetched with :func:`dp_proto.data.download_uci`).

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
        The data directory; ``None`` uses :func:`default_data_dir`.

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
            f"UCI data set {name!r} not found; tried:\n  {listing}\n"
            f"Known names: {', '.join(UCI_DATASETS)}. {hint}"
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
