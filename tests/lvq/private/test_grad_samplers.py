"""Closed-form per-sample gradients (and norms) against a per-sample autograd loop."""

from unittest import mock

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from opacus import GradSampleModule
from torch import nn

from dp_proto.lvq import GLVQLayer, GMLVQLayer, LGMLVQLayer, PrototypeModel, glvq_loss
from dp_proto.lvq.private import grad_samplers, opacus_adapter  # noqa: F401  (registers the samplers)
from dp_proto.lvq.private.grad_samplers import (
    glvq_norm_sample,
    gmlvq_norm_sample,
    lgmlvq_norm_sample,
)

NORMS = {GLVQLayer: glvq_norm_sample, GMLVQLayer: gmlvq_norm_sample, LGMLVQLayer: lgmlvq_norm_sample}


def _model(kind, d, per_class, rank, seed):
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(3).repeat_interleave(per_class)
    W = len(labels)
    kwargs = {"prototypes": torch.randn(W, d, generator=g, dtype=torch.float64), "dtype": torch.float64}
    if kind is GLVQLayer:
        layer = GLVQLayer(d, W, **kwargs)
    elif kind is GMLVQLayer:
        layer = GMLVQLayer(d, W, rank=rank, omega_init="random", generator=g, normalize=False, **kwargs)
    else:
        layer = LGMLVQLayer(d, W, rank=rank, omega_init="random", generator=g, **kwargs)
    return PrototypeModel(layer, labels)


def _reference(model, x, y, transfer_fn="identity", beta=1.0):
    """Per-sample gradients by a loop over single samples."""
    out = {name: [] for name, _ in model.layer.named_parameters()}
    for i in range(x.shape[0]):
        model.zero_grad()
        glvq_loss(
            model(x[i : i + 1]),
            y[i : i + 1],
            model.prototype_labels,
            reduction="sum",
            transfer_fn=transfer_fn,
            beta=beta,
        ).backward()
        for name, p in model.layer.named_parameters():
            out[name].append(p.grad.detach().clone())
    return {name: torch.stack(v) if v else None for name, v in out.items()}


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from([GLVQLayer, GMLVQLayer, LGMLVQLayer]),
    st.integers(1, 9),  # batch (a batch of one included)
    st.integers(1, 6),  # d
    st.integers(1, 3),  # prototypes per class
    st.integers(1, 4),  # rank
    st.integers(0, 2**31 - 1),
)
def test_grad_samples_and_norms_match_a_per_sample_loop(kind, batch, d, per_class, rank, seed):
    model = _model(kind, d, per_class, rank, seed)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, d, generator=g, dtype=torch.float64) * 2
    y = torch.randint(0, 3, (batch,), generator=g)
    reference = _reference(model, x, y)

    gsm = GradSampleModule(model, loss_reduction="sum")
    glvq_loss(gsm(x), y, model.prototype_labels, reduction="sum").backward()
    total_sq = torch.zeros(batch, dtype=torch.float64)
    for name, p in model.layer.named_parameters():
        torch.testing.assert_close(p.grad_sample, reference[name], atol=1e-9, rtol=1e-7)
        total_sq += reference[name].flatten(1).pow(2).sum(1)
    gsm._close()

    # Norm sampler: needs the layer input and dL/dD, which we rebuild here.
    dist = model.layer(x)
    dist.retain_grad()
    glvq_loss(dist, y, model.prototype_labels, reduction="sum").backward()
    guarded = NORMS[kind](model.layer, [x], dist.grad)
    with mock.patch.object(grad_samplers, "CANCELLATION_GUARD", 0.0):
        norms = NORMS[kind](model.layer, [x], dist.grad)
    for name, p in model.layer.named_parameters():
        expected = reference[name].flatten(1).pow(2).sum(1)  # squares: sqrt amplifies cancellation noise
        torch.testing.assert_close(norms[p].pow(2), expected, atol=1e-9, rtol=1e-7)
        assert bool((guarded[p] >= norms[p]).all())  # the clipping norm never understates


def test_empty_batch():
    model = _model(GMLVQLayer, 4, 1, 2, 0)
    x = torch.zeros(0, 4, dtype=torch.float64)
    grads = grad_samplers.gmlvq_grad_sample(model.layer, [x], torch.zeros(0, 3, dtype=torch.float64))
    assert grads[model.layer.omega].shape == (0, 2, 4)
    assert grads[model.layer.prototypes].shape == (0, 3, 4)


def test_dense_backprops_are_handled_exactly():
    """A loss other than GLVQ (soft-min over all prototypes) gives a dense G."""
    model = _model(LGMLVQLayer, 3, 2, 2, 3)
    x = torch.randn(5, 3, dtype=torch.float64)
    gsm = GradSampleModule(model, loss_reduction="sum")
    (-torch.logsumexp(-gsm(x), dim=1)).sum().backward()
    got = {n: p.grad_sample for n, p in model.layer.named_parameters()}
    gsm._close()
    for i in range(5):
        model.zero_grad()
        (-torch.logsumexp(-model(x[i : i + 1]), dim=1)).sum().backward()
        for n, p in model.layer.named_parameters():
            torch.testing.assert_close(got[n][i], p.grad, atol=1e-9, rtol=1e-7)


def test_prototype_head_on_a_cnn_uses_opacus_samplers_for_the_cnn():
    torch.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(1, 4, 3, stride=2), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 13 * 13, 6))
    model = PrototypeModel(GMLVQLayer(6, 3, rank=4), [0, 1, 2], backbone=cnn)
    gsm = GradSampleModule(model, loss_reduction="sum")
    x = torch.randn(7, 1, 28, 28)
    y = torch.randint(0, 3, (7,))
    glvq_loss(gsm(x), y, model.prototype_labels, reduction="sum").backward()
    for p in model.parameters():
        assert p.grad_sample.shape == (7, *p.shape)
        torch.testing.assert_close(p.grad_sample.sum(0), p.grad, atol=1e-5, rtol=1e-4)
