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

# Three nodes, a front door and the fleet stream on loopback: forwarded
# serves, a node stopped and passed over, every chain verified from the
# stream, and the signed fleet report written and verified (PROFILE §21).
.PHONY: demo-fleet
demo-fleet: build
	./$(BIN)/meshd demo-fleet

# The fleet at size (FLEET.md): 1 000 boards on 1 000 client connections
# publishing at each step's rate (receipts/s/board:seconds) with a verifier
# following, then the verifier against bare Ed25519 and serves with the
# fleet publisher on and off (a seal alone, and the daemon's whole serve
# over HTTP). Minutes long: not part of `make test`.
FLEET_SIM ?= 1:20,2:60,3:20,5:15
.PHONY: bench-fleet
bench-fleet:
	MESH_FLEET_SIM=$(FLEET_SIM) $(GO) test -count=1 -v -timeout 30m -run '^TestFleetSimulation$$' ./agent/fleet/
	$(GO) test -count=1 -run '^$$' -bench 'VerifierVsEd25519|ServeWithPublisher' -benchtime 20x ./agent/fleet/
	$(GO) test -count=1 -run '^$$' -bench 'FleetCostPerServe' -benchtime 40x ./cmd/meshd/

test: lint openai-deps ollama-deps
	$(GO) test -count=1 $(PKGS)
	$(GO) test -count=1 -race $(RACE)

# The official OpenAI Node client that agent/api's TestOfficialOpenAIClient
# drives: npm ci installs exactly test/openai/package-lock.json from the
# registry, and only when the lock file is newer than the install (npm
# writes node_modules/.package-lock.json), so later runs work offline.
.PHONY: openai-deps
openai-deps: test/openai/node_modules/.package-lock.json
test/openai/node_modules/.package-lock.json: test/openai/package-lock.json test/openai/package.json
	@command -v npm >/dev/null 2>&1 || { echo "openai-deps: npm not found; install Node.js >= 20 with npm (Debian: apt-get install nodejs npm)"; exit 1; }
	npm ci --prefix test/openai --no-audit --no-fund

# The official Ollama JavaScript client that agent/api's
# TestOfficialOllamaClient drives, installed as openai-deps installs its
# client: exactly test/ollama/package-lock.json, once.
.PHONY: ollama-deps
ollama-deps: test/ollama/node_modules/.package-lock.json
test/ollama/node_modules/.package-lock.json: test/ollama/package-lock.json test/ollama/package.json
	@command -v npm >/dev/null 2>&1 || { echo "ollama-deps: npm not found; install Node.js >= 20 with npm (Debian: apt-get install nodejs npm)"; exit 1; }
	npm ci --prefix test/ollama --no-audit --no-fund

lint:
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

bench:
	$(GO) test -count=1 -run '^$$' -bench . -benchtime $(BENCHTIME) $(PKGS)

# A 7B-class Q4_K_M model (dim 4096, 32 layers, 32/8 heads, ff 14336,
# vocab 32 000: about 4 GB) synthesised to disk a megabyte at a time and
# loaded by the built-in runner: load time, resident memory after load,
# after a 512-token prompt and after decoding, prompt and decode speed
# (engine/runner/llama/bench7b_test.go). Needs ~5 GB of disk and of free
# memory; skipped otherwise. BENCH7B_FILE keeps the file for later runs.
BENCH7B_FILE ?=
BENCH7B_THREADS ?=
.PHONY: bench-7b
bench-7b:
	MESH_BENCH_7B=1 MESH_BENCH_7B_FILE=$(BENCH7B_FILE) MESH_BENCH_7B_THREADS=$(BENCH7B_THREADS) \
		$(GO) test -count=1 -v -timeout 60m -run '^TestBench7B$$' ./engine/runner/llama/

# The daemon's load test at full length: 200 keep-alive clients for 30 s
# (cmd/meshd/load_test.go); `make test` runs it for 3 s.
.PHONY: load-test
load-test:
	MESHD_LOAD_SECONDS=30 $(GO) test -count=1 -v -timeout 10m -run '^TestLoad200Clients$$' ./cmd/meshd/

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
# under qemu-aarch64 (Debian: apt-get install qemu-user) when present, then
# the steward, wire and rag tests the same way (scripts/test-qemu.sh).
# QEMU_REQUIRED=1 makes a missing qemu a failure instead of a notice.
QEMU_PKGS ?= ./steward ./wire ./rag
.PHONY: test-arm64 test-armv7
test-arm64:
	GO=$(GO) ./scripts/test-arm64.sh
	GO=$(GO) ./scripts/test-qemu.sh arm64 $(QEMU_PKGS)

# The same packages and the kernels' portable Go path on 32-bit ARM
# (GOARCH=arm GOARM=7, armhf) under qemu-arm.
test-armv7:
	GO=$(GO) ./scripts/test-qemu.sh arm/7 $(QEMU_PKGS) ./engine/runner/kernels

# Install the binaries and everything systemd needs (systemd/README.md):
#   sudo make install                    (a source install: /usr/local/bin)
#   make install DESTDIR=/tmp/root PREFIX=/usr   (a package's layout)
# `make uninstall` with the same variables removes exactly what install
# put, except /etc/meshd/meshd.toml when it differs from the shipped
# example (it holds the operator's edits) and the state directory (it
# holds receipts), which it names instead.
# Paths follow Debian 12: units and udev rules under /lib, tmpfiles.d and
# sysusers.d under /usr/lib. The unit's ExecStart follows BINDIR; the
# configuration is always /etc/meshd (ConfigurationDirectory=), and an
# existing /etc/meshd/meshd.toml is never overwritten. RAPL=no leaves out
# the rules that let group meshd read the RAPL counters (a side-channel
# trade-off, see systemd/meshd-powercap.conf).
DESTDIR      ?=
PREFIX       ?= /usr/local
BINDIR       ?= $(PREFIX)/bin
UNITDIR      ?= /lib/systemd/system
UDEVRULESDIR ?= /lib/udev/rules.d
TMPFILESDIR  ?= /usr/lib/tmpfiles.d
SYSUSERSDIR  ?= /usr/lib/sysusers.d
RAPL         ?= yes
INSTALL      ?= install
INSTALL_BUILD ?= $(BIN)/dist
INSTALL_CMDS := meshd meshctl mesh-gguf

.PHONY: install install-bin install-data uninstall check-systemd
install: install-bin install-data
	@echo "installed into $(if $(DESTDIR),$(DESTDIR),/). On the target, as root:"
	@echo "  systemd-sysusers meshd.conf"
	@[ "$(RAPL)" = no ] || echo "  systemd-tmpfiles --create meshd-powercap.conf"
	@echo "  udevadm control --reload && udevadm trigger -s i2c-dev -s tty -s powercap"
	@echo "  systemctl daemon-reload && systemctl enable --now meshd"

install-bin:
	$(GO) build -trimpath -o $(INSTALL_BUILD)/ $(addprefix ./cmd/,$(INSTALL_CMDS))
	for c in $(INSTALL_CMDS); do \
		$(INSTALL) -D -m 0755 $(INSTALL_BUILD)/$$c $(DESTDIR)$(BINDIR)/$$c || exit 1; \
	done

install-data:
	$(INSTALL) -d -m 0755 $(DESTDIR)$(UNITDIR)
	sed 's|^ExecStart=/usr/bin/meshd |ExecStart=$(BINDIR)/meshd |' systemd/meshd.service > "$(DESTDIR)$(UNITDIR)/meshd.service"
	chmod 0644 "$(DESTDIR)$(UNITDIR)/meshd.service"
	$(INSTALL) -D -m 0644 systemd/meshd.sysusers $(DESTDIR)$(SYSUSERSDIR)/meshd.conf
	$(INSTALL) -D -m 0644 systemd/99-meshd.rules $(DESTDIR)$(UDEVRULESDIR)/99-meshd.rules
	if [ "$(RAPL)" != no ]; then \
		$(INSTALL) -D -m 0644 systemd/meshd-powercap.conf $(DESTDIR)$(TMPFILESDIR)/meshd-powercap.conf && \
		$(INSTALL) -D -m 0644 systemd/99-meshd-powercap.rules $(DESTDIR)$(UDEVRULESDIR)/99-meshd-powercap.rules; \
	fi
	if [ -e "$(DESTDIR)/etc/meshd/meshd.toml" ]; then \
		echo "keeping $(DESTDIR)/etc/meshd/meshd.toml"; \
	else \
		$(INSTALL) -D -m 0644 systemd/meshd.toml $(DESTDIR)/etc/meshd/meshd.toml; \
	fi

uninstall:
	for c in $(INSTALL_CMDS); do rm -f $(DESTDIR)$(BINDIR)/$$c; done
	rm -f $(DESTDIR)$(UNITDIR)/meshd.service $(DESTDIR)$(SYSUSERSDIR)/meshd.conf \
		$(DESTDIR)$(UDEVRULESDIR)/99-meshd.rules $(DESTDIR)$(TMPFILESDIR)/meshd-powercap.conf \
		$(DESTDIR)$(UDEVRULESDIR)/99-meshd-powercap.rules
	@if [ -e "$(DESTDIR)/etc/meshd/meshd.toml" ] && ! cmp -s systemd/meshd.toml "$(DESTDIR)/etc/meshd/meshd.toml"; then \
		echo "keeping $(DESTDIR)/etc/meshd/meshd.toml: it differs from the shipped example"; \
	else \
		rm -f "$(DESTDIR)/etc/meshd/meshd.toml"; rmdir "$(DESTDIR)/etc/meshd" 2>/dev/null || true; \
	fi
	@echo "uninstalled from $(if $(DESTDIR),$(DESTDIR),/); the state directory (/var/lib/meshd: keys and receipts) is kept."
	@echo "On the target, as root: systemctl disable --now meshd; systemctl daemon-reload; udevadm control --reload"

# systemd-analyze verify and security (exposure <= 2.0) of the unit, the
# sysusers and tmpfiles entries applied to a scratch root, and the udev
# rules where udevadm can verify them. Needs systemd-analyze (Debian:
# apt-get install systemd).
check-systemd:
	GO=$(GO) ./scripts/check-systemd.sh

# Reproducible release into $(DIST): static binaries (CGO_ENABLED=0) for
# linux amd64, arm64, armhf (GOARM=7) and riscv64 as tarballs, a .deb per
# architecture (dpkg-deb), CycloneDX SBOMs and SHA256SUMS; prints the build
# time and every file's size. No network. ARCHES=amd64 builds one.
DIST   ?= dist
ARCHES ?= amd64 arm64 armhf riscv64
.PHONY: release check-release
release:
	GO=$(GO) DIST=$(DIST) ARCHES="$(ARCHES)" ./scripts/release.sh

# make release twice into two scratch directories and compare every byte;
# check each .deb's Architecture, contents and conffile and SHA256SUMS;
# lintian on the amd64 package; with CHECK_RELEASE_INSTALL=1 (CI, as root)
# also install it with dpkg, systemd-analyze verify the installed unit,
# remove and purge it.
check-release:
	GO=$(GO) ARCHES="$(ARCHES)" ./scripts/check-release.sh
