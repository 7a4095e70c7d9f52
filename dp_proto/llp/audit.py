"""Audit setup of the LLP release (``dp_proto.privacy.audit.audit_epsilon``)."""

from __future__ import annotations

import torch

from dp_proto.llp.proportions import batch_label_counts, private_label_proportions
from dp_proto.privacy.audit import AuditSetup, trial_noise_seed, without_leak_warning

__all__ = ["llp_release_audit_setup"]


def llp_release_audit_setup(epsilon: float, *, batch_size: int = 8, fixed_noise_seed: int | None = None) -> AuditSetup:
    """The LLP release of one node (``dp_proto.llp.private_label_proportions`` on the
    label counts of a public batch grid of 2 batches), ``D1`` = ``D0`` plus one window
    of class 0 in batch 0; statistic: the released class-0 proportion of batch 0.
    ``fixed_noise_seed``: the broken variant, one public seed for every run."""
    labels0 = torch.tensor([0, 1, 1, 1, 0, 0, 1, 1])
    batches0 = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    d0 = (labels0, batches0)
    d1 = (torch.cat([labels0, torch.tensor([0])]), torch.cat([batches0, torch.tensor([0])]))

    def mechanism(dataset, generator: torch.Generator) -> float:
        labels, batches = dataset
        counts = batch_label_counts(labels, batches, 2, 2)
        seed = fixed_noise_seed if fixed_noise_seed is not None else trial_noise_seed(generator)
        released = without_leak_warning(
            lambda: private_label_proportions(counts, epsilon, batch_sizes=float(batch_size), noise_seed=seed)
        )
        return float(released.proportions[0, 0])

    name = f"llp_release_eps{epsilon:g}" if fixed_noise_seed is None else f"broken_llp_fixed_seed_claims{epsilon:g}"
    return AuditSetup(name, epsilon, 0.0, mechanism, d0, d1, statistic=float)
