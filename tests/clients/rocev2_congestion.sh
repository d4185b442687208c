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
# them (its window halves, engine/congestion.c).  While the test runs, one
# `softverbs stat --json` snapshot of the host, taken ~1.5 s into the
# transfer, must show
#   - the server's RC QP (the ib_write_bw of namespace A): ecn_marked_packets
#     > 0, cnp_sent > 0, cnp_sent <= ecn_marked_packets;
#   - the client's RC QP (namespace B): cnp_received > 0;
# and then both programs exit 0, the client with a result row for 1 MiB
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
ns_ino() { stat -L -c %i "/run/netns/$1"; }
ino_a=$(ns_ino "$SV_NS_A") && ino_b=$(ns_ino "$SV_NS_B") ||
	sv_fail "cannot read the namespaces' inodes under /run/netns"

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

# stat_json FILE: one snapshot of every softverbs context of the host
stat_json() { "$SV_TOOL" stat --json >"$1" 2>"$SV_WORK/stat.err"; }

# counters FILE INO: "tx_packets ecn_marked_packets cnp_sent cnp_received" of
# the RC QP of the ib_write_bw context in the namespace with inode INO (the
# sums, should it have several), or nothing when there is none yet
counters() {
	python3 - "$1" "$2" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
keys = ("tx_packets", "ecn_marked_packets", "cnp_sent", "cnp_received")
tot, found = dict.fromkeys(keys, 0), False
for c in d.get("contexts", []):
    if c.get("netns") != int(sys.argv[2]) or c.get("comm") != "ib_write_bw":
        continue
    for q in c.get("qps", []):
        if q.get("type") == "RC":
            found = True
            for k in keys:
                tot[k] += q["counters"][k]
if found:
    print(*(tot[k] for k in keys))
EOF
}

# the transfer has begun when the client's QP has sent packets; the
# snapshot is taken ~1.5 s later, in the middle of the -D run
t_start=""
deadline=$((SECONDS + 25))
while [ "$SECONDS" -lt "$deadline" ] && kill -0 "$cpid" 2>/dev/null; do
	stat_json "$SV_WORK/poll.json" || sv_fail "softverbs stat --json failed: $(cat "$SV_WORK/stat.err")"
	read -r tx _ <<<"$(counters "$SV_WORK/poll.json" "$ino_b")" || true
	if [ -n "${tx:-}" ] && [ "$tx" -gt 0 ]; then
		t_start=$(date +%s.%N)
		break
	fi
	sleep 0.1
done
[ -n "$t_start" ] || sv_fail "the client's QP sent nothing (no transfer began)"
sleep 1.5
stat_json "$SV_WORK/snap.json" || sv_fail "softverbs stat --json failed: $(cat "$SV_WORK/stat.err")"
kill -0 "$cpid" 2>/dev/null || sv_fail "the client ended before the snapshot (-D $secs)"
read -r s_tx s_ecn s_cnp_sent _ <<<"$(counters "$SV_WORK/snap.json" "$ino_a")" || true
read -r c_tx _ _ c_cnp_rcvd <<<"$(counters "$SV_WORK/snap.json" "$ino_b")" || true
[ -n "${s_tx:-}" ] || sv_fail "snapshot: no RC QP of ib_write_bw in namespace $SV_NS_A (inode $ino_a)"
[ -n "${c_tx:-}" ] || sv_fail "snapshot: no RC QP of ib_write_bw in namespace $SV_NS_B (inode $ino_b)"
sv_log "snapshot ~1.5 s in: server QP ecn_marked_packets $s_ecn cnp_sent $s_cnp_sent" \
	"(tx_packets $s_tx); client QP cnp_received $c_cnp_rcvd (tx_packets $c_tx)"

# both exit 0
sv_wait_both "$cpid" "$spid"

[ "$s_ecn" -gt 0 ] || sv_fail "the server's QP saw no CE-marked packet (ecn_marked_packets 0)"
[ "$s_cnp_sent" -gt 0 ] || sv_fail "the server's QP sent no CNP ($s_ecn CE-marked packets)"
[ "$s_cnp_sent" -le "$s_ecn" ] ||
	sv_fail "the server's QP sent $s_cnp_sent CNPs for $s_ecn CE-marked packets"
[ "$c_cnp_rcvd" -gt 0 ] || sv_fail "the client's QP received no CNP (the server sent $s_cnp_sent)"

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
	"sent, $c_cnp_rcvd received (at ~1.5 s)"
