"""Poisson sampling for DP-SGD, with float64 coins.

Every record joins a batch independently with probability ``q``: the sampling that the
accountant's Poisson-subsampled Gaussian events assume. ``poisson_batch_index`` draws
one batch's indices; ``PoissonBatchSampler`` yields such batches to a ``DataLoader``;
``PoissonDataLoader`` is the loader every Opacus-based trainer of the library uses.

Opacus' own ``DPDataLoader`` compares float32 uniforms with ``q``, which rounds the rate
up by as much as ``2^-24`` absolute (0.6 per mille of ``q = 1e-4``) while the
ledger accounts ``q``. Here the gaps between members are geometric variates drawn in
float64 (``Tensor.geometric_``), so the rate is ``q`` to float64 rounding.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler, TensorDataset
from torch.utils.data.dataloader import default_collate

from dp_proto.privacy.calibration import check_sampling_rate

__all__ = ["PoissonBatchSampler", "PoissonDataLoader", "poisson_batch_index"]


def poisson_batch_index(
    n: int, sampling_rate: float, generator: torch.Generator | None, device: torch.device | str
) -> Tensor:
    """Indices ``(B,)`` of a Poisson sample: each of ``n`` records independently with
    probability ``q = sampling_rate`` (``B`` varies, and may be 0).

    Drawn as a Bernoulli process in ``O(q n)`` rather than ``O(n)``: the gaps between
    successive members are i.i.d. geometric, ``P(gap = k) = (1 - q)^(k-1) q``
    (``Tensor.geometric_`` in float64); the same distribution as ``rand(n) < q``.
    """
    if sampling_rate >= 1.0:
        return torch.arange(n, device=device)
    gen_device = generator.device if generator is not None else torch.device(device)
    chunks, last, expected = [], -1.0, sampling_rate * n
    while True:
        k = max(int(expected + 6.0 * math.sqrt(expected + 1.0)) + 8, 16)
        gaps = torch.empty(k, dtype=torch.float64, device=gen_device).geometric_(sampling_rate, generator=generator)
        positions = torch.cumsum(gaps, 0).add_(last)  # exact: integers far below 2^53
        end = float(positions[-1])
        chunks.append(positions[positions < n])
        if end >= n:  # the process has run past the last record
            break
        last, expected = end, sampling_rate * (n - 1 - end)
    return (chunks[0] if len(chunks) == 1 else torch.cat(chunks)).to(device=device, dtype=torch.long)


class PoissonBatchSampler(Sampler[list[int]]):
    """Batches of ``poisson_batch_index(num_samples, sample_rate, generator)``,
    ``int(1 / sample_rate)`` per pass (as Opacus' sampler: a public number).

    ``sample_rate`` and ``generator`` carry Opacus' attribute names, which the DP
    trainers read to check the loader."""

    def __init__(self, *, num_samples: int, sample_rate: float, generator: torch.Generator | None):
        if num_samples < 0:
            raise ValueError(f"num_samples must be a non-negative integer, got {num_samples!r}")
        self.num_samples = int(num_samples)
        self.sample_rate = check_sampling_rate(sample_rate, "sample_rate")
        self.generator = generator
        self.steps = int(1 / self.sample_rate)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[list[int]]:
        for _ in range(self.steps):
            yield poisson_batch_index(self.num_samples, self.sample_rate, self.generator, "cpu").tolist()


class _CollateWithEmpty:
    """``default_collate``, except that an empty batch becomes tensors of length 0 with
    the shapes and dtypes of the dataset's records (an empty Poisson batch still takes
    its noisy step)."""

    def __init__(self, record: tuple[Tensor, ...]):
        self.empty = [(tuple(t.shape), t.dtype) for t in record]

    def __call__(self, batch: list) -> list[Tensor]:
        if not batch:
            return [torch.zeros((0, *shape), dtype=dtype) for shape, dtype in self.empty]
        return default_collate(batch)


def _record_template(dataset: Dataset) -> tuple[Tensor, ...]:
    """One record of ``dataset``, for the shapes of an empty batch; of a
    ``TensorDataset`` from its tensors, so that an empty one trains too (every batch
    empty: the neighbour of a one-record set)."""
    if isinstance(dataset, TensorDataset):
        return tuple(t.new_zeros(t.shape[1:]) for t in dataset.tensors)
    if len(dataset) == 0:  # type: ignore[arg-type]
        raise ValueError("an empty dataset needs to be a TensorDataset (whose tensors give the records' shapes)")
    return dataset[0]


class PoissonDataLoader(DataLoader):
    """A ``DataLoader`` over ``dataset`` (records are tuples of tensors) whose batches
    come from ``PoissonBatchSampler`` at rate ``sampling_rate`` (float64 coins from
    ``generator``); an empty batch is a tuple of length-0 tensors (every batch of an
    empty ``TensorDataset``). ``sample_rate`` as in Opacus' ``DPDataLoader``, which it
    replaces."""

    def __init__(self, dataset: Dataset, sampling_rate: float, generator: torch.Generator | None):
        sampler = PoissonBatchSampler(num_samples=len(dataset), sample_rate=sampling_rate, generator=generator)  # type: ignore[arg-type]
        super().__init__(dataset, batch_sampler=sampler, collate_fn=_CollateWithEmpty(_record_template(dataset)))
        self.sample_rate = sampler.sample_rate
