/*
 * The export table of a context: its QPs and the MRs whose pages peers of
 * this host may map (mem_export.h).  Written here, by the owner only; read
 * by engine/peer_mem.c in the peers.
 */
#include "engine/mem_export.h"
#include "engine/engine.h"
#include "engine/mem_share.h"
#include "engine/objects.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* How long a revocation waits for a peer's access to end: one takes
 * microseconds; a peer stopped inside one (a debugger) is not waited for
 * longer (what it then stores lands in the pages it was given). */
#define QUIET_WAIT_NS 1000000000ull

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
		    !pthread_mutex_init(&x->alive.m, &ma))
			sv_engine_hold_alive(ctx->eng, &x->alive.m); /* taken at its next pass */
		pthread_mutexattr_destroy(&ma);
	}
	ctx->xseg = x;
	ctx->xfd = fd;
	sv_qpn_publish_export(&ctx->eng->qpns, fd, (uint64_t)st.st_ino);
	return true;
}

void sv_export_close(struct sv_context *ctx)
{
	if (!ctx->xseg)
		return;
	/* the registry's block was released with the engine: nobody finds the
	 * table any more, and the connections of the peers that map it are gone */
	munmap(ctx->xseg, sizeof(*ctx->xseg));
	close(ctx->xfd);
	ctx->xseg = NULL;
	ctx->xfd = -1;
}

/* Every peer access through a QP of the context that had begun has ended. */
static void wait_quiet(struct sv_context *ctx, struct sv_xqp *only)
{
	uint64_t deadline = sv_now_ns() + QUIET_WAIT_NS;
	/* a peer passes its checks only through an open QP's record: those of
	 * the QP table (whose pages are the only ones touched, so far) */
	uint32_t n = only ? 1 : SV_MIN(__atomic_load_n(&ctx->qpt_size, __ATOMIC_RELAXED),
				     (uint32_t)SV_QPN_BLOCK);
	struct sv_xqp *q = only ? only : ctx->xseg->qp;

	atomic_thread_fence(memory_order_seq_cst);
	for (uint32_t i = 0; i < n; i++) {
		while (atomic_load(&q[i].busy)) {
			if (sv_now_ns() > deadline) {
				sv_warn_limited("a peer's access through QP %#x has not ended in 1 s; "
						"going on",
						sv_qpn_of_slot(ctx, (uint32_t)(q + i - ctx->xseg->qp)));
				break;
			}
			sched_yield();
		}
	}
}

struct sv_extent *sv_export_share(struct sv_context *ctx, void *addr, size_t len,
				  unsigned int access, bool gpu)
{
	if (!ctx->xseg || !atomic_load(&ctx->xshare) || gpu || !addr ||
	    (access & IBV_ACCESS_ON_DEMAND) ||
	    !(access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)))
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

void sv_export_mr_revoke(struct sv_context *ctx, struct sv_mr *mr)
{
	struct sv_xmr *m;

	if (!mr->xslot)
		return;
	m = &ctx->xseg->mr[mr->xslot - 1];
	atomic_fetch_add(&m->seq, 1);
	atomic_store(&m->rkey, 0);
	atomic_fetch_add(&m->seq, 1);
	wait_quiet(ctx, NULL);
	if (mr->xslot - 1 < ctx->xmr_hint)
		ctx->xmr_hint = mr->xslot - 1;
	mr->xslot = 0;
}

static bool executes_requests(const struct sv_qp *qp)
{
	return qp->ex.qp_base.qp_type == IBV_QPT_RC && !qp->destroyed &&
	       sv_qp_state_receives(qp->state);
}

void sv_export_qp(struct sv_qp *qp)
{
	struct sv_context *ctx = qp->ctx;
	uint32_t slot = sv_qpn_slot(ctx, qp->ex.qp_base.qp_num);
	struct sv_xqp *q;
	bool open;

	/* (another process's XRC receive QP, whose requests we execute, has
	 * no record here) */
	if (!ctx->xseg || slot >= SV_QPN_BLOCK)
		return;
	q = &ctx->xseg->qp[slot];
	open = executes_requests(qp);
	if (open && atomic_load(&q->open) && atomic_load(&q->pd) == qp->pd->ibpd.handle &&
	    atomic_load(&q->access) == qp->attr.qp_access_flags &&
	    atomic_load(&q->dest_qpn) == qp->attr.dest_qp_num)
		return; /* nothing peers check changed */
	if (atomic_load(&q->open)) {
		atomic_store(&q->open, 0);
		wait_quiet(ctx, q);
	}
	if (!open)
		return;
	atomic_store(&q->pd, qp->pd->ibpd.handle);
	atomic_store(&q->access, qp->attr.qp_access_flags);
	atomic_store(&q->dest_qpn, qp->attr.dest_qp_num);
	atomic_store(&q->open, 1);
}
