"""Row-independent maps of private SVDD: a record's features, score, gradient, end point
and nearest equilibrium point are bit-identical whatever other records are evaluated with
it (batch size, position, thread count), and agree with the BLAS products to rounding."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dp_proto._rowwise import ordered_matmul, ordered_row_sum, ordered_sq_distances
from dp_proto.svdd.cells import nearest_index
from dp_proto.svdd.equilibrium import descend, support_function, support_gradient
from dp_proto.svdd.features import RandomFourierFeatures

DTYPES = [torch.float32, torch.float64]


def _record_maps(features, centre, refs):
    return {
        "features": lambda x: features(x),
        "support_function": lambda x: support_function(features, centre, x),
        "support_gradient": lambda x: support_gradient(features, centre, x),
        "descend": lambda x: descend(features, centre, x, lr=0.05, iters=3),
        "nearest_index": lambda x: nearest_index(x, refs),
    }


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    d=st.integers(1, 9),
    half_features=st.integers(1, 40),
    others=st.integers(0, 70),
    position=st.integers(0, 70),
    threads=st.sampled_from([1, 2]),
    dtype=st.sampled_from(DTYPES),
)
def test_a_record_maps_to_the_same_bits_in_any_batch(seed, d, half_features, others, position, threads, dtype):
    gen = torch.Generator().manual_seed(seed)
    features = RandomFourierFeatures(d, 2 * half_features, 0.7, generator=gen, dtype=dtype)
    centre = torch.randn(2 * half_features, generator=gen, dtype=dtype) / half_features
    refs = torch.randn(5, d, generator=gen, dtype=dtype)
    record = torch.randn(1, d, generator=gen, dtype=dtype) * 3
    batch = torch.randn(others, d, generator=gen, dtype=dtype) * 3
    at = min(position, others)
    batch = torch.cat([batch[:at], record, batch[at:]])
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for name, f in _record_maps(features, centre, refs).items():
            assert torch.equal(f(record)[0], f(batch)[at]), name
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ordered_products_agree_with_blas(dtype):
    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(37, 11, generator=gen, dtype=dtype), torch.randn(11, 5, generator=gen, dtype=dtype)
    refs = torch.randn(4, 11, generator=gen, dtype=dtype)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}
    torch.testing.assert_close(ordered_matmul(a, b), a @ b, **tol)
    torch.testing.assert_close(ordered_row_sum(a), a.sum(-1), **tol)
    torch.testing.assert_close(ordered_sq_distances(a, refs), torch.cdist(a, refs).square(), **tol)


def test_empty_contractions_and_shape_errors():
    assert torch.equal(ordered_matmul(torch.ones(3, 0), torch.ones(0, 2)), torch.zeros(3, 2))
    assert torch.equal(ordered_row_sum(torch.ones(4, 0)), torch.zeros(4))
    assert ordered_sq_distances(torch.ones(0, 2), torch.ones(3, 2)).shape == (0, 3)
    with pytest.raises(ValueError, match="cannot multiply"):
        ordered_matmul(torch.ones(3, 2), torch.ones(3, 2))
    with pytest.raises(ValueError, match=r"expected \(m, d\) and \(r, d\)"):
        ordered_sq_distances(torch.ones(3, 2), torch.ones(3, 3))
