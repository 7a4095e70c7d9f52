"""Random Fourier features for the RBF kernel (Rahimi & Recht 2007; Park 2022, eq. 4.5).

The RBF kernel ``k(x, y) = exp(-gamma ||x - y||^2)`` is the Fourier transform of the
Gaussian density ``N(0, 2 gamma I)``, so for frequencies ``rho_1, ..., rho_{F/2}`` drawn
i.i.d. from that density (independently of the data) the map of eq. 4.5

    phi(x) = sqrt(2/F) [cos<rho_1, x>, sin<rho_1, x>, ..., cos<rho_{F/2}, x>, sin<rho_{F/2}, x>]

satisfies ``E[phi(x) . phi(y)] = k(x, y)`` and ``||phi(x)|| = 1`` for every ``x`` (each
cos/sin pair contributes ``2/F``), so ``kappa = sup ||phi(x)|| = 1`` in the sensitivity
bound of Corollary 4.2.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from dp_proto._rowwise import ordered_matmul

__all__ = ["RandomFourierFeatures", "rbf_kernel"]


def rbf_kernel(x: torch.Tensor, y: torch.Tensor, gamma: float) -> torch.Tensor:
    """Exact RBF kernel matrix ``K_ij = exp(-gamma ||x_i - y_j||^2)``.

    Parameters
    ----------
    x : Tensor ``(n, d)``
    y : Tensor ``(m, d)``
    gamma : float, ``> 0``

    Returns
    -------
    Tensor ``(n, m)`` in the promoted dtype of ``x`` and ``y``.
    """
    _check_gamma(gamma)
    sq = torch.cdist(x, y).square()
    return torch.exp(-gamma * sq)


def _check_gamma(gamma: float) -> float:
    try:
        value = float(gamma)
    except (TypeError, ValueError):
        raise ValueError(f"gamma must be a positive finite number, got {gamma!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"gamma must be a positive finite number, got {gamma!r}")
    return value


class RandomFourierFeatures(nn.Module):
    """Random Fourier feature map of the RBF kernel ``exp(-gamma ||x - y||^2)`` (eq. 4.5).

    ``phi(x) = sqrt(2/F) [cos(rho_1^T x), sin(rho_1^T x), ..., cos(rho_{F/2}^T x),
    sin(rho_{F/2}^T x)]`` with the columns ``rho_j`` of ``frequencies`` (``W``, shape
    ``(d, F/2)``) drawn i.i.d. from ``N(0, 2 gamma I_d)``. Cosine and sine of the same
    frequency sit next to each other, in the order of eq. 4.5 (feature ``2j`` is
    ``cos(rho_j^T x)``, feature ``2j + 1`` is ``sin(rho_j^T x)``, up to the factor).

    Every row of the output is rounded independently of the other rows and of the
    batch size (``dp_proto._rowwise``), so a record's features do not depend on
    which other records are mapped with it.

    Properties: ``phi(x) . phi(y)`` is an unbiased estimate of ``k(x, y)`` whose error
    shrinks like ``1 / sqrt(F)``; ``||phi(x)|| = 1`` exactly (so ``kappa = 1``).

    The module has no trainable parameters. The frequencies are a buffer (saved in the
    state dict and moved by ``.to(device)``), drawn once at construction from
    ``generator`` (or the global generator), independently of any data; they are
    drawn in float64 on the generator's device and then cast, so the same generator seed
    gives the same map for every ``dtype`` and ``device``.

    Parameters
    ----------
    in_features : int
        Input dimension ``d >= 1``.
    num_features : int
        Output dimension ``F``; even and ``>= 2``.
    gamma : float
        Kernel width ``> 0`` of ``exp(-gamma ||x - y||^2)``.
    generator : torch.Generator, optional
        Source of the frequencies, for reproducible maps.
    dtype : torch.dtype, default ``torch.float32``
        Floating dtype of the frequencies and of the output.
    device : torch.device or str, optional
        Device of the frequencies.

    Shapes
    ------
    ``forward(x)``: ``(..., d) -> (..., F)``; ``x`` is cast to the module's dtype.
    """

    frequencies: torch.Tensor

    def __init__(
        self,
        in_features: int,
        num_features: int,
        gamma: float,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        if isinstance(in_features, bool) or not isinstance(in_features, int) or in_features < 1:
            raise ValueError(f"in_features must be a positive int, got {in_features!r}")
        if isinstance(num_features, bool) or not isinstance(num_features, int):
            raise ValueError(f"num_features must be an even int >= 2, got {num_features!r}")
        if num_features < 2 or num_features % 2:
            raise ValueError(f"num_features must be an even int >= 2 (cos/sin pairs of eq. 4.5), got {num_features}")
        if not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating dtype, got {dtype}")
        self.in_features = in_features
        self.num_features = num_features
        self.gamma = _check_gamma(gamma)
        draw_device = generator.device if generator is not None else torch.device("cpu")
        rho = torch.randn(in_features, num_features // 2, generator=generator, dtype=torch.float64, device=draw_device)
        rho = rho * math.sqrt(2.0 * self.gamma)
        self.register_buffer("frequencies", rho.to(device=device, dtype=dtype))

    @property
    def W(self) -> torch.Tensor:
        """The frequencies ``(d, F/2)``, columns ``rho_j ~ N(0, 2 gamma I)`` (alias of the buffer)."""
        return self.frequencies

    @property
    def kappa(self) -> float:
        """``sup_x ||phi(x)||``; exactly 1 for this map (used in the sensitivity of Cor. 4.2)."""
        return 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``x (..., d)`` to ``phi(x) (..., F)`` by eq. 4.5 (cos/sin interleaved)."""
        if x.shape[-1] != self.in_features:
            raise ValueError(
                f"expected inputs with last dimension in_features={self.in_features}, got shape {tuple(x.shape)}"
            )
        w = self.frequencies
        proj = ordered_matmul(x.to(dtype=w.dtype), w)  # (..., F/2), row-independent rounding
        pairs = torch.stack((torch.cos(proj), torch.sin(proj)), dim=-1)  # (..., F/2, 2)
        return pairs.flatten(-2) * math.sqrt(2.0 / self.num_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, num_features={self.num_features}, gamma={self.gamma}"
