"""PrivateSVDD and PrivateSVDDClassifier: accuracy, privacy bookkeeping, release modes, bad input."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris, make_blobs
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.privacy import PrivacyLedger
from dp_proto.svdd import PrivateSVDD, PrivateSVDDClassifier, support_function


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    scaler = StandardScaler().fit(Xtr)
    return scaler.transform(Xtr), scaler.transform(Xte), ytr, yte


def _fit(data, **kw):
    Xtr, Xte, ytr, yte = data
    params = dict(c_over_n=0.05, gamma=1.0, r_max=0.5, random_state=0)
    params.update(kw)
    model = PrivateSVDDClassifier(**params).fit(Xtr, ytr)
    return model, float((model.predict(Xte) == yte).mean())


def test_non_private_and_large_budget_classify_iris(iris):
    model, acc = _fit(iris, epsilon=None)
    assert acc >= 0.85
    assert not model.is_private_ and math.isinf(model.ledger_.get_epsilon())
    private = np.mean([_fit(iris, epsilon=50.0, random_state=s)[1] for s in range(3)])
    assert private >= 0.8


def test_accuracy_grows_with_epsilon(iris):
    low = np.mean([_fit(iris, epsilon=0.05, random_state=s)[1] for s in range(4)])
    high = np.mean([_fit(iris, epsilon=20.0, random_state=s)[1] for s in range(4)])
    assert high > low + 0.15


def test_ledger_records_centre_and_votes_and_shares_the_budget(iris):
    model, _ = _fit(iris, epsilon=2.0, centre_fraction=0.25)
    names = [e.name for e in model.ledger_.events]
    assert names == ["svdd/centre", "svdd/record_count", "svdd/votes"]
    assert model.ledger_.events[0].epsilon == pytest.approx(0.5)
    # the record count and the votes: discrete Laplace on integer counts (one grid step each)
    count, votes = model.ledger_.events[1:]
    assert count.kind == "discrete_laplace" and count.epsilon == pytest.approx(0.1)  # 0.05 * 2
    assert count.grid_steps == 1 and count.sensitivity == 1.0 and not hasattr(count, "noise_multiplier")
    assert votes.kind == "discrete_laplace" and votes.epsilon == pytest.approx(2.0 - 0.5 - 0.1)
    assert votes.grid_steps == 1 and votes.sensitivity == 1.0
    assert torch.equal(model.cell_counts_, model.cell_counts_.round())  # integer noisy counts
    assert model.ledger_.get_epsilon() == pytest.approx(2.0, rel=1e-3)
    assert model.is_private_
    fixed, _ = _fit(iris, epsilon=2.0, n_starts=300, starts="normal")
    assert [e.name for e in fixed.ledger_.events] == ["svdd/centre", "svdd/votes"]
    assert fixed.n_starts_ == 300 and fixed.ledger_.get_epsilon() == pytest.approx(2.0, rel=1e-3)


def test_auto_start_count_follows_the_budget(iris):
    """Fewer, larger cells when the votes are noisy: about epsilon_votes * n / 4 starts."""
    n = len(iris[2])
    counts = {eps: _fit(iris, epsilon=eps, starts="normal")[0].n_starts_ for eps in (0.01, 1.0, 1000.0)}
    # the floor 2 c at the true count; the fit sees a noisy count (discrete Laplace of scale
    # 1 / 0.0005 = 2000 at epsilon 0.01), which tops the floor about 3 % of the time and
    # passes 20 starts (a noisy count above ~17 800) with probability about 1e-4
    rule = PrivateSVDDClassifier(n_starts="auto")._choose_n_starts
    assert rule(float(n), 3, 0.45 * 0.01) == 6
    assert 6 <= counts[0.01] <= 20
    assert 0.2 * 0.45 * n / 4 < counts[1.0] < 5 * 0.45 * n / 4
    assert counts[1000.0] == 2000  # max_starts
    assert _fit(iris, epsilon=None, starts="normal")[0].n_starts_ == n


def test_budgeted_ledger_refuses_an_over_budget_fit(iris):
    from dp_proto.exceptions import PrivacyBudgetExceededError

    ledger = PrivacyLedger(budget=(1.0, 1e-5))
    with pytest.raises(PrivacyBudgetExceededError):
        _fit(iris, epsilon=2.0, ledger=ledger)


def test_thesis_variant_warns_and_records_a_non_private_release(iris):
    """starts="training" (Park 2022) is not DP: the ledger says epsilon = inf next to the two
    Laplace releases of epsilon each, and a budget refuses it before any noise is drawn."""
    with pytest.warns(PrivacyLeakWarning, match="not differentially private"):
        model, acc = _fit(iris, epsilon=1.0, starts="training")
    assert not model.is_private_
    assert [(e.kind, e.name) for e in model.ledger_.events] == [
        ("non_private", "svdd/training_starts"),
        ("pure", "svdd/centre"),
        ("discrete_laplace", "svdd/votes"),
    ]
    assert math.isinf(model.ledger_.get_epsilon())
    assert acc > 0.3
    from dp_proto.exceptions import PrivacyBudgetExceededError

    ledger = PrivacyLedger(budget=(100.0, 1e-5))
    with pytest.warns(PrivacyLeakWarning), pytest.raises(PrivacyBudgetExceededError):
        _fit(iris, epsilon=1.0, starts="training", ledger=ledger)
    assert ledger.events == ()


def test_partition_does_not_depend_on_the_data(iris):
    """With public starts and no dynamics the equilibrium points are the starts, whatever the data."""
    Xtr, Xte, ytr, yte = iris
    a = PrivateSVDDClassifier(epsilon=1.0, iters=0, n_starts=200, random_state=3).fit(Xtr, ytr)
    b = PrivateSVDDClassifier(epsilon=1.0, iters=0, n_starts=200, random_state=3).fit(Xte[:30] * 2.0, yte[:30])
    assert torch.equal(a.equilibria_, b.equilibria_)
    assert not bool(torch.isin(a.equilibria_.reshape(-1), torch.as_tensor(Xtr).reshape(-1)).any())
    # explicit public starts and a uniform box behave the same way
    starts = np.random.default_rng(0).uniform(-2, 2, (50, 4))
    c = PrivateSVDDClassifier(epsilon=1.0, iters=0, starts=starts, random_state=0).fit(Xtr, ytr)
    assert c.equilibria_.shape[0] == 50
    d = PrivateSVDDClassifier(epsilon=1.0, starts="uniform", bounds=(-3, 3), n_starts=64, iters=0, random_state=0).fit(
        Xtr, ytr
    )
    assert float(d.equilibria_.abs().max()) <= 3.0


def test_every_cell_gets_a_noisy_count_and_empty_cells_can_stay_unlabelled(iris):
    model, _ = _fit(iris, epsilon=1.0, r_max=None, n_starts=500)
    cells = int(model.ep_cell_.max()) + 1
    assert model.cell_counts_.shape == (cells, 3)
    labelled = model.cell_labels_ >= 0
    assert 0 < int(labelled.sum()) < cells
    assert model.labelled_points_.shape[0] == int(labelled[model.ep_cell_].sum())


def test_release_modes(iris):
    model, acc_sf = _fit(iris, epsilon=None)
    Xtr, Xte, ytr, yte = iris
    model.set_params(release="equilibrium_points", n_neighbors=3)
    acc_knn = float((model.predict(Xte) == yte).mean())
    assert acc_knn >= 0.8 and acc_sf >= 0.8


def test_dynamics_converge_to_the_cluster_centres():
    X, y = make_blobs(n_samples=300, centers=[[-2, 0], [2, 0]], cluster_std=0.3, random_state=0)
    model = PrivateSVDDClassifier(
        c_over_n=0.05, gamma=0.5, epsilon=None, lr=0.5, iters=400, merge_tol=0.05, n_starts=200, random_state=0
    ).fit(X, y)
    # the starts near the data flow into the two modes of the support function
    near = [
        float(torch.cdist(model.equilibria_, torch.tensor([c], dtype=model.equilibria_.dtype)).min())
        for c in ([-2.0, 0.0], [2.0, 0.0])
    ]
    assert max(near) < 0.3
    assert (model.predict(X) == y).mean() > 0.95


def test_one_class_svdd_detects_outliers():
    rng = np.random.default_rng(0)
    inliers = rng.normal(0, 0.5, (400, 2))
    outliers = rng.uniform(4, 6, (20, 2))
    model = PrivateSVDD(c_over_n=0.05, gamma=0.5, epsilon=None, contamination=0.05, random_state=0).fit(inliers)
    assert (model.predict(inliers) == 1).mean() > 0.9
    assert (model.predict(outliers) == -1).all()
    private = PrivateSVDD(c_over_n=0.01, gamma=0.5, epsilon=20.0, contamination=0.05, random_state=0).fit(inliers)
    assert private.ledger_.get_epsilon() == pytest.approx(20.0, rel=1e-3)
    assert (private.decision_function(outliers) < np.median(private.decision_function(inliers))).all()
    assert math.isinf(model.ledger_.get_epsilon())
    scores = private.score_samples(inliers[:5])
    expected = -support_function(private.features_, private.centre_, torch.as_tensor(inliers[:5]))
    np.testing.assert_allclose(scores, expected.numpy())


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(gamma=0.0), "gamma"),
        (dict(gamma=-1.0), "gamma"),
        (dict(num_features=401), "even"),
        (dict(c_over_n=0.0), "C/n"),
        (dict(c_over_n=1.5), "C/n"),
        (dict(c_over_n=0.001, epsilon=None), "below 1/n"),  # a private fit takes the full box instead
        (dict(noise_seed=-1), "noise_seed"),
        (dict(noise_seed=1.5), "noise_seed"),
        (dict(epsilon=0.0), "epsilon"),
        (dict(epsilon=-1.0), "epsilon"),
        (dict(starts="lattice"), "starts"),
        (dict(starts="grid", r_max=None), "grid_step"),
        (dict(starts="grid", grid_step=0.0), "grid_step"),
        (dict(starts="grid", bounds=(1, -1)), "upper bound"),
        (dict(false_cells=0.0), "false_cells"),
        (dict(grid_ratio=-1.0), "grid_ratio"),
        (dict(starts="uniform"), "bounds"),
        (dict(release="kde"), "release"),
        (dict(r_max=0.0), "r_max"),
        (dict(centre_fraction=1.0), "centre_fraction"),
        (dict(n_neighbors=0), "n_neighbors"),
        (dict(n_starts=0), "n_starts"),
        (dict(n_starts="many"), "n_starts"),
        (dict(count_fraction=0.6), "count_fraction"),
        (dict(dtype="float16"), "dtype"),
    ],
)
def test_bad_parameters(iris, kw, match):
    with pytest.raises(ValueError, match=match):
        _fit(iris, **kw)


def test_bad_data(iris):
    Xtr, _, ytr, _ = iris
    model = PrivateSVDDClassifier(random_state=0)
    with pytest.raises(ValueError, match="NaN"):
        model.fit(np.where(np.arange(Xtr.size).reshape(Xtr.shape) == 3, np.nan, Xtr), ytr)
    with pytest.raises(ValueError, match="shape"):
        model.fit(Xtr, ytr[:-1])
    with pytest.raises(ValueError, match="at least 2 classes"):
        model.fit(Xtr, np.zeros(len(ytr)))
    model.fit(Xtr, ytr)
    with pytest.raises(ValueError, match="features"):
        model.predict(Xtr[:, :2])


def test_a_class_with_one_sample_is_handled(iris):
    """Failing on a single-record class would let one record change whether the fit
    succeeds; the fit goes on (that class rarely wins a noisy vote). A non-private fit says
    so; a private fit tells only the curator (the warning would be decided by one record)."""
    Xtr, Xte, ytr, _ = iris
    y = ytr.copy()
    y[0] = 7
    with pytest.warns(UserWarning, match="one training sample"):
        PrivateSVDDClassifier(epsilon=None, random_state=0).fit(Xtr, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = PrivateSVDDClassifier(classes=[0, 1, 2, 7], random_state=0).fit(Xtr, y)
    assert model.curator_["single_record_classes"] == [7]
    assert list(model.classes_) == [0, 1, 2, 7]
    assert set(model.predict(Xte)) <= {0, 1, 2, 7}


def test_public_classes_fix_the_vote_whatever_labels_occur(iris):
    """Private fits take the label set from ``classes`` (silently) or, without it, from
    y with a PrivacyLeakWarning; non-private fits read y without a warning."""
    Xtr, Xte, ytr, _ = iris
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        model = PrivateSVDDClassifier(classes=[0, 1, 2], random_state=0).fit(Xtr[ytr < 2], ytr[ytr < 2])
        PrivateSVDDClassifier(epsilon=None, random_state=0).fit(Xtr, ytr)
    assert list(model.classes_) == [0, 1, 2] and model.cell_counts_.shape[1] == 3
    assert set(model.predict(Xte)) <= {0, 1, 2}
    with pytest.warns(PrivacyLeakWarning, match="classes=None"):
        PrivateSVDDClassifier(random_state=0).fit(Xtr, ytr)
    with pytest.raises(ValueError, match="outside the public classes"):
        PrivateSVDDClassifier(classes=[0, 1], random_state=0).fit(Xtr, ytr)


def test_private_fit_runs_the_solver_until_the_gap_reaches_tol(iris, monkeypatch):
    """The centre's sensitivity assumes a duality gap <= tol, and whether a capped solver
    gets there depends on the data: a private fit therefore runs it without a cap (and a
    non-private fit keeps one). The gap and iteration count stay curator-only."""
    import dp_proto.svdd.estimators as est
    from dp_proto.svdd import solve_svdd_dual

    calls = []

    def spy(phi, C, *, tol, max_iter, on_round):
        calls.append(max_iter)
        return solve_svdd_dual(phi, C, tol=tol, max_iter=max_iter, on_round=on_round)

    monkeypatch.setattr(est, "solve_svdd_dual", spy)
    private, _ = _fit(iris, epsilon=1.0, c_over_n=0.3, classes=[0, 1, 2], tol=1e-10)
    assert calls and all(m is None for m in calls)
    assert 0 <= private.curator_["solver_gap"] <= 1e-10
    assert private.curator_["solver_iterations"] > 0
    assert not hasattr(private, "solver_gap_") and "solver_converged" not in private.curator_
    calls.clear()
    _fit(iris, epsilon=None, c_over_n=0.3)
    assert calls and all(isinstance(m, int) for m in calls)


def test_private_fit_needs_a_tolerance_float64_can_certify(iris):
    with pytest.raises(ValueError, match="tol >= 1e-10"):
        _fit(iris, epsilon=1.0, classes=[0, 1, 2], tol=1e-11)
    with pytest.raises(ValueError, match="tol >= 1e-10"):
        PrivateSVDD(tol=1e-11).fit(iris[0])
    # non-private fits accept any positive tol
    PrivateSVDD(tol=1e-11, epsilon=None, random_state=0).fit(iris[0])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dtypes_and_tensor_inputs(iris, dtype):
    Xtr, Xte, ytr, yte = iris
    model = PrivateSVDDClassifier(epsilon=5.0, dtype=dtype, random_state=0)
    model.fit(torch.as_tensor(Xtr), ytr)
    assert model.centre_.dtype == model.equilibria_.dtype == getattr(torch, dtype)
    assert not hasattr(model, "solution_")  # the exact solution is not kept
    assert model.predict(torch.as_tensor(Xte)).shape == yte.shape
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.score(Xte, yte)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("starts", ["normal", "grid"])
def test_cuda_matches_cpu(iris, starts):
    cpu, _ = _fit(iris, epsilon=None, starts=starts)
    gpu, _ = _fit(iris, epsilon=None, device="cuda", starts=starts)
    Xte = iris[1]
    assert (cpu.predict(Xte) == gpu.predict(Xte)).mean() > 0.95
    private, acc = _fit(iris, epsilon=50.0, device="cuda", starts=starts, classes=[0, 1, 2])
    assert private.labelled_points_.device.type == "cuda" and acc > 0.6


def test_empty_cell_threshold():
    """One standard deviation of an empty cell's noisy total, at least half a record."""
    from dp_proto.svdd.estimators import _empty_cell_threshold

    assert _empty_cell_threshold(3, 0.5) == pytest.approx(math.sqrt(6) / 0.5)
    assert _empty_cell_threshold(3, 100.0) == 0.5
    gen = torch.Generator().manual_seed(0)
    u = torch.rand(20000, 3, 2, generator=gen, dtype=torch.float64)
    totals = (torch.log(u[..., 0]) - torch.log(u[..., 1])).sum(-1) / 0.5  # an empty cell at eps 0.5
    assert float((totals >= _empty_cell_threshold(3, 0.5)).double().mean()) < 0.2


def test_grid_mode_classifies_with_public_cubes_and_records_its_votes(iris):
    model, acc = _fit(iris, epsilon=None, starts="grid")
    assert acc >= 0.85 and model.starts_ == "grid"
    private, acc = _fit(iris, epsilon=50.0, starts="grid", classes=[0, 1, 2])
    assert acc >= 0.8 and private.is_private_
    assert [e.name for e in private.ledger_.events] == ["svdd/centre", "svdd/grid_votes"]
    assert private.ledger_.get_epsilon() == pytest.approx(50.0, rel=1e-3)
    # every released point is a lattice point of step 2 r_max = 1 inside the box (-4, 4)
    points = private.equilibria_
    assert torch.equal(points, torch.round(points)) and float(points.abs().max()) <= 4.0
    assert torch.equal(private.grid_.centres(private.cubes_, points.dtype), points)
    assert private.cell_counts_.shape == (points.shape[0], 3)
    # a point far outside the box is classified from the boundary cube it clamps to
    assert private.predict(np.full((1, 4), 50.0)).shape == (1,)
    private.set_params(release="equilibrium_points", n_neighbors=3)
    assert float((private.predict(iris[1]) == iris[3]).mean()) >= 0.7


@pytest.mark.slow
def test_auto_takes_the_grid_only_when_cubes_hold_many_records():
    X, y = make_blobs(n_samples=6000, centers=[[-1.5, 0], [1.5, 0], [0, 1.5]], cluster_std=0.4, random_state=0)
    kw = dict(c_over_n=0.05, gamma=1.0, r_max=0.25, classes=[0, 1, 2], random_state=0)
    rich = PrivateSVDDClassifier(epsilon=5.0, **kw).fit(X, y)
    poor = PrivateSVDDClassifier(epsilon=0.05, **kw).fit(X, y)
    assert rich.starts_ == "grid" and poor.starts_ == "normal"
    for model in (rich, poor):
        assert [e.name for e in model.ledger_.events][:2] == ["svdd/centre", "svdd/record_count"]
        assert model.ledger_.get_epsilon() == pytest.approx(model.epsilon, rel=1e-2)
    assert (rich.predict(X) == y).mean() > 0.95
    # the threshold rule: ln(c M / 2) / eps_votes against n^ / grid_ratio
    m = rich.grid_.num_cells
    assert math.log(3 * m / 2) / (0.45 * 5.0) <= 6000 / 200
    # no cube size, or more than 2^62 cubes: the normal starts
    assert PrivateSVDDClassifier(epsilon=5.0, **{**kw, "r_max": None}).fit(X, y).starts_ == "normal"
    wide = np.hstack([X, np.random.default_rng(0).normal(size=(6000, 40)) * 0.1])
    assert PrivateSVDDClassifier(epsilon=5.0, **kw).fit(wide, y).starts_ == "normal"


def test_refit_in_another_start_mode_leaves_no_grid_behind(iris):
    model, _ = _fit(iris, epsilon=None, starts="grid")
    all_cubes = model.cubes_.shape[0]
    model.set_params(starts="normal").fit(iris[0], iris[2])
    assert model.grid_ is None and model.cubes_ is None and model.starts_ == "normal"
    # without privacy min_count also drops sparse cubes
    sparse, _ = _fit(iris, epsilon=None, starts="grid", min_count=3)
    assert bool((sparse.cell_counts_.max(1).values >= 3).all())
    assert 0 < sparse.cubes_.shape[0] < all_cubes


def test_records_outside_the_start_box_are_told_on_the_curator_channel(iris, caplog):
    """Public bounds that miss the data show only as a poor score: the curator channel
    names the share (WARNING on ``dp_proto.curator``), no ``warnings`` warning does."""
    import logging

    Xtr, _, ytr, _ = iris
    with caplog.at_level(logging.WARNING, logger="dp_proto.curator"), warnings.catch_warnings():
        warnings.simplefilter("error")
        model = PrivateSVDDClassifier(
            epsilon=1.0, classes=[0, 1, 2], starts="uniform", bounds=(5, 6), n_starts=16, iters=0, random_state=0
        ).fit(Xtr, ytr)
    assert model.curator_["num_outside_bounds"] == len(Xtr)
    assert any("lie outside the public bounds; check them" in r.getMessage() for r in caplog.records)
