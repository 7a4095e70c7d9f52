"""DP class-mean initialisation and the public-bounds scaler."""

import logging
import math
import warnings

import numpy as np
import pytest
import torch

from dp_proto.exceptions import DomainWarning, PrivacyBudgetExceededError, PrivacyLeakWarning
from dp_proto.lvq.private import dp_class_mean_prototypes
from dp_proto.lvq.private.coa import centre_of_attention_mechanism, coa_bin_models
from dp_proto.lvq.private.saa import aggregate_bin_models
from dp_proto.privacy import PrivacyLedger, PublicBoundsScaler


def _data(n=3000, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=g)
    centres = torch.tensor([[0.5] * d, [-0.5] * d, [0.5, -0.5] * (d // 2)])
    x = (centres[y] + 0.1 * torch.randn(n, d, generator=g, dtype=torch.float32)).clamp(-1, 1)
    return x, y, centres


def test_sensitivities_and_budget_split_are_recorded():
    x, y, _ = _data(d=6)
    ledger = PrivacyLedger()
    result = dp_class_mean_prototypes(
        x, y, 3, 1.0, ledger=ledger, count_fraction=0.4, generator=torch.Generator().manual_seed(0)
    )
    assert torch.equal(result.noisy_counts, result.noisy_counts.round())  # integer counts + integer noise
    counts, sums = ledger.events
    # the counts: discrete Laplace on the integer counts (float-safe), epsilon 0.4, one grid step
    assert counts.kind == "discrete_laplace" and counts.sensitivity == 1.0 and counts.grid_steps == 1
    assert counts.epsilon == pytest.approx(0.4) and not hasattr(counts, "noise_multiplier")
    assert sums.kind == "pure" and sums.sensitivity == 6.0 and sums.epsilon == pytest.approx(0.6)
    assert ledger.get_epsilon(0.0) == pytest.approx(1.0)


def test_noise_scales_match_the_sensitivities():
    """Over many runs, the noisy counts have the discrete Laplace variance 2 q / (1 - q)^2,
    q = exp(-eps_c), and the class sums Laplace noise of scale d / eps_s, so the prototype
    error shrinks like 1/n."""
    x, y, _ = _data(n=400, d=2)
    eps = 2.0
    counts = np.stack(
        [
            dp_class_mean_prototypes(
                x, y, 3, eps, generator=torch.Generator().manual_seed(s), ledger=None
            ).noisy_counts.numpy()
            for s in range(1500)
        ]
    )
    true = np.bincount(y.numpy(), minlength=3)
    np.testing.assert_allclose(counts.mean(0), true, atol=0.2)
    assert np.array_equal(counts, np.round(counts))
    q = math.exp(-eps / 2)  # count_fraction 0.5
    np.testing.assert_allclose(counts.var(0), 2 * q / (1 - q) ** 2, rtol=0.15)


def test_prototypes_converge_to_class_means_and_stay_in_domain():
    x, y, centres = _data(n=20000)
    result = dp_class_mean_prototypes(
        x, y, 3, 1.0, prototypes_per_class=2, generator=torch.Generator().manual_seed(1), ledger=None
    )
    assert result.prototypes.shape == (6, 4) and result.prototype_labels.tolist() == [0, 0, 1, 1, 2, 2]
    assert result.prototypes.abs().max() <= 1
    err = (result.prototypes - centres[result.prototype_labels]).abs().max()
    assert err < 0.2
    assert not torch.equal(result.prototypes[0], result.prototypes[1])  # jitter


def test_out_of_domain_records_are_clipped_and_counted_on_the_curator_channel(caplog):
    x, y, _ = _data(n=100)
    x[:7] *= 5
    with warnings.catch_warnings(), caplog.at_level(logging.DEBUG, logger="dp_proto.curator"):
        warnings.simplefilter("error", DomainWarning)  # no warning whose presence depends on a record
        result = dp_class_mean_prototypes(x, y, 3, 1.0, ledger=None)
    assert result.num_clipped == 7
    assert "7 of 100 records" in caplog.text


def test_empty_class_and_refusal():
    x, y, _ = _data(n=200)
    y[y == 2] = 0
    result = dp_class_mean_prototypes(x, y, 3, 1.0, generator=torch.Generator().manual_seed(0), ledger=None)
    assert torch.isfinite(result.prototypes).all()  # noisy count clamped to >= 1
    ledger = PrivacyLedger(budget=(0.5, 1e-5))
    with pytest.raises(PrivacyBudgetExceededError):
        dp_class_mean_prototypes(x, y, 3, 1.0, ledger=ledger)
    assert ledger.events == ()


@pytest.mark.parametrize(
    "kwargs, message",
    [({"epsilon": 0.0}, "epsilon"), ({"count_fraction": 1.0}, "count_fraction"), ({"num_classes": 2}, "class indices")],
)
def test_bad_arguments(kwargs, message):
    x, y, _ = _data(n=50)
    args = {"num_classes": 3, "epsilon": 1.0, **kwargs}
    with pytest.raises(ValueError, match=message):
        dp_class_mean_prototypes(x, y, args.pop("num_classes"), args.pop("epsilon"), ledger=None, **args)


def test_public_bounds_scaler():
    X = np.array([[0.0, 255.0], [127.5, 0.0], [300.0, 10.0]])
    scaler = PublicBoundsScaler(0.0, 255.0)
    with pytest.warns(DomainWarning, match="1 of 3 records"):
        Z = scaler.fit_transform(X)
    np.testing.assert_allclose(Z[:2], [[-1, 1], [0, -1]])
    assert Z.max() <= 1 and scaler.num_clipped_ == 1
    np.testing.assert_allclose(scaler.inverse_transform(Z[:2]), X[:2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch_out = PublicBoundsScaler(0.0, 255.0).fit_transform(torch.tensor(X[:2]))
    assert isinstance(torch_out, torch.Tensor)
    with pytest.warns(PrivacyLeakWarning, match="not differentially private"):
        PublicBoundsScaler.from_data(X)
    with pytest.raises(ValueError, match="upper bound"):
        PublicBoundsScaler(1.0, 1.0).fit()


@pytest.mark.parametrize(
    "release",
    [
        lambda x, y, **kw: dp_class_mean_prototypes(x, y, 3, 1.0, **kw),
        lambda x, y, **kw: aggregate_bin_models(torch.zeros(5, 3, x.shape[1]), 1.0, 1e-5, **kw),
        lambda x, y, **kw: coa_bin_models(torch.zeros(5, 3, x.shape[1]), 1.0, 1e-5, **kw),
        lambda x, y, **kw: centre_of_attention_mechanism(torch.zeros(5, 2), 1.0, 1e-5, diameter=1.0, **kw),
    ],
    ids=["dp_init", "aggregate_bin_models", "coa_bin_models", "coa_mechanism"],
)
def test_the_private_lvq_releases_need_an_explicit_ledger_choice(release):
    """Like every mechanism, a functional release without ledger= raises before it reads
    the data (ledger=None is the explicit opt-out)."""
    x, y, _ = _data(n=50)
    with pytest.raises(TypeError, match=r"needs ledger=: pass a PrivacyLedger .* or ledger=None"):
        release(x, y)


def test_gaussian_class_sums_record_the_l2_sensitivity_and_compose():
    x, y, _ = _data(d=16)
    ledger = PrivacyLedger()
    result = dp_class_mean_prototypes(
        x, y, 3, 1.0, ledger=ledger, mechanism="gaussian", delta=1e-5, generator=torch.Generator().manual_seed(0)
    )
    counts, sums = ledger.events
    assert counts.kind == "discrete_laplace" and counts.epsilon == pytest.approx(0.5)
    assert sums.kind == "discrete_gaussian" and sums.sensitivity == pytest.approx(4.0)  # sqrt(16)
    assert (sums.name, counts.name) == ("dp_init/class_sums", "dp_init/class_counts")
    # the planned events are the recorded ones (a pipeline checks them before fitting)
    from dp_proto.lvq.private.dp_init import dp_init_events

    planned = dp_init_events(16, 1.0, mechanism="gaussian", delta=1e-5)
    assert [e.to_dict() if hasattr(e, "to_dict") else repr(e) for e in planned] == [
        e.to_dict() if hasattr(e, "to_dict") else repr(e) for e in ledger.events
    ]
    assert ledger.get_epsilon(1e-5) <= 1.0 + 1e-6  # each part within its share, composed
    assert result.prototypes.abs().max() <= 1


def test_gaussian_class_sums_are_far_less_noisy_in_many_dimensions():
    """d = 400: Laplace noise of scale d / eps_s per coordinate against Gaussian noise of
    std about sqrt(d) * 5 / eps_s: the Gaussian class means land near the true ones."""
    x, y, centres = _data(n=6000, d=400)
    errors = {}
    for mechanism in ("laplace", "gaussian"):
        result = dp_class_mean_prototypes(
            x, y, 3, 2.0, ledger=None, mechanism=mechanism, delta=1e-5, generator=torch.Generator().manual_seed(3)
        )
        errors[mechanism] = float((result.prototypes - centres[result.prototype_labels]).pow(2).mean().sqrt())
    assert errors["gaussian"] < errors["laplace"] / 4  # about 0.05 against 0.27


def test_gaussian_initialisation_passes_the_neighbour_check():
    from dp_proto.privacy.testing import adversarial_removals, neighbour_check

    g = torch.Generator().manual_seed(5)
    x = (2 * torch.rand(60, 9, generator=g) - 1).double()
    x[0] = 1.0  # a corner: ||x||_2 = sqrt(d), the largest change of a class sum
    y = torch.randint(0, 3, (60,), generator=g)

    def release(x, y):
        return dp_class_mean_prototypes(x, y, 3, 1.0, ledger=PrivacyLedger(), mechanism="gaussian", delta=1e-5)

    report = neighbour_check(
        release, (x, y), adversarial_removals(x.numpy(), y.numpy()) + [0], curator_only=("num_clipped",)
    )
    report.assert_ok()
    assert 0.9 < report.max_ratio["dp_init/class_sums"] <= 1.0 + 1e-9  # the corner reaches the bound


def test_gaussian_needs_a_delta_and_a_known_mechanism():
    x, y, _ = _data(n=50)
    with pytest.raises(ValueError, match="needs the delta"):
        dp_class_mean_prototypes(x, y, 3, 1.0, ledger=None, mechanism="gaussian")
    with pytest.raises(ValueError, match="mechanism must be one of"):
        dp_class_mean_prototypes(x, y, 3, 1.0, ledger=None, mechanism="uniform")
