#!/bin/bash
# rocev2_ipv6.sh: transport_rocev2_ipv6.
#
# RoCEv2 over IPv6 on a real link.  Two network namespaces joined by a veth
# (sva 10.211.49.1 + fd00:5356:49::1/64 in A, svb 10.211.49.2 +
# fd00:5356:49::2/64 in B; the IPv6 addresses `nodad`, usable at once),
# every program over SOFTVERBS_TRANSPORT=rocev2 and every QP addressed by
# GID index 5 (the interface's IPv6 address, RoCE v2), with tcpdump on the
# veth capturing `udp port 4791`:
#   - ibv_devinfo -v: before the IPv6 address, svb's GID[4]/[5] are empty;
#     after, sva's GID[4]/[5] are fd00:5356:49::1 (RoCE v1 / v2), and
#     GID[0]-[3] are as always (fe80::, ::ffff:IPv4);
#   - Debian's ibv_rc_pingpong -g 5 -c (4 KiB and 64 KiB: SEND FIRST,
#     MIDDLE, LAST), ibv_ud_pingpong -g 5 -c (1 KiB), ib_send_bw (RC, 512 B:
#     SEND ONLY), ib_write_bw, ib_read_bw (RC, 4 KiB), ib_atomic_bw -A
#     CMP_AND_SWAP and FETCH_AND_ADD, all with -x 5: each finishes, and
#     each prints the IPv6 addresses as its local and remote GIDs;
#   - ibv_rc_pingpong with SOFTVERBS_FAULTS=ce=0.2,seed=3 on the client (B):
#     as many of its packets carry ECN CE in the IPv6 traffic class as it
#     reports it marked, and the server (A) answers with CNPs (0x81);
#   - SOFTVERBS_ROCEV2_PEERS on the server: with an IPv6 range that holds
#     the client and one that does not (fd00:dead::/64, B's address /128)
#     the pingpong works; with fd00:dead::/64 alone the client's pingpong
#     fails (its requests are never answered: retry counter exceeded),
#     the server logs "SOFTVERBS_ROCEV2_PEERS does not admit", and the
#     capture shows B's requests and nothing from A.
#   No program but that refusing server logs a softverbs warning or error.
# Then rocev2_pcap6.py check reads the capture with scapy: every packet
# IPv6 (no IPv4 datagram to 4791) between the two addresses, its ICRC the
# one of IBA annex A17.8's IPv6 pseudo-header, traffic class ECT(0) but
# where CE was injected, the expected opcodes all there; and, where
# tshark is installed, its InfiniBand dissector reads the same opcodes.
#
# Skips (77) when not root (namespaces), without IPv6 in the kernel,
# tcpdump, python3-scapy, ibv_rc_pingpong / ibv_ud_pingpong / ibv_devinfo
# (ibverbs-utils).  A missing perftest program is reported, not skipped.
SV_BUDGET=${SV_BUDGET:-100}
. "$(dirname "$0")/../clients/lib.sh"
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
export SOFTVERBS_TRANSPORT=rocev2

[ "$(id -u)" = 0 ] || sv_skip_root "network namespaces and tcpdump"
[ -e /proc/sys/net/ipv6 ] || sv_skip "no IPv6 in this kernel (booted with ipv6.disable=1?): the test is about RoCEv2 over IPv6"
sv_require tcpdump
"$py" -c 'import scapy.contrib.roce' 2>/dev/null ||
	sv_skip_package python3-scapy "scapy's RoCE layer (scapy.contrib.roce) not found by $py"
sv_require ibv_rc_pingpong ibv_ud_pingpong ibv_devinfo

net=49
sv_netns_pair ip6 "$net"
a4=10.211.$net.1 b4=10.211.$net.2
a6=fd00:5356:$net::1 b6=fd00:5356:$net::2
pcap=$SV_WORK/rocev2_ipv6.pcap

# devinfo NAME NS DEV IPV4 IPV6|-: ibv_devinfo -v -d DEV shows the GIDs
devinfo() {
	local rc=0
	sv_run "$1" 10 "$2" ibv_devinfo -v -d "$3" || rc=$?
	mv "$SV_WORK/$1.out" "$SV_WORK/$1.txt" # not in sv_fail's dump
	[ "$rc" = 0 ] || { cat "$SV_WORK/$1.txt"; sv_fail "ibv_devinfo -d $3 exited $rc"; }
	sv_log "ibv_devinfo -v -d $3: GIDs (IPv6: ${5/-/none})"
	"$py" "$here/rocev2_pcap6.py" devinfo "$SV_WORK/$1.txt" "$4" "$5" ||
		sv_fail "ibv_devinfo -d $3: GID table"
}

# svb has no IPv6 address yet, but its link-local one: GID 4 and 5 empty
devinfo devinfo.b "$SV_NS_B" sv_svb "$b4" -
ip -n "$SV_NS_A" addr add "$a6/64" dev sva nodad &&
	ip -n "$SV_NS_B" addr add "$b6/64" dev svb nodad ||
	sv_fail "adding the IPv6 addresses (IPv6 disabled in the namespaces?)"
ip -n "$SV_NS_A" -6 addr show dev sva scope global | grep -q "$a6/64" ||
	sv_fail "sva has no $a6: $(ip -n "$SV_NS_A" -6 addr show dev sva)"
sv_log "IPv6: sva $a6/64, svb $b6/64 (nodad)"
devinfo devinfo.a "$SV_NS_A" sv_sva "$a4" "$a6"

# tcpdump in A on sva, IPv4 and IPv6 alike (an IPv4 RoCEv2 packet would be
# a fault)
sv_capture_start "$SV_NS_A" sva "$pcap"

# segment NAME: from now on the packets are NAME's
segment() { echo "$(date +%s.%N) $1" >>"$SV_WORK/segments"; }
outs=()
missing=()
port=18890

# with_env [VAR=VALUE...] -- CMD...: CMD (a function too) with those in its
# environment, nothing when there are none
with_env() {
	while [ "$1" != -- ]; do
		local -x "$1"
		shift
	done
	shift
	"$@"
}

# keep NAME: the last run's outputs, for the GID checks
keep() {
	local f
	for f in server client; do
		mv "$SV_WORK/$f.out" "$SV_WORK/$1.$f.txt"
		outs+=("$SV_WORK/$1.$f.txt")
	done
}

# run_pair NAME SERVER_ENV CLIENT_ENV PROGRAM ARGS...: PROGRAM -d sv_sva ARGS
# in A (the server, SERVER_ENV a space-separated VAR=VALUE list) and
# PROGRAM -d sv_svb ARGS 10.211.49.1 in B, given client_secs seconds (when
# set) or what is left of the budget; sets crc and src, the exit statuses
# (src 124: the server still ran 3 s after a failed client), and spid
run_pair() {
	local name=$1 senv=$2 cenv=$3 prog=$4
	shift 4
	segment "$name"
	[ -z "$senv" ] || sv_log "$name: the server with $senv"
	# shellcheck disable=SC2086 # word splitting of the VAR=VALUE lists
	with_env $senv -- sv_perftest_server "$SV_NS_A" sv_sva "$port" "$prog" "$@"
	spid=$SV_PID
	port=$SV_PORT
	sv_log "client: $prog -d sv_svb $* -p $port $a4 (netns $SV_NS_B${cenv:+, $cenv})"
	crc=0 src=0
	# shellcheck disable=SC2086
	with_env $cenv -- sv_run client "${client_secs:-$(($(sv_left) - 3))}" "$SV_NS_B" "$prog" -d sv_svb \
		-p "$port" "$@" "$a4" || crc=$?
	sv_wait "$spid" "$([ "$crc" = 0 ] && echo 10 || echo 3)" || src=$?
	port=$((port + 1))
}

# pingpong NAME PROGRAM SIZE ITERS [SERVER_ENV [CLIENT_ENV]]: both exit 0,
# with SIZE*ITERS*2 bytes moved and checked (-c)
pingpong() {
	local name=$1 prog=$2 size=$3 iters=$4
	run_pair "$name" "${5:-}" "${6:-}" "$prog" -g 5 -c -s "$size" -n "$iters"
	sv_timed_out client "$crc"
	sv_timed_out server "$src"
	[ "$crc" = 0 ] || sv_fail "$name: client exited $crc"
	[ "$src" = 0 ] || sv_fail "$name: server exited $src"
	sv_check_run server $((size * iters * 2))
	sv_check_run client $((size * iters * 2))
	keep "$name"
}

# perftest NAME PROGRAM ARGS...: server in A, client in B, both exit 0
perftest() {
	local name=$1 prog=$2
	shift 2
	if ! command -v "$prog" >/dev/null 2>&1; then
		missing+=("$prog")
		return
	fi
	run_pair "$name" "" "" "$prog" -x 5 "$@"
	[ "$crc" = 0 ] || sv_fail "$name: client exited $crc"
	[ "$src" = 0 ] || sv_fail "$name: server exited $src"
	grep -qE '^ *[0-9]+ +[0-9]+ +[0-9.]+' "$SV_WORK/client.out" ||
		sv_fail "$name: client printed no result row"
	sv_log "$name: $(grep -E '^ *[0-9]+ +[0-9]+ +[0-9.]+' "$SV_WORK/client.out" | head -n1)"
	keep "$name"
}

pingpong rc_pingpong.4k ibv_rc_pingpong 4096 5
pingpong rc_pingpong.64k ibv_rc_pingpong 65536 5
pingpong ud_pingpong ibv_ud_pingpong 1024 5
perftest send_bw ib_send_bw -c RC -s 512 -n 20
perftest write_bw ib_write_bw -c RC -s 4096 -n 20
perftest read_bw ib_read_bw -c RC -s 4096 -n 20
perftest atomic_bw.cas ib_atomic_bw -A CMP_AND_SWAP -n 20
perftest atomic_bw.faa ib_atomic_bw -A FETCH_AND_ADD -n 20

# the GIDs the programs exchanged: the IPv6 addresses, index 5
sv_log "GIDs printed (A $a6, B $b6)"
servers=() clients=()
for f in "${outs[@]}"; do
	case $f in
	*.server.txt) servers+=("$f") ;;
	*) clients+=("$f") ;;
	esac
done
"$py" "$here/rocev2_pcap6.py" gids "$a6" "$b6" "${servers[@]}" &&
	"$py" "$here/rocev2_pcap6.py" gids "$b6" "$a6" "${clients[@]}" ||
	sv_fail "the programs did not use the IPv6 addresses as GIDs"

# congestion marks: B sends a fifth of its packets with ECN CE, A answers
# with CNPs; B's report (SOFTVERBS_LOG=info) says how many it marked
pingpong rc_pingpong.ce ibv_rc_pingpong 4096 20 "" "SOFTVERBS_FAULTS=ce=0.2,seed=3 SOFTVERBS_LOG=info"
n=$(sed -n 's/.*SOFTVERBS_FAULTS: injected .*\bce \([0-9][0-9]*\).*/\1/p' \
	"$SV_WORK/rc_pingpong.ce.client.txt")
[ -n "$n" ] || {
	cat "$SV_WORK/rc_pingpong.ce.client.txt"
	sv_fail "rc_pingpong.ce: the client printed no SOFTVERBS_FAULTS report"
}
echo "expect rc_pingpong.ce ce=$n" >>"$SV_WORK/segments"
sv_log "rc_pingpong.ce: B marked $n packets CE"

# admission: an IPv6 range that holds B (and one that does not) admits B
pingpong rc_pingpong.admitted ibv_rc_pingpong 4096 5 "SOFTVERBS_ROCEV2_PEERS=fd00:dead::/64,$b6/128"
! grep -H "SOFTVERBS_ROCEV2_PEERS" "$SV_WORK/rc_pingpong.admitted.server.txt" ||
	sv_fail "rc_pingpong.admitted: the server complained of SOFTVERBS_ROCEV2_PEERS"
# one that does not: A drops B's requests, B's QP runs out of retries
# (ibv_rc_pingpong: timeout 14, 7 retries, about half a second; 15 s at most)
client_secs=15
run_pair rc_pingpong.refused "SOFTVERBS_ROCEV2_PEERS=fd00:dead::/64" "" \
	ibv_rc_pingpong -g 5 -c -s 4096 -n 5
client_secs=
echo "expect rc_pingpong.refused refused=1" >>"$SV_WORK/segments"
kill -TERM -- "-$spid" 2>/dev/null || true # the server waits for what never comes
sv_wait "$spid" 3 || true
keep rc_pingpong.refused
srv_out=$SV_WORK/rc_pingpong.refused.server.txt cli_out=$SV_WORK/rc_pingpong.refused.client.txt
[ "$crc" != 0 ] || { cat "$cli_out"; sv_fail "rc_pingpong.refused: the client succeeded"; }
! grep -q '^[0-9][0-9]* iters in ' "$cli_out" ||
	sv_fail "rc_pingpong.refused: the client finished its exchange"
grep -q "SOFTVERBS_ROCEV2_PEERS does not admit" "$srv_out" || {
	cat "$srv_out"
	sv_fail "rc_pingpong.refused: the server did not log 'SOFTVERBS_ROCEV2_PEERS does not admit'"
}
! grep -q "SOFTVERBS_ROCEV2_PEERS: .*ignored" "$srv_out" ||
	sv_fail "rc_pingpong.refused: the server ignored its SOFTVERBS_ROCEV2_PEERS"
sv_log "rc_pingpong.refused: client exited $crc ($(grep -m1 -iE 'failed|error|retry' "$cli_out" ||
	echo "no error line"))"
sv_log "server: $(grep -m1 "does not admit" "$srv_out")"
[ "$crc" = 124 ] || [ "$crc" = 137 ] ||
	grep -q "retry counter exceeded" "$cli_out" ||
	sv_log "note: the client failed without 'retry counter exceeded'"

# nothing else complained: no datagram refused (ICRC, format, admission)
# but by the server told to refuse
for f in "${outs[@]}"; do
	[ "$f" != "$srv_out" ] || continue
	! grep -HE "softverbs\[[0-9]+\] (warn|error)" "$f" ||
		sv_fail "$(basename "$f" .txt): softverbs warned"
done

sv_capture_stop
[ ${#missing[@]} = 0 ] || sv_log "not installed, not run: ${missing[*]}"

# SEND FIRST/MIDDLE/LAST/ONLY, WRITE FIRST/MIDDLE/LAST, READ request and
# responses, ACK, atomic ACK, CAS, FETCH_ADD, UD SEND ONLY, CNP
expected=0x00,0x01,0x02
command -v ib_send_bw >/dev/null 2>&1 && expected+=,0x04
command -v ib_write_bw >/dev/null 2>&1 && expected+=,0x06,0x07,0x08
command -v ib_read_bw >/dev/null 2>&1 && expected+=,0x0c,0x0d,0x0e,0x0f
expected+=,0x11
command -v ib_atomic_bw >/dev/null 2>&1 && expected+=,0x12,0x13,0x14
expected+=,0x64,0x81
"$py" "$here/rocev2_pcap6.py" check "$pcap" "$a6" "$b6" "$SV_WORK/segments" "$expected" || {
	[ -z "${SV_KEEP_PCAP:-}" ] || cp "$pcap" "$SV_KEEP_PCAP"
	sv_fail "the capture fails its checks"
}
[ -z "${SV_KEEP_PCAP:-}" ] || cp "$pcap" "$SV_KEEP_PCAP"
echo "PASS: $((SECONDS - SV_T0)) s"
