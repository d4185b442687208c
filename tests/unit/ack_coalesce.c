/*
 * unit_ack_coalesce: over a stream transport (shm, tcp), which loses
 * nothing, an RC requester's unsignaled SENDs and WRITEs need not ask for
 * their ACK; the ACK of a later message that asks covers them, and when
 * the queue goes idle the last packet is sent again, asking, after 1 ms
 * (engine/requester.c, "Coalesced ACKs").  Counted from the counters
 * segments, as `softverbs stat` reads them:
 *   - 7 unsignaled SENDs on a send queue of 16: all delivered, in order;
 *     a's QP receives one packet for all of them (the ACK it asked for once
 *     the queue was idle: ack_asks 1; two if a post was held off the CPU
 *     for a millisecond), not one each, and their WQEs are retired: 16
 *     more fit the queue
 *   - 5 unsignaled WRITEs: their bytes land; again one ACK (unless, over
 *     shm, they were executed on the target's memory directly)
 *   - a signaled SEND asks at once: its completion comes without an ask
 * Before coalescing a's QP received one ACK per message (7, then 5).
 */
#include "sv_test.h"
#include "svt_counters.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define SQ_DEPTH 16

static int64_t counter(struct svt_pair *p, enum sv_stat_qp_counter c)
{
	return svt_qp_counter(p->a.qp->qp_num, p->b.qp->qp_num, c);
}

/* After n unsignaled messages: wait for a's QP to ask for an ACK (more
 * than `asks` asks so far) and for the answers.  Each ask is answered by
 * one ACK for everything before it, so what a's QP received since rx0 is
 * one packet per ask (normally one: a thread held off the CPU for a
 * millisecond between two posts makes two), and one more for each packet
 * it had to send again besides the asks (a busy host can cause those):
 * fewer than one per message. */
static void expect_coalesced(struct svt_pair *p, int n, int64_t asks, int64_t rx0, int64_t re0,
			     const char *what)
{
	uint64_t t0 = svt_now_ms();
	int64_t rx, re, da;

	while (counter(p, SV_QPC_ACK_ASKS) <= asks && svt_now_ms() - t0 < SVT_TIMEOUT_MS)
		svt_sleep_ms(1);
	while (counter(p, SV_QPC_RX_PKTS) - rx0 < counter(p, SV_QPC_ACK_ASKS) - asks &&
	       svt_now_ms() - t0 < SVT_TIMEOUT_MS)
		svt_sleep_ms(1);
	svt_sleep_ms(50); /* (nothing else may come) */
	da = counter(p, SV_QPC_ACK_ASKS) - asks;
	rx = counter(p, SV_QPC_RX_PKTS) - rx0;
	/* (an ask is a packet sent again itself) */
	re = counter(p, SV_QPC_RETRANS) - re0 - da;
	SVT_CHECK(da >= 1);
	if (rx != da + re || rx >= n)
		SVT_FAIL("%s: a's QP received %" PRId64 " packets for %d messages (%" PRId64
			 " asks, %" PRId64 " other packets sent again)", what, rx, n, da, re);
	svt_log("%s: %" PRId64 " ACK(s) for them all, asked for once the queue was idle", what,
		rx);
}

/* Everything a's QP sent so far acknowledged (a signaled WRITE completes
 * after all before it), and its counters read after that. */
static void settle(struct svt_pair *p, int64_t *asks, int64_t *rx0, int64_t *re0)
{
	uint64_t t0 = svt_now_ms();
	struct ibv_wc wc;
	int rc;

	/* (a full queue frees once the ACK its tail asks for comes) */
	while ((rc = svt_post_send(p->a.qp, 99, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, p->a.buf, 8,
				   p->a.mr->lkey, (uintptr_t)p->b.buf + 8192, p->b.mr->rkey, 0)) ==
		       ENOMEM &&
	       svt_now_ms() - t0 < SVT_TIMEOUT_MS)
		svt_sleep_ms(1);
	SVT_CHECK_EQ(rc, 0);
	svt_poll_ok(p->a.send_cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.wr_id, 99);
	*asks = counter(p, SV_QPC_ACK_ASKS);
	*rx0 = counter(p, SV_QPC_RX_PKTS);
	*re0 = counter(p, SV_QPC_RETRANS);
}

int main(void)
{
	struct svt_pair_opts o;
	struct svt_pair p;
	uint8_t *a = NULL, *b = NULL;
	struct ibv_wc wc[SQ_DEPTH];
	int64_t rx0, re0, tx0, asks;

	svt_watchdog(60);
	/* the ACKs of the wire: with shared pages, a SEND between two
	 * contexts of this host is placed by its sender, with no packet
	 * (unit_direct_send), and so are the WRITEs */
	setenv("SOFTVERBS_SHARED_MR", "0", 1);
	if (getenv("SOFTVERBS_FAULTS"))
		svt_skip("coalescing is off where packets may be lost (SOFTVERBS_FAULTS)");
	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.qp.cap.max_send_wr = SQ_DEPTH;
	o.qp.cap.max_recv_wr = 64;
	o.separate_cqs = true;
	svt_pair_create(&p, IBV_QPT_RC, &o);
	a = p.a.buf;
	b = p.b.buf;
	for (int i = 0; i < 64; i++)
		SVT_CHECK_OK(svt_post_recv(p.b.qp, 100 + i, b + 64 * i, 64, p.b.mr->lkey));

	/* 7 unsignaled SENDs */
	settle(&p, &asks, &rx0, &re0);
	for (int i = 0; i < 7; i++) {
		memset(a + 64 * i, 0x10 + i, 64);
		SVT_CHECK_OK(svt_post_send(p.a.qp, i, IBV_WR_SEND, 0, a + 64 * i, 64,
					   p.a.mr->lkey, 0, 0, 0));
	}
	svt_poll_ok(p.b.recv_cq, 7, wc, 0);
	for (int i = 0; i < 7; i++) {
		SVT_CHECK_EQ(wc[i].wr_id, 100 + (uint64_t)i);
		SVT_CHECK_EQ(b[64 * i], 0x10 + i);
	}
	expect_coalesced(&p, 7, asks, rx0, re0, "7 unsignaled SENDs");
	/* retired: the whole queue is free again */
	for (int i = 0; i < SQ_DEPTH; i++)
		SVT_CHECK_OK(svt_post_send(p.a.qp, 20 + i, IBV_WR_SEND, 0, a, 8, p.a.mr->lkey, 0,
					   0, 0));
	svt_poll_ok(p.b.recv_cq, SQ_DEPTH, wc, 0);

	/* 5 unsignaled WRITEs */
	settle(&p, &asks, &rx0, &re0);
	tx0 = counter(&p, SV_QPC_TX_PKTS);
	memset(b + 4096, 0, 5 * 64);
	for (int i = 0; i < 5; i++) {
		memset(a + 4096 + 64 * i, 0x30 + i, 64);
		SVT_CHECK_OK(svt_post_send(p.a.qp, 40 + i, IBV_WR_RDMA_WRITE, 0, a + 4096 + 64 * i,
					   64, p.a.mr->lkey, (uintptr_t)(b + 4096 + 64 * i),
					   p.b.mr->rkey, 0));
	}
	/* (over shm they may be executed on b's memory directly, sending no
	 * packet: engine/direct_exec.c) */
	for (uint64_t t0 = svt_now_ms(); b[4096 + 4 * 64 + 63] != 0x34 &&
					 svt_now_ms() - t0 < SVT_TIMEOUT_MS;)
		svt_sleep_ms(1);
	for (int i = 0; i < 5; i++)
		SVT_CHECK_EQ(b[4096 + 64 * i + 63], 0x30 + i);
	if (counter(&p, SV_QPC_TX_PKTS) != tx0)
		expect_coalesced(&p, 5, asks, rx0, re0, "5 unsignaled WRITEs");
	else
		svt_log("5 unsignaled WRITEs: executed directly, no packet sent");

	/* a signaled SEND asks at once */
	settle(&p, &asks, &rx0, &re0);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 60, IBV_WR_SEND, IBV_SEND_SIGNALED, a, 8, p.a.mr->lkey,
				   0, 0, 0));
	svt_poll_ok(p.a.send_cq, 1, wc, 0);
	SVT_CHECK_EQ(wc[0].wr_id, 60);
	svt_poll_ok(p.b.recv_cq, 1, wc, 0);
	SVT_CHECK_EQ(counter(&p, SV_QPC_ACK_ASKS), asks);
	svt_log("a signaled SEND: completed on the ACK it asked for, no ask after");

	svt_pair_destroy(&p);
	return 0;
}
