"""The notebooks are stored executed, with their outputs (plots included), so that they
read on GitHub and in the docs without running them; ``make notebooks`` refreshes them
(the suite runs every notebook again with ``--nbmake``)."""

from __future__ import annotations

import json
import re

import pytest

from tests._notebooks import ROOT, tidy

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_a_stored_notebook_is_executed_and_tidy(path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    assert code and all(cell["execution_count"] is not None for cell in code), "not executed: make notebooks"
    assert [cell["execution_count"] for cell in code] == list(range(1, len(code) + 1)), "run top to bottom"
    outputs = [output for cell in code for output in cell["outputs"]]
    assert not [o for o in outputs if o["output_type"] == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "no plot stored"
    assert tidy(notebook) == notebook, "untidy outputs: python -m tests._notebooks " + str(path.relative_to(ROOT))


def test_the_stored_outputs_name_no_local_path():
    """Warnings name the library's files relative to the checkout, not where it lay."""
    for path in NOTEBOOKS:
        assert not re.search(r"/\S*/dp_proto/", path.read_text(encoding="utf-8")), path.name
