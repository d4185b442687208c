#!/bin/bash
# fsview.sh: the file-system view of the devices (src/verbs/sysfs.c, shown by
# libsoftverbs-fsview.so, which `softverbs run` preloads).  Middleware finds
# RDMA devices in /sys/class/infiniband and /dev/infiniband, not only through
# libibverbs, so under `softverbs run`:
#   - every device ibv_devices lists has /sys/class/infiniband/DEV with
#     node_type, node_guid, ports/1/{state,phys_state,link_layer,active_mtu},
#     ports/1/gids/N, gid_attrs/{types,ndevs}/N for each N of the GID table,
#     and the values agree with ibv_devices and ibv_devinfo -v -d DEV (node
#     and system image GUID, port state, physical state, link layer, active
#     MTU, GID type); ndevs/N is the interface the device is named after; an
#     empty entry (the table is longer than what fills it) has a zero GID,
#     and its types/N and ndevs/N fail to read with EINVAL, as the kernel's;
#     nothing else is listed there; DEV/device/net/ lists that interface
#     (its files the host's: ifindex), as frameworks look for a device's
#     netdev (rdma-core's tests skip rdma_cm tests without it)
#   - every /sys/class/infiniband_verbs/uverbsN names one of those devices in
#     ibdev, each device has one, and /dev/infiniband/uverbsN is a character
#     device; /dev/infiniband/rdma_cm exists
#   - stat, cat, ls -l, realpath and find work on these paths, and so do the
#     shell's own tests and redirections (bash itself runs preloaded)
#   - Python (os.scandir, open, os.stat, and openat/fstatat relative to a
#     descriptor of "/", as hwloc reads "sys/class/infiniband" from there)
#   - ibv_get_sysfs_path() is $SYSFS_PATH (trailing slashes removed) when set
#     and /sys otherwise, and the devices' ibdev_path and dev_path are built on
#     it (through ctypes; skipped without python3/ctypes)
# Outside `softverbs run` nothing of it shows: no sv_* entry in
# /sys/class/infiniband (which stays absent if the host had none), before and
# after.  The transport plays no part here: one run, default transport.
. "$(dirname "$0")/lib.sh"

PY=$(command -v python3 || true)

# ---------------------------------------------------------------------------
# inner: runs under `softverbs run`; prints "ok: ..." lines, exits 1 on the
# first failure.
# ---------------------------------------------------------------------------
inner() {
	local fails=0 sect=0
	bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
	# ok SUMMARY: printed when the section that ends here had no failure
	ok() {
		[ "$fails" = "$sect" ] && echo "ok: $*"
		sect=$fails
	}
	# read NAME FILE: the file's content (one line) into NAME, via the shell's
	# own open() (preloaded); a missing file is a failure.
	rd() {
		local __v
		if [ ! -f "$2" ]; then
			bad "$2: missing (or not a regular file)"
			printf -v "$1" '%s' ""
			return 1
		fi
		IFS= read -r __v <"$2" || true
		printf -v "$1" '%s' "$__v"
	}

	local devs_out
	devs_out=$(ibv_devices) || { echo "FAIL: ibv_devices exited $?"; exit 1; }
	# "    sv_lo           	535600017f000001"
	local -A guid_of=()
	local dev g
	while read -r dev g; do
		[[ $dev == device || $dev == ------ || -z $dev ]] && continue
		guid_of[$dev]=$g
	done <<<"$devs_out"
	[ "${#guid_of[@]}" -gt 0 ] || { echo "FAIL: ibv_devices listed no device"; exit 1; }
	ok "ibv_devices: ${!guid_of[*]}"

	# /sys/class/infiniband lists exactly those devices
	local listed want
	listed=$(ls /sys/class/infiniband | sort | tr '\n' ' ')
	want=$(printf '%s\n' "${!guid_of[@]}" | sort | tr '\n' ' ')
	[ "$listed" = "$want" ] || bad "ls /sys/class/infiniband: '$listed', ibv_devices: '$want'"
	ls -l /sys/class/infiniband/ >/dev/null || bad "ls -l /sys/class/infiniband/ failed"

	local base v info
	for dev in "${!guid_of[@]}"; do
		base=/sys/class/infiniband/$dev
		[ -d "$base" ] || { bad "$base: not a directory"; continue; }
		info=$(ibv_devinfo -v -d "$dev") || { bad "ibv_devinfo -v -d $dev exited $?"; continue; }
		# devinfo's "\tname:\t\t\tvalue" (first match)
		dv() { sed -n "s/^[[:space:]]*$1:[[:space:]]*//p" <<<"$info" | head -n1; }

		rd v "$base/node_type" && [ "$v" = "1: CA" ] || bad "$base/node_type: '$v', expected '1: CA'"
		rd v "$base/node_guid"
		[ "$v" = "$(dv node_guid)" ] || bad "$base/node_guid '$v', ibv_devinfo '$(dv node_guid)'"
		[ "${v//:/}" = "${guid_of[$dev]}" ] ||
			bad "$base/node_guid '$v', ibv_devices '${guid_of[$dev]}'"
		rd v "$base/sys_image_guid"
		[ "$v" = "$(dv sys_image_guid)" ] ||
			bad "$base/sys_image_guid '$v', ibv_devinfo '$(dv sys_image_guid)'"

		# state: sysfs "4: ACTIVE", devinfo "PORT_ACTIVE (4)"
		rd v "$base/ports/1/state"
		local ds; ds=$(dv state)
		[[ $ds =~ ^PORT_([A-Z_]+)\ \(([0-9]+)\)$ ]] &&
			[ "$v" = "${BASH_REMATCH[2]}: ${BASH_REMATCH[1]}" ] ||
			bad "$base/ports/1/state '$v', ibv_devinfo '$ds'"
		# phys_state: sysfs "5: LinkUp", devinfo "LINK_UP (5)"
		rd v "$base/ports/1/phys_state"
		ds=$(dv phys_state)
		[[ $ds =~ \(([0-9]+)\)$ ]] && [ "${v%%:*}" = "${BASH_REMATCH[1]}" ] ||
			bad "$base/ports/1/phys_state '$v', ibv_devinfo '$ds'"
		rd v "$base/ports/1/link_layer"
		[ "$v" = "$(dv link_layer)" ] ||
			bad "$base/ports/1/link_layer '$v', ibv_devinfo '$(dv link_layer)'"
		# active_mtu: sysfs "4096", devinfo "4096 (5)"
		rd v "$base/ports/1/active_mtu"
		[ "$v" = "$(dv active_mtu | cut -d' ' -f1)" ] ||
			bad "$base/ports/1/active_mtu '$v', ibv_devinfo '$(dv active_mtu)'"
		# the GID table, gid_tbl_len entries of which 6 are filled
		# (link-local, IPv4-mapped and the interface's IPv6 address, RoCE
		# v1 and v2 each): each type as devinfo names it ("GID[  1]: <gid>,
		# RoCE v2"; the kernel's sysfs says "IB/RoCE v1" for "RoCE v1"),
		# each netdev the interface.  The rest are empty, as on a kernel's
		# RoCE port: the GID reads as zeros, the type and netdev files are
		# there and a read of them fails with EINVAL (4 and 5 too on an
		# interface without IPv6); at least one is, and none past the table
		local tbl empty=0 err
		tbl=$(dv gid_tbl_len)
		[[ $tbl =~ ^[0-9]+$ ]] && [ "$tbl" -gt 6 ] ||
			bad "ibv_devinfo gid_tbl_len '$tbl': expected more entries than the 6 filled"
		for ((g = 0; g < ${tbl:-0}; g++)); do
			rd v "$base/ports/1/gids/$g"
			if [ "$g" -ge 4 ] && [ "$v" = "0000:0000:0000:0000:0000:0000:0000:0000" ]; then
				empty=$((empty + 1))
				for f in types ndevs; do
					[ -f "$base/ports/1/gid_attrs/$f/$g" ] ||
						bad "$base/ports/1/gid_attrs/$f/$g missing for an empty entry"
					err=$(cat "$base/ports/1/gid_attrs/$f/$g" 2>&1) &&
						bad "cat $base/ports/1/gid_attrs/$f/$g of an empty entry: '$err', expected a failure"
					[[ $err == *"Invalid argument"* ]] ||
						bad "cat $base/ports/1/gid_attrs/$f/$g of an empty entry: '$err', expected EINVAL"
				done
				continue
			fi
			[ "$g" -lt 6 ] || bad "$base/ports/1/gids/$g: '$v', expected an empty entry"
			rd v "$base/ports/1/gid_attrs/types/$g"
			ds=$(sed -n "s/^[[:space:]]*GID\\[ *$g\\]:.*, //p" <<<"$info" | head -n1)
			[ -n "$v" ] && { [ "$v" = "$ds" ] || [ "$v" = "IB/$ds" ]; } ||
				bad "$base/ports/1/gid_attrs/types/$g '$v', ibv_devinfo GID[$g] type '$ds'"
			rd v "$base/ports/1/gid_attrs/ndevs/$g"
			[ "$v" = "${dev#sv_}" ] || bad "$base/ports/1/gid_attrs/ndevs/$g '$v', expected '${dev#sv_}'"
		done
		[ "$empty" -gt 0 ] || bad "$base/ports/1/gids: no empty entry in $tbl"
		[ ! -e "$base/ports/1/gids/$tbl" ] || bad "$base/ports/1/gids/$tbl exists: the table has $tbl entries"
		rd v "$base/ports/1/gids/0"
		[[ $v =~ ^([0-9a-f]{4}:){7}[0-9a-f]{4}$ ]] && [ "$v" != "0000:0000:0000:0000:0000:0000:0000:0000" ] ||
			bad "$base/ports/1/gids/0: '$v', expected a non-zero GID in sysfs form"
		# ndevs/0: the interface the device stands for (sv_IFNAME)
		rd v "$base/ports/1/gid_attrs/ndevs/0"
		[ "$v" = "${dev#sv_}" ] || bad "$base/ports/1/gid_attrs/ndevs/0 '$v', expected '${dev#sv_}'"

		# the network interface, where frameworks find it (rdma-core's
		# tests: "ls <ibdev>/device/net/", else "device doesn't have net
		# interface"): the interface the device is named after, alone,
		# with the host's own files (ifindex)
		local ifn=${dev#sv_}
		v=$(ls "$base/device/net/" 2>&1 | tr '\n' ' ')
		[ "$v" = "$ifn " ] || bad "ls $base/device/net/: '$v', expected '$ifn'"
		rd v "$base/device/net/$ifn/ifindex"
		[ -n "$v" ] && [ "$v" = "$(cat "/sys/class/net/$ifn/ifindex" 2>&1)" ] ||
			bad "$base/device/net/$ifn/ifindex '$v', /sys/class/net/$ifn/ifindex '$(cat "/sys/class/net/$ifn/ifindex" 2>&1)'"

		# the usual tools on these paths
		[ "$(stat -c %F "$base/node_guid")" = "regular file" ] ||
			bad "stat $base/node_guid: '$(stat -c %F "$base/node_guid" 2>&1)'"
		[ "$(stat -L -c %F "$base")" = directory ] || bad "stat -L $base: not a directory"
		[ "$(cat "$base/ports/1/link_layer")" = "$(dv link_layer)" ] || bad "cat $base/ports/1/link_layer"
		ls -l "$base/" "$base/ports/1/" >/dev/null || bad "ls -l $base/ failed"
		local rp
		rp=$(realpath "$base/ports/1/state") || bad "realpath $base/ports/1/state failed"
		# the path as the program would see it in /sys, not the view's place
		# on disk; and it leads to the same content
		[[ $rp == /sys/* ]] || bad "realpath $base/ports/1/state: '$rp', not a /sys path"
		[ "$(cat "$rp" 2>&1)" = "$(cat "$base/ports/1/state")" ] ||
			bad "cat of realpath '$rp' differs from $base/ports/1/state"
		[ "$(find "$base/" -name node_guid)" = "$base/node_guid" ] ||
			bad "find $base/ -name node_guid: '$(find "$base/" -name node_guid 2>&1)'"
		[ "$(find "$base/ports/1/gid_attrs/" -type f | wc -l)" -ge 2 ] ||
			bad "find $base/ports/1/gid_attrs/ -type f: fewer than 2 files"
	done
	# find from the class folder down through the device entries (links in
	# sysfs, hence -L)
	[ "$(find -L /sys/class/infiniband -mindepth 2 -maxdepth 2 -name node_type | wc -l)" = "${#guid_of[@]}" ] ||
		bad "find -L /sys/class/infiniband -name node_type: not one per device"
	ok "/sys/class/infiniband: ${#guid_of[@]} devices agree with ibv_devices and ibv_devinfo -v"

	# uverbs: sysfs entries and device nodes
	local -A uv_of=()
	local u n
	[ -d /sys/class/infiniband_verbs ] || bad "/sys/class/infiniband_verbs missing"
	for u in /sys/class/infiniband_verbs/uverbs*; do
		[ -e "$u" ] || continue
		n=${u##*/}
		rd v "$u/ibdev"
		[ -n "$v" ] && [ -n "${guid_of[$v]:-}" ] ||
			{ bad "$u/ibdev '$v' is not a listed device"; continue; }
		[ -z "${uv_of[$v]:-}" ] || bad "$v has two uverbs: ${uv_of[$v]} and $n"
		uv_of[$v]=$n
		[ -c "/dev/infiniband/$n" ] || bad "/dev/infiniband/$n: not a character device"
		[ -r "/dev/infiniband/$n" ] && [ -w "/dev/infiniband/$n" ] ||
			bad "/dev/infiniband/$n: not readable and writable (udev makes them 0666)"
		[ "$(stat -L -c %F "/dev/infiniband/$n")" = "character special file" ] ||
			bad "stat -L /dev/infiniband/$n"
	done
	for dev in "${!guid_of[@]}"; do
		[ -n "${uv_of[$dev]:-}" ] || bad "no /sys/class/infiniband_verbs/uverbsN for $dev"
	done
	[ -e /dev/infiniband/rdma_cm ] || bad "/dev/infiniband/rdma_cm missing"
	ls -l /dev/infiniband/ >/dev/null || bad "ls -l /dev/infiniband/ failed"
	ok "uverbs: ${uv_of[*]}"

	# Python: its own calls (opendir, open, stat, openat/fstatat with a dirfd)
	if [ -n "$PY" ]; then
		local -a pyargs=()
		for dev in "${!guid_of[@]}"; do
			pyargs+=("$dev=${guid_of[$dev]}=${uv_of[$dev]:-}")
		done
		"$PY" - "${pyargs[@]}" <<'EOF' || bad "python checks"
import errno, os, stat, sys
want = {}
for a in sys.argv[1:]:
    dev, guid, uv = a.split("=")
    want[dev] = (guid, uv)
errs = []
names = sorted(e.name for e in os.scandir("/sys/class/infiniband"))
if names != sorted(want):
    errs.append(f"os.scandir /sys/class/infiniband: {names}, expected {sorted(want)}")
root = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
for dev, (guid, uv) in want.items():
    base = f"/sys/class/infiniband/{dev}"
    with open(f"{base}/node_guid") as f:
        g = f.read().strip()
    if g.replace(":", "") != guid:
        errs.append(f"open {base}/node_guid: {g!r}, ibv_devices {guid}")
    if not stat.S_ISREG(os.stat(f"{base}/ports/1/state").st_mode):
        errs.append(f"os.stat {base}/ports/1/state: not a regular file")
    # relative to a descriptor of "/" (fstatat, openat), as hwloc does
    rel = f"sys/class/infiniband/{dev}/node_guid"
    if not stat.S_ISREG(os.stat(rel, dir_fd=root).st_mode):
        errs.append(f"fstatat(/, {rel}): not a regular file")
    fd = os.open(rel, os.O_RDONLY, dir_fd=root)
    g2 = os.read(fd, 100).decode().strip()
    os.close(fd)
    if g2 != g:
        errs.append(f"openat(/, {rel}): {g2!r}, expected {g!r}")
    if uv and not stat.S_ISCHR(os.stat(f"/dev/infiniband/{uv}").st_mode):
        errs.append(f"os.stat /dev/infiniband/{uv}: not a character device")
    if not os.path.realpath(f"{base}/ports/1/state").startswith("/sys/"):
        errs.append(f"os.path.realpath {base}/ports/1/state: not a /sys path")
    # the interface, as rdma-core's tests/base.py looks for it
    net = f"{base}/device/net/"
    if not os.path.exists(net) or os.listdir(net) != [dev[3:]]:
        errs.append(f"os.listdir {net}: {os.listdir(net) if os.path.exists(net) else 'missing'}, expected {[dev[3:]]}")
    # the table's last entry is empty: its type opens, and reading fails
    # with EINVAL
    n = len(os.listdir(f"{base}/ports/1/gids")) - 1
    try:
        with open(f"{base}/ports/1/gid_attrs/types/{n}") as f:
            t = f.read()
        errs.append(f"read {base}/ports/1/gid_attrs/types/{n}: {t!r}, expected EINVAL")
    except OSError as e:
        if e.errno != errno.EINVAL:
            errs.append(f"read {base}/ports/1/gid_attrs/types/{n}: {e}, expected EINVAL")
os.close(root)
for e in errs:
    print("python:", e)
sys.exit(1 if errs else 0)
EOF
		ok "python: os.scandir, open, os.stat, openat/fstatat relative to /"
	else
		echo "-- python3 not installed: its checks skipped"
	fi

	# ibv_get_sysfs_path() and the devices' paths, through ctypes
	if [ -n "$PY" ] && "$PY" -c 'import ctypes' 2>/dev/null; then
		local cpy='
import ctypes, sys
lib = ctypes.CDLL("libibverbs.so.1")
if not hasattr(lib, "softverbs_fs_view"):
    print("not softverbs libibverbs"); sys.exit(1)
lib.ibv_get_sysfs_path.restype = ctypes.c_char_p
class Dev(ctypes.Structure):   # struct ibv_device of <infiniband/verbs.h>
    _fields_ = [("ops", ctypes.c_void_p * 2), ("node_type", ctypes.c_int),
                ("transport_type", ctypes.c_int), ("name", ctypes.c_char * 64),
                ("dev_name", ctypes.c_char * 64), ("dev_path", ctypes.c_char * 256),
                ("ibdev_path", ctypes.c_char * 256)]
lib.ibv_get_device_list.restype = ctypes.POINTER(ctypes.POINTER(Dev))
lst = lib.ibv_get_device_list(None)
print(lib.ibv_get_sysfs_path().decode())
i = 0
while lst[i]:
    d = lst[i].contents
    print(d.name.decode(), d.dev_name.decode(), d.dev_path.decode(), d.ibdev_path.decode())
    i += 1
'
		local out sp name dname dpath ipath
		for sp in "" "/tmp/sv-sysfs-test//"; do
			out=$(env ${sp:+SYSFS_PATH=$sp} "$PY" -c "$cpy") || { bad "ctypes check (SYSFS_PATH='$sp'): $out"; continue; }
			local expect=/sys
			[ -n "$sp" ] && expect=/tmp/sv-sysfs-test
			[ "$(head -n1 <<<"$out")" = "$expect" ] ||
				bad "ibv_get_sysfs_path() with SYSFS_PATH='$sp': '$(head -n1 <<<"$out")', expected '$expect'"
			while read -r name dname dpath ipath; do
				[ "$ipath" = "$expect/class/infiniband/$name" ] ||
					bad "$name: ibdev_path '$ipath' with SYSFS_PATH='$sp'"
				[ "$dpath" = "$expect/class/infiniband_verbs/$dname" ] ||
					bad "$name: dev_path '$dpath' with SYSFS_PATH='$sp'"
			done < <(tail -n +2 <<<"$out")
		done
		ok "ibv_get_sysfs_path and ibdev_path/dev_path follow SYSFS_PATH"
	else
		echo "-- python3 ctypes not available: SYSFS_PATH check skipped"
	fi

	[ "$fails" = 0 ] || exit 1
	echo "inner: all checks passed"
	exit 0
}

if [ "${1:-}" = inner ]; then
	inner
fi

# ---------------------------------------------------------------------------
# outer: a plain shell, no preload
# ---------------------------------------------------------------------------
sv_require ibv_devices ibv_devinfo stat realpath find

# What the host itself shows, and that none of it is ours.
host_state() {
	if [ -e /sys/class/infiniband ]; then
		echo "present: $(ls /sys/class/infiniband | tr '\n' ' ')"
	else
		echo absent
	fi
}
check_host() {
	[ -z "${LD_PRELOAD:-}" ] || [[ $LD_PRELOAD != *softverbs-fsview* ]] ||
		sv_fail "the outer shell has the preload library ($LD_PRELOAD)"
	if [ -e /sys/class/infiniband ] && ls /sys/class/infiniband | grep -q '^sv_'; then
		sv_fail "outside softverbs run, /sys/class/infiniband shows sv_* devices"
	fi
	[ "$(host_state)" = "$host0" ] ||
		sv_fail "/sys/class/infiniband changed on the host: '$host0' -> '$(host_state)'"
}
host0=$(host_state)
sv_log "host /sys/class/infiniband: $host0"
check_host

rc=0
sv_run inner "$(($(sv_left) - 5))" "" bash "$0" inner || rc=$?
cat "$SV_WORK/inner.out"
[ "$rc" = 124 ] && sv_fail "the checks under softverbs run timed out"
[ "$rc" = 0 ] || sv_fail "checks under softverbs run failed (exit $rc)"
grep -q '^inner: all checks passed$' "$SV_WORK/inner.out" || sv_fail "inner checks did not finish"

# and still nothing on the host afterwards
check_host
echo "PASS: fsview"
