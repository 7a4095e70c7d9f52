"""Differential privacy: calibrated mechanisms, the privacy ledger, DP initialisation.

Mechanisms (:mod:`.mechanisms`) add calibrated noise and record every release in a
:class:`PrivacyLedger`, which composes all releases of a run with a real accountant
(privacy loss distributions by default, Renyi DP optionally). Neighbouring relation
everywhere: add/remove one record.
"""

from dp_proto.privacy.aggregate import saa_sensitivity, subsample_and_aggregate
from dp_proto.privacy.audit import AuditResult, audit_epsilon
from dp_proto.privacy.bin_estimators import SubsampleAggregateGLVQ
from dp_proto.privacy.calibration import (
    analytic_gaussian_delta,
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    laplace_scale,
)
from dp_proto.privacy.clipping import ClipResult, clip_box, clip_l2
from dp_proto.privacy.coa import coa_glvq
from dp_proto.privacy.domain import PublicBoundsScaler
from dp_proto.privacy.dp_init import DPInitResult, dp_class_mean_prototypes
from dp_proto.privacy.dpsgd import (
    calibrate_noise_multiplier,
    fit_dp_sgd,
    paper_noise_multiplier,
    sgd_steps,
)
from dp_proto.privacy.estimators import DPGLVQ, DPGMLVQ, DPLGMLVQ
from dp_proto.privacy.ledger import PrivacyEvent, PrivacyLedger
from dp_proto.privacy.mechanisms import (
    GaussianPlan,
    gaussian_mechanism,
    gaussian_sigma,
    laplace_mechanism,
    noisy_count,
    noisy_histogram,
    noisy_majority_vote,
    plan_gaussian,
    renyi_noise_multiplier,
    report_noisy_max,
)
from dp_proto.privacy.noise import (
    discrete_gaussian_noise,
    discrete_laplace_noise,
    gaussian_noise,
    laplace_noise,
)

__all__ = [
    "PrivacyEvent", "PrivacyLedger",
    "laplace_mechanism", "gaussian_mechanism", "gaussian_sigma", "GaussianPlan", "plan_gaussian",
    "renyi_noise_multiplier", "noisy_count", "noisy_histogram",
    "report_noisy_max", "noisy_majority_vote",
    "analytic_gaussian_sigma", "analytic_gaussian_delta", "classic_gaussian_sigma", "laplace_scale",
    "ClipResult", "clip_l2", "clip_box", "PublicBoundsScaler",
    "DPInitResult", "dp_class_mean_prototypes",
    "laplace_noise", "gaussian_noise", "discrete_laplace_noise", "discrete_gaussian_noise",
    "AuditResult", "audit_epsilon",
    "DPGLVQ", "DPGMLVQ", "DPLGMLVQ",
    "SubsampleAggregateGLVQ", "subsample_and_aggregate", "saa_sensitivity", "coa_glvq",
    "calibrate_noise_multiplier", "fit_dp_sgd", "paper_noise_multiplier", "sgd_steps",
]
