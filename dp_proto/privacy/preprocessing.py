"""Private preprocessing: a DP standard scaler, DP-PCA, and a pipeline with one budget.

A model trained with DP-SGD on features that were z-scored or projected with statistics
of the private data leaks through those statistics. These transformers release them
with noise instead, each charged to a ledger, so that a whole pipeline has one
guarantee (scikit-learn API)::

    pipe = DPPipeline(
        [("scale", DPStandardScaler(bounds=(0, 255), epsilon=0.2)),
         ("pca", DPPCA(n_components=30, epsilon=0.3, norm_bound=1.0)),
         ("gmlvq", DPGMLVQ(epsilon=0.5, delta=1e-5, bounds=(-1, 1), classes=range(10)))],
        budget=(1.0, 1e-5),
    ).fit(X, y)
    pipe.ledger_.get_epsilon()        # the guarantee of all three releases together

``DPStandardScaler``: each feature clipped into its public bounds; the record count,
the per-feature sums and sums of squares released by *one* Gaussian mechanism (each
block scaled to l2 sensitivity 1, so the vector has sensitivity sqrt(3) under add/remove
one record); mean and variance from them (post-processing).

``DPPCA``: rows clipped to l2 norm ``norm_bound`` = C; the upper triangle of the second
moment matrix ``A = sum_i x_i x_i^T`` (off-diagonal entries weighted by sqrt(2))
released with Gaussian noise (one record changes it by ``x x^T``, Frobenius norm at most
C^2: "Analyze Gauss", Dwork, Talwar, Thakurta & Zhang 2014) and mirrored; the components are the top-k eigenvectors of the noisy
symmetric matrix, orthonormal by construction. ``A`` is not centred: put the scaler
first (its output is centred up to its noise).

``DPPipeline``: a ``sklearn.pipeline.Pipeline`` whose ``budget=(epsilon, delta)`` (or
``ledger=SharedLedger``) covers every step. Each step is private (it plans its releases,
``planned_privacy_events``), a public map (``PublicMap``) or post-processing of earlier
releases (``PostProcessing``); any other step would learn from the private records
without noise and is refused before the data are read. Before the first step reads the
data, the planned releases of all steps are checked against the budget, so a pipeline
that would exceed it is refused before any noise is drawn; every release of every step
ends up on the pipeline's ledger.

Every release goes through ``gaussian_mechanism`` (float-safe discrete Gaussian noise on
a public grid by default), so the neighbour check of ``dp_proto.privacy.testing`` sees it.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import torch
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import Pipeline
from sklearn.utils import get_tags
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted, validate_data

from dp_proto.exceptions import DataValidationError
from dp_proto.privacy.calibration import check_delta, check_epsilon
from dp_proto.privacy.clipping import clip_box, clip_l2
from dp_proto.privacy.curator import curator_outside_bounds
from dp_proto.privacy.events import PrivacyEvent
from dp_proto.privacy.ledger import PrivacyLedger, SharedLedger, check_shared_ledger
from dp_proto.privacy.mechanisms import gaussian_mechanism, plan_gaussian
from dp_proto.privacy.randomness import noise_generator
from dp_proto.privacy.session import record_fit, within_shared_budget

__all__ = ["DPPCA", "DPPipeline", "DPStandardScaler", "PostProcessing", "PublicMap"]


def _finite_rows(X: Any, owner: str, estimator: BaseEstimator, *, reset: bool) -> np.ndarray:
    X = validate_data(estimator, X, reset=reset, dtype=np.float64, ensure_all_finite=False)
    if not np.isfinite(X).all():
        raise DataValidationError(f"{owner}: X holds NaN or inf; remove or impute those records first")
    return X


def _planned(estimator: Any, sensitivity: float, numel: int, name: str) -> tuple[PrivacyEvent, ...]:
    """The ledger event of one Gaussian release of ``numel`` values (none for sensitivity 0)."""
    event = plan_gaussian(estimator.epsilon, estimator.delta, sensitivity, numel, name=name).event
    return () if event is None else (event,)


def _release(
    estimator: Any, value: torch.Tensor, sensitivity: float, name: str, owner: str
) -> tuple[torch.Tensor, PrivacyLedger]:
    """``value`` through one Gaussian mechanism at the estimator's (epsilon, delta), on its
    own ledger; a shared ledger checks the release before the noise and records it after."""
    shared = estimator.ledger
    if shared is not None:
        shared.check(*_planned(estimator, sensitivity, value.numel(), name))
    ledger = PrivacyLedger(budget=(estimator.epsilon, estimator.delta), default_delta=estimator.delta)
    generator = None if estimator.secure_mode else noise_generator(estimator.noise_seed, owner=owner)
    noisy = gaussian_mechanism(
        value,
        sensitivity,
        estimator.epsilon,
        estimator.delta,
        ledger=ledger,
        name=name,
        generator=generator,
        secure_mode=estimator.secure_mode,
    )
    if shared is not None:
        shared.spend(*ledger.events)
    record_fit(estimator, ledger, shared=shared is not None, delta=estimator.delta)
    return noisy, ledger


class DPStandardScaler(TransformerMixin, BaseEstimator):
    """Standardise features with a DP mean and standard deviation from public bounds.

    Parameters
    ----------
    bounds : (lower, upper)
        Public bounds of every feature: numbers or arrays of shape ``(d,)`` fixed without
        looking at the data (a pixel's 0..255, a sensor's range). Required: bounds read
        from the data would leak.
    epsilon, delta : float
        The release's (epsilon, delta) (``delta`` in (0, 1)).
    ledger : SharedLedger, optional
        A ledger shared with the other steps of a pipeline: checked before the noise,
        charged after (``DPPipeline`` sets it).
    min_std_fraction : float, default 1e-3
        The released deviation is at least this fraction of the feature's half-range
        (noise can make a variance estimate 0 or negative).
    secure_mode : bool, default False
        Noise from ``os.urandom``.
    noise_seed : int, optional
        Reproducible noise (tests only; warns ``PrivacyLeakWarning``).

    Attributes
    ----------
    mean_, scale_ : ndarray of shape (d,)
        The released mean and standard deviation.
    noisy_count_ : float
        The released record count (at least 1).
    output_bounds_ : (ndarray (d,), ndarray (d,))
        ``transform``'s output range: the bounds, standardised (public).
    ledger_ : PrivacyLedger
        This release's ledger; ``privacy_`` its summary.
    """

    def __init__(
        self,
        bounds: Any = None,
        epsilon: float = 1.0,
        delta: float = 1e-5,
        *,
        ledger: SharedLedger | None = None,
        min_std_fraction: float = 1e-3,
        secure_mode: bool = False,
        noise_seed: int | None = None,
    ) -> None:
        self.bounds = bounds
        self.epsilon = epsilon
        self.delta = delta
        self.ledger = ledger
        self.min_std_fraction = min_std_fraction
        self.secure_mode = secure_mode
        self.noise_seed = noise_seed

    #: l2 sensitivity of the released vector [count, sums / ||r||, centred squares / ||r^2 / 2||]
    SENSITIVITY = math.sqrt(3.0)
    RELEASE = "dp_standard_scaler"

    def _check_params(self) -> None:
        check_epsilon(self.epsilon)
        check_delta(self.delta, allow_zero=False)
        check_shared_ledger(self.ledger, type(self).__name__)
        if self.bounds is None:
            raise ValueError(
                "DPStandardScaler needs public bounds=(lower, upper), fixed without looking at the data: bounds "
                "read from the private data would leak through the released mean and scale"
            )
        if not 0 < self.min_std_fraction <= 1:
            raise ValueError(f"min_std_fraction must lie in (0, 1], got {self.min_std_fraction!r}")

    def _bounds(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        try:
            lower, upper = self.bounds
        except (TypeError, ValueError):
            raise ValueError(f"bounds must be a pair (lower, upper), got {self.bounds!r}") from None
        lower = np.broadcast_to(np.asarray(lower, dtype=np.float64), (d,)).copy()
        upper = np.broadcast_to(np.asarray(upper, dtype=np.float64), (d,)).copy()
        if not (np.isfinite(lower).all() and np.isfinite(upper).all() and (lower < upper).all()):
            raise ValueError("bounds must be finite with lower < upper in every feature")
        return lower, upper

    def planned_privacy_events(self, n_features: int) -> tuple[PrivacyEvent, ...]:
        """The releases ``fit`` makes on ``n_features`` features (public settings only)."""
        self._check_params()
        return _planned(self, self.SENSITIVITY, 1 + 2 * n_features, self.RELEASE)

    def n_features_out(self, n_features: int) -> int:
        return n_features

    def fit(self, X: Any, y: Any = None) -> DPStandardScaler:
        """Release the mean and deviation of ``X (n, d)``; ``y`` is ignored."""
        self._check_params()
        X = _finite_rows(X, "DPStandardScaler", self, reset=True)
        d = X.shape[1]
        lower, upper = self._bounds(d)
        centre, half = (lower + upper) / 2, (upper - lower) / 2
        clipped = clip_box(torch.as_tensor(X), torch.as_tensor(lower), torch.as_tensor(upper))
        curator_outside_bounds(
            self, clipped.num_clipped, len(X), entries=(clipped.num_entries_clipped, math.prod(X.shape))
        )
        xc = clipped.values - torch.as_tensor(centre)  # |xc_j| <= half_j
        half_t = torch.as_tensor(half)
        squares = xc**2 - half_t**2 / 2  # |.| <= half_j^2 / 2
        norm_sum, norm_sq = float(half_t.norm()), float((half_t**2 / 2).norm())
        value = torch.cat(
            [torch.tensor([float(len(X))], dtype=torch.float64), xc.sum(0) / norm_sum, squares.sum(0) / norm_sq]
        )
        noisy, self.ledger_ = _release(self, value, self.SENSITIVITY, self.RELEASE, "DPStandardScaler")
        count = max(float(noisy[0]), 1.0)
        mean_c = (noisy[1 : 1 + d] * norm_sum / count).clamp(-half_t, half_t)
        second = (noisy[1 + d :] * norm_sq / count + half_t**2 / 2).clamp(torch.zeros_like(half_t), half_t**2)
        floor = (self.min_std_fraction * half_t) ** 2
        variance = torch.maximum(second - mean_c**2, floor).minimum(half_t**2)
        self.noisy_count_ = count
        self.mean_ = (mean_c + torch.as_tensor(centre)).numpy()
        self.scale_ = variance.sqrt().numpy()
        self.lower_, self.upper_ = lower, upper
        self.output_bounds_ = ((lower - self.mean_) / self.scale_, (upper - self.mean_) / self.scale_)
        self.privacy_ = self.ledger_.summary(self.delta)
        return self

    def transform(self, X: Any) -> np.ndarray:
        """``(clip(X, bounds) - mean_) / scale_``, shape ``(n, d)``: the clip keeps the
        output inside ``output_bounds_`` (a public map, no privacy cost)."""
        check_is_fitted(self, "mean_")
        X = _finite_rows(X, "DPStandardScaler", self, reset=False)
        return (np.clip(X, self.lower_, self.upper_) - self.mean_) / self.scale_


class DPPCA(TransformerMixin, BaseEstimator):
    """Project onto the top principal directions of a noisy second-moment matrix
    (Analyze Gauss, Dwork, Talwar, Thakurta & Zhang 2014).

    Parameters
    ----------
    n_components : int
        ``k``, at most the number of features.
    epsilon, delta : float
        The release's (epsilon, delta).
    norm_bound : float, default 1.0
        ``C``: every row is scaled to l2 norm at most C before the release (and in
        ``transform``), so one record moves ``A = X^T X`` by at most C^2 (Frobenius).
    ledger, secure_mode, noise_seed
        As for ``DPStandardScaler``.

    Attributes
    ----------
    components_ : ndarray of shape (k, d)
        Orthonormal rows, the eigenvectors of the noisy ``A`` by decreasing eigenvalue.
    explained_variance_ : ndarray of shape (k,)
        Their eigenvalues in the noisy ``A``: sums over the records, not means (no count
        is released).
    output_bounds_ : (float, float)
        ``(-C, C)``: every coordinate of ``transform``'s output lies in it.
    ledger_ : PrivacyLedger
    """

    RELEASE = "dp_pca_second_moment"

    def __init__(
        self,
        n_components: int = 2,
        epsilon: float = 1.0,
        delta: float = 1e-5,
        *,
        norm_bound: float = 1.0,
        ledger: SharedLedger | None = None,
        secure_mode: bool = False,
        noise_seed: int | None = None,
    ) -> None:
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.norm_bound = norm_bound
        self.ledger = ledger
        self.secure_mode = secure_mode
        self.noise_seed = noise_seed

    def _check_params(self, n_features: int) -> None:
        check_epsilon(self.epsilon)
        check_delta(self.delta, allow_zero=False)
        check_shared_ledger(self.ledger, type(self).__name__)
        k = self.n_components
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n_features:
            raise ValueError(f"n_components must be an int in 1..{n_features} (the number of features), got {k!r}")
        if not (math.isfinite(self.norm_bound) and self.norm_bound > 0):
            raise ValueError(f"norm_bound must be a finite number > 0, got {self.norm_bound!r}")

    def planned_privacy_events(self, n_features: int) -> tuple[PrivacyEvent, ...]:
        self._check_params(n_features)
        return _planned(self, float(self.norm_bound) ** 2, n_features * (n_features + 1) // 2, self.RELEASE)

    def n_features_out(self, n_features: int) -> int:
        return int(self.n_components)

    def fit(self, X: Any, y: Any = None) -> DPPCA:
        """Release the top-k directions of ``X (n, d)``; ``y`` is ignored."""
        X = _finite_rows(X, "DPPCA", self, reset=True)
        d = X.shape[1]
        self._check_params(d)
        clipped = clip_l2(torch.as_tensor(X), float(self.norm_bound))
        curator_outside_bounds(self, clipped.num_clipped, len(X), bounds="norm bound")
        rows, cols = torch.triu_indices(d, d)
        # the upper triangle with the off-diagonal entries times sqrt(2): its l2 norm is
        # ||x x^T||_F = ||x||^2 <= C^2 for one record's x x^T, and that bound is reached by
        # every clipped row (each off-diagonal pair then gets noise / sqrt(2))
        weight = torch.where(rows == cols, 1.0, math.sqrt(2.0)).to(torch.float64)
        second_moment = clipped.values.T @ clipped.values
        noisy, self.ledger_ = _release(
            self, second_moment[rows, cols] * weight, float(self.norm_bound) ** 2, self.RELEASE, "DPPCA"
        )
        symmetric = torch.zeros(d, d, dtype=torch.float64)
        symmetric[rows, cols] = noisy / weight
        symmetric[cols, rows] = noisy / weight
        values, vectors = torch.linalg.eigh(symmetric)  # ascending
        top = torch.argsort(values, descending=True)[: self.n_components]
        self.components_ = vectors[:, top].T.contiguous().numpy()
        self.explained_variance_ = values[top].numpy()
        self.output_bounds_ = (-float(self.norm_bound), float(self.norm_bound))
        self.privacy_ = self.ledger_.summary(self.delta)
        return self

    def transform(self, X: Any) -> np.ndarray:
        """Rows scaled to norm at most ``norm_bound``, then projected: ``(n, k)``."""
        check_is_fitted(self, "components_")
        X = _finite_rows(X, "DPPCA", self, reset=False)
        return clip_l2(torch.as_tensor(X), float(self.norm_bound)).values.numpy() @ self.components_.T


#: The roles of a ``DPPipeline`` step (``DPPipeline.step_roles_``).
PRIVATE = "private"
PUBLIC_MAP = "public map"
POST_PROCESSING = "post-processing"
PASSTHROUGH = "passthrough"

#: Library transformers that learn nothing from the records and say so in their
#: documentation; recognised by their exact class (a subclass may learn in its own ``fit``).
_LIBRARY_PUBLIC_MAPS = frozenset({"dp_proto.features.normalize.GroupNormalizer"})


def _qualified_name(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _needs_fit(transformer: Any) -> bool:
    """Whether ``transformer`` must be fitted before it transforms (scikit-learn's
    ``requires_fit`` tag; an object without ``fit`` learns nothing)."""
    if not hasattr(transformer, "fit"):
        return False
    try:
        return bool(get_tags(transformer).requires_fit)
    except (AttributeError, TypeError):  # not a scikit-learn estimator: assume it learns in fit
        return True


def _is_fitted(transformer: Any) -> bool:
    try:
        check_is_fitted(transformer)
    except (NotFittedError, TypeError):
        return False
    return True


class PublicMap(TransformerMixin, BaseEstimator):
    """Declare a ``DPPipeline`` step a public map: a transform that learns nothing from the
    records the pipeline is fitted on, so it costs no privacy budget.

    The wrapped ``transformer`` is never fitted on the pipeline's data: ``fit`` notes the
    input width (the shape of ``X``, no value) and ``transform`` applies the transformer as
    it is. So it must be one of

    * a function ``X (n, d) -> (n, k)`` fixed without looking at the private data
      (``np.log1p``, a fixed projection, a per-record normalisation);
    * a transformer that needs no fit (scikit-learn's ``requires_fit`` tag is False:
      ``FunctionTransformer``, ``Normalizer``);
    * a transformer fitted beforehand on public data (a ``StandardScaler`` fitted on a
      public reference set).

    An unfitted transformer that learns from data (``StandardScaler()``, ``PCA()``) is
    refused with ``TypeError`` when the pipeline is built and when it is fitted: fitted on
    the private records it would publish their statistics without noise; ``DPStandardScaler``
    and ``DPPCA`` release them privately instead. Whether the function or the fitted
    transformer really is public is the caller's declaration: nothing can tell a
    transformer fitted on the private data from one fitted on public data.

    ``clone`` (model selection) gives a new wrapper around the same transformer, so a
    transformer fitted on public data stays fitted.

    Parameters
    ----------
    transformer : callable or transformer
        The map: a function of ``X``, or an object with ``transform``.
    output_width : int, callable or None, default None
        The number of output features for ``n_features`` input features, which
        ``DPPipeline`` needs to plan the private steps after this one: an int, a function
        ``n_features -> int``, or None: the transformer's own ``n_features_out`` method if
        it has one, else the width of its output on one row of zeros (a public input).

    Attributes
    ----------
    n_features_in_ : int
        The input width seen by ``fit``.
    """

    #: The step's role in ``DPPipeline.step_roles_``.
    role: ClassVar[str] = PUBLIC_MAP

    def __init__(self, transformer: Any, *, output_width: Any = None) -> None:
        self.transformer = transformer
        self.output_width = output_width

    def __sklearn_clone__(self) -> PublicMap:
        """A new, unfitted wrapper around the same ``transformer`` (cloning it would unfit a
        transformer fitted on public data)."""
        return type(self)(self.transformer, output_width=self.output_width)

    def check_declaration(self, step: str | None = None) -> None:
        """``TypeError`` unless ``transformer`` can be applied without fitting it on the
        pipeline's data (a function, a transformer without a fit, or a fitted transformer).

        Parameters
        ----------
        step : str, optional
            The step's name in the pipeline, for the message.
        """
        t, kind = self.transformer, type(self).__name__
        where = f"DPPipeline step {step!r}: " if step is not None else ""
        if isinstance(t, (str, type)) or t is None or not (hasattr(t, "transform") or callable(t)):
            raise TypeError(f"{where}{kind} needs a function X -> X' or a transformer instance, got {t!r}")
        if hasattr(t, "transform") and _needs_fit(t) and not _is_fitted(t):
            name = type(t).__name__
            if hasattr(t, "planned_privacy_events"):
                advice = (
                    f"{name} is a private step: put it in the pipeline itself, where its releases are planned and "
                    "charged to the budget"
                )
            else:
                advice = (
                    f"{name} learns from the data it is fitted on, and fitted on the private records it would "
                    f"publish their statistics without noise. Fit it on public data first ({kind}({name}(...)"
                    ".fit(X_public))), or use a private step that releases them with noise (DPStandardScaler, DPPCA)"
                )
            raise TypeError(f"{where}{kind}({name}) is not fitted and the pipeline never fits it: {advice}")

    def fit(self, X: Any, y: Any = None) -> PublicMap:
        """Check the declaration and note the width of ``X (n, d)``; ``transformer`` is not
        fitted and no value of ``X`` or ``y`` is read."""
        self.check_declaration()
        shape = np.shape(X)
        if len(shape) != 2:
            raise ValueError(f"{type(self).__name__} expects X of shape (n, d), got a {len(shape)}-D array")
        self.n_features_in_ = int(shape[1])
        return self

    def _apply(self, X: Any) -> Any:
        t = self.transformer
        return t.transform(X) if hasattr(t, "transform") else t(X)

    def transform(self, X: Any) -> Any:
        """``transformer`` applied to ``X`` as it is."""
        check_is_fitted(self, "n_features_in_")
        return self._apply(X)

    def n_features_out(self, n_features: int) -> int:
        """The output width for ``n_features`` input features (see ``output_width``)."""
        kind = type(self).__name__
        width = self.output_width
        if width is None and hasattr(self.transformer, "n_features_out"):
            width = self.transformer.n_features_out
        if callable(width):
            width = width(n_features)
        if width is None:
            try:
                width = np.shape(self._apply(np.zeros((1, n_features))))[1]
            except Exception as err:  # noqa: BLE001 - whatever failed, the width has to be given
                raise ValueError(
                    f"{kind}: the output width on {n_features} features is unknown (the map failed on a row of "
                    f"zeros: {err}); pass output_width=(an int or a function n_features -> int)"
                ) from err
        if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width < 1:
            raise ValueError(f"{kind}: output_width must give an int >= 1, got {width!r}")
        return int(width)


class PostProcessing(PublicMap):
    """Declare a ``DPPipeline`` step post-processing of outputs released before: a
    transformer built from released (noisy) values only, applied as it is.

    For example a ``DPStandardScaler`` or ``DPPCA`` fitted and released earlier, or a map
    computed from their released attributes. The mechanics are those of ``PublicMap``
    (never fitted on the pipeline's records; refused unless fitted or stateless), and the
    step costs no budget here: post-processing adds nothing to the releases it was built
    from, which were charged where they were made. They are on this pipeline's ledger only
    if they spent on it (fit both with one ``SharedLedger``, ``DPPipeline(ledger=shared)``).

    Parameters
    ----------
    transformer : callable or transformer
        The map (see ``PublicMap``).
    output_width : int, callable or None, default None
        As for ``PublicMap``.

    Attributes
    ----------
    n_features_in_ : int
        The input width seen by ``fit``.
    """

    role: ClassVar[str] = POST_PROCESSING


def _step_role(name: str, step: Any) -> str:
    """The role of pipeline step ``name``; ``TypeError`` for a step that declares none."""
    if step is None or (isinstance(step, str) and step == "passthrough"):
        return PASSTHROUGH
    if isinstance(step, PublicMap):
        step.check_declaration(name)
        return step.role
    if callable(getattr(step, "planned_privacy_events", None)):
        return PRIVATE
    if _qualified_name(step) in _LIBRARY_PUBLIC_MAPS:
        return PUBLIC_MAP
    raise TypeError(
        f"DPPipeline step {name!r} ({type(step).__name__}) is neither private nor declared public: the pipeline "
        "fits every step on the private records, and this one would learn from them without noise and outside "
        "the budget (a StandardScaler's mean, a LogisticRegression's coef_), so the pipeline's epsilon would not "
        "cover it. Use a private step (one with planned_privacy_events: DPStandardScaler, DPPCA, DPGLVQ, DPGMLVQ, "
        "...), declare a data-independent map as PublicMap(...) (a fixed function, a transformer without a fit "
        "such as FunctionTransformer, or one fitted on public data), or a map of outputs released before as "
        "PostProcessing(...)"
    )


class DPPipeline(Pipeline):
    """A ``Pipeline`` with one privacy budget, in which every step is accounted for.

    Each step must say what it does with the private records; a step that does not is
    refused with ``TypeError`` naming it, when the pipeline is built and again when ``fit``
    starts, before ``X`` is touched:

    * a private step: it has ``planned_privacy_events(n_features)``, the releases its fit
      makes, from public settings only. Every DP estimator and transformer of the library
      is one (``DPStandardScaler``, ``DPPCA``, ``DPGLVQ``, ``DPGMLVQ``, ``DPLGMLVQ``,
      ``SubsampleAggregateGLVQ``, ``DPPairwiseGMLVQ``, ``PrivateSVDD``,
      ``PrivateSVDDClassifier``, ``PrivateSVMWeight``, ``PrivateSVMOutput``);
    * a public map: ``PublicMap(...)`` (a fixed function, a transformer without a fit, or
      one fitted on public data), ``None`` or ``"passthrough"``, or a library transformer
      documented to learn nothing from the records (``GroupNormalizer``);
    * post-processing of outputs released before: ``PostProcessing(...)``.

    Anything else (``StandardScaler()``, ``PCA()``, ``LogisticRegression()``) would be
    fitted on the private records without noise, and the pipeline's epsilon would certify
    a model that leaks them.

    ``fit`` (and ``fit_transform``, ``fit_predict``) then checks the planned releases of
    all private steps together against the budget, refusing the whole pipeline before any
    step reads the data or draws noise (``PrivacyBudgetExceededError``); gives every private
    step with a ``ledger`` parameter the shared ledger, on which it records its releases;
    and records the ``ledger_`` of a private step without one (``SubsampleAggregateGLVQ``)
    once that step is fitted. ``ledger_`` thus holds every release of every step, and its
    epsilon is their composition.

    Parameters
    ----------
    steps : list of (name, estimator)
        As for ``Pipeline``, each step private, a public map or post-processing.
    budget : (epsilon, delta), optional
        The budget of the whole pipeline: ``fit`` makes a new ``SharedLedger`` with it.
    ledger : SharedLedger, optional
        Or an existing shared ledger (e.g. of a model selection around the pipeline).
        Exactly one of ``budget`` and ``ledger``.
    memory : None
        Must be None (``ValueError`` otherwise): a cached step would be loaded instead of
        fitted, its release replayed without being charged to this pipeline's ledger.
    verbose : bool, default False
        As for ``Pipeline``.

    Attributes
    ----------
    ledger_ : SharedLedger
        Every step's releases; ``ledger_.get_epsilon()`` is the pipeline's guarantee.
    privacy_ : dict
        Its summary, composed when read (an interactive final step such as
        ``PrivateSVMOutput`` charges every answered query to ``ledger_``).
    step_roles_ : dict
        The role of every step: ``"private"``, ``"public map"``, ``"post-processing"`` or
        ``"passthrough"``.
    """

    ledger_: SharedLedger
    step_roles_: dict[str, str]

    def __init__(
        self,
        steps: list,
        *,
        budget: tuple[float, float] | None = None,
        ledger: SharedLedger | None = None,
        memory: Any = None,
        verbose: bool = False,
    ) -> None:
        super().__init__(steps, memory=memory, verbose=verbose)
        self.budget = budget
        self.ledger = ledger
        self._step_roles()  # refuse an undeclared step as early as possible

    def _step_roles(self) -> dict[str, str]:
        """Every step's role; ``TypeError`` for an undeclared step, ``ValueError`` for a cache."""
        if self.memory is not None:
            raise ValueError(
                "DPPipeline takes no memory: a cached step would be loaded instead of fitted, and its release "
                "replayed without being charged to the pipeline's ledger"
            )
        return {name: _step_role(name, step) for name, step in self.steps}

    def _shared_ledger(self) -> SharedLedger:
        if (self.budget is None) == (self.ledger is None):
            raise ValueError("DPPipeline needs exactly one of budget=(epsilon, delta) and ledger=SharedLedger")
        if self.ledger is not None:
            check_shared_ledger(self.ledger, "DPPipeline")
            return self.ledger
        return SharedLedger(budget=tuple(self.budget))  # type: ignore[arg-type]

    def planned_privacy_events(self, n_features: int) -> tuple[PrivacyEvent, ...]:
        """Every private step's planned releases in order, each on the width its input will
        have (public settings only); ``TypeError`` for an undeclared step."""
        roles = self._step_roles()
        events: list[PrivacyEvent] = []
        width = n_features
        for index, (name, step) in enumerate(self.steps):
            if roles[name] == PASSTHROUGH:
                continue
            if roles[name] == PRIVATE:
                events += step.planned_privacy_events(width)
            if hasattr(step, "n_features_out"):
                width = step.n_features_out(width)
            elif index < len(self.steps) - 1:
                raise ValueError(
                    f"DPPipeline cannot plan past step {name!r} ({type(step).__name__}): it does not say its output "
                    "width (n_features_out); put the private steps before it, give it the method, or wrap it as "
                    "PublicMap(..., output_width=...)"
                )
        return tuple(events)

    def _begin_fit(self, X: Any) -> tuple[SharedLedger, dict[str, str]]:
        """Refuse undeclared steps and a plan past the budget, before any step reads ``X``;
        then hand the shared ledger to the private steps."""
        roles = self._step_roles()  # before X is touched
        shared = self._shared_ledger()
        if np.ndim(X) != 2:
            raise ValueError(f"DPPipeline expects X of shape (n, d), got a {np.ndim(X)}-D array")
        shared.check(*self.planned_privacy_events(int(np.shape(X)[1])))  # refuses before any noise
        for name, step in self.steps:
            if roles[name] == PRIVATE and "ledger" in step.get_params(deep=False):
                self.set_params(**{f"{name}__ledger": shared})
        return shared, roles

    def _end_fit(self, shared: SharedLedger, roles: dict[str, str]) -> None:
        """Record the releases of private steps that have no ``ledger`` parameter, and
        where any step's noise came from."""
        for name, step in self.steps:
            if roles[name] != PRIVATE:
                continue
            own = getattr(step, "ledger_", None)
            if "ledger" not in step.get_params(deep=False):
                if own is None:
                    raise RuntimeError(
                        f"DPPipeline step {name!r} ({type(step).__name__}) declared releases but left no ledger_ "
                        "after fit: they cannot be charged to the pipeline's budget"
                    )
                shared.spend(*own.events)
            if own is not None and own is not shared and own.noise is not None:
                shared.note_noise_source(own.noise)
        self.ledger_ = shared
        self.step_roles_ = roles
        # the steps added their events to the session ledger; the pipeline counts as one fit
        record_fit(self, shared, shared=self.ledger is not None, delta=shared.default_delta, add_events=False)

    @property
    def privacy_(self) -> dict[str, Any]:
        """The summary of ``ledger_``, composed now."""
        if "ledger_" not in vars(self):
            raise AttributeError("privacy_: this DPPipeline is not fitted")
        return self.ledger_.summary()

    def fit(self, X: Any, y: Any = None, **params: Any) -> DPPipeline:
        """Check every step and the planned releases against the budget, then fit the steps."""
        shared, roles = self._begin_fit(X)
        with within_shared_budget():  # the steps spend from the pipeline's budget
            super().fit(X, y, **params)
        self._end_fit(shared, roles)
        return self

    def _final_can_fit_transform(self) -> bool:
        final = self._final_estimator
        return final is None or isinstance(final, str) or hasattr(final, "fit_transform") or hasattr(final, "transform")

    @available_if(_final_can_fit_transform)
    def fit_transform(self, X: Any, y: Any = None, **params: Any) -> Any:
        """``fit``, then the transformed ``X`` (one pass, as for ``Pipeline``)."""
        shared, roles = self._begin_fit(X)
        with within_shared_budget():  # the steps spend from the pipeline's budget
            Xt = super().fit_transform(X, y, **params)
        self._end_fit(shared, roles)
        return Xt

    @available_if(lambda self: hasattr(self._final_estimator, "fit_predict"))
    def fit_predict(self, X: Any, y: Any = None, **params: Any) -> Any:
        """``fit``, then the final step's ``fit_predict`` output (as for ``Pipeline``)."""
        shared, roles = self._begin_fit(X)
        with within_shared_budget():  # the steps spend from the pipeline's budget
            predicted = super().fit_predict(X, y, **params)
        self._end_fit(shared, roles)
        return predicted
