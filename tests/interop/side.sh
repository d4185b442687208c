#!/bin/bash
# side.sh ROLE DEV GIDX PEER_IP BASEPORT [WRAP...]: play one side (ROLE host
# or guest) of every scenario in scenarios.sh, in order, against PEER_IP.
# WRAP runs each program (the host's `softverbs run --`).  Prints a line
# "SCENARIO name rc=N (S s)" for each; the output of each program goes to
# $SV_OUT/name.ROLE.out (SV_OUT defaults to the current directory).
#
# The two sides meet before each scenario (sync, on TCP port BASEPORT: the
# host listens, with python3; the guest connects, with bash's /dev/tcp), so
# that a scenario that fails on one side costs its own time and no more:
# without it, a client that gave up moved on to the next scenario while its
# server still waited, and every later scenario met the other side in the
# wrong one.  A sync that fails (the other side is gone, or in another
# scenario) ends the run: "SCENARIO name rc=sync", exit status 3 (else 0).
#
# A program that runs out of time first has its state written to its output
# file (the host: `softverbs stat`; the guest: rxe's QPs, the kernel's log,
# the processes), then is killed (rc 124).
set -u
role=$1 dev=$2 gidx=$3 peer=$4 port=$5
shift 5
wrap=("$@")
here=$(dirname "$0")
out=${SV_OUT:-.}
server_secs=300 # a server, from the sync to its end
try_secs=120    # each try of a client
connect_secs=120 # how long a client tries again while the server is not listening
sync_secs=$((server_secs + connect_secs + try_secs + 30)) # the other side's longest scenario

# meet TAG: meet the other side at TAG; fails if it does not come within
# sync_secs or names another TAG.
meet() {
	local tag=$1 reply='' end=$((SECONDS + sync_secs))
	if [ "$role" = host ]; then
		python3 - "$port" "$tag" "$sync_secs" <<'EOF'
import socket, sys
port, tag, secs = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", port))
s.listen(1)
s.settimeout(secs)
try:
    c, _ = s.accept()
except socket.timeout:
    sys.exit("sync %s: the guest did not come in %d s" % (tag, secs))
c.settimeout(30)
theirs = c.makefile().readline().strip()
c.sendall(b"go\n" if theirs == tag else b"mismatch\n")
c.close()
if theirs != tag:
    sys.exit("sync %s: the guest is at '%s'" % (tag, theirs))
EOF
		return
	fi
	# the guest: connect until the host listens (or the answer is lost:
	# a connection that came to a listener as it closed)
	while [ "$SECONDS" -lt "$end" ]; do
		if exec 3<>"/dev/tcp/$peer/$port"; then
			echo "$tag" >&3
			reply=''
			read -r -t 30 reply <&3
			exec 3<&-
			case $reply in
			go) return 0 ;;
			mismatch) echo "sync $tag: the host is at another scenario" >&2; return 1 ;;
			esac
		fi 2>/dev/null
		sleep 0.2
	done
	echo "sync $tag: the host did not come in $sync_secs s" >&2
	return 1
}

# diagnose: what the program and its stack are doing now
diagnose() {
	echo "---- $role side, $1 s on: state before the kill ----"
	if [ "$role" = host ]; then
		"${wrap[0]}" stat 2>&1
		ip -s link show 2>&1
	else
		rdma res show qp 2>&1
		rdma statistic show 2>&1 | head -n 20
		# the link: what the driver saw sent (against what the host's tap
		# received), what the qdisc handed it, the card's interrupts (a
		# card that stops transmitting holds rxe's requester, which waits
		# for its packets to be freed, and TCP: scripts/rxe-guest.sh)
		ip -s link show dev eth0 2>&1
		tc -s qdisc show dev eth0 2>&1
		grep -iE 'virtio|eth0' /proc/interrupts 2>&1
		ps -eo pid,stat,wchan:24,etimes,cmd 2>&1 | grep -vE ' \[.*\]$'
		dmesg 2>&1 | tail -n 30
	fi
}

# run SECS PROGRAM ARGS...: PROGRAM under timeout SECS (the wrapper
# included), its state written out 3 s before the kill
run() {
	local secs=$1 rc wd
	shift
	(
		trap 'kill "$s" 2>/dev/null; exit 0' TERM
		sleep $((secs - 3)) &
		s=$!
		wait "$s" && diagnose "$((secs - 3))" >>"$f.diag" 2>&1
	) &
	wd=$!
	# line-buffered: what a killed program printed is not lost
	timeout -k 2 "$secs" stdbuf -oL -eL "${wrap[@]}" "$@"
	rc=$?
	kill "$wd" 2>/dev/null
	wait "$wd" 2>/dev/null
	return "$rc"
}

k=0
while read -r name server prog args; do
	case $name in '' | '#'*) continue ;; esac
	k=$((k + 1))
	p=$((port + k))
	# shellcheck disable=SC2206 # the arguments are words on purpose
	a=($args)
	case $prog in
	ibv_*) common=(-d "$dev" -g "$gidx" -p "$p") ;;
	*) common=(-d "$dev" -x "$gidx" -p "$p" --report_gbits) ;;
	esac
	f="$out/$name.$role.out"
	rm -f "$f.diag"
	if ! meet "$k.$name"; then
		echo "SCENARIO $name rc=sync"
		exit 3
	fi
	t0=$SECONDS
	if [ "$server" = "$role" ]; then
		run "$server_secs" "$(command -v "$prog")" "${common[@]}" "${a[@]}" >"$f" 2>&1
		rc=$?
	else
		# The other side's server may not listen yet (the guest is slow:
		# emulated, and perftest calibrates its clock at start): try
		# again while the connection is refused (nothing of the server
		# is used up), for up to connect_secs.
		: >"$f"
		while :; do
			run "$try_secs" "$(command -v "$prog")" "${common[@]}" "${a[@]}" "$peer" >"$f.try" 2>&1
			rc=$?
			cat "$f.try" >>"$f"
			[ "$rc" != 0 ] && [ $((SECONDS - t0)) -lt "$connect_secs" ] &&
				grep -qiE "couldn't connect|unable to connect|connection refused" "$f.try" ||
				break
			echo "(not listening yet: again)" >>"$f"
			sleep 1
		done
		rm -f "$f.try"
	fi
	[ -s "$f.diag" ] && cat "$f.diag" >>"$f"
	rm -f "$f.diag"
	echo "SCENARIO $name rc=$rc ($((SECONDS - t0)) s)"
	# what went wrong, where the other side can see it (the guest's files
	# do not outlive it); of the tries of a client, the last ones
	if [ "$rc" != 0 ]; then
		grep -vE '^\(not listening yet: again\)$' "$f" | tail -n 60 | sed "s/^/  $name.$role| /"
	fi
done <"${SV_SCENARIOS:-$here/scenarios.sh}"
