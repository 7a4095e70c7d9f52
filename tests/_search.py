"""Hypothesis settings shared by the state searches (adversarial model states and records)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings


def state_search(examples: int, *, deep: bool = False) -> settings:
    """``examples`` cases, no deadline, no health checks; the default-suite version is
    derandomised (the same cases every run), the ``deep`` one (marked slow) explores."""
    return settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), derandomize=not deep)
