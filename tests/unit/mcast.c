/*
 * unit_mcast: UD multicast (ibv_attach_mcast / ibv_detach_mcast).
 *
 *   - Datagrams sent to a multicast GID with the multicast QPN reach every
 *     attached QP, the sender's own included (multicast loopback), with a
 *     GRH whose source is the sender's port GID and whose destination is
 *     the group, src_qp the sender's QPN, the immediate data and the bytes;
 *     a QP not attached, or detached, gets none; a wrong Q_Key is dropped.
 *   - Each form of multicast GID: IPv4-mapped (rdma_cm's for RoCE v2),
 *     ff0e::ffff:a.b.c.d (RoCE v1) and one with no IPv4 group in it.
 *   - A datagram on the group's UDP port without the secret's MAC is
 *     dropped.
 *   - The errors of Linux's verbs: EINVAL for a QP that is not UD, a GID
 *     that is not multicast, detaching what is not attached; attaching
 *     twice is a no-op; a QP still attached cannot be destroyed (EBUSY);
 *     the limits query_device reports.
 *   - A QP created with IBV_QP_CREATE_BLOCK_SELF_MCAST_LB does not get its
 *     own datagrams; another attached QP does.
 * The group is drawn from the process ID, so that tests running at the
 * same time use different groups.
 */
#include "sv_test.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#define N 8
#define LEN 512
#define QKEY 0x11110000u

static union ibv_gid mgid_v4(uint8_t form, uint32_t ip)
{
	union ibv_gid g = { .raw = { [10] = 0xff, [11] = 0xff } };

	if (form == 1) { /* RoCE v1: ff0e::ffff:a.b.c.d */
		g.raw[0] = 0xff;
		g.raw[1] = 0x0e;
	}
	ip = htonl(ip);
	memcpy(g.raw + 12, &ip, 4);
	return g;
}

/* Post `n` receives of LEN + GRH on side s's QP. */
static void post_recvs(struct svt_side *s, int n)
{
	for (int i = 0; i < n; i++)
		SVT_CHECK_OK(svt_post_recv(s->qp, 100 + (uint64_t)i,
					   (uint8_t *)s->buf + (size_t)i * (LEN + 40), LEN + 40,
					   s->mr->lkey));
}

/* N datagrams from a to the group: each of the `to` sides receives all N. */
static void send_and_check(struct svt_pair *p, struct ibv_ah *ah, const union ibv_gid *mgid,
			   struct svt_side **to, int nto, uint32_t seed)
{
	uint8_t *src = (uint8_t *)p->a.buf + 32 * 1024;
	struct ibv_wc wc[N];

	for (int i = 0; i < nto; i++)
		post_recvs(to[i], N);
	for (int i = 0; i < N; i++) {
		struct ibv_send_wr wr = { .wr_id = (uint64_t)i, .opcode = IBV_WR_SEND_WITH_IMM,
					  .send_flags = IBV_SEND_SIGNALED,
					  .imm_data = htonl(seed + (uint32_t)i) }, *bad;
		struct ibv_sge sge = { (uintptr_t)(src + i * LEN), LEN, p->a.mr->lkey };

		svt_fill(src + i * LEN, LEN, seed + (uint32_t)i);
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = 0xffffff;
		wr.wr.ud.remote_qkey = QKEY;
		SVT_CHECK_OK(ibv_post_send(p->a.qp, &wr, &bad));
	}
	svt_poll_ok(p->a.send_cq, N, wc, 0);
	for (int s = 0; s < nto; s++) {
		struct svt_side *r = to[s];
		struct ibv_cq *cq = r->recv_cq;

		svt_poll_ok(cq, N, wc, 5000);
		for (int i = 0; i < N; i++) {
			const uint8_t *b = (uint8_t *)r->buf + (wc[i].wr_id - 100) * (LEN + 40);
			const struct ibv_grh *grh = (const void *)b;

			SVT_CHECK_EQ(wc[i].opcode, IBV_WC_RECV);
			SVT_CHECK_EQ(wc[i].byte_len, LEN + 40);
			SVT_CHECK(wc[i].wc_flags & IBV_WC_GRH);
			SVT_CHECK(wc[i].wc_flags & IBV_WC_WITH_IMM);
			SVT_CHECK_EQ(wc[i].src_qp, p->a.qp->qp_num);
			/* datagrams of one sender to one group keep their order */
			SVT_CHECK_EQ(ntohl(wc[i].imm_data), seed + (uint32_t)i);
			SVT_CHECK_MEM(grh->sgid.raw, p->a.gid.raw, 16);
			SVT_CHECK_MEM(grh->dgid.raw, mgid->raw, 16);
			SVT_CHECK_FILL(b + 40, LEN, seed + (uint32_t)i);
		}
	}
}

static void test_delivery(void)
{
	struct svt_pair_opts o;
	struct svt_pair p;
	struct svt_dev c;
	struct ibv_cq *ccq;
	struct ibv_qp *cqp;
	uint32_t base = 0xefc00000u | ((uint32_t)getpid() & 0xffff) << 4;
	union ibv_gid g4 = mgid_v4(0, base + 1), g1 = mgid_v4(1, base + 2), g6 = { 0 };
	struct ibv_ah_attr aa;
	struct ibv_ah *ah;

	/* an IPv6 multicast GID with no IPv4 group in it */
	g6.raw[0] = 0xff;
	g6.raw[1] = 0x12;
	memcpy(g6.raw + 8, &base, 4);
	g6.raw[15] = 7;

	svt_pair_opts_default(&o, IBV_QPT_UD);
	o.conn.qkey = QKEY;
	o.buf_len = 64 * 1024;
	o.separate_cqs = true;
	svt_pair_create(&p, IBV_QPT_UD, &o);
	/* a third UD QP of its own context, never attached */
	svt_dev_open(&c);
	ccq = svt_create_cq(c.ctx, 64, NULL);
	struct svt_qp_init qi;
	struct svt_conn cc;

	svt_qp_init_default(&qi, IBV_QPT_UD);
	cqp = svt_create_qp(c.pd, ccq, ccq, &qi);
	svt_conn_default(&cc, IBV_QPT_UD);
	cc.qkey = QKEY;
	svt_qp_connect(cqp, &cc, NULL, 0);
	void *cbuf = svt_alloc(4096);
	struct ibv_mr *cmr = svt_reg_mr(c.pd, cbuf, 4096, IBV_ACCESS_LOCAL_WRITE);

	SVT_CHECK_OK(svt_post_recv(cqp, 1, cbuf, 4096, cmr->lkey));

	const union ibv_gid *groups[] = { &g4, &g1, &g6 };

	for (int k = 0; k < 3; k++) {
		const union ibv_gid *g = groups[k];
		struct svt_side *both[] = { &p.a, &p.b }, *only_a[] = { &p.a };

		SVT_CHECK_OK(ibv_attach_mcast(p.a.qp, g, 0));
		SVT_CHECK_OK(ibv_attach_mcast(p.b.qp, g, 0xc001)); /* a RoCE port ignores the LID */
		SVT_CHECK_OK(ibv_attach_mcast(p.b.qp, g, 0)); /* again: nothing changes */
		svt_ah_attr(&aa, g, NULL);
		ah = ibv_create_ah(p.a.pd, &aa);
		SVT_CHECK_PTR(ah);
		send_and_check(&p, ah, g, both, 2, 1000u * (uint32_t)(k + 1));
		svt_expect_no_wc(ccq, 100);

		/* detached: b gets nothing more, a still does */
		SVT_CHECK_OK(ibv_detach_mcast(p.b.qp, g, 0));
		SVT_CHECK_EQ(ibv_detach_mcast(p.b.qp, g, 0), EINVAL);
		post_recvs(&p.b, 1);
		send_and_check(&p, ah, g, only_a, 1, 5000u * (uint32_t)(k + 1));
		svt_expect_no_wc(p.b.recv_cq, 100);
		/* that receive is still posted: flush it with the next round */
		SVT_CHECK_OK(ibv_attach_mcast(p.b.qp, g, 0));
		{
			struct ibv_send_wr wr = { .opcode = IBV_WR_SEND, .num_sge = 1 }, *bad;
			struct ibv_sge sge = { (uintptr_t)p.a.buf, 16, p.a.mr->lkey };
			struct ibv_wc wc;

			post_recvs(&p.a, 1);
			wr.sg_list = &sge;
			wr.send_flags = IBV_SEND_SIGNALED;
			wr.wr.ud.ah = ah;
			wr.wr.ud.remote_qpn = 0xffffff;
			wr.wr.ud.remote_qkey = QKEY + 1; /* a wrong Q_Key: dropped everywhere */
			SVT_CHECK_OK(ibv_post_send(p.a.qp, &wr, &bad));
			svt_poll_ok(p.a.send_cq, 1, &wc, 0);
			wr.wr.ud.remote_qkey = QKEY;
			SVT_CHECK_OK(ibv_post_send(p.a.qp, &wr, &bad));
			svt_poll_ok(p.a.send_cq, 1, &wc, 0);
			svt_poll_ok(p.a.recv_cq, 1, &wc, 5000);
			SVT_CHECK_EQ(wc.byte_len, 16 + 40);
			svt_poll_ok(p.b.recv_cq, 1, &wc, 5000);
			SVT_CHECK_EQ(wc.byte_len, 16 + 40);
			svt_expect_no_wc(p.a.recv_cq, 100);
		}
		SVT_CHECK_OK(ibv_detach_mcast(p.a.qp, g, 0));
		SVT_CHECK_OK(ibv_detach_mcast(p.b.qp, g, 0));
		SVT_CHECK_OK(ibv_destroy_ah(ah));
	}
	svt_log("datagrams to 3 kinds of multicast GID reached every attached QP, loopback included");

	/* a datagram on the group's port without the secret: dropped */
	{
		int fd = socket(AF_INET, SOCK_DGRAM, 0);
		struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(4791) };
		uint8_t forged[64 + 12 + 8 + 16] = { 'S', 'V', 'M', 'C' };
		struct in_addr lo = { htonl(INADDR_LOOPBACK) };
		struct svt_side *only_b[] = { &p.b };
		struct ibv_wc wc;

		SVT_CHECK_OK(ibv_attach_mcast(p.b.qp, &g4, 0));
		memcpy(&to.sin_addr, g4.raw + 12, 4);
		memcpy(forged + 4, g4.raw, 16);
		SVT_CHECK_GE(fd, 0);
		SVT_CHECK_OK(setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &lo, sizeof(lo)));
		post_recvs(&p.b, 1);
		SVT_CHECK_EQ(sendto(fd, forged, sizeof(forged), 0, (struct sockaddr *)&to, sizeof(to)),
			     (ssize_t)sizeof(forged));
		close(fd);
		svt_expect_no_wc(p.b.recv_cq, 200);
		/* the posted receive takes the first real one */
		svt_ah_attr(&aa, &g4, NULL);
		ah = ibv_create_ah(p.a.pd, &aa);
		SVT_CHECK_PTR(ah);
		{
			struct ibv_send_wr wr = { .opcode = IBV_WR_SEND, .num_sge = 1,
						  .send_flags = IBV_SEND_SIGNALED }, *bad;
			struct ibv_sge sge = { (uintptr_t)p.a.buf, 16, p.a.mr->lkey };

			wr.sg_list = &sge;
			wr.wr.ud.ah = ah;
			wr.wr.ud.remote_qpn = 0xffffff;
			wr.wr.ud.remote_qkey = QKEY;
			SVT_CHECK_OK(ibv_post_send(p.a.qp, &wr, &bad));
			svt_poll_ok(p.a.send_cq, 1, &wc, 0);
			svt_poll_ok(p.b.recv_cq, 1, &wc, 5000);
		}
		(void)only_b;
		/* attached, it cannot be destroyed */
		SVT_CHECK_EQ(ibv_destroy_qp(p.b.qp), EBUSY);
		SVT_CHECK_OK(ibv_detach_mcast(p.b.qp, &g4, 0));
		SVT_CHECK_OK(ibv_destroy_ah(ah));
		svt_log("a datagram without the secret's MAC was dropped");
	}
	SVT_CHECK_OK(ibv_destroy_qp(cqp));
	SVT_CHECK_OK(ibv_destroy_cq(ccq));
	SVT_CHECK_OK(ibv_dereg_mr(cmr));
	free(cbuf);
	svt_dev_close(&c);
	svt_pair_destroy(&p);
}

/* BLOCK_SELF_MCAST_LB: the sending QP does not get its own datagram; another
 * attached QP of the same context does. */
static void test_block_self(void)
{
	struct svt_dev d;
	struct ibv_cq *cq;
	struct ibv_qp *q[2];
	struct svt_conn c;
	union ibv_gid g = mgid_v4(0, 0xefc20000u | (((uint32_t)getpid() & 0xffff) << 4) | 3);
	uint8_t *buf = svt_alloc(8192);
	struct ibv_mr *mr;
	struct ibv_ah_attr aa;
	struct ibv_ah *ah;
	struct ibv_wc wc;

	svt_dev_open(&d);
	cq = svt_create_cq(d.ctx, 64, NULL);
	mr = svt_reg_mr(d.pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE);
	svt_conn_default(&c, IBV_QPT_UD);
	c.qkey = QKEY;
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_init_attr_ex ia = {
			.qp_type = IBV_QPT_UD, .send_cq = cq, .recv_cq = cq,
			.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
				 .max_recv_sge = 1 },
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS,
			.pd = d.pd,
			.create_flags = i == 0 ? IBV_QP_CREATE_BLOCK_SELF_MCAST_LB : 0,
		};

		q[i] = ibv_create_qp_ex(d.ctx, &ia);
		SVT_CHECK_PTR(q[i]);
		svt_qp_connect(q[i], &c, NULL, 0);
		SVT_CHECK_OK(ibv_attach_mcast(q[i], &g, 0));
		SVT_CHECK_OK(svt_post_recv(q[i], 10 + (uint64_t)i, buf + 4096 * i, 4096, mr->lkey));
	}
	svt_ah_attr(&aa, &g, NULL);
	ah = ibv_create_ah(d.pd, &aa);
	SVT_CHECK_PTR(ah);
	SVT_CHECK_OK(svt_post_ud_send(q[0], 1, IBV_SEND_SIGNALED, buf, 32, mr->lkey, ah, 0xffffff,
				      QKEY));
	/* the send's completion and q[1]'s receive, and nothing for q[0] */
	for (int n = 0; n < 2; n++) {
		svt_poll_ok(cq, 1, &wc, 5000);
		SVT_CHECK(wc.wr_id == 1 || wc.wr_id == 11);
	}
	svt_expect_no_wc(cq, 200);
	for (int i = 0; i < 2; i++) {
		SVT_CHECK_OK(ibv_detach_mcast(q[i], &g, 0));
		SVT_CHECK_OK(ibv_destroy_qp(q[i]));
	}
	SVT_CHECK_OK(ibv_destroy_ah(ah));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	free(buf);
	svt_dev_close(&d);
	svt_log("BLOCK_SELF_MCAST_LB kept the sender's own datagram from it, not from the others");
}

static void test_errors(void)
{
	struct svt_pair rc;
	struct svt_dev d;
	union ibv_gid g = mgid_v4(0, 0xefc0ffffu), notmc = mgid_v4(0, 0x0a000001u);

	svt_dev_open(&d);
	SVT_CHECK_EQ(d.dev_attr.max_mcast_grp, 64);
	SVT_CHECK_EQ(d.dev_attr.max_mcast_qp_attach, 56);
	SVT_CHECK_EQ(d.dev_attr.max_total_mcast_qp_attach, 64 * 56);
	svt_dev_close(&d);

	svt_pair_create(&rc, IBV_QPT_RC, NULL);
	SVT_CHECK_EQ(ibv_attach_mcast(rc.a.qp, &g, 0), EINVAL); /* UD only */
	svt_pair_destroy(&rc);

	struct svt_pair ud;

	svt_pair_create(&ud, IBV_QPT_UD, NULL);
	SVT_CHECK_EQ(ibv_attach_mcast(ud.a.qp, &notmc, 0), EINVAL);
	SVT_CHECK_EQ(ibv_detach_mcast(ud.a.qp, &g, 0), EINVAL);
	/* more groups than the limit: ENOMEM, and nothing changes */
	for (uint32_t i = 0; i < 64; i++) {
		union ibv_gid gi = mgid_v4(0, 0xefc10000u + i);

		SVT_CHECK_OK(ibv_attach_mcast(ud.a.qp, &gi, 0));
	}
	union ibv_gid over = mgid_v4(0, 0xefc10000u + 64);

	SVT_CHECK_EQ(ibv_attach_mcast(ud.a.qp, &over, 0), ENOMEM);
	for (uint32_t i = 0; i < 64; i++) {
		union ibv_gid gi = mgid_v4(0, 0xefc10000u + i);

		SVT_CHECK_OK(ibv_detach_mcast(ud.a.qp, &gi, 0));
	}
	svt_pair_destroy(&ud);
	svt_log("errors as Linux's verbs give them");
}

int main(void)
{
	svt_watchdog(60);
	test_errors();
	test_delivery();
	test_block_self();
	return 0;
}
