/*
 * err_rem_inv_req - requests the responder QP does not accept, RC.
 *
 * 1. The target QP's qp_access_flags lack IBV_ACCESS_REMOTE_WRITE /
 *    REMOTE_READ / REMOTE_ATOMIC while the MR allows everything: an RDMA
 *    WRITE / READ / atomic on it completes IBV_WC_REM_INV_REQ_ERR (Soft-RoCE:
 *    check_op_valid -> NAK "invalid request"), the target memory is
 *    untouched, the requester QP is in ERR and the next WR is flushed.
 * 2. An atomic whose remote address is not 8-byte aligned. rdma-core's rxe
 *    provider already refuses it in ibv_post_send (EINVAL, bad_wr set);
 *    a provider that lets it through must get IBV_WC_REM_INV_REQ_ERR from the
 *    responder (rxe kernel: RESPST_ERR_MISALIGNED_ATOMIC). Either way the
 *    target's 8 bytes around it never change.
 */
#include "err_util.h"

#define SEED_A 0x1a1a
#define SEED_B 0x1b1b
#define TGT_OFF 4096
#define LEN 256

enum op { OP_WRITE, OP_READ, OP_FADD, OP_CAS };
static const char *const op_name[] = { "RDMA WRITE", "RDMA READ",
				       "FETCH_AND_ADD", "CMP_AND_SWP" };

static int post_op(struct svt_pair *p, enum op op, uint64_t wr_id,
		   uint64_t remote_addr)
{
	struct svt_side *a = &p->a;

	switch (op) {
	case OP_WRITE:
		return svt_post_send(a->qp, wr_id, IBV_WR_RDMA_WRITE,
				     IBV_SEND_SIGNALED, a->buf, LEN,
				     a->mr->lkey, remote_addr, p->b.mr->rkey,
				     0);
	case OP_READ:
		return svt_post_send(a->qp, wr_id, IBV_WR_RDMA_READ,
				     IBV_SEND_SIGNALED, a->buf, LEN,
				     a->mr->lkey, remote_addr, p->b.mr->rkey,
				     0);
	case OP_FADD:
		return svt_post_atomic(a->qp, wr_id,
				       IBV_WR_ATOMIC_FETCH_AND_ADD,
				       IBV_SEND_SIGNALED, a->buf, a->mr->lkey,
				       remote_addr, p->b.mr->rkey, 1, 0);
	case OP_CAS:
		/* compare = the pattern there, so a wrongly executed CAS swaps. */
		return svt_post_atomic(a->qp, wr_id, IBV_WR_ATOMIC_CMP_AND_SWP,
				       IBV_SEND_SIGNALED, a->buf, a->mr->lkey,
				       remote_addr, p->b.mr->rkey,
				       *(uint64_t *)(uintptr_t)remote_addr,
				       0x0123456789abcdefull);
	}
	return EINVAL;
}

/* After the failed WR: QP in ERR, a WRITE behind it flushed, memory intact. */
static void check_aftermath(struct svt_pair *p)
{
	ERRT_CHECK_STATE(p->a.qp, IBV_QPS_ERR);
	SVT_CHECK_OK(post_op(p, OP_WRITE, 2, (uintptr_t)p->b.buf));
	errt_expect_flushed(p->a.send_cq, p->a.qp, 2, 1);
	svt_expect_no_wc(p->a.send_cq, 50);
	SVT_CHECK_FILL(p->b.buf, p->b.buf_len, SEED_B);
	SVT_CHECK_FILL(p->a.buf, p->a.buf_len, SEED_A);
}

static void qp_access_case(enum op op, unsigned int missing)
{
	struct svt_pair p;
	struct svt_pair_opts o;

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.mr_access = SVT_ACCESS_ALL;
	o.conn.access = SVT_ACCESS_ALL & ~missing;
	svt_pair_create(&p, IBV_QPT_RC, &o);
	if (op >= OP_FADD && !errt_has_atomics(&p.a)) {
		svt_pair_destroy(&p);
		svt_log("skip %s: device has no atomics", op_name[op]);
		return;
	}
	svt_fill(p.a.buf, p.a.buf_len, SEED_A);
	svt_fill(p.b.buf, p.b.buf_len, SEED_B);

	SVT_CHECK_OK(post_op(&p, op, 1, (uintptr_t)p.b.buf + TGT_OFF));
	errt_expect_wc(p.a.send_cq, 1, IBV_WC_REM_INV_REQ_ERR, 0);
	check_aftermath(&p);
	svt_pair_destroy(&p);
	svt_log("ok: %s on a QP without the access flag -> REM_INV_REQ_ERR",
		op_name[op]);
}

static void misaligned_atomic_case(enum op op, unsigned int misalign)
{
	struct svt_pair p;

	svt_pair_create(&p, IBV_QPT_RC, NULL);
	if (!errt_has_atomics(&p.a)) {
		svt_pair_destroy(&p);
		svt_log("skip misaligned %s: device has no atomics",
			op_name[op]);
		return;
	}
	svt_fill(p.a.buf, p.a.buf_len, SEED_A);
	svt_fill(p.b.buf, p.b.buf_len, SEED_B);

	struct ibv_sge sge = { (uintptr_t)p.a.buf, 8, p.a.mr->lkey };
	struct ibv_send_wr wr, *bad = NULL;
	uint64_t raddr = (uintptr_t)p.b.buf + TGT_OFF + misalign;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 1;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.opcode = op == OP_CAS ? IBV_WR_ATOMIC_CMP_AND_SWP :
				   IBV_WR_ATOMIC_FETCH_AND_ADD;
	wr.wr.atomic.remote_addr = raddr;
	wr.wr.atomic.rkey = p.b.mr->rkey;
	memcpy(&wr.wr.atomic.compare_add, (void *)(uintptr_t)raddr, 8);
	wr.wr.atomic.swap = 0xfeedfacecafebeefull;

	int rc = ibv_post_send(p.a.qp, &wr, &bad);

	if (rc != 0) {
		/* Refused at post time (rdma-core rxe): documented errno. */
		SVT_CHECK_EQ(rc, EINVAL);
		SVT_CHECK(bad == &wr);
		svt_expect_no_wc(p.a.send_cq, 100);
		SVT_CHECK_FILL(p.b.buf, p.b.buf_len, SEED_B);
		ERRT_CHECK_STATE(p.a.qp, IBV_QPS_RTS);
		svt_log("ok: misaligned (+%u) %s refused by ibv_post_send "
			"(EINVAL)", misalign, op_name[op]);
	} else {
		errt_expect_wc(p.a.send_cq, 1, IBV_WC_REM_INV_REQ_ERR, 0);
		check_aftermath(&p);
		svt_log("ok: misaligned (+%u) %s -> REM_INV_REQ_ERR", misalign,
			op_name[op]);
	}
	svt_pair_destroy(&p);
}

int main(void)
{
	svt_watchdog(50);
	qp_access_case(OP_WRITE, IBV_ACCESS_REMOTE_WRITE);
	qp_access_case(OP_READ, IBV_ACCESS_REMOTE_READ);
	qp_access_case(OP_FADD, IBV_ACCESS_REMOTE_ATOMIC);
	qp_access_case(OP_CAS, IBV_ACCESS_REMOTE_ATOMIC);
	misaligned_atomic_case(OP_FADD, 4);
	misaligned_atomic_case(OP_CAS, 1);
	return 0;
}
