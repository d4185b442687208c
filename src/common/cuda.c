/* The CUDA driver, reached by dlopen; see cuda.h. */
#include "common/lock_order.h"
#include "common/cuda.h"
#include "common/util.h"

#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static struct sv_mutex cuda_lock = SV_MUTEX_INITIALIZER(SV_LOCK_CUDA);
static struct sv_cuda_driver drv;
static _Atomic(const struct sv_cuda_driver *) loaded;
static int disabled = -1; /* SOFTVERBS_CUDA=0, read once */

static bool resolve(void *h)
{
	struct {
		void **slot;
		const char *name;
	} syms[] = {
		{ (void **)&drv.PointerGetAttribute, "cuPointerGetAttribute" },
		{ (void **)&drv.PointerSetAttribute, "cuPointerSetAttribute" },
		{ (void **)&drv.MemGetAddressRange, "cuMemGetAddressRange_v2" },
		{ (void **)&drv.CtxPushCurrent, "cuCtxPushCurrent_v2" },
		{ (void **)&drv.CtxPopCurrent, "cuCtxPopCurrent_v2" },
		{ (void **)&drv.StreamCreate, "cuStreamCreate" },
		{ (void **)&drv.StreamDestroy, "cuStreamDestroy_v2" },
		{ (void **)&drv.StreamSynchronize, "cuStreamSynchronize" },
		{ (void **)&drv.MemcpyAsync, "cuMemcpyAsync" },
		{ (void **)&drv.IpcGetMemHandle, "cuIpcGetMemHandle" },
		{ (void **)&drv.IpcOpenMemHandle, "cuIpcOpenMemHandle_v2" },
		{ (void **)&drv.IpcCloseMemHandle, "cuIpcCloseMemHandle" },
	};

	drv.MemHostRegister = (sv_cu_result(*)(void *, size_t, unsigned int))dlsym(
		h, "cuMemHostRegister_v2");
	drv.MemHostUnregister = (sv_cu_result(*)(void *))dlsym(h, "cuMemHostUnregister");
	drv.DeviceGet = (sv_cu_result(*)(int *, int))dlsym(h, "cuDeviceGet");
	drv.DevicePrimaryCtxRetain =
		(sv_cu_result(*)(sv_cu_ctx *, int))dlsym(h, "cuDevicePrimaryCtxRetain");
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		*syms[i].slot = dlsym(h, syms[i].name);
		if (!*syms[i].slot) {
			sv_warn("CUDA driver without %s: GPU memory is not supported", syms[i].name);
			return false;
		}
	}
	return true;
}

/* How many objects the program has loaded so far (glibc's dlpi_adds). */
static unsigned long long last_adds = ~0ull;

static int count_adds(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	*(unsigned long long *)data = info->dlpi_adds;
	return 1;
}

const struct sv_cuda_driver *sv_cuda(void)
{
	const struct sv_cuda_driver *d = atomic_load_explicit(&loaded, memory_order_acquire);
	const char *lib;
	void *h;

	if (d)
		return d;
	sv_mutex_lock(&cuda_lock);
	if (disabled < 0) {
		const char *e = getenv("SOFTVERBS_CUDA");

		disabled = e && !strcmp(e, "0");
	}
	d = atomic_load_explicit(&loaded, memory_order_relaxed);
	if (!d && !disabled) {
		/* never loaded by us for a program that has not: a CUDA pointer
		 * exists only in a process that has the driver already */
		unsigned long long adds = 0;

		lib = getenv("SOFTVERBS_CUDA_LIB");
		/* asked again only once the program has loaded something new */
		dl_iterate_phdr(count_adds, &adds);
		if (!(lib && *lib) && adds == last_adds)
			h = NULL;
		else
			h = lib && *lib ? dlopen(lib, RTLD_NOW | RTLD_LOCAL)
					: dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
		last_adds = adds;
		if (h && resolve(h))
			atomic_store_explicit(&loaded, d = &drv, memory_order_release);
		else if (h)
			dlclose(h);
		/* else: looked up again at the next registration */
	}
	sv_mutex_unlock(&cuda_lock);
	return d;
}

int sv_cuda_device_range(const void *addr, size_t len, struct sv_cuda_range *r)
{
	const struct sv_cuda_driver *d = sv_cuda();
	sv_cu_ptr p = (sv_cu_ptr)(uintptr_t)addr, base = 0;
	/* attribute values are written as int, unsigned int, bool or a
	 * pointer: read into zeroed words wide enough for any */
	uint64_t type = 0, managed = 0, ctx = 0;
	int64_t ordinal = 0;
	size_t size = 0;

	if (!d || !addr)
		return 0;
	if (d->PointerGetAttribute(&type, SV_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) ||
	    (uint32_t)type != SV_CU_MEMORYTYPE_DEVICE)
		return 0; /* host memory, registered or not */
	if (!d->PointerGetAttribute(&managed, SV_CU_POINTER_ATTRIBUTE_IS_MANAGED, p) &&
	    (managed & 0xff))
		return 0; /* managed memory: the CPU reaches it by page faults */
	(void)d->PointerGetAttribute(&ordinal, SV_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
	if (d->PointerGetAttribute(&ctx, SV_CU_POINTER_ATTRIBUTE_CONTEXT, p) || !ctx) {
		/* VMM mappings (cuMemCreate/cuMemMap) belong to no context:
		 * they are reached through the device's primary context */
		sv_cu_ctx pc = NULL;
		int dev;

		ctx = 0;
		if (d->DeviceGet && d->DevicePrimaryCtxRetain &&
		    !d->DeviceGet(&dev, (int)(int32_t)ordinal) &&
		    !d->DevicePrimaryCtxRetain(&pc, dev))
			ctx = (uint64_t)(uintptr_t)pc;
		if (!ctx) {
			errno = EFAULT;
			return -1;
		}
	}
	/* the allocation is looked up in its own context (the caller's thread
	 * may have none current, or another) */
	if (d->CtxPushCurrent((sv_cu_ctx)(uintptr_t)ctx)) {
		errno = EFAULT;
		return -1;
	}
	if (d->MemGetAddressRange(&base, &size, p))
		size = 0;
	{
		sv_cu_ctx prev;

		(void)d->CtxPopCurrent(&prev);
	}
	if (p < base || len > size || p - base > size - len) {
		errno = EFAULT; /* the range leaves its allocation */
		return -1;
	}
	r->ctx = (sv_cu_ctx)(uintptr_t)ctx;
	r->base = base;
	r->size = size;
	r->ordinal = (int)(int32_t)ordinal;
	return 1;
}

/* One stream per context, made at first use and kept for the process. */
#define SV_CUDA_MAX_CTX 64
static struct {
	sv_cu_ctx ctx;
	sv_cu_strm strm;
} streams[SV_CUDA_MAX_CTX];

static sv_cu_strm stream_of(const struct sv_cuda_driver *d, sv_cu_ctx ctx)
{
	sv_cu_strm s = NULL;
	int i;

	sv_mutex_lock(&cuda_lock);
	for (i = 0; i < SV_CUDA_MAX_CTX && streams[i].ctx; i++)
		if (streams[i].ctx == ctx) {
			s = streams[i].strm;
			break;
		}
	if (!s && i < SV_CUDA_MAX_CTX && !d->StreamCreate(&s, SV_CU_STREAM_NON_BLOCKING)) {
		streams[i].ctx = ctx;
		streams[i].strm = s;
	}
	sv_mutex_unlock(&cuda_lock);
	return s;
}

static int copy(sv_cu_ctx ctx, void *dst, const void *src, size_t n, bool wait)
{
	const struct sv_cuda_driver *d = atomic_load_explicit(&loaded, memory_order_acquire);
	sv_cu_ctx prev;
	sv_cu_strm s;
	int rc = -1;

	if (!d)
		return -1;
	if (d->CtxPushCurrent(ctx))
		return -1;
	/* beyond SV_CUDA_MAX_CTX contexts: the context's legacy stream (NULL) */
	s = stream_of(d, ctx);
	if ((!n || !d->MemcpyAsync((sv_cu_ptr)(uintptr_t)dst, (sv_cu_ptr)(uintptr_t)src, n, s)) &&
	    (!wait || !d->StreamSynchronize(s)))
		rc = 0;
	(void)d->CtxPopCurrent(&prev);
	return rc;
}

int sv_cuda_copy(sv_cu_ctx ctx, void *dst, const void *src, size_t n)
{
	return n ? copy(ctx, dst, src, n, true) : 0;
}

int sv_cuda_copy_async(sv_cu_ctx ctx, void *dst, const void *src, size_t n)
{
	return n ? copy(ctx, dst, src, n, false) : 0;
}

int sv_cuda_wait(sv_cu_ctx ctx)
{
	return copy(ctx, NULL, NULL, 0, true);
}

bool sv_cuda_pin(sv_cu_ctx ctx, void *p, size_t n)
{
	const struct sv_cuda_driver *d = atomic_load_explicit(&loaded, memory_order_acquire);
	sv_cu_ctx prev;
	bool ok;

	if (!d || !d->MemHostRegister || !d->MemHostUnregister || d->CtxPushCurrent(ctx))
		return false;
	ok = !d->MemHostRegister(p, n, 1 /* CU_MEMHOSTREGISTER_PORTABLE */);
	(void)d->CtxPopCurrent(&prev);
	return ok;
}

void sv_cuda_unpin(sv_cu_ctx ctx, void *p)
{
	const struct sv_cuda_driver *d = atomic_load_explicit(&loaded, memory_order_acquire);
	sv_cu_ctx prev;

	if (!d || d->CtxPushCurrent(ctx))
		return;
	(void)d->MemHostUnregister(p);
	(void)d->CtxPopCurrent(&prev);
}

int sv_cuda_export(sv_cu_ctx ctx, const void *addr, sv_cu_ipc_handle *h, uint64_t *off)
{
	const struct sv_cuda_driver *d = atomic_load_explicit(&loaded, memory_order_acquire);
	sv_cu_ptr p = (sv_cu_ptr)(uintptr_t)addr, base = 0;
	size_t size = 0;
	sv_cu_ctx prev;
	int rc = -1;

	if (!d || d->CtxPushCurrent(ctx))
		return -1;
	if (!d->MemGetAddressRange(&base, &size, p) && !d->IpcGetMemHandle(h, base)) {
		*off = p - base;
		rc = 0;
	}
	(void)d->CtxPopCurrent(&prev);
	return rc;
}

bool sv_cuda_ipc_enabled(void)
{
	static _Atomic int on = -1; /* any thread may ask first: same answer */
	int v = atomic_load_explicit(&on, memory_order_relaxed);

	if (v < 0) {
		const char *e = getenv("SOFTVERBS_CUDA_IPC");

		v = !(e && !strcmp(e, "0"));
		atomic_store_explicit(&on, v, memory_order_relaxed);
	}
	return v;
}

bool sv_cuda_can_import(void)
{
	const struct sv_cuda_driver *d = sv_cuda();

	return d && d->DeviceGet && d->DevicePrimaryCtxRetain && sv_cuda_ipc_enabled();
}

/* Peer allocations opened here, by handle; never closed (see cuda.h). */
struct import {
	sv_cu_ipc_handle h;
	sv_cu_ctx ctx;
	void *addr; /* NULL: it could not be opened (not tried again) */
	size_t size;
	struct import *next;
};
static struct import *imports;

void *sv_cuda_import(const sv_cu_ipc_handle *h, int ordinal, sv_cu_ctx *ctx, size_t *size)
{
	const struct sv_cuda_driver *d = atomic_load_explicit(&loaded, memory_order_acquire);
	struct import *im;
	sv_cu_ctx c = NULL, prev;
	sv_cu_ptr p = 0;
	void *addr = NULL;
	int dev;

	if (!d || !d->DeviceGet || !d->DevicePrimaryCtxRetain)
		return NULL;
	sv_mutex_lock(&cuda_lock);
	for (im = imports; im; im = im->next)
		if (!memcmp(&im->h, h, sizeof(*h)))
			break;
	if (!im && !d->DeviceGet(&dev, ordinal) && !d->DevicePrimaryCtxRetain(&c, dev) &&
	    (im = calloc(1, sizeof(*im)))) {
		im->h = *h;
		im->ctx = c;
		if (!d->CtxPushCurrent(c)) {
			sv_cu_ptr base = 0;

			if (!d->IpcOpenMemHandle(&p, *h, SV_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) {
				if (!d->MemGetAddressRange(&base, &im->size, p) && base == p)
					im->addr = (void *)(uintptr_t)p;
				else
					(void)d->IpcCloseMemHandle(p);
			}
			(void)d->CtxPopCurrent(&prev);
		}
		im->next = imports;
		imports = im;
	}
	if (im && im->addr) {
		addr = im->addr;
		*ctx = im->ctx;
		*size = im->size;
	}
	sv_mutex_unlock(&cuda_lock);
	return addr;
}

#define SV_CUDA_REFUSED 64
static pid_t refused[SV_CUDA_REFUSED];
static unsigned int nrefused;

void sv_cuda_refuse_peer(pid_t pid)
{
	sv_mutex_lock(&cuda_lock);
	refused[nrefused++ % SV_CUDA_REFUSED] = pid; /* the oldest go first */
	sv_mutex_unlock(&cuda_lock);
}

bool sv_cuda_peer_refused(pid_t pid)
{
	bool r = false;

	sv_mutex_lock(&cuda_lock);
	for (unsigned int i = 0; i < SV_CUDA_REFUSED && !r; i++)
		r = refused[i] == pid;
	sv_mutex_unlock(&cuda_lock);
	return r;
}
