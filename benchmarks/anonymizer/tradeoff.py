"""Utility/anonymity trade-off of the adversarial anonymizer (Feutry et al. 2018).

For every lambda, mode (toggle, simultaneous) and seed:

1. split the records in half (stratified by the private label): a training half and a
   held-out half that the anonymizer never sees;
2. train the anonymizer on the training half (``fit_anonymizer``: pre-train encoder and
   regular branch, pre-train the private branch, then adversarial epochs);
3. freeze the encoder and encode the held-out half; report
   * the regular accuracy of the regular branch on it (the released model), and that of
     fresh regular classifiers trained like the attackers (what the representation holds),
   * the **fresh attacker's** private accuracy: logistic regression, an MLP and 1-NN
     trained on one half of the held-out representations and scored on the other, and
     the reverse (``fresh_attacker_accuracy(folds=2)``), the best of the three,
   * random guessing (the largest private prior),
   * the lower bound of Feutry et al. (2018) on the private misclassification probability (eq. 14 via
     Fano's inequality) from the held-out cross-entropy of the jointly trained private
     branch, next to the attacker's error.

Data: Yale faces (``load_yale_faces``: 164 images 30x32, identity = private label with
15 classes, condition = regular label with 11) and the synthetic task of
``make_entangled_task`` (4 regular, 8 private classes, entanglement 0.5: a perfect
anonymizer still leaks ``best_private_accuracy_given_regular`` through the regular label).

The settings (architecture, epochs, learning rates) are fixed in ``SETTINGS`` and were
not tuned on the held-out halves; lambda is the swept variable. Speed: the mean wall
time of an adversarial epoch over that of a plain epoch (encoder + regular branch,
the first phase), per mode, on Yale.

Usage::

    python -m benchmarks.anonymizer.tradeoff --data-dir ../shared/data
    python -m benchmarks.anonymizer.tradeoff --data-dir ../shared/data --quick   # a few minutes
    python -m benchmarks.anonymizer.tradeoff --datasets synthetic --quick

``--quick``: one seed, lambdas 0, 1, 10 and a third of the epochs, every headline key (on
that reduced setting); its figure goes to ``anonymizer_tradeoff_quick.png`` unless told
otherwise.

Ends with a trade-off figure (``--figure``; ``""``: none) and one JSON line
``{"benchmark": "anonymizer_tradeoff", "results": {...}, "headline": {...}}``.
"""

from __future__ import annotations

import argparse
import time
import warnings
from functools import partial
from pathlib import Path

import numpy as np
import torch
from sklearn.model_selection import train_test_split

from benchmarks.common import emit_json, resolve_data_dir, run_metadata, run_tasks
from dp_proto.anonymizer import Anonymizer
from dp_proto.lightning.anonymizer import evaluate_held_out, fit_anonymizer

BENCHMARK = "anonymizer_tradeoff"
LAMBDAS = (0.0, 0.3, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0)
MODES = ("toggle", "simultaneous")

#: Fixed settings per data set. Yale: chosen on development splits (seeds 100-102 of the
#: same 164 images, lambda 1-10), not on the benchmark's splits (seeds 0..): a
#: representation of 8 units; toggle blocks of 60 branch steps (10 epochs) and 12
#: encoder steps, so that the private branch keeps up with the encoder; 300 adversarial
#: epochs; encoder learning rate 0.001. Three restarts per fit (``fit_anonymizer(restarts=3)``:
#: the one scoring best on its own training records is kept), chosen on development splits
#: 100-105 where single fits ended bimodally (identity kept, or everything dropped).
SETTINGS = {
    "yale": {
        "architecture": {"representation_dim": 8, "encoder_hidden": (256,), "head_hidden": (64,)},
        "restarts": 3,
        "fit": {
            "pretrain_regular_epochs": 40,
            "pretrain_private_epochs": 20,
            "adversarial_epochs": 300,
            "toggle_steps": 60,
            "encoder_steps": 12,
            "batch_size": 16,
            "lr": 0.01,
            "encoder_lr": 0.001,
            "optimizer": "nesterov",
        },
    },
    "synthetic": {
        "architecture": {"representation_dim": 16, "encoder_hidden": (64,), "head_hidden": (32,)},
        "fit": {
            "pretrain_regular_epochs": 10,
            "pretrain_private_epochs": 5,
            "adversarial_epochs": 30,
            "batch_size": 64,
            "lr": 0.05,
            "encoder_lr": 0.01,
            "optimizer": "nesterov",
        },
    },
}
SYNTHETIC = {"n": 3000, "num_regular": 4, "num_private": 8, "entanglement": 0.5, "dim": 20}


def load(name: str, args) -> dict:
    """``{"x": (n, d) float32, "regular", "private", "chance", "notes"...}``."""
    if name == "yale":
        from dp_proto.data import load_yale_faces

        faces = load_yale_faces(resolve_data_dir(args.data_dir))
        return {
            "x": torch.as_tensor(faces.images).flatten(1),
            "regular": torch.as_tensor(faces.regular),
            "private": torch.as_tensor(faces.private),
            "num_regular": len(faces.regular_names),
            "num_private": len(faces.private_names),
            "image_shape": list(faces.images.shape[1:]),
        }
    from dp_proto.data import make_entangled_task

    task = make_entangled_task(seed=args.seed, **SYNTHETIC)
    return {
        "x": torch.as_tensor(task.x),
        "regular": torch.as_tensor(task.regular),
        "private": torch.as_tensor(task.private),
        "num_regular": SYNTHETIC["num_regular"],
        "num_private": SYNTHETIC["num_private"],
        "best_private_accuracy_given_regular": float(task.best_private_accuracy_given_regular),
    }


def run_one(data: dict, name: str, lam: float, mode: str, seed: int, settings: dict | None = None) -> dict:
    """One anonymizer fit and its held-out evaluation; ``settings`` default to ``SETTINGS[name]``."""
    idx = np.arange(len(data["private"]))
    train, held = train_test_split(idx, train_size=0.5, stratify=data["private"].numpy(), random_state=seed)
    x, y, s = data["x"], data["regular"], data["private"]
    settings = SETTINGS[name] if settings is None else settings

    def model() -> Anonymizer:
        return Anonymizer.mlp(x.shape[1], data["num_regular"], data["num_private"], **settings["architecture"])

    fit = fit_anonymizer(
        x[train],
        y[train],
        s[train],
        anonymizer=model,
        lam=lam,
        mode=mode,
        seed=seed,
        restarts=settings.get("restarts", 1),
        enable_progress_bar=False,  # the runner's own tqdm bar covers the sweep
        **settings["fit"],
    )
    result = evaluate_held_out(fit.module, x[held], y[held], s[held], folds=2, seed=seed)
    result.pop("attacker_chance")
    return {
        **result,
        "restarts": fit.restarts,
        "chosen_restart": fit.chosen,
        "chance": float(fit.module.prior.max()),
        "epoch_times": {phase: float(np.mean(t)) for phase, t in fit.epoch_times.items()},
    }


def set_up_process(threads: int) -> None:
    """Torch threads and Lightning's chatter, for this process or a worker."""
    torch.set_num_threads(threads)
    warnings.filterwarnings("ignore", module="lightning")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")


def _run_task(task: tuple, data: dict, settings: dict, threads: int) -> dict:
    name, mode, lam, seed = task
    set_up_process(threads)  # a spawned worker starts with the defaults
    return run_one(data[name], name, lam, mode, seed, settings[name])


def run_all(tasks: list[tuple], data: dict, jobs: int, threads: int) -> list[dict]:
    """``run_one`` for every ``(dataset, mode, lambda, seed)`` task, in ``jobs`` worker
    processes (1: in this process); results in task order. Each fit seeds itself, so
    the results do not depend on ``jobs``. The workers get this process' ``SETTINGS``
    (with ``--quick``'s changes)."""

    def postfix(task: tuple, run: dict) -> str:
        name, mode, lam, _ = task
        return f"{name} {mode} lam={lam:g} reg={run['regular_accuracy']:.2f} att={run['attacker_accuracy']:.2f}"

    worker = partial(_run_task, data=data, settings=SETTINGS, threads=threads)
    return run_tasks(tasks, worker, jobs=jobs, desc=BENCHMARK, postfix=postfix)


def summarise(runs: list[dict]) -> dict:
    out = {}
    for key in (
        "regular_accuracy",
        "fresh_regular_accuracy",
        "attacker_accuracy",
        "branch_private_accuracy",
        "ce_private",
        "ce_random",
        "fano_error_bound",
        "chance",
    ):
        values = np.array([r[key] for r in runs])
        out[key] = [round(float(values.mean()), 4), round(float(values.std()), 4)]
    out["attacker_error"] = [round(1 - out["attacker_accuracy"][0], 4), out["attacker_accuracy"][1]]
    out["attacker_by_model"] = {
        m: round(float(np.mean([r["attacker_by_model"][m] for r in runs])), 4) for m in runs[0]["attacker_by_model"]
    }
    out["per_seed"] = [[round(r["regular_accuracy"], 4), round(r["attacker_accuracy"], 4)] for r in runs]
    if runs[0].get("restarts"):  # per seed: the kept restart and every restart's training-record probes
        out["restarts"] = [
            {
                "chosen": r["chosen_restart"],
                "train_regular_attacker_score": [
                    [round(q[k], 4) for k in ("regular_accuracy", "attacker_accuracy", "score")] for q in r["restarts"]
                ],
            }
            for r in runs
        ]
    return out


def best_tradeoff(curve: dict, tolerance: float = 0.10, regular: str = "regular_accuracy") -> dict:
    """The lambda with the lowest attacker accuracy whose regular accuracy (``regular``:
    the released regular branch's, or ``fresh_regular_accuracy``) is within
    ``tolerance`` of lambda = 0's."""
    base = curve["0"][regular][0]
    candidates = [lam for lam, c in curve.items() if c[regular][0] >= base - tolerance]
    lam = min(candidates, key=lambda k: (curve[k]["attacker_accuracy"][0], float(k)))
    c = curve[lam]
    return {
        "lambda": float(lam),
        "regular_accuracy": c[regular][0],
        "regular_accuracy_lambda0": base,
        "attacker_accuracy": c["attacker_accuracy"][0],
        "chance": c["chance"][0],
    }


def intermediate_points(curve: dict, margin: float = 0.05) -> int:
    """Lambdas whose attacker accuracy lies strictly between chance + margin and the
    lambda = 0 value - margin (the trade-offs between the two extremes)."""
    top = curve["0"]["attacker_accuracy"][0]
    chance = curve["0"]["chance"][0]
    return sum(1 for c in curve.values() if chance + margin < c["attacker_accuracy"][0] < top - margin)


def intermediate_run_fraction(raw_curve: dict, margin: float = 0.05) -> float:
    """Share of the individual runs with lambda > 0 whose attacker accuracy lies strictly
    between chance + margin and the mean lambda = 0 value - margin (Feutry et al. 2018: simultaneous
    training converges to one of the two extremes)."""
    top = float(np.mean([r["attacker_accuracy"] for r in raw_curve["0"]]))
    runs = [r for lam, rs in raw_curve.items() if float(lam) > 0 for r in rs]
    inside = [r["chance"] + margin < r["attacker_accuracy"] < top - margin for r in runs]
    return float(np.mean(inside)) if inside else float("nan")


def plot(results: dict, out: str, floors: dict | None = None, targets: dict | None = None) -> None:
    """Regular against attacker accuracy per data set; ``floors[name]``: the attacker
    accuracy a perfect anonymizer still allows (synthetic task: through the regular label);
    ``targets[name]``: twice the uniform chance, 2 / number of private classes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.2 * len(results), 4), squeeze=False)
    for ax, (name, by_mode) in zip(axes[0], results.items(), strict=True):
        for mode, style in zip(by_mode, ("o-", "s--"), strict=False):
            curve = by_mode[mode]
            lams = sorted(curve, key=float)
            xs = [curve[k]["attacker_accuracy"][0] for k in lams]
            ys = [curve[k]["regular_accuracy"][0] for k in lams]
            ax.plot(xs, ys, style, label=mode)
            for k, xv, yv in zip(lams, xs, ys, strict=True):
                ax.annotate(f"{float(k):g}", (xv, yv), fontsize=6, textcoords="offset points", xytext=(3, 3))
        chance = next(iter(next(iter(by_mode.values())).values()))["chance"][0]
        ax.axvline(chance, color="grey", ls=":", lw=0.8, label="random guessing")
        if targets and name in targets:
            ax.axvline(targets[name], color="grey", ls="--", lw=0.8, label="2 / private classes")
        if floors and name in floors:
            ax.axvline(floors[name], color="tab:red", ls=":", lw=0.8, label="floor given the regular label")
        ax.set_xlabel("fresh attacker's private accuracy (held-out)")
        ax.set_ylabel("regular accuracy (held-out)")
        ax.set_title(f"{name} (labels: lambda)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=None, help="shared data directory (Yale faces)")
    p.add_argument("--datasets", nargs="+", default=["yale", "synthetic"], choices=["yale", "synthetic"])
    p.add_argument("--lambdas", nargs="+", type=float, default=list(LAMBDAS))
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    p.add_argument("--seeds", type=int, default=3, help="splits and initialisations per lambda (3)")
    p.add_argument("--quick", action="store_true", help="1 seed, 3 lambdas, a third of the epochs (smoke run)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads per fit (1)")
    p.add_argument("--jobs", type=int, default=1, help="fits run in parallel worker processes (1)")
    p.add_argument(
        "--figure",
        default=None,
        help="figure file (default benchmarks/anonymizer/figures/anonymizer_tradeoff[_quick].png; '' for none)",
    )
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.jobs < 1 or args.threads < 1:
        p.error("--jobs and --threads must be >= 1")
    if 0.0 not in args.lambdas:
        p.error("--lambdas must include 0 (the reference of the trade-off)")
    if args.figure is None:
        args.figure = f"benchmarks/anonymizer/figures/anonymizer_tradeoff{'_quick' if args.quick else ''}.png"
    if args.quick:  # a smoke run: one seed, three lambdas, a third of the epochs
        args.seeds = 1
        args.lambdas = [0.0, 1.0, 10.0]
        for settings in SETTINGS.values():
            fit = settings["fit"]
            for key in ("pretrain_regular_epochs", "pretrain_private_epochs", "adversarial_epochs"):
                fit[key] = max(fit[key] // 3, 1)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    set_up_process(args.threads)
    data = {name: load(name, args) for name in args.datasets}
    tasks = [
        (name, mode, lam, args.seed * 1000 + k)
        for name in args.datasets
        for mode in args.modes
        for lam in args.lambdas
        for k in range(args.seeds)
    ]
    runs = run_all(tasks, data, args.jobs, args.threads)
    raw: dict = {}
    for (name, mode, lam, _), run in zip(tasks, runs, strict=True):  # in task order, whatever the jobs
        raw.setdefault(name, {}).setdefault(mode, {}).setdefault(f"{lam:g}", []).append(run)
    results = {
        name: {mode: {lam: summarise(runs) for lam, runs in curve.items()} for mode, curve in by_mode.items()}
        for name, by_mode in raw.items()
    }
    times = {}
    for name, by_mode in raw.items():
        for mode, curve in by_mode.items():
            plain = [r["epoch_times"].get("pretrain_regular") for runs in curve.values() for r in runs]
            adv = [r["epoch_times"].get("adversarial") for runs in curve.values() for r in runs]
            plain, adv = [t for t in plain if t], [t for t in adv if t]
            if plain and adv:
                times.setdefault(name, {})[mode] = {
                    "plain_epoch_s": float(np.mean(plain)),
                    "adversarial_epoch_s": float(np.mean(adv)),
                    "ratio": float(np.mean(adv) / np.mean(plain)),
                }
    for name, by_mode in results.items():
        print(f"\n== {name} ==")
        for mode, curve in by_mode.items():
            print(f"  {mode}:")
            for lam, c in curve.items():
                print(
                    f"    lambda {lam:>5}: regular {c['regular_accuracy'][0]:.3f}  attacker "
                    f"{c['attacker_accuracy'][0]:.3f} {c['attacker_by_model']}  (error {c['attacker_error'][0]:.3f}"
                    f" >= Fano estimate {c['fano_error_bound'][0]:.3f}?)  branch {c['branch_private_accuracy'][0]:.3f}"
                    f"  chance {c['chance'][0]:.3f}"
                )
        for mode, t in times.get(name, {}).items():
            print(
                f"  epoch time {mode}: plain {t['plain_epoch_s']:.3f} s, adversarial "
                f"{t['adversarial_epoch_s']:.3f} s, ratio {t['ratio']:.2f}"
            )
    headline: dict = {}
    if "yale" in results and "toggle" in results["yale"]:
        headline["yale_best"] = best_tradeoff(results["yale"]["toggle"])
        headline["yale_best_fresh_regular"] = best_tradeoff(results["yale"]["toggle"], regular="fresh_regular_accuracy")
        if "simultaneous" in results["yale"]:
            headline["yale_best_simultaneous"] = best_tradeoff(results["yale"]["simultaneous"])
        target = 2 / data["yale"]["num_private"]  # the bound: twice chance, 2 / 15
        for best in (v for k, v in headline.items() if k.startswith("yale_best")):
            best["target_attacker"] = round(target, 4)
            best["met"] = bool(best["attacker_accuracy"] <= target)
    timed = times.get("yale") or next(iter(times.values()), {})
    if "toggle" in timed:
        headline["epoch_time_ratio"] = timed["toggle"]["ratio"]
    if "simultaneous" in timed:
        headline["epoch_time_ratio_simultaneous"] = timed["simultaneous"]["ratio"]
    headline["intermediate_points"] = {
        f"{name} {mode}": intermediate_points(curve)
        for name, by_mode in results.items()
        for mode, curve in by_mode.items()
    }
    headline["intermediate_run_fraction"] = {
        f"{name} {mode}": round(intermediate_run_fraction(curve), 3)
        for name, by_mode in raw.items()
        for mode, curve in by_mode.items()
    }
    print(f"\nheadline: {headline}")
    if args.figure:
        floors = {
            name: d["best_private_accuracy_given_regular"]
            for name, d in data.items()
            if "best_private_accuracy_given_regular" in d
        }
        plot(results, args.figure, floors, {name: 2 / d["num_private"] for name, d in data.items()})
    payload = {
        "benchmark": BENCHMARK,
        "results": results,
        "headline": headline,
        "epoch_times": times,
        "settings": {
            "lambdas": args.lambdas,
            "modes": args.modes,
            "seeds": args.seeds,
            "seed": args.seed,
            "quick": args.quick,
            "threads": args.threads,
            "jobs": args.jobs,
            "per_dataset": {
                k: {
                    "architecture": {
                        a: list(v) if isinstance(v, tuple) else v for a, v in SETTINGS[k]["architecture"].items()
                    },
                    "fit": SETTINGS[k]["fit"],
                }
                for k in args.datasets
            },
            "synthetic": SYNTHETIC,
        },
        "data": {name: {k: v for k, v in d.items() if not isinstance(v, torch.Tensor)} for name, d in data.items()},
        **run_metadata(started),
        "notes": [
            "accuracies on the held-out half (never seen by the anonymizer); attacker = best of logistic "
            "regression, MLP and 1-NN on standardised representations, 2-fold cross-fitted on the held-out half",
            "fano_error_bound: Fano's inequality solved for the error with H(S|Z) estimated by the held-out "
            "cross-entropy of the jointly trained private branch (Feutry et al. 2018, eq. 14 with eq. 11); an estimate, "
            "not a certified bound",
            "yale_best: lowest mean attacker accuracy among lambdas whose mean regular accuracy (the released "
            "regular branch) is within 10 points of lambda = 0 (toggle training); yale_best_fresh_regular: the "
            "same with the regular accuracy of fresh classifiers on the representation; chance = largest private "
            "prior; met: attacker accuracy <= target_attacker = 2 / 15",
            "yale: restarts = 3 per fit (fit_anonymizer(restarts=3): the restart with the best restart_score on its "
            "own training records is kept); results[...]['restarts']: per seed, the kept restart and every "
            "restart's fresh-probe regular and attacker accuracies and score on the training records",
            "epoch_time_ratio: mean adversarial epoch over mean plain epoch (encoder + regular branch), same "
            "runs, 1 thread",
        ],
    }
    emit_json(payload, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
