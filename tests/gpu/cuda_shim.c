/* The CUDA driver for the GPU tests, by dlopen; see cuda_shim.h. */
#include "cuda_shim.h"

#include "sv_test.h"

#include <dlfcn.h>

struct svt_cuda svt_cu;
static svt_cu_ctx primary;
static bool fake;

const char *svt_cuda_strerror(svt_cu_result rc)
{
	const char *s = NULL;

	if (svt_cu.GetErrorString && !svt_cu.GetErrorString(rc, &s) && s)
		return s;
	return "unknown CUDA error";
}

void svt_cu_fail_at(const char *file, int line, const char *expr, svt_cu_result rc)
{
	svt_fail_at(file, line, "%s: CUDA error %d (%s)", expr, rc, svt_cuda_strerror(rc));
}

/* The driver cannot be used: skip with the real one, fail with the fake. */
static void __attribute__((noreturn)) unusable(const char *what, const char *detail)
{
	char msg[512];

	const char *req = getenv("SVT_CUDA_REQUIRED");

	snprintf(msg, sizeof(msg),
		 "CUDA driver %s: %s (the GPU tests need an NVIDIA GPU and its driver's "
		 "libcuda.so.1; scripts/gpu-test.sh runs them on a machine that has one)",
		 what, detail);
	if (fake)
		SVT_FAIL("SOFTVERBS_CUDA_LIB is set but the %s", msg);
	if (req && *req && strcmp(req, "0"))
		SVT_FAIL("SVT_CUDA_REQUIRED is set but the %s", msg);
	svt_skip(msg);
}

bool svt_cuda_is_fake(void)
{
	const char *lib = getenv("SOFTVERBS_CUDA_LIB");

	return lib && *lib;
}

static bool loaded;
static const char *lib_name;

void svt_cuda_load(void)
{
	const char *lib = getenv("SOFTVERBS_CUDA_LIB");
	struct {
		void **slot;
		const char *name;
		bool optional;
	} syms[] = {
		{ (void **)&svt_cu.Init, "cuInit", false },
		{ (void **)&svt_cu.DeviceGet, "cuDeviceGet", false },
		{ (void **)&svt_cu.DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", false },
		{ (void **)&svt_cu.CtxSetCurrent, "cuCtxSetCurrent", false },
		{ (void **)&svt_cu.CtxGetCurrent, "cuCtxGetCurrent", false },
		{ (void **)&svt_cu.CtxSynchronize, "cuCtxSynchronize", false },
		{ (void **)&svt_cu.MemAlloc, "cuMemAlloc_v2", false },
		{ (void **)&svt_cu.MemFree, "cuMemFree_v2", false },
		{ (void **)&svt_cu.MemAllocHost, "cuMemAllocHost_v2", false },
		{ (void **)&svt_cu.MemFreeHost, "cuMemFreeHost", false },
		{ (void **)&svt_cu.MemAllocManaged, "cuMemAllocManaged", false },
		{ (void **)&svt_cu.MemcpyHtoD, "cuMemcpyHtoD_v2", false },
		{ (void **)&svt_cu.MemcpyDtoH, "cuMemcpyDtoH_v2", false },
		{ (void **)&svt_cu.MemsetD8, "cuMemsetD8_v2", false },
		{ (void **)&svt_cu.MemGetAddressRange, "cuMemGetAddressRange_v2", false },
		/* CUDA 11.7 and later */
		{ (void **)&svt_cu.MemGetHandleForAddressRange, "cuMemGetHandleForAddressRange", true },
		{ (void **)&svt_cu.PointerGetAttribute, "cuPointerGetAttribute", false },
		{ (void **)&svt_cu.IpcGetMemHandle, "cuIpcGetMemHandle", false },
		{ (void **)&svt_cu.IpcOpenMemHandle, "cuIpcOpenMemHandle_v2", false },
		{ (void **)&svt_cu.IpcCloseMemHandle, "cuIpcCloseMemHandle", false },
		{ (void **)&svt_cu.GetErrorString, "cuGetErrorString", false },
	};
	void *h;

	if (loaded)
		return;
	fake = lib && *lib;
	if (!fake)
		lib = "libcuda.so.1";
	/* RTLD_GLOBAL: the library under test finds the same driver (by
	 * RTLD_NOLOAD for libcuda.so.1, by path for the fake) */
	h = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
	if (!h)
		unusable("cannot be loaded", dlerror());
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		*syms[i].slot = dlsym(h, syms[i].name);
		if (!*syms[i].slot && !syms[i].optional)
			unusable("lacks a symbol", syms[i].name);
	}
	lib_name = lib;
	loaded = true;
}

void svt_cuda_init(void)
{
	svt_cu_result rc;
	int dev;

	svt_cuda_load();
	rc = svt_cu.Init(0);
	if (rc)
		unusable("cuInit failed", svt_cuda_strerror(rc));
	rc = svt_cu.DeviceGet(&dev, 0);
	if (rc)
		unusable("has no device 0", svt_cuda_strerror(rc));
	SVT_CU_OK(svt_cu.DevicePrimaryCtxRetain(&primary, dev));
	SVT_CU_OK(svt_cu.CtxSetCurrent(primary));
	svt_log("CUDA driver: %s%s", lib_name, fake ? " (fake)" : "");
}

svt_cu_ctx svt_cuda_ctx(void)
{
	return primary;
}

void svt_cuda_make_current(void)
{
	SVT_CU_OK(svt_cu.CtxSetCurrent(primary));
}

static svt_cu_ptr dptr(const void *p)
{
	return (svt_cu_ptr)(uintptr_t)p;
}

void *svt_gpu_alloc(size_t len)
{
	svt_cu_ptr p = 0;

	SVT_CU_OK(svt_cu.MemAlloc(&p, len));
	SVT_CHECK(p != 0);
	return (void *)(uintptr_t)p;
}

void svt_gpu_free(void *gpu)
{
	SVT_CU_OK(svt_cu.MemFree(dptr(gpu)));
}

void svt_gpu_from_host(void *gpu, const void *host, size_t n)
{
	if (!n)
		return;
	SVT_CU_OK(svt_cu.MemcpyHtoD(dptr(gpu), host, n));
	SVT_CU_OK(svt_cu.CtxSynchronize());
}

void svt_gpu_to_host(void *host, const void *gpu, size_t n)
{
	if (!n)
		return;
	SVT_CU_OK(svt_cu.MemcpyDtoH(host, dptr(gpu), n));
}

void svt_gpu_memset(void *gpu, uint8_t v, size_t n)
{
	SVT_CU_OK(svt_cu.MemsetD8(dptr(gpu), v, n));
	SVT_CU_OK(svt_cu.CtxSynchronize());
}

void svt_gpu_fill(void *gpu, size_t len, uint32_t seed)
{
	void *h = malloc(len ? len : 1);

	SVT_CHECK_PTR(h);
	svt_fill(h, len, seed);
	svt_gpu_from_host(gpu, h, len);
	free(h);
}

void svt_gpu_check_fill_at(const char *file, int line, const void *gpu, size_t len, uint32_t seed)
{
	void *h = malloc(len ? len : 1);

	SVT_CHECK_PTR(h);
	svt_gpu_to_host(h, gpu, len);
	svt_check_fill_at(file, line, h, len, seed);
	free(h);
}

void svt_gpu_check_mem_at(const char *file, int line, const void *gpu, const void *host,
			  size_t len)
{
	void *h = malloc(len ? len : 1);

	SVT_CHECK_PTR(h);
	svt_gpu_to_host(h, gpu, len);
	svt_check_mem_at(file, line, h, host, len);
	free(h);
}

uint64_t svt_gpu_get_u64(const void *gpu)
{
	uint64_t v;

	svt_gpu_to_host(&v, gpu, sizeof(v));
	return v;
}

void svt_gpu_put_u64(void *gpu, uint64_t v)
{
	svt_gpu_from_host(gpu, &v, sizeof(v));
}

void svt_gpu_range(const void *gpu, void **base, size_t *size)
{
	svt_cu_ptr b = 0;
	size_t s = 0;

	SVT_CU_OK(svt_cu.MemGetAddressRange(&b, &s, dptr(gpu)));
	if (base)
		*base = (void *)(uintptr_t)b;
	if (size)
		*size = s;
}

int svt_gpu_dmabuf_fd(void *gpu, size_t len)
{
	svt_cu_result rc;
	int fd = -1;

	if (!svt_cu.MemGetHandleForAddressRange) {
		svt_log("this CUDA driver has no cuMemGetHandleForAddressRange (before 11.7)");
		return -1;
	}
	rc = svt_cu.MemGetHandleForAddressRange(&fd, dptr(gpu), len,
						SVT_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
	if (rc == SVT_CUDA_ERROR_NOT_SUPPORTED ||
	    (rc == SVT_CUDA_ERROR_INVALID_VALUE && !svt_cuda_is_fake())) {
		svt_log("cuMemGetHandleForAddressRange(DMA_BUF_FD): %d (%s): no dma-buf export here",
			rc, svt_cuda_strerror(rc));
		return -1;
	}
	SVT_CU_OK(rc);
	SVT_CHECK(fd >= 0);
	return fd;
}
