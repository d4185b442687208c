/*
 * unit_mw: memory windows, as the man pages and rxe define them.
 *   - the device reports MEM_WINDOW and MEM_WINDOW_TYPE_2B and max_mw
 *   - type 1: ibv_bind_mw (its completion IBV_WC_BIND_MW, the key's low
 *     eight bits moved on), WRITE and READ through the window's rkey,
 *     unbinding with a zero-length bind
 *   - type 2: IBV_WR_BIND_MW with a key chosen by the consumer, zero-based
 *     addressing, IBV_WR_LOCAL_INV (IBV_WC_LOCAL_INV) after which the key
 *     is refused; ibv_wr_bind_mw / ibv_wr_local_inv do the same
 *   - SEND_WITH_INV (and ibv_wr_send_inv): the target's receive completes
 *     IBV_WC_WITH_INV with invalidated_rkey, and the key is refused after;
 *     naming no window bound to that QP gives REM_INV_REQ_ERR on both sides;
 *     UC refuses the opcode (EINVAL)
 *   - refused: an unbound window, a range beyond the window, an access the
 *     window does not grant, a type 2 window through another QP, a
 *     deallocated window (REM_ACCESS_ERR each); a bind to an MR without
 *     MW_BIND (MW_BIND_ERR); a type 1 window through ibv_post_send and an
 *     unknown window type (EINVAL); a bind to a ZERO_BASED MR (MW_BIND_ERR;
 *     the MR itself takes access by offset); ibv_dereg_mr of an MR with a window
 *     bound (EBUSY); an MW key used as an lkey (LOC_PROT_ERR)
 */
#include "sv_test.h"

#define WIN_OFF 4096u
#define WIN_LEN 4096u

static const unsigned int mr_access = SVT_ACCESS_ALL | IBV_ACCESS_MW_BIND;

static void pair(struct svt_pair *p)
{
	struct svt_pair_opts o;

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.mr_access = mr_access;
	svt_pair_create(p, IBV_QPT_RC, &o);
}

/* a's RDMA op of len bytes at remote va under rkey: its completion status */
static enum ibv_wc_status remote_op(struct svt_pair *p, struct ibv_qp *qa, enum ibv_wr_opcode op,
				    uint64_t va, uint32_t rkey, uint32_t len)
{
	struct ibv_wc wc;

	SVT_CHECK_OK(svt_post_send(qa, 77, op, IBV_SEND_SIGNALED, p->a.buf, len, p->a.mr->lkey, va,
				   rkey, 0));
	wc = svt_poll_one(p->a.send_cq);
	return wc.status;
}

static enum ibv_wc_status bind_type1(struct svt_pair *p, struct ibv_mw *mw, struct ibv_mr *mr,
				     uint64_t addr, uint64_t len, unsigned int access)
{
	struct ibv_mw_bind mb = { .wr_id = 11, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_wc wc;

	mb.bind_info.mr = mr;
	mb.bind_info.addr = addr;
	mb.bind_info.length = len;
	mb.bind_info.mw_access_flags = access;
	SVT_CHECK_OK(ibv_bind_mw(p->b.qp, mw, &mb));
	wc = svt_poll_one(p->b.send_cq);
	SVT_CHECK_EQ(wc.wr_id, 11);
	if (wc.status == IBV_WC_SUCCESS)
		SVT_CHECK_EQ(wc.opcode, IBV_WC_BIND_MW);
	return wc.status;
}

static enum ibv_wc_status bind_type2(struct svt_pair *p, struct ibv_mw *mw, uint32_t rkey,
				     uint64_t addr, uint64_t len, unsigned int access)
{
	struct ibv_send_wr wr = { .wr_id = 12, .opcode = IBV_WR_BIND_MW,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad;
	struct ibv_wc wc;

	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info.mr = p->b.mr;
	wr.bind_mw.bind_info.addr = addr;
	wr.bind_mw.bind_info.length = len;
	wr.bind_mw.bind_info.mw_access_flags = access;
	SVT_CHECK_OK(ibv_post_send(p->b.qp, &wr, &bad));
	wc = svt_poll_one(p->b.send_cq);
	SVT_CHECK_EQ(wc.wr_id, 12);
	return wc.status;
}

static void test_caps(void)
{
	struct svt_dev d;

	svt_dev_open(&d);
	SVT_CHECK(d.dev_attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
	SVT_CHECK(d.dev_attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
	SVT_CHECK_GT(d.dev_attr.max_mw, 0);
	errno = 0;
	SVT_CHECK_NULL(ibv_alloc_mw(d.pd, (enum ibv_mw_type)3));
	SVT_CHECK_EQ(errno, EINVAL);
	svt_dev_close(&d);
}

/* A pair whose b side has a window of the given type over nothing yet. */
static struct ibv_mw *pair_with_window(struct svt_pair *p, enum ibv_mw_type type, uint8_t **win)
{
	struct ibv_mw *mw;

	pair(p);
	*win = (uint8_t *)p->b.buf + WIN_OFF;
	mw = ibv_alloc_mw(p->b.pd, type);
	SVT_CHECK_PTR(mw);
	SVT_CHECK_EQ(mw->type, type);
	SVT_CHECK(mw->pd == p->b.pd && mw->context == p->b.ctx);
	return mw;
}

static void test_type1(void)
{
	struct svt_pair p;
	uint8_t *win;
	struct ibv_mw *mw = pair_with_window(&p, IBV_MW_TYPE_1, &win);
	uint64_t wva = (uintptr_t)win;
	uint32_t k0 = mw->rkey;

	SVT_CHECK_EQ(bind_type1(&p, mw, p.b.mr, wva, WIN_LEN,
				IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ),
		     IBV_WC_SUCCESS);
	SVT_CHECK_EQ(mw->rkey, ibv_inc_rkey(k0));

	/* WRITE into the window, READ it back */
	svt_fill(p.a.buf, 512, 3);
	SVT_CHECK_EQ(remote_op(&p, p.a.qp, IBV_WR_RDMA_WRITE, wva + 100, mw->rkey, 512),
		     IBV_WC_SUCCESS);
	SVT_CHECK_FILL(win + 100, 512, 3);
	memset(p.a.buf, 0, 512);
	SVT_CHECK_EQ(remote_op(&p, p.a.qp, IBV_WR_RDMA_READ, wva + 100, mw->rkey, 512),
		     IBV_WC_SUCCESS);
	SVT_CHECK_FILL(p.a.buf, 512, 3);

	/* bound: the MR stays */
	SVT_CHECK_RC(ibv_dereg_mr(p.b.mr), EBUSY);

	/* a type 1 window is not bound through ibv_post_send */
	struct ibv_send_wr wr = { .opcode = IBV_WR_BIND_MW }, *bad = NULL;

	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info.mr = p.b.mr;
	wr.bind_mw.bind_info.addr = wva;
	wr.bind_mw.bind_info.length = 64;
	SVT_CHECK_RC(ibv_post_send(p.b.qp, &wr, &bad), EINVAL);
	SVT_CHECK(bad == &wr);

	/* unbind: the key is refused from then on */
	SVT_CHECK_EQ(bind_type1(&p, mw, NULL, 0, 0, 0), IBV_WC_SUCCESS);
	SVT_CHECK_EQ(remote_op(&p, p.a.qp, IBV_WR_RDMA_WRITE, wva, mw->rkey, 8),
		     IBV_WC_REM_ACCESS_ERR);
	SVT_CHECK_OK(ibv_dealloc_mw(mw));
	svt_pair_destroy(&p);
}

static void test_type2(void)
{
	struct svt_pair p;
	uint8_t *win;
	struct ibv_mw *mw = pair_with_window(&p, IBV_MW_TYPE_2, &win);
	uint64_t wva = (uintptr_t)win;
	uint32_t key = ibv_inc_rkey(mw->rkey);

	/* zero-based: the remote address is an offset into the window */
	SVT_CHECK_EQ(bind_type2(&p, mw, key, wva, WIN_LEN,
				IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED),
		     IBV_WC_SUCCESS);
	svt_fill(p.a.buf, 256, 4);
	SVT_CHECK_EQ(remote_op(&p, p.a.qp, IBV_WR_RDMA_WRITE, 64, key, 256), IBV_WC_SUCCESS);
	SVT_CHECK_FILL(win + 64, 256, 4);

	/* invalidated through the ibv_wr_* API: the key is refused */
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(p.b.qp);
	struct ibv_wc wc;

	ibv_wr_start(qx);
	qx->wr_id = 13;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_local_inv(qx, key);
	SVT_CHECK_OK(ibv_wr_complete(qx));
	wc = svt_poll_one(p.b.send_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_LOCAL_INV);

	/* bound again, with the ibv_wr_* API and a new key */
	struct ibv_mw_bind_info bi = { .mr = p.b.mr, .addr = wva, .length = WIN_LEN,
				       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE };

	key = ibv_inc_rkey(key);
	ibv_wr_start(qx);
	qx->wr_id = 14;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(qx, mw, key, &bi);
	SVT_CHECK_OK(ibv_wr_complete(qx));
	wc = svt_poll_one(p.b.send_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_BIND_MW);
	SVT_CHECK_EQ(remote_op(&p, p.a.qp, IBV_WR_RDMA_WRITE, wva, key, 16), IBV_WC_SUCCESS);

	/* bound: binding again needs an invalidation first (o10-37.2.30) */
	SVT_CHECK_EQ(bind_type2(&p, mw, ibv_inc_rkey(key), wva, 64, IBV_ACCESS_REMOTE_WRITE),
		     IBV_WC_MW_BIND_ERR);
	SVT_CHECK_OK(ibv_dealloc_mw(mw));
	svt_pair_destroy(&p);
}

/* One refused access on a fresh pair: the requester sees status want. */
enum refusal { UNBOUND, BEYOND, NOT_GRANTED, OTHER_QP, DEALLOCATED, AS_LKEY };

static void refused(enum refusal how)
{
	struct svt_pair p;
	uint64_t wva;
	struct ibv_qp *via;
	struct ibv_qp *qa2 = NULL, *qb2 = NULL;

	pair(&p);
	wva = (uintptr_t)p.b.buf + WIN_OFF;
	via = p.a.qp;
	struct ibv_mw *mw = ibv_alloc_mw(p.b.pd, IBV_MW_TYPE_2);
	uint32_t key = ibv_inc_rkey(mw->rkey);

	memset((uint8_t *)p.b.buf + WIN_OFF - 64, 0x5a, WIN_LEN + 128);
	if (how != UNBOUND)
		SVT_CHECK_EQ(bind_type2(&p, mw, key, wva, WIN_LEN, IBV_ACCESS_REMOTE_READ),
			     IBV_WC_SUCCESS);
	if (how == OTHER_QP) {
		struct svt_qp_init qi;

		svt_qp_init_default(&qi, IBV_QPT_RC);
		qa2 = svt_create_qp(p.a.pd, p.a.send_cq, p.a.recv_cq, &qi);
		qb2 = svt_create_qp(p.b.pd, p.b.send_cq, p.b.recv_cq, &qi);
		svt_qp_link(qa2, &p.a.gid, qb2, &p.b.gid, NULL);
		via = qa2;
	}
	if (how == DEALLOCATED) {
		SVT_CHECK_OK(ibv_dealloc_mw(mw));
		mw = NULL;
	}
	if (how == AS_LKEY) {
		/* b sends from "memory" named by the window's key: a local key it is not */
		SVT_CHECK_OK(svt_post_recv(p.a.qp, 1, p.a.buf, 64, p.a.mr->lkey));
		SVT_CHECK_OK(svt_post_send(p.b.qp, 5, IBV_WR_SEND, IBV_SEND_SIGNALED, (void *)wva,
					   64, key, 0, 0, 0));
		SVT_CHECK_EQ(svt_poll_one(p.b.send_cq).status, IBV_WC_LOC_PROT_ERR);
	} else {
		uint64_t va = how == BEYOND ? wva + WIN_LEN - 8 : wva;
		enum ibv_wr_opcode op = how == NOT_GRANTED ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;

		SVT_CHECK_EQ(remote_op(&p, via, op, va, key, 16), IBV_WC_REM_ACCESS_ERR);
	}
	for (int i = 0; i < (int)WIN_LEN + 128; i++)
		SVT_CHECK_EQ(((uint8_t *)p.b.buf)[WIN_OFF - 64 + (uint32_t)i], 0x5a);
	if (qa2) {
		SVT_CHECK_OK(ibv_destroy_qp(qa2));
		SVT_CHECK_OK(ibv_destroy_qp(qb2));
	}
	if (mw)
		SVT_CHECK_OK(ibv_dealloc_mw(mw));
	svt_pair_destroy(&p);
}

/* A's SEND_WITH_INV of `key` (through the ibv_wr_* API if ex): b's receive completion. */
static struct ibv_wc send_inv(struct svt_pair *p, uint32_t key, bool ex, enum ibv_wc_status want)
{
	struct ibv_wc wc;

	SVT_CHECK_OK(svt_post_recv(p->b.qp, 21, p->b.buf, 64, p->b.mr->lkey));
	if (ex) {
		struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(p->a.qp);

		ibv_wr_start(qx);
		qx->wr_id = 22;
		qx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send_inv(qx, key);
		ibv_wr_set_sge(qx, p->a.mr->lkey, (uintptr_t)p->a.buf, 32);
		SVT_CHECK_OK(ibv_wr_complete(qx));
	} else {
		struct ibv_sge sge = { (uintptr_t)p->a.buf, 32, p->a.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 22, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND_WITH_INV,
					  .send_flags = IBV_SEND_SIGNALED },
				   *bad;

		wr.invalidate_rkey = key;
		SVT_CHECK_OK(ibv_post_send(p->a.qp, &wr, &bad));
	}
	SVT_CHECK_EQ(svt_poll_one(p->a.send_cq).status, want);
	wc = svt_poll_one(p->b.recv_cq);
	SVT_CHECK_EQ(wc.wr_id, 21);
	SVT_CHECK_EQ(wc.status, want);
	return wc;
}

static void test_send_inv(bool ex)
{
	struct svt_pair p;
	uint8_t *win;
	struct ibv_mw *mw = pair_with_window(&p, IBV_MW_TYPE_2, &win);
	uint32_t key = ibv_inc_rkey(mw->rkey);
	struct ibv_wc wc;

	SVT_CHECK_EQ(bind_type2(&p, mw, key, (uintptr_t)win, WIN_LEN, IBV_ACCESS_REMOTE_WRITE),
		     IBV_WC_SUCCESS);
	SVT_CHECK_EQ(remote_op(&p, p.a.qp, IBV_WR_RDMA_WRITE, (uintptr_t)win, key, 8),
		     IBV_WC_SUCCESS);
	svt_fill(p.a.buf, 32, 6);
	wc = send_inv(&p, key, ex, IBV_WC_SUCCESS);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_RECV);
	SVT_CHECK_EQ(wc.byte_len, 32);
	SVT_CHECK(wc.wc_flags & IBV_WC_WITH_INV);
	SVT_CHECK(!(wc.wc_flags & IBV_WC_WITH_IMM));
	SVT_CHECK_EQ(wc.invalidated_rkey, key);
	SVT_CHECK_FILL(p.b.buf, 32, 6);
	/* invalidated: the key is refused */
	SVT_CHECK_EQ(remote_op(&p, p.a.qp, IBV_WR_RDMA_WRITE, (uintptr_t)win, key, 8),
		     IBV_WC_REM_ACCESS_ERR);
	SVT_CHECK_OK(ibv_dealloc_mw(mw));
	svt_pair_destroy(&p);

	/* a key that names no window of that QP: refused on both sides */
	pair(&p);
	send_inv(&p, p.b.mr->rkey, ex, IBV_WC_REM_INV_REQ_ERR);
	svt_pair_destroy(&p);

	/* RC only */
	if (!ex) {
		struct svt_pair_opts o;
		struct ibv_send_wr wr = { .opcode = IBV_WR_SEND_WITH_INV }, *bad;

		svt_pair_opts_default(&o, IBV_QPT_UC);
		svt_pair_create(&p, IBV_QPT_UC, &o);
		SVT_CHECK_RC(ibv_post_send(p.a.qp, &wr, &bad), EINVAL);
		svt_pair_destroy(&p);
	}
}

/*
 * A zero-based MR (IBV_ACCESS_ZERO_BASED, addressed from iova 0 through
 * ibv_reg_mr_iova) takes remote access by offset; no window binds to it.
 */
static void test_zero_based_mr(void)
{
	struct svt_pair p;
	uint8_t *win;
	struct ibv_mw *mw = pair_with_window(&p, IBV_MW_TYPE_1, &win);
	struct ibv_mr *zmr = ibv_reg_mr_iova(p.b.pd, win, WIN_LEN, 0,
					     (int)(mr_access | IBV_ACCESS_ZERO_BASED));

	SVT_CHECK_PTR(zmr);
	svt_fill(p.a.buf, 128, 8);
	SVT_CHECK_EQ(remote_op(&p, p.a.qp, IBV_WR_RDMA_WRITE, 256, zmr->rkey, 128),
		     IBV_WC_SUCCESS);
	SVT_CHECK_FILL(win + 256, 128, 8);
	SVT_CHECK_EQ(bind_type1(&p, mw, zmr, 0, 64, IBV_ACCESS_REMOTE_READ), IBV_WC_MW_BIND_ERR);
	SVT_CHECK_OK(ibv_dealloc_mw(mw));
	SVT_CHECK_OK(ibv_dereg_mr(zmr));
	svt_pair_destroy(&p);
}

/* A bind to an MR registered without MW_BIND fails with MW_BIND_ERR. */
static void test_no_bind_access(void)
{
	struct svt_pair p;
	struct svt_pair_opts o;

	svt_pair_opts_default(&o, IBV_QPT_RC);
	svt_pair_create(&p, IBV_QPT_RC, &o); /* SVT_ACCESS_ALL: no MW_BIND */
	struct ibv_mw *mw = ibv_alloc_mw(p.b.pd, IBV_MW_TYPE_1);

	SVT_CHECK_PTR(mw);
	SVT_CHECK_EQ(bind_type1(&p, mw, p.b.mr, (uintptr_t)p.b.buf, 64, IBV_ACCESS_REMOTE_READ),
		     IBV_WC_MW_BIND_ERR);
	SVT_CHECK_OK(ibv_dealloc_mw(mw));
	svt_pair_destroy(&p);
}

int main(void)
{
	svt_watchdog(50);
	test_caps();
	test_type1();
	test_type2();
	test_send_inv(false);
	test_send_inv(true);
	refused(UNBOUND);
	refused(BEYOND);
	refused(NOT_GRANTED);
	refused(OTHER_QP);
	refused(DEALLOCATED);
	refused(AS_LKEY);
	test_no_bind_access();
	test_zero_based_mr();
	return 0;
}
