"""Per-record group normalisation of channelled features (no privacy cost).

Group normalisation (Wu & He 2018) standardises each record by statistics of that record
alone, so unlike a standard scaler it reads nothing across records: a data-independent
map applied record by record, which costs no privacy budget. Tramèr & Boneh (2021)
normalise ScatterNet features this way before a DP-SGD-trained linear head.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from dp_proto.exceptions import DataValidationError

__all__ = ["GroupNormalizer"]

#: records normalised at once: bounds the float64 temporaries (~30 MB for 3969 features)
_CHUNK_ROWS = 1024


class GroupNormalizer(TransformerMixin, BaseEstimator):
    """Normalise every record's channel groups to zero mean and unit variance, record by record.

    Each row of ``X (n, d)`` is read as ``channels`` channels of ``d / channels`` positions
    (C order: the layout of a flattened ``(n, C, H, W)`` feature map); the channels are
    split into ``groups`` consecutive groups of ``channels / groups``, and every group is
    standardised over its channels x positions by its own mean and (biased) variance::

        out = (x - mean_g(x)) / sqrt(var_g(x) + eps)

    the same numbers as ``torch.nn.functional.group_norm(x.reshape(n, C, -1), groups,
    eps=eps)`` without the affine part.

    Privacy: the statistics of a record are computed from that record only, so removing
    or adding another record leaves its output unchanged. ``fit`` learns nothing from the
    data (it checks the shape), and the transform is a fixed, public per-record map: it
    costs no privacy budget and may sit in a ``DPPipeline`` in front of a DP estimator
    (Tramèr & Boneh 2021 group-normalise their ScatterNet features the same way).

    Parameters
    ----------
    channels : int
        ``C``, the number of channels of a record; must divide ``d``. 81 for the
        ``Scattering2D(J=2)`` features of a 28 x 28 image (``d = 81 * 7 * 7 = 3969``).
    groups : int
        ``G``, the number of channel groups; must divide ``channels``. ``groups=channels``
        is instance normalisation, ``groups=1`` layer normalisation.
    eps : float, default 1e-5
        Added to every group's variance (a constant group maps to zeros).

    Attributes
    ----------
    n_features_in_ : int
        ``d``, the number of features seen in ``fit``.

    Shapes:
        ``transform``: ``(n, d)`` -> ``(n, d)``, ``d = channels * positions``; float32
        input stays float32, anything else becomes float64.

    Example::

        from dp_proto.features import GroupNormalizer, Scattering2D

        feats = Scattering2D((28, 28), J=2)(images / 255.0)      # (n, 81, 7, 7)
        X = feats.flatten(1).numpy()                             # (n, 3969)
        Z = GroupNormalizer(channels=81, groups=27).fit_transform(X)

    References
    ----------
    Wu & He (2018). Group normalization. *ECCV 2018*.

    Tramèr & Boneh (2021). Differentially private learning needs better features (or much
    more data). *ICLR 2021*.
    """

    def __init__(self, channels: int, groups: int, eps: float = 1e-5) -> None:
        self.channels = channels
        self.groups = groups
        self.eps = eps

    def _check_params(self) -> None:
        for name in ("channels", "groups"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self.channels % self.groups:
            raise ValueError(
                f"groups={self.groups} does not divide channels={self.channels}: every group needs the same "
                "number of channels"
            )
        if isinstance(self.eps, bool) or not isinstance(self.eps, Real) or not self.eps > 0:
            raise ValueError(f"eps must be a number > 0, got {self.eps!r}")

    def _check_X(self, X: Any, *, reset: bool) -> np.ndarray:
        """``X (n, d)`` as float32 or float64; errors for NaN / inf and a ``d`` that
        ``channels`` does not divide."""
        X = validate_data(self, X, reset=reset, dtype=[np.float64, np.float32], ensure_all_finite=False)
        if not np.isfinite(X).all():
            rows = np.flatnonzero(~np.isfinite(X).all(axis=1))
            raise DataValidationError(
                f"GroupNormalizer: X holds NaN or inf in {len(rows)} row(s) (first: {rows[:5].tolist()}); "
                "remove or impute those records first"
            )
        if X.shape[1] % self.channels:
            raise ValueError(
                f"channels={self.channels} does not divide the number of features {X.shape[1]}: a record must "
                "reshape to (channels, positions)"
            )
        return X

    def n_features_out(self, n_features: int) -> int:
        """The output width, ``n_features`` (``DPPipeline`` plans past the step with it)."""
        return n_features

    def fit(self, X: Any, y: Any = None) -> GroupNormalizer:
        """Check ``X (n, d)`` and the settings; nothing is learnt from the data. ``y`` is ignored."""
        self._check_params()
        self._check_X(X, reset=True)
        return self

    def transform(self, X: Any) -> np.ndarray:
        """Each record of ``X (n, d)`` group-normalised by its own statistics: ``(n, d)``."""
        check_is_fitted(self, "n_features_in_")
        self._check_params()
        X = self._check_X(X, reset=False)
        out = np.empty_like(X)
        for start in range(0, len(X), _CHUNK_ROWS):
            rows = slice(start, start + _CHUNK_ROWS)
            out[rows] = self._normalise(X[rows])
        return out

    def _normalise(self, X: np.ndarray) -> np.ndarray:
        """``(m, d)`` -> ``(m, d)``, computed in float64."""
        grouped = X.astype(np.float64).reshape(len(X), self.groups, -1)  # (m, G, d / G)
        mean = grouped.mean(axis=2, keepdims=True)
        var = grouped.var(axis=2, keepdims=True)
        return ((grouped - mean) / np.sqrt(var + self.eps)).reshape(X.shape)
