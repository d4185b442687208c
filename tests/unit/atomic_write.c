/*
 * unit_atomic_write: IBV_WR_ATOMIC_WRITE (IBA 1.5; Linux Soft-RoCE since 6.2).
 *   - the device reports it (device_cap_flags_ex bit 40, as the kernel's
 *     IB_UVERBS_DEVICE_ATOMIC_WRITE)
 *   - ibv_post_send: the 8 bytes land at the remote address, the completion
 *     says IBV_WC_ATOMIC_WRITE; they are taken at post (the source may be
 *     reused at once); ordered after the RDMA WRITE posted before it
 *   - ibv_wr_atomic_write (ibv_qp_ex) does the same
 *   - refused at post: a length other than 8, a UC or UD QP (EINVAL)
 *   - refused by the target: a misaligned address (REM_INV_REQ), an MR
 *     without REMOTE_WRITE (REM_ACCESS), a QP without REMOTE_WRITE
 *     (REM_INV_REQ); the target's memory is untouched each time
 */
#include "sv_test.h"

#define BIG 65536

static const uint8_t value[8] = { 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88 };

static struct ibv_wc post_one(struct svt_pair *p, uint64_t off, void *src)
{
	SVT_CHECK_OK(svt_post_send(p->a.qp, 7, IBV_WR_ATOMIC_WRITE, IBV_SEND_SIGNALED, src, 8,
				   p->a.mr->lkey, (uintptr_t)p->b.buf + off, p->b.mr->rkey, 0));
	return svt_poll_one(p->a.send_cq);
}

static void test_caps(void)
{
	struct svt_dev d;
	struct ibv_device_attr_ex ax;

	svt_dev_open(&d);
	SVT_CHECK_OK(ibv_query_device_ex(d.ctx, NULL, &ax));
	SVT_CHECK(ax.device_cap_flags_ex & (1ULL << 40));
	svt_dev_close(&d);
}

static void test_post_send(void)
{
	struct svt_pair p;
	struct ibv_wc wc;
	uint8_t *src;

	svt_pair_create(&p, IBV_QPT_RC, NULL);
	src = p.a.buf;
	memcpy(src, value, 8);

	/* a big WRITE, then the flag that says it is there */
	svt_fill((uint8_t *)p.a.buf + 64, BIG / 2, 5);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE, 0, (uint8_t *)p.a.buf + 64,
				   BIG / 2, p.a.mr->lkey, (uintptr_t)p.b.buf + 64, p.b.mr->rkey, 0));
	SVT_CHECK_OK(svt_post_send(p.a.qp, 2, IBV_WR_ATOMIC_WRITE, IBV_SEND_SIGNALED, src, 8,
				   p.a.mr->lkey, (uintptr_t)p.b.buf + 8, p.b.mr->rkey, 0));
	memset(src, 0xee, 8); /* taken at post: this must not be what arrives */
	wc = svt_poll_one(p.a.send_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.wr_id, 2);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_ATOMIC_WRITE);
	SVT_CHECK_MEM((uint8_t *)p.b.buf + 8, value, 8);
	SVT_CHECK_FILL((uint8_t *)p.b.buf + 64, BIG / 2, 5);

	/* through ibv_qp_ex */
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(p.a.qp);
	uint64_t v2 = 0x0102030405060708ull;

	SVT_CHECK_PTR(qx);
	ibv_wr_start(qx);
	qx->wr_id = 3;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(qx, p.b.mr->rkey, (uintptr_t)p.b.buf + 16, &v2);
	v2 = 0; /* copied by the call */
	SVT_CHECK_OK(ibv_wr_complete(qx));
	wc = svt_poll_one(p.a.send_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.wr_id, 3);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_ATOMIC_WRITE);
	SVT_CHECK_EQ(*(uint64_t *)((uint8_t *)p.b.buf + 16), 0x0102030405060708ull);

	/* a length other than 8 is refused at post, and nothing is queued */
	SVT_CHECK_RC(svt_post_send(p.a.qp, 4, IBV_WR_ATOMIC_WRITE, IBV_SEND_SIGNALED, src, 4,
				   p.a.mr->lkey, (uintptr_t)p.b.buf, p.b.mr->rkey, 0),
		     EINVAL);
	SVT_CHECK_RC(svt_post_send(p.a.qp, 4, IBV_WR_ATOMIC_WRITE, IBV_SEND_SIGNALED, src, 16,
				   p.a.mr->lkey, (uintptr_t)p.b.buf, p.b.mr->rkey, 0),
		     EINVAL);
	svt_expect_no_wc(p.a.send_cq, 100);
	svt_pair_destroy(&p);

	/* RC only */
	svt_pair_create(&p, IBV_QPT_UC, NULL);
	SVT_CHECK_RC(svt_post_send(p.a.qp, 5, IBV_WR_ATOMIC_WRITE, IBV_SEND_SIGNALED, p.a.buf, 8,
				   p.a.mr->lkey, (uintptr_t)p.b.buf, p.b.mr->rkey, 0),
		     EINVAL);
	svt_pair_destroy(&p);
}

/* One refusal by the target: the completion's status, memory untouched. */
static void refused(const struct svt_pair_opts *o, uint64_t off, enum ibv_wc_status want)
{
	struct svt_pair p;
	struct ibv_wc wc;

	svt_pair_create(&p, IBV_QPT_RC, o);
	memcpy(p.a.buf, value, 8);
	memset(p.b.buf, 0x5a, 32);
	wc = post_one(&p, off, p.a.buf);
	SVT_CHECK_EQ(wc.status, want);
	for (int i = 0; i < 32; i++)
		SVT_CHECK_EQ(((uint8_t *)p.b.buf)[i], 0x5a);
	svt_pair_destroy(&p);
}

static void test_refused(void)
{
	struct svt_pair_opts o;

	svt_pair_opts_default(&o, IBV_QPT_RC);
	refused(&o, 4, IBV_WC_REM_INV_REQ_ERR); /* misaligned */

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	refused(&o, 8, IBV_WC_REM_ACCESS_ERR); /* the MR does not allow writes */

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.conn.access = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	refused(&o, 8, IBV_WC_REM_INV_REQ_ERR); /* the QP does not allow writes */
}

int main(void)
{
	svt_watchdog(50);
	test_caps();
	test_post_send();
	test_refused();
	return 0;
}
