/*
 * The HCA writing a completion: into the CQ's ring, with the completion
 * channel's event when the CQ is armed for it, and the async CQ_ERR event on
 * the first overrun.  The verbs (src/verbs/cq.c) create, poll and destroy
 * CQs; the engine's roles post to them through this.
 */
#include "engine/objects.h"
#include "engine/stats.h"

#include <unistd.h>

bool sv_cq_push(struct sv_cq *cq, struct sv_qp *qp, const struct ibv_wc *wc, bool solicited)
{
	bool notify = false, overrun = false, stored = false;
	struct ibv_comp_channel *ch = cq->ex.channel;

	sv_mutex_lock(&cq->lock);
	if (cq->count == cq->size - 1) {
		overrun = !cq->overrun;
		cq->overrun = true;
	} else {
		cq->ring[(cq->head + cq->count) % cq->size] = *wc;
		cq->count++;
		sv_cq_count_changed(cq);
		stored = true;
		if (cq->armed && (!cq->solicited_only || solicited || wc->status != IBV_WC_SUCCESS)) {
			cq->armed = false;
			notify = true;
			atomic_fetch_add(&cq->events_in_pipe, 1);
		}
	}
	sv_mutex_unlock(&cq->lock);
	sv_stat_cqe(cq, qp, wc, stored);
	if (notify) {
		struct sv_comp_channel *sch = SV_CONTAINER_OF(ch, struct sv_comp_channel, ibch);
		struct sv_cq *p = cq;
		ssize_t r = write(sch->wfd, &p, sizeof(p));

		(void)r; /* a pipe holds thousands of events; one per arm is written */
	}
	if (overrun) {
		sv_err("CQ %p overrun: completion lost, CQ in error", (void *)cq);
		sv_async_event(cq->ctx, IBV_EVENT_CQ_ERR, cq, &cq->async, 0);
	}
	return stored;
}

/*
 * Take every completion of QP qpn out of the CQ, keeping the others in their
 * order (a QP moved to RESET, qp.c).  The caller holds that QP's lock, under
 * which all its completions are pushed, so none can arrive meanwhile.
 */
