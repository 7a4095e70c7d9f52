"""A LightningDataModule for in-memory arrays with train/validation/test splits.

Scaling (and optional PCA) is fitted on the training split only, so validation
and test data never inform preprocessing.

For DP-SGD (``sampling_rate``) the training loader draws its Poisson sampling coins
from fresh operating-system entropy; ``seed`` governs the split and the non-private
shuffling only (``dp_proto.privacy.randomness``).
"""

from __future__ import annotations

import logging
import warnings
from typing import Literal

import lightning as L
import numpy as np
import torch
from sklearn.decomposition import PCA
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import MinMaxScaler, StandardScaler
from torch.utils.data import DataLoader, Subset, TensorDataset

from dp_proto._validation import check_finite_rows
from dp_proto.exceptions import DataValidationError, PrivacyLeakWarning
from dp_proto.privacy.calibration import check_sampling_rate
from dp_proto.privacy.curator import curator_log
from dp_proto.privacy.data_parallel import DataParallel
from dp_proto.privacy.domain import public_classes
from dp_proto.privacy.randomness import check_noise_seed, fresh_generator, seeded_generator
from dp_proto.privacy.sampling import PoissonDataLoader

__all__ = ["ArrayDataModule", "Scaling", "poisson_seed", "resumed_seed", "route_opacus_notices"]

Scaling = Literal["standard", "minmax", "none"]


class _CuratorOnly(logging.Filter):
    """Opacus' notice that a Poisson batch before the first non-empty one was empty
    depends on the private data (and the coins): it goes to the curator log instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("First batch is empty"):
            curator_log("opacus: %s", message)
            return False
        return True


def route_opacus_notices() -> None:
    """Send Opacus' data-dependent loader notices to the curator log
    (``dp_proto.privacy.curator``); idempotent."""
    logger = logging.getLogger("opacus.data_loader")
    if not any(isinstance(f, _CuratorOnly) for f in logger.filters):
        logger.addFilter(_CuratorOnly())


def poisson_seed(noise_seed: int) -> int:
    """The seed of the Poisson sampling coins of a run whose noise is reproducible with
    ``noise_seed``: a stream of its own (not the noise's), derived by ``SeedSequence``."""
    if noise_seed is None:
        raise ValueError("poisson_seed needs a noise_seed")
    noise_seed = check_noise_seed(noise_seed)
    return int(np.random.SeedSequence([noise_seed, 0x706F6973736F6E]).generate_state(1, np.uint64)[0])


def resumed_seed(seed: int, step: int) -> int:
    """The seed of a reproducible stream (noise or Poisson coins) resumed at ``step``:
    a stream of its own, derived from ``seed`` and ``step`` by ``SeedSequence``, so that a
    resumed run never replays the draws of the steps before ``step``."""
    state = np.random.SeedSequence([int(seed) % 2**64, int(step), 0x726573756D65]).generate_state(1, np.uint64)
    return int(state[0])


class ArrayDataModule(L.LightningDataModule):
    """Splits ``X (n, ...)`` and ``y (n,)`` into stratified train/val/test sets.

    Parameters
    ----------
    X : array, shape (n, d) or (n, C, H, W)
        The records.
    y : array, shape (n,)
        Any labels, mapped to indices ``0..c-1`` (``classes_``).
    val_size : float, default 0.1
        Fraction of all samples in the validation split (may be 0).
    test_size : float, default 0.2
        Fraction of all samples in the test split.
    scaling : {"standard", "minmax", "none"}, default "standard"
        Per-feature z-score, or min-max to ``[-1, 1]``, fitted on the training split.
        Applied to the flattened features; the input shape is kept.
    pca : int, optional
        Reduce flattened features to this many PCA components (fitted on the
        training split, after scaling). Output is then ``(n, pca)``.
    batch_size : int or None
        ``None`` gives one full batch (for L-BFGS).
    sampling_rate : float, optional
        For DP-SGD: the training loader is a ``dp_proto.privacy.PoissonDataLoader``
        (every record in every batch independently with this probability);
        ``batch_size`` is then ignored for training. Its sampling coins come from a
        generator seeded with fresh operating-system entropy (a new one for every
        training loader), never from ``seed``. Under a data-parallel trainer
        (``world_size > 1``, Lightning's DDP strategy with ``use_distributed_sampler=False``)
        rank ``r`` of ``R`` samples the training records at positions ``r, r + R, ...`` at
        the same global rate with coins of its own, so the union of the ranks' batches is
        one Poisson sample at ``sampling_rate`` (a distributed sampler with a per-rank
        batch would instead multiply the expected batch by ``R``).
    seed : int, default 0
        Seeds the split and the (non-private) shuffling.
    dtype : torch.dtype, default torch.float32
        Dtype of the tensors the loaders yield.
    sampling_seed : int, optional
        Makes the Poisson batches of ``sampling_rate`` reproducible (tests and
        benchmarks only): warns ``PrivacyLeakWarning``, since
        whoever knows it knows which records entered each step, which removes the
        amplification by subsampling the guarantee relies on. A training loader made when
        a fit resumes at a global step ``s > 0`` draws from ``resumed_seed(sampling_seed, s)``
        instead, so that a resumed run does not replay the first steps' batches.
    classes : array-like, optional
        The public label set (sorted into ``classes_``; a label of ``y`` outside it is
        an error, a class without records is kept). Default: the labels of ``y``.
    """

    def __init__(
        self,
        X,
        y,
        *,
        val_size: float = 0.1,
        test_size: float = 0.2,
        scaling: Scaling = "standard",
        pca: int | None = None,
        batch_size: int | None = 64,
        sampling_rate: float | None = None,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
        classes=None,
        sampling_seed: int | None = None,
    ) -> None:
        super().__init__()
        X = np.asarray(X)
        y = np.asarray(y)
        if not np.issubdtype(X.dtype, np.number):
            raise DataValidationError(f"X must be numeric, got dtype {X.dtype}")
        if X.ndim < 2 or y.shape != (X.shape[0],):
            raise DataValidationError(f"expected X (n, ...) and y (n,), got {X.shape} and {y.shape}")
        check_finite_rows(X.astype(np.float64, copy=False))
        for name, value in (("val_size", val_size), ("test_size", test_size)):
            if not 0 <= value < 1:
                raise ValueError(f"{name} must be in [0, 1), got {value}")
        if val_size + test_size >= 1:
            raise ValueError(f"val_size + test_size must be < 1, got {val_size + test_size}")
        if scaling not in ("standard", "minmax", "none"):
            raise ValueError(f"scaling must be 'standard', 'minmax' or 'none', got {scaling!r}")
        self.sampling_rate = None if sampling_rate is None else check_sampling_rate(sampling_rate)
        if sampling_seed is not None and sampling_rate is not None:
            seeded_generator(sampling_seed, warn=False)  # checks the seed
            warnings.warn(
                "ArrayDataModule: sampling_seed makes the Poisson batches reproducible; whoever knows it "
                "knows which records entered each DP-SGD step, which removes the amplification by "
                "subsampling. Use it for tests and benchmarks only",
                PrivacyLeakWarning,
                stacklevel=2,
            )
        self._sampling_seed = sampling_seed  # private: not a hyperparameter, never logged
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be positive or None, got {batch_size}")
        # build_data warns for private runs without a public label set
        self.classes_, self._y = public_classes(y, classes, "ArrayDataModule", warn=False)
        self._X = X
        self.val_size, self.test_size = val_size, test_size
        self.scaling, self.pca, self.batch_size, self.seed, self.dtype = scaling, pca, batch_size, seed, dtype
        self.input_shape: tuple[int, ...] = tuple(X.shape[1:]) if pca is None else (pca,)
        self._fitted = False

    @property
    def num_classes(self) -> int:
        return len(self.classes_)

    @property
    def num_features(self) -> int:
        return int(np.prod(self.input_shape))

    def setup(self, stage: str | None = None) -> None:
        if self._fitted:
            return
        idx = np.arange(len(self._y))
        n_val, n_test = round(len(idx) * self.val_size), round(len(idx) * self.test_size)
        train_idx, rest = train_test_split(idx, test_size=n_val + n_test, random_state=self.seed, stratify=self._y)
        if n_val > 0:
            val_idx, test_idx = train_test_split(rest, test_size=n_test, random_state=self.seed, stratify=self._y[rest])
        else:
            val_idx, test_idx = rest[:0], rest
        flat = self._X.reshape(len(self._X), -1).astype(np.float64)
        self.scaler = {"standard": StandardScaler(), "minmax": MinMaxScaler((-1, 1)), "none": None}[self.scaling]
        if self.scaler is not None:
            self.scaler.fit(flat[train_idx])
        self.pca_ = (
            PCA(self.pca, random_state=self.seed).fit(self._transform_flat(flat[train_idx], pca=False))
            if self.pca
            else None
        )
        self.splits = {
            name: self._dataset(flat[ids], self._y[ids])
            for name, ids in (("train", train_idx), ("val", val_idx), ("test", test_idx))
        }
        self._fitted = True

    def _transform_flat(self, flat: np.ndarray, *, pca: bool = True) -> np.ndarray:
        if len(flat) == 0:  # an empty split (val_size=0): nothing to transform
            width = self.pca if (pca and self.pca) else flat.shape[1]
            return np.zeros((0, width))
        out = self.scaler.transform(flat) if self.scaler is not None else flat
        if pca and self.pca_ is not None:
            out = self.pca_.transform(out)
        return out

    def _dataset(self, flat: np.ndarray, y: np.ndarray) -> TensorDataset:
        x = self._transform_flat(flat).reshape(len(flat), *self.input_shape)
        return TensorDataset(torch.as_tensor(x, dtype=self.dtype), torch.as_tensor(y, dtype=torch.long))

    def transform(self, X) -> torch.Tensor:
        """Apply the fitted preprocessing to new raw inputs ``(n, ...)``."""
        self.setup()
        flat = np.asarray(X, dtype=np.float64).reshape(len(X), -1)
        return torch.as_tensor(self._transform_flat(flat).reshape(len(flat), *self.input_shape), dtype=self.dtype)

    def inverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        """Map model-space points ``(W, d)`` (e.g. prototypes) back to raw input units."""
        self.setup()
        out = x.detach().cpu().double().numpy().reshape(len(x), -1)
        if self.pca_ is not None:
            out = self.pca_.inverse_transform(out)
        if self.scaler is not None:
            out = self.scaler.inverse_transform(out)
        return torch.as_tensor(out)

    def train_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole preprocessed training split ``(x, y)``."""
        self.setup()
        return self.splits["train"].tensors  # type: ignore[return-value]

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        self.setup()
        data = self.splits[split]
        size = self.batch_size or max(len(data), 1)
        generator = torch.Generator().manual_seed(self.seed) if shuffle else None
        return DataLoader(data, batch_size=size, shuffle=shuffle, generator=generator)

    def train_dataloader(self) -> DataLoader:
        if self.sampling_rate is not None:
            self.setup()
            route_opacus_notices()
            coins = fresh_generator() if self._sampling_seed is None else self._seeded_coins()
            rank, world_size = self._rank_and_world_size()
            data = self.splits["train"]
            if world_size > 1:  # this rank's shard, sampled at the global rate with coins of its own
                data = Subset(data, range(rank, len(data), world_size))
                coins = DataParallel(None, rank, world_size, torch.device("cpu")).sampling_generator(coins, "cpu")
            loader = PoissonDataLoader(data, self.sampling_rate, generator=coins)
            loader.data_parallel_shard = (rank, world_size)  # type: ignore[attr-defined]  (checked by the DP modules)
            return loader
        return self._loader("train", shuffle=self.batch_size is not None)

    def _rank_and_world_size(self) -> tuple[int, int]:
        """This process's rank and the number of training processes (``(0, 1)`` without a trainer)."""
        trainer = getattr(self, "trainer", None)
        if trainer is None:
            return 0, 1
        return int(getattr(trainer, "global_rank", 0)), int(getattr(trainer, "world_size", 1))

    def _seeded_coins(self) -> torch.Generator:
        """The reproducible coins of ``sampling_seed`` (warned at construction); a resumed
        fit (global step > 0 when the loader is made) gets a stream of its own."""
        base = int(self._sampling_seed or 0)  # called only with a sampling_seed
        step = int(self.trainer.global_step) if self.trainer is not None else 0
        return seeded_generator(base if step == 0 else resumed_seed(base, step), warn=False)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
