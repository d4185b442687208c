/*
 * unit_addressing: a GID names the host's port, and (GID, QPN) reaches any
 * QP on the host (issue 11), the way loopback tests and test suites are
 * written: query_gid on the local port, then dgid = that GID.
 *   - one context, two of its own QPs, for every GID index as both dgid and
 *     sgid_index: RC SEND, SEND_WITH_IMM, WRITE, WRITE_WITH_IMM, READ,
 *     FETCH_ADD, CMP_SWP and a zero-length SEND; UC SEND and WRITE; UD SEND
 *     (through an AH on that GID), data checked
 *   - the same through the ibv_qp_ex wr_* API and an ibv_cq_ex polled
 *     with start/next/end_poll (RC WRITE and SEND, every index)
 *   - two contexts of one process, dgid = the (same) port GID
 *   - an sgid_index of an empty entry (6) is refused with ENODATA, one
 *     past the table with EINVAL, by ibv_modify_qp and ibv_create_ah
 */
#include "sv_test.h"

#define LEN 8192

struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_cq_ex *cqx; /* when made with ibv_create_cq_ex */
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx;
	uint8_t *buf;
	struct ibv_mr *mr;
};

static void end_make(struct end *e, struct ibv_context *ctx, struct ibv_pd *pd,
		     enum ibv_qp_type t, bool ex)
{
	memset(e, 0, sizeof(*e));
	e->ctx = ctx;
	e->pd = pd;
	e->buf = svt_alloc(LEN);
	e->mr = svt_reg_mr(pd, e->buf, LEN, SVT_ACCESS_ALL);
	if (!ex) {
		struct svt_qp_init qi;

		e->cq = svt_create_cq(ctx, 64, NULL);
		svt_qp_init_default(&qi, t);
		e->qp = svt_create_qp(pd, e->cq, e->cq, &qi);
		return;
	}
	struct ibv_cq_init_attr_ex ca = { .cqe = 64, .wc_flags = IBV_WC_EX_WITH_BYTE_LEN };
	struct ibv_qp_init_attr_ex qa;

	e->cqx = ibv_create_cq_ex(ctx, &ca);
	SVT_CHECK_PTR(e->cqx);
	e->cq = ibv_cq_ex_to_cq(e->cqx);
	memset(&qa, 0, sizeof(qa));
	qa.qp_type = t;
	qa.send_cq = qa.recv_cq = e->cq;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 32;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 2;
	qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	qa.pd = pd;
	qa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
	e->qp = ibv_create_qp_ex(ctx, &qa);
	SVT_CHECK_PTR(e->qp);
	e->qpx = ibv_qp_to_qp_ex(e->qp);
}

static void end_free(struct end *e)
{
	SVT_CHECK_OK(ibv_destroy_qp(e->qp));
	SVT_CHECK_OK(ibv_destroy_cq(e->cq));
	SVT_CHECK_OK(ibv_dereg_mr(e->mr));
	free(e->buf);
}

/* One completion, by either CQ API. */
static struct ibv_wc poll1(struct end *e)
{
	struct ibv_wc wc;
	uint64_t deadline = svt_now_ms() + SVT_TIMEOUT_MS;
	struct ibv_poll_cq_attr pa = { 0 };

	if (!e->cqx)
		return svt_poll_one(e->cq);
	memset(&wc, 0, sizeof(wc));
	while (ibv_start_poll(e->cqx, &pa) == ENOENT) {
		if (svt_now_ms() > deadline)
			SVT_FAIL("no completion");
		svt_sleep_ms(0);
	}
	wc.wr_id = e->cqx->wr_id;
	wc.status = e->cqx->status;
	wc.opcode = ibv_wc_read_opcode(e->cqx);
	wc.byte_len = ibv_wc_read_byte_len(e->cqx);
	ibv_end_poll(e->cqx);
	return wc;
}

/* Both QPs to RTS, each addressing the other by (port GID at index g, QPN). */
static void link_at(struct end *a, struct end *b, int g)
{
	struct svt_conn c;
	union ibv_gid ga, gb;

	svt_conn_default(&c, a->qp->qp_type);
	c.sgid_index = (uint8_t)g;
	SVT_CHECK_OK(ibv_query_gid(a->ctx, 1, g, &ga));
	SVT_CHECK_OK(ibv_query_gid(b->ctx, 1, g, &gb));
	SVT_CHECK_MEM(&ga, &gb, sizeof(ga)); /* one port, one table */
	svt_qp_link(a->qp, &ga, b->qp, &gb, &c);
}

static void rc_traffic(struct end *a, struct end *b, int g)
{
	struct ibv_wc wc;
	uint64_t *word = (uint64_t *)(b->buf + LEN - 8);

	/* SEND and SEND_WITH_IMM, and a zero-length SEND */
	svt_fill(a->buf, 3000, (uint32_t)g);
	SVT_CHECK_OK(svt_post_recv(b->qp, 1, b->buf, LEN / 2, b->mr->lkey));
	SVT_CHECK_OK(svt_post_recv(b->qp, 2, b->buf + LEN / 2, LEN / 2, b->mr->lkey));
	SVT_CHECK_OK(svt_post_recv(b->qp, 3, b->buf, 16, b->mr->lkey));
	SVT_CHECK_OK(svt_post_send(a->qp, 1, IBV_WR_SEND, IBV_SEND_SIGNALED, a->buf, 3000,
				   a->mr->lkey, 0, 0, 0));
	SVT_CHECK_OK(svt_post_send(a->qp, 2, IBV_WR_SEND_WITH_IMM, IBV_SEND_SIGNALED, a->buf, 3000,
				   a->mr->lkey, 0, 0, 0x12345678));
	SVT_CHECK_OK(svt_post_send(a->qp, 3, IBV_WR_SEND, IBV_SEND_SIGNALED, a->buf, 0,
				   a->mr->lkey, 0, 0, 0));
	for (int i = 0; i < 3; i++)
		SVT_CHECK_WC_OK(svt_poll_one(a->cq));
	for (int i = 0; i < 3; i++) {
		wc = svt_poll_one(b->cq);
		SVT_CHECK_WC_OK(wc);
		SVT_CHECK_EQ(wc.byte_len, i < 2 ? 3000u : 0u);
	}
	SVT_CHECK_FILL(b->buf + LEN / 2, 3000, (uint32_t)g);
	/* WRITE, WRITE_WITH_IMM, READ */
	svt_fill(a->buf, LEN / 2, (uint32_t)g + 10);
	SVT_CHECK_OK(svt_post_send(a->qp, 4, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, a->buf, LEN / 2,
				   a->mr->lkey, (uintptr_t)b->buf, b->mr->rkey, 0));
	SVT_CHECK_WC_OK(svt_poll_one(a->cq));
	SVT_CHECK_FILL(b->buf, LEN / 2, (uint32_t)g + 10);
	SVT_CHECK_OK(svt_post_recv(b->qp, 5, b->buf, 16, b->mr->lkey));
	SVT_CHECK_OK(svt_post_send(a->qp, 5, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_SEND_SIGNALED, a->buf,
				   64, a->mr->lkey, (uintptr_t)b->buf + 100, b->mr->rkey, 7));
	SVT_CHECK_WC_OK(svt_poll_one(a->cq));
	wc = svt_poll_one(b->cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	svt_fill(b->buf + LEN / 2, 2048, (uint32_t)g + 20);
	SVT_CHECK_OK(svt_post_send(a->qp, 6, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, a->buf, 2048,
				   a->mr->lkey, (uintptr_t)b->buf + LEN / 2, b->mr->rkey, 0));
	SVT_CHECK_WC_OK(svt_poll_one(a->cq));
	SVT_CHECK_FILL(a->buf, 2048, (uint32_t)g + 20);
	/* FETCH_ADD, CMP_SWP */
	*word = 40;
	SVT_CHECK_OK(svt_post_atomic(a->qp, 7, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_SEND_SIGNALED,
				     a->buf, a->mr->lkey, (uintptr_t)word, b->mr->rkey, 2, 0));
	SVT_CHECK_WC_OK(svt_poll_one(a->cq));
	SVT_CHECK_OK(svt_post_atomic(a->qp, 8, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_SEND_SIGNALED,
				     a->buf + 8, a->mr->lkey, (uintptr_t)word, b->mr->rkey, 42, 99));
	SVT_CHECK_WC_OK(svt_poll_one(a->cq));
	SVT_CHECK_EQ(*(uint64_t *)a->buf, 40);
	SVT_CHECK_EQ(*(uint64_t *)(a->buf + 8), 42);
	SVT_CHECK_EQ(*word, 99);
}

static void uc_traffic(struct end *a, struct end *b, int g)
{
	svt_fill(a->buf, 1000, (uint32_t)g + 30);
	SVT_CHECK_OK(svt_post_recv(b->qp, 1, b->buf, LEN, b->mr->lkey));
	SVT_CHECK_OK(svt_post_send(a->qp, 1, IBV_WR_SEND, IBV_SEND_SIGNALED, a->buf, 1000,
				   a->mr->lkey, 0, 0, 0));
	SVT_CHECK_WC_OK(svt_poll_one(a->cq));
	SVT_CHECK_WC_OK(svt_poll_one(b->cq));
	SVT_CHECK_FILL(b->buf, 1000, (uint32_t)g + 30);
	SVT_CHECK_OK(svt_post_send(a->qp, 2, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, a->buf, 1000,
				   a->mr->lkey, (uintptr_t)b->buf + 2000, b->mr->rkey, 0));
	SVT_CHECK_WC_OK(svt_poll_one(a->cq));
	SVT_WAIT_FILL(b->buf + 2000, 1000, (uint32_t)g + 30);
}

static void ud_traffic(struct end *a, struct end *b, int g)
{
	struct ibv_ah_attr aa;
	struct svt_conn c;
	union ibv_gid gid;
	struct ibv_ah *ah;
	struct ibv_wc wc;

	svt_conn_default(&c, IBV_QPT_UD);
	c.sgid_index = (uint8_t)g;
	SVT_CHECK_OK(ibv_query_gid(a->ctx, 1, g, &gid));
	svt_ah_attr(&aa, &gid, &c);
	ah = ibv_create_ah(a->pd, &aa);
	SVT_CHECK_PTR(ah);
	svt_fill(a->buf, 500, (uint32_t)g + 40);
	SVT_CHECK_OK(svt_post_recv(b->qp, 1, b->buf, LEN, b->mr->lkey));
	SVT_CHECK_OK(svt_post_ud_send(a->qp, 1, IBV_SEND_SIGNALED, a->buf, 500, a->mr->lkey, ah,
				      b->qp->qp_num, c.qkey));
	SVT_CHECK_WC_OK(svt_poll_one(a->cq));
	wc = svt_poll_one(b->cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.src_qp, a->qp->qp_num);
	SVT_CHECK_FILL(b->buf + 40, 500, (uint32_t)g + 40);
	SVT_CHECK_OK(ibv_destroy_ah(ah));
}

static void ex_traffic(struct end *a, struct end *b, int g)
{
	struct ibv_wc wc;

	svt_fill(a->buf, 4000, (uint32_t)g + 50);
	SVT_CHECK_OK(svt_post_recv(b->qp, 1, b->buf + 4096, 4096, b->mr->lkey));
	ibv_wr_start(a->qpx);
	a->qpx->wr_id = 1;
	a->qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a->qpx, b->mr->rkey, (uintptr_t)b->buf);
	ibv_wr_set_sge(a->qpx, a->mr->lkey, (uintptr_t)a->buf, 4000);
	a->qpx->wr_id = 2;
	ibv_wr_send(a->qpx);
	ibv_wr_set_sge(a->qpx, a->mr->lkey, (uintptr_t)a->buf, 4000);
	SVT_CHECK_OK(ibv_wr_complete(a->qpx));
	for (int i = 0; i < 2; i++)
		SVT_CHECK_WC_OK(poll1(a));
	wc = poll1(b);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.byte_len, 4000);
	SVT_CHECK_FILL(b->buf, 4000, (uint32_t)g + 50);
	SVT_CHECK_FILL(b->buf + 4096, 4000, (uint32_t)g + 50);
}

static void test_one_context(void)
{
	static const enum ibv_qp_type types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
	struct svt_dev d;

	svt_dev_open(&d);
	for (int g = 0; g < 4; g++) {
		for (size_t t = 0; t < 3; t++) {
			struct end a, b;

			end_make(&a, d.ctx, d.pd, types[t], false);
			end_make(&b, d.ctx, d.pd, types[t], false);
			if (types[t] == IBV_QPT_UD) {
				struct svt_conn c;

				svt_conn_default(&c, IBV_QPT_UD);
				svt_qp_connect(a.qp, &c, NULL, 0);
				svt_qp_connect(b.qp, &c, NULL, 0);
				ud_traffic(&a, &b, g);
			} else {
				link_at(&a, &b, g);
				if (types[t] == IBV_QPT_RC)
					rc_traffic(&a, &b, g);
				else
					uc_traffic(&a, &b, g);
			}
			end_free(&a);
			end_free(&b);
		}
		/* the ibv_qp_ex and ibv_cq_ex APIs */
		struct end a, b;

		end_make(&a, d.ctx, d.pd, IBV_QPT_RC, true);
		end_make(&b, d.ctx, d.pd, IBV_QPT_RC, true);
		link_at(&a, &b, g);
		ex_traffic(&a, &b, g);
		end_free(&a);
		end_free(&b);
		svt_log("GID index %d: RC, UC, UD and the wr_*/cq_ex APIs to own QPs", g);
	}
	svt_dev_close(&d);
}

static void test_two_contexts(void)
{
	struct svt_dev d1, d2;
	struct end a, b;

	svt_dev_open(&d1);
	svt_dev_open(&d2);
	for (int g = 0; g < 4; g++) {
		end_make(&a, d1.ctx, d1.pd, IBV_QPT_RC, false);
		end_make(&b, d2.ctx, d2.pd, IBV_QPT_RC, false);
		link_at(&a, &b, g);
		rc_traffic(&a, &b, g);
		end_free(&a);
		end_free(&b);
	}
	svt_dev_close(&d1);
	svt_dev_close(&d2);
}

static void test_bad_index(void)
{
	struct svt_dev d;
	struct end a;
	struct ibv_qp_attr attr;
	struct svt_conn c;
	union ibv_gid gid;
	struct ibv_ah_attr aa;
	int mask;

	svt_dev_open(&d);
	end_make(&a, d.ctx, d.pd, IBV_QPT_RC, false);
	svt_conn_default(&c, IBV_QPT_RC);
	SVT_CHECK_OK(svt_qp_to_init(a.qp, &c));
	SVT_CHECK_OK(ibv_query_gid(d.ctx, 1, 3, &gid));
	/* an empty entry (6 and up: the table is longer than what fills
	 * it) names no source: ENODATA, as Linux answers it */
	c.sgid_index = 6;
	mask = svt_rtr_attr(IBV_QPT_RC, &c, &gid, a.qp->qp_num, &attr);
	SVT_CHECK_EQ(ibv_modify_qp(a.qp, &attr, mask), ENODATA);
	SVT_CHECK_EQ(svt_qp_state(a.qp), IBV_QPS_INIT);
	svt_ah_attr(&aa, &gid, &c);
	errno = 0;
	SVT_CHECK(!ibv_create_ah(d.pd, &aa));
	SVT_CHECK_EQ(errno, ENODATA);
	/* past the table: EINVAL */
	c.sgid_index = (uint8_t)d.port_attr.gid_tbl_len;
	mask = svt_rtr_attr(IBV_QPT_RC, &c, &gid, a.qp->qp_num, &attr);
	SVT_CHECK_EQ(ibv_modify_qp(a.qp, &attr, mask), EINVAL);
	svt_ah_attr(&aa, &gid, &c);
	errno = 0;
	SVT_CHECK(!ibv_create_ah(d.pd, &aa));
	SVT_CHECK_EQ(errno, EINVAL);
	SVT_CHECK_EQ(svt_qp_state(a.qp), IBV_QPS_INIT);
	end_free(&a);
	svt_dev_close(&d);
}

int main(void)
{
	svt_watchdog(120);
	test_one_context();
	test_two_contexts();
	test_bad_index();
	return 0;
}
