"""Random convolutional features: shapes, the filter bank, per-record outputs, errors, gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dp_proto.exceptions import DataValidationError
from dp_proto.features import RandomConvFeatures
from dp_proto.lvq import GMLVQLayer, PrototypeModel


def test_shapes_for_grey_and_multichannel_images():
    grey = RandomConvFeatures(n_filters=8, kernel_size=5, pool=4)
    assert grey(torch.rand(3, 28, 28)).shape == (3, 8, 7, 7)
    assert grey(torch.rand(3, 1, 28, 28)).shape == (3, 8, 7, 7)
    assert grey(torch.rand(2, 30, 30)).shape == (2, 8, 7, 7)  # the remainder of the pooling is dropped
    assert grey.output_shape((30, 30)) == (7, 7)
    colour = RandomConvFeatures(in_channels=3, n_filters=4, kernel_size=3, pool=1)
    assert colour(torch.rand(2, 3, 9, 11)).shape == (2, 4, 9, 11)


def test_filters_are_zero_mean_unit_norm_and_fixed_by_the_seed():
    bank = RandomConvFeatures(in_channels=2, n_filters=16, kernel_size=5, seed=3)
    w = bank.weight
    assert w.shape == (16, 2, 5, 5) and not w.requires_grad
    torch.testing.assert_close(w.sum(dim=(1, 2, 3)), torch.zeros(16, dtype=w.dtype), atol=1e-12, rtol=0)
    torch.testing.assert_close(w.flatten(1).norm(dim=1), torch.ones(16, dtype=w.dtype))
    assert torch.equal(w, RandomConvFeatures(in_channels=2, n_filters=16, kernel_size=5, seed=3).weight)
    assert not torch.equal(w, RandomConvFeatures(in_channels=2, n_filters=16, kernel_size=5, seed=4).weight)
    assert "weight" in bank.state_dict() and list(bank.parameters()) == []


def test_forward_is_the_documented_formula_and_constant_images_give_zero():
    bank = RandomConvFeatures(n_filters=6, kernel_size=3, pool=2, rectifier="relu", seed=1)
    x = torch.rand(4, 1, 8, 8, dtype=torch.float64)
    expected = F.avg_pool2d(F.relu(F.conv2d(x, bank.weight, padding=1)), 2)
    torch.testing.assert_close(bank(x), expected)
    abs_bank = RandomConvFeatures(n_filters=6, kernel_size=3, pool=1, seed=1)
    torch.testing.assert_close(abs_bank(x), F.conv2d(x, abs_bank.weight, padding=1).abs())
    inner = abs_bank(torch.full((1, 8, 8), 0.7, dtype=torch.float64))[..., 1:-1, 1:-1]  # away from the zero padding
    torch.testing.assert_close(inner, torch.zeros_like(inner), atol=1e-12, rtol=0)


def test_each_record_output_depends_on_that_record_alone():
    bank = RandomConvFeatures(n_filters=8)
    x = torch.rand(5, 28, 28)
    out = bank(x)
    other = torch.cat([x[:2], torch.rand(3, 28, 28)])
    torch.testing.assert_close(bank(other)[:2], out[:2])
    assert bank(x.double()).dtype == torch.float64 and out.dtype == torch.float32


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kernel_size": 4}, "odd"),
        ({"n_filters": 0}, "n_filters"),
        ({"pool": 0}, "pool"),
        ({"rectifier": "tanh"}, "rectifier"),
        ({"seed": -1}, "seed"),
        ({"in_channels": True}, "in_channels"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RandomConvFeatures(**kwargs)


def test_bad_input():
    bank = RandomConvFeatures(n_filters=4, pool=4)
    with pytest.raises(TypeError, match="torch.Tensor"):
        bank([[0.0]])
    with pytest.raises(TypeError, match="floating-point"):
        bank(torch.zeros(1, 28, 28, dtype=torch.uint8))
    with pytest.raises(DataValidationError, match=r"\(n, H, W\) or \(n, 1, H, W\)"):
        bank(torch.zeros(1, 3, 28, 28))
    with pytest.raises(DataValidationError, match="at least 4 x 4"):
        bank(torch.zeros(1, 3, 3))
    with pytest.raises(DataValidationError, match=r"\(n, 3, H, W\)"):
        RandomConvFeatures(in_channels=3)(torch.zeros(1, 28, 28))


def test_as_a_backbone_gradients_reach_the_head_and_the_input():
    bank = RandomConvFeatures(n_filters=4, kernel_size=3, pool=4)
    backbone = nn.Sequential(bank, nn.Flatten())
    model = PrototypeModel(GMLVQLayer(4 * 7 * 7, 3), prototype_labels=[0, 1, 2], backbone=backbone)
    x = torch.rand(6, 28, 28, requires_grad=True)
    loss = model(x).sum()
    loss.backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert all(p.grad is not None for p in model.parameters())
