/*
 * unit_corners: four places where softverbs once differed from rdma-core and
 * Soft-RoCE (issue 18).  Each part checks the behaviour and its error path.
 *   1. ibv_create_qp_ex takes CREATE_FLAGS and MAX_TSO_HEADER in comp_mask
 *      when their values ask for nothing; a real flag or a TSO header is
 *      EOPNOTSUPP and consumes no QP.
 *   2. RESET empties a QP: outstanding work is dropped without completions,
 *      nothing of it reaches the peer afterwards, and the completions it left
 *      in its CQs (flushes of its ERR life) are removed, other QPs' kept.
 *   3. ibv_rereg_mr keeps the keys, and the new access, PD and translation
 *      govern every access made with them after the call; a refused rereg
 *      changes nothing.
 *   4. context->cmd_fd is a real descriptor (close-on-exec, dup-able, one per
 *      context, closed by ibv_close_device); ibv_import_device refuses it with
 *      EOPNOTSUPP and other descriptors as rdma-core does.
 */
#include "sv_test.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------- */
/* 1. ibv_create_qp_ex comp_mask                                              */
/* ------------------------------------------------------------------------- */

static void qp_ex_attr(struct ibv_qp_init_attr_ex *ia, struct ibv_pd *pd,
		       struct ibv_cq *cq, enum ibv_qp_type type)
{
	memset(ia, 0, sizeof(*ia));
	ia->qp_type = type;
	ia->send_cq = cq;
	ia->recv_cq = cq;
	ia->cap.max_send_wr = 8;
	ia->cap.max_recv_wr = 8;
	ia->cap.max_send_sge = 1;
	ia->cap.max_recv_sge = 1;
	ia->comp_mask = IBV_QP_INIT_ATTR_PD;
	ia->pd = pd;
}

/* The QP number the next QP of this context gets: the lowest free one. */
static uint32_t next_qpn(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr_ex ia;
	struct ibv_qp *qp;
	uint32_t qpn;

	qp_ex_attr(&ia, pd, cq, IBV_QPT_RC);
	qp = ibv_create_qp_ex(pd->context, &ia);
	SVT_CHECK_PTR(qp);
	qpn = qp->qp_num;
	SVT_CHECK_OK(ibv_destroy_qp(qp));
	return qpn;
}

static void test_create_flags(void)
{
	static const enum ibv_qp_type types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
	struct svt_dev d;
	struct ibv_qp_init_attr_ex ia;
	struct ibv_qp *qp;

	svt_dev_open(&d);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 16, NULL);

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		/* The bits with neutral values: a working QP of each type. */
		qp_ex_attr(&ia, d.pd, cq, types[i]);
		ia.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_MAX_TSO_HEADER |
				IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		ia.send_ops_flags = IBV_QP_EX_WITH_SEND;
		qp = ibv_create_qp_ex(d.ctx, &ia);
		SVT_CHECK_PTR(qp);
		SVT_CHECK_EQ(qp->qp_type, types[i]);
		svt_qp_connect(qp, NULL, &d.gid, qp->qp_num);
		SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_RTS);
		SVT_CHECK_OK(ibv_destroy_qp(qp));
	}

	/* Each bit alone, too (the header passes PD-only masks to ibv_create_qp). */
	qp_ex_attr(&ia, d.pd, cq, IBV_QPT_RC);
	ia.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
	qp = ibv_create_qp_ex(d.ctx, &ia);
	SVT_CHECK_PTR(qp);
	SVT_CHECK_OK(ibv_destroy_qp(qp));
	qp_ex_attr(&ia, d.pd, cq, IBV_QPT_RC);
	ia.comp_mask |= IBV_QP_INIT_ATTR_MAX_TSO_HEADER;
	qp = ibv_create_qp_ex(d.ctx, &ia);
	SVT_CHECK_PTR(qp);
	SVT_CHECK_OK(ibv_destroy_qp(qp));

	/* A field whose comp_mask bit is clear is not read. */
	qp_ex_attr(&ia, d.pd, cq, IBV_QPT_RC);
	ia.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ia.send_ops_flags = IBV_QP_EX_WITH_SEND;
	ia.create_flags = 0xffffffffu;
	ia.max_tso_header = 0xffff;
	qp = ibv_create_qp_ex(d.ctx, &ia);
	SVT_CHECK_PTR(qp);
	SVT_CHECK_OK(ibv_destroy_qp(qp));

	/* Error path: every real flag, an unknown bit, a TSO header. None of
	 * them may take a QP number. */
	uint32_t qpn = next_qpn(d.pd, cq);
	static const uint32_t bad_flags[] = {
		IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, IBV_QP_CREATE_SCATTER_FCS,
		IBV_QP_CREATE_CVLAN_STRIPPING, IBV_QP_CREATE_SOURCE_QPN,
		IBV_QP_CREATE_PCI_WRITE_END_PADDING, 1u << 31,
	};

	for (size_t i = 0; i < sizeof(bad_flags) / sizeof(bad_flags[0]); i++) {
		qp_ex_attr(&ia, d.pd, cq, IBV_QPT_RC);
		ia.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
		ia.create_flags = bad_flags[i];
		SVT_CHECK_NULL_ERRNO(ibv_create_qp_ex(d.ctx, &ia), EOPNOTSUPP);
	}
	qp_ex_attr(&ia, d.pd, cq, IBV_QPT_UD);
	ia.comp_mask |= IBV_QP_INIT_ATTR_MAX_TSO_HEADER;
	ia.max_tso_header = 64;
	SVT_CHECK_NULL_ERRNO(ibv_create_qp_ex(d.ctx, &ia), EOPNOTSUPP);
	/* Without the PD bit: EINVAL, even with the other bits neutral. */
	qp_ex_attr(&ia, d.pd, cq, IBV_QPT_RC);
	ia.comp_mask = IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_MAX_TSO_HEADER;
	SVT_CHECK_NULL_ERRNO(ibv_create_qp_ex(d.ctx, &ia), EINVAL);
	SVT_CHECK_EQ(next_qpn(d.pd, cq), qpn);

	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&d);
}

/* ------------------------------------------------------------------------- */
/* 2. A QP moved to RESET                                                     */
/* ------------------------------------------------------------------------- */

#define PAY 100

/* Two connected RC QPs, each side with its own send and receive CQ. */
static void rc_pair(struct svt_pair *p, struct svt_pair_opts *o)
{
	svt_pair_opts_default(o, IBV_QPT_RC);
	o->separate_cqs = true;
	svt_pair_create(p, IBV_QPT_RC, o);
}

/* Poll exactly the wr_ids in want[] (in that order), with status st, and
 * then nothing more for a moment. */
static void expect_wcs(struct ibv_cq *cq, const uint64_t *want, int n,
		       enum ibv_wc_status st, uint32_t qpn_or_0)
{
	struct ibv_wc wc[8];

	SVT_CHECK_LE(n, 8);
	if (n)
		svt_poll_n(cq, n, wc, 0);
	for (int i = 0; i < n; i++) {
		SVT_CHECK_EQ(wc[i].wr_id, want[i]);
		SVT_CHECK_WC_STATUS(wc[i], st);
		if (qpn_or_0)
			SVT_CHECK_EQ(wc[i].qp_num, qpn_or_0);
	}
	svt_expect_no_wc(cq, 30);
}

/*
 * Wait until b's side has taken in every frame a's side sent so far: one
 * SEND on a second QP pair of the same two contexts, which travels behind
 * them on the same connection.  A frame the requester sent just before a
 * RESET is already on the wire, as on a NIC, and may still arrive; what the
 * test asks is that nothing is sent after it.
 */
static void drain_a_to_b(struct svt_pair *p, const struct svt_pair_opts *o)
{
	struct svt_qp_init qi;
	struct ibv_wc wc;

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_cq *ca = svt_create_cq(p->a.ctx, 4, NULL);
	struct ibv_cq *cb = svt_create_cq(p->b.ctx, 4, NULL);
	struct ibv_qp *qa = svt_create_qp(p->a.pd, ca, ca, &qi);
	struct ibv_qp *qb = svt_create_qp(p->b.pd, cb, cb, &qi);

	svt_qp_link(qa, &p->a.gid, qb, &p->b.gid, &o->conn);
	SVT_CHECK_OK(svt_post_recv(qb, 7, (char *)p->b.buf + 16384, 8, p->b.mr->lkey));
	SVT_CHECK_OK(svt_post_send(qa, 7, IBV_WR_SEND, IBV_SEND_SIGNALED,
				   (char *)p->a.buf + 16384, 8, p->a.mr->lkey, 0, 0, 0));
	svt_poll_n(cb, 1, &wc, 0);
	SVT_CHECK_WC_STATUS(wc, IBV_WC_SUCCESS);
	svt_poll_n(ca, 1, &wc, 0);
	SVT_CHECK_WC_STATUS(wc, IBV_WC_SUCCESS);
	SVT_CHECK_OK(ibv_destroy_qp(qa));
	SVT_CHECK_OK(ibv_destroy_qp(qb));
	SVT_CHECK_OK(ibv_destroy_cq(ca));
	SVT_CHECK_OK(ibv_destroy_cq(cb));
}

/*
 * RTS -> RESET with work outstanding: a SEND the peer keeps refusing (no
 * receive: RNR NAKs, retried forever), a WRITE queued behind it, a posted
 * receive.  None of them completes, none reaches the peer afterwards, and
 * the QP's next life sees only its own work.
 */
static void test_reset_outstanding(void)
{
	struct svt_pair_opts o;
	struct svt_pair p;

	rc_pair(&p, &o);
	struct svt_side *a = &p.a, *b = &p.b;
	char *src = (char *)a->buf + 4096, *dst = (char *)b->buf + 8192;

	SVT_CHECK_OK(svt_post_recv(a->qp, 11, a->buf, PAY, a->mr->lkey));
	svt_fill(src, PAY, 1);
	SVT_CHECK_OK(svt_post_send(a->qp, 1, IBV_WR_SEND, IBV_SEND_SIGNALED, src,
				   PAY, a->mr->lkey, 0, 0, 0));
	SVT_CHECK_OK(svt_post_send(a->qp, 2, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED,
				   src, PAY, a->mr->lkey, (uintptr_t)dst,
				   b->mr->rkey, 0));
	svt_sleep_ms(20); /* a few RNR NAKs and resends */
	SVT_CHECK_OK(svt_qp_to_state(a->qp, IBV_QPS_RESET));
	svt_expect_no_wc(a->send_cq, 30);
	svt_expect_no_wc(a->recv_cq, 0);
	drain_a_to_b(&p, &o);

	/* The peer is now ready for the SEND: it must not come any more (and
	 * the WRITE behind it neither), not even once a is connected again
	 * with the same PSN the peer expects. */
	SVT_CHECK_OK(svt_post_recv(b->qp, 31, b->buf, PAY, b->mr->lkey));
	svt_expect_no_wc(b->recv_cq, 30);
	svt_qp_connect(a->qp, &o.conn, &b->gid, b->qp->qp_num);
	svt_expect_no_wc(b->recv_cq, 30);
	svt_expect_no_wc(a->send_cq, 0);
	for (int i = 0; i < PAY; i++)
		SVT_CHECK_EQ(dst[i], 0);

	/* The new life: one SEND, its own payload, its own completion. */
	svt_fill(src, PAY, 2);
	SVT_CHECK_OK(svt_post_send(a->qp, 3, IBV_WR_SEND, IBV_SEND_SIGNALED, src,
				   PAY, a->mr->lkey, 0, 0, 0));
	uint64_t w3 = 3, w31 = 31;

	expect_wcs(a->send_cq, &w3, 1, IBV_WC_SUCCESS, a->qp->qp_num);
	expect_wcs(b->recv_cq, &w31, 1, IBV_WC_SUCCESS, b->qp->qp_num);
	SVT_CHECK_FILL(b->buf, PAY, 2);
	for (int i = 0; i < PAY; i++)
		SVT_CHECK_EQ(dst[i], 0);

	/* The receive posted before the reset is gone: a SEND from b lands in
	 * the one posted now. */
	SVT_CHECK_OK(svt_post_recv(a->qp, 12, a->buf, PAY, a->mr->lkey));
	svt_fill((char *)b->buf + 4096, PAY, 4);
	SVT_CHECK_OK(svt_post_send(b->qp, 41, IBV_WR_SEND, 0, (char *)b->buf + 4096,
				   PAY, b->mr->lkey, 0, 0, 0));
	uint64_t w12 = 12;

	expect_wcs(a->recv_cq, &w12, 1, IBV_WC_SUCCESS, a->qp->qp_num);
	SVT_CHECK_FILL(a->buf, PAY, 4);
	svt_pair_destroy(&p);
}

/* a (ERR) and other (ERR) share a's CQs: flush one receive of each, in the
 * order other, a, a, other on the receive CQ, and one send of a. */
static void make_flushes(struct svt_side *a, struct ibv_qp *other, uint64_t base)
{
	SVT_CHECK_OK(svt_post_recv(other, base + 1, a->buf, PAY, a->mr->lkey));
	SVT_CHECK_OK(svt_post_recv(a->qp, base + 2, a->buf, PAY, a->mr->lkey));
	SVT_CHECK_OK(svt_post_recv(a->qp, base + 3, a->buf, PAY, a->mr->lkey));
	SVT_CHECK_OK(svt_post_recv(other, base + 4, a->buf, PAY, a->mr->lkey));
	SVT_CHECK_OK(svt_post_send(a->qp, base + 5, IBV_WR_SEND, 0, a->buf, PAY,
				   a->mr->lkey, 0, 0, 0));
}

/*
 * ERR -> RESET: the flushes the ERR state produced and nobody polled leave
 * the QP's CQs with it; another QP's completions on the same CQs stay, in
 * order.  A refused modify (wrong IBV_QP_CUR_STATE) removes nothing.
 */
static void test_reset_cleans_cqs(void)
{
	struct svt_pair_opts o;
	struct svt_pair p;
	struct svt_qp_init qi;
	struct ibv_qp_attr attr;

	rc_pair(&p, &o);
	struct svt_side *a = &p.a, *b = &p.b;

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *other = svt_create_qp(a->pd, a->send_cq, a->recv_cq, &qi);

	SVT_CHECK_OK(svt_qp_to_init(other, &o.conn));
	SVT_CHECK_OK(svt_qp_to_state(other, IBV_QPS_ERR));
	SVT_CHECK_OK(svt_qp_to_state(a->qp, IBV_QPS_ERR));

	/* Error path: RESET refused, nothing taken out, the QP still in ERR. */
	make_flushes(a, other, 100);
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RESET;
	attr.cur_qp_state = IBV_QPS_RTS;
	SVT_CHECK_RC(ibv_modify_qp(a->qp, &attr, IBV_QP_STATE | IBV_QP_CUR_STATE), EINVAL);
	SVT_CHECK_EQ(svt_qp_state(a->qp), IBV_QPS_ERR);
	const uint64_t all_recv[] = { 101, 102, 103, 104 }, all_send[] = { 105 };

	expect_wcs(a->recv_cq, all_recv, 4, IBV_WC_WR_FLUSH_ERR, 0);
	expect_wcs(a->send_cq, all_send, 1, IBV_WC_WR_FLUSH_ERR, a->qp->qp_num);

	/* The real RESET: only other's flushes are left. */
	make_flushes(a, other, 200);
	attr.cur_qp_state = IBV_QPS_ERR;
	SVT_CHECK_OK(ibv_modify_qp(a->qp, &attr, IBV_QP_STATE | IBV_QP_CUR_STATE));
	const uint64_t others[] = { 201, 204 };

	expect_wcs(a->recv_cq, others, 2, IBV_WC_WR_FLUSH_ERR, other->qp_num);
	svt_expect_no_wc(a->send_cq, 0);

	/* Brought back, the QP produces no completion of its previous life,
	 * and its new work completes. */
	svt_qp_connect(a->qp, &o.conn, &b->gid, b->qp->qp_num);
	svt_expect_no_wc(a->send_cq, 30);
	svt_expect_no_wc(a->recv_cq, 0);
	SVT_CHECK_OK(svt_post_recv(b->qp, 31, b->buf, PAY, b->mr->lkey));
	SVT_CHECK_OK(svt_post_send(a->qp, 3, IBV_WR_SEND, IBV_SEND_SIGNALED,
				   a->buf, PAY, a->mr->lkey, 0, 0, 0));
	const uint64_t w3 = 3, w31 = 31;

	expect_wcs(a->send_cq, &w3, 1, IBV_WC_SUCCESS, a->qp->qp_num);
	expect_wcs(b->recv_cq, &w31, 1, IBV_WC_SUCCESS, b->qp->qp_num);

	SVT_CHECK_OK(ibv_destroy_qp(other));
	svt_pair_destroy(&p);
}

/* ------------------------------------------------------------------------- */
/* 3. ibv_rereg_mr                                                            */
/* ------------------------------------------------------------------------- */

#define WLEN 256

/* a WRITEs WLEN bytes of pattern seed to (va, rkey) on b; the completion
 * must have status st. */
static void write_to(struct svt_pair *p, void *va, uint32_t rkey, uint32_t seed,
		     enum ibv_wc_status st)
{
	struct ibv_wc wc;

	svt_fill(p->a.buf, WLEN, seed);
	SVT_CHECK_OK(svt_post_send(p->a.qp, seed, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED,
				   p->a.buf, WLEN, p->a.mr->lkey, (uintptr_t)va, rkey, 0));
	svt_poll_n(p->a.send_cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.wr_id, seed);
	SVT_CHECK_WC_STATUS(wc, st);
}

/* After a refused WRITE both QPs are in ERR: bring them back. */
static void repair(struct svt_pair *p)
{
	SVT_CHECK_OK(svt_qp_to_state(p->a.qp, IBV_QPS_RESET));
	SVT_CHECK_OK(svt_qp_to_state(p->b.qp, IBV_QPS_RESET));
	svt_pair_connect(p);
}

static void check_zero(const char *buf, size_t len)
{
	for (size_t i = 0; i < len; i++)
		SVT_CHECK_EQ(buf[i], 0);
}

static void test_rereg(void)
{
	struct svt_pair_opts o;
	struct svt_pair p;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	rc_pair(&p, &o);
	char *t1 = svt_alloc(page), *t2 = svt_alloc(page);
	struct ibv_pd *pd2 = ibv_alloc_pd(p.b.ctx);

	SVT_CHECK_PTR(pd2);
	struct ibv_mr *mr = svt_reg_mr(p.b.pd, t1, page,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	/* what the peer was told */
	const uint32_t rkey = mr->rkey, lkey = mr->lkey;

	/* Without REMOTE_WRITE the WRITE is refused; then grant it: the same
	 * rkey now writes. */
	write_to(&p, t1, rkey, 1, IBV_WC_REM_ACCESS_ERR);
	check_zero(t1, page);
	repair(&p);
	SVT_CHECK_OK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					  IBV_ACCESS_REMOTE_READ));
	SVT_CHECK_EQ(mr->rkey, rkey);
	SVT_CHECK_EQ(mr->lkey, lkey);
	write_to(&p, t1, rkey, 2, IBV_WC_SUCCESS);
	SVT_CHECK_FILL(t1, WLEN, 2);

	/* A new translation: the same rkey reaches the new memory, and the old
	 * address is outside the MR. */
	SVT_CHECK_OK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, t2, page, 0));
	SVT_CHECK_EQ(mr->rkey, rkey);
	SVT_CHECK(mr->addr == t2);
	write_to(&p, t2, rkey, 3, IBV_WC_SUCCESS);
	SVT_CHECK_FILL(t2, WLEN, 3);
	SVT_CHECK_FILL(t1, WLEN, 2);

	/* Refused calls change nothing: errors of libibverbs' own checks ... */
	errno = 0;
	SVT_CHECK_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, page, 0),
		     IBV_REREG_MR_ERR_INPUT);
	SVT_CHECK_EQ(errno, EINVAL);
	errno = 0;
	SVT_CHECK_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, p.b.pd, NULL, 0,
				  IBV_ACCESS_LOCAL_WRITE),
		     IBV_REREG_MR_ERR_INPUT);
	SVT_CHECK_EQ(errno, EINVAL);
	errno = 0;
	SVT_CHECK_EQ(ibv_rereg_mr(mr, 1 << 8, NULL, NULL, 0, 0), IBV_REREG_MR_ERR_INPUT);
	SVT_CHECK_EQ(errno, EINVAL);
	/* ... and of the device's (the kernel's, with rdma-core) */
	struct {
		int flags;
		struct ibv_pd *pd;
		void *addr;
		int access;
		int err;
	} bad[] = {
		{ 0, NULL, NULL, 0, EINVAL },
		{ IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, IBV_ACCESS_REMOTE_WRITE, EINVAL },
		{ IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, IBV_ACCESS_LOCAL_WRITE | (1 << 10), EINVAL },
		{ IBV_REREG_MR_CHANGE_PD, NULL, NULL, 0, EINVAL },
		{ IBV_REREG_MR_CHANGE_PD, p.a.pd, NULL, 0, EINVAL }, /* another context's */
		{ IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 0, EFAULT },
	};
	/* a read-only page cannot hold an MR with LOCAL_WRITE */
	char *ro = mmap(NULL, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	SVT_CHECK(ro != MAP_FAILED);
	bad[5].addr = ro;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		errno = 0;
		SVT_CHECK_EQ(ibv_rereg_mr(mr, bad[i].flags, bad[i].pd, bad[i].addr,
					  bad[i].addr ? page : 0, bad[i].access),
			     IBV_REREG_MR_ERR_CMD);
		SVT_CHECK_EQ(errno, bad[i].err);
	}
	SVT_CHECK_EQ(mr->rkey, rkey);
	SVT_CHECK_EQ(mr->lkey, lkey);
	SVT_CHECK(mr->addr == t2);
	SVT_CHECK_EQ(mr->length, page);
	SVT_CHECK(mr->pd == p.b.pd);
	write_to(&p, t2, rkey, 4, IBV_WC_SUCCESS);
	SVT_CHECK_FILL(t2, WLEN, 4);

	/* Access taken away: refused at once, memory untouched. */
	SVT_CHECK_OK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				  IBV_ACCESS_LOCAL_WRITE));
	write_to(&p, t2, rkey, 5, IBV_WC_REM_ACCESS_ERR);
	SVT_CHECK_FILL(t2, WLEN, 4);
	repair(&p);

	/* Another PD: the QP's PD no longer matches the MR's. Moved back, the
	 * same rkey works again; the PDs count the MR where it is. */
	SVT_CHECK_OK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS,
				  pd2, NULL, 0,
				  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
	SVT_CHECK(mr->pd == pd2);
	SVT_CHECK_RC(ibv_dealloc_pd(pd2), EBUSY);
	write_to(&p, t2, rkey, 6, IBV_WC_REM_ACCESS_ERR);
	SVT_CHECK_FILL(t2, WLEN, 4);
	repair(&p);
	SVT_CHECK_OK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, p.b.pd, NULL, 0, 0));
	SVT_CHECK_OK(ibv_dealloc_pd(pd2));
	write_to(&p, t2, rkey, 7, IBV_WC_SUCCESS);
	SVT_CHECK_FILL(t2, WLEN, 7);
	SVT_CHECK_EQ(mr->rkey, rkey);

	SVT_CHECK_OK(ibv_dereg_mr(mr));
	/* once deregistered, the key is dead */
	write_to(&p, t2, rkey, 8, IBV_WC_REM_ACCESS_ERR);
	SVT_CHECK_FILL(t2, WLEN, 7);
	free(t1);
	free(t2);
	SVT_CHECK_OK(munmap(ro, page));
	svt_pair_destroy(&p);
}

/* ------------------------------------------------------------------------- */
/* 4. context->cmd_fd and ibv_import_device                                   */
/* ------------------------------------------------------------------------- */

static void check_import(int fd, int err)
{
	SVT_CHECK_NULL_ERRNO(ibv_import_device(fd), err);
}

/* Child: argv[0] is a cmd_fd it inherited; importing it is refused there too. */
static int importer(int rfd, int wfd, int argc, char **argv)
{
	(void)rfd;
	(void)wfd;
	SVT_CHECK_EQ(argc, 1);
	check_import(atoi(argv[0]), EOPNOTSUPP);
	return 0;
}

static void test_cmd_fd(void)
{
	struct ibv_context *c1 = svt_open_context(), *c2 = svt_open_context();
	int fd1 = c1->cmd_fd, fd2 = c2->cmd_fd;
	struct stat st;

	/* A descriptor of its own per context, close-on-exec, usable as one. */
	SVT_CHECK_GE(fd1, 0);
	SVT_CHECK_GE(fd2, 0);
	SVT_CHECK_NE(fd1, fd2);
	SVT_CHECK_NE(fd1, c1->async_fd);
	SVT_CHECK(fcntl(fd1, F_GETFD) & FD_CLOEXEC);
	SVT_CHECK_OK(fstat(fd1, &st));
	char head[32] = { 0 };

	SVT_CHECK_GT(pread(fd1, head, sizeof(head) - 1, 0), 0);
	SVT_CHECK(strstr(head, c1->device->name) != NULL);
	errno = 0;
	SVT_CHECK_EQ(write(fd1, "x", 1), -1); /* sealed: nobody changes what it says */
	SVT_CHECK_EQ(errno, EPERM);
	int d = dup(fd1);

	SVT_CHECK_GE(d, 0);

	/* Import: ours are refused cleanly, the original or a copy, here or in
	 * another process, and the context goes on working. */
	check_import(fd1, EOPNOTSUPP);
	check_import(fd2, EOPNOTSUPP);
	check_import(d, EOPNOTSUPP);
	int inherit = fcntl(fd1, F_DUPFD, 3); /* without FD_CLOEXEC */
	char num[16];
	char *args[] = { num, NULL };
	struct svt_child child;

	SVT_CHECK_GE(inherit, 0);
	snprintf(num, sizeof(num), "%d", inherit);
	svt_spawn(&child, "importer", args);
	SVT_CHECK_EQ(svt_child_wait(&child, 0), 0);
	SVT_CHECK_OK(close(inherit));
	struct ibv_pd *pd = ibv_alloc_pd(c1);

	SVT_CHECK_PTR(pd);
	SVT_CHECK_OK(ibv_dealloc_pd(pd));

	/* Error path: what is not a context's descriptor, as rdma-core answers. */
	int p[2], nul = open("/dev/null", O_RDWR | O_CLOEXEC);
	int mfd = memfd_create("not-sealed", MFD_CLOEXEC);
	static const char text[] = "softverbs context\nsv_lo\n";

	SVT_CHECK_GE(nul, 0);
	SVT_CHECK_GE(mfd, 0);
	SVT_CHECK_OK(pipe2(p, O_CLOEXEC));
	SVT_CHECK_EQ(write(mfd, text, sizeof(text) - 1), (ssize_t)sizeof(text) - 1);
	check_import(-1, EINVAL);
	check_import(nul, ENODEV);    /* a character device, not an RDMA one */
	check_import(p[0], EINVAL);   /* not a character device */
	check_import(mfd, EINVAL);    /* the right text is not enough */
	SVT_CHECK_OK(close(p[0]));
	SVT_CHECK_OK(close(p[1]));
	SVT_CHECK_OK(close(nul));
	SVT_CHECK_OK(close(mfd));

	/* ibv_close_device closes the context's own descriptor; a copy still
	 * names a (closed) context and is still refused as one. */
	SVT_CHECK_OK(ibv_close_device(c2));
	SVT_CHECK_OK(ibv_close_device(c1));
	errno = 0;
	SVT_CHECK_EQ(fcntl(fd1, F_GETFD), -1);
	SVT_CHECK_EQ(errno, EBADF);
	errno = 0;
	SVT_CHECK_EQ(fcntl(fd2, F_GETFD), -1);
	SVT_CHECK_EQ(errno, EBADF);
	check_import(fd1, EINVAL);
	check_import(d, EOPNOTSUPP);
	SVT_CHECK_OK(close(d));
}

int main(int argc, char **argv)
{
	static const struct svt_child_role roles[] = {
		{ "importer", importer },
		{ NULL, NULL },
	};

	svt_child_dispatch(argc, argv, roles);
	svt_watchdog(50);
	test_create_flags();
	test_reset_outstanding();
	test_reset_cleans_cqs();
	test_rereg();
	test_cmd_fd();
	return 0;
}
