# Shared helpers for the client tests: Debian's unmodified ibverbs-utils
# binaries run over softverbs through `softverbs run`.  Sourced by the
# scripts in this folder; CTest sets SV_TOOL to build/bin/softverbs.
#
# Every process a test starts runs under timeout(1), which makes itself a
# process-group leader: cleanup kills that whole group, and the group id also
# tells our own pingpong server apart from a stranger's listener on the same
# TCP port.  The whole script stays inside SV_BUDGET seconds so that it ends,
# and cleans up, before CTest's TIMEOUT (60 s) would kill it.

set -u

SV_TOOL=${SV_TOOL:-}
SV_BUDGET=${SV_BUDGET:-50}
SV_T0=$SECONDS
SV_WORK=$(mktemp -d "${TMPDIR:-/tmp}/sv-clients.XXXXXX")
SV_PGIDS=()      # process groups (timeout pids) to kill on exit
SV_NETNS=()      # network namespaces to delete on exit

sv_log()  { echo "-- $*"; }
sv_skip() { echo "SKIP: $*"; exit 77; }

# sv_skip_package "PACKAGE..." WHAT: skip (77), saying that WHAT is missing,
# which Debian packages bring it and how to install them.  The summary of
# `make test` lists these lines (scripts/test-summary.sh).
sv_skip_package() {
	local kind="Debian package"
	[[ $1 != *' '* ]] || kind="Debian packages"
	sv_skip "$2: install $kind $1 (apt-get install $1; scripts/install-deps.sh --all installs every package the tests use)"
}

# sv_skip_root FOR: skip (77): the test needs root for FOR.
sv_skip_root() {
	sv_skip "needs root for $1: run the tests as root (sudo make test) to include it"
}

# Print everything the started programs wrote, then fail.
sv_fail() {
	echo "FAIL: $*"
	local f
	for f in "$SV_WORK"/*.out; do
		[ -e "$f" ] || continue
		echo "==== $(basename "$f" .out) ===="
		cat "$f"
	done
	exit 1
}

sv_left() { echo $((SV_BUDGET - (SECONDS - SV_T0))); }

sv_cleanup() {
	local rc=$? g ns
	trap - EXIT
	# Scripts may run with `set -e`; here a kill of a group that is already
	# gone fails by design and must not cut the cleanup short.
	set +e
	for g in "${SV_PGIDS[@]}"; do
		kill -TERM -- "-$g" 2>/dev/null
	done
	for g in "${SV_PGIDS[@]}"; do
		for _ in 1 2 3 4 5 6 7 8 9 10; do
			kill -0 -- "-$g" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL -- "-$g" 2>/dev/null
	done
	for ns in "${SV_NETNS[@]}"; do
		ip netns del "$ns" 2>/dev/null
	done
	# under SOFTVERBS_FAULTS the programs must really have lost packets
	# (each prints what it injected at exit, with SOFTVERBS_LOG=info).  No
	# `cat | grep -q`: grep leaves at the first match, cat may then die of
	# SIGPIPE, and under a caller's pipefail (perftest.sh) the pipeline
	# fails although the line is there
	if [ "$rc" = 0 ] && [ -n "${SV_EXPECT_FAULTS:-}" ] &&
		! grep -qsE 'SOFTVERBS_FAULTS: injected .*drop [1-9]' "$SV_WORK"/*.out; then
		echo "FAIL: SOFTVERBS_FAULTS was set, but no program reports a packet dropped"
		grep -H 'SOFTVERBS_FAULTS' "$SV_WORK"/*.out 2>/dev/null
		rc=1
	fi
	rm -rf "$SV_WORK"
	exit "$rc"
}
trap sv_cleanup EXIT
trap 'exit 130' INT TERM HUP

# sv_require PROGRAM...: the programs must exist (skip otherwise), and so must
# the softverbs tool (fail otherwise: it is part of this build).
# sv_package_of PROG: the Debian package that installs PROG.
sv_package_of() {
	case $1 in
	ibv_*) echo ibverbs-utils ;;
	ib_*) echo perftest ;;
	rping | udaddy | ucmatose | rdma_server | rdma_client | rdma_xserver | rdma_xclient | \
		cmtime | mckey | rstream | riostream | rcopy | udpong) echo rdmacm-utils ;;
	ucx_*) echo ucx-utils ;;
	mpirun | mpicc) echo "openmpi-bin libopenmpi-dev" ;;
	mpiexec.mpich) echo mpich ;;
	mpicc.mpich) echo mpich ;;
	fi_*) echo libfabric-bin ;;
	dtest | dapltest) echo dapl2-utils ;;
	qemu-system-x86_64) echo qemu-system-x86 ;;
	mkfs.ext4) echo e2fsprogs ;;
	ip) echo iproute2 ;;
	groff) echo groff-base ;;
	unshare) echo util-linux ;;
	*) echo "$1" ;;
	esac
}

# sv_require PROG...: skip (77) unless every PROG is installed, naming the
# packages that bring the missing ones and how to install them.
sv_require() {
	local p progs=() pkgs=()
	for p in "$@"; do
		command -v "$p" >/dev/null 2>&1 && continue
		progs+=("$p")
		# shellcheck disable=SC2207 # a program may need two packages
		pkgs+=($(sv_package_of "$p"))
	done
	[ ${#progs[@]} = 0 ] ||
		sv_skip_package "$(printf '%s\n' "${pkgs[@]}" | sort -u | xargs)" "${progs[*]} not installed"
	[ -n "$SV_TOOL" ] && [ -x "$SV_TOOL" ] ||
		sv_fail "softverbs tool not found (SV_TOOL='$SV_TOOL'); run 'make' first"
}

# sv_in NS CMD...: run CMD in network namespace NS ("" = this one).
sv_in() {
	local ns=$1; shift
	if [ -n "$ns" ]; then
		ip netns exec "$ns" "$@"
	else
		"$@"
	fi
}

# sv_run_bg NAME SECS NS PROGRAM ARGS...: start PROGRAM over softverbs in the
# background, output in $SV_WORK/NAME.out; sets SV_PID (also its pgid).
sv_run_bg() {
	local name=$1 secs=$2 ns=$3 prog=$4; shift 4
	local path; path=$(command -v "$prog")
	# The output file starts with the command line, for failure reports.
	echo "\$ ${ns:+ip netns exec $ns }softverbs run -- $prog $*" >"$SV_WORK/$name.out"
	# Line-buffered stdout, so that a program killed on timeout still shows
	# how far it got.
	local run=("$SV_TOOL" run -- "$path" "$@")
	command -v stdbuf >/dev/null 2>&1 && run=(stdbuf -oL "${run[@]}")
	# SV_NICE: a scheduling priority for a program whose own deadlines are
	# shorter than a loaded machine keeps (udpong's 1 ms resend timer)
	if [ -n "${SV_NICE:-}" ] && [ "$(id -u)" = 0 ]; then
		run=(nice -n "$SV_NICE" "${run[@]}")
	fi
	if [ -n "$ns" ]; then
		run=(ip netns exec "$ns" "${run[@]}")
	fi
	timeout -k 2 "$secs" "${run[@]}" >>"$SV_WORK/$name.out" 2>&1 &
	SV_PID=$!
	SV_PGIDS+=("$SV_PID")
}

# sv_run NAME SECS NS PROGRAM ARGS...: the same in the foreground; returns the
# program's exit status (124 when it ran out of time).
sv_run() {
	sv_run_bg "$@"
	local rc=0
	wait "$SV_PID" || rc=$?
	return "$rc"
}

# sv_wait PID SECS: wait up to SECS for background PID; its exit status, or
# 124 if it still runs (cleanup kills it).
sv_wait() {
	local deadline=$((SECONDS + $2))
	while kill -0 "$1" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
		sleep 0.05
	done
	kill -0 "$1" 2>/dev/null && return 124
	wait "$1"
}

# sv_wait_both CPID SPID: wait for a client (what the budget leaves) and
# then its server (10 s more, 3 if the client failed); fails the test when
# either timed out or exited nonzero.
sv_wait_both() {
	local crc=0 src=0
	sv_wait "$1" "$(($(sv_left) - 3))" || crc=$?
	sv_wait "$2" "$([ "$crc" = 0 ] && echo 10 || echo 3)" || src=$?
	[ "$crc" != 124 ] && [ "$crc" != 137 ] || sv_fail "client timed out"
	[ "$src" != 124 ] && [ "$src" != 137 ] || sv_fail "server timed out"
	[ "$crc" = 0 ] || sv_fail "client exited $crc"
	[ "$src" = 0 ] || sv_fail "server exited $src"
}

# sv_capture_start NS IFACE PCAP: tcpdump in NS on IFACE, `udp port 4791`
# (RoCEv2, IPv4 and IPv6), into PCAP, until sv_capture_stop; returns once it
# listens.  --immediate-mode: each packet is written as it comes (else the
# last block may be lost when it is stopped).  -s 9216: in immediate mode
# libpcap's ring has fixed slots sized by the snap length, 256 KiB by
# default on a veth with offloads, so -B 32 MiB held only ~128 packets and a
# burst while tcpdump waited for a core was dropped; 9216 bytes is above the
# veths' MTU (a longer frame would be cut, and its ICRC check would fail).
sv_capture_start() {
	timeout -k 2 "$(sv_left)" ip netns exec "$1" tcpdump -i "$2" -n --immediate-mode -U \
		-s 9216 -B 32768 -w "$3" udp port 4791 2>"$SV_WORK/tcpdump.err" &
	SV_CAPTURE_PID=$!
	SV_PGIDS+=("$SV_CAPTURE_PID")
	for _ in $(seq 100); do
		grep -q "listening on" "$SV_WORK/tcpdump.err" 2>/dev/null && return 0
		kill -0 "$SV_CAPTURE_PID" 2>/dev/null || sv_fail "tcpdump: $(cat "$SV_WORK/tcpdump.err")"
		sleep 0.1
	done
	sv_fail "tcpdump did not start"
}

# sv_capture_stop: the last packets in, then tcpdump stops (SIGINT: it
# finishes the file); fails the test if it lost packets, which would read
# as softverbs' own gaps.
sv_capture_stop() {
	sleep 0.3
	kill -INT "$SV_CAPTURE_PID" 2>/dev/null || true
	sv_wait "$SV_CAPTURE_PID" 5 || true
	grep -E "captured|dropped" "$SV_WORK/tcpdump.err" | sed 's/^/   tcpdump: /' || true
	! grep -qE "^[1-9][0-9]* packets? dropped by kernel" "$SV_WORK/tcpdump.err" ||
		sv_fail "tcpdump lost packets (the capture is incomplete, the checks would mislead)"
}

# sv_start_server NS PORT PROGRAM ARGS...: PROGRAM over softverbs in the
# background as "server" (SV_SPID), until it listens on TCP PORT in NS.
sv_start_server() {
	local ns=$1 p=$2 w=0
	shift 2
	sv_run_bg server "$(sv_left)" "$ns" "$@"
	SV_SPID=$SV_PID
	sv_wait_listen "$ns" "$p" "$SV_SPID" || w=$?
	[ "$w" = 0 ] || sv_fail "server did not listen on port $p (wait $w)"
}

# sv_finish CLIENT_RC: the client exited 0, and so does the server
# (SV_SPID), given 15 s after the client (3 s after a client that failed).
sv_finish() {
	local crc=$1 src=0
	sv_wait "$SV_SPID" "$([ "$crc" = 0 ] && echo 15 || echo 3)" || src=$?
	[ "$crc" = 0 ] || sv_fail "client exited $crc"
	[ "$src" = 0 ] || sv_fail "server exited $src"
}

# sv_pgid PID: process group of PID (empty if gone).
sv_pgid() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
	stat=${stat##*) }           # comm may hold spaces; fields after it
	local _state _ppid pgrp _rest
	read -r _state _ppid pgrp _rest <<<"$stat"
	echo "$pgrp"
}

# sv_port_free NS PORT: true if nothing listens on TCP PORT in NS.
sv_port_free() {
	[ -z "$(sv_in "$1" ss -Hltn "sport = :$2")" ]
}

# sv_free_port NS PORT: the first port from PORT on that nothing listens on.
sv_free_port() {
	local ns=$1 p=$2
	while ! sv_port_free "$ns" "$p"; do
		p=$((p + 1))
	done
	echo "$p"
}

# sv_stat_frozen FILE PGID...: one `softverbs stat --json` snapshot of the
# host into FILE, taken with the process groups PGID... (sv_run_bg's, which
# timeout(1) makes) stopped (SIGSTOP), so that it finds their contexts
# alive however late this shell gets a CPU on a busy machine; they go on
# (SIGCONT) before it returns.  Fails the test if stat fails.
sv_stat_frozen() {
	local file=$1 rc=0 g
	shift
	for g in "$@"; do kill -STOP -- "-$g" 2>/dev/null || true; done
	"$SV_TOOL" stat --json >"$file" 2>"$SV_WORK/stat.err" || rc=$?
	for g in "$@"; do kill -CONT -- "-$g" 2>/dev/null || true; done
	[ "$rc" = 0 ] || sv_fail "softverbs stat --json failed: $(cat "$SV_WORK/stat.err")"
}

# sv_stat_rc_sums FILE NS COMM KEY...: from a stat --json snapshot, the sums
# of the counters KEY... over the RC QPs of the contexts of program COMM in
# network namespace NS (told apart by the namespace's inode: other tests'
# namespaces have devices of the same names), one line; nothing when there
# is no such QP.
sv_stat_rc_sums() {
	local file=$1 ino comm=$3
	ino=$(stat -L -c %i "/run/netns/$2") || sv_fail "no inode for namespace $2"
	shift 3
	python3 - "$file" "$ino" "$comm" "$@" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ino, comm, keys = int(sys.argv[2]), sys.argv[3], sys.argv[4:]
tot, found = dict.fromkeys(keys, 0), False
for c in d.get("contexts", []):
    if c.get("netns") != ino or c.get("comm") != comm:
        continue
    for q in c.get("qps", []):
        if q.get("type") == "RC":
            found = True
            for k in keys:
                tot[k] += q["counters"][k]
if found:
    print(*(tot[k] for k in keys))
PY
}

# sv_wait_listen NS PORT PGID: wait until a process of group PGID (our server)
# listens on TCP PORT.  Returns 1 if the group died first, 2 on timeout.
sv_wait_listen() {
	local ns=$1 port=$2 pgid=$3 pid
	local deadline=$((SECONDS + 20))
	while [ "$SECONDS" -lt "$deadline" ]; do
		kill -0 "$pgid" 2>/dev/null || return 1
		for pid in $(sv_in "$ns" ss -Hltnp "sport = :$port" |
			grep -o 'pid=[0-9]*' | cut -d= -f2); do
			[ "$(sv_pgid "$pid")" = "$pgid" ] && return 0
		done
		sleep 0.05
	done
	return 2
}

# sv_check_run NAME EXPECTED_BYTES: the "N bytes in S seconds" line that the
# pingpongs print at the end must be there with N = EXPECTED_BYTES, the
# "iters in" line too, and no "invalid data in page" (-c, --chk) report.
sv_check_run() {
	local name=$1 expect=$2 f="$SV_WORK/$1.out" bytes
	bytes=$(sed -n 's/^\([0-9][0-9]*\) bytes in [0-9.]* seconds.*/\1/p' "$f")
	[ -n "$bytes" ] || sv_fail "$name printed no 'bytes in ... seconds' line"
	[ "$bytes" = "$expect" ] || sv_fail "$name moved $bytes bytes, expected $expect"
	grep -q '^[0-9][0-9]* iters in ' "$f" || sv_fail "$name printed no 'iters in' line"
	! grep -q 'invalid data' "$f" || sv_fail "$name: received data failed validation (-c)"
	grep -m1 '^[0-9]* bytes in' "$f" | sed "s/^/   $name: /"
}

# sv_timed_out NAME RC: fail if RC says NAME ran out of time, telling apart
# a hang in the exchange from one after it (in ibv_destroy_* / close).
sv_timed_out() {
	[ "$2" = 124 ] || [ "$2" = 137 ] || return 0
	if grep -q '^[0-9][0-9]* iters in ' "$SV_WORK/$1.out"; then
		sv_fail "$1 finished the exchange but then hung (teardown: destroy/close)"
	fi
	sv_fail "$1 timed out"
}

# sv_gid NAME: the local GID a pingpong printed ("local address: ... GID g").
sv_gid() {
	sed -n 's/^ *local address:.*GID \([^ ]*\).*/\1/p' "$SV_WORK/$1.out" | head -n1
}

# sv_pingpong PROGRAM SIZE ITERS PORT SRV_NS SRV_DEV CLI_NS CLI_DEV SRV_HOST [ARGS...]
# One pingpong: server and client as separate processes, each with
# `-d DEV -g 0 -c -s SIZE -n ITERS -p PORT ARGS` (no -d where DEV is ""); both
# must exit 0 and both must report SIZE*ITERS*2 bytes moved with validated data.
sv_pingpong() {
	local prog=$1 size=$2 iters=$3 port=$4 sns=$5 sdev=$6 cns=$7 cdev=$8 host=$9
	shift 9
	local common=(-g 0 -c -s "$size" -n "$iters" "$@")
	local srv_rc cli_rc spid listening=0
	local sd=(-d "$sdev") cd=(-d "$cdev")
	[ -n "$sdev" ] || sd=()
	[ -n "$cdev" ] || cd=()

	for _ in 1 2 3; do
		port=$(sv_free_port "$sns" "$port")
		sv_log "server: $prog -d $sdev ${common[*]} -p $port ${sns:+(netns $sns)}"
		sv_run_bg server "$(sv_left)" "$sns" "$prog" ${sd[@]+"${sd[@]}"} -p "$port" "${common[@]}"
		spid=$SV_PID
		local w=0
		sv_wait_listen "$sns" "$port" "$spid" || w=$?
		[ "$w" = 2 ] && sv_fail "server did not listen on port $port within 20 s"
		if [ "$w" = 1 ]; then
			# Lost a race for the port with another program: take the next.
			if grep -q "Couldn't listen to port" "$SV_WORK/server.out"; then
				port=$((port + 1))
				continue
			fi
			wait "$spid"; srv_rc=$?
			sv_fail "server exited ($srv_rc) before listening"
		fi
		listening=1
		break
	done
	[ "$listening" = 1 ] || sv_fail "server could not listen on a TCP port"

	for _ in 1 2 3; do
		sv_log "client: $prog -d $cdev ${common[*]} -p $port $host ${cns:+(netns $cns)}"
		cli_rc=0
		sv_run client "$(($(sv_left) - 3))" "$cns" "$prog" ${cd[@]+"${cd[@]}"} -p "$port" \
			"${common[@]}" "$host" || cli_rc=$?
		if [ "$cli_rc" != 0 ] && grep -q "Couldn't connect to" "$SV_WORK/client.out" &&
			kill -0 "$spid" 2>/dev/null; then
			sleep 0.5
			continue
		fi
		break
	done

	# The server ends right after the client; when the client failed, it
	# may wait for messages that never come: give it a few seconds only.
	srv_rc=0
	sv_wait "$spid" "$([ "$cli_rc" = 0 ] && sv_left || echo 3)" || srv_rc=$?
	sv_timed_out client "$cli_rc"
	sv_timed_out server "$srv_rc"
	[ "$cli_rc" = 0 ] || sv_fail "client exited $cli_rc"
	[ "$srv_rc" = 0 ] || sv_fail "server exited $srv_rc"

	local expect=$((size * iters * 2))
	sv_check_run server "$expect"
	sv_check_run client "$expect"
	local g; g=$(sv_gid server)
	[ -n "$g" ] && [ "$g" != "::" ] || sv_fail "server's GID index 0 is empty ('$g')"
	sv_log "GIDs: server $g, client $(sv_gid client)"
}

# sv_perftest_server NS DEV PORT PROG ARGS...: a perftest server, PROG -d DEV
# -p P ARGS in namespace NS (empty: here), listening on P, the first port
# from PORT that is free; another program may take a port between the check
# and perftest's bind, and then the next one is tried.  Sets SV_PORT to P
# and SV_PID to the server's.
sv_perftest_server() {
	local ns=$1 dev=$2 port=$3 prog=$4 w
	shift 4
	for _ in 1 2 3; do
		port=$(sv_free_port "$ns" "$port")
		sv_log "server: $prog -d $dev $* -p $port ${ns:+(netns $ns)}"
		sv_run_bg server "$(sv_left)" "$ns" "$prog" -d "$dev" -p "$port" "$@"
		w=0
		sv_wait_listen "$ns" "$port" "$SV_PID" || w=$?
		[ "$w" != 2 ] || sv_fail "server did not listen on port $port within 20 s"
		if [ "$w" = 0 ]; then
			SV_PORT=$port
			return 0
		fi
		grep -qE "Couldn't listen to port|Failed to bind" "$SV_WORK/server.out" ||
			sv_fail "server exited before listening on port $port"
		port=$((port + 1))
	done
	sv_fail "server could not listen on a TCP port"
}

# sv_netns_add NS: make network namespace NS, or skip (77) saying why not
# (root, but not allowed: an unprivileged container).
sv_netns_add() {
	local err
	err=$(ip netns add "$1" 2>&1) ||
		sv_skip "ip netns add failed here ($err): network namespaces need CAP_SYS_ADMIN, which an unprivileged container does not give"
}

# sv_require_ipv6_lo: skip (77) unless this host has ::1 (a host or
# container may have IPv6 turned off).
sv_require_ipv6_lo() {
	ip -6 addr show dev lo 2>/dev/null | grep -q 'inet6 ::1/' ||
		sv_skip "no IPv6 loopback address (::1) on this host"
}

# sv_netns_pair TAG NET [ipv6|ipv6only]: two fresh namespaces $SV_NS_A /
# $SV_NS_B joined by a veth pair sva (10.211.NET.1/24, in A) <-> svb
# (10.211.NET.2/24, in B), lo up in both; with "ipv6", dual-stack:
# fd00:211:NET::1/64 and ::2 too; with "ipv6only", sva and svb have those
# IPv6 addresses alone, and a second pair oa (10.211.NET.1) <-> ob
# (10.211.NET.2) carries what programs exchange over IPv4 (the pingpongs'
# own TCP connection, which is IPv4 only).  The addresses exist only inside
# these namespaces.  Skips (77) when not root or when namespaces/veth cannot
# be made here.
# sv_wire_packets NS IFACE [NS IFACE...]: the interfaces cut what leaves
# them into packets before it goes, as a NIC without UDP segmentation
# offload does.  The rocev2 transport hands the kernel runs of datagrams in
# one message (UDP GSO: rocev2.c), which a veth would otherwise carry whole
# to the receiving socket: a capture or a raw socket there would see a run as
# one frame.  So what tcpdump and the tests' own peers see is what such a
# NIC puts on the wire, each packet's IPv4 identification (which the ICRC
# covers) as the kernel numbers them.  Without ethtool, softverbs sends a
# datagram each instead (SOFTVERBS_ROCEV2_GSO=0), and says so.
sv_wire_packets() {
	if ! command -v ethtool >/dev/null 2>&1; then
		[ -n "${SOFTVERBS_ROCEV2_GSO:-}" ] ||
			sv_log "no ethtool: rocev2 sends a datagram each (SOFTVERBS_ROCEV2_GSO=0)"
		export SOFTVERBS_ROCEV2_GSO=0
		return 0
	fi
	while [ $# -ge 2 ]; do
		ip netns exec "$1" ethtool -K "$2" tx-udp-segmentation off >/dev/null 2>&1 ||
			sv_fail "ethtool -K $2 tx-udp-segmentation off (in $1) failed"
		shift 2
	done
}

sv_netns_pair() {
	local tag=$1 net=$2 v6=${3:-} a=sva b=svb
	[ "$(id -u)" = 0 ] || sv_skip_root "network namespaces"
	command -v ip >/dev/null 2>&1 || sv_skip_package iproute2 "ip(8) not installed"
	SV_NS_A="svt-$tag-$$-a"
	SV_NS_B="svt-$tag-$$-b"
	sv_netns_add "$SV_NS_A"
	SV_NETNS+=("$SV_NS_A")
	ip netns add "$SV_NS_B" || sv_fail "ip netns add $SV_NS_B"
	SV_NETNS+=("$SV_NS_B")
	ip -n "$SV_NS_A" link add sva type veth peer name svb netns "$SV_NS_B" 2>/dev/null ||
		sv_skip "cannot create a veth pair here (no veth module in this kernel?): the test needs one between two network namespaces"
	if [ "$v6" = ipv6only ]; then
		ip -n "$SV_NS_A" link add oa type veth peer name ob netns "$SV_NS_B" &&
			ip -n "$SV_NS_A" link set sva up && ip -n "$SV_NS_B" link set svb up ||
			sv_fail "configuring the second veth pair"
		a=oa b=ob
	fi
	ip -n "$SV_NS_A" addr add "10.211.$net.1/24" dev $a &&
		ip -n "$SV_NS_B" addr add "10.211.$net.2/24" dev $b &&
		ip -n "$SV_NS_A" link set lo up && ip -n "$SV_NS_B" link set lo up &&
		ip -n "$SV_NS_A" link set $a up && ip -n "$SV_NS_B" link set $b up ||
		sv_fail "configuring the veth pair"
	sv_wire_packets "$SV_NS_A" sva "$SV_NS_B" svb
	[ "$a" = sva ] || sv_wire_packets "$SV_NS_A" $a "$SV_NS_B" $b
	if [ -n "$v6" ]; then
		# nodad: usable at once, not after duplicate address detection
		ip -n "$SV_NS_A" addr add "fd00:211:$net::1/64" dev sva nodad &&
			ip -n "$SV_NS_B" addr add "fd00:211:$net::2/64" dev svb nodad ||
			sv_skip "no IPv6 here (ip addr add fd00:211:$net::1/64 failed)"
		# the link-local addresses (GIDs 0 and 1) serve once duplicate
		# address detection has passed
		local dad=$((SECONDS + 10))
		while ip -n "$SV_NS_A" -6 addr show dev sva | grep -q tentative ||
			ip -n "$SV_NS_B" -6 addr show dev svb | grep -q tentative; do
			[ "$SECONDS" -lt "$dad" ] || sv_fail "IPv6 addresses still tentative after 10 s"
			sleep 0.05
		done
	fi
	local deadline=$((SECONDS + 5))
	until ip -n "$SV_NS_A" link show sva | grep -q LOWER_UP &&
		ip -n "$SV_NS_B" link show svb | grep -q LOWER_UP; do
		[ "$SECONDS" -lt "$deadline" ] || sv_fail "veth pair did not come up"
		sleep 0.05
	done
	sv_log "netns $SV_NS_A (sva 10.211.$net.1) <-> $SV_NS_B (svb 10.211.$net.2)"
}
