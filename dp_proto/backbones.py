"""Small feature extractors to put a prototype layer on."""

from __future__ import annotations

from torch import nn

__all__ = ["small_cnn", "mlp"]


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
