#!/bin/bash
# rocev2_overflow.sh PORT: clients.rocev2.congestion.overflow.netns
#
# A receiver that cannot keep up: Debian's ib_write_bw with 8 RC QPs (-q 8)
# of 1 MiB WRITEs (200 each) between two network namespaces over RoCEv2,
# into a server whose UDP socket on port 4791 holds only 128 KiB
# (SOFTVERBS_ROCEV2_RCVBUF=131072): its kernel drops datagrams whenever the
# senders get ahead, and the requesters must recover each loss (probe,
# go-back-N) and slow down (the window halves on a loss and on the CNPs the
# receiver sends when its socket is over half full).  A snapshot during the
# run (sv_stat_frozen) must show the client's QPs resending, and every QP
# must finish: both programs exit 0, the client with its result row for
# 8 x 10 messages.  (8 x 200 took 40 s of the test's 50 on an idle machine
# and ran out of time beside busy loops, where 8 x 25 took 23 to 39 s;
# 8 x 10 lose and resend hundreds of packets all the same.)  Before the fix
# this failed 3 runs of 3 with RETRY_EXC_ERR:
# the engine thread, which fired the probe and ack timers, waited for the
# engine's lock that the client's polling thread kept taking, and every
# timer fired hundreds of milliseconds late (engine/loop.c, progress_locked).
#
# Skips (77) without root (namespaces), ib_write_bw or python3.
. "$(dirname "$0")/lib.sh"
set -euo pipefail

[ $# -ge 1 ] || sv_fail "usage: $0 PORT"
port=$1
sv_require ib_write_bw python3 ibv_devices # python3 reads stat --json
export SOFTVERBS_TRANSPORT=rocev2

net=$((port % 250))
sv_netns_pair "ov-$port" "$net"

common=(-x 3 -c RC -s 1048576 -n 10 -q 8 -F)
SOFTVERBS_ROCEV2_RCVBUF=131072 sv_perftest_server "$SV_NS_A" sv_sva "$port" ib_write_bw "${common[@]}"
spid=$SV_PID port=$SV_PORT

sv_log "client: ib_write_bw -d sv_svb ${common[*]} -p $port 10.211.$net.1 (netns $SV_NS_B)"
sv_run_bg client "$(($(sv_left) - 3))" "$SV_NS_B" ib_write_bw -d sv_svb -p "$port" \
	"${common[@]}" "10.211.$net.1"
cpid=$SV_PID

# the client's QPs resend what the server's socket dropped
resent=""
while [ -z "$resent" ] && kill -0 "$cpid" 2>/dev/null; do
	sv_stat_frozen "$SV_WORK/snap.json" "$cpid" "$spid"
	read -r tx rt <<<"$(sv_stat_rc_sums "$SV_WORK/snap.json" "$SV_NS_B" ib_write_bw \
		tx_packets retransmits)" || true
	[ "${rt:-0}" -gt 0 ] && resent=1 || sleep 0.1
done
[ -n "$resent" ] || sv_fail "the client ended and no snapshot showed a packet resent"
sv_log "snapshot: the client's QPs sent $tx packets, $rt of them again"

sv_wait_both "$cpid" "$spid"
row=$(grep -m1 -E '^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+' "$SV_WORK/client.out") ||
	sv_fail "client printed no result row"
read -r bytes iters _ bw_avg _ <<<"$row"
[ "$bytes" = 1048576 ] || sv_fail "result row for $bytes bytes, expected 1048576"
[ "$iters" = 80 ] || sv_fail "result row for $iters messages, expected 8 x 10"
awk -v b="$bw_avg" 'BEGIN { exit !(b > 0) }' || sv_fail "average bandwidth $bw_avg"
echo "PASS: 8 QPs x 10 x 1 MiB into a 128 KiB receive socket: $row"
