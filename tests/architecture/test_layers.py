"""The package layers: imports run one way, and the model-free parts load no trainer.

``privacy`` (the model-free core) <- ``lvq`` / ``lvq.private`` / ``svdd`` / ``llp`` /
``anonymizer`` <- ``lightning`` (adapters) <- ``experiments`` (configs and runners) <-
``cli``; ``data``, ``features`` (data-independent feature extractors) and the helpers of
``base`` sit beside the core (only the experiments load data sets). Every ``import`` statement of the package, including those
inside functions, is checked against :data:`ALLOWED`. ``dp_proto.release.load_release``
imports the module of the model a release names by name, not by an import statement: that
is not an edge.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "dp_proto"

BASE = (
    "base"  # dp_proto/__init__, exceptions, _validation, _neighbours, _processes, _threads, _version, _rowwise, release
)
ALLOWED: dict[str, set[str]] = {
    BASE: set(),
    "privacy": {BASE},
    "data": {BASE},
    "lvq": {BASE},
    "lvq.private": {BASE, "privacy", "lvq"},
    "svdd": {BASE, "privacy"},
    "llp": {BASE, "privacy"},
    "anonymizer": {BASE, "privacy"},
    "backbones": {BASE},
    "features": {BASE},
    "plotting": {BASE},
    "lightning": {
        BASE,
        "privacy",
        "lvq",
        "lvq.private",
        "svdd",
        "llp",
        "anonymizer",
        "backbones",
        "features",
        "plotting",
    },
    "experiments": set(),  # filled below: everything below it
    "cli": set(),  # filled below: everything
}
ALLOWED["experiments"] = set(ALLOWED) - {"experiments", "cli"}
ALLOWED["cli"] = set(ALLOWED) - {"cli"}


def component(module: str) -> str:
    """``dp_proto.lvq.private.dpsgd`` -> ``lvq.private``; helpers -> ``base``."""
    parts = module.split(".")[1:]
    if not parts or parts[0] in (
        "exceptions",
        "_validation",
        "_neighbours",
        "_processes",
        "_threads",
        "_version",
        "_rowwise",
        "_progress",
        "_release_card",
        "release",
        "__init__",
        "__version__",
    ):
        return BASE
    if parts[0] == "lvq" and len(parts) > 1 and parts[1] == "private":
        return "lvq.private"
    return parts[0]


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, module: str, is_package: bool) -> set[str]:
    """Every ``dp_proto`` module an ``import`` statement of ``source`` names."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "dp_proto")
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "dp_proto":
                continue
            if target == "dp_proto":  # from dp_proto import data -> the submodule
                found.update(f"dp_proto.{a.name}" for a in node.names)
            else:
                found.add(target)
    return found


def violations(module: str, source: str, is_package: bool = False) -> list[tuple[str, str]]:
    """``(module, imported)`` pairs that break :data:`ALLOWED`."""
    own = component(module)
    bad = []
    for target in sorted(imported_modules(source, module, is_package)):
        other = component(target)
        if other != own and other not in ALLOWED[own]:
            bad.append((module, target))
    return bad


def all_edges() -> list[tuple[str, str]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += violations(module_name(path), path.read_text(), path.name == "__init__.py")
    return found


def test_every_component_is_declared():
    comps = {component(module_name(p)) for p in PACKAGE.rglob("*.py")}
    assert comps <= set(ALLOWED), f"undeclared components: {sorted(comps - set(ALLOWED))}"


def test_imports_follow_the_layers():
    edges = all_edges()
    assert not edges, "imports against the layers:\n" + "\n".join(f"  {a} -> {b}" for a, b in edges)


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("dp_proto.privacy.mechanisms", "from dp_proto.lvq.layers import GLVQLayer"),
        ("dp_proto.privacy.ledger", "def f():\n    import dp_proto.lvq.private.dpsgd"),
        ("dp_proto.svdd.estimators", "from dp_proto.llp import knn_predict"),
        ("dp_proto.lvq.model", "from dp_proto.lvq.private import DPGLVQ"),
        ("dp_proto.privacy.audit", "from ..lvq.private import dpsgd"),
        ("dp_proto.anonymizer.modules", "from dp_proto import lightning"),
        ("dp_proto.lightning.module", "from dp_proto.experiments.config import read_config"),
        ("dp_proto.lightning.datamodule", "from dp_proto.data import load_bundled"),
        ("dp_proto.experiments.lvq", "from dp_proto.cli import main"),
    ],
)
def test_the_checker_catches_an_arrow_added_back(module, source):
    assert violations(module, source), "the layer check missed an upward or side import"


def test_allowed_imports_pass_the_checker():
    assert not violations("dp_proto.lvq.private.dpsgd", "from dp_proto.privacy.ledger import PrivacyLedger")
    assert not violations("dp_proto.svdd.estimators", "from dp_proto._neighbours import knn_predict")
    assert not violations("dp_proto.experiments.lvq", "from dp_proto import data as datasets")
    assert not violations(
        "dp_proto.experiments.anonymizer", "from dp_proto.lightning.anonymizer import AnonymizerModule"
    )


@pytest.mark.slow
def test_model_free_packages_load_neither_opacus_nor_lightning():
    code = (
        "import sys, dp_proto.privacy, dp_proto.svdd, dp_proto.llp, dp_proto.lvq, dp_proto.data; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'opacus', 'lightning', "
        "'pytorch_lightning', 'torchmetrics'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def module_edges() -> dict[str, set[str]]:
    """Module -> the ``dp_proto`` modules its ``import`` statements name (those inside
    functions too). ``from package import submodule`` is an edge to the submodule;
    ``from package import name`` one to the package's ``__init__``."""
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in paths}
    for module, path in paths.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges[module].update(a.name for a in node.names if a.name in paths)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".") if is_package else module.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                submodules = {f"{target}.{a.name}" for a in node.names} & set(paths)
                edges[module] |= submodules
                if len(submodules) < len(node.names) and target in paths:
                    edges[module].add(target)
    return edges


def import_circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return circles


def test_the_import_graph_has_no_circles():
    assert import_circles(module_edges()) == []


def test_the_circle_finder_finds_a_circle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circles(edges) == [["a", "b", "c"]]
