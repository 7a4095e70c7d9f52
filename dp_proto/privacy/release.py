"""The ledger in a published model: the privacy section of a release, and back.

``ledger_manifest`` writes what a released model's guarantee rests on: epsilon at
delta, the accountant, the neighbouring relation, the budget, where the noise came
from, every event (``PrivacyEvent.to_dict``) and what the guarantee covers. It writes
no composition cache, no generator and no curator-only number. ``ledger_from_manifest``
rebuilds a ``ReleasedLedger``: the same events, so the same epsilon, composed afresh by
the accountant, and read-only (a published model makes no further releases).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dp_proto.privacy.ledger import PrivacyEvent, PrivacyLedger

__all__ = [
    "ReleasedLedger",
    "ledger_manifest",
    "ledger_from_manifest",
    "summary_from_manifest",
    "parallel_manifest",
    "node_ledgers_from_manifest",
    "PARALLEL_COMPOSITION",
]

_LEDGER_STATE_VERSION = 1
# How far the events' fresh composition may exceed the stated epsilon (composition order
# and discretisation move it in the last digits; a changed manifest moves it further).
_EPSILON_RTOL = 1e-4
_SUMMARY_KEYS = ("epsilon", "delta", "accountant", "neighbouring", "budget", "noise")
#: The ``composition`` of a model built from the releases of parties with disjoint data.
PARALLEL_COMPOSITION = "parallel over the nodes' disjoint data"


class ReleasedLedger(PrivacyLedger):
    """The ledger of a loaded release: the record of the releases that made the model.

    It reports epsilon like any ledger (composing the recorded events afresh) but
    records nothing: ``spend``, ``note_noise_source`` and ``load_state_dict`` raise
    ``RuntimeError``. Build it with ``ledger_from_manifest``.
    """

    _frozen = False

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> ReleasedLedger:
        ledger = cls()
        PrivacyLedger.load_state_dict(ledger, state)
        ledger._frozen = True
        return ledger

    def _refuse(self, what: str) -> None:
        if self._frozen:
            raise RuntimeError(
                f"{what}: the ledger of a released model is a read-only record; a new release about the "
                "data needs a ledger of its own (PrivacyLedger)"
            )

    def spend(self, *events: PrivacyEvent) -> None:
        self._refuse("spend")
        super().spend(*events)

    def note_noise_source(self, source: str) -> None:
        self._refuse("note_noise_source")
        super().note_noise_source(source)

    def load_state_dict(self, state: dict[str, Any], *, keep_current: bool = False) -> None:
        self._refuse("load_state_dict")
        super().load_state_dict(state, keep_current=keep_current)


def ledger_manifest(ledger: PrivacyLedger, delta: float | None = None, *, scope: str | None = None) -> dict[str, Any]:
    """The privacy section of a release manifest.

    Parameters
    ----------
    ledger : PrivacyLedger
        The run's ledger.
    delta : float, optional
        The delta at which epsilon is reported (default: the ledger's).
    scope : str, optional
        What the guarantee covers (e.g. "the records passed to fit").

    Returns
    -------
    dict
        ``private`` (True), ``epsilon``, ``delta``, ``accountant``, ``neighbouring``,
        ``budget``, ``noise`` (as in ``PrivacyLedger.summary``), ``default_delta``,
        ``noise_sources``, ``ledger_version``, ``events`` (every event's
        ``to_dict()``, all fields) and ``scope``. No caches.
    """
    summary = ledger.summary(delta)
    state = ledger.state_dict()
    if state.get("version") != _LEDGER_STATE_VERSION:  # pragma: no cover - a future ledger format
        raise ValueError(f"unsupported ledger state version {state.get('version')!r}")
    return {
        "private": True,
        **{key: summary[key] for key in _SUMMARY_KEYS},
        "default_delta": state["default_delta"],
        "noise_sources": state["noise_sources"],
        "ledger_version": state["version"],
        "events": state["events"],
        "scope": scope,
    }


def ledger_from_manifest(privacy: Mapping[str, Any]) -> ReleasedLedger:
    """The read-only ledger of a release's privacy section (``ledger_manifest``).

    The events are composed afresh at the stated delta; the ledger reports the stated
    epsilon there, after checking that the fresh composition does not exceed it (by
    more than a relative 1e-4).

    Raises
    ------
    ValueError
        A section without a ledger, with an unknown event, or whose stated epsilon is
        below what its events compose to.
    """
    if not privacy.get("private"):
        raise ValueError("the release is not private: it has no ledger")
    version = privacy.get("ledger_version")
    if version != _LEDGER_STATE_VERSION:
        raise ValueError(f"unsupported ledger version {version!r} in the release (expected {_LEDGER_STATE_VERSION})")
    budget = privacy.get("budget")
    state = {
        "version": version,
        "budget": list(budget) if budget else None,
        "accountant": privacy["accountant"],
        "default_delta": privacy["default_delta"],
        "noise_sources": list(privacy.get("noise_sources", ())),
        "events": list(privacy["events"]),
    }
    ledger = ReleasedLedger.from_state_dict(state)
    stated, delta = float(privacy["epsilon"]), float(privacy["delta"])
    composed = ledger.get_epsilon(delta)
    if not composed <= stated * (1 + _EPSILON_RTOL):
        raise ValueError(
            f"the release states epsilon {stated:.6g} at delta {delta:g}, but its events compose to "
            f"{composed:.6g}: the privacy section is inconsistent"
        )
    ledger._cache[delta] = stated  # read-only: no release clears it
    return ledger


def parallel_manifest(nodes: list[dict[str, Any]], *, scope: str | None = None) -> dict[str, Any]:
    """The privacy section of a model merged from the releases of nodes with disjoint data.

    ``nodes`` are the nodes' own sections (``ledger_manifest``). Every record lies in one
    node's data and the model is post-processing of the node releases, so it is
    ``(max_i epsilon_i, max_i delta_i)``-DP under add/remove one record (parallel
    composition); the section states that pair and keeps every node's ledger.
    """
    if not nodes or not all(n.get("private") for n in nodes):
        raise ValueError("a parallel privacy section needs the private sections of one or more nodes")
    return {
        "private": True,
        "composition": PARALLEL_COMPOSITION,
        "epsilon": max(float(n["epsilon"]) for n in nodes),
        "delta": max(float(n["delta"]) for n in nodes),
        "scope": scope,
        "nodes": list(nodes),
    }


def node_ledgers_from_manifest(privacy: Mapping[str, Any]) -> list[ReleasedLedger]:
    """The read-only ledgers of the nodes of a ``parallel_manifest`` section, each checked
    as ``ledger_from_manifest`` checks one; ``ValueError`` if the stated pair is below
    the largest node's."""
    if privacy.get("composition") != PARALLEL_COMPOSITION or not privacy.get("nodes"):
        raise ValueError("the privacy section is not the parallel composition of node ledgers")
    ledgers = [ledger_from_manifest(node) for node in privacy["nodes"]]
    largest = max(float(node["epsilon"]) for node in privacy["nodes"])
    if float(privacy["epsilon"]) < largest or float(privacy["delta"]) < max(
        float(node["delta"]) for node in privacy["nodes"]
    ):
        raise ValueError(
            f"the release states ({privacy['epsilon']}, {privacy['delta']}) but a node spent epsilon {largest:.6g}: "
            "the privacy section is inconsistent"
        )
    return ledgers


def summary_from_manifest(privacy: Mapping[str, Any]) -> dict[str, Any]:
    """The ledger summary (``PrivacyLedger.summary``) a private model carried as
    ``privacy_``, from its release's privacy section (nothing is recomposed); for a
    ``parallel_manifest`` section the merged summary with every node's."""
    if not privacy.get("private"):
        raise ValueError("the release is not private: it has no ledger summary")
    if "nodes" in privacy:
        return {
            "composition": privacy["composition"],
            "epsilon": privacy["epsilon"],
            "delta": privacy["delta"],
            "nodes": [summary_from_manifest(node) for node in privacy["nodes"]],
        }
    return {
        **{key: privacy[key] for key in _SUMMARY_KEYS},
        "budget": list(privacy["budget"]) if privacy.get("budget") else None,
        "events": [{k: v for k, v in e.items() if v is not None} for e in privacy["events"]],
    }
