"""The public recipe of a DP-SGD run: ``DPSGDPlan``, and the noise calibration behind it.

A DP-SGD run in dp-proto (private LVQ estimators, the Lightning experiment, the DP
anonymizer) is: releases before training that spend ``init_fraction * epsilon`` (the DP
class-mean initialisation, or the anonymizer's private prior), then ``T`` Poisson-subsampled
Gaussian steps at rate ``q`` whose noise multiplier is calibrated so that the whole run is
``(epsilon, delta)``-DP. Everything here is public: it never looks at the data.

Steps. One epoch is ``int(1 / q)`` steps -- the number of batches Opacus' Poisson loader
(``DPDataLoader``) yields per pass, so a Lightning epoch and an estimator's epoch are the
same -- and ``epochs`` epochs are ``T = ceil(epochs * int(1 / q))`` steps (``epochs`` may
be fractional).
"""

from __future__ import annotations

import functools
import math
import sys
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tqdm.auto import tqdm

from dp_proto.exceptions import PrivacyBudgetExceededError
from dp_proto.privacy.calibration import check_delta, check_epsilon, check_sampling_rate
from dp_proto.privacy.ledger import PrivacyEvent, PrivacyLedger, dp_sgd_event

__all__ = [
    "CALIBRATIONS",
    "BudgetedEpochs",
    "DPSGDPlan",
    "calibrate_noise_multiplier",
    "check_dp_sgd_settings",
    "noise_multiplier_for",
    "paper_noise_multiplier",
    "sgd_steps",
    "steps_per_epoch",
    "warn_noisy_size",
]

#: ``"ledger"``: the smallest noise multiplier the ledger's accountant certifies for the
#: whole run; ``"paper"``: the formula of Brinkrolf, Göpfert & Hammer (2019), for
#: reproduction (the ledger then reports the epsilon it actually certifies).
CALIBRATIONS = ("ledger", "paper")


def steps_per_epoch(sampling_rate: float) -> int:
    """``int(1 / q)``: the steps of one epoch, as many as Opacus' Poisson loader yields per pass."""
    return max(int(1 / check_sampling_rate(sampling_rate)), 1)


def sgd_steps(epochs: float, sampling_rate: float) -> int:
    """``T = ceil(epochs * int(1 / q))``: the DP-SGD steps of ``epochs`` epochs at rate ``q``."""
    if isinstance(epochs, bool) or not isinstance(epochs, (int, float)) or not epochs > 0 or not math.isfinite(epochs):
        raise ValueError(f"epochs must be a finite number > 0, got {epochs!r}")
    return max(math.ceil(epochs * steps_per_epoch(sampling_rate) - 1e-9), 1)


def paper_noise_multiplier(epsilon_sgd: float, delta: float, sampling_rate: float, steps: int) -> float:
    """The ``sigma = 2 q sqrt(T log(1/delta)) / epsilon2`` of Brinkrolf, Göpfert & Hammer (2019) (an unproven constant
    ``c2 = 2`` in Abadi et al.'s Thm 1; the ledger certifies its actual epsilon)."""
    epsilon_sgd = check_epsilon(epsilon_sgd, "epsilon for DP-SGD")
    delta = check_delta(delta, allow_zero=False)
    return 2.0 * sampling_rate * math.sqrt(steps * math.log(1.0 / delta)) / epsilon_sgd


def _total_epsilon(
    prior: Sequence[PrivacyEvent],
    sigma: float,
    q: float,
    steps: int,
    delta: float,
    accountant: str,
    discretization: float = 1e-4,
) -> float:
    return PrivacyLedger.epsilon_of([*prior, dp_sgd_event(sigma, q, steps)], delta, accountant, discretization)


#: Largest noise multiplier the fast (RDP) bracket tries before the ledger's accountant takes over.
_SIGMA_FAST_MAX = 1e4
#: Largest noise multiplier tried at all: beyond it no setting is called feasible.
_SIGMA_MAX = 1e6


def _smallest_sigma(feasible, hi: float, rtol: float) -> float:
    """Smallest sigma in (0, hi] with ``feasible(sigma)``, for monotone ``feasible``;
    ``feasible(hi)`` must hold."""
    lo = hi / 2.0
    while feasible(lo):
        hi, lo = lo, lo / 2.0
        if lo < 1e-3:
            return hi
    while hi - lo > rtol * hi:
        mid = math.sqrt(lo * hi)
        if feasible(mid):
            hi = mid
        else:
            lo = mid
    return hi


def calibrate_noise_multiplier(
    target_epsilon: float,
    delta: float,
    sampling_rate: float,
    steps: int,
    *,
    prior_events: Sequence[PrivacyEvent] = (),
    accountant: str = "pld",
    rtol: float = 1e-3,
) -> float:
    """Smallest ``sigma`` such that ``prior_events`` followed by ``steps`` Poisson-subsampled
    Gaussian steps (rate ``sampling_rate``, multiplier ``sigma``) are
    ``(target_epsilon, delta)``-DP according to the ledger's accountant.

    The search first brackets with a fast valid bound (basic composition of the prior
    events with the RDP epsilon of the steps), then refines with the ledger's accountant
    to 1 %. Below sigma = 0.5 (very large epsilons) PLDs get expensive and the bracketed
    value is returned: still valid, only slightly conservative. Results are cached (the
    search is deterministic), so cross-validation folds with equal settings calibrate once.

    For targets so small that the fast bound cannot certify them (its RDP conversion
    has a floor of about ``log(1/delta) / alpha_max``), the bracket comes from the ledger's
    accountant directly (log-space bisection up to sigma = 1e6), so every budget the
    accountant can certify is calibrated: on scikit-learn's digits, DP-GMLVQ at epsilon
    0.002 gets sigma of about 177.

    Raises ``ValueError`` if the prior events alone spend the target (naming what they
    spend) or if even sigma = 1e6 exceeds it (naming that run's epsilon, which is above
    the target).
    """
    return _calibrate_cached(
        float(target_epsilon),
        float(delta),
        float(sampling_rate),
        int(steps),
        tuple(prior_events),
        accountant,
        float(rtol),
    )


@functools.lru_cache(maxsize=256)
def _calibrate_cached(
    target_epsilon: float,
    delta: float,
    sampling_rate: float,
    steps: int,
    prior_events: tuple[PrivacyEvent, ...],
    accountant: str,
    rtol: float,
) -> float:
    target_epsilon = check_epsilon(target_epsilon, "target epsilon")
    delta = check_delta(delta, allow_zero=False)

    def feasible_with(acc: str, discretization: float = 1e-4):
        return lambda sigma: (
            _total_epsilon(prior_events, sigma, sampling_rate, steps, delta, acc, discretization) <= target_epsilon
        )

    # Fast, valid upper bound for the bracket: basic composition of the prior events'
    # epsilon with the RDP epsilon of the SGD steps (deltas split when the prior has one).
    prior_ledger = PrivacyLedger()
    if prior_events:
        prior_ledger.spend(*prior_events)
    prior_pure = all(e.pure_epsilon is not None for e in prior_events)
    prior_eps = prior_ledger.get_epsilon(0.0 if prior_pure else delta / 2)
    sgd_delta = delta if prior_pure else delta / 2

    def fast_ok(sigma: float) -> bool:
        return prior_eps + _total_epsilon((), sigma, sampling_rate, steps, sgd_delta, "rdp") <= target_epsilon

    prior_tight = PrivacyLedger.epsilon_of(prior_events, delta, accountant) if prior_events else 0.0
    if prior_tight >= target_epsilon:
        raise ValueError(
            f"epsilon = {target_epsilon:g} is too small for these settings: the initialisation alone "
            f"spends {prior_tight:.4g} at delta = {delta:g}; choose a larger epsilon or a smaller init_fraction"
        )
    fine = feasible_with(accountant)
    hi = 1.0
    while hi <= _SIGMA_FAST_MAX and not fast_ok(hi):
        hi *= 2.0
    if hi <= _SIGMA_FAST_MAX:
        sigma = _smallest_sigma(fast_ok, hi, rtol)
        if sigma < 0.5:  # PLDs of nearly noiseless steps are expensive; sigma is valid as it is
            return sigma
        # Refine on a coarser (still pessimistic, so still valid) PLD grid for speed, then
        # confirm on the ledger's own grid.
        coarse = feasible_with(accountant, 1e-3)
        if coarse(sigma):
            sigma = _smallest_sigma(coarse, sigma, max(rtol, 1e-2))
        while not fine(sigma):  # pragma: no cover - coarse grids over-estimate epsilon
            sigma *= 1.01
    else:
        # The fast bound cannot certify an epsilon this small (basic composition with the
        # prior, and RDP's conversion floor log(1/delta) / (alpha - 1)): bracket with the
        # ledger's own accountant, which can.
        if not fine(_SIGMA_MAX):  # so the epsilon named here exceeds the target
            smallest = _total_epsilon(prior_events, _SIGMA_MAX, sampling_rate, steps, delta, accountant)
            raise ValueError(
                f"epsilon = {target_epsilon:g} is too small for these settings: the initialisation and "
                f"DP-SGD with noise multiplier {_SIGMA_MAX:g} already spend {smallest:.4g} at "
                f"delta = {delta:g}; choose a larger epsilon, a smaller init_fraction or fewer steps"
            )
        lo, hi = 1.0, _SIGMA_MAX  # bisect in log space to a factor 2 (fine(hi) holds)
        while hi > 2.0 * lo:
            mid = math.sqrt(lo * hi)
            lo, hi = (lo, mid) if fine(mid) else (mid, hi)
        sigma = hi
    # The coarse grid over-estimates epsilon (by more at small epsilons): take the slack
    # back on the ledger's own grid, walking down in 5 % steps, then bisecting.
    lo, hi = 0.95 * sigma, sigma
    while fine(lo):
        hi, lo = lo, 0.95 * lo
    for _ in range(4):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if fine(mid) else (mid, hi)
    return hi


def noise_multiplier_for(
    calibration: str,
    epsilon: float,
    delta: float,
    sampling_rate: float,
    steps: int,
    *,
    prior_events: Sequence[PrivacyEvent] = (),
) -> float:
    """The noise multiplier of a DP-SGD run that follows ``prior_events`` (e.g. the DP
    initialisation) within a total ``(epsilon, delta)``.

    ``calibration="ledger"``: ``calibrate_noise_multiplier`` on the whole run;
    ``"paper"``: ``paper_noise_multiplier`` with ``epsilon2 = epsilon`` minus the
    prior events' epsilon (basic composition, as in Brinkrolf, Göpfert & Hammer (2019)).
    """
    if calibration == "ledger":
        return calibrate_noise_multiplier(epsilon, delta, sampling_rate, steps, prior_events=prior_events)
    if calibration == "paper":
        prior = PrivacyLedger.epsilon_of(prior_events, 0.0) if prior_events else 0.0
        return paper_noise_multiplier(epsilon - prior, delta, sampling_rate, steps)
    raise ValueError(f"calibration must be 'ledger' or 'paper', got {calibration!r}")


def check_dp_sgd_settings(epsilon: float, delta: float, sampling_rate: float) -> None:
    """Clear errors for public settings that cannot give a private model: epsilon <= 0,
    delta outside (0, 1), a sampling rate outside (0, 1] (``ValueError``).

    The private ``n`` is not looked at: an error or warning whose presence depends on
    one record would tell neighbouring data sets apart. See ``warn_noisy_size`` for
    the same checks on a released (noisy) record count."""
    check_epsilon(epsilon)
    check_delta(delta, allow_zero=False)
    check_sampling_rate(sampling_rate)


def warn_noisy_size(noisy_n: float, sampling_rate: float, delta: float, *, stacklevel: int = 3) -> None:
    """Warnings about the data size computed from a *released* noisy count ``noisy_n``
    (post-processing, so they reveal nothing beyond the release): an expected batch
    ``q n~ < 1``, or ``delta >= 1 / n~``."""
    if sampling_rate * noisy_n < 1:
        warnings.warn(
            f"sampling_rate {sampling_rate:g} with a noisy record count of about {noisy_n:.0f} gives "
            f"an expected batch below one record; most DP-SGD steps will see no data",
            UserWarning,
            stacklevel=stacklevel,
        )
    if delta * noisy_n >= 1:
        warnings.warn(
            f"delta = {delta:g} is not below 1/n for the noisy record count n~ = {noisy_n:.0f}: a "
            f"mechanism may then publish a whole record with probability delta; use delta << 1/n",
            UserWarning,
            stacklevel=stacklevel,
        )


@dataclass(frozen=True)
class DPSGDPlan:
    """The public recipe of one DP-SGD run within a total ``(epsilon, delta)``.

    Build it once from the run's settings; the estimators, the Lightning experiment and
    the DP anonymizer all take their ledger, their step count and their noise multiplier
    from it, and the Poisson data loader its rate (``sampling_rate``).

    Attributes
    ----------
    epsilon : float > 0
        The total epsilon of the run (releases before training and DP-SGD).
    delta : float in (0, 1)
        The total delta of the run.
    sampling_rate : float in (0, 1]
        ``q``, the Poisson sampling rate of every step.
    epochs : float > 0
        Training length: ``steps = ceil(epochs * steps_per_epoch)``.
    init_fraction : float in [0, 1), default 0.2
        Share of ``epsilon`` for the releases before DP-SGD (``init_epsilon``): the
        DP class-mean initialisation or the anonymizer's private prior.
    calibration : {"ledger", "paper"}, default "ledger"
        See ``CALIBRATIONS``. Only ``"ledger"`` gives the ledger a budget (a run with
        the paper's formula may certify more than ``epsilon``; the ledger says how much).
    """

    epsilon: float
    delta: float
    sampling_rate: float
    epochs: float
    init_fraction: float = 0.2
    calibration: str = "ledger"

    def __post_init__(self) -> None:
        check_dp_sgd_settings(self.epsilon, self.delta, self.sampling_rate)
        object.__setattr__(self, "epsilon", float(self.epsilon))
        object.__setattr__(self, "delta", float(self.delta))
        object.__setattr__(self, "sampling_rate", float(self.sampling_rate))
        sgd_steps(self.epochs, self.sampling_rate)  # checks epochs
        if isinstance(self.init_fraction, bool) or not 0 <= self.init_fraction < 1:
            raise ValueError(f"init_fraction must lie in [0, 1), got {self.init_fraction!r}")
        if self.calibration not in CALIBRATIONS:
            raise ValueError(f"calibration must be one of {CALIBRATIONS}, got {self.calibration!r}")

    @property
    def steps_per_epoch(self) -> int:
        """``int(1 / q)`` (``steps_per_epoch``)."""
        return steps_per_epoch(self.sampling_rate)

    @property
    def steps(self) -> int:
        """``T = ceil(epochs * steps_per_epoch)`` (``sgd_steps``)."""
        return sgd_steps(self.epochs, self.sampling_rate)

    @property
    def init_epsilon(self) -> float:
        """``init_fraction * epsilon``, the budget of the releases before DP-SGD."""
        return self.init_fraction * self.epsilon

    def new_ledger(self) -> PrivacyLedger:
        """An empty ledger for the run: budget ``(epsilon, delta)`` with the ledger calibration."""
        budget = (self.epsilon, self.delta) if self.calibration == "ledger" else None
        return PrivacyLedger(budget=budget, default_delta=self.delta)

    def noise_multiplier(self, prior_events: Sequence[PrivacyEvent] = ()) -> float:
        """The noise multiplier of the ``steps`` DP-SGD steps after ``prior_events``
        (the releases already in the run's ledger), ``noise_multiplier_for``."""
        return noise_multiplier_for(
            self.calibration, self.epsilon, self.delta, self.sampling_rate, self.steps, prior_events=tuple(prior_events)
        )

    def expected_batch_size(self, noisy_count: float) -> float:
        """The public normaliser ``q * max(n~, 1)`` of the noisy gradient sums, from a released
        noisy record count ``n~`` (post-processing; warns as ``warn_noisy_size``). Never
        ``q * n`` with the private ``n``."""
        noisy_count = max(float(noisy_count), 1.0)
        warn_noisy_size(noisy_count, self.sampling_rate, self.delta, stacklevel=4)
        return self.sampling_rate * noisy_count


class BudgetedEpochs:
    """The budgeted steps of a DP-SGD run: every step is spent in the ledger before it runs,
    and a step the budget refuses stops training cleanly.

    Iterating yields the step count of each epoch (``steps_per_epoch(q)``, the last one
    shorter, ``steps`` in all); before yielding, the epoch's Poisson-subsampled Gaussian
    steps are spent in ``ledger``. When the budget refuses an epoch, iteration ends there
    and ``stopped_by_budget`` is True: the ledger holds exactly the epochs that ran.
    Both DP-SGD engines of the private LVQ estimators run this loop. The Lightning modules
    use the same object step by step (``reserve`` an epoch's steps when it starts,
    ``record`` each step before its noise is drawn), so that a checkpoint in the middle
    of an epoch is exact.

    Parameters
    ----------
    ledger : PrivacyLedger
        Where every step is spent (its budget, if any, is enforced).
    noise_multiplier : float
        ``sigma / C`` of every step.
    sampling_rate : float
        The Poisson sampling rate ``q``.
    steps : int or None, default None
        Total steps of the run; None for the step-by-step use of the Lightning modules.
    progress : bool, default False
        Iterating shows a bar over the epochs on stderr (after two seconds); it counts
        the planned epochs, a public quantity.
    per_step : bool, default False
        Iterating only checks (``reserve``) each epoch's steps against the budget; the
        training loop then spends every step with ``record(1)`` before its noise is drawn
        (the data-parallel engine: a run that dies mid-epoch is charged only the steps
        that started).

    Attributes
    ----------
    stopped_by_budget : bool
        Whether the budget refused an epoch.
    """

    def __init__(
        self,
        ledger: PrivacyLedger,
        noise_multiplier: float,
        sampling_rate: float,
        steps: int | None = None,
        *,
        progress: bool = False,
        per_step: bool = False,
    ) -> None:
        self.ledger, self.noise_multiplier = ledger, float(noise_multiplier)
        self.per_step = bool(per_step)
        self.sampling_rate = float(sampling_rate)
        self.steps = None if steps is None else int(steps)
        self.progress = bool(progress)
        self.stopped_by_budget = False

    def reserve(self, count: int) -> bool:
        """Whether ``count`` more steps fit the budget (records nothing; a refusal stops).
        Also without a budget it pays: per-step records within the checked plan then need
        no new composition."""
        return self._within_budget(self.ledger.check, count)

    def record(self, count: int) -> bool:
        """Spend ``count`` steps before they run; False (and stopped) if the budget refuses."""
        return self._within_budget(self.ledger.spend, count)

    def _within_budget(self, ledger_call, count: int) -> bool:
        if not self.stopped_by_budget:
            try:
                ledger_call(dp_sgd_event(self.noise_multiplier, self.sampling_rate, count))
            except PrivacyBudgetExceededError:
                self.stopped_by_budget = True
        return not self.stopped_by_budget

    def __iter__(self) -> Iterator[int]:
        if self.steps is None:
            raise TypeError("BudgetedEpochs without steps= has no epochs to iterate; use reserve() / record()")
        per_epoch, done = steps_per_epoch(self.sampling_rate), 0
        # the bar counts public quantities only (epochs of the planned steps)
        bar = tqdm(total=math.ceil(self.steps / per_epoch), desc="DP-SGD", unit="epoch", file=sys.stderr,
                   delay=2.0, disable=not self.progress, leave=False)  # fmt: skip
        try:
            while done < self.steps:
                count = min(per_epoch, self.steps - done)
                if self.per_step:  # check the epoch (only a budget can refuse it); steps are spent one by one
                    if self.ledger.budget is not None and not self.reserve(count):
                        return
                elif not self.record(count):
                    return
                yield count
                done += count
                bar.update()
        finally:
            bar.close()
