"""The three-branch adversarial anonymizer (Feutry, Piantanida, Bengio, Duhamel 2018).

:class:`Anonymizer`            encoder + regular-label branch + private-label branch
:mod:`.losses`                 cross-entropies, the random-guessing term, the encoder objective,
                               the misclassification lower bound
:mod:`.evaluation`             fresh attackers on frozen representations
Training: :class:`dp_proto.lightning.AnonymizerModule` (toggle or simultaneous updates).
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

__all__ = ["Anonymizer", "ConvEncoder", "MLPEncoder", "MLPHead", "mlp", "anonymizer_objective",
           "empirical_prior", "misclassification_lower_bound", "private_cross_entropy",
           "random_guess_cross_entropy", "regular_cross_entropy"]
