/* A peer that speaks the wire format itself; see wire_peer.h. */
#include "wire_peer.h"
#include "sv_test.h"
#include "transport/transport.h"
#include "transport/registry.h"
#include "transport/auth.h"
#include "shm_connector.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static bool read_full(int fd, void *b, size_t n)
{
	uint8_t *p = b;

	while (n) {
		ssize_t r = recv(fd, p, n, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		p += r;
		n -= (size_t)r;
	}
	return true;
}

bool svt_send_all(int fd, const void *buf, size_t n)
{
	const uint8_t *p = buf;

	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		p += w;
		n -= (size_t)w;
	}
	return true;
}

bool svt_wire_send(int fd, const void *pkt, size_t len)
{
	uint32_t flen = htonl((uint32_t)len);
	struct iovec v[2] = { { &flen, 4 }, { (void *)pkt, len } };
	struct msghdr m = { .msg_iov = v, .msg_iovlen = 2 };

	return sendmsg(fd, &m, MSG_NOSIGNAL) == (ssize_t)(4 + len);
}

long svt_wire_recv(int fd, void *buf, size_t cap, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	uint32_t flen;

	if (timeout_ms >= 0 && poll(&p, 1, timeout_ms) == 0)
		return 0;
	if (!read_full(fd, &flen, 4))
		return -1;
	flen = ntohl(flen);
	SVT_CHECK_MSG(flen && flen <= cap, "frame of %u bytes", flen);
	if (!read_full(fd, buf, flen))
		return -1;
	return (long)flen;
}

/* A HELLO naming the endpoint (claim, port), for the endpoint to_port. */
static void make_hello(struct sv_hello *h, struct in_addr claim, uint16_t port, uint16_t to_port)
{
	struct in6_addr ip = sv_ip_from_v4(claim);
	union ibv_gid g;

	memset(h, 0, sizeof(*h));
	h->magic = htonl(SV_WIRE_MAGIC);
	h->version = htons(SV_WIRE_VERSION);
	sv_gid_encode(&g, &ip, port);
	memcpy(h->gid, g.raw, 16);
	h->to_port = htons(to_port);
	h->from_port = htons(port);
	sv_auth_nonce(h->nonce);
}

void svt_wire_hello_make(struct sv_hello *h, uint16_t port, uint16_t to_port)
{
	make_hello(h, (struct in_addr){ htonl(INADDR_LOOPBACK) }, port, to_port);
}

/* Our HELLO, with our share of the PAKE for the session the connector's
 * nonce names (ours when connecting, theirs, already taken, otherwise);
 * the side that accepts has the session key then. */
static void say_hello(int fd, struct sv_hello *h, struct sv_auth_hs *hs, uint16_t port,
		      uint16_t to_port, const struct sv_hello *theirs)
{
	svt_wire_hello_make(h, port, to_port);
	SVT_CHECK_OK(sv_auth_share(hs, h->share, theirs ? theirs->nonce : h->nonce));
	if (theirs)
		SVT_CHECK_OK(sv_auth_session(hs, theirs->share, false, h, theirs, sizeof(*h)));
	SVT_CHECK(svt_wire_send(fd, h, sizeof(*h)));
}

static void take_hello(int fd, struct sv_hello *h)
{
	SVT_CHECK_EQ(svt_wire_recv(fd, h, sizeof(*h), 10000), (long)sizeof(*h));
	SVT_CHECK_EQ(ntohl(h->magic), SV_WIRE_MAGIC);
	SVT_CHECK_EQ(ntohs(h->version), SV_WIRE_VERSION);
}

/* Our AUTH: the proof of the secret, or (know_secret false) a guess. */
static void say_auth(int fd, const struct sv_auth_hs *hs, bool connecting,
		     const struct sv_hello *mine, const struct sv_hello *theirs, bool know_secret)
{
	struct sv_auth_frame a = { .magic = htonl(SV_AUTH_MAGIC) };

	if (know_secret)
		sv_auth_mac(a.mac, hs, connecting, mine, theirs, sizeof(*mine));
	else
		sv_auth_nonce(a.mac); /* 16 random bytes and zeros: no proof */
	SVT_CHECK(svt_wire_send(fd, &a, sizeof(a)));
}

static void take_auth(int fd, const struct sv_auth_hs *hs, bool connecting,
		      const struct sv_hello *mine, const struct sv_hello *theirs)
{
	uint8_t f[64];
	long n = svt_wire_recv(fd, f, sizeof(f), 10000);

	SVT_CHECK_MSG(n > 0 && sv_auth_verify(f, (size_t)n, hs, connecting, mine, theirs,
					      sizeof(*mine)),
		      "the device's AUTH does not prove the secret");
}

void svt_wire_listen(struct svt_wire_listener *l)
{
	int one = 1;

	SVT_CHECK_OK(sv_auth_init()); /* the secret this user's devices use */
	l->fd = socket(AF_INET, SOCK_STREAM, 0);
	SVT_CHECK(l->fd >= 0);
	setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* a block whose port is free: no context holds it, and none will
	 * while we listen there (blocks are drawn at random; one whose port
	 * is held is passed over) */
	for (uint32_t b = SV_QPN_NBLOCKS - 1; b > SV_QPN_NBLOCKS / 2; b--) {
		struct sockaddr_in sa = { .sin_family = AF_INET,
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
					  .sin_port = htons(sv_qpn_block_port(b)) };

		if (!sa.sin_port || bind(l->fd, (struct sockaddr *)&sa, sizeof(sa)))
			continue;
		SVT_CHECK_OK(listen(l->fd, 8));
		l->qpn = (b << SV_QPN_BLOCK_SHIFT) | 17;
		return;
	}
	SVT_CHECK_MSG(0, "no free port for a fake peer");
}

uint32_t svt_wire_spare_block(void)
{
	for (uint32_t b = SV_QPN_NBLOCKS - 2; b > SV_QPN_NBLOCKS / 2; b--) {
		struct sockaddr_in sa = { .sin_family = AF_INET,
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
					  .sin_port = htons(sv_qpn_block_port(b)) };
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		SVT_CHECK(fd >= 0);
		if (sa.sin_port && !bind(fd, (struct sockaddr *)&sa, sizeof(sa)))
			return b; /* fd stays open, bound, until we exit */
		close(fd);
	}
	SVT_CHECK_MSG(0, "no free port for a block of a peer that is not there");
	return 0;
}

int svt_wire_accept(struct svt_wire_listener *l)
{
	struct sv_hello mine, theirs;
	struct sv_auth_hs hs;
	int fd = accept(l->fd, NULL, NULL), one = 1;

	SVT_CHECK(fd >= 0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	take_hello(fd, &theirs);
	say_hello(fd, &mine, &hs, sv_qpn_port(l->qpn), 0, &theirs);
	/* the device, which connected, proves itself first */
	take_auth(fd, &hs, false, &mine, &theirs);
	say_auth(fd, &hs, false, &mine, &theirs, true);
	return fd;
}

/* A connection to the endpoint of qpn: tcp, or shm (svt_wire_via_shm). */
int svt_wire_dial(uint32_t qpn)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				  .sin_port = htons(sv_qpn_port(qpn)) };
	int fd, one = 1;

	if (svt_wire_via_shm())
		return svt_shm_stream(sv_qpn_port(qpn));
	fd = socket(AF_INET, SOCK_STREAM, 0);
	SVT_CHECK(fd >= 0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	SVT_CHECK_OK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)));
	return fd;
}

bool svt_wire_via_shm(void)
{
	const char *v = getenv("SVT_WIRE_VIA");

	return v && !strcmp(v, "shm");
}

int svt_wire_connect_as(uint32_t qpn, uint16_t claim_port, bool know_secret)
{
	struct sv_hello mine, theirs;
	struct sv_auth_hs hs;
	int fd;

	SVT_CHECK_OK(sv_auth_init());
	fd = svt_wire_dial(qpn);
	say_hello(fd, &mine, &hs, claim_port, sv_qpn_port(qpn), NULL);
	take_hello(fd, &theirs);
	SVT_CHECK_OK(sv_auth_session(&hs, theirs.share, true, &mine, &theirs, sizeof(mine)));
	/* we connected: we prove ourselves first, then the device does */
	say_auth(fd, &hs, true, &mine, &theirs, know_secret);
	if (know_secret)
		take_auth(fd, &hs, true, &mine, &theirs);
	return fd;
}

/* A tcp socket bound to from (port 0) and connected to 127.0.0.1:port. */
static int dial_from(struct in_addr from, uint16_t port)
{
	struct sockaddr_in me = { .sin_family = AF_INET, .sin_addr = from };
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				  .sin_port = htons(port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	SVT_CHECK(fd >= 0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	SVT_CHECK_OK(bind(fd, (struct sockaddr *)&me, sizeof(me)));
	SVT_CHECK_OK(connect(fd, (struct sockaddr *)&to, sizeof(to)));
	return fd;
}

/* Hand the accepted socket a, with the HELLO h (sent as its first frame),
 * to the hand-off socket of endpoint port on 127.0.0.1 (tcp.c's
 * tcp_handoff). */
static void hand_off(int a, const struct sv_hello *h, uint16_t port)
{
	struct {
		uint32_t len;
		struct sv_hello h;
	} __attribute__((packed)) f = { htonl(sizeof(*h)), *h };
	struct in6_addr lo = sv_ip_from_v4((struct in_addr){ htonl(INADDR_LOOPBACK) });
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { &f, sizeof(f) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	struct sockaddr_un sa;
	socklen_t sl;
	int u = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &a, sizeof(int));
	sv_endpoint_unix_name(&sa, &sl, "handoff", &lo, port);
	SVT_CHECK(u >= 0);
	SVT_CHECK_OK(connect(u, (struct sockaddr *)&sa, sl));
	SVT_CHECK_EQ(sendmsg(u, &mh, MSG_NOSIGNAL), (ssize_t)sizeof(f));
	close(u);
	close(a);
}

int svt_wire_connect_spec(const struct svt_wire_spec *s)
{
	struct sv_hello mine, theirs;
	struct sv_auth_hs hs;
	uint16_t to = sv_qpn_port(s->qpn);
	long n;
	int fd;

	SVT_CHECK_OK(sv_auth_init());
	make_hello(&mine, s->claim, s->claim_port, to);
	SVT_CHECK_OK(sv_auth_share(&hs, mine.share, mine.nonce));
	if (s->handoff) {
		struct sockaddr_in sa = { .sin_family = AF_INET,
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t sl = sizeof(sa);
		int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), acc;

		SVT_CHECK(l >= 0);
		SVT_CHECK_OK(bind(l, (struct sockaddr *)&sa, sizeof(sa)));
		SVT_CHECK_OK(listen(l, 1));
		SVT_CHECK_OK(getsockname(l, (struct sockaddr *)&sa, &sl));
		fd = dial_from(s->from, ntohs(sa.sin_port));
		acc = accept(l, NULL, NULL);
		SVT_CHECK(acc >= 0);
		close(l);
		hand_off(acc, &mine, to);
	} else {
		fd = dial_from(s->from, s->port ? s->port : to);
		SVT_CHECK(svt_wire_send(fd, &mine, sizeof(mine)));
	}
	/* the device's HELLO, or the end of the connection */
	n = svt_wire_recv(fd, &theirs, sizeof(theirs), 10000);
	if (n < 0) {
		close(fd);
		return -1;
	}
	SVT_CHECK_EQ(n, (long)sizeof(theirs));
	SVT_CHECK_EQ(ntohl(theirs.magic), SV_WIRE_MAGIC);
	SVT_CHECK_OK(sv_auth_session(&hs, theirs.share, true, &mine, &theirs, sizeof(mine)));
	/* we connected: we prove ourselves first, then the device does */
	say_auth(fd, &hs, true, &mine, &theirs, s->know_secret);
	if (s->know_secret)
		take_auth(fd, &hs, true, &mine, &theirs);
	return fd;
}

int svt_wire_connect(uint32_t qpn, uint16_t claim_port)
{
	return svt_wire_connect_as(qpn, claim_port, true);
}

size_t svt_wire_bth_flags(uint8_t *pkt, uint8_t opcode, uint8_t flags, uint32_t dqpn,
			  uint32_t psn)
{
	struct sv_bth *bth = (void *)pkt;

	memset(bth, 0, sizeof(*bth));
	bth->opcode = opcode;
	bth->flags = flags;
	bth->pkey = 0xffff;
	bth->dqpn = htonl(dqpn & SV_PSN_MASK);
	bth->psn = htonl(psn & SV_PSN_MASK);
	return sizeof(*bth);
}

size_t svt_wire_bth(uint8_t *pkt, uint8_t opcode, uint32_t dqpn, uint32_t psn)
{
	const struct sv_opcode_info *op = sv_opcode_info(opcode);
	/* as requesters do, the last packet of a SEND or WRITE asks for its
	 * ACK (a responder answers only what is asked, as rxe) */
	bool ask = op && (op->mask & SV_OPF_LAST) && (op->mask & (SV_OPF_SEND | SV_OPF_WRITE));

	return svt_wire_bth_flags(pkt, opcode, ask ? SV_BTH_ACKREQ : 0, dqpn, psn);
}
