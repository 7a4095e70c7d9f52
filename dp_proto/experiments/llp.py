"""Run learning from label proportions over the SCATS sensor network from a config
(``dp-proto llp [--config FILE] [key.sub=value ...]``).

Sections and defaults (unknown keys are rejected)::

    seed: 0             # k-means seeding and local-search starts (never the noise)
    data:    {data_dir: null, nodes: 4, anchor: 0, neighbours: null, folds: 10, fold: 0}
    llp:     {batch_size: 32, k: 16, epsilon: 0.1, estimator: clipped, n_starts: 32, noise_seed: null}
    run:     {distributed: false, compare: false, threads: 1}

``data``: the detector ``anchor`` and its ``nodes - 1`` nearest detectors, each node
listening to ``neighbours`` others (null: all of them), one time-block cross-validation
``fold`` of ``folds``. ``llp``: the settings of ``LLPConfig``
(``epsilon`` per node; null or <= 0: exact proportions). ``run.distributed``: one process
per node, proportions exchanged by ``torch.distributed`` (gloo, localhost);
``run.compare`` also simulates the network in this process and checks that models and
releases are identical (it needs ``llp.noise_seed`` when the run is private: two runs
with fresh noise release different tables).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from dp_proto.experiments.config import merge_config, read_config

__all__ = ["LLP_DEFAULTS", "load_llp_config", "run_llp_experiment"]

LLP_DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "data": {"data_dir": None, "nodes": 4, "anchor": 0, "neighbours": None, "folds": 10, "fold": 0},
    "llp": {"batch_size": 32, "k": 16, "epsilon": 0.1, "estimator": "clipped", "n_starts": 32, "noise_seed": None},
    "run": {"distributed": False, "compare": False, "threads": 1},
}


def load_llp_config(path: str | Path | None = None, overrides: list[str] | None = None) -> dict[str, Any]:
    """``LLP_DEFAULTS``, updated by a YAML file and by ``key.subkey=value`` overrides."""
    return read_config(LLP_DEFAULTS, path, overrides)


def _same_releases(a, b) -> bool:
    """Whether two network results hold identical models and released proportions."""
    models = all(
        torch.equal(x.centres, y.centres) and torch.equal(x.cluster_labels, y.cluster_labels)
        for ms_a, ms_b in zip(a.models, b.models, strict=True)
        for x, y in zip(ms_a, ms_b, strict=True)
    )
    return models and all(
        torch.equal(x.proportions, y.proportions) for x, y in zip(a.proportions, b.proportions, strict=True)
    )


def run_llp_experiment(config: dict[str, Any]) -> dict[str, Any]:
    """Train every node of the chosen group on one fold's training windows and evaluate on
    its test windows. Returns the detectors, the neighbour table, per-node accuracy and
    epsilon (and bytes exchanged, distributed), the network's accuracy, the wall time and,
    with ``run.compare``, the simulation's accuracy and whether it matched."""
    from dp_proto.data.geometry import nearest_neighbours
    from dp_proto.data.loaders.scats import load_scats_counts
    from dp_proto.data.sensors import node_datasets, time_block_folds
    from dp_proto.llp import LLPConfig, evaluate, simulate_network

    config = merge_config(LLP_DEFAULTS, config)
    data, settings, run = config["data"], config["llp"], config["run"]
    epsilon = settings["epsilon"]
    private = epsilon is not None and epsilon > 0
    if run["compare"] and not run["distributed"]:
        raise ValueError(
            "run.compare (--compare) needs run.distributed (--distributed; it compares the distributed run with the simulation)"
        )
    if run["compare"] and settings["noise_seed"] is None and private:
        raise ValueError(
            "run.compare (--compare) needs llp.noise_seed (--noise-seed): two runs with fresh noise release different tables"
        )
    torch.set_num_threads(int(run["threads"]))
    network = load_scats_counts(data["data_dir"])
    all_nodes = node_datasets(network)
    if not 0 <= data["anchor"] < len(all_nodes):
        raise ValueError(f"data.anchor (--anchor) must lie in 0..{len(all_nodes) - 1}")
    size = int(data["nodes"])
    group = [data["anchor"]] + nearest_neighbours(network.coordinates, size - 1)[data["anchor"]].tolist()
    nodes = [all_nodes[i] for i in group]
    nbrs = nearest_neighbours(
        network.coordinates[group], size - 1 if data["neighbours"] is None else data["neighbours"]
    )
    time_range = (int(network.time[0]), int(network.time[-1]) + 1)
    folds = [time_block_folds(n.time, data["folds"], time_range=time_range, gap=5)[data["fold"]] for n in nodes]
    train, test = [f[0] for f in folds], [f[1] for f in folds]
    llp_config = LLPConfig(
        batch_size=settings["batch_size"],
        k=settings["k"],
        epsilon=epsilon if private else None,
        time_range=time_range,
        seed=config["seed"],
        noise_seed=settings["noise_seed"],
        n_starts=settings["n_starts"],
        estimator=settings["estimator"],
    )
    t0 = time.perf_counter()
    if run["distributed"]:
        from dp_proto.llp.distributed import as_network_result, launch_network

        results = launch_network(nodes, nbrs, llp_config, train_masks=train, num_threads=run["threads"])
        result = as_network_result(results)
    else:
        results = None
        result = simulate_network(nodes, nbrs, llp_config, train_masks=train)
    seconds = time.perf_counter() - t0
    ev = evaluate(result, nodes, test)
    per_node = []
    for i, acc in enumerate(ev.node_accuracy):
        entry = {"accuracy": float(acc), "epsilon": result.ledgers[i].get_epsilon(0.0)}
        if results is not None:
            entry.update(
                bytes_sent=results[i].bytes_sent,
                subscribers=list(results[i].subscribers),
                bytes_received=results[i].bytes_received,
            )
        per_node.append(entry)
    out: dict[str, Any] = {
        "detectors": [n.detector for n in nodes],
        "neighbours": nbrs.tolist(),
        "nodes": per_node,
        "accuracy": float(ev.accuracy),
        "own_accuracy": float(ev.own_accuracy),
        "seconds": seconds,
        "distributed": bool(run["distributed"]),
        "config": config,
    }
    if run["compare"]:
        sim = simulate_network(nodes, nbrs, llp_config, train_masks=train)
        out["simulation_accuracy"] = float(evaluate(sim, nodes, test).accuracy)
        out["identical_to_simulation"] = _same_releases(result, sim)
    return out
