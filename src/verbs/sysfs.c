/*
 * The devices as the file system shows them.  Middleware does not only ask
 * libibverbs which devices exist: UCX stats /dev/infiniband/uverbsN, Open
 * MPI's openib BTL and hwloc read /sys/class/infiniband, NCCL and UCX read
 * ports/N/gid_attrs, rdma-core's own tools read node_type and node_guid.  A
 * softverbs device has no kernel object, so this file writes a directory
 * tree that mirrors those parts of /sys and /dev for the devices this
 * process sees:
 *
 *   ROOT/sys/class/infiniband/sv_X              -> ../../devices/virtual/infiniband/sv_X
 *   ROOT/sys/devices/virtual/infiniband/sv_X/... node_type, node_guid, ports/1/...,
 *                                               device/net/IFNAME -> /sys/class/net/IFNAME
 *   ROOT/sys/class/infiniband_verbs/uverbsN/... ibdev, abi_version, dev
 *   ROOT/dev/infiniband/uverbsN, rdma_cm        symlinks to /dev/null
 *
 * Every value comes from the functions that answer ibv_query_device,
 * ibv_query_port and ibv_query_gid_ex (query.c), so the two cannot disagree.
 * The preload library (src/preload/fsview.c, put in place by `softverbs run`)
 * redirects the program's /sys/class/infiniband*, /dev/infiniband paths into
 * ROOT; no root privilege and no change to the host are needed.
 *
 * ROOT is $XDG_RUNTIME_DIR/softverbs/view-HASH, or /tmp/softverbs-UID/view-HASH,
 * where HASH is taken over the whole content: processes (and network
 * namespaces) that see the same devices share one tree, a process that sees
 * other devices gets another, and a tree is never changed once written.  It
 * is written under a temporary name and renamed into place, so a reader
 * never sees half of one.
 */
#include "common/lock_order.h"
#include "verbs/verbs.h"
#include "stats/reader.h"
#include "stats/rundir.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SV_UVERBS_MAJOR 231
#define SV_UVERBS_MINOR_BASE 192

static char sysfs_path[256] = "/sys";

static void init_sysfs_path(void)
{
	const char *env = getuid() == geteuid() ? getenv("SYSFS_PATH") : NULL;
	size_t len;

	if (!env || !*env || strlen(env) >= sizeof(sysfs_path))
		return;
	len = strlen(env);
	while (len > 1 && env[len - 1] == '/')
		len--;
	memcpy(sysfs_path, env, len);
	sysfs_path[len] = '\0';
}

/*
 * The sysfs mount point, as rdma-core answers it: $SYSFS_PATH (trailing
 * slashes removed) when set and the process is not set-uid, else "/sys";
 * read once.  Device paths (ibdev_path, dev_path) are built on it.  Under
 * `softverbs run`, /sys/class/infiniband* shows softverbs' devices (below).
 */
const char *ibv_get_sysfs_path(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, init_sysfs_path);
	return sysfs_path;
}

enum entry_kind { ENTRY_DIR, ENTRY_FILE, ENTRY_LINK };

struct entry {
	enum entry_kind kind;
	char *path; /* relative to ROOT */
	char *data; /* file content or link target */
};

struct view {
	struct entry *e;
	size_t n, cap;
	bool oom;
};

static char *vfmt(const char *fmt, va_list ap)
{
	char *s;

	return vasprintf(&s, fmt, ap) < 0 ? NULL : s;
}

static void add(struct view *v, enum entry_kind kind, char *path, char *data)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 128;
		struct entry *e = realloc(v->e, cap * sizeof(*e));

		if (!e)
			v->oom = true;
		else
			v->e = e, v->cap = cap;
	}
	if (!path || (kind != ENTRY_DIR && !data) || v->n == v->cap) {
		v->oom = true;
		free(path);
		free(data);
		return;
	}
	v->e[v->n++] = (struct entry){ kind, path, data };
}

static void add_dir(struct view *v, const char *path)
{
	add(v, ENTRY_DIR, strdup(path), NULL);
}

/* A sysfs attribute: "DIR/NAME" holding the formatted value and a newline. */
__attribute__((format(printf, 4, 5))) static void add_attr(struct view *v, const char *dir,
							  const char *name, const char *fmt, ...)
{
	va_list ap;
	char *path = NULL, *val;

	if (asprintf(&path, "%s/%s", dir, name) < 0)
		path = NULL;
	va_start(ap, fmt);
	val = vfmt(fmt, ap);
	va_end(ap);
	if (val) {
		char *line = NULL;

		if (asprintf(&line, "%s\n", val) < 0)
			line = NULL;
		free(val);
		val = line;
	}
	add(v, ENTRY_FILE, path, val);
}

static void add_link(struct view *v, const char *path, const char *target)
{
	add(v, ENTRY_LINK, strdup(path), strdup(target));
}

static void view_free(struct view *v)
{
	for (size_t i = 0; i < v->n; i++) {
		free(v->e[i].path);
		free(v->e[i].data);
	}
	free(v->e);
}

static const char *port_state_str(enum ibv_port_state s)
{
	static const char *names[] = { "NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER" };

	return (unsigned)s < SV_ARRAY_SIZE(names) ? names[s] : "UNKNOWN";
}

/* ports/N/rate as the kernel writes it, e.g. "100 Gb/sec (4X EDR)" */
static void add_rate(struct view *v, const char *dir, const struct ibv_port_attr *pa)
{
	static const struct { uint8_t code; unsigned tenths; const char *name; } speeds[] = {
		{ 1, 25, "SDR" }, { 2, 50, "DDR" }, { 4, 100, "QDR" }, { 8, 100, "FDR10" },
		{ 16, 140, "FDR" }, { 32, 250, "EDR" }, { 64, 500, "HDR" }, { 128, 1000, "NDR" },
	};
	static const struct { uint8_t code; unsigned lanes; } widths[] = {
		{ 1, 1 }, { 2, 4 }, { 4, 8 }, { 8, 12 }, { 16, 2 },
	};
	unsigned tenths = 25, lanes = 1, total;
	const char *name = "SDR";

	for (size_t i = 0; i < SV_ARRAY_SIZE(speeds); i++)
		if (speeds[i].code == pa->active_speed)
			tenths = speeds[i].tenths, name = speeds[i].name;
	for (size_t i = 0; i < SV_ARRAY_SIZE(widths); i++)
		if (widths[i].code == pa->active_width)
			lanes = widths[i].lanes;
	total = tenths * lanes;
	if (total % 10)
		add_attr(v, dir, "rate", "%u.%u Gb/sec (%uX %s)", total / 10, total % 10, lanes, name);
	else
		add_attr(v, dir, "rate", "%u Gb/sec (%uX %s)", total / 10, lanes, name);
}

static void gid_text(const union ibv_gid *gid, char out[40])
{
	const uint8_t *g = gid->raw;

	/* 8 groups of 4 hex digits, 7 colons, the NUL: exactly 40 bytes */
	snprintf(out, 40, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x",
		 g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12],
		 g[13], g[14], g[15]);
}

/* where a port's GID table and its attributes live */
static const char *const gid_dirs[] = { "gids", "gid_attrs", "gid_attrs/types", "gid_attrs/ndevs" };

static void add_port(struct view *v, const struct sv_device *d, const char *devdir)
{
	struct ibv_port_attr pa;
	struct ibv_gid_entry ge;
	char dir[256], sub[300];

	sv_port_attr(d, &pa);
	snprintf(dir, sizeof(dir), "%s/ports", devdir);
	add_dir(v, dir);
	snprintf(dir, sizeof(dir), "%s/ports/1", devdir);
	add_dir(v, dir);
	add_attr(v, dir, "state", "%d: %s", (int)pa.state, port_state_str(pa.state));
	add_attr(v, dir, "phys_state", "%u: %s", pa.phys_state,
		 pa.phys_state == 5 ? "LinkUp" : "Disabled");
	add_attr(v, dir, "link_layer", "%s",
		 pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand");
	add_attr(v, dir, "active_mtu", "%u", sv_mtu_bytes(pa.active_mtu));
	add_attr(v, dir, "lid", "0x%x", pa.lid);
	add_attr(v, dir, "lid_mask_count", "%u", pa.lmc);
	add_attr(v, dir, "sm_lid", "0x%x", pa.sm_lid);
	add_attr(v, dir, "sm_sl", "%u", pa.sm_sl);
	add_attr(v, dir, "cap_mask", "0x%08x", pa.port_cap_flags);
	add_rate(v, dir, &pa);
	snprintf(sub, sizeof(sub), "%s/pkeys", dir);
	add_dir(v, sub);
	add_attr(v, sub, "0", "0xffff");
	for (size_t i = 0; i < SV_ARRAY_SIZE(gid_dirs); i++) {
		snprintf(sub, sizeof(sub), "%s/%s", dir, gid_dirs[i]);
		add_dir(v, sub);
	}
	/*
	 * Counters change, and this tree never does (it is shared and named
	 * after its content): the files are here, empty, so that listing and
	 * stat find them, and the preload library answers each open of one
	 * with the device's current value (src/preload/fsview.c).
	 */
	snprintf(sub, sizeof(sub), "%s/counters", dir);
	add_dir(v, sub);
	snprintf(sub, sizeof(sub), "%s/hw_counters", dir);
	add_dir(v, sub);
	for (size_t i = 0; i < sv_stat_sysfs_count(); i++) {
		const char *group, *name;
		char path[400];

		sv_stat_sysfs_file(i, &group, &name);
		snprintf(path, sizeof(path), "%s/%s/%s", dir, group, name);
		add(v, ENTRY_FILE, strdup(path), strdup(""));
	}
	/*
	 * Every index of the table has its three files, as in the kernel's
	 * sysfs.  An empty entry's GID reads as zeros; reading its type or
	 * netdev fails there with EINVAL, which rdma-core's sysfs reader and
	 * others take for "no entry".  A file cannot hold a read error, so the
	 * view holds those two empty (a filled entry's never are) and the
	 * preload library answers an open of an empty one with a descriptor
	 * whose reads fail with EINVAL (src/preload/fsview.c).
	 */
	for (uint32_t i = 0; i < SV_GID_TBL_LEN; i++) {
		char gid[40], name[16], types[320], ndevs[320];
		bool empty = sv_gid_entry(d, NULL, i, &ge) != 0;

		if (empty)
			memset(&ge, 0, sizeof(ge));
		gid_text(&ge.gid, gid);
		snprintf(name, sizeof(name), "%u", i);
		snprintf(sub, sizeof(sub), "%s/gids", dir);
		add_attr(v, sub, name, "%s", gid);
		snprintf(types, sizeof(types), "%s/gid_attrs/types/%s", dir, name);
		snprintf(ndevs, sizeof(ndevs), "%s/gid_attrs/ndevs/%s", dir, name);
		if (empty) {
			add(v, ENTRY_FILE, strdup(types), strdup(""));
			add(v, ENTRY_FILE, strdup(ndevs), strdup(""));
			continue;
		}
		snprintf(sub, sizeof(sub), "%s/gid_attrs/types", dir);
		add_attr(v, sub, name, "%s",
			 ge.gid_type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" : "IB/RoCE v1");
		snprintf(sub, sizeof(sub), "%s/gid_attrs/ndevs", dir);
		add_attr(v, sub, name, "%s", d->ifname);
	}
}

/* every CPU as a kernel cpumask ("%*pb": 32-bit hex words, most significant first) */
static void cpu_mask(long ncpu, char *out, size_t len)
{
	size_t at = 0;

	for (long w = (ncpu + 31) / 32 - 1; w >= 0 && at + 10 < len; w--) {
		long bits = ncpu - w * 32 > 32 ? 32 : ncpu - w * 32;
		uint32_t word = bits == 32 ? 0xffffffffu : (1u << bits) - 1;

		if (at == 0)
			at += (size_t)snprintf(out, len, "%x", word);
		else
			at += (size_t)snprintf(out + at, len - at, ",%08x", word);
	}
}

static void add_device(struct view *v, const struct sv_device *d, long ncpu)
{
	struct ibv_device_attr da;
	char dir[128], sub[200], link[128], mask[256];
	uint64_t guid = be64toh(d->guid);

	sv_device_attr(d, &da);
	/* as in sysfs: the class entry is a link to the device's directory (hwloc checks) */
	snprintf(dir, sizeof(dir), "sys/devices/virtual/infiniband/%s", d->ibdev.name);
	add_dir(v, dir);
	snprintf(sub, sizeof(sub), "sys/class/infiniband/%s", d->ibdev.name);
	snprintf(link, sizeof(link), "../../devices/virtual/infiniband/%s", d->ibdev.name);
	add_link(v, sub, link);
	add_attr(v, dir, "node_type", "%d: %s", (int)d->ibdev.node_type,
		 d->ibdev.node_type == IBV_NODE_CA ? "CA" : "unknown");
	add_attr(v, dir, "node_guid", "%04x:%04x:%04x:%04x", (unsigned)(guid >> 48) & 0xffff,
		 (unsigned)(guid >> 32) & 0xffff, (unsigned)(guid >> 16) & 0xffff,
		 (unsigned)guid & 0xffff);
	guid = be64toh(da.sys_image_guid);
	add_attr(v, dir, "sys_image_guid", "%04x:%04x:%04x:%04x", (unsigned)(guid >> 48) & 0xffff,
		 (unsigned)(guid >> 32) & 0xffff, (unsigned)(guid >> 16) & 0xffff,
		 (unsigned)guid & 0xffff);
	add_attr(v, dir, "node_desc", "softverbs %s", d->ibdev.name);
	add_attr(v, dir, "fw_ver", "%s", da.fw_ver);
	add_attr(v, dir, "hw_rev", "0x%x", da.hw_ver);
	add_attr(v, dir, "hca_type", "softverbs");
	add_attr(v, dir, "board_id", "softverbs");
	add_attr(v, dir, "parent", "%s", d->ifname); /* as Soft-RoCE devices name their netdev */
	/* no PCI function behind it: a device directory with no locality */
	snprintf(sub, sizeof(sub), "%s/device", dir);
	add_dir(v, sub);
	add_attr(v, sub, "numa_node", "-1");
	add_attr(v, sub, "local_cpulist", "0-%ld", ncpu - 1);
	cpu_mask(ncpu, mask, sizeof(mask));
	add_attr(v, sub, "local_cpus", "%s", mask);
	add_attr(v, sub, "vendor", "0x%04x", da.vendor_id);
	add_attr(v, sub, "device", "0x%04x", da.vendor_part_id);
	/*
	 * The network interface, where frameworks look for it (rdma-core's
	 * tests, pyverbs users: "ls <ibdev>/device/net/"): on a NIC, `device`
	 * is the PCI function and net/<ifname> its netdev's directory.  Here
	 * a link to the host's own /sys/class/net/<ifname>, which the preload
	 * leaves alone, so its files (address, ifindex, mtu) are the real ones.
	 */
	snprintf(sub, sizeof(sub), "%s/device/net", dir);
	add_dir(v, sub);
	snprintf(sub, sizeof(sub), "%s/device/net/%s", dir, d->ifname);
	snprintf(link, sizeof(link), "/sys/class/net/%s", d->ifname);
	add_link(v, sub, link);
	add_port(v, d, dir);

	snprintf(dir, sizeof(dir), "sys/class/infiniband_verbs/%s", d->ibdev.dev_name);
	add_dir(v, dir);
	add_attr(v, dir, "ibdev", "%s", d->ibdev.name);
	add_attr(v, dir, "abi_version", "1");
	add_attr(v, dir, "dev", "%d:%d", SV_UVERBS_MAJOR, SV_UVERBS_MINOR_BASE + d->index);
	snprintf(sub, sizeof(sub), "dev/infiniband/%s", d->ibdev.dev_name);
	/*
	 * A character device anyone may open, as the real uverbs nodes are
	 * (udev makes them 0666): checks of existence and access succeed, and
	 * nothing is reached through it.
	 */
	add_link(v, sub, "/dev/null");
}

static void build(struct view *v)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	long ncpu = SV_MAX(sysconf(_SC_NPROCESSORS_CONF), 1L);

	add_dir(v, "sys");
	add_dir(v, "sys/class");
	add_dir(v, "sys/class/infiniband");
	add_dir(v, "sys/devices");
	add_dir(v, "sys/devices/virtual");
	add_dir(v, "sys/devices/virtual/infiniband");
	add_dir(v, "sys/class/infiniband_verbs");
	add_attr(v, "sys/class/infiniband_verbs", "abi_version", "6"); /* uverbs' kernel ABI */
	add_dir(v, "dev");
	add_dir(v, "dev/infiniband");
	add_link(v, "dev/infiniband/rdma_cm", "/dev/null");
	for (int i = 0; list && list[i]; i++)
		add_device(v, SV_CONTAINER_OF(list[i], struct sv_device, ibdev), ncpu);
	if (!list)
		v->oom = true;
	ibv_free_device_list(list);
}

/* FNV-1a over every entry: names the tree after what it holds. */
static uint64_t view_hash(const struct view *v)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < v->n; i++) {
		const char *parts[2] = { v->e[i].path, v->e[i].data ? v->e[i].data : "" };

		h = (h ^ (uint64_t)v->e[i].kind) * 0x100000001b3ull;
		for (int k = 0; k < 2; k++)
			for (const char *p = parts[k];; p++) {
				h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
				if (!*p)
					break;
			}
	}
	return h;
}

static int write_file(const char *path, const char *data)
{
	size_t len = strlen(data);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, data, len);
	close(fd);
	return n == (ssize_t)len ? 0 : -1;
}

/* Remove the first n entries under root, children before parents. */
static void unwrite(const struct view *v, const char *root, size_t n)
{
	char path[8192];

	while (n--) {
		snprintf(path, sizeof(path), "%s/%s", root, v->e[n].path);
		if (v->e[n].kind == ENTRY_DIR)
			rmdir(path);
		else
			unlink(path);
	}
	rmdir(root);
}

static int materialize(const struct view *v, const char *root)
{
	char path[8192];
	size_t i;

	if (mkdir(root, 0755))
		return -1;
	for (i = 0; i < v->n; i++) {
		const struct entry *e = &v->e[i];
		int r;

		if ((size_t)snprintf(path, sizeof(path), "%s/%s", root, e->path) >= sizeof(path))
			r = -1, errno = ENAMETOOLONG;
		else if (e->kind == ENTRY_DIR)
			r = mkdir(path, 0755);
		else if (e->kind == ENTRY_FILE)
			r = write_file(path, e->data);
		else
			r = symlink(e->data, path);
		if (r) {
			int err = errno;

			unwrite(v, root, i);
			errno = err;
			return -1;
		}
	}
	return 0;
}

static int write_view(char *out, size_t len)
{
	struct view v = { 0 };
	char base[2048], tmp[4096];
	struct stat st;
	int ret = -1;

	build(&v);
	if (v.oom) {
		errno = ENOMEM;
		goto out;
	}
	if (sv_rundir(base, sizeof(base)))
		goto out;
	if ((size_t)snprintf(out, len, "%s/view-%016llx", base,
			     (unsigned long long)view_hash(&v)) >= len) {
		errno = ENAMETOOLONG;
		goto out;
	}
	if (!lstat(out, &st) && S_ISDIR(st.st_mode)) {
		ret = 0; /* written before, by us or another process: never changed since */
		goto out;
	}
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.%d.%08x", out, (int)getpid(),
			     sv_random_u32()) >= sizeof(tmp)) {
		errno = ENAMETOOLONG;
		goto out;
	}
	if (materialize(&v, tmp))
		goto out;
	if (rename(tmp, out)) {
		int err = errno;

		unwrite(&v, tmp, v.n);
		/* another process renamed the same content into place first */
		if ((err != EEXIST && err != ENOTEMPTY) || lstat(out, &st)) {
			errno = err;
			goto out;
		}
	}
	ret = 0;
out:
	view_free(&v);
	return ret;
}

/*
 * The root of the view of this process's devices, written if needed; NULL
 * with errno set when it cannot be.  Computed once per process: devices are
 * kept for the life of the process (device.c).  Exported in softverbs' own
 * version node for the preload library and the tool.
 */
const char *softverbs_fs_view(void)
{
	static struct sv_mutex lock = SV_MUTEX_INITIALIZER(SV_LOCK_SYSFS);
	static char root[2300];
	static int err = -1;

	sv_mutex_lock(&lock);
	if (err < 0)
		err = write_view(root, sizeof(root)) ? (errno ? errno : EIO) : 0;
	sv_mutex_unlock(&lock);
	if (err) {
		errno = err;
		return NULL;
	}
	return root;
}
