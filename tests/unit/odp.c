/*
 * unit_odp: on-demand paging, explicit and implicit.
 *   - ibv_query_device_ex reports IBV_ODP_SUPPORT and IMPLICIT, and the
 *     per-transport operations, XRC's (xrc_odp_caps) included
 *   - an ON_DEMAND MR over memory never touched (mmap, no page populated)
 *     takes a peer's RDMA WRITE and serves its READ; its pages are faulted
 *     in as they are used
 *   - ibv_advise_mr: PREFETCH and PREFETCH_WRITE populate the range
 *     (mincore says so), PREFETCH_NO_FAULT does nothing; a range beyond the
 *     MR or a bad lkey → EFAULT, PREFETCH_WRITE without LOCAL_WRITE →
 *     EFAULT, a non-ODP MR or unknown flags → EINVAL, an unknown advice →
 *     EOPNOTSUPP
 *   - implicit ODP: ibv_reg_mr(pd, NULL, SIZE_MAX, ON_DEMAND | ...) gives
 *     one key for the whole address space.  Through it a peer WRITEs into
 *     memory never registered (a fresh mmap, pages untouched), READs the
 *     heap and adds to a counter there; the owner SENDs from the heap and
 *     receives into the mmap.  An address the process cannot touch fails the
 *     operation: LOC_PROT_ERR for the owner's gather, REM_ACCESS_ERR for a
 *     peer's WRITE and READ.  Without ON_DEMAND, with an iova, or NULL with
 *     another length: EINVAL; an access change keeps it implicit, and
 *     losing ON_DEMAND is refused.
 */
#include "sv_test.h"

#include <sys/mman.h>
#include <unistd.h>

#define LEN (64u * 4096u)

static size_t resident(void *addr, size_t len)
{
	unsigned char vec[LEN / 4096];
	size_t n = 0;

	SVT_CHECK_OK(mincore(addr, len, vec));
	for (size_t i = 0; i < len / 4096; i++)
		n += vec[i] & 1;
	return n;
}

static void test_caps(void)
{
	struct svt_dev d;
	struct ibv_device_attr_ex ax;

	svt_dev_open(&d);
	SVT_CHECK_OK(ibv_query_device_ex(d.ctx, NULL, &ax));
	SVT_CHECK(ax.odp_caps.general_caps & IBV_ODP_SUPPORT);
	SVT_CHECK(ax.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT);
	SVT_CHECK(ax.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_WRITE);
	SVT_CHECK(ax.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_READ);
	SVT_CHECK(ax.odp_caps.per_transport_caps.ud_odp_caps & IBV_ODP_SUPPORT_SEND);
	/* XRC: what unit_xrc's test_odp does; no RECV (XRC receives through SRQs) */
	SVT_CHECK_EQ(ax.xrc_odp_caps, IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_WRITE |
					      IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
					      IBV_ODP_SUPPORT_SRQ_RECV);
	svt_dev_close(&d);
}

static void test_traffic_and_advice(void)
{
	struct svt_pair p;
	struct ibv_sge sge;
	unsigned int acc = IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE |
			   IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

	svt_pair_create(&p, IBV_QPT_RC, NULL);
	uint8_t *mem = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	SVT_CHECK(mem != MAP_FAILED);
	SVT_CHECK_EQ(resident(mem, LEN), 0);
	struct ibv_mr *mr = ibv_reg_mr(p.b.pd, mem, LEN, (int)acc);

	SVT_CHECK_PTR(mr);
	SVT_CHECK_EQ(resident(mem, LEN), 0); /* registration faults nothing in */

	/* a peer's WRITE and READ on pages never touched before */
	svt_fill(p.a.buf, 8192, 7);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, p.a.buf, 8192,
				   p.a.mr->lkey, (uintptr_t)mem + 40960, mr->rkey, 0));
	SVT_CHECK_WC_OK(svt_poll_one(p.a.send_cq));
	SVT_CHECK_FILL(mem + 40960, 8192, 7);
	memset(p.a.buf, 0, 8192);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 2, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, p.a.buf, 8192,
				   p.a.mr->lkey, (uintptr_t)mem + 40960, mr->rkey, 0));
	SVT_CHECK_WC_OK(svt_poll_one(p.a.send_cq));
	SVT_CHECK_FILL(p.a.buf, 8192, 7);

	/* prefetching populates the range */
	size_t before = resident(mem, LEN);

	sge = (struct ibv_sge){ (uintptr_t)mem, 16 * 4096, mr->lkey };
	SVT_CHECK_OK(ibv_advise_mr(p.b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &sge, 1));
	SVT_CHECK_EQ(resident(mem, LEN), before);
	SVT_CHECK_OK(ibv_advise_mr(p.b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
				   IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1));
#ifdef MADV_POPULATE_WRITE
	SVT_CHECK_GE(resident(mem, 16 * 4096), 16);
#endif
	sge = (struct ibv_sge){ (uintptr_t)mem + 20 * 4096, 4096, mr->lkey };
	SVT_CHECK_OK(ibv_advise_mr(p.b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1));

	/* refusals */
	sge = (struct ibv_sge){ (uintptr_t)mem + LEN - 4096, 8192, mr->lkey };
	SVT_CHECK_RC(ibv_advise_mr(p.b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), EFAULT);
	sge = (struct ibv_sge){ (uintptr_t)mem, 4096, mr->lkey ^ 0x1 }; /* its slot, another tag: no key */
	SVT_CHECK_RC(ibv_advise_mr(p.b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), EFAULT);
	sge = (struct ibv_sge){ (uintptr_t)mem, 4096, mr->lkey };
	SVT_CHECK_RC(ibv_advise_mr(p.b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0x80, &sge, 1), EINVAL);
	SVT_CHECK_RC(ibv_advise_mr(p.b.pd, (enum ibv_advise_mr_advice)9, 0, &sge, 1), EOPNOTSUPP);
	sge = (struct ibv_sge){ (uintptr_t)p.b.buf, 4096, p.b.mr->lkey }; /* not on demand */
	SVT_CHECK_RC(ibv_advise_mr(p.b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), EINVAL);

	struct ibv_mr *ro = ibv_reg_mr(p.b.pd, mem, 4096, IBV_ACCESS_ON_DEMAND);

	SVT_CHECK_PTR(ro);
	sge = (struct ibv_sge){ (uintptr_t)mem, 4096, ro->lkey };
	SVT_CHECK_RC(ibv_advise_mr(p.b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &sge, 1), EFAULT);
	SVT_CHECK_OK(ibv_advise_mr(p.b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1));

	SVT_CHECK_OK(ibv_dereg_mr(ro));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	munmap(mem, LEN);
	svt_pair_destroy(&p);
}

#define IMPLICIT_ACCESS                                                                     \
	(IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |          \
	 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/* A page the process cannot touch.  It stays reserved (PROT_NONE) rather
 * than unmapped, so that no allocation can land there before it is used. */
static uint8_t *hole(void)
{
	uint8_t *h = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	SVT_CHECK(h != MAP_FAILED);
	return h;
}

static void test_implicit(void)
{
	struct svt_pair p;
	struct ibv_wc wc;

	svt_pair_create(&p, IBV_QPT_RC, NULL);
	errno = 0;
	SVT_CHECK_NULL(ibv_reg_mr(p.b.pd, NULL, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE));
	SVT_CHECK_EQ(errno, EINVAL);
	errno = 0;
	SVT_CHECK_NULL(ibv_reg_mr_iova(p.b.pd, NULL, SIZE_MAX, 4096, (int)IMPLICIT_ACCESS));
	SVT_CHECK_EQ(errno, EINVAL);
	errno = 0;
	SVT_CHECK_NULL(ibv_reg_mr(p.b.pd, NULL, 4096, (int)IMPLICIT_ACCESS));
	SVT_CHECK_EQ(errno, EINVAL);

	struct ibv_mr *imr = ibv_reg_mr(p.b.pd, NULL, SIZE_MAX, (int)IMPLICIT_ACCESS);

	SVT_CHECK_PTR(imr);
	SVT_CHECK(imr->addr == NULL && imr->length == SIZE_MAX);

	/* memory of B's that no MR of its own covers */
	uint8_t *mem = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t *heap = svt_alloc(8192);

	SVT_CHECK(mem != MAP_FAILED);
	/* a peer's WRITE into pages never touched, its READ of the heap */
	svt_fill(p.a.buf, 8192, 11);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, p.a.buf, 8192,
				   p.a.mr->lkey, (uintptr_t)mem + 4096, imr->rkey, 0));
	SVT_CHECK_WC_OK(svt_poll_one(p.a.send_cq));
	SVT_CHECK_FILL(mem + 4096, 8192, 11);
	svt_fill(heap, 8192, 12);
	memset(p.a.buf, 0, 8192);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 2, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, p.a.buf, 8192,
				   p.a.mr->lkey, (uintptr_t)heap, imr->rkey, 0));
	SVT_CHECK_WC_OK(svt_poll_one(p.a.send_cq));
	SVT_CHECK_FILL(p.a.buf, 8192, 12);
	/* and its FETCH_AND_ADD on a counter in the heap */
	uint64_t *ctr = (uint64_t *)heap;

	*ctr = 40;
	SVT_CHECK_OK(svt_post_atomic(p.a.qp, 3, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_SEND_SIGNALED,
				     p.a.buf, p.a.mr->lkey, (uintptr_t)ctr, imr->rkey, 2, 0));
	SVT_CHECK_WC_OK(svt_poll_one(p.a.send_cq));
	SVT_CHECK_EQ(*(uint64_t *)p.a.buf, 40);
	SVT_CHECK_EQ(*ctr, 42);

	/* B sends from its heap and receives into the mmap, by the same key */
	svt_fill(heap, 4096, 13);
	SVT_CHECK_OK(svt_post_recv(p.a.qp, 4, p.a.buf, 4096, p.a.mr->lkey));
	SVT_CHECK_OK(svt_post_send(p.b.qp, 5, IBV_WR_SEND, IBV_SEND_SIGNALED, heap, 4096,
				   imr->lkey, 0, 0, 0));
	SVT_CHECK_WC_OK(svt_poll_one(p.b.send_cq));
	SVT_CHECK_WC_OK(svt_poll_one(p.a.recv_cq));
	SVT_CHECK_FILL(p.a.buf, 4096, 13);
	svt_fill(p.a.buf, 4096, 14);
	SVT_CHECK_OK(svt_post_recv(p.b.qp, 6, mem + 32 * 4096, 4096, imr->lkey));
	SVT_CHECK_OK(svt_post_send(p.a.qp, 7, IBV_WR_SEND, IBV_SEND_SIGNALED, p.a.buf, 4096,
				   p.a.mr->lkey, 0, 0, 0));
	SVT_CHECK_WC_OK(svt_poll_one(p.a.send_cq));
	SVT_CHECK_WC_OK(svt_poll_one(p.b.recv_cq));
	SVT_CHECK_FILL(mem + 32 * 4096, 4096, 14);

	/* an access change keeps it implicit; dropping ON_DEMAND is refused */
	SVT_CHECK_OK(ibv_rereg_mr(imr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				  (int)(IMPLICIT_ACCESS & ~IBV_ACCESS_REMOTE_ATOMIC)));
	SVT_CHECK(ibv_rereg_mr(imr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) != 0);
	SVT_CHECK_OK(ibv_rereg_mr(imr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				  (int)IMPLICIT_ACCESS));

	/* a page it cannot touch: B's gather fails, and so does its QP */
	uint8_t *h = hole();

	SVT_CHECK_OK(svt_post_send(p.b.qp, 8, IBV_WR_SEND, IBV_SEND_SIGNALED, h, 64, imr->lkey, 0, 0,
				   0));
	wc = svt_poll_one(p.b.send_cq);
	SVT_CHECK_WC_STATUS(wc, IBV_WC_LOC_PROT_ERR);
	SVT_CHECK_OK(ibv_dereg_mr(imr));
	svt_pair_destroy(&p);

	/* a peer's WRITE, and its READ, of an address it cannot touch */
	for (int op = 0; op < 2; op++) {
		svt_pair_create(&p, IBV_QPT_RC, NULL);
		imr = ibv_reg_mr(p.b.pd, NULL, SIZE_MAX, (int)IMPLICIT_ACCESS);
		SVT_CHECK_PTR(imr);
		SVT_CHECK_OK(svt_post_send(p.a.qp, 9, op ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE,
					   IBV_SEND_SIGNALED, p.a.buf, 64, p.a.mr->lkey,
					   (uintptr_t)hole(), imr->rkey, 0));
		wc = svt_poll_one(p.a.send_cq);
		SVT_CHECK_WC_STATUS(wc, IBV_WC_REM_ACCESS_ERR);
		SVT_CHECK_OK(ibv_dereg_mr(imr));
		svt_pair_destroy(&p);
	}
	munmap(mem, LEN);
	free(heap);
}

int main(void)
{
	svt_watchdog(50);
	test_caps();
	test_traffic_and_advice();
	test_implicit();
	return 0;
}
