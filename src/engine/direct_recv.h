/*
 * Receive queues that peers of this host can read: the receiving side of
 * the same-host SEND (ARCHITECTURE.md §4.6).  Between two processes of one
 * host an RC SEND is placed by its initiator (direct_exec.c): it reads the
 * receive WQE at the head of the target QP's queue, checks it as the
 * responder would, copies the message into the buffers it names and writes
 * the result beside it; the target's CPU is needed only to poll, which
 * turns the results into completions in the order of the queue.  No packet,
 * no ACK.
 *
 * Each WQE's SGEs, and its result, live in the context's receive
 * arena, a memfd peers take as they take MR extents (its descriptor and
 * inode are in the export table's header); the wr_id stays private.  Two
 * counters, each a count of WQEs since the queue was made or reset (gen
 * counts the resets):
 *   posted  written by the owner (ibv_post_recv), after the WQE (its SGEs,
 *           its result cleared);
 *   taken   the next WQE to consume: a peer that places a SEND takes it by
 *           compare-and-swap, and so does the owner's responder for a SEND
 *           that came by the wire.
 * A peer writes the WQE's result, SV_XRECV_DONE last, after the bytes, by
 * an exchange that returns the mark it replaced: the owner whose QP
 * enters ERR meanwhile takes the WQE back by compare-and-swap of a mark
 * still without SV_XRECV_DONE (to SV_XRECV_DONE | SV_XRECV_FLUSHED, kept
 * until the WQE is posted again), and the first wins, so the receive and
 * the SEND end alike.  The owner completes, in
 * order from its head, the WQEs marked done (sv_xrq_drain); the mark is
 * on the line the peer writes anyway (each WQE starts a line: a peer's
 * next WQE is not on the line the owner just wrote), and `taken` is on
 * one the owner's polls and posts do not read, so a placement costs the
 * peer no more lines than it must write (and two of the ready map's, only
 * where its record asks: SV_XRQ_NOTIFY).
 * The owner trusts none of it: it completes only WQEs it posted, with
 * wr_ids of its own.
 */
#ifndef SV_DIRECT_RECV_H
#define SV_DIRECT_RECV_H

#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct sv_context;
struct sv_qp;
struct sv_rq;
struct sv_srq;
struct sv_xrq_local;

struct sv_xrq {
	_Alignas(64) _Atomic uint64_t posted;
	_Alignas(64) _Atomic uint64_t taken;
	/* numbered at the first post after the queue was made or reset, from
	 * a count of the context's (never 0 then): what a peer knew of posted
	 * under another number is stale */
	_Atomic uint64_t gen;
	/* the handle of the PD its receives' lkeys belong to: the QP's, or
	 * the SRQ's (as the responder checks them); written when the queue
	 * moves in, before a record names it */
	_Atomic uint32_t pd;
};

/* The result a peer writes for a WQE it placed a message into. */
struct sv_xrecv {
	uint32_t num_sge; /* the owner's, at the post */
	uint32_t byte_len;
	uint32_t imm;     /* network order, as in a work completion */
	_Atomic uint32_t flags; /* SV_XRECV_*: 0 from the post until the peer's result */
	/* the QP the message came to (an SRQ's WQE completes on that QP's
	 * CQ), and the process placing it (a WQE it took and never finished
	 * is let go once it has exited: sv_xrq_peer_gone); written once the
	 * WQE is taken, before the bytes; 0 from the post */
	uint32_t qpn;
	_Atomic int32_t pid;
};

#define SV_XRECV_IMM 0x1        /* imm is set */
#define SV_XRECV_SOLICITED 0x2  /* the SEND asked for a solicited event */
#define SV_XRECV_WRITE 0x4      /* an RDMA WRITE with immediate's (no byte here) */
#define SV_XRECV_ABORTED 0x8    /* the sender's buffer faulted: REM_ABORT_ERR */
/* the owner's QP entered ERR while a peer placed into it: the owner took
 * the WQE back (WR_FLUSH_ERR), and the peer, whose mark then fails, sends
 * its message by the wire, where the responder in ERR answers nothing */
#define SV_XRECV_FLUSHED 0x10
#define SV_XRECV_DONE 0x80000000u /* the result is written (the last store) */

/* A WQE in the arena: its result, then its SGEs, on as few lines as can
 * be (a peer reads the SGEs and writes the result of the same WQE), from
 * the start of a line (WQEs side by side on one line made the owner's
 * post of one and the peer's read of the next take the line from each
 * other: ib_send_lat 8 B 0.37 -> 0.34 us). */
static inline size_t sv_xrecv_stride(uint32_t max_sge)
{
	return (sizeof(struct sv_xrecv) + (size_t)max_sge * sizeof(struct ibv_sge) + 63) & ~(size_t)63;
}
/* The block of a queue: its counters, then its WQEs. */
static inline uint64_t sv_xrq_bytes(uint32_t size, uint32_t max_sge)
{
	return sizeof(struct sv_xrq) + (uint64_t)size * sv_xrecv_stride(max_sge);
}

/* The arena: SV_XRQ_ARENA bytes of address space, only what queues use
 * takes memory. */
#define SV_XRQ_ARENA (256u << 20)

/* The context's arena, made with its export table; false when it cannot be
 * (queues then stay private). */
bool sv_xrq_arena_open(struct sv_context *ctx);
void sv_xrq_arena_close(struct sv_context *ctx);

/*
 * An SRQ's queue moves into the arena too, when a SEND from a process of
 * this host comes to one of its RC QPs (of the SRQ's PD or another: a
 * peer checks the receives' lkeys against the SRQ's, sv_xrq.pd), and
 * from then on its WQEs are taken as a QP's are.  The records of its QPs name
 * it as they come to receive such SENDs (srq->xqps lists them): a peer
 * placing a SEND to QP n takes the SRQ's next WQE and writes n beside it,
 * and the owner completes it on n's CQ.  The owner completes the SRQ's
 * WQEs in the order they were taken; a WQE a peer is still writing holds
 * back the ones after it, and the wire's responder, finding the next WQE
 * not its own to take, answers as if none were posted (RNR): a QP's
 * message that came by the wire never completes before one a peer placed
 * earlier.
 */

/*
 * qp->lock held, after a post: an RC QP without an SRQ whose record a peer
 * of this host marked (rq_want) has its receive queue moved into the
 * arena, the WQEs posted kept in place, and published in its record;
 * from then on its queue stays there (rq->xl; rq->sge_pool NULL:
 * each WQE's SGEs follow its result, sv_xrecv_at).  A queue nobody asks
 * for stays private: the arena costs a QP nothing until then.
 */
void sv_xrq_consider(struct sv_qp *qp);
/* The same, asked for or not: the responder's, when a message comes from a
 * process of this host.  A QP with an SRQ: the SRQ's queue, and the QP's
 * record names it. */
void sv_xrq_adopt(struct sv_qp *qp);
/* qp->lock held, its record q closed: q names the receive queue peers
 * may place into (its own or its SRQ's), or none. */
struct sv_xqp;
void sv_xrq_record(struct sv_qp *qp, struct sv_xqp *q);
/* The owner's lock held, the queue's head moved by another hand (a
 * flush): a poll watches the new head. */
void sv_xrq_rewatch(struct sv_rq *rq);
/* The queue's part in the arena goes back (before sv_rq_free). */
void sv_xrq_free(struct sv_context *ctx, struct sv_rq *rq);

/* WQE i of a queue in the arena, and its SGEs. */
static inline struct sv_xrecv *sv_xrecv_at(void *first, uint32_t max_sge, uint32_t i)
{
	return (struct sv_xrecv *)((uint8_t *)first + (size_t)i * sv_xrecv_stride(max_sge));
}
static inline struct ibv_sge *sv_xrecv_sge(struct sv_xrecv *e)
{
	return (struct ibv_sge *)(e + 1);
}

/* Owner's lock held: a WQE was added at the tail. */
void sv_xrq_posted(struct sv_rq *rq);
/* qp->lock held: every WQE is gone (the QP goes to RESET); waits for a
 * peer's placement in progress to end first (sv_export_qp_quiet).  A QP of
 * an SRQ: what peers placed for it completes (RESET then cleans its CQ). */
void sv_xrq_reset(struct sv_qp *qp);

/* qp->lock held: the receives peers completed go to the CQ, in order
 * (an SRQ's: each to its QP's). */
void sv_xrq_drain(struct sv_qp *qp);
/* qp->lock held, the QP in ERR, its own queue: what peers completed goes
 * to the CQ, and the receives they are still placing into are taken back
 * (flushed, unless a peer's mark comes first), as is every WQE not taken
 * yet: only the QP's flush completes the WQEs left (qp_ctx.c). */
void sv_xrq_drain_for_flush(struct sv_qp *qp);
/* qp->lock held, the queue drained and not empty: the head WQE is the
 * responder's (true), or a peer is placing into it (false: the message
 * that came by the wire finds no receive, as RNR). */
bool sv_xrq_take(struct sv_qp *qp);

/* srq->lock held: the receives peers completed go to their QPs' CQs, in
 * order (nothing if its queue is private).  *limit: the SRQ's limit was
 * crossed (disarmed; the caller raises the event, sv_srq_limit_event, once
 * the lock is let go). */
void sv_xrq_srq_drain(struct sv_srq *srq, bool *limit);
/* srq->lock held, its queue in the arena: sv_xrq_srq_drain, then the head
 * WQE, if there is one, is taken for the responder (true) or not (false:
 * none, or a peer's). */
bool sv_xrq_srq_take(struct sv_srq *srq, bool *limit);
/* srq->lock held: the WQEs the SRQ holds that nobody has taken. */
uint32_t sv_xrq_srq_avail(const struct sv_srq *srq);
/* srq->lock held, its queue in the arena: the queue goes back to private
 * memory (a resize is done there), the peers placing into it waited out
 * first and what they placed completed; the next SEND from a process of
 * this host to one of its QPs moves it again.  0, or ENOMEM, or EBUSY (a
 * peer stopped inside a placement: the queue stays).  *limit as
 * sv_xrq_srq_take's. */
int sv_xrq_srq_unshare(struct sv_srq *srq, bool *limit);
/* The SRQ's part in the arena goes (ibv_destroy_srq). */
void sv_xrq_srq_free(struct sv_srq *srq);
/* The QP (not locked; destroyed, its record closed and settled) lets go of
 * its SRQ's queue: what peers placed for it completes first. */
void sv_xrq_srq_leave(struct sv_qp *qp);

/* A QP is created (hold) or destroyed: what its queues may complete
 * into its CQs is counted (a CQ that could overrun has its queues in the
 * arena mark the ready map: direct_recv.c).  And a CQ resized (its lock
 * held). */
void sv_xrq_cq_hold(struct sv_qp *qp, bool hold);
struct sv_cq;
void sv_xrq_cq_resized(struct sv_cq *cq);

/* The QP (the queue xl in the arena, its own or its SRQ's) joins its
 * receive CQ's list, which sv_xrq_poll_cq looks at: 0 or ENOMEM.  Detach:
 * it leaves the list (before its destruction waits for references to
 * go). */
int sv_xrq_attach(struct sv_qp *qp, struct sv_xrq_local *xl);
void sv_xrq_detach(struct sv_qp *qp);
/* A poll of cq found it empty, or short of what it asked for: the
 * receives peers completed for its QPs (a load when there are none),
 * up to num of them straight into wc when the CQ has no channel and its
 * ring is empty (how many: the poll's), the others into the CQ's ring;
 * wc NULL: all into the ring. */
int sv_xrq_poll_cq(struct sv_cq *cq, struct ibv_wc *wc, int num);

/* A process of this host whose connection to us ended (engine thread, no
 * lock held): the WQEs of our queues it took and never marked done (it
 * was killed inside its copy) complete as aborted (REM_ABORT_ERR) once it
 * has exited, so that they do not hold back what follows them; an SRQ's
 * would hold back every QP's.  Waits up to 1 s for the process to exit,
 * and only when it holds such a WQE. */
void sv_xrq_peer_gone(struct sv_context *ctx, pid_t pid);

/* Take in what peers completed for the context's QPs, from the slots
 * they marked ready (the engine's pass; any thread). */
void sv_xrq_poll(struct sv_context *ctx);
/* Something waits for sv_xrq_poll (seq_cst: after a bell is armed). */
bool sv_xrq_waiting(struct sv_context *ctx);

#endif
