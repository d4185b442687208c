/*
 * RoCEv2 datagrams for a context that was closed and opened again in the
 * same process (src/transport/rocev2.c, forwarding between the contexts of
 * a host).
 *
 * Every context of the host listens on UDP 4791 (SO_REUSEPORT), and the
 * kernel gives a datagram to any of them; one that gets a datagram for
 * another context's QP passes it on over this process's connection to that
 * context.  A context opened after another closed claims the same block of
 * QP numbers, hence the same port: the connection this process kept to the
 * old one is stale, and the first datagram passed on over it after the
 * reopen must still arrive, not be dropped with the connection.
 *
 * Context X stays open; context Y is opened and closed 25 times.  Each
 * round, X's UD QP sends 40 single-packet messages, one at a time, round
 * robin to 16 UD QPs of Y, whose QPNs spread the datagrams over X's eight
 * UDP source ports and so over both listeners of the port (a flow that
 * lands on X's is passed on to Y).  Y's receiver waits on a completion
 * channel, as a program blocked in ibv_get_cq_event would: 1,000 messages,
 * none lost.
 */
#include "sv_test.h"

#include <unistd.h>

#define ROUNDS 25
#define PER_ROUND 40
#define NQP 16
#define LEN 256
#define GRH 40
#define QKEY 0x11111111u
#define SGID 3 /* the IPv4 address's RoCE v2 GID */

struct receiver {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp[NQP];
	uint8_t *buf; /* NQP slots of GRH + LEN */
	struct ibv_mr *mr;
	union ibv_gid gid;
};

static void post_slot(struct receiver *r, int q)
{
	SVT_CHECK_OK(svt_post_recv(r->qp[q], (uint64_t)q, r->buf + (size_t)q * (GRH + LEN),
				   GRH + LEN, r->mr->lkey));
}

static void receiver_open(struct receiver *r)
{
	memset(r, 0, sizeof(*r));
	r->ctx = svt_open_context();
	r->pd = ibv_alloc_pd(r->ctx);
	SVT_CHECK_PTR(r->pd);
	SVT_CHECK_OK(ibv_query_gid(r->ctx, 1, SGID, &r->gid));
	r->ch = ibv_create_comp_channel(r->ctx);
	SVT_CHECK_PTR(r->ch);
	r->scq = svt_create_cq(r->ctx, NQP, NULL);
	r->rcq = svt_create_cq(r->ctx, 2 * NQP, r->ch);
	r->buf = svt_alloc((size_t)NQP * (GRH + LEN));
	r->mr = svt_reg_mr(r->pd, r->buf, (size_t)NQP * (GRH + LEN), IBV_ACCESS_LOCAL_WRITE);
	for (int q = 0; q < NQP; q++) {
		r->qp[q] = svt_ud_qp(r->pd, r->scq, r->rcq, QKEY, SGID);
		post_slot(r, q);
	}
	SVT_CHECK_OK(ibv_req_notify_cq(r->rcq, 0));
}

static void receiver_close(struct receiver *r)
{
	for (int q = 0; q < NQP; q++)
		SVT_CHECK_OK(ibv_destroy_qp(r->qp[q]));
	SVT_CHECK_OK(ibv_dereg_mr(r->mr));
	free(r->buf);
	SVT_CHECK_OK(ibv_destroy_cq(r->scq));
	SVT_CHECK_OK(ibv_destroy_cq(r->rcq));
	SVT_CHECK_OK(ibv_destroy_comp_channel(r->ch));
	SVT_CHECK_OK(ibv_dealloc_pd(r->pd));
	SVT_CHECK_OK(ibv_close_device(r->ctx));
}

/*
 * The next receive completion, waiting on the channel as a blocked
 * receiver does.  A datagram on loopback arrives in microseconds; the
 * harness's 5 s is for a host busy with other work, and only a lost
 * message ever waits it out.
 */
static bool next_recv(struct receiver *r, struct ibv_wc *wc)
{
	uint64_t end = svt_now_ms() + SVT_TIMEOUT_MS;

	for (;;) {
		struct ibv_cq *cq;
		void *cq_ctx;
		int n = ibv_poll_cq(r->rcq, 1, wc);
		uint64_t now = svt_now_ms();

		SVT_CHECK_GE(n, 0);
		if (n)
			return true;
		if (now >= end || svt_wait_cq_event(r->ch, (int)(end - now), &cq, &cq_ctx))
			return false;
		SVT_CHECK(cq == r->rcq);
		ibv_ack_cq_events(cq, 1);
		SVT_CHECK_OK(ibv_req_notify_cq(r->rcq, 0));
	}
}

int main(void)
{
	struct svt_dev x;
	struct ibv_cq *xcq;
	struct ibv_qp *xqp;
	struct ibv_mr *xmr;
	uint8_t *sbuf = svt_alloc(LEN);
	int delivered = 0;

	svt_watchdog(110);
	setenv("SOFTVERBS_TRANSPORT", "rocev2", 1);
	svt_dev_open(&x);
	xcq = svt_create_cq(x.ctx, 16, NULL);
	xqp = svt_ud_qp(x.pd, xcq, xcq, QKEY, SGID);
	xmr = svt_reg_mr(x.pd, sbuf, LEN, IBV_ACCESS_LOCAL_WRITE);

	for (int round = 0; round < ROUNDS; round++) {
		struct receiver y;
		struct ibv_ah_attr aa;
		struct svt_conn c;
		struct ibv_ah *ah;

		receiver_open(&y);
		svt_conn_default(&c, IBV_QPT_UD);
		c.sgid_index = SGID;
		svt_ah_attr(&aa, &y.gid, &c);
		ah = ibv_create_ah(x.pd, &aa);
		SVT_CHECK_PTR(ah);
		for (int m = 0; m < PER_ROUND; m++) {
			int q = m % NQP;
			uint32_t seed = (uint32_t)(round * PER_ROUND + m);
			struct ibv_wc wc;

			svt_fill(sbuf, LEN, seed);
			SVT_CHECK_OK(svt_post_ud_send(xqp, seed, IBV_SEND_SIGNALED, sbuf, LEN,
						      xmr->lkey, ah, y.qp[q]->qp_num, QKEY));
			svt_poll_ok(xcq, 1, &wc, 0);
			SVT_CHECK_MSG(next_recv(&y, &wc),
				      "round %d: message %d to QP %u lost (%d delivered before it)",
				      round, m, y.qp[q]->qp_num, delivered);
			SVT_CHECK_WC_OK(wc);
			SVT_CHECK_EQ(wc.wr_id, q);
			SVT_CHECK_EQ(wc.qp_num, y.qp[q]->qp_num);
			SVT_CHECK_EQ(wc.src_qp, xqp->qp_num);
			SVT_CHECK_EQ(wc.byte_len, GRH + LEN);
			SVT_CHECK_FILL(y.buf + (size_t)q * (GRH + LEN) + GRH, LEN, seed);
			post_slot(&y, q);
			delivered++;
		}
		SVT_CHECK_OK(ibv_destroy_ah(ah));
		receiver_close(&y);
	}
	svt_log("%d messages over %d reopened contexts, none lost", delivered, ROUNDS);
	SVT_CHECK_OK(ibv_destroy_qp(xqp));
	SVT_CHECK_OK(ibv_dereg_mr(xmr));
	SVT_CHECK_OK(ibv_destroy_cq(xcq));
	svt_dev_close(&x);
	free(sbuf);
	return 0;
}
