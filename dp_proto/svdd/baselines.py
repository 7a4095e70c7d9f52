"""Private SVM baselines of Park (2022, Section 6.3): SVM WEIGHT and SVM OUTPUT.

Both train a linear SVM *without bias* on random Fourier features (eq. 4.5,
``RandomFourierFeatures``, ``kappa = sup ||phi(x)|| = 1``),
one-versus-all over the ``K`` classes (Section 7.3), with the weight ``C/n`` of Park (2022) on
every hinge term (Table 7.1 lists ``C/n`` directly; here ``cap = c_over_n``):

    primal  min_w  J_D(w) = 0.5 ||w||^2 + cap * sum_{i in D} max(0, 1 - y_i w . phi_i)
    dual    max_alpha  sum_i alpha_i - 0.5 ||sum_i alpha_i y_i phi_i||^2,  0 <= alpha_i <= cap,

with ``w = sum_i alpha_i y_i phi_i``. ``solve_svm_dual`` solves the ``K`` duals at once
in the feature space (never an ``n x n`` kernel).

* ``PrivateSVMWeight`` (Rubinstein et al. 2012, "SVM WEIGHT" of Park 2022): releases the
  weight vectors plus Laplace noise; the released model is an ordinary (public) classifier.
* ``PrivateSVMOutput`` (output perturbation in the style of Jain & Thakurta 2013, "SVM
  OUTPUT" of Park 2022): keeps the exact weights and adds Laplace noise to every answered
  score; the budget grows with the number of queries, which is why Park (2022) only uses it as
  a reference ("a desired level of accuracy").

Neighbouring relation: add/remove one record, with ``cap`` a public constant (it is *not*
recomputed from the private ``n``) and the label set public.

Randomness: ``random_state`` draws only the (public) random Fourier features; the noise
comes from fresh operating-system entropy unless ``noise_seed`` opts in to reproducible
noise (``PrivacyLeakWarning``, ledger summary ``"noise":
"reproducible"``). A private fit raises and warns only on public settings; diagnostics
computed from the data (the solver's duality gap) go to the curator-only ``curator_``
(``dp_proto.privacy.curator``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from dp_proto.privacy.calibration import optional_epsilon
from dp_proto.privacy.curator import curator_attach, curator_log
from dp_proto.privacy.domain import public_classes
from dp_proto.privacy.events import NonPrivateEvent, PrivacyEvent, PureEvent
from dp_proto.privacy.ledger import PrivacyLedger
from dp_proto.privacy.mechanisms import laplace_mechanism
from dp_proto.privacy.randomness import (
    check_noise_seed,
    fresh_generator,
    noise_generator,
    seeded_generator,
)
from dp_proto.svdd.features import RandomFourierFeatures
from dp_proto.svdd.solver import check_features, check_private_tol, iteration_limit

__all__ = ["SVMSolution", "solve_svm_dual", "svm_sensitivity", "PrivateSVMWeight", "PrivateSVMOutput"]

_POWER_ITERATIONS = 20
_L_SAFETY = 1.02  # power iteration approaches ||Phi||^2 from below
# Smallest absolute gap tolerance of a private fit: the primal value grows like cap * n, so
# float64 resolves the gap to about 1e-16 cap n; 1e-8 stays far above that for any
# realistic n (the default tol is 1e-6).
MIN_PRIVATE_SVM_TOL = 1e-8


# --------------------------------------------------------------------------------------
# the dual solver
# --------------------------------------------------------------------------------------


class SVMSolution(NamedTuple):
    """Result of ``solve_svm_dual`` for ``K`` binary problems.

    Attributes
    ----------
    alpha : Tensor ``(K, n)``
        Dual variables in ``[0, cap]``.
    weights : Tensor ``(K, F)``
        Primal weights ``w_k = sum_i alpha_ki y_ki phi_i``.
    gap : Tensor ``(K,)``
        Duality gap ``P(w_k) - D(alpha_k)`` of every class, from exact margins (float64). It
        bounds the primal suboptimality, and by 1-strong convexity of ``P``
        ``||w_k - w_k*||_2 <= sqrt(2 gap_k)``.
    iterations : int
        FISTA iterations (all classes advance together).
    converged : bool
        Whether every class reached its gap tolerance within ``max_iter``.
    """

    alpha: torch.Tensor
    weights: torch.Tensor
    gap: torch.Tensor
    iterations: int
    converged: bool


def _check_solver_input(
    phi: torch.Tensor, y_pm: torch.Tensor, cap: float, tol: float, max_iter: int | None
) -> tuple[torch.Tensor, torch.Tensor, float, int]:
    check_features(phi)
    n = phi.shape[0]
    y = torch.as_tensor(y_pm, device=phi.device)
    if y.dim() == 1:
        y = y.unsqueeze(0)
    if y.dim() != 2 or y.shape[1] != n:
        raise ValueError(f"y_pm must have shape (n,) or (K, n) with n={n}, got {tuple(y.shape)}")
    if y.shape[0] < 1:
        raise ValueError("y_pm must hold at least one problem (K >= 1)")
    y = y.to(torch.float64)
    if not bool(((y == 1) | (y == -1)).all()):
        raise ValueError("y_pm must contain only -1 and +1")
    try:
        c = float(cap)
    except (TypeError, ValueError):
        raise ValueError(f"cap must be a real number, got {cap!r}") from None
    if not math.isfinite(c) or c <= 0:
        raise ValueError(f"cap must be a positive finite number, got {cap!r}")
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol <= 0:
        raise ValueError(f"tol must be a positive finite number, got {tol!r}")
    return phi.to(torch.float64), y, c, iteration_limit(max_iter)


def _spectral_norm2(phi: torch.Tensor, iters: int = _POWER_ITERATIONS) -> float:
    """Power-iteration estimate of ``||Phi||_2^2`` (largest eigenvalue of ``Phi^T Phi``)."""
    gen = torch.Generator().manual_seed(0x5F3)
    u = torch.randn(phi.shape[1], generator=gen, dtype=torch.float64).to(phi)
    u = u / u.norm()
    lam = 0.0
    for _ in range(iters):
        z = phi.T @ (phi @ u)
        norm = float(z.norm())
        if norm == 0.0:
            break
        lam = norm
        u = z / norm
    return lam


def _gap_terms(alpha: torch.Tensor, margins: torch.Tensor, cap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Duality gap and primal value per class from ``alpha (K, n)`` and margins ``y_i w.phi_i``.

    With ``w = sum alpha_i y_i phi_i`` one has ``||w||^2 = sum_i alpha_i m_i``, so
    ``P(w) - D(alpha) = sum_i [cap (1 - m_i)_+ - alpha_i (1 - m_i)]``, a sum of non-negative
    complementarity violations (``(cap - alpha_i)(1 - m_i)`` for ``m_i < 1``,
    ``alpha_i (m_i - 1)`` for ``m_i >= 1``): no cancellation between large terms.
    """
    slack = 1.0 - margins
    hinge = slack.clamp_min(0.0)
    gap = (cap * hinge - alpha * slack).sum(1).clamp_min(0.0)
    primal = 0.5 * (alpha * margins).sum(1) + cap * hinge.sum(1)
    return gap, primal


def solve_svm_dual(
    phi: torch.Tensor,
    y_pm: torch.Tensor,
    cap: float,
    *,
    tol: float = 1e-6,
    max_iter: int | None = 20000,
    relative: bool = True,
) -> SVMSolution:
    """Solve ``K`` box-constrained linear SVM duals (no bias) on explicit features at once.

    For every problem ``k`` with labels ``y_k in {-1, +1}^n``:

        primal  P(w) = 0.5 ||w||^2 + cap * sum_i max(0, 1 - y_ki w . phi_i)
        dual    D(alpha) = sum_i alpha_i - 0.5 ||sum_i alpha_i y_ki phi_i||^2,  0 <= alpha_i <= cap.

    Algorithm: FISTA (accelerated projected gradient) on ``-D`` with the gradient-based
    adaptive restart of O'Donoghue & Candes (2015), per class; projection is the clamp to
    ``[0, cap]``; step ``1/L`` with ``L = ||Phi||_2^2`` (the Hessian of every class is
    ``diag(y) Phi Phi^T diag(y)``, with the same norm) from power iteration, increased by
    backtracking whenever a step violates the descent lemma (checked exactly as
    ``||w(x+) - w(y)||^2 <= L ||x+ - y||^2``). The iterates carry ``W = (alpha * Y) Phi``
    ``(K, F)`` and the margins ``M = Y * (W Phi^T)`` ``(K, n)``, so an iteration costs two
    ``(K, n, F)`` matrix products and the exact duality gap comes for free. A class whose
    gap is within tolerance is frozen (its iterate no longer changes).

    Problems with many near-degenerate points (2-d data, whose features have low numerical
    rank, with many points at margin ~1 but at a bound) need many more iterations: the slow
    part is identifying which near-degenerate rows sit at a bound, not the free face.
    Iteration counts and times: docs/svdd.md ("How it works").

    Stopping: for every class ``gap_k <= tol * max(1, |P(w_k)|)`` (``relative=True``) or
    ``gap_k <= tol`` (``relative=False``, needed when the gap enters a privacy bound: by
    1-strong convexity of ``P``, ``||w_k - w_k*||_2 <= sqrt(2 gap_k)``).

    Parameters
    ----------
    phi : Tensor ``(n, F)``
        Feature rows (any floating dtype and device; solved in float64 on that device).
    y_pm : Tensor ``(n,)`` or ``(K, n)``
        Labels in ``{-1, +1}``; a vector is one problem (``K = 1``).
    cap : float
        Box ``cap > 0`` (``C/n`` of Park 2022).
    tol : float, default 1e-6
        Gap tolerance (see ``relative``).
    max_iter : int or None, default 20000
        Cap on FISTA iterations; when reached, ``converged`` is False. ``None``: no cap, the
        solver runs until every class reaches its tolerance (private fits do this).
    relative : bool, default True
        Relative (``tol * max(1, |P|)``) or absolute (``tol``) gap test.

    Returns
    -------
    SVMSolution
        ``alpha (K, n)`` and ``weights (K, F)`` in ``phi``'s dtype if float32/float64 (else
        float64), ``gap (K,)`` float64, ``iterations``, ``converged``; on ``phi``'s device.

    Raises
    ------
    ValueError
        ``phi`` not a finite floating ``(n, F)`` tensor, ``y_pm`` of the wrong shape or with
        values other than +-1, ``cap <= 0``, ``tol <= 0``, bad ``max_iter``.
    """
    phi64, Y, cap, max_iter = _check_solver_input(phi, y_pm, cap, tol, max_iter)
    out_dtype = phi.dtype if phi.dtype in (torch.float32, torch.float64) else torch.float64
    K, n = Y.shape

    def threshold(primal: torch.Tensor) -> torch.Tensor:
        return tol * primal.abs().clamp_min(1.0) if relative else torch.full_like(primal, tol)

    x = torch.zeros(K, n, dtype=torch.float64, device=phi64.device)
    w_x = torch.zeros(K, phi64.shape[1], dtype=torch.float64, device=phi64.device)
    m_x = torch.zeros_like(x)
    gap, primal = _gap_terms(x, m_x, cap)
    active = gap > threshold(primal)
    # ||Phi||_F^2 >= ||Phi||_2^2 caps the backtracking: at that L the descent lemma holds
    # exactly, and a failed check can only come from rounding (e.g. x+ = y)
    lip_max = max(float(phi64.square().sum()), 1e-300)
    lip = min(max(_spectral_norm2(phi64) * _L_SAFETY, 1e-300), lip_max)
    y, w_y, m_y = x, w_x, m_x
    t = torch.ones(K, 1, dtype=torch.float64, device=phi64.device)
    it = 0
    while bool(active.any()) and it < max_iter:
        it += 1
        grad = m_y - 1.0  # d/d alpha_i of 0.5 ||w||^2 - sum alpha: y_i w . phi_i - 1
        act = active.unsqueeze(1)
        while True:  # backtracking (rare: L comes from power iteration)
            x_new = torch.where(act, (y - grad / lip).clamp(0.0, cap), x)
            w_new = (x_new * Y) @ phi64
            lhs = (w_new - w_y).square().sum(1)
            rhs = lip * (x_new - y).square().sum(1)
            if lip >= lip_max or bool((lhs <= rhs * (1.0 + 1e-9) + 1e-300).all()):
                break
            lip = min(1.5 * lip, lip_max)
        m_new = Y * (w_new @ phi64.T)
        gap, primal = _gap_terms(x_new, m_new, cap)
        active = active & (gap > threshold(primal))
        # adaptive restart where the step opposes the momentum; frozen classes keep y = x
        restart = (((y - x_new) * (x_new - x)).sum(1, keepdim=True) > 0) | ~active.unsqueeze(1)
        t_new = 0.5 * (1.0 + torch.sqrt(1.0 + 4.0 * t * t))
        mom = torch.where(restart, 0.0, (t - 1.0) / t_new)
        t = torch.where(restart, 1.0, t_new)
        y = x_new + mom * (x_new - x)
        w_y = w_new + mom * (w_new - w_x)
        m_y = m_new + mom * (m_new - m_x)
        x, w_x, m_x = x_new, w_new, m_new
    # final certificate from scratch
    w = (x * Y) @ phi64
    gap, primal = _gap_terms(x, Y * (w @ phi64.T), cap)
    converged = bool((gap <= threshold(primal)).all())
    return SVMSolution(x.to(out_dtype), w.to(out_dtype), gap, it, converged)


# --------------------------------------------------------------------------------------
# sensitivity
# --------------------------------------------------------------------------------------


def svm_sensitivity(cap: float, tol: float, kappa: float = 1.0) -> float:
    """L2 bound on ``||w_D - w_D'||_2`` for neighbouring data sets (add/remove one record).

    ``cap * kappa`` for exact optima (``J_D`` is 1-strongly convex and the extra term
    ``cap * hinge_x`` is ``cap * kappa``-Lipschitz), plus ``2 sqrt(2 tol)`` for two solves
    that each stop at an absolute duality gap ``<= tol``.
    """
    return cap * kappa + 2.0 * math.sqrt(2.0 * tol)


# --------------------------------------------------------------------------------------
# estimators
# --------------------------------------------------------------------------------------


class _RFFSVMBase(ClassifierMixin, BaseEstimator):
    """Shared fitting of the one-vs-all RFF SVM; subclasses decide what is released."""

    def __init__(
        self,
        c_over_n: float = 0.05,
        gamma: float = 1.0,
        num_features: int = 400,
        epsilon: float | None = 1.0,
        *,
        classes=None,
        random_state=None,
        noise_seed: int | None = None,
        device=None,
        dtype: torch.dtype = torch.float64,
        ledger: PrivacyLedger | None = None,
        tol: float = 1e-6,
        max_iter: int = 20000,
    ) -> None:
        self.c_over_n = c_over_n
        self.gamma = gamma
        self.num_features = num_features
        self.epsilon = epsilon
        self.classes = classes
        self.random_state = random_state
        self.noise_seed = noise_seed
        self.device = device
        self.dtype = dtype
        self.ledger = ledger
        self.tol = tol
        self.max_iter = max_iter

    # -- validation -------------------------------------------------------------------
    def _private_epsilon(self) -> float | None:
        """``None`` for the non-private model, else the checked epsilon."""
        return optional_epsilon(self.epsilon)

    def _validate_params(self) -> None:
        c = self.c_over_n
        if (
            isinstance(c, bool)
            or not isinstance(c, (int, float, np.floating, np.integer))
            or not math.isfinite(float(c))
            or not 0 < float(c) <= 1
        ):
            raise ValueError(f"c_over_n must lie in (0, 1], got {c!r}")
        g = self.gamma
        if (
            isinstance(g, bool)
            or not isinstance(g, (int, float, np.floating, np.integer))
            or not math.isfinite(float(g))
            or float(g) <= 0
        ):
            raise ValueError(f"gamma must be a positive finite number, got {g!r}")
        f = self.num_features
        if isinstance(f, bool) or not isinstance(f, (int, np.integer)) or f < 2 or f % 2:
            raise ValueError(f"num_features must be an even int >= 2, got {f!r}")
        t = self.tol
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise ValueError(f"tol must be a positive finite number, got {t!r}")
        if self._private_epsilon() is not None:
            check_private_tol(t, MIN_PRIVATE_SVM_TOL)
        if isinstance(self.max_iter, bool) or not isinstance(self.max_iter, int) or self.max_iter < 1:
            raise ValueError(f"max_iter must be a positive int, got {self.max_iter!r}")
        if not isinstance(self.dtype, torch.dtype) or not self.dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating torch dtype, got {self.dtype!r}")
        if self.ledger is not None and not isinstance(self.ledger, PrivacyLedger):
            raise ValueError(f"ledger must be a PrivacyLedger or None, got {type(self.ledger).__name__}")
        check_noise_seed(self.noise_seed)

    def _noise_generator(self) -> torch.Generator:
        """Generator of the noise (CPU): fresh entropy, or ``noise_seed`` (warns)."""
        seed = None if self.noise_seed is None else int(self.noise_seed)
        return noise_generator(seed, "cpu", owner=type(self).__name__)

    def _device(self) -> torch.device:
        return torch.device("cpu") if self.device is None else torch.device(self.device)

    def _as_tensor(self, X, *, fitting: bool) -> torch.Tensor:
        if torch.is_tensor(X):
            x = X.detach().to(device=self._device(), dtype=self.dtype)
        else:
            try:
                arr = np.asarray(X, dtype=np.float64)
            except (TypeError, ValueError) as err:
                raise ValueError(f"X must be a numeric array of shape (n, d): {err}") from None
            x = torch.as_tensor(arr, dtype=self.dtype, device=self._device())
        if x.dim() != 2:
            # no sizes in the messages: the number of rows is private
            raise ValueError(f"X must be 2-D of shape (n, d), got a {x.dim()}-D array")
        if x.shape[0] < 1 or x.shape[1] < 1:
            raise ValueError("X must have at least one row and one column")
        bad = ~torch.isfinite(x).all(1)
        if bool(bad.any()):
            # the rows go to the curator: their indices would move with a removed record
            curator_log(
                "%s: X has NaN or inf in row(s) %s", type(self).__name__, torch.nonzero(bad).squeeze(1)[:10].tolist()
            )
            raise ValueError("X contains NaN or inf")
        if not fitting and x.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {x.shape[1]} features, but the model was fitted with {self.n_features_in_}")
        return x

    # -- training ---------------------------------------------------------------------
    def _fit_weights(self, X, y) -> torch.Tensor:
        """Validate, draw the feature map (``random_state``), train one-vs-all; returns the
        exact weights ``(K, F)``."""
        self._validate_params()
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y")
        x = self._as_tensor(X, fitting=True)
        y_arr = y.detach().cpu().numpy() if torch.is_tensor(y) else np.asarray(y)
        if y_arr.ndim != 1:
            raise ValueError(f"y must be 1-D of shape (n,), got shape {y_arr.shape}")
        if y_arr.shape[0] != x.shape[0]:
            raise ValueError("X and y have different lengths")
        check_classification_targets(y_arr)
        # a non-private fit may read the labels from y
        classes, y_index = public_classes(
            y_arr, self.classes, type(self).__name__, warn=self._private_epsilon() is not None
        )
        rng = check_random_state(self.random_state)
        generator = torch.Generator().manual_seed(int(rng.randint(0, 2**31 - 1)))
        features = RandomFourierFeatures(
            x.shape[1],
            int(self.num_features),
            float(self.gamma),
            generator=generator,
            dtype=self.dtype,
            device=self._device(),
        )
        with torch.no_grad():
            phi = features(x)
        K = len(classes)
        idx = torch.as_tensor(y_index, device=phi.device)
        Y = torch.where(idx.unsqueeze(0) == torch.arange(K, device=phi.device).unsqueeze(1), 1.0, -1.0)
        # float64 weights: noise is added before any rounding to ``dtype`` (post-processing).
        # A private fit runs the solver until every gap is <= tol: the sensitivity assumes
        # it, and a cap that one record could make the solver hit would void the guarantee.
        private = self._private_epsilon() is not None
        sol = solve_svm_dual(
            phi.to(torch.float64),
            Y,
            float(self.c_over_n),
            tol=self.tol,
            max_iter=None if private else self.max_iter,
            relative=False,
        )
        self.__dict__.pop("curator_", None)
        if private:
            # the gap and the iteration count depend on the data: curator-only
            curator_attach(self, solver_gap=float(sol.gap.max()), solver_iterations=sol.iterations)
        elif not sol.converged:
            raise RuntimeError(
                f"the SVM dual solver did not reach the duality gap tol={self.tol:g} within "
                f"max_iter={self.max_iter} iterations (largest gap {float(sol.gap.max()):.3g}). "
                "Raise max_iter or tol."
            )
        self.classes_ = classes
        self.n_features_in_ = x.shape[1]
        self.features_ = features
        # No iteration count or duality gap is stored as a public attribute: both depend on
        # the private data and would be releases outside the ledger (curator_ holds them).
        kappa = features.kappa
        self.l2_sensitivity_ = svm_sensitivity(float(self.c_over_n), float(self.tol), kappa)
        self.ledger_ = self.ledger if self.ledger is not None else PrivacyLedger()
        return sol.weights

    def _scores(self, X, attribute: str) -> torch.Tensor:
        """Scores ``phi(X) W^T`` ``(m, K)`` with the weights stored under ``attribute``
        (computed in the weights' dtype)."""
        check_is_fitted(self)
        x = self._as_tensor(X, fitting=False)
        weights = getattr(self, attribute)
        with torch.no_grad():
            return self.features_(x).to(weights.dtype) @ weights.T

    def predict(self, X) -> np.ndarray:
        """Class of ``X (m, d)``: ``argmax_k w_k . phi(x)``; returns ``(m,)`` labels."""
        scores = self.decision_function(X)
        return self.classes_[np.argmax(scores, axis=1)]


class PrivateSVMWeight(_RFFSVMBase):
    """SVM WEIGHT (Rubinstein et al. 2012; Park 2022, Section 6.3): one-vs-all linear SVM on
    random Fourier features whose weight vectors are released with Laplace noise.

    The released ``weights_ (K, F)`` and the (data-independent) feature map ``features_``
    are the whole model: prediction is ``argmax_k w_k . phi(x)``, post-processing that
    costs no further budget.

    Parameters
    ----------
    c_over_n : float, default 0.05
        The weight ``cap`` in ``(0, 1]`` of every hinge term (``C/n`` of Park 2022, Table 7.1),
        a public constant under add/remove.
    gamma : float, default 1.0
        RBF width of ``exp(-gamma ||x - y||^2)``, ``> 0``.
    num_features : int, default 400
        Random Fourier features ``F`` (even, ``>= 2``; Park 2022 uses 400).
    epsilon : float or None, default 1.0
        Privacy budget ``> 0``; ``None`` or ``math.inf`` train the non-private model (no
        noise, no ledger event).
    classes : array-like or None, default None
        The public label set (one one-vs-all classifier per class, also for a class
        without records). ``None`` reads it from ``y``, with a
        ``PrivacyLeakWarning`` when the model is private.
    random_state : int, RandomState or None, default None
        Seeds the ``torch.Generator`` of the (public) feature map; it never reaches the noise.
    noise_seed : int or None, default None
        ``None``: the noise comes from fresh operating-system entropy. An int makes it
        reproducible (tests, benchmarks): ``PrivacyLeakWarning``,
        and the ledger's summary says ``"noise": "reproducible"``.
    device : torch.device or str, optional
        Where to compute; CPU by default.
    dtype : torch.dtype, default torch.float64
        Precision of the feature map and the weights.
    ledger : PrivacyLedger, optional
        Records the releases (and enforces its budget); a fresh ledger per ``fit`` if None.
    tol : float, default 1e-6
        Absolute duality gap at which the solver stops; enters the sensitivity. A private
        fit needs ``tol >= 1e-8`` (``MIN_PRIVATE_SVM_TOL``).
    max_iter : int, default 20000
        Solver iterations of a non-private fit, which raises ``RuntimeError`` if they do not
        reach ``tol``. A private fit ignores it and iterates until the gap is ``<= tol``:
        the sensitivity bound assumes that gap, and a cap that one record could make the
        solver hit would void the guarantee (so its running time depends on the data; the
        gap and iteration count go to the curator-only ``curator_``).

    Attributes
    ----------
    classes_ : ndarray (K,)
        The class labels.
    weights_ : Tensor (K, F)
        The released (noisy) weights (exact ones when non-private).
    features_ : RandomFourierFeatures
        The public feature map.
    sensitivity_ : float
        The L1 sensitivity of the ``K x F`` release.
    l2_sensitivity_ : float
        ``cap kappa + 2 sqrt(2 tol)`` per classifier.
    ledger_ : PrivacyLedger
        The release of the weights.

    Notes
    -----
    Sensitivity (add/remove one record; ``cap`` fixed, ``kappa = sup ||phi|| = 1``).
    ``J_D(w) = 0.5 ||w||^2 + cap sum_{i in D} hinge_i(w)`` is 1-strongly convex. For
    ``D' = D + {x}``, ``J_D' = J_D + cap hinge_x`` with ``hinge_x`` ``kappa``-Lipschitz in
    ``w``. Adding the strong-convexity inequalities of ``J_D`` at its minimiser ``w`` and of
    ``J_D'`` at ``w'`` gives ``||w - w'||^2 <= cap (hinge_x(w) - hinge_x(w')) <=
    cap kappa ||w - w'||``, so ``||w_D - w_D'||_2 <= cap kappa``. The solver stops at an
    absolute duality gap ``g <= tol``, and 1-strong convexity puts its ``w`` within
    ``sqrt(2 g)`` of the optimum, so for the computed weights
    ``||w_D - w_D'||_2 <= cap kappa + 2 sqrt(2 tol)`` (``svm_sensitivity``); a private
    fit runs the solver until it reaches ``tol``. Then
    ``||.||_1 <= sqrt(F) ||.||_2``. One record enters all ``K`` one-vs-all problems, so the
    ``K`` releases compose (strict one-vs-all split: each classifier gets ``epsilon / K``),
    which is the same as one Laplace release of the ``K x F`` matrix with

        l1_sensitivity = K sqrt(F) (cap kappa + 2 sqrt(2 tol))

    at ``epsilon`` -- one ledger event named ``"svm_weight"``. Rubinstein et al. (2012) state
    ``4 C kappa sqrt(F) / n`` for their replace-one relation (looser); we use the add/remove
    bound derived above. ``K`` and the labels are taken as public (as in Park 2022).

    References
    ----------
    Rubinstein, Bartlett, Huang & Taft (2012). Learning in a large function space:
    privacy-preserving mechanisms for SVM learning. *Journal of Privacy and
    Confidentiality* 4(1).

    Park (2022). *Differentially private multi-class classification using kernel
    supports and equilibrium points*. Master's thesis, Seoul National University.
    """

    def planned_privacy_events(self, n_features: int) -> tuple[PrivacyEvent, ...]:
        """The release ``fit`` makes, from public settings only (``DPPipeline`` checks it
        against its budget before anything is fitted): the ``K`` noisy weight vectors, whose
        sensitivity needs the public label set ``classes``. Without privacy
        (``epsilon=None``: exact weights) one ``non_private`` event."""
        self._validate_params()
        eps = self._private_epsilon()
        if eps is None:
            return (NonPrivateEvent(name="svm_weight/non_private"),)
        if self.classes is None:
            raise ValueError(
                "PrivateSVMWeight plans its release before reading the data from the public label set: pass "
                "classes=[...]"
            )
        num_classes = len(np.unique(np.asarray(self.classes)))
        l2 = svm_sensitivity(float(self.c_over_n), float(self.tol))
        return (PureEvent(eps, name="svm_weight", sensitivity=num_classes * math.sqrt(int(self.num_features)) * l2),)

    def fit(self, X, y):
        """Train on ``X (n, d)``, ``y (n,)`` and release the noisy weights."""
        weights = self._fit_weights(X, y)
        K, F = weights.shape
        self.sensitivity_ = K * math.sqrt(F) * self.l2_sensitivity_
        eps = self._private_epsilon()
        if eps is not None:
            weights = laplace_mechanism(
                weights,
                self.sensitivity_,
                eps,
                ledger=self.ledger_,
                name="svm_weight",
                generator=self._noise_generator(),
            )
        self.weights_ = weights.to(self.dtype)
        return self

    def decision_function(self, X) -> np.ndarray:
        """Scores ``w_k . phi(x)`` of ``X (m, d)``, shape ``(m, K)`` (free: post-processing)."""
        return self._scores(X, "weights_").cpu().numpy()


class PrivateSVMOutput(_RFFSVMBase):
    """SVM OUTPUT (output perturbation in the style of Jain & Thakurta 2013, as Park 2022,
    Section 6.3 uses it): exact one-vs-all SVM on random Fourier features; every answered
    query gets Laplace noise on its ``K`` scores.

    The model (the weights) is never released: the publisher keeps it and answers queries,
    so the budget grows with the number of query points -- Park (2022) uses this method only
    as a reference for "a desired level of accuracy", not as a releasable model.

    Parameters
    ----------
    c_over_n : float, default 0.05
        The weight ``cap`` in ``(0, 1]`` of every hinge term (``C/n`` of Park 2022, Table 7.1),
        a public constant under add/remove.
    gamma : float, default 1.0
        RBF width of ``exp(-gamma ||x - y||^2)``, ``> 0``.
    num_features : int, default 400
        Random Fourier features ``F`` (even, ``>= 2``; Park 2022 uses 400).
    epsilon : float or None, default 1.0
        Privacy budget ``> 0``; ``None`` or ``math.inf`` train the non-private model (no
        noise, no ledger event).
    classes : array-like or None, default None
        The public label set (one one-vs-all classifier per class, also for a class
        without records). ``None`` reads it from ``y``, with a
        ``PrivacyLeakWarning`` when the model is private.
    random_state : int, RandomState or None, default None
        Seeds the ``torch.Generator`` of the (public) feature map; it never reaches the noise.
    noise_seed : int or None, default None
        ``None``: the noise comes from fresh operating-system entropy. An int makes it
        reproducible (tests, benchmarks): ``PrivacyLeakWarning``,
        and the ledger's summary says ``"noise": "reproducible"``.
    device : torch.device or str, optional
        Where to compute; CPU by default.
    dtype : torch.dtype, default torch.float64
        Precision of the feature map and the weights.
    ledger : PrivacyLedger, optional
        Records the releases (and enforces its budget); a fresh ledger per ``fit`` if None.
    tol : float, default 1e-6
        Absolute duality gap at which the solver stops; enters the sensitivity. A private
        fit needs ``tol >= 1e-8`` (``MIN_PRIVATE_SVM_TOL``).
    max_iter : int, default 20000
        Solver iterations of a non-private fit, which raises ``RuntimeError`` if they do not
        reach ``tol``. A private fit ignores it and iterates until the gap is ``<= tol``:
        the sensitivity bound assumes that gap, and a cap that one record could make the
        solver hit would void the guarantee (so its running time depends on the data; the
        gap and iteration count go to the curator-only ``curator_``).

    Attributes
    ----------
    classes_ : ndarray (K,)
        The class labels.
    features_ : RandomFourierFeatures
        The public feature map.
    sensitivity_ : float
        L1 sensitivity of the ``K`` scores of one query point.
    l2_sensitivity_ : float
        ``cap kappa + 2 sqrt(2 tol)`` per classifier.
    ledger_ : PrivacyLedger
        Grows by one event per answered batch.

    Notes
    -----
    Sensitivity (add/remove one record; ``cap`` fixed, ``kappa = 1``): per classifier
    ``||w_D - w_D'||_2 <= cap kappa + 2 sqrt(2 tol)`` (see ``PrivateSVMWeight``), so a
    score moves by ``|(w_D - w_D') . phi(z)| <= (cap kappa + 2 sqrt(2 tol)) kappa`` and the
    ``K`` scores of one query point by

        l1_sensitivity = K (cap kappa + 2 sqrt(2 tol)) kappa.

    Each query point is one ``epsilon``-DP release; a batch of ``m`` points is ``m``
    releases, recorded as one ledger event ``"svm_output_queries"`` of kind ``"pure"`` with
    ``count = m`` (basic composition: ``m epsilon``; the ledger's accountant may report
    less at ``delta > 0``). The whole batch is checked against the ledger's budget before
    any noise is drawn. ``predict`` is ``argmax`` of the noisy scores (post-processing), and
    ``score`` spends like ``predict``; calling ``predict`` and ``decision_function`` on the
    same points spends twice.

    References
    ----------
    Jain & Thakurta (2013). Differentially private learning with kernels. *ICML 2013*.

    Park (2022). *Differentially private multi-class classification using kernel
    supports and equilibrium points*. Master's thesis, Seoul National University.
    """

    def planned_privacy_events(self, n_features: int) -> tuple[PrivacyEvent, ...]:
        """None: ``fit`` releases nothing (the exact weights stay with the publisher); every
        answered query is an ``epsilon``-DP release charged to the ledger when it is asked
        (in a ``DPPipeline``, to the pipeline's). Without privacy (``epsilon=None``: exact
        answers) one ``non_private`` event."""
        self._validate_params()
        if self._private_epsilon() is None:
            return (NonPrivateEvent(name="svm_output/non_private"),)
        return ()

    def fit(self, X, y):
        """Train the exact (non-private) weights on ``X (n, d)``, ``y (n,)``; nothing is released."""
        weights = self._fit_weights(X, y)
        K = weights.shape[0]
        self.sensitivity_ = K * self.l2_sensitivity_ * self.features_.kappa
        self._weights = weights  # float64, held by the publisher, never released
        # With noise_seed: the seeded stream's state (picklable, advances with every query);
        # without: None, and every answer draws fresh entropy.
        private = self._private_epsilon() is not None
        self._noise_state = self._noise_generator().get_state() if private and self.noise_seed is not None else None
        return self

    def decision_function(self, X) -> np.ndarray:
        """Noisy scores of ``X (m, d)``, shape ``(m, K)``; spends ``epsilon`` per row."""
        scores = self._scores(X, "_weights")
        eps = self._private_epsilon()
        if eps is None:
            return scores.cpu().numpy()
        m = scores.shape[0]
        self.ledger_.spend(
            PureEvent(
                eps,
                count=m,
                name="svm_output_queries",
                sensitivity=self.sensitivity_,
            )
        )
        if self._noise_state is None:
            generator = fresh_generator()  # fresh operating-system entropy
            self.ledger_.note_noise_source("fresh")
        else:
            # the seeded stream of noise_seed (warned at fit), continued
            generator = seeded_generator(int(self.noise_seed), warn=False)
            generator.set_state(self._noise_state)
            self.ledger_.note_noise_source("reproducible")
        # recorded above for all m rows at once; i.i.d. Lap(sensitivity / epsilon) per score.
        # One release per row: the sensitivity holds per query point (the harness hook
        # checks each row against it), the rows compose as the ledger event says.
        noisy = (
            torch.stack(
                [
                    laplace_mechanism(
                        row, self.sensitivity_, eps, ledger=None, generator=generator, name="svm_output_queries"
                    )
                    for row in scores
                ]
            )
            if m
            else scores.to(torch.float64)
        )
        if self._noise_state is not None:
            self._noise_state = generator.get_state()
        return noisy.cpu().numpy()
