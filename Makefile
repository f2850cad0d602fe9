# slinky-temporal: `make help` lists the targets.
.DEFAULT_GOAL := help
PY := .venv/bin/python
SHELL := /bin/bash

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

bootstrap: ## install uv and the locked Python environment (.venv)
	@bash scripts/bootstrap.sh

demo: bootstrap ## bring the local stack up and run the demo scenario
	$(PY) -m slinky.cli dev up
	$(PY) -m slinky.dev.demo

test: bootstrap lint ## lint, then every test suite; integration tests start (or reuse) the local stack
	$(PY) -m pytest

test-unit: bootstrap ## fast tests only (no servers)
	$(PY) -m pytest -m "not integration"

test-integration: bootstrap ## tests against the real local stack
	$(PY) -m pytest -m integration

lint: bootstrap ## ruff format check, ruff lint, mypy strict, import-linter contracts
	.venv/bin/ruff format --check .
	.venv/bin/ruff check .
	.venv/bin/mypy
	.venv/bin/lint-imports

fmt: bootstrap ## format the code
	.venv/bin/ruff format .
	.venv/bin/ruff check --fix .

crds: bootstrap ## regenerate deploy/crds/slinky/ from the pydantic models (a unit test fails when they drift)
	$(PY) -m slinky.operator.api.crds --write

image: bootstrap ## build the project's image offline with podman (deploy/images/build.sh; ~85 s cold, ~10 s warm)
	bash deploy/images/build.sh

images: bootstrap ## build every image (Slurm daemons, the project's) and push them to the stack's registry (docs/images.md)
	$(PY) -m slinky.cli dev images

chaos: bootstrap ## chaos suite on the local stack: 200 workloads, 10 random kill -9 (bench/chaos.py; docs/benchmarks.md)
	$(PY) -m slinky.cli dev up
	$(PY) -m bench.chaos --workloads 200 --kills 10 --seed $${SEED:-1}

dev-up: bootstrap ## start the local stack (idempotent)
	$(PY) -m slinky.cli dev up

dev-status: ## health of each component of the local stack
	$(PY) -m slinky.cli dev status

dev-down: ## stop exactly what dev-up started
	$(PY) -m slinky.cli dev down

.PHONY: help bootstrap demo test test-unit test-integration lint fmt crds image images chaos dev-up dev-status dev-down
