#!/usr/bin/env bash
# bench/run-shm.sh: softverbs between two processes of one host, next to UCX
# over shared memory and to memcpy itself.
#
#   bench/run-shm.sh            # full sweep, 8 B .. 4 MiB in x2 steps
#   QUICK=1 bench/run-shm.sh    # smoke run: 8, 64, 512 B, 4, 64 KiB, 1, 4 MiB
#
# For each message size, back to back so that all see the same background
# load (the machine is shared), it measures:
#   - softverbs with Debian's unmodified perftest, server and client two
#     processes on this host talking through 127.0.0.1 (device sv_lo):
#     ib_write_bw (bandwidth and message rate), ib_write_lat, ib_send_lat,
#     and (default transport only) ib_read_bw, ib_read_lat, ib_atomic_lat
#     (8 B only);
#     twice: with softverbs' default transport selection (SOFTVERBS_TRANSPORT
#     unset, i.e. "auto": shared memory between processes of one host) and
#     with SOFTVERBS_TRANSPORT=tcp, so that the table shows one against the
#     other;
#   - UCX, the intra-host reference of the brief (section 7): ucx_perftest
#     with UCX_TLS=posix,cma,self: ucp_put_bw (bandwidth, message rate),
#     ucp_put_lat, ucp_am_lat;
#   - memcpy: bench/memcpy_bw.c (softverbs-bench-memcpy), the ceiling of any
#     copy between two buffers of one process.
# It prints a table with the ratios and the brief's intra-host targets, and
# writes under $RESULTS (default bench/results/): shm.csv, shm-raw.csv,
# shm-run-info.txt, shm-table.txt, shm.png and logs-shm/ with every program's
# raw output.  docs/PERFORMANCE.md ("Intra-host") explains the columns.
#
# Environment:
#   QUICK=1          short smoke run (7 sizes, short runs, no repeats)
#   SIZES="8 1048576"  message sizes in bytes (overrides the default sweep)
#   RESULTS=DIR      where results go
#   SV_TOOL=PATH     the softverbs tool (default: build/bin/softverbs, built
#                    with `make` first, which also builds the memcpy program)
#   BW_SECS=S        seconds per perftest bandwidth run (perftest -D; default
#                    1); BW_SECS= (empty) moves a fixed amount instead
#                    (BW_BYTES: 64 MiB with QUICK=1, 64 messages of 1 MiB,
#                    which is mostly the connection's start)
#   REPEAT=N         runs at the target sizes (8 B, 1 MiB), median reported;
#                    default 3 (1 with QUICK=1)
#   BENCH_DEADLINE=S seconds after which remaining measurements are skipped
#   UCX_TLS=LIST     UCX transports for ucx_perftest (default posix,cma,self)
#   LINE_BENCH=PATH  the cache-line probe (default: softverbs-bench-line beside
#                    SV_TOOL), run before and after the measurements
#   REPORT_ONLY=1    measure nothing: re-print the table and re-draw the plot
#                    from an existing shm.csv
#
# Exit status: 0 when every measurement produced a number, 1 otherwise (what
# was measured is still written).  A target MISS is a finding, not a failure.
# The per-size functions are called through each_point (bench/lib.sh),
# which shellcheck cannot follow.
# shellcheck disable=SC2317
set -euo pipefail
# the runs on one host use the loopback device, which a host with another
# interface shows only when asked (src/verbs/device.c)
export SOFTVERBS_LOOPBACK=${SOFTVERBS_LOOPBACK:-1}

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
QUICK=${QUICK:-0}
RESULTS=${RESULTS:-$BENCH_DIR/results}
# Own file names, so that run-tcp.sh's results in the same folder stay.
LOGS=$RESULTS/logs-shm
CSV=$RESULTS/shm.csv
RAW_CSV=$RESULTS/shm-raw.csv
TABLE=$RESULTS/shm-table.txt
PNG=$RESULTS/shm.png
INFO=$RESULTS/shm-run-info.txt

MiB=1048576
if [ "$QUICK" = 1 ]; then
	SIZES=${SIZES:-8 64 512 4096 65536 1048576 4194304}
	BW_BYTES=$((64 * MiB))    # bytes per bandwidth point (sets -n)
	LAT_BYTES=$((16 * MiB))   # bytes per latency point (sets -n)
	LAT_MAX_ITERS=1000
	MEMCPY_SECS=0.5           # per size and memcpy mode
	DEADLINE=${BENCH_DEADLINE:-400}
else
	SIZES=${SIZES:-$(s=8; while [ "$s" -le $((4 * MiB)) ]; do printf '%s ' "$s"; s=$((s * 2)); done)}
	# 2 GiB: a large-message point then lasts about half a second, so
	# start-up and the first ring wrap do not dominate it
	BW_BYTES=$((2048 * MiB))
	LAT_BYTES=$((64 * MiB))
	LAT_MAX_ITERS=2000
	MEMCPY_SECS=1
	DEADLINE=${BENCH_DEADLINE:-1500}
fi
# perftest's message-rate figure at 8 B needs more than run-tcp.sh's 5000
# messages once the transport is fast: at UCX's rate 5000 messages last a
# millisecond.  Over TCP 20000 8-byte messages still take well under a second.
BW_MAX_ITERS=$([ "$QUICK" = 1 ] && echo 20000 || echo 50000)
# Bandwidth runs last a time, not an amount: with QUICK's 64 MiB a 1 MiB
# point was 64 messages, mostly the first touch of the buffers, set against
# UCX's four times as many bytes after a warm-up.  perftest -D measures
# after a warm-up of its own.  BW_SECS= (empty) goes back to BW_BYTES.
BW_SECS=${BW_SECS-1}
TARGET_SIZES="8 1048576"   # the sizes the brief's intra-host targets name
REPEAT=${REPEAT:-$([ "$QUICK" = 1 ] && echo 1 || echo 3)}
PT_TIMEOUT=20       # one perftest / ucx_perftest process
PT_PORT=23500       # out-of-band ports from here (take_pt_port)
# UCX's intra-host transports, as the brief names them: posix shared memory,
# cma (process_vm_readv/writev, one copy), self (a process to itself).  With
# UCX 1.13 the RMA lane UCX picks from these is posix/memory: ucp_put stores
# straight into the peer's mapped segment.  A UCX_TLS in the environment is
# used instead (UCX_TLS=cma,self alone does not work: no active-message lane).
UCX_TLS_SET=${UCX_TLS:-posix,cma,self}

# State, cleanup trap and the helpers shared with run-tcp.sh.
# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"

# "auto" must be the default selection, not whatever the caller's shell has.
unset SOFTVERBS_TRANSPORT

# ---------------------------------------------------------------- setup ---

# install-deps.sh knows perftest and the build tools; ucx-utils has
# ucx_perftest, gnuplot-nox (no X11) draws the plot.
EXTRA_PKGS=(ucx-utils gnuplot-nox)
need_cmds "ib_write_bw ib_write_lat ib_send_lat ucx_perftest ss timeout gnuplot make" \
	"ib_write_bw ib_write_lat ib_send_lat ucx_perftest ss timeout"
build_softverbs
MEMCPY_BW=${MEMCPY_BW:-$(dirname "$SV_TOOL")/softverbs-bench-memcpy}
LINE_BENCH=${LINE_BENCH:-$(dirname "$SV_TOOL")/softverbs-bench-line}

mkdir -p "$RESULTS"
if [ "${REPORT_ONLY:-0}" != 1 ]; then
	rm -rf "$LOGS"   # the logs of one run only
fi
mkdir -p "$LOGS"

# Both processes on this host, in this namespace, through loopback.
SRV_NS="" CLI_NS="" SRV_DEV=sv_lo CLI_DEV=sv_lo SRV_HOST=127.0.0.1

# ------------------------------------------------------------- helpers ---

# ucx_iters SIZE BYTES MAX: iterations for ucx_perftest.  UCX moves small
# messages 10-100x faster than perftest over TCP, so it gets 4x the byte
# budget BYTES and a much higher cap MAX; at least 100 so that large sizes
# still average over several.
ucx_iters() {
	local n=$((4 * $2 / $1))
	[ "$n" -gt "$3" ] && n=$3
	[ "$n" -lt 100 ] && n=100
	echo "$n"
}

# ucx_run TEST SIZE ITERS: one ucx_perftest run, its server (no host: it
# takes the test's parameters from the client) and client on 127.0.0.1.  -v
# prints one CSV line of final results; -w warm-up iterations are a tenth of
# the run (the default, 10000, would move 40 GiB at 4 MiB).  Sets UCX_OUT.
ucx_run() {
	local test=$1 size=$2 iters=$3 warm base="$LOGS/ucx-$1-$2$TAG"
	UCX_OUT=$base.client.txt
	warm=$((iters / 10))
	[ "$warm" -lt 10 ] && warm=10
	take_pt_port
	SRV_CMD=(env "UCX_TLS=$UCX_TLS_SET" ucx_perftest -p "$PORT")
	CLI_CMD=(env "UCX_TLS=$UCX_TLS_SET" ucx_perftest "$SRV_HOST" -p "$PORT"
		-t "$test" -s "$size" -n "$iters" -w "$warm" -v)
	pair_run "ucx $test $size" "$base" "$PORT" "[Cc]onnection refused|connect\(\) failed"
}

# ucx_value FILE COLUMN: the column named COLUMN of the CSV result line that
# follows ucx_perftest -v's header line ("iterations,50.0_percentile_lat,
# avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr").
ucx_value() {
	awk -F, -v col="$2" '
		$1 == "iterations" { idx = 0; for (i = 1; i <= NF; i++) if ($i == col) idx = i; next }
		idx > 0 && $1 ~ /^ *[0-9]+$/ && $idx ~ /^[0-9.]+$/ { v = $idx }
		END { if (v != "") print v }
	' "$1"
}

# ucx_point KEY TEST SIZE KIND: ucx_perftest TEST at SIZE; KIND bw records
# KEY's <col>_MBps (overall_bw: MB = 2^20 bytes in ucx_perftest, as in
# perftest, so x 1.048576) and <col>_Mmsgs (overall_mr / 10^6); KIND lat
# records <col>_typical_us (the median, "50.0_percentile_lat") and
# <col>_avg_us (overall_lat, the mean of the whole run).  ucx_perftest's
# latency is already one-way: libperf's ucx_perf_calc_result divides the
# ping-pong time by 2.  Tried once more when it fails.
ucx_point() {
	local key=$1 test=$2 size=$3 kind=$4 col=${2#ucp_} a="" b="" try iters
	if [ "$kind" = bw ]; then
		iters=$(ucx_iters "$size" "$BW_BYTES" 1000000)
	else
		iters=$(ucx_iters "$size" "$LAT_BYTES" 100000)
	fi
	for try in 1 2; do
		if past_deadline; then
			warn "ucx $test $size: skipped, past BENCH_DEADLINE"
			break
		fi
		[ "$try" = 2 ] && TAG="$TAG.retry"
		if ucx_run "$test" "$size" "$iters"; then
			if [ "$kind" = bw ]; then
				a=$(ucx_value "$UCX_OUT" overall_bw)
				[ -n "$a" ] && a=$(awk -v x="$a" 'BEGIN { printf "%.2f", x * 1.048576 }')
				b=$(ucx_value "$UCX_OUT" overall_mr)
				[ -n "$b" ] && b=$(awk -v x="$b" 'BEGIN { printf "%.4f", x / 1e6 }')
			else
				a=$(ucx_value "$UCX_OUT" 50.0_percentile_lat)
				b=$(ucx_value "$UCX_OUT" overall_lat)
			fi
		fi
		[ "$try" = 2 ] && TAG=${TAG%.retry}
		[ -n "$a" ] && break
		warn "ucx $test $size: no number in $UCX_OUT"
	done
	if [ "$kind" = bw ]; then
		record "$key" "$size" "${col}_MBps" "$a"
		record "$key" "$size" "${col}_Mmsgs" "$b"
	else
		record "$key" "$size" "${col}_typical_us" "$a"
		record "$key" "$size" "${col}_avg_us" "$b"
	fi
}

# memcpy_point SIZE: softverbs-bench-memcpy at SIZE (both its figures, see
# bench/memcpy_bw.c), run here so that it sees the same load as its
# neighbours in the table.
memcpy_point() {
	local size=$1 out="$LOGS/memcpy-$1$TAG.txt" cold="" hot="" rc=0
	if past_deadline; then
		warn "memcpy $size: skipped, past BENCH_DEADLINE"
	elif [ ! -x "$MEMCPY_BW" ]; then
		warn "memcpy $size: $MEMCPY_BW not built"
	else
		run_fg "$PT_TIMEOUT" "" "$out" "$MEMCPY_BW" -t "$MEMCPY_SECS" "$size" || rc=$?
		cold=$(awk -F, -v s="$size" '$1 == s { print $2 }' "$out")
		hot=$(awk -F, -v s="$size" '$1 == s { print $3 }' "$out")
		if [ "$rc" != 0 ] || [ -z "$cold" ]; then
			warn "memcpy $size: failed (exit $rc, see $out)"
		fi
	fi
	record memcpy "$size" MBps "$cold"
	record memcpy "$size" hot_MBps "$hot"
}

# sv_point KEY WHAT SIZE: one softverbs perftest figure, with SV_ENV for KEY
# (sv_auto: the default selection; sv_tcp: SOFTVERBS_TRANSPORT=tcp).
sv_point() {
	local key=$1 what=$2 size=$3
	SV_ENV=()
	[ "$key" = sv_tcp ] && SV_ENV=(SOFTVERBS_TRANSPORT=tcp)
	case $what in
	write_bw) sv_bw "$key" ib_write_bw "$size" write_bw_MBps write_mr_Mmsgs ;;
	read_bw) sv_bw "$key" ib_read_bw "$size" read_bw_MBps ;;
	write_lat) sv_lat "$key" ib_write_lat "$size" write_lat ;;
	send_lat) sv_lat "$key" ib_send_lat "$size" send_lat ;;
	read_lat) sv_lat "$key" ib_read_lat "$size" read_lat ;;
	atomic_lat) sv_lat "$key" ib_atomic_lat "$size" atomic_lat ;;
	esac
	SV_ENV=()
}

# shm_point SIZE: every figure of one size, back to back; the figures that
# are compared with each other run next to each other.
shm_point() {
	local size=$1
	memcpy_point "$size"
	sv_point sv_auto write_bw "$size"
	sv_point sv_tcp write_bw "$size"
	sv_point sv_auto read_bw "$size"
	ucx_point ucx ucp_put_bw "$size" bw
	sv_point sv_auto write_lat "$size"
	sv_point sv_tcp write_lat "$size"
	ucx_point ucx ucp_put_lat "$size" lat
	sv_point sv_auto send_lat "$size"
	sv_point sv_tcp send_lat "$size"
	ucx_point ucx ucp_am_lat "$size" lat
	# a READ is a round trip; an atomic is always 8 bytes
	sv_point sv_auto read_lat "$size"
	[ "$size" != 8 ] || sv_point sv_auto atomic_lat "$size"
}

# -------------------------------------------------------------- report ---

# KEY:COLUMN pairs; the CSV header is KEY_COLUMN.
COLUMNS_CSV="
	sv_auto:write_bw_MBps sv_auto:write_mr_Mmsgs sv_auto:read_bw_MBps
	sv_auto:write_lat_typical_us sv_auto:write_lat_avg_us
	sv_auto:send_lat_typical_us sv_auto:send_lat_avg_us
	sv_auto:read_lat_typical_us sv_auto:read_lat_avg_us
	sv_auto:atomic_lat_typical_us sv_auto:atomic_lat_avg_us
	sv_tcp:write_bw_MBps sv_tcp:write_mr_Mmsgs
	sv_tcp:write_lat_typical_us sv_tcp:write_lat_avg_us
	sv_tcp:send_lat_typical_us sv_tcp:send_lat_avg_us
	ucx:put_bw_MBps ucx:put_bw_Mmsgs
	ucx:put_lat_typical_us ucx:put_lat_avg_us
	ucx:am_lat_typical_us ucx:am_lat_avg_us
	memcpy:MBps memcpy:hot_MBps"

# shm.csv: one row per size, repeats summarised by the median (shm-raw.csv
# has every repeat's value).
write_csv() {
	local size c line m
	{
		line="size_bytes"
		for c in $COLUMNS_CSV; do line+=",${c%%:*}_${c#*:}"; done
		echo "$line"
		for size in $SIZES; do
			line="$size"
			for c in $COLUMNS_CSV; do
				m=NaN
				if [ -n "${R[${c%%:*},$size,${c#*:}]:-}" ]; then
					# shellcheck disable=SC2086 # the list is split on purpose
					m=$(median ${R[${c%%:*},$size,${c#*:}]})
				fi
				# atomics are measured at 8 B only
				if [ "$m" = NaN ] && { [ "$size" = 8 ] || [[ $c != *:atomic_* ]]; }; then
					FAILED=$((FAILED + 1))
				fi
				line+=",$m"
			done
			echo "$line"
		done
	} >"$CSV"
}

# The tables and the target lines, computed from the CSV alone.
report() {
	awk -F, -v quick="$QUICK" "$AWK_TABLE_FUNCS"'
		# ratios far below 1 keep two significant digits (0.0033, not 0.00)
		function rfmt(r) { return sprintf(r >= 0.1 ? "%.2f" : "%.2g", r) }
		function ratio(a, b) { return (num(a) && num(b) && b > 0) ? rfmt(a / b) : "-" }
		function v(name) { return $col[name] }
		# target line: WHAT, value A (unit U, format F) against B named BN,
		# target ratio T, GE = 1 for ">=" (bandwidth, rate), 0 for "<=".
		function target(what, a, b, bn, u, fmt, t, ge, extra,    r, ok) {
			if (!num(a) || !num(b) || b <= 0) { printf "  %-24s not measured\n", what; return }
			r = a / b; ok = ge ? (r >= t) : (r <= t)
			printf "  %-24s " fmt " %-6s = %6s x %-22s " fmt " %-6s (target %s %.2f x): %s%s\n",
				what, a, u, rfmt(r), bn, b, u, (ge ? ">=" : "<="), t, (ok ? "PASS" : "MISS"), extra
		}
		NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
		{
			s = $1
			bw = bw sprintf("%7s | %9s %9s %9s %9s %9s %9s | %7s %7s %7s %7s | %8s %8s %8s %7s\n", human(s),
				f(v("sv_auto_write_bw_MBps"), "%.1f"), f(v("sv_tcp_write_bw_MBps"), "%.1f"),
				f(v("sv_auto_read_bw_MBps"), "%.1f"),
				f(v("ucx_put_bw_MBps"), "%.1f"), f(v("memcpy_MBps"), "%.1f"), f(v("memcpy_hot_MBps"), "%.1f"),
				ratio(v("sv_auto_write_bw_MBps"), v("ucx_put_bw_MBps")),
				ratio(v("sv_auto_read_bw_MBps"), v("ucx_put_bw_MBps")),
				ratio(v("sv_auto_write_bw_MBps"), v("memcpy_MBps")),
				ratio(v("sv_tcp_write_bw_MBps"), v("ucx_put_bw_MBps")),
				f(v("sv_auto_write_mr_Mmsgs"), "%.3g"), f(v("sv_tcp_write_mr_Mmsgs"), "%.3g"),
				f(v("ucx_put_bw_Mmsgs"), "%.3g"),
				ratio(v("sv_auto_write_mr_Mmsgs"), v("ucx_put_bw_Mmsgs")))
			lat = lat sprintf("%7s | %8s %8s %8s %8s %8s %8s %6s | %8s %8s %8s %8s %8s %8s %6s\n", human(s),
				f(v("sv_auto_write_lat_typical_us"), "%.2f"), f(v("sv_auto_write_lat_avg_us"), "%.2f"),
				f(v("sv_tcp_write_lat_typical_us"), "%.2f"), f(v("sv_tcp_write_lat_avg_us"), "%.2f"),
				f(v("ucx_put_lat_typical_us"), "%.3f"), f(v("ucx_put_lat_avg_us"), "%.3f"),
				ratio(v("sv_auto_write_lat_typical_us"), v("ucx_put_lat_typical_us")),
				f(v("sv_auto_send_lat_typical_us"), "%.2f"), f(v("sv_auto_send_lat_avg_us"), "%.2f"),
				f(v("sv_tcp_send_lat_typical_us"), "%.2f"), f(v("sv_tcp_send_lat_avg_us"), "%.2f"),
				f(v("ucx_am_lat_typical_us"), "%.3f"), f(v("ucx_am_lat_avg_us"), "%.3f"),
				ratio(v("sv_auto_send_lat_typical_us"), v("ucx_am_lat_typical_us")))
			rd = rd sprintf("%7s | %8s %8s %6s | %8s %8s %6s\n", human(s),
				f(v("sv_auto_read_lat_typical_us"), "%.2f"), f(v("sv_auto_read_lat_avg_us"), "%.2f"),
				ratio(v("sv_auto_read_lat_typical_us"), v("ucx_put_lat_typical_us")),
				f(v("sv_auto_atomic_lat_typical_us"), "%.2f"), f(v("sv_auto_atomic_lat_avg_us"), "%.2f"),
				ratio(v("sv_auto_atomic_lat_typical_us"), v("ucx_put_lat_typical_us")))
			if (s == 65536 || s == 1048576 || s == 4194304) {
				bulk[s, "write"] = v("sv_auto_write_bw_MBps"); bulk[s, "read"] = v("sv_auto_read_bw_MBps")
				bulk[s, "ucx"] = v("ucx_put_bw_MBps")
			}
			if (s == 1048576) for (i in col) at1m[i] = $col[i]
			if (s == 8) for (i in col) at8[i] = $col[i]
		}
		END {
			printf "\n== bandwidth (MB/s = 10^6 B/s) and message rate (10^6 msg/s) ==\n"
			printf "%7s | %9s %9s %9s %9s %9s %9s | %7s %7s %7s %7s | %8s %8s %8s %7s\n", "",
				"softverbs", "softverbs", "softverbs", "UCX", "memcpy", "memcpy", "write/", "read/",
				"write/", "tcp/", "sv auto", "sv tcp", "UCX", "auto/"
			printf "%7s | %9s %9s %9s %9s %9s %9s | %7s %7s %7s %7s | %8s %8s %8s %7s\n", "size",
				"write", "tcp write", "read", "put_bw", "rotating", "hot", "UCX", "UCX", "memcpy", "UCX",
				"Mmsg/s", "Mmsg/s", "Mmsg/s", "UCX"
			printf "%s", bw
			printf "\n== one-way latency (us): median (med) and mean (avg) ==\n"
			printf "%7s | %8s %8s %8s %8s %8s %8s %6s | %8s %8s %8s %8s %8s %8s %6s\n", "",
				"write_lat", "", "write_lat", "", "UCX", "", "auto/",
				"send_lat", "", "send_lat", "", "UCX", "", "auto/"
			printf "%7s | %8s %8s %8s %8s %8s %8s %6s | %8s %8s %8s %8s %8s %8s %6s\n", "size",
				"auto med", "auto avg", "tcp med", "tcp avg", "put med", "put avg", "UCX",
				"auto med", "auto avg", "tcp med", "tcp avg", "am med", "am avg", "UCX"
			printf "%s", lat
			printf "\n== READ and atomic latency, softverbs auto (us, one-way: half the round trip), against UCX put_lat median ==\n"
			printf "%7s | %8s %8s %6s | %8s %8s %6s\n", "size", "read med", "read avg", "/UCX",
				"atom med", "atom avg", "/UCX"
			printf "%s", rd

			printf "\nTargets (issues 13 and 37, intra-host), softverbs with the default transport (auto):\n"
			split("65536 1048576 4194304", bs, " ")
			for (i = 1; i <= 3; i++) for (k = 1; k <= 2; k++) {
				op = k == 1 ? "write" : "read"
				target(sprintf("ib_%s_bw %s", op, human(bs[i])), bulk[bs[i], op], bulk[bs[i], "ucx"],
					"UCX ucp_put_bw", "MB/s", "%9.1f", 1.0, 1, "")
			}
			target("ib_write_bw 1 MiB", at1m["sv_auto_write_bw_MBps"], at1m["ucx_put_bw_MBps"],
				"UCX ucp_put_bw", "MB/s", "%9.1f", 1.0, 1,
				sprintf("; tcp transport %s x", ratio(at1m["sv_tcp_write_bw_MBps"], at1m["ucx_put_bw_MBps"])))
			target("ib_write_bw 1 MiB", at1m["sv_auto_write_bw_MBps"], at1m["memcpy_MBps"],
				"memcpy (rotating)", "MB/s", "%9.1f", 1.0, 1,
				sprintf("; %s x memcpy hot", ratio(at1m["sv_auto_write_bw_MBps"], at1m["memcpy_hot_MBps"])))
			target("ib_write_lat 8 B median", at8["sv_auto_write_lat_typical_us"], at8["ucx_put_lat_typical_us"],
				"UCX ucp_put_lat median", "us", "%9.3f", 1.0, 0,
				sprintf("; tcp transport %s x", ratio(at8["sv_tcp_write_lat_typical_us"], at8["ucx_put_lat_typical_us"])))
			target("ib_write_lat 8 B mean", at8["sv_auto_write_lat_avg_us"], at8["ucx_put_lat_avg_us"],
				"UCX ucp_put_lat mean", "us", "%9.3f", 1.0, 0, "")
			target("ib_send_lat 8 B median", at8["sv_auto_send_lat_typical_us"], at8["ucx_am_lat_typical_us"],
				"UCX ucp_am_lat median", "us", "%9.3f", 1.0, 0,
				sprintf("; tcp transport %s x", ratio(at8["sv_tcp_send_lat_typical_us"], at8["ucx_am_lat_typical_us"])))
			target("ib_send_lat 8 B mean", at8["sv_auto_send_lat_avg_us"], at8["ucx_am_lat_avg_us"],
				"UCX ucp_am_lat mean", "us", "%9.3f", 1.0, 0, "")
			target("ib_read_lat 8 B median", at8["sv_auto_read_lat_typical_us"], at8["ucx_put_lat_typical_us"],
				"UCX ucp_put_lat median", "us", "%9.3f", 4.0, 0, "")
			target("ib_atomic_lat 8 B median", at8["sv_auto_atomic_lat_typical_us"], at8["ucx_put_lat_typical_us"],
				"UCX ucp_put_lat median", "us", "%9.3f", 4.0, 0, "")
			target("ib_write_bw 8 B rate", at8["sv_auto_write_mr_Mmsgs"], at8["ucx_put_bw_Mmsgs"],
				"UCX ucp_put_bw rate", "Mmsg/s", "%9.4f", 0.5, 1,
				sprintf("; tcp transport %s x", ratio(at8["sv_tcp_write_mr_Mmsgs"], at8["ucx_put_bw_Mmsgs"])))
			if (quick == 1) printf "  (QUICK=1 smoke run: short measurements)\n"
		}
	' "$CSV"
}

# line_ns: one cache line's trip between two CPUs now, in ns (bench/
# line_pingpong.c), or "?" when the program is not built.  Every same-host
# latency is a few of these; where the host moves a VM's vCPUs, it moves
# with them, so the run's info gives it before and after.
line_ns() {
	if [ -x "$LINE_BENCH" ]; then
		timeout 30 "$LINE_BENCH" 2>/dev/null || echo "?"
	else
		echo "?"
	fi
}

# ---------------------------------------------------------------- main ---

T0=$SECONDS
if [ "${REPORT_ONLY:-0}" != 1 ]; then
	# What was measured where; the load averages show how busy the shared
	# machine was around the run.
	{
		run_info
		echo "perftest $(dpkg-query -W -f='${Version}' perftest 2>/dev/null || echo '?'), UCX $(ucx_info -v 2>/dev/null | sed -n 's/^# *Version *//p' | head -n1 || echo '?'), UCX_TLS=$UCX_TLS_SET"
		echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
		LINE_BEFORE=$(line_ns)
		echo "cache line between two CPUs before: $LINE_BEFORE ns one way"
	} >"$INFO"
	echo "source,size_bytes,column,repeat,value" >"$RAW_CSV"
	DEADLINE=$((SECONDS + DEADLINE))
	# the sizes of the targets REPEAT times, the median reported
	each_point shm_point ""
	LINE_AFTER=$(line_ns)
	{
		echo "cache line between two CPUs after:  $LINE_AFTER ns one way"
		# (a latency and the peer's it is divided by may then lie on
		# either side of the move)
		awk -v a="$LINE_BEFORE" -v b="$LINE_AFTER" 'BEGIN {
			if (a + 0 > 0 && b + 0 > 0 && (a / b > 1.5 || b / a > 1.5))
				print "NOTE: the line time moved during the run: latency ratios are not comparable"
		}'
	} >>"$INFO"
	echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg); run time $((SECONDS - T0)) s" >>"$INFO"
	write_csv
fi
[ -f "$CSV" ] || die "no $CSV to report"
{
	cat "$INFO" 2>/dev/null || true
	echo "softverbs: perftest over sv_lo, 127.0.0.1; auto = SOFTVERBS_TRANSPORT unset (the default), tcp = SOFTVERBS_TRANSPORT=tcp"
	echo "bw: MB/s = 10^6 B/s.  lat: one-way, us (perftest and ucx_perftest both halve the round trip)"
	report
} | tee "$TABLE"

finish "$BENCH_DIR/plot-shm.gp"
