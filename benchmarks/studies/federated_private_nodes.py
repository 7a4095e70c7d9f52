"""How should a private node spend its budget when its model will be merged?

Federated LVQ (Brinkrolf 2023, chapter 6) averages the nodes' prototypes and relevance
matrices. A private node (``DPGMLVQ``) spends ``init_fraction`` of its epsilon on noisy
class means and the rest on DP-SGD. DP-SGD noise moves the prototypes far from the class
means, in directions the node's own metric learns to ignore; the merge averages those
prototypes under a metric that no longer ignores them. The noisy class means, by contrast,
are unbiased: averaging them over the nodes (weighted by the noisy counts) is close to
pooling the nodes' class sums, and their noise shrinks with the number of nodes.

The study compares budget splits on UCI satimage, a development set the sparse/federated
benchmark does not use: ``--repeats`` draws of 2000 training records (stratified), split
into 5 nodes by ``node_splits`` (scenario 1), z-scored on the training records, public
bounds [-4, 4], tested on 2000 other records; macro F1 of the merged model and the mean
node, per epsilon per node. Prints a table and one JSON line
``{"benchmark": "federated_private_nodes", "results": {config: {epsilon: {"merged": [mean,
std], "node": [mean, std]}}}}``.

Usage::

    python -m benchmarks.studies.federated_private_nodes --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np
import torch
from sklearn.metrics import f1_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from tqdm import tqdm

from benchmarks.common import emit_json, load_benchmark_sets, resolve_data_dir, run_metadata
from dp_proto.lvq.distributed import federated_fit
from dp_proto.lvq.federated import node_splits
from dp_proto.lvq.private import DPGMLVQ

BENCHMARK = "federated_private_nodes"
#: (init_fraction, epochs) of every private node; sampling_rate 0.05 throughout.
CONFIGS = {
    "init 0.2, 20 epochs (default split)": (0.2, 20),
    "init 0.5, 5 epochs": (0.5, 5),
    "init 0.8, 2 epochs": (0.8, 2),
    "init 0.95, 1 epoch": (0.95, 1),
}
EPSILONS = (1.0, 5.0)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=None, help="shared data directory (uci/satimage.tsv.gz)")
    p.add_argument("--repeats", type=int, default=3, help="draws of the records, seeds 0, 1, ... (3)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    started = time.perf_counter()
    X, y = load_benchmark_sets(("satimage",), resolve_data_dir(args.data_dir))["satimage"]
    labels = np.unique(y)
    scores: dict = {c: {e: {"merged": [], "node": []} for e in EPSILONS} for c in CONFIGS}
    for seed in tqdm(range(args.repeats), desc="repeats", file=sys.stderr):
        train, rest = train_test_split(np.arange(len(y)), train_size=2000, stratify=y, random_state=seed)
        test = train_test_split(rest, train_size=2000, stratify=y[rest], random_state=seed)[0]
        scaler = StandardScaler().fit(X[train])
        Xtr, Xte, ytr, yte = scaler.transform(X[train]), scaler.transform(X[test]), y[train], y[test]
        nodes = node_splits(ytr, 5, random_state=seed)
        for name, (fraction, epochs) in CONFIGS.items():
            for eps in EPSILONS:
                node = DPGMLVQ(
                    epsilon=eps, bounds=(-4.0, 4.0), classes=labels, sampling_rate=0.05,
                    epochs=epochs, init_fraction=fraction,
                )  # fmt: skip
                fed = federated_fit(node, Xtr, ytr, nodes, random_state=seed)  # fresh noise
                f1 = [f1_score(yte, m.predict(Xte), average="macro") for m in (fed.merged, *fed.nodes)]
                scores[name][eps]["merged"].append(f1[0])
                scores[name][eps]["node"].append(float(np.mean(f1[1:])))
    results = {
        name: {
            str(eps): {k: [round(float(np.mean(v)), 4), round(float(np.std(v)), 4)] for k, v in cell.items()}
            for eps, cell in per.items()
        }
        for name, per in scores.items()
    }
    for name, per in results.items():
        cells = "  ".join(f"eps {e}: merged {c['merged'][0]:.3f}, node {c['node'][0]:.3f}" for e, c in per.items())
        print(f"{name:<36} {cells}", file=sys.stderr)
    emit_json(
        {
            "benchmark": BENCHMARK,
            "results": results,
            "settings": {"repeats": args.repeats, "nodes": 5, "train": 2000, "test": 2000, "sampling_rate": 0.05},
            **run_metadata(started),
            "notes": [
                "UCI satimage (36 features, 6 classes), development data; DPGMLVQ per node, fresh noise; "
                "macro F1 of the merged model and the mean over the nodes; mean and std over the repeats"
            ],
        },
        args.out,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
