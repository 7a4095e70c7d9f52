# Two commands that work on a fresh machine with nothing but Python:
#   make demo   create the environment, install, run the main job
#   make test   create (or reuse) the environment, install, run the whole test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DATA_DIR ?= ../shared/data

.PHONY: demo test lint bench-baseline clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/dp-proto demo

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check dp_proto tests benchmarks training

bench-baseline: $(STAMP)
	$(PY) benchmarks/baseline_accuracy.py --data-dir $(DATA_DIR)

clean:
	rm -rf $(VENV) runs lightning_logs .pytest_cache .hypothesis
