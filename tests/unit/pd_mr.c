/*
 * unit_pd_mr: protection domains and memory regions.
 *   - reg_mr access rules (remote write/atomic need local write: EINVAL)
 *   - unmapped memory cannot be registered
 *   - keys of two registrations of one buffer differ
 *   - reg_mr_iova / reg_mr_iova2: remote access addressed by iova works
 *   - rereg_mr (translation, access), dereg_mr
 *   - read-only memory: registration for writing fails, for reading works
 *   - memory unmapped while registered: a remote READ does not crash us
 *   - dealloc_pd with an MR, QP, AH or SRQ still on it: EBUSY
 */
#include "sv_test.h"

#include <sys/mman.h>
#include <unistd.h>

static size_t page;

static void test_pd(struct ibv_context *ctx)
{
	struct ibv_pd *p1 = ibv_alloc_pd(ctx);
	struct ibv_pd *p2 = ibv_alloc_pd(ctx);

	SVT_CHECK_PTR(p1);
	SVT_CHECK_PTR(p2);
	SVT_CHECK(p1 != p2);
	SVT_CHECK(p1->context == ctx);
	SVT_CHECK_OK(ibv_dealloc_pd(p2));
	SVT_CHECK_OK(ibv_dealloc_pd(p1));
}

static void test_access_rules(struct ibv_pd *pd)
{
	void *buf = svt_alloc(page);

	SVT_CHECK_NULL_ERRNO(ibv_reg_mr(pd, buf, page, IBV_ACCESS_REMOTE_WRITE),
			     EINVAL);
	SVT_CHECK_NULL_ERRNO(
		ibv_reg_mr(pd, buf, page, IBV_ACCESS_REMOTE_ATOMIC), EINVAL);
	SVT_CHECK_NULL_ERRNO(ibv_reg_mr(pd, buf, page,
					IBV_ACCESS_REMOTE_WRITE |
						IBV_ACCESS_REMOTE_READ |
						IBV_ACCESS_REMOTE_ATOMIC),
			     EINVAL);

	/* Allowed combinations. */
	static const unsigned int ok[] = {
		0,
		IBV_ACCESS_LOCAL_WRITE,
		IBV_ACCESS_REMOTE_READ,
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC,
		SVT_ACCESS_ALL,
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct ibv_mr *mr = ibv_reg_mr(pd, buf, page, ok[i]);

		SVT_CHECK_MSG(mr != NULL, "reg_mr access 0x%x failed: %s",
			      ok[i], strerror(errno));
		SVT_CHECK(mr->addr == buf);
		SVT_CHECK_EQ(mr->length, page);
		SVT_CHECK(mr->pd == pd);
		SVT_CHECK(mr->context == pd->context);
		SVT_CHECK_OK(ibv_dereg_mr(mr));
	}
	free(buf);
}

static void test_unmapped(struct ibv_pd *pd)
{
	char *p = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	SVT_CHECK(p != MAP_FAILED);
	/* the last two pages go, and the range stays reserved (PROT_NONE, no
	 * pages): after a bare munmap, an allocation of the process (ASan's
	 * own, a thread's stack) could be mapped there before the calls below */
	SVT_CHECK(mmap(p + 2 * page, 2 * page, PROT_NONE,
		       MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
		       0) == p + 2 * page);

	/* Entirely without pages. */
	SVT_CHECK_NULL(ibv_reg_mr(pd, p + 2 * page, 2 * page,
				  IBV_ACCESS_LOCAL_WRITE));
	/* Partly: the range runs past the pages. */
	SVT_CHECK_NULL(ibv_reg_mr(pd, p + page, 2 * page,
				  IBV_ACCESS_LOCAL_WRITE));
	/* The mapped part is fine. */
	struct ibv_mr *mr = ibv_reg_mr(pd, p, 2 * page, IBV_ACCESS_LOCAL_WRITE);

	SVT_CHECK_PTR(mr);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_EQ(munmap(p, 4 * page), 0);
}

/* Read-only memory can be registered for reading only (as the kernel's
 * page pinning does: writable access needs writable pages). */
static void test_read_only(void)
{
	struct svt_pair p;
	struct ibv_wc wc;
	char *ro = mmap(NULL, 2 * page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS,
			-1, 0);

	SVT_CHECK(ro != MAP_FAILED);
	svt_pair_create(&p, IBV_QPT_RC, NULL);
	SVT_CHECK_NULL(ibv_reg_mr(p.b.pd, ro, 2 * page, IBV_ACCESS_LOCAL_WRITE));
	SVT_CHECK_NULL(ibv_reg_mr(p.b.pd, ro, 2 * page,
				  IBV_ACCESS_LOCAL_WRITE |
					  IBV_ACCESS_REMOTE_WRITE));

	struct ibv_mr *mr = ibv_reg_mr(p.b.pd, ro, 2 * page,
				       IBV_ACCESS_REMOTE_READ);

	SVT_CHECK_PTR(mr);
	memset(p.a.buf, 0xff, page);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 1, IBV_WR_RDMA_READ,
				   IBV_SEND_SIGNALED, p.a.buf, (uint32_t)page,
				   p.a.mr->lkey, (uintptr_t)ro + page, mr->rkey,
				   0));
	svt_poll_ok(p.a.send_cq, 1, &wc, 0);
	for (size_t i = 0; i < page; i++)
		SVT_CHECK_EQ(((uint8_t *)p.a.buf)[i], 0);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	svt_pair_destroy(&p);
	SVT_CHECK_EQ(munmap(ro, 2 * page), 0);
}

/* The application unmaps memory that is still registered, and a peer then
 * READs it: real HCAs keep such pages pinned; whatever the status, the
 * target process must survive and the QP complete the WR. */
static void test_unmapped_while_registered(void)
{
	struct svt_pair p;
	struct ibv_wc wc;
	char *m = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	SVT_CHECK(m != MAP_FAILED);
	struct svt_pair_opts o;

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.conn.timeout = 8; /* quick, should the answer be a retry timeout */
	svt_pair_create(&p, IBV_QPT_RC, &o);
	struct ibv_mr *mr = svt_reg_mr(p.b.pd, m, 4 * page, SVT_ACCESS_ALL);

	SVT_CHECK_EQ(munmap(m, 4 * page), 0);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 1, IBV_WR_RDMA_READ,
				   IBV_SEND_SIGNALED, p.a.buf, (uint32_t)page,
				   p.a.mr->lkey, (uintptr_t)m + page, mr->rkey,
				   0));
	wc = svt_poll_one(p.a.send_cq);
	svt_log("READ of unmapped registered memory: %s",
		ibv_wc_status_str(wc.status));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	svt_pair_destroy(&p);
}

static void test_keys(struct ibv_pd *pd)
{
	void *buf = svt_alloc(page);
	struct ibv_mr *m1 = svt_reg_mr(pd, buf, page, SVT_ACCESS_ALL);
	struct ibv_mr *m2 = svt_reg_mr(pd, buf, page, SVT_ACCESS_ALL);

	SVT_CHECK_NE(m1->lkey, m2->lkey);
	SVT_CHECK_NE(m1->rkey, m2->rkey);
	SVT_CHECK_OK(ibv_dereg_mr(m2));
	SVT_CHECK_OK(ibv_dereg_mr(m1));

	/* Keys are not simply reused after deregistration (unpredictable). */
	uint32_t first = 0;
	bool differs = false;

	for (int i = 0; i < 16; i++) {
		struct ibv_mr *m = svt_reg_mr(pd, buf, page, SVT_ACCESS_ALL);

		if (i == 0)
			first = m->rkey;
		else if (m->rkey != first)
			differs = true;
		SVT_CHECK_OK(ibv_dereg_mr(m));
	}
	SVT_CHECK_MSG(differs, "16 reg/dereg cycles all gave rkey 0x%x", first);
	free(buf);
}

/* RDMA WRITE from a into b's region reg'd at iova, and READ it back. */
static void rdma_via_iova(struct svt_pair *p, struct ibv_mr *bmr, char *bbuf,
			  uint64_t iova, size_t len)
{
	struct ibv_wc wc;
	char *abuf = p->a.buf;

	svt_fill(abuf, len, 7);
	memset(bbuf, 0, len);
	/* Write at iova + 100 (offset 100 into bbuf). */
	SVT_CHECK_OK(svt_post_send(p->a.qp, 1, IBV_WR_RDMA_WRITE,
				   IBV_SEND_SIGNALED, abuf, (uint32_t)len - 100,
				   p->a.mr->lkey, iova + 100, bmr->rkey, 0));
	svt_poll_ok(p->a.send_cq, 1, &wc, 0);
	SVT_CHECK_FILL(bbuf + 100, len - 100, 7);
	for (int i = 0; i < 100; i++)
		SVT_CHECK_EQ(bbuf[i], 0);

	/* Read the whole region back into a's buffer at offset len. */
	svt_fill(bbuf, len, 8);
	SVT_CHECK_OK(svt_post_send(p->a.qp, 2, IBV_WR_RDMA_READ,
				   IBV_SEND_SIGNALED, abuf + len, (uint32_t)len,
				   p->a.mr->lkey, iova, bmr->rkey, 0));
	svt_poll_ok(p->a.send_cq, 1, &wc, 0);
	SVT_CHECK_FILL(abuf + len, len, 8);
}

static void test_iova(void)
{
	struct svt_pair p;
	size_t len = 3 * page;

	svt_pair_create(&p, IBV_QPT_RC, NULL);
	char *bbuf = svt_alloc(len);

	/* Arbitrary iova far from the real address. */
	uint64_t iova = 0x7100000000ull;
	struct ibv_mr *mr = ibv_reg_mr_iova(p.b.pd, bbuf, len, iova,
					    SVT_ACCESS_ALL);

	SVT_CHECK_PTR(mr);
	rdma_via_iova(&p, mr, bbuf, iova, len);
	SVT_CHECK_OK(ibv_dereg_mr(mr));

	/* iova 0 (zero-based), through ibv_reg_mr_iova2. */
	struct ibv_mr *mr2 = ibv_reg_mr_iova2(p.b.pd, bbuf, len, 0,
					      SVT_ACCESS_ALL);

	SVT_CHECK_PTR(mr2);
	rdma_via_iova(&p, mr2, bbuf, 0, len);

	/* The VA is not a valid address for a zero-based MR (unless it fits
	 * inside [0, len), which a heap address does not). */
	struct ibv_wc wc;

	SVT_CHECK_OK(svt_post_send(p.a.qp, 3, IBV_WR_RDMA_WRITE,
				   IBV_SEND_SIGNALED, p.a.buf, 64,
				   p.a.mr->lkey, (uintptr_t)bbuf, mr2->rkey, 0));
	svt_poll_n(p.a.send_cq, 1, &wc, 0);
	SVT_CHECK_WC_STATUS(wc, IBV_WC_REM_ACCESS_ERR);
	SVT_CHECK_OK(ibv_dereg_mr(mr2));
	free(bbuf);
	svt_pair_destroy(&p);
}

static void test_rereg(void)
{
	struct svt_pair p;
	struct ibv_wc wc;

	svt_pair_create(&p, IBV_QPT_RC, NULL);
	char *b1 = svt_alloc(page), *b2 = svt_alloc(2 * page);
	struct ibv_mr *mr = svt_reg_mr(p.b.pd, b1, page, SVT_ACCESS_ALL);

	/* Bad input: no flags; remote write without local write. */
	SVT_CHECK_FAILS(ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0));
	SVT_CHECK_FAILS(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL,
				     0, IBV_ACCESS_REMOTE_WRITE));

	/* Move the MR onto b2 (access must be 0 without CHANGE_ACCESS, as
	 * libibverbs checks). */
	SVT_CHECK_OK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, b2,
				  2 * page, 0));
	SVT_CHECK(mr->addr == b2);
	SVT_CHECK_EQ(mr->length, 2 * page);

	svt_fill(p.a.buf, 2 * page, 11);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE,
				   IBV_SEND_SIGNALED, p.a.buf, (uint32_t)(2 * page),
				   p.a.mr->lkey, (uintptr_t)b2, mr->rkey, 0));
	svt_poll_ok(p.a.send_cq, 1, &wc, 0);
	SVT_CHECK_FILL(b2, 2 * page, 11);
	for (size_t i = 0; i < page; i++)
		SVT_CHECK_EQ(b1[i], 0);

	/* Drop remote write: a remote write must now fail, and not land. */
	SVT_CHECK_OK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				  IBV_ACCESS_LOCAL_WRITE |
					  IBV_ACCESS_REMOTE_READ));
	memset(b2, 0, 2 * page);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 2, IBV_WR_RDMA_WRITE,
				   IBV_SEND_SIGNALED, p.a.buf, 64, p.a.mr->lkey,
				   (uintptr_t)b2, mr->rkey, 0));
	svt_poll_n(p.a.send_cq, 1, &wc, 0);
	SVT_CHECK_WC_STATUS(wc, IBV_WC_REM_ACCESS_ERR);
	for (size_t i = 0; i < 2 * page; i++)
		SVT_CHECK_EQ(b2[i], 0);

	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(b1);
	free(b2);
	svt_pair_destroy(&p);
}

static void test_dealloc_busy(struct ibv_context *ctx)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	void *buf = svt_alloc(page);

	SVT_CHECK_PTR(pd);
	struct ibv_mr *mr = svt_reg_mr(pd, buf, page, IBV_ACCESS_LOCAL_WRITE);

	SVT_CHECK_RC(ibv_dealloc_pd(pd), EBUSY);
	/* The MR survived the failed dealloc. */
	SVT_CHECK_OK(ibv_dereg_mr(mr));

	/* Same with a QP, an AH and an SRQ. */
	struct ibv_cq *cq = svt_create_cq(ctx, 4, NULL);
	struct svt_qp_init qi;

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *qp = svt_create_qp(pd, cq, cq, &qi);

	SVT_CHECK_RC(ibv_dealloc_pd(pd), EBUSY);
	SVT_CHECK_OK(ibv_destroy_qp(qp));

	union ibv_gid gid;
	struct ibv_ah_attr aa;

	SVT_CHECK_OK(ibv_query_gid(ctx, 1, 0, &gid));
	svt_ah_attr(&aa, &gid, NULL);
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);

	SVT_CHECK_PTR(ah);
	SVT_CHECK_RC(ibv_dealloc_pd(pd), EBUSY);
	SVT_CHECK_OK(ibv_destroy_ah(ah));

	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);

	SVT_CHECK_PTR(srq);
	SVT_CHECK_RC(ibv_dealloc_pd(pd), EBUSY);
	SVT_CHECK_OK(ibv_destroy_srq(srq));

	SVT_CHECK_OK(ibv_dealloc_pd(pd));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	free(buf);
}

int main(void)
{
	svt_watchdog(50);
	page = (size_t)sysconf(_SC_PAGESIZE);

	struct ibv_context *ctx = svt_open_context();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);

	SVT_CHECK_PTR(pd);
	test_pd(ctx);
	test_access_rules(pd);
	test_unmapped(pd);
	test_keys(pd);
	test_dealloc_busy(ctx);
	SVT_CHECK_OK(ibv_dealloc_pd(pd));
	SVT_CHECK_OK(ibv_close_device(ctx));

	test_iova();
	test_rereg();
	test_unmapped_while_registered();
	test_read_only(); /* last: a failure here must not hide the others */
	return 0;
}
