"""The three-branch anonymizer of Feutry, Piantanida, Bengio and Duhamel (2018).

An encoder maps a record to the released representation ``z``; a regular-label branch
and a private-label branch classify ``z``. Training (``dp_proto.lightning.anonymizer``)
keeps the regular label predictable and drives the private branch to the cross-entropy
of random guessing (``dp_proto.anonymizer.losses``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
    is also rectified (the representation is non-negative, as in the MLP of Feutry et al. 2018).

    Parameters
    ----------
    in_features : int
        Features per record after flattening.
    representation_dim : int, default 64
        Width ``r`` of the released representation.
    hidden : sequence of int, default (256,)
        Widths of the hidden layers.
    dropout : float, default 0.0
        Dropout after every hidden layer.

    Attributes
    ----------
    in_features, representation_dim : int
        As given.
    hidden : tuple of int
        Widths of the hidden layers.
    dropout : float
        As given.
    net : nn.Sequential
        The MLP.

    References
    ----------
    Feutry, Piantanida, Bengio & Duhamel (2018). Learning anonymized representations
    with adversarial neural networks. arXiv:1802.09386.

    Examples
    --------
    >>> import torch
    >>> from dp_proto.anonymizer import MLPEncoder
    >>> MLPEncoder(12, representation_dim=8)(torch.zeros(5, 3, 4)).shape
    torch.Size([5, 8])
    """

    def __init__(
        self, in_features: int, representation_dim: int = 64, hidden: Sequence[int] = (256,), dropout: float = 0.0
    ) -> None:
        super().__init__()
        self.in_features = int(in_features)
        self.representation_dim = int(representation_dim)
        self.hidden = tuple(int(h) for h in hidden)
        self.dropout = float(dropout)
        self.net = mlp(in_features, hidden, representation_dim, dropout=dropout, final_activation=True)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The shape of one record after flattening: ``(in_features,)``."""
        return (self.in_features,)

    def architecture(self) -> dict[str, Any]:
        """The constructor's arguments as JSON data: ``MLPEncoder(**encoder.architecture())``
        builds the same network (untrained); the release format stores it in the manifest."""
        return {
            "in_features": self.in_features,
            "representation_dim": self.representation_dim,
            "hidden": list(self.hidden),
            "dropout": self.dropout,
        }

    def forward(self, x: Tensor) -> Tensor:
        x = x.flatten(1)
        if x.shape[1] != self.in_features:
            raise ValueError(f"expected {self.in_features} features per record, got {x.shape[1]}")
        return self.net(x)


class ConvEncoder(nn.Module):
    """``(B, C, H, W) -> (B, representation_dim)``: 3x3 conv blocks (ReLU, 2x2 max
    pooling), then a linear layer with ReLU. For small images such as faces.

    Parameters
    ----------
    image_shape : sequence of int
        ``(C, H, W)`` of the input images.
    representation_dim : int, default 64
        Width ``r`` of the released representation.
    channels : sequence of int, default (16, 32)
        Output channels of the conv blocks (one block each).
    dropout : float, default 0.0
        Dropout before the final linear layer.

    Attributes
    ----------
    image_shape : tuple of int
        ``(C, H, W)``.
    representation_dim : int
        As given.
    channels : tuple of int
        Output channels of the conv blocks.
    dropout : float
        As given.
    features : nn.Sequential
        The conv blocks.
    project : nn.Sequential
        Flatten, linear layer and ReLU.
    """

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
        self.representation_dim = int(representation_dim)
        self.channels = tuple(int(ch) for ch in channels)
        self.dropout = float(dropout)
        self.features = nn.Sequential(*blocks)
        head: list[nn.Module] = [nn.Flatten(), nn.Linear(c * h * w, representation_dim), nn.ReLU()]
        if dropout > 0:
            head.insert(1, nn.Dropout(dropout))
        self.project = nn.Sequential(*head)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The shape of one record: ``image_shape`` ``(C, H, W)``."""
        return self.image_shape

    def architecture(self) -> dict[str, Any]:
        """The constructor's arguments as JSON data: ``ConvEncoder(**encoder.architecture())``
        builds the same network (untrained); the release format stores it in the manifest."""
        return {
            "image_shape": list(self.image_shape),
            "representation_dim": self.representation_dim,
            "channels": list(self.channels),
            "dropout": self.dropout,
        }

    def forward(self, x: Tensor) -> Tensor:
        if tuple(x.shape[1:]) != self.image_shape:
            raise ValueError(f"expected images of shape {self.image_shape}, got {tuple(x.shape[1:])}")
        return self.project(self.features(x))


class SignalEncoder(nn.Module):
    """``(B, C, L) -> (B, representation_dim)``: 1-D conv blocks over time (kernel
    ``kernel_size``, ReLU, 2x max pooling), global average pooling over what is left of
    the time axis, then a linear layer with ReLU. For windows of sensor signals such as
    the UCI HAPT windows (``C = 6`` channels, ``L = 128`` samples; pass
    ``signals.transpose(0, 2, 1)`` of ``load_hapt_windows(signals=True)``).

    Parameters
    ----------
    signal_shape : sequence of int
        ``(C, L)``: channels and samples of one window.
    representation_dim : int, default 64
        Width ``r`` of the released representation.
    channels : sequence of int, default (32, 64, 64)
        Output channels of the conv blocks (one block each).
    kernel_size : int, default 5
        Odd width of every convolution (padded to keep the length).
    dropout : float, default 0.0
        Dropout before the final linear layer.

    Raises
    ------
    ValueError
        A window shorter than the encoder's receptive field: each block halves the length,
        so ``L`` must be at least ``2 ** len(channels)`` (and at least ``kernel_size``).
    """

    def __init__(
        self,
        signal_shape: Sequence[int],
        representation_dim: int = 64,
        channels: Sequence[int] = (32, 64, 64),
        kernel_size: int = 5,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if len(signal_shape) != 2 or min(int(v) for v in signal_shape) < 1:
            raise ValueError(f"signal_shape must be (channels, samples) of positive sizes, got {tuple(signal_shape)}")
        if representation_dim < 1 or not channels or any(int(ch) < 1 for ch in channels):
            raise ValueError(
                f"representation_dim and channels must be >= 1, got {representation_dim}, {list(channels)}"
            )
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be an odd number >= 1, got {kernel_size}")
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout must lie in [0, 1), got {dropout}")
        c, length = (int(v) for v in signal_shape)
        needed = max(2 ** len(channels), int(kernel_size))
        if length < needed:
            raise ValueError(
                f"windows of {length} samples are shorter than the receptive field of {len(channels)} conv blocks "
                f"with kernel {kernel_size} ({needed} samples): use longer windows or fewer blocks"
            )
        blocks: list[nn.Module] = []
        for out in channels:
            blocks += [nn.Conv1d(c, int(out), int(kernel_size), padding=kernel_size // 2), nn.ReLU(), nn.MaxPool1d(2)]
            c = int(out)
        self.signal_shape = (int(signal_shape[0]), int(signal_shape[1]))
        self.representation_dim = int(representation_dim)
        self.channels = tuple(int(ch) for ch in channels)
        self.kernel_size = int(kernel_size)
        self.dropout = float(dropout)
        self.features = nn.Sequential(*blocks, nn.AdaptiveAvgPool1d(1))
        head: list[nn.Module] = [nn.Flatten(), nn.Linear(c, representation_dim), nn.ReLU()]
        if dropout > 0:
            head.insert(1, nn.Dropout(dropout))
        self.project = nn.Sequential(*head)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The shape of one record: ``signal_shape`` ``(C, L)``."""
        return self.signal_shape

    def architecture(self) -> dict[str, Any]:
        """The constructor's arguments as JSON data (see ``ConvEncoder.architecture``)."""
        return {
            "signal_shape": list(self.signal_shape),
            "representation_dim": self.representation_dim,
            "channels": list(self.channels),
            "kernel_size": self.kernel_size,
            "dropout": self.dropout,
        }

    def forward(self, x: Tensor) -> Tensor:
        if tuple(x.shape[1:]) != self.signal_shape:
            raise ValueError(f"expected windows of shape {self.signal_shape}, got {tuple(x.shape[1:])}")
        return self.project(self.features(x))


class MLPHead(nn.Module):
    """A branch: ``(B, in_features) -> (B, num_classes)`` class scores (logits).

    Parameters
    ----------
    in_features : int
        Width of the representation it reads.
    num_classes : int
        Number of classes (at least 2).
    hidden : sequence of int, default (64,)
        Widths of the hidden layers.
    dropout : float, default 0.0
        Dropout after every hidden layer.

    Attributes
    ----------
    net : nn.Sequential
        The MLP.
    """

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

    Parameters
    ----------
    encoder : nn.Module
        Maps a batch of records to the representation ``(B, r)``.
    regular_head : nn.Module
        The regular-label branch: ``(B, r) -> (B, num_regular)`` logits.
    private_head : nn.Module
        The private-label branch: ``(B, r) -> (B, num_private)`` logits.

    Attributes
    ----------
    encoder : nn.Module
        The encoder, as given.
    regular_head : nn.Module
        The regular-label branch, as given.
    private_head : nn.Module
        The private-label branch, as given.

    References
    ----------
    Feutry, Piantanida, Bengio & Duhamel (2018). Learning anonymized representations
    with adversarial neural networks. arXiv:1802.09386.

    Examples
    --------
    >>> import torch
    >>> from dp_proto.anonymizer import Anonymizer
    >>> model = Anonymizer.mlp(20, num_regular=3, num_private=5, representation_dim=8)
    >>> regular, private = model(torch.zeros(4, 20))
    >>> model.encode(torch.zeros(4, 20)).shape, regular.shape, private.shape
    (torch.Size([4, 8]), torch.Size([4, 3]), torch.Size([4, 5]))
    """

    def __init__(self, encoder: nn.Module, regular_head: nn.Module, private_head: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.regular_head = regular_head
        self.private_head = private_head

    @classmethod
    def _with_mlp_heads(
        cls,
        encoder: nn.Module,
        representation_dim: int,
        num_regular: int,
        num_private: int,
        head_hidden: Sequence[int],
        dropout: float,
    ) -> Anonymizer:
        """``encoder`` with an ``MLPHead`` branch per label (the constructors below)."""
        return cls(
            encoder,
            MLPHead(representation_dim, num_regular, head_hidden, dropout),
            MLPHead(representation_dim, num_private, head_hidden, dropout),
        )

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
        return cls._with_mlp_heads(encoder, representation_dim, num_regular, num_private, head_hidden, dropout)

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
        return cls._with_mlp_heads(encoder, representation_dim, num_regular, num_private, head_hidden, dropout)

    @classmethod
    def signal_cnn(
        cls,
        signal_shape: Sequence[int],
        num_regular: int,
        num_private: int,
        *,
        representation_dim: int = 64,
        channels: Sequence[int] = (32, 64, 64),
        kernel_size: int = 5,
        head_hidden: Sequence[int] = (64,),
        dropout: float = 0.0,
    ) -> Anonymizer:
        """A 1-D CNN encoder (``SignalEncoder``) for signal windows ``(C, L)`` and MLP branches."""
        encoder = SignalEncoder(signal_shape, representation_dim, channels, kernel_size, dropout)
        return cls._with_mlp_heads(encoder, representation_dim, num_regular, num_private, head_hidden, dropout)

    def encode(self, x: Tensor) -> Tensor:
        return self.encoder(x)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        z = self.encoder(x)
        return self.regular_head(z), self.private_head(z)

    def branch_parameters(self) -> list[nn.Parameter]:
        return [*self.regular_head.parameters(), *self.private_head.parameters()]
