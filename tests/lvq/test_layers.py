"""Prototype layers: parameters only, PSD relevance matrices, normalisation,
initialisers, and a GMLVQ head on top of a CNN."""

import pytest
import torch
from torch import nn

from dp_proto.exceptions import DataValidationError
from dp_proto.lvq import (
    GLVQLayer,
    GMLVQLayer,
    LGMLVQLayer,
    PrototypeModel,
    class_mean_prototypes,
    init_omega,
    make_prototype_labels,
)


@pytest.mark.parametrize("cls", [GLVQLayer, GMLVQLayer, LGMLVQLayer])
def test_layers_hold_parameters_only(cls):
    layer = cls(6, 4)
    assert list(layer.buffers()) == []
    assert all(p.requires_grad for p in layer.parameters())
    assert layer(torch.randn(3, 6)).shape == (3, 4)


def test_opacus_accepts_prototype_model():
    from opacus.validators import ModuleValidator

    model = PrototypeModel(GMLVQLayer(5, 3), [0, 1, 2])
    assert ModuleValidator.validate(model, strict=False) == []


def test_relevance_matrices_are_psd_and_normalised():
    g = torch.Generator().manual_seed(0)
    layer = GMLVQLayer(7, 3, rank=4, omega_init="random", generator=g, dtype=torch.float64)
    lam = layer.relevance_matrix
    assert torch.linalg.eigvalsh(lam).min() > -1e-12
    torch.testing.assert_close(torch.trace(lam), torch.tensor(1.0, dtype=torch.float64))
    with torch.no_grad():
        layer.omega.mul_(5.0)
    layer.normalize_()
    torch.testing.assert_close(torch.trace(layer.relevance_matrix), torch.tensor(1.0, dtype=torch.float64))
    local = LGMLVQLayer(5, 3, rank=2, omega_init="random", normalize=True, generator=g, dtype=torch.float64)
    lams = local.relevance_matrices
    assert torch.linalg.eigvalsh(lams).min() > -1e-12
    torch.testing.assert_close(lams.diagonal(dim1=1, dim2=2).sum(1), torch.ones(3, dtype=torch.float64))


def test_normalisation_does_not_change_global_classification():
    g = torch.Generator().manual_seed(3)
    layer = GMLVQLayer(4, 3, normalize=False, omega_init="random", generator=g)
    x = torch.randn(20, 4, generator=g)
    before = layer(x).argmin(1)
    layer.normalize = True
    layer.normalize_()
    assert torch.equal(layer(x).argmin(1), before)


def test_omega_initialisers():
    assert torch.equal(init_omega("identity", 2, 3), torch.eye(2, 3))
    torch.testing.assert_close(init_omega("scaled_identity", 3, 3), torch.eye(3) / 3**0.5)
    r = init_omega("random", 3, 4, generator=torch.Generator().manual_seed(0))
    assert r.shape == (3, 4) and r.abs().max() <= 1
    with pytest.raises(ValueError, match="omega_init"):
        init_omega("zeros", 2, 2)  # type: ignore[arg-type]


def test_class_mean_initialiser_and_jitter():
    x = torch.tensor([[0.0, 0.0], [2.0, 2.0], [10.0, 0.0], [12.0, 2.0]])
    y = torch.tensor([0, 0, 1, 1])
    labels = make_prototype_labels(2, {0: 1, 1: 2})
    assert labels.tolist() == [0, 1, 1]
    w = class_mean_prototypes(x, y, labels, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(w[0], torch.tensor([1.0, 1.0]))
    assert torch.allclose(w[1], torch.tensor([11.0, 1.0]), atol=0.1)
    assert not torch.equal(w[1], w[2])  # jitter makes winners unique
    with pytest.raises(DataValidationError, match="no samples"):
        class_mean_prototypes(x, y, make_prototype_labels(3))


def test_bad_layer_arguments():
    with pytest.raises(ValueError, match="num_prototypes"):
        GLVQLayer(3, 0)
    with pytest.raises(ValueError, match="rank"):
        GMLVQLayer(3, 2, rank=-1)
    with pytest.raises(ValueError, match="expects 3 features"):
        GLVQLayer(3, 2)(torch.zeros(4, 5))
    with pytest.raises(ValueError, match="prototype labels"):
        PrototypeModel(GLVQLayer(3, 2), [0, 1, 2])


def test_gmlvq_head_on_a_cnn_trains_on_mnist_shaped_input():
    torch.manual_seed(0)
    cnn = nn.Sequential(
        nn.Conv2d(1, 8, 3, stride=2),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
    )
    model = PrototypeModel(GMLVQLayer(64, 4, rank=8), [0, 1, 2, 3], backbone=cnn)
    # Four synthetic "digits": a bright quadrant per class, plus noise.
    y = torch.arange(4).repeat(16)
    x = 0.3 * torch.randn(64, 1, 28, 28)
    for k in range(4):
        r, c = divmod(k, 2)
        x[y == k, :, 14 * r : 14 * r + 14, 14 * c : 14 * c + 14] += 1.0
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(60):
        opt.zero_grad()
        loss = model.loss(model(x), y)
        loss.backward()
        opt.step()
        model.layer.normalize_()
    assert model(x).shape == (64, 4)
    assert (model.predict(x) == y).float().mean() > 0.9


@pytest.mark.parametrize("cls", [GLVQLayer, GMLVQLayer, LGMLVQLayer])
def test_a_layer_on_a_backbone_trains_from_its_default_start(cls):
    """The docs' example, a prototype head on a CNN without an explicit initialisation:
    the default prototypes differ, so the cost depends on the input and the backbone gets
    a gradient from the first step. All-zero prototypes (the old default) give every
    input the cost 0 and the backbone no gradient."""
    from dp_proto.backbones import small_cnn

    def backbone_gradient(prototypes):
        torch.manual_seed(0)
        model = PrototypeModel(cls(32, 10, prototypes=prototypes), range(10), backbone=small_cnn(1, 32))
        images, targets = torch.randn(16, 1, 28, 28), torch.arange(16) % 10
        loss = model.loss(model(images), targets)
        loss.backward()
        grad = sum(float(p.grad.abs().sum()) for p in model.backbone.parameters() if p.grad is not None)
        return loss.item(), grad

    loss, grad = backbone_gradient("random")
    assert loss != 0.0 and grad > 0
    assert backbone_gradient("zeros") == (0.0, 0.0)


def test_prototype_start_options():
    gen = torch.Generator().manual_seed(3)
    a = GLVQLayer(4, 3, generator=gen).prototypes
    b = GLVQLayer(4, 3, generator=torch.Generator().manual_seed(3)).prototypes
    assert torch.equal(a, b) and a.std() > 0.3  # standard normal entries
    assert torch.equal(GMLVQLayer(4, 3, prototypes="zeros").prototypes, torch.zeros(3, 4))
    given = torch.arange(12.0, dtype=torch.float64).reshape(3, 4)
    assert torch.equal(GLVQLayer(4, 3, prototypes=given, dtype=torch.float64).prototypes, given)
    with pytest.raises(ValueError, match="'random' or 'zeros'"):
        GLVQLayer(4, 3, prototypes="ones")
    with pytest.raises(ValueError, match=r"expected prototypes of shape \(3, 4\)"):
        GLVQLayer(4, 3, prototypes=torch.zeros(2, 4))


def test_a_backbone_that_does_not_fit_the_head_is_refused_clearly():
    model = PrototypeModel(GMLVQLayer(32, 2), [0, 1], backbone=torch.nn.Linear(10, 16))
    with pytest.raises(ValueError, match="backbone gives features of shape \\(4, 16\\).*expects 32 features"):
        model(torch.zeros(4, 10))
    fitting = PrototypeModel(GMLVQLayer(16, 2), [0, 1], backbone=torch.nn.Linear(10, 16))
    assert fitting(torch.zeros(4, 10)).shape == (4, 2)
    assert fitting(torch.zeros(0, 10)).shape == (0, 2)  # an empty Poisson batch passes


def test_prototype_counts_reads_labels_grouped_in_class_order():
    from dp_proto.lvq.init import prototype_counts

    assert prototype_counts(make_prototype_labels(3, [2, 1, 3])) == [2, 1, 3]
    for labels in ([1, 0], [0, 0, 2], [0, 1, 0]):  # shuffled, a class without a prototype, interleaved
        with pytest.raises(ValueError, match="class order"):
            prototype_counts(torch.tensor(labels))
