"""Centre of attention: radii, the centre, the smooth bound, the release and its ledger event."""

import math

import pytest
import torch

from dp_proto.lvq.layers import GLVQLayer
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private.aggregate import BinTraining, SubsampleAggregate
from dp_proto.lvq.private.coa import (
    centre_of_attention,
    centre_of_attention_mechanism,
    coa_grid,
    gaussian_admissibility,
    smooth_sensitivity,
    t_radii,
)
from dp_proto.privacy.events import ApproxEvent
from dp_proto.privacy.ledger import PrivacyLedger


def test_t_radii_count_the_point_itself_first():
    z = torch.tensor([[0.0], [1.0], [3.0]])
    r = t_radii(z)
    torch.testing.assert_close(r[:, 0], torch.zeros(3))
    torch.testing.assert_close(r[0], torch.tensor([0.0, 1.0, 3.0]))
    torch.testing.assert_close(r[2], torch.tensor([0.0, 2.0, 3.0]))


def test_centre_is_the_point_with_the_smallest_t0_radius():
    z = torch.tensor([[0.0], [0.1], [0.2], [5.0], [9.0]])
    assert centre_of_attention(z, 3) == 1  # 3-radius 0.1 (itself, 0.0, 0.2)


def test_smooth_bound_uses_the_diameter_beyond_m_and_decays():
    z = torch.zeros(5, 2)  # all equal: rho(t) = 0 for t <= m
    # t0 = 4 with s = 1: t = 5 (rho 0), t = 6 > m (diameter) at k = 1
    assert smooth_sensitivity(z, 4, beta=0.5, diameter=10.0) == pytest.approx(2 * 10.0 * math.exp(-0.5))
    spread = torch.tensor([[0.0], [1.0], [2.0], [3.0], [4.0]])
    s = smooth_sensitivity(spread, 4, beta=0.0, diameter=10.0)
    assert s == pytest.approx(20.0)  # beta = 0: the diameter term dominates


def test_admissibility_parameters():
    alpha, beta = gaussian_admissibility(1.0, 1e-5, 6)
    assert alpha == pytest.approx(1.0 / (5 * math.sqrt(2 * math.log(2e5))))
    assert beta == pytest.approx(1.0 / (4 * (6 + math.log(2e5))))


def test_release_noise_scale_and_ledger_event():
    z = torch.zeros(11, 2, dtype=torch.float64)
    ledger = PrivacyLedger()
    draws = torch.stack(
        [
            centre_of_attention_mechanism(
                z, 1.0, 1e-5, diameter=4.0, ledger=ledger, generator=torch.Generator().manual_seed(i)
            ).value
            for i in range(200)
        ]
    )
    result = centre_of_attention_mechanism(z, 1.0, 1e-5, diameter=4.0, ledger=None)
    alpha, beta = gaussian_admissibility(1.0, 1e-5, 2)
    assert result.t0 == (11 + 1) // 2 + 1  # floor((m + s) / 2) + 1 with s = 1
    expected = smooth_sensitivity(z, result.t0, beta, 4.0) / alpha
    assert not hasattr(result, "noise_std")  # data-dependent: never released
    assert draws.std().item() == pytest.approx(expected, rel=0.1)  # 400 draws
    (event,) = ledger.events
    assert (event.kind, event.epsilon, event.delta, event.count) == ("approx", 1.0, 1e-5, 200)
    step = coa_grid(4.0, 2)  # float-safe: every release on the public grid, nothing below it
    assert step == pytest.approx(4.0 / (2**20 * math.sqrt(2)))
    assert torch.equal(torch.round(draws / step) * step, draws)


def test_approx_events_compose_in_the_ledger():
    ledger = PrivacyLedger()
    ledger.spend(ApproxEvent(epsilon=0.5, delta=1e-6, name="a"))
    assert ledger.get_epsilon(1e-6) == pytest.approx(0.5, rel=1e-3)
    ledger.spend(ApproxEvent(epsilon=0.5, delta=1e-6, name="b"))
    assert ledger.get_epsilon(2e-6) <= 1.0 + 1e-3  # no worse than basic composition
    with pytest.raises(ValueError, match="delta"):
        ApproxEvent(epsilon=1.0, delta=0.0)
    rdp = PrivacyLedger(accountant="rdp")
    rdp.spend(ApproxEvent(epsilon=1.0, delta=1e-6))
    with pytest.raises(ValueError, match="PLD"):
        rdp.get_epsilon(1e-5)


def test_the_centre_of_attention_recipe_releases_a_model_and_its_planned_event():
    g = torch.Generator().manual_seed(0)
    y = torch.arange(2).repeat(300)
    x = (torch.randn(600, 2, generator=g) * 0.1 + torch.where(y[:, None] == 0, -0.5, 0.5)).clamp(-1, 1)
    ledger = PrivacyLedger()
    recipe = SubsampleAggregate(5.0, 1e-5, num_bins=15, aggregation="centre_of_attention", training=BinTraining(3))
    release = recipe.run(PrototypeModel(GLVQLayer(2, 2), [0, 1]), x, y, ledger, generator=g)
    assert release.prototypes.shape == (2, 2) and release.noise_std is None
    assert ledger.get_epsilon(1e-5) == pytest.approx(5.0, rel=1e-3)
    assert release.coa.t0 == (15 + 1) // 2 + 1 and torch.isfinite(release.prototypes).all()
    assert recipe.planned_events(2, 2) == ledger.events


def test_points_beyond_the_declared_domain_are_rejected_before_spending():
    ledger = PrivacyLedger()
    z = torch.tensor([[0.0, 0.0], [3.0, 0.0], [0.5, 0.0]])
    with pytest.raises(ValueError, match="diameter"):
        centre_of_attention_mechanism(z, 1.0, 1e-5, diameter=2.0, ledger=ledger)
    assert ledger.events == ()


def test_coa_release_is_projected_into_the_domain_unless_asked_not_to():
    g = torch.Generator().manual_seed(1)
    y = torch.arange(2).repeat(100)
    x = torch.randn(200, 3, generator=g, dtype=torch.float64) * 0.1 + torch.where(y[:, None] == 0, -0.5, 0.5)
    settings = dict(num_bins=10, aggregation="centre_of_attention", radius=0.9, training=BinTraining(epochs=1))

    def release(project: bool):
        model = PrototypeModel(GLVQLayer(3, 2, dtype=torch.float64), [0, 1])
        recipe = SubsampleAggregate(0.5, 1e-5, project_release=project, **settings)
        return recipe.run(model, x.clamp(-1, 1), y, generator=torch.Generator().manual_seed(2))

    projected = release(True)
    protos = projected.prototypes
    assert projected.coa.value.abs().max() > 1  # the raw release is far outside the domain ...
    assert protos.abs().max() <= 1 and protos.norm(dim=-1).max() <= 0.9 + 1e-12  # ... the model is not
    raw = release(False)
    torch.testing.assert_close(raw.prototypes, raw.coa.value.reshape(2, 3))
