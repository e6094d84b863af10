# guardkit — make test, make demo, make bench, make lint.
GO      ?= go
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PKGS    := ./...

.PHONY: all test bench lint demo redis-server bench-compare

all: lint test

## test: install redis-server when missing, then vet and run every test with the race detector.
test: redis-server
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 9m $(PKGS)
	cd bench && $(GO) vet ./... && $(GO) test -race -count=1 ./...

## redis-server: install Debian's redis-server when it is not on PATH (tests start their own).
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "redis-server not found: installing it with apt-get"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq redis-server >/dev/null; \
	}
	@redis-server --version

## bench: the library's own benchmarks (round trips per operation are reported).
bench: redis-server
	$(GO) test -run '^$$' -bench . -benchmem -count=1 $(PKGS)

## lint: gofmt and go vet.
lint:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

## demo: the echo example's wallet under a burst of concurrent withdrawals, with and without
## the lock, on an embedded Redis (or REDIS_ADDR); exits 1 if the guarded run loses an update.
demo:
	@echo "building and running examples/demo"
	$(GO) run ./examples/demo

## bench-compare: guardkit side by side with other Go lock libraries on one redis-server (bench/, its own module); writes bench/RESULTS.md and the README's performance summary.
bench-compare: redis-server
	cd bench && $(GO) run . -out RESULTS.md -json results.jsonl -readme ../README.md

.PHONY: chaos
## chaos: the fault and abuse suite on real redis-server processes (a few minutes); prints
## the results table and writes it into docs/RELIABILITY.md. `make test` runs its smoke subset.
chaos: redis-server
	GUARDKIT_CHAOS_DOC=$(CURDIR)/docs/RELIABILITY.md \
	GUARDKIT_CHAOS_REV=$${GUARDKIT_CHAOS_REV:-$$(git describe --always --dirty 2>/dev/null)} \
	$(GO) test -race -tags chaos -count=1 -timeout 15m -run . -v ./chaos/
