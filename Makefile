# Two commands that work on a fresh machine with nothing but Python:
#   make demo   create the environment, install, run the main job
#   make test   create (or reuse) the environment, install, run the whole test suite
#               (tests/ and the notebooks, as CI runs it) on TEST_WORKERS processes
#   make test-fast   the quick loop: no notebooks, benchmark smoke tests or slow tests
#   make notebooks   execute the notebooks and store them with their outputs (tidied)
#   make lint   ruff check and ruff format --check (CI runs it before the tests)
#   make typecheck   mypy on dp_proto/privacy and dp_proto/lvq (CI runs it too)
#   make docs   build the documentation site into site/ (mkdocs build --strict)
#   make results   regenerate benchmarks/RESULTS.md from the stored JSON (runs no benchmark)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DATA_DIR ?= ../shared/data
# pytest-xdist workers of `make test` (auto: one per core)
TEST_WORKERS ?= auto

.PHONY: demo test test-fast notebooks lint typecheck docs results bench-baseline clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev,docs]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/dp-proto demo

# The notebooks first (the longest items, so that no worker ends on one); their kernels
# on one thread each, as the test processes (tests/conftest.py), so workers do not
# oversubscribe the cores.
test: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=25 --nbmake notebooks tests

notebooks: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q --nbmake --overwrite notebooks
	$(PY) -m tests._notebooks notebooks/*.ipynb

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow and not benchmark" tests

lint: $(STAMP)
	$(VENV)/bin/ruff check dp_proto tests benchmarks training
	$(VENV)/bin/ruff format --check dp_proto tests benchmarks training

typecheck: $(STAMP)
	$(VENV)/bin/mypy

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

# regenerate benchmarks/RESULTS.md and benchmarks/*/RESULTS.md from the stored JSON (runs no benchmark)
results: $(STAMP)
	$(PY) -m benchmarks.report

bench-baseline: $(STAMP)
	$(PY) -m benchmarks.lvq.baseline_accuracy --data-dir $(DATA_DIR)

clean:
	rm -rf $(VENV) runs lightning_logs .pytest_cache .hypothesis
