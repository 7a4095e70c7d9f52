"""Feature sparsity under DP-SGD: the group soft-threshold after every noisy
step is post-processing, so the plan, the ledger and the neighbour check are those of
the fit without it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_wine
from sklearn.preprocessing import scale

from dp_proto.lvq.private import DPGMLVQ, DPLGMLVQ
from dp_proto.lvq.sparse import feature_group_norms, sparsify_step_
from dp_proto.privacy.testing import adversarial_removals, neighbour_check

PRIVATE = dict(epsilon=5.0, bounds=(-4, 4), classes=[0, 1, 2], sampling_rate=0.1, epochs=5)
# The outcome tests replay one noise draw (how sparse a noisy fit ends varies between draws);
# the neighbour check draws fresh noise, as a user would.
SEED = {"noise_seed": 20261126}


def _wine(n_per_class=None):
    X, y = load_wine(return_X_y=True)
    X = scale(X)
    if n_per_class is not None:
        keep = np.concatenate([np.flatnonzero(y == c)[:n_per_class] for c in range(3)])
        X, y = X[keep], y[keep]
    return X, y


def _fit(cls, X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(**{**PRIVATE, **kw}).fit(X, y)


def test_sparsify_step_keeps_the_scale_and_never_zeroes_everything():
    omegas = torch.tensor([[[3.0, 0.1, 0.0]], [[4.0, 0.0, 0.2]]], dtype=torch.float64)
    scale_before = float(omegas.norm())
    kept = sparsify_step_(omegas, step=0.1, penalty=1.0)  # threshold 0.1 * 5: the weak two die
    assert kept == 1
    assert (feature_group_norms(omegas)[1:] == 0).all()
    assert float(omegas.norm()) == pytest.approx(scale_before)
    same = omegas.clone()
    assert sparsify_step_(omegas, step=10.0, penalty=1.0) == 1  # would zero all: skipped
    torch.testing.assert_close(omegas, same)
    with pytest.raises(ValueError, match=">= 0"):
        sparsify_step_(omegas, step=-1.0, penalty=1.0)


@pytest.mark.parametrize("cls", [DPGMLVQ, DPLGMLVQ])
def test_group_lasso_gives_exact_zeros_at_the_same_privacy_cost(cls):
    X, y = _wine()
    dense = _fit(cls, X, y, **SEED)
    sparse = _fit(cls, X, y, group_lasso=1.0, **SEED)
    assert dense.sparsity_ == 0.0 and len(dense.selected_features_) == X.shape[1]
    assert sparse.sparsity_ > 0.5
    metric = sparse.omega_.reshape(-1, X.shape[1])
    np.testing.assert_array_equal(np.flatnonzero(np.abs(metric).sum(0) > 0), sparse.selected_features_)
    assert [e.to_dict() for e in sparse.ledger_.events] == [e.to_dict() for e in dense.ledger_.events]
    assert sparse.epsilon_ == dense.epsilon_ <= PRIVATE["epsilon"]
    assert sparse.noise_multiplier_ == dense.noise_multiplier_


def test_the_averaged_release_is_thresholded_too():
    X, y = _wine()
    est = _fit(DPGMLVQ, X, y, group_lasso=1.0, average_last=0.5, **SEED)
    # the mean of sparse iterates would not be sparse by itself: whole columns are exactly 0
    assert est.sparsity_ > 0.25
    zero_columns = np.abs(est.omega_.reshape(-1, X.shape[1])).sum(0) == 0
    assert zero_columns.mean() == pytest.approx(est.sparsity_)


def test_group_lasso_passes_the_neighbour_check():
    X, y = _wine(6)
    X = X.copy()
    X[4, 0] = 40.0  # a record outside the bounds (clipped; curator-only)

    def release(X, y):
        return _fit(DPGMLVQ, X, y, group_lasso=0.5, epochs=2)

    report = neighbour_check(release, (X, y), adversarial_removals(X, y) + [4], curator_only=("curator_",))
    report.assert_ok()
    assert report.releases[:2] == ["dp_init/class_counts", "dp_init/class_sums"]


@pytest.mark.parametrize(
    "cls, params, message",
    [
        (DPGMLVQ, {"group_lasso": -0.1}, "group_lasso must be a finite number >= 0"),
        (DPGMLVQ, {"group_lasso": "strong"}, "group_lasso must be a finite number >= 0"),
        (DPLGMLVQ, {"group_lasso": 0.1, "normalize_omega": True}, "normalize_omega=False"),
    ],
)
def test_bad_settings_are_refused_before_the_data_are_read(cls, params, message):
    X, y = _wine()
    est = cls(**{**PRIVATE, **params})
    with pytest.raises(ValueError, match=message):
        est.fit(X, y)
    assert not hasattr(est, "ledger_")


def test_the_opacus_engine_applies_the_threshold_too():
    X, y = _wine()
    est = _fit(DPGMLVQ, X, y, group_lasso=1.0, engine="opacus", **SEED)
    assert est.sparsity_ > 0.5
