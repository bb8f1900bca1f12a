# `make demo` and `make test` each create .venv and install what they need on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Test processes; each file's tests stay in one process, so they share compiled programs.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=20

.PHONY: demo test test-fast bench lint clean constraints

# The exact versions of constraints.txt within pyproject.toml's ranges.
PIP := $(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt

$(VENV)/.base: pyproject.toml setup.cfg constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) -e .
	touch $@

$(VENV)/.test: $(VENV)/.base
	$(PIP) -e ".[test]"
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
	$(PIP) -e ".[dev]"
	$(VENV)/bin/ruff check .

# Resolves the test environment afresh within the ranges and writes its exact versions.
constraints:
	rm -rf $(VENV)-resolve && $(PYTHON) -m venv $(VENV)-resolve
	$(VENV)-resolve/bin/pip install --quiet --disable-pip-version-check -e ".[dev]"
	{ sed -n '1,3p' constraints.txt; $(VENV)-resolve/bin/pip freeze --exclude-editable \
	  | sed 's/^torch==\(.*\)+cpu$$/torch==\1/'; } > constraints.new
	mv constraints.new constraints.txt && rm -rf $(VENV)-resolve

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
