"""Pairwise coupling (dp_proto.lvq.coupling): hand-solved cases, recovery of a known p,
simplex outputs, batch independence and bad input."""

import numpy as np
import pytest
import torch

from dp_proto.lvq.coupling import (
    COUPLING_METHODS,
    check_pairwise,
    consistent_pairwise,
    couple,
    ht,
    pairs_to_matrix,
    pkpd,
    voting,
    wlw1,
    wlw2,
)

REFINED = ["ht", "pkpd", "wlw1", "wlw2"]
f64 = torch.float64


def _r3(r01, r02, r12, dtype=f64):
    """3-class pairwise matrix (1, 3, 3) from the three upper entries."""
    return pairs_to_matrix(torch.tensor([[r01, r02, r12]], dtype=dtype), 3)


def _random_pairwise(B, c, seed=0, low=0.02, high=0.98):
    g = torch.Generator().manual_seed(seed)
    K = c * (c - 1) // 2
    r = low + (high - low) * torch.rand(B, K, generator=g, dtype=f64)
    return pairs_to_matrix(r, c)


# ------------------------------------------------------------------ consistent r: recover p
@pytest.mark.parametrize("method", REFINED)
@pytest.mark.parametrize(
    "p",
    [[0.5, 0.3, 0.2], [0.1, 0.1, 0.8], [1 / 3, 1 / 3, 1 / 3], [0.7, 0.3], [0.05, 0.15, 0.2, 0.25, 0.35]],
)
def test_consistent_pairwise_recovers_p(method, p):
    p = torch.tensor([p], dtype=f64)
    R = consistent_pairwise(p)  # r_lm = p_l / (p_l + p_m)
    torch.testing.assert_close(couple(R, method), p, atol=1e-8, rtol=0)


@pytest.mark.parametrize("method", REFINED)
def test_consistent_pairwise_recovers_a_random_batch(method):
    g = torch.Generator().manual_seed(1)
    p = torch.rand(200, 6, generator=g, dtype=f64) + 0.01
    p = p / p.sum(1, keepdim=True)
    torch.testing.assert_close(couple(consistent_pairwise(p), method), p, atol=1e-8, rtol=0)


# ------------------------------------------------------------------ hand-solved 3-class case
# r_01 = 0.6, r_02 = 0.7, r_12 = 0.4 (so r_10 = 0.4, r_20 = 0.3, r_21 = 0.6): not consistent
# with any p, so the methods differ.
def test_pkpd_hand_solved():
    # p_0 = 1/(1/0.6 + 1/0.7 - 1) = 21/44, p_1 = 1/(1/0.4 + 1/0.4 - 1) = 1/4 = 11/44,
    # p_2 = 1/(1/0.3 + 1/0.6 - 1) = 1/4 = 11/44; sum 43/44, normalised:
    expected = torch.tensor([[21 / 43, 11 / 43, 11 / 43]], dtype=f64)
    torch.testing.assert_close(pkpd(_r3(0.6, 0.7, 0.4)), expected, atol=1e-12, rtol=0)


def test_voting_hand_solved():
    # 0 beats 1 (0.6) and 2 (0.7); 2 beats 1 (r_12 = 0.4): wins (2, 0, 1) of 3 pairs
    expected = torch.tensor([[2 / 3, 0.0, 1 / 3]], dtype=f64)
    torch.testing.assert_close(voting(_r3(0.6, 0.7, 0.4)), expected, atol=1e-12, rtol=0)


def test_voting_splits_ties_and_sums_to_one():
    # r_01 = 0.5 is a tie: half a win each; 0 beats 2, 1 beats 2: wins (1.5, 1.5, 0) / 3
    expected = torch.tensor([[0.5, 0.5, 0.0]], dtype=f64)
    torch.testing.assert_close(voting(_r3(0.5, 0.9, 0.8)), expected, atol=1e-12, rtol=0)


def test_wlw1_hand_solved():
    # Q p = 0 with Q_ll = sum_m r_ml, Q_lm = -r_lm:
    # 0.7 p0 = 0.6 p1 + 0.7 p2 and 1.2 p1 = 0.4 p0 + 0.4 p2 give p2 = 5/9 p0, p1 = 14/27 p0,
    # so p = (27, 14, 15) / 56
    expected = torch.tensor([[27 / 56, 14 / 56, 15 / 56]], dtype=f64)
    torch.testing.assert_close(wlw1(_r3(0.6, 0.7, 0.4)), expected, atol=1e-12, rtol=0)


def test_wlw2_hand_solved():
    # Q = [[1/4, -6/25, -21/100], [-6/25, 18/25, -6/25], [-21/100, -6/25, 13/20]]
    # (Q_ll = sum_m r_ml^2, Q_lm = -r_ml r_lm); Q p = -b 1 and sum p = 1 give
    # p = (129, 68, 69) / 266 (Q (129, 68, 69)^T = 1.44 (1, 1, 1)^T)
    expected = torch.tensor([[129 / 266, 68 / 266, 69 / 266]], dtype=f64)
    torch.testing.assert_close(wlw2(_r3(0.6, 0.7, 0.4)), expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("weights", [None, [[0, 30, 50], [30, 0, 40], [50, 40, 0]]])
def test_ht_satisfies_its_fixed_point_equations(weights):
    R = torch.cat([_r3(0.6, 0.7, 0.4), _random_pairwise(20, 3, seed=3)])
    p, n_iter = ht(R, weights, tol=1e-12, return_n_iter=True)
    assert bool((n_iter < 1000).all())
    n = torch.ones(3, 3, dtype=f64) if weights is None else torch.tensor(weights, dtype=f64)
    n = n * (1 - torch.eye(3, dtype=f64))
    rho = p[:, :, None] / (p[:, :, None] + p[:, None, :])
    # eq. 4.20: sum_{m != l} n_lm rho_lm = sum_{m != l} n_lm r_lm for every l
    torch.testing.assert_close((n * rho).sum(2), (n * R).sum(2), atol=1e-8, rtol=0)
    torch.testing.assert_close(p.sum(1), torch.ones(21, dtype=f64))


def test_ht_weights_matter_and_unit_weights_equal_none():
    R = _r3(0.6, 0.7, 0.4)
    same = ht(R, torch.full((3, 3), 7.0, dtype=f64))
    torch.testing.assert_close(same, ht(R), atol=1e-9, rtol=0)
    skewed = ht(R, torch.tensor([[0, 100, 1], [100, 0, 1], [1, 1, 0]], dtype=f64))
    assert (skewed - same).abs().max() > 1e-3


# ------------------------------------------------------------------ general properties
@pytest.mark.parametrize("method", COUPLING_METHODS)
@pytest.mark.parametrize("c", [2, 3, 7])
def test_outputs_lie_on_the_simplex(method, c):
    p = couple(_random_pairwise(64, c, seed=c), method)
    assert p.shape == (64, c) and p.dtype == f64
    assert bool((p >= 0).all())
    torch.testing.assert_close(p.sum(1), torch.ones(64, dtype=f64), atol=1e-12, rtol=0)


@pytest.mark.parametrize("method", ["ht", "pkpd", "wlw1", "wlw2"])
def test_two_classes_give_r_itself(method):
    R = pairs_to_matrix(torch.tensor([[0.8], [0.25]], dtype=f64), 2)
    torch.testing.assert_close(couple(R, method), torch.tensor([[0.8, 0.2], [0.25, 0.75]], dtype=f64))


@pytest.mark.parametrize("method", COUPLING_METHODS)
def test_each_sample_is_independent_of_the_batch(method):
    R = _random_pairwise(50, 5, seed=7)
    full = couple(R, method)
    torch.testing.assert_close(couple(R[10:13], method), full[10:13], atol=1e-12, rtol=0)


@pytest.mark.parametrize("method", REFINED)
def test_methods_agree_on_nearly_consistent_input(method):
    # Brinkrolf (2023), Table 4.2: the four refined methods are practically identical
    g = torch.Generator().manual_seed(4)
    p = torch.rand(100, 5, generator=g, dtype=f64) + 0.05
    p = p / p.sum(1, keepdim=True)
    R = consistent_pairwise(p)
    noise = 0.01 * (torch.rand(100, 10, generator=g, dtype=f64) - 0.5)
    upper = torch.triu_indices(5, 5, 1)
    Rn = pairs_to_matrix(R[:, upper[0], upper[1]] + noise, 5)
    assert (couple(Rn, method) - p).abs().max() < 0.05


def test_pkpd_clips_zero_probabilities():
    R = _r3(1.0, 1.0, 0.0)  # class 0 beats everything, class 2 beats 1 for sure
    p = pkpd(R)
    assert bool(torch.isfinite(p).all())
    assert p[0, 0] > 0.999
    with pytest.raises(ValueError, match="eps"):
        pkpd(R, eps=0.5)


@pytest.mark.parametrize("method", ["wlw1", "wlw2"])
def test_wlw_handles_hard_zero_one_input(method):
    # eps=0 keeps r in {0, 1}: the systems may be singular; the result still lies on the simplex
    p = couple(_r3(1.0, 1.0, 0.0), method, eps=0.0)
    assert bool(torch.isfinite(p).all()) and bool((p >= 0).all())
    torch.testing.assert_close(p.sum(1), torch.ones(1, dtype=f64))
    assert int(p.argmax()) == 0


def test_float32_and_numpy_input():
    R = _r3(0.6, 0.7, 0.4, dtype=torch.float32)
    p = pkpd(R)
    assert p.dtype == torch.float32
    torch.testing.assert_close(p, torch.tensor([[21 / 43, 11 / 43, 11 / 43]]), atol=1e-6, rtol=0)
    p_np = wlw1(_r3(0.6, 0.7, 0.4).numpy())
    torch.testing.assert_close(p_np, torch.tensor([[27 / 56, 14 / 56, 15 / 56]], dtype=f64))


def test_pairs_to_matrix_and_check_roundtrip():
    r = torch.tensor([[0.9, 0.8, 0.6]], dtype=f64)
    R = pairs_to_matrix(r, 3)
    assert R[0, 1, 0] == pytest.approx(0.1) and R[0, 2, 1] == pytest.approx(0.4)
    torch.testing.assert_close(check_pairwise(R), R)
    with pytest.raises(ValueError, match=r"\(B, 3\)"):
        pairs_to_matrix(torch.zeros(1, 2), 3)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("method", COUPLING_METHODS)
@pytest.mark.parametrize(
    "R, match",
    [
        (torch.full((3, 3), 0.5), r"\(B, c, c\)"),
        (torch.full((2, 3, 4), 0.5), r"\(B, c, c\)"),
        (torch.full((2, 1, 1), 0.5), "at least 2 classes"),
        (np.array([[[0.5, np.nan], [0.5, 0.5]]]), "NaN or inf"),
        (np.array([[[0.5, 1.2], [-0.2, 0.5]]]), r"\[0, 1\]"),
        (np.array([[[0.5, 0.7], [0.7, 0.5]]]), r"r_lm \+ r_ml = 1"),
    ],
)
def test_bad_pairwise_input_is_rejected(method, R, match):
    with pytest.raises(ValueError, match=match):
        couple(R, method)


def test_check_names_the_asymmetric_pair():
    R = _r3(0.6, 0.7, 0.4)
    R[0, 2, 1] = 0.5  # r_12 + r_21 = 0.9
    with pytest.raises(ValueError, match=r"sample 0: r_12 \+ r_21 = 0\.9"):
        check_pairwise(R)


def test_float32_rounding_passes_the_symmetry_check():
    r = torch.rand(10, 21, dtype=torch.float32)
    couple(pairs_to_matrix(r, 7), "pkpd")  # 1 - r in float32 is not exact


def test_bad_method_and_options():
    R = _r3(0.6, 0.7, 0.4)
    with pytest.raises(ValueError, match="unknown coupling method 'softmax'"):
        couple(R, "softmax")
    with pytest.raises(ValueError, match="max_iter"):
        ht(R, max_iter=0)
    with pytest.raises(ValueError, match="tol"):
        ht(R, tol=0)
    with pytest.raises(ValueError, match="symmetric"):
        ht(R, torch.tensor([[0, 1, 2], [3, 0, 1], [2, 1, 0]], dtype=f64))
    with pytest.raises(ValueError, match="positive"):
        ht(R, torch.tensor([[0, 0, 2], [0, 0, 1], [2, 1, 0]], dtype=f64))
    with pytest.raises(ValueError, match=r"\(c, c\) or \(B, c, c\)"):
        ht(R, torch.ones(4, 4, dtype=f64))


def test_singular_systems_fall_back_to_least_squares():
    from dp_proto.lvq.coupling import _solve

    A = torch.tensor([[[1.0, 1.0], [1.0, 1.0]], [[2.0, 0.0], [0.0, 4.0]]], dtype=f64)
    x = _solve(A, torch.tensor([[2.0, 2.0], [2.0, 4.0]], dtype=f64))
    torch.testing.assert_close(x, torch.tensor([[1.0, 1.0], [1.0, 1.0]], dtype=f64))
