"""Differentially private scikit-learn estimators: ``DPGLVQ``, ``DPGMLVQ``, ``DPLGMLVQ``.

They train with the DP-LVQ "SGD" scheme (``dp_proto.lvq.private.dpsgd``): DP class-mean
initialisation with ``init_fraction * epsilon``, then DP-SGD (Opacus' algorithm, run by
default by the fused engine of ``dp_proto.lvq.private.fused``) with the noise
calibrated so that the whole run is ``(epsilon, delta)``-DP under add/remove one record.
The fitted model carries its guarantee: ``privacy_`` (the ledger's summary) and
``ledger_``.

Data must come with public bounds: ``bounds=(lower, upper)`` (scalars or per-feature
arrays known without looking at the data, e.g. ``(0, 255)`` for pixels) map it onto
``[-1, 1]^d``; with ``bounds=None`` the data are taken to be in ``[-1, 1]^d`` already.
Records outside are clipped; their count is curator-only (``curator_``, not a warning).

``save_release(path)`` publishes a fitted estimator in the release format of
``dp_proto.release`` (tensors in safetensors, a JSON manifest with the ledger's events,
nothing curator-only, no noise seed); ``dp_proto.load_release(path)`` loads it back.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets

from dp_proto._progress import wants_progress
from dp_proto._validation import torch_device, torch_dtype
from dp_proto.exceptions import DomainWarning
from dp_proto.lvq.estimators import GLVQ, GMLVQ, LGMLVQ
from dp_proto.lvq.init import make_prototype_labels
from dp_proto.lvq.layers import GMLVQLayer, LGMLVQLayer
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private.dpsgd import DPSGD, SGDSettings
from dp_proto.lvq.release import layer_description, model_from_release, model_tensors
from dp_proto.lvq.sparse import LOCAL_NORMALISATION_ERROR, check_penalty, metric_parameter, selected_features, sparsity
from dp_proto.privacy.curator import curator_class_coverage
from dp_proto.privacy.domain import PublicBoundsScaler, clip_for_fit, public_classes
from dp_proto.privacy.dpsgd_plan import DPSGDPlan
from dp_proto.privacy.events import PrivacyEvent
from dp_proto.privacy.ledger import PrivacyLedger, check_shared_ledger
from dp_proto.privacy.randomness import noise_generator
from dp_proto.privacy.release import (
    PARALLEL_COMPOSITION,
    ledger_from_manifest,
    ledger_manifest,
    node_ledgers_from_manifest,
    parallel_manifest,
    summary_from_manifest,
)
from dp_proto.privacy.session import record_fit
from dp_proto.release import Release, register_model

__all__ = ["DPGLVQ", "DPGMLVQ", "DPLGMLVQ", "FIT_SCOPE"]

#: What the guarantee of a private estimator covers (``privacy_scope_``).
FIT_SCOPE = (
    "the (epsilon, delta) guarantee covers the records passed to fit (add/remove one record); the feature "
    "bounds, the label set and the hyperparameters are public"
)
#: What the guarantee of a model merged from private nodes covers.
MERGED_SCOPE = (
    "each record lies in exactly one node's data; the merged model is post-processing of the node models, "
    "so it is (max epsilon, max delta)-DP by parallel composition under add/remove one record of any node"
)
#: What one node's guarantee covers inside a merged (federated) release.
NODE_SCOPE = "this node's guarantee covers the records of its own data (add/remove one record)"


#: Hyperparameters a private estimator's release never writes, with the reason.
DP_RELEASE_WITHHELD: dict[str, str] = {
    "noise_seed": "it would replay the noise and the sampling of the fit; never published "
    "(the privacy section says whether the noise was reproducible)",
    "ledger": "the curator's shared ledger (SharedLedger) of a model selection; this fit's own events are "
    "the privacy section",
}


class _DPReleaseHooks:
    """The release hooks of a private estimator (``GLVQ.to_release``'s and
    ``PairwiseGMLVQ.to_release``'s): the public bounds as the domain, the ledger as the
    privacy section, and both back on loading."""

    delta: float
    scaler_: PublicBoundsScaler
    ledger_: PrivacyLedger
    #: Fitted attributes a private release leaves out, with the reason (see ``GLVQ``).
    RELEASE_DROPS: ClassVar[dict[str, str]] = {
        "curator_": "curator-only: computed from the private data without noise, outside the guarantee",
    }
    _DOMAIN_NOTE: ClassVar[str] = (
        "features are mapped from the public [lower, upper] onto [-1, 1]; the model's tensors are in the mapped units"
    )

    def _release_domain(self) -> dict[str, Any]:
        return {
            "lower": self.scaler_.lower_.tolist(),
            "upper": self.scaler_.upper_.tolist(),
            "maps_to": [-1.0, 1.0],
            "note": self._DOMAIN_NOTE,
        }

    def _release_domain_tensors(self) -> dict[str, np.ndarray]:
        return {"scaler.lower": np.asarray(self.scaler_.lower_), "scaler.upper": np.asarray(self.scaler_.upper_)}

    def _release_privacy(self) -> dict[str, Any]:
        if not hasattr(self, "ledger_") and hasattr(self, "node_ledgers_"):  # merged (dp_proto.lvq.federated)
            nodes = [
                ledger_manifest(ledger, float(summary["delta"]), scope=NODE_SCOPE)
                for ledger, summary in zip(self.node_ledgers_, self.privacy_["nodes"], strict=True)
            ]
            return parallel_manifest(nodes, scope=getattr(self, "privacy_scope_", None))
        return ledger_manifest(self.ledger_, self.delta, scope=getattr(self, "privacy_scope_", FIT_SCOPE))

    @staticmethod
    def attach_node_guarantees(merged: Any, models: Sequence[Any]) -> None:
        """Give a model merged from private node models (``dp_proto.lvq.federated``) its
        guarantee: it is post-processing of the node releases, and every record lies in
        exactly one node's data, so it is ``(max_i epsilon_i, max_i delta_i)``-DP by
        parallel composition under add/remove one record. Sets ``node_ledgers_`` (each
        the record of its own node's releases), ``epsilon_``, ``privacy_`` and
        ``privacy_scope_``; the release writes them as a ``parallel_manifest`` section."""
        merged.node_ledgers_ = [m.ledger_ for m in models]
        merged.epsilon_ = max(float(m.epsilon_) for m in models)
        merged.privacy_ = {
            "composition": PARALLEL_COMPOSITION,
            "epsilon": merged.epsilon_,
            "delta": max(float(m.delta) for m in models),
            "nodes": [dict(m.privacy_) for m in models],
        }
        merged.privacy_scope_ = MERGED_SCOPE

    def _release_fitted_tensors(self) -> dict[str, np.ndarray]:
        """``class_counts_``, the DP initialisation's noisy class counts (released under
        its ``dp_init/class_counts`` event), when the fit has them."""
        counts = getattr(self, "class_counts_", None)
        return {} if counts is None else {"class_counts": np.asarray(counts, dtype=np.float64).copy()}

    def _restore_fitted_tensors(self, release: Release) -> None:
        if "class_counts" in release.tensors:
            self.class_counts_ = release.tensor("class_counts", ndim=1).copy()

    def _restore_domain(self, release: Release) -> None:
        if not release.private:
            raise ValueError(f"the release of {release.model} is not private: it has no ledger")
        lower, upper = release.tensor("scaler.lower"), release.tensor("scaler.upper")
        self.scaler_ = PublicBoundsScaler(lower, upper, clip=True, warn=False).fit()

    def _restore_privacy(self, release: Release) -> None:
        if "nodes" in release.privacy:  # a model merged from private nodes
            self.node_ledgers_ = node_ledgers_from_manifest(release.privacy)
            self.epsilon_ = float(release.privacy["epsilon"])
        else:
            self.ledger_: PrivacyLedger = ledger_from_manifest(release.privacy)
        self.privacy_ = summary_from_manifest(release.privacy)
        if hasattr(self, "model_"):
            self.model_.privacy_ = self.privacy_
        self.privacy_scope_ = release.privacy.get("scope")


class _PrivateInput:
    """What every private estimator does with its input: the public bounds mapped onto
    ``[-1, 1]^d`` (records outside clipped, counted for the curator only) and the public
    label set. Needs ``bounds``, ``classes``, ``_check_X`` and ``_validate_params``."""

    bounds: Any
    classes: Any

    if TYPE_CHECKING:
        classes_: np.ndarray

        def _check_X(self, X: Any, *, reset: bool, y: Any = None) -> Any: ...
        def _validate_params(self) -> None: ...

    def _bounds_scaler(self) -> PublicBoundsScaler:
        """The public map of ``bounds`` onto ``[-1, 1]^d`` (clipping, no warning)."""
        lower, upper = (-1.0, 1.0) if self.bounds is None else self.bounds
        return PublicBoundsScaler(lower, upper, clip=True, warn=False).fit()

    def _domain(self, X: np.ndarray, *, fitting: bool) -> np.ndarray:
        """``X`` mapped onto ``[-1, 1]^d``: when ``fitting``, clipped (and ``scaler_`` set);
        for predictions, the same map without clipping."""
        if fitting and self.bounds is None:  # a public setting: the warning says nothing about X
            warnings.warn(
                f"{type(self).__name__}: bounds=None takes the data to lie in [-1, 1]^d already; every record "
                "outside is clipped into it, and how many were is curator-only (curator_), never a warning. Pass "
                "the public bounds, bounds=(lower, upper) (numbers or per-feature arrays fixed without looking at "
                "the data), or bounds=(-1, 1) to say that this is the domain",
                DomainWarning,
                stacklevel=3,
            )
        if fitting:
            self.scaler_ = self._bounds_scaler()
            # the stored scaler_ never sees the data (no count on it)
            return clip_for_fit(self, self._bounds_scaler(), X)
        scaler = PublicBoundsScaler(self.scaler_.lower, self.scaler_.upper, clip=False).fit()
        return scaler.transform(X)  # predictions: same map, no privacy concern, no clipping

    def _fit_input(self, X, y) -> tuple[np.ndarray, np.ndarray]:
        """Validated ``X (n, d)`` and class indices ``(n,)``; sets ``classes_``."""
        self._validate_params()
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        X, y = self._check_X(X, reset=True, y=y)
        check_classification_targets(y)
        self.classes_, y_index = public_classes(y, self.classes, type(self).__name__)
        curator_class_coverage(self, np.bincount(y_index, minlength=len(self.classes_)), self.classes_)
        return X, y_index


class _PrivateLVQ(_PrivateInput, _DPReleaseHooks):
    """What every private LVQ estimator shares: its input (``_PrivateInput``), the release
    hooks, and distances in the public domain. ``fit`` is the private scheme's."""

    _min_fit_samples = 0  # an empty data set fits too: the record count is private

    # parameters the estimators set in __init__ (annotations only, for the type checker)
    dtype: str
    device: str
    epsilon: float
    delta: float
    secure_mode: bool

    if TYPE_CHECKING:
        n_features_in_: int
        model_: PrototypeModel
        noise_seed: int | None

        def to_release(self) -> Release: ...

    _RELEASE_WITHHELD: ClassVar[dict[str, str]] = DP_RELEASE_WITHHELD

    def _input_units(self, prototypes: np.ndarray) -> np.ndarray:
        return self.scaler_.inverse_transform(prototypes)

    def _distances(self, X) -> torch.Tensor:
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self)
        X = self._check_X(X, reset=False)
        x_t = torch.as_tensor(self._domain(X, fitting=False), dtype=torch_dtype(self.dtype), device=self.device)
        with torch.no_grad():
            return self.model_(x_t)


class _DPMixin(_PrivateLVQ):
    """Replaces ``fit`` of a non-private estimator by its ``DPSGD`` recipe: DP
    initialisation + DP-SGD."""

    # parameters the estimators set in __init__ (annotations only, for the type checker)
    solver: str
    lr: float
    sampling_rate: float
    epochs: int
    init_fraction: float
    init_mechanism: str
    calibration: str
    engine: str
    grad_sample_mode: str
    clipping: str
    average_last: float
    metric_lr_scale: float
    max_grad_norm: float
    transfer_fn: str
    beta: float

    # -- the release format (dp_proto.release; the rest is in the non-private base) ------
    _RELEASE_FITTED: ClassVar[tuple[str, ...]] = (
        "n_iter_",
        "noise_multiplier_",
        "sampling_rate_",
        "expected_batch_size_",
        "stopped_by_budget_",
        "epsilon_",
    )

    def _store_metric(self) -> None:
        """The metric's attributes, and for GMLVQ / LGMLVQ the features it uses
        (``selected_features_``: a non-zero column in some Omega; ``sparsity_``, eq. 5.8
        of Brinkrolf 2023): post-processing of the released model."""
        super()._store_metric()  # type: ignore[misc]  # GLVQ's, GMLVQ's or LGMLVQ's
        layer = self.model_.layer
        if isinstance(layer, (GMLVQLayer, LGMLVQLayer)):
            metric = metric_parameter(self.model_).detach()
            self.selected_features_ = selected_features(metric).cpu().numpy()
            self.sparsity_ = sparsity(metric)

    @classmethod
    def from_trained(
        cls,
        model: PrototypeModel,
        ledger: PrivacyLedger,
        *,
        fitted: Mapping[str, Any],
        privacy_scope: str,
        **params: Any,
    ) -> Any:
        """A fitted estimator around a prototype model trained elsewhere with DP-SGD
        (the private ``dp-proto train`` run), so that it predicts on raw features and can
        be released like one that ``fit`` trained.

        Parameters
        ----------
        model : PrototypeModel
            Trained on features mapped from ``bounds`` onto ``[-1, 1]^d``, without a
            backbone; its class indices count into the sorted ``classes``. The estimator
            gets a copy of its layer and labels.
        ledger : PrivacyLedger
            Every release of the run.
        fitted : mapping
            The public fitted scalars of the run: ``n_iter_``, ``noise_multiplier_``,
            ``sampling_rate_``, ``expected_batch_size_``, ``stopped_by_budget_``.
        privacy_scope : str
            What the guarantee covers (``privacy_scope_``).
        **params
            The estimator's hyperparameters; ``classes`` (the public label set) is
            required.
        """
        estimator = cls(**params)
        if estimator.classes is None:
            raise ValueError(f"{cls.__name__}.from_trained needs the public label set, classes=[...]")
        unknown = sorted(set(fitted) - set(cls._RELEASE_FITTED) - {"epsilon_"})
        if unknown:
            raise ValueError(f"from_trained: {unknown} are not fitted attributes of a release")
        estimator._validate_params()
        estimator.classes_ = np.unique(np.asarray(estimator.classes))
        estimator.scaler_ = estimator._bounds_scaler()
        shape = Release(
            model="",
            tensors=model_tensors(model),
            public={"layer": layer_description(model), "n_features": model.layer.in_features},
        )
        estimator.model_ = model_from_release(shape, num_classes=len(estimator.classes_), device=estimator.device)
        estimator.n_features_in_ = int(model.layer.in_features)
        for name, value in fitted.items():
            setattr(estimator, name, value)
        estimator.ledger_ = ledger
        estimator.epsilon_ = ledger.get_epsilon(estimator.delta)
        ledger.attach(estimator.model_)
        estimator.privacy_ = estimator.model_.privacy_
        estimator.privacy_scope_ = privacy_scope
        estimator.prototypes_ = estimator._input_units(estimator.model_.layer.prototypes.detach().cpu().numpy())
        estimator.prototype_labels_ = estimator.classes_[estimator.model_.prototype_labels.cpu().numpy()]
        estimator._store_metric()
        return estimator

    def _validate_params(self) -> None:
        if self.solver not in ("sgd", "adam"):
            raise ValueError(f"solver must be 'sgd' or 'adam' for DP-SGD, got {self.solver!r}")
        torch_dtype(self.dtype)
        torch_device(self.device)
        if not 0 < self.init_fraction < 1:
            raise ValueError(f"init_fraction must lie in (0, 1), got {self.init_fraction!r}")
        if self.engine not in ("fused", "opacus"):
            raise ValueError(f"engine must be 'fused' or 'opacus', got {self.engine!r}")
        self.dp_sgd_recipe()  # every setting of the DP-SGD run
        check_shared_ledger(getattr(self, "ledger", None), type(self).__name__)
        group_lasso = check_penalty("group_lasso", getattr(self, "group_lasso", 0.0))
        if group_lasso > 0 and getattr(self, "normalize_omega", False) and isinstance(self, LGMLVQ):
            raise ValueError(LOCAL_NORMALISATION_ERROR)

    def dp_sgd_recipe(self) -> DPSGD:
        """The run's public recipe: budget, steps, clipping, engine and step sizes (checks
        the settings; built from the parameters, before any data are seen)."""
        plan = DPSGDPlan(
            self.epsilon,
            self.delta,
            self.sampling_rate,
            self.epochs,
            init_fraction=self.init_fraction,
            calibration=self.calibration,
        )
        sgd = SGDSettings(
            lr=self.lr,
            metric_lr_scale=getattr(self, "metric_lr_scale", 1.0),
            optimizer=self.solver,
            average_last=self.average_last,
            group_lasso=getattr(self, "group_lasso", 0.0),
        )
        return DPSGD(
            plan,
            max_grad_norm=self.max_grad_norm,
            init_mechanism=self.init_mechanism,
            sgd=sgd,
            clipping=self.clipping,
            engine=self.engine,
            grad_sample_mode=self.grad_sample_mode,
            transfer_fn=self.transfer_fn,
            beta=self.beta,
            secure_mode=self.secure_mode,
        )

    def planned_privacy_events(self, n_features: int) -> tuple[PrivacyEvent, ...]:
        """The releases ``fit`` makes on ``n_features`` features, from public settings only:
        the DP initialisation's and the DP-SGD run's (``DPPipeline`` checks them, with the
        other steps', against its budget before anything is fitted)."""
        return self.dp_sgd_recipe().planned_events(n_features)

    def fit(self, X, y, *, callback=None):
        """Private training on ``X (n, d)``, ``y (n,)``; see the class docstring. No
        ``callback`` (``ValueError``): code run between DP-SGD steps could read the
        private data outside the ledger."""
        if callback is not None:
            raise ValueError(f"{type(self).__name__}.fit takes no callback: DP-SGD releases only its final model")
        X, y_index = self._fit_input(X, y)
        d = X.shape[1]
        recipe = self.dp_sgd_recipe()  # public settings only
        counts = self._prototype_counts(self.classes_)
        if len(set(counts)) != 1:
            raise ValueError("the DP initialisation needs the same number of prototypes for every class")

        # random_state: non-private choices only (a random Omega initialisation). Every
        # noise draw and sampling coin comes from `generator`: fresh entropy by default.
        rng = check_random_state(self.random_state)
        init_generator = torch.Generator().manual_seed(int(rng.randint(0, 2**31 - 1)))
        generator = noise_generator(self.noise_seed, owner=type(self).__name__)
        tdtype = torch_dtype(self.dtype)
        Z = self._domain(X, fitting=True)
        x_t = torch.as_tensor(Z, dtype=tdtype, device=self.device)
        y_t = torch.as_tensor(y_index, dtype=torch.long, device=self.device)

        shared = getattr(self, "ledger", None)
        if shared is not None:  # refuse the fit before the data are read (public events only)
            shared.check(*recipe.planned_events(d))
        labels = make_prototype_labels(len(self.classes_), counts[0])
        layer = self._make_layer(d, len(labels), init_generator, tdtype)
        self.model_ = PrototypeModel(layer, labels)
        # q and T are public settings: neither may depend on the private n (add/remove).
        # The update is divided by q * n~, n~ the sum of the initialisation's noisy class
        # counts (post-processing of a release), never by the private q * n.
        init, result, ledger = recipe.run(  # a new ledger of the plan's budget
            self.model_,
            x_t,
            y_t,
            generator=None if self.secure_mode else generator,
            progress=wants_progress(self.verbose),
        )
        if init is None:  # pragma: no cover - _validate_params requires init_fraction > 0
            raise RuntimeError("the DP estimators' recipe always initialises")
        sigma, q, expected_batch = result.noise_multiplier, result.sampling_rate, result.expected_batch_size
        self.noise_multiplier_ = sigma
        self.sampling_rate_ = q
        self.expected_batch_size_ = expected_batch
        self.n_iter_ = result.steps
        self.stopped_by_budget_ = result.stopped_by_budget
        # No training loss is stored: the estimator is the released object, and a loss
        # computed on the private batches would be a release outside the ledger.
        if shared is not None:
            shared.spend(*ledger.events)  # a prefix of the checked plan (a budget stop spends less)
        record_fit(self, ledger, shared=shared is not None, delta=self.delta)
        self.ledger_ = ledger
        self.epsilon_ = ledger.get_epsilon(self.delta)
        ledger.attach(self.model_)
        self.privacy_ = self.model_.privacy_
        self.privacy_scope_ = FIT_SCOPE
        self.prototypes_ = self.scaler_.inverse_transform(layer.prototypes.detach().cpu().numpy())
        self.prototype_labels_ = self.classes_[init.prototype_labels.cpu().numpy()]
        self.class_counts_ = init.noisy_counts.detach().cpu().numpy().astype(np.float64)  # released
        self._store_metric()
        return self


def _set(obj, **params) -> None:
    for key, value in params.items():
        setattr(obj, key, value)


@register_model("dp_proto.DPGLVQ")
class DPGLVQ(_DPMixin, GLVQ):
    """Differentially private GLVQ (DP class-mean initialisation + DP-SGD).

    DP class-mean initialisation with ``init_fraction * epsilon`` (noisy class counts and
    sums, ``init_mechanism``), then DP-SGD: Poisson sampling at exactly the rate ``q``,
    per-sample clipping to ``C``, Gaussian noise (float64, fresh operating-system
    entropy), ``T = ceil(epochs * int(1 / q))`` steps; ``q`` and ``T`` are public settings
    that never depend on the private ``n``. The whole run is ``(epsilon, delta)``-DP under
    add/remove one record, as composed by the ledger.

    Parameters
    ----------
    prototypes_per_class : int or mapping class -> int, default 1
        Prototypes per class; the DP initialisation needs the same count for every class.
    epsilon : float, default 1.0
        Total budget of the run (initialisation + DP-SGD), at ``delta``.
    delta : float, default 1e-5
        The ``delta`` of the ``(epsilon, delta)`` guarantee.
    sampling_rate : float, default 0.01
        Poisson sampling rate ``q`` (expected batch ``q n``); a public setting.
    max_grad_norm : float, default 0.5
        Per-sample clipping norm ``C``.
    epochs : float, default 50
        ``T = ceil(epochs * int(1 / q))`` DP-SGD steps
        (``dp_sgd_recipe()``).
    init_fraction : float, default 0.2
        Share of epsilon spent on the DP class-mean initialisation.
    init_mechanism : {"gaussian", "laplace"}, default "gaussian"
        The noise of the initialisation's class sums: the Gaussian mechanism on their l2
        sensitivity ``sqrt(d)`` at the run's ``delta``, or Laplace on their l1 sensitivity
        ``d`` (Brinkrolf 2023), which puts far more noise on each coordinate as ``d``
        grows; the ledger composes either exactly. Below an epsilon of about 0.01 the
        ledger's PLD grid over-estimates the Gaussian mechanism's share; use
        ``"laplace"`` there. Why the default: docs/dpsgd.md ("Defaults chosen on
        development sets").
    calibration : {"ledger", "paper"}, default "ledger"
        ``"ledger"``: the smallest noise multiplier for which the ledger certifies the
        whole run at ``(epsilon, delta)``. ``"paper"``: the noise multiplier of
        Brinkrolf, Göpfert & Hammer (2019); ``epsilon_`` then reports what the ledger
        certifies for it.
    bounds : (lower, upper) or None, default None
        Public bounds of the features (scalars or per-feature arrays), mapped onto
        ``[-1, 1]``; records outside are clipped. None: the data are in ``[-1, 1]^d``
        already.
    classes : array-like or None, default None
        The public set of class labels (one prototype group per class, in sorted
        order). A class without records still gets its prototypes from the noisy DP
        initialisation. None reads the set from ``y`` with a
        ``PrivacyLeakWarning``: the released model then shows
        which labels the private data contain.
    clipping : {"joint", "per_parameter"}, default "joint"
        How the per-sample gradient is clipped to ``C``. The prototypes are the only
        trainable parameter here, so both modes clip them to ``C``.
    engine : {"fused", "opacus"}, default "fused"
        ``"fused"`` runs Opacus' DP-SGD step (Poisson sampling, per-sample clipping,
        Gaussian noise, division by the expected batch) directly on tensors with the
        closed-form gradient norms (``dp_proto.lvq.private.fused``); ``"opacus"`` goes
        through Opacus' ``PrivacyEngine``. Same guarantee either way; epoch times of
        both: docs/dpsgd.md ("Reproduced results").
    grad_sample_mode : {"hooks", "ghost", "functorch"}, default "hooks"
        How Opacus computes per-sample gradients (``engine="opacus"`` only; ``"ghost"``
        needs ``dtype="float64"``).
    secure_mode : bool, default False
        Noise read from ``os.urandom`` directly (initialisation and DP-SGD; batch
        membership from a generator seeded by it). The Opacus engine needs Opacus'
        ``torchcsprng`` package for this.
    noise_seed : int or None, default None
        None: noise and Poisson sampling from a generator whose whole state comes from
        fresh operating-system entropy (``dp_proto.privacy.randomness``). An int
        reproduces the private fit exactly, for tests and benchmarks: it warns
        ``PrivacyLeakWarning`` and the ledger's summary says
        ``"noise": "reproducible"`` (whoever knows the seed can remove the noise).
    ledger : SharedLedger, optional
        A budget shared by several fits (model selection: ``cross_val_score``,
        ``GridSearchCV``): the fit checks its whole planned spend against it before it
        reads the data (``PrivacyBudgetExceededError`` past the shared budget) and records
        its events there afterwards. ``ledger_`` stays this fit's own ledger.
    solver : {"sgd", "adam"}, default "sgd"
        The optimizer applied to the noisy clipped gradient (post-processing). Why SGD:
        docs/dpsgd.md ("Defaults chosen on development sets").
    lr : float, default 0.05
        Step size of ``solver``.
    average_last : float in [0, 1), default 0.0
        Release the mean of the iterates of the last ``average_last`` share of the steps
        (post-processing; 0 releases the last iterate).
    transfer_fn : {"identity", "sigmoid"}, default "sigmoid"
        Transfer of the GLVQ cost (the non-private models' default is the identity).
        With ``"sigmoid"`` the cost concentrates on records near the class borders, and
        the gradient of a record far from them fades instead of being clipped to ``C``
        with the rest, so less of the clipped sum is bias. Why the default:
        docs/dpsgd.md ("Defaults chosen on development sets").
    beta : float, default 16.0
        Slope of the sigmoid transfer.
    random_state : int, RandomState or None, default None
        Non-private randomness only (a random Omega initialisation); never the noise.
    verbose : int or None, default None
        A progress bar over the DP-SGD epochs on stderr, shown once the fit has run for
        two seconds (it counts planned epochs, a public quantity): None in interactive use
        only (a terminal or a notebook), 0 never, 1 or more always.
    device : str, default "cpu"
        Torch device of the training.
    dtype : {"float64", "float32"}, default "float64"
        Torch dtype of the fitted model. DP-SGD runs the prototype layer in float64
        either way, where the clipped sum's sensitivity bound is proved
        (docs/privacy-model.md), and casts the trained parameters to ``dtype``.

    Attributes
    ----------
    classes_ : ndarray (c,)
        The class labels (``classes``, sorted).
    prototypes_ : ndarray (W, d)
        Released prototypes, in the original feature units.
    prototype_labels_ : ndarray (W,)
        Class label of every prototype.
    n_features_in_ : int
        Number of features seen in ``fit``.
    epsilon_ : float
        What the ledger certifies at ``delta``.
    privacy_ : dict
        The ledger's summary (also stored on ``model_``).
    ledger_ : PrivacyLedger
        Every release of the run: the DP initialisation's counts and sums, the DP-SGD steps.
    class_counts_ : ndarray (c,)
        The DP initialisation's noisy class counts (discrete Laplace; may be negative),
        released under its ``dp_init/class_counts`` event; federated merging weights
        the nodes' prototypes by them.
    noise_multiplier_ : float
        Noise multiplier ``sigma`` of the DP-SGD steps.
    sampling_rate_ : float
        The Poisson sampling rate ``q``.
    expected_batch_size_ : float
        The public normaliser ``q n~``, ``n~`` the sum of the initialisation's noisy class
        counts (never the private ``q n``).
    n_iter_ : int
        DP-SGD steps taken.
    stopped_by_budget_ : bool
        Whether the ledger's budget stopped training between epochs.
    privacy_scope_ : str
        What the guarantee covers (``FIT_SCOPE``: the records passed to ``fit``).
    scaler_ : PublicBoundsScaler
        The public map of ``bounds`` onto ``[-1, 1]^d``.
    model_ : PrototypeModel
        The trained torch model (in the mapped units).
    curator_ : dict
        Curator-only, outside the guarantee (``num_clipped``: records that lay outside
        ``bounds``): ``del est.curator_`` before pickling a fitted estimator;
        ``save_release`` leaves it out.

    Notes
    -----
    Unlike the non-private models there is no ``loss_``: a training loss would be a
    release about the private data outside the ledger. The noisy gradient sum is divided
    by the public ``expected_batch_size_``, never by the private ``q n`` that Opacus
    would use.

    References
    ----------
    Brinkrolf, Göpfert & Hammer (2019). Differential privacy for learning vector
    quantization. *Neurocomputing* 342.

    Abadi et al. (2016). Deep learning with differential privacy. *ACM CCS 2016*.

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> from dp_proto.lvq.private import DPGLVQ
    >>> X, y = load_digits(return_X_y=True)
    >>> model = DPGLVQ(epsilon=1.0, bounds=(0, 16), classes=range(10), sampling_rate=0.1, epochs=2)
    >>> model.dp_sgd_recipe().steps  # public: T = ceil(epochs * int(1 / q))
    20
    >>> model.fit(X, y).epsilon_ <= 1.0, model.prototypes_.shape
    (True, (10, 64))
    """

    def __init__(
        self,
        prototypes_per_class=1,
        *,
        epsilon=1.0,
        delta=1e-5,
        sampling_rate=0.01,
        max_grad_norm=0.5,
        epochs=50,
        init_fraction=0.2,
        init_mechanism="gaussian",
        calibration="ledger",
        bounds=None,
        classes=None,
        clipping="joint",
        engine="fused",
        grad_sample_mode="hooks",
        secure_mode=False,
        noise_seed=None,
        ledger=None,
        solver="sgd",
        lr=0.05,
        average_last=0.0,
        transfer_fn="sigmoid",
        beta=16.0,
        random_state=None,
        verbose=None,
        device="cpu",
        dtype="float64",
    ):
        _set(
            self,
            prototypes_per_class=prototypes_per_class,
            epsilon=epsilon,
            delta=delta,
            sampling_rate=sampling_rate,
            max_grad_norm=max_grad_norm,
            epochs=epochs,
            init_fraction=init_fraction,
            init_mechanism=init_mechanism,
            calibration=calibration,
            bounds=bounds,
            classes=classes,
            clipping=clipping,
            engine=engine,
            grad_sample_mode=grad_sample_mode,
            secure_mode=secure_mode,
            noise_seed=noise_seed,
            ledger=ledger,
            solver=solver,
            lr=lr,
            average_last=average_last,
            transfer_fn=transfer_fn,
            beta=beta,
            random_state=random_state,
            verbose=verbose,
            device=device,
            dtype=dtype,
        )


@register_model("dp_proto.DPGMLVQ")
class DPGMLVQ(_DPMixin, GMLVQ):
    """Differentially private GMLVQ (DP class-mean initialisation, identity Omega,
    DP-SGD on prototypes and Omega with joint clipping, Omega kept at the identity's scale).

    DP class-mean initialisation with ``init_fraction * epsilon`` (noisy class counts and
    sums, ``init_mechanism``), then DP-SGD: Poisson sampling at exactly the rate ``q``,
    per-sample clipping to ``C``, Gaussian noise (float64, fresh operating-system
    entropy), ``T = ceil(epochs * int(1 / q))`` steps; ``q`` and ``T`` are public settings
    that never depend on the private ``n``. The whole run is ``(epsilon, delta)``-DP under
    add/remove one record, as composed by the ledger.

    Parameters
    ----------
    prototypes_per_class : int or mapping class -> int, default 1
        Prototypes per class; the DP initialisation needs the same count for every class.
    epsilon : float, default 1.0
        Total budget of the run (initialisation + DP-SGD), at ``delta``.
    delta : float, default 1e-5
        The ``delta`` of the ``(epsilon, delta)`` guarantee.
    sampling_rate : float, default 0.01
        Poisson sampling rate ``q`` (expected batch ``q n``); a public setting.
    max_grad_norm : float, default 0.5
        Per-sample clipping norm ``C``.
    epochs : float, default 50
        ``T = ceil(epochs * int(1 / q))`` DP-SGD steps
        (``dp_sgd_recipe()``).
    init_fraction : float, default 0.3
        Share of epsilon spent on the DP class-mean initialisation. Why the default:
        docs/dpsgd.md ("Defaults chosen on development sets").
    init_mechanism : {"gaussian", "laplace"}, default "gaussian"
        The noise of the initialisation's class sums: the Gaussian mechanism on their l2
        sensitivity ``sqrt(d)`` at the run's ``delta``, or Laplace on their l1 sensitivity
        ``d`` (Brinkrolf 2023), which puts far more noise on each coordinate as ``d``
        grows; the ledger composes either exactly. Below an epsilon of about 0.01 the
        ledger's PLD grid over-estimates the Gaussian mechanism's share; use
        ``"laplace"`` there. Why the default: docs/dpsgd.md ("Defaults chosen on
        development sets").
    calibration : {"ledger", "paper"}, default "ledger"
        ``"ledger"``: the smallest noise multiplier for which the ledger certifies the
        whole run at ``(epsilon, delta)``. ``"paper"``: the noise multiplier of
        Brinkrolf, Göpfert & Hammer (2019); ``epsilon_`` then reports what the ledger
        certifies for it.
    bounds : (lower, upper) or None, default None
        Public bounds of the features (scalars or per-feature arrays), mapped onto
        ``[-1, 1]``; records outside are clipped. None: the data are in ``[-1, 1]^d``
        already.
    classes : array-like or None, default None
        The public set of class labels (one prototype group per class, in sorted
        order). A class without records still gets its prototypes from the noisy DP
        initialisation. None reads the set from ``y`` with a
        ``PrivacyLeakWarning``: the released model then shows
        which labels the private data contain.
    clipping : {"joint", "per_parameter"}, default "joint"
        ``"joint"``: the per-sample gradient of prototypes and Omega together is clipped
        to ``C``, as in Brinkrolf, Göpfert & Hammer (2019). ``"per_parameter"``: the
        prototypes and Omega are clipped to ``C / sqrt(2)`` each (the joint norm stays
        at most ``C``: same sensitivity, same noise), so that large per-sample gradients
        of one part cannot crowd the other out of the clipping budget. Why joint is the
        default: docs/dpsgd.md ("Defaults chosen on development sets").
    engine : {"fused", "opacus"}, default "fused"
        ``"fused"`` runs Opacus' DP-SGD step (Poisson sampling, per-sample clipping,
        Gaussian noise, division by the expected batch) directly on tensors with the
        closed-form gradient norms (``dp_proto.lvq.private.fused``); ``"opacus"`` goes
        through Opacus' ``PrivacyEngine``. Same guarantee either way; epoch times of
        both: docs/dpsgd.md ("Reproduced results").
    grad_sample_mode : {"hooks", "ghost", "functorch"}, default "hooks"
        How Opacus computes per-sample gradients (``engine="opacus"`` only; ``"ghost"``
        needs ``dtype="float64"``).
    secure_mode : bool, default False
        Noise read from ``os.urandom`` directly (initialisation and DP-SGD; batch
        membership from a generator seeded by it). The Opacus engine needs Opacus'
        ``torchcsprng`` package for this.
    noise_seed : int or None, default None
        None: noise and Poisson sampling from a generator whose whole state comes from
        fresh operating-system entropy (``dp_proto.privacy.randomness``). An int
        reproduces the private fit exactly, for tests and benchmarks: it warns
        ``PrivacyLeakWarning`` and the ledger's summary says
        ``"noise": "reproducible"`` (whoever knows the seed can remove the noise).
    ledger : SharedLedger, optional
        A budget shared by several fits (model selection: ``cross_val_score``,
        ``GridSearchCV``): the fit checks its whole planned spend against it before it
        reads the data (``PrivacyBudgetExceededError`` past the shared budget) and records
        its events there afterwards. ``ledger_`` stays this fit's own ledger.
    rank : int or None, default None
        Rows of ``Omega (r, d)``; None means ``r = d``.
    omega_init : {"identity", "scaled_identity", "random"}, default "identity"
        Initial Omega (``"random"`` draws from ``random_state``, not from the noise).
    normalize_omega : bool, default False
        Renormalise Omega to ``trace(Omega^T Omega) = 1`` after every step (free
        post-processing). False keeps Omega at the scale of its identity initialisation:
        the cost is invariant to that scale, so Omega's gradients are ``sqrt(d)`` times
        smaller than at trace 1, fewer are clipped, and the same noise moves the metric
        relatively less. Why the default: docs/dpsgd.md ("Defaults chosen on
        development sets").
    solver : {"sgd", "adam"}, default "sgd"
        The optimizer applied to the noisy clipped gradient (post-processing). Why SGD:
        docs/dpsgd.md ("Defaults chosen on development sets").
    lr : float, default 0.05
        Step size of ``solver``.
    metric_lr_scale : float, default 1.0
        Learning rate of Omega relative to ``lr``. Every coordinate of Omega gets as
        much noise as a prototype coordinate; a smaller rate keeps the metric's random
        walk short.
    group_lasso : float, default 0.0
        Feature sparsity (Brinkrolf 2023, ch. 5): after every noisy step the group
        soft-threshold of the metric's feature columns (``fit_dp_sgd``), so unused
        features become exactly zero (``selected_features_``, ``sparsity_``).
        Post-processing of the released iterates: the guarantee and the privacy plan do
        not change.
    average_last : float in [0, 1), default 0.0
        Release the mean of the iterates of the last ``average_last`` share of the steps
        (post-processing; 0 releases the last iterate).
    transfer_fn : {"identity", "sigmoid"}, default "sigmoid"
        Transfer of the GLVQ cost (the non-private models' default is the identity).
        With ``"sigmoid"`` the cost concentrates on records near the class borders, and
        the gradient of a record far from them fades instead of being clipped to ``C``
        with the rest, so less of the clipped sum is bias. Why the default:
        docs/dpsgd.md ("Defaults chosen on development sets").
    beta : float, default 16.0
        Slope of the sigmoid transfer.
    random_state : int, RandomState or None, default None
        Non-private randomness only (a random Omega initialisation); never the noise.
    verbose : int or None, default None
        A progress bar over the DP-SGD epochs on stderr, shown once the fit has run for
        two seconds (it counts planned epochs, a public quantity): None in interactive use
        only (a terminal or a notebook), 0 never, 1 or more always.
    device : str, default "cpu"
        Torch device of the training.
    dtype : {"float64", "float32"}, default "float64"
        Torch dtype of the fitted model. DP-SGD runs the prototype layer in float64
        either way, where the clipped sum's sensitivity bound is proved
        (docs/privacy-model.md), and casts the trained parameters to ``dtype``.

    Attributes
    ----------
    classes_ : ndarray (c,)
        The class labels (``classes``, sorted).
    prototypes_ : ndarray (W, d)
        Released prototypes, in the original feature units.
    prototype_labels_ : ndarray (W,)
        Class label of every prototype.
    omega_ : ndarray (r, d)
        Released projection (in the mapped ``[-1, 1]^d`` units).
    lambda_ : ndarray (d, d)
        The relevance matrix ``Omega^T Omega``.
    n_features_in_ : int
        Number of features seen in ``fit``.
    epsilon_ : float
        What the ledger certifies at ``delta``.
    privacy_ : dict
        The ledger's summary (also stored on ``model_``).
    ledger_ : PrivacyLedger
        Every release of the run: the DP initialisation's counts and sums, the DP-SGD steps.
    class_counts_ : ndarray (c,)
        The DP initialisation's noisy class counts (discrete Laplace; may be negative),
        released under its ``dp_init/class_counts`` event; federated merging weights
        the nodes' prototypes by them.
    noise_multiplier_ : float
        Noise multiplier ``sigma`` of the DP-SGD steps.
    sampling_rate_ : float
        The Poisson sampling rate ``q``.
    expected_batch_size_ : float
        The public normaliser ``q n~``, ``n~`` the sum of the initialisation's noisy class
        counts (never the private ``q n``).
    n_iter_ : int
        DP-SGD steps taken.
    stopped_by_budget_ : bool
        Whether the ledger's budget stopped training between epochs.
    privacy_scope_ : str
        What the guarantee covers (``FIT_SCOPE``: the records passed to ``fit``).
    scaler_ : PublicBoundsScaler
        The public map of ``bounds`` onto ``[-1, 1]^d``.
    model_ : PrototypeModel
        The trained torch model (in the mapped units).
    curator_ : dict
        Curator-only, outside the guarantee (``num_clipped``: records that lay outside
        ``bounds``): ``del est.curator_`` before pickling a fitted estimator;
        ``save_release`` leaves it out.

    Notes
    -----
    Unlike the non-private models there is no ``loss_``: a training loss would be a
    release about the private data outside the ledger. The noisy gradient sum is divided
    by the public ``expected_batch_size_``, never by the private ``q n`` that Opacus
    would use.

    References
    ----------
    Brinkrolf, Göpfert & Hammer (2019). Differential privacy for learning vector
    quantization. *Neurocomputing* 342.

    Abadi et al. (2016). Deep learning with differential privacy. *ACM CCS 2016*.

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> from dp_proto.lvq.private import DPGMLVQ
    >>> X, y = load_digits(return_X_y=True)
    >>> model = DPGMLVQ(epsilon=1.0, bounds=(0, 16), classes=range(10), sampling_rate=0.1, epochs=2)
    >>> model.dp_sgd_recipe().steps  # public: T = ceil(epochs * int(1 / q))
    20
    >>> model.fit(X, y).epsilon_ <= 1.0, model.prototypes_.shape
    (True, (10, 64))
    """

    def __init__(
        self,
        prototypes_per_class=1,
        *,
        epsilon=1.0,
        delta=1e-5,
        sampling_rate=0.01,
        max_grad_norm=0.5,
        epochs=50,
        init_fraction=0.3,
        init_mechanism="gaussian",
        calibration="ledger",
        bounds=None,
        classes=None,
        clipping="joint",
        engine="fused",
        grad_sample_mode="hooks",
        secure_mode=False,
        noise_seed=None,
        ledger=None,
        rank=None,
        omega_init="identity",
        normalize_omega=False,
        solver="sgd",
        lr=0.05,
        metric_lr_scale=1.0,
        group_lasso=0.0,
        average_last=0.0,
        transfer_fn="sigmoid",
        beta=16.0,
        random_state=None,
        verbose=None,
        device="cpu",
        dtype="float64",
    ):
        _set(
            self,
            prototypes_per_class=prototypes_per_class,
            epsilon=epsilon,
            delta=delta,
            sampling_rate=sampling_rate,
            max_grad_norm=max_grad_norm,
            epochs=epochs,
            init_fraction=init_fraction,
            init_mechanism=init_mechanism,
            calibration=calibration,
            bounds=bounds,
            classes=classes,
            clipping=clipping,
            engine=engine,
            grad_sample_mode=grad_sample_mode,
            secure_mode=secure_mode,
            noise_seed=noise_seed,
            ledger=ledger,
            rank=rank,
            omega_init=omega_init,
            normalize_omega=normalize_omega,
            solver=solver,
            lr=lr,
            metric_lr_scale=metric_lr_scale,
            group_lasso=group_lasso,
            average_last=average_last,
            transfer_fn=transfer_fn,
            beta=beta,
            random_state=random_state,
            verbose=verbose,
            device=device,
            dtype=dtype,
        )


@register_model("dp_proto.DPLGMLVQ")
class DPLGMLVQ(_DPMixin, LGMLVQ):
    """Differentially private localized GMLVQ (DP class-mean initialisation + DP-SGD on
    the prototypes and one Omega per prototype).

    DP class-mean initialisation with ``init_fraction * epsilon`` (noisy class counts and
    sums, ``init_mechanism``), then DP-SGD: Poisson sampling at exactly the rate ``q``,
    per-sample clipping to ``C``, Gaussian noise (float64, fresh operating-system
    entropy), ``T = ceil(epochs * int(1 / q))`` steps; ``q`` and ``T`` are public settings
    that never depend on the private ``n``. The whole run is ``(epsilon, delta)``-DP under
    add/remove one record, as composed by the ledger.

    Parameters
    ----------
    prototypes_per_class : int or mapping class -> int, default 1
        Prototypes per class; the DP initialisation needs the same count for every class.
    epsilon : float, default 1.0
        Total budget of the run (initialisation + DP-SGD), at ``delta``.
    delta : float, default 1e-5
        The ``delta`` of the ``(epsilon, delta)`` guarantee.
    sampling_rate : float, default 0.01
        Poisson sampling rate ``q`` (expected batch ``q n``); a public setting.
    max_grad_norm : float, default 0.5
        Per-sample clipping norm ``C``.
    epochs : float, default 50
        ``T = ceil(epochs * int(1 / q))`` DP-SGD steps
        (``dp_sgd_recipe()``).
    init_fraction : float, default 0.2
        Share of epsilon spent on the DP class-mean initialisation.
    init_mechanism : {"gaussian", "laplace"}, default "gaussian"
        The noise of the initialisation's class sums: the Gaussian mechanism on their l2
        sensitivity ``sqrt(d)`` at the run's ``delta``, or Laplace on their l1 sensitivity
        ``d`` (Brinkrolf 2023), which puts far more noise on each coordinate as ``d``
        grows; the ledger composes either exactly. Below an epsilon of about 0.01 the
        ledger's PLD grid over-estimates the Gaussian mechanism's share; use
        ``"laplace"`` there. Why the default: docs/dpsgd.md ("Defaults chosen on
        development sets").
    calibration : {"ledger", "paper"}, default "ledger"
        ``"ledger"``: the smallest noise multiplier for which the ledger certifies the
        whole run at ``(epsilon, delta)``. ``"paper"``: the noise multiplier of
        Brinkrolf, Göpfert & Hammer (2019); ``epsilon_`` then reports what the ledger
        certifies for it.
    bounds : (lower, upper) or None, default None
        Public bounds of the features (scalars or per-feature arrays), mapped onto
        ``[-1, 1]``; records outside are clipped. None: the data are in ``[-1, 1]^d``
        already.
    classes : array-like or None, default None
        The public set of class labels (one prototype group per class, in sorted
        order). A class without records still gets its prototypes from the noisy DP
        initialisation. None reads the set from ``y`` with a
        ``PrivacyLeakWarning``: the released model then shows
        which labels the private data contain.
    clipping : {"joint", "per_parameter"}, default "joint"
        ``"joint"``: the per-sample gradient of the prototypes and the local Omegas
        together is clipped to ``C``. ``"per_parameter"``: each part is clipped to
        ``C / sqrt(2)`` (same sensitivity, same noise).
    engine : {"fused", "opacus"}, default "fused"
        ``"fused"`` runs Opacus' DP-SGD step (Poisson sampling, per-sample clipping,
        Gaussian noise, division by the expected batch) directly on tensors with the
        closed-form gradient norms (``dp_proto.lvq.private.fused``); ``"opacus"`` goes
        through Opacus' ``PrivacyEngine``. Same guarantee either way; epoch times of
        both: docs/dpsgd.md ("Reproduced results").
    grad_sample_mode : {"hooks", "ghost", "functorch"}, default "hooks"
        How Opacus computes per-sample gradients (``engine="opacus"`` only; ``"ghost"``
        needs ``dtype="float64"``).
    secure_mode : bool, default False
        Noise read from ``os.urandom`` directly (initialisation and DP-SGD; batch
        membership from a generator seeded by it). The Opacus engine needs Opacus'
        ``torchcsprng`` package for this.
    noise_seed : int or None, default None
        None: noise and Poisson sampling from a generator whose whole state comes from
        fresh operating-system entropy (``dp_proto.privacy.randomness``). An int
        reproduces the private fit exactly, for tests and benchmarks: it warns
        ``PrivacyLeakWarning`` and the ledger's summary says
        ``"noise": "reproducible"`` (whoever knows the seed can remove the noise).
    ledger : SharedLedger, optional
        A budget shared by several fits (model selection: ``cross_val_score``,
        ``GridSearchCV``): the fit checks its whole planned spend against it before it
        reads the data (``PrivacyBudgetExceededError`` past the shared budget) and records
        its events there afterwards. ``ledger_`` stays this fit's own ledger.
    rank : int or None, default None
        Rows of ``Omega (r, d)``; None means ``r = d``.
    omega_init : {"identity", "scaled_identity", "random"}, default "identity"
        Initial Omega (``"random"`` draws from ``random_state``, not from the noise).
    normalize_omega : bool, default False
        Rescale every local ``Omega_j`` to ``trace(Lambda_j) = 1`` after every step
        (post-processing; unlike the global case it changes the classifier).
    solver : {"sgd", "adam"}, default "sgd"
        The optimizer applied to the noisy clipped gradient (post-processing). Why SGD:
        docs/dpsgd.md ("Defaults chosen on development sets").
    lr : float, default 0.05
        Step size of ``solver``.
    metric_lr_scale : float, default 1.0
        Learning rate of Omega relative to ``lr``. Every coordinate of Omega gets as
        much noise as a prototype coordinate; a smaller rate keeps the metric's random
        walk short.
    group_lasso : float, default 0.0
        Feature sparsity (Brinkrolf 2023, ch. 5): after every noisy step the group
        soft-threshold of the metric's feature columns (``fit_dp_sgd``), so unused
        features become exactly zero (``selected_features_``, ``sparsity_``).
        Post-processing of the released iterates: the guarantee and the privacy plan do
        not change.
    average_last : float in [0, 1), default 0.0
        Release the mean of the iterates of the last ``average_last`` share of the steps
        (post-processing; 0 releases the last iterate).
    transfer_fn : {"identity", "sigmoid"}, default "identity"
        Transfer of the GLVQ cost; the default is the non-private model's identity
        (docs/dpsgd.md, "Defaults chosen on development sets").
    beta : float, default 1.0
        Slope of the sigmoid transfer.
    random_state : int, RandomState or None, default None
        Non-private randomness only (a random Omega initialisation); never the noise.
    verbose : int or None, default None
        A progress bar over the DP-SGD epochs on stderr, shown once the fit has run for
        two seconds (it counts planned epochs, a public quantity): None in interactive use
        only (a terminal or a notebook), 0 never, 1 or more always.
    device : str, default "cpu"
        Torch device of the training.
    dtype : {"float64", "float32"}, default "float64"
        Torch dtype of the fitted model. DP-SGD runs the prototype layer in float64
        either way, where the clipped sum's sensitivity bound is proved
        (docs/privacy-model.md), and casts the trained parameters to ``dtype``.

    Attributes
    ----------
    classes_ : ndarray (c,)
        The class labels (``classes``, sorted).
    prototypes_ : ndarray (W, d)
        Released prototypes, in the original feature units.
    prototype_labels_ : ndarray (W,)
        Class label of every prototype.
    omega_ : ndarray (W, r, d)
        Released local projections, one per prototype (mapped units).
    lambda_ : ndarray (W, d, d)
        The local relevance matrices.
    n_features_in_ : int
        Number of features seen in ``fit``.
    epsilon_ : float
        What the ledger certifies at ``delta``.
    privacy_ : dict
        The ledger's summary (also stored on ``model_``).
    ledger_ : PrivacyLedger
        Every release of the run: the DP initialisation's counts and sums, the DP-SGD steps.
    class_counts_ : ndarray (c,)
        The DP initialisation's noisy class counts (discrete Laplace; may be negative),
        released under its ``dp_init/class_counts`` event; federated merging weights
        the nodes' prototypes by them.
    noise_multiplier_ : float
        Noise multiplier ``sigma`` of the DP-SGD steps.
    sampling_rate_ : float
        The Poisson sampling rate ``q``.
    expected_batch_size_ : float
        The public normaliser ``q n~``, ``n~`` the sum of the initialisation's noisy class
        counts (never the private ``q n``).
    n_iter_ : int
        DP-SGD steps taken.
    stopped_by_budget_ : bool
        Whether the ledger's budget stopped training between epochs.
    privacy_scope_ : str
        What the guarantee covers (``FIT_SCOPE``: the records passed to ``fit``).
    scaler_ : PublicBoundsScaler
        The public map of ``bounds`` onto ``[-1, 1]^d``.
    model_ : PrototypeModel
        The trained torch model (in the mapped units).
    curator_ : dict
        Curator-only, outside the guarantee (``num_clipped``: records that lay outside
        ``bounds``): ``del est.curator_`` before pickling a fitted estimator;
        ``save_release`` leaves it out.

    Notes
    -----
    Unlike the non-private models there is no ``loss_``: a training loss would be a
    release about the private data outside the ledger. The noisy gradient sum is divided
    by the public ``expected_batch_size_``, never by the private ``q n`` that Opacus
    would use.

    References
    ----------
    Brinkrolf, Göpfert & Hammer (2019). Differential privacy for learning vector
    quantization. *Neurocomputing* 342.

    Brinkrolf (2023). *Learning Vector Quantization for the Real-World: Privacy,
    Robustness, and Sparsity*. Dissertation, Bielefeld University.

    Abadi et al. (2016). Deep learning with differential privacy. *ACM CCS 2016*.

    Examples
    --------
    >>> from dp_proto.lvq.private import DPLGMLVQ
    >>> model = DPLGMLVQ(epsilon=1.0, bounds=(0, 16), classes=range(10), sampling_rate=0.1, epochs=2)
    >>> recipe = model.dp_sgd_recipe()  # the public recipe, before any data are seen
    >>> recipe.steps, recipe.plan.init_epsilon
    (20, 0.2)
    """

    def __init__(
        self,
        prototypes_per_class=1,
        *,
        epsilon=1.0,
        delta=1e-5,
        sampling_rate=0.01,
        max_grad_norm=0.5,
        epochs=50,
        init_fraction=0.2,
        init_mechanism="gaussian",
        calibration="ledger",
        bounds=None,
        classes=None,
        clipping="joint",
        engine="fused",
        grad_sample_mode="hooks",
        secure_mode=False,
        noise_seed=None,
        ledger=None,
        rank=None,
        omega_init="identity",
        normalize_omega=False,
        solver="sgd",
        lr=0.05,
        metric_lr_scale=1.0,
        group_lasso=0.0,
        average_last=0.0,
        transfer_fn="identity",
        beta=1.0,
        random_state=None,
        verbose=None,
        device="cpu",
        dtype="float64",
    ):
        _set(
            self,
            prototypes_per_class=prototypes_per_class,
            epsilon=epsilon,
            delta=delta,
            sampling_rate=sampling_rate,
            max_grad_norm=max_grad_norm,
            epochs=epochs,
            init_fraction=init_fraction,
            init_mechanism=init_mechanism,
            calibration=calibration,
            bounds=bounds,
            classes=classes,
            clipping=clipping,
            engine=engine,
            grad_sample_mode=grad_sample_mode,
            secure_mode=secure_mode,
            noise_seed=noise_seed,
            ledger=ledger,
            rank=rank,
            omega_init=omega_init,
            normalize_omega=normalize_omega,
            solver=solver,
            lr=lr,
            metric_lr_scale=metric_lr_scale,
            group_lasso=group_lasso,
            average_last=average_last,
            transfer_fn=transfer_fn,
            beta=beta,
            random_state=random_state,
            verbose=verbose,
            device=device,
            dtype=dtype,
        )
