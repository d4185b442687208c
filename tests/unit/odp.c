/*
 * unit_odp: on-demand paging, explicit.
 *   - ibv_query_device_ex reports IBV_ODP_SUPPORT (not IMPLICIT) and the
 *     per-transport operations
 *   - an ON_DEMAND MR over memory never touched (mmap, no page populated)
 *     takes a peer's RDMA WRITE and serves its READ; its pages are faulted
 *     in as they are used
 *   - ibv_advise_mr: PREFETCH and PREFETCH_WRITE populate the range
 *     (mincore says so), PREFETCH_NO_FAULT does nothing; a range beyond the
 *     MR or a bad lkey → EFAULT, PREFETCH_WRITE without LOCAL_WRITE →
 *     EFAULT, a non-ODP MR or unknown flags → EINVAL, an unknown advice →
 *     EOPNOTSUPP
 *   - implicit ODP (NULL, SIZE_MAX) is refused (EINVAL)
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
	SVT_CHECK(!(ax.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT));
	SVT_CHECK(ax.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_WRITE);
	SVT_CHECK(ax.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_READ);
	SVT_CHECK(ax.odp_caps.per_transport_caps.ud_odp_caps & IBV_ODP_SUPPORT_SEND);
	errno = 0;
	SVT_CHECK_NULL(ibv_reg_mr(d.pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND));
	SVT_CHECK_EQ(errno, EINVAL);
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

int main(void)
{
	svt_watchdog(50);
	test_caps();
	test_traffic_and_advice();
	return 0;
}
