"""The three-branch adversarial anonymizer (Feutry, Piantanida, Bengio, Duhamel 2018).

``Anonymizer``            encoder + regular-label branch + private-label branch
``.losses``                 cross-entropies, the random-guessing term, the encoder objective,
                               the misclassification lower bound
``.training``               the procedure: phases, toggle or simultaneous schedule, the task of
                               each step and its loss (batch, or per record for DP-SGD)
``.evaluation``             fresh attackers on frozen representations, restart scores,
                               the held-out evaluation
``.release``                the trained encoder in the release format: ``AnonymizerEncoder``,
                               ``DPAnonymizerEncoder`` (with the ledger), loaded by
                               ``dp_proto.load_release``
``.validation``             argument checks that name the parameter; records as float32
Run by ``dp_proto.lightning.anonymizer`` (``fit_anonymizer``) and
``dp_proto.lightning.dp_anonymizer`` (``fit_dp_anonymizer``, DP-SGD through Opacus).
"""

from typing import TYPE_CHECKING

from dp_proto.anonymizer.losses import (
    anonymizer_objective,
    empirical_prior,
    misclassification_lower_bound,
    private_cross_entropy,
    random_guess_cross_entropy,
    regular_cross_entropy,
)
from dp_proto.anonymizer.modules import Anonymizer, ConvEncoder, MLPEncoder, MLPHead, SignalEncoder, mlp
from dp_proto.anonymizer.training import AnonymizerSchedule

if TYPE_CHECKING:
    from dp_proto.anonymizer.release import AnonymizerEncoder, DPAnonymizerEncoder

__all__ = [
    "Anonymizer",
    "AnonymizerEncoder",
    "AnonymizerSchedule",
    "DPAnonymizerEncoder",
    "ConvEncoder",
    "MLPEncoder",
    "MLPHead",
    "SignalEncoder",
    "mlp",
    "anonymizer_objective",
    "empirical_prior",
    "misclassification_lower_bound",
    "private_cross_entropy",
    "random_guess_cross_entropy",
    "regular_cross_entropy",
]


def __getattr__(name: str):
    # the release classes on first use: `import dp_proto.anonymizer` stays free of the ledger's accountants
    if name in ("AnonymizerEncoder", "DPAnonymizerEncoder"):
        from dp_proto.anonymizer import release

        return getattr(release, name)
    raise AttributeError(f"module 'dp_proto.anonymizer' has no attribute {name!r}")
