"""Empirical privacy audit: a statistical *lower* bound on epsilon.

The distinguishing game (Jagielski et al. 2020; Nasr et al. 2021)
-----------------------------------------------------------------
Fix two neighbouring data sets ``D0`` and ``D1`` (here: ``D1`` is ``D0`` plus one
record, a *canary*). An adversary sees one output ``o = M(Db)`` and guesses ``b``
with a threshold test on a scalar statistic ``s(o)``: "``D1`` iff ``s(o) > t``" (or
the reversed direction, "``D1`` iff ``s(o) <= t``"). Call ``S`` the set of outputs on
which it guesses ``D1``; its error rates are

    FPR = P[M(D0) in S],        FNR = P[M(D1) not in S].

If ``M`` is (epsilon, delta)-DP then ``P[M(D1) in S] <= e^eps P[M(D0) in S] + delta``
and ``P[M(D0) not in S] <= e^eps P[M(D1) not in S] + delta``, i.e.

    eps >= log((1 - delta - FNR) / FPR)   and   eps >= log((1 - delta - FPR) / FNR).

So any test with small error rates *proves* that epsilon is at least this large.
We cannot know FPR and FNR exactly, only estimate them from ``n`` runs of ``M`` on each
data set; replacing them by Clopper-Pearson upper confidence bounds makes the
right-hand sides smaller, so the result is a lower bound that holds with the stated
confidence.

What the confidence means
-------------------------
``confidence = 0.95`` means: over the randomness of the audit (the mechanism's noise
in all trials), the probability that the returned ``epsilon_lower_bound`` exceeds
the true epsilon of ``M`` (for the given delta) is at most 5 %. The two upper bounds
come from independent samples (one per data set), so each is taken at level
``sqrt(confidence)`` and both hold at once with probability ``>= confidence``.

Threshold selection (held-out split)
------------------------------------
Trying many thresholds on the same samples and reporting the best would be a
multiple comparison. Instead the trials of each data set are split in two halves:
the threshold and direction are *chosen* on the first half (the candidate with the
largest bound computed there, with stricter 99.9 % Clopper-Pearson bounds that avoid
sparse tails which look good by luck), and the bound is *evaluated* on the second half only,
for that one test. The evaluation half is independent of the choice, so no further
correction is needed; the price is that only half of the trials certify.

Under a Gaussian trade-off (``gaussian_dp_lower_bound``)
------------------------------------------------------
At a small delta the claimed epsilon is decided by far tails that ``n`` trials cannot
resolve, so the bound above stays well below the claim of a correct mechanism. Nasr et
al. (2023) therefore audit DP-SGD under the assumption that its trade-off curve is that
of a Gaussian mechanism (``mu``-GDP, the form the composition of Gaussian steps takes):
one test with plenty of errors on both sides bounds ``mu`` from below,
``mu >= Phi^-1(1 - FPR) - Phi^-1(FNR)`` at the Clopper-Pearson upper bounds, and the
epsilon of a ``mu``-GDP mechanism at ``delta`` is the bound. It is parametric: a
mechanism whose trade-off curve is not Gaussian can fool it either way.

A lower bound is only as strong as the test: a poor canary or statistic gives a
loose bound, never a wrong one. A bound above the *claimed* epsilon is evidence
(at the given confidence) that the claim is false.

Speed: pass ``batch=B`` to let ``mechanism(dataset, generator, B)`` return ``B``
independent trials at once (a tensor whose first dimension is ``B``); the
ready-made setups below do this for the Laplace and Gaussian mechanisms.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from scipy.stats import beta, norm
from torch import Tensor

from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.privacy.calibration import analytic_gaussian_delta
from dp_proto.privacy.mechanisms import gaussian_mechanism, laplace_mechanism

__all__ = [
    "AuditResult",
    "AuditSetup",
    "audit_epsilon",
    "clopper_pearson_upper",
    "gaussian_dp_lower_bound",
    "gaussian_audit_setup",
    "laplace_audit_setup",
    "trial_noise_seed",
    "without_leak_warning",
]

#: Level of the Clopper-Pearson bounds used to *choose* the test (on the selection half).
#: Stricter than the certifying level: it steers away from sparse tails that look good by
#: luck (the winner's curse of picking the best of many tests). Any rule is valid here.
_SELECTION_LEVEL = 0.999
#: Default thresholds need at least this many pooled selection samples beyond them.
_MIN_TAIL_COUNT = 30


def _default_levels(n_pooled: int) -> np.ndarray:
    tails = np.geomspace(max(1e-4, _MIN_TAIL_COUNT / n_pooled), 0.5, 40)
    return np.unique(np.concatenate([tails, 1.0 - tails, np.linspace(0.01, 0.99, 99)]))


@dataclass(frozen=True)
class AuditResult:
    """Outcome of ``audit_epsilon``.

    Attributes
    ----------
    epsilon_lower_bound : float
        ``eps`` such that ``P[true epsilon < eps] <= 1 - confidence`` (0 if no test
        certifies anything).
    threshold, direction : float, str
        The chosen test: guess ``dataset_1`` iff ``statistic > threshold``
        (``direction=">"``) or ``statistic <= threshold`` (``"<="``).
    fpr, fnr : float
        Point estimates of the test's error rates on the evaluation half.
    fpr_upper, fnr_upper : float
        Their Clopper-Pearson upper bounds (each at level ``sqrt(confidence)``).
    epsilon_estimate : float
        The same formula with the point estimates (no confidence; may overshoot).
    n_trials : int
        Trials per data set (half select the test, half evaluate it).
    confidence, delta : float
    statistics_0, statistics_1 : numpy arrays, shape (n_trials,)
        The raw statistic of every trial on ``dataset_0`` / ``dataset_1``.
    """

    epsilon_lower_bound: float
    threshold: float
    fpr: float
    fnr: float
    n_trials: int
    confidence: float
    delta: float
    direction: str = ">"
    fpr_upper: float = 1.0
    fnr_upper: float = 1.0
    epsilon_estimate: float = 0.0
    statistics_0: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False, compare=False)
    statistics_1: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False, compare=False)

    def summary(self) -> dict[str, Any]:
        """The scalar fields as a JSON-serialisable dict (no raw statistics)."""
        keys = (
            "epsilon_lower_bound",
            "epsilon_estimate",
            "threshold",
            "direction",
            "fpr",
            "fnr",
            "fpr_upper",
            "fnr_upper",
            "n_trials",
            "confidence",
            "delta",
        )
        return {k: getattr(self, k) for k in keys}


def clopper_pearson_upper(k, n: int, level: float) -> np.ndarray:
    """One-sided Clopper-Pearson upper bound on a binomial rate from ``k`` of ``n``:
    ``P[rate > bound] <= 1 - level``. Vectorised over ``k``; 1 where ``k == n``."""
    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        upper = beta.ppf(level, k + 1, np.maximum(n - k, 1e-300))
    return np.where(k >= n, 1.0, upper)


def _test_epsilons(s0: np.ndarray, s1: np.ndarray, thresholds: np.ndarray, level: float, delta: float):
    """Bounds of all tests: arrays of shape (2, T) for directions (">", "<=") of
    (epsilon, fpr, fnr, fpr_upper, fnr_upper); epsilon is -inf where nothing is certified."""
    n0, n1 = len(s0), len(s1)
    le0 = np.searchsorted(np.sort(s0), thresholds, side="right")  # #(s0 <= t)
    le1 = np.searchsorted(np.sort(s1), thresholds, side="right")
    fp = np.stack([n0 - le0, le0])  # ">": s0 > t ;  "<=": s0 <= t
    fn = np.stack([le1, n1 - le1])  # ">": s1 <= t;  "<=": s1 > t
    fpr_u, fnr_u = clopper_pearson_upper(fp, n0, level), clopper_pearson_upper(fn, n1, level)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(1 - delta - fnr_u > 0, np.log(np.maximum(1 - delta - fnr_u, 1e-300)) - np.log(fpr_u), -np.inf)
        b = np.where(1 - delta - fpr_u > 0, np.log(np.maximum(1 - delta - fpr_u, 1e-300)) - np.log(fnr_u), -np.inf)
    return np.maximum(a, b), fp / n0, fn / n1, fpr_u, fnr_u


def _point_epsilon(fpr: float, fnr: float, delta: float) -> float:
    vals = [math.log((1 - delta - x) / y) for x, y in ((fnr, fpr), (fpr, fnr)) if y > 0 and 1 - delta - x > 0]
    inf = any(y == 0 and 1 - delta - x > 0 for x, y in ((fnr, fpr), (fpr, fnr)))
    # epsilon >= 0 by definition: a test worse than guessing estimates nothing below 0
    return math.inf if inf else max(max(vals, default=0.0), 0.0)


def _default_statistic(output: Any, batched: bool) -> Tensor:
    out = torch.as_tensor(output)
    return out.reshape(out.shape[0], -1)[:, 0] if batched else out.reshape(-1)[0]


def _collect(mechanism, dataset, statistic, n: int, seeds: np.ndarray, batch: int | None) -> np.ndarray:
    gen = torch.Generator()
    if batch is None:
        stats = np.empty(n, dtype=np.float64)
        for i in range(n):
            gen.manual_seed(int(seeds[i]))
            out = mechanism(dataset, gen)
            stats[i] = float(statistic(out)) if statistic is not None else float(_default_statistic(out, False))
        return stats
    chunks = []
    for i, start in enumerate(range(0, n, batch)):
        size = min(batch, n - start)
        gen.manual_seed(int(seeds[i]))
        out = mechanism(dataset, gen, size)
        s = statistic(out) if statistic is not None else _default_statistic(out, True)
        s = np.asarray(torch.as_tensor(s).detach().cpu(), dtype=np.float64).reshape(-1)
        if s.shape != (size,):
            raise ValueError(f"with batch={batch}, mechanism and statistic must give {size} values, got {s.shape}")
        chunks.append(s)
    return np.concatenate(chunks)


def audit_epsilon(
    mechanism: Callable[..., Any],
    dataset_0: Any,
    dataset_1: Any,
    *,
    statistic: Callable[[Any], Any] | None = None,
    n_trials: int = 20_000,
    delta: float = 0.0,
    confidence: float = 0.95,
    thresholds: Sequence[float] | np.ndarray | None = None,
    generator_seed: int = 0,
    batch: int | None = None,
) -> AuditResult:
    """Audit ``mechanism`` on the neighbouring pair ``(dataset_0, dataset_1)``: a lower
    bound on its epsilon (for ``delta``) that holds with probability ``confidence``.

    Parameters
    ----------
    mechanism : callable
        ``mechanism(dataset, generator) -> output``: one run with all randomness from
        the ``torch.Generator``. With ``batch``: ``mechanism(dataset, generator, size)``
        returning ``size`` independent runs stacked along the first dimension.
    dataset_0, dataset_1 : any
        Neighbouring inputs (passed to ``mechanism`` unchanged).
    statistic : callable, optional
        Output to scalar (with ``batch``: a batch of outputs to ``size`` scalars).
        Default: the first coordinate of the output.
    n_trials : int
        Runs per data set (>= 20); the first half chooses the test, the second
        half certifies it (see the module docstring).
    delta : float
        The delta of the claim being audited, in ``[0, 1)``.
    confidence : float
        Probability, over the audit's randomness, that the bound is valid.
    thresholds : sequence of float, optional
        Candidate thresholds; default: quantiles of the pooled statistics of the
        selection half (dense in both tails, where the best tests usually lie).
    generator_seed : int
        Seeds every run (each data set gets its own independent seed stream), so an
        audit is reproducible.
    batch : int, optional
        Runs per mechanism call (vectorised mechanisms).

    Returns
    -------
    AuditResult
    """
    if n_trials < 20:
        raise ValueError(f"n_trials must be >= 20, got {n_trials}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    if not 0 <= delta < 1:
        raise ValueError(f"delta must lie in [0, 1), got {delta!r}")
    if batch is not None and batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    n_calls = n_trials if batch is None else -(-n_trials // batch)
    seq0, seq1 = np.random.SeedSequence(generator_seed).spawn(2)
    s0 = _collect(mechanism, dataset_0, statistic, n_trials, seq0.generate_state(n_calls, np.uint64), batch)
    s1 = _collect(mechanism, dataset_1, statistic, n_trials, seq1.generate_state(n_calls, np.uint64), batch)
    if not (np.isfinite(s0).all() and np.isfinite(s1).all()):
        raise ValueError("the statistic returned NaN or inf")

    level = math.sqrt(confidence)
    half = n_trials // 2
    sel0, sel1, ev0, ev1 = s0[:half], s1[:half], s0[half:], s1[half:]
    if thresholds is None:
        pooled = np.concatenate([sel0, sel1])
        cand = np.unique(np.quantile(pooled, _default_levels(len(pooled))))
    else:
        cand = np.unique(np.asarray(thresholds, dtype=np.float64).reshape(-1))
        if cand.size == 0:
            raise ValueError("thresholds is empty")
    eps_sel = _test_epsilons(sel0, sel1, cand, max(level, _SELECTION_LEVEL), delta)[0]
    direction_idx, t_idx = np.unravel_index(int(np.argmax(eps_sel)), eps_sel.shape)
    threshold = float(cand[t_idx])

    eps, fpr, fnr, fpr_u, fnr_u = (
        a[direction_idx, 0] for a in _test_epsilons(ev0, ev1, np.array([threshold]), level, delta)
    )
    return AuditResult(
        epsilon_lower_bound=float(max(eps, 0.0)),
        threshold=threshold,
        fpr=float(fpr),
        fnr=float(fnr),
        n_trials=n_trials,
        confidence=confidence,
        delta=delta,
        direction=(">", "<=")[direction_idx],
        fpr_upper=float(fpr_u),
        fnr_upper=float(fnr_u),
        epsilon_estimate=_point_epsilon(float(fpr), float(fnr), delta),
        statistics_0=s0,
        statistics_1=s1,
    )


def _gaussian_mu(fpr: np.ndarray, fnr: np.ndarray) -> np.ndarray:
    """``mu`` of the Gaussian trade-off curve through ``(fpr, fnr)`` (0 below the diagonal)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        mu = norm.ppf(1.0 - fpr) - norm.ppf(fnr)
    return np.where(np.isfinite(mu), np.maximum(mu, 0.0), 0.0)


def _gdp_epsilon(mu: float, delta: float) -> float:
    """The epsilon of a ``mu``-GDP mechanism at ``delta`` (Balle & Wang 2018, Thm 8, with
    sigma ``1 / mu``), by bisection; 0 if ``delta`` is reached at epsilon 0."""
    if mu <= 0 or analytic_gaussian_delta(1.0 / mu, 0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while analytic_gaussian_delta(1.0 / mu, hi) > delta:
        lo, hi = hi, 2.0 * hi
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if analytic_gaussian_delta(1.0 / mu, mid) > delta else (lo, mid)
    return lo


def gaussian_dp_lower_bound(result: AuditResult) -> tuple[float, float]:
    """``(epsilon, mu)``: lower bounds from ``result``'s raw statistics under the
    assumption that the mechanism's trade-off curve is Gaussian (see the module
    docstring), at ``result.delta`` and ``result.confidence``.

    The same held-out split as ``audit_epsilon``: the test (threshold and direction)
    with the largest ``mu`` bound on the first half of each data set's trials (at the
    stricter selection level), certified on the second half.
    """
    s0, s1, n = result.statistics_0, result.statistics_1, result.n_trials
    if s0.size < 20 or s1.size < 20:
        raise ValueError("the result holds no raw statistics (at least 20 trials per data set)")
    half, level = n // 2, math.sqrt(result.confidence)
    sel0, sel1, ev0, ev1 = s0[:half], s1[:half], s0[half:], s1[half:]
    cand = np.unique(np.quantile(np.concatenate([sel0, sel1]), np.linspace(0.01, 0.99, 99)))
    _, _, _, fpr_u, fnr_u = _test_epsilons(sel0, sel1, cand, max(level, _SELECTION_LEVEL), 0.0)
    direction, t = np.unravel_index(int(np.argmax(_gaussian_mu(fpr_u, fnr_u))), fpr_u.shape)
    _, _, _, fpr_u, fnr_u = _test_epsilons(ev0, ev1, cand[t : t + 1], level, 0.0)
    mu = float(_gaussian_mu(fpr_u[direction], fnr_u[direction])[0])
    return _gdp_epsilon(mu, result.delta), mu


# -- ready-made neighbouring pairs --------------------------------------------------------
@dataclass(frozen=True)
class AuditSetup:
    """A mechanism with its claim and a neighbouring pair, ready for ``audit``."""

    name: str
    claimed_epsilon: float
    delta: float
    mechanism: Callable[..., Any]
    dataset_0: Any
    dataset_1: Any
    statistic: Callable[[Any], Any] | None = None
    batch: int | None = None

    def audit(self, n_trials: int = 20_000, **kwargs: Any) -> AuditResult:
        """``audit_epsilon`` on this setup (keyword arguments are passed on)."""
        kwargs.setdefault("delta", self.delta)
        return audit_epsilon(
            self.mechanism,
            self.dataset_0,
            self.dataset_1,
            statistic=self.statistic,
            n_trials=n_trials,
            batch=self.batch,
            **kwargs,
        )


def _count_pair(n_records: int) -> tuple[Tensor, Tensor]:
    d0 = torch.ones(n_records, dtype=torch.float64)
    return d0, torch.cat([d0, torch.ones(1, dtype=torch.float64)])  # D1 = D0 plus one record


def laplace_audit_setup(
    epsilon: float, *, noise_factor: float = 1.0, n_records: int = 100, batch: int = 50_000
) -> AuditSetup:
    """A count query released with ``laplace_mechanism`` (sensitivity 1,
    ``single_coordinate=True``), claimed ``epsilon``-DP; ``dataset_1`` is ``dataset_0``
    plus one record. ``noise_factor < 1`` under-noises on purpose (scale times
    ``noise_factor``, true epsilon ``epsilon / noise_factor``) to check that the audit
    catches a broken claim."""

    def mechanism(dataset: Tensor, generator: torch.Generator, size: int) -> Tensor:
        counts = torch.full((size,), float(len(dataset)), dtype=torch.float64)
        return laplace_mechanism(
            counts, 1.0, epsilon / noise_factor, generator=generator, single_coordinate=True, ledger=None
        )

    d0, d1 = _count_pair(n_records)
    name = f"laplace_eps{epsilon:g}" if noise_factor == 1.0 else f"broken_laplace_claims{epsilon:g}"
    return AuditSetup(name, epsilon, 0.0, mechanism, d0, d1, batch=batch)


def gaussian_audit_setup(
    epsilon: float, delta: float = 1e-5, *, n_records: int = 100, batch: int = 50_000
) -> AuditSetup:
    """A count query released with ``gaussian_mechanism`` (l2 sensitivity 1,
    analytic calibration), claimed ``(epsilon, delta)``-DP."""

    def mechanism(dataset: Tensor, generator: torch.Generator, size: int) -> Tensor:
        counts = torch.full((size,), float(len(dataset)), dtype=torch.float64)
        return gaussian_mechanism(counts, 1.0, epsilon, delta, generator=generator, ledger=None)

    d0, d1 = _count_pair(n_records)
    return AuditSetup(f"gaussian_eps{epsilon:g}", epsilon, delta, mechanism, d0, d1, batch=batch)


# -- helpers for setups of whole trainers (dp_proto.lvq.private.audit, dp_proto.llp.audit) --
def trial_noise_seed(generator: torch.Generator) -> int:
    """A noise seed for one audit trial, drawn from the audit's generator: trials are
    independent, and the audit as a whole is reproducible from its ``generator_seed``."""
    return int(torch.randint(0, 2**62, (1,), generator=generator))


def without_leak_warning(fit: Callable[[], Any]) -> Any:
    """Run ``fit()`` with ``PrivacyLeakWarning`` silenced."""
    with warnings.catch_warnings():  # the audit opts in to reproducible noise on purpose
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        return fit()
