"""Time integration of class probabilities (Brinkrolf 2023, eq. 4.26) against hand-computed
values and a naive per-sample loop."""

import math

import numpy as np
import pytest
import torch

from dp_proto.exceptions import DataValidationError
from dp_proto.lvq import integrate_probabilities, integration_window


def _random_proba(n, c, seed):
    return np.random.default_rng(seed).dirichlet(np.full(c, 0.5), size=n)


def _naive(proba, window, groups=None, causal=False, eps=1e-12):
    """Eq. 4.26 literally: for every sample, the product over the window's samples of its own
    sequence (truncated at the ends), normalised over the classes."""
    proba = np.asarray(proba, dtype=np.float64)
    n = len(proba)
    groups = np.zeros(n) if groups is None else np.asarray(groups)
    first, last = (-window, 0) if causal else (-math.ceil(window / 2), window // 2)
    out = np.empty_like(proba)
    for g in np.unique(groups):
        rows = np.flatnonzero(groups == g)  # this sequence, in time order
        for pos, row in enumerate(rows):
            prod = np.ones(proba.shape[1])
            for w in range(first, last + 1):
                if 0 <= pos + w < len(rows):
                    prod *= np.clip(proba[rows[pos + w]], eps, 1.0)
            out[row] = prod / prod.sum()
    return out


def test_window_offsets_follow_eq_4_26():
    # W = {-ceil(t/2), ..., floor(t/2)}: t + 1 samples, odd t leans to the past
    assert [integration_window(t) for t in range(5)] == [(0, 0), (-1, 0), (-1, 1), (-2, 1), (-2, 2)]
    assert integration_window(3, causal=True) == (-3, 0)


def test_window_zero_is_the_identity():
    p = _random_proba(17, 4, 0)
    np.testing.assert_array_equal(integrate_probabilities(p, 0), p)
    np.testing.assert_array_equal(integrate_probabilities(p, 0, causal=True, groups=np.arange(17) % 3), p)


def test_hand_computed_three_samples():
    p = np.array([[0.9, 0.1], [0.4, 0.6], [0.3, 0.7]])
    # t = 2, W = {-1, 0, 1}, truncated at both ends:
    #   row 0: (0.9*0.4, 0.1*0.6) = (0.36, 0.06)           -> (6/7, 1/7)
    #   row 1: (0.9*0.4*0.3, 0.1*0.6*0.7) = (0.108, 0.042) -> (0.72, 0.28)
    #   row 2: (0.4*0.3, 0.6*0.7) = (0.12, 0.42)           -> (2/9, 7/9)
    expected = np.array([[6 / 7, 1 / 7], [0.72, 0.28], [2 / 9, 7 / 9]])
    np.testing.assert_allclose(integrate_probabilities(p, 2), expected, rtol=1e-12)
    # t = 1, W = {-1, 0}: the previous sample and this one
    expected_t1 = np.array([[0.9, 0.1], [6 / 7, 1 / 7], [2 / 9, 7 / 9]])
    np.testing.assert_allclose(integrate_probabilities(p, 1), expected_t1, rtol=1e-12)
    # causal t = 2, W = {-2, -1, 0}
    expected_causal = np.array([[0.9, 0.1], [6 / 7, 1 / 7], [0.72, 0.28]])
    np.testing.assert_allclose(integrate_probabilities(p, 2, causal=True), expected_causal, rtol=1e-12)


def test_consistent_evidence_is_reinforced_and_ranges_in_simplex():
    p = np.tile([0.6, 0.3, 0.1], (9, 1))
    out = integrate_probabilities(p, 4)
    assert (out[:, 0] > 0.6).all()
    np.testing.assert_allclose(out.sum(1), 1.0)
    assert (out.max(1) >= 1 / 3).all()


def test_group_boundaries_are_respected():
    a = _random_proba(7, 3, 1)
    b = _random_proba(5, 3, 2)
    joined = integrate_probabilities(np.vstack([a, b]), 4, groups=[0] * 7 + [1] * 5)
    np.testing.assert_allclose(joined[:7], integrate_probabilities(a, 4), rtol=1e-12)
    np.testing.assert_allclose(joined[7:], integrate_probabilities(b, 4), rtol=1e-12)
    # interleaved rows: each group's rows, in the order they appear, are its sequence
    rows = np.random.default_rng(3).permutation(12)
    mixed = np.empty((12, 3))
    ids = np.empty(12, dtype=object)
    order_a, order_b = np.sort(rows[:7]), np.sort(rows[7:])
    mixed[order_a], mixed[order_b] = a, b
    ids[order_a], ids[order_b] = "subject-a", "subject-b"
    out = integrate_probabilities(mixed, 4, groups=ids.astype(str))
    np.testing.assert_allclose(out[order_a], joined[:7], rtol=1e-12)
    np.testing.assert_allclose(out[order_b], joined[7:], rtol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [1, 2, 3, 4, 7, 10])
def test_matches_the_naive_loop_on_random_data(window, causal):
    rng = np.random.default_rng(window + 100 * causal)
    n, c = 200, 5
    p = _random_proba(n, c, window)
    p[rng.random(n) < 0.05] = np.eye(c)[0]  # exact zeros: clipped at eps
    groups = np.sort(rng.integers(0, 6, n))
    groups[:20] = 0  # every group at least window + 1 long
    groups = np.maximum.accumulate(groups)
    lengths = np.bincount(groups)
    assert lengths[lengths > 0].min() > window
    expected = _naive(p, window, groups, causal)
    np.testing.assert_allclose(integrate_probabilities(p, window, groups=groups, causal=causal), expected, rtol=1e-9)
    np.testing.assert_allclose(
        integrate_probabilities(p, window, causal=causal), _naive(p, window, causal=causal), rtol=1e-9
    )


def test_long_confident_windows_neither_underflow_nor_overflow():
    p = np.tile([1e-300, 1.0], (60, 1))
    p[:, 1] = 1.0 - p[:, 0]
    out = integrate_probabilities(p, 50, eps=1e-12)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out[:, 1], 1.0)
    # a class ruled out by one sample (p = 0) can still win its window: with eps = 1e-3,
    # 1e-3 * 0.99**4 against 1 * 0.01**4 (without clipping the 0 would veto class 0)
    q = np.array([[0.0, 1.0], [0.99, 0.01], [0.99, 0.01], [0.99, 0.01], [0.99, 0.01]])
    assert integrate_probabilities(q, 4, eps=1e-3)[2].argmax() == 0
    assert integrate_probabilities(q, 4)[2].argmax() == 1  # eps = 1e-12: 0.99**4 / 0.01**4 < 1e12


def test_eps_is_the_clipping_floor():
    q = np.array([[0.0, 1.0], [1.0, 0.0]])
    out = integrate_probabilities(q, 1, eps=1e-3)
    np.testing.assert_allclose(out[1], [0.5, 0.5])  # (1e-3 * 1, 1 * 1e-3)


def test_float32_and_torch_input():
    p = _random_proba(30, 3, 4).astype(np.float32)
    out = integrate_probabilities(p, 2)
    assert out.dtype == np.float32
    t = torch.as_tensor(p)
    out_t = integrate_probabilities(t, 2)
    assert isinstance(out_t, torch.Tensor) and out_t.dtype == torch.float32
    np.testing.assert_allclose(out_t.numpy(), out, rtol=1e-6)
    assert integrate_probabilities(p.astype(np.float64), 2).dtype == np.float64


@pytest.mark.parametrize("window", [-1, 1.5, "2", True, None])
def test_bad_window(window):
    with pytest.raises(ValueError, match="window must be an int >= 0"):
        integrate_probabilities(_random_proba(5, 2, 0), window)


def test_window_longer_than_the_sequence_names_its_length():
    p = _random_proba(5, 2, 0)
    with pytest.raises(DataValidationError, match=r"window=5 spans 6 samples but the sequence has only 5 sample"):
        integrate_probabilities(p, 5)
    integrate_probabilities(p, 4)  # 5 samples: allowed
    with pytest.raises(DataValidationError, match=r"group 'b' has only 2 sample\(s\)"):
        integrate_probabilities(p, 2, groups=["a", "a", "a", "b", "b"])


@pytest.mark.parametrize(
    ("proba", "match"),
    [
        (np.array([0.5, 0.5]), "must be 2-d"),
        (np.zeros((0, 3)), "at least one sample"),
        (np.array([[0.5, np.nan]]), "NaN or inf in row"),
        (np.array([[1.2, -0.2], [0.5, 0.5]]), r"in \[0, 1\]; row\(s\) \[0\]"),
        (np.array([[0.5, 0.5], [0.5, 0.4]]), r"sum to 1; row\(s\) \[1\] do not \(row 1 sums to 0.9\)"),
        (np.array([["a", "b"]]), "must hold numbers"),
    ],
)
def test_bad_probabilities(proba, match):
    with pytest.raises(DataValidationError, match=match):
        integrate_probabilities(proba, 0)


def test_bad_groups_eps_and_causal():
    p = _random_proba(6, 3, 0)
    with pytest.raises(DataValidationError, match=r"groups must have shape \(6,\)"):
        integrate_probabilities(p, 1, groups=[0, 0, 1])
    with pytest.raises(DataValidationError, match="groups contains NaN"):
        integrate_probabilities(p, 1, groups=[0, 0, 0, np.nan, 1, 1])
    for eps in (0.0, 1.0, -1e-3, "1e-12"):
        with pytest.raises(ValueError, match=r"eps must be a float in \(0, 1\)"):
            integrate_probabilities(p, 1, eps=eps)
    with pytest.raises(ValueError, match="causal must be a bool"):
        integrate_probabilities(p, 1, causal="yes")
