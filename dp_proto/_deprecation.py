"""Old import paths kept for one release after the issue-21 restructure.

A moved module leaves a two-line shim at its old path that calls ``alias_module``;
a package that lost names defines ``__getattr__ = moved_names(__name__, {...})``. Both
import the new location lazily (by name, so the package layering stays one-way) and warn
with ``DeprecationWarning``.
"""

from __future__ import annotations

import functools
import importlib
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

REMOVAL = "the release after 0.1"


def alias_module(old: str, new: str) -> None:
    """Make the module being imported as ``old`` the module ``new`` (same object)."""
    warnings.warn(f"{old} moved to {new}; the old path will be removed in {REMOVAL}", DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)


def moved_names(package: str, new_homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` serving ``name`` from ``new_homes[name]`` with a warning."""

    def __getattr__(name: str) -> Any:
        home = new_homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        warnings.warn(
            f"{package}.{name} moved to {home}.{name}; the old path will be removed in {REMOVAL}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), name)

    return __getattr__


def renamed_argument(owner: str, new: str, new_value: Any, old: str, old_value: Any, *, required: bool = False) -> Any:
    """The value of argument ``new``, taking the deprecated ``old`` name for one release.

    ``old`` given: warns with ``DeprecationWarning`` and returns its value (``TypeError``
    when both are given). ``required``: ``TypeError`` when neither is."""
    if old_value is not None:
        if new_value is not None:
            raise TypeError(f"{owner}: pass {new}= only ({old}= is its old name)")
        warnings.warn(
            f"{owner}: {old}= is now called {new}=; the old name will be removed in {REMOVAL}",
            DeprecationWarning,
            stacklevel=3,
        )
        return old_value
    if required and new_value is None:
        raise TypeError(f"{owner}: missing the argument {new}=")
    return new_value


def renamed_keyword(old: str, new: str) -> Callable:
    """Decorator: the function's keyword ``new`` also answers to its old name ``old`` for
    one release (a ``DeprecationWarning``; ``TypeError`` when both are given)."""

    def decorate(function: Callable) -> Callable:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if old in kwargs:
                if new in kwargs:
                    raise TypeError(f"{function.__qualname__}: pass {new}= only ({old}= is its old name)")
                warnings.warn(
                    f"{function.__qualname__}: {old}= is now called {new}=; the old name will be removed in {REMOVAL}",
                    DeprecationWarning,
                    stacklevel=2,
                )
                kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)

        return wrapper

    return decorate
