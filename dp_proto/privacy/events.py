"""Privacy events: one immutable class per mechanism.

Each event describes one release (or ``count`` identical releases) and knows how to
account for itself: its privacy loss distribution (``PrivacyEvent.to_pld``, for the
PLD accountant), its dp-accounting ``DpEvent`` (``PrivacyEvent.to_dp_event``, for the
Renyi-DP accountant) and, for pure-DP releases, its epsilon. The ledger composes events
through these methods and a few capability flags (``has_pld``, ``has_renyi_curve``,
``is_private``), never by looking at a kind string.

=======================================  ===================================================
event                                    release
=======================================  ===================================================
``LaplaceEvent``                    ``Lap(b)`` on a query one record moves in a single
                                         coordinate; ``noise_multiplier = b / sensitivity``
``DiscreteLaplaceEvent``            integer noise ``P(k) ~ exp(-|k| epsilon / s)`` on a
                                         public grid, ``s = grid_steps``
``GaussianEvent``                   ``N(0, sigma^2 I)``, ``noise_multiplier = sigma / Delta_2``
``DiscreteGaussianEvent``           discrete Gaussian noise on a public grid
``PureEvent``                       any epsilon-DP release (report-noisy-max, l1 Laplace)
``ApproxEvent``                     any (epsilon, delta)-DP release known by its parameters
``SubsampledGaussianEvent``         one DP-SGD step: Poisson sampling, then Gaussian noise
``NonPrivateEvent``                 a release without noise (epsilon = inf)
``RepeatAndSelectEvent``            the best of a random number of runs of a mechanism
=======================================  ===================================================

Neighbouring relation: add/remove one record. ``kind`` (a class constant) names the
mechanism in summaries and in saved ledgers (``PrivacyEvent.to_dict`` /
``PrivacyEvent.from_dict``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from abc import ABCMeta, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from dp_accounting import dp_event as dpe
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import privacy_loss_distribution as pld

from dp_proto._validation import check_positive
from dp_proto.privacy.calibration import check_delta, check_epsilon, check_sampling_rate

__all__ = [
    "PrivacyEvent",
    "LaplaceEvent",
    "DiscreteLaplaceEvent",
    "GaussianEvent",
    "DiscreteGaussianEvent",
    "PureEvent",
    "ApproxEvent",
    "SubsampledGaussianEvent",
    "NonPrivateEvent",
    "RepeatAndSelectEvent",
    "EventKind",
    "dp_sgd_event",
    "MAX_EVENT_EPSILON",
    "PLD_DISCRETISATION",
]

EventKind = Literal[
    "laplace",
    "discrete_laplace",
    "gaussian",
    "discrete_gaussian",
    "pure",
    "approx",
    "subsampled_gaussian",
    "non_private",
    "repeat_and_select",
]
#: Value discretisation of the privacy loss distributions (pessimistic: coarser only
#: over-estimates epsilon).
PLD_DISCRETISATION = 1e-4
#: Gaussian releases with a smaller noise multiplier (an epsilon of several per release)
#: compose by their Renyi-DP curve: their PLD spans about ``1 / sigma^2`` in privacy loss,
#: ``1 / (sigma^2 PLD_DISCRETISATION)`` points, which exhausts memory as sigma shrinks.
PLD_NOISE_MULTIPLIER_MIN = 0.4
#: Releases of a larger epsilon compose with the rest by basic composition: a PLD spans
#: about ``epsilon / PLD_DISCRETISATION`` points (seconds and gigabytes as epsilon grows;
#: dp-accounting's ``exp(epsilon)`` overflows above about 709), and such a release
#: protects little, so adding its epsilon loses nothing that matters.
MAX_EVENT_EPSILON = 50.0

_REGISTRY: dict[str, type[PrivacyEvent]] = {}
# Fields of the single-class event of versions before typed events, absent from some kinds.
_LEGACY_FIELDS = ("noise_multiplier", "epsilon", "sampling_rate", "delta", "grid_steps")


@dataclass(frozen=True, kw_only=True)
class PrivacyEvent(metaclass=ABCMeta):
    """One release, or ``count`` identical releases, of one mechanism (abstract).

    Every event is an immutable dataclass; the subclasses add the parameters of their
    mechanism, map themselves to a dp-accounting event and privacy loss distribution,
    and round-trip through ``to_dict`` / ``from_dict`` (ledger checkpoints).

    Parameters
    ----------
    count : int, default 1
        Number of identical releases (e.g. DP-SGD steps); keyword only.
    name : str, default ""
        What was released, e.g. ``"dp_init/class_counts"``; keyword only.
    sensitivity : float or None, default None
        For the record: the sensitivity the mechanism was calibrated to; keyword only.

    Attributes
    ----------
    kind : str
        The mechanism's name in summaries and saved ledgers (a class attribute).
    has_pld : bool
        The event has an exact (pessimistic) privacy loss distribution.
    has_renyi_curve : bool
        The event has a Renyi-DP curve (the RDP accountant can compose it).
    is_private : bool
        False only for releases without noise.
    """

    kind: ClassVar[str]
    #: The event has an exact (pessimistic) privacy loss distribution.
    has_pld: ClassVar[bool] = True
    #: The event has a Renyi-DP curve (the RDP accountant can compose it).
    has_renyi_curve: ClassVar[bool] = True
    #: False only for releases without noise.
    is_private: ClassVar[bool] = True

    count: int = 1
    name: str = ""
    sensitivity: float | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            _REGISTRY[cls.kind] = cls

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"count must be a positive int, got {self.count!r}")

    def _set(self, field_name: str, value: Any) -> None:
        """Store a checked parameter as a Python float (events are frozen, hashable values)."""
        object.__setattr__(self, field_name, value)

    # -- what each mechanism defines ---------------------------------------------------
    @abstractmethod
    def _one_pld(self, discretization: float) -> pld.PrivacyLossDistribution:
        """PLD of a single release."""

    @abstractmethod
    def _one_dp_event(self) -> dpe.DpEvent:
        """dp-accounting event of a single release."""

    def _parameters(self) -> list[str]:
        """The mechanism's parameters, for ``describe``."""
        return []

    @property
    def pure_epsilon(self) -> float | None:
        """Epsilon of one release if the event is pure DP, else None."""
        return None

    @property
    def basic_composition_only(self) -> bool:
        """True for releases beyond the PLD's numeric range (epsilon above
        ``MAX_EVENT_EPSILON``); the ledger composes those by basic composition."""
        return False

    @property
    def delta_per_release(self) -> float:
        """The delta of one release as an (epsilon, delta) mechanism (0 for pure DP)."""
        return 0.0

    # -- shared behaviour ---------------------------------------------------------------
    def with_count(self, count: int) -> PrivacyEvent:
        return dataclasses.replace(self, count=count)

    def same_mechanism(self, other: PrivacyEvent) -> bool:
        """Equal in everything but ``count`` (the ledger merges such repeats)."""
        return type(self) is type(other) and self.with_count(other.count) == other

    def to_pld(self, discretization: float = PLD_DISCRETISATION) -> pld.PrivacyLossDistribution:
        """Privacy loss distribution of all ``count`` releases (pessimistic)."""
        return _event_pld(self, discretization)

    def to_dp_event(self) -> dpe.DpEvent:
        """The dp-accounting event of all ``count`` releases (for the RDP accountant)."""
        one = self._one_dp_event()
        return dpe.SelfComposedDpEvent(one, self.count) if self.count > 1 else one

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": ..., <the mechanism's fields>, "count", "name", "sensitivity"}``."""
        own = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("count", "name", "sensitivity")
        }
        return {"kind": self.kind, **own, "count": self.count, "name": self.name, "sensitivity": self.sensitivity}

    @staticmethod
    def from_dict(values: dict[str, Any]) -> PrivacyEvent:
        """The event ``to_dict`` wrote; also reads the single-class events of earlier
        versions (their unused fields must be None; their ``meta`` is dropped)."""
        values = dict(values)
        kind = values.pop("kind", None)
        cls = _REGISTRY.get(kind)
        if cls is None:
            raise ValueError(f"unknown event kind {kind!r}; expected one of {tuple(_REGISTRY)}")
        values.pop("meta", None)
        names = {f.name for f in dataclasses.fields(cls)}
        extra = {k: v for k, v in values.items() if k not in names}
        if any(k not in _LEGACY_FIELDS or v is not None for k, v in extra.items()):
            raise ValueError(f"a {kind} event has no field(s) {sorted(extra)}")
        missing = [
            f.name
            for f in dataclasses.fields(cls)
            if f.name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            raise ValueError(f"a {kind} event needs {', '.join(missing)}")
        return cls(**{k: v for k, v in values.items() if k in names})

    def describe(self) -> str:
        parts = [f"{self.name or self.kind}: {self.kind}", *self._parameters()]
        if self.sensitivity is not None:
            parts.append(f"sensitivity {self.sensitivity:.4g}")
        parts.append(f"x{self.count}")
        return ", ".join(parts)


@functools.lru_cache(maxsize=256)
def _event_pld(event: PrivacyEvent, discretization: float) -> pld.PrivacyLossDistribution:
    """PLD of one event's ``count`` releases. A pure function of an immutable value, so it
    is memoised (compositions of several events are cached per ledger)."""
    one = event._one_pld(discretization)
    return one.self_compose(event.count) if event.count > 1 else one


def _epsilon_dp_pld(epsilon: float, delta: float, discretization: float) -> pld.PrivacyLossDistribution:
    """Worst-case PLD of any (epsilon, delta)-DP mechanism (delta 0: pure)."""
    if epsilon > MAX_EVENT_EPSILON:
        raise ValueError(
            f"no PLD for an event of epsilon {epsilon:g} > {MAX_EVENT_EPSILON:g} (exp overflows); "
            "compose it by basic composition"
        )
    return pld.from_privacy_parameters(
        pld_common.DifferentialPrivacyParameters(epsilon, delta), value_discretization_interval=discretization
    )


def _zcdp_of_pure(epsilon: float) -> dpe.DpEvent:
    return dpe.ZCDpEvent(epsilon**2 / 2)  # epsilon-DP implies (epsilon^2 / 2)-zCDP (Bun & Steinke 2016)


@dataclass(frozen=True)
class _NoiseMultiplierEvent(PrivacyEvent):
    """An additive-noise release described by ``noise_multiplier = scale / sensitivity``."""

    noise_multiplier: float

    def __post_init__(self) -> None:
        super().__post_init__()
        self._set("noise_multiplier", check_positive(f"{self.kind} event noise_multiplier", self.noise_multiplier))

    def _parameters(self) -> list[str]:
        return [f"noise multiplier {self.noise_multiplier:.4g}"]


@dataclass(frozen=True)
class LaplaceEvent(_NoiseMultiplierEvent):
    """Additive ``Lap(b)`` on a query whose change under add/remove of one record moves a
    *single* coordinate by at most the sensitivity (a scalar or a histogram).

    Parameters
    ----------
    noise_multiplier : float
        ``b / sensitivity``; the release is ``1 / noise_multiplier``-DP.
    count : int, default 1
        Number of identical releases (e.g. DP-SGD steps); keyword only.
    name : str, default ""
        What was released, e.g. ``"dp_init/class_counts"``; keyword only.
    sensitivity : float or None, default None
        For the record: the sensitivity the mechanism was calibrated to; keyword only.

    Examples
    --------
    >>> from dp_proto.privacy import LaplaceEvent
    >>> LaplaceEvent(2.0, name="count").pure_epsilon
    0.5
    """

    kind: ClassVar[str] = "laplace"

    @property
    def pure_epsilon(self) -> float:
        return 1.0 / float(self.noise_multiplier)

    def _one_pld(self, discretization: float) -> pld.PrivacyLossDistribution:
        return pld.from_laplace_mechanism(self.noise_multiplier, value_discretization_interval=discretization)

    def _one_dp_event(self) -> dpe.DpEvent:
        return dpe.LaplaceDpEvent(self.noise_multiplier)

    def _parameters(self) -> list[str]:
        return [*super()._parameters(), f"epsilon {self.pure_epsilon:.4g} each"]


@dataclass(frozen=True)
class _GaussianNoiseEvent(_NoiseMultiplierEvent):
    """Gaussian noise: a PLD from ``PLD_NOISE_MULTIPLIER_MIN`` on; below it, the Renyi-DP
    curve (the PLD would span about ``1 / sigma^2`` in privacy loss)."""

    @property
    def has_pld(self) -> bool:  # type: ignore[override]
        return float(self.noise_multiplier) >= PLD_NOISE_MULTIPLIER_MIN


@dataclass(frozen=True)
class GaussianEvent(_GaussianNoiseEvent):
    """Additive ``N(0, sigma^2 I)`` on a query of l2 sensitivity ``Delta_2`` (exact in any
    dimension).

    Parameters
    ----------
    noise_multiplier : float
        ``sigma / Delta_2``.
    count : int, default 1
        Number of identical releases (e.g. DP-SGD steps); keyword only.
    name : str, default ""
        What was released, e.g. ``"dp_init/class_counts"``; keyword only.
    sensitivity : float or None, default None
        For the record: the sensitivity the mechanism was calibrated to; keyword only.
    """

    kind: ClassVar[str] = "gaussian"

    def _one_pld(self, discretization: float) -> pld.PrivacyLossDistribution:
        return pld.from_gaussian_mechanism(self.noise_multiplier, value_discretization_interval=discretization)

    def _one_dp_event(self) -> dpe.DpEvent:
        return dpe.GaussianDpEvent(self.noise_multiplier)


@dataclass(frozen=True)
class DiscreteGaussianEvent(_NoiseMultiplierEvent):
    """Additive i.i.d. discrete Gaussian noise on a query on a public grid,
    ``noise_multiplier = sigma / Delta_2`` with both in grid steps (the rounding slack
    included).

    Accounted by its Renyi-DP curve, at most the continuous Gaussian's,
    ``alpha / (2 noise_multiplier^2)`` (Canonne, Kamath & Steinke 2020:
    ``(Delta^2 / 2 sigma^2)``-zCDP for integer shifts; Renyi divergences of independent
    coordinates add). Its privacy loss distribution is not the Gaussian's, so the PLD
    accountant composes these releases with the others by basic composition over the
    best of a fixed grid of splits of delta.

    Parameters
    ----------
    noise_multiplier : float
        ``sigma / Delta_2``, both in grid steps.
    count : int, default 1
        Number of identical releases (e.g. DP-SGD steps); keyword only.
    name : str, default ""
        What was released, e.g. ``"dp_init/class_counts"``; keyword only.
    sensitivity : float or None, default None
        For the record: the sensitivity the mechanism was calibrated to; keyword only.

    References
    ----------
    Canonne, Kamath & Steinke (2020). The discrete Gaussian for differential privacy.
    *NeurIPS 2020*.
    """

    kind: ClassVar[str] = "discrete_gaussian"
    has_pld: ClassVar[bool] = False

    def _one_pld(self, discretization: float) -> pld.PrivacyLossDistribution:
        raise ValueError(
            "a discrete Gaussian release has no exact privacy loss distribution here; "
            "the ledger accounts it by its Renyi-DP curve"
        )

    def _one_dp_event(self) -> dpe.DpEvent:
        return dpe.GaussianDpEvent(self.noise_multiplier)  # an upper bound (see the class)


@dataclass(frozen=True)
class SubsampledGaussianEvent(_GaussianNoiseEvent):
    """One DP-SGD step: Poisson sampling with ``sampling_rate``, then Gaussian noise on
    the sum of the gradients clipped to ``C``.

    Parameters
    ----------
    noise_multiplier : float
        ``sigma / C``.
    sampling_rate : float
        Poisson sampling rate ``q`` in ``(0, 1]``.
    count : int, default 1
        Number of identical releases (e.g. DP-SGD steps); keyword only.
    name : str, default ""
        What was released, e.g. ``"dp_init/class_counts"``; keyword only.
    sensitivity : float or None, default None
        For the record: the sensitivity the mechanism was calibrated to; keyword only.

    References
    ----------
    Abadi et al. (2016). Deep learning with differential privacy. *ACM CCS 2016*.
    """

    kind: ClassVar[str] = "subsampled_gaussian"
    sampling_rate: float

    def __post_init__(self) -> None:
        super().__post_init__()
        self._set("sampling_rate", check_sampling_rate(self.sampling_rate))

    def _one_pld(self, discretization: float) -> pld.PrivacyLossDistribution:
        return pld.from_gaussian_mechanism(
            self.noise_multiplier, sampling_prob=self.sampling_rate, value_discretization_interval=discretization
        )

    def _one_dp_event(self) -> dpe.DpEvent:
        return dpe.PoissonSampledDpEvent(self.sampling_rate, dpe.GaussianDpEvent(self.noise_multiplier))

    def _parameters(self) -> list[str]:
        return [*super()._parameters(), f"sampling rate {self.sampling_rate:.4g}"]


@dataclass(frozen=True)
class _EpsilonEvent(PrivacyEvent):
    """A release known by its epsilon."""

    epsilon: float

    def __post_init__(self) -> None:
        super().__post_init__()
        self._set("epsilon", check_epsilon(self.epsilon, f"{self.kind} event epsilon"))

    @property
    def basic_composition_only(self) -> bool:
        return self.epsilon > MAX_EVENT_EPSILON


@dataclass(frozen=True)
class PureEvent(_EpsilonEvent):
    """Any epsilon-DP release, for example Laplace noise on a vector whose l1 change may
    spread over coordinates, or report-noisy-max; accounted by its worst-case privacy
    loss distribution.

    Parameters
    ----------
    epsilon : float
        The release's pure epsilon.
    count : int, default 1
        Number of identical releases (e.g. DP-SGD steps); keyword only.
    name : str, default ""
        What was released, e.g. ``"dp_init/class_counts"``; keyword only.
    sensitivity : float or None, default None
        For the record: the sensitivity the mechanism was calibrated to; keyword only.
    """

    kind: ClassVar[str] = "pure"

    @property
    def pure_epsilon(self) -> float:
        return self.epsilon

    def _one_pld(self, discretization: float) -> pld.PrivacyLossDistribution:
        return _epsilon_dp_pld(self.epsilon, 0.0, discretization)

    def _one_dp_event(self) -> dpe.DpEvent:
        return _zcdp_of_pure(self.epsilon)

    def _parameters(self) -> list[str]:
        return [f"epsilon {self.epsilon:.4g} each"]


@dataclass(frozen=True)
class DiscreteLaplaceEvent(_EpsilonEvent):
    """Integer noise ``P(k) ~ exp(-|k| epsilon / s)`` on a query on a public grid that one
    record moves by at most ``s = grid_steps`` steps in a single coordinate (counts:
    ``s = 1``).

    Parameters
    ----------
    epsilon : float
        The release's pure epsilon.
    grid_steps : int, default 1
        ``s``: how many grid steps one record moves the query.
    count : int, default 1
        Number of identical releases (e.g. DP-SGD steps); keyword only.
    name : str, default ""
        What was released, e.g. ``"dp_init/class_counts"``; keyword only.
    sensitivity : float or None, default None
        For the record: the sensitivity the mechanism was calibrated to; keyword only.
    """

    kind: ClassVar[str] = "discrete_laplace"
    grid_steps: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        s = self.grid_steps
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise ValueError(f"discrete_laplace event needs grid_steps >= 1, got {s!r}")

    @property
    def pure_epsilon(self) -> float:
        return self.epsilon

    def _one_pld(self, discretization: float) -> pld.PrivacyLossDistribution:
        return pld.from_discrete_laplace_mechanism(
            self.epsilon / self.grid_steps, sensitivity=self.grid_steps, value_discretization_interval=discretization
        )

    def _one_dp_event(self) -> dpe.DpEvent:
        return _zcdp_of_pure(self.epsilon)

    def _parameters(self) -> list[str]:
        return [f"epsilon {self.epsilon:.4g} each", f"{self.grid_steps} grid step(s)"]


@dataclass(frozen=True)
class ApproxEvent(_EpsilonEvent):
    """Any ``(epsilon, delta)``-DP release known only by its parameters (e.g.
    smooth-sensitivity noise); accounted by the worst-case privacy loss distribution of
    an ``(epsilon, delta)`` mechanism (PLD accountant only: it has no Renyi-DP curve).

    Parameters
    ----------
    epsilon : float
        The release's epsilon.
    delta : float
        The release's delta, in ``(0, 1)``.
    count : int, default 1
        Number of identical releases (e.g. DP-SGD steps); keyword only.
    name : str, default ""
        What was released, e.g. ``"dp_init/class_counts"``; keyword only.
    sensitivity : float or None, default None
        For the record: the sensitivity the mechanism was calibrated to; keyword only.
    """

    kind: ClassVar[str] = "approx"
    has_renyi_curve: ClassVar[bool] = False
    delta: float

    def __post_init__(self) -> None:
        super().__post_init__()
        self._set("delta", check_delta(self.delta, "approx event delta", allow_zero=False))

    @property
    def delta_per_release(self) -> float:
        return float(self.delta)

    def _one_pld(self, discretization: float) -> pld.PrivacyLossDistribution:
        return _epsilon_dp_pld(self.epsilon, self.delta, discretization)

    def _one_dp_event(self) -> dpe.DpEvent:
        raise ValueError(
            f"{self.name or 'approx'}: an (epsilon, delta) event has no Renyi-DP curve; use the ledger's PLD accountant"
        )

    def _parameters(self) -> list[str]:
        return [f"epsilon {self.epsilon:.4g}, delta {self.delta:.3g} each"]


@dataclass(frozen=True)
class NonPrivateEvent(PrivacyEvent):
    """A release without noise (e.g. a noise-free debugging run); the ledger then
    reports epsilon = inf.

    Parameters
    ----------
    count : int, default 1
        Number of identical releases (e.g. DP-SGD steps); keyword only.
    name : str, default ""
        What was released, e.g. ``"dp_init/class_counts"``; keyword only.
    sensitivity : float or None, default None
        For the record: the sensitivity the mechanism was calibrated to; keyword only.
    """

    kind: ClassVar[str] = "non_private"
    has_pld: ClassVar[bool] = False
    is_private: ClassVar[bool] = False

    @property
    def pure_epsilon(self) -> float:
        return math.inf

    def _one_pld(self, discretization: float) -> pld.PrivacyLossDistribution:
        raise ValueError("a release without noise has no privacy loss distribution (epsilon is inf)")

    def _one_dp_event(self) -> dpe.DpEvent:
        return dpe.NonPrivateDpEvent()


@dataclass(frozen=True)
class RepeatAndSelectEvent(PrivacyEvent):
    """Private selection: a mechanism (its ``inner`` releases, composed) run ``K`` times
    with independent randomness, only the best of its ``K`` outputs released, ``K`` drawn
    independently of the data from the truncated negative binomial distribution with
    shape ``eta`` and mean ``mean`` (``eta = 0``: the logarithmic distribution, ``eta =
    1``: the geometric) or from the Poisson distribution (``shape = inf``). Accounted by
    its Renyi-DP curve (Papernot & Steinke 2022, Theorems 2 and 6, as dp-accounting's
    ``RepeatAndSelectDpEvent``); it has no privacy loss distribution.

    Parameters
    ----------
    inner : sequence of PrivacyEvent
        The releases of one run (each with a Renyi-DP curve); stored as a tuple.
    mean : float
        ``E[K]``, at least 1.
    shape : float
        ``eta`` of the truncated negative binomial distribution, ``> -1``; ``inf`` for Poisson.
    count : int, default 1
        Number of independent selections; keyword only.
    name : str, default ""
        What was released, e.g. ``"selection/best_model"``; keyword only.
    sensitivity : float or None, default None
        For the record (unused); keyword only.

    References
    ----------
    Papernot & Steinke (2022). Hyperparameter tuning with Renyi differential privacy.
    *ICLR 2022*.
    """

    kind: ClassVar[str] = "repeat_and_select"
    has_pld: ClassVar[bool] = False
    inner: tuple[PrivacyEvent, ...]
    mean: float
    shape: float

    def __post_init__(self) -> None:
        super().__post_init__()
        inner = tuple(e if isinstance(e, PrivacyEvent) else PrivacyEvent.from_dict(e) for e in self.inner)
        if not inner:
            raise ValueError("a repeat-and-select event needs the releases of one run (inner)")
        if not all(e.is_private and e.has_renyi_curve for e in inner):
            raise ValueError("every release of a run must be private and have a Renyi-DP curve")
        self._set("inner", inner)
        self._set("mean", check_positive("mean", self.mean))
        if self.mean < 1:
            raise ValueError(f"mean must be at least 1 (a run is always made), got {self.mean!r}")
        shape = float(self.shape)
        if not shape > -1:
            raise ValueError(f"shape must be > -1 (or inf for Poisson), got {self.shape!r}")
        self._set("shape", shape)

    def _one_pld(self, discretization: float) -> pld.PrivacyLossDistribution:
        raise ValueError(
            "a repeat-and-select release has no privacy loss distribution; the ledger uses its Renyi-DP curve"
        )

    def _one_dp_event(self) -> dpe.DpEvent:
        return dpe.RepeatAndSelectDpEvent(
            dpe.ComposedDpEvent([e.to_dp_event() for e in self.inner]), self.mean, self.shape
        )

    def _parameters(self) -> list[str]:
        distribution = "Poisson" if math.isinf(self.shape) else f"truncated negative binomial, shape {self.shape:g}"
        return [f"{len(self.inner)} release(s) per run, runs {distribution} with mean {self.mean:g}"]

    def to_dict(self) -> dict[str, Any]:
        values = super().to_dict()
        values["inner"] = [e.to_dict() for e in self.inner]
        return values


def dp_sgd_event(noise_multiplier: float, sampling_rate: float, steps: int) -> PrivacyEvent:
    """``steps`` DP-SGD steps: Poisson subsampling at rate ``sampling_rate``, then the
    Gaussian mechanism with ``noise_multiplier`` (a noise-free debugging run,
    ``noise_multiplier == 0``, is recorded as a ``NonPrivateEvent``: epsilon is inf)."""
    if noise_multiplier == 0:
        return NonPrivateEvent(count=steps, name="sgd_without_noise")
    return SubsampledGaussianEvent(noise_multiplier, sampling_rate, count=steps, name="dp_sgd")
