"""Renders ``benchmarks/lvq/RESULTS.md`` from the stored results (``python -m benchmarks.report``)."""

from __future__ import annotations

from typing import Any

from benchmarks.reporting import DASH, Results, bold, bullets, figure, header, met, ms, num, source, table


def render(res: Results, t: dict[str, Any]) -> list[str]:
    spec = t["table_2_2"]
    runs = [(name, p) for name, p in res.matching("") if p.get("benchmark") == "baseline_accuracy"]
    out = header(t) + ["### Table 2.2: accuracy, one prototype per class", ""] + source(spec["source"])
    out += bullets(t["notes"])
    rows = []
    for ds, dspec in spec["datasets"].items():
        for model, target in spec["targets"][ds].items():
            found = [
                (name, key, p)
                for name, p in runs
                for key in p["results"]
                if key.split(" ")[0] == ds and model in p["results"][key]
            ]
            label = f'{dspec["label"]} ("{dspec["paper_name"]}")'
            if not found:
                rows.append([label, model, ms(target), DASH, DASH, "no stored run"])
            for name, key, p in found:
                mean, std = p["results"][key][model]
                run = f"{key}, {p.get('transfer', 'identity')} transfer (`{name}`)"
                rows.append(
                    [
                        label,
                        model,
                        ms(target),
                        bold(ms([mean, std]), mean >= target[0]),
                        f"{mean - target[0]:+.3f}",
                        run,
                    ]
                )
    out += table(["data set", "model", "Brinkrolf (2023)", "ours", "diff", "run"], rows)
    out += [f"Not reproduced: {spec['not_reproduced']} **Bold**: at least the paper's mean accuracy.", ""]
    return out + _fit_speed(res, t)


def _stored_section(
    res: Results, t: dict[str, Any], key: str, title: str
) -> tuple[dict[str, Any], list[str], dict[str, Any] | None]:
    """``(spec, lines, payload)`` of a section on ``results/<key>.json``: the heading and the
    spec's notes, and the stored run (None, with a line that says how to make it)."""
    spec = t[key]
    out = [f"### {title}", ""] + bullets(spec["notes"])
    p = res.get(f"{key}.json")
    if p is None:
        out += [f"No stored run yet: `{spec['command']}`.", ""]
    return spec, out, p


def _fit_speed(res: Results, t: dict[str, Any]) -> list[str]:
    """Non-private fit speed: time to accuracy of the L-BFGS settings, warm starts and the sklvq peer."""
    spec, out, p = _stored_section(res, t, "fit_speed", "Time to accuracy: L-BFGS stopping rule and dtype")
    if p is None:
        return out
    head, bounds = p["headline"], p.get("target_bounds", {})
    rows = []
    for key, target in spec["targets"].items():
        value, bound = head.get(key), bounds.get(key, target.get("value"))
        digits = 3 if key.endswith("_fit_s") else 4
        shown = num(value, digits)
        if "reference" in target:
            goal = f"{target['op']} {target['reference']} setting ({num(bound, 4)})"
        else:
            goal = f"{target['op']} {target['value']:g}"
        rows.append(
            [target["label"], bold(shown, None not in (value, bound) and met(value, target["op"], bound)), goal]
        )
    for key, label in spec["ratios"].items():
        rows.append([label, DASH if head.get(key) is None else f"{head[key]:.2f}x", DASH])
    out += ["Headline (the `default` setting; fit time: median seconds per fold):", ""]
    out += source(spec["source"], paper=False) + table(["quantity", "measured", "target"], rows, right=(1,))
    out += ["**Bold**: target met.", ""]
    rows = []
    for ds, by_model in p["results"].items():
        for model, by_setting in by_model.items():
            base = by_setting.get("default", {}).get("fit_s_median")
            for setting, cell in by_setting.items():
                rel = DASH if not base else f"{cell['fit_s_median'] / base:.2f}x"
                rows.append(
                    [
                        ds,
                        model,
                        f"`{setting}`",
                        ms(cell["acc"], 4),
                        f"{cell['fit_s_median']:.3f}",
                        f"{cell['n_iter_median']:.0f}",
                        rel,
                    ]
                )
    head_row = [
        "data set",
        "model",
        "setting",
        "test accuracy",
        "fit (s, median)",
        "L-BFGS iterations",
        "time / default",
    ]
    out += table(head_row, rows, right=range(3, 7))
    out += figure(res.folder, "fit_speed.png", "Test accuracy against fit time, first fold, one panel per data set")
    return (
        out
        + _fit_speed_warm(p)
        + _fit_speed_peer(p)
        + _fit_speed_load(p)
        + _stopping_calibration(res, t)
        + _fit_profile(res, t)
        + _dp_epoch(res, t)
    )


def _fit_speed_warm(p: dict[str, Any]) -> list[str]:
    rows = []
    for ds, by_model in p.get("warm_start", {}).items():
        for model, w in by_model.items():
            rel = DASH if w["warm_over_cold"] is None else f"{w['warm_over_cold']:.2f}x"
            rows.append(
                [
                    ds,
                    model,
                    ", ".join(map(str, w["folds"])),
                    ms(w["cold"]["acc"], 4),
                    ms(w["warm"]["acc"], 4),
                    f"{w['cold']['fit_s_median']:.3f}",
                    f"{w['warm']['fit_s_median']:.3f}",
                    rel,
                ]
            )
    if not rows:
        return []
    out = ["#### Cross-validation with warm starts (`default` setting)", ""]
    out += [
        "Fold k+1 starts from fold k's model (`warm_start=True`, one estimator), beside cold fits of the same folds.",
        "",
    ]
    head = [
        "data set",
        "model",
        "folds",
        "cold accuracy",
        "warm accuracy",
        "cold fit (s)",
        "warm fit (s)",
        "warm / cold",
    ]
    return out + table(head, rows, right=range(3, 8))


def _fit_speed_peer(p: dict[str, Any]) -> list[str]:
    peer = p.get("peer", {})
    if "results" not in peer:
        return [f"Peer not run: {peer.get('skipped', 'no entry')}.", ""]
    rows = []
    for ds, by_model in peer["results"].items():
        for model, c in by_model.items():
            rel = DASH if c["sklvq_over_ours"] is None else f"{c['sklvq_over_ours']:.1f}x"
            rows.append(
                [
                    ds,
                    model,
                    f"{c['acc']:.4f}",
                    f"{c['fit_s']:.3f}",
                    f"{c['ours_acc']:.4f}",
                    f"{c['ours_fit_s']:.3f}",
                    rel,
                ]
            )
    out = [f"#### Peer: {peer['name']}, {peer['solver']}, first fold", ""]
    head = ["data set", "model", "sklvq accuracy", "sklvq fit (s)", "ours accuracy", "ours fit (s)", "sklvq / ours"]
    return out + table(head, rows, right=range(2, 7))


def _fit_speed_load(p: dict[str, Any]) -> list[str]:
    load = p.get("load_avg_1min") or {}
    return [
        f"Torch threads: {p.get('threads', DASH)}; 1-minute load average {num(load.get('start'), 2)} at the start, "
        f"{num(load.get('end'), 2)} at the end (a load well above the thread count inflates the times).",
        "",
    ]


def _fit_profile(res: Results, t: dict[str, Any]) -> list[str]:
    """Non-private fit speed: where an L-BFGS fit's time goes, per model and dtype."""
    spec, out, p = _stored_section(res, t, "fit_profile", "Where the time goes: a profile per model")
    if p is None:
        return out
    compiled = bool(p.get("compile"))
    rows = []
    for ds, by_model in p["results"].items():
        for model, by_dtype in by_model.items():
            for dtype, c in by_dtype.items():
                d, o = c["default"], c["lbfgs_rule"]
                row = [ds, model, dtype] + [f"{c[k]:.2f}" for k in ("distances_ms", "cost_ms", "gradient_ms")]
                row += [f"{c['closed_eval_ms']:.2f}", f"{c['autograd_eval_ms']:.2f}"]
                if compiled:
                    row += [f"{c['compiled_eval_ms']:.2f} ({c['compile_s']:.0f} s)"]
                row += [f"{d['n_iter']} / {d['evaluations']}", f"{d['fit_s']:.2f}", f"{d['overhead_per_iter_ms']:.2f}"]
                row += [f"{o['n_iter']} / {o['evaluations']}", f"{o['fit_s']:.2f}"]
                rows.append(row)
    head = ["data set", "model", "dtype", "distances (ms)", "cost (ms)", "gradient (ms)", "evaluation (ms)"]
    head += ["autograd evaluation (ms)"] + (["torch.compile (ms, compile time)"] if compiled else [])
    head += ["iterations / evaluations", "fit (s)", "overhead per iteration (ms)", "old rule: iter. / eval.", "fit (s)"]
    out += table(head, rows, right=range(3, len(head)))
    return out + [f"Torch threads: {p.get('threads', DASH)}. Runner: `{spec['source']}`.", ""]


def _stopping_calibration(res: Results, t: dict[str, Any]) -> list[str]:
    """Non-private fit speed: the relative-cost rule's tol and window against validation accuracy."""
    title = "How the stopping rule was chosen (validation splits only)"
    spec, out, p = _stored_section(res, t, "stopping_calibration", title)
    if p is None:
        return out
    rows = []
    for key, cell in p["results"].items():
        rule, tol, window = (part.split("=")[1] for part in key.split(","))
        marks = [m for m, hit in (("selected", key == p["selected"]), ("default", key == p["default"])) if hit]
        row = [rule, tol, window, f"{cell['worst_pair_loss']:+.5f}", f"{cell['worst_loss']:+.4f}"]
        row += [f"{cell['time_fraction']:.2f}", ", ".join(marks)]
        rows.append([bold(v, key == p["default"]) for v in row])
    head = ["rule", "tol", "window", "worst pair loss (seed mean)", "worst single loss", "time share", ""]
    out += table(head, rows, right=(3, 4, 5))
    seeds = ", ".join(str(s) for s in p.get("seeds", []))
    return out + [
        f"**Bold**: the estimators' default. Seeds: {seeds}. Selection rule: the fastest candidate whose "
        f"seed-averaged validation loss is at most {p['max_pair_loss']:g} for every (data set, model) pair "
        "(fixed before the first five-seed run); where none is, the smallest worst pair loss, the faster on a "
        "tie (added after that run found none within the bound).",
        "",
    ]


def _dp_epoch(res: Results, t: dict[str, Any]) -> list[str]:
    """Fit speed: DP-SGD seconds per epoch before and after the shared kernels."""
    spec = t["dp_epoch_time"]
    out = ["### DP-SGD epoch time before and after", ""] + bullets(spec["notes"])
    before, after = res.get("dp_epoch_time_before.json"), res.get("dp_epoch_time_after.json")
    if before is None or after is None:
        return out + [f"No stored pair of runs yet: `{spec['command']}`.", ""]
    rows = []
    for ds, by_model in after["results"].items():
        for model, by_rate in by_model.items():
            for rate, seconds in by_rate.items():
                old = before["results"].get(ds, {}).get(model, {}).get(rate)
                ratio = DASH if not old or not seconds else f"{old / seconds:.2f}x"
                rows.append([ds, model, rate, num(old, 3), f"{seconds:.3f}", ratio])
    head = ["data set", "model", "sampling rate", "before (s / epoch)", "after (s / epoch)", "speed-up"]
    return out + table(head, rows, right=range(3, 6))
