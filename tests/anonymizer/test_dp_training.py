"""DP-SGD training of the anonymizer: ledger, noise only where parameters train, no silent failure."""

import copy
import math
import warnings

import pytest
import torch

from dp_proto.anonymizer import Anonymizer
from dp_proto.anonymizer.evaluation import encode
from dp_proto.anonymizer.losses import per_record_objective
from dp_proto.data import make_entangled_task
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.lightning.dp_anonymizer import DPAnonymizerModule, fit_dp_anonymizer
from dp_proto.privacy.ledger import PrivacyLedger


def _task(n=1200, seed=0):
    t = make_entangled_task(n, seed=seed)
    return torch.tensor(t.x), torch.tensor(t.regular), torch.tensor(t.private)


def _small_model(seed=0):
    torch.manual_seed(seed)
    return Anonymizer.mlp(20, 4, 8, representation_dim=8, encoder_hidden=(32,), head_hidden=(16,))


@pytest.mark.slow
def test_ledger_counts_the_prior_and_every_step_and_certifies_the_target():
    x, y, s = _task(600)
    fit = fit_dp_anonymizer(
        x,
        y,
        s,
        epsilon=2.0,
        delta=1e-5,
        sampling_rate=0.1,
        max_grad_norm=1.0,
        anonymizer=_small_model(),
        lam=1.0,
        pretrain_regular_epochs=1,
        pretrain_private_epochs=1,
        adversarial_epochs=2,
        toggle_steps=5,
        lr=0.05,
        encoder_lr=0.01,
    )
    kinds = [e.kind for e in fit.ledger.events]
    prior = fit.ledger.events[0]  # the noisy class histogram: discrete Laplace, 5 % of the budget
    assert kinds[0] == "discrete_laplace" and prior.name == "private_prior"
    assert prior.epsilon == pytest.approx(0.05 * 2.0) and prior.grid_steps == 1 and prior.sensitivity == 1.0
    steps = sum(e.count for e in fit.ledger.events if e.kind == "subsampled_gaussian")
    assert steps == 4 * int(1 / 0.1)  # 4 epochs of 10 Poisson steps, every phase counted
    assert fit.ledger.get_epsilon(1e-5) == pytest.approx(2.0, rel=0.02)
    assert fit.ledger.get_epsilon(1e-5) <= 2.0 * 1.001
    assert fit.module.noise_multiplier > 0


@pytest.mark.slow
def test_a_public_prior_spends_nothing_and_simultaneous_mode_is_refused():
    x, y, s = _task(300)
    settings = dict(
        epsilon=5.0,
        delta=1e-5,
        sampling_rate=0.2,
        prior=torch.full((8,), 1 / 8),
        expected_batch_size=60.0,
        pretrain_regular_epochs=1,
        pretrain_private_epochs=0,
        adversarial_epochs=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)  # public class counts: nothing read from the labels
        fit = fit_dp_anonymizer(x, y, s, num_regular=4, num_private=8, anonymizer=_small_model(), **settings)
    assert all(e.kind == "subsampled_gaussian" for e in fit.ledger.events)
    with pytest.warns(PrivacyLeakWarning, match="num_regular / num_private"):
        fit_dp_anonymizer(x, y, s, anonymizer=_small_model(), **settings)
    with pytest.raises(ValueError, match="toggle"):
        DPAnonymizerModule(
            _small_model(),
            torch.full((8,), 1 / 8),
            4,
            ledger=PrivacyLedger(),
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            sampling_rate=0.1,
            expected_batch_size=10.0,
            mode="simultaneous",
        )


def test_noise_goes_only_to_the_parameters_a_phase_trains():
    """Phase 2 (private branch only) with heavy noise: encoder and regular branch are
    untouched, the private branch moves."""
    x, y, s = _task(300)
    model = _small_model()
    before = copy.deepcopy(model.state_dict())
    fit_dp_anonymizer(
        x,
        y,
        s,
        epsilon=1.0,
        delta=1e-5,
        sampling_rate=0.2,
        noise_multiplier=50.0,
        prior=torch.full((8,), 1 / 8),
        expected_batch_size=60.0,
        anonymizer=model,
        pretrain_regular_epochs=0,
        pretrain_private_epochs=1,
        adversarial_epochs=0,
    )
    after = model.state_dict()
    for key in before:
        moved = not torch.equal(before[key], after[key])
        assert moved == key.startswith("private_head"), key


def test_noise_free_run_with_lambda_zero_trains_a_plain_classifier():
    """Anti-silent-failure: no noise, no effective clipping, lambda 0: the regular branch
    reaches the accuracy of non-private training (measured 0.90+ on this task)."""
    x, y, s = _task(2400)
    fit = fit_dp_anonymizer(
        x[:1200],
        y[:1200],
        s[:1200],
        epsilon=1.0,
        delta=1e-5,
        sampling_rate=0.05,
        max_grad_norm=1e6,
        noise_multiplier=0.0,
        anonymizer=_small_model(),
        lam=0.0,
        pretrain_regular_epochs=10,
        pretrain_private_epochs=1,
        adversarial_epochs=2,
        lr=0.05,
        encoder_lr=0.01,
    )
    a = fit.module.anonymizer
    accuracy = (a.regular_head(encode(a.encoder, x[1200:])).argmax(1) == y[1200:]).float().mean().item()
    assert accuracy > 0.85
    assert math.isinf(fit.ledger.get_epsilon(1e-5))  # a noise-free run certifies nothing


def test_the_budget_stops_training_before_an_epoch_that_would_exceed_it():
    x, y, s = _task(300)
    fit = fit_dp_anonymizer(
        x,
        y,
        s,
        epsilon=1.0,
        delta=1e-5,
        sampling_rate=0.2,
        noise_multiplier=0.8,
        prior=torch.full((8,), 1 / 8),
        expected_batch_size=60.0,
        anonymizer=_small_model(),
        pretrain_regular_epochs=5,
        pretrain_private_epochs=5,
        adversarial_epochs=10,
    )
    assert fit.module.stopped_by_budget
    assert fit.ledger.get_epsilon(1e-5) <= 1.0


def test_per_record_objective_is_the_mean_of_per_record_terms():
    torch.manual_seed(0)
    reg, priv = torch.randn(5, 3), torch.randn(5, 4)
    y, s = torch.tensor([0, 1, 2, 0, 1]), torch.tensor([3, 2, 1, 0, 3])
    prior = torch.tensor([0.1, 0.2, 0.3, 0.4])
    total = per_record_objective(reg, priv, y, s, prior, 2.0)
    terms = [
        per_record_objective(reg[i : i + 1], priv[i : i + 1], y[i : i + 1], s[i : i + 1], prior, 2.0) for i in range(5)
    ]
    torch.testing.assert_close(total, torch.stack(terms).mean())


@pytest.mark.slow
def test_empty_poisson_batches_still_take_their_step():
    x, y, s = _task(20)
    fit = fit_dp_anonymizer(
        x,
        y,
        s,
        epsilon=5.0,
        delta=1e-3,
        sampling_rate=0.02,
        prior=torch.full((8,), 1 / 8),
        expected_batch_size=0.4,
        anonymizer=_small_model(),
        pretrain_regular_epochs=1,
        pretrain_private_epochs=0,
        adversarial_epochs=0,
    )
    assert sum(e.count for e in fit.ledger.events) == int(1 / 0.02)  # most of the 50 batches are empty
    assert all(torch.isfinite(p).all() for p in fit.module.anonymizer.parameters())


@pytest.mark.parametrize("private", [True, False])
def test_an_unknown_module_setting_is_refused_before_any_data_is_read(private, monkeypatch):
    """``sample_rate=`` (not a setting) used to pass into the module and fail only when it
    was built, after the private prior had been drawn."""
    from dp_proto.lightning.anonymizer import fit_anonymizer
    from dp_proto.privacy import mechanisms

    def must_not_run(*args, **kwargs):
        raise AssertionError("data read before the settings were checked")

    monkeypatch.setattr(mechanisms, "noisy_histogram", must_not_run)  # the private prior
    x, y, s = _task(50)
    with pytest.raises(TypeError, match="unknown AnonymizerModule setting.*sample_rate"):
        if private:
            fit_dp_anonymizer(x, y, s, epsilon=1.0, delta=1e-5, sampling_rate=0.1, sample_rate=0.1)
        else:
            fit_anonymizer(x, y, s, sample_rate=0.1)
