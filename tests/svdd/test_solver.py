"""Capped-simplex projection and the SVDD dual solver (eq. 4.2) against independent references.

References: a brute-force projection (all 2n breakpoints of the threshold function, numpy)
and scipy's general-purpose SLSQP on the dense QP (small n only).

Speed sanity check (not a timed test). Measured on the 2-core development machine (quiet),
n = 2000, F = 500, RFF (gamma = 0.5) of five Gaussian clusters in 4-d, C/n = 0.05, same
start: ``solve_svdd_dual`` takes 0.15 s (one or two threads) to a certified Frank-Wolfe gap
<= 1e-6 (here it ends exactly, through its active-set finish); scipy's SLSQP is within 1e-4
of the optimal objective after 186 s and within 1e-6 after 362 s (about 1200x and 2400x
slower); trust-constr (exact dense Hessian) had no feasible iterate within 1e-4 after 500 s.
The real shuttle set (58000 x 9, z-scored), F = 500, C/n = 0.01: 1.2 s (gamma = 0.1) and
2.2 s (gamma = 1) on two threads, 1.0 s and 1.9 s on one.
"""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from dp_proto.svdd import (
    RandomFourierFeatures,
    frank_wolfe_gap,
    project_capped_simplex,
    solve_svdd_dual,
)

# --------------------------------------------------------------------------------------
# references
# --------------------------------------------------------------------------------------


def brute_force_projection(v: np.ndarray, cap: float) -> np.ndarray:
    """Projection by enumerating the breakpoints of h(t) = sum clip(v - t, 0, cap)."""
    n = v.size
    if n * cap <= 1 + 1e-12:
        return np.full(n, 1.0 / n)
    bps = np.sort(np.concatenate([v, v - cap]))
    h = np.array([np.clip(v - t, 0, cap).sum() for t in bps])
    k = min(int(np.nonzero(h >= 1)[0].max()), 2 * n - 2)
    t0, t1, h0, h1 = bps[k], bps[k + 1], h[k], h[k + 1]
    tau = t0 + (h0 - 1) * (t1 - t0) / (h0 - h1) if h0 > h1 else t0
    return np.clip(v - tau, 0, cap)


def slsqp_svdd(phi: torch.Tensor, cap: float) -> tuple[np.ndarray, float]:
    """Dense reference: max W(beta) of eq. 4.2 by scipy SLSQP; returns (beta, W)."""
    p = phi.double().numpy()
    n = p.shape[0]
    q = (p**2).sum(1)
    gram = p @ p.T

    def f(b):
        return b @ gram @ b - q @ b

    def jac(b):
        return 2 * gram @ b - q

    res = minimize(
        f,
        np.full(n, 1.0 / n),
        jac=jac,
        method="SLSQP",
        bounds=[(0.0, cap)] * n,
        constraints=[{"type": "eq", "fun": lambda b: b.sum() - 1.0, "jac": lambda b: np.ones(n)}],
        options={"ftol": 1e-15, "maxiter": 1000},
    )
    return res.x, -float(res.fun)


def clustered(n, d=2, seed=0, spread=3.0):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(4, d, generator=g, dtype=torch.float64) * spread
    labels = torch.randint(0, 4, (n,), generator=g)
    return centres[labels] + torch.randn(n, d, generator=g, dtype=torch.float64)


def rff_features(n, F=100, gamma=0.5, d=2, seed=0):
    x = clustered(n, d, seed)
    rff = RandomFourierFeatures(d, F, gamma, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    return rff(x)


def kkt_violation(phi: torch.Tensor, beta: torch.Tensor, cap: float) -> float:
    """Largest violation of the capped-simplex KKT conditions, for the best threshold tau.

    Optimality: a tau with grad_i >= tau where beta_i = 0, grad_i <= tau where beta_i = cap,
    grad_i = tau in between. For a given beta the smallest violation over tau is half the
    spread between the largest gradient on {beta > 0} and the smallest on {beta < cap}.
    """
    q = phi.square().sum(1)
    g = 2 * phi @ (phi.T @ beta) - q
    up = g[beta > 0].max()  # every row carrying mass must have grad <= tau
    down = g[beta < cap].min() if bool((beta < cap).any()) else up  # rows with room: grad >= tau
    return max(float(up - down), 0.0)


# --------------------------------------------------------------------------------------
# projection
# --------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 40),
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from([1e-3, 1.0, 1e3]),
    cap_frac=st.floats(0.0, 1.0),
    ties=st.booleans(),
)
def test_projection_matches_brute_force(n, seed, scale, cap_frac, ties):
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(n, generator=g, dtype=torch.float64) * scale
    if ties:
        v = torch.round(v / scale * 2) / 2 * scale
    cap = 1.0 / n + cap_frac * (1.5 - 1.0 / n)
    beta = project_capped_simplex(v, cap)
    assert beta.min() >= 0 and beta.max() <= cap
    assert abs(float(beta.sum()) - 1) < 1e-12
    ref = brute_force_projection(v.numpy(), cap)
    np.testing.assert_allclose(beta.numpy(), ref, rtol=0, atol=1e-12 * max(scale, 1.0))


def test_projection_satisfies_kkt_and_equals_slsqp():
    g = torch.Generator().manual_seed(3)
    v = torch.randn(30, generator=g, dtype=torch.float64)
    cap = 0.08
    beta = project_capped_simplex(v, cap)
    free = (beta > 0) & (beta < cap)
    tau = float((v - beta)[free].mean())  # beta_i = v_i - tau on the free entries
    torch.testing.assert_close((v - tau).clamp(0, cap), beta, rtol=0, atol=1e-14)
    res = minimize(
        lambda b: 0.5 * np.sum((b - v.numpy()) ** 2),
        np.full(30, 1 / 30),
        jac=lambda b: b - v.numpy(),
        method="SLSQP",
        bounds=[(0, cap)] * 30,
        constraints=[{"type": "eq", "fun": lambda b: b.sum() - 1}],
        options={"ftol": 1e-15},
    )
    np.testing.assert_allclose(beta.numpy(), res.x, atol=1e-7)


def test_projection_idempotent_translation_invariant_and_batched():
    g = torch.Generator().manual_seed(4)
    v = torch.randn(3, 4, 25, generator=g, dtype=torch.float64) * 2
    out = project_capped_simplex(v, 0.1)
    assert out.shape == v.shape
    for i in range(3):
        for j in range(4):
            torch.testing.assert_close(out[i, j], project_capped_simplex(v[i, j], 0.1), rtol=0, atol=1e-15)
    torch.testing.assert_close(project_capped_simplex(out, 0.1), out, rtol=0, atol=1e-15)
    torch.testing.assert_close(project_capped_simplex(v + 7.5, 0.1), out, rtol=0, atol=1e-13)


def test_projection_special_caps():
    v = torch.randn(10, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    torch.testing.assert_close(project_capped_simplex(v, 0.1), torch.full((10,), 0.1, dtype=torch.float64))
    # cap >= 1: the plain simplex projection (sort-based formula of Held et al.)
    u, _ = torch.sort(v, descending=True)
    css = torch.cumsum(u, 0) - 1
    rho = int((u - css / torch.arange(1, 11) > 0).nonzero().max())
    simplex = (v - css[rho] / (rho + 1)).clamp_min(0)
    torch.testing.assert_close(project_capped_simplex(v, 1.0), simplex, rtol=0, atol=1e-15)
    torch.testing.assert_close(project_capped_simplex(v, 5.0), simplex, rtol=0, atol=1e-15)
    # float32 in, float32 out, still feasible
    out32 = project_capped_simplex(v.float(), 0.25)
    assert out32.dtype == torch.float32 and abs(float(out32.sum()) - 1) < 1e-6


def test_projection_bad_input():
    v = torch.zeros(10)
    with pytest.raises(ValueError, match=r"cap >= 1/n"):
        project_capped_simplex(v, 0.05)
    for cap in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="cap"):
            project_capped_simplex(v, cap)
    with pytest.raises(ValueError, match="floating"):
        project_capped_simplex(torch.zeros(4, dtype=torch.int64), 0.5)
    with pytest.raises(ValueError, match="n >= 1"):
        project_capped_simplex(torch.zeros(0), 0.5)
    with pytest.raises(ValueError, match="NaN"):
        project_capped_simplex(torch.tensor([0.0, float("nan")]), 0.5)


# --------------------------------------------------------------------------------------
# solver
# --------------------------------------------------------------------------------------

SMALL_CASES = [  # (n, F, gamma, C/n); SLSQP needs up to a few seconds each
    (60, 100, 0.5, 0.05),
    (90, 100, 0.5, 0.02),
    (100, 100, 1.0, 0.1),
    (100, 200, 0.2, 0.1),
    (80, 120, 0.1, 0.2),
    (100, 60, 2.0, 0.3),
]


@pytest.mark.parametrize("n, F, gamma, c", SMALL_CASES)
def test_matches_slsqp_and_satisfies_kkt(n, F, gamma, c):
    phi = rff_features(n, F, gamma, seed=n)
    sol = solve_svdd_dual(phi, c * n)
    assert sol.converged and sol.gap <= 1e-6
    beta = sol.beta
    assert beta.shape == (n,) and beta.dtype == torch.float64
    assert beta.min() >= 0 and beta.max() <= c + 1e-15 and abs(float(beta.sum()) - 1) < 1e-12
    _, w_ref = slsqp_svdd(phi, c)
    assert abs(float(sol.objective) - w_ref) < 1e-6
    # KKT to a tolerance: the gradient spread between mass-carrying rows and rows with room
    assert kkt_violation(phi, beta, c) < 1e-3
    tight = solve_svdd_dual(phi, c * n, tol=1e-12)
    assert kkt_violation(phi, tight.beta, c) < 1e-6
    assert float(tight.objective) >= w_ref - 1e-9


def test_returned_quantities_are_consistent():
    n, c = 150, 0.03
    phi = rff_features(n, 80, 1.0, seed=7)
    sol = solve_svdd_dual(phi, c * n, tol=1e-10)
    torch.testing.assert_close(sol.centre, phi.T @ sol.beta)
    torch.testing.assert_close(sol.objective, 1 - sol.centre @ sol.centre)  # ||phi_i|| = 1
    q = phi.square().sum(1)
    g = 2 * phi @ sol.centre - q
    assert sol.gap == pytest.approx(float(frank_wolfe_gap(sol.beta, g, c)), abs=1e-14)
    dist2 = (phi - sol.centre).square().sum(1)
    free = (sol.beta > 0) & (sol.beta < c)
    assert free.any()
    torch.testing.assert_close(sol.radius2, dist2[free].mean())
    # the sphere separates: rows without mass inside, rows at the cap outside (seed, 4.1)
    assert bool((dist2[sol.beta == 0] <= sol.radius2 + 1e-6).all())
    assert bool((dist2[sol.beta >= c] >= sol.radius2 - 1e-6).all())
    assert sol.iterations > 0


def test_box_of_one_is_the_minimum_enclosing_ball():
    n = 100
    phi = rff_features(n, 60, 0.3, seed=8)
    sol = solve_svdd_dual(phi, n, tol=1e-11)  # C/n = 1: no slack is worth paying for
    dist2 = (phi - sol.centre).square().sum(1)
    # every point inside, the support on the boundary, radius = the largest distance
    assert float(dist2.max()) <= float(sol.radius2) + 1e-7
    torch.testing.assert_close(sol.radius2, dist2.max(), atol=1e-7, rtol=0)
    torch.testing.assert_close(
        dist2[sol.beta > 1e-9], dist2.max().expand(int((sol.beta > 1e-9).sum())), atol=1e-6, rtol=0
    )
    assert int((sol.beta > 0).sum()) < n // 2
    _, w_ref = slsqp_svdd(phi, 1.0)
    assert abs(float(sol.objective) - w_ref) < 1e-6


def test_box_of_one_over_n_is_uniform():
    n = 50
    phi = rff_features(n, 40, 0.5, seed=9)
    sol = solve_svdd_dual(phi, 1.0)
    torch.testing.assert_close(sol.beta, torch.full((n,), 1 / n, dtype=torch.float64))
    torch.testing.assert_close(sol.centre, phi.mean(0))
    assert sol.converged and sol.gap == pytest.approx(0.0, abs=1e-12)
    # without free support vectors the radius is the KKT interval's finite end
    dist2 = (phi - sol.centre).square().sum(1)
    torch.testing.assert_close(sol.radius2, dist2.min())


def test_working_sets_match_full_solver():
    n, c = 4000, 0.01
    x = clustered(n, 4, seed=10)
    phi = RandomFourierFeatures(4, 200, 0.2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)(x)
    ws = solve_svdd_dual(phi, c * n, tol=1e-8)
    full = solve_svdd_dual(phi, c * n, tol=1e-8, method="fista_full")
    assert ws.converged and full.converged and ws.gap <= 1e-8
    assert abs(float(ws.objective - full.objective)) < 1e-8
    torch.testing.assert_close(ws.centre, full.centre, atol=2e-4, rtol=0)  # ||a - a*|| <= sqrt(gap)


def test_general_features_and_duplicates():
    # non-unit rows (the kernel diagonal enters the objective) and duplicated rows
    g = torch.Generator().manual_seed(11)
    phi = torch.randn(80, 30, generator=g, dtype=torch.float64)
    phi = torch.cat([phi, phi[:20]])  # 20 exact duplicates
    n, c = 100, 0.05
    sol = solve_svdd_dual(phi, c * n, tol=1e-9)
    assert sol.converged
    _, w_ref = slsqp_svdd(phi, c)
    assert abs(float(sol.objective) - w_ref) < 1e-6
    q = phi.square().sum(1)
    torch.testing.assert_close(sol.objective, q @ sol.beta - sol.centre @ sol.centre)


def test_dtypes_and_iteration_cap():
    phi = rff_features(120, 50, 1.0, seed=12)
    sol32 = solve_svdd_dual(phi.float(), 0.05 * 120)
    sol64 = solve_svdd_dual(phi, 0.05 * 120)
    assert sol32.beta.dtype == sol32.centre.dtype == sol32.radius2.dtype == torch.float32
    assert abs(float(sol32.objective) - float(sol64.objective)) < 1e-5
    capped = solve_svdd_dual(phi, 0.05 * 120, tol=1e-14, max_iter=3)
    assert not capped.converged and capped.iterations <= 3 + 200 and capped.gap > 1e-14
    assert abs(float(capped.beta.sum()) - 1) < 1e-12
    # no cap (what private fits use): runs until the gap reaches tol
    uncapped = solve_svdd_dual(phi, 0.05 * 120, tol=1e-13, max_iter=None)
    assert uncapped.converged and uncapped.gap <= 1e-13
    for method in ("fista", "fista_full"):
        assert solve_svdd_dual(phi, 0.05 * 120, tol=1e-13, max_iter=None, method=method).converged


def test_near_sensitivity_bound_of_corollary_4_2():
    # Lemma 4.1 / Corollary 4.2: replacing one point moves the centre by at most 2 C/n
    # (kappa = 1) in the feature norm; the solver's error adds at most sqrt(gap) per run.
    n, c, tol = 150, 0.05, 1e-12
    x = clustered(n, 2, seed=13)
    x2 = x.clone()
    x2[0] = torch.tensor([8.0, -8.0], dtype=torch.float64)  # an outlier replaces a point
    rff = RandomFourierFeatures(2, 200, 0.5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    a, b = solve_svdd_dual(rff(x), c * n, tol=tol), solve_svdd_dual(rff(x2), c * n, tol=tol)
    assert float((a.centre - b.centre).norm()) <= 2 * c + 2 * math.sqrt(tol)
    assert float((a.centre - b.centre).abs().sum()) <= 2 * c * math.sqrt(200) + 2 * math.sqrt(200 * tol)


@pytest.mark.parametrize(
    "C, match",
    [(0.5, r"C/n of eq. 4.2 must lie in \[1/n, 1\]"), (50.5, r"\[1, 50\]"), (float("nan"), "C/n"), ("x", "real")],
)
def test_bad_box(C, match):
    with pytest.raises(ValueError, match=match):
        solve_svdd_dual(torch.ones(50, 4), C)


def test_bad_inputs():
    phi = rff_features(20, 10)
    with pytest.raises(ValueError, match=r"shape \(n, F\)"):
        solve_svdd_dual(phi[0], 1.0)
    with pytest.raises(ValueError, match="floating"):
        solve_svdd_dual(torch.ones(5, 2, dtype=torch.int64), 2.0)
    bad = phi.clone()
    bad[3, 1] = float("inf")
    with pytest.raises(ValueError, match="NaN or inf"):
        solve_svdd_dual(bad, 2.0)
    with pytest.raises(ValueError, match="tol"):
        solve_svdd_dual(phi, 2.0, tol=0.0)
    with pytest.raises(ValueError, match="max_iter"):
        solve_svdd_dual(phi, 2.0, max_iter=-1)
    with pytest.raises(ValueError, match="method"):
        solve_svdd_dual(phi, 2.0, method="smo")
    # C = c * n with rounding is accepted
    assert solve_svdd_dual(phi, 0.1 * 20 * (1 - 1e-12)).converged


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu():
    phi = rff_features(3000, 100, 0.3, seed=14)
    cpu = solve_svdd_dual(phi, 0.02 * 3000, tol=1e-9)
    gpu = solve_svdd_dual(phi.cuda(), 0.02 * 3000, tol=1e-9)
    assert gpu.beta.device.type == "cuda" and gpu.converged
    assert abs(float(gpu.objective.cpu() - cpu.objective)) < 1e-8
    proj = project_capped_simplex(phi[:, :50].T.cuda(), 0.05)
    torch.testing.assert_close(proj.cpu(), project_capped_simplex(phi[:, :50].T, 0.05))
