/*
 * err_rnr - Receiver Not Ready: rnr_retry, min_rnr_timer, RC.
 *
 * A SEND arriving at a QP with no receive posted is answered with an RNR NAK
 * carrying the responder's min_rnr_timer; the requester waits that long and
 * retries, at most rnr_retry times (7 = forever).
 *
 * 1. rnr_retry 0, 1, 3, 6 with the shortest timer: the SEND completes
 *    IBV_WC_RNR_RETRY_EXC_ERR within a bounded time, the requester QP is in
 *    ERR and the SEND behind it is flushed; the responder QP stays RTS.
 * 2. rnr_retry 7: the SEND stays outstanding (no completion for 300 ms);
 *    once a receive is posted it completes IBV_WC_SUCCESS and the data
 *    arrives intact.
 * 3. min_rnr_timer is honoured: with rnr_retry 3, timer 24 (40.96 ms per
 *    wait, 3 waits >= 122 ms) takes measurably longer than timer 1 (10 us).
 *
 * IB encoding of min_rnr_timer (ibv_modify_qp(3) / IBA table 45):
 * 1 = 0.01 ms, 12 = 0.64 ms, 24 = 40.96 ms, 0 = 655.36 ms.
 */
#include "err_util.h"

#define SEED_A 0x3a3a
#define MSG 1000

static void pair_rnr(struct svt_pair *p, uint8_t rnr_retry,
		     uint8_t min_rnr_timer)
{
	struct svt_pair_opts o;

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.separate_cqs = true;
	o.conn.rnr_retry = rnr_retry;
	o.conn.min_rnr_timer = min_rnr_timer;
	svt_pair_create(p, IBV_QPT_RC, &o);
	svt_fill(p->a.buf, p->a.buf_len, SEED_A);

	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;

	SVT_CHECK_OK(ibv_query_qp(p->a.qp, &attr, IBV_QP_RNR_RETRY, &init));
	SVT_CHECK_EQ(attr.rnr_retry, rnr_retry);
	SVT_CHECK_OK(ibv_query_qp(p->b.qp, &attr, IBV_QP_MIN_RNR_TIMER, &init));
	SVT_CHECK_EQ(attr.min_rnr_timer, min_rnr_timer);
}

/* Post a SEND with no receive on the peer; return ms until its RNR error. */
static uint64_t time_rnr_exceeded(uint8_t rnr_retry, uint8_t min_rnr_timer)
{
	struct svt_pair p;
	uint64_t t0, ms;

	pair_rnr(&p, rnr_retry, min_rnr_timer);
	t0 = svt_now_ms();
	SVT_CHECK_OK(svt_post_send(p.a.qp, 1, IBV_WR_SEND, IBV_SEND_SIGNALED,
				   p.a.buf, MSG, p.a.mr->lkey, 0, 0, 0));
	SVT_CHECK_OK(svt_post_send(p.a.qp, 2, IBV_WR_SEND, IBV_SEND_SIGNALED,
				   p.a.buf, MSG, p.a.mr->lkey, 0, 0, 0));
	struct ibv_wc wc = errt_expect_wc(p.a.send_cq, 1,
					  IBV_WC_RNR_RETRY_EXC_ERR, 5000);
	ms = svt_now_ms() - t0;
	SVT_CHECK_EQ(wc.qp_num, p.a.qp->qp_num);
	errt_expect_flushed(p.a.send_cq, p.a.qp, 2, 1);
	ERRT_CHECK_STATE(p.a.qp, IBV_QPS_ERR);
	/* RNR is the requester's error: the responder did nothing wrong. */
	ERRT_CHECK_STATE(p.b.qp, IBV_QPS_RTS);
	svt_expect_no_wc(p.b.recv_cq, 0);
	svt_pair_destroy(&p);
	svt_log("ok: rnr_retry %u, min_rnr_timer %u -> RNR_RETRY_EXC_ERR "
		"after %llu ms", rnr_retry, min_rnr_timer,
		(unsigned long long)ms);
	return ms;
}

static void rnr_forever(void)
{
	struct svt_pair p;
	struct ibv_wc wc;

	pair_rnr(&p, 7, 12);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 1, IBV_WR_SEND, IBV_SEND_SIGNALED,
				   p.a.buf, MSG, p.a.mr->lkey, 0, 0, 0));
	/* rnr_retry 7: retried for as long as it takes. */
	svt_expect_no_wc(p.a.send_cq, 300);
	ERRT_CHECK_STATE(p.a.qp, IBV_QPS_RTS);

	SVT_CHECK_OK(svt_post_recv(p.b.qp, 9, p.b.buf, MSG, p.b.mr->lkey));
	wc = errt_expect_wc(p.a.send_cq, 1, IBV_WC_SUCCESS, 3000);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_SEND);
	wc = errt_expect_wc(p.b.recv_cq, 9, IBV_WC_SUCCESS, 3000);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_RECV);
	SVT_CHECK_EQ(wc.byte_len, MSG);
	SVT_CHECK_FILL(p.b.buf, MSG, SEED_A);
	/* Exactly once: the retries did not deliver it twice. */
	svt_expect_no_wc(p.b.recv_cq, 50);
	svt_expect_no_wc(p.a.send_cq, 0);
	svt_pair_destroy(&p);
	svt_log("ok: rnr_retry 7 waits, then completes once a receive is "
		"posted");
}

int main(void)
{
	static const uint8_t retries[] = { 0, 1, 3, 6 };

	svt_watchdog(50);
	for (size_t i = 0; i < sizeof(retries); i++) {
		uint64_t ms = time_rnr_exceeded(retries[i], 1);
		/* 6 waits of 10 us: anything near a second means no bound. */
		SVT_CHECK_LT(ms, 2000);
	}

	rnr_forever();

	uint64_t fast = time_rnr_exceeded(3, 1);
	uint64_t slow = time_rnr_exceeded(3, 24);
	/* 3 waits of 40.96 ms = 122.9 ms at least; allow for a coarse clock. */
	SVT_CHECK_GE(slow, 110);
	SVT_CHECK_GE(slow, fast + 80);
	/* ... and not timer 0's 655 ms per wait (3 waits: 1966 ms). */
	SVT_CHECK_LT(slow, 1500);
	return 0;
}
