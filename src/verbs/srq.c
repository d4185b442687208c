/* Shared receive queues: a receive ring several QPs of one PD draw from. */
#include "verbs/verbs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static struct ibv_srq *srq_create(struct ibv_pd *ibpd, struct ibv_srq_init_attr *ia)
{
	struct sv_context *ctx = to_sv_ctx(ibpd->context);
	struct sv_srq *srq;

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
	if (sv_rq_init(&srq->rq, ia->attr.max_wr, ia->attr.max_sge)) {
		free(srq);
		goto nomem;
	}
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
	pthread_mutex_lock(&srq->lock);
	/* Checked as rxe does, all before anything changes: a new size within
	 * the device's limit, not below the limit armed (or being armed), and
	 * holding the WRs posted; a limit within the (new) size. */
	uint32_t size = (mask & IBV_SRQ_MAX_WR) ? attr->max_wr : srq->rq.size;
	uint32_t limit = (mask & IBV_SRQ_LIMIT) ? attr->srq_limit : srq->srq_limit;

	if ((mask & IBV_SRQ_MAX_WR) &&
	    (!attr->max_wr || attr->max_wr > SV_MAX_SRQ_WR || attr->max_wr < srq->rq.count))
		err = EINVAL;
	else if (limit > size)
		err = EINVAL;
	else if ((mask & IBV_SRQ_MAX_WR) && attr->max_wr != srq->rq.size)
		err = sv_rq_resize(&srq->rq, attr->max_wr);
	if (!err && (mask & IBV_SRQ_LIMIT))
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
	sv_rq_free(&srq->rq);
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
