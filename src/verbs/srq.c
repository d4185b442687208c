/*
 * Shared receive queues: a receive ring several QPs of one PD draw from.
 * An XRC SRQ belongs to an XRC domain and has a CQ of its own: XRC receive
 * QPs of the domain deliver into it the requests that name its number.
 * Every SRQ has a number (ibv_get_srq_num), from the context's block, as
 * its QPs' numbers are: unique on the host.
 */
#include "verbs/verbs.h"
#include "engine/engine.h"
#include "engine/direct_recv.h"
#include "engine/xrc_relay.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ctx->srqt_lock held: a free slot of the SRQ table for srq, or -1. */
static int srq_slot_take(struct sv_context *ctx, struct sv_srq *srq)
{
	uint32_t i;

	for (i = 0; i < ctx->srqt_size && ctx->srqt[i]; i++)
		;
	if (i == ctx->srqt_size) {
		uint32_t n = ctx->srqt_size ? ctx->srqt_size * 2 : 16;
		struct sv_srq **t;

		if (n > SV_MAX_SRQ || !(t = realloc(ctx->srqt, sizeof(*t) * n)))
			return -1;
		memset(t + ctx->srqt_size, 0, sizeof(*t) * (n - ctx->srqt_size));
		ctx->srqt = t;
		ctx->srqt_size = n;
	}
	ctx->srqt[i] = srq;
	return (int)i;
}

static struct ibv_srq *srq_create(struct ibv_pd *ibpd, struct ibv_srq_attr *a, void *srq_context,
				  struct sv_xrcd *xrcd, struct sv_cq *cq)
{
	struct sv_context *ctx = to_sv_ctx(ibpd->context);
	struct sv_srq *srq;
	int slot;

	if (a->max_wr == 0 || a->max_wr > SV_MAX_SRQ_WR || a->max_sge > SV_MAX_SGE ||
	    a->srq_limit > a->max_wr) {
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
	if (sv_rq_init(&srq->rq, a->max_wr, a->max_sge)) {
		free(srq);
		goto nomem;
	}
	sv_mutex_lock(&ctx->srqt_lock);
	slot = srq_slot_take(ctx, srq);
	sv_mutex_unlock(&ctx->srqt_lock);
	if (slot < 0) {
		sv_rq_free(&srq->rq);
		free(srq);
		goto nomem;
	}
	srq->slot = (uint32_t)slot;
	srq->ctx = ctx;
	sv_ref_init(&srq->users, 0);
	srq->pd = to_sv_pd(ibpd);
	srq->srq_limit = a->srq_limit;
	srq->xrcd = xrcd;
	srq->cq = cq;
	sv_mutex_init(&srq->lock, SV_LOCK_SRQ);
	srq->ibsrq.context = ibpd->context;
	srq->ibsrq.srq_context = srq_context;
	srq->ibsrq.pd = ibpd;
	srq->srq_num = sv_srqn_of_slot(ctx, srq->slot);
	pthread_mutex_init(&srq->ibsrq.mutex, NULL);
	pthread_cond_init(&srq->ibsrq.cond, NULL);
	sv_ref_get(&srq->pd->users);
	if (xrcd) {
		sv_ref_get(&xrcd->users);
		sv_ref_get(&cq->users);
	}
	return &srq->ibsrq;
nomem:
	sv_ctx_release(ctx, &ctx->nsrq);
	errno = ENOMEM;
	return NULL;
}

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *srq_init_attr)
{
	if (!pd || !srq_init_attr) {
		errno = EINVAL;
		return NULL;
	}
	return srq_create(pd, &srq_init_attr->attr, srq_init_attr->srq_context, NULL, NULL);
}

struct ibv_srq *sv_create_srq_ex(struct ibv_context *context, struct ibv_srq_init_attr_ex *ia)
{
	const uint32_t known = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD |
			       IBV_SRQ_INIT_ATTR_CQ;
	enum ibv_srq_type type =
		(ia->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) ? ia->srq_type : IBV_SRQT_BASIC;

	/* tag matching and any other kind: not here */
	if ((ia->comp_mask & ~known) || (type != IBV_SRQT_BASIC && type != IBV_SRQT_XRC)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(ia->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !ia->pd || ia->pd->context != context) {
		errno = EINVAL;
		return NULL;
	}
	if (type == IBV_SRQT_XRC) {
		/* an XRC SRQ needs its domain and its CQ, of this context */
		if (!(ia->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !(ia->comp_mask & IBV_SRQ_INIT_ATTR_CQ) ||
		    !ia->xrcd || !ia->cq || ia->cq->context != context ||
		    to_sv_xrcd(ia->xrcd)->ctx != to_sv_ctx(context)) {
			errno = EINVAL;
			return NULL;
		}
		return srq_create(ia->pd, &ia->attr, ia->srq_context, to_sv_xrcd(ia->xrcd),
				  to_sv_cq(ia->cq));
	}
	return srq_create(ia->pd, &ia->attr, ia->srq_context, NULL, NULL);
}

int sv_get_srq_num(struct ibv_srq *ibsrq, uint32_t *srq_num)
{
	if (!ibsrq || !srq_num)
		return EINVAL;
	*srq_num = to_sv_srq(ibsrq)->srq_num;
	return 0;
}

/*
 * The XRC SRQ numbered srq_num in xrcd, or NULL.  The caller holds the lock
 * of an XRC receive QP of xrcd: the SRQ stays until the QP lets go of it
 * (ibv_destroy_srq detaches it from those QPs under their locks first).
 */
struct sv_srq *sv_xrc_srq_lookup(struct sv_context *ctx, struct sv_xrcd *xrcd, uint32_t srq_num)
{
	uint32_t slot = sv_srqn_slot(ctx, srq_num);
	struct sv_srq *srq = NULL;

	sv_mutex_lock(&ctx->srqt_lock);
	if (slot < ctx->srqt_size && ctx->srqt[slot] &&
	    ctx->srqt[slot]->xrcd == xrcd)
		srq = ctx->srqt[slot];
	sv_mutex_unlock(&ctx->srqt_lock);
	return srq;
}

/*
 * An XRC SRQ goes: no request finds it any more, and the XRC receive QPs
 * whose current request named it forget it (their PD and CQ were its).
 */
static void xrc_srq_detach(struct sv_srq *srq)
{
	uint32_t n;
	struct sv_qp **held = sv_xrcd_hold_qps(srq->ctx, srq->xrcd, &n);

	for (uint32_t i = 0; i < n; i++) {
		struct sv_qp *qp = held[i];

		sv_mutex_lock(&qp->lock);
		if (qp->srq == srq) {
			sv_responder_cancel(qp); /* a READ still being answered */
			sv_responder_srq_gone(qp, false);
			qp->srq = NULL;
			qp->pd = NULL;
			qp->rcq = NULL;
		}
		sv_mutex_unlock(&qp->lock);
		sv_qp_put(qp);
	}
	free(held);
}

int ibv_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr, int mask)
{
	struct sv_srq *srq = to_sv_srq(ibsrq);
	bool crossed = false;
	int err = 0;

	if (!attr || (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)))
		return EINVAL;
	sv_mutex_lock(&srq->lock);
	/* (what peers of this host placed completes first: the WRs posted
	 * are those left) */
	sv_xrq_srq_drain(srq, &crossed);
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
	else if ((mask & IBV_SRQ_MAX_WR) && attr->max_wr != srq->rq.size) {
		/* in the arena, the queue comes back to be resized (peers of
		 * this host move it there again) */
		if (srq->rq.xl)
			err = sv_xrq_srq_unshare(srq, &crossed);
		if (!err)
			err = sv_rq_resize(&srq->rq, attr->max_wr);
	}
	if (!err && (mask & IBV_SRQ_LIMIT))
		srq->srq_limit = attr->srq_limit;
	sv_mutex_unlock(&srq->lock);
	if (crossed)
		sv_srq_limit_event(srq);
	return err;
}

int ibv_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
	struct sv_srq *srq = to_sv_srq(ibsrq);

	if (!attr)
		return EINVAL;
	sv_mutex_lock(&srq->lock);
	attr->max_wr = srq->rq.size;
	attr->max_sge = srq->rq.max_sge;
	attr->srq_limit = srq->srq_limit;
	sv_mutex_unlock(&srq->lock);
	return 0;
}

int ibv_destroy_srq(struct ibv_srq *ibsrq)
{
	struct sv_srq *srq = to_sv_srq(ibsrq);
	struct sv_context *ctx = srq->ctx;

	if (sv_ref_count(&srq->users))
		return EBUSY;
	sv_mutex_lock(&ctx->srqt_lock);
	ctx->srqt[srq->slot] = NULL;
	sv_mutex_unlock(&ctx->srqt_lock);
	if (srq->xrcd) {
		xrc_srq_detach(srq);
		sv_xrc_proxies_detach(ctx, srq); /* and other processes' receive QPs */
		sv_ref_put(&srq->xrcd->users);
		sv_ref_put(&srq->cq->users);
	}
	sv_async_forget(ctx, &srq->async);
	sv_ref_put(&srq->pd->users);
	sv_ctx_release(ctx, &ctx->nsrq);
	sv_xrq_srq_free(srq);
	sv_rq_free(&srq->rq);
	sv_mutex_destroy(&srq->lock);
	free(srq);
	return 0;
}

int sv_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	struct sv_srq *srq = to_sv_srq(ibsrq);
	int err = 0;
	bool limit = false;

	sv_mutex_lock(&srq->lock);
	for (; wr; wr = wr->next) {
		err = (wr->num_sge && !wr->sg_list) ? EINVAL : sv_rq_post(&srq->rq, wr);
		if (err == ENOMEM && srq->rq.xl) {
			/* (as sv_post_recv: what peers completed frees places) */
			sv_xrq_srq_drain(srq, &limit);
			err = sv_rq_post(&srq->rq, wr);
		}
		if (err) {
			*bad_wr = wr;
			break;
		}
	}
	sv_mutex_unlock(&srq->lock);
	if (limit)
		sv_srq_limit_event(srq);
	return err;
}
