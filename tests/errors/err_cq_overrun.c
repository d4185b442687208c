/*
 * err_cq_overrun - a CQ that overflows reports it (IBV_EVENT_CQ_ERR).
 *
 * A CQ is created small and never polled while more signaled WRs complete
 * into it than it holds (cq->cqe, the size the library actually gave). The
 * overrun must not be silent: an IBV_EVENT_CQ_ERR async event naming that CQ
 * arrives on the context (ibv_get_async_event), as on Soft-RoCE, whose
 * rxe_cq_post raises it when the queue is full.
 *
 * The same holds for a receive CQ overflowed by incoming SENDs, also when
 * it was resized smaller after its queue began to take them.
 */
#include "err_util.h"

#define MSG 64

/* Wait (up to timeout_ms) for IBV_EVENT_CQ_ERR on cq; acks every event. */
static void expect_cq_err_event(struct ibv_context *ctx, struct ibv_cq *cq,
				int timeout_ms)
{
	uint64_t end = svt_now_ms() + timeout_ms;

	for (;;) {
		struct ibv_async_event ev;
		uint64_t now = svt_now_ms();
		int left = now < end ? (int)(end - now) : 0;
		int rc = svt_wait_async_event(ctx, left, &ev);

		if (rc == ETIMEDOUT)
			SVT_FAIL("no IBV_EVENT_CQ_ERR within %d ms after the "
				 "CQ (cqe %d) overflowed",
				 timeout_ms, cq->cqe);
		SVT_CHECK_OK(rc);
		enum ibv_event_type type = ev.event_type;
		struct ibv_cq *ev_cq = ev.element.cq;

		svt_log("async event: %s", ibv_event_type_str(type));
		ibv_ack_async_event(&ev);
		if (type == IBV_EVENT_CQ_ERR) {
			SVT_CHECK(ev_cq == cq);
			return;
		}
	}
}

/*
 * A pair whose CQs were asked for 4 entries and whose queues hold 128 WRs;
 * returns the CQ size the library gave (the same for all four CQs).
 */
static int small_cq_pair(struct svt_pair *p)
{
	errt_rc_pair(p, 4, 128);
	int cqe = p->a.send_cq->cqe;

	SVT_CHECK_GE(cqe, 4);
	SVT_CHECK_EQ(p->b.recv_cq->cqe, cqe);
	if (cqe + 4 > 128) {
		svt_pair_destroy(p);
		svt_skip("the library rounds a 4-entry CQ up past 124 entries");
	}
	return cqe;
}

static void overrun_send_cq(void)
{
	struct svt_pair p;
	int cqe = small_cq_pair(&p);

	/* cqe + 4 signaled RDMA WRITEs, never polled. */
	for (int i = 0; i < cqe + 4; i++)
		SVT_CHECK_OK(svt_post_send(p.a.qp, i, IBV_WR_RDMA_WRITE,
					   IBV_SEND_SIGNALED, p.a.buf, MSG,
					   p.a.mr->lkey, (uintptr_t)p.b.buf,
					   p.b.mr->rkey, 0));
	expect_cq_err_event(p.a.ctx, p.a.send_cq, 5000);
	svt_log("ok: send CQ with %d entries overflowed -> IBV_EVENT_CQ_ERR",
		cqe);
	svt_pair_destroy(&p);
}

static void overrun_recv_cq(void)
{
	struct svt_pair p;
	int cqe = small_cq_pair(&p);

	for (int i = 0; i < cqe + 4; i++)
		SVT_CHECK_OK(svt_post_recv(p.b.qp, i,
					   (uint8_t *)p.b.buf + i * MSG, MSG,
					   p.b.mr->lkey));
	/* Unsignaled SENDs: only the receiver's CQ fills up. */
	for (int i = 0; i < cqe + 4; i++)
		SVT_CHECK_OK(svt_post_send(p.a.qp, i, IBV_WR_SEND, 0, p.a.buf,
					   MSG, p.a.mr->lkey, 0, 0, 0));
	expect_cq_err_event(p.b.ctx, p.b.recv_cq, 5000);
	svt_log("ok: recv CQ with %d entries overflowed -> IBV_EVENT_CQ_ERR",
		cqe);
	svt_pair_destroy(&p);
}

/*
 * The receive CQ large enough for its queue when the queue began to take
 * SENDs, then made small (ibv_resize_cq): the SENDs that overflow it,
 * never polled, must still be reported.  (Between processes of one host
 * the sender places SENDs itself, and a CQ that cannot overrun is left to
 * its polls: a resize must change that.)
 */
static void overrun_recv_cq_resized(void)
{
	struct svt_pair p;
	struct ibv_wc wc;
	int cqe;

	errt_rc_pair(&p, 255, 128);
	SVT_CHECK_GE(p.b.recv_cq->cqe, 128);
	SVT_CHECK_OK(svt_post_recv(p.b.qp, 1000, p.b.buf, MSG, p.b.mr->lkey));
	SVT_CHECK_OK(svt_post_send(p.a.qp, 1000, IBV_WR_SEND, 0, p.a.buf, MSG, p.a.mr->lkey, 0,
				   0, 0));
	svt_poll_ok(p.b.recv_cq, 1, &wc, 5000);
	SVT_CHECK_EQ(wc.wr_id, 1000);
	SVT_CHECK_OK(ibv_resize_cq(p.b.recv_cq, 4));
	cqe = p.b.recv_cq->cqe;
	SVT_CHECK(cqe + 4 <= 127);
	for (int i = 0; i < cqe + 4; i++)
		SVT_CHECK_OK(svt_post_recv(p.b.qp, i, (uint8_t *)p.b.buf + i * MSG, MSG,
					   p.b.mr->lkey));
	for (int i = 0; i < cqe + 4; i++)
		SVT_CHECK_OK(svt_post_send(p.a.qp, i, IBV_WR_SEND, 0, p.a.buf, MSG, p.a.mr->lkey,
					   0, 0, 0));
	expect_cq_err_event(p.b.ctx, p.b.recv_cq, 5000);
	svt_log("ok: recv CQ resized to %d entries overflowed -> IBV_EVENT_CQ_ERR", cqe);
	svt_pair_destroy(&p);
}

int main(void)
{
	svt_watchdog(50);
	overrun_send_cq();
	overrun_recv_cq();
	overrun_recv_cq_resized();
	return 0;
}
