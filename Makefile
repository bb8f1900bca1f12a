# `make demo` and `make test` each create .venv and install what they need on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test bench lint clean

$(VENV)/.base: pyproject.toml setup.cfg
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e .
	touch $@

$(VENV)/.test: $(VENV)/.base
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[test]"
	touch $@

demo: $(VENV)/.base
	$(PY) -m prover_jax.train

test: $(VENV)/.test
	$(PY) -m pytest -q

bench: $(VENV)/.test
	$(PY) bench/credit_kernels.py

lint: $(VENV)/.test
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[dev]"
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
