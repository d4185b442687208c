/*
 * Receive rings, of a QP or of an SRQ: posted receive WRs in order, each
 * with room for max_sge SGEs.  The ring's owner's lock (the QP's or the
 * SRQ's) is held for every call; the engine takes WQEs from the head
 * (responder.c) under the same lock.
 */
#include "verbs/verbs.h"
#include "engine/direct_recv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A ring of max_wr WQEs (its capacity) and its SGE pool; 0 or ENOMEM. */
static int ring_alloc(struct sv_rq *rq, uint32_t max_wr, uint32_t max_sge)
{
	uint32_t n = SV_MAX(max_wr, 1u);

	*rq = (struct sv_rq){ 0 }; /* private: no part in the arena */
	rq->max_sge = SV_MAX(max_sge, 1u);
	rq->wqe = calloc(n, sizeof(*rq->wqe));
	rq->sge_pool = calloc((size_t)n * rq->max_sge, sizeof(struct ibv_sge));
	if (!rq->wqe || !rq->sge_pool) {
		sv_rq_free(rq);
		return ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++)
		rq->wqe[i].sge = rq->sge_pool + (size_t)i * rq->max_sge;
	rq->size = max_wr;
	rq->head = rq->count = 0;
	return 0;
}

int sv_rq_init(struct sv_rq *rq, uint32_t max_wr, uint32_t max_sge)
{
	return ring_alloc(rq, max_wr, max_sge);
}

void sv_rq_free(struct sv_rq *rq)
{
	free(rq->wqe);
	if (!rq->xl) /* (the arena's is sv_xrq_free's) */
		free(rq->sge_pool);
	rq->wqe = NULL;
	rq->sge_pool = NULL;
}

int sv_rq_post(struct sv_rq *rq, const struct ibv_recv_wr *wr)
{
	struct sv_recv_wqe *w;

	if ((uint32_t)wr->num_sge > rq->max_sge || wr->num_sge < 0)
		return EINVAL;
	if (rq->count >= rq->size)
		return ENOMEM;
	w = &rq->wqe[(rq->head + rq->count) % rq->size];
	w->wr_id = wr->wr_id;
	w->num_sge = (uint32_t)wr->num_sge;
	if (wr->num_sge)
		memcpy(w->sge, wr->sg_list, sizeof(*w->sge) * (size_t)wr->num_sge);
	rq->count++;
	if (rq->xl)
		sv_xrq_posted(rq);
	return 0;
}

int sv_rq_resize(struct sv_rq *rq, uint32_t max_wr)
{
	struct sv_rq n;
	int err;

	if (rq->xl)
		return EOPNOTSUPP; /* (an SRQ's only, never in the arena) */
	if (max_wr < rq->count)
		return EINVAL; /* the WRs posted must fit (rxe refuses the same) */
	err = ring_alloc(&n, max_wr, rq->max_sge);
	if (err)
		return err;
	/* the posted WRs keep their order, from the new ring's start */
	for (uint32_t i = 0; i < rq->count; i++) {
		const struct sv_recv_wqe *o = &rq->wqe[(rq->head + i) % rq->size];

		n.wqe[i].wr_id = o->wr_id;
		n.wqe[i].num_sge = o->num_sge;
		memcpy(n.wqe[i].sge, o->sge, sizeof(*o->sge) * o->num_sge);
	}
	n.count = rq->count;
	sv_rq_free(rq);
	*rq = n;
	return 0;
}
