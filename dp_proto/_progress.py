"""When a fit shows its progress bar: ``verbose=None`` means in interactive use only."""

from __future__ import annotations

import sys

__all__ = ["interactive", "wants_progress"]


def interactive() -> bool:
    """Whether a person is likely watching: stderr is a terminal, or the code runs in a
    Jupyter (IPython) kernel."""
    stream = sys.stderr
    if stream is not None and getattr(stream, "isatty", lambda: False)():
        return True
    return "ipykernel" in sys.modules


def wants_progress(verbose: int | None) -> bool:
    """An estimator's ``verbose``: None shows the progress bar in interactive use only,
    0 never, 1 or more always (the bars appear once a fit has run for two seconds)."""
    return interactive() if verbose is None else bool(verbose)
