"""Losses of the adversarial anonymizer: hand-computed values, the random-guessing term,
the encoder objective, the empirical prior and the Fano misclassification bound."""

import math

import pytest
import torch

from dp_proto.anonymizer.losses import (
    anonymizer_objective,
    check_labels,
    empirical_prior,
    fano_function,
    misclassification_lower_bound,
    private_cross_entropy,
    random_guess_cross_entropy,
    regular_cross_entropy,
)

LOGITS = [[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]]
LABELS = [1, 2]
PRIOR = [0.2, 0.5, 0.3]


def _log_softmax_by_hand(row):
    norm = math.log(sum(math.exp(v) for v in row))
    return [v - norm for v in row]


def _entropy(p):
    return -sum(pk * math.log(pk) for pk in p if pk > 0)


def _binary_entropy(p):
    return _entropy([p, 1 - p])


# --------------------------------------------------------------------------- cross-entropies
@pytest.mark.parametrize("loss", [regular_cross_entropy, private_cross_entropy])
def test_cross_entropies_match_hand_computation(loss):
    expected = -sum(_log_softmax_by_hand(row)[label] for row, label in zip(LOGITS, LABELS, strict=True)) / 2
    value = loss(torch.tensor(LOGITS), torch.tensor(LABELS))
    assert value.shape == ()
    assert float(value) == pytest.approx(expected, rel=1e-6)


def test_random_guess_cross_entropy_matches_hand_computation():
    expected = sum(-sum(p * lq for p, lq in zip(PRIOR, _log_softmax_by_hand(row), strict=True)) for row in LOGITS) / 2
    value = random_guess_cross_entropy(torch.tensor(LOGITS), torch.tensor(PRIOR))
    assert float(value) == pytest.approx(expected, rel=1e-6)
    # a float64 prior is cast to the logits' dtype
    value64 = random_guess_cross_entropy(torch.tensor(LOGITS), torch.tensor(PRIOR, dtype=torch.float64))
    assert value64.dtype == torch.float32
    assert float(value64) == pytest.approx(expected, rel=1e-6)


def test_random_guess_cross_entropy_rejects_a_prior_of_the_wrong_length():
    with pytest.raises(ValueError, match="prior must have shape"):
        random_guess_cross_entropy(torch.tensor(LOGITS), torch.tensor([0.5, 0.5]))
    with pytest.raises(ValueError, match="prior must have shape"):
        random_guess_cross_entropy(torch.tensor(LOGITS), torch.tensor([PRIOR]))


def test_random_guess_term_is_the_prior_entropy_at_the_prior_and_minimal_there():
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    prior = torch.distributions.Dirichlet(torch.ones(5, dtype=torch.float64)).sample()
    at_prior = prior.log().expand(7, 5).clone()  # softmax(log p) == p on every row
    value = random_guess_cross_entropy(at_prior, prior)
    assert float(value) == pytest.approx(_entropy(prior.tolist()), abs=1e-12)
    # adding a constant per row does not change the predictions, hence not the value
    shifted = at_prior + torch.randn(7, 1, generator=g, dtype=torch.float64)
    assert float(random_guess_cross_entropy(shifted, prior)) == pytest.approx(float(value), abs=1e-12)
    # any other prediction is worse (Gibbs' inequality: the excess is the mean KL(p || q(x)))
    for scale in (1e-2, 0.1, 1.0, 5.0):
        for _ in range(5):
            perturbed = at_prior + scale * torch.randn(7, 5, generator=g, dtype=torch.float64)
            excess = float(random_guess_cross_entropy(perturbed, prior) - value)
            q = perturbed.softmax(-1)
            kl = float((prior * (prior.log() - q.log())).sum(-1).mean())
            assert excess > 0
            assert excess == pytest.approx(kl, rel=1e-9, abs=1e-15)
    # perturbing one row only already increases it
    one_row = at_prior.clone()
    one_row[3, 0] += 0.5
    assert float(random_guess_cross_entropy(one_row, prior)) > float(value)
    # the gradient with respect to the logits, softmax(logits) - p, vanishes at the prior
    logits = at_prior.clone().requires_grad_(True)
    random_guess_cross_entropy(logits, prior).backward()
    torch.testing.assert_close(logits.grad, torch.zeros_like(logits), atol=1e-12, rtol=0)


def test_private_and_random_terms_agree_when_predictions_and_batch_match_the_prior():
    """CE_private = -sum_k f_k log q_k and CE_random = -sum_k p_k log q_k for an
    input-independent prediction q, with f the batch's label frequencies: the two are
    equal (so |CE_private - CE_random| = 0) whenever f = p, for q = p (both = H(p)) and
    in fact for any constant q; with q = p but f != p they differ."""
    prior = torch.tensor([0.25, 0.5, 0.25], dtype=torch.float64)
    labels = torch.tensor([0, 1, 1, 2])  # frequencies == prior
    at_prior = prior.log().expand(4, 3)
    ce_private = private_cross_entropy(at_prior, labels)
    ce_random = random_guess_cross_entropy(at_prior, prior)
    assert float(ce_private) == pytest.approx(_entropy(prior.tolist()), abs=1e-12)
    assert float(ce_private - ce_random) == pytest.approx(0.0, abs=1e-12)
    # any constant prediction, the labels' frequencies still equal to the prior
    other = torch.tensor([2.0, -1.0, 0.3], dtype=torch.float64).expand(4, 3)
    gap = private_cross_entropy(other, labels) - random_guess_cross_entropy(other, prior)
    assert float(gap) == pytest.approx(0.0, abs=1e-12)
    # predictions equal to the prior, but a batch whose labels do not follow it
    skewed = torch.tensor([1, 1, 1, 1])
    assert float(private_cross_entropy(at_prior, skewed)) == pytest.approx(math.log(2), abs=1e-12)
    assert float(private_cross_entropy(at_prior, skewed) - ce_random) < -0.1


# --------------------------------------------------------------------------- objective
def test_objective_values_and_lambda():
    reg, priv, rand = torch.tensor(0.7), torch.tensor(1.1), torch.tensor(1.5)
    assert float(anonymizer_objective(reg, priv, rand, 2.0)) == pytest.approx(0.7 + 2 * 0.4)
    # symmetric in the sign of the gap
    assert float(anonymizer_objective(reg, rand, priv, 2.0)) == pytest.approx(0.7 + 2 * 0.4)
    assert float(anonymizer_objective(reg, priv, rand, 0.0)) == pytest.approx(0.7)
    assert float(anonymizer_objective(reg, priv, priv, 3.0)) == pytest.approx(0.7)
    with pytest.raises(ValueError, match="lambda"):
        anonymizer_objective(reg, priv, rand, -0.1)


def test_objective_with_lambda_zero_equals_regular_cross_entropy_and_its_gradient():
    torch.manual_seed(0)
    logits = torch.randn(6, 4, requires_grad=True)
    private_logits = torch.randn(6, 3, requires_grad=True)
    y, s = torch.tensor([0, 1, 2, 3, 0, 1]), torch.tensor([0, 1, 2, 0, 1, 2])
    ce_reg = regular_cross_entropy(logits, y)
    objective = anonymizer_objective(
        ce_reg,
        private_cross_entropy(private_logits, s),
        random_guess_cross_entropy(private_logits, torch.full((3,), 1 / 3)),
        0.0,
    )
    assert torch.equal(objective, ce_reg)
    objective.backward()
    assert private_logits.grad is None or torch.count_nonzero(private_logits.grad) == 0


def test_objective_pushes_the_private_term_towards_the_random_term():
    """d objective / d CE_private = lam * sign(CE_private - CE_random)."""
    for priv_value, sign in ((1.0, -1.0), (2.0, 1.0)):
        priv = torch.tensor(priv_value, requires_grad=True)
        rand = torch.tensor(1.5, requires_grad=True)
        anonymizer_objective(torch.tensor(0.3), priv, rand, 4.0).backward()
        assert float(priv.grad) == pytest.approx(4.0 * sign)
        assert float(rand.grad) == pytest.approx(-4.0 * sign)


# --------------------------------------------------------------------------- labels and prior
def test_empirical_prior_is_the_class_frequencies():
    prior = empirical_prior(torch.tensor([2, 0, 1, 2, 1, 2]), 3)
    assert prior.dtype == torch.float32
    torch.testing.assert_close(prior, torch.tensor([1 / 6, 2 / 6, 3 / 6]))
    assert float(prior.sum()) == pytest.approx(1.0)


def test_empirical_prior_rejects_a_class_without_training_records():
    with pytest.raises(ValueError, match=r"\[1, 3\].*no training records"):
        empirical_prior(torch.tensor([0, 2, 2, 0]), 4)
    with pytest.raises(ValueError, match="no training records"):
        empirical_prior(torch.tensor([], dtype=torch.long), 3)


def test_empirical_prior_rejects_a_single_private_class():
    with pytest.raises(ValueError, match="at least 2 classes"):
        empirical_prior(torch.tensor([0, 0, 0]), 1)
    with pytest.raises(ValueError, match="no training records"):  # 2 classes, one unseen
        empirical_prior(torch.tensor([0, 0, 0]), 2)


@pytest.mark.parametrize(
    "labels, match",
    [
        (torch.tensor([0, 1, 3]), r"lie in 0\.\.2"),
        (torch.tensor([0, -1, 2]), r"lie in 0\.\.2"),
        (torch.tensor([0.0, 1.0, 2.0]), "integer"),
        (torch.tensor([[0, 1, 2]]), "1-D"),
        (torch.tensor(1), "1-D"),
    ],
)
def test_empirical_prior_and_check_labels_reject_bad_labels(labels, match):
    with pytest.raises(ValueError, match=match):
        empirical_prior(labels, 3)
    with pytest.raises(ValueError, match=match):
        check_labels(labels, 3, "private")


def test_check_labels_accepts_valid_and_empty_labels():
    check_labels(torch.tensor([0, 2, 1]), 3, "regular")
    check_labels(torch.tensor([], dtype=torch.long), 3, "regular")
    with pytest.raises(ValueError, match="regular labels"):
        check_labels(torch.tensor([3]), 3, "regular")


# --------------------------------------------------------------------------- Fano bound
# phi is flat at its maximum (M-1)/M, so float64 rounding of phi limits how precisely
# the bisection can locate P_e near the top to about sqrt(eps) ~ 1e-8 (measured: up to
# 7.5e-9 below (M-1)/M for h = log M): the tolerance there is 1e-7.
TOP = 1e-7


@pytest.mark.parametrize("m", [2, 5, 15])
def test_bound_end_points(m):
    assert float(misclassification_lower_bound(0.0, m)) == pytest.approx(0.0, abs=1e-15)
    assert float(misclassification_lower_bound(math.log(m), m)) == pytest.approx((m - 1) / m, abs=TOP)
    # above log M (a cross-entropy can exceed it): clamped to random guessing
    assert float(misclassification_lower_bound(math.log(m) + 3.0, m)) == pytest.approx((m - 1) / m, abs=TOP)
    assert float(misclassification_lower_bound(float("inf"), m)) == pytest.approx((m - 1) / m, abs=TOP)
    assert float(fano_function(torch.tensor((m - 1) / m), m)) == pytest.approx(math.log(m), abs=1e-12)
    assert float(fano_function(torch.tensor(0.0), m)) == 0.0


@pytest.mark.parametrize("m", [2, 5, 15])
def test_bound_is_increasing_and_inverts_the_fano_function(m):
    h = torch.linspace(0.0, math.log(m), 41, dtype=torch.float64)
    bound = misclassification_lower_bound(h, m)
    assert bound.shape == h.shape and bound.dtype == torch.float64
    assert bool((bound[1:] > bound[:-1]).all())
    assert bool(((bound >= 0) & (bound <= (m - 1) / m + 1e-15)).all())
    # round trip: phi(bound) == h
    torch.testing.assert_close(fano_function(bound, m), h, atol=1e-10, rtol=0)
    # and bound(phi(p)) == p on [0, (M-1)/M]
    p = torch.linspace(0.0, (m - 1) / m, 17, dtype=torch.float64)
    torch.testing.assert_close(misclassification_lower_bound(fano_function(p, m), m), p, atol=TOP, rtol=0)
    torch.testing.assert_close(
        misclassification_lower_bound(fano_function(p[:-1], m), m), p[:-1], atol=1e-9, rtol=0
    )  # away from the flat top


def test_bound_at_a_hand_computed_point():
    p, m = 0.3, 5
    h = _binary_entropy(p) + p * math.log(m - 1)
    assert float(misclassification_lower_bound(h, m)) == pytest.approx(p, abs=1e-12)


def test_two_classes_give_the_inverse_binary_entropy():
    for h in (0.01, 0.1, 0.3, 0.5, 0.69):
        p = float(misclassification_lower_bound(h, 2))
        assert 0 <= p <= 0.5
        assert _binary_entropy(p) == pytest.approx(h, abs=1e-10)
    assert float(misclassification_lower_bound(math.log(2), 2)) == pytest.approx(0.5, abs=TOP)


def test_bound_is_vectorised_and_rejects_bad_input():
    h = torch.tensor([[0.0, 0.5], [1.0, 10.0]])
    bound = misclassification_lower_bound(h, 5)
    assert bound.shape == (2, 2)
    for i in range(2):
        for j in range(2):
            assert float(bound[i, j]) == pytest.approx(
                float(misclassification_lower_bound(float(h[i, j]), 5)), abs=1e-15
            )
    with pytest.raises(ValueError, match="negative"):
        misclassification_lower_bound(-0.1, 5)
    with pytest.raises(ValueError, match="negative"):
        misclassification_lower_bound(torch.tensor([0.2, -1e-3]), 5)
    with pytest.raises(ValueError, match="at least 2 classes"):
        misclassification_lower_bound(0.2, 1)


def test_bound_of_nan_is_not_silently_zero():
    try:
        bound = float(misclassification_lower_bound(float("nan"), 5))
    except ValueError:
        return
    assert math.isnan(bound)
