# zkcoord: two commands on a fresh machine.
#   make demo   the end-to-end run (installs what is missing first)
#   make test   lint, type-check and the whole test suite (installs what is missing first)
#   make bench  every benchmark (zkcoord bench all), SIZE=small|medium|large (default small), JSON in bench-results/
#   make compose-up / compose-down   the Compose deployment on local images (scripts/compose.sh; docs/deployment.md)

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SIZE ?= small

.PHONY: setup system bytecode demo test lint typecheck pytest bench clean compose-up compose-down

setup: system $(STAMP)

system:
	@scripts/setup-system.sh

# Reinstall when the dependency declarations change.
$(STAMP): setup.cfg pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "setup: installing zkcoord and its extras into $(VENV)"
	@$(BIN)/pip install -q --disable-pip-version-check -e '.[dev,spark]'
	@touch $(STAMP)

# Compile the package's bytecode once: with PYTHONDONTWRITEBYTECODE set (as on the CI machine) every process the
# demo and the tests start (hundreds of consumers, brokers and producers) would otherwise compile every module it
# imports again: 0.6 s of CPU per start instead of 0.3 s (measured: python -c 'import zkcoord.cli', load 9).
bytecode: setup
	@$(BIN)/python -m compileall -q zkcoord tests >/dev/null

demo: setup bytecode
	$(BIN)/zkcoord demo

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: setup
	$(BIN)/mypy

# Three workers on the machine's two cores: most tests wait on sessions expiring and processes starting, not on the
# CPU (a two-worker run used 39% of both cores: 17 CPU-minutes in 21.6).  The tests under tests/spark share one
# SparkSession on one of them; the longest tests start first (tests/scheduling.py).
pytest: setup bytecode
	$(BIN)/pytest -n 3 --dist loadgroup --durations=25

test: lint typecheck pytest

bench: setup bytecode
	$(BIN)/zkcoord bench all --size $(SIZE)

# Installs Debian's docker.io and docker-compose and starts dockerd if needed, builds the images when their inputs
# changed, then starts the ensemble, brokers, producer and consumers; compose-down removes them, volumes included.
compose-up:
	@scripts/compose.sh up

compose-down:
	@scripts/compose.sh down

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache .hypothesis
	find zkcoord tests -name __pycache__ -prune -exec rm -rf {} +
