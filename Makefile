# Everything runs from the project venv; `make test` works from a clean clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := setup

.PHONY: $(VENV) setup lock run test bench bench-checkpoint soak schemas clean distclean

$(VENV): $(STAMP)

# The editable install maps each package under libs/ and services/ when it is made: a new package makes it again
PACKAGES := $(wildcard libs/treadle/*/__init__.py services/treadle/*/__init__.py)

# The whole dependency tree, pinned with hashes (for CPython 3.11 on linux x86_64) and compiled by `make lock`:
#   dev.lock  what `make setup` installs (pyproject.toml's dev extra, which holds all the others, and setuptools)
#   all.lock  what the container image installs (the all extra: server, claude, embedded)
#   base.lock the client alone (no extra): its wheels go to the wheelhouse the packaging test installs from offline
LOCKS     := requirements/dev.lock requirements/all.lock requirements/base.lock
WHEELHOUSE := $(VENV)/wheelhouse

$(STAMP): pyproject.toml $(LOCKS) $(PACKAGES)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "error: Treadle needs Python >= 3.11 (PYTHON=$(PYTHON))" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q --require-hashes -r requirements/dev.lock
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	rm -rf $(WHEELHOUSE)
	$(BIN)/pip download -q --require-hashes --no-deps --only-binary :all: -d $(WHEELHOUSE) -r requirements/base.lock
	@touch $@

# Re-lock after changing a dependency in pyproject.toml: the pins already locked stay unless what changed needs
# others; `make lock LOCK_ARGS=--upgrade` moves every package to its newest allowed version. Commit the three files.
LOCK_ARGS ?=
UV_COMPILE = $(BIN)/uv pip compile --quiet --generate-hashes --python-version 3.11 \
	--python-platform x86_64-manylinux_2_28 --custom-compile-command "make lock" $(LOCK_ARGS)
lock: $(STAMP)
	$(UV_COMPILE) pyproject.toml requirements/build.in --extra dev -o requirements/dev.lock
	$(UV_COMPILE) pyproject.toml requirements/build.in --extra all -c requirements/dev.lock -o requirements/all.lock
	$(UV_COMPILE) pyproject.toml -c requirements/dev.lock -o requirements/base.lock
	$(MAKE) $(STAMP)

# The Codex provider's runtime (issue 7): pinned, installed into the project, found by TREADLE_CODEX_* settings
CODEX_VERSION := 0.171.0
CODEX_STAMP   := .tools/codex/.installed-$(CODEX_VERSION)
$(CODEX_STAMP):
	@command -v npm >/dev/null || { echo "error: npm is needed to install @openai/codex" >&2; exit 1; }
	mkdir -p .tools/codex && npm install --prefix .tools/codex --save-exact --no-audit --no-fund --loglevel=error @openai/codex@$(CODEX_VERSION)
	@touch $@

# The OpenAPI linter (issue 19): pinned, installed like the Codex runtime; `make test` lints schemas/openapi.json
SPECTRAL_VERSION := 6.16.3
SPECTRAL_STAMP   := .tools/spectral/.installed-$(SPECTRAL_VERSION)
SPECTRAL         := .tools/spectral/node_modules/.bin/spectral
$(SPECTRAL_STAMP):
	@command -v npm >/dev/null || { echo "error: npm is needed to install @stoplight/spectral-cli" >&2; exit 1; }
	mkdir -p .tools/spectral && npm install --prefix .tools/spectral --save-exact --no-audit --no-fund --loglevel=error @stoplight/spectral-cli@$(SPECTRAL_VERSION)
	@touch $@

setup: $(STAMP) $(CODEX_STAMP) $(SPECTRAL_STAMP)
	@path=$$(bash scripts/ensure-redis.sh); echo "redis-server: $$path"
	@path=$$(bash scripts/ensure-bubblewrap.sh); echo "bubblewrap (runtime sandbox): $$path"
	@path=$$(bash scripts/ensure-promtool.sh); echo "promtool (alert rules): $$path"

run: setup
	$(BIN)/treadle up --demo

test: setup
	$(BIN)/ruff check
	$(BIN)/ruff format --check
	$(BIN)/mypy -p treadle
	$(SPECTRAL) lint --quiet --fail-severity=warn --ruleset .spectral.yaml schemas/openapi.json
	@TIMEFORMAT='wall time: %1Rs'; time scripts/loopback-only.sh $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_ARGS)

bench: setup
	$(BIN)/python bench/run.py
	$(MAKE) bench-checkpoint

# Checkpoint cost on a 10,000-file repository vs plain git, and CPU per unchanged capture (not in `make test`)
bench-checkpoint: setup
	$(BIN)/python bench/bench_checkpoint_repo.py

# Long chaos soak (not in CI): TREADLE_SOAK_SECONDS=600 make soak
soak: setup
	scripts/loopback-only.sh $(BIN)/pytest -q -p no:cacheprovider tests/chaos

schemas: $(STAMP)
	$(BIN)/python -m treadle.cli.schemas

clean:
	rm -rf .treadle build .pytest_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) *.egg-info
