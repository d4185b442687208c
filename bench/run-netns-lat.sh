#!/usr/bin/env bash
# bench/run-netns-lat.sh: small-message latency of middleware over softverbs
# against the same middleware over its own TCP transport, between two
# network namespaces joined by a veth pair, in one sitting.
#
#   bench/run-netns-lat.sh            # REPEAT=5 rounds, medians reported
#   QUICK=1 bench/run-netns-lat.sh    # one short round
#   LOAD=N bench/run-netns-lat.sh     # N busy loops beside every measurement
#
# Each round runs, back to back, every pair below (8 B messages):
#   UCX    ucx_perftest tag_lat: UCX_TLS=rc_verbs,ud_verbs on the softverbs
#          device under `softverbs run`  vs  UCX_TLS=tcp on the veth
#          (typical latency, us: UCX's median)
#   OFI    fi_pingpong rdm: "verbs;ofi_rxm" on the softverbs device under
#          `softverbs run`  vs  "tcp;ofi_rxm" (usec/xfer)
#   qperf  rc_lat (softverbs)  vs  tcp_lat (mean one-way latency, us)
# softverbs runs with its defaults (tcp between namespaces).  The table
# gives each figure's median over the rounds and softverbs' ratio (how many
# times longer), with the targets of issue 36 for UCX (<= 1.5x) and OFI
# (<= 2x).  Needs root (namespaces).  Written to $RESULTS/netns-lat.txt
# (default bench/results), raw outputs in $RESULTS/logs-netns-lat/.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$BENCH_DIR") # (lib.sh)
export ROOT
# shellcheck source=bench/lib.sh disable=SC1091
. "$BENCH_DIR/lib.sh"

RESULTS=${RESULTS:-$BENCH_DIR/results}
LOGS=$RESULTS/logs-netns-lat
QUICK=${QUICK:-0}
REPEAT=${REPEAT:-5}
LOAD=${LOAD:-0}
ITERS=${ITERS:-20000}
if [ "$QUICK" = 1 ]; then
	REPEAT=1
	ITERS=5000
fi
mkdir -p "$LOGS"
[ "$(id -u)" = 0 ] || die "network namespaces need root"
need_cmds "ucx_perftest fi_pingpong qperf" "ucx_perftest fi_pingpong qperf"
build_softverbs

A="svl-a-$$" B="svl-b-$$"
ip netns add "$A" && NETNS+=("$A")
ip netns add "$B" && NETNS+=("$B")
# one name at both ends, as two hosts' NICs often have: UCX hands its
# device name to the peer
ip -n "$A" link add svl type veth peer name svl netns "$B"
ip -n "$A" addr add 10.214.0.1/24 dev svl
ip -n "$B" addr add 10.214.0.2/24 dev svl
for ns in "$A" "$B"; do
	ip -n "$ns" link set lo up
	ip -n "$ns" link set svl up
done
deadline=$((SECONDS + 5))
until ip -n "$A" link show svl | grep -q LOWER_UP && ip -n "$B" link show svl | grep -q LOWER_UP; do
	[ "$SECONDS" -lt "$deadline" ] || die "veth pair did not come up"
	sleep 0.05
done
HOST=10.214.0.1 DEV=sv_svl
[ "$LOAD" -gt 0 ] && start_load "$LOAD"

port=$((22000 + RANDOM % 8000))
declare -A V # V[name] = "value value ..."

# pair NAME LOG SERVER_CMD... :: CLIENT_CMD...: the server in namespace A,
# then the client in B (the server's address appended by the caller); the
# client's output in LOG.  0 when both exit 0.
pair() {
	local name=$1 log=$2; shift 2
	local srv=() cli=()
	while [ "$1" != :: ]; do srv+=("$1"); shift; done
	shift
	cli=("$@")
	start_bg 120 "$A" "$log.server" "${srv[@]}"
	local spid=$BG_PID rc=0 src=0
	sleep 0.5
	run_fg 120 "$B" "$log" "${cli[@]}" || rc=$?
	wait_pid "$spid" 20 || src=$?
	[ "$rc" != 0 ] || rc=$src
	[ "$rc" = 0 ] || warn "$name: exit $rc (see $log)"
	return 0
}

add() { V[$1]="${V[$1]:-} ${2:-NaN}"; }

SV=("$SV_TOOL" run --)
# shellcheck disable=SC2054 # the commas are UCX_TLS's
UCX_SV=(env UCX_WARN_UNUSED_ENV_VARS=n UCX_TLS=rc_verbs,ud_verbs "UCX_NET_DEVICES=$DEV:1")
UCX_TCP=(env UCX_WARN_UNUSED_ENV_VARS=n UCX_TLS=tcp UCX_NET_DEVICES=svl)

round() {
	local r=$1 log
	# UCX tag_lat: the "Final:" line's second column is the typical latency
	log=$LOGS/ucx-sv.r$r
	port=$((port + 1))
	pair ucx-sv "$log" "${UCX_SV[@]}" "${SV[@]}" ucx_perftest -p "$port" :: \
		"${UCX_SV[@]}" "${SV[@]}" ucx_perftest "$HOST" -p "$port" -t tag_lat -s 8 -n "$ITERS"
	add ucx-sv "$(awk '/^Final:/ { print $3 }' "$log")"
	log=$LOGS/ucx-tcp.r$r
	port=$((port + 1))
	pair ucx-tcp "$log" "${UCX_TCP[@]}" ucx_perftest -p "$port" :: \
		"${UCX_TCP[@]}" ucx_perftest "$HOST" -p "$port" -t tag_lat -s 8 -n "$ITERS"
	add ucx-tcp "$(awk '/^Final:/ { print $3 }' "$log")"
	# fi_pingpong: the row of size 8, usec/xfer (7th column)
	local fi_n=$((ITERS / 4))
	log=$LOGS/ofi-sv.r$r
	port=$((port + 1))
	pair ofi-sv "$log" "${SV[@]}" fi_pingpong -p "verbs;ofi_rxm" -e rdm -d "$DEV" -I "$fi_n" -S 8 -B "$port" :: \
		"${SV[@]}" fi_pingpong -p "verbs;ofi_rxm" -e rdm -d "$DEV" -I "$fi_n" -S 8 -P "$port" "$HOST"
	add ofi-sv "$(awk '$1 == 8 { print $7 }' "$log")"
	log=$LOGS/ofi-tcp.r$r
	port=$((port + 1))
	pair ofi-tcp "$log" fi_pingpong -p "tcp;ofi_rxm" -e rdm -I "$fi_n" -S 8 -B "$port" :: \
		fi_pingpong -p "tcp;ofi_rxm" -e rdm -I "$fi_n" -S 8 -P "$port" "$HOST"
	add ofi-tcp "$(awk '$1 == 8 { print $7 }' "$log")"
	# qperf: one server for both tests; "latency = X us" (ms: times 1000)
	port=$((port + 1))
	start_bg 120 "$A" "$LOGS/qperf-server.r$r" "${SV[@]}" qperf -lp "$port"
	local qpid=$BG_PID t
	sleep 0.5
	for t in rc_lat tcp_lat; do
		log=$LOGS/qperf-$t.r$r
		run_fg 60 "$B" "$log" "${SV[@]}" qperf -lp "$port" -cm1 -m 8 -t "$([ "$QUICK" = 1 ] && echo 2 || echo 5)" "$HOST" "$t" ||
			warn "qperf $t: failed (see $log)"
		add "qperf-$t" "$(awk '/latency/ { v = $3; if ($4 == "ms") v *= 1000; if ($4 == "ns") v /= 1000; print v }' "$log")"
	done
	kill -TERM -- "-$qpid" 2>/dev/null || true
	wait "$qpid" 2>/dev/null || true
}

T0=$SECONDS
for r in $(seq 1 "$REPEAT"); do
	log "round $r of $REPEAT"
	round "$r"
done

# shellcheck disable=SC2086 # word splitting wanted: the values
m() { median ${V[$1]}; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "NaN" || b == "NaN" || b == 0) print "-"; else printf "%.2f", a / b }'; }
verdict() { awk -v r="$1" -v t="$2" 'BEGIN { if (r == "-") print "not measured"; else print (r <= t ? "MET" : "MISSED") }'; }
TABLE=$RESULTS/netns-lat.txt
{
	run_info
	echo "two namespaces over veth; 8 B; medians of $REPEAT round(s); LOAD=$LOAD busy loops"
	printf '%-22s %12s %12s %7s %8s  %s\n' measure softverbs peer ratio target verdict
	u=$(ratio "$(m ucx-sv)" "$(m ucx-tcp)")
	printf '%-22s %12s %12s %7s %8s  %s\n' "UCX tag_lat (us)" "$(m ucx-sv)" "$(m ucx-tcp)" "$u" "<= 1.5" "$(verdict "$u" 1.5)"
	o=$(ratio "$(m ofi-sv)" "$(m ofi-tcp)")
	printf '%-22s %12s %12s %7s %8s  %s\n' "fi_pingpong rdm (us)" "$(m ofi-sv)" "$(m ofi-tcp)" "$o" "<= 2" "$(verdict "$o" 2)"
	q=$(ratio "$(m qperf-rc_lat)" "$(m qperf-tcp_lat)")
	printf '%-22s %12s %12s %7s %8s  %s\n' "qperf rc/tcp_lat (us)" "$(m qperf-rc_lat)" "$(m qperf-tcp_lat)" "$q" "-" "-"
	echo "rows: softverbs = UCX rc_verbs / verbs;ofi_rxm / qperf rc_lat over softverbs (tcp); peer = UCX tcp / tcp;ofi_rxm / qperf tcp_lat"
	for k in ucx-sv ucx-tcp ofi-sv ofi-tcp qperf-rc_lat qperf-tcp_lat; do
		echo "  $k:${V[$k]:-}"
	done
} | tee "$TABLE"
log "results: $TABLE; raw output in $LOGS/ ($((SECONDS - T0)) s)"
