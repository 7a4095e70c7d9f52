"""The fused engine's step around the clipped sum: the noise drawn in chunks of the
library's sampler, the gradients the step writes, and clipped sums with a frozen
parameter."""

from __future__ import annotations

import math

import pytest
import torch

from dp_proto.lvq import GLVQLayer, GMLVQLayer, LGMLVQLayer
from dp_proto.lvq.private import fused
from dp_proto.lvq.private.fused import add_gaussian_noise, clipped_gradient_sum, dp_sgd_step
from dp_proto.privacy.noise import gaussian_noise
from tests.lvq.private.test_grad_samplers import _model, _reference


def test_noise_up_to_one_chunk_is_one_draw_of_the_sampler():
    summed = torch.linspace(-1.0, 1.0, 1001)
    got = add_gaussian_noise(summed, 0.7, generator=torch.Generator().manual_seed(3))
    expected = summed + gaussian_noise(
        summed.shape, 0.7, generator=torch.Generator().manual_seed(3), dtype=summed.dtype
    )
    assert torch.equal(got, expected)


def test_noise_in_chunks_is_consecutive_draws_of_the_sampler(monkeypatch):
    monkeypatch.setattr(fused, "NOISE_CHUNK", 64)
    summed = torch.randn(1000, dtype=torch.float64)
    got = add_gaussian_noise(summed, 2.0, generator=torch.Generator().manual_seed(5))
    gen = torch.Generator().manual_seed(5)
    parts = [gaussian_noise((min(64, 1000 - s),), 2.0, generator=gen, dtype=torch.float64) for s in range(0, 1000, 64)]
    assert torch.equal(got, summed + torch.cat(parts))
    assert got.dtype == summed.dtype and not torch.equal(got, summed)


def test_chunked_noise_has_the_gaussian_law(monkeypatch):
    """i.i.d. N(0, std^2) across chunk boundaries: moments and the lag-one correlation."""
    monkeypatch.setattr(fused, "NOISE_CHUNK", 1 << 10)
    n, std = 200_000, 1.5
    z = add_gaussian_noise(torch.zeros(n, dtype=torch.float64), std, generator=torch.Generator().manual_seed(0))
    assert z.mean().abs() < 5 * std / math.sqrt(n)
    assert z.std().item() == pytest.approx(std, rel=0.01)
    assert (z / std).pow(4).mean().item() == pytest.approx(3.0, rel=0.03)
    lag = (z[1:] * z[:-1]).mean().item() / std**2
    assert abs(lag) < 5 / math.sqrt(n)


@pytest.mark.parametrize("kind", [GLVQLayer, GMLVQLayer, LGMLVQLayer])
def test_step_writes_the_noisy_sum_over_the_expected_batch(kind):
    model = _model(kind, 4, 2, 3, seed=1)
    x = torch.randn(12, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    y = torch.arange(12) % 3
    params = list(model.layer.parameters())
    for p in params:
        p.grad = None
    clipped_gradient_sum(model, x, y, 0.5)
    summed = torch.cat([p.grad.reshape(-1) for p in params])
    noisy = add_gaussian_noise(summed, 0.3, generator=torch.Generator().manual_seed(9))
    frozen = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))  # in the optimizer, not in the layer
    frozen.grad = torch.full_like(frozen, 7.0)
    before = [p.detach().clone() for p in params]
    optimizer = torch.optim.SGD([*params, frozen], lr=1.0)
    dp_sgd_step(
        model,
        x,
        y,
        optimizer,
        max_grad_norm=0.5,
        noise_std=0.3,
        expected_batch=8.0,
        generator=torch.Generator().manual_seed(9),
    )
    expected = torch.cat([b.reshape(-1) for b in before]) - noisy / 8.0
    assert torch.equal(torch.cat([p.detach().reshape(-1) for p in params]), expected)
    assert torch.equal(frozen.grad, torch.zeros_like(frozen))  # zeroed, as optimizer.zero_grad does


@pytest.mark.parametrize("kind", [GMLVQLayer, LGMLVQLayer])
@pytest.mark.parametrize("frozen", [0, 1])
@pytest.mark.parametrize("d", [2, 5])  # LGMLVQ: the quadratic form (d = 2) and the projections (d = 5)
def test_clipped_sum_of_one_trainable_parameter_matches_a_per_sample_loop(kind, frozen, d, monkeypatch):
    from dp_proto.lvq.private import grad_samplers

    monkeypatch.setattr(grad_samplers, "CANCELLATION_GUARD", 0.0)  # exact norms; the guard: test_clipped_sum_states
    model = _model(kind, d, 2, 2, seed=4)
    params = list(model.layer.named_parameters())
    name = params[1 - frozen][0]
    x = torch.randn(9, d, generator=torch.Generator().manual_seed(6), dtype=torch.float64) * 2
    y = torch.randint(0, 3, (9,), generator=torch.Generator().manual_seed(7))
    reference = _reference(model, x, y)[name]  # the trainable parameter's per-sample gradients
    model.zero_grad(set_to_none=True)
    params[frozen][1].requires_grad_(False)
    norms = reference.flatten(1).norm(dim=1)
    factor = (0.3 / (norms + 1e-6)).clamp(max=1.0)
    expected = (factor.reshape(-1, *[1] * (reference.dim() - 1)) * reference).sum(0)
    got_norms, _ = clipped_gradient_sum(model, x, y, 0.3)
    torch.testing.assert_close(got_norms, norms, atol=1e-9, rtol=1e-7)
    torch.testing.assert_close(dict(model.layer.named_parameters())[name].grad, expected, atol=1e-9, rtol=1e-7)
    assert params[frozen][1].grad is None
