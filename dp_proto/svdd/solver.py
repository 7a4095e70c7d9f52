"""The SVDD dual (Park 2022, eq. 4.2) on explicit features, solved in the primal feature space.

With a finite feature map ``phi`` (rows of ``Phi (n, F)``) the Wolfe dual of SVDD, eq. 4.2,

    max_beta  W(beta) = sum_i beta_i ||phi_i||^2 - ||Phi^T beta||^2
    s.t.      0 <= beta_i <= C/n,  sum_i beta_i = 1,

is a convex quadratic over the *capped simplex* ``S = {0 <= beta_i <= C/n, sum beta = 1}``.
Park (2022) writes the box as ``C/n`` (eq. 4.1 weighs the slacks by ``C/n``; its Table 7.1
lists the value of ``C/n`` directly, e.g. ``C/n = 0.01`` for shuttle means
``C = 0.01 n``), and the sensitivity of Corollary 4.2, ``||a_D - a_D'||_1 <= 2 C kappa
sqrt(F) / n``, uses that same ``C``; ``solve_svdd_dual`` takes this ``C``. Feasibility
needs ``C/n >= 1/n``; ``C/n >= 1`` makes the box inactive, so ``C/n`` must lie in
``[1/n, 1]`` (``C`` in ``[1, n]``).

For random Fourier features ``||phi_i|| = 1``, the linear term is the constant 1 on ``S``
and the problem is ``min_{beta in S} ||Phi^T beta||^2`` (the squared norm of the centre
``a = Phi^T beta``). The solver keeps the linear term ``q_i = ||phi_i||^2`` anyway, so it
is exact for any feature map; it minimises ``f(beta) = ||Phi^T beta||^2 - q^T beta = -W``.
It never forms the ``n x n`` kernel: the gradient ``2 Phi (Phi^T beta) - q`` costs two
matrix-vector products, ``O(n F)``.

Algorithm choice (details in ``solve_svdd_dual``): FISTA with restart identifies the
optimal face quickly but converges slowly on ill-conditioned problems (few support vectors,
flat objective); an exact active-set finish on the free rows removes that tail, and working
sets of the smallest-gradient rows make each iteration cost ``O(|working set| F)`` instead
of ``O(n F)``. How it compares with Frank-Wolfe variants: docs/svdd.md ("How it works").
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Literal, NamedTuple

import torch

__all__ = ["SVDDSolution", "frank_wolfe_gap", "project_capped_simplex", "solve_svdd_dual"]

_CAP_RTOL = 1e-9  # relative slack on cap >= 1/n and C/n <= 1 (rounding of C = c * n)
_F64_EPS = 2.0**-52
_FACE_AFTER = 5  # iterations with an unchanged active pattern before an active-set step
_WS_ITER_BUDGET = 400  # iterations a restricted problem may take before its set is doubled
_WS_SHRINK_RATE = 0.9  # working sets may shrink while the full gap falls by this factor per round
# Smallest gap tolerance a private fit accepts. The SVDD objective W lies in [0, 1] (unit
# feature rows), so float64 evaluates the gap to about 1e-14; a tolerance far above that
# floor is always reached by a solver that runs until it converges (see max_iter=None).
MIN_PRIVATE_TOL = 1e-10
DEFAULT_MAX_ITER = 50000  # iteration cap of solve_svdd_dual (and of non-private fits)


# --------------------------------------------------------------------------------------
# the capped simplex
# --------------------------------------------------------------------------------------


def _check_cap(cap: float, n: int, name: str = "cap") -> float:
    try:
        value = float(cap)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {cap!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {cap!r}")
    if value * n < 1.0 - _CAP_RTOL:
        raise ValueError(
            f"the capped simplex {{0 <= beta_i <= {name}, sum beta = 1}} in n={n} dimensions is "
            f"empty unless {name} >= 1/n = {1.0 / n:.6g}; got {name}={value:.6g}"
        )
    return max(value, 1.0 / n)


def project_capped_simplex(v: torch.Tensor, cap: float) -> torch.Tensor:
    """Exact Euclidean projection onto the capped simplex ``{0 <= beta_i <= cap, sum_i beta_i = 1}``.

    The projection is ``beta_i = clamp(v_i - tau, 0, cap)`` for the threshold ``tau`` with
    ``h(tau) = sum_i clamp(v_i - tau, 0, cap) = 1`` (the KKT conditions of the projection).
    ``h`` is piecewise linear and non-increasing with slope ``-#{i : 0 < v_i - tau < cap}``, so
    ``tau`` is found by Newton's method on ``h(tau) = 1`` -- each Newton step solves exactly for
    the current guess of the free, upper and lower sets, and is exact once the guess is right
    -- safeguarded by a bracket ``h(lo) >= 1 >= h(hi)`` and bisection (at least a halving
    every two steps), until ``|h(tau) - 1| <= 2 n eps``, i.e. to machine precision. Only
    elementwise operations and reductions over the last dimension: ``O(n)`` per step, a
    handful of steps in practice, no sort, no Python loop over entries.

    Parameters
    ----------
    v : Tensor ``(..., n)``
        Points to project, one per leading index (floating dtype; any device).
    cap : float
        Upper bound, ``cap >= 1/n`` (else the set is empty: ``ValueError``). ``cap = 1/n``
        gives the uniform vector; ``cap >= 1`` gives the projection onto the simplex.

    Returns
    -------
    Tensor ``(..., n)``, same dtype and device as ``v``.
    """
    if not torch.is_tensor(v) or not v.is_floating_point():
        raise ValueError(f"v must be a floating tensor, got {type(v).__name__} {getattr(v, 'dtype', '')}")
    if v.dim() == 0 or v.shape[-1] == 0:
        raise ValueError(f"v must have shape (..., n) with n >= 1, got {tuple(v.shape)}")
    if not bool(torch.isfinite(v).all()):
        raise ValueError("v contains NaN or inf entries")
    cap = _check_cap(cap, v.shape[-1])
    return _project(v, cap)[0]


def _project(
    v: torch.Tensor, cap: float, tau0: torch.Tensor | None = None, max_steps: int = 300
) -> tuple[torch.Tensor, torch.Tensor]:
    """Projection onto the capped simplex and its threshold ``tau (..., 1)`` (warm start ``tau0``)."""
    n = v.shape[-1]
    if cap * n <= 1.0 + 4.0 * _F64_EPS:  # the set is the single point 1/n
        return torch.full_like(v, 1.0 / n), (v.amax(-1, keepdim=True) - cap).clone()
    eps = torch.finfo(v.dtype).eps
    lo = v.amin(-1, keepdim=True) - cap  # h(lo) = n cap >= 1
    hi = v.amax(-1, keepdim=True)  # h(hi) = 0 < 1
    if tau0 is None:
        t = v.mean(-1, keepdim=True) - 1.0 / n  # exact if no bound is active
    else:
        t = tau0.to(v).reshape(lo.shape)
    t = torch.minimum(torch.maximum(t, lo), hi)
    force_bisect = torch.zeros_like(lo, dtype=torch.bool)
    r_tol = 2.0 * n * eps
    for _ in range(max_steps):
        w = v - t
        r = w.clamp(0.0, cap).sum(-1, keepdim=True) - 1.0
        nfree = ((w > 0) & (w < cap)).sum(-1, keepdim=True)
        done = r.abs() <= r_tol
        width = hi - lo
        lo = torch.where(r > 0, t, lo)
        hi = torch.where(r < 0, t, hi)
        newton = t + r / nfree.clamp_min(1).to(v.dtype)
        ok = (nfree > 0) & (newton > lo) & (newton < hi) & ~force_bisect
        t_next = torch.where(ok, newton, 0.5 * (lo + hi))
        force_bisect = ok & (hi - lo > 0.5 * width)
        if bool(done.all()) or bool((hi - lo <= eps * (lo.abs() + hi.abs())).all()):
            # final Newton step on the identified sets: exact up to rounding
            t = torch.where(nfree > 0, newton, t)
            break
        t = torch.where(done, t, t_next)
    return (v - t).clamp(0.0, cap), t


def _lmo_weights(kk: int, cap: float, like: torch.Tensor) -> torch.Tensor:
    """Weights of the LMO vertex on the ``kk`` smallest entries: ``min(cap, max(0, 1 - j cap))``."""
    j = torch.arange(kk, dtype=like.dtype, device=like.device)
    return (1.0 - j * cap).clamp(0.0, cap)


def _lmo_value(g: torch.Tensor, cap: float) -> torch.Tensor:
    """``min_{s in S} <g, s>``: mass ``cap`` on the smallest entries of ``g`` (``O(n log k)``)."""
    n = g.shape[-1]
    kk = min(n, math.ceil(1.0 / cap) + 1)
    smallest = torch.topk(g, kk, largest=False, sorted=True).values
    return (smallest * _lmo_weights(kk, cap, g)).sum(-1)


def frank_wolfe_gap(beta: torch.Tensor, grad: torch.Tensor, cap: float) -> torch.Tensor:
    """Frank-Wolfe (duality) gap ``max_{s in S} <grad, beta - s>`` over the capped simplex ``S``.

    For convex ``f`` and feasible ``beta`` it bounds ``f(beta) - min_S f`` from above, and it is
    zero exactly at the minimisers. ``beta, grad (..., n)``; returns ``(...)``.
    """
    return (grad * beta).sum(-1) - _lmo_value(grad, cap)


# --------------------------------------------------------------------------------------
# the SVDD dual
# --------------------------------------------------------------------------------------


class SVDDSolution(NamedTuple):
    """Result of ``solve_svdd_dual``.

    Attributes
    ----------
    beta : Tensor ``(n,)``
        Dual variables in ``{0 <= beta_i <= C/n, sum beta = 1}``.
    centre : Tensor ``(F,)``
        Sphere centre ``a = Phi^T beta = sum_i beta_i phi(x_i)`` (Algorithm 1, line 3).
    radius2 : Tensor ``()``
        Squared radius ``R^2 = ||phi(x_k) - a||^2``, averaged over the unbounded support
        vectors ``0 < beta_k < C/n`` (Section 4.1). Without any, the midpoint of the
        interval the KKT conditions allow, ``[max_{beta_i = 0} d_i, min_{beta_i = C/n} d_i]``,
        or its finite end when the other is missing.
    objective : Tensor ``()``
        Value of eq. 4.2, ``W(beta) = sum_i beta_i ||phi_i||^2 - ||a||^2``.
    gap : float
        Frank-Wolfe duality gap at ``beta``: ``max_S W - W(beta) <= gap``, and the centre is
        within ``||centre - a*||_2 <= sqrt(gap)`` of the exact optimum ``a*`` (``f`` grows at
        least like ``||Phi^T (beta - beta*)||^2`` away from a minimiser), which a privacy
        analysis built on the exact optimum (Corollary 4.2) must account for.
    iterations : int
        FISTA iterations plus active-set steps, over all working sets.
    converged : bool
        Whether ``gap <= tol`` was reached within ``max_iter``.
    """

    beta: torch.Tensor
    centre: torch.Tensor
    radius2: torch.Tensor
    objective: torch.Tensor
    gap: float
    iterations: int
    converged: bool


def _radius2(beta: torch.Tensor, dist2: torch.Tensor, cap: float) -> torch.Tensor:
    """``R^2`` from the squared distances ``dist2 (n,)`` of the points to the centre."""
    at_zero = beta <= 0
    at_cap = beta >= cap
    free = ~(at_zero | at_cap)
    inf = torch.tensor(math.inf, dtype=dist2.dtype, device=dist2.device)
    r_free = torch.where(free, dist2, 0.0).sum() / free.sum().clamp_min(1)
    lo = torch.where(at_zero, dist2, -inf).amax()  # points inside: d_i <= R^2
    hi = torch.where(at_cap, dist2, inf).amin()  # points outside: d_i >= R^2
    r_box = torch.where(
        torch.isfinite(lo) & torch.isfinite(hi), 0.5 * (lo + hi), torch.where(torch.isfinite(hi), hi, lo)
    )
    return torch.where(free.any(), r_free, r_box).clamp_min(0.0)


def _power_iteration_centred(phi: torch.Tensor, iters: int) -> float:
    """Estimate ``||Phi_c||_2^2`` for the row-centred ``Phi_c = Phi - 1 mean(Phi)^T`` (never formed)."""
    mean = phi.mean(0)
    gen = torch.Generator().manual_seed(0x5DD)
    u = torch.randn(phi.shape[1], generator=gen, dtype=torch.float64).to(phi)
    u = u / u.norm()
    sigma2 = 0.0
    for _ in range(iters):
        w = phi @ u - mean @ u  # Phi_c u   (n,)
        z = phi.T @ w - mean * w.sum()  # Phi_c^T Phi_c u   (F,)
        norm = float(z.norm())
        if norm == 0.0:
            break
        sigma2 = norm
        u = z / norm
    return sigma2


def _face_solve(phi: torch.Tensor, q: torch.Tensor, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor | None:
    """Minimiser ``b`` of ``f`` over the free rows ``idx`` with all other rows held at ``x``.

    Solves the equality-constrained QP ``min ||Phi_F^T b + c||^2 - q_F^T b`` s.t.
    ``sum b = sum x_F`` (``c = Phi^T x`` over the fixed rows) from its KKT system
    ``2 G b = q_F - 2 Phi_F c - lambda 1`` with the free-row Gram ``G = Phi_F Phi_F^T``
    (``k x k``; Cholesky with a relative ridge of 1e-13). ``None`` if ``G`` is singular.
    """
    pf = phi[idx]  # (k, F)
    xf = x[idx]
    c = phi.T @ x - pf.T @ xf  # (F,) contribution of the fixed rows
    gram = pf @ pf.T
    k = idx.numel()
    ridge = 1e-13 * float(gram.diagonal().mean()) + 1e-300
    chol, info = torch.linalg.cholesky_ex(gram + ridge * torch.eye(k, dtype=gram.dtype, device=gram.device))
    if int(info) != 0:
        return None
    rhs = torch.stack((0.5 * (q[idx] - 2.0 * (pf @ c)), torch.full_like(xf, 0.5)), 1)
    sol = torch.cholesky_solve(rhs, chol)
    h, e = sol[:, 0], sol[:, 1]
    b = h - ((h.sum() - xf.sum()) / e.sum()) * e
    return b if bool(torch.isfinite(b).all()) else None


def _active_set(
    phi: torch.Tensor,
    q: torch.Tensor,
    cap: float,
    x: torch.Tensor,
    tol: float,
    max_steps: int,
    max_free: int,
) -> tuple[torch.Tensor, int, bool]:
    """Primal active-set method on the capped simplex, started from a feasible ``x``.

    Keeps a free set (initially the rows strictly between the bounds); each step moves the
    free rows towards the minimiser of ``f`` over their face (``_face_solve``) up to the
    first bound met (ratio test; that row leaves the free set), so ``f`` never increases.
    At a face minimiser the Frank-Wolfe gap is checked; if it exceeds ``tol``, the rows at a
    bound whose gradient violates the KKT conditions most (a row at 0 with the smallest
    gradient below the free rows' common value ``tau``, a row at ``cap`` with the largest
    above it) join the free set. Once FISTA has nearly identified the optimal face this
    ends in a few steps, exactly. Gives up (returning its best point, ``False``) after
    ``max_steps`` steps or when the free set exceeds ``max_free`` rows.
    """
    x = x.clone()
    free = (x > 0) & (x < cap)
    for steps in range(1, max_steps + 1):
        idx = free.nonzero().squeeze(1)
        k = idx.numel()
        if k > max_free:
            break
        if k > 0:
            b = _face_solve(phi, q, x, idx)
            if b is None:
                break
            xf = x[idx]
            step = b - xf
            room = torch.where(step < 0, xf / (-step).clamp_min(1e-300), (cap - xf) / step.clamp_min(1e-300))
            room = torch.where(step == 0, math.inf, room)
            j = int(room.argmin())
            theta = float(room[j])
            if theta < 1.0:
                moved = (xf + theta * step).clamp(0.0, cap)
                moved[j] = 0.0 if float(step[j]) < 0 else cap
                x[idx] = moved
                free[idx[j]] = False
                continue
            x[idx] = b.clamp(0.0, cap)
        g = 2.0 * (phi @ (phi.T @ x)) - q
        if float(frank_wolfe_gap(x, g, cap)) <= tol:
            return x, steps, True
        if k > 0:
            tau = g[idx].mean()
        else:
            tau = 0.5 * (torch.where(x > 0, g, -math.inf).amax() + torch.where(x < cap, g, math.inf).amin())
        low = torch.where(~free & (x <= 0) & (g < tau), g, math.inf)
        high = torch.where(~free & (x >= cap) & (g > tau), g, -math.inf)
        released = False
        if bool(torch.isfinite(low.amin())):
            free[int(low.argmin())] = True
            released = True
        if bool(torch.isfinite(high.amax())):
            free[int(high.argmax())] = True
            released = True
        if not released:
            break
    return x, steps, False


def _fista(
    phi: torch.Tensor,
    q: torch.Tensor,
    cap: float,
    x: torch.Tensor,
    tol: float,
    max_iter: int,
    power_iterations: int,
    face_steps: bool = True,
) -> tuple[torch.Tensor, int, bool]:
    """FISTA with adaptive restart for ``min ||Phi^T x||^2 - q^T x`` over the capped simplex.

    ``phi (m, F)``, ``q (m,)``, feasible start ``x (m,)``; stops when the Frank-Wolfe gap of
    an iterate is ``<= tol``. When the pattern of rows at 0 / free / at ``cap`` has not changed
    for ``_FACE_AFTER`` iterations and at most ``F`` rows are free, the active-set method
    (``_active_set``) takes over from that point; it usually finishes exactly, else FISTA
    resumes from its (never worse) point and the next attempt waits twice as long.
    Returns ``(x, iterations + active-set steps, converged)``.
    """
    m, nf = phi.shape
    if cap * m <= 1.0 + 4.0 * _F64_EPS:  # the feasible set is the single point 1/m
        return torch.full_like(x, 1.0 / m), 0, True
    lip = max(2.0 * _power_iteration_centred(phi, power_iterations) * 1.02, 1e-12)
    a_x = phi.T @ x
    y, a_y = x, a_x
    t = 1.0
    lower = -math.inf
    tau: torch.Tensor | None = None
    next_check = 0
    pattern = torch.zeros_like(x, dtype=torch.int8)
    stable = 0
    face_after = _FACE_AFTER
    it_extra = 0  # active-set steps
    it = 0
    for it in range(1, max_iter + 1):
        g = 2.0 * (phi @ a_y) - q
        # Lagrangian dual bound at a_y: D(a_y) <= min f (weak duality), free from g
        lower = max(lower, float(_lmo_value(g, cap) - a_y @ a_y))
        while True:  # backtracking on L (rarely needed: L comes from power iteration)
            x_new, tau = _project(y - g / lip, cap, tau)
            a_new = phi.T @ x_new
            d = x_new - y
            da = a_new - a_y
            # descent lemma, exact for a quadratic: f(x+) - f(y) - <g, d> = ||Phi^T d||^2
            if float(da @ da) <= 0.5 * lip * float(d @ d) * (1.0 + 1e-9) + 1e-300:
                break
            lip *= 1.5
        f_new = float(a_new @ a_new - q @ x_new)
        restart = float((y - x_new) @ (x_new - x)) > 0.0
        if face_steps:
            new_pattern = (x_new > 0).to(torch.int8) + (x_new >= cap).to(torch.int8)
            stable = stable + 1 if torch.equal(new_pattern, pattern) else 0
            pattern = new_pattern
            if stable == face_after:
                k = int((new_pattern == 1).sum())
                if 0 < k <= nf:
                    x_as, steps, done = _active_set(phi, q, cap, x_new, tol, min(2 * k + 20, 200), nf)
                    it_extra += steps
                    if done:
                        return x_as, it + it_extra, True
                    a_as = phi.T @ x_as
                    f_as = float(a_as @ a_as - q @ x_as)
                    if f_as <= f_new:
                        x_new, a_new, f_new, restart = x_as, a_as, f_as, True
                    face_after *= 2  # back off after a failed attempt
        if f_new - lower <= tol and it >= next_check:
            g_new = 2.0 * (phi @ a_new) - q
            lower = max(lower, float(_lmo_value(g_new, cap) - a_new @ a_new))
            if float(frank_wolfe_gap(x_new, g_new, cap)) <= tol:
                return x_new, it + it_extra, True
            next_check = it + 10
        # gradient-based adaptive restart (O'Donoghue & Candes): the step opposes the momentum
        if restart:
            t = 1.0
            y, a_y = x_new, a_new
        else:
            t_new = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
            mom = (t - 1.0) / t_new
            y = x_new + mom * (x_new - x)
            a_y = a_new + mom * (a_new - a_x)
            t = t_new
        x, a_x = x_new, a_new
        if it + it_extra >= max_iter:
            break
    return x, it + it_extra, False


def solve_svdd_dual(
    phi: torch.Tensor,
    C: float,
    *,
    tol: float = 1e-6,
    max_iter: int | None = DEFAULT_MAX_ITER,
    method: Literal["fista", "fista_full"] = "fista",
    power_iterations: int = 15,
    on_round: Callable[[float], None] | None = None,
) -> SVDDSolution:
    """Solve the SVDD dual (eq. 4.2) for explicit features ``Phi (n, F)`` with box ``C/n``.

    Minimises ``f(beta) = ||Phi^T beta||^2 - sum_i beta_i ||phi_i||^2`` (``= -W``, eq. 4.2)
    over ``S = {0 <= beta_i <= C/n, sum_i beta_i = 1}`` in the feature space: a gradient
    ``2 Phi (Phi^T beta) - q`` costs two matrix-vector products with ``Phi`` (``O(n F)``); the
    ``n x n`` kernel is never formed.

    Algorithm (three layers, all plain tensor code on ``phi``'s device):

    1. *FISTA* -- accelerated projected gradient with the gradient-based adaptive restart of
       O'Donoghue & Candes (2015), exact projections (``project_capped_simplex``,
       threshold warm-started) and step ``1/L``. Feasible directions sum to zero, so ``f``
       only needs to be smooth along ``{d : sum d = 0}``, where its curvature is
       ``L = 2 ||Phi_c||_2^2`` for the row-centred ``Phi_c = Phi - 1 mean(Phi)^T`` (centring
       removes the features' common-mean direction, which can make ``L`` far smaller than
       ``2 ||Phi||_2^2``). ``L`` comes from power iteration and grows by backtracking if a
       step ever violates the descent lemma (checked exactly, for free, as
       ``||Phi^T d||^2 <= L/2 ||d||^2``).
    2. *Active-set finish* -- FISTA identifies the optimal face (rows at 0 / free / at
       ``C/n``) long before it converges on ill-conditioned problems. Once the pattern has
       been stable for a few iterations and at most ``F`` rows are free, a primal
       active-set method takes over: it solves the equality-constrained QP on the free rows
       exactly (``k x k`` Gram of the free rows, Cholesky; ``O(k^2 F)``), with ratio tests
       and KKT-based releases, and usually ends at the exact optimum in a few steps.
    3. *Working sets* (``method="fista"``, the default; ``"fista_full"`` skips them) -- the
       support vectors are the points farthest from the centre, i.e. those with the smallest
       gradient, and are few. Layers 1-2 run on a working set of rows: first the
       ``m0 = max(4 (n/C + 1), 1024)`` smallest gradient entries at the uniform start; after
       each restricted solve (to gap ``tol/2``) one full gradient pass checks the *full* gap
       and rebuilds the set from the support plus the rows that violate optimality
       (gradient below the largest gradient on the support, or among the ``n/C + 1``
       smallest), most violating first, at most ``m0`` new rows per round. Sets may shrink
       while the full gap falls by at least 10% per round; after that they only grow, so
       the loop ends (at worst with all rows: a set of half the rows or more becomes the
       full problem). A restricted solve that needs more than 400 iterations is cut short
       and its set doubled: degenerate problems with large supports (``W`` near 1) are
       harder on a subset of rows than on all of them.

    Stopping: the Frank-Wolfe gap ``g(beta) = max_{s in S} <grad f(beta), beta - s>`` of the
    full problem (``frank_wolfe_gap``; the linear minimiser puts mass ``C/n`` on the
    smallest gradient entries, ``O(n log(n/C))``) is ``<= tol``. It bounds
    ``max_S W - W(beta)``. Inside FISTA the cheap bracket
    ``D(a_y) <= min_S f <= f(x_k)``, with the Lagrangian dual
    ``D(a') = -||a'||^2 + min_{s in S} <2 Phi a' - q, s>`` at the extrapolated point, decides
    when the gap is worth computing. ``tol`` is absolute: ``W <= max_i ||phi_i||^2``
    (1 for random Fourier features).

    Parameters
    ----------
    phi : Tensor ``(n, F)``
        Feature rows ``phi(x_i)`` (e.g. from ``RandomFourierFeatures``).
        Any floating dtype and device; cast to float64 and solved on ``phi``'s device.
    C : float
        ``C`` of Park 2022 (box ``C/n``, Section 4.1); requires ``1 <= C <= n``, i.e.
        ``C/n in [1/n, 1]`` (a relative slack of 1e-9 absorbs the rounding of
        ``C = c * n``). ``C = n`` (``C/n = 1``) is the hard minimum enclosing ball; ``C = 1``
        forces the uniform ``beta = 1/n``.
    tol : float, default 1e-6
        Target Frank-Wolfe gap of the returned ``beta`` (absolute, on the objective).
    max_iter : int or None, default 50000
        Cap on FISTA iterations plus active-set steps (all working sets together); when
        reached, ``converged`` is ``False`` and ``gap`` is the gap of the returned iterate.
        ``None``: no cap, the solver runs until ``gap <= tol`` (the problem is convex and the
        gap of the iterates tends to 0, so it ends for any ``tol`` above float64's
        resolution). Private fits use ``None``: their sensitivity assumes the tolerance
        (a cap that one record could make the solver hit would void the guarantee).
    method : ``"fista"`` or ``"fista_full"``
        With (default) or without working sets.
    power_iterations : int, default 15
        Power iterations for the initial ``L`` of each FISTA run.
    on_round : callable, optional
        Called with the full gap after each working-set round (a progress display).

    Returns
    -------
    SVDDSolution
        ``beta (n,)``, ``centre (F,)``, ``radius2 ()`` and ``objective ()`` in ``phi``'s
        dtype if it is float32 or float64 (float64 otherwise; pass float64 features to keep
        the solver's precision), on ``phi``'s device; ``gap`` (float, of the full problem,
        computed in float64), ``iterations`` (FISTA iterations plus active-set steps, all
        working sets together; each costs ``O(|working set| F)``), ``converged`` (bool).

    Raises
    ------
    ValueError
        ``phi`` not a finite floating ``(n, F)`` tensor; ``C/n`` outside ``[1/n, 1]``;
        ``tol <= 0``; bad ``max_iter``, ``method`` or ``power_iterations``.
    """
    phi64, cap, max_iter = _check_problem(phi, C, tol, max_iter)
    if method not in ("fista", "fista_full"):
        raise ValueError(f"method must be 'fista' or 'fista_full', got {method!r}")
    if isinstance(power_iterations, bool) or not isinstance(power_iterations, int) or power_iterations < 1:
        raise ValueError(f"power_iterations must be a positive int, got {power_iterations!r}")
    out_dtype = phi.dtype if phi.dtype in (torch.float32, torch.float64) else torch.float64
    n = phi64.shape[0]
    q = phi64.square().sum(1)  # (n,) kernel diagonal ||phi_i||^2

    def finish(beta: torch.Tensor, it: int, converged: bool) -> SVDDSolution:
        a = phi64.T @ beta
        g = 2.0 * (phi64 @ a) - q
        gap = max(float(frank_wolfe_gap(beta, g, cap)), 0.0)
        aa = a @ a
        r2 = _radius2(beta, aa - g, cap)  # ||phi_i - a||^2 = q_i - 2 phi_i.a + ||a||^2
        objective = q @ beta - aa
        return SVDDSolution(
            beta.to(out_dtype),
            a.to(out_dtype),
            r2.to(out_dtype),
            objective.to(out_dtype),
            gap,
            it,
            converged,
        )

    uniform = torch.full((n,), 1.0 / n, dtype=torch.float64, device=phi64.device)
    kk = min(n, math.ceil(1.0 / cap) + 1)  # rows the linear minimiser can touch
    m0 = min(n, max(4 * kk, 1024))
    if cap * n <= 1.0 + 4.0 * _F64_EPS:
        return finish(uniform, 0, True)
    if method == "fista_full" or 2 * m0 >= n:
        x, it, conv = _fista(phi64, q, cap, uniform, tol, max_iter, power_iterations)
        return finish(x, it, conv)

    g = 2.0 * (phi64 @ (phi64.T @ uniform)) - q
    ws = torch.topk(g, m0, largest=False).indices
    x_ws = torch.full((m0,), 1.0 / m0, dtype=torch.float64, device=phi64.device)
    total = 0
    best_gap = math.inf
    grow_only = False
    while True:
        full_set = ws.numel() == n
        sub_phi, sub_q = (phi64, q) if full_set else (phi64[ws], q[ws])
        budget_it = max_iter - total if full_set else min(max_iter - total, _WS_ITER_BUDGET)
        x_ws, it, sub_done = _fista(
            sub_phi, sub_q, cap, x_ws, tol if full_set else 0.5 * tol, budget_it, power_iterations
        )
        total += it
        beta = torch.zeros(n, dtype=torch.float64, device=phi64.device).index_copy_(0, ws, x_ws)
        g = 2.0 * (phi64 @ (phi64.T @ beta)) - q
        gap = float(frank_wolfe_gap(beta, g, cap))
        if on_round is not None:
            on_round(gap)
        if gap <= tol:
            return finish(beta, total, True)
        if full_set:  # FISTA's own certificate (the same gap up to rounding)
            return finish(beta, total, sub_done)
        if total >= max_iter:
            return finish(beta, total, False)
        # rows that violate optimality: gradient below the largest gradient on the support
        # (a pairwise descent direction exists) or among the kk smallest (the LMO's rows)
        support = beta > 0
        thr = torch.maximum(torch.where(support, g, -math.inf).amax(), torch.topk(g, kk, largest=False).values[-1])
        # shrink to the support plus the smallest-gradient rows while the gap keeps falling
        # geometrically; afterwards only grow, which guarantees termination. A restricted
        # problem that is slow (degenerate problems with large supports are harder on a
        # subset of rows than on all of them) also switches to growing.
        grow_only = grow_only or gap > _WS_SHRINK_RATE * best_gap or not sub_done
        best_gap = min(best_gap, gap)
        keep = torch.zeros(n, dtype=torch.bool, device=phi64.device)
        keep[ws if grow_only else support.nonzero().squeeze(1)] = True
        n_keep = int(keep.sum())
        # violators enter at most m0 per round, most violating first; a slow restricted
        # problem doubles the set instead
        budget = min(n - n_keep, m0 if sub_done else max(ws.numel(), m0))
        vals, idx = torch.topk(torch.where(keep, math.inf, g), budget, largest=False)
        n_viol = int((vals <= thr).sum())
        if not sub_done:
            n_add = budget  # at least double the set
        elif grow_only:
            n_add = n_viol
        else:
            n_add = max(n_viol, min(budget, m0 - n_keep))
        if n_add == 0:  # nothing violates: the restricted gap was loose; enlarge anyway
            n_add = budget
        keep[idx[:n_add]] = True
        if 2 * int(keep.sum()) >= n:  # a large support: restricting no longer pays
            keep[:] = True
        ws = keep.nonzero().squeeze(1)
        x_ws = beta[ws]


def check_features(phi: torch.Tensor) -> None:
    """``phi`` must be a finite floating tensor ``(n, F)`` with ``n, F >= 1``."""
    if not torch.is_tensor(phi) or not phi.is_floating_point():
        raise ValueError(
            f"phi must be a floating tensor of shape (n, F), got {type(phi).__name__} {getattr(phi, 'dtype', '')}"
        )
    if phi.dim() != 2 or phi.shape[0] < 1 or phi.shape[1] < 1:
        raise ValueError(f"phi must have shape (n, F) with n, F >= 1, got {tuple(phi.shape)}")
    if not bool(torch.isfinite(phi).all()):
        raise ValueError("phi contains NaN or inf entries")


def iteration_limit(max_iter: int | None) -> int:
    """The iteration cap ``max_iter`` checked: a non-negative int, or ``sys.maxsize`` for
    ``None`` (no cap: run until converged)."""
    if max_iter is None:
        return sys.maxsize
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 0:
        raise ValueError(f"max_iter must be a non-negative int or None, got {max_iter!r}")
    return max_iter


def check_private_tol(tol: float, floor: float = MIN_PRIVATE_TOL) -> None:
    """Raise unless the gap tolerance of a private fit is a number ``>= floor``.

    A private fit runs its solver until the duality gap is ``<= tol`` (the sensitivity
    assumes it); a public floor well above float64's resolution of the gap guarantees
    that the loop ends whatever the data.
    """
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol < floor:
        raise ValueError(
            f"a private fit needs a duality-gap tol >= {floor:g} (its solver runs until the gap "
            f"reaches tol, and float64 cannot certify much smaller gaps), got {tol!r}"
        )


def _check_problem(phi: torch.Tensor, C: float, tol: float, max_iter: int | None) -> tuple[torch.Tensor, float, int]:
    """``phi`` in float64, the box ``C/n`` and the iteration limit, after checking them all."""
    check_features(phi)
    n = phi.shape[0]
    try:
        c = float(C)
    except (TypeError, ValueError):
        raise ValueError(f"C must be a real number, got {C!r}") from None
    if not math.isfinite(c) or c < 1.0 - _CAP_RTOL or c > n * (1.0 + _CAP_RTOL):
        raise ValueError(
            f"the box C/n of eq. 4.2 must lie in [1/n, 1], i.e. C in [1, n] = [1, {n}]; got "
            f"C={C!r} (C/n={c / n:.6g}). For a table value c of C/n pass C = c * n."
        )
    if not (isinstance(tol, (int, float)) and math.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a positive finite number, got {tol!r}")
    limit = iteration_limit(max_iter)
    cap = min(max(c / n, 1.0 / n), 1.0)
    return phi.to(torch.float64), cap, limit
