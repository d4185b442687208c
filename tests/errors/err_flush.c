/*
 * err_flush - moving a QP to IBV_QPS_ERR flushes everything outstanding, RC.
 *
 * The requester's first SEND is held in an endless RNR loop (the peer has no
 * receive, rnr_retry 7), so the SENDs, RDMA WRITEs and READs queued behind it
 * - signaled and unsignaled - stay outstanding, and the QP has receives
 * posted. ibv_modify_qp(IBV_QPS_ERR) must then complete every one of them
 * with IBV_WC_WR_FLUSH_ERR: exactly once, in posting order per queue, with
 * the right wr_id and qp_num (error completions are generated whether or not
 * the WR was signaled). None of the flushed RDMA WRITEs may have reached the
 * peer's memory.
 *
 * Posting to a QP in ERR: rdma-core's Soft-RoCE accepts the WR (returns 0)
 * and completes it with IBV_WC_WR_FLUSH_ERR; the same is asserted here for
 * both queues.
 */
#include "err_util.h"

#define SEED_A 0xf1a5
#define SEED_B 0xf1b5
#define NSEND 20
#define NRECV 16
#define MSG 256

static void post_mix(struct svt_pair *p, int i)
{
	struct svt_side *a = &p->a;
	uint64_t id = 200 + i;
	/* Every third WR unsignaled: it must still be flushed. */
	unsigned int flags = (i % 3 == 1) ? 0 : IBV_SEND_SIGNALED;
	uint8_t *l = (uint8_t *)a->buf + (size_t)i * MSG;
	uint64_t r = (uintptr_t)p->b.buf + (size_t)i * MSG;

	if (i == 0) /* the one stuck in RNR: signaled SEND */
		flags = IBV_SEND_SIGNALED;
	switch (i % 4) {
	case 0:
	case 3:
		SVT_CHECK_OK(svt_post_send(a->qp, id, IBV_WR_SEND, flags, l,
					   MSG, a->mr->lkey, 0, 0, 0));
		break;
	case 1:
		SVT_CHECK_OK(svt_post_send(a->qp, id, IBV_WR_RDMA_WRITE, flags,
					   l, MSG, a->mr->lkey, r,
					   p->b.mr->rkey, 0));
		break;
	case 2:
		SVT_CHECK_OK(svt_post_send(a->qp, id, IBV_WR_RDMA_READ, flags,
					   l, MSG, a->mr->lkey, r,
					   p->b.mr->rkey, 0));
		break;
	}
}

static void flush_outstanding(void)
{
	struct svt_pair p;

	errt_rc_pair(&p, 0, 0); /* rnr_retry 7 by default */
	SVT_CHECK_EQ(p.opts.conn.rnr_retry, 7);
	svt_fill(p.a.buf, p.a.buf_len, SEED_A);
	svt_fill(p.b.buf, p.b.buf_len, SEED_B);

	for (int i = 0; i < NRECV; i++)
		SVT_CHECK_OK(svt_post_recv(p.a.qp, 100 + i,
					   (uint8_t *)p.a.buf + 32768 + i * MSG,
					   MSG, p.a.mr->lkey));
	for (int i = 0; i < NSEND; i++)
		post_mix(&p, i);

	/* All held behind the RNR-looping SEND; no receive has anything. */
	svt_expect_no_wc(p.a.send_cq, 150);
	svt_expect_no_wc(p.a.recv_cq, 0);
	ERRT_CHECK_STATE(p.a.qp, IBV_QPS_RTS);

	SVT_CHECK_OK(svt_qp_to_state(p.a.qp, IBV_QPS_ERR));
	ERRT_CHECK_STATE(p.a.qp, IBV_QPS_ERR);

	errt_expect_flushed(p.a.send_cq, p.a.qp, 200, NSEND);
	errt_expect_flushed(p.a.recv_cq, p.a.qp, 100, NRECV);
	/* Exactly once. */
	svt_expect_no_wc(p.a.send_cq, 100);
	svt_expect_no_wc(p.a.recv_cq, 0);

	/* Posting in ERR: accepted, then flushed (both queues, in order). */
	SVT_CHECK_OK(svt_post_send(p.a.qp, 300, IBV_WR_SEND, IBV_SEND_SIGNALED,
				   p.a.buf, MSG, p.a.mr->lkey, 0, 0, 0));
	SVT_CHECK_OK(svt_post_send(p.a.qp, 301, IBV_WR_RDMA_WRITE, 0, p.a.buf,
				   MSG, p.a.mr->lkey, (uintptr_t)p.b.buf,
				   p.b.mr->rkey, 0));
	SVT_CHECK_OK(svt_post_recv(p.a.qp, 400, p.a.buf, MSG, p.a.mr->lkey));
	errt_expect_flushed(p.a.send_cq, p.a.qp, 300, 2);
	errt_expect_flushed(p.a.recv_cq, p.a.qp, 400, 1);
	svt_expect_no_wc(p.a.send_cq, 50);
	svt_expect_no_wc(p.a.recv_cq, 0);

	/* Flushed RDMA WRITEs never executed; the peer saw nothing. */
	SVT_CHECK_FILL(p.b.buf, p.b.buf_len, SEED_B);
	svt_expect_no_wc(p.b.send_cq, 0);
	svt_expect_no_wc(p.b.recv_cq, 0);
	/* Flushed READs and receives wrote nothing locally either. */
	SVT_CHECK_FILL(p.a.buf, p.a.buf_len, SEED_A);

	svt_pair_destroy(&p);
	svt_log("ok: %d sends and %d receives flushed in order, posts in ERR "
		"flushed", NSEND, NRECV);
}

/* An idle QP moved to ERR: nothing to flush, later posts flush. */
static void flush_idle_then_post(void)
{
	struct svt_pair p;
	struct ibv_wc wc;

	errt_rc_pair(&p, 0, 0);

	/* One successful round trip first: the QP really worked. */
	SVT_CHECK_OK(svt_post_recv(p.b.qp, 1, p.b.buf, MSG, p.b.mr->lkey));
	SVT_CHECK_OK(svt_post_send(p.a.qp, 1, IBV_WR_SEND, IBV_SEND_SIGNALED,
				   p.a.buf, MSG, p.a.mr->lkey, 0, 0, 0));
	svt_poll_ok(p.a.send_cq, 1, &wc, 0);
	svt_poll_ok(p.b.recv_cq, 1, &wc, 0);

	SVT_CHECK_OK(svt_qp_to_state(p.a.qp, IBV_QPS_ERR));
	svt_expect_no_wc(p.a.send_cq, 50);
	svt_expect_no_wc(p.a.recv_cq, 0);

	for (int i = 0; i < 5; i++)
		SVT_CHECK_OK(svt_post_send(p.a.qp, 10 + i, IBV_WR_SEND,
					   IBV_SEND_SIGNALED, p.a.buf, MSG,
					   p.a.mr->lkey, 0, 0, 0));
	for (int i = 0; i < 3; i++)
		SVT_CHECK_OK(svt_post_recv(p.a.qp, 20 + i, p.a.buf, MSG,
					   p.a.mr->lkey));
	errt_expect_flushed(p.a.send_cq, p.a.qp, 10, 5);
	errt_expect_flushed(p.a.recv_cq, p.a.qp, 20, 3);
	svt_expect_no_wc(p.a.send_cq, 50);
	/* Nothing of it reached the peer. */
	svt_expect_no_wc(p.b.recv_cq, 0);

	svt_pair_destroy(&p);
	svt_log("ok: idle QP to ERR: no spurious completion, posts flushed");
}

int main(void)
{
	svt_watchdog(50);
	flush_outstanding();
	flush_idle_then_post();
	return 0;
}
