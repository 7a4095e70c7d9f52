"""Canary audits of whole trainers: an honest release stays below its claim,
and a deliberately broken variant of each is caught (audited lower bound above the claim).

Fast forms of the trainer rows of ``benchmarks/privacy/audit.py``. The audits are
seeded (``generator_seed``), so these tests are deterministic. A valid lower bound is
above the truth with probability at most 5 %; the honest rows' margins are large.
"""

import pytest

from dp_proto.llp.audit import llp_release_audit_setup
from dp_proto.lvq.private.audit import dp_sgd_audit_setup, saa_audit_setup

CASES = [
    # (honest setup, broken setup, trials)
    (lambda: saa_audit_setup(2.0), lambda: saa_audit_setup(2.0, fixed_noise_seed=0), 200),
    (lambda: llp_release_audit_setup(1.0), lambda: llp_release_audit_setup(1.0, fixed_noise_seed=0), 2000),
    (lambda: dp_sgd_audit_setup(2.0), lambda: dp_sgd_audit_setup(2.0, noise_factor=0.02), 300),
]


@pytest.mark.slow
@pytest.mark.parametrize("honest, broken, trials", CASES, ids=["saa", "llp_release", "dp_sgd"])
def test_trainer_audit_honest_below_claim_broken_caught(honest, broken, trials):
    setup = honest()
    result = setup.audit(trials, generator_seed=0)
    assert result.epsilon_lower_bound < setup.claimed_epsilon
    bad = broken()
    caught = bad.audit(trials, generator_seed=0)
    assert bad.claimed_epsilon == setup.claimed_epsilon
    assert caught.epsilon_lower_bound > bad.claimed_epsilon, bad.name
