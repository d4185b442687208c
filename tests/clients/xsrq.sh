#!/bin/bash
# xsrq.sh MODE SIZE ITERS PORT [ARGS...]
#
# Debian's ibv_xsrq_pingpong (XRC: an XRC send QP and an XRC receive QP per
# side, the messages naming the peer's XRC SRQ) over softverbs, a server
# and one client, `-g 0 -s SIZE -n ITERS -p PORT ARGS`; both must print
# "success".  It checks no data itself: unit_xrc does.
#   MODE lo:    both on this host over sv_lo.
#   MODE netns: server in one network namespace, client in another.
# (Its -c N clients share one XRC domain across processes, through the
# file /tmp/xrc_domain: softverbs keeps a domain within its process, so
# only one client is run; docs/COMPATIBILITY.md.)
. "$(dirname "$0")/lib.sh"

[ $# -ge 4 ] || sv_fail "usage: $0 lo|netns SIZE ITERS PORT [ARGS...]"
mode=$1 size=$2 iters=$3 port=$4
shift 4
sv_require ibv_xsrq_pingpong

case $mode in
lo) sns="" cns="" sdev=sv_lo cdev=sv_lo host=127.0.0.1 ;;
netns)
	sv_netns_pair "xsrq-$size" $((port % 250))
	sns=$SV_NS_A cns=$SV_NS_B sdev=sv_sva cdev=sv_svb host="10.211.$((port % 250)).1"
	;;
*) sv_fail "unknown mode '$mode'" ;;
esac
common=(-g 0 -s "$size" -n "$iters" "$@")
port=$(sv_free_port "$sns" "$port")
sv_start_server "$sns" "$port" ibv_xsrq_pingpong -d "$sdev" -p "$port" "${common[@]}"
cli_rc=0
sv_run client "$(($(sv_left) - 3))" "$cns" ibv_xsrq_pingpong -d "$cdev" -p "$port" \
	"${common[@]}" "$host" || cli_rc=$?
sv_finish "$cli_rc"
for side in server client; do
	grep -q '^success$' "$SV_WORK/$side.out" || sv_fail "$side did not report success"
	grep -q 'SRQN' "$SV_WORK/$side.out" || sv_fail "$side printed no SRQ number"
done
echo "PASS: ibv_xsrq_pingpong $mode size $size x $iters"
