/*
 * gpu_mr: registering GPU memory (cuMemAlloc) with softverbs.
 *   - ibv_reg_mr of a whole allocation and of an interior range at an odd
 *     address and length: the MR says what was asked, lkey/rkey are set
 *     and differ from another MR's; ibv_dereg_mr works
 *   - a range that leaves its allocation fails with EFAULT (one byte past
 *     the end; starting inside and ending past it)
 *   - registration from a thread that has no current CUDA context works
 *     (the real driver answers some queries only with one: the library
 *     must not depend on the caller's)
 *   - memory CUDA knows but the CPU reaches (cuMemAllocHost, managed
 *     memory) and plain host memory still register, CUDA loaded
 *   - ibv_reg_dmabuf_mr with the fd of cuMemGetHandleForAddressRange over
 *     the allocation, offset = addr - base and iova = addr (as NCCL and
 *     UCX call it): succeeds, addr = offset and length as rdma-core
 *     reports them; the MR carries data (a WRITE to iova lands in the GPU
 *     buffer, a READ from it returns it); a range past the buffer fails;
 *     fd -1 fails with EBADF
 * Where the real driver exports no dma-buf, the dma-buf part is left out
 * and the test ends as skipped once the rest has passed.
 */
#include "sv_test.h"
#include "cuda_shim.h"

#include <pthread.h>
#include <unistd.h>

#define GLEN (2u * 1024 * 1024)

static const char *dmabuf_missing;

static void check_mr(struct ibv_mr *mr, struct ibv_pd *pd, void *addr, size_t len)
{
	SVT_CHECK_PTR(mr);
	SVT_CHECK(mr->pd == pd);
	SVT_CHECK(mr->context == pd->context);
	SVT_CHECK(mr->addr == addr);
	SVT_CHECK_EQ(mr->length, len);
}

static void test_reg(struct svt_dev *d)
{
	uint8_t *g = svt_gpu_alloc(GLEN);
	struct ibv_mr *whole, *part, *host_mr;
	void *h = svt_alloc(4096);

	whole = ibv_reg_mr(d->pd, g, GLEN, SVT_ACCESS_ALL);
	check_mr(whole, d->pd, g, GLEN);
	part = ibv_reg_mr(d->pd, g + 4097, 65531, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	check_mr(part, d->pd, g + 4097, 65531);
	SVT_CHECK_NE(whole->lkey, part->lkey);
	SVT_CHECK_NE(whole->rkey, part->rkey);
	host_mr = ibv_reg_mr(d->pd, h, 4096, SVT_ACCESS_ALL); /* host memory, CUDA loaded */
	check_mr(host_mr, d->pd, h, 4096);
	SVT_CHECK_NE(host_mr->lkey, whole->lkey);

	/* the last byte of the allocation is in, the next one is not */
	struct ibv_mr *last = ibv_reg_mr(d->pd, g + GLEN - 1, 1, SVT_ACCESS_ALL);

	check_mr(last, d->pd, g + GLEN - 1, 1);
	SVT_CHECK_NULL_ERRNO(ibv_reg_mr(d->pd, g, GLEN + 1, SVT_ACCESS_ALL), EFAULT);
	SVT_CHECK_NULL_ERRNO(ibv_reg_mr(d->pd, g + GLEN - 4096, 8192, SVT_ACCESS_ALL), EFAULT);
	SVT_CHECK_NULL_ERRNO(ibv_reg_mr(d->pd, g + 1, GLEN, IBV_ACCESS_LOCAL_WRITE), EFAULT);

	SVT_CHECK_OK(ibv_dereg_mr(last));
	SVT_CHECK_OK(ibv_dereg_mr(part));
	SVT_CHECK_OK(ibv_dereg_mr(whole));
	SVT_CHECK_OK(ibv_dereg_mr(host_mr));

	/* again after deregistration: nothing was left behind */
	whole = ibv_reg_mr(d->pd, g, GLEN, SVT_ACCESS_ALL);
	check_mr(whole, d->pd, g, GLEN);
	SVT_CHECK_OK(ibv_dereg_mr(whole));
	svt_gpu_free(g);
	free(h);
}

struct thread_reg {
	struct ibv_pd *pd;
	void *g;
	size_t len;
	struct ibv_mr *mr;
	int err;
	int ctx_was_current;
};

static void *reg_thread(void *arg)
{
	struct thread_reg *t = arg;
	svt_cu_ctx c = NULL;

	SVT_CU_OK(svt_cu.CtxGetCurrent(&c));
	t->ctx_was_current = c != NULL;
	errno = 0;
	t->mr = ibv_reg_mr(t->pd, t->g, t->len, SVT_ACCESS_ALL);
	t->err = errno;
	return NULL;
}

static void test_reg_other_thread(struct svt_dev *d)
{
	struct thread_reg t = { .pd = d->pd, .len = GLEN };
	pthread_t th;

	t.g = svt_gpu_alloc(GLEN);
	SVT_CHECK_EQ(pthread_create(&th, NULL, reg_thread, &t), 0);
	SVT_CHECK_EQ(pthread_join(th, NULL), 0);
	SVT_CHECK_EQ(t.ctx_was_current, 0);
	SVT_CHECK_MSG(t.mr, "ibv_reg_mr of GPU memory in a thread without a current CUDA "
			    "context: errno %d (%s)", t.err, strerror(t.err));
	check_mr(t.mr, d->pd, t.g, GLEN);
	SVT_CHECK_OK(ibv_dereg_mr(t.mr));
	svt_gpu_free(t.g);
}

static void test_host_kinds(struct svt_dev *d)
{
	void *pinned = NULL;
	svt_cu_ptr managed = 0;
	struct ibv_mr *mr;

	SVT_CU_OK(svt_cu.MemAllocHost(&pinned, 65536));
	mr = ibv_reg_mr(d->pd, pinned, 65536, SVT_ACCESS_ALL);
	check_mr(mr, d->pd, pinned, 65536);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CU_OK(svt_cu.MemFreeHost(pinned));

	SVT_CU_OK(svt_cu.MemAllocManaged(&managed, 65536, SVT_CU_MEM_ATTACH_GLOBAL));
	mr = ibv_reg_mr(d->pd, (void *)(uintptr_t)managed, 65536, SVT_ACCESS_ALL);
	check_mr(mr, d->pd, (void *)(uintptr_t)managed, 65536);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CU_OK(svt_cu.MemFree(managed));
}

/* ibv_reg_dmabuf_mr as NCCL calls it; then a WRITE into it and a READ from it. */
static void test_dmabuf(void)
{
	struct svt_pair p;
	struct ibv_wc wc;
	uint8_t *g = svt_gpu_alloc(GLEN);
	void *base;
	size_t size;
	int fd;

	svt_pair_create(&p, IBV_QPT_RC, NULL);

	/* fd -1: EBADF, CUDA being loaded (without CUDA: EOPNOTSUPP, gpu_probe) */
	SVT_CHECK_NULL_ERRNO(ibv_reg_dmabuf_mr(p.b.pd, 0, 4096, (uintptr_t)g, -1, SVT_ACCESS_ALL),
			     EBADF);

	svt_gpu_range(g + 12345, &base, &size);
	SVT_CHECK(base == g);
	SVT_CHECK_EQ(size, GLEN);
	fd = svt_gpu_dmabuf_fd(base, size);
	if (fd < 0) {
		dmabuf_missing = "the CUDA driver exports no dma-buf";
		svt_pair_destroy(&p);
		svt_gpu_free(g);
		return;
	}

	/* a part of the buffer: offset = addr - base, iova = addr */
	uint8_t *addr = g + 65536;
	size_t len = 256 * 1024;
	struct ibv_mr *mr = ibv_reg_dmabuf_mr(p.b.pd, (uint64_t)(addr - (uint8_t *)base), len,
					      (uintptr_t)addr, fd, SVT_ACCESS_ALL);

	SVT_CHECK_PTR(mr);
	SVT_CHECK(mr->pd == p.b.pd);
	SVT_CHECK_EQ((uintptr_t)mr->addr, 65536); /* rdma-core: addr is the offset */
	SVT_CHECK_EQ(mr->length, len);

	/* the whole buffer, too */
	struct ibv_mr *all = ibv_reg_dmabuf_mr(p.b.pd, 0, GLEN, (uintptr_t)g, fd, SVT_ACCESS_ALL);

	SVT_CHECK_PTR(all);
	SVT_CHECK_EQ((uintptr_t)all->addr, 0);
	SVT_CHECK_EQ(all->length, GLEN);
	SVT_CHECK_NE(all->lkey, mr->lkey);

	/* leaving the buffer: refused (EFAULT or EINVAL, as the driver tells) */
	SVT_CHECK_NULL(ibv_reg_dmabuf_mr(p.b.pd, GLEN - 4096, 8192, (uintptr_t)g + GLEN - 4096, fd,
					 SVT_ACCESS_ALL));

	/* data: a WRITE to iova + 100 lands at addr + 100 in GPU memory */
	svt_gpu_memset(g, 0, GLEN);
	svt_fill(p.a.buf, 40000, 11);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, p.a.buf, 40000,
				   p.a.mr->lkey, (uintptr_t)addr + 100, mr->rkey, 0));
	wc = svt_poll_one(p.a.send_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_GPU_CHECK_FILL(addr + 100, 40000, 11);
	uint8_t zero[100] = { 0 };

	SVT_GPU_CHECK_MEM(addr, zero, 100);
	SVT_GPU_CHECK_MEM(addr + 40100, zero, 100);

	/* and a READ from it, through the whole-buffer MR */
	svt_gpu_fill(g + 300000, 20000, 12);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 2, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED,
				   (uint8_t *)p.a.buf + 41000, 20000, p.a.mr->lkey,
				   (uintptr_t)g + 300000, all->rkey, 0));
	wc = svt_poll_one(p.a.send_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_FILL((uint8_t *)p.a.buf + 41000, 20000, 12);

	/* beyond the MR's range: the target refuses */
	SVT_CHECK_OK(svt_post_send(p.a.qp, 3, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, p.a.buf, 64,
				   p.a.mr->lkey, (uintptr_t)addr + len - 32, mr->rkey, 0));
	wc = svt_poll_one(p.a.send_cq);
	SVT_CHECK_WC_STATUS(wc, IBV_WC_REM_ACCESS_ERR);

	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_dereg_mr(all));
	SVT_CHECK_EQ(close(fd), 0);
	svt_pair_destroy(&p);
	svt_gpu_free(g);
}

int main(void)
{
	struct svt_dev d;

	svt_watchdog(50);
	svt_cuda_init(); /* before any verbs call */
	svt_dev_open(&d);
	test_reg(&d);
	test_host_kinds(&d);
	test_dmabuf();
	test_reg_other_thread(&d);
	svt_dev_close(&d);
	if (dmabuf_missing)
		svt_skip(dmabuf_missing);
	return 0;
}
