"""One process per node on localhost, joined in a ``torch.distributed`` process group.

The process plumbing shared by the node networks that run as separate processes (the
label-proportions network, ``dp_proto.llp.distributed``, and federated LVQ,
``dp_proto.lvq.distributed``): ``launch_workers`` starts one process per rank, each
joins the group and calls ``worker(rank, world_size, *args)``; what a worker returns
comes back to the launching process through a file in a temporary directory (never
through the process group), and a failure comes back as ``NodeProcessError`` carrying
the failing rank's traceback.

Start method: ``forkserver`` where the platform has it, else ``spawn`` (never ``fork``:
the launching process may hold threads). A ``spawn`` worker starts a fresh interpreter
and imports torch and ``dp_proto`` (seconds, times the number of nodes on a small
machine); the forkserver imports the ``preload`` modules once, forks the workers from
it and stays up for later launches from the same process; every worker gets the
launcher's current environment. The workers meet at a TCP rendezvous on ``master_addr``
at a free port (found by binding port 0, so another program could in principle take it
before the workers do; pass ``master_port`` to choose).

This module belongs to the base of the package: it imports nothing of ``dp_proto``
but the argument checks.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import multiprocessing as mp
import multiprocessing.connection
import os
import pickle
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from dp_proto._validation import check_int

__all__ = ["NodeProcessError", "PeerFailedError", "check_group", "gather_status", "launch_workers", "to_cpu"]


class PeerFailedError(RuntimeError):
    """Another node of the process group failed before the exchange; this one stopped too."""


class NodeProcessError(RuntimeError):
    """A node's process failed in a launch of one process per node.

    Attributes
    ----------
    rank : int
        The node (rank) whose error this is.
    remote_traceback : str
        The traceback in the worker process (also in the message).
    """

    def __init__(self, message: str, rank: int, remote_traceback: str = "") -> None:
        super().__init__(message)
        self.rank = rank
        self.remote_traceback = remote_traceback


def to_cpu(obj: Any) -> Any:
    """``obj`` with every tensor and module moved to the CPU (dataclasses, lists, tuples, dicts)."""
    if isinstance(obj, Tensor):
        return obj.detach().cpu()
    if isinstance(obj, torch.nn.Module):
        return obj.cpu()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: to_cpu(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
        return dataclasses.replace(obj, **changes)
    if isinstance(obj, list):
        return [to_cpu(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(to_cpu(v) for v in obj)
    if isinstance(obj, dict):
        return {key: to_cpu(v) for key, v in obj.items()}
    return obj


def check_group(who: str, rank: int, world_size: int, group: Any, device: torch.device | str) -> torch.device:
    """Check that ``rank`` and ``world_size`` are those of the initialised process group
    ``group`` (``who`` names the caller in the errors) and return the device its messages
    live on: the CPU for gloo, else ``device``."""
    if not dist.is_initialized():
        raise RuntimeError(f"{who} needs an initialised torch.distributed process group")
    if dist.get_rank(group) != rank or dist.get_world_size(group) != world_size:
        raise ValueError(
            f"rank={rank}, world_size={world_size} do not match the process group's "
            f"{dist.get_rank(group)}, {dist.get_world_size(group)}"
        )
    return torch.device("cpu") if dist.get_backend(group) == "gloo" else torch.device(device)


def gather_status(
    rank: int,
    world_size: int,
    local_error: BaseException | None,
    values: Sequence[float],
    *,
    group: Any = None,
    device: torch.device | str = "cpu",
) -> Tensor:
    """Every rank's ``[ok, *values]`` (``(world_size, 1 + len(values))`` float64, CPU).

    One ``all_gather`` of public metadata. A rank with a ``local_error`` sends ``ok = 0``
    and then raises its error; the others raise ``PeerFailedError`` instead of waiting
    for a message that never comes. ``values`` must have the same length at every rank.
    """
    meta = torch.zeros(1 + len(values), dtype=torch.float64, device=device)
    if local_error is None:
        meta[0] = 1.0
        meta[1:] = torch.as_tensor(list(values), dtype=torch.float64)
    gathered = [torch.empty_like(meta) for _ in range(world_size)]
    dist.all_gather(gathered, meta, group=group)
    if local_error is not None:
        raise local_error
    table = torch.stack(gathered).cpu()
    failed = [j for j in range(world_size) if table[j, 0] != 1.0]
    if failed:
        raise PeerFailedError(f"node {rank}: node(s) {failed} failed before the exchange; nothing was sent")
    return table


# --------------------------------------------------------------------------- processes
def _write(path: Path, payload: Any) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        pickle.dump(payload, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)


def _read(path: Path) -> Any:
    with open(path, "rb") as fh:
        return pickle.load(fh)  # written by our own worker processes


def _worker_process(
    rank: int,
    world_size: int,
    init_method: str,
    backend: str,
    timeout: float,
    num_threads: int,
    worker_setup: Callable[[int], Any] | None,
    worker: Callable[..., Any],
    args: tuple,
    out_dir: str,
    env: dict[str, str] | None,
) -> None:
    """Body of a worker process: set up, join the group, run ``worker``, report to ``out_dir``."""
    out = Path(out_dir)
    try:
        if env is not None:  # forkserver: the launcher's environment, as spawn would have it
            os.environ.clear()
            os.environ.update(env)
        torch.set_num_threads(num_threads)
        if worker_setup is not None:
            worker_setup(rank)
        dist.init_process_group(
            backend,
            init_method=init_method,
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout),
        )
        try:
            result = worker(rank, world_size, *args)
        finally:
            dist.destroy_process_group()
        _write(out / f"result_{rank}.pkl", result)
    except BaseException as err:  # reported to the launching process
        try:
            pickle.dumps(err)
            exc = err
        except Exception:  # unpicklable exception: the text is enough
            exc = None
        _write(
            out / f"error_{rank}.pkl",
            {
                "type": type(err).__name__,
                "message": str(err),
                "traceback": traceback.format_exc(),
                "exception": exc,
                "peer": isinstance(err, PeerFailedError),
            },
        )
        sys.exit(1)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _check_launch_settings(timeout: float, num_threads: int | None, n_nodes: int) -> tuple[float, int]:
    """``(timeout, num_threads)`` checked; ``num_threads`` defaults to ``max(1, cpus // n_nodes)``."""
    timeout = float(timeout)
    if not math.isfinite(timeout) or timeout <= 0:
        raise ValueError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
    if num_threads is None:
        num_threads = max(1, (os.cpu_count() or 1) // n_nodes)
    return timeout, check_int("num_threads", num_threads, 1)


def launch_workers(
    worker: Callable[..., Any],
    rank_args: Sequence[tuple],
    *,
    name: str = "node",
    backend: str = "gloo",
    master_addr: str = "127.0.0.1",
    master_port: int | None = None,
    timeout: float = 300.0,
    num_threads: int | None = None,
    worker_setup: Callable[[int], Any] | None = None,
    start_method: str | None = None,
    preload: Sequence[str] = ("dp_proto",),
) -> list[Any]:
    """Run ``worker(rank, world_size, *rank_args[rank])`` in one process per rank.

    Parameters
    ----------
    worker : callable
        A module-level function (it is pickled by reference); called inside an
        initialised process group of ``len(rank_args)`` ranks; what it returns must be
        picklable and comes back in the result list.
    rank_args : sequence of tuple
        The arguments of every rank (rank ``i`` receives only ``rank_args[i]``).
    name : str
        Process names ``f"{name}-{rank}"``.
    backend, master_addr, master_port
        The process group (default: gloo at a free port of 127.0.0.1).
    timeout : float
        Seconds for the whole run; also the process group's timeout for collectives.
    num_threads : int, optional
        Intra-op threads per process; default ``max(1, cpu_count // world_size)``.
    worker_setup : callable, optional
        ``worker_setup(rank)`` in every worker before it joins the group; picklable.
    start_method : {"forkserver", "spawn"}, optional
        Default ``"forkserver"`` where available, else ``"spawn"``.
    preload : sequence of str
        Modules the forkserver imports once (the first launch of a process decides).

    Returns
    -------
    list
        What every rank's ``worker`` returned, by rank.

    Raises
    ------
    NodeProcessError
        A worker failed: the error of the first rank that failed on its own (not
        because a peer did), with its traceback in the message; chained to the
        original exception where it could be pickled.
    TimeoutError
        The run took longer than ``timeout``; the workers are terminated.
    """
    n_nodes = len(rank_args)
    if n_nodes == 0:
        raise ValueError("no rank to launch")
    timeout, num_threads = _check_launch_settings(timeout, num_threads, n_nodes)
    port = _free_port(master_addr) if master_port is None else check_int("master_port", master_port, 1)
    init_method = f"tcp://{master_addr}:{port}"
    ctx, env = _process_context(start_method, preload)
    with tempfile.TemporaryDirectory(prefix=f"dp_proto_{name}_") as out_dir:
        out = Path(out_dir)
        procs = []
        try:
            for rank, args in enumerate(rank_args):
                proc = ctx.Process(
                    target=_worker_process,
                    name=f"{name}-{rank}",
                    daemon=True,
                    args=(rank, n_nodes, init_method, backend, timeout, num_threads, worker_setup, worker, tuple(args))
                    + (out_dir, env),
                )
                proc.start()
                procs.append(proc)
            running = _wait(procs, timeout, grace=5.0)  # still running at the deadline
        finally:
            for proc in procs:
                if proc.is_alive():
                    proc.terminate()
            for proc in procs:
                proc.join(5.0)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
        failure, cause = _first_failure(out, n_nodes)
        if running:
            raise TimeoutError(
                f"node(s) {running} did not finish within {timeout:g} s and were terminated"
                + ("" if failure is None else f" (node {failure.rank} had failed)")
            ) from failure
        if failure is not None:
            raise failure from cause
        return [_result(out, rank, proc) for rank, proc in enumerate(procs)]


def _process_context(start_method: str | None, preload: Sequence[str]) -> tuple[Any, dict[str, str] | None]:
    """The multiprocessing context of the workers, and the environment a forkserver's
    workers must take over (``None`` with spawn, whose workers inherit it)."""
    if start_method is None:
        start_method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    if start_method not in ("spawn", "forkserver"):
        raise ValueError(f"start_method must be 'spawn' or 'forkserver', got {start_method!r}")
    ctx = mp.get_context(start_method)
    if start_method != "forkserver":
        return ctx, None
    ctx.set_forkserver_preload(list(preload))  # torch, dp_proto (slow imports)
    return ctx, dict(os.environ)  # the server's environment is that of its start


def _first_failure(out: Path, n_nodes: int) -> tuple[NodeProcessError | None, BaseException | None]:
    """The error of the first node that failed on its own (not because a peer did; else
    the first that failed at all) and its original exception, from the workers' files."""
    errors = {i: _read(out / f"error_{i}.pkl") for i in range(n_nodes) if (out / f"error_{i}.pkl").exists()}
    if not errors:
        return None, None
    primary = [i for i, e in errors.items() if not e["peer"]] or sorted(errors)
    i = min(primary)
    err = errors[i]
    failure = NodeProcessError(
        f"node {i} failed ({err['type']}: {err['message']})\n\nTraceback in its process:\n{err['traceback']}",
        i,
        err["traceback"],
    )
    return failure, err["exception"]


def _result(out: Path, rank: int, proc: Any) -> Any:
    path = out / f"result_{rank}.pkl"
    if not path.exists():
        raise NodeProcessError(
            f"node {rank}'s process exited with code {proc.exitcode} without a result "
            f"(killed, or crashed in native code)",
            rank,
        )
    return _read(path)


def _wait(procs: list, timeout: float, grace: float) -> list[int]:
    """Wait for the workers; after the first failure give the others ``grace`` seconds.

    Returns the indices of the workers still running when ``timeout`` ran out (none
    if all ended, or if the grace period after a failure ended first).
    """
    deadline = time.monotonic() + timeout
    failed_at = None
    while True:
        alive = [i for i, p in enumerate(procs) if p.exitcode is None]
        if not alive:
            return []
        now = time.monotonic()
        if failed_at is None and any(p.exitcode not in (None, 0) for p in procs):
            failed_at = now
        if failed_at is not None and now - failed_at > grace:
            return []
        if now >= deadline:
            return alive
        limit = deadline - now if failed_at is None else min(deadline - now, failed_at + grace - now)
        mp.connection.wait([procs[i].sentinel for i in alive], timeout=max(0.0, min(limit, 1.0)))
