/*
 * err_loc_prot - local protection errors (IBV_WC_LOC_PROT_ERR), RC.
 *
 * A send WR whose gather list the requester may not read under the given lkey
 * (unknown key, an SGE reaching outside its MR, the MR of another PD), or an
 * RDMA READ whose scatter list lies in an MR without IBV_ACCESS_LOCAL_WRITE,
 * completes with IBV_WC_LOC_PROT_ERR. The QP then is in IBV_QPS_ERR
 * (ibv_query_qp), the WR posted behind it completes IBV_WC_WR_FLUSH_ERR, and
 * nothing reaches the peer: its posted receive stays unconsumed and its
 * memory keeps its pattern.
 *
 * The two QPs live on two separate ibv_contexts, so the traffic crosses the
 * transport.  Each case runs twice: on a fresh QP, and after a WRITE that
 * completed (same host: executed on the peer's memory, after which a WR
 * posted to an empty send queue is tried there straight from the post).
 */
#include "err_util.h"

#define MSG 64
#define SEED_A 0xa11ce
#define SEED_B 0xb0b
#define SUB_OFF 4096  /* a sub-MR over a.buf[SUB_OFF, SUB_OFF + SUB_LEN) */
#define SUB_LEN 4096
#define RECV_OFF 32768 /* b's posted receive */
#define RECV_LEN 4096

struct lp_case {
	struct svt_pair p;
	struct ibv_mr *sub;    /* optional extra MR on a's PD */
	struct ibv_pd *pd2;    /* optional second PD on a's context */
	struct ibv_mr *mr2;    /* optional MR in pd2 */
	struct ibv_sge sge[2];
	struct ibv_send_wr wr; /* the faulty WR, wr_id 1 */
};

static uint8_t *abuf(struct lp_case *c, size_t off)
{
	return (uint8_t *)c->p.a.buf + off;
}

static uint32_t bad_lkey(struct lp_case *c)
{
	uint32_t used[] = { c->p.a.mr->lkey, c->p.a.mr->rkey,
			    c->p.b.mr->lkey, c->p.b.mr->rkey };

	return errt_unused_key(c->p.a.mr->lkey, used, 4);
}

static void wr_basic(struct lp_case *c, enum ibv_wr_opcode op, int num_sge)
{
	c->wr.wr_id = 1;
	c->wr.opcode = op;
	c->wr.send_flags = IBV_SEND_SIGNALED;
	c->wr.sg_list = c->sge;
	c->wr.num_sge = num_sge;
	c->wr.wr.rdma.remote_addr = (uintptr_t)c->p.b.buf + 1024;
	c->wr.wr.rdma.rkey = c->p.b.mr->rkey;
}

static void send_bad_lkey(struct lp_case *c)
{
	c->sge[0] = (struct ibv_sge){ (uintptr_t)abuf(c, 0), MSG, bad_lkey(c) };
	wr_basic(c, IBV_WR_SEND, 1);
}

static void write_bad_lkey(struct lp_case *c)
{
	c->sge[0] = (struct ibv_sge){ (uintptr_t)abuf(c, 0), MSG, bad_lkey(c) };
	wr_basic(c, IBV_WR_RDMA_WRITE, 1);
}

static void reg_sub(struct lp_case *c, unsigned int access)
{
	c->sub = svt_reg_mr(c->p.a.pd, abuf(c, SUB_OFF), SUB_LEN, access);
}

/* SGE starting inside the sub-MR and ending 32 bytes past its end. */
static void send_sge_past_end(struct lp_case *c)
{
	reg_sub(c, IBV_ACCESS_LOCAL_WRITE);
	c->sge[0] = (struct ibv_sge){ (uintptr_t)abuf(c, SUB_OFF + SUB_LEN - 32),
				      MSG, c->sub->lkey };
	wr_basic(c, IBV_WR_SEND, 1);
}

/* SGE starting 16 bytes before the sub-MR. */
static void write_sge_before_start(struct lp_case *c)
{
	reg_sub(c, IBV_ACCESS_LOCAL_WRITE);
	c->sge[0] = (struct ibv_sge){ (uintptr_t)abuf(c, SUB_OFF - 16), MSG,
				      c->sub->lkey };
	wr_basic(c, IBV_WR_RDMA_WRITE, 1);
}

/* First SGE valid, second with an unknown lkey: the whole WR fails. */
static void send_second_sge_bad(struct lp_case *c)
{
	c->sge[0] = (struct ibv_sge){ (uintptr_t)abuf(c, 0), MSG,
				      c->p.a.mr->lkey };
	c->sge[1] = (struct ibv_sge){ (uintptr_t)abuf(c, MSG), MSG,
				      bad_lkey(c) };
	wr_basic(c, IBV_WR_SEND, 2);
}

/* lkey of an MR (same memory, all access) in another PD of the same context. */
static void send_other_pd_lkey(struct lp_case *c)
{
	c->pd2 = ibv_alloc_pd(c->p.a.ctx);
	SVT_CHECK_PTR(c->pd2);
	c->mr2 = svt_reg_mr(c->pd2, c->p.a.buf, c->p.a.buf_len,
			    SVT_ACCESS_ALL);
	c->sge[0] = (struct ibv_sge){ (uintptr_t)abuf(c, 0), MSG,
				      c->mr2->lkey };
	wr_basic(c, IBV_WR_SEND, 1);
}

/* RDMA READ whose destination MR lacks IBV_ACCESS_LOCAL_WRITE. */
static void read_into_readonly_mr(struct lp_case *c)
{
	reg_sub(c, 0);
	c->sge[0] = (struct ibv_sge){ (uintptr_t)abuf(c, SUB_OFF), MSG,
				      c->sub->lkey };
	wr_basic(c, IBV_WR_RDMA_READ, 1);
}

static void run_case(const char *name, void (*build)(struct lp_case *), bool warm)
{
	struct lp_case c;
	struct ibv_send_wr *bad = NULL;

	memset(&c, 0, sizeof(c));
	svt_pair_create(&c.p, IBV_QPT_RC, NULL);
	if (warm) {
		/* twice: the first may go by the wire (the peer's MR not yet
		 * seen), the second then executes on its memory */
		for (uint64_t id = 10; id < 12; id++) {
			SVT_CHECK_OK(svt_post_send(c.p.a.qp, id, IBV_WR_RDMA_WRITE,
						   IBV_SEND_SIGNALED, c.p.a.buf, MSG,
						   c.p.a.mr->lkey, (uintptr_t)c.p.b.buf,
						   c.p.b.mr->rkey, 0));
			errt_expect_wc(c.p.a.send_cq, id, IBV_WC_SUCCESS, 0);
		}
	}
	svt_fill(c.p.a.buf, c.p.a.buf_len, SEED_A);
	svt_fill(c.p.b.buf, c.p.b.buf_len, SEED_B);
	/* A receive on the peer, so a SEND that wrongly went out would land. */
	SVT_CHECK_OK(svt_post_recv(c.p.b.qp, 77, (uint8_t *)c.p.b.buf + RECV_OFF,
				   RECV_LEN, c.p.b.mr->lkey));

	build(&c);
	SVT_CHECK_OK(ibv_post_send(c.p.a.qp, &c.wr, &bad));
	/* A valid RDMA WRITE behind it: must be flushed, never executed. */
	SVT_CHECK_OK(svt_post_send(c.p.a.qp, 2, IBV_WR_RDMA_WRITE,
				   IBV_SEND_SIGNALED, c.p.a.buf, MSG,
				   c.p.a.mr->lkey, (uintptr_t)c.p.b.buf,
				   c.p.b.mr->rkey, 0));

	struct ibv_wc wc = errt_expect_wc(c.p.a.send_cq, 1,
					  IBV_WC_LOC_PROT_ERR, 0);
	SVT_CHECK_EQ(wc.qp_num, c.p.a.qp->qp_num);
	ERRT_CHECK_STATE(c.p.a.qp, IBV_QPS_ERR);
	errt_expect_flushed(c.p.a.send_cq, c.p.a.qp, 2, 1);

	/* A WR posted after the error is flushed as well. */
	SVT_CHECK_OK(svt_post_send(c.p.a.qp, 3, IBV_WR_SEND, IBV_SEND_SIGNALED,
				   c.p.a.buf, MSG, c.p.a.mr->lkey, 0, 0, 0));
	errt_expect_flushed(c.p.a.send_cq, c.p.a.qp, 3, 1);
	svt_expect_no_wc(c.p.a.send_cq, 50);

	/* Nothing reached the peer: receive unconsumed, memory untouched. */
	svt_expect_no_wc(c.p.b.recv_cq, 100);
	SVT_CHECK_FILL(c.p.b.buf, c.p.b.buf_len, SEED_B);
	/* The local buffer is only read (or, for the READ, must not be written). */
	SVT_CHECK_FILL(c.p.a.buf, c.p.a.buf_len, SEED_A);

	if (c.sub)
		SVT_CHECK_OK(ibv_dereg_mr(c.sub));
	if (c.mr2)
		SVT_CHECK_OK(ibv_dereg_mr(c.mr2));
	if (c.pd2)
		SVT_CHECK_OK(ibv_dealloc_pd(c.pd2));
	svt_pair_destroy(&c.p);
	svt_log("ok: %s%s -> LOC_PROT_ERR, QP in ERR, rest flushed", name,
		warm ? " (after a WRITE)" : "");
}

int main(void)
{
	svt_watchdog(50);
	for (int warm = 0; warm < 2; warm++) {
		run_case("SEND with unknown lkey", send_bad_lkey, warm);
		run_case("RDMA WRITE with unknown lkey", write_bad_lkey, warm);
		run_case("SEND with SGE past the MR end", send_sge_past_end, warm);
		run_case("RDMA WRITE with SGE before the MR start", write_sge_before_start,
			 warm);
		run_case("SEND whose second SGE has an unknown lkey", send_second_sge_bad,
			 warm);
		run_case("SEND with the lkey of another PD's MR", send_other_pd_lkey, warm);
		run_case("RDMA READ into an MR without LOCAL_WRITE", read_into_readonly_mr,
			 warm);
	}
	return 0;
}
