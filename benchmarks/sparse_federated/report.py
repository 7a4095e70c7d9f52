"""Renders ``benchmarks/sparse_federated/RESULTS.md`` from the stored results (``python -m benchmarks.report``)."""

from __future__ import annotations

from typing import Any

from benchmarks.reporting import Results, bullets, figure, header, source
from benchmarks.sparse_federated import tables as sparse_federated_tables


def render(res: Results, t: dict[str, Any]) -> list[str]:
    out = header(t) + bullets(t["notes"])
    sparse = res.get("sparse_federated_sparse.json")
    federated = res.get("sparse_federated_federated.json")
    out += ["### Accuracy against sparsity (Table 5.2 shape)", ""]
    out += source(t["sources"]["sparse"])
    out += sparse_federated_tables.sparse_table(sparse, t["targets"])
    out += ["### Federated class-wise F1 (Table 6.1 shape)", ""]
    out += source(t["sources"]["federated"])
    out += sparse_federated_tables.federated_table(federated, t["targets"])
    out += sparse_federated_tables.processes_lines(federated)
    out += ["### Private nodes (beyond the dissertation)", ""]
    out += sparse_federated_tables.private_table(federated)
    out += figure(res.folder, "sparse_federated.png", "Accuracy against sparsity; private federated F1 against epsilon")
    return out
