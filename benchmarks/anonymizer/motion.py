"""The anonymizer on motion data: activity kept, volunteer hidden (UCI HAPT).

Feutry et al. (2018) train an encoder whose representation serves a regular task while a
private label cannot be read from it. Here the records are the 2.56 s windows of the
UCI HAPT smartphone signals (Reyes-Ortiz et al. 2016; ``load_hapt_windows``): regular
label the activity (6 classes), private label the volunteer (30 identities, uniform
chance 1/30). The splits (``hapt_identity_splits``) keep each recording segment on one
side, since windows of a segment overlap by half (Dehghani et al. 2019), with every
volunteer on both sides: the attacker's task is closed-set identification.

For every encoder, mode (toggle, simultaneous), lambda and split:

1. train the anonymizer on the training windows (``fit_anonymizer``);
2. encode the training and test windows with the frozen encoder;
3. report on the test windows
   * ``activity_accuracy``: the released activity branch,
   * ``fresh_activity_accuracy``: a logistic regression trained on the training windows'
     representations (what the representation holds for the activity),
   * ``attacker_accuracy``: the strongest of eight fresh attackers, logistic regression,
     an MLP, 1-NN and a small CNN on the representation (``ALL_ATTACKERS``), each
     *enrolled* (trained on the training windows' representations with their
     volunteers, scored on the test windows) and *held out* (2-fold cross-fitted on the
     test windows' representations, the folds split by segment),
   * ``chance``: the largest volunteer share of the test windows (about 1/30).

Encoders: ``signal_cnn`` (``Anonymizer.signal_cnn``, the raw 6 x 128 windows scaled by
the sensors' public ranges, +-2 g and +-5 rad/s, and clamped to [-1, 1]) and
``stats_mlp`` (``Anonymizer.mlp`` on the 142 per-window statistics of
``hapt_window_features``, standardised with the training windows' mean and deviation).
A representation of 8 units for both.

The DP-SGD variant (``fit_dp_anonymizer``, signal CNN only, since its input scaling uses
no data) is run at epsilon 1 and 8 (delta 1e-5) at lambda 0 and ``DP_LAMBDA``. Its
guarantee is per *window*: a volunteer contributes hundreds of windows, so DP-SGD does
not hide who took part; hiding the volunteer in the representation is the adversarial
objective's job.

The settings (``SETTINGS``, the lambdas, ``DP_LAMBDA``) were chosen on development
splits (``hapt_identity_splits(random_state=0)``, first split); the benchmark draws its
splits with ``random_state = 1 + --seed``.

Usage::

    python -m benchmarks.anonymizer.motion --data-dir ../shared/data --jobs 2
    python -m benchmarks.anonymizer.motion --data-dir ../shared/data --quick

``--quick``: 2 splits, lambdas 0, 10 and 20, a quarter of the epochs, every headline key
on that setting; its figure goes to ``anonymizer_motion_quick.png``.

Headline ``motion_best``: among the (encoder, mode) curves, the lambda with the lowest
mean attacker accuracy whose mean activity accuracy is within 3 points of that curve's
lambda 0 (target: attacker accuracy at most 2 / 30); ``motion_dp_eps8`` /
``motion_dp_eps1``: the DP run at ``DP_LAMBDA`` beside the DP run at lambda 0. Ends with
a figure (``--figure``; ``""``: none) and one JSON line ``{"benchmark":
"anonymizer_motion", "results": {...}, "headline": {...}}``.
"""

from __future__ import annotations

import argparse
import time
import warnings
from functools import partial
from pathlib import Path

import numpy as np
import torch

from benchmarks.anonymizer.tradeoff import set_up_process
from benchmarks.common import emit_json, resolve_data_dir, run_metadata, run_tasks

BENCHMARK = "anonymizer_motion"
LAMBDAS = (0.0, 5.0, 10.0, 20.0)
MODES = ("toggle", "simultaneous")
ENCODERS = ("signal_cnn", "stats_mlp")
DP_EPSILONS = (1.0, 8.0)
DP_DELTA = 1e-5
DP_LAMBDA = 5.0
#: The largest drop of activity accuracy from lambda 0 that still counts as kept.
ACTIVITY_TOLERANCE = 0.03
#: The public ranges of the sensors (accelerometer in g, gyroscope in rad/s).
SENSOR_RANGE = (2.0, 5.0)

_FIT = {
    "pretrain_regular_epochs": 4,
    "pretrain_private_epochs": 4,
    "adversarial_epochs": 40,
    "batch_size": 128,
    "encoder_lr": 0.01,
    "toggle_steps": 20,
}
SETTINGS = {
    "signal_cnn": {"architecture": {"representation_dim": 8}, "fit": dict(_FIT)},
    "stats_mlp": {
        "architecture": {"representation_dim": 8, "encoder_hidden": (256,), "head_hidden": (64,)},
        "fit": dict(_FIT),
    },
    "dp": {
        "architecture": {"representation_dim": 8},
        # DP-SGD's clipped, noisy steps need larger learning rates (0.01 / 0.01: activity 0.59 at
        # epsilon 8, lambda 0 on the development split; 0.3 / 0.1: 0.82)
        "fit": {
            **{k: v for k, v in _FIT.items() if k != "batch_size"},
            "adversarial_epochs": 20,
            "lr": 0.3,
            "encoder_lr": 0.1,
        },
        "sampling_rate": 256 / 7300,  # about 256 windows per step (the training split holds about 7300)
        "max_grad_norm": 1.0,
    },
}

_WINDOWS: dict[str, dict] = {}


def scaled_signals(signals: np.ndarray) -> torch.Tensor:
    """``(m, 128, 6)`` windows -> ``(m, 6, 128)`` float32, each sensor divided by its
    public range (``SENSOR_RANGE``) and clamped to [-1, 1]: no statistic of the data."""
    x = torch.as_tensor(np.ascontiguousarray(signals.transpose(0, 2, 1)), dtype=torch.float32)
    x[:, :3] /= SENSOR_RANGE[0]
    x[:, 3:] /= SENSOR_RANGE[1]
    return x.clamp(-1.0, 1.0)


def load_windows(data_dir: str) -> dict:
    """The HAPT windows of ``data_dir`` (cached per process): ``signals (m, 6, 128)``,
    ``features (m, 142)``, ``activity`` (0..5), ``volunteer`` (0..V-1 in the order of
    the volunteer numbers), ``segment``, the class counts, and the ``HAPTWindows``. The
    counts (6 activities, 30 volunteers in the real file) are published with the data
    set; the DP runs take them as public."""
    if data_dir not in _WINDOWS:
        from dp_proto.data import HAPT_ACTIVITIES, load_hapt_windows

        windows = load_hapt_windows(data_dir, signals=True)
        volunteers, volunteer = np.unique(windows.subject, return_inverse=True)
        _WINDOWS[data_dir] = {
            "num_activities": len(HAPT_ACTIVITIES),
            "num_volunteers": len(volunteers),
            "windows": windows,
            "signals": scaled_signals(windows.signals),
            "features": windows.features.astype(np.float32),
            "activity": torch.as_tensor(windows.labels),
            "volunteer": torch.as_tensor(volunteer),
            "segment": windows.segment,
        }
    return _WINDOWS[data_dir]


def splits(data_dir: str, n_splits: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The benchmark's train/test splits (``random_state = 1 + seed``; 0 was development)."""
    from dp_proto.data import hapt_identity_splits

    return hapt_identity_splits(load_windows(data_dir)["windows"], n_splits, random_state=1 + seed)


def inputs(data: dict, encoder: str, train: np.ndarray) -> torch.Tensor:
    """The encoder's input for all windows; the statistics standardised on ``train``."""
    if encoder == "stats_mlp":
        f = data["features"]
        mean, std = f[train].mean(0), f[train].std(0) + 1e-6
        return torch.as_tensor((f - mean) / std)
    return data["signals"]


def anonymizer_factory(encoder: str, architecture: dict, data: dict):
    from dp_proto.anonymizer import Anonymizer

    classes = (data["num_activities"], data["num_volunteers"])
    if encoder == "stats_mlp":
        return lambda: Anonymizer.mlp(data["features"].shape[1], *classes, **architecture)
    return lambda: Anonymizer.signal_cnn(tuple(data["signals"].shape[1:]), *classes, **architecture)


def evaluate(anonymizer, x: torch.Tensor, data: dict, train: np.ndarray, test: np.ndarray, seed: int) -> dict:
    """Activity and fresh-attacker accuracies on the test windows (module docstring)."""
    from dp_proto.anonymizer.evaluation import (
        ALL_ATTACKERS,
        encode,
        enrolled_attacker_accuracy,
        fresh_attacker_accuracy,
    )

    activity, volunteer = data["activity"], data["volunteer"]
    z_train, z_test = encode(anonymizer.encoder, x[train]), encode(anonymizer.encoder, x[test])
    with torch.no_grad():
        branch = anonymizer.regular_head(z_test).argmax(1)
    fresh_activity = enrolled_attacker_accuracy(
        z_train, activity[train], z_test, activity[test], attackers=("logistic",), seed=seed
    )
    enrolled = enrolled_attacker_accuracy(
        z_train, volunteer[train], z_test, volunteer[test], attackers=ALL_ATTACKERS, seed=seed
    )
    held_out = fresh_attacker_accuracy(
        z_test, volunteer[test], attackers=ALL_ATTACKERS, seed=seed, groups=data["segment"][test]
    )
    by_model = {f"enrolled/{k}": v for k, v in enrolled.accuracies.items()}
    by_model.update({f"held_out/{k}": v for k, v in held_out.accuracies.items()})
    strongest = max(by_model, key=by_model.get)
    shares = np.bincount(activity[test].numpy()) / len(test)
    return {
        "activity_accuracy": float((branch == activity[test]).float().mean()),
        "fresh_activity_accuracy": fresh_activity.accuracy,
        "activity_chance": float(shares.max()),
        "attacker_accuracy": by_model[strongest],
        "strongest_attacker": strongest,
        "attacker_by_model": by_model,
        "chance": enrolled.chance,
    }


def _set_up_process(threads: int) -> None:
    """The trade-off runner's set-up (threads, Lightning's chatter), and Opacus' note on
    its non-secure RNG (the DP runs: fresh noise, not ``secure_mode``)."""
    set_up_process(threads)
    warnings.filterwarnings("ignore", message=".*Secure RNG turned off.*")


def run_task(task: tuple, data_dir: str, settings: dict, n_splits: int, seed: int, threads: int) -> dict:
    """One fit and its evaluation. ``task``: ``("plain", encoder, mode, lam, split)`` or
    ``("dp", "signal_cnn", epsilon, lam, split)``."""
    from dp_proto.lightning.anonymizer import fit_anonymizer
    from dp_proto.lightning.dp_anonymizer import fit_dp_anonymizer

    _set_up_process(threads)
    kind, encoder, mode_or_eps, lam, k = task
    data = load_windows(data_dir)
    train, test = splits(data_dir, n_splits, seed)[k]
    fit_seed = 1000 * seed + k
    x = inputs(data, encoder, train)
    common = {"lam": lam, "seed": fit_seed, "enable_progress_bar": False}
    if kind == "plain":
        s = settings[encoder]
        fit = fit_anonymizer(
            x[train],
            data["activity"][train],
            data["volunteer"][train],
            anonymizer=anonymizer_factory(encoder, s["architecture"], data),
            mode=mode_or_eps,
            **common,
            **s["fit"],
        )
    else:
        s = settings["dp"]
        fit = fit_dp_anonymizer(  # fresh noise: no noise_seed
            x[train],
            data["activity"][train],
            data["volunteer"][train],
            epsilon=mode_or_eps,
            delta=DP_DELTA,
            sampling_rate=s["sampling_rate"],
            max_grad_norm=s["max_grad_norm"],
            num_regular=data["num_activities"],
            num_private=data["num_volunteers"],
            anonymizer=anonymizer_factory(encoder, s["architecture"], data),
            **common,
            **s["fit"],
        )
    result = evaluate(fit.module.anonymizer, x, data, train, test, fit_seed)
    result["epoch_times"] = {phase: float(np.mean(t)) for phase, t in fit.epoch_times.items()}
    if kind == "dp":
        result["epsilon_spent"] = float(fit.ledger.get_epsilon(DP_DELTA))
    return result


def _mean_std(values) -> list[float]:
    values = np.asarray(values, dtype=float)
    return [round(float(values.mean()), 4), round(float(values.std()), 4)]


def summarise(runs: list[dict]) -> dict:
    """Mean and standard deviation over the splits, and the per-split values."""
    keys = ("activity_accuracy", "fresh_activity_accuracy", "activity_chance", "attacker_accuracy", "chance")
    out = {key: _mean_std([r[key] for r in runs]) for key in keys}
    out["attacker_by_model"] = {
        m: round(float(np.mean([r["attacker_by_model"][m] for r in runs])), 4) for m in runs[0]["attacker_by_model"]
    }
    out["strongest_attackers"] = [r["strongest_attacker"] for r in runs]
    out["per_split"] = [[round(r["activity_accuracy"], 4), round(r["attacker_accuracy"], 4)] for r in runs]
    if "epsilon_spent" in runs[0]:
        out["epsilon_spent"] = round(max(r["epsilon_spent"] for r in runs), 4)
    return out


def best_point(curve: dict, target: float, tolerance: float = ACTIVITY_TOLERANCE) -> dict:
    """The lambda of ``curve`` (``{lambda: summary}``) with the lowest mean attacker
    accuracy whose mean activity accuracy is within ``tolerance`` of lambda 0's; ``met``:
    its attacker accuracy is at most ``target``."""
    base = curve["0"]
    kept = [lam for lam, c in curve.items() if c["activity_accuracy"][0] >= base["activity_accuracy"][0] - tolerance]
    lam = min(kept, key=lambda k: (curve[k]["attacker_accuracy"][0], float(k)))
    c = curve[lam]
    return {
        "lambda": float(lam),
        "activity_accuracy": c["activity_accuracy"][0],
        "activity_accuracy_std": c["activity_accuracy"][1],
        "activity_accuracy_lambda0": base["activity_accuracy"][0],
        "attacker_accuracy": c["attacker_accuracy"][0],
        "attacker_accuracy_std": c["attacker_accuracy"][1],
        "attacker_accuracy_lambda0": base["attacker_accuracy"][0],
        "chance": c["chance"][0],
        "target_attacker": round(target, 4),
        "met": bool(c["attacker_accuracy"][0] <= target),
        "splits": len(c["per_split"]),
    }


def headline(results: dict, num_volunteers: int) -> dict:
    """``motion_best`` (and per curve), ``motion_lambda0``, ``motion_dp_eps<e>``; the
    target attacker accuracy is twice the uniform chance, ``2 / num_volunteers``."""
    target = 2 / num_volunteers
    out: dict = {}
    best_by_curve = {
        f"{encoder} {mode}": best_point(curve, target)
        for encoder, by_mode in results["plain"].items()
        for mode, curve in by_mode.items()
    }
    name = min(best_by_curve, key=lambda k: best_by_curve[k]["attacker_accuracy"])
    encoder, mode = name.split()
    out["motion_best"] = {**best_by_curve[name], "encoder": encoder, "mode": mode}
    out["motion_best_by_curve"] = best_by_curve
    base = results["plain"][encoder][mode]["0"]
    out["motion_lambda0"] = {
        "encoder": encoder,
        "mode": mode,
        "activity_accuracy": base["activity_accuracy"][0],
        "activity_chance": base["activity_chance"][0],
        "attacker_accuracy": base["attacker_accuracy"][0],
        "identity_chance": base["chance"][0],
    }
    for eps, curve in results.get("dp", {}).items():
        lam = max(curve, key=float)
        c, zero = curve[lam], curve.get("0")
        out[f"motion_dp_eps{float(eps):g}"] = {
            "epsilon": float(eps),
            "delta": DP_DELTA,
            "lambda": float(lam),
            "activity_accuracy": c["activity_accuracy"][0],
            "activity_accuracy_lambda0": zero["activity_accuracy"][0] if zero else None,
            "attacker_accuracy": c["attacker_accuracy"][0],
            "attacker_accuracy_lambda0": zero["attacker_accuracy"][0] if zero else None,
            "chance": c["chance"][0],
            "met": bool(
                zero is not None
                and c["attacker_accuracy"][0] <= target
                and c["activity_accuracy"][0] >= zero["activity_accuracy"][0] - ACTIVITY_TOLERANCE
            ),
        }
    return out


def plot(results: dict, out: str, target: float) -> None:
    """Activity against attacker accuracy, one panel per encoder (mean +- std over the
    splits, labels: lambda); the DP runs on the signal CNN's panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    encoders = list(results["plain"])
    fig, axes = plt.subplots(1, len(encoders), figsize=(5.4 * len(encoders), 4.2), squeeze=False)
    for ax, encoder in zip(axes[0], encoders, strict=True):
        curves = dict(results["plain"][encoder])
        if encoder == "signal_cnn":
            curves.update({f"DP-SGD eps {float(e):g}": c for e, c in results.get("dp", {}).items()})
        for (label, curve), style in zip(curves.items(), ("o-", "s--", "^:", "v:"), strict=False):
            lams = sorted(curve, key=float)
            xs = [curve[k]["attacker_accuracy"] for k in lams]
            ys = [curve[k]["activity_accuracy"] for k in lams]
            ax.errorbar(
                [v[0] for v in xs],
                [v[0] for v in ys],
                xerr=[v[1] for v in xs],
                yerr=[v[1] for v in ys],
                fmt=style,
                capsize=2,
                label=label,
            )
            for k, xv, yv in zip(lams, xs, ys, strict=True):
                ax.annotate(f"{float(k):g}", (xv[0], yv[0]), fontsize=6, textcoords="offset points", xytext=(3, 3))
        chance = next(iter(curves.values()))["0"]["chance"][0]
        ax.axvline(chance, color="grey", ls=":", lw=0.8, label="largest volunteer share")
        ax.axvline(target, color="grey", ls="--", lw=0.8, label="2 / volunteers")
        ax.set_xlabel("strongest fresh attacker: volunteer accuracy (test)")
        ax.set_ylabel("activity accuracy (test)")
        ax.set_title(f"HAPT, {encoder} (labels: lambda)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=None, help="shared data directory (motion/hapt_raw_50hz.npz)")
    p.add_argument("--encoders", nargs="+", default=list(ENCODERS), choices=list(ENCODERS))
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    p.add_argument("--lambdas", nargs="+", type=float, default=list(LAMBDAS))
    p.add_argument("--epsilons", nargs="*", type=float, default=list(DP_EPSILONS), help="DP-SGD runs ('': none)")
    p.add_argument("--splits", type=int, default=5, help="train/test splits (5)")
    p.add_argument("--quick", action="store_true", help="2 splits, 3 lambdas, a quarter of the epochs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads per fit (1)")
    p.add_argument("--jobs", type=int, default=1, help="fits run in parallel worker processes (1)")
    p.add_argument(
        "--figure",
        default=None,
        help="figure file (default benchmarks/anonymizer/figures/anonymizer_motion[_quick].png; '' for none)",
    )
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.jobs < 1 or args.threads < 1 or args.splits < 1:
        p.error("--jobs, --threads and --splits must be >= 1")
    if 0.0 not in args.lambdas:
        p.error("--lambdas must include 0 (the reference of the trade-off)")
    if any(e <= 0 for e in args.epsilons):
        p.error("--epsilons must be > 0")
    if args.figure is None:
        args.figure = f"benchmarks/anonymizer/figures/anonymizer_motion{'_quick' if args.quick else ''}.png"
    if args.quick:
        args.splits = min(args.splits, 2)
        args.lambdas = [0.0, 10.0, 20.0]
        for settings in SETTINGS.values():
            fit = settings["fit"]
            for key in ("pretrain_regular_epochs", "pretrain_private_epochs", "adversarial_epochs"):
                fit[key] = max(fit[key] // 4, 1)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    _set_up_process(args.threads)
    data_dir = str(resolve_data_dir(args.data_dir))
    data = load_windows(data_dir)  # fails early, before any worker starts, if the file is missing
    tasks = [
        ("plain", encoder, mode, lam, k)
        for encoder in args.encoders
        for mode in args.modes
        for lam in args.lambdas
        for k in range(args.splits)
    ]
    tasks += [
        ("dp", "signal_cnn", eps, lam, k)
        for eps in args.epsilons
        for lam in (0.0, DP_LAMBDA)
        for k in range(args.splits)
    ]

    def postfix(task: tuple, run: dict) -> str:
        return f"{task[0]} {task[1]} {task[2]} lam={task[3]:g} act={run['activity_accuracy']:.2f} att={run['attacker_accuracy']:.3f}"

    worker = partial(
        run_task, data_dir=data_dir, settings=SETTINGS, n_splits=args.splits, seed=args.seed, threads=args.threads
    )
    runs = run_tasks(tasks, worker, jobs=args.jobs, desc=BENCHMARK, postfix=postfix)
    raw: dict = {}
    for (kind, encoder, mode_or_eps, lam, _), run in zip(tasks, runs, strict=True):
        key = (encoder, mode_or_eps) if kind == "plain" else (f"{mode_or_eps:g}",)
        node = raw.setdefault(kind, {})
        for part in key[:-1]:
            node = node.setdefault(part, {})
        node.setdefault(key[-1], {}).setdefault(f"{lam:g}", []).append(run)
    results = {
        "plain": {
            e: {m: {lam: summarise(rs) for lam, rs in curve.items()} for m, curve in by_mode.items()}
            for e, by_mode in raw["plain"].items()
        },
        "dp": {eps: {lam: summarise(rs) for lam, rs in curve.items()} for eps, curve in raw.get("dp", {}).items()},
    }
    times = {
        f"{kind} {encoder}": {
            phase: round(float(np.mean([r["epoch_times"][phase] for r in rs if phase in r["epoch_times"]])), 4)
            for phase in ("pretrain_regular", "adversarial")
        }
        for (kind, encoder, *_), rs in _group(tasks, runs).items()
    }
    for encoder, by_mode in results["plain"].items():
        for mode, curve in by_mode.items():
            print(f"\n== {encoder} {mode} ==")
            for lam, c in curve.items():
                print(
                    f"  lambda {lam:>4}: activity {c['activity_accuracy'][0]:.3f} +- {c['activity_accuracy'][1]:.3f}"
                    f" (fresh {c['fresh_activity_accuracy'][0]:.3f})  attacker {c['attacker_accuracy'][0]:.3f} +- "
                    f"{c['attacker_accuracy'][1]:.3f} ({', '.join(sorted(set(c['strongest_attackers'])))})"
                    f"  chance {c['chance'][0]:.3f}"
                )
    for eps, curve in results["dp"].items():
        print(f"\n== DP-SGD signal_cnn epsilon {eps} ==")
        for lam, c in curve.items():
            print(
                f"  lambda {lam:>4}: activity {c['activity_accuracy'][0]:.3f} +- {c['activity_accuracy'][1]:.3f}"
                f"  attacker {c['attacker_accuracy'][0]:.3f} +- {c['attacker_accuracy'][1]:.3f}"
                f"  epsilon spent {c['epsilon_spent']}"
            )
    summary = headline(results, data["num_volunteers"])
    print(f"\nheadline: {summary}")
    if args.figure:
        plot(results, args.figure, 2 / data["num_volunteers"])
    settings = {
        k: {**v, "architecture": {a: list(b) if isinstance(b, tuple) else b for a, b in v["architecture"].items()}}
        for k, v in SETTINGS.items()
    }
    emit_json(
        {
            "benchmark": BENCHMARK,
            "results": results,
            "headline": summary,
            "epoch_times": times,
            "settings": {
                "encoders": args.encoders,
                "modes": args.modes,
                "lambdas": args.lambdas,
                "epsilons": args.epsilons,
                "dp_lambda": DP_LAMBDA,
                "delta": DP_DELTA,
                "splits": args.splits,
                "split_random_state": 1 + args.seed,
                "seed": args.seed,
                "quick": args.quick,
                "threads": args.threads,
                "jobs": args.jobs,
                "per_encoder": settings,
            },
            "data": {
                "windows": len(data["activity"]),
                "activities": data["num_activities"],
                "volunteers": data["num_volunteers"],
            },
            **run_metadata(started),
            "notes": [
                "accuracies on the test windows (segments never seen in training); attacker = the strongest of "
                "logistic regression, MLP, 1-NN and a small CNN on the standardised representation, enrolled on the "
                "training windows' representations or 2-fold cross-fitted on the test windows (folds by segment)",
                "motion_best: over the (encoder, mode) curves, the lambda with the lowest mean attacker accuracy "
                "whose mean activity accuracy (released branch) is within 3 points of lambda 0's; met: attacker "
                "accuracy <= 2 / 30; chance = the largest volunteer share of the test windows",
                "DP-SGD: per-window (epsilon, delta) with fresh noise; it does not hide a volunteer's participation",
                "settings chosen on the development split (random_state 0); the benchmark's splits use 1 + seed",
            ],
        },
        args.out,
    )
    return 0


def _group(tasks: list[tuple], runs: list[dict]) -> dict:
    """Runs by ``(kind, encoder)``."""
    groups: dict = {}
    for task, run in zip(tasks, runs, strict=True):
        groups.setdefault(task[:2], []).append(run)
    return groups


if __name__ == "__main__":
    raise SystemExit(main())
