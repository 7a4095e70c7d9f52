"""The ``Examples`` sections of the public docstrings run as doctests.

Every module of dp_proto whose docstrings hold ``>>>`` examples is listed here (or, for
a sketch with placeholders, in ``ILLUSTRATIVE``); a new module with examples that is in
neither list fails ``test_every_module_with_examples_is_listed``.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import dp_proto

MODULES = [
    "dp_proto.lvq.distances",
    "dp_proto.lvq.layers",
    "dp_proto.lvq.model",
    "dp_proto.lvq.estimators",
    "dp_proto.lvq.confidence",
    "dp_proto.lvq.coupling",
    "dp_proto.lvq.pairwise",
    "dp_proto.lvq.sparse_estimators",
    "dp_proto.lvq.private.estimators",
    "dp_proto.lvq.private.saa_estimator",
    "dp_proto.privacy.events",
    "dp_proto.privacy.ledger",
    "dp_proto.privacy.mechanisms",
    "dp_proto.privacy.selection",
    "dp_proto.anonymizer.modules",
    "dp_proto.svdd.estimators",
    "dp_proto.release",
]

#: modules whose ``>>>`` lines are sketches with placeholders (``DPGLVQ(...)``), not run
ILLUSTRATIVE = {"dp_proto.privacy.testing"}

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    module = importlib.import_module(name)
    tests = [t for t in doctest.DocTestFinder().find(module, name) if t.examples]
    assert tests, f"{name} has no doctest examples"
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    for test in sorted(tests, key=lambda t: t.name):
        runner.run(test, out=report.append)
    failed, attempted = runner.summarize(verbose=False)
    assert attempted > 0
    assert failed == 0, "".join(report)


def test_every_module_with_examples_is_listed() -> None:
    root = Path(dp_proto.__file__).parent
    with_examples = {
        ".".join(path.relative_to(root.parent).with_suffix("").parts)
        for path in root.rglob("*.py")
        if ">>>" in path.read_text(encoding="utf-8")
    }
    assert with_examples - set(MODULES) - ILLUSTRATIVE == set()
