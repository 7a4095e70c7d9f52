"""Renders ``benchmarks/privacy/RESULTS.md`` from the stored results (``python -m benchmarks.report``)."""

from __future__ import annotations

import math
from typing import Any

from benchmarks.reporting import DASH, Results, bold, bullets, header, num, table


def render(res: Results, t: dict[str, Any]) -> list[str]:
    out = header(t)
    p = res.get("privacy_audit.json")
    if p is not None:
        spec = t["audit"]
        out += ["### Privacy audit", ""] + bullets(t["notes"]["audit"])
        rows = []
        for name, a in p["results"].items():
            if "engine" in a:  # a per-step DP-SGD audit: its own table below
                continue
            row_spec = spec["rows"].get(name, {"mechanism": DASH, "expected": DASH})
            verdict = "VIOLATION" if a["violation_detected"] else "ok"
            expected = "ok" if row_spec["expected"] == "ok" else "VIOLATION"
            ratio = a["audited_lower_bound"] / a["claimed"] if a["claimed"] else None
            rows.append(
                [
                    f"`{name}`",
                    row_spec["mechanism"],
                    f"{a['claimed']:.4g}",
                    f"{a['delta']:g}",
                    f"{a['n_trials']:,}",
                    f"**{a['audited_lower_bound']:.3f}**",
                    num(ratio, 2),
                    num(a["epsilon_estimate"]),
                    verdict,
                    expected if expected == verdict else f"**{expected}**",
                ]
            )
        head = ["name", "mechanism", "claimed eps", "delta", "trials", "lower bound", "LB / claim", "point estimate"]
        out += table([*head, "verdict", "expected"], rows, right=range(2, 8))
        out += [f"Expected verdict: {spec['source']}. Confidence {p['confidence']:g}, seed {p['seed']}.", ""]
        out += _step_audit(p, t)
    p = res.get("trainer_audit.json")
    if p is not None:
        out += _trainer_audit(p, t)
    p = res.get("black_box_audit.json")
    if p is not None:
        out += _black_box_audit(p, t)
    p = res.get("noise_samplers.json")
    if p is not None:
        spec = t["samplers"]
        out += ["### Float-safe noise samplers against OpenDP", ""] + bullets(t["notes"]["samplers"])
        rows = []
        for key, r in p["results"].items():
            scales = list(r["ns_per_draw"])
            rows.append(
                [
                    spec["labels"].get(key, key),
                    " / ".join(scales),
                    " / ".join(f"{r['ns_per_draw'][s]:,.0f}" for s in scales),
                    " / ".join(f"{r['pvalue'][s]:.2f}" for s in scales),
                ]
            )
        out += table(["sampler", "scale", "ns / draw", "chi-square p"], rows, right=(1, 2, 3))
        legend = "; ".join(f"{s}: {text}" for s, text in spec["scales"].items())
        out += [
            f"Scales: {legend}. OpenDP takes **{p['speed_ratio_opendp_over_dp_proto']:.0f} times** (Laplace) and "
            f"**{p['speed_ratio_opendp_over_dp_proto_gaussian']:.0f} times** (Gaussian) as long per draw.",
            "",
        ]
    return out


def _step_audit(p: dict[str, Any], t: dict[str, Any]) -> list[str]:
    """The per-step DP-SGD audits (rows with an ``engine``): one table row per engine,
    layer, canary and build, one column per calibrated epsilon."""
    steps = {name: a for name, a in p["results"].items() if "engine" in a}
    if not steps:
        return []
    spec = t["step_audit"]
    out = ["### Per-step audit of the DP-SGD engines", ""] + bullets(t["notes"]["step_audit"])
    epsilons = sorted({a["target_epsilon"] for a in steps.values()})
    groups: dict[tuple[str, str, str, bool], dict[float, dict[str, Any]]] = {}
    for a in steps.values():
        groups.setdefault((a["engine"], a["layer"], a["canary"], a["before_fix"]), {})[a["target_epsilon"]] = a
    rows = []
    for (engine, layer, canary, before_fix), by_eps in groups.items():
        flagged = [e for e in epsilons if e in by_eps and by_eps[e]["violation_detected"]]
        if not flagged:
            verdict = "ok"
        elif len(flagged) == len(by_eps):
            verdict = "VIOLATION"
        else:
            verdict = "VIOLATION at eps " + ", ".join(f"{e:g}" for e in flagged)
        before = spec["expected"]["before_fix"]
        wanted = before.get(f"{engine}_{layer}", before[engine]) if before_fix else spec["expected"]["honest"]
        expected = "ok" if wanted == "ok" else "VIOLATION"
        cells = []
        for e in epsilons:
            a = by_eps.get(e)
            cell = (
                DASH if a is None else f"{a['audited_lower_bound']:.3f} ({a['audited_lower_bound'] / a['claimed']:.2f})"
            )
            cells.append(bold(cell, a is not None and a["violation_detected"]))
        movement = next(iter(by_eps.values()))["movement"]
        rows.append(
            [
                spec["engines"].get(engine, engine),
                spec["layers"].get(layer, layer),
                spec["canaries"].get(canary, canary),
                "before the fix" if before_fix else "current",
                f"{movement:.3f}",
                *cells,
                verdict,
                expected if verdict == expected else f"**{expected}**",
            ]
        )
    head = ["engine", "layer", "canary", "build", "movement / C", *[f"eps {e:g}" for e in epsilons]]
    out += table([*head, "verdict", "expected"], rows, right=range(4, 5 + len(epsilons)))
    first = {e: next(a for a in steps.values() if a["target_epsilon"] == e) for e in epsilons}
    claims = " / ".join(f"{first[e]['claimed']:.4g}" for e in epsilons)
    sigmas = " / ".join(f"{first[e]['noise_multiplier']:.4g}" for e in epsilons)
    trials = sorted({a["n_trials"] for a in steps.values()})
    out += [
        f"Cell: 95 % lower bound (lower bound / claim), bold where it exceeds the claim. Claims (the ledger's "
        f"epsilon of one step at delta 1e-5) {claims} for the noise multipliers {sigmas} calibrated to epsilon "
        f"{' / '.join(f'{e:g}' for e in epsilons)}; {' / '.join(f'{n:,}' for n in trials)} trials per data set. "
        f"Expected verdict: {spec['source']}.",
        "",
    ]
    tight = [
        a for a in steps.values() if a["canary"] == "centre" and not a["before_fix"] and abs(a["movement"] - 1.0) < 1e-3
    ]
    if tight:
        means = [
            sum(a["audited_lower_bound"] / a["claimed"] for a in tight if a["target_epsilon"] == e)
            / max(sum(1 for a in tight if a["target_epsilon"] == e), 1)
            for e in epsilons
        ]
        engines = sorted({a["engine"] for a in tight}, key=list(spec["engines"]).index)
        out += [
            f"Tightness: where the canary moves the clipped sum by C (the centre canary; engines "
            f"{', '.join(engines)}), the audit reaches on average "
            f"{' / '.join(f'{m:.2f}' for m in means)} of the claim at epsilon "
            f"{' / '.join(f'{e:g}' for e in epsilons)}.",
            "",
        ]
    return out


def _trainer_audit(p: dict[str, Any], t: dict[str, Any]) -> list[str]:
    """The white-box audits of the DP estimators' whole DP-SGD runs and their broken twins."""
    spec = t["trainer_audit"]
    out = ["### White-box audits of whole DP-SGD runs", ""] + bullets(t["notes"]["trainer_audit"])
    honest = [r for r in p["rows"] if r["twin"] is None]
    epsilons = sorted({r["epsilon"] for r in honest})
    rows = []
    for name in dict.fromkeys(r["estimator"] for r in honest):
        for engine in dict.fromkeys(r["engine"] for r in honest):
            cells = {r["epsilon"]: r for r in honest if r["estimator"] == name and r["engine"] == engine}
            row = [name, spec["engines"][engine]]
            for eps in epsilons:
                r = cells[eps]
                text = f"{r['epsilon_lower_bound']:.3f} / {r['claimed_epsilon']:.3f} ({r['ratio']:.2f})"
                row.append(
                    bold(text, r["ratio"] >= spec["target_ratio"]) if not r["violation"] else f"**{text} VIOLATION**"
                )
            rows.append(row)
    out += table(["estimator", "engine", *(f"eps {e:g}" for e in epsilons)], rows, right=range(2, 2 + len(epsilons)))
    h = p["headline"]
    out += [
        f"Cells: lower bound / claim (ratio), bold where the ratio reaches {spec['target_ratio']:g} (the target). "
        f"{h['honest_below_claim']} of {h['honest_rows']} honest runs stay below their claim; "
        f"{h['rows_at_least_0.8']} reach {spec['target_ratio']:g} of it; the smallest ratio is {h['min_ratio']:.2f}. "
        f"{p['runs']} runs of {p['epochs']:g} epochs per cell.",
        "",
    ]
    twin_rows = []
    for r in (r for r in p["rows"] if r["twin"] is not None):
        twin_rows.append(
            [
                spec["twins"][r["twin"]],
                spec["engines"][r["engine"]],
                f"{r['claimed_epsilon']:.3f}",
                f"**{r['epsilon_lower_bound']:.4g}**",
                f"{r['noise_multiplier_measured']:.3f} / {r['noise_multiplier']:.3f}",
                f"{r['sampling_rate_measured']:.4f} / {r['sampling_rate']:g}",
                f"{r['contribution']:.2f}",
                "VIOLATION" if r["violation"] else "ok",
            ]
        )
    head = ["broken twin", "engine", "claim", "lower bound", "sigma measured / claimed", "q measured / claimed"]
    out += table([*head, "contribution / C", "verdict"], twin_rows, right=range(2, 7))
    out += [
        f"{h['twins_flagged']} of {h['twins']} broken twins flagged ({spec['twin_setting']}). "
        f"Fit to the assumed form over the honest runs: the smallest normality p-value of the noise is "
        f"{min(r['normality_pvalue'] for r in honest):.2g}; the membership's lag-one autocorrelation is at most "
        f"{max(abs(r['membership_autocorrelation'] or 0.0) for r in honest):.3f} in absolute value.",
        "",
    ]
    return out


def _bound_cell(bound: float, ratio: float, violation: bool, is_twin: bool, target: float) -> str:
    """A lower bound and its ratio to the claim: bold at the target or, for a broken twin,
    above the claim; a VIOLATION where an honest run exceeds its claim."""
    text = f"{bound:.3f} ({ratio:.2f})"
    if violation:
        return f"**{text}**" if is_twin else f"**{text} VIOLATION**"
    return bold(text, not is_twin and ratio >= target)


def _black_box_audit(p: dict[str, Any], t: dict[str, Any]) -> list[str]:
    """The black-box audits from a worst-case start, and their broken twins."""
    spec = t["black_box_audit"]
    target = spec["target_ratio"]
    out = ["### Black-box audits of whole DP-SGD runs", ""] + bullets(t["notes"]["black_box_audit"])
    rows = []
    for r in p["rows"]:
        is_twin = r["twin"] is not None
        rows.append(
            [
                r["estimator"],
                t["trainer_audit"]["engines"][r["engine"]],
                f"{r['epsilon']:g}",
                spec["twins"].get(r["twin"], DASH) if r["twin"] else DASH,
                f"{r['fits']:,}",
                f"{r['claimed_epsilon']:.3f}",
                _bound_cell(r["epsilon_lower_bound"], r["ratio"], r["violation"], is_twin, target),
                _bound_cell(r["epsilon_lower_bound_gdp"], r["ratio_gdp"], r["violation_gdp"], is_twin, target),
                f"{r['mu_lower_bound']:.3f} / {math.sqrt(r['steps']) / r['noise_multiplier']:.3f}",
            ]
        )
    head = ["estimator", "engine", "eps", "broken twin", "fits per set", "claim"]
    out += table(
        [*head, "lower bound, assumption-free (ratio)", "lower bound, Gaussian (ratio)", "mu: bound / claimed"],
        rows,
        right=range(4, 9),
    )
    h = p["headline"]
    out += [
        f"Bold: an honest run's bound at {target:g} of its claim or more (the target at epsilon 8), or a broken twin "
        f"above its claim. At epsilon 8 the smallest ratio is {h['eps8_min_ratio']:.2f} assumption-free and "
        f"{h['eps8_min_ratio_gdp']:.2f} under the Gaussian trade-off; {h['honest_below_claim']} / "
        f"{h['honest_below_claim_gdp']} of {h['honest_rows']} honest runs stay below their claim; "
        f"{h['twins_flagged']} / {h['twins_flagged_gdp']} of {h['twins']} broken twins are flagged "
        f"({spec['twin_setting']}). mu claimed: sqrt(T) / sigma, the full-batch run's Gaussian trade-off.",
        "",
        f"![Black-box audits: lower bounds against the claims]({spec['figure']})",
        "",
    ]
    return out
