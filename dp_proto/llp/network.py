"""A network of sensor nodes learning from (private) label proportions, in one process.

The protocol of Sachweh, Boiar and Liebig (Sec. 3), every node ``i`` in turn:

1. **Release.** Count the labels of its training windows per time batch
   (:func:`~dp_proto.llp.batch_label_counts` on the global grid of
   :func:`~dp_proto.data.traffic.time_batches`) and release their proportions,
   exact (``epsilon=None``) or epsilon-DP
   (:func:`~dp_proto.llp.private_label_proportions`, public clip bound ``b``).
   The release goes to the node's neighbours.
2. **Train.** Fit one k-means on its own training windows and label it once per
   source of proportions: its own, then each neighbour's, in the order of
   ``neighbours[i]`` (:func:`~dp_proto.llp.fit_node_models`). Row ``k`` of every
   release is the same time window at every node (global batch ids), and a
   source's batch is used where the receiving node has training windows in it
   and the source marks it valid (exact releases: the sender had records;
   private releases: every batch, as which batches are empty is not released).
3. **Predict** by the majority vote of the ``c + 1`` models (:func:`evaluate`).

Randomness. The Laplace noise of every private release comes from fresh
operating-system entropy (:func:`node_noise_generator` with ``noise_seed=None``,
the default): nobody, the operator included, can rebuild it, so nobody can subtract
it from a release. ``seed`` governs only the non-private randomness of node ``i``:
:func:`node_generator` ``(seed, i, device)`` draws, in a fixed order, the k-means
seeding, then the starts of the local searches for its own and its neighbours'
proportions. Exact reproduction of the noise (tests, benchmarks) is the explicit
opt-in ``noise_seed``: node ``i`` then draws its noise from
:func:`node_noise_generator` ``(noise_seed, i, device)``, which warns with
:class:`~dp_proto.exceptions.PrivacyLeakWarning`, and every ledger's summary says
``"noise": "reproducible"`` (``"fresh"`` otherwise). A distributed run (one process
per node, proportions exchanged with ``torch.distributed``) that calls both
generators the same way and uses the same functions reproduces every node's
computation exactly, on the same kind of device, when it is given the same
``noise_seed`` (with fresh noise it reproduces the models given the same releases).

Public time grid. The batches are a public grid: ``time_range = (origin, stop)`` (the
recording period) and ``b`` fix ``num_batches = ceil((stop - origin) / b)``, and
with them the shape of every release. A private run (``epsilon`` given) therefore
requires ``time_range``: derived from the data (one past the largest time of any
node), the number of rows would depend on single records -- removing the last window
of one node could remove a row from every node's table. Records outside the time
range are dropped before the release and before training (their number goes to the
curator log ``dp_proto.curator``, see :mod:`dp_proto.privacy.curator`, never to a
warning or an error). Exact runs may leave ``time_range`` out and derive it.

Privacy. A node's labels enter only its own release and its own models, and
the release is the only thing that leaves the node. Each node has its own
:class:`~dp_proto.privacy.PrivacyLedger` holding that one release: with
``epsilon`` the network is epsilon-DP for each node's data (add/remove one
window of that node) with respect to everything its neighbours receive and
therefore everything they compute. The models of node ``i`` are trained on
node ``i``'s own features, which are not privatised (Sachweh, Boiar and Liebig
privatise the exchanged label proportions only); the models and their
predictions stay on the node and are not covered by the guarantee
(:class:`NetworkResult` says which of its fields are node-local). The windows
(features) are past flows, i.e. earlier labels of the same series, so the
guarantee is per window, not per vehicle or per time span. An exact run records
a ``non_private`` event (epsilon = inf). Each call is one release: evaluating
``F`` cross-validation folds releases ``F`` overlapping tables (composition:
``F epsilon``).

Floating point. The release adds discrete Laplace noise (integers, scale
``1/epsilon``) to the integer counts (:func:`~dp_proto.privacy.mechanisms.laplace_mechanism`
with ``grid=1``): every noisy count is an integer, so there are no input-dependent gaps
between representable outputs (Mironov 2012); see :mod:`dp_proto.privacy.noise`.
"""

from __future__ import annotations

import time as _time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from dp_proto._neighbours import check_points
from dp_proto.data.traffic import FLOW_BIN_EDGES, time_batches
from dp_proto.exceptions import DataValidationError, PrivacyLeakWarning
from dp_proto.llp.model import LLPNodeModel, NodeFit, fit_node_models, majority_vote
from dp_proto.llp.proportions import (
    DEFAULT_FLOOR,
    LabelProportions,
    batch_label_counts,
    private_label_proportions,
)
from dp_proto.privacy.calibration import check_epsilon
from dp_proto.privacy.curator import curator_log
from dp_proto.privacy.ledger import PrivacyEvent, PrivacyLedger
from dp_proto.privacy.randomness import check_noise_seed, fresh_generator, seeded_generator

__all__ = [
    "NetworkEvaluation",
    "NetworkResult",
    "check_neighbours",
    "evaluate",
    "node_generator",
    "node_noise_generator",
    "simulate_network",
]


def _derived_seed(*words: int) -> int:
    """The first 63 bits of ``SeedSequence(words).generate_state(2, uint32)`` (low word first)."""
    state = np.random.SeedSequence([int(w) for w in words]).generate_state(2, dtype=np.uint32)
    return (int(state[0]) | (int(state[1]) << 32)) & ((1 << 63) - 1)


def _check_seed(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return int(value)


#: Extra word of the noise streams' seed sequence: ``node_noise_generator(s, i)`` and
#: ``node_generator(s, i)`` never share a stream, even for the same ``s``.
_NOISE_STREAM = 0x6E6F697365  # "noise"


def node_generator(seed: int, node_index: int, device: torch.device | str = "cpu") -> torch.Generator:
    """The generator of node ``node_index``'s non-private randomness in a run with ``seed``.

    It draws the k-means seeding and the local-search starts, never the noise of a
    release (see :func:`node_noise_generator`). The generator's seed is the first 63
    bits of ``numpy.random.SeedSequence([seed, node_index]).generate_state(2, uint32)``
    (low word first): different nodes get well-separated streams, and a node's
    stream depends only on ``(seed, node_index)``, not on how many nodes there are
    or in which order they run.

    Parameters
    ----------
    seed, node_index : int
        Both >= 0.
    device : torch.device or str, default "cpu"
        Device of the generator (draws for CUDA tensors need a CUDA generator).
    """
    seed = _check_seed("seed", seed)
    node_index = _check_seed("node_index", node_index)
    gen = torch.Generator(device=torch.device(device))
    gen.manual_seed(_derived_seed(seed, node_index))
    return gen


def node_noise_generator(
    noise_seed: int | None, node_index: int, device: torch.device | str = "cpu", *, warn: bool = True
) -> torch.Generator:
    """The generator of node ``node_index``'s release noise.

    ``noise_seed=None`` (the default of every LLP release): a generator seeded with 64
    bits of operating-system entropy
    (:func:`~dp_proto.privacy.randomness.fresh_generator`); the ledger of the release
    records ``"noise": "fresh"``.

    ``noise_seed`` given: the explicit opt-in to reproducible noise, for tests and
    benchmarks. The generator is seeded with the first 63 bits of
    ``SeedSequence([noise_seed, node_index, 0x6E6F697365])`` (a stream of its own per
    node, never the stream of :func:`node_generator` for the same numbers); it warns
    with :class:`~dp_proto.exceptions.PrivacyLeakWarning` (``warn=False`` when the
    caller warned already), since whoever knows ``noise_seed`` can subtract the noise
    and read the exact counts, and the ledger records ``"noise": "reproducible"``.

    Parameters
    ----------
    noise_seed : int >= 0 or None
    node_index : int >= 0
    device : torch.device or str, default "cpu"
    warn : bool, default True
    """
    node_index = _check_seed("node_index", node_index)
    if noise_seed is None:
        return fresh_generator(torch.device(device))
    noise_seed = check_noise_seed(noise_seed)
    if warn:
        _warn_noise_seed(f"LLP node {node_index}", noise_seed, "its release")
    return seeded_generator(_derived_seed(noise_seed, node_index, _NOISE_STREAM), torch.device(device),
                            warn=False)


def _warn_noise_seed(owner: str, noise_seed: int, what: str = "every node's release") -> None:
    warnings.warn(
        f"{owner}: noise_seed makes the Laplace noise of {what} reproducible; "
        "whoever knows the seed can remove it and read the exact label counts, so the release is "
        "not private against them. Use it for tests and benchmarks only; the ledger records "
        "'noise': 'reproducible'",
        PrivacyLeakWarning, stacklevel=3)


def _resolve_time_range(time_range, nodes: Sequence, batch_size: int, epsilon: float | None,
                        owner: str) -> tuple[int, int, int]:
    """``(origin, stop, num_batches)`` of the public batch grid.

    A private run needs ``time_range``; an exact one may derive it from the data
    (``(0, 1 + the largest time of any node)``)."""
    if time_range is None:
        if epsilon is not None:
            raise ValueError(
                f"{owner}: a private run (epsilon={epsilon!r}) needs the public time_range=(origin, stop) "
                "(the recording period): it fixes the batch grid and so the shape of every release; "
                "derived from the data, the number of batches would depend on single records"
            )
        last = max((int(np.max(n.time)) for n in nodes if len(n.time)), default=0)
        time_range = (0, last + 1)
    if isinstance(time_range, (str, bytes)) or len(time_range) != 2:
        raise ValueError(f"time_range must be (origin, stop), the public recording period, got {time_range!r}")
    origin, stop = (int(v) for v in time_range)
    if stop - origin < batch_size:
        raise ValueError(f"batch_size={batch_size} is longer than the time range [{origin}, {stop})")
    return origin, stop, -(-(stop - origin) // batch_size)


def _node_training_data(i, node, mask, *, num_classes, device, batch_size, k, origin, stop,
                        private: bool) -> tuple[Tensor, Tensor, Tensor]:
    """Node ``i``'s training windows inside the public time range: features, labels, batch ids.

    Windows outside ``[origin, stop)`` are dropped (their count goes to the curator
    log only). Too few windows for ``k`` clusters raise ``ValueError``; fewer than
    ``batch_size`` raise in an exact run and go to the curator log in a private one
    (the release is still epsilon-DP; an error would depend on single records)."""
    x, y, t = _node_tensors(i, node, mask, num_classes, device)
    name = _node_name(i, node)
    inside = (t >= origin) & (t < stop)
    if not bool(inside.all()):
        curator_log("%s: %d training window(s) outside the public time_range [%d, %d) dropped",
                    name, int((~inside).sum()), origin, stop)
        keep = torch.as_tensor(inside, device=x.device)
        x, y, t = x[keep], y[keep], t[inside]
    if x.shape[0] < batch_size:
        message = (f"{name} has {x.shape[0]} training windows, fewer than batch_size={batch_size}: "
                   f"its proportions would describe (almost) all its data at once; use a smaller b")
        if not private:
            raise ValueError(message)
        curator_log("%s", message)
    if x.shape[0] < k:
        raise ValueError(f"{name} has {x.shape[0]} training windows, fewer than k={k} clusters")
    ids = torch.as_tensor(time_batches(t, batch_size, origin=origin), device=device)
    return x, y, ids


@dataclass
class NetworkResult:
    """What every node computed in :func:`simulate_network`.

    What leaves the nodes (covered by the per-node guarantee of a private run):
    ``proportions``, ``ledgers`` and the public settings ``neighbours``,
    ``batch_size``, ``num_batches``, ``origin``, ``num_classes``, ``epsilon``.
    Node-local (each node's own computation on its own data, not covered, never
    sent): ``models``, ``fits``; ``seconds`` is a timing diagnostic.

    Attributes
    ----------
    models : list of list of LLPNodeModel
        ``models[i]``: node ``i``'s models, its own first, then one per neighbour
        in the order of ``neighbours[i]``. Node-local.
    proportions : list of LabelProportions
        ``proportions[i]``: node ``i``'s release (what its neighbours received),
        ``(num_batches, num_classes)``.
    ledgers : list of PrivacyLedger
        ``ledgers[i]``: node ``i``'s release (one Laplace event, or one
        ``non_private`` event for an exact run); a private ledger's ``summary()``
        says ``"noise": "fresh"``, or ``"reproducible"`` with ``noise_seed``.
    neighbours : list of list of int
    fits : list of NodeFit
        Clustering, cluster counts and local searches of every node. Node-local.
    batch_size, num_batches, origin : int
        The public batch grid: batch ``k`` is slots ``[origin + k b, origin + (k + 1) b)``,
        ``num_batches = ceil((stop - origin) / b)`` for ``time_range = (origin, stop)``.
    num_classes : int
    epsilon : float or None
    seconds : dict of str to float
        Wall time of the release and training phases.
    """

    models: list[list[LLPNodeModel]]
    proportions: list[LabelProportions]
    ledgers: list[PrivacyLedger]
    neighbours: list[list[int]]
    fits: list[NodeFit]
    batch_size: int
    num_batches: int
    origin: int
    num_classes: int
    epsilon: float | None
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class NetworkEvaluation:
    """Test accuracy of the majority vote (and of the own model alone) per node and pooled.

    Attributes
    ----------
    accuracy : float
        Correct votes / test windows, pooled over nodes (``nan`` without test windows).
    node_accuracy : ndarray of shape (N,)
        Per node; ``nan`` where a node has no test window.
    own_accuracy : float
        Pooled accuracy of the nodes' own models alone (no vote).
    model_accuracy : list of ndarray
        ``model_accuracy[i][j]``: accuracy of model ``j`` of node ``i``.
    n_test : ndarray of shape (N,), int64
    correct : ndarray of shape (N,), int64
    """

    accuracy: float
    node_accuracy: np.ndarray
    own_accuracy: float
    model_accuracy: list[np.ndarray]
    n_test: np.ndarray
    correct: np.ndarray


def check_neighbours(neighbours: np.ndarray | Sequence[Sequence[int]], n_nodes: int) -> list[list[int]]:
    """Neighbour lists as ``list[list[int]]``, checked.

    ``neighbours`` is an ``(N, c)`` array (e.g. from
    :func:`~dp_proto.data.traffic.nearest_neighbours`) or ``N`` sequences of
    possibly different lengths. An empty list is allowed: that node trains its
    own model only (and its vote is that model's prediction).

    Raises
    ------
    ValueError
        Wrong number of rows, an index out of range, a node listed as its own
        neighbour, or a neighbour listed twice.
    """
    if isinstance(neighbours, (np.ndarray, Tensor)):
        arr = np.asarray(neighbours.cpu() if isinstance(neighbours, Tensor) else neighbours)
        if arr.ndim != 2:
            raise ValueError(f"neighbours must have shape (N, c), got {arr.shape}")
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"neighbours must hold integers, got dtype {arr.dtype}")
        rows = [[int(v) for v in row] for row in arr]
    else:
        rows = [[int(v) for v in row] for row in neighbours]
    if len(rows) != n_nodes:
        raise ValueError(f"neighbours has {len(rows)} rows for {n_nodes} nodes")
    for i, row in enumerate(rows):
        bad = [j for j in row if not 0 <= j < n_nodes]
        if bad:
            raise ValueError(f"node {i}: neighbour index(es) {bad} out of range 0..{n_nodes - 1}")
        if i in row:
            raise ValueError(f"node {i} is listed as its own neighbour")
        if len(set(row)) != len(row):
            raise ValueError(f"node {i}: a neighbour is listed twice in {row}")
    return rows


def _node_name(i: int, node) -> str:
    det = getattr(node, "detector", None)
    return f"node {i}" + (f" (detector {det})" if det is not None else "")


def _node_tensors(i, node, mask, num_classes, device):
    name = _node_name(i, node)
    feats = np.asarray(node.features)
    labels = np.asarray(node.labels)
    times = np.asarray(node.time)
    m = len(labels)
    if feats.ndim != 2 or feats.shape[0] != m or times.shape != (m,):
        raise ValueError(
            f"{name}: features (m, d), labels (m,) and time (m,) do not match: "
            f"{feats.shape}, {labels.shape}, {times.shape}"
        )
    if mask is None:
        mask = np.ones(m, dtype=bool)
    mask = np.asarray(mask)
    if mask.shape != (m,) or mask.dtype != bool:
        raise ValueError(f"{name}: mask must be a boolean array of shape ({m},), got {mask.dtype} {mask.shape}")
    if labels.size and not np.issubdtype(labels.dtype, np.integer):
        raise DataValidationError(f"{name}: labels must hold integers, got dtype {labels.dtype}")
    sel = labels[mask]
    if sel.size and (sel.min() < 0 or sel.max() >= num_classes):
        bad = sorted(set(sel[(sel < 0) | (sel >= num_classes)].tolist()))[:10]
        raise DataValidationError(f"{name}: label(s) {bad} outside the classes 0..{num_classes - 1}")
    try:
        x = check_points(torch.as_tensor(feats[mask], device=device), "features")
    except DataValidationError as err:
        raise DataValidationError(f"{name}: {err}") from err
    y = torch.as_tensor(sel, device=device).long()
    t = times[mask]
    return x, y, t


def simulate_network(
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
) -> NetworkResult:
    """Run the LLP protocol for every node of a network: release, exchange, train.

    Parameters
    ----------
    nodes : sequence of NodeData-like
        Objects with ``features (m, d)``, ``labels (m,)`` (int in ``0 ..
        num_classes - 1``) and ``time (m,)`` (global slot), e.g. from
        :func:`~dp_proto.data.traffic.node_datasets`.
    neighbours : (N, c) array or N sequences
        ``neighbours[i]``: the nodes whose proportions node ``i`` receives. See
        :func:`check_neighbours` (a node without neighbours trains its own model only).
    batch_size : int
        ``b``: slots per batch; also the public upper clip bound of the noisy counts.
    k : int
        Clusters of every node's k-means.
    epsilon : float > 0 or None, default None
        Privacy of every node's release; ``None``: exact proportions. A private run
        needs ``time_range``.
    train_masks : sequence of bool arrays, optional
        ``train_masks[i] (m_i,)``: node ``i``'s training windows (default: all).
        Pass time-aligned masks (e.g. the same fold of
        :func:`~dp_proto.data.traffic.time_block_folds` with a common
        ``time_range``) so that the batches of different nodes cover the same
        training time.
    seed : int, default 0
        Non-private randomness only (k-means seeding, local-search starts), see
        :func:`node_generator`. It never reaches the noise.
    noise_seed : int or None, default None
        ``None``: every node's Laplace noise comes from fresh operating-system
        entropy. An int makes the noise reproducible (:func:`node_noise_generator`):
        warns with :class:`~dp_proto.exceptions.PrivacyLeakWarning` (private runs),
        and every ledger's summary says ``"noise": "reproducible"``. For tests and
        benchmarks only. Ignored (nothing is drawn) when ``epsilon`` is None.
    device : torch.device or str, default "cpu"
    num_classes : int, default 6
        ``L``, the public label set (the flow classes of :data:`FLOW_BIN_EDGES`).
    time_range : (int, int), required when ``epsilon`` is given
        ``(origin, stop)`` of the public recording period; batches are
        ``time_batches(t, b, origin)``, ``num_batches = ceil((stop - origin) / b)`` of
        them, the number of rows of every release. Training windows outside it are
        dropped (counted in the curator log only). Exact runs may leave it out:
        ``(0, 1 + the largest time of any node)``, which depends on the data.
    n_starts, n_init : int
        Local-search starts per source, k-means restarts.
    floor : float, default 1e-3
        Lower clip bound of the noisy counts.
    own_proportions : {"exact", "released"}, default "exact"
        What node ``i``'s own model is fitted to: its exact proportions (the default:
        the node holds its labels and its model never leaves it, so noise there
        protects nothing and only costs accuracy), or its release (the seed's ``Q(j)``,
        the same noisy table its neighbours get; for reproducing the seed).
    estimator : {"seed", "unbiased"}, default "seed"
        How noisy counts become proportions, see
        :func:`~dp_proto.llp.private_label_proportions` (``"unbiased"``: no clip,
        divide by ``b``).
    swaps, kmeans_max_iter, search_max_iter
        See :func:`~dp_proto.llp.fit_node_models`.

    Returns
    -------
    NetworkResult

    Raises
    ------
    ValueError
        A private run without ``time_range``; bad neighbours, masks or
        ``noise_seed``; ``batch_size`` larger than the time range, or (exact runs
        only; a private run logs it for the curator) than a node's number of
        training windows (all of them would fall into one or two batches); fewer
        training windows than ``k``; a node whose training batches share none with a
        neighbour's valid batches.
    DataValidationError
        NaN/inf features, labels outside ``0 .. num_classes - 1``.

    Warns
    -----
    PrivacyLeakWarning
        ``noise_seed`` given in a private run.
    """
    n_nodes = len(nodes)
    if n_nodes == 0:
        raise ValueError("the network has no node")
    nbrs = check_neighbours(neighbours, n_nodes)
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    batch_size = int(batch_size)
    if estimator not in ("seed", "unbiased"):
        raise ValueError(f"estimator must be 'seed' or 'unbiased', got {estimator!r}")
    if own_proportions not in ("released", "exact"):
        raise ValueError(f"own_proportions must be 'released' or 'exact', got {own_proportions!r}")
    if train_masks is not None and len(train_masks) != n_nodes:
        raise ValueError(f"train_masks has {len(train_masks)} entries for {n_nodes} nodes")
    if epsilon is not None:
        check_epsilon(epsilon)
    _check_seed("seed", seed)
    noise_seed = check_noise_seed(noise_seed)
    device = torch.device(device)
    origin, stop, num_batches = _resolve_time_range(time_range, nodes, batch_size, epsilon, "simulate_network")
    private = epsilon is not None

    data = []
    for i, node in enumerate(nodes):
        data.append(_node_training_data(
            i, node, None if train_masks is None else train_masks[i], num_classes=num_classes,
            device=device, batch_size=batch_size, k=k, origin=origin, stop=stop, private=private))
    if private and noise_seed is not None:
        _warn_noise_seed("simulate_network", noise_seed)

    # 1. release: every node's noise from its own noise generator (fresh entropy by default)
    t0 = _time.perf_counter()
    ledgers, releases, exact_own = [], [], []
    for i, (_, y, ids) in enumerate(data):
        ledger = PrivacyLedger()
        counts = batch_label_counts(y, ids, num_batches, num_classes)
        noise = None
        if private:
            noise = node_noise_generator(noise_seed, i, device, warn=False)
        else:
            ledger.spend(PrivacyEvent("non_private", name=f"llp/node{i}/label_proportions"))
        release = private_label_proportions(
            counts, epsilon, batch_sizes=batch_size, floor=floor, ledger=ledger, generator=noise,
            name=f"llp/node{i}/label_counts", estimator=estimator,
        )
        ledgers.append(ledger)
        releases.append(release)
        if own_proportions == "exact":
            exact_own.append(release if epsilon is None else private_label_proportions(counts, None))
    t1 = _time.perf_counter()

    # 2. train: own proportions, then each neighbour's (as received)
    models, fits = [], []
    for i, (x, _, ids) in enumerate(data):
        own = releases[i] if own_proportions == "released" else exact_own[i]
        sources = [own] + [releases[j].to(device) for j in nbrs[i]]
        try:
            fit = fit_node_models(
                x, ids, sources, k=k, n_starts=n_starts, generator=node_generator(seed, i, device),
                n_init=n_init, kmeans_max_iter=kmeans_max_iter, search_max_iter=search_max_iter, swaps=swaps,
            )
        except ValueError as err:
            raise type(err)(f"{_node_name(i, nodes[i])}: {err}") from err
        models.append(fit.models)
        fits.append(fit)
    t2 = _time.perf_counter()
    return NetworkResult(
        models=models, proportions=releases, ledgers=ledgers, neighbours=nbrs, fits=fits,
        batch_size=batch_size, num_batches=num_batches, origin=origin, num_classes=num_classes,
        epsilon=epsilon, seconds={"release": t1 - t0, "train": t2 - t1, "total": t2 - t0},
    )


def evaluate(
    result: NetworkResult,
    nodes: Sequence,
    test_masks: Sequence[np.ndarray] | None = None,
    *,
    tie_break: str = "first",
) -> NetworkEvaluation:
    """Accuracy of every node's majority vote on its test windows.

    Parameters
    ----------
    result : NetworkResult
    nodes : sequence of NodeData-like
        The nodes of the run, in the same order.
    test_masks : sequence of bool arrays, optional
        ``test_masks[i] (m_i,)``; default: all windows.
    tie_break : {"first", "smallest"}
        See :func:`~dp_proto.llp.majority_vote` (``"first"``: the own model).

    Returns
    -------
    NetworkEvaluation
    """
    if len(nodes) != len(result.models):
        raise ValueError(f"{len(nodes)} nodes given, the result has {len(result.models)}")
    if test_masks is not None and len(test_masks) != len(nodes):
        raise ValueError(f"test_masks has {len(test_masks)} entries for {len(nodes)} nodes")
    n = len(nodes)
    n_test = np.zeros(n, dtype=np.int64)
    correct = np.zeros(n, dtype=np.int64)
    own_correct = np.zeros(n, dtype=np.int64)
    model_acc = []
    for i, node in enumerate(nodes):
        models = result.models[i]
        device = models[0].centres.device
        x, y, _ = _node_tensors(i, node, None if test_masks is None else test_masks[i],
                                result.num_classes, device)
        n_test[i] = x.shape[0]
        if x.shape[0] == 0:
            model_acc.append(np.full(len(models), np.nan))
            continue
        preds = torch.stack([m.predict(x) for m in models])  # (M, n)
        vote = majority_vote(preds, result.num_classes, tie_break=tie_break)
        correct[i] = int((vote == y).sum())
        own_correct[i] = int((preds[0] == y).sum())
        model_acc.append(((preds == y).double().mean(1)).cpu().numpy())
    total = int(n_test.sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        node_acc = np.where(n_test > 0, correct / np.maximum(n_test, 1), np.nan)
    return NetworkEvaluation(
        accuracy=correct.sum() / total if total else float("nan"),
        node_accuracy=node_acc,
        own_accuracy=own_correct.sum() / total if total else float("nan"),
        model_accuracy=model_acc,
        n_test=n_test,
        correct=correct,
    )
