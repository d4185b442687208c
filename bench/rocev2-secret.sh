#!/bin/bash
# What SOFTVERBS_SECRET costs over rocev2 (the keyed tag in place of the
# ICRC, docs/SECURITY.md "RoCEv2"): ib_write_bw at 64 KiB and 1 MiB and
# ib_write_lat at 8 B between two network namespaces joined by a veth, with
# and without the secret, alternated, REPS times each, in one sitting.
#   sudo bench/rocev2-secret.sh [BUILD_DIR]     (root: namespaces)
# Prints one line per run and the medians with their ratio (secret/none).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SV_TOOL=${SV_TOOL:-${1:-$ROOT/build}/bin/softverbs}
REPS=${REPS:-3}
BW_ITERS=${BW_ITERS:-500}
LAT_ITERS=${LAT_ITERS:-5000}
SECRET=${SECRET:-a secret for the rocev2 tag benchmark}
LOGS=${LOGS:-$(mktemp -d)}
[ "$(id -u)" = 0 ] || { echo "rocev2-secret: needs root (namespaces)" >&2; exit 77; }
NS_A=svb-tag-$$-a NS_B=svb-tag-$$-b
cleanup() {
	for ns in "$NS_A" "$NS_B"; do
		ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null
		ip netns del "$ns" 2>/dev/null
	done
}
trap cleanup EXIT
ip netns add "$NS_A" && ip netns add "$NS_B" || exit 1
ip -n "$NS_A" link add sva type veth peer name svb netns "$NS_B"
ip -n "$NS_A" addr add 10.215.0.1/24 dev sva
ip -n "$NS_B" addr add 10.215.0.2/24 dev svb
for x in "$NS_A sva" "$NS_B svb"; do
	read -r ns dev <<<"$x"
	ip -n "$ns" link set lo up
	ip -n "$ns" link set "$dev" up
done
sleep 1
export SOFTVERBS_TRANSPORT=rocev2
# port mode prog size iters column -> value (MB/s average, or us typical)
run() {
	local port=$1 mode=$2 prog=$3 size=$4 iters=$5 col=$6 env=(env -u SOFTVERBS_SECRET) log s
	[ "$mode" = secret ] && env=(env SOFTVERBS_SECRET="$SECRET")
	log=$LOGS/$mode.$prog.$size.$port
	ip netns exec "$NS_A" timeout 60 "${env[@]}" "$SV_TOOL" run -- "$prog" -d sv_sva -x 3 \
		-s "$size" -n "$iters" -F -p $port >"$log.server" 2>&1 &
	s=$!
	# the server listens once its QP exists (Argon2id with the secret first)
	for _ in 1 2 3 4 5; do
		sleep 1
		ip netns exec "$NS_B" timeout 60 "${env[@]}" "$SV_TOOL" run -- "$prog" -d sv_svb \
			-x 3 -s "$size" -n "$iters" -F -p $port 10.215.0.1 >"$log" 2>&1
		grep -q "Couldn't connect" "$log" || break
	done
	wait "$s" 2>/dev/null
	awk -v s="$size" -v c="$col" '$1 == s && NF >= c { v = $c } END { print v ? v : "-" }' "$log"
}
median() { tr ' ' '\n' | grep -v '^-\?$' | sort -g | awk '{ a[NR] = $1 } END { print NR ? a[int((NR + 1) / 2)] : "-" }'; }
declare -A vals
port=24000
tests=("ib_write_bw 65536 $BW_ITERS 4" "ib_write_bw 1048576 $BW_ITERS 4" "ib_write_lat 8 $LAT_ITERS 5")
for r in $(seq "$REPS"); do
	for t in "${tests[@]}"; do
		for mode in none secret; do
			read -r prog size iters col <<<"$t"
			port=$((port + 1))
			v=$(run "$port" "$mode" "$prog" "$size" "$iters" "$col")
			vals["$mode $prog $size"]+="$v "
			echo "run $r: $prog $size B, $mode: $v"
		done
	done
done
echo "medians of $REPS (bw: MB/s average; lat: us typical), ratio secret/none:"
for t in "${tests[@]}"; do
	read -r prog size _ _ <<<"$t"
	a=$(echo "${vals["none $prog $size"]}" | median)
	b=$(echo "${vals["secret $prog $size"]}" | median)
	printf '%-13s %8s B  none %9s  secret %9s  ratio %s\n' "$prog" "$size" "$a" "$b" \
		"$(awk -v a="$a" -v b="$b" 'BEGIN { if (a == "-" || b == "-" || a == 0) print "-"; else printf "%.3f", b / a }')"
done
echo "logs: $LOGS"
