"""Epoch time of data-parallel DP-SGD (fused engine) in two processes against one process.

The same DP-GMLVQ epoch (``int(1 / q)`` Poisson steps at rate ``q``) on the same records:

* ``single_1t``: one process, one intra-op thread;
* ``single_all``: one process with every core of the machine (torch's own parallelism);
* ``ddp2``: two processes (gloo, one thread each), each holding half of the records
  (``dp_proto.lvq.private.launch_dp_sgd``'s worker, timed inside the processes after
  they joined the group, so process start-up is not counted).

The records are synthetic (public): Gaussian classes in ``d`` dimensions. Used by
``benchmarks.dpsgd.private_pipelines`` (headline ``ddp2_over_single_epoch_time`` =
``ddp2 / single_1t``); run alone with ``python -m benchmarks.dpsgd.ddp_timing [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings

import torch
import torch.distributed as dist

from dp_proto._processes import launch_workers
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.lvq.layers import GMLVQLayer
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private import fit_dp_sgd
from dp_proto.lvq.private.dpsgd import SGDSettings, fixed_noise_recipe
from dp_proto.privacy.ledger import PrivacyLedger

__all__ = ["ddp_epoch_times"]


def _setting(quick: bool) -> dict:
    """``n`` records of ``d`` features, 10 classes, GMLVQ of rank ``r``, Poisson rate ``q``."""
    return dict(n=10_000, d=256, r=30, q=0.02, epochs=1) if quick else dict(n=40_000, d=784, r=60, q=0.02, epochs=2)


def _data(s: dict) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 10, (s["n"],), generator=g)
    centres = torch.randn(10, s["d"], generator=g)
    return centres[y] + 2.0 * torch.randn(s["n"], s["d"], generator=g), y


def _model(s: dict) -> PrototypeModel:
    torch.manual_seed(0)
    return PrototypeModel(GMLVQLayer(s["d"], 10, rank=s["r"]), list(range(10)))


def _fit(model: PrototypeModel, x: torch.Tensor, y: torch.Tensor, s: dict, distributed: bool) -> float:
    """Seconds of ``s["epochs"]`` epochs of DP-SGD (noise multiplier 1, C = 1, lr 0.1)."""
    steps = round(s["epochs"] * round(1 / s["q"]))
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        fit_dp_sgd(
            model,
            x,
            y,
            fixed_noise_recipe(s["q"], steps, max_grad_norm=1.0, sgd=SGDSettings(lr=0.1)),
            ledger=PrivacyLedger(),
            expected_batch_size=s["q"] * s["n"],
            noise_multiplier=1.0,
            distributed=distributed,
        )
    return (time.perf_counter() - start) / s["epochs"]


def _ddp_worker(rank: int, world_size: int, x: torch.Tensor, y: torch.Tensor, s: dict) -> float:
    _fit(_model(s), x, y, dict(s, epochs=0.1), distributed=True)  # warm-up: the group's first collectives
    dist.barrier()
    return _fit(_model(s), x, y, s, distributed=True)


def ddp_epoch_times(quick: bool = False) -> dict:
    """Seconds per epoch of one process (1 thread, all threads) and of two processes;
    ``ratio`` = two processes over one process with one thread."""
    s = _setting(quick)
    x, y = _data(s)
    threads = torch.get_num_threads()
    times = {}
    try:
        torch.set_num_threads(1)
        _fit(_model(s), x, y, dict(s, epochs=0.1), distributed=False)  # warm-up
        times["single_1t"] = _fit(_model(s), x, y, s, distributed=False)
        torch.set_num_threads(os.cpu_count() or 1)
        times["single_all"] = _fit(_model(s), x, y, s, distributed=False)
    finally:
        torch.set_num_threads(threads)
    half = s["n"] // 2
    shards = [(x[:half], y[:half], s), (x[half:], y[half:], s)]
    per_rank = launch_workers(_ddp_worker, shards, name="ddp-timing", timeout=1800, num_threads=1)
    times["ddp2"] = max(per_rank)
    return {
        "setting": s,
        "cpu_count": os.cpu_count(),
        "single_epoch_s": times["single_1t"],
        "single_all_threads_epoch_s": times["single_all"],
        "ddp2_epoch_s": times["ddp2"],
        "ratio": times["ddp2"] / times["single_1t"],
        "ratio_vs_all_threads": times["ddp2"] / times["single_all"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller setting (seconds)")
    args = parser.parse_args(argv)
    print(json.dumps({"benchmark": "ddp_timing", "results": ddp_epoch_times(args.quick)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
