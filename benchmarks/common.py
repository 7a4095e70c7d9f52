"""Small helpers shared by the benchmark scripts: machine description, data-dir
resolution and the final one-line JSON summary."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "cpu_model",
    "die",
    "emit_json",
    "load_benchmark_sets",
    "machine_description",
    "resolve_data_dir",
    "run_metadata",
]

#: Environment variable that the loaders of :mod:`dp_proto.data` also honour.
DATA_DIR_ENV_VAR = "DP_PROTO_DATA_DIR"


def cpu_model() -> str:
    """The CPU model name (``lscpu``'s "Model name"), or the platform's best guess."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine_description() -> str:
    """One line: CPU model, usable cores, torch threads and versions."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 0
    parts = [cpu_model(), f"{cores} cores"]
    try:
        import torch

        parts.append(f"torch {torch.__version__} ({torch.get_num_threads()} threads, CPU)")
    except ImportError:
        pass
    parts.append(f"Python {platform.python_version()}")
    parts.append(platform.system())
    return ", ".join(parts)


def die(message: str, code: int = 2) -> None:
    """Print ``message`` to stderr and exit with ``code`` (2: usage / missing data)."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def resolve_data_dir(arg: str | None) -> Path:
    """``--data-dir`` or ``$DP_PROTO_DATA_DIR``; exits with code 2 if neither names a directory."""
    value = arg or os.environ.get(DATA_DIR_ENV_VAR, "").strip() or None
    if value is None:
        die(
            f"no data directory: pass --data-dir DIR (e.g. ../shared/data) or set "
            f"${DATA_DIR_ENV_VAR}. The directory must hold uci/<name>.tsv.gz and "
            f"mnist/*-ubyte.gz (see dp_proto.data)."
        )
    path = Path(value).expanduser()
    if not path.is_dir():
        die(f"data directory {str(path)!r} does not exist or is not a directory")
    return path


def load_benchmark_sets(names, data_dir: Path) -> dict[str, tuple[Any, Any]]:
    """``{name: (X float64, y)}`` for UCI set names and ``"mnist"`` (train + test, 70000 x 784).

    Everything is loaded before any training, so a missing or unreadable file exits
    (code 2) with a message naming it.
    """
    import numpy as np

    from dp_proto.data import load_mnist, load_uci
    from dp_proto.exceptions import DataValidationError

    data: dict[str, tuple[Any, Any]] = {}
    for name in names:
        try:
            if name == "mnist":
                parts = [load_mnist(data_dir, split=s, flatten=True) for s in ("train", "test")]
                data[name] = (
                    np.concatenate([x for x, _ in parts]).astype(np.float64),
                    np.concatenate([y for _, y in parts]),
                )
            else:
                X, y = load_uci(name, data_dir)
                data[name] = (np.asarray(X, dtype=np.float64), np.asarray(y))
        except FileNotFoundError as err:
            die(f"data set {name!r} not found in {str(data_dir)!r}:\n{err}")
        except DataValidationError as err:
            die(f"data set {name!r} in {str(data_dir)!r} is unreadable: {err}")
    return data


def run_metadata(started: float) -> dict[str, Any]:
    """``machine``, ``load_avg`` (1/5/15 min, None where unsupported) and ``elapsed_s``
    since ``started`` (a ``time.perf_counter()`` value), for a benchmark's JSON payload."""
    import time

    return {
        "machine": machine_description(),
        "load_avg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "elapsed_s": round(time.perf_counter() - started, 1),
    }


def emit_json(payload: dict[str, Any], out: str | os.PathLike | None = None) -> None:
    """Print ``payload`` as the single final JSON line on stdout (and write it to ``out``,
    creating its directory)."""
    line = json.dumps(payload, sort_keys=False)
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(line + "\n", encoding="utf-8")
    sys.stdout.flush()
    print(line, flush=True)
