/*
 * libsvt_fakecuda.so: a fake CUDA driver for the GPU tests, loaded through
 * SOFTVERBS_CUDA_LIB by softverbs and by the tests (tests/gpu/cuda_shim.c),
 * so that the GPU-memory paths run and are checked on machines with no GPU.
 * It exports the driver symbols, with the real names and signatures, that
 * softverbs (src/common/cuda.h) and the tests use; nothing else.
 *
 * Device memory is unreadable by the CPU at its device address.  Each
 * cuMemAlloc makes a memfd and maps it twice: PROT_NONE at the address
 * handed out as the CUdeviceptr (followed by a PROT_NONE guard page), and
 * read-write at a private "shadow" address that only the fake's copy
 * functions use.  A CPU load or store at a device address therefore faults;
 * a SIGSEGV handler names the fake allocation that was touched before the
 * process dies, so a place where softverbs reads GPU memory directly
 * instead of through cuMemcpyAsync fails its test loudly.
 *
 * What the fake answers, as measured on an H100 with a CUDA 13 driver
 * (tests/gpu/gpu_driver.c checks the same answers against both):
 *   - before cuInit every call returns CUDA_ERROR_NOT_INITIALIZED (3)
 *   - cuPointerGetAttribute: MEMORY_TYPE is DEVICE (2, written as 4 bytes)
 *     for [base, base+size) of an allocation or an imported IPC mapping;
 *     for any other address (plain host memory, one past the end, NULL)
 *     every attribute fails with CUDA_ERROR_INVALID_VALUE (1).  CONTEXT:
 *     the one fake context (a pointer, 8 bytes), the same one
 *     cuDevicePrimaryCtxRetain returns; IS_MANAGED 0 and DEVICE_ORDINAL 0
 *     (4 bytes each); SYNC_MEMOPS 1.  Needs no current context.
 *     cuMemAllocHost memory answers HOST (1); cuMemAllocManaged memory
 *     answers DEVICE with IS_MANAGED 1 (and is CPU-accessible), as the
 *     real driver does.
 *   - cuMemGetAddressRange_v2: the base and the size asked of cuMemAlloc
 *     (not rounded); CUDA_ERROR_NOT_FOUND (500) outside any allocation;
 *     CUDA_ERROR_INVALID_CONTEXT (201) without a current context (the
 *     real driver wants one here, unlike cuPointerGetAttribute).
 *   - allocating, copying, memset, streams, cuCtxSynchronize and IPC want
 *     a current context (201 otherwise); cuCtxPushCurrent_v2/PopCurrent_v2
 *     keep a per-thread stack (pop of an empty one: 201), cuCtxSetCurrent
 *     replaces its top, cuCtxGetCurrent reads it (NULL in a new thread).
 *   - cuMemcpyAsync copies at once (the stream is checked: NULL or one of
 *     ours); any side inside an allocation is translated to its shadow,
 *     the other is taken as host memory; a device side that runs past its
 *     allocation is CUDA_ERROR_INVALID_VALUE.  Streams are checked, never
 *     asynchronous.
 *   - cuMemGetHandleForAddressRange(DMA_BUF_FD): start and size must be
 *     page aligned and inside one allocation (page-rounded); the fd it
 *     returns is a new memfd description of the WHOLE allocation (a real
 *     dma-buf covers just the range and says its size in fdinfo; a memfd
 *     has no "size:" line there).  The fd is the caller's to close.
 *   - IPC: cuIpcGetMemHandle takes any address inside an allocation of
 *     this process (not an imported one) and encodes (pid, memfd number,
 *     allocation id, size); cuIpcOpenMemHandle_v2 in another process of
 *     the same uid opens /proc/<pid>/fd/<n> and maps it the same two ways,
 *     returning the BASE of the allocation; in the same process it fails
 *     with CUDA_ERROR_INVALID_CONTEXT (201) like the real one; opening a
 *     handle again returns the same address with a reference count, and
 *     cuIpcCloseMemHandle drops one (closing more often: 1).  The exporter
 *     must still hold the allocation when the handle is opened.
 *   - cuMemFree_v2 of an interior address, twice, or of an imported one: 1;
 *     of 0: success.
 * SVT_FAKECUDA_TRACE=1 logs every call on stderr; SVT_FAKECUDA_NO_IPC_OPEN=1
 * makes every cuIpcOpenMemHandle_v2 fail (a peer whose GPU is not visible).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define FAKE_API __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct {
	char reserved[64];
} CUipcMemHandle;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_MAP_FAILED = 205,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_NOT_SUPPORTED = 801,
	CUDA_ERROR_UNKNOWN = 999,
};

enum {
	ATTR_CONTEXT = 1,
	ATTR_MEMORY_TYPE = 2,
	ATTR_SYNC_MEMOPS = 6,
	ATTR_IS_MANAGED = 8,
	ATTR_DEVICE_ORDINAL = 9,
	MEMTYPE_HOST = 1,
	MEMTYPE_DEVICE = 2,
	RANGE_HANDLE_DMA_BUF_FD = 1,
};

#define PAGE 4096u
#define GUARD PAGE
#define CTX_MAGIC 0x43545846u	 /* "FXTC" */
#define STREAM_MAGIC 0x4d525453u /* "STRM" */
#define IPC_MAGIC 0x43465653u	 /* "SVFC" */
#define MAX_CTX_DEPTH 64
#define MAX_ZONES 4096

struct CUctx_st {
	uint32_t magic;
};
struct CUstream_st {
	uint32_t magic;
	unsigned int flags;
	struct CUstream_st *next;
};

enum alloc_kind { K_DEVICE, K_IMPORTED, K_HOST, K_MANAGED };

struct alloc {
	struct alloc *next;
	enum alloc_kind kind;
	uintptr_t dev;	  /* the address handed out */
	size_t size;	  /* as asked */
	size_t map_len;	  /* page-rounded size (the memfd's size) */
	unsigned char *shadow; /* read-write view (device/imported); == dev otherwise */
	int fd;		  /* the memfd (device allocations), else -1 */
	uint64_t id;	  /* device: ours; imported: the exporter's */
	pid_t peer;	  /* imported: the exporter */
	int refs;	  /* imported: opens not yet closed */
	int zone;	  /* slot in zones[], -1 if none */
};

/* What cuIpcGetMemHandle puts in the 64 bytes. */
struct ipc_handle {
	uint32_t magic;
	int32_t pid;
	int32_t fd;
	uint32_t pad;
	uint64_t id;
	uint64_t size;
	uint64_t map_len;
};
_Static_assert(sizeof(struct ipc_handle) <= sizeof(CUipcMemHandle), "IPC handle too big");

static struct CUctx_st the_ctx = { CTX_MAGIC };
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct alloc *allocs;	 /* under lock */
static struct CUstream_st *streams; /* under lock */
static uint64_t next_id = 1;	 /* under lock */
static atomic_bool initialized;
static bool tracing;
static __thread CUcontext ctx_stack[MAX_CTX_DEPTH];
static __thread int ctx_depth;

/* ------------------------------------------------------------------------- */
/* Tracing and the fault handler                                              */
/* ------------------------------------------------------------------------- */

static void __attribute__((format(printf, 1, 2))) trace(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	n = snprintf(line, sizeof(line), "fakecuda[%d]: ", (int)getpid());
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	fputs(line, stderr);
}
#define TRACE(...)                                                             \
	do {                                                                   \
		if (tracing)                                                   \
			trace(__VA_ARGS__);                                    \
	} while (0)

/* The device ranges (and their guard pages), readable from a signal handler. */
static struct {
	_Atomic uintptr_t lo, hi, size;
} zones[MAX_ZONES];
static struct sigaction old_segv, old_bus;

static int zone_add(uintptr_t lo, uintptr_t hi, size_t size)
{
	for (int i = 0; i < MAX_ZONES; i++)
		if (!atomic_load(&zones[i].lo)) {
			atomic_store(&zones[i].hi, hi);
			atomic_store(&zones[i].size, size);
			atomic_store(&zones[i].lo, lo);
			return i;
		}
	return -1;
}

static void zone_del(int i)
{
	if (i >= 0)
		atomic_store(&zones[i].lo, 0);
}

static size_t fmt_hex(char *p, uintptr_t v)
{
	char tmp[2 + 2 * sizeof(v)];
	size_t n = 0, k = 0;

	do {
		tmp[n++] = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v);
	p[k++] = '0';
	p[k++] = 'x';
	while (n)
		p[k++] = tmp[--n];
	return k;
}

static void say(const char *s)
{
	ssize_t r = write(2, s, strlen(s));

	(void)r;
}

static void fault_handler(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr;
	struct sigaction *old = sig == SIGBUS ? &old_bus : &old_segv;

	for (int i = 0; i < MAX_ZONES; i++) {
		uintptr_t lo = atomic_load(&zones[i].lo), hi = atomic_load(&zones[i].hi);

		if (!lo || a < lo || a >= hi)
			continue;
		char buf[256];
		size_t k = 0;
		const char *m1 = "\nfakecuda: the CPU touched fake GPU memory at ";
		const char *m2 = " (allocation ";
		const char *m3 = ", size ";
		const char *m4 = "): GPU memory must be reached through cuMemcpyAsync\n";

		memcpy(buf + k, m1, strlen(m1));
		k += strlen(m1);
		k += fmt_hex(buf + k, a);
		memcpy(buf + k, m2, strlen(m2));
		k += strlen(m2);
		k += fmt_hex(buf + k, lo);
		memcpy(buf + k, m3, strlen(m3));
		k += strlen(m3);
		k += fmt_hex(buf + k, atomic_load(&zones[i].size));
		buf[k] = 0;
		say(buf);
		say(m4);
		break;
	}
	/* hand the fault on: the previous handler, or the default action */
	if (old->sa_flags & SA_SIGINFO) {
		old->sa_sigaction(sig, si, uc);
		return;
	}
	if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
		old->sa_handler(sig);
		return;
	}
	signal(sig, SIG_DFL); /* the faulting access runs again and kills us */
}

static void install_fault_handler(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = fault_handler;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, &old_segv);
	sigaction(SIGBUS, &sa, &old_bus);
}

/* ------------------------------------------------------------------------- */
/* Allocations                                                                */
/* ------------------------------------------------------------------------- */

static size_t page_round(size_t n)
{
	return (n + PAGE - 1) & ~(size_t)(PAGE - 1);
}

/* The allocation that holds p in [dev, dev+size), or NULL. Under lock. */
static struct alloc *find(uintptr_t p)
{
	for (struct alloc *a = allocs; a; a = a->next)
		if (p >= a->dev && p - a->dev < a->size)
			return a;
	return NULL;
}

/* The device-like allocation (device or imported) whose reserved area
 * [dev, dev+map_len+GUARD) holds p. Under lock. */
static struct alloc *find_reserved(uintptr_t p)
{
	for (struct alloc *a = allocs; a; a = a->next)
		if ((a->kind == K_DEVICE || a->kind == K_IMPORTED) && p >= a->dev &&
		    p - a->dev < a->map_len + GUARD)
			return a;
	return NULL;
}

/*
 * Map the memfd fd (map_len bytes) PROT_NONE at a fresh address with a
 * guard page behind it, and read-write somewhere else. 0 or -1.
 */
static int map_twice(int fd, size_t map_len, uintptr_t *dev, unsigned char **shadow)
{
	void *r = mmap(NULL, map_len + GUARD, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		       -1, 0);

	if (r == MAP_FAILED)
		return -1;
	if (mmap(r, map_len, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
		munmap(r, map_len + GUARD);
		return -1;
	}
	void *s = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	if (s == MAP_FAILED) {
		munmap(r, map_len + GUARD);
		return -1;
	}
	*dev = (uintptr_t)r;
	*shadow = s;
	return 0;
}

static void unmap_twice(struct alloc *a)
{
	munmap((void *)a->dev, a->map_len + GUARD);
	munmap(a->shadow, a->map_len);
}

static void unlink_alloc(struct alloc *a)
{
	for (struct alloc **pp = &allocs; *pp; pp = &(*pp)->next)
		if (*pp == a) {
			*pp = a->next;
			return;
		}
}

static bool have_ctx(void)
{
	return ctx_depth > 0 && ctx_stack[ctx_depth - 1];
}

#define NEED_INIT()                                                            \
	do {                                                                   \
		if (!atomic_load(&initialized))                                \
			return CUDA_ERROR_NOT_INITIALIZED;                     \
	} while (0)
#define NEED_CTX()                                                             \
	do {                                                                   \
		NEED_INIT();                                                   \
		if (!have_ctx())                                               \
			return CUDA_ERROR_INVALID_CONTEXT;                     \
	} while (0)

/*
 * Where the fake may touch [p, p+n): the shadow of a device range, or p
 * itself for host memory. NULL with *rc set where a device range leaves
 * its allocation.
 */
static void *translate(uintptr_t p, size_t n, CUresult *rc)
{
	void *where = (void *)p;

	pthread_mutex_lock(&lock);
	struct alloc *a = find_reserved(p);

	if (a) {
		size_t off = p - a->dev;

		if (off >= a->size || n > a->size - off) {
			*rc = CUDA_ERROR_INVALID_VALUE;
			where = NULL;
		} else {
			where = a->shadow + off;
		}
	}
	pthread_mutex_unlock(&lock);
	return where;
}

/* ------------------------------------------------------------------------- */
/* Initialisation, devices, contexts                                          */
/* ------------------------------------------------------------------------- */

FAKE_API CUresult cuInit(unsigned int flags)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_once(&once, install_fault_handler);
	const char *t = getenv("SVT_FAKECUDA_TRACE");

	tracing = t && *t && strcmp(t, "0");
	atomic_store(&initialized, true);
	TRACE("cuInit\n");
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
	NEED_INIT();
	if (!dev)
		return CUDA_ERROR_INVALID_VALUE;
	if (ordinal != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	*dev = 0;
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	NEED_INIT();
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	*pctx = &the_ctx;
	return CUDA_SUCCESS;
}

static bool ctx_ok(CUcontext c)
{
	return c == &the_ctx && c->magic == CTX_MAGIC;
}

FAKE_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
	NEED_INIT();
	if (ctx && !ctx_ok(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!ctx) {
		if (ctx_depth)
			ctx_depth--;
		return CUDA_SUCCESS;
	}
	if (!ctx_depth)
		ctx_depth = 1;
	ctx_stack[ctx_depth - 1] = ctx;
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	NEED_INIT();
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
	NEED_INIT();
	if (!ctx_ok(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_depth == MAX_CTX_DEPTH)
		return CUDA_ERROR_UNKNOWN;
	ctx_stack[ctx_depth++] = ctx;
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
	NEED_INIT();
	if (!ctx_depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	ctx_depth--;
	if (pctx)
		*pctx = ctx_stack[ctx_depth];
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxSynchronize(void)
{
	NEED_CTX();
	return CUDA_SUCCESS; /* everything is synchronous */
}

/* ------------------------------------------------------------------------- */
/* Memory                                                                     */
/* ------------------------------------------------------------------------- */

FAKE_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
	struct alloc *a;
	char name[64];
	uint64_t id;

	NEED_CTX();
	if (!dptr || !size)
		return CUDA_ERROR_INVALID_VALUE;
	a = calloc(1, sizeof(*a));
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&lock);
	id = next_id++;
	pthread_mutex_unlock(&lock);
	snprintf(name, sizeof(name), "svt-fakecuda-%d-%llu", (int)getpid(), (unsigned long long)id);
	a->kind = K_DEVICE;
	a->size = size;
	a->map_len = page_round(size);
	a->id = id;
	a->fd = memfd_create(name, MFD_CLOEXEC);
	if (a->fd < 0 || ftruncate(a->fd, (off_t)a->map_len) ||
	    map_twice(a->fd, a->map_len, &a->dev, &a->shadow)) {
		if (a->fd >= 0)
			close(a->fd);
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&lock);
	a->zone = zone_add(a->dev, a->dev + a->map_len + GUARD, a->size);
	a->next = allocs;
	allocs = a;
	pthread_mutex_unlock(&lock);
	*dptr = a->dev;
	TRACE("cuMemAlloc %zu -> %#lx (fd %d)\n", size, (unsigned long)a->dev, a->fd);
	return CUDA_SUCCESS;
}

/* Host-visible allocations: pinned host memory and managed memory. */
static CUresult alloc_plain(uintptr_t *p, size_t size, enum alloc_kind kind)
{
	struct alloc *a;

	NEED_CTX();
	if (!p || !size)
		return CUDA_ERROR_INVALID_VALUE;
	a = calloc(1, sizeof(*a));
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a->kind = kind;
	a->size = size;
	a->map_len = page_round(size);
	a->fd = -1;
	a->zone = -1;
	void *m = mmap(NULL, a->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED) {
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->dev = (uintptr_t)m;
	a->shadow = m;
	pthread_mutex_lock(&lock);
	a->next = allocs;
	allocs = a;
	pthread_mutex_unlock(&lock);
	*p = a->dev;
	TRACE("alloc %s %zu -> %#lx\n", kind == K_HOST ? "host" : "managed", size,
	      (unsigned long)a->dev);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemAllocHost_v2(void **pp, size_t size)
{
	uintptr_t p = 0;
	CUresult rc;

	if (!pp)
		return CUDA_ERROR_INVALID_VALUE;
	rc = alloc_plain(&p, size, K_HOST);
	if (!rc)
		*pp = (void *)p;
	return rc;
}

FAKE_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags)
{
	uintptr_t p = 0;
	CUresult rc;

	if (!dptr || (flags != 1 && flags != 2)) /* CU_MEM_ATTACH_GLOBAL / _HOST */
		return CUDA_ERROR_INVALID_VALUE;
	rc = alloc_plain(&p, size, K_MANAGED);
	if (!rc)
		*dptr = p;
	return rc;
}

static CUresult free_kind(uintptr_t p, enum alloc_kind kind)
{
	struct alloc *a;

	NEED_CTX();
	if (!p)
		return CUDA_SUCCESS;
	pthread_mutex_lock(&lock);
	a = find(p);
	if (!a || a->dev != p || a->kind != kind) {
		pthread_mutex_unlock(&lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	unlink_alloc(a);
	zone_del(a->zone);
	pthread_mutex_unlock(&lock);
	TRACE("free %#lx\n", (unsigned long)p);
	if (kind == K_DEVICE) {
		unmap_twice(a);
		close(a->fd);
	} else {
		munmap((void *)a->dev, a->map_len);
	}
	free(a);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemFree_v2(CUdeviceptr p)
{
	uintptr_t q = (uintptr_t)p;
	CUresult rc;

	NEED_CTX();
	pthread_mutex_lock(&lock);
	struct alloc *a = q ? find(q) : NULL;
	enum alloc_kind k = a ? a->kind : K_DEVICE;

	pthread_mutex_unlock(&lock);
	if (k != K_DEVICE && k != K_MANAGED)
		return CUDA_ERROR_INVALID_VALUE;
	rc = free_kind(q, k);
	return rc;
}

FAKE_API CUresult cuMemFreeHost(void *p)
{
	return free_kind((uintptr_t)p, K_HOST);
}

FAKE_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
	struct alloc *a;

	NEED_CTX();
	pthread_mutex_lock(&lock);
	a = find((uintptr_t)p);
	if (a && a->kind != K_HOST) {
		if (base)
			*base = a->dev;
		if (size)
			*size = a->size;
	}
	pthread_mutex_unlock(&lock);
	TRACE("cuMemGetAddressRange %#llx -> %s\n", p, a && a->kind != K_HOST ? "found" : "not found");
	return a && a->kind != K_HOST ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

FAKE_API CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p)
{
	struct alloc *a;
	enum alloc_kind kind = K_DEVICE;

	NEED_INIT();
	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	a = find((uintptr_t)p);
	if (a)
		kind = a->kind;
	pthread_mutex_unlock(&lock);
	TRACE("cuPointerGetAttribute(%d, %#llx): %s\n", attr, p, a ? "ours" : "unknown");
	if (!a)
		return CUDA_ERROR_INVALID_VALUE; /* plain host memory */
	switch (attr) {
	case ATTR_CONTEXT:
		*(CUcontext *)data = &the_ctx;
		return CUDA_SUCCESS;
	case ATTR_MEMORY_TYPE:
		*(unsigned int *)data = kind == K_HOST ? MEMTYPE_HOST : MEMTYPE_DEVICE;
		return CUDA_SUCCESS;
	case ATTR_SYNC_MEMOPS:
		*(unsigned int *)data = 1;
		return CUDA_SUCCESS;
	case ATTR_IS_MANAGED:
		*(unsigned int *)data = kind == K_MANAGED;
		return CUDA_SUCCESS;
	case ATTR_DEVICE_ORDINAL:
		*(int *)data = 0;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

FAKE_API CUresult cuPointerSetAttribute(const void *value, int attr, CUdeviceptr p)
{
	struct alloc *a;

	NEED_INIT();
	if (!value || attr != ATTR_SYNC_MEMOPS)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	a = find((uintptr_t)p);
	pthread_mutex_unlock(&lock);
	TRACE("cuPointerSetAttribute(%d, %#llx)\n", attr, p);
	return a && a->kind != K_HOST ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------------- */
/* Streams and copies                                                         */
/* ------------------------------------------------------------------------- */

FAKE_API CUresult cuStreamCreate(CUstream *ps, unsigned int flags)
{
	struct CUstream_st *s;

	NEED_CTX();
	if (!ps || flags > 1)
		return CUDA_ERROR_INVALID_VALUE;
	s = calloc(1, sizeof(*s));
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	s->magic = STREAM_MAGIC;
	s->flags = flags;
	pthread_mutex_lock(&lock);
	s->next = streams;
	streams = s;
	pthread_mutex_unlock(&lock);
	*ps = s;
	TRACE("cuStreamCreate -> %p\n", (void *)s);
	return CUDA_SUCCESS;
}

/* Is s NULL (the legacy default stream) or a live stream of ours? */
static bool stream_ok(CUstream s)
{
	bool ok = !s;

	pthread_mutex_lock(&lock);
	for (struct CUstream_st *t = streams; t && !ok; t = t->next)
		ok = t == s && t->magic == STREAM_MAGIC;
	pthread_mutex_unlock(&lock);
	return ok;
}

FAKE_API CUresult cuStreamDestroy_v2(CUstream s)
{
	bool found = false;

	NEED_INIT();
	if (!s)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&lock);
	for (struct CUstream_st **pp = &streams; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			found = true;
			break;
		}
	pthread_mutex_unlock(&lock);
	if (!found)
		return CUDA_ERROR_INVALID_HANDLE;
	s->magic = 0;
	free(s);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuStreamSynchronize(CUstream s)
{
	NEED_INIT();
	return stream_ok(s) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult copy(uintptr_t dst, uintptr_t src, size_t n)
{
	CUresult rc = CUDA_SUCCESS;
	void *d, *s;

	if (!n)
		return CUDA_SUCCESS;
	d = translate(dst, n, &rc);
	s = translate(src, n, &rc);
	if (!d || !s)
		return rc;
	memmove(d, s, n);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	CUresult rc;

	NEED_CTX();
	if (!stream_ok(s))
		return CUDA_ERROR_INVALID_HANDLE;
	rc = copy((uintptr_t)dst, (uintptr_t)src, n);
	TRACE("cuMemcpyAsync %#llx <- %#llx, %zu: %d\n", dst, src, n, rc);
	return rc;
}

FAKE_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	NEED_CTX();
	TRACE("cuMemcpyHtoD %#llx, %zu\n", dst, n);
	return copy((uintptr_t)dst, (uintptr_t)src, n);
}

FAKE_API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	NEED_CTX();
	TRACE("cuMemcpyDtoH %#llx, %zu\n", src, n);
	return copy((uintptr_t)dst, (uintptr_t)src, n);
}

FAKE_API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n)
{
	CUresult rc = CUDA_SUCCESS;
	void *d;

	NEED_CTX();
	if (!n)
		return CUDA_SUCCESS;
	d = translate((uintptr_t)dst, n, &rc);
	if (!d)
		return rc;
	memset(d, v, n);
	return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------- */
/* dma-buf and IPC                                                            */
/* ------------------------------------------------------------------------- */

FAKE_API CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr p, size_t size, int type,
						unsigned long long flags)
{
	struct alloc *a;
	int fd = -1;

	NEED_CTX();
	if (!handle || type != RANGE_HANDLE_DMA_BUF_FD || flags > 1 || !size || (p % PAGE) ||
	    (size % PAGE))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	a = find((uintptr_t)p);
	if (a && a->kind == K_DEVICE && size <= a->map_len - ((uintptr_t)p - a->dev))
		fd = fcntl(a->fd, F_DUPFD_CLOEXEC, 0);
	pthread_mutex_unlock(&lock);
	TRACE("cuMemGetHandleForAddressRange %#llx+%zu -> fd %d\n", p, size, fd);
	if (fd < 0)
		return CUDA_ERROR_INVALID_VALUE;
	*(int *)handle = fd;
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p)
{
	struct ipc_handle ih;
	struct alloc *a;

	NEED_CTX();
	if (!h)
		return CUDA_ERROR_INVALID_VALUE;
	memset(&ih, 0, sizeof(ih));
	pthread_mutex_lock(&lock);
	a = find((uintptr_t)p);
	if (a && a->kind == K_DEVICE) {
		ih.magic = IPC_MAGIC;
		ih.pid = (int32_t)getpid();
		ih.fd = a->fd;
		ih.id = a->id;
		ih.size = a->size;
		ih.map_len = a->map_len;
	}
	pthread_mutex_unlock(&lock);
	TRACE("cuIpcGetMemHandle %#llx -> %s\n", p, ih.magic ? "ok" : "not ours");
	if (!ih.magic)
		return CUDA_ERROR_INVALID_VALUE;
	memset(h, 0, sizeof(*h));
	memcpy(h->reserved, &ih, sizeof(ih));
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle h, unsigned int flags)
{
	struct ipc_handle ih;
	struct alloc *a;
	char path[64], want[64], link[128];
	struct stat st;
	ssize_t n;
	int fd;

	NEED_CTX();
	if (getenv("SVT_FAKECUDA_NO_IPC_OPEN"))
		return CUDA_ERROR_INVALID_VALUE; /* as where the exporter's device is not visible */
	memcpy(&ih, h.reserved, sizeof(ih));
	if (!pdptr || flags > 1 || ih.magic != IPC_MAGIC || !ih.size ||
	    ih.map_len != page_round(ih.size))
		return CUDA_ERROR_INVALID_VALUE;
	if (ih.pid == (int32_t)getpid())
		return CUDA_ERROR_INVALID_CONTEXT; /* as the real driver */

	pthread_mutex_lock(&lock);
	for (a = allocs; a; a = a->next)
		if (a->kind == K_IMPORTED && a->peer == ih.pid && a->id == ih.id) {
			a->refs++;
			*pdptr = a->dev;
			pthread_mutex_unlock(&lock);
			TRACE("cuIpcOpenMemHandle pid %d id %llu again -> %#lx\n", ih.pid,
			      (unsigned long long)ih.id, (unsigned long)a->dev);
			return CUDA_SUCCESS;
		}
	pthread_mutex_unlock(&lock);

	/* the exporter's memfd, checked by its name */
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", ih.pid, ih.fd);
	snprintf(want, sizeof(want), "/memfd:svt-fakecuda-%d-%llu ", ih.pid,
		 (unsigned long long)ih.id);
	n = readlink(path, link, sizeof(link) - 1);
	if (n <= 0) {
		TRACE("cuIpcOpenMemHandle: %s: %s\n", path, strerror(errno));
		return CUDA_ERROR_INVALID_VALUE;
	}
	link[n] = 0;
	if (strncmp(link, want, strlen(want))) {
		TRACE("cuIpcOpenMemHandle: %s is %s, not %s\n", path, link, want);
		return CUDA_ERROR_INVALID_VALUE; /* freed: the fd now names something else */
	}
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		TRACE("cuIpcOpenMemHandle: open %s: %s\n", path, strerror(errno));
		return CUDA_ERROR_MAP_FAILED;
	}
	if (fstat(fd, &st) || (uint64_t)st.st_size < ih.map_len) {
		close(fd);
		return CUDA_ERROR_INVALID_VALUE;
	}
	a = calloc(1, sizeof(*a));
	if (!a) {
		close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->kind = K_IMPORTED;
	a->size = ih.size;
	a->map_len = ih.map_len;
	a->fd = -1;
	a->id = ih.id;
	a->peer = ih.pid;
	a->refs = 1;
	if (map_twice(fd, a->map_len, &a->dev, &a->shadow)) {
		close(fd);
		free(a);
		return CUDA_ERROR_MAP_FAILED;
	}
	close(fd);
	pthread_mutex_lock(&lock);
	a->zone = zone_add(a->dev, a->dev + a->map_len + GUARD, a->size);
	a->next = allocs;
	allocs = a;
	pthread_mutex_unlock(&lock);
	*pdptr = a->dev;
	TRACE("cuIpcOpenMemHandle pid %d id %llu -> %#lx\n", ih.pid, (unsigned long long)ih.id,
	      (unsigned long)a->dev);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuIpcCloseMemHandle(CUdeviceptr p)
{
	struct alloc *a;
	bool last = false;

	NEED_CTX();
	pthread_mutex_lock(&lock);
	a = find((uintptr_t)p);
	if (!a || a->kind != K_IMPORTED || a->dev != (uintptr_t)p) {
		pthread_mutex_unlock(&lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (--a->refs == 0) {
		unlink_alloc(a);
		zone_del(a->zone);
		last = true;
	}
	pthread_mutex_unlock(&lock);
	TRACE("cuIpcCloseMemHandle %#llx%s\n", p, last ? " (unmapped)" : "");
	if (last) {
		unmap_twice(a);
		free(a);
	}
	return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------- */
/* Errors                                                                     */
/* ------------------------------------------------------------------------- */

FAKE_API CUresult cuGetErrorString(CUresult e, const char **s)
{
	static const struct {
		CUresult e;
		const char *s;
	} names[] = {
		{ CUDA_SUCCESS, "no error" },
		{ CUDA_ERROR_INVALID_VALUE, "invalid argument" },
		{ CUDA_ERROR_OUT_OF_MEMORY, "out of memory" },
		{ CUDA_ERROR_NOT_INITIALIZED, "initialization error" },
		{ CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal" },
		{ CUDA_ERROR_INVALID_CONTEXT, "invalid device context" },
		{ CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed" },
		{ CUDA_ERROR_INVALID_HANDLE, "invalid resource handle" },
		{ CUDA_ERROR_NOT_FOUND, "named symbol not found" },
		{ CUDA_ERROR_NOT_SUPPORTED, "operation not supported" },
		{ CUDA_ERROR_UNKNOWN, "unknown error" },
	};

	if (!s)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].e == e) {
			*s = names[i].s;
			return CUDA_SUCCESS;
		}
	*s = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}
