"""Distances against naive per-pair formulas, over random shapes (hypothesis)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dp_proto.lvq import lomega_distance, omega_distance, squared_euclidean_distance

shapes = st.tuples(
    st.integers(1, 7),  # B (a batch of one included)
    st.integers(1, 5),  # W
    st.integers(1, 6),  # d
    st.integers(1, 6),  # r
    st.integers(0, 2**31 - 1),
)


def _data(B, W, d, r, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, d, generator=g, dtype=torch.float64) * 3
    w = torch.randn(W, d, generator=g, dtype=torch.float64) * 3
    omega = torch.randn(r, d, generator=g, dtype=torch.float64)
    omegas = torch.randn(W, r, d, generator=g, dtype=torch.float64)
    return x, w, omega, omegas


@settings(max_examples=60, deadline=None)
@given(shapes)
def test_distances_match_naive_formulas(shape):
    x, w, omega, omegas = _data(*shape)
    B, W = x.shape[0], w.shape[0]
    euclid = torch.empty(B, W, dtype=x.dtype)
    glob = torch.empty(B, W, dtype=x.dtype)
    loc = torch.empty(B, W, dtype=x.dtype)
    lam = omega.T @ omega
    for i in range(B):
        for j in range(W):
            diff = x[i] - w[j]
            euclid[i, j] = diff @ diff
            glob[i, j] = diff @ lam @ diff
            loc[i, j] = diff @ (omegas[j].T @ omegas[j]) @ diff
    torch.testing.assert_close(squared_euclidean_distance(x, w), euclid, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(omega_distance(x, w, omega), glob, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(lomega_distance(x, w, omegas), loc, atol=1e-9, rtol=1e-9)


@settings(max_examples=30, deadline=None)
@given(shapes)
def test_distances_are_nonnegative_and_zero_at_the_prototype(shape):
    x, w, omega, omegas = _data(*shape)
    for dist in (squared_euclidean_distance(x, w), omega_distance(x, w, omega), lomega_distance(x, w, omegas)):
        assert (dist >= 0).all()
    on_top = squared_euclidean_distance(w, w).diagonal()
    torch.testing.assert_close(on_top, torch.zeros_like(on_top), atol=1e-9, rtol=0)


def test_identity_omega_gives_euclidean():
    x, w, _, _ = _data(4, 3, 5, 5, 0)
    eye = torch.eye(5, dtype=x.dtype)
    torch.testing.assert_close(omega_distance(x, w, eye), squared_euclidean_distance(x, w))
    torch.testing.assert_close(lomega_distance(x, w, eye.expand(3, 5, 5)), squared_euclidean_distance(x, w))


def test_empty_batch():
    x = torch.zeros(0, 3)
    w = torch.randn(2, 3)
    assert squared_euclidean_distance(x, w).shape == (0, 2)
    assert omega_distance(x, w, torch.eye(3)).shape == (0, 2)
    assert lomega_distance(x, w, torch.eye(3).expand(2, 3, 3)).shape == (0, 2)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: squared_euclidean_distance(torch.zeros(2, 3), torch.zeros(2, 4)), "3 features"),
        (lambda: squared_euclidean_distance(torch.zeros(3), torch.zeros(2, 3)), "shape"),
        (lambda: omega_distance(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 4)), "omega"),
        (lambda: lomega_distance(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3, 2, 3)), "omegas"),
    ],
)
def test_shape_errors_name_the_problem(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("shape", [(9, 26, 4, 4, 1), (9, 2, 6, 3, 2)])
def test_local_distance_layouts_agree_in_value_and_gradient(shape):
    # lomega_distance takes the quadratic form when d^2 <= W r (first shape) and the
    # projections otherwise (second); both must give the same values and gradients.
    from dp_proto.lvq.distances import _lomega_quadratic

    x, w, _, omegas = _data(*shape)
    x.requires_grad_(True)
    w.requires_grad_(True)
    omegas.requires_grad_(True)
    weights = torch.randn(x.shape[0], w.shape[0], dtype=x.dtype)
    projected = (torch.einsum("bd,wrd->bwr", x, omegas) - torch.einsum("wd,wrd->wr", w, omegas)).pow(2).sum(-1)
    for dist in (lomega_distance(x, w, omegas), _lomega_quadratic(x, w, omegas)):
        torch.testing.assert_close(dist, projected, atol=1e-9, rtol=1e-9)
        grads = torch.autograd.grad((dist * weights).sum(), (x, w, omegas))
        expected = torch.autograd.grad((projected * weights).sum(), (x, w, omegas), retain_graph=True)
        for got, want in zip(grads, expected, strict=True):
            torch.testing.assert_close(got, want, atol=1e-8, rtol=1e-8)
