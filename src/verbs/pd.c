/* Protection domains: the scope every MR, QP, SRQ and AH belongs to. */
#include "verbs/verbs.h"

#include <errno.h>
#include <stdlib.h>

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct sv_context *ctx = to_sv_ctx(context);
	struct sv_pd *pd;

	if (!sv_ctx_reserve(ctx, &ctx->npd, SV_MAX_PD)) {
		errno = ENOMEM;
		return NULL;
	}
	pd = calloc(1, sizeof(*pd));
	if (!pd) {
		sv_ctx_release(ctx, &ctx->npd);
		errno = ENOMEM;
		return NULL;
	}
	pd->ibpd.context = context;
	pd->ibpd.handle = sv_random_u32();
	sv_ref_init(&pd->users, 0);
	return &pd->ibpd;
}

int ibv_dealloc_pd(struct ibv_pd *ibpd)
{
	struct sv_pd *pd = to_sv_pd(ibpd);
	struct sv_context *ctx = to_sv_ctx(ibpd->context);

	if (sv_ref_count(&pd->users))
		return EBUSY;
	sv_ctx_release(ctx, &ctx->npd);
	free(pd);
	return 0;
}

struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
	(void)context;
	(void)pd_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

void ibv_unimport_pd(struct ibv_pd *pd)
{
	(void)pd;
}
