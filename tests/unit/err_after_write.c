/*
 * unit_err_after_write: a QP taken to ERR right after its application saw
 * the last byte of a peer's RDMA WRITE still answers that WRITE: the
 * writer's WQE completes with IBV_WC_SUCCESS.
 *
 * A NIC has put its ACK on the wire by the time the application can act on
 * the bytes.  Here the engine thread of the target reads a WRITE's payload
 * straight into place (a stream transport's direct receive) and answers it
 * once the read returns: a ibv_modify_qp(ERR) that came in between dropped
 * the packet, and the writer's WRITE never completed (it timed out, or was
 * flushed when its own side went down: dtest's WRITE ping-pong over tcp
 * did that, the side that saw the last WRITE disconnecting).  See settle_qp
 * in verbs/qp.c.
 *
 * Each round: a fresh pair (the writer a, the target b); a posts a
 * signaled WRITE of SIZE bytes whose last byte is the round's mark; the
 * main thread spins on that byte in b's buffer, polling nothing (b's
 * engine thread takes the WRITE in), then takes b's QP to ERR at once; a's
 * WRITE must then complete with success, and b's buffer hold the whole
 * message.  Same host over shm, the writer executes the WRITE itself and
 * completes it at the post: the rounds pass trivially there, and mean
 * something over tcp and rocev2.
 */
#include "sv_test.h"

#define SIZE (256 * 1024)
#define ROUNDS 40

static void round_once(int r)
{
	struct svt_pair_opts o;
	struct svt_pair p;
	volatile uint8_t *last;
	struct ibv_wc wc;
	uint8_t mark = (uint8_t)(0x40 + r);

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.buf_len = SIZE;
	/* a WRITE that goes unanswered fails in well under the test's limit */
	o.conn.timeout = 12;
	o.conn.retry_cnt = 2;
	svt_pair_create(&p, IBV_QPT_RC, &o);
	svt_fill(p.a.buf, SIZE, (uint32_t)r);
	((uint8_t *)p.a.buf)[SIZE - 1] = mark;
	last = (volatile uint8_t *)p.b.buf + SIZE - 1;

	SVT_CHECK_OK(svt_post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, p.a.buf,
				   SIZE, p.a.mr->lkey, (uintptr_t)p.b.buf, p.b.mr->rkey, 0));
	while (*last != mark)
		;
	SVT_CHECK_OK(svt_qp_to_state(p.b.qp, IBV_QPS_ERR));

	wc = svt_poll_one(p.a.send_cq);
	if (wc.status != IBV_WC_SUCCESS)
		SVT_FAIL("round %d: the WRITE whose last byte the target saw completed with %s",
			 r, ibv_wc_status_str(wc.status));
	SVT_CHECK_EQ(wc.wr_id, 1);
	SVT_CHECK_MEM(p.b.buf, p.a.buf, SIZE);
	svt_pair_destroy(&p);
}

int main(void)
{
	svt_watchdog(50);
	for (int r = 0; r < ROUNDS; r++)
		round_once(r);
	svt_log("ok: %d WRITEs answered although the target went to ERR once it saw them", ROUNDS);
	return 0;
}
