"""Privacy soundness of the LLP network.

* The noise is not a function of a public seed: a generator seeded by the public
  default ``seed=0`` would let anyone rebuild it and recover the exact counts. The
  Laplace noise of the label-proportion releases comes from fresh operating-system
  entropy; ``noise_seed`` is the explicit, warned and ledgered opt-in to reproducible
  noise.
* The shape of a release is public: a batch grid (the number of rows of every node's
  release) taken from the largest time in the data would let removing the last window of
  one node remove a row from every table. A private run needs the public
  ``time_range``; windows outside it are dropped without a data-dependent error.
"""

from __future__ import annotations

import logging
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.llp import batch_label_counts, node_generator, simulate_network, time_batches
from dp_proto.privacy.noise import laplace_noise
from dp_proto.privacy.testing import adversarial_removals, neighbour_check

B, K, L = 16, 4, 3
TIME_RANGE = (0, 192)  # 12 batches of 16 slots
NEIGHBOURS = [[1, 2], [2, 0], [0, 1]]
FAST = dict(batch_size=B, k=K, num_classes=L, n_starts=4, n_init=1)


def _records(late_window: bool = True):
    """Three nodes, one window per slot 0..191 each (a daily-cycle label, features near a
    label mean), flattened to one row per record: ``(node, features, label, time)``.

    With ``late_window`` node 2 has one more window at slot 192: alone in a 13th batch of
    the grid derived from the data, outside the public ``TIME_RANGE``.
    """
    rng = np.random.default_rng(0)
    t = np.arange(TIME_RANGE[1])
    level = (np.sin(2 * np.pi * t / 96) + 1) / 2
    p = np.stack([1 - level, 0.4 * np.ones(t.size), level], 1) ** 2 + 0.05
    node, feats, labels, times = [], [], [], []
    for i in range(3):
        y = (rng.random(t.size)[:, None] > np.cumsum(p / p.sum(1, keepdims=True), 1)).sum(1)
        ti = t
        if late_window and i == 2:
            y, ti = np.append(y, 1), np.append(t, TIME_RANGE[1])
        centres = np.array([[10.0, 10, 10], [40, 40, 40], [80, 80, 80]]) * (1 + 0.05 * i)
        feats.append(centres[y] + rng.normal(0, 6, (y.size, 3)))
        node.append(np.full(y.size, i))
        labels.append(y.astype(np.int64))
        times.append(ti)
    return tuple(np.concatenate(a) for a in (node, feats, labels, times))


def _nodes(node, feats, labels, times):
    return [
        SimpleNamespace(
            detector=(300 + i, 1),
            features=feats[node == i],
            labels=labels[node == i],
            time=times[node == i],
            num_classes=3,
        )
        for i in range(3)
    ]


# -- the noise is not a function of a public seed -----------------------------------------
def test_default_seed_no_longer_recovers_the_counts():
    """The counterexample: rebuild node 0's generator from the default seed 0 and
    subtract its Laplace draws from the epsilon = 0.1 release (the old code gave the counts
    back with max error 3.6e-15)."""
    records = _records(late_window=False)
    nodes = _nodes(*records)
    eps = 0.1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runs = [
            simulate_network(nodes, NEIGHBOURS, epsilon=eps, time_range=TIME_RANGE, estimator="unbiased", **FAST)
            for _ in range(2)
        ]  # seed=0 default
    y0 = torch.as_tensor(nodes[0].labels)
    ids0 = torch.as_tensor(time_batches(nodes[0].time, B))
    true = batch_label_counts(y0, ids0, 12, L)
    released = runs[0].proportions[0].noisy_counts  # unclipped: counts + Lap(1/eps)
    attack = laplace_noise(true.shape, 1 / eps, generator=node_generator(0, 0))
    error = float((released - attack - true).abs().max())
    assert error > 1.0, f"the default seed gives the counts back (max error {error:.2g})"  # old: 3.6e-15
    assert float((released - true).abs().max()) > 1.0
    assert not [w for w in caught if issubclass(w.category, PrivacyLeakWarning)]  # the default warns about nothing
    # two default runs draw different noise at every node, and say so in their ledgers
    for a, b in zip(runs[0].proportions, runs[1].proportions, strict=True):
        assert not torch.equal(a.noisy_counts, b.noisy_counts)
    assert all(led.summary()["noise"] == "fresh" for run in runs for led in run.ledgers)


def test_noise_seed_is_a_warned_ledgered_opt_in_and_seed_does_not_reach_the_noise():
    nodes = _nodes(*_records(late_window=False))
    kwargs = dict(epsilon=0.5, time_range=TIME_RANGE, **FAST)
    runs = []
    for seed in (0, 0, 5):
        with pytest.warns(PrivacyLeakWarning, match="noise_seed makes"):
            runs.append(simulate_network(nodes, NEIGHBOURS, seed=seed, noise_seed=3, **kwargs))
    for i in range(3):  # the same noise_seed reproduces every release exactly, whatever seed
        assert torch.equal(runs[0].proportions[i].noisy_counts, runs[1].proportions[i].noisy_counts)
        assert torch.equal(runs[0].proportions[i].noisy_counts, runs[2].proportions[i].noisy_counts)
        assert torch.equal(runs[0].models[i][1].cluster_labels, runs[1].models[i][1].cluster_labels)
    assert all(led.summary()["noise"] == "reproducible" for run in runs for led in run.ledgers)
    with pytest.warns(PrivacyLeakWarning):
        other = simulate_network(nodes, NEIGHBOURS, noise_seed=4, **kwargs)
    assert not torch.equal(other.proportions[0].noisy_counts, runs[0].proportions[0].noisy_counts)
    with pytest.raises(ValueError, match="noise_seed"):
        simulate_network(nodes, NEIGHBOURS, noise_seed=-1, **kwargs)
    with warnings.catch_warnings():  # an exact run draws no noise: nothing to warn about
        warnings.simplefilter("error", PrivacyLeakWarning)
        simulate_network(nodes, NEIGHBOURS, noise_seed=3, time_range=TIME_RANGE, **FAST)


# -- the shape of a release is public -----------------------------------------------------
def test_private_run_without_public_time_range_is_refused():
    nodes = _nodes(*_records())
    with pytest.raises(ValueError, match=r"private run \(epsilon=0.5\) needs the public time_range"):
        simulate_network(nodes, NEIGHBOURS, epsilon=0.5, **FAST)
    exact = simulate_network(nodes, NEIGHBOURS, **FAST)  # an exact run may derive the grid
    assert exact.num_batches == 13 and exact.origin == 0


def _release(time_range):
    def release(node, feats, labels, times):
        return simulate_network(
            _nodes(node, feats, labels, times), NEIGHBOURS, epsilon=0.5, time_range=time_range, **FAST
        )

    return release


def _removals(records) -> list[int]:
    node, feats, labels, times = records
    inside = np.flatnonzero((node == 1) & (times < TIME_RANGE[1]))
    rng = np.random.default_rng(1)
    picks = adversarial_removals(feats, labels, groups=times)  # includes the largest time
    picks.append(int(np.flatnonzero(node == 2)[np.argmax(times[node == 2])]))  # node 2's last window
    picks.append(int(inside[np.argmax(times[inside])]))  # node 1's last window inside the range
    picks += rng.choice(len(node), 4, replace=False).tolist()
    return list(dict.fromkeys(picks))


# node-local results (each node's models on its own data, never sent) and wall times
NODE_LOCAL = ("models", "fits", "seconds")


def test_removing_the_last_window_of_a_node_changes_no_released_shape():
    """Neighbour check of the private release with the public time range: the record with
    the largest time (node 2's window outside the range), each node's last window and a few
    random ones. Released tables, grid and ledgers are identical under replay, and every
    node's pre-noise count table moves by at most 1 (its sensitivity) in l1."""
    records = _records()
    removals = _removals(records)
    assert int(np.argmax(records[3])) in removals
    report = neighbour_check(_release(TIME_RANGE), records, removals, curator_only=NODE_LOCAL)
    report.assert_ok()
    assert report.releases == [f"llp/node{i}/label_counts" for i in range(3)]
    assert 0.99 < max(report.max_ratio.values()) <= 1.0  # a removal inside the range moves a count by 1


def test_default_time_range_is_refused_identically_on_every_neighbour():
    """The old default grid (largest time + 1) gave 13 batches on D and 12 without node 2's
    last window; a private run now refuses it with the same public error on D and on every
    neighbour, so the check holds."""
    records = _records()
    late = int(np.argmax(records[3]))
    neighbour_check(_release(None), records, [late, 0], curator_only=NODE_LOCAL).assert_ok()
    with pytest.raises(ValueError, match="time_range"):
        _release(None)(*records)


def test_windows_outside_the_time_range_go_to_the_curator_log_only(caplog):
    records = _records()
    nodes = _nodes(*records)
    small = [
        SimpleNamespace(**{**vars(n), "features": n.features[:20], "labels": n.labels[:20], "time": n.time[:20]})
        for n in nodes
    ]
    with warnings.catch_warnings(), caplog.at_level(logging.DEBUG, logger="dp_proto.curator"):
        warnings.simplefilter("error")
        res = simulate_network(nodes, NEIGHBOURS, epsilon=0.5, time_range=TIME_RANGE, **FAST)
        # fewer windows than batch_size: an error in an exact run, a curator note in a private one
        simulate_network(small, NEIGHBOURS, epsilon=0.5, time_range=(0, 192), **{**FAST, "batch_size": 32})
    assert res.num_batches == 12 and all(p.proportions.shape == (12, L) for p in res.proportions)
    assert int(res.fits[2].cluster_counts.sum()) == 192  # the window at slot 192 was dropped
    messages = [r.getMessage() for r in caplog.records]
    assert any(
        "node 2 (detector (302, 1)): 1 training window(s) outside the public time_range [0, 192)" in m for m in messages
    )
    assert any("fewer than batch_size=32" in m for m in messages)
    with pytest.raises(ValueError, match="fewer than batch_size=32"):
        simulate_network(small, NEIGHBOURS, time_range=(0, 192), **{**FAST, "batch_size": 32})
