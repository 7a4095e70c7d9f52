"""What a DP-SGD engine receives and returns.

``fit_dp_sgd`` resolves a ``DPSGD`` recipe (noise multiplier, step count, public batch
normaliser, noise source) into one ``EngineRun`` and hands it to the engine it picked
(``dp_proto.lvq.private.fused`` or ``dp_proto.lvq.private.opacus_engine``); both fill
in a ``DPSGDResult``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from dp_proto.privacy.ledger import PrivacyLedger

__all__ = ["EngineRun", "DPSGDResult"]


@dataclass(frozen=True)
class EngineRun:
    """The validated, resolved settings of one DP-SGD run.

    ``noise_multiplier`` is ``sigma / C``; ``expected_batch_size`` the public normaliser
    of the noisy gradient sum (never ``q n`` with the private ``n``); ``generator`` the
    source of noise and sampling coins (already resolved: a caller's, or one seeded from
    fresh entropy); ``secure_mode`` draws both from ``os.urandom`` instead. The other
    fields are those of the ``DPSGD`` recipe.
    """

    noise_multiplier: float
    sampling_rate: float
    max_grad_norm: float
    steps: int
    expected_batch_size: float
    ledger: PrivacyLedger
    generator: torch.Generator | None
    secure_mode: bool = False
    clipping: str = "joint"
    grad_sample_mode: str = "hooks"
    transfer_fn: str = "identity"
    beta: float = 1.0
    progress: bool = False

    @property
    def noise_std(self) -> float:
        """``sigma C``, the standard deviation of every noise coordinate."""
        return self.noise_multiplier * self.max_grad_norm


@dataclass
class DPSGDResult:
    """What a DP-SGD run did: steps run, the noise multiplier, the sampling rate and the
    public normaliser of the noisy gradient sums.

    ``epoch_losses`` (mean GLVQ cost of the private batches per epoch) is for the data
    curator's diagnostics only: it is computed on the private data without noise, so it
    must not be released with the model (the DP estimators do not keep it).
    """

    steps: int
    noise_multiplier: float
    sampling_rate: float = 1.0
    expected_batch_size: float = 1.0
    epoch_losses: list[float] = field(default_factory=list)
    stopped_by_budget: bool = False

    def opacus_epsilon(self, delta: float) -> float:
        """The epsilon of Opacus' RDP accountant for the steps run, at ``delta`` (to
        cross-check the ledger, which composes privacy loss distributions)."""
        from opacus.accountants import RDPAccountant

        if self.steps == 0:
            return 0.0
        accountant = RDPAccountant()
        accountant.history.append((self.noise_multiplier, self.sampling_rate, self.steps))
        return float(accountant.get_epsilon(delta))
