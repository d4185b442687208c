#!/bin/bash
# perftest.sh PROGRAM PORT [ARGS...]
#
# Debian's perftest binaries link libmlx5 and libefa, which import rdma-core's
# private IBVERBS_PRIVATE_34 symbols from libibverbs.  This runs one of them
# (ib_write_bw, ib_send_lat, ...) unmodified over softverbs on sv_lo, server
# and client as separate processes with GID index 0, and checks both finish
# and print their result table.  It proves the binaries load and run, not
# how fast they are (that is bench/'s job).
. "$(dirname "$0")/lib.sh"

[ $# -ge 2 ] || sv_fail "usage: $0 PROGRAM PORT [ARGS...]"
prog=$1 port=$2
shift 2
command -v "$prog" >/dev/null 2>&1 || sv_skip "$prog not installed (Debian perftest)"
sv_require ibv_devices
port=$(sv_free_port "" "$port")
common=(-d sv_lo -x 0 -p "$port" "$@")

sv_log "server: $prog ${common[*]}"
sv_run_bg server "$(sv_left)" "" "$prog" "${common[@]}"
spid=$SV_PID
sv_wait_listen "" "$port" "$spid" || sv_fail "server did not listen on port $port"
sv_log "client: $prog ${common[*]} 127.0.0.1"
cli_rc=0
sv_run client "$(sv_left)" "" "$prog" "${common[@]}" 127.0.0.1 || cli_rc=$?
srv_rc=0
sv_wait "$spid" 10 || srv_rc=$?
sv_timed_out client "$cli_rc"
sv_timed_out server "$srv_rc"
[ "$cli_rc" = 0 ] || sv_fail "client exited $cli_rc"
[ "$srv_rc" = 0 ] || sv_fail "server exited $srv_rc"
# the result table (a header with #bytes and a data row); the passive side
# of READ/atomic latency tests measures nothing and prints none
grep -q '#bytes' "$SV_WORK/client.out" || sv_fail "client printed no result table"
grep -Eq '^ *[0-9]+ +[0-9]+ +[0-9.]+' "$SV_WORK/client.out" || sv_fail "client printed no result row"
grep -E '^ *[0-9]+ +[0-9]+ +[0-9.]+' "$SV_WORK/client.out" | head -n1 | sed 's/^/   client: /'
echo "PASS: $prog ${*}"
