#!/usr/bin/env bash
# bench/run-tcp.sh: softverbs over its TCP transport next to TCP itself.
#
#   bench/run-tcp.sh            # full sweep, 1 B .. 4 MiB, ~7 minutes here
#   QUICK=1 bench/run-tcp.sh    # smoke run: 8 B, 64 KiB, 1 MiB only
#
# For each path (loopback 127.0.0.1 in this namespace; two network namespaces
# joined by a veth pair) and each message size, it runs Debian's unmodified
# perftest over softverbs (ib_write_bw, ib_send_bw, ib_send_lat, ib_write_lat;
# ib_send_lat -e too at the target sizes) and, on the same path and at the
# same size, the TCP peers: qperf tcp_bw / tcp_lat and iperf3.  Measurements
# of one size are taken back to back, so that softverbs and TCP see the same
# background load.  It prints a table and the two TCP-path targets of the
# brief (section 7), and writes under $RESULTS (default bench/results/):
# results.csv, results-raw.csv, run-info.txt, table.txt, tcp.png and logs/
# with every program's raw output.  docs/PERFORMANCE.md explains the columns.
#
# Environment:
#   QUICK=1          short smoke run
#   SIZES="8 1048576"  message sizes in bytes (overrides the default sweep)
#   PATHS="lo veth"  which paths to run
#   RESULTS=DIR      where results go
#   SV_TOOL=PATH     the softverbs tool (default: build/bin/softverbs, built
#                    with `make` first)
#   REPEAT=N         runs at the target sizes (8 B, 1 MiB), median reported;
#                    default 3 (1 with QUICK=1)
#   BW_SECS=S        seconds per perftest bandwidth run (default: as long as
#                    the TCP peers' runs, 1); empty: a fixed amount of bytes
#   BENCH_DEADLINE=S seconds after which remaining measurements are skipped
#   REPORT_ONLY=1    measure nothing: re-print the table and re-draw the plot
#                    from an existing results.csv
#   LOAD=N           a loaded machine: N busy loops (LOAD=1: twice the CPU
#                    count) run beside every measurement, softverbs' and the
#                    TCP peers' alike; results go to bench/results/loaded/
#                    unless RESULTS is given
#
# Exit status: 0 when every measurement produced a number, 1 otherwise (the
# results that were measured are still written).  A target MISS is a
# finding, not a failure.  Needs root for the veth path (namespaces); without
# root that path is skipped.
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
LOAD=${LOAD:-0}
[ "$LOAD" = 1 ] && LOAD=$(($(nproc) * 2))
if [ "$LOAD" -gt 0 ]; then
	RESULTS=${RESULTS:-$BENCH_DIR/results/loaded}
else
	RESULTS=${RESULTS:-$BENCH_DIR/results}
fi
PATHS=${PATHS:-lo veth}
LOGS=$RESULTS/logs
CSV=$RESULTS/results.csv
RAW_CSV=$RESULTS/results-raw.csv
TABLE=$RESULTS/table.txt
PNG=$RESULTS/tcp.png

# This benchmark is about softverbs' TCP path: on loopback the default
# transport would pick shared memory (bench/run-shm.sh measures that).
export SOFTVERBS_TRANSPORT=tcp

MiB=1048576
if [ "$QUICK" = 1 ]; then
	SIZES=${SIZES:-8 65536 1048576}
	BW_BYTES=$((64 * MiB))    # bytes moved per bandwidth point (sets -n)
	LAT_BYTES=$((16 * MiB))   # bytes per latency point (sets -n)
	LAT_MAX_ITERS=500
	DEADLINE=${BENCH_DEADLINE:-300}
else
	# x4 steps from 1 B to 4 MiB, plus 8 B: the size of the latency target.
	SIZES=${SIZES:-1 4 8 16 64 256 1024 4096 16384 65536 262144 1048576 4194304}
	BW_BYTES=$((512 * MiB))
	LAT_BYTES=$((64 * MiB))
	LAT_MAX_ITERS=1000
	DEADLINE=${BENCH_DEADLINE:-1200}
fi
TCP_SECS=1          # qperf -t and iperf3 -t per point
# perftest's bandwidth runs last as long (-D): a run of BW_BYTES took a
# tenth of that, mostly the connection's start (TCP's slow start, the first
# reads), and was set against the peers' second of steady state
# (ib_write_bw 1 MiB over veth: 1.4 GB/s in 64 MiB, 4.1 GB/s in a second).
# BW_SECS= (empty) goes back to BW_BYTES.
BW_SECS=${BW_SECS-$TCP_SECS}
TARGET_SIZES="8 1048576"   # the sizes of the brief's two TCP-path targets
REPEAT=${REPEAT:-$([ "$QUICK" = 1 ] && echo 1 || echo 3)}   # runs per target size
PT_TIMEOUT=20       # one perftest process; healthy runs take 1-3 s
TCP_TIMEOUT=20      # one qperf / iperf3 client

# Ports: the perftest out-of-band exchange port moves on with every run, so
# that a server still closing never meets the next client.
PT_PORT=23500
QPERF_PORT=23470    # qperf's sync port; its data port is QPERF_PORT+1
IPERF_PORT=23480

# State, cleanup trap and the helpers shared with run-shm.sh.
# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"

# ---------------------------------------------------------------- setup ---

# install-deps.sh knows perftest, qperf, iperf3, iproute2 and the build
# tools; gnuplot-nox (no X11) draws the plot.
EXTRA_PKGS=(gnuplot-nox)
need_cmds "ib_write_bw ib_send_bw ib_send_lat ib_write_lat qperf iperf3 ip ss timeout gnuplot make" \
	"ib_write_bw ib_send_bw ib_send_lat ib_write_lat qperf iperf3 ss timeout"
build_softverbs

mkdir -p "$RESULTS"
if [ "${REPORT_ONLY:-0}" != 1 ]; then
	rm -rf "$LOGS"   # the logs of one run only
fi
mkdir -p "$LOGS"

# ------------------------------------------------------------- helpers ---

# qperf_point PATH SIZE: qperf tcp_bw and tcp_lat at SIZE against the qperf
# server of this path.  -uu prints plain bytes/sec and ns; -ws retries the
# connection while the server starts.
qperf_point() {
	local path=$1 size=$2 out="$LOGS/$1-qperf-$2$TAG.txt" bw="" lat=""
	if past_deadline; then
		warn "$path qperf $size: skipped, past BENCH_DEADLINE"
	elif run_fg "$TCP_TIMEOUT" "$CLI_NS" "$out" qperf "$SRV_HOST" -lp "$QPERF_PORT" \
		-ip "$((QPERF_PORT + 1))" -ws 5 -uu -t "$TCP_SECS" -m "$size" tcp_bw tcp_lat; then
		bw=$(awk '/^tcp_bw:/ { t = 1 } t && $1 == "bw" && $4 == "bytes/sec" { printf "%.2f", $3 / 1e6; exit }' "$out")
		lat=$(awk '/^tcp_lat:/ { t = 1 } t && $1 == "latency" && $4 == "ns" { printf "%.3f", $3 / 1e3; exit }' "$out")
		if [ -z "$bw" ] || [ -z "$lat" ]; then
			warn "$path qperf $size: unexpected output in $out"
		fi
	else
		warn "$path qperf $size: failed (see $out)"
	fi
	record "$path" "$size" qperf_tcp_bw_MBps "$bw"
	record "$path" "$size" qperf_tcp_lat_us "$lat"
}

# iperf3_point PATH SIZE: iperf3 with SIZE-byte writes (iperf3 refuses more
# than 1 MiB: larger sizes use 1 MiB writes); the receiver's rate.  The JSON
# is one key per line, so awk reads "sum_received"'s bits_per_second.
iperf3_point() {
	local path=$1 size=$2 out="$LOGS/$1-iperf3-$2$TAG.txt" bw="" rc len=$2
	[ "$len" -gt "$MiB" ] && len=$MiB
	if past_deadline; then
		warn "$path iperf3 $size: skipped, past BENCH_DEADLINE"
	else
		for _ in 1 2 3; do
			rc=0
			run_fg "$TCP_TIMEOUT" "$CLI_NS" "$out" iperf3 -c "$SRV_HOST" -p "$IPERF_PORT" \
				-t "$TCP_SECS" -l "$len" -J || rc=$?
			# "server is busy" right after the previous test: try again.
			[ "$rc" = 0 ] && break
			sleep 0.3
		done
		bw=$(awk '/"sum_received"/ { t = 1 } t && /"bits_per_second"/ {
			gsub(/[^0-9.eE+-]/, "", $2); printf "%.2f", $2 / 8e6; exit }' "$out")
		[ -n "$bw" ] || warn "$path iperf3 $size: failed (see $out)"
	fi
	record "$path" "$size" iperf3_bw_MBps "$bw"
}

# --------------------------------------------------------------- paths ---

setup_lo() {
	SRV_NS="" CLI_NS="" SRV_DEV=sv_lo CLI_DEV=sv_lo SRV_HOST=127.0.0.1
	PATH_DESC="loopback 127.0.0.1, sv_lo"
}

# Two namespaces, svb0 (10.212.0.1, server side) <-> svb1 (10.212.0.2).
# The addresses exist only inside them, so fixed ones cannot collide.
setup_veth() {
	local a="svb-a-$$" b="svb-b-$$"
	ip netns add "$a" || return 1
	NETNS+=("$a")
	ip netns add "$b" || return 1
	NETNS+=("$b")
	ip -n "$a" link add svb0 type veth peer name svb1 netns "$b" &&
		ip -n "$a" addr add 10.212.0.1/24 dev svb0 &&
		ip -n "$b" addr add 10.212.0.2/24 dev svb1 &&
		ip -n "$a" link set lo up && ip -n "$b" link set lo up &&
		ip -n "$a" link set svb0 up && ip -n "$b" link set svb1 up || return 1
	local deadline=$((SECONDS + 5))
	until ip -n "$a" link show svb0 | grep -q LOWER_UP &&
		ip -n "$b" link show svb1 | grep -q LOWER_UP; do
		[ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.05
	done
	SRV_NS=$a CLI_NS=$b SRV_DEV=sv_svb0 CLI_DEV=sv_svb1 SRV_HOST=10.212.0.1
	PATH_DESC="veth between namespaces $a (10.212.0.1, sv_svb0) and $b (10.212.0.2, sv_svb1)"
}

# TCP servers of a path: qperf and iperf3, running for the whole sweep.
start_tcp_servers() {
	local path=$1 w
	QPERF_PORT=$(free_port "$SRV_NS" "$QPERF_PORT")
	start_bg "$((DEADLINE - SECONDS + 60))" "$SRV_NS" "$LOGS/$path-qperf-server.txt" qperf -lp "$QPERF_PORT"
	w=0; wait_listen "$SRV_NS" "$QPERF_PORT" "$BG_PID" || w=$?
	[ "$w" = 0 ] || warn "$path: qperf server not listening (see $LOGS/$path-qperf-server.txt)"
	QPERF_PGID=$BG_PID
	IPERF_PORT=$(free_port "$SRV_NS" "$IPERF_PORT")
	start_bg "$((DEADLINE - SECONDS + 60))" "$SRV_NS" "$LOGS/$path-iperf3-server.txt" iperf3 -s -p "$IPERF_PORT"
	w=0; wait_listen "$SRV_NS" "$IPERF_PORT" "$BG_PID" || w=$?
	[ "$w" = 0 ] || warn "$path: iperf3 server not listening (see $LOGS/$path-iperf3-server.txt)"
	IPERF_PGID=$BG_PID
}

stop_tcp_servers() {
	local g
	for g in "$QPERF_PGID" "$IPERF_PGID"; do
		kill -TERM -- "-$g" 2>/dev/null || true
		wait_pid "$g" 3 || true
	done
}

# tcp_point SIZE: every figure of one size on the path of run_path, back to
# back, softverbs and TCP side by side.
tcp_point() {
	local size=$1
	sv_bw "$path" ib_write_bw "$size" sv_write_bw_MBps
	sv_bw "$path" ib_send_bw "$size" sv_send_bw_MBps
	qperf_point "$path" "$size"
	iperf3_point "$path" "$size"
	sv_lat "$path" ib_send_lat "$size" sv_send_lat
	# -e: sleep on completion events, as qperf sleeps in recv().
	# Only at the target sizes: in this mode softverbs sometimes
	# reports a CQ overrun and the run hangs until its timeout.
	case " $TARGET_SIZES " in
	*" $size "*) sv_lat "$path" ib_send_lat "$size" sv_send_lat_ev -e ;;
	esac
	sv_lat "$path" ib_write_lat "$size" sv_write_lat
}

# run_path PATH: every size on PATH.  The sizes the targets are evaluated at
# are measured REPEAT times and summarised by the median; the other sizes
# once.
run_path() {
	local path=$1   # read by tcp_point
	log "path $path: $PATH_DESC"
	start_tcp_servers "$path"
	each_point tcp_point "$path: "
	stop_tcp_servers
}

# -------------------------------------------------------------- report ---

COLUMNS_CSV="sv_write_bw_MBps sv_send_bw_MBps qperf_tcp_bw_MBps iperf3_bw_MBps sv_send_lat_avg_us sv_send_lat_typical_us sv_send_lat_ev_avg_us sv_send_lat_ev_typical_us sv_write_lat_avg_us sv_write_lat_typical_us qperf_tcp_lat_us"

# results.csv: one row per path and size, repeats summarised by the median
# (results-raw.csv has every repeat's value).  A column not measured at a
# size (ib_send_lat -e away from the target sizes) is NaN, not a failure.
write_csv() {
	local path size c line m
	{
		line="path,size_bytes"
		for c in $COLUMNS_CSV; do line+=",$c"; done
		echo "$line"
		for path in "${DONE_PATHS[@]}"; do
			for size in $SIZES; do
				line="$path,$size"
				for c in $COLUMNS_CSV; do
					m=NaN
					if [ -n "${R[$path,$size,$c]:-}" ]; then
						# shellcheck disable=SC2086 # the list is split on purpose
						m=$(median ${R[$path,$size,$c]})
						[ "$m" != NaN ] || FAILED=$((FAILED + 1))
					fi
					line+=",$m"
				done
				echo "$line"
			done
		done
	} >"$CSV"
}

# The table and the target lines, computed from the CSV alone.
report() {
	awk -F, -v quick="$QUICK" "$AWK_TABLE_FUNCS"'
		function ratio(a, b) { return (num(a) && num(b) && b > 0) ? sprintf("%.2f", a / b) : "-" }
		NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
		{
			p = $1
			if (!(p in seen)) { seen[p] = 1; order[++np] = p }
			rows[p] = rows[p] sprintf("%7s | %9s %9s %9s %6s %9s | %9s %9s %9s %9s %9s %6s\n",
				human($2),
				f($col["sv_write_bw_MBps"], "%.1f"), f($col["sv_send_bw_MBps"], "%.1f"),
				f($col["qperf_tcp_bw_MBps"], "%.1f"),
				ratio($col["sv_write_bw_MBps"], $col["qperf_tcp_bw_MBps"]),
				f($col["iperf3_bw_MBps"], "%.1f"),
				f($col["sv_send_lat_avg_us"], "%.2f"), f($col["sv_send_lat_typical_us"], "%.2f"),
				f($col["sv_send_lat_ev_avg_us"], "%.2f"),
				f($col["sv_write_lat_avg_us"], "%.2f"), f($col["qperf_tcp_lat_us"], "%.2f"),
				ratio($col["sv_send_lat_avg_us"], $col["qperf_tcp_lat_us"]))
			if ($2 == 1048576) { wbw[p] = $col["sv_write_bw_MBps"]; tbw[p] = $col["qperf_tcp_bw_MBps"]; ibw[p] = $col["iperf3_bw_MBps"] }
			if ($2 == 8) { slat[p] = $col["sv_send_lat_avg_us"]; tlat[p] = $col["qperf_tcp_lat_us"]; smed[p] = $col["sv_send_lat_typical_us"]; sev[p] = $col["sv_send_lat_ev_avg_us"] }
		}
		END {
			name["lo"] = "loopback (127.0.0.1)"; name["veth"] = "veth (two namespaces)"
			for (k = 1; k <= np; k++) {
				p = order[k]
				printf "\n== %s ==\n", (p in name) ? name[p] : p
				printf "%7s | %9s %9s %9s %6s %9s | %9s %9s %9s %9s %9s %6s\n", "", "softverbs", "softverbs", "TCP", "", "TCP", \
					"softverbs", "softverbs", "softverbs", "softverbs", "TCP", ""
				printf "%7s | %9s %9s %9s %6s %9s | %9s %9s %9s %9s %9s %6s\n", "size", "write_bw", "send_bw", "qperf", "ratio", "iperf3", \
					"send_lat", "send_lat", "send_lat", "write_lat", "qperf", "ratio"
				printf "%7s | %9s %9s %9s %6s %9s | %9s %9s %9s %9s %9s %6s\n", "bytes", "MB/s", "MB/s", "MB/s", "w/q", "MB/s", \
					"us avg", "us median", "-e us avg", "us avg", "us", "s/q"
				printf "%s", rows[p]
			}
			printf "\nTargets (brief section 7, TCP path), evaluated against qperf on the same path:\n"
			for (k = 1; k <= np; k++) {
				p = order[k]
				if (num(wbw[p]) && num(tbw[p])) {
					r = wbw[p] / tbw[p]
					printf "  %-4s ib_write_bw 1 MiB %9.1f MB/s = %.2f x qperf tcp_bw %9.1f MB/s (target >= 0.90 x): %s",
						p, wbw[p], r, tbw[p], (r >= 0.9 ? "PASS" : "MISS")
					if (r >= 0.9) printf " (%.1f MB/s above the target)", wbw[p] - 0.9 * tbw[p]
					else printf " (%.1f MB/s short: %.0f%% of the target)", 0.9 * tbw[p] - wbw[p], r / 0.9 * 100
					if (num(ibw[p]) && ibw[p] > 0) printf "; %.2f x iperf3", wbw[p] / ibw[p]
					printf "\n"
				} else
					printf "  %-4s ib_write_bw 1 MiB: not measured\n", p
				if (num(slat[p]) && num(tlat[p])) {
					r = slat[p] / tlat[p]
					printf "  %-4s ib_send_lat 8 B   %9.2f us   = %.2f x qperf tcp_lat %9.2f us   (target <= 1.20 x): %s",
						p, slat[p], r, tlat[p], (r <= 1.2 ? "PASS" : "MISS")
					if (r <= 1.2) printf " (%.2f us below the target)", 1.2 * tlat[p] - slat[p]
					else printf " (%.2f us too slow: %.1f x the target)", slat[p] - 1.2 * tlat[p], r / 1.2
					printf "\n"
					if (num(smed[p]))
						printf "  %-4s   for reference: its median (t_typical) %.2f us = %.2f x the qperf mean (qperf gives no median)\n",
							p, smed[p], smed[p] / tlat[p]
					if (num(sev[p]))
						printf "  %-4s   for reference: ib_send_lat -e (sleeps on CQ events, as qperf sleeps in recv) %.2f us = %.2f x\n",
							p, sev[p], sev[p] / tlat[p]
				} else
					printf "  %-4s ib_send_lat 8 B: not measured\n", p
			}
			if (quick == 1) printf "  (QUICK=1 smoke run: short measurements)\n"
		}
	' "$CSV"
}

# ---------------------------------------------------------------- main ---

T0=$SECONDS
INFO=$RESULTS/run-info.txt
if [ "${REPORT_ONLY:-0}" != 1 ]; then
	# What was measured where; the load averages show how busy the shared
	# machine was around the run.
	{
		run_info
		echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
		if [ "$LOAD" -gt 0 ]; then
			echo "LOAD: $LOAD busy loops beside every measurement ($(nproc) CPUs)"
		fi
	} >"$INFO"
	if [ "$LOAD" -gt 0 ]; then
		start_load "$LOAD"
	fi
	echo "path,size_bytes,column,repeat,value" >"$RAW_CSV"
	DEADLINE=$((SECONDS + DEADLINE))
	DONE_PATHS=()
	for path in $PATHS; do
		case $path in
		lo)
			setup_lo
			;;
		veth)
			if [ "$(id -u)" != 0 ]; then
				warn "veth path skipped: network namespaces need root (run with sudo)"
				continue
			fi
			setup_veth || die "could not create the namespaces and veth pair"
			;;
		*)
			die "unknown path '$path' (lo, veth)"
			;;
		esac
		run_path "$path"
		DONE_PATHS+=("$path")
	done
	[ "${#DONE_PATHS[@]}" -gt 0 ] || die "no path was run"
	echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg); run time $((SECONDS - T0)) s" >>"$INFO"
	write_csv
fi
[ -f "$CSV" ] || die "no $CSV to report"
{
	cat "$INFO" 2>/dev/null || true
	echo "bw: MB/s = 10^6 B/s.  lat: one-way, us; softverbs = perftest t_avg (mean of round trip / 2), qperf = mean"
	report
} | tee "$TABLE"

# the paths that results.csv has rows for (a panel with no points is an error)
plot_paths=$(awk -F, 'NR > 1 && !seen[$1]++ { printf "%s%s", (n++ ? " " : ""), $1 }' "$CSV")
finish "$BENCH_DIR/plot.gp" "paths='$plot_paths'"
