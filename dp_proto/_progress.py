"""When a fit shows its progress bar: ``verbose=None`` means in interactive use only."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["interactive", "wants_progress", "progress_bar", "show_status"]


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


def progress_bar(desc: str, total: int | None, verbose: int | None, *, unit: str = "it") -> Any:
    """A tqdm bar on stderr for a fit with ``verbose`` (``wants_progress``): it appears
    once the fit has run for two seconds and is removed when it ends."""
    from tqdm import tqdm

    return tqdm(
        total=total, desc=desc, unit=unit, file=sys.stderr, delay=2.0, disable=not wants_progress(verbose), leave=False
    )


def show_status(bar: Any, text: str) -> None:
    """Put ``text`` beside ``bar`` (a ``progress_bar``); drawn now only once the bar's
    two seconds have passed (tqdm's ``set_postfix_str`` would draw it at once)."""
    bar.set_postfix_str(text, refresh=False)
    if not bar.disable and bar._time() - bar.start_t >= bar.delay:
        bar.refresh()
