"""Typed schemas of the experiment configs, checked before anything runs.

A schema is a nested dict shaped like the experiment's defaults whose leaves are
:class:`Spec` objects. Most specs are derived from the defaults (a default ``30`` makes
the key an integer, ``0.01`` a number, ``true`` a boolean, ``"runs"`` a string, ``[256]``
a list of integers); the keys whose default is ``None`` (optional values), the choices
(``model.type``: ``glvq``, ``gmlvq`` or ``lgmlvq``) and the keys that take more than
their default's type (``data.batch_size``: an integer or null) are declared in
:data:`DECLARED`, one table per experiment (``lvq``, ``svdd``, ``llp``, ``anonymizer``).

Types: an integer is never a boolean; a number (float) also takes an integer; a list
also takes a tuple (from Python); ``null`` (``None``) only where declared optional.

The first value that does not fit is reported in one line that names the key, the
expected type and the value::

    training.max_epochs: expected an integer, got 'ten' (str)
    model.type: expected one of 'glvq', 'gmlvq', 'lgmlvq', got 'svm' (str)

as a :class:`ConfigTypeError` (a ``ValueError`` and a ``TypeError``), the kind of
:class:`ConfigError` that every config problem raises.
"""

from __future__ import annotations

import importlib
import numbers
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "check_accelerator",
    "ConfigError",
    "ConfigTypeError",
    "UnknownKeyError",
    "show_value",
    "Spec",
    "Anything",
    "Int",
    "Float",
    "Bool",
    "Str",
    "Null",
    "Choice",
    "ListOf",
    "AnyOf",
    "optional",
    "spec_from_default",
    "build_schema",
    "check",
    "DECLARED",
    "EXPERIMENT_DEFAULTS",
    "experiment_defaults",
    "experiment_schema",
    "find_experiment",
    "schema_for_defaults",
    "validate_config",
]


class ConfigError(ValueError):
    """A config that cannot run: its message is one line, fit for the command line."""


class ConfigTypeError(ConfigError, TypeError):
    """A config value of the wrong type, or a section given as something else."""


class UnknownKeyError(ConfigError, KeyError):
    """A config key that the experiment does not have (a typo must not pass silently)."""

    def __str__(self) -> str:  # KeyError would show the message quoted
        return str(self.args[0]) if self.args else ""


def show_value(value: Any) -> str:
    """``'ten' (str)``: the value (shortened) and its type, for an error message."""
    if value is None:
        return "null"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


class Spec:
    """The type of one config value.

    Attributes
    ----------
    description : str
        What the value must be, as in "expected an integer".
    """

    description = "anything"

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` fits."""
        return True

    def error(self, value: Any, key: str) -> str | None:
        """The one-line message for ``value`` at ``key``, or ``None`` if it fits."""
        return None if self.accepts(value) else f"{key}: expected {self.description}, got {show_value(value)}"

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self.description}>"


class Anything(Spec):
    """Any value (a key whose default is ``None`` and that no table declares)."""


class Int(Spec):
    """An integer (``bool`` excluded)."""

    description = "an integer"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)


class Float(Spec):
    """A real number; an integer is accepted (``bool`` excluded)."""

    description = "a number"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)


class Bool(Spec):
    """``true`` or ``false``."""

    description = "a boolean (true or false)"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool)


class Str(Spec):
    """A string."""

    description = "a string"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str)


class Null(Spec):
    """``null`` (``None``)."""

    description = "null"

    def accepts(self, value: Any) -> bool:
        return value is None


class Choice(Spec):
    """One of a fixed set of strings.

    Parameters
    ----------
    *values : str
        The allowed values.
    ignore_case : bool, default False
        Accept ``"GMLVQ"`` for ``"gmlvq"`` (for a runner that lower-cases the value).
    """

    def __init__(self, *values: str, ignore_case: bool = False) -> None:
        self.values = tuple(values)
        self.ignore_case = ignore_case
        listed = ", ".join(repr(v) for v in self.values)
        self.description = listed if len(self.values) == 1 else "one of " + listed

    def accepts(self, value: Any) -> bool:
        if not isinstance(value, str):
            return False
        return (value.lower() if self.ignore_case else value) in self.values


class ListOf(Spec):
    """A list (or tuple) whose every item fits ``item``.

    Parameters
    ----------
    item : Spec
        The type of the items.
    length : int, optional
        The exact number of items, e.g. 2 for ``[lower, upper]``.
    """

    def __init__(self, item: Spec, length: int | None = None) -> None:
        self.item, self.length = item, length
        if isinstance(item, Anything):
            items = "items"
        elif isinstance(item, AnyOf | Choice):
            items = f"items (each {item.description})"
        else:
            items = _plural(item.description)
        self.description = f"a list of {length} {items}" if length is not None else f"a list of {items}"

    def accepts(self, value: Any) -> bool:
        return self._outer_fits(value) and all(self.item.accepts(v) for v in value)

    def _outer_fits(self, value: Any) -> bool:
        return (
            isinstance(value, Sequence)
            and not isinstance(value, str | bytes)
            and (self.length is None or len(value) == self.length)
        )

    def error(self, value: Any, key: str) -> str | None:
        if not self._outer_fits(value):
            return f"{key}: expected {self.description}, got {show_value(value)}"
        for i, item in enumerate(value):
            message = self.item.error(item, f"{key}[{i}]")
            if message is not None:
                return message
        return None


class AnyOf(Spec):
    """A value that fits one of several specs (``optional(Int())``, ``Int() | 'auto'``).

    Parameters
    ----------
    *options : Spec
        The alternatives, in the order the message names them.
    """

    def __init__(self, *options: Spec) -> None:
        self.options = tuple(options)
        names = [o.description for o in self.options]
        self.description = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]

    def accepts(self, value: Any) -> bool:
        return any(o.accepts(value) for o in self.options)

    def error(self, value: Any, key: str) -> str | None:
        if self.accepts(value):
            return None
        # a list whose outer shape fits a list option: name the item that does not
        lists = [o for o in self.options if isinstance(o, ListOf) and o._outer_fits(value)]
        if len(lists) == 1:
            return lists[0].error(value, key)
        return f"{key}: expected {self.description}, got {show_value(value)}"


def _plural(description: str) -> str:
    """``"an integer"`` -> ``"integers"`` (for "a list of integers")."""
    word = description.removeprefix("an ").removeprefix("a ")
    if word.startswith("list of"):
        return "lists of " + word.removeprefix("list of ")
    head, _, tail = word.partition(" ")
    return head + "s" + (" " + tail if tail else "")


def optional(spec: Spec) -> AnyOf:
    """``spec`` or ``null``."""
    return AnyOf(spec, Null())


def spec_from_default(value: Any) -> Spec:
    """The spec a default implies: ``True`` a boolean, ``3`` an integer, ``0.1`` a number,
    ``"x"`` a string, ``[256]`` a list of integers, ``None`` (or an empty list's items)
    anything."""
    if isinstance(value, bool):
        return Bool()
    if isinstance(value, numbers.Integral):
        return Int()
    if isinstance(value, numbers.Real):
        return Float()
    if isinstance(value, str):
        return Str()
    if isinstance(value, list | tuple):
        items = [spec_from_default(v) for v in value]
        kinds = {type(s) for s in items}
        if kinds == {Int, Float}:
            return ListOf(Float())
        return ListOf(items[0] if len(kinds) == 1 else Anything())
    return Anything()


def build_schema(defaults: Mapping[str, Any], declared: Mapping[str, Spec] | None = None) -> dict[str, Any]:
    """The schema of ``defaults``: a nested dict of the same sections whose leaves are
    the ``declared`` specs (keyed by dotted path, ``"training.lr"``) or else the spec
    derived from the default (:func:`spec_from_default`). A declared key that the
    defaults lack is ignored."""
    declared = declared or {}

    def build(section: Mapping[str, Any], prefix: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, default in section.items():
            where = prefix + key
            if isinstance(default, dict):
                out[key] = build(default, where + ".")
            else:
                out[key] = declared.get(where) or spec_from_default(default)
        return out

    return build(defaults, "")


def check(config: Mapping[str, Any], schema: Mapping[str, Any], prefix: str = "") -> str | None:
    """The message of the first value of ``config`` that ``schema`` refuses, or ``None``.

    Keys the schema lacks are left to the loader (it refuses unknown keys)."""
    for key, value in config.items():
        spec = schema.get(key)
        where = f"{prefix}{key}"
        if isinstance(spec, dict):
            if not isinstance(value, Mapping):
                return f"{where}: must be a mapping (a config section), got {show_value(value)}"
            message = check(value, spec, where + ".")
        elif isinstance(spec, Spec):
            message = spec.error(value, where)
        else:
            message = None
        if message is not None:
            return message
    return None


# ---------------------------------------------------------------- the experiments

# Kept literal (loading a config imports no model code); tests/experiments checks them
# against dp_proto.experiments.data.SOURCES, dp_proto.lvq.losses.TRANSFER_FUNCTIONS,
# dp_proto.privacy.dpsgd_plan.CALIBRATIONS and dp_proto.anonymizer.training.MODES.
_SOURCES = Choice("bundled", "uci", "mnist", "synthetic")
_PATH = optional(Str())
_SEED = optional(Int())
_LABELS = optional(ListOf(AnyOf(Int(), Str())))
# [lower, upper]: numbers, or one list of numbers per feature each
_BOUNDS = optional(ListOf(AnyOf(Float(), ListOf(Float())), length=2))

#: Per experiment, the specs that are not derived from the defaults: optional keys (default
#: ``None``), choices, and keys that take more than their default's type.
DECLARED: dict[str, dict[str, Spec]] = {
    "lvq": {
        "data.source": _SOURCES,
        "data.data_dir": _PATH,
        "data.scaling": Choice("standard", "minmax", "none"),
        "data.pca": optional(Int()),
        "data.batch_size": optional(Int()),  # null: one full batch (L-BFGS)
        "data.subsample": optional(Int()),
        "model.type": Choice("glvq", "gmlvq", "lgmlvq", ignore_case=True),
        "model.prototypes_per_class": AnyOf(Int(), ListOf(Int())),
        "model.rank": optional(Int()),
        "model.omega_init": Choice("identity", "scaled_identity", "random"),
        "model.backbone": optional(Choice("cnn")),
        "training.optimizer": Choice("adam", "sgd", "lbfgs"),
        "training.transfer_fn": Choice("identity", "sigmoid"),
        "logging.name": optional(Str()),
        "logging.image_shape": optional(ListOf(Int())),
        "privacy.epsilon": optional(Float()),
        "privacy.calibration": Choice("ledger", "paper"),
        "privacy.bounds": _BOUNDS,
        "privacy.classes": _LABELS,
        "privacy.expected_batch_size": optional(Float()),
        "privacy.noise_seed": _SEED,
        "privacy.per_record": optional(Bool()),  # null: per record exactly when there is a backbone
    },
    "svdd": {
        "data.source": _SOURCES,
        "data.data_dir": _PATH,
        "data.scaling": Choice("standard", "none"),
        "privacy.epsilon": optional(Float()),
        "privacy.bounds": _BOUNDS,
        "privacy.classes": _LABELS,
        "privacy.noise_seed": _SEED,
        "svdd.bounds": _BOUNDS,
        "svdd.starts": AnyOf(Choice("auto", "normal", "grid", "uniform", "training"), ListOf(ListOf(Float()))),
        "svdd.n_starts": AnyOf(Int(), Choice("auto")),
        "svdd.r_max": optional(Float()),
        "svdd.merge_tol": optional(Float()),
        "svdd.min_count": optional(Float()),
        "svdd.grid_step": optional(Float()),
        "svdd.release": Choice("support_function", "equilibrium_points"),
        "svdd.device": optional(Str()),
        "svdd.dtype": Choice("float32", "float64"),
        "svdd.verbose": optional(Int()),
        "logging.name": optional(Str()),
    },
    "llp": {
        "data.data_dir": _PATH,
        "data.neighbours": optional(Int()),  # null: every other node of the group
        "llp.epsilon": optional(Float()),  # null or <= 0: exact proportions
        "llp.estimator": Choice("clipped", "unbiased"),
        "llp.noise_seed": _SEED,
        "logging.name": optional(Str()),
    },
    "anonymizer": {
        "data.source": Choice("synthetic", "yale", "folder", "csv"),
        "data.data_dir": _PATH,
        "data.path": _PATH,
        "data.pattern": optional(Str()),
        "model.encoder": Choice("mlp", "cnn"),
        "training.mode": Choice("toggle", "simultaneous"),
        "training.toggle_steps": optional(Int()),
        "training.encoder_steps": optional(Int()),
        "training.optimizer": Choice("nesterov", "adam"),
        "logging.name": optional(Str()),
        "privacy.epsilon": optional(Float()),
        "privacy.expected_batch_size": optional(Float()),
        "privacy.num_regular": optional(Int()),
        "privacy.num_private": optional(Int()),
        "privacy.noise_seed": _SEED,
    },
}

#: Where each experiment's defaults live: ``(module, attribute)``.
EXPERIMENT_DEFAULTS: dict[str, tuple[str, str]] = {
    "lvq": ("dp_proto.experiments.defaults", "DEFAULT_CONFIG"),
    "svdd": ("dp_proto.experiments.defaults", "SVDD_DEFAULTS"),
    "llp": ("dp_proto.experiments.defaults", "LLP_DEFAULTS"),
    "anonymizer": ("dp_proto.experiments.defaults", "ANONYMIZER_DEFAULTS"),
}


def experiment_defaults(experiment: str) -> dict[str, Any]:
    """The defaults of ``experiment`` (``"lvq"``, ``"svdd"``, ``"llp"``, ``"anonymizer"``);
    imports its module."""
    try:
        module, attribute = EXPERIMENT_DEFAULTS[experiment]
    except KeyError:
        raise ConfigError(f"unknown experiment {experiment!r}; expected one of {sorted(EXPERIMENT_DEFAULTS)}") from None
    return getattr(importlib.import_module(module), attribute)


def experiment_schema(experiment: str) -> dict[str, Any]:
    """The schema of ``experiment``: its defaults' types with :data:`DECLARED` on top."""
    return build_schema(experiment_defaults(experiment), DECLARED[experiment])


def _key_tree(section: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _key_tree(v) if isinstance(v, dict) else None for k, v in section.items()}


def find_experiment(defaults: Mapping[str, Any]) -> str | None:
    """The experiment whose defaults ``defaults`` are (the same dict, or one with the same
    sections and keys), among the experiment modules already imported; ``None`` if none."""
    loaded = {}
    for name, (module, attribute) in EXPERIMENT_DEFAULTS.items():
        mod = sys.modules.get(module)
        if mod is not None and isinstance(getattr(mod, attribute, None), dict):
            loaded[name] = getattr(mod, attribute)
            if loaded[name] is defaults:
                return name
    tree = _key_tree(defaults)
    return next((name for name, d in loaded.items() if _key_tree(d) == tree), None)


def schema_for_defaults(defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The schema of the experiment whose defaults these are (:func:`find_experiment`),
    or, for other defaults, the types derived from them alone."""
    name = find_experiment(defaults)
    return build_schema(defaults, DECLARED[name] if name is not None else None)


def validate_config(config: Mapping[str, Any], schema: Mapping[str, Any] | str) -> None:
    """Check every value of ``config`` against ``schema`` (a schema, or an experiment's name).

    Raises
    ------
    ConfigTypeError
        At the first value that does not fit, with the one-line message
        ``"<key>: expected <type>, got <value> (<its type>)"``.
    """
    if isinstance(schema, str):
        schema = experiment_schema(schema)
    message = check(config, schema)
    if message is not None:
        raise ConfigTypeError(message)


def check_accelerator(accelerator: str, key: str = "training.accelerator") -> None:
    """``ConfigError`` (one line) when ``accelerator`` asks for a GPU that torch cannot
    use on this machine; ``auto`` and ``cpu`` always pass."""
    from dp_proto._validation import missing_gpu

    name = str(accelerator).lower()
    missing = missing_gpu("cuda" if name == "gpu" else name)
    if missing is not None:
        raise ConfigError(
            f"{key}: {accelerator!r} asks for {missing}, but torch sees none on this machine; use cpu or auto"
        )
