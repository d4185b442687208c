/*
 * Which softverbs device serves an IP address, and the route to a peer.
 *
 * softverbs has one device per up interface, named sv_<ifname>; the CM finds
 * the interface that owns an address (IPv4 or IPv6) with getifaddrs and
 * opens that device once per process (every id on it shares the
 * ibv_context, as with rdma-core's librdmacm).  A device is known by its
 * addresses as its GID table shows them (the IPv4 address at index 3, the
 * interface's IPv6 address at 5), either of which may be missing, and by
 * its interface, which owns its other addresses (a link-local one, a second
 * global one).  The source address towards a destination is the kernel's
 * own routing decision, read back from a connected UDP socket: no packet is
 * sent.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rdmacm/cm.h"

#define CM_MAX_DEVICES 64

static struct cm_device devices[CM_MAX_DEVICES];
static int ndevices;

static bool gid_is_zero(const union ibv_gid *g)
{
	static const union ibv_gid zero;

	return !memcmp(g, &zero, sizeof(zero));
}

static struct cm_device *device_open(struct ibv_device *ibdev)
{
	for (int i = 0; i < ndevices; i++)
		if (devices[i].verbs->device == ibdev)
			return &devices[i];
	if (ndevices == CM_MAX_DEVICES)
		return NULL;

	struct cm_device *d = &devices[ndevices];
	struct ibv_device_attr attr;
	struct ibv_port_attr port;

	memset(d, 0, sizeof(*d));
	d->verbs = ibv_open_device(ibdev);
	if (!d->verbs)
		return NULL;
	if (ibv_query_device(d->verbs, &attr) || ibv_query_port(d->verbs, 1, &port)) {
		ibv_close_device(d->verbs);
		d->verbs = NULL;
		return NULL;
	}
	/* an entry the interface does not fill reads as zeros (or fails) */
	if (ibv_query_gid(d->verbs, 1, CM_GID_INDEX_V4, &d->gid_v4) ||
	    !IN6_IS_ADDR_V4MAPPED((struct in6_addr *)d->gid_v4.raw) ||
	    !memcmp(&d->gid_v4.raw[12], "\0\0\0\0", 4))
		memset(&d->gid_v4, 0, sizeof(d->gid_v4));
	if (ibv_query_gid(d->verbs, 1, CM_GID_INDEX_V6, &d->gid_v6) ||
	    IN6_IS_ADDR_V4MAPPED((struct in6_addr *)d->gid_v6.raw))
		memset(&d->gid_v6, 0, sizeof(d->gid_v6));
	if (ibv_query_gid(d->verbs, 1, CM_GID_INDEX_LL, &d->gid_ll))
		memset(&d->gid_ll, 0, sizeof(d->gid_ll));
	d->has_ip = !gid_is_zero(&d->gid_v4);
	d->has_ip6 = !gid_is_zero(&d->gid_v6);
	if (d->has_ip)
		memcpy(&d->ip, &d->gid_v4.raw[12], 4);
	if (d->has_ip6)
		memcpy(&d->ip6, d->gid_v6.raw, 16);
	d->mtu = port.active_mtu;
	d->max_rd_atomic = (uint8_t)SV_MIN(attr.max_qp_init_rd_atom, 255);
	d->max_dest_rd_atomic = (uint8_t)SV_MIN(attr.max_qp_rd_atom, 255);
	ndevices++;
	return d;
}

/* The device named sv_<ifname>, opened. */
static struct cm_device *device_by_ifname(const char *ifname)
{
	char name[IBV_SYSFS_NAME_MAX];
	struct ibv_device **list;
	struct cm_device *found = NULL;
	int n;

	snprintf(name, sizeof(name), "sv_%s", ifname);
	list = ibv_get_device_list(&n);
	if (!list)
		return NULL;
	for (int i = 0; i < n && !found; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			found = device_open(list[i]);
	ibv_free_device_list(list);
	return found;
}

/*
 * The device a loopback address is served by when lo has none (the usual
 * case, device.c in verbs/): the first device, as the kernel's CM binds a
 * loopback id to the first active port it finds.  The QP then carries that
 * device's GIDs, which reach this host's processes as well as any other.
 */
static struct cm_device *first_device(void)
{
	struct ibv_device **list;
	struct cm_device *found = NULL;
	int n;

	list = ibv_get_device_list(&n);
	if (!list)
		return NULL;
	if (n > 0)
		found = device_open(list[0]);
	ibv_free_device_list(list);
	return found;
}

/* One of this process's devices by its address of GID index 3 or 5. */
static struct cm_device *device_known(const struct sockaddr *sa)
{
	for (int k = 0; k < ndevices; k++) {
		struct cm_device *d = &devices[k];

		if (sa->sa_family == AF_INET && d->has_ip &&
		    d->ip.s_addr == ((const struct sockaddr_in *)sa)->sin_addr.s_addr)
			return d;
		if (sa->sa_family == AF_INET6 && d->has_ip6 &&
		    !memcmp(&d->ip6, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16))
			return d;
	}
	return NULL;
}

/* Whether interface address ifa is sa (a link-local one on sa's scope). */
static bool ifa_is(const struct ifaddrs *i, const struct sockaddr *sa)
{
	const struct sockaddr *a = i->ifa_addr;

	if (!a || a->sa_family != sa->sa_family)
		return false;
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)sa)->sin_addr.s_addr;

	const struct sockaddr_in6 *x = (const struct sockaddr_in6 *)a;
	const struct sockaddr_in6 *y = (const struct sockaddr_in6 *)sa;

	if (memcmp(&x->sin6_addr, &y->sin6_addr, 16))
		return false;
	/* fe80::1 may be on several links: the scope says which */
	return !IN6_IS_ADDR_LINKLOCAL(&y->sin6_addr) ||
	       if_nametoindex(i->ifa_name) == y->sin6_scope_id;
}

/*
 * The device of the interface that owns sa (IPv4, or IPv6 of any scope: a
 * link-local address with its scope id).  A loopback address when lo has
 * no device is the first device's, as for 127.0.0.1 and ::1 alike.
 */
struct cm_device *cm_device_for_addr(const struct sockaddr *sa)
{
	struct ifaddrs *ifa, *i;
	struct cm_device *found;

	if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
		return NULL;
	found = cm_sa_is_linklocal(sa) ? NULL : device_known(sa);
	if (found)
		return found;
	if (getifaddrs(&ifa))
		return NULL;
	for (i = ifa; i && !found; i = i->ifa_next)
		if (ifa_is(i, sa))
			found = device_by_ifname(i->ifa_name);
	freeifaddrs(ifa);
	if (!found && cm_sa_is_loopback(sa))
		found = first_device();
	return found;
}

/* An address of this host (a device's or not): it can be bound. */
bool cm_addr_is_local(const struct sockaddr *sa)
{
	struct sockaddr_storage ss;
	int fd = socket(sa->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	bool ok;

	if (fd < 0)
		return false;
	memcpy(&ss, sa, cm_sa_len(sa));
	((struct sockaddr_in *)&ss)->sin_port = 0; /* same place in both families */
	ok = bind(fd, (struct sockaddr *)&ss, cm_sa_len(sa)) == 0;
	close(fd);
	return ok;
}

int cm_route_source(const struct sockaddr *dst, struct sockaddr_storage *src)
{
	struct sockaddr_storage to;
	socklen_t len = sizeof(*src);
	int fd = socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int err = 0;

	if (fd < 0)
		return errno;
	memcpy(&to, dst, cm_sa_len(dst));
	((struct sockaddr_in *)&to)->sin_port = htons(9); /* any port: nothing is sent */
	memset(src, 0, sizeof(*src));
	if (connect(fd, (struct sockaddr *)&to, cm_sa_len(dst)) ||
	    getsockname(fd, (struct sockaddr *)src, &len))
		err = errno;
	close(fd);
	return err;
}

uint8_t cm_id_gid_index(const struct cm_id *id)
{
	const struct cm_device *d = id->dev;
	bool v6 = id->pub.route.addr.src_addr.sa_family == AF_INET6;

	if (!d)
		return v6 ? CM_GID_INDEX_V6 : CM_GID_INDEX_V4;
	if (v6 ? d->has_ip6 : !d->has_ip && d->has_ip6)
		return CM_GID_INDEX_V6;
	if (d->has_ip)
		return CM_GID_INDEX_V4;
	return CM_GID_INDEX_LL;
}

const union ibv_gid *cm_id_gid(const struct cm_id *id)
{
	switch (cm_id_gid_index(id)) {
	case CM_GID_INDEX_V6:
		return &id->dev->gid_v6;
	case CM_GID_INDEX_V4:
		return &id->dev->gid_v4;
	default:
		return &id->dev->gid_ll;
	}
}

/* The path record a RoCE CM would report: GIDs, pkey, MTU, one path. */
void cm_fill_route(struct cm_id *id)
{
	struct ibv_sa_path_rec *p = &id->path;
	struct rdma_route *r = &id->pub.route;

	memset(p, 0, sizeof(*p));
	if (id->dev)
		p->sgid = *cm_id_gid(id);
	/* the peer's GID once it said it, until then its address's, as the
	 * kernel's CM fills a RoCE path (rdma_ip2gid) */
	if (id->remote_gid.global.subnet_prefix || id->remote_gid.global.interface_id)
		p->dgid = id->remote_gid;
	else
		cm_gid_of_sa(&id->pub.route.addr.dst_addr, &p->dgid);
	p->pkey = htobe16(0xffff);
	p->mtu_selector = 2; /* exactly */
	p->mtu = id->mtu ? id->mtu : (id->dev ? id->dev->mtu : IBV_MTU_1024);
	p->rate_selector = 2;
	p->rate = 3; /* 10 Gb/s: nothing meaningful for a software device */
	p->packet_life_time_selector = 2;
	p->packet_life_time = 14;
	p->hop_limit = 64;
	p->traffic_class = id->tos;
	p->reversible = 1;
	p->numb_path = 1;
	r->addr.addr.ibaddr.sgid = p->sgid;
	r->addr.addr.ibaddr.dgid = p->dgid;
	r->addr.addr.ibaddr.pkey = 0xffff;
	r->path_rec = p;
	r->num_paths = 1;
}

struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct ibv_device **list;
	struct ibv_context **out;
	int n, k = 0;

	sv_mutex_lock(&cm_lock);
	list = ibv_get_device_list(&n);
	if (!list) {
		sv_mutex_unlock(&cm_lock);
		return NULL;
	}
	out = calloc((size_t)n + 1, sizeof(*out));
	if (out) {
		for (int i = 0; i < n; i++) {
			struct cm_device *d = device_open(list[i]);

			/* the list holds the device (and its PD) until rdma_free_devices */
			if (d && cm_device_get(d) == 0)
				out[k++] = d->verbs;
		}
	} else {
		errno = ENOMEM;
	}
	ibv_free_device_list(list);
	sv_mutex_unlock(&cm_lock);
	if (num_devices)
		*num_devices = out ? k : 0;
	return out;
}

void rdma_free_devices(struct ibv_context **list)
{
	if (!list)
		return;
	/* the contexts stay open (ids share them for the process's life); the
	 * list's hold on each device's PD ends */
	sv_mutex_lock(&cm_lock);
	for (int i = 0; list[i]; i++)
		for (int k = 0; k < ndevices; k++)
			if (devices[k].verbs == list[i] && devices[k].refcnt > 0)
				cm_device_put(&devices[k]);
	sv_mutex_unlock(&cm_lock);
	free(list);
}

/* The XRC domain of a device's XRC ids, as rdma-core's CM keeps one (cm_lock held). */
struct ibv_xrcd *cm_device_xrcd(struct cm_device *d)
{
	struct ibv_xrcd_init_attr a = { .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
					.fd = -1, .oflags = O_CREAT };

	if (!d->xrcd)
		d->xrcd = ibv_open_xrcd(d->verbs, &a);
	return d->xrcd;
}

/* The default PD of a device, for ids that are given none. */
struct ibv_pd *cm_device_pd(struct cm_device *d)
{
	if (!d->pd)
		d->pd = ibv_alloc_pd(d->verbs);
	return d->pd;
}

/*
 * rdma-core's librdmacm gives every id that reaches a device that device's
 * PD in id->pd (programs create their QPs, AHs and MRs on it), and counts
 * the device's users so that the PD goes with the last of them.  A user is
 * an id with the device, or an rdma_get_devices list not yet freed.
 * cm_lock held.
 */
int cm_device_get(struct cm_device *d)
{
	if (!cm_device_pd(d))
		return errno ? errno : ENOMEM;
	d->refcnt++;
	return 0;
}

void cm_device_put(struct cm_device *d)
{
	if (--d->refcnt > 0 || !d->pd)
		return;
	/*
	 * Something the program made on the PD still lives (an MR it did not
	 * deregister, a QP it did not destroy): ibv_dealloc_pd says EBUSY.
	 * rdma-core forgets the PD then, and it leaks; keeping it instead
	 * leaves those objects valid and gives it to the device's next user.
	 */
	if (ibv_dealloc_pd(d->pd) == 0)
		d->pd = NULL;
}
