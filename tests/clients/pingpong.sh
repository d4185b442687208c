#!/bin/bash
# pingpong.sh MODE PROGRAM SIZE ITERS PORT [ARGS...]
#
# Runs Debian's PROGRAM (ibv_rc/uc/ud/srq_pingpong) over softverbs as a
# server and a client process with `-g 0 -c -s SIZE -n ITERS -p PORT ARGS`.
#   MODE lo:    both on this host over device sv_lo, client connects to 127.0.0.1.
#   MODE netns: server in one network namespace on sv_sva, client in another
#               on sv_svb, joined by a veth pair (needs root, else skip 77).
#   MODE netns6: the same, sva and svb with IPv6 addresses only (their
#               devices' GIDs 2 and 3 empty); the pingpongs' own TCP
#               connection goes over a second, IPv4, pair.
#   MODE one6:  one namespace holding both ends of a veth pair with IPv6
#               addresses only: two devices of one host, server on sv_sva,
#               client on sv_svb (what one sends the other gets over lo).
# PORT is the pingpong's own TCP port for exchanging QP numbers and GIDs.
. "$(dirname "$0")/lib.sh"

[ $# -ge 5 ] || sv_fail "usage: $0 lo|netns PROGRAM SIZE ITERS PORT [ARGS...]"
mode=$1 prog=$2 size=$3 iters=$4 port=$5
shift 5
sv_require "$prog" ibv_devices

# GID indexes 4 and 5 are the interface's IPv6 address: lo's ::1, or the
# namespaces' (dual-stack then)
v6=""
case " $* " in *" -g 4 "* | *" -g 5 "*) v6=ipv6 ;; esac

case $mode in
lo)
	[ -z "$v6" ] || ip -6 addr show dev lo 2>/dev/null | grep -q 'inet6 ::1/' ||
		sv_skip "lo has no IPv6 address (::1) here"
	sv_pingpong "$prog" "$size" "$iters" "$port" "" sv_lo "" sv_lo 127.0.0.1 "$@"
	;;
netns | netns6)
	[ "$mode" = netns ] || v6=ipv6only
	sv_netns_pair "${prog#ibv_}-$size" $((port % 250)) $v6
	# Each namespace must show its veth end as a device before anything else.
	sv_run devices-a 10 "$SV_NS_A" ibv_devices || sv_fail "ibv_devices in $SV_NS_A"
	grep -qw sv_sva "$SV_WORK/devices-a.out" || sv_fail "no device sv_sva in $SV_NS_A"
	sv_run devices-b 10 "$SV_NS_B" ibv_devices || sv_fail "ibv_devices in $SV_NS_B"
	grep -qw sv_svb "$SV_WORK/devices-b.out" || sv_fail "no device sv_svb in $SV_NS_B"
	if [ "$mode" = netns6 ]; then
		# no IPv4 address: GIDs 2 and 3 empty, 4 and 5 the IPv6 address
		sv_run gids-a 10 "$SV_NS_A" ibv_devinfo -v -d sv_sva || sv_fail "ibv_devinfo in $SV_NS_A"
		! grep -q 'GID\[ *[23]\]' "$SV_WORK/gids-a.out" || sv_fail "sv_sva shows an IPv4 GID"
		grep -q 'GID\[ *5\]:.*fd00:211:' "$SV_WORK/gids-a.out" || sv_fail "sv_sva: no IPv6 GID 5"
	fi
	sv_pingpong "$prog" "$size" "$iters" "$port" "$SV_NS_A" sv_sva "$SV_NS_B" sv_svb \
		"10.211.$((port % 250)).1" "$@"
	;;
one6)
	[ "$(id -u)" = 0 ] || sv_skip "network namespaces need root"
	ns="svt-one6-$$"
	ip netns add "$ns" 2>/dev/null || sv_skip "ip netns add failed here"
	SV_NETNS+=("$ns")
	net=$((port % 250))
	ip -n "$ns" link set lo up && ip -n "$ns" link add sva type veth peer name svb &&
		ip -n "$ns" addr add "fd00:212:$net::1/64" dev sva nodad &&
		ip -n "$ns" addr add "fd00:212:$net::2/64" dev svb nodad &&
		ip -n "$ns" link set sva up && ip -n "$ns" link set svb up ||
		sv_fail "configuring a veth pair in $ns"
	dad=$((SECONDS + 10))
	while ip -n "$ns" -6 addr show | grep -q tentative; do
		[ "$SECONDS" -lt "$dad" ] || sv_fail "IPv6 addresses still tentative after 10 s"
		sleep 0.05
	done
	sv_pingpong "$prog" "$size" "$iters" "$port" "$ns" sv_sva "$ns" sv_svb 127.0.0.1 "$@"
	;;
*)
	sv_fail "unknown mode '$mode'"
	;;
esac
echo "PASS: $prog $mode size $size x $iters"
