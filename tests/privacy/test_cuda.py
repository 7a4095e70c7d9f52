"""Mechanisms and DP initialisation on CUDA tensors (skipped without a GPU)."""

import pytest
import torch

from dp_proto.privacy import (
    PrivacyLedger,
    dp_class_mean_prototypes,
    gaussian_mechanism,
    laplace_mechanism,
)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_mechanisms_keep_the_device_and_match_cpu_noise():
    value = torch.zeros(1000, device="cuda")
    out = laplace_mechanism(value, 1.0, 1.0, generator=torch.Generator().manual_seed(0))
    ref = laplace_mechanism(value.cpu(), 1.0, 1.0, generator=torch.Generator().manual_seed(0))
    assert out.device.type == "cuda"
    torch.testing.assert_close(out.cpu(), ref)
    assert gaussian_mechanism(value, 1.0, 1.0, 1e-5, secure=True).device.type == "cuda"


def test_dp_init_on_cuda():
    x = torch.rand(500, 4, device="cuda") * 2 - 1
    y = torch.randint(0, 3, (500,), device="cuda")
    ledger = PrivacyLedger()
    result = dp_class_mean_prototypes(x, y, 3, 1.0, ledger=ledger, generator=torch.Generator().manual_seed(0))
    assert result.prototypes.device.type == "cuda" and ledger.get_epsilon(0.0) == pytest.approx(1.0)
