"""The public recipe of a DP-SGD run: ``DPSGDPlan``, and the noise calibration behind it.

A DP-SGD run in dp-proto (private LVQ estimators, the Lightning experiment, the DP
anonymizer) is: releases before training that spend ``init_fraction * epsilon`` (the DP
class-mean initialisation, or the anonymizer's private prior), then ``T`` Poisson-subsampled
Gaussian steps at rate ``q`` whose noise multiplier is calibrated so that the whole run is
``(epsilon, delta)``-DP. Everything here is public: it never looks at the data.

Steps. One epoch is ``int(1 / q)`` steps -- the number of batches the Poisson loader
(``dp_proto.privacy.PoissonDataLoader``, as Opacus' ``DPDataLoader``) yields per pass, so a Lightning epoch and an estimator's epoch are the
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

from scipy.special import log_ndtr, ndtr
from tqdm import tqdm

from dp_proto.exceptions import PrivacyBudgetExceededError
from dp_proto.privacy.calibration import check_delta, check_epsilon, check_sampling_rate
from dp_proto.privacy.events import PLD_DISCRETISATION, PLD_NOISE_MULTIPLIER_MIN
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


#: Largest noise multiplier tried at all: beyond it no setting is called feasible.
_SIGMA_MAX = 1e6
#: Below this noise multiplier (epsilons of about 8 and more per run) PLDs get expensive;
#: the search there takes the RDP bound (valid, slightly conservative), as the ledger does.
_SIGMA_PLD_MIN = PLD_NOISE_MULTIPLIER_MIN
#: Evaluations the search may spend before it settles for the best feasible sigma so far.
_MAX_EVALUATIONS = 40


def _search_discretization(target_epsilon: float) -> float:
    """PLD grid of the calibration search: relative to the target (``1e-3 epsilon``),
    between the ledger's ``1e-4`` and ``1e-3``. Any grid gives a valid (pessimistic)
    bound; a coarser one is cheaper to build."""
    return min(max(PLD_DISCRETISATION, 1e-3 * target_epsilon), 1e-3)


def _gaussian_dp_delta(mu: float, epsilon: float) -> float:
    """``delta(epsilon)`` of ``mu``-Gaussian DP (Dong, Roth & Su 2022, Cor. 2.13)."""
    # e^eps Phi(b) as exp(eps + log Phi(b)): no overflow at large epsilon
    return float(ndtr(-epsilon / mu + mu / 2) - math.exp(epsilon + log_ndtr(-epsilon / mu - mu / 2)))


def _initial_sigma(target_epsilon: float, delta: float, q: float, steps: int) -> float:
    """Starting point of the search: the sigma whose central-limit ``mu = q sqrt(T (e^{1/sigma^2}
    - 1))`` (Bu et al. 2020) is ``(target, delta)``-DP as ``mu``-GDP. Only a guess."""
    lo, hi = 1e-6, 1e3  # delta(mu) increases with mu; bisect in log space
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if _gaussian_dp_delta(mid, target_epsilon) < delta else (lo, mid)
    ratio = lo * lo / (q * q * steps)
    return 1.0 / math.sqrt(math.log1p(ratio)) if ratio > 0 else _SIGMA_MAX


def _smallest_feasible(excess, guess: float, rtol: float, floor: float) -> float | None:
    """Smallest sigma in ``[floor, _SIGMA_MAX]`` with ``excess(sigma) <= 0`` to ``rtol``, for
    ``excess = log epsilon(sigma) - log target`` (decreasing, smooth in ``log sigma``).

    Secant steps in ``(log sigma, excess)`` aimed just inside the budget until the root
    is bracketed, then regula falsi with the Illinois rule. Stops at a feasible sigma whose epsilon uses at least ``1 - rtol`` of the
    target, or whose infeasible neighbour is within ``rtol``. Returns ``floor`` if that
    is feasible, None if ``_SIGMA_MAX`` is not."""
    aim = math.log1p(-rtol / 2)  # the excess to steer for: inside the budget by rtol / 2
    x_min, x_max = math.log(floor), math.log(_SIGMA_MAX)
    lo: tuple[float, float] | None = None  # (log sigma, excess): infeasible, largest sigma
    hi: tuple[float, float] | None = None  # feasible, smallest sigma
    prev: tuple[float, float] | None = None
    moved = ""  # which end of the bracket the last evaluation moved
    x = min(max(math.log(max(guess, 1e-300)), x_min), x_max)
    for _ in range(_MAX_EVALUATIONS):
        g = excess(math.exp(x))
        side = "hi" if g <= 0 else "lo"
        if side == "hi":
            hi = (x, g) if hi is None or x < hi[0] else hi
            if g >= math.log1p(-rtol) or x <= x_min:
                break
        else:
            lo = (x, g) if lo is None or x > lo[0] else lo
            if x >= x_max:
                return None
        if lo is not None and hi is not None and hi[0] - lo[0] <= math.log1p(rtol):
            break
        if lo is not None and hi is not None and math.isfinite(lo[1]):
            # regula falsi on the bracket; Illinois: halve the excess of an end that stayed
            g_lo, g_hi = (
                lo[1] / (2.0 if side == moved == "hi" else 1.0),
                hi[1] / (2.0 if side == moved == "lo" else 1.0),
            )
            x_new = lo[0] + (aim - g_lo) * (hi[0] - lo[0]) / (g_hi - g_lo)
            x_new = min(max(x_new, lo[0] + 1e-4 * (hi[0] - lo[0])), hi[0] - 1e-4 * (hi[0] - lo[0]))
        elif lo is not None and hi is not None:  # epsilon infinite at lo: bisect
            x_new = 0.5 * (lo[0] + hi[0])
        elif prev is not None and math.isfinite(prev[1]) and math.isfinite(g) and prev[1] != g:
            x_new = x + (aim - g) * (x - prev[0]) / (g - prev[1])
        else:  # one usable point: epsilon falls about like sigma^-1.5
            x_new = x + (g - aim) / 1.5 if math.isfinite(g) else x + (2.0 if g > 0 else -2.0)
        moved = side
        prev = (x, g)
        x = min(max(x_new, x - 3.0, x_min), x + 3.0, x_max)
    return math.exp(hi[0]) if hi is not None else None


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

    A safeguarded secant search in ``log sigma`` from a central-limit guess, each step one
    composition by the accountant; with PLDs on a grid of ``1e-3 epsilon`` (between the
    ledger's ``1e-4`` and ``1e-3``), a valid pessimistic bound; the ledger's own, finer
    composition has certified at most the target in every setting tested (a finer grid
    is not guaranteed to be tighter). It stops once the run spends at
    least ``1 - rtol`` of the target. Below sigma = 0.4 (epsilons of about 12 and
    more per run) PLDs get expensive and the RDP bound (basic composition with the prior
    events) is searched instead: still valid, slightly conservative. Results are
    cached per process (the search is deterministic), so cross-validation folds with
    equal settings calibrate once. Timings: docs/dpsgd.md ("Reproduced results").

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
    prior_tight = PrivacyLedger.epsilon_of(prior_events, delta, accountant) if prior_events else 0.0
    if prior_tight >= target_epsilon:
        raise ValueError(
            f"epsilon = {target_epsilon:g} is too small for these settings: the initialisation alone "
            f"spends {prior_tight:.4g} at delta = {delta:g}; choose a larger epsilon or a smaller init_fraction"
        )
    grid = _search_discretization(target_epsilon)
    log_target = math.log(target_epsilon)

    def excess(sigma: float) -> float:
        eps = _total_epsilon(prior_events, sigma, sampling_rate, steps, delta, accountant, grid)
        return math.log(eps) - log_target if eps > 0 else -math.inf

    guess = _initial_sigma(target_epsilon - prior_tight, delta, sampling_rate, steps)
    floor = _SIGMA_PLD_MIN if accountant == "pld" else 1e-3
    sigma = _smallest_feasible(excess, guess, rtol, floor)
    if sigma is None:
        smallest = _total_epsilon(prior_events, _SIGMA_MAX, sampling_rate, steps, delta, accountant)
        raise ValueError(
            f"epsilon = {target_epsilon:g} is too small for these settings: the initialisation and "
            f"DP-SGD with noise multiplier {_SIGMA_MAX:g} already spend {smallest:.4g} at "
            f"delta = {delta:g}; choose a larger epsilon, a smaller init_fraction or fewer steps"
        )
    if sigma > floor or accountant != "pld":
        return sigma
    return _rdp_below_floor(target_epsilon, delta, sampling_rate, steps, prior_events, rtol)


def _rdp_below_floor(
    target_epsilon: float,
    delta: float,
    sampling_rate: float,
    steps: int,
    prior_events: tuple[PrivacyEvent, ...],
    rtol: float,
) -> float:
    """Sigma below ``_SIGMA_PLD_MIN`` (which the PLD accountant certifies) by a valid RDP bound:
    basic composition of the prior events' epsilon with the RDP epsilon of the steps
    (deltas split when the prior has one); ``_SIGMA_PLD_MIN`` if RDP certifies no less."""
    prior_ledger = PrivacyLedger()
    if prior_events:
        prior_ledger.spend(*prior_events)
    prior_pure = all(e.pure_epsilon is not None for e in prior_events)
    prior_eps = prior_ledger.get_epsilon(0.0 if prior_pure else delta / 2)
    sgd_delta = delta if prior_pure else delta / 2
    budget = target_epsilon - prior_eps
    if budget <= 0:
        return _SIGMA_PLD_MIN

    def excess(sigma: float) -> float:
        return math.log(_total_epsilon((), sigma, sampling_rate, steps, sgd_delta, "rdp")) - math.log(budget)

    sigma = _smallest_feasible(excess, _SIGMA_PLD_MIN, rtol, 1e-3)
    return min(sigma, _SIGMA_PLD_MIN) if sigma is not None else _SIGMA_PLD_MIN


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
    prior events' epsilon (basic composition, as in Brinkrolf, Göpfert & Hammer (2019);
    at ``delta`` when a prior event is not pure).
    """
    if calibration == "ledger":
        return calibrate_noise_multiplier(epsilon, delta, sampling_rate, steps, prior_events=prior_events)
    if calibration == "paper":
        pure = all(e.pure_epsilon is not None for e in prior_events)
        prior = PrivacyLedger.epsilon_of(prior_events, 0.0 if pure else delta) if prior_events else 0.0
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
