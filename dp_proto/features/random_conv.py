"""Random convolutional features: a fixed random filter bank, rectified and pooled.

A fallback to the scattering transform when images are not natural-image-like enough for
its wavelets, or not square powers of two: one convolution with random zero-mean filters,
a rectifier and average pooling (Jarrett et al. 2009; Saxe et al. 2011 show that such
random single-layer features with pooling already separate digits well). The filters are
drawn from a seeded generator and depend on nothing but the arguments, so the map is
public and costs no privacy budget.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dp_proto._validation import check_int
from dp_proto.exceptions import DataValidationError

__all__ = ["RandomConvFeatures"]

_RECTIFIERS = ("abs", "relu")


class RandomConvFeatures(nn.Module):
    """Random filters, a rectifier and average pooling: ``(n, C, H, W) -> (n, F, H // p, W // p)``.

    ``F`` filters of ``C x k x k`` are drawn once from ``N(0, 1)`` with a generator seeded by
    ``seed``, centred and scaled to unit l2 norm (so a constant image gives zero response
    and every filter has the same gain). The forward pass is::

        out = avg_pool(rectify(conv2d(x, filters, padding=k // 2)), p)

    with ``rectify`` the absolute value (default; the modulus of a scattering transform's
    first layer) or ``relu``, and pooling over non-overlapping ``p x p`` windows (rows and
    columns beyond a multiple of ``p`` are dropped).

    Privacy: the filters are a function of ``(in_channels, n_filters, kernel_size, seed)``
    only, no data is read, and a record's output depends on that record alone; as a
    backbone or in front of a DP pipeline it costs no privacy budget. ``seed`` selects a
    public map, it is not privacy noise: keep it fixed so a released model's features can
    be recomputed. The filters are a (non-trainable) buffer saved in ``state_dict``.

    Args:
        in_channels: ``C``, channels of the input (1 for grey-scale images).
        n_filters: ``F``, number of random filters (output channels).
        kernel_size: ``k``, odd filter size.
        pool: ``p``, the side of the average-pooling window (1: no pooling).
        rectifier: ``"abs"`` or ``"relu"``.
        seed: seed of the filter bank.

    Shapes:
        input ``(n, H, W)`` (when ``C = 1``) or ``(n, C, H, W)``, floating point;
        output ``(n, F, H // p, W // p)`` in the input's dtype.

    Example::

        features = RandomConvFeatures(n_filters=64, kernel_size=5, pool=4)  # (n, 28, 28) -> (n, 64, 7, 7)
        head = nn.Sequential(features, nn.Flatten(), prototype_layer)
    """

    weight: Tensor

    def __init__(
        self,
        in_channels: int = 1,
        n_filters: int = 64,
        kernel_size: int = 5,
        pool: int = 4,
        rectifier: Literal["abs", "relu"] = "abs",
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.in_channels = check_int("in_channels", in_channels, 1)
        self.n_filters = check_int("n_filters", n_filters, 1)
        self.kernel_size = check_int("kernel_size", kernel_size, 1)
        if self.kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd (the output keeps the input's size), got {kernel_size}")
        self.pool = check_int("pool", pool, 1)
        if rectifier not in _RECTIFIERS:
            raise ValueError(f"rectifier must be one of {_RECTIFIERS}, got {rectifier!r}")
        self.rectifier = rectifier
        self.seed = check_int("seed", seed, 0)
        generator = torch.Generator().manual_seed(self.seed)
        shape = (self.n_filters, self.in_channels, self.kernel_size, self.kernel_size)
        filters = torch.randn(shape, generator=generator, dtype=torch.float64)
        filters -= filters.mean(dim=(1, 2, 3), keepdim=True)
        filters /= filters.flatten(1).norm(dim=1).clamp_min(1e-12)[:, None, None, None]
        self.register_buffer("weight", filters)

    def output_shape(self, shape: tuple[int, int]) -> tuple[int, int]:
        """``(H // p, W // p)`` for inputs of spatial size ``shape = (H, W)``."""
        return shape[0] // self.pool, shape[1] // self.pool

    def extra_repr(self) -> str:
        return (
            f"in_channels={self.in_channels}, n_filters={self.n_filters}, kernel_size={self.kernel_size}, "
            f"pool={self.pool}, rectifier={self.rectifier!r}, seed={self.seed}"
        )

    def forward(self, x: Tensor) -> Tensor:
        """``(n, H, W)`` or ``(n, C, H, W)`` -> ``(n, F, H // p, W // p)``."""
        x = self._check_input(x)
        dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
        z = F.conv2d(x.to(dtype), self.weight.to(dtype), padding=self.kernel_size // 2)
        z = z.abs() if self.rectifier == "abs" else F.relu(z)
        if self.pool > 1:
            z = F.avg_pool2d(z, self.pool)
        return z.to(x.dtype)

    def _check_input(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor):
            raise TypeError(f"RandomConvFeatures expects a torch.Tensor, got {type(x).__name__}")
        if not x.is_floating_point():
            raise TypeError(f"RandomConvFeatures expects a real floating-point tensor, got dtype {x.dtype}")
        if x.ndim == 3 and self.in_channels == 1:
            x = x.unsqueeze(1)
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            expected = "(n, H, W) or (n, 1, H, W)" if self.in_channels == 1 else f"(n, {self.in_channels}, H, W)"
            raise DataValidationError(f"RandomConvFeatures expects input {expected}, got {tuple(x.shape)}")
        if min(x.shape[-2:]) < self.pool:
            raise DataValidationError(
                f"RandomConvFeatures(pool={self.pool}) needs images of at least {self.pool} x {self.pool} "
                f"pixels, got {tuple(x.shape[-2:])}"
            )
        return x
