/*
 * unit_ex: the extended verbs.
 *   - ibv_create_cq_ex + ibv_start_poll/next_poll/end_poll and ibv_wc_read_*
 *     (opcode, byte_len, imm_data, qp_num, src_qp, wc_flags); ENOENT when
 *     empty; the same CQ also works through ibv_poll_cq
 *   - ibv_create_qp_ex with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS and the ibv_wr_*
 *     API: wr_start, wr_send, wr_send_imm, wr_rdma_write(_imm), wr_rdma_read,
 *     atomics, wr_set_sge, wr_set_sge_list, wr_set_inline_data(_list),
 *     wr_complete; wr_abort posts nothing; UD with wr_set_ud_addr
 */
#include "sv_test.h"

#include <arpa/inet.h>

#define GRH 40

struct ex_side {
	struct svt_dev d;
	struct ibv_cq_ex *cqx;
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx; /* NULL on the side with a plain QP */
	char *buf;
	struct ibv_mr *mr;
};

/* One completion read through the extended interface. */
struct exwc {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len, qp_num, src_qp;
	__be32 imm;
	unsigned int flags;
};

static void read_one(struct ibv_cq_ex *cq, struct exwc *w)
{
	w->wr_id = cq->wr_id;
	w->status = cq->status;
	w->opcode = ibv_wc_read_opcode(cq);
	w->byte_len = ibv_wc_read_byte_len(cq);
	w->qp_num = ibv_wc_read_qp_num(cq);
	w->src_qp = ibv_wc_read_src_qp(cq);
	w->flags = ibv_wc_read_wc_flags(cq);
	w->imm = (w->flags & IBV_WC_WITH_IMM) ? ibv_wc_read_imm_data(cq) : 0;
}

/* Poll exactly n completions with start/next/end_poll (timeout fails). */
static void poll_ex(struct ibv_cq_ex *cq, int n, struct exwc *w)
{
	struct ibv_poll_cq_attr attr = { 0 };
	uint64_t deadline = svt_now_ms() + SVT_TIMEOUT_MS;
	int got = 0;

	while (got < n) {
		int rc = ibv_start_poll(cq, &attr);

		if (rc == ENOENT) {
			if (svt_now_ms() > deadline)
				SVT_FAIL("timeout: %d of %d ex completions",
					 got, n);
			svt_sleep_ms(0);
			continue;
		}
		SVT_CHECK_EQ(rc, 0);
		read_one(cq, &w[got++]);
		while (got < n && (rc = ibv_next_poll(cq)) == 0)
			read_one(cq, &w[got++]);
		if (got < n)
			SVT_CHECK_EQ(rc, ENOENT);
		ibv_end_poll(cq);
	}
}

static void expect_empty(struct ibv_cq_ex *cq)
{
	struct ibv_poll_cq_attr attr = { 0 };

	SVT_CHECK_EQ(ibv_start_poll(cq, &attr), ENOENT);
}

static void side_open(struct ex_side *s, enum ibv_qp_type t, bool ex_qp)
{
	struct ibv_cq_init_attr_ex ca;

	memset(s, 0, sizeof(*s));
	svt_dev_open(&s->d);
	memset(&ca, 0, sizeof(ca));
	ca.cqe = 64;
	ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |
		      IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP;
	s->cqx = ibv_create_cq_ex(s->d.ctx, &ca);
	SVT_CHECK_PTR(s->cqx);
	struct ibv_cq *cq = ibv_cq_ex_to_cq(s->cqx);

	SVT_CHECK(cq->context == s->d.ctx);
	s->buf = svt_alloc(65536);
	s->mr = svt_reg_mr(s->d.pd, s->buf, 65536, SVT_ACCESS_ALL);

	if (!ex_qp) {
		struct svt_qp_init qi;

		svt_qp_init_default(&qi, t);
		s->qp = svt_create_qp(s->d.pd, cq, cq, &qi);
		return;
	}
	struct ibv_qp_init_attr_ex qa;

	memset(&qa, 0, sizeof(qa));
	qa.qp_type = t;
	qa.send_cq = cq;
	qa.recv_cq = cq;
	qa.cap.max_send_wr = 64;
	qa.cap.max_recv_wr = 64;
	qa.cap.max_send_sge = 4;
	qa.cap.max_recv_sge = 4;
	qa.cap.max_inline_data = 64;
	qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	qa.pd = s->d.pd;
	qa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
	if (t == IBV_QPT_RC)
		qa.send_ops_flags |= IBV_QP_EX_WITH_RDMA_WRITE |
				     IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
				     IBV_QP_EX_WITH_RDMA_READ |
				     IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
				     IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	s->qp = ibv_create_qp_ex(s->d.ctx, &qa);
	SVT_CHECK_PTR(s->qp);
	SVT_CHECK_GE(qa.cap.max_inline_data, 64);
	s->qpx = ibv_qp_to_qp_ex(s->qp);
	SVT_CHECK_PTR(s->qpx);
	SVT_CHECK(&s->qpx->qp_base == s->qp);
}

static void side_close(struct ex_side *s)
{
	SVT_CHECK_OK(ibv_destroy_qp(s->qp));
	SVT_CHECK_OK(ibv_dereg_mr(s->mr));
	free(s->buf);
	SVT_CHECK_OK(ibv_destroy_cq(ibv_cq_ex_to_cq(s->cqx)));
	svt_dev_close(&s->d);
}

static void test_rc(void)
{
	struct ex_side a, b;
	struct exwc w[8];
	struct ibv_qp_ex *x;

	side_open(&a, IBV_QPT_RC, true);
	side_open(&b, IBV_QPT_RC, false);
	svt_qp_link(a.qp, &a.d.gid, b.qp, &b.d.gid, NULL);
	x = a.qpx;
	expect_empty(a.cqx);

	/* A batch: SEND (sge), SEND_WITH_IMM (inline), RDMA_WRITE (sge list),
	 * RDMA_WRITE_WITH_IMM (inline list), posted by one wr_complete. */
	svt_fill(a.buf, 4096, 1);
	memset(b.buf, 0, 65536);
	for (int i = 0; i < 3; i++)
		SVT_CHECK_OK(svt_post_recv(b.qp, 100 + (uint64_t)i,
					   b.buf + i * 4096, 4096, b.mr->lkey));
	char inl[40], inl2[8];

	svt_fill(inl, sizeof(inl), 2);
	memset(inl2, 'z', sizeof(inl2));
	struct ibv_sge list[3] = {
		{ (uintptr_t)a.buf + 3000, 10, a.mr->lkey },
		{ (uintptr_t)a.buf + 1000, 20, a.mr->lkey },
		{ (uintptr_t)a.buf + 2000, 30, a.mr->lkey },
	};
	struct ibv_data_buf dl[2] = { { inl, 5 }, { inl2, 8 } };

	ibv_wr_start(x);
	x->wr_id = 1;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, a.mr->lkey, (uintptr_t)a.buf, 1000);

	x->wr_id = 2;
	x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_send_imm(x, htonl(0xabc));
	ibv_wr_set_inline_data(x, inl, sizeof(inl));

	x->wr_id = 3;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, b.mr->rkey, (uintptr_t)b.buf + 20000);
	ibv_wr_set_sge_list(x, 3, list);

	x->wr_id = 4;
	x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_rdma_write_imm(x, b.mr->rkey, (uintptr_t)b.buf + 30000,
			      htonl(0x5150));
	ibv_wr_set_inline_data_list(x, 2, dl);
	SVT_CHECK_OK(ibv_wr_complete(x));
	memset(inl, 0, sizeof(inl)); /* inline: reusable after complete */

	poll_ex(a.cqx, 4, w);
	for (int i = 0; i < 4; i++) {
		SVT_CHECK_EQ(w[i].wr_id, 1 + i);
		SVT_CHECK_EQ(w[i].status, IBV_WC_SUCCESS);
		SVT_CHECK_EQ(w[i].qp_num, a.qp->qp_num);
	}
	SVT_CHECK_EQ(w[0].opcode, IBV_WC_SEND);
	SVT_CHECK_EQ(w[1].opcode, IBV_WC_SEND);
	SVT_CHECK_EQ(w[2].opcode, IBV_WC_RDMA_WRITE);
	SVT_CHECK_EQ(w[3].opcode, IBV_WC_RDMA_WRITE);

	poll_ex(b.cqx, 3, w);
	SVT_CHECK_EQ(w[0].wr_id, 100);
	SVT_CHECK_EQ(w[0].opcode, IBV_WC_RECV);
	SVT_CHECK_EQ(w[0].byte_len, 1000);
	SVT_CHECK_EQ(w[0].flags & IBV_WC_WITH_IMM, 0);
	SVT_CHECK_EQ(w[0].qp_num, b.qp->qp_num);
	SVT_CHECK_FILL(b.buf, 1000, 1);
	SVT_CHECK_EQ(w[1].wr_id, 101);
	SVT_CHECK_EQ(w[1].opcode, IBV_WC_RECV);
	SVT_CHECK_EQ(w[1].byte_len, 40);
	SVT_CHECK(w[1].flags & IBV_WC_WITH_IMM);
	SVT_CHECK_EQ(w[1].imm, htonl(0xabc));
	SVT_CHECK_FILL(b.buf + 4096, 40, 2);
	SVT_CHECK_EQ(w[2].wr_id, 102);
	SVT_CHECK_EQ(w[2].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	SVT_CHECK_EQ(w[2].imm, htonl(0x5150));
	SVT_CHECK_EQ(w[2].byte_len, 13);
	SVT_CHECK_MEM(b.buf + 20000, a.buf + 3000, 10);
	SVT_CHECK_MEM(b.buf + 20010, a.buf + 1000, 20);
	SVT_CHECK_MEM(b.buf + 20030, a.buf + 2000, 30);
	SVT_CHECK_FILL(b.buf + 30000, 5, 2);
	for (int i = 0; i < 8; i++)
		SVT_CHECK_EQ(b.buf[30005 + i], 'z');

	/* READ and atomics. */
	uint64_t *rw = (uint64_t *)(b.buf + 40000);
	uint64_t *lw = (uint64_t *)(a.buf + 40000);

	rw[0] = 10;
	rw[1] = 77;
	svt_fill(b.buf + 50000, 500, 3);
	ibv_wr_start(x);
	x->wr_id = 5;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(x, b.mr->rkey, (uintptr_t)b.buf + 50000);
	ibv_wr_set_sge(x, a.mr->lkey, (uintptr_t)a.buf + 50000, 500);
	x->wr_id = 6;
	ibv_wr_atomic_fetch_add(x, b.mr->rkey, (uintptr_t)&rw[0], 5);
	ibv_wr_set_sge(x, a.mr->lkey, (uintptr_t)&lw[0], 8);
	x->wr_id = 7;
	ibv_wr_atomic_cmp_swp(x, b.mr->rkey, (uintptr_t)&rw[1], 77, 88);
	ibv_wr_set_sge(x, a.mr->lkey, (uintptr_t)&lw[1], 8);
	SVT_CHECK_OK(ibv_wr_complete(x));
	poll_ex(a.cqx, 3, w);
	SVT_CHECK_EQ(w[0].opcode, IBV_WC_RDMA_READ);
	SVT_CHECK_EQ(w[1].opcode, IBV_WC_FETCH_ADD);
	SVT_CHECK_EQ(w[2].opcode, IBV_WC_COMP_SWAP);
	for (int i = 0; i < 3; i++)
		SVT_CHECK_EQ(w[i].status, IBV_WC_SUCCESS);
	SVT_CHECK_FILL(a.buf + 50000, 500, 3);
	SVT_CHECK_EQ(lw[0], 10);
	SVT_CHECK_EQ(rw[0], 15);
	SVT_CHECK_EQ(lw[1], 77);
	SVT_CHECK_EQ(rw[1], 88);

	/* wr_abort: nothing posted. */
	ibv_wr_start(x);
	x->wr_id = 8;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, b.mr->rkey, (uintptr_t)b.buf);
	ibv_wr_set_sge(x, a.mr->lkey, (uintptr_t)a.buf, 64);
	ibv_wr_abort(x);
	memset(b.buf, 0, 64);
	svt_sleep_ms(50);
	expect_empty(a.cqx);
	for (int i = 0; i < 64; i++)
		SVT_CHECK_EQ(b.buf[i], 0);

	/* Unsignaled WR through the ex API, then a signaled one. */
	ibv_wr_start(x);
	x->wr_id = 9;
	x->wr_flags = 0;
	ibv_wr_rdma_write(x, b.mr->rkey, (uintptr_t)b.buf);
	ibv_wr_set_sge(x, a.mr->lkey, (uintptr_t)a.buf, 64);
	x->wr_id = 10;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, b.mr->rkey, (uintptr_t)b.buf + 64);
	ibv_wr_set_sge(x, a.mr->lkey, (uintptr_t)a.buf + 64, 64);
	SVT_CHECK_OK(ibv_wr_complete(x));
	poll_ex(a.cqx, 1, w);
	SVT_CHECK_EQ(w[0].wr_id, 10);
	SVT_CHECK_FILL(b.buf, 128, 1);
	expect_empty(a.cqx);

	/* A cq_ex also answers ibv_poll_cq. */
	struct ibv_wc wc;

	SVT_CHECK_OK(svt_post_send(b.qp, 11, IBV_WR_RDMA_WRITE,
				   IBV_SEND_SIGNALED, b.buf, 8, b.mr->lkey,
				   (uintptr_t)a.buf, a.mr->rkey, 0));
	svt_poll_ok(ibv_cq_ex_to_cq(b.cqx), 1, &wc, 0);
	SVT_CHECK_EQ(wc.wr_id, 11);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_RDMA_WRITE);

	side_close(&a);
	side_close(&b);
}

static void test_ud(void)
{
	struct ex_side a, b;
	struct exwc w[2];
	struct ibv_ah_attr aa;
	const uint32_t qkey = 0x11111111; /* svt_conn_default's */

	side_open(&a, IBV_QPT_UD, true);
	side_open(&b, IBV_QPT_UD, false);
	svt_qp_connect(a.qp, NULL, NULL, 0);
	svt_qp_connect(b.qp, NULL, NULL, 0);
	svt_ah_attr(&aa, &b.d.gid, NULL);
	struct ibv_ah *ah = ibv_create_ah(a.d.pd, &aa);

	SVT_CHECK_PTR(ah);
	svt_fill(a.buf, 200, 9);
	SVT_CHECK_OK(svt_post_recv(b.qp, 1, b.buf, GRH + 1024, b.mr->lkey));
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 1;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(a.qpx, htonl(31337));
	ibv_wr_set_ud_addr(a.qpx, ah, b.qp->qp_num, qkey);
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf, 200);
	SVT_CHECK_OK(ibv_wr_complete(a.qpx));
	poll_ex(a.cqx, 1, w);
	SVT_CHECK_EQ(w[0].status, IBV_WC_SUCCESS);
	SVT_CHECK_EQ(w[0].opcode, IBV_WC_SEND);
	poll_ex(b.cqx, 1, w);
	SVT_CHECK_EQ(w[0].status, IBV_WC_SUCCESS);
	SVT_CHECK_EQ(w[0].byte_len, GRH + 200);
	SVT_CHECK_EQ(w[0].src_qp, a.qp->qp_num);
	SVT_CHECK(w[0].flags & IBV_WC_GRH);
	SVT_CHECK(w[0].flags & IBV_WC_WITH_IMM);
	SVT_CHECK_EQ(w[0].imm, htonl(31337));
	SVT_CHECK_FILL(b.buf + GRH, 200, 9);
	SVT_CHECK_OK(ibv_destroy_ah(ah));
	side_close(&a);
	side_close(&b);
}

int main(void)
{
	svt_watchdog(50);
	test_rc();
	test_ud();
	return 0;
}
