"""Private releases of an SVDD on random Fourier features (Park 2022, Sec. 4.2 and 5.3).

Three mechanisms, each recorded in a ``PrivacyLedger`` and each
passing its pre-noise quantity through the release hook
``intercept`` (so ``neighbour_check``
can test it):

* ``release_centre`` -- the centre ``a* = Phi^T beta*`` plus Laplace noise
  (Corollary 4.2 / Theorem 4.3), then projected onto the ball ``||a|| <= kappa``
  (post-processing).
* ``noisy_cell_counts`` -- class counts per cell of a data-independent partition
  plus integer discrete Laplace noise of scale ``1/epsilon`` (the votes of Phase III,
  eq. 5.5-5.6).
* ``private_quantile`` -- the exponential mechanism for a quantile of scores on a
  public grid (the radius of the one-class ``PrivateSVDD``).

Noise comes from fresh operating-system entropy when ``generator`` is None; a caller's
``generator`` makes it reproducible, which warns with
``PrivacyLeakWarning`` and is noted in the ledger
(``dp_proto.privacy.randomness``).

Sensitivity of the centre (neighbouring relation: add or remove one record; the box
``cap = C/n`` is a fixed public number). Write ``c_i(a) = ||phi_i||^2 - 2 phi_i . a``;
by the minimax theorem ``a*`` minimises ``g_D(a) = ||a||^2 + h_D(a)`` with
``h_D(a) = max_{beta in S} sum_i beta_i c_i(a)``, the ``cap``-weighted sum of the largest
``c_i(a)``. ``g_D`` is 2-strongly convex. Adding a record ``x`` inserts ``c_x`` into the
sorted list: the weight pattern ``(cap, ..., cap, rest, 0, ...)`` shifts by one place
below ``c_x``, which moves at most ``cap`` of weight in total variation, so
``grad(h_D' - h_D)`` is a combination of at most ``2 cap`` of weight on gradients
``-2 phi_j`` of norm ``2 kappa``: ``||grad(g_D' - g_D)|| <= 4 kappa cap``. Strong
convexity then gives ``||a*_D - a*_D'||_2 <= 4 kappa cap / 2 = 2 kappa cap``, and
``||.||_1 <= sqrt(F) ||.||_2`` gives Corollary 4.2's ``2 C kappa sqrt(F) / n``. The solver
stops at a duality gap ``<= tol``, which keeps its centre within ``sqrt(tol)`` of ``a*``
(``SVDDSolution``), so the released quantity moves by at most
``2 kappa cap + 2 sqrt(tol)`` in l2 (``centre_sensitivity``).

Fewer than ``1 / cap`` records. The capped simplex ``{0 <= beta_i <= cap, sum beta = 1}``
is empty when ``n cap < 1``, and whether it is depends on the private ``n``: a private fit
must not fail there (one record would decide whether it succeeds). The private estimators
use the box's total weight ``min(1, n cap)`` instead of 1: ``h_D(a)`` is the
``cap``-weighted sum of the largest ``c_i(a)`` up to total weight ``min(1, n cap)``, which
is the usual SVDD for ``n cap >= 1`` and puts weight ``cap`` on every record below, where
``a* = cap sum_i phi_i`` (``full_box_centre``; the mean of the records when
``n cap = 1``). Inserting ``c_x`` into the sorted list still moves at most ``cap`` of weight
onto ``x`` and at most ``cap`` off the other records (the pattern ``(cap, ..., cap, rest)``
only grows by ``x``'s entry, and at most its last entry shrinks), so the bound
``2 kappa cap`` above holds across ``n cap = 1`` as well, and there is no solver error to
report (the centre is exact).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from dp_proto.privacy.calibration import check_epsilon
from dp_proto.privacy.events import PureEvent
from dp_proto.privacy.ledger import PrivacyLedger
from dp_proto.privacy.mechanisms import laplace_mechanism, noise_rng
from dp_proto.privacy.noise import uniform_open
from dp_proto.privacy.testing import intercept

__all__ = ["centre_sensitivity", "full_box_centre", "release_centre", "noisy_cell_counts", "private_quantile"]


def centre_sensitivity(c_over_n: float, num_features: int, *, tol: float = 0.0, kappa: float = 1.0) -> float:
    """l1 sensitivity ``sqrt(F) (2 kappa C/n + 2 sqrt(tol))`` of the computed SVDD centre.

    ``c_over_n`` is the box of the dual (``C/n`` of Park 2022), ``tol`` the duality-gap
    tolerance the solver was run to (0 for the exact optimum of Corollary 4.2).
    """
    if not 0 < c_over_n <= 1:
        raise ValueError(f"C/n must lie in (0, 1], got {c_over_n!r}")
    if num_features < 1 or not tol >= 0 or not kappa > 0:
        raise ValueError(f"need num_features >= 1, tol >= 0, kappa > 0; got {num_features}, {tol}, {kappa}")
    return math.sqrt(num_features) * (2.0 * kappa * c_over_n + 2.0 * math.sqrt(tol))


def full_box_centre(phi: Tensor, cap: float) -> Tensor:
    """The SVDD centre ``cap sum_i phi_i`` ``(F,)`` (float64) when ``n cap <= 1``: every
    ``beta_i`` at the box ``cap`` (see the module docstring; the private estimators use it
    for fewer than ``1 / cap`` records, where the capped simplex is empty)."""
    if phi.dim() != 2:
        raise ValueError(f"phi must have shape (n, F), got {tuple(phi.shape)}")
    if not 0 < cap <= 1:
        raise ValueError(f"cap must lie in (0, 1], got {cap!r}")
    return cap * phi.to(torch.float64).sum(0)


def release_centre(
    centre: Tensor,
    c_over_n: float,
    epsilon: float,
    *,
    tol: float,
    kappa: float = 1.0,
    ledger: PrivacyLedger | None = None,
    generator: torch.Generator | None = None,
    name: str = "svdd/centre",
) -> Tensor:
    """Private centre ``a^ = a + Lap(centre_sensitivity / epsilon)^F``, projected onto
    ``||a^||_2 <= kappa`` (post-processing; every ``||phi(x)||`` is ``kappa``, so the
    exact centre lies in that ball). ``centre (F,)`` must come from
    ``solve_svdd_dual`` run to gap ``tol`` with box ``c_over_n``.

    Returns
    -------
    Tensor ``(F,)`` in ``centre``'s dtype.
    """
    if centre.dim() != 1:
        raise ValueError(f"centre must have shape (F,), got {tuple(centre.shape)}")
    sens = centre_sensitivity(c_over_n, centre.numel(), tol=tol, kappa=kappa)
    noisy = laplace_mechanism(centre, sens, epsilon, ledger=ledger, name=name, generator=generator)
    norm = torch.linalg.vector_norm(noisy)
    return noisy * torch.clamp(kappa / norm, max=1.0) if norm > 0 else noisy


def noisy_cell_counts(
    cells: Tensor,
    labels: Tensor,
    num_cells: int,
    num_classes: int,
    epsilon: float,
    *,
    ledger: PrivacyLedger | None = None,
    generator: torch.Generator | None = None,
    name: str = "svdd/votes",
) -> Tensor:
    """Counts of (cell, class) pairs plus integer discrete Laplace noise ``P(k) ~
    exp(-epsilon |k|)`` on every one (float-safe): epsilon-DP.

    ``cells (n,)`` must come from a partition that does not depend on the records
    (here: the basins of equilibrium points reached from public starts under the
    private centre). Adding or removing a record changes exactly one of the
    ``num_cells * num_classes`` counts by one (a histogram), so the whole table is one
    Laplace release of sensitivity 1 -- the parallel composition of the per-basin
    votes (eq. 5.5), with the empty cells noised too, so the released table has the same
    shape for every data set.

    Returns
    -------
    Tensor ``(num_cells, num_classes)``, float64.
    """
    if cells.shape != labels.shape or cells.dim() != 1:
        raise ValueError(f"cells and labels must both have shape (n,), got {tuple(cells.shape)}, {tuple(labels.shape)}")
    if num_cells < 1 or num_classes < 1:
        raise ValueError(f"need num_cells >= 1 and num_classes >= 1, got {num_cells}, {num_classes}")
    flat = cells.long() * num_classes + labels.long()
    if flat.numel() and (
        int(cells.min()) < 0
        or int(cells.max()) >= num_cells
        or int(labels.min()) < 0
        or int(labels.max()) >= num_classes
    ):
        raise ValueError("cells and labels must lie in 0..num_cells-1 and 0..num_classes-1")
    counts = torch.bincount(flat, minlength=num_cells * num_classes).to(torch.float64)
    noisy = laplace_mechanism(
        counts,
        1.0,
        epsilon,
        ledger=ledger,
        name=name,
        generator=generator,
        single_coordinate=True,
        grid=1.0,
        value_on_grid=True,
    )  # integer noise
    return noisy.reshape(num_cells, num_classes)


def private_quantile(
    scores: Tensor,
    level: float,
    epsilon: float,
    grid: Tensor,
    *,
    ledger: PrivacyLedger | None = None,
    generator: torch.Generator | None = None,
    name: str = "svdd/quantile",
) -> float:
    """The ``level``-quantile of ``scores (n,)`` by the exponential mechanism on a public grid.

    Utility of a grid value ``t``: ``-| #{s_i <= t} - level * n |``. Adding or removing a
    record changes the count by at most 1 and ``level * n`` by ``level``, in opposite
    directions only when the count does not move, so the utility moves by at most
    ``max(level, 1 - level) <= 1``; sampling ``t`` with probability proportional to
    ``exp(epsilon u(t) / 2)`` is epsilon-DP (McSherry & Talwar 2007). ``grid (k,)`` must
    be public (fixed before seeing the data), e.g. ``linspace(0, 4, 401)`` for squared
    distances of unit vectors.
    """
    epsilon = check_epsilon(epsilon)
    if not 0 <= level <= 1:
        raise ValueError(f"level must lie in [0, 1], got {level!r}")
    if grid.dim() != 1 or grid.numel() < 1:
        raise ValueError("grid must be a non-empty 1-D tensor")
    if ledger is not None:
        ledger.spend(PureEvent(epsilon, name=name, sensitivity=1.0))
    generator = noise_rng(ledger, generator, False, grid.device, name)
    s = scores.detach().to(torch.float64).reshape(-1)
    g = grid.to(s)
    below = torch.searchsorted(torch.sort(s).values, g, right=True).to(torch.float64)
    utility = -(below - level * s.numel()).abs()
    logits = 0.5 * epsilon * utility

    def draw() -> float:
        # Gumbel-max sampling from softmax(logits) with the library's noise source.
        u = uniform_open((g.numel(),), generator=generator, device=g.device)
        return float(g[torch.argmax(logits - torch.log(-torch.log(u)))])

    # the utilities move by at most 1 per grid value (linf) under add/remove
    return intercept(name, utility, 1.0, "linf", draw)
