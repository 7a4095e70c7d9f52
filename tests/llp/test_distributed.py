"""The network as separate processes (torch.distributed, gloo on localhost) versus the simulation."""

from __future__ import annotations

import functools
import math
import pickle
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.distributed as dist

from dp_proto.llp import (
    LabelProportions,
    evaluate,
    private_label_proportions,
    simulate_network,
)
from dp_proto.llp.distributed import (
    NodeProcessError,
    as_network_result,
    decode_proportions,
    encode_proportions,
    launch_network,
    run_node,
)

# The comparisons with the simulation need the same noise: the explicit opt-in noise_seed
# (it warns with PrivacyLeakWarning; test_privacy_soundness checks that warning).
pytestmark = pytest.mark.filterwarnings("ignore::dp_proto.exceptions.PrivacyLeakWarning")

# each node receives from all three others, in different orders
NEIGHBOURS = [[1, 2, 3], [2, 3, 0], [3, 0, 1], [0, 2, 1]]
TIME_RANGE = (0, 320)
SETTINGS = dict(batch_size=16, k=4, n_starts=4, n_init=2, seed=11, noise_seed=23, time_range=TIME_RANGE)


def _network(n_nodes: int = 4, slots: int = 320, seed: int = 0, late: int = 0):
    """Tiny nodes: 3 classes following a daily cycle, features near a class mean (cf. test_network)."""
    rng = np.random.default_rng(seed)
    t_all = np.arange(slots)
    level = (np.sin(2 * np.pi * t_all / 96) + 1) / 2
    nodes = []
    for i in range(n_nodes):
        p = np.stack([1 - level, 0.4 * np.ones(slots), level], 1) ** 2 + 0.05
        labels = (rng.random(slots)[:, None] > np.cumsum(p / p.sum(1, keepdims=True), 1)).sum(1)
        centres = np.array([[10.0, 10, 10], [40, 40, 40], [80, 80, 80]]) * (1 + 0.05 * i)
        feats = centres[labels] + rng.normal(0, 6, (slots, 3))
        keep = t_all >= (late if i == n_nodes - 1 else 0)  # the last node starts late
        nodes.append(
            SimpleNamespace(
                detector=(200 + i, 1),
                features=feats[keep],
                labels=labels[keep].astype(np.int64),
                time=t_all[keep],
                num_classes=3,
            )
        )
    train = [n.time < 240 for n in nodes]
    return nodes, train


# torch.distributed functions that move data; the spy records every call to any of them
_COLLECTIVES = (
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_reduce",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "batch_isend_irecv",
    "broadcast",
    "broadcast_object_list",
    "gather",
    "gather_object",
    "irecv",
    "isend",
    "recv",
    "recv_object_list",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "scatter_object_list",
    "send",
    "send_object_list",
)
_SENT_ARG = {"all_gather": 1, "isend": 0, "send": 0}  # position of the outgoing tensor
_PEER_ARG = {"isend": 1, "send": 1, "irecv": 1, "recv": 1}


def _spy_on_collectives(log_dir: str, rank: int) -> None:
    """worker_setup: log what every torch.distributed call of this process is handed."""
    calls = []
    path = Path(log_dir) / f"calls_{rank}.pkl"

    def wrap(name, fn):
        @functools.wraps(fn)
        def spy(*args, **kwargs):
            sent = args[_SENT_ARG[name]].detach().cpu().clone() if name in _SENT_ARG else None
            peer = int(args[_PEER_ARG[name]]) if name in _PEER_ARG else None
            calls.append((name, peer, sent))
            with open(path, "wb") as fh:
                pickle.dump(calls, fh)
            return fn(*args, **kwargs)

        return spy

    for name in _COLLECTIVES:
        if hasattr(dist, name):
            setattr(dist, name, wrap(name, getattr(dist, name)))


def _assert_same_as_simulation(results, sim, nodes, train):
    assert [r.rank for r in results] == [0, 1, 2, 3]
    for i, r in enumerate(results):
        ours, theirs = r.proportions, sim.proportions[i]
        assert torch.equal(ours.proportions, theirs.proportions)
        assert torch.equal(ours.valid, theirs.valid) and ours.epsilon == theirs.epsilon
        if theirs.noisy_counts is not None:
            assert torch.equal(ours.noisy_counts, theirs.noisy_counts)
        assert r.neighbours == NEIGHBOURS[i]
        assert r.subscribers == [j for j in range(4) if i in NEIGHBOURS[j]]
        for j, got in r.received.items():  # what arrived is the sender's release
            assert torch.equal(got.proportions, sim.proportions[j].proportions)
            assert torch.equal(got.valid, sim.proportions[j].valid)
            assert got.epsilon == sim.proportions[j].epsilon and got.noisy_counts is None
        assert len(r.models) == len(sim.models[i]) == 4
        for a, b in zip(r.models, sim.models[i], strict=True):
            assert torch.equal(a.centres, b.centres)
            assert torch.equal(a.cluster_labels, b.cluster_labels)
            assert a.loss == b.loss or (math.isnan(a.loss) and math.isnan(b.loss))
        assert r.ledger.events == sim.ledgers[i].events
        assert r.ledger.get_epsilon(0.0) == sim.ledgers[i].get_epsilon(0.0)
        table = r.num_batches * r.num_classes * 8
        assert r.bytes_sent == table * len(r.subscribers) and r.bytes_received == table * 3
    test = [~m for m in train]
    ev, ev_sim = evaluate(as_network_result(results), nodes, test), evaluate(sim, nodes, test)
    assert ev.accuracy == ev_sim.accuracy and np.array_equal(ev.correct, ev_sim.correct)


@pytest.mark.slow
def test_private_network_in_four_processes_equals_simulation(tmp_path):
    nodes, train = _network(seed=1)
    eps = 0.5
    t0 = time.perf_counter()
    results = launch_network(
        nodes,
        NEIGHBOURS,
        epsilon=eps,
        train_masks=train,
        num_threads=1,
        timeout=120,
        worker_setup=functools.partial(_spy_on_collectives, str(tmp_path)),
        **SETTINGS,
    )
    elapsed = time.perf_counter() - t0
    sim = simulate_network(nodes, NEIGHBOURS, epsilon=eps, train_masks=train, **SETTINGS)
    _assert_same_as_simulation(results, sim, nodes, train)
    for r in results:
        (event,) = r.ledger.events
        assert event.kind == "discrete_laplace" and event.epsilon == eps and event.grid_steps == 1
        assert not hasattr(event, "noise_multiplier") and r.ledger.get_epsilon(0.0) == pytest.approx(eps)
        assert r.ledger.summary()["noise"] == "reproducible"  # noise_seed, through the pickled ledger
    assert elapsed < 60, f"4 processes took {elapsed:.1f} s"

    # What went over the wire, as seen by the wrapped torch.distributed functions.
    B, L = results[0].num_batches, results[0].num_classes
    for i, r in enumerate(results):
        with open(tmp_path / f"calls_{i}.pkl", "rb") as fh:
            calls = pickle.load(fh)
        names = [name for name, _, _ in calls]
        assert set(names) <= {"all_gather", "isend", "irecv", "barrier"}, names
        assert names.count("all_gather") == 1 and names.count("barrier") == 1
        (meta,) = [sent for name, _, sent in calls if name == "all_gather"]
        wants = [1.0 if j in NEIGHBOURS[i] else 0.0 for j in range(4)]
        assert meta.tolist() == [1.0, B, L, 16, 0, eps, *wants]  # public metadata only
        sends = [(peer, sent) for name, peer, sent in calls if name == "isend"]
        assert sorted(peer for peer, _ in sends) == r.subscribers
        for _, sent in sends:  # the released proportion table itself, nothing else
            assert sent.dtype == torch.float64 and sent.shape == (B, L)
            assert torch.equal(sent, r.proportions.proportions)
        assert sorted(peer for name, peer, _ in calls if name == "irecv") == sorted(NEIGHBOURS[i])
        assert not np.isin(nodes[i].features, meta.numpy()).any()
        for _, sent in sends:  # no feature value and no noisy count
            assert not np.isin(nodes[i].features, sent.numpy()).any()
            assert not np.isin(r.proportions.noisy_counts.numpy(), sent.numpy()).any()


def test_exact_network_in_four_processes_equals_simulation():
    """Without privacy; a late node and a test period give invalid rows (sent as NaN)."""
    nodes, train = _network(seed=2, late=96)
    kwargs = dict(own_proportions="exact", **SETTINGS)
    results = launch_network(nodes, NEIGHBOURS, train_masks=train, num_threads=1, timeout=120, **kwargs)
    sim = simulate_network(nodes, NEIGHBOURS, train_masks=train, **kwargs)
    _assert_same_as_simulation(results, sim, nodes, train)
    assert all(math.isinf(r.ledger.get_epsilon()) for r in results)
    assert results[3].proportions.valid.tolist() == [False] * 6 + [True] * 9 + [False] * 5
    assert results[0].received[3].valid.tolist() == [False] * 6 + [True] * 9 + [False] * 5


@pytest.mark.slow
def test_a_failing_node_is_reported_with_its_traceback():
    """Also the spawn start method (fresh interpreters: several seconds per process)."""
    nodes, _ = _network(n_nodes=2, seed=3)
    small = SimpleNamespace(
        **{
            **vars(nodes[1]),
            "features": nodes[1].features[:20],
            "labels": nodes[1].labels[:20],
            "time": nodes[1].time[:20],
        }
    )
    with pytest.raises(NodeProcessError, match=r"node 1 failed \(ValueError: node 1 .*fewer than k=30") as info:
        launch_network(
            [nodes[0], small],
            [[1], [0]],
            batch_size=16,
            k=30,
            time_range=TIME_RANGE,
            num_threads=1,
            timeout=120,
            start_method="spawn",
        )
    assert info.value.rank == 1 and "run_node" in info.value.remote_traceback
    assert isinstance(info.value.__cause__, ValueError)


def test_wire_format_round_trip():
    counts = torch.tensor([[3.0, 1, 0], [0, 0, 0], [2, 2, 2]], dtype=torch.float64)
    exact = private_label_proportions(counts, None)
    table = encode_proportions(exact)
    assert torch.isnan(table[1]).all() and torch.equal(table[[0, 2]], exact.proportions[[0, 2]])
    back = decode_proportions(table, None)
    assert torch.equal(back.proportions, exact.proportions) and torch.equal(back.valid, exact.valid)
    noisy = private_label_proportions(counts, 1.0, batch_sizes=8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(encode_proportions(noisy), noisy.proportions)
    back = decode_proportions(encode_proportions(noisy), 1.0)
    assert back.valid.all() and back.noisy_counts is None and back.epsilon == 1.0
    with pytest.raises(ValueError, match="private release has NaN"):
        decode_proportions(table, 1.0)
    with pytest.raises(ValueError, match="partly NaN"):
        decode_proportions(torch.tensor([[0.5, float("nan")]]), None)


def test_launch_checks_arguments_before_starting_processes():
    nodes, _ = _network(seed=4)
    with pytest.raises(ValueError, match="one process per node"):
        launch_network(nodes, NEIGHBOURS, world_size=2, batch_size=16, k=4)
    with pytest.raises(ValueError, match="own neighbour"):
        launch_network(nodes, [[0], [0], [1], [2]], batch_size=16, k=4)
    with pytest.raises(ValueError, match="longer than the time range"):
        launch_network(nodes, NEIGHBOURS, batch_size=16, k=4, time_range=(0, 8))
    with pytest.raises(ValueError, match=r"private run \(epsilon=0.5\) needs the public time_range"):
        launch_network(nodes, NEIGHBOURS, batch_size=16, k=4, epsilon=0.5)
    with pytest.raises(ValueError, match="noise_seed"):
        launch_network(nodes, NEIGHBOURS, batch_size=16, k=4, epsilon=0.5, time_range=TIME_RANGE, noise_seed=-1)
    with pytest.raises(ValueError, match="estimator"):
        launch_network(nodes, NEIGHBOURS, batch_size=16, k=4, estimator="other")
    with pytest.raises(ValueError, match="epsilon"):
        launch_network(nodes, NEIGHBOURS, batch_size=16, k=4, epsilon=-1.0)
    with pytest.raises(ValueError, match="start_method"):
        launch_network(nodes, NEIGHBOURS, batch_size=16, k=4, start_method="fork")


def test_run_node_in_this_process_as_a_group_of_one(tmp_path):
    """run_node itself (for coverage in this process): one node, no neighbour, FileStore group."""
    nodes, train = _network(n_nodes=1, seed=5)
    with pytest.raises(RuntimeError, match="initialised"):
        run_node(0, 1, nodes[0], [], time_range=TIME_RANGE, batch_size=16, k=4)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        res = run_node(0, 1, nodes[0], [], epsilon=1.0, train_mask=train[0], **SETTINGS)
        fresh = run_node(0, 1, nodes[0], [], epsilon=1.0, train_mask=train[0], **{**SETTINGS, "noise_seed": None})
        with pytest.raises(ValueError, match="node 0: neighbour index"):
            run_node(0, 1, nodes[0], [1], train_mask=train[0], **SETTINGS)
    finally:
        dist.destroy_process_group()
    sim = simulate_network(nodes, [[]], epsilon=1.0, train_masks=train, **SETTINGS)
    assert torch.equal(res.proportions.proportions, sim.proportions[0].proportions)
    assert torch.equal(res.models[0].cluster_labels, sim.models[0][0].cluster_labels)
    assert res.subscribers == [] and res.received == {} and res.bytes_sent == 0
    assert res.ledger.summary()["noise"] == "reproducible" and fresh.ledger.summary()["noise"] == "fresh"
    assert not torch.equal(fresh.proportions.noisy_counts, res.proportions.noisy_counts)
    assert isinstance(res.proportions, LabelProportions)


def _sleep_forever(rank: int) -> None:
    time.sleep(600)


@pytest.mark.slow
def test_a_hanging_network_times_out():
    nodes, _ = _network(seed=6)
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError, match=r"node\(s\) \[0, 1, 2, 3\] did not finish within 2 s"):
        launch_network(nodes, NEIGHBOURS, batch_size=16, k=4, timeout=2, num_threads=1, worker_setup=_sleep_forever)
    assert time.perf_counter() - t0 < 20
