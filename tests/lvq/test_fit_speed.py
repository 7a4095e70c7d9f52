"""The fast-fitting pieces of the LVQ estimators: the relative-cost stopping rule,
one-iteration L-BFGS steps, float32 training, warm starts and the fit callback."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits, load_iris
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from dp_proto.lvq import GLVQ, GMLVQ, LGMLVQ
from dp_proto.lvq.training import DEFAULT_N_ITER_NO_CHANGE, DEFAULT_TOL, minimize_lbfgs, settled

f64 = torch.float64


def _quadratic(n: int = 50, condition: float = 100.0):
    """``f(x) = (x - x*)^T A (x - x*) / 2`` with known minimiser ``x*`` and ``f* = 0``."""
    g = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=f64))
    a = q @ torch.diag(torch.logspace(0, np.log10(condition), n, dtype=f64)) @ q.T
    optimum = torch.randn(n, generator=g, dtype=f64)
    x = torch.zeros(n, dtype=f64, requires_grad=True)
    return x, optimum, lambda: 0.5 * (x - optimum) @ a @ (x - optimum)


# ------------------------------------------------------------------ the rule itself
def test_settled_compares_the_last_window_with_the_decrease_so_far():
    costs = [1.0, 0.5, 0.3, 0.2, 0.19, 0.189]
    assert not settled(costs, tol=0.1, window=10)  # fewer iterations than the window
    # the last 2 iterations removed 0.011 of the 0.811 gained: 1.4 %
    assert settled(costs, tol=0.02, window=2)
    assert not settled(costs, tol=0.01, window=2)
    assert settled([3 * c for c in costs], tol=0.02, window=2)  # the scale does not matter
    assert settled([2.0, 2.0, 2.0], tol=0.0, window=2)  # no progress at all
    # a warm start near an optimum: small gains relative to the cost itself
    assert settled([-0.9, -0.9004, -0.9006], tol=1e-3, window=2)
    assert not settled([-0.9, -0.92, -0.94], tol=1e-3, window=2)


def test_relative_rule_stops_early_near_a_known_optimum():
    """A 50-dimensional quadratic with condition number 100: the rule ends within 30
    iterations (torch's tests with tol 1e-9 need 60) with the cost within the default
    tol of the total decrease of its optimum."""
    x, _, cost = _quadratic()
    start = float(cost().detach())
    n_iter, losses = minimize_lbfgs([x], cost, max_iter=500, stopping="relative_cost")
    assert DEFAULT_N_ITER_NO_CHANGE <= n_iter <= 30  # at least the window, far below max_iter
    assert float(cost().detach()) <= DEFAULT_TOL["relative_cost"] * start
    x_legacy, optimum, cost_legacy = _quadratic()
    legacy_iter, _ = minimize_lbfgs([x_legacy], cost_legacy, max_iter=500, stopping="lbfgs")
    assert legacy_iter > 2 * n_iter
    torch.testing.assert_close(x_legacy.detach(), optimum, atol=1e-4, rtol=0)


def test_lbfgs_rule_takes_the_same_steps_as_torch_in_one_call():
    """One iteration per ``step`` (with the evaluation cache) follows torch's L-BFGS run
    in one ``step`` exactly: the same iterates, iterations and evaluations."""
    x, _, cost = _quadratic()
    optimizer = torch.optim.LBFGS(
        [x],
        max_iter=500,
        max_eval=626,
        tolerance_grad=1e-9,
        tolerance_change=1e-9,
        history_size=20,
        line_search_fn="strong_wolfe",
    )
    evaluations = []

    def closure():
        optimizer.zero_grad()
        value = cost()
        value.backward()
        evaluations.append(float(value.detach()))
        return value

    optimizer.step(closure)
    ours, _, our_cost = _quadratic()
    n_iter, losses = minimize_lbfgs([ours], our_cost, max_iter=500, tol=1e-9, stopping="lbfgs")
    assert n_iter == optimizer.state[x]["n_iter"]
    assert losses == evaluations
    assert torch.equal(ours.detach(), x.detach())


def test_callback_sees_every_iteration_and_can_stop():
    x, _, cost = _quadratic()
    seen = []
    n_iter, _ = minimize_lbfgs([x], cost, max_iter=500, callback=lambda k, f: seen.append((k, f)) or k == 5)
    assert n_iter == 5 and [k for k, _ in seen] == [1, 2, 3, 4, 5]
    assert all(a[1] >= b[1] for a, b in zip(seen, seen[1:], strict=False))  # monotone: line search


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"stopping": "gradient"}, "stopping must be one of"),
        ({"tol": -1.0}, "tol must be >= 0"),
        ({"n_iter_no_change": 0}, "n_iter_no_change must be a positive integer"),
    ],
)
def test_bad_stopping_settings(kwargs, message):
    x, _, cost = _quadratic(5)
    with pytest.raises(ValueError, match=message):
        minimize_lbfgs([x], cost, max_iter=10, **kwargs)
    X, y = load_iris(return_X_y=True)
    with pytest.raises(ValueError, match=message):
        GMLVQ(**kwargs).fit(X, y)


# ------------------------------------------------------------------ estimators
@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    a, b, ya, yb = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
    scaler = StandardScaler().fit(a)
    return scaler.transform(a), scaler.transform(b), ya, yb


@pytest.mark.parametrize("cls", [GLVQ, GMLVQ, LGMLVQ])
def test_float32_and_float64_fits_agree_in_accuracy(cls, digits):
    a, b, ya, yb = digits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        single = cls(random_state=0, dtype="float32").fit(a, ya)
        double = cls(random_state=0, dtype="float64").fit(a, ya)
    assert single.model_.layer.prototypes.dtype == torch.float32
    assert single.prototypes_.dtype == np.float64  # fitted attributes: float64 either way
    assert abs(single.score(b, yb) - double.score(b, yb)) <= 0.01
    assert single.score(b, yb) > 0.9


@pytest.mark.parametrize("cls", [GLVQ, GMLVQ])
def test_relative_rule_keeps_the_accuracy_of_the_old_rule(cls, digits):
    a, b, ya, yb = digits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = cls(random_state=0).fit(a, ya)
        slow = cls(random_state=0, stopping="lbfgs", dtype="float64").fit(a, ya)
    assert fast.n_iter_ < slow.n_iter_
    assert fast.score(b, yb) >= slow.score(b, yb) - 0.01


def test_predictions_do_not_depend_on_the_sample_order(digits):
    """float32 training, float64 prediction: the outputs of a permuted batch are the
    permuted outputs, to float64 rounding."""
    a, b, ya, _ = digits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 30 iterations: enough for this check
        est = LGMLVQ(random_state=0, max_iter=30).fit(a, ya)
    order = np.random.default_rng(0).permutation(len(b))
    np.testing.assert_allclose(est.decision_function(b)[order], est.decision_function(b[order]), rtol=1e-12)


def test_warm_start_from_the_optimum_stays_there(digits):
    a, b, ya, yb = digits
    cold = GMLVQ(random_state=0, dtype="float64").fit(a, ya)
    warm = GMLVQ(random_state=0, dtype="float64", warm_start=True).fit(a, ya)
    loss, n_iter = warm.loss_, warm.n_iter_
    warm.fit(a, ya)  # starts at the first fit's optimum
    assert warm.n_iter_ < n_iter / 2
    assert warm.loss_ == pytest.approx(loss, abs=1e-3)
    assert warm.loss_ == pytest.approx(cold.loss_, abs=1e-3)
    assert np.mean(warm.predict(b) == cold.predict(b)) >= 0.99


def test_warm_start_from_another_fold_reaches_the_cold_optimum(digits):
    """A fit warm-started at another subset's solution ends at the cost and accuracy of
    the cold start on this subset, in fewer iterations."""
    a, b, ya, yb = digits
    half = len(a) // 2
    cold = GMLVQ(random_state=0, dtype="float64").fit(a, ya)
    warm = GMLVQ(random_state=0, dtype="float64", warm_start=True).fit(a[:half], ya[:half])
    warm.fit(a, ya)
    assert warm.loss_ == pytest.approx(cold.loss_, abs=5e-3)
    assert abs(warm.score(b, yb) - cold.score(b, yb)) <= 0.01
    assert warm.n_iter_ < cold.n_iter_


def test_warm_start_falls_back_to_a_cold_start_when_the_model_does_not_fit():
    """Other classes (or features, or prototype counts) than the previous fit: the fit
    starts at the class means, exactly as a cold start."""
    X, y = load_iris(return_X_y=True)
    est = GMLVQ(random_state=0, warm_start=True).fit(X[y < 2], y[y < 2])
    est.fit(X, y)
    cold = GMLVQ(random_state=0).fit(X, y)
    np.testing.assert_array_equal(est.prototypes_, cold.prototypes_)
    assert est.n_iter_ == cold.n_iter_
    est.set_params(prototypes_per_class=2).fit(X, y)  # a new prototype count: cold again
    np.testing.assert_array_equal(est.prototypes_, GMLVQ(2, random_state=0).fit(X, y).prototypes_)


def test_estimator_callback_can_score_mid_fit_and_stop():
    X, y = load_iris(return_X_y=True)
    est = GMLVQ(random_state=0)
    scores = []

    def record(n_iter, cost):
        scores.append(est.score(X, y))
        return n_iter == 3

    est.fit(X, y, callback=record)
    assert est.n_iter_ == 3 and len(scores) == 3
    with pytest.raises(ValueError, match="callback needs solver='lbfgs'"):
        GMLVQ(solver="adam").fit(X, y, callback=record)


def test_private_estimators_take_no_callback():
    from dp_proto.lvq.private import DPGLVQ

    X, y = load_iris(return_X_y=True)
    with pytest.raises(ValueError, match="takes no callback"):
        DPGLVQ(epochs=1, bounds=(0, 8), classes=[0, 1, 2]).fit(X, y, callback=lambda n_iter, cost: None)
