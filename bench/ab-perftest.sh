#!/usr/bin/env bash
# bench/ab-perftest.sh: compare two builds of softverbs in one sitting.
#
#   bench/ab-perftest.sh BASE_TREE HEAD_TREE [ROUNDS]
#
# Each tree is a checkout built with `make` (its build/bin/softverbs is
# used).  For ROUNDS rounds (default 8), alternating base and head so that
# both see the same background load, it runs perftest between two processes
# on sv_lo: ib_write_bw 8 B (message rate) and 1 MiB (bandwidth),
# ib_read_bw 1 MiB (READ bandwidth: responses made as the connection
# drains) and ib_send_lat 8 B (typical latency), over the default transport (shm) and
# over SOFTVERBS_TRANSPORT=tcp.  It prints every run and then, per measure,
# both medians and ranges and head/base.  Short runs on a shared machine are
# noisy and often bimodal: read the ranges, not only the ratio.
#
# To bisect a slowdown, check the two commits out side by side
# (git worktree add DIR COMMIT; make -C DIR) and run this on them.
set -euo pipefail
# the runs on one host use the loopback device, which a host with another
# interface shows only when asked (src/verbs/device.c)
export SOFTVERBS_LOOPBACK=${SOFTVERBS_LOOPBACK:-1}

[ $# -ge 2 ] || { echo "usage: $0 BASE_TREE HEAD_TREE [ROUNDS]" >&2; exit 2; }
BASE=$1 HEAD=$2 ROUNDS=${3:-8}
for t in "$BASE" "$HEAD"; do
	[ -x "$t/build/bin/softverbs" ] || { echo "$t/build/bin/softverbs: build it first" >&2; exit 2; }
done
command -v ib_write_bw >/dev/null || { echo "perftest is not installed" >&2; exit 2; }
OUT=$(mktemp -d "${TMPDIR:-/tmp}/sv-ab.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

# one TOOL TRANSPORT PROGRAM ARGS...: server and client on sv_lo; the client's output in $OUT/c
one() {
	local tool=$1 tr=$2
	shift 2
	local port=$((21000 + RANDOM % 9000)) # below the ephemeral port range
	SOFTVERBS_TRANSPORT=$tr timeout 60 "$tool" run -- "$@" -d sv_lo -p "$port" >"$OUT/s" 2>&1 &
	sleep 0.3
	SOFTVERBS_TRANSPORT=$tr timeout 60 "$tool" run -- "$@" -d sv_lo -p "$port" 127.0.0.1 \
		>"$OUT/c" 2>&1 || true
	wait || true
}

for r in $(seq "$ROUNDS"); do
	for v in base head; do
		tree=$BASE
		[ "$v" = head ] && tree=$HEAD
		tool=$tree/build/bin/softverbs
		for tr in auto tcp; do
			one "$tool" "$tr" ib_write_bw -s 8 -n 200000 -x 0 -F
			rate=$(awk '/^ *8 +200000/ { print $5 }' "$OUT/c")
			one "$tool" "$tr" ib_write_bw -s 1048576 -n 2000 -x 0 -F
			bw=$(awk '/^ *1048576 +2000/ { print $4 }' "$OUT/c")
			one "$tool" "$tr" ib_read_bw -s 1048576 -n 1000 -x 0 -F
			rd=$(awk '/^ *1048576 +1000/ { print $4 }' "$OUT/c")
			one "$tool" "$tr" ib_send_lat -s 8 -n 20000 -x 0 -F
			lat=$(awk '/^ *8 +20000/ { print $5 }' "$OUT/c")
			echo "$r $v $tr rate_Mpps=${rate:-} bw1M_MBps=${bw:-} rd1M_MBps=${rd:-} lat8_us=${lat:-}" |
				tee -a "$OUT/all"
		done
	done
done

python3 - "$OUT/all" <<'EOF'
import statistics, sys
d = {}
for line in open(sys.argv[1]):
    _, v, tr, *kv = line.split()
    for x in kv:
        k, val = x.split("=")
        if val:
            d.setdefault((k, tr, v), []).append(float(val))
for k in ("rate_Mpps", "bw1M_MBps", "rd1M_MBps", "lat8_us"):
    for tr in ("auto", "tcp"):
        b, h = d.get((k, tr, "base"), []), d.get((k, tr, "head"), [])
        if not b or not h:
            continue
        mb, mh = statistics.median(b), statistics.median(h)
        print(f"{k:10s} {tr:4s}  base {mb:9.3f} [{min(b):.3f}-{max(b):.3f}]"
              f"  head {mh:9.3f} [{min(h):.3f}-{max(h):.3f}]  head/base {mh / mb:.2f}")
EOF
