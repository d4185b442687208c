# shellcheck shell=bash
# bench/lib.sh: helpers shared by the benchmark scripts (run-tcp.sh,
# run-shm.sh).  Sourced, not run.  It sets the EXIT trap that kills every
# background process group started with start_bg and deletes the namespaces
# in NETNS, so a script that sources it leaves nothing behind however it ends.
#
# The sourcing script sets, before calling the helpers that use them:
#   ROOT, LOGS, RAW_CSV, DEADLINE (absolute, in $SECONDS), QUICK
#   BW_BYTES, LAT_BYTES, LAT_MAX_ITERS, BW_MAX_ITERS (optional)
#                                            (bw_iters / lat_iters)
#   BW_SECS (optional): bandwidth runs last this many seconds (perftest -D)
#   instead of moving BW_BYTES, as long as the TCP peers run (sv_bw)
#   SV_TOOL, PT_PORT, PT_TIMEOUT, SRV_NS, CLI_NS, SRV_DEV, CLI_DEV, SRV_HOST
#                                            (perftest / sv_bw / sv_lat /
#                                             pair_run)
#   SV_ENV (optional array): VAR=VALUE settings the perftest processes run
#   with, e.g. (SOFTVERBS_TRANSPORT=tcp); empty by default.
#   SIZES, TARGET_SIZES, REPEAT               (each_point)
#   CSV, PNG, TABLE, T0                       (finish)

PGIDS=()      # process groups (timeout(1) pids) to kill on exit
NETNS=()      # namespaces to delete on exit
# shellcheck disable=SC2034 # counted here, read by the sourcing script
FAILED=0      # table cells with no number
declare -A R  # R[path,size,column] = "value value ..." (one per repeat; NaN = none)
TAG=""        # log file suffix of the current repeat
SV_ENV=()     # VAR=VALUE settings for the perftest processes (see above)
EXTRA_PKGS=() # Debian packages need_cmds installs besides the project's

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

# need_cmds "CMD..." "CMD...": the first list is what the script uses; when
# one is missing, scripts/install-deps.sh installs the project's packages and
# the extra Debian packages in EXTRA_PKGS (array, may be empty).  Then every
# command of the second list (what the run cannot do without) must exist.
need_cmds() {
	local c missing=0
	for c in $1; do
		command -v "$c" >/dev/null 2>&1 || missing=1
	done
	if [ "$missing" = 1 ]; then
		log "installing missing benchmark packages"
		"$ROOT/scripts/install-deps.sh" "${EXTRA_PKGS[@]}" || warn "could not install packages"
	fi
	for c in $2; do
		command -v "$c" >/dev/null 2>&1 || die "$c is not installed"
	done
}

# build_softverbs: sets SV_TOOL.  Always make (unless SV_TOOL is given): a
# no-op when up to date, and the figures must be those of the sources in
# this tree.  With REPORT_ONLY=1 nothing is built or run.
build_softverbs() {
	if [ "${REPORT_ONLY:-0}" = 1 ]; then
		SV_TOOL=/bin/true   # only re-draw the table and plot from the CSV
	elif [ -z "${SV_TOOL:-}" ]; then
		log "building softverbs (make)"
		make -C "$ROOT" >/dev/null || die "make failed"
		SV_TOOL=$ROOT/build/bin/softverbs
	fi
	[ -x "$SV_TOOL" ] || die "softverbs tool not found: $SV_TOOL"
}

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

# start_load N: N busy loops (plain CPU spinners, nice 0) for the rest of
# the run, killed by the EXIT trap: the "busy machine" of LOAD=N, which
# loads softverbs and the TCP peers it is compared with the same way, as
# every measurement of one size runs back to back beside the same loops.
start_load() {
	local i
	for ((i = 0; i < $1; i++)); do
		setsid bash -c 'while :; do :; done' &
		PGIDS+=("$!")
	done
	log "$1 busy loops beside the measurements (LOAD)"
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

# shellcheck disable=SC2153 # DEADLINE is set by the sourcing script
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
# BW_MAX_ITERS (default 5000) is the cap for bandwidth runs.
bw_iters()  { local n=$((BW_BYTES / $1)); [ "$n" -gt "${BW_MAX_ITERS:-5000}" ] && n=${BW_MAX_ITERS:-5000}; [ "$n" -lt 50 ] && n=50; echo "$n"; }
lat_iters() { local n=$((LAT_BYTES / $1)); [ "$n" -gt "$LAT_MAX_ITERS" ] && n=$LAT_MAX_ITERS; [ "$n" -lt 20 ] && n=20; echo "$n"; }

# take_pt_port: sets PORT to the next free out-of-band port of a perftest or
# ucx_perftest run (not in a $(...) subshell: PT_PORT must move on here).  It
# moves on with every run, so that a server still closing never meets the
# next client.
take_pt_port() {
	PORT=$(free_port "$SRV_NS" "$PT_PORT")
	PT_PORT=$((PORT + 1))
	[ "$PT_PORT" -gt 23999 ] && PT_PORT=23500
	return 0
}

# pair_run LABEL BASE PORT REFUSED_RE: one server/client benchmark run.  The
# command in the array SRV_CMD starts in the background in $SRV_NS (output in
# BASE.server.txt); once a process of its group listens on TCP PORT, CLI_CMD
# runs in $CLI_NS (output in BASE.client.txt).  Both under PT_TIMEOUT.
# Returns 0 if both exited 0; LABEL names the run in warnings.
pair_run() {
	local label=$1 base=$2 port=$3 refused=$4
	start_bg "$PT_TIMEOUT" "$SRV_NS" "$base.server.txt" "${SRV_CMD[@]}"
	local spid=$BG_PID w=0
	wait_listen "$SRV_NS" "$port" "$spid" || w=$?
	if [ "$w" != 0 ]; then
		warn "$label: server did not listen (see $base.server.txt)"
		wait_pid "$spid" 1 || true
		return 1
	fi
	# The listener is up, so a refused connect (the client's output matches
	# REFUSED_RE) is a race with its accept loop or a transient: retry a
	# few times rather than sleep up front.
	local crc=0
	for _ in 1 2 3; do
		crc=0
		run_fg "$PT_TIMEOUT" "$CLI_NS" "$base.client.txt" "${CLI_CMD[@]}" || crc=$?
		[ "$crc" = 0 ] && break
		if grep -Eq "$refused" "$base.client.txt" && kill -0 "$spid" 2>/dev/null; then
			sleep 0.2
			continue
		fi
		break
	done
	local src=0
	wait_pid "$spid" "$([ "$crc" = 0 ] && echo 10 || echo 2)" || src=$?
	if [ "$crc" != 0 ] || [ "$src" != 0 ]; then
		warn "$label: client exited $crc, server $src (124 = timed out; see $base.*.txt)"
		return 1
	fi
	return 0
}

# perftest PATH PROG SIZE ITERS SUFFIX [ARGS...]: one perftest run over
# softverbs with ARGS added on both sides (ITERS "DN": for N seconds), server in
# $SRV_NS on $SRV_DEV, client in $CLI_NS on $CLI_DEV connecting to $SRV_HOST,
# both with the environment settings in SV_ENV.
# Sets PT_OUT (the client's output file); returns 0 if both sides exited 0.
perftest() {
	local path=$1 prog=$2 size=$3 iters=$4 suffix=$5
	shift 5
	local base="$LOGS/$path-$prog$suffix-$size$TAG" port
	PT_OUT=$base.client.txt
	# -F: do not fail on the VM's inconsistent cpufreq readings.
	local count=(-n "$iters")
	[ "${iters#D}" = "$iters" ] || count=(-D "${iters#D}")
	local common=(-F -x 0 -s "$size" "${count[@]}" "$@")
	take_pt_port
	port=$PORT
	SRV_CMD=(env "${SV_ENV[@]}" "$SV_TOOL" run -- "$prog" -d "$SRV_DEV" -p "$port" "${common[@]}")
	CLI_CMD=(env "${SV_ENV[@]}" "$SV_TOOL" run -- "$prog" -d "$CLI_DEV" -p "$port" "${common[@]}" "$SRV_HOST")
	pair_run "$path $prog${suffix:+ $suffix} $size" "$base" "$port" \
		"Couldn't connect|Unable to init the socket"
}

# sv_bw PATH PROG SIZE COLUMN [MR_COLUMN]: bandwidth in MB/s (10^6 B/s).
# perftest's "MB/sec" is 2^20 bytes per second (its format_factor is
# 0x100000).  With MR_COLUMN, the same run's message rate ("MsgRate[Mpps]",
# 10^6 messages/s) is recorded too.  A run that fails or prints no number is
# tried once more: on this VM perftest sometimes measures the CPU clock as 0
# and prints "inf".
sv_bw() {
	local v="" mr="" try
	for try in 1 2; do
		if past_deadline; then
			warn "$1 $2 $3: skipped, past BENCH_DEADLINE"
			break
		fi
		local n
		n=$(if [ -n "${BW_SECS:-}" ]; then echo "D$BW_SECS"; else bw_iters "$3"; fi)
		if perftest "$1" "$2" "$3" "$n" "$([ "$try" = 2 ] && echo -retry)"; then
			v=$(perftest_value "$PT_OUT" "$3" "BW average")
			[ -n "$v" ] && v=$(awk -v x="$v" 'BEGIN { printf "%.2f", x * 1.048576 }')
			mr=$(perftest_value "$PT_OUT" "$3" "MsgRate")
			[ -n "$v" ] && break
			warn "$1 $2 $3: no number in $PT_OUT"
		fi
	done
	record "$1" "$3" "$4" "$v"
	[ -z "${5:-}" ] || record "$1" "$3" "$5" "$mr"
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

# awk functions of the report tables, put in front of a script's awk
# program: human(BYTES) ("64K", "1M"), num(X) (X is a number, not NaN or
# empty), f(X, FMT) (X formatted, "-" when not a number).
# shellcheck disable=SC2034 # used by the sourcing scripts
AWK_TABLE_FUNCS='
	function human(b) {
		if (b >= 1048576 && b % 1048576 == 0) return (b / 1048576) "M"
		if (b >= 1024 && b % 1024 == 0) return (b / 1024) "K"
		return b
	}
	function num(x) { return x != "NaN" && x != "" }
	function f(x, fmt) { return num(x) ? sprintf(fmt, x) : "-" }
'

# run_info: the first lines of a run's info file: what was measured (version,
# commit, date) and on what machine.
run_info() {
	echo "$("$SV_TOOL" version 2>/dev/null | head -n1 || true), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u '+%Y-%m-%d %H:%M UTC')$([ "$QUICK" = 1 ] && echo ', QUICK=1')"
	echo "$(nproc) CPUs: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1), Linux $(uname -r)"
}

# finish PLOT_SCRIPT [GNUPLOT_SETTINGS]: draws $PNG from $CSV with gnuplot,
# says where the results are, and exits: 1 when a table cell has no number
# (FAILED), else 0.
finish() {
	if command -v gnuplot >/dev/null 2>&1; then
		gnuplot -e "csv='$CSV'; png='$PNG'${2:+; $2}" "$1" 2>"$LOGS/gnuplot.txt" ||
			warn "gnuplot failed (see $LOGS/gnuplot.txt)"
	else
		warn "gnuplot not installed: no plot"
	fi
	log "results: $CSV, $TABLE, $PNG; raw output in $LOGS/ ($((SECONDS - T0)) s)"
	if [ "$FAILED" -gt 0 ]; then
		warn "$FAILED table cell(s) have no number (NaN in the CSV; see the WARN lines above)"
		exit 1
	fi
	exit 0
}

# each_point FUNC LABEL: runs FUNC SIZE for each size of SIZES; at the sizes
# of TARGET_SIZES REPEAT times in a row (the script summarises repeats by
# their median), TAG set to the repeat's log-file suffix (".r2", ...).  LABEL
# starts each progress line.
each_point() {
	local size reps rep
	for size in $SIZES; do
		reps=1
		case " $TARGET_SIZES " in *" $size "*) reps=$REPEAT ;; esac
		for rep in $(seq 1 "$reps"); do
			TAG=""
			[ "$rep" -gt 1 ] && TAG=".r$rep"
			log "$2$size B${TAG:+ (repeat $rep of $reps)}"
			"$1" "$size"
		done
	done
	TAG=""
}
