#!/bin/bash
# rdmacm.sh MODE SCENARIO PORT [ARGS...]
#
# Debian's unmodified rdmacm-utils over softverbs' librdmacm.so.1: a server
# and a client process, both through `softverbs run`.
#   MODE lo:    both on this host (device sv_lo), addresses 127.0.0.1.
#   MODE netns: server in one network namespace (sv_sva), client in another
#               (sv_svb), joined by a veth pair (needs root, else skip 77).
#   MODE lo6:   both on this host, addresses ::1 (sv_lo; IPv6 rdma_cm).
#   MODE netns6: as netns with the pair dual-stack (lib.sh sv_netns_pair ...
#               ipv6), over the IPv6 addresses fd00:211:NET::1 and ::2, both
#               sides with the same SOFTVERBS_SECRET, as two hosts.
#   MODE only6: as netns6, sva and svb with IPv6 addresses only.
#   MODE ll6:   as netns6, over link-local addresses with scope ids: the
#               server on fe80::1%sva, the client (fe80::2%svb) to fe80::1%svb.
# SCENARIO:
#   rping SIZE COUNT     rping -V (data verified) SIZE bytes, COUNT pings
#   udaddy CONNS COUNT   UD over rdma_cm (SIDR), fixed rdma_cm port 7174
#   ucmatose CONNS COUNT SIZE   several RC connections, SENDs both ways
#   rdma_server          rdma_server/rdma_client (rdma_create_ep, sync ids)
#   rdma_xserver [r|x]   rdma_xserver/rdma_xclient -c r (RC; inline SEND on a QP
#                        created with max_inline_data 0) or -c x (XRC: the
#                        server's XRC SRQ number in the CM's private data)
#   cmtime CONNS         CONNS connections set up and torn down
#   mckey COUNT SIZE     UD multicast: a receiver joins a group and waits for
#                        COUNT datagrams of SIZE bytes, which a sender that
#                        joined too sends to the group
# PORT is the rdma_cm port (a TCP port on the device's address here).
. "$(dirname "$0")/lib.sh"

[ $# -ge 3 ] || sv_fail "usage: $0 lo|netns SCENARIO PORT [ARGS...]"
mode=$1 scen=$2 port=$3
shift 3
case $scen in
rdma_server) sv_require rdma_server rdma_client ;;
rdma_xserver) sv_require rdma_xserver rdma_xclient ;;
*) sv_require "$scen" ;;
esac
[ -e "$(dirname "$SV_TOOL")/../lib/librdmacm.so.1" ] || sv_fail "librdmacm.so.1 not built"

case $mode in
lo)
	sns="" cns="" saddr=127.0.0.1 caddr=127.0.0.1
	;;
netns)
	net=$(((port % 200) + 30))
	sv_netns_pair "cm-$scen-$port" "$net"
	sns=$SV_NS_A cns=$SV_NS_B saddr="10.211.$net.1" caddr="10.211.$net.2"
	;;
lo6)
	sv_require_ipv6_lo
	sns="" cns="" saddr=::1 caddr=::1
	;;
netns6 | ll6 | only6)
	net=$(((port % 200) + 30))
	# only6: sva and svb have IPv6 addresses alone (their devices have no
	# IPv4 GID), as two IPv6-only hosts
	if [ "$mode" = only6 ]; then
		sv_netns_pair "cm6-$scen-$port" "$net" ipv6only
	else
		sv_netns_pair "cm6-$scen-$port" "$net" ipv6
	fi
	sns=$SV_NS_A cns=$SV_NS_B saddr="fd00:211:$net::1" caddr="fd00:211:$net::2"
	if [ "$mode" = ll6 ]; then
		# fixed link-local addresses, usable at once (nodad); the server
		# binds its own on sva, the client reaches it on svb's link
		ip -n "$SV_NS_A" addr add fe80::1/64 dev sva nodad &&
			ip -n "$SV_NS_B" addr add fe80::2/64 dev svb nodad ||
			sv_fail "adding link-local addresses"
		saddr="fe80::1%sva" caddr="fe80::2%svb" daddr="fe80::1%svb"
	fi
	# two hosts: neither takes the other's host secret, both hold this one
	SOFTVERBS_SECRET=$(head -c 24 /dev/urandom | base64)
	export SOFTVERBS_SECRET
	;;
*)
	sv_fail "unknown mode '$mode'"
	;;
esac
# the address the client names the server by (its own link's scope for ll6)
daddr=${daddr:-$saddr}
one_host=0
case $mode in lo | lo6) one_host=1 ;; esac

crc=0
case $scen in
rping)
	size=$1 count=$2
	[ "$one_host" = 1 ] && port=$(sv_free_port "" "$port")
	sv_start_server "$sns" "$port" rping -s -a "$saddr" -p "$port" -V -S "$size" -C "$count"
	sv_run client "$(($(sv_left) - 5))" "$cns" rping -c -a "$daddr" -p "$port" \
		-V -v -S "$size" -C "$count" || crc=$?
	sv_finish "$crc"
	n=$(grep -c '^ping data: ' "$SV_WORK/client.out")
	[ "$n" = "$count" ] || sv_fail "client printed $n pings, expected $count"
	! grep -qiE 'mismatch|error|fail' "$SV_WORK/client.out" "$SV_WORK/server.out" ||
		sv_fail "rping reported an error"
	;;
udaddy)
	conns=$1 count=$2
	sv_start_server "$sns" 7174 udaddy -b "$saddr" -c "$conns" -C "$count"
	sv_run client "$(($(sv_left) - 5))" "$cns" udaddy -s "$daddr" -c "$conns" -C "$count" ||
		crc=$?
	sv_finish "$crc"
	for s in server client; do
		grep -q '^data transfers complete' "$SV_WORK/$s.out" || sv_fail "$s: no data transfers"
		grep -q '^return status 0' "$SV_WORK/$s.out" || sv_fail "$s: nonzero status"
	done
	;;
ucmatose)
	conns=$1 count=$2 size=$3
	[ "$one_host" = 1 ] && port=$(sv_free_port "" "$port")
	sv_start_server "$sns" "$port" ucmatose -b "$saddr" -p "$port" -c "$conns" -C "$count" -S "$size"
	sv_run client "$(($(sv_left) - 5))" "$cns" ucmatose -s "$daddr" -p "$port" \
		-c "$conns" -C "$count" -S "$size" || crc=$?
	sv_finish "$crc"
	for s in server client; do
		grep -q '^data transfers complete' "$SV_WORK/$s.out" || sv_fail "$s: no data transfers"
		grep -q '^return status 0' "$SV_WORK/$s.out" || sv_fail "$s: nonzero status"
	done
	grep -q '^disconnected' "$SV_WORK/server.out" || sv_fail "server saw no disconnect"
	;;
rdma_server)
	[ "$one_host" = 1 ] && port=$(sv_free_port "" "$port")
	sv_start_server "$sns" "$port" rdma_server -s "$saddr" -p "$port"
	sv_run client "$(($(sv_left) - 5))" "$cns" rdma_client -s "$daddr" -p "$port" || crc=$?
	sv_finish "$crc"
	grep -q 'rdma_server: end 0' "$SV_WORK/server.out" || sv_fail "server did not end with 0"
	grep -q 'rdma_client: end 0' "$SV_WORK/client.out" || sv_fail "client did not end with 0"
	;;
rdma_xserver)
	[ "$one_host" = 1 ] && port=$(sv_free_port "" "$port")
	ctype=${1:-r}
	sv_start_server "$sns" "$port" rdma_xserver -c "$ctype" -p "$port"
	sv_run client "$(($(sv_left) - 5))" "$cns" rdma_xclient -c "$ctype" -s "$daddr" -p "$port" ||
		crc=$?
	sv_finish "$crc"
	grep -q 'rdma_xserver: end 0' "$SV_WORK/server.out" || sv_fail "server did not end with 0"
	grep -q 'rdma_xclient: end 0' "$SV_WORK/client.out" || sv_fail "client did not end with 0"
	;;
cmtime)
	conns=$1
	[ "$one_host" = 1 ] && port=$(sv_free_port "" "$port")
	# Debian's cmtime server serves until it is stopped: only the client ends.
	sv_start_server "$sns" "$port" cmtime -b "$saddr" -p "$port" -c "$conns"
	sv_run client "$(($(sv_left) - 5))" "$cns" cmtime -s "$daddr" -p "$port" -c "$conns" ||
		crc=$?
	[ "$crc" = 0 ] || sv_fail "cmtime client exited $crc"
	kill -0 "$SV_SPID" 2>/dev/null || sv_fail "cmtime server died"
	for step in 'create id' 'resolve addr' 'resolve route' 'create qp' connect disconnect destroy; do
		grep -q "^$step *:" "$SV_WORK/client.out" || sv_fail "cmtime printed no '$step' step"
	done
	grep '^connect *:' "$SV_WORK/client.out" | sed 's/^/   /'
	;;
mckey)
	count=$1 size=$2
	# a group of its own: tests running at the same time use others
	grp="239.$((RANDOM % 200 + 20)).$((RANDOM % 256)).$((port % 256))"
	case $saddr in *:*) grp=$(printf 'ff0e::5356:%x:%x' $RANDOM "$port") ;; esac
	sv_run_bg server "$(sv_left)" "$sns" mckey -m "$grp" -b "$saddr" -C "$count" -S "$size"
	SV_SPID=$SV_PID
	# joined, with its receives posted, before anything is sent
	until grep -q '^receiving data transfers' "$SV_WORK/server.out" 2>/dev/null; do
		kill -0 "$SV_SPID" 2>/dev/null || sv_fail "the receiver ended before it joined"
		sleep 0.1
	done
	# the sender joins, waits 3 s (mckey's own pause) and sends COUNT; -l:
	# its QP is made with IBV_QP_CREATE_BLOCK_SELF_MCAST_LB
	sv_run client "$(($(sv_left) - 5))" "$cns" mckey -m "$grp" -b "$caddr" -s -C "$count" \
		-S "$size" -l || crc=$?
	# the receiver ends only once it has polled all COUNT receives
	sv_finish "$crc"
	for s in server client; do
		grep -q '^data transfers complete' "$SV_WORK/$s.out" || sv_fail "$s: no data transfers"
		grep -q '^return status 0' "$SV_WORK/$s.out" || sv_fail "$s: nonzero status"
	done
	grep "joined dgid" "$SV_WORK/server.out" | sed 's/^/   /'
	;;
*)
	sv_fail "unknown scenario '$scen'"
	;;
esac
echo "PASS: $scen $mode $*"
