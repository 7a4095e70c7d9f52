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
from tests._stats import discrete_laplace_pvalue

ALPHA = 1e-4


def test_laplace_mechanism_noise_scale_and_event():
    ledger = PrivacyLedger()
    value = torch.zeros(40_000, dtype=torch.float64)
    out = laplace_mechanism(value, 3.0, 1.5, ledger=ledger, generator=torch.Generator().manual_seed(0), name="vec")
    assert stats.kstest(out.numpy(), stats.laplace(scale=2.0).cdf).pvalue > ALPHA
    (event,) = ledger.events
    assert event.kind == "pure" and event.epsilon == 1.5 and event.sensitivity == 3.0
    assert ledger.get_epsilon(0.0) == pytest.approx(1.5)


def test_histogram_is_single_coordinate_laplace():
    """The default histogram is float-safe: integer counts plus discrete Laplace noise
    ``P(k) ~ exp(-epsilon |k|)``, accounted with its exact loss distribution (one grid step)."""
    ledger = PrivacyLedger()
    labels = torch.tensor([0, 1, 1, 2, 2, 2])
    out = noisy_histogram(labels, 4, 2.0, ledger=ledger, generator=torch.Generator().manual_seed(0))
    assert out.shape == (4,) and out.dtype == torch.float64 and torch.equal(out, out.round())
    (event,) = ledger.events
    assert event.kind == "discrete_laplace" and event.epsilon == 2.0 and event.grid_steps == 1
    assert event.sensitivity == 1.0 and not hasattr(event, "noise_multiplier")
    assert ledger.get_epsilon(0.0) == pytest.approx(2.0)
    # many repetitions: mean of the noisy histogram is the true histogram
    reps = torch.stack(
        [noisy_histogram(labels, 4, 2.0, generator=torch.Generator().manual_seed(s), ledger=None) for s in range(2000)]
    )
    np.testing.assert_allclose(reps.mean(0).numpy(), [1, 2, 3, 0], atol=0.06)
    # and the 8000 noise values follow P(k) ~ exp(-2 |k|): chi-square, false failure probability
    # ALPHA; epsilon 2 / 1.5 is rejected
    noise = (reps - torch.tensor([1.0, 2.0, 3.0, 0.0])).reshape(-1).numpy()
    assert discrete_laplace_pvalue(noise, 2.0, kmax=2) > ALPHA
    assert discrete_laplace_pvalue(noise, 2.0 / 1.5, kmax=2) < 1e-6
    with pytest.raises(ValueError, match=r"labels must lie in 0..3"):
        noisy_histogram(torch.tensor([0, 4]), 4, 1.0, ledger=None)


@pytest.mark.parametrize("single_coordinate", [True, False])
def test_laplace_mechanism_default_grid_is_float_safe(single_coordinate):
    """grid="auto": the value is rounded to the public grid Delta / (1024 k) (k = 1 for a
    single coordinate, else value.numel()) and grid-multiples of discrete Laplace noise are
    added, so every output lies on the grid; the noise has the Laplace std sqrt(2) Delta / eps
    (0.1 % more). With n = 2^16 draws the sample std has a relative sd of sqrt(5 / n) / 2 =
    0.44 % (Laplace kurtosis 6), so the 5 % tolerance is > 11 sd: false failure probability
    below 1e-25 (normal approximation)."""
    n, delta, eps = 2**16, 2.0, 0.8
    k = 1 if single_coordinate else n
    grid = delta / (1024 * k)  # 2^-9 or 2^-25: a power of two, so the arithmetic below is exact
    gen = torch.Generator().manual_seed(5)
    m = torch.randint(-round(2 / grid), round(2 / grid), (n,), generator=gen, dtype=torch.float64)
    up = torch.randint(0, 2, (n,), generator=gen, dtype=torch.float64)
    value = (m + 0.25 + 0.5 * up) * grid  # 1/4 step above m or below m + 1: rounds to the nearest
    m = m + up  # the rounded value in grid steps
    ledger = PrivacyLedger()
    out = laplace_mechanism(
        value, delta, eps, ledger=ledger, generator=gen, name="auto", single_coordinate=single_coordinate
    )
    assert out.dtype == torch.float64 and out.shape == value.shape
    steps = out / grid - m  # the noise in grid steps
    assert torch.equal(steps, steps.round())  # on the grid
    (event,) = ledger.events
    if single_coordinate:
        assert event.kind == "discrete_laplace" and event.epsilon == eps and not hasattr(event, "noise_multiplier")
        assert event.grid_steps == 1024 + 1  # ceil(Delta / grid) + one step of rounding slack
    else:
        assert event.kind == "pure" and event.epsilon == eps and not hasattr(event, "grid_steps")
    assert event.sensitivity == delta and ledger.get_epsilon(0.0) == pytest.approx(eps, rel=1e-3)
    noise = (steps * grid).numpy()
    assert np.std(noise) == pytest.approx(math.sqrt(2) * delta / eps, rel=0.05)
    # the shape is Laplace's: the grid is 1/1025 of the scale, far below the KS resolution
    assert stats.kstest(noise, stats.laplace(scale=delta / eps).cdf).pvalue > ALPHA
    # rounding to the nearest grid point: with epsilon = 1e4 k the noise is 0 with probability
    # 1 - 2 e^-9.76 / (1 + e^-9.76) > 0.9998 (about 8 of 2^16 nonzero; floor or ceil would
    # miss half of the points; more than 80 nonzero has probability < 1e-40, Poisson)
    sharp = laplace_mechanism(value, delta, 1e4 * k, generator=gen, single_coordinate=single_coordinate, ledger=None)
    assert int((sharp / grid != m).sum()) <= 80
    # grid=None: the textbook continuous Laplace, off any grid, value not rounded
    ledger = PrivacyLedger()
    cont = laplace_mechanism(
        value, delta, eps, ledger=ledger, generator=gen, grid=None, single_coordinate=single_coordinate
    )
    (event,) = ledger.events
    if single_coordinate:
        assert event.kind == "laplace" and event.noise_multiplier == pytest.approx(1 / eps)
    else:
        assert event.kind == "pure" and event.epsilon == eps
    noise = (cont - value).numpy()
    assert stats.kstest(noise, stats.laplace(scale=delta / eps).cdf).pvalue > ALPHA
    # the offset from the auto grid is uniform in [0, 1) steps, not 0 as on the grid
    frac = (cont / grid) - torch.floor(cont / grid)
    assert stats.kstest(frac.numpy(), stats.uniform.cdf).pvalue > ALPHA


def test_discrete_counts_are_not_over_noised():
    """Counts already lie on the unit grid: discrete Laplace with scale 1/epsilon, whose
    variance is 2 e^{-1/b} / (1 - e^{-1/b})^2 for b = 1/epsilon."""
    eps = 1.0
    out = torch.stack(
        [
            noisy_histogram(
                torch.zeros(0, dtype=torch.long),
                1,
                eps,
                discrete=True,
                generator=torch.Generator().manual_seed(s),
                ledger=None,
            )
            for s in range(4000)
        ]
    )
    q = math.exp(-eps)
    assert out.var().item() == pytest.approx(2 * q / (1 - q) ** 2, rel=0.1)
    with pytest.raises(ValueError, match="off the grid"):
        laplace_mechanism(torch.tensor([0.5]), 1.0, 1.0, grid=1.0, value_on_grid=True, ledger=None)


def test_numpy_and_tensor_scalars_are_accepted():
    out = laplace_mechanism(torch.zeros(2), np.float32(1.0), torch.tensor(0.5), ledger=None)
    assert out.shape == (2,)
    with pytest.raises(ValueError, match="real number"):
        laplace_mechanism(torch.zeros(2), 1.0, "1.0", ledger=None)


def test_discrete_histogram_outputs_integers():
    out = noisy_histogram(
        torch.tensor([0, 1, 1]), 3, 1.0, discrete=True, generator=torch.Generator().manual_seed(0), ledger=None
    )
    assert torch.equal(out, out.round())
    snapped = laplace_mechanism(
        torch.tensor([0.26, 1.0]), 1.0, 1.0, grid=0.5, generator=torch.Generator().manual_seed(0), ledger=None
    )
    assert torch.equal(snapped * 2, (snapped * 2).round())


def test_noisy_count():
    """Default: integer count + discrete Laplace, Var = 2 q / (1 - q)^2 with q = e^-epsilon
    (1.841 for epsilon 1); discrete=False: continuous Lap(1/epsilon), Var 2. 3000 draws: the
    sample variance has a relative sd of about 4 %, the 10 % tolerance is about 2.4 sd."""
    values = np.array(
        [noisy_count(100, 1.0, generator=torch.Generator().manual_seed(s), ledger=None) for s in range(3000)]
    )
    assert np.array_equal(values, np.round(values))
    assert abs(np.mean(values) - 100) < 0.1
    q = math.exp(-1.0)
    assert np.var(values) == pytest.approx(2 * q / (1 - q) ** 2, rel=0.1)
    cont = np.array(
        [
            noisy_count(100, 1.0, discrete=False, generator=torch.Generator().manual_seed(s), ledger=None)
            for s in range(3000)
        ]
    )
    assert not np.any(cont == np.round(cont))  # continuous: never an integer
    assert abs(np.mean(cont) - 100) < 0.1
    assert np.var(cont) == pytest.approx(2.0, rel=0.1)  # Var Lap(1) = 2
    ledger = PrivacyLedger()
    noisy_count(5, 0.5, ledger=ledger)
    noisy_count(5, 0.5, ledger=ledger, discrete=False)
    discrete, continuous = ledger.events
    assert discrete.kind == "discrete_laplace" and discrete.epsilon == 0.5 and discrete.grid_steps == 1
    assert continuous.kind == "laplace" and continuous.noise_multiplier == pytest.approx(2.0)
    assert ledger.get_epsilon(0.0) == pytest.approx(1.0)


def test_continuous_gaussian_mechanism_sigma_and_event():
    """grid=None: the analytic Gaussian mechanism, accounted by its exact PLD."""
    ledger = PrivacyLedger()
    out = gaussian_mechanism(
        torch.zeros(40_000), 2.0, 1.0, 1e-5, ledger=ledger, grid=None, generator=torch.Generator().manual_seed(1)
    )
    sigma = 3.7306316 * 2.0
    assert stats.kstest(out.double().numpy(), stats.norm(scale=sigma).cdf).pvalue > ALPHA
    (event,) = ledger.events
    assert event.kind == "gaussian" and event.noise_multiplier == pytest.approx(3.7306316, rel=1e-5)
    assert ledger.get_epsilon(1e-5) == pytest.approx(1.0, rel=2e-3)  # the PLD agrees with the calibration
    classic = gaussian_mechanism(
        torch.zeros(3), 1.0, 0.5, 1e-5, calibration="classic", grid=None, ledger=PrivacyLedger()
    )
    assert classic.shape == (3,)
    with pytest.raises(ValueError, match="epsilon < 1"):
        gaussian_mechanism(torch.zeros(3), 1.0, 2.0, 1e-5, calibration="classic", grid=None, ledger=None)
    with pytest.raises(ValueError, match="continuous noise"):  # the default grid has its own calibration
        gaussian_mechanism(torch.zeros(3), 1.0, 0.5, 1e-5, calibration="classic", ledger=None)


def test_report_noisy_max_and_majority_vote():
    counts = torch.tensor([[10.0, 50.0, 5.0], [30.0, 0.0, 1.0]])
    picks = report_noisy_max(counts, 2.0, generator=torch.Generator().manual_seed(0), ledger=None)
    assert picks.tolist() == [1, 0]
    with pytest.raises(ValueError, match="integer counts"):
        report_noisy_max(torch.tensor([1.5, 2.0]), 1.0, ledger=None)
    votes = torch.tensor([2] * 40 + [0] * 5)
    ledger = PrivacyLedger()
    assert noisy_majority_vote(votes, 3, 1.0, ledger=ledger, generator=torch.Generator().manual_seed(0)) == 2
    assert ledger.events[0].kind == "pure" and ledger.get_epsilon(0.0) == 1.0
    # with tiny epsilon the winner is close to uniform among tied counts
    wins = [
        report_noisy_max(torch.tensor([3.0, 3.0]), 1.0, generator=torch.Generator().manual_seed(s), ledger=None).item()
        for s in range(2000)
    ]
    assert 0.45 < np.mean(wins) < 0.55
    # integer noise ties often; ties go to a uniformly random index, not the first one
    tied = [
        report_noisy_max(torch.zeros(3), 50.0, generator=torch.Generator().manual_seed(s), ledger=None).item()
        for s in range(1500)
    ]
    assert np.allclose(np.bincount(tied, minlength=3) / 1500, 1 / 3, atol=0.05)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: laplace_mechanism(torch.tensor([1.0, float("nan")]), 1.0, 1.0, ledger=None), "NaN or inf"),
        (lambda: laplace_mechanism(torch.zeros(2), 1.0, 0.0, ledger=None), "epsilon"),
        (lambda: laplace_mechanism(torch.zeros(2), -1.0, 1.0, ledger=None), "sensitivity"),
        (lambda: gaussian_mechanism(torch.zeros(2), 1.0, 1.0, 1.0, ledger=None), "delta"),
        (lambda: gaussian_mechanism(torch.zeros(2), 1.0, 1.0, -1e-5, ledger=None), "delta"),
        (lambda: gaussian_mechanism(torch.tensor([float("inf")]), 1.0, 1.0, 1e-5, ledger=None), "NaN or inf"),
        (lambda: gaussian_mechanism(torch.zeros(2), 1.0, 1.0, 1e-5, calibration="magic", ledger=None), "calibration"),
        (lambda: laplace_mechanism(torch.zeros(2), 1.0, 1.0, grid=0.0, ledger=None), "grid"),
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
    out, n, entries = clip_l2(x, 1.0)
    assert n == 1 and entries == 2 and torch.allclose(out[0].norm(), torch.tensor(1.0)) and torch.equal(out[1:], x[1:])
    box, n, entries = clip_box(torch.tensor([[0.5, -2.0], [0.1, 0.2], [1.5, 1.5]]))
    assert n == 2 and entries == 3 and box.abs().max() <= 1
    with pytest.raises(ValueError, match="NaN"):
        clip_box(torch.tensor([[math.nan]]))
    with pytest.raises(ValueError, match="max_norm"):
        clip_l2(x, 0.0)


@pytest.mark.parametrize(
    "call",
    [
        lambda **kw: laplace_mechanism(torch.zeros(3), 1.0, 1.0, **kw),
        lambda **kw: gaussian_mechanism(torch.zeros(3), 1.0, 1.0, 1e-5, **kw),
        lambda **kw: noisy_histogram(torch.tensor([0, 1]), 2, 1.0, **kw),
        lambda **kw: noisy_count(5, 1.0, **kw),
        lambda **kw: report_noisy_max(torch.tensor([[1.0, 2.0]]), 1.0, **kw),
        lambda **kw: noisy_majority_vote(torch.tensor([0, 1, 1]), 2, 1.0, **kw),
    ],
    ids=["laplace", "gaussian", "histogram", "count", "noisy_max", "majority_vote"],
)
def test_a_mechanism_needs_an_explicit_ledger_choice(call):
    """No release goes unrecorded by accident: omitting ledger= raises before anything is
    drawn; ledger=None is the explicit opt-out; a ledger records the release."""
    with pytest.raises(TypeError, match=r"needs ledger=: pass a PrivacyLedger .* or ledger=None"):
        call()
    with pytest.raises(TypeError, match="ledger must be a PrivacyLedger or None"):
        call(ledger="my ledger")
    call(ledger=None)
    ledger = PrivacyLedger()
    call(ledger=ledger)
    assert len(ledger.events) == 1
