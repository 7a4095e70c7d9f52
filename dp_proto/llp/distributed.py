"""The LLP network with every node in its own process, exchanging proportions by ``torch.distributed``.

:func:`~dp_proto.llp.simulate_network` runs all nodes in one process; here every
node is a process of a ``torch.distributed`` process group (gloo backend on
localhost by default) that holds only its own data and exchanges nothing but
released label-proportion tables (plus public metadata) with the other nodes.

* :func:`run_node` -- one node, inside an initialised process group: release,
  exchange, train. Same code path and generator order as the simulation, so with
  the same ``seed`` and the same ``noise_seed`` it computes the same release and the
  same models, bit for bit (same kind of device, same number of intra-op threads).
  By default (``noise_seed=None``) every node draws its Laplace noise from fresh
  operating-system entropy, as in the simulation, and no run reproduces it.
* :func:`launch_network` -- starts one process per node on localhost,
  runs :func:`run_node` in each and returns a :class:`NodeResult` per node;
  :func:`as_network_result` turns them into a :class:`~dp_proto.llp.NetworkResult`
  for :func:`~dp_proto.llp.evaluate`.
* ``python -m dp_proto.llp.distributed --data-dir DIR --nodes 4`` -- the seed's
  4-node setting on the SCATS counts, run distributed, with its accuracy.

What goes over the wire
-----------------------
Node ``i`` (rank ``i``) makes exactly these ``torch.distributed`` calls:

1. ``all_gather`` of one float64 vector of length ``6 + world_size`` per rank,
   public metadata only: ``[ok, num_batches, num_classes, batch_size, origin,
   epsilon (-1: exact), subscribes_0 .. subscribes_{W-1}]``. ``ok`` is 0 if the
   node failed before the exchange (bad data or arguments; every node then stops
   with an error instead of waiting for a table that never comes), the
   ``subscribes_j`` flags say whose proportions node ``i`` wants (its neighbour
   list; the neighbour graph is public, e.g. from the detectors' coordinates).
   Every node checks that all nodes use the same batch grid and classes (so row
   ``k`` is the same time window everywhere: ``num_batches = ceil((stop - origin) /
   b)`` is public given ``time_range`` and ``b``) and the same ``epsilon``.
2. ``isend`` of its released table, ``(num_batches, num_classes)`` float64, to
   every node that subscribed to it, and ``irecv`` of one such table from each of
   its own neighbours (point to point: a node's release reaches its subscribers
   only, as in the seed, where proportions are "sent to the closest c
   neighbours"). The table is ``LabelProportions.proportions`` itself; for an
   exact release (``epsilon=None``) its invalid rows (batches without records,
   uniform rows) are sent as NaN, so the receiver recovers ``valid`` and the
   uniform rows exactly. A private release has no invalid row and goes out
   unchanged.
3. ``barrier`` (no data).

Features, labels, batch ids, the noisy counts behind a private release, the
clustering and the models never leave a node. :func:`launch_network` hands each
process only its own node's data (a node never holds another node's data), and
the results come back to the launching process through files in a temporary
directory, not through the process group.

Differences from the simulation
-------------------------------
* A received release carries no ``noisy_counts`` (the simulation hands the whole
  :class:`~dp_proto.llp.LabelProportions` object to the neighbours, noisy counts
  included; training never reads them). Proportions, ``valid`` and ``epsilon``
  are identical, and so are the models.
* ``time_range`` is required by :func:`run_node`: the simulation's default for
  exact runs (one past the largest time of *any* node) is a property of every node's
  data, which no single node knows. :func:`launch_network` computes that default in
  the launching process for an exact run, as the simulation does; a private run
  needs the public recording period (``time_range``) in both, since a grid derived
  from the data would make the shape of every release depend on single records.
  Training windows outside the time range are dropped (counted in the curator log
  ``dp_proto.curator`` of the node's process only).
* The simulation validates every node before any node releases; here a node that
  fails its own checks reports ``ok = 0`` in step 1, after the others have drawn
  their noise (nothing is sent). The error raised by :func:`launch_network` is that
  node's.

Processes and ports. :func:`launch_network` uses one process per node
(``world_size == len(nodes)``; several nodes per process is not supported),
started by ``forkserver`` where the platform has it, else ``spawn`` (never
``fork``: the launching process may hold threads). A ``spawn`` worker starts a
fresh interpreter and imports torch and :mod:`dp_proto` (several seconds, times
the number of nodes on a small machine); the forkserver imports them once (its
preload list is set to :mod:`dp_proto.llp.network`), forks the workers from it
and stays up for later launches from the same process; every worker gets the
launcher's current environment. The workers meet at a TCP rendezvous on
``127.0.0.1`` at a free port (found by binding port 0, so another program could
in principle take it before the workers do; pass ``master_port`` to choose);
gloo then picks its own sockets on the address the host name resolves to,
falling back to the loopback address (set ``GLOO_SOCKET_IFNAME=lo`` if that
address is unusable). Only localhost is involved.
"""

from __future__ import annotations

import argparse
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
import time as _time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from dp_proto.data.traffic import FLOW_BIN_EDGES
from dp_proto.llp.model import LLPNodeModel, NodeFit, fit_node_models
from dp_proto.llp.network import (
    NetworkResult,
    _check_seed,
    _node_name,
    _node_training_data,
    _resolve_time_range,
    _warn_noise_seed,
    check_neighbours,
    node_generator,
    node_noise_generator,
)
from dp_proto.llp.proportions import (
    DEFAULT_FLOOR,
    LabelProportions,
    batch_label_counts,
    private_label_proportions,
)
from dp_proto.privacy.calibration import check_epsilon
from dp_proto.privacy.ledger import PrivacyEvent, PrivacyLedger
from dp_proto.privacy.randomness import check_noise_seed

__all__ = [
    "NodeProcessError",
    "NodeResult",
    "PeerFailedError",
    "as_network_result",
    "decode_proportions",
    "encode_proportions",
    "launch_network",
    "run_node",
]

#: Entries of the metadata vector before the subscription flags.
_META_FIELDS = 6


class PeerFailedError(RuntimeError):
    """Another node of the process group failed before the exchange; this one stopped too."""


class NodeProcessError(RuntimeError):
    """A node's process failed in :func:`launch_network`.

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


@dataclass
class NodeResult:
    """What one node computed in :func:`run_node`.

    Attributes
    ----------
    rank : int
        The node's index (its rank and its :func:`~dp_proto.llp.node_generator` index).
    models : list of LLPNodeModel
        Its own model first, then one per neighbour in the order of its neighbour list.
    proportions : LabelProportions
        Its release (with ``noisy_counts``, which stay on the node; only
        ``proportions`` was sent).
    received : dict of int to LabelProportions
        The releases it received, by sender, as decoded from the wire.
    ledger : PrivacyLedger
        Its release (one Laplace event, or one ``non_private`` event).
    fit : NodeFit
    neighbours : list of int
        Whose proportions it received (and trained on).
    subscribers : list of int
        The nodes its release was sent to.
    batch_size, num_batches, origin, num_classes : int
    epsilon : float or None
    bytes_sent, bytes_received : int
        Bytes of proportion tables sent and received (the metadata vector of
        ``8 * (6 + world_size)`` bytes per node is not counted).
    seconds : dict of str to float
        Wall time of the release, exchange and training phases.
    """

    rank: int
    models: list[LLPNodeModel]
    proportions: LabelProportions
    received: dict[int, LabelProportions]
    ledger: PrivacyLedger
    fit: NodeFit
    neighbours: list[int]
    subscribers: list[int]
    batch_size: int
    num_batches: int
    origin: int
    num_classes: int
    epsilon: float | None
    bytes_sent: int = 0
    bytes_received: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------- wire format
def encode_proportions(release: LabelProportions) -> Tensor:
    """The message of a release: its ``(num_batches, num_classes)`` float64 table, on the CPU.

    Rows that are not ``valid`` (exact releases: batches without records) are NaN;
    a private release (all rows valid) is its ``proportions`` unchanged. Nothing
    else of the release (its ``noisy_counts``) is part of the message.
    """
    table = release.proportions.detach().to("cpu", torch.float64).clone()
    valid = release.valid.to("cpu")
    if not bool(valid.all()):
        table[~valid] = float("nan")
    return table.contiguous()


def decode_proportions(
    table: Tensor, epsilon: float | None, device: torch.device | str = "cpu"
) -> LabelProportions:
    """The release a receiver reconstructs from :func:`encode_proportions`' message.

    NaN rows become invalid rows with uniform proportions (exactly the rows an
    exact release has there); ``noisy_counts`` is ``None``.
    """
    table = torch.as_tensor(table, dtype=torch.float64)
    if table.dim() != 2:
        raise ValueError(f"a proportion table must have shape (B, L), got {tuple(table.shape)}")
    nan = torch.isnan(table)
    valid = ~nan.any(1)
    if bool((nan.any(1) & ~nan.all(1)).any()):
        raise ValueError("a proportion table has a row that is only partly NaN")
    if epsilon is not None and not bool(valid.all()):
        raise ValueError("a private release has NaN rows (every batch of a private release is valid)")
    props = table
    if not bool(valid.all()):
        uniform = torch.full_like(table, 1.0 / table.shape[1])
        props = torch.where(valid[:, None], table, uniform)
    return LabelProportions(props.to(device), valid.to(device), epsilon)


# --------------------------------------------------------------------------- one node
def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _check_options(batch_size, estimator, own_proportions, epsilon) -> int:
    batch_size = _check_int("batch_size", batch_size, 1)
    if estimator not in ("seed", "unbiased"):
        raise ValueError(f"estimator must be 'seed' or 'unbiased', got {estimator!r}")
    if own_proportions not in ("released", "exact"):
        raise ValueError(f"own_proportions must be 'released' or 'exact', got {own_proportions!r}")
    if epsilon is not None:
        check_epsilon(epsilon)
    return batch_size


def _check_time_range(time_range, batch_size: int) -> tuple[int, int, int]:
    if time_range is None or len(time_range) != 2:
        raise ValueError(
            f"time_range must be (origin, stop), the public recording period, got {time_range!r}"
        )
    origin, stop = (int(v) for v in time_range)
    if stop - origin < batch_size:
        raise ValueError(f"batch_size={batch_size} is longer than the time range [{origin}, {stop})")
    return origin, stop, -(-(stop - origin) // batch_size)


def _comm_device(group, device: torch.device) -> torch.device:
    return torch.device("cpu") if dist.get_backend(group) == "gloo" else device


def run_node(
    rank: int,
    world_size: int,
    node,
    neighbours_of_rank: Sequence[int],
    *,
    batch_size: int,
    k: int,
    epsilon: float | None = None,
    train_mask: np.ndarray | None = None,
    seed: int = 0,
    noise_seed: int | None = None,
    time_range: tuple[int, int],
    device: torch.device | str = "cpu",
    num_classes: int = len(FLOW_BIN_EDGES),
    n_starts: int = 32,
    n_init: int = 3,
    floor: float = DEFAULT_FLOOR,
    own_proportions: str = "exact",
    estimator: str = "seed",
    swaps: bool = True,
    kmeans_max_iter: int = 100,
    search_max_iter: int = 1000,
    group: dist.ProcessGroup | None = None,
) -> NodeResult:
    """Node ``rank`` of the network: release, exchange proportions, train its models.

    Must be called by every rank of an initialised process group (``group``,
    default the default group) of ``world_size`` ranks, rank ``i`` being node
    ``i``. The node computes its release exactly as
    :func:`~dp_proto.llp.simulate_network` computes node ``i``'s (same functions; the
    Laplace noise from :func:`~dp_proto.llp.node_noise_generator`
    ``(noise_seed, rank, device)``, fresh operating-system entropy by default; the
    k-means seeding, then the local searches for its own and its neighbours'
    proportions, from :func:`~dp_proto.llp.node_generator` ``(seed, rank, device)``),
    exchanges the release with the other ranks (see the
    module docstring for everything that is sent) and fits its ``c + 1`` models on
    its own training windows.

    Parameters
    ----------
    rank, world_size : int
        This node's index and the number of nodes; must equal the process group's.
    node : NodeData-like
        This node's ``features (m, d)``, ``labels (m,)`` and ``time (m,)``.
    neighbours_of_rank : sequence of int
        The nodes whose proportions this node receives, in order (row ``rank`` of
        the ``neighbours`` of :func:`~dp_proto.llp.simulate_network`).
    batch_size, k, epsilon, seed, noise_seed, device, num_classes, n_starts, n_init, floor,
    own_proportions, estimator, swaps, kmeans_max_iter, search_max_iter
        As in :func:`~dp_proto.llp.simulate_network`; ``batch_size``,
        ``num_classes``, ``time_range`` and ``epsilon`` must be the same at every node.
        ``noise_seed`` (default None: fresh noise) makes this node's noise
        reproducible and warns with :class:`~dp_proto.exceptions.PrivacyLeakWarning`
        in a private run.
    train_mask : bool array of shape (m,), optional
        This node's training windows (default: all).
    time_range : (int, int)
        ``(origin, stop)``, the public recording period (required; see the module
        docstring). Training windows outside it are dropped.
    group : ProcessGroup, optional

    Returns
    -------
    NodeResult
        Tensors on ``device``.

    Raises
    ------
    ValueError, DataValidationError
        This node's bad arguments or data (as in the simulation); metadata that
        differs between nodes.
    PeerFailedError
        Another node failed before the exchange.
    """
    if not dist.is_initialized():
        raise RuntimeError("run_node needs an initialised torch.distributed process group")
    if dist.get_rank(group) != rank or dist.get_world_size(group) != world_size:
        raise ValueError(
            f"rank={rank}, world_size={world_size} do not match the process group's "
            f"{dist.get_rank(group)}, {dist.get_world_size(group)}"
        )
    device = torch.device(device)
    comm = _comm_device(group, device)
    t0 = _time.perf_counter()

    # 1. local checks and the release; an error is reported to the others in the metadata
    local_error: BaseException | None = None
    nbrs: list[int] = []
    meta_values = [0.0] * _META_FIELDS
    try:
        batch_size = _check_options(batch_size, estimator, own_proportions, epsilon)
        _check_seed("seed", seed)
        noise_seed = check_noise_seed(noise_seed)
        origin, stop, num_batches = _check_time_range(time_range, batch_size)
        nbrs = [int(j) for j in neighbours_of_rank]
        bad = [j for j in nbrs if not 0 <= j < world_size]
        if bad:
            raise ValueError(f"node {rank}: neighbour index(es) {bad} out of range 0..{world_size - 1}")
        if rank in nbrs:
            raise ValueError(f"node {rank} is listed as its own neighbour")
        if len(set(nbrs)) != len(nbrs):
            raise ValueError(f"node {rank}: a neighbour is listed twice in {nbrs}")
        x, y, ids = _node_training_data(
            rank, node, train_mask, num_classes=num_classes, device=device, batch_size=batch_size,
            k=k, origin=origin, stop=stop, private=epsilon is not None)

        ledger = PrivacyLedger()
        counts = batch_label_counts(y, ids, num_batches, num_classes)
        noise = None
        if epsilon is not None:
            noise = node_noise_generator(noise_seed, rank, device)  # warns for a noise_seed
        else:
            ledger.spend(PrivacyEvent("non_private", name=f"llp/node{rank}/label_proportions"))
        release = private_label_proportions(
            counts, epsilon, batch_sizes=batch_size, floor=floor, ledger=ledger, generator=noise,
            name=f"llp/node{rank}/label_counts", estimator=estimator,
        )
        exact_own = None
        if own_proportions == "exact":
            exact_own = release if epsilon is None else private_label_proportions(counts, None)
        meta_values = [1.0, float(num_batches), float(num_classes), float(batch_size), float(origin),
                       -1.0 if epsilon is None else float(epsilon)]
    except Exception as err:  # reported to the other nodes below, then raised
        local_error = err
    t1 = _time.perf_counter()

    # 2. public metadata: ok flag, batch grid, classes, epsilon, whose tables this node wants
    meta = torch.zeros(_META_FIELDS + world_size, dtype=torch.float64, device=comm)
    meta[:_META_FIELDS] = torch.tensor(meta_values, dtype=torch.float64)
    if local_error is None:
        meta[[_META_FIELDS + j for j in nbrs]] = 1.0
    gathered = [torch.empty_like(meta) for _ in range(world_size)]
    dist.all_gather(gathered, meta, group=group)
    if local_error is not None:
        raise local_error
    table = torch.stack(gathered).cpu()
    failed = [j for j in range(world_size) if table[j, 0] != 1.0]
    if failed:
        raise PeerFailedError(
            f"node {rank}: node(s) {failed} failed before the exchange; nothing was sent"
        )
    mine = table[rank, 1:_META_FIELDS]
    differ = [j for j in range(world_size) if not torch.equal(table[j, 1:_META_FIELDS], mine)]
    if differ:
        raise ValueError(
            f"node {rank}: node(s) {differ} use another (num_batches, num_classes, batch_size, "
            f"origin, epsilon): {[table[j, 1:_META_FIELDS].tolist() for j in differ]} vs "
            f"{mine.tolist()}; every node must use the same batch grid, classes and epsilon"
        )
    subscribers = [j for j in range(world_size) if table[j, _META_FIELDS + rank] == 1.0]

    # 3. the proportions: this node's table to its subscribers, its neighbours' tables to it
    message = encode_proportions(release).to(comm)
    buffers = {j: torch.empty_like(message) for j in nbrs}
    requests = [dist.isend(message, j, group=group, tag=0) for j in subscribers]
    requests += [dist.irecv(buffers[j], j, group=group, tag=0) for j in nbrs]
    for req in requests:
        req.wait()
    dist.barrier(group=group)
    received = {j: decode_proportions(buffers[j], epsilon, device) for j in nbrs}
    t2 = _time.perf_counter()

    # 4. train: own proportions, then each neighbour's (as received)
    own = release if own_proportions == "released" else exact_own
    sources = [own] + [received[j] for j in nbrs]
    try:
        fit = fit_node_models(
            x, ids, sources, k=k, n_starts=n_starts, generator=node_generator(seed, rank, device),
            n_init=n_init,
            kmeans_max_iter=kmeans_max_iter, search_max_iter=search_max_iter, swaps=swaps,
        )
    except ValueError as err:
        raise type(err)(f"{_node_name(rank, node)}: {err}") from err
    t3 = _time.perf_counter()
    nbytes = message.numel() * message.element_size()
    return NodeResult(
        rank=rank, models=fit.models, proportions=release, received=received, ledger=ledger,
        fit=fit, neighbours=nbrs, subscribers=subscribers, batch_size=batch_size,
        num_batches=num_batches, origin=origin, num_classes=num_classes, epsilon=epsilon,
        bytes_sent=nbytes * len(subscribers), bytes_received=nbytes * len(nbrs),
        seconds={"release": t1 - t0, "exchange": t2 - t1, "train": t3 - t2, "total": t3 - t0},
    )


# --------------------------------------------------------------------------- processes
def _to_cpu(obj):
    """``obj`` with every tensor moved to the CPU (dataclasses, lists, tuples, dicts)."""
    if isinstance(obj, Tensor):
        return obj.detach().cpu()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: _to_cpu(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
        return dataclasses.replace(obj, **changes)
    if isinstance(obj, list):
        return [_to_cpu(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_to_cpu(v) for v in obj)
    if isinstance(obj, dict):
        return {key: _to_cpu(v) for key, v in obj.items()}
    return obj


def _write(path: Path, payload: Any) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        pickle.dump(payload, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)


def _node_process(rank: int, world_size: int, init_method: str, backend: str, timeout: float,
                  num_threads: int, worker_setup: Callable[[int], Any] | None, node,
                  neighbours_of_rank: list[int], train_mask, kwargs: dict, out_dir: str,
                  env: dict[str, str] | None) -> None:
    """Body of a worker process: set up, join the group, run the node, report to ``out_dir``."""
    out = Path(out_dir)
    try:
        if env is not None:  # forkserver: the launcher's environment, as spawn would have it
            os.environ.clear()
            os.environ.update(env)
        torch.set_num_threads(num_threads)
        if worker_setup is not None:
            worker_setup(rank)
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout))
        try:
            result = run_node(rank, world_size, node, neighbours_of_rank, train_mask=train_mask,
                              **kwargs)
        finally:
            dist.destroy_process_group()
        result = _to_cpu(result)
        ledger_state = result.ledger.state_dict()
        result.ledger = None
        _write(out / f"result_{rank}.pkl", {"result": result, "ledger": ledger_state})
    except BaseException as err:  # reported to the launching process
        try:
            pickle.dumps(err)
            exc = err
        except Exception:  # unpicklable exception: the text is enough
            exc = None
        _write(out / f"error_{rank}.pkl", {
            "type": type(err).__name__, "message": str(err), "traceback": traceback.format_exc(),
            "exception": exc, "peer": isinstance(err, PeerFailedError),
        })
        sys.exit(1)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _read(path: Path) -> Any:
    with open(path, "rb") as fh:
        return pickle.load(fh)  # written by our own worker processes


def launch_network(
    nodes: Sequence,
    neighbours: np.ndarray | Sequence[Sequence[int]],
    *,
    batch_size: int,
    k: int,
    epsilon: float | None = None,
    train_masks: Sequence[np.ndarray] | None = None,
    seed: int = 0,
    noise_seed: int | None = None,
    device: torch.device | str = "cpu",
    num_classes: int = len(FLOW_BIN_EDGES),
    time_range: tuple[int, int] | None = None,
    n_starts: int = 32,
    n_init: int = 3,
    floor: float = DEFAULT_FLOOR,
    own_proportions: str = "exact",
    estimator: str = "seed",
    swaps: bool = True,
    kmeans_max_iter: int = 100,
    search_max_iter: int = 1000,
    world_size: int | None = None,
    backend: str = "gloo",
    master_addr: str = "127.0.0.1",
    master_port: int | None = None,
    timeout: float = 300.0,
    num_threads: int | None = None,
    worker_setup: Callable[[int], Any] | None = None,
    start_method: str | None = None,
) -> list[NodeResult]:
    """Run the LLP protocol with one process per node, exchanging proportions by ``torch.distributed``.

    Starts ``len(nodes)`` processes, process ``i`` receiving node ``i``'s
    data only, which join a process group on ``master_addr:master_port`` and run
    :func:`run_node`. With the same arguments the releases and models equal those of
    :func:`~dp_proto.llp.simulate_network` (same kind of device, same
    ``num_threads`` as the simulating process).

    Parameters
    ----------
    nodes, neighbours, batch_size, k, epsilon, train_masks, seed, noise_seed, device,
    num_classes, time_range, n_starts, n_init, floor, own_proportions, estimator, swaps,
    kmeans_max_iter, search_max_iter
        As in :func:`~dp_proto.llp.simulate_network`: a private run needs
        ``time_range``; for an exact run its default is computed here, from every
        node's times, as the simulation does. ``noise_seed`` (default None: fresh
        noise at every node) makes the noise reproducible and warns with
        :class:`~dp_proto.exceptions.PrivacyLeakWarning` here (and in every worker).
    world_size : int, optional
        Must equal ``len(nodes)`` (one node per process) if given.
    backend : str, default "gloo"
    master_addr : str, default "127.0.0.1"
    master_port : int, optional
        Default: a free port (bound to port 0 and released).
    timeout : float, default 300
        Seconds for the whole run; also the process group's timeout for collectives.
    num_threads : int, optional
        Intra-op threads per process; default ``max(1, cpu_count // len(nodes))``.
    worker_setup : callable, optional
        Called as ``worker_setup(rank)`` in every worker before it joins the group
        (e.g. to instrument ``torch.distributed``); must be picklable (a module-level
        function or a ``functools.partial`` of one).
    start_method : {"forkserver", "spawn"}, optional
        How the workers are started; default ``"forkserver"`` where available (much
        faster from the second launch on), else ``"spawn"``.

    Returns
    -------
    list of NodeResult
        By rank; tensors on the CPU.

    Raises
    ------
    ValueError
        Bad arguments (checked before any process starts), e.g. a private run
        without ``time_range``.
    NodeProcessError
        A worker failed: the error of the first node that failed on its own (not
        because a peer did), with its traceback in the message; chained to the
        original exception where it could be pickled.
    TimeoutError
        The run took longer than ``timeout``; the workers are terminated.
    """
    n_nodes = len(nodes)
    if n_nodes == 0:
        raise ValueError("the network has no node")
    if world_size is not None and world_size != n_nodes:
        raise ValueError(
            f"world_size={world_size} but there are {n_nodes} nodes: launch_network runs one "
            f"process per node"
        )
    nbrs = check_neighbours(neighbours, n_nodes)
    batch_size = _check_options(batch_size, estimator, own_proportions, epsilon)
    if train_masks is not None and len(train_masks) != n_nodes:
        raise ValueError(f"train_masks has {len(train_masks)} entries for {n_nodes} nodes")
    _check_seed("seed", seed)
    noise_seed = check_noise_seed(noise_seed)
    origin, stop, _ = _resolve_time_range(time_range, nodes, batch_size, epsilon, "launch_network")
    time_range = (origin, stop)
    if epsilon is not None and noise_seed is not None:
        _warn_noise_seed("launch_network", noise_seed)
    timeout = float(timeout)
    if not math.isfinite(timeout) or timeout <= 0:
        raise ValueError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
    if num_threads is None:
        num_threads = max(1, (os.cpu_count() or 1) // n_nodes)
    num_threads = _check_int("num_threads", num_threads, 1)
    port = _free_port(master_addr) if master_port is None else _check_int("master_port", master_port, 1)
    init_method = f"tcp://{master_addr}:{port}"
    kwargs = dict(
        batch_size=batch_size, k=k, epsilon=epsilon, seed=seed, noise_seed=noise_seed,
        time_range=tuple(time_range),
        device=str(torch.device(device)), num_classes=num_classes, n_starts=n_starts,
        n_init=n_init, floor=floor, own_proportions=own_proportions, estimator=estimator,
        swaps=swaps, kmeans_max_iter=kmeans_max_iter, search_max_iter=search_max_iter,
    )
    if start_method is None:
        start_method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    if start_method not in ("spawn", "forkserver"):
        raise ValueError(f"start_method must be 'spawn' or 'forkserver', got {start_method!r}")
    ctx = mp.get_context(start_method)
    env = None
    if start_method == "forkserver":
        ctx.set_forkserver_preload(["dp_proto.llp.network"])  # torch, dp_proto (slow imports)
        env = dict(os.environ)  # the server's environment is that of its start
    with tempfile.TemporaryDirectory(prefix="dp_proto_llp_") as out_dir:
        out = Path(out_dir)
        procs = []
        try:
            for i in range(n_nodes):
                mask = None if train_masks is None else train_masks[i]
                proc = ctx.Process(
                    target=_node_process, name=f"llp-node-{i}", daemon=True,
                    args=(i, n_nodes, init_method, backend, timeout, num_threads, worker_setup,
                          nodes[i], nbrs[i], mask, kwargs, out_dir, env),
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
        errors = {i: _read(out / f"error_{i}.pkl") for i in range(n_nodes)
                  if (out / f"error_{i}.pkl").exists()}
        failure, cause = None, None
        if errors:
            primary = [i for i, e in errors.items() if not e["peer"]] or sorted(errors)
            i = min(primary)
            err = errors[i]
            failure = NodeProcessError(
                f"node {i} failed ({err['type']}: {err['message']})\n\n"
                f"Traceback in its process:\n{err['traceback']}",
                i, err["traceback"],
            )
            cause = err["exception"]
        if running:
            raise TimeoutError(
                f"node(s) {running} did not finish within {timeout:g} s and were terminated"
                + ("" if failure is None else f" (node {failure.rank} had failed)")
            ) from failure
        if failure is not None:
            raise failure from cause
        results = []
        for i, proc in enumerate(procs):
            path = out / f"result_{i}.pkl"
            if not path.exists():
                raise NodeProcessError(
                    f"node {i}'s process exited with code {proc.exitcode} without a result "
                    f"(killed, or crashed in native code)", i,
                )
            payload = _read(path)
            result = payload["result"]
            result.ledger = PrivacyLedger.from_state_dict(payload["ledger"])
            results.append(result)
    return results


def _wait(procs: list, timeout: float, grace: float) -> list[int]:
    """Wait for the workers; after the first failure give the others ``grace`` seconds.

    Returns the indices of the workers still running when ``timeout`` ran out (none
    if all ended, or if the grace period after a failure ended first).
    """
    deadline = _time.monotonic() + timeout
    failed_at = None
    while True:
        alive = [i for i, p in enumerate(procs) if p.exitcode is None]
        if not alive:
            return []
        now = _time.monotonic()
        if failed_at is None and any(p.exitcode not in (None, 0) for p in procs):
            failed_at = now
        if failed_at is not None and now - failed_at > grace:
            return []
        if now >= deadline:
            return alive
        limit = deadline - now if failed_at is None else min(deadline - now, failed_at + grace - now)
        mp.connection.wait([procs[i].sentinel for i in alive], timeout=max(0.0, min(limit, 1.0)))


def as_network_result(results: Sequence[NodeResult]) -> NetworkResult:
    """The :class:`~dp_proto.llp.NetworkResult` of a distributed run (for :func:`~dp_proto.llp.evaluate`)."""
    if not results:
        raise ValueError("no node results")
    results = sorted(results, key=lambda r: r.rank)
    if [r.rank for r in results] != list(range(len(results))):
        raise ValueError(f"ranks {[r.rank for r in results]} are not 0..{len(results) - 1}")
    first = results[0]
    seconds = {key: max(r.seconds.get(key, 0.0) for r in results) for key in first.seconds}
    return NetworkResult(
        models=[r.models for r in results], proportions=[r.proportions for r in results],
        ledgers=[r.ledger for r in results], neighbours=[r.neighbours for r in results],
        fits=[r.fit for r in results], batch_size=first.batch_size, num_batches=first.num_batches,
        origin=first.origin, num_classes=first.num_classes, epsilon=first.epsilon, seconds=seconds,
    )


# --------------------------------------------------------------------------- command line
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dp_proto.llp.distributed``: the seed's setting, one process per node."""
    parser = argparse.ArgumentParser(
        prog="python -m dp_proto.llp.distributed",
        description="LLP on SCATS counts with every node in its own process (gloo, localhost).",
    )
    parser.add_argument("--data-dir", default=None, help="data directory (default: $DP_PROTO_DATA_DIR)")
    parser.add_argument("--nodes", type=int, default=4, help="nodes: --anchor and its nearest detectors")
    parser.add_argument("--anchor", type=int, default=0, help="index of the first node's detector")
    parser.add_argument("--neighbours", type=int, default=None, help="c (default: nodes - 1)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--epsilon", type=float, default=0.1, help="<= 0: exact proportions")
    parser.add_argument("--folds", type=int, default=10)
    parser.add_argument("--fold", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0,
                        help="k-means seeding and local-search starts (never the noise)")
    parser.add_argument("--noise-seed", type=int, default=None,
                        help="reproducible Laplace noise (not private against whoever knows it; "
                             "default: fresh operating-system entropy)")
    parser.add_argument("--n-starts", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    parser.add_argument("--compare", action="store_true",
                        help="also run simulate_network here and compare the models")
    args = parser.parse_args(argv)
    if args.compare and args.noise_seed is None and args.epsilon > 0:
        parser.error("--compare needs --noise-seed: two runs with fresh noise release different tables")

    from dp_proto.data.traffic import (
        load_scats_counts,
        nearest_neighbours,
        node_datasets,
        time_block_folds,
    )
    from dp_proto.llp.network import evaluate, simulate_network

    torch.set_num_threads(args.threads)
    network = load_scats_counts(args.data_dir)
    all_nodes = node_datasets(network)
    if not 0 <= args.anchor < len(all_nodes):
        parser.error(f"--anchor must lie in 0..{len(all_nodes) - 1}")
    group = [args.anchor] + nearest_neighbours(network.coordinates, args.nodes - 1)[args.anchor].tolist()
    nodes = [all_nodes[i] for i in group]
    c = args.nodes - 1 if args.neighbours is None else args.neighbours
    nbrs = nearest_neighbours(network.coordinates[group], c)
    time_range = (int(network.time[0]), int(network.time[-1]) + 1)
    folds = [time_block_folds(n.time, args.folds, time_range=time_range, gap=5)[args.fold]
             for n in nodes]
    train, test = [f[0] for f in folds], [f[1] for f in folds]
    kwargs = dict(batch_size=args.batch_size, k=args.k,
                  epsilon=args.epsilon if args.epsilon > 0 else None, train_masks=train,
                  seed=args.seed, noise_seed=args.noise_seed, time_range=time_range,
                  n_starts=args.n_starts)
    t0 = _time.perf_counter()
    results = launch_network(nodes, nbrs, num_threads=args.threads, **kwargs)
    seconds = _time.perf_counter() - t0
    ev = evaluate(as_network_result(results), nodes, test)
    print(f"nodes {[n.detector for n in nodes]}, neighbours {nbrs.tolist()}")
    print(f"fold {args.fold}/{args.folds}, b={args.batch_size}, k={args.k}, epsilon={kwargs['epsilon']}")
    for r, acc in zip(results, ev.node_accuracy, strict=True):
        print(f"  node {r.rank}: accuracy {acc:.4f}, epsilon {r.ledger.get_epsilon(0.0):g}, "
              f"sent {r.bytes_sent} B to {r.subscribers}, received {r.bytes_received} B")
    print(f"accuracy {ev.accuracy:.4f} (own models {ev.own_accuracy:.4f}), {seconds:.1f} s distributed")
    if args.compare:
        sim = simulate_network(nodes, nbrs, **kwargs)
        same = all(
            torch.equal(a.centres, b.centres) and torch.equal(a.cluster_labels, b.cluster_labels)
            for r, ms in zip(results, sim.models, strict=True) for a, b in zip(r.models, ms, strict=True)
        ) and all(torch.equal(r.proportions.proportions, p.proportions)
                  for r, p in zip(results, sim.proportions, strict=True))
        print(f"simulation: accuracy {evaluate(sim, nodes, test).accuracy:.4f}, "
              f"identical models and releases: {same}")
        if not same:
            return 1
    return 0


if __name__ == "__main__":
    # the canonical module, so that what the workers pickle refers to dp_proto.llp.distributed
    from dp_proto.llp.distributed import main as _main

    sys.exit(_main())
