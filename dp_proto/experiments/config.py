"""The one config loader of every experiment: defaults, overlaid with a YAML file,
overlaid with ``key.sub=value`` strings, then checked against the experiment's typed
schema (:mod:`dp_proto.experiments.schema`) before anything runs.

An experiment's config is a nested dict whose every key has a default; unknown keys are
refused (a typo must not pass silently), a section stays a section, and every value must
have its key's type. Every problem raises a :class:`ConfigError` with a one-line message
(a malformed file names its line and column), which ``dp-proto`` prints without a
traceback.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from dp_proto.experiments.schema import (
    ConfigError,
    ConfigTypeError,
    UnknownKeyError,
    schema_for_defaults,
    show_value,
    validate_config,
)

__all__ = [
    "ConfigError",
    "ConfigTypeError",
    "UnknownKeyError",
    "merge_config",
    "read_config",
    "parse_override",
    "nested",
    "load_yaml",
    "read_file",
    "validate_config",
]


class _Loader(yaml.SafeLoader):
    """YAML's safe loader that also reads ``1e-5``, ``1E5`` and ``.5e-3`` as numbers
    (YAML 1.1, PyYAML's default, needs ``1.0e-5`` and would hand a string to
    ``privacy.delta``)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _yaml_problem(err: yaml.YAMLError) -> str:
    """``line 3, column 7: mapping values are not allowed here`` (lines and columns from 1)."""
    if isinstance(err, yaml.MarkedYAMLError):
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = err.problem or err.context or "invalid YAML"
        if err.context and err.problem:
            context = err.context
            if err.context_mark is not None and err.context_mark is not mark:
                context += f" at line {err.context_mark.line + 1}, column {err.context_mark.column + 1}"
            problem += f" ({context})"
        return where + problem
    return " ".join(str(err).split())


def load_yaml(text: str, source: str = "<string>") -> Any:
    """Parse ``text`` with the safe loader (numbers in exponent form included).

    Parameters
    ----------
    text : str
        YAML.
    source : str, default "<string>"
        What ``text`` is (a file name), for the message of a malformed text.

    Raises
    ------
    ConfigError
        ``"<source>, line L, column C: <problem>"`` when ``text`` is not valid YAML.
    """
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}, {_yaml_problem(err)}") from None


def merge_config(base: Mapping[str, Any], override: Mapping[str, Any], path: str = "") -> dict[str, Any]:
    """Recursively overlay ``override`` on ``base`` (a new dict); an unknown key raises
    ``UnknownKeyError`` (a ``KeyError``), a non-mapping given for a section
    ``ConfigTypeError`` (a ``TypeError``). Types are not checked here (see
    :func:`validate_config`)."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        where = f"{path}{key}"
        if key not in out:
            raise UnknownKeyError(f"unknown config key {where!r}; valid keys here: {', '.join(sorted(out))}")
        if isinstance(out[key], dict):
            if not isinstance(value, Mapping):
                raise ConfigTypeError(f"{where}: must be a mapping (a config section), got {show_value(value)}")
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
    """``"model.rank=10"`` -> ``{"model": {"rank": 10}}`` (the value parsed as YAML, so
    ``1e-6`` is a float and ``null`` is ``None``)."""
    dotted, sep, raw = item.partition("=")
    if not sep or not dotted or any(not part for part in dotted.split(".")):
        raise ConfigError(f"override {item!r} must look like key.subkey=value")
    return nested(dotted, load_yaml(raw, f"override {item!r}"))


def read_file(path: str | Path) -> dict[str, Any]:
    """The settings of the YAML config file ``path``: a mapping with at least one key.

    Raises
    ------
    FileNotFoundError
        There is no such file.
    ConfigError
        The file cannot be read, is not valid YAML (its line and column in the message),
        or is empty (nothing, only comments or ``null``).
    ConfigTypeError
        Its top level is not a mapping.
    """
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError) as err:
        reason = getattr(err, "strerror", None) or getattr(err, "reason", None) or err
        raise ConfigError(f"{path}: cannot read the config file ({reason})") from None
    loaded = load_yaml(text, str(path))
    if loaded is None or loaded == {}:
        raise ConfigError(
            f"{path}: the config file holds no settings (it is empty, or only comments or null); "
            "give at least one key: value"
        )
    if not isinstance(loaded, Mapping):
        raise ConfigTypeError(
            f"{path}: a config file must hold a mapping of keys to values (key: value), "
            f"got {show_value(loaded)} at its top level"
        )
    return dict(loaded)


def read_config(
    defaults: Mapping[str, Any],
    path: str | Path | None = None,
    overrides: Iterable[str] | None = None,
    *,
    schema: Mapping[str, Any] | str | None = None,
) -> dict[str, Any]:
    """``defaults`` overlaid with the YAML file ``path`` (if given), then with each
    ``key.sub=value`` override in order, then validated.

    Parameters
    ----------
    defaults : mapping
        Every key with its default (e.g. ``dp_proto.experiments.lvq.DEFAULT_CONFIG``).
    path : str or Path, optional
        A YAML config file (:func:`read_file`).
    overrides : iterable of str, optional
        ``key.sub=value`` strings (:func:`parse_override`).
    schema : mapping or str, optional
        The schema to check the result against, or an experiment's name; default that of
        the experiment whose defaults ``defaults`` are
        (:func:`dp_proto.experiments.schema.schema_for_defaults`).

    Raises
    ------
    ConfigError
        With a one-line message: a malformed or empty file, an unknown key
        (``UnknownKeyError``), a value of the wrong type (``ConfigTypeError``).
    """
    config = copy.deepcopy(dict(defaults))
    if path is not None:
        config = merge_config(config, read_file(path))
    for item in overrides or ():
        config = merge_config(config, parse_override(item))
    validate_config(config, schema_for_defaults(defaults) if schema is None else schema)
    return config
