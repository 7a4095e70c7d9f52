"""DPPairwiseGMLVQ: private pairs and private Platt scaling on one ledger."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits, load_iris, load_wine
from sklearn.model_selection import train_test_split

from dp_proto.lvq.private import DPPairwiseGMLVQ
from dp_proto.lvq.private.pairwise import (
    pair_partners,
    pairwise_clipped_gradient_sum,
    platt_clipped_gradient_sum,
)
from dp_proto.privacy.testing import adversarial_removals, neighbour_check

FAST = dict(sampling_rate=0.2, epochs=2, platt_sampling_rate=0.5, platt_epochs=2)


def _iris(n_per_class: int = 20):
    X, y = load_iris(return_X_y=True)
    keep = np.concatenate([np.flatnonzero(y == c)[:n_per_class] for c in range(3)])
    return X[keep], y[keep]


def _fit(X, y, **kw):
    params = dict(epsilon=2.0, bounds=(0, 8), classes=[0, 1, 2], **FAST)
    params.update(kw)
    return DPPairwiseGMLVQ(**params).fit(X, y)


@pytest.mark.slow
def test_ledger_spends_at_most_the_target_and_records_every_release():
    X, y = _iris()
    est = _fit(X, y)
    assert est.epsilon_ <= 2.0 + 1e-9
    names = [e.name for e in est.ledger_.events]
    assert names == ["dp_init/class_counts", "dp_init/class_sums", "dp_sgd", "platt/dp_sgd"]
    assert est.privacy_["epsilon"] <= 2.0 + 1e-9
    assert not hasattr(est, "loss_") and not hasattr(est, "pair_loss_")
    assert est.n_iter_ == 10  # public T = ceil(2 * int(1 / 0.2))


def test_predict_proba_contracts():
    X, y = _iris()
    est = _fit(X, y)
    for coupling in ("pkpd", "ht", "wlw1", "wlw2", "voting"):
        est.coupling = coupling
        p = est.predict_proba(X)
        assert p.shape == (len(X), 3)
        assert np.all(p >= 0) and np.all(p <= 1)
        np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-9)
        np.testing.assert_array_equal(est.predict(X), est.classes_[p.argmax(1)])
    assert est.pairwise_proba(X[:2]).shape == (2, 3, 3)
    assert est.prototypes_.shape == (3, 2, 4) and est.omegas_.shape == (3, 4, 4)


def test_empty_public_class_and_tiny_calibration_part_fit_without_error_or_warning():
    X, y = _iris(3)  # 9 records: some pair may get no calibration record at all
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = _fit(X, y, classes=[0, 1, 2, 3], calibration_fraction=0.1)
    assert est.predict_proba(X).shape == (9, 4)
    assert np.all(np.isfinite(est.platt_a_)) and np.all(est.platt_a_ < 0)


@pytest.mark.slow
def test_public_calibration_costs_only_the_pairs():
    X, y = _iris()
    Xp, yp = _iris(5)
    est = _fit(X, y, calibration="public", public_calibration=(Xp, yp))
    assert [e.name for e in est.ledger_.events] == ["dp_init/class_counts", "dp_init/class_sums", "dp_sgd"]
    assert est.epsilon_ <= 2.0 + 1e-9
    assert est.platt_noise_multiplier_ is None
    with pytest.raises(ValueError, match="public_calibration"):
        _fit(X, y, calibration="public")


def test_invalid_budget_shares_are_refused():
    X, y = _iris()
    with pytest.raises(ValueError, match="below 1"):
        _fit(X, y, init_fraction=0.5, platt_epsilon_fraction=0.5)


@pytest.mark.slow
def test_dp_pairwise_passes_the_neighbour_check():
    X, y = _iris(8)
    X = X.copy()
    X[3, 2] = 50.0  # the only clipped record

    def release(X, y):
        return _fit(X, y, epsilon=3.0)

    report = neighbour_check(
        release, (X, y), adversarial_removals(X, y) + [3, 10], curator_only=("curator_",)
    ).assert_ok()
    assert report.releases[:2] == ["dp_init/class_counts", "dp_init/class_sums"]
    assert set(report.releases[2:]) == {"dp_sgd", "platt/dp_sgd"}


def test_public_calibration_passes_the_neighbour_check():
    X, y = _iris(8)
    Xp, yp = _iris(4)

    def release(X, y):
        return _fit(X, y, calibration="public", public_calibration=(Xp, yp))

    neighbour_check(release, (X, y), adversarial_removals(X, y) + [5], curator_only=("curator_",)).assert_ok()


def _worst_removal(full_fn, n, removals):
    full = full_fn(torch.ones(n, dtype=torch.bool))
    worst = 0.0
    for i in removals:
        keep = torch.ones(n, dtype=torch.bool)
        keep[i] = False
        worst = max(worst, float(torch.linalg.vector_norm(full - full_fn(keep))))
    return worst


def test_pair_gradient_sum_moves_at_most_c_when_a_record_is_removed():
    gen = torch.Generator().manual_seed(3)
    c, d, n = 4, 5, 60
    x = torch.rand(n, d, generator=gen, dtype=torch.float64) * 2 - 1
    y = torch.arange(n) % c
    K = c * (c - 1) // 2
    protos = torch.rand(K, 2, d, generator=gen, dtype=torch.float64) * 2 - 1
    omegas = torch.randn(K, 3, d, generator=gen, dtype=torch.float64) * 3
    partners = pair_partners(c)
    C = 0.3

    def clipped(keep):
        gw, gom, _ = pairwise_clipped_gradient_sum(
            protos, omegas, x[keep], y[keep], partners, C, transfer_fn="identity"
        )
        return torch.cat([gw.reshape(-1), gom.reshape(-1)])

    _, _, norms = pairwise_clipped_gradient_sum(protos, omegas, x, y, partners, C, transfer_fn="identity")
    assert float(norms.max()) > C  # clipping is active
    worst = _worst_removal(clipped, n, adversarial_removals(x, y) + [int(norms.argmax())] + list(range(0, n, 7)))
    assert 0 < worst <= C * (1 + 1e-9)


def test_pair_gradient_is_the_per_record_gradient():
    """Unclipped, the sum equals autograd of the summed per-pair costs."""
    gen = torch.Generator().manual_seed(4)
    c, d, n = 3, 4, 12
    x = torch.rand(n, d, generator=gen, dtype=torch.float64) * 2 - 1
    y = torch.arange(n) % c
    protos = (torch.rand(3, 2, d, generator=gen, dtype=torch.float64) * 2 - 1).requires_grad_(True)
    omegas = torch.randn(3, d, d, generator=gen, dtype=torch.float64).requires_grad_(True)
    from dp_proto.lvq.pairwise import pair_membership, pairwise_cost, pairwise_distances

    gw, gom, _ = pairwise_clipped_gradient_sum(protos, omegas, x, y, pair_partners(c), 1e9, transfer_fn="identity")
    member = pair_membership(y, torch.tensor([[0, 1], [0, 2], [1, 2]]))
    inside = (member >= 0).sum(0).double()
    (pairwise_cost(pairwise_distances(x, protos, omegas), member) * inside).sum().backward()
    torch.testing.assert_close(gw, protos.grad)
    torch.testing.assert_close(gom, omegas.grad)


def test_platt_gradient_sum_moves_at_most_c_when_a_record_is_removed():
    gen = torch.Generator().manual_seed(5)
    c, n = 5, 50
    K = c * (c - 1) // 2
    scores = torch.rand(n, K, generator=gen, dtype=torch.float64) * 2 - 1
    y = torch.arange(n) % c
    a = torch.full((K,), -3.0, dtype=torch.float64)
    b = torch.randn(K, generator=gen, dtype=torch.float64) * 5
    targets = (torch.full((K,), 0.9, dtype=torch.float64), torch.full((K,), 0.1, dtype=torch.float64))
    C = 0.5

    def clipped(keep):
        ga, gb, _ = platt_clipped_gradient_sum(a, b, scores[keep], y[keep], pair_partners(c), targets, C)
        return torch.cat([ga, gb])

    _, _, norms = platt_clipped_gradient_sum(a, b, scores, y, pair_partners(c), targets, C)
    assert float(norms.max()) > C and float(norms.max()) <= (2 * (c - 1)) ** 0.5
    assert 0 < _worst_removal(clipped, n, list(range(n))) <= C * (1 + 1e-9)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("loader", "settings", "floor"),
    [
        (load_iris, dict(sampling_rate=0.1, epochs=20), 0.6),
        (load_wine, dict(sampling_rate=0.1, epochs=20), 0.6),
        (load_digits, dict(sampling_rate=0.05, epochs=5), 0.5),
    ],
)
def test_accuracy_clearly_above_chance_at_epsilon_5(loader, settings, floor):
    X, y = loader(return_X_y=True)
    bounds = (0, 16) if loader is load_digits else (X.min(0), X.max(0))
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        accs = [
            DPPairwiseGMLVQ(epsilon=5.0, bounds=bounds, classes=np.unique(y), noise_seed=s, **settings)
            .fit(Xtr, ytr)
            .score(Xte, yte)
            for s in range(2)
        ]
    assert np.mean(accs) > floor  # chance: 1/3, 0.40, 0.10


@pytest.mark.slow
def test_the_neighbour_check_would_catch_an_exact_count():
    """The check is not vacuous here: an attribute computed from the records without noise fails it."""

    class Leaky(DPPairwiseGMLVQ):
        def fit(self, X, y):
            super().fit(X, y)
            self.n_records_ = len(X)
            return self

    X, y = _iris(8)
    params = dict(epsilon=3.0, bounds=(0, 8), classes=[0, 1, 2], **FAST)
    report = neighbour_check(lambda X, y: Leaky(**params).fit(X, y), (X, y), [0], curator_only=("curator_",))
    assert not report.ok and "n_records_" in " ".join(report.violations)
