"""Node models and the majority vote."""

from __future__ import annotations

import math

import pytest
import torch

from dp_proto.exceptions import DataValidationError
from dp_proto.llp import (
    LabelProportions,
    LLPNodeModel,
    batch_label_counts,
    fit_node_models,
    majority_vote,
    private_label_proportions,
    train_node_models,
)


def test_majority_vote_counts_and_ties():
    preds = torch.tensor(
        [
            [0, 2, 1, 3, 2],  # own model
            [1, 2, 0, 1, 0],
            [1, 1, 0, 1, 0],
            [1, 2, 1, 0, 1],
        ]
    )
    # column 0: 1 wins 3-1; column 1: 2 wins; column 2: 0/1 tie 2-2, own says 1;
    # column 3: 1 has 2 votes, own 3 has 1; column 4: 0 has 2, 1 and 2 one each
    assert majority_vote(preds, 4).tolist() == [1, 2, 1, 1, 0]
    assert majority_vote(preds, 4, tie_break="smallest").tolist() == [1, 2, 0, 1, 0]
    # own model not among the tied labels -> smallest tied label
    tie = torch.tensor([[0], [2], [2], [1], [1]])
    assert majority_vote(tie, 3).tolist() == [1]
    # all different: own model wins under "first", smallest under "smallest"
    spread = torch.tensor([[3], [1], [2], [0]])
    assert majority_vote(spread, 4).tolist() == [3]
    assert majority_vote(spread, 4, tie_break="smallest").tolist() == [0]
    assert majority_vote(torch.tensor([[2, 0]]), 3).tolist() == [2, 0]


def test_majority_vote_errors():
    with pytest.raises(DataValidationError, match="0..2"):
        majority_vote(torch.tensor([[0, 3]]), 3)
    with pytest.raises(ValueError, match="tie_break"):
        majority_vote(torch.tensor([[0]]), 3, tie_break="random")
    with pytest.raises(ValueError, match="shape"):
        majority_vote(torch.tensor([0, 1]), 3)


def _node(seed: int, m: int = 600, b: int = 20):
    """Windows whose label follows a slowly changing mixture; features near a label mean."""
    gen = torch.Generator().manual_seed(seed)
    t = torch.arange(m)
    phase = torch.sin(t.double() / 40.0)
    probs = torch.stack([(1 - phase) / 2, 0.3 + 0 * phase, (1 + phase) / 2], 1)
    labels = torch.multinomial(probs / probs.sum(1, keepdim=True), 1, generator=gen).squeeze(1)
    means = torch.tensor([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]], dtype=torch.float64)
    x = means[labels] + torch.randn(m, 2, generator=gen, dtype=torch.float64)
    return x, labels, t // b


def test_fit_node_models_shares_the_clustering_and_labels_it_per_source():
    x, y, ids = _node(0)
    num_batches = int(ids.max()) + 1
    own = private_label_proportions(batch_label_counts(y, ids, num_batches, 3), None)
    noisy = private_label_proportions(
        batch_label_counts(y, ids, num_batches, 3), 0.5, batch_sizes=20, generator=torch.Generator().manual_seed(1)
    )
    fit = fit_node_models(
        x, ids, [own, noisy, own.proportions], k=6, n_starts=8, generator=torch.Generator().manual_seed(0)
    )
    assert len(fit.models) == 3 and len(fit.searches) == 3
    assert all(m.centres is fit.clustering.centres for m in fit.models)
    assert fit.cluster_counts.shape == (num_batches, 6)
    acc = [(m.predict(x) == y).double().mean().item() for m in fit.models]
    assert acc[0] > 0.9 and acc[1] > 0.8 and acc[2] == acc[0]
    # the same call with the same generator seed gives the same models
    again = train_node_models(
        x, ids, [own, noisy, own.proportions], k=6, n_starts=8, generator=torch.Generator().manual_seed(0)
    )
    assert all(torch.equal(a.cluster_labels, b.cluster_labels) for a, b in zip(fit.models, again, strict=True))


def test_fit_node_models_errors():
    x, y, ids = _node(1)
    num_batches = int(ids.max()) + 1
    props = private_label_proportions(batch_label_counts(y, ids, num_batches, 3), None)
    x_nan = x.clone()
    x_nan[7, 1] = math.nan
    with pytest.raises(DataValidationError, match="features contains NaN"):
        train_node_models(x_nan, ids, [props], k=4)
    with pytest.raises(ValueError, match="empty"):
        train_node_models(x, ids, [], k=4)
    with pytest.raises(ValueError, match="source 1"):
        train_node_models(x, ids, [props, props.proportions[:-1]], k=4)
    nothing = LabelProportions(props.proportions, torch.zeros(num_batches, dtype=torch.bool))
    with pytest.raises(ValueError, match="proportion source 1: no batch"):
        train_node_models(x, ids, [props, nothing], k=4)
    with pytest.raises(ValueError, match="match"):
        LLPNodeModel(torch.zeros(3, 2), torch.zeros(2, dtype=torch.long), 2)
