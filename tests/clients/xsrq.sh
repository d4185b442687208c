#!/bin/bash
# xsrq.sh MODE[:N] SIZE ITERS PORT [ARGS...]
#
# Debian's ibv_xsrq_pingpong (XRC: an XRC send QP and an XRC receive QP per
# side, the messages naming the peer's XRC SRQ) over softverbs, a server
# and N clients (default 1), `-g 0 -s SIZE -n ITERS -p PORT ARGS`, the
# server with `-c N`; every one must print "success".  It checks no data
# itself: unit_xrc and unit_xrc_shared do.
#   MODE lo:    all on this host over sv_lo.
#   MODE netns: server in one network namespace, the clients in another.
# With N clients, the clients share one XRC domain through the file
# /tmp/xrc_domain, and the server answers client i through client j's XRC
# receive QP, which delivers into client i's XRC SRQ: another process's
# (engine/xrc_relay.c).
. "$(dirname "$0")/lib.sh"

[ $# -ge 4 ] || sv_fail "usage: $0 lo|netns SIZE ITERS PORT [ARGS...]"
mode=${1%%:*} size=$2 iters=$3 port=$4 nclients=1
[[ $1 == *:* ]] && nclients=${1#*:}
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
cflag=()
[ "$nclients" -gt 1 ] && cflag=(-c "$nclients")
sv_start_server "$sns" "$port" ibv_xsrq_pingpong -d "$sdev" -p "$port" "${cflag[@]}" "${common[@]}"
sides=(server)
pids=()
for i in $(seq 2 "$nclients"); do
	sv_run_bg "client$i" "$(($(sv_left) - 3))" "$cns" ibv_xsrq_pingpong -d "$cdev" -p "$port" \
		"${common[@]}" "$host"
	pids+=("$SV_PID")
	sides+=("client$i")
done
cli_rc=0
sv_run client "$(($(sv_left) - 3))" "$cns" ibv_xsrq_pingpong -d "$cdev" -p "$port" \
	"${common[@]}" "$host" || cli_rc=$?
for p in "${pids[@]}"; do
	sv_wait "$p" "$(($(sv_left) - 3))" || cli_rc=1
done
sv_finish "$cli_rc"
for side in "${sides[@]}" client; do
	grep -q '^success$' "$SV_WORK/$side.out" || sv_fail "$side did not report success"
	grep -q 'SRQN' "$SV_WORK/$side.out" || sv_fail "$side printed no SRQ number"
done
echo "PASS: ibv_xsrq_pingpong $mode, $nclients client(s), size $size x $iters"
