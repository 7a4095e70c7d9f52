"""Renders ``benchmarks/llp/RESULTS.md`` from the stored results (``python -m benchmarks.report``)."""

from __future__ import annotations

from typing import Any

from benchmarks.reporting import Results, bullets, figure, header, met_mark, num, source, table


def render(res: Results, t: dict[str, Any]) -> list[str]:
    p = res.get("llp_accuracy.json")
    out = header(t) + bullets(t["notes"]) + [t["paper_values"], ""]
    if p is None:
        return out + ["No stored result.", ""]
    four = p["results"]["four_nodes"]
    sweep = four["epsilon_sweep"]
    eps = list(sweep["pllp"])
    out += [f"### Four nodes, b = {sweep['b']}, k = {sweep['k']}: accuracy against epsilon", ""]
    rows = [
        [t["variants"].get(v, v), *[num(sweep[v][e]["accuracy"]) for e in eps]] for v in t["variants"] if v in sweep
    ]
    out += table(["variant", *[f"eps {e}" for e in eps]], rows, right=range(1, 1 + len(eps)))
    llp, knn, chance = sweep["llp"], four["knn"], four["chance"]
    out += [
        f"Non-private LLP {llp['accuracy']:.3f} (the node's own model alone {llp['own_accuracy']:.3f}); centralised "
        f"kNN (k = {knn['k']}, all labels) {knn['accuracy']:.3f}; majority-class share {chance['majority_share']:.3f}, "
        f"uniform {chance['uniform']:.3f}.",
        "",
    ]
    out += _llp_targets(p, t)
    out += _llp_bag(four)
    out += _llp_sweeps(four)
    out += _llp_network(p, t)
    out += figure(res.folder, "llp_accuracy.png", "LLP accuracy against epsilon")
    return out


def _llp_bag(four: dict[str, Any]) -> list[str]:
    """The bag learner (``LLPConfig(learner="bag")``) beside the k-means learner and kNN."""
    bag = four.get("bag_learner")
    if not bag:
        return []
    labels = {
        "bag_own": "bag learner, own proportions",
        "bag_all": "bag learner, own + neighbours' proportions",
        "bag_released": "bag learner, own noisy release only (label-DP)",
    }
    out = ["### The bag learner against b and epsilon (four nodes)", ""]
    kmeans = four.get("batch_sweep", {}).get("llp", {})
    sizes = list(next(v for k, v in bag.items() if k in labels)["batch_sweep"])
    rows = [["k-means LLP (Sachweh, Boiar & Liebig 2021)", *[num(kmeans.get(b, {}).get("accuracy")) for b in sizes]]]
    rows += [[labels[k], *[num(bag[k]["batch_sweep"][b]["accuracy"]) for b in sizes]] for k in labels if k in bag]
    out += table(["non-private, accuracy at b", *sizes], rows, right=range(1, 1 + len(sizes)))
    eps = list(next(v for k, v in bag.items() if k in labels)["epsilon_sweep"])
    rows = [[labels[k], *[num(bag[k]["epsilon_sweep"][e]["accuracy"]) for e in eps]] for k in labels if k in bag]
    out += table(
        [f"private, accuracy at b = {bag['epsilon_sweep_b']}, epsilon", *eps], rows, right=range(1, 1 + len(eps))
    )
    lines = []
    for key, label in labels.items():
        gap = four["targets"].get(f"{key}_closes_half_the_gap_b{bag['epsilon_sweep_b']}")
        within = four["targets"].get(f"{key}_pllp_eps0.1_within_4_points")
        if gap:
            lines.append(
                f"{label}: closes {gap['gap_closed']:.0%} of the gap between k-means LLP ({gap['kmeans_llp']:.3f}) and "
                f"kNN ({gap['knn']:.3f}) at b = {bag['epsilon_sweep_b']} (target: half; "
                + ("met" if gap["met"] else "not met")
                + ")"
                + (
                    f"; private at epsilon 0.1: {within['difference_points']:.1f} points below (target: within 4; "
                    + ("met" if within["met"] else "not met")
                    + ")"
                    if within
                    else ""
                )
            )
    out += bullets(lines)
    out += [
        f"{bag['seeds']} seed(s) per configuration and fold, {bag['epochs']} full-batch Adam steps, two hidden "
        f"layers of {bag['hidden']}. With the own proportions only (exact: the node's labels never leave it) the "
        "bag learner reads no release, so its private run trains the very same model; the releases and ledgers "
        "are those of the k-means learner. Reading the neighbours' proportions as well lowers the accuracy: they "
        "describe other detectors."
        + (
            " The label-DP learner fits the node's own model to its own noisy release alone (unbiased estimator, "
            "cross-entropy bag loss linear in the proportions, so the noise averages out over the bags): it is "
            "post-processing of that release, so the model itself is label-DP at the release's epsilon."
            if "bag_released" in bag
            else ""
        ),
        "",
    ]
    return out


def _llp_targets(p: dict[str, Any], t: dict[str, Any]) -> list[str]:
    four = p["results"]["four_nodes"]
    sweep, shape = four["epsilon_sweep"], four["targets"]["paper_shape_by_variant"]
    points = t["targets"]["within_points_at_0.1"]
    rows = []
    for v, flags in shape.items():
        diff = 100 * (sweep["llp"]["accuracy"] - sweep[v]["0.1"]["accuracy"])
        rows.append(
            [
                t["variants"].get(v, v),
                f"{diff:.1f} points: " + ("yes" if flags["within_4_points_at_0.1"] else "no"),
                f"{sweep[v]['0.01']['accuracy']:.3f}: " + ("yes" if flags["collapse_at_0.01"] else "no"),
            ]
        )
    head = ["variant", f"within {points} points of LLP at eps 0.1", "collapse towards chance at eps 0.01"]
    return (
        ["### The shape of Sachweh et al. (2021)", ""] + source(t["targets"]["source"], paper=False) + table(head, rows)
    )


def _llp_sweeps(four: dict[str, Any]) -> list[str]:
    out = []
    for key, name in (("batch_sweep", "b"), ("cluster_sweep", "k")):
        s = four[key]
        fixed = f"k = {s['k']}" if "k" in s else f"b = {s['b']}"
        out += [f"### Sweep of {name} ({fixed}; private at epsilon {s['epsilon']:g})", ""]
        values = list(s["llp"])
        rows = [
            [label, *[num(s[v][x]["accuracy"]) for x in values]]
            for v, label in (("llp", "LLP"), ("pllp", "private LLP"))
        ]
        out += table([name, *values], rows, right=range(1, 1 + len(values)))
    return out


def _llp_network(p: dict[str, Any], t: dict[str, Any]) -> list[str]:
    net = p["results"]["network"]
    sweep = net["epsilon_sweep"]
    eps = list(sweep["pllp"])
    out = [
        f"### Whole network ({net['n_nodes']} nodes, {len(net['fold_ids'])} of {net['of_folds']} folds, "
        f"{net['seeds']} seed; b = {sweep['b']}, k = {sweep['k']})",
        "",
    ]
    rows = [["LLP (non-private)", *[num(sweep["llp"]["accuracy"])] * len(eps)]]
    rows.append(["private LLP", *[num(sweep["pllp"][e]["accuracy"]) for e in eps]])
    out += table(["", *[f"eps {e}" for e in eps]], rows, right=range(1, 1 + len(eps)))
    knn = net["knn"]
    out += [
        f"Own model alone {sweep['llp']['own_accuracy']:.3f}; kNN {knn['accuracy']:.3f} (on {knn['test_fraction']:g} "
        "of the test windows).",
        "",
    ]
    target = t["targets"]["network_training_seconds"]
    seconds = p["headline"]["whole_network_seconds"]
    row = ["training the whole network (one run, fold 0)", f"{seconds:.1f} s", f"{target['op']} {target['value']:g} s"]
    return out + table(["quantity", "measured", "target", ""], [[*row, met_mark(seconds, target)]], right=(1, 2))
