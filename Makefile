# meshd — see README.md. Every target works offline once the module cache
# holds go.sum's modules (go mod download).
GO      ?= go
BIN     ?= bin
PKGS    ?= ./...
# Packages with concurrency worth running under the race detector.
RACE    ?= ./steward/... ./agent/... ./shunt/... ./engine/subprocess/... ./drivers/... ./rapl/...
BENCHTIME ?= 1s

.PHONY: all build demo test lint race bench fuzz clean stress-tests

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

demo: build
	./$(BIN)/meshd demo

test: lint
	$(GO) test -count=1 $(PKGS)
	$(GO) test -count=1 -race $(RACE)

lint:
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

bench:
	$(GO) test -count=1 -run '^$$' -bench . -benchtime $(BENCHTIME) $(PKGS)

# Flaky tests are defects: run the whole suite STRESS_RUNS times in a row
# while every CPU is kept busy, stopping at the first failing run. Not part
# of `make test` or CI: it takes a while.
STRESS_RUNS ?= 10
stress-tests:
	@set -u; pids=""; \
	cleanup() { for p in $$pids; do kill $$p 2>/dev/null; done; wait 2>/dev/null; }; \
	trap 'cleanup' EXIT; trap 'exit 130' INT TERM HUP; \
	n=$$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2); \
	for _ in $$(seq "$$n"); do sh -c 'while :; do :; done' & pids="$$pids $$!"; done; \
	echo "stress-tests: $$n busy loops ($$pids), $(STRESS_RUNS) runs of go test -count=1 $(PKGS)"; \
	for i in $$(seq $(STRESS_RUNS)); do \
		echo "=== stress run $$i/$(STRESS_RUNS)"; \
		if ! $(GO) test -count=1 $(PKGS); then \
			echo "stress-tests: run $$i of $(STRESS_RUNS) FAILED under CPU load"; exit 1; \
		fi; \
	done; \
	echo "stress-tests: all $(STRESS_RUNS) runs passed under CPU load"

# Short fuzzing passes over every decoder that takes untrusted bytes.
FUZZTIME ?= 20s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzServeRequest$$' -fuzztime $(FUZZTIME) ./wire
	$(GO) test -run '^$$' -fuzz '^FuzzOpenEnvelope$$' -fuzztime $(FUZZTIME) ./steward
	$(GO) test -run '^$$' -fuzz '^FuzzScanLog$$' -fuzztime $(FUZZTIME) ./steward
	$(GO) test -run '^$$' -fuzz '^FuzzOpenGrant$$' -fuzztime $(FUZZTIME) ./steward/grant
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./engine/runner/gguf

clean:
	rm -rf $(BIN)

# Cross-compile the runner's kernels and gguf tests for arm64 and run them
# under qemu-aarch64 (Debian: apt-get install qemu-user) when present.
.PHONY: test-arm64
test-arm64:
	GO=$(GO) ./scripts/test-arm64.sh
