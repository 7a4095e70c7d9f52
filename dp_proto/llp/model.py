"""The models of one node: a k-means clustering labelled from each source of proportions.

Node ``j`` of the LLP algorithm (Sachweh, Boiar and Liebig, Sec. 3) trains
``c + 1`` models ``f_j(1..c+1)``: one per set of label proportions it holds
(its own and those received from its ``c`` neighbours). Every model is the
k-means clustering of the node's own windows ``D(j)`` with cluster labels
found by ``local_search`` against that source's
proportions; the final prediction is the majority vote of the ``c + 1`` models.
The clustering depends only on ``D(j)``, so it is fitted once and shared by
all ``c + 1`` models (Sachweh, Boiar & Liebig (2021) fit "a k-means clustering on own measured node
data" per model; one shared fit is the same model up to k-means' random seeding,
and ``c + 1`` times cheaper).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from dp_proto._neighbours import check_points
from dp_proto.exceptions import DataValidationError, PrivacyLeakWarning
from dp_proto.llp.assignment import AssignmentResult, local_search
from dp_proto.llp.kmeans import KMeansResult, kmeans, predict
from dp_proto.llp.proportions import LabelProportions, as_source, batch_label_counts
from dp_proto.release import Releasable, Release, register_model, registered_name

__all__ = ["LLPNodeModel", "NodeFit", "fit_node_models", "majority_vote", "train_node_models"]


#: What the privacy section of an ``LLPNodeModel`` release says besides ``"private": false``.
NODE_LOCAL_NOTE = (
    "node-local: the centres are the k-means centres of the node's own training windows and the labels "
    "were fitted to label proportions, both without noise; no guarantee of the LLP run covers this model "
    "(what a node publishes is its label-proportion table, LLPNodeRelease)"
)


@register_model("dp_proto.LLPNodeModel")
@dataclass(frozen=True)
class LLPNodeModel(Releasable):
    """A labelled clustering: ``x -> cluster_labels[nearest centre of x]``.

    Attributes
    ----------
    centres : Tensor of shape (k, d)
    cluster_labels : Tensor of shape (k,), int64
        Label of every cluster, ``0 .. num_classes - 1``.
    num_classes : int
    loss : float
        Proportion loss of the assignment on the training batches (``nan`` if unknown).

    Notes
    -----
    Publishing: a node's models are node-local (Sachweh, Boiar & Liebig 2021 privatise the
    exchanged label proportions only): the centres are the k-means centres of the node's own
    windows, computed without noise, so no guarantee covers them, in a private run too.
    ``save(path)`` writes the model in the release format of ``dp_proto.release``
    (``centres (k, d)`` and ``cluster_labels (k,)``, the label count) with the privacy
    section ``{"private": false, "note": ...}`` and a ``PrivacyLeakWarning``; ``loss``
    is left out (``RELEASE_DROPS``). What a node publishes under its guarantee is its
    label-proportion table: ``dp_proto.llp.release.LLPNodeRelease``.
    """

    centres: Tensor
    cluster_labels: Tensor
    num_classes: int
    loss: float = float("nan")

    def __post_init__(self) -> None:
        if self.centres.dim() != 2 or self.cluster_labels.shape != (self.centres.shape[0],):
            raise ValueError(
                f"centres (k, d) and cluster_labels (k,) do not match: {tuple(self.centres.shape)}, "
                f"{tuple(self.cluster_labels.shape)}"
            )

    @property
    def k(self) -> int:
        return int(self.centres.shape[0])

    @property
    def device(self) -> torch.device:
        return self.centres.device

    def predict(self, x: Tensor) -> Tensor:
        """Labels of the rows of ``x (n, d)``: ``(n,)`` int64 on the device of the model."""
        return self.cluster_labels[predict(self.centres, x)]

    def to(self, device: torch.device | str) -> LLPNodeModel:
        return LLPNodeModel(self.centres.to(device), self.cluster_labels.to(device), self.num_classes, self.loss)

    # -- the release format (dp_proto.release) -----------------------------------------
    #: Fields a release leaves out, with the reason; the others are published.
    RELEASE_DROPS: ClassVar[dict[str, str]] = {
        "loss": "a training diagnostic (the proportion loss of the labelling on the node's batches), not "
        "needed to predict; a loaded model has loss nan",
    }

    def to_release(self) -> Release:
        """The model in the release format (in memory; ``save`` writes it).

        Warns with ``PrivacyLeakWarning``: the model is node-local and not private.

        Returns
        -------
        Release
            Tensors ``centres (k, d)`` and ``cluster_labels (k,)``; the manifest's public
            section holds ``k``, the feature count and ``num_classes``, its privacy
            section ``{"private": false, "note": NODE_LOCAL_NOTE}``.
        """
        warnings.warn(
            "LLPNodeModel: a node's model is node-local (k-means centres of its own windows, fitted without "
            'noise) and not covered by the guarantee of the LLP run; its release says "private": false. '
            "What a node publishes privately is its label-proportion table (LLPNodeRelease)",
            PrivacyLeakWarning,
            stacklevel=2,
        )
        return Release(
            model=registered_name(self),
            tensors={
                "centres": self.centres.detach().cpu().numpy(),
                "cluster_labels": self.cluster_labels.detach().cpu().numpy(),
            },
            public={"k": self.k, "n_features": int(self.centres.shape[1]), "num_classes": int(self.num_classes)},
            privacy={"private": False, "note": NODE_LOCAL_NOTE},
            dropped=tuple(self.RELEASE_DROPS),
        )

    @classmethod
    def from_release(cls, release: Release, *, device: torch.device | str = "cpu") -> LLPNodeModel:
        """The model of ``release`` on ``device``; it predicts as the saved one, ``loss`` is nan.

        Parameters
        ----------
        release : Release
            A release of an ``LLPNodeModel`` (``dp_proto.release.read_release``).
        device : torch.device or str, default "cpu"
            Device of the tensors.

        Returns
        -------
        LLPNodeModel

        Raises
        ------
        ValueError
            A release of another model, or tensors that do not fit its manifest.
        """
        cls.check_release_model(release)
        public = release.public
        k, d, num_classes = int(public["k"]), int(public["n_features"]), int(public["num_classes"])
        centres = release.tensor("centres", 2)
        labels = release.tensor("cluster_labels", 1)
        if centres.shape != (k, d) or labels.shape != (k,) or labels.dtype != np.int64:
            raise ValueError(
                f"the release's centres {centres.shape} and cluster_labels {labels.shape} ({labels.dtype}) do not "
                f"fit k={k}, n_features={d} (int64 labels expected)"
            )
        if k and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
            raise ValueError(f"the release's cluster_labels must lie in 0..{num_classes - 1}")
        return cls(
            torch.from_numpy(np.array(centres)).to(device),
            torch.from_numpy(np.array(labels)).to(device),
            num_classes,
            math.nan,
        )


def majority_vote(predictions: Tensor, num_classes: int, *, tie_break: str = "first") -> Tensor:
    """The most frequent label among ``M`` models, per sample.

    Sachweh, Boiar & Liebig (2021) do not say how ties are broken; with ``c + 1 = 4`` voters 2-2 ties
    are common, so the rule matters.

    Parameters
    ----------
    predictions : Tensor of shape (M, n), integer in ``0 .. num_classes - 1``
        Row 0 is the node's own model in ``train_node_models``' order.
    num_classes : int
    tie_break : {"first", "smallest"}, default "first"
        ``"first"``: among the tied labels, the one of row 0 (the own model) if it
        is one of them, otherwise the smallest tied label. ``"smallest"``: the
        smallest tied label.

    Returns
    -------
    Tensor of shape (n,), int64
    """
    if tie_break not in ("first", "smallest"):
        raise ValueError(f"tie_break must be 'first' or 'smallest', got {tie_break!r}")
    preds = torch.as_tensor(predictions)
    if preds.dim() != 2 or preds.shape[0] < 1:
        raise ValueError(f"predictions must have shape (M, n) with M >= 1, got {tuple(preds.shape)}")
    if preds.is_floating_point() or preds.dtype == torch.bool:
        raise DataValidationError(f"predictions must hold integers, got dtype {preds.dtype}")
    if preds.numel() and (int(preds.min()) < 0 or int(preds.max()) >= num_classes):
        raise DataValidationError(f"predictions must lie in 0..{num_classes - 1}")
    preds = preds.long()
    votes = torch.zeros(preds.shape[1], num_classes, dtype=torch.float64, device=preds.device)
    votes.scatter_add_(1, preds.T, torch.ones(preds.T.shape, dtype=torch.float64, device=preds.device))
    if tie_break == "first":  # half a vote breaks ties only: counts are integers
        votes.scatter_add_(
            1, preds[0][:, None], torch.full((preds.shape[1], 1), 0.5, dtype=torch.float64, device=preds.device)
        )
    # argmax returns the first maximal index: the smallest tied label
    return votes.argmax(1)


@dataclass(frozen=True)
class NodeFit:
    """What ``fit_node_models`` computed for one node.

    Attributes
    ----------
    models : list of LLPNodeModel, or one LLPBagModel
        One per source of proportions, in their order (own first); the bag learner
        (``LLPConfig(learner="bag")``) trains one model on its sources.
    clustering : KMeansResult or None
        The shared k-means fit (None for the bag learner).
    cluster_counts : Tensor of shape (B, k), float64, or None
        Training records of every batch in every cluster (None for the bag learner).
    searches : list of AssignmentResult
        The local search of every source (empty for the bag learner).
    """

    models: list
    clustering: KMeansResult | None
    cluster_counts: Tensor | None
    searches: list[AssignmentResult]


def train_node_models(
    features: Tensor,
    batch_ids: Tensor,
    proportion_sources: Sequence[LabelProportions | Tensor],
    *,
    k: int,
    n_starts: int = 32,
    generator: torch.Generator | None = None,
    **kwargs,
) -> list[LLPNodeModel]:
    """The ``len(proportion_sources)`` models of a node; see ``fit_node_models``,
    which takes the same arguments and also returns the clustering and the searches."""
    return fit_node_models(
        features, batch_ids, proportion_sources, k=k, n_starts=n_starts, generator=generator, **kwargs
    ).models


def fit_node_models(
    features: Tensor,
    batch_ids: Tensor,
    proportion_sources: Sequence[LabelProportions | Tensor],
    *,
    k: int,
    n_starts: int = 32,
    generator: torch.Generator | None = None,
    n_init: int = 3,
    kmeans_max_iter: int = 100,
    search_max_iter: int = 1000,
    swaps: bool = True,
) -> NodeFit:
    """One k-means on the node's features, labelled once per source of proportions.

    Random draws come from ``generator`` in a fixed order: the k-means seeding,
    then the starts of the local search for source 0, 1, ...

    Parameters
    ----------
    features : Tensor of shape (m, d)
        The node's training windows (finite).
    batch_ids : Tensor of shape (m,), integer
        Global batch of every window, ``0 .. B - 1``; row ``b`` of every source
        is the same time window.
    proportion_sources : sequence of LabelProportions or Tensor of shape (B, L)
        The node's own proportions first, then its neighbours'. A
        ``LabelProportions`` contributes its ``valid`` mask:
        a batch is used for a source if the node has records in it and the
        source marks it valid ("present in the training part of both").
    k : int
        Clusters.
    n_starts : int, default 32
        Random starts of each local search.
    generator : torch.Generator, optional
        On the device of ``features``.
    n_init, kmeans_max_iter : int
        Passed to ``kmeans``.
    search_max_iter : int, swaps : bool
        Passed to ``local_search``.

    Returns
    -------
    NodeFit
        ``models`` (one per source, in the order of ``proportion_sources``), the
        shared clustering, the ``(B, k)`` cluster counts and the searches.

    Raises
    ------
    ValueError
        No source, sources of different shapes, ``batch_ids`` of another length,
        or a source that shares no batch with the node's records.
    DataValidationError
        NaN/inf in features or proportions, batch ids out of range.
    """
    if len(proportion_sources) == 0:
        raise ValueError("proportion_sources is empty: need at least the node's own proportions")
    sources = [as_source(s) for s in proportion_sources]
    num_batches, num_classes = sources[0][0].shape if sources[0][0].dim() == 2 else (0, 0)
    for i, (p, _) in enumerate(sources):
        if p.dim() != 2 or tuple(p.shape) != (num_batches, num_classes) or num_batches == 0:
            raise ValueError(
                f"proportion source {i} has shape {tuple(p.shape)}; every source must be (B, L) with "
                f"the shape of source 0 {(num_batches, num_classes)}"
            )
    features = check_points(torch.as_tensor(features), "features")
    batch_ids = torch.as_tensor(batch_ids, device=features.device)
    if batch_ids.shape != (features.shape[0],):
        raise ValueError(f"batch_ids must have shape ({features.shape[0]},), got {tuple(batch_ids.shape)}")
    clustering = kmeans(features, k, n_init=n_init, max_iter=kmeans_max_iter, generator=generator)
    # (B, k) records of each batch in each cluster (batch ids are checked here)
    cluster_counts = batch_label_counts(clustering.labels, batch_ids, num_batches, k)
    models, searches = [], []
    for i, (p, valid) in enumerate(sources):
        p = p.to(features.device)
        weights = None if valid is None else valid.to(features.device)
        try:
            res = local_search(
                cluster_counts,
                p,
                n_starts=n_starts,
                max_iter=search_max_iter,
                swaps=swaps,
                weights=weights,
                generator=generator,
            )
        except ValueError as err:
            raise type(err)(f"proportion source {i}: {err}") from err
        searches.append(res)
        models.append(LLPNodeModel(clustering.centres, res.assignment, num_classes, res.loss))
    return NodeFit(models, clustering, cluster_counts, searches)
