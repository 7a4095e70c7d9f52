"""Load a release in another Python process, as a user of the published model would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

_CODE = """
import json, sys, numpy as np, torch, dp_proto
torch.set_num_threads(int(sys.argv[3]))
m = dp_proto.load_release(sys.argv[1])
X = np.load(sys.argv[2])
out = {name: getattr(m, name)(X).tolist() for name in sys.argv[4].split(",")}
out.update(epsilon=m.ledger_.get_epsilon(), type=type(m).__name__)
print(json.dumps(out))
"""


def load_in_fresh_process(release_dir: str | Path, X: np.ndarray, methods: list[str], tmp_path: Path) -> dict:
    """``dp_proto.load_release(release_dir)`` in a new Python at this process's torch
    thread count (matrix products block differently across thread counts), then each of
    ``methods`` on ``X``: ``{"type", "epsilon", method: list}``."""
    probe = Path(tmp_path) / "probe.npy"
    np.save(probe, X)
    out = subprocess.run(
        [sys.executable, "-c", _CODE, str(release_dir), str(probe), str(torch.get_num_threads()), ",".join(methods)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])
