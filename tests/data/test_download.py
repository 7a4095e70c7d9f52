"""Tests of dp_proto.data.download, all offline (``file://`` URLs and fake openers)."""

from __future__ import annotations

import gzip
import hashlib
import io
import shutil
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from dp_proto.data import (
    MNIST_MD5,
    ChecksumError,
    DownloadError,
    download_mnist,
    download_uci,
    load_mnist,
    load_uci,
)

MNIST_NAMES = [
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
]


def _md5s(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in folder.iterdir()}


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".part")] if folder.exists() else []


class CountingOpener:
    """An opener that records the URLs it opens and delegates to urllib."""

    def __init__(self) -> None:
        self.urls: list[str] = []

    def __call__(self, url: str):
        self.urls.append(url)
        return urllib.request.urlopen(url)


@pytest.fixture
def server(tmp_path, fake_mnist):
    """A folder of fake MNIST files standing in for a mirror, and its file:// URL."""
    folder = tmp_path / "server"
    arrays = fake_mnist(folder)
    return folder, folder.as_uri(), arrays


def test_canonical_md5s():
    assert MNIST_MD5 == {
        "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
        "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
        "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
        "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
    }


def test_download_mnist_file_url(tmp_path, server):
    folder, url, arrays = server
    data_dir = tmp_path / "data"
    paths = download_mnist(data_dir, base_url=url, checksums=_md5s(folder), progress=True)
    assert paths == [data_dir / "mnist" / n for n in MNIST_NAMES]
    for p in paths:
        assert p.read_bytes() == (folder / p.name).read_bytes()
    assert _leftovers(data_dir / "mnist") == []
    X, y = load_mnist(data_dir, "train")
    np.testing.assert_array_equal(X, arrays["train_X"])
    np.testing.assert_array_equal(y, arrays["train_y"])


def test_download_mnist_trailing_slash_and_no_checksums(tmp_path, server):
    _, url, _ = server
    paths = download_mnist(tmp_path / "d", base_url=url + "/", checksums=None, progress=False)
    assert all(p.is_file() for p in paths)


def test_download_mnist_skips_existing_and_force(tmp_path, server):
    folder, url, _ = server
    data_dir = tmp_path / "data"
    download_mnist(data_dir, base_url=url, checksums=None, progress=False)
    target = data_dir / "mnist" / "t10k-labels-idx1-ubyte.gz"
    target.write_bytes(b"local copy")

    opener = CountingOpener()
    download_mnist(data_dir, base_url=url, checksums=None, opener=opener, progress=False)
    assert opener.urls == []  # all four exist: nothing fetched
    assert target.read_bytes() == b"local copy"

    target.write_bytes(b"")  # an empty file counts as missing
    download_mnist(data_dir, base_url=url, checksums=None, opener=opener, progress=False)
    assert opener.urls == [url + "/t10k-labels-idx1-ubyte.gz"]
    assert target.read_bytes() == (folder / target.name).read_bytes()

    target.write_bytes(b"local copy")
    opener.urls.clear()
    download_mnist(data_dir, base_url=url, checksums=None, opener=opener, force=True, progress=False)
    assert len(opener.urls) == 4
    assert target.read_bytes() == (folder / target.name).read_bytes()


def test_download_mnist_checksum_mismatch_removes_partial(tmp_path, server):
    folder, url, _ = server
    checksums = _md5s(folder)
    checksums["train-labels-idx1-ubyte.gz"] = "0" * 32
    data_dir = tmp_path / "data"
    with pytest.raises(ChecksumError, match="md5 mismatch for train-labels") as info:
        download_mnist(data_dir, base_url=url, checksums=checksums, progress=False)
    assert isinstance(info.value, DownloadError)
    mnist = data_dir / "mnist"
    assert not (mnist / "train-labels-idx1-ubyte.gz").exists()
    assert (mnist / "train-images-idx3-ubyte.gz").is_file()  # fetched before the failure
    assert _leftovers(mnist) == []


def test_download_mnist_default_checksums_apply(tmp_path, server):
    _, url, _ = server  # the fake files cannot match the canonical md5s
    with pytest.raises(ChecksumError, match=MNIST_MD5["train-images-idx3-ubyte.gz"]):
        download_mnist(tmp_path / "data", base_url=url, progress=False)
    assert list((tmp_path / "data" / "mnist").iterdir()) == []


def test_download_mnist_missing_remote(tmp_path):
    empty = tmp_path / "empty_server"
    empty.mkdir()
    with pytest.raises(DownloadError, match="could not open"):
        download_mnist(tmp_path / "data", base_url=empty.as_uri(), progress=False)
    assert list((tmp_path / "data" / "mnist").iterdir()) == []


def test_download_mnist_empty_remote(tmp_path):
    srv = tmp_path / "srv"
    srv.mkdir()
    for n in MNIST_NAMES:
        (srv / n).write_bytes(b"")
    with pytest.raises(DownloadError, match="empty"):
        download_mnist(tmp_path / "data", base_url=srv.as_uri(), checksums=None, progress=False)
    assert list((tmp_path / "data" / "mnist").iterdir()) == []


class _Response(io.BytesIO):
    def __init__(self, data: bytes, length: int | None) -> None:
        super().__init__(data)
        self.headers = {} if length is None else {"Content-Length": str(length)}


def test_download_with_custom_opener(tmp_path, server):
    folder, _, arrays = server

    def opener(url: str):
        name = url.rsplit("/", 1)[-1]
        return _Response((folder / name).read_bytes(), None)

    download_mnist(tmp_path / "d", base_url="https://example.invalid/mnist", opener=opener, checksums=None)
    _, y = load_mnist(tmp_path / "d", "test")
    np.testing.assert_array_equal(y, arrays["test_y"])


def test_download_incomplete_response(tmp_path):
    def opener(url: str):
        return _Response(b"abc", 10)

    with pytest.raises(DownloadError, match="incomplete download.*3 of 10"):
        download_mnist(
            tmp_path / "d",
            base_url="https://x.invalid",
            opener=opener,
            checksums=None,
            progress=False,
        )
    assert list((tmp_path / "d" / "mnist").iterdir()) == []


def test_download_read_error_wrapped(tmp_path):
    class Broken(io.RawIOBase):
        def read(self, n=-1):
            raise ConnectionResetError("peer reset")

    with pytest.raises(DownloadError, match="peer reset"):
        download_uci("x", tmp_path, "https://x.invalid/x.tsv", opener=lambda url: Broken())
    assert _leftovers(tmp_path / "uci") == []


# --------------------------------------------------------------------------- download_uci
TSV = "a\tb\ttarget\n1\t2\t0\n3\t4\t1\n"


@pytest.mark.parametrize("compressed", [False, True])
def test_download_uci(tmp_path, compressed):
    src = tmp_path / ("src.tsv.gz" if compressed else "src.tsv")
    src.write_bytes(gzip.compress(TSV.encode()) if compressed else TSV.encode())
    data_dir = tmp_path / "data"
    path = download_uci("toy", data_dir, src.as_uri(), progress=False)
    assert path == data_dir / "uci" / "toy.tsv.gz"
    assert path.read_bytes()[:2] == b"\x1f\x8b"  # stored gzipped either way
    X, y = load_uci("toy", data_dir)
    np.testing.assert_array_equal(X, [[1, 2], [3, 4]])
    assert y.tolist() == [0, 1]
    assert _leftovers(data_dir / "uci") == []


def test_download_uci_skip_and_force(tmp_path):
    src = tmp_path / "src.tsv"
    src.write_text(TSV)
    data_dir = tmp_path / "data"
    path = download_uci("toy", data_dir, src.as_uri(), progress=False)
    src.write_text(TSV.replace("1\t2\t0", "9\t9\t0"))
    opener = CountingOpener()
    assert download_uci("toy", data_dir, src.as_uri(), opener=opener) == path
    assert opener.urls == []
    assert load_uci("toy", data_dir)[0][0, 0] == 1
    download_uci("toy", data_dir, src.as_uri(), opener=opener, force=True, progress=False)
    assert opener.urls == [src.as_uri()]
    assert load_uci("toy", data_dir)[0][0, 0] == 9


def test_download_uci_invalid_content(tmp_path):
    src = tmp_path / "page.html"
    src.write_text("<html><body>Not found</body></html>\n")
    with pytest.raises(DownloadError, match="'target' column"):
        download_uci("toy", tmp_path / "data", src.as_uri(), progress=False)
    assert list((tmp_path / "data" / "uci").iterdir()) == []


def test_download_uci_md5(tmp_path):
    src = tmp_path / "src.tsv"
    src.write_text(TSV)
    good = hashlib.md5(TSV.encode()).hexdigest()
    with pytest.raises(ChecksumError):
        download_uci("toy", tmp_path / "data", src.as_uri(), md5="f" * 32, progress=False)
    assert list((tmp_path / "data" / "uci").iterdir()) == []
    assert download_uci("toy", tmp_path / "data", src.as_uri(), md5=good.upper()).is_file()


@pytest.mark.parametrize("name", ["", "a/b", ".."])
def test_download_uci_bad_name(tmp_path, name):
    with pytest.raises(ValueError, match="name"):
        download_uci(name, tmp_path, "file:///nonexistent")


# --------------------------------------------------------------------------- real data
@pytest.mark.data
def test_download_real_mnist_copy(tmp_path, real_data_dir):
    mnist = real_data_dir / "mnist"
    if not all((mnist / n).is_file() for n in MNIST_NAMES):
        pytest.skip("real MNIST files not in the data directory")
    # Serve only the small test files plus tiny stand-ins for the train files.
    srv = tmp_path / "srv"
    srv.mkdir()
    for n in MNIST_NAMES[2:]:
        shutil.copy(mnist / n, srv / n)
    for n in MNIST_NAMES[:2]:
        (srv / n).write_bytes(b"x")
    # The local copies are re-compressed, so the canonical md5s do not apply.
    download_mnist(tmp_path / "data", base_url=srv.as_uri(), checksums=None, progress=False)
    X, y = load_mnist(tmp_path / "data", "test")
    assert X.shape == (10000, 28, 28) and y.shape == (10000,)
