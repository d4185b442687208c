#!/bin/bash
# rocev2_capture.sh AGENT: transport_rocev2_capture.
#
# softverbs' RoCEv2 packets on a real link, checked by code nobody here
# wrote.  Two network namespaces joined by a veth (MTU 1500: path MTU 1024),
# every program over SOFTVERBS_TRANSPORT=rocev2, and tcpdump on the veth
# capturing `udp port 4791` while
#   - Debian's ibv_rc_pingpong / ibv_uc_pingpong (4 KiB: SEND FIRST, MIDDLE,
#     LAST), ibv_ud_pingpong, ib_send_bw (RC, UD), ib_write_bw (RC, UC),
#     ib_read_bw, ib_atomic_bw -A CMP_AND_SWAP and -A FETCH_AND_ADD run
#     (each must also finish as in tests/clients), then
#   - rocev2_agent (AGENT, driven by rocev2_pcap.py drive) posts what those
#     do not: SEND and RDMA WRITE with immediate (ONLY and LAST) on RC and
#     UC, UD SEND with immediate, one- and three-packet messages of every
#     kind, READs of one and three responses, CAS, FETCH_ADD; every
#     completion, immediate and byte is checked on both sides;
#   - the same agent exchange again with SOFTVERBS_FAULTS=ce=0.2 on the
#     requester (B): a fifth of its packets leave with IP ECN CE (a cmsg),
#     the rest with ECT(0), and the responder (A) answers CE-marked RC and
#     UC requests with CNPs (opcode 0x81, BECN; at most one per QP every
#     50 us; none for UD), everything still delivered and checked;
#   - ibv_rc_pingpong -c with SOFTVERBS_FAULTS=corrupt=0.05 on both sides:
#     one bit of a datagram flips after its ICRC is computed, the receiver
#     refuses it ("refused (ICRC)"), RC resends it, and every buffer
#     arrives intact (-c).
# Then rocev2_pcap.py check reads the capture with scapy's RoCE layer (BTH,
# its own ICRC) and with tshark's InfiniBand dissector: see its docstring.
# Every IBA opcode of RC (0x00-0x14), UC (0x20-0x2b) and UD (0x64, 0x65),
# and CNP (0x81), must be there at least once, and nothing else.  Under the
# faults the check counts on the wire what the programs say they injected
# (SOFTVERBS_LOG=info): as many packets with IP ECN CE, as many with a
# wrong ICRC, each of them one flipped bit away from its right ICRC.
#
# Skips (77) when not root (namespaces), or without tcpdump, tshark or
# python3-scapy.  The Debian programs are run when installed (a missing one
# is reported, not skipped: the agent alone covers every opcode).
SV_BUDGET=${SV_BUDGET:-150}
. "$(dirname "$0")/../clients/lib.sh"
set -euo pipefail

[ $# -eq 1 ] || sv_fail "usage: $0 PATH_TO_rocev2_agent"
agent=$1
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
export SOFTVERBS_TRANSPORT=rocev2

[ "$(id -u)" = 0 ] || sv_skip_root "network namespaces and tcpdump"
sv_require tcpdump tshark
"$py" -c 'import scapy.contrib.roce' 2>/dev/null ||
	sv_skip_package python3-scapy "scapy's RoCE layer (scapy.contrib.roce) not found by $py"
[ -x "$agent" ] || sv_fail "no agent at '$agent'"
[ -n "$SV_TOOL" ] && [ -x "$SV_TOOL" ] || sv_fail "softverbs tool not found (SV_TOOL='$SV_TOOL')"

net=47
sv_netns_pair cap "$net"
mtu=1024
pcap=$SV_WORK/rocev2.pcap

# tcpdump in A on sva
sv_capture_start "$SV_NS_A" sva "$pcap"

outs=()
# segment NAME: from now on the packets are NAME's (flows are per program)
segment() { echo "$(date +%s.%N) $1" >>"$SV_WORK/segments"; }
missing=()
port=18790

# keep NAME: the last run's outputs, for the QPNs they printed
keep() {
	for f in server client; do
		cp "$SV_WORK/$f.out" "$SV_WORK/$1.$f.txt"
		outs+=("$SV_WORK/$1.$f.txt")
	done
}

# pingpong PROGRAM SIZE ITERS
pingpong() {
	if ! command -v "$1" >/dev/null 2>&1; then
		missing+=("$1")
		return
	fi
	segment "$1"
	sv_pingpong "$1" "$2" "$3" "$port" "$SV_NS_A" sv_sva "$SV_NS_B" sv_svb "10.211.$net.1"
	keep "$1"
}

# perftest NAME PROGRAM ARGS...: server in A, client in B, both exit 0
perftest() {
	local name=$1 prog=$2 spid crc=0 src=0 w=0
	shift 2
	if ! command -v "$prog" >/dev/null 2>&1; then
		missing+=("$prog")
		return
	fi
	port=$(sv_free_port "$SV_NS_A" "$port")
	segment "$name"
	sv_log "$name: $prog $* (server in A, client in B)"
	sv_run_bg server "$(sv_left)" "$SV_NS_A" "$prog" -d sv_sva -x 0 -p "$port" "$@"
	spid=$SV_PID
	sv_wait_listen "$SV_NS_A" "$port" "$spid" || w=$?
	[ "$w" = 0 ] || sv_fail "$name: server did not listen on port $port ($w)"
	sv_run client "$(($(sv_left) - 3))" "$SV_NS_B" "$prog" -d sv_svb -x 0 -p "$port" "$@" \
		"10.211.$net.1" || crc=$?
	sv_wait "$spid" "$([ "$crc" = 0 ] && echo 10 || echo 3)" || src=$?
	[ "$crc" = 0 ] || sv_fail "$name: client exited $crc"
	[ "$src" = 0 ] || sv_fail "$name: server exited $src"
	grep -qE '^ *[0-9]+ +[0-9]+ +[0-9.]+' "$SV_WORK/client.out" ||
		sv_fail "$name: client printed no result row"
	keep "$name"
}

pingpong ibv_rc_pingpong 4096 5
pingpong ibv_uc_pingpong 4096 5
pingpong ibv_ud_pingpong 1024 5
perftest send_bw.rc ib_send_bw -c RC -s 4096 -n 20
perftest send_bw.ud ib_send_bw -c UD -s 1024 -n 20
perftest write_bw.rc ib_write_bw -c RC -s 4096 -n 20
perftest write_bw.uc ib_write_bw -c UC -s 4096 -n 20
perftest read_bw ib_read_bw -c RC -s 4096 -n 20
perftest atomic_bw.cas ib_atomic_bw -A CMP_AND_SWAP -n 20
perftest atomic_bw.faa ib_atomic_bw -A FETCH_AND_ADD -n 20
segment agent
sv_log "rocev2_agent: the opcodes with immediates, UC/UD, one- and three-packet messages"
"$py" "$here/rocev2_pcap.py" drive "$agent" "$SV_NS_A" sv_sva "$SV_NS_B" sv_svb "$mtu" \
	"$SV_WORK/agent.qpns" "$SV_WORK/agent.out" || sv_fail "agent exchange failed"

# injected LOG... KIND: what the programs' SOFTVERBS_FAULTS report (at exit,
# SOFTVERBS_LOG=info) says they injected of KIND, summed
injected() {
	local kind=${*: -1} n=0 v f
	for f in "${@:1:$#-1}"; do
		v=$(sed -n "s/.*SOFTVERBS_FAULTS: injected .*\b$kind \([0-9][0-9]*\).*/\1/p" "$f")
		[ -n "$v" ] || sv_fail "$(basename "$f"): no SOFTVERBS_FAULTS report"
		n=$((n + v))
	done
	echo "$n"
}

# congestion marks: the requester (B) sends a fifth of its packets CE
segment agent.ce
sv_log "rocev2_agent again, B with SOFTVERBS_FAULTS=ce=0.2: IP ECN CE, CNPs back"
"$py" "$here/rocev2_pcap.py" drive "$agent" "$SV_NS_A" sv_sva "$SV_NS_B" sv_svb "$mtu" \
	"$SV_WORK/agent_ce.qpns" "$SV_WORK/agent_ce.out" "ce=0.2,seed=6" ||
	sv_fail "agent exchange under ce=0.2 failed"
cat "$SV_WORK/agent_ce.qpns" >>"$SV_WORK/agent.qpns"
n=$(injected "$SV_WORK/agent_ce.out" ce)
echo "expect agent.ce ce=$n" >>"$SV_WORK/segments"
sv_log "B marked $n packets CE"

# corruption: one bit of a datagram after its ICRC; RC resends what the
# receiver refused, the pingpong checks every buffer (-c)
# A pingpong's last ACK lost as its receiver exits leaves the other side
# retrying into a closed QP (RETRY_EXC_ERR), as over any lossy RoCE
# network: at 5 % that is a few runs in a hundred, so such a run (and only
# such a run) is tried again, up to three times, each in a segment of its
# own whose corrupted datagrams the capture accounts for as well.
if command -v ibv_rc_pingpong >/dev/null 2>&1; then
	for try in 1 2 3; do
		name=rc_pingpong.corrupt
		[ "$try" = 1 ] || name=rc_pingpong.corrupt.try$try
		segment "$name"
		prc=0
		(SOFTVERBS_FAULTS=corrupt=0.05,seed=$((2 + try)) SOFTVERBS_LOG=info \
			sv_pingpong ibv_rc_pingpong 4096 100 "$port" "$SV_NS_A" sv_sva "$SV_NS_B" sv_svb \
			"10.211.$net.1") >"$SV_WORK/corrupt.try$try.log" 2>&1 || prc=$?
		keep "$name"
		n=$(injected "$SV_WORK/server.out" "$SV_WORK/client.out" corrupt)
		echo "expect $name corrupt=$n" >>"$SV_WORK/segments"
		[ "$prc" != 0 ] || break
		grep -q "transport retry counter exceeded" "$SV_WORK/server.out" \
			"$SV_WORK/client.out" && [ "$try" != 3 ] || {
			cat "$SV_WORK/corrupt.try$try.log"
			sv_fail "rc_pingpong.corrupt: try $try failed"
		}
		sv_log "rc_pingpong.corrupt try $try: a last ACK lost at exit (retry counter" \
			"exceeded); again"
		port=$((port + 1))
	done
	grep -q "refused (ICRC)" "$SV_WORK/server.out" "$SV_WORK/client.out" ||
		sv_fail "rc_pingpong.corrupt: $n datagrams corrupted, no receiver refused one (ICRC)"
	sv_log "ibv_rc_pingpong under corrupt=0.05: $n datagrams corrupted, data checked (-c)"
else
	missing+=("ibv_rc_pingpong (corrupt=0.05)")
fi

sv_capture_stop
[ ${#missing[@]} = 0 ] || sv_log "not installed, not run: ${missing[*]}"

expected=0x00,0x01,0x02,0x03,0x04,0x05,0x06,0x07,0x08,0x09,0x0a,0x0b,0x0c,0x0d,0x0e,0x0f
expected+=,0x10,0x11,0x12,0x13,0x14
expected+=,0x20,0x21,0x22,0x23,0x24,0x25,0x26,0x27,0x28,0x29,0x2a,0x2b,0x64,0x65,0x81
"$py" "$here/rocev2_pcap.py" check "$pcap" "$mtu" "$SV_WORK/agent.qpns" "$SV_WORK/segments" \
	"$expected" \
	"${outs[@]}" || {
	[ -z "${SV_KEEP_PCAP:-}" ] || cp "$pcap" "$SV_KEEP_PCAP"
	sv_fail "the capture fails its checks"
}
[ -z "${SV_KEEP_PCAP:-}" ] || cp "$pcap" "$SV_KEEP_PCAP"
echo "PASS: $(($SECONDS - SV_T0)) s"
