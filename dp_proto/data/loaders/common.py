"""Where the data files are: the data directory (``$DP_PROTO_DATA_DIR``) and reading
(optionally gzipped) files. Nothing here touches the network."""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

from dp_proto.exceptions import DataValidationError

PathLike = str | os.PathLike

__all__ = ["DATA_DIR_ENV_VAR", "default_data_dir"]


#: Environment variable naming the default data directory.
DATA_DIR_ENV_VAR = "DP_PROTO_DATA_DIR"


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
