# Developer and CI entry points. `make help` lists them.

GO ?= go

# staticcheck 2026.2.2 (module v0.8.2), the first release line built for Go 1.26.
STATICCHECK_VERSION ?= v0.8.2
# What lint checks; `make lint LINT_PKGS=./arena/...` checks one subtree
# (gofmt gets the same tree as a directory: ./... -> .).
LINT_PKGS ?= ./...
LINT_DIRS = $(patsubst %/...,%,$(LINT_PKGS))
# How long each fuzz target runs under `make fuzz`.
FUZZTIME ?= 10s

.PHONY: help run test bench fuzz lint profile

help:
	@echo "run      start the broker (go run ./cmd/queen)"
	@echo "test     go test -race on every package"
	@echo "bench    micro-benchmarks of engine and arena"
	@echo "fuzz     every Fuzz* target for FUZZTIME ($(FUZZTIME)) each"
	@echo "lint     gofmt, go vet, staticcheck $(STATICCHECK_VERSION)"
	@echo "profile  (comes with the bench tool)"

run:
	$(GO) run ./cmd/queen

test:
	$(GO) test -race -count=1 ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./engine ./arena

# Finds the fuzz targets with `go test -list` so that new ones are picked up
# without editing this file; with none it succeeds doing nothing.
fuzz:
	@set -e; \
	for pkg in $$($(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...); do \
		list=$$($(GO) test -list '^Fuzz' $$pkg) || exit 1; \
		targets=$$(printf '%s\n' "$$list" | grep '^Fuzz' || true); \
		for t in $$targets; do \
			echo "== fuzz $$pkg $$t ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

lint:
	@out=$$(gofmt -l $(LINT_DIRS)); if [ -n "$$out" ]; then echo "gofmt -l reports unformatted files:"; echo "$$out"; exit 1; fi
	$(GO) vet $(LINT_PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(LINT_PKGS)

profile:
	@echo "profile: capturing and reading pprof profiles comes with the bench tool (bench/, profiles/)."
