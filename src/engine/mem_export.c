/*
 * The export table of a context: its QPs and the MRs whose pages peers of
 * this host may map (mem_export.h).  Written here, by the owner only; read
 * by engine/direct_exec.c in the peers.
 */
#include "engine/mem_export.h"
#include "engine/direct_recv.h"
#include "engine/engine.h"
#include "engine/mem_share.h"
#include "engine/objects.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* How long a revocation waits for a peer's access to end: one takes
 * microseconds; a peer stopped inside one (a debugger) is not waited for
 * longer (what it then stores lands in the pages it was given). */
#define QUIET_WAIT_NS 1000000000ull

/*
 * Where the kernel keeps the lock word of the table's liveness mutex: the
 * word it marks FUTEX_OWNER_DIED when the owner ends.  A thread names the
 * robust mutexes it holds to the kernel as a list (set_robust_list(2), the
 * robust futex ABI), each entry's lock word futex_offset bytes from it; so,
 * holding the mutex, this thread finds the entry whose word lies inside it
 * and holds its TID, as the kernel would.  The offset inside the mutex is
 * the same whoever holds it.  0 when it cannot be found.
 */
static uint32_t alive_word_offset(struct sv_xseg *x)
{
	uintptr_t lo = (uintptr_t)&x->alive, hi = lo + sizeof(x->alive), word;
	struct robust_list_head *head = NULL;
	struct robust_list *e;
	size_t len = 0;
	uint32_t off = 0;

	if (pthread_mutex_lock(&x->alive.m))
		return 0;
	if (!syscall(SYS_get_robust_list, 0, &head, &len) && head && len == sizeof(*head)) {
		e = head->list.next;
		/* (the low bit of an entry marks a PI futex) */
		for (int i = 0; i < 64 && e && e != &head->list; i++) {
			word = ((uintptr_t)e & ~(uintptr_t)1) + (uintptr_t)head->futex_offset;
			if (word >= lo && word + sizeof(uint32_t) <= hi && !(word & 3) &&
			    (__atomic_load_n((uint32_t *)word, __ATOMIC_RELAXED) & FUTEX_TID_MASK) ==
				    (uint32_t)syscall(SYS_gettid)) {
				off = (uint32_t)(word - (uintptr_t)x);
				break;
			}
			e = ((struct robust_list *)((uintptr_t)e & ~(uintptr_t)1))->next;
		}
	}
	pthread_mutex_unlock(&x->alive.m);
	return off;
}

bool sv_export_open(struct sv_context *ctx)
{
	pthread_mutexattr_t ma;
	struct sv_xseg *x;
	struct stat st;
	int fd;

	ctx->xfd = -1;
	if (!sv_env_long("SOFTVERBS_SHARED_MR", 1))
		return false;
	fd = memfd_create("softverbs-export", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return false;
	if (ftruncate(fd, sizeof(*x)) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) || fstat(fd, &st) ||
	    (x = mmap(NULL, sizeof(*x), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		close(fd);
		return false;
	}
	x->magic = SV_XSEG_MAGIC;
	x->version = SV_XSEG_VERSION;
	x->qpn_base = ctx->qpn_base;
	x->qpn_key = ctx->qpn_key;
	if (!pthread_mutexattr_init(&ma)) {
		if (!pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED) &&
		    !pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST) &&
		    !pthread_mutex_init(&x->alive.m, &ma)) {
			x->alive_off = alive_word_offset(x);
			sv_engine_hold_alive(ctx->eng, &x->alive.m); /* taken at its next pass */
		}
		pthread_mutexattr_destroy(&ma);
	}
	ctx->xseg = x;
	ctx->xfd = fd;
	(void)sv_xrq_arena_open(ctx); /* without it, receive queues are private */
	sv_qpn_publish_export(&ctx->eng->qpns, fd, (uint64_t)st.st_ino);
	return true;
}

void sv_export_close(struct sv_context *ctx)
{
	free(atomic_load(&ctx->xqp_gone));
	atomic_store(&ctx->xqp_gone, NULL);
	if (!ctx->xseg)
		return;
	/* the registry's block was released with the engine: nobody finds the
	 * table any more, and the connections of the peers that map it are gone */
	sv_xrq_arena_close(ctx);
	munmap(ctx->xseg, sizeof(*ctx->xseg));
	close(ctx->xfd);
	ctx->xseg = NULL;
	ctx->xfd = -1;
}

void sv_xqp_wake(struct sv_xqp *q)
{
	uint32_t idle = SV_XQP_WAITER;

	/* cleared only while the count is 0: a waiter that finds it cleared
	 * after it looked knows the count has been 0 since, even if an access
	 * began again at once (if one began already, its end clears it) */
	atomic_compare_exchange_strong(&q->busy, &idle, 0);
	syscall(SYS_futex, &q->busy, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* The busy count of q has been 0 since this was called (false: not by
 * the deadline).  Sleeps on the count, with SV_XQP_WAITER set. */
static bool wait_idle(struct sv_xqp *q, uint64_t deadline)
{
	uint32_t v = atomic_load(&q->busy);
	struct timespec ts;
	uint64_t now, left;

	for (;;) {
		if (!(v & ~SV_XQP_WAITER))
			return true;
		if (!(v & SV_XQP_WAITER)) {
			if (!atomic_compare_exchange_weak(&q->busy, &v, v | SV_XQP_WAITER))
				continue; /* v is the count now */
			v |= SV_XQP_WAITER;
		}
		now = sv_now_ns();
		if (now >= deadline)
			return false;
		left = deadline - now;
		ts.tv_sec = (time_t)(left / 1000000000u);
		ts.tv_nsec = (long)(left % 1000000000u);
		/* (the table is shared with other processes: not a private futex) */
		syscall(SYS_futex, &q->busy, FUTEX_WAIT, v, &ts, NULL, 0);
		v = atomic_load(&q->busy);
		if (!(v & SV_XQP_WAITER))
			return true; /* cleared by the access that took it to 0 */
	}
}

/* Slot i's QP was destroyed with a peer's access through its record not
 * ended in the time given (sv_export_slot_give_up). */
static bool slot_gone(const struct sv_context *ctx, uint32_t i)
{
	const uint64_t *gone = atomic_load_explicit(&ctx->xqp_gone, memory_order_acquire);

	return gone && (__atomic_load_n(&gone[i / 64], __ATOMIC_RELAXED) >> (i % 64) & 1);
}

/* Every peer access through a QP of the context that had begun has ended
 * (but those given up on when their QP was destroyed: a peer that died
 * inside one leaves its count raised for good, and every revocation
 * would wait for it again). */
static void wait_quiet(struct sv_context *ctx)
{
	uint64_t deadline = sv_now_ns() + QUIET_WAIT_NS;
	/* a peer passes its checks only through an open QP's record: those of
	 * the QP table (whose pages are the only ones touched, so far) */
	uint32_t n = SV_MIN(__atomic_load_n(&ctx->qpt_size, __ATOMIC_RELAXED),
			    (uint32_t)SV_QPN_BLOCK);
	struct sv_xqp *q = ctx->xseg->qp;

	sv_fence();
	for (uint32_t i = 0; i < n; i++)
		if (!slot_gone(ctx, i) && !wait_idle(&q[i], deadline))
			sv_warn_limited("a peer's access through QP %#x has not ended in 1 s; "
					"going on",
					sv_qpn_of_slot(ctx, i));
}

struct sv_extent *sv_export_share(struct sv_context *ctx, void *addr, size_t len,
				  unsigned int access, bool gpu)
{
	if (!ctx->xseg || !atomic_load(&ctx->xshare) || gpu || !addr ||
	    (access & IBV_ACCESS_ON_DEMAND) ||
	    !(access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
			IBV_ACCESS_LOCAL_WRITE)))
		return NULL;
	return sv_share_get(addr, len);
}

void sv_export_share_all(struct sv_context *ctx)
{
	struct sv_mr_table *t = &ctx->mrs;

	if (!ctx->xseg || atomic_exchange(&ctx->xshare, true))
		return;
	/* the table's write lock: no MR goes or changes meanwhile, and no
	 * access of this context is in progress (each copy is the only one
	 * these pages will ever need) */
	sv_arwlock_wrlock(&t->lock);
	for (uint32_t i = 0; i < t->size; i++) {
		struct sv_mr *mr = t->tab[i];

		if (!mr || mr->kind != SV_KEY_MR || mr->ext)
			continue;
		mr->ext = sv_export_share(ctx, mr->vaddr, mr->len, mr->access, mr->gpu);
		sv_export_mr(ctx, mr);
	}
	sv_arwlock_wrunlock(&t->lock);
}

void sv_export_mr(struct sv_context *ctx, struct sv_mr *mr)
{
	struct sv_xseg *x = ctx->xseg;
	struct sv_xmr *m;
	uint32_t i;

	if (!x || !mr->ext)
		return;
	for (i = ctx->xmr_hint; i < SV_XMR_SLOTS && atomic_load(&x->mr[i].rkey); i++)
		;
	if (i == SV_XMR_SLOTS)
		return; /* peers reach it through the engine */
	ctx->xmr_hint = i + 1;
	m = &x->mr[i];
	atomic_fetch_add(&m->seq, 1); /* odd: being written */
	atomic_store(&m->pd, mr->pd->ibpd.handle);
	atomic_store(&m->access, mr->access);
	atomic_store(&m->iova, mr->iova);
	atomic_store(&m->len, mr->len);
	atomic_store(&m->ino, mr->ext->ino);
	atomic_store(&m->size, mr->ext->len);
	atomic_store(&m->off, (uint64_t)((uintptr_t)mr->vaddr - mr->ext->start));
	atomic_store(&m->fd, mr->ext->fd);
	atomic_store(&m->rkey, mr->ibmr.rkey);
	atomic_fetch_add(&m->seq, 1);
	if (atomic_load(&x->nmr) <= i)
		atomic_store(&x->nmr, i + 1);
	mr->xslot = i + 1;
}

bool sv_export_mr_revoke(struct sv_context *ctx, struct sv_mr *mr)
{
	struct sv_xmr *m;

	if (!mr->xslot)
		return false;
	m = &ctx->xseg->mr[mr->xslot - 1];
	atomic_fetch_add(&m->seq, 1);
	atomic_store(&m->rkey, 0);
	atomic_fetch_add(&m->seq, 1);
	/* the slot may be taken again at once: a peer that read it before
	 * works from its copy, and sv_export_quiesce waits for it */
	if (mr->xslot - 1 < ctx->xmr_hint)
		ctx->xmr_hint = mr->xslot - 1;
	mr->xslot = 0;
	return true;
}

void sv_export_quiesce(struct sv_context *ctx)
{
	if (ctx->xseg)
		wait_quiet(ctx);
}

static bool executes_requests(const struct sv_qp *qp)
{
	return qp->ex.qp_base.qp_type == IBV_QPT_RC && !qp->destroyed &&
	       sv_qp_state_receives(qp->state);
}

struct sv_xqp *sv_export_qp_record(struct sv_qp *qp)
{
	struct sv_context *ctx = qp->ctx;
	uint32_t slot = sv_qpn_slot(ctx, qp->ex.qp_base.qp_num);

	return ctx->xseg && slot < SV_QPN_BLOCK ? &ctx->xseg->qp[slot] : NULL;
}

static bool xqp_current(const struct sv_xqp *q, const struct sv_qp *qp)
{
	return atomic_load(&q->pd) == qp->pd->ibpd.handle &&
	       atomic_load(&q->access) == qp->attr.qp_access_flags &&
	       atomic_load(&q->dest_qpn) == qp->attr.dest_qp_num;
}

bool sv_export_qp(struct sv_qp *qp)
{
	struct sv_xqp *q = sv_export_qp_record(qp);

	if (!q)
		return false;
	if (atomic_load(&q->open)) {
		if (executes_requests(qp) && xqp_current(q, qp))
			return false; /* nothing peers check changed */
		/* a peer that looks from now on goes by the wire; the accesses
		 * that passed their checks before are waited out by settle */
		atomic_store(&q->open, 0);
	}
	return true;
}

/* The record q of qp is closed: the accesses that passed its checks end
 * (at most QUIET_WAIT_NS); false if one has not. */
static bool qp_record_quiet(struct sv_xqp *q, const struct sv_qp *qp)
{
	sv_fence();
	if (wait_idle(q, sv_now_ns() + QUIET_WAIT_NS))
		return true;
	sv_warn_limited("a peer's access through QP %#x has not ended in 1 s; going on",
			qp->ex.qp_base.qp_num);
	return false;
}

void sv_export_slot_give_up(struct sv_context *ctx, uint32_t slot)
{
	uint64_t *gone = atomic_load(&ctx->xqp_gone);

	if (slot >= SV_QPN_BLOCK)
		return;
	if (!gone) {
		gone = calloc(SV_QPN_BLOCK / 64, sizeof(*gone));
		if (!gone)
			return; /* revocations keep waiting for it: slower, not wrong */
		atomic_store_explicit(&ctx->xqp_gone, gone, memory_order_release);
	}
	__atomic_fetch_or(&gone[slot / 64], 1ull << (slot % 64), __ATOMIC_RELAXED);
}

bool sv_export_slot_free(struct sv_context *ctx, uint32_t slot)
{
	uint64_t *gone = atomic_load(&ctx->xqp_gone);

	if (!ctx->xseg || slot >= SV_QPN_BLOCK)
		return true;
	if (atomic_load(&ctx->xseg->qp[slot].busy) & ~SV_XQP_WAITER)
		return false;
	/* (ended since: a peer stopped inside it went on) */
	if (gone)
		__atomic_fetch_and(&gone[slot / 64], ~(1ull << (slot % 64)), __ATOMIC_RELAXED);
	return true;
}

bool sv_export_qp_entered(struct sv_qp *qp)
{
	struct sv_xqp *q = sv_export_qp_record(qp);

	if (!q)
		return false;
	sv_fence(); /* the record's closing, before the count is read */
	return atomic_load(&q->busy) & ~SV_XQP_WAITER;
}

void sv_export_qp_wait_peers(struct sv_qp *qp)
{
	struct sv_xqp *q = sv_export_qp_record(qp);

	if (q)
		qp_record_quiet(q, qp);
}

void sv_export_qp_quiet(struct sv_qp *qp)
{
	struct sv_xqp *q = sv_export_qp_record(qp);

	if (!q)
		return;
	atomic_store(&q->open, 0);
	qp_record_quiet(q, qp);
}

bool sv_export_qp_settle(struct sv_qp *qp)
{
	struct sv_xqp *q = sv_export_qp_record(qp);
	bool quiet;

	if (!q)
		return true;
	/* the record has been closed since before this began (sv_export_qp):
	 * once the accesses in progress end, nobody is inside its checks, and
	 * it can be filled and opened again without a peer reading half of it */
	quiet = qp_record_quiet(q, qp);
	sv_mutex_lock(&qp->lock);
	/* (the latest attributes: a change made meanwhile by another thread
	 * found the record closed and settles it too) */
	if (executes_requests(qp) && !atomic_load(&q->open)) {
		atomic_store(&q->pd, qp->pd->ibpd.handle);
		atomic_store(&q->access, qp->attr.qp_access_flags);
		atomic_store(&q->dest_qpn, qp->attr.dest_qp_num);
		sv_xrq_record(qp, q); /* its receive queue, if peers may read it */
		atomic_store(&q->open, 1);
	}
	sv_mutex_unlock(&qp->lock);
	return quiet;
}
