"""The 2-D scattering transform: shapes, invariances, the low-pass channel, errors, gradients.

The agreement with kymatio (Andreux et al. 2020) is pinned by per-channel means that
kymatio 0.3.0 computed on a fixed image (the suite does not depend on kymatio).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from dp_proto.exceptions import DataValidationError
from dp_proto.features import Scattering2D

#: kymatio 0.3.0, ``Scattering2D(J=2, shape=(28, 28)).double()(_pattern())``: the spatial
#: mean of each of the 81 channels
KYMATIO_MEANS = [
    1.548560e-03, 1.049038e-02, 1.710787e-02, 2.028989e-02, 1.648518e-02, 1.023684e-02,
    4.951107e-03, 2.469868e-03, 4.839797e-03, 1.427747e-02, 3.350962e-02, 4.519525e-02,
    3.265861e-02, 1.342886e-02, 4.862356e-03, 2.051915e-03, 4.530418e-03, 1.163034e-03,
    1.505529e-03, 1.658940e-03, 1.188454e-03, 1.144483e-03, 1.134396e-03, 1.173584e-03,
    1.188016e-03, 1.926970e-03, 2.067817e-03, 2.590127e-03, 1.942110e-03, 1.871039e-03,
    1.852392e-03, 1.905831e-03, 1.955723e-03, 2.258543e-03, 2.302300e-03, 3.036907e-03,
    2.362093e-03, 2.243231e-03, 2.196345e-03, 2.231002e-03, 2.286694e-03, 1.775989e-03,
    1.775739e-03, 2.197817e-03, 1.926227e-03, 1.811369e-03, 1.755548e-03, 1.776331e-03,
    1.819292e-03, 1.133919e-03, 1.096597e-03, 1.668793e-03, 1.468325e-03, 1.106031e-03,
    1.065398e-03, 1.128071e-03, 1.188528e-03, 5.740547e-04, 5.579641e-04, 8.450382e-04,
    9.526657e-04, 5.080739e-04, 4.482958e-04, 5.241280e-04, 5.972137e-04, 3.209608e-04,
    4.280410e-04, 7.486275e-04, 4.233075e-04, 2.854395e-04, 3.391450e-04, 4.364115e-04,
    3.964441e-04, 5.058949e-04, 8.538615e-04, 7.628475e-04, 5.980357e-04, 5.460846e-04,
    4.948011e-04, 4.946535e-04, 4.933682e-04,
]  # fmt: skip


@pytest.fixture(scope="module")
def scatter() -> Scattering2D:
    return Scattering2D((28, 28), J=2, L=8)


def _pattern(dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """A smooth, oriented 28 x 28 test image, ``(1, 28, 28)``."""
    i = torch.arange(28, dtype=dtype)[:, None]
    j = torch.arange(28, dtype=dtype)[None, :]
    return (torch.exp(-((i - 13.5) ** 2 + (j - 11) ** 2) / 30) * torch.cos(0.7 * i + 0.3 * j))[None]


def _digits(n: int, seed: int = 0) -> torch.Tensor:
    """MNIST-like images ``(n, 28, 28)``: random strokes, blurred, on a zero background."""
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(n, 1, 28, 28)
    x[:, :, 6:22, 6:22] = (torch.rand(n, 1, 16, 16, generator=g) < 0.15).float()
    blur = torch.exp(-(torch.arange(-3, 4.0) ** 2) / 2)
    kernel = (blur[:, None] * blur[None, :] / blur.sum() ** 2)[None, None]
    return torch.nn.functional.conv2d(x, kernel, padding=3)[:, 0]


def test_output_shapes(scatter: Scattering2D) -> None:
    assert scatter(torch.rand(5, 28, 28)).shape == (5, 81, 7, 7)
    x = torch.rand(4, 3, 28, 28)
    out = scatter(x)
    assert out.shape == (4, 3 * 81, 7, 7)
    # channel c * K + k is path k of input channel c
    torch.testing.assert_close(out[:, 81:162], scatter(x[:, 1]))
    assert scatter.n_paths == 81 and scatter.output_shape == (7, 7)


@pytest.mark.parametrize(
    ("shape", "J", "L", "max_order", "K"),
    [((28, 28), 2, 8, 1, 17), ((28, 28), 1, 8, 2, 9), ((32, 24), 3, 4, 2, 1 + 12 + 16 * 3)],
)
def test_number_of_paths(shape: tuple[int, int], J: int, L: int, max_order: int, K: int) -> None:
    s = Scattering2D(shape, J=J, L=L, max_order=max_order)
    assert s.n_paths == K
    out = s(torch.rand(2, *shape))
    assert out.shape == (2, K, shape[0] // 2**J, shape[1] // 2**J)


def test_first_order_is_a_prefix_of_second(scatter: Scattering2D) -> None:
    x = _digits(3)
    torch.testing.assert_close(Scattering2D(max_order=1)(x), scatter(x)[:, :17])


def test_matches_kymatio_reference(scatter: Scattering2D) -> None:
    means = scatter(_pattern())[0].mean(dim=(-2, -1))
    np.testing.assert_allclose(means.numpy(), KYMATIO_MEANS, rtol=1e-5)


@pytest.mark.parametrize(("J", "size", "bound"), [(2, 28, 0.5), (3, 32, 0.35)])
def test_stable_to_small_translations(J: int, size: int, bound: float) -> None:
    """A 1-pixel shift moves the input by ~40% (in relative norm), the output by less
    than ``bound`` times that (measured: 0.43-0.46 for J = 2, 0.32 for J = 3)."""
    scatter = Scattering2D((size, size), J=J)
    margin = (size - 28) // 2
    x = torch.nn.functional.pad(_digits(8), (margin,) * 4)
    for dims in ((1,), (2,), (1, 2)):
        shifted = torch.roll(x, shifts=(1,) * len(dims), dims=dims)  # the border is zero
        rel_in = (x - shifted).norm() / x.norm()
        out, out_shifted = scatter(x), scatter(shifted)
        rel_out = (out - out_shifted).norm() / out.norm()
        assert rel_out < bound * rel_in, (dims, rel_in, rel_out)


def test_order_zero_is_the_low_passed_input(scatter: Scattering2D) -> None:
    x = _digits(2).double()
    # independent low-pass: reflect pad by 4, circular convolution with a Gaussian of
    # sigma 1.6 (kymatio's 0.8 * 2**(J-1)) summed over periodic copies, sampled every 4
    # pixels; output pixel (a, b) sits on input pixel (4a, 4b)
    padded = np.pad(x.numpy(), ((0, 0), (4, 4), (4, 4)), mode="reflect")  # (2, 36, 36)
    d = np.arange(36)[:, None] + 36 * np.arange(-2, 3)[None, :]
    g = np.exp(-(d**2) / (2 * 1.6**2)).sum(axis=1)
    kernel = np.outer(g, g) / (2 * 3.1415 * 1.6**2)  # kymatio's normalisation
    low = np.real(np.fft.ifft2(np.fft.fft2(padded) * np.fft.fft2(kernel)))
    np.testing.assert_allclose(scatter(x)[:, 0].numpy(), low[:, 4:32:4, 4:32:4], rtol=1e-10, atol=1e-12)
    # a constant image: every coefficient of order 0 is the constant (gain pi / 3.1415)
    const = scatter(torch.full((1, 28, 28), 2.5, dtype=torch.float64))
    np.testing.assert_allclose(const[0, 0].numpy(), 2.5, rtol=1e-4)
    assert const[0, 1:].abs().max() < 1e-10  # zero-mean wavelets see nothing


def test_deterministic(scatter: Scattering2D) -> None:
    x = _digits(4)
    out = scatter(x)
    assert torch.equal(out, scatter(x))
    assert torch.equal(out, Scattering2D()(x))


def test_float64_and_chunks(scatter: Scattering2D) -> None:
    x = _digits(5)
    out32 = scatter(x)
    out64 = scatter(x.double())
    assert out32.dtype == torch.float32 and out64.dtype == torch.float64
    torch.testing.assert_close(out64.float(), out32, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(Scattering2D(chunk_size=2)(x.double()), out64, rtol=1e-12, atol=1e-14)


def test_no_parameters_and_empty_state_dict(scatter: Scattering2D) -> None:
    assert list(scatter.parameters()) == []
    assert scatter.state_dict() == {}
    assert len(list(scatter.buffers())) > 0  # the filters move with .to(device)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"shape": (27, 28)}, "divisible"),
        ({"shape": (28, 30)}, "divisible"),
        ({"shape": (4, 28)}, "support"),
        ({"shape": (8, 16), "J": 3}, "support"),
        ({"shape": 28}, "two ints"),
        ({"J": 0}, "J must be"),
        ({"L": 0}, "L must be"),
        ({"max_order": 3}, "max_order"),
        ({"max_order": 0}, "max_order"),
        ({"chunk_size": 0}, "chunk_size"),
    ],
)
def test_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Scattering2D(**kwargs)


def test_bad_inputs(scatter: Scattering2D) -> None:
    for x in (torch.rand(2, 28, 27), torch.rand(2, 32, 32), torch.rand(28, 28), torch.rand(1, 1, 1, 28, 28)):
        with pytest.raises(DataValidationError, match="expects input"):
            scatter(x)
    for x in (torch.ones(2, 28, 28, dtype=torch.int64), torch.ones(2, 28, 28, dtype=torch.bool)):
        with pytest.raises(TypeError, match="floating-point"):
            scatter(x)
    with pytest.raises(TypeError, match="Tensor"):
        scatter(np.zeros((2, 28, 28), dtype=np.float32))


def test_gradients_flow_under_a_trainable_head(scatter: Scattering2D) -> None:
    x = torch.cat([_digits(3), torch.zeros(1, 28, 28)]).requires_grad_()  # a blank image too
    head = nn.Sequential(scatter, nn.Flatten(), nn.Linear(81 * 49, 2))
    loss = nn.functional.cross_entropy(head(x), torch.tensor([0, 1, 0, 1]))
    loss.backward()
    weight = head[2].weight.grad
    assert weight is not None and torch.isfinite(weight).all() and weight.abs().sum() > 0
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
