"""One-shot federated GMLVQ and LGMLVQ: merging node models (Brinkrolf 2023, chapter 6).

Every node trains one GMLVQ or LGMLVQ model, with at most one prototype per class, on its
own data and sends it once; ``merge_models`` builds the global model:

* prototypes (eq. 6.1): for every class ``k`` the mean of the class-``k`` prototypes of
  the ``N_k`` nodes that have the class (``weights`` replaces the plain mean by a
  weighted one, e.g. by the nodes' class counts; Brinkrolf 2023 averages unweighted);
* metric: ``Omega`` is not unique (rotations of its rows give the same ``Lambda``), so
  the relevance matrices are averaged: ``Lambda = (1/m) sum_i Omega_i^T Omega_i``
  (eq. 6.2, GMLVQ) or, per class, over the nodes that have it (eq. 6.3, LGMLVQ), each
  node's metric first scaled to a mean ``trace(Lambda) = 1`` (its scale is arbitrary);
* back to ``Omega``: the principal square root of the symmetric ``Lambda`` by ``eigh``
  (negative eigenvalues from rounding clipped to zero), or with ``rank=k`` the
  rectangular root ``diag(sqrt(lambda_1..k)) U_1..k^T`` of the top ``k`` eigenpairs.

``node_splits`` gives the two scenarios of section 6.3: a random split into disjoint
nodes, and the same with all samples of class ``i`` removed from node ``i``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from dp_proto._validation import torch_dtype
from dp_proto.exceptions import DataValidationError
from dp_proto.lvq.estimators import GMLVQ, LGMLVQ
from dp_proto.lvq.layers import GMLVQLayer, LGMLVQLayer
from dp_proto.lvq.model import PrototypeModel

__all__ = ["merge_models", "merge_relevances", "relevance_root", "node_splits"]


def relevance_root(lam: np.ndarray, rank: int | None = None) -> np.ndarray:
    """``Omega`` with ``Omega^T Omega = Lambda`` for a symmetric PSD ``Lambda (d, d)``.

    ``rank=None``: the principal (symmetric) square root ``U diag(sqrt(l)) U^T``, shape
    ``(d, d)``; ``rank=k``: ``diag(sqrt(l_1..k)) U_1..k^T`` of the ``k`` largest
    eigenpairs, shape ``(k, d)``, the best rank-``k`` approximation of ``Lambda``.
    Eigenvalues below zero (rounding) are clipped to zero.
    """
    lam = np.asarray(lam, dtype=np.float64)
    if lam.ndim != 2 or lam.shape[0] != lam.shape[1]:
        raise ValueError(f"Lambda must be a square matrix, got shape {lam.shape}")
    d = lam.shape[0]
    if rank is not None and not 1 <= rank <= d:
        raise ValueError(f"rank must be in [1, {d}] or None, got {rank!r}")
    values, vectors = np.linalg.eigh((lam + lam.T) / 2.0)
    roots = np.sqrt(np.clip(values, 0.0, None))
    if rank is None:
        return (vectors * roots) @ vectors.T
    top = np.argsort(values)[::-1][:rank]
    return roots[top, None] * vectors[:, top].T


def merge_relevances(omegas: Sequence[np.ndarray], weights: Sequence[float] | None = None) -> np.ndarray:
    """The (weighted) mean of ``Omega_i^T Omega_i`` over the nodes (eq. 6.2), ``(d, d)``."""
    if len(omegas) == 0:
        raise ValueError("merge_relevances needs at least one matrix")
    w = np.ones(len(omegas)) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (len(omegas),) or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"weights must be {len(omegas)} non-negative numbers with a positive sum, got {weights!r}")
    lams = [np.asarray(o, dtype=np.float64).T @ np.asarray(o, dtype=np.float64) for o in omegas]
    return sum(wi * lam for wi, lam in zip(w, lams, strict=True)) / w.sum()


def _node_table(model: Any, classes: np.ndarray, position: int) -> dict[Any, int]:
    """``{class: prototype row}`` of a fitted node model, checked: one prototype per class."""
    check_is_fitted(model)
    labels = list(np.asarray(model.prototype_labels_).tolist())
    repeated = sorted({c for c in labels if labels.count(c) > 1}, key=str)
    if repeated:
        raise ValueError(
            f"node {position} has several prototypes of class(es) {repeated}; federated merging takes one "
            "prototype per class and node (prototypes_per_class=1)"
        )
    unknown = sorted(set(labels) - set(classes.tolist()), key=str)
    if unknown:
        raise ValueError(f"node {position} has class(es) {unknown} outside the label set {classes.tolist()}")
    return {c: i for i, c in enumerate(labels)}


def merge_models(
    models: Sequence[GMLVQ],
    *,
    classes: Sequence[Any] | np.ndarray | None = None,
    weights: np.ndarray | None = None,
    rank: int | None = None,
) -> GMLVQ:
    """Merge fitted node models into one model of the same kind (Brinkrolf 2023, eq. 6.1-6.3).

    Parameters
    ----------
    models : sequence of fitted GMLVQ or LGMLVQ (all of one kind)
        One per node, one prototype per class; a node may lack classes. Private nodes
        (``DPGMLVQ``, ``DPLGMLVQ``, same public ``bounds``) merge too: their tensors in the
        mapped units, their prototypes weighted by the released noisy class counts; the
        result carries ``node_ledgers_`` and ``privacy_`` (parallel composition over the
        nodes' disjoint data: the largest node epsilon).
    classes : sequence, optional
        The shared label set (default: the union of the nodes' ``classes_``); every class
        must be held by at least one node.
    weights : array (m, c), optional
        Non-negative weight of node ``i`` for class ``classes[k]`` (e.g. its class counts);
        default: the plain means of Brinkrolf (2023) (private nodes: their noisy class
        counts). GMLVQ's single metric is averaged with the node totals ``weights.sum(1)``.
    rank : int, optional
        Rows of the merged ``Omega``: the top-``rank`` root of the merged ``Lambda``;
        default: the full symmetric root.

    Returns
    -------
    GMLVQ or LGMLVQ
        Fitted (``predict``, ``score``, ``save``): ``classes_``, ``prototypes_``,
        ``omega_``, ``lambda_``, ``model_``, and ``node_counts_ (c,)``, the number of
        nodes that had every class (``N_k``).
    """
    if len(models) == 0:
        raise ValueError("merge_models needs at least one node model")
    kinds = {type(m) for m in models}
    kind = next(iter(kinds))
    if len(kinds) != 1 or not issubclass(kind, GMLVQ):
        names = sorted(k.__name__ for k in kinds)
        raise TypeError(f"merge_models takes fitted GMLVQ or LGMLVQ models of one kind, got {names}")
    local = issubclass(kind, LGMLVQ)
    for model in models:
        check_is_fitted(model)
    private = hasattr(models[0], "ledger_")
    widths = {int(m.n_features_in_) for m in models}
    if len(widths) != 1:
        raise DataValidationError(f"the node models have different feature counts {sorted(widths)}")
    d = widths.pop()
    if private:
        _check_same_domain(models)
    held = np.unique(np.concatenate([np.asarray(m.classes_) for m in models]))
    label_set = held if classes is None else np.unique(np.asarray(list(classes)))
    tables = [_node_table(m, label_set, i) for i, m in enumerate(models)]
    missing = [c for c in label_set.tolist() if not any(c in t for t in tables)]
    if missing:
        raise DataValidationError(f"no node has class(es) {missing}: the merged model would have no prototype")
    c, m_nodes = len(label_set), len(models)
    has = np.array([[cls in t for cls in label_set.tolist()] for t in tables])  # (m, c)
    if weights is None:
        w = _count_weights(models, label_set, has) if private else np.ones((m_nodes, c))
    else:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (m_nodes, c) or not np.isfinite(w).all() or (w < 0).any():
            raise ValueError(f"weights must be a non-negative array of shape ({m_nodes}, {c}), got {np.shape(weights)}")
    w = np.where(has, w, 0.0)
    if (w.sum(0) <= 0).any():
        raise ValueError("every class needs a positive weight at some node that has it")

    # the models' own tensors: input units for the public estimators, the mapped [-1, 1]
    # units of the public bounds for the private ones (the metric is in those units)
    node_prototypes = [m.model_.layer.prototypes.detach().cpu().numpy().astype(np.float64) for m in models]
    # A node's metric is defined up to one global scale (the GLVQ cost ignores it), and
    # private nodes (no trace normalisation, a noisy random walk) end at any scale: every
    # node is brought to a mean trace(Lambda) of 1 before averaging, so that no node's
    # arbitrary scale outweighs the others (Brinkrolf 2023 assumes trace-normalised nodes).
    node_omegas = [_unit_scale(np.asarray(m.omega_, dtype=np.float64)) for m in models]
    prototypes = np.zeros((c, d))
    omegas: list[np.ndarray] = []
    for k, cls in enumerate(label_set.tolist()):
        rows = [(i, t[cls]) for i, t in enumerate(tables) if cls in t]
        prototypes[k] = sum(w[i, k] * node_prototypes[i][j] for i, j in rows) / w[:, k].sum()
        if local:
            lam = merge_relevances([node_omegas[i][j] for i, j in rows], [w[i, k] for i, _ in rows])
            omegas.append(relevance_root(lam, rank))
    if not local:
        node_weights = w.sum(1)
        omegas.append(relevance_root(merge_relevances(node_omegas, node_weights), rank))

    first = models[0]
    params = {**first.get_params(deep=False), "prototypes_per_class": 1, "rank": rank}
    params.update({k: None for k in ("ledger", "noise_seed") if k in params})
    merged = kind(**params)
    tdtype = torch_dtype(first.dtype)
    r = omegas[0].shape[0]
    metric = torch.as_tensor(np.stack(omegas) if local else omegas[0], dtype=tdtype)
    layer: GMLVQLayer | LGMLVQLayer
    normalize = bool(first.model_.layer.normalize)
    if local:
        layer = LGMLVQLayer(
            d, c, rank=r, prototypes="zeros", omega_init=metric, normalize=normalize, dtype=tdtype, device=first.device
        )
    else:
        layer = GMLVQLayer(
            d, c, rank=r, prototypes="zeros", omega_init=metric, normalize=normalize, dtype=tdtype, device=first.device
        )
    with torch.no_grad():
        layer.prototypes.copy_(torch.as_tensor(prototypes, dtype=tdtype))
    merged.model_ = PrototypeModel(layer, torch.arange(c, device=first.device))
    merged.classes_ = label_set
    merged.n_features_in_ = d
    if private:
        merged.scaler_ = first.scaler_
        kind.attach_node_guarantees(merged, models)  # the private estimators' hook (lvq.private)
    merged.prototypes_ = merged._input_units(prototypes)
    merged.prototype_labels_ = label_set.copy()
    merged.node_counts_ = has.sum(0)
    merged._store_metric()
    return merged


def _unit_scale(omega: np.ndarray) -> np.ndarray:
    """``omega (r, d)`` or ``(W, r, d)`` scaled to a mean ``trace(Lambda_j) = 1``."""
    stack = omega.reshape(-1, *omega.shape[-2:])
    mean_trace = float((stack**2).sum()) / len(stack)
    return omega / np.sqrt(mean_trace) if mean_trace > 0 else omega


def _check_same_domain(models: Sequence[Any]) -> None:
    """Private nodes must share the public bounds (their tensors are in the mapped units)."""
    first = models[0].scaler_
    for i, m in enumerate(models[1:], start=1):
        if not (np.array_equal(m.scaler_.lower_, first.lower_) and np.array_equal(m.scaler_.upper_, first.upper_)):
            raise ValueError(
                f"node {i} has other public bounds than node 0: private nodes must map the features with the "
                "same bounds to be merged"
            )


def _count_weights(models: Sequence[Any], label_set: np.ndarray, has: np.ndarray) -> np.ndarray:
    """Private nodes: the released noisy class counts ``class_counts_`` (clipped at 0) as
    weights, so a node with (almost) no records of a class adds (almost) nothing to its
    prototype; a class with no positive count anywhere is averaged plainly."""
    w = np.zeros(has.shape)
    for i, m in enumerate(models):
        counts = getattr(m, "class_counts_", None)
        if counts is None:
            return np.ones(has.shape)
        position = {cls: j for j, cls in enumerate(np.asarray(m.classes_).tolist())}
        for k, cls in enumerate(label_set.tolist()):
            if cls in position:
                w[i, k] = max(float(counts[position[cls]]), 0.0)
    plain = (w * has).sum(0) <= 0
    w[:, plain] = 1.0
    return w


def node_splits(
    y: np.ndarray, n_nodes: int = 5, *, drop_class_per_node: bool = False, random_state: Any = None
) -> list[np.ndarray]:
    """Row indices of ``n_nodes`` disjoint nodes (Brinkrolf 2023, section 6.3).

    Scenario 1 (``drop_class_per_node=False``): a random split into nodes of (nearly)
    equal size. Scenario 2 (``True``): the same split, then node ``i`` loses every sample
    of the ``i``-th class (``np.unique(y)[i]``), for ``i < min(n_nodes, c)``.
    """
    y = np.asarray(y)
    if isinstance(n_nodes, bool) or not isinstance(n_nodes, (int, np.integer)) or n_nodes < 1:
        raise ValueError(f"n_nodes must be a positive integer, got {n_nodes!r}")
    if len(y) < n_nodes:
        raise DataValidationError(f"{len(y)} samples cannot fill {n_nodes} nodes")
    order = check_random_state(random_state).permutation(len(y))
    nodes = [np.sort(part) for part in np.array_split(order, n_nodes)]
    if drop_class_per_node:
        classes = np.unique(y)
        nodes = [idx[y[idx] != classes[i]] if i < len(classes) else idx for i, idx in enumerate(nodes)]
    return nodes
