"""Small feature extractors to put a prototype layer on."""

from __future__ import annotations

from torch import nn

__all__ = ["small_cnn", "tanh_cnn", "mlp"]


def small_cnn(in_channels: int = 1, out_features: int = 32, width: int = 16) -> nn.Sequential:
    """Two strided 3x3 convolutions, global pooling to 2x2 and a linear map.

    Input ``(B, in_channels, H, W)`` (MNIST: ``(B, 1, 28, 28)``), output ``(B, out_features)``.
    Uses GroupNorm rather than BatchNorm so that Opacus can train it privately.
    """
    return nn.Sequential(
        nn.Conv2d(in_channels, width, 3, stride=2, padding=1),
        nn.GroupNorm(4, width),
        nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, stride=2, padding=1),
        nn.GroupNorm(4, 2 * width),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(8 * width, out_features),
    )


def tanh_cnn(in_channels: int = 1, out_features: int = 32) -> nn.Sequential:
    """The end-to-end DP-SGD CNN of Tramèr & Boneh (2021) for 28 x 28 images, with tanh
    activations (which they found better than ReLU under DP-SGD), its last linear layer of
    ``out_features`` units (tanh) left for a head: a prototype layer on ``out_features``.

    ``conv 16 @ 8x8 stride 2 (pad 3) -> tanh -> max-pool 2 (stride 1) -> conv 32 @ 4x4
    stride 2 -> tanh -> max-pool 2 (stride 1) -> linear 512 -> out_features -> tanh``.
    Input ``(B, in_channels, 28, 28)``, output ``(B, out_features)`` in ``[-1, 1]``; no
    normalisation layers, so Opacus trains it privately as it is.
    """
    return nn.Sequential(
        nn.Conv2d(in_channels, 16, 8, stride=2, padding=3),
        nn.Tanh(),
        nn.MaxPool2d(2, 1),
        nn.Conv2d(16, 32, 4, stride=2),
        nn.Tanh(),
        nn.MaxPool2d(2, 1),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, out_features),
        nn.Tanh(),
    )


def mlp(
    in_features: int, hidden: int = 64, out_features: int = 32, depth: int = 2, dropout: float = 0.0
) -> nn.Sequential:
    """``depth`` hidden layers of ``hidden`` ReLU units, then a linear map to ``out_features``."""
    layers: list[nn.Module] = []
    width = in_features
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        if dropout:
            layers.append(nn.Dropout(dropout))
        width = hidden
    layers.append(nn.Linear(width, out_features))
    return nn.Sequential(*layers)
