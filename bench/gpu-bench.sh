#!/usr/bin/env bash
# bench/gpu-bench.sh: GPU memory over softverbs, next to what the GPU's own
# copy engines move, on a machine with an NVIDIA GPU (one command there,
# after scripts/gpu-test.sh or a build into build-gpu, and
# bench/gpu-perftest-build.sh for perftest with CUDA).
#
# It measures, back to back:
#   - softverbs-bench-gpucopy: cuMemcpy device-to-device, host-to-device
#     (page-locked and pageable) and device-to-host, the ceilings;
#   - perftest's ib_write_bw, ib_read_bw and ib_send_bw, unmodified, two
#     processes of this host on device sv_lo, with --use_cuda=0 (both
#     buffers in GPU memory) and with host memory, over
#       shm        (the default between processes of a host: GPU to GPU by
#                   CUDA IPC where both processes opened CUDA),
#       shm-noipc  (SOFTVERBS_CUDA_IPC=0: staged through host memory),
#       tcp        (SOFTVERBS_TRANSPORT=tcp: what crosses hosts does, staged
#                   through page-locked host buffers).
# Prints one table (MB/s, perftest's "BW average") and writes it to
# $RESULTS/gpu-table.txt with every program's output in $RESULTS/logs-gpu/.
#
# Environment: SV_BUILD (build-gpu), PERFTEST_BIN
# (build-gpu-perftest/perftest), SIZES (65536 1048576 8388608), RESULTS
# (bench/results), PROGS (ib_write_bw ib_read_bw ib_send_bw).
set -uo pipefail
# the runs on one host use the loopback device, which a host with another
# interface shows only when asked (src/verbs/device.c)
export SOFTVERBS_LOOPBACK=${SOFTVERBS_LOOPBACK:-1}

root=$(cd "$(dirname "$0")/.." && pwd)
sv=${SV_BUILD:-$root/build-gpu}
pt=${PERFTEST_BIN:-$root/build-gpu-perftest/perftest}
sizes=${SIZES:-65536 1048576 8388608}
progs=${PROGS:-ib_write_bw ib_read_bw ib_send_bw}
results=${RESULTS:-$root/bench/results}
logs=$results/logs-gpu
table=$results/gpu-table.txt
tool=$sv/bin/softverbs
mkdir -p "$logs"

echo "== the GPU's own copies (MB/s)" | tee "$table"
# shellcheck disable=SC2086 # one argument per size
"$sv/bin/softverbs-bench-gpucopy" 0.3 $sizes | tee -a "$table"

# bytes moved per point: about 2 GiB, at least 200 messages
iters() { local n=$((2147483648 / $1)); [ "$n" -gt 5000 ] && n=5000; [ "$n" -lt 200 ] && n=200; echo "$n"; }

# one perftest pair; prints its average MB/s, or "-" where it failed
pair() {
	local mode=$1 prog=$2 size=$3 mem=$4 log port n bw
	local -a env=(SOFTVERBS_TRANSPORT=shm) flags=()
	case $mode in
	shm-noipc) env+=(SOFTVERBS_CUDA_IPC=0) ;;
	tcp) env=(SOFTVERBS_TRANSPORT=tcp) ;;
	esac
	[ "$mem" = cuda ] && flags=(--use_cuda=0)
	log=$logs/$mode-$prog-$size-$mem
	port=$((20000 + RANDOM % 20000))
	n=$(iters "$size")
	env "${env[@]}" timeout 40 "$tool" run -- "$pt/$prog" -d sv_lo -p "$port" -s "$size" \
		-n "$n" "${flags[@]}" >"$log.server" 2>&1 &
	sleep 0.5
	env "${env[@]}" timeout 40 "$tool" run -- "$pt/$prog" -d sv_lo -p "$port" -s "$size" \
		-n "$n" "${flags[@]}" 127.0.0.1 >"$log.client" 2>&1
	wait
	bw=$(awk -v s="$size" '$1 == s && NF >= 5 { v = $4 } END { print v }' "$log.client")
	echo "${bw:--}"
}

printf '\n== perftest over softverbs, two processes of this host (MB/s, BW average)\n' | tee -a "$table"
printf '%-12s %-10s %9s %10s %10s\n' program transport bytes host cuda | tee -a "$table"
for prog in $progs; do
	for mode in shm shm-noipc tcp; do
		for size in $sizes; do
			printf '%-12s %-10s %9s %10s %10s\n' "$prog" "$mode" "$size" \
				"$(pair "$mode" "$prog" "$size" host)" \
				"$(pair "$mode" "$prog" "$size" cuda)" | tee -a "$table"
		done
	done
done
