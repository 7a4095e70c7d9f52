"""Data sections shared by the experiment runners: where the arrays come from and how a
private run puts them on a public scale.

``data.source`` is ``bundled`` (scikit-learn sets), ``uci`` or ``mnist`` (files in
``data.data_dir`` or ``$DP_PROTO_DATA_DIR``) or ``synthetic`` (a generator of
``dp_proto.data.synthetic``, seeded by the config's ``seed``).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dp_proto import data as datasets
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.privacy.domain import PublicBoundsScaler

__all__ = ["SOURCES", "load_arrays", "scale_to_public_bounds", "warn_classes_from_data"]

SOURCES = ("bundled", "uci", "mnist", "synthetic")


def load_arrays(cfg: Mapping[str, Any], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels named by a data section (``source``, ``name``, ``data_dir``).

    MNIST comes as images ``(n, 1, 28, 28)`` (training and test files concatenated); every
    other source as ``(n, d)``."""
    source, name = cfg["source"], cfg["name"]
    data_dir = cfg["data_dir"] or datasets.default_data_dir()
    if source == "bundled":
        return datasets.load_bundled(name)
    if source in ("uci", "mnist"):
        if data_dir is None:
            raise ValueError(f"data.source={source!r} needs data.data_dir or $DP_PROTO_DATA_DIR")
        if source == "uci":
            return datasets.load_uci(name, data_dir)
        xs, ys = zip(*(datasets.load_mnist(data_dir, split=s) for s in ("train", "test")), strict=True)
        x = np.concatenate(xs)[:, None].astype(np.float32)  # (n, 1, 28, 28)
        return x, np.concatenate(ys)
    if source == "synthetic":
        generator = getattr(datasets, name, None)
        if generator is None or name.startswith("_"):
            raise ValueError(f"unknown synthetic generator {name!r}")
        return generator(random_state=seed)
    raise ValueError(f"unknown data.source {source!r}; expected one of {', '.join(SOURCES)}")


def scale_to_public_bounds(x: np.ndarray, bounds: Sequence[Any] | None, *, key: str = "privacy.bounds") -> np.ndarray:
    """Map ``x`` ``(n, ...)`` from the public per-feature range ``bounds = [lower, upper]``
    (floats or arrays over the flattened features) onto ``[-1, 1]``, clipping what lies
    outside.

    How many records were clipped depends on the private data, so the count goes to the
    curator log (``dp_proto.curator``), never to a warning the user sees."""
    if bounds is None or len(bounds) != 2:
        raise ValueError(f"a private run needs {key}: [lower, upper], the public feature range")
    scaler = PublicBoundsScaler(bounds[0], bounds[1], warn=False)
    return scaler.fit_transform(x.reshape(len(x), -1)).reshape(x.shape)


def warn_classes_from_data(key: str = "privacy.classes") -> None:
    """The warning of a private run whose label set is read from the data."""
    warnings.warn(
        f"{key} is null: the label set is read from the private data, so the released model shows "
        "which labels occur; give the public label set",
        PrivacyLeakWarning,
        stacklevel=3,
    )
