"""Differentially private training of LVQ models (add/remove one record).

* ``.dp_init`` -- DP class-mean initialisation (Laplace on the class sums and counts).
* ``.dpsgd`` -- the recipe ``DPSGD`` (DP initialisation and DP-SGD, Abadi et al. 2016,
  public settings in one frozen object) and ``fit_dp_sgd`` for any ``PrototypeModel``,
  by the fused engine of ``.fused`` (closed-form per-sample gradients,
  ``.grad_samplers``) or by Opacus (``.opacus_engine``); the noise multiplier is
  calibrated by the ledger;
  ``.launch`` -- ``launch_dp_sgd``, one process per shard of the records.
* ``.aggregate`` -- the recipe ``SubsampleAggregate`` of the bin-based schemes:
  subsample-and-aggregate over disjoint bins (``.saa``) or the centre of attention
  (``.coa``).
* ``.estimators`` -- ``DPGLVQ``, ``DPGMLVQ``, ``DPLGMLVQ`` (scikit-learn API) and
  ``.saa_estimator`` -- ``SubsampleAggregateGLVQ``; ``.pairwise`` -- ``DPPairwiseGMLVQ``
  (private one-versus-one GMLVQ with private Platt scaling).

Every release goes through the model-free core ``dp_proto.privacy`` (mechanisms,
ledger). Importing this package loads Opacus.
"""

from dp_proto.lvq.private.aggregate import BinTraining, SubsampleAggregate
from dp_proto.lvq.private.dp_init import DPInitResult, dp_class_mean_prototypes
from dp_proto.lvq.private.dpsgd import (
    DPSGD,
    SGDSettings,
    calibrate_noise_multiplier,
    fit_dp_sgd,
    paper_noise_multiplier,
    sgd_steps,
)
from dp_proto.lvq.private.estimators import DPGLVQ, DPGMLVQ, DPLGMLVQ
from dp_proto.lvq.private.launch import launch_dp_sgd
from dp_proto.lvq.private.pairwise import DPPairwiseGMLVQ
from dp_proto.lvq.private.saa import saa_sensitivity
from dp_proto.lvq.private.saa_estimator import SubsampleAggregateGLVQ
from dp_proto.privacy.data_parallel import DataParallelError

__all__ = [
    "DPGLVQ",
    "DPGMLVQ",
    "DPLGMLVQ",
    "DPPairwiseGMLVQ",
    "SubsampleAggregateGLVQ",
    "DPSGD",
    "SGDSettings",
    "DPInitResult",
    "dp_class_mean_prototypes",
    "calibrate_noise_multiplier",
    "fit_dp_sgd",
    "launch_dp_sgd",
    "DataParallelError",
    "paper_noise_multiplier",
    "sgd_steps",
    "SubsampleAggregate",
    "BinTraining",
    "saa_sensitivity",
]
