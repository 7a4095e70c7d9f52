"""White-box audit of one DP-SGD step of each engine from a worst-case state
(``dp_proto.lvq.private.audit.dp_sgd_step_audit_setup``; the ``step_*`` rows of
``benchmarks/privacy/audit.py``).

Prototypes of classes 0 and 1 coincide at the corner (1, 1), 40 class-0 records sit at
(-1, -1), and a class-0 canary is added on the pair or at the centre. An honest engine's
audited lower bound stays below the claim; the engine before commit 87dfabc
(``CANCELLATION_GUARD = 0``) moved its clipped sum by 40 C on the pair, and the audit
must flag it. The audits are seeded, so these tests are deterministic; a valid lower
bound exceeds the truth with probability at most 5 %, and the margins here are large.
"""

from __future__ import annotations

import pytest
import torch

from dp_proto.lvq.private import dpsgd, grad_samplers
from dp_proto.lvq.private.audit import (
    STEP_LAYERS,
    _corner_state,
    dp_sgd_step_audit_setup,
    step_pre_noise_sum,
)
from dp_proto.lvq.private.dpsgd import fit_dp_sgd, fixed_noise_recipe
from dp_proto.privacy.audit import without_leak_warning
from dp_proto.privacy.dpsgd_plan import calibrate_noise_multiplier
from dp_proto.privacy.ledger import PrivacyLedger
from dp_proto.privacy.testing import capture_releases

LAYERS = sorted(STEP_LAYERS)
#: Engines whose clipped sum is bounded in every state.
SOUND = ("fused", "hooks", "functorch", "ghost")
#: Engines that form the clipped sum from clip-weighted derivatives (the guard's path);
#: the fused engine's GLVQ sum is built from explicit per-record vectors instead.
GUARDED = ("fused", "ghost")


def _guarded(engine: str, layer: str) -> bool:
    return engine in GUARDED and (engine, layer) != ("fused", "glvq")


TRIALS = 20_000


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("engine", SOUND)
@pytest.mark.parametrize("canary", ["pair", "centre"])
def test_honest_step_audit_stays_below_the_claim(engine, layer, canary):
    setup = dp_sgd_step_audit_setup(1.0, engine=engine, layer=layer, canary=canary)
    result = setup.audit(TRIALS, generator_seed=0)
    assert result.epsilon_lower_bound < setup.claimed_epsilon, setup.name


@pytest.mark.parametrize(("engine", "layer"), [(e, layer) for e in GUARDED for layer in LAYERS if _guarded(e, layer)])
def test_engine_before_the_fix_is_caught(engine, layer):
    setup = dp_sgd_step_audit_setup(2.0, engine=engine, layer=layer, canary="pair", before_fix=True)
    assert setup.name == f"step_{engine}_{layer}_pair_eps2_before_fix"
    assert setup.movement > 20.0  # 20-40 C without the guard (docs/privacy-model.md)
    result = setup.audit(TRIALS, generator_seed=0)
    assert result.epsilon_lower_bound > setup.claimed_epsilon, setup.name


@pytest.mark.parametrize("layer", LAYERS)
def test_the_guard_is_not_on_the_hooks_path(layer):
    """Opacus' hooks form each record's gradient explicitly (``x - w = 0`` on the pair):
    the engine before the fix (in float32) moves as little as the engine after it (in
    float64), and the audit does not flag it."""
    honest = dp_sgd_step_audit_setup(1.0, engine="hooks", layer=layer)
    twin = dp_sgd_step_audit_setup(1.0, engine="hooks", layer=layer, before_fix=True)
    assert honest.movement < 1e-4 and twin.movement < 1e-4
    assert twin.audit(TRIALS, generator_seed=0).epsilon_lower_bound < twin.claimed_epsilon


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("engine", SOUND)
def test_canaries_move_a_sound_engine_by_zero_and_by_c(engine, layer):
    """On the pair the canary's gradient is 0 and its huge terms must not leak (movement
    ~ 0); at the centre its gradient (norm 4 C) is clipped to C (the guard trims GMLVQ's
    fused clipping norm by 4e-4)."""
    pair = dp_sgd_step_audit_setup(1.0, engine=engine, layer=layer, canary="pair")
    centre = dp_sgd_step_audit_setup(1.0, engine=engine, layer=layer, canary="centre")
    assert pair.movement < 1e-4
    assert 1.0 - 1e-3 < centre.movement < 1.0 + 1e-4


@pytest.mark.parametrize("layer", LAYERS)
def test_the_centre_is_where_the_clipped_contribution_is_largest(layer):
    """On the segment from the pair (1, 1) to D0's corner (-1, -1) (fused engine)."""
    model = _corner_state(layer, 2, torch.float32)
    x0, y0 = -torch.ones(40, 2), torch.zeros(40, dtype=torch.long)
    base = step_pre_noise_sum("fused", model, x0, y0)

    def movement(t: float) -> float:
        x = torch.cat([x0, torch.full((1, 2), 1.0 - t)])
        return float((step_pre_noise_sum("fused", model, x, torch.zeros(41, dtype=torch.long)) - base).norm())

    centre = movement(1.0)
    others = [movement(t) for t in (0.0, 0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.2, 1.5, 1.9)]
    assert max(others) <= centre + 1e-4
    assert others[0] < 1e-4 < others[1] <= centre + 1e-4  # the guard may shrink it near the pair


def test_the_mechanism_is_the_fused_engines_noisy_step():
    """One trial of the setup is, bit for bit, the noisy clipped sum the fused engine's
    ``fit_dp_sgd`` releases with the same generator: the audit runs the engine's step,
    not a model of it."""
    setup = dp_sgd_step_audit_setup(2.0, engine="fused", layer="gmlvq", canary="centre")
    x, y = setup.dataset_1
    model = _corner_state("gmlvq", 2, torch.float32)
    with capture_releases() as recorder:
        without_leak_warning(
            lambda: fit_dp_sgd(
                model,
                x,
                y,
                fixed_noise_recipe(1.0, 1, max_grad_norm=1.0, engine="fused", transfer_fn="sigmoid", beta=16.0),
                ledger=PrivacyLedger(),
                expected_batch_size=41.0,
                noise_multiplier=setup.noise_multiplier,
                generator=torch.Generator().manual_seed(7),
            )
        )
    (release,) = [r for r in recorder.releases if r.name == "dp_sgd"]
    trial = setup.mechanism(setup.dataset_1, torch.Generator().manual_seed(7), 1)
    assert trial.dtype == release.output.dtype == torch.float64  # fit_dp_sgd runs the layer in float64
    assert torch.equal(trial[0], release.output)


def test_claim_is_the_ledgers_epsilon_of_the_calibrated_step():
    setup = dp_sgd_step_audit_setup(4.0)
    assert setup.noise_multiplier == calibrate_noise_multiplier(4.0, 1e-5, 1.0, 1)
    assert 0.99 * 4.0 < setup.claimed_epsilon <= 4.0
    assert setup.delta == 1e-5 and setup.target_epsilon == 4.0


def test_before_fix_restores_the_guard():
    guard, dtype = grad_samplers.CANCELLATION_GUARD, dpsgd.TRAINING_DTYPE
    dp_sgd_step_audit_setup(1.0, engine="fused", before_fix=True)
    assert grad_samplers.CANCELLATION_GUARD == guard and dpsgd.TRAINING_DTYPE == dtype == torch.float64


@pytest.mark.parametrize(("kwargs", "match"), [({"engine": "jax"}, "engine"), ({"canary": "x"}, "canary")])
def test_unknown_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dp_sgd_step_audit_setup(1.0, **kwargs)


@pytest.mark.slow
@pytest.mark.parametrize("epsilon", [1.0, 2.0, 4.0, 8.0])
def test_benchmark_grid_at_quick_trials(epsilon):
    """The benchmark's grid (engine x layer x variant) at ``--quick``'s 100,000 trials."""
    for engine in ("fused", "hooks"):
        for layer in LAYERS:
            for canary in ("pair", "centre"):
                setup = dp_sgd_step_audit_setup(epsilon, engine=engine, layer=layer, canary=canary)
                assert setup.audit(100_000, generator_seed=0).epsilon_lower_bound < setup.claimed_epsilon
    for engine in GUARDED:
        for layer in filter(lambda layer: _guarded(engine, layer), LAYERS):
            setup = dp_sgd_step_audit_setup(epsilon, engine=engine, layer=layer, before_fix=True)
            assert setup.audit(100_000, generator_seed=0).epsilon_lower_bound > setup.claimed_epsilon
