/*
 * softverbs - command-line front end.
 *
 *   softverbs run [--] PROGRAM [ARGS...]   run an unmodified verbs program on softverbs
 *   softverbs devices                      what ibv_devices/ibv_devinfo would show
 *   softverbs stat [--json] / top          counters of the contexts on this host (stat.c)
 *   softverbs system enable|disable|status softverbs as the system's libibverbs (system.c)
 *   softverbs version
 *   softverbs help
 *
 * "run" only arranges the dynamic linker's search path: softverbs' libraries
 * live in a private directory (installed: <libdir>/softverbs; in the build
 * tree: build/lib), and putting that directory first in LD_LIBRARY_PATH makes
 * the program load softverbs' libibverbs.so.1 instead of the system one.
 * Nothing else about the program changes, which is the point: it is the same
 * binary the user would run on RDMA hardware.
 *
 * "devices" goes through the public verbs API only, like any other client, so
 * it also shows that the library answers the calls programs make first.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr(), RTLD_DEFAULT */
#endif

#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "tool.h"

#ifndef SOFTVERBS_VERSION
#define SOFTVERBS_VERSION "0.1.0"
#endif
/* From <bindir> to the installed private library directory (CMakeLists.txt). */
#ifndef SV_BIN_TO_PKGLIB
#define SV_BIN_TO_PKGLIB "../lib/softverbs"
#endif

/* Highest libibverbs ABI node that softverbs exports (see src/abi/libibverbs.map). */
#define SOFTVERBS_ABI "IBVERBS_1.14"

static const char usage_text[] =
	"Usage: softverbs <command> [arguments]\n"
	"\n"
	"softverbs implements the RDMA verbs (libibverbs, librdmacm) in user space,\n"
	"so that unmodified verbs programs run on any Linux machine.\n"
	"\n"
	"Commands:\n"
	"  run [--] PROGRAM [ARGS...]  run PROGRAM with softverbs' libibverbs.so.1 and\n"
	"                              librdmacm.so.1 in place of the system libraries\n"
	"                              (prepends softverbs' library directory to\n"
	"                              LD_LIBRARY_PATH, preloads libsoftverbs-fsview.so,\n"
	"                              then executes PROGRAM)\n"
	"  devices                     list softverbs devices: node GUID, port state,\n"
	"                              GID table, MTU, link layer and device limits\n"
	"  stat [--json] [--pid PID] [--device DEV]\n"
	"                              the softverbs contexts (processes, devices, QPs) of\n"
	"                              this host and their counters, per context, QP and\n"
	"                              device; --json for machine-readable output\n"
	"  top [--delay S] [--iterations N] [--pid PID] [--device DEV]\n"
	"                              the same, refreshed live: packet and byte rates\n"
	"  system enable|disable|status\n"
	"                              make softverbs' libraries the system's libibverbs\n"
	"                              and librdmacm for every program (an ld.so.conf.d\n"
	"                              drop-in, root only), undo that, or say which is in use\n"
	"  version                     print the softverbs version\n"
	"  help                        print this help\n"
	"\n"
	"Devices: one per up network interface with an IPv4 or a global IPv6\n"
	"address (lo only when alone or asked for: SOFTVERBS_LOOPBACK=1), named\n"
	"sv_<interface>, e.g. sv_eth0. Each has one port, ACTIVE,\n"
	"link layer Ethernet. Its GIDs are addresses of the port, the same in every\n"
	"process, as a RoCE port shows them for its interface: link-local and\n"
	"IPv4-mapped (and IPv6 where the interface has one), each as RoCE v1 and\n"
	"v2. Any QP is reached by any GID of its device with its QP number, so a\n"
	"peer may use any of them (e.g. '-g 0' or '-g 3' for the ibv_*_pingpong\n"
	"examples); an IPv6 GID needs SOFTVERBS_TRANSPORT=rocev2.\n"
	"\n"
	"Environment:\n"
	"  SOFTVERBS_IFACES    comma-separated interface names that become devices\n"
	"                      (default: every up interface with an IPv4 or IPv6 address)\n"
	"  SOFTVERBS_LOOPBACK  1: lo becomes a device (sv_lo) beside the others; 0: never\n"
	"                      (default auto: only when lo is the only interface)\n"
	"  SOFTVERBS_PORT_MIN  lowest TCP port a device endpoint listens on\n"
	"                      (default: an ephemeral port chosen by the kernel)\n"
	"  SOFTVERBS_PORT_MAX  highest TCP port, used with SOFTVERBS_PORT_MIN\n"
	"                      (default: SOFTVERBS_PORT_MIN + 1000, at most 65535)\n"
	"  SOFTVERBS_LOG       log level: error, warn, info or debug (default: warn)\n"
	"  (every variable: man 7 softverbs)\n"
	"\n"
	"Examples:\n"
	"  softverbs devices\n"
	"  softverbs run -- ibv_devinfo\n"
	"  softverbs run -- ibv_rc_pingpong -d sv_lo -g 0              # server\n"
	"  softverbs run -- ibv_rc_pingpong -d sv_lo -g 0 127.0.0.1    # client\n";

static void usage(FILE *out)
{
	fputs(usage_text, out);
}

int usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "softverbs: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n\n");
	usage(stderr);
	return EXIT_USAGE;
}

/* ---- run ---- */

#if defined(__SANITIZE_ADDRESS__)
#define SV_ASAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SV_ASAN_BUILD 1
#endif
#endif

/* Prepend entry to a ':'-separated list variable; never leaves an empty element. */
static int prepend_env_list(const char *name, const char *entry)
{
	const char *old = getenv(name);
	size_t len = strlen(entry) + (old ? strlen(old) : 0) + 2;
	char *value = malloc(len);
	int ret;

	if (!value) {
		errno = ENOMEM;
		return -1;
	}
	if (old && *old)
		snprintf(value, len, "%s:%s", entry, old);
	else
		snprintf(value, len, "%s", entry);
	ret = setenv(name, value, 1);
	free(value);
	return ret;
}

/* Whether LD_PRELOAD already names lib (a nested `softverbs run`). */
static bool preloaded(const char *lib)
{
	const char *p = getenv("LD_PRELOAD");
	size_t n = strlen(lib);

	while (p && *p) {
		size_t l = strcspn(p, ": ");

		if (l == n && !strncmp(p, lib, n))
			return true;
		p += l;
		p += strspn(p, ": ");
	}
	return false;
}

#ifdef SV_ASAN_BUILD
/*
 * In a sanitizer build libibverbs.so.1 itself is instrumented, and the
 * AddressSanitizer runtime refuses to start unless it is the first library of
 * the process. The programs run here (ibv_devinfo, perftest, ...) are not
 * instrumented, so preload the runtime this tool was linked with.
 */
static int preload_asan_runtime(void)
{
	Dl_info info;
	void *sym = dlsym(RTLD_DEFAULT, "__asan_init");

	if (!sym || !dladdr(sym, &info) || !info.dli_fname)
		return 0;
	const char *base = strrchr(info.dli_fname, '/');
	base = base ? base + 1 : info.dli_fname;
	/* A statically linked runtime lives in this executable: nothing to preload. */
	if (strncmp(base, "libasan", 7) != 0 && strncmp(base, "libclang_rt.asan", 16) != 0)
		return 0;
	return prepend_env_list("LD_PRELOAD", info.dli_fname);
}
#endif

/* Does dir hold softverbs' libraries?  The preload library is softverbs'
 * own, so a directory with only some other libibverbs.so.1 (a self-built
 * rdma-core in /usr/local/lib, say) does not qualify. */
bool is_lib_dir(const char *dir)
{
	char probe[PATH_MAX + 32];

	snprintf(probe, sizeof(probe), "%s/libibverbs.so.1", dir);
	if (access(probe, R_OK) != 0)
		return false;
	snprintf(probe, sizeof(probe), "%s/libsoftverbs-fsview.so", dir);
	return access(probe, R_OK) == 0;
}

/*
 * Directory holding softverbs' libraries, found relative to this executable
 * so that an installed tree works wherever it was put (DESTDIR, a moved
 * prefix): first the installed layout, <bindir>/SV_BIN_TO_PKGLIB (e.g.
 * /usr/local/bin/../lib/softverbs), then the build tree's build/bin/../lib.
 * Resolved to an absolute path so that the program may chdir freely.
 */
int find_lib_dir(char *out, size_t out_size)
{
	static const char *const rel[] = { SV_BIN_TO_PKGLIB, "../lib" };
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n < 0) {
		fprintf(stderr, "softverbs: cannot locate own executable: %s\n", strerror(errno));
		return -1;
	}
	exe[n] = '\0';

	char *slash = strrchr(exe, '/');
	if (!slash) {
		fprintf(stderr, "softverbs: unexpected executable path '%s'\n", exe);
		return -1;
	}
	*slash = '\0';

	for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
		char candidate[2 * PATH_MAX];
		char resolved[PATH_MAX];

		snprintf(candidate, sizeof(candidate), "%s/%s", exe, rel[i]);
		if (!realpath(candidate, resolved) || !is_lib_dir(resolved))
			continue;
		if (strlen(resolved) >= out_size) {
			fprintf(stderr, "softverbs: library directory path too long\n");
			return -1;
		}
		strcpy(out, resolved);
		return 0;
	}
	fprintf(stderr,
		"softverbs: softverbs' libraries (libibverbs.so.1, libsoftverbs-fsview.so) are "
		"neither in %s/%s nor in %s/../lib (is the build or the installation complete?)\n",
		exe, SV_BIN_TO_PKGLIB, exe);
	return -1;
}

static int cmd_run(int argc, char **argv)
{
	int first = 0;

	if (first < argc && strcmp(argv[first], "--") == 0)
		first++;
	if (first >= argc)
		return usage_error("run: no PROGRAM given");

	char lib_dir[PATH_MAX];
	if (find_lib_dir(lib_dir, sizeof(lib_dir)) != 0)
		return EXIT_EXEC_FAILED;

	/*
	 * Ours first, the user's own entries after. (An empty element would mean
	 * the current directory to the dynamic linker, hence the care in
	 * prepend_env_list.)
	 */
	if (prepend_env_list("LD_LIBRARY_PATH", lib_dir) != 0) {
		fprintf(stderr, "softverbs: setting LD_LIBRARY_PATH: %s\n", strerror(errno));
		return EXIT_EXEC_FAILED;
	}
	/*
	 * The file-system view of the devices (src/preload/fsview.c): middleware
	 * that looks for /dev/infiniband/uverbsN or /sys/class/infiniband finds
	 * softverbs' devices there.  LD_PRELOAD, unlike a library search path,
	 * also holds for programs that only stat those paths, and is inherited
	 * by every child (mpirun's daemons and ranks).
	 */
	char probe[PATH_MAX + 32];
	snprintf(probe, sizeof(probe), "%s/libsoftverbs-fsview.so", lib_dir);
	if (!preloaded(probe) && prepend_env_list("LD_PRELOAD", probe)) {
		fprintf(stderr, "softverbs: setting LD_PRELOAD: %s\n", strerror(errno));
		return EXIT_EXEC_FAILED;
	}
#ifdef SV_ASAN_BUILD
	if (preload_asan_runtime() != 0) {
		fprintf(stderr, "softverbs: setting LD_PRELOAD: %s\n", strerror(errno));
		return EXIT_EXEC_FAILED;
	}
#endif

	execvp(argv[first], &argv[first]);

	/* Same exit codes as a shell: 127 not found, 126 found but not runnable. */
	int err = errno;
	fprintf(stderr, "softverbs: cannot run '%s': %s\n", argv[first], strerror(err));
	return err == ENOENT ? EXIT_NOT_FOUND : EXIT_EXEC_FAILED;
}

/* ---- devices ---- */

static const char *atomic_cap_str(enum ibv_atomic_cap cap)
{
	switch (cap) {
	case IBV_ATOMIC_NONE:
		return "none";
	case IBV_ATOMIC_HCA:
		return "HCA (atomic within this device)";
	case IBV_ATOMIC_GLOB:
		return "global";
	}
	return "unknown";
}

static const char *link_layer_str(uint8_t link_layer)
{
	switch (link_layer) {
	case IBV_LINK_LAYER_UNSPECIFIED:
		return "unspecified";
	case IBV_LINK_LAYER_INFINIBAND:
		return "InfiniBand";
	case IBV_LINK_LAYER_ETHERNET:
		return "Ethernet";
	}
	return "unknown";
}

static int mtu_bytes(enum ibv_mtu mtu)
{
	return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128 << mtu : -1;
}

static void print_guid(__be64 guid_be)
{
	uint64_t guid = be64toh(guid_be);

	printf("%04x:%04x:%04x:%04x", (unsigned)(guid >> 48) & 0xffff,
	       (unsigned)(guid >> 32) & 0xffff, (unsigned)(guid >> 16) & 0xffff,
	       (unsigned)guid & 0xffff);
}

static void print_gid(const union ibv_gid *gid)
{
	for (int i = 0; i < 16; i += 2)
		printf("%s%02x%02x", i ? ":" : "", gid->raw[i], gid->raw[i + 1]);
}

static int show_port(struct ibv_context *ctx, uint8_t port)
{
	struct ibv_port_attr pa;
	union ibv_gid gid;
	int ret;

	memset(&pa, 0, sizeof(pa));
	ret = ibv_query_port(ctx, port, &pa);
	if (ret) {
		printf("  port %u: ibv_query_port failed: %s\n", port, strerror(ret));
		return -1;
	}
	printf("  port %u\n", port);
	printf("    state             %s (%d)\n", ibv_port_state_str(pa.state), (int)pa.state);
	printf("    active_mtu        %d (%d)\n", mtu_bytes(pa.active_mtu), (int)pa.active_mtu);
	printf("    link_layer        %s\n", link_layer_str(pa.link_layer));
	printf("    gid_tbl_len       %d\n", pa.gid_tbl_len);

	for (int i = 0; i < pa.gid_tbl_len; i++) {
		struct ibv_gid_entry e;
		int err = ibv_query_gid_ex(ctx, port, (uint32_t)i, &e, 0);

		if (err == ENODATA)
			continue; /* an empty entry: the table is longer than what fills it */
		if (err) {
			printf("    GID[%d]            (ibv_query_gid_ex failed)\n", i);
			return -1;
		}
		gid = e.gid;
		printf("    GID[%d]            ", i);
		print_gid(&gid);
		printf(", %s\n", e.gid_type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" : "RoCE v1");
	}
	return 0;
}

static int show_device(struct ibv_device *dev)
{
	const char *name = ibv_get_device_name(dev);
	struct ibv_context *ctx = ibv_open_device(dev);
	struct ibv_device_attr da;
	int status = 0;

	printf("%s\n", name ? name : "(unnamed)");
	if (!ctx) {
		printf("  ibv_open_device failed: %s\n", strerror(errno));
		return -1;
	}

	memset(&da, 0, sizeof(da));
	int ret = ibv_query_device(ctx, &da);
	if (ret) {
		printf("  ibv_query_device failed: %s\n", strerror(ret));
		ibv_close_device(ctx);
		return -1;
	}

	printf("  node_guid           ");
	print_guid(ibv_get_device_guid(dev));
	printf("\n");
	printf("  node_type           %s\n", ibv_node_type_str(dev->node_type));
	printf("  fw_ver              %s\n", da.fw_ver[0] ? da.fw_ver : "-");
	printf("  phys_port_cnt       %u\n", da.phys_port_cnt);

	for (uint8_t port = 1; port <= da.phys_port_cnt; port++)
		if (show_port(ctx, port) != 0)
			status = -1;

	printf("  limits\n");
	printf("    max_qp            %d\n", da.max_qp);
	printf("    max_qp_wr         %d\n", da.max_qp_wr);
	printf("    max_sge           %d\n", da.max_sge);
	printf("    max_cq            %d\n", da.max_cq);
	printf("    max_cqe           %d\n", da.max_cqe);
	printf("    max_mr            %d\n", da.max_mr);
	printf("    max_mr_size       %" PRIu64 "\n", (uint64_t)da.max_mr_size);
	printf("    max_pd            %d\n", da.max_pd);
	printf("    max_srq           %d\n", da.max_srq);
	printf("    max_srq_wr        %d\n", da.max_srq_wr);
	printf("    max_qp_rd_atom    %d\n", da.max_qp_rd_atom);
	printf("    atomic_cap        %s\n", atomic_cap_str(da.atomic_cap));

	ibv_close_device(ctx);
	return status;
}

static int cmd_devices(int argc, char **argv)
{
	int num = 0;
	struct ibv_device **list;
	int status = 0;

	if (argc > 0)
		return usage_error("devices: unexpected argument '%s'", argv[0]);

	list = ibv_get_device_list(&num);
	if (!list) {
		fprintf(stderr, "softverbs: ibv_get_device_list: %s\n", strerror(errno));
		return 1;
	}
	if (num == 0) {
		const char *ifaces = getenv("SOFTVERBS_IFACES");

		fprintf(stderr, "softverbs: no devices (no up interface with an IPv4 or IPv6 address%s%s)\n",
			ifaces ? " among SOFTVERBS_IFACES=" : "", ifaces ? ifaces : "");
		ibv_free_device_list(list);
		return 1;
	}

	for (int i = 0; i < num; i++) {
		if (i)
			printf("\n");
		if (show_device(list[i]) != 0)
			status = 1;
	}
	printf("\nThe GIDs name the port, the same in every process; a QP on this host\n"
	       "is reached by (any of them, its QP number).\n");

	ibv_free_device_list(list);
	return status;
}

/* ---- version ---- */

static int cmd_version(int argc, char **argv)
{
	if (argc > 0)
		return usage_error("version: unexpected argument '%s'", argv[0]);

	printf("softverbs %s (libibverbs ABI up to %s)\n", SOFTVERBS_VERSION, SOFTVERBS_ABI);

	/* Which libibverbs.so.1 this process actually loaded, to catch a mixed-up setup. */
	Dl_info info;
	void *sym = dlsym(RTLD_DEFAULT, "ibv_get_device_list");
	if (sym && dladdr(sym, &info) && info.dli_fname)
		printf("libibverbs: %s\n", info.dli_fname);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}

	const char *cmd = argv[1];
	int sub_argc = argc - 2;
	char **sub_argv = argv + 2;

	if (strcmp(cmd, "run") == 0)
		return cmd_run(sub_argc, sub_argv);
	if (strcmp(cmd, "devices") == 0)
		return cmd_devices(sub_argc, sub_argv);
	if (strcmp(cmd, "stat") == 0)
		return cmd_stat(sub_argc, sub_argv);
	if (strcmp(cmd, "top") == 0)
		return cmd_top(sub_argc, sub_argv);
	if (strcmp(cmd, "system") == 0)
		return cmd_system(sub_argc, sub_argv);
	if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0)
		return cmd_version(sub_argc, sub_argv);
	if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
		usage(stdout);
		return 0;
	}
	return usage_error("unknown command '%s'", cmd);
}
