"""Sparse GMLVQ and LGMLVQ estimators: ``SparseGMLVQ`` and ``SparseLGMLVQ``
(Brinkrolf 2023, chapter 5; the training is ``dp_proto.lvq.sparse.fit_proximal``).

Both are classifiers and feature selectors: ``selected_features_`` are the features
whose column is non-zero in some Omega, ``transform`` keeps them (scikit-learn's
``SelectorMixin``: ``get_support``, ``get_feature_names_out``), and ``sparsity_`` is
eq. 5.8.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.feature_selection import SelectorMixin

from dp_proto._progress import wants_progress
from dp_proto._validation import torch_device, torch_dtype
from dp_proto.lvq.estimators import GMLVQ, LGMLVQ
from dp_proto.lvq.layers import GMLVQLayer, LGMLVQLayer
from dp_proto.lvq.sparse import check_penalty, fit_proximal, omp_refit_, refit_on_support, selected_features, sparsity
from dp_proto.lvq.training import FitResult
from dp_proto.release import register_model

__all__ = ["SparseGMLVQ", "SparseLGMLVQ"]


def _set(obj: Any, params: Mapping[str, Any]) -> None:
    for name, value in params.items():
        setattr(obj, name, value)


_SHARED_DOC = """
    Parameters
    ----------
    prototypes_per_class : int or mapping class -> int, default 1
        Prototypes of every class, or a count per class label.
    penalty : float, default 0.1
        The group-lasso strength ``S >= 0`` of eq. 5.5 (for a metric normalised to
        ``sum ||Omega_k||_F^2 = 1``). Larger gives fewer features; ``sparsity_path``-like
        sweeps map accuracy against sparsity.
    omp_features : int or None, default None
        After training, replace the metric by its simultaneous-OMP fit on this many
        features (``dp_proto.lvq.sparse.simultaneous_omp``; section 5.4.2), the way to
        place a model at a given sparsity.
    omp_tol : float or None, default None
        OMP by tolerance instead: the fewest features that reproduce the projected
        training differences within this relative error (with ``omp_features``: both
        stopping rules, the first one met).
    refit : bool, default True
        Retrain prototypes and metric on the selected features without the penalty
        (``dp_proto.lvq.sparse.refit_on_support``: L-BFGS, at most 500 iterations), which
        undoes the shrinkage of the kept columns; not in Brinkrolf (2023). False keeps
        the penalised (and OMP) solution.
    rank : int or None, default None
        Rows of every ``Omega``; None means ``d``.
    omega_init : {"random", "identity", "scaled_identity"}, default "random"
        ``"random"`` (drawn from ``random_state``) starts every feature's column non-zero;
        the identity of a rank-limited ``Omega`` (``rank < d``) would start with only the
        first ``rank`` features and the penalty keeps zero columns at zero.
    max_iter : int, default 2000
        Proximal gradient iterations; stopping at ``max_iter`` warns
        ``ConvergenceWarning``.
    lr : float, default 1.0
        Initial step size (adapted by backtracking).
    tol : float, default 1e-6
        Stop when the penalised cost changes by less than this (relative) in one
        iteration (proximal gradient converges more slowly than L-BFGS; the non-sparse
        estimators' 1e-9 would mostly run to ``max_iter``).
    transfer_fn : {"identity", "sigmoid"}, default "identity"
    beta : float, default 1.0
    random_state : int, RandomState or None, default None
    verbose : int or None, default None
        As for ``GMLVQ``: a progress bar in interactive use only by default.
    device : str, default "cpu"
    dtype : {"float64", "float32"}, default "float64"

    Attributes
    ----------
    classes_, prototypes_, prototype_labels_, n_features_in_, model_, omega_, lambda_ :
        As for the non-sparse estimator (the metric normalised to unit Frobenius norm
        over all matrices).
    n_iter_ : int
        Proximal gradient iterations, plus the refit's L-BFGS iterations.
    loss_ : float
        The final cost: the GLVQ cost after the refit, else the penalised cost
        ``E + S P`` of the proximal fit (before OMP).
    loss_curve_ : list of float
        The penalised cost after every proximal iteration (never increasing), then the
        refit's cost evaluations.
    selected_features_ : ndarray (k,) of int
        Features with a non-zero column in some Omega.
    sparsity_ : float
        Brinkrolf (2023), eq. 5.8: the fraction of features left out.

    References
    ----------
    Brinkrolf (2023). *Learning Vector Quantization for the Real-World: Privacy,
    Robustness, and Sparsity*. Dissertation, Bielefeld University (chapter 5).
"""


class _SparseMixin(SelectorMixin):
    """Proximal training, the OMP option and the feature-selector API."""

    penalty: float
    omp_features: int | None
    omp_tol: float | None
    refit: bool
    max_iter: int
    lr: float
    tol: float | None  # a float here (default 1e-6); the base class allows None
    transfer_fn: str
    beta: float
    verbose: int | None
    dtype: str
    rank: int | None
    omega_init: str
    device: str
    model_: Any
    n_features_in_: int
    omega_: np.ndarray

    # one signature for both estimators (scikit-learn reads the parameters from it)
    def __init__(
        self,
        prototypes_per_class: int | Mapping[Any, int] = 1,
        *,
        penalty: float = 0.1,
        omp_features: int | None = None,
        omp_tol: float | None = None,
        refit: bool = True,
        rank: int | None = None,
        omega_init: str = "random",
        max_iter: int = 2000,
        lr: float = 1.0,
        tol: float = 1e-6,
        transfer_fn: str = "identity",
        beta: float = 1.0,
        random_state: int | np.random.RandomState | None = None,
        verbose: int | None = None,
        device: str = "cpu",
        dtype: str = "float64",
    ) -> None:
        _set(
            self,
            dict(
                prototypes_per_class=prototypes_per_class,
                penalty=penalty,
                omp_features=omp_features,
                omp_tol=omp_tol,
                refit=refit,
                rank=rank,
                omega_init=omega_init,
                max_iter=max_iter,
                lr=lr,
                tol=tol,
                transfer_fn=transfer_fn,
                beta=beta,
                random_state=random_state,
                verbose=verbose,
                device=device,
                dtype=dtype,
            ),
        )

    def _validate_params(self) -> None:
        torch_dtype(self.dtype)
        torch_device(self.device)
        check_penalty("penalty", self.penalty)
        for name in ("max_iter",):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr!r}")
        if self.omp_features is not None and (
            isinstance(self.omp_features, bool)
            or not isinstance(self.omp_features, (int, np.integer))
            or self.omp_features < 1
        ):
            raise ValueError(f"omp_features must be a positive integer or None, got {self.omp_features!r}")
        if self.omp_tol is not None and not 0 <= self.omp_tol < 1:
            raise ValueError(f"omp_tol must be in [0, 1) or None, got {self.omp_tol!r}")

    def _train(
        self, x_t: torch.Tensor, y_t: torch.Tensor, generator: torch.Generator, callback: Any = None
    ) -> FitResult:
        if callback is not None:
            raise ValueError(f"{type(self).__name__}.fit takes no callback (its proximal solver has none)")
        if self.omp_features is not None and self.omp_features > x_t.shape[1]:
            raise ValueError(f"omp_features={self.omp_features} exceeds the {x_t.shape[1]} features of X")
        result = fit_proximal(
            self.model_,
            x_t,
            y_t,
            penalty=float(self.penalty),
            lr=float(self.lr),
            max_iter=int(self.max_iter),
            tol=float(self.tol),  # type: ignore[arg-type]  # a float for the sparse estimators
            transfer_fn=self.transfer_fn,
            beta=float(self.beta),
            progress=wants_progress(self.verbose),
        )
        if not result.converged:
            warnings.warn(
                f"{type(self).__name__}: proximal gradient stopped at max_iter={self.max_iter} iterations without "
                f"converging (tol={self.tol:g}); increase max_iter",
                ConvergenceWarning,
                stacklevel=3,
            )
        if self.omp_features is not None or self.omp_tol is not None:
            omp_refit_(
                self.model_,
                x_t,
                n_features=None if self.omp_features is None else int(self.omp_features),
                tol=0.0 if self.omp_tol is None else float(self.omp_tol),
            )
        if self.refit:
            again = refit_on_support(
                self.model_,
                x_t,
                y_t,
                transfer_fn=self.transfer_fn,
                beta=float(self.beta),
                progress=wants_progress(self.verbose),
            )
            result = FitResult(
                n_iter=result.n_iter + again.n_iter, losses=result.losses + again.losses, converged=result.converged
            )
        return result

    def _metric_tensor(self) -> torch.Tensor:
        layer = self.model_.layer
        return layer.omegas if isinstance(layer, LGMLVQLayer) else layer.omega

    def _store_metric(self) -> None:
        super()._store_metric()
        metric = self._metric_tensor().detach()
        self.selected_features_ = selected_features(metric).cpu().numpy()
        self.sparsity_ = sparsity(metric)

    def _get_support_mask(self) -> np.ndarray:
        mask = np.zeros(self.n_features_in_, dtype=bool)
        mask[self.selected_features_] = True
        return mask


@register_model("dp_proto.SparseGMLVQ")
class SparseGMLVQ(_SparseMixin, GMLVQ):
    __doc__ = (
        """GMLVQ with a group-lasso penalty over the input features, trained to exact zeros
    by proximal gradient steps (Brinkrolf 2023, chapter 5, applied to one global Omega).

    Examples
    --------
    >>> from sklearn.datasets import load_wine
    >>> from sklearn.preprocessing import scale
    >>> X, y = load_wine(return_X_y=True)
    >>> model = SparseGMLVQ(penalty=0.1).fit(scale(X), y)
    >>> model.transform(scale(X)).shape[1] == len(model.selected_features_)
    True
"""
        + _SHARED_DOC
    )

    def _make_layer(self, n_features, n_prototypes, generator, tdtype):
        return GMLVQLayer(
            n_features,
            n_prototypes,
            prototypes="zeros",
            rank=self.rank,
            omega_init=self.omega_init,
            normalize=True,  # trace(Lambda) = 1: the sphere fit_proximal keeps
            generator=generator,
            dtype=tdtype,
            device=self.device,
        )


@register_model("dp_proto.SparseLGMLVQ")
class SparseLGMLVQ(_SparseMixin, LGMLVQ):
    __doc__ = (
        """LGMLVQ with the group-lasso penalty of Brinkrolf (2023), eq. 5.5 (SLGMLVQ): one
    group per input feature, its column in every local Omega, trained to exact zeros by
    proximal gradient steps; the local metrics share one global normalisation
    ``sum_k ||Omega_k||_F^2 = 1`` (see ``dp_proto.lvq.sparse``).

    Examples
    --------
    >>> from sklearn.datasets import load_wine
    >>> from sklearn.preprocessing import scale
    >>> X, y = load_wine(return_X_y=True)
    >>> model = SparseLGMLVQ(penalty=0.3, rank=2).fit(scale(X), y)
    >>> 0 <= model.sparsity_ < 1
    True
"""
        + _SHARED_DOC
    )

    def _make_layer(self, n_features, n_prototypes, generator, tdtype):
        return LGMLVQLayer(
            n_features,
            n_prototypes,
            prototypes="zeros",
            rank=self.rank,
            omega_init=self.omega_init,
            normalize=False,  # one global normalisation, kept by fit_proximal
            generator=generator,
            dtype=tdtype,
            device=self.device,
        )
