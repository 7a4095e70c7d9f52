"""Download benchmark files into a data directory (for users with internet).

Nothing in dp_proto downloads implicitly: call these functions yourself, then
read the files with ``dp_proto.data.load_mnist`` / ``dp_proto.data.load_uci``.
Every file is first written to a temporary file in the target folder and only
renamed into place once complete and verified, so an interrupted or failed
download never leaves a partial file under the final name.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tempfile
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from dp_proto.data.loaders.common import _check_name
from dp_proto.data.loaders.mnist import MNIST_FILES
from dp_proto.data.loaders.uci import read_tsv

__all__ = [
    "DEFAULT_MNIST_MIRROR",
    "MNIST_MD5",
    "ChecksumError",
    "DownloadError",
    "download_mnist",
    "download_uci",
]

#: Mirror of the canonical MNIST files (the one torchvision uses; the files on
#: yann.lecun.com are often unavailable).
DEFAULT_MNIST_MIRROR = "https://ossci-datasets.s3.amazonaws.com/mnist/"

#: md5 checksums of the canonical gzipped MNIST files. Re-compressed copies
#: (same content, different gzip bytes) will not match: pass ``checksums=None``.
MNIST_MD5: dict[str, str] = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}

_CHUNK = 1 << 16
_TIMEOUT_S = 60.0

#: ``opener(url)`` returns a readable binary response (like ``urllib.request.urlopen``).
Opener = Callable[[str], Any]


class DownloadError(OSError):
    """A download failed or produced an unusable file."""


class ChecksumError(DownloadError):
    """A downloaded file does not have the expected md5 checksum."""


def _default_opener(url: str) -> Any:
    return urllib.request.urlopen(url, timeout=_TIMEOUT_S)


def _content_length(response: Any) -> int | None:
    headers = getattr(response, "headers", None)
    value = headers.get("Content-Length") if headers is not None else None
    if value is None:
        value = getattr(response, "length", None)
    try:
        size = int(value) if value is not None else None
    except (TypeError, ValueError):
        return None
    return size if size is not None and size > 0 else None


def _copy_with_progress(src: BinaryIO, dst: BinaryIO, total: int | None, desc: str, progress: bool) -> int:
    """Copy ``src`` to ``dst`` in chunks; return the number of bytes copied."""
    bar = None
    if progress and total is not None:
        from tqdm import tqdm

        bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, leave=False)
    n = 0
    try:
        while True:
            chunk = src.read(_CHUNK)
            if not chunk:
                break
            dst.write(chunk)
            n += len(chunk)
            if bar is not None:
                bar.update(len(chunk))
    finally:
        if bar is not None:
            bar.close()
    return n


def _md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fetch(
    url: str,
    dest: Path,
    opener: Opener | None,
    md5: str | None,
    progress: bool,
    postprocess: Callable[[Path], None] | None = None,
) -> Path:
    """Download ``url`` to ``dest`` atomically (temp file in the same folder, then rename)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                response = (opener or _default_opener)(url)
            except OSError as exc:  # URLError, HTTPError, socket errors
                raise DownloadError(f"could not open {url}: {exc}") from exc
            try:
                total = _content_length(response)
                n = _copy_with_progress(response, out, total, dest.name, progress)
            except DownloadError:
                raise
            except OSError as exc:  # connection reset, timeout, ...
                raise DownloadError(f"error while downloading {url}: {exc}") from exc
            finally:
                close = getattr(response, "close", None)
                if callable(close):
                    close()
            if total is not None and n != total:
                raise DownloadError(f"incomplete download of {url}: got {n} of {total} bytes")
        if n == 0:
            raise DownloadError(f"downloaded an empty file from {url}")
        if md5 is not None:
            actual = _md5(tmp)
            if actual.lower() != md5.lower():
                raise ChecksumError(
                    f"md5 mismatch for {dest.name} from {url}: expected {md5}, got {actual}; "
                    f"the partial file was removed"
                )
        if postprocess is not None:
            postprocess(tmp)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return dest


def download_mnist(
    data_dir: str | os.PathLike,
    base_url: str = DEFAULT_MNIST_MIRROR,
    force: bool = False,
    opener: Opener | None = None,
    checksums: Mapping[str, str] | None = MNIST_MD5,
    progress: bool = True,
) -> list[Path]:
    """Download the four gzipped MNIST idx files into ``data_dir/mnist/``.

    Parameters
    ----------
    data_dir : str or os.PathLike
        The data directory (created if needed); files go to ``data_dir/mnist``.
    base_url : str, default ``DEFAULT_MNIST_MIRROR``
        URL of the folder holding the files (``file://`` URLs work too); the
        file name is appended after a ``/``.
    force : bool, default False
        Download again even if a file already exists (otherwise existing,
        non-empty files are kept and not checked).
    opener : callable, optional
        ``opener(url)`` returning a readable binary response; defaults to
        ``urllib.request.urlopen`` with a 60 s timeout. Useful for proxies,
        authentication or tests.
    checksums : mapping of file name to md5 hex digest, or None
        Expected checksums, default the canonical ``MNIST_MD5``; files not
        in the mapping, or all files if ``None``, are not checked.
    progress : bool, default True
        Show a tqdm progress bar when the server reports the size.

    Returns
    -------
    list of pathlib.Path
        The four local files, in the order train images, train labels, test
        images, test labels.

    Raises
    ------
    DownloadError
        If a file cannot be fetched, is empty or incomplete.
    ChecksumError
        If a file's md5 does not match; the partial file is removed.
    """
    target = Path(data_dir).expanduser() / "mnist"
    paths: list[Path] = []
    for filename in MNIST_FILES.values():
        dest = target / filename
        if force or not (dest.is_file() and dest.stat().st_size > 0):
            md5 = None if checksums is None else checksums.get(filename)
            _fetch(base_url.rstrip("/") + "/" + filename, dest, opener, md5, progress)
        paths.append(dest)
    return paths


def _ensure_gzip_and_valid(path: Path) -> None:
    """Gzip ``path`` in place if it is plain text, then check that it parses as a TSV table."""
    with open(path, "rb") as fh:
        compressed = fh.read(2) == b"\x1f\x8b"
    if not compressed:
        packed = path.with_name(path.name + ".gz")
        try:
            with open(path, "rb") as src, gzip.open(packed, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.replace(packed, path)
        finally:
            packed.unlink(missing_ok=True)
    try:
        read_tsv(path)
    except ValueError as exc:  # DataValidationError subclasses ValueError
        raise DownloadError(
            f"the downloaded file is not a tab-separated table with a header row and a 'target' column: {exc}"
        ) from exc


def download_uci(
    name: str,
    data_dir: str | os.PathLike,
    url: str,
    opener: Opener | None = None,
    force: bool = False,
    md5: str | None = None,
    progress: bool = True,
) -> Path:
    """Download a tab-separated data set to ``data_dir/uci/<name>.tsv.gz``.

    The file at ``url`` must already be in the format ``dp_proto.data.read_tsv``
    reads (tab-separated, header row, label column ``target``), gzipped or
    not: plain text is gzip-compressed on the fly. The result is checked by
    parsing it before it is moved into place; it can then be loaded with
    ``load_uci(name, data_dir)``.

    Parameters
    ----------
    name : str
        Data set name, used as the file stem (no path separators).
    data_dir : str or os.PathLike
        The data directory (created if needed).
    url : str
        Where to fetch the file (``http(s)://``, ``file://``, ...).
    opener : callable, optional
        ``opener(url)`` returning a readable binary response; defaults to
        ``urllib.request.urlopen`` with a 60 s timeout.
    force : bool, default False
        Download again even if the file already exists.
    md5 : str, optional
        Expected md5 of the downloaded bytes (before any compression here).
    progress : bool, default True
        Show a tqdm progress bar when the server reports the size.

    Returns
    -------
    pathlib.Path
        The local file ``data_dir/uci/<name>.tsv.gz``.

    Raises
    ------
    ValueError
        If ``name`` is empty or contains path separators.
    DownloadError
        If the download fails or the file is not a valid table.
    ChecksumError
        If ``md5`` is given and does not match.
    """
    name = _check_name(name)
    dest = Path(data_dir).expanduser() / "uci" / f"{name}.tsv.gz"
    if not force and dest.is_file() and dest.stat().st_size > 0:
        return dest
    return _fetch(url, dest, opener, md5, progress, postprocess=_ensure_gzip_and_valid)
