/*
 * Completer: consumes what a responder sends back on an RC QP — ACKs, NAKs,
 * RNR NAKs, READ responses and atomic acknowledgements — and turns them into
 * finished WQEs, which the requester retires into completions in order.
 * Runs in the engine thread with qp->lock held.
 */
#include "engine/engine.h"
#include "engine/stats.h"
#include "engine/dma.h"
#include "engine/gpu.h"

#include <arpa/inet.h>
#include <string.h>

/*
 * Responses arrive in order, so a response for `psn` implicitly acknowledges
 * every SEND/WRITE before it.  Returns the first unfinished WQE at or after
 * psn's message, or NULL.  With `partial`, a message only partly on the wire
 * (at sq->next, its first seg_off bytes sent) counts too: over a datagram transport the
 * window stops a long message midway, and a NAK for one of its packets must
 * send the requester back now, not at the ack timeout.
 */
static struct sv_send_wqe *ack_before(struct sv_qp *qp, uint32_t psn, bool inclusive, bool partial)
{
	struct sv_sq *sq = &qp->sq;
	uint32_t i;

	for (i = sq->head; i != sq->next; i++) {
		struct sv_send_wqe *w = &sq->wqe[i & (sq->size - 1)];
		int32_t c;

		if (w->state == SV_WQE_DONE)
			continue;
		if (w->state != SV_WQE_SENT)
			return NULL;
		c = sv_psn_cmp(w->last_psn, psn);
		if (c > 0 || (c == 0 && !inclusive) || sv_wr_rd_atomic(w->op))
			return w;
		w->state = SV_WQE_DONE;
		w->status = IBV_WC_SUCCESS;
	}
	if (partial && sq->seg_off && i != sq->tail) {
		struct sv_send_wqe *w = &sq->wqe[i & (sq->size - 1)];

		/* its PSNs so far end before sq->psn + seg_off / mtu */
		if (sv_psn_cmp(psn, sv_psn_add(w->first_psn, sq->seg_off / qp->mtu)) < 0)
			return w;
	}
	return NULL;
}

/* w, at sq->next, went out before with the PSNs it has (and is perhaps
 * partly resent; if not started again, npkts 0, it gets the same ones) */
static bool resending(const struct sv_sq *sq, const struct sv_send_wqe *w)
{
	return w->state == SV_WQE_PENDING && w->wired &&
	       (w->npkts || (!sq->seg_off && w->first_psn == sq->psn));
}

/*
 * The WQEs from sq->next on that the requester is sending again: an ack
 * timeout, a probe or a NAK sent it back (sv_requester_rewind), and they
 * are PENDING once more, the one at sq->next perhaps partly resent, with
 * the PSNs they had (the requester gives them the same ones again).  An
 * ACK for psn that arrives meanwhile, the responder's answer to what they
 * were before, acknowledges them as far as it reaches, as it does the SENT
 * ones before them (ack_before): those it covers whole are done, and
 * sending goes on after them.  Else an ACK covering a WQE being resent moved comp.una
 * past it and left it unfinished: resent whole, it waited for an ACK the
 * responder had sent already, and the ack timer went back to comp.una, past
 * its last PSN, resent nothing and ended in RETRY_EXC_ERR.  (rxe too
 * completes a WQE that an ACK beyond its last PSN covers.)  A READ or an
 * atomic is finished by its own response only, and what follows it waits.
 */
static void ack_resending(struct sv_qp *qp, uint32_t psn)
{
	struct sv_sq *sq = &qp->sq;

	while (sq->next != sq->tail) {
		struct sv_send_wqe *w = &sq->wqe[sq->next & (sq->size - 1)];

		if (w->state == SV_WQE_DONE && !sq->seg_off) {
			sq->next++; /* a local operation (bind, invalidate), done */
			continue;
		}
		if (!resending(sq, w) || sv_wr_rd_atomic(w->op))
			return;
		if (sv_psn_cmp(w->last_psn, psn) <= 0) {
			w->state = SV_WQE_DONE;
			w->status = IBV_WC_SUCCESS;
			sq->psn = sv_psn_add(w->last_psn, 1);
			sq->seg_off = 0;
			sq->next++;
			continue;
		}
		/* covered in part, or not at all: comp.una, where a retry goes
		 * back to, is inside it now, or before it */
		return;
	}
}

/*
 * A NAK for psn that ack_before matched to nothing sent, nor to the part
 * resent so far of the WQE at sq->next: psn may lie further on, in a WQE
 * the requester is sending again, the responder's answer (late: it came
 * after the ack timeout or a probe went back) to what it sent before.
 * As an ACK of psn - 1 it finishes the SENDs and WRITEs before psn
 * (ack_resending); the WQE holding psn, if it went out before with that
 * PSN, is the one it refuses.  (rxe takes a NAK for any PSN of its oldest
 * WQE once that has gone out again.)  Else NULL: stale.
 */
static struct sv_send_wqe *nak_resending(struct sv_qp *qp, uint32_t psn)
{
	struct sv_sq *sq = &qp->sq;
	struct sv_send_wqe *w;

	ack_resending(qp, sv_psn_add(psn, SV_PSN_MASK));
	if (sq->next == sq->tail)
		return NULL;
	w = &sq->wqe[sq->next & (sq->size - 1)];
	if (!resending(sq, w) || sv_psn_cmp(w->first_psn, psn) > 0 ||
	    sv_psn_cmp(w->last_psn, psn) < 0)
		return NULL;
	return w;
}

/* An ACK for psn: every SEND and WRITE it covers is done. */
static void ack_upto(struct sv_qp *qp, uint32_t psn)
{
	if (!ack_before(qp, psn, true, false))
		ack_resending(qp, psn);
}

static void progress_made(struct sv_qp *qp)
{
	struct sv_sq *sq = &qp->sq;
	bool outstanding = false;

	for (uint32_t i = sq->head; i != sq->next && !outstanding; i++)
		outstanding = sq->wqe[i & (sq->size - 1)].state == SV_WQE_SENT;
	/* a message the window stopped midway is on the wire too */
	outstanding = outstanding || (sq->seg_off && sq->next != sq->tail);
	sv_requester_progress(qp, outstanding);
}

static void finish(struct sv_qp *qp, struct sv_send_wqe *w, enum ibv_wc_status st)
{
	struct sv_sq *sq = &qp->sq;

	/* what READ responses and atomic results put into GPU memory is there first */
	if (sv_gpu_sink_fence(qp->comp.gpu_rd_in) && st == IBV_WC_SUCCESS)
		st = IBV_WC_LOC_PROT_ERR;
	/* (one being sent again is not counted: sv_requester_rewind) */
	if (sv_wr_rd_atomic(w->op) && w->state == SV_WQE_SENT && sq->rd_atomic_inflight)
		sq->rd_atomic_inflight--;
	w->state = SV_WQE_DONE;
	w->status = st;
	if (sq->next != sq->tail && w == &sq->wqe[sq->next & (sq->size - 1)]) {
		/* refused midway (ack_before's `partial`) or before it went
		 * out again (nak_resending): none of the rest goes out, and
		 * retire() reaches it */
		sq->next++;
		sq->seg_off = 0;
	}
}

static enum ibv_wc_status nak_status(uint8_t code)
{
	switch (code) {
	case SV_NAK_INV_REQ:
		return IBV_WC_REM_INV_REQ_ERR;
	case SV_NAK_REM_ACCESS:
		return IBV_WC_REM_ACCESS_ERR;
	case SV_NAK_REM_OP:
		return IBV_WC_REM_OP_ERR;
	default:
		return IBV_WC_BAD_RESP_ERR;
	}
}

/* Every PSN before psn is acknowledged or answered. */
static void acked_to(struct sv_qp *qp, uint32_t psn)
{
	uint32_t old = qp->comp.una;

	if (sv_psn_cmp(psn, old) > 0) {
		qp->comp.una = psn;
		sv_flow_acked(qp, old);
	}
}

/*
 * A NAK for a PSN sequence error: the responder lost a packet and expects
 * psn again.  Go back to it now (go-back-N), as the ack timer would later;
 * like a timeout it uses one of the QP's retries, which progress restores.
 */
static void on_seq_nak(struct sv_qp *qp, struct sv_send_wqe *w, uint32_t psn)
{
	if (sv_psn_cmp(psn, w->first_psn) > 0)
		progress_made(qp); /* the part of w before psn arrived */
	if (!sv_requester_seq_nak(qp, psn))
		finish(qp, w, IBV_WC_RETRY_EXC_ERR);
}

/* An RNR NAK: the requester backs off and sends psn again, while it has
 * RNR retries left. */
static void on_rnr_nak(struct sv_qp *qp, struct sv_send_wqe *w, uint32_t psn, uint8_t timer)
{
	if (!sv_requester_rnr_nak(qp, psn, timer))
		finish(qp, w, IBV_WC_RNR_RETRY_EXC_ERR);
}

/*
 * Is a READ response packet, the one awaited (w->resp_psn), what its
 * place in the READ calls for: MIDDLE or LAST only after the first, LAST
 * (or ONLY) exactly at the last, a full MTU but for the last (on a stream,
 * a run of packets, psn to psn_last: whole ones but for the READ's last,
 * as many as the stream's frame holds)?  A peer that
 * ends a READ early (LAST too soon, short packets) would otherwise complete
 * it with bytes never written.  A READ asked for again from a later
 * response on (sv_requester_rewind) is answered from there with FIRST (or
 * ONLY), as a READ of the rest, or with MIDDLE (or LAST), as a replay of
 * the first (rxe): either takes its place.
 */
static bool resp_fits(const struct sv_qp *qp, struct sv_conn *conn, const struct sv_send_wqe *w,
		      const struct sv_opcode_info *op, uint32_t psn, uint32_t psn_last,
		      uint64_t off, uint32_t plen)
{
	bool first = psn == w->first_psn, last = psn_last == w->last_psn;
	uint64_t run = (uint64_t)((psn_last - psn) & SV_PSN_MASK) * qp->mtu + qp->mtu;

	return (op->mask & SV_OPF_FIRST || !first) && !(op->mask & SV_OPF_LAST) == !last &&
	       run <= sv_conn_run(conn, qp->mtu) &&
	       plen == SV_MIN(run, w->length - off);
}

void sv_completer_rx(struct sv_qp *qp, struct sv_conn *conn, const struct sv_opcode_info *op,
		     uint8_t *pkt, const uint8_t *payload, uint32_t plen, sv_cu_ctx src_gpu)
{
	const struct sv_bth *bth = (const void *)pkt;
	uint32_t psn = ntohl(bth->psn) & SV_PSN_MASK;
	/* a READ response's frame on a stream: a run of packets (resp_fits) */
	uint32_t psn_last = sv_psn_add(psn, sv_qp_npkts(qp, plen) - 1);
	uint8_t low = bth->opcode & 0x1f;
	uint8_t syn = 0;
	struct sv_send_wqe *w;

	if (!qp->ti->reliable || (bth->opcode & 0xe0) != qp->ti->wire_class)
		return;
	if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD && qp->state != IBV_QPS_SQE)
		return;
	if (op->off_aeth) {
		const struct sv_aeth *a = (const void *)(pkt + op->off_aeth);

		syn = (uint8_t)(ntohl(a->syn_msn) >> 24);
	}

	if (low == SV_OP_ACK && (syn & SV_AETH_TYPE_MASK) != SV_AETH_ACK) {
		sv_stat_nak(qp, syn, false);
		/* a NAK names the PSN it refused; everything before it is done */
		w = ack_before(qp, psn, false, true);
		/* (an RNR NAK is left to the resent SEND, which draws another) */
		if (!w && (syn & SV_AETH_TYPE_MASK) == SV_AETH_NAK)
			w = nak_resending(qp, psn);
		if (!w || sv_psn_cmp(w->first_psn, psn) > 0)
			goto out; /* stale */
		acked_to(qp, psn);
		if ((syn & SV_AETH_TYPE_MASK) == SV_AETH_RNR_NAK) {
			/* not progress: the RNR retry budget keeps counting down */
			on_rnr_nak(qp, w, psn, syn & 0x1f);
		} else if ((syn & 0x1f) == SV_NAK_PSN_SEQ) {
			on_seq_nak(qp, w, psn);
		} else {
			finish(qp, w, nak_status(syn & 0x1f));
			progress_made(qp);
		}
		goto out;
	}
	if (low == SV_OP_ACK) {
		ack_upto(qp, psn);
		acked_to(qp, sv_psn_add(psn, 1));
		progress_made(qp);
		goto out;
	}

	w = ack_before(qp, psn, false, false);
	if (!w || sv_psn_cmp(w->first_psn, psn) > 0 || sv_psn_cmp(w->last_psn, psn_last) < 0)
		goto out; /* duplicate or stale response */

	if (op->mask & SV_OPF_RDRESP) {
		uint32_t k = (psn - w->first_psn) & SV_PSN_MASK;
		uint64_t off = (uint64_t)k * qp->mtu;

		if (w->op->flags & SV_WRF_ATOMIC_WRITE) {
			/* an atomic write's acknowledgement: no data */
			finish(qp, w, plen || !(op->mask & SV_OPF_LAST) ? IBV_WC_BAD_RESP_ERR
									  : IBV_WC_SUCCESS);
		} else if (!(w->op->flags & SV_WRF_READ)) {
			finish(qp, w, IBV_WC_BAD_RESP_ERR);
		} else if (psn != w->resp_psn) {
			/* a response lost before this one (or a replay of one placed
			 * already, which may have started where an earlier request
			 * for the rest did): nothing placed, no progress; the ack
			 * timer asks for the READ again and its responses fill it in
			 * order */
			goto out;
		} else if (off + plen > w->length ||
			   !resp_fits(qp, conn, w, op, psn, psn_last, off, plen)) {
			finish(qp, w, IBV_WC_BAD_RESP_ERR);
		} else {
			w->resp_psn = sv_psn_add(psn_last, 1);
			enum sv_mem_err e = sv_sgl_copy_in(qp->ctx, qp->pd, w->sge, w->num_sge, off,
							   payload, plen, &qp->comp.gpu_rd_in, src_gpu);
			if (e)
				finish(qp, w, IBV_WC_LOC_PROT_ERR);
			else if (op->mask & SV_OPF_LAST)
				finish(qp, w, IBV_WC_SUCCESS);
		}
	} else if (low == SV_OP_ATOMIC_ACK) {
		const struct sv_atmack *a = (const void *)(pkt + op->off_atmack);
		uint64_t orig = be64toh(a->orig);

		if (!(w->op->flags & SV_WRF_ATOMIC)) {
			finish(qp, w, IBV_WC_BAD_RESP_ERR);
		} else {
			/* the original value lands in the WQE's (8-byte) local buffer */
			enum sv_mem_err e = sv_sgl_copy_in(qp->ctx, qp->pd, w->sge, w->num_sge, 0,
							   &orig, sizeof(orig), &qp->comp.gpu_rd_in, NULL);
			finish(qp, w, e ? IBV_WC_LOC_PROT_ERR : IBV_WC_SUCCESS);
		}
	}
	acked_to(qp, sv_psn_add(psn_last, 1)); /* the response for psn, taken in order */
	/* an ACK of a later PSN that came before this READ or atomic was
	 * answered (a response lost, or overtaken) moved una past the SENDs
	 * and WRITEs after it, which ack_before left for it: they are done
	 * now that it is (else they waited for an ACK never sent again,
	 * resent from una, which is past them) */
	if (w->state == SV_WQE_DONE)
		ack_upto(qp, sv_psn_add(qp->comp.una, SV_PSN_MASK));
	progress_made(qp);
out:
	sv_engine_timer_update(qp->ctx->eng, qp);
	sv_requester_retire(qp);
	if (qp->state == IBV_QPS_RTS)
		sv_requester_run(qp); /* fences and the READ limit may have opened */
}

void sv_completer_reset(struct sv_qp *qp)
{
	sv_gpu_sink_abort(qp->comp.gpu_rd_in); /* none of its copies lands later */
}
