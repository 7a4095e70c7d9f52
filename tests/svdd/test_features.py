"""Random Fourier features (eq. 4.5): kernel approximation, unit norm, layout, determinism, errors."""

import math

import pytest
import torch

from dp_proto.svdd import RandomFourierFeatures, rbf_kernel


def _points(n=60, d=5, seed=0):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _rff(d, F, gamma, seed, dtype=torch.float64):
    return RandomFourierFeatures(d, F, gamma, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_approximates_rbf_kernel_at_4000_features():
    # Each entry of Phi Phi^T averages F/2 bounded i.i.d. terms: its standard deviation is
    # about 1/sqrt(F) = 0.016 here; over the 1770 pairs the observed maximum is about 0.05.
    x = _points()
    k = rbf_kernel(x, x, 0.5)
    phi = _rff(5, 4000, 0.5, seed=1)(x)
    err = phi @ phi.T - k
    assert err.pow(2).mean().sqrt() < 0.025
    assert err.abs().max() < 0.09
    torch.testing.assert_close(torch.diagonal(phi @ phi.T), torch.ones(60, dtype=torch.float64))


def test_error_shrinks_like_one_over_sqrt_f():
    x = _points(40, 3, seed=2)
    k = rbf_kernel(x, x, 1.0)
    widths = [100, 400, 1600, 6400]
    rms = []
    for F in widths:
        phis = [_rff(3, F, 1.0, seed=10 + s)(x) for s in range(8)]
        mse = torch.stack([(phi @ phi.T - k).pow(2).mean() for phi in phis])
        rms.append(math.sqrt(float(mse.mean())))
    slope = (math.log(rms[-1]) - math.log(rms[0])) / (math.log(widths[-1]) - math.log(widths[0]))
    assert -0.62 < slope < -0.38, (rms, slope)
    # and the constant: RMS error within a factor 1.5 of 1/sqrt(F)
    for F, r in zip(widths, rms, strict=True):
        assert r < 1.5 / math.sqrt(F)


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_unit_norm_for_any_input(dtype, atol):
    x = torch.cat([_points(30, 4, seed=3) * 100, _points(30, 4, seed=4) * 1e-3]).to(dtype)
    phi = _rff(4, 50, 2.0, seed=0, dtype=dtype)(x)
    assert phi.dtype == dtype and phi.shape == (60, 50)
    torch.testing.assert_close(phi.norm(dim=1), torch.ones(60, dtype=dtype), atol=atol, rtol=0)


def test_layout_follows_eq_4_5():
    rff = _rff(3, 8, 0.7, seed=5)
    assert rff.W is rff.frequencies and rff.W.shape == (3, 4)
    x = _points(6, 3, seed=6)
    phi = rff(x)
    proj = x @ rff.W
    scale = math.sqrt(2 / 8)
    torch.testing.assert_close(phi[:, 0::2], scale * torch.cos(proj))
    torch.testing.assert_close(phi[:, 1::2], scale * torch.sin(proj))


def test_frequencies_have_variance_two_gamma():
    gamma = 0.3
    w = _rff(10, 4000, gamma, seed=7).W  # 20000 draws: std of the variance estimate ~1%
    assert abs(float(w.mean())) < 4 * math.sqrt(2 * gamma / w.numel())
    assert abs(float(w.var()) / (2 * gamma) - 1) < 0.05


def test_no_trainable_parameters_and_buffer_moves():
    rff = _rff(2, 6, 1.0, seed=0, dtype=torch.float32)
    assert list(rff.parameters()) == []
    assert set(rff.state_dict()) == {"frequencies"}
    assert rff.kappa == 1.0
    rff64 = rff.to(torch.float64)
    assert rff64.W.dtype == torch.float64
    assert "num_features=6" in repr(rff)


def test_deterministic_with_generator_and_dtype_independent():
    a, b, c = _rff(4, 16, 1.0, seed=11), _rff(4, 16, 1.0, seed=11), _rff(4, 16, 1.0, seed=12)
    torch.testing.assert_close(a.W, b.W, rtol=0, atol=0)
    assert not torch.allclose(a.W, c.W)
    f32 = _rff(4, 16, 1.0, seed=11, dtype=torch.float32)
    torch.testing.assert_close(f32.W, a.W.float(), rtol=0, atol=0)
    x = _points(5, 4, seed=8)
    torch.testing.assert_close(a(x), b(x), rtol=0, atol=0)


def test_batched_leading_dimensions():
    rff = _rff(3, 10, 1.0, seed=0)
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    out = rff(x)
    assert out.shape == (2, 5, 10)
    torch.testing.assert_close(out[1], rff(x[1]))


@pytest.mark.parametrize("F", [0, 1, 3, 7, -2])
def test_bad_feature_counts(F):
    with pytest.raises(ValueError, match="even"):
        RandomFourierFeatures(3, F, 1.0)


@pytest.mark.parametrize("gamma", [0.0, -1.0, float("nan"), float("inf"), "a"])
def test_bad_gamma(gamma):
    with pytest.raises(ValueError, match="gamma"):
        RandomFourierFeatures(3, 4, gamma)


def test_bad_in_features_dtype_and_input_shape():
    with pytest.raises(ValueError, match="in_features"):
        RandomFourierFeatures(0, 4, 1.0)
    with pytest.raises(ValueError, match="floating"):
        RandomFourierFeatures(2, 4, 1.0, dtype=torch.int64)
    with pytest.raises(ValueError, match="in_features=3"):
        RandomFourierFeatures(3, 4, 1.0)(torch.zeros(5, 2))
    with pytest.raises(ValueError, match="gamma"):
        rbf_kernel(torch.zeros(2, 1), torch.zeros(2, 1), 0.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu():
    cpu = _rff(3, 20, 1.0, seed=0)
    gpu = _rff(3, 20, 1.0, seed=0).cuda()
    x = _points(7, 3)
    out = gpu(x.cuda())
    assert out.device.type == "cuda"
    torch.testing.assert_close(out.cpu(), cpu(x))
