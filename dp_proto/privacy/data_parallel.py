"""The process group of a data-parallel DP-SGD run: one Poisson sample, one noise draw.

Both DP-SGD engines train across processes the same way (the fused engine,
``dp_proto.lvq.private.launch``; Opacus inside Lightning's DDP strategy,
``dp_proto.lvq.private.opacus_adapter.make_noise_sound(data_parallel=...)``):

* every rank holds a disjoint shard of the records and samples it at the *global*
  Poisson rate ``q`` with coins of its own (``DataParallel.sampling_generator``), so the
  union of the ranks' batches is a Poisson sample at ``q`` of all records;
* every rank clips and sums its per-sample gradients; rank 0 alone adds the Gaussian
  noise (``draws_noise``), and one all-reduce (sum) gives every rank the noisy total:
  the noise enters once, with the single-process standard deviation;
* the update is divided by the public global expected batch size, so the step -- and
  the ledger's ``(sigma, q, T)`` -- are those of one process on all the records.

A failed collective (a peer rank raised or was killed) raises ``DataParallelError``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn

from dp_proto.privacy.randomness import fresh_generator, noise_source, seeded_generator

__all__ = ["DataParallel", "DataParallelError"]


class DataParallelError(RuntimeError):
    """A collective of a data-parallel DP-SGD run failed (a peer rank stopped or died)."""


@dataclass(frozen=True)
class DataParallel:
    """This process's place in a data-parallel DP-SGD run.

    Attributes
    ----------
    group : ProcessGroup or None
        The ``torch.distributed`` group (None: the default group).
    rank, world_size : int
    device : torch.device
        Where the collectives' tensors live (the CPU for gloo).
    """

    group: Any
    rank: int
    world_size: int
    device: torch.device

    @classmethod
    def join(cls, group: Any, device: torch.device | str) -> DataParallel:
        """The running process group's view (``RuntimeError`` if none is initialised)."""
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                "distributed=True needs an initialised torch.distributed process group "
                "(torch.distributed.init_process_group, or launch_dp_sgd)"
            )
        comm = torch.device("cpu") if dist.get_backend(group) == "gloo" else torch.device(device)
        return cls(group, dist.get_rank(group), dist.get_world_size(group), comm)

    @property
    def draws_noise(self) -> bool:
        """Rank 0 adds the step's noise; the others send their clipped sums as they are."""
        return self.rank == 0

    @contextlib.contextmanager
    def _peer_failure(self, what: str) -> Iterator[None]:
        """A failed collective becomes ``DataParallelError`` naming ``what`` and this rank."""
        try:
            yield
        except Exception as err:  # gloo: a peer's socket closed; NCCL: a timeout
            raise DataParallelError(f"rank {self.rank}: {what} failed; a peer rank stopped or died ({err})") from err

    def _collective(self, what: str, op, tensor: Tensor) -> Tensor:
        buf = tensor.to(self.device)
        with self._peer_failure(what):
            op(buf)
        return buf.to(tensor.device)

    def _rank_zero(self) -> int:
        """The global rank of the group's rank 0 (the source of every broadcast)."""
        return dist.get_global_rank(self.group, 0) if self.group is not None else 0

    def all_reduce_sum(self, tensor: Tensor, *, what: str = "the all-reduce") -> Tensor:
        """The sum of ``tensor`` over all ranks (every rank receives it)."""
        return self._collective(what, lambda t: dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.group), tensor)

    def broadcast_parameters(self, model: nn.Module) -> None:
        """Every rank takes rank 0's parameters and buffers (the run's starting point)."""
        src = self._rank_zero()
        with torch.no_grad():
            for tensor in [*model.parameters(), *model.buffers()]:
                got = self._collective(
                    "the broadcast of the initial model",
                    lambda t: dist.broadcast(t, src=src, group=self.group),
                    tensor.detach(),
                )
                tensor.copy_(got)

    def broadcast_values(self, values: Sequence[float], *, what: str) -> list[float]:
        """Rank 0's ``values`` on every rank."""
        src = self._rank_zero()
        buf = torch.as_tensor(list(values), dtype=torch.float64, device=self.device)
        got = self._collective(what, lambda t: dist.broadcast(t, src=src, group=self.group), buf)
        return [float(v) for v in got.cpu()]

    def gather(self, values: Sequence[float], *, what: str) -> Tensor:
        """Every rank's ``values`` (``(world_size, len(values))`` float64)."""
        mine = torch.as_tensor(list(values), dtype=torch.float64, device=self.device)
        out = [torch.empty_like(mine) for _ in range(self.world_size)]
        with self._peer_failure(what):
            dist.all_gather(out, mine, group=self.group)
        return torch.stack(out).cpu()

    def check_same(self, names: Sequence[str], values: Sequence[float]) -> None:
        """``ValueError`` on every rank unless all ranks pass the same public ``values``."""
        table = self.gather(values, what="the check of the public settings")
        differ = [n for j, n in enumerate(names) if not torch.all(table[:, j] == table[0, j])]
        if differ:
            raise ValueError(
                f"the ranks of a data-parallel DP-SGD run must share their public settings; these differ: "
                f"{differ} ({table.tolist()})"
            )

    def sampling_generator(self, generator: torch.Generator | None, device: torch.device | str) -> torch.Generator:
        """The Poisson coins of this rank: rank 0 keeps the run's generator; another rank
        gets fresh entropy, or, when the run is reproducible, a seed derived from the
        run's seed and its rank (never the same coins as another rank)."""
        if self.rank == 0 and generator is not None:
            return generator
        if generator is None or noise_source(generator) != "reproducible":
            return fresh_generator(device)
        seed = np.random.SeedSequence([generator.initial_seed(), self.rank]).generate_state(1, dtype=np.uint64)[0]
        return seeded_generator(int(seed) >> 1, device, warn=False)
