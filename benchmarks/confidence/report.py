"""Renders ``benchmarks/confidence/RESULTS.md`` from the stored results (``python -m benchmarks.report``)."""

from __future__ import annotations

from typing import Any

from benchmarks.confidence import tables as confidence_tables
from benchmarks.reporting import Results, bullets, header, source


def render(res: Results, t: dict[str, Any]) -> list[str]:
    out = header(t) + bullets(t["notes"])
    pw = t.get("table_4_2_4_3")
    if pw is not None:
        payloads = {name: res.get(ds["result"]) for name, ds in pw["datasets"].items()}
        out += ["### Tables 4.2 and 4.3: accuracy and area under the ARC of pairwise GMLVQ", ""]
        out += source(pw["source"])
        out += confidence_tables.table_4_2_4_3(payloads, pw)
        out += ["### Table 4.4: training and prediction times", ""]
        out += confidence_tables.table_4_4(payloads, pw)
        out += [f"Not reproduced: {pw['not_reproduced']}", ""]
    spec = t["table_4_5"]
    out += ["### Table 4.5: area under the ARC against the window t", ""]
    out += source(spec["source"])
    out += confidence_tables.table_4_5(res.get("time_integration.json"), spec)
    return out + [f"Not reproduced: {spec['not_reproduced']}", ""]
