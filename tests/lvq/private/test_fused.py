"""The fused DP-SGD engine: exact clipped sums, the right noise, Opacus' step semantics."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from dp_proto.lvq import GLVQLayer, GMLVQLayer, LGMLVQLayer, PrototypeModel
from dp_proto.lvq.private import dpsgd
from dp_proto.lvq.private.dpsgd import SGDSettings, fit_dp_sgd, fixed_noise_recipe
from dp_proto.lvq.private.fused import check_fusable, clipped_gradient_sum, record_features
from dp_proto.privacy.ledger import PrivacyLedger
from tests.lvq.private.test_grad_samplers import _model, _reference


@pytest.fixture
def exact_norms(monkeypatch):
    """Clip by the exact gradient norms (no cancellation guard): the closed forms against
    a per-sample loop. The guard itself is checked by test_clipped_sum_states."""
    from dp_proto.lvq.private import grad_samplers

    monkeypatch.setattr(grad_samplers, "CANCELLATION_GUARD", 0.0)


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from([GLVQLayer, GMLVQLayer, LGMLVQLayer]),
    st.integers(0, 9),  # batch (empty and a batch of one included)
    st.integers(1, 6),  # d
    st.integers(1, 3),  # prototypes per class
    st.integers(1, 4),  # rank
    st.sampled_from([0.05, 0.5, 100.0]),  # clip norm: most clipped ... none clipped
    st.sampled_from([("identity", 1.0), ("sigmoid", 16.0), ("sigmoid", 1.0)]),  # the DP estimators' default: 16
    st.integers(0, 2**31 - 1),
)
def test_clipped_sum_matches_clipping_a_per_sample_loop(kind, batch, d, per_class, rank, clip, transfer, seed):
    from dp_proto.lvq.private import grad_samplers

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(grad_samplers, "CANCELLATION_GUARD", 0.0)
        _clipped_sum_matches_a_loop(kind, batch, d, per_class, rank, clip, transfer, seed)


def _clipped_sum_matches_a_loop(kind, batch, d, per_class, rank, clip, transfer, seed):
    transfer_fn, beta = transfer
    model = _model(kind, d, per_class, rank, seed)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, d, generator=g, dtype=torch.float64) * 2
    y = torch.randint(0, 3, (batch,), generator=g)
    names = [name for name, _ in model.layer.named_parameters()]
    if batch:
        reference = _reference(model, x, y, transfer_fn=transfer_fn, beta=beta)
        norms = torch.stack([reference[n].flatten(1).pow(2).sum(1) for n in names]).sum(0).sqrt()
        factor = (clip / (norms + 1e-6)).clamp(max=1.0)
        expected = {n: (factor.reshape(-1, *[1] * (reference[n].dim() - 1)) * reference[n]).sum(0) for n in names}
    model.zero_grad(set_to_none=True)
    got_norms, costs = clipped_gradient_sum(model, x, y, clip, transfer_fn=transfer_fn, beta=beta)
    assert got_norms.shape == costs.shape == (batch,)
    for name, p in model.layer.named_parameters():
        if batch:
            torch.testing.assert_close(p.grad, expected[name], atol=1e-9, rtol=1e-7)
            clipped_norm = (factor * norms).max()
            assert clipped_norm <= clip * (1 + 1e-9)
        else:
            assert p.grad is None  # nothing accumulated for an empty batch


def _fit(model, x, y, *, sigma, steps, q=0.25, clip=1.0, lr=1.0, seed=0, engine="fused"):
    ledger = PrivacyLedger()
    result = fit_dp_sgd(
        model,
        x,
        y,
        fixed_noise_recipe(q, steps, max_grad_norm=clip, engine=engine, sgd=SGDSettings(lr=lr)),
        ledger=ledger,
        expected_batch_size=q * len(y),
        noise_multiplier=sigma,
        generator=torch.Generator().manual_seed(seed),
    )
    return result, ledger


def test_noise_of_one_step_has_std_sigma_c_over_the_expected_batch():
    """Prototypes far from every record get no gradient: their update is pure noise,
    N(0, (lr sigma C / (q n))^2) per coordinate."""
    d, n, q, sigma, clip, lr = 50, 40, 0.25, 1.3, 0.7, 1.0
    layer = GLVQLayer(d, 2, prototypes=torch.zeros(2, d))
    x = torch.zeros(n, d)
    x[:, 0] = 1.0
    y = torch.zeros(n, dtype=torch.long)
    model = PrototypeModel(layer, [0, 1])
    updates = []
    for seed in range(40):
        with torch.no_grad():
            layer.prototypes.zero_()
            layer.prototypes[0, 0] = 1.0  # d+ = 0 for every record: zero gradient
        before = layer.prototypes.detach().clone()
        _fit(model, x, y, sigma=sigma, steps=1, q=q, clip=clip, lr=lr, seed=seed)
        updates.append((layer.prototypes.detach() - before).flatten())
    updates = torch.cat(updates)
    expected_std = lr * sigma * clip / (q * n)
    # 4000 draws: the sample std is within 5 % of the truth with overwhelming probability.
    assert updates.std().item() == pytest.approx(expected_std, rel=0.05)
    assert abs(updates.mean().item()) < 4 * expected_std / math.sqrt(updates.numel())


def test_fused_and_opacus_engines_take_the_same_noise_free_steps(exact_norms):
    """Without noise and with full-batch sampling (q = 1) both engines clip and average
    the same per-sample gradients, so their trajectories coincide."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(30, 4, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (30,), generator=g)
    models = [_model(GMLVQLayer, 4, 1, 3, seed=5) for _ in range(2)]
    for model, engine in zip(models, ("fused", "opacus"), strict=True):
        _fit(model, x, y, sigma=0.0, steps=5, q=1.0, clip=0.3, lr=0.1, engine=engine)
    for a, b in zip(models[0].layer.parameters(), models[1].layer.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_ledger_records_poisson_subsampled_gaussian_steps():
    model = _model(GLVQLayer, 3, 1, 1, seed=1)
    x = torch.randn(100, 3, dtype=torch.float64)
    y = torch.randint(0, 3, (100,))
    result, ledger = _fit(model, x, y, sigma=1.1, steps=25, q=0.1)
    assert result.steps == 25
    events = ledger.events
    assert len(events) == 1  # the epochs (10, 10 and 5 steps) merge into one event
    (event,) = events
    assert (event.kind, event.count, event.sampling_rate, event.noise_multiplier) == (
        "subsampled_gaussian",
        25,
        0.1,
        1.1,
    )


def test_trainable_backbone_is_refused_and_auto_falls_back_to_per_record(monkeypatch):
    backbone = nn.Linear(4, 3).double()
    model = PrototypeModel(GLVQLayer(3, 3, dtype=torch.float64), [0, 1, 2], backbone=backbone)
    with pytest.raises(ValueError, match="engine='opacus'"):
        check_fusable(model)
    x = torch.randn(40, 4, dtype=torch.float64)
    y = torch.randint(0, 3, (40,))
    with pytest.raises(ValueError, match="engine='opacus'"):
        _fit(model, x, y, sigma=1.0, steps=2, engine="fused")
    before = backbone.weight.detach().clone()
    engines = []
    monkeypatch.setattr(dpsgd, "fit_per_record", lambda *args: engines.append("per_record") or args[5])
    _fit(model, x, y, sigma=1.0, steps=2, engine="auto")
    assert engines == ["per_record"]  # every record alone: batched features follow the batch's rounding
    monkeypatch.undo()
    result, _ = _fit(model, x, y, sigma=1.0, steps=2, engine="auto")
    assert result.steps == 2
    assert not torch.equal(before, backbone.weight)  # the backbone was trained too
    for p in backbone.parameters():  # a frozen backbone is public: fused is fine
        p.requires_grad_(False)
    check_fusable(model)


class _ScaledDistanceLayer(GLVQLayer):
    """A user's layer with its own distance (100 times the squared Euclidean one)."""

    def forward(self, x):
        return 100.0 * super().forward(x)


def test_a_layer_subclass_with_its_own_distance_is_not_fused():
    """The closed-form norms are the three layers' own: under this subclass's distance they
    understated every gradient norm 100 times, so a gradient of up to 100 C went unclipped."""
    model = PrototypeModel(_ScaledDistanceLayer(2, 2, dtype=torch.float64), [0, 1])
    with pytest.raises(ValueError, match="engine='opacus'"):
        check_fusable(model)
    with pytest.raises(TypeError, match="no closed-form norm sampler"):
        clipped_gradient_sum(model, torch.zeros(3, 2, dtype=torch.float64), torch.tensor([0, 1, 0]), 1.0)
    x = torch.randn(40, 2, dtype=torch.float64)
    y = torch.randint(0, 2, (40,))
    result, _ = _fit(model, x, y, sigma=1.0, steps=2, engine="auto")  # autograd, record by record
    assert result.steps == 2


@pytest.mark.slow
def test_both_engines_spend_what_was_calibrated():
    """The estimators pass q = 1/k; both engines must sample at exactly that rate, so
    the ledger certifies the target (the Opacus loader once ran at 1/(k+1))."""
    from sklearn.datasets import load_digits

    from dp_proto.lvq.private.estimators import DPGLVQ

    X, y = load_digits(return_X_y=True)
    X, y = X[:1347], y[:1347]
    for engine in ("fused", "opacus"):
        m = DPGLVQ(epsilon=3.0, bounds=(0, 16), sampling_rate=0.2, epochs=2, engine=engine, random_state=0).fit(X, y)
        (sgd,) = [e for e in m.ledger_.events if e.name == "dp_sgd"]
        assert sgd.sampling_rate == pytest.approx(m.sampling_rate_)
        assert m.epsilon_ == pytest.approx(3.0, abs=0.02)


@settings(max_examples=20, deadline=None)
@given(
    st.sampled_from([GMLVQLayer, LGMLVQLayer]),
    st.integers(1, 8),
    st.integers(1, 5),
    st.sampled_from([0.05, 0.5]),
    st.integers(0, 2**31 - 1),
)
def test_per_parameter_clipping_bounds_each_part_by_c_over_sqrt_p(kind, batch, d, clip, seed):
    model = _model(kind, d, 2, 2, seed)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, d, generator=g, dtype=torch.float64) * 2
    y = torch.randint(0, 3, (batch,), generator=g)
    reference = _reference(model, x, y)
    names = [name for name, _ in model.layer.named_parameters()]
    bound = clip / math.sqrt(len(names))
    expected = {}
    for n in names:
        norms = reference[n].flatten(1).norm(dim=1)
        factor = (bound / (norms + 1e-6)).clamp(max=1.0)
        expected[n] = (factor.reshape(-1, *[1] * (reference[n].dim() - 1)) * reference[n]).sum(0)
    model.zero_grad(set_to_none=True)
    from dp_proto.lvq.private import grad_samplers

    with pytest.MonkeyPatch.context() as patch:  # exact norms: the guard is checked by test_clipped_sum_states
        patch.setattr(grad_samplers, "CANCELLATION_GUARD", 0.0)
        clipped_gradient_sum(model, x, y, clip, clipping="per_parameter")
    for name, p in model.layer.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], atol=1e-9, rtol=1e-7)


def test_per_parameter_clipping_engines_agree_without_noise(exact_norms):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(30, 4, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (30,), generator=g)
    models = [_model(GMLVQLayer, 4, 1, 3, seed=6) for _ in range(2)]
    for model, engine in zip(models, ("fused", "opacus"), strict=True):
        fit_dp_sgd(
            model,
            x,
            y,
            fixed_noise_recipe(
                1.0, 5, max_grad_norm=0.3, engine=engine, clipping="per_parameter", sgd=SGDSettings(lr=0.1)
            ),
            ledger=PrivacyLedger(),
            expected_batch_size=len(y),
            noise_multiplier=0.0,
            generator=torch.Generator().manual_seed(0),
        )
    for a, b in zip(models[0].layer.parameters(), models[1].layer.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_poisson_batches_have_the_bernoulli_distribution():
    """Membership frequency q per record, batch size ~ Binomial(n, q), independent pairs."""
    from dp_proto.privacy.sampling import poisson_batch_index

    n, q, draws = 50, 0.1, 20_000
    g = torch.Generator().manual_seed(0)
    member = torch.zeros(draws, n)
    for t in range(draws):
        index = poisson_batch_index(n, q, g, "cpu")
        assert index.unique().numel() == index.numel() and (index >= 0).all() and (index < n).all()
        member[t, index] = 1.0
    freq = member.mean(0)
    assert (freq - q).abs().max() < 5 * math.sqrt(q * (1 - q) / draws)
    sizes = member.sum(1)
    assert sizes.mean().item() == pytest.approx(n * q, rel=0.02)
    assert sizes.var().item() == pytest.approx(n * q * (1 - q), rel=0.05)
    pair = (member[:, 0] * member[:, 1]).mean().item()  # independence of two records
    assert pair == pytest.approx(q * q, abs=5 * math.sqrt(q * q / draws))
    assert poisson_batch_index(7, 1.0, g, "cpu").tolist() == list(range(7))
    assert poisson_batch_index(0, 0.5, g, "cpu").numel() == 0


def test_record_features_are_each_records_own_forward():
    """A frozen backbone's features, each record a batch of one: the same bits whatever
    else the data set holds (an empty set gives ``(0, d)``)."""
    gen = torch.Generator().manual_seed(0)
    backbone = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3)).double().requires_grad_(False)
    model = PrototypeModel(GLVQLayer(3, 2, dtype=torch.float64), [0, 1], backbone=backbone)
    x = torch.rand(7, 6, generator=gen, dtype=torch.float64)
    features = record_features(model, x)
    assert features.shape == (7, 3)
    for i in range(7):
        assert torch.equal(features[i], backbone(x[i : i + 1])[0])
        assert torch.equal(record_features(model, x[i:])[0], features[i])
    assert record_features(model, x[:0]).shape == (0, 3)
