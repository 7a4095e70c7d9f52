"""Audits of a DP estimator's DP-SGD run, white box and black box, against the claim.

The threat model is the strongest one DP-SGD is analysed under (Nasr et al. 2023, "Tight
auditing of differentially private machine learning"): the auditor sees every step's
noisy gradient sum and the model before it, and chooses the neighbouring pair and the
model state. Here the pair is ``D0 = {}`` and ``D1 = {canary}``, and the model is held at
a state where the canary's gradient is far above the clipping norm ``C`` (a step size
of ``1e-12``: public post-processing), so that every step the canary joins adds exactly
one clipped gradient of norm ``C``: the worst case every step of the accountant's bound
assumes. The run is the estimator's own DP-SGD recipe (its engine, sampling rate, step
count, clipping and noise multiplier) through ``fit_dp_sgd``.

From the releases of ``runs`` such runs (``dp_proto.privacy.testing.capture_releases``)
the audit measures, with one-sided confidence bounds that hold together with probability
``confidence``:

* the noise: every coordinate of every step's noisy sum minus its pre-noise sum; an upper
  bound ``sigma_U`` on its standard deviation over ``C`` (chi-square, about ``P T runs``
  samples for ``P`` parameters);
* the sampling: how many of the ``T runs`` steps the canary joined; a lower bound
  ``q_L`` on the rate (Clopper-Pearson);
* the clipping: the smallest norm ``c`` of the canary's contribution, over ``C``.

The lower bound is the epsilon the accountant gives ``T`` Poisson-subsampled Gaussian
steps at rate ``q_L`` and noise multiplier ``sigma_U / c``: what a mechanism with the
measured noise, sampling and clipping spends. It is parametric: it holds for a mechanism
that adds independent Gaussian noise and samples each step independently, and the audit
reports how well the run fits that (a Kolmogorov-Smirnov p-value of the standardised
noise, and the lag-one autocorrelation of the canary's membership). A correct engine
gives a bound just below the claim; an engine that adds too little noise, skips the
clipping or couples its batches gives one above it (``BROKEN_TWINS`` rebuilds each).
The distinguishing-game audits (``dp_proto.privacy.audit``) make no such assumption but
need about ``1 / epsilon^2`` times more runs for a bound as tight.

``black_box_audit`` plays that distinguishing game with the final model only (the
black-box threat model of Annamalai & De Cristofaro 2024): ``fits`` whole runs of the
recipe on ``D0 = {}`` and on ``D1 = {canary}`` from the same worst-case initial state,
each run reduced to one number, the projection of its final prototypes on the direction
the canary pushes them, and the Clopper-Pearson bound of ``dp_proto.privacy.audit`` on
the best threshold test (chosen on one half of the fits, certified on the other), which
makes no assumption on the noise's form, and beside it the tighter bound under a Gaussian
trade-off curve (``gaussian_dp_lower_bound``, as Nasr et al. 2023). With the full batch (``q = 1``) the final model
carries everything the steps release (the canary's contribution is the same vector at
every step), so the bound can approach the claim; with Poisson subsampling the final
model hides which steps the canary joined, and black-box bounds are far below the
claim by nature.
"""

from __future__ import annotations

import contextlib
import copy
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any
from unittest import mock

import numpy as np
import torch
from scipy import stats
from torch import Tensor

from dp_proto.lvq.estimators import GMLVQ, LGMLVQ
from dp_proto.lvq.layers import GLVQLayer, GMLVQLayer, LGMLVQLayer
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private import fused, opacus_adapter
from dp_proto.lvq.private.dpsgd import DPSGD, SGDSettings, fit_dp_sgd
from dp_proto.privacy import sampling
from dp_proto.privacy.audit import AuditResult, audit_epsilon, gaussian_dp_lower_bound, without_leak_warning
from dp_proto.privacy.events import SubsampledGaussianEvent
from dp_proto.privacy.ledger import PrivacyLedger, dp_sgd_event
from dp_proto.privacy.testing import capture_releases

__all__ = ["BROKEN_TWINS", "WhiteBoxAudit", "white_box_audit", "BlackBoxAudit", "black_box_audit"]

#: Deliberately broken engines the audit must flag: the noise halved under the same claim,
#: the clipping skipped, and the canary put into every batch (its membership coupled to
#: nothing but itself, so the subsampling the claim counts on never happens).
BROKEN_TWINS = ("noise_halved", "clipping_skipped", "coupled_batch")


@dataclass(frozen=True)
class WhiteBoxAudit:
    """The outcome of ``white_box_audit``.

    Attributes
    ----------
    claimed_epsilon : float
        What the ledger certifies for the run's DP-SGD steps (``T`` steps at the
        estimator's calibrated noise multiplier and sampling rate), at ``delta``.
    epsilon_lower_bound : float
        The accountant's epsilon at the measured bounds ``(q_L, sigma_U / c)``: holds
        with probability ``confidence`` for a mechanism of the assumed form.
    epsilon_estimate : float
        The same at the point estimates (no confidence).
    noise_multiplier : float
        The claimed ``sigma``; ``noise_multiplier_measured`` / ``_upper``: the measured
        standard deviation over ``C`` and its upper bound.
    sampling_rate : float
        The claimed ``q``; ``sampling_rate_lower``: the measured lower bound from
        ``inclusions`` of ``steps * runs`` steps.
    contribution : float
        The smallest norm of the canary's clipped contribution over ``C`` (1 for an engine
        that clips; larger if the clipping is skipped).
    normality_pvalue, membership_autocorrelation : float
        How well the run fits the assumed form (see the module docstring).
    """

    claimed_epsilon: float
    epsilon_lower_bound: float
    epsilon_estimate: float
    noise_multiplier: float
    noise_multiplier_measured: float
    noise_multiplier_upper: float
    sampling_rate: float
    sampling_rate_measured: float
    sampling_rate_lower: float
    contribution: float
    inclusions: int
    steps: int
    runs: int
    noise_samples: int
    normality_pvalue: float
    membership_autocorrelation: float
    delta: float
    confidence: float

    @property
    def violation(self) -> bool:
        """Whether the lower bound exceeds the claim: evidence that the claim is false."""
        return self.epsilon_lower_bound > self.claimed_epsilon

    def summary(self) -> dict[str, Any]:
        """The fields and ``violation`` as a JSON-serialisable dict."""
        return {**{k: getattr(self, k) for k in self.__dataclass_fields__}, "violation": self.violation}


def _layer_of(estimator: Any) -> type[GLVQLayer]:
    """The prototype layer a DP-SGD estimator trains (LGMLVQ before GMLVQ: it subclasses it)."""
    if not hasattr(estimator, "dp_sgd_recipe"):
        raise TypeError(f"white_box_audit audits a DP-SGD estimator (DPGLVQ, DPGMLVQ, DPLGMLVQ), got {estimator!r}")
    for family, layer in ((LGMLVQ, LGMLVQLayer), (GMLVQ, GMLVQLayer)):
        if isinstance(estimator, family):
            return layer
    return GLVQLayer


def _worst_case_state(layer: type[GLVQLayer]) -> tuple[PrototypeModel, Tensor, Tensor]:
    """Prototypes of classes 0 and 1 at ``(-0.5, 0)`` and ``(0.5, 0)`` in ``[-1, 1]^2``
    (identity metric) and a class-0 canary at ``(0, 1)``, as far from both: the cost
    sits at ``mu = 0``, where its slope is largest, and the canary's gradient is
    above ``C = 1`` for either transfer (its gradient w.r.t. the prototypes alone has
    norm about 2.5 for the identity transfer)."""
    module = layer(2, 2, prototypes=torch.tensor([[-0.5, 0.0], [0.5, 0.0]], dtype=torch.float64), dtype=torch.float64)
    return PrototypeModel(module, [0, 1]), torch.tensor([[0.0, 1.0]], dtype=torch.float64), torch.tensor([0])


@contextlib.contextmanager
def _broken(twin: str | None) -> Iterator[None]:
    """The engines with one flaw for the duration of the block (None: unchanged)."""
    if twin is None or twin == "noise_halved":  # the noise is halved by the caller
        yield
        return
    with contextlib.ExitStack() as stack:
        if twin == "clipping_skipped":
            sums = fused._clipped_sums
            clip = opacus_adapter._clip_with_floors

            def unclipped_sums(model, x, y, max_grad_norm, **kwargs):
                return sums(model, x, y, math.inf, **kwargs)

            def unclipped(self, floors):
                bound, self.max_grad_norm = self.max_grad_norm, math.inf
                try:
                    clip(self, floors)
                finally:
                    self.max_grad_norm = bound

            stack.enter_context(mock.patch.object(fused, "_clipped_sums", unclipped_sums))
            stack.enter_context(mock.patch.object(opacus_adapter, "_clip_with_floors", unclipped))
        elif twin == "coupled_batch":

            def every_record(n, rate, generator=None, device=None):
                return torch.arange(n, device=device)

            stack.enter_context(mock.patch.object(fused, "poisson_batch_index", every_record))
            stack.enter_context(mock.patch.object(sampling, "poisson_batch_index", every_record))
        else:
            raise ValueError(f"twin must be one of {BROKEN_TWINS} or None, got {twin!r}")
        yield


def _one_run(recipe: DPSGD, sigma: float, layer: type[GLVQLayer], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One white-box run on ``D1 = {canary}``: per step, the canary's contribution norm
    over ``C`` (0 when it was not sampled), and every noise coordinate over ``C``."""
    model, x, y = _worst_case_state(layer)
    with capture_releases() as recorder, warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"opacus\.")  # Opacus' notices on its own set-up
        without_leak_warning(  # a seeded run on purpose: the audit is reproducible
            lambda: fit_dp_sgd(
                model,
                x,
                y,
                recipe,
                ledger=PrivacyLedger(),
                expected_batch_size=1.0,
                noise_multiplier=sigma,
                generator=torch.Generator().manual_seed(seed),
            )
        )
    calls = [c for c in recorder.releases if c.name == "dp_sgd"]
    per_step = max(len(calls) // recipe.steps, 1)  # Opacus releases one sum per parameter
    norms, noise = [], []
    for start in range(0, len(calls), per_step):
        step = calls[start : start + per_step]
        pre = torch.cat([c.pre_noise.reshape(-1).double() for c in step])
        out = torch.cat([torch.as_tensor(c.output).reshape(-1).double() for c in step])
        norms.append(float(torch.linalg.vector_norm(pre)))
        noise.append(out - pre)
    c = recipe.max_grad_norm
    return np.asarray(norms) / c, torch.cat(noise).numpy() / c


def _claimed_step(recipe: DPSGD) -> tuple[float, float, int, float]:
    """``(sigma, q, T, delta)`` of the recipe's DP-SGD steps as planned for 2 features."""
    event = recipe.planned_events(2)[-1]
    if not isinstance(event, SubsampledGaussianEvent):  # a noise-free run: nothing to audit
        raise ValueError(f"the recipe's DP-SGD steps add no noise ({event!r})")
    return event.noise_multiplier, recipe.sampling_rate, recipe.steps, recipe.plan.delta


def white_box_audit(
    estimator: Any,
    *,
    runs: int = 8,
    confidence: float = 0.95,
    twin: str | None = None,
    seed: int = 0,
) -> WhiteBoxAudit:
    """White-box audit of ``estimator``'s DP-SGD run (``DPGLVQ``, ``DPGMLVQ`` or
    ``DPLGMLVQ``, unfitted; see the module docstring).

    Parameters
    ----------
    estimator
        Its public settings (``dp_sgd_recipe()``: engine, ``q``, ``T``, ``C``, the
        noise multiplier calibrated for 2 features) are audited.
    runs : int
        Runs of ``T`` steps on ``D1 = {canary}`` (more: a tighter sampling bound).
    confidence : float
        The noise and sampling bounds hold together with this probability (each at
        ``sqrt(confidence)``).
    twin : str, optional
        One of ``BROKEN_TWINS``: audit that broken engine under the same claim.
    seed : int
        Seeds every run's noise and coins (a reproducible audit).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    layer = _layer_of(estimator)
    recipe = estimator.dp_sgd_recipe()
    sigma, q, steps, delta = _claimed_step(recipe)
    claimed = PrivacyLedger.epsilon_of([dp_sgd_event(sigma, q, steps)], delta)
    frozen = replace(recipe, sgd=SGDSettings(lr=1e-12))  # hold the worst-case state
    run_sigma = sigma / 2 if twin == "noise_halved" else sigma
    with _broken(twin):
        results = [_one_run(frozen, run_sigma, layer, seed + r) for r in range(runs)]
    norms = np.concatenate([r[0] for r in results])
    noise = np.concatenate([r[1] for r in results])
    level = math.sqrt(confidence)

    # the noise: sum of squares of N zero-mean coordinates ~ (sigma C)^2 chi2(N)
    n_noise = noise.size
    sigma_hat = math.sqrt(float(np.mean(noise**2)))
    sigma_upper = sigma_hat * math.sqrt(n_noise / stats.chi2.ppf(1 - level, n_noise))
    # the sampling: inclusions of the canary in steps * runs independent steps
    joined = norms > 0
    k, total = int(joined.sum()), joined.size
    q_hat = k / total
    q_lower = float(stats.beta.ppf(1 - level, k, total - k + 1)) if k else 0.0
    contribution = float(norms[joined].min()) if k else 0.0

    def epsilon_at(rate: float, multiplier: float) -> float:
        if rate <= 0 or contribution <= 0:
            return 0.0
        return PrivacyLedger.epsilon_of([dp_sgd_event(multiplier / contribution, min(rate, 1.0), steps)], delta)

    standardised = noise[: min(n_noise, 200_000)] / sigma_hat
    membership = joined.reshape(runs, -1).astype(np.float64)
    lag = membership[:, 1:] * membership[:, :-1]
    autocorrelation = float((lag.mean() - q_hat**2) / (q_hat * (1 - q_hat))) if 0 < q_hat < 1 else float("nan")
    return WhiteBoxAudit(
        claimed_epsilon=claimed,
        epsilon_lower_bound=epsilon_at(q_lower, sigma_upper),
        epsilon_estimate=epsilon_at(q_hat, sigma_hat),
        noise_multiplier=sigma,
        noise_multiplier_measured=sigma_hat,
        noise_multiplier_upper=sigma_upper,
        sampling_rate=q,
        sampling_rate_measured=q_hat,
        sampling_rate_lower=q_lower,
        contribution=contribution,
        inclusions=k,
        steps=steps,
        runs=runs,
        noise_samples=n_noise,
        normality_pvalue=float(stats.kstest(standardised, "norm").pvalue),
        membership_autocorrelation=autocorrelation,
        delta=delta,
        confidence=confidence,
    )


@dataclass(frozen=True)
class BlackBoxAudit:
    """The outcome of ``black_box_audit``.

    Attributes
    ----------
    claimed_epsilon : float
        What the ledger certifies for the run's DP-SGD steps, at ``audit.delta``.
    audit : AuditResult
        The distinguishing game on the final models (``epsilon_lower_bound``, the test,
        its error rates and their confidence bounds, the raw statistics).
    epsilon_lower_bound_gdp, mu_lower_bound : float
        The bounds of ``dp_proto.privacy.audit.gaussian_dp_lower_bound`` on the same
        fits: tighter, under the assumption of a Gaussian trade-off curve (Nasr et al.
        2023).
    noise_multiplier, sampling_rate : float; steps, fits : int
        The audited recipe's ``sigma``, ``q`` and ``T``, and the runs per data set.
    """

    claimed_epsilon: float
    audit: AuditResult
    epsilon_lower_bound_gdp: float
    mu_lower_bound: float
    noise_multiplier: float
    sampling_rate: float
    steps: int
    fits: int

    @property
    def epsilon_lower_bound(self) -> float:
        return self.audit.epsilon_lower_bound

    @property
    def violation(self) -> bool:
        """Whether the assumption-free lower bound exceeds the claim: evidence that the
        claim is false."""
        return self.epsilon_lower_bound > self.claimed_epsilon

    @property
    def violation_gdp(self) -> bool:
        """Whether the Gaussian-trade-off bound exceeds the claim."""
        return self.epsilon_lower_bound_gdp > self.claimed_epsilon

    def summary(self) -> dict[str, Any]:
        """The claim, both bounds, the recipe, the audit's scalar fields and the verdicts
        as a JSON-serialisable dict."""
        keys = (
            "claimed_epsilon",
            "epsilon_lower_bound_gdp",
            "mu_lower_bound",
            "noise_multiplier",
            "sampling_rate",
            "steps",
            "fits",
        )
        fields = {k: getattr(self, k) for k in keys}
        return {**fields, **self.audit.summary(), "violation": self.violation, "violation_gdp": self.violation_gdp}


#: Step size of the black-box runs: the state moves by about ``1e-6``, so the canary's
#: gradient stays far above ``C`` at every step, while the final prototypes still resolve
#: the noise to float64 precision.
_BLACK_BOX_LR = 1e-6


def black_box_audit(
    estimator: Any,
    *,
    fits: int = 20_000,
    confidence: float = 0.95,
    twin: str | None = None,
    seed: int = 0,
) -> BlackBoxAudit:
    """Black-box audit of ``estimator``'s DP-SGD run (``DPGLVQ``, ``DPGMLVQ`` or
    ``DPLGMLVQ``, unfitted; see the module docstring): a lower bound on epsilon from the
    final models of ``fits`` runs per data set.

    Parameters
    ----------
    estimator
        Its public settings (``dp_sgd_recipe()``: engine, ``q``, ``T``, ``C``, the noise
        multiplier calibrated for 2 features) are audited, from the worst-case state of
        ``white_box_audit`` at a step size of ``1e-6``.
    fits : int
        Whole runs per data set (>= 20; half choose the test, half certify it).
    confidence : float
        Probability that the bound is valid.
    twin : str, optional
        One of ``BROKEN_TWINS``: audit that broken engine under the same claim.
    seed : int
        Seeds every run's noise and coins (a reproducible audit).
    """
    layer = _layer_of(estimator)
    recipe = estimator.dp_sgd_recipe()
    sigma, q, steps, delta = _claimed_step(recipe)
    claimed = PrivacyLedger.epsilon_of([dp_sgd_event(sigma, q, steps)], delta)
    frozen = replace(recipe, sgd=SGDSettings(lr=_BLACK_BOX_LR))
    run_sigma = sigma / 2 if twin == "noise_halved" else sigma
    model, x, y = _worst_case_state(layer)
    start = torch.cat([p.detach().reshape(-1) for p in model.layer.parameters()])
    d0, d1 = (x[:0], y[:0]), (x, y)

    def final_shift(dataset: tuple[Tensor, Tensor], generator: torch.Generator | None, multiplier: float) -> Tensor:
        fitted = copy.deepcopy(model)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"opacus\.")  # Opacus' notices on its own set-up
            without_leak_warning(  # seeded runs on purpose: the audit is reproducible
                lambda: fit_dp_sgd(
                    fitted,
                    *dataset,
                    frozen,
                    ledger=PrivacyLedger(),
                    expected_batch_size=1.0,
                    noise_multiplier=multiplier,
                    generator=generator,
                )
            )
        return torch.cat([p.detach().reshape(-1) for p in fitted.layer.parameters()]) - start

    with _broken(twin):
        push = final_shift(d1, torch.Generator().manual_seed(seed), 0.0) - final_shift(d0, None, 0.0)
        direction = push / torch.linalg.vector_norm(push).clamp_min(1e-300)
        result = audit_epsilon(
            lambda dataset, generator: final_shift(dataset, generator, run_sigma),
            d0,
            d1,
            statistic=lambda shift: float(shift @ direction),
            n_trials=fits,
            delta=delta,
            confidence=confidence,
            generator_seed=seed,
        )
    epsilon_gdp, mu = gaussian_dp_lower_bound(result)
    return BlackBoxAudit(claimed, result, epsilon_gdp, mu, sigma, q, steps, fits)
