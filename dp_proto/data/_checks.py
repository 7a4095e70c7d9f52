"""Shared checks of the data modules: ``random_state`` to a numpy generator, integer
counts and positive numbers."""

from __future__ import annotations

import numbers

import numpy as np

RandomState = int | np.random.Generator | None


def _rng(random_state: RandomState) -> np.random.Generator:
    if random_state is None or isinstance(random_state, np.random.Generator):
        return np.random.default_rng(random_state)
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValueError(f"random_state must be a non-negative int, got {random_state}")
        return np.random.default_rng(int(random_state))
    raise TypeError(f"random_state must be an int, a numpy.random.Generator or None, got {type(random_state).__name__}")


def _check_count(name: str, value: int, minimum: int = 0) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)
