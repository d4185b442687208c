#!/bin/bash
# devices.sh CHECK: what Debian's ibverbs-utils see of the sv_lo device when
# run over softverbs.  CHECK is one of:
#   devices      ibv_devices lists sv_lo with a node GUID
#   devinfo      ibv_devinfo / -l / -d sv_lo: port 1 PORT_ACTIVE, Ethernet, MTU 4096
#   devinfo-v    ibv_devinfo -v -d sv_lo: also a GID at index 0, ATOMIC_HCA, and
#                a GID table longer than its filled entries
#   ud-oversize  ibv_ud_pingpong -s 4097 is refused: larger than the port MTU
#   help         `softverbs help` describes the GIDs as they are: addresses of
#                the port, any of which reaches a QP (not "GID index 0
#                identifies the endpoint of the process", as it once said)
. "$(dirname "$0")/lib.sh"

# expect NAME ERE WHAT: NAME's output must have a line matching ERE.
expect() {
	grep -Eq "$2" "$SV_WORK/$1.out" || sv_fail "$1: expected $3 (/$2/)"
}

# run NAME PROGRAM ARGS...: PROGRAM over softverbs must exit 0.
run() {
	local name=$1 rc=0; shift
	sv_run "$name" 20 "" "$@" || rc=$?
	[ "$rc" = 0 ] || sv_fail "$name: '$*' exited $rc"
}

port_checks() {
	expect "$1" '^hca_id:[[:space:]]+sv_lo$' "hca_id sv_lo"
	expect "$1" '^[[:space:]]+phys_port_cnt:[[:space:]]+1$' "one port"
	expect "$1" '^[[:space:]]+port:[[:space:]]+1$' "port 1"
	expect "$1" '^[[:space:]]+state:[[:space:]]+PORT_ACTIVE \(4\)$' "state PORT_ACTIVE"
	expect "$1" '^[[:space:]]+link_layer:[[:space:]]+Ethernet$' "link_layer Ethernet"
	expect "$1" '^[[:space:]]+active_mtu:[[:space:]]+4096 \(5\)$' "active_mtu 4096"
}

case ${1:-} in
devices)
	sv_require ibv_devices
	run devices ibv_devices
	expect devices '^[[:space:]]+sv_lo[[:space:]]+[0-9a-f]{16}$' "sv_lo and its node GUID"
	;;
devinfo)
	sv_require ibv_devinfo
	run list ibv_devinfo -l
	expect list '^[0-9]+ HCAs? found:$' "'N HCAs found'"
	expect list '^[[:space:]]+sv_lo$' "sv_lo in the list"
	run all ibv_devinfo
	expect all '^hca_id:[[:space:]]+sv_lo$' "hca_id sv_lo"
	run lo ibv_devinfo -d sv_lo
	port_checks lo
	;;
devinfo-v)
	sv_require ibv_devinfo
	run lo-v ibv_devinfo -v -d sv_lo
	port_checks lo-v
	expect lo-v '^[[:space:]]+atomic_cap:[[:space:]]+ATOMIC_HCA \(1\)$' "atomic_cap ATOMIC_HCA"
	# devinfo prints a GID only when it is non-zero and ibv_query_gid_type
	# (IBVERBS_PRIVATE_34) calls it RoCE v1 or v2.
	expect lo-v '^[[:space:]]+GID\[ *0\]:[[:space:]]+[0-9a-f:.]+, RoCE v[12]$' "a GID at index 0"
	grep -E 'GID\[' "$SV_WORK/lo-v.out"
	# the table is longer than what fills it (a RoCE port's is): devinfo
	# asks every index, and takes the empty ones (a zero GID, type 0 from
	# ibv_query_gid_type) without printing them
	tbl=$(sed -n 's/^[[:space:]]*gid_tbl_len:[[:space:]]*//p' "$SV_WORK/lo-v.out")
	ngid=$(grep -c 'GID\[' "$SV_WORK/lo-v.out")
	[[ $tbl =~ ^[0-9]+$ ]] && [ "$ngid" -ge 4 ] && [ "$tbl" -gt "$ngid" ] ||
		sv_fail "gid_tbl_len '$tbl' with $ngid GIDs printed: expected empty entries past them"
	! grep -q 'Failed to query' "$SV_WORK/lo-v.out" || sv_fail "ibv_devinfo -v: a query failed"
	;;
ud-oversize)
	sv_require ibv_ud_pingpong
	rc=0
	sv_run ud 20 "" ibv_ud_pingpong -d sv_lo -g 0 -s 4097 -p "${2:-18599}" || rc=$?
	[ "$rc" != 0 ] && [ "$rc" != 124 ] || sv_fail "ud_pingpong -s 4097 exited $rc, expected a refusal"
	expect ud '^Requested size larger than port MTU \(4096\)$' "the MTU refusal"
	;;
help)
	"$SV_TOOL" help >"$SV_WORK/help.out" 2>&1 || sv_fail "softverbs help exited $?"
	cat "$SV_WORK/help.out"
	expect help 'GIDs are addresses of the port' "the GIDs as addresses of the port"
	expect help 'reached by any GID of its device' "any GID reaching a QP"
	! grep -Eiq 'GID (index )?0 identifies|by GID index 0|GID 0,' "$SV_WORK/help.out" ||
		sv_fail "softverbs help still says GID index 0 names the process's endpoint"
	;;
*)
	sv_fail "usage: $0 devices|devinfo|devinfo-v|ud-oversize|help"
	;;
esac
echo "PASS: $1"
