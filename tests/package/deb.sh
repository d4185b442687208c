#!/bin/bash
# deb.sh DEBDIR PORT
#
# The Debian package from `make deb` (DEBDIR/softverbs_*.deb), as a user
# gets it:
#   1. dpkg -i installs it (its only dependency is the C library);
#   2. the files are where softverbs(1) says, the installed tool loads the
#      packaged libibverbs.so.1, man finds both pages, pkg-config the .pc;
#   3. Debian's ibv_rc_pingpong and ib_write_bw run through the installed
#      `softverbs run` (the tests/clients scripts);
#   4. programs started without it use rdma-core's libibverbs until
#      `softverbs system enable`, softverbs' after it, rdma-core's again
#      after `softverbs system disable`;
#   5. enabled again, `dpkg --purge` removes every file of the package and
#      the drop-in, and the dynamic linker no longer knows the libraries.
# Runs as root (skip otherwise), in a mount namespace of its own with a
# private copy of /etc, so that the dynamic linker's configuration of the
# machine is never changed; dpkg's database and /usr are the machine's.
set -euo pipefail
debdir=$1 port=$2
clients=$(cd "$(dirname "$0")/../clients" && pwd)
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

if [ -z "${SV_DEB_PRIVATE_ETC:-}" ]; then
	[ "$(id -u)" = 0 ] || skip "needs root to install a package: run the tests as root (sudo make test) to include it"
	command -v dpkg >/dev/null 2>&1 || skip "not a Debian system (no dpkg)"
	command -v unshare >/dev/null 2>&1 || skip "unshare(1) not installed: install Debian package util-linux"
	deb=$(ls -1 "$debdir"/softverbs_*.deb 2>/dev/null | head -n1 || true)
	[ -n "$deb" ] || skip "no softverbs_*.deb in $debdir: run 'make deb' first"
	status=$(dpkg-query -W -f='${db:Status-Status}' softverbs 2>/dev/null || true)
	[ "$status" = not-installed ] || [ -z "$status" ] ||
		skip "a softverbs package is installed here ($status): left alone"
	etc=$(mktemp -d "${TMPDIR:-/tmp}/sv-deb-etc.XXXXXX")
	trap 'rm -rf "$etc"' EXIT
	cp -a /etc/. "$etc/"
	rc=0
	SV_DEB_PRIVATE_ETC=$etc unshare --mount --propagation private \
		bash -c 'mount --bind "$SV_DEB_PRIVATE_ETC" /etc && exec bash "$@"' deb.sh "$0" \
		"$deb" "$port" || rc=$?
	# whatever happened inside, the package must not stay installed
	if dpkg-query -W -f='${db:Status-Status}' softverbs 2>/dev/null | grep -qv not-installed; then
		dpkg --purge softverbs >/dev/null 2>&1 || true
		[ "$rc" != 0 ] || rc=1
		echo "FAIL: the package was still installed after the test"
	fi
	exit "$rc"
fi

# ---- in the namespace, /etc private ----
deb=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/sv-deb.XXXXXX")
trap 'rm -rf "$work"; dpkg --purge softverbs >/dev/null 2>&1 || true' EXIT
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
libdir=/usr/lib/$ma/softverbs

echo "-- dpkg -i $(basename "$deb")"
dpkg-deb -f "$deb" Depends | sed 's/^/   Depends: /'
# dpkg refuses to wait for its lock: wait here while apt runs elsewhere
dpkg_wait() {
	local i
	for i in $(seq 60); do
		"$@" >"$work/dpkg.log" 2>&1 && return 0
		grep -q "lock" "$work/dpkg.log" || break
		sleep 1
	done
	cat "$work/dpkg.log"
	return 1
}
dpkg_wait dpkg -i "$deb" || fail "dpkg -i"
dpkg -L softverbs >"$work/files"
for f in /usr/bin/softverbs "$libdir/libibverbs.so.1" "$libdir/librdmacm.so.1" \
	"$libdir/libsoftverbs-fsview.so" "/usr/lib/$ma/pkgconfig/softverbs.pc"; do
	grep -qx "$f" "$work/files" || fail "the package has no $f"
done
if grep -E "^/usr/lib/$ma/lib(ibverbs|rdmacm)" "$work/files"; then
	fail "the package puts libraries beside rdma-core's"
fi
loaded=$(/usr/bin/softverbs version | sed -n 's/^libibverbs: //p')
[ "$(dirname "$(realpath "$loaded")")" = "$libdir" ] ||
	fail "the installed tool loaded $loaded, not $libdir/libibverbs.so.1"
for page in 1 7; do
	man -w "$page" softverbs >/dev/null 2>&1 || fail "man $page softverbs: not found"
done
[ "$(pkg-config --variable=softverbs_libdir softverbs)" = "$libdir" ] ||
	fail "pkg-config names $(pkg-config --variable=softverbs_libdir softverbs), not $libdir"
echo "-- installed: $(wc -l <"$work/files") paths, tool loads $loaded"

export SV_TOOL=/usr/bin/softverbs SV_BUDGET=40
bash "$clients/pingpong.sh" lo ibv_rc_pingpong 65536 100 "$port" ||
	fail "ibv_rc_pingpong through the packaged softverbs run"
bash "$clients/perftest.sh" lo ib_write_bw 65536 200 "$((port + 1))" ||
	fail "ib_write_bw through the packaged softverbs run"

# ibv_devices started plainly: which devices does the system's libibverbs.so.1 show?
plain_devices() { env -u LD_LIBRARY_PATH -u LD_PRELOAD ibv_devices 2>&1 || true; }
if command -v ibv_devices >/dev/null 2>&1; then
	plain_devices | grep -qw sv_lo && fail "sv_lo seen without softverbs run before 'system enable'"
	softverbs system enable || fail "softverbs system enable"
	plain_devices | grep -qw sv_lo || fail "ibv_devices sees no sv_lo after 'system enable'"
	softverbs system status | grep -qx "system-wide: enabled" || fail "status after enable"
	softverbs system disable || fail "softverbs system disable"
	plain_devices | grep -qw sv_lo && fail "sv_lo still seen after 'system disable'"
	softverbs system status | grep -qx "system-wide: disabled" || fail "status after disable"
	echo "-- system enable/disable: plain ibv_devices switched to softverbs and back"
	softverbs system enable >/dev/null || fail "softverbs system enable (again)"
else
	echo "-- ibverbs-utils not installed: system-wide mode not checked"
fi

echo "-- dpkg --purge softverbs"
dpkg_wait dpkg --purge softverbs || fail "dpkg --purge"
status=$(dpkg-query -W -f='${db:Status-Status}' softverbs 2>/dev/null || true)
[ "$status" = not-installed ] || [ -z "$status" ] || fail "still '$status' after purge"
left=$(while read -r f; do
	if [ -f "$f" ] || [ -L "$f" ]; then echo "$f"; fi
done <"$work/files")
[ -z "$left" ] || fail "files left after purge: $left"
[ ! -e /etc/ld.so.conf.d/00-softverbs.conf ] || fail "the drop-in outlived the package"
! grep -q "$libdir" <(/sbin/ldconfig -p) || fail "the dynamic linker still lists $libdir"
echo "PASS: package installed, used, switched system-wide and back, purged clean"
