/*
 * The QP context as the software HCA works on it: finding a QP by number,
 * and moving a QP to ERR with everything outstanding flushed (each role
 * clears its own part of the QP).  The verbs (src/verbs/qp.c) create,
 * modify and destroy QPs; the engine's roles call these.
 */
#include "engine/engine.h"
#include "engine/gpu.h"
#include "engine/stats.h"
#include "engine/mem_export.h"
#include "engine/direct_recv.h"
#include "engine/xrc_relay.h"

#include <stdlib.h>

struct sv_qp *sv_qp_lookup(struct sv_context *ctx, uint32_t qpn)
{
	struct sv_qp *qp = NULL;
	uint32_t i = sv_qpn_slot(ctx, qpn);

	sv_mutex_lock(&ctx->lock);
	if (i < ctx->qpt_size && ctx->qpt[i]) {
		qp = ctx->qpt[i];
		sv_qp_get(qp);
	}
	sv_mutex_unlock(&ctx->lock);
	return qp;
}

static void push_flush(struct sv_cq *cq, struct sv_qp *qp, uint64_t wr_id, enum ibv_wc_opcode op)
{
	struct ibv_wc wc = { .wr_id = wr_id, .status = IBV_WC_WR_FLUSH_ERR, .opcode = op,
			     .qp_num = qp->ex.qp_base.qp_num, .vendor_err = IBV_WC_WR_FLUSH_ERR };

	sv_cq_push(cq, qp, &wc, false);
}

void sv_ah_put(struct sv_ah *ah)
{
	if (!sv_ref_put(&ah->ref))
		return;
	if (ah->conn)
		sv_conn_put(ah->conn);
	sv_ref_put(&ah->pd->users);
	sv_mutex_destroy(&ah->lock);
	free(ah);
}

void sv_wqe_release(struct sv_send_wqe *w)
{
	if (w->ah) {
		sv_ah_put(w->ah);
		w->ah = NULL;
	}
}

void sv_qp_flush_send(struct sv_qp *qp)
{
	struct sv_sq *sq = &qp->sq;

	for (; sq->head != sq->tail; sq->head++) {
		struct sv_send_wqe *w = &sq->wqe[sq->head & (sq->size - 1)];

		push_flush(qp->scq, qp, w->wr.wr_id, IBV_WC_SEND);
		sv_wqe_release(w);
	}
	sq->next = sq->tail;
	sq->seg_off = 0;
	sq->rd_atomic_inflight = 0;
}

void sv_qp_flush_recv(struct sv_qp *qp)
{
	sv_responder_flush_rwqe(qp);
	/* what peers of this host completed, before the flush (an SRQ's: for
	 * every QP of the SRQ), and what they are still placing, taken back */
	sv_xrq_drain_for_flush(qp);
	if (qp->srq)
		return; /* SRQ WQEs belong to the SRQ, not to this QP */
	for (; qp->rq.count; qp->rq.count--) {
		push_flush(qp->rcq, qp, qp->rq.wqe[qp->rq.head].wr_id,
			   IBV_WC_RECV);
		qp->rq.head = (qp->rq.head + 1) % qp->rq.size;
	}
	sv_xrq_rewatch(&qp->rq);
}

void sv_qp_enter_error(struct sv_qp *qp)
{
	bool was_err = qp->state == IBV_QPS_ERR;

	/* what was gathered for GPU memory may target memory about to go */
	sv_gpu_sink_abort(qp->resp.gpu_in);
	sv_gpu_sink_abort(qp->comp.gpu_rd_in);
	qp->state = IBV_QPS_ERR;
	qp->attr.qp_state = IBV_QPS_ERR;
	qp->ex.qp_base.state = IBV_QPS_ERR;
	sv_stats_qp_update(qp);
	/* peers stop passing their checks now; the accesses already past them
	 * are waited out by the verb that next changes the QP or destroys it,
	 * not here, where the engine may be the caller */
	sv_export_qp(qp);
	sv_qp_flush_send(qp);
	sv_qp_flush_recv(qp);
	sv_responder_halt(qp);
	sv_requester_stop_timers(qp);
	/* (not for an XRC receive QP whose creator's handle is gone: an
	 * event names it by that handle) */
	if (!was_err && qp->srq && !(qp->xrc && qp->xrc->no_events)) {
		/*
		 * After the event, no WQE of the SRQ is the QP's: a program
		 * polls its CQ once more and destroys the QP.  A peer of this
		 * host placing a SEND into one of the SRQ's WQEs for this QP
		 * is not taken back (the owner cannot tell which WQE is the
		 * QP's before the peer writes it), so the event waits for it
		 * to end, as ibv_modify_qp waits before it comes here.  The
		 * engine may be the caller: it looks again later, not waits.
		 */
		uint64_t now = sv_now_ns();

		qp->last_wqe_owed = true;
		qp->req.last_wqe_owed_since = now;
		atomic_store_explicit(&qp->req.last_wqe_look, now, memory_order_relaxed);
		sv_qp_last_wqe_look(qp, now);
	}
	sv_engine_timer_update(qp->ctx->eng, qp);
}

/* How often an owed IBV_EVENT_QP_LAST_WQE_REACHED looks again (the
 * engine's tick is a millisecond), and how long it waits at most, as
 * ibv_modify_qp waits for a placement (sv_export_qp_quiet). */
#define LAST_WQE_LOOK_NS 1000000ull
#define LAST_WQE_WAIT_NS 1000000000ull

void sv_qp_last_wqe_look(struct sv_qp *qp, uint64_t now)
{
	bool placing;

	if (!qp->last_wqe_owed ||
	    now < atomic_load_explicit(&qp->req.last_wqe_look, memory_order_relaxed))
		return;
	placing = sv_export_qp_entered(qp);
	if (placing && now - qp->req.last_wqe_owed_since < LAST_WQE_WAIT_NS) {
		atomic_store_explicit(&qp->req.last_wqe_look, now + LAST_WQE_LOOK_NS,
				      memory_order_relaxed);
		return;
	}
	if (placing)
		sv_warn_limited("a peer's access through QP %#x has not ended in 1 s; "
				"IBV_EVENT_QP_LAST_WQE_REACHED goes on",
				qp->ex.qp_base.qp_num);
	qp->last_wqe_owed = false;
	atomic_store_explicit(&qp->req.last_wqe_look, 0, memory_order_relaxed);
	if (qp->state == IBV_QPS_ERR)
		sv_async_event(qp->ctx, IBV_EVENT_QP_LAST_WQE_REACHED, qp, &qp->async, 0);
}
