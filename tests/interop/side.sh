#!/bin/bash
# side.sh ROLE DEV GIDX PEER_IP BASEPORT [WRAP...]: play one side (ROLE host
# or guest) of every scenario in scenarios.sh, in order, against PEER_IP.
# WRAP runs each program (the host's `softverbs run --`).  Prints a line
# "SCENARIO name rc=N" for each; the output of each program goes to
# $SV_OUT/name.ROLE.out (SV_OUT defaults to the current directory).
set -u
role=$1 dev=$2 gidx=$3 peer=$4 port=$5
shift 5
wrap=("$@")
here=$(dirname "$0")
out=${SV_OUT:-.}
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
	if [ "$server" = "$role" ]; then
		timeout -k 2 400 "${wrap[@]}" "$(command -v "$prog")" "${common[@]}" "${a[@]}" >"$f" 2>&1
		rc=$?
	else
		# The other side's server may not listen yet (the guest is slow:
		# emulated, and perftest calibrates its clock at start): try
		# again while the connection is refused (nothing of the server
		# is used up), for up to 240 s.
		t0=$SECONDS
		: >"$f"
		while :; do
			timeout -k 2 120 "${wrap[@]}" "$(command -v "$prog")" "${common[@]}" "${a[@]}" \
				"$peer" >"$f.try" 2>&1
			rc=$?
			cat "$f.try" >>"$f"
			[ "$rc" != 0 ] && [ $((SECONDS - t0)) -lt 240 ] &&
				grep -qiE "couldn't connect|unable to connect|connection refused" "$f.try" ||
				break
			echo "(not listening yet: again)" >>"$f"
			sleep 1
		done
		rm -f "$f.try"
	fi
	echo "SCENARIO $name rc=$rc"
	# what went wrong, where the other side can see it (the guest's files
	# do not outlive it)
	[ "$rc" = 0 ] || sed "s/^/  $name.$role| /" "$f"
done <"${SV_SCENARIOS:-$here/scenarios.sh}"
