/*
 * XRC domains shared by the processes of a host (xrc_relay.c): an XRC
 * receive QP hands a request that names another process's XRC SRQ to that
 * process, which executes it in the receive QP's name and answers it
 * through the receive QP.
 */
#ifndef SV_XRC_RELAY_H
#define SV_XRC_RELAY_H

#include "engine/objects.h"
#include "wire/opcode.h"

/* What an XRC receive QP keeps beyond an RC QP's state (qp->xrc, allocated
 * when first needed). */
struct sv_xrc_qp {
	/* a handle ibv_open_qp made: the QP it names (verbs/xrcd.c) */
	struct sv_qp *alias_of;
	/* the QP: its handles open, and whether its creator destroyed its own
	 * (it goes with the last handle, as a kernel's shared XRC QP);
	 * under ctx->lock */
	uint32_t opens;
	bool creator_closed;
	/* under the QP's lock: its creator's handle is gone, and no async
	 * event names it any more (an event names a QP by that handle) */
	bool no_events;
	/* the QP: the processes whose handles are among those opens, one
	 * entry per handle (under ctx->lock) */
	pid_t *openers;
	uint32_t nopeners;
	/* a handle of another process's QP: the connection to that process
	 * (a reference), which opens, queries, modifies and closes it */
	struct sv_conn *remote;
	/* a proxy (the SRQ's process): another process's receive QP, whose
	 * requests this one executes; src_qpn is that QP's requester */
	bool proxy;
	uint32_t src_qpn;
	/* the packets it relayed (under qp->lock) */
	struct sv_conn *conn;  /* to the SRQ's process (a reference) */
	uint16_t port;	       /* that process's endpoint port */
	struct sv_conn *reply; /* where the requester's answers go, while pending */
	/* answers awaited: one for each relayed packet that draws one (a
	 * LAST, one asking for an ACK, a READ, an atomic); the QP is busy
	 * while there are any */
	uint32_t pending;
	uint32_t done_psn; /* the last PSN of an answer handed on (in this window) */
	/* a request came while busy and was dropped: once the window's
	 * answers are in, a sequence NAK has the requester send it again at
	 * once rather than at its ack timeout */
	bool dropped;
	/* where the requester resends from if the SRQ's process is lost: the
	 * oldest message unanswered, and the MSN before it */
	uint32_t first_psn, first_msn;
	uint32_t msg_msn;  /* the QP's MSN before the message being relayed */
	uint32_t msg_srqn; /* the SRQ that message names */
};

/* Could a request naming srqn, no SRQ of ours, go to another process? */
bool sv_xrc_relay_possible(const struct sv_qp *qp, uint32_t srqn);
/* Do packets qp relayed wait for their answers? */
static inline bool sv_xrc_busy(const struct sv_qp *qp)
{
	return qp->xrc && qp->xrc->pending;
}
/* qp->lock held: hand the request packet (hdr_len bytes of headers at pkt,
 * then payload) on to the owner of srqn; `answered`: it draws an answer,
 * which goes on to `from`.  0, or -errno when it could not leave (nothing
 * was relayed). */
int sv_xrc_relay_forward(struct sv_qp *qp, struct sv_conn *from, const uint8_t *pkt,
			 uint32_t hdr_len, const uint8_t *payload, uint32_t plen, uint32_t srqn,
			 bool answered);
/* qp->lock held: no answer is awaited any more. */
void sv_xrc_relay_idle(struct sv_qp *qp);
/* The QP goes: its XRC state goes. */
void sv_xrc_relay_free(struct sv_qp *qp);

/* An SV_OP_XRC_RELAY packet arrived (the SRQ's process). */
void sv_xrc_relay_rx(struct sv_conn *conn, const uint8_t *pkt, const uint8_t *payload,
		     uint32_t plen);
/* An XRC SRQ goes: proxies that were filling one of its WQEs forget it. */
void sv_xrc_proxies_detach(struct sv_context *ctx, struct sv_srq *srq);
/* The context closes (its engine stopped). */
void sv_xrc_proxies_free(struct sv_context *ctx);

/* Who is at the other end of conn, as relays and handles name it: the
 * process (shm), or its endpoint port (tcp, a peer of this host's address
 * that proved the secret); 0 when the transport cannot say (rocev2). */
int32_t sv_xrc_peer_id(const struct sv_conn *conn);
/* The connection to the process whose block holds number (a QP's or an
 * SRQ's), over shm or tcp, with a reference; NULL when there is none
 * (rocev2, or nobody there). */
struct sv_conn *sv_xrc_conn_to(struct sv_context *ctx, uint32_t number);
/* Ask the process at conn to do op (SV_XRC_CTRL_*) on its XRC receive QP
 * qpn of domain x (MODIFY: attr and mask; QUERY: *attr answered); its
 * answer: 0 or an errno (ETIMEDOUT after 2 s without one). */
int sv_xrc_ctrl_call(struct sv_context *ctx, struct sv_conn *conn, uint8_t op, uint32_t qpn,
		     const struct sv_xrcd *x, int mask, struct ibv_qp_attr *attr);
/* An SV_OP_XRC_CTRL packet arrived: a question (done in a thread of its
 * own, answered there) or an answer to one of ours. */
void sv_xrc_ctrl_rx(struct sv_conn *conn, const uint8_t *pkt, const uint8_t *payload,
		    uint32_t plen);
/* ctx->lock held: the openers of qp that are gone no longer keep it open. */
void sv_xrc_openers_prune(struct sv_qp *qp);

/* qp->lock held, a proxy: a new window of relayed requests for srq.  A
 * message left half placed starts again in its receive WQE if srq gave
 * it (as a NIC's would); else its requester abandoned it, and the WQE
 * completes with IBV_WC_REM_ABORT_ERR (responder.c). */
void sv_responder_relay_window(struct sv_qp *qp, struct sv_srq *srq);
/* qp->lock held, a proxy: the receive QP expects psn next, and its
 * messages so far are msn (responder.c). */
void sv_responder_expect(struct sv_qp *qp, uint32_t psn, uint32_t msn);
/* qp->lock held: an answer of the SRQ's process to packets qp relayed,
 * on conn (responder.c). */
void sv_responder_relayed_answer(struct sv_qp *qp, struct sv_conn *conn,
				 const struct sv_opcode_info *op, const uint8_t *pkt,
				 const uint8_t *payload, uint32_t plen);

#endif
