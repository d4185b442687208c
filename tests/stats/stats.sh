#!/bin/bash
# stats.sh SOFTVERBS STATS_TRAFFIC
#
# The counters as users read them, against traffic counted in advance
# (traffic.c writes what every counter must be):
#   1. `softverbs stat --json --pid P`: both contexts, every port and QP
#      counter, the completion errors by status, QP types and states;
#   2. `softverbs stat --pid P` (text): the same numbers, parsed;
#   3. `softverbs top --iterations 2`: two frames listing both contexts and
#      all their QPs;
#   4. the sysfs view's ports/1/counters and hw_counters files, read with
#      cat under `softverbs run`, and the device line of `softverbs stat`:
#      the sum over both contexts;
#   5. when the program exits with its devices open its segments are gone
#      (closing them is checked by stats_traffic itself), and the segment of
#      a program killed with SIGKILL is not listed and is removed by the tool.
# As root the whole run happens in a network namespace of its own, where
# sv_lo is this test's alone, so the device sums (4) are exact; otherwise
# other users of sv_lo may add to them and they are checked as at least.
set -euo pipefail
tool=$1 traffic=$2
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
command -v python3 >/dev/null 2>&1 || skip "python3 not installed: install Debian package python3 (apt-get install python3)"

work=$(mktemp -d "${TMPDIR:-/tmp}/sv-stats.XXXXXX")
ns=
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	[ -z "$ns" ] || ip netns del "$ns" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

in_ns=()
exclusive=0
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null 2>&1 && ip netns add "svst-$$" 2>/dev/null; then
	ns=svst-$$
	ip -n "$ns" link set lo up
	in_ns=(ip netns exec "$ns")
	exclusive=1
	echo "-- in network namespace $ns: sv_lo is this test's alone"
fi
run() { "${in_ns[@]}" "$@"; }

# start the traffic; it prints READY when its expectations are written.
# Sets tjob (the background job to wait for) and tpid (the program's pid,
# from its expectations: the job may be a shell or ip(8) around it).
start_traffic() { # NAME
	mkfifo "$work/$1.in"
	SV_STATS_EXCLUSIVE=$([ "$exclusive" = 1 ] && echo 1) \
		run "$traffic" "$work/$1.json" exit-open <"$work/$1.in" >"$work/$1.out" 2>&1 &
	tjob=$!
	exec {hold}>"$work/$1.in" # its standard input stays open until we close it
	for _ in $(seq 300); do
		if grep -q READY "$work/$1.out"; then
			tpid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' \
				"$work/$1.json")
			pids+=("$tpid")
			return 0
		fi
		kill -0 "$tjob" 2>/dev/null || { cat "$work/$1.out"; fail "$1 exited early"; }
		sleep 0.1
	done
	cat "$work/$1.out"
	fail "$1 not ready in 30 s"
}

segments() { # PID: the segment files of PID in either runtime directory
	local d
	for d in "${XDG_RUNTIME_DIR:-/nonexistent}/softverbs/stats" "/tmp/softverbs-$(id -u)/stats"; do
		ls -1 "$d/$1"-* 2>/dev/null || true
	done
}

start_traffic traffic
pid=$tpid job=$tjob
echo "-- stats_traffic pid $pid ready; segments: $(segments "$pid" | tr '\n' ' ')"
[ -n "$(segments "$pid")" ] || fail "no segment files for pid $pid"

run "$tool" stat --json --pid "$pid" >"$work/stat.json" || fail "softverbs stat --json"
run "$tool" stat --json >"$work/all.json" || fail "softverbs stat --json (all)"
run "$tool" stat --pid "$pid" >"$work/stat.txt" || fail "softverbs stat"
run "$tool" top --iterations 2 --delay 0.2 --pid "$pid" >"$work/top.txt" || fail "softverbs top"
run "$tool" run -- sh -c 'd=/sys/class/infiniband/sv_lo/ports/1
	for f in "$d"/counters/* "$d"/hw_counters/*; do
		echo "${f#$d/} $(cat "$f")"
	done' >"$work/sysfs.txt" || fail "reading the sysfs counters files"
sed -n '1,12p' "$work/stat.txt"
echo "   ..."
sed -n '1,6p' "$work/top.txt"

python3 - "$work" "$pid" "$exclusive" <<'PY'
import json, re, sys

work, pid, exclusive = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
exp = json.load(open(f"{work}/traffic.json"))
errors = []
def check(what, got, want):
    if got != want:
        errors.append(f"{what}: {got!r}, expected {want!r}")

# 1. JSON
st = json.load(open(f"{work}/stat.json"))
ctxs = {c["context"]: c for c in st["contexts"] if c["pid"] == pid}
check("contexts of the pid", sorted(ctxs), [0, 1])
check("other pids listed with --pid", [c["pid"] for c in st["contexts"] if c["pid"] != pid], [])
for e in exp["contexts"]:
    c = ctxs.get(e["context"])
    if not c:
        continue
    n = e["context"]
    check(f"json context {n} device", (c["device"], c["port"]), ("sv_lo", 1))
    check(f"json context {n} counters", c["counters"], e["counters"])
    check(f"json context {n} completion errors", c["completion_errors_by_status"],
          e["completion_errors_by_status"])
    qps = {str(q["qpn"]): q for q in c["qps"]}
    check(f"json context {n} QPs", sorted(qps), sorted(e["qps"]))
    for qpn, eq in e["qps"].items():
        q = qps.get(qpn)
        if q:
            check(f"json context {n} QP {qpn} type/state", (q["type"], q["state"]),
                  (eq["type"], eq["state"]))
            check(f"json context {n} QP {qpn} counters", q["counters"], eq["counters"])

# 2. text: headings, then "name value" pairs on indented lines
text, cur = {}, None
for line in open(f"{work}/stat.txt"):
    m = re.match(r"link sv_lo/1 pid (\d+) comm \S+ context (\d+) endpoint \S+ qps (\d+)", line)
    if m:
        cur = ("ctx", int(m[2]))
        text[cur] = {"qps": int(m[3])}
        continue
    m = re.match(r"qp sv_lo/1 lqpn (\d+) type (\w+) state (\w+) rqpn \d+ peer \S+ pid (\d+)", line)
    if m:
        cur = ("qp", len(text), m[1])  # QPNs repeat across contexts: keyed by position
        text[cur] = {"type": m[2], "state": m[3]}
        continue
    if line.startswith("device "):
        cur = ("dev", line.split()[1])
        text[cur] = {}
        continue
    if line.startswith("    ") and cur and "completion errors" not in line:
        f = line.split()
        for k, v in zip(f[0::2], f[1::2]):
            text[cur][k] = int(v)
for e in exp["contexts"]:
    t = text.get(("ctx", e["context"]), {})
    check(f"text context {e['context']} QP count", t.get("qps"), len(e["qps"]))
    check(f"text context {e['context']} counters", {k: t.get(k) for k in e["counters"]},
          e["counters"])
text_qps = [v for k, v in text.items() if k[0] == "qp"]
check("text QP lines", len(text_qps), sum(len(e["qps"]) for e in exp["contexts"]))

# 3. top: two frames, each with both contexts and every QP
top = open(f"{work}/top.txt").read()
frames = top.split("softverbs top - ")[1:]
check("top frames", len(frames), 2)
for i, fr in enumerate(frames):
    rows = [l for l in fr.splitlines() if re.match(rf"{pid}\s", l)]
    check(f"top frame {i} context rows", len(rows), 2)
    qrows = [l for l in fr.splitlines() if re.match(r"\s+qp \d+ (RC|UC|UD) ", l)]
    check(f"top frame {i} QP rows", len(qrows), sum(len(e["qps"]) for e in exp["contexts"]))

# 4. device sums: the stat device line and the sysfs files
total = {k: sum(e["counters"][k] for e in exp["contexts"]) for k in exp["contexts"][0]["counters"]}
wc = {}
for e in exp["contexts"]:
    for k, v in e["completion_errors_by_status"].items():
        wc[k] = wc.get(k, 0) + v
want = {f"hw_counters/{k}": v for k, v in total.items()}
want.update({
    "counters/port_xmit_packets": total["tx_packets"],
    "counters/port_rcv_packets": total["rx_packets"],
    "counters/port_xmit_data": total["tx_bytes"] // 4,
    "counters/port_rcv_data": total["rx_bytes"] // 4,
    "counters/unicast_xmit_packets": total["tx_packets"],
    "counters/unicast_rcv_packets": total["rx_packets"],
    "counters/multicast_xmit_packets": 0,
    "counters/multicast_rcv_packets": 0,
    "hw_counters/sent_pkts": total["tx_packets"],
    "hw_counters/rcvd_pkts": total["rx_packets"],
    "hw_counters/duplicate_request": total["duplicate_requests"],
    "hw_counters/out_of_seq_request": total["sequence_errors"],
    "hw_counters/rcvd_rnr_err": total["rnr_naks_received"],
    "hw_counters/send_rnr_err": total["rnr_naks_sent"],
    "hw_counters/completer_retry_err": total["ack_timeouts"],
    "hw_counters/retry_exceeded_err": wc.get("retry_exc_err", 0),
    "hw_counters/retry_rnr_exceeded_err": wc.get("rnr_retry_exc_err", 0),
})
sysfs = dict(l.split() for l in open(f"{work}/sysfs.txt"))
sysfs = {k: int(v) for k, v in sysfs.items()}
check("sysfs counters files", sorted(sysfs), sorted(want))
alls = json.load(open(f"{work}/all.json"))
devs = [d for d in alls["devices"] if d["device"] == "sv_lo"
        and d["netns"] == ctxs[0]["netns"]] if 0 in ctxs else []
check("device lines for sv_lo here", len(devs), 1)
for k, v in want.items():
    g = sysfs.get(k)
    if g is None:
        continue
    if exclusive:
        check(f"sysfs {k}", g, v)
    elif g < v:
        errors.append(f"sysfs {k}: {g}, expected at least {v}")
if devs:
    for k, v in total.items():
        g = devs[0]["counters"][k]
        if (g != v) if exclusive else (g < v):
            errors.append(f"device line {k}: {g}, expected {'' if exclusive else 'at least '}{v}")

if errors:
    print("FAIL:\n  " + "\n  ".join(errors))
    sys.exit(1)
print(f"-- json, text, top{' and exact' if exclusive else ', at-least'} device sums agree "
      f"with the traffic ({len(sysfs)} sysfs files)")
PY

# 5. gone at exit; a killed process's segment is cleaned by the tool
exec {hold}>&-
wait "$job" || { cat "$work/traffic.out"; fail "stats_traffic failed after READY"; }
[ -z "$(segments "$pid")" ] || fail "segments left after exit: $(segments "$pid")"
run "$tool" stat --pid "$pid" | grep -q "no softverbs contexts match" ||
	fail "softverbs stat still lists pid $pid after it exited"

# A runtime directory of its own: a device opened by any other process
# sweeps the segments of dead processes from the shared one, and this part
# checks what the tool does with one.
export XDG_RUNTIME_DIR=$work/xdg
mkdir -m 700 "$XDG_RUNTIME_DIR"
start_traffic killed
kpid=$tpid
kill -9 "$kpid"
wait "$tjob" 2>/dev/null || true
exec {hold}>&-
left=$(segments "$kpid")
[ -n "$left" ] || fail "the killed process left no segment to clean (test setup)"
run "$tool" stat --json --pid "$kpid" >"$work/killed.json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(len(d["contexts"]) != 0)' \
	"$work/killed.json" || fail "softverbs stat lists the killed pid $kpid"
[ -z "$(segments "$kpid")" ] || fail "softverbs stat left the killed process's segments: $left"
echo "PASS: counters read by softverbs stat/top and the sysfs view match the traffic; segments removed"
