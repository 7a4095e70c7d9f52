"""Input checks that turn bad data into errors that name the problem."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import torch

from dp_proto.exceptions import DataValidationError

__all__ = [
    "TORCH_DTYPES",
    "as_real",
    "check_finite_rows",
    "check_labels_known",
    "check_nonnegative",
    "check_positive",
    "check_unit_interval",
    "format_indices",
    "missing_gpu",
    "torch_device",
    "torch_dtype",
]

#: The ``dtype`` option of the estimators, by name.
TORCH_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of an estimator's ``dtype`` option (``"float32"`` or ``"float64"``)."""
    try:
        return TORCH_DTYPES[name]
    except (KeyError, TypeError):
        raise ValueError(f"dtype must be 'float32' or 'float64', got {name!r}") from None


def missing_gpu(kind: str) -> str | None:
    """What a ``"cuda"`` or ``"mps"`` device would be (``"a CUDA GPU"``, ``"an Apple GPU
    (MPS)"``) if torch cannot use one on this machine; ``None`` if it can, or for any other
    kind."""
    if kind == "cuda" and not torch.cuda.is_available():
        return "a CUDA GPU"
    if kind == "mps" and not torch.backends.mps.is_available():
        return "an Apple GPU (MPS)"
    return None


def torch_device(device: Any) -> torch.device:
    """The torch device of an estimator's ``device`` option; ``ValueError`` with one line
    for a name torch does not know and for a CUDA or MPS device this machine lacks."""
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be a torch device such as 'cpu' or 'cuda', got {device!r}") from None
    missing = missing_gpu(resolved.type)
    if missing is not None:
        raise ValueError(f"device={device!r} asks for {missing}, but torch sees none on this machine; use device='cpu'")
    if resolved.type == "cuda" and resolved.index is not None and resolved.index >= torch.cuda.device_count():
        raise ValueError(f"device={device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return resolved


def as_real(name: str, value: Any) -> float:
    """``value`` (a real number or a one-element tensor, not a bool) as a float."""
    if hasattr(value, "numel") and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    return float(value)


def check_positive(name: str, value: Any) -> float:
    """``value`` as a finite float ``> 0`` (an epsilon, a scale, a learning rate)."""
    number = as_real(name, value)
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return number


def check_nonnegative(name: str, value: Any) -> float:
    """``value`` as a finite float ``>= 0`` (a weight decay, a noise level)."""
    number = as_real(name, value)
    if not (math.isfinite(number) and number >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return number


def check_unit_interval(name: str, value: Any, *, low: str = "(", high: str = ")") -> float:
    """``value`` in the interval from 0 to 1 with the given brackets, e.g. ``[0, 1)``."""
    number = as_real(name, value)
    above = number >= 0 if low == "[" else number > 0
    below = number <= 1 if high == "]" else number < 1
    if not (above and below):
        raise ValueError(f"{name} must lie in {low}0, 1{high}, got {value!r}")
    return number


def format_indices(indices: np.ndarray, limit: int = 10) -> str:
    """``[3, 17, 20]`` or ``[3, 17, ..., 999] (25 in all)`` for long lists."""
    items = [int(i) for i in indices[:limit]]
    text = ", ".join(str(i) for i in items)
    if len(indices) > limit:
        return f"[{text}, ...] ({len(indices)} in all)"
    return f"[{text}]"


def check_finite_rows(X: np.ndarray, name: str = "X") -> None:
    """Raise ``DataValidationError`` naming the rows of ``X (n, ...)`` that hold NaN or inf."""
    bad = ~np.isfinite(X.reshape(X.shape[0], -1)).all(axis=1) if X.size else np.zeros(0, bool)
    if bad.any():
        rows = np.flatnonzero(bad)
        kinds = []
        if np.isnan(X[rows]).any():
            kinds.append("NaN")
        if np.isinf(X[rows]).any():
            kinds.append("inf")
        raise DataValidationError(
            f"Input {name} contains {' and '.join(kinds)} in row(s) {format_indices(rows)}; "
            f"remove or impute them (NaN/inf values are not allowed)"
        )


def check_labels_known(y: np.ndarray, classes: np.ndarray) -> None:
    """Raise ``DataValidationError`` if ``y`` holds labels not in ``classes``."""
    unseen = np.setdiff1d(np.unique(y), classes)
    if unseen.size:
        raise DataValidationError(
            f"y contains label(s) {unseen.tolist()} that were not seen during fit; known classes: {classes.tolist()}"
        )


def as_time_index(time_index) -> np.ndarray:
    """A 1-d integer array of time slots as int64 (``ValueError`` otherwise)."""
    t = np.asarray(time_index)
    if t.ndim != 1:
        raise ValueError(f"time_index must be 1-d, got shape {t.shape}")
    if t.size and not np.issubdtype(t.dtype, np.integer):
        raise ValueError(f"time_index must hold integers, got dtype {t.dtype}")
    return t.astype(np.int64)


def check_int(name: str, value, minimum: int) -> int:
    """``value`` as an int ``>= minimum`` (numpy integers accepted, bools refused); ``ValueError`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)
