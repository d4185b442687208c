/*
 * Multicast: UD datagrams sent to a group, as RoCE carries them to a
 * multicast GID with destination QPN 0xFFFFFF.
 *
 * A context has one connection per group it sends to or has QPs attached
 * to: a UDP socket bound to the group's IPv4 address and the device's
 * shared port number (SOFTVERBS_PORT, 4791), sending out of the device's
 * interface with multicast loopback on, and joined to the group on that
 * interface while any of its QPs is attached.  The kernel's group
 * membership (IGMP) then does what a RoCE fabric's switches do: every
 * joined socket, in this process, another process of this host or another
 * host, gets its copy, and one that never joined gets none
 * (IP_MULTICAST_ALL off).  No registry, no daemon.
 *
 * A datagram is a header (magic, the MGID, a MAC with the job's secret over
 * the MGID and the packet, auth.h) and the packet itself (BTH, DETH,
 * [ImmDt], payload); its source address is the sender's port GID.  One that
 * is not for this group, or whose MAC does not match, is dropped.
 */
#include "transport/transport.h"
#include "transport/auth.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* This file's transport (select.c names it). */
extern const struct sv_transport_ops sv_mcast_ops;

#define SV_MCAST_MAGIC 0x53564d43u /* "SVMC" */

struct sv_mcast_hdr {
	uint32_t magic;
	uint8_t mgid[16];
	uint8_t mac[SV_AUTH_MAC];
} __attribute__((packed));

/* conn->tp of a multicast connection */
struct sv_mcast {
	union ibv_gid mgid;
	struct sockaddr_in group; /* the group's address and port */
	struct in_addr ifip;      /* the device's interface address */
	bool joined;
	uint8_t rx[sizeof(struct sv_mcast_hdr) + SV_MAX_FRAME];
};

static struct sv_mcast *to_mc(const struct sv_conn *c)
{
	return c->tp;
}

bool sv_gid_is_mcast(const union ibv_gid *gid)
{
	static const uint8_t v4mapped[12] = { [10] = 0xff, [11] = 0xff };
	uint32_t ip;

	if (!memcmp(gid->raw, v4mapped, sizeof(v4mapped))) {
		memcpy(&ip, gid->raw + 12, 4);
		return IN_MULTICAST(ntohl(ip));
	}
	return gid->raw[0] == 0xff;
}

/*
 * The IPv4 group a multicast GID travels to: the address itself where the
 * GID carries one (::ffff:a.b.c.d as rdma_cm makes it for RoCE v2, and
 * ff0e::ffff:a.b.c.d for RoCE v1), otherwise one of 239.255.0.0/16 drawn
 * from the GID (another GID drawing the same one is told apart by the MGID
 * every datagram carries).
 */
static struct in_addr group_of(const union ibv_gid *g)
{
	struct in_addr a;
	uint32_t h = 2166136261u;

	memcpy(&a.s_addr, g->raw + 12, 4);
	if (g->raw[10] == 0xff && g->raw[11] == 0xff && IN_MULTICAST(ntohl(a.s_addr)))
		return a;
	for (int i = 0; i < 16; i++)
		h = (h ^ g->raw[i]) * 16777619u; /* FNV-1a */
	a.s_addr = htonl(0xefff0000u | (h & 0xffff));
	return a;
}

const union ibv_gid *sv_conn_group(const struct sv_conn *c)
{
	return c->ops == &sv_mcast_ops ? &to_mc(c)->mgid : NULL;
}

int sv_mcast_open(struct sv_conn *c, const union ibv_gid *mgid, struct in_addr ifip)
{
	struct sv_mcast *m = calloc(1, sizeof(*m));
	int one = 1, zero = 0, fd;
	unsigned char ttl = 1, loop = 1;

	if (!m)
		return -ENOMEM;
	if (sv_auth_init()) { /* each datagram carries the secret's MAC */
		free(m);
		return -EACCES;
	}
	m->mgid = *mgid;
	m->ifip = ifip;
	m->group = (struct sockaddr_in){ .sin_family = AF_INET,
					 .sin_port = htons(sv_tcp_shared_port() ? sv_tcp_shared_port()
										: 4791),
					 .sin_addr = group_of(mgid) };
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		free(m);
		return -errno;
	}
	/* every context of the host that uses the group binds its address */
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    setsockopt(fd, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof(zero)) ||
	    setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &ifip, sizeof(ifip)) ||
	    setsockopt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof(loop)) ||
	    setsockopt(fd, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof(ttl)) ||
	    bind(fd, (struct sockaddr *)&m->group, sizeof(m->group))) {
		int e = -errno;

		close(fd);
		free(m);
		return e;
	}
	c->fd = fd;
	c->tp = m;
	c->ops = &sv_mcast_ops;
	return 0;
}

int sv_conn_group_join(struct sv_conn *c, bool on)
{
	struct sv_mcast *m = to_mc(c);
	struct ip_mreq r = { .imr_multiaddr = m->group.sin_addr, .imr_interface = m->ifip };

	if (m->joined == on)
		return 0;
	if (setsockopt(c->fd, IPPROTO_IP, on ? IP_ADD_MEMBERSHIP : IP_DROP_MEMBERSHIP, &r,
		       sizeof(r)))
		return -errno;
	m->joined = on;
	return 0;
}

/*
 * Each frame one datagram, its length word left out.  A full socket buffer
 * stops the batch (the rest waits in the queue for EPOLLOUT); any other
 * error drops the datagram, as a network may.
 */
static int mcast_send(struct sv_conn *c, const struct sv_frames *f)
{
	struct sv_mcast *m = to_mc(c);
	int k;

	for (k = 0; k < f->nframes; k++) {
		struct iovec v[1 + SV_FRAME_MAX_IOV + 1], mv[1 + SV_FRAME_MAX_IOV + 1];
		struct sv_mcast_hdr h = { .magic = htonl(SV_MCAST_MAGIC) };
		size_t skip = SV_FRAME_HEAD;
		int n = 1;

		for (int i = f->first[k]; i < f->first[k + 1] && n < (int)SV_ARRAY_SIZE(v); i++) {
			size_t l = f->iov[i].iov_len;

			if (skip >= l) {
				skip -= l;
				continue;
			}
			v[n].iov_base = (uint8_t *)f->iov[i].iov_base + skip;
			v[n++].iov_len = l - skip;
			skip = 0;
		}
		memcpy(h.mgid, m->mgid.raw, 16);
		mv[0] = (struct iovec){ h.mgid, sizeof(h.mgid) };
		memcpy(mv + 1, v + 1, sizeof(*v) * (size_t)(n - 1));
		sv_auth_datagram_mac(h.mac, mv, n);
		v[0] = (struct iovec){ &h, sizeof(h) };

		struct msghdr mh = { .msg_name = &m->group, .msg_namelen = sizeof(m->group),
				     .msg_iov = v, .msg_iovlen = (size_t)n };

		if (sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 &&
		    (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS))
			break;
	}
	return k;
}

/* Datagrams for this group, checked, each handed up with its sender. */
static void mcast_input(struct sv_conn *c, bool closing)
{
	struct sv_mcast *m = to_mc(c);

	(void)closing;
	for (int i = 0; i < 64; i++) {
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		ssize_t n = recvfrom(c->fd, m->rx, sizeof(m->rx), MSG_DONTWAIT, (struct sockaddr *)&from,
				     &fl);
		struct sv_mcast_hdr h;

		if (n < 0)
			return;
		if ((size_t)n <= sizeof(h) || fl != sizeof(from) || from.sin_family != AF_INET)
			continue;
		memcpy(&h, m->rx, sizeof(h));

		struct iovec mv[2] = { { h.mgid, sizeof(h.mgid) },
				       { m->rx + sizeof(h), (size_t)n - sizeof(h) } };

		if (ntohl(h.magic) != SV_MCAST_MAGIC || memcmp(h.mgid, m->mgid.raw, 16) ||
		    !sv_auth_datagram_verify(h.mac, mv, 2)) {
			sv_warn_limited("a multicast datagram from %s failed its checks; dropped",
					inet_ntoa(from.sin_addr));
			continue;
		}
		/* the sender's address is its port's GID (the GRH's source) */
		c->peer.ip = sv_ip_from_v4(from.sin_addr);
		c->host->rx_frame(c, m->rx + sizeof(h), (size_t)n - sizeof(h));
		if (atomic_load(&c->state) == SV_CONN_DEAD)
			return;
	}
}

static size_t mcast_unsent(struct sv_conn *c)
{
	(void)c;
	return 0; /* a datagram taken is the kernel's */
}

static void mcast_close(struct sv_conn *c)
{
	if (c->fd >= 0) {
		close(c->fd); /* leaves the group too */
		c->fd = -1;
	}
}

static void mcast_destroy(struct sv_conn *c)
{
	free(c->tp);
	c->tp = NULL;
}

static void mcast_drain(struct sv_conn *c, uint64_t deadline_ns)
{
	(void)deadline_ns;
	(void)sv_conn_flush_queue(c);
}

const struct sv_transport_ops sv_mcast_ops = {
	.name = "multicast",
	.send = mcast_send,
	.input = mcast_input,
	.unsent = mcast_unsent,
	.close = mcast_close,
	.destroy = mcast_destroy,
	.drain = mcast_drain,
	.open = sv_conn_open_unframed,
};
