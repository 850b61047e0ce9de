#!/bin/sh
# `make check-release`: runs `make release` twice into two scratch
# directories and requires the same bytes in every file; checks each .deb
# (Architecture, /usr/bin/meshd, the unit, the conffile) and SHA256SUMS;
# runs lintian on the amd64 package where lintian is installed (Debian
# package lintian; packaging/debian/lintian-overrides says why each
# override is there). With CHECK_RELEASE_INSTALL=1 and root (CI), it also
# installs the amd64 package with dpkg, runs `systemd-analyze verify` on
# the installed unit, then removes and purges it, checking what each step
# must leave behind. Run from the repository root.
set -eu

GO=${GO:-go}
ARCHES=${ARCHES:-amd64 arm64 armhf riscv64}
A=$(mktemp -d)
B=$(mktemp -d)
trap 'rm -rf "$A" "$B"' EXIT
fail() { echo "check-release: FAIL: $*" >&2; exit 1; }

echo "check-release: first build"
GO=$GO DIST=$A ARCHES=$ARCHES ./scripts/release.sh
echo "check-release: second build"
GO=$GO DIST=$B ARCHES=$ARCHES ./scripts/release.sh >/dev/null

(cd "$A" && ls) > "$A.list"
(cd "$B" && ls) > "$B.list"
cmp -s "$A.list" "$B.list" || { diff "$A.list" "$B.list" >&2 || true; rm -f "$A.list" "$B.list"; fail "the two builds wrote different file sets"; }
rm -f "$A.list" "$B.list"
for f in "$A"/*; do
	n=$(basename "$f")
	cmp -s "$f" "$B/$n" || fail "$n differs between two builds of the same commit"
done
echo "check-release: two builds byte-identical ($(ls "$A" | wc -l) files)"

(cd "$A" && sha256sum --quiet -c SHA256SUMS) || fail "SHA256SUMS does not check"
[ "$(wc -l < "$A/SHA256SUMS")" -eq "$(($(ls "$A" | wc -l) - 1))" ] || fail "SHA256SUMS does not list every file"

for arch in $ARCHES; do
	deb=$(ls "$A"/meshd_*_"$arch".deb) || fail "no .deb for $arch"
	got=$(dpkg-deb -f "$deb" Architecture)
	[ "$got" = "$arch" ] || fail "$(basename "$deb"): Architecture $got, want $arch"
	dpkg-deb -c "$deb" | awk '{print $6}' > "$A/contents"
	for p in ./usr/bin/meshd ./usr/bin/meshctl ./usr/bin/mesh-gguf ./lib/systemd/system/meshd.service \
		./usr/lib/sysusers.d/meshd.conf ./usr/lib/tmpfiles.d/meshd-powercap.conf \
		./lib/udev/rules.d/99-meshd.rules ./lib/udev/rules.d/99-meshd-powercap.rules ./etc/meshd/meshd.toml; do
		grep -qx "$p" "$A/contents" || fail "$(basename "$deb") lacks $p"
	done
	dpkg-deb -c "$deb" | awk '$2 != "root/root" {print; bad=1} END {exit bad}' || fail "$(basename "$deb") has files not owned by root"
	[ "$(dpkg-deb -I "$deb" conffiles)" = /etc/meshd/meshd.toml ] || fail "$(basename "$deb"): conffiles is not /etc/meshd/meshd.toml"
	# The binaries are for the package's architecture and need no C
	# library but the loader every glibc system has: built with
	# CGO_ENABLED=0, meshd links only the dynamic loader, through which
	# NVML is opened at run time (PROFILE §13, "How NVML is reached").
	mkdir -p "$A/x"
	dpkg-deb -x "$deb" "$A/x"
	case $arch in
	amd64) want="x86-64" ;; arm64) want="ARM aarch64" ;; armhf) want="ARM, EABI5" ;; riscv64) want="RISC-V" ;;
	esac
	if command -v file >/dev/null 2>&1; then
		file -b "$A/x/usr/bin/meshd" | grep -q "$want" || fail "$arch meshd is $(file -b "$A/x/usr/bin/meshd")"
		m=$(file -b "$A/x/usr/bin/meshd")
		case $m in
		*"statically linked"* | *"dynamically linked, interpreter /lib/"* | *"dynamically linked, interpreter /lib64/"*) ;;
		*) fail "$arch meshd links more than the C library's loader: $m" ;;
		esac
	fi
	$GO version -m "$A/x/usr/bin/meshd" | grep -q 'CGO_ENABLED=0' || fail "$arch meshd was not built with CGO_ENABLED=0"
	rm -rf "$A/x" "$A/contents"
	echo "check-release: $(basename "$deb"): Architecture $arch, binaries, unit, sysusers, tmpfiles, udev rules, conffile"
done

amd=$(ls "$A"/meshd_*_amd64.deb 2>/dev/null || true)
if [ -n "$amd" ]; then
	if command -v lintian >/dev/null 2>&1; then
		echo "check-release: lintian $(basename "$amd")"
		# --fail-on warning: errors and warnings fail; info tags are printed.
		lintian --fail-on error,warning --info "$amd" || fail "lintian"
	else
		echo "check-release: lintian not installed (Debian: apt-get install lintian): NOT run"
	fi
fi

if [ "${CHECK_RELEASE_INSTALL:-0}" = 1 ] && [ -n "$amd" ]; then
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO="sudo -n"
	if dpkg-query -W -f '${Status}' meshd 2>/dev/null | grep -q 'installed'; then
		fail "a meshd package is already installed here; not touching it"
	fi
	state_existed=no user_existed=no i2c_existed=no
	[ -e /var/lib/meshd ] && state_existed=yes
	getent passwd meshd >/dev/null && user_existed=yes
	getent group i2c >/dev/null && i2c_existed=yes
	echo "check-release: dpkg -i $(basename "$amd")"
	$SUDO dpkg -i "$amd"
	getent passwd meshd >/dev/null || fail "postinst did not create user meshd"
	[ -x /usr/bin/meshd ] || fail "/usr/bin/meshd not installed"
	[ -f /etc/meshd/meshd.toml ] || fail "/etc/meshd/meshd.toml not installed"
	unit=/lib/systemd/system/meshd.service
	[ -f "$unit" ] || unit=/usr/lib/systemd/system/meshd.service
	echo "check-release: systemd-analyze verify $unit"
	out=$(systemd-analyze verify "$unit" 2>&1) || { echo "$out" >&2; fail "systemd-analyze verify"; }
	[ -z "$out" ] || { echo "$out" >&2; fail "systemd-analyze verify warned"; }
	# A receipt left in the state directory must survive remove and purge.
	$SUDO install -d -m 0700 /var/lib/meshd
	echo probe | $SUDO tee /var/lib/meshd/check-release-receipt >/dev/null
	echo "check-release: dpkg -r meshd"
	$SUDO dpkg -r meshd
	[ ! -e /usr/bin/meshd ] || fail "remove left /usr/bin/meshd"
	[ -f /etc/meshd/meshd.toml ] || fail "remove deleted the conffile (only purge may)"
	[ -f /var/lib/meshd/check-release-receipt ] || fail "remove deleted the state directory"
	echo "check-release: dpkg -P meshd"
	$SUDO dpkg -P meshd
	[ ! -e /etc/meshd/meshd.toml ] || fail "purge left the conffile"
	[ -f /var/lib/meshd/check-release-receipt ] || fail "purge deleted the state directory's receipts"
	dpkg-query -W meshd >/dev/null 2>&1 && fail "meshd still known to dpkg after purge"
	$SUDO rm -f /var/lib/meshd/check-release-receipt
	[ "$state_existed" = yes ] || $SUDO rmdir /var/lib/meshd
	# The package leaves user meshd (it owns the kept state) and the i2c
	# group it may have made; this machine only tried the package, so what
	# was not here before goes.
	[ "$user_existed" = yes ] || $SUDO userdel meshd
	[ "$i2c_existed" = yes ] || $SUDO groupdel i2c
	echo "check-release: installed, verified, removed (state kept), purged (state kept)"
fi
echo "check-release: ok"
