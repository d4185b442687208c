/*
 * A received frame, checked and handed to its role: the responder, the
 * completer, XRC relaying, multicast delivery; a connected QP hears its own
 * peer only.
 */
#include "engine/engine_internal.h"
#include "engine/xrc_relay.h"
#include "engine/gpu.h"
#include "engine/stats.h"

#include <arpa/inet.h>
#include <string.h>

/*
 * Does a packet on conn come from the endpoint an RC/UC QP is connected to
 * (qp->peer, set at RTR)?  Endpoints, not connections: the peer's packets
 * may come on its connection to us or ours to it.
 */
static bool from_peer(const struct sv_qp *qp, const struct sv_conn *conn)
{
	/* a datagram says only its sender's address (every endpoint of it
	 * sends from the same ones), as rxe checks a packet's addresses */
	return sv_ip_eq(&conn->peer.ip, &qp->peer.ip) &&
	       (conn->by_address || conn->peer.port == qp->peer.port);
}

static void dispatch(struct sv_conn *conn, const struct sv_opcode_info *op, uint8_t *hdr,
		     const uint8_t *payload, uint32_t plen, sv_cu_ctx src_gpu)
{
	const struct sv_bth *bth = (const void *)hdr;
	uint32_t dqpn = ntohl(bth->dqpn) & SV_PSN_MASK;
	struct sv_qp *qp;

	if (sv_conn_group(conn)) {
		/* a group carries only what was sent to the group */
		if (dqpn == SV_MCAST_QPN && (op->mask & SV_OPF_REQUEST))
			sv_mcg_deliver(conn, op, hdr, payload, plen);
		return;
	}
	if (op->mask & SV_OPF_RELAY) {
		/* for one of our XRC SRQs, from another process's receive QP */
		sv_xrc_relay_rx(conn, hdr, payload, plen);
		return;
	}
	if (op->mask & SV_OPF_CTRL) {
		/* about an XRC receive QP another process opened, or its answer */
		sv_xrc_ctrl_rx(conn, hdr, payload, plen);
		return;
	}
	qp = sv_qp_lookup(conn->eng->ctx, dqpn);
	if (!qp) {
		sv_stat_rx(conn->eng->ctx, NULL, plen);
		return; /* no such QP: dropped, as a NIC drops it */
	}
	sv_mutex_lock(&qp->lock);
	if ((op->mask & SV_OPF_RESPONSE) && qp->ti->xrc && qp->ti->receives) {
		/* an XRC receive QP sends no requests: an answer to it is the
		 * SRQ process's to requests it relayed (it checks that conn is
		 * the one it relayed on) */
		sv_responder_relayed_answer(qp, conn, op, hdr, payload, plen);
		goto out;
	}
	if (qp->ti->connected && !from_peer(qp, conn)) {
		/* a connected QP hears its own peer only: anyone else could
		 * otherwise forge ACKs and READ responses, draw ACKs that tell
		 * the expected PSN, or move the QP to the error state */
		sv_mutex_unlock(&qp->lock);
		sv_stat_ctx_count(conn->eng->ctx, SV_CTXC_RX_WRONG_PEER);
		sv_qp_put(qp);
		return;
	}
	sv_stat_rx(conn->eng->ctx, qp, plen);
	if (op->mask & SV_OPF_CNP) {
		if (qp->ti->sends)
			sv_flow_cnp(qp); /* congestion.c */
	} else if (op->mask & SV_OPF_REQUEST) {
		if (!qp->ti->receives) /* an XRC send QP */
			goto out;
		sv_responder_rx(qp, conn, op, hdr, payload, plen, src_gpu);
		/* congestion on the way: a CNP back, after the request's own
		 * answer, which it must not delay */
		if (bth->flags & SV_BTH_CE)
			sv_flow_marked(qp, conn, hdr, op);
	} else if (qp->ti->sends) { /* not an XRC receive QP */
		sv_completer_rx(qp, conn, op, hdr, payload, plen, src_gpu);
	}
out:
	sv_mutex_unlock(&qp->lock);
	sv_qp_put(qp);
}

_Static_assert(SV_MAX_PACKET_LEN <= SV_MAX_FRAME, "a packet fits a transport frame");

/*
 * A packet that names its payload in the sender's GPU memory (gpu.h): only
 * from a process of this host (the shm transport vouches for it), only the
 * RC packets that carry data, and only a range inside what the sender
 * exported.  One that cannot be opened is dropped (the sender retries, then
 * fails the operation).
 */
static void rx_gpu_ref(struct sv_conn *conn, const struct sv_opcode_info *op, uint8_t *f,
		       size_t len)
{
	const struct sv_bth *bth = (const void *)f;
	struct sv_gpu_ref ref;
	const uint8_t *src;
	sv_cu_ctx ctx = NULL;

	if (!conn->peer_pid || (bth->opcode & 0xe0) != SV_OP_RC ||
	    !(op->mask & (SV_OPF_SEND | SV_OPF_WRITE | SV_OPF_RDRESP)) ||
	    (op->mask & SV_OPF_ATOMIC_WRITE) || len != op->hdr_len + sizeof(ref)) {
		sv_warn_limited("malformed GPU reference (opcode 0x%02x, len %zu); closing connection",
				bth->opcode, len);
		sv_engine_conn_fail(conn);
		return;
	}
	memcpy(&ref, f + op->hdr_len, sizeof(ref));
	src = sv_gpu_ref_open(&ref, &ctx);
	if (!src) {
		/* the peer is told to send the bytes from now on: the connection
		 * starts again with our HELLO saying so, and the sender's
		 * retransmission carries the payload */
		sv_warn_limited("GPU memory process %d named cannot be opened here; "
				"it sends the bytes from now on", (int)conn->peer_pid);
		sv_cuda_refuse_peer(conn->peer_pid);
		sv_engine_conn_fail(conn);
		return;
	}
	dispatch(conn, op, f, src, ntohl(ref.len), ctx);
}

/* Transport upcall: one frame after the HELLO, checked, then dispatched to a role. */
void sv_eng_rx_frame(struct sv_conn *conn, uint8_t *f, size_t len)
{
	const struct sv_opcode_info *op;
	const struct sv_bth *bth = (const void *)f;

	if (len < sizeof(*bth) || !(op = sv_opcode_info(bth->opcode)) || len < op->hdr_len) {
		sv_warn_limited("malformed packet (len %zu); closing connection", len);
		sv_engine_conn_fail(conn);
		return;
	}
	if (bth->flags & SV_BTH_GPUREF) {
		rx_gpu_ref(conn, op, f, len);
		return;
	}
	dispatch(conn, op, f, f + op->hdr_len, (uint32_t)(len - op->hdr_len), NULL);
}

/* Transport upcall: a packet whose headers were checked, its payload in place. */
void sv_eng_rx_placed(struct sv_conn *conn, uint8_t *hdr, const uint8_t *payload,
		      uint32_t plen)
{
	dispatch(conn, sv_opcode_info(((const struct sv_bth *)hdr)->opcode), hdr, payload, plen,
		 NULL);
}
