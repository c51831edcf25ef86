# Ordo's commands. The README's two set-up commands are `make demo` and
# `make test`; each finds or installs what it needs (scripts/ensure-tools.sh).
SHELL := /bin/bash
GO    ?= go
PKGS  := ./...
# The default suite must stay well under CI's limit on a 2-core machine.
TEST_TIMEOUT ?= 20m

.PHONY: all build demo test check lint proto tools bench bench-proxy bench-order bench-analysis bench-capture bench-cluster bench-load clean

all: build

build:
	@bash scripts/ensure-tools.sh go
	$(GO) build -o bin/ ./cmd/...

## demo: a local 3-node cluster on local PostgreSQL servers; prints connection strings.
demo:
	@bash scripts/ensure-tools.sh go postgres
	$(GO) build -o bin/ ./cmd/ordo
	./bin/ordo demo $(DEMO_FLAGS)

## test: static checks, then every test of the default suite.
test: tools check
	$(GO) test -timeout $(TEST_TIMEOUT) $(TESTFLAGS) $(PKGS)

tools:
	@bash scripts/ensure-tools.sh go postgres protoc lint

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
	$(GO) run ./test/bench/proxy

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

## bench-load: pgbench -i -s 10 directly and through one node (a 1,000,000-row transaction).
bench-load:
	@bash scripts/ensure-tools.sh go postgres
	$(GO) run ./test/bench/cluster -load $(BENCH_FLAGS)

clean:
	rm -rf bin .tools
