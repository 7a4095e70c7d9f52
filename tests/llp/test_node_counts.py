"""A private LLP run shows nothing that hangs on how many windows a node has.

The audit's counterexample: a private node with ``k`` training windows trained, and the
same node without one of them raised ``ValueError: node 1 has 7 training windows, fewer
than k=8`` (for the bag learner too, which does not use ``k``). A private node now trains
whatever its number of windows, even none, with models of the same shapes; an exact run
keeps its clear error.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from dp_proto.llp import LLPConfig, LLPNode, simulate_network
from dp_proto.privacy.testing import adversarial_removals, neighbour_check

B, K, L = 4, 8, 3
TIME_RANGE = (0, 64)  # 16 batches of 4 slots
NEIGHBOURS = [[1, 2], [2, 0], [0, 1]]
FAST = dict(batch_size=B, k=K, num_classes=L, n_starts=4, n_init=1, bag_epochs=5, bag_hidden=8)
NODE_LOCAL = ("models", "fits", "seconds")  # each node's own models, never sent; wall times
SMALL = 1  # the node with exactly k windows


def _records(small_windows: int = K):
    """Three nodes, flattened to one row per record ``(node, features, label, time)``:
    nodes 0 and 2 with one window per slot, node 1 with ``small_windows`` windows."""
    rng = np.random.default_rng(0)
    node, feats, labels, times = [], [], [], []
    for i in range(3):
        t = np.arange(TIME_RANGE[1]) if i != SMALL else np.sort(rng.choice(TIME_RANGE[1], small_windows, replace=False))
        y = rng.integers(0, L, t.size)
        feats.append(y[:, None] * 20.0 + rng.normal(0, 3, (t.size, 2)))
        node.append(np.full(t.size, i))
        labels.append(y.astype(np.int64))
        times.append(t)
    return tuple(np.concatenate(a) for a in (node, feats, labels, times))


def _nodes(node, feats, labels, times):
    return [
        SimpleNamespace(features=feats[node == i], labels=labels[node == i], time=times[node == i], num_classes=L)
        for i in range(3)
    ]


def _run(records, learner="kmeans", **extra):
    return simulate_network(
        _nodes(*records), NEIGHBOURS, epsilon=1.0, time_range=TIME_RANGE, learner=learner, **{**FAST, **extra}
    )


def _without(records, index):
    keep = np.arange(len(records[0])) != index
    return tuple(a[keep] for a in records)


def _model_shapes(result):
    """Every node's models, as shapes: k-means centres and labels, or the bag network's
    parameters."""
    shapes = []
    for models in result.models:
        for m in models:
            if hasattr(m, "centres"):
                shapes.append((tuple(m.centres.shape), tuple(m.cluster_labels.shape)))
            else:
                shapes.append(tuple(tuple(p.shape) for p in m.network.parameters()))
    return shapes


def _small_node_windows(records):
    return np.flatnonzero(records[0] == SMALL)


@pytest.mark.parametrize("learner", ["kmeans", "bag"])
def test_a_private_node_losing_its_kth_window_still_trains(learner):
    """The counterexample: node 1 with k = 8 windows, then with 7."""
    records = _records()
    full = _run(records, learner)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        less = _run(_without(records, int(_small_node_windows(records)[0])), learner)
    assert _model_shapes(less) == _model_shapes(full)
    per_node = 3 if learner == "kmeans" else 1  # own and two neighbours' sources; one bag network
    assert [len(m) for m in less.models] == [len(m) for m in full.models] == [per_node] * 3
    assert [p.proportions.shape for p in less.proportions] == [p.proportions.shape for p in full.proportions]
    if learner == "kmeans":
        assert tuple(less.fits[SMALL].cluster_counts.shape) == (16, K)


@pytest.mark.parametrize("learner", ["kmeans", "bag"])
@pytest.mark.parametrize("own_proportions", ["exact", "released"])
@pytest.mark.parametrize("windows", [0, 1])
def test_a_private_node_with_almost_no_windows_trains_models_of_the_same_shapes(learner, own_proportions, windows):
    reference = _model_shapes(_run(_records(), learner, own_proportions=own_proportions))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = _run(_records(windows), learner, own_proportions=own_proportions)
    assert _model_shapes(result) == reference
    x = torch.as_tensor(_nodes(*_records())[0].features)
    assert all(m.predict(x).shape == (len(x),) for m in result.models[SMALL])


def test_fewer_windows_than_k_give_each_window_a_cluster_of_its_own():
    data = SimpleNamespace(
        features=np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]]),
        labels=np.array([0, 1, 2]),
        time=np.array([0, 5, 9]),
        num_classes=L,
    )
    node = LLPNode(0, data, LLPConfig(batch_size=B, k=K, epsilon=1.0, time_range=TIME_RANGE, num_classes=L))
    node.release()
    fit = node.train([])
    (model,) = fit.models
    x = torch.as_tensor(data.features)
    assert torch.equal(model.centres[:3], x) and torch.equal(model.centres[3:], x[2].expand(K - 3, 2))
    assert fit.clustering.inertia == 0.0 and fit.clustering.labels.tolist() == [0, 1, 2]
    assert float(fit.cluster_counts.sum()) == 3.0 and fit.cluster_counts[:, 3:].sum() == 0
    assert torch.equal(model.predict(x), model.cluster_labels[:3])  # the copies never predict
    assert model.predict(x).tolist() == [0, 1, 2]  # the own exact proportions, one window per batch


def test_exact_runs_keep_their_clear_error_and_the_bag_learner_does_not_check_k():
    records = _records(K - 1)
    nodes = _nodes(*records)
    with pytest.raises(ValueError, match="node 1 has 7 training windows, fewer than k=8"):
        simulate_network(nodes, NEIGHBOURS, time_range=TIME_RANGE, **FAST)
    result = simulate_network(nodes, NEIGHBOURS, time_range=TIME_RANGE, learner="bag", **FAST)
    assert len(result.models[SMALL]) == 1


@pytest.mark.parametrize("learner", ["kmeans", "bag"])
def test_removing_windows_of_the_smallest_node_passes_the_neighbour_check(learner):
    """Neighbour check of the private run on D and D minus each of: node 1's windows
    (with k windows, each removal crosses k), a corner record, the last record of the
    largest node. No exception or warning differs, the releases move by at most their
    sensitivity, and every node's models keep their shapes."""
    records = _records()
    node, feats, labels, _ = records
    removals = list(
        dict.fromkeys([*_small_node_windows(records)[:3].tolist(), *adversarial_removals(feats, labels, groups=node)])
    )

    def release(*data):
        return _run(data, learner)

    report = neighbour_check(release, records, removals, curator_only=NODE_LOCAL)
    report.assert_ok()
    assert report.releases == [f"llp/node{i}/label_counts" for i in range(3)]
    reference = _model_shapes(_run(records, learner))
    for index in removals:
        assert _model_shapes(_run(_without(records, index), learner)) == reference
