"""Federated LVQ with every node in its own process, exchanging models by ``torch.distributed``.

Brinkrolf (2023, chapter 6) merges node models in one shot; ``dp_proto.lvq.federated``
holds the merge (``merge_models``). Here the nodes are real parties:

* ``federated_fit`` -- the single-process simulation: every node fits a clone of the
  estimator on its rows, publishes its model in the release format, and the releases
  are merged.
* ``run_federated_node`` -- one node inside an initialised process group (rank ``i`` is
  node ``i``): fit, exchange releases with every other node, merge. Same code path and
  seeds as the simulation, so with the same ``random_state`` (and, for private nodes,
  the same explicit ``noise_seed``) it computes the same merged model, bit for bit
  (same kind of device, same number of intra-op threads).
* ``launch_federated`` -- one process per node on localhost (gloo), each handed only
  its own node's data, through the launcher the label-proportions network uses
  (``dp_proto._processes.launch_workers``); the same ``run_federated_node`` runs with
  NCCL across machines when the caller sets up the process group.

What goes over the wire
-----------------------
Node ``i`` makes exactly these ``torch.distributed`` calls:

1. ``all_gather`` of ``[ok, n_features, release_bytes]`` (float64): public metadata.
   ``ok`` is 0 if the node failed before the exchange (its data, its labels outside the
   shared label set, its fit); every node then stops instead of waiting for a model
   that never comes. All nodes must have the same feature count.
   The label set is public input: a private run takes it from ``classes`` or the
   estimator's ``classes`` and is refused without one (never read from the labels),
   and every private node fits all of it, so no node's classes depend on its records.
2. ``all_gather`` of its model's release (``Release.to_bytes``: the manifest and the
   tensors of ``to_release()``, padded to the longest release, uint8): what the model
   publishes and nothing else. A private node's release is its DP model (prototypes and
   Omega after the noisy training, noisy class counts, the public bounds, the ledger's
   events); its data, its noise seed and its curator state never leave it.

Every node then merges all releases (``merge_models``) and so holds the same global
model. The merged model of private nodes is post-processing of their releases and,
by parallel composition over the nodes' disjoint data, ``(max_i epsilon_i, max_i
delta_i)``-DP (``privacy_``, ``node_ledgers_``).

Seeds. Node ``i`` fits ``node_estimators(estimator, m, random_state)[i]``: its
``random_state`` is child ``i`` of ``numpy.random.SeedSequence(random_state)`` (or the
estimator's own, if ``random_state`` is None); a private estimator keeps
``noise_seed=None`` (fresh operating-system entropy at every node), and an explicit
``noise_seed`` (for reproducing, it warns) becomes a different seed per node: nodes
sharing one noise draw would let one node's release reveal another's noise.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from sklearn.base import clone

from dp_proto._processes import check_group, gather_status, launch_workers
from dp_proto.exceptions import DataValidationError
from dp_proto.lvq.estimators import GMLVQ
from dp_proto.lvq.federated import merge_models
from dp_proto.release import model_class, release_from_bytes

__all__ = ["FederatedResult", "federated_fit", "launch_federated", "node_estimators", "run_federated_node"]


@dataclass
class FederatedResult:
    """The outcome of a federated fit.

    Attributes
    ----------
    merged : GMLVQ or LGMLVQ (or their private variants)
        The merged model (``merge_models``), the same at every node.
    nodes : list
        Every node's model as the other nodes received it: loaded from its release
        (for a private node: no curator state, a read-only ledger).
    release_bytes : list of int
        The size of every node's release on the wire.
    seconds : dict of str to float
        Wall time of the fit, exchange and merge (the slowest node's, in a launch).
    """

    merged: Any
    nodes: list
    release_bytes: list[int] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------- shared steps
def node_estimators(estimator: GMLVQ, n_nodes: int, random_state: int | None = None) -> list[GMLVQ]:
    """Unfitted clones of ``estimator``, one per node, with per-node seeds (module docstring)."""
    _check_estimator(estimator)
    params = estimator.get_params(deep=False)
    children = np.random.SeedSequence(random_state).spawn(n_nodes) if random_state is not None else None
    noise_seed = params.get("noise_seed")
    clones = []
    for i in range(n_nodes):
        node = clone(estimator)
        if children is not None:
            node.set_params(random_state=int(children[i].generate_state(1)[0]))
        if noise_seed is not None:
            node.set_params(noise_seed=int(np.random.SeedSequence([int(noise_seed), i]).generate_state(1)[0]))
        clones.append(node)
    return clones


def _check_estimator(estimator: Any) -> None:
    if not isinstance(estimator, GMLVQ):
        raise TypeError(
            f"federated LVQ merges GMLVQ or LGMLVQ models (or their private variants), got {type(estimator).__name__}"
        )
    if estimator.get_params(deep=False).get("prototypes_per_class", 1) != 1:
        raise ValueError("federated merging takes one prototype per class and node: set prototypes_per_class=1")


def _is_private(estimator: Any) -> bool:
    """A private LVQ estimator (``DPGMLVQ``, ``DPLGMLVQ``): one that attaches node guarantees."""
    return callable(getattr(estimator, "attach_node_guarantees", None))


def _public_label_set(estimator: GMLVQ, classes: Sequence[Any] | np.ndarray | None, owner: str) -> np.ndarray | None:
    """The public label set of a private run, from public settings only; None for a
    non-private estimator.

    A private run takes ``classes``, else the estimator's own ``classes``; with neither it
    is refused before any data is read: a label set read from the private labels would
    change when the only record of a class is removed (the merged model's classes, or a
    node's classes outside the merge's set). ``classes`` and the estimator's ``classes``
    must agree when both are given.
    """
    if not _is_private(estimator):
        return None
    own = estimator.get_params(deep=False).get("classes")
    if classes is None and own is None:
        raise ValueError(
            f"{owner}: a private federated run needs the public label set: pass classes=[...] (here or to the "
            f"estimator); read from the private labels, the label set (and with it the merged model, or an "
            f"error) would change when the only record of a class is removed"
        )
    given = np.asarray(list(classes if classes is not None else own))
    label_set = np.unique(given)
    if given.ndim != 1 or len(label_set) != len(given) or len(label_set) < 2:
        raise ValueError(
            f"{owner}: classes must be a 1-D list of distinct labels, at least 2 public classes, got {given.tolist()}"
        )
    if classes is not None and own is not None:
        mine = np.unique(np.asarray(list(own)))
        if not np.array_equal(mine, label_set):
            raise ValueError(
                f"{owner}: classes={label_set.tolist()} and the estimator's classes={mine.tolist()} differ; "
                "a private federated run has one public label set"
            )
    return label_set


def _with_label_set(estimator: GMLVQ, label_set: np.ndarray | None) -> GMLVQ:
    """``estimator`` with ``classes=label_set`` (a private node fits the public label set,
    so every node model has a prototype for every public class); unchanged if None."""
    if label_set is None or estimator.get_params(deep=False).get("classes") is not None:
        return estimator
    return clone(estimator).set_params(classes=label_set.tolist())


def _label_set(labels: Sequence[np.ndarray], classes: Sequence[Any] | None, public: np.ndarray | None) -> np.ndarray:
    """The shared label set: the ``public`` one of a private run, else ``classes``, else
    the union of every node's labels; a node with labels outside it is refused
    (``_check_node_labels``)."""
    if public is not None:
        label_set = public
    else:
        held = np.unique(np.concatenate([np.asarray(y) for y in labels]))
        label_set = held if classes is None else np.unique(np.asarray(list(classes)))
    for i, y in enumerate(labels):
        _check_node_labels(y, label_set, i, private=public is not None)
    return label_set


def _check_node_labels(y: np.ndarray, label_set: np.ndarray, rank: int, *, private: bool = False) -> None:
    """Refuse labels outside the shared label set. For a private run the label set is
    public and such a label breaks the declared domain (as in the private estimators): the
    message then names no label of the data."""
    outside = np.setdiff1d(np.unique(y), label_set)
    if outside.size:
        if private:
            raise DataValidationError(
                f"node {rank} has labels outside the public label set {label_set.tolist()}; remove those "
                "records or add the labels to classes"
            )
        raise DataValidationError(
            f"node {rank} has labels {outside.tolist()} outside the shared label set {label_set.tolist()}"
        )


def _release_message(model: Any) -> bytes:
    return model.to_release().to_bytes()


def _received_model(message: bytes) -> Any:
    release = release_from_bytes(message)
    cls: Any = model_class(release.model)
    return cls.from_release(release)


def _merge(messages: Sequence[bytes], label_set: np.ndarray, omega_rank: int | None) -> tuple[Any, list]:
    nodes = [_received_model(m) for m in messages]
    return merge_models(nodes, classes=label_set, rank=omega_rank), nodes


# --------------------------------------------------------------------------- one process
def federated_fit(
    estimator: GMLVQ,
    X: np.ndarray,
    y: np.ndarray,
    nodes: Sequence[np.ndarray],
    *,
    classes: Sequence[Any] | None = None,
    omega_rank: int | None = None,
    random_state: int | None = None,
) -> FederatedResult:
    """Fit one model per node and merge their releases, all in this process.

    Parameters
    ----------
    estimator : GMLVQ, LGMLVQ, DPGMLVQ or DPLGMLVQ
        Unfitted template with ``prototypes_per_class=1``; cloned per node.
    X : array (n, d), y : array (n,)
    nodes : sequence of index arrays
        The rows of every node (disjoint for the private guarantee), e.g. from
        ``node_splits``.
    classes : sequence, optional
        The shared label set. Default: the estimator's ``classes`` for a private
        estimator, the union of the labels otherwise. A private run needs the public
        label set here or in the estimator (both given: they must agree), and every
        node fits it, so every node model has a prototype for every public class.
    omega_rank : int, optional
        ``rank`` of ``merge_models``: rows of the merged Omega (default: full root).
    random_state : int, optional
        Seeds the nodes (``node_estimators``).

    Returns
    -------
    FederatedResult

    Raises
    ------
    ValueError
        A private estimator without a public label set (neither ``classes`` nor the
        estimator's ``classes``) or with two that disagree, checked before any data is
        read; not an LVQ estimator with one prototype per class.
    DataValidationError
        Labels outside the label set (in a private run: outside the public label set,
        a break of its declared domain; the message names no label of the data).
    """
    _check_estimator(estimator)
    public = _public_label_set(estimator, classes, "federated_fit")
    if len(nodes) == 0:
        raise ValueError("federated_fit needs at least one node")
    X, y = np.asarray(X), np.asarray(y)
    parts = [np.asarray(idx) for idx in nodes]
    label_set = _label_set([y[idx] for idx in parts], classes, public)
    t0 = time.perf_counter()
    estimators = node_estimators(_with_label_set(estimator, public), len(parts), random_state)
    fitted = [node.fit(X[idx], y[idx]) for node, idx in zip(estimators, parts, strict=True)]
    messages = [_release_message(m) for m in fitted]
    t1 = time.perf_counter()
    merged, received = _merge(messages, label_set, omega_rank)
    seconds = {"fit": t1 - t0, "exchange": 0.0, "merge": time.perf_counter() - t1}
    return FederatedResult(merged, received, [len(m) for m in messages], seconds)


# --------------------------------------------------------------------------- one process per node
def run_federated_node(
    rank: int,
    world_size: int,
    node_estimator: GMLVQ,
    X: np.ndarray,
    y: np.ndarray,
    label_set: Sequence[Any],
    *,
    omega_rank: int | None = None,
    group: Any = None,
) -> FederatedResult:
    """Node ``rank`` of a federated fit: fit, exchange releases, merge.

    Must be called by every rank of an initialised process group (``group``, default the
    default group) of ``world_size`` ranks. ``node_estimator`` is this node's unfitted
    estimator (``node_estimators(...)[rank]`` to match ``federated_fit``); ``label_set``
    the shared, public label set, the same at every node. A private node fits
    ``label_set`` (its estimator's ``classes``, if given, must be the same set).

    Raises
    ------
    ValueError
        A private node estimator whose ``classes`` differ from ``label_set``.
    DataValidationError
        This node's labels lie outside ``label_set``, or the nodes have different
        feature counts.
    PeerFailedError
        Another node failed before the exchange.
    """
    cuda = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    comm = check_group("run_federated_node", rank, world_size, group, cuda)
    labels = np.unique(np.asarray(list(label_set)))
    t0 = time.perf_counter()
    local_error: BaseException | None = None
    message = b""
    n_features = 0
    try:
        _check_estimator(node_estimator)
        public = _public_label_set(node_estimator, labels, f"run_federated_node (node {rank})")
        node_estimator = _with_label_set(node_estimator, public)
        X, y = np.asarray(X), np.asarray(y)
        _check_node_labels(y, labels, rank, private=public is not None)
        model = node_estimator.fit(X, y)
        n_features = int(model.n_features_in_)
        message = _release_message(model)
    except Exception as err:  # reported to the other nodes below, then raised
        local_error = err
    t1 = time.perf_counter()

    # 1. public metadata: ok, feature count, release size
    table = gather_status(rank, world_size, local_error, [n_features, len(message)], group=group, device=comm)
    widths = sorted({int(w) for w in table[:, 1].tolist()})
    if len(widths) != 1:
        raise DataValidationError(f"node {rank}: the nodes have different feature counts {widths}")
    sizes = [int(s) for s in table[:, 2].tolist()]

    # 2. the releases, padded to the longest
    buffer = torch.zeros(max(sizes), dtype=torch.uint8)
    buffer[: len(message)] = torch.frombuffer(bytearray(message), dtype=torch.uint8)
    gathered = [torch.empty_like(buffer, device=comm) for _ in range(world_size)]
    dist.all_gather(gathered, buffer.to(comm), group=group)
    messages = [bytes(g.cpu()[:size].numpy().tobytes()) for g, size in zip(gathered, sizes, strict=True)]
    t2 = time.perf_counter()

    merged, received = _merge(messages, labels, omega_rank)
    seconds = {"fit": t1 - t0, "exchange": t2 - t1, "merge": time.perf_counter() - t2}
    return FederatedResult(merged, received, sizes, seconds)


def _federated_worker(rank: int, world_size: int, node_estimator, X, y, label_set, omega_rank) -> FederatedResult:
    return run_federated_node(rank, world_size, node_estimator, X, y, label_set, omega_rank=omega_rank)


def launch_federated(
    estimator: GMLVQ,
    node_data: Sequence[tuple[np.ndarray, np.ndarray]],
    *,
    classes: Sequence[Any] | None = None,
    omega_rank: int | None = None,
    random_state: int | None = None,
    backend: str = "gloo",
    master_addr: str = "127.0.0.1",
    master_port: int | None = None,
    timeout: float = 300.0,
    num_threads: int | None = None,
    start_method: str | None = None,
) -> FederatedResult:
    """Federated LVQ with one process per node on this machine.

    Process ``i`` receives only ``node_data[i] = (X_i, y_i)`` and runs
    ``run_federated_node``. With the same ``estimator``, ``classes``, ``omega_rank`` and
    ``random_state`` (and ``num_threads`` equal to the simulating process's) the merged
    model equals ``federated_fit``'s on the same rows.

    Parameters
    ----------
    estimator : GMLVQ, LGMLVQ, DPGMLVQ or DPLGMLVQ
        Unfitted template, ``prototypes_per_class=1``.
    node_data : sequence of (X_i, y_i)
    classes : sequence, optional
        The shared label set, as in ``federated_fit``: default the estimator's
        ``classes`` for a private estimator (which needs a public label set, refused
        before any data is read otherwise), the union of the nodes' labels (computed
        here) for a non-private one.
    omega_rank, random_state
        As in ``federated_fit``.
    backend, master_addr, master_port, timeout, num_threads, start_method
        The processes and their group (``dp_proto._processes.launch_workers``; the
        ``timeout`` in seconds covers the whole run).

    Returns
    -------
    FederatedResult
        Node 0's (every node merges the same model; checked here); ``seconds`` are the
        slowest node's.

    Raises
    ------
    TypeError, ValueError, DataValidationError
        Bad arguments or data, checked before any process starts: not an LVQ estimator
        with one prototype per class, a private estimator without a public label set,
        nodes with different feature counts, labels outside the label set.
    NodeProcessError
        A node's process failed (its traceback in the message).
    """
    _check_estimator(estimator)
    public = _public_label_set(estimator, classes, "launch_federated")
    if len(node_data) == 0:
        raise ValueError("launch_federated needs at least one node")
    data = [(np.asarray(X), np.asarray(y)) for X, y in node_data]
    widths = sorted({X.shape[1] if X.ndim == 2 else -1 for X, _ in data})
    if len(widths) != 1 or widths[0] < 1:
        raise DataValidationError(f"every node needs a 2-D feature matrix with one feature count, got {widths}")
    label_set = _label_set([y for _, y in data], classes, public)
    estimators = node_estimators(_with_label_set(estimator, public), len(data), random_state)
    results = launch_workers(
        _federated_worker,
        [(est, X, y, label_set, omega_rank) for est, (X, y) in zip(estimators, data, strict=True)],
        name="lvq-node",
        backend=backend,
        master_addr=master_addr,
        master_port=master_port,
        timeout=timeout,
        num_threads=num_threads,
        start_method=start_method,
        preload=("dp_proto.lvq.distributed",),
    )
    first = results[0]
    for i, other in enumerate(results[1:], start=1):
        if not (
            np.array_equal(other.merged.prototypes_, first.merged.prototypes_)
            and np.array_equal(other.merged.omega_, first.merged.omega_)
        ):
            raise RuntimeError(f"node {i} merged another model than node 0")
    first.seconds = {key: max(r.seconds[key] for r in results) for key in first.seconds}
    return first
