#!/bin/bash
# rocev2_flood.sh PORT KIND [RATE [SECONDS]]: clients.rocev2.flood.KIND.netns
#
# A UDP flood at a RoCEv2 receiver (issue 35, point 5).  Debian's
# ib_write_bw (RC, 1 MiB WRITEs, -D SECONDS, default 4, measured over the
# middle SECONDS - 2; GID 3, the IPv4 address, so that the flood and the
# WRITEs reach the same socket) between two network namespaces A (server) and B
# (client) over RoCEv2, first alone (the baseline), then while a third
# namespace F, joined to A by a veth pair of its own (fa <-> ff), sends
# RATE datagrams a second (default 100,000) to A's port 4791
# (tests/transport/rocev2_flood.c, sendmmsg(2), paced):
#   admitted  RC SEND/WRITE packets with a right ICRC at random PSNs, half
#             to random QPNs, half to the server's QP (its QPN read from
#             ib_write_bw's output; connected to B, it takes nothing from
#             another address), from 10.211.NET.3, in the subnet A's
#             device admits;
#   foreign   the same from 10.212.NET.3, which it does not admit;
#   badicrc   RoCE-looking packets of random lengths (16 to 1,100 bytes) to
#             the server's QP with a wrong ICRC, from 10.211.NET.3.
# The flooded run must keep at least half the baseline's bandwidth, both
# programs must exit 0 (no error completion, no RETRY_EXC), and the output
# says the flood's achieved rate.  The baseline runs beside the same flood
# sent to A's UDP port 4792, where nothing listens (A's kernel drops each
# datagram): on a machine of two cores the flooder, A's kernel taking its
# datagrams and the two softverbs processes share them, and what is
# asserted is what softverbs' own handling of the flood costs, not what a
# third busy process costs on two cores (with rocev2's runs of datagrams the
# sender got cheaper, and in the ASan build a baseline without the flooder
# beside it measured 230 MB/s to the flooded run's 85, where the flooded
# run alone had gone from 67 to 85).  Both runs are measured here, one after
# the other, so that a busy machine slows both; when the flooded run falls
# short, another pair is measured, up to three while the time allows (the
# scheduler of a loaded machine can take a core from either run for a
# second: beside other tests, a flooded run measured 70 MB/s after a
# baseline of 36, another 9 after 43), and the best pair counts.
# On a machine too busy to send RATE a second the ratio is asserted at the
# rate achieved, and the output says so.
#
# Skips (77) without root (namespaces) or ib_write_bw; fails without the
# flooder (SV_FLOOD, which CTest sets).
. "$(dirname "$0")/lib.sh"
set -euo pipefail

[ $# -ge 2 ] || sv_fail "usage: $0 PORT admitted|foreign|badicrc [RATE [SECONDS]]"
port=$1 kind=$2 rate=${3:-100000} secs=${4:-4}
case $kind in admitted | foreign | badicrc) ;; *) sv_fail "unknown flood kind $kind" ;; esac
sv_require ib_write_bw
[ -x "${SV_FLOOD:-}" ] || sv_fail "SV_FLOOD does not name the flooder (transport_rocev2_flood)"
export SOFTVERBS_TRANSPORT=rocev2

net=$((port % 250))
sv_netns_pair "fl-$port" "$net"
# F, the flooder's namespace: a veth pair of its own into A (fa has no
# address, so A has no softverbs device on it; no IPv6 there either)
SV_NS_F="svt-fl-$port-$$-f"
ip netns add "$SV_NS_F" || sv_fail "ip netns add $SV_NS_F"
SV_NETNS+=("$SV_NS_F")
ip -n "$SV_NS_A" link add fa type veth peer name ff netns "$SV_NS_F" &&
	ip netns exec "$SV_NS_A" sysctl -qw net.ipv6.conf.fa.disable_ipv6=1 \
		net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.fa.rp_filter=0 &&
	ip netns exec "$SV_NS_F" sysctl -qw net.ipv6.conf.ff.disable_ipv6=1 &&
	ip -n "$SV_NS_F" addr add "10.211.$net.3/24" dev ff &&
	ip -n "$SV_NS_F" addr add "10.212.$net.3/32" dev ff &&
	ip -n "$SV_NS_A" link set fa up && ip -n "$SV_NS_F" link set ff up &&
	ip -n "$SV_NS_F" link set lo up || sv_fail "configuring the flooder's veth pair"
src=10.211.$net.3
[ "$kind" != foreign ] || src=10.212.$net.3

# RcvbufErrors of namespace A's UDP: datagrams its sockets had no room for
udp_rcvbuf_errors() {
	ip netns exec "$SV_NS_A" awk '/^Udp:/ { if (!h) { for (i = 1; i <= NF; i++) if ($i == "RcvbufErrors") c = i; h = 1 } else print $c }' /proc/net/snmp
}
DROPS=$(udp_rcvbuf_errors)

# -f 1: measured over the middle of the run (1 s margins)
common=(-x 3 -c RC -s 1048576 -D "$secs" -f 1)
# run NAME PORT: one ib_write_bw pair, the flooder sending to A's UDP PORT
# (4791: softverbs'; 4792: nobody's) from the moment the server has its QP
# until the client has ended.  Sets BW (MB/s, the client's average) and
# FLOOD_RATE (datagrams a second); fails the test on an error.
run() {
	local name=$1 to=$2 spid cpid qpn="" fpid row
	sv_perftest_server "$SV_NS_A" sv_sva "$port" ib_write_bw "${common[@]}"
	spid=$SV_PID port=$SV_PORT
	sv_run_bg client "$(($(sv_left) - 3))" "$SV_NS_B" ib_write_bw -d sv_svb -p "$port" \
		"${common[@]}" "10.211.$net.1"
	cpid=$SV_PID
	# the server prints its QP once the client has connected,
	# before the first WRITE
	local deadline=$((SECONDS + 20))
	until qpn=$(sed -n 's/.*local address:.*QPN \(0x[0-9a-fA-F]*\).*/\1/p' \
		"$SV_WORK/server.out" | head -1) && [ -n "$qpn" ]; do
		kill -0 "$cpid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ] ||
			sv_fail "the server printed no QPN"
		sleep 0.02
	done
	local fkind=valid
	[ "$kind" != badicrc ] || fkind=badicrc
	echo "\$ ip netns exec $SV_NS_F rocev2_flood $fkind $src 10.211.$net.1 $rate ... $to" \
		>"$SV_WORK/flood.out"
	timeout -k 2 "$(($(sv_left) - 3))" ip netns exec "$SV_NS_F" "$SV_FLOOD" "$fkind" \
		"$src" "10.211.$net.1" "$rate" 600 "$qpn" "$to" >>"$SV_WORK/flood.out" 2>&1 &
	fpid=$!
	SV_PGIDS+=("$fpid")
	# what the QPs counted near the end of the run (not stopped
	# for it: the flood would fill the socket meanwhile), for the log
	sleep "$((secs - 1))"
	if "$SV_TOOL" stat --json >"$SV_WORK/snap.json" 2>/dev/null; then
		local c s
		c=$(sv_stat_rc_sums "$SV_WORK/snap.json" "$SV_NS_B" ib_write_bw tx_packets \
			retransmits ack_timeouts cnp_received)
		s=$(sv_stat_rc_sums "$SV_WORK/snap.json" "$SV_NS_A" ib_write_bw rx_packets \
			ecn_marked_packets cnp_sent)
		sv_log "$name, $((secs - 1)) s in: client QP tx_packets retransmits" \
			"ack_timeouts cnp_received: ${c:-gone}; server QP rx_packets" \
			"ecn_marked_packets cnp_sent: ${s:-gone}"
	fi
	sv_wait_both "$cpid" "$spid"
	local drops
	drops=$(udp_rcvbuf_errors)
	[ "$drops" = "$DROPS" ] || sv_log "$name: A's UDP sockets dropped $((drops - DROPS)) datagrams (full)"
	DROPS=$drops
	kill -TERM "$fpid" 2>/dev/null || true
	wait "$fpid" || true
	FLOOD_RATE=$(sed -n 's/^flood .*: \([0-9]*\)\/s (asked.*/\1/p' "$SV_WORK/flood.out")
	[ -n "$FLOOD_RATE" ] || sv_fail "the flooder reported no rate"
	mv "$SV_WORK/flood.out" "$SV_WORK/$name-flood.out"
	row=$(grep -m1 -E '^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+' "$SV_WORK/client.out") ||
		sv_fail "$name: the client printed no result row"
	local bytes iters
	read -r bytes iters _ BW _ <<<"$row"
	[ "$bytes" = 1048576 ] || sv_fail "$name: result row for $bytes bytes, expected 1048576"
	mv "$SV_WORK/client.out" "$SV_WORK/$name-client.out"
	mv "$SV_WORK/server.out" "$SV_WORK/$name-server.out"
	sv_log "$name: $BW MB/s beside $FLOOD_RATE datagrams/s ($kind) to port $to"
}

best=0 best_base="" best_bw="" best_rate=""
for try in 1 2 3; do
	run "base$try" 4792
	base=$BW
	run "flood$try" 4791
	ratio=$(awk -v f="$BW" -v b="$base" 'BEGIN { printf "%.2f", (b > 0 ? f / b : 0) }')
	if awk -v r="$ratio" -v b="$best" 'BEGIN { exit !(r > b) }'; then
		best=$ratio best_base=$base best_bw=$BW best_rate=$FLOOD_RATE
	fi
	awk -v r="$best" 'BEGIN { exit !(r >= 0.5) }' && break
	# a pair takes 15 s on an idle machine, 30 on a busy one
	[ "$try" -lt 3 ] && [ "$(sv_left)" -gt 40 ] || break
	sv_log "under half the baseline ($ratio): one more pair"
done
note=""
[ "$best_rate" -ge $((rate * 9 / 10)) ] ||
	note=" (this machine sent only $best_rate of the $rate datagrams/s asked)"
awk -v r="$best" 'BEGIN { exit !(r >= 0.5) }' ||
	sv_fail "under a $kind flood of $best_rate datagrams/s$note: $best_bw MB/s," \
		"$best of the $best_base MB/s with the flood sent to port 4792 (nobody's)"
echo "PASS: ib_write_bw RC 1 MiB under a $kind flood of $best_rate datagrams/s$note:" \
	"$best_bw MB/s, $best of the $best_base MB/s with the flood sent to port 4792 (nobody's); no error"
