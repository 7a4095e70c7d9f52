"""The release format: a fitted model as a folder that can be published and loaded back.

A release is a directory with two files:

``model.safetensors``
    The model's tensors (prototypes, prototype labels, Omega, the public scaling), in
    the `safetensors <https://huggingface.co/docs/safetensors>`_ format: a JSON header
    and raw little-endian numbers, nothing that runs code when it is read.
``manifest.json``
    Everything else, human-readable (sorted keys): the format name and version, the
    dp-proto version, the registered model name, the hyperparameters, the public
    domain (label set, feature count, bounds), the privacy section (for a private
    model the ledger's epsilon, delta and events, and what the guarantee covers;
    ``{"private": false}`` otherwise), the public fitted scalars, the names of the
    fitted attributes left out, and the list of tensors with their dtype and shape and
    the SHA-256 of ``model.safetensors``.

No pickle anywhere, no random generator or noise seed, nothing curator-only: a model
writes an explicit list of what it publishes (``to_release``), never its ``__dict__``.

Models register themselves under a name (``register_model``); ``load_release`` reads
the name from the manifest and imports the module of a built-in model by name
(``importlib``, so this module imports nothing of the models and the package layers
stay one-way). A model of another package registers when its module is imported,
before ``load_release`` is called. The manifest never chooses a module to import:
only the names in ``BUILTIN_MODELS`` and the registered ones are loaded.

A model class plugs in with two methods::

    @register_model("dp_proto.MyModel")
    class MyModel:
        def to_release(self) -> Release: ...
        @classmethod
        def from_release(cls, release: Release, **options) -> MyModel: ...

This module belongs to the base of the package: it imports nothing of ``dp_proto``
but its version.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from dp_proto._release_card import release_card
from dp_proto._version import __version__

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MANIFEST_FILE",
    "TENSORS_FILE",
    "CARD_FILE",
    "BUILTIN_MODELS",
    "Release",
    "Releasable",
    "register_model",
    "register_recipe",
    "registered_name",
    "model_class",
    "read_release",
    "release_from_bytes",
    "load_release",
    "encode_hyperparameters",
    "decode_hyperparameters",
    "encode_labels",
    "decode_labels",
    "release_card",
]

FORMAT_NAME = "dp-proto-release"
#: The version this dp-proto writes; it reads every version up to it.
FORMAT_VERSION = 1
MANIFEST_FILE = "manifest.json"
TENSORS_FILE = "model.safetensors"
#: The human-readable card written beside the manifest (``release_card``); never read.
CARD_FILE = "README.md"

#: Built-in models: registered name -> the module whose import registers it.
BUILTIN_MODELS: dict[str, str] = {
    "dp_proto.GLVQ": "dp_proto.lvq.estimators",
    "dp_proto.GMLVQ": "dp_proto.lvq.estimators",
    "dp_proto.LGMLVQ": "dp_proto.lvq.estimators",
    "dp_proto.PairwiseGMLVQ": "dp_proto.lvq.pairwise",
    "dp_proto.SparseGMLVQ": "dp_proto.lvq.sparse_estimators",
    "dp_proto.SparseLGMLVQ": "dp_proto.lvq.sparse_estimators",
    "dp_proto.DPGLVQ": "dp_proto.lvq.private.estimators",
    "dp_proto.DPGMLVQ": "dp_proto.lvq.private.estimators",
    "dp_proto.DPLGMLVQ": "dp_proto.lvq.private.estimators",
    "dp_proto.DPPairwiseGMLVQ": "dp_proto.lvq.private.pairwise",
    "dp_proto.SubsampleAggregateGLVQ": "dp_proto.lvq.private.saa_estimator",
    "dp_proto.PrivateSVDD": "dp_proto.svdd.estimators",
    "dp_proto.PrivateSVDDClassifier": "dp_proto.svdd.estimators",
    "dp_proto.LLPNodeModel": "dp_proto.llp.model",
    "dp_proto.LLPNodeRelease": "dp_proto.llp.release",
    "dp_proto.AnonymizerEncoder": "dp_proto.anonymizer.release",
    "dp_proto.DPAnonymizerEncoder": "dp_proto.anonymizer.release",
}

_REGISTRY: dict[str, type] = {}
_MAPPING_TAG = "__mapping__"  # a mapping whose keys are not all strings: [[key, value], ...]
_RECIPE_TAG = "__recipe__"  # a registered frozen settings object: {"__recipe__": name, "fields": {...}}
_RECIPES: dict[str, type] = {}
_T = TypeVar("_T", bound=type)


# -- the registry -------------------------------------------------------------------------
def register_model(name: str) -> Callable[[_T], _T]:
    """Class decorator: register a model class under ``name`` for ``load_release``.

    The class needs ``to_release()`` (returning a ``Release`` whose ``model`` is
    ``name``) and a classmethod ``from_release(release, **options)``. A subclass is
    not registered by its parent's decorator: saving it raises ``TypeError`` until it
    is registered under a name of its own.

    Parameters
    ----------
    name : str
        The name written to the manifest, e.g. ``"dp_proto.DPGMLVQ"``.
    """

    def decorate(cls: _T) -> _T:
        for method in ("to_release", "from_release"):
            if not callable(getattr(cls, method, None)):
                raise TypeError(f"{cls.__name__} cannot be registered as {name!r}: it has no {method}()")
        known = _REGISTRY.get(name)
        if known is not None and known.__qualname__ != cls.__qualname__:
            raise ValueError(f"the release name {name!r} is taken by {known.__module__}.{known.__qualname__}")
        _REGISTRY[name] = cls
        cls._release_name = name  # type: ignore[attr-defined]
        return cls

    return decorate


def registered_name(obj: Any) -> str:
    """The release name of ``obj``'s class; ``TypeError`` for a class that did not
    register itself (a subclass of a registered model included)."""
    cls = type(obj)
    name = cls.__dict__.get("_release_name")
    if name is None or _REGISTRY.get(name) is not cls:
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} has no release format of its own: register it with "
            "@dp_proto.release.register_model(name) and give it to_release() / from_release()"
        )
    return name


def model_class(name: str) -> type:
    """The class registered as ``name``, importing a built-in model's module if needed.

    Raises ``ValueError`` for a name that is neither built in nor registered."""
    if name not in _REGISTRY and name in BUILTIN_MODELS:
        importlib.import_module(BUILTIN_MODELS[name])  # by name: the registering module
    cls = _REGISTRY.get(name)
    if cls is None:
        known = sorted(set(BUILTIN_MODELS) | set(_REGISTRY))
        raise ValueError(
            f"the release is of the model {name!r}, which this dp-proto does not know; known models: {known}. "
            "A model of another package must be imported (it registers itself) before load_release"
        )
    return cls


def register_recipe(name: str) -> Callable[[_T], _T]:
    """Class decorator: let the frozen dataclass ``cls`` (a settings object such as
    ``BinTraining``) be a hyperparameter of a released model. It is written as
    ``{"__recipe__": name, "fields": {...}}`` (its fields as JSON, recursively) and
    rebuilt by ``cls(**fields)`` on loading; nothing is pickled, and only registered
    names are rebuilt."""

    def decorate(cls: _T) -> _T:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{cls!r} cannot be registered as a recipe: it is not a dataclass")
        known = _RECIPES.get(name)
        if known is not None and known.__qualname__ != cls.__qualname__:  # type: ignore[attr-defined]
            raise ValueError(f"the recipe name {name!r} is taken by {known.__module__}.{known.__qualname__}")
        _RECIPES[name] = cls  # type: ignore[assignment]
        return cls

    return decorate


# -- JSON values --------------------------------------------------------------------------
class _NotJSON(TypeError):
    pass


def _to_json(value: Any) -> Any:
    """``value`` as plain JSON data: tuples, ranges and arrays become lists, numpy
    scalars Python numbers; anything else raises ``_NotJSON``."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, np.ndarray):
        return _to_json(value.tolist())
    if isinstance(value, (list, tuple, range)):
        return [_to_json(v) for v in value]
    recipe = next((name for name, cls in _RECIPES.items() if type(value) is cls), None)
    if recipe is not None:
        fields = {f.name: _to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {_RECIPE_TAG: recipe, "fields": fields}
    if isinstance(value, Mapping):
        if all(isinstance(k, str) for k in value):
            return {k: _to_json(v) for k, v in value.items()}
        return {_MAPPING_TAG: [[_to_json(k), _to_json(v)] for k, v in value.items()]}
    raise _NotJSON(f"{type(value).__module__}.{type(value).__qualname__}")


def _from_json(value: Any) -> Any:
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {_RECIPE_TAG, "fields"}:
            cls = _RECIPES.get(value[_RECIPE_TAG])
            if cls is None:
                raise ValueError(
                    f"the release names the settings object {value[_RECIPE_TAG]!r}, which is not registered"
                )
            return cls(**{k: _from_json(v) for k, v in value["fields"].items()})
        if set(value) == {_MAPPING_TAG}:
            return {_hashable(_from_json(k)): _from_json(v) for k, v in value[_MAPPING_TAG]}
        return {k: _from_json(v) for k, v in value.items()}
    return value


def _hashable(value: Any) -> Any:
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def encode_hyperparameters(
    params: Mapping[str, Any], *, withheld: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """The JSON form of an estimator's ``get_params()``, and why some are left out.

    Tuples, ranges and arrays become lists; a mapping with non-string keys becomes
    ``{"__mapping__": [[key, value], ...]}``; a settings object registered with
    ``register_recipe`` becomes ``{"__recipe__": name, "fields": {...}}``. A value that is none of JSON's types (a
    ``RandomState``, a callable) is not written: it is ``None`` in the first dict and
    named with its type in the second, so a loaded model gets the class default.
    Nothing is pickled.

    Parameters
    ----------
    params : mapping str -> any
        The hyperparameters (``est.get_params(deep=False)``).
    withheld : mapping str -> str, optional
        Parameters never to publish, with the reason (e.g. ``noise_seed``, which would
        replay the noise).

    Returns
    -------
    (dict, dict)
        The JSON-ready hyperparameters and ``{name: reason}`` for the ones not saved.
    """
    withheld = dict(withheld or {})
    out: dict[str, Any] = {}
    not_saved: dict[str, str] = {}
    for name, value in params.items():
        if name in withheld:
            out[name] = None
            not_saved[name] = withheld[name]
            continue
        try:
            out[name] = _to_json(value)
        except _NotJSON as err:
            out[name] = None
            not_saved[name] = f"not JSON-serialisable ({err}); loaded with the class default"
    return out, not_saved


def decode_hyperparameters(
    hyperparameters: Mapping[str, Any], not_saved: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The keyword arguments ``encode_hyperparameters`` wrote, less those not saved
    (the class default applies to them)."""
    skip = not_saved or {}
    return {k: _from_json(v) for k, v in hyperparameters.items() if k not in skip}


def encode_labels(classes: np.ndarray) -> dict[str, Any]:
    """The public label set ``classes_ (c,)`` as ``{"values": [...], "dtype": ...}``."""
    classes = np.asarray(classes)
    if classes.ndim != 1:
        raise ValueError(f"classes_ must be 1-D, got shape {classes.shape}")
    try:
        values = _to_json(classes.tolist())
    except _NotJSON as err:
        raise ValueError(f"the class labels must be numbers or strings to be released, got {err}") from None
    return {"values": values, "dtype": "object" if classes.dtype.kind == "O" else classes.dtype.str}


def decode_labels(encoded: Mapping[str, Any]) -> np.ndarray:
    """The ``classes_`` array ``encode_labels`` wrote, with its dtype."""
    return np.asarray(encoded["values"], dtype=object if encoded["dtype"] == "object" else np.dtype(encoded["dtype"]))


# -- the release --------------------------------------------------------------------------
@dataclass(frozen=True)
class Release:
    """A model in the release format, in memory: ``to_release()`` builds it,
    ``save`` writes it, ``read_release`` reads it back.

    Parameters
    ----------
    model : str
        The registered model name (``register_model``), e.g. ``"dp_proto.DPGMLVQ"``.
    tensors : mapping str -> ndarray
        The arrays written to ``model.safetensors`` (numeric dtypes only).
    hyperparameters : mapping str -> any
        JSON-ready hyperparameters (``encode_hyperparameters``).
    hyperparameters_not_saved : mapping str -> str
        Hyperparameters left out, with the reason.
    public : mapping str -> any
        The public domain: label set, feature count, bounds, the layer's shape.
    privacy : mapping str -> any
        ``{"private": False}``, or the ledger's section (``dp_proto.privacy.ledger_manifest``).
    fitted : mapping str -> any
        Public fitted scalars (``n_iter_``, ``noise_multiplier_``, ...).
    dropped : tuple of str
        Fitted attributes of the model that the release leaves out (names only).
    source : mapping str -> any, optional
        How the model was made, for a model trained outside its estimator (the
        ``dp-proto train`` config, less local paths and the noise seed).
    format_version : int
        Format version of a release read from disk (``FORMAT_VERSION`` for a new one).
    dp_proto_version : str or None
        The dp-proto version that wrote a release read from disk (None for a new one:
        ``manifest()`` fills in the running version).
    """

    model: str
    tensors: Mapping[str, np.ndarray]
    hyperparameters: Mapping[str, Any] = field(default_factory=dict)
    hyperparameters_not_saved: Mapping[str, str] = field(default_factory=dict)
    public: Mapping[str, Any] = field(default_factory=dict)
    privacy: Mapping[str, Any] = field(default_factory=lambda: {"private": False})
    fitted: Mapping[str, Any] = field(default_factory=dict)
    dropped: tuple[str, ...] = ()
    source: Mapping[str, Any] | None = None
    format_version: int = FORMAT_VERSION
    dp_proto_version: str | None = None

    @property
    def private(self) -> bool:
        """Whether the model carries a privacy guarantee."""
        return bool(self.privacy.get("private", False))

    def tensor(self, name: str, ndim: int | None = None) -> np.ndarray:
        """The tensor ``name``; ``ValueError`` if it is missing or not ``ndim``-D."""
        if name not in self.tensors:
            raise ValueError(f"the release of {self.model} has no tensor {name!r}; it has {sorted(self.tensors)}")
        array = self.tensors[name]
        if ndim is not None and array.ndim != ndim:
            raise ValueError(f"tensor {name!r} of the release must be {ndim}-D, got shape {tuple(array.shape)}")
        return array

    def manifest(self, sha256: str | None = None) -> dict[str, Any]:
        """The JSON manifest (``sha256``: the digest of ``model.safetensors``)."""
        tensors = {}
        for name, array in self.tensors.items():
            array = np.asarray(array)
            if array.dtype.kind not in "biuf":
                raise TypeError(f"tensor {name!r} has dtype {array.dtype}: a release holds numeric tensors only")
            tensors[name] = {"dtype": array.dtype.name, "shape": list(array.shape)}
        manifest = {
            "format": {"name": FORMAT_NAME, "version": FORMAT_VERSION},
            "dp_proto_version": __version__,
            "model": self.model,
            "hyperparameters": dict(self.hyperparameters),
            "hyperparameters_not_saved": dict(self.hyperparameters_not_saved),
            "public": dict(self.public),
            "privacy": dict(self.privacy),
            "fitted": dict(self.fitted),
            "dropped": sorted(self.dropped),
            "tensors": {"file": TENSORS_FILE, "sha256": sha256, "entries": tensors},
        }
        if self.source is not None:
            manifest["source"] = dict(self.source)
        try:
            return _to_json(manifest)
        except _NotJSON as err:
            raise TypeError(f"the manifest of {self.model} holds a value that is not JSON data: {err}") from None

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write ``model.safetensors``, ``manifest.json`` and the card ``README.md``
        (``release_card``) into the directory ``path`` (created if needed) and return it.
        ``FileExistsError`` if the directory already holds any of them, unless
        ``overwrite`` (then they are replaced)."""
        from safetensors.numpy import save_file

        directory = Path(path)
        if directory.exists() and not directory.is_dir():
            raise ValueError(f"a release is a directory; {directory} is a file")
        present = [name for name in (MANIFEST_FILE, TENSORS_FILE, CARD_FILE) if (directory / name).exists()]
        if present and not overwrite:
            raise FileExistsError(
                f"{directory} already holds a release ({', '.join(present)}); "
                "pass overwrite=True to replace it, or choose another directory"
            )
        directory.mkdir(parents=True, exist_ok=True)
        arrays = {k: np.asarray(v, order="C") for k, v in self.tensors.items()}  # keeps 0-d arrays 0-d
        self.manifest()  # check every value before anything is written
        tensors_path = directory / TENSORS_FILE
        _atomic_write(tensors_path, lambda tmp: save_file(arrays, tmp, metadata={"format": FORMAT_NAME}))
        manifest = self.manifest(sha256=_sha256(tensors_path))
        text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
        _atomic_write(directory / MANIFEST_FILE, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
        card = release_card(manifest)
        _atomic_write(directory / CARD_FILE, lambda tmp: Path(tmp).write_text(card, encoding="utf-8"))
        return directory

    def to_bytes(self) -> bytes:
        """The release as one byte string, for sending it rather than writing a folder:
        an 8-byte little-endian length, the manifest (UTF-8 JSON, with the SHA-256 of the
        tensors), then the tensors in the safetensors format. ``release_from_bytes``
        reads it back with the checks of ``read_release``; no pickle either way."""
        from safetensors.numpy import save

        arrays = {k: np.asarray(v, order="C") for k, v in self.tensors.items()}
        self.manifest()
        tensors = save(arrays, metadata={"format": FORMAT_NAME})
        manifest = self.manifest(sha256=hashlib.sha256(tensors).hexdigest())
        header = json.dumps(manifest, sort_keys=True).encode("utf-8")
        return len(header).to_bytes(8, "little") + header + tensors


def _atomic_write(path: Path, write: Callable[[str], Any]) -> None:
    """Write ``path`` through a temporary file in its directory, then rename it; the file
    gets the permissions of an ordinary new file (``0o666`` less the umask), not the
    ``0o600`` of the temporary file: a published release is readable by others."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _umask() -> int:
    """The process' umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_format(manifest: Any, where: Path) -> int:
    if not isinstance(manifest, dict) or not isinstance(manifest.get("format"), dict):
        raise ValueError(f"{where} is not a dp-proto release manifest (no 'format' section)")
    fmt = manifest["format"]
    if fmt.get("name") != FORMAT_NAME:
        raise ValueError(f"{where} is not a dp-proto release: format {fmt.get('name')!r}, expected {FORMAT_NAME!r}")
    version = fmt.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"{where}: the release format version must be a positive integer, got {version!r}")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{where} was written in release format version {version} by dp-proto "
            f"{manifest.get('dp_proto_version')}; this dp-proto reads versions up to {FORMAT_VERSION}: upgrade dp-proto"
        )
    missing = [k for k in ("model", "tensors", "hyperparameters", "public", "privacy") if k not in manifest]
    if missing:
        raise ValueError(f"{where}: the manifest lacks {missing}")
    return version


def _read_tensors(directory: Path, listing: Mapping[str, Any]) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    path = directory / str(listing.get("file", TENSORS_FILE))
    if path.parent != directory:
        raise ValueError(f"the tensor file must lie in the release directory, got {listing.get('file')!r}")
    if not path.is_file():
        raise ValueError(f"the release {directory} has no tensor file {path.name}")
    expected = listing.get("sha256")
    if expected is not None and _sha256(path) != expected:
        raise ValueError(f"{path} does not match the SHA-256 its manifest records: the file changed or is damaged")
    try:
        arrays = load_file(str(path))
    except Exception as err:  # safetensors raises its own error types
        raise ValueError(f"{path} is not a readable safetensors file: {err}") from err
    _check_entries(arrays, listing.get("entries", {}), path.name)
    return arrays


def _check_entries(arrays: Mapping[str, np.ndarray], entries: Mapping[str, Any], where: str) -> None:
    """The tensors must be exactly those the manifest lists, with its dtypes and shapes."""
    if set(arrays) != set(entries):
        raise ValueError(f"{where} holds the tensors {sorted(arrays)} but the manifest lists {sorted(entries)}")
    for name, entry in entries.items():
        array = arrays[name]
        if list(array.shape) != list(entry.get("shape", [])) or array.dtype.name != entry.get("dtype"):
            raise ValueError(
                f"tensor {name!r} is {array.dtype.name} of shape {tuple(array.shape)} in {where}, but the "
                f"manifest says {entry.get('dtype')} of shape {tuple(entry.get('shape', []))}"
            )


def read_release(path: str | os.PathLike[str]) -> Release:
    """Read and check a release directory (or its ``manifest.json``).

    Raises ``ValueError`` for a folder that is not a release, a format version newer
    than this dp-proto reads, a tensor file that does not match the manifest's digest,
    or a tensor whose dtype or shape disagrees with the manifest.

    Returns
    -------
    Release
        The manifest's sections and the tensors (numpy arrays).
    """
    path = Path(path)
    directory = path.parent if path.is_file() else path
    manifest_path = directory / MANIFEST_FILE
    if not manifest_path.is_file():
        raise ValueError(f"{directory} is not a dp-proto release: it has no {MANIFEST_FILE}")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{manifest_path} is not valid JSON: {err}") from err
    version = _check_format(manifest, manifest_path)
    tensors = _read_tensors(directory, manifest["tensors"])
    return _release(manifest, tensors, version)


def release_from_bytes(data: bytes) -> Release:
    """The ``Release`` that ``Release.to_bytes`` wrote, checked as ``read_release``
    checks a folder (format, version, digest, every tensor's dtype and shape)."""
    from safetensors.numpy import load

    where = Path("<release bytes>")
    data = bytes(data)
    if len(data) < 8:
        raise ValueError("the release bytes are too short to hold a manifest")
    size = int.from_bytes(data[:8], "little")
    if size > len(data) - 8:
        raise ValueError(f"the release bytes announce a {size}-byte manifest but hold {len(data) - 8} bytes")
    try:
        manifest = json.loads(data[8 : 8 + size].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"the manifest in the release bytes is not valid JSON: {err}") from err
    version = _check_format(manifest, where)
    raw = data[8 + size :]
    listing = manifest["tensors"]
    expected = listing.get("sha256") if isinstance(listing, dict) else None
    if expected is not None and hashlib.sha256(raw).hexdigest() != expected:
        raise ValueError("the tensors in the release bytes do not match the SHA-256 of their manifest")
    try:
        arrays = load(raw)
    except Exception as err:  # safetensors raises its own error types
        raise ValueError(f"the tensors in the release bytes are not readable safetensors data: {err}") from err
    _check_entries(arrays, listing.get("entries", {}), "the release bytes")
    return _release(manifest, arrays, version)


def _release(manifest: Mapping[str, Any], tensors: dict[str, np.ndarray], version: int) -> Release:
    return Release(
        model=str(manifest["model"]),
        tensors=tensors,
        hyperparameters=manifest["hyperparameters"],
        hyperparameters_not_saved=manifest.get("hyperparameters_not_saved", {}),
        public=manifest["public"],
        privacy=manifest["privacy"],
        fitted=manifest.get("fitted", {}),
        dropped=tuple(manifest.get("dropped", ())),
        source=manifest.get("source"),
        format_version=version,
        dp_proto_version=manifest.get("dp_proto_version"),
    )


def load_release(path: str | os.PathLike[str], **options: Any) -> Any:
    """Load a release directory into a fitted model of the class it names.

    Parameters
    ----------
    path : str or path
        The release directory (or its ``manifest.json``).
    **options
        Passed to the class's ``from_release`` (the LVQ estimators take ``device``,
        default ``"cpu"``).

    Returns
    -------
    model
        A fitted model whose predictions equal the saved one's; a private model's
        ``ledger_`` is a read-only record of its releases.

    Raises
    ------
    ValueError
        Not a release, a newer format version, an unknown model name, or tensors that
        disagree with the manifest.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from dp_proto.lvq import GLVQ
    >>> X, y = load_iris(return_X_y=True)
    >>> model = GLVQ(random_state=0).fit(X, y)
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     loaded = load_release(model.save(tmp))
    >>> bool((loaded.predict(X) == model.predict(X)).all())
    True
    """
    release = read_release(path)
    return model_class(release.model).from_release(release, **options)


class Releasable:
    """``save_release`` / ``save`` / ``load`` for a model class with ``to_release`` and
    ``from_release`` (register it with ``register_model``).

    Every released model of dp-proto inherits these three; what a release holds is the
    class's ``to_release`` (and its ``RELEASE_DROPS``).
    """

    def to_release(self) -> Release:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def save_release(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Publish the model: write ``to_release()`` as ``model.safetensors`` and
        ``manifest.json`` into the directory ``path`` (created if needed) and return it.
        ``dp_proto.load_release(path)`` gives back a model that predicts identically.
        An existing release there is kept (``FileExistsError``) unless ``overwrite``."""
        return self.to_release().save(path, overwrite=overwrite)

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """The same as ``save_release`` (the name of the non-private models)."""
        return self.save_release(path, overwrite=overwrite)

    @classmethod
    def load(cls, path: str | os.PathLike[str], **options: Any) -> Any:
        """``load_release(path, **options)``, checking that the release holds exactly a
        ``cls`` (``TypeError`` otherwise, also for a subclass: ``GMLVQ.load`` refuses a
        ``DPGMLVQ`` release); ``options`` go to ``from_release`` (e.g. ``device``)."""
        model = load_release(path, **options)
        if type(model) is not cls:
            raise TypeError(f"{path} holds a {type(model).__name__}, not a {cls.__name__}")
        return model

    @classmethod
    def estimator_from_release(cls, release: Release, **overrides: Any) -> Any:
        """A new, unfitted ``cls`` with the release's hyperparameters and ``overrides``
        (e.g. ``device``), for a scikit-learn estimator's ``from_release``.

        Checks that the release is of ``cls``; ``ValueError`` for a hyperparameter that
        ``cls`` does not take. Those the release did not save get the class default."""
        cls.check_release_model(release)
        params = decode_hyperparameters(release.hyperparameters, release.hyperparameters_not_saved)
        unknown = sorted(set(params) - set(cls._get_param_names()))  # type: ignore[attr-defined]
        if unknown:
            raise ValueError(f"the release sets hyperparameters {unknown} that {cls.__name__} does not take")
        return cls(**{**params, **overrides})

    @classmethod
    def check_release_model(cls, release: Release) -> None:
        """``ValueError`` unless ``release`` is of the model ``cls`` registered as."""
        expected = cls.__dict__.get("_release_name")
        if release.model != expected:
            raise ValueError(f"the release is of the model {release.model!r}, not {expected!r}")
