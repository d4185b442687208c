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
#   BENCH_DEADLINE=S seconds after which remaining measurements are skipped
#   REPORT_ONLY=1    measure nothing: re-print the table and re-draw the plot
#                    from an existing results.csv
#
# Exit status: 0 when every measurement produced a number, 1 otherwise (the
# results that were measured are still written).  A target MISS is a
# finding, not a failure.  Needs root for the veth path (namespaces); without
# root that path is skipped.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
QUICK=${QUICK:-0}
RESULTS=${RESULTS:-$BENCH_DIR/results}
PATHS=${PATHS:-lo veth}
LOGS=$RESULTS/logs
CSV=$RESULTS/results.csv
RAW_CSV=$RESULTS/results-raw.csv
TABLE=$RESULTS/table.txt
PNG=$RESULTS/tcp.png

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
TARGET_SIZES="8 1048576"   # the sizes of the brief's two TCP-path targets
REPEAT=${REPEAT:-$([ "$QUICK" = 1 ] && echo 1 || echo 3)}   # runs per target size
PT_TIMEOUT=20       # one perftest process; healthy runs take 1-3 s
TCP_TIMEOUT=20      # one qperf / iperf3 client

# Ports: the perftest out-of-band exchange port moves on with every run, so
# that a server still closing never meets the next client.
PT_PORT=23500
QPERF_PORT=23470    # qperf's sync port; its data port is QPERF_PORT+1
IPERF_PORT=23480

PGIDS=()      # process groups (timeout(1) pids) to kill on exit
NETNS=()      # namespaces to delete on exit
FAILED=0      # table cells with no number
declare -A R  # R[path,size,column] = "value value ..." (one per repeat; NaN = none)
TAG=""        # log file suffix of the current repeat

log()  { printf '%s\n' "-- $*" >&2; }
warn() { printf '%s\n' "WARN: $*" >&2; }
die()  { printf '%s\n' "ERROR: $*" >&2; exit 1; }

cleanup() {
	local rc=$? g ns
	trap - EXIT
	for g in "${PGIDS[@]}"; do
		kill -TERM -- "-$g" 2>/dev/null || true
	done
	for g in "${PGIDS[@]}"; do
		for _ in 1 2 3 4 5 6 7 8 9 10; do
			kill -0 -- "-$g" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL -- "-$g" 2>/dev/null || true
	done
	for ns in "${NETNS[@]}"; do
		ip netns del "$ns" 2>/dev/null || true
	done
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# ---------------------------------------------------------------- setup ---

need_cmds=(ib_write_bw ib_send_bw ib_send_lat ib_write_lat qperf iperf3 ip ss timeout gnuplot make)
missing=0
for c in "${need_cmds[@]}"; do
	command -v "$c" >/dev/null 2>&1 || missing=1
done
if [ "$missing" = 1 ]; then
	# install-deps.sh knows perftest, qperf, iperf3, iproute2 and the build
	# tools; gnuplot-nox (no X11) draws the plot.
	log "installing missing benchmark packages"
	"$ROOT/scripts/install-deps.sh" gnuplot-nox || warn "could not install packages"
fi
for c in ib_write_bw ib_send_bw ib_send_lat ib_write_lat qperf iperf3 ss timeout; do
	command -v "$c" >/dev/null 2>&1 || die "$c is not installed"
done

if [ "${REPORT_ONLY:-0}" = 1 ]; then
	SV_TOOL=/bin/true   # only re-draw the table and plot from results.csv
elif [ -z "${SV_TOOL:-}" ]; then
	# Always make: a no-op when up to date, and the figures must be those
	# of the sources in this tree.
	log "building softverbs (make)"
	make -C "$ROOT" >/dev/null || die "make failed"
	SV_TOOL=$ROOT/build/bin/softverbs
fi
[ -x "$SV_TOOL" ] || die "softverbs tool not found: $SV_TOOL"

mkdir -p "$RESULTS"
if [ "${REPORT_ONLY:-0}" != 1 ]; then
	rm -rf "$LOGS"   # the logs of one run only
fi
mkdir -p "$LOGS"

# ------------------------------------------------------------- helpers ---

# in_ns NS CMD...: CMD inside namespace NS ("" = this one).
in_ns() {
	local ns=$1; shift
	if [ -n "$ns" ]; then
		ip netns exec "$ns" "$@"
	else
		"$@"
	fi
}

# start_bg SECS NS OUT CMD...: CMD in the background under timeout(1), which
# makes itself a process-group leader: its pid is the group cleanup kills.
# Sets BG_PID.
start_bg() {
	local secs=$1 ns=$2 out=$3; shift 3
	local cmd=("$@")
	[ -n "$ns" ] && cmd=(ip netns exec "$ns" "${cmd[@]}")
	echo "\$ ${cmd[*]}" >"$out"
	timeout -k 2 "$secs" "${cmd[@]}" >>"$out" 2>&1 &
	BG_PID=$!
	PGIDS+=("$BG_PID")
}

# run_fg SECS NS OUT CMD...: the same in the foreground; its exit status.
run_fg() {
	start_bg "$@"
	local rc=0
	wait "$BG_PID" || rc=$?
	return "$rc"
}

# wait_pid PID SECS: wait up to SECS for PID; its status, 124 if still running.
wait_pid() {
	local deadline=$((SECONDS + $2))
	while kill -0 "$1" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
		sleep 0.05
	done
	if kill -0 "$1" 2>/dev/null; then
		kill -TERM -- "-$1" 2>/dev/null || true
		return 124
	fi
	local rc=0
	wait "$1" || rc=$?
	return "$rc"
}

# pgid_of PID: process group of PID, empty if gone.
pgid_of() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
	stat=${stat##*) }   # comm may contain spaces; the fields after it
	local _state _ppid pgrp _rest
	read -r _state _ppid pgrp _rest <<<"$stat"
	echo "$pgrp"
}

# wait_listen NS PORT PGID: until a process of our group PGID listens on TCP
# PORT (so a stranger's listener on that port is not mistaken for ours).
# 0 = listening, 1 = the group died, 2 = 15 s passed.
wait_listen() {
	local ns=$1 port=$2 pgid=$3 pid
	local deadline=$((SECONDS + 15))
	while [ "$SECONDS" -lt "$deadline" ]; do
		kill -0 "$pgid" 2>/dev/null || return 1
		for pid in $(in_ns "$ns" ss -Hltnp "sport = :$port" | grep -o 'pid=[0-9]*' | cut -d= -f2); do
			[ "$(pgid_of "$pid")" = "$pgid" ] && return 0
		done
		sleep 0.05
	done
	return 2
}

# free_port NS PORT: the first port from PORT that nothing listens on.
free_port() {
	local ns=$1 p=$2
	while [ -n "$(in_ns "$ns" ss -Hltn "sport = :$p")" ]; do
		p=$((p + 1))
	done
	echo "$p"
}

past_deadline() { [ "$SECONDS" -ge "$DEADLINE" ]; }

# record PATH SIZE COLUMN VALUE: one repeat's value; empty = no number.  It
# goes to results-raw.csv at once, so that nothing measured is lost.
record() {
	R[$1,$2,$3]="${R[$1,$2,$3]:-} ${4:-NaN}"
	local n
	n=$(wc -w <<<"${R[$1,$2,$3]}")
	echo "$1,$2,$3,$n,${4:-NaN}" >>"$RAW_CSV"
}

# median VALUES...: the median of the numbers among VALUES, NaN if none.
# Repeats are summarised by their median so that one disturbed run (the
# machine is shared) does not move the figure.
median() {
	printf '%s\n' "$@" | { grep -Ev '^(NaN|)$' || true; } | sort -g | awk '
		{ v[NR] = $1 }
		END {
			if (NR == 0) { print "NaN"; exit }
			if (NR % 2) print v[(NR + 1) / 2]
			else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2
		}'
}

# perftest_value FILE SIZE COLUMN: from perftest's result table, the value in
# the column whose header starts with COLUMN ("BW average", "t_avg",
# "t_typical") on the row of SIZE.  The column is found by its header, not by
# position, and multi-word headers are joined first ("BW average[MB/sec]" ->
# "BW_average[MB/sec]", "99% percentile" -> "99%_percentile").
perftest_value() {
	awk -v size="$2" -v col="$3" '
		/#bytes/ {
			h = $0
			gsub(/BW /, "BW_", h); gsub(/% /, "%_", h)
			n = split(h, f, /[ \t]+/); idx = 0; off = (f[1] == "") ? 1 : 0
			want = col; gsub(/ /, "_", want)
			for (i = 1; i <= n; i++)
				if (index(f[i], want) == 1) { idx = i - off; break }
			next
		}
		idx > 0 && $1 == size && NF >= idx && $idx ~ /^[0-9.]+$/ { v = $idx }
		END { if (v != "") print v }
	' "$1"
}

# bw/lat iteration counts: enough bytes for a stable figure at large sizes,
# bounded so that small sizes do not take long.
bw_iters()  { local n=$((BW_BYTES / $1)); [ "$n" -gt 5000 ] && n=5000; [ "$n" -lt 50 ] && n=50; echo "$n"; }
lat_iters() { local n=$((LAT_BYTES / $1)); [ "$n" -gt "$LAT_MAX_ITERS" ] && n=$LAT_MAX_ITERS; [ "$n" -lt 20 ] && n=20; echo "$n"; }

# perftest PATH PROG SIZE ITERS SUFFIX [ARGS...]: one perftest run over
# softverbs with ARGS added on both sides, server in
# $SRV_NS on $SRV_DEV, client in $CLI_NS on $CLI_DEV connecting to $SRV_HOST.
# Sets PT_OUT (the client's output file); returns 0 if both sides exited 0.
perftest() {
	local path=$1 prog=$2 size=$3 iters=$4 suffix=$5
	shift 5
	local base="$LOGS/$path-$prog$suffix-$size$TAG" port
	PT_OUT=$base.client.txt
	# -F: do not fail on the VM's inconsistent cpufreq readings.
	local common=(-F -x 0 -s "$size" -n "$iters" "$@")
	port=$(free_port "$SRV_NS" "$PT_PORT")
	PT_PORT=$((port + 1))
	[ "$PT_PORT" -gt 23999 ] && PT_PORT=23500
	start_bg "$PT_TIMEOUT" "$SRV_NS" "$base.server.txt" \
		"$SV_TOOL" run -- "$prog" -d "$SRV_DEV" -p "$port" "${common[@]}"
	local spid=$BG_PID w=0
	wait_listen "$SRV_NS" "$port" "$spid" || w=$?
	if [ "$w" != 0 ]; then
		warn "$path $prog${suffix:+ $suffix} $size: server did not listen (see $base.server.txt)"
		wait_pid "$spid" 1 || true
		return 1
	fi
	# The listener is up, so a refused connect is a race with its accept
	# loop or a transient: retry a few times rather than sleep up front.
	local crc=0
	for _ in 1 2 3; do
		crc=0
		run_fg "$PT_TIMEOUT" "$CLI_NS" "$PT_OUT" \
			"$SV_TOOL" run -- "$prog" -d "$CLI_DEV" -p "$port" "${common[@]}" "$SRV_HOST" || crc=$?
		[ "$crc" = 0 ] && break
		if grep -Eq "Couldn't connect|Unable to init the socket" "$PT_OUT" &&
			kill -0 "$spid" 2>/dev/null; then
			sleep 0.2
			continue
		fi
		break
	done
	local src=0
	wait_pid "$spid" "$([ "$crc" = 0 ] && echo 10 || echo 2)" || src=$?
	if [ "$crc" != 0 ] || [ "$src" != 0 ]; then
		warn "$path $prog${suffix:+ $suffix} $size: client exited $crc, server $src (124 = timed out; see $base.*.txt)"
		return 1
	fi
	return 0
}

# sv_bw PATH PROG SIZE COLUMN: bandwidth in MB/s (10^6 B/s).  perftest's
# "MB/sec" is 2^20 bytes per second (its format_factor is 0x100000).  A run
# that fails or prints no number is tried once more: on this VM perftest
# sometimes measures the CPU clock as 0 and prints "inf".
sv_bw() {
	local v="" try
	for try in 1 2; do
		if past_deadline; then
			warn "$1 $2 $3: skipped, past BENCH_DEADLINE"
			break
		fi
		if perftest "$1" "$2" "$3" "$(bw_iters "$3")" "$([ "$try" = 2 ] && echo -retry)"; then
			v=$(perftest_value "$PT_OUT" "$3" "BW average")
			[ -n "$v" ] && v=$(awk -v x="$v" 'BEGIN { printf "%.2f", x * 1.048576 }')
			[ -n "$v" ] && break
			warn "$1 $2 $3: no number in $PT_OUT"
		fi
	done
	record "$1" "$3" "$4" "$v"
}

# sv_lat PATH PROG SIZE COLUMN [ARGS...]: one-way latency in us, t_avg and
# t_typical.
sv_lat() {
	local avg="" typ="" try sfx
	local extra=("${@:5}")
	# a healthy run at the sizes -e is used at takes about a second
	[ "${#extra[@]}" -gt 0 ] && local PT_TIMEOUT=10
	sfx=$(printf '%s' "${extra[@]}" | tr -c 'a-zA-Z0-9' _)
	for try in 1 2; do
		if past_deadline; then
			warn "$1 $2 $3: skipped, past BENCH_DEADLINE"
			break
		fi
		if perftest "$1" "$2" "$3" "$(lat_iters "$3")" "$sfx$([ "$try" = 2 ] && echo -retry)" "${extra[@]}"; then
			avg=$(perftest_value "$PT_OUT" "$3" "t_avg")
			typ=$(perftest_value "$PT_OUT" "$3" "t_typical")
			[ -n "$avg" ] && break
			warn "$1 $2 $3: no number in $PT_OUT"
		fi
	done
	record "$1" "$3" "$4_avg_us" "$avg"
	record "$1" "$3" "$4_typical_us" "$typ"
}

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

# The sizes the targets are evaluated at are measured REPEAT times (the
# rounds interleaved, softverbs and TCP side by side) and summarised by the
# median; the other sizes once.
run_path() {
	local path=$1 size reps rep
	log "path $path: $PATH_DESC"
	start_tcp_servers "$path"
	for size in $SIZES; do
		reps=1
		case " $TARGET_SIZES " in *" $size "*) reps=$REPEAT ;; esac
		for rep in $(seq 1 "$reps"); do
			TAG=""
			[ "$rep" -gt 1 ] && TAG=".r$rep"
			log "$path: $size B${TAG:+ (repeat $rep of $reps)}"
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
		done
	done
	TAG=""
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
	awk -F, -v quick="$QUICK" '
		function human(b) {
			if (b >= 1048576 && b % 1048576 == 0) return (b / 1048576) "M"
			if (b >= 1024 && b % 1024 == 0) return (b / 1024) "K"
			return b
		}
		function num(x) { return x != "NaN" && x != "" }
		function f(x, fmt) { return num(x) ? sprintf(fmt, x) : "-" }
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
		echo "$("$SV_TOOL" version 2>/dev/null | head -n1 || true), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u '+%Y-%m-%d %H:%M UTC')$([ "$QUICK" = 1 ] && echo ', QUICK=1')"
		echo "$(nproc) CPUs: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1), Linux $(uname -r)"
		echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
	} >"$INFO"
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

if command -v gnuplot >/dev/null 2>&1; then
	plot_paths=$(awk -F, 'NR > 1 && !seen[$1]++ { printf "%s%s", (n++ ? " " : ""), $1 }' "$CSV")
	gnuplot -e "csv='$CSV'; png='$PNG'; paths='$plot_paths'" "$BENCH_DIR/plot.gp" 2>"$LOGS/gnuplot.txt" ||
		warn "gnuplot failed (see $LOGS/gnuplot.txt)"
else
	warn "gnuplot not installed: no plot"
fi
log "results: $CSV, $TABLE, $PNG; raw output in $LOGS/ ($((SECONDS - T0)) s)"
if [ "$FAILED" -gt 0 ]; then
	warn "$FAILED table cell(s) have no number (NaN in the CSV; see the WARN lines above)"
	exit 1
fi
