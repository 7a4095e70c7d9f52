"""Pictures of prototype models: prototype grids and relevance matrices.

The ``*_image`` functions return ``(3, H, W)`` float tensors in ``[0, 1]`` for
TensorBoard's ``add_image``; the ``plot_*`` functions draw on matplotlib axes
(imported lazily) for notebooks and reports.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["prototype_grid", "relevance_image", "plot_prototypes", "plot_relevance"]


def prototype_grid(prototypes: Tensor, image_shape: Sequence[int], *, ncol: int | None = None, pad: int = 1) -> Tensor:
    """Tile prototypes ``(W, d)`` as grey images of ``image_shape`` (``(H, W)`` or
    ``(1, H, W)``) into one ``(3, rows*(H+pad)+pad, cols*(W+pad)+pad)`` image.

    Every prototype is min-max scaled on its own, so contrast is comparable.
    """
    h, w = int(image_shape[-2]), int(image_shape[-1])
    protos = prototypes.detach().float().cpu().reshape(prototypes.shape[0], -1)
    if protos.shape[1] != h * w:
        raise ValueError(f"prototypes have {protos.shape[1]} features, image_shape {tuple(image_shape)} needs {h * w}")
    lo = protos.min(1, keepdim=True).values
    hi = protos.max(1, keepdim=True).values
    protos = (protos - lo) / (hi - lo).clamp_min(1e-12)
    n = protos.shape[0]
    ncol = ncol or min(n, 10)
    nrow = -(-n // ncol)
    grid = torch.ones(nrow * (h + pad) + pad, ncol * (w + pad) + pad)
    for k in range(n):
        r, c = divmod(k, ncol)
        top, left = pad + r * (h + pad), pad + c * (w + pad)
        grid[top : top + h, left : left + w] = protos[k].reshape(h, w)
    return grid.expand(3, -1, -1).clone()


def relevance_image(matrix: Tensor, *, cmap: str = "RdBu_r") -> Tensor:
    """A relevance matrix ``(d, d)`` as a ``(3, d, d)`` colour image, symmetric
    colour scale around zero (red positive, blue negative)."""
    from matplotlib import colormaps

    m = matrix.detach().float().cpu()
    scale = m.abs().max().clamp_min(1e-12)
    rgba = colormaps[cmap](((m / scale + 1) / 2).numpy())
    return torch.from_numpy(rgba[..., :3]).permute(2, 0, 1).float()


def plot_prototypes(prototypes, image_shape: Sequence[int], labels=None, *, ncol: int = 10, axes=None):
    """Draw prototypes ``(W, d)`` as images with their labels as titles; returns the figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    protos = np.asarray(prototypes).reshape(len(prototypes), *image_shape[-2:])
    ncol = min(ncol, len(protos))
    nrow = -(-len(protos) // ncol)
    if axes is None:
        fig, axes = plt.subplots(nrow, ncol, figsize=(1.2 * ncol, 1.3 * nrow), squeeze=False)
    else:
        fig = axes.flat[0].figure
    for ax in np.asarray(axes).flat:
        ax.axis("off")
    for k, (ax, img) in enumerate(zip(np.asarray(axes).flat, protos, strict=False)):
        ax.imshow(img, cmap="gray")
        if labels is not None:
            ax.set_title(str(labels[k]), fontsize=9)
    return fig


def plot_relevance(matrix, *, ax=None, title: str = "relevance matrix"):
    """Draw a relevance matrix ``(d, d)`` with a diverging colour map; returns the figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    m = np.asarray(matrix)
    if ax is None:
        fig, ax = plt.subplots(figsize=(4, 3.5))
    else:
        fig = ax.figure
    scale = np.abs(m).max() or 1.0
    im = ax.imshow(m, cmap="RdBu_r", vmin=-scale, vmax=scale)
    fig.colorbar(im, ax=ax)
    ax.set_title(title)
    return fig
