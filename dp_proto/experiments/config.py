"""The one config loader of every experiment: defaults, overlaid with a YAML file,
overlaid with ``key.sub=value`` strings.

An experiment's config is a nested dict whose every key has a default; unknown keys are
refused (a typo must not pass silently), and a section stays a section.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = ["merge_config", "read_config", "parse_override", "nested", "load_yaml"]


class _Loader(yaml.SafeLoader):
    """YAML's safe loader that also reads ``1e-5`` as a number (YAML 1.1, PyYAML's
    default, needs ``1.0e-5`` and would hand a string to ``privacy.delta``)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def load_yaml(text: str) -> Any:
    """Parse ``text`` with the safe loader (numbers in exponent form included)."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def merge_config(base: Mapping[str, Any], override: Mapping[str, Any], path: str = "") -> dict[str, Any]:
    """Recursively overlay ``override`` on ``base`` (a new dict); unknown keys raise
    ``KeyError``, a non-mapping given for a section raises ``TypeError``."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        where = f"{path}{key}"
        if key not in out:
            raise KeyError(f"unknown config key {where!r}; valid keys here: {sorted(out)}")
        if isinstance(out[key], dict):
            if not isinstance(value, Mapping):
                raise TypeError(f"config key {where!r} must be a mapping, got {value!r}")
            out[key] = merge_config(out[key], value, where + ".")
        else:
            out[key] = value
    return out


def nested(dotted: str, value: Any) -> dict[str, Any]:
    """``nested("model.rank", 10)`` -> ``{"model": {"rank": 10}}``."""
    out: Any = value
    for part in reversed(dotted.split(".")):
        out = {part: out}
    return out


def parse_override(item: str) -> dict[str, Any]:
    """``"model.rank=10"`` -> ``{"model": {"rank": 10}}`` (the value parsed as YAML)."""
    dotted, sep, raw = item.partition("=")
    if not sep or not dotted or any(not part for part in dotted.split(".")):
        raise ValueError(f"override {item!r} must look like key.subkey=value")
    return nested(dotted, load_yaml(raw))


def read_config(
    defaults: Mapping[str, Any], path: str | Path | None = None, overrides: Iterable[str] | None = None
) -> dict[str, Any]:
    """``defaults`` overlaid with the YAML file ``path`` (if given), then with each
    ``key.sub=value`` override in order."""
    config = copy.deepcopy(dict(defaults))
    if path is not None:
        loaded = load_yaml(Path(path).read_text()) or {}
        if not isinstance(loaded, Mapping):
            raise TypeError(f"{path}: a config file must hold a mapping, got {type(loaded).__name__}")
        config = merge_config(config, loaded)
    for item in overrides or ():
        config = merge_config(config, parse_override(item))
    return config
