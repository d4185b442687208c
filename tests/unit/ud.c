/*
 * unit_ud: unreliable datagram SENDs.
 *   - GRH in the first 40 bytes of the receive buffer (sgid = sender's GID,
 *     dgid = ours), byte_len includes it, IBV_WC_GRH set, src_qp = sender QPN
 *   - SEND_WITH_IMM, inline, zero-length, scatter of GRH and payload
 *   - several senders (contexts) to one QP, told apart by src_qp
 *   - wrong qkey: dropped silently (sender still completes successfully);
 *     controlled qkey (high bit set: the sending QP's own qkey is used)
 *   - messages up to the path MTU pass; larger ones complete but are not
 *     delivered (IB spec C10-93.1.1, as rxe does)
 */
#include "sv_test.h"

#include <arpa/inet.h>

#define GRH 40

static void send_ud(struct svt_side *a, uint64_t id, unsigned int flags,
		    void *buf, uint32_t len, uint32_t lkey, uint32_t qkey)
{
	SVT_CHECK_OK(svt_post_ud_send(a->qp, id, flags, buf, len, lkey, a->ah,
				      a->remote_qpn, qkey));
}

static void test_basic(struct svt_pair *p)
{
	struct svt_side *a = &p->a, *b = &p->b;
	uint32_t qkey = p->opts.conn.qkey;
	struct ibv_wc wc;
	char *rb = b->buf;

	memset(rb, 0, 8192);
	svt_fill(a->buf, 1000, 1);
	SVT_CHECK_OK(svt_post_recv(b->qp, 11, rb, GRH + 4096, b->mr->lkey));
	send_ud(a, 1, IBV_SEND_SIGNALED, a->buf, 1000, a->mr->lkey, qkey);
	wc = svt_poll_one(a->send_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.wr_id, 1);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_SEND);
	SVT_CHECK_EQ(wc.qp_num, a->qp->qp_num);

	wc = svt_poll_one(b->recv_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.wr_id, 11);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_RECV);
	SVT_CHECK_EQ(wc.byte_len, GRH + 1000);
	SVT_CHECK(wc.wc_flags & IBV_WC_GRH);
	SVT_CHECK_EQ(wc.wc_flags & IBV_WC_WITH_IMM, 0);
	SVT_CHECK_EQ(wc.qp_num, b->qp->qp_num);
	SVT_CHECK_EQ(wc.src_qp, a->qp->qp_num);
	SVT_CHECK_FILL(rb + GRH, 1000, 1);

	const struct ibv_grh *grh = (const struct ibv_grh *)rb;

	SVT_CHECK_MEM(&grh->sgid, &a->gid, sizeof(a->gid));
	SVT_CHECK_MEM(&grh->dgid, &b->gid, sizeof(b->gid));

	/* SEND_WITH_IMM. */
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge = { (uintptr_t)a->buf, 100, a->mr->lkey };

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 2;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND_WITH_IMM;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htonl(0xcafe);
	wr.wr.ud.ah = a->ah;
	wr.wr.ud.remote_qpn = a->remote_qpn;
	wr.wr.ud.remote_qkey = qkey;
	SVT_CHECK_OK(svt_post_recv(b->qp, 12, rb, GRH + 4096, b->mr->lkey));
	SVT_CHECK_OK(ibv_post_send(a->qp, &wr, &bad));
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	wc = svt_poll_one(b->recv_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.byte_len, GRH + 100);
	SVT_CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
	SVT_CHECK(wc.wc_flags & IBV_WC_GRH);
	SVT_CHECK_EQ(wc.imm_data, htonl(0xcafe));
	SVT_CHECK_EQ(wc.src_qp, a->qp->qp_num);

	/* Zero-length: only the GRH. */
	SVT_CHECK_OK(svt_post_recv(b->qp, 13, rb, GRH + 4096, b->mr->lkey));
	send_ud(a, 3, IBV_SEND_SIGNALED, NULL, 0, 0, qkey);
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	svt_poll_ok(b->recv_cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.byte_len, GRH);

	/* Inline from the stack, GRH and payload scattered to 2 SGEs. */
	char msg[32];

	svt_fill(msg, sizeof(msg), 4);
	struct ibv_sge rs[2] = { { (uintptr_t)rb + 4096, GRH, b->mr->lkey },
				 { (uintptr_t)rb + 6000, 100, b->mr->lkey } };
	struct ibv_recv_wr rwr = { .wr_id = 14, .sg_list = rs, .num_sge = 2 };
	struct ibv_recv_wr *rbad;

	SVT_CHECK_OK(ibv_post_recv(b->qp, &rwr, &rbad));
	send_ud(a, 4, IBV_SEND_SIGNALED | IBV_SEND_INLINE, msg, sizeof(msg), 0,
		qkey);
	memset(msg, 0, sizeof(msg));
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	svt_poll_ok(b->recv_cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.byte_len, GRH + 32);
	SVT_CHECK_FILL(rb + 6000, 32, 4);
	grh = (const struct ibv_grh *)(rb + 4096);
	SVT_CHECK_MEM(&grh->sgid, &a->gid, sizeof(a->gid));
}

static void test_order(struct svt_pair *p)
{
	struct svt_side *a = &p->a, *b = &p->b;
	struct ibv_wc wc[32];

	for (int i = 0; i < 32; i++)
		SVT_CHECK_OK(svt_post_recv(b->qp, (uint64_t)i,
					   (char *)b->buf + i * 2048,
					   GRH + 2000, b->mr->lkey));
	for (int i = 0; i < 32; i++) {
		char *s = (char *)a->buf + i * 2000;

		svt_fill(s, 2000, 50 + (uint32_t)i);
		send_ud(a, 100 + (uint64_t)i, IBV_SEND_SIGNALED, s,
			100 + (uint32_t)i * 50, a->mr->lkey,
			p->opts.conn.qkey);
	}
	svt_poll_ok(a->send_cq, 32, wc, 0);
	svt_poll_ok(b->recv_cq, 32, wc, 0); /* loopback: nothing is lost */
	for (int i = 0; i < 32; i++) {
		SVT_CHECK_EQ(wc[i].wr_id, i);
		SVT_CHECK_EQ(wc[i].byte_len, GRH + 100 + i * 50);
		SVT_CHECK_FILL((char *)b->buf + i * 2048 + GRH,
			       100 + (size_t)i * 50, 50 + (uint32_t)i);
	}
}

static void test_qkey(struct svt_pair *p)
{
	struct svt_side *a = &p->a, *b = &p->b;
	struct ibv_wc wc;

	SVT_CHECK_OK(svt_post_recv(b->qp, 21, b->buf, GRH + 4096, b->mr->lkey));
	/* Wrong qkey: sender completes, receiver never sees it. */
	send_ud(a, 22, IBV_SEND_SIGNALED, a->buf, 64, a->mr->lkey,
		p->opts.conn.qkey ^ 0x1);
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	svt_expect_no_wc(b->recv_cq, 150);
	/* Nonexistent destination QPN: same. */
	SVT_CHECK_OK(svt_post_ud_send(a->qp, 23, IBV_SEND_SIGNALED, a->buf, 64,
				      a->mr->lkey, a->ah, 0xfffff0,
				      p->opts.conn.qkey));
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	svt_expect_no_wc(b->recv_cq, 100);
	/* The right qkey still works, and uses the receive posted above. */
	send_ud(a, 24, IBV_SEND_SIGNALED, a->buf, 64, a->mr->lkey,
		p->opts.conn.qkey);
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	svt_poll_ok(b->recv_cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.wr_id, 21);

	/* A remote_qkey with the high bit set means "use the sending QP's own
	 * qkey" (controlled qkey): a's qkey equals b's, so it arrives... */
	SVT_CHECK_OK(svt_post_recv(b->qp, 25, b->buf, GRH + 4096, b->mr->lkey));
	send_ud(a, 25, IBV_SEND_SIGNALED, a->buf, 64, a->mr->lkey, 0x80000000u);
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	svt_poll_ok(b->recv_cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.wr_id, 25);
	/* ...and once a's own qkey differs, it does not. */
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_RTS,
				  .qkey = p->opts.conn.qkey + 1 };

	SVT_CHECK_OK(ibv_modify_qp(a->qp, &qa, IBV_QP_STATE | IBV_QP_QKEY));
	SVT_CHECK_OK(svt_post_recv(b->qp, 26, b->buf, GRH + 4096, b->mr->lkey));
	send_ud(a, 26, IBV_SEND_SIGNALED, a->buf, 64, a->mr->lkey, 0x80000000u);
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	svt_expect_no_wc(b->recv_cq, 100);
	qa.qkey = p->opts.conn.qkey;
	SVT_CHECK_OK(ibv_modify_qp(a->qp, &qa, IBV_QP_STATE | IBV_QP_QKEY));
	send_ud(a, 27, IBV_SEND_SIGNALED, a->buf, 64, a->mr->lkey,
		p->opts.conn.qkey);
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	svt_poll_ok(b->recv_cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.wr_id, 26);
}

/* A third context sends to b as well: src_qp tells the senders apart. */
static void test_two_senders(struct svt_pair *p)
{
	struct svt_side *a = &p->a, *b = &p->b;
	struct svt_dev c;
	struct ibv_wc wc[2];

	svt_dev_open(&c);
	struct ibv_cq *ccq = svt_create_cq(c.ctx, 16, NULL);
	struct svt_qp_init qi;

	svt_qp_init_default(&qi, IBV_QPT_UD);
	struct ibv_qp *cqp = svt_create_qp(c.pd, ccq, ccq, &qi);

	svt_qp_connect(cqp, &p->opts.conn, NULL, 0);
	struct ibv_ah_attr aa;

	svt_ah_attr(&aa, &b->gid, NULL);
	struct ibv_ah *ah = ibv_create_ah(c.pd, &aa);

	SVT_CHECK_PTR(ah);
	char *cbuf = svt_alloc(4096);
	struct ibv_mr *cmr = svt_reg_mr(c.pd, cbuf, 4096, 0);

	SVT_CHECK_OK(svt_post_recv(b->qp, 31, b->buf, GRH + 4096, b->mr->lkey));
	SVT_CHECK_OK(svt_post_recv(b->qp, 32, (char *)b->buf + 8192,
				   GRH + 4096, b->mr->lkey));
	SVT_CHECK_OK(svt_post_ud_send(cqp, 1, IBV_SEND_SIGNALED, cbuf, 10,
				      cmr->lkey, ah, b->qp->qp_num,
				      p->opts.conn.qkey));
	svt_poll_ok(ccq, 1, wc, 0);
	svt_poll_ok(b->recv_cq, 1, wc, 0);
	send_ud(a, 2, IBV_SEND_SIGNALED, a->buf, 20, a->mr->lkey,
		p->opts.conn.qkey);
	svt_poll_ok(a->send_cq, 1, &wc[1], 0);
	svt_poll_ok(b->recv_cq, 1, &wc[1], 0);
	SVT_CHECK_EQ(wc[0].src_qp, cqp->qp_num);
	SVT_CHECK_EQ(wc[0].byte_len, GRH + 10);
	SVT_CHECK_EQ(wc[1].src_qp, a->qp->qp_num);
	SVT_CHECK_EQ(wc[1].byte_len, GRH + 20);
	const struct ibv_grh *grh = (const struct ibv_grh *)b->buf;

	union ibv_gid cg; /* a GRH carries the IPv4-mapped GID (index 3) */

	SVT_CHECK_OK(ibv_query_gid(c.ctx, 1, 3, &cg));
	SVT_CHECK_MEM(&grh->sgid, &cg, sizeof(cg));

	SVT_CHECK_OK(ibv_dereg_mr(cmr));
	free(cbuf);
	SVT_CHECK_OK(ibv_destroy_ah(ah));
	SVT_CHECK_OK(ibv_destroy_qp(cqp));
	SVT_CHECK_OK(ibv_destroy_cq(ccq));
	svt_dev_close(&c);
}

static void test_mtu(struct svt_pair *p)
{
	struct svt_side *a = &p->a, *b = &p->b;
	struct ibv_wc wc;

	/* Exactly the MTU (4096) passes. */
	svt_fill(a->buf, 4097, 60);
	SVT_CHECK_OK(svt_post_recv(b->qp, 41, b->buf, GRH + 8192, b->mr->lkey));
	send_ud(a, 41, IBV_SEND_SIGNALED, a->buf, 4096, a->mr->lkey,
		p->opts.conn.qkey);
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	svt_poll_ok(b->recv_cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.byte_len, GRH + 4096);
	SVT_CHECK_FILL((char *)b->buf + GRH, 4096, 60);

	/* One byte more: IB spec C10-93.1.1 (and rxe): no packet is emitted
	 * and no error generated; the send completes, nothing arrives. */
	SVT_CHECK_OK(svt_post_recv(b->qp, 42, b->buf, GRH + 8192, b->mr->lkey));
	SVT_CHECK_OK(svt_post_ud_send(a->qp, 42, IBV_SEND_SIGNALED, a->buf,
				      4097, a->mr->lkey, a->ah, a->remote_qpn,
				      p->opts.conn.qkey));
	wc = svt_poll_one(a->send_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.wr_id, 42);
	svt_expect_no_wc(b->recv_cq, 100);
	/* The QPs still work: the next datagram takes receive 42. */
	send_ud(a, 43, IBV_SEND_SIGNALED, a->buf, 10, a->mr->lkey,
		p->opts.conn.qkey);
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	svt_poll_ok(b->recv_cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.wr_id, 42);
	SVT_CHECK_EQ(wc.byte_len, GRH + 10);
}

int main(void)
{
	struct svt_pair_opts o;
	struct svt_pair p;

	svt_watchdog(50);
	svt_pair_opts_default(&o, IBV_QPT_UD);
	o.separate_cqs = true;
	svt_pair_create(&p, IBV_QPT_UD, &o);
	test_basic(&p);
	test_order(&p);
	test_qkey(&p);
	test_two_senders(&p);
	test_mtu(&p);
	svt_pair_destroy(&p);
	return 0;
}
