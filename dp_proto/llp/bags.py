"""A classifier trained on bag label proportions (DLLP, Ardehaly & Culotta 2017).

The k-means learner of Sachweh, Boiar & Liebig (2021) labels whole clusters, so it is
never better than its clusters are pure. Here a small network ``f: x -> p(y | x)`` is
trained directly on the bags: a node's windows of time batch ``b`` form a bag, the
network's mean prediction over the bag ``p_b = mean_{i in b} f(x_i)`` is matched to the
bag's label proportions ``pi_b`` (its own, or a neighbour's for the same time batch), by
the proportion loss

    L = sum_b w_b KL(pi_b || p_b) / sum_b w_b,     KL(pi || p) = sum_l pi_l log(pi_l / p_l),

the cross-entropy of Ardehaly & Culotta (2017) less the (constant) entropy of ``pi_b``, so
that it is zero exactly when the predicted proportions equal the given ones. ``w_b`` is 1
for a bag that has windows at the node and is valid in the source (an exact release has
no proportions for an empty batch), else 0.

With noisy proportions from the unbiased release (``estimator="unbiased"``: ``(n_bl +
Lap(1/epsilon)) / b``, rows that need not sum to 1 and may be negative) the KL is not
defined; ``loss="cross_entropy"`` uses

    L = - sum_b w_b sum_l pi~_bl log p_bl / sum_b w_b,

which is *linear* in the given proportions: zero-mean noise on ``pi~`` leaves its
expectation that of the exact proportions, so the expected loss has the same minimiser
(with exact proportions it is the KL plus the constant entropy of ``pi``). A model fitted
to a node's own noisy release alone is post-processing of that release: label-DP at the
release's epsilon.

``fit_bag_model`` trains one network on all sources of a node at once (the loss averaged
over the sources), full batch, with Adam; what it consumes is the released proportions and
the node's own windows, so the releases and their ledgers are those of the k-means learner.
``LLPBagModel`` predicts ``argmax_l f(x)_l``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from dp_proto._neighbours import check_points
from dp_proto._validation import check_int
from dp_proto.exceptions import DataValidationError
from dp_proto.llp.proportions import LabelProportions, as_source

__all__ = [
    "BAG_LOSSES",
    "BagNetwork",
    "LLPBagModel",
    "bag_cross_entropy",
    "bag_proportions",
    "bag_proportion_loss",
    "fit_bag_model",
]

#: The bag losses: ``"kl"`` (given proportions on the simplex) and ``"cross_entropy"``
#: (linear in the given proportions; any finite values, e.g. the unbiased release).
BAG_LOSSES = ("kl", "cross_entropy")

#: How far a row of given proportions may be from summing to 1.
_SUM_TOL = 1e-6


def bag_proportions(probabilities: Tensor, batch_ids: Tensor, num_batches: int) -> tuple[Tensor, Tensor]:
    """Mean predicted probabilities per bag.

    Parameters
    ----------
    probabilities : Tensor (m, L)
        ``p(y | x_i)`` of every window (rows sum to 1).
    batch_ids : Tensor (m,) int64
        Bag of every window, ``0 .. num_batches - 1``.

    Returns
    -------
    (Tensor (B, L), Tensor (B,))
        The mean over each bag (zeros for an empty bag) and the bag sizes.
    """
    sizes = torch.bincount(batch_ids, minlength=num_batches).to(probabilities.dtype)
    sums = torch.zeros(num_batches, probabilities.shape[1], dtype=probabilities.dtype, device=probabilities.device)
    sums.index_add_(0, batch_ids, probabilities)
    return sums / sizes.clamp_min(1)[:, None], sizes


def _check_targets(targets: Tensor) -> None:
    if targets.dim() != 2:
        raise ValueError(f"bag proportions must have shape (B, L), got {tuple(targets.shape)}")
    if not bool(torch.isfinite(targets).all()) or bool((targets < 0).any()):
        raise DataValidationError("bag proportions must be finite and >= 0")
    off = (targets.sum(1) - 1).abs() > _SUM_TOL * targets.shape[1]
    if bool(off.any()):
        rows = torch.nonzero(off).flatten()[:5].tolist()
        raise DataValidationError(
            f"bag proportions must sum to 1 in every bag; bag(s) {rows} sum to "
            f"{[round(float(targets[r].sum()), 6) for r in rows]}"
        )


def _check_finite_targets(targets: Tensor) -> None:
    if targets.dim() != 2:
        raise ValueError(f"bag proportions must have shape (B, L), got {tuple(targets.shape)}")
    if not bool(torch.isfinite(targets).all()):
        raise DataValidationError("bag proportions must be finite")


def _check_loss_inputs(probabilities: Tensor, batch_ids: Tensor, targets: Tensor) -> None:
    if probabilities.dim() != 2 or probabilities.shape[1] != targets.shape[1]:
        raise ValueError(f"probabilities must have shape (m, {targets.shape[1]}), got {tuple(probabilities.shape)}")
    if batch_ids.shape != (probabilities.shape[0],):
        raise ValueError(f"batch_ids must have shape ({probabilities.shape[0]},), got {tuple(batch_ids.shape)}")


def bag_proportion_loss(
    probabilities: Tensor,
    batch_ids: Tensor,
    targets: Tensor,
    weights: Tensor | None = None,
) -> Tensor:
    """The weighted mean over bags of ``KL(targets_b || mean_{i in b} probabilities_i)``.

    Parameters
    ----------
    probabilities : Tensor (m, L)
        Predicted class probabilities of the windows.
    batch_ids : Tensor (m,) int64
        Bag of every window.
    targets : Tensor (B, L)
        Given proportions of every bag (rows sum to 1).
    weights : Tensor (B,), optional
        Weight of every bag (e.g. ``valid`` as 0/1); bags without windows weigh 0.

    Returns
    -------
    Tensor
        A scalar, 0 when every weighted bag's predicted proportions equal its target.

    Raises
    ------
    DataValidationError
        Targets that are negative, not finite, or whose rows do not sum to 1.
    ValueError
        Shapes that do not match, or no bag with positive weight and windows.
    """
    return _weighted_bag_loss("kl", probabilities, batch_ids, targets, weights)


def _weighted_bag_loss(
    loss: str, probabilities: Tensor, batch_ids: Tensor, targets: Tensor, weights: Tensor | None
) -> Tensor:
    """Bag loss ``loss`` (one of ``BAG_LOSSES``) of the bag means, after its target check
    and the shape checks."""
    check, bag_loss = _LOSSES[loss]
    check(targets)
    _check_loss_inputs(probabilities, batch_ids, targets)
    predicted, sizes = bag_proportions(probabilities, batch_ids, targets.shape[0])
    return bag_loss(predicted, targets.to(probabilities.dtype), _bag_weights(sizes, weights))


def bag_cross_entropy(
    probabilities: Tensor,
    batch_ids: Tensor,
    targets: Tensor,
    weights: Tensor | None = None,
) -> Tensor:
    """The weighted mean over bags of ``- sum_l targets_bl log(mean_{i in b} probabilities_il)``:
    linear in ``targets``, so an unbiased noisy estimate of the proportions gives an
    unbiased estimate of the loss (module docstring).

    Parameters
    ----------
    probabilities : Tensor (m, L)
        Predicted class probabilities of the windows.
    batch_ids : Tensor (m,) int64
        Bag of every window.
    targets : Tensor (B, L)
        Given proportions of every bag: any finite values (rows need not sum to 1).
    weights : Tensor (B,), optional
        Weight of every bag; bags without windows weigh 0.

    Returns
    -------
    Tensor
        A scalar; for targets on the simplex, ``bag_proportion_loss`` plus the weighted
        mean entropy of the targets.

    Raises
    ------
    DataValidationError
        Targets that are not finite.
    ValueError
        Shapes that do not match, or no bag with positive weight and windows.
    """
    return _weighted_bag_loss("cross_entropy", probabilities, batch_ids, targets, weights)


def _bag_weights(sizes: Tensor, weights: Tensor | None) -> Tensor:
    """``(B,)`` weight of every bag: 0 without windows, else ``weights`` (default 1)."""
    w = (sizes > 0).to(sizes.dtype)
    if weights is not None:
        w = w * weights.to(sizes.dtype)
    if not bool((w > 0).any()):
        raise ValueError("no bag has windows and a positive weight")
    return w


def _kl_loss(predicted: Tensor, targets: Tensor, w: Tensor) -> Tensor:
    """``sum_b w_b KL(targets_b || predicted_b) / sum_b w_b`` for checked targets."""
    # KL(t || p); 0 log 0 = 0, and p is floored so that a confident wrong bag stays finite
    t = targets
    kl = torch.where(t > 0, t * (torch.log(t.clamp_min(1e-300)) - torch.log(predicted.clamp_min(1e-12))), 0.0)
    return (kl.sum(1) * w).sum() / w.sum()


def _cross_entropy_loss(predicted: Tensor, targets: Tensor, w: Tensor) -> Tensor:
    """``- sum_b w_b sum_l targets_bl log predicted_bl / sum_b w_b`` (``predicted`` floored
    at 1e-12, so that a negative target cannot drive the loss to minus infinity)."""
    return -((targets * torch.log(predicted.clamp_min(1e-12))).sum(1) * w).sum() / w.sum()


#: Each of ``BAG_LOSSES``: the check of its given proportions and the loss of checked ones.
_LOSSES = {"kl": (_check_targets, _kl_loss), "cross_entropy": (_check_finite_targets, _cross_entropy_loss)}


class BagNetwork(nn.Module):
    """``x (m, d) -> p(y | x) (m, L)``: standardisation (the node's own windows), two
    hidden ReLU layers of ``hidden`` units, softmax."""

    def __init__(self, d: int, num_classes: int, hidden: int = 64, *, mean: Tensor, scale: Tensor) -> None:
        super().__init__()
        self.register_buffer("mean", mean.reshape(1, d))
        self.register_buffer("scale", scale.reshape(1, d))
        self.body = nn.Sequential(
            nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)
        )

    def forward(self, x: Tensor) -> Tensor:
        return torch.softmax(self.body((x - self.mean) / self.scale), dim=1)


@dataclass(frozen=True)
class LLPBagModel:
    """A node's bag-trained classifier: ``x -> argmax_l p(y = l | x)``.

    Attributes
    ----------
    network : BagNetwork
    num_classes : int
    loss : float
        The proportion loss at the end of training (averaged over the sources).
    """

    network: BagNetwork
    num_classes: int
    loss: float = float("nan")

    @property
    def device(self) -> torch.device:
        return self.network.mean.device

    @torch.no_grad()
    def predict_proba(self, x: Tensor) -> Tensor:
        """``p(y | x)`` of the rows of ``x (n, d)``: ``(n, L)``."""
        return self.network(x.to(self.device, self.network.mean.dtype))

    def predict(self, x: Tensor) -> Tensor:
        """Labels of the rows of ``x (n, d)``: ``(n,)`` int64."""
        return self.predict_proba(x).argmax(1)

    def to(self, device: torch.device | str) -> LLPBagModel:
        return LLPBagModel(self.network.to(device), self.num_classes, self.loss)


def fit_bag_model(
    features: Tensor,
    batch_ids: Tensor,
    proportion_sources: Sequence[LabelProportions | Tensor],
    *,
    hidden: int = 64,
    epochs: int = 300,
    lr: float = 0.01,
    weight_decay: float = 1e-4,
    generator: torch.Generator | None = None,
    loss: str = "kl",
) -> LLPBagModel:
    """Train a ``BagNetwork`` on the node's windows against every source's bag proportions.

    Parameters
    ----------
    features : Tensor (m, d)
        The node's training windows (finite).
    batch_ids : Tensor (m,) int64
        Bag (global time batch) of every window.
    proportion_sources : sequence of LabelProportions or Tensor (B, L)
        The node's own proportions, then its neighbours'; a ``LabelProportions``
        contributes its ``valid`` mask as bag weights.
    hidden : int, default 64
        Units of each hidden layer.
    epochs : int, default 300
        Full-batch Adam steps.
    lr, weight_decay : float
        Adam's step size and L2 penalty.
    generator : torch.Generator, optional
        Draws the initial weights (on the CPU); default: torch's global generator.
    loss : {"kl", "cross_entropy"}, default "kl"
        ``bag_proportion_loss`` (proportions on the simplex) or ``bag_cross_entropy``
        (any finite proportions, e.g. the unbiased release).

    Returns
    -------
    LLPBagModel
        On the device of ``features``.

    Raises
    ------
    ValueError
        No source, sources of different shapes, bad settings.
    DataValidationError
        NaN/inf features; for ``loss="kl"`` proportions that are negative or do not sum
        to 1.
    """
    if loss not in BAG_LOSSES:
        raise ValueError(f"loss must be one of {BAG_LOSSES}, got {loss!r}")
    check, bag_loss = _LOSSES[loss]
    if len(proportion_sources) == 0:
        raise ValueError("proportion_sources is empty: need at least the node's own proportions")
    hidden = check_int("hidden", hidden, 1)
    epochs = check_int("epochs", epochs, 1)
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    if not (math.isfinite(weight_decay) and weight_decay >= 0):
        raise ValueError(f"weight_decay must be a finite number >= 0, got {weight_decay!r}")
    x = check_points(torch.as_tensor(features), "features").to(torch.float32)
    batch_ids = torch.as_tensor(batch_ids, device=x.device, dtype=torch.int64)
    if batch_ids.shape != (x.shape[0],):
        raise ValueError(f"batch_ids must have shape ({x.shape[0]},), got {tuple(batch_ids.shape)}")
    sources = [as_source(s) for s in proportion_sources]
    shape = tuple(sources[0][0].shape)
    for i, (p, _) in enumerate(sources):
        if tuple(p.shape) != shape or len(shape) != 2:
            raise ValueError(f"proportion source {i} has shape {tuple(p.shape)}; every source must be (B, L) = {shape}")
        try:
            check(p)
        except DataValidationError as err:
            hint = "; use loss='cross_entropy' for noisy proportions off the simplex" if loss == "kl" else ""
            raise DataValidationError(f"proportion source {i}: {err}{hint}") from err
    num_batches, num_classes = shape
    if bool((batch_ids < 0).any()) or bool((batch_ids >= num_batches).any()):
        raise DataValidationError(f"batch ids must lie in 0 .. {num_batches - 1}")
    # checked once here, not at every step: the targets and bag weights of every source
    sizes = torch.bincount(batch_ids, minlength=num_batches).to(torch.float32)
    targets = [
        (p.to(x.device, torch.float32), _bag_weights(sizes, None if v is None else v.to(x.device))) for p, v in sources
    ]
    mean, scale = x.mean(0), x.std(0, unbiased=False).clamp_min(1e-6)
    network = _initialised(x.shape[1], num_classes, hidden, mean, scale, generator).to(x.device)
    optimiser = torch.optim.Adam(network.parameters(), lr=lr, weight_decay=weight_decay)
    value = torch.tensor(float("nan"))
    for _ in range(epochs):
        optimiser.zero_grad()
        probs = network(x)
        # the mean of the per-source bag losses: the summation order is part of the fit (one
        # shared mean sums the gradients in another order, and the Adam steps, 300 by
        # default, turn that into another fit)
        value = sum(bag_loss(bag_proportions(probs, batch_ids, num_batches)[0], t, w) for t, w in targets)
        value = value / len(targets)
        value.backward()
        optimiser.step()
    network.eval()
    return LLPBagModel(network, num_classes, float(value.detach()))


def _initialised(
    d: int, num_classes: int, hidden: int, mean: Tensor, scale: Tensor, generator: torch.Generator | None
) -> BagNetwork:
    """A ``BagNetwork`` whose weights are drawn from ``generator`` (PyTorch's default
    initialisation, uniform in ``+-1/sqrt(fan_in)``)."""
    network = BagNetwork(d, num_classes, hidden, mean=mean.cpu(), scale=scale.cpu())
    where = generator.device if generator is not None else torch.device("cpu")
    with torch.no_grad():
        for layer in network.body:
            if isinstance(layer, nn.Linear):
                bound = 1.0 / math.sqrt(layer.in_features)
                for param in (layer.weight, layer.bias):
                    draw = torch.rand(param.shape, generator=generator, device=where)
                    param.copy_((draw * 2 - 1).cpu() * bound)
    return network
