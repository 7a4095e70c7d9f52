"""Feature sparsity (Brinkrolf 2023, chapter 5): the group penalty and its proximal step,
simultaneous OMP, the proximal fit and the SparseGMLVQ / SparseLGMLVQ estimators."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_wine
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import scale
from sklearn.utils.estimator_checks import parametrize_with_checks

import dp_proto
from dp_proto.lvq import GMLVQLayer, LGMLVQLayer, PrototypeModel, SparseGMLVQ, SparseLGMLVQ
from dp_proto.lvq.init import class_mean_prototypes, make_prototype_labels
from dp_proto.lvq.sparse import (
    feature_group_norms,
    fit_proximal,
    group_penalty,
    group_soft_threshold_,
    normalize_metric_,
    omp_refit_,
    selected_features,
    simultaneous_omp,
    sparsity,
)


def _wine():
    X, y = load_wine(return_X_y=True)
    return scale(X), y


# -- the penalty and its proximal map ---------------------------------------------------
def test_group_norms_take_every_matrix_column():
    omegas = torch.zeros(2, 3, 4, dtype=torch.float64)
    omegas[0, :, 1] = torch.tensor([3.0, 0.0, 0.0])
    omegas[1, :, 1] = torch.tensor([0.0, 4.0, 0.0])
    omegas[1, 2, 3] = -2.0
    torch.testing.assert_close(feature_group_norms(omegas), torch.tensor([0.0, 5.0, 0.0, 2.0], dtype=torch.float64))
    assert float(group_penalty(omegas)) == 7.0
    assert selected_features(omegas).tolist() == [1, 3]
    assert sparsity(omegas) == 0.5  # eq. 5.8: 2 of 4 features unused
    torch.testing.assert_close(feature_group_norms(omegas[0]), torch.tensor([0.0, 3.0, 0.0, 0.0], dtype=torch.float64))


def test_soft_threshold_gives_exact_zeros_and_shrinks_the_rest_by_the_threshold():
    g = torch.Generator().manual_seed(0)
    omegas = torch.randn(3, 2, 6, generator=g, dtype=torch.float64)
    omegas[..., 0] *= 0.01  # a weak feature
    before = feature_group_norms(omegas)
    threshold = float(before.sort().values[2])  # the two weakest groups and the third die
    direction = omegas / before
    after = group_soft_threshold_(omegas, threshold)
    dead = before <= threshold
    assert dead.sum() == 3 and (omegas[..., dead] == 0).all()  # exactly zero, every matrix
    torch.testing.assert_close(after, (before - threshold).clamp_min(0))
    torch.testing.assert_close(omegas[..., ~dead], (direction * after)[..., ~dead])  # directions kept
    with pytest.raises(ValueError, match="threshold must be >= 0"):
        group_soft_threshold_(omegas, -1.0)


def test_the_proximal_step_is_the_minimiser_of_its_problem():
    # prox(v) = argmin_z 1/2 ||z - v||^2 + t P(z): no random perturbation does better
    g = torch.Generator().manual_seed(1)
    v = torch.randn(4, 5, generator=g, dtype=torch.float64)
    t = 0.8

    def objective(z):
        return 0.5 * float((z - v).pow(2).sum()) + t * float(group_penalty(z))

    z = v.clone()
    group_soft_threshold_(z, t)
    best = objective(z)
    for _ in range(200):
        assert objective(z + 0.05 * torch.randn(4, 5, generator=g, dtype=torch.float64)) >= best - 1e-12


def test_normalisation_keeps_zeros_and_bad_shapes_are_refused():
    omegas = torch.tensor([[[3.0, 0.0]], [[4.0, 0.0]]], dtype=torch.float64)
    normalize_metric_(omegas)
    assert float(omegas.pow(2).sum()) == pytest.approx(1.0) and (omegas[..., 1] == 0).all()
    with pytest.raises(ValueError, match="expected omega"):
        feature_group_norms(torch.zeros(3))


# -- simultaneous OMP --------------------------------------------------------------------
def _differences(W=3, n=40, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(W, n, d, generator=g, dtype=torch.float64)


def test_omp_with_every_feature_reproduces_the_projection_exactly():
    X = _differences()
    omegas = torch.randn(3, 2, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    sparse = simultaneous_omp(X, omegas, n_features=8, tol=0.0)
    torch.testing.assert_close(torch.bmm(X, sparse.transpose(1, 2)), torch.bmm(X, omegas.transpose(1, 2)))


@pytest.mark.parametrize("tol", [0.3, 0.1, 0.01])
def test_omp_meets_its_tolerance_on_one_shared_support(tol):
    X = _differences()
    omegas = torch.randn(3, 2, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    omegas[..., 5:] *= 1e-3  # three nearly unused features
    sparse = simultaneous_omp(X, omegas, tol=tol)
    target = torch.bmm(X, omegas.transpose(1, 2))
    residual = (torch.bmm(X, sparse.transpose(1, 2)) - target).norm() / target.norm()
    assert residual <= tol
    support = selected_features(sparse)
    assert len(support) < 8
    for k in range(3):  # the same features in every matrix
        assert set(torch.nonzero(sparse[k].abs().sum(0)).flatten().tolist()) <= set(support.tolist())


def test_omp_finds_a_planted_support():
    X = _differences(W=1, n=100, d=10)
    omega = torch.zeros(3, 10, dtype=torch.float64)
    omega[:, [2, 7]] = torch.randn(3, 2, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    sparse = simultaneous_omp(X, omega, n_features=2)
    assert selected_features(sparse).tolist() == [2, 7]
    torch.testing.assert_close(sparse, omega)


def test_omp_bad_input():
    X = _differences()
    omegas = torch.zeros(3, 2, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match="differences of shape"):
        simultaneous_omp(X[:, :, :5], omegas)
    with pytest.raises(ValueError, match="n_features must be in"):
        simultaneous_omp(X, omegas, n_features=9)
    with pytest.raises(ValueError, match="tol must be"):
        simultaneous_omp(X, omegas, tol=-1)


# -- the proximal fit ----------------------------------------------------------------------
def _model(layer_cls, X, y, **kw):
    x, yt = torch.as_tensor(X), torch.as_tensor(y)
    labels = make_prototype_labels(3, [1, 1, 1])
    layer = layer_cls(X.shape[1], 3, prototypes="zeros", dtype=torch.float64, **kw)
    with torch.no_grad():
        layer.prototypes.copy_(class_mean_prototypes(x, yt, labels))
    return PrototypeModel(layer, labels), x, yt


@pytest.mark.parametrize("layer_cls", [GMLVQLayer, LGMLVQLayer])
def test_proximal_fit_never_increases_the_penalised_cost_and_reaches_exact_zeros(layer_cls):
    X, y = _wine()
    model, x, yt = _model(layer_cls, X, y)
    result = fit_proximal(model, x, yt, penalty=0.3, max_iter=300)
    assert all(b <= a for a, b in zip(result.losses, result.losses[1:], strict=False))
    assert result.losses[-1] < result.losses[0]
    metric = model.layer.omegas if layer_cls is LGMLVQLayer else model.layer.omega
    norms = feature_group_norms(metric.detach())
    assert (norms == 0).sum() >= 3  # exact zeros, not small numbers
    assert float(metric.detach().pow(2).sum()) == pytest.approx(1.0)  # on the sphere
    with torch.no_grad():
        accuracy = (model(x).argmin(1) == yt).double().mean()
    assert accuracy > 0.9


def test_proximal_fit_bad_input():
    X, y = _wine()
    model, x, yt = _model(GMLVQLayer, X, y)
    with pytest.raises(ValueError, match="penalty must be"):
        fit_proximal(model, x, yt, penalty=-0.1)
    with pytest.raises(ValueError, match="lr must be"):
        fit_proximal(model, x, yt, penalty=0.1, lr=0)
    plain = PrototypeModel(dp_proto.lvq.GLVQLayer(13, 3, dtype=torch.float64), [0, 1, 2])
    with pytest.raises(TypeError, match="GMLVQLayer or LGMLVQLayer"):
        fit_proximal(plain, x, yt, penalty=0.1)


def test_omp_refit_of_a_trained_model_keeps_its_projections_within_tolerance():
    X, y = _wine()
    model, x, yt = _model(LGMLVQLayer, X, y, rank=3)
    fit_proximal(model, x, yt, penalty=0.05, max_iter=200)
    before = model.layer.omegas.detach().clone()
    diff = x.unsqueeze(0) - model.layer.prototypes.detach().unsqueeze(1)
    target = torch.bmm(diff, before.transpose(1, 2))
    support = omp_refit_(model, x, tol=0.05)
    after = model.layer.omegas.detach()
    scale_back = before.norm() / after.norm().clamp_min(1e-300)  # omp_refit_ renormalises
    residual = (torch.bmm(diff, (after * scale_back).transpose(1, 2)) - target).norm() / target.norm()
    assert residual <= 0.05 + 1e-9
    assert set(support.tolist()) == set(selected_features(after).tolist())


# -- the estimators ----------------------------------------------------------------------
@parametrize_with_checks([SparseGMLVQ(max_iter=50, penalty=0.01), SparseLGMLVQ(max_iter=50, penalty=0.01, rank=2)])
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


@pytest.mark.parametrize("cls", [SparseGMLVQ, SparseLGMLVQ])
def test_more_penalty_gives_fewer_features_and_transform_keeps_them(cls):
    X, y = _wine()
    kept = []
    for penalty in (0.0, 0.3, 1.0):
        model = cls(penalty=penalty, rank=2, random_state=0).fit(X, y)
        assert model.sparsity_ == 1 - len(model.selected_features_) / X.shape[1]
        assert model.transform(X).shape == (len(X), len(model.selected_features_))
        np.testing.assert_array_equal(model.transform(X), X[:, model.selected_features_])
        np.testing.assert_array_equal(np.flatnonzero(model.get_support()), model.selected_features_)
        zero_columns = np.abs(model.omega_).reshape(-1, X.shape[1]).sum(0) == 0
        np.testing.assert_array_equal(np.flatnonzero(~zero_columns), model.selected_features_)
        kept.append(len(model.selected_features_))
    assert kept[0] == X.shape[1] and kept[0] > kept[1] > kept[2] >= 1


def test_omp_option_places_the_model_at_a_feature_count():
    X, y = _wine()
    model = SparseLGMLVQ(penalty=0.05, rank=2, omp_features=4, random_state=0).fit(X, y)
    assert len(model.selected_features_) == 4 and model.sparsity_ == pytest.approx(1 - 4 / 13)
    assert model.score(X, y) > 0.85


@pytest.mark.parametrize(
    "params, message",
    [
        ({"penalty": -0.1}, "penalty must be a finite number >= 0"),
        ({"penalty": float("nan")}, "penalty must be a finite number >= 0"),
        ({"penalty": "high"}, "penalty must be a finite number >= 0"),
        ({"omp_features": 0}, "omp_features must be a positive integer"),
        ({"omp_features": 20}, "omp_features=20 exceeds the 13 features"),
        ({"omp_tol": 1.5}, "omp_tol must be in"),
        ({"max_iter": 0}, "max_iter must be a positive integer"),
    ],
)
def test_bad_parameters_get_clear_errors(params, message):
    X, y = _wine()
    with pytest.raises(ValueError, match=message):
        SparseGMLVQ(**params).fit(X, y)


def test_not_converging_warns():
    X, y = _wine()
    with pytest.warns(ConvergenceWarning, match="proximal gradient stopped at max_iter=2"):
        SparseLGMLVQ(max_iter=2).fit(X, y)


@pytest.mark.parametrize("cls", [SparseGMLVQ, SparseLGMLVQ])
def test_release_round_trip_keeps_the_selection(cls, tmp_path):
    X, y = _wine()
    model = cls(penalty=0.3, rank=2, random_state=0).fit(X, y)
    loaded = dp_proto.load_release(model.save(tmp_path / "release"))
    assert type(loaded) is cls
    np.testing.assert_array_equal(loaded.selected_features_, model.selected_features_)
    assert loaded.sparsity_ == model.sparsity_
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    np.testing.assert_array_equal(loaded.transform(X), model.transform(X))


def test_refit_keeps_the_support_and_lowers_the_glvq_cost():
    X, y = _wine()
    selected = SparseLGMLVQ(penalty=0.2, rank=2, refit=False, random_state=0).fit(X, y)
    refitted = SparseLGMLVQ(penalty=0.2, rank=2, random_state=0).fit(X, y)
    np.testing.assert_array_equal(refitted.selected_features_, selected.selected_features_)
    assert refitted.n_iter_ > selected.n_iter_
    assert selected.loss_ == selected.loss_curve_[-1]  # the penalised cost, never increasing
    assert all(b <= a for a, b in zip(selected.loss_curve_, selected.loss_curve_[1:], strict=False))
    x, yt = torch.as_tensor(X), torch.as_tensor(y)
    with torch.no_grad():
        cost = {m: float(m.model_.loss(m.model_(x), yt)) for m in (selected, refitted)}
    assert cost[refitted] < cost[selected]
    assert refitted.loss_ == pytest.approx(cost[refitted])


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), "high", True, None])
def test_one_check_for_every_group_lasso_strength(bad):
    from dp_proto.lvq.sparse import check_penalty

    with pytest.raises(ValueError, match=r"^group_lasso must be a finite number >= 0, got "):
        check_penalty("group_lasso", bad)
    assert check_penalty("penalty", 0) == 0.0 and check_penalty("penalty", np.float32(0.5)) == 0.5


def test_group_lasso_refuses_per_matrix_normalisation_alike_everywhere():
    from dp_proto.lvq.layers import LGMLVQLayer
    from dp_proto.lvq.model import PrototypeModel
    from dp_proto.lvq.private import DPLGMLVQ
    from dp_proto.lvq.sparse import LOCAL_NORMALISATION_ERROR, check_sparsifiable

    layer = LGMLVQLayer(3, 2, normalize=True)
    with pytest.raises(ValueError) as direct:
        check_sparsifiable(PrototypeModel(layer, torch.arange(2)))
    with pytest.raises(ValueError) as estimator:
        DPLGMLVQ(group_lasso=0.1, normalize_omega=True, bounds=(0, 1), classes=[0, 1]).fit(
            np.random.default_rng(0).random((20, 3)), np.arange(20) % 2
        )
    assert str(direct.value) == str(estimator.value) == LOCAL_NORMALISATION_ERROR
