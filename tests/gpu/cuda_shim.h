/*
 * cuda_shim.h - the CUDA driver for the GPU tests, reached by dlopen (no
 * build-time CUDA dependency: the few prototypes are declared here).
 *
 * Which driver: $SOFTVERBS_CUDA_LIB if set (the tests' fake driver,
 * libsvt_fakecuda.so; the library under test loads the same file, so both
 * see one instance), otherwise libcuda.so.1.  svt_cuda_init() must run in
 * main() before the first verbs call: softverbs uses libcuda.so.1 only if
 * the process has loaded it already.
 *
 * Skips: where libcuda.so.1 cannot be loaded, or cuInit/cuDeviceGet fail
 * (no driver, no GPU), svt_cuda_init() exits 77 (CTest: skipped).  Where
 * SOFTVERBS_CUDA_LIB names a driver that does not load or initialise, the
 * test FAILS instead: the fake must work everywhere.  SVT_CUDA_REQUIRED=1
 * turns the skip into a failure too (scripts/gpu-test.sh sets it).
 *
 * GPU pointers are handled as void * (unified addressing: the CUdeviceptr
 * is the address); the CPU must never dereference one.  Every helper that
 * returns nothing fails the test on a driver error.  Copies to the GPU and
 * memsets are followed by cuCtxSynchronize (the driver may finish them
 * asynchronously, and softverbs copies on its own non-blocking stream).
 */
#ifndef SVT_CUDA_SHIM_H
#define SVT_CUDA_SHIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef int svt_cu_result;		  /* CUresult */
typedef unsigned long long svt_cu_ptr;	  /* CUdeviceptr */
typedef struct svt_cu_ctx_st *svt_cu_ctx; /* CUcontext */
typedef struct {
	char reserved[64];
} svt_cu_ipc_handle; /* CUipcMemHandle */

enum {
	SVT_CU_POINTER_ATTRIBUTE_CONTEXT = 1,
	SVT_CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
	SVT_CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
	SVT_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
	SVT_CU_MEMORYTYPE_HOST = 1,
	SVT_CU_MEMORYTYPE_DEVICE = 2,
	SVT_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 1,
	SVT_CU_MEM_ATTACH_GLOBAL = 1,
	SVT_CUDA_ERROR_INVALID_VALUE = 1,
	SVT_CUDA_ERROR_NOT_INITIALIZED = 3,
	SVT_CUDA_ERROR_INVALID_CONTEXT = 201,
	SVT_CUDA_ERROR_NOT_FOUND = 500,
	SVT_CUDA_ERROR_NOT_SUPPORTED = 801,
};

/* The driver entry points, resolved by svt_cuda_init(). */
struct svt_cuda {
	svt_cu_result (*Init)(unsigned int flags);
	svt_cu_result (*DeviceGet)(int *dev, int ordinal);
	svt_cu_result (*DevicePrimaryCtxRetain)(svt_cu_ctx *ctx, int dev);
	svt_cu_result (*CtxSetCurrent)(svt_cu_ctx ctx);
	svt_cu_result (*CtxGetCurrent)(svt_cu_ctx *ctx);
	svt_cu_result (*CtxSynchronize)(void);
	svt_cu_result (*MemAlloc)(svt_cu_ptr *p, size_t size);
	svt_cu_result (*MemFree)(svt_cu_ptr p);
	svt_cu_result (*MemAllocHost)(void **p, size_t size);
	svt_cu_result (*MemFreeHost)(void *p);
	svt_cu_result (*MemAllocManaged)(svt_cu_ptr *p, size_t size, unsigned int flags);
	svt_cu_result (*MemcpyHtoD)(svt_cu_ptr dst, const void *src, size_t n);
	svt_cu_result (*MemcpyDtoH)(void *dst, svt_cu_ptr src, size_t n);
	svt_cu_result (*MemsetD8)(svt_cu_ptr dst, unsigned char v, size_t n);
	svt_cu_result (*MemGetAddressRange)(svt_cu_ptr *base, size_t *size, svt_cu_ptr p);
	svt_cu_result (*MemGetHandleForAddressRange)(void *handle, svt_cu_ptr p, size_t size,
						     int type, unsigned long long flags);
	svt_cu_result (*PointerGetAttribute)(void *data, int attr, svt_cu_ptr p);
	svt_cu_result (*IpcGetMemHandle)(svt_cu_ipc_handle *h, svt_cu_ptr p);
	svt_cu_result (*IpcOpenMemHandle)(svt_cu_ptr *p, svt_cu_ipc_handle h, unsigned int flags);
	svt_cu_result (*IpcCloseMemHandle)(svt_cu_ptr p);
	svt_cu_result (*GetErrorString)(svt_cu_result e, const char **s);
};

/* The resolved driver (after svt_cuda_init). */
extern struct svt_cuda svt_cu;

/* Load the driver and resolve its symbols only (no cuInit). Skips or fails as said above. */
void svt_cuda_load(void);
/*
 * Load the driver (if svt_cuda_load has not), cuInit, device 0, retain its primary context and make
 * it current on the calling thread. Skips or fails as said above.
 */
void svt_cuda_init(void);
/* Is the driver the fake (SOFTVERBS_CUDA_LIB set)? */
bool svt_cuda_is_fake(void);
/* The primary context (svt_cuda_init retained it). */
svt_cu_ctx svt_cuda_ctx(void);
/* Make the primary context current on the calling thread. */
void svt_cuda_make_current(void);
/* The driver's name for an error. */
const char *svt_cuda_strerror(svt_cu_result rc);

/* SVT_CU_OK(call): the driver call must return CUDA_SUCCESS. */
void svt_cu_fail_at(const char *file, int line, const char *expr, svt_cu_result rc)
	__attribute__((noreturn));
#define SVT_CU_OK(call)                                                        \
	do {                                                                   \
		svt_cu_result svt_cu_rc_ = (call);                             \
		if (svt_cu_rc_)                                                \
			svt_cu_fail_at(__FILE__, __LINE__, #call, svt_cu_rc_); \
	} while (0)

/* Device memory: cuMemAlloc / cuMemFree. */
void *svt_gpu_alloc(size_t len);
void svt_gpu_free(void *gpu);
/* gpu <- host, host <- gpu (n bytes). */
void svt_gpu_from_host(void *gpu, const void *host, size_t n);
void svt_gpu_to_host(void *host, const void *gpu, size_t n);
/* cuMemsetD8. */
void svt_gpu_memset(void *gpu, uint8_t v, size_t n);
/* svt_fill(gpu, len, seed) done on the GPU buffer (through a host copy). */
void svt_gpu_fill(void *gpu, size_t len, uint32_t seed);
/* SVT_CHECK_FILL on a GPU buffer (copied to the host first). */
void svt_gpu_check_fill_at(const char *file, int line, const void *gpu, size_t len, uint32_t seed);
#define SVT_GPU_CHECK_FILL(gpu, len, seed)                                      \
	svt_gpu_check_fill_at(__FILE__, __LINE__, gpu, len, seed)
/* SVT_CHECK_MEM(gpu, host, len) on a GPU buffer. */
void svt_gpu_check_mem_at(const char *file, int line, const void *gpu, const void *host,
			  size_t len);
#define SVT_GPU_CHECK_MEM(gpu, host, len)                                       \
	svt_gpu_check_mem_at(__FILE__, __LINE__, gpu, host, len)
/* The 8 bytes at a GPU address. */
uint64_t svt_gpu_get_u64(const void *gpu);
void svt_gpu_put_u64(void *gpu, uint64_t v);

/* cuMemGetAddressRange: the allocation that holds gpu. */
void svt_gpu_range(const void *gpu, void **base, size_t *size);
/*
 * cuMemGetHandleForAddressRange(DMA_BUF_FD) of [gpu, gpu+len) (page
 * aligned): the fd, or -1 where the driver does not export dma-bufs
 * (CUDA_ERROR_NOT_SUPPORTED or INVALID_VALUE from a driver without it;
 * logged). Other errors fail the test.
 */
int svt_gpu_dmabuf_fd(void *gpu, size_t len);

#endif
