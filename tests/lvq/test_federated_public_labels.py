"""Private federated LVQ takes its label set from public input only.

A label set read from the private labels changes when the only record of a class is
removed: the merged model's classes change, or (with a public set at the nodes) the merge
refused a node whose classes were outside the derived set. A private run now needs the
public label set (``classes`` or the estimator's own), refused before any data is read
otherwise, and every node fits all of it.
"""

from __future__ import annotations

import datetime
import warnings

import numpy as np
import pytest
import torch.distributed as dist
from sklearn.datasets import load_wine
from sklearn.preprocessing import scale

from dp_proto.exceptions import DataValidationError, PrivacyLeakWarning
from dp_proto.lvq import GMLVQ
from dp_proto.lvq.distributed import federated_fit, launch_federated, run_federated_node
from dp_proto.lvq.private import DPGMLVQ, DPLGMLVQ
from dp_proto.privacy.testing import adversarial_removals, neighbour_check

SETTINGS = dict(epsilon=1.0, bounds=(-4.0, 4.0), sampling_rate=0.2, epochs=1)


def _data():
    """Ten records of classes 0 and 1 and a single record of class 2 (the record whose
    removal empties the class), on two nodes."""
    X, y = load_wine(return_X_y=True)
    keep = np.concatenate([np.flatnonzero(y == 0)[:5], np.flatnonzero(y == 1)[:5], np.flatnonzero(y == 2)[:1]])
    return scale(X)[keep], y[keep]


def _halves(n):
    return [np.arange(0, n, 2), np.arange(1, n, 2)]


def _without(X, y, index):
    keep = np.arange(len(y)) != index
    return X[keep], y[keep]


class _Unreadable:
    """Data that fails the test if anything reads it."""

    def __array__(self, *args, **kwargs):
        raise AssertionError("the data were read")

    def __len__(self):
        raise AssertionError("the data were read")

    def __iter__(self):
        raise AssertionError("the data were read")


def _quiet(fit):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a small node's batch-size note
        return fit()


@pytest.mark.parametrize("cls", [DPGMLVQ, DPLGMLVQ])
def test_removing_the_only_record_of_a_class_leaves_the_private_result_unchanged_in_shape(cls):
    """The audit's counterexample: public classes=[0, 1, 2] at the nodes, the default
    classes=None of federated_fit; removing the only class-2 record raised
    ``node 0 has class(es) [2] outside the label set [0, 1]``."""
    X, y = _data()
    estimator = cls(**SETTINGS, classes=[0, 1, 2])
    full = _quiet(lambda: federated_fit(estimator, X, y, _halves(len(y))))
    only_two = int(np.flatnonzero(y == 2)[0])
    Xn, yn = _without(X, y, only_two)
    less = _quiet(lambda: federated_fit(estimator, Xn, yn, _halves(len(yn))))
    for result in (full, less):
        assert result.merged.classes_.tolist() == [0, 1, 2]
        assert all(node.classes_.tolist() == [0, 1, 2] for node in result.nodes)
    assert full.merged.prototypes_.shape == less.merged.prototypes_.shape
    assert np.shape(full.merged.omega_) == np.shape(less.merged.omega_)
    assert full.merged.node_counts_.tolist() == less.merged.node_counts_.tolist() == [2, 2, 2]


def test_public_classes_given_to_the_run_reach_every_private_node():
    """classes= of federated_fit is the nodes' label set too: no node reads its labels
    (no PrivacyLeakWarning), and a node without class 2 still has its prototype."""
    X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        warnings.simplefilter("ignore", UserWarning)
        result = federated_fit(DPGMLVQ(**SETTINGS), X, y, _halves(len(y)), classes=[2, 0, 1])
    assert result.merged.classes_.tolist() == [0, 1, 2]
    assert all(node.classes_.tolist() == [0, 1, 2] for node in result.nodes)


def test_a_private_run_without_a_public_label_set_is_refused_before_reading_data():
    message = "needs the public label set: pass classes="
    with pytest.raises(ValueError, match=f"federated_fit: a private federated run {message}"):
        federated_fit(DPGMLVQ(**SETTINGS), _Unreadable(), _Unreadable(), _Unreadable())
    with pytest.raises(ValueError, match=f"launch_federated: a private federated run {message}"):
        launch_federated(DPLGMLVQ(**SETTINGS), _Unreadable())
    with pytest.raises(ValueError, match="differ; a private federated run has one public label set"):
        federated_fit(
            DPGMLVQ(**SETTINGS, classes=[0, 1]), _Unreadable(), _Unreadable(), _Unreadable(), classes=[0, 1, 2]
        )
    with pytest.raises(ValueError, match="at least 2 public classes"):
        federated_fit(DPGMLVQ(**SETTINGS), _Unreadable(), _Unreadable(), _Unreadable(), classes=[0])


def test_a_label_outside_the_public_set_breaks_the_domain_and_is_named_only_when_not_private():
    """As in the private estimators: such a record is a precondition error, raised before
    any release, whose message names no label of the data in a private run."""
    X, y = _data()
    y = np.where(y == 2, 7, y)
    with pytest.raises(DataValidationError, match=r"labels outside the public label set \[0, 1, 2\]") as info:
        federated_fit(DPGMLVQ(**SETTINGS, classes=[0, 1, 2]), X, y, _halves(len(y)))
    assert "7" not in str(info.value)
    with pytest.raises(DataValidationError, match=r"node \d has labels \[7\] outside the shared label set"):
        federated_fit(GMLVQ(max_iter=2), X, y, _halves(len(y)), classes=[0, 1, 2])


def test_a_non_private_run_still_defaults_to_the_labels_it_holds():
    X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = federated_fit(GMLVQ(max_iter=5), *_without(X, y, int(np.flatnonzero(y == 2)[0])), _halves(len(y) - 1))
    assert result.merged.classes_.tolist() == [0, 1]


def test_the_private_federated_fit_passes_the_neighbour_check():
    """federated_fit as one release of the union, nodes by a public assignment: removing
    the only record of a class, a corner record or the last record of a node raises
    nothing, warns nothing new and changes nothing shown but the noisy outputs."""
    X, y = _data()
    node = np.arange(len(y)) % 2  # the public node of every record

    def release(X, y, node):
        estimator = DPGMLVQ(**SETTINGS, classes=[0, 1, 2])
        return federated_fit(estimator, X, y, [np.flatnonzero(node == i) for i in range(2)])

    removals = adversarial_removals(X, y, groups=node)
    assert int(np.flatnonzero(y == 2)[0]) in removals
    report = neighbour_check(release, (X, y, node), removals, curator_only=("curator_", "seconds"))
    report.assert_ok()
    assert report.releases.count("dp_init/class_counts") == 2


def test_run_federated_node_gives_a_private_node_the_public_label_set(tmp_path):
    X, y = _data()
    X, y = _without(X, y, int(np.flatnonzero(y == 2)[0]))  # this node holds no class 2
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1, timeout=datetime.timedelta(seconds=60)
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PrivacyLeakWarning)
            warnings.simplefilter("ignore", UserWarning)
            result = run_federated_node(0, 1, DPGMLVQ(**SETTINGS), X, y, [0, 1, 2])
        with pytest.raises(ValueError, match="differ; a private federated run has one public label set"):
            run_federated_node(0, 1, DPGMLVQ(**SETTINGS, classes=[0, 1]), X, y, [0, 1, 2])
    finally:
        dist.destroy_process_group()
    assert result.merged.classes_.tolist() == [0, 1, 2]
    assert result.nodes[0].classes_.tolist() == [0, 1, 2]
