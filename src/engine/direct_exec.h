/*
 * The direct executor: the fourth role beside the requester, responder and
 * completer.  Between two processes of one host the initiator executes an
 * RC one-sided operation itself, on the target's memory, in the thread that
 * runs its requester: the target's CPU takes no part, as with a NIC
 * (direct_exec.c, ARCHITECTURE.md §4.6).  Which WR opcodes may run so, and
 * what they need at the target, is the WR opcode table's (SV_WRF_DIRECT,
 * remote_access); the checks are the responder's (access_check.h).
 */
#ifndef SV_DIRECT_EXEC_H
#define SV_DIRECT_EXEC_H

#include "engine/objects.h"
#include "engine/wr_opcode.h"

#include <stdbool.h>

enum sv_direct {
	SV_DIRECT_WIRE,	 /* nothing happened: it goes by the wire */
	SV_DIRECT_DONE,	 /* executed here; w->status says how */
	SV_DIRECT_DEFER, /* it would be, but is long: let the engine thread do it */
};

/* Longer operations are not executed in a thread that posts them (with
 * may_defer): ibv_post_send returns at once, as with a NIC. */
#define SV_DIRECT_INLINE_MAX (8u << 20)
/* How long a key whose operation the wire served stays with the wire
 * before one of its operations waits for the wire to drain and tries the
 * direct path again (a drained pipeline once per this period). */
#define SV_DIRECT_RETRY_NS 1000000ull

/*
 * w, an RC WQE behind WQEs still on the wire, would probably be executed
 * here once they complete (a direct opcode to a peer of this host whose key
 * has not failed before): the requester waits for them rather than keep a
 * pipeline on the wire for good.
 */
bool sv_direct_soon(struct sv_qp *qp, struct sv_conn *conn, const struct sv_send_wqe *w);

/*
 * qp->lock held: the QP's send queue holds `queued` WQEs, none of them
 * begun, the QP is an RTS RC QP with a connection, not paused by an RNR,
 * and its last operation tried on the peer's memory ran there: what both
 * of the post's ways around the pass ask first (post_alone, with the WQE
 * just posted; sv_direct_post, with none).
 */
static inline bool sv_direct_alone(const struct sv_qp *qp, uint32_t queued)
{
	const struct sv_sq *sq = &qp->sq;

	return qp->req.direct_went && sq->tail - sq->head == queued && sq->next == sq->head &&
	       !sq->seg_off && qp->state == IBV_QPS_RTS && !qp->req.rnr_until &&
	       qp->ti->reliable && qp->ti->connected && qp->conn;
}

/*
 * ibv_post_send's shortcut (qp->lock held): wr, the whole chain, an RDMA
 * WRITE, SEND, SEND with immediate or WRITE with immediate of one SGE or
 * of inline data, or an RDMA READ into one SGE, on an RC QP whose send
 * queue is empty and whose last operation ran on the peer's memory, is
 * executed from the WR itself, without a WQE in the ring, and its
 * completion pushed when one is asked for (or it failed); true.  false:
 * nothing changed (a check failed, no receive is posted, or it is not that
 * case), and the post goes on as usual, where every check is made again
 * and every error given.  The ring and the pass (the WR's copy, the pass's
 * conditions, the retirement) were a third of an 8-byte WRITE's time.
 */
bool sv_direct_post(struct sv_qp *qp, const struct ibv_send_wr *wr);

/*
 * qp->lock held; w is an RC WQE about to start, every WQE before it
 * complete, its length checked; conn the QP's connection (made by an
 * earlier WQE: until it is up, with the peer proved, everything goes by the
 * wire).  Before it looks at the peer, it checks w's local buffers as the
 * requester would: DONE with a local error status if they fail.  WIRE: the
 * requester checks them itself.
 */
enum sv_direct sv_direct_exec(struct sv_qp *qp, struct sv_conn *conn, struct sv_send_wqe *w,
			      bool may_defer);

#endif
