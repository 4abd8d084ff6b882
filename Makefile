# TaoBrevJob operator. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export GOTOOLCHAIN ?= local
# Seeds of the simulation slice `make test` runs (chosen to fit ~2 minutes on a 2-core CI machine).
SIM_CI_SEEDS ?= 500
# pytest-xdist workers for `make test`. Most of an e2e test is waiting on real timers (the
# simulator's compressed durations, the operator's intervals), so on 2 cores 4 workers finish the
# suite in under 40% of the time of one (docs/testing.md has the figures); each worker has its own
# control plane. worksteal: idle workers take queued tests from busy ones (durations are uneven).
TEST_WORKERS ?= 4
PYTEST_PARALLEL := $(if $(filter 0 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist worksteal)

##@ Newcomer path
.PHONY: demo
demo: $(STAMP) native-deps ## Run a sample TaoBrevJob end to end on the local stack (control plane + Brev simulator + S3)
	$(PY) -m tests.devenv demo

.PHONY: test
test: $(STAMP) lint typecheck system-deps kube-build helm-build kueue-build simulate-ci ## What CI runs: lint + typecheck + a simulation slice, then the whole test suite on TEST_WORKERS workers (builds/reuses kube-apiserver + etcd)
	$(PY) -m pytest tests $(PYTEST_PARALLEL)

##@ Development
.PHONY: venv
venv: $(STAMP) ## Create .venv with the pinned dependencies

$(STAMP): pyproject.toml requirements/constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip==25.3"
	$(PY) -m pip install --quiet -c requirements/constraints.txt -e ".[dev]"
	touch $(STAMP)

# The image's init (deploy/image/Dockerfile pins the same Debian version).
TINI_VERSION := 0.19.0-1+b3

.PHONY: native-deps
native-deps: ## Install Debian's gcc when missing (the simulator's native ssh wrapper and docker client are built with it)
	@command -v gcc >/dev/null || { \
	  echo "installing Debian's gcc (the simulator's native ssh wrapper and docker client are built with it)"; \
	  command -v apt-get >/dev/null || { echo "apt-get not found: install gcc by hand"; exit 1; }; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null) \
	    || { echo "failed to install gcc"; exit 1; }; }

.PHONY: system-deps
system-deps: native-deps ## Install Debian packages the tests use (Prometheus server, tini; gcc via native-deps) when missing; no daemon is started
	@command -v prometheus >/dev/null || { \
	  echo "installing Debian's prometheus package (needed by the metrics e2e test)"; \
	  command -v apt-get >/dev/null || { echo "apt-get not found: install prometheus by hand"; exit 1; }; \
	  policy=/usr/sbin/policy-rc.d; made=; \
	  if [ ! -e $$policy ]; then printf '#!/bin/sh\nexit 101\n' > $$policy && chmod +x $$policy && made=1; fi; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null); \
	  rc=$$?; [ -n "$$made" ] && rm -f $$policy; \
	  [ $$rc -eq 0 ] || { echo "failed to install prometheus (apt-get exit $$rc)"; exit 1; }; \
	  if service prometheus status >/dev/null 2>&1; then \
	    echo "the prometheus package started its daemon despite policy-rc.d: stopping it through its service"; \
	    service prometheus stop; \
	  fi; }
	@command -v tini >/dev/null || { \
	  echo "installing Debian's tini $(TINI_VERSION) (PID 1 of the image; the PID 1 reaping test runs it)"; \
	  command -v apt-get >/dev/null || { echo "apt-get not found: install tini $(TINI_VERSION) by hand"; exit 1; }; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends tini=$(TINI_VERSION) >/dev/null) \
	    || { echo "failed to install tini=$(TINI_VERSION)"; exit 1; }; }

.PHONY: test-unit
test-unit: $(STAMP) ## Unit tests only (no I/O, seconds)
	$(PY) -m pytest tests/unit

.PHONY: test-fast
test-fast: $(STAMP) helm-build ## Everything but e2e (unit, component, model, simulation, integration), on TEST_WORKERS workers
	$(PY) -m pytest tests -m "not e2e" $(PYTEST_PARALLEL)

.PHONY: test-integration
test-integration: $(STAMP) system-deps helm-build ## Client + simulator + S3 as real subprocesses (the PID 1 test runs tini)
	$(PY) -m pytest tests/integration $(PYTEST_PARALLEL)

.PHONY: test-e2e
test-e2e: $(STAMP) system-deps kube-build helm-build kueue-build ## End-to-end against the real control plane and the operator process
	$(PY) -m pytest tests/e2e $(PYTEST_PARALLEL)

.PHONY: test-pid1
test-pid1: $(STAMP) system-deps ## The image's PID 1 reaps the exited ssh masters (tini vs python as PID 1; ~1 min; also in make test)
	$(PY) -m pytest tests/integration/test_pid1_reaping.py

# The whole operator on a virtual clock (tests/simulation/README.md): every seed one interleaving.
SIM_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
.PHONY: simulate
simulate: $(STAMP) ## Deterministic simulation of the whole operator: SEEDS=N [START=S] seeds, or SEED=n to replay one with its trace
	@if [ -n "$(SEED)" ]; then $(PY) -m tests.simulation --seed $(SEED); \
	else $(PY) -m tests.simulation --seeds $(or $(SEEDS),1000) --start $(or $(START),0) --jobs $(SIM_JOBS); fi

.PHONY: simulate-ci
simulate-ci: $(STAMP) ## The slice CI runs before pytest (SIM_CI_SEEDS seeds, fixed, from seed 0)
	$(PY) -m tests.simulation --seeds $(SIM_CI_SEEDS) --jobs $(SIM_JOBS)

.PHONY: simulate-long
simulate-long: $(STAMP) ## 100,000 seeds (hours on 2 cores; START=S to resume)
	$(PY) -m tests.simulation --seeds 100000 --start $(or $(START),0) --jobs $(SIM_JOBS)

.PHONY: flake-hunt
flake-hunt: $(STAMP) system-deps helm-build kueue-build ## Integration + e2e tiers RUNS times (default 5, PARALLEL at once) beside a busy loop per core; lists every test that failed (ARGS=--load W | paths | -- pytest args)
	$(PY) -m tests.devenv.flakehunt --runs $(or $(RUNS),5) --parallel $(or $(PARALLEL),1) $(ARGS)

.PHONY: lint
lint: $(STAMP) ## ruff check + format check (whole repo) + import layers (.importlinter, levels) + shellcheck of the remote programs + CRD and CRD-reference drift
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache --no-logo
	$(PY) -m tests.devenv.levels --max 10 --quiet
	$(PY) -m tests.devenv.shellcheck_remote
	$(PY) -m tests.devenv.crdgen --check
	$(PY) -m tests.devenv.crdref --check

.PHONY: typecheck
typecheck: $(STAMP) ## mypy --strict over the operator and the tests
	$(VENV)/bin/mypy

.PHONY: crds
crds: $(STAMP) ## Regenerate crds/ from controller/api/models.py, and the CRD reference (docs/crd-reference.md) from crds/
	$(PY) -m tests.devenv.crdgen --write
	$(PY) -m tests.devenv.crdref --write

.PHONY: docs
docs: $(STAMP) ## Build the documentation site into site/ (mkdocs --strict: a warning, a broken link or anchor fails it)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

.PHONY: bench
bench: $(STAMP) native-deps ## Benchmark: isolation and footprint to 1,000 running at F = 1; billed idle, the 5-step chain, the burst and the burst under Brev's rate limit at F = 0.1 (< 30 min; ARGS=--quick | --with-recovery)
	$(PY) -m tests.bench $(ARGS)

.PHONY: bench-rss
bench-rss: $(STAMP) native-deps ## Benchmark: only the footprint scenario (slope at 50/100/200, RSS at 1,000 Running; F = 1; ARGS=--rss-jobs N --budget S)
	$(PY) -m tests.bench --rss-only $(ARGS)

.PHONY: bench-recovery
bench-recovery: $(STAMP) native-deps ## Benchmark: lost instance -> resumed on a new one (all durations x one factor)
	$(PY) -m tests.bench_recovery

.PHONY: bench-chain
bench-chain: $(STAMP) native-deps ## Benchmark: billed idle of a 5-step chain as one workflow vs five single jobs (F = 0.1, ~6 min)
	$(PY) -m tests.bench --chain-only

.PHONY: durations
durations: $(STAMP) system-deps kube-build helm-build kueue-build ## Run the suite as `make test` does and rewrite tests/durations.txt (its long tests, which the workers start first)
	set -o pipefail; $(PY) -m pytest tests $(PYTEST_PARALLEL) --durations=0 -q | tee .durations-report.txt | tail -3
	$(PY) -m tests.durations < .durations-report.txt

.PHONY: coverage
coverage: $(STAMP) system-deps kube-build helm-build kueue-build ## Line coverage of controller/ over the whole suite, subprocesses included (the operator, the plugin): report in .coverage-report.txt
	rm -rf .coverage-data && mkdir -p .coverage-data
	COVERAGE_FILE=$(CURDIR)/.coverage-data/.coverage $(PY) -m coverage run -m pytest tests $(PYTEST_PARALLEL) -p no:cacheprovider $(ARGS)
	COVERAGE_FILE=.coverage-data/.coverage $(PY) -m coverage combine --quiet .coverage-data
	COVERAGE_FILE=.coverage-data/.coverage $(PY) -m coverage report | tee .coverage-report.txt | tail -1

.PHONY: kube-build
.PHONY: helm-build
helm-build: $(STAMP) ## Build (or reuse the cached) helm 3 and helm 4 for the chart's tests (Go module proxy, pinned in versions.yaml)
	$(PY) -m tests.devenv.helmbuild

kube-build: $(STAMP) ## Build (or reuse the cached) kube-apiserver and etcd
	$(PY) -m tests.devenv.kubebuild

.PHONY: kueue-build
kueue-build: $(STAMP) ## Build (or reuse the cached) kueue-controller-manager for the Kueue e2e tests (docs/kueue.md; ~5 min on 2 cores the first time)
	$(PY) -m tests.devenv.kueuebuild

.PHONY: up
up: $(STAMP) ## Start the local control plane (CRD installed) and print the kubeconfig path
	$(PY) -m tests.devenv up

.PHONY: down
down: $(STAMP) ## Stop the local stack
	$(PY) -m tests.devenv down

.PHONY: status
status: $(STAMP) ## Show the local stack
	$(PY) -m tests.devenv status

.PHONY: resolve-digests
resolve-digests: $(STAMP) ## Release: pin versions.yaml's images (and deploy/base's) to their registry digests (needs registry network access)
	$(PY) deploy/tools/resolve_digests.py

CHECKOV_VENV ?= $(HOME)/.cache/taobrev-operator/checkov-venv
.PHONY: policy
policy: $(STAMP) helm-build ## checkov on the rendered deploy/ kustomizations (checkov in its own cached venv; accepted skips in .checkov.yaml)
	@CHECKOV_VENV=$(CHECKOV_VENV) $(PY) -m tests.devenv.checkov >/dev/null
	$(PY) deploy/tools/policy_check.py --checkov $(CHECKOV_VENV)/bin/checkov --helm "$$($(PY) -m tests.devenv.helmbuild | head -1)"

.PHONY: lock
lock: ## Re-resolve requirements/constraints.txt from pyproject.toml (needs network to PyPI)
	rm -rf /tmp/taobrev-lock && $(PYTHON) -m venv /tmp/taobrev-lock && /tmp/taobrev-lock/bin/pip install -q ".[dev]" && \
	  { sed -n '1,2p' requirements/constraints.txt; /tmp/taobrev-lock/bin/pip freeze --exclude taobrev-operator; } > requirements/constraints.new && \
	  mv requirements/constraints.new requirements/constraints.txt

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z0-9_-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)
