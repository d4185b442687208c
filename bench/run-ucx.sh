#!/usr/bin/env bash
# bench/run-ucx.sh: UCX over softverbs next to UCX over its own transports,
# between two processes of this host, in one sitting.
#
#   bench/run-ucx.sh             # REPEAT=3 runs per point, median reported
#   QUICK=1 bench/run-ucx.sh     # one short run per point
#
# The same ucx_perftest tests, back to back for each configuration:
#   sv-rc    UCX_TLS=rc_verbs,ud_verbs on sv_lo:1 under `softverbs run`
#            (softverbs' default transport: shared memory between the two)
#   sv-tcp   the same with SOFTVERBS_TRANSPORT=tcp
#   ucx-shm  UCX_TLS=posix,cma,self (UCX's shared memory)
#   ucx-tcp  UCX_TLS=tcp over lo (UCX's own TCP transport)
# Tests: tag_lat 8 B (median latency, us), tag_bw 64 KiB and 1 MiB (MB/s),
# ucp_put_bw 1 MiB (MB/s), ucp_get 1 MiB (MB/s).  The table gives each
# figure and softverbs' ratio to each UCX transport (latency: how many times
# longer; bandwidth: what fraction).  Written to $RESULTS/ucx-table.txt
# (default bench/results), raw outputs in $RESULTS/logs-ucx/.
set -euo pipefail
# the runs on one host use the loopback device, which a host with another
# interface shows only when asked (src/verbs/device.c)
export SOFTVERBS_LOOPBACK=${SOFTVERBS_LOOPBACK:-1}

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
SV_TOOL=${SV_TOOL:-$ROOT/build/bin/softverbs}
RESULTS=${RESULTS:-$BENCH_DIR/results}
LOGS=$RESULTS/logs-ucx
QUICK=${QUICK:-0}
REPEAT=${REPEAT:-3}
[ "$QUICK" = 1 ] && REPEAT=1
mkdir -p "$LOGS"
command -v ucx_perftest >/dev/null || { echo "ucx_perftest not installed (ucx-utils)"; exit 1; }
[ -x "$SV_TOOL" ] || { echo "build first: make"; exit 1; }

# name|test|size|iterations|metric (lat: 50th percentile us; bw: MB/s average)
TESTS=(
	"tag_lat 8 B|tag_lat|8|20000|lat"
	"tag_bw 64 KiB|tag_bw|65536|2000|bw"
	"tag_bw 1 MiB|tag_bw|1048576|300|bw"
	"ucp_put_bw 1 MiB|ucp_put_bw|1048576|300|bw"
	"ucp_get 1 MiB|ucp_get|1048576|300|bw"
)
CONFIGS=(sv-rc sv-tcp ucx-shm ucx-tcp)
port=$((21000 + RANDOM % 9000)) # below the ephemeral port range (32768 up)

# one_run CONFIG TEST SIZE ITERS LOG: server and client, client output in LOG
one_run() {
	local cfg=$1 test=$2 size=$3 iters=$4 log=$5 run=()
	local env=(env UCX_WARN_UNUSED_ENV_VARS=n)
	case $cfg in
	sv-rc) env+=(UCX_TLS=rc_verbs,ud_verbs UCX_NET_DEVICES=sv_lo:1); run=("$SV_TOOL" run --) ;;
	sv-tcp) env+=(UCX_TLS=rc_verbs,ud_verbs UCX_NET_DEVICES=sv_lo:1 SOFTVERBS_TRANSPORT=tcp)
		run=("$SV_TOOL" run --) ;;
	ucx-shm) env+=(UCX_TLS=posix,cma,self) ;;
	ucx-tcp) env+=(UCX_TLS=tcp UCX_NET_DEVICES=lo) ;;
	esac
	port=$((port + 1))
	"${env[@]}" timeout 120 "${run[@]}" ucx_perftest -p "$port" >"$log.server" 2>&1 &
	local spid=$!
	sleep 0.3
	"${env[@]}" timeout 120 "${run[@]}" ucx_perftest 127.0.0.1 -p "$port" -t "$test" \
		-s "$size" -n "$iters" -w $((iters / 10)) -f >"$log" 2>&1 || true
	wait "$spid" || true
}

# figure LOG METRIC: from the final line (-f: "iterations p50 avg overall
# bw_avg bw_overall ..."); lat = 50th percentile (us), bw = average MB/s
figure() {
	awk -v m="$2" '$1 ~ /^[0-9]+$/ && NF >= 7 { v = (m == "lat" ? $2 : $5) } END { print v }' "$1"
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }

declare -A VAL
echo "UCX over softverbs vs UCX's own transports, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"
for t in "${TESTS[@]}"; do
	IFS='|' read -r name test size iters metric <<<"$t"
	[ "$QUICK" = 1 ] && iters=$((iters / 4))
	for cfg in "${CONFIGS[@]}"; do
		vals=()
		for r in $(seq "$REPEAT"); do
			log="$LOGS/${cfg}_${test}_${size}_$r.log"
			one_run "$cfg" "$test" "$size" "$iters" "$log"
			v=$(figure "$log" "$metric")
			[ -n "$v" ] && vals+=("$v")
		done
		VAL[$name,$cfg]=$(printf '%s\n' "${vals[@]:-}" | grep . | median || true)
	done
done

ratio() { # softverbs figure vs peer figure, as the table says
	awk -v a="$1" -v b="$2" -v m="$3" 'BEGIN {
		if (a == "" || b == "" || b + 0 == 0) { print "-"; exit }
		printf("%.2fx\n", m == "lat" ? a / b : a / b) }'
}

{
	printf '| test | unit | sv-rc | sv-tcp | ucx-shm | ucx-tcp | sv-rc / ucx-shm | sv-rc / ucx-tcp | sv-tcp / ucx-tcp |\n'
	printf '|---|---|---|---|---|---|---|---|---|\n'
	for t in "${TESTS[@]}"; do
		IFS='|' read -r name test size iters metric <<<"$t"
		unit=MB/s
		[ "$metric" = lat ] && unit=us
		printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$name" "$unit" \
			"${VAL[$name,sv-rc]:--}" "${VAL[$name,sv-tcp]:--}" \
			"${VAL[$name,ucx-shm]:--}" "${VAL[$name,ucx-tcp]:--}" \
			"$(ratio "${VAL[$name,sv-rc]:-}" "${VAL[$name,ucx-shm]:-}" "$metric")" \
			"$(ratio "${VAL[$name,sv-rc]:-}" "${VAL[$name,ucx-tcp]:-}" "$metric")" \
			"$(ratio "${VAL[$name,sv-tcp]:-}" "${VAL[$name,ucx-tcp]:-}" "$metric")"
	done
	echo
	echo "Ratios: latency = softverbs / UCX (above 1 is slower); bandwidth = softverbs / UCX (below 1 is slower)."
} | tee "$RESULTS/ucx-table.txt"
