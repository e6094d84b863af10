# guardkit — make test, make demo, make bench, make lint.
GO      ?= go
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PKGS    := ./...

.PHONY: all test bench lint demo redis-server bench-compare proto proto-check protoc

all: lint test

## test: install redis-server when missing, then vet and run every test with the race detector.
# -parallel 8: the tests marked parallel (guard's freezes of Redis, its busy waits) mostly
# sleep, so they run at once instead of two at a time.
test: redis-server proto-check
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -parallel 8 -timeout 9m $(PKGS)
	cd bench && $(GO) vet ./... && $(GO) test -race -count=1 ./...
	cd connectguard && $(GO) vet ./... && $(GO) test -race -count=1 ./...
	cd examples/connect && $(GO) vet ./...

## redis-server: install Debian's redis-server when it is not on PATH (tests start their own).
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "redis-server not found: installing it with apt-get"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq redis-server >/dev/null; \
	}
	@redis-server --version

# The generated Go code of the .proto files, made by pinned generators in .bin/.
MODULE                     := github.com/guardkit/guardkit
PROTOC_GEN_GO_VERSION      := v1.36.11
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
PROTOC_GEN_GO              := $(CURDIR)/.bin/protoc-gen-go-$(PROTOC_GEN_GO_VERSION)/protoc-gen-go
PROTOC_GEN_GO_GRPC         := $(CURDIR)/.bin/protoc-gen-go-grpc-$(PROTOC_GEN_GO_GRPC_VERSION)/protoc-gen-go-grpc
PROTO_FILES                := interceptor/proto/guardkit/v1/lock.proto examples/grpc/shoppb/shop.proto

# proto_gen writes the Go code of PROTO_FILES under $(1), laid out as in the repository.
define proto_gen
	protoc -I interceptor/proto -I examples/grpc/shoppb \
		--plugin=protoc-gen-go=$(PROTOC_GEN_GO) --go_out=$(1) --go_opt=module=$(MODULE) \
		--plugin=protoc-gen-go-grpc=$(PROTOC_GEN_GO_GRPC) --go-grpc_out=$(1) --go-grpc_opt=module=$(MODULE) \
		$(PROTO_FILES)
endef

## proto: regenerate the Go code of every .proto file with protoc and the pinned plugins.
proto: protoc $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC)
	$(call proto_gen,.)

## proto-check: fail when the committed generated code is not what `make proto` makes.
## The protoc version recorded in the files' headers is not compared: the plugins' output
## depends on the .proto files and the plugins' versions.
proto-check: protoc $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC)
	@tmp="$$(mktemp -d)"; trap 'rm -rf "$$tmp"' EXIT; \
	$(call proto_gen,"$$tmp") || exit 1; \
	stale=0; \
	for f in $$(cd "$$tmp" && find . -name '*.go' | sed 's|^\./||' | sort); do \
		diff -u -I '^// .*protoc  *v[0-9]' "$$f" "$$tmp/$$f" || stale=1; \
	done; \
	for f in $$(git ls-files '*.pb.go'); do \
		[ -f "$$tmp/$$f" ] || { echo "$$f: no .proto file in PROTO_FILES generates it"; stale=1; }; \
	done; \
	if [ $$stale = 1 ]; then echo "generated code is out of date: run make proto"; exit 1; fi; \
	echo "generated code is current"

## protoc: install Debian's protoc and the well-known .proto files when protoc or they are missing.
protoc:
	@bin="$$(command -v protoc)"; [ -n "$$bin" ] && [ -f "$$(dirname "$$bin")/../include/google/protobuf/descriptor.proto" ] || { \
		echo "protoc or its well-known .proto files not found: installing them with apt-get"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq protobuf-compiler libprotobuf-dev >/dev/null; \
	}
	@protoc --version

$(PROTOC_GEN_GO):
	GOBIN=$(@D) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(PROTOC_GEN_GO_GRPC):
	GOBIN=$(@D) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

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
	@echo "building examples/demo (the first build takes a minute or two)…"
	@$(GO) build -o $(CURDIR)/.bin/demo ./examples/demo
	@echo "running examples/demo"
	@$(CURDIR)/.bin/demo

## bench-compare: guardkit side by side with other Go lock libraries on one redis-server (bench/, its own module); writes bench/RESULTS.md, its SVG charts in bench/charts, the summary in docs/PERFORMANCE.md and the capacity page docs/CAPACITY.md.
bench-compare: redis-server
	cd bench && $(GO) run . -out RESULTS.md -json results.jsonl -charts charts -readme ../docs/PERFORMANCE.md -capacity ../docs/CAPACITY.md

.PHONY: chaos chaos-single chaos-kinds chaos-deploy chaos-quorum
## chaos: the fault and abuse suite on real redis-server processes, its four groups in
## turn (about 15 minutes in all); each prints its results table and writes it into
## docs/RELIABILITY.md. `make test` runs its smoke subset.
chaos: chaos-single chaos-kinds chaos-deploy chaos-quorum

## chaos-single, chaos-kinds, chaos-deploy, chaos-quorum: one group of the suite (each
## under 10 minutes): a single server's faults, the lock kinds' rows, Cluster and
## Sentinel, the quorum Locker. The revision in each table is the checkout's, "-dirty"
## when a tracked file other than docs/RELIABILITY.md (which the groups rewrite) changed.
chaos-single chaos-kinds chaos-deploy chaos-quorum: chaos-%: redis-server
	GUARDKIT_CHAOS_GROUP=$* \
	GUARDKIT_CHAOS_DOC=$(CURDIR)/docs/RELIABILITY.md \
	GUARDKIT_CHAOS_REV=$${GUARDKIT_CHAOS_REV:-$$(git describe --always 2>/dev/null)$$(git status --porcelain --untracked-files=no -- . ':(exclude)docs/RELIABILITY.md' 2>/dev/null | grep -q . && echo -dirty)} \
	$(GO) test -race -tags chaos -count=1 -timeout 10m -run 'TestChaos$$' -v ./internal/chaos/
