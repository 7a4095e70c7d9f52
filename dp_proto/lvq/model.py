"""A prototype classifier: an optional feature extractor, a prototype layer and labels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor, nn

from dp_proto.lvq.layers import GLVQLayer
from dp_proto.lvq.losses import Transfer, glvq_loss, wtac
from dp_proto.lvq.settle import settle_distances

__all__ = ["PrototypeModel", "forward_in_dtype"]


class PrototypeModel(nn.Module):
    """``backbone -> prototype layer``, with the prototype labels kept beside the layer.

    The labels are a buffer of this wrapper, which has no trainable parameters of
    its own, so Opacus accepts the model: the trainable layers (backbone layers
    and the prototype layer) own no buffers.

    Parameters
    ----------
    layer : GLVQLayer
        A ``GLVQLayer``, ``GMLVQLayer`` or ``LGMLVQLayer``.
    prototype_labels : Tensor or sequence of int, shape (W,)
        Class index of every prototype.
    backbone : nn.Module, optional
        Any feature extractor mapping inputs to ``(B, d)`` (or ``(B, ...)`` that
        flattens to ``d``); default: the identity.

    Attributes
    ----------
    backbone : nn.Module
        The feature extractor (``nn.Identity`` if none was given).
    layer : GLVQLayer
        The prototype layer.
    prototype_labels : Tensor, shape (W,)
        Class index of every prototype (a buffer, not trained).
    privacy_ : dict
        Only after ``dp_proto.privacy.PrivacyLedger.attach``: the ledger's summary,
        kept in the ``state_dict``.

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> from dp_proto.lvq import GMLVQLayer, PrototypeModel, wtac
    >>> cnn = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten())
    >>> model = PrototypeModel(GMLVQLayer(128, 10, rank=16), range(10), backbone=cnn)
    >>> distances = model(torch.zeros(5, 1, 28, 28))  # distances (B, W)
    >>> distances.shape, wtac(distances, model.prototype_labels).shape
    (torch.Size([5, 10]), torch.Size([5]))
    """

    prototype_labels: Tensor

    def __init__(
        self,
        layer: GLVQLayer,
        prototype_labels: Tensor | Sequence[int],
        *,
        backbone: nn.Module | None = None,
    ) -> None:
        super().__init__()
        labels = torch.as_tensor(
            list(prototype_labels) if not isinstance(prototype_labels, Tensor) else prototype_labels
        )
        labels = labels.to(device=layer.prototypes.device, dtype=torch.long)
        if labels.shape != (layer.num_prototypes,):
            raise ValueError(f"expected {layer.num_prototypes} prototype labels, got shape {tuple(labels.shape)}")
        self.backbone = backbone if backbone is not None else nn.Identity()
        self.layer = layer
        self.register_buffer("prototype_labels", labels)

    # A privacy summary attached by PrivacyLedger.attach travels in the state_dict.
    def get_extra_state(self) -> dict:
        return {"privacy": getattr(self, "privacy_", None)}

    def set_extra_state(self, state: dict) -> None:
        if state.get("privacy") is not None:
            self.privacy_ = state["privacy"]

    @property
    def has_backbone(self) -> bool:
        """Whether a backbone was given (the features are not the input itself)."""
        return not isinstance(self.backbone, nn.Identity)

    @property
    def num_classes(self) -> int:
        return int(self.prototype_labels.max()) + 1

    def features(self, x: Tensor) -> Tensor:
        """Backbone output ``(B, d)`` (``ValueError`` if a record's output does not have the
        layer's ``d = in_features`` values: a backbone that does not fit the head)."""
        out = self.backbone(x)
        if out.ndim < 1 or (out.shape[0] and out[0].numel() != self.layer.in_features):
            raise ValueError(
                f"the backbone gives features of shape {tuple(out.shape)} for input of shape {tuple(x.shape)}, "
                f"but the prototype layer expects {self.layer.in_features} features per record"
            )
        return out

    def forward(self, x: Tensor) -> Tensor:
        """Distances ``(B, W)`` between the backbone features and the prototypes; in
        float64, a row's order and its entries near zero are the same bits in any batch
        (``dp_proto.lvq.settle``)."""
        features = self.features(x)
        return settle_distances(self.layer, self.layer._flatten(features), self.layer(features))

    def loss(
        self,
        distances: Tensor,
        targets: Tensor,
        *,
        transfer_fn: Transfer = "identity",
        beta: float = 1.0,
        reduction: Literal["mean", "sum", "none"] = "mean",
    ) -> Tensor:
        """GLVQ cost of ``forward``'s output, see ``dp_proto.lvq.glvq_loss``."""
        return glvq_loss(
            distances, targets, self.prototype_labels, transfer_fn=transfer_fn, beta=beta, reduction=reduction
        )

    @torch.no_grad()
    def predict(self, x: Tensor) -> Tensor:
        """Winner-takes-all class indices ``(B,)``."""
        return wtac(self(x), self.prototype_labels)


def forward_in_dtype(module: nn.Module, x: Tensor, dtype: torch.dtype) -> Tensor:
    """``module(x)`` without gradients, computed with ``x`` and the module's parameters
    cast to ``dtype``; the module itself is left as it is.

    The estimators train in float32 and predict in float64 this way, so their outputs do
    not depend on the order or the batching of the samples (float32 matrix products
    round differently for different row blocks).
    """
    params = {name: p.detach().to(dtype) for name, p in module.named_parameters()}
    with torch.no_grad():
        return torch.func.functional_call(module, params, (x.to(dtype),))
