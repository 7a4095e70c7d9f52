"""How the Yale crop changes what pixels reveal: the fixed box against centred faces.

For each crop (``YALE_DEFAULT_CROP`` at 30 x 32, ``YALE_FACE_CROP`` at 40 x 36) and
each of ``--splits`` halvings of the 164 faces (stratified by identity, as in
``anonymizer_tradeoff.py``), a logistic regression on standardised pixels is trained on
one half and scored on the other, once for the condition (regular label, 11 classes)
and once for the identity (private label, 15 classes). Prints a table and one JSON line
``{"benchmark": "yale_crops", "results": {crop: {"condition": [mean, std],
"identity": [mean, std]}}}``.

Usage::

    python -m benchmarks.studies.yale_crops --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from benchmarks.common import emit_json, resolve_data_dir, run_metadata
from dp_proto.data import (
    YALE_DEFAULT_CROP,
    YALE_DEFAULT_SIZE,
    YALE_FACE_CROP,
    YALE_FACE_SIZE,
    load_yale_faces,
)

BENCHMARK = "yale_crops"
CROPS = {"box": (YALE_DEFAULT_CROP, YALE_DEFAULT_SIZE), "face": (YALE_FACE_CROP, YALE_FACE_SIZE)}


def probe_accuracy(x: np.ndarray, labels: np.ndarray, strata: np.ndarray, seed: int) -> float:
    """Held-out accuracy of a logistic regression on standardised ``x (n, d)``."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    train, test = train_test_split(np.arange(len(x)), train_size=0.5, stratify=strata, random_state=seed)
    model = make_pipeline(StandardScaler(), LogisticRegression(C=0.1, max_iter=2000))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(x[train], labels[train])
    return float(model.score(x[test], labels[test]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=None, help="shared data directory (Yale faces)")
    p.add_argument("--splits", type=int, default=6, help="halvings, seeds 100, 101, ... (6)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    started = time.perf_counter()
    results = {}
    for name, (crop, size) in CROPS.items():
        faces = load_yale_faces(resolve_data_dir(args.data_dir), crop=crop, size=size)
        x = faces.images.reshape(len(faces.images), -1)
        scores = {
            task: [probe_accuracy(x, labels, faces.private, 100 + k) for k in range(args.splits)]
            for task, labels in (("condition", faces.regular), ("identity", faces.private))
        }
        results[name] = {task: [round(float(np.mean(v)), 4), round(float(np.std(v)), 4)] for task, v in scores.items()}
        results[name]["image_size"] = list(size)
        print(
            f"{name:>4} {size[0]}x{size[1]}: condition {results[name]['condition'][0]:.3f} "
            f"+- {results[name]['condition'][1]:.3f}, identity {results[name]['identity'][0]:.3f} "
            f"+- {results[name]['identity'][1]:.3f}"
        )
    emit_json(
        {
            "benchmark": BENCHMARK,
            "results": results,
            "settings": {"splits": args.splits},
            **run_metadata(started),
            "notes": [
                "logistic regression (C = 0.1) on standardised pixels, trained on one half of the "
                "faces (stratified by identity), scored on the other; mean and std over the splits"
            ],
        },
        args.out,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
