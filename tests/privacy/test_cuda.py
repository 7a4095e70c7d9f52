"""Mechanisms and DP initialisation on CUDA tensors (skipped without a GPU)."""

import pytest
import torch

from dp_proto.lvq.private import dp_class_mean_prototypes
from dp_proto.privacy import PrivacyLedger, gaussian_mechanism, laplace_mechanism

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_mechanisms_keep_the_device_and_match_cpu_noise():
    value = torch.zeros(1000, device="cuda")
    out = laplace_mechanism(value, 1.0, 1.0, generator=torch.Generator().manual_seed(0), ledger=None)
    ref = laplace_mechanism(value.cpu(), 1.0, 1.0, generator=torch.Generator().manual_seed(0), ledger=None)
    assert out.device.type == "cuda"
    torch.testing.assert_close(out.cpu(), ref)
    assert gaussian_mechanism(value, 1.0, 1.0, 1e-5, secure_mode=True, ledger=None).device.type == "cuda"


def test_dp_init_on_cuda():
    x = torch.rand(500, 4, device="cuda") * 2 - 1
    y = torch.randint(0, 3, (500,), device="cuda")
    ledger = PrivacyLedger()
    result = dp_class_mean_prototypes(x, y, 3, 1.0, ledger=ledger, generator=torch.Generator().manual_seed(0))
    assert result.prototypes.device.type == "cuda" and ledger.get_epsilon(0.0) == pytest.approx(1.0)


@pytest.mark.parametrize("layer_kind", ["glvq", "gmlvq"])
@pytest.mark.parametrize("gen_device", ["cpu", "cuda"])
def test_fused_dp_sgd_on_cuda(layer_kind, gen_device):
    """The fused engine keeps everything on the GPU, with a CPU or a CUDA generator."""
    from dp_proto.lvq import GLVQLayer, GMLVQLayer, PrototypeModel
    from dp_proto.lvq.private.dpsgd import SGDSettings, fit_dp_sgd, fixed_noise_recipe

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(2000, 8, device="cuda", generator=g) * 2 - 1
    y = (x[:, 0] > 0).long()
    layer = (GLVQLayer(8, 2) if layer_kind == "glvq" else GMLVQLayer(8, 2, omega_init="identity")).cuda()
    model = PrototypeModel(layer, [0, 1])
    ledger = PrivacyLedger()
    result = fit_dp_sgd(
        model,
        x,
        y,
        fixed_noise_recipe(0.05, 60, max_grad_norm=1.0, engine="fused", sgd=SGDSettings(lr=0.5)),
        ledger=ledger,
        expected_batch_size=0.05 * len(y),
        noise_multiplier=1.0,
        generator=torch.Generator(device=gen_device).manual_seed(1),
    )
    assert result.steps == 60 and layer.prototypes.device.type == "cuda"
    assert (model.predict(x) == y).float().mean().item() > 0.8
