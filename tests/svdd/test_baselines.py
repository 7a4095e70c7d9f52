"""The private SVM baselines (SVM WEIGHT, SVM OUTPUT) and their dual solver.

References: scipy's L-BFGS-B on the dense box dual (small problems), the KKT conditions,
independent numpy evaluations of the primal and dual objectives, scikit-learn's
one-vs-rest RBF SVC with the same objective weight (it has a bias and the exact kernel,
ours neither), and scipy.stats' Laplace distribution for the noise.
"""

import math
import pickle
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from scipy.optimize import minimize
from sklearn.base import clone
from sklearn.datasets import load_iris, load_wine
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import train_test_split
from sklearn.multiclass import OneVsRestClassifier
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from dp_proto.exceptions import PrivacyBudgetExceededError, PrivacyLeakWarning
from dp_proto.privacy.ledger import PrivacyLedger
from dp_proto.svdd import RandomFourierFeatures
from dp_proto.svdd.baselines import (
    PrivateSVMOutput,
    PrivateSVMWeight,
    solve_svm_dual,
    svm_sensitivity,
)

# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------


def _problem(n=40, d=3, F=30, K=3, gamma=0.7, seed=0):
    """RFF rows (n, F) of K Gaussian blobs and one-vs-all labels (K, n)."""
    g = torch.Generator().manual_seed(seed)
    centres = 1.5 * torch.randn(K, d, generator=g, dtype=torch.float64)
    lab = torch.arange(n) % K
    x = centres[lab] + torch.randn(n, d, generator=g, dtype=torch.float64)
    phi = RandomFourierFeatures(d, F, gamma, generator=g, dtype=torch.float64)(x)
    Y = torch.where(lab.unsqueeze(0) == torch.arange(K).unsqueeze(1), 1.0, -1.0)
    return phi, Y


def _primal_dual(phi, y, cap, alpha):
    """Independent numpy evaluation of P(w(alpha)) and D(alpha) for one problem."""
    p, yv, a = phi.numpy(), y.numpy(), alpha.numpy()
    w = (a * yv) @ p
    hinge = np.maximum(0.0, 1.0 - yv * (p @ w)).sum()
    return 0.5 * w @ w + cap * hinge, a.sum() - 0.5 * w @ w


def _lbfgsb_dual(phi, y, cap):
    """Dense reference: max D(alpha) over the box by L-BFGS-B (tight tolerances)."""
    p, yv = phi.numpy(), y.numpy()
    q = (yv[:, None] * p) @ (yv[:, None] * p).T

    def f(a):
        qa = q @ a
        return 0.5 * a @ qa - a.sum(), qa - 1.0

    res = minimize(
        f,
        np.zeros(len(yv)),
        jac=True,
        method="L-BFGS-B",
        bounds=[(0.0, cap)] * len(yv),
        options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 50000, "maxcor": 50},
    )
    return res.x, -res.fun


def _split(loader, seed):
    X, y = loader(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=seed, stratify=y)
    scaler = StandardScaler().fit(Xtr)
    return scaler.transform(Xtr), scaler.transform(Xte), ytr, yte


@pytest.fixture(scope="module")
def iris_split():
    return _split(load_iris, 0)


# --------------------------------------------------------------------------------------
# the dual solver
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("cap", [0.02, 0.3, 1.0])
def test_solver_matches_lbfgsb_and_certifies_its_gap(cap):
    phi, Y = _problem(n=40, F=30, seed=1)
    sol = solve_svm_dual(phi, Y, cap, tol=1e-10, relative=False)
    assert sol.converged and sol.alpha.shape == (3, 40) and sol.weights.shape == (3, 30)
    assert sol.gap.shape == (3,)
    assert bool((sol.alpha >= 0).all()) and bool((sol.alpha <= cap).all())
    for k in range(3):
        primal, dual = _primal_dual(phi, Y[k], cap, sol.alpha[k])
        # the reported gap is P - D, evaluated independently here
        assert primal - dual == pytest.approx(float(sol.gap[k]), abs=1e-12)
        assert 0 <= float(sol.gap[k]) <= 1e-10
        torch.testing.assert_close(sol.weights[k], (sol.alpha[k] * Y[k]) @ phi)
        _, ref_dual = _lbfgsb_dual(phi, Y[k], cap)
        assert dual >= ref_dual - 1e-9  # at least as good as the reference optimum
        assert dual == pytest.approx(ref_dual, abs=1e-7)
        # weak duality: the reference optimum lies between our dual and primal values
        assert ref_dual <= primal + 1e-9


@settings(max_examples=8, deadline=None)
@given(
    n=st.integers(4, 50),
    half_f=st.integers(1, 25),
    cap=st.floats(0.01, 1.0),
    seed=st.integers(0, 10_000),
)
def test_solver_kkt_conditions(n, half_f, cap, seed):
    phi, Y = _problem(n=n, F=2 * half_f, K=2, seed=seed)
    tol = 1e-10
    sol = solve_svm_dual(phi, Y, cap, tol=tol, relative=False, max_iter=200_000)
    assert sol.converged and bool((sol.gap <= tol).all())
    margins = Y * (sol.weights @ phi.T)
    a = sol.alpha
    # each complementarity term of the gap is <= tol: alpha = 0 => m >= 1 - tol/cap,
    # alpha = cap => m <= 1 + tol/cap, interior (delta from the bounds) => |m - 1| <= tol/delta
    eps = tol / cap + 1e-12
    assert bool((margins[a == 0] >= 1 - eps).all())
    assert bool((margins[a == cap] <= 1 + eps).all())
    delta = 1e-3 * cap
    interior = (a > delta) & (a < cap - delta)
    assert bool(((margins[interior] - 1).abs() <= tol / delta + 1e-12).all())


def test_vectorised_classes_equal_separate_solves():
    phi, Y = _problem(n=60, F=40, K=4, seed=2)
    tol = 1e-10
    joint = solve_svm_dual(phi, Y, 0.1, tol=tol, relative=False)
    assert joint.converged
    for k in range(4):
        alone = solve_svm_dual(phi, Y[k], 0.1, tol=tol, relative=False)
        assert alone.converged and alone.alpha.shape == (1, 60)
        # both within sqrt(2 tol) of the unique optimal weights
        assert float((joint.weights[k] - alone.weights[0]).norm()) <= 2 * math.sqrt(2 * tol)
        p_joint, _ = _primal_dual(phi, Y[k], 0.1, joint.alpha[k])
        p_alone, _ = _primal_dual(phi, Y[k], 0.1, alone.alpha[0])
        assert p_joint == pytest.approx(p_alone, abs=2 * tol)


def test_relative_and_absolute_stopping():
    phi, Y = _problem(n=80, F=40, K=2, seed=3)
    rel = solve_svm_dual(phi, Y, 1.0, tol=1e-4)
    primal = torch.tensor([_primal_dual(phi, Y[k], 1.0, rel.alpha[k])[0] for k in range(2)])
    assert rel.converged and bool((rel.gap <= 1e-4 * primal.abs().clamp_min(1.0)).all())
    absolute = solve_svm_dual(phi, Y, 1.0, tol=1e-9, relative=False)
    assert absolute.converged and bool((absolute.gap <= 1e-9).all())
    assert absolute.iterations >= rel.iterations
    capped = solve_svm_dual(phi, Y, 1.0, tol=1e-12, relative=False, max_iter=3)
    assert not capped.converged and capped.iterations == 3
    uncapped = solve_svm_dual(phi, Y, 1.0, tol=1e-12, relative=False, max_iter=None)
    assert uncapped.converged and bool((uncapped.gap <= 1e-12).all()) and uncapped.iterations > 3


def test_solver_dtype_and_degenerate_all_at_cap():
    phi, Y = _problem(n=30, F=20, K=2, seed=4)
    sol = solve_svm_dual(phi.float(), Y, 0.5, tol=1e-8, relative=False)
    assert sol.alpha.dtype == torch.float32 and sol.weights.dtype == torch.float32
    assert sol.gap.dtype == torch.float64 and sol.converged
    # a tiny cap: every margin stays below 1, so alpha = cap everywhere is optimal
    tiny = solve_svm_dual(phi, Y, 1e-3, relative=False)
    assert tiny.converged
    torch.testing.assert_close(tiny.alpha, torch.full_like(tiny.alpha, 1e-3))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"phi": torch.ones(5)}, "shape"),
        ({"phi": torch.ones(5, 3, dtype=torch.long)}, "floating"),
        ({"phi": torch.full((5, 3), math.nan)}, "NaN"),
        ({"y_pm": torch.ones(4)}, "y_pm must have shape"),
        ({"y_pm": torch.zeros(5)}, "-1 and \\+1"),
        ({"cap": 0.0}, "cap"),
        ({"cap": math.inf}, "cap"),
        ({"tol": 0.0}, "tol"),
        ({"max_iter": -1}, "max_iter"),
    ],
)
def test_solver_errors(kwargs, match):
    args = {"phi": torch.ones(5, 3, dtype=torch.float64), "y_pm": torch.ones(5), "cap": 0.1} | kwargs
    tol = args.pop("tol", 1e-6)
    max_iter = args.pop("max_iter", 100)
    with pytest.raises(ValueError, match=match):
        solve_svm_dual(args["phi"], args["y_pm"], args["cap"], tol=tol, max_iter=max_iter)


# --------------------------------------------------------------------------------------
# estimators: accuracy
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("loader, gamma", [(load_iris, 1.0), (load_wine, 0.1)])
def test_non_private_accuracy_close_to_sklearn_svc(loader, gamma):
    # Table 7.1 settings (C/n = 0.05); sklearn's one-vs-rest SVC with C = 0.05 minimises the
    # same objective, plus a bias and with the exact kernel.
    ours, ref = [], []
    for seed in range(3):
        Xtr, Xte, ytr, yte = _split(loader, seed)
        for cls in (PrivateSVMWeight, PrivateSVMOutput):
            model = cls(0.05, gamma, 400, None, random_state=seed).fit(Xtr, ytr)
            assert len(model.ledger_.events) == 0
            ours.append(model.score(Xte, yte))
        ref.append(OneVsRestClassifier(SVC(C=0.05, gamma=gamma)).fit(Xtr, ytr).score(Xte, yte))
    assert np.mean(ours) >= 0.85
    assert np.mean(ours) >= np.mean(ref) - 0.05


def test_private_accuracy_grows_with_epsilon(iris_split):
    Xtr, Xte, ytr, yte = iris_split
    for cls in (PrivateSVMWeight, PrivateSVMOutput):
        acc = {
            eps: np.mean([cls(0.05, 1.0, 400, eps, random_state=s).fit(Xtr, ytr).score(Xte, yte) for s in range(4)])
            for eps in (0.01, 100.0)
        }
        assert acc[100.0] >= 0.85, (cls.__name__, acc)
        assert acc[100.0] >= acc[0.01] + 0.3, (cls.__name__, acc)


# --------------------------------------------------------------------------------------
# estimators: noise and accounting
# --------------------------------------------------------------------------------------


def test_weight_noise_is_laplace_with_the_stated_scale(iris_split):
    Xtr, _, ytr, _ = iris_split
    F, cap, eps, tol = 2000, 0.05, 2.0, 1e-6
    exact = PrivateSVMWeight(cap, 1.0, F, None, random_state=7, tol=tol).fit(Xtr, ytr)
    # seeded noise: a distribution test on fresh entropy fails one run in 1000 (it did, in CI)
    with pytest.warns(PrivacyLeakWarning, match="noise_seed"):
        noisy = PrivateSVMWeight(cap, 1.0, F, eps, random_state=7, tol=tol, noise_seed=11).fit(Xtr, ytr)
    torch.testing.assert_close(noisy.features_.frequencies, exact.features_.frequencies)
    sens = 3 * math.sqrt(F) * (cap + 2 * math.sqrt(2 * tol))
    assert noisy.sensitivity_ == pytest.approx(sens, rel=1e-12)
    assert noisy.l2_sensitivity_ == pytest.approx(svm_sensitivity(cap, tol), rel=1e-12)
    noise = (noisy.weights_ - exact.weights_).flatten().numpy()
    scale = sens / eps
    # mean absolute deviation of Lap(b) is b; 6000 draws: relative sd 1.3%
    assert np.abs(noise).mean() == pytest.approx(scale, rel=0.05)
    assert stats.kstest(noise, stats.laplace(scale=scale).cdf).pvalue > 1e-3


def test_weight_ledger_records_one_release():
    Xtr, _, ytr, _ = _split(load_iris, 1)
    model = PrivateSVMWeight(0.05, 1.0, 100, 0.7, random_state=0).fit(Xtr, ytr)
    (event,) = model.ledger_.events
    assert event.name == "svm_weight" and event.kind == "pure" and event.epsilon == 0.7
    assert event.sensitivity == pytest.approx(model.sensitivity_)
    assert model.ledger_.get_epsilon(0.0) == pytest.approx(0.7)
    assert model.ledger_.get_epsilon() <= 0.7 + 1e-9
    # predictions are post-processing: no further spend
    model.predict(Xtr)
    model.decision_function(Xtr)
    assert len(model.ledger_.events) == 1
    # a given ledger is used, and its budget refuses the release before any noise
    ledger = PrivacyLedger(budget=(0.5, 1e-5))
    with pytest.raises(PrivacyBudgetExceededError):
        PrivateSVMWeight(0.05, 1.0, 100, 0.7, random_state=0, ledger=ledger).fit(Xtr, ytr)
    assert ledger.events == ()
    shared = PrivacyLedger()
    PrivateSVMWeight(0.05, 1.0, 100, 0.3, random_state=0, ledger=shared).fit(Xtr, ytr)
    PrivateSVMWeight(0.05, 1.0, 100, 0.3, random_state=1, ledger=shared).fit(Xtr, ytr)
    assert shared.get_epsilon(0.0) == pytest.approx(0.6)
    # non-private: inf behaves like None
    assert PrivateSVMWeight(0.05, 1.0, 100, math.inf).fit(Xtr, ytr).ledger_.events == ()


def test_private_baselines_take_a_public_label_set():
    """classes= fixes the one-vs-all classifiers whatever labels occur; a private fit
    without it reads them from y and warns."""
    Xtr, _, ytr, _ = _split(load_iris, 1)
    keep = ytr < 2
    for cls in (PrivateSVMWeight, PrivateSVMOutput):
        with warnings.catch_warnings():
            warnings.simplefilter("error", PrivacyLeakWarning)
            model = cls(0.05, 1.0, 100, 5.0, classes=[0, 1, 2], random_state=0).fit(Xtr[keep], ytr[keep])
            cls(0.05, 1.0, 100, None, random_state=0).fit(Xtr, ytr)  # non-private: y may say
        assert list(model.classes_) == [0, 1, 2] and model.decision_function(Xtr).shape == (len(Xtr), 3)
        with pytest.warns(PrivacyLeakWarning, match="classes=None"):
            cls(0.05, 1.0, 100, 5.0, random_state=0).fit(Xtr, ytr)


def test_output_noise_scale_and_ledger_grows_with_queries(iris_split):
    Xtr, Xte, ytr, _ = iris_split
    cap, eps, tol = 0.05, 0.5, 1e-6
    exact = PrivateSVMOutput(cap, 1.0, 400, None, random_state=3).fit(Xtr, ytr)
    with pytest.warns(PrivacyLeakWarning, match="noise_seed"):  # seeded: the KS test below is deterministic
        model = PrivateSVMOutput(cap, 1.0, 400, eps, random_state=3, noise_seed=11).fit(Xtr, ytr)
    assert not hasattr(model, "weights_")  # the model itself is never released
    assert model.ledger_.events == ()  # fitting releases nothing
    sens = 3 * (cap + 2 * math.sqrt(2 * tol))
    assert model.sensitivity_ == pytest.approx(sens, rel=1e-12)
    queries = np.repeat(Xte, 70, axis=0)  # 2100 points, 6300 scores
    noise = (model.decision_function(queries) - exact.decision_function(queries)).ravel()
    assert np.abs(noise).mean() == pytest.approx(sens / eps, rel=0.05)
    assert stats.kstest(noise, stats.laplace(scale=sens / eps).cdf).pvalue > 1e-3
    (event,) = model.ledger_.events
    assert event.name == "svm_output_queries" and event.count == len(queries) and event.epsilon == eps
    assert model.ledger_.get_epsilon(0.0) == pytest.approx(eps * len(queries))
    model.predict(Xte[:5])
    assert model.ledger_.get_epsilon(0.0) == pytest.approx(eps * (len(queries) + 5))
    # fresh noise for every answer
    a, b = model.decision_function(Xte[:3]), model.decision_function(Xte[:3])
    assert not np.allclose(a, b)
    # separate ledgers per estimator, and a budget stops the queries before noise
    other = PrivateSVMOutput(cap, 1.0, 400, eps, random_state=3).fit(Xtr, ytr)
    assert other.ledger_ is not model.ledger_ and other.ledger_.events == ()
    ledger = PrivacyLedger(budget=(2.0, 1e-5))
    limited = PrivateSVMOutput(cap, 1.0, 400, eps, random_state=3, ledger=ledger).fit(Xtr, ytr)
    limited.decision_function(Xte[:2])
    with pytest.raises(PrivacyBudgetExceededError):
        limited.decision_function(Xte[:10])
    assert ledger.get_epsilon(0.0) == pytest.approx(2 * eps)


def test_reproducible_clone_and_pickle(iris_split):
    """random_state fixes the feature map only; the noise is fresh unless noise_seed opts in."""
    Xtr, Xte, ytr, _ = iris_split
    fresh = PrivateSVMWeight(0.05, 1.0, 200, 1.0, classes=[0, 1, 2], random_state=5).fit(Xtr, ytr)
    again = clone(fresh).fit(Xtr, ytr)
    torch.testing.assert_close(fresh.features_.frequencies, again.features_.frequencies)
    assert not torch.allclose(fresh.weights_, again.weights_)
    assert fresh.ledger_.summary()["noise"] == "fresh"
    with pytest.warns(PrivacyLeakWarning, match="noise_seed"):
        a = PrivateSVMWeight(0.05, 1.0, 200, 1.0, classes=[0, 1, 2], random_state=5, noise_seed=9).fit(Xtr, ytr)
        b = clone(a).fit(Xtr, ytr)
    torch.testing.assert_close(a.weights_, b.weights_)
    assert a.ledger_.summary()["noise"] == "reproducible"
    with pytest.warns(PrivacyLeakWarning, match="noise_seed"):
        out = PrivateSVMOutput(0.05, 1.0, 200, 1.0, classes=[0, 1, 2], random_state=5, noise_seed=9).fit(Xtr, ytr)
    copy = pickle.loads(pickle.dumps(out))
    np.testing.assert_allclose(copy.decision_function(Xte), out.decision_function(Xte))
    assert out.ledger_.summary()["noise"] == "reproducible"
    fresh_out = PrivateSVMOutput(0.05, 1.0, 200, 1.0, classes=[0, 1, 2], random_state=5).fit(Xtr, ytr)
    copy = pickle.loads(pickle.dumps(fresh_out))
    assert not np.allclose(copy.decision_function(Xte), fresh_out.decision_function(Xte))
    assert fresh_out.ledger_.summary()["noise"] == "fresh"
    # torch inputs and float32 work too
    c = PrivateSVMWeight(0.05, 1.0, 200, None, random_state=5, dtype=torch.float32)
    c.fit(torch.as_tensor(Xtr), torch.as_tensor(ytr))
    assert c.weights_.dtype == torch.float32 and c.predict(torch.as_tensor(Xte)).shape == (len(Xte),)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu(iris_split):
    Xtr, Xte, ytr, _ = iris_split
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)  # noise_seed: the same noise on both
        cpu = PrivateSVMWeight(0.05, 1.0, 400, 1.0, random_state=2, noise_seed=2).fit(Xtr, ytr)
        gpu = PrivateSVMWeight(0.05, 1.0, 400, 1.0, random_state=2, noise_seed=2, device="cuda").fit(Xtr, ytr)
    assert gpu.weights_.device.type == "cuda"
    torch.testing.assert_close(gpu.weights_.cpu(), cpu.weights_, atol=1e-6, rtol=0)
    np.testing.assert_array_equal(gpu.predict(Xte), cpu.predict(Xte))


# --------------------------------------------------------------------------------------
# estimators: errors
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [PrivateSVMWeight, PrivateSVMOutput])
@pytest.mark.parametrize(
    "params, match",
    [
        ({"c_over_n": 0.0}, "c_over_n"),
        ({"c_over_n": 1.5}, "c_over_n"),
        ({"gamma": 0.0}, "gamma"),
        ({"gamma": -1.0}, "gamma"),
        ({"num_features": 3}, "num_features"),
        ({"num_features": 0}, "num_features"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"tol": 0.0}, "tol"),
    ],
)
def test_bad_parameters(cls, params, match):
    X, y = np.random.default_rng(0).normal(size=(10, 2)), np.arange(10) % 2
    with pytest.raises(ValueError, match=match):
        cls(**params).fit(X, y)


@pytest.mark.parametrize("cls", [PrivateSVMWeight, PrivateSVMOutput])
def test_bad_data(cls):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(10, 2)), np.arange(10) % 2
    with pytest.raises(ValueError, match="2-D"):
        cls().fit(X[:, 0], y)
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        cls().fit(bad, y)
    with pytest.raises(ValueError, match="different lengths"):
        cls().fit(X, y[:-1])
    with pytest.raises(ValueError, match="at least 2 classes"):
        cls().fit(X, np.zeros(10))
    with pytest.raises(NotFittedError):
        cls().predict(X)
    model = cls(epsilon=None).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        model.predict(rng.normal(size=(3, 5)))
    with pytest.raises(RuntimeError, match="did not reach"):
        cls(c_over_n=1.0, gamma=0.1, tol=1e-14, max_iter=1, epsilon=None).fit(X, y)
    # a private fit runs the solver until the gap reaches tol whatever max_iter says (the
    # sensitivity assumes it; a cap one record could make the solver hit would void it):
    # no error, and the gap and iteration count stay curator-only
    with pytest.raises(RuntimeError, match="did not reach"):
        cls(c_over_n=1.0, gamma=0.1, tol=1e-8, max_iter=1, epsilon=None).fit(X, y)
    private = cls(c_over_n=1.0, gamma=0.1, tol=1e-8, max_iter=1, classes=[0, 1]).fit(X, y)
    assert private.curator_["solver_gap"] <= 1e-8 and private.curator_["solver_iterations"] > 1
    with pytest.raises(ValueError, match="tol >= 1e-08"):
        cls(tol=1e-9, classes=[0, 1]).fit(X, y)
    with pytest.raises(ValueError, match="noise_seed"):
        cls(noise_seed=-1).fit(X, y)
