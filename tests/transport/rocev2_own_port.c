/*
 * RoCEv2 datagrams between the contexts of one host reach their owner at
 * its own port (src/transport/rocev2.c), not through UDP 4791, whose group
 * every context of the host shares and where the kernel picks a member for
 * each flow by a hash of its ports.
 *
 * Eight sockets of the test join 127.0.0.1:4791's group (SO_REUSEPORT, as
 * a context does) and never read: stand-ins for contexts that stopped (a
 * program in a debugger, SIGSTOP).  A flow the kernel gave one of them was
 * lost, for as long as it stayed there.  Two contexts of this process:
 *   1. each has a socket at its own port (a bind there is refused);
 *   2. an RC pair moves 4 MiB by WRITE and 64 SENDs, data checked: its
 *      packets and its ACKs all reached their owners;
 *   3. a UD QP sends 200 messages round robin to 16 UD QPs of the other
 *      context (over its 8 source ports), one at a time: all delivered;
 *   4. a UD SEND this test encodes itself (roce_wire.c) for a QP of the
 *      second context, sent to the first one's own port: dropped there,
 *      not passed on; the same datagram encoded for the second's port and
 *      sent there: delivered;
 *   and the stand-ins received nothing.
 * argv[1] "forwarding", run with SOFTVERBS_ROCEV2_OWN_PORT=0: no port of
 * its own (1.'s bind succeeds), 2. is skipped, and 3.'s datagrams, sent
 * without waiting for each, went to 4791, where the stand-ins, 8 of its 10
 * members, took some (every one of 8 flows missing them: 0.2^8).  That is
 * what the default run would see without its own ports.
 *
 * In a network namespace of its own (root): other tests' datagrams to
 * 127.0.0.1:4791 (a fake peer's, or for a context that closed) would reach
 * the stand-ins too.  Not root: skipped.
 */
#include "sv_test.h"
#include "transport/roce_wire.h"
#include "wire/opcode.h"
#include "wire/wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#define NSTAND 8
#define NQP 16
#define MSGS 200
#define LEN 256
#define GRH 40
#define QKEY 0x11111111u
#define SGID 3 /* the IPv4 address's RoCE v2 GID */
#define RC_BYTES (4u << 20)
#define SENDS 64

static int stand[NSTAND];

static int udp_socket(uint16_t port, bool shared)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	int one = 1, fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	SVT_CHECK_GE(fd, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (shared)
		SVT_CHECK_OK(setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int e = errno;

		close(fd);
		return -e;
	}
	return fd;
}

/* Datagrams the stand-ins hold (read and counted). */
static int stand_ins_got(void)
{
	uint8_t b[65536];
	int n = 0;

	for (int i = 0; i < NSTAND; i++)
		while (recv(stand[i], b, sizeof(b), MSG_DONTWAIT) >= 0)
			n++;
	return n;
}

/* The UDP port of the context that owns qpn: its block's (registry.h). */
static uint16_t block_port(uint32_t qpn)
{
	const char *b = getenv("SOFTVERBS_PORT_BASE");

	return (uint16_t)((b ? atoi(b) : 61000) + (int)(qpn >> 14));
}

/* 1: is the port of ctx's block taken (by its own socket)? */
static bool own_port_bound(struct ibv_qp *qp)
{
	int fd = udp_socket(block_port(qp->qp_num), false);

	if (fd >= 0) {
		close(fd);
		return false;
	}
	SVT_CHECK_MSG(fd == -EADDRINUSE, "bind 127.0.0.1:%u: %s", block_port(qp->qp_num),
		      strerror(-fd));
	return true;
}

/* 2: WRITEs and SENDs over an RC pair, data checked. */
static void rc_traffic(struct svt_pair *p)
{
	uint8_t *a = p->a.buf, *b = p->b.buf;
	struct ibv_wc wc[SENDS];

	svt_fill(a, RC_BYTES, 7);
	for (uint32_t off = 0; off < RC_BYTES; off += 1u << 20)
		SVT_CHECK_OK(svt_post_send(p->a.qp, off, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED,
					   a + off, 1u << 20, p->a.mr->lkey,
					   (uintptr_t)b + off, p->b.mr->rkey, 0));
	svt_poll_ok(p->a.send_cq, (int)(RC_BYTES >> 20), wc, 0);
	SVT_CHECK_FILL(b, RC_BYTES, 7);
	for (int i = 0; i < SENDS; i++) {
		SVT_CHECK_OK(svt_post_recv(p->b.qp, (uint64_t)i, b + (size_t)i * 4096, 4096,
					   p->b.mr->lkey));
		svt_fill(a + (size_t)i * 4096, 4096, 100u + (uint32_t)i);
		SVT_CHECK_OK(svt_post_send(p->a.qp, (uint64_t)i, IBV_WR_SEND, IBV_SEND_SIGNALED,
					   a + (size_t)i * 4096, 4096, p->a.mr->lkey, 0, 0, 0));
	}
	svt_poll_ok(p->a.send_cq, SENDS, wc, 0);
	svt_poll_ok(p->b.send_cq, SENDS, wc, 0); /* (one CQ a side) */
	for (int i = 0; i < SENDS; i++)
		SVT_CHECK_FILL(b + (size_t)i * 4096, 4096, 100u + (uint32_t)i);
}

/* A UD SEND of LEN bytes (pattern seed) to dqpn, encoded as RoCEv2 for
 * 127.0.0.1:port and sent there from a socket of the test. */
static void forge_ud_send(uint32_t dqpn, uint16_t port, uint32_t seed)
{
	uint8_t pkt[sizeof(struct sv_bth) + sizeof(struct sv_deth) + LEN], dg[sizeof(pkt) + 64];
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr_in me;
	socklen_t ml = sizeof(me);
	struct sv_bth *b = (struct sv_bth *)pkt;
	struct sv_deth *d = (struct sv_deth *)(b + 1);
	struct sv_roce_path path = { .dport = port };
	int fd = udp_socket(0, false);
	size_t n;

	SVT_CHECK_GE(fd, 0);
	SVT_CHECK_OK(getsockname(fd, (struct sockaddr *)&me, &ml));
	memset(pkt, 0, sizeof(pkt));
	b->opcode = SV_OP_UD | SV_OP_SEND_ONLY;
	b->pkey = 0xffff;
	b->dqpn = htonl(dqpn);
	d->qkey = htonl(QKEY);
	d->sqpn = htonl(0x123);
	svt_fill(d + 1, LEN, seed);
	memcpy(path.src, &me.sin_addr.s_addr, 4);
	memcpy(path.dst, &to.sin_addr.s_addr, 4);
	path.sport = ntohs(me.sin_port);
	n = sv_roce_encode(&path, pkt, sizeof(pkt), dg, sizeof(dg));
	SVT_CHECK(n > 0);
	SVT_CHECK_EQ(sendto(fd, dg, n, 0, (struct sockaddr *)&to, sizeof(to)), (ssize_t)n);
	close(fd);
}

/* 4: a datagram for y's QP at x's own port is not passed on; at y's it
 * is taken. */
static void forged_at_own_ports(struct ibv_qp *xqp, struct ibv_qp *yqp, struct ibv_cq *ycq,
				uint8_t *rbuf)
{
	struct ibv_wc wc;

	forge_ud_send(yqp->qp_num, block_port(xqp->qp_num), 77);
	svt_expect_no_wc(ycq, 300);
	forge_ud_send(yqp->qp_num, block_port(yqp->qp_num), 78);
	svt_poll_ok(ycq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.src_qp, 0x123);
	SVT_CHECK_EQ(wc.byte_len, GRH + LEN);
	SVT_CHECK_FILL(rbuf + (size_t)wc.wr_id * (GRH + LEN) + GRH, LEN, 78);
}

/* 3: UD messages from one context's QP to NQP of the other's; the number
 * delivered (each waited for, unless forwarding). */
static int ud_traffic(struct svt_side *x, struct svt_side *y, bool forwarding)
{
	struct ibv_cq *xcq = svt_create_cq(x->ctx, 64, NULL), *ycq = svt_create_cq(y->ctx, 256, NULL);
	uint8_t *sbuf = svt_alloc(LEN), *rbuf = svt_alloc((size_t)MSGS * (GRH + LEN));
	struct ibv_mr *smr = svt_reg_mr(x->pd, sbuf, LEN, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *rmr = svt_reg_mr(y->pd, rbuf, (size_t)MSGS * (GRH + LEN),
					IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp *xqp = svt_ud_qp(x->pd, xcq, xcq, QKEY, SGID), *yqp[NQP];
	struct ibv_ah_attr aa;
	struct svt_conn c;
	struct ibv_ah *ah;
	struct ibv_wc wc;
	int delivered = 0;

	for (int q = 0; q < NQP; q++)
		yqp[q] = svt_ud_qp(y->pd, ycq, ycq, QKEY, SGID);
	for (int m = 0; m < MSGS; m++)
		SVT_CHECK_OK(svt_post_recv(yqp[m % NQP], (uint64_t)m, rbuf + (size_t)m * (GRH + LEN),
					   GRH + LEN, rmr->lkey));
	svt_conn_default(&c, IBV_QPT_UD);
	c.sgid_index = SGID;
	svt_ah_attr(&aa, &y->gid, &c);
	ah = ibv_create_ah(x->pd, &aa);
	SVT_CHECK_PTR(ah);
	for (int m = 0; m < MSGS; m++) {
		svt_fill(sbuf, LEN, (uint32_t)m);
		SVT_CHECK_OK(svt_post_ud_send(xqp, (uint64_t)m, IBV_SEND_SIGNALED, sbuf, LEN,
					      smr->lkey, ah, yqp[m % NQP]->qp_num, QKEY));
		svt_poll_ok(xcq, 1, &wc, 0);
		if (forwarding)
			continue;
		/* (each QP's receives complete in the order posted) */
		svt_poll_ok(ycq, 1, &wc, 0);
		SVT_CHECK_EQ(wc.wr_id, (uint64_t)m);
		SVT_CHECK_EQ(wc.byte_len, GRH + LEN);
		SVT_CHECK_FILL(rbuf + (size_t)m * (GRH + LEN) + GRH, LEN, (uint32_t)m);
		delivered++;
	}
	if (forwarding) {
		svt_sleep_ms(500); /* what was passed on arrives */
		while (ibv_poll_cq(ycq, 1, &wc) == 1)
			delivered += wc.status == IBV_WC_SUCCESS;
	} else {
		/* a receive of its own, as 3. took every one posted */
		SVT_CHECK_OK(svt_post_recv(yqp[0], 0, rbuf, GRH + LEN, rmr->lkey));
		forged_at_own_ports(xqp, yqp[0], ycq, rbuf);
	}
	SVT_CHECK_OK(ibv_destroy_ah(ah));
	for (int q = 0; q < NQP; q++)
		SVT_CHECK_OK(ibv_destroy_qp(yqp[q]));
	SVT_CHECK_OK(ibv_destroy_qp(xqp));
	SVT_CHECK_OK(ibv_dereg_mr(smr));
	SVT_CHECK_OK(ibv_dereg_mr(rmr));
	SVT_CHECK_OK(ibv_destroy_cq(xcq));
	SVT_CHECK_OK(ibv_destroy_cq(ycq));
	free(sbuf);
	free(rbuf);
	return delivered;
}

int main(int argc, char **argv)
{
	bool forwarding = argc > 1 && !strcmp(argv[1], "forwarding");
	struct svt_pair_opts o;
	struct svt_pair p;
	int delivered, got;

	svt_watchdog(110);
	if (!svt_private_netns())
		svt_skip("not root: no network namespace of its own, where 4791 hears this "
			 "test's datagrams only");
	setenv("SOFTVERBS_TRANSPORT", "rocev2", 1);
	if (forwarding)
		setenv("SOFTVERBS_ROCEV2_OWN_PORT", "0", 1);
	for (int i = 0; i < NSTAND; i++) {
		stand[i] = udp_socket(4791, true);
		if (stand[i] < 0)
			svt_skip("127.0.0.1:4791 is held by a socket without SO_REUSEPORT");
	}
	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.buf_len = RC_BYTES;
	o.conn.sgid_index = SGID;
	svt_pair_create(&p, IBV_QPT_RC, &o);

	SVT_CHECK_MSG(own_port_bound(p.a.qp) == !forwarding && own_port_bound(p.b.qp) == !forwarding,
		      "a context's own port %s", forwarding ? "bound" : "not bound");
	if (!forwarding) {
		rc_traffic(&p);
		svt_log("RC: 4 MiB WRITE and %d SENDs, data checked", SENDS);
	}
	delivered = ud_traffic(&p.a, &p.b, forwarding);
	got = stand_ins_got();
	svt_log("UD: %d of %d messages delivered; the stand-ins on 4791 received %d datagrams",
		delivered, MSGS, got);
	if (forwarding) {
		SVT_CHECK_MSG(got > 0, "no datagram reached 4791's other members: the check "
				       "cannot tell own ports from 4791");
	} else {
		SVT_CHECK_EQ(delivered, MSGS);
		SVT_CHECK_EQ(got, 0);
	}
	svt_pair_destroy(&p);
	for (int i = 0; i < NSTAND; i++)
		close(stand[i]);
	svt_private_netns_done();
	return 0;
}
