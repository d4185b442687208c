#!/bin/bash
# rocev2_congestion.sh PORT [SECONDS]: clients.rocev2.congestion.write_bw.netns
#
# Congestion control over RoCEv2 end to end, with Debian's ib_write_bw
# (RC, 1 MiB messages, duration mode -D SECONDS, default 3) unmodified
# between two network namespaces, every packet a RoCEv2 datagram
# (SOFTVERBS_TRANSPORT=rocev2).  The client (the requester) runs with
# SOFTVERBS_FAULTS=ce=0.05,seed=5: a twentieth of its datagrams leave with
# IP ECN CE, as a congested switch would mark them.  The server's QP (the
# responder) must see them and send CNPs; the client's QP must receive
# them (its window halves, engine/congestion.c).  While the test runs,
# `softverbs stat --json` snapshots of the host, each taken with both
# programs stopped (sv_stat_frozen), so that it finds them alive however
# late this shell gets a CPU on a busy machine, must come to show
#   - the server's RC QP (the ib_write_bw of namespace A): ecn_marked_packets
#     > 0, cnp_sent > 0, cnp_sent <= ecn_marked_packets;
#   - the client's RC QP (namespace B): cnp_received > 0;
# before the client ends (snapshots until one shows all of that).  Taken at
# a fixed time instead (~1.5 s into the 3 s run), the one snapshot found the
# client gone on a loaded machine, every time beside busy loops twice the
# CPU count.
# Then both programs exit 0, the client with a result row for 1 MiB
# messages and a bandwidth above 0, and reports (SOFTVERBS_LOG=info) that
# it marked packets CE.  The contexts are told apart by their network
# namespace (stat's "netns", the namespace's inode), not by device name:
# other tests' namespaces have devices named sv_sva / sv_svb too.
#
# Skips (77) without root (namespaces), ib_write_bw or python3.
. "$(dirname "$0")/lib.sh"
set -euo pipefail

[ $# -ge 1 ] || sv_fail "usage: $0 PORT [SECONDS]"
port=$1
secs=${2:-3}
sv_require ib_write_bw python3 ibv_devices # python3 reads stat --json
export SOFTVERBS_TRANSPORT=rocev2

net=$((port % 250))
sv_netns_pair "cc-$port" "$net"

# -f 1: perftest measures within a margin of 1 s at each end of the run
common=(-x 0 -c RC -s 1048576 -D "$secs" -f 1)
sv_perftest_server "$SV_NS_A" sv_sva "$port" ib_write_bw "${common[@]}"
spid=$SV_PID port=$SV_PORT

faults="ce=0.05,seed=5"
sv_log "client: ib_write_bw -d sv_svb ${common[*]} -p $port 10.211.$net.1" \
	"(netns $SV_NS_B, SOFTVERBS_FAULTS=$faults)"
SOFTVERBS_FAULTS=$faults SOFTVERBS_LOG=info \
	sv_run_bg client "$(($(sv_left) - 3))" "$SV_NS_B" ib_write_bw -d sv_svb -p "$port" \
	"${common[@]}" "10.211.$net.1"
cpid=$SV_PID

# snapshots until one shows the marks and the CNPs on both QPs, for as long
# as the client runs; each QP's counters are the last snapshot's that had it
s_tx="" s_ecn="" s_cnp_sent="" c_tx="" c_cnp_rcvd="" seen=""
while kill -0 "$cpid" 2>/dev/null; do
	snap=$SV_WORK/snap.json
	sv_stat_frozen "$snap" "$cpid" "$spid"
	s=$(sv_stat_rc_sums "$snap" "$SV_NS_A" ib_write_bw tx_packets ecn_marked_packets cnp_sent)
	c=$(sv_stat_rc_sums "$snap" "$SV_NS_B" ib_write_bw tx_packets cnp_received)
	[ -z "$s" ] || read -r s_tx s_ecn s_cnp_sent <<<"$s"
	[ -z "$c" ] || read -r c_tx c_cnp_rcvd <<<"$c"
	if [ "${s_ecn:-0}" -gt 0 ] && [ "${s_cnp_sent:-0}" -gt 0 ] && [ "${c_cnp_rcvd:-0}" -gt 0 ]; then
		seen=1
		break
	fi
	sleep 0.1
done
[ -n "$seen" ] || {
	[ "${c_tx:-0}" -gt 0 ] || sv_fail "the client's QP sent nothing (no transfer began)"
	sv_fail "the client ended before a snapshot showed CE marks and CNPs:" \
		"server QP ecn_marked_packets ${s_ecn:-none} cnp_sent ${s_cnp_sent:-none}," \
		"client QP cnp_received ${c_cnp_rcvd:-none}"
}
sv_log "snapshot: server QP ecn_marked_packets $s_ecn cnp_sent $s_cnp_sent" \
	"(tx_packets $s_tx); client QP cnp_received $c_cnp_rcvd (tx_packets $c_tx)"

# both exit 0
sv_wait_both "$cpid" "$spid"

[ "$s_cnp_sent" -le "$s_ecn" ] ||
	sv_fail "the server's QP sent $s_cnp_sent CNPs for $s_ecn CE-marked packets"

# the result row: 1 MiB messages, a bandwidth
grep -q '#bytes' "$SV_WORK/client.out" || sv_fail "client printed no result table"
row=$(grep -m1 -E '^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+' "$SV_WORK/client.out") ||
	sv_fail "client printed no result row"
read -r bytes iters _ bw_avg _ <<<"$row"
[ "$bytes" = 1048576 ] || sv_fail "result row for $bytes bytes, expected 1048576"
awk -v b="$bw_avg" 'BEGIN { exit !(b > 0) }' || sv_fail "average bandwidth $bw_avg"
echo "   client: $row"
n=$(sed -n 's/.*SOFTVERBS_FAULTS: injected .* ce \([0-9][0-9]*\).*/\1/p' "$SV_WORK/client.out")
[ -n "$n" ] && [ "$n" -gt 0 ] || sv_fail "the client reports no packet marked CE ('$n')"
sv_log "the client marked $n packets CE; $iters messages of 1 MiB in $secs s"
echo "PASS: ib_write_bw RC 1 MiB -D $secs under ce=0.05: $s_ecn marked, $s_cnp_sent CNPs" \
	"sent, $c_cnp_rcvd received (a snapshot during the run)"
