"""The curator-only channel: diagnostics computed from the private data without noise.

How many records were clipped into the domain, how many bins stayed empty, whether a
solver converged on the private data: the data curator needs such numbers, but they
are not covered by any guarantee, and a warning or an exception that depends on one
record is a release in itself (it tells a neighbour apart with certainty).

dp_proto therefore never raises a warning or an exception whose presence or text
depends on private records. Such diagnostics go to:

* the logger ``"dp_proto.curator"`` at DEBUG level (``logging.getLogger("dp_proto.curator")
  .setLevel(logging.DEBUG)`` and a handler to see them), and at WARNING when a fit's
  records look wrong for its public settings (more than ``OUTSIDE_BOUNDS_SHARE`` of them
  outside the declared bounds; a public class without records, or fewer than
  ``FEW_RECORDS_PER_CLASS`` records per class): Python prints WARNING records on stderr when no logging
  is configured, so the person running the fit sees it by default, and it never becomes
  a ``warnings`` warning that a release or a notebook output would carry; and
* the fitted attribute ``curator_`` of an estimator (a dict), documented as
  curator-only: delete it (``del est.curator_``) before publishing a fitted estimator.

Checks of public quantities (the declared bounds, the label set, epsilon, the sampling
rate) still raise clear errors.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = [
    "CURATOR_LOGGER",
    "OUTSIDE_BOUNDS_SHARE",
    "FEW_RECORDS_PER_CLASS",
    "curator_log",
    "curator_attach",
    "curator_outside_bounds",
    "curator_class_coverage",
]

CURATOR_LOGGER = logging.getLogger("dp_proto.curator")

#: Share of a fit's records outside its public bounds above which the curator channel
#: warns (``curator_outside_bounds``).
OUTSIDE_BOUNDS_SHARE = 0.1

#: Records per public class (on average) below which the curator channel warns that a
#: private fit has too little data (``curator_class_coverage``).
FEW_RECORDS_PER_CLASS = 10


def curator_log(message: str, *args: Any) -> None:
    """Log a diagnostic computed from the private data (DEBUG, ``dp_proto.curator``)."""
    CURATOR_LOGGER.debug(message, *args)


def curator_attach(estimator: Any, **diagnostics: Any) -> None:
    """Add ``diagnostics`` to ``estimator.curator_`` (created if absent) and log them."""
    store = getattr(estimator, "curator_", None)
    if not isinstance(store, dict):
        store = {}
    store.update(diagnostics)
    estimator.curator_ = store
    for key, value in diagnostics.items():
        curator_log("%s.%s = %r", type(estimator).__name__, key, value)


def curator_outside_bounds(
    estimator: Any,
    num_outside: int,
    num_records: int,
    *,
    entries: tuple[int, int] | None = None,
    clipped: bool = True,
    bounds: str = "bounds",
) -> None:
    """Attach how many of ``num_records`` records lie outside the public ``bounds``
    (``num_clipped`` when they were clipped into them, else ``num_outside_bounds``) and,
    when more than ``OUTSIDE_BOUNDS_SHARE`` of them do, log a WARNING on the curator
    channel naming the share: wrong public bounds otherwise only show as a poor score.
    ``entries = (outside, total)``: judge the share on the entries instead (a box in many
    dimensions, where a record with one coordinate in a heavy tail is common and harmless)."""
    curator_attach(estimator, **{"num_clipped" if clipped else "num_outside_bounds": num_outside})
    outside, total = entries if entries is not None else (num_outside, num_records)
    if total > 0 and outside > OUTSIDE_BOUNDS_SHARE * total:
        CURATOR_LOGGER.warning(
            "%s: %d of %d %s (%.0f%%) lie outside the public %s%s; check them (curator-only: computed "
            "from the private data without noise, do not publish this line)",
            type(estimator).__name__,
            outside,
            total,
            "values" if entries is not None else "records",
            100.0 * outside / total,
            bounds,
            " and were clipped into them" if clipped else "",
        )


def curator_class_coverage(estimator: Any, class_counts: Any, classes: Any) -> None:
    """Attach the records per public class (``records_per_class``) and log a WARNING on the
    curator channel when a class of ``classes`` has no record or the data hold fewer than
    ``FEW_RECORDS_PER_CLASS`` records per class: a private fit then runs, but its model
    comes mostly from the noise (a one-row fit, one class of ten)."""
    labels = [c.item() if hasattr(c, "item") else c for c in classes]
    counts = [int(c) for c in class_counts]
    curator_attach(estimator, records_per_class=dict(zip(labels, counts, strict=True)))
    empty = [c for c, n in zip(labels, counts, strict=True) if n == 0]
    total = sum(counts)
    if not empty and total >= FEW_RECORDS_PER_CLASS * len(counts):
        return
    what = f"classes {empty} have none: their prototypes come from the noise alone" if empty else ""
    if total < FEW_RECORDS_PER_CLASS * len(counts):
        what = "; ".join(filter(None, [what, "the model will come mostly from the noise"]))
    CURATOR_LOGGER.warning(
        "%s: the training data hold %d record(s) for %d public classes; %s (curator-only: computed from the "
        "private data without noise, do not publish this line)",
        type(estimator).__name__,
        total,
        len(counts),
        what,
    )
