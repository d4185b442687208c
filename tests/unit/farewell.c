/*
 * unit_farewell: where packets may be lost (rocev2, or SOFTVERBS_FAULTS, as
 * CMake sets here with a drop probability that never drops), an RC QP being
 * destroyed sends the ACK of what it received again, twice
 * (sv_responder_farewell): a peer whose last SEND arrived but whose ACK was
 * lost would otherwise end in IBV_WC_RETRY_EXC_ERR, as ibv_rc_pingpong's
 * client does when the server has already gone.
 *   - a SEND from b to a (so that b's QP has its connection, as
 *     ibv_rc_pingpong's server has), then one from a to b, its ACK counted
 *     at a; b's QP destroyed: a's QP receives exactly two more packets, and
 *     resends nothing
 *   - a pair that exchanged nothing: b's QP destroyed sends a nothing
 * Counted from the counters segments (src/stats), as softverbs stat reads
 * them.
 */
#include "sv_test.h"
#include "svt_counters.h"

#include <inttypes.h>
#include <unistd.h>

/* Wait until a's QP (connected to b's, bqpn) has received n packets; then
 * no more may come. */
static void expect_rx(struct svt_pair *p, uint32_t bqpn, uint64_t n, const char *what)
{
	uint64_t t0 = svt_now_ms();
	int64_t got;

	while ((got = svt_qp_counter(p->a.qp->qp_num, bqpn, SV_QPC_RX_PKTS)) < (int64_t)n &&
	       svt_now_ms() - t0 < SVT_TIMEOUT_MS)
		svt_sleep_ms(1);
	svt_sleep_ms(100);
	got = svt_qp_counter(p->a.qp->qp_num, bqpn, SV_QPC_RX_PKTS);
	if (got != (int64_t)n)
		SVT_FAIL("%s: a's QP received %" PRId64 " packets, expected %" PRIu64, what, got,
			 n);
}

int main(void)
{
	struct svt_pair p;
	struct ibv_wc wc;
	uint32_t bqpn;

	svt_watchdog(60);
	if (!getenv("SOFTVERBS_FAULTS"))
		svt_skip("needs SOFTVERBS_FAULTS (CMake sets it)");

	/* a SEND each way, the second one's ACK; then b goes */
	svt_pair_create(&p, IBV_QPT_RC, NULL);
	SVT_CHECK_OK(svt_post_recv(p.a.qp, 1, p.a.buf, 64, p.a.mr->lkey));
	SVT_CHECK_OK(svt_post_recv(p.b.qp, 1, p.b.buf, 64, p.b.mr->lkey));
	SVT_CHECK_OK(svt_post_send(p.b.qp, 2, IBV_WR_SEND, IBV_SEND_SIGNALED, p.b.buf, 64,
				   p.b.mr->lkey, 0, 0, 0));
	svt_poll_ok(p.b.send_cq, 1, &wc, 0);
	svt_poll_ok(p.a.recv_cq, 1, &wc, 0);
	bqpn = p.b.qp->qp_num;
	expect_rx(&p, bqpn, 1, "b's SEND");
	SVT_CHECK_OK(svt_post_send(p.a.qp, 2, IBV_WR_SEND, IBV_SEND_SIGNALED, p.a.buf, 64,
				   p.a.mr->lkey, 0, 0, 0));
	svt_poll_ok(p.a.send_cq, 1, &wc, 0);
	svt_poll_ok(p.b.recv_cq, 1, &wc, 0);
	expect_rx(&p, bqpn, 2, "a's SEND's ACK");
	SVT_CHECK_OK(ibv_destroy_qp(p.b.qp));
	p.b.qp = NULL;
	expect_rx(&p, bqpn, 4, "b's QP destroyed");
	SVT_CHECK_EQ(svt_qp_counter(p.a.qp->qp_num, bqpn, SV_QPC_RETRANS), 0);
	svt_log("a SEND acknowledged, then its receiver destroyed: its ACK came twice more");
	svt_pair_destroy(&p);

	/* nothing exchanged: nothing to acknowledge */
	svt_pair_create(&p, IBV_QPT_RC, NULL);
	bqpn = p.b.qp->qp_num;
	SVT_CHECK_OK(ibv_destroy_qp(p.b.qp));
	p.b.qp = NULL;
	expect_rx(&p, bqpn, 0, "an idle pair's b destroyed");
	svt_log("an idle QP destroyed: nothing sent");
	svt_pair_destroy(&p);
	return 0;
}
