"""The cancellation guard for Opacus' per-sample modes (``hooks``, ``functorch``).

Opacus clips a record's per-sample gradient ``g_i`` by its computed norm. Near two
close prototypes of different classes the distances' derivatives ``G_ik`` grow without
bound while ``g_i``, a difference of terms of size about ``m_i = sum_k |G_ik| R_ik``,
stays small: the record is clipped by a modest factor and its computed gradient keeps a
rounding error of order ``u m_i`` that depends on the batch it was computed in (BLAS
rounds a row differently for different batch sizes). The clipped sum of the *other*
records can then move by more than ``C`` when one record joins the batch (a GMLVQ
state with a tiny metric and two prototypes ``1e-6`` apart does: docs/privacy-model.md).

``ClippingGuard`` gives the Opacus modes the guard of the fused engine and of ghost
clipping (``dp_proto.lvq.private.grad_samplers``): every record is clipped by
``max(||g_i||, kappa m_i)``, so its clipped terms are at most ``C / kappa`` in every
model state and the rounding of its computed gradient at most ``u C / kappa``. It
records the prototype layer's input and the gradient of its output at each step
(a forward hook and a tensor hook) and returns the layer's per-sample clipping norms
from the registered norm samplers, which the optimizer uses as floors of Opacus' norms
(``dp_proto.lvq.private.opacus_adapter.make_noise_sound(norm_floors=...)``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private.grad_samplers import SAMPLERS

__all__ = ["ClippingGuard"]


class ClippingGuard:
    """Per-sample clipping-norm floors ``kappa m_i`` of ``model``'s prototype layer.

    Parameters
    ----------
    model : PrototypeModel
        Its layer gets a forward hook; ``remove()`` takes it off.
    loss_reduction : {"mean", "sum"}
        The reduction of the loss Opacus differentiates: with ``"mean"`` the gradient of
        the layer's output is ``G / B``, scaled back by ``B`` as Opacus does.

    Calling the guard after a backward pass returns ``{parameter: (B,) floor}`` for the
    layer's trainable parameters (the clipping norms of the registered norm samplers,
    each at least the guard ``kappa m_i``) and forgets the step; ``{}`` when the layer
    has no registered norm sampler, the batch was empty or the step left no gradient.
    """

    def __init__(self, model: PrototypeModel, *, loss_reduction: str = "mean") -> None:
        if loss_reduction not in ("mean", "sum"):
            raise ValueError(f"loss_reduction must be 'mean' or 'sum', got {loss_reduction!r}")
        self.layer = model.layer
        self.loss_reduction = loss_reduction
        samplers = SAMPLERS.get(type(self.layer))
        self._sampler = samplers[1] if samplers is not None else None  # the norm sampler
        self._x: Tensor | None = None
        self._g: Tensor | None = None
        self._handle = self.layer.register_forward_hook(self._record) if self._sampler is not None else None

    def _record(self, module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> None:
        if not torch.is_grad_enabled() or not output.requires_grad:
            return
        self._x, self._g = inputs[0].detach(), None

        def keep(grad: Tensor) -> None:
            self._g = grad.detach()

        output.register_hook(keep)

    def __call__(self) -> dict[Tensor, Tensor]:
        x, g = self._x, self._g
        self._x = self._g = None
        if self._sampler is None or x is None or g is None or x.shape[0] == 0:
            return {}
        if self.loss_reduction == "mean":
            g = g * g.shape[0]
        with torch.no_grad():
            return {p: floor for p, floor in self._sampler(self.layer, [x], g).items()}

    def remove(self) -> None:
        """Take the forward hook off the layer."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
