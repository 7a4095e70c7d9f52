"""The privacy ledger against dp-accounting and Opacus on the same event sequences."""

import dataclasses
import math
import pickle
import time

import pytest
import torch
from dp_accounting import dp_event as dpe
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from dp_proto.exceptions import PrivacyBudgetExceededError
from dp_proto.lvq import GMLVQLayer, PrototypeModel
from dp_proto.privacy import PrivacyEvent, PrivacyLedger
from dp_proto.privacy.events import (
    ApproxEvent,
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    GaussianEvent,
    LaplaceEvent,
    NonPrivateEvent,
    PureEvent,
    SubsampledGaussianEvent,
)


def _run_events():
    """DP initialisation (two Laplace releases) then 2000 DP-SGD steps."""
    return [
        LaplaceEvent(noise_multiplier=1 / 0.1, name="counts"),
        LaplaceEvent(noise_multiplier=1 / 0.1, name="sums"),
        SubsampledGaussianEvent(noise_multiplier=1.1, sampling_rate=0.01, count=2000, name="sgd"),
    ]


def test_pld_matches_dp_accounting():
    ledger = PrivacyLedger()
    for e in _run_events():
        ledger.spend(e)
    reference = pld_privacy_accountant.PLDAccountant()
    reference.compose(dpe.LaplaceDpEvent(10.0), 2)
    reference.compose(dpe.SelfComposedDpEvent(dpe.PoissonSampledDpEvent(0.01, dpe.GaussianDpEvent(1.1)), 2000))
    for delta in (1e-5, 1e-7):
        assert ledger.get_epsilon(delta) == pytest.approx(reference.get_epsilon(delta), rel=1e-3)


def test_rdp_matches_dp_accounting_and_opacus():
    from opacus.accountants import RDPAccountant

    sgd = SubsampledGaussianEvent(noise_multiplier=1.1, sampling_rate=0.01, count=2000)
    ledger = PrivacyLedger(accountant="rdp")
    ledger.spend(sgd)
    reference = rdp_privacy_accountant.RdpAccountant()
    reference.compose(dpe.SelfComposedDpEvent(dpe.PoissonSampledDpEvent(0.01, dpe.GaussianDpEvent(1.1)), 2000))
    assert ledger.get_epsilon(1e-5) == pytest.approx(reference.get_epsilon(1e-5), rel=1e-6)
    opacus = RDPAccountant()
    opacus.history = [(1.1, 0.01, 2000)]
    # different order grids and conversion formulas: agree to a few percent
    assert ledger.get_epsilon(1e-5) == pytest.approx(opacus.get_epsilon(1e-5), rel=0.05)
    pld = PrivacyLedger()
    pld.spend(sgd)
    assert pld.get_epsilon(1e-5) <= ledger.get_epsilon(1e-5)  # PLD is tighter


def test_composition_of_a_mixed_run_is_tighter_than_basic():
    ledger = PrivacyLedger()
    for e in _run_events():
        ledger.spend(e)
    sgd_only = PrivacyLedger()
    sgd_only.spend(_run_events()[2])
    total = ledger.get_epsilon(1e-5)
    assert sgd_only.get_epsilon(1e-5) < total <= sgd_only.get_epsilon(1e-5) + 0.2 + 1e-9


def test_pure_releases_compose_additively_at_delta_zero():
    ledger = PrivacyLedger()
    ledger.spend(PureEvent(epsilon=0.3), LaplaceEvent(noise_multiplier=2.0))
    assert ledger.get_epsilon(0.0) == pytest.approx(0.8)
    ledger.spend(GaussianEvent(noise_multiplier=4.0))
    assert ledger.get_epsilon(0.0) == math.inf


def test_repeated_events_are_merged():
    ledger = PrivacyLedger()
    step = SubsampledGaussianEvent(noise_multiplier=1.0, sampling_rate=0.1, name="sgd")
    for _ in range(5):
        ledger.spend(step)
    assert len(ledger.events) == 1 and ledger.events[0].count == 5
    batch = PrivacyLedger()
    batch.spend(SubsampledGaussianEvent(noise_multiplier=1.0, sampling_rate=0.1, name="sgd", count=5))
    assert ledger.get_epsilon(1e-5) == pytest.approx(batch.get_epsilon(1e-5))


def test_budget_refusal_and_remaining():
    ledger = PrivacyLedger(budget=(1.0, 1e-5))
    ledger.spend(LaplaceEvent(noise_multiplier=2.0, name="first"))  # 0.5
    assert ledger.remaining() == pytest.approx(0.5, abs=1e-3)
    with pytest.raises(PrivacyBudgetExceededError, match="'second'.*above the budget 1"):
        ledger.spend(LaplaceEvent(noise_multiplier=1.0, name="second"))
    assert len(ledger.events) == 1
    with pytest.raises(PrivacyBudgetExceededError):  # a multi-part release is refused whole
        ledger.spend(PureEvent(epsilon=0.3, name="a"), PureEvent(epsilon=0.3, name="b"))
    assert len(ledger.events) == 1
    ledger.spend(PureEvent(epsilon=0.5, name="exact fit"))
    assert ledger.get_epsilon() == pytest.approx(1.0, abs=1e-3)


def test_state_dict_round_trip_never_resets_the_spend():
    ledger = PrivacyLedger(budget=(5.0, 1e-6), accountant="rdp")
    for e in _run_events():
        ledger.spend(e)
    state = pickle.loads(pickle.dumps(ledger.state_dict()))
    restored = PrivacyLedger.from_state_dict(state)
    assert restored.get_epsilon() == pytest.approx(ledger.get_epsilon())
    assert restored.budget == (5.0, 1e-6) and restored.accountant == "rdp"
    busy = PrivacyLedger()
    busy.spend(PureEvent(epsilon=0.1, name="fresh"))
    with pytest.raises(RuntimeError, match="drop them"):
        busy.load_state_dict(state)
    busy.load_state_dict(state, keep_current=True)
    assert [e.name for e in busy.events] == ["counts", "sums", "sgd", "fresh"]
    assert busy.get_epsilon() > ledger.get_epsilon()


def test_summary_and_attach_travel_with_the_model():
    ledger = PrivacyLedger(budget=(3.0, 1e-5))
    for e in _run_events():
        ledger.spend(e)
    summary = ledger.summary()
    assert summary["epsilon"] == pytest.approx(ledger.get_epsilon())
    assert [e["name"] for e in summary["events"]] == ["counts", "sums", "sgd"]
    assert "sgd: subsampled_gaussian" in str(ledger)
    model = ledger.attach(PrototypeModel(GMLVQLayer(3, 2), [0, 1]))
    copy = PrototypeModel(GMLVQLayer(3, 2), [0, 1])
    copy.load_state_dict(model.state_dict())
    assert copy.privacy_["epsilon"] == pytest.approx(summary["epsilon"])
    torch.save(model.state_dict(), "/dev/null")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"kind": "poisson"}, "unknown event kind"),
        ({"kind": "laplace"}, "noise_multiplier"),
        ({"kind": "pure"}, "epsilon"),
        ({"kind": "subsampled_gaussian", "noise_multiplier": 1.0}, "sampling_rate"),
        ({"kind": "gaussian", "noise_multiplier": 1.0, "count": 0}, "count"),
    ],
)
def test_bad_events(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PrivacyEvent.from_dict(kwargs)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: LaplaceEvent(0.0), "noise_multiplier"),
        (lambda: GaussianEvent(math.nan), "noise_multiplier"),
        (lambda: SubsampledGaussianEvent(1.0, 1.5), "sampling_rate"),
        (lambda: PureEvent(-1.0), "epsilon"),
        (lambda: ApproxEvent(1.0, 0.0), "delta"),
        (lambda: DiscreteLaplaceEvent(1.0, grid_steps=0), "grid_steps"),
        (lambda: GaussianEvent(1.0, count=True), "count"),
    ],
)
def test_typed_events_check_their_parameters(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_typed_events_are_immutable_values_that_round_trip():
    events = [
        LaplaceEvent(2.0, name="a", sensitivity=1.0),
        DiscreteLaplaceEvent(0.5, grid_steps=3, count=2),
        GaussianEvent(1.5),
        DiscreteGaussianEvent(4.0),
        PureEvent(0.3),
        ApproxEvent(1.0, 1e-6),
        SubsampledGaussianEvent(1.1, 0.01, count=7),
        NonPrivateEvent(name="debug"),
    ]
    for event in events:
        assert PrivacyEvent.from_dict(event.to_dict()) == event
        assert hash(event.with_count(event.count)) == hash(event)
        with pytest.raises(dataclasses.FrozenInstanceError):
            event.count = 3  # type: ignore[misc]
    assert LaplaceEvent(2.0) != GaussianEvent(2.0)  # same parameters, different mechanisms
    assert not LaplaceEvent(2.0).same_mechanism(GaussianEvent(2.0))


def test_a_ledger_saved_before_typed_events_loads():
    # one class, every field, a meta dict
    old = {
        "version": 1,
        "budget": None,
        "accountant": "pld",
        "default_delta": 1e-5,
        "events": [
            {
                "kind": "discrete_laplace",
                "noise_multiplier": None,
                "epsilon": 0.5,
                "sampling_rate": None,
                "count": 2,
                "name": "counts",
                "sensitivity": 1.0,
                "delta": None,
                "grid_steps": 1,
                "meta": {},
            },
            {
                "kind": "subsampled_gaussian",
                "noise_multiplier": 1.1,
                "epsilon": None,
                "sampling_rate": 0.01,
                "count": 100,
                "name": "dp_sgd",
                "sensitivity": None,
                "delta": None,
                "grid_steps": None,
                "meta": {},
            },
        ],
    }
    ledger = PrivacyLedger.from_state_dict(old)
    assert ledger.events == (
        DiscreteLaplaceEvent(0.5, count=2, name="counts", sensitivity=1.0),
        SubsampledGaussianEvent(1.1, 0.01, count=100, name="dp_sgd"),
    )
    with pytest.raises(ValueError, match="no field"):  # a value where the mechanism has no parameter
        PrivacyEvent.from_dict({"kind": "pure", "epsilon": 1.0, "sampling_rate": 0.1})


def test_compositions_are_cached_per_ledger():
    events = _run_events()
    first, second = PrivacyLedger(), PrivacyLedger()
    first.spend(*events)
    second.spend(*events)
    assert first.get_epsilon() == second.get_epsilon()
    assert first._composed and first._composed is not second._composed
    assert first._epsilons is not second._epsilons


def test_bad_ledger_arguments():
    with pytest.raises(ValueError, match="accountant"):
        PrivacyLedger(accountant="moments")
    with pytest.raises(ValueError, match="budget epsilon"):
        PrivacyLedger(budget=(0.0, 1e-5))
    with pytest.raises(ValueError, match="budget delta"):
        PrivacyLedger(budget=(1.0, 1.5))


def test_releases_beyond_the_pld_range_compose_by_basic_composition():
    """exp(epsilon) overflows above ~709: such events are added on top of the rest."""
    ledger = PrivacyLedger()
    ledger.spend(PureEvent(epsilon=1000.0, name="centre"))
    assert ledger.get_epsilon(1e-5) == pytest.approx(1000.0)
    ledger.spend(LaplaceEvent(noise_multiplier=1.0, count=2))
    assert ledger.get_epsilon(1e-5) == pytest.approx(1002.0, abs=1e-3)
    sgd = SubsampledGaussianEvent(noise_multiplier=1.0, sampling_rate=0.01, count=100)
    rest = PrivacyLedger.epsilon_of([LaplaceEvent(noise_multiplier=1.0, count=2), sgd], 1e-5)
    ledger.spend(sgd)
    assert ledger.get_epsilon(1e-5) == pytest.approx(1000.0 + rest)
    approx = PrivacyLedger()
    approx.spend(ApproxEvent(epsilon=800.0, delta=1e-6))
    approx.spend(GaussianEvent(noise_multiplier=2.0))
    assert approx.get_epsilon(1e-5) == pytest.approx(
        800.0 + PrivacyLedger.epsilon_of([GaussianEvent(noise_multiplier=2.0)], 9e-6)
    )
    assert approx.get_epsilon(1e-6) == math.inf  # no delta left for the Gaussian release
    with pytest.raises(ValueError, match="basic composition"):
        PureEvent(epsilon=800.0).to_pld()


def test_the_ledger_composes_events_without_looking_at_their_kind():
    """Dispatch goes through the event classes; a comparison on ``kind`` in the ledger
    would bring the string if-chains back."""
    import ast
    import inspect

    from dp_proto.privacy import ledger as ledger_module

    uses = [
        node.lineno
        for node in ast.walk(ast.parse(inspect.getsource(ledger_module)))
        if isinstance(node, ast.Compare)
        and any(isinstance(side, ast.Attribute) and side.attr == "kind" for side in (node.left, *node.comparators))
    ]
    assert uses == []


@pytest.mark.parametrize(
    "events",
    [
        _run_events(),
        [SubsampledGaussianEvent(noise_multiplier=0.8, sampling_rate=0.004, count=5000)],
        [GaussianEvent(noise_multiplier=2.0), LaplaceEvent(noise_multiplier=0.5)],  # asymmetric and pure parts
        [LaplaceEvent(noise_multiplier=0.02)],  # losses near the PLD's range: much mass at large loss
    ],
)
def test_vectorised_epsilons_equal_dp_accountings_one_delta_at_a_time(events):
    from dp_proto.privacy.ledger import pld_epsilons

    total = events[0].to_pld()
    for e in events[1:]:
        total = total.compose(e.to_pld())
    deltas = [0.0, 1e-12, 1e-9, 1e-7, 1e-5, 1e-3, 0.1, 0.5, 0.999]
    expected = [total.get_epsilon_for_delta(d) for d in deltas]
    assert pld_epsilons(total, deltas) == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_vectorised_epsilons_fall_back_to_dp_accountings_method(monkeypatch):
    """A dp-accounting whose PMFs lack the fields the fast path reads still gets its answer."""
    from dp_proto.privacy import ledger as ledger_module

    total = GaussianEvent(noise_multiplier=2.0).to_pld()
    expected = [total.get_epsilon_for_delta(d) for d in (1e-6, 1e-3)]

    def moved(pmf, deltas):
        raise AttributeError("'DensePLDPmf' object has no attribute '_probs'")

    monkeypatch.setattr(ledger_module, "_pmf_epsilons", moved)
    assert list(ledger_module.pld_epsilons(total, [1e-6, 1e-3])) == expected


# -- large epsilons: accounting stays small and fast ------------------------------------
def test_releases_of_large_epsilon_compose_in_little_memory_and_time():
    """A DP-SGD run at a tiny noise multiplier and a count at a huge epsilon (what an
    estimator plans at epsilon 1e6) once built PLDs of millions of points and raised
    MemoryError; they now compose by their Renyi-DP curve and by basic composition."""
    import tracemalloc

    from dp_proto.privacy import DiscreteLaplaceEvent, SubsampledGaussianEvent

    ledger = PrivacyLedger()
    ledger.spend(
        DiscreteLaplaceEvent(150000.0, name="counts"),
        SubsampledGaussianEvent(0.004, 0.05, count=20, name="dp_sgd"),
    )
    tracemalloc.start()
    start = time.perf_counter()
    try:
        epsilon = ledger.get_epsilon(1e-5)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert math.isfinite(epsilon) and epsilon >= 150000.0
    assert peak < 100 * 2**20 and time.perf_counter() - start < 10.0


@pytest.mark.parametrize("epsilon", [1e3, 1e6])
def test_an_estimator_at_a_large_epsilon_fits_quickly(epsilon):
    from sklearn.datasets import load_digits

    from dp_proto.lvq.private import DPGMLVQ

    X, y = load_digits(return_X_y=True)
    start = time.perf_counter()
    model = DPGMLVQ(epsilon=epsilon, bounds=(0, 16), classes=range(10), epochs=1, sampling_rate=0.05).fit(X, y)
    assert model.epsilon_ <= epsilon and time.perf_counter() - start < 30.0
