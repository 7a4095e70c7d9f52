"""Audit setups of the private LVQ trainers (``dp_proto.privacy.audit.audit_epsilon``):
the DP initialisation, subsample-and-aggregate end to end and DP-SGD, each with a canary
record at the corner of the public domain; and a white-box audit of one DP-SGD step of
each engine from a worst-case model state (``dp_sgd_step_audit_setup``)."""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from dp_proto.lvq.layers import GLVQLayer, GMLVQLayer, LGMLVQLayer
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private import dpsgd, grad_samplers
from dp_proto.lvq.private.aggregate import BinTraining
from dp_proto.lvq.private.dp_init import dp_class_mean_prototypes
from dp_proto.lvq.private.dpsgd import SGDSettings, fit_dp_sgd, fixed_noise_recipe
from dp_proto.lvq.private.saa_estimator import SubsampleAggregateGLVQ
from dp_proto.privacy.audit import AuditSetup, trial_noise_seed, without_leak_warning
from dp_proto.privacy.dpsgd_plan import calibrate_noise_multiplier
from dp_proto.privacy.ledger import PrivacyLedger, dp_sgd_event
from dp_proto.privacy.noise import gaussian_noise
from dp_proto.privacy.testing import capture_releases

__all__ = [
    "dp_init_audit_setup",
    "saa_audit_setup",
    "dp_sgd_audit_setup",
    "dp_sgd_step_audit_setup",
    "StepAuditSetup",
    "step_pre_noise_sum",
    "STEP_ENGINES",
    "STEP_LAYERS",
    "STEP_CANARIES",
]


def dp_init_audit_setup(epsilon: float, *, dim: int = 1, n_records: int = 50, coordinate: int = 0) -> AuditSetup:
    """``dp_class_mean_prototypes`` (2 classes, ``dim`` features) with a canary.

    ``dataset_0`` holds ``n_records`` records of class 0 at the corner ``-1`` of the
    domain ``[-1, 1]^dim`` and ``n_records`` records of class 1 at the origin;
    ``dataset_1`` adds one class-0 canary at the opposite corner ``+1``, which moves
    both the class-0 sum (by ``dim`` in l1) and its count as far as one record can.
    Statistic: coordinate ``coordinate`` of the class-0 prototype. One run per call
    (the real function, not a re-implementation), so it is slower than the others.
    """
    x0 = torch.cat([-torch.ones(n_records, dim), torch.zeros(n_records, dim)]).double()
    y0 = torch.cat([torch.zeros(n_records), torch.ones(n_records)]).long()
    x1 = torch.cat([x0, torch.ones(1, dim, dtype=torch.float64)])
    y1 = torch.cat([y0, torch.zeros(1, dtype=torch.long)])

    def mechanism(dataset: tuple[Tensor, Tensor], generator: torch.Generator) -> Tensor:
        x, y = dataset
        return dp_class_mean_prototypes(x, y, 2, epsilon, generator=generator, ledger=None).prototypes

    def statistic(prototypes: Tensor) -> float:
        return float(prototypes[0, coordinate])

    return AuditSetup(f"dp_init_eps{epsilon:g}", epsilon, 0.0, mechanism, (x0, y0), (x1, y1), statistic)


def _canary_pair(n_per_class: int, dim: int) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """``D0``: class 0 at ``-0.5``, class 1 at ``+0.5`` (``n_per_class`` each, ``dim``
    features in ``[-1, 1]``); ``D1`` adds a class-0 canary at the far corner ``+1``."""
    x0 = np.concatenate([np.full((n_per_class, dim), -0.5), np.full((n_per_class, dim), 0.5)])
    y0 = np.repeat([0, 1], n_per_class)
    return (x0, y0), (np.concatenate([x0, np.ones((1, dim))]), np.append(y0, 0))


def saa_audit_setup(
    epsilon: float,
    delta: float = 1e-5,
    *,
    num_bins: int = 16,
    n_per_class: int = 8,
    epochs: int = 1,
    fixed_noise_seed: int | None = None,
) -> AuditSetup:
    """``SubsampleAggregateGLVQ`` end to end (bins, training,
    projection, noise) with a class-0 canary at the domain's corner; statistic: the
    released class-0 prototype. Each trial draws its own noise seed from the audit's
    generator (independent trials, a reproducible audit).

    ``fixed_noise_seed`` is the broken variant: every run uses the same, public seed; an
    attacker who knows it tells the two data sets apart with certainty."""
    d0, d1 = _canary_pair(n_per_class, 1)

    def mechanism(dataset, generator: torch.Generator) -> float:
        X, y = dataset
        seed = fixed_noise_seed if fixed_noise_seed is not None else trial_noise_seed(generator)
        est = without_leak_warning(
            lambda: SubsampleAggregateGLVQ(
                num_bins=num_bins,
                epsilon=epsilon,
                delta=delta,
                classes=[0, 1],
                noise_seed=seed,
                training=BinTraining(epochs=epochs, batch_size=4),
            ).fit(X, y)
        )
        return float(est.prototypes_[0, 0])

    name = f"saa_eps{epsilon:g}" if fixed_noise_seed is None else f"broken_saa_fixed_seed_claims{epsilon:g}"
    return AuditSetup(name, epsilon, delta, mechanism, d0, d1, statistic=float)


def dp_sgd_audit_setup(
    noise_multiplier: float = 2.0,
    *,
    delta: float = 1e-5,
    steps: int = 2,
    sampling_rate: float = 1.0,
    noise_factor: float = 1.0,
) -> AuditSetup:
    """A small DP-GLVQ training through ``fit_dp_sgd`` (fused
    engine, Poisson sampling, clipping to 1, the public normaliser 8) on 16 one-dimensional
    records with a class-0 canary at the far end; statistic: prototype 0. ``D0``'s records
    sit on their prototypes (zero gradient), so only the canary moves the model. The
    claim is what the ledger certifies for ``steps`` subsampled Gaussian steps at
    ``noise_multiplier`` (by default every record in every step, ``q = 1``, so that a
    broken variant is visible in few trials). ``noise_factor < 1`` is the broken
    variant: the noise is scaled down while the claim stays."""
    x0 = torch.tensor([[-0.5]] * 8 + [[0.5]] * 8)
    y0 = torch.tensor([0] * 8 + [1] * 8)
    d0 = (x0, y0)
    d1 = (torch.cat([x0, torch.tensor([[1.0]])]), torch.cat([y0, torch.tensor([0])]))
    claimed = PrivacyLedger.epsilon_of([dp_sgd_event(noise_multiplier, sampling_rate, steps)], delta)
    recipe = fixed_noise_recipe(sampling_rate, steps, max_grad_norm=1.0, sgd=SGDSettings(lr=1.0))

    def mechanism(dataset, generator: torch.Generator) -> float:
        x, y = dataset
        model = PrototypeModel(GLVQLayer(1, 2, prototypes=torch.tensor([[-0.5], [0.5]])), [0, 1])
        without_leak_warning(
            lambda: fit_dp_sgd(
                model,
                x,
                y,
                recipe,
                ledger=PrivacyLedger(),
                expected_batch_size=8.0,
                noise_multiplier=noise_multiplier * noise_factor,
                generator=generator,
            )
        )
        return float(model.layer.prototypes.detach()[0, 0])

    name = f"dp_sgd_sigma{noise_multiplier:g}" if noise_factor == 1.0 else f"broken_dp_sgd_noise_x{noise_factor:g}"
    return AuditSetup(name, claimed, delta, mechanism, d0, d1, statistic=float)


# -- one DP-SGD step of each engine, white box, from a worst-case state ------------------
#: Engines of ``fit_dp_sgd``: ``"fused"`` (``engine="fused"``) and Opacus'
#: ``grad_sample_mode`` under ``engine="opacus"``.
STEP_ENGINES = ("fused", "hooks", "ghost", "functorch")
STEP_LAYERS = {"glvq": GLVQLayer, "gmlvq": GMLVQLayer, "lgmlvq": LGMLVQLayer}
#: ``"pair"``: the canary on the two coincident prototypes; ``"centre"``: at the domain's
#: centre, where its clipped contribution is largest (see ``dp_sgd_step_audit_setup``).
STEP_CANARIES = ("pair", "centre")


@contextlib.contextmanager
def _cancellation_guard(value: float | None) -> Iterator[None]:
    """``grad_samplers.CANCELLATION_GUARD`` set to ``value`` inside the block (None:
    unchanged); with a value, ``fit_dp_sgd`` also runs the layer in its own dtype, as it
    did before the guard (``dpsgd.TRAINING_DTYPE``)."""
    if value is None:
        yield
        return
    old = grad_samplers.CANCELLATION_GUARD, dpsgd.TRAINING_DTYPE
    grad_samplers.CANCELLATION_GUARD, dpsgd.TRAINING_DTYPE = value, None
    try:
        yield
    finally:
        grad_samplers.CANCELLATION_GUARD, dpsgd.TRAINING_DTYPE = old


def _corner_state(layer: str, dim: int, dtype: torch.dtype) -> PrototypeModel:
    """Prototypes of classes 0 and 1 both at the corner ``(1, ..., 1)`` of ``[-1, 1]^dim``;
    the layer's default metric (identity; GMLVQ normalised to trace 1)."""
    module = STEP_LAYERS[layer](dim, 2, prototypes=torch.ones(2, dim, dtype=dtype), dtype=dtype)
    return PrototypeModel(module, [0, 1])


def step_pre_noise_sum(
    engine: str,
    model: PrototypeModel,
    x: Tensor,
    y: Tensor,
    *,
    max_grad_norm: float = 1.0,
    transfer_fn: str = "sigmoid",
    beta: float = 16.0,
    cancellation_guard: float | None = None,
) -> Tensor:
    """The clipped gradient sum ``(P,)`` that ``fit_dp_sgd`` noises in one full-batch step
    (``sampling_rate=1``) of ``engine`` on ``(x, y)``, from a copy of ``model``, in the
    dtype the engine computed it in (``fit_dp_sgd``'s float64; the layer's own before
    the fix).

    White box: it runs the real ``fit_dp_sgd`` for one step and reads the pre-noise sum
    off the engine's ``"dp_sgd"`` release (``dp_proto.privacy.testing.intercept``, which
    both engines pass it through: one concatenated sum for the fused engine, one per
    parameter for Opacus). ``cancellation_guard`` overrides
    ``grad_samplers.CANCELLATION_GUARD`` for the run (0.0: the engine before the fix).
    """
    if engine not in STEP_ENGINES:
        raise ValueError(f"engine must be one of {STEP_ENGINES}, got {engine!r}")
    model = copy.deepcopy(model)
    with _cancellation_guard(cancellation_guard), capture_releases() as recorder, warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"opacus\.")  # Opacus' notices on its own set-up
        without_leak_warning(  # a seeded run on purpose: its noise is discarded
            lambda: fit_dp_sgd(
                model,
                x,
                y,
                fixed_noise_recipe(
                    1.0,
                    1,
                    max_grad_norm=max_grad_norm,
                    engine="fused" if engine == "fused" else "opacus",
                    grad_sample_mode="hooks" if engine == "fused" else engine,
                    transfer_fn=transfer_fn,
                    beta=beta,
                ),
                ledger=PrivacyLedger(),
                expected_batch_size=float(max(x.shape[0], 1)),
                noise_multiplier=1.0,
                generator=torch.Generator().manual_seed(0),
            )
        )
    steps = [r for r in recorder.releases if r.name == "dp_sgd" and r.pre_noise is not None]
    if not steps:  # pragma: no cover - every engine releases its sum through intercept
        raise RuntimeError(f"the {engine} engine released no pre-noise sum")
    computed = steps[0].output.dtype  # the dtype the engine summed in (recorded in float64: exact)
    return torch.cat([r.pre_noise.reshape(-1) for r in steps if r.pre_noise is not None]).to(computed)


@dataclass(frozen=True)
class StepAuditSetup(AuditSetup):
    """``AuditSetup`` of one DP-SGD step, with what the report shows beside the bound."""

    engine: str = ""
    layer: str = ""
    canary: str = ""
    before_fix: bool = False
    #: the epsilon ``sigma`` is calibrated to (the claim is what the ledger certifies for it)
    target_epsilon: float = 0.0
    #: ``sigma`` calibrated to ``target_epsilon``
    noise_multiplier: float = 0.0
    #: ``||S(D1) - S(D0)|| / C`` of the pre-noise sums (the statistic's mean shift in units of C)
    movement: float = 0.0


def dp_sgd_step_audit_setup(
    epsilon: float,
    *,
    engine: str = "fused",
    layer: str = "glvq",
    canary: str = "pair",
    before_fix: bool = False,
    delta: float = 1e-5,
    max_grad_norm: float = 1.0,
    n_records: int = 40,
    dim: int = 2,
    transfer_fn: str = "sigmoid",
    beta: float = 16.0,
    dtype: torch.dtype = torch.float32,
    batch: int = 50_000,
) -> StepAuditSetup:
    """One full-batch DP-SGD step of ``engine`` on a ``layer`` model in a worst-case
    state, audited white box: a lower bound on the step's epsilon to hold against its
    claim.

    State (public, fixed): prototypes of classes 0 and 1 both at the corner ``(1, ..., 1)``
    of ``[-1, 1]^dim`` in ``dtype`` (default float32: ``fit_dp_sgd`` runs the layer in
    float64, the engines before the fix in float32, where they moved by 40 C); the
    estimators' transfer, the sigmoid with slope 16. ``D0``: ``n_records``
    class-0 records at the opposite corner. ``D1``: ``D0`` plus a class-0 canary, ``canary=``

    * ``"pair"``: on the coincident pair, where the GLVQ derivatives grow like
      ``1 / (d+ + d-)`` while the record's gradient is 0: engines whose clipped sum is
      formed from clip-weighted derivatives must not let its huge terms through (the
      counterexample of docs/privacy-model.md, "The clipped gradient sum as the machine
      computes it");
    * ``"centre"``: the origin. Its gradient (GLVQ: norm 4 C) is clipped to ``C``: on the
      segment from the pair to ``D0`` the computed contribution is largest there (nearer
      the pair the cancellation guard shrinks it, on the pair it is 0), so a correct
      engine moves by exactly ``C`` and the audit meets a Gaussian mechanism of
      sensitivity ``C``: the strongest canary a correct engine admits.

    Mechanism: the engine's pre-noise clipped sum ``S(D)`` (``step_pre_noise_sum``: the
    real ``fit_dp_sgd`` step, one run per data set, cached: at ``q = 1`` the sum is
    deterministic) plus ``N(0, (sigma C)^2)`` on every coordinate from the library's
    ``gaussian_noise`` in the sum's dtype, as both engines add it; ``batch`` trials per
    call. Statistic (white box): the noisy sum's projection on the unit direction of
    ``S(D1) - S(D0)`` (any fixed direction if they are equal).

    Claim: ``sigma = calibrate_noise_multiplier(epsilon, delta, 1.0, 1)`` and the
    epsilon the ledger certifies for that one step
    (``PrivacyLedger.epsilon_of([dp_sgd_event(sigma, 1.0, 1)], delta)``, at most
    ``epsilon``). ``before_fix=True`` audits the engine without its cancellation guard
    (``grad_samplers.CANCELLATION_GUARD`` patched to 0.0 while the step runs) under the
    same claim.
    """
    if engine not in STEP_ENGINES:
        raise ValueError(f"engine must be one of {STEP_ENGINES}, got {engine!r}")
    if canary not in STEP_CANARIES:
        raise ValueError(f"canary must be one of {STEP_CANARIES}, got {canary!r}")
    if layer not in STEP_LAYERS:
        raise ValueError(f"layer must be one of {tuple(STEP_LAYERS)}, got {layer!r}")
    sigma = calibrate_noise_multiplier(epsilon, delta, 1.0, 1)
    claimed = PrivacyLedger.epsilon_of([dp_sgd_event(sigma, 1.0, 1)], delta)
    std = sigma * max_grad_norm
    model = _corner_state(layer, dim, dtype)
    x0 = -torch.ones(n_records, dim, dtype=dtype)
    y0 = torch.zeros(n_records, dtype=torch.long)
    record = torch.ones(1, dim, dtype=dtype) if canary == "pair" else torch.zeros(1, dim, dtype=dtype)
    d0 = (x0, y0)
    d1 = (torch.cat([x0, record]), torch.cat([y0, torch.zeros(1, dtype=torch.long)]))
    guard = 0.0 if before_fix else None

    def pre_noise(dataset: tuple[Tensor, Tensor]) -> Tensor:
        return step_pre_noise_sum(
            engine,
            model,
            *dataset,
            max_grad_norm=max_grad_norm,
            transfer_fn=transfer_fn,
            beta=beta,
            cancellation_guard=guard,
        )

    sums: list[tuple[tuple[Tensor, Tensor], Tensor]] = [(d0, pre_noise(d0)), (d1, pre_noise(d1))]
    difference = sums[1][1].double() - sums[0][1].double()
    length = float(torch.linalg.vector_norm(difference))
    direction = difference / length if length > 0 else torch.eye(difference.numel(), dtype=torch.float64)[0]

    def mechanism(dataset: tuple[Tensor, Tensor], generator: torch.Generator, size: int) -> Tensor:
        summed = next((s for d, s in sums if d is dataset), None)
        if summed is None:
            summed = pre_noise(dataset)
            sums.append((dataset, summed))
        noise = gaussian_noise((size, summed.numel()), std, generator=generator, dtype=summed.dtype)
        return summed + noise  # (size, P): the noisy clipped sum of each trial

    def statistic(outputs: Tensor) -> Tensor:
        return outputs.double() @ direction

    name = f"step_{engine}_{layer}_{canary}_eps{epsilon:g}" + ("_before_fix" if before_fix else "")
    return StepAuditSetup(
        name,
        claimed,
        delta,
        mechanism,
        d0,
        d1,
        statistic,
        batch=batch,
        engine=engine,
        layer=layer,
        canary=canary,
        before_fix=before_fix,
        target_epsilon=float(epsilon),
        noise_multiplier=sigma,
        movement=length / max_grad_norm,
    )
