"""A ``PrototypeModel`` in the release format (``dp_proto.release``): its tensors and back.

=====================  =================  ======================================
tensor                 shape              of
=====================  =================  ======================================
``prototypes``         ``(W, d)``         every layer (the model's units)
``prototype_labels``   ``(W,)``, int64    every layer (class indices)
``omega``              ``(r, d)``         ``GMLVQLayer``
``omegas``             ``(W, r, d)``      ``LGMLVQLayer``
=====================  =================  ======================================

The layer's kind and its ``normalize`` flag go to the manifest's ``public["layer"]``.
Parameters keep their dtype, so a loaded model computes the same distances bit for bit.
Models with a backbone have no release format yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from dp_proto.lvq.layers import GLVQLayer, GMLVQLayer, LGMLVQLayer
from dp_proto.lvq.model import PrototypeModel
from dp_proto.release import Release

__all__ = ["PublicReleaseHooks", "layer_description", "model_tensors", "model_from_release"]

_LAYERS: dict[str, type[GLVQLayer]] = {"GLVQLayer": GLVQLayer, "GMLVQLayer": GMLVQLayer, "LGMLVQLayer": LGMLVQLayer}


def _check_releasable(model: PrototypeModel) -> GLVQLayer:
    if model.has_backbone:
        raise TypeError(
            "a PrototypeModel with a backbone has no release format yet (only its prototype layer would be)"
        )
    layer = model.layer
    if type(layer).__name__ not in _LAYERS or type(layer) is not _LAYERS[type(layer).__name__]:
        raise TypeError(f"no release format for the prototype layer {type(layer).__qualname__}")
    return layer


def layer_description(model: PrototypeModel) -> dict[str, Any]:
    """The manifest's ``public["layer"]``: ``{"type", "in_features", "num_prototypes",
    "rank", "normalize"}`` (``rank``/``normalize`` None for ``GLVQLayer``)."""
    layer = _check_releasable(model)
    return {
        "type": type(layer).__name__,
        "in_features": int(layer.in_features),
        "num_prototypes": int(layer.num_prototypes),
        "rank": int(layer.rank) if isinstance(layer, (GMLVQLayer, LGMLVQLayer)) else None,
        "normalize": bool(layer.normalize) if isinstance(layer, (GMLVQLayer, LGMLVQLayer)) else None,
    }


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().copy()


def model_tensors(model: PrototypeModel) -> dict[str, np.ndarray]:
    """The tensors of ``model`` (see the module docstring), as numpy arrays."""
    layer = _check_releasable(model)
    tensors = {
        "prototypes": _numpy(layer.prototypes),
        "prototype_labels": _numpy(model.prototype_labels).astype(np.int64),
    }
    if isinstance(layer, GMLVQLayer):
        tensors["omega"] = _numpy(layer.omega)
    elif isinstance(layer, LGMLVQLayer):
        tensors["omegas"] = _numpy(layer.omegas)
    return tensors


def _shape_error(name: str, got: tuple[int, ...], expected: tuple[int, ...]) -> ValueError:
    return ValueError(f"tensor {name!r} of the release has shape {got}, but its layer needs {expected}")


def model_from_release(release: Release, *, num_classes: int, device: torch.device | str = "cpu") -> PrototypeModel:
    """The ``PrototypeModel`` of ``release``'s tensors (``model_tensors``), on ``device``.

    Shapes are checked against ``public["layer"]`` and ``public["n_features"]``, labels
    against ``num_classes``: a disagreement raises ``ValueError``."""
    info: Mapping[str, Any] = release.public.get("layer") or {}
    kind = info.get("type")
    if kind not in _LAYERS:
        raise ValueError(f"unknown prototype layer {kind!r} in the release; expected one of {sorted(_LAYERS)}")
    prototypes = release.tensor("prototypes", ndim=2)
    labels = release.tensor("prototype_labels", ndim=1)
    w, d = prototypes.shape
    expected = (int(info.get("num_prototypes", w)), int(release.public.get("n_features", d)))
    if (w, d) != expected:
        raise _shape_error("prototypes", (w, d), expected)
    if labels.shape != (w,):
        raise _shape_error("prototype_labels", tuple(labels.shape), (w,))
    if labels.dtype.kind not in "iu" or (w and (labels.min() < 0 or labels.max() >= num_classes)):
        raise ValueError(f"prototype_labels must be class indices in [0, {num_classes}), got {labels.tolist()}")
    dtype = torch.from_numpy(prototypes[:0]).dtype
    kwargs: dict[str, Any] = {"prototypes": "zeros", "dtype": dtype, "device": device}
    if kind != "GLVQLayer":  # omega_init "identity": no randomness drawn, overwritten below
        kwargs.update(rank=int(info["rank"]), normalize=bool(info["normalize"]), omega_init="identity")
    layer = _LAYERS[kind](d, w, **kwargs)
    with torch.no_grad():
        layer.prototypes.copy_(torch.from_numpy(prototypes))
        if isinstance(layer, GMLVQLayer):
            omega = release.tensor("omega", ndim=2)
            if omega.shape != tuple(layer.omega.shape):
                raise _shape_error("omega", tuple(omega.shape), tuple(layer.omega.shape))
            layer.omega.copy_(torch.from_numpy(omega))
        elif isinstance(layer, LGMLVQLayer):
            omegas = release.tensor("omegas", ndim=3)
            if omegas.shape != tuple(layer.omegas.shape):
                raise _shape_error("omegas", tuple(omegas.shape), tuple(layer.omegas.shape))
            layer.omegas.copy_(torch.from_numpy(omegas))
    return PrototypeModel(layer, torch.from_numpy(labels.astype(np.int64)))


class PublicReleaseHooks:
    """The release hooks of a non-private estimator, which its private subclass
    overrides: no domain (the tensors are in the input units), no ledger (the manifest
    says ``"private": false``), and a private release refused on loading."""

    def _release_domain(self) -> dict[str, Any] | None:
        return None

    def _release_domain_tensors(self) -> dict[str, np.ndarray]:
        return {}

    def _release_privacy(self) -> dict[str, Any]:
        return {"private": False}

    def _release_fitted_tensors(self) -> dict[str, np.ndarray]:
        """Fitted arrays beyond the model's tensors (the private estimators' noisy counts)."""
        return {}

    def _restore_fitted_tensors(self, release: Release) -> None:
        pass

    def _restore_domain(self, release: Release) -> None:
        if release.private:
            raise ValueError(f"the release of {release.model} is private, but {type(self).__name__} is not")

    def _restore_privacy(self, release: Release) -> None:
        pass
