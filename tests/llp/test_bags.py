"""The bag learner of LLP: a network trained on bag label proportions (DLLP, Ardehaly &
Culotta 2017), alone and as ``LLPConfig(learner="bag")`` in the node network."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dp_proto.exceptions import DataValidationError
from dp_proto.llp import (
    LabelProportions,
    LLPConfig,
    bag_cross_entropy,
    bag_proportion_loss,
    bag_proportions,
    evaluate,
    fit_bag_model,
    simulate_network,
)
from tests.llp.test_distributed import NEIGHBOURS, TIME_RANGE, _network


def _bags(seed=0, n_bags=60, bag=20, num_classes=3, d=2):
    """Planted labels: class l around centre 3 l (in every feature); bags with skewed mixtures."""
    g = np.random.default_rng(seed)
    mix = g.dirichlet(np.full(num_classes, 0.5), size=n_bags)
    labels = np.concatenate([g.choice(num_classes, size=bag, p=p) for p in mix])
    x = 3.0 * labels[:, None] + g.normal(0, 0.6, (len(labels), d))
    batch = np.repeat(np.arange(n_bags), bag)
    counts = np.stack([np.bincount(labels[batch == b], minlength=num_classes) for b in range(n_bags)])
    props = counts / counts.sum(1, keepdims=True)
    return torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(batch), torch.as_tensor(props), labels


def test_the_loss_is_zero_when_the_bag_proportions_match():
    probs = torch.tensor([[0.2, 0.8], [0.6, 0.4], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    batch = torch.tensor([0, 0, 1, 1])
    predicted, sizes = bag_proportions(probs, batch, 2)
    assert sizes.tolist() == [2, 2]
    assert bag_proportion_loss(probs, batch, predicted) == pytest.approx(0.0, abs=1e-12)
    other = torch.tensor([[0.9, 0.1], [0.5, 0.5]], dtype=torch.float64)
    assert float(bag_proportion_loss(probs, batch, other)) > 0.05


def test_the_loss_gradient_matches_finite_differences():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(12, 3, dtype=torch.float64, generator=g, requires_grad=True)
    batch = torch.arange(12) % 4
    targets = torch.softmax(torch.randn(4, 3, dtype=torch.float64, generator=g), 1)
    weights = torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=torch.float64)

    def loss(z):
        return bag_proportion_loss(torch.softmax(z, 1), batch, targets, weights)

    assert torch.autograd.gradcheck(loss, (logits,))


def test_a_bag_learner_recovers_planted_labels():
    x, batch, props, labels = _bags()
    model = fit_bag_model(x, batch, [props], epochs=300, generator=torch.Generator().manual_seed(0))
    accuracy = float((model.predict(x).numpy() == labels).mean())
    assert accuracy > 0.95  # never saw a label, only the 60 bags' proportions
    assert model.loss < 0.05
    assert model.predict_proba(x).sum(1).allclose(torch.ones(len(x)))


def test_the_cross_entropy_is_the_kl_plus_the_entropy_and_linear_in_the_targets():
    g = torch.Generator().manual_seed(1)
    probs = torch.softmax(torch.randn(12, 3, dtype=torch.float64, generator=g), 1)
    batch = torch.arange(12) % 4
    targets = torch.softmax(torch.randn(4, 3, dtype=torch.float64, generator=g), 1)
    weights = torch.tensor([1.0, 2.0, 0.0, 1.0], dtype=torch.float64)
    entropy = -(targets * targets.log()).sum(1)
    mean_entropy = float((entropy * weights).sum() / weights.sum())
    ce = float(bag_cross_entropy(probs, batch, targets, weights))
    assert ce == pytest.approx(float(bag_proportion_loss(probs, batch, targets, weights)) + mean_entropy)
    # linear: symmetric noise around the targets averages out exactly (the unbiased release),
    # even where it leaves the simplex
    noise = torch.randn(4, 3, dtype=torch.float64, generator=g)
    pair = float(bag_cross_entropy(probs, batch, targets + noise, weights)) + float(
        bag_cross_entropy(probs, batch, targets - noise, weights)
    )
    assert pair / 2 == pytest.approx(ce)
    with pytest.raises(DataValidationError, match="finite"):
        bag_cross_entropy(probs, batch, targets * float("nan"))


def test_a_bag_learner_learns_from_unbiased_noisy_proportions():
    x, batch, props, labels = _bags(n_bags=200)
    noisy = props + torch.randn(props.shape, generator=torch.Generator().manual_seed(2), dtype=props.dtype) * 0.4
    assert bool((noisy < 0).any())  # off the simplex, as the unbiased release at small epsilon
    with pytest.raises(DataValidationError, match="loss='cross_entropy'"):
        fit_bag_model(x, batch, [noisy])
    model = fit_bag_model(x, batch, [noisy], loss="cross_entropy", generator=torch.Generator().manual_seed(0))
    assert float((model.predict(x).numpy() == labels).mean()) > 0.9
    with pytest.raises(ValueError, match="loss must be one of"):
        fit_bag_model(x, batch, [props], loss="l2")


def test_the_bag_loss_of_the_config():
    assert LLPConfig(batch_size=16, k=4, learner="bag").bag_loss == "kl"
    assert LLPConfig(batch_size=16, k=4, learner="bag", estimator="unbiased").bag_loss == "cross_entropy"
    with pytest.raises(ValueError, match="use bag_loss='cross_entropy'"):
        LLPConfig(batch_size=16, k=4, epsilon=0.1, estimator="unbiased", own_proportions="released", bag_loss="kl")
    with pytest.raises(ValueError, match="bag_loss must be one of"):
        LLPConfig(batch_size=16, k=4, bag_loss="l2")


def test_invalid_bags_weigh_nothing():
    x, batch, props, labels = _bags(seed=1)
    scrambled = props.clone()
    scrambled[:30] = props[:30].flip(1)  # wrong proportions in half the bags...
    valid = torch.arange(60) >= 30  # ...marked invalid
    source = LabelProportions(scrambled, valid, None)
    model = fit_bag_model(x, batch, [source], generator=torch.Generator().manual_seed(0))
    assert float((model.predict(x).numpy() == labels).mean()) > 0.9


def test_bad_input_gets_clear_errors():
    x, batch, props, _ = _bags()
    bad = props.clone()
    bad[3] *= 1.5
    with pytest.raises(DataValidationError, match=r"must sum to 1 in every bag; bag\(s\) \[3\]"):
        fit_bag_model(x, batch, [bad])
    with pytest.raises(DataValidationError, match="finite and >= 0"):
        bag_proportion_loss(torch.full((4, 2), 0.5), torch.zeros(4, dtype=torch.int64), torch.tensor([[1.5, -0.5]]))
    with pytest.raises(ValueError, match="empty"):
        fit_bag_model(x, batch, [])
    with pytest.raises(ValueError, match="every source must be"):
        fit_bag_model(x, batch, [props, props[:10]])
    with pytest.raises(ValueError, match="batch_ids must have shape"):
        fit_bag_model(x, batch[:5], [props])
    with pytest.raises(DataValidationError, match="batch ids must lie in"):
        fit_bag_model(x, batch + 100, [props])
    with pytest.raises(ValueError, match="epochs"):
        fit_bag_model(x, batch, [props], epochs=0)
    with pytest.raises(ValueError, match="no bag has windows"):
        bag_proportion_loss(torch.full((4, 2), 0.5), torch.zeros(4, dtype=torch.int64), props[:2, :2] * 0 + 0.5,
                            torch.zeros(2))  # fmt: skip
    nan = x.clone()
    nan[0, 0] = float("nan")
    with pytest.raises(DataValidationError):
        fit_bag_model(nan, batch, [props])
    with pytest.raises(ValueError, match="learner must be one of"):
        LLPConfig(batch_size=16, k=4, learner="svm")
    with pytest.raises(ValueError, match="bag_sources must be one of"):
        LLPConfig(batch_size=16, k=4, bag_sources="neighbours")


@pytest.mark.filterwarnings("ignore::dp_proto.exceptions.PrivacyLeakWarning")
@pytest.mark.parametrize("sources", ["own", "all"])
def test_the_bag_learner_in_the_node_network(sources):
    nodes, train = _network()
    settings = dict(batch_size=16, k=4, seed=3, time_range=TIME_RANGE, learner="bag", bag_sources=sources)
    exact = simulate_network(nodes, NEIGHBOURS, train_masks=train, **settings)
    private = simulate_network(nodes, NEIGHBOURS, train_masks=train, epsilon=0.5, noise_seed=1, **settings)
    test = [~m for m in train]
    acc = evaluate(exact, nodes, test).accuracy
    assert acc > 0.8
    assert all(len(models) == 1 for models in exact.models)
    # the releases and their ledgers are those of the k-means learner
    kmeans = simulate_network(nodes, NEIGHBOURS, train_masks=train, epsilon=0.5, noise_seed=1,
                              **{**settings, "learner": "kmeans"})  # fmt: skip
    for a, b in zip(private.proportions, kmeans.proportions, strict=True):
        assert torch.equal(a.proportions, b.proportions)
    assert [ledger.get_epsilon() for ledger in private.ledgers] == [ledger.get_epsilon() for ledger in kmeans.ledgers]
    same = all(
        torch.equal(p, q)
        for a, b in zip(exact.models, private.models, strict=True)
        for p, q in zip(a[0].network.parameters(), b[0].network.parameters(), strict=True)
    )
    # own exact proportions only: the private run trains the same model; with all sources it reads the releases
    assert same == (sources == "own")


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::dp_proto.exceptions.PrivacyLeakWarning")
def test_the_bag_learner_in_four_processes_equals_the_simulation():
    from dp_proto.llp.distributed import as_network_result, launch_network

    nodes, train = _network(seed=1)
    settings = dict(batch_size=16, k=4, seed=3, time_range=TIME_RANGE, learner="bag", bag_sources="all",
                    epsilon=0.5, noise_seed=2, bag_epochs=50)  # fmt: skip
    results = launch_network(nodes, NEIGHBOURS, train_masks=train, num_threads=1, timeout=120, **settings)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        sim = simulate_network(nodes, NEIGHBOURS, train_masks=train, **settings)
    finally:
        torch.set_num_threads(before)
    for r, models in zip(results, sim.models, strict=True):
        (ours,), (theirs,) = r.models, models
        for p, q in zip(ours.network.state_dict().values(), theirs.network.state_dict().values(), strict=True):
            assert torch.equal(p, q)
    test = [~m for m in train]
    assert evaluate(as_network_result(results), nodes, test).accuracy == evaluate(sim, nodes, test).accuracy
