"""Confidence of prototype classifiers: certainty, reject option, certified robustness.

Brinkrolf (2023), chapter 4, sections 4.2-4.3, with the certainty measure of Fischer,
Hammer & Wersing (2015) and the reject rule of Chow (1970):

* **Certainty.** ``relsim``: the Relative Similarity ``(d- - d+) / (d+ + d-)`` in
  ``[0, 1]`` (Brinkrolf 2023, Def. 9), ``w+`` the nearest prototype and ``w-`` the nearest
  prototype of another class; ``max_proba``: the largest class probability (eq. 4.5-4.6),
  for any ``predict_proba`` output. ``relsim_score`` and ``predict_with_reject`` take a
  fitted estimator or a ``PrototypeModel``.
* **Reject option.** ``reject``: accept where the certainty is at least ``theta``
  (eq. 4.3). ``accuracy_reject_curve`` and ``arc_area``: the accuracy-reject curve with
  the point ``(1, 1)`` added, as in Brinkrolf (2023), section 4.6, and its area.
* **Certified robustness** of the RelSim reject option for a *global* metric (GLVQ:
  ``Lambda = I``; GMLVQ: ``Lambda = Omega^T Omega``): ``lambda_pm`` (Theorem 5),
  ``certified_radius`` and ``certify`` (a per-input radius, derived below) and
  ``global_certified_radius`` (the corrected Corollary-1 bound
  ``(1 - 2 lambda+) min ||w_i - w_j||_Lambda``). LGMLVQ is not covered (Brinkrolf 2023 has
  no result for local metrics) and raises ``NotImplementedError``.

**Corrected, non-squared forms.** Corollaries 1 and 2 of Brinkrolf (2023) multiply the
*squared* distance ``d_Lambda(w+, w-)`` by the *linear* fractions ``lambda+-`` of
Theorem 5. Here every bound is in the Lambda-seminorm ``||v||_Lambda = ||Omega v||``
(the square root of ``d_Lambda``): points within ``(1/2 - lambda+) ||w+ - w-||_Lambda`` of
the bisector of ``w+, w-`` are rejected (Corollary 1), points with
``||x - w+||_Lambda > |lambda-| ||w+ - w-||_Lambda`` are rejected (Corollary 2), and an
accepted input needs a shift of at least ``(1 - 2 lambda+) ||w+ - w-||_Lambda`` to become
an accepted input of another class.

**The certificate.** Write ``z = Omega x``, ``p_j = Omega w_j``, ``d_j(x) = ||z - p_j||^2``
and, for ``theta in (0, 1)``, ``kappa = (1 + theta) / (1 - theta) > 1``. ``RelSim(x) >= theta``
is ``d- >= kappa d+``, so the inputs **accepted with class** ``l`` lie in (and, unless
prototypes of two classes coincide, are exactly)

    A_l = union over i in l of ( intersection over j not in l of B_ij ),
    B_ij = { z : ||z - p_j||^2 >= kappa ||z - p_i||^2 },

and ``B_ij`` is a closed (Apollonius) ball around ``p_i``: centre
``(kappa p_i - p_j) / (kappa - 1)``, radius ``R_ij = sqrt(kappa) ||p_i - p_j|| / (kappa - 1)``;
on the line through ``p_i, p_j`` it spans ``p_i + lambda (p_j - p_i)``,
``lambda in [lambda-, lambda+]``, which is Theorem 5. With two prototypes ``A_l`` is that
one ball. For an input ``x`` accepted with class ``k`` a perturbation ``delta`` only
changes ``z`` by ``Omega delta``, of norm ``||delta||_Lambda``, and the distance from ``z``
to ``A_l`` is at least the distance to each ball of the intersection, so

    r(x) = min over i not in k of  max over j with c(j) != c(i) of  dist(z, B_ij)
    dist(z, B_ij) = max(0, sqrt(R_ij^2 + s_ij) - R_ij),  s_ij = (kappa d_i - d_j) / (kappa - 1)

is a lower bound of the Lambda-seminorm distance from ``x`` to every other class's
accepted region: **no perturbation with** ``||delta||_Lambda < r(x)`` **moves x to an
accepted input of another class** (it may move it into the reject region).
``dist(z, B_ij)`` comes from ``||z - c_ij||^2 = R_ij^2 + s_ij``, so ``r`` needs only the
model's distances ``d (B, W)`` and the prototypes' pairwise distances. Proven here for any
number of prototypes:

* with two prototypes ``r(x)`` is exact (the distance to the one ball; ``Omega`` of full
  row rank, so that ``Omega delta`` reaches every direction), and the smallest shift
  between the two accepted regions is ``(1 - 2 lambda+) ||w+ - w-||_Lambda``;
* the term ``j = w+`` (the winner of ``x``) gives ``dist(z, B_{i,w+})``, and ``z`` lies in
  ``B_{w+,i}`` (``x`` is accepted), which is ``(1 - 2 lambda+) ||w+ - w_i||_Lambda`` away
  from ``B_{i,w+}``: so ``r(x) >= (1 - 2 lambda+) min_{i not in k} ||w+ - w_i||_Lambda
  >= (1 - 2 lambda+) min_{c(w_i) != c(w_j)} ||w_i - w_j||_Lambda`` (the pairwise and the
  global form of the corrected Corollary 1);
* with several prototypes ``r(x)`` is a lower bound, not the exact distance (the
  intersection of balls can lie farther than its farthest ball).

The radius is computed from the same distances as ``predict``, in their dtype (float64 for
``GLVQ``, ``GMLVQ`` and ``LGMLVQ``, which predict in float64 whatever their training dtype;
the model's dtype otherwise): exact up to floating-point rounding (relative ``1e-16`` in
float64, ``1e-7`` in float32), which
a caller who needs a strict guarantee at the boundary can absorb by shrinking it slightly.

**Euclidean radius.** ``||Omega delta|| <= ||Omega||_2 ||delta||_2`` and
``||Omega||_2 = sqrt(lambda_max(Lambda))``, so ``r(x) / sqrt(lambda_max(Lambda))`` is a
certified Euclidean radius. The seminorm radius says nothing about the size of
``delta`` in ``null(Omega)`` (a rank-limited ``Omega``, or a GMLVQ metric that ignores
features): such perturbations are free, they do not change any distance.

**Units.** The radii are in the units of the ``X`` that is passed: for a
``PrototypeModel``, its layer's input (the model must have no backbone); for an estimator,
the features that its ``predict`` takes. A private estimator (``DPGLVQ``, ``DPGMLVQ``)
maps them by its public affine map ``scaler_`` (``x -> J x + b``) first; the seminorm
radius is the same in both units (the metric of the input units is ``J^T Lambda J``) and
the Euclidean one divides by ``||Omega J||_2``.

**Privacy.** For a private model everything here is post-processing of the released
model (prototypes, metric, public bounds) and of the inputs passed in: it costs no
privacy budget. Certainty and radii of the *training* records, or an accuracy-reject
curve on them, are of course statistics of private data like any other.

Shapes: ``B`` or ``n`` inputs, ``W`` prototypes, ``c`` classes, ``d`` features.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from dp_proto.lvq.layers import GLVQLayer, GMLVQLayer, LGMLVQLayer
from dp_proto.lvq.model import PrototypeModel, forward_in_dtype

__all__ = [
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
]

Norm = Literal["lambda", "euclidean"]

#: inputs per chunk of the ``(B, W, W)`` certificate tensor: about 4M elements
_CHUNK_ELEMENTS = 1 << 22


# -- helpers --------------------------------------------------------------------------------------
def _to_tensor(a: Any, name: str) -> tuple[Tensor, bool]:
    """``a`` as a tensor, and whether it was one (to return the same kind)."""
    if isinstance(a, Tensor):
        return a, True
    arr = np.asarray(a)
    if arr.dtype == object:
        raise TypeError(f"{name} must be numeric, got an object array")
    return torch.as_tensor(arr), False


def _back(t: Tensor, was_tensor: bool) -> Tensor | np.ndarray:
    return t if was_tensor else t.detach().cpu().numpy()


def _check_theta_relsim(theta: float) -> float:
    try:
        value = float(theta)
    except (TypeError, ValueError):
        raise TypeError(f"theta must be a number in (0, 1), got {theta!r}") from None
    if not 0.0 < value < 1.0:
        raise ValueError(
            f"theta must lie in the open interval (0, 1) for the RelSim reject option "
            f"(Brinkrolf 2023, Theorem 5), got {theta!r}: RelSim is in [0, 1], theta <= 0 accepts every "
            "input (decision boundaries and outliers included) and theta >= 1 only the prototypes"
        )
    return value


def _check_norm(norm: str) -> None:
    if norm not in ("lambda", "euclidean"):
        raise ValueError(f"norm must be 'lambda' or 'euclidean', got {norm!r}")


# -- certainty measures ---------------------------------------------------------------------------
def relsim(distances: Tensor | np.ndarray, prototype_labels: Tensor | Sequence[int] | np.ndarray):
    """Relative Similarity ``(d- - d+) / (d+ + d-)`` of every input (Brinkrolf 2023, Def. 9).

    ``d+`` is the distance to the closest prototype overall, ``d-`` to the closest prototype
    whose label differs from that winner's (Fischer, Hammer & Wersing 2015). The value is
    in ``[0, 1]``: 0 on a decision boundary (and towards 0 far from all prototypes), 1 on a
    prototype, and ``-mu(x)`` of the GLVQ cost for a correctly classified input.

    Parameters
    ----------
    distances : Tensor or ndarray, shape (B, W)
        Dissimilarities of ``B`` inputs to ``W`` prototypes, e.g. a layer's output (any
        non-negative dissimilarity: GLVQ, GMLVQ or LGMLVQ).
    prototype_labels : Tensor or array-like of int, shape (W,)
        Class of every prototype; at least two classes.

    Returns
    -------
    Tensor or ndarray, shape (B,)
        The certainty, of the same kind (tensor or array) as ``distances``. An input equally
        far from prototypes of two classes gets 0 (also where both distances are 0).

    Examples
    --------
    >>> import torch
    >>> from dp_proto.lvq import relsim
    >>> d = torch.tensor([[1.0, 9.0], [4.0, 4.0], [0.0, 2.0]])
    >>> relsim(d, [0, 1])
    tensor([0.8000, 0.0000, 1.0000])
    """
    d, was_tensor = _to_tensor(distances, "distances")
    if d.dim() != 2:
        raise ValueError(f"expected distances of shape (B, W), got {tuple(d.shape)}")
    if not d.is_floating_point():
        d = d.double()
    labels = torch.as_tensor(
        prototype_labels if isinstance(prototype_labels, Tensor) else np.asarray(prototype_labels)
    ).to(device=d.device)
    if labels.shape != (d.shape[1],):
        raise ValueError(f"expected {d.shape[1]} prototype labels, got shape {tuple(labels.shape)}")
    if labels.numel() == 0 or bool((labels == labels[0]).all()):
        raise ValueError("RelSim needs prototypes of at least two classes")
    d_plus, winner = d.min(1)
    other = labels[None, :] != labels[winner][:, None]  # (B, W): prototypes of another class
    d_minus = torch.where(other, d, torch.full_like(d, float("inf"))).min(1).values
    total = d_plus + d_minus
    out = torch.where(total > 0, (d_minus - d_plus) / torch.where(total > 0, total, 1.0), 0.0)
    return _back(out, was_tensor)


def max_proba(proba: Tensor | np.ndarray):
    """Largest class probability ``max_k p(k | x)`` of every input (Brinkrolf 2023, eq. 4.5-4.6).

    The certainty of a probabilistic classifier (Chow 1970), in ``[1/c, 1]`` for a
    probability vector: use it with any ``predict_proba`` output, e.g. of pairwise coupling.

    Parameters
    ----------
    proba : Tensor or ndarray, shape (B, c)
        Class probabilities.

    Returns
    -------
    Tensor or ndarray, shape (B,)
        Of the same kind as ``proba``.

    Examples
    --------
    >>> import numpy as np
    >>> from dp_proto.lvq import max_proba
    >>> max_proba(np.array([[0.2, 0.5, 0.3], [0.9, 0.05, 0.05]]))
    array([0.5, 0.9])
    """
    p, was_tensor = _to_tensor(proba, "proba")
    if p.dim() != 2 or p.shape[1] < 1:
        raise ValueError(f"expected proba of shape (B, c), got {tuple(p.shape)}")
    return _back(p.max(1).values, was_tensor)


# -- the reject rule ------------------------------------------------------------------------------
def reject(
    certainty: Tensor | np.ndarray,
    theta: float,
    *,
    measure: Literal["relsim", "proba"] | None = "relsim",
):
    """Chow's reject rule: accept an input where ``certainty >= theta`` (Brinkrolf 2023, eq. 4.3).

    Parameters
    ----------
    certainty : Tensor or ndarray, shape (n,)
        Certainty of every input (``relsim``, ``max_proba``, ...).
    theta : float
        The threshold.
    measure : {"relsim", "proba"} or None, default "relsim"
        Which range ``theta`` is checked against: ``"relsim"``: the open interval
        ``(0, 1)`` of Brinkrolf (2023), Theorem 5 (the robustness results need it);
        ``"proba"``: ``[0, 1]``; None: any finite real, as eq. 4.3 allows for an arbitrary
        certainty measure.

    Returns
    -------
    Tensor or ndarray of bool, shape (n,)
        True where the input is **accepted** (classified), False where it is rejected; of
        the same kind as ``certainty``.

    Raises
    ------
    ValueError
        ``theta`` outside the range of ``measure``, or a NaN certainty.

    Examples
    --------
    >>> import numpy as np
    >>> from dp_proto.lvq import reject
    >>> reject(np.array([0.1, 0.3, 0.295]), 0.3)
    array([False,  True, False])
    """
    if measure == "relsim":
        theta = _check_theta_relsim(theta)
    elif measure == "proba":
        theta = float(theta)
        if not 0.0 <= theta <= 1.0:
            raise ValueError(f"theta must lie in [0, 1] for a probability certainty, got {theta!r}")
    elif measure is None:
        theta = float(theta)
        if not math.isfinite(theta):
            raise ValueError(f"theta must be finite, got {theta!r}")
    else:
        raise ValueError(f"measure must be 'relsim', 'proba' or None, got {measure!r}")
    r, was_tensor = _to_tensor(certainty, "certainty")
    if r.is_floating_point() and bool(torch.isnan(r).any()):
        raise ValueError("certainty contains NaN")
    return _back(r >= theta, was_tensor)


# -- model and estimator conveniences -------------------------------------------------------------
def _unwrap(obj: Any) -> tuple[PrototypeModel, Any]:
    """``(model, estimator or None)`` of a fitted estimator or a ``PrototypeModel``."""
    if isinstance(obj, PrototypeModel):
        return obj, None
    model = getattr(obj, "model_", None)
    if isinstance(model, PrototypeModel) and hasattr(obj, "_distances"):
        return model, obj
    if hasattr(obj, "fit") and hasattr(obj, "_distances"):
        from sklearn.exceptions import NotFittedError

        raise NotFittedError(f"this {type(obj).__name__} is not fitted yet; call fit first")
    raise TypeError(
        "expected a PrototypeModel or a fitted prototype estimator (GLVQ, GMLVQ, LGMLVQ, DPGLVQ, DPGMLVQ, "
        f"...), got {type(obj).__name__}"
    )


def _model_distances(model: PrototypeModel, estimator: Any, X: Any) -> Tensor:
    """``(n, W)`` distances, computed as ``predict`` computes them."""
    if estimator is not None:
        return estimator._distances(X)  # validation, and a private estimator's scaler_
    x = X if isinstance(X, Tensor) else torch.as_tensor(np.asarray(X))
    with torch.no_grad():
        return model(x.to(device=model.layer.prototypes.device))


def relsim_score(model: Any, X: Any):
    """RelSim certainty of a fitted estimator or a ``PrototypeModel`` on ``X``.

    Parameters
    ----------
    model : fitted GLVQ, GMLVQ, LGMLVQ, DPGLVQ, DPGMLVQ, ... or PrototypeModel
        A private estimator maps ``X`` by its ``scaler_`` first, like its ``predict``;
        certainty of a released private model is post-processing (no privacy cost).
    X : array-like or Tensor, shape (n, d)
        Inputs, in the units ``predict`` takes.

    Returns
    -------
    ndarray (estimator) or Tensor (PrototypeModel), shape (n,)

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from dp_proto.lvq import GMLVQ, relsim_score
    >>> X, y = load_iris(return_X_y=True)
    >>> est = GMLVQ(random_state=0).fit(X, y)
    >>> r = relsim_score(est, X)
    >>> r.shape, bool(((r >= 0) & (r <= 1)).all())
    ((150,), True)
    """
    net, est = _unwrap(model)
    out = relsim(_model_distances(net, est, X), net.prototype_labels)
    return out.detach().cpu().numpy() if est is not None else out


def predict_with_reject(model: Any, X: Any, theta: float):
    """Winner-takes-all labels and the RelSim reject decision (Brinkrolf 2023, eq. 4.1-4.4).

    Parameters
    ----------
    model : fitted prototype estimator or PrototypeModel
        As for ``relsim_score`` (LGMLVQ included: RelSim needs no global metric).
    X : array-like or Tensor, shape (n, d)
        Inputs.
    theta : float in (0, 1)
        RelSim threshold.

    Returns
    -------
    labels : ndarray (estimator: labels of ``classes_``) or Tensor (PrototypeModel: class indices), shape (n,)
        The prediction, also for rejected inputs.
    accepted : ndarray or Tensor of bool, shape (n,)
        False where the prediction is rejected.
    """
    theta = _check_theta_relsim(theta)
    net, est = _unwrap(model)
    d = _model_distances(net, est, X)
    labels = net.prototype_labels[d.argmin(1)]
    accepted = relsim(d, net.prototype_labels) >= theta
    if est is not None:
        return est.classes_[labels.cpu().numpy()], accepted.cpu().numpy()
    return labels, accepted


# -- the accuracy-reject curve --------------------------------------------------------------------
def accuracy_reject_curve(certainty: Any, correct: Any) -> tuple[np.ndarray, np.ndarray]:
    """Accuracy on the accepted inputs against the reject rate (Brinkrolf 2023, section 4.6).

    ``theta`` sweeps the sorted distinct certainties: at ``theta = u`` every input with
    certainty below ``u`` is rejected, so inputs of equal certainty are rejected together.
    The first point (the smallest ``u``) rejects nothing, the last accepts only the inputs
    of the largest certainty; the point ``(1, 1)`` (all rejected) is added, as Brinkrolf
    (2023) does.

    Parameters
    ----------
    certainty : array-like or Tensor, shape (n,)
        Certainty of every input (higher: more certain).
    correct : array-like or Tensor of bool, shape (n,)
        Whether the prediction of each input is correct.

    Returns
    -------
    reject_rates : ndarray, shape (m + 1,)
        Increasing from 0 to 1 (``m`` distinct certainties).
    accuracies : ndarray, shape (m + 1,)
        Accuracy on the accepted inputs at each reject rate; the last is 1.

    Examples
    --------
    >>> import numpy as np
    >>> from dp_proto.lvq import accuracy_reject_curve
    >>> rates, acc = accuracy_reject_curve([0.1, 0.5, 0.5, 0.9], [False, True, False, True])
    >>> rates.tolist(), acc.tolist()
    ([0.0, 0.25, 0.75, 1.0], [0.5, 0.6666666666666666, 1.0, 1.0])
    """
    r = np.asarray(certainty.detach().cpu() if isinstance(certainty, Tensor) else certainty, dtype=np.float64)
    ok = np.asarray(correct.detach().cpu() if isinstance(correct, Tensor) else correct)
    if r.ndim != 1 or ok.shape != r.shape:
        raise ValueError(f"expected certainty and correct of the same shape (n,), got {r.shape} and {ok.shape}")
    if r.size == 0:
        raise ValueError("the accuracy-reject curve needs at least one input")
    if np.isnan(r).any():
        raise ValueError("certainty contains NaN")
    if ok.dtype != bool:
        if not np.isin(ok, (0, 1)).all():
            raise ValueError("correct must be boolean (or 0/1)")
        ok = ok.astype(bool)
    order = np.argsort(r, kind="stable")
    r_sorted, ok_sorted = r[order], ok[order]
    n = r.size
    # first index of every distinct certainty: inputs before it are rejected at theta = that value
    starts = np.flatnonzero(np.r_[True, r_sorted[1:] != r_sorted[:-1]])
    correct_before = np.r_[0, np.cumsum(ok_sorted)]  # correct among the first k sorted inputs
    accepted = n - starts
    rates = starts / n
    accuracies = (correct_before[n] - correct_before[starts]) / accepted
    return np.r_[rates, 1.0], np.r_[accuracies, 1.0]


def arc_area(certainty: Any, correct: Any) -> float:
    """Area under the accuracy-reject curve, by the trapezoid rule over the reject rate in [0, 1].

    Parameters
    ----------
    certainty : array-like or Tensor, shape (n,)
    correct : array-like or Tensor of bool, shape (n,)
        As for ``accuracy_reject_curve``.

    Returns
    -------
    float
        In ``[0, 1]``: 1 where every prediction is correct; higher is a better ordering of
        the inputs by certainty (Brinkrolf 2023, Tables 4.3 and 4.5).

    Examples
    --------
    >>> from dp_proto.lvq import arc_area
    >>> arc_area([0.1, 0.5, 0.5, 0.9], [False, True, False, True])
    0.8125
    """
    rates, accuracies = accuracy_reject_curve(certainty, correct)
    return float(np.sum(np.diff(rates) * (accuracies[1:] + accuracies[:-1]) / 2.0))


# -- robustness (global metric) -------------------------------------------------------------------
def lambda_pm(theta):
    """``lambda+-(theta) = (theta - 1 +- sqrt(1 - theta^2)) / (2 theta)`` (Brinkrolf 2023, Theorem 5, eq. 4.8).

    For two prototypes ``w+, w-`` and the RelSim threshold ``theta``, the inputs on the
    line ``w+ + lambda (w- - w+)`` that are accepted with the class of ``w+`` are those with
    ``lambda in [lambda-, lambda+]``. ``lambda+ in (0, 1/2)``: the reject band around the
    bisector has half-width ``(1/2 - lambda+) ||w+ - w-||_Lambda`` (corrected Corollary 1);
    ``lambda- < 0``: inputs farther than ``|lambda-| ||w+ - w-||_Lambda`` from ``w+`` are
    rejected (corrected Corollary 2). Both are fractions of the *unsquared* distance.

    Parameters
    ----------
    theta : float or array-like, in (0, 1)

    Returns
    -------
    lambda_plus, lambda_minus : float or ndarray
        Floats for a scalar ``theta``.

    Examples
    --------
    >>> from dp_proto.lvq import lambda_pm
    >>> [round(v, 4) for v in lambda_pm(0.5)], [round(v, 4) for v in lambda_pm(0.8)]
    ([0.366, -1.366], [0.25, -0.5])
    """
    t = np.asarray(theta, dtype=np.float64)
    if not np.all((t > 0.0) & (t < 1.0)):
        raise ValueError(f"theta must lie in the open interval (0, 1) (Brinkrolf 2023, Theorem 5), got {theta!r}")
    root = np.sqrt(1.0 - t * t)
    plus, minus = (t - 1.0 + root) / (2.0 * t), (t - 1.0 - root) / (2.0 * t)
    if t.ndim == 0:
        return float(plus), float(minus)
    return plus, minus


def _global_metric(net: PrototypeModel, estimator: Any, what: str) -> Tensor | None:
    """``Omega`` of the layer (None for GLVQ's identity); errors for LGMLVQ or a backbone."""
    layer = net.layer
    if isinstance(layer, LGMLVQLayer):
        raise NotImplementedError(
            f"{what} is only proven for a global metric (GLVQ, GMLVQ; Brinkrolf 2023, Theorem 5 and "
            "Corollaries 1-2); Brinkrolf (2023) gives no robustness result for the local metrics of LGMLVQ, "
            "whose decision boundaries are quadratic"
        )
    if estimator is None and net.has_backbone:
        raise ValueError(
            f"{what} holds in the prototype layer's input space; this model has a backbone, so the radius "
            "would not bound perturbations of its inputs. Pass the backbone's features and "
            "PrototypeModel(model.layer, model.prototype_labels)"
        )
    if isinstance(layer, GMLVQLayer):
        return layer.omega.detach()
    if type(layer) is GLVQLayer:
        return None
    raise TypeError(f"{what}: unsupported prototype layer {type(layer).__name__}")


def _input_jacobian(estimator: Any, d: int, dtype: torch.dtype, device: torch.device) -> Tensor | None:
    """``J`` of a private estimator's affine input map ``x -> J x + b`` (None: the identity)."""
    domain = getattr(estimator, "_domain", None) if estimator is not None else None
    if domain is None:
        return None
    zero = np.asarray(domain(np.zeros((1, d)), fitting=False), dtype=np.float64)
    jac_t = np.asarray(domain(np.eye(d), fitting=False), dtype=np.float64) - zero  # row i: J e_i
    probe = np.random.default_rng(0).standard_normal((2, d))
    if not np.allclose(domain(probe, fitting=False), probe @ jac_t + zero, rtol=1e-9, atol=1e-9):
        raise ValueError(f"the input map of {type(estimator).__name__} is not affine; no certificate")
    return torch.as_tensor(jac_t.T, dtype=dtype, device=device)


def _euclidean_scale(net: PrototypeModel, estimator: Any, omega: Tensor | None) -> float:
    """``||Omega J||_2 = sqrt(lambda_max(J^T Lambda J))``: Lambda-seminorm per Euclidean unit."""
    proto = net.layer.prototypes.detach()
    jac = _input_jacobian(estimator, proto.shape[1], proto.dtype, proto.device)
    if jac is None:
        return 1.0 if omega is None else float(torch.linalg.matrix_norm(omega.double(), ord=2))
    mat = jac if omega is None else omega @ jac
    return float(torch.linalg.matrix_norm(mat.double(), ord=2))


def _radius_from_distances(d: Tensor, proto_sq: Tensor, labels: Tensor, theta: float) -> Tensor:
    """The per-input certificate ``r (B,)`` in the Lambda-seminorm (see the module docstring)."""
    kappa = (1.0 + theta) / (1.0 - theta)
    d = d.to(proto_sq.dtype)
    radii = torch.sqrt(kappa * proto_sq.clamp_min(0.0)) / (kappa - 1.0)  # R_ij (W, W)
    radii_sq = radii * radii
    cross = labels[:, None] != labels[None, :]  # (W, W): j of another class than i
    win_label = labels[d.argmin(1)]
    accepted = relsim(d, labels) >= theta  # the same test as predict_with_reject
    out = torch.zeros(d.shape[0], dtype=d.dtype, device=d.device)
    w = d.shape[1]
    step = max(1, _CHUNK_ELEMENTS // max(1, w * w))
    for start in range(0, d.shape[0], step):  # chunks of inputs, not a loop over samples
        dc = d[start : start + step]
        s = ((kappa * dc[:, :, None] - dc[:, None, :]) / (kappa - 1.0)).clamp_min(0.0)  # (b, W, W)
        gap = s / (torch.sqrt(radii_sq + s) + radii).clamp_min(torch.finfo(d.dtype).tiny)
        gap = torch.where(cross, gap, torch.full_like(gap, float("-inf")))
        per_proto = gap.max(2).values  # (b, W): lower bound of the distance to i's accepted cell
        own = labels[None, :] == win_label[start : start + step, None]
        per_proto = torch.where(own, torch.full_like(per_proto, float("inf")), per_proto)
        out[start : start + step] = per_proto.min(1).values
    return torch.where(accepted, out, torch.zeros_like(out))


def certified_radius(model: Any, X: Any, theta: float, norm: Norm = "lambda"):
    """Per-input radius within which no perturbation makes ``x`` an accepted input of another class.

    For the RelSim reject option at threshold ``theta`` of a GLVQ (``Lambda = I``) or GMLVQ
    (``Lambda = Omega^T Omega``) model: every ``delta`` with norm **below** the radius leaves
    ``x + delta`` either rejected or classified as the class of ``x``. Derived from
    Brinkrolf (2023), Theorem 5 and the corrected (non-squared) Corollaries 1-2, as the
    module docstring explains: exact for two prototypes, a lower bound for more, and never
    below the global ``(1 - 2 lambda+) min ||w_i - w_j||_Lambda``
    (``global_certified_radius``).

    Parameters
    ----------
    model : fitted GLVQ, GMLVQ, DPGLVQ, DPGMLVQ or PrototypeModel (no backbone)
        A private estimator maps ``X`` by its public ``scaler_`` first, like its
        ``predict``; this is post-processing of the released model (no privacy cost).
    X : array-like or Tensor, shape (n, d)
        Inputs, in the units ``predict`` takes; the radius is in the same units.
    theta : float in (0, 1)
        RelSim threshold of the reject option.
    norm : {"lambda", "euclidean"}, default "lambda"
        ``"lambda"``: the seminorm ``||delta||_Lambda = ||Omega delta||`` (perturbations in
        ``null(Omega)`` are free); ``"euclidean"``: the Lambda radius divided by
        ``sqrt(lambda_max(Lambda))`` (of ``J^T Lambda J`` for a private estimator's map
        ``J``).

    Returns
    -------
    ndarray (estimator) or Tensor (PrototypeModel), shape (n,)
        The radius; 0 for rejected inputs.

    Raises
    ------
    NotImplementedError
        For LGMLVQ (local metrics): Brinkrolf (2023) proves nothing for them.
    ValueError
        ``theta`` outside ``(0, 1)``, an unknown ``norm``, or a model with a backbone.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from dp_proto.lvq import GMLVQ, certified_radius, global_certified_radius
    >>> X, y = load_iris(return_X_y=True)
    >>> est = GMLVQ(random_state=0).fit(X, y)
    >>> r = certified_radius(est, X, theta=0.3)
    >>> bool((r[r > 0] >= global_certified_radius(est, 0.3)).all())
    True
    """
    theta = _check_theta_relsim(theta)
    _check_norm(norm)
    net, est = _unwrap(model)
    omega = _global_metric(net, est, "certified_radius")
    d = _model_distances(net, est, X)
    with torch.no_grad():
        proto = net.layer.prototypes.detach()
        proto_sq = forward_in_dtype(net.layer, proto, d.dtype)  # (W, W) squared Lambda-distances
        radius = _radius_from_distances(d, proto_sq, net.prototype_labels.to(d.device), theta)
    if norm == "euclidean":
        radius = radius / _euclidean_scale(net, est, omega)
    return radius.cpu().numpy() if est is not None else radius


def certify(model: Any, X: Any, theta: float, radius: Any, norm: Norm = "lambda"):
    """Whether each input is accepted and no perturbation of norm at most ``radius`` flips it.

    True where ``radius < certified_radius(model, X, theta, norm)``: then every ``x + delta``
    with ``||delta|| <= radius`` is rejected or has the class of ``x``, never accepted with
    another class (Brinkrolf 2023, Theorem 5, corrected Corollaries 1-2). Rejected inputs
    are never certified.

    Parameters
    ----------
    model : fitted GLVQ, GMLVQ, DPGLVQ, DPGMLVQ or PrototypeModel (no backbone)
        As for ``certified_radius`` (post-processing for a private model).
    X : array-like or Tensor, shape (n, d)
        Inputs.
    theta : float in (0, 1)
        RelSim threshold.
    radius : float or array-like, shape () or (n,)
        Perturbation budget, non-negative, in the units of ``X``.
    norm : {"lambda", "euclidean"}, default "lambda"

    Returns
    -------
    ndarray (estimator) or Tensor (PrototypeModel) of bool, shape (n,)
    """
    r = certified_radius(model, X, theta, norm)
    if isinstance(r, Tensor):
        budget = torch.as_tensor(radius, dtype=r.dtype, device=r.device)
        if bool((budget < 0).any()) or bool(torch.isnan(budget).any()):
            raise ValueError("radius must be non-negative")
        return budget < r
    budget_np = np.asarray(radius, dtype=np.float64)
    if (budget_np < 0).any() or np.isnan(budget_np).any():
        raise ValueError("radius must be non-negative")
    return budget_np < r


def global_certified_radius(model: Any, theta: float, norm: Norm = "lambda") -> float:
    """``(1 - 2 lambda+) min_{c(w_i) != c(w_j)} ||w_i - w_j||_Lambda``: one radius for every accepted input.

    The corrected (non-squared) Corollary 1 of Brinkrolf (2023): the reject band around
    every class boundary has half-width at least ``(1/2 - lambda+)`` times the smallest
    distance between prototypes of different classes, so an accepted input moves at least
    twice that to become an accepted input of another class. ``certified_radius`` is never
    smaller for an accepted input.

    Parameters
    ----------
    model : fitted GLVQ, GMLVQ, DPGLVQ, DPGMLVQ or PrototypeModel (no backbone)
    theta : float in (0, 1)
    norm : {"lambda", "euclidean"}, default "lambda"
        As for ``certified_radius``.

    Returns
    -------
    float
    """
    theta = _check_theta_relsim(theta)
    _check_norm(norm)
    net, est = _unwrap(model)
    omega = _global_metric(net, est, "global_certified_radius")
    with torch.no_grad():
        proto = net.layer.prototypes.detach()
        proto_sq = forward_in_dtype(net.layer, proto, torch.float64)
    labels = net.prototype_labels
    cross = labels[:, None] != labels[None, :]
    w_min = float(proto_sq[cross].min().clamp_min(0.0).sqrt())
    plus, _ = lambda_pm(theta)
    radius = (1.0 - 2.0 * plus) * w_min
    if norm == "euclidean":
        radius /= _euclidean_scale(net, est, omega)
    return radius
