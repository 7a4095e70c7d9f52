"""Smoke tests of the benchmark runners (their ``--quick`` modes and helpers): every test
in this folder carries the ``benchmark`` marker, so ``make test-fast`` leaves them out."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.benchmark)
