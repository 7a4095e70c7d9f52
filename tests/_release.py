"""Checks shared by the release tests: the release's files, its manifest, the fitted
attributes a loaded model restores, and loading in another Python process, as a user of
the published model would."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dp_proto.privacy.ledger import PrivacyLedger

# names a pickle of torch or numpy objects would hold (long enough not to occur by chance)
PICKLE_MARKERS = (b"torch._utils", b"_rebuild_tensor", b"numpy.core.multiarray", b"numpy._core", b"_reconstruct")

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


# -- the files of a release --------------------------------------------------------------------------------------
def release_files(path: Path) -> dict[str, bytes]:
    """The release directory's files: ``{name: bytes}``."""
    return {p.name: p.read_bytes() for p in Path(path).iterdir()}


def check_no_pickle(files: dict[str, bytes]) -> None:
    """No file starts as a pickle or holds the names a pickle of torch or numpy objects would."""
    for name, data in files.items():
        assert not data.startswith(b"\x80"), name  # the opcode every pickle protocol >= 2 starts with
        assert not any(marker in data for marker in PICKLE_MARKERS), name


def check_safetensors_layout(data: bytes) -> dict:
    """The file is an 8-byte header length, a JSON header and the raw tensor bytes it
    declares, back to back up to the end: no room for anything else. Returns the header."""
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + length])
    spans = sorted(tuple(v["data_offsets"]) for k, v in header.items() if k != "__metadata__")
    end = 0
    for start, stop in spans:
        assert start == end
        end = stop
    assert 8 + length + end == len(data)
    return header


# -- the manifest ------------------------------------------------------------------------------------------------
def walk_manifest(node: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf value of a JSON document with the key it sits under (a list's items
    under the list's key)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from walk_manifest(v, k)
    elif isinstance(node, list):
        for v in node:
            yield from walk_manifest(v, key)
    else:
        yield key, node


def check_no_seed_values(node: Any) -> None:
    """Every value under a key naming a seed, a generator or an rng is ``None``."""
    for key, value in walk_manifest(node):
        if "seed" in key or "generator" in key or "rng" in key:
            assert value is None, key


# -- fitted attributes -------------------------------------------------------------------------------------------
def curator_only_attributes(cls: type) -> set[str]:
    """Fitted attributes the class docstring documents as curator-only."""
    found, current = set(), None
    for line in (cls.__doc__ or "").splitlines():
        header = re.match(r"^    (\w+_) : ", line)
        if header:
            current = header.group(1)
        elif current and "curator-only" in line.lower():
            found.add(current)
    return found


def same_value(a: Any, b: Any) -> bool:
    """``b`` (a loaded model's attribute) equals ``a`` (the fitted one) exactly: a module of
    the same type, repr and state; a tensor or array of the same dtype (and device) and
    values; a ledger with the same state and events; the public bounds scaler (it has
    ``lower_`` and ``upper_``) with the same bounds; any other value of the same type."""
    if isinstance(a, torch.nn.Module):
        sa, sb = a.state_dict(), b.state_dict()
        return (
            type(a) is type(b)
            and sa.keys() == sb.keys()
            and all(same_value(sa[k], sb[k]) for k in sa)
            and repr(a) == repr(b)
        )
    if isinstance(a, torch.Tensor):
        return type(b) is type(a) and a.dtype == b.dtype and a.device == b.device and torch.equal(a, b)
    if isinstance(a, PrivacyLedger):
        return (
            isinstance(b, PrivacyLedger)
            and a.state_dict() == b.state_dict()
            and [e.to_dict() for e in a.events] == [e.to_dict() for e in b.events]
        )
    if hasattr(a, "lower_"):  # the public scaler
        return type(a) is type(b) and same_value(a.lower_, b.lower_) and same_value(a.upper_, b.upper_)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return type(a) is type(b) and a == b


def check_attribute_coverage(est: Any, loaded: Any, expected_drops: set[str]) -> set[str]:
    """Every fitted attribute of ``est`` (its attributes less its parameters) is restored in
    ``loaded`` with the same value (``same_value``) or is one of ``expected_drops``, and
    ``loaded`` has nothing more. Returns the restored names."""
    params = set(est.get_params())
    attributes = set(vars(est)) - params
    restored = set(vars(loaded)) - params
    assert attributes - restored == expected_drops
    assert restored == attributes - expected_drops  # nothing new appears either
    for name in sorted(restored):
        assert same_value(getattr(est, name), getattr(loaded, name)), name
    return restored
