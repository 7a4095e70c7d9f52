"""Exceptions and warnings shared across dp_proto."""

from __future__ import annotations


class DataValidationError(ValueError):
    """Input data is unusable: non-finite values, wrong shape, unknown labels, ...

    Subclasses ``ValueError`` so code that catches scikit-learn's input errors
    also catches ours.
    """


class PrivacyLeakWarning(UserWarning):
    """A quantity that should be public was derived from the private data."""


class PrivacyBudgetExceededError(RuntimeError):
    """A release was refused because it would exceed the ledger's privacy budget.

    Raised before any noise is drawn, so nothing about the data was released.
    """


class DomainWarning(UserWarning):
    """Records fell outside a mechanism's public domain and were clipped into it."""
