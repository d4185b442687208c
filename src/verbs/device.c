/*
 * Devices and contexts.  A device is an up network interface with an IPv4
 * address; opening it creates an endpoint: a listener on that address and
 * an engine thread.  The port's GIDs are the interface's addresses
 * (verbs/gid.c), and a QP's number says which process's endpoint owns it
 * (transport/registry.c), so a peer given only (GID, QPN), which is what
 * verbs programs exchange, can reach it.
 *
 * The loopback interface gets a device (sv_lo) only when asked for
 * (SOFTVERBS_LOOPBACK=1, or lo named in SOFTVERBS_IFACES) or when no other
 * interface qualifies.  A real host has no RDMA device on lo, and middleware
 * takes every device whose addresses look alike for a path to every other
 * host: UCX pairs host A's sv_lo with host B's (both RoCE v2 IPv4 GIDs), and
 * that QP then aims at 127.0.0.1 in the wrong host.  Same-host work needs no
 * sv_lo: the device of any interface reaches the processes of this host
 * (over shared memory), and the CM maps 127.0.0.1 to the first device, as
 * the kernel's does.
 */
#include "common/lock_order.h"
#include "common/fault_guard.h"
#include "verbs/verbs.h"
#include "engine/xrc_relay.h"
#include "engine/engine.h"
#include "engine/copier.h"
#include "engine/stats.h"
#include "engine/mem_export.h"
#include "engine/mem_share.h"
#include "transport/auth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if_arp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static struct sv_mutex devs_lock = SV_MUTEX_INITIALIZER(SV_LOCK_DEVICES);
static struct sv_device **devs;
static int ndevs;

bool sv_ctx_reserve(struct sv_context *ctx, uint32_t *count, uint32_t max)
{
	bool ok;

	sv_mutex_lock(&ctx->lock);
	ok = *count < max;
	if (ok)
		(*count)++;
	sv_mutex_unlock(&ctx->lock);
	return ok;
}

void sv_ctx_release(struct sv_context *ctx, uint32_t *count)
{
	sv_mutex_lock(&ctx->lock);
	(*count)--;
	sv_mutex_unlock(&ctx->lock);
}

uint32_t sv_mtu_bytes(enum ibv_mtu mtu)
{
	return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128u << mtu : 0;
}

static bool iface_selected(const char *name)
{
	const char *list = sv_env_str("SOFTVERBS_IFACES", NULL);
	size_t n = strlen(name);

	if (!list)
		return true;
	for (const char *p = list; *p;) {
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);

		if (l == n && !strncmp(p, name, n))
			return true;
		if (!e)
			break;
		p = e + 1;
	}
	return false;
}

/* The interface's hardware address (none: zeros, as lo has). */
static void interface_mac(const char *ifname, uint8_t mac[6])
{
	struct ifreq r;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	memset(mac, 0, 6);
	memset(&r, 0, sizeof(r));
	snprintf(r.ifr_name, sizeof(r.ifr_name), "%s", ifname);
	if (fd >= 0 && !ioctl(fd, SIOCGIFHWADDR, &r) && r.ifr_hwaddr.sa_family == ARPHRD_ETHER)
		memcpy(mac, r.ifr_hwaddr.sa_data, 6);
	if (fd >= 0)
		close(fd);
}

/*
 * The interface's first IPv6 address that is not link-local (::1 for lo):
 * GID indexes 4 and 5 (gid.c).  Its link-local address is not one: GIDs 0
 * and 1 are the MAC's link-local form, which softverbs resolves to the
 * host's IPv4 address.
 */
static bool interface_ip6(const struct ifaddrs *all, const char *ifname, struct in6_addr *ip6)
{
	for (const struct ifaddrs *i = all; i; i = i->ifa_next) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)i->ifa_addr;

		if (s6 && s6->sin6_family == AF_INET6 && !strcmp(i->ifa_name, ifname) &&
		    !IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr) && !IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
			*ip6 = s6->sin6_addr;
			return true;
		}
	}
	return false;
}

const struct sv_device *sv_device_by_ip6(const struct in6_addr *ip6)
{
	for (int k = 0; k < ndevs; k++)
		if (devs[k]->has_ip6 && !memcmp(&devs[k]->ip6, ip6, sizeof(*ip6)))
			return devs[k];
	return NULL;
}

const struct sv_device *sv_device_by_mac(const uint8_t mac[6])
{
	for (int k = 0; k < ndevs; k++)
		if (!memcmp(devs[k]->mac, mac, 6))
			return devs[k];
	return NULL;
}

/* An address that makes its interface a device: IPv4, or IPv6 that is
 * neither link-local nor IPv4-mapped (what GIDs 4 and 5 show). */
static bool device_address(const struct sockaddr *sa)
{
	const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;

	return sa && (sa->sa_family == AF_INET ||
		      (sa->sa_family == AF_INET6 && !IN6_IS_ADDR_LINKLOCAL(a6) &&
		       !IN6_IS_ADDR_V4MAPPED(a6)));
}

/* An interface that can become a device, leaving aside the loopback rule. */
static bool iface_qualifies(const struct ifaddrs *i)
{
	return device_address(i->ifa_addr) && (i->ifa_flags & IFF_UP) &&
	       iface_selected(i->ifa_name) &&
	       strlen(i->ifa_name) + 4 <= sizeof(((struct ibv_device *)0)->name);
}

/* The interface's first IPv4 address. */
static bool interface_ip4(const struct ifaddrs *all, const char *ifname, struct in_addr *ip)
{
	for (const struct ifaddrs *i = all; i; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && !strcmp(i->ifa_name, ifname)) {
			*ip = ((const struct sockaddr_in *)i->ifa_addr)->sin_addr;
			return true;
		}
	return false;
}

/*
 * Whether loopback interfaces become devices: SOFTVERBS_LOOPBACK=1 or 0
 * says; unset (or auto), only when lo is named in SOFTVERBS_IFACES or no
 * other interface qualifies (a container with no network but lo).
 */
static bool loopback_wanted(const struct ifaddrs *all)
{
	const char *v = sv_env_str("SOFTVERBS_LOOPBACK", "auto");

	if (!strcmp(v, "1") || !strcmp(v, "yes") || !strcmp(v, "on"))
		return true;
	if (!strcmp(v, "0") || !strcmp(v, "no") || !strcmp(v, "off"))
		return false;
	if (strcmp(v, "auto"))
		sv_warn("SOFTVERBS_LOOPBACK=%s: expected auto, 1 or 0; using auto", v);
	if (sv_env_str("SOFTVERBS_IFACES", NULL))
		return true; /* iface_selected decides: lo only if named */
	for (const struct ifaddrs *i = all; i; i = i->ifa_next)
		if (iface_qualifies(i) && !(i->ifa_flags & IFF_LOOPBACK))
			return false;
	return true;
}

static void scan_devices(void)
{
	struct ifaddrs *ifa, *i;
	bool loopback;

	if (getifaddrs(&ifa))
		return;
	loopback = loopback_wanted(ifa);
	for (i = ifa; i; i = i->ifa_next) {
		struct sv_device *d, **nd;
		bool known = false;

		if (!iface_qualifies(i) || ((i->ifa_flags & IFF_LOOPBACK) && !loopback))
			continue;
		for (int k = 0; k < ndevs; k++)
			if (!strcmp(devs[k]->ifname, i->ifa_name))
				known = true; /* first address of an interface wins */
		if (known)
			continue;
		d = calloc(1, sizeof(*d));
		nd = realloc(devs, sizeof(*devs) * (size_t)(ndevs + 1));
		if (!d || !nd) {
			free(d);
			break;
		}
		devs = nd;
		snprintf(d->ifname, sizeof(d->ifname), "%s", i->ifa_name);
		d->has_ip4 = interface_ip4(ifa, i->ifa_name, &d->ip);
		d->ifindex = (int)if_nametoindex(i->ifa_name);
		interface_mac(i->ifa_name, d->mac);
		d->has_ip6 = interface_ip6(ifa, i->ifa_name, &d->ip6);
		/* the endpoints' address: IPv4 where there is one */
		d->addr = d->has_ip4 ? sv_ip_from_v4(d->ip) : d->ip6;
		d->index = ndevs;
		d->loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
		/* node GUID: "SV" marker, interface index, the address's last 4 bytes */
		{
			uint8_t g[8] = { 0x53, 0x56, (uint8_t)(d->ifindex >> 8), (uint8_t)d->ifindex };

			memcpy(g + 4, &d->addr.s6_addr[12], 4);
			memcpy(&d->guid, g, 8);
		}
		d->ibdev.node_type = IBV_NODE_CA;
		d->ibdev.transport_type = IBV_TRANSPORT_IB;
		snprintf(d->ibdev.name, sizeof(d->ibdev.name), "sv_%s", i->ifa_name);
		snprintf(d->ibdev.dev_name, sizeof(d->ibdev.dev_name), "uverbs%d", d->index);
		snprintf(d->ibdev.dev_path, sizeof(d->ibdev.dev_path),
			 "%s/class/infiniband_verbs/uverbs%d", ibv_get_sysfs_path(), d->index);
		snprintf(d->ibdev.ibdev_path, sizeof(d->ibdev.ibdev_path), "%s/class/infiniband/%s",
			 ibv_get_sysfs_path(), d->ibdev.name);
		devs[ndevs++] = d;
	}
	freeifaddrs(ifa);
}

struct ibv_device **ibv_get_device_list(int *num_devices)
{
	struct ibv_device **list;

	sv_mutex_lock(&devs_lock);
	scan_devices(); /* devices are kept for the life of the process */
	list = calloc((size_t)ndevs + 1, sizeof(*list));
	/*
	 * Devices of loopback interfaces come last.  A Linux host has no RDMA
	 * device there, so programs that take the first device (the pingpongs
	 * without -d, Open MPI's OFI MTL taking libfabric's first domain) should
	 * get one that reaches other hosts, as on such a host.  libfabric's
	 * verbs provider cannot use sv_lo at all: it skips loopback interfaces.
	 */
	if (list) {
		int n = 0;

		for (int pass = 0; pass < 2; pass++)
			for (int i = 0; i < ndevs; i++)
				if (devs[i]->loopback == (pass == 1))
					list[n++] = &devs[i]->ibdev;
	}
	if (num_devices)
		*num_devices = list ? ndevs : 0;
	sv_mutex_unlock(&devs_lock);
	if (!list)
		errno = ENOMEM;
	return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
	return device ? device->name : NULL;
}

__be64 ibv_get_device_guid(struct ibv_device *device)
{
	return SV_CONTAINER_OF(device, struct sv_device, ibdev)->guid;
}

int ibv_get_device_index(struct ibv_device *device)
{
	return SV_CONTAINER_OF(device, struct sv_device, ibdev)->index;
}

void sv_context_fill_ops(struct sv_context *ctx);

/*
 * context->cmd_fd.  With rdma-core it is the open uverbs device, the channel
 * of every command; here no command travels through a descriptor, but
 * programs still dup it, fstat it or hand it to ibv_import_device (after
 * passing it to another process, say).  So each context gets a descriptor of
 * its own: a sealed memfd holding this text and the device's name.  The text
 * lets ibv_import_device recognise one of ours in any process.
 */
static const char cmd_fd_magic[] = "softverbs context\n";

static int cmd_fd_open(const char *devname)
{
	int fd = memfd_create("softverbs-context", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	char text[sizeof(cmd_fd_magic) + IBV_SYSFS_NAME_MAX + 1];
	ssize_t w;
	int n, err;

	if (fd < 0)
		return -1;
	n = snprintf(text, sizeof(text), "%s%s\n", cmd_fd_magic, devname);
	if (n < 0 || (size_t)n >= sizeof(text))
		n = (int)strlen(cmd_fd_magic);
	w = write(fd, text, (size_t)n);
	if (w != n) {
		err = w < 0 ? errno : EIO;
	} else if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)) {
		err = errno;
	} else {
		return fd;
	}
	close(fd);
	errno = err;
	return -1;
}

/* Is fd (fstat'ed into st) a cmd_fd of some softverbs context? */
static bool is_cmd_fd(int fd, const struct stat *st)
{
	char head[sizeof(cmd_fd_magic) - 1];
	int seals;

	if (!S_ISREG(st->st_mode))
		return false;
	seals = fcntl(fd, F_GET_SEALS);
	return seals >= 0 && (seals & F_SEAL_WRITE) &&
	       pread(fd, head, sizeof(head), 0) == (ssize_t)sizeof(head) &&
	       !memcmp(head, cmd_fd_magic, sizeof(head));
}

/* Contexts open in this process, for the exit-time flush below. */
static struct sv_list open_contexts = { &open_contexts, &open_contexts };
static struct sv_mutex open_lock = SV_MUTEX_INITIALIZER(SV_LOCK_OPEN);

/*
 * A program may exit without closing its devices (librdmacm never closes the
 * ones it opens).  A NIC would still put on the wire what it has completed;
 * here that output sits in user space, so at exit we give queued packets and
 * connections still being set up a bounded moment to go out.
 *
 * Then the engine threads stop.  rdma-core's libibverbs starts no threads, so
 * middleware dlcloses it freely (Open MPI unloads its components at
 * MPI_Finalize, libfabric its providers); a thread left running in unmapped
 * code would crash the process.  This destructor runs at that unload as well
 * as at exit.  Nothing is freed: at exit other threads may still be using
 * the contexts, and they keep working (caller-driven progress); a later
 * ibv_close_device finds the thread already gone.
 */
__attribute__((destructor)) static void stop_engines_at_unload(void)
{
	uint64_t deadline = sv_now_ns() + 200000000ull;
	pid_t self = getpid();

	sv_mutex_lock(&open_lock);
	/*
	 * A forked child inherits the parent's contexts but none of their
	 * threads, and their locks may have been held when it forked: it leaves
	 * them alone (rdma-core: a child must not use its parent's resources).
	 */
	for (struct sv_list *l = open_contexts.next; l != &open_contexts; l = l->next) {
		struct sv_context *ctx = SV_CONTAINER_OF(l, struct sv_context, open_link);

		if (ctx->owner == self)
			sv_engine_quiesce(ctx->eng, deadline);
	}
	for (struct sv_list *l = open_contexts.next; l != &open_contexts; l = l->next) {
		struct sv_context *ctx = SV_CONTAINER_OF(l, struct sv_context, open_link);

		if (ctx->owner == self) {
			sv_engine_halt(ctx->eng);
			sv_stats_unlink(ctx); /* nobody will read this context's counters now */
		}
	}
	sv_mutex_unlock(&open_lock);
	/* the fault handler's code goes with the library (at exit, a thread
	 * still polling then meets unmapped memory as any program would) */
	sv_fault_guard_fini();
}

/* open_lock is consistent in a forked child: held across fork().  The
 * shared MR pages' lock (engine/mem_share.c) after it, in the lock order;
 * the child copies those pages before anything else. */
static void fork_prepare(void)
{
	sv_mutex_lock(&open_lock);
	sv_share_fork_prepare();
}

static void fork_parent(void)
{
	sv_share_fork_parent();
	sv_mutex_unlock(&open_lock);
}

static void fork_child(void)
{
	sv_share_fork_child();
	sv_mutex_unlock(&open_lock);
}

__attribute__((constructor)) static void open_lock_at_fork(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct sv_device *dev = SV_CONTAINER_OF(device, struct sv_device, ibdev);
	struct sv_context *ctx;
	int pfd[2], err;

	/* a secret that is set but refused (shorter than 16 bytes, a file
	 * others can read) fails the open, errno EACCES, the reason logged
	 * (auth.h): not every connection later */
	if (sv_auth_check())
		return NULL;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		errno = ENOMEM;
		return NULL;
	}
	ctx->dev = dev;
	ctx->owner = getpid();
	sv_list_init(&ctx->xrcds);
	sv_list_init(&ctx->xrc_proxies);
	sv_list_init(&ctx->xrc_calls);
	sv_mutex_init(&ctx->xrc_call_lock, SV_LOCK_XRC_CALL);
	pthread_cond_init(&ctx->xrc_call_cond, NULL);
	sv_mutex_init(&ctx->srqt_lock, SV_LOCK_SRQT);
	sv_mutex_init(&ctx->lock, SV_LOCK_CTX);
	sv_mutex_init(&ctx->mcast.lock, SV_LOCK_MCAST);
	sv_arwlock_init(&ctx->mrs.lock, SV_LOCK_MR);
	if (pipe2(pfd, O_CLOEXEC)) {
		err = errno;
		goto fail;
	}
	/* the engine must never block posting an event */
	fcntl(pfd[1], F_SETFL, O_NONBLOCK);
	ctx->vctx.context.async_fd = pfd[0];
	ctx->async_wfd = pfd[1];
	sv_async_init(ctx);
	ctx->vctx.context.device = device;
	ctx->vctx.context.cmd_fd = cmd_fd_open(device->name);
	if (ctx->vctx.context.cmd_fd < 0) {
		err = errno;
		goto fail_pipe;
	}
	ctx->vctx.context.num_comp_vectors = 1;
	pthread_mutex_init(&ctx->vctx.context.mutex, NULL);
	ctx->vctx.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
	ctx->vctx.sz = sizeof(ctx->vctx);
	sv_context_fill_ops(ctx);
	err = sv_stats_open(ctx); /* before the engine, which counts */
	if (err)
		goto fail_cmd_fd;
	/* the engine touches application memory that may be unmapped under it */
	sv_fault_guard_init();
	err = sv_engine_start(ctx, &dev->addr);
	if (err)
		goto fail_stats;
	sv_stats_publish(ctx);
	(void)sv_export_open(ctx); /* without it, peers go through the engine */
	sv_info("opened %s: endpoint %s:%u", device->name, SV_IP_STR(&dev->addr), ctx->eng->port);
	sv_mutex_lock(&open_lock);
	sv_list_add_tail(&open_contexts, &ctx->open_link);
	sv_mutex_unlock(&open_lock);
	return &ctx->vctx.context;

fail_stats:
	sv_stats_close(ctx);
fail_cmd_fd:
	close(ctx->vctx.context.cmd_fd);
fail_pipe:
	close(pfd[0]);
	close(pfd[1]);
	sv_async_fini(ctx);
fail:
	sv_arwlock_destroy(&ctx->mrs.lock);
	sv_mutex_destroy(&ctx->lock);
	free(ctx);
	errno = err;
	return NULL;
}

int ibv_close_device(struct ibv_context *context)
{
	struct sv_context *ctx = to_sv_ctx(context);
	bool last;

	sv_mutex_lock(&open_lock);
	sv_list_del(&ctx->open_link);
	last = sv_list_empty(&open_contexts);
	sv_mutex_unlock(&open_lock);
	sv_engine_stop(ctx->eng);
	/* the last context: the process runs no thread of ours any more, the
	 * copier's included (a long copy started it; the next starts it again) */
	if (last)
		sv_copier_idle();
	sv_export_close(ctx); /* after the engine, which released its registry block */
	sv_mcg_table_fini(ctx); /* after the engine: nothing delivers any more */
	sv_xrc_proxies_free(ctx);
	sv_stats_close(ctx);
	close(context->async_fd);
	close(ctx->async_wfd);
	sv_async_fini(ctx);
	close(context->cmd_fd);
	free(ctx->qpt);
	free(ctx->srqt);
	free(ctx->mrs.tab);
	sv_arwlock_destroy(&ctx->mrs.lock);
	sv_mutex_destroy(&ctx->lock);
	free(ctx);
	return 0;
}

/*
 * rdma-core imports a context by its uverbs descriptor, and only through a
 * provider that can (rxe cannot: EOPNOTSUPP).  A softverbs context is not
 * shared kernel state but memory and threads of the process that opened it,
 * so ours cannot be imported either, in this process or another; anything
 * else is refused as rdma-core refuses it: not a descriptor or not a
 * character device (EINVAL), a character device that is no RDMA device
 * (ENODEV).
 */
struct ibv_context *ibv_import_device(int cmd_fd)
{
	struct stat st;

	if (fstat(cmd_fd, &st))
		errno = EINVAL;
	else if (is_cmd_fd(cmd_fd, &st))
		errno = EOPNOTSUPP;
	else
		errno = S_ISCHR(st.st_mode) ? ENODEV : EINVAL;
	return NULL;
}
