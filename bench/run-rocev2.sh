#!/usr/bin/env bash
# bench/run-rocev2.sh: softverbs' rocev2 transport next to its tcp transport
# and to TCP itself (qperf), with and without 1 % packet loss.
#
#   bench/run-rocev2.sh          # ~2 minutes here (PATHS="lo veth veth6": which;
#                                # LOSSES="0 1": the loss rates, %)
#
# Three paths, each inside network namespaces of its own so that loss can be
# put on them without touching the host (netem; where the kernel has no
# sch_netem, softverbs' SOFTVERBS_FAULTS instead, and no qperf row): "lo", the loopback interface of one
# fresh namespace (both peers in it), and "veth", two namespaces joined by a
# veth pair (MTU 1500, so RoCEv2's path MTU is 1024), and "veth6", the same
# veth with IPv6 addresses, where rocev2 runs on the IPv6 GID (index 5:
# every datagram IPv6) and qperf on the IPv6 address (the tcp transport is
# IPv4 only: the same as on veth).  Loss is netem's
# (`tc qdisc ... netem loss 1%`) on every interface of the path, so all three
# see the same network: for softverbs RC it means go-back-N retransmission
# (rocev2) or TCP's own recovery under softverbs' stream (tcp).
#
# Measured, each on the same path back to back:
#   softverbs rocev2 and tcp: ib_write_bw 1 MiB (MB/s, average of the run),
#     ib_send_lat 8 B (median, us)
#   qperf: tcp_bw with 1 MiB messages (MB/s), tcp_lat 8 B (us)
# Writes $RESULTS/rocev2.csv and table.txt (default bench/results/rocev2),
# the programs' output under $RESULTS/logs.  Needs root (namespaces, netem).
set -uo pipefail
# the runs on one host use the loopback device, which a host with another
# interface shows only when asked (src/verbs/device.c)
export SOFTVERBS_LOOPBACK=${SOFTVERBS_LOOPBACK:-1}

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
SV_TOOL=${SV_TOOL:-$ROOT/build/bin/softverbs}
RESULTS=${RESULTS:-$BENCH_DIR/results/rocev2}
LOGS=$RESULTS/logs
BW_ITERS=${BW_ITERS:-300}
LAT_ITERS=${LAT_ITERS:-3000}
mkdir -p "$LOGS"
[ "$(id -u)" = 0 ] || { echo "run-rocev2: needs root (namespaces, netem)" >&2; exit 1; }
for p in ib_write_bw ib_send_lat qperf tc; do
	command -v "$p" >/dev/null || { echo "run-rocev2: $p not installed" >&2; exit 1; }
done

NS_A=svb-rocev2-a NS_B=svb-rocev2-b
cleanup() {
	ip netns pids "$NS_A" 2>/dev/null | xargs -r kill 2>/dev/null
	ip netns pids "$NS_B" 2>/dev/null | xargs -r kill 2>/dev/null
	ip netns del "$NS_A" 2>/dev/null
	ip netns del "$NS_B" 2>/dev/null
}
trap cleanup EXIT

# path lo|veth|veth6: sets SRV_NS CLI_NS SRV_IP DEV_S DEV_C IFACES, ROCE_GID
# (rocev2's GID index) and QPERF_IP
setup_path() {
	cleanup
	ip netns add "$NS_A"
	ip -n "$NS_A" link set lo up
	ROCE_GID=3
	if [ "$1" = lo ]; then
		SRV_NS=$NS_A CLI_NS=$NS_A SRV_IP=127.0.0.1 DEV_S=sv_lo DEV_C=sv_lo
		IFACES=("$NS_A lo")
		QPERF_IP=$SRV_IP
	else
		ip netns add "$NS_B"
		ip -n "$NS_B" link set lo up
		ip -n "$NS_A" link add sva type veth peer name svb netns "$NS_B"
		ip -n "$NS_A" addr add 10.214.0.1/24 dev sva
		ip -n "$NS_B" addr add 10.214.0.2/24 dev svb
		QPERF_IP=10.214.0.1
		if [ "$1" = veth6 ]; then
			ip -n "$NS_A" -6 addr add fd00:5356:214::1/64 dev sva nodad
			ip -n "$NS_B" -6 addr add fd00:5356:214::2/64 dev svb nodad
			ROCE_GID=5 QPERF_IP=fd00:5356:214::1
		fi
		ip -n "$NS_A" link set sva up
		ip -n "$NS_B" link set svb up
		sleep 1
		SRV_NS=$NS_A CLI_NS=$NS_B SRV_IP=10.214.0.1 DEV_S=sv_sva DEV_C=sv_svb
		IFACES=("$NS_A sva" "$NS_B svb")
	fi
}

# Loss: netem where the kernel has it (sch_netem); otherwise softverbs'
# own fault injection drops 1 % of each side's packets (SOFTVERBS_FAULTS)
# and qperf, which nothing can make lose packets then, is not measured.
FAULTS=
NETEM=1
set_loss() { # percent
	local i ns dev
	FAULTS=
	for i in "${IFACES[@]}"; do
		read -r ns dev <<<"$i"
		ip netns exec "$ns" tc qdisc del dev "$dev" root 2>/dev/null
		[ "$1" = 0 ] && continue
		if ! ip netns exec "$ns" tc qdisc add dev "$dev" root netem loss "$1%" 2>/dev/null; then
			NETEM=0
			FAULTS="SOFTVERBS_FAULTS=drop=0.0$1,seed=3"
		fi
	done
}

port=23000
# pair NAME SERVER_CMD... :: CLIENT_CMD...: run both, client output in logs/NAME
pair() {
	local name=$1
	shift
	local srv=() cli=()
	while [ "$1" != :: ]; do srv+=("$1"); shift; done
	shift
	cli=("$@")
	ip netns exec "$SRV_NS" timeout 120 "${srv[@]}" >"$LOGS/$name.server" 2>&1 &
	local s=$!
	sleep 1
	ip netns exec "$CLI_NS" timeout 120 "${cli[@]}" >"$LOGS/$name" 2>&1
	# perftest's server ends with its client; qperf's would listen on
	# until its timeout
	for _ in 1 2 3 4 5 6; do kill -0 "$s" 2>/dev/null || break; sleep 0.5; done
	kill "$s" 2>/dev/null
	wait "$s" 2>/dev/null
}

# sv_perftest TRANSPORT PROG SIZE ITERS COLUMN: softverbs over TRANSPORT, PROG
# between the two sides; prints column COLUMN of its result row for SIZE
sv_perftest() {
	local tr=$1 prog=$2 size=$3 iters=$4 col=$5 g=3
	local n="$PATH_NAME.loss$LOSS.$tr.${prog#ib_}" run=(env $FAULTS SOFTVERBS_TRANSPORT="$tr" "$SV_TOOL" run --)
	[ "$tr" = rocev2 ] && g=$ROCE_GID
	port=$((port + 1))
	pair "$n" "${run[@]}" "$prog" -d "$DEV_S" -x $g -s "$size" -n "$iters" -F -p $port :: \
		"${run[@]}" "$prog" -d "$DEV_C" -x $g -s "$size" -n "$iters" -F -p $port "$SRV_IP"
	awk -v s="$size" -v c="$col" '$1 == s && NF >= c { v = $c } END { print v ? v : "-" }' "$LOGS/$n"
}
sv_bw() { sv_perftest "$1" ib_write_bw 1048576 "$BW_ITERS" 4; }  # transport -> MB/s
sv_lat() { sv_perftest "$1" ib_send_lat 8 "$LAT_ITERS" 5; }       # transport -> median us

qperf_run() { # test -> value (MB/s or us)
	port=$((port + 1))
	if [ -n "$FAULTS" ]; then
		echo "-"
		return
	fi
	local n="$PATH_NAME.loss$LOSS.qperf.$1"
	local args=(-t 3)
	[ "$1" = tcp_bw ] && args+=(-m 1M) || args+=(-m 8)
	pair "$n" qperf -lp $port :: qperf -lp $port "$QPERF_IP" "${args[@]}" "$1"
	awk -v t="$1" '
		t == "tcp_bw" && $1 == "bw" { v = $3; u = $4 }
		t == "tcp_lat" && $1 == "latency" { v = $3; u = $4 }
		END {
			if (!v) { print "-"; exit }
			if (u ~ /^GB/) v *= 1000; else if (u ~ /^KB/) v /= 1000
			if (u == "ms") v *= 1000; else if (u == "ns") v /= 1000
			print v
		}' "$LOGS/$n"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }

CSV=$RESULTS/rocev2.csv
TABLE=$RESULTS/table.txt
echo "path,loss_pct,rocev2_bw_MBps,tcp_bw_MBps,qperf_bw_MBps,rocev2_lat_us,tcp_lat_us,qperf_lat_us" >"$CSV"
{
	echo "# softverbs rocev2 vs tcp transport vs qperf TCP ($(date -u +%F), $(git -C "$ROOT" rev-parse --short HEAD))"
	printf '%-6s %-5s | %9s %9s %9s %7s %7s | %8s %8s %8s %7s %7s\n' path loss \
		"rocev2" "tcp" "qperf" "r/tcp" "r/qperf" "rocev2" "tcp" "qperf" "r/tcp" "r/qperf"
	printf '%-6s %-5s | %9s %9s %9s %7s %7s | %8s %8s %8s %7s %7s\n' "" "" \
		"MB/s" "MB/s" "MB/s" "" "" "us" "us" "us" "" ""
} | tee "$TABLE"
for PATH_NAME in ${PATHS:-lo veth veth6}; do
	setup_path "$PATH_NAME"
	for LOSS in ${LOSSES:-0 1}; do
		set_loss "$LOSS"
		rbw=$(sv_bw rocev2) tbw=$(sv_bw tcp) qbw=$(qperf_run tcp_bw)
		rlat=$(sv_lat rocev2) tlat=$(sv_lat tcp) qlat=$(qperf_run tcp_lat)
		echo "$PATH_NAME,$LOSS,$rbw,$tbw,$qbw,$rlat,$tlat,$qlat" >>"$CSV"
		printf '%-6s %-5s | %9s %9s %9s %7s %7s | %8s %8s %8s %7s %7s\n' "$PATH_NAME" "$LOSS%" \
			"$rbw" "$tbw" "$qbw" "$(ratio "$rbw" "$tbw")" "$(ratio "$rbw" "$qbw")" \
			"$rlat" "$tlat" "$qlat" "$(ratio "$rlat" "$tlat")" "$(ratio "$rlat" "$qlat")" | tee -a "$TABLE"
	done
done
echo "(bandwidth ratios: higher is better for rocev2; latency ratios: lower is better)" | tee -a "$TABLE"
[ "$NETEM" = 1 ] || echo "(no netem in this kernel: the 1 % rows are SOFTVERBS_FAULTS drop=0.01 on each softverbs side; qperf not measured there)" | tee -a "$TABLE"
