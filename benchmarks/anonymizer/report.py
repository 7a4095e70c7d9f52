"""Renders ``benchmarks/anonymizer/RESULTS.md`` from the stored results (``python -m benchmarks.report``)."""

from __future__ import annotations

from typing import Any

from benchmarks.reporting import Results, bullets, code, figure, header, met_mark, ms, num, source, table


def render(res: Results, t: dict[str, Any]) -> list[str]:
    p = res.get("anonymizer_tradeoff.json")
    out = header(t) + bullets(t["notes"]) + [t["paper_values"], ""]
    if p is None:
        return out + ["No stored result.", ""]
    keys = ("regular_accuracy", "fresh_regular_accuracy", "attacker_accuracy")
    names = ("regular branch", "fresh regular", "attacker")
    for ds, by_mode in p["results"].items():
        first = next(iter(next(iter(by_mode.values())).values()))
        floor = p["data"][ds].get("best_private_accuracy_given_regular")
        extra = f", floor given the regular label {floor:.4g}" if floor is not None else ""
        out += [f"### {t['datasets'].get(ds, ds)} (mean of the seeds; chance {first['chance'][0]:.3f}{extra})", ""]
        lambdas = list(next(iter(by_mode.values())))
        rows = [[lam, *[num(by_mode[m][lam][k][0]) for m in by_mode for k in keys]] for lam in lambdas]
        head = ["lambda", *[f"{t['modes'].get(m, m)}: {n}" for m in by_mode for n in names]]
        out += table(head, rows, right=range(1, len(head)))
        out += _lambda0_line(by_mode, t.get("regular_chance", {}).get(ds))
    out += figure(res.folder, "anonymizer_tradeoff.png", "Regular accuracy against attacker accuracy, by lambda")
    return out + _anonymizer_headline(p, t) + _render_motion(res, t["motion"])


def _render_motion(res: Results, t: dict[str, Any]) -> list[str]:
    """The motion runner (UCI HAPT: activity kept, volunteer hidden): its curves with the
    spread over the splits, the DP-SGD runs, lambda 0 beside chance and the headline."""
    out = [f"### {t['title']}", "", t["intro"], ""] + code(t["regenerate"]) + bullets(t["notes"])
    p = res.get("anonymizer_motion.json")
    if p is None:
        return out + ["No stored result.", ""]
    head = ["lambda", "activity (branch)", "activity (fresh LR)", "strongest attacker", "attackers that won"]
    for encoder, by_mode in p["results"]["plain"].items():
        for mode, curve in by_mode.items():
            out += [f"#### {t['encoders'].get(encoder, encoder)}, {mode} (mean (std) over the splits)", ""]
            rows = [
                [
                    lam,
                    ms(c["activity_accuracy"]),
                    ms(c["fresh_activity_accuracy"]),
                    ms(c["attacker_accuracy"]),
                    ", ".join(sorted(set(c["strongest_attackers"]))),
                ]
                for lam, c in curve.items()
            ]
            out += table(head, rows, right=range(1, 4))
    if p["results"].get("dp"):
        out += [f"#### DP-SGD, {t['encoders']['signal_cnn']}, toggle (mean (std) over the splits)", ""]
        rows = [
            [eps, lam, ms(c["activity_accuracy"]), ms(c["attacker_accuracy"]), num(c["epsilon_spent"])]
            for eps, curve in p["results"]["dp"].items()
            for lam, c in curve.items()
        ]
        out += table(
            ["epsilon", "lambda", "activity (branch)", "strongest attacker", "epsilon spent"], rows, right=range(2, 5)
        )
    h = p["headline"]
    zero = h["motion_lambda0"]
    out += [
        f"At lambda 0 ({zero['encoder']}, {zero['mode']}, no adversary) the activity reaches "
        f"{zero['activity_accuracy']:.3f} against chance {zero['activity_chance']:.3f} (the largest activity share of "
        f"the test windows); the volunteer {zero['attacker_accuracy']:.3f} (strongest fresh attacker) against chance "
        f"{zero['identity_chance']:.3f} (the largest volunteer share; uniform 1/30 = 0.033).",
        "",
    ]
    out += figure(res.folder, "anonymizer_motion.png", "Activity accuracy against the strongest attacker, by lambda")
    rows = []
    for curve, b in h["motion_best_by_curve"].items():
        measured = (
            f"lambda {b['lambda']:g}: attacker {b['attacker_accuracy']:.3f} ({b['attacker_accuracy_std']:.3f}), "
            f"activity {b['activity_accuracy']:.3f} (lambda 0: {b['activity_accuracy_lambda0']:.3f})"
        )
        mark = " (headline)" if curve == f"{h['motion_best']['encoder']} {h['motion_best']['mode']}" else ""
        rows.append(
            [
                f"{curve}{mark}",
                measured,
                f"attacker <= {b['target_attacker']:.3f}",
                "met" if b["met"] else "**not met**",
            ]
        )
    for key in sorted(k for k in h if k.startswith("motion_dp_eps")):
        b = h[key]
        measured = (
            f"lambda {b['lambda']:g}: attacker {b['attacker_accuracy']:.3f}, activity {b['activity_accuracy']:.3f} "
            f"(DP at lambda 0: {b['activity_accuracy_lambda0']:.3f}, attacker {b['attacker_accuracy_lambda0']:.3f})"
        )
        rows.append(
            [
                f"DP-SGD, epsilon {b['epsilon']:g}",
                measured,
                "attacker <= 0.067, activity within 3 points",
                "met" if b["met"] else "**not met**",
            ]
        )
    out += ["#### Headline (motion)", ""] + source(t["source"], paper=False)
    return out + table(["curve", "measured (mean over the splits)", "target", ""], rows)


def _lambda0_line(by_mode: dict[str, Any], regular_chance: dict[str, Any] | None) -> list[str]:
    """Each task's accuracy at lambda 0 (no adversary) beside its chance level: how learnable
    the two labels are before any anonymisation."""
    zero = by_mode.get("toggle", {}).get("0")
    if zero is None or regular_chance is None:
        return []
    return [
        f"At lambda 0 (toggle, no adversary) the regular task reaches {zero['regular_accuracy'][0]:.3f} (branch) / "
        f"{zero['fresh_regular_accuracy'][0]:.3f} (fresh classifiers) against chance {regular_chance['value']:.3f} "
        f"({regular_chance['how']}); the private task {zero['attacker_accuracy'][0]:.3f} (best fresh attacker) "
        f"against chance {zero['chance'][0]:.3f} (the largest identity share of the held-out halves).",
        "",
    ]


def _anonymizer_headline(p: dict[str, Any], t: dict[str, Any]) -> list[str]:
    h, spec = p["headline"], t["headline"]
    rows = []
    labels = {
        "yale_best": "Yale, toggle: lowest attacker with the regular branch within 10 points of lambda 0",
        "yale_best_fresh_regular": "the same with fresh regular classifiers",
        "yale_best_simultaneous": "Yale, simultaneous, the same rule",
    }
    for key, label in labels.items():
        if key not in h:
            continue
        b = h[key]
        measured = (
            f"lambda {b['lambda']:g}: attacker {b['attacker_accuracy']:.3f}, regular {b['regular_accuracy']:.3f} "
            f"(lambda 0: {b['regular_accuracy_lambda0']:.3f})"
        )
        gap = b["attacker_accuracy"] - b["target_attacker"]
        if key in spec.get("comparison_only", ()):
            status = "meets it" if gap <= 0 else f"misses it by {gap:.3f}"
            rows.append([label, measured, f"(comparison) attacker <= {b['target_attacker']:.3f}", status])
        else:
            rows.append(
                [label, measured, f"attacker <= {b['target_attacker']:.3f}", "met" if gap <= 0 else "**not met**"]
            )
    target = spec["epoch_ratio_target"]
    for key, mode in (("epoch_time_ratio", "toggle"), ("epoch_time_ratio_simultaneous", "simultaneous")):
        if key in h:
            value = h[key]
            label = f"adversarial epoch / plain epoch (Yale, {mode})"
            rows.append([label, f"{value:.2f}", f"{target['op']} {target['value']:g}", met_mark(value, target)])
    return (
        ["### Headline", ""] + source(spec["source"], paper=False) + table(["quantity", "measured", "target", ""], rows)
    )
