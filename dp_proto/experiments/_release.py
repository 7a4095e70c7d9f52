"""What the runners share to write a private run's release: the run folder and the
config as a release publishes it (``source``), less local paths and the noise seed."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["new_run_dir", "published_config"]

_VERSION = re.compile(r"version_(\d+)")


def new_run_dir(log_dir: str | Path, name: str) -> Path:
    """Create and return ``<log_dir>/<name>/version_N``, ``N`` one above the largest
    ``version_N`` already there (0 for none), as Lightning's ``TensorBoardLogger``
    numbers its runs; a folder another run created meanwhile is skipped.

    Parameters
    ----------
    log_dir : str or Path
        The runs folder (``logging.log_dir``).
    name : str
        The experiment's name (``logging.name`` or the runner's default).

    Returns
    -------
    Path
        The new, empty folder.
    """
    parent = Path(log_dir) / name
    parent.mkdir(parents=True, exist_ok=True)
    taken = [int(m.group(1)) for p in parent.iterdir() if p.is_dir() and (m := _VERSION.fullmatch(p.name))]
    version = max(taken, default=-1) + 1
    while True:
        path = parent / f"version_{version}"
        try:
            path.mkdir()
        except FileExistsError:
            version += 1
            continue
        return path


def published_config(config: Mapping[str, Any], not_published: Iterable[tuple[str, ...]]) -> dict[str, Any]:
    """A copy of ``config`` without the keys of ``not_published`` (local paths and the
    noise seed, which would replay the noise).

    Parameters
    ----------
    config : mapping
        The run's full config.
    not_published : iterable of tuple of str
        The keys to leave out, as paths: ``("privacy", "noise_seed")``, ``("seed",)``.

    Returns
    -------
    dict
    """
    published = copy.deepcopy(dict(config))
    for *sections, key in not_published:
        section: Any = published
        for name in sections:
            section = section.get(name) if isinstance(section, dict) else None
        if isinstance(section, dict):
            section.pop(key, None)
    return published
