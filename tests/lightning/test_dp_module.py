"""DPLVQModule: DP-SGD inside Lightning, the spend in the ledger, a clean stop at the budget."""

import pytest
import torch
from sklearn.datasets import load_iris

from dp_proto.lightning import ArrayDataModule, DPLVQModule, PrivacySpendCallback
from dp_proto.lvq import GMLVQLayer, PrototypeModel
from dp_proto.privacy import PrivacyLedger, PublicBoundsScaler
from tests._checkpoints import cpu_trainer


def _setup(ledger, noise=1.0, epochs=3):
    X, y = load_iris(return_X_y=True)
    X = PublicBoundsScaler(0.0, 8.0).fit_transform(X)
    dm = ArrayDataModule(X, y, scaling="none", sampling_rate=0.1, seed=0)
    dm.setup()
    x_train, y_train = dm.train_tensors()
    model = PrototypeModel(GMLVQLayer(4, 3), [0, 1, 2])
    module = DPLVQModule(
        model,
        ledger=ledger,
        noise_multiplier=noise,
        max_grad_norm=1.0,
        sampling_rate=0.1,
        expected_batch_size=10.0,
        lr=0.05,
    )  # public: q times a public size of 100
    module.init_prototypes(x_train, y_train)  # non-private init: this test is about the SGD part
    return dm, module, cpu_trainer(epochs, callbacks=[PrivacySpendCallback(ledger)])


@pytest.mark.slow
def test_dp_training_records_every_step_and_learns():
    ledger = PrivacyLedger()
    dm, module, trainer = _setup(ledger, noise=0.5, epochs=4)
    trainer.fit(module, datamodule=dm)
    from opacus.optimizers import DPOptimizer

    assert isinstance(trainer.optimizers[0], DPOptimizer)
    assert trainer.optimizers[0].noise_multiplier == 0.5 and trainer.optimizers[0].max_grad_norm == 1.0
    (event,) = ledger.events
    assert event.kind == "subsampled_gaussian" and event.count == 4 * 10 and event.sampling_rate == 0.1
    assert trainer.callback_metrics["privacy/epsilon"] == pytest.approx(ledger.get_epsilon(), rel=1e-4)
    assert trainer.test(module, datamodule=dm, verbose=False)[0]["test_acc"] > 0.6


def test_budget_stops_training_cleanly():
    ledger = PrivacyLedger(budget=(1.5, 1e-5))
    dm, module, trainer = _setup(ledger, noise=1.0, epochs=50)
    trainer.fit(module, datamodule=dm)
    assert module.stopped_by_budget
    assert ledger.get_epsilon(1e-5) <= 1.5
    assert trainer.current_epoch < 50


def test_lbfgs_is_refused():
    with pytest.raises(ValueError, match="first-order"):
        DPLVQModule(
            PrototypeModel(GMLVQLayer(2, 2), [0, 1]),
            ledger=PrivacyLedger(),
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            sampling_rate=0.1,
            expected_batch_size=5,
            optimizer="lbfgs",
        )


def test_the_loader_must_be_poisson_at_the_modules_rate():
    from torch.utils.data import DataLoader, TensorDataset

    ledger = PrivacyLedger()
    dm, module, trainer = _setup(ledger, epochs=1)
    module.sampling_rate = 0.2  # the data module samples at 0.1
    with pytest.raises(ValueError, match="samples at rate 0.1 but the module's noise was calibrated"):
        trainer.fit(module, datamodule=dm)
    assert not ledger.events  # refused before any step
    ledger = PrivacyLedger()
    dm, module, trainer = _setup(ledger, epochs=1)
    x, y = dm.train_tensors()
    shuffled = DataLoader(TensorDataset(x, y), batch_size=10, shuffle=True)
    with pytest.raises(ValueError, match="needs a Poisson-sampling training loader"):
        trainer.fit(module, train_dataloaders=shuffled)
    assert not ledger.events


def test_group_lasso_gives_exact_zeros_and_logs_the_sparsity():
    from sklearn.datasets import load_wine
    from sklearn.preprocessing import scale

    X, y = load_wine(return_X_y=True)
    X = PublicBoundsScaler(-4.0, 4.0).fit_transform(scale(X))
    dm = ArrayDataModule(X, y, scaling="none", sampling_rate=0.1, seed=0)
    dm.setup()
    x_train, y_train = dm.train_tensors()
    ledger = PrivacyLedger()
    model = PrototypeModel(GMLVQLayer(13, 3), [0, 1, 2])
    module = DPLVQModule(
        model,
        ledger=ledger,
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        sampling_rate=0.1,
        expected_batch_size=10.0,
        optimizer="sgd",
        lr=0.05,
        group_lasso=1.0,
        generator=torch.Generator().manual_seed(5),  # one replayed noise draw: the outcome varies between draws
    )
    module.init_prototypes(x_train, y_train)
    trainer = cpu_trainer(5, callbacks=[PrivacySpendCallback(ledger)])
    trainer.fit(module, datamodule=dm)
    norms = model.layer.omega.detach().norm(dim=0)
    assert (norms == 0).sum() >= 3  # exact zeros
    assert trainer.callback_metrics["sparsity"] == pytest.approx(float((norms == 0).sum()) / 13)


@pytest.mark.parametrize(
    "layer, kwargs, message",
    [
        ("glvq", {"group_lasso": 0.1}, "needs a GMLVQ or LGMLVQ layer"),
        ("gmlvq", {"group_lasso": -1.0}, "group_lasso must be a finite number >= 0"),
        ("gmlvq", {"group_lasso": 0.1, "optimizer": "lbfgs"}, "not 'lbfgs'"),
    ],
)
def test_group_lasso_bad_settings(layer, kwargs, message):
    from dp_proto.lightning import LVQModule
    from dp_proto.lvq import GLVQLayer

    model = PrototypeModel(GLVQLayer(4, 3) if layer == "glvq" else GMLVQLayer(4, 3), [0, 1, 2])
    with pytest.raises(ValueError, match=message):
        LVQModule(model, **kwargs)
