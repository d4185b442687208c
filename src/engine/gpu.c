/* GPU memory in the data path; see gpu.h. */
#include "common/lock_order.h"
#include "engine/gpu.h"
#include "engine/dma.h"

#include <arpa/inet.h>
#include <endian.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

uint8_t *sv_gpu_stage_find(struct sv_gpu_stage *st, uintptr_t owner, uint64_t tag, uint64_t off,
			   uint64_t len)
{
	if (!st || st->owner != owner || st->tag != tag || off < st->off ||
	    off - st->off > st->len || len > st->len - (off - st->off))
		return NULL;
	return st->buf + (off - st->off);
}

uint8_t *sv_gpu_stage_claim(struct sv_gpu_stage **pst, sv_cu_ctx gpu, uintptr_t owner,
			    uint64_t tag, uint64_t off, uint64_t total)
{
	struct sv_gpu_stage *st = *pst;

	if (!st) {
		st = calloc(1, sizeof(*st));
		if (!st || !(st->buf = aligned_alloc(4096, SV_GPU_STAGE))) {
			free(st);
			return NULL;
		}
		/* page-locked, the driver's copies run at the bus's speed */
		if (sv_cuda_pin(gpu, st->buf, SV_GPU_STAGE))
			st->pinned = gpu;
		*pst = st;
	}
	st->owner = owner;
	st->tag = tag;
	st->off = off;
	st->len = SV_MIN((uint64_t)SV_GPU_STAGE, total - off);
	return st->buf;
}

void sv_gpu_stage_forget(struct sv_gpu_stage *st)
{
	if (st)
		st->owner = 0;
}

void sv_gpu_stage_free(struct sv_gpu_stage **pst)
{
	struct sv_gpu_stage *st = *pst;

	if (!st)
		return;
	if (st->pinned)
		sv_cuda_unpin(st->pinned, st->buf);
	free(st->buf);
	free(st);
	*pst = NULL;
}

static void sink_start(struct sv_gpu_sink *s)
{
	if (!s->len)
		return;
	if (sv_cuda_copy_async(s->gpu, s->dst, s->src, s->len))
		s->failed = true;
	s->busy = s->gpu;
	s->len = 0;
}

void sv_gpu_sink_start(struct sv_gpu_sink *s)
{
	if (s)
		sink_start(s);
}

void sv_gpu_sink_drain(struct sv_gpu_sink *s)
{
	if (!s)
		return;
	sink_start(s);
	if (s->busy && sv_cuda_wait(s->busy))
		s->failed = true;
	s->busy = NULL;
	s->used = 0;
}

void sv_gpu_sink_abort(struct sv_gpu_sink *s)
{
	if (!s)
		return;
	s->len = 0;
	if (s->busy)
		(void)sv_cuda_wait(s->busy);
	s->busy = NULL;
	s->used = 0;
	s->failed = false;
}

enum sv_mem_err sv_gpu_sink_fence(struct sv_gpu_sink *s)
{
	bool failed;

	if (!s)
		return SV_MEM_OK;
	sv_gpu_sink_drain(s);
	failed = s->failed;
	s->failed = false;
	if (failed)
		sv_warn_limited("a copy into GPU memory failed");
	return failed ? SV_MEM_FAULT : SV_MEM_OK;
}

static struct sv_gpu_sink *sink_get(struct sv_gpu_sink **ps, sv_cu_ctx gpu)
{
	struct sv_gpu_sink *s = *ps;

	if (s)
		return s;
	s = calloc(1, sizeof(*s));
	if (s && !(s->ring = aligned_alloc(4096, SV_GPU_SINK))) {
		free(s);
		return NULL;
	}
	if (s && sv_cuda_pin(gpu, s->ring, SV_GPU_SINK))
		s->pinned = gpu;
	*ps = s;
	return s;
}

/*
 * The run [src, src+len) to dst joins the one gathered where it continues
 * it; large runs start at once.  The caller made sure that no copy of
 * another context is in flight.
 */
static void append(struct sv_gpu_sink *s, sv_cu_ctx ctx, uint8_t *dst, const uint8_t *src,
		   size_t len, size_t start_at)
{
	if (s->len && (ctx != s->gpu || s->dst + s->len != dst || s->src + s->len != src))
		sink_start(s);
	if (!s->len) {
		s->gpu = ctx;
		s->dst = dst;
		s->src = src;
	}
	s->len += len;
	if (s->len >= start_at)
		sink_start(s);
}

enum sv_mem_err sv_gpu_sink_put(struct sv_gpu_sink **ps, sv_cu_ctx gpu, uint8_t *dst,
				const void *src, size_t len)
{
	struct sv_gpu_sink *s = len <= SV_GPU_SINK ? sink_get(ps, gpu) : *ps;

	if (!s || len > SV_GPU_SINK) {
		/* no ring, or too big for one: a copy of its own, in order */
		if (sv_gpu_sink_fence(s))
			return SV_MEM_FAULT;
		return sv_dma_place(gpu, dst, src, len);
	}
	if (s->used + len > SV_GPU_SINK || (s->busy && s->busy != gpu) ||
	    (s->len && s->gpu != gpu)) {
		if (sv_gpu_sink_fence(s))
			return SV_MEM_FAULT;
	}
	memcpy(s->ring + s->used, src, len);
	s->used += len;
	append(s, gpu, dst, s->ring + s->used - len, len, SV_GPU_SINK / 16);
	return SV_MEM_OK;
}

enum sv_mem_err sv_gpu_sink_copy(struct sv_gpu_sink **ps, sv_cu_ctx ctx, uint8_t *dst,
				 const uint8_t *src, size_t len)
{
	struct sv_gpu_sink *s = sink_get(ps, ctx);

	if (!s)
		return sv_cuda_copy(ctx, dst, src, len) ? SV_MEM_FAULT : SV_MEM_OK;
	if ((s->busy && s->busy != ctx) || (s->len && s->gpu != ctx)) {
		if (sv_gpu_sink_fence(s))
			return SV_MEM_FAULT;
	}
	/* GPU to GPU needs no ring; a run starts at message end or fence */
	append(s, ctx, dst, src, len, (size_t)64 << 20);
	return SV_MEM_OK;
}

void sv_gpu_sink_free(struct sv_gpu_sink **ps)
{
	struct sv_gpu_sink *s = *ps;

	if (!s)
		return;
	sv_gpu_sink_abort(s);
	if (s->pinned)
		sv_cuda_unpin(s->pinned, s->ring);
	free(s->ring);
	free(s);
	*ps = NULL;
}

static struct sv_mutex atomic_lock = SV_MUTEX_INITIALIZER(SV_LOCK_GPU_ATOMIC);

static bool rmw(sv_cu_ctx gpu, uint64_t *word, int op, uint64_t a, uint64_t b, uint64_t *orig)
{
	uint64_t v, n;
	bool ok;

	sv_mutex_lock(&atomic_lock);
	ok = !sv_dma_read(gpu, &v, word, 8);
	if (ok) {
		n = op == 0 ? (v == a ? b : v) : v + a;
		if (n != v || op == 1)
			ok = !sv_dma_place(gpu, word, &n, 8);
		*orig = v;
	}
	sv_mutex_unlock(&atomic_lock);
	return ok;
}

bool sv_gpu_cmp_swap(sv_cu_ctx gpu, uint64_t *word, uint64_t cmp, uint64_t swap, uint64_t *orig)
{
	return rmw(gpu, word, 0, cmp, swap, orig);
}

bool sv_gpu_fetch_add(sv_cu_ctx gpu, uint64_t *word, uint64_t add, uint64_t *orig)
{
	return rmw(gpu, word, 1, add, 0, orig);
}

bool sv_gpu_store(sv_cu_ctx gpu, uint64_t *word, uint64_t v)
{
	bool ok;

	sv_mutex_lock(&atomic_lock);
	ok = !sv_dma_place(gpu, word, &v, 8);
	sv_mutex_unlock(&atomic_lock);
	return ok;
}

bool sv_gpu_ref_ok(const struct sv_conn *conn)
{
	return atomic_load_explicit(&conn->peer_gpu, memory_order_relaxed) && conn->peer_pid &&
	       conn->peer_pid != getpid() && sv_cuda_ipc_enabled();
}

bool sv_gpu_ref_make(const struct sv_mr *e, const uint8_t *ptr, uint32_t len,
		     struct sv_gpu_ref *ref)
{
	const struct sv_mr *m = e->kind == SV_KEY_MW ? e->mw_mr : e;

	if (!m || !m->gx || len < SV_GPU_REF_MIN)
		return false;
	memcpy(ref->handle, &m->gx->h, sizeof(ref->handle));
	ref->off = htobe64(m->gx->off + (uint64_t)(ptr - m->vaddr));
	ref->len = htonl(len);
	ref->ordinal = htonl((uint32_t)m->gx->ordinal);
	return true;
}

const uint8_t *sv_gpu_ref_open(const struct sv_gpu_ref *ref, sv_cu_ctx *ctx)
{
	uint64_t off = be64toh(ref->off), len = ntohl(ref->len);
	sv_cu_ipc_handle h;
	const uint8_t *base;
	size_t size = 0;

	memcpy(&h, ref->handle, sizeof(h));
	base = sv_cuda_import(&h, (int)ntohl(ref->ordinal), ctx, &size);
	/* a copy past the allocation would be a fault in the GPU (fatal to
	 * the context): the range is checked here, once */
	if (!base || off > size || len > size - off)
		return NULL;
	return base + off;
}
