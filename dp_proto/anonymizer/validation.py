"""Argument checks of the anonymizer's training functions, with errors that name the parameter.

The records ``x (n, ...)`` may be a tensor or anything numpy reads (arrays, nested
lists); they are checked for NaN and inf, row by row, as the estimators check theirs
(``DataValidationError``, a ``ValueError``), and handed to the networks as float32.
Rates, learning rates and epoch counts are range-checked by name (``ValueError``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from dp_proto._validation import check_finite_rows, check_int
from dp_proto.exceptions import DataValidationError

__all__ = [
    "as_records",
    "check_count",
    "check_seed",
    "check_anonymizer",
]


def as_records(x: Any, name: str = "x") -> Tensor:
    """The records ``x (n, ...)`` as a float32 tensor (on ``x``'s device for a tensor).

    Parameters
    ----------
    x : Tensor or array-like of shape (n, ...)
        One row per record: features ``(n, d)`` or images ``(n, C, H, W)``.
    name : str, default "x"
        The argument's name, for the messages.

    Returns
    -------
    Tensor of shape (n, ...), float32

    Raises
    ------
    DataValidationError
        ``x`` is not numeric, has fewer than 2 dimensions or no record, or holds NaN
        or inf (the message names the rows).
    """
    if isinstance(x, Tensor):
        if x.is_complex() or x.dtype == torch.bool:
            raise DataValidationError(f"{name} must hold real numbers, got dtype {x.dtype}")
        records = x.detach().to(torch.float32)
    else:
        try:
            array = np.asarray(x)
            if array.dtype.kind in "bcmMSUV":
                raise TypeError(f"dtype {array.dtype}")
            array = array.astype(np.float32)
        except (TypeError, ValueError) as err:
            raise DataValidationError(f"{name} must be numeric (an array or tensor of numbers): {err}") from err
        records = torch.from_numpy(np.ascontiguousarray(array))
    if records.dim() < 2:
        raise DataValidationError(
            f"{name} must have shape (n, ...) with one row per record, got shape {tuple(records.shape)}"
        )
    if len(records) == 0:
        raise DataValidationError(f"{name} holds no record (shape {tuple(records.shape)})")
    if not bool(torch.isfinite(records).all()):
        check_finite_rows(records.cpu().numpy(), name)  # raises, naming the rows
    return records


def check_count(name: str, value: Any, minimum: int = 0) -> int:
    """``value`` as an int ``>= minimum`` (an epoch count, a batch size); bools refused."""
    return check_int(name, value, minimum)


def check_seed(value: Any, name: str = "seed") -> int:
    """A seed of torch's and Lightning's generators: an int in ``[0, 2**32)`` (Lightning
    would otherwise replace it by a random one with a warning)."""
    seed = check_int(name, value, 0)
    if seed >= 2**32:
        raise ValueError(f"{name} must be an int in [0, 2**32), got {value!r}")
    return seed


def check_anonymizer(model: Any, source: str) -> Any:
    """``model`` must be an ``Anonymizer``-like module (``encoder``, ``regular_head``,
    ``private_head``); ``source`` says where it came from, for the message."""
    if not (
        isinstance(model, torch.nn.Module)
        and all(
            isinstance(getattr(model, part, None), torch.nn.Module)
            for part in ("encoder", "regular_head", "private_head")
        )
    ):
        raise TypeError(
            f"{source} must be an Anonymizer (an nn.Module with encoder, regular_head and private_head), "
            f"got {type(model).__name__}"
        )
    return model
