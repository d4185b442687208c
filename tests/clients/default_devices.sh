#!/bin/bash
# default_devices.sh CHECK: which interfaces become devices with no settings,
# and that same-host work needs no device on lo.  A real host has no RDMA
# device on its loopback interface; softverbs shows one (sv_lo) only when
# asked (SOFTVERBS_LOOPBACK=1, or lo named in SOFTVERBS_IFACES) or when lo is
# the only interface (src/verbs/device.c).  Each check runs in namespaces of
# its own, so that the interfaces are known.  CHECK is one of:
#   list       the device list in a namespace with lo alone, and with lo and
#              a veth interface, under each setting; an interface with IPv6
#              only is a device, one with a link-local address alone is not
#   pingpong   ibv_rc_pingpong without -d (-g 0 -c), server and client on
#              127.0.0.1 of a namespace with lo and a veth interface: the
#              first device (sv_svd) carries it, no sv_lo exists
#   rping      rping on 127.0.0.1 there: the connection manager maps a
#              loopback address to the first device, as the kernel's does
. "$(dirname "$0")/lib.sh"

unset SOFTVERBS_LOOPBACK SOFTVERBS_IFACES # the suite's setting: this test is of the default

[ "$(id -u)" = 0 ] || sv_skip_root "network namespaces"
command -v ip >/dev/null 2>&1 || sv_skip_package iproute2 "ip(8) not installed"

# new_ns VAR [veth|veth6|vethll]: a namespace with lo up and an interface
# svd (its peer svp stays in the namespace, without an address): "veth"
# 10.213.N.1/24, "veth6" fd00:213:N::1/64 alone, "vethll" its link-local
# IPv6 address alone.
new_ns() {
	local ns="svt-dd-$$-$1" net=$((RANDOM % 200 + 20))
	sv_netns_add "$ns"
	SV_NETNS+=("$ns")
	ip -n "$ns" link set lo up || sv_fail "lo up in $ns"
	if [ -n "${2:-}" ]; then
		ip -n "$ns" link add svd type veth peer name svp &&
			ip -n "$ns" link set svp up && ip -n "$ns" link set svd up ||
			sv_fail "configuring a veth pair in $ns"
	fi
	case ${2:-} in
	veth) ip -n "$ns" addr add "10.213.$net.1/24" dev svd ;;
	veth6) ip -n "$ns" addr add "fd00:213:$net::1/64" dev svd nodad ;;
	esac || sv_fail "an address for svd in $ns"
	eval "$1=\$ns"
}

# devices NS [VAR=VALUE...]: the names ibv_devices lists in NS, one line.
devices() {
	local ns=$1; shift
	ip netns exec "$ns" env "$@" "$SV_TOOL" run -- ibv_devices 2>&1 |
		awk '/^ +sv_/ { printf "%s ", $1 }'
}

# want NS WANT [VAR=VALUE...]: the list in NS is exactly WANT.
want() {
	local ns=$1 w=$2 got; shift 2
	got=$(devices "$ns" "$@")
	[ "$got" = "$w" ] || sv_fail "namespace ${ns##*-} ${*:-(no settings)}: devices '$got', want '$w'"
	sv_log "${ns##*-} ${*:-(no settings)}: '${got% }'"
}

case ${1:-} in
list)
	sv_require ibv_devices
	new_ns alone
	new_ns both veth
	want "$alone" "sv_lo "
	want "$alone" "" SOFTVERBS_LOOPBACK=0
	want "$both" "sv_svd "
	want "$both" "sv_svd sv_lo " SOFTVERBS_LOOPBACK=1
	want "$both" "sv_lo " SOFTVERBS_IFACES=lo
	want "$both" "sv_svd sv_lo " SOFTVERBS_IFACES=svd,lo
	want "$both" "sv_svd " SOFTVERBS_IFACES=svd
	want "$both" "sv_svd " SOFTVERBS_LOOPBACK=auto
	# IPv6 only: a device; link-local alone is no address to be one by
	new_ns six veth6
	new_ns ll vethll
	want "$six" "sv_svd "
	want "$ll" "sv_lo "
	;;
pingpong)
	sv_require ibv_rc_pingpong
	new_ns both veth
	[ "$(devices "$both")" = "sv_svd " ] || sv_fail "expected sv_svd alone"
	sv_pingpong ibv_rc_pingpong 4096 200 18590 "$both" "" "$both" "" 127.0.0.1
	for side in server client; do
		grep -q 'local address: .*GID fe80::' "$SV_WORK/$side.out" &&
			grep -q 'remote address: .*GID fe80::' "$SV_WORK/$side.out" ||
			sv_fail "$side: not sv_svd's GID 0"
	done
	;;
rping)
	sv_require rping
	new_ns both veth
	port=$(sv_free_port "$both" 18591)
	sv_run_bg server 20 "$both" rping -s -a 127.0.0.1 -p "$port" -C 5 -v
	spid=$SV_PID
	w=0
	sv_wait_listen "$both" "$port" "$spid" || w=$?
	[ "$w" = 0 ] || sv_fail "rping server did not listen on port $port"
	rc=0 src=0
	sv_run client 20 "$both" rping -c -a 127.0.0.1 -p "$port" -C 5 -v || rc=$?
	sv_wait "$spid" 20 || src=$?
	[ "$rc" = 0 ] && [ "$src" = 0 ] || sv_fail "rping: client $rc, server $src"
	[ "$(grep -c '^ping data: rdma-ping-' "$SV_WORK/client.out")" = 5 ] ||
		sv_fail "client: not 5 pings"
	[ "$(grep -c '^server ping data: rdma-ping-' "$SV_WORK/server.out")" = 5 ] ||
		sv_fail "server: not 5 pings"
	;;
*)
	sv_fail "usage: $0 list|pingpong|rping"
	;;
esac
echo "PASS: $1"
