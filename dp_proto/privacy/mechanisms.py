"""Mechanisms: calibrated noise on a value, with the release recorded in a ledger.

Every mechanism here

1. states its neighbouring relation (add/remove one record) and the sensitivity it
   assumes; the caller is responsible for the sensitivity holding, which the
   clipping helpers of ``dp_proto.privacy.clipping`` enforce;
2. records a ``PrivacyEvent`` in ``ledger`` *before*
   drawing noise, so a release over budget is refused without touching the data.
   ``ledger`` is a required keyword: a ``PrivacyLedger``, or an explicit ``ledger=None``
   for a release that is recorded elsewhere or not at all; omitting it raises
   ``TypeError``, so no release goes unrecorded by accident;
3. draws noise from fresh operating-system entropy: a generator seeded from
   ``os.urandom`` when ``generator=None`` (the default), or ``os.urandom`` directly with
   ``secure_mode=True``. A caller's ``generator`` makes the noise reproducible: that warns
   with ``PrivacyLeakWarning`` and the ledger's summary says
   ``"noise": "reproducible"`` (``dp_proto.privacy.randomness``).

Inputs with NaN or inf are rejected: their sensitivity is unbounded.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from dp_proto.privacy.calibration import (
    analytic_gaussian_sigma,
    check_delta,
    check_epsilon,
    check_sensitivity,
    classic_gaussian_sigma,
    laplace_scale,
)
from dp_proto.privacy.events import (
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    GaussianEvent,
    LaplaceEvent,
    PrivacyEvent,
    PureEvent,
)
from dp_proto.privacy.ledger import PrivacyLedger, renyi_epsilon
from dp_proto.privacy.noise import (
    discrete_gaussian_noise,
    discrete_laplace_noise,
    gaussian_noise,
    laplace_noise,
    uniform_open,
)
from dp_proto.privacy.randomness import noise_source, resolve_generator
from dp_proto.privacy.testing import intercept

__all__ = [
    "LEDGER_REQUIRED",
    "require_ledger",
    "noise_rng",
    "laplace_mechanism",
    "gaussian_mechanism",
    "gaussian_sigma",
    "GaussianPlan",
    "plan_gaussian",
    "renyi_noise_multiplier",
    "noisy_count",
    "noisy_histogram",
    "report_noisy_max",
    "noisy_majority_vote",
]


class _LedgerRequired:
    """Default of a mechanism's ``ledger``: there is none; the caller must choose."""

    def __repr__(self) -> str:
        return "<required>"


#: The default of every mechanism's ``ledger`` keyword: omitting it raises ``TypeError``.
LEDGER_REQUIRED: Any = _LedgerRequired()


def require_ledger(ledger: Any, mechanism: str) -> PrivacyLedger | None:
    """``ledger`` if the caller chose one (a ``PrivacyLedger`` or an explicit ``None``).

    Raises ``TypeError`` for ``LEDGER_REQUIRED`` (the caller passed nothing) and for an
    object that is not a ledger. Every function that releases something with noise takes
    ``ledger=LEDGER_REQUIRED`` and calls this first, before it reads the data.
    """
    if isinstance(ledger, _LedgerRequired):
        raise TypeError(
            f"{mechanism}() needs ledger=: pass a PrivacyLedger to record the release (and refuse it over "
            "budget), or ledger=None to release without a record; a release is never unrecorded by default"
        )
    if ledger is not None and not isinstance(ledger, PrivacyLedger):
        raise TypeError(f"{mechanism}(): ledger must be a PrivacyLedger or None, got {type(ledger).__name__}")
    return ledger


#: Grid steps a value is clamped to before discrete noise (float64 integers stay exact).
_MAX_STEPS = float(2**52)


def _snap_to_grid(value: Tensor, grid: float, value_on_grid: bool) -> Tensor:
    """``value`` in whole steps of the public ``grid`` (float64 integers), clamped to
    ``+-2^52`` (coordinate-wise 1-Lipschitz, so the sensitivity in steps is kept).
    ``value_on_grid``: the value must already lie on the grid (``ValueError`` otherwise)."""
    v64 = value.to(torch.float64)
    snapped = torch.round(v64 / grid)
    if value_on_grid and not torch.equal(snapped * grid, v64):
        raise ValueError("value_on_grid=True but value has entries off the grid")
    return snapped.clamp_(-_MAX_STEPS, _MAX_STEPS)


def _check_value(value: Tensor, name: str = "value") -> Tensor:
    if not isinstance(value, Tensor):
        value = torch.as_tensor(value, dtype=torch.float64)
    if value.is_floating_point() and not bool(torch.isfinite(value).all()):
        raise ValueError(f"{name} contains NaN or inf; its sensitivity is unbounded")
    return value


def _record(ledger: PrivacyLedger | None, event: PrivacyEvent) -> None:
    if ledger is not None:
        ledger.spend(event)


def noise_rng(
    ledger: PrivacyLedger | None,
    generator: torch.Generator | None,
    secure_mode: bool,
    device: torch.device | str | None,
    owner: str,
) -> torch.Generator | None:
    """The generator a release draws from (None with ``secure_mode``), its source noted in the
    ledger: a fresh one for ``generator=None``; a caller's own warns (reproducible noise)."""
    if secure_mode:
        if generator is not None:
            raise ValueError("secure_mode=True draws from os.urandom; do not pass a generator as well")
        if ledger is not None:
            ledger.note_noise_source("secure")
        return None
    source = noise_source(generator)
    generator = resolve_generator(generator, device, owner=owner)
    if ledger is not None:
        ledger.note_noise_source(source)
    return generator


def laplace_mechanism(
    value: Tensor,
    l1_sensitivity: float,
    epsilon: float,
    *,
    ledger: PrivacyLedger | None = LEDGER_REQUIRED,
    name: str = "laplace",
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
    grid: float | str | None = "auto",
    value_on_grid: bool = False,
    single_coordinate: bool = False,
) -> Tensor:
    """``value + Lap(Delta_1 / epsilon)`` i.i.d. per coordinate, on a public grid: epsilon-DP.

    Neighbouring relation: add/remove one record. ``l1_sensitivity`` is the largest
    l1 change of ``value`` that one record can cause (Dwork & Roth, Thm 3.6).

    Parameters
    ----------
    value : Tensor, any shape
    l1_sensitivity, epsilon : float
    ledger : PrivacyLedger or None (required keyword)
        Records the release (refuses it over budget before noise is drawn); ``None``
        releases without a record (an explicit choice).
    single_coordinate : bool
        True if one record changes at most one coordinate (a count, a histogram);
        the ledger then uses the exact Laplace privacy-loss distribution, otherwise
        the worst case of any epsilon-DP release.
    grid : float, "auto" (default) or None
        Float-safe noise on a public grid: the value is rounded to multiples of ``grid``
        and the noise is ``grid`` times discrete Laplace, so outputs lie on the grid (no
        floating-point leakage, Mironov 2012; see ``dp_proto.privacy.noise``).
        Rounding can move each coordinate by ``grid / 2``, so the sensitivity in grid
        steps becomes ``ceil(Delta_1 / grid) + k`` with ``k`` the number of coordinates
        one record can change (1 with ``single_coordinate``, else all of them).
        ``"auto"``: ``grid = Delta_1 / (1024 k)``, which costs 0.1 % more noise than
        continuous Laplace; the grid depends on public quantities only (the
        sensitivity and the shape). ``None``: continuous floating-point Laplace (the
        textbook mechanism, open to Mironov's attack; for comparisons only).
    value_on_grid : bool
        The query's values always lie on the grid (e.g. counts with ``grid=1``): no
        rounding, so no slack is added to the sensitivity. Checked on ``value``.

    Returns
    -------
    Tensor, same shape as ``value`` (float64 unless ``value`` is another float type).
    """
    ledger = require_ledger(ledger, "laplace_mechanism")
    value = _check_value(value)
    epsilon = check_epsilon(epsilon)
    sens = check_sensitivity(l1_sensitivity, "l1_sensitivity")
    dtype = value.dtype if value.is_floating_point() else torch.float64
    if isinstance(grid, str):
        if grid != "auto":
            raise ValueError(f"grid must be a number > 0, 'auto' or None, got {grid!r}")
        if value_on_grid:
            raise ValueError("value_on_grid needs an explicit grid (e.g. grid=1.0 for counts)")
        grid = sens / (1024 * (1 if single_coordinate else max(value.numel(), 1))) if sens > 0 else None
    if grid is not None:
        if not grid > 0:
            raise ValueError(f"grid must be > 0, got {grid!r}")
        slack = 0 if value_on_grid else (1 if single_coordinate else value.numel())
        snapped = _snap_to_grid(value, grid, value_on_grid)  # before anything is spent
        steps = math.ceil(sens / grid - 1e-12) + slack
        scale = steps / epsilon
        if sens > 0 and single_coordinate:  # exact discrete-Laplace privacy loss distribution
            _record(ledger, DiscreteLaplaceEvent(epsilon, grid_steps=steps, name=name, sensitivity=sens))
        elif sens > 0:  # several coordinates: accounted as a generic epsilon-DP release
            _record(ledger, PureEvent(epsilon, name=name, sensitivity=sens))
    else:
        scale = laplace_scale(epsilon, sens)
        if sens > 0 and single_coordinate:
            _record(ledger, LaplaceEvent(1.0 / epsilon, name=name, sensitivity=sens))
        elif sens > 0:
            _record(ledger, PureEvent(epsilon, name=name, sensitivity=sens))
    generator = noise_rng(ledger, generator, secure_mode, value.device, name)
    if grid is not None:

        def draw() -> Tensor:
            noise = discrete_laplace_noise(
                value.shape, scale, generator=generator, secure_mode=secure_mode, device=value.device
            )
            return ((snapped + noise) * grid).to(dtype)
    else:

        def draw() -> Tensor:
            noise = laplace_noise(value.shape, scale, generator=generator, secure_mode=secure_mode, device=value.device)
            return (value.to(torch.float64) + noise).to(dtype)

    return intercept(name, value, sens, "l1", draw)


def gaussian_sigma(epsilon: float, delta: float, l2_sensitivity: float, calibration: str = "analytic") -> float:
    """Noise standard deviation of a continuous Gaussian release that is (epsilon, delta)-DP.

    Parameters
    ----------
    epsilon : float
        Epsilon of the release.
    delta : float
        Delta of the release.
    l2_sensitivity : float
        Largest l2 change of the value that one record can cause.
    calibration : {"analytic", "classic"}, default "analytic"
        ``"analytic"``: the exact calibration of Balle & Wang (2018); ``"classic"``:
        ``sqrt(2 ln(1.25/delta)) Delta / epsilon`` (Dwork & Roth 2014), valid for
        epsilon < 1 only.

    Returns
    -------
    float
        The standard deviation ``sigma``.

    References
    ----------
    Balle & Wang (2018). Improving the Gaussian mechanism for differential privacy:
    analytical calibration and optimal denoising. *ICML 2018*.

    Examples
    --------
    >>> from dp_proto.privacy import gaussian_sigma
    >>> round(gaussian_sigma(1.0, 1e-5, 1.0), 3)
    3.731
    >>> round(gaussian_sigma(0.5, 1e-5, 1.0, calibration="classic"), 3)
    9.69
    """
    if calibration == "analytic":
        return analytic_gaussian_sigma(epsilon, delta, l2_sensitivity)
    if calibration == "classic":
        if epsilon >= 1:
            raise ValueError(f"the classic Gaussian calibration needs epsilon < 1, got {epsilon}")
        return classic_gaussian_sigma(epsilon, delta, l2_sensitivity)
    raise ValueError(f"calibration must be 'analytic' or 'classic', got {calibration!r}")


@functools.lru_cache(maxsize=256)
def renyi_noise_multiplier(epsilon: float, delta: float, *, rtol: float = 1e-9) -> float:
    """Smallest noise multiplier ``sigma / Delta_2`` whose Gaussian release is
    ``(epsilon, delta)``-DP by its Renyi-DP curve (the conversion of the ledger's
    ``renyi_epsilon``, so a single release spends exactly
    ``epsilon`` at most). About 5-10 % above the analytic Gaussian's multiplier: the
    price of accounting a discrete Gaussian, whose exact loss distribution is not the
    continuous one's (check value: epsilon 1, delta 1e-5 gives 4.045 against 3.731).

    Examples
    --------
    >>> from dp_proto.privacy import renyi_noise_multiplier
    >>> round(renyi_noise_multiplier(1.0, 1e-5), 3)
    4.045
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta, allow_zero=False)

    def eps_of(nm: float) -> float:
        return renyi_epsilon([DiscreteGaussianEvent(nm)], delta)

    lo, hi = 1.0, 1.0
    while eps_of(hi) > epsilon:
        lo, hi = hi, 2.0 * hi
    while lo > 1e-6 and eps_of(lo) <= epsilon:
        lo /= 2.0
    while hi - lo > rtol * hi:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if eps_of(mid) > epsilon else (lo, mid)
    return hi


@dataclass(frozen=True)
class GaussianPlan:
    """How a Gaussian release of a value with ``numel`` coordinates is noised.

    Attributes
    ----------
    sigma : float
        Noise standard deviation per coordinate, in the value's units (0 for a zero
        sensitivity).
    grid : float or None
        The public grid the value is rounded to (None: continuous noise).
    steps_sensitivity : float or None
        l2 sensitivity in grid steps after rounding: ``Delta_2 / grid + sqrt(k)``
        (each of the ``k`` coordinates one record can change may round the other way;
        ``Delta_2 / grid`` when the value lies on the grid).
    event : PrivacyEvent or None
        What the ledger records (None for a zero sensitivity).
    """

    sigma: float
    grid: float | None
    steps_sensitivity: float | None
    event: PrivacyEvent | None


def plan_gaussian(
    epsilon: float,
    delta: float,
    l2_sensitivity: float,
    numel: int,
    *,
    grid: float | str | None = "auto",
    calibration: str | None = None,
    value_on_grid: bool = False,
    name: str = "gaussian",
) -> GaussianPlan:
    """The noise of ``gaussian_mechanism`` for a value of ``numel`` coordinates,
    without drawing it (parameters as there). Depends on public quantities only."""
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta, allow_zero=False)
    sens = check_sensitivity(l2_sensitivity, "l2_sensitivity")
    if isinstance(grid, str) and grid != "auto":
        raise ValueError(f"grid must be a number > 0, 'auto' or None, got {grid!r}")
    if grid is None:
        sigma = gaussian_sigma(epsilon, delta, sens, calibration or "analytic")
        event: PrivacyEvent | None = GaussianEvent(sigma / sens, name=name, sensitivity=sens) if sens else None
        return GaussianPlan(sigma, None, None, event)
    if calibration is not None:
        raise ValueError(
            "calibration applies to continuous noise (grid=None); the discrete Gaussian is "
            "calibrated by its Renyi-DP curve"
        )
    if grid == "auto":
        if value_on_grid:
            raise ValueError("value_on_grid needs an explicit grid (e.g. grid=1.0 for counts)")
        if sens == 0:
            return GaussianPlan(0.0, None, None, None)
        grid = sens / (1024.0 * math.sqrt(max(numel, 1)))
    if not (isinstance(grid, (int, float)) and math.isfinite(grid) and grid > 0):
        raise ValueError(f"grid must be > 0, got {grid!r}")
    if sens == 0:
        return GaussianPlan(0.0, float(grid), 0.0, None)
    steps = sens / grid + (0.0 if value_on_grid else math.sqrt(max(numel, 1)))
    multiplier = renyi_noise_multiplier(epsilon, delta)
    event = DiscreteGaussianEvent(multiplier, name=name, sensitivity=sens)
    return GaussianPlan(multiplier * steps * grid, float(grid), steps, event)


def gaussian_mechanism(
    value: Tensor,
    l2_sensitivity: float,
    epsilon: float,
    delta: float,
    *,
    calibration: str | None = None,
    ledger: PrivacyLedger | None = LEDGER_REQUIRED,
    name: str = "gaussian",
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
    grid: float | str | None = "auto",
    value_on_grid: bool = False,
) -> Tensor:
    """``value`` plus Gaussian noise: (epsilon, delta)-DP, on a public grid by default.

    Neighbouring relation: add/remove one record; ``l2_sensitivity`` is the largest
    l2 change of ``value`` one record can cause.

    Parameters
    ----------
    grid : float, "auto" (default) or None
        Float-safe noise (Mironov 2012; see ``dp_proto.privacy.noise``): ``value`` is
        rounded to multiples of ``grid`` and ``grid`` times discrete Gaussian noise
        (Canonne, Kamath & Steinke 2020) is added, so outputs lie on the grid. Rounding
        can move each coordinate by half a step, so the l2 sensitivity in steps becomes
        ``Delta_2 / grid + sqrt(k)`` with ``k = value.numel()``. ``"auto"``:
        ``grid = Delta_2 / (1024 sqrt(k))``, 0.1 % more noise for the rounding. The noise
        multiplier comes from the Renyi-DP curve (``renyi_noise_multiplier``, about
        5-10 % above the analytic Gaussian's) and the ledger records a
        ``discrete_gaussian`` event. ``None``: continuous float64 Gaussian noise
        calibrated by ``calibration`` (open to floating-point attacks; for comparisons
        and for DP-SGD-like settings where the output is not released bit for bit).
    calibration : {"analytic", "classic"}, optional
        Continuous noise only: the analytic Gaussian mechanism (Balle & Wang 2018, the
        default; epsilon 1, delta 1e-5, sensitivity 1 gives sigma 3.731) or the classic
        bound (4.845).
    ledger : PrivacyLedger or None (required keyword)
        Records the release before noise is drawn; ``None`` releases without a record.
    value_on_grid : bool
        The value's entries always lie on the grid (e.g. counts with ``grid=1``): no
        rounding slack. Checked on ``value``.

    Returns
    -------
    Tensor, same shape as ``value`` (float64 unless ``value`` is another float type).
    """
    ledger = require_ledger(ledger, "gaussian_mechanism")
    value = _check_value(value)
    plan = plan_gaussian(
        epsilon,
        delta,
        l2_sensitivity,
        value.numel(),
        grid=grid,
        calibration=calibration,
        value_on_grid=value_on_grid,
        name=name,
    )
    sens = check_sensitivity(l2_sensitivity, "l2_sensitivity")
    snapped = None if plan.grid is None else _snap_to_grid(value, plan.grid, value_on_grid)  # before spending
    if plan.event is not None:
        _record(ledger, plan.event)
    dtype = value.dtype if value.is_floating_point() else torch.float64
    generator = noise_rng(ledger, generator, secure_mode, value.device, name)
    if snapped is None:

        def draw() -> Tensor:
            noise = gaussian_noise(
                value.shape, plan.sigma, generator=generator, secure_mode=secure_mode, device=value.device
            )
            return (value.to(torch.float64) + noise).to(dtype)

        return intercept(name, value, sens, "l2", draw)

    grid = float(plan.grid or 0.0)  # not None: the value was snapped to it

    def draw_discrete() -> Tensor:
        if plan.sigma == 0:
            return (snapped * grid).to(dtype)
        noise = discrete_gaussian_noise(
            value.shape, plan.sigma / grid, generator=generator, secure_mode=secure_mode, device=value.device
        )
        return ((snapped + noise.to(torch.float64)) * grid).to(dtype)

    return intercept(name, value, sens, "l2", draw_discrete)


def noisy_histogram(
    labels: Tensor,
    num_bins: int,
    epsilon: float,
    *,
    ledger: PrivacyLedger | None = LEDGER_REQUIRED,
    name: str = "histogram",
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
    discrete: bool = True,
) -> Tensor:
    """Counts of ``labels (n,)`` in ``0..num_bins-1`` plus Laplace noise of scale
    ``1/epsilon`` (integer by default): epsilon-DP.

    Neighbouring relation: add/remove one record changes exactly one count by one, so
    the l1 sensitivity is 1 and the ledger uses the exact (discrete) Laplace loss
    distribution.
    ``discrete=True`` (the default) adds discrete Laplace noise: integer outputs, no
    floating-point leakage (Mironov 2012); ``discrete=False``: continuous Laplace.
    Labels outside ``0..num_bins-1`` raise ``ValueError``. ``ledger`` is required, as for
    every mechanism here (a ``PrivacyLedger`` or an explicit ``None``).

    Returns
    -------
    Tensor, shape (num_bins,), float64
    """
    ledger = require_ledger(ledger, "noisy_histogram")
    labels = torch.as_tensor(labels)
    if labels.dim() != 1:
        raise ValueError(f"expected labels of shape (n,), got {tuple(labels.shape)}")
    if num_bins < 1:
        raise ValueError(f"num_bins must be >= 1, got {num_bins}")
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_bins):
        raise ValueError(f"labels must lie in 0..{num_bins - 1}, got range [{int(labels.min())}, {int(labels.max())}]")
    counts = torch.bincount(labels.long(), minlength=num_bins).to(torch.float64)
    return laplace_mechanism(
        counts,
        1.0,
        epsilon,
        ledger=ledger,
        name=name,
        generator=generator,
        secure_mode=secure_mode,
        grid=1.0 if discrete else None,
        value_on_grid=discrete,
        single_coordinate=True,
    )


def noisy_count(
    n: int | Tensor,
    epsilon: float,
    *,
    ledger: PrivacyLedger | None = LEDGER_REQUIRED,
    name: str = "count",
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
    discrete: bool = True,
) -> float:
    """``n + Lap(1/epsilon)``: epsilon-DP for a counting query (sensitivity 1 under
    add/remove); discrete (integer) noise by default, see ``noisy_histogram``."""
    ledger = require_ledger(ledger, "noisy_count")
    value = torch.as_tensor(float(n), dtype=torch.float64).reshape(1)
    out = laplace_mechanism(
        value,
        1.0,
        epsilon,
        ledger=ledger,
        name=name,
        generator=generator,
        secure_mode=secure_mode,
        grid=1.0 if discrete else None,
        value_on_grid=discrete,
        single_coordinate=True,
    )
    return float(out[0])


def report_noisy_max(
    counts: Tensor,
    epsilon: float,
    *,
    ledger: PrivacyLedger | None = LEDGER_REQUIRED,
    name: str = "report_noisy_max",
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
) -> Tensor:
    """Index of the largest ``count + noise`` along the last dimension, noise discrete
    Laplace with ``P(k) ~ exp(-epsilon |k|)``; ties go to a uniformly random index.

    ``counts (..., k)`` are integer counting queries over disjoint groups of records (for
    example class votes), so under add/remove one record changes one count of one row by
    one. The noisy table is then an epsilon-DP histogram (integer noise, no
    floating-point leakage, Mironov 2012) and its arg-max is post-processing; rows over
    disjoint records compose in parallel, so the whole call costs ``epsilon`` (one pure
    event). Non-integer counts raise ``ValueError``.

    Returns
    -------
    Tensor, shape ``counts.shape[:-1]``, int64
    """
    ledger = require_ledger(ledger, "report_noisy_max")
    counts = _check_value(torch.as_tensor(counts))
    epsilon = check_epsilon(epsilon)
    if counts.dim() == 0 or counts.shape[-1] < 1:
        raise ValueError(f"expected counts of shape (..., k) with k >= 1, got {tuple(counts.shape)}")
    counts = counts.to(torch.float64)
    if not torch.equal(torch.round(counts), counts):
        raise ValueError("report_noisy_max needs integer counts (counting queries over disjoint groups)")
    _record(ledger, PureEvent(epsilon, name=name, sensitivity=1.0))
    generator = noise_rng(ledger, generator, secure_mode, counts.device, name)

    def draw() -> Tensor:
        noise = discrete_laplace_noise(
            counts.shape, 1.0 / epsilon, generator=generator, secure_mode=secure_mode, device=counts.device
        )
        # a uniform in (0, 1) orders equal integers at random and never two different ones
        tie_break = uniform_open(counts.shape, generator=generator, secure_mode=secure_mode, device=counts.device)
        return (counts + noise.to(torch.float64) + tie_break).argmax(-1)

    return intercept(name, counts, 1.0, "l1", draw)


def noisy_majority_vote(
    votes: Tensor,
    num_classes: int,
    epsilon: float,
    *,
    ledger: PrivacyLedger | None = LEDGER_REQUIRED,
    name: str = "majority_vote",
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
) -> int:
    """The class with the most votes after ``Lap(1/epsilon)`` noise on each count.

    ``votes (n,)`` holds one class index per record; epsilon-DP under add/remove one
    record (report-noisy-max on the vote histogram).
    """
    ledger = require_ledger(ledger, "noisy_majority_vote")
    votes = torch.as_tensor(votes)
    if votes.dim() != 1:
        raise ValueError(f"expected votes of shape (n,), got {tuple(votes.shape)}")
    if votes.numel() and (int(votes.min()) < 0 or int(votes.max()) >= num_classes):
        raise ValueError(f"votes must lie in 0..{num_classes - 1}")
    counts = torch.bincount(votes.long(), minlength=num_classes).to(torch.float64)
    return int(
        report_noisy_max(counts, epsilon, ledger=ledger, name=name, generator=generator, secure_mode=secure_mode)
    )
