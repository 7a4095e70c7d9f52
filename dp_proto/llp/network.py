"""A network of sensor nodes learning from (private) label proportions, in one process.

The protocol of Sachweh, Boiar & Liebig (2021, Sec. 3), every node ``i`` in turn
(each step one method of ``LLPNode``, shared with the distributed
run of ``dp_proto.llp.distributed``):

1. **Release.** Count the labels of its training windows per time batch
   (``batch_label_counts`` on the public
   ``BatchGrid``) and release their proportions,
   exact (``epsilon=None``) or epsilon-DP
   (``private_label_proportions``, public clip bound ``b``).
   The release goes to the node's neighbours.
2. **Train.** Fit one k-means on its own training windows and label it once per
   source of proportions: its own, then each neighbour's, in the order of
   ``neighbours[i]`` (``fit_node_models``). Row ``k`` of every
   release is the same time window at every node (global batch ids), and a
   source's batch is used where the receiving node has training windows in it
   and the source marks it valid (exact releases: the sender had records;
   private releases: every batch, as which batches are empty is not released).
3. **Predict** by the majority vote of the ``c + 1`` models (``evaluate``).

Randomness. The Laplace noise of every private release comes from fresh
operating-system entropy (``node_noise_generator`` with ``noise_seed=None``,
the default): nobody, the operator included, can rebuild it, so nobody can subtract
it from a release. ``seed`` governs only the non-private randomness of node ``i``:
``node_generator`` ``(seed, i, device)`` draws, in a fixed order, the k-means
seeding, then the starts of the local searches for its own and its neighbours'
proportions. Exact reproduction of the noise (tests, benchmarks) is the explicit
opt-in ``noise_seed``: node ``i`` then draws its noise from
``node_noise_generator`` ``(noise_seed, i, device)``, which warns with
``PrivacyLeakWarning``, and every ledger's summary says
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
curator log ``dp_proto.curator``, see ``dp_proto.privacy.curator``, never to a
warning or an error). Exact runs may leave ``time_range`` out and derive it.

Privacy. A node's labels enter only its own release and its own models, and
the release is the only thing that leaves the node. Each node has its own
``PrivacyLedger`` holding that one release: with
``epsilon`` the network is epsilon-DP for each node's data (add/remove one
window of that node) with respect to everything its neighbours receive and
therefore everything they compute. The models of node ``i`` are trained on
node ``i``'s own features, which are not privatised (Sachweh, Boiar and Liebig
privatise the exchanged label proportions only); the models and their
predictions stay on the node and are not covered by the guarantee
(``NetworkResult`` says which of its fields are node-local). The windows
(features) are past flows, i.e. earlier labels of the same series, so the
guarantee is per window, not per vehicle or per time span. An exact run records
a ``non_private`` event (epsilon = inf). Each call is one release: evaluating
``F`` cross-validation folds releases ``F`` overlapping tables (composition:
``F epsilon``).

Floating point. The release adds discrete Laplace noise (integers, scale
``1/epsilon``) to the integer counts (``laplace_mechanism``
with ``grid=1``): every noisy count is an integer, so there are no input-dependent gaps
between representable outputs (Mironov 2012); see ``dp_proto.privacy.noise``.
"""

from __future__ import annotations

import time as _time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from dp_proto.llp.model import LLPNodeModel, NodeFit, majority_vote
from dp_proto.llp.node import (
    LLPConfig,
    LLPNode,
    node_generator,
    node_noise_generator,
    node_tensors,
    warn_noise_seed,
)
from dp_proto.llp.proportions import LabelProportions
from dp_proto.llp.release import LLPNodeRelease
from dp_proto.privacy.ledger import PrivacyLedger

__all__ = [
    "LLPConfig",
    "NetworkEvaluation",
    "NetworkResult",
    "check_neighbours",
    "evaluate",
    "node_generator",
    "node_noise_generator",
    "simulate_network",
]


@dataclass
class NetworkResult:
    """What every node computed in ``simulate_network``.

    What leaves the nodes (covered by the per-node guarantee of a private run):
    ``proportions``, ``ledgers`` and the public settings ``neighbours``,
    ``batch_size``, ``num_batches``, ``origin``, ``num_classes``, ``epsilon``.
    Node-local (each node's own computation on its own data, not covered, never
    sent): ``models``, ``fits``; ``seconds`` is a timing diagnostic.
    ``node_release(i)`` is what node ``i`` publishes, ready for ``save_release``.

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
    config : LLPConfig or None
        The run's settings (``time_range`` and ``num_classes`` resolved); it holds the
        ``noise_seed``, so it is not published (``node_release`` takes the public
        settings from it).
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
    config: LLPConfig | None = None

    def node_release(self, index: int) -> LLPNodeRelease:
        """What node ``index`` published: its label proportions with its ledger on the public
        grid (``LLPNodeRelease``; ``save_release(path)`` writes it). Its models are node-local
        and not part of it.

        Parameters
        ----------
        index : int
            The node, ``0 .. N - 1``.

        Returns
        -------
        LLPNodeRelease

        Raises
        ------
        ValueError
            An index out of range, or a result without its ``config`` (built by hand).
        """
        if not 0 <= int(index) < len(self.proportions):
            raise ValueError(f"node index {index} out of range 0..{len(self.proportions) - 1}")
        if self.config is None:
            raise ValueError(
                "this NetworkResult has no config (simulate_network and as_network_result set it); build "
                "the release with LLPNodeRelease.from_config"
            )
        i = int(index)
        return LLPNodeRelease.from_config(i, self.proportions[i], self.ledgers[i], self.config)


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

    Notes
    -----
    ``repr`` and ``str`` show the headline numbers and counts, no arrays: the pooled
    accuracies, the number of nodes and test windows, and the spread of the per-node
    accuracies (``str``: one line each).
    """

    accuracy: float
    node_accuracy: np.ndarray
    own_accuracy: float
    model_accuracy: list[np.ndarray]
    n_test: np.ndarray
    correct: np.ndarray

    def _node_spread(self) -> str:
        """``min / median / max`` of the per-node accuracies (nodes with test windows)."""
        scored = np.asarray(self.node_accuracy, dtype=np.float64)
        scored = scored[np.isfinite(scored)]
        if scored.size == 0:
            return "none"
        return f"min {scored.min():.4f}, median {np.median(scored):.4f}, max {scored.max():.4f}"

    def _models_per_node(self) -> str:
        """The number of models per node, or its range ``"a-b"``."""
        counts = sorted({len(a) for a in self.model_accuracy})
        if not counts:
            return "0"
        return str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"

    def __repr__(self) -> str:
        return (
            f"NetworkEvaluation(accuracy={self.accuracy:.4f}, own_accuracy={self.own_accuracy:.4f}, "
            f"nodes={len(self.n_test)}, n_test={int(np.sum(self.n_test))}, correct={int(np.sum(self.correct))}, "
            f"node_accuracy=[{self._node_spread()}], models_per_node={self._models_per_node()})"
        )

    def __str__(self) -> str:
        nodes, total = len(self.n_test), int(np.sum(self.n_test))
        empty = int(np.sum(np.asarray(self.n_test) == 0))
        lines = [
            f"LLP network evaluation: {nodes} node(s), {total} test window(s)"
            + (f" ({empty} node(s) without test windows)" if empty else ""),
            f"  accuracy (majority vote)  {self.accuracy:.4f}  ({int(np.sum(self.correct))} / {total})",
            f"  own model alone           {self.own_accuracy:.4f}",
            f"  per node                  {self._node_spread()}",
            f"  models per node           {self._models_per_node()}",
        ]
        return "\n".join(lines)


def check_neighbours(neighbours: np.ndarray | Sequence[Sequence[int]], n_nodes: int) -> list[list[int]]:
    """Neighbour lists as ``list[list[int]]``, checked.

    ``neighbours`` is an ``(N, c)`` array (e.g. from
    ``nearest_neighbours``) or ``N`` sequences of
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
    return [check_neighbour_row(i, row, n_nodes) for i, row in enumerate(rows)]


def check_neighbour_row(index: int, row: Sequence[int], n_nodes: int) -> list[int]:
    """Node ``index``'s neighbour list as ``list[int]``: indices in range, not itself, no repeats."""
    row = [int(j) for j in row]
    bad = [j for j in row if not 0 <= j < n_nodes]
    if bad:
        raise ValueError(f"node {index}: neighbour index(es) {bad} out of range 0..{n_nodes - 1}")
    if index in row:
        raise ValueError(f"node {index} is listed as its own neighbour")
    if len(set(row)) != len(row):
        raise ValueError(f"node {index}: a neighbour is listed twice in {row}")
    return row


def simulate_network(
    nodes: Sequence,
    neighbours: np.ndarray | Sequence[Sequence[int]],
    config: LLPConfig | None = None,
    *,
    train_masks: Sequence[np.ndarray] | None = None,
    device: torch.device | str = "cpu",
    **settings,
) -> NetworkResult:
    """Run the LLP protocol for every node of a network: release, exchange, train.

    Parameters
    ----------
    nodes : sequence of NodeData-like
        Objects with ``features (m, d)``, ``labels (m,)`` (int in ``0 ..
        num_classes - 1``) and ``time (m,)`` (global slot), e.g. from
        ``node_datasets``.
    neighbours : (N, c) array or N sequences
        ``neighbours[i]``: the nodes whose proportions node ``i`` receives. See
        ``check_neighbours`` (a node without neighbours trains its own model only).
    config : LLPConfig, optional
        The run's settings. Or pass them as keywords instead (``**settings``):
        ``simulate_network(nodes, nbrs, batch_size=32, k=16, epsilon=0.1,
        time_range=(origin, stop))`` builds ``LLPConfig(batch_size=32, ...)``; see
        ``LLPConfig`` for every setting (``batch_size``, ``k``,
        ``epsilon``, ``time_range``, ``num_classes``, ``seed``, ``noise_seed``,
        ``n_starts``, ``n_init``, ``floor``, ``own_proportions``, ``estimator``,
        ``swaps``, ``kmeans_max_iter``, ``search_max_iter``). A private run needs
        ``time_range``; ``num_classes`` defaults to the nodes' own ``num_classes``.
    train_masks : sequence of bool arrays, optional
        ``train_masks[i] (m_i,)``: node ``i``'s training windows (default: all).
        Pass time-aligned masks (e.g. the same fold of
        ``time_block_folds`` with a common
        ``time_range``) so that the batches of different nodes cover the same
        training time.
    device : torch.device or str, default "cpu"

    Returns
    -------
    NetworkResult

    Raises
    ------
    ValueError
        A private run without ``time_range``; bad settings, neighbours, masks or
        ``noise_seed``; ``batch_size`` larger than the time range, or (exact runs
        only; a private run logs it for the curator) than a node's number of
        training windows (all of them would fall into one or two batches); fewer
        training windows than ``k`` (exact runs with the k-means learner only; a
        private node trains ``k``-centre models whatever its count, see
        ``LLPNode.train``); a node whose training batches share none with a
        neighbour's valid batches (exact runs).
    TypeError
        Both ``config`` and keyword settings, or an unknown setting.
    DataValidationError
        NaN/inf features, labels outside ``0 .. num_classes - 1``.

    Warns
    -----
    PrivacyLeakWarning
        ``noise_seed`` given in a private run.
    """
    config = LLPConfig.from_settings(config, settings, "simulate_network")
    n_nodes = len(nodes)
    if n_nodes == 0:
        raise ValueError("the network has no node")
    nbrs = check_neighbours(neighbours, n_nodes)
    if train_masks is not None and len(train_masks) != n_nodes:
        raise ValueError(f"train_masks has {len(train_masks)} entries for {n_nodes} nodes")
    config = config.resolve(nodes, "simulate_network")
    device = torch.device(device)
    network = [
        LLPNode(i, node, config, train_mask=None if train_masks is None else train_masks[i], device=device)
        for i, node in enumerate(nodes)
    ]
    if config.private and config.noise_seed is not None:
        warn_noise_seed("simulate_network")

    # 1. release: every node's noise from its own noise generator (fresh entropy by default)
    t0 = _time.perf_counter()
    releases = [node.release() for node in network]
    t1 = _time.perf_counter()

    # 2. train: own proportions, then each neighbour's (as received)
    fits = [node.train([releases[j] for j in nbrs[i]]) for i, node in enumerate(network)]
    t2 = _time.perf_counter()
    grid = config.grid
    return NetworkResult(
        models=[fit.models for fit in fits],
        proportions=releases,
        ledgers=[n.ledger for n in network],
        neighbours=nbrs,
        fits=fits,
        batch_size=config.batch_size,
        num_batches=grid.num_batches,
        origin=grid.origin,
        num_classes=config.num_classes,
        epsilon=config.epsilon,
        seconds={"release": t1 - t0, "train": t2 - t1, "total": t2 - t0},
        config=config,
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
        See ``majority_vote`` (``"first"``: the own model).

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
        device = models[0].device
        x, y, _ = node_tensors(i, node, None if test_masks is None else test_masks[i], result.num_classes, device)
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
