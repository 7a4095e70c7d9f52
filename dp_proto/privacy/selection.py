"""Private hyperparameter selection: the best of a random number of private runs.

A grid search over a private estimator spends the budget once per fit and selects on
scores computed without noise. ``PrivateSearchCV`` follows Papernot & Steinke (2022)
instead: each *run* draws a candidate from the grid uniformly at random, fits the
estimator on a training split and scores it by a noisy count of correct predictions on a
validation split; the number of runs ``K`` is drawn, independently of the data, from the
truncated negative binomial distribution (shape ``eta``, mean ``mean_runs``); only the
best run (its hyperparameters, its model and its noisy score) is released. The whole
search is one ``RepeatAndSelectEvent`` in the ledger, accounted by its Renyi-DP curve,
plus the noisy size of the validation split (for ``best_score_``); the per-run epsilon
is calibrated so that the search as a whole meets ``(epsilon, delta)``.

Reference: Papernot & Steinke (2022). Hyperparameter tuning with Renyi differential
privacy. *ICLR 2022*.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, clone
from sklearn.model_selection import ParameterGrid
from sklearn.utils.validation import check_is_fitted

from dp_proto.privacy.calibration import check_delta, check_epsilon
from dp_proto.privacy.events import DiscreteLaplaceEvent, PrivacyEvent, RepeatAndSelectEvent
from dp_proto.privacy.ledger import PrivacyLedger
from dp_proto.privacy.mechanisms import noisy_count
from dp_proto.privacy.randomness import check_noise_seed, noise_generator
from dp_proto.privacy.session import inner_fits, record_fit

__all__ = ["PrivateSearchCV", "sample_runs"]

# Settings a candidate may not change: the search sets them for every run.
_SEARCH_OWNED = ("epsilon", "ledger")


def _bisect(f: Callable[[float], float], target: float, lo: float, hi: float, iters: int = 100) -> float:
    """The ``x`` in ``[lo, hi]`` with ``f(x) = target`` for an increasing ``f``."""
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return 0.5 * (lo + hi)


def _gamma_for_mean(mean: float, shape: float) -> float:
    """``gamma`` of the truncated negative binomial distribution with ``E[K] = mean``."""
    if shape == 0:

        def expected(gamma: float) -> float:  # the logarithmic distribution
            return (1.0 / gamma - 1.0) / math.log(1.0 / gamma)

    else:

        def expected(gamma: float) -> float:
            return shape * (1.0 - gamma) / (gamma * (1.0 - gamma**shape))

    # E[K] falls from inf to 1 as gamma goes from 0 to 1: bisect on -E[K]
    return _bisect(lambda g: -expected(g), -mean, 1e-15, 1.0 - 1e-15)


def sample_runs(mean: float, shape: float, rng: np.random.Generator) -> int:
    """``K >= 1`` from the truncated negative binomial distribution of Papernot & Steinke
    (2022) with shape ``eta = shape >= 0`` (0: logarithmic, 1: geometric) and mean ``mean``
    (numpy's double-precision samplers; ``rng`` should hold fresh entropy)."""
    if mean <= 1.0:
        return 1
    gamma = _gamma_for_mean(mean, shape)
    if shape == 0:
        return int(rng.logseries(1.0 - gamma))
    while True:  # negative binomial as a gamma-Poisson mixture, conditioned on K >= 1
        k = int(rng.poisson(rng.gamma(shape, (1.0 - gamma) / gamma)))
        if k >= 1:
            return k


def _events_key(events: Sequence[PrivacyEvent]) -> tuple:
    return tuple(sorted(repr(sorted((k, str(v)) for k, v in e.to_dict().items() if k != "name")) for e in events))


#: What the guarantee of a selected model covers (its ``privacy_scope_``).
SEARCH_SCOPE = (
    "the (epsilon, delta) guarantee covers the records passed to PrivateSearchCV.fit (add/remove one record): "
    "the split, every run's fit and score and the selection; the candidates, the budget and the public "
    "settings of the estimator are public"
)


def _with_search_guarantee(estimator: Any, ledger: PrivacyLedger, delta: float) -> Any:
    """The selected run's model, carrying the search's ledger: it is the output of the
    whole search, so its ``epsilon_`` and any release of it state the search's guarantee,
    never the run's own."""
    if hasattr(estimator, "ledger_"):
        estimator.ledger_ = ledger
        estimator.epsilon_ = ledger.get_epsilon(getattr(estimator, "delta", delta))
        estimator.privacy_scope_ = SEARCH_SCOPE
    return estimator


class PrivateSearchCV(BaseEstimator):
    """Private hyperparameter selection over a private estimator (Papernot & Steinke 2022).

    Parameters
    ----------
    estimator : private estimator
        A dp-proto private estimator with ``epsilon``, ``ledger``,
        ``planned_privacy_events(n_features)``, ``fit`` and ``predict`` (``DPGLVQ``,
        ``DPGMLVQ``, ``DPLGMLVQ``, ``DPPairwiseGMLVQ``, ...). Its other settings (delta,
        bounds, classes) hold for every run.
    param_grid : dict or list of dicts
        Candidate hyperparameters (scikit-learn's ``ParameterGrid``); each run draws one
        uniformly at random. Candidates may not set ``epsilon`` or ``ledger``, and must
        all give a run the same privacy events (the same sampling rate and epochs, for
        example): vary the learning rate, the model size, the metric's rank.
    epsilon, delta : float
        The budget of the whole search (every run, the selection, the validation size).
    mean_runs : float, default 10
        ``E[K]``, the expected number of runs; more runs explore more candidates and cost
        more epsilon per run.
    shape : float, default 0
        ``eta >= 0`` of the distribution of ``K`` (0: logarithmic, 1: geometric).
    validation_fraction : float, default 0.2
        Each record joins the validation split with this probability (fresh coins).
    score_fraction : float, default 0.1
        Share of a run's epsilon for its noisy count of correct validation predictions.
    size_fraction : float, default 0.02
        Share of ``epsilon`` for the noisy size of the validation split (``best_score_``).
    ledger : SharedLedger, optional
        A shared budget to spend the search in; default a new ledger with budget
        ``(epsilon, delta)``.
    noise_seed : int, optional
        Reproducible randomness for tests and benchmarks (warns ``PrivacyLeakWarning``;
        the ledger says ``"noise": "reproducible"``): the split, the number of runs, the
        candidates, the noisy counts, and every run's ``noise_seed`` and ``random_state``
        (where the estimator leaves them None). None (the default): fresh
        operating-system entropy.

    Attributes
    ----------
    best_params_ : dict
        The selected candidate.
    best_estimator_ : estimator
        The selected run's model (trained on the training split), carrying the search's
        ledger: its ``epsilon_`` and its release state the whole search's guarantee.
    best_score_ : float
        Its noisy validation accuracy (noisy correct count over the noisy split size,
        clipped to ``[0, 1]``).
    run_epsilon_ : float
        The epsilon of each run's fit (its score adds ``score_fraction`` of the run's total).
    n_runs_ : int
        ``K``, the number of runs made (drawn without the data).
    ledger_ : PrivacyLedger
        The search's releases; ``epsilon_`` is its epsilon at ``delta``.

    Notes
    -----
    Only the best run is released: the other runs' models and scores stay inside the
    search (releasing them would cost ``K`` times the run's epsilon). The number of runs
    is drawn with numpy's samplers from fresh operating-system entropy.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from dp_proto.lvq.private import DPGLVQ
    >>> from dp_proto.privacy import PrivateSearchCV
    >>> X, y = load_iris(return_X_y=True)
    >>> base = DPGLVQ(bounds=(0, 8), classes=[0, 1, 2], sampling_rate=0.2, epochs=2)
    >>> search = PrivateSearchCV(base, {"lr": [0.05, 0.5]}, epsilon=2.0, mean_runs=3).fit(X, y)
    >>> round(search.epsilon_, 6) <= 2.0
    True
    """

    def __init__(
        self,
        estimator: Any,
        param_grid: Mapping[str, Sequence[Any]] | Sequence[Mapping[str, Sequence[Any]]],
        *,
        epsilon: float = 1.0,
        delta: float = 1e-5,
        mean_runs: float = 10.0,
        shape: float = 0.0,
        validation_fraction: float = 0.2,
        score_fraction: float = 0.1,
        size_fraction: float = 0.02,
        ledger: PrivacyLedger | None = None,
        noise_seed: int | None = None,
    ) -> None:
        self.estimator = estimator
        self.param_grid = param_grid
        self.epsilon = epsilon
        self.delta = delta
        self.mean_runs = mean_runs
        self.shape = shape
        self.validation_fraction = validation_fraction
        self.score_fraction = score_fraction
        self.size_fraction = size_fraction
        self.ledger = ledger
        self.noise_seed = noise_seed

    # -- the plan: public settings only -------------------------------------------------
    def _candidates(self) -> list[dict[str, Any]]:
        candidates = list(ParameterGrid(self.param_grid))
        owned = sorted({k for c in candidates for k in c} & set(_SEARCH_OWNED))
        if owned:
            raise ValueError(f"the search sets {owned} for every run; remove them from param_grid")
        for name in ("planned_privacy_events", "fit", "predict"):
            if not hasattr(self.estimator, name):
                raise TypeError(f"{type(self.estimator).__name__} is not a private estimator: it has no {name}")
        return candidates

    def _check_params(self) -> None:
        check_epsilon(self.epsilon, "epsilon")
        check_delta(self.delta, "delta", allow_zero=False)
        if not (math.isfinite(self.mean_runs) and self.mean_runs >= 1):
            raise ValueError(f"mean_runs must be a finite number >= 1, got {self.mean_runs!r}")
        if not (math.isfinite(self.shape) and self.shape >= 0):
            raise ValueError(f"shape must be a finite number >= 0, got {self.shape!r}")
        for name in ("validation_fraction", "score_fraction", "size_fraction"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise ValueError(f"{name} must lie in (0, 1), got {value!r}")

    def _run_events(self, run_epsilon: float, n_features: int, candidate: Mapping[str, Any]) -> tuple:
        """The releases of one run at total ``run_epsilon``: the fit's and its score's."""
        fit_epsilon = (1.0 - self.score_fraction) * run_epsilon
        estimator = clone(self.estimator).set_params(**candidate, epsilon=fit_epsilon, ledger=None)
        score = DiscreteLaplaceEvent(self.score_fraction * run_epsilon, name="selection/validation_correct")
        return (*estimator.planned_privacy_events(n_features), score)

    def _smallest_plannable(self, n_features: int, candidate: Mapping[str, Any]) -> float:
        """A run epsilon the estimator can be planned at (a fit's initialisation takes a
        fixed share: far below ``epsilon`` it cannot calibrate its DP-SGD noise)."""
        run_epsilon = 0.01 * self.epsilon
        while True:
            try:
                self._run_events(run_epsilon, n_features, candidate)
                return run_epsilon
            except ValueError:
                if run_epsilon >= self.epsilon:
                    raise
                run_epsilon = min(2.0 * run_epsilon, self.epsilon)

    def _size_event(self) -> PrivacyEvent:
        return DiscreteLaplaceEvent(self.size_fraction * self.epsilon, name="selection/validation_size")

    def _selection_event(self, inner: Sequence[PrivacyEvent]) -> RepeatAndSelectEvent:
        return RepeatAndSelectEvent(
            inner=tuple(inner), mean=float(self.mean_runs), shape=float(self.shape), name="selection"
        )

    def planned_privacy_events(self, n_features: int) -> tuple[PrivacyEvent, ...]:
        """The search's releases on ``n_features`` features, from public settings only: the
        validation size and one repeat-and-select event whose runs are calibrated so that
        the whole is ``(epsilon, delta)``-DP. ``ValueError`` when candidates differ in
        their privacy events or no run epsilon meets the budget."""
        size, selection, _ = self._plan(n_features)
        return (size, selection)

    def _plan(self, n_features: int) -> tuple[PrivacyEvent, RepeatAndSelectEvent, float]:
        """``(validation size event, selection event, run epsilon)``: see
        ``planned_privacy_events``."""
        self._check_params()
        candidates = self._candidates()
        size = self._size_event()
        self._check_same_events(self.epsilon, n_features, candidates)  # before the calibration: fails fast

        def total(run_epsilon: float) -> float:
            events = (size, self._selection_event(self._run_events(run_epsilon, n_features, candidates[0])))
            return PrivacyLedger.epsilon_of(events, self.delta)

        lo = self._smallest_plannable(n_features, candidates[0])
        if not total(lo) < self.epsilon:
            raise ValueError("the budget does not cover the selection's fixed cost; raise epsilon or lower mean_runs")
        run_epsilon = _bisect(total, self.epsilon, lo, self.epsilon, iters=12)
        while total(run_epsilon) > self.epsilon:  # the bisection's midpoint may lie just above
            run_epsilon *= 1.0 - 1e-6
        inner = self._check_same_events(run_epsilon, n_features, candidates)
        return size, self._selection_event(inner), run_epsilon

    def _check_same_events(self, run_epsilon: float, n_features: int, candidates: list[dict[str, Any]]) -> tuple:
        """A run's events at ``run_epsilon``; ``ValueError`` unless every candidate gives
        a run the same ones."""
        inner = self._run_events(run_epsilon, n_features, candidates[0])
        key = _events_key(inner)
        for candidate in candidates[1:]:
            if _events_key(self._run_events(run_epsilon, n_features, candidate)) != key:
                raise ValueError(
                    f"the candidate {candidate} changes the privacy events of a run; vary only settings that "
                    "leave them alone (not the sampling rate or the epochs)"
                )
        return inner

    # -- the search ---------------------------------------------------------------------
    def fit(self, X: Any, y: Any) -> PrivateSearchCV:
        """Run the search on ``X (n, d)``, ``y (n,)``; see the class docstring."""
        X, y = np.asarray(X), np.asarray(y)
        if X.ndim != 2 or y.shape != (X.shape[0],):
            raise ValueError("X must have shape (n, d) and y shape (n,)")
        size, selection, run_epsilon = self._plan(X.shape[1])
        fit_events = _events_key(selection.inner[:-1])  # a run's fit, without its score
        ledger = self.ledger if self.ledger is not None else PrivacyLedger(budget=(self.epsilon, self.delta))
        ledger.spend(size, selection)  # refused here, before the data are read, when over a budget
        scratch = PrivacyLedger()
        seed = check_noise_seed(self.noise_seed)
        counts = noise_generator(seed, owner=type(self).__name__)
        ledger.note_noise_source("fresh" if seed is None else "reproducible")
        rng = np.random.Generator(np.random.PCG64(secrets.randbits(128) if seed is None else seed))
        in_validation = rng.random(X.shape[0]) < self.validation_fraction
        x_train, y_train = X[~in_validation], y[~in_validation]
        x_val, y_val = X[in_validation], y[in_validation]
        noisy_size = noisy_count(
            int(in_validation.sum()), self.size_fraction * self.epsilon, ledger=scratch, generator=counts
        )
        candidates = self._candidates()
        fit_epsilon = (1.0 - self.score_fraction) * run_epsilon
        self.n_runs_ = sample_runs(float(self.mean_runs), float(self.shape), rng)
        best: tuple[float, Any, dict[str, Any]] | None = None
        for run in range(self.n_runs_):
            candidate = candidates[int(rng.integers(len(candidates)))]
            estimator = clone(self.estimator).set_params(**candidate, epsilon=fit_epsilon, ledger=None)
            if seed is not None:  # every run reproducible too
                params = estimator.get_params()
                estimator.set_params(
                    **{k: seed + 1 + run for k in ("noise_seed", "random_state") if k in params and params[k] is None}
                )
            with inner_fits():
                estimator.fit(x_train, y_train)
            if _events_key(estimator.ledger_.events) != fit_events:  # a bug, never the data
                raise RuntimeError(f"{type(estimator).__name__} released other events than it planned")
            correct = int((np.asarray(estimator.predict(x_val)) == y_val).sum()) if len(y_val) else 0
            score = noisy_count(
                correct,
                self.score_fraction * run_epsilon,
                ledger=scratch,
                name="selection/validation_correct",
                generator=counts,
            )
            if best is None or score > best[0]:
                best = (score, estimator, candidate)
        assert best is not None  # K >= 1
        self.best_score_ = float(min(max(best[0] / max(noisy_size, 1.0), 0.0), 1.0))
        self.best_estimator_ = _with_search_guarantee(best[1], ledger, self.delta)
        self.best_params_ = dict(best[2])
        self.run_epsilon_ = fit_epsilon
        self.ledger_ = ledger
        self.epsilon_ = ledger.get_epsilon(self.delta)
        record_fit(self, ledger, shared=self.ledger is not None, delta=self.delta)
        return self

    def predict(self, X: Any) -> np.ndarray:
        """The selected model's predictions."""
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.predict(X)

    def score(self, X: Any, y: Any) -> float:
        """The selected model's accuracy on ``X``, ``y`` (not private: held-out data)."""
        check_is_fitted(self, "best_estimator_")
        return float(self.best_estimator_.score(X, y))
