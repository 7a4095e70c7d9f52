"""Subsample-and-aggregate for GLVQ: train on disjoint bins, average, add Gaussian noise.

The DP-LVQ "SAA" scheme (Brinkrolf, Göpfert & Hammer 2019; Brinkrolf 2023, Sec. 3.4 B),
corrected: per-record random bins, bin prototypes clipped into the domain, and a
sensitivity that covers the box width and all prototypes of a bin (see below):

1. every record gets an i.i.d. uniform bin label in ``0..m-1`` (``m`` public). Removing
   a record therefore leaves every other record's bin unchanged: only its own bin's data
   change (a random *partition* by permutation would reshuffle the others);
2. vanilla GLVQ is trained on every bin, all ``m`` bins as one batched computation
   (a leading bin dimension; ``fit_glvq_bins``);
3. each bin's prototypes are clipped into the public box ``[low, high]^d`` and, with
   several prototypes per class, put into a per-bin order by a minimum-cost assignment
   to a *public* reference (``match_to_reference``; a reference computed from the
   bins would couple them and void the bound below);
4. the per-prototype sum over bins gets Gaussian noise, then is divided by ``m``: by
   default on a public grid with discrete Gaussian noise (float-safe, see
   ``gaussian_mechanism``; about 8 % more noise than
   the continuous analytic Gaussian mechanism at epsilon 1).

Sensitivity (add/remove one record): one bin's ``W`` prototypes change, each
coordinate anywhere in ``[low, high]``, so the sum over bins moves by at most
``(high - low) sqrt(W d)`` in l2; for ``[-1, 1]^d`` that is ``2 sqrt(W d)``. The
``sqrt(d)`` of Brinkrolf, Göpfert & Hammer (2019) misses the box width (it is right for ``[0, 1]^d``) and the other ``W - 1``
prototypes of the changed bin.

Optionally every bin prototype is also projected onto the l2 ball of radius ``r`` around
the box centre (``radius=r``, public). A prototype then moves by at most ``2r``, the
bin's model by ``2 r sqrt(W)``, and the sensitivity is the smaller of the two diameters,
``min((high - low) sqrt(W d), 2 r sqrt(W))``. A ball that holds the class means but not
the box's corners cuts the noise by up to ``sqrt(d)`` times.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from dp_proto.lvq.init import make_prototype_labels
from dp_proto.lvq.losses import glvq_loss
from dp_proto.privacy.clipping import clip_box
from dp_proto.privacy.ledger import PrivacyLedger
from dp_proto.privacy.mechanisms import LEDGER_REQUIRED, gaussian_mechanism, plan_gaussian, require_ledger
from dp_proto.privacy.noise import gaussian_noise, uniform_open
from dp_proto.privacy.testing import per_record_coins

__all__ = [
    "assign_bins",
    "bin_shuffle_keys",
    "fit_glvq_bins",
    "match_to_reference",
    "saa_sensitivity",
    "project_to_domain",
    "aggregate_bin_models",
    "bin_prototype_labels",
    "train_bin_models",
]


def assign_bins(
    n: int,
    num_bins: int,
    *,
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
    device: torch.device | str | None = None,
) -> Tensor:
    """I.i.d. uniform bin labels ``(n,)`` in ``0..num_bins-1`` (one coin per record, so
    removing a record leaves every other record's bin as it was)."""
    if num_bins < 1:
        raise ValueError(f"num_bins must be >= 1, got {num_bins}")

    def draw() -> Tensor:
        u = uniform_open((n,), generator=generator, secure_mode=secure_mode, device=device)
        return (u * num_bins).floor().long().clamp_(max=num_bins - 1)

    return per_record_coins("bins", draw)


def saa_sensitivity(
    num_prototypes: int, dim: int, low: float = -1.0, high: float = 1.0, radius: float | None = None
) -> float:
    """l2 sensitivity of the per-prototype sum over bins: ``(high - low) sqrt(W d)``, or
    ``min(that, 2 radius sqrt(W))`` when the prototypes are also projected onto a ball."""
    if not high > low:
        raise ValueError(f"need high > low, got [{low}, {high}]")
    if num_prototypes < 1 or dim < 1:
        raise ValueError(f"need num_prototypes >= 1 and dim >= 1, got {num_prototypes}, {dim}")
    box = (high - low) * math.sqrt(num_prototypes * dim)
    if radius is None:
        return box
    if not radius > 0:
        raise ValueError(f"radius must be > 0, got {radius}")
    return min(box, 2.0 * radius * math.sqrt(num_prototypes))


def project_to_domain(prototypes: Tensor, lower: float, upper: float, radius: float | None = None) -> Tensor:
    """Clip ``prototypes (..., d)`` into ``[lower, upper]^d``, then (with ``radius``) project
    each onto the l2 ball of that radius around the box centre. Shrinking towards the
    centre keeps a point inside the box, so the result lies in both sets."""
    out = clip_box(prototypes, lower, upper).values
    if radius is None:
        return out
    centre = (lower + upper) / 2.0
    offset = out - centre
    norm = torch.linalg.vector_norm(offset, dim=-1, keepdim=True)
    return centre + offset * (radius / norm.clamp_min(radius))


def _padded_bins(bins: Tensor, num_bins: int) -> tuple[Tensor, Tensor]:
    """Record indices ``(m, L)`` of every bin, padded with 0, and the mask ``(m, L)``."""
    order = torch.argsort(bins, stable=True)
    counts = torch.bincount(bins, minlength=num_bins)
    length = max(int(counts.max()) if counts.numel() else 0, 1)
    starts = torch.cumsum(counts, 0) - counts
    slot = torch.arange(length, device=bins.device)
    mask = slot[None, :] < counts[:, None]  # (m, L)
    position = (starts[:, None] + slot[None, :]).clamp(max=max(len(bins) - 1, 0))
    index = torch.where(mask, order[position] if len(bins) else position, torch.zeros_like(position))
    return index, mask


def _bin_class_means(
    x: Tensor,
    y: Tensor,
    index: Tensor,
    mask: Tensor,
    prototype_labels: Tensor,
    jitter: float,
    generator: torch.Generator | None,
) -> Tensor:
    """Per-bin class means ``(m, W, d)`` (0, the box centre, for a class absent from a
    bin), with data-independent Gaussian jitter on copies of the same class."""
    xb, yb = x[index], y[index]  # (m, L, d), (m, L)
    one_hot = (yb[..., None] == prototype_labels[None, None, :]) & mask[..., None]  # (m, L, W)
    weights = one_hot.to(x.dtype)
    sums = weights.transpose(1, 2) @ xb  # (m, W, d)
    counts = weights.sum(1)[..., None]  # (m, W, 1)
    means = torch.where(counts > 0, sums / counts.clamp_min(1.0), torch.zeros_like(sums))
    if jitter > 0 and len(torch.unique(prototype_labels)) < len(prototype_labels):
        means = means + gaussian_noise(means.shape, jitter, generator=generator, dtype=x.dtype, device=x.device)
    return means


_MASK64 = (1 << 64) - 1


def _signed(c: int) -> int:
    return c - (1 << 64) if c >= 1 << 63 else c


_SPLITMIX = tuple(_signed(c) for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB))


def _shr(z: Tensor, k: int) -> Tensor:
    """Logical right shift of int64 (torch's ``>>`` is arithmetic)."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def _splitmix64(z: Tensor) -> Tensor:
    """The splitmix64 finaliser on int64 (wrapping arithmetic): a bijective hash."""
    z = z + _SPLITMIX[0]
    z = (z ^ _shr(z, 30)) * _SPLITMIX[1]
    z = (z ^ _shr(z, 27)) * _SPLITMIX[2]
    return z ^ _shr(z, 31)


def bin_shuffle_keys(bin_seeds: Tensor, epoch: int, slots: int) -> Tensor:
    """Shuffle keys ``(m, slots)`` int64: a hash of (bin seed, epoch, slot).

    A counter-based stream: slot ``s`` of bin ``b`` gets the same key whatever the other
    bins hold and however wide the padded tensor is, so a bin's minibatch order depends
    on its own seed and its own records only (a shared stream would couple the bins)."""
    counter = torch.arange(slots, dtype=torch.int64, device=bin_seeds.device) + (int(epoch) << 32)
    return _splitmix64(_splitmix64(bin_seeds[:, None]) ^ counter[None, :])


def fit_glvq_bins(
    x: Tensor,
    y: Tensor,
    bins: Tensor,
    num_bins: int,
    prototype_labels: Tensor,
    *,
    epochs: int = 30,
    batch_size: int = 64,
    lr: float = 0.01,
    jitter: float = 0.05,
    generator: torch.Generator | None = None,
    bin_seeds: Tensor | None = None,
) -> Tensor:
    """Vanilla GLVQ (identity transfer, Adam) on every bin, all bins at once, each bin
    exactly as if it were trained alone.

    Bin ``b`` with ``L_b`` records takes ``ceil(L_b / batch_size)`` Adam steps per epoch on
    its own minibatches (order from ``bin_shuffle_keys``); a bin whose records are
    used up in a slice takes no step, and its Adam moments and step count stay as they
    are (masked updates, per-bin bias correction). Nothing of bin ``b`` depends on
    another bin's records: removing a record changes its own bin only, bit for bit,
    which is what the subsample-and-aggregate sensitivity needs.

    Parameters
    ----------
    x : Tensor, shape (n, d); y : Tensor, shape (n,), class indices
    bins : Tensor, shape (n,), bin labels in ``0..num_bins-1``
    prototype_labels : Tensor, shape (W,)
    bin_seeds : Tensor, shape (num_bins,), int64, optional
        Per-bin shuffle seeds (drawn from ``generator`` when omitted).

    Returns
    -------
    Tensor, shape (num_bins, W, d): the trained prototypes of every bin (not private).
    """
    if x.dim() != 2 or y.shape != (x.shape[0],) or bins.shape != (x.shape[0],):
        raise ValueError(
            f"expected x (n, d), y (n,), bins (n,), got {tuple(x.shape)}, {tuple(y.shape)}, {tuple(bins.shape)}"
        )
    if bins.numel() and (int(bins.min()) < 0 or int(bins.max()) >= num_bins):
        raise ValueError(f"bins must lie in 0..{num_bins - 1}")
    if epochs < 0 or batch_size < 1 or not lr > 0:
        raise ValueError("need epochs >= 0, batch_size >= 1 and lr > 0")
    prototype_labels = prototype_labels.to(x.device)
    if x.shape[0] == 0:
        # No record (the neighbour of a one-record data set): every bin is empty and its
        # padding points at row 0, which must exist (masked out, it is never read as data).
        x, y = x.new_zeros(1, x.shape[1]), y.new_zeros(1)
    index, mask = _padded_bins(bins.to(x.device), num_bins)
    width = math.ceil(index.shape[1] / batch_size) * batch_size  # every slice exactly batch_size wide
    index = torch.nn.functional.pad(index, (0, width - index.shape[1]))
    mask = torch.nn.functional.pad(mask, (0, width - mask.shape[1]))
    prototypes = _bin_class_means(x, y, index, mask, prototype_labels, jitter, generator)
    if bin_seeds is None:
        gen_device = generator.device if generator is not None else torch.device("cpu")
        bin_seeds = torch.randint(
            -(2**63), 2**63 - 1, (num_bins,), generator=generator, dtype=torch.int64, device=gen_device
        )
    bin_seeds = bin_seeds.to(x.device)
    if bin_seeds.shape != (num_bins,):
        raise ValueError(f"bin_seeds must have shape ({num_bins},), got {tuple(bin_seeds.shape)}")
    adam = _MaskedAdam(prototypes, lr)
    for epoch in range(epochs):
        keys = torch.where(
            mask, bin_shuffle_keys(bin_seeds, epoch, width), torch.full_like(index, torch.iinfo(torch.int64).max)
        )
        perm = torch.argsort(keys, dim=1, stable=True)  # padding slots last
        order, valid = index.gather(1, perm), mask.gather(1, perm)
        for start in range(0, width, batch_size):
            idx, ok = order[:, start : start + batch_size], valid[:, start : start + batch_size]
            active = ok.any(1)  # (m,): bins with records left in this slice
            if not bool(active.any()):
                break
            adam.step(_bin_slice_gradient(adam.params, x[idx], y[idx], ok, prototype_labels), active)
    return adam.params.detach()


def _bin_slice_gradient(prototypes: Tensor, xb: Tensor, yb: Tensor, ok: Tensor, prototype_labels: Tensor) -> Tensor:
    """Gradient ``(m, W, d)`` of every bin's mean GLVQ cost over its real records of
    one slice (``xb (m, b, d)``, ``yb (m, b)``, ``ok (m, b)``)."""
    params = prototypes.detach().requires_grad_(True)
    dist = (
        xb.pow(2).sum(-1, keepdim=True) - 2.0 * xb @ params.transpose(1, 2) + params.pow(2).sum(-1)[:, None, :]
    ).clamp_min(0)  # (m, b, W)
    cost = glvq_loss(dist.reshape(-1, dist.shape[-1]), yb.reshape(-1), prototype_labels, reduction="none").reshape(
        ok.shape
    )
    per_bin = (cost * ok).sum(1) / ok.sum(1).clamp_min(1)
    (grad,) = torch.autograd.grad(per_bin.sum(), params)
    return grad


class _MaskedAdam:
    """Adam (Kingma & Ba 2015, torch's defaults) on ``(m, ...)`` parameters, one
    independent optimizer per leading index: a step updates the moments, the step count
    and the parameters of the ``active`` rows only."""

    def __init__(self, params: Tensor, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.params = params.detach().clone()
        self.lr, self.betas, self.eps = lr, betas, eps
        self.m1 = torch.zeros_like(self.params)
        self.m2 = torch.zeros_like(self.params)
        self.t = torch.zeros(self.params.shape[0], dtype=torch.int64, device=self.params.device)

    @torch.no_grad()
    def step(self, grad: Tensor, active: Tensor) -> None:
        b1, b2 = self.betas
        rows = active.view(-1, *([1] * (self.params.dim() - 1)))
        self.t += active.long()
        self.m1 = torch.where(rows, b1 * self.m1 + (1 - b1) * grad, self.m1)
        self.m2 = torch.where(rows, b2 * self.m2 + (1 - b2) * grad * grad, self.m2)
        t = self.t.clamp_min(1).to(self.params.dtype).view_as(rows)
        bias1, bias2 = 1 - b1**t, 1 - b2**t
        update = self.lr * (self.m1 / bias1) / ((self.m2 / bias2).sqrt() + self.eps)
        self.params = torch.where(rows, self.params - update, self.params)


def match_to_reference(bin_prototypes: Tensor, prototype_labels: Tensor, reference: Tensor) -> Tensor:
    """Reorder every bin's prototypes within each class by the minimum-cost assignment
    (squared Euclidean) to ``reference (W, d)``. The reference must not depend on the
    private data (a public guess, or a DP release): then each bin's order depends on its
    own data only and the SAA sensitivity holds.

    Parameters
    ----------
    bin_prototypes : Tensor, shape (m, W, d)
    prototype_labels : Tensor, shape (W,)

    Returns
    -------
    Tensor, shape (m, W, d)
    """
    from scipy.optimize import linear_sum_assignment

    if reference.shape != bin_prototypes.shape[1:]:
        raise ValueError(f"reference must have shape {tuple(bin_prototypes.shape[1:])}, got {tuple(reference.shape)}")
    out = bin_prototypes.clone()
    labels = prototype_labels.cpu()
    cost_all = torch.cdist(bin_prototypes.double(), reference.double()[None].expand(len(bin_prototypes), -1, -1)).pow(2)
    for c in torch.unique(labels):
        slots = torch.nonzero(labels == c).squeeze(1)
        if len(slots) == 1:
            continue
        for b in range(len(bin_prototypes)):
            cost = cost_all[b][slots][:, slots].cpu().numpy()  # bin prototype i -> reference slot j
            rows, cols = linear_sum_assignment(cost)
            out[b, slots[torch.as_tensor(cols)]] = bin_prototypes[b, slots[torch.as_tensor(rows)]]
    return out


def bin_prototype_labels(
    x: Tensor,
    y: Tensor,
    num_classes: int,
    num_bins: int,
    prototypes_per_class: int | Sequence[int],
    reference: Tensor | None,
) -> Tensor:
    """Check the inputs of a bin-based scheme; the prototype labels ``(W,)``
    (``prototypes_per_class``: one count for all classes or one per class)."""
    if x.dim() != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"expected x (n, d) and y (n,), got {tuple(x.shape)} and {tuple(y.shape)}")
    if num_bins < 1:
        raise ValueError(f"num_bins must be >= 1, got {num_bins}")
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        raise ValueError(f"y must hold class indices in 0..{num_classes - 1}")
    labels = make_prototype_labels(num_classes, prototypes_per_class).to(x.device)
    if len(torch.unique(labels)) < len(labels) and reference is None:
        raise ValueError(
            "several prototypes per class need a public `reference` (W, d) to match the bins' "
            "prototypes to; one computed from the private bins would void the sensitivity bound"
        )
    return labels


def train_bin_models(
    x: Tensor,
    y: Tensor,
    labels: Tensor,
    num_bins: int,
    *,
    reference: Tensor | None = None,
    epochs: int = 30,
    batch_size: int = 64,
    lr: float = 0.01,
    low: float = -1.0,
    high: float = 1.0,
    radius: float | None = None,
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
) -> tuple[Tensor, Tensor]:
    """The non-private half of the bin-based schemes: i.i.d. bin labels ``(n,)``, GLVQ on
    every bin, matching to ``reference`` (several prototypes per class), projection into
    the domain (``project_to_domain``). Returns the bin models ``(m, W, d)`` (float64)
    and the bins."""
    bins = assign_bins(x.shape[0], num_bins, generator=generator, secure_mode=secure_mode, device=x.device)
    trained = fit_glvq_bins(
        x.to(torch.float64),
        y.long(),
        bins,
        num_bins,
        labels,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        generator=generator,
    )
    if reference is not None and len(torch.unique(labels)) < len(labels):
        trained = match_to_reference(trained, labels, reference.to(trained))
    return project_to_domain(trained, low, high, radius), bins


def aggregate_bin_models(
    bin_models: Tensor,
    epsilon: float,
    delta: float,
    *,
    low: float = -1.0,
    high: float = 1.0,
    radius: float | None = None,
    project_release: bool = True,
    ledger: PrivacyLedger | None = LEDGER_REQUIRED,
    name: str = "saa",
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
) -> tuple[Tensor, float]:
    """The private half of subsample-and-aggregate: project every bin's model into the
    domain, sum over bins, add Gaussian noise for the sensitivity of
    ``saa_sensitivity`` (``gaussian_mechanism``:
    discrete on a public grid by default), divide by ``m``; with ``project_release`` (free
    post-processing) project the noisy mean into the domain too, which only brings it
    closer to every point of the domain, the noise-free mean included.

    Parameters
    ----------
    bin_models : Tensor, shape (m, W, d)
        One model per disjoint bin, prototypes in a per-bin order that depends on that
        bin's data only (see ``match_to_reference``).

    Returns
    -------
    (Tensor (W, d) float64, float): the released mean and its noise std per coordinate.
    """
    ledger = require_ledger(ledger, "aggregate_bin_models")
    if bin_models.dim() != 3 or bin_models.shape[0] < 1:
        raise ValueError(f"expected bin models of shape (m, W, d) with m >= 1, got {tuple(bin_models.shape)}")
    m, num_prototypes, d = bin_models.shape
    sensitivity = saa_sensitivity(num_prototypes, d, low, high, radius)
    projected = project_to_domain(bin_models.to(torch.float64), low, high, radius)
    total = gaussian_mechanism(
        projected.sum(0),
        sensitivity,
        epsilon,
        delta,
        ledger=ledger,
        name=name,
        generator=generator,
        secure_mode=secure_mode,
    )
    mean = project_to_domain(total / m, low, high, radius) if project_release else total / m
    return mean, plan_gaussian(epsilon, delta, sensitivity, projected[0].numel()).sigma / m
