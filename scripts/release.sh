#!/bin/sh
# `make release`: static binaries, tarballs, Debian packages, CycloneDX
# SBOMs and SHA256SUMS for linux amd64, arm64, armhf (GOARM=7) and riscv64,
# written to $DIST (default dist/). Needs no network once the module cache
# holds go.sum's modules: Go cross-compiles by itself (CGO_ENABLED=0),
# dpkg-deb (Debian package dpkg) packs the .deb files, and the tarballs and
# SBOMs come from scripts/mkrelease.
#
# Reproducible: the same commit gives the same bytes on any machine with
# the same Go and dpkg. SOURCE_DATE_EPOCH (default: the last commit's
# time) is every file's mtime, the SBOM's timestamp and the changelog's
# date; binaries are built with -trimpath, an empty -buildid and VCS
# stamping; files are root-owned with normalised modes and sorted.
#
# Environment: GO, DIST, VERSION (default from `git describe`), ARCHES
# (a subset of "amd64 arm64 armhf riscv64"), SOURCE_DATE_EPOCH, MAINTAINER,
# DEB_XZ_LEVEL (0-9, default 6).
set -eu

GO=${GO:-go}
DIST=${DIST:-dist}
ARCHES=${ARCHES:-amd64 arm64 armhf riscv64}
NAME=meshd

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
t_start=$(now)

command -v dpkg-deb >/dev/null 2>&1 || { echo "release: dpkg-deb not found (Debian: apt-get install dpkg)" >&2; exit 1; }

if git rev-parse --git-dir >/dev/null 2>&1; then
	vcs=true
	SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
	commit=$(git rev-parse HEAD)
	if [ -z "${VERSION:-}" ]; then
		if tag=$(git describe --tags --match 'v[0-9]*' 2>/dev/null); then
			# v1.2.0 -> 1.2.0; v1.2.0-3-gabcdef -> 1.2.0+3.gabcdef (a
			# hyphen would make dpkg read a Debian revision).
			VERSION=$(printf '%s' "${tag#v}" | sed 's/-/+/; s/-/./g')
		else
			VERSION=0.0.0~git$(TZ=UTC date -d "@$SOURCE_DATE_EPOCH" +%Y%m%d).$(git rev-parse --short=12 HEAD)
		fi
		# Uncommitted changes are in the binaries (vcs.modified=true);
		# say so in the version too.
		if [ -n "$(git status --porcelain --untracked-files=normal)" ]; then
			VERSION=$VERSION+dirty
		fi
	fi
	MAINTAINER=${MAINTAINER:-$(git log -1 --format='%an <%ae>')}
	first_year=$(git log --reverse --format=%cd --date=format:%Y | head -n 1)
else
	# A source tree without git (an unpacked tarball): the caller names
	# the version and the time.
	vcs=false
	commit=unknown
	: "${SOURCE_DATE_EPOCH:?release: not a git checkout: set SOURCE_DATE_EPOCH and VERSION}"
	: "${VERSION:?release: not a git checkout: set SOURCE_DATE_EPOCH and VERSION}"
	: "${MAINTAINER:?release: not a git checkout: set MAINTAINER (Name <address>)}"
	first_year=
fi
export SOURCE_DATE_EPOCH
case $VERSION in
[0-9]*) ;;
*) echo "release: VERSION $VERSION must start with a digit (Debian policy 5.6.12)" >&2; exit 1 ;;
esac
case $VERSION in
*[!A-Za-z0-9.+~]*) echo "release: VERSION $VERSION may hold only letters, digits and . + ~" >&2; exit 1 ;;
esac

mkdir -p "$DIST"
DIST=$(cd "$DIST" && pwd)
# Only this script's own artefacts are replaced; anything else in $DIST stays.
rm -f "$DIST/SHA256SUMS" "$DIST/${NAME}_"*.deb "$DIST/${NAME}_"*.tar.gz "$DIST/${NAME}_"*.cdx.json
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# Every main package under cmd/ (cmd/internal holds libraries only).
CMDS=$($GO list -f '{{if eq .Name "main"}}{{.ImportPath}}{{end}}' ./cmd/...)
[ -n "$CMDS" ] || { echo "release: no commands under cmd/" >&2; exit 1; }

CGO_ENABLED=0 $GO build -o "$WORK/mkrelease" ./scripts/mkrelease

echo "release: $NAME $VERSION (commit $commit, SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH), $($GO env GOVERSION), dpkg-deb $(dpkg-deb --version | sed -n '1s/.*version \([^ ]*\).*/\1/p')"

# The example configuration and systemd's files, laid out as Debian 12
# expects (the same targets as `make install`; systemd/README.md).
stage_data() {
	root=$1
	install -d -m 0755 "$root/lib/systemd/system" "$root/usr/lib/sysusers.d" "$root/usr/lib/tmpfiles.d" \
		"$root/lib/udev/rules.d" "$root/etc/meshd"
	install -m 0644 systemd/meshd.service "$root/lib/systemd/system/meshd.service"
	install -m 0644 systemd/meshd.sysusers "$root/usr/lib/sysusers.d/meshd.conf"
	install -m 0644 systemd/meshd-powercap.conf "$root/usr/lib/tmpfiles.d/meshd-powercap.conf"
	install -m 0644 systemd/99-meshd.rules systemd/99-meshd-powercap.rules "$root/lib/udev/rules.d/"
	install -m 0644 systemd/meshd.toml "$root/etc/meshd/meshd.toml"
}

# Normalise what the builder's umask and clock put on the files.
normalise() {
	find "$1" -type d -exec chmod 0755 {} +
	find "$1" -type f -perm /0111 -exec chmod 0755 {} +
	find "$1" -type f ! -perm /0111 -exec chmod 0644 {} +
	find "$1" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
}

changelog_date=$(LC_ALL=C TZ=UTC date -R -d "@$SOURCE_DATE_EPOCH")
last_year=$(TZ=UTC date -d "@$SOURCE_DATE_EPOCH" +%Y)
years=${first_year:-$last_year}
[ "$years" = "$last_year" ] || years=$years-$last_year
# xz level of the .deb files: 6 (xz's default) gives the smallest packages;
# lower is faster (level 1: about 7 times faster, 14 % larger).
DEB_XZ_LEVEL=${DEB_XZ_LEVEL:-6}

build_deb() {
	arch=$1 bindir=$2
	root=$WORK/deb-$arch
	install -d -m 0755 "$root/DEBIAN" "$root/usr/bin" "$root/usr/share/doc/$NAME"
	for b in "$bindir"/*; do install -m 0755 "$b" "$root/usr/bin/"; done
	stage_data "$root"
	cat > "$root/usr/share/doc/$NAME/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: $NAME
Comment: Built from commit $commit of the meshd source tree.

Files: *
Copyright: $years the meshd authors
License: unstated
 The meshd source tree carries no licence file. This package grants no
 licence beyond what the authors state with the source.
EOF
	printf '%s (%s) unstable; urgency=medium\n\n  * Release built from commit %s.\n\n -- %s  %s\n' \
		"$NAME" "$VERSION" "$commit" "$MAINTAINER" "$changelog_date" > "$WORK/changelog"
	gzip -9nc "$WORK/changelog" > "$root/usr/share/doc/$NAME/changelog.gz"
	for s in postinst prerm postrm; do install -m 0755 "packaging/debian/$s" "$root/DEBIAN/$s"; done
	install -m 0644 packaging/debian/conffiles "$root/DEBIAN/conffiles"
	install -d -m 0755 "$root/usr/share/lintian/overrides"
	install -m 0644 packaging/debian/lintian-overrides "$root/usr/share/lintian/overrides/$NAME"
	normalise "$root"
	(cd "$root" && find . -type f ! -path './DEBIAN/*' | LC_ALL=C sort | sed 's|^\./||' | xargs md5sum) > "$root/DEBIAN/md5sums"
	size=$(du -s -k --apparent-size --exclude=DEBIAN "$root" | cut -f1)
	{
		echo "Package: $NAME"
		echo "Version: $VERSION"
		echo "Architecture: $arch"
		echo "Maintainer: $MAINTAINER"
		echo "Installed-Size: $size"
		# meshd and meshctl open NVML through the C library's loader
		# (CGO_ENABLED=0 with purego), so they need libc6's ld.so, libc,
		# libdl and libpthread, which every Debian system has.
		echo "Depends: libc6"
		echo "Recommends: systemd"
		echo "Section: net"
		echo "Priority: optional"
		echo "Description: metered inference agent with signed energy receipts"
		sed 's/^/ /; s/^ $/ ./' packaging/debian/description
	} > "$root/DEBIAN/control"
	chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums"
	touch -h -d "@$SOURCE_DATE_EPOCH" "$root/DEBIAN" "$root/DEBIAN/control" "$root/DEBIAN/md5sums"
	# One compressor thread: the xz stream is then the same on any core count.
	dpkg-deb --root-owner-group -Zxz -z"$DEB_XZ_LEVEL" --threads-max=1 --build "$root" "$DIST/${NAME}_${VERSION}_$arch.deb" >/dev/null
}

# The tarball, SBOM and .deb of one architecture (xz dominates the time).
package_arch() {
	arch=$1 bindir=$2
	t1=$(now)
	tardir=$WORK/tar-$arch
	mkdir -p "$tardir/systemd"
	cp "$bindir"/* "$tardir/"
	cp README.md "$tardir/"
	cp systemd/README.md systemd/meshd.service systemd/meshd.sysusers systemd/meshd-powercap.conf \
		systemd/99-meshd.rules systemd/99-meshd-powercap.rules systemd/meshd.toml "$tardir/systemd/"
	"$WORK/mkrelease" tar -root "$tardir" -prefix "${NAME}_${VERSION}_linux_$arch" -o "$DIST/${NAME}_${VERSION}_linux_$arch.tar.gz"
	"$WORK/mkrelease" sbom -name "$NAME" -version "$VERSION" -arch "$arch" -o "$DIST/${NAME}_${VERSION}_$arch.cdx.json" "$bindir"/*
	build_deb "$arch" "$bindir"
	echo "release: $arch: packages $(elapsed "$t1" "$(now)") s"
}

# Each architecture is packaged in the background while the next one
# compiles, at most JOBS at a time; the bytes do not depend on the order.
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
running="" failed=""
reap() { # wait for the oldest packager
	set -- $running
	pid=${1%%:*} what=${1#*:}
	shift
	running="$*"
	wait "$pid" || failed="$failed $what"
}
t_builds=$(now)
for arch in $ARCHES; do
	t0=$(now)
	goarm=
	case $arch in
	amd64 | arm64 | riscv64) goarch=$arch ;;
	armhf) goarch=arm goarm=7 ;;
	*) echo "release: unknown architecture $arch (want amd64, arm64, armhf or riscv64)" >&2; exit 1 ;;
	esac
	bindir=$WORK/bin-$arch
	mkdir -p "$bindir"
	# -s -w: no symbol table or DWARF (stack traces keep their names and
	# lines through pclntab); -buildid= : the ID is otherwise a hash that
	# includes the action graph, the same for the same inputs but opaque.
	# shellcheck disable=SC2086
	env CGO_ENABLED=0 GOOS=linux GOARCH="$goarch" GOARM="$goarm" GOFLAGS= \
		$GO build -trimpath -buildvcs=$vcs -ldflags='-s -w -buildid=' -o "$bindir/" $CMDS
	echo "release: $arch: go build $(elapsed "$t0" "$(now)") s (GOARCH=$goarch${goarm:+ GOARM=$goarm} CGO_ENABLED=0)"
	package_arch "$arch" "$bindir" > "$WORK/pkg-$arch.log" 2>&1 &
	running="$running $!:$arch"
	# shellcheck disable=SC2086
	while [ "$(set -- $running; echo $#)" -ge "$JOBS" ]; do reap; done
done
while [ -n "$(echo $running)" ]; do reap; done
for arch in $ARCHES; do cat "$WORK/pkg-$arch.log"; done
[ -z "$failed" ] || { echo "release: packaging failed for:$failed" >&2; exit 1; }

(cd "$DIST" && sha256sum -- "${NAME}_"*.deb "${NAME}_"*.tar.gz "${NAME}_"*.cdx.json | LC_ALL=C sort -k2 > SHA256SUMS && sha256sum --quiet -c SHA256SUMS)
t_end=$(now)

echo "release: wrote $DIST"
(cd "$DIST" && for f in $(LC_ALL=C sort -k2 SHA256SUMS | awk '{print $2}') SHA256SUMS; do
	printf '  %-52s %10d bytes %8.1f MiB\n' "$f" "$(stat -c %s "$f")" "$(stat -c %s "$f" | awk '{print $1 / 1048576}')"
done)
echo "release: build time $(elapsed "$t_start" "$t_end") s ($(elapsed "$t_builds" "$t_end") s for $(echo "$ARCHES" | wc -w) architectures)"
