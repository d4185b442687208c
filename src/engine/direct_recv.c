/*
 * Receive queues in the receive arena, the owner's side (direct_recv.h):
 * the arena and its blocks, the counters the owner moves, and the
 * completions of what peers placed.  The peers' side is in direct_exec.c.
 */
#include "engine/direct_recv.h"
#include "engine/mem_export.h"
#include "engine/objects.h"
#include "engine/stats.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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

/* A poll watches the head WQE of rq (its record in the arena). */
static void set_watch(struct sv_rq *rq)
{
	atomic_store_explicit(&rq->xl->watch, XE(rq, rq->head), memory_order_relaxed);
}

void sv_xrq_rewatch(struct sv_rq *rq)
{
	if (rq->xl)
		set_watch(rq);
}

/*
 * rq's WQEs into a block of the arena, each at its index, the counters
 * started so that the head's count is its index (posted - count): false,
 * rq as it was, when there is no room.  xl: the record of the queue's
 * part to fill again (a resize: polls may be reading it), or NULL for a
 * new one.
 */
static bool xrq_move(struct sv_context *ctx, struct sv_rq *rq, struct sv_xrq_local *xl,
		     const struct sv_pd *pd)
{
	struct sv_xrq_local *n = xrq_alloc(ctx, rq->size, rq->max_sge);

	if (!n)
		return false;
	for (uint32_t i = 0; i < SV_MAX(rq->size, 1u); i++) {
		struct sv_xrecv *e = sv_xrecv_at(n->xent, rq->max_sge, i);

		e->num_sge = rq->wqe[i].num_sge;
		memcpy(sv_xrecv_sge(e), rq->wqe[i].sge, sizeof(struct ibv_sge) * rq->max_sge);
		rq->wqe[i].sge = sv_xrecv_sge(e);
	}
	free(rq->sge_pool);
	rq->sge_pool = NULL;
	atomic_store(&n->x->gen, atomic_fetch_add(&ctx->arena_gen, 1) | 1);
	atomic_store(&n->x->pd, pd->ibpd.handle);
	n->numbered = true;
	atomic_store(&n->x->taken, rq->head);
	atomic_store(&n->x->posted, (uint64_t)rq->head + rq->count);
	if (xl) {
		xl->x = n->x;
		xl->xent = n->xent;
		xl->off = n->off;
		xl->len = n->len;
		xl->numbered = true;
		free(n);
		n = xl;
	}
	rq->xl = n;
	set_watch(rq);
	return true;
}

/* The record of an RC QP of this context whose queue may move to the
 * arena; NULL if not. */
static struct sv_xqp *rc_record(struct sv_qp *qp)
{
	struct sv_context *ctx = qp->ctx;

	if (qp->destroyed || qp->ti->type != IBV_QPT_RC ||
	    !atomic_load_explicit(&ctx->arena_on, memory_order_acquire))
		return NULL;
	return sv_export_qp_record(qp);
}

/* The QP's own queue's record, where it can move to the arena; NULL if not. */
static struct sv_xqp *movable(struct sv_qp *qp)
{
	return qp->rq.xl || qp->srq ? NULL : rc_record(qp);
}

void sv_xrq_consider(struct sv_qp *qp)
{
	struct sv_xqp *q = movable(qp);

	if (q && atomic_load_explicit(&q->rq_want, memory_order_relaxed))
		sv_xrq_adopt(qp);
}

/* srq->lock held: qp's place in the list of QPs whose records name the
 * SRQ's queue, or -1. */
static int srq_index(const struct sv_srq *srq, const struct sv_qp *qp)
{
	for (uint32_t i = 0; i < srq->nxqps; i++)
		if (srq->xqps[i] == qp)
			return (int)i;
	return -1;
}

/* srq->lock held: the QP numbered qpn whose record names the SRQ's queue. */
static struct sv_qp *srq_qp(const struct sv_srq *srq, uint32_t qpn)
{
	for (uint32_t i = 0; i < srq->nxqps; i++)
		if (srq->xqps[i]->ex.qp_base.qp_num == qpn)
			return srq->xqps[i];
	return NULL;
}

/* srq->lock held: qp's record is to name the SRQ's queue; false: no room. */
static bool srq_list(struct sv_srq *srq, struct sv_qp *qp)
{
	if (srq_index(srq, qp) >= 0)
		return true;
	if (srq->nxqps == srq->xqps_cap) {
		uint32_t cap = srq->xqps_cap ? 2 * srq->xqps_cap : 4;
		struct sv_qp **n = realloc(srq->xqps, cap * sizeof(*n));

		if (!n)
			return false;
		srq->xqps = n;
		srq->xqps_cap = cap;
	}
	srq->xqps[srq->nxqps++] = qp;
	return true;
}

/* The record q names rq's block (the shape first: a peer reads the
 * offset, then it). */
static void publish(struct sv_xqp *q, const struct sv_rq *rq, bool notify)
{
	atomic_store(&q->rq_shape, rq->size << 8 | (notify ? SV_XRQ_NOTIFY : 0) | rq->max_sge);
	atomic_store(&q->rq_off, rq->xl->off);
}

/*
 * Whether peers placing into a queue must mark its slot in the ready map
 * and ring the bell, so that the engine thread takes the completions in
 * as they come: when its CQ has a completion channel (an event is owed),
 * and when the CQ could overrun (IBV_EVENT_CQ_ERR is owed when it does,
 * as a NIC raises it, not at a later poll).  Otherwise the CQ's polls
 * look at the queue themselves (sv_xrq_poll_cq), and a post that finds
 * the queue full takes in what was placed first: the mark would only
 * cost the placing peer two lines of ours at every message.  An SRQ's
 * queue is always marked (its limit event is owed whoever polls).
 *
 * "Could overrun": the queues that complete into the CQ hold more WQEs
 * than it has room for (cq->wr_demand, kept at QP creation and
 * destruction; an SRQ counts as unbounded).  Once that has been true the
 * CQ marks for good (cq->xrq_notify), and the records of the queues it
 * lists are marked at once; a queue published later reads the flag under
 * the CQ's lock, so that it and the marking do not cross.
 */
static void own_publish(struct sv_qp *qp, struct sv_xqp *q)
{
	struct sv_cq *cq = qp->rcq;

	sv_mutex_lock(&cq->lock);
	publish(q, &qp->rq, cq->ex.channel || cq->xrq_notify);
	sv_mutex_unlock(&cq->lock);
}

/* cq->lock held: the CQ starts marking if it could now overrun. */
static void cq_check_demand(struct sv_cq *cq)
{
	if (cq->xrq_notify || cq->wr_demand <= (uint64_t)cq->ex.cqe)
		return;
	cq->xrq_notify = true;
	for (uint32_t i = 0; i < cq->nxrq; i++) {
		struct sv_xqp *q = sv_export_qp_record(cq->xrq[i].qp);

		if (q && atomic_load(&q->rq_off))
			atomic_fetch_or(&q->rq_shape, SV_XRQ_NOTIFY);
	}
}

static void cq_demand(struct sv_cq *cq, uint64_t n, bool add)
{
	sv_mutex_lock(&cq->lock);
	if (add)
		cq->wr_demand += n;
	else
		cq->wr_demand -= n;
	cq_check_demand(cq);
	sv_mutex_unlock(&cq->lock);
}

void sv_xrq_cq_hold(struct sv_qp *qp, bool hold)
{
	if (qp->xrcd)
		return; /* (an XRC receive QP: its CQ is its SRQ's, counted there) */
	if (qp->scq)
		cq_demand(qp->scq, qp->sq.max_wr, hold);
	if (qp->rcq && !qp->ti->xrc)
		cq_demand(qp->rcq, qp->srq ? (uint64_t)UINT32_MAX : qp->rq.size, hold);
}

void sv_xrq_cq_resized(struct sv_cq *cq)
{
	cq_check_demand(cq);
}

/* qp->lock held: the SRQ's queue moves to the arena if it is not there,
 * and qp's record names it.  A basic SRQ, of the QP's PD or another: a
 * peer checks a receive's lkeys against the queue's PD (sv_xrq.pd, the
 * SRQ's), as the responder does. */
static void adopt_srq(struct sv_qp *qp)
{
	struct sv_srq *srq = qp->srq;
	struct sv_xqp *q = rc_record(qp);

	if (!q || atomic_load_explicit(&q->rq_off, memory_order_relaxed) || srq->xrcd)
		return; /* (named already: a load) */
	atomic_store(&q->rq_want, 0);
	sv_mutex_lock(&srq->lock);
	if (!srq->rq.xl && xrq_move(qp->ctx, &srq->rq, srq->xl_kept, srq->pd))
		srq->xl_kept = NULL; /* (the SRQ's one record, in use again) */
	if (srq->rq.xl && srq_list(srq, qp) && !sv_xrq_attach(qp, srq->rq.xl))
		publish(q, &srq->rq, true);
	sv_mutex_unlock(&srq->lock);
}

void sv_xrq_adopt(struct sv_qp *qp)
{
	struct sv_rq *rq = &qp->rq;
	struct sv_xqp *q;

	if (qp->srq) {
		adopt_srq(qp);
		return;
	}
	q = movable(qp);
	if (!q)
		return;
	atomic_store(&q->rq_want, 0); /* asked again if it cannot move now */
	if (!xrq_move(qp->ctx, rq, NULL, qp->pd))
		return;
	if (sv_xrq_attach(qp, rq->xl))
		return; /* no room to list it on its CQ: never published */
	own_publish(qp, q);
}

void sv_xrq_record(struct sv_qp *qp, struct sv_xqp *q)
{
	struct sv_srq *srq = qp->srq;

	if (!srq) {
		if (qp->rq.xl)
			own_publish(qp, q);
		else
			atomic_store(&q->rq_off, 0);
		return;
	}
	/* under the SRQ's lock: a resize moves its queue meanwhile */
	sv_mutex_lock(&srq->lock);
	if (srq->rq.xl && srq_index(srq, qp) >= 0)
		publish(q, &srq->rq, true);
	else
		atomic_store(&q->rq_off, 0);
	sv_mutex_unlock(&srq->lock);
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

	if (!rq->xl->numbered) {
		atomic_store(&rq->xl->x->gen, atomic_fetch_add(&rq->xl->ctx->arena_gen, 1) | 1);
		rq->xl->numbered = true;
	}
	e->num_sge = rq->wqe[i].num_sge;
	e->qpn = 0;
	atomic_store_explicit(&e->pid, 0, memory_order_relaxed);
	atomic_store_explicit(&e->flags, 0, memory_order_relaxed);
	/* the WQE (its SGEs in the arena) before the count that shows it */
	atomic_store_explicit(&rq->xl->x->posted, atomic_load_explicit(&rq->xl->x->posted, memory_order_relaxed) + 1,
			      memory_order_release);
}

void sv_xrq_reset(struct sv_qp *qp)
{
	struct sv_rq *rq = &qp->rq;

	if (qp->srq) {
		/* no peer places for it any more; what they placed completes
		 * now, before RESET takes its completions out of its CQ */
		if (!qp->srq->xrcd) {
			sv_export_qp_quiet(qp);
			sv_xrq_drain(qp);
		}
		return;
	}
	if (!rq->xl)
		return;
	/* no peer is placing into it any more, nor starts to (the record
	 * closed; modify_qp reopens it when the QP receives again) */
	sv_export_qp_quiet(qp);
	atomic_store(&rq->xl->x->gen, 0); /* numbered again at the next post */
	rq->xl->numbered = false;
	atomic_store(&rq->xl->x->posted, 0);
	atomic_store(&rq->xl->x->taken, 0);
	for (uint32_t i = 0; i < rq->size; i++)
		atomic_store_explicit(&XE(rq, i)->flags, 0, memory_order_relaxed);
	set_watch(rq); /* (the caller emptied the ring: its head is 0) */
}

/* The count of WQEs completed (or taken by the responder): the head's. */
static uint64_t completed(const struct sv_rq *rq)
{
	return atomic_load_explicit(&rq->xl->x->posted, memory_order_relaxed) - rq->count;
}

/* The completion of a WQE a peer marked done (flags f, taken from e). */
static void xrecv_wc(struct ibv_wc *wc, const struct sv_xrecv *e, uint32_t f)
{
	wc->status = IBV_WC_SUCCESS;
	wc->opcode = (f & SV_XRECV_WRITE) ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
	wc->byte_len = e->byte_len;
	if (f & SV_XRECV_FLUSHED) {
		wc->status = IBV_WC_WR_FLUSH_ERR;
		wc->vendor_err = IBV_WC_WR_FLUSH_ERR;
		wc->opcode = IBV_WC_RECV;
		wc->byte_len = 0;
		return;
	}
	if (f & SV_XRECV_ABORTED) {
		wc->status = IBV_WC_REM_ABORT_ERR;
		wc->vendor_err = IBV_WC_REM_ABORT_ERR;
		f &= ~SV_XRECV_IMM;
	}
	if (f & SV_XRECV_IMM) {
		wc->imm_data = e->imm;
		wc->wc_flags = IBV_WC_WITH_IMM;
	}
}

/* The owner's lock held: the head WQE, if a peer marked it done (its
 * flags in *f); NULL if not. */
static struct sv_xrecv *done_head(struct sv_rq *rq, uint32_t *f)
{
	struct sv_xrecv *e;

	/* (only what was posted: a mark past it is not looked at) */
	if (!rq->count)
		return NULL;
	e = XE(rq, rq->head);
	*f = atomic_load_explicit(&e->flags, memory_order_acquire);
	return (*f & SV_XRECV_DONE) ? e : NULL;
}

/* The owner's lock held: the head WQE is done with (its mark goes, so
 * that the poll's look at the head does not find it again; not one taken
 * back, whose peer may still mark it: what its exchange replaces must say
 * so). */
static void pop_head(struct sv_rq *rq)
{
	_Atomic uint32_t *f = &XE(rq, rq->head)->flags;

	if (!(atomic_load_explicit(f, memory_order_relaxed) & SV_XRECV_FLUSHED))
		atomic_store_explicit(f, 0, memory_order_relaxed);
	rq->head = (rq->head + 1) % rq->size;
	rq->count--;
	set_watch(rq);
}

/* srq->lock held: a WQE a peer took for a QP the SRQ does not know (no
 * peer that plays by the rules does: the QP's destruction waits its
 * placements out) is posted again at the tail, so that the buffer is not
 * lost to the application. */
static void srq_repost(struct sv_srq *srq, uint32_t qpn)
{
	struct sv_rq *rq = &srq->rq;
	struct ibv_sge sge[SV_MAX_SGE];
	uint64_t wr_id = rq->wqe[rq->head].wr_id;
	uint32_t nsge = SV_MIN(rq->wqe[rq->head].num_sge, (uint32_t)SV_MAX_SGE), t;

	memcpy(sge, rq->wqe[rq->head].sge, sizeof(*sge) * nsge);
	sv_warn_limited("a peer of this host placed a message into SRQ %#x for QP %#x, not one of "
			"its QPs: the receive is posted again",
			srq->srq_num, qpn);
	pop_head(rq);
	/* at the tail (the slot just freed leaves room) */
	t = (rq->head + rq->count) % rq->size;
	rq->wqe[t].wr_id = wr_id;
	rq->wqe[t].num_sge = nsge;
	memcpy(rq->wqe[t].sge, sge, sizeof(*sge) * nsge);
	rq->count++;
	sv_xrq_posted(rq);
}

/* srq->lock held: the WQEs the SRQ holds that nobody has taken. */
uint32_t sv_xrq_srq_avail(const struct sv_srq *srq)
{
	const struct sv_rq *rq = &srq->rq;

	if (!rq->xl)
		return rq->count;
	return (uint32_t)(atomic_load(&rq->xl->x->posted) - atomic_load(&rq->xl->x->taken));
}

/* srq->lock held: the receives peers completed go to their QPs' CQs, in
 * the order they were taken.  *limit: the armed limit was crossed. */
static void srq_drain(struct sv_srq *srq, bool *limit)
{
	struct sv_rq *rq = &srq->rq;
	struct sv_xrecv *e;
	bool took = false;
	uint32_t f;

	while ((e = done_head(rq, &f))) {
		const struct sv_recv_wqe *w = &rq->wqe[rq->head];
		struct sv_qp *to = srq_qp(srq, e->qpn);
		struct sv_xqp *q;
		struct ibv_wc wc = { .wr_id = w->wr_id, .qp_num = e->qpn };

		if (!to) {
			srq_repost(srq, e->qpn);
			continue;
		}
		/* the QP's responder has a WQE of this queue taken before this
		 * one and not completed yet (its ACK may have gone, and the peer
		 * placed the next message): this waits, and its completion
		 * drains again */
		if (atomic_load_explicit(&to->resp.srq_open, memory_order_acquire))
			break;
		/* the sender, as the QP's record names it (its attributes are
		 * under its lock, not taken here) */
		q = sv_export_qp_record(to);
		wc.src_qp = q ? atomic_load(&q->dest_qpn) : 0;
		xrecv_wc(&wc, e, f);
		pop_head(rq);
		sv_cq_push(to->rcq, to, &wc, f & SV_XRECV_SOLICITED);
		took = true;
	}
	/* as the responder's take checks it: after WQEs were consumed (a
	 * limit armed above what is left waits for the next one, as in rxe) */
	if (took && srq->srq_limit && sv_xrq_srq_avail(srq) < srq->srq_limit) {
		srq->srq_limit = 0; /* one-shot: disarmed */
		*limit = true;
	}
}

void sv_xrq_srq_drain(struct sv_srq *srq, bool *limit)
{
	if (srq->rq.xl)
		srq_drain(srq, limit);
}

/* srq->lock not held: what peers completed goes to the QPs' CQs now. */
static void srq_drain_now(struct sv_srq *srq)
{
	bool limit = false;

	sv_mutex_lock(&srq->lock);
	sv_xrq_srq_drain(srq, &limit);
	sv_mutex_unlock(&srq->lock);
	if (limit)
		sv_srq_limit_event(srq);
}

/* qp->lock held, its own queue: the head WQE e completes as its mark f
 * says, into the CQ. */
static void push_head(struct sv_qp *qp, const struct sv_xrecv *e, uint32_t f)
{
	struct sv_rq *rq = &qp->rq;
	struct ibv_wc wc = {
		.wr_id = rq->wqe[rq->head].wr_id,
		.qp_num = qp->ex.qp_base.qp_num,
		.src_qp = qp->attr.dest_qp_num,
	};

	xrecv_wc(&wc, e, f);
	pop_head(rq);
	sv_cq_push(qp->rcq, qp, &wc, f & SV_XRECV_SOLICITED);
}

void sv_xrq_drain(struct sv_qp *qp)
{
	struct sv_rq *rq = &qp->rq;
	struct sv_xrecv *e;
	uint32_t f;

	if (qp->srq) {
		if (!qp->srq->xrcd)
			srq_drain_now(qp->srq);
		return;
	}
	if (!rq->xl)
		return;
	while ((e = done_head(rq, &f)))
		push_head(qp, e, f);
}

void sv_xrq_drain_for_flush(struct sv_qp *qp)
{
	struct sv_rq *rq = &qp->rq;
	struct sv_xrq *x;
	uint64_t posted, t;

	sv_xrq_drain(qp);
	if (qp->srq || !rq->xl)
		return;
	x = rq->xl->x;
	/* no peer takes another: the WQEs not taken are the flush's.  (The
	 * record is closed, but a peer may be past its check) */
	posted = atomic_load_explicit(&x->posted, memory_order_relaxed);
	t = atomic_load(&x->taken);
	while (t < posted && !atomic_compare_exchange_weak(&x->taken, &t, posted))
		;
	/* those taken before it, at the head, are being placed: each is
	 * taken back unless its peer marked it done first (then it completes
	 * as the mark says) */
	while (rq->count && completed(rq) < t) {
		struct sv_xrecv *e = XE(rq, rq->head);
		uint32_t f = atomic_load(&e->flags);

		/* (from whatever is there without the mark: a peer that wrote
		 * something else must not keep this loop turning) */
		while (!(f & SV_XRECV_DONE) &&
		       !atomic_compare_exchange_weak(&e->flags, &f, SV_XRECV_DONE | SV_XRECV_FLUSHED))
			;
		/* flushed now: the peer's exchange, which may write its mark
		 * over this one, learns it from what it replaced */
		if (!(f & SV_XRECV_DONE))
			push_head(qp, e, SV_XRECV_DONE | SV_XRECV_FLUSHED);
		sv_xrq_drain(qp);
	}
}

/* The owner's lock held, the queue drained and not empty: the head WQE is
 * taken from the peers' view too (false: a peer is placing into it). */
static bool take_head(struct sv_rq *rq)
{
	uint64_t c = completed(rq);

	/* a peer placing a message into the head WQE has taken it already */
	if (!atomic_compare_exchange_strong(&rq->xl->x->taken, &c, c + 1))
		return false;
	/* (the caller moves the head past it) */
	atomic_store_explicit(&rq->xl->watch, XE(rq, (rq->head + 1) % rq->size),
			      memory_order_relaxed);
	return true;
}

bool sv_xrq_take(struct sv_qp *qp)
{
	return take_head(&qp->rq);
}

bool sv_xrq_srq_take(struct sv_srq *srq, bool *limit)
{
	srq_drain(srq, limit);
	return srq->rq.count && take_head(&srq->rq);
}

/* srq->lock held: the records of the SRQ's QPs name its queue again. */
static void srq_publish_all(struct sv_srq *srq)
{
	for (uint32_t i = 0; i < srq->nxqps; i++) {
		struct sv_xqp *q = sv_export_qp_record(srq->xqps[i]);

		if (q)
			publish(q, &srq->rq, true);
	}
}

int sv_xrq_srq_unshare(struct sv_srq *srq, bool *limit)
{
	struct sv_rq *rq = &srq->rq;
	struct sv_xrq_local *xl = rq->xl;
	struct ibv_sge *pool;
	uint32_t n = SV_MAX(rq->size, 1u);

	/* no record names the queue now, and the peers that read it before
	 * are waited out: every WQE taken is done */
	for (uint32_t i = 0; i < srq->nxqps; i++) {
		struct sv_xqp *q = sv_export_qp_record(srq->xqps[i]);

		if (q)
			atomic_store(&q->rq_off, 0);
	}
	for (uint32_t i = 0; i < srq->nxqps; i++)
		sv_export_qp_wait_peers(srq->xqps[i]);
	srq_drain(srq, limit);
	if (completed(rq) != atomic_load(&xl->x->taken)) {
		srq_publish_all(srq); /* a peer stopped inside its placement */
		return EBUSY;
	}
	pool = calloc((size_t)n * rq->max_sge, sizeof(*pool));
	if (!pool) {
		srq_publish_all(srq);
		return ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++) {
		memcpy(pool + (size_t)i * rq->max_sge, rq->wqe[i].sge,
		       sizeof(*pool) * rq->max_sge);
		rq->wqe[i].sge = pool + (size_t)i * rq->max_sge;
	}
	rq->sge_pool = pool;
	/* the record stays (polls watching it find nothing), for the next move */
	atomic_store(&xl->watch, NULL);
	sv_mutex_lock(&srq->ctx->arena_lock);
	arena_give(srq->ctx, xl->off, xl->len);
	sv_mutex_unlock(&srq->ctx->arena_lock);
	srq->xl_kept = xl;
	rq->xl = NULL;
	return 0;
}

void sv_xrq_srq_free(struct sv_srq *srq)
{
	sv_xrq_free(srq->ctx, &srq->rq);
	free(srq->xl_kept);
	srq->xl_kept = NULL;
	free(srq->xqps);
	srq->xqps = NULL;
}

void sv_xrq_srq_leave(struct sv_qp *qp)
{
	struct sv_srq *srq = qp->srq;
	int i;

	if (!srq || srq->xrcd)
		return;
	srq_drain_now(srq);
	/* (its record closed and settled: nothing more is placed for it) */
	sv_mutex_lock(&srq->lock);
	i = srq_index(srq, qp);
	if (i >= 0)
		srq->xqps[i] = srq->xqps[--srq->nxqps];
	sv_mutex_unlock(&srq->lock);
}

/* cq->lock held: qp's place on the CQ's list, or -1. */
static int listed_at(const struct sv_cq *cq, const struct sv_qp *qp)
{
	for (uint32_t i = 0; i < cq->nxrq; i++)
		if (cq->xrq[i].qp == qp)
			return (int)i;
	return -1;
}

int sv_xrq_attach(struct sv_qp *qp, struct sv_xrq_local *xl)
{
	struct sv_cq *cq = qp->rcq;
	int err = 0;

	sv_mutex_lock(&cq->lock);
	if (listed_at(cq, qp) >= 0)
		goto out; /* (an SRQ's QP, once more) */
	if (cq->nxrq == cq->xrq_cap) {
		uint32_t cap = cq->xrq_cap ? 2 * cq->xrq_cap : 4;
		struct sv_xrq_watch *n = realloc(cq->xrq, cap * sizeof(*n));

		if (!n) {
			err = ENOMEM;
			goto out;
		}
		cq->xrq = n;
		cq->xrq_cap = cap;
	}
	cq->xrq[cq->nxrq++] = (struct sv_xrq_watch){ qp, xl };
	atomic_store(&cq->nxrq_any, cq->nxrq);
out:
	sv_mutex_unlock(&cq->lock);
	return err;
}

void sv_xrq_detach(struct sv_qp *qp)
{
	struct sv_cq *cq = qp->rcq;
	int i;

	if (!cq)
		return; /* (an XRC receive QP whose SRQ went) */
	sv_mutex_lock(&cq->lock);
	i = listed_at(cq, qp);
	if (i >= 0) {
		cq->xrq[i] = cq->xrq[--cq->nxrq];
		atomic_store(&cq->nxrq_any, cq->nxrq);
	}
	sv_mutex_unlock(&cq->lock);
}

/* cq->lock held: whether a peer completed the receive at the head of the
 * queue w watches (without the queue's lock: a hint; a load of the line
 * the peer writes when it places). */
static bool xrq_moved(const struct sv_xrq_watch *w)
{
	struct sv_xrecv *e = atomic_load_explicit(&w->xl->watch, memory_order_relaxed);

	return e && (atomic_load_explicit(&e->flags, memory_order_relaxed) & SV_XRECV_DONE);
}

/* The completions of qp, whose reference the caller took (and this drops). */
static void drain_ref(struct sv_qp *qp)
{
	sv_mutex_lock(&qp->lock);
	sv_xrq_drain(qp);
	sv_mutex_unlock(&qp->lock);
	sv_qp_put(qp);
}

/*
 * qp->lock held, its own queue: up to num of what peers completed, into
 * the poll's array wc rather than through the CQ's ring (two fewer takes
 * of the CQ's lock a message), while the ring is empty: every completion
 * of the QP is produced under its lock, so none of its can be in the
 * ring, older than these.  How many; the caller leaves the rest for the
 * next poll if num ran out, else pushes them (sv_xrq_drain).
 */
static int drain_into(struct sv_qp *qp, struct ibv_wc *wc, int num)
{
	struct sv_rq *rq = &qp->rq;
	struct sv_xrecv *e;
	uint32_t f;
	int n = 0;

	while (n < num && !atomic_load_explicit(&qp->rcq->avail, memory_order_relaxed) &&
	       (e = done_head(rq, &f))) {
		wc[n] = (struct ibv_wc){
			.wr_id = rq->wqe[rq->head].wr_id,
			.qp_num = qp->ex.qp_base.qp_num,
			.src_qp = qp->attr.dest_qp_num,
		};
		xrecv_wc(&wc[n], e, f);
		pop_head(rq);
		sv_stat_cqe(qp->rcq, qp, &wc[n], true);
		n++;
	}
	return n;
}

int sv_xrq_poll_cq(struct sv_cq *cq, struct ibv_wc *wc, int num)
{
	/* into wc only where no event may be owed (no channel: a completion
	 * the poll takes is never pushed, and so never arms an event) */
	bool into = wc && !cq->ex.channel;
	int got = 0;

	if (!atomic_load_explicit(&cq->nxrq_any, memory_order_relaxed))
		return 0;
	/* one QP at a time: its lock comes before the CQ's */
	for (uint32_t start = 0;;) {
		struct sv_qp *qp = NULL;

		/* (the count as the list's last change left it: a QP listed
		 * meanwhile is looked at by the next poll; and the array full,
		 * what is left waits for the next) */
		if (start >= atomic_load_explicit(&cq->nxrq_any, memory_order_relaxed) ||
		    (into && got >= num))
			return got;
		sv_mutex_lock(&cq->lock);
		for (; start < cq->nxrq && !qp; start++)
			if (xrq_moved(&cq->xrq[start])) {
				qp = cq->xrq[start].qp;
				sv_qp_get(qp);
			}
		sv_mutex_unlock(&cq->lock);
		if (!qp)
			return got;
		if (!into || qp->srq) {
			drain_ref(qp);
			continue;
		}
		sv_mutex_lock(&qp->lock);
		got += drain_into(qp, wc + got, num - got);
		if (got < num)
			sv_xrq_drain(qp); /* (the ring was not empty) */
		sv_mutex_unlock(&qp->lock);
		sv_qp_put(qp);
	}
}

/* The owner's lock held: the WQEs of rq that process pid took and has not
 * marked done, marked aborted (mark) or counted (not); how many. */
static uint32_t abandoned(struct sv_rq *rq, pid_t pid, bool mark)
{
	uint64_t c, t;
	uint32_t n = 0;

	if (!rq->xl || !rq->count)
		return 0;
	c = completed(rq);
	t = atomic_load(&rq->xl->x->taken);
	for (uint64_t k = c; k < t && k - c < rq->count; k++) {
		struct sv_xrecv *e = XE(rq, (uint32_t)(k % rq->size));

		if ((atomic_load_explicit(&e->flags, memory_order_acquire) & SV_XRECV_DONE) ||
		    atomic_load_explicit(&e->pid, memory_order_relaxed) != pid)
			continue;
		n++;
		if (mark) {
			e->byte_len = 0;
			atomic_store_explicit(&e->flags, SV_XRECV_DONE | SV_XRECV_ABORTED,
					      memory_order_release);
		}
	}
	return n;
}

/* The QP's lock held: its queue's WQEs that pid abandoned (its own
 * queue's, or its SRQ's), marked (mark) or counted; marked, they
 * complete now. */
static uint32_t qp_abandoned(struct sv_qp *qp, pid_t pid, bool mark)
{
	uint32_t n;

	if (!qp->srq) {
		n = abandoned(&qp->rq, pid, mark);
	} else if (!qp->srq->xrcd) {
		sv_mutex_lock(&qp->srq->lock);
		n = abandoned(&qp->srq->rq, pid, mark);
		sv_mutex_unlock(&qp->srq->lock);
	} else {
		return 0;
	}
	if (n && mark)
		sv_xrq_drain(qp);
	return n;
}

/* Has process pid exited (a zombie too), waiting up to ms for it? */
static bool process_exited(pid_t pid, int ms)
{
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r;

	if (fd < 0)
		return errno == ESRCH;
	while ((r = poll(&p, 1, ms)) < 0 && errno == EINTR)
		;
	close(fd);
	return r > 0;
}

void sv_xrq_peer_gone(struct sv_context *ctx, pid_t pid)
{
	struct sv_qp **held = NULL;
	uint32_t n = 0, found = 0;

	if (pid <= 0 || !atomic_load_explicit(&ctx->arena_on, memory_order_acquire))
		return;
	sv_mutex_lock(&ctx->lock);
	if (ctx->nqp && (held = malloc(sizeof(*held) * ctx->nqp)))
		for (uint32_t i = 0; i < ctx->qpt_size && n < ctx->nqp; i++)
			if (ctx->qpt[i]) {
				held[n++] = ctx->qpt[i];
				sv_qp_get(ctx->qpt[i]);
			}
	sv_mutex_unlock(&ctx->lock);
	for (uint32_t i = 0; i < n; i++) {
		sv_mutex_lock(&held[i]->lock);
		found += qp_abandoned(held[i], pid, false);
		sv_mutex_unlock(&held[i]->lock);
	}
	/* a process exits after its descriptors close: a short wait, and only
	 * for one that left a WQE taken (one that merely closed a connection
	 * lives on, and finishes what it placed) */
	if (found && process_exited(pid, 1000)) {
		sv_warn_limited("process %d exited inside a SEND it was placing: its receive "
				"completes as aborted (REM_ABORT_ERR)",
				(int)pid);
		for (uint32_t i = 0; i < n; i++) {
			sv_mutex_lock(&held[i]->lock);
			(void)qp_abandoned(held[i], pid, true);
			sv_mutex_unlock(&held[i]->lock);
		}
	}
	for (uint32_t i = 0; i < n; i++)
		sv_qp_put(held[i]);
	free(held);
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
