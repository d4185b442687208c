/*
 * Counting what a context does, into its counters segment (the file format
 * and what each counter means: src/stats/layout.h).  The engine and the CQ
 * code call the small inline functions below, one line at each point where
 * something countable happens; each is a relaxed atomic add or two on the
 * QP's own slot (a cache line the QP's lock holder writes anyway), so
 * counting costs no lock and no system call.  Port counters are sums made
 * by the reader, so no line is shared by all QPs of a context.
 *
 * The segment always exists: when the runtime directory cannot be used it
 * is anonymous memory, and counting still works for ibv_query_port but is
 * invisible to other processes.
 */
#ifndef SV_VERBS_STATS_H
#define SV_VERBS_STATS_H

#include "engine/objects.h"
#include "wire/wire.h"
#include "stats/layout.h"
#include "transport/registry.h"

_Static_assert(SV_STAT_NSLOTS <= SV_QPN_BLOCK, "a slot per QP number of the context's block");
_Static_assert(SV_STAT_NSLOTS == SV_MAX_QP, "a slot for every QP number");

/* ---- the segment's life (stats.c) ---- */
int sv_stats_open(struct sv_context *ctx);    /* ibv_open_device; 0 or an errno */
void sv_stats_publish(struct sv_context *ctx); /* the engine listens: visible to readers */
void sv_stats_close(struct sv_context *ctx);  /* ibv_close_device: unmap, remove */
void sv_stats_unlink(struct sv_context *ctx); /* exit: remove the name, keep counting */
void sv_stats_qp_create(struct sv_qp *qp);    /* slot cleared and claimed */
void sv_stats_qp_update(struct sv_qp *qp);    /* qp->lock held: state, peer changed */
void sv_stats_qp_destroy(struct sv_qp *qp);   /* counters move to the context's "gone" */
/* This context's device, summed over every live context of it that this
 * user has open on this host (ibv_query_port's qkey_viol_cntr). */
uint64_t sv_stats_device_counter(struct sv_context *ctx, enum sv_stat_qp_counter c);

/* ---- counting (inline: called on the data path) ---- */
static inline void sv_stat_add(uint64_t *c, uint64_t n)
{
	__atomic_fetch_add(c, n, __ATOMIC_RELAXED);
}

/*
 * The packet and byte counters of a QP are written only under its lock
 * (the requester, the responder and the completer run under it): one
 * writer at a time, so a load and a store do, without the locked
 * instruction an atomic add costs on every packet.  Readers (softverbs
 * stat, another process) still see whole values.
 */
static inline void sv_stat_add_locked(uint64_t *c, uint64_t n)
{
	__atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

/* The counters of the QP at slot (< SV_STAT_NSLOTS) of ctx's QP table. */
static inline struct sv_stat_qp *sv_stat_slot(struct sv_context *ctx, uint32_t slot)
{
	return (struct sv_stat_qp *)((char *)ctx->stats + SV_STAT_HDR_SIZE) + slot;
}

/* Where the counts of a QP of no slot go: another process's XRC receive
 * QP, whose requests this context executes (engine/xrc_relay.c), counts
 * them in that process. */
extern struct sv_stat_qp sv_stat_nowhere;

static inline struct sv_stat_qp *sv_stat_qp(struct sv_qp *qp)
{
	/* on the data path: a QP of the context's table has its slot as its
	 * handle (verbs/qp.c), with no permutation to undo; others (an
	 * ibv_open_qp handle, another process's XRC receive QP) go by number */
	uint32_t slot = qp->ex.qp_base.handle;

	if (__builtin_expect(slot >= SV_STAT_NSLOTS ||
				     !sv_qpn_ours(qp->ctx, qp->ex.qp_base.qp_num), 0))
		slot = sv_qpn_slot(qp->ctx, qp->ex.qp_base.qp_num);
	if (__builtin_expect(slot >= SV_STAT_NSLOTS, 0))
		return &sv_stat_nowhere;
	return sv_stat_slot(qp->ctx, slot);
}

/* qp counts one more c. */
static inline void sv_stat_count(struct sv_qp *qp, enum sv_stat_qp_counter c)
{
	sv_stat_add(&sv_stat_qp(qp)->c[c], 1);
}

/* The context counts one more c. */
static inline void sv_stat_ctx_count(struct sv_context *ctx, enum sv_stat_ctx_counter c)
{
	sv_stat_add(&ctx->stats->ctx_c[c], 1);
}

/* A response or ACK packet of qp, carrying bytes of payload, went out.
 * (Packets are counted one per path MTU, as a NIC's wire would carry them:
 * a stream's frame with a run of them counts as the run, sv_qp_npkts.) */
static inline void sv_stat_tx(struct sv_qp *qp, uint32_t bytes)
{
	struct sv_stat_qp *s = sv_stat_qp(qp);

	sv_stat_add_locked(&s->c[SV_QPC_TX_PKTS], sv_qp_npkts(qp, bytes));
	sv_stat_add_locked(&s->c[SV_QPC_TX_BYTES], bytes);
}

/*
 * A request packet of qp (qp->lock held) went out with this PSN.  A PSN
 * below the highest one sent so far is a retransmission: the requester only
 * goes back after a timeout or an RNR NAK.  psn_next is only ever touched
 * under the QP's lock.
 */
static inline void sv_stat_req_tx(struct sv_qp *qp, uint32_t psn, uint32_t bytes)
{
	struct sv_stat_qp *s = sv_stat_qp(qp);
	uint32_t n = sv_qp_npkts(qp, bytes);

	sv_stat_add_locked(&s->c[SV_QPC_TX_PKTS], n);
	sv_stat_add_locked(&s->c[SV_QPC_TX_BYTES], bytes);
	if (s->psn_valid && sv_psn_cmp(psn, s->psn_next) < 0) {
		sv_stat_add(&s->c[SV_QPC_RETRANS], n);
	} else {
		s->psn_next = sv_psn_add(psn, n);
		s->psn_valid = 1;
	}
}

/* NAK kinds, as sent or received, to their counters (tx: sent). */
static inline void sv_stat_nak(struct sv_qp *qp, uint8_t syn, bool tx)
{
	enum sv_stat_qp_counter c;

	if ((syn & SV_AETH_TYPE_MASK) == SV_AETH_RNR_NAK)
		c = tx ? SV_QPC_RNR_NAK_SENT : SV_QPC_RNR_NAK_RCVD;
	else if ((syn & SV_AETH_TYPE_MASK) != SV_AETH_NAK)
		return; /* a plain ACK */
	else if ((syn & 0x1f) == SV_NAK_REM_ACCESS)
		c = tx ? SV_QPC_REM_ACCESS_SENT : SV_QPC_REM_ACCESS_RCVD;
	else if ((syn & 0x1f) == SV_NAK_INV_REQ)
		c = tx ? SV_QPC_REM_INV_SENT : SV_QPC_REM_INV_RCVD;
	else if ((syn & 0x1f) == SV_NAK_REM_OP)
		c = tx ? SV_QPC_REM_OP_SENT : SV_QPC_REM_OP_RCVD;
	else
		return;
	sv_stat_count(qp, c);
}

/* An ACK, NAK or RNR NAK with syndrome syn went out. */
static inline void sv_stat_ack_tx(struct sv_qp *qp, uint8_t syn)
{
	sv_stat_tx(qp, 0);
	sv_stat_nak(qp, syn, true);
}

/* A packet for qp arrived (qp NULL: no QP has its number); qp->lock held. */
static inline void sv_stat_rx(struct sv_context *ctx, struct sv_qp *qp, uint32_t bytes)
{
	if (!qp) {
		sv_stat_ctx_count(ctx, SV_CTXC_RX_NO_QP);
		return;
	}
	struct sv_stat_qp *s = sv_stat_qp(qp);

	sv_stat_add_locked(&s->c[SV_QPC_RX_PKTS], sv_qp_npkts(qp, bytes));
	sv_stat_add_locked(&s->c[SV_QPC_RX_BYTES], bytes);
}

/* A completion of qp's went into cq (stored) or was lost to a full CQ.
 * (Counted by the QP in hand, whose slot is its handle: undoing the
 * number's permutation, four dependent loads, was a tenth of a placed
 * receive's way from the poll's look to its completion.) */
static inline void sv_stat_cqe(struct sv_cq *cq, struct sv_qp *qp, const struct ibv_wc *wc,
			       bool stored)
{
	struct sv_stat_hdr *h = cq->ctx->stats;

	if (!stored) {
		sv_stat_add(&h->ctx_c[SV_CTXC_CQ_OVERRUN], 1);
		return;
	}
	sv_stat_add(&sv_stat_qp(qp)->c[wc->status == IBV_WC_SUCCESS ? SV_QPC_CQE_OK : SV_QPC_CQE_ERR],
		    1);
	if (wc->status != IBV_WC_SUCCESS && (unsigned)wc->status < SV_STAT_WC_MAX)
		sv_stat_add(&h->wc_status[wc->status], 1);
}

#endif
