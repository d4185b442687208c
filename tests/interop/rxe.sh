#!/bin/bash
# rxe.sh: softverbs over RoCEv2 (SOFTVERBS_TRANSPORT=rocev2) against Linux's
# own Soft-RoCE, a RoCEv2 implementation nobody here wrote: the rdma_rxe
# module of Debian 12's kernel, in a qemu guest (scripts/rxe-guest.sh) on a
# tap in a network namespace of this host.  Debian's ibv_rc_pingpong and
# ibv_ud_pingpong (-c: every buffer checked on both sides) and perftest's
# ib_{write,read,send,atomic}_bw run between rxe in the guest and softverbs
# in the namespace, each side once as the server and once as the client
# (scenarios.sh, side.sh); then some of them again with both sides on the
# RoCE v2 GID of their IPv6 address, every packet over IPv6
# (scenarios6.sh); then, on IPv4 again, with netem on the guest's link
# losing and duplicating what rxe sends (scenarios-netem.sh).  Every program on both sides must exit 0.
# The two sides meet before each scenario (side.sh), so that one that fails
# costs its own time only; a failure ends with the failed scenarios of both
# sides, each with its programs' output and, for one that ran out of time,
# the state of both stacks before the kill (softverbs stat; rxe's QPs and
# the guest kernel's log).
#
# Needs root (namespace, tap, debootstrap), qemu-system-x86_64, debootstrap,
# python3 (side.sh's meeting point) and the Debian mirror for the guest's first build (skips, 77, otherwise).
# The guest is built once into SV_RXE_GUEST (default /var/tmp/sv-rxe-guest)
# and reused.
. "$(dirname "$0")/../clients/lib.sh"
SV_BUDGET=${SV_BUDGET:-1700}
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
guest_dir=${SV_RXE_GUEST:-/var/tmp/sv-rxe-guest}
host_ip=10.212.0.1 guest_ip=10.212.0.2 port=19500 port6=19600 portn=19700
netem="loss 1% duplicate 1%" # the guest's eth0, last scenarios (scenarios-netem.sh)

[ "$(id -u)" = 0 ] || sv_skip_root "a network namespace, a tap device and debootstrap"
sv_require qemu-system-x86_64 debootstrap mkfs.ext4 ip python3 ibv_rc_pingpong ib_write_bw

t0=$SECONDS
if ! "$src/scripts/rxe-guest.sh" build "$guest_dir" >"$SV_WORK/build.log" 2>&1; then
	tail -20 "$SV_WORK/build.log"
	# debootstrap fetches everything from the Debian mirror: its failure is
	# the mirror's (or the network's) far more often than the script's
	grep -qiE 'debootstrap failed|failed to (fetch|resolve)|could not resolve|unable to connect|temporary failure' \
		"$SV_WORK/build.log" &&
		sv_skip "the guest cannot be built: debootstrap from the Debian mirror failed (it needs deb.debian.org reachable; its log is above)"
	sv_fail "building the rxe guest"
fi
sv_log "guest ready to boot in $guest_dir ($((SECONDS - t0)) s)"

# each program's output: not in $SV_WORK/*.out, which sv_fail prints whole
# (side.sh shows a failed scenario's output in the logs)
scen=$SV_WORK/scenarios
mkdir -p "$scen"
ns="svt-rxe-$$"
SV_NETNS+=("$ns")
t1=$SECONDS
# the guest plays its side of every scenario, then powers off (at once if
# the two sides lost each other: side.sh's status 3)
"$src/scripts/rxe-guest.sh" run --ready "$SV_WORK/ready" --tap svtrxe --timeout 1200 \
	--put "$here/side.sh" --put "$here/scenarios.sh" --put "$here/scenarios6.sh" \
	--put "$here/scenarios-netem.sh" \
	"$guest_dir" "$ns" "$host_ip" "$guest_ip" -- \
	bash -c "bash side.sh guest rxe0 \$SV_RXE_GID_INDEX $host_ip $port || [ \$? != 3 ] || exit 3;
		 SV_SCENARIOS=scenarios6.sh bash side.sh guest rxe0 \$SV_RXE_GID6_INDEX $host_ip $port6 ||
		 	[ \$? != 3 ] || exit 3;
		 modprobe sch_netem && tc qdisc add dev eth0 root netem $netem &&
		 SV_SCENARIOS=scenarios-netem.sh bash side.sh guest rxe0 \$SV_RXE_GID_INDEX $host_ip $portn;
		 tc -s qdisc show dev eth0" \
	>"$SV_WORK/guest.log" 2>&1 &
guest=$!
SV_PGIDS+=("$guest")
"$src/scripts/rxe-guest.sh" wait-ready "$SV_WORK/ready" 300 "$guest" ||
	sv_fail "the guest did not get ready"
sv_log "guest up in $((SECONDS - t1)) s: $(cat "$SV_WORK/ready")"

# softverbs' side of one scenario set: host_side GID_INDEX PORT SCENARIOS,
# its device on the tap; none once the two sides lost each other (side.sh's
# status 3, left in hrc): it would only wait in vain
hrc=0
: >"$SV_WORK/host.log"
host_side() {
	[ "$hrc" = 3 ] && return
	ip netns exec "$ns" env SOFTVERBS_TRANSPORT=rocev2 SV_OUT="$scen" SV_SCENARIOS="$3" \
		bash "$here/side.sh" host sv_svtrxe "$1" "$guest_ip" "$2" "$SV_TOOL" run -- \
		>>"$SV_WORK/host.log" 2>&1 || hrc=$?
}
# GID index 3 (::ffff:HOST_IP, RoCE v2), then index 5 (the tap's IPv6
# address, RoCE v2), then index 3 again while the guest's netem spoils what
# rxe sends
host_side 3 "$port" "$here/scenarios.sh"
host_side 5 "$port6" "$here/scenarios6.sh"
host_side 3 "$portn" "$here/scenarios-netem.sh"
grc=0
wait "$guest" || grc=$?
sv_log "both sides done in $((SECONDS - t1)) s (guest exit $grc)"

echo "host:"; cat "$SV_WORK/host.log"
echo "guest:"; cat "$SV_WORK/guest.log"
# fail WHY: the scenarios that did not pass, last (where a log's tail is
# what one sees), then fail
fail() {
	echo "== scenarios that did not pass, softverbs' side then rxe's:"
	grep -h '^SCENARIO' "$SV_WORK/host.log" | grep -v ' rc=0 '
	grep -h '^SCENARIO' "$SV_WORK/guest.log" | grep -v ' rc=0 '
	sv_fail "$@"
}
n=$(cat "$here/scenarios.sh" "$here/scenarios6.sh" "$here/scenarios-netem.sh" | grep -cvE '^(#|$)')
[ "$(grep -c '^SCENARIO .* rc=0 ' "$SV_WORK/host.log")" = "$n" ] ||
	fail "not every scenario passed on softverbs' side"
[ "$(grep -c '^SCENARIO .* rc=0 ' "$SV_WORK/guest.log")" = "$n" ] ||
	fail "not every scenario passed on rxe's side"
[ "$grc" = 0 ] || fail "the guest's side ended with $grc"
# data really moved: each pingpong reports its iterations on softverbs' side
for f in "$scen"/*.host.out; do
	case $f in
	*/rc.* | */ud.*) grep -q ' iters in ' "$f" || fail "$(basename "$f"): no result" ;;
	*) grep -qE '^ *[0-9]+ +[0-9]+ ' "$f" || fail "$(basename "$f"): no result row" ;;
	esac
done
# the IPv6 scenarios ran on softverbs' IPv6 GID
grep -q 'GID fd53:5676:' "$scen/rc.4KiB.v6.host-server.host.out" ||
	fail "rc.4KiB.v6: softverbs' side did not use its IPv6 GID"
# netem was there, and spoiled packets: "Sent N bytes M pkt (dropped D, ..." of
# the guest's eth0 after the lossy scenarios
dropped=$(sed -n 's/.*Sent [0-9]* bytes [0-9]* pkt (dropped \([0-9]*\),.*/\1/p' "$SV_WORK/guest.log" | head -n1)
grep -q "qdisc netem" "$SV_WORK/guest.log" && [ -n "$dropped" ] && [ "$dropped" -gt 0 ] ||
	fail "the guest's netem did not drop anything ('${dropped:-no netem}')"
sv_log "netem on the guest's eth0 ($netem) dropped $dropped of rxe's packets"
echo "PASS: $n scenarios between softverbs and rxe, both ways, over IPv4 and IPv6, and under netem"
