"""The LLP network with every node in its own process, exchanging proportions by ``torch.distributed``.

``simulate_network`` runs all nodes in one process; here every
node is a process of a ``torch.distributed`` process group (gloo backend on
localhost by default) that holds only its own data and exchanges nothing but
released label-proportion tables (plus public metadata) with the other nodes.

* ``run_node`` -- one node, inside an initialised process group: release,
  exchange, train. Same code path and generator order as the simulation, so with
  the same ``seed`` and the same ``noise_seed`` it computes the same release and the
  same models, bit for bit (same kind of device, same number of intra-op threads).
  By default (``noise_seed=None``) every node draws its Laplace noise from fresh
  operating-system entropy, as in the simulation, and no run reproduces it.
* ``launch_network`` -- starts one process per node on localhost,
  runs ``run_node`` in each and returns a ``NodeResult`` per node;
  ``as_network_result`` turns them into a ``NetworkResult``
  for ``evaluate``.
* ``dp-proto llp --distributed --data-dir DIR --nodes 4`` -- the 4-node setting of
  Sachweh, Boiar & Liebig (2021) on the SCATS counts, run distributed, with its accuracy.

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
   only, as in Sachweh, Boiar & Liebig (2021), where proportions are "sent to the closest c
   neighbours"). The table is ``LabelProportions.proportions`` itself; for an
   exact release (``epsilon=None``) its invalid rows (batches without records,
   uniform rows) are sent as NaN, so the receiver recovers ``valid`` and the
   uniform rows exactly. A private release has no invalid row and goes out
   unchanged.
3. ``barrier`` (no data).

Features, labels, batch ids, the noisy counts behind a private release, the
clustering and the models never leave a node. ``launch_network`` hands each
process only its own node's data (a node never holds another node's data), and
the results come back to the launching process through files in a temporary
directory, not through the process group.

Differences from the simulation
-------------------------------
* A received release carries no ``noisy_counts`` (the simulation hands the whole
  ``LabelProportions`` object to the neighbours, noisy counts
  included; training never reads them). Proportions, ``valid`` and ``epsilon``
  are identical, and so are the models.
* ``time_range`` is required by ``run_node``: the simulation's default for
  exact runs (one past the largest time of *any* node) is a property of every node's
  data, which no single node knows. ``launch_network`` computes that default in
  the launching process for an exact run, as the simulation does; a private run
  needs the public recording period (``time_range``) in both, since a grid derived
  from the data would make the shape of every release depend on single records.
  Training windows outside the time range are dropped (counted in the curator log
  ``dp_proto.curator`` of the node's process only).
* The simulation validates every node before any node releases; here a node that
  fails its own checks reports ``ok = 0`` in step 1, after the others have drawn
  their noise (nothing is sent). The error raised by ``launch_network`` is that
  node's.

Processes and ports. ``launch_network`` uses one process per node
(``world_size == len(nodes)``; several nodes per process is not supported), started
by ``dp_proto._processes.launch_workers`` (shared with federated LVQ,
``dp_proto.lvq.distributed``): ``forkserver`` where the platform has it (preloading
``dp_proto.llp.network``), else ``spawn``, never ``fork``; a TCP rendezvous on
``127.0.0.1`` at a free port. gloo then picks its own sockets on the address the host
name resolves to, falling back to the loopback address (set ``GLOO_SOCKET_IFNAME=lo``
if that address is unusable). Only localhost is involved.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from dp_proto._processes import (
    NodeProcessError,
    PeerFailedError,
    check_group,
    gather_status,
    launch_workers,
    to_cpu,
)
from dp_proto.llp.model import LLPNodeModel, NodeFit
from dp_proto.llp.network import NetworkResult, check_neighbour_row, check_neighbours
from dp_proto.llp.node import LLPConfig, LLPNode, warn_noise_seed
from dp_proto.llp.proportions import LabelProportions
from dp_proto.llp.release import LLPNodeRelease
from dp_proto.privacy.ledger import PrivacyLedger

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


@dataclass
class NodeResult:
    """What one node computed in ``run_node``.

    Attributes
    ----------
    rank : int
        The node's index (its rank and its ``node_generator`` index).
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
    config : LLPConfig or None
        The node's settings (resolved); not published (it holds the ``noise_seed``).
        ``node_release()`` takes the public settings from it.
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
    config: LLPConfig | None = None

    def node_release(self) -> LLPNodeRelease:
        """What this node published: its proportions with its ledger on the public grid
        (``LLPNodeRelease``; ``save_release(path)`` writes it).

        Returns
        -------
        LLPNodeRelease
            Without ``noisy_counts`` in the written release; the models are not part of it.

        Raises
        ------
        ValueError
            A result without its ``config``.
        """
        if self.config is None:
            raise ValueError("this NodeResult has no config; build the release with LLPNodeRelease.from_config")
        return LLPNodeRelease.from_config(self.rank, self.proportions, self.ledger, self.config)


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


def decode_proportions(table: Tensor, epsilon: float | None, device: torch.device | str = "cpu") -> LabelProportions:
    """The release a receiver reconstructs from ``encode_proportions``' message.

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
def run_node(
    rank: int,
    world_size: int,
    node,
    neighbours_of_rank: Sequence[int],
    config: LLPConfig | None = None,
    *,
    train_mask: np.ndarray | None = None,
    device: torch.device | str = "cpu",
    group: dist.ProcessGroup | None = None,
    **settings,
) -> NodeResult:
    """Node ``rank`` of the network: release, exchange proportions, train its models.

    Must be called by every rank of an initialised process group (``group``,
    default the default group) of ``world_size`` ranks, rank ``i`` being node
    ``i``. The node is an ``LLPNode``, as in
    ``simulate_network``: the same release (Laplace noise from
    ``node_noise_generator`` ``(noise_seed, rank, device)``, fresh
    operating-system entropy by default) and the same models (k-means seeding, then
    the local searches, from ``node_generator`` ``(seed, rank,
    device)``). Between the two it exchanges its release with the other ranks (see
    the module docstring for everything that is sent).

    Parameters
    ----------
    rank, world_size : int
        This node's index and the number of nodes; must equal the process group's.
    node : NodeData-like
        This node's ``features (m, d)``, ``labels (m,)`` and ``time (m,)``.
    neighbours_of_rank : sequence of int
        The nodes whose proportions this node receives, in order (row ``rank`` of
        the ``neighbours`` of ``simulate_network``).
    config : LLPConfig, optional
        The run's settings, or pass them as keywords (``**settings``), as in
        ``simulate_network``. ``time_range`` is required here (see
        the module docstring); ``batch_size``, ``num_classes``, ``time_range`` and
        ``epsilon`` must be the same at every node. ``noise_seed`` (default None: fresh
        noise) makes this node's noise reproducible and warns with
        ``PrivacyLeakWarning`` in a private run.
    train_mask : bool array of shape (m,), optional
        This node's training windows (default: all).
    device : torch.device or str, default "cpu"
    group : ProcessGroup, optional

    Returns
    -------
    NodeResult
        Tensors on ``device``.

    Raises
    ------
    ValueError, TypeError, DataValidationError
        This node's bad settings or data (as in the simulation); metadata that
        differs between nodes.
    PeerFailedError
        Another node failed before the exchange.
    """
    device = torch.device(device)
    comm = check_group("run_node", rank, world_size, group, device)
    t0 = _time.perf_counter()

    # 1. local checks and the release; an error is reported to the others in the metadata
    local_error: BaseException | None = None
    nbrs: list[int] = []
    meta_values = [0.0] * _META_FIELDS
    try:
        config = LLPConfig.from_settings(config, settings, "run_node")
        if config.time_range is None:
            raise ValueError(
                "run_node needs time_range=(origin, stop), the public recording period: "
                "no single node knows the times of the others"
            )
        config = config.resolve([node], f"node {rank}")
        nbrs = check_neighbour_row(rank, neighbours_of_rank, world_size)
        this = LLPNode(rank, node, config, train_mask=train_mask, device=device)
        if config.private and config.noise_seed is not None:
            warn_noise_seed(f"LLP node {rank}", "its release")
        release = this.release()
        grid = config.grid
        meta_values = [
            1.0,  # ok (gather_status sets it)
            float(grid.num_batches),
            float(config.num_classes),
            float(config.batch_size),
            float(grid.origin),
            -1.0 if config.epsilon is None else float(config.epsilon),
        ]
    except Exception as err:  # reported to the other nodes below, then raised
        local_error = err
    t1 = _time.perf_counter()

    # 2. public metadata: ok flag, batch grid, classes, epsilon, whose tables this node wants
    flags = [1.0 if j in nbrs else 0.0 for j in range(world_size)]
    table = gather_status(rank, world_size, local_error, meta_values[1:] + flags, group=group, device=comm)
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
    received = {j: decode_proportions(buffers[j], config.epsilon, device) for j in nbrs}
    t2 = _time.perf_counter()

    # 4. train: own proportions, then each neighbour's (as received)
    fit = this.train([received[j] for j in nbrs])
    t3 = _time.perf_counter()
    nbytes = message.numel() * message.element_size()
    return NodeResult(
        rank=rank,
        models=fit.models,
        proportions=release,
        received=received,
        ledger=this.ledger,
        fit=fit,
        neighbours=nbrs,
        subscribers=subscribers,
        batch_size=config.batch_size,
        num_batches=grid.num_batches,
        origin=grid.origin,
        num_classes=config.num_classes,
        epsilon=config.epsilon,
        bytes_sent=nbytes * len(subscribers),
        bytes_received=nbytes * len(nbrs),
        seconds={"release": t1 - t0, "exchange": t2 - t1, "train": t3 - t2, "total": t3 - t0},
        config=config,
    )


# --------------------------------------------------------------------------- processes
def _llp_worker(rank: int, world_size: int, node, neighbours_of_rank, train_mask, config, device: str) -> dict:
    """One node's process (``launch_workers``): run the node, return its result on the
    CPU with its ledger as a state dict."""
    result = to_cpu(run_node(rank, world_size, node, neighbours_of_rank, config, train_mask=train_mask, device=device))
    ledger_state = result.ledger.state_dict()
    result.ledger = None
    return {"result": result, "ledger": ledger_state}


def launch_network(
    nodes: Sequence,
    neighbours: np.ndarray | Sequence[Sequence[int]],
    config: LLPConfig | None = None,
    *,
    train_masks: Sequence[np.ndarray] | None = None,
    device: torch.device | str = "cpu",
    world_size: int | None = None,
    backend: str = "gloo",
    master_addr: str = "127.0.0.1",
    master_port: int | None = None,
    timeout: float = 300.0,
    num_threads: int | None = None,
    worker_setup: Callable[[int], Any] | None = None,
    start_method: str | None = None,
    **settings,
) -> list[NodeResult]:
    """Run the LLP protocol with one process per node, exchanging proportions by ``torch.distributed``.

    Starts ``len(nodes)`` processes, process ``i`` receiving node ``i``'s
    data only, which join a process group on ``master_addr:master_port`` and run
    ``run_node``. With the same arguments the releases and models equal those of
    ``simulate_network`` (same kind of device, same
    ``num_threads`` as the simulating process).

    Parameters
    ----------
    nodes, neighbours, config, train_masks, device, **settings
        As in ``simulate_network``: a private run needs
        ``time_range``; for an exact run its default is computed here, from every
        node's times, as the simulation does. ``noise_seed`` (default None: fresh
        noise at every node) makes the noise reproducible and warns with
        ``PrivacyLeakWarning`` here (and in every worker).
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
    config = LLPConfig.from_settings(config, settings, "launch_network")
    n_nodes = len(nodes)
    if n_nodes == 0:
        raise ValueError("the network has no node")
    if world_size is not None and world_size != n_nodes:
        raise ValueError(
            f"world_size={world_size} but there are {n_nodes} nodes: launch_network runs one process per node"
        )
    nbrs = check_neighbours(neighbours, n_nodes)
    if train_masks is not None and len(train_masks) != n_nodes:
        raise ValueError(f"train_masks has {len(train_masks)} entries for {n_nodes} nodes")
    config = config.resolve(nodes, "launch_network")
    if config.private and config.noise_seed is not None:
        warn_noise_seed("launch_network")
    device_name = str(torch.device(device))
    rank_args = [
        (nodes[i], nbrs[i], None if train_masks is None else train_masks[i], config, device_name)
        for i in range(n_nodes)
    ]
    payloads = launch_workers(
        _llp_worker,
        rank_args,
        name="llp-node",
        backend=backend,
        master_addr=master_addr,
        master_port=master_port,
        timeout=timeout,
        num_threads=num_threads,
        worker_setup=worker_setup,
        start_method=start_method,
        preload=("dp_proto.llp.network",),
    )
    results = []
    for payload in payloads:
        result = payload["result"]
        result.ledger = PrivacyLedger.from_state_dict(payload["ledger"])
        results.append(result)
    return results


def as_network_result(results: Sequence[NodeResult]) -> NetworkResult:
    """The ``NetworkResult`` of a distributed run (for ``evaluate``)."""
    if not results:
        raise ValueError("no node results")
    results = sorted(results, key=lambda r: r.rank)
    if [r.rank for r in results] != list(range(len(results))):
        raise ValueError(f"ranks {[r.rank for r in results]} are not 0..{len(results) - 1}")
    first = results[0]
    seconds = {key: max(r.seconds.get(key, 0.0) for r in results) for key in first.seconds}
    return NetworkResult(
        models=[r.models for r in results],
        proportions=[r.proportions for r in results],
        ledgers=[r.ledger for r in results],
        neighbours=[r.neighbours for r in results],
        fits=[r.fit for r in results],
        batch_size=first.batch_size,
        num_batches=first.num_batches,
        origin=first.origin,
        num_classes=first.num_classes,
        epsilon=first.epsilon,
        seconds=seconds,
        config=first.config,
    )
