"""Adversarial states of the pairwise model's DP-SGD sums: Platt's clipped gradient sum
moves by at most ``C``, also where a score or a gradient is not finite.

``platt_clipped_gradient_sum`` (the ``platt/dp_sgd`` steps of ``DPPairwiseGMLVQ``) reads
the signed scores ``h = (d_m - d_l) / (d_l + d_m)`` of the released pair models. Hypothesis
searches scores at and beyond ``+-1`` (clamped), at 0 and 1e-12, infinite and NaN (an
overflowing distance gives ``inf - inf``: a pair model with a huge ``Omega``, which a noisy
DP-SGD run can reach), Platt's ``(a, b)`` at the ends of ``PLATT_A_RANGE`` and
``PLATT_B_RANGE``, and targets at their extremes (no record and ``1e12`` noisy records of a
class), per dtype, for the largest ``||S(D + r) - S(D)|| / C``.

Once a NaN score made the record's clip factor NaN and the whole sum NaN: the release was
NaN exactly when the data held such a record. A record whose gradient (or its norm) is not
finite now contributes zero, in the pairs' sum as well (``pairwise_clipped_gradient_sum``:
``Omega`` of 1e20 overflows float32 distances, 1e160 float64 ones).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dp_proto.lvq.pairwise import class_pairs, pairwise_scores
from dp_proto.lvq.private.fused import CLIPPED_SUM_SLACK
from dp_proto.lvq.private.pairwise import (
    PLATT_A_RANGE,
    PLATT_B_RANGE,
    pair_partners,
    pairwise_clipped_gradient_sum,
    platt_clipped_gradient_sum,
)
from dp_proto.privacy.testing import sum_movement
from tests._search import state_search

SLACK = CLIPPED_SUM_SLACK
DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
FAST = state_search(25)
DEEP = state_search(400, deep=True)

SCORES = (1.0, -1.0, 0.0, 1e-12, -1e-12, 1.0 + 1e-7, -1.0 - 1e-7, 0.5, 1e30, -1e30, math.inf, -math.inf, math.nan)
A_VALUES = (*PLATT_A_RANGE, -4.0, -1.0)
B_VALUES = (*PLATT_B_RANGE, 0.0, 1e-3)
COUNTS = (0.0, 1.0, 1e6, 1e12)  # noisy class counts behind Platt's targets
CLIPS = (1.0, 0.1, 10.0)


@st.composite
def platt_states(draw):
    c = draw(st.integers(2, 4))
    K = c * (c - 1) // 2
    n = draw(st.integers(0, 30))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    scores = torch.rand(n, K, generator=gen, dtype=torch.float64) * 2 - 1
    special = torch.tensor(SCORES, dtype=torch.float64)
    if draw(st.booleans()):  # many records with special scores
        pick = torch.randint(0, len(SCORES), (n, K), generator=gen)
        mask = torch.rand(n, K, generator=gen) < 0.5
        scores = torch.where(mask, special[pick], scores)
    record = torch.tensor([draw(st.sampled_from(SCORES)) for _ in range(K)], dtype=torch.float64)
    a = torch.tensor([draw(st.sampled_from(A_VALUES)) for _ in range(K)], dtype=torch.float64)
    b = torch.tensor([draw(st.sampled_from(B_VALUES)) for _ in range(K)], dtype=torch.float64)
    counts = torch.tensor([draw(st.sampled_from(COUNTS)) for _ in range(c)], dtype=torch.float64)
    return {
        "c": c,
        "scores": scores,
        "y": torch.randint(0, c, (n,), generator=gen),
        "record": (record[None], torch.tensor([draw(st.integers(0, c - 1))])),
        "a": a,
        "b": b,
        "counts": counts,
        "clip": draw(st.sampled_from(CLIPS)),
    }


def _platt_ratio(state, dtype: torch.dtype) -> float:
    c = state["c"]
    partners = pair_partners(c)
    pairs = class_pairs(c)
    pos, neg = state["counts"][pairs[:, 0]].to(dtype), state["counts"][pairs[:, 1]].to(dtype)
    targets = ((pos + 1.0) / (pos + 2.0), 1.0 / (neg + 2.0))  # as DPPairwiseGMLVQ._fit_calibration
    a, b = state["a"].to(dtype), state["b"].to(dtype)

    def clipped(scores, y):
        ga, gb, _ = platt_clipped_gradient_sum(a, b, scores, y, partners, targets, state["clip"])
        return torch.cat([ga, gb])

    data = (state["scores"].to(dtype), state["y"])
    record = (state["record"][0].to(dtype), state["record"][1])
    return sum_movement(clipped, data, record, state["clip"])


@DTYPES
@FAST
@given(state=platt_states())
def test_platt_clipped_sum_moves_at_most_its_bound(state, dtype):
    ratio = _platt_ratio(state, dtype)
    assert math.isfinite(ratio) and ratio <= 1.0 + SLACK[dtype], ratio


@pytest.mark.slow
@DTYPES
@DEEP
@given(state=platt_states())
def test_platt_state_search_deep(state, dtype):
    ratio = _platt_ratio(state, dtype)
    assert math.isfinite(ratio) and ratio <= 1.0 + SLACK[dtype], ratio


@DTYPES
def test_a_nan_score_no_longer_turns_the_platt_sum_into_nan(dtype):
    """The score of a pair model whose distances overflow (huge ``Omega``) is NaN; the
    record's Platt gradient used to make the whole clipped sum NaN."""
    huge = 1e20 if dtype == torch.float32 else 1e160
    prototypes = torch.tensor([[[0.0, 0.0], [0.5, 0.5]]], dtype=dtype)
    omegas = torch.eye(2, dtype=dtype)[None] * huge
    x = torch.tensor([[0.1, -0.2], [1.0, 1.0]], dtype=dtype)
    scores = pairwise_scores(x, prototypes, omegas)
    assert bool(torch.isnan(scores[1]).all())  # the record far from both prototypes
    state = {
        "c": 2,
        "scores": scores[:1].double(),
        "y": torch.tensor([0]),
        "record": (scores[1:].double(), torch.tensor([1])),
        "a": torch.tensor([-4.0]),
        "b": torch.tensor([0.0]),
        "counts": torch.tensor([3.0, 5.0]),
        "clip": 1.0,
    }
    ratio = _platt_ratio(state, dtype)
    assert ratio == 0.0  # the record contributes nothing (before: nan)


@DTYPES
@pytest.mark.parametrize("transfer", ["identity", "sigmoid"])
def test_overflowing_distances_no_longer_turn_the_pairs_sum_into_nan(transfer, dtype):
    """``pairwise_clipped_gradient_sum`` on pair models whose ``Omega`` overflows the
    distances of far records (``inf - inf`` in ``mu``): the record contributes zero."""
    huge = 1e20 if dtype == torch.float32 else 1e160
    c = 3
    partners = pair_partners(c)
    K = 3
    prototypes = torch.tensor([[0.0, 0.0], [0.5, 0.5]], dtype=dtype)[None].expand(K, 2, 2).clone()
    for scale in (1.0, huge):
        omegas = torch.eye(2, dtype=dtype)[None].expand(K, 2, 2).clone() * scale
        gen = torch.Generator().manual_seed(0)
        x = (torch.rand(20, 2, generator=gen, dtype=torch.float64) * 2e-12).to(dtype)  # near prototype 0
        y = torch.randint(0, c, (20,), generator=gen)
        for record in ([1.0, 1.0], [-1.0, 1.0], [0.0, 0.0], [0.5, 0.5]):

            def clipped(xb, yb, omegas=omegas):
                w, om, _ = pairwise_clipped_gradient_sum(
                    prototypes, omegas, xb, yb, partners, 1.0, transfer_fn=transfer, beta=16.0
                )
                return torch.cat([w.reshape(-1), om.reshape(-1)])

            rec = (torch.tensor([record], dtype=dtype), torch.tensor([1]))
            ratio = sum_movement(clipped, (x, y), rec, 1.0)
            assert math.isfinite(ratio) and ratio <= 1.0 + SLACK[dtype], (scale, record, ratio)
