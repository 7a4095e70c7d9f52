"""The white-box audit of a DP estimator's DP-SGD run: below the claim for the real
engines, above it for each broken twin."""

from __future__ import annotations

import logging

import pytest

from dp_proto.lvq.private import DPGLVQ, DPGMLVQ, SubsampleAggregateGLVQ
from dp_proto.lvq.private.trainer_audit import BROKEN_TWINS, black_box_audit, white_box_audit

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(autouse=True)
def _quiet_session_notice():
    logging.disable(logging.WARNING)  # the session's composed-spend notice of repeated fits
    yield
    logging.disable(logging.NOTSET)


def _estimator(cls=DPGLVQ, engine="fused", epsilon=2.0):
    return cls(epsilon=epsilon, bounds=(-1, 1), classes=[0, 1], engine=engine, sampling_rate=0.05, epochs=20)


@pytest.mark.parametrize("engine", ["fused", "opacus"])
def test_an_honest_engine_measures_just_below_its_claim(engine):
    audit = white_box_audit(_estimator(DPGMLVQ, engine), runs=4)
    assert not audit.violation and 0.5 * audit.claimed_epsilon < audit.epsilon_lower_bound
    assert audit.contribution == pytest.approx(1.0, abs=1e-5)  # every joining step adds C (the 1e-6 guard)
    assert audit.noise_multiplier_measured == pytest.approx(audit.noise_multiplier, rel=0.02)
    assert audit.sampling_rate_lower <= audit.sampling_rate and audit.normality_pvalue > 1e-3
    assert audit.noise_samples == 4 * 400 * 8  # runs * steps * (2 prototypes + Omega) coordinates


@pytest.mark.parametrize("twin", BROKEN_TWINS)
def test_every_broken_twin_is_flagged(twin):
    audit = white_box_audit(_estimator(), runs=2, twin=twin)
    assert audit.violation, audit.summary()


def test_the_audit_is_reproducible_and_checks_its_arguments():
    first, second = (white_box_audit(_estimator(), runs=1, seed=3) for _ in range(2))
    assert first == second
    with pytest.raises(ValueError, match="twin"):
        white_box_audit(_estimator(), runs=1, twin="no_noise")
    with pytest.raises(ValueError, match="runs"):
        white_box_audit(_estimator(), runs=0)
    with pytest.raises(TypeError, match="DP-SGD estimator"):
        white_box_audit(SubsampleAggregateGLVQ(), runs=1)


def _full_batch(cls=DPGLVQ, engine="fused", epsilon=8.0):
    return cls(epsilon=epsilon, bounds=(-1, 1), classes=[0, 1], engine=engine, sampling_rate=1.0, epochs=10)


def test_black_box_audit_of_an_honest_full_batch_run_stays_below_its_claim():
    """From the final models only: both bounds below the claim; under a Gaussian
    trade-off curve the bound reaches a large share of it (the final model of a full-batch
    run carries every step's release)."""
    audit = black_box_audit(_full_batch(), fits=1000)
    assert not audit.violation and not audit.violation_gdp, audit.summary()
    assert 0.4 * audit.claimed_epsilon < audit.epsilon_lower_bound_gdp
    assert audit.epsilon_lower_bound <= audit.epsilon_lower_bound_gdp
    assert audit.steps == 10 and audit.sampling_rate == 1.0 and audit.audit.n_trials == 1000


@pytest.mark.parametrize("twin", ["noise_halved", "clipping_skipped"])
def test_black_box_audit_flags_a_broken_twin(twin):
    audit = black_box_audit(_full_batch(), fits=400, twin=twin)
    assert audit.violation_gdp, audit.summary()


def test_black_box_audit_is_reproducible():
    first, second = (black_box_audit(_full_batch(), fits=40, seed=5) for _ in range(2))
    assert first.summary() == second.summary()
    with pytest.raises(TypeError, match="DP-SGD estimator"):
        black_box_audit(SubsampleAggregateGLVQ(), fits=40)
