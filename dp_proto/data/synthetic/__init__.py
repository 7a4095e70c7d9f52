"""Synthetic data: the toy sets of the implemented papers (``.toy``), the two-label
task with a known label dependence (``.entangled``) and a set with planted feature
relevance (``.relevance``)."""

from dp_proto.data.synthetic.entangled import (
    EntangledTask,
    entangled_label_joint,
    make_entangled_task,
)
from dp_proto.data.synthetic.relevance import FEATURE_KINDS, feature_relevance_set
from dp_proto.data.synthetic.toy import (
    FIVE_GAUSSIANS_MEANS,
    OUTLIER_MEANS,
    XOR_CENTERS,
    five_gaussians,
    five_gaussians_covariances,
    noisy_xor,
    noisy_xor_unbalanced,
    three_gaussians,
    three_gaussians_means,
    three_moons,
    two_gaussians_with_outlier,
)

__all__ = [
    "OUTLIER_MEANS",
    "XOR_CENTERS",
    "FIVE_GAUSSIANS_MEANS",
    "two_gaussians_with_outlier",
    "noisy_xor",
    "noisy_xor_unbalanced",
    "three_gaussians_means",
    "three_gaussians",
    "three_moons",
    "five_gaussians_covariances",
    "five_gaussians",
    "EntangledTask",
    "entangled_label_joint",
    "make_entangled_task",
    "FEATURE_KINDS",
    "feature_relevance_set",
]
