"""Data-parallel DP-SGD (fused engine) in two CPU processes: the same noise, the same
ledger, the same noise-free trajectory as one process, and a loud failure when a rank dies."""

from __future__ import annotations

import json
import math
import os
import warnings

import pytest
import torch
from scipy import stats

from dp_proto._processes import NodeProcessError, launch_workers
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.lvq.layers import GLVQLayer, GMLVQLayer
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private import DataParallelError, fit_dp_sgd, launch_dp_sgd
from dp_proto.lvq.private.dpsgd import SGDSettings, fixed_noise_recipe
from dp_proto.privacy.data_parallel import DataParallel
from dp_proto.privacy.ledger import PrivacyLedger

pytestmark = pytest.mark.filterwarnings("ignore::dp_proto.exceptions.PrivacyLeakWarning")


def _data(n: int, d: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (n,), generator=g)
    return x, y


def _gmlvq(d: int) -> PrototypeModel:
    torch.manual_seed(0)
    return PrototypeModel(GMLVQLayer(d, 3, dtype=torch.float64), [0, 1, 2])


def test_noise_free_full_batch_run_equals_one_process():
    """q = 1, sigma = 0: the all-reduced clipped sums of two shards are the one-process sum."""
    x, y = _data(60, 4, seed=1)
    recipe = fixed_noise_recipe(1.0, 6, max_grad_norm=0.3, sgd=SGDSettings(lr=0.1), engine="fused")
    settings = dict(noise_multiplier=0.0, expected_batch_size=60.0)
    single = _gmlvq(4)
    fit_dp_sgd(single, x, y, recipe, ledger=PrivacyLedger(), **settings)
    model, result, _ = launch_dp_sgd(_gmlvq(4), [(x[:25], y[:25]), (x[25:], y[25:])], recipe, **settings)
    assert result.steps == 6
    for a, b in zip(single.layer.parameters(), model.layer.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-9)


def test_noise_is_added_once_with_the_single_process_std_and_the_ledgers_agree():
    """Batches that are empty (q tiny): every update is pure noise. Two ranks must give the
    one-process law N(0, T (lr sigma C / E)^2) per coordinate -- noise on both ranks
    would be sqrt(2) wider -- and the same ledger epsilon."""
    d, steps, sigma, clip, lr, q, expected = 1000, 4, 1.3, 0.7, 1.0, 1e-9, 10.0
    x, y = _data(40, d, seed=2)
    start = PrototypeModel(GLVQLayer(d, 3, prototypes=torch.zeros(3, d, dtype=torch.float64)), [0, 1, 2])
    recipe = fixed_noise_recipe(q, steps, max_grad_norm=clip, sgd=SGDSettings(lr=lr))
    settings = dict(noise_multiplier=sigma, expected_batch_size=expected)
    model, result, ledger = launch_dp_sgd(start, [(x[:20], y[:20]), (x[20:], y[20:])], recipe, noise_seed=5, **settings)
    assert result.steps == steps and not result.stopped_by_budget
    moved = model.layer.prototypes.detach().flatten().numpy()  # 3000 coordinates
    std = math.sqrt(steps) * lr * sigma * clip / expected
    assert stats.kstest(moved, stats.norm(scale=std).cdf).pvalue > 1e-3  # seeded: deterministic
    assert moved.std() == pytest.approx(std, rel=0.05)

    single_ledger = PrivacyLedger()
    single = PrototypeModel(GLVQLayer(d, 3, prototypes=torch.zeros(3, d, dtype=torch.float64)), [0, 1, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        fit_dp_sgd(single, x, y, recipe, ledger=single_ledger, generator=torch.Generator().manual_seed(5), **settings)
    assert single.layer.prototypes.detach().std().item() == pytest.approx(std, rel=0.05)
    assert ledger.get_epsilon(1e-5) == pytest.approx(single_ledger.get_epsilon(1e-5), rel=1e-9)
    (event,) = ledger.events  # the per-step records merge into one event of T steps
    assert (event.count, event.sampling_rate, event.noise_multiplier) == (steps, q, sigma)


def test_each_rank_samples_its_shard_at_the_global_rate_with_its_own_coins():
    """The union of the ranks' batches is a Poisson sample at q of all records (not 2q),
    and a reproducible run derives different coins per rank."""
    dp0 = DataParallel(None, 0, 2, torch.device("cpu"))
    dp1 = DataParallel(None, 1, 2, torch.device("cpu"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        from dp_proto.privacy.randomness import seeded_generator

        run = seeded_generator(3)
    g0, g1 = dp0.sampling_generator(run, "cpu"), dp1.sampling_generator(run, "cpu")
    assert g0 is run and g1 is not run
    a, b = torch.rand(8, generator=g0), torch.rand(8, generator=g1)
    assert not torch.equal(a, b)
    fresh = dp1.sampling_generator(None, "cpu")
    assert fresh.initial_seed() != dp1.sampling_generator(None, "cpu").initial_seed()


def _mismatch_worker(rank: int, world_size: int, x, y) -> None:
    model = PrototypeModel(GLVQLayer(3, 3, dtype=torch.float64), [0, 1, 2])
    fit_dp_sgd(
        model,
        x,
        y,
        fixed_noise_recipe(0.1 * (1 + rank), 3),  # rank 1 at another rate: refused before any step
        ledger=PrivacyLedger(),
        expected_batch_size=5.0,
        noise_multiplier=1.0,
        distributed=True,
    )


def test_ranks_with_different_public_settings_are_refused():
    x, y = _data(20, 3, seed=3)
    with pytest.raises(NodeProcessError, match="sampling_rate"):
        launch_workers(_mismatch_worker, [(x[:10], y[:10]), (x[10:], y[10:])], timeout=120)


def _killed_rank_worker(rank: int, world_size: int, x, y, report: str) -> None:
    """Rank 1 dies in its third all-reduce; rank 0 must raise and report its ledger."""
    if rank == 1:
        original = DataParallel.all_reduce_sum
        calls = {"n": 0}

        def dying(self, tensor, **kwargs):
            calls["n"] += 1
            if calls["n"] == 3:
                os._exit(1)  # a killed process: no exception, no cleanup
            return original(self, tensor, **kwargs)

        DataParallel.all_reduce_sum = dying  # type: ignore[method-assign]
    ledger = PrivacyLedger()
    model = PrototypeModel(GLVQLayer(3, 3, dtype=torch.float64), [0, 1, 2])
    try:
        fit_dp_sgd(
            model,
            x,
            y,
            fixed_noise_recipe(0.5, 20, max_grad_norm=1.0),
            ledger=ledger,
            expected_batch_size=10.0,
            noise_multiplier=1.0,
            distributed=True,
        )
    except DataParallelError as err:
        steps = sum(e.count for e in ledger.events)
        with open(report, "w") as fh:
            json.dump({"error": str(err), "ledger_steps": steps}, fh)
        raise


def test_a_killed_rank_fails_the_run_loudly_and_charges_only_steps_that_started(tmp_path):
    x, y = _data(40, 3, seed=4)
    report = tmp_path / "rank0.json"
    with pytest.raises(NodeProcessError, match="DataParallelError"):
        launch_workers(_killed_rank_worker, [(x[:20], y[:20], str(report)), (x[20:], y[20:], str(report))], timeout=120)
    seen = json.loads(report.read_text())
    assert "a peer rank stopped or died" in seen["error"]
    # steps 1 and 2 ran; step 3 was spent before its noise and never completed; 17 never started
    assert seen["ledger_steps"] == 3


def test_distributed_needs_a_process_group_and_the_fused_engine():
    x, y = _data(20, 3, seed=5)
    model = PrototypeModel(GLVQLayer(3, 3, dtype=torch.float64), [0, 1, 2])
    kwargs = dict(noise_multiplier=1.0, expected_batch_size=2.0)
    recipe = fixed_noise_recipe(0.1, 2, max_grad_norm=1.0)
    with pytest.raises(RuntimeError, match="initialised torch.distributed"):
        fit_dp_sgd(model, x, y, recipe, ledger=PrivacyLedger(), distributed=True, **kwargs)
    opacus = fixed_noise_recipe(0.1, 2, max_grad_norm=1.0, engine="opacus")
    with pytest.raises(ValueError, match="fused engine"):
        fit_dp_sgd(model, x, y, opacus, ledger=PrivacyLedger(), distributed=True, **kwargs)
    with pytest.raises(TypeError, match="generator"):
        launch_dp_sgd(model, [(x, y)], recipe, generator=torch.Generator(), **kwargs)  # type: ignore[call-arg]
