"""Mechanisms: calibration of the noise they add, what they record, bad input."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from dp_proto.exceptions import PrivacyBudgetExceededError
from dp_proto.privacy import (
    PrivacyLedger,
    clip_box,
    clip_l2,
    gaussian_mechanism,
    laplace_mechanism,
    noisy_count,
    noisy_histogram,
    noisy_majority_vote,
    report_noisy_max,
)

ALPHA = 1e-4


def test_laplace_mechanism_noise_scale_and_event():
    ledger = PrivacyLedger()
    value = torch.zeros(40_000, dtype=torch.float64)
    out = laplace_mechanism(value, 3.0, 1.5, ledger=ledger, generator=torch.Generator().manual_seed(0),
                            name="vec")
    assert stats.kstest(out.numpy(), stats.laplace(scale=2.0).cdf).pvalue > ALPHA
    (event,) = ledger.events
    assert event.kind == "pure" and event.epsilon == 1.5 and event.sensitivity == 3.0
    assert ledger.get_epsilon(0.0) == pytest.approx(1.5)


def test_histogram_is_single_coordinate_laplace():
    ledger = PrivacyLedger()
    labels = torch.tensor([0, 1, 1, 2, 2, 2])
    out = noisy_histogram(labels, 4, 2.0, ledger=ledger, generator=torch.Generator().manual_seed(0))
    assert out.shape == (4,)
    (event,) = ledger.events
    assert event.kind == "laplace" and event.noise_multiplier == pytest.approx(0.5)
    assert ledger.get_epsilon(0.0) == pytest.approx(2.0)
    # many repetitions: mean of the noisy histogram is the true histogram
    reps = torch.stack([noisy_histogram(labels, 4, 2.0, generator=torch.Generator().manual_seed(s))
                        for s in range(2000)])
    np.testing.assert_allclose(reps.mean(0).numpy(), [1, 2, 3, 0], atol=0.06)
    with pytest.raises(ValueError, match=r"labels must lie in 0..3"):
        noisy_histogram(torch.tensor([0, 4]), 4, 1.0)


def test_discrete_counts_are_not_over_noised():
    """Counts already lie on the unit grid: discrete Laplace with scale 1/epsilon, whose
    variance is 2 e^{-1/b} / (1 - e^{-1/b})^2 for b = 1/epsilon."""
    eps = 1.0
    out = torch.stack([noisy_histogram(torch.zeros(0, dtype=torch.long), 1, eps, discrete=True,
                                       generator=torch.Generator().manual_seed(s)) for s in range(4000)])
    q = math.exp(-eps)
    assert out.var().item() == pytest.approx(2 * q / (1 - q) ** 2, rel=0.1)
    with pytest.raises(ValueError, match="off the grid"):
        laplace_mechanism(torch.tensor([0.5]), 1.0, 1.0, grid=1.0, value_on_grid=True)


def test_numpy_and_tensor_scalars_are_accepted():
    out = laplace_mechanism(torch.zeros(2), np.float32(1.0), torch.tensor(0.5))
    assert out.shape == (2,)
    with pytest.raises(ValueError, match="real number"):
        laplace_mechanism(torch.zeros(2), 1.0, "1.0")


def test_discrete_histogram_outputs_integers():
    out = noisy_histogram(torch.tensor([0, 1, 1]), 3, 1.0, discrete=True, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, out.round())
    snapped = laplace_mechanism(torch.tensor([0.26, 1.0]), 1.0, 1.0, grid=0.5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(snapped * 2, (snapped * 2).round())


def test_noisy_count():
    ledger = PrivacyLedger()
    values = [noisy_count(100, 1.0, generator=torch.Generator().manual_seed(s)) for s in range(3000)]
    assert abs(np.mean(values) - 100) < 0.1
    assert np.var(values) == pytest.approx(2.0, rel=0.1)  # Var Lap(1) = 2
    noisy_count(5, 0.5, ledger=ledger)
    assert ledger.get_epsilon(0.0) == pytest.approx(0.5)


def test_gaussian_mechanism_sigma_and_event():
    ledger = PrivacyLedger()
    out = gaussian_mechanism(torch.zeros(40_000), 2.0, 1.0, 1e-5, ledger=ledger,
                             generator=torch.Generator().manual_seed(1))
    sigma = 3.7306316 * 2.0
    assert stats.kstest(out.double().numpy(), stats.norm(scale=sigma).cdf).pvalue > ALPHA
    (event,) = ledger.events
    assert event.kind == "gaussian" and event.noise_multiplier == pytest.approx(3.7306316, rel=1e-5)
    assert ledger.get_epsilon(1e-5) == pytest.approx(1.0, rel=2e-3)  # the PLD agrees with the calibration
    classic = gaussian_mechanism(torch.zeros(3), 1.0, 0.5, 1e-5, calibration="classic", ledger=PrivacyLedger())
    assert classic.shape == (3,)
    with pytest.raises(ValueError, match="epsilon < 1"):
        gaussian_mechanism(torch.zeros(3), 1.0, 2.0, 1e-5, calibration="classic")


def test_report_noisy_max_and_majority_vote():
    counts = torch.tensor([[10.0, 50.0, 5.0], [30.0, 0.0, 1.0]])
    picks = report_noisy_max(counts, 2.0, generator=torch.Generator().manual_seed(0))
    assert picks.tolist() == [1, 0]
    votes = torch.tensor([2] * 40 + [0] * 5)
    ledger = PrivacyLedger()
    assert noisy_majority_vote(votes, 3, 1.0, ledger=ledger, generator=torch.Generator().manual_seed(0)) == 2
    assert ledger.events[0].kind == "pure" and ledger.get_epsilon(0.0) == 1.0
    # with tiny epsilon the winner is close to uniform among tied counts
    wins = [report_noisy_max(torch.tensor([3.0, 3.0]), 1.0, generator=torch.Generator().manual_seed(s)).item()
            for s in range(2000)]
    assert 0.45 < np.mean(wins) < 0.55


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: laplace_mechanism(torch.tensor([1.0, float("nan")]), 1.0, 1.0), "NaN or inf"),
        (lambda: laplace_mechanism(torch.zeros(2), 1.0, 0.0), "epsilon"),
        (lambda: laplace_mechanism(torch.zeros(2), -1.0, 1.0), "sensitivity"),
        (lambda: gaussian_mechanism(torch.zeros(2), 1.0, 1.0, 1.0), "delta"),
        (lambda: gaussian_mechanism(torch.zeros(2), 1.0, 1.0, -1e-5), "delta"),
        (lambda: gaussian_mechanism(torch.tensor([float("inf")]), 1.0, 1.0, 1e-5), "NaN or inf"),
        (lambda: gaussian_mechanism(torch.zeros(2), 1.0, 1.0, 1e-5, calibration="magic"), "calibration"),
        (lambda: laplace_mechanism(torch.zeros(2), 1.0, 1.0, grid=0.0), "grid"),
    ],
)
def test_bad_parameters(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_refusal_happens_before_noise_is_drawn():
    ledger = PrivacyLedger(budget=(1.0, 1e-5))
    gen = torch.Generator().manual_seed(0)
    laplace_mechanism(torch.zeros(1), 1.0, 0.8, ledger=ledger, generator=gen, single_coordinate=True)
    state = gen.get_state()
    with pytest.raises(PrivacyBudgetExceededError, match="above the budget 1"):
        laplace_mechanism(torch.zeros(1), 1.0, 0.5, ledger=ledger, generator=gen, name="second")
    assert torch.equal(gen.get_state(), state)  # no randomness consumed
    assert len(ledger.events) == 1


def test_clipping_counts():
    x = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    out, n = clip_l2(x, 1.0)
    assert n == 1 and torch.allclose(out[0].norm(), torch.tensor(1.0)) and torch.equal(out[1:], x[1:])
    box, n = clip_box(torch.tensor([[0.5, -2.0], [0.1, 0.2], [1.5, 1.5]]))
    assert n == 2 and box.abs().max() <= 1
    with pytest.raises(ValueError, match="NaN"):
        clip_box(torch.tensor([[math.nan]]))
    with pytest.raises(ValueError, match="max_norm"):
        clip_l2(x, 0.0)
