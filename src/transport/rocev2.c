/*
 * RoCEv2 (SOFTVERBS_TRANSPORT=rocev2): every packet is a UDP datagram to
 * port 4791 of the peer's address, in the format of IBA annex A17
 * (roce_wire.h), so its packets are the ones a RoCE NIC or Linux Soft-RoCE
 * sends and takes.
 *
 * There are no connections.  A "connection" to a peer address is only where
 * datagrams go (conn->peer.ip, port 4791): no handshake, no descriptor, no
 * state in the kernel.  The engine keeps one per peer address and hands it
 * what arrives from that address; the reliability of RC is the engine's
 * (PSNs, ACKs, NAKs, retransmission), as on a NIC.
 *
 * What arrives, arrives on the listener: a UDP socket bound to the device's
 * address and port 4791.  Every context of the host on that address binds
 * it too (SO_REUSEPORT, which the kernel allows to one user only), since a
 * real peer sends to 4791 and nowhere else, and the kernel gives each
 * datagram to one of them by a hash of its addresses and ports.  A datagram
 * whose destination QPN belongs to another context (its block of QP numbers
 * names that endpoint's port, registry.h) is passed on to that context
 * through its abstract unix socket "softverbs-rocev2/ADDR:PORT", with the
 * sender's address in front.  Only the same user's connections are taken
 * there (SO_PEERCRED): anyone else on the host could otherwise claim any
 * sender address.
 *
 * Between the contexts of one host that forwarding is avoided: each also
 * binds its block's port (its own socket, no SO_REUSEPORT) and says so in
 * the registry, and a context that sends to an address of this host looks
 * the destination QPN's block up there and sends to that port instead of
 * 4791, so the kernel hands the datagrams to their owner.  Everything else
 * about them is RoCEv2's (the ICRC covers the port they were sent to).
 * SOFTVERBS_ROCEV2_OWN_PORT=0 binds no such socket: peers then send to
 * 4791, as a host's other peers always do.
 *
 * Datagrams leave from one of SV_ROCEV2_TX_SOCKS sockets per process and
 * local address, bound to ephemeral ports, with path-MTU discovery on (DF:
 * the ICRC covers the IP header as sent, roce_wire.h).  The destination
 * QPN picks the socket, so the UDP source port, a QP pair's entropy for
 * ECMP, stays the same for each QP pair, as the annex asks.
 *
 * Without a secret a person chose, peers are not authenticated: a RoCE
 * peer (a NIC, rxe) has no way to, so this transport is an explicit choice,
 * and it takes datagrams only from the addresses it is told to
 * (SOFTVERBS_ROCEV2_PEERS, by default the device's own subnet).  With
 * SOFTVERBS_SECRET (or SOFTVERBS_SECRET_FILE) every datagram carries a tag
 * keyed by the secret in the ICRC's place (roce_wire.h, auth.h), and one
 * whose tag does not verify is dropped and counted: only holders of the
 * secret are heard, and RoCE NICs and rxe are not (docs/SECURITY.md).
 */
#include "common/lock_order.h"
#include "transport/transport.h"
#include "transport/auth.h"
#include "transport/roce_wire.h"
#include "transport/registry.h"
#include "wire/wire.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/udp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <linux/sock_diag.h>
#include <unistd.h>

#define SV_ROCEV2_TX_SOCKS 8
/* Receive buffers: a burst of full-MTU packets from several peers waits
 * here while the engine thread is not running.  Unprivileged processes get
 * at most net.core.rmem_max (docs/PERFORMANCE.md); SOFTVERBS_ROCEV2_RCVBUF
 * sets another size.  A receiver whose buffer is over half full marks what
 * it reads congested (engine/loop.c, congestion.c). */
#define SV_ROCEV2_RCVBUF (16 << 20)
#define SV_ROCEV2_SNDBUF (4 << 20)
#define SV_ROCEV2_FWD_MAGIC 0x53565236u /* "SVR6" */

/* In front of a datagram passed to the context that owns its QPN. */
struct sv_rocev2_fwd_hdr {
	uint32_t magic;
	uint8_t from[16];   /* the sender's address (IPv4-mapped for IPv4) */
	uint8_t to[16];	    /* the address it was sent to, which the ICRC covers */
	uint16_t from_port; /* network order */
	uint8_t tos;	    /* its IP header's traffic class: the ECN bits */
	uint8_t pad;
} __attribute__((packed));

/* IP ECN codepoints (RFC 3168): what a sender that reacts to marks sends,
 * and what a congested hop marks */
#define ECN_ECT0 0x02
#define ECN_CE 0x03
#define ECN_MASK 0x03

/* The sending sockets of one local address, shared by the process's
 * connections from it (conn->tp). */
struct sv_rocev2_tx {
	struct in6_addr ip; /* IPv4-mapped for IPv4 */
	int scope;	    /* an IPv6 link-local address's interface; else 0 */
	int refs;
	int fd[SV_ROCEV2_TX_SOCKS];
	uint16_t port[SV_ROCEV2_TX_SOCKS]; /* host order */
	atomic_bool gso; /* the kernel cuts runs of datagrams (UDP_SEGMENT) */
};

/* A connection's state (conn->tp): its local address's sending sockets,
 * and the registry of the peer's address where that is a device of this
 * host, whose contexts may take datagrams at their own ports (NULL: a
 * peer elsewhere, sent to at 4791). */
struct rocev2_conn {
	struct sv_rocev2_tx *tx;
	struct sv_qpn_file *peer_reg;
};

static struct sv_mutex tx_lock = SV_MUTEX_INITIALIZER(SV_LOCK_ROCE_TX);
static struct sv_rocev2_tx *tx_pools[16];

static void bufsize(int fd, int opt_force, int opt, int bytes)
{
	/* root (CI, a container's root) may go beyond net.core.[rw]mem_max */
	if (setsockopt(fd, SOL_SOCKET, opt_force, &bytes, sizeof(bytes)))
		(void)setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof(bytes));
}

static void tx_free(struct sv_rocev2_tx *t)
{
	for (int i = 0; i < SV_ROCEV2_TX_SOCKS; i++)
		if (t->fd[i] >= 0)
			close(t->fd[i]);
	free(t);
}

/* A socket address of either family, and its length. */
struct addr {
	union {
		struct sockaddr sa;
		struct sockaddr_in v4;
		struct sockaddr_in6 v6;
	} u;
	socklen_t len;
};

/* (ip, port): IPv4 for an IPv4-mapped ip, else IPv6, scope for a link-local one. */
static struct addr sockaddr_of(const struct in6_addr *ip, int scope, uint16_t port)
{
	struct addr a;

	memset(&a, 0, sizeof(a));
	if (sv_ip_is_v4(ip)) {
		a.u.v4.sin_family = AF_INET;
		a.u.v4.sin_addr = sv_ip_v4(ip);
		a.u.v4.sin_port = htons(port);
		a.len = sizeof(a.u.v4);
	} else {
		a.u.v6.sin6_family = AF_INET6;
		a.u.v6.sin6_addr = *ip;
		a.u.v6.sin6_port = htons(port);
		a.u.v6.sin6_scope_id = IN6_IS_ADDR_LINKLOCAL(ip) ? (uint32_t)scope : 0;
		a.len = sizeof(a.u.v6);
	}
	return a;
}

/* A port of its own for this process's contexts, unless
 * SOFTVERBS_ROCEV2_OWN_PORT=0. */
static bool own_port_wanted(void)
{
	static _Atomic int on = -1;

	return sv_env_switch(&on, "SOFTVERBS_ROCEV2_OWN_PORT", true);
}

/* Runs of datagrams, sent (UDP_SEGMENT) and taken (UDP_GRO), unless
 * SOFTVERBS_ROCEV2_GSO=0. */
static bool runs_wanted(void)
{
	static _Atomic int on = -1;

	return sv_env_switch(&on, "SOFTVERBS_ROCEV2_GSO", true);
}

static struct sv_rocev2_tx *tx_get(const struct in6_addr *ip, int scope)
{
	struct sv_rocev2_tx *t = NULL;
	bool v4 = sv_ip_is_v4(ip);
	int slot = -1;

	sv_mutex_lock(&tx_lock);
	for (int i = 0; i < (int)SV_ARRAY_SIZE(tx_pools); i++) {
		if (tx_pools[i] && sv_ip_eq(&tx_pools[i]->ip, ip) && tx_pools[i]->scope == scope) {
			t = tx_pools[i];
			t->refs++;
			goto out;
		}
		if (!tx_pools[i] && slot < 0)
			slot = i;
	}
	if (slot < 0 || !(t = calloc(1, sizeof(*t))))
		goto out;
	t->ip = *ip;
	t->scope = scope;
	t->refs = 1;
	for (int i = 0; i < SV_ROCEV2_TX_SOCKS; i++) {
		struct addr sa = sockaddr_of(ip, scope, 0);
		socklen_t sl = sa.len;
		int pmtu = v4 ? IP_PMTUDISC_DO : IPV6_PMTUDISC_DO, tos = ECN_ECT0, one = 1;

		t->fd[i] = socket(v4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (t->fd[i] < 0 ||
		    (!v4 && setsockopt(t->fd[i], IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one))) ||
		    setsockopt(t->fd[i], v4 ? IPPROTO_IP : IPPROTO_IPV6,
			       v4 ? IP_MTU_DISCOVER : IPV6_MTU_DISCOVER, &pmtu, sizeof(pmtu)) ||
		    /* ECN-capable, as a RoCE NIC with DCQCN sends: a hop
		     * that queues may mark rather than drop (congestion.c) */
		    setsockopt(t->fd[i], v4 ? IPPROTO_IP : IPPROTO_IPV6, v4 ? IP_TOS : IPV6_TCLASS,
			       &tos, sizeof(tos)) ||
		    bind(t->fd[i], &sa.u.sa, sa.len) || getsockname(t->fd[i], &sa.u.sa, &sl)) {
			for (int k = i + 1; k < SV_ROCEV2_TX_SOCKS; k++)
				t->fd[k] = -1;
			tx_free(t);
			t = NULL;
			goto out;
		}
		bufsize(t->fd[i], SO_SNDBUFFORCE, SO_SNDBUF, SV_ROCEV2_SNDBUF);
		t->port[i] = ntohs(v4 ? sa.u.v4.sin_port : sa.u.v6.sin6_port);
	}
	/* a kernel that knows the option (4.18 on) takes it in a message too;
	 * one that does not would send a run as one datagram.
	 * SOFTVERBS_ROCEV2_GSO=0: a datagram each (what a capture on lo or a
	 * veth shows is then what a NIC would put on the wire) */
	{
		int off = 0;

		atomic_init(&t->gso, runs_wanted() && !setsockopt(t->fd[0], SOL_UDP, UDP_SEGMENT,
								     &off, sizeof(off)));
	}
	tx_pools[slot] = t;
out:
	sv_mutex_unlock(&tx_lock);
	return t;
}

static void tx_put(struct sv_rocev2_tx *t)
{
	sv_mutex_lock(&tx_lock);
	if (--t->refs == 0) {
		for (int i = 0; i < (int)SV_ARRAY_SIZE(tx_pools); i++)
			if (tx_pools[i] == t)
				tx_pools[i] = NULL;
		tx_free(t);
	}
	sv_mutex_unlock(&tx_lock);
}

/* The ICRC's addresses of a datagram from src to dst (roce_wire.h: IPv4 in
 * the first 4 bytes). */
static void path_addrs(struct sv_roce_path *path, const struct in6_addr *src,
		       const struct in6_addr *dst)
{
	bool v4 = sv_ip_is_v4(src);

	path->v6 = !v4;
	memcpy(path->src, &src->s6_addr[v4 ? 12 : 0], v4 ? 4 : 16);
	memcpy(path->dst, &dst->s6_addr[v4 ? 12 : 0], v4 ? 4 : 16);
}

/*
 * The tag key this job's packets carry, and must carry, into path (auth.h,
 * roce_wire.h): 0, path->tag_key NULL for standard RoCEv2 (no secret a
 * person chose); or -1 when the job tags its packets but has no key (its
 * KDF has not run or failed): then nothing is sent or taken.
 */
static int tag_key(struct sv_roce_path *path)
{
	path->tag_key = NULL;
	if (!sv_auth_roce_keyed())
		return 0;
	path->tag_key = sv_auth_roce_key();
	return path->tag_key ? 0 : -1;
}

/* What protects this process's RoCEv2 traffic, said once, at the first
 * device's listener (SOFTVERBS_LOG=info shows it; docs/SECURITY.md). */
static void say_protection(void)
{
	if (sv_auth_roce_keyed())
		sv_info("rocev2: every packet carries a tag keyed by the job's secret (%s) in "
			"place of the ICRC; only peers holding that secret are heard, and RoCE "
			"NICs and Linux rxe are not (docs/SECURITY.md)",
			sv_auth_source());
	else
		sv_info("rocev2: standard RoCEv2, unauthenticated, as RoCE hardware: a sender "
			"at an admitted address (SOFTVERBS_ROCEV2_PEERS) that knows a QPN, a PSN "
			"in the window and an rkey is taken; SOFTVERBS_SECRET on every peer keys "
			"the packets, without rxe interoperability (docs/SECURITY.md)");
}

/* ---- a peer address ---- */

/*
 * The address datagrams to an IPv6 peer leave from, as the kernel's routing
 * would choose it (a connected socket's name), and its scope: the ICRC
 * covers it, so it is bound, not left to the kernel per datagram.
 */
static int ipv6_source(const struct in6_addr *peer, int ifindex, struct in6_addr *src, int *scope)
{
	struct addr to = sockaddr_of(peer, ifindex, SV_ROCE_UDP_PORT);
	struct sockaddr_in6 me;
	socklen_t ml = sizeof(me);
	int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0), err = 0;

	if (fd < 0)
		return -errno;
	if (connect(fd, &to.u.sa, to.len) || getsockname(fd, (struct sockaddr *)&me, &ml))
		err = -errno;
	close(fd);
	if (err)
		return err;
	*src = me.sin6_addr;
	*scope = IN6_IS_ADDR_LINKLOCAL(src) ? (int)me.sin6_scope_id : 0;
	return 0;
}

static int rocev2_connect(struct sv_conn *c)
{
	struct in6_addr src = c->local_ip;
	struct sv_rocev2_tx *t;
	struct rocev2_conn *rc;
	int scope = 0, err;

	/* datagrams: lost on the way now and then, and sent to (and from) an
	 * address, not an endpoint */
	c->lossy = true;
	c->by_address = true;
	if (sv_ip_is_v4(&c->peer.ip) && !sv_ip_is_v4(&src))
		return -EAFNOSUPPORT; /* an interface with IPv6 only reaches no IPv4 peer */
	/* the tag key, when the job tags its packets: the KDF has run at the
	 * first QP already (qp.c); one that failed leaves no peer reachable */
	if (sv_auth_roce_keyed() && sv_auth_init())
		return -EACCES;

	if (!sv_ip_is_v4(&c->peer.ip) && !IN6_IS_ADDR_LINKLOCAL(&c->peer.ip) &&
	    c->has_local_ip6) {
		/* from our IPv6 GID's address, which the peer's QP was given for
		 * us (the kernel's choice for a destination on this host would
		 * be the destination itself) */
		src = c->local_ip6;
	} else if (!sv_ip_is_v4(&c->peer.ip) &&
		   (err = ipv6_source(&c->peer.ip, c->local_ifindex, &src, &scope))) {
		sv_dbg("rocev2: no route to %s: %s", SV_IP_STR(&c->peer.ip),
		       strerror(-err));
		return err;
	}
	rc = calloc(1, sizeof(*rc));
	t = rc ? tx_get(&src, scope) : NULL;
	if (!t) {
		free(rc);
		return -ENOMEM;
	}
	rc->tx = t;
	rc->peer_reg = sv_qpn_registry_open(&c->peer.ip);
	c->tp = rc;
	c->fd = -1;
	atomic_store(&c->state, SV_CONN_UP);
	return 0;
}

/* The destination QP of a softverbs packet (wire/wire.h: BTH bytes 4..7). */
static uint32_t pkt_dqpn(const uint8_t *pkt)
{
	uint32_t v;

	memcpy(&v, pkt + 4, 4);
	return ntohl(v) & 0xffffffu;
}

/*
 * What SOFTVERBS_FAULTS asked of a frame (wire/wire.h): a bit of the
 * datagram flipped after its ICRC is computed, so that the receiver's ICRC
 * check is what drops it; or the congestion mark a queueing hop would put
 * in its IP header.  Returns the TOS to send it with.
 */
static int apply_faults(uint8_t flags, uint8_t *dg, size_t n)
{
	if (flags & SV_BTH_CORRUPT) {
		/* a bit the ICRC covers: not BTH byte 4 (FECN, BECN, masked) */
		uint32_t h = 2166136261u;
		size_t at;

		for (size_t i = 0; i < n; i++)
			h = (h ^ dg[i]) * 16777619u;
		at = h % (n - SV_ROCE_ICRC_LEN);
		dg[at == 4 ? 5 : at] ^= (uint8_t)(1u << (h >> 29));
	}
	return flags & SV_BTH_CE ? ECN_CE : ECN_ECT0;
}

/* One datagram, with a TOS (traffic class) other than the socket's if asked. */
static ssize_t send_dgram(int fd, const uint8_t *dg, size_t n, const struct addr *to, int tos)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec v = { (void *)dg, n };
	struct msghdr mh = { .msg_name = (void *)&to->u, .msg_namelen = to->len,
			     .msg_iov = &v, .msg_iovlen = 1 };
	bool v4 = to->u.sa.sa_family == AF_INET;
	struct cmsghdr *cm;

	if (tos == ECN_ECT0)
		return sendto(fd, dg, n, MSG_DONTWAIT | MSG_NOSIGNAL, &to->u.sa, to->len);
	memset(&u, 0, sizeof(u));
	mh.msg_control = u.buf;
	mh.msg_controllen = sizeof(u.buf);
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = v4 ? IPPROTO_IP : IPPROTO_IPV6;
	cm->cmsg_type = v4 ? IP_TOS : IPV6_TCLASS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &tos, sizeof(tos));
	return sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/*
 * Runs of datagrams (UDP_SEGMENT, Linux 4.18): the datagrams of a batch
 * that leave from one socket with one size (the last may be shorter) go in
 * one sendmsg(2), which the kernel cuts into datagrams as late as it can
 * (on lo and veth, at the receiving socket): one trip down the stack for up
 * to RUN_SEGS packets instead of one each.  The kernel numbers the cut
 * datagrams' IPv4 identifications up from the first's (0: an unconnected
 * socket with DF), and the ICRC covers the identification, so each is
 * encoded with its place in the run.
 */
#define RUN_SEGS 64
#define RUN_BYTES 65000 /* under a UDP datagram's 65,507 bytes */

struct run {
	uint8_t *buf;		  /* the run's datagrams, encoded, back to back */
	size_t used, seg;	  /* bytes in buf; the size of each but the last */
	int n, s;		  /* datagrams; the socket (its index in tx) */
	bool closed;		  /* a shorter one ended it */
	struct sv_roce_path path; /* the first's (identification 0) */
	struct addr to;		  /* where they go */
};

/* Why a datagram could not go, said once in a while (it is dropped, as a
 * switch drops what it cannot take; RC's retransmission recovers it). */
static void send_failed(const struct sv_conn *c, size_t n)
{
	if (errno == EMSGSIZE)
		sv_warn_limited("a %zu-byte RoCEv2 datagram to %s is over the path's "
				"MTU: dropped (the QP's path_mtu is too large for "
				"the link)",
				n, SV_IP_STR(&c->peer.ip));
	else
		sv_dbg("rocev2: sendto %s: %s", SV_IP_STR(&c->peer.ip), strerror(errno));
}

/* The run as one message cut into datagrams of r->seg bytes. */
static ssize_t send_run(int fd, const struct run *r, const struct addr *to)
{
	union {
		char buf[CMSG_SPACE(sizeof(uint16_t))];
		struct cmsghdr align;
	} u;
	struct iovec v = { r->buf, r->used };
	struct msghdr mh = { .msg_name = (void *)&to->u, .msg_namelen = to->len,
			     .msg_iov = &v, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm;
	uint16_t seg = (uint16_t)r->seg;

	memset(&u, 0, sizeof(u));
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_UDP;
	cm->cmsg_type = UDP_SEGMENT;
	cm->cmsg_len = CMSG_LEN(sizeof(seg));
	memcpy(CMSG_DATA(cm), &seg, sizeof(seg));
	return sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* Send what the run holds, and empty it. */
static void run_flush(struct sv_conn *c, struct sv_rocev2_tx *t, struct run *r)
{
	const struct addr *to = &r->to;
	int fd;

	if (!r->n)
		return;
	fd = t->fd[r->s];
	if (r->n == 1) {
		if (send_dgram(fd, r->buf, r->used, to, ECN_ECT0) < 0)
			send_failed(c, r->used);
	} else if (send_run(fd, r, to) < 0) {
		/* EINVAL: a datagram over the path's MTU (said below), or
		 * more than the kernel cuts at once; EIO, ENOPROTOOPT: a
		 * device or kernel that cannot cut them.  One by one then,
		 * each with the identification the kernel now gives it (0) */
		if ((errno == EIO || errno == ENOPROTOOPT || errno == EOPNOTSUPP) &&
		    atomic_exchange_explicit(&t->gso, false, memory_order_relaxed))
			sv_info("rocev2: the kernel does not cut runs of datagrams from %s (%s): "
				"a datagram each from now on",
				SV_IP_STR(&t->ip), strerror(errno));
		if (errno != EAGAIN && errno != ENOBUFS)
			for (size_t at = 0; at < r->used; at += r->seg) {
				size_t n = SV_MIN(r->seg, r->used - at);
				uint8_t *dg = r->buf + at;

				if (at && !r->path.v6 && !r->path.tag_key)
					sv_roce_seal(&r->path, dg, n); /* identification 0 */
				if (send_dgram(fd, dg, n, to, ECN_ECT0) < 0)
					send_failed(c, n);
			}
	}
	r->used = 0;
	r->n = 0;
	r->closed = false;
}

/* Frame k of f gathered into dg (SV_MAX_FRAME at most): its length. */
static size_t gather(const struct sv_frames *f, int k, uint8_t *dg)
{
	size_t len = 0, skip = SV_FRAME_HEAD;

	for (int i = f->first[k]; i < f->first[k + 1]; i++) {
		size_t l = f->iov[i].iov_len;

		if (skip >= l) {
			skip -= l;
			continue;
		}
		if (len + l - skip > SV_MAX_FRAME)
			break;
		memcpy(dg + len, (const uint8_t *)f->iov[i].iov_base + skip, l - skip);
		len += l - skip;
		skip = 0;
	}
	return len;
}

/*
 * Each frame one datagram, in runs where it can (above).  A datagram the
 * network cannot take (a full socket buffer, a packet over the path MTU) is
 * dropped, as a switch would drop it; RC's retransmission recovers it, UC
 * and UD lose it.
 */
static int rocev2_send(struct sv_conn *c, const struct sv_frames *f)
{
	/* on the stack: a library's thread-local storage must stay small
	 * (dlopen takes it from the static TLS block); the packet is
	 * gathered into it and encoded there, in place.  A run's room is
	 * the heap's, and only a batch's. */
	uint8_t dg[SV_MAX_FRAME + 64];
	struct rocev2_conn *rc = c->tp;
	struct sv_rocev2_tx *t = rc->tx;
	int scope = t->scope ? t->scope : c->local_ifindex;
	uint32_t to_qpn = UINT32_MAX; /* the QPN `to` was looked up for */
	uint16_t dport = SV_ROCE_UDP_PORT;
	struct addr to = sockaddr_of(&c->peer.ip, scope, dport);
	struct run r = { .buf = NULL };

	if (f->nframes > 1 && atomic_load_explicit(&t->gso, memory_order_relaxed))
		r.buf = malloc(RUN_BYTES + sizeof(dg));
	for (int k = 0; k < f->nframes; k++) {
		uint8_t *at = r.buf ? r.buf + r.used : dg;
		size_t len = gather(f, k, at), n;
		struct sv_roce_path path;
		uint32_t dqpn;
		uint8_t flags;
		int s;

		if (len < 12)
			continue;
		dqpn = pkt_dqpn(at);
		if (rc->peer_reg && dqpn != to_qpn) {
			/* a context of this host: its own port, if it has one */
			uint16_t p = sv_qpn_dgram_port(rc->peer_reg, dqpn);

			to_qpn = dqpn;
			if (!p)
				p = SV_ROCE_UDP_PORT;
			if (p != dport) {
				dport = p;
				to = sockaddr_of(&c->peer.ip, scope, dport);
			}
		}
		/* the same socket, so the same source port, for each QP pair */
		s = (int)((dqpn * 2654435761u) >> 29) % SV_ROCEV2_TX_SOCKS;
		flags = at[1]; /* fault marks: the encoding rewrites the byte */
		path = (struct sv_roce_path){ .dport = dport };
		path_addrs(&path, &t->ip, &c->peer.ip);
		path.sport = t->port[s];
		if (tag_key(&path))
			continue; /* no key: nothing a peer of this job would take */
		n = sv_roce_encoded_len(at, len);
		if (!n || n > sizeof(dg))
			continue; /* cannot go on a RoCE wire (a GPU reference) */
		if (r.buf && !(flags & (SV_BTH_CORRUPT | SV_BTH_CE))) {
			if (r.n && (s != r.s || n > r.seg || r.closed || r.n == RUN_SEGS ||
				    r.used + n > RUN_BYTES || dport != r.path.dport)) {
				/* another run: this one goes first, the frame to its start */
				run_flush(c, t, &r);
				memmove(r.buf, at, len);
				at = r.buf;
			}
			path.ip_id = path.v6 ? 0 : (uint16_t)r.n;
			sv_roce_encode(&path, at, len, at, n);
			if (!r.n) {
				r.s = s;
				r.seg = n;
				r.path = path;
				r.to = to;
			}
			r.closed = n < r.seg;
			r.used += n;
			r.n++;
			continue;
		}
		/* alone (a fault's mark, or no runs), after the run before it,
		 * encoded where it was gathered */
		run_flush(c, t, &r);
		sv_roce_encode(&path, at, len, at, n);
		if (send_dgram(t->fd[s], at, n, &to, apply_faults(flags, at, n)) < 0)
			send_failed(c, n);
	}
	if (r.buf) {
		run_flush(c, t, &r);
		free(r.buf);
	}
	return f->nframes;
}

static size_t rocev2_unsent(struct sv_conn *c)
{
	(void)c;
	return 0; /* a datagram taken is the network's */
}

static void rocev2_close(struct sv_conn *c)
{
	(void)c;
}

static void rocev2_destroy(struct sv_conn *c)
{
	struct rocev2_conn *rc = c->tp;

	if (rc) {
		tx_put(rc->tx);
		sv_qpn_registry_close(rc->peer_reg);
		free(rc);
	}
	c->tp = NULL;
}

static void rocev2_drain(struct sv_conn *c, uint64_t deadline_ns)
{
	(void)deadline_ns;
	(void)sv_conn_flush_queue(c);
}

const struct sv_transport_ops sv_rocev2_ops = {
	.name = "rocev2",
	.open = sv_conn_open_unframed,
	.connect = rocev2_connect,
	.send = rocev2_send,
	.unsent = rocev2_unsent,
	.close = rocev2_close,
	.destroy = rocev2_destroy,
	.drain = rocev2_drain,
};

/* ---- the listener on port 4791, and the forwarding socket ---- */

/*
 * A listener on port 4791, shared with every context of the host
 * (SO_REUSEPORT; or a context's own port, not shared), bound to one of the
 * device's addresses: IPv4, or an IPv6
 * one (its global or its link-local address, scope its interface), each
 * datagram saying which it was sent to (IPV6_PKTINFO), since the ICRC
 * covers it.  Addresses, not the interface (SO_BINDTODEVICE): a datagram
 * between two interfaces of one host comes in over lo.
 */
static int listen_socket(const struct in6_addr *ip, int scope, uint16_t port, bool shared)
{
	bool v4 = sv_ip_is_v4(ip);
	struct addr sa = sockaddr_of(ip, scope, port);
	int one = 1, fd = socket(v4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	bufsize(fd, SO_RCVBUFFORCE, SO_RCVBUF,
		(int)SV_MIN(SV_MAX(sv_env_long("SOFTVERBS_ROCEV2_RCVBUF", SV_ROCEV2_RCVBUF), 4096L),
			    1L << 30));
	if ((shared && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one))) ||
	    /* each datagram's TOS: its ECN bits say whether a hop marked it */
	    (v4 && setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one))) ||
	    (!v4 && (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) ||
		     /* bindable while still tentative (duplicate address
		      * detection); it hears once that has passed */
		     setsockopt(fd, IPPROTO_IP, IP_FREEBIND, &one, sizeof(one)) ||
		     setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof(one)) ||
		     setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof(one)) ||
		     /* rxe sends IPv6 UDP checksum 0 (its ICRC covers the
		      * datagram), which IPv6 otherwise refuses (RFC 6936) */
		     setsockopt(fd, IPPROTO_UDP, UDP_NO_CHECK6_RX, &one, sizeof(one)))) ||
	    bind(fd, &sa.u.sa, sa.len)) {
		int e = -errno;

		close(fd);
		return e;
	}
	/* runs of datagrams taken whole (Linux 5.0 on): a sender's run
	 * (UDP_SEGMENT) reaches us uncut, and datagrams of one flow that
	 * arrive together are joined, each cut out again here (rocev2_recv) */
	if (runs_wanted())
		(void)setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof(one));
	return fd;
}

/*
 * Port 4791 bound already by a socket without SO_REUSEPORT, or by another
 * user's (the kernel groups one user's sockets only): what peers send
 * would reach that program, not us, so the device is not opened
 * (-EADDRINUSE, *host_held), and the log says so.
 */
static int port_held(int fd, const struct in6_addr *ip)
{
	if (fd == -EADDRINUSE)
		sv_err("cannot open the device of %s: UDP port %u there, where RoCEv2 peers "
		       "send, is held by another program (another user's, or not softverbs; "
		       "`ss -lunp 'sport = :%u'` names it). RoCEv2 peers send to that port "
		       "only: stop that program",
		       SV_IP_STR(ip), SV_ROCE_UDP_PORT, SV_ROCE_UDP_PORT);
	return fd;
}

static int rocev2_listen(const struct in6_addr *ip)
{
	static pthread_once_t said = PTHREAD_ONCE_INIT;

	/* every context of the address shares 4791 */
	pthread_once(&said, say_protection);
	if (!sv_ip_is_v4(ip))
		return -ENOENT; /* an interface with IPv6 only: rocev2_listen6 hears it */
	return port_held(listen_socket(ip, 0, SV_ROCE_UDP_PORT, true), ip);
}

/* The name of the interface in ifs that has IPv4 address ip, or NULL. */
static const char *ifname_of(const struct ifaddrs *ifs, const struct in6_addr *ip)
{
	struct in_addr v4 = sv_ip_v4(ip);

	for (const struct ifaddrs *i = ifs; i; i = i->ifa_next) {
		if (!i->ifa_addr)
			continue;
		if (sv_ip_is_v4(ip) && i->ifa_addr->sa_family == AF_INET &&
		    ((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == v4.s_addr)
			return i->ifa_name;
		if (!sv_ip_is_v4(ip) && i->ifa_addr->sa_family == AF_INET6 &&
		    sv_ip_eq(&((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, ip))
			return i->ifa_name;
	}
	return NULL;
}

/* The device's interface's global or link-local IPv6 address, if it has one. */
static int listen6(const struct in6_addr *ip, bool link_local)
{
	struct in6_addr a;
	uint32_t scope;

	if (!sv_endpoint_ip6(ip, link_local, &a, &scope))
		return -ENOENT; /* no such IPv6 address: nothing to hear */
	return port_held(listen_socket(&a, (int)scope, SV_ROCE_UDP_PORT, true), &a);
}

/*
 * Forwarding between the contexts of this host: a SOCK_SEQPACKET
 * connection from each context that passes datagrams on to each context it
 * passes them to.  Connected, because a unix datagram socket takes at most
 * net.unix.max_dgram_qlen (10) waiting datagrams from senders it is not
 * connected to, and one burst of a QP's window is more.  The listener the
 * engine polls is an epoll set of the listening socket and the
 * connections it accepted (struct fwd_rx), so that they stay this file's.
 */
struct fwd_rx {
	int ep;	   /* what the engine polls */
	int lsock; /* the abstract socket "softverbs-rocev2/ADDR:PORT" */
	struct in6_addr ip;
	uint16_t port;
	int *conns, nconns, cap;
	struct fwd_rx *next;
};

/* A connection this process passes datagrams on over. */
struct fwd_tx {
	struct in6_addr ip;
	uint16_t port;
	int fd;
	struct fwd_tx *next;
};

static struct sv_mutex fwd_lock = SV_MUTEX_INITIALIZER(SV_LOCK_ROCE_FWD);
static struct fwd_rx *fwd_rxs;
static struct fwd_tx *fwd_txs;

static int rocev2_fwd_listen(const struct in6_addr *ip, uint16_t port)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct fwd_rx *r = calloc(1, sizeof(*r));
	struct sockaddr_un sa;
	socklen_t sl;
	int e;

	if (!r)
		return -ENOMEM;
	r->ep = epoll_create1(EPOLL_CLOEXEC);
	r->lsock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	sv_endpoint_unix_name(&sa, &sl, "rocev2", ip, port);
	ev.data.fd = r->lsock;
	if (r->ep < 0 || r->lsock < 0 || bind(r->lsock, (struct sockaddr *)&sa, sl) ||
	    listen(r->lsock, 64) || epoll_ctl(r->ep, EPOLL_CTL_ADD, r->lsock, &ev)) {
		e = -errno;
		if (r->ep >= 0)
			close(r->ep);
		if (r->lsock >= 0)
			close(r->lsock);
		free(r);
		return e;
	}
	r->ip = *ip;
	r->port = port;
	sv_mutex_lock(&fwd_lock);
	r->next = fwd_rxs;
	fwd_rxs = r;
	sv_mutex_unlock(&fwd_lock);
	return r->ep;
}

/* fwd_lock held */
static struct fwd_rx *fwd_rx_of(int ep)
{
	for (struct fwd_rx *r = fwd_rxs; r; r = r->next)
		if (r->ep == ep)
			return r;
	return NULL;
}

/* fwd_lock held */
static void fwd_rx_drop(struct fwd_rx *r, int k)
{
	epoll_ctl(r->ep, EPOLL_CTL_DEL, r->conns[k], NULL);
	close(r->conns[k]);
	r->conns[k] = r->conns[--r->nconns];
}

/*
 * A context of this process closes: so do this process's connections to
 * it, and once no context of the process is left, all the others (only a
 * context's listener passes datagrams on).  A connection to a context of
 * another process that ended stays until a datagram finds it closed
 * (forward).
 */
static void rocev2_fwd_unlisten(int ep)
{
	struct fwd_rx *r = NULL;

	sv_mutex_lock(&fwd_lock);
	for (struct fwd_rx **pp = &fwd_rxs; *pp; pp = &(*pp)->next)
		if ((*pp)->ep == ep) {
			r = *pp;
			*pp = r->next;
			break;
		}
	while (r && r->nconns)
		fwd_rx_drop(r, 0);
	for (struct fwd_tx **pp = &fwd_txs, *t; r && (t = *pp);) {
		if (!fwd_rxs || (sv_ip_eq(&t->ip, &r->ip) && t->port == r->port)) {
			*pp = t->next;
			close(t->fd);
			free(t);
		} else {
			pp = &t->next;
		}
	}
	sv_mutex_unlock(&fwd_lock);
	if (r) {
		close(r->lsock);
		free(r->conns);
		free(r);
	}
	close(ep);
}

/* A new connection from a context that passes datagrams on: the same
 * user's only (fwd_lock held). */
static void fwd_accept(struct fwd_rx *r)
{
	struct ucred u;
	socklen_t ul = sizeof(u);
	int fd = accept4(r->lsock, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };

	if (fd < 0)
		return;
	if (r->nconns == r->cap) {
		int cap = r->cap ? r->cap * 2 : 8;
		int *c = realloc(r->conns, (size_t)cap * sizeof(*c));

		if (!c) {
			close(fd);
			return;
		}
		r->conns = c;
		r->cap = cap;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &u, &ul) || u.uid != getuid() ||
	    epoll_ctl(r->ep, EPOLL_CTL_ADD, fd, &ev)) {
		close(fd);
		return;
	}
	r->conns[r->nconns++] = fd;
}

/*
 * Which senders a context takes datagrams from (docs/SECURITY.md): a RoCE
 * peer cannot prove anything, so the range is the user's to open.
 * SOFTVERBS_ROCEV2_PEERS is a comma-separated list of IPv4 and IPv6 ranges
 * (a.b.c.d/len, x:y::z/len, or an address); unset, the subnets of the
 * device's interface are admitted (each of its IPv4 and IPv6 addresses with
 * its prefix, link-local included): the peers of its link.  A range is kept
 * as an IPv6 prefix, IPv4 ones IPv4-mapped (::ffff:a.b.c.d/96+len).
 */
struct range {
	struct in6_addr net;
	int len; /* prefix length, 0..128 */
};

#define ADMIT_MAX 32
static struct sv_mutex admit_lock = SV_MUTEX_INITIALIZER(SV_LOCK_ROCE_ADMIT);
static bool admit_parsed;
static struct range admit_env[ADMIT_MAX];
static int admit_nenv = -1; /* -1: unset */
/* the default: per device address, its interface's subnets */
static struct {
	struct in6_addr ip;
	struct range r[8];
	int n;
} admit_dev[16];
static int admit_ndev;

/* first plus the number of one bits of netmask m from bit first on. */
static int mask_len(const struct in6_addr *m, int first)
{
	int b = first;

	while (b < 128 && (m->s6_addr[b / 8] & (0x80 >> (b % 8))))
		b++;
	return b;
}

static bool in_range(const struct in6_addr *a, const struct range *r)
{
	int full = r->len / 8, rest = r->len % 8;

	if (memcmp(a->s6_addr, r->net.s6_addr, (size_t)full))
		return false;
	return !rest || !((a->s6_addr[full] ^ r->net.s6_addr[full]) & (0xff00 >> rest));
}

/* ip/len as a range (its host bits cleared). */
static struct range range_of(const struct in6_addr *ip, int len)
{
	struct range r = { *ip, len };

	for (int b = len; b < 128; b++)
		r.net.s6_addr[b / 8] &= (uint8_t) ~(0x80 >> (b % 8));
	return r;
}

static bool parse_range(char *t, struct range *r)
{
	char *slash = strchr(t, '/');
	struct in_addr a4;
	struct in6_addr a6;
	long len = -1;
	char *end = NULL;

	if (slash) {
		*slash = 0;
		len = strtol(slash + 1, &end, 10);
		if (!*(slash + 1) || *end)
			return false;
	}
	if (inet_pton(AF_INET, t, &a4) == 1) {
		if (len > 32 || (slash && len < 0))
			return false;
		a6 = sv_ip_from_v4(a4);
		*r = range_of(&a6, 96 + (int)(slash ? len : 32));
		return true;
	}
	if (inet_pton(AF_INET6, t, &a6) == 1) {
		if (len > 128 || (slash && len < 0))
			return false;
		*r = range_of(&a6, (int)(slash ? len : 128));
		return true;
	}
	return false;
}

static void admit_parse(void)
{
	const char *v = getenv("SOFTVERBS_ROCEV2_PEERS");
	char buf[2048], *save = NULL;

	admit_parsed = true;
	if (!v)
		return;
	admit_nenv = 0;
	snprintf(buf, sizeof(buf), "%s", v);
	for (char *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
		char shown[128];

		snprintf(shown, sizeof(shown), "%s", t);
		if (admit_nenv == ADMIT_MAX || !parse_range(t, &admit_env[admit_nenv])) {
			sv_warn("SOFTVERBS_ROCEV2_PEERS: '%s' is not an IPv4 or IPv6 range; ignored",
				shown);
			continue;
		}
		admit_nenv++;
	}
}

/* admit_lock held: the subnets of the interface that has address ip. */
static int subnets_of(const struct in6_addr *ip, const struct range **out)
{
	struct ifaddrs *ifs;
	int k;

	for (k = 0; k < admit_ndev; k++)
		if (sv_ip_eq(&admit_dev[k].ip, ip))
			goto found;
	if (admit_ndev == (int)SV_ARRAY_SIZE(admit_dev))
		k = 0; /* full: the first slot is recomputed */
	else
		k = admit_ndev++;
	admit_dev[k].ip = *ip;
	admit_dev[k].n = 0;
	admit_dev[k].r[admit_dev[k].n++] = range_of(ip, 128); /* at least itself */
	if (!getifaddrs(&ifs)) {
		const char *name = ifname_of(ifs, ip);

		for (struct ifaddrs *i = ifs; i && name; i = i->ifa_next) {
			struct in6_addr a, m;
			int len;

			if (!i->ifa_addr || !i->ifa_netmask || strcmp(i->ifa_name, name) ||
			    admit_dev[k].n == (int)SV_ARRAY_SIZE(admit_dev[k].r))
				continue;
			if (i->ifa_addr->sa_family == AF_INET) {
				a = sv_ip_from_v4(((struct sockaddr_in *)i->ifa_addr)->sin_addr);
				m = sv_ip_from_v4(((struct sockaddr_in *)i->ifa_netmask)->sin_addr);
				len = mask_len(&m, 96);
			} else if (i->ifa_addr->sa_family == AF_INET6) {
				a = ((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
				m = ((struct sockaddr_in6 *)i->ifa_netmask)->sin6_addr;
				len = mask_len(&m, 0);
			} else {
				continue;
			}
			admit_dev[k].r[admit_dev[k].n++] = range_of(&a, len);
		}
		freeifaddrs(ifs);
	}
found:
	*out = admit_dev[k].r;
	return admit_dev[k].n;
}

static bool admitted(const struct in6_addr *local, const struct in6_addr *from)
{
	bool ok = false;

	sv_mutex_lock(&admit_lock);
	if (!admit_parsed)
		admit_parse();
	if (admit_nenv < 0) {
		const struct range *r;
		int n = subnets_of(local, &r);

		for (int k = 0; k < n && !ok; k++)
			ok = in_range(from, &r[k]);
	}
	for (int k = 0; k < admit_nenv && !ok; k++)
		ok = in_range(from, &admit_env[k]);
	sv_mutex_unlock(&admit_lock);
	return ok;
}

/* A packet a listener received (a listener's recv). */
struct sv_dgram {
	/* set by the caller */
	struct in6_addr local_ip; /* the endpoint's address ... */
	uint16_t local_port;	 /* ... and port (its block's, registry.h) */
	uint16_t dport;		 /* the UDP port the listener takes (4791, or local_port) */
	uint8_t *buf;		 /* where the packet goes */
	size_t cap;
	uint8_t *raw;		 /* room for the datagram as it arrived */
	size_t raw_cap;
	/* the listener's place for what its recv keeps between calls (datagrams
	 * read ahead, struct rx_batch), freed when the listener closes; NULL:
	 * recv keeps nothing */
	void **rx_state;
	/* set by recv */
	bool more;	      /* recv read ahead: the next call returns one without a system call */
	struct in6_addr from; /* the sender's address */
	struct in6_addr to;   /* the address it was sent to (ours) */
	size_t len;	     /* the packet's length in buf */
	bool ecn;	     /* it arrived marked (IP ECN CE or FECN): congestion on the way */
	uint8_t refused;     /* recv returned -1: why, to count (SV_DGRAM_BAD_*), or 0 */
};

/*
 * A datagram whose ICRC (r SV_ROCE_BAD_ICRC) or, in a job that tags its
 * packets, whose tag (SV_ROCE_BAD_TAG) does not verify: counted, and said
 * (rate limited).  When the line is written, a bad tag is looked at again
 * as standard RoCEv2: a valid ICRC there means a sender without the secret
 * (rxe, softverbs without SOFTVERBS_SECRET).
 */
static void refused_check(struct sv_dgram *d, const struct sv_roce_path *path, const uint8_t *raw,
			  size_t n, uint16_t sport, int r)
{
	static struct sv_log_limit lim;
	uint32_t held;
	const char *why;

	d->refused = r == SV_ROCE_BAD_TAG ? SV_DGRAM_BAD_TAG : SV_DGRAM_BAD_ICRC;
	if (!sv_log_enabled(SV_LOG_WARN) || !sv_log_limit_pass(&lim, &held))
		return;
	if (r == SV_ROCE_BAD_TAG) {
		struct sv_roce_path plain = *path;

		/* decoded as standard RoCEv2 into d->buf, which holds nothing now */
		plain.tag_key = NULL;
		why = sv_roce_decode(&plain, raw, n, d->buf, d->cap, NULL) >= 0
			      ? "it carries a valid plain ICRC, so its sender does not use "
				"SOFTVERBS_SECRET (Linux rxe, a RoCE NIC, softverbs without the secret)"
			      : "its sender has another secret, or it was changed on the way, or "
				"forged";
	} else {
		why = "it was changed on the way, or forged, or its sender tags its packets with "
		      "a SOFTVERBS_SECRET this process does not have";
	}
	if (held)
		sv_warn("(%u more like the next held back)", held);
	sv_warn("a RoCEv2 datagram from %s:%u was refused (%s) and dropped: %s",
		SV_IP_STR(&d->from), sport, r == SV_ROCE_BAD_TAG ? "the secret's tag" : "ICRC", why);
}

/* A datagram from d->from to d->to, UDP source port sport, whose IP header
 * had TOS (traffic class) tos: admitted (unless the caller has seen to
 * that), checked and decoded into d (1), or refused (-1). */
static int decode(struct sv_dgram *d, const uint8_t *raw, size_t n, uint16_t sport, uint8_t tos,
		  bool admit_checked)
{
	struct sv_roce_path path = { .sport = sport, .dport = d->dport };
	int r;

	if (!admit_checked && !admitted(&d->local_ip, &d->from)) {
		sv_warn_limited("a RoCEv2 datagram from %s, which SOFTVERBS_ROCEV2_PEERS does not "
				"admit; dropped",
				SV_IP_STR(&d->from));
		return -1;
	}
	if (sv_ip_is_v4(&d->from) != sv_ip_is_v4(&d->to))
		return -1;
	path_addrs(&path, &d->from, &d->to);
	r = tag_key(&path) ? SV_ROCE_BAD_TAG
			   : sv_roce_decode(&path, raw, n, d->buf, d->cap, &d->ecn);
	if (r == SV_ROCE_BAD_TAG || r == SV_ROCE_BAD_ICRC) {
		refused_check(d, &path, raw, n, sport, r);
		return -1;
	}
	if (r < 0) {
		sv_warn_limited("a RoCEv2 datagram from %s:%u was refused (%s); dropped",
				SV_IP_STR(&d->from), sport,
				r == SV_ROCE_BAD_OPCODE ? "opcode" : "format");
		return -1;
	}
	d->len = (size_t)r;
	/* marked on the way (IP ECN CE, or IB's FECN): its responder sends a CNP */
	d->ecn = d->ecn || (tos & ECN_MASK) == ECN_CE;
	if (d->ecn)
		d->buf[1] |= SV_BTH_CE;
	return 1;
}

/* A connection to the forwarding listener of the context at (ip, port), on
 * fwd_txs, or NULL: no context holds that port now (fwd_lock held). */
static struct fwd_tx *fwd_connect(const struct in6_addr *ip, uint16_t port)
{
	struct fwd_tx *t = calloc(1, sizeof(*t));
	struct sockaddr_un sa;
	socklen_t sl;

	if (!t)
		return NULL;
	t->ip = *ip;
	t->port = port;
	sv_endpoint_unix_name(&sa, &sl, "rocev2", ip, port);
	/* blocking only for connect, which for a unix socket does not wait
	 * for the peer to accept */
	t->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	/* a name another user took gets nothing (the sender's address and
	 * the datagram are ours to give to this user's contexts only) */
	if (t->fd < 0 || connect(t->fd, (struct sockaddr *)&sa, sl) ||
	    !sv_endpoint_unix_ours(t->fd)) {
		if (t->fd >= 0)
			close(t->fd);
		free(t);
		return NULL;
	}
	bufsize(t->fd, SO_SNDBUFFORCE, SO_SNDBUF, SV_ROCEV2_SNDBUF);
	t->next = fwd_txs;
	fwd_txs = t;
	return t;
}

/*
 * A datagram for another context of this host: to it, over this process's
 * connection to it.  Nobody there (the context is gone), or no room: the
 * datagram is dropped, as a NIC drops a packet for an unknown QP or one it
 * has no buffer for.
 *
 * A connection that fails otherwise led to a context that has ended since.
 * Another may hold its port by now: a context opened after it claims the
 * lowest free block of QP numbers, its block (any program that closes a
 * device and opens it again).  The datagram may well be for that one, so
 * it goes again over a new connection to whoever listens there now; only
 * when nobody does is it dropped.
 */
static void forward(const struct sv_dgram *d, uint16_t from_port, const uint8_t *raw, size_t n,
		    uint16_t to_port, uint8_t tos)
{
	struct sv_rocev2_fwd_hdr h = { .magic = htonl(SV_ROCEV2_FWD_MAGIC),
				       .from_port = htons(from_port),
				       .tos = tos };
	struct iovec v[2] = { { &h, sizeof(h) }, { (void *)raw, n } };
	struct msghdr mh = { .msg_iov = v, .msg_iovlen = 2 };
	struct fwd_tx *t, **pp;
	bool fresh = false;

	memcpy(h.from, &d->from, 16);
	memcpy(h.to, &d->to, 16);
	sv_mutex_lock(&fwd_lock);
	for (;;) {
		for (pp = &fwd_txs; (t = *pp); pp = &t->next)
			if (sv_ip_eq(&t->ip, &d->local_ip) && t->port == to_port)
				break;
		if (!t) {
			t = fwd_connect(&d->local_ip, to_port);
			fresh = true;
			pp = &fwd_txs; /* fwd_connect put it first */
		}
		if (!t) {
			sv_dbg("rocev2: no context of port %u here; a datagram for it dropped",
			       to_port);
			break;
		}
		if (sendmsg(t->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0)
			break;
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) {
			sv_warn_limited("rocev2: the context of port %u takes no more now; "
					"a datagram for it dropped",
					to_port);
			break;
		}
		/* the context it led to ended: forget it, and send again to
		 * whoever holds the port now (a new connection failing too
		 * means its context ended as well: dropped) */
		*pp = t->next;
		close(t->fd);
		free(t);
		if (fresh) {
			sv_dbg("rocev2: the context of port %u ended; a datagram for it dropped",
			       to_port);
			break;
		}
	}
	sv_mutex_unlock(&fwd_lock);
}

/*
 * What one recvmmsg(2) took from a listener, handed out one datagram a
 * recv (the listener's rx_state, kept by the engine): a flood costs a
 * system call per RX_BATCH datagrams, not one each.  A slot holds a whole
 * UDP datagram, which with UDP_GRO may be a run of datagrams of gso_size
 * bytes each (the last maybe shorter), cut apart here.  After a batch with
 * a run in it the next asks for RX_BATCH_RUNS slots only, so that what is
 * read ahead of a pass (rx_ready hands all of it out) stays near RX_PASS.
 */
#define RX_BATCH 16
#define RX_BATCH_RUNS 2
#define RX_SLOT 65536 /* above a UDP datagram's 65,507 bytes */
#define RX_CTRL                                                                             \
	(CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(struct in6_pktinfo)) +                  \
	 CMSG_SPACE(sizeof(int)))

union rx_from {
	struct sockaddr sa;
	struct sockaddr_in v4;
	struct sockaddr_in6 v6;
};

struct rx_batch {
	int n, next;   /* slots filled, the one being handed out */
	size_t off;    /* where in it the next datagram starts */
	size_t seg[RX_BATCH]; /* a slot's run: its datagrams' size; 0: one datagram */
	bool runs;     /* the last batch had a run: ask for fewer slots */
	struct mmsghdr mm[RX_BATCH];
	struct iovec iov[RX_BATCH];
	union rx_from from[RX_BATCH];
	union {
		char buf[RX_CTRL];
		struct cmsghdr align;
	} ctl[RX_BATCH];
	uint8_t raw[RX_BATCH][RX_SLOT];
};

/* The size of the datagrams of the run that slot mh holds; 0 for one. */
static size_t run_seg(const struct msghdr *mh)
{
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR((struct msghdr *)mh, cm))
		if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO) {
			uint16_t v16;
			int v;

			if (cm->cmsg_len >= CMSG_LEN(sizeof(int))) {
				memcpy(&v, CMSG_DATA(cm), sizeof(v));
				return v > 0 ? (size_t)v : 0;
			}
			if (cm->cmsg_len >= CMSG_LEN(sizeof(v16))) {
				memcpy(&v16, CMSG_DATA(cm), sizeof(v16));
				return v16;
			}
		}
	return 0;
}

/*
 * Datagram raw (n bytes, which arrived as mh says) from listener of d: into
 * d (1), or passed to the context that owns its QPN, or dropped (-1).  The
 * cheap checks come first, so that a flood of garbage costs what it must
 * and no more: the sender's address (admitted), the BTH (version, opcode,
 * length), then whose QPN it is; only a datagram that passed all that is
 * passed on to another context (one system call), or has its ICRC computed
 * here.  A datagram for a block of QPNs that no context of the host holds
 * is dropped on a look at the registry, where it used to cost a new unix
 * socket and a connect each.
 */
static int rx_one(struct sv_dgram *d, const struct msghdr *mh, const uint8_t *raw, size_t n)
{
	const union rx_from *from = mh->msg_name;
	bool to_known = false;
	uint16_t sport, owner;
	uint8_t tos = 0;
	uint32_t dqpn;
	int r;

	if (n < 12 + SV_ROCE_ICRC_LEN || (mh->msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
		return -1;
	if (mh->msg_namelen == sizeof(from->v4) && from->sa.sa_family == AF_INET) {
		d->from = sv_ip_from_v4(from->v4.sin_addr);
		d->to = d->local_ip; /* what the listener is bound to */
		sport = ntohs(from->v4.sin_port);
		to_known = true;
	} else if (mh->msg_namelen == sizeof(from->v6) && from->sa.sa_family == AF_INET6 &&
		   !IN6_IS_ADDR_V4MAPPED(&from->v6.sin6_addr)) {
		d->from = from->v6.sin6_addr;
		sport = ntohs(from->v6.sin6_port);
	} else {
		return -1;
	}
	if (!admitted(&d->local_ip, &d->from)) {
		sv_warn_limited("a RoCEv2 datagram from %s, which SOFTVERBS_ROCEV2_PEERS does not "
				"admit; dropped",
				SV_IP_STR(&d->from));
		return -1;
	}
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR((struct msghdr *)mh, cm)) {
		if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_TOS &&
		    cm->cmsg_len >= CMSG_LEN(1))
			tos = *(const uint8_t *)CMSG_DATA(cm);
		if (cm->cmsg_level == IPPROTO_IPV6 && cm->cmsg_type == IPV6_TCLASS &&
		    cm->cmsg_len >= CMSG_LEN(sizeof(int))) {
			int tc;

			memcpy(&tc, CMSG_DATA(cm), sizeof(tc));
			tos = (uint8_t)tc;
		}
		if (cm->cmsg_level == IPPROTO_IPV6 && cm->cmsg_type == IPV6_PKTINFO &&
		    cm->cmsg_len >= CMSG_LEN(sizeof(struct in6_pktinfo))) {
			struct in6_pktinfo pi;

			memcpy(&pi, CMSG_DATA(cm), sizeof(pi));
			d->to = pi.ipi6_addr;
			to_known = !IN6_IS_ADDR_V4MAPPED(&pi.ipi6_addr);
		}
	}
	if (!to_known)
		return -1;
	if ((r = sv_roce_check(raw, n)) < 0) {
		sv_warn_limited("a RoCEv2 datagram from %s:%u was refused (%s); dropped",
				SV_IP_STR(&d->from), sport,
				r == SV_ROCE_BAD_OPCODE ? "opcode" : "format");
		return -1;
	}
	dqpn = pkt_dqpn(raw);
	owner = sv_qpn_port(dqpn);
	/* QPNs of block 0 (the special QPs) and the multicast QPN have no
	 * owner: they stay here and meet no QP */
	if (owner && owner != d->local_port && dqpn != 0xffffffu) {
		/* (what was sent to this context's own port is not passed on:
		 * the one it names would check it for 4791) */
		if (d->dport == SV_ROCE_UDP_PORT && sv_qpn_claimed(&d->local_ip, dqpn))
			forward(d, sport, raw, n, owner, tos);
		return -1;
	}
	return decode(d, raw, n, sport, tos, true);
}

/* One datagram from listener lfd (IPv4 or IPv6), into d or to its owner. */
static int rocev2_recv(int lfd, struct sv_dgram *d)
{
	struct rx_batch *b = d->rx_state ? *d->rx_state : NULL;
	const uint8_t *at;
	size_t len;
	int r;

	if (!b && d->rx_state && (b = malloc(sizeof(*b)))) {
		*d->rx_state = b;
		b->n = b->next = 0;
		b->runs = true; /* a burst's first batch reads little ahead too */
	}
	if (!b) {
		/* no room kept: one datagram, into d's.  A run taken whole
		 * (UDP_GRO) does not fit there, and dropped it would come
		 * back whole with every resend: once one is read, the kernel
		 * joins no more */
		static const int off = 0;
		union rx_from from;
		union {
			char buf[RX_CTRL];
			struct cmsghdr align;
		} u;
		struct iovec v = { d->raw, d->raw_cap };
		struct msghdr mh = { .msg_name = &from, .msg_namelen = sizeof(from), .msg_iov = &v,
				     .msg_iovlen = 1, .msg_control = u.buf,
				     .msg_controllen = sizeof(u.buf) };
		ssize_t n;

		n = recvmsg(lfd, &mh, MSG_DONTWAIT);
		d->more = false;
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
		if ((mh.msg_flags & MSG_TRUNC) || run_seg(&mh))
			(void)setsockopt(lfd, SOL_UDP, UDP_GRO, &off, sizeof(off));
		return rx_one(d, &mh, d->raw, (size_t)n);
	}
	if (b->next == b->n) {
		int n;

		for (int i = 0; i < RX_BATCH; i++) {
			b->iov[i] = (struct iovec){ b->raw[i], sizeof(b->raw[i]) };
			b->mm[i].msg_hdr = (struct msghdr){ .msg_name = &b->from[i],
							    .msg_namelen = sizeof(b->from[i]),
							    .msg_iov = &b->iov[i],
							    .msg_iovlen = 1,
							    .msg_control = b->ctl[i].buf,
							    .msg_controllen = sizeof(b->ctl[i].buf) };
		}
		b->next = b->n = 0;
		b->off = 0;
		n = recvmmsg(lfd, b->mm, b->runs ? RX_BATCH_RUNS : RX_BATCH, MSG_DONTWAIT, NULL);
		if (n <= 0) {
			d->more = false;
			return n == 0 || errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
		}
		b->n = n;
		b->runs = false;
		for (int i = 0; i < n; i++) {
			b->seg[i] = run_seg(&b->mm[i].msg_hdr);
			if (b->seg[i] >= b->mm[i].msg_len)
				b->seg[i] = 0; /* a run of one */
			b->runs |= b->seg[i] != 0;
		}
	}
	/* the slot's next datagram: the whole slot, or the run's next one */
	r = b->next;
	len = b->mm[r].msg_len - b->off;
	if (b->seg[r] && len > b->seg[r])
		len = b->seg[r];
	at = b->raw[r] + b->off;
	b->off += len;
	if (b->off >= b->mm[r].msg_len) {
		b->next++;
		b->off = 0;
	}
	d->more = b->next < b->n;
	return rx_one(d, &b->mm[r].msg_hdr, at, len);
}

static int rocev2_fwd_recv(int ep, struct sv_dgram *d)
{
	struct epoll_event ev;
	struct sv_rocev2_fwd_hdr h;
	struct fwd_rx *r;
	uint8_t *rx_raw = d->raw;
	ssize_t n;
	int k;

	if (epoll_wait(ep, &ev, 1, 0) != 1)
		return 0;
	sv_mutex_lock(&fwd_lock);
	r = fwd_rx_of(ep);
	if (!r || ev.data.fd == r->lsock) {
		if (r)
			fwd_accept(r);
		sv_mutex_unlock(&fwd_lock);
		return -1;
	}
	for (k = 0; k < r->nconns && r->conns[k] != ev.data.fd; k++)
		;
	n = k < r->nconns ? recv(ev.data.fd, rx_raw, d->raw_cap, MSG_DONTWAIT) : -1;
	if (k < r->nconns && (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)))
		fwd_rx_drop(r, k); /* the passing context ended */
	sv_mutex_unlock(&fwd_lock);
	if (n < (ssize_t)(sizeof(h) + 12 + SV_ROCE_ICRC_LEN))
		return -1;
	memcpy(&h, rx_raw, sizeof(h));
	if (ntohl(h.magic) != SV_ROCEV2_FWD_MAGIC)
		return -1;
	memcpy(&d->from, h.from, 16);
	memcpy(&d->to, h.to, 16);
	/* (admitted by the context that passed it on, by the same list or
	 * subnets: once more costs little) */
	return decode(d, rx_raw + sizeof(h), (size_t)n - sizeof(h), ntohs(h.from_port), h.tos,
		      false);
}

/* What the kernel holds of lfd's datagrams against its buffer (SO_MEMINFO). */
static bool rocev2_backlogged(int lfd)
{
	uint32_t mi[SK_MEMINFO_VARS];
	socklen_t l = sizeof(mi);

	if (getsockopt(lfd, SOL_SOCKET, SO_MEMINFO, mi, &l) || l < sizeof(mi))
		return false;
	return mi[SK_MEMINFO_RMEM_ALLOC] > mi[SK_MEMINFO_RCVBUF] / 2;
}

/*
 * A listener as an interface: watched in the owner's loop, each datagram
 * it receives goes up on the connection of the address it came from (made
 * at its first packet), as if it had arrived there.  At most RX_PASS a
 * call, and what recv read ahead of them (less than a batch of its own):
 * epoll reports the rest again, and the owner goes on to its timers and
 * sends in between, so that a flood of datagrams, whatever they are, never
 * keeps a QP's ACKs and retransmissions waiting for more than one pass.  A
 * datagram refused costs its share of the receive system call and its
 * checks, never a connection, a lookup or a log line of its own.
 */
#define RX_PASS 64
/*
 * A receiver that finds this many datagrams waiting at once asks whether
 * it has fallen behind its senders (its socket over half full): if so it
 * marks what it reads from then on as congested, as a switch marks at a
 * queue threshold, so that their requesters get CNPs and shrink their
 * windows before the socket overflows and drops (engine/congestion.c).
 */
#define RX_BEHIND 32

struct rx_iface {
	struct sv_iface_at at;
	int fd;
	/* one datagram into d, 1; 0 when none waits; -1 for one dropped
	 * (refused, or passed to the context it is for) */
	int (*recv)(int fd, struct sv_dgram *d);
	bool (*backlogged)(int fd);  /* is it falling behind?  NULL: not asked */
	void (*unlisten)(int fd);    /* closes fd */
	bool shared;                 /* its port is every context's (SO_REUSEPORT) */
	uint16_t dport;              /* the UDP port it takes datagrams at */
	void *rx_state;              /* what recv keeps (sv_dgram.rx_state) */
	/* the packet, and the datagram it came in, while it is taken in (the
	 * owner's progress lock held) */
	uint8_t buf[SV_MAX_FRAME + SV_DGRAM_RAW_MAX];
};

static struct sv_dgram rx_slot(struct rx_iface *ri)
{
	return (struct sv_dgram){ .local_ip = ri->at.ip, .local_port = ri->at.port, .dport = ri->dport,
				  .buf = ri->buf, .cap = SV_MAX_FRAME,
				  .raw = ri->buf + SV_MAX_FRAME, .raw_cap = SV_DGRAM_RAW_MAX,
				  .rx_state = &ri->rx_state };
}

static void rx_ready(void *arg)
{
	struct rx_iface *ri = arg;
	const struct sv_iface_host *h = ri->at.host;
	bool behind = false;

	for (int i = 0;; i++) {
		struct sv_dgram d = rx_slot(ri);
		struct sv_conn *c;
		int r = ri->recv(ri->fd, &d);

		if (r == 0)
			return;
		if (r < 0) {
			if (d.refused)
				h->refused(ri->at.eng, d.refused);
		} else if ((c = h->conn_from(ri->at.eng, &d.from))) {
			if (i == RX_BEHIND && ri->backlogged)
				behind = ri->backlogged(ri->fd);
			if (behind && d.len > 1)
				ri->buf[1] |= SV_BTH_CE;
			if (atomic_load(&c->state) == SV_CONN_UP)
				c->host->rx_frame(c, ri->buf, d.len);
			sv_conn_put(c);
		}
		/* what recv read ahead is not left behind: epoll says nothing of it */
		if (i >= RX_PASS - 1 && !d.more)
			return;
	}
}

/* What the kernel gave the listener for the other contexts goes on to
 * them, recv passing it on (the owner's progress lock held, or nobody
 * else polls). */
static void rx_drain(struct rx_iface *ri)
{
	for (int n = 0; n < 65536; n++) {
		struct sv_dgram d = rx_slot(ri);

		if (!ri->recv(ri->fd, &d))
			break;
	}
}

static void close_fd(int fd)
{
	close(fd);
}

/* The listener fd (or -errno, returned) as an interface. */
static int rx_iface_open(const struct sv_iface_at *at, int fd, int (*recv)(int, struct sv_dgram *),
			 bool (*backlogged)(int), void (*unlisten)(int), bool shared, uint16_t dport,
			 void **iface)
{
	struct rx_iface *ri;
	int err;

	if (fd < 0)
		return fd;
	ri = malloc(sizeof(*ri));
	if (!ri) {
		unlisten(fd);
		return -ENOMEM;
	}
	*ri = (struct rx_iface){ .at = *at, .fd = fd, .recv = recv, .backlogged = backlogged,
				 .unlisten = unlisten, .shared = shared, .dport = dport };
	/* packets come through it: threads that poll look at it too */
	err = at->host->watch(at->eng, fd, true, rx_ready, ri);
	if (err) {
		unlisten(fd);
		free(ri);
		return err;
	}
	*iface = ri;
	return 0;
}

/*
 * The owner's loop stopped at unload or exit, the context still open:
 * leave port 4791, which the host's contexts share.  A socket left in its
 * group keeps its share of every flow to the host, and with nobody reading
 * it those datagrams, any process's, are lost for as long as this process
 * lives (a library unloaded with a device open: round 4 of
 * unit_unload.rocev2 found its WRITE's flow there and ended in
 * RETRY_EXC_ERR).  What waits in it for the others goes on to them first.
 * Threads of the application may still poll the listener (at exit), so its
 * descriptor is not closed but made another, unbound, socket that never
 * has anything to read: dup3 closes the bound one, which leaves the group,
 * and the descriptor stays valid for whoever looks at it.  (A datagram
 * that arrives between the last look and the close is lost, as on a link
 * that goes down.)
 */
static void rx_iface_leave(void *iface, bool pass_on)
{
	struct rx_iface *ri = iface;
	int quiet;

	if (!ri->shared || ri->fd < 0)
		return;
	if (pass_on)
		rx_drain(ri);
	quiet = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (quiet < 0 || dup3(quiet, ri->fd, O_CLOEXEC) < 0)
		sv_warn("could not leave a shared datagram port: %s", strerror(errno));
	if (quiet >= 0)
		close(quiet);
}

/* Closing: what the listener holds for the other contexts goes on to them;
 * what is this endpoint's own goes with it. */
static void rx_iface_close(void *iface)
{
	struct rx_iface *ri = iface;

	rx_drain(ri);
	free(ri->rx_state);
	ri->at.host->unwatch(ri->at.eng, ri->fd);
	ri->unlisten(ri->fd);
	free(ri);
}

static int listen_iface(const struct sv_iface_at *at, void **iface, bool *host_held)
{
	int fd = rocev2_listen(&at->ip);

	*host_held = fd == -EADDRINUSE;
	return rx_iface_open(at, fd, rocev2_recv, rocev2_backlogged, close_fd, true,
			     SV_ROCE_UDP_PORT, iface);
}

static int listen6_iface(const struct sv_iface_at *at, void **iface, bool *host_held)
{
	int fd = listen6(&at->ip, false);

	*host_held = fd == -EADDRINUSE;
	return rx_iface_open(at, fd, rocev2_recv, rocev2_backlogged, close_fd, false,
			     SV_ROCE_UDP_PORT, iface);
}

static int listen6ll_iface(const struct sv_iface_at *at, void **iface, bool *host_held)
{
	int fd = listen6(&at->ip, true);

	*host_held = fd == -EADDRINUSE;
	return rx_iface_open(at, fd, rocev2_recv, rocev2_backlogged, close_fd, true,
			     SV_ROCE_UDP_PORT, iface);
}

static int fwd_iface(const struct sv_iface_at *at, void **iface, bool *host_held)
{
	(void)host_held;
	return rx_iface_open(at, rocev2_fwd_listen(&at->ip, at->port), rocev2_fwd_recv, NULL,
			     rocev2_fwd_unlisten, false, SV_ROCE_UDP_PORT, iface);
}

/*
 * The context's own port (its block's, registry.h) at the device's address:
 * contexts of this host send there what is for it (rocev2_send), which then
 * reaches it without another context passing it on.  Said in the registry
 * once bound, unsaid before it closes.  Optional: with the port held by
 * another program, or SOFTVERBS_ROCEV2_OWN_PORT=0, none (peers send to
 * 4791 then).
 */
static int own_iface(const struct sv_iface_at *at, void **iface, bool *host_held)
{
	int fd, err;

	(void)host_held;
	if (!own_port_wanted())
		return -ENOENT;
	fd = listen_socket(&at->ip, 0, at->port, false);
	if (fd < 0) {
		sv_dbg("rocev2: no socket of its own at %s:%u (%s): sent to at %u",
		       SV_IP_STR(&at->ip), at->port, strerror(-fd), SV_ROCE_UDP_PORT);
		return -ENOENT;
	}
	err = rx_iface_open(at, fd, rocev2_recv, rocev2_backlogged, close_fd, false, at->port,
			    iface);
	if (!err)
		sv_qpn_publish_dgram(&at->ip, at->port, true);
	return err;
}

/* Peers of this host send to 4791 again: what arrives there still comes
 * to us (forwarded), and nothing is left to a socket nobody reads. */
static void own_iface_leave(void *iface, bool pass_on)
{
	struct rx_iface *ri = iface;

	(void)pass_on;
	sv_qpn_publish_dgram(&ri->at.ip, ri->at.port, false);
}

static void own_iface_close(void *iface)
{
	own_iface_leave(iface, false);
	rx_iface_close(iface);
}

const struct sv_transport_ops sv_rocev2_own_ops = {
	.name = "rocev2 (own port)",
	.iface_open = own_iface,
	.iface_leave = own_iface_leave,
	.iface_close = own_iface_close,
};

const struct sv_transport_ops sv_rocev2_listen_ops = {
	.name = "rocev2",
	.iface_open = listen_iface,
	.iface_leave = rx_iface_leave,
	.iface_close = rx_iface_close,
};

const struct sv_transport_ops sv_rocev2_listen6_ops = {
	.name = "rocev2 IPv6",
	.iface_open = listen6_iface,
	.iface_leave = rx_iface_leave,
	.iface_close = rx_iface_close,
};

const struct sv_transport_ops sv_rocev2_listen6ll_ops = {
	.name = "rocev2 IPv6 link-local",
	.iface_open = listen6ll_iface,
	.iface_leave = rx_iface_leave,
	.iface_close = rx_iface_close,
};

const struct sv_transport_ops sv_rocev2_fwd_ops = {
	.name = "rocev2 forwarding",
	.iface_open = fwd_iface,
	.iface_close = rx_iface_close,
};
