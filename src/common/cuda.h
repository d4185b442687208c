/*
 * The CUDA driver API, reached through dlopen so that softverbs builds and
 * runs with no CUDA anywhere (no build-time dependency).  Only the few
 * driver calls and constants softverbs uses are named here, with the values
 * of NVIDIA's cuda.h (a stable ABI: the _v2 entry points are the ones
 * cuda.h's macros select since CUDA 4.0).
 *
 * Which library: SOFTVERBS_CUDA_LIB names one (tests use it for a fake
 * driver that keeps its "device memory" unreadable by the CPU); otherwise
 * libcuda.so.1 only if the process has loaded it already - a program that
 * holds a CUDA pointer has - so programs without CUDA never pay for it.
 * SOFTVERBS_CUDA=0 turns GPU memory support off.
 */
#ifndef SV_CUDA_H
#define SV_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef int sv_cu_result;		 /* CUresult: 0 is CUDA_SUCCESS */
typedef unsigned long long sv_cu_ptr;	 /* CUdeviceptr */
typedef struct sv_cu_ctx_st *sv_cu_ctx;	 /* CUcontext */
typedef struct sv_cu_strm_st *sv_cu_strm; /* CUstream */
typedef struct {
	char reserved[64];
} sv_cu_ipc_handle; /* CUipcMemHandle */

enum {
	SV_CU_POINTER_ATTRIBUTE_CONTEXT = 1,
	SV_CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
	SV_CU_POINTER_ATTRIBUTE_SYNC_MEMOPS = 6,
	SV_CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
	SV_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
	SV_CU_MEMORYTYPE_HOST = 1,
	SV_CU_MEMORYTYPE_DEVICE = 2,
	SV_CU_STREAM_NON_BLOCKING = 1,
	SV_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1,
};

/* The driver entry points softverbs calls (names of libcuda.so.1's symbols in comments). */
struct sv_cuda_driver {
	sv_cu_result (*PointerGetAttribute)(void *data, int attr, sv_cu_ptr p); /* cuPointerGetAttribute */
	sv_cu_result (*PointerSetAttribute)(const void *v, int attr, sv_cu_ptr p); /* cuPointerSetAttribute */
	sv_cu_result (*MemGetAddressRange)(sv_cu_ptr *base, size_t *size, sv_cu_ptr p); /* cuMemGetAddressRange_v2 */
	sv_cu_result (*CtxPushCurrent)(sv_cu_ctx c);				 /* cuCtxPushCurrent_v2 */
	sv_cu_result (*CtxPopCurrent)(sv_cu_ctx *c);				 /* cuCtxPopCurrent_v2 */
	sv_cu_result (*StreamCreate)(sv_cu_strm *s, unsigned int flags);	 /* cuStreamCreate */
	sv_cu_result (*StreamDestroy)(sv_cu_strm s);				 /* cuStreamDestroy_v2 */
	sv_cu_result (*StreamSynchronize)(sv_cu_strm s);			 /* cuStreamSynchronize */
	sv_cu_result (*MemcpyAsync)(sv_cu_ptr dst, sv_cu_ptr src, size_t n, sv_cu_strm s); /* cuMemcpyAsync */
	sv_cu_result (*IpcGetMemHandle)(sv_cu_ipc_handle *h, sv_cu_ptr p);	 /* cuIpcGetMemHandle */
	sv_cu_result (*IpcOpenMemHandle)(sv_cu_ptr *p, sv_cu_ipc_handle h, unsigned int flags); /* cuIpcOpenMemHandle_v2 */
	sv_cu_result (*IpcCloseMemHandle)(sv_cu_ptr p);				 /* cuIpcCloseMemHandle */
	/* optional (NULL where missing): page-locking of staging buffers */
	sv_cu_result (*MemHostRegister)(void *p, size_t n, unsigned int flags); /* cuMemHostRegister_v2 */
	sv_cu_result (*MemHostUnregister)(void *p);				 /* cuMemHostUnregister */
	/* optional: opening a peer's GPU memory in the device's primary context */
	sv_cu_result (*DeviceGet)(int *dev, int ordinal);		 /* cuDeviceGet */
	sv_cu_result (*DevicePrimaryCtxRetain)(sv_cu_ctx *c, int dev);	 /* cuDevicePrimaryCtxRetain */
};

/* The driver, or NULL where CUDA is absent, not loaded by the program, or turned off. */
const struct sv_cuda_driver *sv_cuda(void);

/* What a registration learns of an address range. */
struct sv_cuda_range {
	sv_cu_ctx ctx;	 /* the context that owns it */
	sv_cu_ptr base;	 /* its allocation */
	size_t size;
	int ordinal;
};

/*
 * Is [addr, addr+len) device memory (not managed, not host)?  1: yes, *r
 * filled; 0: not CUDA device memory; -1: device memory but the range leaves
 * its allocation (errno EFAULT).
 */
int sv_cuda_device_range(const void *addr, size_t len, struct sv_cuda_range *r);

/*
 * Copy n bytes between any two addresses, either of which may be device
 * memory of ctx (unified addressing), on softverbs' own non-blocking stream
 * (never the application's: a kernel that spins on a flag that RDMA is to
 * write must not block the copy), and wait for it.  The caller's current
 * context is restored.  Returns 0, or -1 where the driver failed.
 */
int sv_cuda_copy(sv_cu_ctx ctx, void *dst, const void *src, size_t n);

/* The same, started only (sv_cuda_copy_async), and the wait for every copy
 * started in ctx (sv_cuda_wait).  0, or -1 where the driver failed. */
int sv_cuda_copy_async(sv_cu_ctx ctx, void *dst, const void *src, size_t n);
int sv_cuda_wait(sv_cu_ctx ctx);

/*
 * CUDA IPC between processes of one host.  sv_cuda_export: the handle of
 * the allocation holding [addr, addr+len) and the offset of addr in it
 * (0, or -1 where the memory cannot be shared, e.g. VMM allocations).
 * sv_cuda_import: the address in this process of the allocation a peer
 * exported, opened once in the primary context of its device and kept
 * open for the life of the process (*ctx: where to copy from it, *size:
 * its length, which bounds every access); NULL
 * where it cannot be opened (no driver, our own allocation).
 */
int sv_cuda_export(sv_cu_ctx ctx, const void *addr, sv_cu_ipc_handle *h, uint64_t *off);
void *sv_cuda_import(const sv_cu_ipc_handle *h, int ordinal, sv_cu_ctx *ctx, size_t *size);
/* Can this process open what peers export (a driver with primary contexts)? */
bool sv_cuda_can_import(void);
/* GPU-to-GPU transfers between processes not turned off (SOFTVERBS_CUDA_IPC=0)? */
bool sv_cuda_ipc_enabled(void);
/* GPU memory a process named could not be opened here (another device set,
 * CUDA_VISIBLE_DEVICES, a cgroup): from now on it is told, in our HELLO,
 * to send the bytes themselves (sv_cuda_peer_refused). */
void sv_cuda_refuse_peer(pid_t pid);
bool sv_cuda_peer_refused(pid_t pid);

/* Page-lock a staging buffer for every context (false: it stays pageable). */
bool sv_cuda_pin(sv_cu_ctx ctx, void *p, size_t n);
void sv_cuda_unpin(sv_cu_ctx ctx, void *p);

#endif
