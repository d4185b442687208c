/*
 * err_invalid_args - invalid arguments are refused and change nothing.
 *
 * - ibv_post_send / ibv_post_recv with num_sge above the QP's max: the verb
 *   returns EINVAL (for a send, mlx5 answers ENOMEM: accepted too) and
 *   *bad_wr points at that WR. The WR before it in the list was posted and completes; the ones
 *   from bad_wr on were not (ibv_post_send(3): "stops processing WRs from
 *   this list at the first failure ... returns this failing WR").
 * - A full receive / send queue: ENOMEM with bad_wr set; a QP in RESET:
 *   EINVAL (as rdma-core's own tests/utils.py expects of every provider).
 *   Only the accepted WRs are queued (moving to ERR flushes exactly them).
 * - ibv_modify_qp with an illegal transition, a missing required attribute,
 *   an attribute not allowed in the transition, an unknown mask bit or an
 *   invalid port: EINVAL (EOPNOTSUPP for unknown mask bits, as the kernel
 *   uverbs layer answers), and "none of the attributes will be modified
 *   (including the QP state)" (ibv_modify_qp(3)).
 * - ibv_destroy_cq of a CQ a QP still uses: EBUSY, and the CQ keeps working.
 * - ibv_dealloc_pd of a PD with a live QP or MR: EBUSY, the PD keeps working.
 * - ibv_reg_mr: length 0 (EINVAL), NULL pd (EINVAL), REMOTE_WRITE or
 *   REMOTE_ATOMIC without LOCAL_WRITE (EINVAL, ibv_reg_mr(3)), unmapped
 *   memory (fails): NULL is returned, nothing is registered.
 */
#include <sys/mman.h>

#include "err_util.h"

#define MSG 64

static int max_send_sge(struct ibv_qp *qp, int *max_recv_sge)
{
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;

	SVT_CHECK_OK(ibv_query_qp(qp, &attr, IBV_QP_CAP, &init));
	*max_recv_sge = (int)attr.cap.max_recv_sge;
	return (int)attr.cap.max_send_sge;
}

/* rxe: EINVAL; mlx5 answers a too long send gather list with ENOMEM. */
static void check_errno_sge(int rc)
{
	SVT_CHECK_MSG(rc == EINVAL || rc == ENOMEM,
		      "returned %d (%s), expected EINVAL (or ENOMEM)", rc,
		      strerror(rc > 0 ? rc : -rc));
}

static void too_many_sges(void)
{
	struct svt_pair p;
	int max_r, max_s;

	errt_rc_pair(&p, 0, 0);
	max_s = max_send_sge(p.a.qp, &max_r);
	SVT_CHECK_GE(max_s, 1);
	SVT_CHECK_GE(max_r, 1);
	SVT_CHECK_LE(max_s, 1024);
	SVT_CHECK_LE(max_r, 1024);

	int n = (max_s > max_r ? max_s : max_r) + 1;
	struct ibv_sge *sges = calloc((size_t)n, sizeof(*sges));
	SVT_CHECK_PTR(sges);
	for (int i = 0; i < n; i++)
		sges[i] = (struct ibv_sge){ (uintptr_t)p.a.buf + (size_t)i * 8,
					    8, p.a.mr->lkey };

	/* send list: valid WRITE, WRITE with max+1 SGEs, valid WRITE */
	struct ibv_send_wr w[3], *bad = NULL;
	memset(w, 0, sizeof(w));
	for (int i = 0; i < 3; i++) {
		w[i].wr_id = 1 + i;
		w[i].opcode = IBV_WR_RDMA_WRITE;
		w[i].send_flags = IBV_SEND_SIGNALED;
		w[i].sg_list = sges;
		w[i].num_sge = 1;
		w[i].wr.rdma.remote_addr = (uintptr_t)p.b.buf + 4096 * i;
		w[i].wr.rdma.rkey = p.b.mr->rkey;
		w[i].next = i < 2 ? &w[i + 1] : NULL;
	}
	w[1].num_sge = max_s + 1;
	memset(p.a.buf, 0xab, 4096);
	check_errno_sge(ibv_post_send(p.a.qp, &w[0], &bad));
	SVT_CHECK(bad == &w[1]);
	errt_expect_wc(p.a.send_cq, 1, IBV_WC_SUCCESS, 0);
	svt_expect_no_wc(p.a.send_cq, 100);
	/* WR 3 was never posted: its target is still zero. */
	for (int i = 0; i < 8; i++)
		SVT_CHECK_EQ(((uint8_t *)p.b.buf)[2 * 4096 + i], 0);
	ERRT_CHECK_STATE(p.a.qp, IBV_QPS_RTS);

	/* recv list: valid, max+1 SGEs, valid */
	struct ibv_recv_wr r[3], *bad_r = NULL;
	memset(r, 0, sizeof(r));
	for (int i = 0; i < 3; i++) {
		r[i].wr_id = 11 + i;
		r[i].sg_list = sges;
		r[i].num_sge = 1;
		r[i].next = i < 2 ? &r[i + 1] : NULL;
	}
	r[1].num_sge = max_r + 1;
	SVT_CHECK_RC(ibv_post_recv(p.a.qp, &r[0], &bad_r), EINVAL);
	SVT_CHECK(bad_r == &r[1]);
	/* Exactly one receive was posted: one SEND consumes it, the next
	 * finds none (RNR; rnr_retry 7 keeps it pending). */
	SVT_CHECK_OK(svt_post_send(p.b.qp, 21, IBV_WR_SEND, IBV_SEND_SIGNALED,
				   p.b.buf, 8, p.b.mr->lkey, 0, 0, 0));
	errt_expect_wc(p.a.recv_cq, 11, IBV_WC_SUCCESS, 0);
	errt_expect_wc(p.b.send_cq, 21, IBV_WC_SUCCESS, 0);
	SVT_CHECK_OK(svt_post_send(p.b.qp, 22, IBV_WR_SEND, IBV_SEND_SIGNALED,
				   p.b.buf, 8, p.b.mr->lkey, 0, 0, 0));
	svt_expect_no_wc(p.a.recv_cq, 150);
	svt_expect_no_wc(p.b.send_cq, 0);

	free(sges);
	svt_pair_destroy(&p);
	svt_log("ok: num_sge > max refused with bad_wr set; earlier WRs "
		"posted, later not");
}

/*
 * Full queues (rdma-core tests/utils.py full_rq_bad_flow: ENOMEM) and posts
 * to a QP in RESET (post_{rq,sq}_state_bad_flow: EINVAL). Moving the QP to
 * ERR afterwards flushes exactly the WRs that were accepted, which shows the
 * refused ones were not queued.
 */
static void full_queues_and_reset_state(void)
{
	struct svt_pair p;
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;

	errt_rc_pair(&p, 1024, 16);
	SVT_CHECK_OK(ibv_query_qp(p.a.qp, &attr, IBV_QP_CAP, &init));
	int max_s = (int)attr.cap.max_send_wr, max_r = (int)attr.cap.max_recv_wr;
	SVT_CHECK_GE(max_s, 16);
	SVT_CHECK_GE(max_r, 16);
	if (max_s >= p.a.send_cq->cqe || max_r >= p.a.recv_cq->cqe) {
		svt_pair_destroy(&p);
		svt_log("skip full-queue checks: queues larger than the CQs");
		return;
	}

	/* Receive queue: max_r + 1 receives in one list. */
	struct ibv_recv_wr *r = calloc((size_t)max_r + 1, sizeof(*r)), *bad_r;
	struct ibv_sge sge = { (uintptr_t)p.a.buf, 64, p.a.mr->lkey };
	SVT_CHECK_PTR(r);
	for (int i = 0; i <= max_r; i++) {
		r[i].wr_id = 1000 + i;
		r[i].sg_list = &sge;
		r[i].num_sge = 1;
		r[i].next = i < max_r ? &r[i + 1] : NULL;
	}
	bad_r = NULL;
	SVT_CHECK_RC(ibv_post_recv(p.a.qp, r, &bad_r), ENOMEM);
	SVT_CHECK(bad_r == &r[max_r]);

	/* Send queue: the first SEND is held by RNR (the peer has no receive,
	 * rnr_retry 7), so none of them completes and the queue fills. */
	for (int i = 0; i < max_s; i++)
		SVT_CHECK_OK(svt_post_send(p.a.qp, 2000 + i, IBV_WR_SEND,
					   IBV_SEND_SIGNALED, p.a.buf, 64,
					   p.a.mr->lkey, 0, 0, 0));
	SVT_CHECK_RC(svt_post_send(p.a.qp, 2000 + max_s, IBV_WR_SEND,
				   IBV_SEND_SIGNALED, p.a.buf, 64, p.a.mr->lkey,
				   0, 0, 0),
		     ENOMEM);

	SVT_CHECK_OK(svt_qp_to_state(p.a.qp, IBV_QPS_ERR));
	errt_expect_flushed(p.a.recv_cq, p.a.qp, 1000, max_r);
	errt_expect_flushed(p.a.send_cq, p.a.qp, 2000, max_s);
	svt_expect_no_wc(p.a.recv_cq, 100);
	svt_expect_no_wc(p.a.send_cq, 0);
	svt_log("ok: full RQ (%d) / SQ (%d) -> ENOMEM, bad_wr set, only "
		"accepted WRs flushed", max_r, max_s);

	/* RESET: posts are refused with EINVAL and leave nothing behind. */
	SVT_CHECK_OK(svt_qp_to_state(p.a.qp, IBV_QPS_RESET));
	ERRT_CHECK_STATE(p.a.qp, IBV_QPS_RESET);
	r[0].next = NULL;
	bad_r = NULL;
	SVT_CHECK_RC(ibv_post_recv(p.a.qp, &r[0], &bad_r), EINVAL);
	SVT_CHECK(bad_r == &r[0]);
	SVT_CHECK_RC(svt_post_send(p.a.qp, 3000, IBV_WR_SEND, IBV_SEND_SIGNALED,
				   p.a.buf, 64, p.a.mr->lkey, 0, 0, 0),
		     EINVAL);
	/* Were anything queued, ERR would flush it now. */
	SVT_CHECK_OK(svt_qp_to_state(p.a.qp, IBV_QPS_ERR));
	svt_expect_no_wc(p.a.recv_cq, 100);
	svt_expect_no_wc(p.a.send_cq, 0);
	svt_log("ok: post_send / post_recv on a RESET QP -> EINVAL, nothing "
		"queued");

	free(r);
	svt_pair_destroy(&p);
}

/* Snapshot of what ibv_query_qp reports, to show a failed modify changed
 * nothing. */
struct qp_snap {
	enum ibv_qp_state state;
	uint32_t dest_qp_num;
	uint32_t rq_psn;
	uint32_t sq_psn;
	unsigned int access;
	uint8_t port_num;
};

static struct qp_snap snap(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;
	struct qp_snap s;

	memset(&a, 0, sizeof(a));
	SVT_CHECK_OK(ibv_query_qp(qp, &a,
				  IBV_QP_STATE | IBV_QP_DEST_QPN |
					  IBV_QP_RQ_PSN | IBV_QP_SQ_PSN |
					  IBV_QP_ACCESS_FLAGS | IBV_QP_PORT,
				  &i));
	s.state = a.qp_state;
	s.dest_qp_num = a.dest_qp_num;
	s.rq_psn = a.rq_psn;
	s.sq_psn = a.sq_psn;
	s.access = a.qp_access_flags;
	s.port_num = a.port_num;
	return s;
}

static void check_same(const struct qp_snap *x, const struct qp_snap *y,
		       const char *what)
{
	if (x->state != y->state || x->dest_qp_num != y->dest_qp_num ||
	    x->rq_psn != y->rq_psn || x->sq_psn != y->sq_psn ||
	    x->access != y->access || x->port_num != y->port_num)
		SVT_FAIL("%s: failed ibv_modify_qp changed the QP: state %d->%d "
			 "dest_qpn %u->%u rq_psn %u->%u sq_psn %u->%u access "
			 "%#x->%#x port %u->%u",
			 what, x->state, y->state, x->dest_qp_num,
			 y->dest_qp_num, x->rq_psn, y->rq_psn, x->sq_psn,
			 y->sq_psn, x->access, y->access, x->port_num,
			 y->port_num);
}

/* ibv_modify_qp(qp, attr, mask) must fail with one of e1/e2 and change
 * nothing. */
static void bad_modify(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
		       int e1, int e2, const char *what)
{
	struct qp_snap before = snap(qp), after;
	int rc = ibv_modify_qp(qp, attr, mask);

	if (rc != e1 && rc != e2)
		SVT_FAIL("%s: ibv_modify_qp returned %d (%s), expected %d (%s)",
			 what, rc, rc ? strerror(rc > 0 ? rc : -rc) : "success",
			 e1, strerror(e1));
	after = snap(qp);
	check_same(&before, &after, what);
	svt_log("ok: %s -> %s, QP unchanged", what, strerror(rc));
}

static void bad_modifies(void)
{
	struct svt_pair p;
	struct svt_pair_opts o;
	struct svt_conn c;
	struct ibv_qp_attr a;
	int mask;

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.no_connect = true;
	svt_pair_create(&p, IBV_QPT_RC, &o);
	c = p.opts.conn;
	struct ibv_qp *qp = p.a.qp;
	uint32_t peer_qpn = p.b.qp->qp_num;
	ERRT_CHECK_STATE(qp, IBV_QPS_RESET);

	/* RESET -> RTR skips INIT. */
	mask = svt_rtr_attr(IBV_QPT_RC, &c, &p.b.gid, peer_qpn, &a);
	bad_modify(qp, &a, mask, EINVAL, EINVAL, "RESET->RTR");

	/* RESET -> INIT without IBV_QP_PORT (required). */
	mask = svt_init_attr(IBV_QPT_RC, &c, &a);
	bad_modify(qp, &a, mask & ~IBV_QP_PORT, EINVAL, EINVAL,
		   "RESET->INIT without IBV_QP_PORT");
	/* ... with IBV_QP_SQ_PSN (not allowed in this transition). */
	a.sq_psn = 0x777;
	bad_modify(qp, &a, mask | IBV_QP_SQ_PSN, EINVAL, EINVAL,
		   "RESET->INIT with IBV_QP_SQ_PSN");
	/* ... on port 2 and port 0 (the device has one port, number 1). */
	a.port_num = 2;
	bad_modify(qp, &a, mask, EINVAL, EINVAL, "RESET->INIT port 2");
	a.port_num = 0;
	bad_modify(qp, &a, mask, EINVAL, EINVAL, "RESET->INIT port 0");
	a.port_num = 1;
	/* ... with a mask bit that no verbs version defines. */
	bad_modify(qp, &a, mask | (1 << 30), EINVAL, EOPNOTSUPP,
		   "RESET->INIT with unknown mask bit 1<<30");

	/* The real transition works; then the INIT-state checks. */
	SVT_CHECK_OK(svt_qp_to_init(qp, &c));
	ERRT_CHECK_STATE(qp, IBV_QPS_INIT);

	/* INIT -> RTR missing IBV_QP_AV / IBV_QP_DEST_QPN: the dest_qpn and
	 * rq_psn given must not stick. */
	c.rq_psn = 0x4242;
	mask = svt_rtr_attr(IBV_QPT_RC, &c, &p.b.gid, 0xabcde, &a);
	bad_modify(qp, &a, mask & ~IBV_QP_AV, EINVAL, EINVAL,
		   "INIT->RTR without IBV_QP_AV");
	bad_modify(qp, &a, mask & ~IBV_QP_DEST_QPN, EINVAL, EINVAL,
		   "INIT->RTR without IBV_QP_DEST_QPN");
	c = p.opts.conn;

	/* INIT -> RTS skips RTR. */
	mask = svt_rts_attr(IBV_QPT_RC, &c, &a);
	bad_modify(qp, &a, mask, EINVAL, EINVAL, "INIT->RTS");

	/* After all that, the normal path still connects and carries data. */
	SVT_CHECK_OK(svt_qp_to_state(qp, IBV_QPS_RESET));
	svt_pair_connect(&p);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE,
				   IBV_SEND_SIGNALED, p.a.buf, MSG,
				   p.a.mr->lkey, (uintptr_t)p.b.buf,
				   p.b.mr->rkey, 0));
	errt_expect_wc(p.a.send_cq, 1, IBV_WC_SUCCESS, 0);

	/* RTS -> RTR is not a legal transition either. */
	mask = svt_rtr_attr(IBV_QPT_RC, &c, &p.b.gid, peer_qpn, &a);
	bad_modify(p.a.qp, &a, mask, EINVAL, EINVAL, "RTS->RTR");
	svt_pair_destroy(&p);
}

static void busy_objects(void)
{
	struct svt_pair p;

	svt_pair_create(&p, IBV_QPT_RC, NULL);

	/* The CQ is used by a QP: EBUSY, and it keeps working. */
	SVT_CHECK_RC(ibv_destroy_cq(p.a.send_cq), EBUSY);
	/* The PD has a QP and an MR: EBUSY. */
	SVT_CHECK_RC(ibv_dealloc_pd(p.a.pd), EBUSY);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE,
				   IBV_SEND_SIGNALED, p.a.buf, MSG,
				   p.a.mr->lkey, (uintptr_t)p.b.buf,
				   p.b.mr->rkey, 0));
	errt_expect_wc(p.a.send_cq, 1, IBV_WC_SUCCESS, 0);
	svt_log("ok: destroy of a CQ in use and dealloc of a PD in use -> "
		"EBUSY, both still work");

	/* A PD holding only an MR: EBUSY until the MR is gone. */
	struct ibv_pd *pd = ibv_alloc_pd(p.a.ctx);
	SVT_CHECK_PTR(pd);
	struct ibv_mr *mr = svt_reg_mr(pd, p.a.buf, 4096,
				       IBV_ACCESS_LOCAL_WRITE);
	SVT_CHECK_RC(ibv_dealloc_pd(pd), EBUSY);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_dealloc_pd(pd));

	/* A CQ attached to nothing any more can go: after its QP is gone. */
	struct ibv_cq *cq = svt_create_cq(p.a.ctx, 16, NULL);
	struct svt_qp_init qi;
	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *qp = svt_create_qp(p.a.pd, cq, cq, &qi);
	SVT_CHECK_RC(ibv_destroy_cq(cq), EBUSY);
	SVT_CHECK_OK(ibv_destroy_qp(qp));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_log("ok: PD with only an MR -> EBUSY; freed objects release "
		"their users");
	svt_pair_destroy(&p);
}

static void bad_reg_mr(void)
{
	struct svt_dev d;
	uint8_t *buf = svt_alloc(8192);

	svt_dev_open(&d);
	SVT_CHECK_NULL_ERRNO(ibv_reg_mr(d.pd, buf, 0, IBV_ACCESS_LOCAL_WRITE),
			     EINVAL);
	SVT_CHECK_NULL_ERRNO(ibv_reg_mr(NULL, buf, 4096,
					IBV_ACCESS_LOCAL_WRITE),
			     EINVAL);
	SVT_CHECK_NULL_ERRNO(ibv_reg_mr(d.pd, buf, 4096,
					IBV_ACCESS_REMOTE_WRITE),
			     EINVAL);
	SVT_CHECK_NULL_ERRNO(ibv_reg_mr(d.pd, buf, 4096,
					IBV_ACCESS_REMOTE_ATOMIC |
						IBV_ACCESS_REMOTE_READ),
			     EINVAL);

	/* Memory that is not mapped: any errno, but NULL. */
	size_t pg = 4096;
	void *hole = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	SVT_CHECK(hole != MAP_FAILED);
	SVT_CHECK_OK(munmap(hole, 2 * pg));
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(d.pd, hole, 2 * pg,
				       IBV_ACCESS_LOCAL_WRITE);
	SVT_CHECK_MSG(mr == NULL, "registered unmapped memory %p", hole);
	SVT_CHECK_NE(errno, 0);

	/* None of the failures left anything behind: the PD deallocates. */
	svt_dev_close(&d);
	free(buf);
	svt_log("ok: ibv_reg_mr refuses length 0, NULL pd, remote access "
		"without LOCAL_WRITE, unmapped memory");
}

int main(void)
{
	svt_watchdog(50);
	too_many_sges();
	full_queues_and_reset_state();
	bad_modifies();
	busy_objects();
	bad_reg_mr();
	return 0;
}
