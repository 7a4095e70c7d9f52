"""DPLVQModule under Lightning's DDP strategy in two CPU processes (gloo): each rank
Poisson-samples its shard at the global rate, the noise enters once with the
single-process standard deviation, the ledgers agree with a one-process run's, and a
trainer that would hand out a distributed sampler is refused before any step."""

from __future__ import annotations

import math
import os
import warnings

import lightning as L
import numpy as np
import pytest
import torch
from scipy import stats

from dp_proto._processes import NodeProcessError, launch_workers
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.lightning import ArrayDataModule, DPLVQModule
from dp_proto.lvq import GLVQLayer, PrototypeModel
from dp_proto.privacy import PrivacyLedger
from dp_proto.privacy.randomness import seeded_generator

pytestmark = pytest.mark.filterwarnings("ignore")  # Lightning's notices about tiny CPU runs

# q small: the batches are mostly empty and a sampled record moves the update by at most
# C / E = 0.07 in norm, against noise of norm ~6: the update is the step's noise
D, STEPS, SIGMA, CLIP, LR, EXPECTED, Q = 600, 3, 1.3, 0.7, 1.0, 10.0, 1e-3


def _as_local_rank(rank: int) -> None:
    """Tell Lightning the processes exist already (launched by us, group initialised)."""
    os.environ["LOCAL_RANK"] = str(rank)
    os.environ["NODE_RANK"] = "0"


def _module(q: float, seed: int | None) -> DPLVQModule:
    model = PrototypeModel(GLVQLayer(D, 3, prototypes=torch.zeros(3, D)), [0, 1, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        generator = None if seed is None else seeded_generator(seed)
    return DPLVQModule(
        model,
        ledger=PrivacyLedger(),
        noise_multiplier=SIGMA,
        max_grad_norm=CLIP,
        sampling_rate=q,
        expected_batch_size=EXPECTED,
        optimizer="sgd",
        lr=LR,
        momentum=0.0,
        generator=generator,
    )


def _data() -> ArrayDataModule:
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(60, D)), np.arange(60) % 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        return ArrayDataModule(
            X, y, scaling="none", sampling_rate=Q, val_size=0.0, test_size=0.2, seed=0, sampling_seed=3
        )


def _trainer(devices: int, **kwargs) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_steps=STEPS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        **kwargs,
    )


def _ddp_worker(rank: int, world_size: int, seed: int | None, distributed_sampler: bool):
    module = _module(Q, seed)
    trainer = _trainer(world_size, use_distributed_sampler=distributed_sampler)
    trainer.fit(module, datamodule=_data())
    return module.model.layer.prototypes.detach().clone(), module.ledger, module.steps_recorded


def test_ddp_noise_once_with_the_single_process_std_and_the_same_ledger():
    results = launch_workers(
        _ddp_worker, [(7, False), (7, False)], worker_setup=_as_local_rank, timeout=300, num_threads=1
    )
    (w0, ledger0, steps0), (w1, ledger1, steps1) = results
    assert steps0 == steps1 == STEPS
    torch.testing.assert_close(w0, w1, rtol=0, atol=0)  # the ranks hold one model
    std = math.sqrt(STEPS) * LR * SIGMA * CLIP / EXPECTED  # noise twice would be sqrt(2) wider
    moved = w0.flatten().double().numpy()  # 1800 coordinates
    assert stats.kstest(moved, stats.norm(scale=std).cdf).pvalue > 1e-3  # seeded: deterministic
    assert moved.std() == pytest.approx(std, rel=0.06)

    single = _module(Q, 7)
    _trainer(1).fit(single, datamodule=_data())
    assert single.model.layer.prototypes.detach().double().std().item() == pytest.approx(std, rel=0.06)
    for ledger in (ledger0, ledger1):
        assert ledger.get_epsilon(1e-5) == pytest.approx(single.ledger.get_epsilon(1e-5), rel=1e-9)
        (event,) = ledger.events
        assert (event.count, event.noise_multiplier) == (STEPS, SIGMA)


def _noise_free_worker(rank: int, world_size: int):
    """sigma = 0, q = 1: every step is the clipped mean over all training records."""
    torch.manual_seed(0)
    model = PrototypeModel(GLVQLayer(D, 3, prototypes=torch.randn(3, D) * 0.1), [0, 1, 2])
    module = DPLVQModule(
        model,
        ledger=PrivacyLedger(),
        noise_multiplier=0.0,
        max_grad_norm=0.05,  # small: most per-sample gradients are clipped
        sampling_rate=1.0,
        expected_batch_size=EXPECTED,
        optimizer="sgd",
        lr=0.5,
        momentum=0.0,
    )
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(60, D)), np.arange(60) % 3
    dm = ArrayDataModule(X, y, scaling="none", sampling_rate=1.0, val_size=0.0, test_size=0.2, seed=0)
    _trainer(world_size, use_distributed_sampler=False).fit(module, datamodule=dm)
    return module.model.layer.prototypes.detach().clone()


def test_ddp_noise_free_full_batch_trajectory_equals_one_process():
    """Opacus' clipped sums of the two shards, all-reduced, are the one-process sum."""
    w0, w1 = launch_workers(_noise_free_worker, [(), ()], worker_setup=_as_local_rank, timeout=300, num_threads=1)
    (single,) = launch_workers(_noise_free_worker, [()], worker_setup=_as_local_rank, timeout=300, num_threads=1)
    torch.testing.assert_close(w0, w1, rtol=0, atol=0)
    torch.manual_seed(0)
    start = torch.randn(3, D) * 0.1
    assert (single - start).norm() > 0.02  # the steps moved the prototypes (by about 0.05)
    torch.testing.assert_close(w0, single, rtol=1e-5, atol=1e-6)


def test_ddp_with_lightnings_distributed_sampler_is_refused_before_any_step():
    with pytest.raises(NodeProcessError, match="use_distributed_sampler=False"):
        launch_workers(_ddp_worker, [(None, True), (None, True)], worker_setup=_as_local_rank, timeout=300)


def test_each_rank_samples_its_own_shard_at_the_global_rate():
    """The data module's training loader under a 2-rank trainer: disjoint shards covering
    the training split, the module's rate, different coins per rank."""

    class FakeTrainer:
        def __init__(self, rank):
            self.global_rank, self.world_size, self.global_step = rank, 2, 0

    loaders = []
    for rank in (0, 1):
        dm = _data()
        dm.setup()
        dm.trainer = FakeTrainer(rank)  # what Lightning attaches during fit
        loaders.append(dm.train_dataloader())
    n = len(dm.splits["train"])
    shards = [set(loader.dataset.indices) for loader in loaders]
    assert shards[0].isdisjoint(shards[1]) and shards[0] | shards[1] == set(range(n))
    assert [loader.data_parallel_shard for loader in loaders] == [(0, 2), (1, 2)]
    assert all(loader.batch_sampler.sample_rate == Q for loader in loaders)
    g0, g1 = (loader.batch_sampler.generator for loader in loaders)
    assert g0.initial_seed() != g1.initial_seed()
