# Ordo's commands. The README's two set-up commands are `make demo` and
# `make test`; each finds or installs what it needs (scripts/ensure-tools.sh).
SHELL := /bin/bash
GO    ?= go
PKGS  := ./...
# The default suite must stay well under CI's limit on a 2-core machine.
TEST_TIMEOUT ?= 20m
# The packages that replicate through PostgreSQL's logical decoding, or
# read its catalogs and speak its protocol; `make test` runs them a second
# time on PostgreSQL 18 (PG18_BIN: its bin dir; empty means the pinned
# build scripts/ensure-tools.sh installs in .tools/pg18).
PG18_PKGS ?= ./internal/pglocal ./internal/capture ./internal/apply ./internal/catalog ./internal/analysis \
  ./internal/schemacheck ./internal/sequences ./internal/wire ./test/e2e/...
PG18_BIN  ?=
# The longest tests of protocols, membership, failures and deployments
# (6 s or more each on PostgreSQL 18), which behave alike on every
# version, are skipped on 18 to keep the default suite in its budget
# (`make test-pg18 PG18_SKIP=` runs everything); every protocol's shorter
# tests run on both.
PG18_SKIP ?= TPCC|JoinKilledAndRestarted|RejoinAfterTheLogMovedOn|KillDuringFragments|RemoveNodeUnderLoad|Readyz|JoinUnderLoad|Pgbench|OnlineProtocolSwitch|PgrOriginKilledBeforeItsOutcome|ConsWaiterOfANodeTakenForGone|PeerTLS|ConsDeadOriginReleasesItsClasses|ScheduledDataCheck|ConsHotRowWithoutAborts|Witness|DonorKilled|PromoteALearner|Ordoctl|DrainANode|SQLAlchemy|Deployments

.PHONY: all build demo test test-pg18 fuzz fuzz-short check lint proto tools bench bench-proxy bench-order bench-analysis bench-capture bench-cluster bench-sysbench bench-load bench-ddl bench-join bench-follow bench-tpcc clean safety compat-suites

all: build

build:
	@bash scripts/ensure-tools.sh go
	$(GO) build -o bin/ ./cmd/...

## demo: a local 3-node cluster on local PostgreSQL servers; prints connection strings.
demo:
	@bash scripts/ensure-tools.sh go postgres
	$(GO) build -o bin/ ./cmd/ordo ./cmd/ordoctl
	./bin/ordo demo $(DEMO_FLAGS)

## test: static checks, every test of the default suite on PostgreSQL 15,
## then the replication packages (PG18_PKGS) on PostgreSQL 18, then a short
## run of the fuzz targets for hostile peers and clients (fuzz-short).
test: tools check
	@echo "== $(PKGS) on $$($(GO) run ./internal/pglocal/pgversion)"
	$(GO) test -timeout $(TEST_TIMEOUT) $(TESTFLAGS) $(PKGS)
	@$(MAKE) --no-print-directory test-pg18
	@$(MAKE) --no-print-directory fuzz-short

# Fuzz targets, as package:target. Their seed corpora (f.Add and
# testdata/fuzz) run with every `go test`; `make fuzz` fuzzes each for
# FUZZTIME, `make fuzz-short` (part of `make test`) the ones for what
# peers and unauthenticated clients can send for FUZZTIME_SHORT each.
FUZZ_SECURITY := ./internal/wire:FuzzStartup ./internal/totalorder/transport:FuzzStream \
	./internal/totalorder:FuzzPeerMessages ./internal/replica:FuzzEntries
FUZZ_ALL := $(FUZZ_SECURITY) ./internal/wire:FuzzClientMessages ./internal/capture:FuzzDecode \
	./internal/txn:FuzzEncodeValues ./internal/analysis:FuzzAnalyze ./internal/analysis:FuzzFingerprint
FUZZTIME ?= 60s
FUZZTIME_SHORT ?= 5s

# (scripts/fuzz.sh: how a failure of Go's fuzzing coordinator itself,
# golang/go#75804, is told apart from a failing input.)
define run_fuzz
	@bash scripts/fuzz.sh "$(GO)" $(2) $(1)
endef

## fuzz-short: each fuzz target for hostile input for FUZZTIME_SHORT (5s).
fuzz-short:
	$(call run_fuzz,$(FUZZ_SECURITY),$(FUZZTIME_SHORT))

## fuzz: every fuzz target for FUZZTIME (default 60s each), e.g.
## `make fuzz FUZZTIME=10m`. A failure leaves its input in the package's
## testdata/fuzz: keep it there as a regression case once fixed.
fuzz:
	$(call run_fuzz,$(FUZZ_ALL),$(FUZZTIME))

## test-pg18: PG18_PKGS on PostgreSQL 18 (ORDO_PG_BIN set to its bin dir).
## -count=1: a package whose TestMain starts the servers reads ORDO_PG_BIN
## before go test's cache watches the environment, so a cached run on 15
## would stand in for 18.
test-pg18:
	@bin="$(PG18_BIN)"; [ -n "$$bin" ] || bin=$$(bash scripts/ensure-tools.sh postgres18) || exit 1; \
	  echo "== $(PG18_PKGS) on $$(ORDO_PG_BIN=$$bin $(GO) run ./internal/pglocal/pgversion)"; \
	  echo "ORDO_PG_BIN=$$bin $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -skip '$(PG18_SKIP)' $(TESTFLAGS) $(PG18_PKGS)"; \
	  ORDO_PG_BIN=$$bin $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -skip '$(PG18_SKIP)' $(TESTFLAGS) $(PG18_PKGS)

tools:
	@bash scripts/ensure-tools.sh go postgres postgres18 protoc lint >/dev/null

check:
	@bad=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$') 2>/dev/null); \
	  if [ -n "$$bad" ]; then echo "gofmt needed on:"; echo "$$bad"; exit 1; fi
	$(GO) vet $(PKGS)
	.tools/bin/staticcheck $(PKGS)

lint: tools check

## proto: regenerate pkg/api/ordo/v1 from proto/ordo/v1.
proto:
	bash scripts/genproto.sh

## Benchmarks: not part of the default suite; each ends with a RESULT line.
bench: bench-proxy bench-order bench-analysis bench-capture bench-cluster

bench-proxy:
	@bash scripts/ensure-tools.sh go postgres pgbouncer
	$(GO) run ./test/bench/proxy $(BENCH_FLAGS)

bench-order:
	$(GO) run ./test/bench/order

bench-analysis:
	$(GO) run ./test/bench/analysis

bench-capture:
	@bash scripts/ensure-tools.sh go postgres
	$(GO) run ./test/bench/capture

bench-cluster:
	@bash scripts/ensure-tools.sh go postgres
	$(GO) run ./test/bench/cluster $(BENCH_FLAGS)

## bench-sysbench: sysbench oltp_read_write directly and through a 3-node
## cluster (dbsm-si, dbsm), and through PgBouncer in front of the direct
## server, 1 and 8 threads, interleaved runs, medians, CPU per transaction
## and where a commit's time goes (docs/performance.md).
bench-sysbench:
	@bash scripts/ensure-tools.sh go postgres sysbench pgbouncer
	$(GO) run ./test/bench/sysbench $(BENCH_FLAGS)

## bench-load: pgbench -i -s 10 directly and through one node (a 1,000,000-row transaction).
bench-load:
	@bash scripts/ensure-tools.sh go postgres
	$(GO) run ./test/bench/cluster -load $(BENCH_FLAGS)

## bench-ddl: CREATE TABLE, an insert and DROP TABLE directly and through
## one node of a 3-node cluster, interleaved runs, medians (docs/performance.md).
bench-ddl:
	@bash scripts/ensure-tools.sh go postgres
	$(GO) run ./test/bench/cluster -ddl $(BENCH_FLAGS)

## bench-join: nodes join a 3-node cluster holding pgbench -i -s 50, idle
## and under pgbench load, against pg_dump | pg_restore of the same
## database, and the donor's throughput during the copy (docs/membership.md).
bench-join:
	@bash scripts/ensure-tools.sh go postgres
	$(GO) run ./test/bench/cluster -join -scale 50 $(BENCH_FLAGS)

## bench-follow: 1 client on a node that does not lead, links delayed by
## 10 ms one way, with leader_follows_writes off and on (docs/performance.md).
bench-follow:
	@bash scripts/ensure-tools.sh go postgres
	$(GO) run ./test/bench/cluster -follow 10ms -scale 1 $(BENCH_FLAGS)

## bench-tpcc: TPC-C directly and through a 3-node cluster under dbsm,
## dbsm-si, pgr and cons (table and warehouse grain), 1 and 8 clients per
## node, interleaved runs, medians; a RESULT line per configuration
## (docs/tpcc.md). BENCH_FLAGS, e.g. "-runs 5 -duration 60s" or "-small".
bench-tpcc:
	@bash scripts/ensure-tools.sh go postgres
	$(GO) run ./test/bench/tpcc/bench $(BENCH_FLAGS)

clean:
	rm -rf bin .tools

## safety: the Jepsen-style safety matrix (workload x nemesis x protocol,
## docs/safety.md), not part of `make test`. Each run lasts SAFETY_TIME
## (default 30s); histories and reports go under SAFETY_RESULTS (default
## /tmp/ordo-safety); SAFETY_RUN narrows it, e.g. SAFETY_RUN=/dbsm-si/append/kill.
safety:
	@bash scripts/ensure-tools.sh go postgres
	SAFETY_TIME=$${SAFETY_TIME:-30s} SAFETY_RESULTS=$${SAFETY_RESULTS:-/tmp/ordo-safety} \
	  $(GO) test -count=1 -timeout 0 -v -run "TestMatrix$${SAFETY_RUN}" ./test/safety/

## compat-suites: drivers' own test suites (psycopg 3, pgjdbc, node-postgres),
## checked out under SUITES_DIR, through a 3-node cluster and directly
## against PostgreSQL; prints pass/fail/skip per suite both ways and a RESULT
## line (docs/compatibility.md). Not part of `make test`.
compat-suites:
	@bash scripts/ensure-tools.sh go postgres
	SUITES_DIR="$(SUITES_DIR)" bash scripts/compat-suites.sh
