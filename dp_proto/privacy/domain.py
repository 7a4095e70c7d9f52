"""Public domains: scale data into ``[-1, 1]^d`` from bounds that do not come from the data.

The DP mechanisms of this package assume records in ``[-1, 1]^d``. The bounds used
to get there must be public (known a priori, e.g. pixel values 0..255, or a sensor's
range); bounds computed from the private data leak information, so
``PublicBoundsScaler.from_data`` emits ``PrivacyLeakWarning``.

The same holds for the labels: the set of classes a private model is built for must be
public (``public_classes``). Read from the private labels, it tells which labels
occur, and one record holding a label of its own changes it with certainty.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, TransformerMixin

from dp_proto.exceptions import DataValidationError, DomainWarning, PrivacyLeakWarning
from dp_proto.privacy.clipping import clip_box
from dp_proto.privacy.curator import curator_log, curator_outside_bounds

__all__ = ["PublicBoundsScaler", "clip_for_fit", "public_classes", "warn_clipped", "describe_bounds"]


def public_classes(y: np.ndarray, classes, owner: str, *, warn: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The sorted class labels ``(c,)`` of a private fit and the class index of every
    label in ``y (n,)``.

    ``classes`` is the public label set (any order, no repeats, at least 2). A label of
    ``y`` outside it raises ``DataValidationError``; a public
    class without records is kept (the model still has its prototypes or cells, built
    from noise alone). ``classes=None`` reads the set from ``y`` -- with a
    ``PrivacyLeakWarning`` unless ``warn=False`` (for
    non-private fits), since a private model then shows which labels the private data
    contain -- and needs at least 2 of them.
    """
    y = np.asarray(y)
    if classes is None:
        if warn:
            warnings.warn(
                f"{owner}: classes=None takes the set of class labels from the private y, so the "
                "released model shows which labels occur (one record with a label of its own "
                "changes it) and the guarantee does not cover that; pass the public label set, "
                "classes=[...]",
                PrivacyLeakWarning,
                stacklevel=3,
            )
        out, index = np.unique(y, return_inverse=True)
        if len(out) < 2:
            raise DataValidationError(f"{owner} needs samples of at least 2 classes, got {len(out)}")
        return out, index
    given = np.asarray(classes)
    if given.ndim != 1:
        raise ValueError(f"classes must be a 1-D list of labels, got shape {given.shape}")
    out = np.unique(given)
    if len(out) != len(given):
        raise ValueError("classes holds repeated labels")
    if len(out) < 2:
        raise ValueError(f"{owner} needs at least 2 public classes, got {len(out)}")
    unknown = np.setdiff1d(np.unique(y), out) if y.size else np.array([])
    if unknown.size:
        # No count or value in the message: it would describe private records. The
        # refusal itself breaks the declared domain and comes before any release.
        raise DataValidationError(
            f"y contains labels outside the public classes {out.tolist()}; "
            "remove those records or add the labels to classes"
        )
    return out, np.searchsorted(out, y)


def describe_bounds(lower: Any, upper: Any) -> str:
    """``"[0, 16]^d"`` for scalar (or equal per-feature) bounds, else the per-feature
    bounds with the first three features shown."""
    lo, hi = np.atleast_1d(np.asarray(lower, dtype=np.float64)), np.atleast_1d(np.asarray(upper, dtype=np.float64))
    if np.all(lo == lo.flat[0]) and np.all(hi == hi.flat[0]):
        return f"[{lo.flat[0]:g}, {hi.flat[0]:g}]^d"
    shown = ", ".join(f"[{a:g}, {b:g}]" for a, b in zip(lo.flat[:3], hi.flat[:3], strict=False))
    more = ", ..." if max(lo.size, hi.size) > 3 else ""
    return f"the per-feature bounds {shown}{more}"


def warn_clipped(
    num_clipped: int, total: int, what: str = "records", *, private: bool = False, bounds: str = "[-1, 1]^d"
) -> None:
    """Emit a ``DomainWarning`` saying how many of ``total`` records were clipped into
    ``bounds`` (the public domain in use, as ``describe_bounds`` writes it).

    ``private=True`` (inside a private release): the count goes to the curator-only log
    instead (``dp_proto.privacy.curator``); a warning whose presence depends on one
    record would tell neighbouring data sets apart."""
    if private:
        if num_clipped:
            curator_log("%d of %d %s lay outside the public domain and were clipped", num_clipped, total, what)
        return
    if num_clipped:
        warnings.warn(
            f"{num_clipped} of {total} {what} lay outside the public domain {bounds} and were "
            f"clipped into it (the privacy guarantee holds; their values changed)",
            DomainWarning,
            stacklevel=3,
        )


class PublicBoundsScaler(TransformerMixin, BaseEstimator):
    """Affine map of public per-feature bounds ``[lower, upper]`` onto ``[-1, 1]``,
    then clipping (counted, with a ``DomainWarning``).

    Parameters
    ----------
    lower, upper : float or array (d,)
        Public bounds, e.g. ``0`` and ``255`` for pixels.
    clip : bool
        Clip transformed values into ``[-1, 1]`` (default True).
    warn : bool
        Warn (``DomainWarning``) when rows are clipped (default True). Private
        estimators pass False and report the count on the curator-only channel.

    Attributes
    ----------
    num_clipped_ : int
        Rows clipped by the last ``transform``.
    num_entries_clipped_ : int
        Entries clipped by the last ``transform``.
    """

    def __init__(self, lower=0.0, upper=1.0, clip: bool = True, warn: bool = True) -> None:
        self.lower = lower
        self.upper = upper
        self.clip = clip
        self.warn = warn

    @classmethod
    def from_data(cls, X, margin: float = 0.0) -> PublicBoundsScaler:
        """Bounds from the data's min and max (plus ``margin``): **not private**.

        Emits ``PrivacyLeakWarning``: the bounds are a release about the data that
        no mechanism accounts for. Use it only for public data or for experiments.
        """
        warnings.warn(
            "PublicBoundsScaler.from_data derives the domain bounds from the data itself; "
            "these bounds are not differentially private. Pass public bounds instead.",
            PrivacyLeakWarning,
            stacklevel=2,
        )
        X = np.asarray(X, dtype=np.float64)
        return cls(X.min(axis=0) - margin, X.max(axis=0) + margin)

    def fit(self, X=None, y=None) -> PublicBoundsScaler:
        """Checks the bounds; learns nothing from ``X`` (the bounds are public)."""
        lower = np.asarray(self.lower, dtype=np.float64)
        upper = np.asarray(self.upper, dtype=np.float64)
        if not (np.isfinite(lower).all() and np.isfinite(upper).all()):
            raise ValueError("lower and upper must be finite")
        if np.any(upper <= lower):
            raise ValueError("every upper bound must exceed its lower bound")
        self.lower_, self.upper_ = lower, upper
        return self

    def transform(self, X):
        if not hasattr(self, "lower_"):
            self.fit()
        is_tensor = isinstance(X, torch.Tensor)
        arr = X.detach().cpu().double().numpy() if is_tensor else np.asarray(X, dtype=np.float64)
        out = 2.0 * (arr - self.lower_) / (self.upper_ - self.lower_) - 1.0
        self.num_clipped_ = self.num_entries_clipped_ = 0
        if self.clip:
            clipped = clip_box(torch.from_numpy(np.ascontiguousarray(out)))
            out, self.num_clipped_ = clipped.values.numpy(), clipped.num_clipped
            self.num_entries_clipped_ = clipped.num_entries_clipped
            bounds = describe_bounds(self.lower_, self.upper_)
            warn_clipped(self.num_clipped_, len(out), private=not self.warn, bounds=bounds)
        return torch.as_tensor(out, dtype=X.dtype, device=X.device) if is_tensor else out

    def inverse_transform(self, Z):
        if not hasattr(self, "lower_"):
            self.fit()
        Z = np.asarray(Z, dtype=np.float64)
        return (Z + 1.0) / 2.0 * (self.upper_ - self.lower_) + self.lower_


def clip_for_fit(estimator: Any, clipper: PublicBoundsScaler, X: Any) -> Any:
    """``clipper.transform(X)`` for a private fit of ``estimator``, with how many records
    and values were clipped told on the curator channel (``curator_outside_bounds``).
    ``clipper`` is a throwaway scaler: it keeps the counts, which are curator-only."""
    Z = clipper.transform(X)
    entries = (int(clipper.num_entries_clipped_), int(np.prod(Z.shape)))
    curator_outside_bounds(estimator, int(clipper.num_clipped_), len(Z), entries=entries)
    return Z
