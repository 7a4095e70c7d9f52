"""Clipping into a public domain, counting what was clipped.

A mechanism's sensitivity holds only for inputs inside its declared domain; these
helpers force inputs into it and report how many records were changed, so callers
can warn (``DomainWarning``) instead of silently using out-of-domain data.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["ClipResult", "clip_l2", "clip_box"]


class ClipResult(NamedTuple):
    """The clipped tensor, the number of records (rows) that were changed and the number
    of entries that were (for ``clip_l2``: every entry of a scaled row)."""

    values: Tensor
    num_clipped: int
    num_entries_clipped: int


def clip_l2(x: Tensor, max_norm: float) -> ClipResult:
    """Scale every row of ``x (n, ...)`` to l2 norm at most ``max_norm``.

    Returns ``x_i * min(1, max_norm / ||x_i||_2)`` and the number of rows scaled down.
    """
    if not max_norm > 0:
        raise ValueError(f"max_norm must be > 0, got {max_norm!r}")
    if x.dim() == 0:
        raise ValueError("expected x of shape (n, ...), got a scalar")
    norms = x.reshape(x.shape[0], -1).norm(dim=1)
    factor = (max_norm / norms.clamp_min(1e-300)).clamp(max=1.0)
    shape = (-1,) + (1,) * (x.dim() - 1)
    scaled = int((norms > max_norm).sum())
    return ClipResult(x * factor.reshape(shape).to(x.dtype), scaled, scaled * (x[0].numel() if len(x) else 0))


def clip_box(x: Tensor, lower: float | Tensor = -1.0, upper: float | Tensor = 1.0) -> ClipResult:
    """Clamp ``x (n, ...)`` coordinate-wise into ``[lower, upper]``.

    Returns the clamped tensor, the number of rows with at least one coordinate outside
    the box and the number of such coordinates. NaN raises ``ValueError`` (it has no place
    in any box).
    """
    lower_t = torch.as_tensor(lower, dtype=x.dtype, device=x.device)
    upper_t = torch.as_tensor(upper, dtype=x.dtype, device=x.device)
    if bool((lower_t > upper_t).any()):
        raise ValueError("clip_box needs lower <= upper")
    if x.is_floating_point() and bool(torch.isnan(x).any()):
        raise ValueError("x contains NaN; it cannot be clipped into a box")
    beyond = (x < lower_t) | (x > upper_t)
    outside = beyond.flatten(1).any(dim=1) if x.dim() > 1 else beyond
    values = torch.maximum(torch.minimum(x, upper_t), lower_t)
    return ClipResult(values, int(outside.sum()), int(beyond.sum()))
