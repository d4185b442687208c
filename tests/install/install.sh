#!/bin/bash
# install.sh BUILD PREFIX BINDIR LIBDIR PKGLIBDIR MANDIR CC PORT [SANITIZE]
#
# `make install` as a user gets it: the build in BUILD is installed with
# DESTDIR into a scratch root (no privilege, nothing outside it touched), and
#   - the files are where softverbs(1) says: the tool in PREFIX/BINDIR, the
#     libraries in the private PREFIX/PKGLIBDIR and nothing of softverbs'
#     next to the system's libraries in PREFIX/LIBDIR, the man pages, the
#     pkg-config file;
#   - the installed tool loads the installed libibverbs.so.1 (its RUNPATH),
#     and `softverbs run` puts the installed library directory first;
#   - Debian's ibv_rc_pingpong and ib_send_bw -R (librdmacm) run through the
#     installed `softverbs run`, with the tests/clients scripts;
#   - a program linked with `pkg-config --libs softverbs` loads the installed
#     libibverbs.so.1 and sees sv_lo, without `softverbs run`.
set -euo pipefail
[ $# -ge 8 ] || { echo "usage: $0 BUILD PREFIX BINDIR LIBDIR PKGLIBDIR MANDIR CC PORT [SANITIZE]"; exit 2; }
build=$1 prefix=$2 bindir=$3 libdir=$4 pkglibdir=$5 mandir=$6 cc=$7 port=$8 sanitize=${9:-}
clients=$(cd "$(dirname "$0")/../clients" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/sv-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
fail() { echo "FAIL: $*"; exit 1; }

# cmake --install writes BUILD/install_manifest.txt; keep a user's own
# (from a real `make install`) as it was.
manifest=$build/install_manifest.txt
[ -e "$manifest" ] && cp -p "$manifest" "$work/manifest.saved"
DESTDIR=$root cmake --install "$build" >"$work/install.log" 2>&1 ||
	{ cat "$work/install.log"; fail "cmake --install"; }
if [ -e "$work/manifest.saved" ]; then
	cp -p "$work/manifest.saved" "$manifest"
else
	rm -f "$manifest"
fi

p=$root$prefix
tool=$p/$bindir/softverbs
lib=$p/$pkglibdir
echo "-- installed into $root (prefix $prefix)"
(cd "$root" && find . -mindepth 1 ! -type d | sort | sed 's/^/   /')

[ -x "$tool" ] || fail "no executable $tool"
for f in libibverbs.so.1 librdmacm.so.1 libsoftverbs-fsview.so; do
	[ -e "$lib/$f" ] || fail "no $f in $lib"
done
# never beside the system's rdma-core libraries
if ls "$p/$libdir"/libibverbs* "$p/$libdir"/librdmacm* >/dev/null 2>&1; then
	fail "libraries installed into $prefix/$libdir itself: they would replace rdma-core's"
fi
cmp -s "$p/$mandir/man1/softverbs.1" "$clients/../../docs/man/softverbs.1" ||
	fail "softverbs.1 not installed in $prefix/$mandir/man1"
cmp -s "$p/$mandir/man7/softverbs.7" "$clients/../../docs/man/softverbs.7" ||
	fail "softverbs.7 not installed in $prefix/$mandir/man7"
pc=$p/$libdir/pkgconfig/softverbs.pc
[ -e "$pc" ] || fail "no $pc"

# The tool's own libibverbs.so.1 is the installed one, found by its RUNPATH.
# (LD_LIBRARY_PATH stays: a sanitizer build finds its runtime through it.)
real_lib=$(realpath "$lib")
loaded=$("$tool" version | sed -n 's/^libibverbs: //p')
[ -n "$loaded" ] || fail "softverbs version names no libibverbs"
[ "$(dirname "$(realpath "$loaded")")" = "$real_lib" ] ||
	fail "installed softverbs loaded $loaded, not the one in $lib"
echo "-- softverbs version: libibverbs $loaded"

# `softverbs run` puts the installed library directory first, and preloads
# the installed fsview library.
got=$("$tool" run -- sh -c 'echo "$LD_LIBRARY_PATH|$LD_PRELOAD"')
first=${got%%|*}
first=${first%%:*}
[ "$first" = "$real_lib" ] ||
	fail "softverbs run set LD_LIBRARY_PATH=${got%%|*}, expected $real_lib first"
# (a sanitizer build puts its runtime before it)
case ":${got#*|}:" in
*":$real_lib/libsoftverbs-fsview.so:"*) ;;
*) fail "softverbs run set LD_PRELOAD=${got#*|}, without $real_lib/libsoftverbs-fsview.so" ;;
esac
"$tool" run -- ibv_devices >"$work/devices.out" 2>&1 ||
	{ cat "$work/devices.out"; fail "installed softverbs run -- ibv_devices"; }
grep -qw sv_lo "$work/devices.out" || fail "ibv_devices through the installed tool lists no sv_lo"

# Debian's clients through the installed tool (same checks as tests/clients).
# The ports: the first from $port on that no socket of this namespace uses
# (a server of another test may still be closing: CI once saw ib_send_bw's
# rdma_bind_addr refused on a fixed one).
free_port() {
	local p=$1
	while [ -n "$(ss -Hatn "sport = :$p")" ]; do
		p=$((p + 1))
	done
	echo "$p"
}
export SV_TOOL=$tool SV_BUDGET=40
port=$(free_port "$port")
bash "$clients/pingpong.sh" lo ibv_rc_pingpong 4096 200 "$port" ||
	fail "ibv_rc_pingpong through the installed softverbs run"
port=$(free_port "$((port + 1))")
bash "$clients/perftest.sh" lo ib_send_bw 65536 200 "$port" -R ||
	fail "ib_send_bw -R through the installed softverbs run"

# Linked with the installed pkg-config file: softverbs' library, no `softverbs run`.
if ! command -v pkg-config >/dev/null 2>&1; then
	echo "SKIP: pkg-config not installed (the rest passed): install Debian package pkg-config (apt-get install pkg-config)"
	exit 77
fi
pcflags=(--define-variable=prefix="$p")
libs=$(PKG_CONFIG_PATH=$p/$libdir/pkgconfig pkg-config "${pcflags[@]}" --libs softverbs) ||
	fail "pkg-config --libs softverbs"
echo "-- pkg-config --libs softverbs: $libs"
cat >"$work/which.c" <<'C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <infiniband/verbs.h>
/* Prints the file libibverbs was loaded from, then the devices. */
int main(void)
{
	Dl_info info;
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);

	if (!list || !dladdr((void *)ibv_get_device_list, &info))
		return 1;
	printf("%s\n", info.dli_fname);
	for (int i = 0; i < n; i++)
		printf("%s\n", ibv_get_device_name(list[i]));
	ibv_free_device_list(list);
	return 0;
}
C
# A sanitizer build's libraries need the program built the same way.
san=()
if [ -n "$sanitize" ]; then
	san=(-fsanitize="$sanitize")
	"$cc" --version | grep -q clang && san+=(-shared-libsan)
fi
# shellcheck disable=SC2086 # $libs is a list of flags
"$cc" "${san[@]}" -o "$work/which" "$work/which.c" $libs -ldl ||
	fail "building with pkg-config's flags"
env -u LD_PRELOAD "$work/which" >"$work/which.out" ||
	fail "the pkg-config-linked program failed"
[ "$(dirname "$(realpath "$(head -n1 "$work/which.out")")")" = "$real_lib" ] ||
	fail "the pkg-config-linked program loaded $(head -n1 "$work/which.out")"
grep -qx sv_lo "$work/which.out" || fail "the pkg-config-linked program sees no sv_lo"
echo "-- pkg-config-linked program: $(head -n1 "$work/which.out"), sees sv_lo"
echo "PASS: installed layout, softverbs run, pingpong, perftest -R, pkg-config"
