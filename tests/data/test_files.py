"""Tests of dp_proto.data.loaders (mnist, uci): idx / MNIST and TSV / UCI readers."""

from __future__ import annotations

import gzip
import time
from pathlib import Path

import numpy as np
import pytest

from dp_proto.data import (
    UCI_DATASETS,
    default_data_dir,
    load_mnist,
    load_uci,
    read_idx,
    read_tsv,
)
from dp_proto.exceptions import DataValidationError


# --------------------------------------------------------------------------- read_idx
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, ">i2", ">i4", ">f4", ">f8"])
@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize("shape", [(5,), (4, 3, 2)])
def test_read_idx_roundtrip(tmp_path, write_idx, dtype, suffix, shape):
    rng = np.random.default_rng(1)
    arr = (rng.standard_normal(shape) * 50).astype(dtype)
    path = write_idx(tmp_path / f"a-idx{len(shape)}-ubyte{suffix}", arr)
    out = read_idx(path)
    assert out.shape == shape
    assert out.dtype == np.dtype(dtype).newbyteorder("=")
    assert out.dtype.isnative
    np.testing.assert_array_equal(out, arr)
    assert out.flags.writeable


def test_read_idx_detects_gzip_without_suffix(tmp_path, idx_bytes):
    arr = np.arange(12, dtype=np.uint8).reshape(3, 4)
    path = tmp_path / "noext"
    path.write_bytes(gzip.compress(idx_bytes(arr)))
    np.testing.assert_array_equal(read_idx(path), arr)


def test_read_idx_gz_suffix_but_not_gzip(tmp_path, idx_bytes):
    path = tmp_path / "x.gz"
    path.write_bytes(idx_bytes(np.zeros(3, dtype=np.uint8)))
    with pytest.raises(DataValidationError, match="not gzip"):
        read_idx(path)


@pytest.mark.parametrize(
    "magic",
    [b"\x01\x00\x08\x01", b"\x00\x01\x08\x01", b"\x00\x00\x07\x01", b"\x00\x00\x08\x00"],
    ids=["byte0", "byte1", "typecode", "ndim0"],
)
def test_read_idx_bad_magic(tmp_path, magic):
    path = tmp_path / "bad"
    path.write_bytes(magic + b"\x00\x00\x00\x01" + b"\x00")
    with pytest.raises(DataValidationError, match="bad idx magic number"):
        read_idx(path)


def test_read_idx_truncated_data(tmp_path, idx_bytes):
    data = idx_bytes(np.zeros((10, 28, 28), dtype=np.uint8))
    path = tmp_path / "t.gz"
    path.write_bytes(gzip.compress(data[:-5]))
    with pytest.raises(DataValidationError, match="truncated.*found 7835"):
        read_idx(path)


@pytest.mark.parametrize("n_bytes", [0, 3, 9])
def test_read_idx_truncated_header(tmp_path, idx_bytes, n_bytes):
    data = idx_bytes(np.zeros((2, 2, 2), dtype=np.uint8))
    path = tmp_path / "t"
    path.write_bytes(data[:n_bytes])
    with pytest.raises(DataValidationError, match="truncated"):
        read_idx(path)


def test_read_idx_truncated_gzip_stream(tmp_path, idx_bytes):
    gz = gzip.compress(idx_bytes(np.arange(1000, dtype=">i4")))
    path = tmp_path / "t.gz"
    path.write_bytes(gz[: len(gz) // 2])
    with pytest.raises(DataValidationError, match="truncated or corrupt gzip"):
        read_idx(path)


def test_read_idx_trailing_bytes(tmp_path, idx_bytes):
    path = tmp_path / "t"
    path.write_bytes(idx_bytes(np.zeros(4, dtype=np.uint8)) + b"\x00\x00")
    with pytest.raises(DataValidationError, match="2 trailing bytes"):
        read_idx(path)


def test_read_idx_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_idx(tmp_path / "nope")


# --------------------------------------------------------------------------- load_mnist
@pytest.mark.parametrize("layout", ["mnist_subdir", "flat"])
def test_load_mnist_fake(tmp_path, fake_mnist, layout):
    folder = tmp_path / "mnist" if layout == "mnist_subdir" else tmp_path
    arrays = fake_mnist(folder)
    X, y = load_mnist(tmp_path, "train")
    assert X.shape == (7, 28, 28) and X.dtype == np.uint8
    assert y.shape == (7,) and y.dtype == np.int64
    np.testing.assert_array_equal(X, arrays["train_X"])
    np.testing.assert_array_equal(y, arrays["train_y"])
    Xt, yt = load_mnist(str(tmp_path), split="test", flatten=True)
    assert Xt.shape == (3, 784) and Xt.dtype == np.uint8
    np.testing.assert_array_equal(Xt, arrays["test_X"].reshape(3, -1))
    np.testing.assert_array_equal(yt, arrays["test_y"])


def test_load_mnist_uncompressed(tmp_path, write_idx):
    X = np.full((2, 28, 28), 7, dtype=np.uint8)
    write_idx(tmp_path / "mnist" / "t10k-images-idx3-ubyte", X)
    write_idx(tmp_path / "mnist" / "t10k-labels-idx1-ubyte", np.array([1, 2], dtype=np.uint8))
    Xo, yo = load_mnist(tmp_path, "test")
    np.testing.assert_array_equal(Xo, X)
    assert yo.tolist() == [1, 2]


def test_load_mnist_missing_files_message(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        load_mnist(tmp_path, "train")
    msg = str(info.value)
    assert "download_mnist" in msg
    assert str(tmp_path / "mnist" / "train-images-idx3-ubyte.gz") in msg
    assert str(tmp_path / "train-labels-idx1-ubyte.gz") in msg


def test_load_mnist_missing_only_labels(tmp_path, fake_mnist):
    fake_mnist(tmp_path / "mnist")
    (tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(FileNotFoundError, match="t10k-labels") as info:
        load_mnist(tmp_path, "test")
    assert "t10k-images" not in str(info.value)


def test_load_mnist_label_count_mismatch(tmp_path, write_idx):
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", np.zeros((3, 28, 28), np.uint8))
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.zeros(2, np.uint8))
    with pytest.raises(DataValidationError, match="expected 3 labels"):
        load_mnist(tmp_path)


def test_load_mnist_bad_split(tmp_path):
    with pytest.raises(ValueError, match="split"):
        load_mnist(tmp_path, split="validation")


def test_load_mnist_uses_env_data_dir(tmp_path, fake_mnist, monkeypatch):
    fake_mnist(tmp_path / "mnist")
    monkeypatch.setenv("DP_PROTO_DATA_DIR", str(tmp_path))
    X, _ = load_mnist(split="test")
    assert X.shape == (3, 28, 28)


def test_load_mnist_no_data_dir(monkeypatch):
    monkeypatch.delenv("DP_PROTO_DATA_DIR", raising=False)
    with pytest.raises(FileNotFoundError, match="DP_PROTO_DATA_DIR"):
        load_mnist()


def test_default_data_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("DP_PROTO_DATA_DIR", raising=False)
    assert default_data_dir() is None
    monkeypatch.setenv("DP_PROTO_DATA_DIR", "")
    assert default_data_dir() is None
    monkeypatch.setenv("DP_PROTO_DATA_DIR", str(tmp_path))
    assert default_data_dir() == tmp_path


# --------------------------------------------------------------------------- read_tsv
def _write_tsv(path: Path, lines: list[str]) -> Path:
    text = "\n".join(lines) + "\n"
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["t.tsv", "t.tsv.gz"])
def test_read_tsv_basic(tmp_path, name):
    path = _write_tsv(tmp_path / name, ["a\tb\ttarget", "1\t2.5\t0", "3\t-4e1\t1", ""])
    X, y, names = read_tsv(path)
    assert names == ["a", "b"]
    assert X.dtype == np.float64 and X.shape == (2, 2)
    np.testing.assert_array_equal(X, [[1, 2.5], [3, -40]])
    assert y.dtype == np.int64 and y.tolist() == [0, 1]


def test_read_tsv_target_first_and_custom_name(tmp_path):
    path = _write_tsv(tmp_path / "t.tsv", ["cls\tx\ty", "2\t1\t2", "1\t3\t4"])
    X, y, names = read_tsv(path, target="cls")
    assert names == ["x", "y"]
    np.testing.assert_array_equal(X, [[1, 2], [3, 4]])
    assert y.tolist() == [2, 1]


def test_read_tsv_string_labels(tmp_path):
    path = _write_tsv(tmp_path / "t.tsv", ["x\ttarget", "1\tcat", "2\tdog", "3\tcat"])
    _, y, _ = read_tsv(path)
    assert y.dtype.kind == "U"
    assert y.tolist() == ["cat", "dog", "cat"]


def test_read_tsv_integral_float_labels_become_int(tmp_path):
    path = _write_tsv(tmp_path / "t.tsv", ["x\ttarget", "1\t1.0", "2\t3.0"])
    _, y, _ = read_tsv(path)
    assert y.dtype == np.int64 and y.tolist() == [1, 3]


def test_read_tsv_fractional_labels_stay_strings(tmp_path):
    path = _write_tsv(tmp_path / "t.tsv", ["x\ttarget", "1\t1.5", "2\t3"])
    _, y, _ = read_tsv(path)
    assert y.dtype.kind == "U"


def test_read_tsv_missing_target(tmp_path):
    path = _write_tsv(tmp_path / "t.tsv", ["alpha\tbeta\tlabel", "1\t2\t0"])
    with pytest.raises(DataValidationError, match="target") as info:
        read_tsv(path)
    msg = str(info.value)
    assert "alpha" in msg and "beta" in msg and "label" in msg


def test_read_tsv_non_numeric_value(tmp_path):
    path = _write_tsv(tmp_path / "t.tsv", ["a\tb\ttarget", "1\t2\t0", "3\t4\t1", "5\toops\t0"])
    with pytest.raises(DataValidationError) as info:
        read_tsv(path)
    msg = str(info.value)
    assert "'oops'" in msg and "'b'" in msg and "row 3" in msg and "line 4" in msg


def test_read_tsv_empty_feature_value(tmp_path):
    path = _write_tsv(tmp_path / "t.tsv", ["a\ttarget", "1\t0", "\t1"])
    with pytest.raises(DataValidationError, match="column 'a' at data row 2"):
        read_tsv(path)


def test_read_tsv_wrong_field_count(tmp_path):
    path = _write_tsv(tmp_path / "t.tsv", ["a\tb\ttarget", "1\t2\t0", "1\t0"])
    with pytest.raises(DataValidationError, match="line 3 has 2 fields"):
        read_tsv(path)


def test_read_tsv_empty_label(tmp_path):
    path = _write_tsv(tmp_path / "t.tsv", ["a\ttarget", "1\t0", "2\t"])
    with pytest.raises(DataValidationError, match="empty label"):
        read_tsv(path)


def test_read_tsv_empty_file(tmp_path):
    path = tmp_path / "t.tsv"
    path.write_text("")
    with pytest.raises(DataValidationError, match="empty"):
        read_tsv(path)


def test_read_tsv_header_only(tmp_path):
    path = _write_tsv(tmp_path / "t.tsv", ["a\tb\ttarget"])
    X, y, names = read_tsv(path)
    assert X.shape == (0, 2) and y.shape == (0,) and names == ["a", "b"]


def test_read_tsv_nan_allowed(tmp_path):
    path = _write_tsv(tmp_path / "t.tsv", ["a\ttarget", "nan\t0", "inf\t1"])
    X, _, _ = read_tsv(path)
    assert np.isnan(X[0, 0]) and np.isinf(X[1, 0])


# --------------------------------------------------------------------------- load_uci
@pytest.mark.parametrize("layout", ["uci", "flat"])
def test_load_uci_fake(tmp_path, layout):
    folder = tmp_path / "uci" if layout == "uci" else tmp_path
    folder.mkdir(exist_ok=True)
    _write_tsv(folder / "toy.tsv.gz", ["f1\tf2\ttarget", "1\t2\t5", "3\t4\t7"])
    X, y = load_uci("toy", tmp_path)
    np.testing.assert_array_equal(X, [[1, 2], [3, 4]])
    assert y.tolist() == [5, 7] and y.dtype == np.int64  # labels are not remapped


def test_load_uci_vowel_drops_bookkeeping_columns(tmp_path):
    header = ["Train or Test", "Speaker Number", "Sex"] + [f"Feature {i}" for i in range(10)]
    rows = ["\t".join(header + ["target"])]
    for r in range(4):
        rows.append("\t".join(["1", str(r), "0"] + [str(r * 10 + i) for i in range(10)] + [str(r)]))
    (tmp_path / "uci").mkdir()
    _write_tsv(tmp_path / "uci" / "vowel.tsv.gz", rows)
    X, y = load_uci("vowel", tmp_path)
    assert X.shape == (4, 10)
    np.testing.assert_array_equal(X[2], np.arange(20, 30))
    assert y.tolist() == [0, 1, 2, 3]


def test_load_uci_vowel_unexpected_columns(tmp_path):
    _write_tsv(tmp_path / "vowel.tsv.gz", ["a\tb\ttarget", "1\t2\t0"])
    with pytest.raises(DataValidationError, match="expected 13 columns"):
        load_uci("vowel", tmp_path)


def test_load_uci_missing(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        load_uci("segmentation", tmp_path)
    msg = str(info.value)
    assert str(tmp_path / "uci" / "segmentation.tsv.gz") in msg
    assert "download_uci" in msg and "optdigits" in msg


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".."])
def test_load_uci_bad_name(tmp_path, name):
    with pytest.raises(ValueError, match="name"):
        load_uci(name, tmp_path)


# --------------------------------------------------------------------------- real data
@pytest.mark.data
def test_real_mnist(real_data_dir):
    if not (real_data_dir / "mnist").is_dir():
        pytest.skip("no mnist folder in the data directory")
    start = time.perf_counter()
    X, y = load_mnist(real_data_dir, "train")
    elapsed = time.perf_counter() - start
    assert X.shape == (60000, 28, 28) and X.dtype == np.uint8
    assert y.shape == (60000,) and y.dtype == np.int64
    assert set(np.unique(y).tolist()) == set(range(10))
    assert elapsed < 5.0  # ~0.3 s normally; generous bound for loaded machines
    Xt, yt = load_mnist(real_data_dir, "test", flatten=True)
    assert Xt.shape == (10000, 784) and yt.shape == (10000,)
    assert set(np.unique(yt).tolist()) == set(range(10))
    assert Xt.max() == 255


@pytest.mark.data
@pytest.mark.parametrize("name", sorted(UCI_DATASETS))
def test_real_uci(real_data_dir, name):
    if not (real_data_dir / "uci" / f"{name}.tsv.gz").is_file():
        pytest.skip(f"{name} not in the data directory")
    n, d, k = UCI_DATASETS[name]
    X, y = load_uci(name, real_data_dir)
    assert X.shape == (n, d) and X.dtype == np.float64
    assert y.shape == (n,) and y.dtype == np.int64
    assert len(np.unique(y)) == k
    assert np.all(np.isfinite(X))


@pytest.mark.data
def test_real_uci_details(real_data_dir):
    if not (real_data_dir / "uci").is_dir():
        pytest.skip("no uci folder in the data directory")
    _, y = load_uci("segmentation", real_data_dir)
    assert np.all(np.bincount(y) == 330)
    X, y = load_uci("vowel", real_data_dir)
    assert X.shape[1] == 10
    assert np.all(np.bincount(y) == 90)
    _, y = load_uci("satimage", real_data_dir)
    assert sorted(np.unique(y).tolist()) == [1, 2, 3, 4, 5, 7]
