"""The privacy ledger against dp-accounting and Opacus on the same event sequences."""

import math
import pickle

import pytest
import torch
from dp_accounting import dp_event as dpe
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from dp_proto.exceptions import PrivacyBudgetExceededError
from dp_proto.lvq import GMLVQLayer, PrototypeModel
from dp_proto.privacy import PrivacyEvent, PrivacyLedger


def _run_events():
    """DP initialisation (two Laplace releases) then 2000 DP-SGD steps."""
    return [
        PrivacyEvent("laplace", noise_multiplier=1 / 0.1, name="counts"),
        PrivacyEvent("laplace", noise_multiplier=1 / 0.1, name="sums"),
        PrivacyEvent("subsampled_gaussian", noise_multiplier=1.1, sampling_rate=0.01, count=2000, name="sgd"),
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

    sgd = PrivacyEvent("subsampled_gaussian", noise_multiplier=1.1, sampling_rate=0.01, count=2000)
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
    ledger.spend(PrivacyEvent("pure", epsilon=0.3), PrivacyEvent("laplace", noise_multiplier=2.0))
    assert ledger.get_epsilon(0.0) == pytest.approx(0.8)
    ledger.spend(PrivacyEvent("gaussian", noise_multiplier=4.0))
    assert ledger.get_epsilon(0.0) == math.inf


def test_repeated_events_are_merged():
    ledger = PrivacyLedger()
    step = PrivacyEvent("subsampled_gaussian", noise_multiplier=1.0, sampling_rate=0.1, name="sgd")
    for _ in range(5):
        ledger.spend(step)
    assert len(ledger.events) == 1 and ledger.events[0].count == 5
    batch = PrivacyLedger()
    batch.spend(PrivacyEvent("subsampled_gaussian", noise_multiplier=1.0, sampling_rate=0.1, name="sgd", count=5))
    assert ledger.get_epsilon(1e-5) == pytest.approx(batch.get_epsilon(1e-5))


def test_budget_refusal_and_remaining():
    ledger = PrivacyLedger(budget=(1.0, 1e-5))
    ledger.spend(PrivacyEvent("laplace", noise_multiplier=2.0, name="first"))  # 0.5
    assert ledger.remaining() == pytest.approx(0.5, abs=1e-3)
    with pytest.raises(PrivacyBudgetExceededError, match="'second'.*above the budget 1"):
        ledger.spend(PrivacyEvent("laplace", noise_multiplier=1.0, name="second"))
    assert len(ledger.events) == 1
    with pytest.raises(PrivacyBudgetExceededError):  # a multi-part release is refused whole
        ledger.spend(PrivacyEvent("pure", epsilon=0.3, name="a"), PrivacyEvent("pure", epsilon=0.3, name="b"))
    assert len(ledger.events) == 1
    ledger.spend(PrivacyEvent("pure", epsilon=0.5, name="exact fit"))
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
    busy.spend(PrivacyEvent("pure", epsilon=0.1, name="fresh"))
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
    [({"kind": "poisson"}, "unknown event kind"), ({"kind": "laplace"}, "noise_multiplier"),
     ({"kind": "pure"}, "epsilon"), ({"kind": "subsampled_gaussian", "noise_multiplier": 1.0}, "sampling_rate"),
     ({"kind": "gaussian", "noise_multiplier": 1.0, "count": 0}, "count")],
)
def test_bad_events(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PrivacyEvent(**kwargs)


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
    ledger.spend(PrivacyEvent("pure", epsilon=1000.0, name="centre"))
    assert ledger.get_epsilon(1e-5) == pytest.approx(1000.0)
    ledger.spend(PrivacyEvent("laplace", noise_multiplier=1.0, count=2))
    assert ledger.get_epsilon(1e-5) == pytest.approx(1002.0, abs=1e-3)
    sgd = PrivacyEvent("subsampled_gaussian", noise_multiplier=1.0, sampling_rate=0.01, count=100)
    rest = PrivacyLedger.epsilon_of([PrivacyEvent("laplace", noise_multiplier=1.0, count=2), sgd], 1e-5)
    ledger.spend(sgd)
    assert ledger.get_epsilon(1e-5) == pytest.approx(1000.0 + rest)
    approx = PrivacyLedger()
    approx.spend(PrivacyEvent("approx", epsilon=800.0, delta=1e-6))
    approx.spend(PrivacyEvent("gaussian", noise_multiplier=2.0))
    assert approx.get_epsilon(1e-5) == pytest.approx(
        800.0 + PrivacyLedger.epsilon_of([PrivacyEvent("gaussian", noise_multiplier=2.0)], 9e-6))
    assert approx.get_epsilon(1e-6) == math.inf  # no delta left for the Gaussian release
    with pytest.raises(ValueError, match="basic composition"):
        PrivacyEvent("pure", epsilon=800.0).to_pld()
