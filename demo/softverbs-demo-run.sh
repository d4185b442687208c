#!/usr/bin/env bash
# softverbs-demo-run — what `make demo` shows.
#
# Starts `sv-demo server` in the background, then `sv-demo client` against it,
# both on this host over a softverbs device (default: the first one), and prints both
# reports merged in the order things happened (server lines prefixed
# "[server]", client lines "[client]"), then a PASS/FAIL summary.  The exit
# status is 0 only if both sides passed every check.  The server is cleaned up
# on any exit.
#
# Environment: SV_DEMO_DEVICE (verbs device, default the first), SV_DEMO_TIMEOUT
# (seconds per program, default 30), SV_DEMO_PORT (TCP control port, default 0
# = any free port), SV_DEMO_BIN (the sv-demo binary, default next to this
# script).
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
demo="${SV_DEMO_BIN:-$here/sv-demo}"
timeout_s="${SV_DEMO_TIMEOUT:-30}"
req_port="${SV_DEMO_PORT:-0}"
# Each program stops itself after SV_DEMO_TIMEOUT (alarm); `timeout` is the
# backstop should one not.
guard=$((timeout_s + 10))
export SV_DEMO_TIMEOUT="$timeout_s"
# Lines stamped with CLOCK_MONOTONIC microseconds, so the reports can be merged.
export SV_DEMO_STAMP=1

if [ ! -x "$demo" ]; then
	echo "softverbs-demo-run: $demo not found or not executable (run 'make' first)" >&2
	exit 2
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/softverbs-demo.XXXXXX")" || exit 2
server_pid=""

# shellcheck disable=SC2317  # invoked through the EXIT trap
cleanup() {
	if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
		kill "$server_pid" 2>/dev/null
		wait "$server_pid" 2>/dev/null
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "softverbs-demo-run: interrupted" >&2; exit 130' INT TERM HUP

# Both reports, one chronological list: the stamp sorts, a per-file line
# number keeps each report's own order, an unstamped line (from the library or
# the C runtime) takes the stamp of the line before it.
merged_report() {
	awk -v OFS='\t' '
		FNR == 1 { last = 0; tag = (FILENAME ~ /server\.log$/) ? "[server] " : "[client] " }
		{
			line = $0
			if (match(line, /^[0-9]+ /)) {
				last = substr(line, 1, RLENGTH - 1)
				line = substr(line, RLENGTH + 1)
			}
			print last, NR, tag line
		}' "$@" | sort -t "$(printf '\t')" -k1,1n -k2,2n | cut -f3-
}

result_of() { # the RESULT line of a report
	local line
	line="$(sed -n 's/^[0-9]* *\(RESULT:.*\)/\1/p' "$1" 2>/dev/null | tail -n 1)"
	echo "${line:-RESULT: (none printed)}"
}

status_word() {
	if [ "$1" -eq 0 ]; then echo "PASS"
	elif [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; then echo "FAIL (timed out)"
	elif [ "$1" -gt 128 ]; then echo "FAIL (killed by signal $(($1 - 128)))"
	else echo "FAIL (exit $1)"; fi
}

cat <<EOF
=== softverbs demo ===
Two processes on this host talk RDMA through softverbs, using only the verbs
API (RC queue pairs on device ${SV_DEMO_DEVICE:-the first device}); a TCP socket on 127.0.0.1 carries just
the QPN/PSN/GID/rkey/address exchange, as ibv_rc_pingpong does.
  (a)  SEND gathering 3 buffers -> 1 buffer; SEND_WITH_IMM 1 buffer -> 3 buffers
  (b)  RDMA WRITE (3-entry gather) and RDMA READ (3-entry scatter)
  (c)  ATOMIC FETCH_AND_ADD and CMP_AND_SWP on the server's counter,
       and RDMA_WRITE_WITH_IMM; the server makes no verbs call during (b)/(c)
Every byte is verified on both sides.  Running (at most ${timeout_s} s) ...

EOF

timeout --kill-after=5 "$guard" "$demo" server "$req_port" >"$tmp/server.log" 2>&1 &
server_pid=$!

# The server prints "listening on ADDR port N" once it accepts connections.
port=""
for _ in $(seq 100); do
	port="$(sed -n 's/.*listening on [^ ]* port \([0-9][0-9]*\).*/\1/p' "$tmp/server.log" | head -n 1)"
	[ -n "$port" ] && break
	kill -0 "$server_pid" 2>/dev/null || break
	sleep 0.1
done

client_rc=""
if [ -n "$port" ]; then
	timeout --kill-after=5 "$guard" "$demo" client 127.0.0.1 "$port" >"$tmp/client.log" 2>&1
	client_rc=$?
fi

# A server whose client failed may still sit in accept(): give it a moment to
# finish on its own, then stop it.  Otherwise it ends after its checks.
if [ -z "$port" ] || [ "$client_rc" -ne 0 ]; then
	for _ in $(seq 30); do
		kill -0 "$server_pid" 2>/dev/null || break
		sleep 0.1
	done
	kill "$server_pid" 2>/dev/null
fi
wait "$server_pid"
server_rc=$?
server_pid=""

if [ -n "$port" ]; then
	merged_report "$tmp/server.log" "$tmp/client.log"
else
	merged_report "$tmp/server.log"
	echo "softverbs-demo-run: the server never started listening; the client was not run"
fi

echo
echo "=== softverbs demo summary ==="
echo "  server: $(status_word "$server_rc")  -- $(result_of "$tmp/server.log")"
if [ -n "$port" ]; then
	echo "  client: $(status_word "$client_rc")  -- $(result_of "$tmp/client.log")"
fi
if [ "$server_rc" -eq 0 ] && [ "${client_rc:-1}" -eq 0 ]; then
	echo "PASS: SEND/RECV with SGL gather and scatter, RDMA WRITE/READ, atomics and immediate data, every byte verified"
	exit 0
fi
echo "FAIL: see the [server] and [client] lines above"
exit 1
