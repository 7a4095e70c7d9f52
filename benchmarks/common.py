"""Small helpers shared by the benchmark scripts: machine description, data-dir
resolution and the final one-line JSON summary, which carries the run's provenance
(``meta``: date, machine, commit, command; see :func:`emit_json`)."""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = [
    "cpu_model",
    "die",
    "emit_json",
    "git_commit",
    "load_benchmark_sets",
    "machine_description",
    "resolve_data_dir",
    "run_command",
    "run_meta",
    "run_metadata",
    "run_tasks",
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


#: The repository whose commit a result records: the checkout that holds this package.
REPO_ROOT = Path(__file__).resolve().parent.parent


def git_commit(root: str | os.PathLike | None = None) -> str | None:
    """The short hash of ``HEAD`` of the checkout at ``root`` (default: the one holding the
    benchmarks), with ``"+dirty"`` appended when tracked files have uncommitted changes
    (untracked files do not count, as in ``git describe --dirty``); ``None`` outside a git
    checkout or without git."""
    cwd = Path(root) if root is not None else REPO_ROOT

    def git(*args: str) -> subprocess.CompletedProcess | None:
        try:
            return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None

    head = git("rev-parse", "--short", "HEAD")
    if head is None or head.returncode != 0 or not head.stdout.strip():
        return None
    commit = head.stdout.strip()
    status = git("status", "--porcelain", "--untracked-files=no")
    if status is not None and status.returncode == 0 and status.stdout.strip():
        commit += "+dirty"
    return commit


def run_command(argv: list[str] | None = None) -> str:
    """The command line of this process as one shell-quoted string: ``python -m MODULE ARGS``
    when it runs as a module (``python -m benchmarks.svdd.accuracy --quick``), else
    ``python SCRIPT ARGS``; ``argv`` replaces ``sys.argv[1:]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None)
    if name:
        if name.endswith(".__main__"):
            name = name[: -len(".__main__")]
        head = ["python", "-m", name]
    else:
        script = sys.argv[0] if sys.argv and sys.argv[0] else "-"
        try:
            script = os.path.relpath(script)
        except ValueError:  # another drive (Windows)
            pass
        head = ["python", script]
    return shlex.join(head + args)


def run_meta(payload: dict[str, Any] | None = None) -> dict[str, Any]:
    """The provenance of a result: ``date`` (ISO 8601, UTC, seconds), ``machine`` (the
    payload's ``machine`` if it has one, else :func:`machine_description`), ``commit``
    (:func:`git_commit`) and ``command`` (:func:`run_command`)."""
    machine = (payload or {}).get("machine")
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine if isinstance(machine, str) else machine_description(),
        "commit": git_commit(),
        "command": run_command(),
    }


def emit_json(payload: dict[str, Any], out: str | os.PathLike | None = None) -> None:
    """Print ``payload`` as the single final JSON line on stdout (and write it to ``out``,
    creating its directory).

    A ``meta`` key with the run's provenance (:func:`run_meta`: date, machine, commit,
    command) is added at the end unless the payload has one; every other key is written
    as given. ``payload`` itself is not modified."""
    if "meta" not in payload:
        payload = {**payload, "meta": run_meta(payload)}
    line = json.dumps(payload, sort_keys=False)
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(line + "\n", encoding="utf-8")
    sys.stdout.flush()
    print(line, flush=True)


def run_tasks(
    tasks: list,
    worker: Callable[[Any], dict],
    *,
    jobs: int = 1,
    desc: str = "tasks",
    postfix: Callable[[Any, dict], str] | None = None,
) -> list[dict]:
    """``worker(task)`` for every task, in ``jobs`` spawned worker processes (1: in this
    process), behind one tqdm bar on stderr (``postfix(task, result)``: its text after a
    task). Results come in task order whatever ``jobs`` is; ``worker`` must be picklable
    (a module-level function or a ``functools.partial`` of one) and seed itself."""
    from tqdm import tqdm

    results: list[dict | None] = [None] * len(tasks)
    with tqdm(total=len(tasks), desc=desc, unit="fit", file=sys.stderr, dynamic_ncols=True) as bar:

        def done(i: int, result: dict) -> None:
            results[i] = result
            if postfix is not None:
                bar.set_postfix_str(postfix(tasks[i], result))
            bar.update(1)

        if jobs == 1:
            for i, task in enumerate(tasks):
                done(i, worker(task))
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed

            context = multiprocessing.get_context("spawn")  # no forked torch/Lightning state
            with ProcessPoolExecutor(jobs, mp_context=context) as pool:
                futures = {pool.submit(worker, task): i for i, task in enumerate(tasks)}
                for future in as_completed(futures):
                    done(futures[future], future.result())
    return results  # type: ignore[return-value]
