"""Closed-form per-sample gradients of the prototype layers, registered with Opacus.

Opacus hands a grad sampler the layer's input ``x (B, d)`` and ``G = dL_i/dD (B, W)``,
the gradient of each sample's loss with respect to the layer's output distances
``D_ij = d(x_i, w_j)``. With ``v_ij = x_i - w_j`` and ``p_ij = Omega v_ij``:

=============  ==============================================  ===============================================
layer          per-sample gradient of the prototypes           per-sample gradient of the metric
=============  ==============================================  ===============================================
GLVQLayer      ``g_i(w_j) = -2 G_ij v_ij``                     (none)
GMLVQLayer     ``g_i(w_j) = -2 G_ij Omega^T p_ij``             ``g_i(Omega) = 2 sum_j G_ij p_ij v_ij^T``
LGMLVQLayer    ``g_i(w_j) = -2 G_ij Omega_j^T p_ij``           ``g_i(Omega_j) = 2 G_ij p_ij v_ij^T``
=============  ==============================================  ===============================================

For the GLVQ cost ``G`` has (at most) two non-zeros per row, at ``w+`` and ``w-``.
The samplers use this: they gather the ``K`` largest ``|G_ij|`` of every row (``K`` =
the largest number of non-zeros in any row, 2 for GLVQ; any ``G`` is handled exactly),
so GMLVQ's metric gradient is a sum of ``K`` rank-one terms, built in ``O(B K r d)``.

Norm samplers (Opacus' ghost clipping, the fused engine) return per-sample *clipping
norms* without building any ``(B, r, d)`` tensor:
``||sum_k a_k b_k^T||_F^2 = sum_{k,l} a_k.a_l  b_k.b_l`` costs ``O(B K^2 (r + d))``.

Clipping norms and cancellation
-------------------------------
The clipped sum is formed from the clip-weighted ``A = c G`` without per-sample
vectors: closed forms such as ``A^T x - (A^T 1) w`` (GLVQ) or autograd through the
distances. Each record then enters the arithmetic through terms of size about
``m_i = sum_k |G_ik| R_ik`` (its *term magnitude*), while its gradient, their exact
difference, may be far smaller: a record near two coincident prototypes has
``|G| ~ 1 / (d+ + d-)`` unbounded and ``x - w ~ 0``. Rounding leaves an error of order
``u m_i`` (``u`` the unit roundoff), which plain norm clipping never bounds. The
samplers therefore return ``max(||g_i||, kappa m_i)`` with ``kappa = CANCELLATION_GUARD``
in float64 (``NARROW_DTYPE_GUARD_FACTOR`` times it in float32), so that
``c_i m_i <= C / kappa`` for every clipped record in every model state:

* GLVQ: ``R_ik = 2 (||x_i - w_k|| + 2 ||w_k||) >= 2 (||x_i|| + ||w_k||)``;
* GMLVQ: prototypes ``2 s^2 (||x_i|| + ||w_k||)``, metric ``2 s (||x_i|| + ||w_k||)^2``,
  where ``s = sqrt(||Omega||_1 ||Omega||_inf)`` (largest column and row sums of
  ``|Omega|``) bounds the spectral norms of ``Omega`` and ``|Omega|``, so also the
  projections ``u_i = Omega x_i``, ``p_k = Omega w_k`` and the terms ``Omega^T u_i``,
  ``Omega^T p_k`` of the prototypes' sum. The operands' sizes, not the computed
  projections': for a record and prototypes in the (near-)null space of ``Omega`` the
  projections are rounding only, which follows the batch, and the guard must still
  bound what that rounding moves;
* LGMLVQ (Opacus' samplers form the projections differently from the distances; the
  fused engine reuses the distances'): prototypes ``2 s_k^2 (||x_i|| + ||w_k||)``, metric
  ``2 s_k (||x_i|| + ||w_k||)^2``, with ``s_k`` of ``Omega_k``.

These bound every term of the closed forms of :mod:`dp_proto.lvq.gradients`, of the
fused engine's sums (:mod:`dp_proto.lvq.private.fused`) and of the distance
computations (a matrix product's rounding error is at most ``gamma_n`` times the
product of the operands' absolute values). The guard only changes records whose gradient is below
``kappa`` times its term magnitude (a record within about 0.1 % of a prototype, relative
to their norms); the privacy model (docs) states the resulting slack and how often
the floor binds.

``SAMPLERS`` maps each layer type to its two samplers; importing
``dp_proto.lvq.private.opacus_adapter`` registers them with Opacus.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from dp_proto.lvq.layers import GLVQLayer, GMLVQLayer, LGMLVQLayer

__all__ = [
    "SAMPLERS",
    "CANCELLATION_GUARD",
    "NARROW_DTYPE_GUARD_FACTOR",
    "winner_terms",
    "glvq_clipping_norms",
    "glvq_grad_sample",
    "gmlvq_grad_sample",
    "lgmlvq_grad_sample",
    "glvq_norm_sample",
    "gmlvq_norm_sample",
    "gmlvq_clipping_norms",
    "lgmlvq_clipping_norms",
    "winner_differences",
    "spectral_bound",
    "lgmlvq_norm_sample",
]


CANCELLATION_GUARD = 1e-3

#: ``kappa`` in a dtype narrower than float64 is this many times ``CANCELLATION_GUARD``:
#: float32 rounds ``2^29`` times coarser, and its slack is measured, not proved.
NARROW_DTYPE_GUARD_FACTOR = 10.0


def _guarded(norm: Tensor, magnitude: Tensor) -> Tensor:
    """``max(norm, kappa * magnitude)``, both ``(B,)``: ``kappa = CANCELLATION_GUARD`` in
    float64, ``NARROW_DTYPE_GUARD_FACTOR`` times it in narrower dtypes."""
    kappa = CANCELLATION_GUARD if norm.dtype == torch.float64 else CANCELLATION_GUARD * NARROW_DTYPE_GUARD_FACTOR
    return torch.maximum(norm, kappa * magnitude)


def spectral_bound(omega: Tensor) -> Tensor:
    """``sqrt(||Omega||_1 ||Omega||_inf)`` of ``omega (..., r, d)``, shape ``(...)``: an
    upper bound of the spectral norm of ``Omega`` and of ``|Omega|`` (Hoelder), exact for
    a scaled identity."""
    absolute = omega.abs()
    return (absolute.sum(-2).amax(-1) * absolute.sum(-1).amax(-1)).sqrt()


def _scales(x: Tensor, prototypes: Tensor, index: Tensor) -> Tensor:
    """``||x_i|| + ||w_k||`` for the winners ``index (B, K)``, shape ``(B, K)``."""
    return torch.linalg.vector_norm(x, dim=1)[:, None] + torch.linalg.vector_norm(prototypes, dim=1)[index]


def _inputs(layer: GLVQLayer, activations: list[Tensor], backprops: Tensor) -> tuple[Tensor, Tensor]:
    x = activations[0]
    x = x.reshape(x.shape[0], layer.in_features).to(layer.prototypes.dtype)
    return x, backprops.to(layer.prototypes.dtype)


def winner_terms(backprops: Tensor) -> tuple[Tensor, Tensor]:
    """Indices ``(B, K)`` and values ``(B, K)`` of the ``K`` largest ``|G_ij|`` per row,
    ``K`` the largest count of non-zeros in any row (at least 1). Exact: the other
    entries are zero."""
    nnz = int((backprops != 0).sum(1).max()) if backprops.numel() else 1
    k = max(min(nnz, backprops.shape[1]), 1)
    index = backprops.abs().topk(k, dim=1).indices
    return index, backprops.gather(1, index)


def winner_differences(x: Tensor, rows: Tensor, index: Tensor) -> Tensor:
    """``x_i - rows_k`` for the winners ``index (B, K)``: explicit differences ``(B, K, m)``
    of ``x (B, m)`` and ``rows (W, m)`` (one gather, then subtracted in place), detached."""
    gathered = rows.detach().index_select(0, index.reshape(-1)).view(*index.shape, rows.shape[1])
    return torch.sub(x.detach().unsqueeze(1), gathered, out=gathered)


def _scatter_rows(values: Tensor, index: Tensor, num_rows: int) -> Tensor:
    """``(B, K, ...)`` values placed at rows ``index (B, K)`` of a zero ``(B, num_rows, ...)``."""
    out = values.new_zeros((values.shape[0], num_rows, *values.shape[2:]))
    expand = index.reshape(*index.shape, *([1] * (values.dim() - 2))).expand_as(values)
    return out.scatter_add_(1, expand, values)


# -- GLVQ ------------------------------------------------------------------------------
def glvq_grad_sample(layer: GLVQLayer, activations: list[Tensor], backprops: Tensor) -> dict[nn.Parameter, Tensor]:
    x, g = _inputs(layer, activations, backprops)
    if not layer.prototypes.requires_grad:
        return {}
    index, coef = winner_terms(g)  # (B, K)
    v = x[:, None, :] - layer.prototypes[index]  # (B, K, d)
    grads = -2.0 * coef[..., None] * v
    return {layer.prototypes: _scatter_rows(grads, index, layer.num_prototypes)}


def glvq_clipping_norms(layer: GLVQLayer, x: Tensor, index: Tensor, coef: Tensor) -> dict[nn.Parameter, Tensor]:
    """Clipping norms ``(B,)`` of the prototypes' per-sample gradients, from the winners
    ``index (B, K)`` and their entries ``coef (B, K)`` of ``G``: ``||g_i||^2 = 4 sum_k
    G_ik^2 ||x_i - w_k||^2`` with ``x - w`` formed as differences (no cancellation),
    guarded by the term magnitudes (module docstring)."""
    if not layer.prototypes.requires_grad:
        return {}
    w = layer.prototypes
    flat = index.reshape(-1)
    winners = w.index_select(0, flat).view(*index.shape, -1)  # (B, K, d); distinct rows
    distance = torch.linalg.vector_norm(x.unsqueeze(1) - winners, dim=-1)  # (B, K)
    norm = 2.0 * torch.linalg.vector_norm(coef * distance, dim=1)
    # ||x_i|| + ||w_k|| <= ||x_i - w_k|| + 2 ||w_k||: no pass over x beyond the differences
    scales = torch.linalg.vector_norm(w, dim=1).index_select(0, flat).view(index.shape).mul_(2.0).add_(distance)
    magnitude = 2.0 * (coef.abs() * scales).sum(1)
    return {w: _guarded(norm, magnitude)}


def glvq_norm_sample(layer: GLVQLayer, activations: list[Tensor], backprops: Tensor) -> dict[nn.Parameter, Tensor]:
    x, g = _inputs(layer, activations, backprops)
    return glvq_clipping_norms(layer, x, *winner_terms(g))


# -- GMLVQ -----------------------------------------------------------------------------
def _gmlvq_terms(
    layer: GMLVQLayer, x: Tensor, g: Tensor, projections: tuple[Tensor, Tensor] | None = None
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Winner indices and coefficients, ``v = x - w`` ``(B, K, d)`` and ``p = Omega v``
    ``(B, K, r)``, plus the projections ``u = Omega x`` ``(B, r)`` and ``Omega w``
    ``(W, r)`` (projecting once instead of per winner; passed in if already computed)."""
    index, coef = winner_terms(g)
    u, pw = projections if projections is not None else (x @ layer.omega.T, layer.prototypes @ layer.omega.T)
    return index, coef, winner_differences(x, layer.prototypes, index), winner_differences(u, pw, index), u, pw


def gmlvq_grad_sample(layer: GMLVQLayer, activations: list[Tensor], backprops: Tensor) -> dict[nn.Parameter, Tensor]:
    x, g = _inputs(layer, activations, backprops)
    index, coef, v, p, _, _ = _gmlvq_terms(layer, x, g)
    out: dict[nn.Parameter, Tensor] = {}
    if layer.prototypes.requires_grad:
        grads = -2.0 * coef[..., None] * (p @ layer.omega)  # (B, K, d)
        out[layer.prototypes] = _scatter_rows(grads, index, layer.num_prototypes)
    if layer.omega.requires_grad:
        # sum_k (2 c_k p_k) v_k^T as one batched matmul; the factor sits on the small operand
        out[layer.omega] = torch.bmm((2.0 * coef[..., None] * p).transpose(1, 2), v)  # (B, r, d)
    return out


def gmlvq_norm_sample(
    layer: GMLVQLayer, activations: list[Tensor], backprops: Tensor, projections: tuple[Tensor, Tensor] | None = None
) -> dict[nn.Parameter, Tensor]:
    x, g = _inputs(layer, activations, backprops)
    index, coef, v, p, u, pw = _gmlvq_terms(layer, x, g, projections)
    return gmlvq_clipping_norms(layer, x, index, coef, v, p, (u, pw))


def gmlvq_clipping_norms(
    layer: GMLVQLayer,
    x: Tensor,
    index: Tensor,
    coef: Tensor,
    v: Tensor,
    p: Tensor,
    projections: tuple[Tensor, Tensor],
    metric_projections: tuple[Tensor, Tensor] | None = None,
) -> dict[nn.Parameter, Tensor]:
    """Clipping norms ``(B,)`` of GMLVQ's per-sample gradients (module docstring), from
    the winners ``index (B, K)`` and their entries ``coef (B, K)`` of ``G``, the
    differences ``v = x_i - w_k`` ``(B, K, d)`` and ``p = u_i - Omega w_k`` ``(B, K, r)``, and
    the projections ``(u = x Omega^T (B, r), Omega w (W, r))`` that the distances used.

    ``metric_projections``: ``(u Omega (B, d), (Omega w) Omega (W, d))``, i.e.
    ``Omega^T Omega x`` and ``Omega^T Omega w``, when the caller has them (the fused
    engine reuses them for the prototypes' clipped sum); computed here otherwise, and
    only if the prototypes are trainable.
    """
    u, pw = projections
    out: dict[nn.Parameter, Tensor] = {}
    omega_bound = spectral_bound(layer.omega)
    # |G_ik| s (||x_i|| + ||w_k||) >= |G_ik| (||Omega x_i|| + ||Omega w_k||): the operands'
    # sizes, not the computed projections (module docstring)
    projected = coef.abs() * omega_bound * _scales(x, layer.prototypes, index)
    if layer.prototypes.requires_grad:
        # Omega^T p_k = Omega^T Omega x - Omega^T Omega w_k, as explicit differences; the K rows are distinct
        z, zw = metric_projections if metric_projections is not None else (u @ layer.omega, pw @ layer.omega)
        s = winner_differences(z, zw, index)  # (B, K, d)
        norm = 2.0 * torch.linalg.vector_norm(coef * torch.linalg.vector_norm(s, dim=-1), dim=1)
        out[layer.prototypes] = _guarded(norm, 2.0 * omega_bound * projected.sum(1))
    if layer.omega.requires_grad:
        # ||sum_k c_k p_k v_k^T||_F^2 = sum_{k,l} c_k c_l (p_k.p_l)(v_k.v_l)
        pp = p @ p.transpose(1, 2)  # (B, K, K)
        vv = v @ v.transpose(1, 2)
        cc = coef[:, :, None] * coef[:, None, :]
        # The cross terms can cancel: add the rounding error of this sum, at most
        # (r + d + 2 K^2 + 8) u M^2 with M = sum_k 2 |c_k| ||p_k|| ||v_k||, so the
        # computed norm is never below the exact one.
        explicit = 2.0 * (coef.abs() * torch.linalg.vector_norm(p, dim=-1) * torch.linalg.vector_norm(v, dim=-1))
        rounding = (p.shape[-1] + v.shape[-1] + 2 * coef.shape[1] ** 2 + 8) * torch.finfo(p.dtype).eps
        norm = ((4.0 * cc * pp * vv).sum((1, 2)).clamp_min(0) + rounding * explicit.sum(1).pow(2)).sqrt()
        magnitude = 2.0 * (projected * _scales(x, layer.prototypes, index)).sum(1)
        out[layer.omega] = _guarded(norm, magnitude)
    return out


# -- LGMLVQ ----------------------------------------------------------------------------
def _lgmlvq_terms(layer: LGMLVQLayer, x: Tensor, g: Tensor):
    index, coef = winner_terms(g)
    v = x[:, None, :] - layer.prototypes[index]  # (B, K, d)
    omegas = layer.omegas[index]  # (B, K, r, d)
    p = torch.einsum("bkrd,bkd->bkr", omegas, v)
    return index, coef, v, p, omegas


def lgmlvq_grad_sample(layer: LGMLVQLayer, activations: list[Tensor], backprops: Tensor) -> dict[nn.Parameter, Tensor]:
    x, g = _inputs(layer, activations, backprops)
    index, coef, v, p, omegas = _lgmlvq_terms(layer, x, g)
    out: dict[nn.Parameter, Tensor] = {}
    if layer.prototypes.requires_grad:
        grads = -2.0 * coef[..., None] * torch.einsum("bkr,bkrd->bkd", p, omegas)
        out[layer.prototypes] = _scatter_rows(grads, index, layer.num_prototypes)
    if layer.omegas.requires_grad:
        grads = 2.0 * coef[..., None, None] * p[..., :, None] * v[..., None, :]  # (B, K, r, d)
        out[layer.omegas] = _scatter_rows(grads, index, layer.num_prototypes)
    return out


def lgmlvq_norm_sample(layer: LGMLVQLayer, activations: list[Tensor], backprops: Tensor) -> dict[nn.Parameter, Tensor]:
    x, g = _inputs(layer, activations, backprops)
    index, coef, v, p, omegas = _lgmlvq_terms(layer, x, g)
    back = torch.einsum("bkrd,bkr->bkd", omegas, p).pow(2).sum(-1) if layer.prototypes.requires_grad else None
    return lgmlvq_clipping_norms(layer, x, index, coef, v, p, back)


def lgmlvq_clipping_norms(
    layer: LGMLVQLayer, x: Tensor, index: Tensor, coef: Tensor, v: Tensor, p: Tensor, back_sq: Tensor | None
) -> dict[nn.Parameter, Tensor]:
    """Clipping norms ``(B,)`` of LGMLVQ's per-sample gradients (module docstring), from
    the winners ``index (B, K)`` and their entries ``coef (B, K)`` of ``G``, the
    differences ``v = x_i - w_k`` ``(B, K, d)``, the projections ``p = Omega_k (x_i - w_k)``
    ``(B, K, r)`` and ``back_sq = ||Omega_k^T p_ik||^2`` ``(B, K)`` (needed only if the
    prototypes are trainable)."""
    out: dict[nn.Parameter, Tensor] = {}
    omega_bounds = spectral_bound(layer.omegas)[index]  # (B, K)
    scales = _scales(x, layer.prototypes, index)
    weighted = coef.abs() * omega_bounds * scales  # |G_ik| s_k (||x_i|| + ||w_k||)
    if layer.prototypes.requires_grad:
        if back_sq is None:
            raise ValueError("back_sq is needed when the prototypes are trainable")
        norm = (4.0 * coef.pow(2) * back_sq).sum(1).sqrt()
        out[layer.prototypes] = _guarded(norm, 2.0 * (weighted * omega_bounds).sum(1))
    if layer.omegas.requires_grad:  # distinct prototypes: the rank-one terms do not overlap
        sq = p.pow(2).sum(-1) * v.pow(2).sum(-1)
        norm = (4.0 * coef.pow(2) * sq).sum(1).sqrt()
        out[layer.omegas] = _guarded(norm, 2.0 * (weighted * scales).sum(1))
    return out


#: The closed-form samplers per layer type: ``(grad_sample, norm_sample)``; registered
#: with Opacus by ``dp_proto.lvq.private.opacus_adapter``.
_Sampler = Callable[..., dict[nn.Parameter, Tensor]]
SAMPLERS: dict[type[GLVQLayer], tuple[_Sampler, _Sampler]] = {
    GLVQLayer: (glvq_grad_sample, glvq_norm_sample),
    GMLVQLayer: (gmlvq_grad_sample, gmlvq_norm_sample),
    LGMLVQLayer: (lgmlvq_grad_sample, lgmlvq_norm_sample),
}
