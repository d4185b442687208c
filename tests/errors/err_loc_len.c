/*
 * err_loc_len - a SEND larger than the receive it lands in, RC.
 *
 * The responder completes the receive with IBV_WC_LOC_LEN_ERR, NAKs the
 * request as invalid, and the requester completes the SEND with
 * IBV_WC_REM_INV_REQ_ERR. Both QPs then are in IBV_QPS_ERR: the WRs queued
 * behind (a second receive, a second SEND) complete IBV_WC_WR_FLUSH_ERR.
 * The receiver's memory outside the posted scatter list is never written.
 *
 * Cases: one short SGE; a two-SGE scatter list shorter than the message; a
 * zero-length receive (num_sge 0) hit by a 1-byte SEND.
 */
#include "err_util.h"

#define SEED_A 0x1e11
#define SEED_B 0x1e22
#define RECV_OFF 1024

/*
 * recv_len[0..nsge-1]: the SGE lengths of the posted receive (placed back to
 * back at b.buf + RECV_OFF). msg: the SEND's length.
 */
static void run_case(const char *name, const uint32_t *recv_len, int nsge,
		     uint32_t msg)
{
	struct svt_pair p;
	struct ibv_sge sge[4];
	struct ibv_recv_wr rwr, *bad_r = NULL;
	uint32_t total = 0;

	errt_rc_pair(&p, 0, 0);
	svt_fill(p.a.buf, p.a.buf_len, SEED_A);
	svt_fill(p.b.buf, p.b.buf_len, SEED_B);

	for (int i = 0; i < nsge; i++) {
		sge[i].addr = (uintptr_t)p.b.buf + RECV_OFF + total;
		sge[i].length = recv_len[i];
		sge[i].lkey = p.b.mr->lkey;
		total += recv_len[i];
	}
	memset(&rwr, 0, sizeof(rwr));
	rwr.wr_id = 11;
	rwr.sg_list = nsge ? sge : NULL;
	rwr.num_sge = nsge;
	SVT_CHECK_OK(ibv_post_recv(p.b.qp, &rwr, &bad_r));
	/* A second receive, big enough: must be flushed, not used. */
	SVT_CHECK_OK(svt_post_recv(p.b.qp, 12, (uint8_t *)p.b.buf + 8192, 4096,
				   p.b.mr->lkey));
	SVT_CHECK_LT(total, msg);

	SVT_CHECK_OK(svt_post_send(p.a.qp, 1, IBV_WR_SEND, IBV_SEND_SIGNALED,
				   p.a.buf, msg, p.a.mr->lkey, 0, 0, 0));
	SVT_CHECK_OK(svt_post_send(p.a.qp, 2, IBV_WR_SEND, IBV_SEND_SIGNALED,
				   p.a.buf, 8, p.a.mr->lkey, 0, 0, 0));

	struct ibv_wc rwc = errt_expect_wc(p.b.recv_cq, 11, IBV_WC_LOC_LEN_ERR,
					   0);
	SVT_CHECK_EQ(rwc.qp_num, p.b.qp->qp_num);
	struct ibv_wc swc = errt_expect_wc(p.a.send_cq, 1,
					   IBV_WC_REM_INV_REQ_ERR, 0);
	SVT_CHECK_EQ(swc.qp_num, p.a.qp->qp_num);

	ERRT_CHECK_STATE(p.a.qp, IBV_QPS_ERR);
	ERRT_CHECK_STATE(p.b.qp, IBV_QPS_ERR);
	errt_expect_flushed(p.a.send_cq, p.a.qp, 2, 1);
	errt_expect_flushed(p.b.recv_cq, p.b.qp, 12, 1);
	svt_expect_no_wc(p.a.send_cq, 50);
	svt_expect_no_wc(p.b.recv_cq, 50);
	svt_expect_no_wc(p.a.recv_cq, 0);
	svt_expect_no_wc(p.b.send_cq, 0);

	/*
	 * The scatter list itself may hold part of the message (the WR
	 * failed, its buffer is undefined); everything around it may not.
	 */
	SVT_CHECK_FILL(p.b.buf, RECV_OFF, SEED_B);
	for (size_t off = RECV_OFF + total; off < p.b.buf_len; off++)
		if (((uint8_t *)p.b.buf)[off] != svt_pattern_byte(SEED_B, off))
			SVT_FAIL("%s: receiver byte %zu (outside the %u-byte "
				 "scatter list) was overwritten",
				 name, off, total);

	svt_pair_destroy(&p);
	svt_log("ok: %s -> LOC_LEN_ERR / REM_INV_REQ_ERR, both QPs in ERR",
		name);
}

int main(void)
{
	static const uint32_t one[] = { 16 };
	static const uint32_t two[] = { 8, 16 };

	svt_watchdog(50);
	run_case("64-byte SEND into a 16-byte receive", one, 1, 64);
	run_case("32-byte SEND into an 8+16-byte scatter list", two, 2, 32);
	run_case("1-byte SEND into a zero-length receive", NULL, 0, 1);
	/* Longer than one MTU-sized segment: the error hits a later packet. */
	run_case("3-segment SEND into a 16-byte receive", one, 1, 3 * 4096 + 7);
	return 0;
}
