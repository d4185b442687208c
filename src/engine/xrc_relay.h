/*
 * XRC domains shared by the processes of a host (xrc_relay.c): an XRC
 * receive QP hands a request that names another process's XRC SRQ to that
 * process, and acknowledges it once that process's verdict says it was
 * placed.
 */
#ifndef SV_XRC_RELAY_H
#define SV_XRC_RELAY_H

#include "engine/objects.h"
#include "engine/opcode.h"

/* What an XRC receive QP keeps beyond an RC QP's state (qp->xrc, allocated
 * when first needed): the packets it relayed (under qp->lock), and its
 * handles (ibv_open_qp; under ctx->lock). */
struct sv_xrc_qp {
	/* a handle ibv_open_qp made: the QP it names (verbs/xrcd.c) */
	struct sv_qp *alias_of;
	/* the QP: its handles open, and whether its creator destroyed its own
	 * (it goes with the last handle, as a kernel's shared XRC QP) */
	uint32_t opens;
	bool creator_closed;
	struct sv_conn *conn;  /* to the SRQ's process (a reference) */
	uint16_t port;	       /* that process's endpoint port */
	struct sv_conn *reply; /* where the requester's answers go, while busy */
	bool busy;	       /* packets relayed wait for their verdict */
	uint32_t last_psn;     /* the last packet relayed */
	/* where the requester resends from if the SRQ's process is lost: the
	 * oldest message without a verdict, and the MSN before it */
	uint32_t first_psn, first_msn;
	uint32_t msg_msn;      /* the QP's MSN before the message being relayed */
	uint32_t msg_srqn;     /* the SRQ that message names */
};

/* Could a request naming srqn, no SRQ of ours, go to another process? */
bool sv_xrc_relay_possible(const struct sv_qp *qp, uint32_t srqn);
/* qp->lock held: hand the request packet (its headers at pkt) on to the
 * owner of srqn; `from` is where the requester's answers go.  0, or
 * -errno when it could not leave (nothing was relayed). */
int sv_xrc_relay_forward(struct sv_qp *qp, struct sv_conn *from, const struct sv_opcode_info *op,
			 const uint8_t *pkt, const uint8_t *payload, uint32_t plen, uint32_t srqn);
/* qp->lock held: no packet waits for a verdict any more. */
void sv_xrc_relay_idle(struct sv_qp *qp);
/* qp->lock held or the QP going: its relay state goes. */
void sv_xrc_relay_free(struct sv_qp *qp);

/* An SV_OP_XRC_RELAY packet arrived (the SRQ's process). */
void sv_xrc_relay_rx(struct sv_conn *conn, const uint8_t *pkt, const uint8_t *payload,
		     uint32_t plen);
/* An XRC SRQ goes: proxies that were filling one of its WQEs forget it. */
void sv_xrc_proxies_detach(struct sv_context *ctx, struct sv_srq *srq);
/* The context closes. */
void sv_xrc_proxies_free(struct sv_context *ctx);

/* A relayed SEND packet, as the SRQ's process places it (responder.c). */
struct sv_relay_pkt {
	const struct sv_opcode_info *op; /* the request's own */
	struct sv_srq *srq;
	const uint8_t *payload;
	uint32_t plen;
	uint32_t imm; /* big-endian, as on the wire */
	bool has_imm;
	bool solicited;
};
/* proxy->lock held: place p into proxy's receive WQE (taken from p->srq at
 * a FIRST), complete it at a LAST; the verdict (SV_VERDICT_*). */
uint8_t sv_responder_relayed(struct sv_qp *proxy, const struct sv_relay_pkt *p);
/* qp->lock held: the verdict on packets qp relayed (SV_OP_XRC_VERDICT). */
void sv_responder_verdict(struct sv_qp *qp, struct sv_conn *conn, const uint8_t *pkt);

#endif
