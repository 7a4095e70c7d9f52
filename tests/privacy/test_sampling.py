"""Poisson sampling with float64 coins: the rate the ledger accounts is the rate drawn."""

import math

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from dp_proto.lightning.dp_module import check_poisson_loader
from dp_proto.privacy import PoissonDataLoader
from dp_proto.privacy.sampling import PoissonBatchSampler, poisson_batch_index


def test_the_rate_below_float32_resolution_is_the_rate_drawn():
    # A float32 coin rand() < q is a multiple of 2^-24: at q = 2^-26 it admits a record
    # with probability 2^-24, four times q. The float64 geometric gaps draw q itself.
    q, n, batches = 2.0**-26, 2**32, 400
    generator = torch.Generator().manual_seed(7)
    sizes = [poisson_batch_index(n, q, generator, "cpu").numel() for _ in range(batches)]
    expected = q * n  # 64 per batch
    mean = sum(sizes) / batches
    assert abs(mean - expected) < 5 * math.sqrt(expected / batches)  # float32 coins: about 256


def test_the_loader_yields_poisson_batches_and_empty_ones_with_the_records_shapes():
    data = TensorDataset(torch.randn(40, 3, dtype=torch.float64), torch.arange(40))
    loader = PoissonDataLoader(data, 0.01, generator=torch.Generator().manual_seed(0))
    assert len(loader) == 100 and loader.sample_rate == 0.01
    batches = list(loader)
    assert any(len(y) == 0 for _, y in batches)
    for x, y in batches:
        assert x.shape == (len(y), 3) and x.dtype == torch.float64 and y.dtype == torch.int64
    for _, y in batches:  # a record joins a batch at most once
        assert len(y.unique()) == len(y)


def test_an_empty_tensor_dataset_trains_like_its_one_record_neighbour():
    """``D = {}`` is the neighbour of a one-record set: the loader yields empty batches of
    the records' shapes, and the Opacus engine runs, where both used to raise."""
    from dp_proto.lvq import GLVQLayer, PrototypeModel
    from dp_proto.lvq.private import fit_dp_sgd
    from dp_proto.lvq.private.dpsgd import fixed_noise_recipe
    from dp_proto.privacy import PrivacyLedger

    empty = TensorDataset(torch.zeros(0, 3, dtype=torch.float64), torch.zeros(0, dtype=torch.long))
    batches = list(PoissonDataLoader(empty, 0.5, generator=None))
    assert len(batches) == 2 and all(x.shape == (0, 3) and y.shape == (0,) for x, y in batches)
    for n in (0, 1):
        model = PrototypeModel(GLVQLayer(3, 2, dtype=torch.float64), [0, 1])
        recipe = fixed_noise_recipe(1.0, 2, engine="opacus")
        x, y = torch.zeros(n, 3, dtype=torch.float64), torch.zeros(n, dtype=torch.long)
        result = fit_dp_sgd(model, x, y, recipe, ledger=PrivacyLedger(), expected_batch_size=1.0, noise_multiplier=1.0)
        assert result.steps == 2
    with pytest.raises(ValueError, match="TensorDataset"):
        PoissonDataLoader([], 0.5, generator=None)


def test_the_sampler_refuses_a_rate_outside_zero_one_and_a_negative_size():
    with pytest.raises(ValueError, match="sample_rate"):
        PoissonBatchSampler(num_samples=10, sample_rate=0.0, generator=None)
    with pytest.raises(ValueError, match="num_samples"):
        PoissonBatchSampler(num_samples=-1, sample_rate=0.5, generator=None)


def test_dp_training_refuses_a_shuffled_loader_and_opacus_float32_coins():
    from opacus.data_loader import DPDataLoader

    data = TensorDataset(torch.randn(20, 2), torch.arange(20))
    check_poisson_loader(PoissonDataLoader(data, 0.1, generator=None), 0.1)
    with pytest.raises(ValueError, match="float64 coins"):
        check_poisson_loader(DPDataLoader(data, sample_rate=0.1), 0.1)
    with pytest.raises(ValueError, match="float64 coins"):
        check_poisson_loader(DataLoader(data, batch_size=4, shuffle=True), 0.1)
    with pytest.raises(ValueError, match="calibrated"):
        check_poisson_loader(PoissonDataLoader(data, 0.2, generator=None), 0.1)
