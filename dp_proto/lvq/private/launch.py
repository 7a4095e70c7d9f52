"""Launching data-parallel DP-SGD for prototype layers: one Poisson sample, one noise draw, many processes.

Every rank of a ``torch.distributed`` process group holds a disjoint shard of the
training records. One step of ``fit_dp_sgd(..., distributed=True)`` (fused engine) is
the single-process step of ``dp_proto.lvq.private.fused`` with its sum split across
the ranks:

1. Poisson sampling at the global rate ``q`` on every rank's shard: each record joins
   the batch independently with probability ``q``, whichever rank holds it, so the
   union of the ranks' batches is exactly a Poisson sample of all records (a
   ``DistributedSampler`` with a per-rank batch size would instead double the expected
   batch for two ranks -- the accountant's ``q`` would be wrong). Each rank draws its
   coins from its own generator: fresh entropy per process, or, for a reproducible run,
   a seed derived from the run's seed and the rank (equal coins on two ranks would tie
   the membership of two records, which subsampling amplification does not allow);
2. per-sample gradients clipped to ``C`` and summed on each rank;
3. rank 0 alone adds ``N(0, (sigma C)^2)`` noise to its partial sum, and one
   ``all_reduce`` (sum) gives every rank ``sum_i clip(g_i) + noise``: the noise enters
   once, with the single-process standard deviation, whatever the number of ranks;
4. every rank divides by the public expected batch size and steps its optimizer; the
   ranks start from rank 0's parameters (broadcast) and apply the same update, so the
   models stay identical.

Accounting: one run, one ledger. Every rank runs the same public plan (``sigma``,
``q``, ``T``, checked equal on all ranks before the first step) and spends each step in
its ledger *before* the step's noise is drawn (step by step, not epoch by epoch, so a
run that dies charges only the steps that started). Rank 0's ledger is the run's; the
others hold the same record (checked at the end). A rank that fails (an exception, a
killed process) makes the next collective fail on every other rank: they raise
``DataParallelError`` naming the step, and nothing further is released.

``launch_dp_sgd`` runs such a fit in one process per shard on localhost (gloo), for
tests, benchmarks and single-machine use; with NCCL across GPUs or machines, initialise
the process group yourself and call ``fit_dp_sgd(..., distributed=True)`` on every rank.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from dp_proto._processes import launch_workers, to_cpu
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private.dpsgd import DPSGD, fit_dp_sgd
from dp_proto.privacy.data_parallel import DataParallelError
from dp_proto.privacy.ledger import PrivacyLedger
from dp_proto.privacy.randomness import noise_generator

__all__ = ["launch_dp_sgd"]


# --------------------------------------------------------------------------- launcher
def _dp_sgd_worker(
    rank: int,
    world_size: int,
    model: PrototypeModel,
    x: Tensor,
    y: Tensor,
    recipe: DPSGD,
    ledger: PrivacyLedger,
    noise_seed: int | None,
    fit_kwargs: dict[str, Any],
) -> tuple[PrototypeModel, Any, PrivacyLedger]:
    generator = None if noise_seed is None else noise_generator(noise_seed, x.device, owner="launch_dp_sgd")
    result = fit_dp_sgd(model, x, y, recipe, ledger=ledger, generator=generator, distributed=True, **fit_kwargs)
    return to_cpu(model), result, ledger


def launch_dp_sgd(
    model: PrototypeModel,
    shards: Sequence[tuple[Tensor, Tensor]],
    recipe: DPSGD,
    *,
    expected_batch_size: float,
    noise_multiplier: float | None = None,
    ledger: PrivacyLedger | None = None,
    noise_seed: int | None = None,
    timeout: float = 600.0,
    num_threads: int | None = None,
) -> tuple[PrototypeModel, Any, PrivacyLedger]:
    """``fit_dp_sgd(model, ..., recipe)`` (fused engine) with one process per shard on localhost.

    Parameters
    ----------
    model : PrototypeModel
        The starting model (every rank starts from this one; it is not modified).
    shards : sequence of (x (n_r, d), y (n_r,))
        The disjoint parts of the training data; rank ``r`` receives ``shards[r]`` only.
    recipe : DPSGD
        The run's public settings (the same on every rank).
    expected_batch_size : float
        The public normaliser of the noisy gradient sums: ``q`` times a public estimate
        of all records (every shard's).
    noise_multiplier : float, optional
        As in ``fit_dp_sgd`` (default: the one the recipe calibrates).
    ledger : PrivacyLedger, optional
        The run's ledger (a copy goes to every rank; the returned one is rank 0's).
    noise_seed : int, optional
        Reproducible noise and coins (warns ``PrivacyLeakWarning``); default fresh entropy.
    timeout, num_threads
        See ``dp_proto._processes.launch_workers``.

    Returns
    -------
    (model, DPSGDResult, PrivacyLedger) of rank 0 (the other ranks' models and ledgers
    are checked equal to it).
    """
    if len(shards) < 1:
        raise ValueError("launch_dp_sgd needs at least one shard")
    ledger = ledger if ledger is not None else PrivacyLedger()
    fit_kwargs = {"expected_batch_size": expected_batch_size, "noise_multiplier": noise_multiplier}
    args = [(copy.deepcopy(model), x, y, recipe, ledger, noise_seed, fit_kwargs) for x, y in shards]
    results = launch_workers(
        _dp_sgd_worker, args, name="dp-sgd", timeout=timeout, num_threads=num_threads, preload=("dp_proto",)
    )
    first_model, first_result, first_ledger = results[0]
    reference = [*first_model.parameters(), *first_model.buffers()]
    for rank, (other, result, other_ledger) in enumerate(results[1:], start=1):
        state = [*other.parameters(), *other.buffers()]
        if (
            any(not torch.equal(a, b) for a, b in zip(reference, state, strict=True))
            or result.steps != first_result.steps
        ):
            raise DataParallelError(f"rank {rank} ended with another model than rank 0")
        if len(other_ledger.events) != len(first_ledger.events):
            raise DataParallelError(f"rank {rank}'s ledger disagrees with rank 0's")
    return first_model, first_result, first_ledger
