"""Markdown tables of ``benchmarks/sparse_federated/results/`` (Brinkrolf 2023, Tables 5.2
and 6.1 shape): ``sparse_federated_sparse.json`` and ``sparse_federated_federated.json``.

Standard library only, so that ``benchmarks.report`` can import it without torch.
"""

from __future__ import annotations

from typing import Any

DASH = "—"
SPARSITIES = ("0.5", "0.75", "0.9")
METHODS = {
    "SLGMLVQ": "SparseLGMLVQ (OMP to k features, refit)",
    "LR": "L1 logistic-regression path, first k",
    "RF": "random-forest importances, top k",
}
DATASETS = {"optdigits": "optdigits (64)", "fri": "planted-feature set (50)"}
FEDERATED_SETS = {"segmentation": "Img. Seg.", "optdigits": "optdigits (PCA 30)"}


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    return out + ["| " + " | ".join(row) + " |" for row in rows] + [""]


def _ms(pair: list[float] | None) -> str:
    return DASH if pair is None else f"{pair[0]:.3f} ({pair[1]:.3f})"


def _num(value: float | None) -> str:
    return DASH if value is None else f"{value:.3f}"


def sparse_table(payload: dict[str, Any] | None, targets: dict[str, Any]) -> list[str]:
    """Test accuracy (mean (std) over the folds) at every sparsity, with the FRI targets."""
    if payload is None:
        return ["No stored run.", ""]
    rows = []
    for name, label in DATASETS.items():
        per = payload["results"].get(name)
        if per is None:
            continue
        for method, method_label in METHODS.items():
            row = [f"{label}: {method_label}"]
            for s in SPARSITIES:
                paper = targets.get("sparse_fri", {}).get(method, {}).get(s) if name == "fri" else None
                row += [_ms(per[method].get(s)), _num(paper)]
            rows.append(row)
    header = ["set: method"] + [h for s in SPARSITIES for h in (f"sparsity {s}", "paper (FRI)")]
    return _table(header, rows)


def federated_table(payload: dict[str, Any] | None, targets: dict[str, Any]) -> list[str]:
    """Macro F1 of the merged model, the best node and the pooled model, both scenarios."""
    if payload is None:
        return ["No stored run.", ""]
    paper = targets.get("federated_segmentation", {})
    rows = []
    for name, label in FEDERATED_SETS.items():
        res = payload["results"].get(name)
        if res is None:
            continue
        for kind in ("GMLVQ", "LGMLVQ"):
            on_seg = name == "segmentation"
            pair = paper.get(kind) if on_seg else None
            rows.append(
                [
                    f"{label}: {kind}",
                    _ms(res.get(f"{kind} 1")),
                    _num(pair[0] if pair else None),
                    _ms(res.get(f"{kind} 1 best node")),
                    _ms(res.get(f"{kind} 2")),
                    _num(pair[1] if pair else None),
                    _ms(res.get(f"{kind} 2 best node")),
                    _ms(res.get(f"{kind} vanilla")),
                    _num(paper.get(f"{kind} vanilla") if on_seg else None),
                ]
            )
    header = [
        "set: model",
        "scenario 1 merged",
        "paper",
        "best node",
        "scenario 2 merged",
        "paper",
        "best node",
        "pooled",
        "paper",
    ]
    return _table(header, rows)


def private_table(payload: dict[str, Any] | None) -> list[str]:
    """Private nodes (scenario 1, Img. Seg.): merged and mean-node macro F1 against
    epsilon, one column pair per node recipe."""
    if payload is None:
        return ["No stored run.", ""]
    seg = payload["results"].get("segmentation", {})
    merged = [k for k in seg if k.startswith("DP-GMLVQ") and " eps=" in k and not k.endswith("node")]
    recipes = list(dict.fromkeys(k.rsplit(" eps=", 1)[0] for k in merged))
    epsilons = sorted({k.rsplit(" eps=", 1)[1] for k in merged}, key=float)
    rows = []
    for eps in epsilons:
        row = [eps]
        for recipe in recipes:
            row += [_ms(seg.get(f"{recipe} eps={eps}")), _ms(seg.get(f"{recipe} eps={eps} mean node"))]
        rows.append(row)
    header = ["epsilon per node"] + [h for r in recipes for h in (f"{r}: merged", f"{r}: mean node")]
    return _table(header, rows)


def processes_lines(payload: dict[str, Any] | None) -> list[str]:
    """The nodes-as-processes check of the first fold."""
    check = None if payload is None else payload["results"].get("processes")
    if check is None:
        return []
    verdict = "equals" if check["merged_equal_to_simulation"] else "**differs from**"
    slowest = check["slowest_node_s"]
    return [
        f"Nodes as processes (first Img. Seg. fold, scenario 1, GMLVQ): {check['processes']} processes "
        f"(`launch_federated`, gloo) give a merged model that {verdict} the single-process simulation's, "
        f"bit for bit; {check['processes_s']:.1f} s including process start against {check['simulation_s']:.1f} s "
        f"simulated (slowest node: fit {slowest['fit']:.2f} s, exchange {slowest['exchange']:.2f} s, "
        f"merge {slowest['merge']:.3f} s); each node sent a release of about "
        f"{max(check['release_bytes']) / 1000:.1f} KB.",
        "",
    ]
