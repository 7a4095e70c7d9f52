"""Pictures of prototypes that live in a feature space: the image whose features they are.

A prototype trained on scattering features is a point of the feature space, not an image.
``preimage`` finds, by gradient descent, an image in ``[0, 1]`` whose features under a
fixed, differentiable feature map are closest to it (the "pre-image" of feature
inversion, as Bruna & Mallat 2013 do for scattering coefficients). It reads the
prototypes and the public map only, never the training data, so for a private
prototype model it is post-processing of the release and costs no privacy budget.

What the picture shows depends on how much noise the prototype carries in the
directions the model ignores: DP-SGD adds noise to every coordinate, and a DP
initialisation with Laplace noise on ``d`` thousand features leaves pure noise there
(``init_mechanism="gaussian"`` of the DP estimators leaves far less).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from dp_proto._validation import check_int
from dp_proto.exceptions import DataValidationError

__all__ = ["preimage"]


def preimage(
    feature_map: Callable[[Tensor], Tensor],
    targets: Tensor,
    shape: Sequence[int],
    *,
    steps: int = 600,
    lr: float = 0.1,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Images ``(k, *shape)`` in ``[0, 1]`` whose features are closest to ``targets``.

    Minimises ``||feature_map(sigmoid(z)) - target||^2`` over the logits ``z`` with Adam
    (``steps`` steps at rate ``lr``), all targets at once, from small random logits.

    Parameters
    ----------
    feature_map : callable
        Differentiable, data-independent map from images ``(k, *shape)`` to features
        ``(k, F)`` (e.g. scattering, flattened, then per-record normalisation).
    targets : Tensor, shape (k, F)
        The points to invert (e.g. a model's prototypes).
    shape : sequence of int
        The shape of one image, e.g. ``(28, 28)``.
    steps : int, default 600
        Adam steps.
    lr : float, default 0.1
        Adam's learning rate. How close the defaults get, and how fast: docs/dpsgd.md
        ("Fully private pipelines").
    generator : torch.Generator, optional
        The starting logits' randomness (they carry no information about any data).

    Returns
    -------
    Tensor, shape (k, *shape), float32, detached.
    """
    steps = check_int("steps", steps, 1)
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr!r}")
    targets = torch.as_tensor(targets, dtype=torch.float32).detach()
    if targets.ndim != 2:
        raise DataValidationError(f"targets must be (k, F), got shape {tuple(targets.shape)}")
    if not torch.isfinite(targets).all():
        raise DataValidationError("targets contain NaN or inf")
    start = 0.1 * torch.randn((targets.shape[0], *shape), generator=generator)
    logits = start.to(targets.device).requires_grad_(True)
    with torch.no_grad():
        probe = feature_map(torch.sigmoid(logits))
    if probe.shape != targets.shape:
        raise DataValidationError(
            f"feature_map gives features of shape {tuple(probe.shape)} for {targets.shape[0]} images of "
            f"shape {tuple(shape)}, but targets have shape {tuple(targets.shape)}"
        )
    optimizer = torch.optim.Adam([logits], lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = (feature_map(torch.sigmoid(logits)) - targets).pow(2).sum()
        loss.backward()
        optimizer.step()
    return torch.sigmoid(logits).detach()
