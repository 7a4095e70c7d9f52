"""The bin-based private schemes as one recipe: subsample-and-aggregate and the centre of attention.

Both train vanilla GLVQ on ``num_bins`` disjoint random bins of the private data
(``dp_proto.lvq.private.saa.train_bin_models``) and release one private aggregate of the
bins' models: their noisy mean (``aggregate_bin_models``; Brinkrolf, Göpfert & Hammer
2019, "SAA") or their centre of attention (``dp_proto.lvq.private.coa.coa_bin_models``;
Nissim, Raskhodnikova & Smith 2007, "COA"). ``SubsampleAggregate`` holds the public
settings of such a run; ``SubsampleAggregateGLVQ`` builds one from its parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from dp_proto.lvq.init import prototype_counts
from dp_proto.lvq.layers import GLVQLayer
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private.coa import COAResult, coa_bin_models
from dp_proto.lvq.private.saa import aggregate_bin_models, bin_prototype_labels, saa_sensitivity, train_bin_models
from dp_proto.privacy.calibration import check_delta, check_epsilon
from dp_proto.privacy.events import ApproxEvent, PrivacyEvent
from dp_proto.privacy.ledger import PrivacyLedger
from dp_proto.privacy.mechanisms import plan_gaussian
from dp_proto.release import register_recipe

__all__ = ["AGGREGATIONS", "BinTraining", "SubsampleAggregate", "BinRelease"]

#: ``"mean"``: subsample-and-aggregate; ``"centre_of_attention"``: the centre of attention.
AGGREGATIONS = ("mean", "centre_of_attention")


def _check_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


@register_recipe("dp_proto.BinTraining")
@dataclass(frozen=True)
class BinTraining:
    """The non-private half: GLVQ with Adam on every bin, all bins as one batched
    computation (``fit_glvq_bins``).

    Attributes
    ----------
    epochs : int >= 1, default 30
    batch_size : int >= 1, default 64
    lr : float > 0, default 0.01
        Adam's learning rate.
    """

    epochs: int = 30
    batch_size: int = 64
    lr: float = 0.01

    def __post_init__(self) -> None:
        object.__setattr__(self, "epochs", _check_count("epochs", self.epochs))
        object.__setattr__(self, "batch_size", _check_count("batch_size", self.batch_size))
        if isinstance(self.lr, bool) or not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr!r}")


class BinRelease(NamedTuple):
    """What ``SubsampleAggregate.run`` released: the prototypes ``(W, d)`` (float64, in the
    domain's units), the noise std per coordinate of the mean (public: a function of
    epsilon, delta, ``W``, ``d``, the domain and ``m``; None for the centre of attention,
    whose noise scale depends on the bins' models without noise), the centre of
    attention's raw result (None for the mean), the number of bins that held no record
    (curator-only: it depends on the data without noise; never publish it) and the ledger."""

    prototypes: Tensor
    noise_std: float | None
    coa: COAResult | None
    empty_bins: int
    ledger: PrivacyLedger


@dataclass(frozen=True)
class SubsampleAggregate:
    """A bin-based private training run: ``(epsilon, delta)``-DP under add/remove one record.

    Attributes
    ----------
    epsilon : float > 0; delta : float in (0, 1)
        The budget of the single release.
    num_bins : int >= 1, default 50
        ``m`` (public). Each bin holds about ``n / m`` records.
    aggregation : {"mean", "centre_of_attention"}, default "mean"
    training : BinTraining
        GLVQ on every bin.
    domain : (float, float), default (-1.0, 1.0)
        The public box ``[low, high]^d`` every bin prototype is clipped into.
    radius : float or None
        Also project every bin prototype onto the l2 ball of this radius around the
        box centre (public); it can cut the noise of the mean by up to ``sqrt(d)`` times.
    project_release : bool, default True
        Project the released prototypes into the domain (post-processing).
    secure_mode : bool, default False
        Bin labels, shuffles and noise from ``os.urandom`` directly.
    """

    epsilon: float
    delta: float
    num_bins: int = 50
    aggregation: str = "mean"
    training: BinTraining = field(default_factory=BinTraining)
    domain: tuple[float, float] = (-1.0, 1.0)
    radius: float | None = None
    project_release: bool = True
    secure_mode: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        object.__setattr__(self, "delta", check_delta(self.delta, allow_zero=False))
        object.__setattr__(self, "num_bins", _check_count("num_bins", self.num_bins))
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {self.aggregation!r}")
        if not isinstance(self.training, BinTraining):
            raise TypeError(f"training must be BinTraining, got {type(self.training).__name__}")
        low, high = (float(v) for v in self.domain)
        if not high > low:
            raise ValueError(f"domain must be (low, high) with high > low, got {self.domain!r}")
        object.__setattr__(self, "domain", (low, high))
        if self.radius is not None and not self.radius > 0:
            raise ValueError(f"radius must be > 0 or None, got {self.radius!r}")

    @property
    def name(self) -> str:
        """The release's name in the ledger: ``"saa"`` or ``"coa"``."""
        return "saa" if self.aggregation == "mean" else "coa"

    def planned_events(self, num_prototypes: int, n_features: int) -> tuple[PrivacyEvent, ...]:
        """The one release ``run`` makes for ``num_prototypes`` prototypes on ``n_features``
        features, from public settings only: the discrete Gaussian release of the bins'
        mean, or the centre of attention's ``(epsilon, delta)`` release."""
        if self.aggregation == "centre_of_attention":
            return (ApproxEvent(self.epsilon, self.delta, name=self.name),)
        low, high = self.domain
        sensitivity = saa_sensitivity(num_prototypes, n_features, low, high, self.radius)
        event = plan_gaussian(self.epsilon, self.delta, sensitivity, num_prototypes * n_features, name=self.name).event
        return () if event is None else (event,)

    def run(
        self,
        model: PrototypeModel,
        x: Tensor,
        y: Tensor,
        ledger: PrivacyLedger | None = None,
        *,
        reference: Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> BinRelease:
        """Release private GLVQ prototypes of ``x (n, d)``, ``y (n,)`` (class indices,
        records in the domain) into ``model``'s layer.

        Parameters
        ----------
        model : PrototypeModel
            A GLVQ model whose labels are ``make_prototype_labels(c, counts)`` (the
            classes in order); its prototypes are overwritten with the release.
        ledger : PrivacyLedger, optional
            Where the release is recorded; default a ledger with budget
            ``(epsilon, delta)``. A mean whose release the budget refuses is refused
            before any bin is trained.
        reference : Tensor (W, d), optional
            Public prototypes to which each bin's prototypes of a class are matched
            (required with several prototypes per class).
        generator : torch.Generator, optional
            Reproducible bins, shuffles and noise (warns ``PrivacyLeakWarning``);
            default fresh entropy.
        """
        if type(model.layer) is not GLVQLayer:
            raise ValueError(f"the bin-based schemes train GLVQ; got a {type(model.layer).__name__}")
        counts = prototype_counts(model.prototype_labels)
        ledger = (
            PrivacyLedger(budget=(self.epsilon, self.delta), default_delta=self.delta) if ledger is None else ledger
        )
        labels = bin_prototype_labels(x, y, model.num_classes, self.num_bins, counts, reference)
        if self.aggregation == "mean":
            ledger.check(*self.planned_events(len(labels), x.shape[1]))  # before any training or noise
        low, high = self.domain
        models, bins = train_bin_models(
            x,
            y,
            labels,
            self.num_bins,
            reference=reference,
            epochs=self.training.epochs,
            batch_size=self.training.batch_size,
            lr=self.training.lr,
            low=low,
            high=high,
            radius=self.radius,
            generator=generator,
            secure_mode=self.secure_mode,
        )
        aggregate = coa_bin_models if self.aggregation == "centre_of_attention" else aggregate_bin_models
        prototypes, extra = aggregate(
            models,
            self.epsilon,
            self.delta,
            low=low,
            high=high,
            radius=self.radius,
            project_release=self.project_release,
            ledger=ledger,
            name=self.name,
            generator=generator,
            secure_mode=self.secure_mode,
        )
        noise_std = extra if isinstance(extra, float) else None
        coa = extra if isinstance(extra, COAResult) else None
        with torch.no_grad():
            model.layer.prototypes.copy_(prototypes.to(model.layer.prototypes))
        empty = int((torch.bincount(bins, minlength=self.num_bins) == 0).sum())
        return BinRelease(prototypes, noise_std, coa, empty, ledger)
