"""The neighbour check: test a release the way a DP auditor would.

Differential privacy (add/remove one record) asks two things of a release ``M``:

1. the quantity each mechanism noises moves by at most its declared sensitivity when
   one record is removed, *given the same earlier outputs* (adaptive composition);
2. nothing else that the user sees depends on the data: shapes, dtypes, fitted
   attributes, the ledger's events, warnings and exceptions are functions of the
   released (noisy) outputs and of public settings only.

Every mechanism of dp_proto passes its pre-noise quantity through ``intercept``.
Normally that only draws the noise. Inside ``neighbour_check`` it also records:

* on ``D`` (record mode) each release's name, pre-noise value, declared sensitivity and
  norm, and its noisy output;
* on a neighbour ``D'`` (replay mode) each release's pre-noise value, and instead of
  drawing noise it returns ``D``'s output. ``D'`` therefore sees exactly the outputs
  ``D`` saw, which is the conditioning of adaptive composition.

Then per release ``||pre(D) - pre(D')|| <= sensitivity`` in its norm, and whatever the
release function exposes (see ``public_view``) must be *identical* between ``D``
and ``D'``: anything that differs was computed from the data without noise. A
subsampled release (a DP-SGD step) declares no sensitivity here, since a neighbour's
Poisson batch differs; its per-step clipped sum is checked on its own (the fused
engine's ``clipped_gradient_sum``).

Example
-------
>>> from dp_proto.privacy.testing import neighbour_check, adversarial_removals
>>> report = neighbour_check(lambda X, y: DPGLVQ(...).fit(X, y), (X, y),
...                          removals=adversarial_removals(X, y) + [0, 17],
...                          curator_only=("curator_",))
>>> report.assert_ok()
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

Tensor = torch.Tensor

__all__ = [
    "intercept",
    "per_record_coins",
    "MechanismCall",
    "NeighbourReport",
    "neighbour_check",
    "public_view",
    "remove_record",
    "adversarial_removals",
    "capture_releases",
    "sum_movement",
]


@dataclass
class MechanismCall:
    """One mechanism invocation seen by the harness: its name, the pre-noise quantity,
    its declared sensitivity and norm, and (when recorded) the noisy output."""

    name: str
    pre_noise: Tensor | None
    sensitivity: float | None
    norm: str | None
    output: Any = None


class _Recorder:
    def __init__(
        self,
        replay: list[MechanismCall] | None = None,
        removed: int | None = None,
        replay_coins: list[tuple[str, Tensor]] | None = None,
    ) -> None:
        self.releases: list[MechanismCall] = []
        self.replay = replay
        self.removed = removed
        self.replay_coins = replay_coins or []
        self.coins: list[tuple[str, Tensor]] = []

    def coins_for(self, name: str, draw: Callable[[], Tensor]) -> Tensor:
        k = len(self.coins)
        if self.replay is None or self.removed is None:
            out = draw()
            self.coins.append((name, out.detach().clone()))
            return out
        ref_coins = self.replay_coins
        if k >= len(ref_coins) or ref_coins[k][0] != name:
            raise _Divergence(f"per-record coins #{k} ({name!r}) have no counterpart on D")
        ref = ref_coins[k][1]
        keep = torch.ones(ref.shape[0], dtype=torch.bool, device=ref.device)
        keep[self.removed] = False
        out = ref[keep].clone()
        self.coins.append((name, out))
        return out

    def handle(
        self, name: str, pre_noise: Tensor | None, sensitivity: float | None, norm: str | None, draw: Callable[[], Any]
    ) -> Any:
        pre = None if pre_noise is None else pre_noise.detach().to("cpu", torch.float64).clone()
        if self.replay is None:
            out = draw()
            self.releases.append(MechanismCall(name, pre, sensitivity, norm, _snapshot(out)))
            return out
        k = len(self.releases)
        self.releases.append(MechanismCall(name, pre, sensitivity, norm))
        if k >= len(self.replay):
            raise _Divergence(f"release #{k} ({name!r}) has no counterpart on D (D made {len(self.replay)})")
        ref = self.replay[k]
        if ref.name != name:
            raise _Divergence(f"release #{k} is {name!r} on the neighbour but {ref.name!r} on D")
        return _snapshot(ref.output)  # a copy: the neighbour's run may modify it in place


class _Divergence(AssertionError):
    """The neighbour's run made different releases than D's (a side channel by itself)."""


_ACTIVE: contextvars.ContextVar[_Recorder | None] = contextvars.ContextVar("dp_proto_release_recorder", default=None)


def intercept(
    name: str, pre_noise: Tensor | None, sensitivity: float | None, norm: str | None, draw: Callable[[], Any]
) -> Any:
    """Release hook of every mechanism: returns ``draw()`` (the noisy output).

    ``pre_noise`` is the quantity the noise protects, ``sensitivity`` its declared
    sensitivity in ``norm`` (``"l1"``, ``"l2"``, ``"linf"``), or None where no fixed
    sensitivity applies (subsampled steps, smooth sensitivity). Under
    ``neighbour_check`` the call is recorded and, on a neighbour, replays the
    output of the same release on ``D``.
    """
    recorder = _ACTIVE.get()
    if recorder is None:
        return draw()
    return recorder.handle(name, pre_noise, sensitivity, norm, draw)


def per_record_coins(name: str, draw: Callable[[], Tensor]) -> Tensor:
    """Hook for randomness drawn once per record (bin labels, sampling coins): returns
    ``draw()``, a tensor ``(n, ...)``. On a neighbour under ``neighbour_check`` it
    returns ``D``'s coins without the removed record's row, so every remaining record
    keeps its coin: the coupling under which such mechanisms are analysed."""
    recorder = _ACTIVE.get()
    if recorder is None:
        return draw()
    return recorder.coins_for(name, draw)


def _snapshot(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.detach().clone()
    if isinstance(value, tuple):
        return tuple(_snapshot(v) for v in value)
    if isinstance(value, list):
        return [_snapshot(v) for v in value]
    return value


@contextlib.contextmanager
def capture_releases(
    replay: list[MechanismCall] | None = None,
    *,
    removed: int | None = None,
    replay_coins: list[tuple[str, Tensor]] | None = None,
):
    """Record every ``intercept`` in the block (and replay ``replay``'s outputs, and
    ``replay_coins`` without row ``removed``)."""
    recorder = _Recorder(replay, removed, replay_coins)
    token = _ACTIVE.set(recorder)
    try:
        yield recorder
    finally:
        _ACTIVE.reset(token)


# -- what a release exposes -------------------------------------------------------------
def public_view(obj: Any, *, curator_only: Iterable[str] = (), _depth: int = 0) -> Any:
    """A comparable picture of everything ``obj`` exposes: tensors and arrays by dtype,
    shape and exact values, objects by their public attributes (recursively, names in
    ``curator_only`` left out), containers element by element."""
    skip = set(curator_only)
    if _depth > 6:
        return repr(type(obj))
    if isinstance(obj, Tensor):
        return ("tensor", str(obj.dtype), tuple(obj.shape), obj.detach().cpu().numpy().tobytes())
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            return (
                "array",
                tuple(obj.shape),
                [public_view(v, curator_only=skip, _depth=_depth + 1) for v in obj.ravel()],
            )
        return ("array", str(obj.dtype), tuple(obj.shape), obj.tobytes())
    if isinstance(obj, float) and math.isnan(obj):
        return ("float", "nan")
    if isinstance(obj, (str, bytes, int, float, bool, type(None), np.generic)):
        return obj
    if isinstance(obj, Mapping):
        return {k: public_view(v, curator_only=skip, _depth=_depth + 1) for k, v in obj.items() if k not in skip}
    if isinstance(obj, (list, tuple)):
        return type(obj).__name__, [public_view(v, curator_only=skip, _depth=_depth + 1) for v in obj]
    if isinstance(obj, torch.nn.Module):
        return (
            "module",
            type(obj).__name__,
            {k: public_view(v, _depth=_depth + 1) for k, v in obj.state_dict().items()},
            public_view(
                {k: v for k, v in vars(obj).items() if k.endswith("_") and not k.startswith("_")},
                curator_only=skip,
                _depth=_depth + 1,
            ),
        )
    if isinstance(obj, torch.Generator):
        return ("generator",)
    if hasattr(obj, "state_dict") and hasattr(obj, "summary") and hasattr(obj, "events"):  # a ledger
        return ("ledger", public_view(obj.summary(), _depth=_depth + 1))
    if hasattr(obj, "__dict__"):
        attrs = {k: v for k, v in vars(obj).items() if not k.startswith("_") and k not in skip}
        return (type(obj).__name__, public_view(attrs, curator_only=skip, _depth=_depth + 1))
    return repr(obj)


def _diff_paths(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two public views differ (paths), for the report."""
    if type(a) is not type(b):
        return [path or "<root>"]
    if isinstance(a, dict):
        out = [f"{path}.{k}" for k in set(a) ^ set(b)]
        for k in set(a) & set(b):
            out += _diff_paths(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return [path or "<root>"]
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out += _diff_paths(x, y, f"{path}[{i}]")
        return out
    return [] if a == b else [path or "<root>"]


# -- neighbours -------------------------------------------------------------------------
def remove_record(data: Sequence[Any], index: int) -> tuple:
    """``data`` (arrays or tensors of equal length) without row ``index``."""
    out: list[Any] = []
    for part in data:
        if isinstance(part, Tensor):
            keep = torch.ones(part.shape[0], dtype=torch.bool, device=part.device)
            keep[index] = False
            out.append(part[keep])
        else:
            arr = np.asarray(part)
            out.append(np.delete(arr, index, axis=0))
    return tuple(out)


def adversarial_removals(X: Any, y: Any | None = None, *, groups: Any | None = None) -> list[int]:
    """Indices of records a DP auditor removes first: the records at the domain's
    corners (largest and smallest coordinate sum, largest norm), the only record of a
    class (when a class has one), the last record, and the last record of the largest
    ``groups`` value (a bin, a node, a time window)."""
    Xa = np.asarray(X.detach().cpu() if isinstance(X, Tensor) else X, dtype=np.float64)
    Xa = Xa.reshape(Xa.shape[0], -1)
    n = Xa.shape[0]
    picks = [int(Xa.sum(1).argmax()), int(Xa.sum(1).argmin()), int(np.linalg.norm(Xa, axis=1).argmax()), n - 1]
    if y is not None:
        ya = np.asarray(y.detach().cpu() if isinstance(y, Tensor) else y)
        values, counts = np.unique(ya, return_counts=True)
        for v in values[counts == 1]:
            picks.append(int(np.flatnonzero(ya == v)[0]))
    if groups is not None:
        ga = np.asarray(groups.detach().cpu() if isinstance(groups, Tensor) else groups)
        values, counts = np.unique(ga, return_counts=True)
        picks.append(int(np.flatnonzero(ga == values[counts.argmax()])[-1]))
        picks.append(int(np.flatnonzero(ga == ga.max())[-1]))
    return list(dict.fromkeys(picks))


def sum_movement(
    release_sum: Callable[[Tensor, Tensor], Tensor],
    data: tuple[Tensor, Tensor],
    record: tuple[Tensor, Tensor],
    bound: float,
    *,
    placements: Sequence[str] = ("last", "first"),
) -> float:
    """``||S(D + r) - S(D)||_2 / bound`` for a pre-noise sum ``S = release_sum(x, y)``:
    how far adding ``record = (x_r (1, ...), y_r (1,))`` to ``data = (x (n, ...), y (n,))``
    moves the quantity *as computed* (in the data's dtype), in units of its declared
    sensitivity ``bound``; the largest over the record's ``placements`` in the batch,
    ``"last"`` and ``"first"`` (where every other record's row moves, which changes how a
    matrix product rounds it). The
    state search of the test suite (adversarial model states and records) drives this
    for every clipped sum the library noises."""
    x, y = data
    without = release_sum(x, y).double()
    moved = 0.0
    for placement in placements:
        if placement not in ("last", "first"):
            raise ValueError(f"placement must be 'last' or 'first', got {placement!r}")
        parts = ((x, record[0]), (y, record[1])) if placement == "last" else ((record[0], x), (record[1], y))
        with_record = release_sum(torch.cat(parts[0]), torch.cat(parts[1])).double()
        moved = max(moved, float(torch.linalg.vector_norm((with_record - without).reshape(-1))) / bound)
    return moved


# -- the check --------------------------------------------------------------------------
@dataclass
class NeighbourReport:
    """What ``neighbour_check`` found; ``assert_ok`` raises on any violation."""

    releases: list[str] = field(default_factory=list)
    max_ratio: dict[str, float] = field(default_factory=dict)  # largest movement / sensitivity
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def assert_ok(self) -> NeighbourReport:
        if self.violations:
            raise AssertionError("neighbour check failed:\n  " + "\n  ".join(self.violations[:20]))
        return self


def _movement(a: Tensor, b: Tensor, norm: str) -> float:
    d = (a - b).reshape(-1)
    if norm == "l1":
        return float(d.abs().sum())
    if norm == "l2":
        return float(torch.linalg.vector_norm(d))
    if norm == "linf":
        return float(d.abs().max()) if d.numel() else 0.0
    raise ValueError(f"norm must be 'l1', 'l2' or 'linf', got {norm!r}")


def _run(
    release: Callable[..., Any],
    data: Sequence[Any],
    replay: _Recorder | None,
    curator_only: Iterable[str],
    removed: int | None = None,
) -> tuple[_Recorder, Any, list, tuple | None]:
    with (
        warnings.catch_warnings(record=True) as caught,
        capture_releases(
            None if replay is None else replay.releases,
            removed=removed,
            replay_coins=None if replay is None else replay.coins,
        ) as recorder,
    ):
        warnings.simplefilter("always")
        error = None
        result = None
        try:
            result = release(*data)
        except _Divergence:
            raise
        except Exception as err:  # noqa: BLE001 - an exception is part of what the user sees
            error = (type(err).__name__, str(err))
    shown = [(w.category.__name__, str(w.message)) for w in caught]
    view = public_view(result, curator_only=curator_only) if error is None else None
    return recorder, view, shown, error


def neighbour_check(
    release: Callable[..., Any],
    data: Sequence[Any],
    removals: Iterable[int],
    *,
    curator_only: Iterable[str] = (),
    tolerance: float = 1e-9,
    prepare: Callable[[Sequence[Any], Sequence[Any]], Sequence[Any]] | None = None,
) -> NeighbourReport:
    """Run ``release(*data)`` on ``D = data`` and on ``D`` minus each record in
    ``removals`` and check both conditions of the module docstring.

    Parameters
    ----------
    release : callable
        ``release(*data)`` returns what the user gets (an estimator, a result tuple);
        it should draw its noise with fresh entropy as a user would (the harness replays
        outputs; it needs no seed).
    data : sequence of arrays or tensors with one row per record
    removals : indices of the records to remove, one neighbour each (see
        ``adversarial_removals``)
    curator_only : attribute names documented as curator-only (left out of the
        comparison; everything else must match exactly)
    tolerance : relative slack on the sensitivity (floating-point sums)
    prepare : optional ``prepare(D, D')`` giving the neighbour's data (e.g. to keep
        public per-record side information aligned)
    """
    report = NeighbourReport()
    ref_recorder, ref_view, ref_warnings, ref_error = _run(release, data, None, curator_only)
    ref = ref_recorder.releases
    report.releases = [r.name for r in ref]
    for index in removals:
        neighbour = remove_record(data, index) if prepare is None else prepare(data, remove_record(data, index))
        tag = f"remove record {index}"
        try:
            recorder, view, shown, error = _run(release, neighbour, ref_recorder, curator_only, removed=index)
            got = recorder.releases
        except _Divergence as err:
            report.violations.append(f"{tag}: {err}")
            continue
        if len(got) != len(ref) and error is None and ref_error is None:
            report.violations.append(f"{tag}: {len(got)} releases against {len(ref)} on D")
        for a, b in zip(ref, got, strict=False):
            if a.sensitivity is None or a.pre_noise is None or b.pre_noise is None:
                continue
            if a.pre_noise.shape != b.pre_noise.shape:
                report.violations.append(
                    f"{tag}: {a.name!r} pre-noise shape {tuple(a.pre_noise.shape)} -> {tuple(b.pre_noise.shape)}"
                )
                continue
            moved = _movement(a.pre_noise, b.pre_noise, a.norm or "l2")
            ratio = moved / a.sensitivity if a.sensitivity > 0 else (math.inf if moved > 0 else 0.0)
            report.max_ratio[a.name] = max(report.max_ratio.get(a.name, 0.0), ratio)
            if moved > a.sensitivity * (1 + tolerance) + tolerance:
                report.violations.append(
                    f"{tag}: {a.name!r} moved {moved:.6g} in {a.norm}, above its sensitivity {a.sensitivity:.6g}"
                )
        if error != ref_error:
            report.violations.append(f"{tag}: exception {error} against {ref_error} on D")
        if shown != ref_warnings:
            report.violations.append(f"{tag}: warnings {shown} against {ref_warnings} on D")
        if error is None and ref_error is None and view != ref_view:
            paths = sorted(set(_diff_paths(ref_view, view)))[:8]
            report.violations.append(f"{tag}: the release differs from D's outside the noisy outputs at {paths}")
    return report
