"""Non-private initialisers for prototypes and metric matrices.

The DP counterpart of ``class_mean_prototypes`` (Laplace-noised class means)
lives in ``dp_proto.privacy``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

import torch
from torch import Tensor

from dp_proto.exceptions import DataValidationError

__all__ = ["OmegaInit", "init_omega", "class_mean_prototypes", "make_prototype_labels", "prototype_counts"]

OmegaInit = Literal["identity", "scaled_identity", "random"]


def init_omega(
    kind: OmegaInit | Tensor,
    rank: int,
    in_features: int,
    *,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """An initial projection ``Omega`` of shape ``(rank, in_features)``.

    ``identity``: the first ``rank`` rows of the identity; ``scaled_identity``: the
    same divided by ``sqrt(in_features)``; ``random``: i.i.d. ``U[-1, 1]`` entries
    drawn from ``generator``; a tensor is validated and copied.
    """
    if isinstance(kind, Tensor):
        if tuple(kind.shape) != (rank, in_features):
            raise ValueError(f"expected omega of shape ({rank}, {in_features}), got {tuple(kind.shape)}")
        return kind.detach().to(dtype=dtype, device=device).clone()
    if kind in ("identity", "scaled_identity"):
        omega = torch.eye(rank, in_features, dtype=dtype, device=device)
        return omega / math.sqrt(in_features) if kind == "scaled_identity" else omega
    if kind == "random":
        omega = torch.rand(rank, in_features, generator=generator, dtype=dtype or torch.get_default_dtype())
        return (2.0 * omega - 1.0).to(device)
    raise ValueError(f"unknown omega_init {kind!r}; expected 'identity', 'scaled_identity', 'random' or a tensor")


def make_prototype_labels(
    classes: int | Sequence[int], prototypes_per_class: int | Sequence[int] | Mapping[int, int] = 1
) -> Tensor:
    """Label vector ``(W,)`` with ``prototypes_per_class`` prototypes for each class index.

    Parameters
    ----------
    classes : int or sequence of int
        Number of classes ``c`` (labels ``0..c-1``) or the class indices.
    prototypes_per_class : int, sequence of int (one per class) or mapping class -> count
    """
    class_ids = list(range(classes)) if isinstance(classes, int) else [int(c) for c in classes]
    if isinstance(prototypes_per_class, Mapping):
        unknown = set(prototypes_per_class) - set(class_ids)
        if unknown:
            raise ValueError(f"prototypes_per_class names unknown classes {sorted(unknown)}")
        counts = [int(prototypes_per_class.get(c, 1)) for c in class_ids]
    elif isinstance(prototypes_per_class, int):
        counts = [prototypes_per_class] * len(class_ids)
    else:
        counts = [int(k) for k in prototypes_per_class]
        if len(counts) != len(class_ids):
            raise ValueError(f"prototypes_per_class has {len(counts)} entries for {len(class_ids)} classes")
    if any(k < 1 for k in counts):
        raise ValueError(f"every class needs at least one prototype, got counts {counts}")
    return torch.tensor([c for c, k in zip(class_ids, counts, strict=True) for _ in range(k)])


def prototype_counts(prototype_labels: Tensor) -> list[int]:
    """The per-class counts ``[k_0, ..., k_{c-1}]`` of labels ``(W,)`` grouped by class in
    class order, as ``make_prototype_labels(c, counts)`` builds them; ``ValueError`` for
    labels in any other order or a class without a prototype."""
    labels = prototype_labels.detach().cpu().long()
    counts = torch.bincount(labels).tolist()
    if min(counts, default=0) < 1 or not torch.equal(labels, make_prototype_labels(len(counts), counts)):
        raise ValueError(
            "the prototype labels must be grouped by class, in class order, with a prototype for every class "
            "(make_prototype_labels(num_classes, counts))"
        )
    return counts


def class_mean_prototypes(
    x: Tensor,
    y: Tensor,
    prototype_labels: Tensor,
    *,
    jitter: float = 0.01,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Prototypes at the class means (Brinkrolf 2023, GLVQ training step 1).

    With several prototypes per class every copy of the class mean gets
    independent Gaussian jitter of standard deviation ``jitter`` times the
    class's feature-wise standard deviation, so that winners are unique.

    Parameters
    ----------
    x : Tensor, shape (n, d)
    y : Tensor, shape (n,), class indices
    prototype_labels : Tensor, shape (W,)
    jitter : float
        Relative scale of the jitter (only used where a class has more than one prototype).
    generator : torch.Generator, optional

    Returns
    -------
    Tensor, shape (W, d)

    Raises
    ------
    DataValidationError
        If a class of ``prototype_labels`` has no sample in ``y``.
    """
    if x.dim() != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"expected x (n, d) and y (n,), got {tuple(x.shape)} and {tuple(y.shape)}")
    labels = prototype_labels.to(y.device)
    classes = torch.unique(labels)
    one_hot = (y[:, None] == classes[None, :]).to(x.dtype)  # (n, c)
    counts = one_hot.sum(0)
    if bool((counts == 0).any()):
        empty = classes[counts == 0].tolist()
        raise DataValidationError(f"class(es) {empty} have no samples; cannot place their prototypes")
    means = (one_hot.T @ x) / counts[:, None]  # (c, d)
    var = (one_hot.T @ x.pow(2)) / counts[:, None] - means.pow(2)
    std = var.clamp_min(0).sqrt()
    position = torch.searchsorted(classes, labels)  # class row of every prototype
    prototypes = means[position].clone()
    multiple = torch.bincount(position, minlength=len(classes))[position] > 1
    if bool(multiple.any()) and jitter > 0:
        noise = torch.randn(prototypes.shape, generator=generator, dtype=x.dtype).to(x.device)
        prototypes[multiple] += jitter * std.clamp_min(1e-6)[position][multiple] * noise[multiple]
    return prototypes
