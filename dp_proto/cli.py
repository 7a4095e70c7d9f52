"""The ``dp-proto`` command line.

dp-proto demo [--quick] [--log-dir runs]
    DP-GMLVQ vs GMLVQ on scikit-learn's digits
dp-proto train --config FILE [--data-dir DIR] [key.sub=value ...]
    any experiment in training/configs (a private run writes its release to
    <run>/version_N/release/)
dp-proto anonymize [--config FILE] [--data-dir DIR] [key.sub=value ...]
    the adversarial anonymizer (with privacy.epsilon: DP, and the encoder's release
    written to <log_dir>/<name>/version_N/release/)
dp-proto llp [--config FILE] [--data-dir DIR] [--distributed] [key.sub=value ...]
    LLP over SCATS sensor nodes, 4-node setting (a private run writes each node's
    release to <log_dir>/<name>/version_N/release/node_<i>/)
dp-proto svdd [--config FILE] [--data-dir DIR] [key.sub=value ...]
    the (private) SVDD classifier, one split (a private run writes its release to
    <log_dir>/<name>/version_N/release/)
dp-proto version

A config is checked against its experiment's typed schema before anything runs
(``dp_proto.experiments.schema``); a bad config, a malformed YAML file or an unknown key
ends the command with status 2 and one line on stderr. ``--data-dir DIR`` sets the
config's ``data.data_dir`` (over the file and the overrides); without it, and with
``data.data_dir`` null, the data directory is ``$DP_PROTO_DATA_DIR``.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main", "DEMO_CONFIG", "DEMO_DP_CONFIG"]

# The non-private reference: GMLVQ on the bundled 8x8 digits, minibatch Adam (how the
# settings of both demo configs were chosen: docs/getting-started.md, "The demo").
DEMO_CONFIG = {
    "seed": 0,
    "data": {"source": "bundled", "name": "digits", "batch_size": 64},
    "model": {"type": "gmlvq", "prototypes_per_class": 1},
    "training": {"optimizer": "adam", "lr": 0.01, "max_epochs": 30},
    "logging": {"name": "demo_digits_gmlvq", "image_shape": [8, 8]},
}

# The main job: DP-GMLVQ at (1, 1e-5) on the same split. Pixels 0..16 are the public
# bounds (no scaling fitted on private data); Omega renormalised, at metric_lr_scale 0.1.
DEMO_DP_CONFIG = {
    "seed": 0,
    "data": {"source": "bundled", "name": "digits", "scaling": "none"},
    "model": {"type": "gmlvq", "prototypes_per_class": 1},
    "training": {"optimizer": "sgd", "lr": 0.5, "momentum": 0.0, "metric_lr_scale": 0.1, "max_epochs": 20},
    "privacy": {
        "epsilon": 1.0,
        "delta": 1e-5,
        "sampling_rate": 0.2,
        "max_grad_norm": 0.5,
        "bounds": [0.0, 16.0],
        "classes": list(range(10)),
    },
    "logging": {"name": "demo_digits_dp_gmlvq", "image_shape": [8, 8]},
}


def _quiet_lightning() -> None:
    """Silence Lightning's start-up notices; called once a command's config has passed its
    checks (importing Lightning takes seconds, and it resets its loggers' levels)."""
    from dp_proto.lightning.anonymizer import quiet_lightning

    quiet_lightning()
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    # Opacus' "Full backward hook is firing" notice is silenced where Opacus is set up
    # (dp_proto.lvq.private.opacus_adapter.quiet_opacus_hook_notice), not here.


def _summary(result: dict) -> dict:
    summary = {k: result[k] for k in ("test_acc", "val_acc", "train_acc", "fit_seconds", "log_dir", "epsilon")}
    summary["release_dir"] = result.get("release_dir")
    if result.get("privacy_scope"):
        summary["privacy_scope"] = result["privacy_scope"]
    return summary


def _report(result: dict, *, as_json: bool) -> None:
    if "config" not in result:  # a data-parallel worker process: process 0 reports
        return
    summary = _summary(result)
    cfg = result["config"]
    if as_json:
        print(json.dumps(summary))
        return
    prefix = "DP-" if summary["epsilon"] is not None else ""
    print(f"model      {prefix}{cfg['model']['type'].upper()} on {cfg['data']['source']}:{cfg['data']['name']}")
    train = "not logged (private)" if summary["epsilon"] is not None else f"{summary['train_acc']:.4f}"
    print(f"test acc   {summary['test_acc']:.4f}   (val {summary['val_acc']:.4f}, train {train})")
    print(f"fit time   {summary['fit_seconds']:.1f} s")
    if summary["epsilon"] is not None:
        delta = cfg["privacy"]["delta"]
        print(f"privacy    ({summary['epsilon']:.4g}, {delta:g})-DP, certified by the ledger:")
        print("\n".join("  " + line for line in str(result["ledger"]).splitlines()[1:]))
        print(f"scope      {result['privacy_scope']}")
        if summary["release_dir"]:
            _print_release(summary["release_dir"], width=11)
        else:
            print("release    not written: a model with a backbone has no release format yet")
    print(f"TensorBoard logs in {summary['log_dir']}")
    print(f"  view them with: tensorboard --logdir {cfg['logging']['log_dir']}")


def _print_release(path: str, *, width: int, label: str = "release") -> None:
    """The lines that say where a private run wrote its release and how to load it."""
    print(f"{label:<{width}}{path}")
    print(f"  load it with: dp_proto.load_release({path!r})")


def _with_data_dir(config: dict, args: argparse.Namespace) -> dict:
    """``config`` with ``data.data_dir`` set from ``--data-dir`` (when given)."""
    if getattr(args, "data_dir", None) is not None:
        config["data"]["data_dir"] = args.data_dir
    return config


def _cmd_demo(args: argparse.Namespace) -> int:
    _quiet_lightning()
    from dp_proto.experiments.lvq import DEFAULT_CONFIG, merge_config, run_experiment

    results = []
    for demo_config in (DEMO_DP_CONFIG, DEMO_CONFIG):
        config = merge_config(DEFAULT_CONFIG, demo_config)
        config["logging"]["log_dir"] = args.log_dir
        config["training"]["progress_bar"] = not args.no_progress
        if args.quick:
            config["training"]["max_epochs"] = 3
        results.append(run_experiment(config))  # validates the config first
    private, public = results
    if args.json:
        print(json.dumps({"private": _summary(private), "nonprivate": _summary(public)}))
        return 0
    _report(private, as_json=False)
    print()
    _report(public, as_json=False)
    epsilon, delta = private["epsilon"], private["config"]["privacy"]["delta"]
    print(
        f"\ntest accuracy: DP-GMLVQ {private['test_acc']:.4f} at ({epsilon:.3g}, {delta:g})-DP "
        f"vs non-private GMLVQ {public['test_acc']:.4f}"
    )
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from dp_proto.experiments.defaults import load_config

    config = _with_data_dir(load_config(args.config, args.overrides), args)  # checked before the heavy imports
    if args.log_dir is not None:
        config["logging"]["log_dir"] = args.log_dir
    if args.no_progress:
        config["training"]["progress_bar"] = False
    _quiet_lightning()
    from dp_proto.experiments.lvq import run_experiment

    _report(run_experiment(config), as_json=args.json)
    return 0


def _cmd_anonymize(args: argparse.Namespace) -> int:
    from dp_proto.experiments.defaults import load_anonymizer_config

    config = _with_data_dir(load_anonymizer_config(args.config, args.overrides), args)
    if args.log_dir is not None:
        config["logging"]["log_dir"] = args.log_dir
    if args.no_progress:
        config["training"]["progress_bar"] = False
    _quiet_lightning()
    from dp_proto.experiments.anonymizer import run_anonymizer_experiment

    result = run_anonymizer_experiment(config)
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k not in ("config", "ledger", "fit")}))
        return 0
    print(
        f"regular accuracy      {result['regular_accuracy']:.4f}   (regular branch, held-out, "
        f"{result['held_out_records']} records; fresh classifiers on z: {result['fresh_regular_accuracy']:.4f})"
    )
    print(
        f"fresh attacker        {result['attacker_accuracy']:.4f}   "
        + ", ".join(f"{k} {v:.3f}" for k, v in result["attacker_by_model"].items())
    )
    print(f"random guessing       {result['chance']:.4f}")
    print(
        f"attacker error        {result['attacker_error']:.4f}   (Fano estimate from the branch: "
        f"{result['fano_error_estimate']:.4f})"
    )
    if result["epsilon"] is not None:
        delta = result["config"]["privacy"]["delta"]
        print(f"privacy               ({result['epsilon']:.4g}, {delta:g})-DP, certified by the ledger:")
        print("\n".join("  " + line for line in str(result["ledger"]).splitlines()[1:]))
        print(f"scope                 {result['privacy_scope']}")
        _print_release(result["release_dir"], width=22, label="release (encoder)")
    print(f"TensorBoard           {result['log_dir']}")
    return 0


# --flag -> config key of dp_proto.experiments.llp (a given flag overrides the file)
_LLP_FLAGS = {
    "data_dir": "data.data_dir",
    "nodes": "data.nodes",
    "anchor": "data.anchor",
    "neighbours": "data.neighbours",
    "folds": "data.folds",
    "fold": "data.fold",
    "batch_size": "llp.batch_size",
    "k": "llp.k",
    "epsilon": "llp.epsilon",
    "estimator": "llp.estimator",
    "learner": "llp.learner",
    "n_starts": "llp.n_starts",
    "noise_seed": "llp.noise_seed",
    "seed": "seed",
    "distributed": "run.distributed",
    "compare": "run.compare",
    "threads": "run.threads",
    "log_dir": "logging.log_dir",
}


def _cmd_llp(args: argparse.Namespace) -> int:
    """LLP on SCATS counts: an anchor detector and its nearest detectors, one cross-validation fold."""
    from dp_proto.experiments.config import merge_config, nested, validate_config
    from dp_proto.experiments.defaults import load_llp_config

    config = load_llp_config(args.config, args.overrides)
    for flag, key in _LLP_FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            config = merge_config(config, nested(key, value))
    validate_config(config, "llp")
    from dp_proto.experiments.llp import run_llp_experiment

    result = run_llp_experiment(config)
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k not in ("config", "network")}))
        return 0 if result.get("identical_to_simulation", True) else 1
    cfg = result["config"]
    how = "distributed (one process per node)" if result["distributed"] else "simulated (one process)"
    print(f"nodes {result['detectors']}, neighbours {result['neighbours']}")
    print(
        f"fold {cfg['data']['fold']}/{cfg['data']['folds']}, b={cfg['llp']['batch_size']}, k={cfg['llp']['k']}, "
        f"epsilon={cfg['llp']['epsilon']}"
    )
    for i, node in enumerate(result["nodes"]):
        line = f"  node {i}: accuracy {node['accuracy']:.4f}, epsilon {node['epsilon']:g}"
        if "bytes_sent" in node:
            line += f", sent {node['bytes_sent']} B to {node['subscribers']}, received {node['bytes_received']} B"
        print(line)
    print(
        f"accuracy {result['accuracy']:.4f} (own models {result['own_accuracy']:.4f}), {result['seconds']:.1f} s {how}"
    )
    if result["release_dir"]:
        print(f"releases {result['release_dir']}: node_<i>/ for node i, its noisy label proportions and ledger")
        print(f"  load one with: dp_proto.load_release({str(Path(result['release_dir']) / 'node_0')!r})")
    if "identical_to_simulation" in result:
        print(
            f"simulation: accuracy {result['simulation_accuracy']:.4f}, "
            f"identical models and releases: {result['identical_to_simulation']}"
        )
        if not result["identical_to_simulation"]:
            return 1
    return 0


def _cmd_svdd(args: argparse.Namespace) -> int:
    """The (private) SVDD equilibrium-point classifier on one stratified split."""
    from dp_proto.experiments.defaults import load_svdd_config

    config = _with_data_dir(load_svdd_config(args.config, args.overrides), args)
    if args.log_dir is not None:
        config["logging"]["log_dir"] = args.log_dir
    _quiet_lightning()
    from dp_proto.experiments.svdd import run_svdd_experiment

    result = run_svdd_experiment(config)
    shown = {k: v for k, v in result.items() if k not in ("config", "estimator", "ledger")}
    if args.json:
        print(json.dumps(shown))
        return 0
    cfg = result["config"]
    private = result["epsilon"] is not None
    print(
        f"model      {'private ' if private else ''}SVDD equilibrium-point classifier on "
        f"{cfg['data']['source']}:{cfg['data']['name']} ({result['starts']} starts, "
        f"{result['labelled_points']} labelled equilibrium points)"
    )
    train = "not computed (private)" if private else f"{result['train_acc']:.4f}"
    print(f"test acc   {result['test_acc']:.4f}   (train {train})")
    print(f"fit time   {result['fit_seconds']:.2f} s")
    if private:
        print(f"privacy    {result['epsilon']:.4g}-DP, certified by the ledger:")
        print("\n".join("  " + line for line in str(result["ledger"]).splitlines()[1:]))
        print(f"scope      {result['privacy_scope']}")
        _print_release(result["release_dir"], width=11)
        print("  its input: features mapped from privacy.bounds onto [-1, 1] (scale_to_public_bounds)")
    print(f"TensorBoard logs in {result['log_dir']}")
    print(f"  view them with: tensorboard --logdir {cfg['logging']['log_dir']}")
    return 0


_DATA_DIR_HELP = "the data directory: sets data.data_dir (default: the config's, else $DP_PROTO_DATA_DIR)"


def _add_llp_parser(sub) -> None:
    llp = sub.add_parser(
        "llp",
        help="learning from (private) label proportions over SCATS sensor nodes: "
        "a node and its nearest detectors, one cross-validation fold "
        "(defaults: dp_proto.experiments.defaults.LLP_DEFAULTS)",
    )
    llp.add_argument("--config", default=None, help="YAML file, e.g. training/configs/scats_llp.yaml")
    llp.add_argument("overrides", nargs="*", help="key.subkey=value, e.g. llp.k=8")
    llp.add_argument("--data-dir", default=None, help=_DATA_DIR_HELP)
    llp.add_argument(
        "--distributed",
        action="store_true",
        default=None,
        help="one process per node, proportions exchanged by torch.distributed (gloo, localhost)",
    )
    llp.add_argument(
        "--compare",
        action="store_true",
        default=None,
        help="with --distributed: also simulate in this process and compare models and releases",
    )
    llp.add_argument("--nodes", type=int, default=None, help="nodes: --anchor and its nearest detectors (4)")
    llp.add_argument("--anchor", type=int, default=None, help="index of the first node's detector (0)")
    llp.add_argument("--neighbours", type=int, default=None, help="c, neighbours per node (default: nodes - 1)")
    llp.add_argument("--batch-size", type=int, default=None, help="b, time slots per batch (32)")
    llp.add_argument("--k", type=int, default=None, help="k-means clusters per node (16)")
    llp.add_argument("--epsilon", type=float, default=None, help="per-node epsilon; <= 0: exact proportions (0.1)")
    llp.add_argument(
        "--estimator", default=None, choices=("clipped", "unbiased"), help="noisy counts -> proportions (clipped)"
    )
    llp.add_argument(
        "--learner",
        default=None,
        choices=("kmeans", "bag"),
        help="labelled k-means clusters (Sachweh et al.) or a network trained on the bags (kmeans)",
    )
    llp.add_argument("--folds", type=int, default=None, help="time-block cross-validation folds (10)")
    llp.add_argument("--fold", type=int, default=None, help="the fold to run (0)")
    llp.add_argument(
        "--seed", type=int, default=None, help="k-means seeding and local-search starts, never the noise (0)"
    )
    llp.add_argument(
        "--noise-seed",
        type=int,
        default=None,
        help="reproducible Laplace noise (not private against whoever knows it; "
        "default: fresh operating-system entropy)",
    )
    llp.add_argument("--n-starts", type=int, default=None, help="local-search starts per source (32)")
    llp.add_argument("--threads", type=int, default=None, help="intra-op threads per process (1)")
    llp.add_argument("--json", action="store_true", help="print one JSON line instead of text")
    llp.add_argument(
        "--log-dir",
        default=None,
        help="where a private run writes the nodes' releases: <dir>/<name>/version_N/release/node_<i>/ (runs)",
    )
    llp.set_defaults(func=_cmd_llp)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dp-proto", description="Prototype learning with privacy.")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser(
        "demo",
        help="train DP-GMLVQ (epsilon 1) and GMLVQ on scikit-learn's digits and "
        "report both test accuracies and the certified epsilon",
    )
    demo.add_argument("--quick", action="store_true", help="3 epochs each (smoke test)")
    demo.set_defaults(func=_cmd_demo)

    train = sub.add_parser(
        "train", help="run an experiment from a YAML config (a private run also writes its release: <run>/release/)"
    )
    train.add_argument("--config", required=True, help="YAML file, e.g. training/configs/digits_gmlvq.yaml")
    train.add_argument("overrides", nargs="*", help="key.subkey=value overrides, e.g. training.max_epochs=5")
    train.set_defaults(func=_cmd_train)

    anonymize = sub.add_parser(
        "anonymize",
        help="train the adversarial anonymizer from a YAML config and evaluate fresh attackers on held-out records "
        "(privacy.epsilon set: DP-SGD, and the encoder's release written to <log_dir>/<name>/version_N/release/)",
    )
    anonymize.add_argument("--config", default=None, help="YAML file, e.g. training/configs/yale_anonymizer.yaml")
    anonymize.add_argument("overrides", nargs="*", help="key.subkey=value overrides, e.g. training.lam=10")
    anonymize.set_defaults(func=_cmd_anonymize)

    _add_llp_parser(sub)

    svdd = sub.add_parser(
        "svdd",
        help="the (private) SVDD equilibrium-point classifier on one split "
        "(defaults: dp_proto.experiments.defaults.SVDD_DEFAULTS)",
    )
    svdd.add_argument("--config", default=None, help="YAML file, e.g. training/configs/five_gaussians_svdd.yaml")
    svdd.add_argument("overrides", nargs="*", help="key.subkey=value overrides, e.g. svdd.gamma=50")
    svdd.add_argument("--json", action="store_true", help="print one JSON line instead of text")
    svdd.add_argument(
        "--log-dir", default=None, help="where a private run writes its release: <dir>/<name>/version_N/release/ (runs)"
    )
    svdd.set_defaults(func=_cmd_svdd)

    for p in (train, anonymize, svdd):
        p.add_argument("--data-dir", default=None, help=_DATA_DIR_HELP)

    for p, default in ((demo, "runs"), (train, None), (anonymize, None)):
        p.add_argument("--log-dir", default=default, help="TensorBoard log folder (default: runs)")
        p.add_argument("--json", action="store_true", help="print one JSON line instead of text")
        p.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    version = sub.add_parser("version", help="print the version")
    version.set_defaults(func=lambda _args: print(__import__("dp_proto").__version__) or 0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, KeyError, TypeError, FileNotFoundError) as err:
        print(f"dp-proto: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
