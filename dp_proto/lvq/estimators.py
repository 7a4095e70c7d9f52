"""scikit-learn style estimators over the prototype layers.

``GLVQ``, ``GMLVQ`` and ``LGMLVQ`` follow the scikit-learn API (``fit``,
``predict``, ``decision_function``, ``score``, fitted attributes ending in ``_``)
and the parameter names of sklvq where they overlap, so a pipeline that uses
sklvq can switch by changing the import. They train the same
``PrototypeModel`` that the Lightning trainers use; the fitted
torch model is ``model_``. ``save(path)`` writes a fitted estimator in the release
format of ``dp_proto.release`` (``model.safetensors`` and ``manifest.json``, no pickle),
``load(path)`` reads it back.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, cast

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from dp_proto._progress import wants_progress
from dp_proto._threads import fit_threads, step_work
from dp_proto._validation import check_finite_rows, check_labels_known, torch_device, torch_dtype
from dp_proto.exceptions import DataValidationError
from dp_proto.lvq.init import class_mean_prototypes, make_prototype_labels
from dp_proto.lvq.layers import GLVQLayer, GMLVQLayer, LGMLVQLayer
from dp_proto.lvq.model import PrototypeModel, forward_in_dtype
from dp_proto.lvq.release import PublicReleaseHooks, layer_description, model_from_release, model_tensors
from dp_proto.lvq.training import DEFAULT_N_ITER_NO_CHANGE, FitResult, fit_lbfgs, fit_minibatch, resolve_tol
from dp_proto.release import (
    Releasable,
    Release,
    decode_labels,
    encode_hyperparameters,
    encode_labels,
    register_model,
    registered_name,
)

__all__ = ["GLVQ", "GMLVQ", "LGMLVQ"]


def _float64_array(tensor: torch.Tensor) -> np.ndarray:
    """A fitted tensor as a float64 NumPy array (exact for float32 values): the fitted
    attributes have one dtype whatever the training dtype."""
    return tensor.detach().to(device="cpu", dtype=torch.float64).numpy().copy()


class ValidatedClassifierMixin:
    """Input checks and ``score`` shared by the prototype classifiers: ``X`` numeric and
    finite (``DataValidationError`` otherwise), labels unseen during ``fit`` refused."""

    classes_: np.ndarray

    #: Rows a fit needs; a private fit takes 0 (how many records it holds is private).
    _min_fit_samples = 1

    def _check_X(self, X, *, reset: bool, y=None):
        try:
            out = (
                validate_data(
                    self,
                    X,
                    y,
                    reset=reset,
                    dtype=np.float64,
                    ensure_all_finite=False,
                    ensure_min_samples=self._min_fit_samples,
                )
                if y is not None
                else validate_data(self, X, reset=reset, dtype=np.float64, ensure_all_finite=False)
            )
        except ValueError as err:
            if "could not convert" in str(err) or "convert" in str(err) and "float" in str(err):
                raise DataValidationError(f"X must be numeric: {err}") from err
            raise
        check_finite_rows(out[0] if y is not None else out)
        return out

    def score(self, X, y, sample_weight=None) -> float:
        """Mean accuracy; labels unseen during fit raise ``DataValidationError``."""
        check_is_fitted(self)
        check_labels_known(np.asarray(y), self.classes_)
        return super().score(X, y, sample_weight=sample_weight)  # type: ignore[misc]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags


class _LVQBase(ValidatedClassifierMixin, PublicReleaseHooks, Releasable, ClassifierMixin, BaseEstimator):
    """Shared fitting and prediction; subclasses build their prototype layer."""

    def __init__(
        self,
        prototypes_per_class: int | Mapping[Any, int] = 1,
        *,
        solver: str = "lbfgs",
        max_iter: int = 500,
        lr: float = 0.01,
        batch_size: int = 128,
        transfer_fn: str = "identity",
        beta: float = 1.0,
        tol: float | None = None,
        stopping: str = "relative_cost",
        n_iter_no_change: int = DEFAULT_N_ITER_NO_CHANGE,
        warm_start: bool = False,
        random_state: int | np.random.RandomState | None = None,
        verbose: int | None = None,
        device: str = "cpu",
        dtype: str = "float32",
    ) -> None:
        self.prototypes_per_class = prototypes_per_class
        self.solver = solver
        self.max_iter = max_iter
        self.lr = lr
        self.batch_size = batch_size
        self.transfer_fn = transfer_fn
        self.beta = beta
        self.tol = tol
        self.stopping = stopping
        self.n_iter_no_change = n_iter_no_change
        self.warm_start = warm_start
        self.random_state = random_state
        self.verbose = verbose
        self.device = device
        self.dtype = dtype

    # -- hooks -------------------------------------------------------------------------
    def _make_layer(
        self, n_features: int, n_prototypes: int, generator: torch.Generator, tdtype: torch.dtype
    ) -> GLVQLayer:
        return GLVQLayer(n_features, n_prototypes, prototypes="zeros", dtype=tdtype, device=self.device)

    def _store_metric(self) -> None:
        """Copy the learned metric into fitted attributes (GMLVQ, LGMLVQ)."""

    # -- validation --------------------------------------------------------------------
    def _validate_params(self) -> None:
        if self.solver not in ("lbfgs", "adam", "sgd"):
            raise ValueError(f"solver must be 'lbfgs', 'adam' or 'sgd', got {self.solver!r}")
        torch_dtype(self.dtype)
        torch_device(self.device)
        for name in ("max_iter", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr!r}")
        resolve_tol(self.stopping, self.tol)
        value = self.n_iter_no_change
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"n_iter_no_change must be a positive integer, got {value!r}")

    def _prototype_counts(self, classes: np.ndarray) -> list[int]:
        ppc = self.prototypes_per_class
        if isinstance(ppc, Mapping):
            unknown = [c for c in ppc if c not in set(classes.tolist())]
            if unknown:
                raise DataValidationError(
                    f"prototypes_per_class names class(es) {unknown} that have no samples in y; "
                    f"classes present: {classes.tolist()}"
                )
            counts = [int(ppc.get(c, 1)) for c in classes.tolist()]
        elif isinstance(ppc, (int, np.integer)) and not isinstance(ppc, bool):
            counts = [int(ppc)] * len(classes)
        else:
            raise ValueError(f"prototypes_per_class must be a positive int or a mapping class -> int, got {ppc!r}")
        if min(counts) < 1:
            raise ValueError(f"every class needs at least one prototype, got {counts}")
        return counts

    # -- API ---------------------------------------------------------------------------
    def fit(self, X, y, *, callback: Callable[[int, float], bool | None] | None = None) -> _LVQBase:
        """Fit the prototypes (and metric) to ``X (n, d)`` and labels ``y (n,)``.

        ``callback(n_iter, cost)`` (L-BFGS only) runs after every iteration with the mean
        cost at the new point, while ``model_`` holds the current parameters (so it may
        call ``score``); returning True ends the fit there, for a time budget or a
        time-to-accuracy curve."""
        self._validate_params()
        if callback is not None and getattr(self, "solver", None) != "lbfgs":
            raise ValueError(f"callback needs solver='lbfgs', got solver={getattr(self, 'solver', None)!r}")
        previous = self._warm_start_state()
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        X, y = self._check_X(X, reset=True, y=y)
        check_classification_targets(y)
        self.classes_, y_index = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes; got 1 class ({self.classes_.tolist()})"
            )
        counts = self._prototype_counts(self.classes_)
        per_class = np.bincount(y_index, minlength=len(self.classes_))
        if X.shape[0] < sum(counts):
            raise DataValidationError(
                f"fewer samples ({X.shape[0]}) than prototypes ({sum(counts)}): "
                f"lower prototypes_per_class or provide more data"
            )
        short = [self.classes_[k] for k in range(len(counts)) if per_class[k] < counts[k]]
        if short:
            raise DataValidationError(f"class(es) {np.asarray(short).tolist()} have fewer samples than prototypes")

        rng = check_random_state(self.random_state)
        generator = torch.Generator().manual_seed(int(rng.randint(0, 2**31 - 1)))
        tdtype = torch_dtype(self.dtype)
        x_t = torch.as_tensor(X, dtype=tdtype, device=self.device)
        y_t = torch.as_tensor(y_index, dtype=torch.long, device=self.device)
        labels = make_prototype_labels(len(self.classes_), counts).to(self.device)

        layer = self._make_layer(X.shape[1], len(labels), generator, tdtype)
        with torch.no_grad():
            if previous is not None and self._warm_start_matches(previous, labels):
                layer.load_state_dict(previous.layer.state_dict())
            else:
                layer.prototypes.copy_(class_mean_prototypes(x_t, y_t, labels, generator=generator))
        self.model_ = PrototypeModel(layer, labels)
        minibatch = getattr(self, "solver", None) in ("sgd", "adam")  # the sparse estimators are full-batch
        rows = min(X.shape[0], int(self.batch_size)) if minibatch else X.shape[0]
        with fit_threads(step_work(rows, self.model_), self.device):
            result = self._train(x_t, y_t, generator, callback=callback)
        self.n_iter_ = result.n_iter
        self.loss_ = result.final_loss
        self.loss_curve_ = result.losses
        self.prototypes_ = _float64_array(layer.prototypes)
        self.prototype_labels_ = self.classes_[labels.cpu().numpy()]
        self._store_metric()
        return self

    def _warm_start_state(self) -> PrototypeModel | None:
        """The previous fit's model when ``warm_start`` is set and there is one."""
        if not getattr(self, "warm_start", False):
            return None
        return getattr(self, "model_", None)

    def _warm_start_matches(self, previous: PrototypeModel, labels: torch.Tensor) -> bool:
        """Whether ``previous`` can start this fit: same layer type, parameter shapes,
        dtype and prototype labels (the classes and counts of this fit); otherwise the
        fit starts at the class means, as a cold start."""
        layer = self._make_layer(self.n_features_in_, len(labels), torch.Generator(), torch_dtype(self.dtype))
        if type(previous.layer) is not type(layer) or not torch.equal(previous.prototype_labels.cpu(), labels.cpu()):
            return False
        ours, theirs = layer.state_dict(), previous.layer.state_dict()
        return ours.keys() == theirs.keys() and all(
            ours[k].shape == theirs[k].shape and ours[k].dtype == theirs[k].dtype for k in ours
        )

    def _train(
        self,
        x_t: torch.Tensor,
        y_t: torch.Tensor,
        generator: torch.Generator,
        callback: Callable[[int, float], bool | None] | None = None,
    ) -> FitResult:
        """Train ``self.model_`` (prototypes at the class means) on ``x_t (n, d)``,
        ``y_t (n,)`` with the chosen solver; the sparse estimators replace it."""
        if self.solver == "lbfgs":
            result = fit_lbfgs(
                self.model_,
                x_t,
                y_t,
                max_iter=self.max_iter,
                tol=self.tol,
                stopping=self.stopping,  # type: ignore[arg-type]
                n_iter_no_change=int(self.n_iter_no_change),
                transfer_fn=self.transfer_fn,
                beta=self.beta,
                progress=wants_progress(self.verbose),
                callback=callback,
            )
            if not result.converged:
                warnings.warn(
                    f"{type(self).__name__}: L-BFGS stopped at max_iter={self.max_iter} iterations without "
                    f"converging (stopping={self.stopping!r}, "
                    f"tol={resolve_tol(self.stopping, self.tol):g}); increase max_iter",
                    ConvergenceWarning,
                    stacklevel=3,
                )
        else:
            result = fit_minibatch(
                self.model_,
                x_t,
                y_t,
                solver=self.solver,
                lr=self.lr,
                epochs=self.max_iter,
                batch_size=self.batch_size,
                generator=generator,
                transfer_fn=self.transfer_fn,
                beta=self.beta,
                progress=wants_progress(self.verbose),
            )
        return result

    def _distances(self, X) -> torch.Tensor:
        check_is_fitted(self)
        X = self._check_X(X, reset=False)
        x_t = torch.as_tensor(X, dtype=torch.float64, device=self.device)
        return forward_in_dtype(self.model_, x_t, torch.float64)  # whatever the training dtype

    def _class_distances(self, X) -> np.ndarray:
        """Distance to the closest prototype of every class, ``(n, c)``."""
        d = self._distances(X)
        labels = self.model_.prototype_labels
        inf = torch.tensor(float("inf"), dtype=d.dtype, device=d.device)
        per_class = [torch.where(labels == k, d, inf).min(1).values for k in range(len(self.classes_))]
        return torch.stack(per_class, 1).cpu().numpy()

    def predict(self, X) -> np.ndarray:
        """Winner-takes-all labels ``(n,)``."""
        winners = self._class_distances(X).argmin(1)
        return self.classes_[winners]

    def decision_function(self, X) -> np.ndarray:
        """Relative-distance scores ``-mu``: for class ``k``,
        ``(d_other - d_k) / (d_other + d_k)`` in ``[-1, 1]``, positive only for the
        predicted class. Shape ``(n, c)``, or ``(n,)`` (the score of ``classes_[1]``)
        for two classes."""
        d = self._class_distances(X)
        c = d.shape[1]
        others = np.stack([np.delete(d, k, axis=1).min(1) for k in range(c)], 1)
        scores = (others - d) / np.maximum(others + d, 1e-300)
        return scores[:, 1] if c == 2 else scores

    # -- the release format (dp_proto.release) -----------------------------------------
    #: Fitted attributes that a release leaves out, with the reason. Every other fitted
    #: attribute is written and restored by ``load``; the tests check that the two sets
    #: cover ``vars(est)``, so a new attribute needs a decision here.
    RELEASE_DROPS: ClassVar[dict[str, str]] = {
        "loss_curve_": "the cost of every iteration: a trace of the fit, not needed to predict "
        "(n_iter_ and loss_ are kept)",
    }
    # public fitted scalars written to the manifest's "fitted" section
    _RELEASE_FITTED: ClassVar[tuple[str, ...]] = ("n_iter_", "loss_")
    # hyperparameters never written, with the reason
    _RELEASE_WITHHELD: ClassVar[dict[str, str]] = {}

    def to_release(self) -> Release:
        """The fitted estimator in the release format (in memory; ``save`` writes it).

        Tensors: ``prototypes (W, d)``, ``prototype_labels (W,)`` and ``omega (r, d)`` or
        ``omegas (W, r, d)`` (``dp_proto.lvq.release``); manifest: the hyperparameters,
        the label set, the feature count, ``n_iter_`` and ``loss_``. Raises
        ``NotFittedError`` before ``fit``.
        """
        check_is_fitted(self)
        hyperparameters, not_saved = encode_hyperparameters(
            self.get_params(deep=False), withheld=self._RELEASE_WITHHELD
        )
        public: dict[str, Any] = {
            "classes": encode_labels(self.classes_),
            "n_features": int(self.n_features_in_),
            "layer": layer_description(self.model_),
        }
        if hasattr(self, "feature_names_in_"):
            public["feature_names"] = [str(name) for name in self.feature_names_in_]
        domain = self._release_domain()
        if domain is not None:
            public["domain"] = domain
        return Release(
            model=registered_name(self),
            tensors={**model_tensors(self.model_), **self._release_domain_tensors(), **self._release_fitted_tensors()},
            hyperparameters=hyperparameters,
            hyperparameters_not_saved=not_saved,
            public=public,
            privacy=self._release_privacy(),
            fitted={k: getattr(self, k) for k in self._RELEASE_FITTED if k in vars(self)},
            dropped=tuple(k for k in self.RELEASE_DROPS if k in vars(self)),
        )

    @classmethod
    def from_release(cls, release: Release, *, device: str = "cpu") -> Any:
        """The fitted estimator of ``release`` (``read_release``), on ``device``.

        Its ``predict`` and ``decision_function`` equal the saved estimator's exactly;
        the attributes in ``RELEASE_DROPS`` are absent. ``ValueError`` for a release of
        another model or one whose tensors do not fit its layer.
        """
        estimator = cls.estimator_from_release(release, device=device)
        estimator._restore_release(release)
        return estimator

    def _restore_release(self, release: Release) -> None:
        public = release.public
        self._restore_domain(release)
        self.classes_ = decode_labels(public["classes"])
        self.n_features_in_ = int(public["n_features"])
        if "feature_names" in public:
            self.feature_names_in_ = np.asarray(public["feature_names"], dtype=object)
        self.model_ = model_from_release(release, num_classes=len(self.classes_), device=self.device)
        for name in self._RELEASE_FITTED:
            if name in release.fitted:
                setattr(self, name, release.fitted[name])
        self._restore_privacy(release)
        self._restore_fitted_tensors(release)
        self.prototypes_ = self._input_units(_float64_array(self.model_.layer.prototypes))
        self.prototype_labels_ = self.classes_[self.model_.prototype_labels.cpu().numpy()]
        self._store_metric()

    def _input_units(self, prototypes: np.ndarray) -> np.ndarray:
        """Model-space prototypes ``(W, d)`` in the units of the input features."""
        return prototypes


@register_model("dp_proto.GLVQ")
class GLVQ(_LVQBase):
    """Generalized LVQ (Sato & Yamada 1996) with the squared Euclidean distance.

    Parameter names follow sklvq where they overlap. Passes scikit-learn's
    ``check_estimator``.

    Parameters
    ----------
    prototypes_per_class : int or mapping class -> int, default 1
        Prototypes of every class, or a count per class label (classes left out get one).
    solver : {"lbfgs", "adam", "sgd"}, default "lbfgs"
        Full-batch L-BFGS with strong-Wolfe line search, or minibatch Adam/SGD.
    max_iter : int, default 500
        L-BFGS iterations, or epochs for the minibatch solvers. L-BFGS stopping at
        ``max_iter`` without meeting ``tol`` warns ``ConvergenceWarning``.
    lr : float, default 0.01
        Learning rate of the minibatch solvers.
    batch_size : int, default 128
        Minibatch size of the minibatch solvers.
    transfer_fn : {"identity", "sigmoid"}, default "identity"
        Transfer applied to ``mu = (d+ - d-) / (d+ + d-)`` in the GLVQ cost.
    beta : float, default 1.0
        Slope of the sigmoid transfer.
    tol : float or None, default None
        Tolerance of the L-BFGS stopping rule; None: 3e-4 for ``"relative_cost"``,
        1e-9 for ``"lbfgs"``.
    stopping : {"relative_cost", "lbfgs"}, default "relative_cost"
        When L-BFGS stops. ``"relative_cost"``: once the last ``n_iter_no_change``
        iterations lowered the cost by at most ``tol`` relative to its size
        (``dp_proto.lvq.training.settled``), that is once the classifier has settled;
        ``"lbfgs"``: torch's tests on the changes of the cost, the step and the
        gradient, which keep iterating while the parameters still move. How the two
        compare: docs/lvq.md ("Fitting fast").
    n_iter_no_change : int, default 5
        Window of the relative-cost rule, in iterations.
    warm_start : bool, default False
        Start ``fit`` from the previous fit's prototypes and metric instead of the class
        means (when the classes, features and prototype counts match): repeated fits on
        similar data (cross-validation folds, parameter sweeps) need fewer iterations.
    random_state : int, RandomState or None, default None
        Seeds the jitter of several prototypes per class, a random Omega and shuffling.
    verbose : int or None, default None
        A progress bar on stderr (L-BFGS cost evaluations, or epochs) for a fit that runs
        longer than two seconds: None in interactive use only (a terminal or a notebook),
        0 never, 1 or more always.
    device : str, default "cpu"
        Torch device of the model.
    dtype : {"float32", "float64"}, default "float32"
        Torch dtype of the model during training. Time and accuracy of the two:
        docs/lvq.md ("Fitting fast").

    Attributes
    ----------
    classes_ : ndarray (c,)
        The class labels seen in ``fit``, sorted.
    prototypes_ : ndarray (W, d)
        The prototypes, ``W`` the total prototype count.
    prototype_labels_ : ndarray (W,)
        Class label of every prototype.
    n_features_in_ : int
        Number of features seen in ``fit``.
    n_iter_ : int
        Iterations (L-BFGS) or epochs (minibatch) run.
    loss_ : float
        Final mean GLVQ cost.
    model_ : PrototypeModel
        The trained torch model (layer and prototype labels).

    References
    ----------
    Sato & Yamada (1996). Generalized learning vector quantization. *Advances in Neural
    Information Processing Systems 8*.

    Examples
    --------
    >>> import numpy as np
    >>> from dp_proto.lvq import GLVQ
    >>> X = np.array([[0.0, 0.0], [0.2, 0.1], [2.0, 2.0], [2.1, 1.9]])
    >>> y = np.array([0, 0, 1, 1])
    >>> model = GLVQ(random_state=0).fit(X, y)
    >>> model.prototypes_.shape, model.predict([[0.1, 0.0], [2.0, 2.1]]).tolist()
    ((2, 2), [0, 1])
    """

    def __init__(
        self,
        prototypes_per_class: int | Mapping[Any, int] = 1,
        *,
        solver: str = "lbfgs",
        max_iter: int = 500,
        lr: float = 0.01,
        batch_size: int = 128,
        transfer_fn: str = "identity",
        beta: float = 1.0,
        tol: float | None = None,
        stopping: str = "relative_cost",
        n_iter_no_change: int = DEFAULT_N_ITER_NO_CHANGE,
        warm_start: bool = False,
        random_state: int | np.random.RandomState | None = None,
        verbose: int | None = None,
        device: str = "cpu",
        dtype: str = "float32",
    ) -> None:
        super().__init__(
            prototypes_per_class,
            solver=solver,
            max_iter=max_iter,
            lr=lr,
            batch_size=batch_size,
            transfer_fn=transfer_fn,
            beta=beta,
            tol=tol,
            stopping=stopping,
            n_iter_no_change=n_iter_no_change,
            warm_start=warm_start,
            random_state=random_state,
            verbose=verbose,
            device=device,
            dtype=dtype,
        )


@register_model("dp_proto.GMLVQ")
class GMLVQ(_LVQBase):
    """Generalized matrix LVQ (Schneider, Biehl & Hammer 2009): one global metric
    ``d(x, w) = (x - w)^T Omega^T Omega (x - w)``.

    Parameters
    ----------
    prototypes_per_class : int or mapping class -> int, default 1
        Prototypes of every class, or a count per class label (classes left out get one).
    rank : int or None, default None
        Rows of ``Omega (r, d)``; None means ``r = d``.
    omega_init : {"identity", "scaled_identity", "random"}, default "identity"
        Initial Omega (``"random"`` draws from ``random_state``).
    normalize_omega : bool, default True
        Keep ``trace(Lambda) = 1`` after every step (Brinkrolf 2023, eq. 2.20); for the
        global metric this changes only the scale, not the classifier.
    solver : {"lbfgs", "adam", "sgd"}, default "lbfgs"
        Full-batch L-BFGS with strong-Wolfe line search, or minibatch Adam/SGD.
    max_iter : int, default 500
        L-BFGS iterations, or epochs for the minibatch solvers. L-BFGS stopping at
        ``max_iter`` without meeting ``tol`` warns ``ConvergenceWarning``.
    lr : float, default 0.01
        Learning rate of the minibatch solvers.
    batch_size : int, default 128
        Minibatch size of the minibatch solvers.
    transfer_fn : {"identity", "sigmoid"}, default "identity"
        Transfer applied to ``mu = (d+ - d-) / (d+ + d-)`` in the GLVQ cost.
    beta : float, default 1.0
        Slope of the sigmoid transfer.
    tol : float or None, default None
        Tolerance of the L-BFGS stopping rule; None: 3e-4 for ``"relative_cost"``,
        1e-9 for ``"lbfgs"``.
    stopping : {"relative_cost", "lbfgs"}, default "relative_cost"
        When L-BFGS stops. ``"relative_cost"``: once the last ``n_iter_no_change``
        iterations lowered the cost by at most ``tol`` relative to its size
        (``dp_proto.lvq.training.settled``), that is once the classifier has settled;
        ``"lbfgs"``: torch's tests on the changes of the cost, the step and the
        gradient, which keep iterating while the parameters still move. How the two
        compare: docs/lvq.md ("Fitting fast").
    n_iter_no_change : int, default 5
        Window of the relative-cost rule, in iterations.
    warm_start : bool, default False
        Start ``fit`` from the previous fit's prototypes and metric instead of the class
        means (when the classes, features and prototype counts match): repeated fits on
        similar data (cross-validation folds, parameter sweeps) need fewer iterations.
    random_state : int, RandomState or None, default None
        Seeds the jitter of several prototypes per class, a random Omega and shuffling.
    verbose : int or None, default None
        A progress bar on stderr (L-BFGS cost evaluations, or epochs) for a fit that runs
        longer than two seconds: None in interactive use only (a terminal or a notebook),
        0 never, 1 or more always.
    device : str, default "cpu"
        Torch device of the model.
    dtype : {"float32", "float64"}, default "float32"
        Torch dtype of the model during training. Time and accuracy of the two:
        docs/lvq.md ("Fitting fast").

    Attributes
    ----------
    classes_ : ndarray (c,)
        The class labels seen in ``fit``, sorted.
    prototypes_ : ndarray (W, d)
        The prototypes, ``W`` the total prototype count.
    prototype_labels_ : ndarray (W,)
        Class label of every prototype.
    n_features_in_ : int
        Number of features seen in ``fit``.
    n_iter_ : int
        Iterations (L-BFGS) or epochs (minibatch) run.
    loss_ : float
        Final mean GLVQ cost.
    model_ : PrototypeModel
        The trained torch model (layer and prototype labels).
    omega_ : ndarray (r, d)
        The learned projection.
    lambda_ : ndarray (d, d)
        The relevance matrix ``Omega^T Omega``.

    References
    ----------
    Schneider, Biehl & Hammer (2009). Adaptive relevance matrices in learning vector
    quantization. *Neural Computation* 21(12).

    Brinkrolf (2023). *Learning Vector Quantization for the Real-World: Privacy,
    Robustness, and Sparsity*. Dissertation, Bielefeld University (chapter 2).

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from dp_proto.lvq import GMLVQ
    >>> X, y = load_iris(return_X_y=True)
    >>> model = GMLVQ(rank=2, random_state=0).fit(X, y)
    >>> model.omega_.shape, model.lambda_.shape
    ((2, 4), (4, 4))
    """

    def __init__(
        self,
        prototypes_per_class: int | Mapping[Any, int] = 1,
        *,
        rank: int | None = None,
        omega_init: str = "identity",
        normalize_omega: bool = True,
        solver: str = "lbfgs",
        max_iter: int = 500,
        lr: float = 0.01,
        batch_size: int = 128,
        transfer_fn: str = "identity",
        beta: float = 1.0,
        tol: float | None = None,
        stopping: str = "relative_cost",
        n_iter_no_change: int = DEFAULT_N_ITER_NO_CHANGE,
        warm_start: bool = False,
        random_state: int | np.random.RandomState | None = None,
        verbose: int | None = None,
        device: str = "cpu",
        dtype: str = "float32",
    ) -> None:
        super().__init__(
            prototypes_per_class,
            solver=solver,
            max_iter=max_iter,
            lr=lr,
            batch_size=batch_size,
            transfer_fn=transfer_fn,
            beta=beta,
            tol=tol,
            stopping=stopping,
            n_iter_no_change=n_iter_no_change,
            warm_start=warm_start,
            random_state=random_state,
            verbose=verbose,
            device=device,
            dtype=dtype,
        )
        self.rank = rank
        self.omega_init = omega_init
        self.normalize_omega = normalize_omega

    def _make_layer(self, n_features, n_prototypes, generator, tdtype):
        return GMLVQLayer(
            n_features,
            n_prototypes,
            prototypes="zeros",  # fit places them (class means, DP initialisation)
            rank=self.rank,
            omega_init=self.omega_init,
            normalize=self.normalize_omega,
            generator=generator,
            dtype=tdtype,
            device=self.device,
        )

    def _store_metric(self) -> None:
        layer = cast(GMLVQLayer, self.model_.layer)
        self.omega_ = _float64_array(layer.omega)
        self.lambda_ = self.omega_.T @ self.omega_


@register_model("dp_proto.LGMLVQ")
class LGMLVQ(GMLVQ):
    """Localized GMLVQ: one metric ``Lambda_j = Omega_j^T Omega_j`` per prototype.

    Parameters
    ----------
    prototypes_per_class : int or mapping class -> int, default 1
        Prototypes of every class, or a count per class label (classes left out get one).
    rank : int or None, default None
        Rows of ``Omega (r, d)``; None means ``r = d``.
    omega_init : {"identity", "scaled_identity", "random"}, default "identity"
        Initial Omega (``"random"`` draws from ``random_state``).
    normalize_omega : bool, default False
        Rescale every local ``Omega_j`` to ``trace(Lambda_j) = 1`` after each step,
        which, unlike the global case, changes the classifier.
    solver : {"lbfgs", "adam", "sgd"}, default "lbfgs"
        Full-batch L-BFGS with strong-Wolfe line search, or minibatch Adam/SGD.
    max_iter : int, default 500
        L-BFGS iterations, or epochs for the minibatch solvers. L-BFGS stopping at
        ``max_iter`` without meeting ``tol`` warns ``ConvergenceWarning``.
    lr : float, default 0.01
        Learning rate of the minibatch solvers.
    batch_size : int, default 128
        Minibatch size of the minibatch solvers.
    transfer_fn : {"identity", "sigmoid"}, default "identity"
        Transfer applied to ``mu = (d+ - d-) / (d+ + d-)`` in the GLVQ cost.
    beta : float, default 1.0
        Slope of the sigmoid transfer.
    tol : float or None, default None
        Tolerance of the L-BFGS stopping rule; None: 3e-4 for ``"relative_cost"``,
        1e-9 for ``"lbfgs"``.
    stopping : {"relative_cost", "lbfgs"}, default "relative_cost"
        When L-BFGS stops. ``"relative_cost"``: once the last ``n_iter_no_change``
        iterations lowered the cost by at most ``tol`` relative to its size
        (``dp_proto.lvq.training.settled``), that is once the classifier has settled;
        ``"lbfgs"``: torch's tests on the changes of the cost, the step and the
        gradient, which keep iterating while the parameters still move. How the two
        compare: docs/lvq.md ("Fitting fast").
    n_iter_no_change : int, default 5
        Window of the relative-cost rule, in iterations.
    warm_start : bool, default False
        Start ``fit`` from the previous fit's prototypes and metric instead of the class
        means (when the classes, features and prototype counts match): repeated fits on
        similar data (cross-validation folds, parameter sweeps) need fewer iterations.
    random_state : int, RandomState or None, default None
        Seeds the jitter of several prototypes per class, a random Omega and shuffling.
    verbose : int or None, default None
        A progress bar on stderr (L-BFGS cost evaluations, or epochs) for a fit that runs
        longer than two seconds: None in interactive use only (a terminal or a notebook),
        0 never, 1 or more always.
    device : str, default "cpu"
        Torch device of the model.
    dtype : {"float32", "float64"}, default "float32"
        Torch dtype of the model during training. Time and accuracy of the two:
        docs/lvq.md ("Fitting fast").

    Attributes
    ----------
    classes_ : ndarray (c,)
        The class labels seen in ``fit``, sorted.
    prototypes_ : ndarray (W, d)
        The prototypes, ``W`` the total prototype count.
    prototype_labels_ : ndarray (W,)
        Class label of every prototype.
    n_features_in_ : int
        Number of features seen in ``fit``.
    n_iter_ : int
        Iterations (L-BFGS) or epochs (minibatch) run.
    loss_ : float
        Final mean GLVQ cost.
    model_ : PrototypeModel
        The trained torch model (layer and prototype labels).
    omega_ : ndarray (W, r, d)
        One projection per prototype.
    lambda_ : ndarray (W, d, d)
        The local relevance matrices.

    References
    ----------
    Schneider, Biehl & Hammer (2009). Adaptive relevance matrices in learning vector
    quantization. *Neural Computation* 21(12).

    Brinkrolf (2023). *Learning Vector Quantization for the Real-World: Privacy,
    Robustness, and Sparsity*. Dissertation, Bielefeld University (chapter 2).
    """

    def __init__(
        self,
        prototypes_per_class: int | Mapping[Any, int] = 1,
        *,
        rank: int | None = None,
        omega_init: str = "identity",
        normalize_omega: bool = False,
        solver: str = "lbfgs",
        max_iter: int = 500,
        lr: float = 0.01,
        batch_size: int = 128,
        transfer_fn: str = "identity",
        beta: float = 1.0,
        tol: float | None = None,
        stopping: str = "relative_cost",
        n_iter_no_change: int = DEFAULT_N_ITER_NO_CHANGE,
        warm_start: bool = False,
        random_state: int | np.random.RandomState | None = None,
        verbose: int | None = None,
        device: str = "cpu",
        dtype: str = "float32",
    ) -> None:
        super().__init__(
            prototypes_per_class,
            rank=rank,
            omega_init=omega_init,
            normalize_omega=normalize_omega,
            solver=solver,
            max_iter=max_iter,
            lr=lr,
            batch_size=batch_size,
            transfer_fn=transfer_fn,
            beta=beta,
            tol=tol,
            stopping=stopping,
            n_iter_no_change=n_iter_no_change,
            warm_start=warm_start,
            random_state=random_state,
            verbose=verbose,
            device=device,
            dtype=dtype,
        )

    def _make_layer(self, n_features, n_prototypes, generator, tdtype):
        return LGMLVQLayer(
            n_features,
            n_prototypes,
            prototypes="zeros",  # fit places them (class means, DP initialisation)
            rank=self.rank,
            omega_init=self.omega_init,
            normalize=self.normalize_omega,
            generator=generator,
            dtype=tdtype,
            device=self.device,
        )

    def _store_metric(self) -> None:
        self.omega_ = _float64_array(cast(LGMLVQLayer, self.model_.layer).omegas)
        self.lambda_ = np.transpose(self.omega_, (0, 2, 1)) @ self.omega_
