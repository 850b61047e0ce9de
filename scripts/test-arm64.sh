#!/bin/sh
# Cross-compiles the GGUF runner's kernels and gguf test binaries for
# linux/arm64 and runs them under qemu-aarch64 when it is installed
# (Debian package qemu-user, or qemu-user-static which installs
# qemu-aarch64-static); otherwise it cross-compiles, vets, and says that
# it could not run them. Run from the repository root.
set -eu

GO=${GO:-go}
PKGS="./engine/runner/kernels ./engine/runner/gguf"
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

echo "test-arm64: vet (GOARCH=arm64, with and without -tags purego)"
GOOS=linux GOARCH=arm64 $GO vet ./engine/runner/...
GOOS=linux GOARCH=arm64 $GO vet -tags purego ./engine/runner/...

for pkg in $PKGS; do
	name=$(basename "$pkg")
	echo "test-arm64: cross-compiling $pkg"
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $GO test -c -o "$OUT/$name.test" "$pkg"
done

QEMU=""
for q in qemu-aarch64 qemu-aarch64-static; do
	if command -v "$q" >/dev/null 2>&1; then
		QEMU=$q
		break
	fi
done
if [ -z "$QEMU" ]; then
	if [ "${QEMU_REQUIRED:-0}" = 1 ]; then
		echo "test-arm64: FAIL: no qemu-aarch64 found (install qemu-user) and QEMU_REQUIRED=1" >&2
		exit 1
	fi
	echo "test-arm64: no qemu-aarch64 found (install qemu-user): compiled and vetted, NOT run"
	exit 0
fi

# The emulated CPU: QEMU_CPU if set, else "max", which has every
# extension the NEON kernels can use (the dot product, SDOT).
CPU=${QEMU_CPU:-max}
for pkg in $PKGS; do
	name=$(basename "$pkg")
	echo "test-arm64: running $name tests under $QEMU (cpu $CPU)"
	# The test binaries are static (CGO_ENABLED=0): no arm64 libraries needed.
	(cd "$pkg" && QEMU_CPU=$CPU "$QEMU" "$OUT/$name.test" -test.count=1)
done
# Once more on a plain ARMv8.0 core (no dot product), as a Pi 4 has: the
# kernels must detect that and take the SMULL fallback.
echo "test-arm64: running kernels tests under $QEMU (cpu cortex-a72, no SDOT)"
(cd ./engine/runner/kernels && QEMU_CPU=cortex-a72 "$QEMU" "$OUT/kernels.test" -test.count=1 -test.run 'NEON|Q8_0|Q4|Generic|Float64')
echo "test-arm64: ok"
