# `make demo` and `make test` each create .venv and install what they need on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Test processes; each file's tests stay in one process, so they share compiled programs.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=20

.PHONY: demo test test-fast bench lint clean

$(VENV)/.base: pyproject.toml setup.cfg
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e .
	touch $@

$(VENV)/.test: $(VENV)/.base
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[test]"
	touch $@

demo: $(VENV)/.base
	$(PY) -m prover_jax.train --config configs/demo.yaml --run-dir runs/demo-household-small

test: $(VENV)/.test
	$(PYTEST)

test-fast: $(VENV)/.test
	$(PYTEST) -m "not slow"

bench: $(VENV)/.test
	$(PY) bench/credit_kernels.py

lint: $(VENV)/.test
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[dev]"
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
