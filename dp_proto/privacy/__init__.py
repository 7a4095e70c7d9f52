"""The model-free privacy core: mechanisms, noise, calibration, the privacy ledger, the
public data domain, private preprocessing (``DPStandardScaler``, ``DPPCA`` and
``DPPipeline``, one budget for a whole scikit-learn pipeline), and the tools that check
releases (audit, neighbour check) or attack trained models (membership inference).

Mechanisms (``.mechanisms``) add calibrated noise and record every release, as one
typed event per mechanism (``.events``), in a ``PrivacyLedger``, which composes all releases of a run with a real accountant
(privacy loss distributions by default, Renyi DP optionally). Neighbouring relation
everywhere: add/remove one record.

This package imports nothing from the models, nor Opacus or Lightning (the Opacus
adapter is ``dp_proto.lvq.private.opacus_adapter``).
The DP-SGD recipe every trainer shares -- ``DPSGDPlan`` (ledger, steps, noise
multiplier) and ``BudgetedEpochs`` (each epoch spent before it runs) -- is in
``.dpsgd_plan``. Private LVQ training (DP initialisation, DP-SGD, subsample-and-aggregate,
the centre of attention and the ``DPGLVQ``-family estimators) lives in
``dp_proto.lvq.private``.
"""

from dp_proto.privacy.audit import AuditResult, audit_epsilon
from dp_proto.privacy.calibration import (
    analytic_gaussian_delta,
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    laplace_scale,
)
from dp_proto.privacy.clipping import ClipResult, clip_box, clip_l2
from dp_proto.privacy.domain import PublicBoundsScaler
from dp_proto.privacy.dpsgd_plan import (
    BudgetedEpochs,
    DPSGDPlan,
    calibrate_noise_multiplier,
    paper_noise_multiplier,
    sgd_steps,
)
from dp_proto.privacy.events import (
    ApproxEvent,
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    GaussianEvent,
    LaplaceEvent,
    NonPrivateEvent,
    PrivacyEvent,
    PureEvent,
    RepeatAndSelectEvent,
    SubsampledGaussianEvent,
    dp_sgd_event,
)
from dp_proto.privacy.ledger import PrivacyLedger, SharedLedger
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
from dp_proto.privacy.membership import (
    MembershipInferenceResult,
    OneRunAudit,
    dp_tpr_bound,
    lira_attack,
    membership_inference,
    one_run_audit,
    one_run_epsilon,
    true_class_score,
)
from dp_proto.privacy.noise import (
    discrete_gaussian_noise,
    discrete_laplace_noise,
    gaussian_noise,
    laplace_noise,
)
from dp_proto.privacy.preprocessing import DPPCA, DPPipeline, DPStandardScaler
from dp_proto.privacy.sampling import PoissonDataLoader
from dp_proto.privacy.selection import PrivateSearchCV
from dp_proto.privacy.session import reset_session, session_ledger

__all__ = [
    "PrivacyLedger",
    "SharedLedger",
    "session_ledger",
    "reset_session",
    "PrivacyEvent",
    "dp_sgd_event",
    "LaplaceEvent",
    "DiscreteLaplaceEvent",
    "GaussianEvent",
    "DiscreteGaussianEvent",
    "PureEvent",
    "ApproxEvent",
    "SubsampledGaussianEvent",
    "NonPrivateEvent",
    "RepeatAndSelectEvent",
    "laplace_mechanism",
    "gaussian_mechanism",
    "gaussian_sigma",
    "GaussianPlan",
    "plan_gaussian",
    "renyi_noise_multiplier",
    "noisy_count",
    "noisy_histogram",
    "report_noisy_max",
    "noisy_majority_vote",
    "analytic_gaussian_sigma",
    "analytic_gaussian_delta",
    "classic_gaussian_sigma",
    "laplace_scale",
    "ClipResult",
    "clip_l2",
    "clip_box",
    "PublicBoundsScaler",
    "DPPCA",
    "DPPipeline",
    "PrivateSearchCV",
    "DPStandardScaler",
    "laplace_noise",
    "gaussian_noise",
    "discrete_laplace_noise",
    "discrete_gaussian_noise",
    "AuditResult",
    "audit_epsilon",
    "MembershipInferenceResult",
    "membership_inference",
    "lira_attack",
    "true_class_score",
    "dp_tpr_bound",
    "OneRunAudit",
    "one_run_audit",
    "one_run_epsilon",
    "DPSGDPlan",
    "BudgetedEpochs",
    "calibrate_noise_multiplier",
    "paper_noise_multiplier",
    "sgd_steps",
    "PoissonDataLoader",
]
