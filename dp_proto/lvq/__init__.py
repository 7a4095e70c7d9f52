"""Learning vector quantization: distances, the GLVQ cost, prototype layers, estimators.

Functional core: ``squared_euclidean_distance``, ``omega_distance``,
``lomega_distance``, ``glvq_margins``, ``glvq_loss``, ``wtac``.
Layers (``nn.Module``, parameters only): ``GLVQLayer``, ``GMLVQLayer``,
``LGMLVQLayer``; ``PrototypeModel`` adds a backbone and the labels; ``settle_distances``
makes a float64 row's order the same in any batch (``PrototypeModel`` calls it; call it in
your own model before a private loss).
Estimators (scikit-learn API): ``GLVQ``, ``GMLVQ``, ``LGMLVQ``.
Confidence (Brinkrolf 2023, ch. 4): certainty ``relsim``, ``max_proba``, ``relsim_score``;
reject option ``reject``, ``predict_with_reject``, ``accuracy_reject_curve``, ``arc_area``;
certified robustness ``lambda_pm``, ``certified_radius``, ``certify``, ``global_certified_radius``.
Time integration of class probabilities over a window (Brinkrolf 2023, eq. 4.26):
``integrate_probabilities``, ``integration_window``.
Feature sparsity (Brinkrolf 2023, ch. 5): ``SparseGMLVQ``, ``SparseLGMLVQ``; the group
penalty, its proximal step and OMP in ``dp_proto.lvq.sparse``.
Federated LVQ (Brinkrolf 2023, ch. 6): ``merge_models`` and ``node_splits`` in
``dp_proto.lvq.federated``.
"""

from dp_proto.lvq.confidence import (
    accuracy_reject_curve,
    arc_area,
    certified_radius,
    certify,
    global_certified_radius,
    lambda_pm,
    max_proba,
    predict_with_reject,
    reject,
    relsim,
    relsim_score,
)
from dp_proto.lvq.distances import lomega_distance, omega_distance, squared_euclidean_distance
from dp_proto.lvq.estimators import GLVQ, GMLVQ, LGMLVQ
from dp_proto.lvq.init import class_mean_prototypes, init_omega, make_prototype_labels
from dp_proto.lvq.layers import GLVQLayer, GMLVQLayer, LGMLVQLayer
from dp_proto.lvq.losses import (
    GLVQMargins,
    glvq_cost_and_gradient,
    glvq_loss,
    glvq_margins,
    glvq_mu,
    transfer,
    wtac,
)
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.pairwise import PairwiseGMLVQ
from dp_proto.lvq.settle import settle_distances
from dp_proto.lvq.sparse_estimators import SparseGMLVQ, SparseLGMLVQ
from dp_proto.lvq.time_integration import integrate_probabilities, integration_window

__all__ = [
    "GLVQ",
    "GMLVQ",
    "LGMLVQ",
    "PairwiseGMLVQ",
    "SparseGMLVQ",
    "SparseLGMLVQ",
    "GLVQLayer",
    "GMLVQLayer",
    "LGMLVQLayer",
    "PrototypeModel",
    "settle_distances",
    "GLVQMargins",
    "glvq_cost_and_gradient",
    "glvq_loss",
    "glvq_margins",
    "glvq_mu",
    "transfer",
    "wtac",
    "squared_euclidean_distance",
    "omega_distance",
    "lomega_distance",
    "class_mean_prototypes",
    "init_omega",
    "make_prototype_labels",
    "relsim",
    "max_proba",
    "relsim_score",
    "reject",
    "predict_with_reject",
    "accuracy_reject_curve",
    "arc_area",
    "lambda_pm",
    "certified_radius",
    "certify",
    "global_certified_radius",
    "integrate_probabilities",
    "integration_window",
]
