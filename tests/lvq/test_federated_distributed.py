"""Federated LVQ with one process per node (torch.distributed, gloo on localhost) versus
the single-process simulation (Brinkrolf 2023, chapter 6)."""

from __future__ import annotations

import datetime
import warnings

import numpy as np
import pytest
import torch
import torch.distributed as dist
from sklearn.datasets import load_wine
from sklearn.preprocessing import scale

from dp_proto._processes import NodeProcessError
from dp_proto.exceptions import DataValidationError
from dp_proto.lvq import GLVQ, GMLVQ, LGMLVQ
from dp_proto.lvq.distributed import federated_fit, launch_federated, node_estimators, run_federated_node
from dp_proto.lvq.federated import node_splits
from dp_proto.lvq.private import DPGMLVQ

# the private comparisons replay one noise draw (noise_seed), which warns
pytestmark = pytest.mark.filterwarnings("ignore::dp_proto.exceptions.PrivacyLeakWarning", "ignore::UserWarning")


@pytest.fixture(scope="module")
def wine():
    X, y = load_wine(return_X_y=True)
    return scale(X), y


@pytest.fixture
def one_thread():
    """The simulation with the workers' thread count (bit-equal float sums)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _same_model(a, b):
    np.testing.assert_array_equal(a.prototypes_, b.prototypes_)
    np.testing.assert_array_equal(a.omega_, b.omega_)
    np.testing.assert_array_equal(a.classes_, b.classes_)
    np.testing.assert_array_equal(a.node_counts_, b.node_counts_)


@pytest.mark.slow
@pytest.mark.parametrize(
    "estimator, scenario_2",
    [(GMLVQ(max_iter=60), False), (LGMLVQ(max_iter=60), True)],
    ids=["gmlvq-random-split", "lgmlvq-node-i-without-class-i"],
)
def test_four_processes_merge_the_same_model_as_the_simulation(wine, one_thread, estimator, scenario_2):
    X, y = wine
    nodes = node_splits(y, 4, drop_class_per_node=scenario_2, random_state=0)
    simulated = federated_fit(estimator, X, y, nodes, random_state=3)
    launched = launch_federated(estimator, [(X[i], y[i]) for i in nodes], random_state=3, num_threads=1)
    _same_model(launched.merged, simulated.merged)
    for a, b in zip(launched.nodes, simulated.nodes, strict=True):
        _same_model_nodes(a, b)
    assert launched.release_bytes == simulated.release_bytes
    assert set(launched.seconds) == {"fit", "exchange", "merge"}
    if scenario_2:
        assert launched.merged.node_counts_.tolist() == [3, 3, 3]  # every class misses at one of 4 nodes
    assert launched.merged.score(X, y) > 0.9


def _same_model_nodes(a, b):
    np.testing.assert_array_equal(a.prototypes_, b.prototypes_)
    np.testing.assert_array_equal(a.omega_, b.omega_)


@pytest.mark.slow
def test_private_nodes_in_processes_equal_the_simulation_and_carry_their_guarantee(wine, one_thread):
    X, y = wine
    nodes = node_splits(y, 4, random_state=1)
    estimator = DPGMLVQ(epsilon=1.0, bounds=(-4.0, 4.0), classes=[0, 1, 2], epochs=3, noise_seed=7)
    simulated = federated_fit(estimator, X, y, nodes, random_state=0)
    launched = launch_federated(estimator, [(X[i], y[i]) for i in nodes], random_state=0, num_threads=1)
    _same_model(launched.merged, simulated.merged)
    merged = launched.merged
    assert merged.privacy_["epsilon"] == max(node.epsilon_ for node in launched.nodes) <= 1.0
    assert merged.privacy_["composition"] == "parallel over the nodes' disjoint data"
    assert len(merged.node_ledgers_) == 4
    # what travelled is the release: no curator state, no noise seed
    assert all(not hasattr(node, "curator_") for node in launched.nodes)
    assert all(node.get_params()["noise_seed"] is None for node in launched.nodes)


def test_node_estimators_get_their_own_seeds_and_noise_seeds():
    plain = node_estimators(GMLVQ(random_state=5), 3)
    assert [e.random_state for e in plain] == [5, 5, 5]
    seeded = node_estimators(GMLVQ(), 3, random_state=0)
    assert len({e.random_state for e in seeded}) == 3
    assert seeded[0].random_state == node_estimators(GMLVQ(), 3, random_state=0)[0].random_state
    fresh = node_estimators(DPGMLVQ(), 3, random_state=0)
    assert [e.noise_seed for e in fresh] == [None, None, None]  # fresh entropy at every node
    replay = node_estimators(DPGMLVQ(noise_seed=1), 3)
    assert len({e.noise_seed for e in replay}) == 3  # never one shared noise draw


def test_bad_input_gets_clear_errors_before_any_process_starts(wine):
    X, y = wine
    with pytest.raises(DataValidationError, match="one feature count"):
        launch_federated(GMLVQ(), [(X[:50], y[:50]), (X[50:100, :5], y[50:100])])
    with pytest.raises(DataValidationError, match=r"node 1 has labels \[2\] outside the shared label set \[0, 1\]"):
        launch_federated(GMLVQ(), [(X[y < 2], y[y < 2]), (X, y)], classes=[0, 1])
    with pytest.raises(TypeError, match="GMLVQ or LGMLVQ"):
        launch_federated(GLVQ(), [(X, y)])
    with pytest.raises(ValueError, match="one prototype per class"):
        federated_fit(GMLVQ(prototypes_per_class=2), X, y, [np.arange(len(y))])
    with pytest.raises(ValueError, match="at least one node"):
        launch_federated(GMLVQ(), [])
    with pytest.raises(ValueError, match="timeout"):
        launch_federated(GMLVQ(), [(X, y)], timeout=-1)


@pytest.mark.slow
def test_a_failing_node_is_reported_with_its_traceback(wine):
    X, y = wine
    bad = (X[:40], np.zeros(40, dtype=int) + 5)  # a label outside the set the nodes share
    with pytest.raises(NodeProcessError, match=r"node 1 failed \(DataValidationError: node 1 has labels \[5\]") as info:
        from dp_proto.lvq import distributed

        # bypass the launcher's own label check to exercise the in-process report
        distributed.launch_workers(
            distributed._federated_worker,
            [
                (GMLVQ(max_iter=5), X, y, np.array([0, 1, 2]), None),
                (GMLVQ(max_iter=5), *bad, np.array([0, 1, 2]), None),
            ],
            timeout=120,
            num_threads=1,
        )
    assert info.value.rank == 1 and "Traceback" in info.value.remote_traceback


def test_run_federated_node_in_this_process_as_a_group_of_one(wine, tmp_path, one_thread):
    X, y = wine
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1, timeout=datetime.timedelta(seconds=60)
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = run_federated_node(0, 1, GMLVQ(max_iter=30, random_state=2), X, y, [0, 1, 2])
        with pytest.raises(ValueError, match="do not match the process group"):
            run_federated_node(1, 2, GMLVQ(), X, y, [0, 1, 2])
    finally:
        dist.destroy_process_group()
    simulated = federated_fit(GMLVQ(max_iter=30, random_state=2), X, y, [np.arange(len(y))])
    _same_model(result.merged, simulated.merged)
    with pytest.raises(RuntimeError, match="initialised"):
        run_federated_node(0, 1, GMLVQ(), X, y, [0, 1, 2])
