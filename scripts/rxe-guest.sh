#!/usr/bin/env bash
# Linux's own Soft-RoCE (the rdma_rxe kernel module) in a small Debian guest
# under qemu, networked to a network namespace of this host, so that a
# softverbs process in that namespace can talk RoCEv2 (UDP 4791) to a real,
# independent RoCE implementation.
#
#   scripts/rxe-guest.sh build DIR
#       Build (once; later calls check and reuse it) a Debian 12 guest in DIR:
#       DIR/rootfs.ext4, DIR/vmlinuz, DIR/initrd.img. Needs root (debootstrap)
#       and the Debian mirror (SV_RXE_MIRROR, default http://deb.debian.org/debian).
#
#   scripts/rxe-guest.sh run [OPTIONS] DIR NETNS HOST_IP GUEST_IP -- COMMAND [ARG...]
#       Boot the guest on a tap device in network namespace NETNS (created if
#       absent; the tap gets HOST_IP/24), bring up rxe0 on the guest's eth0
#       (GUEST_IP/24; rxe0's RoCE v2 GID of it is index 1), run COMMAND in the guest, power off. COMMAND's stdout
#       and stderr are this script's stdout and stderr, and its exit status is
#       the script's: 124 when the guest timed out (and was killed), 125 when
#       it failed before COMMAND ran (the console log's tail is printed).
#       Needs root (namespace, tap). OPTIONS:
#         --ready FILE       create FILE (content: the guest's ready line, see
#                            below) once rxe0 is up and COMMAND is starting;
#                            for running the guest in the background
#         --put PATH         copy PATH (file or directory, repeatable) into the
#                            guest's $SV_FILES (/run/sv/files), COMMAND's cwd
#         --timeout SEC      whole run, boot included (default 600)
#         --boot-timeout SEC boot to ready (default 240)
#         --console FILE     keep the guest's console log (kernel, init) there
#                            (default: a temporary file, shown on failure)
#         --tap NAME         tap device name (default: first free svrxe0..9)
#         --mem MB, --smp N  guest memory (default 1024) and CPUs (default 1)
#         --prefix LEN       prefix length of both addresses (default 24)
#         --nic MODEL        the guest's network card, a qemu device model:
#                            e1000 (default) or virtio-net-pci (see the design
#                            notes)
#
#   scripts/rxe-guest.sh wait-ready FILE SEC [PID]
#       Wait until FILE exists (a `run --ready FILE` in the background got
#       ready): exit 0 and print its line; exit 1 after SEC seconds, or as soon
#       as process PID (that background run) has ended.
#
# In the guest, COMMAND runs as root with bash, PATH set, cwd $SV_FILES, and:
#   SV_HOST_IP, SV_GUEST_IP   the two addresses
#   SV_RXE_DEV=rxe0, SV_RXE_NETDEV=eth0
#   SV_RXE_GID_INDEX          the GID index of ::ffff:GUEST_IP, RoCE v2
#   SV_HOST_IP6, SV_GUEST_IP6 IPv6 addresses of the link, fd53:5676:B:C::D/64
#                             for IPv4 A.B.C.D (ipv6_of)
#   SV_RXE_GID6_INDEX         the GID index of GUEST_IP6, RoCE v2
#   SV_FILES                  where --put copied its files
# The ready line (ready file, and this script's stderr) reads
#   SV-GUEST-READY dev=rxe0 netdev=eth0 ip=GUEST_IP gid_index=N gid=::ffff:... host_ping=ok
#
# Background use, e.g. a host-side softverbs peer against rxe in the guest
# (a sketch: softverbs' own IPv4 RoCE v2 GID is its index 3, rxe's index 1):
#   scripts/rxe-guest.sh run --ready "$t/ready" DIR ns 10.77.0.1 10.77.0.2 -- \
#       ibv_rc_pingpong -d rxe0 -g 1 >"$t/guest.out" 2>&1 &
#   guest=$!
#   scripts/rxe-guest.sh wait-ready "$t/ready" 300 "$guest"
#   ip netns exec ns softverbs run ibv_rc_pingpong -g 3 10.77.0.2
#   wait "$guest"        # the guest command's exit status
#
# Host packages (Debian 12; not in .ci/run): qemu-system-x86 (qemu-system-x86_64
# and its firmware from qemu-system-data), debootstrap, e2fsprogs (mkfs.ext4
# -d), iproute2 (ip netns, ip tuntap), coreutils (timeout), util-linux (flock),
# debian-archive-keyring. No KVM: qemu runs in TCG (pure emulation), because
# KVM is unavailable or unreliable on the machines this runs on. A first
# build takes about 6 minutes (mostly debootstrap), a boot to
# ready about 20 s of one host core (qemu's TCG).
#
# Design notes:
# - The guest's root disk is an ext4 image made from a debootstrap'ed
#   directory by `mkfs.ext4 -d` (no loop mounts); the kernel and initrd are the
#   guest's own (linux-image-amd64 installed in it), its initrd regenerated
#   with only the virtio/ext4 modules it needs to mount the root disk.
# - qemu opens the root disk with snapshot=on: the guest writes to a
#   throw-away overlay, so the image stays pristine and several guests may run
#   from it at once.
# - No systemd in the guest: init=/sv-init (in the image) mounts the pseudo
#   file systems and runs /run/sv/init.sh from a second, read-only virtio disk
#   that is a plain tar archive ("payload", made by `run` each time: init.sh,
#   the command, --put files). So what the guest does on boot lives in this
#   script, and changing it needs no rebuild of the image.
# - Four serial ports: ttyS0 console (kernel and init messages, to a log
#   file), ttyS1 COMMAND's stdout, ttyS2 its stderr, ttyS3 a control channel
#   (ready line, exit status). Kernel messages never mix into the output.
# - The network is a tap in NETNS, not NAT or a bridge to the outside: RoCE's
#   ICRC covers the IP addresses, and the host peer must see the guest's own
#   address. The guest's interface is eth0 (net.ifnames=0).
# - The card is an emulated e1000, not virtio-net. Under this qemu (7.2, TCG)
#   virtio-net's transmit queue now and then stopped for good in the middle
#   of a run: the guest's qdisc had handed the driver 69 packets more than
#   the driver saw completed, the host's tap had received exactly what the
#   driver saw completed, and nothing more left the guest, TCP included
#   (rxe's requester waits for its sent packets to be freed, so it stopped
#   too, and ibv_rc_pingpong spun for ever). It struck 5 of 13 runs of
#   interop.rxe's 20 RC pingpongs with one or two busy loops beside them,
#   and by its signs once in CI; with the e1000, 0 of 10 runs beside two
#   busy loops (--nic virtio-net-pci still boots the old card, to look
#   again).
set -euo pipefail

prog=rxe-guest
die() { echo "$prog: $*" >&2; exit 1; }
say() { echo "$prog: $*" >&2; }

# What the guest is built from. Any change here changes the stamp, so `build`
# rebuilds instead of reusing a guest made from something else.
suite=bookworm
mirror=${SV_RXE_MIRROR:-http://deb.debian.org/debian}
guest_packages=(
	linux-image-amd64 initramfs-tools kmod	# kernel (rdma_rxe is one of its modules), initrd
	rdma-core ibverbs-providers ibverbs-utils	# librxe, rdma-core's tools (ibv_devinfo, ibv_*_pingpong)
	rdmacm-utils perftest			# rping, ucmatose; ib_send_bw and the like
	iproute2 iputils-ping procps		# ip, rdma; ping; ps
)
initrd_modules=(virtio_pci virtio_blk ext4)
recipe="sv-rxe-guest v1 $suite $mirror ${guest_packages[*]} / ${initrd_modules[*]}"

# ---------------------------------------------------------------- build ----

# The stage-1 init, baked into the image: mount what the rest needs, unpack the
# payload disk (found by its serial, not by its order), run its init.sh.
# shellcheck disable=SC2016 # expanded by the guest's shell, not here
stage1_init='#!/bin/sh
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mountpoint -q /run || mount -t tmpfs -o mode=755 tmpfs /run
mount -t tmpfs tmpfs /tmp
mkdir -p /run/sv
for d in /sys/block/vd*; do
	if [ "$(cat "$d/serial" 2>/dev/null)" = svpayload ]; then
		tar -xf "/dev/${d##*/}" -C /run/sv && exec /bin/bash /run/sv/init.sh
	fi
done
echo "sv-init: no payload disk (serial svpayload), powering off"
echo o >/proc/sysrq-trigger
'

guest_valid() {
	local dir=$1
	[ -f "$dir/stamp" ] && [ "$(cat "$dir/stamp")" = "$recipe" ] &&
		[ -s "$dir/rootfs.ext4" ] && [ -s "$dir/vmlinuz" ] && [ -s "$dir/initrd.img" ]
}

cmd_build() {
	[ $# -eq 1 ] || die "usage: $0 build DIR"
	local dir=$1
	[ "$(id -u)" -eq 0 ] || die "build needs root (debootstrap)"
	for t in debootstrap mkfs.ext4 flock; do
		command -v "$t" >/dev/null || die "$t not found (apt-get install debootstrap e2fsprogs util-linux)"
	done
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	# One build at a time per DIR; a second caller waits, then finds it built.
	exec 9>"$dir/.lock"
	flock 9
	if guest_valid "$dir"; then
		say "guest in $dir is built already ($(cat "$dir/stamp"))"
		return 0
	fi
	local start=$SECONDS tmp=$dir/.build
	rm -rf "$tmp" "$dir/stamp"
	mkdir -p "$tmp"
	local root=$tmp/root

	say "debootstrap $suite ($mirror) into $root"
	debootstrap --variant=minbase --include="$(IFS=,; echo "${guest_packages[*]}")" \
		"$suite" "$root" "$mirror" >"$tmp/debootstrap.log" 2>&1 ||
		{ tail -n 30 "$tmp/debootstrap.log" >&2; die "debootstrap failed (log: $tmp/debootstrap.log)"; }

	# The initrd only has to find and mount the root disk: the virtio and ext4
	# modules (and their dependencies), not every storage driver ("most").
	printf '%s\n' "${initrd_modules[@]}" >>"$root/etc/initramfs-tools/modules"
	echo MODULES=list >"$root/etc/initramfs-tools/conf.d/sv-rxe-guest.conf"
	chroot "$root" update-initramfs -u -k all >"$tmp/initramfs.log" 2>&1 ||
		{ tail -n 30 "$tmp/initramfs.log" >&2; die "update-initramfs failed"; }

	# The kernel and initrd boot the guest from outside (qemu -kernel/-initrd).
	local kver
	kver=$(find "$root/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V | tail -n 1)
	if [ -z "$kver" ] || [ ! -f "$root/lib/modules/$kver/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko" ]; then
		die "no rdma_rxe module in the guest's kernel (${kver:-none})"
	fi
	cp "$root/boot/vmlinuz-$kver" "$tmp/vmlinuz"
	cp "$root/boot/initrd.img-$kver" "$tmp/initrd.img"

	printf '%s' "$stage1_init" >"$root/sv-init"
	chmod 755 "$root/sv-init"
	echo sv-rxe-guest >"$root/etc/hostname"
	# Nothing below is needed in the guest; it only makes the image smaller.
	rm -rf "${root:?}"/var/cache/apt/archives/*.deb "${root:?}"/var/lib/apt/lists/* \
		"${root:?}"/usr/share/doc "${root:?}"/usr/share/man "${root:?}"/usr/share/info "${root:?}"/boot/*

	# The root file system as an ext4 image, built from the directory: no loop
	# mount. Room to spare: the guest writes to a snapshot overlay anyway.
	local mb
	mb=$(du -sm "$root" | cut -f1)
	mb=$((mb + mb / 4 + 256))
	mkfs.ext4 -q -F -L svroot -d "$root" "$tmp/rootfs.ext4" "${mb}M" >"$tmp/mkfs.log" 2>&1 ||
		die "mkfs.ext4 -d failed"
	rm -rf "$root"

	mv "$tmp/rootfs.ext4" "$tmp/vmlinuz" "$tmp/initrd.img" "$dir/"
	echo "$kver" >"$dir/kernel-version"
	echo "$recipe" >"$dir/stamp"
	rm -rf "$tmp"
	say "built $dir in $((SECONDS - start)) s: kernel $kver, rootfs ${mb} MiB"
}

# ------------------------------------------------------------------ run ----

# Stage 2, the guest's init.sh (in the payload, PID 1, bash): network, rxe0,
# the command, its exit status on the control port, power off. It reports
# every failure on the control port (SV-GUEST-FAIL) rather than hanging; the
# host's timeouts cover whatever still hangs.
guest_init() {
	cat <<'EOF'
#!/bin/bash
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 TERM=dumb
. /run/sv/params.sh
export SV_HOST_IP SV_GUEST_IP SV_HOST_IP6 SV_GUEST_IP6 SV_FILES=/run/sv/files SV_RXE_DEV=rxe0 SV_RXE_NETDEV=eth0
# ttyS1, ttyS2: the command's stdout and stderr; ttyS3: control. Held open
# here, raw (no \n -> \r\n), and drained before power off so no tail is lost.
exec 3<>/dev/ttyS1 4<>/dev/ttyS2 5<>/dev/ttyS3
for fd in 3 4 5; do stty raw -echo <&$fd; done
ctl() { echo "$*" >&5; }
log() { echo "sv-init [$(cut -d' ' -f1 /proc/uptime)]: $*"; }
off() {
	sync
	perl -MPOSIX -e 'POSIX::tcdrain($_) for 3, 4, 5'
	echo o >/proc/sysrq-trigger
	sleep 30
}
fail() {
	log "$*"
	ctl "SV-GUEST-FAIL $*"
	off
}
log "stage 2, kernel $(uname -r)"
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
hostname sv-rxe-guest
ip link set lo up

# eth0 (--nic's driver; named eth0 by net.ifnames=0), the static address.
modprobe "$SV_NIC_MODULE" || fail "modprobe $SV_NIC_MODULE"
for _ in $(seq 100); do [ -e /sys/class/net/eth0 ] && break; sleep 0.1; done
[ -e /sys/class/net/eth0 ] || fail "no eth0"
ip addr add "$SV_GUEST_IP/$SV_PREFIX" dev eth0 || fail "ip addr add $SV_GUEST_IP/$SV_PREFIX"
# and an IPv6 one (nodad: usable at once), which rxe makes GIDs of too
ip -6 addr add "$SV_GUEST_IP6/64" dev eth0 nodad || fail "ip -6 addr add $SV_GUEST_IP6/64"
ip link set eth0 up || fail "ip link set eth0 up"
log "eth0 up, $SV_GUEST_IP/$SV_PREFIX, $SV_GUEST_IP6/64"

# Soft-RoCE on eth0. Ready when the port is ACTIVE and the GID table has the
# guest's IPv4 address as a RoCE v2 GID (::ffff:a.b.c.d); its index is what a
# peer passes as -g / sgid_index.
modprobe rdma_rxe || fail "modprobe rdma_rxe"
rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0 type rxe netdev eth0"
log "rxe0 added on eth0"
port=/sys/class/infiniband/rxe0/ports/1
# roce_v2_gid GID TRIES: the index of GID (written out in full, as sysfs
# shows it) as a RoCE v2 GID of the ACTIVE port, waiting up to TRIES tenths
# of a second for it; nothing if it does not come
roce_v2_gid() {
	local g i
	for _ in $(seq "$2"); do
		if grep -q ACTIVE "$port/state" 2>/dev/null; then
			for g in "$port"/gids/*; do
				i=${g##*/}
				if [ "$(cat "$g" 2>/dev/null)" = "$1" ] &&
					[ "$(cat "$port/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ]; then
					echo "$i"
					return
				fi
			done
		fi
		sleep 0.1
	done
}
gid_index=$(roce_v2_gid "$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${SV_GUEST_IP//./ })" 300)
[ -n "$gid_index" ] || fail "rxe0: port not ACTIVE or no RoCE v2 GID ::ffff:$SV_GUEST_IP ($(cat "$port/state" 2>&1))"
export SV_RXE_GID_INDEX=$gid_index
# and of the IPv6 address
gid6_index=$(roce_v2_gid "$SV_GUEST_GID6" 100)
[ -n "$gid6_index" ] || fail "rxe0: no RoCE v2 GID of $SV_GUEST_IP6"
export SV_RXE_GID6_INDEX=$gid6_index

# The host side answers (and both neighbour tables know each other now).
host_ping=fail
ping -c 1 -W 5 "$SV_HOST_IP" >/dev/null 2>&1 && host_ping=ok
ping -c 1 -W 5 "$SV_HOST_IP6" >/dev/null 2>&1 || host_ping=$host_ping,ipv6-fail
log "rxe0 ready, gid_index $gid_index, gid6_index $gid6_index, ping $SV_HOST_IP: $host_ping"
ctl "SV-GUEST-READY dev=rxe0 netdev=eth0 ip=$SV_GUEST_IP gid_index=$gid_index gid=::ffff:$SV_GUEST_IP ip6=$SV_GUEST_IP6 gid6_index=$gid6_index host_ping=$host_ping"

mkdir -p "$SV_FILES"
cd "$SV_FILES"
bash /run/sv/cmd.sh </dev/null >&3 2>&4 3>&- 4>&- 5>&-
rc=$?
log "command exited with $rc"
ctl "SV-GUEST-EXIT $rc"
off
EOF
}

# What run_cleanup takes back when `run` ends, however it ends (globals: the
# EXIT trap runs after cmd_run has returned).
ns='' tmp='' qpid='' out_pid='' err_pid='' tap_made=''
run_cleanup() {
	set +e
	if [ -n "$qpid" ] && kill -0 "$qpid" 2>/dev/null; then
		kill "$qpid"
		wait "$qpid"
	fi
	release_fifo_readers
	[ -n "$out_pid" ] && kill "$out_pid" 2>/dev/null
	[ -n "$err_pid" ] && kill "$err_pid" 2>/dev/null
	[ -n "$tap_made" ] && ip -n "$ns" link del "$tap_made" 2>/dev/null
	[ -n "$tmp" ] && rm -rf "$tmp"
}

# A FIFO reader still blocked in open() (qemu never opened its end) gets a
# writer and at once EOF: open read-write (which never blocks), close.
release_fifo_readers() {
	local f fd
	for f in "$tmp/out" "$tmp/err"; do
		if [ -p "$f" ]; then
			exec {fd}<>"$f"
			exec {fd}>&-
		fi
	done
}

# nic_module MODEL: the guest kernel's driver for qemu's device MODEL
nic_module() {
	case $1 in
	e1000) echo e1000 ;;
	virtio-net-pci) echo virtio_net ;;
	*) die "--nic $1: not one of e1000, virtio-net-pci" ;;
	esac
}

# ipv6_of A.B.C.D [full]: the IPv6 address that goes with an IPv4 one on the
# guest's link, fd53:5676:B:C::D (a ULA prefix, /64); "full": written out
# as sysfs shows a GID (8 groups of 4 digits).
ipv6_of() {
	local a b c d
	IFS=. read -r a b c d <<<"$1"
	: "$a"
	if [ "${2:-}" = full ]; then
		printf 'fd53:5676:%04x:%04x:0000:0000:0000:%04x\n' "$b" "$c" "$d"
	else
		printf 'fd53:5676:%x:%x::%x\n' "$b" "$c" "$d"
	fi
}

cmd_run() {
	local ready_file='' timeout=600 boot_timeout=240 console='' tap='' mem=1024 smp=1 prefix=24 nic=e1000
	local -a puts=()
	while [ $# -gt 0 ]; do
		case $1 in
		--ready) ready_file=$2; shift 2 ;;
		--put) puts+=("$2"); shift 2 ;;
		--timeout) timeout=$2; shift 2 ;;
		--boot-timeout) boot_timeout=$2; shift 2 ;;
		--console) console=$2; shift 2 ;;
		--tap) tap=$2; shift 2 ;;
		--mem) mem=$2; shift 2 ;;
		--smp) smp=$2; shift 2 ;;
		--prefix) prefix=$2; shift 2 ;;
		--nic) nic=$2; shift 2 ;;
		--) break ;;
		-*) die "run: unknown option $1" ;;
		*) break ;;
		esac
	done
	if [ $# -lt 6 ] || [ "$5" != -- ]; then
		die "usage: $0 run [OPTIONS] DIR NETNS HOST_IP GUEST_IP -- COMMAND [ARG...]"
	fi
	local nic_mod dir=$1 host_ip=$3 guest_ip=$4
	nic_mod=$(nic_module "$nic") # set -e: a model it does not know ends here
	ns=$2
	shift 5
	[ "$(id -u)" -eq 0 ] || die "run needs root (network namespace, tap device)"
	command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found (apt-get install qemu-system-x86)"
	guest_valid "$dir" || die "no valid guest in $dir: run '$0 build $dir' first"
	local ipre='^([0-9]{1,3}\.){3}[0-9]{1,3}$'
	[[ $host_ip =~ $ipre && $guest_ip =~ $ipre ]] || die "HOST_IP and GUEST_IP must be IPv4 addresses"
	dir=$(cd "$dir" && pwd)

	# Everything of this run lives in $tmp; the EXIT trap takes it all back.
	tmp=$(mktemp -d /tmp/sv-rxe-run.XXXXXX)
	trap run_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	[ -n "$console" ] || console=$tmp/console.log
	[ -z "$ready_file" ] || rm -f "$ready_file"

	# The payload disk: a tar archive of init.sh, the parameters, the command
	# (quoted here, word by word) and the --put files.
	local pl=$tmp/payload
	mkdir -p "$pl/files"
	guest_init >"$pl/init.sh"
	{
		printf 'SV_HOST_IP=%q\n' "$host_ip"
		printf 'SV_GUEST_IP=%q\n' "$guest_ip"
		printf 'SV_HOST_IP6=%q\n' "$(ipv6_of "$host_ip")"
		printf 'SV_GUEST_IP6=%q\n' "$(ipv6_of "$guest_ip")"
		printf 'SV_GUEST_GID6=%q\n' "$(ipv6_of "$guest_ip" full)"
		printf 'SV_PREFIX=%q\n' "$prefix"
		printf 'SV_NIC_MODULE=%q\n' "$nic_mod"
	} >"$pl/params.sh"
	printf '%q ' "$@" >"$pl/cmd.sh"
	echo >>"$pl/cmd.sh"
	local p
	for p in ${puts[@]+"${puts[@]}"}; do
		cp -a -- "$p" "$pl/files/" || die "--put $p: cannot copy"
	done
	tar -cf "$tmp/payload.tar" -C "$pl" . || die "cannot make the payload archive"

	# The namespace (kept: it is the caller's) and a tap in it (removed at the
	# end), holding HOST_IP.
	[ -e "/run/netns/$ns" ] || ip netns add "$ns" 2>/dev/null || [ -e "/run/netns/$ns" ] ||
		die "cannot create network namespace $ns"
	ip -n "$ns" link set lo up
	local i
	if [ -n "$tap" ]; then
		ip -n "$ns" tuntap add dev "$tap" mode tap || die "cannot create tap $tap in $ns"
	else
		for i in 0 1 2 3 4 5 6 7 8 9; do
			if ip -n "$ns" tuntap add dev "svrxe$i" mode tap 2>/dev/null; then
				tap=svrxe$i
				break
			fi
		done
		[ -n "$tap" ] || die "no free tap name svrxe0..9 in $ns"
	fi
	tap_made=$tap
	ip -n "$ns" addr add "$host_ip/$prefix" dev "$tap" ||
		die "cannot give $tap $host_ip/$prefix in $ns (address in use?)"
	ip -n "$ns" -6 addr add "$(ipv6_of "$host_ip")/64" dev "$tap" nodad ||
		die "cannot give $tap $(ipv6_of "$host_ip")/64 in $ns"
	ip -n "$ns" link set "$tap" up

	# The guest's MAC: fixed, from its address (52:54:00 is qemu's prefix).
	local o2 o3 o4 mac
	IFS=. read -r _ o2 o3 o4 <<<"$guest_ip"
	mac=$(printf '52:54:00:%02x:%02x:%02x' "$o2" "$o3" "$o4")

	# COMMAND's output comes through FIFOs to this script's stdout and stderr,
	# whatever those are (terminal, pipe, file).
	mkfifo "$tmp/out" "$tmp/err"
	cat "$tmp/out" &
	out_pid=$!
	cat "$tmp/err" >&2 &
	err_pid=$!
	: >"$tmp/ctl"

	local append="console=ttyS0 root=/dev/vda rw fsck.mode=skip init=/sv-init"
	append+=" net.ifnames=0 8250.nr_uarts=4 panic=-1 quiet mitigations=off"
	# shellcheck disable=SC2054 # the commas are qemu's
	local -a qemu=(
		qemu-system-x86_64 -nodefaults -no-user-config -display none -monitor none
		-machine pc -accel tcg -cpu max -smp "$smp" -m "$mem" -no-reboot
		-kernel "$dir/vmlinuz" -initrd "$dir/initrd.img" -append "$append"
		-drive "file=$dir/rootfs.ext4,format=raw,if=none,id=root,snapshot=on"
		-device virtio-blk-pci,drive=root
		-drive "file=$tmp/payload.tar,format=raw,if=none,id=payload,readonly=on"
		-device virtio-blk-pci,drive=payload,serial=svpayload
		-netdev "tap,id=net0,ifname=$tap,script=no,downscript=no"
		-device "$nic,netdev=net0,mac=$mac"
		-chardev "file,id=s0,path=$console" -serial chardev:s0
		-chardev "file,id=s1,path=$tmp/out" -serial chardev:s1
		-chardev "file,id=s2,path=$tmp/err" -serial chardev:s2
		-chardev "file,id=s3,path=$tmp/ctl" -serial chardev:s3
	)
	say "booting the guest ($dir) on $tap in netns $ns: host $host_ip, guest $guest_ip"
	local start=$SECONDS
	# qemu runs in NETNS (its tap is there), under timeout (a hung guest is
	# killed: TERM, then KILL 10 s later), its snapshot overlay in $tmp.
	TMPDIR=$tmp ip netns exec "$ns" timeout -k 10 "$timeout" "${qemu[@]}" \
		</dev/null >"$tmp/qemu.log" 2>&1 &
	qpid=$!

	# Watch the control port: ready, failed, or no sign in boot_timeout.
	local ready='' why='' line
	while kill -0 "$qpid" 2>/dev/null; do
		if [ -z "$ready" ]; then
			if line=$(grep -m 1 '^SV-GUEST-READY' "$tmp/ctl"); then
				ready=1
				say "$line (boot to ready: $((SECONDS - start)) s)"
				if [ -n "$ready_file" ]; then
					printf '%s\n' "$line" >"$ready_file.tmp"
					mv "$ready_file.tmp" "$ready_file"
				fi
			elif [ $((SECONDS - start)) -ge "$boot_timeout" ]; then
				why="not ready after $boot_timeout s"
				kill "$qpid"
				break
			fi
		fi
		sleep 0.2
	done
	local qrc=0
	wait "$qpid" || qrc=$?
	qpid=''
	# The FIFOs' readers end with qemu (their writer); let them finish the copy.
	release_fifo_readers
	wait "$out_pid" "$err_pid" 2>/dev/null || true
	out_pid='' err_pid=''

	line=$(grep -m 1 '^SV-GUEST-EXIT ' "$tmp/ctl" || true)
	if [ -n "$line" ] && [ -z "$why" ]; then
		local rc=${line#SV-GUEST-EXIT }
		rc=${rc%%[!0-9]*}
		say "guest command exited with $rc ($((SECONDS - start)) s from boot)"
		return "${rc:-125}"
	fi
	local status=125
	if [ -z "$why" ] && { [ "$qrc" -eq 124 ] || [ "$qrc" -eq 137 ]; }; then
		why="timed out after $timeout s"
	fi
	case $why in *"after"*) status=124 ;; esac
	[ -n "$why" ] || why=$(grep -m 1 '^SV-GUEST-FAIL' "$tmp/ctl" || echo "guest ended without an exit status (qemu: $qrc)")
	say "FAILED: $why; qemu's output and the console's last lines:"
	sed 's/^/  qemu: /' "$tmp/qemu.log" >&2
	tail -n 40 "$console" | tr -d '\r' | sed 's/^/  console: /' >&2
	return "$status"
}

cmd_wait_ready() {
	[ $# -ge 2 ] || die "usage: $0 wait-ready FILE SEC [PID]"
	local file=$1 sec=$2 pid=${3:-} end=$((SECONDS + $2))
	while [ "$SECONDS" -lt "$end" ]; do
		if [ -s "$file" ]; then
			cat "$file"
			return 0
		fi
		# Ended, or a zombie its parent (our caller) has not reaped yet.
		if [ -n "$pid" ] && { ! kill -0 "$pid" 2>/dev/null ||
			[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ]; }; then
			die "wait-ready: the guest run (pid $pid) ended before it was ready"
		fi
		sleep 0.2
	done
	die "wait-ready: $file did not appear in $sec s"
}

# ---------------------------------------------------------------- usage ----

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
}

main() {
	[ $# -ge 1 ] || usage
	local sub=$1
	shift
	case $sub in
	build) cmd_build "$@" ;;
	run) cmd_run "$@" ;;
	wait-ready) cmd_wait_ready "$@" ;;
	-h | --help | help) usage ;;
	*) die "unknown subcommand $sub (build, run, wait-ready)" ;;
	esac
}

main "$@"
