/*
 * unit_xrc: XRC (eXtended Reliable Connection), as ibv_open_xrcd(3),
 * ibv_create_srq_ex(3) and ibv_create_qp_ex(3) define it.
 *   - XRC domains: one per file (a second open of the same file is the same
 *     domain, O_EXCL then EINVAL, a file without a domain and no O_CREAT
 *     EAGAIN), fd -1 a domain of its own, a closed descriptor EBADF, a
 *     missing FD/OFLAGS bit EINVAL, an unknown bit EOPNOTSUPP; closing a
 *     domain its SRQs or QPs still use EBUSY, then 0
 *   - XRC SRQs need their domain and CQ (EINVAL otherwise); every SRQ has a
 *     number (ibv_get_srq_num), different from the others'
 *   - an XRC send QP (context A) connected to an XRC receive QP (context B):
 *     SENDs naming two XRC SRQs land in each SRQ's buffers, completing on
 *     each SRQ's own CQ with the receive QP's number; through ibv_post_send
 *     and through the ibv_qp_ex wr_* API (wr_set_xrc_srqn); WRITE, READ and
 *     FETCH_ADD on memory of the SRQs' PD
 *   - the same with on-demand MRs on both ends (ON_DEMAND, pages never
 *     touched), as xrc_odp_caps says: SEND into an SRQ receive, WRITE,
 *     READ, FETCH_ADD
 *   - neither XRC QP takes ibv_post_recv, the receive QP no ibv_post_send
 *   - a request naming an SRQ number that is not of the domain (a basic
 *     SRQ's, one destroyed) fails: the send QP's WQE completes with
 *     IBV_WC_REM_INV_REQ_ERR
 *   - ibv_open_qp: a second handle of the receive QP, with its own
 *     qp_context, through which it is queried and modified; no work posted
 *     on it (EINVAL); the QP outlives its creator's handle (SENDs still
 *     land, the domain stays busy) and goes with the last handle; the
 *     errors: NULL or a missing NUM/XRCD/TYPE bit, another QP type, a
 *     number that is no XRC receive QP of that domain (EINVAL), an unknown
 *     comp_mask bit (EOPNOTSUPP)
 */
#include "sv_test.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define LEN 4096

static void test_domains(struct svt_dev *d)
{
	char path[] = "/tmp/svt-xrcd-XXXXXX", other[] = "/tmp/svt-xrcd-XXXXXX";
	int fd = mkstemp(path), fd2 = mkstemp(other);
	struct ibv_xrcd_init_attr a = { .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS };
	struct ibv_xrcd *x1, *x1b, *anon1, *anon2;
	int closed;

	SVT_CHECK(fd >= 0 && fd2 >= 0);
	a.fd = fd;
	a.oflags = O_CREAT;
	x1 = ibv_open_xrcd(d->ctx, &a);
	SVT_CHECK_PTR(x1);
	SVT_CHECK(x1->context == d->ctx);
	x1b = ibv_open_xrcd(d->ctx, &a); /* the same file: the same domain */
	SVT_CHECK(x1b == x1);
	a.oflags = O_CREAT | O_EXCL;
	SVT_CHECK_NULL_ERRNO(ibv_open_xrcd(d->ctx, &a), EINVAL);
	a.fd = fd2;
	a.oflags = 0;
	SVT_CHECK_NULL_ERRNO(ibv_open_xrcd(d->ctx, &a), EAGAIN);
	closed = dup(fd2);
	close(closed);
	a.fd = closed;
	a.oflags = O_CREAT;
	SVT_CHECK_NULL_ERRNO(ibv_open_xrcd(d->ctx, &a), EBADF);
	a.fd = -1;
	anon1 = ibv_open_xrcd(d->ctx, &a);
	anon2 = ibv_open_xrcd(d->ctx, &a);
	SVT_CHECK(anon1 && anon2 && anon1 != anon2 && anon1 != x1);
	a.comp_mask = IBV_XRCD_INIT_ATTR_FD;
	SVT_CHECK_NULL_ERRNO(ibv_open_xrcd(d->ctx, &a), EINVAL);
	a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS | IBV_XRCD_INIT_ATTR_RESERVED;
	SVT_CHECK_NULL_ERRNO(ibv_open_xrcd(d->ctx, &a), EOPNOTSUPP);
	SVT_CHECK_OK(ibv_close_xrcd(x1b));
	SVT_CHECK_OK(ibv_close_xrcd(x1));
	SVT_CHECK_OK(ibv_close_xrcd(anon1));
	SVT_CHECK_OK(ibv_close_xrcd(anon2));
	/* closed for good: a new open of the file without O_CREAT finds none */
	a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
	a.fd = fd;
	a.oflags = 0;
	SVT_CHECK_NULL_ERRNO(ibv_open_xrcd(d->ctx, &a), EAGAIN);
	close(fd);
	close(fd2);
	unlink(path);
	unlink(other);
	SVT_CHECK(d->dev_attr.device_cap_flags & IBV_DEVICE_XRC);
}

struct xrc {
	struct svt_dev a, b;
	struct ibv_cq *acq, *cq1, *cq2;
	struct ibv_xrcd *xrcd;
	struct ibv_srq *s1, *s2, *basic;
	struct ibv_qp *send, *recv;
	uint8_t *abuf, *bbuf;
	struct ibv_mr *amr, *bmr;
	uint32_t n1, n2, nbasic;
};

static struct ibv_srq *xrc_srq(struct xrc *x, struct ibv_cq *cq)
{
	struct ibv_srq_init_attr_ex sa = {
		.attr = { .max_wr = 16, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
			     IBV_SRQ_INIT_ATTR_PD,
		.srq_type = IBV_SRQT_XRC,
		.pd = x->b.pd,
		.xrcd = x->xrcd,
		.cq = cq,
	};

	return ibv_create_srq_ex(x->b.ctx, &sa);
}

static void setup(struct xrc *x)
{
	struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
					 .fd = -1, .oflags = O_CREAT };
	struct ibv_srq_init_attr_ex sa;
	struct ibv_srq_init_attr ba = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_qp_init_attr_ex qa;
	struct ibv_qp_attr at;
	struct svt_conn rc;
	int mask;

	svt_conn_default(&rc, IBV_QPT_RC); /* RC's attributes: every access */
	memset(x, 0, sizeof(*x));
	svt_dev_open(&x->a);
	svt_dev_open(&x->b);
	x->acq = svt_create_cq(x->a.ctx, 64, NULL);
	x->cq1 = svt_create_cq(x->b.ctx, 64, NULL);
	x->cq2 = svt_create_cq(x->b.ctx, 64, NULL);
	x->xrcd = ibv_open_xrcd(x->b.ctx, &xa);
	SVT_CHECK_PTR(x->xrcd);

	/* an XRC SRQ without its CQ or domain: EINVAL */
	memset(&sa, 0, sizeof(sa));
	sa.attr.max_wr = 4;
	sa.attr.max_sge = 1;
	sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_PD;
	sa.srq_type = IBV_SRQT_XRC;
	sa.pd = x->b.pd;
	sa.xrcd = x->xrcd;
	SVT_CHECK_NULL_ERRNO(ibv_create_srq_ex(x->b.ctx, &sa), EINVAL);
	sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
	sa.cq = x->cq1;
	SVT_CHECK_NULL_ERRNO(ibv_create_srq_ex(x->b.ctx, &sa), EINVAL);

	x->s1 = xrc_srq(x, x->cq1);
	x->s2 = xrc_srq(x, x->cq2);
	x->basic = ibv_create_srq(x->b.pd, &ba);
	SVT_CHECK(x->s1 && x->s2 && x->basic);
	SVT_CHECK_OK(ibv_get_srq_num(x->s1, &x->n1));
	SVT_CHECK_OK(ibv_get_srq_num(x->s2, &x->n2));
	SVT_CHECK_OK(ibv_get_srq_num(x->basic, &x->nbasic));
	SVT_CHECK(x->n1 != x->n2 && x->n1 != x->nbasic && x->n2 != x->nbasic);

	x->abuf = svt_alloc(LEN);
	x->bbuf = svt_alloc(LEN);
	x->amr = svt_reg_mr(x->a.pd, x->abuf, LEN, SVT_ACCESS_ALL);
	x->bmr = svt_reg_mr(x->b.pd, x->bbuf, LEN, SVT_ACCESS_ALL);

	/* the send end: a PD and a send CQ, no receive side */
	memset(&qa, 0, sizeof(qa));
	qa.qp_type = IBV_QPT_XRC_SEND;
	qa.send_cq = x->acq;
	qa.cap.max_send_wr = 32;
	qa.cap.max_send_sge = 1;
	qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	qa.pd = x->a.pd;
	qa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
	x->send = ibv_create_qp_ex(x->a.ctx, &qa);
	SVT_CHECK_PTR(x->send);
	/* the receive end: only its domain (no XRCD bit: EINVAL) */
	memset(&qa, 0, sizeof(qa));
	qa.qp_type = IBV_QPT_XRC_RECV;
	qa.comp_mask = 0;
	SVT_CHECK_NULL_ERRNO(ibv_create_qp_ex(x->b.ctx, &qa), EINVAL);
	qa.comp_mask = IBV_QP_INIT_ATTR_XRCD;
	qa.xrcd = x->xrcd;
	x->recv = ibv_create_qp_ex(x->b.ctx, &qa);
	SVT_CHECK_PTR(x->recv);
	SVT_CHECK(x->recv->qp_type == IBV_QPT_XRC_RECV && x->recv->pd == NULL);

	/* RC's transitions, each end with its own requirements */
	SVT_CHECK_OK(svt_qp_to_init(x->send, &rc));
	SVT_CHECK_OK(svt_qp_to_init(x->recv, &rc));
	mask = svt_rtr_attr(IBV_QPT_RC, &rc, &x->b.gid, x->recv->qp_num, &at);
	/* the send end needs no responder resources at RTR */
	SVT_CHECK_OK(ibv_modify_qp(x->send, &at,
				   mask & ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)));
	mask = svt_rts_attr(IBV_QPT_RC, &rc, &at);
	SVT_CHECK_OK(ibv_modify_qp(x->send, &at, mask));
	mask = svt_rtr_attr(IBV_QPT_RC, &rc, &x->a.gid, x->send->qp_num, &at);
	SVT_CHECK_RC(ibv_modify_qp(x->recv, &at,
				   mask & ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)),
		     EINVAL); /* the receive end does */
	SVT_CHECK_OK(ibv_modify_qp(x->recv, &at, mask));
}

/* A SEND of len bytes (pattern seed) naming srq_num, through ibv_post_send. */
static int post_xrc_send(struct xrc *x, uint64_t wr_id, uint32_t srq_num, uint32_t off, uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)x->abuf + off, len, x->amr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;

	wr.qp_type.xrc.remote_srqn = srq_num;
	return ibv_post_send(x->send, &wr, &bad);
}

static void test_sends(struct xrc *x)
{
	struct ibv_wc wc[4];
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(x->send);

	svt_fill(x->abuf, 1024, 7);
	/* receives: S1 into bbuf[0..1024), S2 into bbuf[1024..2048) */
	SVT_CHECK_OK(svt_post_srq_recv(x->s1, 11, x->bbuf, 512, x->bmr->lkey));
	SVT_CHECK_OK(svt_post_srq_recv(x->s2, 21, x->bbuf + 1024, 512, x->bmr->lkey));
	SVT_CHECK_OK(svt_post_srq_recv(x->s2, 22, x->bbuf + 1536, 512, x->bmr->lkey));
	SVT_CHECK_OK(post_xrc_send(x, 1, x->n2, 0, 100));
	SVT_CHECK_OK(post_xrc_send(x, 2, x->n1, 256, 200));
	svt_poll_ok(x->acq, 2, wc, 0);
	SVT_CHECK(wc[0].wr_id == 1 && wc[1].wr_id == 2 && wc[0].opcode == IBV_WC_SEND);
	svt_poll_ok(x->cq1, 1, wc, 0);
	SVT_CHECK(wc[0].wr_id == 11 && wc[0].byte_len == 200 && wc[0].qp_num == x->recv->qp_num &&
		  wc[0].opcode == IBV_WC_RECV);
	SVT_CHECK(!memcmp(x->bbuf, x->abuf + 256, 200));
	svt_poll_ok(x->cq2, 1, wc, 0);
	SVT_CHECK(wc[0].wr_id == 21 && wc[0].byte_len == 100 && wc[0].qp_num == x->recv->qp_num);
	SVT_CHECK(!memcmp(x->bbuf + 1024, x->abuf, 100));

	/* the same through the wr_* API */
	SVT_CHECK_PTR(qx);
	ibv_wr_start(qx);
	qx->wr_id = 3;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	ibv_wr_set_xrc_srqn(qx, x->n2);
	ibv_wr_set_sge(qx, x->amr->lkey, (uintptr_t)x->abuf + 512, 300);
	SVT_CHECK_OK(ibv_wr_complete(qx));
	svt_poll_ok(x->acq, 1, wc, 0);
	svt_poll_ok(x->cq2, 1, wc, 0);
	SVT_CHECK(wc[0].wr_id == 22 && wc[0].byte_len == 300);
	SVT_CHECK(!memcmp(x->bbuf + 1536, x->abuf + 512, 300));
	svt_expect_no_wc(x->cq1, 50);

	/* no receive queue on either end, no send queue on the receive end */
	{
		struct ibv_sge sge = { (uintptr_t)x->bbuf, 8, x->bmr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 9, .sg_list = &sge, .num_sge = 1 }, *rbad;
		struct ibv_send_wr sw = { .wr_id = 9, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND }, *sbad;

		SVT_CHECK_RC(ibv_post_recv(x->recv, &rw, &rbad), EINVAL);
		SVT_CHECK_RC(ibv_post_recv(x->send, &rw, &rbad), EINVAL);
		SVT_CHECK_RC(ibv_post_send(x->recv, &sw, &sbad), EINVAL);
	}
}

/* One XRC request on x->send naming SRQ n1; rkey/raddr for WRITE, READ and atomics. */
static struct ibv_wc xrc_op(struct xrc *x, enum ibv_wr_opcode op, void *local, uint32_t len,
			    uint32_t lkey, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { (uintptr_t)local, len, lkey };
	struct ibv_send_wr wr = { .wr_id = op, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = 5;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	wr.qp_type.xrc.remote_srqn = x->n1;
	SVT_CHECK_OK(ibv_post_send(x->send, &wr, &bad));
	return svt_poll_one(x->acq);
}

/*
 * On-demand MRs on both ends of XRC, as xrc_odp_caps reports (unit_odp):
 * a SEND gathered from one lands in an SRQ receive on another whose pages
 * were never touched, and WRITE, READ and FETCH_ADD work between them.
 */
static void test_odp(struct xrc *x)
{
	const size_t len = 4 * 4096;
	const int acc = IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	uint8_t *am = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t *bm = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *amr, *bmr;
	struct ibv_wc wc;

	SVT_CHECK(am != MAP_FAILED && bm != MAP_FAILED);
	amr = ibv_reg_mr(x->a.pd, am, len, acc);
	bmr = ibv_reg_mr(x->b.pd, bm, len, acc);
	SVT_CHECK(amr && bmr);

	/* SEND into an SRQ receive on an untouched page */
	svt_fill(am, 300, 12);
	SVT_CHECK_OK(svt_post_srq_recv(x->s1, 51, bm, 512, bmr->lkey));
	wc = xrc_op(x, IBV_WR_SEND, am, 300, amr->lkey, 0, 0);
	SVT_CHECK_WC_OK(wc);
	wc = svt_poll_one(x->cq1);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK(wc.wr_id == 51 && wc.byte_len == 300);
	SVT_CHECK_FILL(bm, 300, 12);

	/* WRITE into an untouched page, READ it back into another */
	svt_fill(am + 4096, 1000, 13);
	SVT_CHECK_WC_OK(xrc_op(x, IBV_WR_RDMA_WRITE, am + 4096, 1000, amr->lkey,
			       (uintptr_t)bm + 4096, bmr->rkey));
	SVT_CHECK_FILL(bm + 4096, 1000, 13);
	SVT_CHECK_WC_OK(xrc_op(x, IBV_WR_RDMA_READ, am + 8192, 1000, amr->lkey,
			       (uintptr_t)bm + 4096, bmr->rkey));
	SVT_CHECK_FILL(am + 8192, 1000, 13);

	/* FETCH_ADD on an untouched word (0), the old value into another */
	SVT_CHECK_WC_OK(xrc_op(x, IBV_WR_ATOMIC_FETCH_AND_ADD, am + 12288, 8, amr->lkey,
			       (uintptr_t)bm + 12288, bmr->rkey));
	SVT_CHECK_EQ(*(uint64_t *)(am + 12288), 0);
	SVT_CHECK_EQ(*(uint64_t *)(bm + 12288), 5);

	SVT_CHECK_OK(ibv_dereg_mr(amr));
	SVT_CHECK_OK(ibv_dereg_mr(bmr));
	munmap(am, len);
	munmap(bm, len);
}

static void test_one_sided(struct xrc *x)
{
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;
	struct ibv_wc wc;
	uint64_t *word = (uint64_t *)(x->bbuf + 3072), *got = (uint64_t *)(x->abuf + 3072);

	/* WRITE into B's memory (the SRQs' PD), READ it back */
	svt_fill(x->abuf + 2048, 512, 9);
	memset(&wr, 0, sizeof(wr));
	sge = (struct ibv_sge){ (uintptr_t)x->abuf + 2048, 512, x->amr->lkey };
	wr.wr_id = 30;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = (uintptr_t)x->bbuf + 2048;
	wr.wr.rdma.rkey = x->bmr->rkey;
	wr.qp_type.xrc.remote_srqn = x->n1;
	SVT_CHECK_OK(ibv_post_send(x->send, &wr, &bad));
	wc = svt_poll_one(x->acq);
	SVT_CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 30);
	SVT_CHECK(!memcmp(x->bbuf + 2048, x->abuf + 2048, 512));
	memset(x->abuf + 2560, 0, 512);
	sge.addr = (uintptr_t)x->abuf + 2560;
	wr.wr_id = 31;
	wr.opcode = IBV_WR_RDMA_READ;
	SVT_CHECK_OK(ibv_post_send(x->send, &wr, &bad));
	wc = svt_poll_one(x->acq);
	SVT_CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 31);
	SVT_CHECK(!memcmp(x->abuf + 2560, x->abuf + 2048, 512));
	/* FETCH_ADD */
	*word = 1000;
	SVT_CHECK_OK(svt_post_atomic(x->send, 32, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_SEND_SIGNALED, got,
				     x->amr->lkey, (uintptr_t)word, x->bmr->rkey, 5, 0));
	/* svt_post_atomic sets no SRQ number: the request names number 0,
	 * which no SRQ has, so it must fail (below, with the others) */
	wc = svt_poll_one(x->acq);
	SVT_CHECK(wc.wr_id == 32 && wc.status == IBV_WC_REM_INV_REQ_ERR);
	SVT_CHECK(*word == 1000);
}

/* A fresh pair of XRC QPs (the last test left the send end in ERR). */
static void reconnect(struct xrc *x)
{
	struct ibv_qp_attr at;
	struct svt_conn rc;
	int mask;

	svt_conn_default(&rc, IBV_QPT_RC);
	SVT_CHECK_OK(svt_qp_to_state(x->send, IBV_QPS_RESET));
	SVT_CHECK_OK(svt_qp_to_state(x->recv, IBV_QPS_RESET));
	SVT_CHECK_OK(svt_qp_to_init(x->send, &rc));
	SVT_CHECK_OK(svt_qp_to_init(x->recv, &rc));
	mask = svt_rtr_attr(IBV_QPT_RC, &rc, &x->b.gid, x->recv->qp_num, &at);
	SVT_CHECK_OK(ibv_modify_qp(x->send, &at, mask));
	mask = svt_rts_attr(IBV_QPT_RC, &rc, &at);
	SVT_CHECK_OK(ibv_modify_qp(x->send, &at, mask));
	mask = svt_rtr_attr(IBV_QPT_RC, &rc, &x->a.gid, x->send->qp_num, &at);
	SVT_CHECK_OK(ibv_modify_qp(x->recv, &at, mask));
}

static void test_atomic_and_bad_numbers(struct xrc *x)
{
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;
	struct ibv_wc wc;
	uint64_t *word = (uint64_t *)(x->bbuf + 3072), *got = (uint64_t *)(x->abuf + 3072);

	reconnect(x);
	memset(&wr, 0, sizeof(wr));
	sge = (struct ibv_sge){ (uintptr_t)got, 8, x->amr->lkey };
	wr.wr_id = 40;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.atomic.remote_addr = (uintptr_t)word;
	wr.wr.atomic.rkey = x->bmr->rkey;
	wr.wr.atomic.compare_add = 5;
	wr.qp_type.xrc.remote_srqn = x->n2;
	SVT_CHECK_OK(ibv_post_send(x->send, &wr, &bad));
	wc = svt_poll_one(x->acq);
	SVT_CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 40);
	SVT_CHECK(*got == 1000 && *word == 1005);

	/* a basic SRQ's number is not of the domain */
	SVT_CHECK_OK(post_xrc_send(x, 41, x->nbasic, 0, 8));
	wc = svt_poll_one(x->acq);
	SVT_CHECK(wc.wr_id == 41 && wc.status == IBV_WC_REM_INV_REQ_ERR);

	/* a destroyed SRQ's number is no longer anything: destroying an XRC
	 * SRQ is not refused because receive QPs of its domain exist */
	reconnect(x);
	SVT_CHECK_OK(ibv_destroy_srq(x->s1));
	x->s1 = NULL;
	SVT_CHECK_OK(post_xrc_send(x, 42, x->n1, 0, 8));
	wc = svt_poll_one(x->acq);
	SVT_CHECK(wc.wr_id == 42 && wc.status == IBV_WC_REM_INV_REQ_ERR);
}

static void test_open_qp(struct xrc *x)
{
	struct ibv_qp_open_attr oa = { .comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
						    IBV_QP_OPEN_ATTR_TYPE | IBV_QP_OPEN_ATTR_CONTEXT,
				       .xrcd = x->xrcd, .qp_type = IBV_QPT_XRC_RECV };
	struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
					 .fd = -1, .oflags = O_CREAT };
	struct ibv_xrcd *other = ibv_open_xrcd(x->b.ctx, &xa);
	struct ibv_qp_attr at;
	struct ibv_qp_init_attr ia;
	struct ibv_qp *h, *h2;
	struct ibv_wc wc;
	int ctxv = 7;

	reconnect(x);
	SVT_CHECK_PTR(other);
	oa.qp_num = x->recv->qp_num;
	oa.qp_context = &ctxv;
	/* the errors first */
	SVT_CHECK_NULL_ERRNO(ibv_open_qp(x->b.ctx, NULL), EINVAL);
	oa.comp_mask |= IBV_QP_OPEN_ATTR_RESERVED;
	SVT_CHECK_NULL_ERRNO(ibv_open_qp(x->b.ctx, &oa), EOPNOTSUPP);
	oa.comp_mask &= ~(IBV_QP_OPEN_ATTR_RESERVED | IBV_QP_OPEN_ATTR_TYPE);
	SVT_CHECK_NULL_ERRNO(ibv_open_qp(x->b.ctx, &oa), EINVAL);
	oa.comp_mask |= IBV_QP_OPEN_ATTR_TYPE;
	oa.qp_type = IBV_QPT_RC;
	SVT_CHECK_NULL_ERRNO(ibv_open_qp(x->b.ctx, &oa), EINVAL);
	oa.qp_type = IBV_QPT_XRC_RECV;
	oa.xrcd = other; /* not its domain */
	SVT_CHECK_NULL_ERRNO(ibv_open_qp(x->b.ctx, &oa), EINVAL);
	oa.xrcd = x->xrcd;
	/* no QP: another number of the receive QP's block (QP numbers are
	 * not consecutive, and the block's only QP is the receive QP) */
	oa.qp_num = (x->recv->qp_num & ~0x3fffu) | ((x->recv->qp_num + 100) & 0x3fff);
	SVT_CHECK_NULL_ERRNO(ibv_open_qp(x->b.ctx, &oa), EINVAL);
	oa.qp_num = x->send->qp_num; /* another context's, an XRC send QP */
	SVT_CHECK_NULL_ERRNO(ibv_open_qp(x->b.ctx, &oa), EINVAL);
	SVT_CHECK_OK(ibv_close_xrcd(other));

	oa.qp_num = x->recv->qp_num;
	h = ibv_open_qp(x->b.ctx, &oa);
	SVT_CHECK_PTR(h);
	SVT_CHECK(h != x->recv && h->qp_num == x->recv->qp_num && h->qp_type == IBV_QPT_XRC_RECV);
	SVT_CHECK(h->qp_context == &ctxv && h->context == x->b.ctx);
	SVT_CHECK_OK(ibv_query_qp(h, &at, IBV_QP_STATE, &ia));
	SVT_CHECK_EQ(at.qp_state, IBV_QPS_RTR);
	SVT_CHECK(ia.qp_context == &ctxv && ia.qp_type == IBV_QPT_XRC_RECV);
	{
		struct ibv_sge sge = { (uintptr_t)x->bbuf, 8, x->bmr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 9, .sg_list = &sge, .num_sge = 1 }, *rbad;
		struct ibv_send_wr sw = { .wr_id = 9, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND }, *sbad;

		SVT_CHECK_RC(ibv_post_recv(h, &rw, &rbad), EINVAL);
		SVT_CHECK_RC(ibv_post_send(h, &sw, &sbad), EINVAL);
	}
	/* modified through the handle: the QP itself moves */
	SVT_CHECK_OK(svt_qp_to_state(h, IBV_QPS_ERR));
	SVT_CHECK_OK(ibv_query_qp(x->recv, &at, IBV_QP_STATE, &ia));
	SVT_CHECK_EQ(at.qp_state, IBV_QPS_ERR);
	reconnect(x);
	SVT_CHECK_OK(ibv_query_qp(h, &at, IBV_QP_STATE, &ia));
	SVT_CHECK_EQ(at.qp_state, IBV_QPS_RTR);

	/* the creator's handle goes; the QP stays, and takes SENDs */
	h2 = ibv_open_qp(x->b.ctx, &oa);
	SVT_CHECK_PTR(h2);
	SVT_CHECK_OK(ibv_destroy_qp(x->recv));
	x->recv = h;
	svt_fill(x->abuf, 64, 12);
	SVT_CHECK_OK(svt_post_srq_recv(x->s2, 60, x->bbuf, 64, x->bmr->lkey));
	SVT_CHECK_OK(post_xrc_send(x, 61, x->n2, 0, 64));
	svt_poll_ok(x->acq, 1, &wc, 0);
	svt_poll_ok(x->cq2, 1, &wc, 0);
	SVT_CHECK(wc.wr_id == 60 && wc.qp_num == h->qp_num);
	SVT_CHECK_FILL(x->bbuf, 64, 12);
	SVT_CHECK_OK(ibv_destroy_qp(h2));
	/* h, the last handle, is x->recv now: teardown destroys it, and
	 * only then does the domain stop being busy */
}

static void teardown(struct xrc *x)
{
	/* the domain is in use: EBUSY until its QP and SRQs are gone */
	SVT_CHECK_RC(ibv_close_xrcd(x->xrcd), EBUSY);
	SVT_CHECK_OK(ibv_destroy_qp(x->send));
	SVT_CHECK_OK(ibv_destroy_qp(x->recv));
	SVT_CHECK_RC(ibv_close_xrcd(x->xrcd), EBUSY);
	SVT_CHECK_OK(ibv_destroy_srq(x->s2));
	SVT_CHECK_OK(ibv_destroy_srq(x->basic));
	SVT_CHECK_OK(ibv_close_xrcd(x->xrcd));
	SVT_CHECK_OK(ibv_dereg_mr(x->amr));
	SVT_CHECK_OK(ibv_dereg_mr(x->bmr));
	SVT_CHECK_OK(ibv_destroy_cq(x->acq));
	SVT_CHECK_OK(ibv_destroy_cq(x->cq1));
	SVT_CHECK_OK(ibv_destroy_cq(x->cq2));
	svt_dev_close(&x->a);
	svt_dev_close(&x->b);
	free(x->abuf);
	free(x->bbuf);
}

int main(void)
{
	struct svt_dev d;
	struct xrc x;

	svt_watchdog(50);
	svt_dev_open(&d);
	test_domains(&d);
	svt_dev_close(&d);

	setup(&x);
	test_sends(&x);
	test_odp(&x);
	test_one_sided(&x);
	test_atomic_and_bad_numbers(&x);
	test_open_qp(&x);
	teardown(&x);
	return 0;
}
