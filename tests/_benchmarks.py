"""Import a script of ``benchmarks/`` (a folder of scripts, not a package) in a test."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def import_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as the module ``_benchmark_<name>`` (imported once, then
    cached). ``benchmarks/`` is on ``sys.path`` only while it runs, for the scripts' own
    ``from _common import ...``."""
    key = f"_benchmark_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module  # dataclasses look their module up while the file runs
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[key]
        raise
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module
