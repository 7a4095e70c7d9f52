"""A release's human-readable card, generated from its manifest.

The card (``README.md`` beside ``manifest.json``) follows the reporting checklist of
Ponomareva et al. (2023), "How to DP-fy ML": the privacy unit and the neighbouring
relation, what the guarantee covers, the accountant and the sampling assumption, epsilon
and delta, every release of the ledger, the public inputs, the empirical checks, and the
versions of code and data. The manifest stays the source of truth: the card is written
from it alone and is never read back.

Reference: Ponomareva, Hazimeh, Kurakin, Xu, Denison, McMahan, Vassilvitskii, Chien &
Thakurta (2023). How to DP-fy ML: a practical guide to machine learning with differential
privacy. *Journal of Artificial Intelligence Research* 77.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["release_card"]

# What each event kind is, in words (dp_proto.privacy.events).
_MECHANISMS = {
    "pure": "pure epsilon-DP release (Laplace or exponential mechanism)",
    "laplace": "Laplace noise",
    "discrete_laplace": "discrete Laplace noise on a grid",
    "gaussian": "Gaussian noise",
    "discrete_gaussian": "discrete Gaussian noise on a grid",
    "subsampled_gaussian": "DP-SGD: Gaussian noise on clipped gradient sums of Poisson-sampled batches",
    "approx": "(epsilon, delta)-DP release",
    "non_private": "NOT private: a release without noise",
    "repeat_and_select": "private selection: the best of a random number of runs (Papernot & Steinke 2022)",
}
_ACCOUNTANTS = {
    "pld": "privacy loss distributions (dp_accounting's PLD accountant)",
    "rdp": "Renyi DP (dp_accounting's RDP accountant)",
}
_PARAMETERS = ("epsilon", "delta", "noise_multiplier", "sampling_rate", "sensitivity", "grid_steps")


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text.replace("|", "\\|").replace("\n", " ")


def _events_table(events: list[Mapping[str, Any]]) -> list[str]:
    lines = ["| release | mechanism | parameters | count |", "|---|---|---|---:|"]
    for event in events:
        parameters = ", ".join(
            f"{key.replace('_', ' ')} {_number(event[key])}" for key in _PARAMETERS if event.get(key) is not None
        )
        kind = str(event.get("kind", "?"))
        name = event.get("name") or "(unnamed)"
        if kind == "repeat_and_select":
            runs = "Poisson" if event.get("shape") in (None, float("inf")) else f"shape {_number(event['shape'])}"
            per_run = "; ".join(str(e.get("name") or e.get("kind")) for e in event.get("inner", ()))
            parameters = f"mean runs {_number(event.get('mean'))} ({runs}); each run: {per_run}"
        lines.append(f"| {_cell(name)} | {_MECHANISMS.get(kind, kind)} | {parameters} | {event.get('count', 1)} |")
    return lines


def _guarantee(privacy: Mapping[str, Any], source: Mapping[str, Any]) -> list[str]:
    if not privacy.get("private"):
        return [
            "**This model is not differentially private.** "
            + str(privacy.get("note") or "It was fitted without noise; publishing it can reveal its training records."),
        ]
    epsilon, delta = privacy["epsilon"], privacy["delta"]
    guarantee = f"({_number(epsilon)}, {_number(delta)})-DP" if delta else f"{_number(epsilon)}-DP (pure)"
    noise = privacy.get("noise", "fresh")
    noise_text = (
        "fresh operating-system entropy"
        if noise == "fresh"
        else "reproducible (a caller's seed): whoever knows the seed can remove the noise"
    )
    budget = privacy.get("budget")
    rows = [
        ("guarantee", guarantee),
        ("privacy unit", "one record (one row passed to `fit`)"),
        ("neighbouring datasets", str(privacy.get("neighbouring", "add/remove one record"))),
        ("what it covers", str(privacy.get("scope", "not stated"))),
        (
            "accountant",
            f"{_ACCOUNTANTS.get(privacy.get('accountant'), privacy.get('accountant'))}, over every release below",
        ),
        ("budget", f"epsilon {_number(budget[0])} at delta {_number(budget[1])}" if budget else "none set"),
        ("noise", noise_text),
    ]
    if source.get("privacy_scope"):
        rows.insert(4, ("scope of the run", str(source["privacy_scope"])))
    lines = ["| | |", "|---|---|", *(f"| {key} | {_cell(value)} |" for key, value in rows)]
    events = list(privacy.get("events", ()))
    lines += ["", "Every noisy release of the fit (the ledger):", "", *_events_table(events)]
    if any(event.get("kind") == "subsampled_gaussian" for event in events):
        lines += [
            "",
            "Sampling assumption: each DP-SGD step draws a Poisson batch, every record joining it",
            "independently with the stated sampling rate (`dp_proto.privacy.PoissonDataLoader`); the",
            "accountant's amplification by sampling holds for exactly this sampling.",
        ]
    return lines


def _public_inputs(manifest: Mapping[str, Any]) -> list[str]:
    public = manifest.get("public", {})
    lines = []
    if "n_features" in public:
        lines.append(f"- features: {public['n_features']}")
    domain = public.get("domain")
    if domain:
        lines.append(f"- public feature bounds: [{_cell(domain.get('lower'))}, {_cell(domain.get('upper'))}]")
    classes = public.get("classes")
    if classes:
        lines.append(f"- label set: {_cell(classes.get('values'))}")
    hyper = manifest.get("hyperparameters", {})
    if hyper:
        lines += ["", "| hyperparameter | value |", "|---|---|"]
        lines += [f"| {key} | {_cell(value)} |" for key, value in sorted(hyper.items())]
    not_saved = manifest.get("hyperparameters_not_saved", {})
    if not_saved:
        lines += ["", "Not published:", ""]
        lines += [f"- `{key}`: {_cell(reason)}" for key, reason in sorted(not_saved.items())]
    return lines or ["(none recorded)"]


def _checks() -> list[str]:
    return [
        "- empirical privacy audit: not run for this release (the library's mechanisms and DP-SGD",
        "  steps are audited by `python -m benchmarks.privacy.audit`)",
        "- membership inference (TPR at low FPR): not measured for this release",
    ]


def _versions(manifest: Mapping[str, Any]) -> list[str]:
    fmt = manifest.get("format", {})
    tensors = manifest.get("tensors", {})
    lines = [
        f"- dp-proto {manifest.get('dp_proto_version', '?')}, release format {fmt.get('name', '?')} "
        f"version {fmt.get('version', '?')}",
        f"- tensors: `{tensors.get('file', '?')}`, SHA-256 `{tensors.get('sha256') or 'not computed'}`",
    ]
    source = manifest.get("source") or {}
    if source.get("command"):
        lines.append(f"- written by `{source['command']}`")
    data = (source.get("config") or {}).get("data")
    if data:
        lines.append(f"- data: {_cell({k: v for k, v in data.items() if k in ('source', 'name', 'subsample')})}")
    if source.get("input"):
        lines.append(f"- model input: {_cell(source['input'])}")
    return lines


def release_card(manifest: Mapping[str, Any]) -> str:
    """The Markdown card of a release from its ``manifest`` (``Release.manifest()``, or
    ``manifest.json`` read back): the guarantee, every noisy release, the public inputs,
    the empirical checks and the versions (Ponomareva et al. 2023)."""
    privacy = manifest.get("privacy", {})
    source = manifest.get("source") or {}
    parts = [
        f"# Release card: {manifest.get('model', '?')}",
        "",
        "Generated from `manifest.json`, the machine-readable source of truth, which",
        "`dp_proto.load_release` checks; this card changes nothing. Its sections follow the",
        'reporting checklist of Ponomareva et al. (2023), "How to DP-fy ML".',
        "",
        "## Privacy guarantee",
        "",
        *_guarantee(privacy, source),
        "",
        "## Public inputs",
        "",
        *_public_inputs(manifest),
        "",
        "## Empirical checks",
        "",
        *_checks(),
        "",
        "## Versions",
        "",
        *_versions(manifest),
    ]
    return "\n".join(parts) + "\n"
