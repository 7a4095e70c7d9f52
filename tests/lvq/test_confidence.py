"""Certainty, reject option and certified robustness (Brinkrolf 2023, chapter 4).

The certificate is checked against brute force in 2-D (grid search over the accepted
regions of a GMLVQ model with a non-identity Omega), and against random and PGD
perturbations inside the certified ball on a trained GMLVQ (iris) and a DPGMLVQ fit.
"""

from __future__ import annotations

import doctest
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris
from sklearn.preprocessing import StandardScaler

import dp_proto.lvq.confidence as confidence
from dp_proto.lvq import (
    GLVQ,
    GMLVQ,
    LGMLVQ,
    GLVQLayer,
    GMLVQLayer,
    LGMLVQLayer,
    PrototypeModel,
    accuracy_reject_curve,
    arc_area,
    certified_radius,
    certify,
    global_certified_radius,
    glvq_mu,
    lambda_pm,
    max_proba,
    predict_with_reject,
    reject,
    relsim,
    relsim_score,
)

DT = torch.float64


def test_doctests_of_the_module():
    failed, attempted = doctest.testmod(confidence, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert attempted > 0 and failed == 0


# -- helpers ------------------------------------------------------------------------------------------
def _gmlvq_model(prototypes, labels, omega) -> PrototypeModel:
    prototypes = torch.as_tensor(prototypes, dtype=DT)
    omega = torch.as_tensor(omega, dtype=DT)
    layer = GMLVQLayer(
        prototypes.shape[1],
        prototypes.shape[0],
        rank=omega.shape[0],
        prototypes=prototypes,
        omega_init=omega,
        normalize=False,
        dtype=DT,
    )
    return PrototypeModel(layer, labels)


OMEGA_2D = [[1.0, 0.6], [-0.3, 0.8]]  # not symmetric, not orthogonal


def _grid(model: PrototypeModel, lo, hi, n: int) -> tuple[torch.Tensor, float]:
    axes = [torch.linspace(lo[k], hi[k], n, dtype=DT) for k in range(2)]
    gx, gy = torch.meshgrid(*axes, indexing="ij")
    h = max((hi[0] - lo[0]) / (n - 1), (hi[1] - lo[1]) / (n - 1))
    return torch.stack([gx.flatten(), gy.flatten()], 1), h


def _min_dist(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``min_j ||a_i - b_j||`` for every row of ``a``, in chunks."""
    out = []
    for chunk in a.split(2048):
        out.append(torch.cdist(chunk, b).min(1).values)
    return torch.cat(out)


def _accepted_labels(model: PrototypeModel, x: torch.Tensor, theta: float) -> torch.Tensor:
    """Class index where accepted, -1 where rejected."""
    labels, accepted = predict_with_reject(model, x, theta)
    return torch.where(accepted, labels, torch.full_like(labels, -1))


# -- certainty measures -------------------------------------------------------------------------------
def test_relsim_is_zero_on_a_boundary_one_at_a_prototype_and_minus_mu_when_correct():
    model = _gmlvq_model([[0.0, 0.0], [2.0, 1.0], [-1.0, 2.0]], [0, 1, 1], OMEGA_2D)
    protos = model.layer.prototypes.detach()
    with torch.no_grad():
        # a point equidistant (in Lambda) from w_0 and w_1: the midpoint
        mid = ((protos[0] + protos[1]) / 2)[None]
        assert relsim(model(mid), model.prototype_labels).item() == pytest.approx(0.0, abs=1e-12)
        assert torch.allclose(relsim(model(protos), model.prototype_labels), torch.ones(3, dtype=DT))
        x = torch.randn(200, 2, generator=torch.Generator().manual_seed(0), dtype=DT) * 2
        d = model(x)
        r = relsim(d, model.prototype_labels)
        pred = model.predict(x)
        assert torch.allclose(r, -glvq_mu(d, pred, model.prototype_labels))  # x classified "correctly" as pred
        assert bool(((r >= 0) & (r <= 1)).all())
        far = relsim(model(torch.tensor([[1e6, -3e6]], dtype=DT)), model.prototype_labels)
        assert far.item() < 1e-5  # outliers tend to 0


def test_relsim_uses_the_nearest_prototype_of_another_class_than_the_winner():
    # w+ = prototype 0 (class 0); prototype 1 is also class 0 and must not count as w-
    d = torch.tensor([[1.0, 2.0, 5.0]])
    assert relsim(d, torch.tensor([0, 0, 1])).item() == pytest.approx((5 - 1) / (5 + 1))
    assert relsim(d.numpy(), [0, 1, 1]).tolist() == pytest.approx([(2 - 1) / 3])  # ndarray in, ndarray out


def test_relsim_and_max_proba_bad_input():
    with pytest.raises(ValueError, match="two classes"):
        relsim(torch.ones(2, 3), [1, 1, 1])
    with pytest.raises(ValueError, match="prototype labels"):
        relsim(torch.ones(2, 3), [0, 1])
    with pytest.raises(ValueError, match=r"\(B, W\)"):
        relsim(torch.ones(3), [0, 1, 1])
    with pytest.raises(ValueError, match=r"\(B, c\)"):
        max_proba(np.ones(3))


def test_max_proba():
    p = torch.tensor([[0.2, 0.5, 0.3], [1 / 3, 1 / 3, 1 / 3]])
    assert torch.allclose(max_proba(p), torch.tensor([0.5, 1 / 3]))
    assert isinstance(max_proba(p.numpy()), np.ndarray)


# -- reject rule --------------------------------------------------------------------------------------
def test_reject_accepts_at_and_above_theta():
    r = np.array([0.0, 0.3, 0.29999, 1.0])
    assert reject(r, 0.3).tolist() == [False, True, False, True]
    assert reject(torch.as_tensor(r), 0.3).tolist() == [False, True, False, True]
    # a probability certainty: theta in [0, 1]; any finite real with measure=None
    assert reject(r, 0.0, measure="proba").all()
    assert reject(r - 5, -4.5, measure=None).tolist() == [False, False, False, True]


@pytest.mark.parametrize("theta", [0.0, 1.0, -0.1, 1.5, float("nan")])
def test_reject_theta_outside_0_1_errors_for_relsim(theta):
    with pytest.raises(ValueError, match=r"open interval \(0, 1\)"):
        reject(np.array([0.5]), theta)
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        lambda_pm(theta)


def test_reject_other_measures_and_nan():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        reject(np.array([0.5]), 1.5, measure="proba")
    with pytest.raises(ValueError, match="finite"):
        reject(np.array([0.5]), float("inf"), measure=None)
    with pytest.raises(ValueError, match="measure"):
        reject(np.array([0.5]), 0.5, measure="margin")
    with pytest.raises(ValueError, match="NaN"):
        reject(np.array([np.nan]), 0.5)


# -- accuracy-reject curve ----------------------------------------------------------------------------
def _arc_reference(certainty, correct):
    """Direct loop over the thresholds."""
    rates, accs = [], []
    for theta in np.unique(certainty):
        keep = certainty >= theta
        rates.append(1 - keep.mean())
        accs.append(correct[keep].mean())
    return np.array([*rates, 1.0]), np.array([*accs, 1.0])


def test_arc_matches_a_direct_loop_and_ends_at_1_1():
    rng = np.random.default_rng(0)
    certainty = rng.integers(0, 12, size=300) / 11.0  # many ties
    correct = rng.random(300) < 0.4 + 0.5 * certainty
    rates, accs = accuracy_reject_curve(certainty, correct)
    ref_rates, ref_accs = _arc_reference(certainty, correct)
    np.testing.assert_allclose(rates, ref_rates)
    np.testing.assert_allclose(accs, ref_accs)
    assert rates[0] == 0.0 and accs[0] == pytest.approx(correct.mean())
    assert (rates[-1], accs[-1]) == (1.0, 1.0)
    assert np.all(np.diff(rates) > 0)
    assert arc_area(certainty, correct) == pytest.approx(np.trapezoid(ref_accs, ref_rates))
    # tensors in, same curve
    r_t, a_t = accuracy_reject_curve(torch.as_tensor(certainty), torch.as_tensor(correct))
    np.testing.assert_allclose(r_t, rates)
    np.testing.assert_allclose(a_t, accs)


def test_arc_ties_are_rejected_together():
    # three inputs tie at 0.5: no threshold rejects only some of them
    rates, accs = accuracy_reject_curve([0.5, 0.5, 0.5, 0.9], [True, False, False, True])
    assert rates.tolist() == [0.0, 0.75, 1.0]
    assert accs.tolist() == [0.5, 1.0, 1.0]
    rates, accs = accuracy_reject_curve([0.3, 0.3, 0.3], [True, False, True])
    assert rates.tolist() == [0.0, 1.0]
    assert accs.tolist() == pytest.approx([2 / 3, 1.0])


def test_arc_area_perfect_and_reversed_certainty():
    rng = np.random.default_rng(1)
    n = 200
    assert arc_area(rng.random(n), np.ones(n, bool)) == pytest.approx(1.0)
    correct = rng.random(n) < 0.8
    perfect = correct + rng.random(n) * 0.5  # every correct input above every error
    reversed_ = -perfect
    random_ = rng.random(n)
    a_perfect, a_rand, a_rev = (arc_area(c, correct) for c in (perfect, random_, reversed_))
    assert a_perfect > a_rand > a_rev
    # with a perfect ordering the curve reaches accuracy 1 exactly at the error rate
    rates, accs = accuracy_reject_curve(perfect, correct)
    assert np.all(accs[rates >= 1 - correct.mean() - 1e-12] == 1.0)


def test_arc_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        accuracy_reject_curve([], [])
    with pytest.raises(ValueError, match="same shape"):
        accuracy_reject_curve([0.1, 0.2], [True])
    with pytest.raises(ValueError, match="boolean"):
        accuracy_reject_curve([0.1, 0.2], [0.5, 1])
    with pytest.raises(ValueError, match="NaN"):
        accuracy_reject_curve([np.nan, 0.2], [True, False])


# -- lambda+- -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "theta, plus, minus",
    [
        (0.1, 0.4749, -9.4749),
        (0.3, 0.4232, -2.7566),
        (0.5, 0.3660, -1.3660),
        (0.6, 0.3333, -1.0000),
        (0.8, 0.25, -0.5),
        (0.9, 0.1866, -0.2977),
    ],
)
def test_lambda_pm_table(theta, plus, minus):
    lp, lm = lambda_pm(theta)
    assert lp == pytest.approx(plus, abs=5e-5)
    assert lm == pytest.approx(minus, abs=5e-5)
    # the boundary of Brinkrolf (2023), eq. 4.10: RelSim on the line equals theta there
    for lam in (lp, lm):
        assert ((1 - lam) ** 2 - lam**2) / ((1 - lam) ** 2 + lam**2) == pytest.approx(theta)


def test_lambda_pm_arrays_and_limits():
    t = np.array([1e-6, 0.5, 1 - 1e-9])
    plus, minus = lambda_pm(t)
    assert plus.shape == (3,) and np.all((plus > 0) & (plus < 0.5)) and np.all(minus < 0)
    assert plus[0] == pytest.approx(0.5, abs=1e-5) and plus[-1] == pytest.approx(0.0, abs=1e-4)
    assert minus[0] < -1e5


# -- the certificate against brute force in 2-D ------------------------------------------------------
def _ellipse_box(model, theta, pad=0.3):
    """Bounding box (input space) of every accepted region: Corollary 2's balls."""
    layer = model.layer
    protos = layer.prototypes.detach()
    omega_inv = torch.linalg.inv(layer.omega.detach())
    with torch.no_grad():
        dist = layer(protos).sqrt()
    _, lm = lambda_pm(theta)
    reach = abs(lm) * dist.max()  # every accepted point is within |lambda-| D of its winner (Lambda)
    half = reach * omega_inv.norm(dim=1)  # extent per input axis of a Lambda-ball of radius `reach`
    lo = (protos.min(0).values - half - pad).tolist()
    hi = (protos.max(0).values + half + pad).tolist()
    return lo, hi


@pytest.mark.parametrize("theta", [0.3, 0.6])
def test_two_prototypes_flip_shift_and_corollaries_match_brute_force(theta):
    model = _gmlvq_model([[0.0, 0.0], [1.5, 0.8]], [0, 1], OMEGA_2D)
    omega = model.layer.omega.detach()
    protos = model.layer.prototypes.detach()
    dist = (omega @ (protos[1] - protos[0])).norm().item()  # ||w+ - w-||_Lambda
    lp, lm = lambda_pm(theta)
    lo, hi = _ellipse_box(model, theta)
    x, h = _grid(model, lo, hi, 201)
    tol = 2 * h * torch.linalg.matrix_norm(omega, ord=2).item()  # grid resolution in the Lambda-seminorm
    acc = _accepted_labels(model, x, theta)
    z = x @ omega.T
    za, zb = z[acc == 0], z[acc == 1]
    assert len(za) > 100 and len(zb) > 100
    # nothing accepted touches the grid's border: the box holds both accepted regions
    border = (x[:, 0] == lo[0]) | (x[:, 0] == hi[0]) | (x[:, 1] == lo[1]) | (x[:, 1] == hi[1])
    assert not bool((acc[border] >= 0).any())

    # the smallest shift between the accepted regions: (1 - 2 lambda+) ||w+ - w-||_Lambda
    brute = _min_dist(za, zb).min().item()
    bound = (1 - 2 * lp) * dist
    assert bound <= brute + 1e-9  # sound (grid points are real accepted points)
    assert brute <= bound + tol  # and tight up to the grid
    assert global_certified_radius(model, theta) == pytest.approx(bound)

    # Corollary 2 (corrected): accepted points lie within |lambda-| ||w+ - w-||_Lambda of w+
    zp = protos @ omega.T
    reach_a = (za - zp[0]).norm(dim=1).max().item()
    assert abs(lm) * dist - tol <= reach_a <= abs(lm) * dist + 1e-9
    # Corollary 1 (corrected): within (1/2 - lambda+) ||w+ - w-||_Lambda of the bisector: rejected
    u = (zp[1] - zp[0]) / dist
    to_bisector = ((z - (zp[0] + zp[1]) / 2) @ u).abs()
    assert not bool((acc[to_bisector < (0.5 - lp) * dist] >= 0).any())
    assert to_bisector[acc >= 0].min().item() <= (0.5 - lp) * dist + tol

    # per input: with two prototypes the certified radius is the exact distance to the other region
    rng = np.random.default_rng(0)
    idx = torch.as_tensor(rng.choice(np.flatnonzero((acc == 0).numpy()), 40, replace=False))
    r = certified_radius(model, x[idx], theta)
    brute_x = _min_dist(z[idx], zb)
    assert bool((r <= brute_x + 1e-9).all())
    assert bool((brute_x <= r + tol).all())
    assert bool((r >= bound - 1e-9).all())
    # Euclidean: sound (and not tight for a non-isotropic Omega)
    r_e = certified_radius(model, x[idx], theta, norm="euclidean")
    scale = torch.linalg.matrix_norm(omega, ord=2)
    assert torch.allclose(r_e, r / scale)
    assert bool((r_e <= _min_dist(x[idx], x[acc == 1]) + 1e-9).all())
    # rejected inputs get 0
    rejected = (acc == -1).nonzero()[:20, 0]
    assert bool((certified_radius(model, x[rejected], theta) == 0).all())


def test_many_prototypes_certificate_is_sound_against_brute_force():
    theta = 0.25
    protos = [[0.0, 0.0], [1.6, 0.4], [0.4, 1.5], [1.9, 1.8], [-1.0, 1.2]]
    model = _gmlvq_model(protos, [0, 1, 2, 0, 1], OMEGA_2D)
    omega = model.layer.omega.detach()
    lo, hi = _ellipse_box(model, theta)
    x, _ = _grid(model, lo, hi, 241)
    acc = _accepted_labels(model, x, theta)
    z = x @ omega.T
    rng = np.random.default_rng(1)
    idx = torch.as_tensor(rng.choice(np.flatnonzero((acc >= 0).numpy()), 150, replace=False))
    r = certified_radius(model, x[idx], theta)
    brute = torch.stack(
        [_min_dist(z[i : i + 1], z[(acc >= 0) & (acc != acc[i])])[0] for i in idx.tolist()]
    )  # Lambda-distance to the nearest accepted point of another class
    assert bool((r <= brute + 1e-9).all())  # sound
    assert bool((r >= global_certified_radius(model, theta) - 1e-12).all())
    # a lower bound, not far below the truth here
    assert float((r / brute).median()) > 0.8
    # the pairwise form (1 - 2 lambda+) min_i ||w+ - w_i||_Lambda is below the certificate
    lp, _ = lambda_pm(theta)
    zp = model.layer.prototypes.detach() @ omega.T
    with torch.no_grad():
        winner = model(x[idx]).argmin(1)
    labels = model.prototype_labels
    pair = torch.cdist(zp[winner], zp).masked_fill(labels[None, :] == labels[winner][:, None], float("inf"))
    assert bool((r >= (1 - 2 * lp) * pair.min(1).values - 1e-12).all())


def test_glvq_identity_metric_and_euclidean_equal():
    layer = GLVQLayer(2, 3, prototypes=torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 3.0]], dtype=DT), dtype=DT)
    model = PrototypeModel(layer, [0, 1, 2])
    x = torch.tensor([[0.1, 0.2], [1.9, 0.1], [1.0, 0.0]], dtype=DT)
    r = certified_radius(model, x, 0.5)
    assert torch.allclose(r, certified_radius(model, x, 0.5, norm="euclidean"))
    assert r[2] == 0  # on the boundary: rejected
    # two prototypes 2 apart: exact. At w+ the other accepted region starts at lambda = 1 - lambda+,
    # at the edge of the own one (lambda+) the shift is the minimum (1 - 2 lambda+) * 2
    model2 = PrototypeModel(GLVQLayer(2, 2, prototypes=layer.prototypes.detach()[:2], dtype=DT), [0, 1])
    lp, _ = lambda_pm(0.5)
    at = torch.tensor([[0.0, 0.0], [2 * lp - 1e-12, 0.0]], dtype=DT)
    assert certified_radius(model2, at, 0.5).tolist() == pytest.approx([(1 - lp) * 2, (1 - 2 * lp) * 2])


# -- random and PGD perturbations on a trained GMLVQ --------------------------------------------------
@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return StandardScaler().fit_transform(X), y


@pytest.fixture(scope="module")
def gmlvq(iris):
    X, y = iris
    return GMLVQ(prototypes_per_class=2, random_state=0).fit(X, y)


def _three_gaussians():
    """3 classes in 3-D with anisotropic noise: the learned Lambda has rank 2 (iris': about 1)."""
    rng = np.random.default_rng(0)
    centers = np.array([[0.0, 0.0, 0.0], [3.0, 0.0, 0.0], [1.5, 2.5, 0.0]])
    X = np.concatenate([c + rng.standard_normal((60, 3)) * [1.0, 0.7, 2.0] for c in centers])
    return X, np.repeat([0, 1, 2], 60)


@pytest.fixture(scope="module", params=["iris", "three_gaussians"])
def trained(request, iris):
    """``(estimator, X)``: GMLVQ with two prototypes per class."""
    X, y = iris if request.param == "iris" else _three_gaussians()
    return GMLVQ(prototypes_per_class=2, random_state=0).fit(X, y), X


def _input_map(est):
    """``(J (d, d), b (d,))`` of the estimator's input map (identity for non-private ones)."""
    d = est.n_features_in_
    if not hasattr(est, "scaler_"):
        return torch.eye(d, dtype=DT), torch.zeros(d, dtype=DT)
    lower, upper = (
        torch.as_tensor(v, dtype=DT) * torch.ones(d, dtype=DT) for v in (est.scaler_.lower_, est.scaler_.upper_)
    )
    slope = 2.0 / (upper - lower)
    return torch.diag(slope), -lower * slope - 1.0


def _omega(est) -> torch.Tensor:
    """``Omega`` of a GMLVQ estimator, the identity for GLVQ."""
    if hasattr(est, "omega_"):
        return torch.as_tensor(est.omega_, dtype=DT)
    return torch.eye(est.n_features_in_, dtype=DT)


def _accept_margin(est, x_in: torch.Tensor, theta: float) -> torch.Tensor:
    """``(n, c)``: ``min_{j not in l} d_j - kappa min_{i in l} d_i``; >= 0 iff accepted as class l."""
    jac, b = _input_map(est)
    d = est.model_.layer(x_in @ jac.T + b)
    labels = est.model_.prototype_labels
    kappa = (1 + theta) / (1 - theta)
    inf = torch.tensor(float("inf"), dtype=DT)
    cols = []
    for k in range(len(est.classes_)):
        own = torch.where(labels == k, d, inf).min(1).values
        other = torch.where(labels != k, d, inf).min(1).values
        cols.append(other - kappa * own)
    return torch.stack(cols, 1)


def _flipped(est, x_adv: np.ndarray, base_labels: np.ndarray, theta: float) -> np.ndarray:
    labels, accepted = predict_with_reject(est, x_adv, theta)
    return accepted & (labels != base_labels)


def _pgd(est, x0: torch.Tensor, radius: torch.Tensor, theta: float, target: int, norm: str, steps=60, seed=0):
    """L2 projected gradient ascent on class ``target``'s acceptance margin within the ball.

    ``norm="lambda"``: the ball ``||Omega J delta|| <= radius``, parametrised by
    ``u = Omega J delta`` (``Omega J`` is invertible here); ``"euclidean"``: ``||delta|| <= radius``.
    """
    jac, _ = _input_map(est)
    omega = _omega(est)
    to_input = torch.linalg.inv(omega @ jac) if norm == "lambda" else torch.eye(x0.shape[1], dtype=DT)
    gen = torch.Generator().manual_seed(seed)
    u = torch.randn(x0.shape, generator=gen, dtype=DT)
    u = u / u.norm(dim=1, keepdim=True) * radius[:, None] * torch.rand(len(x0), 1, generator=gen, dtype=DT)
    step = 2.5 * radius[:, None] / steps
    for _ in range(steps):
        u.requires_grad_(True)
        margin = _accept_margin(est, x0 + u @ to_input.T, theta)[:, target]
        (grad,) = torch.autograd.grad(margin.sum(), u)
        with torch.no_grad():
            u = u + step * grad / grad.norm(dim=1, keepdim=True).clamp_min(1e-30)
            norm_u = u.norm(dim=1, keepdim=True)
            u = u * torch.clamp(radius[:, None] / norm_u.clamp_min(1e-30), max=1.0)
    return (x0 + u @ to_input.T).detach()


def _attack_all_classes(est, X, theta, radius, norm, steps=60):
    """PGD towards every other class; which inputs some attack flipped to an accepted other class."""
    base, accepted = predict_with_reject(est, X, theta)
    x0 = torch.as_tensor(X, dtype=DT)
    r = torch.as_tensor(radius, dtype=DT)
    flipped = np.zeros(len(X), bool)
    for target in range(len(est.classes_)):
        x_adv = _pgd(est, x0, r, theta, target, norm, steps=steps).numpy()
        flipped |= _flipped(est, x_adv, base, theta)
    return flipped, accepted


def _random_ball(est, X, radius, norm, draws, seed=0):
    """``draws`` points per input on the sphere of ``radius`` (Lambda or Euclidean), in input units."""
    rng = np.random.default_rng(seed)
    jac, _ = _input_map(est)
    omega = _omega(est)
    to_input = (torch.linalg.inv(omega @ jac) if norm == "lambda" else torch.eye(X.shape[1], dtype=DT)).numpy()
    u = rng.standard_normal((draws, *X.shape))
    u *= radius[None, :, None] / np.linalg.norm(u, axis=2, keepdims=True)
    return X[None] + u @ to_input.T


@pytest.mark.parametrize("norm", ["lambda", "euclidean"])
def test_random_and_pgd_perturbations_never_flip_a_certified_input(trained, norm):
    gmlvq, X = trained
    theta = 0.2
    r = certified_radius(gmlvq, X, theta, norm=norm)
    assert (r > 0).sum() > 60
    keep = r > 0
    Xa, ra = X[keep], r[keep] * (1 - 1e-9)
    base, _ = predict_with_reject(gmlvq, Xa, theta)
    for x_adv in _random_ball(gmlvq, Xa, ra, norm, draws=30):
        assert not _flipped(gmlvq, x_adv, base, theta).any()
    flipped, _ = _attack_all_classes(gmlvq, Xa, theta, ra, norm)
    assert not flipped.any()
    # the attack is not toothless: with a radius three times larger it flips inputs
    flipped_3, _ = _attack_all_classes(gmlvq, Xa, theta, 3 * ra, norm)
    assert flipped_3.any()
    # and certify agrees with the radius
    assert np.array_equal(certify(gmlvq, Xa, theta, 0.999 * r[keep], norm=norm), np.ones(len(Xa), bool))
    assert not certify(gmlvq, Xa, theta, r[keep], norm=norm).any()


def test_pgd_flips_just_outside_the_exact_two_prototype_radius():
    """With one prototype per class and two classes the radius is exact: PGD beats 1.05 r."""
    X, y = load_iris(return_X_y=True)
    keep = y > 0
    X = StandardScaler().fit_transform(X[keep])
    est = GMLVQ(random_state=0).fit(X, y[keep])
    theta = 0.3
    r = certified_radius(est, X, theta)
    acc = r > 0
    flipped_in, _ = _attack_all_classes(est, X[acc], theta, r[acc] * (1 - 1e-9), "lambda")
    assert not flipped_in.any()
    flipped_out, _ = _attack_all_classes(est, X[acc], theta, r[acc] * 1.05, "lambda", steps=100)
    assert flipped_out.mean() > 0.9


def test_radius_bounds_and_shapes_on_an_estimator(gmlvq, iris):
    X, _ = iris
    theta = 0.3
    r = certified_radius(gmlvq, X, theta)
    assert isinstance(r, np.ndarray) and r.shape == (len(X),)
    _, accepted = predict_with_reject(gmlvq, X, theta)
    assert np.array_equal(r > 0, accepted)
    assert np.all(r[accepted] >= global_certified_radius(gmlvq, theta) - 1e-12)
    lam_max = np.linalg.eigvalsh(gmlvq.lambda_).max()
    np.testing.assert_allclose(certified_radius(gmlvq, X, theta, norm="euclidean"), r / np.sqrt(lam_max))
    assert global_certified_radius(gmlvq, theta, norm="euclidean") == pytest.approx(
        global_certified_radius(gmlvq, theta) / np.sqrt(lam_max)
    )
    # the same numbers from the raw PrototypeModel, up to its float32 rounding (the
    # estimator predicts in float64)
    r_model = certified_radius(gmlvq.model_, torch.as_tensor(X), theta)
    assert r_model.dtype == torch.float32
    np.testing.assert_allclose(r_model.numpy(), r, rtol=1e-5)
    np.testing.assert_allclose(
        relsim_score(gmlvq, X), relsim_score(gmlvq.model_, torch.as_tensor(X)).numpy(), rtol=1e-5, atol=1e-6
    )
    labels, _ = predict_with_reject(gmlvq, X, theta)
    assert np.array_equal(labels, gmlvq.predict(X))
    # a larger theta: more rejects, larger radii for the inputs still accepted
    r_hi = certified_radius(gmlvq, X, 0.5)
    assert np.all(r_hi[r_hi > 0] >= r[r_hi > 0])


def test_rank_limited_omega_perturbations_in_the_null_space_are_free(iris):
    X, y = iris
    est = GMLVQ(rank=2, random_state=0).fit(X, y)
    omega = est.omega_
    null = np.linalg.svd(omega)[2][2:]  # (2, 4): an orthonormal basis of null(Omega)
    theta = 0.3
    r = certified_radius(est, X, theta)
    shifted = X + 100.0 * null[0]
    np.testing.assert_allclose(certified_radius(est, shifted, theta), r, rtol=1e-6, atol=1e-9)
    assert np.array_equal(est.predict(shifted), est.predict(X))


# -- a private model ----------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=["DPGMLVQ", "DPGLVQ"])
def dp_fit(request, iris):
    from dp_proto.lvq.private import estimators

    X, y = iris
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cls = getattr(estimators, request.param)
        return cls(epsilon=5.0, bounds=(-3, 4), classes=[0, 1, 2], sampling_rate=0.1, epochs=5, noise_seed=0).fit(X, y)


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["lambda", "euclidean"])
def test_private_estimator_certificate_in_input_units(dp_fit, iris, norm):
    """Post-processing of the released model: the inputs go through the public scaler_."""
    X, _ = iris
    est = dp_fit
    theta = 0.2
    r = certified_radius(est, X, theta, norm=norm)
    keep = r > 0
    assert keep.sum() > 30
    # the Lambda radius is the model-space radius of the scaled inputs (the same seminorm)
    jac, b = _input_map(est)
    z = torch.as_tensor(X, dtype=DT) @ jac.T + b
    r_model = certified_radius(est.model_, z, theta).numpy()
    if norm == "lambda":
        np.testing.assert_allclose(r, r_model, rtol=1e-6)  # the two paths round differently
    else:  # divided by ||Omega J||_2 = sqrt(lambda_max(J^T Lambda J))
        scale = np.linalg.norm(_omega(est).numpy() @ jac.numpy(), 2)
        np.testing.assert_allclose(r, r_model / scale, rtol=1e-6)
    labels, _ = predict_with_reject(est, X, theta)
    assert np.array_equal(labels, est.predict(X))
    Xa, ra = X[keep], r[keep] * (1 - 1e-9)
    base = labels[keep]
    for x_adv in _random_ball(est, Xa, ra, norm, draws=20):
        assert not _flipped(est, x_adv, base, theta).any()
    flipped, _ = _attack_all_classes(est, Xa, theta, ra, norm, steps=40)
    assert not flipped.any()
    assert global_certified_radius(est, theta, norm=norm) <= r[keep].min() + 1e-12


# -- bad input ----------------------------------------------------------------------------------------
def test_lgmlvq_is_not_covered(iris):
    X, y = iris
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # not converged in 20 iterations: irrelevant here
        est = LGMLVQ(max_iter=20, random_state=0).fit(X, y)
    with pytest.raises(NotImplementedError, match=r"Brinkrolf \(2023\)"):
        certified_radius(est, X, 0.3)
    with pytest.raises(NotImplementedError, match="LGMLVQ"):
        certify(est, X, 0.3, 0.1)
    with pytest.raises(NotImplementedError, match="LGMLVQ"):
        global_certified_radius(est, 0.3)
    model = PrototypeModel(LGMLVQLayer(2, 2, dtype=DT), [0, 1])
    with pytest.raises(NotImplementedError):
        certified_radius(model, torch.zeros(1, 2, dtype=DT), 0.3)
    # RelSim itself needs no global metric
    assert relsim_score(est, X).shape == (len(X),)


@pytest.mark.parametrize("theta", [0.0, 1.0, -0.5, 2.0])
def test_theta_outside_0_1_errors(gmlvq, iris, theta):
    X, _ = iris
    for fn in (
        lambda: certified_radius(gmlvq, X, theta),
        lambda: certify(gmlvq, X, theta, 0.1),
        lambda: global_certified_radius(gmlvq, theta),
        lambda: predict_with_reject(gmlvq, X, theta),
    ):
        with pytest.raises(ValueError, match=r"\(0, 1\)"):
            fn()


def test_other_bad_input(gmlvq, iris):
    X, _ = iris
    with pytest.raises(ValueError, match="norm"):
        certified_radius(gmlvq, X, 0.3, norm="l1")
    with pytest.raises(ValueError, match="non-negative"):
        certify(gmlvq, X, 0.3, -0.1)
    with pytest.raises(TypeError, match="PrototypeModel"):
        certified_radius(object(), X, 0.3)
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        certified_radius(GMLVQ(), X, 0.3)
    with pytest.raises(ValueError, match="features"):
        certified_radius(gmlvq, X[:, :2], 0.3)
    backbone = PrototypeModel(GMLVQLayer(2, 2, dtype=DT), [0, 1], backbone=torch.nn.Linear(3, 2).double())
    with pytest.raises(ValueError, match="backbone"):
        certified_radius(backbone, torch.zeros(1, 3, dtype=DT), 0.3)
    # RelSim of a model with a backbone is fine
    assert relsim_score(backbone, torch.zeros(4, 3, dtype=DT)).shape == (4,)


def test_glvq_estimator_certificate(iris):
    X, y = iris
    est = GLVQ(random_state=0).fit(X, y)
    r = certified_radius(est, X, 0.3)
    np.testing.assert_allclose(r, certified_radius(est, X, 0.3, norm="euclidean"))  # Lambda = I
    assert np.all(r[r > 0] >= global_certified_radius(est, 0.3) - 1e-12)


# -- the guide's example ------------------------------------------------------------------------------
def test_the_guide_example_runs_and_its_numbers_hold():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "lvq.md").read_text(encoding="utf-8")
    section = text.split("## Confidence: reject option and certified robustness", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    ns: dict = {}
    exec(compile(block, "docs/lvq.md", "exec"), ns)
    assert ns["area"] == pytest.approx(0.998, abs=5e-4)
    accepted, radius = ns["accepted"], ns["radius"]
    assert accepted.sum() == 71
    assert (ns["labels"] == ns["yte"])[accepted].mean() == pytest.approx(0.97, abs=5e-3)
    assert (round(ns["lambda_plus"], 4), round(ns["lambda_minus"], 4)) == (0.4232, -2.7566)
    assert ns["floor"] == pytest.approx(0.141, abs=5e-4)
    assert radius[accepted].min() == pytest.approx(0.146, abs=5e-4)
    assert radius[accepted].max() == pytest.approx(1.41, abs=5e-3)
    assert np.array_equal(ns["robust"], accepted)
