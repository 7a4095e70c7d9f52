"""Audit setups of the private LVQ trainers (``dp_proto.privacy.audit.audit_epsilon``):
the DP initialisation, subsample-and-aggregate end to end and DP-SGD, each with a canary
record at the corner of the public domain."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from dp_proto.lvq.layers import GLVQLayer
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private.dp_init import dp_class_mean_prototypes
from dp_proto.lvq.private.dpsgd import fit_dp_sgd
from dp_proto.lvq.private.saa_estimator import SubsampleAggregateGLVQ
from dp_proto.privacy.audit import AuditSetup, trial_noise_seed, without_leak_warning
from dp_proto.privacy.ledger import PrivacyLedger, dp_sgd_event

__all__ = ["dp_init_audit_setup", "saa_audit_setup", "dp_sgd_audit_setup"]


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

    ``fixed_noise_seed`` is the broken variant: every run uses the same seed, as the
    library's old public default did (finding 3 of issue 20); an attacker who knows it
    tells the two data sets apart with certainty."""
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
                epochs=epochs,
                batch_size=4,
                noise_seed=seed,
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

    def mechanism(dataset, generator: torch.Generator) -> float:
        x, y = dataset
        model = PrototypeModel(GLVQLayer(1, 2, prototypes=torch.tensor([[-0.5], [0.5]])), [0, 1])
        without_leak_warning(
            lambda: fit_dp_sgd(
                model,
                x,
                y,
                ledger=PrivacyLedger(),
                noise_multiplier=noise_multiplier * noise_factor,
                sampling_rate=sampling_rate,
                max_grad_norm=1.0,
                steps=steps,
                expected_batch_size=8.0,
                lr=1.0,
                generator=generator,
            )
        )
        return float(model.layer.prototypes.detach()[0, 0])

    name = f"dp_sgd_sigma{noise_multiplier:g}" if noise_factor == 1.0 else f"broken_dp_sgd_noise_x{noise_factor:g}"
    return AuditSetup(name, claimed, delta, mechanism, d0, d1, statistic=float)
