# Everything runs from the project venv; `make test` works from a clean clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := setup

.PHONY: $(VENV) setup lock run providers docs test bench bench-checkpoint bench-peer soak schemas clean distclean

$(VENV): $(STAMP)

# The editable install maps each package under libs/ and services/ when it is made: a new package makes it again
PACKAGES := $(wildcard libs/treadle/*/__init__.py services/treadle/*/__init__.py)

# The whole dependency tree, pinned with hashes (for CPython 3.11 on linux x86_64) and compiled by `make lock`:
#   dev.lock  what `make setup` installs (pyproject.toml's dev extra, which holds all the others, and setuptools)
#   all.lock  what the container image and `make providers` install (the all extra: server, claude, embedded)
#   run.lock  what `make run` installs (the embedded extra: the stack on one machine, no runtime, no test tool)
#   bootstrap.lock  uv, the installer `make run` and `make providers` use (the same pin as in dev.lock)
#   base.lock the client alone (no extra): its wheels go to the wheelhouse the packaging test installs from offline
LOCKS     := requirements/dev.lock requirements/all.lock requirements/run.lock requirements/base.lock \
	requirements/bootstrap.lock
WHEELHOUSE := $(VENV)/wheelhouse

PYTHON_CHECK = @$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "error: Treadle needs Python >= 3.11 (PYTHON=$(PYTHON))" >&2; exit 1; }

$(STAMP): pyproject.toml $(LOCKS) $(PACKAGES)
	$(PYTHON_CHECK)
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
	$(UV_COMPILE) pyproject.toml requirements/build.in --extra embedded -c requirements/dev.lock -o requirements/run.lock
	$(UV_COMPILE) requirements/bootstrap.in -c requirements/dev.lock -o requirements/bootstrap.lock
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

# ACP agents (issue 22): two real Agent Client Protocol agents, pinned, for the generic ACP provider and its
# tests; each runs offline against a mock model API (tests/acp). Node comes from the system (like npm above).
ACP_CLAUDE_VERSION := 0.23.1
ACP_CODEX_VERSION  := 0.16.0
ACP_STAMP := .tools/acp/.installed-$(ACP_CLAUDE_VERSION)-$(ACP_CODEX_VERSION)
$(ACP_STAMP):
	@command -v npm >/dev/null || { echo "error: npm is needed to install the ACP agents" >&2; exit 1; }
	mkdir -p .tools/acp && npm install --prefix .tools/acp --save-exact --no-audit --no-fund --loglevel=error \
		@zed-industries/claude-agent-acp@$(ACP_CLAUDE_VERSION) @zed-industries/codex-acp@$(ACP_CODEX_VERSION)
	@touch $@

setup: $(STAMP) $(CODEX_STAMP) $(SPECTRAL_STAMP) $(ACP_STAMP)
	@path=$$(bash scripts/ensure-redis.sh) && echo "redis-server: $$path"
	@path=$$(bash scripts/ensure-bubblewrap.sh) && echo "bubblewrap (runtime sandbox): $$path"
	@path=$$(bash scripts/ensure-chromium.sh) && echo "chromium (console browser tests): $$path"
	@path=$$(bash scripts/ensure-promtool.sh) && echo "promtool (alert rules): $$path"

# `make run` is light: the embedded stack and its scripted demo (run.lock), no npm, browser or test tool; about
# a minute from a fresh clone. The real runtimes are `make providers` away; `make test` keeps the full setup.
# pip bootstraps uv alone (one wheel, hash-checked); uv installs the rest in parallel, hashes checked too, and
# compiles the bytecode once (else the six workers of the first `treadle up` each compile the same modules).
RUN_STAMP := $(VENV)/.installed-run
UV_INSTALL = $(BIN)/uv pip install -q --python $(BIN)/python --compile-bytecode
# The venv gets no pip of its own when this Python's pip can install into it (`pip --python`, pip >= 22.3):
# ensurepip costs 3-4 s of CPU, half a minute on a busy machine. `make setup` adds pip to the same venv later.
$(RUN_STAMP): pyproject.toml requirements/run.lock requirements/bootstrap.lock $(PACKAGES)
	$(PYTHON_CHECK)
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(BIN)/python install -q --disable-pip-version-check --require-hashes \
		-r requirements/bootstrap.lock 2>/dev/null || { $(PYTHON) -m venv $(VENV) \
		&& $(BIN)/pip install -q --disable-pip-version-check --require-hashes -r requirements/bootstrap.lock; }
	$(UV_INSTALL) --require-hashes -r requirements/run.lock
	$(UV_INSTALL) --no-deps --no-build-isolation -e .
	@touch $@

run: $(RUN_STAMP)
	@path=$$(bash scripts/ensure-redis.sh) && echo "redis-server: $$path"
	$(BIN)/treadle up --demo

# The real runtimes for `make run`: Claude Code (the claude extra, all.lock), the pinned Codex CLI, the two ACP
# agents (npm) and bubblewrap for the runtime sandbox. A model key then picks the runtime (docs/providers.md).
PROVIDERS_STAMP := $(VENV)/.installed-providers
$(PROVIDERS_STAMP): $(RUN_STAMP) requirements/all.lock
	$(UV_INSTALL) --require-hashes -r requirements/all.lock
	@touch $@

providers: $(PROVIDERS_STAMP) $(CODEX_STAMP) $(ACP_STAMP)
	@path=$$(bash scripts/ensure-bubblewrap.sh) && echo "bubblewrap (runtime sandbox): $$path"

# The documentation site in build/docs (strict: a broken link or a page outside the site fails; the suite builds
# it too, tests/unit/test_docs_site.py), after regenerating the configuration reference from the settings.
docs: $(STAMP)
	$(BIN)/python -m treadle.cli.config_reference
	$(BIN)/sphinx-build -W --keep-going -q -b html docs build/docs
	@echo "docs: build/docs/index.html"

test: setup
	$(BIN)/ruff check
	$(BIN)/ruff format --check
	$(BIN)/mypy
	$(SPECTRAL) lint --quiet --fail-severity=warn --ruleset .spectral.yaml schemas/openapi.json
	@TIMEFORMAT='wall time: %1Rs'; time scripts/loopback-only.sh $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_ARGS)

# Benchmarks run in a loopback-only network namespace too: nothing they start can reach beyond this machine.
bench: setup
	scripts/loopback-only.sh $(BIN)/python bench/run.py
	$(MAKE) bench-checkpoint

# Checkpoint cost on a 10,000-file repository vs plain git, and CPU per unchanged capture (not in `make test`)
bench-checkpoint: setup
	scripts/loopback-only.sh $(BIN)/python bench/bench_checkpoint_repo.py

# Treadle's scenario B and the LangGraph dev server (in-memory, the trivial graph), alternating twice (not in CI).
# The peer lives in its own venv under the tools folder, pinned to the versions of the reference measurement.
PEER_DIR ?= .tools/langgraph-peer
PEER_PINS := "langgraph-cli[inmem]==0.4.40" langgraph-api==0.16.7 langgraph-runtime-inmem==0.36.7 \
	langgraph==1.2.24 langgraph-sdk==0.4.14
$(PEER_DIR)/venv/bin/langgraph:
	$(PYTHON) -m venv $(PEER_DIR)/venv
	$(PEER_DIR)/venv/bin/pip install -q $(PEER_PINS)

bench-peer: setup $(PEER_DIR)/venv/bin/langgraph
	scripts/loopback-only.sh $(BIN)/python bench/peer.py --peer-dir $(PEER_DIR)

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
