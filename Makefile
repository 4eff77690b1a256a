# Developer and CI entry points. `make help` lists them.

GO ?= go

# staticcheck 2026.2.2 (module v0.8.2), the first release line built for Go 1.26.
STATICCHECK_VERSION ?= v0.8.2
GREMLINS_VERSION ?= v0.6.0
# What make mutate tests: every directory mutation testing covers
# (docs/mutation.md), one after the other; `make mutate PKG=./cell` runs one.
# gremlins walks a directory's subdirectories too (./cell takes cell/relay,
# ./gateway its catalog and routes): MUTATE_FLAGS='-E ^relay/' leaves them out.
PKG ?= ./arena ./wire ./engine ./cell ./identity ./internal/pg ./client ./gateway
# gremlins' own flags, and the go test flags it runs with: -count=1, or the
# coverage pass reads cached results and every mutant times out; a package
# whose tests mostly wait (client) runs faster with -parallel=8.
MUTATE_FLAGS ?= --workers 1 --timeout-coefficient 3
MUTATE_GOFLAGS ?= -count=1
# What lint checks; `make lint LINT_PKGS=./arena/...` checks one subtree
# (gofmt gets the same tree as a directory: ./... -> .).
LINT_PKGS ?= ./...
LINT_DIRS = $(patsubst %/...,%,$(LINT_PKGS))
# bench/ (the load tool, the peers' drivers, the comparisons with peer
# libraries) is a module of its own, so that the root module requires none
# of the peers' clients; test and lint cover it too. With LINT_PKGS set to
# a subtree of the root, lint checks that subtree only.
BENCH_MOD = bench
# How long each fuzz target runs under `make fuzz`.
FUZZTIME ?= 10s
# The fuzz targets that make network round trips to a live server for each
# input (tens of milliseconds each, where the others take microseconds),
# and how long they run: FUZZTIME's count would take them hours.
FUZZ_NET ?= FuzzClientLinkUpgrade FuzzClientLinkFrames
FUZZTIME_NET ?= 500x

# The reliability suite (RELIABILITY.md): RELIABILITY_SCALE multiplies every
# attack's duration and count (1: full, under 10 minutes; CI runs 0.2);
# RELIABILITY_OUT receives one JSON file of figures per case.
RELIABILITY_SCALE ?= 1
RELIABILITY_OUT ?=
RELIABILITY_RUN ?= .

# Versioned builds: `make build` stamps the version (a VERSION file if the
# tree has one, else git describe) and the commit into the binary; the
# binary falls back to the Go toolchain's build info when they are not
# stamped (cmd/queen/version.go). The test of `queen --version` builds
# with these same variables (cmd/queen/version_test.go).
VERSION ?= $(shell cat VERSION 2>/dev/null || git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell c=$$(git rev-parse HEAD 2>/dev/null) && { git diff --quiet HEAD -- 2>/dev/null && echo $$c || echo $$c-dirty; })
LDFLAGS ?= -X main.version=$(VERSION) -X main.commit=$(COMMIT)
BIN ?= bin/queen

.PHONY: help build run generate test bench bench-peers bench-sdk bench-gateway bench-compare bench-ab fuzz lint profile reliability mutate

help:
	@echo "build          build the broker into BIN ($(BIN)), queenctl and queen-gateway beside it, stamped with VERSION and COMMIT"
	@echo "run            start the broker (go run ./cmd/queen, stamped as build is)"
	@echo "generate       go generate: gateway/routes/routes.json from the broker's route table"
	@echo "test           go test -race on every package (the root module and bench/)"
	@echo "bench          micro-benchmarks of engine and arena"
	@echo "bench-peers    every bench/ scenario against the broker, Redis and NATS, 3 rounds, one table of medians"
	@echo "bench-sdk      request/reply through the SDKs: queen-mq vs nats.js vs ioredis, Go SDK vs nats.go vs go-redis, one table"
	@echo "bench-gateway  request/reply and throughput through queen-gateway vs the broker directly, one table"
	@echo "bench-compare  micro-benchmarks of engine, arena, wire: working tree vs REV, benchstat"
	@echo "bench-ab       one scenario end to end, broker A vs broker B alternating (REV_A, ENV_B, ...)"
	@echo "profile        CPU, heap, allocs, mutex, block profiles of the broker under a scenario"
	@echo "mutate         mutation testing (gremlins) of PKG, by default every package it covers; hours, not in CI"
	@echo "fuzz           every Fuzz* target for FUZZTIME ($(FUZZTIME)) each, FUZZ_NET's for FUZZTIME_NET ($(FUZZTIME_NET))"
	@echo "lint           gofmt, go vet, staticcheck $(STATICCHECK_VERSION) (the root module and bench/)"
	@echo "reliability    the memory-bound attacks against the real broker (RELIABILITY.md); RELIABILITY_SCALE=0.2 briefly"

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/queen
	$(GO) build -ldflags '$(LDFLAGS)' -o $(dir $(BIN))queenctl ./cmd/queenctl
	$(GO) build -ldflags '$(LDFLAGS)' -o $(dir $(BIN))queen-gateway ./cmd/queen-gateway

run:
	$(GO) run -ldflags '$(LDFLAGS)' ./cmd/queen

# gateway/routes/routes.json, written from server.RouteTable by
# cmd/queen-routes; a test fails while it is stale.
generate:
	$(GO) generate ./gateway/routes

test:
	$(GO) test -race -count=1 ./...
	$(GO) test -count=1 -run 'TestLargeBodyForwardedWhole' ./gateway/   # its CPU bound, checked without -race
	cd $(BENCH_MOD) && $(GO) test -race -count=1 ./...

# make reliability [RELIABILITY_SCALE=0.2] [RELIABILITY_OUT=reliability/results] [RELIABILITY_RUN=regexp]
reliability:
	QUEEN_RELIABILITY_SCALE=$(RELIABILITY_SCALE) QUEEN_RELIABILITY_OUT=$(RELIABILITY_OUT) \
		$(GO) test -tags reliability -count=1 -timeout 15m -v -run '$(RELIABILITY_RUN)' ./reliability/

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./engine ./engine/wheel ./arena ./wire

# Finds the fuzz targets with `go test -list` so that new ones are picked up
# without editing this file; with none it succeeds doing nothing.
fuzz:
	@set -e; \
	for pkg in $$($(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...); do \
		list=$$($(GO) test -list '^Fuzz' $$pkg) || exit 1; \
		targets=$$(printf '%s\n' "$$list" | grep '^Fuzz' || true); \
		for t in $$targets; do \
			n=$(FUZZTIME); \
			case " $(FUZZ_NET) " in *" $$t "*) n=$(FUZZTIME_NET) ;; esac; \
			echo "== fuzz $$pkg $$t ($$n)"; \
			$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $$n -fuzzminimizetime 200x $$pkg; \
		done; \
	done

lint:
	@out=$$(gofmt -l $(LINT_DIRS)); if [ -n "$$out" ]; then echo "gofmt -l reports unformatted files:"; echo "$$out"; exit 1; fi
	$(GO) vet $(LINT_PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(LINT_PKGS)
ifeq ($(LINT_PKGS),./...)
	cd $(BENCH_MOD) && $(GO) vet ./...
	cd $(BENCH_MOD) && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
endif

# End-to-end comparison with the peers (bench/README.md). Knobs: D,
# SCENARIOS, OUT, BROKER_PORT, REDIS_PORT, NATS_PORT, QUEENBENCH_FLAGS.
bench-peers:
	bash bench/peers.sh

# Request/reply through each language's clients, ours against the peers'
# own (bench/README.md). Knobs: D, WARMUP, ROUNDS, CLIENTS, OUT,
# BROKER_PORT, REDIS_PORT, NATS_PORT, BROKER_ENV, QUEENBENCH_FLAGS, NODE_FLAGS.
bench-sdk:
	bash bench/sdk.sh

# Through the multi-tenant gateway against the broker directly (bench/gateway.sh).
# Knobs: SCENARIOS, ROUNDS, D, WARMUP, OUT, BROKER_PORT, GATEWAY_PORT, BROKER_ENV,
# GATEWAY_ENV, QUEENBENCH_FLAGS, BROKER_BIN (another build's broker, for an A/B).
bench-gateway:
	bash bench/gateway.sh

# make bench-compare REV=HEAD~1 [COUNT=10] [BENCH=regexp] [PKGS="./engine ./arena ./wire"]
bench-compare:
	bash bench/compare.sh

# make bench-ab [REV_A=HEAD] [REV_B=.] [ENV_A=...] [ENV_B=...] [SCENARIO=reqreply] [ROUNDS=3] [D=5s]
bench-ab:
	bash bench/ab.sh

# make profile [SCENARIO=reqreply] [PROFILE_SECONDS=15]: saves under profiles/SCENARIO/.
profile:
	bash bench/profile.sh

# Mutation testing (docs/mutation.md): each mutant is the package with one
# operator changed; a test that fails kills it. Takes minutes, so not in CI.
# -count=1: without it the coverage pass reads cached test results and every
# mutant times out (docs/mutation.md).
mutate:
	for p in $(PKG); do \
		GOFLAGS='$(MUTATE_GOFLAGS)' $(GO) run github.com/go-gremlins/gremlins/cmd/gremlins@$(GREMLINS_VERSION) unleash $(MUTATE_FLAGS) $$p || exit 1; \
	done
