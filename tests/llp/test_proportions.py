"""Label counts of batches and their private proportions (Sachweh, Boiar & Liebig 2021)."""

from __future__ import annotations

import logging
import math
import warnings

import numpy as np
import pytest
import torch

from dp_proto.exceptions import DataValidationError, PrivacyLeakWarning
from dp_proto.llp import (
    batch_label_counts,
    private_label_proportions,
    proportion_bounds,
)
from dp_proto.privacy import PrivacyLedger
from tests._stats import discrete_laplace_pvalue

# Tests that check noise values fix it with noise_seed (or a seeded generator): the explicit
# opt-in to reproducible noise, which warns with PrivacyLeakWarning (checked below and in
# test_privacy_soundness).
pytestmark = pytest.mark.filterwarnings("ignore::dp_proto.exceptions.PrivacyLeakWarning")


def test_batch_label_counts_counts_every_pair():
    labels = torch.tensor([0, 1, 1, 2, 0, 2, 2])
    batches = torch.tensor([0, 0, 0, 1, 3, 3, 3])
    counts = batch_label_counts(labels, batches, 4, 3)
    expected = torch.tensor([[1, 2, 0], [0, 0, 1], [0, 0, 0], [1, 0, 2]], dtype=torch.float64)
    assert counts.dtype == torch.float64
    assert torch.equal(counts, expected)


def test_batch_label_counts_rejects_bad_input():
    with pytest.raises(DataValidationError, match="labels must lie in 0..2"):
        batch_label_counts(torch.tensor([0, 3]), torch.tensor([0, 0]), 1, 3)
    with pytest.raises(DataValidationError, match="batch_ids must lie in 0..1"):
        batch_label_counts(torch.tensor([0, 1]), torch.tensor([0, 2]), 2, 3)
    with pytest.raises(DataValidationError, match="integers"):
        batch_label_counts(torch.tensor([0.0, 1.0]), torch.tensor([0, 0]), 1, 3)
    with pytest.raises(ValueError, match="same length"):
        batch_label_counts(torch.tensor([0, 1]), torch.tensor([0]), 1, 3)
    with pytest.raises(ValueError, match="num_classes"):
        batch_label_counts(torch.tensor([0]), torch.tensor([0]), 1, 0)


def test_exact_proportions_and_empty_batches():
    counts = torch.tensor([[2.0, 2.0, 0.0], [0.0, 0.0, 0.0], [0.0, 1.0, 3.0]])
    rel = private_label_proportions(counts, None)
    assert rel.epsilon is None and rel.noisy_counts is None
    assert torch.equal(rel.valid, torch.tensor([True, False, True]))
    assert torch.allclose(rel.proportions[0], torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64))
    assert torch.allclose(rel.proportions[1], torch.full((3,), 1 / 3, dtype=torch.float64))
    assert torch.allclose(rel.proportions[2], torch.tensor([0.0, 0.25, 0.75], dtype=torch.float64))


@pytest.mark.parametrize("epsilon", [0.01, 0.1, 1.0])
def test_private_proportions_are_normalised_and_bounded(epsilon):
    gen = torch.Generator().manual_seed(3)
    b, num_classes = 32, 5
    labels = torch.randint(0, num_classes, (600,), generator=gen)
    batches = torch.randint(0, 40, (600,), generator=gen)  # ~15 records per batch, some empty
    counts = batch_label_counts(labels, batches, 40, num_classes)
    rel = private_label_proportions(counts, epsilon, batch_sizes=b, generator=gen)
    p = rel.proportions
    assert p.shape == (40, num_classes) and rel.valid.all()
    assert torch.allclose(p.sum(1), torch.ones(40, dtype=torch.float64))
    lo, hi = proportion_bounds(num_classes, b)
    assert float(p.min()) >= lo * (1 - 1e-12) and float(p.max()) <= hi * (1 + 1e-12)
    assert float(rel.noisy_counts.min()) >= 1e-3 and float(rel.noisy_counts.max()) <= b
    if epsilon == 0.01:  # scale 100 noise on counts <= 32: most counts are clipped
        assert float((rel.noisy_counts == b).double().mean()) > 0.2


def test_noise_scale_is_one_over_epsilon():
    """Noisy - true counts are integers with P(k) ~ exp(-epsilon |k|) (discrete Laplace of scale
    1/epsilon) when the clip bounds are never hit: chi-square test on 2000 draws, false failure
    probability 1e-3; a scale 1.5/epsilon is rejected."""
    epsilon = 0.5
    counts = torch.full((400, 5), 500.0, dtype=torch.float64)
    rel = private_label_proportions(counts, epsilon, generator=torch.Generator().manual_seed(0))
    assert torch.equal(rel.noisy_counts, rel.noisy_counts.round())  # integer counts + integer noise
    noise = (rel.noisy_counts - counts).flatten().numpy()
    assert discrete_laplace_pvalue(noise, epsilon, kmax=8) > 1e-3
    assert discrete_laplace_pvalue(noise, epsilon / 1.5, kmax=8) < 1e-6


def test_ledger_records_one_laplace_release_with_epsilon():
    ledger = PrivacyLedger()
    counts = torch.ones(10, 3, dtype=torch.float64)
    private_label_proportions(
        counts, 0.1, batch_sizes=8, ledger=ledger, name="llp/test", generator=torch.Generator().manual_seed(0)
    )
    (event,) = ledger.events
    assert event.kind == "discrete_laplace" and event.name == "llp/test"
    assert event.epsilon == pytest.approx(0.1) and event.grid_steps == 1 and event.sensitivity == 1.0
    assert not hasattr(event, "noise_multiplier")  # integer noise: no continuous scale
    assert ledger.get_epsilon(0.0) == pytest.approx(0.1)  # pure epsilon for the whole table


def test_private_release_is_reproducible_from_the_generator():
    counts = torch.arange(12, dtype=torch.float64).reshape(4, 3)
    a = private_label_proportions(counts, 0.3, batch_sizes=32, generator=torch.Generator().manual_seed(7))
    b = private_label_proportions(counts, 0.3, batch_sizes=32, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a.proportions, b.proportions)


def test_noise_is_fresh_by_default_and_noise_seed_is_an_explicit_opt_in():
    counts = torch.arange(12, dtype=torch.float64).reshape(4, 3)
    fresh = [PrivacyLedger(), PrivacyLedger()]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default warns about nothing
        a, b = (private_label_proportions(counts, 0.3, batch_sizes=32, ledger=led) for led in fresh)
    assert not torch.equal(a.noisy_counts, b.noisy_counts)
    assert all(led.summary()["noise"] == "fresh" for led in fresh)
    seeded = PrivacyLedger()
    with pytest.warns(PrivacyLeakWarning, match="noise_seed makes the noise reproducible") as caught:
        c = private_label_proportions(counts, 0.3, batch_sizes=32, noise_seed=7, ledger=seeded)
    assert not any("7" in str(w.message) for w in caught)  # the seed is not printed (warnings reach logs)
    with pytest.warns(PrivacyLeakWarning):
        d = private_label_proportions(counts, 0.3, batch_sizes=32, noise_seed=7)
    assert torch.equal(c.noisy_counts, d.noisy_counts) and seeded.summary()["noise"] == "reproducible"
    with pytest.raises(ValueError, match="either generator or noise_seed"):
        private_label_proportions(counts, 0.3, noise_seed=7, generator=torch.Generator())


def test_private_proportions_reject_bad_input():
    good = torch.ones(3, 2)
    with pytest.raises(DataValidationError, match="NaN"):
        private_label_proportions(torch.tensor([[1.0, math.nan]]), 0.1)
    with pytest.raises(DataValidationError, match="NaN"):
        private_label_proportions(torch.tensor([[1.0, math.nan]]), None)
    with pytest.raises(DataValidationError, match=">= 0"):
        private_label_proportions(torch.tensor([[1.0, -1.0]]), 0.1)
    with pytest.raises(ValueError, match="epsilon"):
        private_label_proportions(good, 0.0)
    with pytest.raises(ValueError, match="floor"):
        private_label_proportions(good, 0.1, floor=0.0)
    with pytest.raises(ValueError, match="batch_sizes"):
        private_label_proportions(good, 0.1, batch_sizes=torch.ones(2))
    with pytest.raises(ValueError, match="shape"):
        private_label_proportions(torch.ones(3), 0.1)


def test_counts_over_the_public_bound_go_to_the_curator_log_only(caplog):
    """Whether a batch exceeds its bound depends on single records: no warning, a curator log."""
    with warnings.catch_warnings(), caplog.at_level(logging.DEBUG, logger="dp_proto.curator"):
        warnings.simplefilter("error")
        rel = private_label_proportions(torch.full((2, 2), 10.0), 1.0, batch_sizes=4, name="llp/over")
    assert float(rel.noisy_counts.max()) <= 4
    assert any(
        "llp/over: 2 batch(es) hold more records than their public bound" in r.getMessage() for r in caplog.records
    )


def test_proportion_bounds_formula():
    lo, hi = proportion_bounds(3, 10.0, 0.5)
    assert lo == pytest.approx(0.5 / 20.5) and hi == pytest.approx(10 / 11)
    assert np.isclose(sum(proportion_bounds(2, 1.0, 1.0)), 1.0)


def test_unbiased_estimator_is_unbiased_and_costs_the_same():
    counts = torch.tensor([[0.0, 2.0, 30.0], [10.0, 10.0, 12.0]], dtype=torch.float64).repeat(2000, 1)
    ledger = PrivacyLedger()
    rel = private_label_proportions(
        counts, 0.1, batch_sizes=32, estimator="unbiased", ledger=ledger, generator=torch.Generator().manual_seed(0)
    )
    mean = rel.proportions.reshape(2000, 2, 3).mean(0)
    # sd of one entry 10 * sqrt(2) / 32 = 0.44, of the mean over 2000 about 0.01
    assert torch.allclose(mean, counts[:2] / 32, atol=0.04)
    assert float(rel.proportions.min()) < 0  # not clipped
    clipped = private_label_proportions(counts, 0.1, batch_sizes=32, generator=torch.Generator().manual_seed(0))
    assert float(clipped.proportions.reshape(2000, 2, 3).mean(0)[0, 0]) > 0.1  # pulled to uniform
    (event,) = ledger.events  # the same release as the clipping estimator's: discrete Laplace, epsilon 0.1
    assert event.kind == "discrete_laplace" and event.epsilon == pytest.approx(0.1) and event.grid_steps == 1
    assert ledger.get_epsilon(0.0) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="batch_sizes"):
        private_label_proportions(counts, 0.1, estimator="unbiased")
    with pytest.raises(ValueError, match="estimator"):
        private_label_proportions(counts, 0.1, batch_sizes=32, estimator="debiased")
