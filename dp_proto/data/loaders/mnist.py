"""MNIST from idx files in ``<data_dir>/mnist/`` (or ``<data_dir>``), gzipped or not."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dp_proto.data.loaders.common import PathLike, _read_bytes, _resolve_data_dir
from dp_proto.exceptions import DataValidationError

__all__ = ["IDX_DTYPES", "MNIST_FILES", "read_idx", "load_mnist"]


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
        raise DataValidationError(f"{path}: truncated idx file ({len(data)} bytes, the magic number needs 4)")
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
            f"{path}: truncated idx file: header needs {header} bytes for {ndim} dimensions, file has {len(data)}"
        )
    dims = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    dtype = IDX_DTYPES[code]
    count = int(np.prod(dims, dtype=np.int64))
    expected = count * dtype.itemsize
    actual = len(data) - header
    if actual < expected:
        raise DataValidationError(
            f"{path}: truncated idx file: shape {dims} of {dtype.name} needs {expected} data bytes, found {actual}"
        )
    if actual > expected:
        raise DataValidationError(
            f"{path}: idx file has {actual - expected} trailing bytes after the {expected} data bytes of shape {dims}"
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
        The data directory; ``None`` uses ``default_data_dir``.
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
        ``dp_proto.data.download_mnist``.
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
            f"{found['images']}: expected a 3-d uint8 image array, got shape {X.shape} dtype {X.dtype}"
        )
    if y.ndim != 1 or len(y) != len(X):
        raise DataValidationError(f"{found['labels']}: expected {len(X)} labels (one per image), got shape {y.shape}")
    if flatten:
        X = X.reshape(len(X), -1)
    return X, y.astype(np.int64)
