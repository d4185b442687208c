#!/bin/bash
# rsocket.sh MODE SCENARIO PORT [ARGS...]
#
# Debian's unmodified rdmacm-utils rsockets programs over softverbs'
# librdmacm.so.1 (src/rdmacm/rsocket.c): a server and a client process,
# both through `softverbs run`.
#   MODE lo:     both on this host, 127.0.0.1 (device sv_lo).
#   MODE lo6:    both on this host, ::1 (sv_lo; AF_INET6 rsockets).
#   MODE netns6: server in one network namespace, client in another, joined
#                by a dual-stack veth pair (lib.sh sv_netns_pair ... ipv6),
#                over their IPv6 addresses fd00:211:NET::1 and ::2, both
#                with the same SOFTVERBS_SECRET, as two hosts (needs root,
#                else skip 77).
# lo6 and netns6 run rstream, riostream and udpong (rcopy's HOST:FILE and
# rsocket_echo take IPv4 only).
# SCENARIO:
#   rstream SIZE COUNT [-T OPT]...  rstream -S SIZE -C COUNT, verified (-T v);
#                                   -T a: rpoll-driven, -T n: non-blocking
#   riostream SIZE COUNT            riostream (riomap + riowrite), verified
#   rcopy BYTES                     rcopy of a random file; the copy is cmp'd
#   udpong SIZE COUNT [-T OPT]...   udpong (SOCK_DGRAM rsockets over UD) -S SIZE
#                                   -C COUNT; -T e: echo (every datagram
#                                   answered; all 2*COUNT counted), else one
#                                   way (UD may drop: 1..COUNT counted);
#                                   -T b blocking, -T a rpoll-driven.  Echo
#                                   counts stay small: udpong resends after
#                                   1 ms without an answer, and a stale
#                                   answer read after that makes it resend
#                                   the old seqno for ever (udpong's bug;
#                                   on a loaded host one retry)
#   preload                         rsocket_echo (plain BSD sockets, this
#                                   folder) with Debian's librspreload.so
#                                   preloaded: server echoes, client checks
# PORT is the rdma_cm port (a TCP port on the device's address here).
. "$(dirname "$0")/lib.sh"

[ $# -ge 3 ] || sv_fail "usage: $0 lo|lo6|netns6|only6 SCENARIO PORT [ARGS...]"
mode=$1 scen=$2 port=$3
shift 3
case $scen in
rstream) sv_require rstream ;;
preload) [ -n "${SV_ECHO:-}" ] && [ -x "$SV_ECHO" ] || sv_fail "rsocket_echo not built" ;;
*) sv_require "$scen" ;;
esac
[ -e "$(dirname "$SV_TOOL")/../lib/librdmacm.so.1" ] || sv_fail "librdmacm.so.1 not built"
case $mode in
lo)
	sns="" cns="" addr=127.0.0.1 caddr=127.0.0.1
	port=$(sv_free_port "" "$port")
	;;
lo6)
	case $scen in rstream | riostream | udpong) ;; *) sv_fail "$scen: not in lo6 mode" ;; esac
	sv_require_ipv6_lo
	sns="" cns="" addr=::1 caddr=::1
	port=$(sv_free_port "" "$port")
	;;
netns6 | only6)
	case $scen in rstream | riostream | udpong) ;; *) sv_fail "$scen: not in $mode mode" ;; esac
	net=$(((port % 200) + 30))
	# only6: sva and svb with IPv6 addresses alone (IPv6-only devices)
	if [ "$mode" = only6 ]; then
		sv_netns_pair "rs6-$scen-$port" "$net" ipv6only
	else
		sv_netns_pair "rs6-$scen-$port" "$net" ipv6
	fi
	sns=$SV_NS_A cns=$SV_NS_B addr="fd00:211:$net::1" caddr="fd00:211:$net::2"
	# two hosts: neither takes the other's host secret, both hold this one
	SOFTVERBS_SECRET=$(head -c 24 /dev/urandom | base64)
	export SOFTVERBS_SECRET
	;;
*)
	sv_fail "unknown mode '$mode'"
	;;
esac

# check_rows NAME ROWS: NAME.out has the result header and exactly ROWS
# result rows, and says nothing about errors.
check_rows() {
	local f="$SV_WORK/$1.out" n
	grep -q '^name *bytes *xfers *iters *total *time *Gb/sec *usec/xfer' "$f" ||
		sv_fail "$1: no result header"
	n=$(grep -cE '^[0-9a-z_]+ +[0-9]+[kmg]? +[0-9]+[kmg]? +[0-9]+[kmg]? +[0-9.]+[kmg]? +[0-9.]+s ' "$f")
	[ "$n" = "$2" ] || sv_fail "$1: $n result rows, expected $2"
	! grep -qiE 'error|fail|mismatch|invalid|not implemented' "$f" || sv_fail "$1 reported an error"
}

human() { # rstream's size_str: 65536 -> 64k, 1048576 -> 1m
	local s=$1
	if [ "$s" -ge $((1 << 30)) ] && [ $((s % (1 << 30))) = 0 ]; then echo "$((s >> 30))g"
	elif [ "$s" -ge $((1 << 20)) ] && [ $((s % (1 << 20))) = 0 ]; then echo "$((s >> 20))m"
	elif [ "$s" -ge 1024 ] && [ $((s % 1024)) = 0 ]; then echo "$((s >> 10))k"
	else echo "$s"; fi
}

count_str() { # rstream's cnt_str: 1000 -> 1k, 50 -> 50
	local c=$1
	if [ "$c" -ge 1000000 ] && [ $((c % 1000000)) = 0 ]; then echo "$((c / 1000000))m"
	elif [ "$c" -ge 1000 ] && [ $((c % 1000)) = 0 ]; then echo "$((c / 1000))k"
	else echo "$c"; fi
}

crc=0
case $scen in
rstream | riostream)
	size=$1 count=$2
	shift 2
	sv_start_server "$sns" "$port" "$scen" -b "$addr" -p "$port" -S "$size" -C "$count" -T v "$@"
	sv_run client "$(($(sv_left) - 5))" "$cns" "$scen" -s "$addr" -p "$port" -S "$size" \
		-C "$count" -T v "$@" || crc=$?
	sv_finish "$crc"
	for s in server client; do
		check_rows "$s" 1
		row=$(grep '^custom ' "$SV_WORK/$s.out") || sv_fail "$s: no 'custom' row"
		read -r _ b x _ <<<"$row"
		[ "$b" = "$(human "$size")" ] || sv_fail "$s: row for $b bytes, expected $(human "$size")"
		[ "$x" = "$(count_str "$count")" ] || sv_fail "$s: row for $x transfers, expected $count"
	done
	echo "   $(grep '^custom ' "$SV_WORK/client.out")"
	;;
rcopy)
	bytes=$1
	head -c "$bytes" /dev/urandom >"$SV_WORK/src.bin"
	sv_start_server "" "$port" rcopy -p "$port"
	sv_run client "$(($(sv_left) - 5))" "" rcopy "$SV_WORK/src.bin" "$addr:$SV_WORK/dst.bin" \
		-p "$port" || crc=$?
	[ "$crc" = 0 ] || sv_fail "rcopy client exited $crc"
	grep -q "^$bytes bytes in " "$SV_WORK/client.out" || sv_fail "client did not report $bytes bytes"
	# the server serves until stopped; it has written the file when it
	# prints "done" for this client
	for _ in $(seq 100); do
		grep -q "transferring...$bytes bytes...closing...done" "$SV_WORK/server.out" && break
		sleep 0.1
	done
	grep -q "transferring...$bytes bytes...closing...done" "$SV_WORK/server.out" ||
		sv_fail "server did not finish the file"
	kill -0 "$SV_SPID" 2>/dev/null || sv_fail "rcopy server died"
	cmp "$SV_WORK/src.bin" "$SV_WORK/dst.bin" || sv_fail "the copy differs"
	;;
udpong)
	size=$1 count=$2
	shift 2
	echo=0
	for a in "$@"; do [ "$a" = e ] && echo=1; done
	# In echo mode udpong resends after 1 ms without an answer and, once a
	# stale duplicate answer is read into the message it resends, resends
	# the old seqno for ever (its bug): one reply later than 1 ms, which a
	# machine with more runnable threads than CPUs gives any program whose
	# round trip takes four wake-ups, hangs it.  The pair runs at a higher
	# priority than the load, so the test checks the echo and not the
	# scheduler; udpong's latency under load is measured by bench/.
	[ "$echo" = 1 ] && export SV_NICE=-10
	# the server answers until stopped (cleanup ends it)
	sv_start_server "$sns" "$port" udpong -b "$addr" -p "$port" "$@"
	sv_run client 15 "$cns" udpong -s "$addr" -p "$port" -S "$size" -C "$count" "$@" || crc=$?
	if [ "$crc" = 124 ]; then
		# udpong's own livelock: a reply later than its 1 ms resend timer
		# is answered twice, and the stale duplicate, read into the message
		# it resends, makes it resend the old seqno for ever.  One retry.
		echo "udpong client stuck (late reply, udpong resends stale seqnos): retrying once"
		mv "$SV_WORK/client.out" "$SV_WORK/client.1.out"
		crc=0
		sv_run client "$(($(sv_left) - 5))" "$cns" udpong -s "$addr" -p "$port" -S "$size" \
			-C "$count" "$@" || crc=$?
	fi
	[ "$crc" = 0 ] || sv_fail "udpong client exited $crc"
	kill -0 "$SV_SPID" 2>/dev/null || sv_fail "udpong server died"
	grep -q '^name *bytes *xfers *total *time *Gb/sec *usec/xfer' "$SV_WORK/client.out" ||
		sv_fail "client: no result header"
	[ "$(grep -c '^custom ' "$SV_WORK/client.out")" = 1 ] || sv_fail "client: not one 'custom' row"
	! grep -qiE 'error|fail|rsend|rrecv|rconnect' "$SV_WORK/client.out" || sv_fail "client reported an error"
	row=$(grep '^custom ' "$SV_WORK/client.out")
	read -r _ b x _ <<<"$row"
	[ "$b" = "$(human "$size")" ] || sv_fail "client: row for $b bytes, expected $(human "$size")"
	if [ "$echo" = 1 ]; then
		[ "$x" = "$(count_str $((2 * count)))" ] ||
			sv_fail "client: $x transfers, expected $((2 * count)) (echo)"
	else
		# one way: the count is what the server says it received
		case $x in *[kmg]) n=${x%?}; [ "$n" -ge 1 ] 2>/dev/null || sv_fail "client: $x transfers" ;;
		*) [ "$x" -ge 1 ] && [ "$x" -le "$count" ] 2>/dev/null ||
			sv_fail "client: $x transfers, expected 1..$count" ;; esac
	fi
	grep -q "^client login from $caddr\$" "$SV_WORK/server.out" || sv_fail "server saw no login"
	! grep -qiE 'error|fail|rsend|rrecv|rbind' "$SV_WORK/server.out" || sv_fail "server reported an error"
	echo "   $row"
	;;
preload)
	pre=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so
	[ -e "$pre" ] || sv_skip_package librdmacm1 "$pre not installed"
	sv_start_server "" "$port" env LD_PRELOAD="$pre" "$SV_ECHO" server "$addr" "$port"
	sv_run client "$(($(sv_left) - 5))" "" env LD_PRELOAD="$pre" "$SV_ECHO" client "$addr" "$port" ||
		crc=$?
	sv_finish "$crc"
	grep -q '^echo: client ok' "$SV_WORK/client.out" || sv_fail "client did not check the echo"
	grep -q '^echo: server ok' "$SV_WORK/server.out" || sv_fail "server did not finish"
	grep -q '^echo: rsocket' "$SV_WORK/client.out" || sv_fail "client socket was not an rsocket"
	;;
*)
	sv_fail "unknown scenario '$scen'"
	;;
esac
echo "PASS: $scen $mode $*"
