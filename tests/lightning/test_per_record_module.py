"""``DPLVQModule(per_record=True)``: every record differentiated alone inside Lightning."""

from __future__ import annotations

import warnings

import pytest
import torch
from sklearn.datasets import load_iris
from torch import nn

from dp_proto.experiments.lvq import DEFAULT_CONFIG, build_private_module, merge_config
from dp_proto.lightning import ArrayDataModule, DPLVQModule, PrivacySpendCallback
from dp_proto.lvq import GMLVQLayer, PrototypeModel
from dp_proto.lvq.private.per_record import per_record_clipped_sum
from dp_proto.privacy import PrivacyLedger, PublicBoundsScaler
from dp_proto.privacy.testing import capture_releases
from tests._checkpoints import cpu_trainer
from tests.lvq.private.clipped_sums import engine_sum

Q = 0.1  # 10 Poisson steps per epoch


def _data():
    X, y = load_iris(return_X_y=True)
    return ArrayDataModule(PublicBoundsScaler(0.0, 8.0).fit_transform(X), y, scaling="none", sampling_rate=Q, seed=0)


def _module(ledger, per_record, noise=2.0):
    torch.manual_seed(0)  # the same backbone weights for both modules
    model = PrototypeModel(
        GMLVQLayer(3, 3, prototypes=torch.rand(3, 3, generator=torch.Generator().manual_seed(1))),
        [0, 1, 2],
        backbone=nn.Sequential(nn.Linear(4, 3), nn.Tanh()),
    )
    return DPLVQModule(
        model,
        ledger=ledger,
        noise_multiplier=noise,
        max_grad_norm=1.0,
        sampling_rate=Q,
        expected_batch_size=10.0,
        lr=0.05,
        per_record=per_record,
    )


def _fit(module, ledger, epochs=1):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's notes on workers and logging
        cpu_trainer(epochs, [PrivacySpendCallback(ledger)]).fit(module, datamodule=_data())


def test_a_per_record_module_records_and_noises_every_step_and_trains_the_backbone():
    ledger = PrivacyLedger()
    module = _module(ledger, per_record=True)
    before = module.model.backbone[0].weight.detach().clone()
    with capture_releases() as recorder:
        _fit(module, ledger, epochs=2)
    steps = [r for r in recorder.releases if r.name == "dp_sgd"]
    assert len(steps) == module.steps_recorded == 20  # one release of the whole sum per step
    assert all(r.pre_noise.dtype == torch.float64 and r.output is not None for r in steps)
    assert ledger.get_epsilon(1e-5) > 0
    assert not torch.equal(before, module.model.backbone[0].weight)
    assert module.model.layer.prototypes.dtype == torch.float64


def test_a_training_step_backpropagates_the_noisy_per_record_sum():
    """The surrogate's gradient is the noisy sum over the public expected batch size, and
    the noised sum is the per-record clipped sum, which matches Opacus' hooks away from
    ties and kinks."""
    module = _module(PrivacyLedger(), per_record=True)
    module.configure_optimizers()
    gen = torch.Generator().manual_seed(3)
    x, y = torch.rand(9, 4, generator=gen) * 8, torch.arange(9) % 3
    with capture_releases() as recorder:
        module.training_step((x, y), 0).backward()
    (release,) = [r for r in recorder.releases if r.name == "dp_sgd"]
    expected, _ = per_record_clipped_sum(module.model, x, y, 1.0)
    assert torch.equal(release.pre_noise, expected)
    hooks = engine_sum("hooks", module.model, x, y, 1.0)
    assert torch.allclose(expected, hooks.double(), rtol=1e-5, atol=1e-6)  # float32 backbone
    grads = torch.cat([p.grad.reshape(-1).double() for p in module.model.parameters()])
    assert torch.allclose(grads, release.output / 10.0, rtol=1e-6, atol=1e-7)


def test_per_record_is_a_hyperparameter_of_the_checkpoint():
    module = _module(PrivacyLedger(), per_record=True)
    assert module.hparams["per_record"] is True
    with pytest.raises(ValueError, match="lbfgs"):
        DPLVQModule(
            module.model,
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            sampling_rate=Q,
            expected_batch_size=10.0,
            optimizer="lbfgs",
            per_record=True,
        )


def test_a_config_turns_per_record_on():
    X, y = load_iris(return_X_y=True)
    x = torch.as_tensor(PublicBoundsScaler(0.0, 8.0).fit_transform(X), dtype=torch.float32)
    config = merge_config(
        DEFAULT_CONFIG,
        {"privacy": {"epsilon": 5.0, "bounds": [0.0, 8.0], "classes": [0, 1, 2], "per_record": True}},
    )
    model = PrototypeModel(GMLVQLayer(4, 3, prototypes=torch.zeros(3, 4)), [0, 1, 2])
    module, _ = build_private_module(config, x, torch.as_tensor(y), 3, model, {})
    assert module.per_record and module.private_model is module.model


def test_a_backbone_trains_per_record_by_default_and_a_bare_layer_batched():
    """``per_record=None`` resolves to per-record exactly when a backbone runs before the
    layer (its batched forward would round a record's features with the batch)."""
    with_backbone = _module(PrivacyLedger(), per_record=None)
    assert with_backbone.per_record and with_backbone.private_model is with_backbone.model
    bare = DPLVQModule(
        PrototypeModel(GMLVQLayer(4, 3, prototypes=torch.zeros(3, 4)), [0, 1, 2]),
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        sampling_rate=Q,
        expected_batch_size=10.0,
    )
    assert not bare.per_record and bare.private_model is not bare.model  # Opacus' closed forms
    assert not _module(PrivacyLedger(), per_record=False).per_record
