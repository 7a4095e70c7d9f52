"""What an LLP node publishes, in the release format; node-local models; the evaluation's repr.

A node's release (``LLPNodeRelease``: its label proportions with its ledger on the public
batch grid) is saved and loaded back exactly, with its guarantee; the fields it leaves out
are written out literally below (``EXPECTED_DROPS``), and it holds no noise seed, no
noisy counts and nothing node-local. An ``LLPNodeModel`` (node-local, not private) saves
with ``"private": false`` and a ``PrivacyLeakWarning`` and predicts identically after
loading.
"""

import dataclasses
import json
import math
import subprocess
import sys
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import dp_proto
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.llp import (
    LLPNodeModel,
    LLPNodeRelease,
    NetworkEvaluation,
    evaluate,
    fit_node_models,
    simulate_network,
    time_batches,
)
from dp_proto.llp.distributed import NodeResult, as_network_result
from dp_proto.llp.model import NODE_LOCAL_NOTE
from dp_proto.privacy.release import ReleasedLedger
from dp_proto.release import CARD_FILE, MANIFEST_FILE, TENSORS_FILE, read_release
from tests._release import check_no_pickle, check_no_seed_values, release_files

SLOTS, TRAIN_END, B = 480, 360, 24
SEED = 918273645


def _nodes(n_nodes=3, seed=0):
    """Nodes sharing a daily label cycle; features are noisy class means."""
    rng = np.random.default_rng(seed)
    t = np.arange(SLOTS)
    level = (np.sin(2 * np.pi * t / 96) + 1) / 2
    nodes = []
    for i in range(n_nodes):
        p = np.stack([1 - level, 0.4 * np.ones(SLOTS), level], 1) ** 2 + 0.05
        labels = np.array([rng.choice(3, p=row / row.sum()) for row in p])
        centres = np.array([[10.0, 10, 10], [40, 40, 40], [80, 80, 80]]) * (1 + 0.05 * i)
        feats = centres[labels] + rng.normal(0, 6, (SLOTS, 3))
        nodes.append(SimpleNamespace(features=feats, labels=labels.astype(np.int64), time=t, num_classes=3))
    nbrs = [[j for j in range(n_nodes) if j != i] for i in range(n_nodes)]
    return nodes, nbrs


def _run(epsilon, **extra):
    nodes, nbrs = _nodes()
    train = [n.time < TRAIN_END for n in nodes]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        res = simulate_network(
            nodes,
            nbrs,
            batch_size=B,
            k=6,
            epsilon=epsilon,
            train_masks=train,
            seed=1,
            n_starts=4,
            time_range=(0, SLOTS),
            **extra,
        )
    return nodes, train, res


@pytest.fixture(scope="module")
def private_run():
    return _run(0.5)


@pytest.fixture(scope="module")
def exact_run():
    return _run(None)


# What each release leaves out, written out so that a change of the decision fails here.
EXPECTED_DROPS = {"private": {"noisy_counts"}, "exact": set()}
MODEL_DROPS = {"loss"}


@pytest.mark.parametrize("kind", ["private", "exact"])
def test_a_node_release_loads_back_exactly(kind, private_run, exact_run, tmp_path):
    _, _, res = private_run if kind == "private" else exact_run
    release = res.node_release(1)
    assert release.node == 1 and release.num_batches == SLOTS // B and release.num_classes == 3
    assert release.proportions is res.proportions[1] and release.ledger is res.ledgers[1]
    path = release.save_release(tmp_path / "release")
    loaded = dp_proto.load_release(path)
    assert type(loaded) is LLPNodeRelease
    assert LLPNodeRelease.load(path).node == 1
    # every field restored, or a documented drop
    for field in dataclasses.fields(LLPNodeRelease):
        if field.name not in ("proportions", "ledger"):
            assert getattr(loaded, field.name) == getattr(release, field.name), field.name
    ours, theirs = release.proportions, loaded.proportions
    assert torch.equal(theirs.proportions, ours.proportions) and theirs.proportions.dtype == torch.float64
    assert torch.equal(theirs.valid, ours.valid) and theirs.epsilon == ours.epsilon
    dropped = {f.name for f in dataclasses.fields(ours) if getattr(ours, f.name) is not None} - {
        f.name for f in dataclasses.fields(theirs) if getattr(theirs, f.name) is not None
    }
    assert dropped == EXPECTED_DROPS[kind] and set(LLPNodeRelease.RELEASE_DROPS) >= dropped
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    assert manifest["model"] == "dp_proto.LLPNodeRelease"
    assert manifest["dropped"] == sorted(EXPECTED_DROPS[kind])
    if kind == "private":
        assert isinstance(loaded.ledger, ReleasedLedger)
        assert loaded.ledger.get_epsilon() == release.ledger.get_epsilon() == manifest["privacy"]["epsilon"]
        assert loaded.ledger.state_dict() == release.ledger.state_dict()
        assert [e["name"] for e in manifest["privacy"]["events"]] == ["llp/node1/label_counts"]
        assert "node 1" in manifest["privacy"]["scope"]
        assert bool(theirs.valid.all())
    else:
        assert manifest["privacy"] == {"private": False}
        assert loaded.ledger is None and math.isinf(release.ledger.get_epsilon())


def test_a_loaded_release_trains_the_same_models(private_run, tmp_path):
    """A receiver that loads node 1's published table fits the models it would have
    fitted from the table sent over the wire."""
    nodes, train, res = private_run
    loaded = dp_proto.load_release(res.node_release(1).save_release(tmp_path / "release"))
    x = torch.as_tensor(nodes[0].features[train[0]])
    ids = torch.as_tensor(time_batches(nodes[0].time[train[0]], B))
    own = res.proportions[0]
    a = fit_node_models(x, ids, [own, res.proportions[1]], k=6, n_starts=4, generator=torch.Generator().manual_seed(0))
    b = fit_node_models(x, ids, [own, loaded.proportions], k=6, n_starts=4, generator=torch.Generator().manual_seed(0))
    for ours, theirs in zip(a.models, b.models, strict=True):
        assert torch.equal(ours.cluster_labels, theirs.cluster_labels)


def test_a_node_release_holds_no_seed_no_noisy_counts_and_nothing_node_local(tmp_path):
    nodes, train, res = _run(0.5, noise_seed=SEED)
    release = res.node_release(2)
    path = release.save_release(tmp_path / "release")
    files = release_files(path)
    assert set(files) == {MANIFEST_FILE, TENSORS_FILE, CARD_FILE}
    check_no_pickle(files)
    text = files[MANIFEST_FILE].decode()
    assert str(SEED) not in text
    assert str(SEED) not in files[CARD_FILE].decode()  # the card: from the manifest only
    manifest = json.loads(text)
    check_no_seed_values(manifest)
    assert manifest["privacy"]["noise"] == "reproducible"  # said, not the seed
    stored = read_release(path).tensors
    assert set(stored) == {"proportions", "valid"}
    assert stored["valid"].dtype == np.bool_ and stored["proportions"].shape == (SLOTS // B, 3)
    # the noisy counts (and so the exact counts' neighbourhood) are not in the tensor file
    counts = release.proportions.noisy_counts.cpu().numpy()
    assert counts.tobytes() not in files[TENSORS_FILE]
    # nothing node-local: no feature or centre value
    feats = np.ascontiguousarray(nodes[2].features[:4]).tobytes()
    assert feats not in files[TENSORS_FILE]
    for model in res.models[2]:
        assert model.centres.cpu().numpy().tobytes() not in files[TENSORS_FILE]


def test_node_release_needs_the_config_and_a_ledger(private_run):
    _, _, res = private_run
    with pytest.raises(ValueError, match="out of range"):
        res.node_release(3)
    with pytest.raises(ValueError, match="no config"):
        dataclasses.replace(res, config=None).node_release(0)
    with pytest.raises(ValueError, match="needs the node's ledger"):
        LLPNodeRelease(0, res.proportions[0], None, res.config.grid)


def test_a_distributed_node_result_publishes_the_same_release(private_run):
    _, _, res = private_run
    results = [
        NodeResult(
            rank=i,
            models=res.models[i],
            proportions=res.proportions[i],
            received={},
            ledger=res.ledgers[i],
            fit=res.fits[i],
            neighbours=res.neighbours[i],
            subscribers=[],
            batch_size=res.batch_size,
            num_batches=res.num_batches,
            origin=res.origin,
            num_classes=res.num_classes,
            epsilon=res.epsilon,
            config=res.config,
        )
        for i in range(3)
    ]
    assert results[2].node_release() == res.node_release(2)
    assert as_network_result(results).node_release(0) == res.node_release(0)


def test_a_node_model_saves_as_not_private_and_predicts_identically(private_run, tmp_path):
    nodes, _, res = private_run
    model = res.models[0][1]
    with pytest.warns(PrivacyLeakWarning, match="node-local"):
        path = model.save(tmp_path / "model")
    loaded = dp_proto.load_release(path)
    assert type(loaded) is LLPNodeModel and LLPNodeModel.load(path).k == model.k
    x = torch.as_tensor(nodes[0].features)
    assert torch.equal(loaded.predict(x), model.predict(x))
    assert torch.equal(loaded.centres, model.centres) and loaded.centres.dtype == model.centres.dtype
    assert torch.equal(loaded.cluster_labels, model.cluster_labels) and loaded.num_classes == model.num_classes
    assert {f.name for f in dataclasses.fields(LLPNodeModel)} - MODEL_DROPS == {
        "centres",
        "cluster_labels",
        "num_classes",
    }
    assert set(LLPNodeModel.RELEASE_DROPS) == MODEL_DROPS and math.isnan(loaded.loss) and not math.isnan(model.loss)
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    assert manifest["privacy"] == {"private": False, "note": NODE_LOCAL_NOTE}
    assert manifest["dropped"] == sorted(MODEL_DROPS)
    assert set(read_release(path).tensors) == {"centres", "cluster_labels"}
    with pytest.raises(ValueError, match="not 'dp_proto.LLPNodeModel'"):
        LLPNodeModel.from_release(read_release(res.node_release(0).save_release(tmp_path / "node")))
    with pytest.raises(TypeError, match="holds a LLPNodeRelease, not a LLPNodeModel"):
        LLPNodeModel.load(tmp_path / "node")


def test_the_evaluation_prints_headline_numbers_not_arrays(exact_run):
    nodes, train, res = exact_run
    ev = evaluate(res, nodes, [~m for m in train])
    text = repr(ev)
    assert text.startswith("NetworkEvaluation(accuracy=") and "\n" not in text and len(text) < 250
    assert f"accuracy={ev.accuracy:.4f}" in text and f"own_accuracy={ev.own_accuracy:.4f}" in text
    assert "nodes=3" in text and f"n_test={3 * (SLOTS - TRAIN_END)}" in text and "models_per_node=3" in text
    assert "array" not in text and "[0." not in text
    summary = str(ev)
    assert summary.splitlines()[0] == f"LLP network evaluation: 3 node(s), {3 * (SLOTS - TRAIN_END)} test window(s)"
    assert f"{ev.accuracy:.4f}" in summary and "array" not in summary and len(summary.splitlines()) == 5
    # a node without test windows: said, not a nan in a list
    empty = NetworkEvaluation(
        accuracy=0.5,
        node_accuracy=np.array([0.5, np.nan]),
        own_accuracy=0.25,
        model_accuracy=[np.array([0.5, 0.5]), np.array([np.nan])],
        n_test=np.array([4, 0]),
        correct=np.array([2, 0]),
    )
    assert "models_per_node=1-2" in repr(empty) and "min 0.5000" in repr(empty)
    assert "(1 node(s) without test windows)" in str(empty)


@pytest.mark.slow
def test_a_fresh_process_loads_a_private_node_release(private_run, tmp_path):
    """Node 0's private release, saved here, loaded by another Python: the same table bit
    for bit and the same epsilon composed afresh from its events."""
    _, _, res = private_run
    release = res.node_release(0)
    path = release.save_release(tmp_path / "release")
    code = (
        "import json, sys, dp_proto; r = dp_proto.load_release(sys.argv[1]); "
        "print(json.dumps({'p': r.proportions.proportions.tolist(), 'valid': r.proportions.valid.tolist(), "
        "'epsilon': r.ledger.get_epsilon(), 'type': type(r).__name__, 'node': r.node}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True, timeout=300
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["type"] == "LLPNodeRelease" and got["node"] == 0
    np.testing.assert_array_equal(np.array(got["p"]), release.proportions.proportions.numpy())
    assert got["valid"] == release.proportions.valid.tolist()
    assert got["epsilon"] == release.ledger.get_epsilon()
