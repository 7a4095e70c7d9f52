"""The curator-only channel: diagnostics computed from the private data without noise.

How many records were clipped into the domain, how many bins stayed empty, whether a
solver converged on the private data: the data curator needs such numbers, but they
are not covered by any guarantee, and a warning or an exception that depends on one
record is a release in itself (it tells a neighbour apart with certainty).

dp_proto therefore never raises a warning or an exception whose presence or text
depends on private records. Such diagnostics go to:

* the logger ``"dp_proto.curator"`` at DEBUG level (``logging.getLogger("dp_proto.curator")
  .setLevel(logging.DEBUG)`` and a handler to see them), and
* the fitted attribute ``curator_`` of an estimator (a dict), documented as
  curator-only: delete it (``del est.curator_``) before publishing a fitted estimator.

Checks of public quantities (the declared bounds, the label set, epsilon, the sampling
rate) still raise clear errors.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["CURATOR_LOGGER", "curator_log", "curator_attach"]

CURATOR_LOGGER = logging.getLogger("dp_proto.curator")


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
