"""Learning vector quantization: distances, the GLVQ cost, prototype layers, estimators.

Functional core: ``squared_euclidean_distance``, ``omega_distance``,
``lomega_distance``, ``glvq_margins``, ``glvq_loss``, ``wtac``.
Layers (``nn.Module``, parameters only): ``GLVQLayer``, ``GMLVQLayer``,
``LGMLVQLayer``; ``PrototypeModel`` adds a backbone and the labels.
Estimators (scikit-learn API): ``GLVQ``, ``GMLVQ``, ``LGMLVQ``.
"""

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

__all__ = [
    "GLVQ",
    "GMLVQ",
    "LGMLVQ",
    "GLVQLayer",
    "GMLVQLayer",
    "LGMLVQLayer",
    "PrototypeModel",
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
]
