"""Membership inference (LiRA): random halves, the ROC, the attack's power on models
that memorise and its chance level on models that do not, and the DP bound."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.datasets import load_iris, make_classification
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression

from dp_proto.lvq import GLVQ
from dp_proto.lvq.private import DPGLVQ
from dp_proto.privacy import (
    dp_tpr_bound,
    lira_attack,
    membership_inference,
    one_run_audit,
    one_run_epsilon,
    true_class_score,
)
from dp_proto.privacy.membership import one_run_p_value, random_membership, roc_curve


def test_every_record_trains_each_model_by_a_fair_coin():
    m = random_membership(8, 5000, np.random.default_rng(0))
    assert m.shape == (8, 5000) and 0.48 < m.mean() < 0.52 and not (m[0] == m[1]).all()
    with pytest.raises(ValueError, match=">= 2"):
        random_membership(1, 10, np.random.default_rng(0))


def test_the_roc_counts_ties_once_and_spans_the_square():
    fpr, tpr = roc_curve(np.array([3.0, 2.0, 2.0, 1.0]), np.array([True, True, False, False]))
    np.testing.assert_allclose(fpr, [0.0, 0.0, 0.5, 1.0])
    np.testing.assert_allclose(tpr, [0.0, 0.5, 1.0, 1.0])
    with pytest.raises(ValueError, match="members and non-members"):
        roc_curve(np.ones(3), np.ones(3, dtype=bool))


def _synthetic(shift: float, n_models: int = 16, n: int = 4000, seed: int = 0):
    """Statistics with a per-record offset, members ``shift`` higher, unit noise."""
    rng = np.random.default_rng(seed)
    membership = random_membership(n_models, n, rng)
    offset = rng.normal(0.0, 3.0, n)  # records differ far more than the models
    statistics = offset + shift * membership + rng.normal(0.0, 1.0, (n_models, n))
    return statistics, membership


def test_lira_finds_members_that_score_higher_and_nothing_when_they_do_not():
    statistics, membership = _synthetic(shift=3.0)
    _, _, tpr_at, auc, accuracy = lira_attack(statistics, membership, fprs=(0.01,))
    # the per-record offset is what the shadows remove: for N(3, 1) against N(0, 1),
    # TPR at 1 % FPR is Phi(3 - 2.326) = 0.75
    assert 0.65 < tpr_at[0.01] < 0.85 and auc > 0.95 and accuracy > 0.9
    statistics, membership = _synthetic(shift=0.0)
    fpr, tpr, tpr_at, auc, _ = lira_attack(statistics, membership, fprs=(0.01, 0.1))
    assert abs(auc - 0.5) < 0.02 and tpr_at[0.1] < 0.13 and tpr_at[0.01] < 0.02
    offline = lira_attack(statistics, membership, online=False, fprs=(0.1,))[2]
    assert offline[0.1] < 0.13
    # few models: with exactly M / 2 models per record the shadows held one member fewer
    # whenever the target held the record, and the online attack fell to AUC 0.425 at M = 4
    statistics, membership = _synthetic(shift=0.0, n_models=4, n=20000)
    assert abs(lira_attack(statistics, membership)[3] - 0.5) < 0.01


def test_the_attack_runs_on_estimators_and_separates_memorising_from_not():
    # 30 % flipped labels: a forest memorises its records' (noisy) labels, a strongly
    # regularised linear model does not
    X, y = make_classification(300, 10, n_informative=5, flip_y=0.3, random_state=0)
    forest = membership_inference(lambda m: RandomForestClassifier(30, random_state=m), X, y, n_models=8)
    assert forest.n_models == 8 and forest.n_records == 300 and forest.statistics.shape == (8, 300)
    assert forest.auc > 0.65 and forest.tpr_at[0.1] > 0.3
    linear = membership_inference(lambda m: LogisticRegression(C=0.01), X, y, n_models=8)
    assert abs(linear.auc - 0.5) < 0.05 and linear.tpr_at[0.1] < 0.15
    calls = []
    membership_inference(
        lambda m: GLVQ(random_state=m), X, y, n_models=2, progress=lambda done, total: calls.append((done, total))
    )
    assert calls == [(1, 2), (2, 2)]


def test_a_private_fit_stays_under_the_dp_bound():
    X, y = load_iris(return_X_y=True)
    result = membership_inference(
        lambda m: DPGLVQ(epsilon=1.0, bounds=(0, 8), classes=[0, 1, 2], sampling_rate=0.2, epochs=2, noise_seed=m),
        X,
        y,
        n_models=4,
        fprs=(0.1,),
    )
    # 300 pairs: the empirical TPR at FPR 0.1 is within sampling error of the bound's 0.27
    assert result.tpr_at[0.1] <= dp_tpr_bound(1.0, 1e-5, 0.1) + 0.1


def test_the_statistic_is_the_true_class_logit_or_margin():
    X, y = load_iris(return_X_y=True)
    logreg = LogisticRegression(max_iter=500).fit(X, y)
    p = logreg.predict_proba(X)[np.arange(150), y]
    np.testing.assert_allclose(true_class_score(logreg, X, y), np.log(p) - np.log1p(-p))
    glvq = GLVQ(random_state=0).fit(X, y)
    margin = true_class_score(glvq, X, y)
    assert ((margin > 0) == (glvq.predict(X) == y)).all()
    two = GLVQ(random_state=0).fit(X[y < 2], y[y < 2])
    assert (true_class_score(two, X[y < 2], y[y < 2]) > 0).mean() > 0.9


def test_the_dp_bound():
    assert dp_tpr_bound(1.0, 0.0, 0.01) == pytest.approx(math.e * 0.01)
    assert dp_tpr_bound(0.0, 0.0, 0.3) == pytest.approx(0.3)
    assert dp_tpr_bound(8.0, 1e-5, 0.5) == pytest.approx(1.0 - math.exp(-8.0) * (0.5 - 1e-5))


def test_the_one_run_bound_holds_for_randomized_response_and_has_power():
    """Randomized response on the inclusion bits is exactly epsilon-DP per canary: the
    95 % lower bound may exceed epsilon in about 5 % of runs, and should come close."""
    rng = np.random.default_rng(0)
    epsilon, canaries = 1.0, 2000
    q = 1.0 / (1.0 + math.exp(-epsilon))
    bounds = [one_run_epsilon(canaries, canaries, int(rng.binomial(canaries, q))) for _ in range(200)]
    assert np.mean(np.array(bounds) > epsilon) < 0.1
    assert np.median(bounds) > 0.8
    # fewer right guesses, or a delta to spend, give a smaller bound
    assert one_run_epsilon(100, 100, 90) > one_run_epsilon(100, 100, 80) > 0
    assert one_run_epsilon(100, 100, 90, delta=1e-3) < one_run_epsilon(100, 100, 90)
    assert one_run_epsilon(100, 100, 50) == 0.0
    assert one_run_p_value(100, 10, 10, 0.0, 0.0) == pytest.approx(0.5**10)


def test_one_run_audit_finds_a_memorising_model_and_not_a_private_one():
    X, y = make_classification(1000, 10, n_informative=5, flip_y=0.3, random_state=0)
    forest = one_run_audit(lambda: RandomForestClassifier(30, random_state=0), X, y, positive=50, negative=50, seed=0)
    assert forest.canaries == 1000 and forest.guesses == 100 and forest.included.mean() == pytest.approx(0.5, abs=0.05)
    assert forest.epsilon_lower > 0.5
    private = one_run_audit(
        lambda: DPGLVQ(epsilon=1.0, bounds=(-5, 5), classes=[0, 1], sampling_rate=0.1, epochs=2, noise_seed=0),
        X,
        y,
        positive=50,
        negative=50,
        delta=1e-5,
        seed=0,
    )
    assert private.epsilon_lower <= 1.0
    with pytest.raises(ValueError, match="guesses"):
        one_run_audit(lambda: RandomForestClassifier(2), X[:10], y[:10], positive=8, negative=8, seed=0)
