/*
 * gpu_driver: what the CUDA driver answers, for the calls softverbs makes,
 * checked against the fake driver (libsvt_fakecuda.so) and the real one
 * alike, so that the fake cannot drift from the driver it stands for.
 * No verbs here.  Measured on an H100 (CUDA 13 driver):
 *   - before cuInit: CUDA_ERROR_NOT_INITIALIZED
 *   - cuPointerGetAttribute, no current context needed: device memory is
 *     MEMORY_TYPE DEVICE (4 bytes written), CONTEXT the primary context,
 *     IS_MANAGED 0, DEVICE_ORDINAL 0; plain host memory and NULL fail
 *     with CUDA_ERROR_INVALID_VALUE for every attribute; pinned host
 *     memory is HOST; managed memory DEVICE with IS_MANAGED 1
 *   - cuMemGetAddressRange_v2: base and the size asked (not rounded) from
 *     any interior address; NOT_FOUND for host memory; INVALID_CONTEXT in
 *     a thread without a current context
 *   - copies and cuCtxPopCurrent want a context (INVALID_CONTEXT); a
 *     copy that leaves the allocation is INVALID_VALUE
 *   - cuMemGetHandleForAddressRange(DMA_BUF_FD): page-aligned start and
 *     size only; not for host memory
 *   - IPC: the handle of an interior address is the allocation's; opened
 *     in the same process: INVALID_CONTEXT; in another process: the base
 *     of the allocation, the same address again on a second open (one
 *     close each, a third close fails), the memory is shared both ways,
 *     an imported range cannot be exported again
 *   - cuMemFree of an interior address or twice: INVALID_VALUE; of 0: fine
 */
#include "sv_test.h"
#include "cuda_shim.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#define ALEN 1000000 /* not a multiple of anything */
#define ONES 0xffffffffffffffffull

#define CU_RC(call, want) SVT_CHECK_EQ((call), (want))

static svt_cu_ptr P(const void *p)
{
	return (svt_cu_ptr)(uintptr_t)p;
}

/* One attribute into an 8-byte word prefilled with ones; the return code. */
static int attr(int a, const void *p, uint64_t *v)
{
	*v = ONES;
	return svt_cu.PointerGetAttribute(v, a, P(p));
}

static void test_attributes(uint8_t *g)
{
	uint64_t v;
	void *m = malloc(100);
	int stack_var = 0;

	SVT_CHECK_PTR(m);
	CU_RC(attr(SVT_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, g + 100, &v), 0);
	SVT_CHECK_EQ(v, 0xffffffff00000000ull | SVT_CU_MEMORYTYPE_DEVICE);
	CU_RC(attr(SVT_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, g + ALEN - 1, &v), 0);
	CU_RC(attr(SVT_CU_POINTER_ATTRIBUTE_CONTEXT, g + 100, &v), 0);
	SVT_CHECK_EQ(v, (uintptr_t)svt_cuda_ctx());
	CU_RC(attr(SVT_CU_POINTER_ATTRIBUTE_IS_MANAGED, g + 100, &v), 0);
	SVT_CHECK_EQ(v, 0xffffffff00000000ull);
	CU_RC(attr(SVT_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, g + 100, &v), 0);
	SVT_CHECK_EQ(v, 0xffffffff00000000ull);
	CU_RC(attr(99, g, &v), SVT_CUDA_ERROR_INVALID_VALUE);

	static const int host_attrs[] = { SVT_CU_POINTER_ATTRIBUTE_CONTEXT,
					   SVT_CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
					   SVT_CU_POINTER_ATTRIBUTE_IS_MANAGED };

	for (size_t i = 0; i < sizeof(host_attrs) / sizeof(host_attrs[0]); i++) {
		int a = host_attrs[i];

		CU_RC(attr(a, m, &v), SVT_CUDA_ERROR_INVALID_VALUE);
		SVT_CHECK_EQ(v, ONES);
		CU_RC(attr(a, &stack_var, &v), SVT_CUDA_ERROR_INVALID_VALUE);
		CU_RC(attr(a, NULL, &v), SVT_CUDA_ERROR_INVALID_VALUE);
	}

	void *pinned = NULL;
	svt_cu_ptr managed = 0;

	SVT_CU_OK(svt_cu.MemAllocHost(&pinned, 4096));
	CU_RC(attr(SVT_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, pinned, &v), 0);
	SVT_CHECK_EQ((uint32_t)v, SVT_CU_MEMORYTYPE_HOST);
	SVT_CU_OK(svt_cu.MemFreeHost(pinned));
	SVT_CU_OK(svt_cu.MemAllocManaged(&managed, 4096, SVT_CU_MEM_ATTACH_GLOBAL));
	CU_RC(attr(SVT_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (void *)(uintptr_t)managed, &v), 0);
	SVT_CHECK_EQ((uint32_t)v, SVT_CU_MEMORYTYPE_DEVICE);
	CU_RC(attr(SVT_CU_POINTER_ATTRIBUTE_IS_MANAGED, (void *)(uintptr_t)managed, &v), 0);
	SVT_CHECK_EQ((uint32_t)v, 1);
	SVT_CU_OK(svt_cu.MemFree(managed));
	free(m);
}

static void test_range(uint8_t *g)
{
	svt_cu_ptr b = 1;
	size_t s = 1;
	void *m = malloc(100);

	SVT_CHECK_PTR(m);
	SVT_CU_OK(svt_cu.MemGetAddressRange(&b, &s, P(g + 4097)));
	SVT_CHECK_EQ(b, P(g));
	SVT_CHECK_EQ(s, ALEN);
	SVT_CU_OK(svt_cu.MemGetAddressRange(&b, &s, P(g + ALEN - 1)));
	SVT_CHECK_EQ(b, P(g));
	SVT_CU_OK(svt_cu.MemGetAddressRange(NULL, NULL, P(g + 5)));
	CU_RC(svt_cu.MemGetAddressRange(&b, &s, P(m)), SVT_CUDA_ERROR_NOT_FOUND);
	free(m);
}

/* What a thread without a current context gets. */
static void *no_ctx_thread(void *arg)
{
	uint8_t *g = arg;
	svt_cu_ctx c = (svt_cu_ctx)arg;
	uint64_t v;
	char buf[16];
	svt_cu_ptr b;
	size_t s;

	SVT_CU_OK(svt_cu.CtxGetCurrent(&c));
	SVT_CHECK(c == NULL);
	CU_RC(attr(SVT_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, g, &v), 0);
	SVT_CHECK_EQ((uint32_t)v, SVT_CU_MEMORYTYPE_DEVICE);
	CU_RC(attr(SVT_CU_POINTER_ATTRIBUTE_CONTEXT, g, &v), 0);
	SVT_CHECK_EQ(v, (uintptr_t)svt_cuda_ctx());
	CU_RC(svt_cu.MemGetAddressRange(&b, &s, P(g + 10)), SVT_CUDA_ERROR_INVALID_CONTEXT);
	CU_RC(svt_cu.MemcpyDtoH(buf, P(g), sizeof(buf)), SVT_CUDA_ERROR_INVALID_CONTEXT);
	CU_RC(svt_cu.CtxSetCurrent(NULL), 0); /* an empty stack: nothing to pop */
	svt_cuda_make_current();
	SVT_CU_OK(svt_cu.MemGetAddressRange(&b, &s, P(g + 10)));
	SVT_CU_OK(svt_cu.MemcpyDtoH(buf, P(g), sizeof(buf)));
	return NULL;
}

static void test_contexts(uint8_t *g)
{
	pthread_t th;
	char buf[32];

	SVT_CHECK_EQ(pthread_create(&th, NULL, no_ctx_thread, g), 0);
	SVT_CHECK_EQ(pthread_join(th, NULL), 0);
	CU_RC(svt_cu.MemcpyDtoH(buf, P(g + ALEN - 10), 20), SVT_CUDA_ERROR_INVALID_VALUE);
	CU_RC(svt_cu.MemcpyHtoD(P(g + ALEN - 10), buf, 20), SVT_CUDA_ERROR_INVALID_VALUE);
	SVT_CU_OK(svt_cu.MemcpyDtoH(buf, P(g + ALEN - 10), 10));
}

static void test_dmabuf(uint8_t *g)
{
	int fd = svt_gpu_dmabuf_fd(g, 65536);
	void *m;

	if (fd < 0)
		return; /* no dma-buf export with this driver (never the fake) */
	SVT_CHECK_EQ(close(fd), 0);
	m = svt_alloc(8192);
	CU_RC(svt_cu.MemGetHandleForAddressRange(&fd, P(g), ALEN,
						 SVT_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0),
	      SVT_CUDA_ERROR_INVALID_VALUE);
	CU_RC(svt_cu.MemGetHandleForAddressRange(&fd, P(g + 100), 65536,
						 SVT_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0),
	      SVT_CUDA_ERROR_INVALID_VALUE);
	CU_RC(svt_cu.MemGetHandleForAddressRange(&fd, P(g), 65536, 0, 0),
	      SVT_CUDA_ERROR_INVALID_VALUE);
	CU_RC(svt_cu.MemGetHandleForAddressRange(&fd, P(m), 4096,
						 SVT_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0),
	      SVT_CUDA_ERROR_INVALID_VALUE);
	fd = -5;
	SVT_CU_OK(svt_cu.MemGetHandleForAddressRange(&fd, P(g + 4096), 65536,
						     SVT_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0));
	SVT_CHECK(fd >= 0);
	SVT_CHECK_EQ(close(fd), 0);
	free(m);
}

/* The child: opens the parent's handle, checks, writes its mark, closes. */
static int importer(int rfd, int wfd, int argc, char **argv)
{
	svt_cu_ipc_handle h, h2;
	svt_cu_ptr p1 = 0, p2 = 0, b = 0;
	size_t s = 0;
	uint64_t v;
	char buf[8];

	(void)argc;
	(void)argv;
	svt_cuda_init();
	svt_chan_read(rfd, &h, sizeof(h), 0);
	SVT_CU_OK(svt_cu.IpcOpenMemHandle(&p1, h, 1));
	SVT_CU_OK(svt_cu.IpcOpenMemHandle(&p2, h, 1));
	SVT_CHECK_EQ(p1, p2);
	SVT_CU_OK(svt_cu.MemGetAddressRange(&b, &s, p1 + 5));
	SVT_CHECK_EQ(b, p1);
	SVT_CHECK_EQ(s, ALEN);
	CU_RC(attr(SVT_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (void *)(uintptr_t)p1, &v), 0);
	SVT_CHECK_EQ((uint32_t)v, SVT_CU_MEMORYTYPE_DEVICE);
	CU_RC(attr(SVT_CU_POINTER_ATTRIBUTE_CONTEXT, (void *)(uintptr_t)p1, &v), 0);
	SVT_CHECK_EQ(v, (uintptr_t)svt_cuda_ctx());
	SVT_CU_OK(svt_cu.MemcpyDtoH(buf, p1, 8));
	SVT_CHECK_MEM(buf, "parent!", 8);
	SVT_CU_OK(svt_cu.MemcpyHtoD(p1 + 8, "child!!", 8));
	SVT_CU_OK(svt_cu.CtxSynchronize());
	CU_RC(svt_cu.IpcGetMemHandle(&h2, p1), SVT_CUDA_ERROR_INVALID_VALUE);
	SVT_CU_OK(svt_cu.IpcCloseMemHandle(p1));
	SVT_CU_OK(svt_cu.IpcCloseMemHandle(p1));
	CU_RC(svt_cu.IpcCloseMemHandle(p1), SVT_CUDA_ERROR_INVALID_VALUE);
	svt_sync_send(wfd, 'D');
	return 0;
}

static void test_ipc(uint8_t *g)
{
	svt_cu_ipc_handle h, hi, junk;
	svt_cu_ptr p = 0;
	struct svt_child c;
	char buf[8];
	void *m = malloc(64);

	SVT_CHECK_PTR(m);
	SVT_CU_OK(svt_cu.IpcGetMemHandle(&h, P(g)));
	SVT_CU_OK(svt_cu.IpcGetMemHandle(&hi, P(g + 4096)));
	SVT_CHECK_MEM(&h, &hi, sizeof(h));
	CU_RC(svt_cu.IpcGetMemHandle(&hi, P(m)), SVT_CUDA_ERROR_INVALID_VALUE);
	CU_RC(svt_cu.IpcOpenMemHandle(&p, h, 1), SVT_CUDA_ERROR_INVALID_CONTEXT);
	memset(&junk, 0x5a, sizeof(junk));
	CU_RC(svt_cu.IpcOpenMemHandle(&p, junk, 1), SVT_CUDA_ERROR_INVALID_VALUE);
	CU_RC(svt_cu.IpcCloseMemHandle(P(g)), SVT_CUDA_ERROR_INVALID_VALUE);

	svt_gpu_from_host(g, "parent!", 8);
	svt_spawn(&c, "importer", NULL);
	svt_chan_write(c.wfd, &h, sizeof(h));
	SVT_CHECK_EQ(svt_sync_recv(c.rfd, 20000), 'D');
	SVT_CHECK_EQ(svt_child_wait(&c, 20000), 0);
	svt_gpu_to_host(buf, g + 8, 8);
	SVT_CHECK_MEM(buf, "child!!", 8);
	free(m);
}

static void test_alloc_free(void)
{
	svt_cu_ptr p = 0;
	uint8_t *g = svt_gpu_alloc(65536);

	CU_RC(svt_cu.MemAlloc(&p, 0), SVT_CUDA_ERROR_INVALID_VALUE);
	CU_RC(svt_cu.MemFree(P(g + 8)), SVT_CUDA_ERROR_INVALID_VALUE);
	SVT_CU_OK(svt_cu.MemFree(P(g)));
	CU_RC(svt_cu.MemFree(P(g)), SVT_CUDA_ERROR_INVALID_VALUE);
	SVT_CU_OK(svt_cu.MemFree(0));
}

static const struct svt_child_role roles[] = {
	{ "importer", importer },
	{ NULL, NULL },
};

int main(int argc, char **argv)
{
	uint64_t v;

	svt_child_dispatch(argc, argv, roles);
	svt_watchdog(50);
	svt_cuda_load();
	CU_RC(attr(SVT_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, &v, &v), SVT_CUDA_ERROR_NOT_INITIALIZED);
	svt_cuda_init();

	uint8_t *g = svt_gpu_alloc(ALEN);

	test_attributes(g);
	test_range(g);
	test_contexts(g);
	test_dmabuf(g);
	test_ipc(g);
	svt_gpu_free(g);
	test_alloc_free();
	return 0;
}
