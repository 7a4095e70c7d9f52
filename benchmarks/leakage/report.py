"""Renders ``benchmarks/leakage/RESULTS.md`` from the stored results (``python -m benchmarks.report``)."""

from __future__ import annotations

from typing import Any

from benchmarks.reporting import DASH, Results, bullets, header, num, source, table


def pval(p: float | None) -> str:
    if p is None:
        return DASH
    if p == 0:
        return "0"
    if p < 1e-3:
        mantissa, exponent = f"{p:.0e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    return f"{p:.2g}"


def render(res: Results, t: dict[str, Any]) -> list[str]:
    p = res.get("leakage.json")
    out = header(t) + bullets(t["notes"])
    if p is None:
        return out + ["No stored result.", ""]
    r, schemes = p["results"], t["schemes"]
    spec = t["outlier"]
    out += ["### Outlier shift", ""] + source(spec["source"])
    settings = list(spec["settings"])
    rows = [
        [
            "**Brinkrolf (2023)**",
            *[f"{spec['targets'][s]['mean_shift']:.3f} (p {pval(spec['targets'][s]['p'])})" for s in settings],
            DASH,
        ]
    ]
    for scheme, by_setting in r["outlier_shift"].items():
        cells = [f"{by_setting[s]['mean_shift']:.3f} (p {pval(by_setting[s]['welch_p'])})" for s in settings]
        rows.append([schemes.get(scheme, scheme), *cells, num(by_setting.get("train_accuracy_A"))])
    out += table(["scheme", *spec["settings"].values(), "training accuracy (without the outlier)"], rows)
    spec = t["xor"]
    out += ["### XOR symmetry breaking", ""] + source(spec["source"])
    rows = [["**Brinkrolf (2023)**", num(spec["targets"][0], 2), num(spec["targets"][1], 2), DASH, DASH]]
    for scheme, x in r["xor"].items():
        acc = x.get("train_accuracy", {})
        rows.append(
            [
                schemes.get(scheme, scheme),
                num(x["balanced_fraction"]),
                num(x["unbalanced_fraction"]),
                pval(x["fisher_p"]),
                f"{num(acc.get('balanced'))} / {num(acc.get('unbalanced'))}",
            ]
        )
    out += table(
        ["scheme", "balanced", "unbalanced", "Fisher p", "training accuracy (balanced / unbalanced)"],
        rows,
        right=(1, 2, 3),
    )
    out += ["### Audit: empirical lower bound on epsilon", ""]
    rows = [
        [
            schemes.get(scheme, scheme),
            num(a["claimed"], 2) if a["claimed"] is not None else f"{DASH} (not private)",
            f"**{a['audited_lower_bound']:.2f}**",
            str(a["n_trials"]),
            "yes" if a["violation_detected"] else "no",
        ]
        for scheme, a in r["audit"].items()
    ]
    return out + table(["scheme", "claimed epsilon", "95 % lower bound", "runs", "violation"], rows, right=(1, 2, 3))
