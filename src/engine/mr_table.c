/*
 * Memory protection as the HCA applies it on every access: a key names a
 * slot of the context's MR table ((key ^ secret) >> 8) whose MR must carry
 * exactly that key, then PD, access flags and bounds are checked and the
 * local address returned.  The verbs (src/verbs/mr.c) register and
 * deregister under the table's write lock; accesses hold its read lock for
 * as long as they use the address.
 */
#include "engine/objects.h"

void sv_mr_read_lock(struct sv_context *ctx)
{
	pthread_rwlock_rdlock(&ctx->mrs.lock);
}

void sv_mr_read_unlock(struct sv_context *ctx)
{
	pthread_rwlock_unlock(&ctx->mrs.lock);
}

enum sv_mem_err sv_mr_translate(struct sv_context *ctx, uint32_t key, struct sv_pd *pd,
				uint64_t iova, uint64_t len, unsigned int need_access,
				uint8_t **ptr)
{
	uint32_t slot = (key ^ ctx->key_secret) >> 8;
	struct sv_mr *mr;

	if (slot >= ctx->mrs.nslots || !(mr = ctx->mrs.slots[slot]) || mr->ibmr.lkey != key)
		return SV_MEM_BAD_KEY;
	if (pd && mr->pd != pd)
		return SV_MEM_BAD_PD;
	if (need_access & ~mr->access)
		return SV_MEM_ACCESS;
	if (iova < mr->iova || len > mr->len || iova - mr->iova > mr->len - len)
		return SV_MEM_BOUNDS;
	*ptr = mr->vaddr + (iova - mr->iova);
	return SV_MEM_OK;
}

