"""Renders ``benchmarks/aggregate/RESULTS.md`` from the stored results (``python -m benchmarks.report``)."""

from __future__ import annotations

from typing import Any

from benchmarks.reporting import DASH, Results, bullets, figure, header, met_mark, ms, num, source, table


def render(res: Results, t: dict[str, Any]) -> list[str]:
    p = res.get("aggregate_accuracy.json")
    out = header(t) + bullets(t["notes"]) + [t["paper_values"], ""]
    if p is None:
        return out + ["No stored result.", ""]
    labels = t["labels"]
    eps = list(p["settings"]["epsilons"])
    eps_keys = [f"{e:g}" for e in eps]
    artificial = [k for k in p["results"] if k.startswith("artificial")]
    out += ["### SAA on the artificial data, m = 50 bins", ""]
    rows = []
    for ds in artificial:
        for domain in ("ball", "box"):
            cells = p["results"][ds]["saa"][domain]["50"]
            rows.append([labels.get(ds, ds), domain, *[ms(cells[e]) for e in eps_keys]])
    out += table(["data", "domain", *[f"eps {e}" for e in eps_keys]], rows, right=range(2, 2 + len(eps)))
    noise_free = ", ".join(f"{labels.get(ds, ds)}: {p['reference'][ds]['bin mean m=50']:.4f}" for ds in artificial)
    out += [f"Noise-free mean of the 50 bins (what SAA converges to): {noise_free}. Paper value per cell: {DASH}.", ""]
    out += _aggregate_bins(p, artificial[0], eps_keys, labels)
    coa = [
        c[0] for ds in artificial for dom in p["results"][ds]["coa"].values() for m in dom.values() for c in m.values()
    ]
    out += [f"COA on the artificial data: error {min(coa):.2f}-{max(coa):.2f} over every d, domain, m and epsilon.", ""]
    out += _aggregate_real(p, eps_keys, labels)
    out += _aggregate_headline(p, t)
    out += figure(res.folder, "aggregate_accuracy.png", "SAA and COA error against epsilon")
    return out


def _aggregate_bins(p: dict[str, Any], ds: str, eps_keys: list[str], labels: dict[str, str]) -> list[str]:
    out = [f"### SAA by number of bins m ({labels.get(ds, ds)})", ""]
    rows = []
    for domain in ("ball", "box"):
        for m, cells in p["results"][ds]["saa"][domain].items():
            rows.append([domain, m, *[ms(cells[e]) for e in eps_keys]])
    return out + table(["domain", "m", *[f"eps {e}" for e in eps_keys]], rows, right=range(2, 2 + len(eps_keys)))


def _aggregate_real(p: dict[str, Any], eps_keys: list[str], labels: dict[str, str]) -> list[str]:
    out = ["### Real data, m = 50 bins, 5-fold CV (mean error)", ""]
    rows = []
    for ds, by_scheme in p["results"].items():
        if ds.startswith("artificial"):
            continue
        for domain, by_m in by_scheme["saa"].items():
            rows.append([labels.get(ds, ds), f"SAA, {domain}", *[num(by_m["50"][e][0]) for e in eps_keys]])
        coa = [min(by_m["50"][e][0] for by_m in by_scheme["coa"].values()) for e in eps_keys]
        rows.append([labels.get(ds, ds), "COA (lowest of the domains)", *[num(c) for c in coa]])
        if "dp_sgd" in by_scheme:
            cells = next(iter(next(iter(by_scheme["dp_sgd"].values())).values()))
            rows.append([labels.get(ds, ds), labels["dp_sgd"], *[num(cells[e][0]) for e in eps_keys]])
    out += table(["data", "scheme", *[f"eps {e}" for e in eps_keys]], rows, right=range(2, 2 + len(eps_keys)))
    refs = [
        f"{labels.get(ds, ds)}: non-private GLVQ (L-BFGS) {ref['GLVQ L-BFGS']:.3f}, noise-free mean of 50 bins "
        f"{ref['bin mean m=50']:.3f}"
        for ds, ref in p["reference"].items()
        if "GLVQ L-BFGS" in ref
    ]
    return out + ["Non-private references: " + "; ".join(refs) + ".", ""]


def _aggregate_headline(p: dict[str, Any], t: dict[str, Any]) -> list[str]:
    spec = t["headline"]
    rows = []
    for key, target in spec["targets"].items():
        value = p["headline"][key]
        rows.append([target["label"], f"{value:.3f}", f"{target['op']} {target['value']:g}", met_mark(value, target)])
    s = p["speed"]
    out = ["### Headline", ""] + source(spec["source"], paper=False)
    out += table(["quantity", "measured", "target", ""], rows, right=(1, 2))
    out += [
        f"Speed ({t['labels'].get(s['dataset'], s['dataset'])}, first training fold, {s['records']} records, {s['features']} features, "
        f"{s['threads']} thread): all {s['bins']} bins {s['bins_s']:.2f} s against one full-data minibatch GLVQ "
        f"fit with the same {s['epochs']} epochs {s['single_fit_s']:.2f} s.",
        "",
    ]
    return out
