/*
 * Receive queues in the receive arena, the owner's side (direct_recv.h):
 * the arena and its blocks, the counters the owner moves, and the
 * completions of what peers placed.  The peers' side is in direct_exec.c.
 */
#include "engine/direct_recv.h"
#include "engine/mem_export.h"
#include "engine/objects.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A block given back (arena_lock): reused by a queue that fits in it. */
struct sv_arena_free {
	uint32_t off, len;
};

#define ARENA_ALIGN 64u

/* WQE i of the queue's records */
#define XE(rq, i) sv_xrecv_at((rq)->xl->xent, (rq)->max_sge, (i))

bool sv_xrq_arena_open(struct sv_context *ctx)
{
	struct stat st;
	int fd;
	void *p;

	ctx->arena_fd = -1;
	if (!ctx->xseg)
		return false;
	ctx->xseg->arena_fd = -1;
	fd = memfd_create("softverbs-recv", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return false;
	if (ftruncate(fd, SV_XRQ_ARENA) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) || fstat(fd, &st) ||
	    (p = mmap(NULL, SV_XRQ_ARENA, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		close(fd);
		return false;
	}
	sv_mutex_init(&ctx->arena_lock, SV_LOCK_ARENA);
	ctx->arena = p;
	ctx->arena_fd = fd;
	ctx->arena_next = ARENA_ALIGN; /* offset 0 means "none" in a QP's record */
	/* numbers no earlier queue at the same place had, in any process */
	atomic_store(&ctx->arena_gen, ctx->qpn_key);
	ctx->xseg->arena_ino = (uint64_t)st.st_ino;
	ctx->xseg->arena_size = SV_XRQ_ARENA;
	ctx->xseg->arena_fd = fd;
	atomic_store_explicit(&ctx->arena_on, true, memory_order_release);
	return true;
}

void sv_xrq_arena_close(struct sv_context *ctx)
{
	atomic_store(&ctx->arena_on, false);
	if (ctx->arena) {
		munmap(ctx->arena, SV_XRQ_ARENA);
		sv_mutex_destroy(&ctx->arena_lock);
	}
	if (ctx->arena_fd >= 0)
		close(ctx->arena_fd);
	free(ctx->arena_free);
	ctx->arena = NULL;
	ctx->arena_fd = -1;
	ctx->arena_free = NULL;
	ctx->narena_free = ctx->arena_free_cap = 0;
}

/* arena_lock held: the offset of a block of len bytes; 0 if none. */
static uint32_t arena_take(struct sv_context *ctx, uint32_t len)
{
	uint32_t off;

	for (uint32_t i = 0; i < ctx->narena_free; i++) {
		struct sv_arena_free *f = &ctx->arena_free[i];

		if (f->len < len)
			continue;
		off = f->off;
		f->off += len;
		f->len -= len;
		if (!f->len)
			*f = ctx->arena_free[--ctx->narena_free];
		return off;
	}
	if (SV_XRQ_ARENA - ctx->arena_next < len)
		return 0;
	off = ctx->arena_next;
	ctx->arena_next += len;
	return off;
}

/* arena_lock held: the block goes back (its pages are given back to the
 * system, so a queue that is gone costs no memory). */
static void arena_give(struct sv_context *ctx, uint32_t off, uint32_t len)
{
	uint32_t lo = (off + 4095u) & ~4095u, hi = (off + len) & ~4095u;

	if (hi > lo)
		(void)fallocate(ctx->arena_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, lo, hi - lo);
	else
		memset(ctx->arena + off, 0, len);
	if (hi > lo) {
		/* the ends that share pages with other blocks are zeroed by hand */
		memset(ctx->arena + off, 0, lo - off);
		memset(ctx->arena + hi, 0, off + len - hi);
	}
	if (ctx->narena_free == ctx->arena_free_cap) {
		uint32_t cap = ctx->arena_free_cap ? 2 * ctx->arena_free_cap : 16;
		struct sv_arena_free *n = realloc(ctx->arena_free, cap * sizeof(*n));

		if (!n)
			return; /* the block is lost to reuse, not to correctness */
		ctx->arena_free = n;
		ctx->arena_free_cap = cap;
	}
	ctx->arena_free[ctx->narena_free++] = (struct sv_arena_free){ off, len };
}

/* A block for a queue of max_wr WQEs of max_sge SGEs: NULL when the
 * context has no arena or it is full. */
static struct sv_xrq_local *xrq_alloc(struct sv_context *ctx, uint32_t max_wr, uint32_t max_sge)
{
	uint64_t len = sv_xrq_bytes(SV_MAX(max_wr, 1u), SV_MAX(max_sge, 1u));
	struct sv_xrq_local *xl;
	uint32_t off;

	if (!ctx->arena || len > SV_XRQ_ARENA / 4)
		return NULL;
	xl = calloc(1, sizeof(*xl));
	if (!xl)
		return NULL;
	len = (len + ARENA_ALIGN - 1) & ~(uint64_t)(ARENA_ALIGN - 1);
	sv_mutex_lock(&ctx->arena_lock);
	off = arena_take(ctx, (uint32_t)len);
	sv_mutex_unlock(&ctx->arena_lock);
	if (!off) {
		free(xl);
		return NULL;
	}
	xl->x = (struct sv_xrq *)(ctx->arena + off);
	xl->xent = (struct sv_xrecv *)(ctx->arena + off + sizeof(struct sv_xrq));
	xl->off = off;
	xl->len = (uint32_t)len;
	xl->ctx = ctx;
	return xl;
}

/* The QP's record, where its queue can move to the arena; NULL if not. */
static struct sv_xqp *movable(struct sv_qp *qp)
{
	struct sv_context *ctx = qp->ctx;
	uint32_t slot = sv_qpn_slot(ctx, qp->ex.qp_base.qp_num);

	if (qp->rq.xl || qp->srq || qp->ti->type != IBV_QPT_RC ||
	    !atomic_load_explicit(&ctx->arena_on, memory_order_acquire) || slot >= SV_QPN_BLOCK)
		return NULL;
	return &ctx->xseg->qp[slot];
}

void sv_xrq_consider(struct sv_qp *qp)
{
	struct sv_xqp *q = movable(qp);

	if (q && atomic_load_explicit(&q->rq_want, memory_order_relaxed))
		sv_xrq_adopt(qp);
}

void sv_xrq_adopt(struct sv_qp *qp)
{
	struct sv_context *ctx = qp->ctx;
	struct sv_xqp *q = movable(qp);
	struct sv_rq *rq = &qp->rq;
	struct sv_xrq_local *xl;

	if (!q)
		return;
	atomic_store(&q->rq_want, 0); /* asked again if it cannot move now */
	xl = xrq_alloc(ctx, rq->size, rq->max_sge);
	if (!xl)
		return;
	/* each WQE's SGEs into its record, at the same index: the counters
	 * start so that the head's count is its index (posted - count) */
	for (uint32_t i = 0; i < SV_MAX(rq->size, 1u); i++) {
		struct sv_xrecv *e = sv_xrecv_at(xl->xent, rq->max_sge, i);

		e->num_sge = rq->wqe[i].num_sge;
		memcpy(sv_xrecv_sge(e), rq->wqe[i].sge, sizeof(struct ibv_sge) * rq->max_sge);
		rq->wqe[i].sge = sv_xrecv_sge(e);
	}
	free(rq->sge_pool);
	rq->sge_pool = NULL;
	atomic_store(&xl->x->gen, atomic_fetch_add(&ctx->arena_gen, 1) | 1);
	atomic_store(&xl->x->taken, rq->head);
	atomic_store(&xl->x->posted, (uint64_t)rq->head + rq->count);
	atomic_store(&xl->watch, rq->head);
	rq->xl = xl;
	if (sv_xrq_attach(qp))
		return; /* no room to list it on its CQ: never published */
	/* published: the shape first (a peer reads the offset, then it) */
	atomic_store(&q->rq_shape, rq->size << 8 | rq->max_sge);
	atomic_store(&q->rq_off, xl->off);
}

void sv_xrq_free(struct sv_context *ctx, struct sv_rq *rq)
{
	if (!rq->xl)
		return;
	sv_mutex_lock(&ctx->arena_lock);
	arena_give(ctx, rq->xl->off, rq->xl->len);
	sv_mutex_unlock(&ctx->arena_lock);
	free(rq->xl);
	rq->xl = NULL;
}

void sv_xrq_posted(struct sv_rq *rq)
{
	uint32_t i = (rq->head + rq->count - 1) % rq->size;
	struct sv_xrecv *e = XE(rq, i);

	if (!atomic_load_explicit(&rq->xl->x->gen, memory_order_relaxed))
		atomic_store(&rq->xl->x->gen, atomic_fetch_add(&rq->xl->ctx->arena_gen, 1) | 1);
	e->num_sge = rq->wqe[i].num_sge;
	atomic_store_explicit(&e->flags, 0, memory_order_relaxed);
	/* the WQE (its SGEs in the arena) before the count that shows it */
	atomic_store_explicit(&rq->xl->x->posted, atomic_load_explicit(&rq->xl->x->posted, memory_order_relaxed) + 1,
			      memory_order_release);
}

void sv_xrq_reset(struct sv_qp *qp)
{
	struct sv_rq *rq = &qp->rq;

	if (!rq->xl)
		return;
	/* no peer is placing into it any more, nor starts to (the record
	 * closed; modify_qp reopens it when the QP receives again) */
	sv_export_qp_quiet(qp);
	atomic_store(&rq->xl->x->gen, 0); /* numbered again at the next post */
	atomic_store(&rq->xl->x->posted, 0);
	atomic_store(&rq->xl->x->taken, 0);
	for (uint32_t i = 0; i < rq->size; i++)
		atomic_store_explicit(&XE(rq, i)->flags, 0, memory_order_relaxed);
	atomic_store(&rq->xl->watch, 0);
}

/* The count of WQEs completed (or taken by the responder): the head's. */
static uint64_t completed(const struct sv_rq *rq)
{
	return atomic_load_explicit(&rq->xl->x->posted, memory_order_relaxed) - rq->count;
}

void sv_xrq_drain(struct sv_qp *qp)
{
	struct sv_rq *rq = &qp->rq;
	uint32_t f;

	if (!rq->xl)
		return;
	/* (only what was posted: a mark past it is not looked at) */
	while (rq->count &&
	       ((f = atomic_load_explicit(&XE(rq, rq->head)->flags, memory_order_acquire)) &
		SV_XRECV_DONE)) {
		struct sv_xrecv *e = XE(rq, rq->head);
		struct ibv_wc wc = {
			.wr_id = rq->wqe[rq->head].wr_id,
			.status = IBV_WC_SUCCESS,
			.opcode = IBV_WC_RECV,
			.byte_len = e->byte_len,
			.qp_num = qp->ex.qp_base.qp_num,
			.src_qp = qp->attr.dest_qp_num,
		};

		/* the mark goes, so that the poll's look at the head (xwatch)
		 * does not find it again */
		atomic_store_explicit(&e->flags, 0, memory_order_relaxed);
		if (f & SV_XRECV_WRITE)
			wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
		if (f & SV_XRECV_ABORTED) {
			wc.status = IBV_WC_REM_ABORT_ERR;
			wc.vendor_err = IBV_WC_REM_ABORT_ERR;
			f &= ~SV_XRECV_IMM;
		}
		if (f & SV_XRECV_IMM) {
			wc.imm_data = e->imm;
			wc.wc_flags = IBV_WC_WITH_IMM;
		}
		rq->head = (rq->head + 1) % rq->size;
		rq->count--;
		atomic_store_explicit(&rq->xl->watch, rq->head, memory_order_relaxed);
		sv_cq_push(qp->rcq, &wc, f & SV_XRECV_SOLICITED);
	}
}

bool sv_xrq_take(struct sv_qp *qp)
{
	struct sv_rq *rq = &qp->rq;
	uint64_t c = completed(rq);

	/* a peer placing a message into the head WQE has taken it already */
	if (!atomic_compare_exchange_strong(&rq->xl->x->taken, &c, c + 1))
		return false;
	/* (the caller moves the head past it) */
	atomic_store_explicit(&rq->xl->watch, (rq->head + 1) % rq->size, memory_order_relaxed);
	return true;
}

int sv_xrq_attach(struct sv_qp *qp)
{
	struct sv_cq *cq = qp->rcq;
	int err = 0;

	sv_mutex_lock(&cq->lock);
	if (cq->nxrq == cq->xrq_cap) {
		uint32_t cap = cq->xrq_cap ? 2 * cq->xrq_cap : 4;
		struct sv_qp **n = realloc(cq->xrq, cap * sizeof(*n));

		if (n) {
			cq->xrq = n;
			cq->xrq_cap = cap;
		} else {
			err = ENOMEM;
		}
	}
	if (!err) {
		cq->xrq[cq->nxrq++] = qp;
		atomic_store(&cq->nxrq_any, cq->nxrq);
	}
	sv_mutex_unlock(&cq->lock);
	return err;
}

void sv_xrq_detach(struct sv_qp *qp)
{
	struct sv_cq *cq = qp->rcq;

	if (!qp->rq.xl)
		return;
	sv_mutex_lock(&cq->lock);
	for (uint32_t i = 0; i < cq->nxrq; i++)
		if (cq->xrq[i] == qp) {
			cq->xrq[i] = cq->xrq[--cq->nxrq];
			break;
		}
	atomic_store(&cq->nxrq_any, cq->nxrq);
	sv_mutex_unlock(&cq->lock);
}

/* Whether a peer completed the receive at qp's head (without its lock: a
 * hint; a load of the line the peer writes when it places). */
static bool xrq_moved(struct sv_qp *qp)
{
	uint32_t i = atomic_load_explicit(&qp->rq.xl->watch, memory_order_relaxed);

	return i < qp->rq.size &&
	       (atomic_load_explicit(&XE(&qp->rq, i)->flags, memory_order_relaxed) & SV_XRECV_DONE);
}

/* The completions of qp, whose reference the caller took (and this drops). */
static void drain_ref(struct sv_qp *qp)
{
	sv_mutex_lock(&qp->lock);
	sv_xrq_drain(qp);
	sv_mutex_unlock(&qp->lock);
	sv_qp_put(qp);
}

void sv_xrq_poll_cq(struct sv_cq *cq)
{
	if (!atomic_load_explicit(&cq->nxrq_any, memory_order_relaxed))
		return;
	/* one QP at a time: its lock comes before the CQ's */
	for (uint32_t start = 0;;) {
		struct sv_qp *qp = NULL;

		sv_mutex_lock(&cq->lock);
		for (; start < cq->nxrq && !qp; start++)
			if (xrq_moved(cq->xrq[start])) {
				qp = cq->xrq[start];
				sv_qp_get(qp);
			}
		sv_mutex_unlock(&cq->lock);
		if (!qp)
			return;
		drain_ref(qp);
	}
}

/* Take in the completions of the QP in slot, if it is still there. */
static void drain_slot(struct sv_context *ctx, uint32_t slot)
{
	struct sv_qp *qp = sv_qp_lookup(ctx, sv_qpn_of_slot(ctx, slot));

	if (qp)
		drain_ref(qp);
}

void sv_xrq_poll(struct sv_context *ctx)
{
	struct sv_xseg *x;

	if (!atomic_load_explicit(&ctx->arena_on, memory_order_acquire))
		return;
	x = ctx->xseg;
	for (uint32_t s = 0; s < SV_QPN_BLOCK / 64 / 64; s++) {
		uint64_t sum;

		if (!atomic_load_explicit(&x->rq_ready_sum[s], memory_order_relaxed))
			continue;
		sum = atomic_exchange(&x->rq_ready_sum[s], 0);
		while (sum) {
			uint32_t w = s * 64 + (uint32_t)__builtin_ctzll(sum);
			uint64_t bits = atomic_exchange(&x->rq_ready[w], 0);

			sum &= sum - 1;
			while (bits) {
				drain_slot(ctx, w * 64 + (uint32_t)__builtin_ctzll(bits));
				bits &= bits - 1;
			}
		}
	}
}

bool sv_xrq_waiting(struct sv_context *ctx)
{
	struct sv_xseg *x;

	if (!atomic_load_explicit(&ctx->arena_on, memory_order_acquire))
		return false;
	x = ctx->xseg;
	for (uint32_t s = 0; s < SV_QPN_BLOCK / 64 / 64; s++)
		if (atomic_load_explicit(&x->rq_ready_sum[s], memory_order_seq_cst))
			return true;
	return false;
}
