"""DP-SGD through Opacus: calibration, the ledger, anti-silent failure, estimators, bad input."""

import math
import re
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits, load_iris, load_wine
from sklearn.model_selection import train_test_split

from dp_proto.exceptions import DataValidationError, DomainWarning, PrivacyLeakWarning
from dp_proto.lvq import GMLVQ, GLVQLayer, GMLVQLayer, LGMLVQLayer, PrototypeModel, class_mean_prototypes
from dp_proto.lvq.private import (
    DPGLVQ,
    DPGMLVQ,
    calibrate_noise_multiplier,
    fit_dp_sgd,
    paper_noise_multiplier,
    sgd_steps,
)
from dp_proto.lvq.private.dpsgd import DPSGD, SGDSettings, fixed_noise_recipe
from dp_proto.privacy import PrivacyLedger, PublicBoundsScaler
from dp_proto.privacy.dpsgd_plan import DPSGDPlan
from dp_proto.privacy.events import LaplaceEvent, PureEvent, SubsampledGaussianEvent
from dp_proto.privacy.testing import capture_releases


def test_paper_formula_and_what_the_ledger_certifies_for_it():
    steps = sgd_steps(50, 0.01)
    assert steps == 5000
    sigma = paper_noise_multiplier(0.8, 1e-5, 0.01, steps)
    assert sigma == pytest.approx(4.7985 / 0.8, rel=1e-4)
    from opacus.accountants import RDPAccountant

    rdp = PrivacyLedger(accountant="rdp")
    rdp.spend(SubsampledGaussianEvent(noise_multiplier=sigma, sampling_rate=0.01, count=steps))
    opacus = RDPAccountant()
    opacus.history = [(sigma, 0.01, steps)]
    # An RDP accountant with integer orders only certifies 0.580 for this sigma; finer orders
    # certify less.
    assert rdp.get_epsilon(1e-5) == pytest.approx(opacus.get_epsilon(1e-5), rel=0.05)
    pld = PrivacyLedger()
    pld.spend(SubsampledGaussianEvent(noise_multiplier=sigma, sampling_rate=0.01, count=steps))
    assert pld.get_epsilon(1e-5) < rdp.get_epsilon(1e-5) < 0.8


@pytest.mark.slow
def test_calibration_meets_the_target_tightly():
    prior = [LaplaceEvent(noise_multiplier=10.0), PureEvent(epsilon=0.1)]
    sigma = calibrate_noise_multiplier(1.0, 1e-5, 0.01, 5000, prior_events=prior)
    ledger = PrivacyLedger()
    ledger.spend(*prior, SubsampledGaussianEvent(noise_multiplier=sigma, sampling_rate=0.01, count=5000))
    assert 0.97 <= ledger.get_epsilon(1e-5) <= 1.0
    # a small budget, where the coarse search grid over-estimates most (Table B.1's 0.25)
    small_prior = [LaplaceEvent(noise_multiplier=40.0), PureEvent(epsilon=0.025)]
    small = calibrate_noise_multiplier(0.25, 1e-5, 0.01, 5000, prior_events=small_prior)
    eps = PrivacyLedger.epsilon_of(
        [*small_prior, SubsampledGaussianEvent(noise_multiplier=small, sampling_rate=0.01, count=5000)], 1e-5
    )
    assert 0.985 * 0.25 <= eps <= 0.25
    rdp_sigma = calibrate_noise_multiplier(0.8, 1e-5, 0.01, 5000, accountant="rdp")
    rdp = PrivacyLedger(accountant="rdp")
    rdp.spend(SubsampledGaussianEvent(noise_multiplier=rdp_sigma, sampling_rate=0.01, count=5000))
    assert 0.79 <= rdp.get_epsilon(1e-5) <= 0.8
    assert rdp_sigma < paper_noise_multiplier(0.8, 1e-5, 0.01, 5000)  # the paper's sigma is conservative here
    with pytest.raises(ValueError, match="initialisation alone spends"):
        calibrate_noise_multiplier(0.15, 1e-5, 0.01, 100, prior_events=prior)


@pytest.mark.parametrize("grad_sample_mode", ["hooks", "ghost"])
@pytest.mark.parametrize("layer", [GLVQLayer, GMLVQLayer, LGMLVQLayer])
def test_an_overflowing_record_leaves_the_opacus_step_finite(grad_sample_mode, layer):
    """``fit_dp_sgd`` takes raw tensors: a record of 1e30 (float32; ghost clipping, which
    needs float64: 1e300) overflows its distances. Ghost clipping, which has no
    per-sample gradients to drop it from, made every parameter NaN; the record is now
    left out of its batch, as the other engines give it weight zero."""
    dtype = torch.float64 if grad_sample_mode == "ghost" else torch.float32
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(30, 3, generator=gen, dtype=dtype) * 2 - 1
    y = torch.arange(30) % 2
    x[5] = 1e300 if dtype == torch.float64 else 1e30
    model = PrototypeModel(layer(3, 2, dtype=dtype), [0, 1])
    fit_dp_sgd(
        model,
        x,
        y,
        fixed_noise_recipe(1.0, 2, max_grad_norm=1.0, engine="opacus", grad_sample_mode=grad_sample_mode),
        ledger=PrivacyLedger(),
        expected_batch_size=30,
        noise_multiplier=1.0,
        generator=torch.Generator().manual_seed(1),
    )
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize(
    ("engine", "grad_sample_mode"),
    [("fused", "hooks"), ("opacus", "hooks"), ("opacus", "ghost"), ("opacus", "functorch")],
    ids=["fused", "hooks", "ghost", "functorch"],
)
@pytest.mark.parametrize("layer", [GLVQLayer, GMLVQLayer, LGMLVQLayer])
def test_fit_dp_sgd_runs_a_float32_layer_in_float64(layer, engine, grad_sample_mode):
    """The clipped sum's bound is proved in float64 (docs/privacy-model.md), and float32
    sums moved by up to 1.98 C (a metric's null space) or 1.0013 C (ghost clipping): a
    float32 layer is cast to float64 for the run, releases the float64 layer's sums to
    the bit, and is float32 again afterwards, with the same parameter objects."""
    gen = torch.Generator().manual_seed(0)
    x, y = torch.rand(40, 3, generator=gen) * 2 - 1, torch.arange(40) % 2
    narrow = PrototypeModel(layer(3, 2), [0, 1])
    wide = PrototypeModel(layer(3, 2, dtype=torch.float64), [0, 1])
    with torch.no_grad():
        for p, q in zip(wide.parameters(), narrow.parameters(), strict=True):
            p.copy_(q)
    params = list(narrow.parameters())
    released = {}
    for name, model in (("float32", narrow), ("float64", wide)):
        recipe = fixed_noise_recipe(0.5, 3, max_grad_norm=1.0, engine=engine, grad_sample_mode=grad_sample_mode)
        with capture_releases() as recorder, pytest.warns(PrivacyLeakWarning):
            fit_dp_sgd(
                model,
                x,
                y,
                recipe,
                ledger=PrivacyLedger(),
                expected_batch_size=20.0,
                noise_multiplier=1.0,
                generator=torch.Generator().manual_seed(1),
            )
        released[name] = [r.pre_noise for r in recorder.releases if r.name == "dp_sgd"]
    assert released["float32"] and len(released["float32"]) == len(released["float64"])
    assert all(torch.equal(a, b) for a, b in zip(released["float32"], released["float64"], strict=True))
    assert list(narrow.parameters()) == params and all(p.dtype == torch.float32 for p in params)
    assert all(torch.equal(p, q.float()) for p, q in zip(narrow.parameters(), wide.parameters(), strict=True))


def test_a_float32_backbone_keeps_its_dtype_under_the_float64_layer():
    """Only the prototype layer is cast: a trainable float32 backbone trains in float32."""
    x, y = torch.rand(40, 3) * 2 - 1, torch.arange(40) % 2
    model = PrototypeModel(GMLVQLayer(4, 2), [0, 1], backbone=torch.nn.Linear(3, 4))
    recipe = DPSGD(plan=DPSGDPlan(epsilon=1.0, delta=1e-5, sampling_rate=0.5, epochs=1), engine="opacus")
    result = fit_dp_sgd(model, x, y, recipe, ledger=PrivacyLedger(), expected_batch_size=20.0)
    assert result.steps == 2
    assert model.backbone.weight.dtype == torch.float32 and model.layer.prototypes.dtype == torch.float32


def _iris():
    X, y = load_iris(return_X_y=True)
    return train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)


def test_noise_free_dp_trainer_matches_non_private_accuracy():
    """Anti-silent-failure: sigma = 0 and a huge clip norm must train like plain SGD."""
    Xtr, Xte, ytr, yte = _iris()
    scaler = PublicBoundsScaler(0.0, 8.0).fit()
    x = torch.tensor(scaler.transform(Xtr), dtype=torch.float32)
    xt = torch.tensor(scaler.transform(Xte), dtype=torch.float32)
    y = torch.tensor(ytr)
    model = PrototypeModel(GMLVQLayer(4, 3), [0, 1, 2])
    with torch.no_grad():
        model.layer.prototypes.copy_(class_mean_prototypes(x, y, model.prototype_labels))
    ledger = PrivacyLedger()
    fit_dp_sgd(
        model,
        x,
        y,
        fixed_noise_recipe(0.1, 300, max_grad_norm=1e6, sgd=SGDSettings(lr=0.02)),
        ledger=ledger,
        expected_batch_size=0.1 * len(y),
        noise_multiplier=0.0,
        generator=torch.Generator().manual_seed(0),
    )
    dp_acc = (model.predict(xt).numpy() == yte).mean()
    plain = GMLVQ(solver="sgd", lr=0.02, max_iter=30, batch_size=10, random_state=0, dtype="float32")
    plain_acc = plain.fit(scaler.transform(Xtr), ytr).score(scaler.transform(Xte), yte)
    assert dp_acc >= plain_acc - 0.05 and dp_acc > 0.85
    assert ledger.get_epsilon() == math.inf  # a noise-free run is recorded as non-private


def test_opacus_accountant_agrees_with_the_ledger():
    Xtr, _, ytr, _ = _iris()
    x = torch.tensor(PublicBoundsScaler(0.0, 8.0).fit_transform(Xtr), dtype=torch.float32)
    model = PrototypeModel(GMLVQLayer(4, 3), [0, 1, 2])
    ledger = PrivacyLedger(accountant="rdp")
    result = fit_dp_sgd(
        model,
        x,
        torch.tensor(ytr),
        fixed_noise_recipe(0.1, 50, max_grad_norm=1.0, sgd=SGDSettings(lr=0.1)),
        ledger=ledger,
        expected_batch_size=0.1 * len(ytr),
        noise_multiplier=1.2,
        generator=torch.Generator().manual_seed(0),
    )
    assert result.steps == 50
    assert ledger.get_epsilon(1e-5) == pytest.approx(result.opacus_epsilon(1e-5), rel=0.05)


@pytest.mark.slow
def test_dp_estimators_learn_and_carry_their_guarantee():
    X, y = load_wine(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    lower, upper = np.zeros(13), np.array([15, 6, 4, 31, 170, 4, 6, 1, 4, 14, 2, 5, 1700.0])  # public ranges
    model = DPGLVQ(epsilon=8.0, bounds=(lower, upper), sampling_rate=0.1, epochs=5, lr=0.5, noise_seed=0).fit(
        Xtr, ytr
    )  # an accuracy floor needs reproducible noise
    assert model.score(Xte, yte) > 0.6
    assert model.epsilon_ <= 8.0 + 1e-9 and model.privacy_["epsilon"] == pytest.approx(model.epsilon_)
    assert [e["name"] for e in model.privacy_["events"]] == ["dp_init/class_counts", "dp_init/class_sums", "dp_sgd"]
    assert model.model_.privacy_ == model.privacy_
    assert model.prototypes_.shape == (3, 13)


def test_paper_calibration_reports_what_it_spends():
    Xtr, _, ytr, _ = _iris()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # delta >= 1/n for iris
        model = DPGMLVQ(
            epsilon=2.0, calibration="paper", bounds=(0.0, 8.0), sampling_rate=0.1, epochs=5, random_state=0
        ).fit(Xtr, ytr)
    sgd = model.ledger_.events[-1]
    assert sgd.noise_multiplier == pytest.approx(
        paper_noise_multiplier((1 - model.init_fraction) * 2.0, 1e-5, model.sampling_rate_, model.n_iter_), rel=1e-9
    )
    assert model.epsilon_ == pytest.approx(model.ledger_.get_epsilon(1e-5))


class TestBadInput:
    Xtr, _, ytr, _ = _iris()

    def test_bad_epsilon(self):
        with pytest.raises(ValueError, match="epsilon"):
            DPGLVQ(epsilon=0.0).fit(self.Xtr, self.ytr)

    @pytest.mark.slow
    def test_delta_not_below_one_over_n(self):
        # judged on the released noisy count (post-processing), never on the private n
        with pytest.warns(UserWarning, match=r"delta = 0.05 is not below 1/n for the noisy record count"):
            DPGLVQ(epsilon=3.0, delta=0.05, bounds=(0, 8), sampling_rate=0.1, epochs=1).fit(self.Xtr, self.ytr)

    @pytest.mark.slow
    def test_empty_expected_batches_warn_on_the_noisy_count(self):
        with pytest.warns(UserWarning, match=r"expected batch below one record"):
            DPGLVQ(epsilon=1.0, sampling_rate=0.001).fit(self.Xtr, self.ytr)

    @pytest.mark.slow
    def test_out_of_domain_records_are_clipped_and_counted_for_the_curator(self):
        with warnings.catch_warnings():
            warnings.simplefilter("error", DomainWarning)
            model = DPGLVQ(epsilon=3.0, delta=1e-3, bounds=(0, 5), sampling_rate=0.1, epochs=1).fit(self.Xtr, self.ytr)
        assert model.curator_["num_clipped"] > 0 and not hasattr(model, "num_clipped_")

    def test_bad_solver_and_mode(self):
        with pytest.raises(ValueError, match="solver"):
            DPGLVQ(solver="lbfgs").fit(self.Xtr, self.ytr)
        with pytest.raises(ValueError, match="grad_sample_mode"):
            DPGLVQ(grad_sample_mode="jax").fit(self.Xtr, self.ytr)


def _tiny_dp_glvq(noise):
    """DP-GLVQ on 16 one-dimensional records; the statistic is prototype 0."""
    from dp_proto.lvq import GLVQLayer

    def mechanism(data, generator):
        x, y = data
        model = PrototypeModel(GLVQLayer(1, 2, prototypes=torch.tensor([[-0.5], [0.5]])), [0, 1])
        fit_dp_sgd(
            model,
            x,
            y,
            fixed_noise_recipe(0.5, 4, max_grad_norm=1.0, sgd=SGDSettings(lr=1.0)),
            ledger=PrivacyLedger(),
            expected_batch_size=8.0,
            noise_multiplier=noise,
            generator=generator,
        )
        return model.layer.prototypes.detach()[0, 0:1]

    return mechanism


@pytest.mark.slow
def test_audit_of_a_small_dp_glvq_training_stays_below_the_claim():
    """A class-0 canary at the far end of the domain; D1 = D0 + canary. The audited lower
    bound stays below the ledger's claim, and the same audit flags a noise-free trainer."""
    from dp_proto.privacy import audit_epsilon

    x0 = torch.tensor([[-0.5]] * 8 + [[0.5]] * 8)
    y0 = torch.tensor([0] * 8 + [1] * 8)
    d0 = (x0, y0)
    d1 = (torch.cat([x0, torch.tensor([[1.0]])]), torch.cat([y0, torch.tensor([0])]))
    claim = PrivacyLedger()
    claim.spend(SubsampledGaussianEvent(noise_multiplier=2.0, sampling_rate=0.5, count=4))
    claimed = claim.get_epsilon(1e-5)  # about 2.5
    private = audit_epsilon(_tiny_dp_glvq(2.0), d0, d1, n_trials=600, delta=1e-5, generator_seed=0)
    leaky = audit_epsilon(_tiny_dp_glvq(0.0), d0, d1, n_trials=600, delta=1e-5, generator_seed=0)
    assert private.epsilon_lower_bound < claimed
    assert leaky.epsilon_lower_bound > claimed  # the test can fail: no noise is detected


@pytest.mark.slow
def test_fit_dp_sgd_stops_cleanly_at_the_budget():
    Xtr, _, ytr, _ = _iris()
    x = torch.tensor(PublicBoundsScaler(0.0, 8.0).fit_transform(Xtr), dtype=torch.float32)
    model = PrototypeModel(GMLVQLayer(4, 3), [0, 1, 2])
    ledger = PrivacyLedger(budget=(3.0, 1e-5))
    result = fit_dp_sgd(
        model,
        x,
        torch.tensor(ytr),
        fixed_noise_recipe(0.1, 10_000, max_grad_norm=1.0, sgd=SGDSettings(lr=0.05)),
        ledger=ledger,
        expected_batch_size=0.1 * len(ytr),
        noise_multiplier=1.0,
        generator=torch.Generator().manual_seed(0),
    )
    assert result.stopped_by_budget and 0 < result.steps < 10_000
    assert ledger.get_epsilon(1e-5) <= 3.0
    assert sum(e.count for e in ledger.events) == result.steps  # every step run was reserved, no more


def test_a_budget_too_small_for_any_run_names_what_the_noisiest_run_spends():
    """The message names an epsilon above the target (it used to name one below it)."""
    with pytest.raises(ValueError, match=r"too small.*noise multiplier 1e\+06 already spend ([0-9.e-]+)") as err:
        calibrate_noise_multiplier(1e-4, 1e-5, 1.0, 10_000)
    spent = float(re.search(r"already spend ([0-9.e-]+) at", str(err.value)).group(1))
    assert spent > 1e-4
    with pytest.raises(ValueError, match=r"the initialisation alone spends 0\.0[0-9]+ at delta = 1e-05"):
        calibrate_noise_multiplier(0.01, 1e-5, 0.01, 100, prior_events=(PureEvent(0.02),))


def test_small_feasible_budgets_calibrate():
    """epsilon 0.002 on digits (about 1800 training records) used to be refused: the RDP
    bracket cannot certify it, the ledger's PLD accountant can (with the Laplace
    initialisation: at this epsilon the PLD grid over-estimates the Gaussian one)."""
    X, y = load_digits(return_X_y=True)
    est = DPGMLVQ(epsilon=0.002, bounds=(0, 16), classes=range(10), epochs=2, init_mechanism="laplace")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a noisy count of a few records: tiny batches
        est.fit(X, y)
    assert 0.0019 < est.epsilon_ <= 0.002 and est.noise_multiplier_ > 100


def test_a_class_absent_from_the_private_data_still_trains():
    """The DP initialisation of an absent class is its noisy count (no division by zero)
    and a clipped noisy sum; training and prediction work for the other classes."""
    from dp_proto.lvq.private.dp_init import dp_class_mean_prototypes

    g = torch.Generator().manual_seed(0)
    x = torch.rand(300, 4, generator=g, dtype=torch.float64) * 2 - 1
    y = torch.randint(0, 2, (300,), generator=g)  # class 2 of 3 is absent
    init = dp_class_mean_prototypes(x, y, 3, 1.0, generator=g, ledger=None)
    assert torch.isfinite(init.prototypes).all() and init.prototypes.abs().max() <= 1.0
    assert init.noisy_counts.shape == (3,)


@pytest.mark.slow
@pytest.mark.parametrize("estimator", [DPGLVQ, DPGMLVQ])
def test_public_classes_fix_the_model_whatever_labels_the_private_data_hold(estimator):
    """With classes=..., the released structure (classes, prototype labels) does not
    depend on which labels occur: removing every record of class 2 changes nothing."""
    X, y = load_iris(return_X_y=True)
    kwargs = dict(epsilon=5.0, bounds=(0.0, 8.0), classes=[0, 1, 2], noise_seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        warnings.filterwarnings("ignore", ".*makes the noise reproducible", PrivacyLeakWarning)
        full = estimator(**kwargs).fit(X, y)
        without = estimator(**kwargs).fit(X[y < 2], y[y < 2])
    np.testing.assert_array_equal(full.classes_, without.classes_)
    np.testing.assert_array_equal(full.prototype_labels_, without.prototype_labels_)
    assert np.isfinite(without.prototypes_).all()
    assert without.score(X[y < 2], y[y < 2]) > 0.8  # the absent class does not break the others


@pytest.mark.slow
def test_classes_read_from_the_private_labels_warn_and_unknown_labels_are_refused():
    X, y = load_iris(return_X_y=True)
    with pytest.warns(PrivacyLeakWarning, match="classes=None"):
        model = DPGLVQ(epsilon=5.0, bounds=(0.0, 8.0), random_state=0).fit(X, y)
    np.testing.assert_array_equal(model.classes_, [0, 1, 2])
    with pytest.raises(DataValidationError, match="outside the public classes"):
        DPGLVQ(epsilon=5.0, bounds=(0.0, 8.0), classes=[0, 1]).fit(X, y)
    with pytest.raises(ValueError, match="repeated"):
        DPGLVQ(classes=[0, 1, 1]).fit(X, y)
    with pytest.raises(ValueError, match="at least 2 public classes"):
        DPGLVQ(classes=[0]).fit(X[y == 0], y[y == 0])


def test_engine_and_post_processing_options_are_validated():
    X, _, y, _ = _iris()
    with pytest.raises(ValueError, match="engine"):
        DPGLVQ(engine="jax").fit(X, y)
    with pytest.raises(ValueError, match="average_last"):
        DPGLVQ(average_last=1.0).fit(X, y)
    with pytest.raises(ValueError, match="metric_lr_scale"):
        DPGMLVQ(metric_lr_scale=0.0).fit(X, y)


def test_iterate_averaging_releases_the_mean_of_the_last_iterates():
    """average_last=0.5 over 20 steps releases the mean of iterates 11..20, rebuilt here
    from seeded runs of 11, 12, ..., 20 steps (same random stream, same trajectory)."""
    from dp_proto.lvq import GLVQLayer

    g = torch.Generator().manual_seed(1)
    x = torch.rand(200, 3, generator=g, dtype=torch.float64)
    y = (x[:, 0] > 0.5).long()

    def run(steps, average_last=0.0):
        layer = GLVQLayer(3, 2, prototypes=torch.full((2, 3), 0.5, dtype=torch.float64), dtype=torch.float64)
        fit_dp_sgd(
            PrototypeModel(layer, [0, 1]),
            x,
            y,
            fixed_noise_recipe(0.1, steps, max_grad_norm=1.0, sgd=SGDSettings(lr=0.1, average_last=average_last)),
            ledger=PrivacyLedger(),
            expected_batch_size=0.1 * len(y),
            noise_multiplier=1.0,
            generator=torch.Generator().manual_seed(7),
        )
        return layer.prototypes.detach()

    expected = torch.stack([run(k) for k in range(11, 21)]).mean(0)
    torch.testing.assert_close(run(20, average_last=0.5), expected)
    assert not torch.allclose(run(20), expected)


@pytest.mark.slow
def test_secure_mode_draws_from_the_os_and_opacus_needs_csprng():
    import importlib.util

    X, _, y, _ = _iris()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = DPGLVQ(epsilon=3.0, delta=1e-3, bounds=(0, 8), sampling_rate=0.1, epochs=2, secure_mode=True).fit(X, y)
        assert model.epsilon_ <= 3.0 and model.n_iter_ == 20
        if importlib.util.find_spec("torchcsprng") is None:
            with pytest.raises(ValueError, match="torchcsprng"):
                DPGLVQ(
                    epsilon=3.0,
                    delta=1e-3,
                    bounds=(0, 8),
                    sampling_rate=0.1,
                    epochs=2,
                    engine="opacus",
                    secure_mode=True,
                ).fit(X, y)
