"""Renders ``benchmarks/studies/RESULTS.md`` from the stored results (``python -m benchmarks.report``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.reporting import DASH, GENERATED, Results, bold, bullets, ms, num, table

PRETTY = {
    "solver": lambda v: "Adam" if v == "adam" else v,
    "transfer_fn": lambda v: v,
    "beta": lambda v: f"beta {v}",
    "lr": lambda v: f"lr {v}",
    "average_last": lambda v: "last iterate" if float(v) == 0 else f"mean of the last {float(v):.0%}",
    "metric_lr_scale": lambda v: f"Omega lr x{v}",
    "clipping": lambda v: "per-parameter clipping" if v == "per_parameter" else f"{v} clipping",
    "normalize_omega": lambda v: "trace-1 Omega" if v == "True" else "Omega at identity scale",
}


def config_parts(name: str) -> list[str]:
    """``"transfer_fn=sigmoid beta=16 lr=0.05"`` -> ``["sigmoid", "beta 16", "lr 0.05"]``."""
    parts = []
    for item in name.split():
        key, _, value = item.partition("=")
        parts.append(PRETTY.get(key, lambda v, k=key: f"{k} {v}")(value))
    return parts


def _tuning_tables(files: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """One table per (model, epsilons, splits, data sets): every configuration of those files,
    best first; the settings that all its rows share are named once above it."""
    groups: dict[tuple, list[tuple[str, dict[str, Any]]]] = {}
    for name, p in files:
        key = (p["model"], tuple(p["epsilons"]), p["splits"], tuple(p["datasets"]))
        groups.setdefault(key, []).append((name, p))
    out = []
    for (model, epsilons, splits, datasets), members in groups.items():
        rows = []
        for name, p in members:
            run = name.removesuffix(".json").rsplit("_", 1)[-1]
            for config, mean in p["results"].items():
                per = p["per_set"][config]
                cells = [" / ".join(f"{per[f'{ds}@{e:g}']:.3f}" for e in epsilons) for ds in datasets]
                rows.append((mean, run, config_parts(config), cells))
        rows.sort(key=lambda r: r[0])
        if any("Adam" in r[2] for r in rows):  # the default solver has no name in the configuration
            rows = [(m, run, parts if "Adam" in parts else ["SGD", *parts], c) for m, run, parts, c in rows]
        common = [part for part in rows[0][2] if all(part in r[2] for r in rows)] if len(rows) > 1 else []
        body = [
            [run, ", ".join(q for q in parts if q not in common) or DASH, bold(f"{mean:.3f}", i == 0), *cells]
            for i, (mean, run, parts, cells) in enumerate(rows)
        ]
        fixed = f"; every row: {', '.join(common)}" if common else ""
        eps_text = " / ".join(f"{e:g}" for e in epsilons)
        out += [f"DP-{model.upper()}, {splits} splits per set{fixed}; per set: epsilon {eps_text}.", ""]
        out += table(["run", "configuration", "mean", *datasets], body, right=(2,))
    return out


def render(res: Results, notes: dict[str, Any]) -> list[str]:
    out = [GENERATED, "", f"## {notes['title']}", "", notes["intro"], ""]
    out += ["### DP-SGD defaults on development sets", ""] + bullets(notes["tuning_protocol"])
    for study in notes["studies"]:
        files = [(name, res.get(name)) for name in study["files"]]
        out += [f"#### {study['title']}", "", study["question"], ""]
        out += _tuning_tables([(n, p) for n, p in files if p is not None])
        out += [f"**Chosen:** {study['decision']}", ""]
    out += _diagnosis(res, notes["diagnosis"])
    out += _yale_crops(res, notes["yale_crops"])
    out += _federated_private_nodes(res, notes["federated_private_nodes"])
    return out


def _study(res: Results, spec: dict[str, Any], body: Callable[[dict[str, Any]], list[str]]) -> list[str]:
    """A study section: its title and question, ``body`` of its stored result (or "No
    stored result."), and what was chosen."""
    p = res.get(spec["file"])
    out = [f"### {spec['title']}", "", spec["question"], ""]
    if p is None:
        return out + ["No stored result.", ""]
    return out + body(p) + [f"**Chosen:** {spec['decision']}", ""]


def _federated_private_nodes(res: Results, spec: dict[str, Any]) -> list[str]:
    def body(p: dict[str, Any]) -> list[str]:
        eps = list(next(iter(p["results"].values())))
        rows = [
            [config, *[f"{ms(cells[e]['merged'])} / {ms(cells[e]['node'])}" for e in eps]]
            for config, cells in p["results"].items()
        ]
        header = ["node recipe (DPGMLVQ)", *[f"eps {e}: merged / mean node" for e in eps]]
        return table(header, rows, right=range(1, 1 + len(eps)))

    return _study(res, spec, body)


def _diagnosis(res: Results, spec: dict[str, Any]) -> list[str]:
    def body(p: dict[str, Any]) -> list[str]:
        eps = list(next(iter(p["results"].values())))
        rows = [[config, *[num(cells[e]) for e in eps]] for config, cells in p["results"].items()]
        header = ["DP-GMLVQ setting (identity transfer)", *[f"eps {e}" for e in eps]]
        out = table(header, rows, right=range(1, 1 + len(eps)))
        return out + [f"Non-private L-BFGS GMLVQ on the same splits: {p['nonprivate']:.3f}.", ""]

    return _study(res, spec, body)


def _yale_crops(res: Results, spec: dict[str, Any]) -> list[str]:
    def body(p: dict[str, Any]) -> list[str]:
        rows = [
            [spec["labels"].get(k, k), "x".join(str(s) for s in r["image_size"]), ms(r["condition"]), ms(r["identity"])]
            for k, r in p["results"].items()
        ]
        return table(["faces", "image", "condition accuracy", "identity accuracy"], rows, right=(2, 3))

    return _study(res, spec, body)
