"""Closed-form gradients of weighted sums of prototype distances, without autograd.

Every GLVQ-type cost depends on the parameters through the distances ``D (B, W)`` only,
so its gradient is ``sum_ij A_ij grad_p D_ij`` with ``A = dcost/dD``
(``dp_proto.lvq.losses.glvq_cost_and_gradient``: two non-zeros per row). For the three
prototype layers that sum has a closed form of a few matrix products: no autograd graph,
and no ``(B, W, r)`` intermediates kept for backward beyond the projections (timings
against autograd: docs/lvq.md, "Reproduced results"). The L-BFGS fits
of the estimators (full batch) and the fused DP-SGD engine (clipped weights ``A``) both
evaluate their gradients here.

:class:`DistanceEvaluation` computes the distances once, keeps what the gradients
need, and returns ``{parameter: gradient}`` for any weights. Notation: ``x (B, d)``,
prototypes ``w (W, d)``, ``Omega (r, d)`` or ``Omega_j (W, r, d)``, ``a = A^T 1 (W,)``,
``v_ij = x_i - w_j``.

* GLVQ, ``D_ij = ||v_ij||^2``: ``grad w = -2 (A^T x - a * w)``.
* GMLVQ, ``D_ij = ||Omega v_ij||^2`` with ``U = x Omega^T``, ``P = w Omega^T``:
  ``grad w = -2 (A^T U - a * P) Omega``,
  ``grad Omega = 2 ((b * U)^T x - (U^T A) w - P^T (A^T x) + (a * P)^T w)``, ``b = A 1``.
* LGMLVQ, ``D_ij = ||Omega_j v_ij||^2``, two layouts (as ``lomega_distance``):
  projections ``p_ij = Omega_j v_ij (B, W, r)``, ``Y = A * p``, ``s = Y^T 1 (W, r)``:
  ``grad Omega_j = 2 (Y_j^T x - s_j w_j^T)``, ``grad w_j = -2 Omega_j^T s_j``; or, for few
  features (``d^2 <= W r``), the quadratic form with ``Lambda_j = Omega_j^T Omega_j`` and
  ``M_j = sum_i A_ij v_ij v_ij^T = S_j - (A^T x)_j w_j^T - w_j (A^T x)_j^T + a_j w_j w_j^T``
  (``S_j = sum_i A_ij x_i x_i^T``, one ``(W, B) @ (B, d^2)`` product):
  ``grad Omega_j = 2 Omega_j M_j``, ``grad w_j = -2 Lambda_j ((A^T x)_j - a_j w_j)``.
* any other layer (a subclass with its own distance): autograd through its forward.

The distances' clamp at zero (against rounding) is ignored by the closed forms, as by
any gradient of a distance that is zero up to rounding.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor, nn

from dp_proto.lvq.distances import _pairwise_sq, outer_products, quadratic_form_is_cheaper
from dp_proto.lvq.layers import GLVQLayer, GMLVQLayer, LGMLVQLayer

__all__ = ["DistanceEvaluation", "outer_products"]


def quadratic_layout(layer: LGMLVQLayer) -> bool:
    """Whether ``lomega_distance`` takes the quadratic form for this layer (``d^2 <= W r``)."""
    return quadratic_form_is_cheaper(layer.omegas)


class DistanceEvaluation:
    """The distances ``(B, W)`` of ``layer`` at ``x (B, d)``, without autograd, and the
    closed-form gradients of ``sum_ij A_ij D_ij`` for weights ``A (B, W)``.

    Parameters
    ----------
    layer : GLVQLayer
        The prototype layer (any subclass: the three standard layers in closed form,
        others by autograd).
    x : Tensor, shape (B, d)
        Inputs in the layer's dtype and device.
    outer : Tensor, shape (B, d^2), optional
        ``outer_products(x)``, when the caller keeps it across evaluations (LGMLVQ with
        few features).
    projections : (Tensor, Tensor), optional
        GMLVQ: ``(x Omega^T, w Omega^T)`` when the caller has them already.
    """

    def __init__(
        self,
        layer: GLVQLayer,
        x: Tensor,
        *,
        outer: Tensor | None = None,
        projections: tuple[Tensor, Tensor] | None = None,
    ) -> None:
        self.layer = layer
        self.x = x
        self.kind = type(layer)
        self.projections: tuple[Tensor, Tensor] | None = None  # GMLVQ: (x Omega^T, w Omega^T)
        with torch.no_grad():
            if self.kind is GLVQLayer:
                self.distances = _pairwise_sq(x, layer.prototypes)
            elif self.kind is GMLVQLayer:
                omega = cast(GMLVQLayer, layer).omega
                self.projections = projections or (x @ omega.T, layer.prototypes @ omega.T)
                self.distances = _pairwise_sq(*self.projections)
            elif self.kind is LGMLVQLayer:
                self._lgmlvq_forward(outer)
            else:  # a layer with its own distance: autograd in gradients()
                self.distances = layer(x).detach()

    def _lgmlvq_forward(self, outer: Tensor | None) -> None:
        layer = self.layer
        assert isinstance(layer, LGMLVQLayer)
        omegas, w = layer.omegas, layer.prototypes
        n_prototypes, rank, d = omegas.shape
        if quadratic_layout(layer):
            self.outer = outer if outer is not None else outer_products(self.x)
            self.lambdas = omegas.transpose(1, 2) @ omegas  # (W, d, d)
            self.lambda_w = torch.einsum("wde,we->wd", self.lambdas, w)  # (W, d)
            sq = self.outer @ self.lambdas.flatten(1).T - 2.0 * (self.x @ self.lambda_w.T)
            self.distances = (sq + (self.lambda_w * w).sum(1)).clamp_min(0.0)
        else:
            projected = torch.einsum("wrd,wd->wr", omegas, w).reshape(-1)  # (W r,): Omega_j w_j
            # (B, W, r): Omega_j (x_i - w_j) = Omega_j x_i - Omega_j w_j (one matmul, then an
            # in-place subtraction)
            flat = self.x @ omegas.reshape(n_prototypes * rank, d).T
            self.diff = flat.sub_(projected).view(-1, n_prototypes, rank)
            self.distances = self.diff.square().sum(-1)

    def gradients(self, weights: Tensor | dict[nn.Parameter, Tensor]) -> dict[nn.Parameter, Tensor]:
        """``sum_ij A_ij grad_p D_ij`` for every trainable parameter ``p`` of the layer.

        ``weights``: one ``A (B, W)`` for all parameters, or ``{parameter: A}`` (per
        parameter clipping; parameters left out get no gradient).
        """
        params = [p for p in self.layer.parameters() if p.requires_grad]
        by_param = {p: weights for p in params} if isinstance(weights, Tensor) else dict(weights)
        by_param = {p: a for p, a in by_param.items() if p.requires_grad}
        if not by_param:
            return {}
        with torch.no_grad():
            if self.kind is GLVQLayer:
                return self._glvq(by_param)
            if self.kind is GMLVQLayer:
                return self._gmlvq(by_param)
            if self.kind is LGMLVQLayer:
                return self._lgmlvq(by_param)
        return self._autograd(by_param)

    def _glvq(self, by_param: dict[nn.Parameter, Tensor]) -> dict[nn.Parameter, Tensor]:
        w = self.layer.prototypes
        a = by_param[w]
        return {w: -2.0 * (a.T @ self.x - a.sum(0)[:, None] * w)}

    def _gmlvq(self, by_param: dict[nn.Parameter, Tensor]) -> dict[nn.Parameter, Tensor]:
        layer = self.layer
        assert isinstance(layer, GMLVQLayer)
        w, omega, x = layer.prototypes, layer.omega, self.x
        assert self.projections is not None
        u, pw = self.projections
        out: dict[nn.Parameter, Tensor] = {}
        if w in by_param:
            a = by_param[w]
            out[w] = -2.0 * (a.T @ u - a.sum(0)[:, None] * pw) @ omega
        if omega in by_param:
            a = by_param[omega]
            col, row = a.sum(0)[:, None], a.sum(1)[:, None]  # (W, 1), (B, 1)
            out[omega] = 2.0 * ((row * u).T @ x - (u.T @ a) @ w - pw.T @ (a.T @ x) + (col * pw).T @ w)
        return out

    def _lgmlvq(self, by_param: dict[nn.Parameter, Tensor]) -> dict[nn.Parameter, Tensor]:
        layer = self.layer
        assert isinstance(layer, LGMLVQLayer)
        w, omegas, x = layer.prototypes, layer.omegas, self.x
        n_prototypes, rank, d = omegas.shape
        out: dict[nn.Parameter, Tensor] = {}
        if quadratic_layout(layer):
            for p, a in by_param.items():
                ax, col = a.T @ x, a.sum(0)  # (W, d), (W,)
                if p is w:
                    out[w] = -2.0 * torch.einsum("wde,we->wd", self.lambdas, ax - col[:, None] * w)
                else:
                    s = (a.T @ self.outer).view(n_prototypes, d, d)  # sum_i A_ij x_i x_i^T
                    cross = ax.unsqueeze(2) * w.unsqueeze(1)  # (A^T x)_j w_j^T
                    m = s - cross - cross.transpose(1, 2) + col[:, None, None] * (w.unsqueeze(2) * w.unsqueeze(1))
                    out[omegas] = 2.0 * omegas @ m
            return out
        shared: tuple[Tensor, Tensor, Tensor] | None = None  # (A, Y, s) of the last weights
        for p, a in by_param.items():
            if shared is not None and shared[0] is a:  # the same weights for both parameters
                y, s = shared[1], shared[2]
            else:
                y = self.diff * a.unsqueeze(2)  # (B, W, r)
                s = y.sum(0)  # (W, r)
                shared = (a, y, s)
            if p is w:
                out[w] = -2.0 * torch.einsum("wr,wrd->wd", s, omegas)
            else:
                yx = (y.reshape(-1, n_prototypes * rank).T @ x).view(n_prototypes, rank, d)
                out[omegas] = 2.0 * (yx - s.unsqueeze(2) * w.unsqueeze(1))
        return out

    def _autograd(self, by_param: dict[nn.Parameter, Tensor]) -> dict[nn.Parameter, Tensor]:
        out: dict[nn.Parameter, Tensor] = {}
        with torch.enable_grad():
            distances = self.layer(self.x)
            for i, (p, a) in enumerate(by_param.items()):
                (out[p],) = torch.autograd.grad(distances, p, grad_outputs=a, retain_graph=i + 1 < len(by_param))
        return out
