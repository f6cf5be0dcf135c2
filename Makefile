# gpuwatch: two commands do all set-up on a fresh machine with Python 3.11+.
#   make demo  — live: simulated exporter -> Prometheus -> ingest -> analyze; history: a simulated week -> app
#   make test  — lint, architecture contracts and the whole test suite
#   make test-fast — the inner loop: the tests not marked slow, under a minute on 2 cores (no lint)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-fast lint bench system-deps clean image

$(STAMP): pyproject.toml $(wildcard hatch_build.py)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# Debian's prometheus (real server + promtool for tests) and chromium (real-browser app test).
system-deps:
	@bash .ci/system-deps.sh

lint: $(STAMP)
	$(BIN)/ruff check gpuwatch app tests bench helm dashboards
	$(BIN)/lint-imports

test: $(STAMP) system-deps lint
	$(BIN)/pytest -n 2 --dist loadfile --durations=25

# What it leaves out: the tests marked slow in their files and those tests/conftest.py's SLOW names.
test-fast: $(STAMP)
	$(BIN)/pytest -n 2 --dist loadfile -m "not slow" -q

demo: $(STAMP)
	$(BIN)/gpuwatch demo

bench: $(STAMP) system-deps
	$(BIN)/python bench/exporter.py --quick
	$(BIN)/python bench/analyzer.py
	$(BIN)/python bench/prometheus_ingest.py
	$(BIN)/python bench/reclaim.py
	$(BIN)/python bench/app.py

# The two images the Helm chart pulls, tagged as its values name them (image.repository,
# exporter.image.repository; tag = Chart appVersion = gpuwatch.__version__). REGISTRY=... to push
# elsewhere, then set those values to match. Needs docker (or DOCKER=podman).
DOCKER ?= docker
REGISTRY ?= ghcr.io/gpuwatch
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' gpuwatch/__init__.py)

image:
	$(DOCKER) build -f Dockerfile -t $(REGISTRY)/gpuwatch-exporter:$(VERSION) .
	$(DOCKER) build -f Dockerfile.gpuwatch -t $(REGISTRY)/gpuwatch:$(VERSION) .

clean:
	rm -rf $(VENV) .demo .pytest_cache .ruff_cache tests/artifacts
