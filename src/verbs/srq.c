/* Shared receive queues: a receive ring several QPs of one PD draw from. */
#include "verbs/verbs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int sv_rq_post(struct sv_rq *rq, const struct ibv_recv_wr *wr);

static struct ibv_srq *srq_create(struct ibv_pd *ibpd, struct ibv_srq_init_attr *ia)
{
	struct sv_context *ctx = to_sv_ctx(ibpd->context);
	struct sv_srq *srq;
	struct sv_rq *rq;

	if (!ia || ia->attr.max_wr == 0 || ia->attr.max_wr > SV_MAX_SRQ_WR ||
	    ia->attr.max_sge > SV_MAX_SGE || ia->attr.srq_limit > ia->attr.max_wr) {
		errno = EINVAL;
		return NULL;
	}
	if (!sv_ctx_reserve(ctx, &ctx->nsrq, SV_MAX_SRQ)) {
		errno = ENOMEM;
		return NULL;
	}
	srq = calloc(1, sizeof(*srq));
	if (!srq)
		goto nomem;
	rq = &srq->rq;
	rq->size = ia->attr.max_wr;
	rq->max_sge = SV_MAX(ia->attr.max_sge, 1u);
	rq->wqe = calloc(rq->size, sizeof(*rq->wqe));
	rq->sge_pool = calloc((size_t)rq->size * rq->max_sge, sizeof(struct ibv_sge));
	if (!rq->wqe || !rq->sge_pool) {
		free(rq->wqe);
		free(rq->sge_pool);
		free(srq);
		goto nomem;
	}
	for (uint32_t i = 0; i < rq->size; i++)
		rq->wqe[i].sge = rq->sge_pool + (size_t)i * rq->max_sge;
	srq->ctx = ctx;
	sv_ref_init(&srq->users, 0);
	srq->pd = to_sv_pd(ibpd);
	srq->srq_limit = ia->attr.srq_limit;
	pthread_mutex_init(&srq->lock, NULL);
	srq->ibsrq.context = ibpd->context;
	srq->ibsrq.srq_context = ia->srq_context;
	srq->ibsrq.pd = ibpd;
	pthread_mutex_init(&srq->ibsrq.mutex, NULL);
	pthread_cond_init(&srq->ibsrq.cond, NULL);
	sv_ref_get(&srq->pd->users);
	return &srq->ibsrq;
nomem:
	sv_ctx_release(ctx, &ctx->nsrq);
	errno = ENOMEM;
	return NULL;
}

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *srq_init_attr)
{
	if (!pd) {
		errno = EINVAL;
		return NULL;
	}
	return srq_create(pd, srq_init_attr);
}

struct ibv_srq *sv_create_srq_ex(struct ibv_context *context, struct ibv_srq_init_attr_ex *ia)
{
	struct ibv_srq_init_attr basic;

	(void)context;
	if (!(ia->comp_mask & IBV_SRQ_INIT_ATTR_PD) ||
	    (ia->comp_mask & ~(uint32_t)(IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE)) ||
	    ((ia->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && ia->srq_type != IBV_SRQT_BASIC)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	basic.srq_context = ia->srq_context;
	basic.attr = ia->attr;
	return srq_create(ia->pd, &basic);
}

int ibv_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr, int mask)
{
	struct sv_srq *srq = to_sv_srq(ibsrq);
	int err = 0;

	if (!attr || (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)))
		return EINVAL;
	if (mask & IBV_SRQ_MAX_WR)
		return EOPNOTSUPP; /* resizing an SRQ is not supported (no IBV_DEVICE_SRQ_RESIZE) */
	pthread_mutex_lock(&srq->lock);
	if ((mask & IBV_SRQ_LIMIT) && attr->srq_limit > srq->rq.size)
		err = EINVAL;
	else if (mask & IBV_SRQ_LIMIT)
		srq->srq_limit = attr->srq_limit;
	pthread_mutex_unlock(&srq->lock);
	return err;
}

int ibv_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
	struct sv_srq *srq = to_sv_srq(ibsrq);

	if (!attr)
		return EINVAL;
	pthread_mutex_lock(&srq->lock);
	attr->max_wr = srq->rq.size;
	attr->max_sge = srq->rq.max_sge;
	attr->srq_limit = srq->srq_limit;
	pthread_mutex_unlock(&srq->lock);
	return 0;
}

int ibv_destroy_srq(struct ibv_srq *ibsrq)
{
	struct sv_srq *srq = to_sv_srq(ibsrq);
	struct sv_context *ctx = srq->ctx;

	if (sv_ref_count(&srq->users))
		return EBUSY;
	sv_async_forget(ctx, &srq->async);
	sv_ref_put(&srq->pd->users);
	sv_ctx_release(ctx, &ctx->nsrq);
	free(srq->rq.wqe);
	free(srq->rq.sge_pool);
	pthread_mutex_destroy(&srq->lock);
	free(srq);
	return 0;
}

int sv_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	struct sv_srq *srq = to_sv_srq(ibsrq);
	int err = 0;

	pthread_mutex_lock(&srq->lock);
	for (; wr; wr = wr->next) {
		err = (wr->num_sge && !wr->sg_list) ? EINVAL : sv_rq_post(&srq->rq, wr);
		if (err) {
			*bad_wr = wr;
			break;
		}
	}
	pthread_mutex_unlock(&srq->lock);
	return err;
}
