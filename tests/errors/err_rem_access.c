/*
 * err_rem_access - remote access violations never touch memory, RC.
 *
 * For each one-sided operation (RDMA WRITE, RDMA READ, CMP_AND_SWP,
 * FETCH_AND_ADD) and each way its R_Key check can fail:
 *   - an rkey that names no MR,
 *   - the rkey of an MR already deregistered,
 *   - an address range that starts before the MR,
 *   - an address range that ends after the MR,
 *   - an MR lacking the access flag the operation needs (all others set),
 *   - the rkey of an MR in another PD than the target QP's,
 * the initiator's WR completes IBV_WC_REM_ACCESS_ERR, its QP goes to ERR and
 * the RDMA WRITE posted right behind (valid rkey, valid range) is flushed and
 * never executed. The target memory - three pages, the MR covering the
 * middle one - and the initiator's local buffer stay byte-for-byte as filled.
 *
 * A control run per operation (valid rkey and range) must succeed and have
 * its effect, so that a failure above cannot come from the setup.
 */
#include "err_util.h"

#define PAGE 4096
#define TGT_LEN (3 * PAGE) /* target allocation: MR over [PAGE, 2 * PAGE) */
#define SEED_T 0x7a7a
#define SEED_A 0xa0a0
#define SEED_B 0xb0b0
#define LEN 128 /* RDMA WRITE/READ length */

enum op { OP_WRITE, OP_READ, OP_CAS, OP_FADD, OP_COUNT };
static const char *const op_name[] = { "RDMA WRITE", "RDMA READ",
				       "CMP_AND_SWP", "FETCH_AND_ADD" };

enum fault {
	F_NONE,
	F_UNKNOWN_RKEY,
	F_DEREGISTERED,
	F_BEFORE_START,
	F_PAST_END,
	F_NO_ACCESS,
	F_OTHER_PD,
	F_COUNT
};
static const char *const fault_name[] = {
	"control (valid)",	    "unknown rkey",
	"deregistered MR's rkey",   "range starting before the MR",
	"range ending past the MR", "MR without the access flag",
	"rkey of another PD's MR",
};

static unsigned int needed_access(enum op op)
{
	switch (op) {
	case OP_WRITE:
		return IBV_ACCESS_REMOTE_WRITE;
	case OP_READ:
		return IBV_ACCESS_REMOTE_READ;
	default:
		return IBV_ACCESS_REMOTE_ATOMIC;
	}
}

static bool is_atomic(enum op op)
{
	return op == OP_CAS || op == OP_FADD;
}

struct ra_case {
	struct svt_pair p;
	uint8_t *tbuf;          /* TGT_LEN bytes on b's side */
	struct ibv_mr *tmr;     /* over tbuf + PAGE, PAGE bytes */
	struct ibv_pd *other;   /* F_OTHER_PD: tmr's PD */
	uint64_t raddr;
	uint32_t rkey;
};

static void setup(struct ra_case *c, enum op op, enum fault f)
{
	uint32_t len = is_atomic(op) ? 8 : LEN;
	unsigned int access = SVT_ACCESS_ALL;
	struct ibv_pd *pd;

	memset(c, 0, sizeof(*c));
	svt_pair_create(&c->p, IBV_QPT_RC, NULL);
	svt_fill(c->p.a.buf, c->p.a.buf_len, SEED_A);
	svt_fill(c->p.b.buf, c->p.b.buf_len, SEED_B);
	c->tbuf = svt_alloc(TGT_LEN);
	svt_fill(c->tbuf, TGT_LEN, SEED_T);

	pd = c->p.b.pd;
	if (f == F_OTHER_PD) {
		c->other = ibv_alloc_pd(c->p.b.ctx);
		SVT_CHECK_PTR(c->other);
		pd = c->other;
	}
	if (f == F_NO_ACCESS)
		access &= ~needed_access(op);
	c->tmr = svt_reg_mr(pd, c->tbuf + PAGE, PAGE, access);
	c->rkey = c->tmr->rkey;
	c->raddr = (uintptr_t)c->tbuf + PAGE + 64;

	switch (f) {
	case F_NONE:
	case F_NO_ACCESS:
	case F_OTHER_PD:
		break;
	case F_UNKNOWN_RKEY: {
		uint32_t used[] = { c->tmr->rkey, c->tmr->lkey,
				    c->p.b.mr->rkey, c->p.b.mr->lkey,
				    c->p.a.mr->rkey, c->p.a.mr->lkey };
		c->rkey = errt_unused_key(c->tmr->rkey, used, 6);
		break;
	}
	case F_DEREGISTERED:
		SVT_CHECK_OK(ibv_dereg_mr(c->tmr));
		c->tmr = NULL;
		break;
	case F_BEFORE_START:
		c->raddr = (uintptr_t)c->tbuf + PAGE - (is_atomic(op) ? 8 :
							   len / 2);
		break;
	case F_PAST_END:
		c->raddr = (uintptr_t)c->tbuf + 2 * PAGE -
			   (is_atomic(op) ? 0 : len / 2);
		break;
	case F_COUNT:
		break;
	}
}

static void teardown(struct ra_case *c)
{
	if (c->tmr)
		SVT_CHECK_OK(ibv_dereg_mr(c->tmr));
	if (c->other)
		SVT_CHECK_OK(ibv_dealloc_pd(c->other));
	svt_pair_destroy(&c->p);
	free(c->tbuf);
}

static void post_op(struct ra_case *c, enum op op)
{
	struct svt_side *a = &c->p.a;

	switch (op) {
	case OP_WRITE:
		SVT_CHECK_OK(svt_post_send(a->qp, 1, IBV_WR_RDMA_WRITE,
					   IBV_SEND_SIGNALED, a->buf, LEN,
					   a->mr->lkey, c->raddr, c->rkey, 0));
		break;
	case OP_READ:
		SVT_CHECK_OK(svt_post_send(a->qp, 1, IBV_WR_RDMA_READ,
					   IBV_SEND_SIGNALED, a->buf, LEN,
					   a->mr->lkey, c->raddr, c->rkey, 0));
		break;
	case OP_CAS: {
		/* compare = current target value: a wrongly executed CAS swaps. */
		uint64_t cur;

		memcpy(&cur, (void *)(uintptr_t)c->raddr, 8);
		SVT_CHECK_OK(svt_post_atomic(a->qp, 1,
					     IBV_WR_ATOMIC_CMP_AND_SWP,
					     IBV_SEND_SIGNALED, a->buf,
					     a->mr->lkey, c->raddr, c->rkey,
					     cur, ~cur));
		break;
	}
	case OP_FADD:
		SVT_CHECK_OK(svt_post_atomic(a->qp, 1,
					     IBV_WR_ATOMIC_FETCH_AND_ADD,
					     IBV_SEND_SIGNALED, a->buf,
					     a->mr->lkey, c->raddr, c->rkey,
					     0x1000001, 0));
		break;
	case OP_COUNT:
		break;
	}
}

/* The control run's effect: memory changed exactly as the op says. */
static void check_control_effect(struct ra_case *c, enum op op)
{
	size_t off = c->raddr - (uintptr_t)c->tbuf;
	uint8_t *expect = svt_alloc(TGT_LEN);
	uint8_t *local = svt_alloc(LEN);
	uint64_t old;

	svt_fill(expect, TGT_LEN, SEED_T);
	svt_fill(local, LEN, SEED_A);
	memcpy(&old, expect + off, 8);
	switch (op) {
	case OP_WRITE:
		memcpy(expect + off, local, LEN);
		break;
	case OP_READ:
		memcpy(local, expect + off, LEN);
		break;
	case OP_CAS: {
		uint64_t nv = ~old;

		memcpy(expect + off, &nv, 8);
		memcpy(local, &old, 8);
		break;
	}
	case OP_FADD: {
		uint64_t nv = old + 0x1000001;

		memcpy(expect + off, &nv, 8);
		memcpy(local, &old, 8);
		break;
	}
	case OP_COUNT:
		break;
	}
	SVT_CHECK_MEM(c->tbuf, expect, TGT_LEN);
	SVT_CHECK_MEM(c->p.a.buf, local, LEN);
	free(expect);
	free(local);
}

static void run_case(enum op op, enum fault f)
{
	struct ra_case c;

	setup(&c, op, f);
	post_op(&c, op);
	/* A valid WRITE into b's own buffer right behind it. */
	SVT_CHECK_OK(svt_post_send(c.p.a.qp, 2, IBV_WR_RDMA_WRITE,
				   IBV_SEND_SIGNALED, c.p.a.buf, LEN,
				   c.p.a.mr->lkey, (uintptr_t)c.p.b.buf,
				   c.p.b.mr->rkey, 0));

	if (f == F_NONE) {
		errt_expect_wc(c.p.a.send_cq, 1, IBV_WC_SUCCESS, 0);
		errt_expect_wc(c.p.a.send_cq, 2, IBV_WC_SUCCESS, 0);
		check_control_effect(&c, op);
		ERRT_CHECK_STATE(c.p.a.qp, IBV_QPS_RTS);
	} else {
		struct ibv_wc wc = errt_expect_wc(c.p.a.send_cq, 1,
						  IBV_WC_REM_ACCESS_ERR, 0);
		SVT_CHECK_EQ(wc.qp_num, c.p.a.qp->qp_num);
		errt_expect_flushed(c.p.a.send_cq, c.p.a.qp, 2, 1);
		ERRT_CHECK_STATE(c.p.a.qp, IBV_QPS_ERR);
		svt_expect_no_wc(c.p.a.send_cq, 20);
		/* Byte for byte untouched: target, peer buffer, local buffer. */
		SVT_CHECK_FILL(c.tbuf, TGT_LEN, SEED_T);
		SVT_CHECK_FILL(c.p.b.buf, c.p.b.buf_len, SEED_B);
		SVT_CHECK_FILL(c.p.a.buf, c.p.a.buf_len, SEED_A);
	}
	/* The target side never sees a completion for one-sided traffic. */
	svt_expect_no_wc(c.p.b.recv_cq, 0);
	teardown(&c);
	svt_log("ok: %-13s %-28s -> %s", op_name[op], fault_name[f],
		f == F_NONE ? "SUCCESS" : "REM_ACCESS_ERR, memory untouched");
}

int main(void)
{
	struct svt_dev d;
	bool atomics;

	svt_watchdog(55);
	svt_dev_open(&d);
	atomics = d.dev_attr.atomic_cap != IBV_ATOMIC_NONE;
	svt_dev_close(&d);

	for (int op = 0; op < OP_COUNT; op++) {
		if (is_atomic(op) && !atomics) {
			svt_log("skip %s: device has no atomics", op_name[op]);
			continue;
		}
		for (int f = 0; f < F_COUNT; f++)
			run_case(op, f);
	}
	return 0;
}
