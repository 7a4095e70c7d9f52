"""Time integration of class probabilities over a window of a sequence (Brinkrolf 2023, section 4.5).

For a stream ``x^1, x^2, ...`` whose labels change rarely, Brinkrolf (2023), eq. 4.26,
fuses the class probabilities ``p_l^tau = p(l | x^tau)`` of the samples in a window
around ``tau`` by their normalised product:

    p_l^tau(t) = prod_{w in W} p_l^{tau + w} / sum_k prod_{w in W} p_k^{tau + w},
    W = {-ceil(t/2), ..., -1, 0, 1, ..., floor(t/2)},

a window of ``t + 1`` samples (the product of independent observations under a uniform
prior, a naive-Bayes reading). ``t = 0`` is the identity. The certainty of the reject
rule is then ``max_l p_l^tau(t)``. The window is centred, so it uses ``floor(t/2)``
*future* samples; an odd ``t`` reaches one sample further into the past than into the
future, and Brinkrolf (2023), Table 4.5, finds even ``t`` better.

:func:`integrate_probabilities` computes it for every sample at once, in the log domain
(probabilities clipped below at ``eps`` so that one zero does not veto a class forever),
with windowed sums of the logs taken from cumulative sums: no Python loop over samples.

Decisions that Brinkrolf (2023) leaves open:

* **Sequence ends**: the window is truncated to the samples that exist. At the start of
  a sequence ``p^1(t)`` uses ``p^1 .. p^{1 + floor(t/2)}``, at its end the last
  ``ceil(t/2) + 1`` samples. (Equivalently, missing neighbours contribute the
  uninformative factor 1 to every class.) No sample is dropped and no padding is
  invented, so the first and last ``ceil(t/2)`` samples are fused over fewer samples.
* **Several sequences**: ``groups`` (e.g. subject, recording or sequence ids) says which
  sequence each row belongs to; windows never cross a group boundary (each group's
  ends are treated as above). A group's rows need not be contiguous: the rows of one
  group, in the order they appear, are its sequence.
* **Causal windows**: ``causal=True`` uses ``W = {-t, ..., 0}``, the current and the
  ``t`` previous samples, so that a prediction never waits for the future (streaming).
  This is an option of dp-proto, not of Brinkrolf (2023), which evaluates the centred
  window only.
"""

from __future__ import annotations

import numbers
import sys
from typing import Any

import numpy as np

from dp_proto._validation import format_indices
from dp_proto.exceptions import DataValidationError

__all__ = ["integrate_probabilities", "integration_window"]

#: How far a probability may leave [0, 1], and a row sum 1, before it is refused
#: (rounding in float32 ``predict_proba`` outputs).
_ATOL = 1e-5


def integration_window(window: int, *, causal: bool = False) -> tuple[int, int]:
    """The offsets ``(first, last)`` of the window ``W`` around a sample, both inclusive.

    ``(-ceil(t/2), floor(t/2))`` for the centred window of Brinkrolf (2023), eq. 4.26,
    ``(-t, 0)`` for ``causal=True``; ``last - first == t`` (``t + 1`` samples).

    Raises
    ------
    ValueError
        If ``window`` is not an int ``>= 0``.
    """
    t = _check_window(window)
    if causal:
        return -t, 0
    return -((t + 1) // 2), t // 2


def integrate_probabilities(
    proba: Any,
    window: int,
    *,
    groups: Any = None,
    causal: bool = False,
    eps: float = 1e-12,
) -> Any:
    """Class probabilities fused over a window of each sample's neighbours in time (eq. 4.26).

    Parameters
    ----------
    proba : array-like of shape (n, c)
        Class probabilities of ``n`` samples in time order (within each group), e.g. a
        classifier's ``predict_proba``; every entry in ``[0, 1]``, every row summing to 1.
        A ``torch.Tensor`` is accepted and a tensor of the same dtype and device returned.
    window : int
        ``t >= 0``; the window has ``t + 1`` samples, the offsets of
        :func:`integration_window`. ``0`` returns the probabilities unchanged.
    groups : array-like of shape (n,), optional
        Sequence ids (subjects, recordings, ...); windows never cross from one group to
        another. Default: all rows form one sequence.
    causal : bool, default False
        Use the current and the ``t`` previous samples instead of the centred window
        (not in Brinkrolf 2023).
    eps : float, default 1e-12
        Probabilities are clipped to ``[eps, 1]`` before taking logs, so a class that one
        sample rules out (``p = 0``) can still win the window.

    Returns
    -------
    ndarray of shape (n, c)
        The fused probabilities; rows sum to 1. float64, or float32 for float32 input.
        At the ends of a sequence the window is truncated to the samples that exist.

    Raises
    ------
    ValueError
        If ``window`` is not an int ``>= 0``, ``eps`` is not in ``(0, 1)`` or ``causal``
        is not a bool.
    DataValidationError
        (a ``ValueError``) If ``proba`` is not a non-empty 2-d array, holds NaN/inf,
        values outside ``[0, 1]`` or rows that do not sum to 1; if ``groups`` does not
        have shape ``(n,)``; or if the window has more samples than a sequence
        (``window + 1 > length``; the message names the sequence and its length).

    Notes
    -----
    With ``S_l(tau) = sum_{w in W} log max(p_l^{tau + w}, eps)`` the result is
    ``softmax(S(tau))``: the windowed sums are differences of cumulative sums of the logs
    along each sequence, and the softmax subtracts the row maximum, so long windows of
    confident predictions neither underflow nor overflow.
    """
    tensor = _torch_tensor(proba)
    p = _check_proba(proba if tensor is None else tensor.detach().cpu().numpy())
    first, last = integration_window(window, causal=_check_causal(causal))
    eps = _check_eps(eps)
    n = p.shape[0]
    out_dtype = np.float32 if p.dtype == np.float32 else np.float64
    order, starts, ends = _sequences(groups, n, window)

    if window == 0:
        out = p.astype(out_dtype, copy=True)
    else:
        logs = np.log(np.clip(p[order].astype(np.float64), eps, 1.0))
        cum = np.concatenate([np.zeros((1, logs.shape[1])), np.cumsum(logs, axis=0)])
        pos = np.arange(n)
        lo = np.maximum(pos + first, starts)  # window truncated to its own sequence
        hi = np.minimum(pos + last, ends - 1)
        sums = cum[hi + 1] - cum[lo]
        sums -= sums.max(axis=1, keepdims=True)
        fused = np.exp(sums)
        fused /= fused.sum(axis=1, keepdims=True)
        out = np.empty_like(fused, dtype=out_dtype)
        out[order] = fused
    if tensor is not None:
        import torch

        return torch.as_tensor(out).to(dtype=tensor.dtype, device=tensor.device)
    return out


# --------------------------------------------------------------------------- checks
def _torch_tensor(value: Any) -> Any:
    """``value`` if it is a torch tensor (without importing torch for numpy input)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return value
    return None


def _check_window(window: Any) -> int:
    if isinstance(window, bool) or not isinstance(window, numbers.Integral) or window < 0:
        raise ValueError(f"window must be an int >= 0 (t, a window of t + 1 samples), got {window!r}")
    return int(window)


def _check_causal(causal: Any) -> bool:
    if not isinstance(causal, (bool, np.bool_)):
        raise ValueError(f"causal must be a bool, got {causal!r}")
    return bool(causal)


def _check_eps(eps: Any) -> float:
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0.0 < float(eps) < 1.0:
        raise ValueError(f"eps must be a float in (0, 1), got {eps!r}")
    return float(eps)


def _check_proba(proba: Any) -> np.ndarray:
    try:
        p = np.asarray(proba)
    except (TypeError, ValueError) as err:  # ragged nested lists
        raise DataValidationError(f"proba must be a numeric array of shape (n, c): {err}") from None
    if p.dtype == object or not (np.issubdtype(p.dtype, np.floating) or np.issubdtype(p.dtype, np.integer)):
        raise DataValidationError(f"proba must hold numbers, got dtype {p.dtype}")
    if p.ndim != 2:
        raise DataValidationError(f"proba must be 2-d (n samples, c classes), got shape {p.shape}")
    if p.shape[0] == 0 or p.shape[1] == 0:
        raise DataValidationError(f"proba must have at least one sample and one class, got shape {p.shape}")
    if not np.issubdtype(p.dtype, np.floating):
        p = p.astype(np.float64)
    bad = ~np.isfinite(p).all(axis=1)
    if bad.any():
        raise DataValidationError(f"proba contains NaN or inf in row(s) {_rows(bad)}")
    bad = ((p < -_ATOL) | (p > 1 + _ATOL)).any(axis=1)
    if bad.any():
        raise DataValidationError(
            f"proba must hold probabilities in [0, 1]; row(s) {_rows(bad)} do not "
            f"(e.g. row {int(np.flatnonzero(bad)[0])}: {p[np.flatnonzero(bad)[0]].tolist()})"
        )
    sums = p.sum(axis=1, dtype=np.float64)
    bad = np.abs(sums - 1.0) > _ATOL * max(1, p.shape[1])
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise DataValidationError(
            f"every row of proba must sum to 1; row(s) {_rows(bad)} do not (row {first} sums to {sums[first]:.6g})"
        )
    return p


def _rows(mask: Any) -> str:
    return format_indices(np.flatnonzero(mask))


def _sequences(groups: Any, n: int, window: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows sorted by group (stable, so time order is kept) and, per sorted row, the
    start and end (exclusive) of its sequence; checks that every sequence holds the window."""
    if groups is None:
        order = np.arange(n)
        codes = np.zeros(n, dtype=np.int64)
        names: np.ndarray | None = None
    else:
        g = np.asarray(groups)
        if g.ndim != 1 or g.shape[0] != n:
            raise DataValidationError(f"groups must have shape ({n},), one id per row of proba, got shape {g.shape}")
        if g.dtype.kind == "f" and np.isnan(g).any():
            raise DataValidationError(f"groups contains NaN in row(s) {_rows(np.isnan(g))}")
        try:
            names, codes = np.unique(g, return_inverse=True)
        except TypeError as err:  # unorderable mixed ids
            raise DataValidationError(f"groups must hold comparable ids (numbers or strings): {err}") from None
        codes = codes.reshape(-1)
        order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    boundaries = np.flatnonzero(np.diff(sorted_codes)) + 1
    seq_starts = np.concatenate([[0], boundaries])
    seq_ends = np.concatenate([boundaries, [n]])
    lengths = seq_ends - seq_starts
    short = np.flatnonzero(lengths < window + 1)
    if short.size:
        k = int(short[np.argmin(lengths[short])])
        which = "the sequence" if names is None else f"group {names.tolist()[sorted_codes[seq_starts[k]]]!r}"
        more = "" if short.size == 1 else f" ({short.size} groups are shorter than {window + 1} samples)"
        raise DataValidationError(
            f"window={window} spans {window + 1} samples but {which} has only {int(lengths[k])} sample(s){more}; "
            f"use window <= {int(lengths.min()) - 1}"
        )
    seq_of_row = np.repeat(np.arange(len(lengths)), lengths)
    return order, seq_starts[seq_of_row], seq_ends[seq_of_row]
