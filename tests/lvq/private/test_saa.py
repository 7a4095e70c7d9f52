"""Subsample-and-aggregate: sensitivity, batched bin training, matching, noise scale."""

import math

import pytest
import torch

from dp_proto.lvq.init import make_prototype_labels
from dp_proto.lvq.layers import GLVQLayer, GMLVQLayer
from dp_proto.lvq.losses import glvq_loss
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private.aggregate import BinTraining, SubsampleAggregate
from dp_proto.lvq.private.saa import (
    assign_bins,
    fit_glvq_bins,
    match_to_reference,
    project_to_domain,
    saa_sensitivity,
)
from dp_proto.privacy.ledger import PrivacyLedger
from dp_proto.privacy.mechanisms import renyi_noise_multiplier


def _discrete_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """The SAA sum's noise std: the Renyi-DP noise multiplier times the sensitivity in
    steps of the automatic grid (``1024 sqrt(k) + sqrt(k)`` steps of ``Delta / (1024 sqrt(k))``)."""
    return renyi_noise_multiplier(epsilon, delta) * sensitivity * 1025 / 1024


def _glvq(d: int, counts) -> PrototypeModel:
    """A GLVQ model with ``counts[c]`` prototypes of class ``c`` (in class order)."""
    labels = make_prototype_labels(len(counts), list(counts))
    return PrototypeModel(GLVQLayer(d, len(labels), dtype=torch.float64), labels)


def test_sensitivity_is_the_box_diameter_of_a_whole_bin_model():
    assert saa_sensitivity(1, 1) == 2.0
    assert saa_sensitivity(3, 4) == pytest.approx(2 * math.sqrt(12))
    assert saa_sensitivity(3, 4, 0.0, 1.0) == pytest.approx(
        math.sqrt(12)
    )  # the [0, 1]^d case of Brinkrolf, Göpfert & Hammer (2019)
    # Worst case realised: one bin's prototypes move from one corner of the box to the other.
    a, b = -torch.ones(3, 4), torch.ones(3, 4)
    assert (b - a).norm().item() == pytest.approx(saa_sensitivity(3, 4))


def test_a_ball_domain_bounds_each_prototype_by_its_diameter():
    # W = 3 prototypes in a ball of radius 0.5: 2 * 0.5 * sqrt(3), below the box's 2 sqrt(12).
    assert saa_sensitivity(3, 4, radius=0.5) == pytest.approx(math.sqrt(3))
    assert saa_sensitivity(3, 4, radius=10.0) == pytest.approx(2 * math.sqrt(12))  # the box is smaller
    with pytest.raises(ValueError, match="radius"):
        saa_sensitivity(3, 4, radius=0.0)
    points = torch.randn(2000, 3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3
    projected = project_to_domain(points, -1.0, 1.0, radius=1.2)
    assert projected.abs().max() <= 1.0 and projected.norm(dim=-1).max() <= 1.2 + 1e-12
    inside = torch.tensor([[0.3, -0.2, 0.1, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(project_to_domain(inside, -1.0, 1.0, radius=1.2), inside)
    # Realised worst case: two whole bin models as far apart as the ball allows.
    a = project_to_domain(torch.full((3, 4), 5.0, dtype=torch.float64), -1.0, 1.0, radius=0.5)
    b = project_to_domain(torch.full((3, 4), -5.0, dtype=torch.float64), -1.0, 1.0, radius=0.5)
    assert (a - b).norm().item() == pytest.approx(saa_sensitivity(3, 4, radius=0.5))
    # The ball is centred on the box centre.
    shifted = project_to_domain(torch.full((1, 2), 9.0, dtype=torch.float64), 0.0, 4.0, radius=1.0)
    torch.testing.assert_close(shifted, torch.full((1, 2), 2.0 + 1 / math.sqrt(2), dtype=torch.float64))


def test_bins_are_iid_uniform_labels():
    bins = assign_bins(60_000, 6, generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(bins, minlength=6).double()
    assert counts.sum() == 60_000 and ((counts - 10_000).abs() < 5 * 100).all()  # ~5 std
    with pytest.raises(ValueError, match="num_bins"):
        assign_bins(10, 0)


def _two_class_data(n=120, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(2).repeat(n // 2)
    x = torch.randn(n, d, generator=g, dtype=torch.float64) * 0.2 + torch.where(y[:, None] == 0, -0.5, 0.5)
    return x.clamp(-1, 1), y


def test_batched_bin_training_equals_separate_fits():
    """Each bin's trajectory is that of a plain single-bin torch Adam loop over its own
    batch schedule (rebuilt here from the per-bin shuffle keys): ceil(L_b / B) steps per
    epoch, no step once its records are used up."""
    import math

    from dp_proto.lvq.private.saa import _bin_class_means, _padded_bins, bin_shuffle_keys

    x, y = _two_class_data()
    labels = torch.tensor([0, 1])
    m, epochs, batch, lr = 4, 3, 8, 0.01
    bins = assign_bins(len(y), m, generator=torch.Generator().manual_seed(1))
    bins[:12] = 0  # one bin clearly larger than the others
    seeds = torch.tensor([11, -5, 2**40, 7], dtype=torch.int64)
    together = fit_glvq_bins(x, y, bins, m, labels, epochs=epochs, batch_size=batch, lr=lr, bin_seeds=seeds)
    index, mask = _padded_bins(bins, m)
    width = math.ceil(index.shape[1] / batch) * batch
    index = torch.nn.functional.pad(index, (0, width - index.shape[1]))
    mask = torch.nn.functional.pad(mask, (0, width - mask.shape[1]))
    init = _bin_class_means(x, y, index, mask, labels, 0.0, None)
    top = torch.iinfo(torch.int64).max
    for b in range(m):
        w = init[b].clone().requires_grad_(True)
        opt = torch.optim.Adam([w], lr=lr)
        for e in range(epochs):
            keys = bin_shuffle_keys(seeds, e, width)[b]
            perm = torch.argsort(torch.where(mask[b], keys, torch.full_like(keys, top)), stable=True)
            order, valid = index[b][perm], mask[b][perm]
            for start in range(0, width, batch):
                rows, ok = order[start : start + batch], valid[start : start + batch]
                if not bool(ok.any()):
                    break
                cost = glvq_loss(torch.cdist(x[rows], w).pow(2), y[rows], labels, reduction="none")
                loss = (cost * ok).sum() / ok.sum().clamp_min(1)
                opt.zero_grad()
                loss.backward()
                opt.step()
        torch.testing.assert_close(together[b], w.detach(), atol=1e-10, rtol=1e-8)


def test_an_empty_bin_and_a_missing_class_stay_finite():
    x, y = _two_class_data(n=40)
    bins = torch.zeros(40, dtype=torch.long)
    bins[y == 1] = 1  # bin 0 has only class 0, bin 1 only class 1, bin 2 nothing
    protos = fit_glvq_bins(x, y, bins, 3, torch.tensor([0, 1]), epochs=3)
    assert torch.isfinite(protos).all()
    torch.testing.assert_close(protos[2], torch.zeros(2, 3, dtype=torch.float64))  # no data: box centre


def test_matching_reorders_each_class_to_the_reference():
    labels = torch.tensor([0, 0, 1])
    reference = torch.tensor([[0.0, 0.0], [1.0, 1.0], [5.0, 5.0]])
    bins = torch.tensor([[[1.1, 0.9], [0.1, -0.1], [5.0, 5.1]], [[0.0, 0.1], [0.9, 1.0], [4.9, 5.0]]])
    matched = match_to_reference(bins, labels, reference)
    torch.testing.assert_close(matched[0], torch.tensor([[0.1, -0.1], [1.1, 0.9], [5.0, 5.1]]))
    torch.testing.assert_close(matched[1], bins[1])


def test_identical_bins_return_their_common_prototypes_plus_noise_of_the_stated_scale():
    """All records of a class at one point: every bin learns (about) that point; the
    release is the point plus N(0, (sigma / m)^2) per coordinate."""
    d, m, eps, delta = 2, 10, 1.0, 1e-5
    centres = torch.tensor([[-0.5, 0.0], [0.5, 0.0]], dtype=torch.float64)
    y = torch.arange(2).repeat(500)
    x = centres[y]
    draws = []
    recipe = SubsampleAggregate(eps, delta, num_bins=m, training=BinTraining(epochs=2), project_release=False)
    for seed in range(30):
        ledger = PrivacyLedger()
        model = _glvq(d, [1, 1])
        result = recipe.run(model, x, y, ledger, generator=torch.Generator().manual_seed(seed))
        draws.append(result.prototypes - centres)
        assert torch.equal(model.layer.prototypes.detach(), result.prototypes)
        assert ledger.get_epsilon(delta) == pytest.approx(eps, rel=1e-6)
    noise = torch.stack(draws).flatten()
    expected = _discrete_sigma(eps, delta, saa_sensitivity(2, d)) / m
    assert result.noise_std == pytest.approx(expected)
    assert noise.std().item() == pytest.approx(expected, rel=0.2)  # 120 draws
    assert abs(noise.mean().item()) < 4 * expected / math.sqrt(noise.numel()) + 0.01


def test_unequal_prototype_counts_per_class():
    x, y = _two_class_data(n=400, d=2)
    reference = torch.tensor([[-0.5, -0.5], [-0.5, 0.5], [0.5, 0.5]], dtype=torch.float64)
    ledger = PrivacyLedger()
    recipe = SubsampleAggregate(2.0, 1e-5, num_bins=5, radius=1.0, training=BinTraining(epochs=2))
    result = recipe.run(_glvq(2, [2, 1]), x, y, ledger, reference=reference, generator=torch.Generator().manual_seed(0))
    assert result.prototypes.shape == (3, 2)
    expected = _discrete_sigma(2.0, 1e-5, saa_sensitivity(3, 2, radius=1.0)) / 5
    assert result.noise_std == pytest.approx(expected)
    assert ledger.get_epsilon(1e-5) == pytest.approx(2.0, rel=1e-6)
    with pytest.raises(ValueError, match="reference"):
        SubsampleAggregate(1.0, 1e-5, num_bins=5).run(_glvq(2, [2, 1]), x, y)
    shuffled = PrototypeModel(GLVQLayer(2, 2, dtype=torch.float64), [1, 0])
    with pytest.raises(ValueError, match="class order"):
        SubsampleAggregate(1.0, 1e-5, num_bins=5).run(shuffled, x, y)


def test_bad_input():
    x, y = _two_class_data(n=20)
    with pytest.raises(ValueError, match="reference"):
        SubsampleAggregate(1.0, 1e-5, num_bins=4).run(_glvq(x.shape[1], [2, 2]), x, y)
    with pytest.raises(ValueError, match="num_bins"):
        SubsampleAggregate(1.0, 1e-5, num_bins=0)
    with pytest.raises(ValueError, match="epsilon"):
        SubsampleAggregate(0.0, 1e-5, num_bins=4)
    with pytest.raises(ValueError, match="epochs"):
        BinTraining(epochs=0)
    with pytest.raises(ValueError, match="GLVQ"):
        SubsampleAggregate(1.0, 1e-5).run(PrototypeModel(GMLVQLayer(x.shape[1], 2), [0, 1]), x, y)
    # more bins than records: most bins are empty; the release is still defined
    recipe = SubsampleAggregate(1.0, 1e-5, num_bins=50, training=BinTraining(epochs=1))
    result = recipe.run(_glvq(x.shape[1], [1, 1]), x, y, generator=torch.Generator().manual_seed(0))
    assert result.empty_bins >= 30 and torch.isfinite(result.prototypes).all()
