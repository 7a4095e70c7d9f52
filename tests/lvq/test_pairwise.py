"""One-versus-one GMLVQ with probabilistic outputs (dp_proto.lvq.pairwise): batched pairs
against separate training, Platt scaling, predict_proba contracts, scikit-learn checks,
bad input."""

import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris, load_wine, make_blobs
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import check_estimator, parametrize_with_checks

from dp_proto.exceptions import DataValidationError
from dp_proto.lvq import GMLVQ, PairwiseGMLVQ
from dp_proto.lvq.coupling import COUPLING_METHODS
from dp_proto.lvq.pairwise import (
    _ClassBlocks,
    class_pairs,
    fit_pairwise_gmlvq,
    fit_platt,
    pair_membership,
    pairwise_cost,
    pairwise_distances,
    pairwise_scores,
    platt_probabilities,
)

f64 = torch.float64


@parametrize_with_checks([PairwiseGMLVQ(max_iter=50)])
def test_sklearn_compatible(estimator, check):
    check(estimator)


@pytest.mark.slow
@pytest.mark.parametrize("coupling", [m for m in COUPLING_METHODS if m != "pkpd"])
def test_sklearn_compatible_with_every_coupling(coupling):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(PairwiseGMLVQ(coupling=coupling, max_iter=50), on_fail=None)
    failed = [(r["check_name"], str(r["exception"])) for r in results if r["status"] == "failed"]
    assert not failed


def _scaled(loader):
    X, y = loader(return_X_y=True)
    return StandardScaler().fit_transform(X), y


# ------------------------------------------------------------------ pairs and the cost
def test_class_pairs_and_membership():
    pairs = class_pairs(4)
    assert pairs.tolist() == [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]]
    member = pair_membership(torch.tensor([0, 2, 3]), pairs)
    assert member.tolist() == [[1, 1, 1, -1, -1, -1], [-1, 0, -1, 0, -1, 1], [-1, -1, 0, -1, 0, 0]]
    with pytest.raises(ValueError, match="num_classes"):
        class_pairs(1)


def test_pairwise_distances_match_a_per_pair_loop():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(9, 5, generator=g, dtype=f64)
    W = torch.randn(3, 2, 5, generator=g, dtype=f64)
    om = torch.randn(3, 2, 5, generator=g, dtype=f64)
    d = pairwise_distances(x, W, om)
    for k in range(3):
        for j in range(2):
            ref = ((x - W[k, j]) @ om[k].T).pow(2).sum(1)
            torch.testing.assert_close(d[:, k, j], ref)
    h = pairwise_scores(x, W, om)
    torch.testing.assert_close(h, (d[..., 1] - d[..., 0]) / (d[..., 0] + d[..., 1]))
    assert bool((h.abs() <= 1).all())
    with pytest.raises(ValueError, match=r"\(K, 2, d\)"):
        pairwise_distances(x, W[:, :1], om)
    with pytest.raises(ValueError, match=r"\(3, r, 5\)"):
        pairwise_distances(x, W, om[:, :, :4])


@pytest.mark.parametrize("quadratic", [True, False, None])
@pytest.mark.parametrize("transfer_fn", ["identity", "sigmoid"])
def test_class_blocked_cost_equals_the_dense_masked_cost(transfer_fn, quadratic):
    g = torch.Generator().manual_seed(1)
    y = torch.tensor([0] * 7 + [1] * 2 + [2] * 11 + [3] * 5)[torch.randperm(25, generator=g)]
    x = torch.randn(25, 6, generator=g, dtype=f64)
    pairs = class_pairs(4)
    W = torch.randn(6, 2, 6, generator=g, dtype=f64)
    om = torch.randn(6, 3, 6, generator=g, dtype=f64)
    blocks = _ClassBlocks.build(x, y, 4, pairs, rank=3, quadratic=quadratic)
    assert (blocks.quad is not None) == bool(quadratic)  # auto: rank 3 < (d + 1) / 2 projects
    assert _ClassBlocks.build(x, y, 4, pairs).quad is not None  # auto, full rank: quadratic features
    blocked = blocks.cost(W, om, transfer_fn=transfer_fn, beta=3.0)
    dense = pairwise_cost(pairwise_distances(x, W, om), pair_membership(y, pairs), transfer_fn=transfer_fn, beta=3.0)
    torch.testing.assert_close(blocked, dense)


@pytest.mark.parametrize("loader", [load_iris, load_wine])
def test_batched_pairs_equal_separate_training(loader):
    """One joint L-BFGS over all pairs reaches every pair's own optimum: the cost of a
    GMLVQ trained on that pair's samples alone, and the same scores."""
    X, y = _scaled(loader)
    fit = fit_pairwise_gmlvq(torch.as_tensor(X), torch.as_tensor(y), 3, max_iter=500, tol=1e-10)
    assert fit.converged
    h = pairwise_scores(torch.as_tensor(X), fit.prototypes, fit.omegas).numpy()
    torch.testing.assert_close(fit.omegas.flatten(1).norm(dim=1), torch.ones(3, dtype=f64))
    for k, (first, second) in enumerate(fit.pairs.tolist()):
        sel = (y == first) | (y == second)
        alone = GMLVQ(max_iter=500, tol=1e-10, stopping="lbfgs", dtype="float64").fit(X[sel], y[sel])
        assert fit.pair_losses[k].item() == pytest.approx(alone.loss_, abs=1e-6)
        # GMLVQ's decision_function is the score of class m: (d_l - d_m)/(d_l + d_m) = -h_lm
        np.testing.assert_allclose(-alone.decision_function(X), h[:, k], atol=2e-3)
        assert fit.pair_counts[k] == sel.sum()


def test_pair_training_starts_at_the_class_means():
    X, y = _scaled(load_iris)
    fit = fit_pairwise_gmlvq(torch.as_tensor(X), torch.as_tensor(y), 3, rank=2, max_iter=1)
    assert fit.omegas.shape == (3, 2, 4) and fit.prototypes.shape == (3, 2, 4)
    assert not fit.converged
    start = fit_pairwise_gmlvq(torch.as_tensor(X), torch.as_tensor(y), 3, rank=2, max_iter=1, tol=1e300)
    means = np.stack([X[y == k].mean(0) for k in range(3)])
    np.testing.assert_allclose(start.prototypes.numpy(), means[[[0, 1], [0, 2], [1, 2]]], atol=1e-12)


# ------------------------------------------------------------------ Platt scaling
def test_platt_recovers_known_parameters():
    g = torch.Generator().manual_seed(0)
    a_true = torch.tensor([-4.0, -1.0, 2.5], dtype=f64)
    b_true = torch.tensor([0.5, -0.3, 0.0], dtype=f64)
    h = 2 * torch.rand(60000, 3, generator=g, dtype=f64) - 1
    labels = (torch.rand(60000, 3, generator=g, dtype=f64) < platt_probabilities(h, a_true, b_true)).to(torch.int8)
    labels[:5000, 1] = -1  # samples outside a pair are ignored
    fit = fit_platt(h, labels)
    assert fit.converged
    torch.testing.assert_close(fit.a, a_true, atol=0.1, rtol=0)
    torch.testing.assert_close(fit.b, b_true, atol=0.06, rtol=0)
    assert fit.positives.tolist() == (labels == 1).sum(0).tolist()


def test_platt_converges_to_machine_precision_on_many_pairs():
    # near the optimum the Armijo test is rounding noise; the fit must still stop at once
    g = torch.Generator().manual_seed(2)
    h = 2 * torch.rand(250, 60, generator=g, dtype=f64) - 1
    labels = (torch.rand(250, 60, generator=g, dtype=f64) < torch.sigmoid(4 * h)).to(torch.int8)
    fit = fit_platt(h, labels)
    assert fit.converged and fit.n_iter <= 15
    n_pos, n_neg = (labels == 1).sum(0).to(f64), (labels == 0).sum(0).to(f64)
    target = torch.where(labels == 1, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
    residual = target - platt_probabilities(h, fit.a, fit.b)  # gradient of the NLL w.r.t. a h + b
    assert (residual * h).mean(0).abs().max() < 1e-10 and residual.mean(0).abs().max() < 1e-10


def test_platt_uses_smoothed_targets():
    # two score values, perfectly separated: the sigmoid reproduces Platt's targets
    # (N+ + 1)/(N+ + 2) at the positives and 1/(N- + 2) at the negatives, not 1 and 0
    n_pos, n_neg = 8, 5
    h = torch.tensor([[1.0]] * n_pos + [[-1.0]] * n_neg, dtype=f64)
    labels = torch.tensor([[1]] * n_pos + [[0]] * n_neg, dtype=torch.int8)
    fit = fit_platt(h, labels)
    r = platt_probabilities(torch.tensor([[1.0], [-1.0]], dtype=f64), fit.a, fit.b)[:, 0]
    torch.testing.assert_close(r, torch.tensor([9 / 10, 1 / 7], dtype=f64), atol=1e-8, rtol=0)
    assert fit.a.item() < 0  # r = 1/(1 + exp(a h + b)) grows with h


def test_platt_names_a_pair_without_both_classes():
    h = torch.zeros(4, 2, dtype=f64)
    labels = torch.tensor([[1, 1], [0, 1], [1, -1], [0, 1]], dtype=torch.int8)
    with pytest.raises(DataValidationError, match="lacks one of the two classes of pair 1"):
        fit_platt(h, labels)
    with pytest.raises(DataValidationError, match=r"classes \('b', 'c'\)"):
        fit_platt(h, labels, pair_names=["classes ('a', 'b')", "classes ('b', 'c')"])


# ------------------------------------------------------------------ the estimator
@pytest.mark.parametrize("coupling", COUPLING_METHODS)
def test_predict_proba_contract(coupling):
    X, y = make_blobs(240, 3, centers=4, cluster_std=2.0, random_state=0)
    names = np.array(["delta", "alpha", "charlie", "bravo"])[y]
    model = PairwiseGMLVQ(coupling=coupling, random_state=0).fit(X, names)
    assert model.classes_.tolist() == ["alpha", "bravo", "charlie", "delta"]
    proba = model.predict_proba(X)
    assert proba.shape == (240, 4)
    assert (proba >= 0).all() and (proba <= 1).all()
    np.testing.assert_allclose(proba.sum(1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(model.classes_[proba.argmax(1)], model.predict(X))
    # columns in classes_ order: the true class gets the most mass on average
    own = proba[np.arange(240), np.searchsorted(model.classes_, names)]
    assert own.mean() > (0.4 if coupling == "voting" else 0.6)  # a vote share is at most 3/6
    assert model.score(X, names) > 0.85
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(model.predict_log_proba(X), np.log(proba))


def test_attributes_and_pairwise_outputs():
    X, y = _scaled(load_wine)
    model = PairwiseGMLVQ(rank=4, random_state=0).fit(X, y + 1)
    K = 3
    assert model.pairs_.tolist() == [[0, 1], [0, 2], [1, 2]]
    assert model.prototypes_.shape == (K, 2, 13) and model.omegas_.shape == (K, 4, 13)
    assert model.platt_a_.shape == (K,) and (model.platt_a_ < 0).all()
    assert model.pair_loss_.shape == (K,) and model.loss_ == pytest.approx(model.loss_curve_[-1])
    # pair_counts_: the training fold's samples of each pair (HT's n_lm), 80% of the data
    counts = np.bincount(y)
    expected = (
        counts[[0, 0, 1]] + counts[[1, 2, 2]] - np.round(0.2 * counts)[[0, 0, 1]] - np.round(0.2 * counts)[[1, 2, 2]]
    )
    np.testing.assert_array_equal(model.pair_counts_, expected)
    R = model.pairwise_proba(X[:5])
    np.testing.assert_allclose(R + R.transpose(0, 2, 1), 1.0)
    h = model.pairwise_scores(X[:5])
    np.testing.assert_allclose(R[:, 0, 1], 1 / (1 + np.exp(model.platt_a_[0] * h[:, 0] + model.platt_b_[0])))


def test_binary_problem_all_refined_couplings_agree():
    X, y = make_blobs(120, 2, centers=2, cluster_std=3.0, random_state=1)
    model = PairwiseGMLVQ(random_state=0).fit(X, y)
    r = model.pairwise_proba(X)[:, 0, 1]
    for coupling in ["pkpd", "ht", "wlw1", "wlw2"]:
        np.testing.assert_allclose(model.set_params(coupling=coupling).predict_proba(X)[:, 0], r, atol=1e-8)


def test_same_seed_same_model_other_seed_other_split():
    X, y = _scaled(load_iris)
    a = PairwiseGMLVQ(random_state=3).fit(X, y).predict_proba(X)
    b = PairwiseGMLVQ(random_state=3).fit(X, y).predict_proba(X)
    c = PairwiseGMLVQ(random_state=4).fit(X, y).predict_proba(X)
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 1e-6


@pytest.mark.parametrize("loader, floor", [(load_iris, 0.9), (load_wine, 0.9)])
def test_accuracy_floor_on_bundled_data(loader, floor):
    X, y = loader(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    model = make_pipeline(StandardScaler(), PairwiseGMLVQ(random_state=0)).fit(Xtr, ytr)
    assert model.score(Xte, yte) >= floor


def test_float32():
    X, y = _scaled(load_iris)
    model = PairwiseGMLVQ(dtype="float32", random_state=0).fit(X, y)
    assert model.prototypes_.dtype == np.float32
    np.testing.assert_allclose(model.predict_proba(X).sum(1), 1.0, atol=1e-5)
    assert model.score(X, y) > 0.9


def test_convergence_warning():
    X, y = _scaled(load_iris)
    with pytest.warns(ConvergenceWarning, match="max_iter=2"):
        PairwiseGMLVQ(max_iter=2, random_state=0).fit(X, y)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "params, match",
    [
        ({"coupling": "softmax"}, "coupling must be one of"),
        ({"calibration_fraction": 0.0}, "calibration_fraction"),
        ({"calibration_fraction": 1.0}, "calibration_fraction"),
        ({"calibration_fraction": True}, "calibration_fraction"),
        ({"rank": 0}, "rank"),
        ({"max_iter": 0}, "max_iter"),
        ({"tol": 0.0}, "tol"),
        ({"transfer_fn": "relu"}, "transfer_fn"),
        ({"beta": 0.0}, "beta"),
        ({"dtype": "float16"}, "dtype"),
    ],
)
def test_bad_parameters(params, match):
    X, y = _scaled(load_iris)
    with pytest.raises(ValueError, match=match):
        PairwiseGMLVQ(**params).fit(X, y)


def test_a_class_with_one_sample_is_refused():
    X, y = _scaled(load_iris)
    y = y.copy()
    y[0] = 7
    with pytest.raises(DataValidationError, match=r"class\(es\) \[7\] have fewer than 2 samples"):
        PairwiseGMLVQ().fit(X, y)


def test_bad_data():
    X, y = _scaled(load_iris)
    model = PairwiseGMLVQ(max_iter=20, random_state=0)
    with pytest.raises(ValueError, match="at least 2 classes"):
        model.fit(X, np.zeros(len(y)))
    X_nan = X.copy()
    X_nan[3, 1] = np.nan
    with pytest.raises(DataValidationError, match="NaN"):
        model.fit(X_nan, y)
    with pytest.raises(DataValidationError, match="numeric"):
        model.fit(np.full(X.shape, "a", dtype=object), y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X, y)
    with pytest.raises(ValueError, match="features"):
        model.predict_proba(X[:, :2])
    with pytest.raises(DataValidationError, match="not seen during fit"):
        model.score(X, y + 5)


# ------------------------------------------------------------------ real data
@pytest.mark.slow
@pytest.mark.data
def test_segmentation_pairwise_beats_multiclass_gmlvq(real_data_dir):
    """Brinkrolf (2023), Table 4.2: pairwise GMLVQ with probabilities 0.953 against
    multi-class GMLVQ 0.913 on Image Segmentation (one 80/20 split here)."""
    from dp_proto.data import load_uci

    X, y = load_uci("segmentation", real_data_dir)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        pairwise = make_pipeline(StandardScaler(), PairwiseGMLVQ(random_state=0)).fit(Xtr, ytr)
        gmlvq = make_pipeline(StandardScaler(), GMLVQ(random_state=0)).fit(Xtr, ytr)
    assert pairwise.score(Xte, yte) >= 0.93
    assert pairwise.score(Xte, yte) > gmlvq.score(Xte, yte)


def test_the_guide_example_runs():
    """The code block of the "Probabilistic outputs" section of docs/lvq.md."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "lvq.md").read_text(encoding="utf-8")
    section = text.split("## Probabilistic outputs", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    ns: dict = {}
    exec(compile(block, "docs/lvq.md", "exec"), ns)
    assert ns["proba"].shape == (89, 3)
    np.testing.assert_allclose(ns["proba"].sum(1), 1.0)
    assert ns["accuracy"] == pytest.approx(0.955, abs=5e-4)
    assert ns["area"] == pytest.approx(0.991, abs=5e-4)
    assert (ns["certainty"] >= 1 / 3).all()


def test_multiclass_estimators_have_no_predict_proba_but_calibrate_externally():
    """GLVQ/GMLVQ/LGMLVQ keep no predict_proba (docs/lvq.md, "Probabilistic outputs");
    scikit-learn's one-versus-rest Platt calibration of decision_function works on them."""
    from sklearn.calibration import CalibratedClassifierCV

    from dp_proto.lvq import GLVQ, LGMLVQ

    for cls in (GLVQ, GMLVQ, LGMLVQ):
        assert not hasattr(cls(), "predict_proba")
    X, y = _scaled(load_iris)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        calibrated = CalibratedClassifierCV(GMLVQ(max_iter=50), method="sigmoid", cv=3).fit(X, y)
    np.testing.assert_allclose(calibrated.predict_proba(X).sum(1), 1.0)
