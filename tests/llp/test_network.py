"""The network simulation: reproducibility per node, batch alignment, privacy ledgers, errors."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from dp_proto.exceptions import DataValidationError
from dp_proto.llp import (
    batch_label_counts,
    evaluate,
    fit_node_models,
    node_generator,
    node_noise_generator,
    private_label_proportions,
    simulate_network,
    time_batches,
)

# Tests that compare noisy results use the explicit opt-in noise_seed (reproducible noise),
# which warns with PrivacyLeakWarning; test_privacy_soundness checks that warning.
pytestmark = pytest.mark.filterwarnings("ignore::dp_proto.exceptions.PrivacyLeakWarning")


def _network(n_nodes: int = 4, slots: int = 960, seed: int = 0, drop_first: int = 0):
    """Nodes sharing a daily label cycle; features are the last 3 'counts' (label means + noise)."""
    rng = np.random.default_rng(seed)
    t_all = np.arange(slots)
    level = (np.sin(2 * np.pi * t_all / 96) + 1) / 2  # daily cycle in [0, 1]
    nodes = []
    for i in range(n_nodes):
        p = np.stack([1 - level, 0.4 * np.ones(slots), level], 1) ** 2 + 0.05
        labels = np.array([rng.choice(3, p=row / row.sum()) for row in p])
        centres = np.array([[10.0, 10, 10], [40, 40, 40], [80, 80, 80]]) * (1 + 0.05 * i)
        feats = centres[labels] + rng.normal(0, 6, (slots, 3))
        keep = t_all >= (drop_first if i == n_nodes - 1 else 0)
        nodes.append(
            SimpleNamespace(
                detector=(100 + i, 1),
                features=feats[keep],
                labels=labels[keep].astype(np.int64),
                time=t_all[keep],
                num_classes=3,
            )
        )
    nbrs = np.array([[j for j in range(n_nodes) if j != i][:2] for i in range(n_nodes)])
    return nodes, nbrs


def _halves(nodes):
    train = [n.time < 700 for n in nodes]
    return train, [~m for m in train]


def test_exact_network_learns_and_ledgers_say_non_private():
    nodes, nbrs = _network()
    train, test = _halves(nodes)
    res = simulate_network(nodes, nbrs, batch_size=32, k=8, train_masks=train, seed=1, n_starts=8, time_range=(0, 960))
    assert res.num_batches == 30 and len(res.models) == 4 and all(len(m) == 3 for m in res.models)
    ev = evaluate(res, nodes, test)
    assert ev.accuracy > 0.85 and ev.own_accuracy > 0.85
    assert ev.n_test.tolist() == [260] * 4
    assert all(math.isinf(led.get_epsilon()) for led in res.ledgers)
    # exact releases mark batches without training windows invalid (test period)
    assert res.proportions[0].valid.tolist() == [True] * 22 + [False] * 8


def test_private_network_ledgers_and_per_node_reproducibility():
    """With noise_seed, a node's release and models are reproduced from its two generators
    alone (node_noise_generator for the noise, node_generator for the rest), as a distributed
    run does."""
    nodes, nbrs = _network(seed=2)
    train, _ = _halves(nodes)
    eps, b, k = 0.5, 32, 6
    res = simulate_network(
        nodes,
        nbrs,
        batch_size=b,
        k=k,
        epsilon=eps,
        train_masks=train,
        seed=7,
        noise_seed=70,
        n_starts=8,
        time_range=(0, 960),
    )
    for led in res.ledgers:
        (event,) = led.events
        assert event.kind == "discrete_laplace" and event.epsilon == eps and event.grid_steps == 1
        assert not hasattr(event, "noise_multiplier") and led.get_epsilon(0.0) == pytest.approx(eps)
        assert led.summary()["noise"] == "reproducible"
    assert all(bool(p.valid.all()) for p in res.proportions)  # every public batch is released

    def node_data(i):
        x = torch.as_tensor(nodes[i].features[train[i]])
        y = torch.as_tensor(nodes[i].labels[train[i]])
        ids = torch.as_tensor(time_batches(nodes[i].time[train[i]], b))
        return x, y, ids

    releases, exact = [], []
    for i in range(4):  # what each node does on its own, in the documented order
        _, y, ids = node_data(i)
        counts = batch_label_counts(y, ids, 30, 3)
        releases.append(private_label_proportions(counts, eps, batch_sizes=b, generator=node_noise_generator(70, i)))
        exact.append(private_label_proportions(counts, None))  # the own model's target (own_proportions)
    for i in (2, 0):  # any order of nodes: each has its own stream
        assert torch.equal(releases[i].proportions, res.proportions[i].proportions)
        x, _, ids = node_data(i)
        fit = fit_node_models(
            x, ids, [exact[i]] + [releases[j] for j in nbrs[i]], k=k, n_starts=8, generator=node_generator(7, i)
        )
        for ours, theirs in zip(fit.models, res.models[i], strict=True):
            assert torch.equal(ours.centres, theirs.centres)
            assert torch.equal(ours.cluster_labels, theirs.cluster_labels)


def test_node_generator_is_deterministic_and_distinct():
    a = torch.rand(4, generator=node_generator(3, 5))
    assert torch.equal(a, torch.rand(4, generator=node_generator(3, 5)))
    assert not torch.equal(a, torch.rand(4, generator=node_generator(3, 6)))
    assert not torch.equal(a, torch.rand(4, generator=node_generator(4, 5)))
    with pytest.raises(ValueError, match="node_index"):
        node_generator(0, -1)
    # the noise streams are separate from the non-private ones, for the same numbers too
    noise = torch.rand(4, generator=node_noise_generator(3, 5))
    assert torch.equal(noise, torch.rand(4, generator=node_noise_generator(3, 5)))
    assert not torch.equal(noise, a)
    assert not torch.equal(noise, torch.rand(4, generator=node_noise_generator(3, 6)))
    with pytest.raises(ValueError, match="noise_seed"):
        node_noise_generator(-1, 0)


def test_batches_are_aligned_on_the_global_grid():
    """A node that starts late gets the same batch ids for the same time windows."""
    nodes, _ = _network(seed=3, drop_first=320)
    nbrs = np.array([[1, 2], [0, 3], [3, 0], [2, 1]])
    res = simulate_network(nodes, nbrs, batch_size=32, k=6, seed=0, n_starts=4, time_range=(0, 960))
    late = res.proportions[3]
    assert late.valid.tolist() == [False] * 10 + [True] * 20
    counts = res.fits[3].cluster_counts
    assert float(counts[:10].sum()) == 0 and bool((counts[10:].sum(1) == 32).all())
    # node 2 receives node 3's release: its first 10 batches are skipped (weight 0), the
    # model from node 3 still fits on the 20 shared batches
    ev = evaluate(res, nodes)
    assert ev.model_accuracy[2][1] > 0.7  # node 2's first neighbour is node 3


def test_node_without_neighbours_trains_its_own_model_only():
    nodes, _ = _network(n_nodes=3, seed=4)
    res = simulate_network(nodes, [[1], [0], []], batch_size=32, k=6, seed=0, n_starts=4)
    assert [len(m) for m in res.models] == [2, 2, 1]
    ev = evaluate(res, nodes)
    assert ev.node_accuracy[2] == pytest.approx(ev.model_accuracy[2][0])


def test_own_proportions_exact_option():
    nodes, nbrs = _network(seed=5)
    kwargs = dict(batch_size=32, k=6, epsilon=0.05, seed=0, noise_seed=0, n_starts=4, time_range=(0, 960))
    res = simulate_network(nodes, nbrs, own_proportions="exact", **kwargs)
    assert res.fits[0].searches[0].loss < res.fits[0].searches[1].loss  # exact vs noisy target
    unbiased = simulate_network(nodes, nbrs, estimator="unbiased", **kwargs)
    assert unbiased.proportions[0].proportions.min() < 0  # (n + noise) / b, not clipped
    with pytest.raises(ValueError, match="estimator"):
        simulate_network(nodes, nbrs, estimator="other", **kwargs)
    with pytest.raises(ValueError, match="own_proportions"):
        simulate_network(nodes, nbrs, own_proportions="noisy", **kwargs)


def test_network_bad_input():
    nodes, nbrs = _network(n_nodes=3, slots=300, seed=6)
    with pytest.raises(ValueError, match="fewer than batch_size=512"):
        simulate_network(nodes, nbrs, batch_size=512, k=4, time_range=(0, 2000))
    with pytest.raises(ValueError, match="longer than the time range"):
        simulate_network(nodes, nbrs, batch_size=512, k=4)
    with pytest.raises(ValueError, match="own neighbour"):
        simulate_network(nodes, [[0], [0], [1]], batch_size=16, k=4)
    with pytest.raises(ValueError, match="out of range"):
        simulate_network(nodes, [[1], [0], [3]], batch_size=16, k=4)
    with pytest.raises(ValueError, match="2 rows for 3 nodes"):
        simulate_network(nodes, [[1], [0]], batch_size=16, k=4)
    bad_label = [n for n in nodes]
    bad_label[1] = SimpleNamespace(**{**vars(nodes[1]), "labels": nodes[1].labels.copy()})
    bad_label[1].labels[4] = 6
    with pytest.raises(DataValidationError, match=r"node 1 .*label\(s\) \[6\] outside the classes 0..2"):
        simulate_network(bad_label, nbrs, batch_size=16, k=4)
    nan_feat = list(nodes)
    nan_feat[2] = SimpleNamespace(**{**vars(nodes[2]), "features": nodes[2].features.copy()})
    nan_feat[2].features[10, 0] = np.nan
    with pytest.raises(DataValidationError, match=r"node 2 .*NaN or inf in row\(s\) \[10\]"):
        simulate_network(nan_feat, nbrs, batch_size=16, k=4)
    with pytest.raises(ValueError, match="train_masks"):
        simulate_network(nodes, nbrs, batch_size=16, k=4, train_masks=[None])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_network_runs_on_cuda():
    nodes, nbrs = _network(seed=8)
    train, test = _halves(nodes)
    res = simulate_network(
        nodes,
        nbrs,
        batch_size=32,
        k=8,
        epsilon=1.0,
        train_masks=train,
        seed=0,
        n_starts=8,
        device="cuda",
        time_range=(0, 960),
    )
    assert all(led.summary()["noise"] == "fresh" for led in res.ledgers)
    assert res.models[0][0].centres.is_cuda and res.proportions[1].proportions.is_cuda
    assert evaluate(res, nodes, test).accuracy > 0.6


def test_default_own_model_uses_the_exact_proportions():
    """The own model never leaves the node: by default it is fitted to exact proportions,
    so its search target does not change with epsilon (only the neighbours' do)."""
    nodes, nbrs = _network(seed=6)
    kwargs = dict(batch_size=32, k=6, seed=0, noise_seed=1, n_starts=4, time_range=(0, 960))
    default = simulate_network(nodes, nbrs, epsilon=0.05, **kwargs)
    exact = simulate_network(nodes, nbrs, epsilon=0.05, own_proportions="exact", **kwargs)
    released = simulate_network(nodes, nbrs, epsilon=0.05, own_proportions="released", **kwargs)
    assert torch.equal(default.models[0][0].cluster_labels, exact.models[0][0].cluster_labels)
    assert default.fits[0].searches[0].loss == exact.fits[0].searches[0].loss
    assert released.fits[0].searches[0].loss > exact.fits[0].searches[0].loss
