"""The three-branch anonymizer of Feutry, Piantanida, Bengio and Duhamel (2018).

An encoder maps a record to the released representation ``z``; a regular-label branch
and a private-label branch classify ``z``. Training (:mod:`dp_proto.lightning.anonymizer`)
keeps the regular label predictable and drives the private branch to the cross-entropy
of random guessing (:mod:`dp_proto.anonymizer.losses`).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

__all__ = ["mlp", "MLPEncoder", "ConvEncoder", "MLPHead", "Anonymizer"]


def mlp(
    in_features: int, hidden: Sequence[int], out_features: int, *, dropout: float = 0.0, final_activation: bool = False
) -> nn.Sequential:
    """``Linear -> ReLU -> Dropout`` blocks of widths ``hidden``, then ``Linear`` to
    ``out_features`` (followed by ReLU if ``final_activation``)."""
    if in_features < 1 or out_features < 1 or any(h < 1 for h in hidden):
        raise ValueError(f"layer widths must be >= 1, got in={in_features}, hidden={list(hidden)}, out={out_features}")
    if not 0 <= dropout < 1:
        raise ValueError(f"dropout must lie in [0, 1), got {dropout}")
    layers: list[nn.Module] = []
    width = in_features
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = h
    layers.append(nn.Linear(width, out_features))
    if final_activation:
        layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class MLPEncoder(nn.Module):
    """``(B, *shape) -> (B, representation_dim)``: flatten, then an MLP whose last layer
    is also rectified (the representation is non-negative, as in the MLP of Feutry et al. 2018)."""

    def __init__(
        self, in_features: int, representation_dim: int = 64, hidden: Sequence[int] = (256,), dropout: float = 0.0
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.representation_dim = representation_dim
        self.net = mlp(in_features, hidden, representation_dim, dropout=dropout, final_activation=True)

    def forward(self, x: Tensor) -> Tensor:
        x = x.flatten(1)
        if x.shape[1] != self.in_features:
            raise ValueError(f"expected {self.in_features} features per record, got {x.shape[1]}")
        return self.net(x)


class ConvEncoder(nn.Module):
    """``(B, C, H, W) -> (B, representation_dim)``: two 3x3 conv blocks (ReLU, 2x2 max
    pooling), then a linear layer with ReLU. For small images such as faces."""

    def __init__(
        self,
        image_shape: Sequence[int],
        representation_dim: int = 64,
        channels: Sequence[int] = (16, 32),
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if len(image_shape) != 3 or min(int(v) for v in image_shape) < 1:
            raise ValueError(
                f"image_shape must be (channels, height, width) of positive sizes, got {tuple(image_shape)}"
            )
        if representation_dim < 1 or not channels or any(int(ch) < 1 for ch in channels):
            raise ValueError(
                f"representation_dim and channels must be >= 1, got {representation_dim}, {list(channels)}"
            )
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout must lie in [0, 1), got {dropout}")
        c, h, w = (int(v) for v in image_shape)
        blocks: list[nn.Module] = []
        for out in channels:
            blocks += [nn.Conv2d(c, out, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
            c, h, w = out, h // 2, w // 2
        if h < 1 or w < 1:
            raise ValueError(f"image {tuple(image_shape)} is too small for {len(channels)} pooling steps")
        self.image_shape = tuple(int(v) for v in image_shape)
        self.representation_dim = representation_dim
        self.features = nn.Sequential(*blocks)
        head: list[nn.Module] = [nn.Flatten(), nn.Linear(c * h * w, representation_dim), nn.ReLU()]
        if dropout > 0:
            head.insert(1, nn.Dropout(dropout))
        self.project = nn.Sequential(*head)

    def forward(self, x: Tensor) -> Tensor:
        if tuple(x.shape[1:]) != self.image_shape:
            raise ValueError(f"expected images of shape {self.image_shape}, got {tuple(x.shape[1:])}")
        return self.project(self.features(x))


class MLPHead(nn.Module):
    """A branch: ``(B, in_features) -> (B, num_classes)`` class scores (logits)."""

    def __init__(self, in_features: int, num_classes: int, hidden: Sequence[int] = (64,), dropout: float = 0.0) -> None:
        super().__init__()
        if num_classes < 2:
            raise ValueError(f"a branch needs at least 2 classes, got {num_classes}")
        self.num_classes = num_classes
        self.net = mlp(in_features, hidden, num_classes, dropout=dropout)

    def forward(self, z: Tensor) -> Tensor:
        return self.net(z)


class Anonymizer(nn.Module):
    """Encoder + regular-label branch + private-label branch.

    ``encode(x)`` is the released representation ``(B, r)``; ``forward(x)`` returns the
    class scores of both branches, ``(B, num_regular)`` and ``(B, num_private)``. Any
    ``nn.Module`` encoder works as long as the branches take its output.
    """

    def __init__(self, encoder: nn.Module, regular_head: nn.Module, private_head: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.regular_head = regular_head
        self.private_head = private_head

    @classmethod
    def mlp(
        cls,
        in_features: int,
        num_regular: int,
        num_private: int,
        *,
        representation_dim: int = 64,
        encoder_hidden: Sequence[int] = (256,),
        head_hidden: Sequence[int] = (64,),
        dropout: float = 0.0,
    ) -> Anonymizer:
        """The default: MLP encoder and MLP branches."""
        encoder = MLPEncoder(in_features, representation_dim, encoder_hidden, dropout)
        return cls(
            encoder,
            MLPHead(representation_dim, num_regular, head_hidden, dropout),
            MLPHead(representation_dim, num_private, head_hidden, dropout),
        )

    @classmethod
    def cnn(
        cls,
        image_shape: Sequence[int],
        num_regular: int,
        num_private: int,
        *,
        representation_dim: int = 64,
        channels: Sequence[int] = (16, 32),
        head_hidden: Sequence[int] = (64,),
        dropout: float = 0.0,
    ) -> Anonymizer:
        """A small CNN encoder for images ``(C, H, W)`` and MLP branches."""
        encoder = ConvEncoder(image_shape, representation_dim, channels, dropout)
        return cls(
            encoder,
            MLPHead(representation_dim, num_regular, head_hidden, dropout),
            MLPHead(representation_dim, num_private, head_hidden, dropout),
        )

    def encode(self, x: Tensor) -> Tensor:
        return self.encoder(x)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        z = self.encoder(x)
        return self.regular_head(z), self.private_head(z)

    def branch_parameters(self) -> list[nn.Parameter]:
        return [*self.regular_head.parameters(), *self.private_head.parameters()]
