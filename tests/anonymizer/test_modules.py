"""Anonymizer networks: shapes, argument checks, custom encoders."""

import pytest
import torch
from torch import nn

from dp_proto.anonymizer import Anonymizer, ConvEncoder, MLPEncoder, MLPHead, mlp


def test_mlp_layers():
    net = mlp(5, (7, 3), 2, dropout=0.2)
    kinds = [type(m) for m in net]
    assert kinds == [nn.Linear, nn.ReLU, nn.Dropout, nn.Linear, nn.ReLU, nn.Dropout, nn.Linear]
    assert [m.out_features for m in net if isinstance(m, nn.Linear)] == [7, 3, 2]
    plain = mlp(5, (), 2, final_activation=True)
    assert [type(m) for m in plain] == [nn.Linear, nn.ReLU]
    assert plain(torch.randn(4, 5)).min() >= 0


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        ((0, (4,), 2), {}, "widths"),
        ((3, (4, 0), 2), {}, "widths"),
        ((3, (4,), 0), {}, "widths"),
        ((3, (4,), 2), {"dropout": 1.0}, "dropout"),
        ((3, (4,), 2), {"dropout": -0.1}, "dropout"),
    ],
)
def test_mlp_rejects_bad_widths_and_dropout(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        mlp(*args, **kwargs)


def test_mlp_anonymizer_shapes_and_flattening():
    torch.manual_seed(0)
    a = Anonymizer.mlp(1 * 6 * 5, 3, 4, representation_dim=8, encoder_hidden=(16,), head_hidden=(12,))
    images = torch.randn(7, 1, 6, 5)
    z = a.encode(images)
    assert z.shape == (7, 8)
    assert bool((z >= 0).all())  # the representation is rectified
    regular, private = a(images)
    assert regular.shape == (7, 3) and private.shape == (7, 4)
    # flattening: the same records given flat
    torch.testing.assert_close(a.encode(images.flatten(1)), z)
    with pytest.raises(ValueError, match="expected 30 features per record, got 24"):
        a.encode(torch.randn(7, 1, 6, 4))


def test_mlp_encoder_attributes_and_dropout():
    enc = MLPEncoder(10, representation_dim=4, hidden=(8, 8), dropout=0.5)
    assert enc.in_features == 10 and enc.representation_dim == 4
    assert sum(isinstance(m, nn.Dropout) for m in enc.modules()) == 2
    enc.eval()
    x = torch.randn(3, 10)
    torch.testing.assert_close(enc(x), enc(x))  # deterministic in eval mode


def test_cnn_anonymizer_shapes():
    torch.manual_seed(0)
    a = Anonymizer.cnn((3, 16, 12), 2, 5, representation_dim=10, channels=(4, 6), head_hidden=(8,))
    x = torch.randn(4, 3, 16, 12)
    assert a.encode(x).shape == (4, 10)
    regular, private = a(x)
    assert regular.shape == (4, 2) and private.shape == (4, 5)
    assert a.encoder.image_shape == (3, 16, 12)
    # odd sizes are floored by the pooling: 7x5 -> 3x2 -> 1x1
    small = ConvEncoder((1, 7, 5), representation_dim=3, channels=(2, 2))
    assert small(torch.randn(2, 1, 7, 5)).shape == (2, 3)
    assert small.project[1].in_features == 2 * 1 * 1
    with pytest.raises(ValueError, match=r"expected images of shape \(3, 16, 12\), got \(3, 12, 16\)"):
        a.encode(torch.randn(4, 3, 12, 16))
    with pytest.raises(ValueError, match="expected images of shape"):
        a.encode(torch.randn(4, 3 * 16 * 12))


def test_cnn_dropout_is_placed_after_flattening():
    enc = ConvEncoder((1, 8, 8), representation_dim=4, channels=(2,), dropout=0.3)
    kinds = [type(m) for m in enc.project]
    assert kinds == [nn.Flatten, nn.Dropout, nn.Linear, nn.ReLU]


@pytest.mark.parametrize(
    "shape, match",
    [
        ((8, 8), r"\(channels, height, width\)"),
        ((1, 8, 8, 1), r"\(channels, height, width\)"),
        ((1, 3, 3), "too small for 2 pooling steps"),
        ((1, 8, 1), "too small"),
        ((1, 0, 8), "positive sizes"),
    ],
)
def test_cnn_rejects_bad_image_shapes(shape, match):
    with pytest.raises(ValueError, match=match):
        ConvEncoder(shape)
    with pytest.raises(ValueError, match=match):
        Anonymizer.cnn(shape, 2, 2)


def test_cnn_pooling_steps_follow_the_channels():
    ConvEncoder((1, 2, 2), channels=(4,))  # one pooling step fits a 2x2 image
    with pytest.raises(ValueError, match="too small for 3 pooling steps"):
        ConvEncoder((1, 4, 4), channels=(2, 2, 2))


def test_heads_reject_one_class_and_bad_widths():
    with pytest.raises(ValueError, match="at least 2 classes"):
        MLPHead(4, 1)
    with pytest.raises(ValueError, match="at least 2 classes"):
        Anonymizer.mlp(4, 1, 3)
    with pytest.raises(ValueError, match="at least 2 classes"):
        Anonymizer.mlp(4, 3, 1)
    with pytest.raises(ValueError, match="at least 2 classes"):
        Anonymizer.cnn((1, 8, 8), 2, 1)
    with pytest.raises(ValueError, match="widths"):
        MLPHead(4, 2, hidden=(0,))
    with pytest.raises(ValueError, match="widths"):
        Anonymizer.mlp(4, 2, 2, representation_dim=0)
    with pytest.raises(ValueError, match="widths"):
        Anonymizer.mlp(4, 2, 2, encoder_hidden=(8, -1))
    with pytest.raises(ValueError, match="dropout"):
        Anonymizer.mlp(4, 2, 2, dropout=1.5)
    with pytest.raises(ValueError, match="dropout"):
        Anonymizer.cnn((1, 8, 8), 2, 2, dropout=-0.5)  # rejected by the heads
    head = MLPHead(4, 3, hidden=())
    assert head.num_classes == 3 and head(torch.randn(2, 4)).shape == (2, 3)


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")
@pytest.mark.parametrize(
    "kwargs",
    [
        {"image_shape": (1, 8, 8), "representation_dim": 0},
        {"image_shape": (1, 8, 8), "channels": (0, 4)},
        {"image_shape": (0, 8, 8)},
        {"image_shape": (1, 8, 8), "dropout": -0.5},
        {"image_shape": (1, 8, 8), "dropout": 1.0},
    ],
)
def test_conv_encoder_rejects_bad_widths_and_dropout(kwargs):
    with pytest.raises(ValueError):
        ConvEncoder(**kwargs)


def test_branch_parameters_are_the_heads_only():
    a = Anonymizer.mlp(6, 2, 3, representation_dim=4, encoder_hidden=(5,), head_hidden=(3,))
    ids = {id(p) for p in a.branch_parameters()}
    heads = {id(p) for p in [*a.regular_head.parameters(), *a.private_head.parameters()]}
    assert ids == heads
    assert not ids & {id(p) for p in a.encoder.parameters()}
    assert len(a.branch_parameters()) == 8  # 2 linear layers x (weight, bias) per head


def test_any_encoder_works():
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Flatten(), nn.Linear(2 * 3 * 3, 5), nn.ReLU())
    a = Anonymizer(encoder, MLPHead(5, 2, hidden=(4,)), MLPHead(5, 6, hidden=()))
    x = torch.randn(3, 2, 3, 3)
    assert a.encode(x).shape == (3, 5)
    regular, private = a(x)
    assert regular.shape == (3, 2) and private.shape == (3, 6)
    # gradients reach every part
    (regular.sum() + private.sum()).backward()
    assert all(p.grad is not None for p in a.parameters())


def test_the_signal_encoder_maps_windows_and_refuses_short_ones():
    from dp_proto.anonymizer import SignalEncoder
    from dp_proto.anonymizer.release import describe_encoder, encoder_from_architecture

    torch.manual_seed(0)
    enc = SignalEncoder((6, 128), representation_dim=16, channels=(8, 8, 8))
    z = enc(torch.randn(5, 6, 128))
    assert z.shape == (5, 16) and bool((z >= 0).all())
    rebuilt = encoder_from_architecture(describe_encoder(enc))
    rebuilt.load_state_dict(enc.state_dict())
    x = torch.randn(3, 6, 128)
    assert torch.equal(rebuilt(x), enc(x))
    with pytest.raises(ValueError, match=r"windows of 4 samples are shorter than the receptive field"):
        SignalEncoder((6, 4), channels=(8, 8, 8))
    with pytest.raises(ValueError, match="expected windows of shape"):
        enc(torch.randn(2, 6, 64))
    with pytest.raises(ValueError, match="kernel_size must be an odd"):
        SignalEncoder((6, 128), kernel_size=4)
    model = Anonymizer.signal_cnn((6, 128), 6, 30, representation_dim=8, channels=(4, 4))
    regular, private = model(torch.randn(2, 6, 128))
    assert regular.shape == (2, 6) and private.shape == (2, 30)
