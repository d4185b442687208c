/*
 * Memory protection as the HCA applies it on every access: a key names the
 * entry of the context's key table (an MR or a memory window) that carries
 * exactly that key, then PD, access flags and bounds are checked and the
 * local address returned.  Keys are random (objects.h, struct
 * sv_mr_table).  Binding and invalidating windows happen here too, under
 * the write lock.  The verbs (src/verbs/mr.c) register and deregister under
 * the table's write lock; accesses hold its read lock for as long as they
 * use the address.
 */
#include "engine/access_check.h"
#include "engine/objects.h"

#include <stdlib.h>

static uint32_t key_hi(const struct sv_mr *e)
{
	return e->ibmr.lkey >> 8;
}

/* The position of the entry with these upper bits, or of the empty one
 * that ends its probe sequence. */
static uint32_t probe(const struct sv_mr_table *t, uint32_t hi)
{
	uint32_t i = hi & (t->size - 1);

	while (t->tab[i] && key_hi(t->tab[i]) != hi)
		i = (i + 1) & (t->size - 1);
	return i;
}

struct sv_mr *sv_key_find_hi(struct sv_context *ctx, uint32_t hi)
{
	const struct sv_mr_table *t = &ctx->mrs;

	return t->size ? t->tab[probe(t, hi)] : NULL;
}

struct sv_mr *sv_key_entry(struct sv_context *ctx, uint32_t key)
{
	struct sv_mr *e = sv_key_find_hi(ctx, key >> 8);

	return e && e->ibmr.lkey == key ? e : NULL;
}

static int grow(struct sv_mr_table *t)
{
	uint32_t n = t->size ? t->size * 2 : 64;
	struct sv_mr **old = t->tab, **tab = calloc(n, sizeof(*tab));
	uint32_t oldn = t->size;

	if (!tab)
		return -1;
	t->tab = tab;
	t->size = n;
	for (uint32_t i = 0; i < oldn; i++)
		if (old[i])
			t->tab[probe(t, key_hi(old[i]))] = old[i];
	free(old);
	return 0;
}

int sv_key_insert(struct sv_mr_table *t, struct sv_mr *e)
{
	uint32_t key, i;

	if (t->count >= SV_MAX_MR || ((t->count + 1) * 2 > t->size && grow(t)))
		return -1;
	do {
		key = sv_random_u32();
		i = probe(t, key >> 8);
	} while (!(key >> 8) || t->tab[i]); /* upper bits in use (or 0): again */
	e->ibmr.lkey = e->ibmr.rkey = key;
	t->tab[i] = e;
	t->count++;
	return 0;
}

void sv_key_remove(struct sv_mr_table *t, struct sv_mr *e)
{
	uint32_t mask = t->size - 1, i = probe(t, key_hi(e)), j = i;

	if (t->tab[i] != e)
		return;
	t->tab[i] = NULL;
	t->count--;
	/* close the gap: an entry further on whose probe sequence crosses it
	 * moves into it (backward-shift deletion, no tombstones) */
	for (;;) {
		struct sv_mr *m;
		uint32_t home;

		j = (j + 1) & mask;
		if (!(m = t->tab[j]))
			return;
		home = key_hi(m) & mask;
		if (((j - home) & mask) >= ((j - i) & mask)) {
			t->tab[i] = m;
			t->tab[j] = NULL;
			i = j;
		}
	}
}

/* The PD a caller asks for: NULL, any (the caller checked it otherwise). */
static inline uintptr_t want_pd(const struct sv_mr *e, const struct sv_pd *pd)
{
	return pd ? (uintptr_t)pd : (uintptr_t)e->pd;
}

/* What the checks see of an MR or a window (engine/access_check.h). */
static inline struct sv_key_view key_view(const struct sv_mr *e)
{
	bool mw = e->kind == SV_KEY_MW;

	return (struct sv_key_view){
		.pd = (uintptr_t)e->pd,
		.access = e->access,
		.iova = e->iova,
		.len = e->len,
		/* unbound or invalidated; a type 2 window answers its own QP only */
		.unbound = mw && !e->mw_mr,
		.qp_bound = mw && e->ibmw->type == IBV_MW_TYPE_2,
		.bound_qpn = mw ? e->mw_qpn : 0,
	};
}

/* The address of [iova, ...) of e, once the checks have passed. */
static inline void key_address(const struct sv_mr *e, uint64_t iova, uint8_t **ptr,
			       sv_cu_ctx *gpu)
{
	/* in integers: an implicit MR's vaddr is NULL (verbs/mr.c) */
	*ptr = (uint8_t *)((uintptr_t)e->vaddr + (uintptr_t)(iova - e->iova));
	if (gpu)
		*gpu = e->gpu;
}

enum sv_mem_err sv_mr_translate(struct sv_context *ctx, uint32_t key, struct sv_pd *pd,
				uint64_t iova, uint64_t len, unsigned int need_access,
				uint8_t **ptr, sv_cu_ctx *gpu)
{
	struct sv_mr *e = sv_key_entry(ctx, key);
	struct sv_key_view k;
	enum sv_mem_err r;

	/* a window's key is for peers only, never an lkey */
	if (!e || e->kind != SV_KEY_MR)
		return SV_MEM_BAD_KEY;
	k = key_view(e);
	r = sv_key_allows_range(&k, want_pd(e, pd), need_access, iova, len);
	if (r == SV_MEM_OK)
		key_address(e, iova, ptr, gpu);
	return r;
}

enum sv_mem_err sv_key_translate_remote(struct sv_context *ctx, uint32_t key, struct sv_pd *pd,
					uint32_t qpn, uint64_t iova, uint64_t len,
					unsigned int need_access, uint8_t **ptr, sv_cu_ctx *gpu)
{
	struct sv_mr *e = sv_key_entry(ctx, key);
	struct sv_key_view k;
	enum sv_mem_err r;

	if (!e)
		return SV_MEM_BAD_KEY;
	k = key_view(e);
	r = sv_key_allows_remote(&k, want_pd(e, pd), qpn, need_access, iova, len);
	if (r == SV_MEM_OK)
		key_address(e, iova, ptr, gpu);
	return r;
}

/* Write lock held: the window no longer names a range. */
static void mw_unbind(struct sv_mr *mw)
{
	if (mw->mw_mr)
		mw->mw_mr->nmw--;
	mw->mw_mr = NULL;
	mw->len = 0;
	mw->gpu = NULL;
}

/*
 * A window's key changes only in its low eight bits (ibv_inc_rkey), so the
 * entry it names stays the same.  Checks as the IBA and rxe make them; a
 * refused bind changes nothing.
 */
enum ibv_wc_status sv_mw_bind(struct sv_qp *qp, struct sv_send_wqe *w)
{
	struct sv_context *ctx = qp->ctx;
	const struct ibv_mw_bind_info *bi = &w->wr.bind_mw.bind_info;
	unsigned int acc = bi->mw_access_flags;
	uint32_t new_key = w->wr.bind_mw.rkey;
	struct sv_mr *mw = w->bind_mw, *mr = NULL;
	bool zero = acc & IBV_ACCESS_ZERO_BASED, ok;

	sv_arwlock_wrlock(&ctx->mrs.lock);
	/* the window may have been deallocated since the post */
	ok = sv_key_find_hi(ctx, w->bind_hi) == mw && (new_key >> 8) == w->bind_hi;
	if (ok && w->bind_lkey) {
		mr = sv_key_entry(ctx, w->bind_lkey);
		ok = mr && mr->kind == SV_KEY_MR && mr->pd == mw->pd &&
		     (mr->access & IBV_ACCESS_MW_BIND) && !(mr->access & IBV_ACCESS_ZERO_BASED) &&
		     /* a writable window needs an MR the HCA may write locally */
		     (!(acc & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) ||
		      (mr->access & IBV_ACCESS_LOCAL_WRITE)) &&
		     bi->addr >= mr->iova && bi->length <= mr->len &&
		     bi->addr - mr->iova <= mr->len - bi->length;
	}
	if (ok && mw->ibmw->type == IBV_MW_TYPE_1)
		ok = !zero && mw->pd == qp->pd; /* o10-36.2.2 */
	else if (ok) /* type 2: free, the QP's PD, and a real range (o10-37.2.30, .40) */
		ok = !mw->mw_mr && mw->pd == qp->pd && mr && bi->length;
	if (ok) {
		mw_unbind(mw);
		if (mr) {
			mw->mw_mr = mr;
			mr->nmw++;
			mw->vaddr = (uint8_t *)((uintptr_t)mr->vaddr + (uintptr_t)(bi->addr - mr->iova));
			mw->gpu = mr->gpu;
			mw->iova = zero ? 0 : bi->addr;
			mw->len = bi->length;
			mw->access = acc & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
					    IBV_ACCESS_REMOTE_ATOMIC);
			mw->mw_qpn = qp->ex.qp_base.qp_num;
		}
		mw->ibmr.lkey = mw->ibmr.rkey = new_key;
	}
	sv_arwlock_wrunlock(&ctx->mrs.lock);
	return ok ? IBV_WC_SUCCESS : IBV_WC_MW_BIND_ERR;
}

/* LOCAL_INV: a type 2 window bound to this QP stops answering at once. */
enum ibv_wc_status sv_mw_local_inv(struct sv_qp *qp, uint32_t rkey)
{
	struct sv_context *ctx = qp->ctx;
	struct sv_mr *e;
	bool ok;

	sv_arwlock_wrlock(&ctx->mrs.lock);
	e = sv_key_entry(ctx, rkey);
	ok = e && e->kind == SV_KEY_MW && e->ibmw->type == IBV_MW_TYPE_2 && e->mw_mr &&
	     e->mw_qpn == qp->ex.qp_base.qp_num;
	if (ok)
		mw_unbind(e);
	sv_arwlock_wrunlock(&ctx->mrs.lock);
	return ok ? IBV_WC_SUCCESS : IBV_WC_LOC_QP_OP_ERR;
}
