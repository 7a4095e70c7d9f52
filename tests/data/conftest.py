"""Fixtures for the dp_proto.data tests: tiny fake files (``real_data_dir`` is in tests/conftest.py)."""

from __future__ import annotations

import gzip
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

_IDX_CODES = {
    np.dtype(np.uint8): 0x08,
    np.dtype(np.int8): 0x09,
    np.dtype(">i2"): 0x0B,
    np.dtype(">i4"): 0x0C,
    np.dtype(">f4"): 0x0D,
    np.dtype(">f8"): 0x0E,
}


def _idx_bytes(arr: np.ndarray) -> bytes:
    """Encode ``arr`` in the idx format (big-endian header and data)."""
    arr = np.asarray(arr)
    be = arr.dtype.newbyteorder(">") if arr.dtype.itemsize > 1 else arr.dtype
    code = _IDX_CODES[np.dtype(be)]
    header = bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return header + arr.astype(be).tobytes(order="C")


@pytest.fixture
def idx_bytes() -> Callable[[np.ndarray], bytes]:
    """``idx_bytes(arr)``: the idx encoding of ``arr``."""
    return _idx_bytes


@pytest.fixture
def write_idx() -> Callable[[Path, np.ndarray], Path]:
    """``write_idx(path, arr)``: write ``arr`` as idx, gzipped when ``path`` ends in .gz."""

    def _write(path: Path, arr: np.ndarray) -> Path:
        data = _idx_bytes(arr)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
        return path

    return _write


@pytest.fixture
def fake_mnist() -> Callable[[Path], dict[str, np.ndarray]]:
    """``fake_mnist(folder)``: write four tiny gzipped MNIST-format files into ``folder``.

    Returns the arrays by key ``train_X``, ``train_y``, ``test_X``, ``test_y``
    (7 train and 3 test images of 28 x 28).
    """

    def _make(folder: Path) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(0)
        arrays = {
            "train_X": rng.integers(0, 256, (7, 28, 28), dtype=np.uint8),
            "train_y": rng.integers(0, 10, 7).astype(np.uint8),
            "test_X": rng.integers(0, 256, (3, 28, 28), dtype=np.uint8),
            "test_y": rng.integers(0, 10, 3).astype(np.uint8),
        }
        names = {
            "train_X": "train-images-idx3-ubyte.gz",
            "train_y": "train-labels-idx1-ubyte.gz",
            "test_X": "t10k-images-idx3-ubyte.gz",
            "test_y": "t10k-labels-idx1-ubyte.gz",
        }
        folder.mkdir(parents=True, exist_ok=True)
        for key, name in names.items():
            (folder / name).write_bytes(gzip.compress(_idx_bytes(arrays[key])))
        return arrays

    return _make
