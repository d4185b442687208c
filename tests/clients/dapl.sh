#!/bin/bash
# dapl.sh MODE PROVIDER
#
# Debian's unmodified dtest (dapl2-utils) over softverbs: uDAPL's providers
# on top of libibverbs.so.1 and librdmacm.so.1, a server and a client
# process, both through `softverbs run`.
#   PROVIDER scm: libdaploscm (socket CM): the provider opens the verbs
#                 device named in dat.conf and swaps QP numbers and GIDs
#                 over its own TCP socket, then moves the QP through
#                 INIT/RTR/RTS itself (dapls_modify_qp_state).
#   PROVIDER cma: libdaplofa (rdma_cm): dat.conf names an IP address, which
#                 rdma_bind_addr turns into a device.
#   MODE lo:    both on this host.  scm uses device sv_lo, the provider's
#               socket on 127.0.0.1 (DAPL_SCM_NETDEV=lo).  cma needs an
#               address with a device: a loopback bind names none (as in
#               Linux's CM), so it takes the host's first global IPv4
#               address (skip if there is none).
#   MODE netns: server in one network namespace (sv_sva, 10.211.N.1), client
#               in another (sv_svb, .2), joined by a veth pair (needs root,
#               else skip 77).
# dat.conf names devices of real HCAs (mlx4_0, ...): each side gets its own
# (DAT_OVERRIDE) with one entry for its softverbs device or address, under
# one provider name, which the dtest server hands its client.
#
# Two runs: dtest's default exchange (SENDs, 100 RDMA WRITEs each way, RDMA
# READs, 100 SEND ping-pongs of 64 KiB; the strings each side finds in its
# buffers are checked), and -D: 500 RDMA WRITE ping-pongs of 64 KiB, the
# client comparing every echo with what it wrote.  dtest exits 0 after a
# failure too: "DAPL Test Complete. PASSED" is what counts.
#
# dtest's ports are fixed: TCP 15828 (the server hands its address and
# provider name to the client there) and 45248 (the connection qualifier:
# the scm provider's listening socket, or the rdma_cm port).  On one host the
# tests take turns (RESOURCE_LOCK) and wait for others to let go of them.
. "$(dirname "$0")/lib.sh"

[ $# -eq 2 ] || sv_fail "usage: $0 lo|netns scm|cma"
mode=$1 prov=$2
command -v dtest >/dev/null 2>&1 ||
	sv_skip "dtest not installed (Debian dapl2-utils; scripts/install-deps.sh installs it)"
case $prov in
scm) lib=libdaploscm.so.2 ;;
cma) lib=libdaplofa.so.2 ;;
*) sv_fail "unknown provider '$prov'" ;;
esac
{ ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } | grep -qF "$lib" ||
	sv_skip "$lib not installed (Debian libdapl2, with dapl2-utils; scripts/install-deps.sh installs it)"
[ -n "$SV_TOOL" ] && [ -x "$SV_TOOL" ] || sv_fail "softverbs tool not found (SV_TOOL='$SV_TOOL')"
[ -e "$(dirname "$SV_TOOL")/../lib/librdmacm.so.1" ] || sv_fail "librdmacm.so.1 not built"

PARAM_PORT=15828 CONN_PORT=45248
name="sv-dapl-$prov"

case $mode in
lo)
	sns="" cns=""
	if [ "$prov" = scm ]; then
		sdev=sv_lo cdev=sv_lo snet=lo cnet=lo host=127.0.0.1
	else
		host=$(ip -4 -o addr show scope global up 2>/dev/null | awk '{ sub(/\/.*/, "", $4); print $4; exit }')
		[ -n "$host" ] ||
			sv_skip "no IPv4 address besides loopback here (the cma provider binds one; a loopback bind names no device)"
		sdev=$host cdev=$host
	fi
	;;
netns)
	net=$(($$ % 200 + 20))
	sv_netns_pair "dapl-$prov" "$net"
	sns=$SV_NS_A cns=$SV_NS_B host="10.211.$net.1"
	if [ "$prov" = scm ]; then
		sdev=sv_sva cdev=sv_svb snet=sva cnet=svb
	else
		sdev=$host cdev="10.211.$net.2"
	fi
	;;
*)
	sv_fail "unknown mode '$mode'"
	;;
esac

# dat.conf lines: scm names a device and port, cma an address (port 0)
conf() {
	if [ "$prov" = scm ]; then
		echo "$name u2.0 nonthreadsafe default $lib dapl.2.0 \"$1 1\" \"\""
	else
		echo "$name u2.0 nonthreadsafe default $lib dapl.2.0 \"$1 0\" \"\""
	fi
}
conf "$sdev" >"$SV_WORK/server.conf"
conf "$cdev" >"$SV_WORK/client.conf"
senv=(env "DAT_OVERRIDE=$SV_WORK/server.conf")
cenv=(env "DAT_OVERRIDE=$SV_WORK/client.conf")
if [ "$prov" = scm ]; then
	senv+=("DAPL_SCM_NETDEV=$snet")
	cenv+=("DAPL_SCM_NETDEV=$cnet")
fi
sv_log "provider $name: server '$sdev'${sns:+ (netns $sns)}, client '$cdev'${cns:+ (netns $cns)}"

# On this host another program (another test run) may hold dtest's ports:
# wait for it to let go.
wait_ports_free() {
	local deadline=$((SECONDS + 20))
	until sv_port_free "$sns" "$PARAM_PORT" && sv_port_free "$sns" "$CONN_PORT"; do
		[ "$SECONDS" -lt "$deadline" ] ||
			sv_fail "TCP port $PARAM_PORT or $CONN_PORT stays in use: $(sv_in "$sns" ss -Hltnp "( sport = :$PARAM_PORT or sport = :$CONN_PORT )")"
		sleep 0.2
	done
}

# pair TAG ARGS...: dtest server and client with ARGS; outputs in
# $SV_WORK/TAG-server.out and TAG-client.out; both must exit 0 and pass.
# dtest's server opens its provider's listener only after it has handed the
# client its parameters: a client that connects before that, or a pair
# that never connects, runs again (three tries), killed first.
pair() {
	local tag=$1 srv cli crc src try
	shift
	srv=$tag-server cli=$tag-client
	for try in 1 2 3; do
		wait_ports_free
		sv_log "$tag (try $try): dtest -P $name $*"
		sv_run_bg "$srv" "$(sv_left)" "$sns" "${senv[@]}" dtest -P "$name" -s "$@"
		local spid=$SV_PID w=0
		sv_wait_listen "$sns" "$PARAM_PORT" "$spid" || w=$?
		[ "$w" = 0 ] || sv_fail "$tag: dtest server did not listen on port $PARAM_PORT (wait $w)"
		crc=0
		sv_run "$cli" "$(($(sv_left) - 3))" "$cns" "${cenv[@]}" dtest -P "$name" -h "$host" "$@" ||
			crc=$?
		src=0
		sv_wait "$spid" "$([ "$crc" = 0 ] && echo 15 || echo 3)" || src=$?
		if [ "$try" -lt 3 ] && ! grep -q "CONNECTED!" "$SV_WORK/$cli.out" "$SV_WORK/$srv.out" &&
			[ "$(sv_left)" -gt 15 ]; then
			sv_log "$tag: no connection (client $crc, server $src); again"
			kill -TERM -- "-$spid" 2>/dev/null
			sv_wait "$spid" 3 || true
			kill -KILL -- "-$spid" 2>/dev/null
			mv "$SV_WORK/$srv.out" "$SV_WORK/$srv.try$try.out"
			mv "$SV_WORK/$cli.out" "$SV_WORK/$cli.try$try.out"
			continue
		fi
		break
	done
	[ "$crc" != 124 ] && [ "$crc" != 137 ] || sv_fail "$tag: client timed out"
	[ "$src" != 124 ] && [ "$src" != 137 ] || sv_fail "$tag: server timed out"
	[ "$crc" = 0 ] || sv_fail "$tag: client exited $crc"
	[ "$src" = 0 ] || sv_fail "$tag: server exited $src"
	for s in "$srv" "$cli"; do
		grep -q "DAPL Test Complete. PASSED" "$SV_WORK/$s.out" || sv_fail "$s: dtest did not pass"
		# (line 1 is the command line: DAT_OVERRIDE)
		! tail -n +2 "$SV_WORK/$s.out" | grep -qE "ERR|Error" || sv_fail "$s: dtest reported an error"
	done
}

# want TAG SIDE REGEX: a line of SIDE's output matches REGEX
want() {
	grep -qE "$3" "$SV_WORK/$1-$2.out" || sv_fail "$1-$2: no line matching '$3'"
}

# 1. SEND/RECV, RDMA WRITE, RDMA READ, SEND ping-pong.  Each side finds the
# peer's WRITE string in its buffer (the WRITEs come before the SEND that
# says they are done); a READ fetches the peer's buffer, which holds the
# peer's READ string or, if the peer has not written it yet, this side's
# WRITE string: dtest does not wait for it.
pair msg -b 65536 -B 100
want msg server "SERVER: RDMA write buffer contains: client RDMA write data\.\.\.$"
want msg client "CLIENT: RDMA write buffer contains: server RDMA write data\.\.\.$"
want msg server "SERVER: RCV RDMA read buffer contains: (client RDMA read|server RDMA write) data\.\.\.$"
want msg client "CLIENT: RCV RDMA read buffer contains: (server RDMA read|client RDMA write) data\.\.\.$"
for s in server client; do
	want msg $s "Message PingPong: \(100 x 65536\)"
done

# 2. RDMA WRITE ping-pong with data check (-D; -B after it, which sets 1000)
pair check -D -b 65536 -B 500
for s in server client; do
	want check $s "RDMA write PingPong: \(500 x 65536\)"
done
grep -h "PingPong:" "$SV_WORK"/*-client.out | sed 's/^/   /'
