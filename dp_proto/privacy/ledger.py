"""The privacy ledger: every release of a run, composed by a real accountant.

A ``PrivacyLedger`` records ``PrivacyEvent`` s (Laplace and Gaussian
releases, pure-epsilon releases such as report-noisy-max, and Poisson-subsampled
Gaussian steps of DP-SGD) and reports one epsilon for a given delta:

* ``accountant="pld"`` (default): privacy loss distributions (dp-accounting,
  pessimistic discretisation, so the reported epsilon is an upper bound) composed
  exactly; tight for mixed runs such as Laplace initialisation followed by DP-SGD.
* ``accountant="rdp"``: Renyi DP (dp-accounting's ``RdpAccountant``), the
  accountant Opacus uses; looser, kept for comparison.

Neighbouring relation: add/remove one record throughout.

With an optional ``budget=(epsilon, delta)`` the ledger refuses a release that would
exceed it, *before* any noise is drawn: mechanisms call ``PrivacyLedger.spend``
first. ``state_dict``/``load_state_dict`` carry the ledger through checkpoints, and
``PrivacyLedger.attach`` stores its summary on a released model.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld
from dp_accounting.rdp import rdp_privacy_accountant as rdp

from dp_proto.exceptions import PrivacyBudgetExceededError
from dp_proto.privacy.calibration import check_delta, check_epsilon
from dp_proto.privacy.events import (
    MAX_EVENT_EPSILON,
    PLD_DISCRETISATION,
    EventKind,
    PrivacyEvent,
    dp_sgd_event,
)

__all__ = [
    "PrivacyEvent",
    "PrivacyLedger",
    "SharedLedger",
    "check_shared_ledger",
    "EventKind",
    "dp_sgd_event",
    "renyi_epsilon",
    "MAX_EVENT_EPSILON",
]

# Fractions of delta given to the discrete Gaussian releases when the PLD accountant
# composes them with the rest by basic composition (any split is valid; the best is kept).
_DELTA_SPLITS = tuple(1.0 / (1.0 + math.exp(-z / 4.0)) for z in range(-40, 41))
_NOISE_SOURCES = ("fresh", "secure", "reproducible")
# Sizes of each ledger's caches of compositions and epsilons.
_COMPOSED_CACHE_SIZE = 16
_EPSILON_CACHE_SIZE = 512


def renyi_epsilon(events: Sequence[PrivacyEvent], delta: float) -> float:
    """Epsilon at ``delta`` of ``events`` composed by their Renyi-DP curves (dp-accounting's
    ``RdpAccountant``); ``approx`` events have none and raise ``ValueError``."""
    return float(_renyi_epsilons(events, (delta,))[0])


def _renyi_epsilons(events: Sequence[PrivacyEvent], deltas: Sequence[float]) -> np.ndarray:
    """``renyi_epsilon`` of ``events`` at each of ``deltas``, composing once (memoised: a
    calibration asks for the same releases before its DP-SGD steps again and again)."""
    return _renyi_epsilons_cached(tuple(events), tuple(float(d) for d in deltas)).copy()


@functools.lru_cache(maxsize=256)
def _renyi_epsilons_cached(events: tuple[PrivacyEvent, ...], deltas: tuple[float, ...]) -> np.ndarray:
    acc = rdp.RdpAccountant()
    with _quiet_absl():  # orders that do not converge are skipped, which is valid
        for e in events:
            acc.compose(e.to_dp_event())
        return np.array([acc.get_epsilon(d) for d in deltas], dtype=float)


def pld_epsilons(distribution: pld.PrivacyLossDistribution, deltas: Sequence[float]) -> np.ndarray:
    """``distribution.get_epsilon_for_delta(delta)`` for every delta of ``deltas``.

    dp-accounting answers one delta per call with a Python loop over the PLD's grid
    (docs/privacy-core.md, "The ledger"); this reads the grid once (the tail
    masses of both neighbouring distributions are cumulative sums) and inverts the
    hockey-stick divergence for each delta by the same rule, vectorised: the same
    values up to rounding (the tests compare them to 1e-9). It reads dp-accounting's
    private PMF fields; a version without them gets the public per-delta method.
    """
    try:
        remove = _pmf_epsilons(distribution._pmf_remove, deltas)
        if distribution._symmetric:
            return remove
        return np.maximum(remove, _pmf_epsilons(distribution._pmf_add, deltas))
    except AttributeError:  # a dp-accounting whose internals moved
        return np.array([distribution.get_epsilon_for_delta(d) for d in deltas], dtype=float)


def _pmf_epsilons(pmf: pld_pmf.PLDPmf, deltas: Sequence[float]) -> np.ndarray:
    """Smallest epsilon >= 0 whose hockey-stick divergence of ``pmf`` is at most each delta.

    With the losses ``l_0 > l_1 > ...`` and ``U_k``, ``L_k`` the masses of the first k
    atoms under the two distributions (``U_k`` with the infinite loss's mass), the
    divergence at ``eps`` in ``[l_k, l_{k-1})`` is ``U_k - exp(eps) L_k``; the answer is
    in the first segment ``k`` whose solution ``log((U_k - delta) / L_k)`` is ``>= l_k``.
    """
    dense = pmf if isinstance(pmf, pld_pmf.DensePLDPmf) else pmf.to_dense_pmf()
    probs = np.flip(np.asarray(dense._probs, dtype=float))
    losses = (dense._lower_loss + np.arange(probs.size - 1, -1, -1)) * dense._discretization
    infinity_mass = float(dense._infinity_mass)
    with np.errstate(over="ignore"):
        upper = infinity_mass + np.concatenate(([0.0], np.cumsum(probs)))
        lower = np.concatenate(([0.0], np.cumsum(np.exp(-losses) * probs)))
    out = np.empty(len(deltas))
    for j, delta in enumerate(deltas):
        if infinity_mass > delta:
            out[j] = math.inf
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            solution = np.log((upper[:-1] - delta) / lower[:-1])
        in_segment = (upper[:-1] > delta) & (lower[:-1] > 0) & (solution >= losses)
        # losses so large that exp(-loss) underflows: the divergence is reached on the atom
        underflow = (upper[1:] >= delta) & (lower[1:] == 0)
        k = int(np.argmax(in_segment)) if in_segment.any() else probs.size
        k_underflow = int(np.argmax(underflow)) if underflow.any() else probs.size
        if k_underflow < k:
            out[j] = max(0.0, float(losses[k_underflow]))
        elif upper[k] <= lower[k] + delta:
            out[j] = 0.0
        else:
            out[j] = math.log((upper[k] - delta) / lower[k])
    return out


@contextlib.contextmanager
def _quiet_absl():
    """Silence dp-accounting's absl warnings about RDP orders it excludes."""
    from absl import logging as absl_logging

    level = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.ERROR)
    try:
        yield
    finally:
        absl_logging.set_verbosity(level)


class PrivacyLedger:
    """Records every release of a run and composes them into one guarantee.

    Parameters
    ----------
    budget : (epsilon, delta), optional
        Releases that would make ``get_epsilon(delta) > epsilon`` are refused with
        ``PrivacyBudgetExceededError`` before noise is drawn.
    accountant : {"pld", "rdp"}, default "pld"
        ``"pld"``: privacy loss distributions (dp-accounting, pessimistic
        discretisation), the tight default; ``"rdp"``: the Renyi-DP bound that Opacus
        uses. Discrete Gaussian events are composed by their Renyi-DP curve and joined
        to the others by basic composition over the best split of delta.
    default_delta : float, optional
        Delta used by ``get_epsilon`` when none is given (default: the budget's, else
        1e-5).

    Attributes
    ----------
    budget : (epsilon, delta) or None
        The budget that ``check`` and ``spend`` enforce.
    accountant : str
        ``"pld"`` or ``"rdp"``.
    default_delta : float
        Delta of ``get_epsilon`` without an argument.
    events : tuple of PrivacyEvent
        Every release recorded so far, in order.

    References
    ----------
    Mironov (2017). Renyi differential privacy. *IEEE CSF 2017*.

    Google's dp-accounting library: the privacy loss distribution and RDP accountants.

    Examples
    --------
    A Laplace release of a count (sensitivity 1) at epsilon 0.5, recorded before its
    noise is drawn:

    >>> import torch
    >>> from dp_proto.privacy import LaplaceEvent, PrivacyLedger, laplace_mechanism
    >>> ledger = PrivacyLedger(budget=(1.0, 1e-5))
    >>> noisy = laplace_mechanism(torch.tensor([42.0]), 1.0, 0.5, ledger=ledger, name="count")
    >>> round(ledger.get_epsilon(), 3), round(ledger.remaining(), 3)
    (0.5, 0.5)
    >>> ledger.spend(LaplaceEvent(5.0, name="counts"))  # Lap(5) on a count: epsilon 0.2
    >>> round(ledger.get_epsilon(), 3)
    0.7
    """

    def __init__(
        self,
        budget: tuple[float, float] | None = None,
        *,
        accountant: Literal["pld", "rdp"] = "pld",
        default_delta: float | None = None,
    ) -> None:
        if accountant not in ("pld", "rdp"):
            raise ValueError(f"accountant must be 'pld' or 'rdp', got {accountant!r}")
        if budget is not None:
            if len(budget) != 2:
                raise ValueError(f"budget must be (epsilon, delta), got {budget!r}")
            budget = (check_epsilon(budget[0], "budget epsilon"), check_delta(budget[1], "budget delta"))
        self.budget = budget
        self.accountant = accountant
        self.default_delta = (
            check_delta(default_delta) if default_delta is not None else (budget[1] if budget is not None else 1e-5)
        )
        self._events: list[PrivacyEvent] = []
        self._cache: dict[float, float] = {}
        # This ledger's compositions (recorded events + a tail -> PLD) and epsilons
        # (events, delta, accountant -> epsilon); a check() and the spend() after it, or a
        # run's final get_epsilon after its budget check, compose once.
        self._composed: OrderedDict[tuple, pld.PrivacyLossDistribution] = OrderedDict()
        self._epsilons: OrderedDict[tuple, float] = OrderedDict()
        self._total_pld: pld.PrivacyLossDistribution | None = None  # PLD of self._events
        # PLD grid of every composition (epsilon_of may ask for a coarser, cheaper one)
        self._discretization = PLD_DISCRETISATION
        # (new events, PLD of self._events + them) of the last composition, valid until
        # self._events changes
        self._last_composed: tuple[tuple[PrivacyEvent, ...], Any] | None = None
        # Recorded events + the events of the last check() that passed: any run that is a
        # prefix of this plan is within the budget (composition only adds privacy loss).
        self._checked_plan: tuple[tuple[float, float] | None, list[PrivacyEvent]] | None = None
        # Where the releases' randomness came from (see dp_proto.privacy.randomness).
        self._noise_sources: set[str] = set()

    # -- recording --------------------------------------------------------------------
    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        return tuple(self._events)

    def _append(self, events: list[PrivacyEvent], event: PrivacyEvent) -> list[PrivacyEvent]:
        out = list(events)
        if out and out[-1].same_mechanism(event):  # merge repeats, e.g. consecutive SGD steps
            last = out.pop()
            event = last.with_count(last.count + event.count)
        out.append(event)
        return out

    def check(self, *events: PrivacyEvent) -> float:
        """Epsilon (at the budget's delta) the run would reach after ``events``;
        raises ``PrivacyBudgetExceededError`` if that exceeds the budget.
        Records nothing: use it to pre-check a multi-part release."""
        delta = self.budget[1] if self.budget is not None else self.default_delta
        after = self._epsilon(events, delta)
        if self.budget is not None and after > self.budget[0] * (1 + 1e-9):
            names = ", ".join(repr(e.name or e.kind) for e in events)
            raise PrivacyBudgetExceededError(
                f"release {names} refused: it would raise epsilon to {after:.4g} "
                f"(delta={delta:g}), above the budget {self.budget[0]:g}; "
                f"spent so far {self.get_epsilon(delta):.4g}"
            )
        plan = self._events
        for event in events:
            plan = self._append(plan, event)
        self._checked_plan = (self.budget, plan)
        return after

    def _within_checked_plan(self, events: Sequence[PrivacyEvent]) -> bool:
        """Whether recording ``events`` keeps the run a prefix of the last checked plan:
        the same mechanisms in the same order, the last one with at most its planned count."""
        if not events or self._checked_plan is None or self._checked_plan[0] != self.budget:
            return False
        plan = self._checked_plan[1]
        run = self._events
        for event in events:
            run = self._append(run, event)
        if len(run) > len(plan) or any(a != b for a, b in zip(run[:-1], plan[: len(run) - 1], strict=True)):
            return False
        last, planned = run[-1], plan[len(run) - 1]
        return last.same_mechanism(planned) and last.count <= planned.count

    def spend(self, *events: PrivacyEvent) -> None:
        """Check ``events`` together against the budget, then record them.
        Mechanisms call this before drawing noise.

        A run that stays a prefix of the last plan ``check`` accepted needs no new
        composition (e.g. DP-SGD checks all its steps once, then records them epoch by
        epoch)."""
        prechecked = self._within_checked_plan(events)
        if self.budget is not None and not prechecked:  # without a budget nothing needs composing now
            self.check(*events)
        if prechecked and (self._last_composed is None or self._last_composed[0] != tuple(events)):
            self._total_pld = None  # recomposed lazily from the (merged) events when asked
        elif self._total_pld is not None and self.accountant == "pld" and all(e.is_private for e in events):
            self._total_pld = self._composed_pld(events)  # keep the cached composition current
        for event in events:
            self._events = self._append(self._events, event)
        self._last_composed = None
        self._cache.clear()

    def note_noise_source(self, source: str) -> None:
        """Record where a release's randomness came from: ``"fresh"`` (a generator seeded
        from operating-system entropy), ``"secure"`` (``os.urandom`` directly) or
        ``"reproducible"`` (a seed or a caller's generator). The summary reports
        ``"noise": "reproducible"`` if any release was, so a released model says whether
        its noise can be replayed."""
        if source not in _NOISE_SOURCES:
            raise ValueError(f"noise source must be one of {_NOISE_SOURCES}, got {source!r}")
        self._noise_sources.add(source)

    @property
    def noise(self) -> str | None:
        """``"reproducible"`` if any release's noise was, else ``"fresh"`` or ``"secure"``
        (``"fresh"`` when both occur); None before any release."""
        for source in ("reproducible", "fresh", "secure"):
            if source in self._noise_sources:
                return source
        return None

    # -- reporting --------------------------------------------------------------------
    def get_epsilon(self, delta: float | None = None) -> float:
        """Epsilon of the whole run for ``delta`` (default: the ledger's delta)."""
        delta = self.default_delta if delta is None else check_delta(delta)
        if delta not in self._cache:  # cleared whenever an event is recorded
            self._cache[delta] = self._epsilon((), delta)
        return self._cache[delta]

    def _composed_pld(self, new: Sequence[PrivacyEvent]) -> pld.PrivacyLossDistribution | None:
        """PLD of the recorded events followed by ``new`` (composition is commutative,
        so merging a repeat into the last event gives the same distribution); discrete
        Gaussian releases left out (None if nothing is left)."""
        if not all(e.is_private for e in (*self._events, *new)):
            return None
        key = tuple(new)
        if self._last_composed is not None and self._last_composed[0] == key:
            return self._last_composed[1]  # spend() right after check(): composed already
        merged = self._events
        for event in new:
            merged = self._append(merged, event)
        shared_key = tuple(merged)
        if shared_key in self._composed:
            self._composed.move_to_end(shared_key)
            self._last_composed = (key, self._composed[shared_key])
            return self._composed[shared_key]
        if self._total_pld is None:
            for e in (e for e in self._events if e.has_pld):
                one = e.to_pld(self._discretization)
                self._total_pld = one if self._total_pld is None else self._total_pld.compose(one)
        total = self._total_pld
        for e in (e for e in new if e.has_pld):
            one = e.to_pld(self._discretization)
            total = one if total is None else total.compose(one)
        self._last_composed = (key, total)
        self._composed[shared_key] = total
        while len(self._composed) > _COMPOSED_CACHE_SIZE:
            self._composed.popitem(last=False)
        return total

    def _epsilon(self, new: Sequence[PrivacyEvent], delta: float) -> float:
        """Epsilon at ``delta`` of the recorded events followed by ``new`` (cached across
        ledgers: repeated fits with the same settings compose once)."""
        events = [*self._events, *new]
        if not events:
            return 0.0
        key = (tuple(events), float(delta), self.accountant)
        if key in self._epsilons:
            self._epsilons.move_to_end(key)
            return self._epsilons[key]
        eps = self._epsilon_uncached(events, new, delta)
        self._epsilons[key] = eps
        while len(self._epsilons) > _EPSILON_CACHE_SIZE:
            self._epsilons.popitem(last=False)
        return eps

    def _epsilon_uncached(self, events: list[PrivacyEvent], new: Sequence[PrivacyEvent], delta: float) -> float:
        if not all(e.is_private for e in events):
            return math.inf
        huge = [e.basic_composition_only for e in events]
        if any(huge):
            return self._epsilon_with_huge_events(events, huge, delta)
        basic = _basic_epsilon(events)
        if delta == 0:
            return basic  # only pure releases compose to a finite epsilon at delta 0
        if self.accountant == "rdp":
            eps = renyi_epsilon(events, delta)
        elif not all(e.has_pld for e in events):
            eps = self._epsilon_with_discrete_gaussians(events, new, delta)
        else:
            composed = self._composed_pld(new)
            eps = math.inf if composed is None else float(pld_epsilons(composed, (delta,))[0])
        return float(min(eps, basic))  # basic composition is always valid too

    def _epsilon_with_discrete_gaussians(
        self, events: list[PrivacyEvent], new: Sequence[PrivacyEvent], delta: float
    ) -> float:
        """PLD accountant with discrete Gaussian releases: those compose by their Renyi-DP
        curve to ``(eps_g, delta_g)``, the rest by its PLD to ``(eps_r, delta - delta_g)``,
        and the run is ``(eps_g + eps_r, delta)``-DP (basic composition) for every split;
        the smallest over a fixed grid of splits is reported. Without ``approx`` events the
        Renyi-DP composition of the whole run is valid too, and the smaller one is kept."""
        gaussians = [e for e in events if not e.has_pld]  # (all private here)
        rest = self._composed_pld(new)
        if rest is None:
            return renyi_epsilon(gaussians, delta)
        splits = np.array(_DELTA_SPLITS)  # (S,)
        eps = float(
            np.min(_renyi_epsilons(gaussians, list(delta * splits)) + pld_epsilons(rest, list(delta * (1.0 - splits))))
        )
        others = [e for e in events if e.has_pld]
        others_basic = _basic_epsilon(others)
        if math.isfinite(others_basic):  # the rest at delta 0: all of delta to the Gaussians
            eps = min(eps, renyi_epsilon(gaussians, delta) + others_basic)
        if all(e.has_renyi_curve for e in events):
            eps = min(eps, renyi_epsilon(events, delta))
        return eps

    def _epsilon_with_huge_events(self, events: list[PrivacyEvent], huge: list[bool], delta: float) -> float:
        """Basic composition of the releases beyond the PLD's range with the rest.

        ``(eps_rest, delta_rest)`` composed with ``(eps_i, delta_i)`` releases is
        ``(eps_rest + sum eps_i, delta_rest + sum delta_i)``-DP, valid for any mechanisms.
        """
        big = [e for e, h in zip(events, huge, strict=True) if h]
        rest = [e for e, h in zip(events, huge, strict=True) if not h]
        big_epsilon = sum(_release_epsilon(e) * e.count for e in big)
        rest_delta = delta - sum(e.delta_per_release * e.count for e in big)
        if not rest:
            return big_epsilon if rest_delta >= 0 else math.inf
        if rest_delta < 0 or (rest_delta == 0 and any(e.pure_epsilon is None for e in rest)):
            return math.inf
        return big_epsilon + PrivacyLedger.epsilon_of(rest, rest_delta, accountant=self.accountant)

    @staticmethod
    def epsilon_of(
        events: Sequence[PrivacyEvent],
        delta: float,
        accountant: str = "pld",
        discretization: float = PLD_DISCRETISATION,
    ) -> float:
        """Epsilon at ``delta`` of ``events`` composed, without a ledger or a budget.

        ``discretization`` (PLD only) trades speed for tightness; the result stays an
        upper bound for any value (pessimistic discretisation). A pure function of
        immutable events, memoised (plans and calibrations ask for the same run again).
        """
        return _epsilon_of(tuple(events), float(delta), accountant, float(discretization))

    def remaining(self) -> float:
        """Budget epsilon left (inf without a budget)."""
        if self.budget is None:
            return math.inf
        return max(self.budget[0] - self.get_epsilon(self.budget[1]), 0.0)

    def summary(self, delta: float | None = None) -> dict[str, Any]:
        """A JSON-serialisable summary: guarantee, budget, accountant and events."""
        delta = self.default_delta if delta is None else delta
        return {
            "epsilon": self.get_epsilon(delta),
            "delta": delta,
            "accountant": self.accountant,
            "neighbouring": "add/remove one record",
            "budget": list(self.budget) if self.budget else None,
            "noise": self.noise,
            "events": [{k: v for k, v in e.to_dict().items() if v is not None} for e in self._events],
        }

    def __str__(self) -> str:
        lines = [
            f"PrivacyLedger: epsilon = {self.get_epsilon():.4g} at delta = {self.default_delta:g} "
            f"({self.accountant}, add/remove one record)"
        ]
        if self.budget:
            lines.append(f"  budget: epsilon {self.budget[0]:g} at delta {self.budget[1]:g}")
        if self.noise == "reproducible":
            lines.append("  noise: REPRODUCIBLE (seeded; not private against whoever knows the seed)")
        lines += [f"  - {e.describe()}" for e in self._events] or ["  (no releases)"]
        return "\n".join(lines)

    __repr__ = __str__

    # -- persistence ------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "version": 1,
            "budget": list(self.budget) if self.budget else None,
            "accountant": self.accountant,
            "default_delta": self.default_delta,
            "noise_sources": sorted(self._noise_sources),
            "events": [e.to_dict() for e in self._events],
        }

    def load_state_dict(self, state: dict[str, Any], *, keep_current: bool = False) -> None:
        """Restore recorded events (and budget, accountant) from ``state_dict``.

        Loading never lowers the spend. Into a ledger that already holds events it
        raises, unless ``keep_current=True``: then the saved events come first and the
        current ones (releases made since, e.g. a fresh initialisation in a resumed
        script) are kept after them.
        """
        if self._events and not keep_current:
            raise RuntimeError(
                "load_state_dict into a ledger that already has events would drop them; "
                "pass keep_current=True to keep both, or create a new ledger"
            )
        if state.get("version") != 1:
            raise ValueError(f"unsupported ledger state version {state.get('version')!r}")
        budget = state.get("budget")
        current = self._events
        self.budget = tuple(budget) if budget else None
        self.accountant = state["accountant"]
        self.default_delta = state["default_delta"]
        self._noise_sources |= set(state.get("noise_sources", ()))
        self._events = []
        for event in [*(PrivacyEvent.from_dict(e) for e in state["events"]), *current]:
            self._events = self._append(self._events, event)
        self._total_pld = None
        self._last_composed = None
        self._checked_plan = None
        self._cache.clear()

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> PrivacyLedger:
        ledger = cls()
        ledger.load_state_dict(state)
        return ledger

    def attach(self, model: Any) -> Any:
        """Store the ledger's summary on ``model`` as ``model.privacy_`` and return the model.

        Estimators pickle it with the model; ``PrototypeModel`` also
        saves it in its ``state_dict()``, so a checkpoint carries its guarantee.
        """
        summary = self.summary()
        try:
            model.privacy_ = summary
        except AttributeError as err:  # pragma: no cover - exotic objects
            raise TypeError(f"cannot attach a privacy summary to {type(model).__name__}") from err
        return model


def _basic_epsilon(events: Sequence[PrivacyEvent]) -> float:
    """Basic composition of pure releases, ``sum count * epsilon`` (inf if any is not pure)."""
    total = 0.0
    for event in events:
        epsilon = event.pure_epsilon
        if epsilon is None:
            return math.inf
        total += epsilon * event.count
    return total


def _release_epsilon(event: PrivacyEvent) -> float:
    """The epsilon of one release of an event beyond the PLD's range (a pure or an
    approximate-DP event: both carry their epsilon)."""
    epsilon = getattr(event, "epsilon", None)
    if epsilon is None:
        raise TypeError(f"{type(event).__name__} has no epsilon to compose by basic composition")
    return float(epsilon)


@functools.lru_cache(maxsize=512)
def _epsilon_of(events: tuple[PrivacyEvent, ...], delta: float, accountant: str, discretization: float) -> float:
    """``PrivacyLedger.epsilon_of``, memoised (a pure function of immutable values)."""
    ledger = PrivacyLedger(accountant=accountant)  # type: ignore[arg-type]
    ledger._discretization = discretization
    ledger._events = list(events)
    return ledger._epsilon((), delta)


class SharedLedger(PrivacyLedger):
    """A ledger that several fits share: model selection under one budget.

    Every fit of a private estimator spends epsilon on the same data; a grid search or a
    cross-validation spends it once per fit. Pass one ``SharedLedger`` to the estimators
    (``DPGMLVQ(..., ledger=shared)``): each fit checks its whole planned spend against
    the shared budget *before* it reads the data (``PrivacyBudgetExceededError`` if the
    fits so far plus this one would pass it) and records its events afterwards, so
    ``shared.get_epsilon()`` is the guarantee of everything the selection released,
    composed with the ledger's tight accountant rather than by adding epsilons.

    scikit-learn's ``clone`` (used by ``cross_val_score``, ``GridSearchCV``) deep-copies
    hyperparameters; a ``SharedLedger`` is kept by reference there (``copy`` and
    ``deepcopy`` return the ledger itself), which is what makes it shared. It records
    only in the process that created it: fits in worker processes (``n_jobs > 1``) would
    spend on a copy, so they raise ``RuntimeError`` instead.

    Parameters
    ----------
    budget : (epsilon, delta)
        The budget of all the fits together.
    accountant : {"pld", "rdp"}, default "pld"
        As for ``PrivacyLedger``.

    Examples
    --------
    >>> from dp_proto.privacy import SharedLedger
    >>> shared = SharedLedger(budget=(3.0, 1e-5))
    >>> import copy
    >>> copy.deepcopy(shared) is shared
    True
    """

    def __init__(self, budget: tuple[float, float], *, accountant: Literal["pld", "rdp"] = "pld") -> None:
        if budget is None:
            raise ValueError("a SharedLedger needs a budget=(epsilon, delta): it exists to refuse fits past it")
        super().__init__(budget, accountant=accountant)
        import os

        self._pid = os.getpid()

    def __copy__(self) -> SharedLedger:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> SharedLedger:
        return self

    def _check_process(self) -> None:
        import os

        if os.getpid() != self._pid:
            raise RuntimeError(
                "this SharedLedger was created in another process: a fit in a worker (n_jobs > 1) would record "
                "its spend on a copy the selection never sees; run the fits in one process (n_jobs=1)"
            )

    def check(self, *events: PrivacyEvent) -> float:
        self._check_process()
        return super().check(*events)

    def spend(self, *events: PrivacyEvent) -> None:
        self._check_process()
        super().spend(*events)


def check_shared_ledger(ledger: Any, owner: str) -> None:
    """``ledger`` is a ``SharedLedger`` or None; ``TypeError`` naming ``owner`` otherwise
    (scikit-learn's ``clone`` copies any other object, so the fits meant to share it
    would each spend on their own copy)."""
    if ledger is not None and not isinstance(ledger, SharedLedger):
        raise TypeError(
            f"{owner}: ledger must be a SharedLedger or None, got {type(ledger).__name__}: scikit-learn's clone "
            "copies any other object, so the fits sharing it would each spend on their own copy"
        )
