"""One-shot merging of node models (Brinkrolf 2023, chapter 6, eq. 6.1-6.3)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_wine
from sklearn.preprocessing import scale

import dp_proto
from dp_proto.exceptions import DataValidationError
from dp_proto.lvq import GLVQ, GMLVQ, LGMLVQ
from dp_proto.lvq.federated import merge_models, merge_relevances, node_splits, relevance_root


def _wine():
    X, y = load_wine(return_X_y=True)
    return scale(X), y


def _fit(cls, X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(max_iter=100, random_state=0, dtype="float64", **kw).fit(X, y)  # exact merging math


@pytest.fixture(scope="module")
def nodes():
    X, y = _wine()
    splits = node_splits(y, 3, drop_class_per_node=True, random_state=0)
    return X, y, splits


# -- the root of Lambda ------------------------------------------------------------------
def test_relevance_root_is_a_root_and_the_top_k_root_the_best_low_rank_one():
    g = np.random.default_rng(0)
    A = g.normal(size=(5, 5))
    lam = A.T @ A
    full = relevance_root(lam)
    np.testing.assert_allclose(full.T @ full, lam, atol=1e-10)
    np.testing.assert_allclose(full, full.T, atol=1e-12)  # the principal, symmetric root
    two = relevance_root(lam, rank=2)
    assert two.shape == (2, 5)
    values = np.sort(np.linalg.eigvalsh(lam))[::-1]
    assert np.linalg.norm(two.T @ two - lam, 2) == pytest.approx(values[2])  # Eckart-Young
    with pytest.raises(ValueError, match="rank must be in"):
        relevance_root(lam, rank=6)
    with pytest.raises(ValueError, match="square"):
        relevance_root(np.zeros((2, 3)))


def test_relevance_root_clips_rounding_below_zero():
    lam = np.diag([1.0, -1e-15])
    np.testing.assert_allclose(relevance_root(lam), np.diag([1.0, 0.0]))


def test_merge_relevances_averages_lambdas_not_omegas():
    rotation = np.array([[0.0, 1.0], [1.0, 0.0]])
    omega = np.array([[1.0, 0.5], [0.0, 1.0]])
    # Omega and its row-swapped version have the same Lambda: the mean Lambda keeps it,
    # the mean Omega would not
    np.testing.assert_allclose(merge_relevances([omega, rotation @ omega]), omega.T @ omega)
    np.testing.assert_allclose(merge_relevances([omega, 2 * omega], weights=[3, 1]), (3 + 4) / 4 * (omega.T @ omega))
    with pytest.raises(ValueError, match="non-negative"):
        merge_relevances([omega], weights=[-1])


def _mean_trace(lam):
    return np.trace(lam.reshape(-1, *lam.shape[-2:]), axis1=1, axis2=2).mean()


# -- merging --------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [GMLVQ, LGMLVQ])
def test_merging_identical_models_returns_the_same_model(cls):
    X, y = _wine()
    model = _fit(cls, X, y)
    merged = merge_models([model, model, model])
    assert type(merged) is cls
    np.testing.assert_allclose(merged.prototypes_, model.prototypes_)
    # the same relevance matrices up to the one global scale the cost ignores (every node
    # is brought to a mean trace of 1 before averaging)
    scale = np.trace(model.lambda_.reshape(-1, *model.lambda_.shape[-2:]), axis1=1, axis2=2).mean()
    np.testing.assert_allclose(merged.lambda_ * scale, model.lambda_, atol=1e-10)
    np.testing.assert_array_equal(merged.predict(X), model.predict(X))
    np.testing.assert_allclose(merged.decision_function(X), model.decision_function(X), atol=1e-9)
    np.testing.assert_array_equal(merged.node_counts_, [3, 3, 3])


@pytest.mark.parametrize("cls", [GMLVQ, LGMLVQ])
def test_a_node_missing_a_class_is_left_out_of_that_class_only(cls, nodes):
    X, y, splits = nodes
    models = [_fit(cls, X[i], y[i]) for i in splits]
    for k, m in enumerate(models):  # scenario 2: node k lacks class k
        assert k not in m.classes_
    merged = merge_models(models)
    np.testing.assert_array_equal(merged.classes_, [0, 1, 2])
    np.testing.assert_array_equal(merged.node_counts_, [2, 2, 2])
    for k in range(3):
        holders = [m for m in models if k in m.classes_]
        rows = [m.prototypes_[list(m.prototype_labels_).index(k)] for m in holders]
        np.testing.assert_allclose(merged.prototypes_[k], np.mean(rows, 0))  # eq. 6.1, N_k = 2
        if cls is LGMLVQ:  # eq. 6.3: the class's local Lambdas of the holders only (unit mean trace)
            lams = [m.lambda_[list(m.prototype_labels_).index(k)] / _mean_trace(m.lambda_) for m in holders]
            np.testing.assert_allclose(merged.lambda_[k], np.mean(lams, 0), atol=1e-12)
    if cls is GMLVQ:  # eq. 6.2: every node's Lambda
        lams = [m.lambda_ / _mean_trace(m.lambda_) for m in models]
        np.testing.assert_allclose(merged.lambda_, np.mean(lams, 0), atol=1e-12)
    assert merged.score(X, y) > 0.9


def test_weights_and_rank(nodes):
    X, y, splits = nodes
    models = [_fit(GMLVQ, X[i], y[i]) for i in splits]
    counts = np.array([[np.sum(y[i] == k) for k in range(3)] for i in splits], dtype=float)
    merged = merge_models(models, weights=counts, rank=2)
    for k in range(3):
        holders = [(m, counts[i, k]) for i, m in enumerate(models) if k in m.classes_]
        expected = sum(w * m.prototypes_[list(m.prototype_labels_).index(k)] for m, w in holders) / sum(
            w for _, w in holders
        )
        np.testing.assert_allclose(merged.prototypes_[k], expected)
    assert merged.omega_.shape == (2, X.shape[1])
    assert merged.score(X, y) > 0.85


def test_a_merged_model_is_saved_and_loaded(tmp_path, nodes):
    X, y, splits = nodes
    merged = merge_models([_fit(LGMLVQ, X[i], y[i]) for i in splits])
    loaded = dp_proto.load_release(merged.save(tmp_path / "release"))
    np.testing.assert_array_equal(loaded.predict(X), merged.predict(X))


def test_bad_input_gets_clear_errors(nodes):
    X, y, splits = nodes
    a, b = _fit(GMLVQ, X[splits[0]], y[splits[0]]), _fit(GMLVQ, X[splits[1]], y[splits[1]])
    with pytest.raises(ValueError, match="at least one"):
        merge_models([])
    with pytest.raises(TypeError, match="of one kind"):
        merge_models([a, _fit(LGMLVQ, X, y)])
    with pytest.raises(TypeError, match="of one kind"):
        merge_models([_fit(GLVQ, X, y)])
    with pytest.raises(DataValidationError, match="different feature counts"):
        merge_models([a, _fit(GMLVQ, X[:, :5], y)])
    with pytest.raises(ValueError, match="several prototypes"):
        merge_models([a, _fit(GMLVQ, X, y, prototypes_per_class=2)])
    with pytest.raises(ValueError, match="outside the label set"):
        merge_models([a, b], classes=[1, 2])
    with pytest.raises(DataValidationError, match="no node has class"):
        merge_models([a, b], classes=[0, 1, 2, 7])
    with pytest.raises(ValueError, match="weights must be"):
        merge_models([a, b], weights=np.ones((3, 3)))
    with pytest.raises(ValueError, match="positive weight"):
        merge_models([a, b], weights=np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]]))


# -- the scenarios ---------------------------------------------------------------------
def test_node_splits_are_disjoint_and_scenario_2_drops_class_i_at_node_i():
    y = np.repeat(np.arange(7), 30)
    first = node_splits(y, 5, random_state=1)
    assert sorted(np.concatenate(first).tolist()) == list(range(len(y)))
    assert {len(i) for i in first} == {42}
    second = node_splits(y, 5, drop_class_per_node=True, random_state=1)
    for i, (a, b) in enumerate(zip(first, second, strict=True)):
        assert i not in set(y[b]) and set(b) == set(a[y[a] != i])
    with pytest.raises(ValueError, match="positive integer"):
        node_splits(y, 0)
    with pytest.raises(DataValidationError, match="cannot fill"):
        node_splits(y[:3], 5)


# -- private nodes -----------------------------------------------------------------------
PRIVATE = dict(epsilon=2.0, bounds=(-4, 4), classes=[0, 1, 2], sampling_rate=0.2, epochs=3)


def _private_nodes(cls, X, y, splits, **kw):
    from dp_proto.lvq.private import DPGMLVQ, DPLGMLVQ

    cls = {"gmlvq": DPGMLVQ, "lgmlvq": DPLGMLVQ}[cls]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [cls(**{**PRIVATE, "epsilon": 1.0 + i, **kw}).fit(X[s], y[s]) for i, s in enumerate(splits)]


@pytest.mark.parametrize("kind", ["gmlvq", "lgmlvq"])
def test_private_nodes_merge_with_their_guarantees(kind, nodes):
    X, y, splits = nodes
    models = _private_nodes(kind, X, y, splits)
    merged = merge_models(models)
    assert type(merged) is type(models[0])
    assert merged.epsilon_ == max(m.epsilon_ for m in models) <= 3.0
    assert merged.privacy_["composition"].startswith("parallel")
    assert [n["epsilon"] for n in merged.privacy_["nodes"]] == [m.privacy_["epsilon"] for m in models]
    assert merged.node_ledgers_ == [m.ledger_ for m in models]
    np.testing.assert_array_equal(merged.node_counts_, [3, 3, 3])  # a private node has every class
    # prototypes in the mapped units, weighted by the released noisy counts (clipped at 0)
    w = np.clip(np.stack([m.class_counts_ for m in models]), 0, None)
    mapped = np.stack([m.model_.layer.prototypes.detach().numpy() for m in models])
    expected = (w[:, :, None] * mapped).sum(0) / w.sum(0)[:, None]
    np.testing.assert_allclose(merged.model_.layer.prototypes.detach().numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(merged.prototypes_, merged.scaler_.inverse_transform(expected), rtol=1e-5, atol=1e-5)
    assert merged.predict(X).shape == (len(X),)


@pytest.mark.parametrize("kind", ["gmlvq", "lgmlvq"])
def test_a_merged_private_model_is_released_with_every_node_ledger(kind, nodes, tmp_path):
    import json

    X, y, splits = nodes
    models = _private_nodes(kind, X, y, splits)
    merged = merge_models(models)
    loaded = dp_proto.load_release(merged.save_release(tmp_path / "merged"))
    assert type(loaded) is type(merged)
    np.testing.assert_array_equal(loaded.predict(X), merged.predict(X))
    assert loaded.epsilon_ == merged.epsilon_
    assert loaded.privacy_ == json.loads(json.dumps(merged.privacy_))  # the summary, as JSON keeps it
    assert [ledger.get_epsilon(m.delta) for ledger, m in zip(loaded.node_ledgers_, models, strict=True)] == (
        pytest.approx([m.epsilon_ for m in models])
    )
    assert not hasattr(loaded, "ledger_") and not hasattr(loaded, "curator_")
    section = json.loads((tmp_path / "merged" / "manifest.json").read_text())["privacy"]
    assert section["composition"].startswith("parallel") and len(section["nodes"]) == 3
    assert section["epsilon"] == max(n["epsilon"] for n in section["nodes"])
    # a stated epsilon below a node's is refused on loading
    section["epsilon"] = 0.5
    manifest = json.loads((tmp_path / "merged" / "manifest.json").read_text())
    manifest["privacy"] = section
    (tmp_path / "merged" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="inconsistent"):
        dp_proto.load_release(tmp_path / "merged")


def test_private_nodes_need_the_same_bounds(nodes):
    X, y, splits = nodes
    a = _private_nodes("gmlvq", X, y, splits[:1])[0]
    b = _private_nodes("gmlvq", X, y, splits[1:2], bounds=(-5, 5))[0]
    with pytest.raises(ValueError, match="other public bounds"):
        merge_models([a, b])


def test_the_federated_pipeline_passes_the_neighbour_check():
    """Three private nodes and the merge, as one release of the union: removing any one
    record moves only its own node's pre-noise quantities, within their sensitivities."""
    from dp_proto.privacy.testing import adversarial_removals, neighbour_check

    X, y = _wine()
    keep = np.concatenate([np.flatnonzero(y == c)[:6] for c in range(3)])
    X, y = X[keep], y[keep]
    node = np.arange(len(y)) % 3  # public node of every record

    def release(X, y, node):
        models = _private_nodes("gmlvq", X, y, [np.flatnonzero(node == i) for i in range(3)], epochs=1)
        return merge_models(models)

    report = neighbour_check(release, (X, y, node), adversarial_removals(X, y) + [0, 7], curator_only=("curator_",))
    report.assert_ok()
    assert report.releases.count("dp_init/class_counts") == 3
