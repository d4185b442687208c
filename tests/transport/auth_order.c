/*
 * transport_auth_order: a party that has not proved the secret gets nothing
 * keyed from a device (src/transport/auth.h, docs/SECURITY.md), in either
 * role.
 *
 * An outsider connects to a device's endpoint (over tcp, or over shm with
 * SVT_WIRE_VIA=shm):
 *   - a HELLO whose share of the PAKE is no group element: the connection
 *     is closed and not one byte comes back;
 *   - a HELLO with a valid share (a random element: what someone guessing
 *     the secret sends): exactly one frame comes back, the device's HELLO
 *     (magic, version, its endpoint, a fresh nonce and a share that is a
 *     valid element, which is uniformly random whatever the secret), and
 *     then nothing, the connection open, waiting for the outsider's AUTH
 *     (before, the device's AUTH came at once: an HMAC keyed by a fast hash
 *     of the secret, over bytes the outsider chose, to test guesses against
 *     offline); an AUTH that proves nothing then closes it, with nothing
 *     more sent.  Twice: the device's nonce and share are fresh each time.
 *   - a peer that holds the secret proves it first and then gets the
 *     device's AUTH, which proves the device's (wire_peer.c checks it).
 * A device connects to an impostor (a listener where a QP's peer is
 * reached, that does not hold the secret): the device sends its HELLO,
 * then, on the impostor's HELLO, its AUTH (one guess's worth to whoever
 * made the share: the PAKE's minimum) and nothing else; the SEND its QP
 * posted never arrives, and an AUTH that proves nothing closes the
 * connection.
 */
#include "sv_test.h"
#include "wire_peer.h"
#include "common/util.h"
#include "transport/transport.h"
#include "transport/registry.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static uint8_t frame[4096];

/* An outsider's HELLO to the endpoint of qpn; `valid`: a share that is a
 * group element (random), else one that is not. */
static int outsider_hello(uint32_t qpn, bool valid, struct sv_hello *h)
{
	int fd = svt_wire_dial(qpn);

	svt_wire_hello_make(h, 40001, sv_qpn_port(qpn));
	if (valid)
		crypto_core_ristretto255_random(h->share);
	else
		memset(h->share, 0xff, sizeof(h->share)); /* not canonical */
	SVT_CHECK(svt_wire_send(fd, h, sizeof(*h)));
	return fd;
}

/* A HELLO as the device sends it: the right size, magic, version, a fresh
 * nonce (not ours) and a valid share. */
static void check_hello(long n, const struct sv_hello *h, const struct sv_hello *ours)
{
	SVT_CHECK_EQ(n, (long)sizeof(*h));
	SVT_CHECK_EQ(ntohl(h->magic), SV_WIRE_MAGIC);
	SVT_CHECK_EQ(ntohs(h->version), SV_WIRE_VERSION);
	if (ours)
		SVT_CHECK(memcmp(h->nonce, ours->nonce, sizeof(h->nonce)) != 0);
	SVT_CHECK(crypto_core_ristretto255_is_valid_point(h->share));
}

/* An AUTH that proves nothing (the right size and magic, a random MAC). */
static void bogus_auth(int fd)
{
	struct sv_auth_frame a = { .magic = htonl(SV_AUTH_MAGIC) };

	randombytes_buf(a.mac, sizeof(a.mac));
	SVT_CHECK(svt_wire_send(fd, &a, sizeof(a)));
}

/* The device as the side that accepts. */
static void device_accepts(uint32_t qpn)
{
	struct sv_hello mine, theirs, first;
	long n;
	int fd;

	/* a share that is no element: closed, nothing said */
	fd = outsider_hello(qpn, false, &mine);
	SVT_CHECK_MSG(svt_wire_recv(fd, frame, sizeof(frame), 5000) == -1,
		      "the device answered a HELLO whose share is no element");
	close(fd);

	for (int round = 0; round < 2; round++) {
		fd = outsider_hello(qpn, true, &mine);
		n = svt_wire_recv(fd, &theirs, sizeof(theirs), 5000);
		check_hello(n, &theirs, &mine);
		if (round == 0)
			first = theirs;
		else
			SVT_CHECK(memcmp(first.nonce, theirs.nonce, sizeof(first.nonce)) != 0 &&
				  memcmp(first.share, theirs.share, sizeof(first.share)) != 0);
		/* the HELLO and nothing else: no AUTH before ours */
		n = svt_wire_recv(fd, frame, sizeof(frame), 300);
		SVT_CHECK_MSG(n == 0, "the device sent a frame of %ld bytes after its HELLO to a "
				      "peer that proved nothing", n);
		bogus_auth(fd);
		SVT_CHECK_MSG(svt_wire_recv(fd, frame, sizeof(frame), 5000) == -1,
			      "the device answered an AUTH that proves nothing");
		close(fd);
	}
	svt_log("an outsider's HELLO draws the device's HELLO only; a share that is no element, "
		"nothing; a wrong AUTH, the end");

	/* a peer with the secret: it proves itself, then the device does */
	fd = svt_wire_connect(qpn, 40002);
	SVT_CHECK_EQ(svt_wire_recv(fd, frame, sizeof(frame), 200), 0); /* and it stays */
	close(fd);
}

/* The device as the side that connects, to an impostor at l. */
static void device_connects(struct svt_dev *d, struct svt_wire_listener *l)
{
	struct svt_qp_init qi;
	struct svt_conn c;
	struct sv_hello mine, theirs;
	struct sv_auth_frame a;
	struct ibv_cq *cq = svt_create_cq(d->ctx, 4, NULL);
	uint8_t *buf = svt_alloc(64);
	struct ibv_mr *mr = svt_reg_mr(d->pd, buf, 64, SVT_ACCESS_ALL);
	int fd, one = 1;
	long n;

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *qp = svt_create_qp(d->pd, cq, cq, &qi);

	svt_conn_default(&c, IBV_QPT_RC);
	c.timeout = 18; /* 1 s: no retransmission during the exchange */
	svt_qp_connect(qp, &c, &d->gid, l->qpn);
	SVT_CHECK_OK(svt_post_send(qp, 1, IBV_WR_SEND, IBV_SEND_SIGNALED, buf, 64, mr->lkey, 0, 0,
				   0));
	fd = accept(l->fd, NULL, NULL);
	SVT_CHECK(fd >= 0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	n = svt_wire_recv(fd, &theirs, sizeof(theirs), 5000);
	check_hello(n, &theirs, NULL);
	/* nothing but the HELLO before ours */
	SVT_CHECK_EQ(svt_wire_recv(fd, frame, sizeof(frame), 200), 0);
	svt_wire_hello_make(&mine, sv_qpn_port(l->qpn), 0);
	crypto_core_ristretto255_random(mine.share);
	SVT_CHECK(svt_wire_send(fd, &mine, sizeof(mine)));
	/* the device proves itself first: its AUTH, and nothing behind it */
	n = svt_wire_recv(fd, &a, sizeof(a), 5000);
	SVT_CHECK_MSG(n == (long)sizeof(a) && ntohl(a.magic) == SV_AUTH_MAGIC,
		      "no AUTH from the device that connected (%ld bytes)", n);
	n = svt_wire_recv(fd, frame, sizeof(frame), 300);
	SVT_CHECK_MSG(n == 0, "the device sent a frame of %ld bytes to a peer that proved "
			      "nothing", n);
	bogus_auth(fd);
	SVT_CHECK_MSG(svt_wire_recv(fd, frame, sizeof(frame), 5000) == -1,
		      "the device went on with a peer that proved nothing");
	close(fd);
	svt_log("a device that connects sends its HELLO and AUTH, not its SEND, to an impostor");
	SVT_CHECK_OK(ibv_destroy_qp(qp));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	free(buf);
}

int main(void)
{
	struct svt_wire_listener l;
	struct svt_dev d;
	struct svt_qp_init qi;

	svt_watchdog(60);
	SVT_CHECK(sodium_init() >= 0);
	setenv("SOFTVERBS_PORT", "0", 1);
	/* the impostor is reached over tcp; the outsiders come over tcp, or
	 * over shm (SVT_WIRE_VIA=shm), for which the device listens there */
	setenv("SOFTVERBS_TRANSPORT", svt_wire_via_shm() ? "auto" : "tcp", 1);
	svt_wire_listen(&l);
	svt_dev_open(&d);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 4, NULL);

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *qp = svt_create_qp(d.pd, cq, cq, &qi);

	device_accepts(qp->qp_num);
	device_connects(&d, &l);
	SVT_CHECK_OK(ibv_destroy_qp(qp));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&d);
	close(l.fd);
	return 0;
}
