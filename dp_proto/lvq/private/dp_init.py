"""Differentially private class-mean initialisation of prototypes (the DP-LVQ scheme).

Brinkrolf (2023), Sec. 3.4 (A), step 1 (also Brinkrolf, Göpfert & Hammer 2019), with the
corrections its guarantee needs: a public box that every record is clipped into, noisy
counts clamped at 1 and means clipped into the domain:

* data in the public domain ``[-1, 1]^d``: records outside are clipped and counted;
* class counts ``N_k``: a histogram, l1 sensitivity 1 under add/remove one record,
  integer (discrete Laplace) noise of scale ``1 / epsilon_counts``;
* class sums ``S_k``: one record changes one class sum by ``||x||_1 <= d``, so the l1
  sensitivity of all sums together is ``d``; Laplace noise of scale ``d / epsilon_sums``
  per coordinate, discrete on a public grid (float-safe, see ``laplace_mechanism``);
* ``w_k = S~_k / max(N~_k, 1)``, clipped into the domain (post-processing, free).

``mechanism="gaussian"`` releases the class sums with the Gaussian mechanism instead: one
record changes one class sum by ``||x||_2 <= sqrt(d)``, so the l2 sensitivity is
``sqrt(d)`` and the noise per coordinate grows with ``sqrt(d)``, not ``d``. With ``d`` in
the thousands (e.g. the 3969 scattering features of an MNIST image) the Laplace means are
pure noise (scale ``d / epsilon`` per sum), the Gaussian ones are class means one can
look at. The sums are then ``(epsilon_sums, delta)``-DP (discrete Gaussian on a public
grid, float-safe); the ledger composes its exact privacy loss with the rest of the run.

By basic composition the release is ``(epsilon_counts + epsilon_sums)``-DP; the ledger
composes it with everything else of the run. Several prototypes per class are copies
of the noisy class mean plus *data-independent* Gaussian jitter (free).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from dp_proto.lvq.init import make_prototype_labels
from dp_proto.privacy.calibration import check_epsilon
from dp_proto.privacy.clipping import clip_box
from dp_proto.privacy.domain import warn_clipped
from dp_proto.privacy.events import DiscreteLaplaceEvent, PrivacyEvent, PureEvent
from dp_proto.privacy.ledger import PrivacyLedger
from dp_proto.privacy.mechanisms import (
    LEDGER_REQUIRED,
    gaussian_mechanism,
    laplace_mechanism,
    noisy_histogram,
    plan_gaussian,
    require_ledger,
)
from dp_proto.privacy.noise import gaussian_noise

__all__ = ["DPInitResult", "INIT_MECHANISMS", "dp_class_mean_prototypes", "dp_init_events"]

#: The noise of the class sums: Brinkrolf's (2023) Laplace on the l1 sensitivity ``d``, or
#: Gaussian on the l2 sensitivity ``sqrt(d)`` (for many features).
INIT_MECHANISMS = ("laplace", "gaussian")


def _check_mechanism(mechanism: str, delta: float | None) -> None:
    if mechanism not in INIT_MECHANISMS:
        raise ValueError(f"mechanism must be one of {INIT_MECHANISMS}, got {mechanism!r}")
    if mechanism == "gaussian" and delta is None:
        raise ValueError("mechanism='gaussian' needs the delta of the class sums' release")


class DPInitResult(NamedTuple):
    """Prototypes ``(W, d)``, their labels ``(W,)``, the noisy class counts ``(c,)``
    (released) and the number of records that were clipped into the domain
    (curator-only: not covered by the guarantee)."""

    prototypes: Tensor
    prototype_labels: Tensor
    noisy_counts: Tensor
    num_clipped: int


def dp_init_events(
    n_features: int,
    epsilon: float,
    *,
    count_fraction: float = 0.5,
    name: str = "dp_init",
    mechanism: str = "laplace",
    delta: float | None = None,
) -> tuple[PrivacyEvent, PrivacyEvent]:
    """The two events ``dp_class_mean_prototypes`` records, from public settings alone:
    the noisy class counts (discrete Laplace, sensitivity 1, ``epsilon * count_fraction``)
    and the noisy class sums (the rest: pure with l1 sensitivity ``n_features``, or with
    ``mechanism="gaussian"`` a discrete Gaussian of l2 sensitivity ``sqrt(n_features)``
    calibrated to ``(epsilon_sums, delta)``), so a caller can check a whole run against a
    budget before the data are read."""
    _check_mechanism(mechanism, delta)
    counts_event = DiscreteLaplaceEvent(
        epsilon * count_fraction, grid_steps=1, name=f"{name}/class_counts", sensitivity=1.0
    )  # what noisy_histogram records (integer noise)
    eps_sums, sums_name = epsilon * (1 - count_fraction), f"{name}/class_sums"
    sums_event: PrivacyEvent | None
    if mechanism == "gaussian":
        sums_event = plan_gaussian(eps_sums, float(delta or 0.0), math.sqrt(n_features), 1, name=sums_name).event
    else:
        sums_event = PureEvent(eps_sums, name=sums_name, sensitivity=float(n_features))
    if sums_event is None:  # no feature: nothing to release
        raise ValueError(f"n_features must be >= 1, got {n_features}")
    return counts_event, sums_event


def dp_class_mean_prototypes(
    x: Tensor,
    y: Tensor,
    num_classes: int,
    epsilon: float,
    *,
    ledger: PrivacyLedger | None = LEDGER_REQUIRED,
    count_fraction: float = 0.5,
    prototypes_per_class: int = 1,
    jitter: float = 0.05,
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
    name: str = "dp_init",
    mechanism: str = "laplace",
    delta: float | None = None,
) -> DPInitResult:
    """Noisy class means as initial prototypes: ``epsilon``-DP under add/remove one record
    (``(epsilon, delta)``-DP with ``mechanism="gaussian"``).

    Parameters
    ----------
    x : Tensor, shape (n, d)
        Records, expected in ``[-1, 1]^d`` (use ``PublicBoundsScaler``); records
        outside are clipped, and their count goes to the curator-only log and
        ``num_clipped`` (no warning: its presence would depend on single records).
    y : Tensor, shape (n,)
        Class indices in ``0..num_classes-1`` (``num_classes`` is public).
    epsilon : float
        Total budget of the initialisation.
    count_fraction : float
        Share of ``epsilon`` spent on the counts (Brinkrolf (2023) splits it equally).
    prototypes_per_class : int
    jitter : float
        Standard deviation of the data-independent jitter added to copies when a class
        has several prototypes.
    mechanism : {"laplace", "gaussian"}, default "laplace"
        The noise of the class sums (see the module docstring): Laplace on the l1
        sensitivity ``d`` (Brinkrolf 2023), or Gaussian on the l2 sensitivity ``sqrt(d)``.
    delta : float, optional
        The delta of the Gaussian class sums (required with ``mechanism="gaussian"``).

    Returns
    -------
    DPInitResult
    """
    ledger = require_ledger(ledger, "dp_class_mean_prototypes")
    epsilon = check_epsilon(epsilon)
    if not 0 < count_fraction < 1:
        raise ValueError(f"count_fraction must lie in (0, 1), got {count_fraction!r}")
    if x.dim() != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"expected x (n, d) and y (n,), got {tuple(x.shape)} and {tuple(y.shape)}")
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        raise ValueError(f"y must hold class indices in 0..{num_classes - 1}")
    d = x.shape[1]
    counts_event, sums_event = dp_init_events(
        d, epsilon, count_fraction=count_fraction, name=name, mechanism=mechanism, delta=delta
    )
    eps_counts, eps_sums = epsilon * count_fraction, epsilon * (1 - count_fraction)
    if ledger is not None:
        ledger.check(counts_event, sums_event)  # refuse both parts before releasing either

    clipped = clip_box(x.to(torch.float64))
    warn_clipped(clipped.num_clipped, x.shape[0], private=True)  # a count of private records
    one_hot = torch.zeros(x.shape[0], num_classes, dtype=torch.float64, device=x.device)
    one_hot[torch.arange(x.shape[0], device=x.device), y.long()] = 1.0
    sums = one_hot.T @ clipped.values  # (c, d)

    noisy_counts = noisy_histogram(
        y.long(),
        num_classes,
        eps_counts,
        ledger=ledger,
        name=counts_event.name,
        generator=generator,
        secure_mode=secure_mode,
    )
    if mechanism == "gaussian":  # ||x||_2 <= sqrt(d) in the box: l2 sensitivity sqrt(d)
        noisy_sums = gaussian_mechanism(
            sums,
            math.sqrt(d),
            eps_sums,
            float(delta or 0.0),
            ledger=ledger,
            name=sums_event.name,
            generator=generator,
            secure_mode=secure_mode,
        )
    else:
        noisy_sums = laplace_mechanism(
            sums, float(d), eps_sums, ledger=ledger, name=sums_event.name, generator=generator, secure_mode=secure_mode
        )
    means = clip_box(noisy_sums / noisy_counts.clamp_min(1.0)[:, None]).values  # post-processing

    labels = make_prototype_labels(num_classes, prototypes_per_class).to(x.device)
    prototypes = means[labels].clone()
    if prototypes_per_class > 1 and jitter > 0:
        noise = gaussian_noise(prototypes.shape, jitter, generator=generator, secure_mode=secure_mode, device=x.device)
        prototypes = clip_box(prototypes + noise).values
    dtype = x.dtype if x.is_floating_point() else torch.float64
    return DPInitResult(prototypes.to(dtype), labels, noisy_counts, clipped.num_clipped)
