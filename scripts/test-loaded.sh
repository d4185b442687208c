#!/usr/bin/env bash
# scripts/test-loaded.sh [RUNS] [make target]: the test suite on a busy
# machine, as CI may see it.  Busy loops, twice the CPU count (LOAD=N for
# another number), spin beside `make test` (or the target given, e.g.
# test-full) for RUNS runs in a row (default 1); it stops at the first run
# that fails.  Each run's CTest summary and time are printed at the end;
# the loops end with the script however it ends.
set -uo pipefail
runs=${1:-1}
target=${2:-test}
load=${LOAD:-$(($(nproc) * 2))}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pids=()
stop_load() {
	[ "${#pids[@]}" -gt 0 ] && kill "${pids[@]}" 2>/dev/null
	pids=()
}
trap stop_load EXIT
trap 'exit 130' INT TERM HUP
make -C "$root" build >/dev/null || exit 1
for ((i = 0; i < load; i++)); do
	(while :; do :; done) &
	pids+=("$!")
done
echo "test-loaded: $load busy loops beside make $target ($(nproc) CPUs), $runs run(s)"
summary=()
rc=0
for ((r = 1; r <= runs; r++)); do
	start=$SECONDS
	log=$(mktemp "${TMPDIR:-/tmp}/softverbs-test-loaded.XXXXXX")
	make -C "$root" "$target" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	line=$(grep -E 'tests passed, [0-9]+ tests failed' "$log" | tail -1)
	summary+=("run $r: ${line:-no CTest summary} in $((SECONDS - start)) s (log: $log)")
	[ "$rc" = 0 ] || break
done
stop_load
printf '%s\n' "${summary[@]}"
exit "$rc"
