"""Every private fit of this process, composed: what a model selection spends.

A grid search or a cross-validation fits a private estimator once per candidate and fold
(scikit-learn's ``clone``), and each fit reports only its own ``epsilon_``. The session
ledger records the events of every private fit of the process as well, so
``session_ledger().get_epsilon(delta)`` bounds what all of them together reveal about a
record that each of them saw (an over-estimate for fits on different data).

When private fits without a ``SharedLedger`` add up (the 2nd, 4th, 8th, ... of them), the
``dp_proto.budget`` logger says what they compose to at WARNING, which Python prints on
stderr when no logging is configured; it is a log record, not a ``warnings`` warning, so
it never travels with a release. Fits that share a ``SharedLedger`` are bounded by its
budget and are only recorded. ``reset_session()`` starts a new count (a new analysis).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from dp_proto.privacy.ledger import PrivacyLedger

__all__ = ["BUDGET_LOGGER", "session_ledger", "reset_session", "record_fit", "within_shared_budget", "inner_fits"]

BUDGET_LOGGER = logging.getLogger("dp_proto.budget")

# The events of every fit, repeats of one mechanism merged into one event with their
# count (composition is commutative), and the count of fits without a shared ledger.
_SESSION: dict[str, Any] = {"events": [], "unshared_fits": 0, "shared_depth": 0, "inner_depth": 0}


def session_ledger() -> PrivacyLedger:
    """A ledger (the PLD accountant) holding the events of every private fit of this
    process so far: ``session_ledger().get_epsilon(1e-5)``."""
    ledger = PrivacyLedger()
    ledger.spend(*_SESSION["events"])
    return ledger


def _quick_epsilon(delta: float) -> float:
    """An upper bound on the session's epsilon at ``delta`` that stays fast over hundreds
    of fits: the events with a Renyi-DP curve by the RDP accountant at ``delta / 2``, the
    others by the PLD accountant at ``delta / 2``, joined by basic composition."""
    events = _SESSION["events"]
    curve = [e for e in events if e.has_renyi_curve]
    other = [e for e in events if not e.has_renyi_curve]
    if not other:
        return PrivacyLedger.epsilon_of(curve, delta, accountant="rdp")
    if not curve:
        return PrivacyLedger.epsilon_of(other, delta)
    return PrivacyLedger.epsilon_of(curve, delta / 2, accountant="rdp") + PrivacyLedger.epsilon_of(other, delta / 2)


def _finite_statement(delta: float) -> tuple[float, float]:
    """``(epsilon, delta')``: the session's epsilon at ``delta``, or, where the fits'
    own deltas (approximate-DP releases) use that up, at the first of ``10 delta``,
    ``100 delta``, ... (below 1) where it is finite."""
    stated = delta
    epsilon = _quick_epsilon(stated)
    while epsilon == float("inf") and stated * 10 < 1:
        stated *= 10
        epsilon = _quick_epsilon(stated)
    return epsilon, stated


def reset_session() -> None:
    """Forget the fits so far: an empty session ledger and a new count."""
    _SESSION["events"] = []
    _SESSION["unshared_fits"] = 0


@contextmanager
def _inside(depth: str) -> Iterator[None]:
    """Count the block as one level of ``_SESSION[depth]`` while it runs."""
    _SESSION[depth] += 1
    try:
        yield
    finally:
        _SESSION[depth] -= 1


def within_shared_budget() -> AbstractContextManager[None]:
    """Fits inside the block are bounded by a shared budget (a ``DPPipeline``'s steps):
    recorded, never counted towards the notice."""
    return _inside("shared_depth")


def inner_fits() -> AbstractContextManager[None]:
    """Fits inside the block are parts of one mechanism that records its own events (the
    runs of a private selection): neither recorded nor counted."""
    return _inside("inner_depth")


def record_fit(estimator: Any, ledger: PrivacyLedger, *, shared: bool, delta: float, add_events: bool = True) -> None:
    """Add a finished private fit's events to the session ledger; for a fit without a
    ``SharedLedger`` (``shared=False``, outside ``within_shared_budget``), log the
    composed spend at the 2nd, 4th, 8th, ... such fit. ``delta``: the fit's delta, at
    which the composed epsilon is stated; ``add_events=False`` counts the fit only (its
    parts recorded their events). A fit with a non-private release is skipped."""
    if not ledger.events or not all(event.is_private for event in ledger.events) or _SESSION["inner_depth"]:
        return
    merged: list = _SESSION["events"]
    for event in ledger.events if add_events else ():
        same = next((i for i, seen in enumerate(merged) if seen.same_mechanism(event)), None)
        if same is None:
            merged.append(event)
        else:
            merged[same] = merged[same].with_count(merged[same].count + event.count)
    if shared or _SESSION["shared_depth"]:
        return
    _SESSION["unshared_fits"] += 1
    count = _SESSION["unshared_fits"]
    if count >= 2 and count & (count - 1) == 0:
        epsilon, stated_delta = _finite_statement(delta)
        BUDGET_LOGGER.warning(
            "%s: %d private fits in this process without a shared ledger; together they are at most "
            "(%.3g, %g)-DP for a record each of them saw (dp_proto.privacy.session_ledger()). To select a "
            "model under one budget, pass ledger=SharedLedger(budget=(epsilon, delta)) to every fit",
            type(estimator).__name__,
            count,
            epsilon,
            stated_delta,
        )
