"""Privacy soundness of the DP anonymizer: fresh noise and Poisson coins unless
``noise_seed``, no generator or ledger in the hyperparameters, a public normaliser and
float64 noise with tails."""

import warnings

import pytest
import torch

from dp_proto.anonymizer import Anonymizer
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.lightning.dp_anonymizer import fit_dp_anonymizer
from dp_proto.privacy.testing import capture_releases, neighbour_check
from tests._stats import pin_gaussian_uniforms
from tests.anonymizer.test_dp_training import _task

PUBLIC = dict(num_regular=4, num_private=8)
PRIOR = torch.full((8,), 1 / 8)


def _small_model(seed=0):
    torch.manual_seed(seed)
    return Anonymizer.mlp(20, 4, 8, representation_dim=8, encoder_hidden=(16,), head_hidden=(8,))


def _fit(x, y, s, **kwargs):
    """One pre-training epoch of 5 Poisson steps at a fixed noise multiplier (no calibration)."""
    settings = dict(
        epsilon=5.0,
        delta=1e-5,
        sampling_rate=0.2,
        noise_multiplier=1.0,
        anonymizer=_small_model(),
        pretrain_regular_epochs=1,
        pretrain_private_epochs=0,
        adversarial_epochs=0,
        seed=0,
        **PUBLIC,
    )
    settings.update(kwargs)
    return fit_dp_anonymizer(x, y, s, **settings)


def _weights(fit):
    return torch.cat([p.detach().flatten() for p in fit.module.anonymizer.parameters()])


def test_same_seed_fresh_noise_and_noise_seed_reproduces_with_a_warning():
    x, y, s = _task(60)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        a, b = _fit(x, y, s), _fit(x, y, s)
    assert not torch.equal(_weights(a), _weights(b))  # the same seed, fresh noise and coins
    assert a.ledger.summary()["noise"] == "fresh"
    fits = []
    for _ in range(2):
        with pytest.warns(PrivacyLeakWarning, match="noise_seed"):
            fits.append(_fit(x, y, s, noise_seed=11))
    assert torch.equal(_weights(fits[0]), _weights(fits[1]))
    assert fits[0].ledger.summary()["noise"] == "reproducible"
    hparams = dict(fits[0].module.hparams)
    assert "noise_generator" not in hparams and "ledger" not in hparams
    assert not any(isinstance(v, torch.Generator) for v in hparams.values())


def test_the_normaliser_is_public_or_the_released_prior_total():
    x, y, s = _task(60)

    def normaliser(x, y, s):  # the neighbour sees D's noisy prior: the normaliser must not move
        return _fit(x, y, s).module.expected_batch_size

    neighbour_check(normaliser, (x, y, s), removals=[0, len(x) - 1]).assert_ok()  # old: 0.2 * len(x)

    for per_record in (True, False):
        with capture_releases() as recorder:
            fit = _fit(x, y, s, per_record=per_record)
        (counts,) = [r.output for r in recorder.releases if r.name == "private_prior"]
        assert fit.module.expected_batch_size == pytest.approx(0.2 * max(float(counts.sum()), 1.0))
        if not per_record:  # Opacus' optimizer divides by the same public value
            assert fit.trainer.optimizers[0].expected_batch_size == fit.module.expected_batch_size

    fit = _fit(x, y, s, prior=PRIOR, expected_batch_size=7.5, per_record=False)
    assert fit.module.expected_batch_size == fit.trainer.optimizers[0].expected_batch_size == 7.5  # Opacus' too
    with pytest.raises(ValueError, match="expected_batch_size"):
        _fit(x, y, s, prior=PRIOR)


@pytest.mark.parametrize("per_record", [True, False])
def test_dp_sgd_noise_reaches_beyond_six_sigma(monkeypatch, per_record):
    """Deterministic: pinned uniforms make the sampler return 9.9 sigma, beyond the
    about 5.8 sigma that Opacus' float32 torch.normal can reach."""
    pin_gaussian_uniforms(monkeypatch)  # radius 9.9 sigma, angle ~ 0
    x, y, s = _task(60)
    with capture_releases() as recorder:
        fit = _fit(x, y, s, prior=PRIOR, expected_batch_size=12.0, max_grad_norm=0.5, per_record=per_record)
    if not per_record:
        assert type(fit.trainer.optimizers[0]).__name__.startswith("Sound")
    draws = [r for r in recorder.releases if r.name == "dp_sgd"]
    assert draws
    for r in draws:  # std = noise_multiplier * max_grad_norm = 0.5
        z = (r.output.double() - r.pre_noise) / 0.5
        cos_half = z.reshape(-1)[: (z.numel() + 1) // 2]  # r cos(0); the sin half is r sin(0) = 0
        assert bool((cos_half > 9.8).all()), cos_half.min()


def test_per_record_steps_release_each_records_own_clipped_gradients():
    """``per_record=True``: every step's noised sum is the records' own clipped gradients
    (each a batch of one), so it does not follow the batch; the run trains, records its
    steps and passes the neighbour check's shape and event comparison with ``noise_seed``."""
    x, y, s = _task(40)
    with capture_releases() as recorder, warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        fit = _fit(x, y, s, per_record=True, pretrain_private_epochs=1, adversarial_epochs=1, noise_seed=3)
    steps = [r for r in recorder.releases if r.name == "dp_sgd"]
    assert steps and all(r.pre_noise.dtype == torch.float64 for r in steps)
    assert len(steps) == fit.module.steps_recorded
    assert fit.module.per_record and fit.module.hparams["per_record"] is True
    base = _small_model()
    assert not torch.equal(_weights(fit), torch.cat([p.detach().flatten() for p in base.parameters()]))

    def release(x_, y_, s_):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyLeakWarning)
            return _weights(_fit(x_, y_, s_, per_record=True, noise_seed=3))

    neighbour_check(release, (x, y, s), removals=[0, 7]).assert_ok()
