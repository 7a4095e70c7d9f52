"""Every release is covered by its guarantee: independent subsample-and-aggregate bins, no
smooth sensitivity in the centre of attention's release, fresh noise unless reproduction
is requested, a public DP-SGD normaliser, Gaussian noise with tails, curator-only
diagnostics and neighbour checks of the DP-SGD estimator.

Known counterexamples are reproduced where they are small enough.
"""

from __future__ import annotations

import logging
import math
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris

from dp_proto.exceptions import DomainWarning, PrivacyLeakWarning
from dp_proto.lvq.layers import GLVQLayer
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private import (
    DPGLVQ,
    DPGMLVQ,
    BinTraining,
    SubsampleAggregate,
    SubsampleAggregateGLVQ,
    saa_sensitivity,
)
from dp_proto.lvq.private.coa import COAResult, centre_of_attention_mechanism
from dp_proto.lvq.private.fused import clipped_gradient_sum, dp_sgd_step
from dp_proto.lvq.private.saa import fit_glvq_bins
from dp_proto.privacy import DPStandardScaler, PrivacyLedger, gaussian_mechanism, gaussian_noise, laplace_mechanism
from dp_proto.privacy.randomness import fresh_generator, noise_source
from dp_proto.privacy.testing import adversarial_removals, neighbour_check
from tests._stats import pin_gaussian_uniforms


def _iris(n_per_class: int = 20):
    X, y = load_iris(return_X_y=True)
    keep = np.concatenate([np.flatnonzero(y == c)[:n_per_class] for c in range(3)])
    return X[keep], y[keep]


# -- subsample-and-aggregate bins are independent ------------------------------------------
def _bins_counterexample():
    """1000 bins of 20 records in 2-D, bin 0 holds 21 (a counterexample to dependent bins)."""
    gen = torch.Generator().manual_seed(0)
    sizes = [21] + [20] * 999
    bins = torch.cat([torch.full((s,), b) for b, s in enumerate(sizes)])
    x = torch.rand(len(bins), 2, generator=gen, dtype=torch.float64) * 2 - 1
    y = torch.arange(len(bins)) % 2
    return x, y, bins


def test_removing_a_record_of_the_largest_bin_leaves_every_other_bin_bit_identical():
    x, y, bins = _bins_counterexample()
    labels = torch.tensor([0, 1])
    keep = torch.ones(len(bins), dtype=torch.bool)
    keep[20] = False  # bin 0's extra record: the largest bin shrinks to the common size
    seeds = torch.randint(-(2**62), 2**62, (1000,), generator=torch.Generator().manual_seed(3))
    kwargs = dict(epochs=5, batch_size=20, lr=0.01, bin_seeds=seeds)
    full = fit_glvq_bins(x, y, bins, 1000, labels, **kwargs)
    neighbour = fit_glvq_bins(x[keep], y[keep], bins[keep], 1000, labels, **kwargs)
    assert torch.equal(full[1:], neighbour[1:])  # the old code moved them by 0.029 on average
    moved = torch.linalg.vector_norm((full - neighbour).reshape(-1))
    assert float(moved) <= saa_sensitivity(2, 2)  # 4.0; the old code moved the sum by 22.6


def test_batched_bins_equal_separate_fits():
    x, y, bins = _bins_counterexample()
    x, y, bins = x[:200], y[:200], bins[:200] % 7
    bins[:30] = 0  # unequal bin sizes
    labels = torch.tensor([0, 1])
    seeds = torch.randint(-(2**62), 2**62, (7,), generator=torch.Generator().manual_seed(5))
    together = fit_glvq_bins(x, y, bins, 7, labels, epochs=4, batch_size=8, lr=0.05, bin_seeds=seeds)
    for b in range(7):
        mine = bins == b
        alone = fit_glvq_bins(
            x[mine],
            y[mine],
            torch.zeros(int(mine.sum()), dtype=torch.long),
            1,
            labels,
            epochs=4,
            batch_size=8,
            lr=0.05,
            bin_seeds=seeds[b : b + 1],
        )
        torch.testing.assert_close(together[b], alone[0], rtol=0, atol=1e-12)


def test_subsample_and_aggregate_passes_the_neighbour_check_with_adversarial_removals():
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(120, 3, generator=gen, dtype=torch.float64) * 2 - 1
    y = torch.arange(120) % 3
    x[7] = 1.0  # a corner record

    def release(x, y):
        ledger = PrivacyLedger()
        model = PrototypeModel(GLVQLayer(3, 3, dtype=torch.float64), [0, 1, 2])
        recipe = SubsampleAggregate(1.0, 1e-5, num_bins=6, training=BinTraining(epochs=3, batch_size=4))
        result = recipe.run(model, x, y, ledger)
        return result.prototypes, model.prototype_labels, result.noise_std, ledger

    removals = adversarial_removals(x, y) + [0, 55]
    report = neighbour_check(release, (x, y), removals).assert_ok()
    assert report.releases == ["saa"] and 0 < report.max_ratio["saa"] <= 1


# -- the centre of attention releases no smooth sensitivity --------------------------------
def test_coa_result_holds_no_noise_std():
    assert COAResult._fields == ("value", "t0")
    near = torch.zeros(10, 1, dtype=torch.float64)
    far = near.clone()
    far[9] = 2.0  # a released noise_std would differ here: 93.36 against 95.15
    outs = [centre_of_attention_mechanism(p, 1.0, 1e-5, diameter=2.0, ledger=None) for p in (near, far)]
    assert all(set(o._asdict()) == {"value", "t0"} for o in outs)
    assert outs[0].t0 == outs[1].t0


def test_coa_estimator_passes_the_neighbour_check():
    X, y = _iris(12)

    def release(X, y):
        return SubsampleAggregateGLVQ(
            num_bins=4,
            aggregation="centre_of_attention",
            epsilon=2.0,
            bounds=(0, 8),
            classes=[0, 1, 2],
            training=BinTraining(epochs=2),
        ).fit(X, y)

    report = neighbour_check(release, (X, y), adversarial_removals(X, y) + [3], curator_only=("curator_",)).assert_ok()
    assert report.releases == ["coa"]
    assert not hasattr(release(X, y), "noise_std_")


def test_saa_estimator_passes_the_neighbour_check():
    X, y = _iris(12)

    def release(X, y):
        return SubsampleAggregateGLVQ(
            num_bins=5, epsilon=2.0, bounds=(0, 8), classes=[0, 1, 2], training=BinTraining(epochs=2)
        ).fit(X, y)

    neighbour_check(release, (X, y), adversarial_removals(X, y) + [5], curator_only=("curator_",)).assert_ok()


# -- fresh entropy by default, reproduction only on request --------------------------------
def test_default_noise_is_fresh_even_after_seeding_torch():
    values = []
    for _ in range(2):
        torch.manual_seed(0)  # what seed_everything does; the old default drew from this stream
        values.append(laplace_mechanism(torch.zeros(4), 1.0, 1.0, ledger=None))
    assert not torch.equal(values[0], values[1])


@pytest.mark.slow
def test_estimators_with_the_same_random_state_draw_different_noise():
    X, y = _iris()
    fits = [
        DPGLVQ(epsilon=2.0, bounds=(0, 8), classes=[0, 1, 2], sampling_rate=0.2, epochs=2, random_state=0).fit(X, y)
        for _ in range(2)
    ]
    assert not np.array_equal(fits[0].prototypes_, fits[1].prototypes_)
    assert fits[0].privacy_["noise"] == "fresh"
    saa = [
        SubsampleAggregateGLVQ(
            num_bins=3, epsilon=2.0, bounds=(0, 8), classes=[0, 1, 2], random_state=0, training=BinTraining(epochs=1)
        ).fit(X, y)
        for _ in range(2)
    ]
    assert not np.array_equal(saa[0].prototypes_, saa[1].prototypes_)


def test_noise_seed_reproduces_warns_and_is_recorded():
    X, y = _iris()
    fits = []
    for _ in range(2):
        with pytest.warns(PrivacyLeakWarning, match="noise_seed"):
            fits.append(
                DPGMLVQ(epsilon=2.0, bounds=(0, 8), classes=[0, 1, 2], sampling_rate=0.2, epochs=2, noise_seed=7).fit(
                    X, y
                )
            )
    np.testing.assert_array_equal(fits[0].prototypes_, fits[1].prototypes_)
    assert fits[0].privacy_["noise"] == "reproducible"
    assert "REPRODUCIBLE" in str(fits[0].ledger_)


def test_a_callers_generator_warns_and_marks_the_ledger():
    ledger = PrivacyLedger()
    with pytest.warns(PrivacyLeakWarning, match="caller's torch.Generator"):
        gaussian_mechanism(torch.zeros(3), 1.0, 1.0, 1e-5, ledger=ledger, generator=torch.Generator().manual_seed(0))
    assert ledger.summary()["noise"] == "reproducible"
    restored = PrivacyLedger.from_state_dict(ledger.state_dict())
    assert restored.summary()["noise"] == "reproducible"
    assert noise_source(fresh_generator()) == "fresh" and noise_source(None, secure_mode=True) == "secure"


# -- the DP-SGD normaliser is public -------------------------------------------------------
@pytest.mark.slow
def test_dp_sgd_normaliser_is_the_noisy_count_not_q_times_n():
    """Given the same released noisy counts, removing a record leaves the normaliser as it
    is (the old q * n moved by q); it is q times the released total."""
    X, y = _iris()

    def release(X, y):
        est = DPGLVQ(epsilon=2.0, bounds=(0, 8), classes=[0, 1, 2], sampling_rate=0.2, epochs=1).fit(X, y)
        return est.expected_batch_size_

    neighbour_check(release, (X, y), [0, len(y) - 1]).assert_ok()
    from dp_proto.lvq.private import dp_init

    released = []
    original = dp_init.noisy_histogram

    def spy(*args, **kwargs):
        released.append(original(*args, **kwargs))
        return released[-1]

    dp_init.noisy_histogram = spy
    try:
        est = DPGLVQ(epsilon=2.0, bounds=(0, 8), classes=[0, 1, 2], sampling_rate=0.2, epochs=1).fit(X, y)
    finally:
        dp_init.noisy_histogram = original
    assert est.expected_batch_size_ == pytest.approx(0.2 * max(float(released[0].sum()), 1.0))


def test_fit_dp_sgd_needs_a_public_expected_batch_size():
    from dp_proto.lvq.private.dpsgd import fit_dp_sgd, fixed_noise_recipe

    model = PrototypeModel(GLVQLayer(2, 2), [0, 1])
    with pytest.raises(TypeError, match="expected_batch_size"):
        fit_dp_sgd(
            model,
            torch.zeros(4, 2),
            torch.tensor([0, 1, 0, 1]),
            fixed_noise_recipe(0.5, 1, max_grad_norm=1.0),
            ledger=PrivacyLedger(),
            noise_multiplier=1.0,
        )
    with pytest.raises(ValueError, match="expected_batch_size"):
        fit_dp_sgd(
            model,
            torch.zeros(4, 2),
            torch.tensor([0, 1, 0, 1]),
            fixed_noise_recipe(0.5, 1, max_grad_norm=1.0),
            ledger=PrivacyLedger(),
            expected_batch_size=0,
            noise_multiplier=1.0,
        )


# -- Gaussian noise with tails -------------------------------------------------------------
def _smallest_uniforms(monkeypatch):
    pin_gaussian_uniforms(monkeypatch)  # radius 9.9 sigma, angle ~ 0


def test_gaussian_sampler_reaches_past_eight_sigma(monkeypatch):
    _smallest_uniforms(monkeypatch)
    z = gaussian_noise(5, 1.0, dtype=torch.float32)
    assert float(z.max()) > 9.8  # float32 randn stops near 5.77, one float64 log of a uniform at 8.65


def test_fused_dp_sgd_noise_has_tails(monkeypatch):
    _smallest_uniforms(monkeypatch)
    layer = GLVQLayer(3, 2, dtype=torch.float32)
    model = PrototypeModel(layer, [0, 1])
    before = layer.prototypes.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    dp_sgd_step(
        model,
        torch.zeros(0, 3),
        torch.zeros(0, dtype=torch.long),
        opt,
        max_grad_norm=1.0,
        noise_std=1.0,
        expected_batch=1.0,
    )
    assert float((before - layer.prototypes.detach()).abs().max()) > 9.8


def test_gaussian_tail_mass_matches_the_normal():
    z = gaussian_noise(4_000_000, 1.0, generator=fresh_generator())
    for t in (3.0, 4.0):
        expected = 4_000_000 * math.erfc(t / math.sqrt(2))
        count = int((z.abs() > t).sum())
        assert abs(count - expected) < 6 * math.sqrt(expected)  # false-failure chance < 1e-8


# -- curator-only diagnostics, no record-dependent messages --------------------------------
def test_clipped_count_is_curator_only_and_nothing_warns():
    X, y = _iris()
    X = X.copy()
    X[0, 0] = 100.0  # outside the public bounds
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no DomainWarning whose presence depends on record 0
        est = DPGLVQ(epsilon=2.0, bounds=(0, 8), classes=[0, 1, 2], sampling_rate=0.2, epochs=1).fit(X, y)
    assert est.curator_["num_clipped"] == 1
    assert not hasattr(est, "num_clipped_")
    assert not hasattr(est.scaler_, "num_clipped_")  # the old code left it here after `del`


def test_wrong_bounds_are_told_on_the_curator_channel_at_warning(caplog):
    """Most records outside the public bounds: a WARNING on ``dp_proto.curator`` (stderr
    when no logging is configured), never a ``warnings`` warning; one record out: silent."""
    X, y = _iris()
    with caplog.at_level(logging.WARNING, logger="dp_proto.curator"), warnings.catch_warnings():
        warnings.simplefilter("error")
        est = DPGLVQ(epsilon=2.0, bounds=(0, 1), classes=[0, 1, 2], sampling_rate=0.2, epochs=1).fit(X, y)
    assert est.curator_["num_clipped"] == len(X)
    lines = [r.getMessage() for r in caplog.records if r.name == "dp_proto.curator" and r.levelno == logging.WARNING]
    assert lines and "values (" in lines[0] and "lie outside the public bounds and were clipped into them" in lines[0]
    caplog.clear()
    X = X.copy()
    X[0, 0] = 100.0
    with caplog.at_level(logging.WARNING, logger="dp_proto.curator"):
        DPGLVQ(epsilon=2.0, bounds=(0, 8), classes=[0, 1, 2], sampling_rate=0.2, epochs=1).fit(X, y)
    assert not [r for r in caplog.records if r.name == "dp_proto.curator" and r.levelno >= logging.WARNING]


def test_too_little_data_is_told_on_the_curator_channel(caplog):
    """One row, or one class of three: the fit runs (an exception would depend on the
    records) and the curator channel says that its model comes from the noise."""
    X, y = _iris()
    settings = {"epsilon": 2.0, "bounds": (0, 8), "classes": [0, 1, 2], "sampling_rate": 0.2, "epochs": 1}

    def curator_warnings(X, y):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="dp_proto.curator"), warnings.catch_warnings():
            warnings.simplefilter("error", DomainWarning)
            est = DPGLVQ(**settings).fit(X, y)
        lines = [r.getMessage() for r in caplog.records if r.name == "dp_proto.curator"]
        return est, lines

    est, lines = curator_warnings(X[:1], y[:1])
    assert est.curator_["records_per_class"] == {0: 1, 1: 0, 2: 0}
    assert len(lines) == 1 and "1 record(s) for 3 public classes; classes [1, 2] have none" in lines[0]
    assert "mostly from the noise" in lines[0]
    one_class = np.repeat(X[y == 2], 2, axis=0)  # 10 records per public class, all of class 2
    est, lines = curator_warnings(one_class, np.full(len(one_class), 2))
    assert len(lines) == 1 and "classes [0, 1] have none" in lines[0] and "mostly" not in lines[0]
    est, lines = curator_warnings(X, y)
    assert set(est.curator_["records_per_class"].values()) == {len(X) // 3} and not lines


def test_many_records_with_one_clipped_coordinate_are_not_wrong_bounds(caplog):
    """In many dimensions most records have a coordinate in a heavy tail: the share of
    clipped values, not of records with one, decides the warning."""
    X = np.random.default_rng(0).standard_t(3, size=(200, 400))
    with caplog.at_level(logging.WARNING, logger="dp_proto.curator"):
        est = DPStandardScaler(epsilon=1.0, bounds=(-3, 3)).fit(X)
    assert est.curator_["num_clipped"] > 0.9 * len(X)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_curator_warning_reaches_stderr_without_logging_configured():
    code = (
        "import numpy as np; from dp_proto.privacy import DPStandardScaler; "
        "DPStandardScaler(epsilon=1.0, bounds=(0, 1)).fit(np.full((50, 3), 5.0))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert "150 of 150 values (100%) lie outside the public bounds and were clipped into them" in done.stderr


def test_dp_sgd_estimator_passes_the_neighbour_check():
    X, y = _iris(8)
    X = X.copy()
    X[3, 2] = 50.0  # the only clipped record
    y = y.copy()

    def release(X, y):
        return DPGLVQ(epsilon=3.0, bounds=(0, 8), classes=[0, 1, 2], sampling_rate=0.2, epochs=2).fit(X, y)

    report = neighbour_check(
        release, (X, y), adversarial_removals(X, y) + [3, 10], curator_only=("curator_",)
    ).assert_ok()
    assert report.releases[:2] == ["dp_init/class_counts", "dp_init/class_sums"]
    assert set(report.releases[2:]) == {"dp_sgd"}


@pytest.mark.slow
def test_small_expected_batch_warns_on_the_noisy_count_not_the_private_n():
    X, y = _iris(4)  # 12 records, q = 0.05: q n < 1
    with pytest.warns(UserWarning, match="noisy record count"):
        DPGLVQ(epsilon=50.0, bounds=(0, 8), classes=[0, 1, 2], sampling_rate=0.05, epochs=0.1).fit(X, y)


# -- the DP-SGD per-step clipped sum -------------------------------------------------------
def test_clipped_sum_moves_at_most_c_when_the_largest_gradient_is_removed():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(64, 4, generator=gen, dtype=torch.float64) * 3
    y = torch.arange(64) % 2
    layer = GLVQLayer(4, 2, dtype=torch.float64)
    model = PrototypeModel(layer, [0, 1])
    C = 0.7

    def clipped(xb, yb):
        layer.zero_grad(set_to_none=True)
        for p in layer.parameters():
            p.grad = torch.zeros_like(p)
        clipped_gradient_sum(model, xb, yb, C)
        return torch.cat([p.grad.reshape(-1) for p in layer.parameters()]).clone()

    full = clipped(x, y)
    worst = 0.0
    for i in adversarial_removals(x, y) + list(range(0, 64, 9)):
        keep = torch.arange(64) != i
        worst = max(worst, float(torch.linalg.vector_norm(full - clipped(x[keep], y[keep]))))
    assert 0 < worst <= C * (1 + 1e-9)


# -- the harness catches what it is for ----------------------------------------------------
def test_harness_catches_understated_sensitivity_attributes_warnings_and_shapes():
    x = torch.tensor([[0.0], [1.0], [5.0]], dtype=torch.float64)

    def understated(x):
        return laplace_mechanism(x.sum(0), 1.0, 1.0, ledger=None)  # a record moves the sum by up to 5

    def leaky_attribute(x):
        return laplace_mechanism(x.clamp(0, 1).sum(0), 1.0, 1.0, ledger=None), int(x.shape[0])

    def leaky_warning(x):
        if bool((x > 4).any()):
            warnings.warn("a record lies above 4", stacklevel=2)
        return laplace_mechanism(x.clamp(0, 1).sum(0), 1.0, 1.0, ledger=None)

    def shape_change(x):
        return laplace_mechanism(
            x.clamp(0, 1)[: int(x.max()) + 1].sum(0, keepdim=True).expand(int(x.max()) + 1, 1), 1.0, 1.0, ledger=None
        )

    for release in (understated, leaky_attribute, leaky_warning):
        assert not neighbour_check(release, (x,), [2]).ok
    assert not neighbour_check(shape_change, (x,), [2]).ok
    sound = neighbour_check(lambda x: laplace_mechanism(x.clamp(0, 1).sum(0), 1.0, 1.0, ledger=None), (x,), [0, 1, 2])
    sound.assert_ok()
