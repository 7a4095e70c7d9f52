"""Stored notebooks: executed, with their outputs tidied for reading and for diffs.

``python -m tests._notebooks notebooks/*.ipynb`` tidies notebooks in place after
``pytest --nbmake --overwrite`` has executed them (``make notebooks``): progress-bar
redraws collapse to their last state, consecutive stream outputs merge, the checkout's
path leaves file names in warnings, and execution timestamps go.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _collapse_redraws(text: str) -> str:
    """Each line as a terminal would leave it: the text after its last carriage return
    (a bar that cleared itself leaves a blank line, dropped later)."""
    return "\n".join(line.split("\r")[-1] for line in text.split("\n"))


def _tidy_outputs(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    tidy: list[dict[str, Any]] = []
    for output in outputs:
        if output["output_type"] == "stream":
            text = "".join(output["text"])
            if tidy and tidy[-1]["output_type"] == "stream" and tidy[-1]["name"] == output["name"]:
                tidy[-1]["text"] += text
                continue
            output = {**output, "text": text}
        tidy.append(output)
    for output in tidy:
        if output["output_type"] == "stream":
            text = _collapse_redraws(output["text"]).replace(f"{ROOT}/", "")
            text = "\n".join(line for line in text.split("\n") if line.strip()) + "\n"
            output["text"] = text.splitlines(keepends=True)
    return [o for o in tidy if o["output_type"] != "stream" or "".join(o["text"]).strip()]


def tidy(notebook: dict[str, Any]) -> dict[str, Any]:
    """The notebook with tidied outputs (a new dict; ``notebook`` is not changed)."""
    notebook = json.loads(json.dumps(notebook))
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["metadata"].pop("execution", None)
            cell["outputs"] = _tidy_outputs(cell["outputs"])
    return notebook


def write(path: Path, notebook: dict[str, Any]) -> None:
    path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    for name in sys.argv[1:]:
        path = Path(name)
        write(path, tidy(json.loads(path.read_text(encoding="utf-8"))))
