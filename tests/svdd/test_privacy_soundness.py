"""Privacy soundness of the private SVDD releases.

* The noise comes from fresh operating-system entropy; ``random_state`` draws only the
  public randomness (feature map, start points); ``noise_seed`` is the explicit,
  warned and recorded opt-in to reproducible noise.
* ``starts="training"`` (the variant of Park 2022, not DP) says so in its ledger.
* A private fit exposes the same attributes, ledger events, warnings and exceptions
  on neighbouring data sets (:func:`~dp_proto.privacy.testing.neighbour_check`), and
  every noise draw goes through the release hook.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import dp_proto.privacy.mechanisms as mechanisms_module
import dp_proto.privacy.noise as noise_module
import dp_proto.svdd.grid as grid_module
import dp_proto.svdd.private as private_module
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.privacy.testing import (
    adversarial_removals,
    capture_releases,
    neighbour_check,
    remove_record,
)
from dp_proto.svdd import PrivateSVDD, PrivateSVDDClassifier
from dp_proto.svdd.baselines import PrivateSVMOutput, PrivateSVMWeight
from dp_proto.svdd.grid import cube_counts

CURATOR = ("curator_",)
CLASSES = [0, 1, 2, 3]
# small and fast: 100 random features, 2-D data, few records
KW = dict(c_over_n=0.05, gamma=1.0, num_features=100, epsilon=5.0, classes=CLASSES, random_state=0)


@pytest.fixture(scope="module")
def data():
    """Three blobs of 20 records and a fourth class with a single record."""
    rng = np.random.default_rng(0)
    X = np.vstack(
        [rng.normal(c, 0.4, (20, 2)) for c in ((-1.5, 0.0), (1.5, 0.0), (0.0, 1.5))] + [np.array([[0.0, -1.5]])]
    )
    y = np.r_[np.repeat([0, 1, 2], 20), 3]
    return X, y


def _removals(X, y, extra: int = 3, seed: int = 1) -> list[int]:
    """The auditor's records (corners, a class's only record, the last one) and a few random ones."""
    picks = adversarial_removals(X, y)
    picks += [int(i) for i in np.random.default_rng(seed).choice(len(X), extra, replace=False)]
    return list(dict.fromkeys(picks))


# -- fresh noise by default, reproducible only on request --------------------------------
def test_default_noise_is_fresh_whatever_random_state(data):
    X, y = data
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no noise_seed: nothing to warn about
        a = PrivateSVDDClassifier(**KW, starts="normal", n_starts=50).fit(X, y)
        b = PrivateSVDDClassifier(**KW, starts="normal", n_starts=50).fit(X, y)
        grid_a = PrivateSVDDClassifier(**KW, starts="grid", r_max=0.5).fit(X, y)
        grid_b = PrivateSVDDClassifier(**KW, starts="grid", r_max=0.5).fit(X, y)
        one_a = PrivateSVDD(c_over_n=0.05, num_features=100, epsilon=5.0, random_state=0).fit(X)
        one_b = PrivateSVDD(c_over_n=0.05, num_features=100, epsilon=5.0, random_state=0).fit(X)
    # the public randomness follows random_state ...
    assert torch.equal(a.features_.frequencies, b.features_.frequencies)
    # ... the noise does not
    assert not torch.equal(a.centre_, b.centre_)
    assert a.cell_counts_.shape == b.cell_counts_.shape and not torch.equal(a.cell_counts_, b.cell_counts_)
    assert not torch.equal(grid_a.centre_, grid_b.centre_)
    assert not (
        grid_a.cell_counts_.shape == grid_b.cell_counts_.shape and torch.equal(grid_a.cell_counts_, grid_b.cell_counts_)
    )
    assert not torch.equal(one_a.centre_, one_b.centre_)
    for model in (a, grid_a, one_a):
        assert model.ledger_.summary()["noise"] == "fresh"


def test_noise_seed_warns_reproduces_and_is_recorded(data):
    X, y = data

    def fit(**kw):
        with capture_releases() as rec:
            model = PrivateSVDDClassifier(**{**KW, "starts": "normal", "n_starts": 50, **kw}).fit(X, y)
        return model, rec.releases

    with pytest.warns(PrivacyLeakWarning, match="noise_seed"):
        a, rel_a = fit(noise_seed=11)
    with pytest.warns(PrivacyLeakWarning, match="noise_seed"):
        b, _ = fit(noise_seed=11)
    assert torch.equal(a.centre_, b.centre_) and torch.equal(a.cell_counts_, b.cell_counts_)
    summary = a.ledger_.summary()
    assert summary["noise"] == "reproducible" and math.isfinite(a.ledger_.get_epsilon())
    # the noise stream does not depend on random_state: another feature map, the same noise
    with pytest.warns(PrivacyLeakWarning, match="noise_seed"):
        c, rel_c = fit(noise_seed=11, random_state=1)
    assert not torch.equal(a.features_.frequencies, c.features_.frequencies)
    assert rel_a[0].name == rel_c[0].name == "svdd/centre"
    # The centre is released on the public grid Delta / (1024 F) (laplace_mechanism's default):
    # output = (round(pre / grid) + integer noise) * grid. The integer noise is the noise
    # stream; the rounding of pre differs between the two feature maps (by < 1 grid step).
    assert rel_a[0].sensitivity == rel_c[0].sensitivity
    grid = rel_a[0].sensitivity / (1024 * rel_a[0].pre_noise.numel())
    steps = []
    for rel in (rel_a[0], rel_c[0]):
        out = rel.output.double() / grid  # the output is on the grid (up to its dtype's rounding)
        torch.testing.assert_close(out, out.round(), atol=1e-6, rtol=0)
        steps.append(out.round() - torch.round(rel.pre_noise / grid))
    assert torch.equal(steps[0], steps[1]) and bool((steps[0] != 0).any())  # the same integer noise
    noise_a = rel_a[0].output.double() - rel_a[0].pre_noise
    noise_c = rel_c[0].output.double() - rel_c[0].pre_noise
    torch.testing.assert_close(noise_a, noise_c, atol=grid * (1 + 1e-3), rtol=0)  # up to the rounding
    # the one-class estimator, the grid and the SVM baseline take it too
    with pytest.warns(PrivacyLeakWarning, match="noise_seed"):
        one = [
            PrivateSVDD(c_over_n=0.05, num_features=100, epsilon=5.0, random_state=0, noise_seed=3).fit(X)
            for _ in range(2)
        ]
        grid = [PrivateSVDDClassifier(**KW, starts="grid", r_max=0.5, noise_seed=3).fit(X, y) for _ in range(2)]
        svm = [
            PrivateSVMWeight(0.05, 1.0, 100, 5.0, classes=CLASSES, random_state=0, noise_seed=3).fit(X, y)
            for _ in range(2)
        ]
    assert torch.equal(one[0].centre_, one[1].centre_) and one[0].radius2_ == one[1].radius2_
    assert torch.equal(grid[0].cubes_, grid[1].cubes_) and torch.equal(grid[0].cell_counts_, grid[1].cell_counts_)
    assert torch.equal(svm[0].weights_, svm[1].weights_)
    for model in (one[0], grid[0], svm[0]):
        assert model.ledger_.summary()["noise"] == "reproducible"
    # without noise_seed the SVM baseline's noise is fresh too
    fresh = [PrivateSVMWeight(0.05, 1.0, 100, 5.0, classes=CLASSES, random_state=0).fit(X, y) for _ in range(2)]
    assert not torch.equal(fresh[0].weights_, fresh[1].weights_)
    assert fresh[0].ledger_.summary()["noise"] == "fresh"


# -- the thesis variant is not private and its ledger says so -----------------------------
def test_training_starts_record_a_non_private_release(data):
    X, y = data
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = PrivateSVDDClassifier(**KW, starts="training").fit(X, y)
    assert any(
        issubclass(w.category, PrivacyLeakWarning) and "not differentially private" in str(w.message) for w in caught
    )
    assert not model.is_private_
    assert "non_private" in [e.kind for e in model.ledger_.events]
    assert math.isinf(model.ledger_.get_epsilon())
    assert math.isinf(model.ledger_.summary()["epsilon"])


# -- neighbouring data sets see the same release -------------------------------------------
@pytest.mark.parametrize(
    "params",
    [
        dict(),  # the default starts="auto" (here: the normal starts, few records per cube)
        dict(r_max=0.5),  # auto with a cube size
        dict(starts="normal", n_starts=60, r_max=0.5),
        dict(starts="grid", r_max=0.5),
    ],
    ids=["auto", "auto-r_max", "normal-hypercubes", "grid"],
)
def test_classifier_passes_the_neighbour_check(data, params):
    X, y = data
    removals = _removals(X, y)
    assert len(X) - 1 in removals and 60 in removals  # the last record is the class's only one
    report = neighbour_check(
        lambda X, y: PrivateSVDDClassifier(**KW, **params).fit(X, y), (X, y), removals, curator_only=CURATOR
    )
    report.assert_ok()
    assert report.releases[0] == "svdd/centre"
    assert {"svdd/votes", "svdd/grid_votes"} & set(report.releases)
    assert report.max_ratio["svdd/centre"] <= 1.0


def test_one_class_svdd_passes_the_neighbour_check(data):
    X, _ = data
    removals = _removals(X, None)
    report = neighbour_check(
        lambda X: PrivateSVDD(c_over_n=0.05, num_features=100, epsilon=5.0, random_state=0).fit(X),
        (X,),
        removals,
        curator_only=CURATOR,
    )
    report.assert_ok()
    assert report.releases == ["svdd/centre", "svdd/radius"]
    assert 0 < report.max_ratio["svdd/centre"] <= 1.0 and report.max_ratio["svdd/radius"] <= 1.0


def test_a_single_record_class_is_not_announced(data):
    """One class has exactly one record: removing it changes no warning and no attribute."""
    X, y = data
    assert np.sum(y == 3) == 1
    release = lambda X, y: PrivateSVDDClassifier(**KW, starts="normal", n_starts=40).fit(X, y)  # noqa: E731
    report = neighbour_check(release, (X, y), [int(np.flatnonzero(y == 3)[0])], curator_only=CURATOR)
    report.assert_ok()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = release(X, y)
    assert model.curator_["single_record_classes"] == [3]


@pytest.mark.parametrize("estimator", ["classifier", "one_class"])
def test_n_times_cap_just_one_behaves_like_its_neighbours(estimator):
    """``n * C/n`` is exactly 1 (20 records, C/n = 0.05): a neighbour has fewer than
    ``n / C`` records, where the dual's simplex is empty. A private fit must not fail there,
    and its centre moves by at most the declared sensitivity (every beta_i at the box)."""
    rng = np.random.default_rng(2)
    X = np.vstack([rng.normal(-1.0, 0.5, (10, 2)), rng.normal(1.0, 0.5, (10, 2))])
    y = np.repeat([0, 1], 10)
    assert 0.05 * len(X) == 1.0
    if estimator == "classifier":
        data, release = (
            (X, y),
            (
                lambda X, y: PrivateSVDDClassifier(
                    c_over_n=0.05, num_features=100, epsilon=5.0, classes=[0, 1], random_state=0
                ).fit(X, y)
            ),
        )
    else:
        data, release = (
            (X,),
            (lambda X: PrivateSVDD(c_over_n=0.05, num_features=100, epsilon=5.0, random_state=0).fit(X)),
        )
    removals = _removals(X, y if estimator == "classifier" else None, extra=2)
    report = neighbour_check(release, data, removals, curator_only=CURATOR)
    report.assert_ok()
    assert 0 < report.max_ratio["svdd/centre"] <= 1.0
    smaller = release(*remove_record(data, 0))
    assert smaller.curator_["box_full"] is True and smaller.curator_["n_records"] == 19
    # without privacy the impossible box stays an error
    with pytest.raises(ValueError, match="below 1/n"):
        PrivateSVDD(c_over_n=0.05, num_features=100, epsilon=None, random_state=0).fit(X[:19])


def test_svm_baselines_pass_the_neighbour_check(data):
    """SVM WEIGHT releases the noisy weights; SVM OUTPUT answers every query point as its
    own release (the declared sensitivity holds per point, not for a batch)."""
    X, y = data
    removals = _removals(X, y, extra=2)
    weight = neighbour_check(
        lambda X, y: PrivateSVMWeight(0.05, 1.0, 100, 5.0, classes=CLASSES, random_state=0).fit(X, y),
        (X, y),
        removals,
        curator_only=CURATOR,
    )
    weight.assert_ok()
    assert weight.releases == ["svm_weight"] and 0 < weight.max_ratio["svm_weight"] <= 1.0
    queries = X[:6]

    def answer(X, y):
        model = PrivateSVMOutput(0.05, 1.0, 100, 5.0, classes=CLASSES, random_state=0).fit(X, y)
        return model.decision_function(queries), model.ledger_

    output = neighbour_check(answer, (X, y), removals)
    output.assert_ok()
    assert output.releases == ["svm_output_queries"] * len(queries)
    assert 0 < output.max_ratio["svm_output_queries"] <= 1.0


def test_grid_votes_have_sensitivity_one_and_go_through_the_hook(data):
    """The sparse histogram has no fixed-shape pre-noise tensor, so it declares no
    sensitivity to the neighbour check; here the dense table it stands for is compared
    directly: one record changes one (cube, class) count by one."""
    X, y = data
    with capture_releases() as rec:
        model = PrivateSVDDClassifier(**KW, starts="grid", r_max=0.5).fit(X, y)
    (votes,) = [r for r in rec.releases if r.name == "svdd/grid_votes"]
    assert votes.sensitivity is None and votes.pre_noise is None
    labels = torch.as_tensor(np.searchsorted(model.classes_, y))
    # the record's cube depends on the record and the released centre only
    cells = model.grid_.index(model._dynamics(torch.as_tensor(X, dtype=model.centre_.dtype)))

    def dense(keep: torch.Tensor) -> dict[tuple[int, int], float]:
        keys, _, counts = cube_counts(cells[keep], labels[keep], model.grid_, len(CLASSES))
        return {(int(k), j): float(counts[i, j]) for i, k in enumerate(keys) for j in range(len(CLASSES))}

    full = dense(torch.ones(len(X), dtype=torch.bool))
    assert sum(full.values()) == len(X)
    for index in _removals(X, y):
        keep = torch.ones(len(X), dtype=torch.bool)
        keep[index] = False
        less = dense(keep)
        moved = sum(abs(full.get(k, 0.0) - less.get(k, 0.0)) for k in set(full) | set(less))
        assert moved == 1.0


def test_every_noise_draw_goes_through_the_hook(data, monkeypatch):
    """Replaying a fit's releases draws no noise at all: a sampler called while the hook
    replays is a draw that bypasses it (grid, normal starts, one-class)."""
    X, y = data
    fits = {
        "grid": lambda: PrivateSVDDClassifier(**KW, starts="grid", r_max=0.5).fit(X, y),
        "normal": lambda: PrivateSVDDClassifier(**KW, starts="normal", n_starts=40).fit(X, y),
        "one_class": lambda: PrivateSVDD(c_over_n=0.05, num_features=100, epsilon=5.0, random_state=0).fit(X),
    }
    recorded = {}
    for key, fit in fits.items():
        with capture_releases() as rec:
            recorded[key] = (fit(), rec.releases)

    def bypass(*args, **kwargs):
        raise AssertionError("noise drawn outside dp_proto.privacy.testing.intercept")

    for module in (noise_module, mechanisms_module, grid_module, private_module):
        for name in ("uniform_open", "laplace_noise", "gaussian_noise", "discrete_laplace_noise"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, bypass)
    for key, fit in fits.items():
        reference, releases = recorded[key]
        with capture_releases(replay=releases):
            replayed = fit()
        assert torch.equal(replayed.centre_, reference.centre_), key
