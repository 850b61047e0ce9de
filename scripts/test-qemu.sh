#!/bin/sh
# Usage: scripts/test-qemu.sh GOARCH[/GOARM] PKG...
# Cross-compiles the test binaries of PKG... statically (CGO_ENABLED=0) for
# linux/GOARCH and runs them under qemu-user (Debian package qemu-user:
# qemu-aarch64, qemu-arm, qemu-riscv64; or qemu-user-static's *-static),
# each in its package directory as `go test` would. Without qemu it
# cross-compiles and vets, and says that the tests were NOT run; with
# QEMU_REQUIRED=1 (CI) that is a failure. Run from the repository root.
set -eu

GO=${GO:-go}
[ $# -ge 2 ] || { echo "usage: $0 GOARCH[/GOARM] PKG..." >&2; exit 2; }
target=$1
shift
goarch=${target%/*}
goarm=
[ "$goarch" = "$target" ] || goarm=${target#*/}
case $goarch in
arm64) qemu=aarch64 ;;
arm) qemu=arm ;;
riscv64) qemu=riscv64 ;;
amd64) qemu=x86_64 ;;
*) echo "test-qemu: no qemu-user name known for GOARCH=$goarch" >&2; exit 2 ;;
esac
label=linux/$goarch${goarm:+ GOARM=$goarm}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

echo "test-qemu: vet ($label)"
CGO_ENABLED=0 GOOS=linux GOARCH=$goarch GOARM=$goarm $GO vet "$@"
for pkg in "$@"; do
	name=$(echo "$pkg" | sed 's|^\./||; s|/|_|g')
	CGO_ENABLED=0 GOOS=linux GOARCH=$goarch GOARM=$goarm $GO test -c -o "$OUT/$name.test" "$pkg"
done

QEMU=""
for q in "qemu-$qemu" "qemu-$qemu-static"; do
	if command -v "$q" >/dev/null 2>&1; then
		QEMU=$q
		break
	fi
done
if [ -z "$QEMU" ]; then
	if [ "${QEMU_REQUIRED:-0}" = 1 ]; then
		echo "test-qemu: FAIL: no qemu-$qemu found (install qemu-user) and QEMU_REQUIRED=1" >&2
		exit 1
	fi
	echo "test-qemu: no qemu-$qemu found (install qemu-user): $label tests compiled and vetted, NOT run"
	exit 0
fi
for pkg in "$@"; do
	name=$(echo "$pkg" | sed 's|^\./||; s|/|_|g')
	if [ ! -e "$OUT/$name.test" ]; then
		echo "test-qemu: $pkg has no tests"
		continue
	fi
	echo "test-qemu: $pkg under $QEMU ($label)"
	(cd "$pkg" && "$QEMU" "$OUT/$name.test" -test.count=1)
done
echo "test-qemu: $label ok"
