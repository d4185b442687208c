#!/bin/bash
# perftest.sh MODE PROGRAM SIZE ITERS PORT [ARGS...]
#
# Runs one of Debian's perftest binaries (ib_{send,write,read,atomic}_{bw,lat})
# unmodified over softverbs: server and client as separate processes with
# `-x 0 -n ITERS -p PORT [-s SIZE] [-C] ARGS` (ARGS e.g. `-c UC`, `-c UD`, `-R`).
#   MODE lo:    both on this host over device sv_lo, client connects to 127.0.0.1.
#   MODE netns: server in one network namespace on sv_sva, client in another
#               on sv_svb, joined by a veth pair (needs root, else skip 77).
# SIZE "-" passes no -s (the atomic tests have none: always 8 bytes).
#
# It proves the binaries load and run, not how fast they are (bench/'s job):
# both sides must exit 0 within the time budget, and the client (and, for
# the SEND tests, where both sides measure, the server too) must print a
# result row whose #bytes and #iterations columns are SIZE and ITERS.
#
# Debian's perftest also links libmlx5 and libefa, which import rdma-core's
# private IBVERBS_PRIVATE_34 symbols: loading at all exercises those stubs.
#
# With -R in ARGS the QPs are connected through the RDMA CM: softverbs'
# librdmacm.so.1, which `softverbs run` puts in place like libibverbs.so.1.
# SV_TOOL may be an installed tool (tests/install): nothing here assumes the
# build tree's layout.
. "$(dirname "$0")/lib.sh"
set -euo pipefail

[ $# -ge 5 ] || sv_fail "usage: $0 lo|netns PROGRAM SIZE ITERS PORT [ARGS...]"
mode=$1 prog=$2 size=$3 iters=$4 port=$5
shift 5
sv_require "$prog" ibv_devices

common=(-x 0 -n "$iters")
[ "$size" = - ] || common+=(-s "$size")
# The latency tests report in CPU cycles (-C): perftest then skips the
# second of its two CPU-frequency calibrations, a busy loop of 0.2 s or more
# per process.  The result row keeps its layout.
case $prog in
*_lat) common+=(-C) ;;
esac
common+=("$@")

case $mode in
lo)
	sns="" sdev=sv_lo cns="" cdev=sv_lo host=127.0.0.1
	;;
netns)
	net=$((port % 250))
	sv_netns_pair "pt-$port" "$net"
	sns=$SV_NS_A sdev=sv_sva cns=$SV_NS_B cdev=sv_svb host=10.211.$net.1
	;;
*)
	sv_fail "unknown mode '$mode'"
	;;
esac

# Start the server and wait until it is ready for the client.  perftest's
# server opens its TCP port for the out-of-band exchange (QP numbers, GIDs,
# and the sync around rdma_cm's connect with -R) only after its device and
# buffers are set up.  Another program may take the port between the check
# and perftest's bind: then take the next one.
#
# The bandwidth tests turn cycles into MB/s with a CPU frequency they
# measure first, by a regression over timed busy loops.  On a busy machine
# the samples scatter ("Correlation coefficient r^2: 0.89 < 0.9"), and the
# client exits 1 with "Can't produce a report" after every message has
# moved: perftest's clock, not the data path.  Then the exchange runs
# again, three times at most.
for attempt in 1 2 3; do
	sv_perftest_server "$sns" "$sdev" "$port" "$prog" "${common[@]}"
	spid=$SV_PID port=$SV_PORT

	sv_log "client: $prog -d $cdev ${common[*]} -p $port $host ${cns:+(netns $cns)}"
	cli_rc=0
	sv_run client "$(($(sv_left) - 3))" "$cns" "$prog" -d "$cdev" -p "$port" \
		"${common[@]}" "$host" || cli_rc=$?
	# The server ends right after the client; when the client failed, it may
	# wait for messages that never come: give it a few seconds only.
	srv_rc=0
	sv_wait "$spid" "$([ "$cli_rc" = 0 ] && echo 10 || echo 3)" || srv_rc=$?
	[ "$cli_rc" = 1 ] && [ "$attempt" -lt 3 ] &&
		grep -q "Can't produce a report" "$SV_WORK/client.out" || break
	sv_log "perftest's CPU-frequency calibration failed here ($(grep -m1 'Correlation' \
		"$SV_WORK/client.out" || echo "no report")): the exchange again"
	{ kill -TERM -- "-$spid" && wait "$spid"; } 2>/dev/null || true
	port=$((port + 1))
done
[ "$cli_rc" != 124 ] && [ "$cli_rc" != 137 ] || sv_fail "client timed out"
[ "$srv_rc" != 124 ] && [ "$srv_rc" != 137 ] || sv_fail "server timed out"
[ "$cli_rc" = 0 ] || sv_fail "client exited $cli_rc"
[ "$srv_rc" = 0 ] || sv_fail "server exited $srv_rc"

# sv_result_row NAME: the result table's header and a data row whose first
# two columns are the message size and the iteration count asked for.  A
# missing or different row means the run measured something else or nothing.
sv_result_row() {
	local f="$SV_WORK/$1.out" want_size=$size row
	[ "$want_size" = - ] && want_size=8
	grep -q '#bytes' "$f" || sv_fail "$1 printed no result table"
	row=$(grep -m1 -E '^ *[0-9]+ +[0-9]+ +[0-9.]+' "$f") ||
		sv_fail "$1 printed no result row"
	read -r b n _ <<<"$row"
	[ "$b" = "$want_size" ] || sv_fail "$1 result row is for $b bytes, expected $want_size"
	[ "$n" = "$iters" ] || sv_fail "$1 result row has $n iterations, expected $iters"
	echo "   $1: $row"
}
sv_result_row client
# In the SEND tests the server receives and measures too; in WRITE, READ and
# atomic tests the passive side measures nothing and prints no table.
case $prog in
ib_send_*) sv_result_row server ;;
esac
echo "PASS: $prog $mode size $size x $iters $*"
