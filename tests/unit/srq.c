/*
 * unit_srq: shared receive queues.
 *   - create/query/modify limits; post_srq_recv errors (too many SGEs, full)
 *   - two RC QPs sharing one SRQ receive SENDs from two peers; completions
 *     carry the right qp_num and the SRQ's wr_ids in FIFO order
 *   - srq_limit armed -> IBV_EVENT_SRQ_LIMIT_REACHED via ibv_get_async_event
 *     once the number of receives drops below it, then disarmed
 *   - resize (IBV_SRQ_MAX_WR) with WRs posted across the ring's wrap: they
 *     keep their order; a size below the WRs posted, below the armed limit,
 *     0 or above max_srq_wr is EINVAL and changes nothing
 *   - a QP on the SRQ moved to ERR raises IBV_EVENT_QP_LAST_WQE_REACHED
 *   - destroy_srq while QPs use it: EBUSY
 */
#include "sv_test.h"

#define NQP 2
#define SLOT 256

struct sides {
	struct svt_dev a, b;
	struct ibv_cq *acq, *bcq;
	struct ibv_srq *srq;
	struct ibv_qp *aqp[NQP], *bqp[NQP];
	char *abuf, *bbuf;
	struct ibv_mr *amr, *bmr;
};

static void test_create_limits(struct svt_dev *d)
{
	struct ibv_srq_init_attr ia;
	struct ibv_srq_attr qa;

	memset(&ia, 0, sizeof(ia));
	ia.attr.max_wr = 16;
	ia.attr.max_sge = 2;
	struct ibv_srq *srq = ibv_create_srq(d->pd, &ia);

	SVT_CHECK_PTR(srq);
	SVT_CHECK(srq->context == d->ctx);
	SVT_CHECK(srq->pd == d->pd);
	SVT_CHECK_GE(ia.attr.max_wr, 16); /* actual values written back */
	SVT_CHECK_GE(ia.attr.max_sge, 2);
	memset(&qa, 0, sizeof(qa));
	SVT_CHECK_OK(ibv_query_srq(srq, &qa));
	SVT_CHECK_GE(qa.max_wr, 16);
	SVT_CHECK_GE(qa.max_sge, 2);
	SVT_CHECK_EQ(qa.srq_limit, 0);

	/* Limit larger than the queue: EINVAL. */
	struct ibv_srq_attr ma = { .srq_limit = qa.max_wr + 1 };

	SVT_CHECK_RC(ibv_modify_srq(srq, &ma, IBV_SRQ_LIMIT), EINVAL);
	ma.srq_limit = 3;
	SVT_CHECK_OK(ibv_modify_srq(srq, &ma, IBV_SRQ_LIMIT));
	SVT_CHECK_OK(ibv_query_srq(srq, &qa));
	SVT_CHECK_EQ(qa.srq_limit, 3);

	/* Resizing (IBV_SRQ_MAX_WR) works exactly when the device says so. */
	ma.max_wr = qa.max_wr * 2;
	int rc = ibv_modify_srq(srq, &ma, IBV_SRQ_MAX_WR);

	if (d->dev_attr.device_cap_flags & IBV_DEVICE_SRQ_RESIZE) {
		SVT_CHECK_EQ(rc, 0);
		SVT_CHECK_OK(ibv_query_srq(srq, &qa));
		SVT_CHECK_GE(qa.max_wr, ma.max_wr);
	} else {
		SVT_CHECK_NE(rc, 0);
		SVT_CHECK_OK(ibv_query_srq(srq, &qa));
	}

	/* Too many SGEs in the 2nd WR of a chain. */
	char *buf = svt_alloc(4096);
	struct ibv_mr *mr = svt_reg_mr(d->pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sg[8];
	struct ibv_recv_wr wr[2], *bad = NULL;

	for (int i = 0; i < 8; i++)
		sg[i] = (struct ibv_sge){ (uintptr_t)buf + 64u * (unsigned)i, 64,
					  mr->lkey };
	memset(wr, 0, sizeof(wr));
	wr[0].wr_id = 1;
	wr[0].sg_list = sg;
	wr[0].num_sge = 1;
	wr[0].next = &wr[1];
	wr[1].wr_id = 2;
	wr[1].sg_list = sg;
	wr[1].num_sge = (int)qa.max_sge + 1;
	if (qa.max_sge < 8) {
		SVT_CHECK_RC(ibv_post_srq_recv(srq, wr, &bad), EINVAL);
		SVT_CHECK(bad == &wr[1]);
	}

	/* Fill it up (1 already posted above): one more than max_wr fails. */
	uint32_t posted = qa.max_sge < 8 ? 1 : 0;

	while (posted < qa.max_wr) {
		SVT_CHECK_OK(svt_post_srq_recv(srq, 100 + posted, buf, 64,
					       mr->lkey));
		posted++;
	}
	SVT_CHECK_FAILS(svt_post_srq_recv(srq, 999, buf, 64, mr->lkey));
	SVT_CHECK_OK(ibv_destroy_srq(srq));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(buf);

	/* Beyond the device's limits. */
	ia.attr.max_wr = d->dev_attr.max_srq_wr + 1;
	ia.attr.max_sge = 1;
	SVT_CHECK_NULL(ibv_create_srq(d->pd, &ia));
	ia.attr.max_wr = 16;
	ia.attr.max_sge = (uint32_t)d->dev_attr.max_srq_sge + 1;
	SVT_CHECK_NULL(ibv_create_srq(d->pd, &ia));
}

static void setup(struct sides *s)
{
	struct ibv_srq_init_attr ia;
	struct svt_qp_init qi;

	svt_dev_open(&s->a);
	svt_dev_open(&s->b);
	s->acq = svt_create_cq(s->a.ctx, 256, NULL);
	s->bcq = svt_create_cq(s->b.ctx, 256, NULL);
	memset(&ia, 0, sizeof(ia));
	ia.attr.max_wr = 64;
	ia.attr.max_sge = 1;
	s->srq = ibv_create_srq(s->b.pd, &ia);
	SVT_CHECK_PTR(s->srq);
	s->abuf = svt_alloc(64 * SLOT);
	s->bbuf = svt_alloc(64 * SLOT);
	s->amr = svt_reg_mr(s->a.pd, s->abuf, 64 * SLOT, SVT_ACCESS_ALL);
	s->bmr = svt_reg_mr(s->b.pd, s->bbuf, 64 * SLOT, SVT_ACCESS_ALL);
	for (int i = 0; i < NQP; i++) {
		svt_qp_init_default(&qi, IBV_QPT_RC);
		s->aqp[i] = svt_create_qp(s->a.pd, s->acq, s->acq, &qi);
		qi.srq = s->srq;
		s->bqp[i] = svt_create_qp(s->b.pd, s->bcq, s->bcq, &qi);
		SVT_CHECK(s->bqp[i]->srq == s->srq);
		svt_qp_link(s->aqp[i], &s->a.gid, s->bqp[i], &s->b.gid, NULL);
	}
}

static void teardown(struct sides *s)
{
	/* In use by QPs: EBUSY. */
	SVT_CHECK_RC(ibv_destroy_srq(s->srq), EBUSY);
	for (int i = 0; i < NQP; i++) {
		SVT_CHECK_OK(ibv_destroy_qp(s->aqp[i]));
		SVT_CHECK_OK(ibv_destroy_qp(s->bqp[i]));
	}
	SVT_CHECK_OK(ibv_destroy_srq(s->srq));
	SVT_CHECK_OK(ibv_dereg_mr(s->amr));
	SVT_CHECK_OK(ibv_dereg_mr(s->bmr));
	free(s->abuf);
	free(s->bbuf);
	SVT_CHECK_OK(ibv_destroy_cq(s->acq));
	SVT_CHECK_OK(ibv_destroy_cq(s->bcq));
	svt_dev_close(&s->a);
	svt_dev_close(&s->b);
}

static uint64_t next_wr_id;

static void post_srq(struct sides *s, int n)
{
	for (int i = 0; i < n; i++) {
		uint64_t id = next_wr_id++;

		SVT_CHECK_OK(svt_post_srq_recv(s->srq, id,
					       s->bbuf + (id % 64) * SLOT, SLOT,
					       s->bmr->lkey));
	}
}

/* n SENDs alternating between the QPs; each message names its QP index and
 * sequence. Checks each completion lands in the SRQ's next WR, in order. */
static uint64_t expect_wr_id;

static void send_n(struct sides *s, int n)
{
	struct ibv_wc wc;

	for (int i = 0; i < n; i++) {
		int q = i % NQP;
		uint32_t *msg = (uint32_t *)(s->abuf + (size_t)i * SLOT);

		msg[0] = (uint32_t)q;
		msg[1] = (uint32_t)i;
		SVT_CHECK_OK(svt_post_send(s->aqp[q], (uint64_t)i, IBV_WR_SEND,
					   IBV_SEND_SIGNALED, msg, 8,
					   s->amr->lkey, 0, 0, 0));
		svt_poll_ok(s->acq, 1, &wc, 0);
		wc = svt_poll_one(s->bcq);
		SVT_CHECK_WC_OK(wc);
		SVT_CHECK_EQ(wc.opcode, IBV_WC_RECV);
		SVT_CHECK_EQ(wc.byte_len, 8);
		SVT_CHECK_EQ(wc.qp_num, s->bqp[q]->qp_num);
		SVT_CHECK_EQ(wc.wr_id, expect_wr_id); /* SRQ is FIFO */
		uint32_t *got = (uint32_t *)(s->bbuf + (wc.wr_id % 64) * SLOT);

		SVT_CHECK_EQ(got[0], q);
		SVT_CHECK_EQ(got[1], i);
		expect_wr_id++;
	}
}

static void test_shared(struct sides *s)
{
	struct ibv_recv_wr wr, *bad = NULL;

	/* A QP attached to an SRQ has no receive queue of its own. */
	memset(&wr, 0, sizeof(wr));
	SVT_CHECK_FAILS(ibv_post_recv(s->bqp[0], &wr, &bad));

	post_srq(s, 8);
	send_n(s, 6);
}

static void test_limit(struct sides *s)
{
	struct ibv_async_event ev;
	struct ibv_srq_attr a;

	/* 2 left from test_shared; top up to 10, arm at 6. */
	post_srq(s, 8);
	a.srq_limit = 6;
	SVT_CHECK_OK(ibv_modify_srq(s->srq, &a, IBV_SRQ_LIMIT));

	send_n(s, 3); /* 7 left: not below the limit */
	SVT_CHECK_RC(svt_wait_async_event(s->b.ctx, 100, &ev), ETIMEDOUT);

	send_n(s, 2); /* 5 left: below */
	SVT_CHECK_OK(svt_wait_async_event(s->b.ctx, 0, &ev));
	SVT_CHECK_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
	SVT_CHECK(ev.element.srq == s->srq);
	ibv_ack_async_event(&ev);

	/* One shot: disarmed, no further event. */
	SVT_CHECK_OK(ibv_query_srq(s->srq, &a));
	SVT_CHECK_EQ(a.srq_limit, 0);
	send_n(s, 2);
	SVT_CHECK_RC(svt_wait_async_event(s->b.ctx, 100, &ev), ETIMEDOUT);

	/* Re-arm: fires again. */
	post_srq(s, 4); /* 3 + 4 = 7 left */
	a.srq_limit = 5;
	SVT_CHECK_OK(ibv_modify_srq(s->srq, &a, IBV_SRQ_LIMIT));
	send_n(s, 3); /* 4 left */
	SVT_CHECK_OK(svt_wait_async_event(s->b.ctx, 0, &ev));
	SVT_CHECK_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
	SVT_CHECK(ev.element.srq == s->srq);
	ibv_ack_async_event(&ev);
}

static void check_srq(struct ibv_srq *srq, uint32_t max_wr, uint32_t limit)
{
	struct ibv_srq_attr q;

	SVT_CHECK_OK(ibv_query_srq(srq, &q));
	SVT_CHECK_EQ(q.max_wr, max_wr);
	SVT_CHECK_EQ(q.srq_limit, limit);
}

/* Resizing an SRQ in use (IBV_DEVICE_SRQ_RESIZE, as rxe): the WRs posted
 * stay, in order; what is refused changes nothing. */
static void test_resize(struct sides *s)
{
	struct ibv_srq_attr a;

	SVT_CHECK(s->b.dev_attr.device_cap_flags & IBV_DEVICE_SRQ_RESIZE);
	check_srq(s->srq, 64, 0);
	post_srq(s, 56); /* 4 left from test_limit: 60 posted, across the wrap */

	memset(&a, 0, sizeof(a));
	a.max_wr = 59; /* below the WRs posted */
	SVT_CHECK_RC(ibv_modify_srq(s->srq, &a, IBV_SRQ_MAX_WR), EINVAL);
	a.max_wr = 0;
	SVT_CHECK_RC(ibv_modify_srq(s->srq, &a, IBV_SRQ_MAX_WR), EINVAL);
	a.max_wr = (uint32_t)s->b.dev_attr.max_srq_wr + 1;
	SVT_CHECK_RC(ibv_modify_srq(s->srq, &a, IBV_SRQ_MAX_WR), EINVAL);
	a.max_wr = 100;
	a.srq_limit = 101; /* a limit above the new size: neither changes */
	SVT_CHECK_RC(ibv_modify_srq(s->srq, &a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), EINVAL);
	check_srq(s->srq, 64, 0);

	SVT_CHECK_OK(ibv_modify_srq(s->srq, &a, IBV_SRQ_MAX_WR));
	check_srq(s->srq, 100, 0);
	post_srq(s, 40); /* full at 100 */
	SVT_CHECK_FAILS(svt_post_srq_recv(s->srq, 999, s->bbuf, SLOT, s->bmr->lkey));
	send_n(s, 60); /* the 60 posted before the resize, in order, then ... */

	a.max_wr = 40; /* ... shrink to exactly what is posted */
	SVT_CHECK_OK(ibv_modify_srq(s->srq, &a, IBV_SRQ_MAX_WR));
	check_srq(s->srq, 40, 0);
	SVT_CHECK_FAILS(svt_post_srq_recv(s->srq, 999, s->bbuf, SLOT, s->bmr->lkey));

	a.srq_limit = 30;
	SVT_CHECK_OK(ibv_modify_srq(s->srq, &a, IBV_SRQ_LIMIT));
	a.max_wr = 48; /* growing works with a limit armed ... */
	SVT_CHECK_OK(ibv_modify_srq(s->srq, &a, IBV_SRQ_MAX_WR));
	send_n(s, 10); /* 30 left: not below the limit */
	a.srq_limit = 40;
	SVT_CHECK_OK(ibv_modify_srq(s->srq, &a, IBV_SRQ_LIMIT));
	a.max_wr = 35; /* ... shrinking below it does not, though 30 would fit */
	SVT_CHECK_RC(ibv_modify_srq(s->srq, &a, IBV_SRQ_MAX_WR), EINVAL);
	check_srq(s->srq, 48, 40);
	a.srq_limit = 0; /* disarm */
	SVT_CHECK_OK(ibv_modify_srq(s->srq, &a, IBV_SRQ_LIMIT));
	send_n(s, 26); /* 4 left, as test_last_wqe expects */
	check_srq(s->srq, 48, 0);
}

/* A QP attached to an SRQ that enters the error state reports "Last WQE
 * Reached" (IBV_EVENT_QP_LAST_WQE_REACHED, ibv_get_async_event(3)). */
static void test_last_wqe(struct sides *s)
{
	struct ibv_async_event ev;

	SVT_CHECK_OK(svt_qp_to_state(s->bqp[1], IBV_QPS_ERR));
	SVT_CHECK_OK(svt_wait_async_event(s->b.ctx, 0, &ev));
	SVT_CHECK_EQ(ev.event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
	SVT_CHECK(ev.element.qp == s->bqp[1]);
	ibv_ack_async_event(&ev);
	/* The SRQ's receives stay available to the other QP. */
	send_n(s, 1);
}

int main(void)
{
	struct svt_dev d;
	struct sides s;

	svt_watchdog(50);
	svt_dev_open(&d);
	test_create_limits(&d);
	svt_dev_close(&d);

	setup(&s);
	test_shared(&s);
	test_limit(&s);
	test_resize(&s);
	test_last_wqe(&s);
	teardown(&s);
	return 0;
}
