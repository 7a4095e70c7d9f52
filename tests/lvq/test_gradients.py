"""The closed-form distance gradients (dp_proto.lvq.gradients) against autograd, and the
full-batch cost of the L-BFGS fits that uses them."""

from __future__ import annotations

import pytest
import torch

from dp_proto.lvq import GLVQLayer, GMLVQLayer, LGMLVQLayer, PrototypeModel
from dp_proto.lvq.gradients import DistanceEvaluation, quadratic_layout
from dp_proto.lvq.training import FullBatchCost

f64 = torch.float64

LAYERS = {
    "glvq": lambda: GLVQLayer(6, 4, dtype=f64),
    "gmlvq": lambda: GMLVQLayer(6, 4, dtype=f64),
    "gmlvq_rank2": lambda: GMLVQLayer(6, 4, rank=2, dtype=f64),
    "lgmlvq_projections": lambda: LGMLVQLayer(6, 4, rank=2, dtype=f64),  # d^2 = 36 > W r = 8
    "lgmlvq_quadratic": lambda: LGMLVQLayer(3, 4, dtype=f64),  # d^2 = 9 <= W r = 12
}


def _random_layer(name: str) -> GLVQLayer:
    torch.manual_seed(0)
    layer = LAYERS[name]()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.5 * torch.randn_like(p))
    return layer


def _autograd(layer, x, weights):
    distances = layer(x)
    return {p: torch.autograd.grad(distances, p, grad_outputs=a, retain_graph=True)[0] for p, a in weights.items()}


def test_both_lgmlvq_layouts_are_covered():
    assert not quadratic_layout(LAYERS["lgmlvq_projections"]())
    assert quadratic_layout(LAYERS["lgmlvq_quadratic"]())


@pytest.mark.parametrize("name", list(LAYERS))
def test_distances_and_gradients_equal_autograd(name):
    layer = _random_layer(name)
    x = torch.randn(30, layer.in_features, dtype=f64)
    evaluation = DistanceEvaluation(layer, x)
    torch.testing.assert_close(evaluation.distances, layer(x).detach(), rtol=1e-12, atol=1e-12)
    a = torch.randn(30, layer.num_prototypes, dtype=f64)  # dense weights: any A, not only GLVQ's
    expected = _autograd(layer, x, {p: a for p in layer.parameters()})
    got = evaluation.gradients(a)
    assert set(got) == set(expected)
    for p in expected:
        torch.testing.assert_close(got[p], expected[p], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["gmlvq", "lgmlvq_projections", "lgmlvq_quadratic"])
def test_weights_per_parameter_and_frozen_parameters(name):
    layer = _random_layer(name)
    x = torch.randn(20, layer.in_features, dtype=f64)
    params = list(layer.parameters())
    weights = {p: torch.randn(20, layer.num_prototypes, dtype=f64) for p in params}
    expected = _autograd(layer, x, weights)
    got = DistanceEvaluation(layer, x).gradients(weights)
    for p in params:
        torch.testing.assert_close(got[p], expected[p], rtol=1e-10, atol=1e-12)
    layer.prototypes.requires_grad_(False)
    got = DistanceEvaluation(layer, x).gradients(weights[params[1]])
    assert list(got) == [params[1]]


def test_another_layer_type_goes_through_autograd():
    class Scaled(GLVQLayer):
        def forward(self, x):
            return 3.0 * super().forward(x)

    torch.manual_seed(0)
    layer = Scaled(4, 3, dtype=f64)
    x = torch.randn(10, 4, dtype=f64)
    a = torch.randn(10, 3, dtype=f64)
    got = DistanceEvaluation(layer, x).gradients(a)
    torch.testing.assert_close(got[layer.prototypes], _autograd(layer, x, {layer.prototypes: a})[layer.prototypes])


@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("transfer_fn", ["identity", "sigmoid"])
def test_full_batch_cost_equals_the_autograd_cost(name, transfer_fn):
    layer = _random_layer(name)
    model = PrototypeModel(layer, [0, 1, 2, 0])
    x = torch.randn(40, layer.in_features, dtype=f64)
    y = torch.randint(0, 3, (40,))
    cost = FullBatchCost(model, x, y, transfer_fn=transfer_fn, beta=3.0)
    assert cost.closed_form
    value = cost()
    assert not value.requires_grad
    closed = {n: p.grad.clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = None
    reference = model.loss(model(x), y, transfer_fn=transfer_fn, beta=3.0)
    reference.backward()
    assert float(value) == pytest.approx(float(reference), abs=1e-12)
    for n, p in model.named_parameters():
        torch.testing.assert_close(closed[n], p.grad, rtol=1e-10, atol=1e-12)


def test_full_batch_cost_uses_autograd_where_a_hook_must_run():
    """A gradient hook (the sparse refit masks features with one) only runs under
    autograd: such a model is not given the closed form."""
    layer = _random_layer("gmlvq")
    model = PrototypeModel(layer, [0, 1, 2, 0])
    mask = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0], dtype=f64)
    handle = layer.omega.register_hook(lambda g: g * mask)
    cost = FullBatchCost(model, torch.randn(20, 6, dtype=f64), torch.randint(0, 3, (20,)))
    assert not cost.closed_form
    cost().backward()
    assert torch.all(layer.omega.grad[:, mask == 0] == 0)
    handle.remove()


def test_full_batch_cost_checks_the_labels_once():
    layer = _random_layer("glvq")
    model = PrototypeModel(layer, [0, 1, 0, 1])
    with pytest.raises(ValueError, match="no prototype carries the target class"):
        FullBatchCost(model, torch.randn(5, 6, dtype=f64), torch.tensor([0, 1, 2, 0, 1]))()
