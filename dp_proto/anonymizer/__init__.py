"""The three-branch adversarial anonymizer (Feutry, Piantanida, Bengio, Duhamel 2018).

``Anonymizer``            encoder + regular-label branch + private-label branch
``.losses``                 cross-entropies, the random-guessing term, the encoder objective,
                               the misclassification lower bound
``.training``               the procedure: phases, toggle or simultaneous schedule, the task of
                               each step and its loss (batch, or per record for DP-SGD)
``.evaluation``             fresh attackers on frozen representations, restart scores,
                               the held-out evaluation
Run by ``dp_proto.lightning.anonymizer`` (``fit_anonymizer``) and
``dp_proto.lightning.dp_anonymizer`` (``fit_dp_anonymizer``, DP-SGD through Opacus).
"""

from dp_proto.anonymizer.losses import (
    anonymizer_objective,
    empirical_prior,
    misclassification_lower_bound,
    private_cross_entropy,
    random_guess_cross_entropy,
    regular_cross_entropy,
)
from dp_proto.anonymizer.modules import Anonymizer, ConvEncoder, MLPEncoder, MLPHead, mlp
from dp_proto.anonymizer.training import AnonymizerSchedule

__all__ = [
    "Anonymizer",
    "AnonymizerSchedule",
    "ConvEncoder",
    "MLPEncoder",
    "MLPHead",
    "mlp",
    "anonymizer_objective",
    "empirical_prior",
    "misclassification_lower_bound",
    "private_cross_entropy",
    "random_guess_cross_entropy",
    "regular_cross_entropy",
]
