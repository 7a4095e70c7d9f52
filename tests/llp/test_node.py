"""One LLP node (LLPNode), the settings every node shares (LLPConfig) and the batch grid."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from dp_proto.llp import (
    BatchGrid,
    LLPConfig,
    LLPNode,
    fit_node_models,
    node_generator,
    private_label_proportions,
    simulate_network,
    time_batches,
)
from dp_proto.llp.proportions import batch_label_counts


def _node(seed=0, slots=320, num_classes=3, **extra):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, slots)
    feats = labels[:, None] * 20.0 + rng.normal(0, 3, (slots, 2))
    return SimpleNamespace(
        features=feats, labels=labels.astype(np.int64), time=np.arange(slots), num_classes=num_classes, **extra
    )


# --------------------------------------------------------------------------- the grid
def test_time_batches():
    np.testing.assert_array_equal(time_batches([0, 3, 4, 7, 8], 4), [0, 0, 1, 1, 2])
    np.testing.assert_array_equal(time_batches([5, 6, 9], 2, origin=5), [0, 0, 2])
    with pytest.raises(ValueError, match="origin"):
        time_batches([1, 2], 2, origin=2)
    with pytest.raises(ValueError, match="batch_size"):
        time_batches([1, 2], 0)


def test_batch_grid():
    grid = BatchGrid.from_time_range((10, 43), 8)
    assert (grid.origin, grid.stop, grid.num_batches) == (10, 43, 5)  # ceil(33 / 8)
    np.testing.assert_array_equal(grid.contains([9, 10, 42, 43]), [False, True, True, False])
    np.testing.assert_array_equal(grid.batch_ids([10, 17, 18, 42]), [0, 0, 1, 4])
    with pytest.raises(ValueError, match="longer than the time range"):
        BatchGrid(0, 4, 8)
    with pytest.raises(ValueError, match="time_range must be"):
        BatchGrid.from_time_range((0, 4, 8), 2)
    with pytest.raises(ValueError, match="batch_size"):
        BatchGrid(0, 10, 0)


# --------------------------------------------------------------------------- the settings
def test_config_checks_and_normalises_its_settings():
    cfg = LLPConfig(batch_size=np.int64(8), k=4, epsilon=1, time_range=(np.int64(0), 64))
    assert type(cfg.batch_size) is int and cfg.epsilon == 1.0 and cfg.time_range == (0, 64)
    assert cfg.grid.num_batches == 8 and cfg.private and not LLPConfig(batch_size=8, k=4).private
    for bad, match in [
        ({"batch_size": 0}, "batch_size"),
        ({"k": 0}, "k must"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"time_range": (0, 4)}, "longer than the time range"),
        ({"num_classes": 0}, "num_classes"),
        ({"seed": -1}, "seed"),
        ({"noise_seed": -2}, "noise_seed"),
        ({"n_starts": 0}, "n_starts"),
        ({"floor": 0.0}, "floor"),
        ({"own_proportions": "noisy"}, "own_proportions"),
        ({"estimator": "other"}, "estimator"),
        ({"search_max_iter": -1}, "search_max_iter"),
    ]:
        with pytest.raises(ValueError, match=match):
            LLPConfig(**{"batch_size": 8, "k": 4, **bad})
    with pytest.raises(ValueError, match="time_range"):
        LLPConfig(batch_size=8, k=4).grid  # noqa: B018


def test_config_or_keyword_settings_not_both():
    cfg = LLPConfig(batch_size=8, k=4)
    assert LLPConfig.from_settings(cfg, {}, "f") is cfg
    assert LLPConfig.from_settings(None, {"batch_size": 8, "k": 4}, "f") == cfg
    with pytest.raises(TypeError, match="either config or the settings"):
        LLPConfig.from_settings(cfg, {"k": 5}, "f")
    with pytest.raises(TypeError, match=r"unknown setting\(s\) \['bacth_size'\]"):
        LLPConfig.from_settings(None, {"bacth_size": 8, "k": 4}, "f")
    with pytest.raises(TypeError, match="missing setting"):
        LLPConfig.from_settings(None, {"k": 4}, "f")
    with pytest.raises(TypeError, match="must be an LLPConfig"):
        LLPConfig.from_settings({"batch_size": 8}, {}, "f")


def test_resolve_takes_the_label_set_from_the_nodes_and_never_derives_a_private_grid():
    nodes = [_node(0), _node(1)]
    exact = LLPConfig(batch_size=8, k=4).resolve(nodes, "f")
    assert exact.num_classes == 3 and exact.time_range == (0, 320)
    assert LLPConfig(batch_size=8, k=4, num_classes=5).resolve(nodes, "f").num_classes == 5
    with pytest.raises(ValueError, match="pass num_classes"):
        LLPConfig(batch_size=8, k=4).resolve([_node(0), _node(1, num_classes=4)], "f")
    bare = SimpleNamespace(**{k: v for k, v in vars(_node(0)).items() if k != "num_classes"})
    with pytest.raises(ValueError, match="pass num_classes"):
        LLPConfig(batch_size=8, k=4).resolve([bare], "f")
    with pytest.raises(ValueError, match="needs the public time_range"):
        LLPConfig(batch_size=8, k=4, epsilon=1.0).resolve(nodes, "f")


# --------------------------------------------------------------------------- one node
def test_node_release_then_train_is_the_protocol_step_by_step():
    data = _node(0)
    cfg = LLPConfig(
        batch_size=16, k=4, epsilon=0.5, time_range=(0, 320), num_classes=3, n_starts=4, noise_seed=5, seed=2
    )
    node = LLPNode(1, data, cfg)
    with pytest.raises(RuntimeError, match="release"):
        node.train([])
    release = node.release()
    assert release.proportions.shape == (20, 3) and node.ledger.summary()["noise"] == "reproducible"
    fit = node.train([release])
    # by hand: the same counts, the exact own proportions, the same generators
    ids = torch.as_tensor(time_batches(data.time, 16))
    counts = batch_label_counts(torch.as_tensor(data.labels), ids, 20, 3)
    own = private_label_proportions(counts, None)
    x = torch.as_tensor(data.features)
    hand = fit_node_models(x, ids, [own, release], k=4, n_starts=4, generator=node_generator(2, 1))
    for a, b in zip(fit.models, hand.models, strict=True):
        assert torch.equal(a.centres, b.centres) and torch.equal(a.cluster_labels, b.cluster_labels)


def test_node_drops_windows_outside_the_grid_and_checks_its_data():
    data = _node(0)
    node = LLPNode(0, data, LLPConfig(batch_size=16, k=4, time_range=(32, 320), num_classes=3))
    assert node.features.shape[0] == 288 and int(node.batch_ids.min()) == 0
    with pytest.raises(ValueError, match="fewer than k=400"):
        LLPNode(0, data, LLPConfig(batch_size=16, k=400, time_range=(0, 320), num_classes=3))
    with pytest.raises(ValueError, match="needs a config with time_range"):
        LLPNode(0, data, LLPConfig(batch_size=16, k=4))


def test_a_private_node_with_fewer_windows_than_k_still_releases(caplog):
    """Whether a node has k windows can hang on one record: a private node releases either
    way (same shape, same ledger) and trains models of the same shapes (k centres)."""
    import logging

    data = _node(0)
    config = LLPConfig(batch_size=16, k=400, time_range=(0, 320), num_classes=3, epsilon=1.0)
    with caplog.at_level(logging.DEBUG, logger="dp_proto.curator"):
        node = LLPNode(0, data, config)
    assert any("fewer than k=400" in r.getMessage() for r in caplog.records)
    release = node.release()
    enough = LLPNode(0, data, dataclasses.replace(config, k=4))
    assert release.proportions.shape == enough.release().proportions.shape
    assert node.ledger.events == enough.ledger.events
    fit = node.train([release])
    assert [tuple(m.centres.shape) for m in fit.models] == [(400, 2), (400, 2)]
    assert tuple(fit.cluster_counts.shape) == (20, 400)


def test_simulate_network_accepts_a_config_or_keywords_alike():
    nodes = [_node(0), _node(1)]
    cfg = LLPConfig(batch_size=16, k=4, n_starts=4, time_range=(0, 320))
    a = simulate_network(nodes, [[1], [0]], cfg)
    b = simulate_network(nodes, [[1], [0]], batch_size=16, k=4, n_starts=4, time_range=(0, 320))
    assert all(
        torch.equal(x.cluster_labels, y.cluster_labels)
        for ma, mb in zip(a.models, b.models, strict=True)
        for x, y in zip(ma, mb, strict=True)
    )
    with pytest.raises(TypeError, match="either config"):
        simulate_network(nodes, [[1], [0]], cfg, k=5)
