#!/usr/bin/env bash
# Checks meshd's systemd integration from the repository root (make
# check-systemd; CI runs it):
#
#   1. `make install` into a scratch root laid out like Debian 12 (usr-merged)
#   2. systemd-analyze verify of the installed unit in that root: no error
#      and no warning (verify exits 0 on unknown keys, so output fails too)
#   3. systemd-analyze security --offline: exposure at most MAX_EXPOSURE
#   4. the sysusers.d entry applied to the root: user meshd, groups i2c, dialout
#   5. the tmpfiles.d rule applied to a fake powercap tree (as root only)
#   6. the udev rules: `udevadm verify` where udevadm has it (systemd >= 254),
#      else a syntax lint of every line
#   7. every systemd/ file the Go code names exists
#
# Environment: MAX_EXPOSURE (default 2.0); CHECK_SYSTEMD_BUILD=1 runs the
# whole `make install`, building the binaries with -trimpath (minutes on a
# cold cache), where the default installs the data files and stub
# executables; MAKE, GO.
set -euo pipefail
cd "$(dirname "$0")/.."

MAX_EXPOSURE=${MAX_EXPOSURE:-2.0}
MAKE=${MAKE:-make}
GO=${GO:-go}
fail=0
ok()   { printf 'check-systemd: ok    %s\n' "$*"; }
bad()  { printf 'check-systemd: FAIL  %s\n' "$*" >&2; fail=1; }
skip() { printf 'check-systemd: skip  %s\n' "$*"; }

if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "check-systemd: systemd-analyze not found (Debian: apt-get install systemd)" >&2
	exit 1
fi
echo "check-systemd: $(systemd-analyze --version | head -n1)"

root=$(mktemp -d "${TMPDIR:-/tmp}/meshd-systemd.XXXXXX")
trap 'rm -rf "$root"' EXIT

# --- 1. install --------------------------------------------------------
# Debian 12 is usr-merged: /bin, /sbin and /lib are links into /usr.
mkdir -p "$root"/usr/bin "$root"/usr/sbin "$root"/usr/lib "$root"/etc
ln -s usr/bin "$root/bin"
ln -s usr/sbin "$root/sbin"
ln -s usr/lib "$root/lib"
if [ "${CHECK_SYSTEMD_BUILD:-0}" = 0 ]; then
	"$MAKE" -s install-data DESTDIR="$root" PREFIX=/usr >/dev/null
	for c in meshd meshctl mesh-gguf; do
		printf '#!/bin/sh\nexit 0\n' >"$root/usr/bin/$c"
		chmod 0755 "$root/usr/bin/$c"
	done
	skip "building the binaries (CHECK_SYSTEMD_BUILD=1 does): stubs installed"
else
	"$MAKE" -s install DESTDIR="$root" PREFIX=/usr GO="$GO" >/dev/null
fi
want_files=(
	"0755 usr/bin/meshd" "0755 usr/bin/meshctl" "0755 usr/bin/mesh-gguf"
	"0644 usr/lib/systemd/system/meshd.service"
	"0644 usr/lib/sysusers.d/meshd.conf"
	"0644 usr/lib/tmpfiles.d/meshd-powercap.conf"
	"0644 usr/lib/udev/rules.d/99-meshd.rules"
	"0644 usr/lib/udev/rules.d/99-meshd-powercap.rules"
	"0644 etc/meshd/meshd.toml"
)
for w in "${want_files[@]}"; do
	mode=${w%% *} f=${w#* }
	if [ ! -f "$root/$f" ]; then
		bad "make install: /$f missing"
	elif [ "$(stat -c %a "$root/$f")" != "${mode#0}" ]; then
		bad "make install: /$f has mode $(stat -c %a "$root/$f"), want $mode"
	fi
done
# An admin's configuration survives a reinstall.
echo '# edited' >>"$root/etc/meshd/meshd.toml"
"$MAKE" -s install-data DESTDIR="$root" PREFIX=/usr >/dev/null
if tail -n1 "$root/etc/meshd/meshd.toml" | grep -qx '# edited'; then
	ok "make install: files and modes; an existing meshd.toml is kept"
else
	bad "make install overwrote an existing /etc/meshd/meshd.toml"
fi
# make uninstall removes exactly what install put, and an edited
# meshd.toml only when it is the shipped example.
u="$root.uninstall"
mkdir -p "$u/usr/lib" && ln -s usr/lib "$u/lib"
"$MAKE" -s install-data DESTDIR="$u" PREFIX=/usr >/dev/null
mkdir -p "$u/usr/bin" && touch "$u/usr/bin/meshd" "$u/usr/bin/meshctl" "$u/usr/bin/mesh-gguf"
"$MAKE" -s uninstall DESTDIR="$u" PREFIX=/usr >/dev/null
left=$(find "$u" -type f)
if [ -z "$left" ]; then
	ok "make uninstall: every installed file removed"
else
	bad "make uninstall left: $left"
fi
rm -rf "$u"

# --- 2. verify ---------------------------------------------------------
# The root holds what the unit references (/usr/bin/meshd, /bin/kill) and
# the host's own units for the default dependencies (sysinit.target, ...).
for d in /usr/lib/systemd/system /lib/systemd/system; do
	[ -d "$d" ] && cp -rn "$d"/. "$root/usr/lib/systemd/system/" 2>/dev/null || true
done
if [ ! -e "$root/usr/bin/kill" ]; then
	if [ -x /bin/kill ]; then cp /bin/kill "$root/usr/bin/kill"; else
		printf '#!/bin/sh\n' >"$root/usr/bin/kill"
		chmod 0755 "$root/usr/bin/kill"
	fi
fi
rc=0
out=$(systemd-analyze verify --root="$root" meshd.service 2>&1) || rc=$?
if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
	bad "systemd-analyze verify meshd.service (exit $rc):"
	printf '%s\n' "$out" >&2
else
	ok "systemd-analyze verify meshd.service"
fi

# --- 3. security -------------------------------------------------------
# --threshold= takes the exposure level times ten (0..100): 2.0 is 20.
threshold=$(awk -v m="$MAX_EXPOSURE" 'BEGIN { printf "%d", m * 10 + 0.5 }')
rc=0
out=$(systemd-analyze security --offline=yes --threshold="$threshold" --no-pager systemd/meshd.service 2>&1) || rc=$?
score=$(printf '%s\n' "$out" | sed -n 's/.*Overall exposure level for meshd\.service: \([0-9.]*\).*/\1/p' | tail -n1)
if [ -z "$score" ]; then
	bad "systemd-analyze security printed no exposure level (exit $rc):"
	printf '%s\n' "$out" >&2
elif [ "$rc" -ne 0 ] || ! awk -v s="$score" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(s <= m) }'; then
	printf '%s\n' "$out" | grep '✗' >&2 || true
	bad "systemd-analyze security: exposure $score > $MAX_EXPOSURE (exit $rc)"
else
	ok "systemd-analyze security: exposure $score (at most $MAX_EXPOSURE)"
fi

# --- 4. sysusers -------------------------------------------------------
if command -v systemd-sysusers >/dev/null 2>&1; then
	rc=0
	out=$(systemd-sysusers --root="$root" 2>&1) || rc=$?
	if [ "$rc" -ne 0 ]; then
		bad "systemd-sysusers (exit $rc):"
		printf '%s\n' "$out" >&2
	elif ! grep -q '^meshd:x:[0-9]*:[0-9]*:[^:]*:/var/lib/meshd:' "$root/etc/passwd"; then
		bad "systemd-sysusers: no user meshd with home /var/lib/meshd"
	elif ! { grep -q '^meshd:' "$root/etc/group" && grep -q '^i2c:' "$root/etc/group" && grep -q '^dialout:' "$root/etc/group"; }; then
		bad "systemd-sysusers: groups meshd, i2c, dialout not all created"
	else
		ok "systemd-sysusers: user meshd, groups meshd i2c dialout"
	fi
else
	skip "systemd-sysusers not installed"
fi

# --- 5. tmpfiles -------------------------------------------------------
# A powercap tree shaped like sysfs: zones are directories under
# /sys/devices, listed flat as links in /sys/class/powercap, counters
# root-only (Linux >= 5.10), the limits writable by root.
if [ "$(id -u)" -ne 0 ]; then
	skip "tmpfiles rule (changing owners needs root)"
elif ! command -v systemd-tmpfiles >/dev/null 2>&1; then
	skip "systemd-tmpfiles not installed"
elif ! gid=$(awk -F: '$1 == "meshd" { print $3 }' "$root/etc/group") || [ -z "$gid" ]; then
	bad "tmpfiles rule: no group meshd in the scratch root"
else
	dev=sys/devices/virtual/powercap
	zones=(intel-rapl/intel-rapl:0 intel-rapl/intel-rapl:0/intel-rapl:0:0 intel-rapl/intel-rapl:1 intel-rapl-mmio/intel-rapl-mmio:0)
	mkdir -p "$root/sys/class/powercap"
	for z in "${zones[@]}"; do
		mkdir -p "$root/$dev/$z"
		: >"$root/$dev/$z/energy_uj"
		: >"$root/$dev/$z/constraint_0_power_limit_uw"
		chmod 0400 "$root/$dev/$z/energy_uj"
		chmod 0644 "$root/$dev/$z/constraint_0_power_limit_uw"
		ln -s "../../devices/virtual/powercap/$z" "$root/sys/class/powercap/${z##*/}"
	done
	rc=0
	out=$(systemd-tmpfiles --root="$root" --create meshd-powercap.conf 2>&1) || rc=$?
	if [ "$rc" -ne 0 ]; then
		bad "systemd-tmpfiles --create meshd-powercap.conf (exit $rc):"
		printf '%s\n' "$out" >&2
	else
		tf=0
		for z in "${zones[@]}"; do
			got=$(stat -c '%a %u %g' "$root/$dev/$z/energy_uj")
			[ "$got" = "440 0 $gid" ] || { bad "tmpfiles rule: $z/energy_uj is '$got', want '440 0 $gid'"; tf=1; }
			got=$(stat -c '%a %u %g' "$root/$dev/$z/constraint_0_power_limit_uw")
			[ "$got" = "644 0 0" ] || { bad "tmpfiles rule touched $z/constraint_0_power_limit_uw: '$got'"; tf=1; }
		done
		[ "$tf" -eq 0 ] && ok "tmpfiles rule: every zone's energy_uj 0440 root:meshd, limits untouched"
	fi
fi

# --- 6. udev rules -----------------------------------------------------
rules=("$root"/usr/lib/udev/rules.d/99-meshd.rules "$root"/usr/lib/udev/rules.d/99-meshd-powercap.rules)
if command -v udevadm >/dev/null 2>&1 && udevadm verify --help >/dev/null 2>&1; then
	rc=0
	# Groups i2c and meshd need not exist on the machine running the check.
	out=$(udevadm verify --resolve-names=never "${rules[@]}" 2>&1) || rc=$?
	if [ "$rc" -ne 0 ]; then
		bad "udevadm verify (exit $rc):"
		printf '%s\n' "$out" >&2
	else
		ok "udevadm verify 99-meshd.rules 99-meshd-powercap.rules"
	fi
else
	# No udevadm verify (systemd < 254): every rule line must be
	# comma-separated KEY op "value" pairs with keys udev knows.
	keys='ACTION|DEVPATH|KERNEL|KERNELS|NAME|SYMLINK|SUBSYSTEM|SUBSYSTEMS|DRIVER|DRIVERS|ATTR\{[^}]+\}|ATTRS\{[^}]+\}|SYSCTL\{[^}]+\}|ENV\{[^}]+\}|CONST\{[^}]+\}|TAG|TAGS|TEST(\{[0-7]+\})?|PROGRAM|RESULT|OWNER|GROUP|MODE|SECLABEL\{[^}]+\}|OPTIONS|IMPORT\{[^}]+\}|RUN(\{[a-z]+\})?|LABEL|GOTO'
	pair="($keys)(==|!=|\\+=|-=|:=|=)\"[^\"]*\""
	lint=0
	for f in "${rules[@]}"; do
		n=0
		while IFS= read -r line || [ -n "$line" ]; do
			n=$((n + 1))
			case "$line" in '' | '#'*) continue ;; esac
			if ! [[ "$line" =~ ^$pair(,[[:space:]]*$pair)*$ ]]; then
				bad "udev lint: ${f##*/}:$n: $line"
				lint=1
			fi
		done <"$f"
	done
	[ "$lint" -eq 0 ] && ok "udev rules lint (no udevadm verify here: systemd < 254)"
fi

# --- 7. files the Go code names -----------------------------------------
missing=0
for f in $(grep -rhoE 'systemd/[A-Za-z0-9_.-]+\.(conf|rules|service|sysusers)' --include='*.go' . | sort -u); do
	[ -f "$f" ] || { bad "$f is named in Go code but does not exist"; missing=1; }
done
[ "$missing" -eq 0 ] && ok "systemd/ files named in Go code exist"

if [ "$fail" -ne 0 ]; then
	echo "check-systemd: FAILED" >&2
	exit 1
fi
echo "check-systemd: all checks passed"
