# cuda13-upgrade: `make demo` and `make test` do all set-up on a fresh
# Debian/Ubuntu machine (as root): system packages, the Python venv, the
# sandbox image and package mirror. Both are quick when already set up.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SCENARIO ?= default
HOSTS ?= 1

export CONTAINERS_CONF := $(CURDIR)/sandbox/containers.conf
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(CURDIR)/$(BIN):$(PATH)
# The real PyPI CUDA 13 stack, downloaded once per machine (scripts/real-stack-cache.sh).
export CUDA13_REAL_STACK_CACHE ?= /var/cache/cuda13-upgrade-ci/real-stack

.PHONY: help setup system-packages venv image mirror real-stack-cache sandbox sandbox-destroy demo test lint unit molecule gpu-check benchmark clean

help:
	@echo "make demo       bring up a sandbox host and run the CUDA 13 upgrade against it"
	@echo "make test       lint, unit tests, molecule scenarios"
	@echo "make sandbox    create HOSTS sandbox hosts (default 1) and inventory/sandbox/hosts.yml"
	@echo "make sandbox-destroy  remove the sandbox hosts"
	@echo "make gpu-check OUT=DIR  on a machine with a real NVIDIA GPU: read-only, offline checks into DIR"

system-packages:
	@scripts/install-system-packages.sh

$(BIN)/.installed: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

venv: $(BIN)/.installed

setup: system-packages venv

image: setup
	@sandbox/image/build-image.sh >/dev/null

mirror: setup
	@$(PYTHON) sandbox/mirror/build.py --out .sandbox/mirror

# The real stack's wheels in $(CUDA13_REAL_STACK_CACHE), outside the clone and
# reused across runs and clones (4.3 GB from PyPI the first time).
real-stack-cache: setup
	@PYTHON=$(BIN)/python scripts/real-stack-cache.sh >/dev/null

sandbox: image mirror
	$(BIN)/ansible-playbook playbooks/sandbox.yml -e sandbox_count=$(HOSTS)

sandbox-destroy: setup
	$(BIN)/ansible-playbook playbooks/sandbox.yml -e sandbox_state=absent

demo: image mirror
	scripts/demo.sh $(SCENARIO)

lint: setup
	$(BIN)/ruff check src tests filter_plugins roles sandbox benchmarks molecule scripts library action_plugins
	$(BIN)/ruff format --check src tests filter_plugins roles sandbox benchmarks molecule scripts library action_plugins
	ANSIBLE_LINT_SKIP_UPDATE=1 $(BIN)/ansible-lint --offline -q

# Unit tests in UNIT_WORKERS processes (pytest-xdist); their times in a JUnit
# report, read by make test's table (scripts/test-phases.py).
UNIT_WORKERS ?= 2
unit: setup
	@mkdir -p .sandbox
	$(BIN)/python -m pytest -q -n $(UNIT_WORKERS) --junitxml=.sandbox/unit-junit.xml tests

# make test's scenarios: all of them (MOLECULE_SCENARIOS="default" runs one).
MOLECULE_SCENARIOS ?= sandbox preflight bad-input host-apt default gate real-stack midway fleet host-user

# Scenarios run MOLECULE_LANES at a time (distinct container names), the
# longest (MOLECULE_FIRST) started first; each one's log, in
# .sandbox/molecule-logs/, is printed whole when it ends (scripts/molecule-lanes.py).
# Three lanes on a two-core machine: the run's closing line measured the CPUs
# 98 % busy with three (1,574 s for the ten scenarios), so a fourth lane would only wait.
MOLECULE_LANES ?= 3
MOLECULE_FIRST ?= midway fleet real-stack default gate host-user

# real-stack's lane downloads its wheels first (make real-stack-cache), while
# the other lanes run.
# Scenario hosts start from the provisioned 12.8-era host layer
# (sandbox/image/host-layer.py, built once per machine and its inputs).
molecule: image mirror
	@set -e; export SANDBOX_IMAGE="$$(sandbox/image/build-image.sh)"; \
	export SANDBOX_HOST_IMAGE="$$($(BIN)/python sandbox/image/host-layer.py --base-image "$$SANDBOX_IMAGE")"; \
	$(BIN)/python scripts/molecule-lanes.py --lanes $(MOLECULE_LANES) --first "$(MOLECULE_FIRST)" \
	  --before "real-stack=make --no-print-directory real-stack-cache" \
	  --molecule $(BIN)/molecule --log-dir .sandbox/molecule-logs $(MOLECULE_SCENARIOS)

# lint, unit, molecule in order, ending with the table of where the time went.
test: setup
	@$(BIN)/python scripts/test-phases.py --junit .sandbox/unit-junit.xml \
	  --molecule-phases .sandbox/molecule-logs/phases.json lint unit molecule

# On a machine with a real NVIDIA GPU and driver: the package's parsers, stack probe,
# verdicts and preflight against it, read-only and offline; no set-up (such a machine
# may have no network). Results in OUT (scripts/gpu-check.sh).
gpu-check:
	@test -n "$(OUT)" || { echo "make gpu-check OUT=DIR: OUT, the directory for the results, is missing" >&2; exit 2; }
	@scripts/gpu-check.sh "$(OUT)"

# Figures, not pass/fail: the gate's error rates by simulation and the time the
# probe and the load metrics add to the trials, measured on the simulated server;
# then the upgrade's and rollback's wall times on a sandbox host (replaces the sandbox).
benchmark: image mirror
	$(BIN)/python benchmarks/gate_error_rates.py --mirror .sandbox/mirror
	$(BIN)/python benchmarks/sandbox_timings.py --rollback

clean: sandbox-destroy
	rm -rf .sandbox
