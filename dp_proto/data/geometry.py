"""Geographic neighbours of sensor nodes: great-circle distances and the ``c`` nearest
other nodes (ties to the lower index)."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np

from dp_proto.exceptions import DataValidationError

__all__ = ["EARTH_RADIUS_KM", "haversine_distances", "nearest_neighbours"]


#: Mean Earth radius used by ``haversine_distances``, in km.
EARTH_RADIUS_KM = 6371.0088


# Distances are compared after rounding to this many decimals of a km (1 mm), so
# geometrically equal distances tie and go to the lower index.
_DISTANCE_DECIMALS = 6


# --------------------------------------------------------------------------- neighbours
def _check_coordinates(coordinates: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    c = np.asarray(coordinates, dtype=np.float64)
    if c.ndim != 2 or c.shape[1] != 2:
        raise ValueError(f"coordinates must have shape (N, 2) (lat, lon), got {c.shape}")
    if not np.all(np.isfinite(c)):
        raise DataValidationError("coordinates contain NaN or inf")
    if np.any(np.abs(c[:, 0]) > 90) or np.any(np.abs(c[:, 1]) > 180):
        raise DataValidationError("coordinates out of range: latitude must be in [-90, 90], longitude in [-180, 180]")
    return c


def haversine_distances(coordinates: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    """Great-circle distances between points given as (latitude, longitude) in degrees.

    Parameters
    ----------
    coordinates : array-like of shape (N, 2)

    Returns
    -------
    ndarray of shape (N, N), dtype float64
        Distances in km on a sphere of radius ``EARTH_RADIUS_KM``; symmetric,
        zero diagonal.
    """
    c = np.radians(_check_coordinates(coordinates))
    lat, lon = c[:, 0][:, None], c[:, 1][:, None]
    dlat = lat - lat.T
    dlon = lon - lon.T
    a = np.sin(dlat / 2) ** 2 + np.cos(lat) * np.cos(lat.T) * np.sin(dlon / 2) ** 2
    d = 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))
    d = (d + d.T) / 2  # exact symmetry
    np.fill_diagonal(d, 0.0)
    return d


def nearest_neighbours(
    coordinates: np.ndarray | Sequence[Sequence[float]],
    c: int,
    *,
    metric: str = "haversine",
) -> np.ndarray:
    """The ``c`` nearest other nodes of every node.

    Parameters
    ----------
    coordinates : array-like of shape (N, 2)
        Latitude and longitude in degrees.
    c : int
        Neighbours per node, ``1 <= c <= N - 1``.
    metric : {"haversine", "euclidean"}, default "haversine"
        Great-circle distance, or the Euclidean distance of the raw
        (lat, lon) degrees (the wording of Sachweh et al. 2021; at Melbourne's latitude it
        overweights latitude differences by about 1 / cos(37.8 deg) = 1.27).

    Returns
    -------
    ndarray of shape (N, c), dtype int64
        Row ``i``: indices of the neighbours of node ``i``, nearest first,
        never ``i`` itself. Distances are compared after rounding to 1e-6
        (km or degrees), and equal distances go to the lower index.

    Raises
    ------
    ValueError
        If ``c < 1`` or ``c >= N`` (not enough other nodes), bad shape or metric.
    DataValidationError
        Non-finite or out-of-range coordinates.
    """
    if not isinstance(c, numbers.Integral) or isinstance(c, bool):
        raise TypeError(f"c must be an int, got {type(c).__name__}")
    coords = _check_coordinates(coordinates)
    n = len(coords)
    if c < 1:
        raise ValueError(f"c must be >= 1, got {c}")
    if c >= n:
        raise ValueError(
            f"c={c} neighbours requested but there are only {n} nodes, so each node has "
            f"{n - 1} possible neighbours; use c <= {n - 1}"
        )
    if metric == "haversine":
        d = haversine_distances(coords)
    elif metric == "euclidean":
        diff = coords[:, None, :] - coords[None, :, :]
        d = np.sqrt((diff**2).sum(axis=2))
    else:
        raise ValueError(f"metric must be 'haversine' or 'euclidean', got {metric!r}")
    d = np.round(d, _DISTANCE_DECIMALS)
    np.fill_diagonal(d, np.inf)
    order = np.argsort(d, axis=1, kind="stable")  # stable: ties keep index order
    return np.ascontiguousarray(order[:, :c]).astype(np.int64)
