"""Prototype layers: ``nn.Module``s that map inputs ``(B, d)`` to distances ``(B, W)``.

The layers own trainable parameters only (no buffers), so that Opacus can wrap
them and compute per-sample gradients. Prototype labels live beside the layer,
in ``dp_proto.lvq.PrototypeModel`` or in the caller's own model.

=============  ==========================  =================================
layer          parameters                  distance
=============  ==========================  =================================
GLVQLayer      prototypes ``(W, d)``       ``||x - w_j||^2``
GMLVQLayer     + omega ``(r, d)``          ``||Omega (x - w_j)||^2``
LGMLVQLayer    + omegas ``(W, r, d)``      ``||Omega_j (x - w_j)||^2``
=============  ==========================  =================================
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from dp_proto._rowwise import ordered_matmul, ordered_row_sum, ordered_sq_distances, rounding_gamma
from dp_proto.lvq.distances import (
    lomega_distance,
    omega_distance,
    quadratic_form_is_cheaper,
    squared_euclidean_distance,
)
from dp_proto.lvq.init import OmegaInit, init_omega

__all__ = ["GLVQLayer", "GMLVQLayer", "LGMLVQLayer", "PrototypeLayer"]


def _rounding_bound(x: Tensor, w: Tensor, depth: int) -> Tensor:
    """``(B,)``: ``2 gamma_depth (|x_i| + max_k |w_k|)^2``, a bound on the rounding error of
    squared distances between ``x (B, d)`` and ``w (W, d)`` formed by sums of at most
    ``depth`` terms, in their dtype (the factor 2 covers the rounding of the norms)."""
    reach = torch.linalg.vector_norm(x, dim=1) + torch.linalg.vector_norm(w, dim=1).max()
    return 2.0 * rounding_gamma(depth, x.dtype) * reach.square()


def _check_positive(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _initial_prototypes(
    prototypes: Tensor | str,
    num_prototypes: int,
    in_features: int,
    generator: torch.Generator | None,
    dtype: torch.dtype | None,
    device: torch.device | str | None,
) -> Tensor:
    """The ``(W, d)`` start of a layer's prototypes (see ``GLVQLayer``)."""
    shape = (num_prototypes, in_features)
    if isinstance(prototypes, Tensor):
        if tuple(prototypes.shape) != shape:
            raise ValueError(f"expected prototypes of shape {shape}, got {tuple(prototypes.shape)}")
        like = torch.empty(0, dtype=dtype, device=device)  # torch's defaults where None
        return prototypes.detach().to(dtype=like.dtype, device=like.device).clone()
    if prototypes == "zeros":
        return torch.zeros(shape, dtype=dtype, device=device)
    if prototypes == "random":
        if generator is not None and device is not None and torch.device(device).type != generator.device.type:
            # draw on the generator's device, then move
            return torch.randn(shape, generator=generator, dtype=dtype, device=generator.device).to(device)
        return torch.randn(shape, generator=generator, dtype=dtype, device=device)
    raise ValueError(f"prototypes must be a (W, d) tensor, 'random' or 'zeros', got {prototypes!r}")


class GLVQLayer(nn.Module):
    """Prototypes with the squared Euclidean distance.

    Parameters
    ----------
    in_features : int
        Input dimension ``d``.
    num_prototypes : int
        Number of prototypes ``W`` (over all classes).
    prototypes : Tensor of shape (W, d), "random" or "zeros", default "random"
        Initial prototypes. ``"random"``: i.i.d. standard normal entries (from
        ``generator``, else torch's global generator, like ``nn.Linear``'s weights), so
        the prototypes differ and the GLVQ cost has a gradient from the first step;
        ``"zeros"``: all at the origin, for a caller that overwrites them (all
        prototypes equal give every input the cost 0 and no gradient). Better still,
        start at the class means (``dp_proto.lvq.class_mean_prototypes``) or a DP
        initialiser.
    generator : torch.Generator, optional
        Source of the random prototypes (and of a random Omega).
    dtype : torch.dtype, optional
        Dtype of the parameters (torch's default if None).
    device : torch.device or str, optional
        Device of the parameters.

    Attributes
    ----------
    prototypes : torch.nn.Parameter, shape (W, d)
        The trainable prototypes.
    in_features : int
        Input dimension ``d``.
    num_prototypes : int
        Number of prototypes ``W``.

    Notes
    -----
    Input ``(B, d)`` (a ``(B, ...)`` input is flattened), output ``(B, W)``: the squared
    distance of every input to every prototype.

    Examples
    --------
    >>> import torch
    >>> from dp_proto.lvq import GLVQLayer
    >>> layer = GLVQLayer(2, 3, prototypes=torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]]))
    >>> layer(torch.tensor([[1.0, 1.0]]))
    tensor([[2., 1., 2.]], grad_fn=<...>)
    """

    def __init__(
        self,
        in_features: int,
        num_prototypes: int,
        *,
        prototypes: Tensor | str = "random",
        generator: torch.Generator | None = None,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.in_features = _check_positive("in_features", in_features)
        self.num_prototypes = _check_positive("num_prototypes", num_prototypes)
        self.prototypes = nn.Parameter(
            _initial_prototypes(prototypes, num_prototypes, in_features, generator, dtype, device)
        )

    def _flatten(self, x: Tensor) -> Tensor:
        if x.dim() != 2:  # (B, ...) -> (B, d); an empty batch has no size to infer
            x = x.reshape(x.shape[0], -1) if x.shape[0] else x.reshape(0, self.in_features)
        if x.shape[1] != self.in_features:
            raise ValueError(f"{type(self).__name__} expects {self.in_features} features, got {x.shape[1]}")
        return x.to(self.prototypes.dtype)

    def forward(self, x: Tensor) -> Tensor:
        return squared_euclidean_distance(self._flatten(x), self.prototypes)

    # -- the same distances, with their rounding (no autograd; x (B, d) in the layer's dtype)
    @torch.no_grad()
    def rounding_bound(self, x: Tensor) -> Tensor:
        """``(B,)``: a bound on the rounding error of every distance in row ``i`` of
        ``forward``, ``ordered_distances`` and ``pair_distances`` (Higham 2002, 3.1)."""
        return _rounding_bound(x, self.prototypes.detach(), self.in_features + 3)

    @torch.no_grad()
    def ordered_distances(self, x: Tensor) -> Tensor:
        """``(B, W)``: the distances with every row a fixed sequence of IEEE operations on
        ``x_i`` and the parameters (``dp_proto._rowwise``): the same bits in any batch."""
        return ordered_sq_distances(x, self.prototypes.detach())

    @torch.no_grad()
    def pair_distances(self, x: Tensor, index: Tensor) -> Tensor:
        """``(B, K)``: the distances of ``x_i`` to the prototypes ``index (B, K)`` from
        explicit differences (relative error ``gamma_(d+2)``, also near a prototype)."""
        return (x.unsqueeze(1) - self.prototypes.detach()[index]).square().sum(-1)

    @torch.no_grad()
    def normalize_(self) -> None:
        """Nothing to normalise for the Euclidean distance (kept for a uniform API)."""

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, num_prototypes={self.num_prototypes}"


class GMLVQLayer(GLVQLayer):
    """Prototypes with one global adaptive metric ``Lambda = Omega^T Omega``.

    Parameters
    ----------
    in_features : int
        Input dimension ``d``.
    num_prototypes : int
        Number of prototypes ``W`` (over all classes).
    rank : int, optional
        Number of rows ``r`` of ``Omega (r, d)``; ``None`` means ``r = d``.
    prototypes : Tensor of shape (W, d), "random" or "zeros", default "random"
        Initial prototypes, as for ``GLVQLayer``.
    omega_init : {"identity", "scaled_identity", "random"} or Tensor, default "identity"
        ``identity``: ``Omega = I`` (its first ``r`` rows if ``r < d``);
        ``scaled_identity``: ``I / sqrt(d)``, which has ``trace(Lambda) = 1`` for ``r = d``;
        ``random``: entries ``U[-1, 1]`` (the choice of Brinkrolf (2023) for ``r < d``);
        or an explicit ``(r, d)`` tensor.
    normalize : bool, default True
        If True, ``normalize_`` rescales ``Omega`` so that
        ``trace(Lambda) = ||Omega||_F^2 = 1`` (Brinkrolf 2023, eq. 2.20); trainers call it
        after every optimiser step. For a global metric this does not change any
        classification or the GLVQ cost, which is scale invariant.
    generator : torch.Generator, optional
        Source of randomness for ``omega_init="random"``.
    dtype : torch.dtype, optional
        Dtype of the parameters (torch's default if None).
    device : torch.device or str, optional
        Device of the parameters.

    Attributes
    ----------
    prototypes : torch.nn.Parameter, shape (W, d)
        The trainable prototypes.
    omega : torch.nn.Parameter, shape (r, d)
        The trainable projection.
    rank : int
        Number of rows ``r`` of ``Omega``.

    Notes
    -----
    Input ``(B, d)``, output ``(B, W)``: ``||Omega (x - w_j)||^2``.

    References
    ----------
    Schneider, Biehl & Hammer (2009). Adaptive relevance matrices in learning vector
    quantization. *Neural Computation* 21(12).

    Examples
    --------
    >>> import torch
    >>> from dp_proto.lvq import GMLVQLayer
    >>> layer = GMLVQLayer(784, 10, rank=30)
    >>> layer(torch.zeros(8, 28, 28)).shape, layer.relevance_matrix.shape
    (torch.Size([8, 10]), torch.Size([784, 784]))
    """

    def __init__(
        self,
        in_features: int,
        num_prototypes: int,
        *,
        rank: int | None = None,
        prototypes: Tensor | str = "random",
        omega_init: OmegaInit | Tensor = "identity",
        normalize: bool = True,
        generator: torch.Generator | None = None,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(
            in_features, num_prototypes, prototypes=prototypes, generator=generator, dtype=dtype, device=device
        )
        self.rank = in_features if rank is None else _check_positive("rank", rank)
        self.normalize = bool(normalize)
        omega = init_omega(
            omega_init,
            self.rank,
            in_features,
            generator=generator,
            dtype=self.prototypes.dtype,
            device=self.prototypes.device,
        )
        self.omega = nn.Parameter(omega)
        if self.normalize:
            self.normalize_()

    def forward(self, x: Tensor) -> Tensor:
        return omega_distance(self._flatten(x), self.prototypes, self.omega)

    @torch.no_grad()
    def rounding_bound(self, x: Tensor) -> Tensor:
        # the projections (inner dimension d, twice) and the squared distance (r)
        omega = self.omega.detach()
        depth = 2 * self.in_features + self.rank + 3
        return _rounding_bound(x, self.prototypes.detach(), depth) * omega.square().sum()

    @torch.no_grad()
    def ordered_distances(self, x: Tensor) -> Tensor:
        omega = self.omega.detach()
        return ordered_sq_distances(ordered_matmul(x, omega.T), self.prototypes.detach() @ omega.T)

    @torch.no_grad()
    def pair_distances(self, x: Tensor, index: Tensor) -> Tensor:
        """``(B, K)``: ``||Omega x_i - Omega w_k||^2`` for the prototypes ``index (B, K)``
        from the explicit projected differences."""
        omega = self.omega.detach()
        projected = (self.prototypes.detach() @ omega.T)[index]  # (B, K, r)
        return ((x @ omega.T).unsqueeze(1) - projected).square().sum(-1)

    @property
    def relevance_matrix(self) -> Tensor:
        """``Lambda = Omega^T Omega``, shape ``(d, d)``, positive semi-definite."""
        omega = self.omega.detach()
        return omega.T @ omega

    @torch.no_grad()
    def normalize_(self) -> None:
        """Rescale ``Omega`` in place so that ``trace(Lambda) = 1`` (only if ``normalize``)."""
        if self.normalize:
            norm = self.omega.norm()
            if norm > 0:
                self.omega.div_(norm)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, rank={self.rank}, normalize={self.normalize}"


class LGMLVQLayer(GLVQLayer):
    """Prototypes with one local adaptive metric ``Lambda_j = Omega_j^T Omega_j`` each.

    Parameters
    ----------
    in_features : int
        Input dimension ``d``.
    num_prototypes : int
        Number of prototypes ``W`` (over all classes).
    rank : int, optional
        Number of rows ``r`` of every ``Omega_j (r, d)``; ``None`` means ``r = d``.
    prototypes : Tensor of shape (W, d), "random" or "zeros", default "random"
        Initial prototypes, as for ``GLVQLayer``.
    omega_init : {"identity", "scaled_identity", "random"} or Tensor, default "identity"
        Applied to every prototype as in ``GMLVQLayer``; an ``(r, d)`` tensor is
        copied to every prototype, a ``(W, r, d)`` tensor gives each its own.
    normalize : bool, default False
        If True, ``normalize_`` rescales every ``Omega_j`` to ``trace(Lambda_j) = 1``
        (Schneider, Biehl & Hammer 2009). Unlike the global case this changes the
        classifier, so it is off by default.
    generator : torch.Generator, optional
        Source of randomness for ``omega_init="random"``.
    dtype : torch.dtype, optional
        Dtype of the parameters (torch's default if None).
    device : torch.device or str, optional
        Device of the parameters.

    Attributes
    ----------
    prototypes : torch.nn.Parameter, shape (W, d)
        The trainable prototypes.
    omegas : torch.nn.Parameter, shape (W, r, d)
        One trainable projection per prototype.
    rank : int
        Number of rows ``r`` of every ``Omega_j``.

    Notes
    -----
    Input ``(B, d)``, output ``(B, W)``: ``||Omega_j (x - w_j)||^2``.

    References
    ----------
    Schneider, Biehl & Hammer (2009). Adaptive relevance matrices in learning vector
    quantization. *Neural Computation* 21(12).

    Examples
    --------
    >>> import torch
    >>> from dp_proto.lvq import LGMLVQLayer
    >>> layer = LGMLVQLayer(4, 3, rank=2)
    >>> layer.omegas.shape, layer(torch.zeros(5, 4)).shape
    (torch.Size([3, 2, 4]), torch.Size([5, 3]))
    """

    def __init__(
        self,
        in_features: int,
        num_prototypes: int,
        *,
        rank: int | None = None,
        prototypes: Tensor | str = "random",
        omega_init: OmegaInit | Tensor = "identity",
        normalize: bool = False,
        generator: torch.Generator | None = None,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(
            in_features, num_prototypes, prototypes=prototypes, generator=generator, dtype=dtype, device=device
        )
        self.rank = in_features if rank is None else _check_positive("rank", rank)
        self.normalize = bool(normalize)
        dtype_, device_ = self.prototypes.dtype, self.prototypes.device
        if isinstance(omega_init, Tensor) and omega_init.dim() == 3:
            if tuple(omega_init.shape) != (num_prototypes, self.rank, in_features):
                raise ValueError(
                    f"expected omegas of shape ({num_prototypes}, {self.rank}, {in_features}), "
                    f"got {tuple(omega_init.shape)}"
                )
            omegas = omega_init.detach().to(dtype=dtype_, device=device_).clone()
        else:
            omegas = torch.stack(
                [
                    init_omega(omega_init, self.rank, in_features, generator=generator, dtype=dtype_, device=device_)
                    for _ in range(num_prototypes)
                ]
            )
        self.omegas = nn.Parameter(omegas)
        if self.normalize:
            self.normalize_()

    def forward(self, x: Tensor) -> Tensor:
        return lomega_distance(self._flatten(x), self.prototypes, self.omegas)

    @torch.no_grad()
    def rounding_bound(self, x: Tensor) -> Tensor:
        # the quadratic form (inner dimension d^2) or the projections, and the squared distance
        omegas = self.omegas.detach()
        depth = 2 * self.in_features + self.rank + 3
        if quadratic_form_is_cheaper(omegas):
            depth += self.in_features**2 + 1
        return _rounding_bound(x, self.prototypes.detach(), depth) * omegas.square().sum((1, 2)).max()

    @torch.no_grad()
    def ordered_distances(self, x: Tensor) -> Tensor:
        omegas, w = self.omegas.detach(), self.prototypes.detach()
        n, rank, d = omegas.shape
        projected = ordered_matmul(x, omegas.permute(2, 0, 1).reshape(d, n * rank)).view(-1, n, rank)
        pw = torch.einsum("wd,wrd->wr", w, omegas)  # the parameters only: the same in any batch
        return ordered_row_sum((projected - pw).square())

    @torch.no_grad()
    def pair_distances(self, x: Tensor, index: Tensor) -> Tensor:
        """``(B, K)``: ``||Omega_k (x_i - w_k)||^2`` for the prototypes ``index (B, K)``, from
        the explicit differences ``x_i - w_k``."""
        omegas, w = self.omegas.detach(), self.prototypes.detach()
        diff = x.unsqueeze(1) - w[index]  # (B, K, d)
        out = x.new_empty(index.shape)
        for k in range(self.num_prototypes):  # one (m_k, d) @ (d, r) product per prototype
            chosen = index == k
            out[chosen] = (diff[chosen] @ omegas[k].T).square().sum(-1)
        return out

    @property
    def relevance_matrices(self) -> Tensor:
        """``Lambda_j = Omega_j^T Omega_j``, shape ``(W, d, d)``."""
        omegas = self.omegas.detach()
        return omegas.transpose(1, 2) @ omegas

    @torch.no_grad()
    def normalize_(self) -> None:
        """Rescale every ``Omega_j`` so that ``trace(Lambda_j) = 1`` (only if ``normalize``)."""
        if self.normalize:
            norms = self.omegas.flatten(1).norm(dim=1).clamp_min(1e-30)
            self.omegas.div_(norms[:, None, None])

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, rank={self.rank}, normalize={self.normalize}"


PrototypeLayer = GLVQLayer  # the common base class, for type hints
