/*
 * cm_rsocket: rsockets (rdma/rsocket.h, SOCK_STREAM) between two processes
 * on 127.0.0.1: the parent is the server, a forked child the client (forked
 * before either touches the library).  Pipes order the phases where a race
 * would make a check meaningless.
 *   - errors: EBADF, EAFNOSUPPORT, EOPNOTSUPP (type flags),
 *     ESOCKTNOSUPPORT, EPROTONOSUPPORT,
 *     ENOTCONN, ENOPROTOOPT, ECONNREFUSED (no listener)
 *   - O_NONBLOCK listener: raccept EAGAIN, then rpoll POLLIN and raccept
 *   - MSG_DONTWAIT rrecv EAGAIN and rpoll with no data; POLLOUT
 *   - names: rgetsockname / rgetpeername on both ends agree
 *   - echo of 1 B .. 4 MiB (pattern checked both ways; rwrite/rread,
 *     rwritev/rreadv, rsendmsg/rrecvmsg)
 *   - full duplex: a writer thread and a reading thread on one rsocket, the
 *     server echoing as it reads (without both at once this deadlocks)
 *   - partial reads, MSG_PEEK, rselect
 *   - SHUT_WR: the peer reads all data, then 0; the half-closed side still
 *     reads; after the peer's rclose writes fail with EPIPE or ECONNRESET
 *   - data, then the peer's rclose: rpoll says POLLIN and not POLLHUP for
 *     as long as any of it is left to read (a program that stops at
 *     POLLHUP, as rstream -T a does, would lose it), then POLLHUP and EOF;
 *     after rshutdown(SHUT_RD), which reads nothing more, POLLHUP at once
 *   - non-blocking rconnect: EINPROGRESS (or 0), completion via rpoll
 *     POLLOUT, SO_ERROR 0
 *   - SOCK_DGRAM (UD): the child echoes datagrams of 1 B .. 4000 B off
 *     the parent's bound rsocket (rconnect'ed: rsend/rrecvfrom; the parent
 *     rrecvfrom/rsendto back to the reported sender); payloads, boundaries
 *     (two back-to-back datagrams stay two), truncation of a datagram
 *     larger than the buffer (rrecvmsg: MSG_TRUNC, msg_name), EMSGSIZE
 *     beyond one UD message, EDESTADDRREQ, non-blocking EAGAIN, rpoll
 *     POLLIN/POLLOUT, SO_TYPE, rgetsockname/rgetpeername
 * Ports 20580 (listener), 20581 (nothing listens), 20582 (datagrams).
 */
#include "cm_test.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rsocket.h>
#include <signal.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define PORT 20580
#define PORT_NONE 20581
#define PORT_DG 20582
#define BIG (4u << 20)
#define DUPLEX (8u << 20) /* more than both sides' buffers together */
#define LEFT_OVER 200000u /* less than a receiver's buffers (1 MiB) */

static int to_child[2], to_parent[2];

static void sig_send(int fd, char c)
{
	SVT_CHECK(write(fd, &c, 1) == 1);
}

static void sig_wait(int fd, char c)
{
	char got = 0;
	SVT_CHECK(read(fd, &got, 1) == 1);
	SVT_CHECK_EQ(got, c);
}

#define RS_OK(expr)                                                            \
	do {                                                                   \
		errno = 0;                                                     \
		if ((expr) < 0)                                                \
			SVT_FAIL("%s failed: errno %d (%s)", #expr, errno,     \
				 strerror(errno));                             \
	} while (0)

static void write_full(int s, const void *buf, size_t len)
{
	size_t off = 0;
	while (off < len) {
		ssize_t n = rwrite(s, (const uint8_t *)buf + off, len - off);
		if (n <= 0)
			SVT_FAIL("rwrite at %zu of %zu: %zd errno %d (%s)", off, len, n, errno,
				 strerror(errno));
		off += (size_t)n;
	}
}

static void read_full(int s, void *buf, size_t len)
{
	size_t off = 0;
	while (off < len) {
		ssize_t n = rread(s, (uint8_t *)buf + off, len - off);
		if (n <= 0)
			SVT_FAIL("rread at %zu of %zu: %zd errno %d (%s)", off, len, n, errno,
				 strerror(errno));
		off += (size_t)n;
	}
}

/* A connected rsocket to sin, once the server has said `phase`. */
static int dial_then_wait(const struct sockaddr_in *sin, char phase)
{
	int s = rsocket(AF_INET, SOCK_STREAM, 0);

	RS_OK(s);
	SVT_CHECK_CM(rconnect(s, (const struct sockaddr *)sin, sizeof(*sin)));
	sig_wait(to_child[0], phase);
	return s;
}

/* The next connection on ls gets LEFT_OVER bytes of pattern 31 and is closed
 * at once; then the client is told `phase`. */
static void write_left_over_and_close(int ls, uint8_t *buf, char phase)
{
	int s = raccept(ls, NULL, NULL);

	RS_OK(s);
	svt_fill(buf, LEFT_OVER, 31);
	write_full(s, buf, LEFT_OVER);
	RS_OK(rclose(s));
	sig_send(to_child[1], phase);
}

static uint16_t port_of(int s, bool peer)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);
	memset(&a, 0, sizeof(a));
	if (peer)
		RS_OK(rgetpeername(s, (struct sockaddr *)&a, &len));
	else
		RS_OK(rgetsockname(s, (struct sockaddr *)&a, &len));
	SVT_CHECK_EQ(len, sizeof(a));
	SVT_CHECK_EQ(a.sin_family, AF_INET);
	SVT_CHECK_EQ(ntohl(a.sin_addr.s_addr), INADDR_LOOPBACK);
	return ntohs(a.sin_port);
}

static const size_t sizes[] = {1, 100, 4096, 65535, 65536, 65537, 1u << 20, BIG};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* ---- SOCK_DGRAM (UD) phase: the client (child) ---- */

static const size_t dsizes[] = {1, 16, 100, 1000, 2048, 4000};
#define NDSIZES (sizeof(dsizes) / sizeof(dsizes[0]))

static void check_from(const struct sockaddr_in *a, socklen_t len, uint16_t port)
{
	SVT_CHECK_EQ(len, sizeof(*a));
	SVT_CHECK_EQ(a->sin_family, AF_INET);
	SVT_CHECK_EQ(ntohl(a->sin_addr.s_addr), INADDR_LOOPBACK);
	if (port)
		SVT_CHECK_EQ(ntohs(a->sin_port), port);
	else
		SVT_CHECK(a->sin_port != 0);
}

static void dgram_client(void)
{
	static uint8_t out[8192], in[8192];
	struct sockaddr_in srv = cmt_sin("127.0.0.1", PORT_DG), from;
	socklen_t fl;
	sig_wait(to_child[0], 'D');
	int s = rsocket(AF_INET, SOCK_DGRAM, 0);
	RS_OK(s);
	SVT_CHECK_CM_ERRNO((int)rsend(s, out, 1, 0), EDESTADDRREQ);
	/* more than one UD message (MTU 4096 less the header) */
	SVT_CHECK_CM_ERRNO((int)rsendto(s, out, 4096, 0, (struct sockaddr *)&srv, sizeof(srv)),
			   EMSGSIZE);
	SVT_CHECK_CM_ERRNO((int)rsendto(s, out, 65536, 0, (struct sockaddr *)&srv, sizeof(srv)),
			   EMSGSIZE);
	RS_OK(rconnect(s, (struct sockaddr *)&srv, sizeof(srv)));
	SVT_CHECK_EQ(port_of(s, true), PORT_DG);
	uint16_t me = port_of(s, false);
	SVT_CHECK(me != 0);
	/* echo of each size: payload, boundary and sender checked */
	for (size_t i = 0; i < NDSIZES; i++) {
		size_t n = dsizes[i];
		svt_fill(out, n, (uint32_t)(n + 7));
		SVT_CHECK_EQ(rsend(s, out, n, 0), (ssize_t)n);
		memset(in, 0, n + 1);
		fl = sizeof(from);
		SVT_CHECK_EQ(rrecvfrom(s, in, sizeof(in), 0, (struct sockaddr *)&from, &fl),
			     (ssize_t)n);
		SVT_CHECK_FILL(in, n, (uint32_t)(n + 7));
		check_from(&from, fl, PORT_DG);
	}
	/* two datagrams back to back stay two */
	memset(out, 'A', 10);
	SVT_CHECK_EQ(rsend(s, out, 10, 0), 10);
	memset(out, 'B', 20);
	SVT_CHECK_EQ(rsendto(s, out, 20, 0, (struct sockaddr *)&srv, sizeof(srv)), 20);
	/* gathered by rsendmsg: one datagram of 1000, truncated by the server */
	svt_fill(out, 1000, 3);
	struct iovec v[2] = {{out, 300}, {out + 300, 700}};
	struct msghdr m = {.msg_iov = v, .msg_iovlen = 2};
	SVT_CHECK_EQ(rsendmsg(s, &m, 0), 1000);
	svt_fill(out, 500, 4);
	SVT_CHECK_EQ(rwrite(s, out, 500), 500);
	/* the server's verdict, through rpoll */
	struct pollfd p = {.fd = s, .events = POLLIN};
	SVT_CHECK_EQ(rpoll(&p, 1, 10000), 1);
	SVT_CHECK(p.revents & POLLIN);
	SVT_CHECK_EQ(rread(s, in, sizeof(in)), 2);
	SVT_CHECK(!memcmp(in, "ok", 2));
	RS_OK(rclose(s));
}

/* ---- SOCK_DGRAM phase: the server (parent) ---- */

static void dgram_server(void)
{
	static uint8_t buf[8192];
	struct sockaddr_in sin = cmt_sin("127.0.0.1", PORT_DG), from;
	socklen_t fl;
	SVT_CHECK_CM_ERRNO(rsocket(AF_INET, SOCK_DGRAM, IPPROTO_TCP), EPROTONOSUPPORT);
	int s = rsocket(AF_INET, SOCK_DGRAM, 0);
	RS_OK(s);
	int v = 0;
	socklen_t vl = sizeof(v);
	SVT_CHECK_CM(rgetsockopt(s, SOL_SOCKET, SO_TYPE, &v, &vl));
	SVT_CHECK_EQ(v, SOCK_DGRAM);
	SVT_CHECK_CM(rbind(s, (struct sockaddr *)&sin, sizeof(sin)));
	SVT_CHECK_EQ(port_of(s, false), PORT_DG);
	struct sockaddr_in pa;
	socklen_t pl = sizeof(pa);
	SVT_CHECK_CM_ERRNO(rgetpeername(s, (struct sockaddr *)&pa, &pl), ENOTCONN);
	/* nothing yet: EAGAIN non-blocking, rpoll not readable but writable */
	SVT_CHECK_EQ(rfcntl(s, F_SETFL, O_NONBLOCK), 0);
	SVT_CHECK_EQ(rfcntl(s, F_GETFL) & O_NONBLOCK, O_NONBLOCK);
	SVT_CHECK_CM_ERRNO((int)rrecv(s, buf, sizeof(buf), 0), EAGAIN);
	SVT_CHECK_CM_ERRNO((int)rrecvfrom(s, buf, sizeof(buf), 0, NULL, NULL), EAGAIN);
	struct pollfd p = {.fd = s, .events = POLLIN};
	SVT_CHECK_EQ(rpoll(&p, 1, 50), 0);
	p.events = POLLIN | POLLOUT;
	SVT_CHECK_EQ(rpoll(&p, 1, 0), 1);
	SVT_CHECK_EQ(p.revents, POLLOUT);
	SVT_CHECK_EQ(rfcntl(s, F_SETFL, 0), 0);
	sig_send(to_child[1], 'D');

	uint16_t cport = 0;
	for (size_t i = 0; i < NDSIZES; i++) {
		size_t n = dsizes[i];
		p = (struct pollfd){.fd = s, .events = POLLIN};
		SVT_CHECK_EQ(rpoll(&p, 1, 10000), 1);
		SVT_CHECK(p.revents & POLLIN);
		fl = sizeof(from);
		SVT_CHECK_EQ(rrecvfrom(s, buf, sizeof(buf), 0, (struct sockaddr *)&from, &fl),
			     (ssize_t)n);
		SVT_CHECK_FILL(buf, n, (uint32_t)(n + 7));
		check_from(&from, fl, cport);
		cport = ntohs(from.sin_port);
		SVT_CHECK_EQ(rsendto(s, buf, n, 0, (struct sockaddr *)&from, fl), (ssize_t)n);
	}
	/* boundaries: 10 x 'A' then 20 x 'B', read with room for both */
	memset(buf, 0, 64);
	SVT_CHECK_EQ(rrecv(s, buf, 100, 0), 10);
	for (int i = 0; i < 10; i++)
		SVT_CHECK_EQ(buf[i], 'A');
	SVT_CHECK_EQ(buf[10], 0);
	SVT_CHECK_EQ(rrecv(s, buf, 100, 0), 20);
	for (int i = 0; i < 20; i++)
		SVT_CHECK_EQ(buf[i], 'B');
	/* 1000 bytes into 100: truncated (the rest is dropped, as UDP) */
	memset(buf, 0, sizeof(buf));
	SVT_CHECK_EQ(rrecv(s, buf, 100, 0), 100);
	SVT_CHECK_FILL(buf, 100, 3);
	SVT_CHECK_EQ(buf[100], 0);
	/* 500 into 50 with rrecvmsg: MSG_TRUNC in msg_flags, the sender named */
	struct iovec iv = {buf, 50};
	struct sockaddr_in mn;
	struct msghdr m = {.msg_name = &mn, .msg_namelen = sizeof(mn), .msg_iov = &iv, .msg_iovlen = 1};
	SVT_CHECK_EQ(rrecvmsg(s, &m, 0), 50);
	SVT_CHECK(m.msg_flags & MSG_TRUNC);
	SVT_CHECK_FILL(buf, 50, 4);
	check_from(&mn, m.msg_namelen, cport);
	SVT_CHECK_EQ(rsendto(s, "ok", 2, 0, (struct sockaddr *)&mn, m.msg_namelen), 2);
	/* nothing left over from the truncated ones */
	SVT_CHECK_CM_ERRNO((int)rrecv(s, buf, sizeof(buf), MSG_DONTWAIT), EAGAIN);
	RS_OK(rclose(s));
}

/* ---- the client (child) ---- */

struct duplex {
	int s;
	uint8_t *buf;
};

static void *duplex_writer(void *arg)
{
	struct duplex *d = arg;
	for (size_t off = 0; off < DUPLEX; off += 100000) {
		size_t n = DUPLEX - off < 100000 ? DUPLEX - off : 100000;
		write_full(d->s, d->buf + off, n);
	}
	return NULL;
}

static int client(void)
{
	svt_watchdog(25);
	struct sockaddr_in sin = cmt_sin("127.0.0.1", PORT);

	/* nothing listens here */
	int s = rsocket(AF_INET, SOCK_STREAM, 0);
	RS_OK(s);
	struct sockaddr_in none = cmt_sin("127.0.0.1", PORT_NONE);
	SVT_CHECK_CM_ERRNO(rconnect(s, (struct sockaddr *)&none, sizeof(none)), ECONNREFUSED);
	RS_OK(rclose(s));

	sig_wait(to_child[0], 'L'); /* the server listens */
	s = rsocket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
	RS_OK(s);
	SVT_CHECK_CM_ERRNO(rgetpeername(s, (struct sockaddr *)&none, &(socklen_t){sizeof(none)}),
			   ENOTCONN);
	SVT_CHECK_CM(rconnect(s, (struct sockaddr *)&sin, sizeof(sin)));
	SVT_CHECK_EQ(port_of(s, true), PORT);
	uint16_t me = port_of(s, false);
	SVT_CHECK_NE(me, 0);
	int one = 1, v = 0;
	socklen_t vl = sizeof(v);
	SVT_CHECK_CM(rsetsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)));
	SVT_CHECK_CM(rgetsockopt(s, IPPROTO_TCP, TCP_NODELAY, &v, &vl));
	SVT_CHECK_EQ(v, 1);
	SVT_CHECK_EQ(vl, sizeof(int));

	sig_wait(to_child[0], 'G'); /* the server checked it has nothing to read */
	uint16_t be = htons(me);
	write_full(s, &be, sizeof(be));

	/* echo: size (8 bytes) + pattern; the echo comes back whole */
	uint8_t *out = svt_alloc(BIG), *in = svt_alloc(BIG);
	for (size_t i = 0; i < NSIZES; i++) {
		uint64_t n = sizes[i];
		svt_fill(out, n, (uint32_t)n);
		struct iovec v2[2] = {{&n, sizeof(n)}, {out, n}};
		struct msghdr m = {.msg_iov = v2, .msg_iovlen = 2};
		ssize_t w = rsendmsg(s, &m, 0);
		SVT_CHECK_EQ(w, (ssize_t)(sizeof(n) + n)); /* blocking: all of it */
		memset(in, 0, n);
		size_t got = 0;
		while (got < n) {
			struct iovec rv[2] = {{in + got, (n - got) / 2}, {in + got + (n - got) / 2, n - got - (n - got) / 2}};
			ssize_t r = (i & 1) ? rreadv(s, rv, 2)
					    : rrecvmsg(s, &(struct msghdr){.msg_iov = rv, .msg_iovlen = 2}, 0);
			if (r <= 0)
				SVT_FAIL("echo %zu: read %zd errno %d", (size_t)n, r, errno);
			got += (size_t)r;
		}
		SVT_CHECK_FILL(in, n, (uint32_t)n);
	}

	/* full duplex: this thread reads the echo while another writes */
	uint8_t *dout = svt_alloc(DUPLEX), *din = svt_alloc(DUPLEX);
	svt_fill(dout, DUPLEX, 99);
	struct duplex d = {s, dout};
	pthread_t th;
	SVT_CHECK(pthread_create(&th, NULL, duplex_writer, &d) == 0);
	read_full(s, din, DUPLEX);
	SVT_CHECK(pthread_join(th, NULL) == 0);
	SVT_CHECK_FILL(din, DUPLEX, 99);
	free(dout);
	free(din);

	/* partial reads on the server: 1000 bytes */
	svt_fill(out, 1000, 77);
	write_full(s, out, 1000);

	/* SHUT_WR after 300000 bytes; then read the server's "bye" and EOF */
	svt_fill(out, 300000, 5);
	write_full(s, out, 300000);
	SVT_CHECK_CM(rshutdown(s, SHUT_WR));
	SVT_CHECK_CM_ERRNO((int)rsend(s, "x", 1, 0), EPIPE);
	char bye[4] = {0};
	read_full(s, bye, 3);
	SVT_CHECK(memcmp(bye, "bye", 3) == 0);
	SVT_CHECK_EQ(rread(s, bye, sizeof(bye)), 0);
	RS_OK(rclose(s));

	/* writes after the peer closed: EPIPE or ECONNRESET (and no SIGPIPE) */
	sig_wait(to_child[0], 'A');
	s = dial_then_wait(&sin, 'C'); /* the server closed its end */
	uint64_t end = svt_now_ms() + 5000;
	int err = 0;
	while (!err && svt_now_ms() < end) {
		if (rsend(s, out, 4096, 0) < 0)
			err = errno;
	}
	SVT_CHECK_MSG(err == EPIPE || err == ECONNRESET, "write after close: errno %d (%s)", err,
		      strerror(err));
	SVT_CHECK_EQ(rread(s, in, 10), 0);
	RS_OK(rclose(s));

	/* the server writes LEFT_OVER bytes and closes; its close waits for
	 * them to be acknowledged, not read, so the disconnect is taken in
	 * here while they are all still to be read */
	s = dial_then_wait(&sin, 'D');
	struct pollfd p = {.fd = s, .events = POLLIN};
	for (uint64_t until = svt_now_ms() + 300; svt_now_ms() < until;) {
		p.revents = 0;
		SVT_CHECK_EQ(rpoll(&p, 1, 10), 1);
		SVT_CHECK_EQ(p.revents & (POLLIN | POLLHUP | POLLERR), POLLIN);
	}
	memset(in, 0, LEFT_OVER);
	read_full(s, in, LEFT_OVER);
	SVT_CHECK_FILL(in, LEFT_OVER, 31);
	p.revents = 0;
	SVT_CHECK_EQ(rpoll(&p, 1, 5000), 1);
	SVT_CHECK(p.revents & POLLHUP);
	SVT_CHECK_EQ(rread(s, in, 10), 0);
	RS_OK(rclose(s));

	/* the same, but this end will read none of it: SHUT_RD once the
	 * data is here (rpoll took it in: POLLIN) */
	s = dial_then_wait(&sin, 'E');
	p = (struct pollfd){.fd = s, .events = POLLIN};
	SVT_CHECK_EQ(rpoll(&p, 1, 5000), 1);
	SVT_CHECK(p.revents & POLLIN);
	SVT_CHECK_CM(rshutdown(s, SHUT_RD));
	p.revents = 0;
	for (uint64_t until = svt_now_ms() + 5000; !(p.revents & POLLHUP) && svt_now_ms() < until;)
		SVT_CHECK_EQ(rpoll(&p, 1, 10) >= 0, 1);
	SVT_CHECK(p.revents & POLLHUP);
	SVT_CHECK_EQ(rread(s, in, 10), 0);
	RS_OK(rclose(s));

	/* non-blocking connect, completed through rpoll POLLOUT */
	s = rsocket(AF_INET, SOCK_STREAM, 0);
	RS_OK(s);
	SVT_CHECK_EQ(rfcntl(s, F_SETFL, rfcntl(s, F_GETFL) | O_NONBLOCK), 0);
	SVT_CHECK(rfcntl(s, F_GETFL) & O_NONBLOCK);
	errno = 0;
	int rc = rconnect(s, (struct sockaddr *)&sin, sizeof(sin));
	SVT_CHECK_MSG(rc == 0 || errno == EINPROGRESS, "rconnect: %d errno %d", rc, errno);
	p = (struct pollfd){.fd = s, .events = POLLOUT};
	SVT_CHECK_EQ(rpoll(&p, 1, 5000), 1);
	SVT_CHECK_EQ(p.revents & (POLLOUT | POLLERR), POLLOUT);
	vl = sizeof(v);
	v = -1;
	SVT_CHECK_CM(rgetsockopt(s, SOL_SOCKET, SO_ERROR, &v, &vl));
	SVT_CHECK_EQ(v, 0);
	SVT_CHECK_EQ(port_of(s, true), PORT);
	SVT_CHECK_EQ(rsend(s, "z", 1, 0), 1);
	/* the server answers once it has read it */
	p = (struct pollfd){.fd = s, .events = POLLIN};
	SVT_CHECK_EQ(rpoll(&p, 1, 5000), 1);
	SVT_CHECK(p.revents & POLLIN);
	char c = 0;
	SVT_CHECK_EQ(rrecv(s, &c, 1, 0), 1);
	SVT_CHECK_EQ(c, 'Z');
	RS_OK(rclose(s));
	free(out);
	free(in);
	dgram_client();
	return 0;
}

/* ---- the server (parent) ---- */

static void check_errors(void)
{
	char b[4];
	SVT_CHECK_CM_ERRNO((int)rrecv(12345, b, 1, 0), EBADF);
	SVT_CHECK_CM_ERRNO((int)rsend(-1, b, 1, 0), EBADF);
	SVT_CHECK_CM_ERRNO(rclose(0), EBADF); /* stdin: no rsocket */
	SVT_CHECK_CM_ERRNO(rsocket(AF_UNIX, SOCK_STREAM, 0), EAFNOSUPPORT);
	SVT_CHECK_CM_ERRNO(rsocket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0), EOPNOTSUPP);
	/* as rdma-core's: no type flags (librspreload relies on it) */
	SVT_CHECK_CM_ERRNO(rsocket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), EOPNOTSUPP);
	SVT_CHECK_CM_ERRNO(rsocket(AF_INET, SOCK_RAW, 0), ESOCKTNOSUPPORT);
	SVT_CHECK_CM_ERRNO(rsocket(AF_INET, SOCK_STREAM, IPPROTO_UDP), EPROTONOSUPPORT);
	int s = rsocket(AF_INET6, SOCK_STREAM, 0);
	RS_OK(s);
	SVT_CHECK_CM_ERRNO((int)rrecv(s, b, 1, 0), ENOTCONN);
	SVT_CHECK_CM_ERRNO((int)rsend(s, b, 1, 0), ENOTCONN);
	SVT_CHECK_CM_ERRNO(rshutdown(s, SHUT_WR), ENOTCONN);
	int v = 0;
	SVT_CHECK_CM_ERRNO(rsetsockopt(s, SOL_SOCKET, 12345, &v, sizeof(v)), ENOPROTOOPT);
	/* the number is a real descriptor the process owns */
	SVT_CHECK(fcntl(s, F_GETFD) >= 0);
	RS_OK(rclose(s));
	SVT_CHECK_CM_ERRNO(rclose(s), EBADF);
}

static void server(void)
{
	check_errors();
	sig_send(to_child[1], 'X'); /* unused: keeps the pipe order simple */

	int ls = rsocket(AF_INET, SOCK_STREAM, 0);
	RS_OK(ls);
	int one = 1;
	SVT_CHECK_CM(rsetsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
	struct sockaddr_in sin = cmt_sin("127.0.0.1", PORT);
	SVT_CHECK_CM(rbind(ls, (struct sockaddr *)&sin, sizeof(sin)));
	SVT_CHECK_CM(rlisten(ls, 4));
	SVT_CHECK_EQ(port_of(ls, false), PORT);
	SVT_CHECK_EQ(rfcntl(ls, F_SETFL, O_NONBLOCK), 0);
	SVT_CHECK_CM_ERRNO(raccept(ls, NULL, NULL), EAGAIN);
	struct pollfd p = {.fd = ls, .events = POLLIN};
	SVT_CHECK_EQ(rpoll(&p, 1, 0), 0);
	sig_send(to_child[1], 'L');

	SVT_CHECK_EQ(rpoll(&p, 1, 10000), 1);
	SVT_CHECK(p.revents & POLLIN);
	struct sockaddr_in peer;
	socklen_t pl = sizeof(peer);
	int s = raccept(ls, (struct sockaddr *)&peer, &pl);
	RS_OK(s);
	SVT_CHECK_EQ(pl, sizeof(peer));
	SVT_CHECK_EQ(ntohl(peer.sin_addr.s_addr), INADDR_LOOPBACK);
	SVT_CHECK_EQ(rfcntl(ls, F_SETFL, 0), 0);
	SVT_CHECK_EQ(port_of(s, false), PORT);
	uint16_t cport = port_of(s, true);
	SVT_CHECK_EQ(cport, ntohs(peer.sin_port));

	/* nothing to read yet; writable */
	char b[8];
	SVT_CHECK_CM_ERRNO((int)rrecv(s, b, 1, MSG_DONTWAIT), EAGAIN);
	SVT_CHECK_EQ(rfcntl(s, F_SETFL, O_NONBLOCK), 0);
	SVT_CHECK_CM_ERRNO((int)rread(s, b, 1), EAGAIN);
	SVT_CHECK_EQ(rfcntl(s, F_SETFL, 0), 0);
	p = (struct pollfd){.fd = s, .events = POLLIN};
	SVT_CHECK_EQ(rpoll(&p, 1, 100), 0);
	p.events = POLLIN | POLLOUT;
	SVT_CHECK_EQ(rpoll(&p, 1, 1000), 1);
	SVT_CHECK_EQ(p.revents, POLLOUT);
	sig_send(to_child[1], 'G');

	/* the client's port, as it sees it */
	uint16_t be = 0;
	read_full(s, &be, sizeof(be));
	SVT_CHECK_EQ(ntohs(be), cport);

	/* echo */
	uint8_t *buf = svt_alloc(BIG);
	for (size_t i = 0; i < NSIZES; i++) {
		uint64_t n = 0;
		read_full(s, &n, sizeof(n));
		SVT_CHECK_EQ(n, (uint64_t)sizes[i]);
		memset(buf, 0, n);
		read_full(s, buf, n);
		SVT_CHECK_FILL(buf, n, (uint32_t)n);
		struct iovec v[2] = {{buf, n / 3}, {buf + n / 3, n - n / 3}};
		size_t off = 0;
		while (off < n) { /* rwritev on a blocking socket sends it all */
			ssize_t w = rwritev(s, v, 2);
			SVT_CHECK_EQ(w, (ssize_t)n);
			off += (size_t)w;
		}
	}

	/* full duplex: echo as it comes, in pieces */
	for (size_t total = 0; total < DUPLEX;) {
		ssize_t n = rread(s, buf, 256 * 1024 < DUPLEX - total ? 256 * 1024 : DUPLEX - total);
		SVT_CHECK_GT(n, 0);
		write_full(s, buf, (size_t)n);
		total += (size_t)n;
	}

	/* partial reads of 1000 bytes: 1, 10, peek 100, 100, the rest */
	fd_set rd;
	FD_ZERO(&rd);
	FD_SET(s, &rd);
	struct timeval tv = {.tv_sec = 5};
	SVT_CHECK_EQ(rselect(s + 1, &rd, NULL, NULL, &tv), 1);
	SVT_CHECK(FD_ISSET(s, &rd));
	uint8_t part[1000], peek[100];
	read_full(s, part, 1);
	read_full(s, part + 1, 10);
	ssize_t pk = rrecv(s, peek, sizeof(peek), MSG_PEEK);
	SVT_CHECK_GT(pk, 0);
	read_full(s, part + 11, 100);
	SVT_CHECK(memcmp(peek, part + 11, (size_t)pk) == 0);
	read_full(s, part + 111, 889);
	SVT_CHECK_FILL(part, 1000, 77);

	/* SHUT_WR by the client: 300000 bytes, then EOF, twice */
	size_t total = 0;
	for (;;) {
		ssize_t n = rrecv(s, buf + total, BIG - total, 0);
		RS_OK(n);
		if (n == 0)
			break;
		total += (size_t)n;
	}
	SVT_CHECK_EQ(total, 300000);
	SVT_CHECK_FILL(buf, total, 5);
	SVT_CHECK_EQ(rrecv(s, buf, 10, 0), 0);
	p = (struct pollfd){.fd = s, .events = POLLIN};
	SVT_CHECK_EQ(rpoll(&p, 1, 0), 1);
	SVT_CHECK(p.revents & POLLIN);
	write_full(s, "bye", 3);
	RS_OK(rclose(s));

	/* the client writes after this end closed */
	sig_send(to_child[1], 'A');
	s = raccept(ls, NULL, NULL);
	RS_OK(s);
	RS_OK(rclose(s));
	sig_send(to_child[1], 'C');

	/* data the client reads after this end closed; then data it will not
	 * read (SHUT_RD) */
	write_left_over_and_close(ls, buf, 'D');
	write_left_over_and_close(ls, buf, 'E');

	/* non-blocking connect from the client */
	s = raccept(ls, NULL, NULL);
	RS_OK(s);
	char c = 0;
	SVT_CHECK_EQ(rrecv(s, &c, 1, 0), 1);
	SVT_CHECK_EQ(c, 'z');
	SVT_CHECK_EQ(rsend(s, "Z", 1, 0), 1);
	SVT_CHECK_EQ(rrecv(s, &c, 1, 0), 0); /* the client closes */
	RS_OK(rclose(s));
	RS_OK(rclose(ls));
	free(buf);
	dgram_server();
}

int main(void)
{
	svt_watchdog(28);
	signal(SIGPIPE, SIG_DFL); /* a SIGPIPE would kill the test */
	SVT_CHECK(pipe(to_child) == 0 && pipe(to_parent) == 0);
	pid_t pid = fork();
	SVT_CHECK(pid >= 0);
	if (pid == 0) {
		char x;
		SVT_CHECK(read(to_child[0], &x, 1) == 1 && x == 'X');
		_exit(client());
	}
	server();
	int st = 0;
	SVT_CHECK(waitpid(pid, &st, 0) == pid);
	SVT_CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "client: status 0x%x", st);
	svt_log("ok");
	return 0;
}
