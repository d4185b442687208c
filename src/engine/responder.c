/*
 * Responder: executes incoming request packets against local memory.
 * SENDs are placed into receive WQEs (the QP's or its SRQ's), RDMA WRITEs,
 * READs and atomics are executed after the rkey, bounds, access flags and
 * PD checks; RC requests are answered with ACK/NAK/RNR NAK, READ responses
 * or atomic acknowledgements.  Runs in the engine thread with qp->lock held,
 * so one-sided operations need nothing from the target application.
 */
#include "engine/access_check.h"
#include "engine/engine.h"
#include "engine/stats.h"
#include "engine/dma.h"
#include "engine/gpu.h"
#include "engine/direct_recv.h"
#include "engine/xrc_relay.h"
#include "common/fault_guard.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

int sv_send_packet(struct sv_conn *conn, const void *hdr, size_t hdr_len,
		   const struct iovec *payload, int npayload)
{
	struct iovec iov[SV_FRAME_MAX_IOV];

	if (npayload + 1 > SV_FRAME_MAX_IOV)
		return -1;
	iov[0].iov_base = (void *)hdr;
	iov[0].iov_len = hdr_len;
	for (int i = 0; i < npayload; i++)
		iov[i + 1] = payload[i];
	return sv_conn_send(conn, iov, npayload + 1);
}

static void fill_bth(struct sv_qp *qp, struct sv_bth *bth, uint8_t low, uint32_t psn)
{
	bth->opcode = qp->ti->wire_class | low;
	/* a proxy's answers are not the network's (xrc_relay.c) */
	bth->flags = qp->xrc && qp->xrc->proxy ? SV_BTH_RELAYED : 0;
	bth->pkey = 0xffff;
	bth->dqpn = htonl(qp->attr.dest_qp_num & SV_PSN_MASK);
	bth->psn = htonl(psn & SV_PSN_MASK);
}

static void send_ack_msn(struct sv_qp *qp, struct sv_conn *conn, uint32_t psn, uint8_t syn,
			 uint32_t msn)
{
	struct {
		struct sv_bth bth;
		struct sv_aeth aeth;
	} __attribute__((packed)) p;

	fill_bth(qp, &p.bth, SV_OP_ACK, psn);
	p.aeth.syn_msn = htonl(((uint32_t)syn << 24) | (msn & SV_PSN_MASK));
	sv_send_packet(conn, &p, sizeof(p), NULL, 0);
	sv_stat_ack_tx(qp, syn);
}

static void send_ack(struct sv_qp *qp, struct sv_conn *conn, uint32_t psn, uint8_t syn)
{
	send_ack_msn(qp, conn, psn, syn, qp->resp.msn);
}

/* Is qp another process's XRC receive QP, whose requests we execute (xrc_relay.c)? */
static inline bool is_proxy(const struct sv_qp *qp)
{
	return qp->xrc && qp->xrc->proxy;
}

/* The requester's QP number, as a receive completion names it. */
static inline uint32_t src_qpn(const struct sv_qp *qp)
{
	return is_proxy(qp) ? qp->xrc->src_qpn : qp->attr.dest_qp_num;
}

/* The QP fails.  A proxy has no queues, events or table entries: it only
 * stops (the receive QP it stands for fails on the NAK it hands on). */
static void enter_error(struct sv_qp *qp)
{
	if (is_proxy(qp))
		qp->state = IBV_QPS_ERR;
	else
		sv_qp_enter_error(qp);
}

/* A responder-side error on RC: NAK it and take the QP to ERR (IBA class B/C). */
static void nak_fatal(struct sv_qp *qp, struct sv_conn *conn, uint32_t psn, uint8_t code)
{
	if (qp->ti->reliable)
		send_ack(qp, conn, psn, SV_AETH_NAK | code);
	enter_error(qp);
}

/* The receive WQE being filled is done with (completed, flushed or
 * dropped).  One taken from an SRQ's queue in the arena held back what
 * peers placed for this QP after it: that goes now, in order. */
static void rwqe_done(struct sv_qp *qp)
{
	qp->resp.have_rwqe = false;
	if (atomic_load_explicit(&qp->resp.srq_open, memory_order_relaxed)) {
		atomic_store_explicit(&qp->resp.srq_open, false, memory_order_release);
		sv_xrq_drain(qp);
	}
}

/* extra_flags IBV_WC_WITH_INV: inv_rkey is the key a SEND_WITH_INV invalidated */
static void complete_recv(struct sv_qp *qp, enum ibv_wc_status st, enum ibv_wc_opcode opc,
			  uint32_t byte_len, const struct sv_immdt *imm, uint32_t src_qp,
			  unsigned int extra_flags, uint32_t inv_rkey, bool solicited)
{
	struct ibv_wc wc = {
		.wr_id = qp->resp.rwqe.wr_id,
		.status = st,
		.opcode = opc,
		.byte_len = byte_len,
		.qp_num = qp->ex.qp_base.qp_num,
		.src_qp = src_qp,
		.wc_flags = extra_flags,
	};

	if (imm) {
		wc.imm_data = imm->imm;
		wc.wc_flags |= IBV_WC_WITH_IMM;
	} else if (extra_flags & IBV_WC_WITH_INV) {
		wc.invalidated_rkey = inv_rkey;
	}
	if (st != IBV_WC_SUCCESS)
		wc.vendor_err = st;
	sv_cq_push(qp->rcq, qp, &wc, solicited);
	rwqe_done(qp);
}

static enum ibv_wc_status place(struct sv_qp *qp, const uint8_t *data, uint32_t len,
			       sv_cu_ctx src_gpu)
{
	uint64_t cap = sv_sgl_len(qp->resp.rwqe.sge, qp->resp.rwqe.num_sge);
	enum sv_mem_err e;

	if ((uint64_t)qp->resp.rwqe_off + len > cap)
		return IBV_WC_LOC_LEN_ERR;
	/* receive buffers belong to the PD of the queue they were posted to */
	e = sv_sgl_copy_in(qp->ctx, qp->srq ? qp->srq->pd : qp->pd, qp->resp.rwqe.sge, qp->resp.rwqe.num_sge,
			   qp->resp.rwqe_off, data, len, &qp->resp.gpu_in, src_gpu);
	if (e)
		return IBV_WC_LOC_PROT_ERR;
	qp->resp.rwqe_off += len;
	return IBV_WC_SUCCESS;
}

/* A UD datagram whose Q_Key matched, into the receive WQE taken for it. */
static void ud_rx(struct sv_qp *qp, struct sv_conn *conn, const struct sv_opcode_info *op,
		  uint8_t *pkt, const uint8_t *payload, uint32_t plen)
{
	const struct sv_bth *bth = (const void *)pkt;
	const struct sv_deth *deth = (const void *)(pkt + op->off_deth);
	const struct sv_immdt *imm = op->off_immdt ? (const void *)(pkt + op->off_immdt) : NULL;
	uint8_t grh[40] = { 0 };
	enum ibv_wc_status st;

	/* the 40-byte GRH precedes the payload: IPv6-style header, GIDs at 8 and 24 */
	grh[0] = 6 << 4;
	grh[4] = (uint8_t)(plen >> 8);
	grh[5] = (uint8_t)plen;
	grh[6] = 0x1b; /* next header: IBA transport */
	grh[7] = 1;    /* hop limit */
	/* the GIDs of the two host ports: IPv4-mapped, as RoCE v2 carries
	 * them, or IPv6 (an IPv6 peer of rocev2 reaches our IPv6 address) */
	memcpy(grh + 8, &conn->peer.ip, 16);
	if (sv_conn_group(conn)) {
		memcpy(grh + 24, sv_conn_group(conn)->raw, 16); /* sent to the group */
	} else if (sv_ip_is_v4(&conn->peer.ip) || !qp->ctx->dev->has_ip6) {
		memcpy(grh + 24, &qp->ctx->dev->addr, 16);
	} else {
		memcpy(grh + 24, &qp->ctx->dev->ip6, 16);
	}
	qp->resp.rwqe_off = 0;
	st = place(qp, grh, sizeof(grh), NULL);
	if (st == IBV_WC_SUCCESS)
		st = place(qp, payload, plen, NULL);
	/* what went to GPU memory is there before the completion says so */
	if (sv_gpu_sink_fence(qp->resp.gpu_in) && st == IBV_WC_SUCCESS)
		st = IBV_WC_LOC_PROT_ERR;
	complete_recv(qp, st, IBV_WC_RECV, st == IBV_WC_SUCCESS ? plen + 40 : 0, imm,
		      ntohl(deth->sqpn) & SV_PSN_MASK, IBV_WC_GRH, 0, bth->flags & SV_BTH_SE);
}

/*
 * A SEND/WRITE packet was executed: advance the expected PSN (RC) and, on the
 * last packet, end the message and acknowledge it.  Returns true at the end
 * of a message; the caller then posts the receive completion, after the ACK
 * is written, because once the application sees its message it may close,
 * or die (or, in the polling thread's own pass, right after the
 * application's next step: sv_eng_answers_for_completion).  ACKs of WRITEs,
 * which complete nothing here, stay corked and leave together at the end
 * of the receive pass.
 */
static bool packet_done(struct sv_qp *qp, struct sv_conn *conn, const struct sv_opcode_info *op,
			uint32_t psn, bool ackreq)
{
	bool rc = qp->ti->reliable;

	if (rc)
		qp->resp.epsn = sv_psn_add(psn, 1);
	if (!(op->mask & SV_OPF_LAST)) {
		/* the requester's window over a datagram transport moves on
		 * such ACKs in the middle of a long message */
		if (rc && ackreq)
			send_ack(qp, conn, psn, SV_AETH_ACK | 0x1f);
		return false;
	}
	/* the message's bytes bound for GPU memory are there before its ACK
	 * or completion says so; if they cannot be, it fails (no completion
	 * of success after that: the QP's flush completes its receive) */
	if (sv_gpu_sink_fence(qp->resp.gpu_in)) {
		nak_fatal(qp, conn, psn, SV_NAK_REM_ACCESS);
		return false;
	}
	qp->resp.in_msg = false;
	qp->resp.msn++;
	/* as rxe: only when asked (a requester may coalesce, requester.c) */
	if (rc && ackreq)
		send_ack(qp, conn, psn, SV_AETH_ACK | 0x1f);
	return true;
}

/*
 * ---- The check path ----
 *
 * Every request packet goes through the same named steps, each returning a
 * named result; the first result that is not RESP_OK ends the path, and
 * respond() turns it into what the IBA prescribes for the QP's type (one
 * table, resp_actions[]).  Modelled on rxe_resp.c's states.  The direct
 * receive of WRITE payloads (receive.c) runs the same steps, side-effect
 * free, before a payload is read into place.
 */
enum resp_result {
	RESP_OK,             /* go on with the next step */
	RESP_DONE,           /* executed: answered (or not) by the step itself */
	RESP_DROP,           /* not for this QP now: silently dropped */
	RESP_DUPLICATE,      /* RC, PSN behind: answered again (READ, atomic, ACK) */
	RESP_PSN_AHEAD,      /* RC, PSN beyond a gap: dropped, the requester resends */
	RESP_NO_RECV,        /* SEND with no receive WQE posted */
	RESP_NO_RECV_IMM,    /* WRITE with immediate, no receive WQE at its LAST */
	RESP_ERR_LENGTH,     /* packet longer than the path MTU */
	RESP_ERR_SEQUENCE,   /* MIDDLE/LAST with no message open */
	RESP_ERR_QP_ACCESS,  /* the QP does not allow this operation (or misaligned atomic) */
	RESP_ERR_RKEY,       /* key, bounds, access or PD refused at the message start */
	RESP_ERR_RKEY_LATE,  /* the MR went away in the middle of a WRITE */
	RESP_ERR_WRITE_LEN,  /* payload beyond (or short of) the WRITE's DMA length */
	RESP_ERR_RECV_LEN,   /* SEND longer than its receive WQE */
	RESP_ERR_RECV_PROT,  /* receive WQE's memory refused */
	RESP_ERR_INVALIDATE, /* SEND_WITH_INV names no window it may invalidate */
	RESP_ERR_XRC_SRQ,    /* XRC: no XRC SRQ of the QP's domain has that number */
	RESP_NRESULTS,
};

/* What a result does, per QP type (sv_qp_type_info.index: RC, UC, UD). */
struct resp_action {
	uint8_t nak;        /* AETH syndrome to send (RC), 0 for none */
	bool to_error;      /* the QP moves to ERR (and flushes) */
	bool drop_message;  /* UC: drop the rest of the message, until a FIRST */
	bool end_message;   /* the open message is over */
};

#define NAK(code) (SV_AETH_NAK | (code))
static const struct resp_action resp_actions[RESP_NRESULTS][3] = {
	/* RC: NAK and ERR for every error (IBA classes B and C); UC: the
	 * message is lost, or the QP fails where the receive WQE would be
	 * left half filled; UD never gets past its Q_Key and receive checks */
	/*                         RC                                   UC                  UD */
	[RESP_ERR_LENGTH] = { { NAK(SV_NAK_INV_REQ), true, false, false }, { 0, true, false, false } },
	[RESP_ERR_SEQUENCE] = { { NAK(SV_NAK_INV_REQ), true, false, false } },
	[RESP_ERR_QP_ACCESS] = { { NAK(SV_NAK_INV_REQ), true, false, false } },
	[RESP_ERR_RKEY] = { { NAK(SV_NAK_REM_ACCESS), true, false, true }, { 0, false, true, true } },
	[RESP_ERR_RKEY_LATE] = { { NAK(SV_NAK_REM_ACCESS), true, false, true },
				 { 0, false, false, true } },
	[RESP_ERR_WRITE_LEN] = { { NAK(SV_NAK_INV_REQ), true, false, true }, { 0, false, false, true } },
	[RESP_ERR_RECV_LEN] = { { NAK(SV_NAK_INV_REQ), true, false, true }, { 0, true, false, true },
				{ 0 } },
	[RESP_ERR_INVALIDATE] = { { NAK(SV_NAK_INV_REQ), true, false, true } },
	[RESP_ERR_XRC_SRQ] = { { NAK(SV_NAK_INV_REQ), true, false, true } },
	[RESP_ERR_RECV_PROT] = { { NAK(SV_NAK_REM_OP), true, false, true }, { 0, true, false, true },
				 { 0 } },
	/* RC: an RNR NAK (respond()); UC: the message is lost; UD: the datagram */
	[RESP_NO_RECV] = { { 0 }, { 0, false, true, false }, { 0 } },
	[RESP_NO_RECV_IMM] = { { 0, false, false, true }, { 0, false, false, true } },
};
#undef NAK

/* One incoming request, as the steps see it. */
struct resp_pkt {
	struct sv_qp *qp;
	struct sv_conn *conn;
	const struct sv_opcode_info *op;
	uint8_t *hdr;
	const uint8_t *payload;
	uint32_t plen;
	sv_cu_ctx src_gpu; /* payload in a peer's GPU memory, opened here (gpu.h) */
	uint32_t psn;
	/* a stream's frame carries a run of whole packets (check_length): its
	 * last packet's PSN; psn for one packet */
	uint32_t psn_last;
	uint8_t low; /* opcode within its class */
	const struct sv_immdt *imm;
	bool solicited;
	bool ackreq; /* the requester asks for an ACK of this packet */
	/* XRC: the SRQ it names is another process's (xrc_relay.c) */
	bool relay;
	uint32_t srqn;
	struct sv_pd *pd; /* XRC, a duplicate: its SRQ's PD (NULL: none) */
};

/* Step: the packet's transport class is the QP's. */
static enum resp_result check_transport(const struct resp_pkt *p)
{
	return (p->hdr[0] & 0xe0) == p->qp->ti->wire_class ? RESP_OK : RESP_DROP;
}

/* XRC: what was relayed from psn on (MSN msn before it) is not taken in
 * after all; the requester sends it again, and no answer is awaited. */
static void relay_rewind(struct sv_qp *qp, uint32_t psn, uint32_t msn)
{
	qp->resp.epsn = psn;
	qp->resp.msn = msn;
	qp->resp.in_msg = false;
	sv_xrc_relay_idle(qp);
}

/*
 * Step (XRC receive QPs): the XRC SRQ the request names (XRCETH), which
 * must be of the QP's domain, is the QP's for this request: its PD is the
 * one keys are checked against, its queue and CQ take a SEND.  A message
 * keeps the SRQ it started with.  An SRQ of another process of the domain
 * takes it through that process (exec_relay).  Only the expected packet
 * is judged here: a duplicate or one beyond a gap is check_psn's (a
 * duplicate READ reads under its own SRQ's PD: p->pd).
 */
static enum resp_result check_xrc(struct resp_pkt *p)
{
	struct sv_qp *qp = p->qp;
	const struct sv_xrceth *x;
	struct sv_srq *srq;
	bool busy, in_seq;

	if (!qp->ti->xrc)
		return RESP_OK;
	x = (const void *)(p->hdr + p->op->off_xrceth);
	p->srqn = ntohl(x->srqn) & SV_PSN_MASK;
	busy = sv_xrc_busy(qp);
	if (busy && (!qp->xrc->conn || atomic_load(&qp->xrc->conn->state) == SV_CONN_DEAD)) {
		/* the SRQ's process is gone, or its connection: what waited for
		 * its answers is sent again from the oldest such message */
		relay_rewind(qp, qp->xrc->first_psn, qp->xrc->first_msn);
		busy = false;
	}
	in_seq = p->psn == qp->resp.epsn;
	srq = sv_xrc_srq_lookup(qp->ctx, qp->xrcd, p->srqn);
	if (!srq && sv_xrc_relay_possible(qp, p->srqn)) {
		/* another process's, maybe: a message goes to one SRQ, and a
		 * window of relayed packets to one process */
		if (in_seq && qp->resp.in_msg &&
		    (qp->srq || !qp->xrc || p->srqn != qp->xrc->msg_srqn))
			return RESP_ERR_XRC_SRQ;
		if (busy && qp->xrc->port != sv_qpn_port(p->srqn)) {
			qp->xrc->dropped = true;
			return RESP_DROP;
		}
		p->relay = true;
		if (in_seq) {
			qp->srq = NULL;
			qp->pd = NULL;
			qp->rcq = NULL;
		}
		return RESP_OK;
	}
	if (!in_seq) {
		p->pd = srq ? srq->pd : NULL;
		return RESP_OK;
	}
	if (!srq || (qp->resp.in_msg && srq != qp->srq))
		return RESP_ERR_XRC_SRQ;
	if (busy) {
		qp->xrc->dropped = true;
		return RESP_DROP; /* after the relayed packets' answers */
	}
	qp->srq = srq;
	qp->pd = srq->pd;
	qp->rcq = srq->cq;
	return RESP_OK;
}

/* Step: the QP receives in RTR, RTS, SQD and SQE; elsewhere packets are dropped. */
static enum resp_result check_state(const struct resp_pkt *p)
{
	return sv_qp_state_receives(p->qp->state) ? RESP_OK : RESP_DROP;
}

/*
 * Step: a packet carries at most one path MTU.  A frame of a stream may
 * carry a run of a SEND's or WRITE's packets, as many as the stream's
 * frame holds, each of them whole but the message's last (and never an
 * XRC QP's: those go packet by packet, since they may be relayed).
 */
static enum resp_result check_length(const struct resp_pkt *p)
{
	const struct sv_qp *qp = p->qp;

	if (p->plen <= qp->mtu)
		return RESP_OK;
	if (qp->ti->xrc || qp->ti->ud || !(p->op->mask & (SV_OPF_SEND | SV_OPF_WRITE)) ||
	    p->plen > sv_conn_run(p->conn, qp->mtu))
		return RESP_ERR_LENGTH;
	return (p->op->mask & SV_OPF_LAST) || !(p->plen % qp->mtu) ? RESP_OK : RESP_ERR_LENGTH;
}

/* Step (UD): the Q_Key must match; a wrong one is dropped, as the IBA requires. */
static enum resp_result check_qkey(const struct resp_pkt *p)
{
	const struct sv_deth *deth = (const void *)(p->hdr + p->op->off_deth);

	if (ntohl(deth->qkey) == p->qp->attr.qkey)
		return RESP_OK;
	sv_stat_count(p->qp, SV_QPC_QKEY_VIOL);
	return RESP_DROP;
}

/*
 * Step: the PSN.  RC: the expected one executes, an older one is a
 * duplicate, a newer one lies beyond a gap.  UC: a gap loses the current
 * message, and the next FIRST or ONLY starts over.
 */
static enum resp_result check_psn(const struct resp_pkt *p)
{
	struct sv_qp *qp = p->qp;

	if (qp->ti->reliable) {
		int32_t c = sv_psn_cmp(p->psn, qp->resp.epsn);

		if (c == 0)
			qp->resp.seq_nak_sent = false; /* the gap, if any, is closed */
		return c < 0 ? RESP_DUPLICATE : c > 0 ? RESP_PSN_AHEAD : RESP_OK;
	}
	if (p->op->mask & SV_OPF_FIRST) {
		if (qp->resp.in_msg && qp->resp.have_rwqe)
			qp->resp.rwqe_off = 0; /* reuse the WQE for the new message */
		qp->resp.in_msg = false;
		qp->resp.drop_msg = false;
	} else if (p->psn != qp->resp.epsn) {
		sv_stat_count(qp, SV_QPC_SEQ_ERR);
		qp->resp.drop_msg = true;
	}
	qp->resp.epsn = sv_psn_add(p->psn_last, 1);
	return qp->resp.drop_msg ? RESP_DROP : RESP_OK;
}

/* Step: a MIDDLE or LAST continues an open message of the same kind. */
static enum resp_result check_sequence(const struct resp_pkt *p, bool write)
{
	const struct sv_qp *qp = p->qp;

	if (p->op->mask & SV_OPF_FIRST)
		return RESP_OK;
	return qp->resp.in_msg && qp->resp.in_write == write ? RESP_OK : RESP_ERR_SEQUENCE;
}

/* Step: the QP allows the remote operation (and an atomic's address is
 * aligned): the predicate the direct executor applies too (access_check.h). */
static enum resp_result check_qp_access(const struct resp_pkt *p, unsigned int access,
					uint64_t va)
{
	return sv_qp_allows_remote(p->qp->attr.qp_access_flags, access, va,
				   access == IBV_ACCESS_REMOTE_ATOMIC)
		       ? RESP_OK
		       : RESP_ERR_QP_ACCESS;
}

/*
 * Step: key, PD, access flag and bounds of [va, va+len) under rkey; *mem is
 * where it is here.  The only place the responder checks an rkey, with the
 * predicates the direct executor applies to the export table too
 * (access_check.h).  The caller holds the MR read lock for as long as it
 * uses *mem.
 */
static enum resp_result check_rkey(const struct sv_qp *qp, uint32_t rkey, uint64_t va,
				   uint64_t len, unsigned int access, uint8_t **mem, sv_cu_ctx *gpu)
{
	return sv_key_translate_remote(qp->ctx, rkey, qp->pd, qp->ex.qp_base.qp_num, va, len,
				       access, mem, gpu)
		       ? RESP_ERR_RKEY
		       : RESP_OK;
}

/* Pop one receive WQE from the SRQ or the QP's RQ into qp->resp.rwqe. */
static bool take_recv(struct sv_qp *qp)
{
	struct sv_rq *rq;
	struct sv_recv_wqe *w;
	bool limit = false;

	if (qp->srq) {
		sv_mutex_lock(&qp->srq->lock);
		rq = &qp->srq->rq;
		/* as below, for the SRQ's queue: a WQE a peer took for one of
		 * its QPs and has not finished holds back the ones after it,
		 * so that none of that QP's messages completes before it */
		if (rq->xl) {
			if (!sv_xrq_srq_take(qp->srq, &limit)) {
				sv_mutex_unlock(&qp->srq->lock);
				if (limit)
					sv_srq_limit_event(qp->srq);
				return false;
			}
			/* (its completion comes before theirs: rwqe_done) */
			atomic_store_explicit(&qp->resp.srq_open, true, memory_order_relaxed);
		}
	} else {
		rq = &qp->rq;
		/* receives a peer of this host completed go first, in order;
		 * and the head is taken from the peers' view too */
		if (rq->xl) {
			sv_xrq_drain(qp);
			if (!rq->count || !sv_xrq_take(qp))
				return false;
		}
	}
	if (!rq->count) {
		if (qp->srq)
			sv_mutex_unlock(&qp->srq->lock);
		return false;
	}
	w = &rq->wqe[rq->head];
	qp->resp.rwqe.wr_id = w->wr_id;
	qp->resp.rwqe.num_sge = w->num_sge;
	qp->resp.rwqe.sge = qp->rwqe_sge;
	if (w->num_sge)
		memcpy(qp->rwqe_sge, w->sge, sizeof(*w->sge) * w->num_sge);
	rq->head = (rq->head + 1) % rq->size;
	rq->count--;
	if (qp->srq) {
		if (qp->srq->srq_limit && sv_xrq_srq_avail(qp->srq) < qp->srq->srq_limit) {
			qp->srq->srq_limit = 0; /* the limit is one-shot: disarm */
			limit = true;
		}
		sv_mutex_unlock(&qp->srq->lock);
		if (limit)
			sv_srq_limit_event(qp->srq);
	}
	qp->resp.have_rwqe = true;
	qp->resp.rwqe_off = 0;
	return true;
}

/* Step: a receive WQE for the message (the QP's or its SRQ's). */
static enum resp_result check_recv(struct sv_qp *qp)
{
	return qp->resp.have_rwqe || take_recv(qp) ? RESP_OK : RESP_NO_RECV;
}

/* Bytes from off of a READ from GPU memory at mem, staged (up to the MTU). */
static uint8_t *stage_read(struct sv_qp *qp, struct sv_txbatch *b, sv_cu_ctx gpu, uint32_t psn,
			   const uint8_t *mem, uint32_t off, uint32_t dma_len)
{
	uint32_t plen = SV_MIN(qp->mtu, dma_len - off);
	uint8_t *s = sv_gpu_stage_find(qp->resp.gpu_rd, (uintptr_t)mem, psn, off, plen);

	if (s)
		return s;
	sv_txbatch_flush(b); /* its packets may point into the window */
	s = sv_gpu_stage_claim(&qp->resp.gpu_rd, gpu, (uintptr_t)mem, psn, off, dma_len);
	if (s && sv_dma_read(gpu, s, mem + off, qp->resp.gpu_rd->len)) {
		sv_gpu_stage_forget(qp->resp.gpu_rd);
		s = NULL;
	}
	return s;
}

/*
 * READ request: send the response packets from packet `from` on (possibly a
 * replay of a duplicate).  They are made a batch at a time, and only while
 * the connection takes them: when a batch leaves bytes waiting in its
 * queue, the rest waits in qp->resp.rd_left, and the engine asks for it again
 * (sv_responder_resume) once the connection has drained.  So a READ holds
 * one batch of memory here, whatever its length and however slowly its
 * requester reads (the QP's later requests and the connection's input wait
 * meanwhile: connections.c, rx_held).
 *
 * A datagram transport has no queue: what the socket takes is the
 * network's.  There the rest waits in qp->resp.rd_left after every
 * SV_DGRAM_READ_BURST packets, until the engine has looked at its
 * listeners: a 64 MiB READ is 16,384 datagrams, whose making took the
 * engine thread longer than the requester's ack timeout, during which it
 * read nothing, neither the requester's ACKs and repeated requests nor the
 * datagrams the kernel gave it for other contexts of the host, which it
 * passes on (rocev2.c): with each repeat answered whole again behind it,
 * such a READ never completed.
 */
#define SV_DGRAM_READ_BURST 128u

/* The READ's response packets from k on are made later, on conn (a
 * reference kept with them): qp->resp.rd_left. */
static void read_left(struct sv_qp *qp, struct sv_conn *conn, uint64_t va, uint32_t rkey,
		      uint32_t dma_len, uint32_t psn, uint32_t k)
{
	sv_conn_get(conn);
	qp->resp.rd_left.conn = conn;
	qp->resp.rd_left.va = va;
	qp->resp.rd_left.rkey = rkey;
	qp->resp.rd_left.dma_len = dma_len;
	qp->resp.rd_left.psn = psn;
	qp->resp.rd_left.next = k;
}

static enum resp_result do_read(struct sv_qp *qp, struct sv_conn *conn, uint32_t psn,
				uint64_t va, uint32_t rkey, uint32_t dma_len, uint32_t from)
{
	uint32_t npkts = sv_qp_npkts(qp, dma_len), run;
	uint8_t *mem = NULL;
	sv_cu_ctx gpu = NULL;
	struct resp_pkt p = { .qp = qp };
	enum resp_result r = check_qp_access(&p, IBV_ACCESS_REMOTE_READ, 0);
	struct sv_txbatch b;

	if (r != RESP_OK)
		return r;
	sv_gpu_sink_drain(qp->resp.gpu_in); /* a READ sees the writes before it */
	sv_mr_read_lock(qp->ctx);
	if (dma_len)
		r = check_rkey(qp, rkey, va, dma_len, IBV_ACCESS_REMOTE_READ, &mem, &gpu);
	/* the responses point into the memory until the transport has taken
	 * them: memory the application unmapped is refused here, as an rkey
	 * the MR does not cover would be */
	if (r == RESP_OK && dma_len && !gpu &&
	    !sv_probe_guarded(mem + (size_t)from * qp->mtu, dma_len - (size_t)from * qp->mtu))
		r = RESP_ERR_RKEY;
	if (r != RESP_OK) {
		sv_mr_read_unlock(qp->ctx);
		return r;
	}
	/* responses leave in batches, one write for many packets; on a
	 * stream, a frame carries a run of them (not GPU memory's, which is
	 * answered a packet at a time through its windows and references, nor
	 * an XRC QP's, as its requests come) */
	run = gpu || qp->ti->xrc || is_proxy(qp) ? qp->mtu : sv_conn_run(conn, qp->mtu);
	sv_txbatch_init(&b);
	for (uint32_t k = from, n; k < npkts; k += n) {
		uint32_t off = k * qp->mtu, plen = SV_MIN(run, dma_len - off);
		struct iovec iov = { dma_len ? mem + off : NULL, plen };
		struct sv_gpu_ref ref;
		bool by_ref;
		uint8_t *hdr, low;
		struct sv_bth *bth;
		size_t hl = sizeof(*bth);

		n = sv_qp_npkts(qp, plen);
		low = n == npkts	   ? SV_OP_READ_RESP_ONLY
		      : k == 0		   ? SV_OP_READ_RESP_FIRST
		      : k + n == npkts ? SV_OP_READ_RESP_LAST
				       : SV_OP_READ_RESP_MIDDLE;

		if (conn->lossy && k > from && !((k - from) % SV_DGRAM_READ_BURST) &&
		    !is_proxy(qp)) {
			sv_txbatch_flush(&b);
			read_left(qp, conn, va, rkey, dma_len, psn, k);
			sv_engine_read_later(conn, qp);
			break;
		}
		if (!sv_txbatch_fits(&b, conn, 1)) {
			sv_txbatch_flush(&b);
			if (atomic_load(&conn->state) == SV_CONN_DEAD)
				break; /* the requester asks again, on another connection */
			/* (a proxy's READ is answered whole: its connection
			 * is to a process of this host, which reads it) */
			if (atomic_load_explicit(&conn->txq_bytes, memory_order_relaxed) &&
			    !is_proxy(qp) && sv_engine_read_wait(conn, qp)) {
				/* the rest when the connection has drained */
				read_left(qp, conn, va, rkey, dma_len, psn, k);
				break;
			}
		}
		by_ref = gpu && sv_gpu_ref_ok(conn) &&
			 sv_gpu_ref_make(sv_key_entry(qp->ctx, rkey), mem + off,
					 (uint32_t)iov.iov_len, &ref);
		if (gpu && dma_len && !by_ref) {
			/* GPU memory answers from a host window onto it */
			iov.iov_base = stage_read(qp, &b, gpu, psn, mem, off, dma_len);
			if (!iov.iov_base) {
				/* the driver failed: the READ is refused (REM_ACCESS
				 * NAK) after what was sent of it */
				sv_warn_limited("GPU memory could not be read for a READ response");
				r = RESP_ERR_RKEY;
				break;
			}
		}
		hdr = sv_txbatch_hdr(&b); /* after any flush of the staging */
		bth = (void *)hdr;
		fill_bth(qp, bth, low, sv_psn_add(psn, k));
		if (sv_opcode_info(qp->ti->wire_class | low)->off_aeth) {
			struct sv_aeth aeth = { htonl(((uint32_t)SV_AETH_ACK << 24) |
						      (qp->resp.msn & SV_PSN_MASK)) };

			memcpy(hdr + hl, &aeth, sizeof(aeth));
			hl += sizeof(aeth);
		}
		if (by_ref) {
			/* named, not carried: the requester copies it GPU to GPU */
			bth->flags |= SV_BTH_GPUREF;
			memcpy(hdr + hl, &ref, sizeof(ref));
			hl += sizeof(ref);
		}
		sv_txbatch_add(&b, conn, hl, &iov, dma_len && !by_ref ? 1 : 0);
		sv_stat_tx(qp, dma_len ? (uint32_t)iov.iov_len : 0);
	}
	sv_txbatch_flush(&b);
	sv_mr_read_unlock(qp->ctx);
	sv_gpu_stage_forget(qp->resp.gpu_rd); /* a replay reads the memory again */
	return r == RESP_OK ? RESP_DONE : r;
}

/* qp->lock held: the READ waiting in qp->resp.rd_left is over (done, or moot). */
static void read_left_end(struct sv_qp *qp)
{
	struct sv_conn *conn = qp->resp.rd_left.conn;

	qp->resp.rd_left.conn = NULL;
	sv_engine_read_done(conn, qp);
	sv_conn_put(conn);
}

void sv_responder_resume(struct sv_qp *qp)
{
	struct sv_conn *conn = qp->resp.rd_left.conn;
	uint64_t va = qp->resp.rd_left.va;
	uint32_t rkey = qp->resp.rd_left.rkey, dma_len = qp->resp.rd_left.dma_len;
	uint32_t psn = qp->resp.rd_left.psn, next = qp->resp.rd_left.next;
	struct resp_pkt p = { .qp = qp };
	enum resp_result r;

	if (!conn)
		return;
	sv_conn_get(conn);
	read_left_end(qp);
	/* a QP whose responder stopped (check_state), or a connection that
	 * broke, sends no more: the requester asks again where it still can */
	if (!qp->destroyed && check_state(&p) == RESP_OK &&
	    atomic_load(&conn->state) == SV_CONN_UP) {
		/* the key is checked again: the MR may have gone meanwhile */
		r = do_read(qp, conn, psn, va, rkey, dma_len, next);
		if (r != RESP_DONE)
			nak_fatal(qp, conn, psn,
				  r == RESP_ERR_RKEY ? SV_NAK_REM_ACCESS : SV_NAK_INV_REQ);
	}
	sv_conn_put(conn);
}

void sv_responder_cancel(struct sv_qp *qp)
{
	if (qp->resp.rd_left.conn)
		read_left_end(qp);
}

/*
 * The QP is being destroyed.  On a path that loses packets, the ACK of the
 * last requests that arrived may have been lost, and nothing will answer
 * their resends: a peer whose last SEND arrived here then ends in
 * IBV_WC_RETRY_EXC_ERR, although its message was delivered.  That is how
 * ibv_rc_pingpong ends (each side exits once it has its own completions),
 * and a NIC meets it too.  The ACK of what arrived goes again, twice, on
 * the way out; a peer that had it takes it as a duplicate.  Not over shm or
 * tcp, which lose nothing (unless SOFTVERBS_FAULTS makes them), and not by
 * a QP that has sent nothing (it has no connection of its own to send it
 * on; ibv_rc_pingpong's server answers every message).
 */
void sv_responder_farewell(struct sv_qp *qp)
{
	struct sv_conn *conn;

	if (!qp->ti->reliable || !qp->ti->connected || qp->xrc || !sv_qp_state_receives(qp->state) ||
	    qp->resp.epsn == qp->attr.rq_psn /* nothing arrived */)
		return;
	/* the QP's own connection to the peer, made by its first request: a
	 * QP that never sent one has none, and none is made now (over tcp
	 * that would be a new connection, on the way out) */
	conn = qp->conn;
	if (!conn || !(conn->lossy || sv_faults_enabled) ||
	    atomic_load(&conn->state) != SV_CONN_UP)
		return;
	for (int i = 0; i < 2; i++)
		send_ack(qp, conn, sv_psn_add(qp->resp.epsn, SV_PSN_MASK), SV_AETH_ACK | 0x1f);
}

static void send_atomic_ack(struct sv_qp *qp, struct sv_conn *conn, uint32_t psn, uint64_t orig)
{
	struct {
		struct sv_bth bth;
		struct sv_aeth aeth;
		struct sv_atmack ack;
	} __attribute__((packed)) p;

	fill_bth(qp, &p.bth, SV_OP_ATOMIC_ACK, psn);
	p.aeth.syn_msn = htonl(((uint32_t)SV_AETH_ACK << 24) | (qp->resp.msn & SV_PSN_MASK));
	p.ack.orig = htobe64(orig);
	sv_send_packet(conn, &p, sizeof(p), NULL, 0);
	sv_stat_tx(qp, 0);
}

/* An atomic write is acknowledged as a READ of nothing (IBA 1.5, as rxe). */
static void send_read_ack(struct sv_qp *qp, struct sv_conn *conn, uint32_t psn)
{
	struct {
		struct sv_bth bth;
		struct sv_aeth aeth;
	} __attribute__((packed)) p;

	fill_bth(qp, &p.bth, SV_OP_READ_RESP_ONLY, psn);
	p.aeth.syn_msn = htonl(((uint32_t)SV_AETH_ACK << 24) | (qp->resp.msn & SV_PSN_MASK));
	sv_send_packet(conn, &p, sizeof(p), NULL, 0);
	sv_stat_tx(qp, 0);
}

/*
 * ATOMIC WRITE: its 8 bytes are stored at once, with release order (every
 * write before it is visible first), at an aligned address the rkey allows
 * to write.  A duplicate is acknowledged again, not executed again.
 */
static enum resp_result exec_atomic_write(const struct resp_pkt *p)
{
	struct sv_qp *qp = p->qp;
	const struct sv_reth *r = (const void *)(p->hdr + p->op->off_reth);
	uint64_t va = be64toh(r->va), v;
	enum resp_result res = check_qp_access(p, IBV_ACCESS_REMOTE_WRITE, va);
	sv_cu_ctx gpu = NULL;
	uint64_t *word;

	if (res != RESP_OK)
		return res;
	if (ntohl(r->dma_len) != 8 || p->plen != 8)
		return RESP_ERR_WRITE_LEN;
	if (va & 7)
		return RESP_ERR_QP_ACCESS; /* misaligned, as for the other atomics */
	sv_gpu_sink_drain(qp->resp.gpu_in); /* after the writes before it */
	sv_mr_read_lock(qp->ctx);
	res = check_rkey(qp, ntohl(r->rkey), va, 8, IBV_ACCESS_REMOTE_WRITE, (uint8_t **)&word,
			 &gpu);
	if (res == RESP_OK) {
		memcpy(&v, p->payload, sizeof(v));
		if (!(gpu ? sv_gpu_store(gpu, word, v) : sv_store_guarded(word, v)))
			res = RESP_ERR_RKEY; /* the memory could not be reached */
	}
	sv_mr_read_unlock(qp->ctx);
	if (res != RESP_OK)
		return res;
	qp->resp.epsn = sv_psn_add(p->psn, 1);
	qp->resp.msn++;
	send_read_ack(qp, p->conn, p->psn);
	return RESP_DONE;
}

/* An atomic's result at psn, kept for its duplicates (false: no memory
 * for the replay cache, which the first atomic a QP takes allocates). */
static bool keep_atomic(struct sv_qp *qp, uint32_t psn, uint64_t orig)
{
	if (!qp->resp.atomic_cache &&
	    !(qp->resp.atomic_cache = calloc(SV_MAX_QP_RD_ATOM, sizeof(*qp->resp.atomic_cache))))
		return false;
	qp->resp.atomic_cache[qp->resp.atomic_cache_next].psn = psn;
	qp->resp.atomic_cache[qp->resp.atomic_cache_next].orig = orig;
	qp->resp.atomic_cache[qp->resp.atomic_cache_next].valid = true;
	qp->resp.atomic_cache_next = (qp->resp.atomic_cache_next + 1) % SV_MAX_QP_RD_ATOM;
	return true;
}

/* Atomic request: executed once, its result kept for duplicates. */
static enum resp_result exec_atomic(const struct resp_pkt *p)
{
	struct sv_qp *qp = p->qp;
	const struct sv_atmeth *a = (const void *)(p->hdr + p->op->off_atmeth);
	uint64_t va = be64toh(a->va), orig;
	enum resp_result r = check_qp_access(p, IBV_ACCESS_REMOTE_ATOMIC, va);
	sv_cu_ctx gpu = NULL;
	uint64_t *word;

	if (r != RESP_OK)
		return r;
	/* short of memory for the replay cache: not now (RNR NAK), the
	 * requester tries again after its RNR timer */
	if (!qp->resp.atomic_cache &&
	    !(qp->resp.atomic_cache = calloc(SV_MAX_QP_RD_ATOM, sizeof(*qp->resp.atomic_cache))))
		return RESP_NO_RECV;
	sv_gpu_sink_drain(qp->resp.gpu_in); /* after the writes before it */
	sv_mr_read_lock(qp->ctx);
	r = check_rkey(qp, ntohl(a->rkey), va, 8, IBV_ACCESS_REMOTE_ATOMIC, (uint8_t **)&word,
		       &gpu);
	if (r == RESP_OK && gpu &&
	    !(p->low == SV_OP_CMP_SWAP
		      ? sv_gpu_cmp_swap(gpu, word, be64toh(a->compare), be64toh(a->swap_add), &orig)
		      : sv_gpu_fetch_add(gpu, word, be64toh(a->swap_add), &orig)))
		r = RESP_ERR_RKEY; /* the memory could not be reached */
	if (r != RESP_OK) {
		sv_mr_read_unlock(qp->ctx);
		return r;
	}
	/* atomic with respect to every other softverbs atomic on this memory */
	if (gpu) {
		/* done above */
	} else if (!(p->low == SV_OP_CMP_SWAP
			     ? sv_cas_guarded(word, be64toh(a->compare), be64toh(a->swap_add), &orig)
			     : sv_fadd_guarded(word, be64toh(a->swap_add), &orig))) {
		sv_mr_read_unlock(qp->ctx);
		return RESP_ERR_RKEY; /* registered, but unmapped by the application */
	}
	sv_mr_read_unlock(qp->ctx);
	keep_atomic(qp, p->psn, orig); /* (the cache was made above) */
	qp->resp.epsn = sv_psn_add(p->psn, 1);
	qp->resp.msn++;
	send_atomic_ack(qp, p->conn, p->psn, orig);
	return RESP_DONE;
}

/* READ request: the expected PSN moves past the PSNs its responses use. */
static enum resp_result exec_read(const struct resp_pkt *p)
{
	struct sv_qp *qp = p->qp;
	const struct sv_reth *r = (const void *)(p->hdr + p->op->off_reth);
	uint32_t dma_len = ntohl(r->dma_len);
	uint32_t npkts = sv_qp_npkts(qp, dma_len);

	qp->resp.epsn = sv_psn_add(p->psn, npkts);
	qp->resp.msn++;
	return do_read(qp, p->conn, p->psn, be64toh(r->va), ntohl(r->rkey), dma_len, 0);
}

/* A duplicate atomic: its first result again (none if it is not kept). */
static void replay_atomic(const struct resp_pkt *p)
{
	struct sv_qp *qp = p->qp;

	for (int i = 0; qp->resp.atomic_cache && i < SV_MAX_QP_RD_ATOM; i++)
		if (qp->resp.atomic_cache[i].valid && qp->resp.atomic_cache[i].psn == p->psn)
			send_atomic_ack(qp, p->conn, p->psn, qp->resp.atomic_cache[i].orig);
}

/* An RC request whose PSN we already executed: answer it again. */
static void duplicate(const struct resp_pkt *p)
{
	struct sv_qp *qp = p->qp;

	if (p->relay && qp->xrc && (p->op->mask & SV_OPF_READ)) {
		/* its memory is the SRQ's process's: asked there again */
		bool window = !qp->xrc->pending;

		if (!sv_xrc_relay_forward(qp, p->conn, p->hdr, p->op->hdr_len, NULL, 0, p->srqn,
					  true) &&
		    window) {
			qp->xrc->first_psn = qp->resp.epsn;
			qp->xrc->first_msn = qp->resp.msn;
		}
		return;
	}
	if (sv_xrc_busy(qp)) {
		/* answers the SRQ's process has not given yet are not ours
		 * to give: an ACK covers only what it answered, an atomic's
		 * result is there once it came */
		bool done = sv_psn_cmp(p->psn, qp->xrc->done_psn) <= 0;

		if (p->op->mask & SV_OPF_ATOMIC)
			replay_atomic(p);
		else if ((p->op->mask & SV_OPF_ATOMIC_WRITE) && done)
			send_read_ack(qp, p->conn, p->psn);
		else if ((p->op->mask & (SV_OPF_SEND | SV_OPF_WRITE)) &&
			 (p->op->mask & SV_OPF_LAST || p->ackreq) && done)
			send_ack(qp, p->conn, qp->xrc->done_psn, SV_AETH_ACK | 0x1f);
		return;
	}
	if (p->op->mask & SV_OPF_READ) {
		const struct sv_reth *r = (const void *)(p->hdr + p->op->off_reth);
		struct sv_pd *pd = qp->pd;
		enum resp_result res;

		/* XRC: under the PD of the SRQ it names (not the current one's) */
		if (qp->ti->xrc)
			qp->pd = p->pd;
		res = qp->pd ? do_read(qp, p->conn, p->psn, be64toh(r->va), ntohl(r->rkey),
				       ntohl(r->dma_len), 0)
			     : RESP_ERR_XRC_SRQ;
		if (qp->ti->xrc)
			qp->pd = pd;
		/* a replayed READ that fails now fails as a first one would */
		if (res != RESP_DONE)
			nak_fatal(qp, p->conn, p->psn,
				  res == RESP_ERR_RKEY ? SV_NAK_REM_ACCESS : SV_NAK_INV_REQ);
	} else if (p->op->mask & SV_OPF_ATOMIC) {
		replay_atomic(p);
	} else if (p->op->mask & SV_OPF_ATOMIC_WRITE) {
		send_read_ack(qp, p->conn, p->psn);
	} else if (p->op->mask & SV_OPF_LAST || p->ackreq) {
		send_ack(qp, p->conn, sv_psn_add(qp->resp.epsn, SV_PSN_MASK), SV_AETH_ACK | 0x1f);
	}
}

/* SEND packet: scattered into the message's receive WQE. */
static enum resp_result exec_send(const struct resp_pkt *p)
{
	struct sv_qp *qp = p->qp;
	enum resp_result r = check_sequence(p, false);
	enum ibv_wc_status st;
	uint32_t inv = 0;

	if (r != RESP_OK)
		return r;
	if (p->op->mask & SV_OPF_FIRST) {
		r = check_recv(qp);
		if (r != RESP_OK)
			return r;
		/* a SEND from a process of this host: the next ones can be
		 * placed by it, once the queue is where it can read it (an
		 * SRQ's: once the QP's record names it) */
		if (p->conn->peer_pid && (qp->srq || !qp->rq.xl))
			sv_xrq_adopt(qp);
		qp->resp.rwqe_off = 0;
		qp->resp.msg_first_psn = p->psn;
		qp->resp.in_msg = true;
		qp->resp.in_write = false;
	}
	st = place(qp, p->payload, p->plen, p->src_gpu);
	if (st != IBV_WC_SUCCESS) {
		complete_recv(qp, st, IBV_WC_RECV, 0, NULL, src_qpn(qp), 0, 0, false);
		return st == IBV_WC_LOC_LEN_ERR ? RESP_ERR_RECV_LEN : RESP_ERR_RECV_PROT;
	}
	if (p->op->off_ieth) {
		/* SEND_WITH_INV: the window goes before the message completes (a
		 * type 2 window bound to this QP, as LOCAL_INV would take it) */
		const struct sv_ieth *ie = (const void *)(p->hdr + p->op->off_ieth);

		inv = ntohl(ie->rkey);
		if (sv_mw_local_inv(qp, inv) != IBV_WC_SUCCESS) {
			complete_recv(qp, IBV_WC_REM_INV_REQ_ERR, IBV_WC_RECV, 0, NULL,
				      src_qpn(qp), 0, 0, false);
			return RESP_ERR_INVALIDATE;
		}
	}
	if (packet_done(qp, p->conn, p->op, p->psn_last, p->ackreq)) {
		sv_eng_answers_for_completion(p->conn);
		complete_recv(qp, IBV_WC_SUCCESS, IBV_WC_RECV, qp->resp.rwqe_off, p->imm,
			      src_qpn(qp), p->op->off_ieth ? IBV_WC_WITH_INV : 0, inv,
			      p->solicited);
	}
	return RESP_DONE;
}

/*
 * XRC: a request for another process's SRQ goes there (xrc_relay.c), which
 * executes it and answers through us.  It is taken in here (the expected
 * PSN and the MSN move on as its execution would move them) but answered
 * there: until those answers have come, the QP takes nothing else.
 */
static enum resp_result exec_relay(struct resp_pkt *p)
{
	struct sv_qp *qp = p->qp;
	const struct sv_opcode_info *op = p->op;
	bool first = op->mask & SV_OPF_FIRST, window = !sv_xrc_busy(qp);
	uint32_t npkts = 1;
	struct sv_xrc_qp *x;
	enum resp_result r = RESP_OK;

	if (op->mask & (SV_OPF_SEND | SV_OPF_WRITE))
		r = check_sequence(p, op->mask & SV_OPF_WRITE);
	if (r != RESP_OK)
		return r;
	if (op->mask & SV_OPF_READ) {
		const struct sv_reth *reth = (const void *)(p->hdr + op->off_reth);

		npkts = sv_qp_npkts(qp, ntohl(reth->dma_len));
	}
	if (!qp->xrc && !(qp->xrc = calloc(1, sizeof(*qp->xrc))))
		return RESP_NO_RECV; /* no memory now: RNR NAK, it comes again */
	x = qp->xrc;
	if (first) {
		x->msg_msn = qp->resp.msn;
		x->msg_srqn = p->srqn;
	}
	if (sv_xrc_relay_forward(qp, p->conn, p->hdr, op->hdr_len, p->payload, p->plen, p->srqn,
				 (op->mask & SV_OPF_LAST) || p->ackreq)) {
		/* the SRQ's process cannot be reached now: the requester
		 * sends again, from the oldest message still unanswered */
		relay_rewind(qp, window ? (first ? p->psn : qp->resp.msg_first_psn) : x->first_psn,
			     window ? x->msg_msn : x->first_msn);
		send_ack(qp, p->conn, qp->resp.epsn, SV_AETH_RNR_NAK | (qp->attr.min_rnr_timer & 0x1f));
		return RESP_DONE;
	}
	if (window) {
		x->first_psn = first ? p->psn : qp->resp.msg_first_psn;
		x->first_msn = x->msg_msn;
	}
	if (first && !(op->mask & SV_OPF_LAST)) {
		qp->resp.msg_first_psn = p->psn;
		qp->resp.in_msg = true;
		qp->resp.in_write = op->mask & SV_OPF_WRITE;
	}
	qp->resp.epsn = sv_psn_add(p->psn, npkts);
	if (op->mask & SV_OPF_LAST) {
		qp->resp.in_msg = false;
		qp->resp.msn++;
	}
	return RESP_DONE;
}

/*
 * An answer of the SRQ's process to packets this XRC receive QP relayed,
 * on the connection it relayed on: handed on to the requester as ours.  A
 * NAK fails the QP, as it failed the proxy there; an RNR NAK takes the
 * expected PSN back to that message; an atomic's result is kept for its
 * duplicates; the last answer awaited ends the wait.
 */
void sv_responder_relayed_answer(struct sv_qp *qp, struct sv_conn *conn,
				 const struct sv_opcode_info *op, const uint8_t *pkt,
				 const uint8_t *payload, uint32_t plen)
{
	const struct sv_bth *bth = (const void *)pkt;
	struct sv_xrc_qp *x = qp->xrc;
	uint32_t psn = ntohl(bth->psn) & SV_PSN_MASK;
	uint8_t hdr[SV_MAX_HDR_LEN], syn = SV_AETH_ACK;
	struct iovec iov = { (void *)payload, plen };
	struct sv_conn *reply;
	bool final = (op->mask & SV_OPF_LAST) || !(op->mask & SV_OPF_RDRESP);

	if (!x || !x->pending || x->conn != conn || !sv_qp_state_receives(qp->state) ||
	    (bth->opcode & 0xe0) != SV_OP_XRC || op->hdr_len > sizeof(hdr) ||
	    (bth->flags & SV_BTH_GPUREF))
		return;
	if (op->off_aeth)
		syn = (uint8_t)(ntohl(((const struct sv_aeth *)(pkt + op->off_aeth))->syn_msn) >> 24);
	memcpy(hdr, pkt, op->hdr_len);
	((struct sv_bth *)hdr)->dqpn = htonl(qp->attr.dest_qp_num & SV_PSN_MASK);
	((struct sv_bth *)hdr)->flags = 0;
	reply = x->reply;
	sv_conn_get(reply);
	sv_send_packet(reply, hdr, op->hdr_len, &iov, plen ? 1 : 0);
	if (op->off_aeth)
		sv_stat_ack_tx(qp, syn);
	else
		sv_stat_tx(qp, plen);
	if ((syn & SV_AETH_TYPE_MASK) == SV_AETH_NAK) {
		sv_xrc_relay_idle(qp);
		sv_qp_enter_error(qp);
	} else if ((syn & SV_AETH_TYPE_MASK) == SV_AETH_RNR_NAK) {
		/* that message starts again; what was relayed after it the
		 * SRQ's process drops, until the next window */
		relay_rewind(qp, psn,
			     ntohl(((const struct sv_aeth *)(pkt + op->off_aeth))->syn_msn) &
				     SV_PSN_MASK);
	} else {
		if (op->off_atmack)
			keep_atomic(qp, psn,
				    be64toh(((const struct sv_atmack *)(pkt + op->off_atmack))->orig));
		if (final) {
			if (sv_psn_cmp(psn, x->done_psn) > 0)
				x->done_psn = psn;
			if (!--x->pending) {
				/* everything before epsn is answered now */
				if (x->dropped)
					send_ack(qp, reply, qp->resp.epsn, SV_AETH_NAK | SV_NAK_PSN_SEQ);
				sv_xrc_relay_idle(qp);
			}
		}
	}
	sv_conn_put(reply);
}

void sv_responder_relay_window(struct sv_qp *qp, struct sv_srq *srq)
{
	if (qp->resp.have_rwqe && qp->srq == srq) {
		qp->resp.in_msg = false;
		return;
	}
	if (qp->resp.have_rwqe)
		complete_recv(qp, IBV_WC_REM_ABORT_ERR, IBV_WC_RECV, 0, NULL, src_qpn(qp), 0, 0,
			      false);
	qp->resp.in_msg = false;
}

void sv_responder_expect(struct sv_qp *qp, uint32_t psn, uint32_t msn)
{
	qp->resp.epsn = psn;
	qp->resp.msn = msn;
}

void sv_responder_srq_gone(struct sv_qp *qp, bool end_msg)
{
	qp->resp.have_rwqe = false;
	if (end_msg)
		qp->resp.in_msg = false;
}

void sv_responder_flush_rwqe(struct sv_qp *qp)
{
	struct ibv_wc wc = { .wr_id = qp->resp.rwqe.wr_id, .status = IBV_WC_WR_FLUSH_ERR,
			     .opcode = IBV_WC_RECV, .qp_num = qp->ex.qp_base.qp_num,
			     .vendor_err = IBV_WC_WR_FLUSH_ERR };

	if (!qp->resp.have_rwqe)
		return;
	sv_cq_push(qp->rcq, qp, &wc, false);
	rwqe_done(qp);
}

void sv_responder_halt(struct sv_qp *qp)
{
	qp->resp.in_msg = false;
	sv_responder_cancel(qp); /* the rest of a READ is not sent */
}

void sv_responder_reset(struct sv_qp *qp)
{
	rwqe_done(qp);
	qp->resp.in_msg = qp->resp.drop_msg = false;
	sv_responder_cancel(qp); /* a READ still being answered */
	sv_xrc_relay_idle(qp);	 /* verdicts on relayed packets: ignored now */
	qp->resp.comm_est_sent = false;
	qp->resp.msn = 0;
	/* GPU copies of its previous life: none started later, none reused */
	sv_gpu_sink_abort(qp->resp.gpu_in);
	sv_gpu_stage_forget(qp->resp.gpu_rd);
	if (qp->resp.atomic_cache)
		memset(qp->resp.atomic_cache, 0, sizeof(*qp->resp.atomic_cache) * SV_MAX_QP_RD_ATOM);
}

void sv_responder_free(struct sv_qp *qp)
{
	free(qp->resp.atomic_cache);
	sv_gpu_stage_free(&qp->resp.gpu_rd);
	sv_gpu_sink_free(&qp->resp.gpu_in);
}

/*
 * The checks of an RDMA WRITE packet, without side effects: the message
 * (its start from the RETH, or the one open), the QP's access, the
 * payload's length against what is left, the key over all of it.  *va,
 * *rkey and *left describe the message from this packet on.  The MR read
 * lock is held by the caller.
 */
static enum resp_result check_write(const struct resp_pkt *p, uint64_t *va, uint32_t *rkey,
				    uint32_t *left, uint8_t **mem, sv_cu_ctx *gpu)
{
	const struct sv_qp *qp = p->qp;
	enum resp_result r = check_sequence(p, true);

	if (r != RESP_OK)
		return r;
	if (p->op->mask & SV_OPF_FIRST) {
		const struct sv_reth *reth = (const void *)(p->hdr + p->op->off_reth);

		r = check_qp_access(p, IBV_ACCESS_REMOTE_WRITE, 0);
		if (r != RESP_OK)
			return r;
		*va = be64toh(reth->va);
		*rkey = ntohl(reth->rkey);
		*left = ntohl(reth->dma_len);
		/* the whole target range, before any byte moves */
		if (*left && check_rkey(qp, *rkey, *va, *left, IBV_ACCESS_REMOTE_WRITE, mem, gpu))
			return RESP_ERR_RKEY;
	} else {
		*va = qp->resp.wr_va;
		*rkey = qp->resp.wr_rkey;
		*left = qp->resp.wr_left;
	}
	if (p->plen > *left || ((p->op->mask & SV_OPF_LAST) && p->plen != *left))
		return RESP_ERR_WRITE_LEN;
	return RESP_OK;
}

/* RDMA WRITE packet: copied into the target range (unless received in place). */
static enum resp_result exec_write(const struct resp_pkt *p)
{
	struct sv_qp *qp = p->qp;
	uint8_t *mem = NULL;
	sv_cu_ctx gpu = NULL;
	uint64_t va;
	uint32_t rkey, left;
	bool first = p->op->mask & SV_OPF_FIRST;
	enum resp_result r;

	/* only a FIRST packet's checks look at the MR table (the payload's
	 * own translation below takes the lock for itself) */
	if (first)
		sv_mr_read_lock(qp->ctx);
	r = check_write(p, &va, &rkey, &left, &mem, &gpu);
	if (first)
		sv_mr_read_unlock(qp->ctx);
	if (r != RESP_OK)
		return r;
	if (first) {
		qp->resp.wr_va = va;
		qp->resp.wr_rkey = rkey;
		qp->resp.wr_left = left;
		qp->resp.wr_total = left;
		qp->resp.msg_first_psn = p->psn;
		qp->resp.in_msg = true;
		qp->resp.in_write = true;
	}
	/* WRITE with immediate needs a receive WQE at its LAST */
	if (p->imm && check_recv(qp) != RESP_OK)
		return RESP_NO_RECV_IMM;
	if (p->plen) {
		sv_mr_read_lock(qp->ctx);
		r = check_rkey(qp, qp->resp.wr_rkey, qp->resp.wr_va, p->plen, IBV_ACCESS_REMOTE_WRITE, &mem,
			       &gpu);
		/* a directly received payload (receive.c) is in place already */
		if (r == RESP_OK && (p->src_gpu || gpu)) {
			/* from a peer's GPU memory (to ours or host memory), or into
			 * ours: through the sink, a run started at the message's end */
			enum sv_mem_err e =
				p->src_gpu ? sv_gpu_sink_copy(&qp->resp.gpu_in, p->src_gpu, mem,
							      p->payload, p->plen)
					   : sv_gpu_sink_put(&qp->resp.gpu_in, gpu, mem, p->payload,
							     p->plen);

			if (e)
				r = RESP_ERR_RKEY; /* GPU memory the driver could not reach */
			else if (p->op->mask & SV_OPF_LAST)
				sv_gpu_sink_start(qp->resp.gpu_in);
		} else if (r == RESP_OK && mem != p->payload &&
			   !sv_dma_write(mem, p->payload, p->plen)) {
			r = RESP_ERR_RKEY; /* registered, but unmapped by the application */
		}
		sv_mr_read_unlock(qp->ctx);
		if (r != RESP_OK)
			return RESP_ERR_RKEY_LATE; /* the MR went away mid-message */
	}
	qp->resp.wr_va += p->plen;
	qp->resp.wr_left -= p->plen;
	if (packet_done(qp, p->conn, p->op, p->psn_last, p->ackreq) && p->imm) {
		sv_eng_answers_for_completion(p->conn);
		qp->resp.rwqe_off = 0;
		complete_recv(qp, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, qp->resp.wr_total, p->imm,
			      src_qpn(qp), 0, 0, p->solicited);
	}
	return RESP_DONE;
}

/* UD SEND: one datagram, GRH first. */
static enum resp_result exec_datagram(const struct resp_pkt *p)
{
	enum resp_result r = check_qkey(p);

	if (r == RESP_OK)
		r = check_recv(p->qp);
	if (r != RESP_OK)
		return r;
	ud_rx(p->qp, p->conn, p->op, p->hdr, p->payload, p->plen);
	return RESP_DONE;
}

/* Carry out what the result of the check path means for this QP's type. */
static void respond(const struct resp_pkt *p, enum resp_result r)
{
	struct sv_qp *qp = p->qp;
	const struct resp_action *a = &resp_actions[r][qp->ti->index];

	switch (r) {
	case RESP_OK:
	case RESP_DONE:
	case RESP_DROP:
		return;
	case RESP_PSN_AHEAD:
		sv_stat_count(qp, SV_QPC_SEQ_ERR);
		/* a packet was lost (or overtaken): say once where to resume,
		 * so the requester goes back now rather than at its timeout;
		 * what follows until then is dropped in silence (IBA 9.7.5.1.1) */
		if (!qp->resp.seq_nak_sent) {
			qp->resp.seq_nak_sent = true;
			send_ack(qp, p->conn, qp->resp.epsn, SV_AETH_NAK | SV_NAK_PSN_SEQ);
		}
		return;
	case RESP_DUPLICATE:
		sv_stat_count(qp, SV_QPC_DUP_REQ);
		duplicate(p);
		return;
	case RESP_ERR_RKEY:
		/* UC answers nothing: count the refusal a NAK would have carried */
		if (!qp->ti->reliable)
			sv_stat_count(qp, SV_QPC_REM_ACCESS_SENT);
		break;
	case RESP_NO_RECV:
		if (qp->ti->reliable)
			send_ack(qp, p->conn, p->psn,
				 SV_AETH_RNR_NAK | (qp->attr.min_rnr_timer & 0x1f));
		break;
	case RESP_NO_RECV_IMM:
		/* back off the whole message: the requester resends it from its start */
		if (qp->ti->reliable) {
			qp->resp.epsn = qp->resp.msg_first_psn;
			send_ack(qp, p->conn, qp->resp.msg_first_psn,
				 SV_AETH_RNR_NAK | (qp->attr.min_rnr_timer & 0x1f));
		}
		break;
	default:
		break;
	}
	if (a->end_message)
		qp->resp.in_msg = false;
	if (a->drop_message)
		qp->resp.drop_msg = true;
	if (a->nak)
		send_ack(qp, p->conn, p->psn, a->nak);
	if (a->to_error)
		enter_error(qp);
}

void sv_responder_rx(struct sv_qp *qp, struct sv_conn *conn, const struct sv_opcode_info *op,
		     uint8_t *pkt, const uint8_t *payload, uint32_t plen, sv_cu_ctx src_gpu)
{
	const struct sv_bth *bth = (const void *)pkt;
	struct resp_pkt p = {
		.qp = qp,
		.conn = conn,
		.op = op,
		.hdr = pkt,
		.payload = payload,
		.plen = plen,
		.src_gpu = src_gpu,
		.psn = ntohl(bth->psn) & SV_PSN_MASK,
		.psn_last = sv_psn_add(ntohl(bth->psn) & SV_PSN_MASK, sv_qp_npkts(qp, plen) - 1),
		.low = bth->opcode & 0x1f,
		.imm = op->off_immdt ? (const void *)(pkt + op->off_immdt) : NULL,
		.solicited = bth->flags & SV_BTH_SE,
		.ackreq = bth->flags & SV_BTH_ACKREQ,
	};
	enum resp_result r = check_transport(&p);

	if (r == RESP_OK)
		r = check_state(&p);
	if (r == RESP_OK)
		r = check_xrc(&p);
	/* requests wait behind a READ still being answered (do_read): this
	 * one is dropped and its requester sends it again.  None comes on the
	 * READ's own connection, whose input waits meanwhile (connections.c, rx_held). */
	if (r == RESP_OK && qp->resp.rd_left.conn)
		r = RESP_DROP;
	if (r == RESP_OK && qp->state == IBV_QPS_RTR && !qp->resp.comm_est_sent) {
		qp->resp.comm_est_sent = true;
		/* (not for an XRC receive QP whose creator's handle is gone: an
		 * event names it by that handle) */
		if (!(qp->xrc && qp->xrc->no_events))
			sv_async_event(qp->ctx, IBV_EVENT_COMM_EST, qp, &qp->async, 0);
	}
	if (r == RESP_OK && qp->ti->ud) {
		respond(&p, exec_datagram(&p));
		return;
	}
	if (r == RESP_OK)
		r = check_length(&p);
	if (r == RESP_OK)
		r = check_psn(&p);
	if (r == RESP_OK && !(op->mask & SV_OPF_SEND))
		sv_engine_saw_one_sided(qp->ctx->eng);
	if (r == RESP_OK) {
		if (p.relay)
			r = exec_relay(&p);
		else if (op->mask & SV_OPF_SEND)
			r = exec_send(&p);
		else if (op->mask & SV_OPF_WRITE)
			r = exec_write(&p);
		else if (op->mask & SV_OPF_READ)
			r = exec_read(&p);
		else if (op->mask & SV_OPF_ATOMIC)
			r = exec_atomic(&p);
		else if (op->mask & SV_OPF_ATOMIC_WRITE)
			r = exec_atomic_write(&p);
		else
			r = RESP_ERR_QP_ACCESS; /* not a request the QP type takes */
	}
	respond(&p, r);
}

/*
 * The acceptance test of an RDMA WRITE packet whose payload has not
 * arrived: receive.c then reads the payload straight into place.  The same
 * steps as sv_responder_rx, without side effects, and it accepts less
 * (in-order packets of a WRITE without immediate data only): a packet that
 * passes here is placed where the responder would copy it, and
 * sv_responder_rx still runs for it.  The MR read lock is held by the caller.
 */
bool sv_responder_direct(struct sv_qp *qp, struct sv_conn *conn, const struct sv_opcode_info *op,
			 const uint8_t *pkt, uint32_t plen, uint8_t **dst, uint32_t *msg_left)
{
	const struct sv_bth *bth = (const void *)pkt;
	struct resp_pkt p = { .qp = qp, .conn = conn, .op = op, .hdr = (uint8_t *)pkt, .plen = plen };
	uint64_t va;
	uint32_t rkey, left;
	sv_cu_ctx gpu = NULL;

	/* (XRC: the key's PD is its SRQ's, known once the packet is taken in) */
	if (!(op->mask & SV_OPF_WRITE) || op->off_immdt || qp->ti->ud || qp->ti->xrc)
		return false;
	if (check_transport(&p) != RESP_OK || check_state(&p) != RESP_OK ||
	    check_length(&p) != RESP_OK)
		return false;
	if ((ntohl(bth->psn) & SV_PSN_MASK) != qp->resp.epsn || qp->resp.drop_msg || qp->resp.rd_left.conn)
		return false; /* in order only (and not behind a READ: dropped) */
	if (check_write(&p, &va, &rkey, &left, dst, &gpu) != RESP_OK || !left)
		return false;
	/* the message's whole remaining range, from here (check_write did it
	 * already for a FIRST packet: the whole message) */
	if (!(op->mask & SV_OPF_FIRST) &&
	    check_rkey(qp, rkey, va, left, IBV_ACCESS_REMOTE_WRITE, dst, &gpu) != RESP_OK)
		return false;
	if (gpu)
		return false; /* the transport cannot read into GPU memory: copied */
	*msg_left = left;
	return true;
}
