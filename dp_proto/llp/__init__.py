"""Learning from (differentially private) label proportions in a network of sensor nodes.

The algorithm of Sachweh, Boiar & Liebig (2021), "Differentially private learning from
label proportions" (after Stolpe, Liebig & Morik 2015): every node releases the
label proportions of public time batches of its data -- exactly or with Laplace
noise on the counts (epsilon-DP per node) -- to its ``c`` nearest neighbours, and
labels a k-means clustering of its own windows once per source of proportions by
a multi-start local search; its prediction is the majority vote of the ``c + 1``
models.

* ``.grid`` -- ``BatchGrid``, ``time_batches``: the public time grid of the batches.
* ``.proportions`` -- ``batch_label_counts``, ``private_label_proportions``
  (``estimator="clipped"`` or ``"unbiased"``).
* ``.kmeans`` -- ``kmeans`` (greedy k-means++, Lloyd, restarts batched), ``predict``.
* ``.assignment`` -- ``local_search`` (all relabel and swap moves of all
  starts evaluated as one tensor computation per step), ``proportion_loss``.
* ``.model`` -- ``LLPNodeModel``, ``train_node_models``, ``majority_vote``.
* ``.bags`` -- ``LLPBagModel``, ``fit_bag_model``, ``bag_proportion_loss``: a small
  network trained on the bags' proportions (``LLPConfig(learner="bag")``, the DLLP loss
  of Ardehaly & Culotta 2017) instead of labelled clusters.
* ``.knn`` -- ``knn_predict`` (brute-force kNN, the centralised baseline).
* ``.node`` -- ``LLPConfig`` (the settings every node shares) and ``LLPNode``
  (one node: data on the grid, ``release``, ``train``), used by
  both the simulation and the distributed run.
* ``.network`` -- ``simulate_network`` (single process; every node's
  Laplace noise from fresh operating-system entropy, or from
  ``node_noise_generator`` with the explicit opt-in ``noise_seed``; its
  non-private randomness from ``node_generator`` ``(seed, i)``), ``evaluate``.
* ``.release`` -- ``LLPNodeRelease``: what a node publishes (its label proportions with
  its ledger, ``NetworkResult.node_release(i)``) in the release format of
  ``dp_proto.release``; ``LLPNodeModel.save`` writes a (node-local, non-private) model.

A private run takes the batch grid from the public ``time_range`` (required): the
shape of a release never depends on the data.

All tensor code runs on the device of its inputs (CPU or CUDA).
"""

from dp_proto._neighbours import knn_neighbours, knn_predict
from dp_proto.llp.assignment import (
    AssignmentResult,
    candidate_deltas,
    local_search,
    predicted_proportions,
    proportion_loss,
)
from dp_proto.llp.bags import (
    BagNetwork,
    LLPBagModel,
    bag_cross_entropy,
    bag_proportion_loss,
    bag_proportions,
    fit_bag_model,
)
from dp_proto.llp.grid import BatchGrid, time_batches
from dp_proto.llp.kmeans import KMeansResult, kmeans, predict, squared_distances
from dp_proto.llp.model import (
    LLPNodeModel,
    NodeFit,
    fit_node_models,
    majority_vote,
    train_node_models,
)
from dp_proto.llp.network import (
    NetworkEvaluation,
    NetworkResult,
    check_neighbours,
    evaluate,
    simulate_network,
)
from dp_proto.llp.node import LLPConfig, LLPNode, node_generator, node_noise_generator
from dp_proto.llp.proportions import (
    DEFAULT_FLOOR,
    ESTIMATORS,
    LabelProportions,
    batch_label_counts,
    private_label_proportions,
    proportion_bounds,
)
from dp_proto.llp.release import LLPNodeRelease

__all__ = [
    "BagNetwork",
    "LLPBagModel",
    "bag_cross_entropy",
    "bag_proportion_loss",
    "bag_proportions",
    "fit_bag_model",
    "DEFAULT_FLOOR",
    "ESTIMATORS",
    "AssignmentResult",
    "BatchGrid",
    "KMeansResult",
    "LLPConfig",
    "LLPNode",
    "LLPNodeModel",
    "LLPNodeRelease",
    "LabelProportions",
    "NetworkEvaluation",
    "NetworkResult",
    "NodeFit",
    "batch_label_counts",
    "candidate_deltas",
    "check_neighbours",
    "evaluate",
    "fit_node_models",
    "kmeans",
    "knn_neighbours",
    "knn_predict",
    "local_search",
    "majority_vote",
    "node_generator",
    "node_noise_generator",
    "predict",
    "predicted_proportions",
    "private_label_proportions",
    "proportion_bounds",
    "proportion_loss",
    "simulate_network",
    "squared_distances",
    "time_batches",
    "train_node_models",
]

# Nodes as separate processes exchanging proportions through torch.distributed
# (dp_proto.llp.distributed, imported on first use).
_DISTRIBUTED_NAMES = (
    "NodeProcessError",
    "NodeResult",
    "PeerFailedError",
    "as_network_result",
    "launch_network",
    "run_node",
)
__all__ += list(_DISTRIBUTED_NAMES)


def __getattr__(name: str):
    if name in _DISTRIBUTED_NAMES:
        from dp_proto.llp import distributed

        return getattr(distributed, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
