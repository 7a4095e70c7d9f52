"""Renders ``benchmarks/dpsgd/RESULTS.md`` from the stored results (``python -m benchmarks.report``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.reporting import (
    DASH,
    Results,
    bold,
    bullets,
    eps_label,
    figure,
    header,
    met_mark,
    ms,
    num,
    source,
    table,
)


def _dpsgd_runs(res: Results, variants: dict[str, str]) -> list[dict[str, Any]]:
    """One entry per (file, model, calibration) of the Table B.1 runs."""
    runs = []
    for name, p in res.matching("dpsgd_accuracy_"):
        suffix = name.removesuffix(".json").rsplit("_", 1)[-1]
        variant = suffix if suffix in variants else ""
        for key, by_model in p["results"].items():
            for model, by_cal in by_model.items():
                for cal, cells in by_cal.items():
                    runs.append(
                        {
                            "file": name,
                            "dataset": key.split(" ")[0],
                            "model": model,
                            "calibration": cal,
                            "variant": variant,
                            "cells": cells,
                            "nonprivate": p["nonprivate"][key][model],
                            "certified": p["certified_epsilon"][key][model][cal],
                        }
                    )
    order = list(variants)
    runs.sort(key=lambda r: (r["model"], order.index(r["variant"]), r["calibration"]))
    return runs


def _b1_table(ds: str, runs: list[dict[str, Any]], spec: dict[str, Any]) -> list[str]:
    epsilons = spec["epsilons"]
    rows = []
    for model in sorted({r["model"] for r in runs if r["dataset"] == ds}):
        target = spec["targets"].get(ds, {}).get(model)
        if target is None:
            rows.append([model, "Table B.1", *[DASH] * (len(epsilons) + 1)])
        else:
            rows.append([model, "**Table B.1**", *[ms(target[e]) for e in epsilons], ms(target["non-DP BFGS"])])
        for r in (r for r in runs if r["dataset"] == ds and r["model"] == model):
            cells = [bold(ms(r["cells"][e]), target is not None and r["cells"][e][0] <= target[e][0]) for e in epsilons]
            label = f"{r['calibration']}, {spec['variants'][r['variant']]}"
            rows.append([model, label, *cells, ms(r["nonprivate"])])
    head = ["model", "row", *[eps_label(e) for e in epsilons], "non-private (L-BFGS)"]
    return table(head, rows, right=range(2, len(head)))


def render(res: Results, t: dict[str, Any]) -> list[str]:
    spec = t["table_b1"]
    runs = _dpsgd_runs(res, spec["variants"])
    out = header(t) + ["### Table B.1: DP-SGD misclassification rate", ""] + source(spec["source"])
    out += bullets(t["notes"]["accuracy"])
    for ds, dspec in spec["datasets"].items():
        out += [f"#### {dspec['heading']}", ""]
        if "note" in dspec:
            out += [dspec["note"], ""]
        out += _b1_table(ds, runs, spec)
    out += [f"Not reproduced: {spec['not_reproduced']}", ""]
    out += figure(res.folder, "dpsgd_accuracy.png", "DP-SGD test error against epsilon, with Table B.1")
    certified: dict[str, dict[str, float]] = {}
    for r in runs:
        if r["variant"] == "":
            certified.setdefault(r["calibration"], r["certified"])
    out += [
        "**Certified epsilon** (what the privacy ledger certifies at delta 1e-5 for each nominal budget; "
        "the same for every data set and model):",
        "",
    ]
    rows = [[cal, *[num(v) for v in cells.values()]] for cal, cells in sorted(certified.items())]
    out += table(["calibration", *[eps_label(e) for e in spec["epsilons"]]], rows, right=range(1, 7))
    return (
        out
        + _dpsgd_speed(res, t)
        + _per_record_cost(res, t)
        + _guard_floor_share(res, t)
        + _defaults_study(res, t)
        + _dpsgd_peers(res, t)
        + _private_pipelines(res, t)
    )


def _dpsgd_speed(res: Results, t: dict[str, Any]) -> list[str]:
    p = res.get("dpsgd_speed.json")
    if p is None:
        return []
    spec = t["speed"]
    out = ["### DP-SGD speed (seconds per epoch)", ""] + bullets(t["notes"]["speed"])
    modes = [m for m in spec["modes"] if m in next(iter(p["results"].values()))]
    rows = []
    for model, by_mode in p["results"].items():
        base = by_mode["nonprivate"]
        cells = [f"{by_mode[m]:.3f} s" + ("" if m == "nonprivate" else f" ({by_mode[m] / base:.2f}x)") for m in modes]
        rows.append([f"`{model}`", *cells])
    out += table(["model", *[spec["modes"][m] for m in modes]], rows, right=range(1, len(modes) + 1))
    rows = []
    for key, target in spec["targets"].items():
        value, cpu = p["headline"][key], p.get("headline_cpu", {}).get(key)
        measured = f"{value:.2f}" + (f" (CPU time {cpu:.2f})" if cpu is not None else "")
        rows.append([target["label"], measured, f"{target['op']} {target['value']:g}", met_mark(value, target)])
    out += ["Headline:", ""] + source(spec["source"], paper=False)
    out += table(["quantity", "measured", "target", ""], rows, right=(1, 2))
    if "functorch_out_of_memory" in p["headline"]:
        oom = "ran out of memory" if p["headline"]["functorch_out_of_memory"] else "did not run out of memory"
        out += [f"functorch {oom} (peak RSS {max(p['peak_rss_mib_so_far']['gmlvq_d784'].values()):.0f} MiB).", ""]
    return out


def _per_record_cost(res: Results, t: dict[str, Any]) -> list[str]:
    """What differentiating every record alone costs against Opacus' batched pass."""
    p = res.get("dpsgd_per_record_cost.json")
    if p is None:
        return []
    out = ["### Per-record DP-SGD against Opacus' batched pass", ""] + bullets(t["notes"]["per_record_cost"])
    seconds = p["seconds"]
    rows = [
        [f"`{group}`", variant, f"{value:.3f} s"]
        for group, variants in seconds.items()
        for variant, value in variants.items()
    ]
    out += table(["fit", "variant", "median wall s"], rows, right=(2,))
    rows = [[f"`{key}`", f"{value:g}"] for key, value in p["headline"].items()]
    return out + ["Headline (ratios of median seconds):", ""] + table(["quantity", "ratio"], rows, right=(1,))


def _guard_floor_share(res: Results, t: dict[str, Any]) -> list[str]:
    """How often the cancellation guard's floor sets a clipping norm, per ``kappa``."""
    p = res.get("dpsgd_guard_floor_share.json")
    if p is None:
        return []
    out = ["### The cancellation guard: floor share and accuracy per kappa", ""]
    out += bullets(t["notes"]["guard_floor_share"])
    kappas = list(p["proved_slack_b1000"])
    rows = []
    for name, cells in p["results"].items():
        rows.append([name, *[f"{cells[k]['acc']:.4f} / {cells[k]['floor_share']:.3f}" for k in kappas]])
    slack = [DASH if v is None else f"{v:.1e}" for v in p["proved_slack_b1000"].values()]
    rows.append(["proved slack, B = 1000, d = r = 784", *slack])
    head = ["set", *[f"kappa {float(k):g}" + (" (library)" if float(k) == p["headline"]["library_kappa"] else "")
                     for k in kappas]]  # fmt: skip
    out += table(head, rows, right=range(1, len(kappas) + 1))
    rows = [[f"`{key}`", str(value)] for key, value in p["headline"].items()]
    return out + ["Headline:", ""] + table(["quantity", "value"], rows, right=(1,))


def _defaults_study(res: Results, t: dict[str, Any]) -> list[str]:
    """Which settings the private LVQ estimators default to: validation accuracy of each
    variant on development splits, mean over the sets."""
    spec = t["defaults_study"]
    out = ["### Defaults: the study on development splits", ""] + bullets(spec["notes"])
    for name in spec["files"]:
        p = res.get(name)
        if p is None:
            out += [f"No stored run `{name}` yet: `{spec['command']}`.", ""]
            continue
        r, eps = p["results"], [f"{e:g}" for e in p["settings"]["epsilons"]]
        for model, ranks in r["mean_rank"].items():
            rows = []
            for v in sorted(ranks, key=ranks.get):
                accs = [f"{r['mean_over_sets'][model][v][e]:.3f}" for e in eps]
                rows.append([v, *accs, f"{ranks[v]:.2f}", f"{r['mean_fit_s'][model][v]:.1f}"])
            head = ["variant", *[f"validation accuracy, {eps_label(e)}" for e in eps], "mean rank", "fit s"]
            out += [f"{model}, mean over {len(p['settings']['sets'])} sets:", ""]
            out += table(head, rows, right=range(1, len(eps) + 3))
    return out


def _dpsgd_peers(res: Results, t: dict[str, Any]) -> list[str]:
    """The prototype models against plain Opacus DP-SGD at equal epsilon (full run, else the quick one)."""
    spec = t["peers"]
    out = ["### Against plain DP-SGD: the peer a user would pick instead", ""] + bullets(spec["notes"])
    p = res.get("dpsgd_peers.json")
    quick = p is None
    p = p or res.get("dpsgd_peers_quick.json")
    if p is None:
        return out + [f"No stored run yet: `{spec['command']}`.", ""]
    if quick:
        out += ["Only the `--quick` run is stored (one fold, two sets, two epsilons).", ""]
    acc, fit_s, gaps = p["results"]["accuracy"], p["results"]["fit_s"], p["results"]["gap_pt"]
    prototypes = spec["prototype_models"]
    rows = []
    for s in p["settings"]["sets"]:
        for e in gaps[s]:
            ours = max(prototypes, key=lambda m: acc[s].get(m, {}).get(e, -1.0))
            theirs = max((m for m in acc[s] if m not in prototypes and e in acc[s][m]), key=lambda m: acc[s][m][e])
            rows.append([
                s, e, f"{ours} {acc[s][ours][e]:.3f}", f"{theirs} {acc[s][theirs][e]:.3f}", f"{gaps[s][e]:+.1f}",
                f"{fit_s[s][ours][e]:.1f} / {fit_s[s][theirs][e]:.1f}",
            ])  # fmt: skip
    folds = f"{p['settings']['folds_run']} of {p['settings']['folds']} folds"
    out += [f"Mean test accuracy over {folds}; gap in points (best prototype model minus best peer); fit seconds.", ""]
    out += table(
        ["set", "epsilon", "best prototype model", "best peer", "gap (pt)", "fit s (ours / peer)"], rows, right=(4,)
    )
    rows = []
    for s in p["settings"]["sets"]:
        nonprivate = [f"{acc[s][m]['nonprivate']:.3f}" if m in acc[s] else DASH for m in spec["nonprivate_models"]]
        rows.append([s, *nonprivate])
    out += ["Non-private references on the same folds:", ""] + table(["set", *spec["nonprivate_models"]], rows)
    h = p["headline"]
    rows = []
    for key, target in spec["targets"].items():
        value = h.get(key)
        measured = DASH if value is None else f"{value:g}"
        rows.append(
            [
                target["label"],
                measured,
                f"{target['op']} {target['value']:g}",
                DASH if value is None else met_mark(value, target),
            ]
        )
    out += (
        ["Headline:", ""]
        + source(spec["source"], paper=False)
        + table(["quantity", "measured", "target", ""], rows, right=(1, 2))
    )
    out += figure(
        res.folder, Path(p["figure"]).name, "Test accuracy against epsilon: prototype models and plain DP-SGD peers"
    )
    return out + bullets(p.get("notes", []))


def _private_pipelines(res: Results, t: dict[str, Any]) -> list[str]:
    """Private MNIST pipelines: scattering + DP-GMLVQ against the targets, the papers' protocol beside
    the fully private one, and the DDP epoch-time ratio."""
    spec = t["private_pipelines"]
    out = ["### Fully private pipelines", ""] + bullets(spec["notes"])
    p = res.get("private_pipelines.json")
    if p is None:
        return out + [f"No stored run yet: `{spec['command']}`.", ""]
    out += source(spec["source"], paper=False)
    out += _scatter_rows(p["results"]["mnist_scatter"], spec) + _side_rows(p) + _ddp_rows(p["results"]["ddp"])
    return out + _feature_heads(res, t)


def _feature_heads(res: Results, t: dict[str, Any]) -> list[str]:
    """The private pipelines' comparisons: scattering, random convolutions and an end-to-end DP CNN under a
    GMLVQ head, fully private MNIST."""
    spec = t["feature_heads"]
    out = ["#### MNIST: which features under the private prototype head", ""] + bullets(spec["notes"])
    p = res.get("feature_heads.json")
    if p is None:
        return out + [f"No stored run yet: `{spec['command']}`.", ""]
    r = dict(p["results"])
    pipelines = res.get("private_pipelines.json")
    if "scattering" not in r and pipelines is not None:  # the stored run of the private pipelines has them
        scatter = pipelines["results"]["mnist_scatter"]
        r["scattering"] = {k[3:]: v for k, v in scatter.items() if k.startswith("eps")}
    epsilons = sorted({e for name in spec["labels"] if name in r for e in r[name] if e[:1].isdigit()}, key=float)
    rows = []
    for name, label in spec["labels"].items():
        if name in r:
            cells = [ms(r[name][e]["acc"], 4) if e in r[name] else DASH for e in epsilons]
            runs = {len(r[name][e]["per_run"]) for e in epsilons if e in r[name]}
            rows.append([label, *cells, "/".join(map(str, sorted(runs)))])
    head = ["features + head", *[f"test accuracy, {eps_label(e)}" for e in epsilons], "runs"]
    intro = f"{r['n_train']} training / {r['n_test']} test images, delta 1e-5, mean (std) over the runs."
    return out + [intro, ""] + table(head, rows, right=range(1, len(epsilons) + 2))


def _scatter_rows(scatter: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    targets, paper = spec["targets"]["mnist_scatter_acc"], spec["targets"]["tramer_boneh_2021"]
    rows = []
    for key in sorted((k for k in scatter if k.startswith("eps")), key=lambda k: float(k[3:])):
        cell, e = scatter[key], key[3:]
        mean = cell["acc"][0]
        target = targets.get(e)
        rows.append(
            [
                eps_label(e),
                bold(ms(cell["acc"], 4), target is not None and mean >= target),
                str(len(cell["per_run"])),
                DASH if target is None else f">= {target:g}",
                DASH if target is None else ("met" if mean >= target else "**not met**"),
                DASH if e not in paper else f"{paper[e]:.3f} ({mean - paper[e]:+.3f})",
                num(max(cell["pipeline_epsilon"])),
            ]
        )
    ref = scatter.get("nonprivate_gmlvq")
    if ref:
        label = f"non-private GMLVQ (L-BFGS, {ref['n_train']} training images)"
        rows.append([label, f"{ref['acc']:.4f}", "1", DASH, DASH, DASH, DASH])
    head = ["epsilon", "test accuracy", "runs", "target", "", "Tramèr & Boneh (2021) (diff)", "pipeline epsilon"]
    intro = (
        f"#### MNIST: scattering features + DP-GMLVQ, fully private ({scatter['n_train']} training / "
        f"{scatter['n_test']} test images)"
    )
    return [intro, ""] + table(head, rows, right=(1, 2, 6))


def _side_rows(p: dict[str, Any]) -> list[str]:
    rows = []
    for name, by_eps in p["results"]["side_by_side"].items():
        for e, cell in by_eps.items():
            if not isinstance(cell, dict) or "fully_private" not in cell:
                continue
            shares = ", ".join(f"{k} {v:.3f}" for k, v in cell["parts"].items())
            rows.append(
                [
                    name,
                    eps_label(e),
                    ms(cell["papers_protocol"]),
                    ms(cell["fully_private"]),
                    f"{cell['fully_private'][0] - cell['papers_protocol'][0]:+.3f}",
                    num(cell["composed_epsilon"]),
                    shares,
                    by_eps["folds"],
                ]
            )
    head = [
        "data set",
        "epsilon",
        "papers' protocol",
        "fully private",
        "diff",
        "composed epsilon",
        "epsilon parts",
        "folds",
    ]
    out = ["#### The papers' protocol against a fully private pipeline: test misclassification rate", ""]
    out += [
        "Papers' protocol: non-private preprocessing, its epsilon covers DP-GMLVQ only. Fully private: the "
        "DPPipeline's composed epsilon covers every step (epsilon parts: each release's own epsilon at delta 1e-5).",
        "",
    ]
    return out + table(head, rows, right=(2, 3, 4, 5))


def _ddp_rows(ddp: dict[str, Any]) -> list[str]:
    all_threads = ddp.get("single_all_threads_epoch_s")
    rows = [
        [
            "one DP-SGD epoch",
            f"{ddp['single_epoch_s']:.3f} s",
            f"{ddp['ddp2_epoch_s']:.3f} s",
            num(ddp["ratio"]),
            DASH if all_threads is None else f"{all_threads:.3f} s",
        ]
    ]
    out = ["#### Distributed DP-SGD: epoch time in two processes", ""]
    setting = ddp.get("setting")
    if setting:
        out += [
            f"Fused engine, DP-GMLVQ (rank {setting['r']}) on {setting['n']} synthetic records of {setting['d']} "
            f"features, Poisson rate {setting['q']:g} ({round(1 / setting['q'])} steps per epoch), "
            f"{ddp.get('cpu_count', '?')} CPU cores: one process with one thread, two processes (gloo) with one "
            "thread each, and one process with every core (torch's own threads). Each step of the two processes "
            "waits for an all-reduce of the noisy gradient sum.",
            "",
        ]
    head = ["", "one process, 1 thread", "two processes (DDP)", "ratio", "one process, all threads"]
    return out + table(head, rows, right=(1, 2, 3, 4))
