# meshd — see README.md. Every target works offline once the module cache
# holds go.sum's modules (go mod download).
GO      ?= go
BIN     ?= bin
PKGS    ?= ./...
# Packages with concurrency worth running under the race detector.
RACE    ?= ./steward/... ./agent/... ./shunt/... ./engine/subprocess/...
BENCHTIME ?= 1s

.PHONY: all build demo test lint race bench fuzz clean

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

# Short fuzzing passes over every decoder that takes untrusted bytes.
FUZZTIME ?= 20s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzServeRequest$$' -fuzztime $(FUZZTIME) ./wire
	$(GO) test -run '^$$' -fuzz '^FuzzOpenEnvelope$$' -fuzztime $(FUZZTIME) ./steward
	$(GO) test -run '^$$' -fuzz '^FuzzScanLog$$' -fuzztime $(FUZZTIME) ./steward
	$(GO) test -run '^$$' -fuzz '^FuzzOpenGrant$$' -fuzztime $(FUZZTIME) ./steward/grant
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./engine/gguf

clean:
	rm -rf $(BIN)
