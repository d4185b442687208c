/*
 * The tcp transport: one stream socket per pair of endpoints, frames laid
 * back to back (stream.c).  Listeners bind only to their device's address (BRIEF §8).
 */
#include "transport/registry.h"
#include "transport/stream.h"

#include <arpa/inet.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/un.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <linux/sockios.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* This file's transport (select.c names it). */
extern const struct sv_transport_ops sv_tcp_ops;

static void tcp_tune(int fd)
{
	int one = 1, buf = 4 << 20;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
}

/*
 * The endpoint's listener on (ip, *port): the port of its block of QP
 * numbers (registry.h), so that a peer that knows a QPN knows where to
 * connect.  -EADDRINUSE when another program holds that port.
 */
static int listen_at(const struct sockaddr *sa, socklen_t len, bool shared)
{
	int fd, one = 1;

	fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* connections of a previous owner of the port may linger in TIME_WAIT */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* the shared port: every process of this user on this host listens
	 * there; the kernel spreads connections over them, and each hands on
	 * what is not its own */
	if (shared)
		setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	if (sa->sa_family == AF_INET6) {
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		/* an address still in duplicate address detection (tentative)
		 * cannot be bound otherwise; it serves once that has passed */
		setsockopt(fd, IPPROTO_IP, IP_FREEBIND, &one, sizeof(one));
	}
	if (bind(fd, sa, len) || listen(fd, 512)) {
		int e = -errno;

		close(fd);
		return e;
	}
	return fd;
}

/*
 * The IPv6 side of an endpoint at ip: its interface's global IPv6 address
 * (GIDs 4 and 5; an interface with IPv6 only has its endpoints there, so
 * nothing more), or its link-local one, with its scope; -ENOENT where there
 * is none.  Addresses, not the interface (SO_BINDTODEVICE at [::]): a
 * connection between two interfaces of one host comes in over lo.
 */
static int listen6_at(const struct in6_addr *ip, uint16_t port, bool shared, bool link_local)
{
	struct sockaddr_in6 sa = { .sin6_family = AF_INET6, .sin6_port = htons(port) };

	if ((!link_local && !sv_ip_is_v4(ip)) ||
	    !sv_endpoint_ip6(ip, link_local, &sa.sin6_addr, &sa.sin6_scope_id))
		return -ENOENT;
	return listen_at((struct sockaddr *)&sa, sizeof(sa), shared);
}

/* The endpoint's own address: IPv4, or on an interface with IPv6 only its
 * IPv6 address. */
static int listen_ip(const struct in6_addr *ip, uint16_t port, bool shared)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr = sv_ip_v4(ip),
				  .sin_port = htons(port) };
	struct sockaddr_in6 sa6 = { .sin6_family = AF_INET6, .sin6_addr = *ip,
				    .sin6_port = htons(port) };

	if (!sv_ip_is_v4(ip))
		return listen_at((struct sockaddr *)&sa6, sizeof(sa6), shared);
	return listen_at((struct sockaddr *)&sa, sizeof(sa), shared);
}

static int tcp_accept(int lfd, struct sv_conn *conn)
{
	int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

	if (fd < 0)
		return sv_accept_error(errno);
	tcp_tune(fd);
	conn->fd = fd;
	return 0;
}

/* Where an accepted connection comes from: the peer's address as the
 * network says (our IPv6 listeners take IPv6 only, IPV6_V6ONLY). */
static int tcp_peer_addr(struct sv_conn *conn, struct in6_addr *ip)
{
	struct sockaddr_storage ss;
	socklen_t l = sizeof(ss);

	if (conn->fd < 0)
		return -EBADF;
	if (getpeername(conn->fd, (struct sockaddr *)&ss, &l))
		return -errno;
	if (ss.ss_family == AF_INET)
		*ip = sv_ip_from_v4(((const struct sockaddr_in *)&ss)->sin_addr);
	else if (ss.ss_family == AF_INET6)
		*ip = ((const struct sockaddr_in6 *)&ss)->sin6_addr;
	else
		return -EAFNOSUPPORT;
	return 0;
}

/* The connect started by tcp_connect finished: did it succeed? */
static int tcp_finish_connect(struct sv_conn *conn)
{
	int err = 0;
	socklen_t l = sizeof(err);

	if (getsockopt(conn->fd, SOL_SOCKET, SO_ERROR, &err, &l))
		return -errno;
	return -err;
}

/*
 * Closing a device: a connection still being set up comes up, what is still
 * queued (ACKs, READ responses, UD SENDs that completed once queued, as a
 * NIC's complete once on the wire) goes out first, and the peer sees an
 * orderly end of stream, all within one bound.  We then wait for the peer's
 * own end of stream: closing with its data (its HELLO, say) still on the way
 * would make our kernel answer with a reset, and a reset lets the peer's
 * kernel discard what we sent and it has not read yet.
 */
static void tcp_drain(struct sv_conn *c, uint64_t deadline)
{
	char sink[4096];

	if (c->fd < 0)
		return;
	while (atomic_load(&c->state) == SV_CONN_CONNECTING && sv_now_ns() < deadline) {
		struct pollfd p = { .fd = c->fd, .events = POLLOUT };

		if (poll(&p, 1, 10) <= 0)
			continue;
		if (tcp_finish_connect(c))
			return;
		atomic_store(&c->state, SV_CONN_UP);
	}
	if (atomic_load(&c->state) != SV_CONN_UP)
		return;
	while (sv_conn_tx_waiting(c) && sv_now_ns() < deadline) {
		struct pollfd p = { .fd = c->fd, .events = POLLOUT };

		if (sv_conn_flush_queue(c) < 0)
			return;
		if (sv_conn_tx_waiting(c))
			poll(&p, 1, 10);
	}
	shutdown(c->fd, SHUT_WR);
	while (sv_now_ns() < deadline) {
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, 10) <= 0)
			continue;
		n = recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			return;
	}
}

uint16_t sv_tcp_shared_port(void)
{
	static long port = -1;

	if (port < 0) {
		port = sv_env_long("SOFTVERBS_PORT", 4791);
		if (port < 0 || port > 65535)
			port = 0;
	}
	return (uint16_t)port;
}

/* Endpoints of this host dialled at their own port, unless
 * SOFTVERBS_TCP_OWN_PORT=0. */
static bool own_port_wanted(void)
{
	static _Atomic int on = -1;

	return sv_env_switch(&on, "SOFTVERBS_TCP_OWN_PORT", true);
}

/*
 * A connection goes to the peer host's shared port, whichever process of
 * that host takes it hands it to the endpoint its HELLO names (to_port);
 * without a shared port, or when asked (conn->direct), straight to the
 * endpoint's own port.  So does one to an endpoint of this host, which
 * the registry shows listening: the kernel would give it to any process
 * of the user in the shared port's group, another job's too, and one
 * that is stopped or slow would hold it until the connection is given up
 * (2 s) and its frames go again on another.
 */
static uint16_t dial_port(const struct sv_conn *conn)
{
	uint16_t shared = conn->direct ? 0 : sv_tcp_shared_port();

	/* (the registry is read only where the shared port would be dialled) */
	if (shared && own_port_wanted() && sv_qpn_port_held_here(&conn->peer.ip, conn->peer.port))
		shared = 0;
	return shared ? shared : conn->peer.port;
}

static int tcp_connect(struct sv_conn *conn)
{
	uint16_t port = htons(dial_port(conn));
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr = sv_ip_v4(&conn->peer.ip),
				  .sin_port = port };
	struct sockaddr_in6 sa6 = { .sin6_family = AF_INET6, .sin6_addr = conn->peer.ip,
				    .sin6_port = port };
	struct sockaddr_in6 me = { .sin6_family = AF_INET6, .sin6_addr = conn->local_ip6 };
	struct sockaddr_in me4 = { .sin_family = AF_INET, .sin_addr = sv_ip_v4(&conn->local_ip) };
	bool v6 = !sv_ip_is_v4(&conn->peer.ip), from_gid = v6;
	int fd, one = 1, err;

	if (v6 && IN6_IS_ADDR_LINKLOCAL(&conn->peer.ip)) {
		/* a link-local peer is on our interface's link, and the kernel
		 * takes our link-local address there, which our GIDs 0 and 1
		 * are (the EUI-64 of the MAC) */
		sa6.sin6_scope_id = (uint32_t)conn->local_ifindex;
		from_gid = false;
	} else if (v6 && !conn->has_local_ip6) {
		return -EAFNOSUPPORT; /* our interface has no IPv6 address to come from */
	}
	fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	tcp_tune(fd);
	/* The peer takes a connection's source for the endpoint it comes from
	 * (sv_conn_take_hello), and refuses one whose HELLO names another
	 * IPv4 address: we come from our endpoint's own address, whatever
	 * the route would pick (another device of this host, 127.0.0.1 to a
	 * local address); over IPv6 from our GID's IPv6 address, which the
	 * peer's QP, given our IPv6 GID, hears only (as a RoCE QP checks a
	 * packet's source GID).  The port is the kernel's, at connect. */
	setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
	if (from_gid)
		err = bind(fd, (struct sockaddr *)&me, sizeof(me));
	else if (!v6 && sv_ip_is_v4(&conn->local_ip))
		err = bind(fd, (struct sockaddr *)&me4, sizeof(me4));
	else
		err = 0;
	if (err || ((v6 ? connect(fd, (struct sockaddr *)&sa6, sizeof(sa6))
			: connect(fd, (struct sockaddr *)&sa, sizeof(sa))) &&
		    errno != EINPROGRESS)) {
		int e = -errno;

		/* a loopback device's address reaches this host only */
		if (!v6 && sv_ip_is_v4(&conn->local_ip) &&
		    (ntohl(me4.sin_addr.s_addr) >> 24) == 127 &&
		    (ntohl(sa.sin_addr.s_addr) >> 24) != 127)
			sv_warn_limited("%s cannot reach %s: a device on the loopback "
					"interface reaches the peers of this host only",
					SV_IP_STR(&conn->local_ip), SV_IP_STR(&conn->peer.ip));
		close(fd);
		return e;
	}
	conn->fd = fd;
	return 0;
}

static ssize_t tcp_writev(struct sv_conn *conn, const struct iovec *iov, int iovcnt, bool ref)
{
	struct msghdr mh = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt };
	ssize_t n = sendmsg(conn->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);

	(void)ref; /* the kernel copies */
	if (n < 0)
		return (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOTCONN) ? 0 : -errno;
	return n;
}

static ssize_t tcp_readv(struct sv_conn *conn, const struct iovec *iov, int iovcnt)
{
	struct msghdr mh = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt };
	ssize_t n = recvmsg(conn->fd, &mh, MSG_DONTWAIT);

	if (n < 0)
		return -errno;
	return n;
}

static ssize_t tcp_readable(struct sv_conn *conn)
{
	int n = 0;

	if (ioctl(conn->fd, SIOCINQ, &n))
		return -errno;
	return n;
}

/* epoll honours SO_RCVLOWAT for TCP: no wake-ups for a packet half here */
static int tcp_set_lowat(struct sv_conn *conn, size_t bytes)
{
	int v = (int)bytes;

	return setsockopt(conn->fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)) ? -errno : 0;
}

static void tcp_close(struct sv_conn *conn)
{
	if (conn->fd >= 0 && conn->keep_socket) {
		close(conn->fd); /* handed to another process: the socket lives on there */
		conn->fd = -1;
	}
	if (conn->fd >= 0) {
		/* the peer sees the endpoint vanish, like a link going down */
		shutdown(conn->fd, SHUT_RDWR);
		close(conn->fd);
		conn->fd = -1;
	}
}

static size_t tcp_unsent(struct sv_conn *conn)
{
	int n = 0;

	if (conn->fd < 0 || ioctl(conn->fd, SIOCOUTQ, &n))
		return 0;
	return n > 0 ? (size_t)n : 0;
}

static const struct sv_stream_io tcp_io = {
	.writev = tcp_writev,
	.readv = tcp_readv,
	.readable = tcp_readable,
	.set_lowat = tcp_set_lowat,
};

static int tcp_send(struct sv_conn *conn, const struct sv_frames *f)
{
	return sv_stream_send(conn, &tcp_io, f);
}

static void tcp_input(struct sv_conn *conn, bool closing)
{
	sv_stream_input(conn, &tcp_io, closing);
}

/* ---- the host's shared port, and handing a connection to its endpoint ---- */

/* A HELLO frame as it arrives: its length word, then the HELLO. */
struct hello_frame {
	uint32_t len;
	struct sv_hello h;
} __attribute__((packed));

/*
 * The shared port, listened on by every softverbs process of this user
 * (SO_REUSEPORT).  Bound already by a socket without SO_REUSEPORT, or by
 * another user's (the kernel groups one user's sockets only): peers would
 * reach that program, not us, so the device is not opened (-EADDRINUSE,
 * *host_held), and the log says what to do.
 */
static int shared_held(int fd, const struct in6_addr *ip, bool v6)
{
	unsigned port = sv_tcp_shared_port();

	if (fd == -EADDRINUSE)
		sv_err("cannot open the device of %s: TCP port %u%s (SOFTVERBS_PORT), where "
		       "peers reach it, is held by another program (another user's, or not "
		       "softverbs; `ss -ltnp 'sport = :%u'` names it). Stop that program, or "
		       "give every process of the job, on every host, another SOFTVERBS_PORT "
		       "(0: none; each endpoint is then reached at its own port)",
		       SV_IP_STR(ip), port, v6 ? " of its IPv6 addresses" : "", port);
	return fd;
}

/* A HELLO frame that can be taken: its length and the HELLO's own checks. */
static bool hello_ok(const struct hello_frame *f)
{
	return ntohl(f->len) == sizeof(f->h) && ntohl(f->h.magic) == SV_WIRE_MAGIC &&
	       ntohs(f->h.version) == SV_WIRE_VERSION;
}

/* The connection is ours now: a tcp one whose HELLO was read already. */
static int adopt(struct sv_conn *conn, int fd, const struct hello_frame *f)
{
	tcp_tune(fd);
	conn->fd = fd;
	conn->ops = &sv_tcp_ops;
	return sv_conn_take_hello(conn, (const uint8_t *)&f->h, sizeof(f->h)) ? 0 : -EPROTO;
}

/*
 * A peer reached the shared port: the connection is taken as a tcp one that
 * says nothing until the peer's HELLO, which names the endpoint it is for
 * (and the peer sends nothing else before ours): then it is ours, or handed
 * on (tcp_handoff, from sv_conn_take_hello).
 */
static int shared_accept(int lfd, struct sv_conn *conn)
{
	int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

	if (fd < 0)
		return sv_accept_error(errno);
	tcp_tune(fd);
	conn->fd = fd;
	conn->ops = &sv_tcp_ops;
	conn->via_shared = true;
	return 0;
}

/* Pass the socket and the peer's HELLO to the endpoint to_port of this host. */
static int tcp_handoff(struct sv_conn *conn, const uint8_t *hello, size_t len, uint16_t to_port)
{
	struct hello_frame f;
	struct sockaddr_un sa;
	socklen_t sl;
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { &f, sizeof(f) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	int u, err = 0;

	if (len != sizeof(f.h))
		return -EINVAL;
	f.len = htonl((uint32_t)len);
	memcpy(&f.h, hello, len);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &conn->fd, sizeof(int));
	/* the endpoints of this device are named by its IPv4 address, whichever
	 * of its addresses the connection came to */
	sv_endpoint_unix_name(&sa, &sl, "handoff", &conn->local_ip, to_port);
	u = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (u < 0 || connect(u, (struct sockaddr *)&sa, sl))
		err = -errno;
	else if (!sv_endpoint_unix_ours(u))
		err = -EPERM; /* a name another user took: nothing goes there */
	else if (sendmsg(u, &mh, MSG_NOSIGNAL) != (ssize_t)sizeof(f))
		err = -errno;
	else
		conn->keep_socket = true; /* the owner holds it now: no shutdown here */
	if (u >= 0)
		close(u);
	return err ? err : 0;
}

/* A connection handed to us by the process that took it on the shared port. */
static int handoff_accept(int lfd, struct sv_conn *conn)
{
	struct hello_frame f;
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { &f, sizeof(f) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	struct pollfd p;
	int u = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), fd = -1;
	ssize_t n;

	if (u < 0)
		return sv_accept_error(errno);
	/* only a process of our own user may hand us a connection */
	if (getsockopt(u, SOL_SOCKET, SO_PEERCRED, &cr, &cl) || cr.uid != getuid()) {
		close(u);
		return -ECONNABORTED;
	}
	p = (struct pollfd){ .fd = u, .events = POLLIN };
	poll(&p, 1, 1000);
	n = recvmsg(u, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	close(u);
	cm = n == (ssize_t)sizeof(f) ? CMSG_FIRSTHDR(&mh) : NULL;
	if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
	    cm->cmsg_len == CMSG_LEN(sizeof(int)))
		memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	if (fd < 0 || !hello_ok(&f) || ntohs(f.h.to_port) != conn->local_port) {
		if (fd >= 0)
			close(fd);
		return -ECONNABORTED;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return adopt(conn, fd, &f);
}

/* ---- the endpoint's interfaces: its own port, the shared port, the hand-off ---- */

static int own_iface(const struct sv_iface_at *at, void **iface, bool *host_held)
{
	(void)host_held;
	return sv_iface_stream(at, listen_ip(&at->ip, at->port, false), &sv_tcp_ops, tcp_accept,
			       iface);
}

static int own6_iface(const struct sv_iface_at *at, void **iface, bool *host_held)
{
	(void)host_held;
	return sv_iface_stream(at, listen6_at(&at->ip, at->port, false, false), &sv_tcp_ops,
			       tcp_accept, iface);
}

static int own6ll_iface(const struct sv_iface_at *at, void **iface, bool *host_held)
{
	(void)host_held;
	return sv_iface_stream(at, listen6_at(&at->ip, at->port, false, true), &sv_tcp_ops,
			       tcp_accept, iface);
}

static int shared_iface(const struct sv_iface_at *at, void **iface, bool *host_held)
{
	int fd = shared_held(listen_ip(&at->ip, sv_tcp_shared_port(), true), &at->ip,
			     !sv_ip_is_v4(&at->ip));

	*host_held = fd == -EADDRINUSE;
	return sv_iface_stream(at, fd, &sv_tcp_ops, shared_accept, iface);
}

static int shared6_iface(const struct sv_iface_at *at, void **iface, bool *host_held)
{
	int fd = shared_held(listen6_at(&at->ip, sv_tcp_shared_port(), true, false), &at->ip,
			     true);

	*host_held = fd == -EADDRINUSE;
	return sv_iface_stream(at, fd, &sv_tcp_ops, shared_accept, iface);
}

static int shared6ll_iface(const struct sv_iface_at *at, void **iface, bool *host_held)
{
	int fd = shared_held(listen6_at(&at->ip, sv_tcp_shared_port(), true, true), &at->ip,
			     true);

	*host_held = fd == -EADDRINUSE;
	return sv_iface_stream(at, fd, &sv_tcp_ops, shared_accept, iface);
}

/* The abstract socket over which a connection is handed to an endpoint. */
static int handoff_iface(const struct sv_iface_at *at, void **iface, bool *host_held)
{
	(void)host_held;
	return sv_iface_stream(at, sv_endpoint_unix_listen("handoff", &at->ip, at->port),
			       &sv_tcp_ops, handoff_accept, iface);
}

/* The shared port is left when the endpoint's loop stops for good: else
 * the kernel would go on giving it connections nobody accepts. */
const struct sv_transport_ops sv_tcp_shared_ops = {
	.name = "tcp (shared port)",
	.iface_open = shared_iface,
	.iface_leave = sv_iface_stream_leave,
	.iface_close = sv_iface_stream_close,
};

const struct sv_transport_ops sv_tcp_shared6_ops = {
	.name = "tcp (shared port, IPv6)",
	.iface_open = shared6_iface,
	.iface_close = sv_iface_stream_close,
};

const struct sv_transport_ops sv_tcp_shared6ll_ops = {
	.name = "tcp (shared port, IPv6 link-local)",
	.iface_open = shared6ll_iface,
	.iface_close = sv_iface_stream_close,
};

const struct sv_transport_ops sv_tcp6ll_ops = {
	.name = "tcp (IPv6 link-local)",
	.iface_open = own6ll_iface,
	.iface_close = sv_iface_stream_close,
};

const struct sv_transport_ops sv_tcp6_ops = {
	.name = "tcp (IPv6)",
	.iface_open = own6_iface,
	.iface_close = sv_iface_stream_close,
};

const struct sv_transport_ops sv_tcp_handoff_ops = {
	.name = "tcp (hand-off)",
	.iface_open = handoff_iface,
	.iface_close = sv_iface_stream_close,
};

const struct sv_transport_ops sv_tcp_ops = {
	.name = "tcp",
	.run_max = SV_STREAM_RUN_MAX,
	.iface_open = own_iface,
	.iface_close = sv_iface_stream_close,
	.finish_connect = tcp_finish_connect,
	.drain = tcp_drain,
	.connect = tcp_connect,
	.open = sv_stream_open,
	.send = tcp_send,
	.input = tcp_input,
	.unsent = tcp_unsent,
	.peer_addr = tcp_peer_addr,
	.close = tcp_close,
	.destroy = sv_stream_fini,
	.handoff = tcp_handoff,
};
