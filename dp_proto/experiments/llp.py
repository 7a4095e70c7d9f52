"""Run learning from label proportions over the SCATS sensor network from a config
(``dp-proto llp [--config FILE] [key.sub=value ...]``).

Sections and defaults (unknown keys are rejected)::

    seed: 0             # k-means seeding and local-search starts (never the noise)
    data:    {data_dir: null, nodes: 4, anchor: 0, neighbours: null, folds: 10, fold: 0}
    llp:     {batch_size: 32, k: 16, epsilon: 0.1, estimator: clipped, n_starts: 32, noise_seed: null,
              learner: kmeans, own_proportions: exact}
    run:     {distributed: false, compare: false, threads: 1}
    logging: {log_dir: runs, name: null}   # where a private run writes its releases

``data``: the detector ``anchor`` and its ``nodes - 1`` nearest detectors, each node
listening to ``neighbours`` others (null: all of them), one time-block cross-validation
``fold`` of ``folds``. ``llp``: the settings of ``LLPConfig``
(``epsilon`` per node; null or <= 0: exact proportions). ``run.distributed``: one process
per node, proportions exchanged by ``torch.distributed`` (gloo, localhost);
``run.compare`` also simulates the network in this process and checks that models and
releases are identical (it needs ``llp.noise_seed`` when the run is private: two runs
with fresh noise release different tables).

Release. A private run (``llp.epsilon`` > 0) ends by writing what each node published,
its noisy label-proportion table with its ledger (``LLPNodeRelease``), in the release
format (``dp_proto.release``) to ``<log_dir>/<name>/version_N/release/node_<i>/``
(``logging.log_dir``, ``logging.name``, default ``scats_llp``; ``N`` the next free
version; ``i`` the node's index in ``result["detectors"]``), with under ``source`` the
command, the node's detector and the config (less ``llp.noise_seed`` and the local
paths ``data.data_dir`` and ``logging.log_dir``). The nodes' k-means models are
node-local and not private: they are not written. ``dp_proto.load_release(path)`` loads
a node's table; ``result["release_dir"]`` is the ``release`` folder. A run with exact
proportions writes nothing.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import torch

from dp_proto.experiments._release import new_run_dir, published_config
from dp_proto.experiments.config import merge_config, validate_config
from dp_proto.experiments.defaults import LLP_DEFAULTS, load_llp_config

__all__ = ["LLP_DEFAULTS", "load_llp_config", "run_llp_experiment", "write_llp_releases"]

# Config keys a release does not publish: local paths, and the noise seed (it replays the noise).
_NOT_PUBLISHED = (("data", "data_dir"), ("logging", "log_dir"), ("llp", "noise_seed"))


def _same_model(x, y) -> bool:
    """Whether two node models (k-means or bag learner) have identical tensors."""
    if hasattr(x, "centres"):
        return torch.equal(x.centres, y.centres) and torch.equal(x.cluster_labels, y.cluster_labels)
    a, b = x.network.state_dict(), y.network.state_dict()
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _same_releases(a, b) -> bool:
    """Whether two network results hold identical models and released proportions."""
    models = all(
        _same_model(x, y)
        for ms_a, ms_b in zip(a.models, b.models, strict=True)
        for x, y in zip(ms_a, ms_b, strict=True)
    )
    return models and all(
        torch.equal(x.proportions, y.proportions) for x, y in zip(a.proportions, b.proportions, strict=True)
    )


def run_llp_experiment(config: dict[str, Any]) -> dict[str, Any]:
    """Train every node of the chosen group on one fold's training windows and evaluate on
    its test windows. Returns the detectors, the neighbour table, per-node accuracy and
    epsilon (and bytes exchanged, distributed), the network's accuracy, the wall time,
    ``release_dir`` (a private run: the folder of the nodes' releases, see the module
    docstring; else ``None``), the ``NetworkResult`` as ``network``, the ``config`` and,
    with ``run.compare``, the simulation's accuracy and whether it matched.

    Raises
    ------
    ConfigError
        A key the experiment does not have, or a value of the wrong type (one line,
        ``dp_proto.experiments.config.validate_config``).
    ValueError
        ``run.compare`` without ``run.distributed`` (or, private, without
        ``llp.noise_seed``), an anchor out of range.
    """
    from dp_proto.data.geometry import nearest_neighbours
    from dp_proto.data.loaders.scats import load_scats_counts
    from dp_proto.data.sensors import node_datasets, time_block_folds
    from dp_proto.llp import LLPConfig, evaluate, simulate_network

    config = merge_config(LLP_DEFAULTS, config)
    validate_config(config, "llp")
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
        learner=settings["learner"],
        own_proportions=settings["own_proportions"],
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
    release_dir = None
    if private:
        release_dir = str(write_llp_releases(config, result, [n.detector for n in nodes]).resolve())
    out: dict[str, Any] = {
        "detectors": [n.detector for n in nodes],
        "neighbours": nbrs.tolist(),
        "nodes": per_node,
        "accuracy": float(ev.accuracy),
        "own_accuracy": float(ev.own_accuracy),
        "seconds": seconds,
        "distributed": bool(run["distributed"]),
        "release_dir": release_dir,
        "network": result,
        "config": config,
    }
    if run["compare"]:
        sim = simulate_network(nodes, nbrs, llp_config, train_masks=train)
        out["simulation_accuracy"] = float(evaluate(sim, nodes, test).accuracy)
        out["identical_to_simulation"] = _same_releases(result, sim)
    return out


def write_llp_releases(config: dict[str, Any], result: Any, detectors: list[Any]) -> Path:
    """Write every node's release (``result.node_release(i)``) to ``node_<i>/`` of a new
    ``<log_dir>/<name>/version_N/release/`` folder, with ``source``: the command, the
    node's detector and the config less local paths and ``llp.noise_seed``.

    Parameters
    ----------
    config : dict
        The run's full config.
    result : NetworkResult
        The run's result (``simulate_network`` or ``as_network_result``).
    detectors : list
        The nodes' detectors, in node order.

    Returns
    -------
    Path
        The ``release`` folder.
    """
    name = config["logging"]["name"] or "scats_llp"
    folder = new_run_dir(config["logging"]["log_dir"], name) / "release"
    published = published_config(config, _NOT_PUBLISHED)
    for i, detector in enumerate(detectors):
        source = {"command": "dp-proto llp", "detector": detector, "config": published}
        release = dataclasses.replace(result.node_release(i).to_release(), source=source)
        release.save(folder / f"node_{i}")
    return folder
