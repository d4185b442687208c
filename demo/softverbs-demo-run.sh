#!/usr/bin/env bash
# softverbs-demo-run — what `make demo` shows.
#
# Starts `sv-demo server` in the background, then `sv-demo client` against it,
# both on this host over the softverbs device (default sv_lo), and prints both
# reports as they happen: server lines prefixed "[server]", client lines
# "[client]".  Ends with a PASS/FAIL summary; the exit status is 0 only if both
# sides passed every check.  The server is cleaned up on any exit.
#
# Environment: SV_DEMO_DEVICE (verbs device, default sv_lo), SV_DEMO_TIMEOUT
# (seconds per program, default 30), SV_DEMO_PORT (TCP control port, default 0
# = any free port), SV_DEMO_BIN (the sv-demo binary, default next to this
# script).
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
demo="${SV_DEMO_BIN:-$here/sv-demo}"
timeout_s="${SV_DEMO_TIMEOUT:-30}"
req_port="${SV_DEMO_PORT:-0}"
export SV_DEMO_TIMEOUT="$timeout_s"

if [ ! -x "$demo" ]; then
	echo "softverbs-demo-run: $demo not found or not executable (run 'make' first)" >&2
	exit 2
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/softverbs-demo.XXXXXX")" || exit 2
printer_pid=""

# shellcheck disable=SC2317  # invoked through the EXIT trap
cleanup() {
	local pid
	if [ -s "$tmp/server.pid" ]; then
		pid="$(cat "$tmp/server.pid")"
		if kill -0 "$pid" 2>/dev/null; then
			kill "$pid" 2>/dev/null
			sleep 0.2
			kill -9 "$pid" 2>/dev/null
		fi
	fi
	if [ -n "$printer_pid" ]; then
		wait "$printer_pid" 2>/dev/null
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "softverbs-demo-run: interrupted" >&2; exit 130' INT TERM HUP

cat <<EOF
=== softverbs demo ===
Two processes on this host talk RDMA through softverbs, using only the verbs
API (RC queue pairs on device ${SV_DEMO_DEVICE:-sv_lo}); a TCP socket on 127.0.0.1 carries
just the QPN/PSN/GID/rkey/address exchange, like ibv_rc_pingpong.
  (a)  SEND gathering 3 buffers -> 1 buffer; SEND_WITH_IMM 1 buffer -> 3 buffers
  (b)  RDMA WRITE (3-entry gather) and RDMA READ (3-entry scatter)
  (c)  ATOMIC FETCH_AND_ADD and CMP_AND_SWP on the server's counter
       + RDMA_WRITE_WITH_IMM; the server makes no verbs call during (b)/(c)
Every byte is verified on both sides.

EOF

# Server: its output goes to a log (to learn its port) and, prefixed, to the
# terminal as it happens.  The subshell records the server's pid and status.
(
	timeout --kill-after=5 "$((timeout_s + 10))" "$demo" server "$req_port" 2>&1 &
	echo $! >"$tmp/server.pid"
	wait $!
	echo $? >"$tmp/server.rc"
) | tee "$tmp/server.log" | sed -u 's/^/[server] /' &
printer_pid=$!

# Wait (up to 10 s) for "listening on ADDR port N".
port=""
for _ in $(seq 100); do
	port="$(sed -n 's/.*listening on [^ ]* port \([0-9][0-9]*\).*/\1/p' "$tmp/server.log" | head -n 1)"
	[ -n "$port" ] && break
	[ -s "$tmp/server.rc" ] && break
	sleep 0.1
done

client_rc=255
if [ -n "$port" ]; then
	timeout --kill-after=5 "$((timeout_s + 10))" "$demo" client 127.0.0.1 "$port" 2>&1 |
		tee "$tmp/client.log" | sed -u 's/^/[client] /'
	client_rc=${PIPESTATUS[0]}
else
	echo "softverbs-demo-run: the server did not start listening"
fi

# The server ends by itself (after its checks, or when the client's socket
# closes, or at its own timeout).  If the client never ran, stop it.
if [ -z "$port" ]; then
	pid="$(cat "$tmp/server.pid" 2>/dev/null)"
	[ -n "$pid" ] && kill "$pid" 2>/dev/null
fi
wait "$printer_pid" 2>/dev/null
printer_pid=""
server_rc="$(cat "$tmp/server.rc" 2>/dev/null)"
server_rc="${server_rc:-255}"

result_of() { # the RESULT line of a report, or a note that there was none
	local line
	line="$(grep -h '^RESULT:' "$1" 2>/dev/null | tail -n 1)"
	echo "${line:-RESULT: (none printed)}"
}
status_word() { [ "$1" -eq 0 ] && echo PASS || echo "FAIL (exit $1)"; }

echo
echo "=== softverbs demo summary ==="
echo "  server: $(status_word "$server_rc")  -- $(result_of "$tmp/server.log")"
if [ -n "$port" ]; then
	echo "  client: $(status_word "$client_rc")  -- $(result_of "$tmp/client.log")"
fi
if [ "$server_rc" -eq 0 ] && [ "$client_rc" -eq 0 ]; then
	echo "PASS: RDMA SEND/RECV with SGL gather/scatter, WRITE/READ, atomics and immediate data all verified"
	exit 0
fi
echo "FAIL: see the [server]/[client] lines above"
exit 1
