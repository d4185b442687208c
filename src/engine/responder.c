/*
 * Responder: executes incoming request packets against local memory.
 * SENDs are placed into receive WQEs (the QP's or its SRQ's), RDMA WRITEs,
 * READs and atomics are executed after the rkey, bounds, access flags and
 * PD checks; RC requests are answered with ACK/NAK/RNR NAK, READ responses
 * or atomic acknowledgements.  Runs in the engine thread with qp->lock held,
 * so one-sided operations need nothing from the target application.
 */
#include "engine/engine.h"
#include "verbs/stats.h"
#include "engine/dma.h"

#include <arpa/inet.h>
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
	bth->opcode = SV_OP_RC | low;
	bth->flags = 0;
	bth->pkey = 0xffff;
	bth->dqpn = htonl(qp->attr.dest_qp_num & SV_PSN_MASK);
	bth->psn = htonl(psn & SV_PSN_MASK);
}

static void send_ack(struct sv_qp *qp, struct sv_conn *conn, uint32_t psn, uint8_t syn)
{
	struct {
		struct sv_bth bth;
		struct sv_aeth aeth;
	} __attribute__((packed)) p;

	fill_bth(qp, &p.bth, SV_OP_ACK, psn);
	p.aeth.syn_msn = htonl(((uint32_t)syn << 24) | (qp->msn & SV_PSN_MASK));
	sv_send_packet(conn, &p, sizeof(p), NULL, 0);
	sv_stat_ack_tx(qp, syn);
}

/* A responder-side error on RC: NAK it and take the QP to ERR (IBA class B/C). */
static void nak_fatal(struct sv_qp *qp, struct sv_conn *conn, uint32_t psn, uint8_t code)
{
	if (qp->ex.qp_base.qp_type == IBV_QPT_RC)
		send_ack(qp, conn, psn, SV_AETH_NAK | code);
	sv_qp_enter_error(qp);
}

static void complete_recv(struct sv_qp *qp, enum ibv_wc_status st, enum ibv_wc_opcode opc,
			  uint32_t byte_len, const struct sv_immdt *imm, uint32_t src_qp,
			  unsigned int extra_flags, bool solicited)
{
	struct ibv_wc wc = {
		.wr_id = qp->rwqe.wr_id,
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
	}
	if (st != IBV_WC_SUCCESS)
		wc.vendor_err = st;
	qp->resp_have_rwqe = false;
	sv_cq_push(qp->rcq, &wc, solicited);
}

static enum ibv_wc_status place(struct sv_qp *qp, const uint8_t *data, uint32_t len)
{
	uint64_t cap = sv_sgl_len(qp->rwqe.sge, qp->rwqe.num_sge);
	enum sv_mem_err e;

	if ((uint64_t)qp->rwqe_off + len > cap)
		return IBV_WC_LOC_LEN_ERR;
	/* receive buffers belong to the PD of the queue they were posted to */
	e = sv_sgl_copy_in(qp->ctx, qp->srq ? qp->srq->pd : qp->pd, qp->rwqe.sge, qp->rwqe.num_sge,
			   qp->rwqe_off, data, len);
	if (e)
		return IBV_WC_LOC_PROT_ERR;
	qp->rwqe_off += len;
	return IBV_WC_SUCCESS;
}

static void ud_rx(struct sv_qp *qp, struct sv_conn *conn, const struct sv_opcode_info *op,
		  uint8_t *pkt, const uint8_t *payload, uint32_t plen)
{
	const struct sv_bth *bth = (const void *)pkt;
	const struct sv_deth *deth = (const void *)(pkt + op->off_deth);
	const struct sv_immdt *imm = op->off_immdt ? (const void *)(pkt + op->off_immdt) : NULL;
	uint8_t grh[40] = { 0 };
	enum ibv_wc_status st;

	if (ntohl(deth->qkey) != qp->attr.qkey) {
		sv_stat_count(qp, SV_QPC_QKEY_VIOL);
		return; /* wrong Q_Key: silently dropped, as the IBA requires */
	}
	if (!sv_qp_take_recv(qp))
		return; /* UD has no RNR: no receive posted means dropped */
	/* the 40-byte GRH precedes the payload: IPv6-style header, GIDs at 8 and 24 */
	grh[0] = 6 << 4;
	grh[4] = (uint8_t)(plen >> 8);
	grh[5] = (uint8_t)plen;
	grh[6] = 0x1b; /* next header: IBA transport */
	grh[7] = 1;    /* hop limit */
	memcpy(grh + 8, conn->peer_gid, 16);
	memcpy(grh + 24, qp->ctx->gid.raw, 16);
	qp->rwqe_off = 0;
	st = place(qp, grh, sizeof(grh));
	if (st == IBV_WC_SUCCESS)
		st = place(qp, payload, plen);
	complete_recv(qp, st, IBV_WC_RECV, st == IBV_WC_SUCCESS ? plen + 40 : 0, imm,
		      ntohl(deth->sqpn) & SV_PSN_MASK, IBV_WC_GRH, bth->flags & SV_BTH_SE);
}

/*
 * A SEND/WRITE packet was executed: advance the expected PSN (RC) and, on the
 * last packet, end the message and acknowledge it.  Returns true at the end
 * of a message; the caller then posts the receive completion, after the ACK
 * is written (sv_conn_uncork_now), because once the application sees its
 * message it may close, or die.  ACKs of WRITEs, which complete nothing
 * here, stay corked and leave together at the end of the receive pass.
 */
static bool packet_done(struct sv_qp *qp, struct sv_conn *conn, const struct sv_opcode_info *op,
			uint32_t psn)
{
	bool rc = qp->ex.qp_base.qp_type == IBV_QPT_RC;

	if (rc)
		qp->epsn = sv_psn_add(psn, 1);
	if (!(op->mask & SV_OPF_LAST))
		return false;
	qp->resp_in_msg = false;
	qp->msn++;
	if (rc)
		send_ack(qp, conn, psn, SV_AETH_ACK | 0x1f);
	return true;
}

/* READ request: send the response packets (possibly a replay of a duplicate). */
static void do_read(struct sv_qp *qp, struct sv_conn *conn, uint32_t psn, uint64_t va,
		    uint32_t rkey, uint32_t dma_len)
{
	uint32_t npkts = dma_len ? (dma_len + qp->mtu - 1) / qp->mtu : 1;
	uint8_t *mem = NULL;
	enum sv_mem_err e = SV_MEM_OK;
	struct sv_txbatch b;

	if (!(qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_READ)) {
		nak_fatal(qp, conn, psn, SV_NAK_INV_REQ);
		return;
	}
	sv_mr_read_lock(qp->ctx);
	if (dma_len)
		e = sv_mr_translate(qp->ctx, rkey, qp->pd, va, dma_len, IBV_ACCESS_REMOTE_READ, &mem);
	if (e) {
		sv_mr_read_unlock(qp->ctx);
		nak_fatal(qp, conn, psn, SV_NAK_REM_ACCESS);
		return;
	}
	/* responses leave in batches, one write for many packets */
	sv_txbatch_init(&b);
	for (uint32_t k = 0; k < npkts; k++) {
		uint8_t low = npkts == 1	  ? SV_OP_READ_RESP_ONLY
			      : k == 0		  ? SV_OP_READ_RESP_FIRST
			      : k + 1 == npkts ? SV_OP_READ_RESP_LAST
					       : SV_OP_READ_RESP_MIDDLE;
		uint32_t off = k * qp->mtu;
		struct iovec iov = { dma_len ? mem + off : NULL, SV_MIN(qp->mtu, dma_len - off) };
		uint8_t *hdr;
		struct sv_bth *bth;
		size_t hl = sizeof(*bth);

		if (!sv_txbatch_fits(&b, conn, 1))
			sv_txbatch_flush(&b);
		hdr = sv_txbatch_hdr(&b);
		bth = (void *)hdr;
		fill_bth(qp, bth, low, sv_psn_add(psn, k));
		if (sv_opcode_info(SV_OP_RC | low)->off_aeth) {
			struct sv_aeth aeth = { htonl(((uint32_t)SV_AETH_ACK << 24) |
						      (qp->msn & SV_PSN_MASK)) };

			memcpy(hdr + hl, &aeth, sizeof(aeth));
			hl += sizeof(aeth);
		}
		sv_txbatch_add(&b, conn, hl, &iov, dma_len ? 1 : 0);
		sv_stat_tx(qp, dma_len ? (uint32_t)iov.iov_len : 0);
	}
	sv_txbatch_flush(&b);
	sv_mr_read_unlock(qp->ctx);
}

static void send_atomic_ack(struct sv_qp *qp, struct sv_conn *conn, uint32_t psn, uint64_t orig)
{
	struct {
		struct sv_bth bth;
		struct sv_aeth aeth;
		struct sv_atmack ack;
	} __attribute__((packed)) p;

	fill_bth(qp, &p.bth, SV_OP_ATOMIC_ACK, psn);
	p.aeth.syn_msn = htonl(((uint32_t)SV_AETH_ACK << 24) | (qp->msn & SV_PSN_MASK));
	p.ack.orig = htobe64(orig);
	sv_send_packet(conn, &p, sizeof(p), NULL, 0);
	sv_stat_tx(qp, 0);
}

static void do_atomic(struct sv_qp *qp, struct sv_conn *conn, uint8_t low, uint32_t psn,
		      const struct sv_atmeth *a)
{
	uint64_t va = be64toh(a->va), orig;
	uint64_t *p;
	enum sv_mem_err e;

	if (!(qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_ATOMIC) || (va & 7)) {
		nak_fatal(qp, conn, psn, SV_NAK_INV_REQ);
		return;
	}
	sv_mr_read_lock(qp->ctx);
	e = sv_mr_translate(qp->ctx, ntohl(a->rkey), qp->pd, va, 8, IBV_ACCESS_REMOTE_ATOMIC,
			    (uint8_t **)&p);
	if (e) {
		sv_mr_read_unlock(qp->ctx);
		nak_fatal(qp, conn, psn, SV_NAK_REM_ACCESS);
		return;
	}
	/* atomic with respect to every other softverbs atomic on this memory */
	if (low == SV_OP_CMP_SWAP) {
		orig = be64toh(a->compare);
		__atomic_compare_exchange_n(p, &orig, be64toh(a->swap_add), false, __ATOMIC_SEQ_CST,
					    __ATOMIC_SEQ_CST);
	} else {
		orig = __atomic_fetch_add(p, be64toh(a->swap_add), __ATOMIC_SEQ_CST);
	}
	sv_mr_read_unlock(qp->ctx);
	qp->atomic_cache[qp->atomic_cache_next].psn = psn;
	qp->atomic_cache[qp->atomic_cache_next].orig = orig;
	qp->atomic_cache[qp->atomic_cache_next].valid = true;
	qp->atomic_cache_next = (qp->atomic_cache_next + 1) % SV_MAX_QP_RD_ATOM;
	qp->epsn = sv_psn_add(psn, 1);
	qp->msn++;
	send_atomic_ack(qp, conn, psn, orig);
}

/* An RC request whose PSN we already executed: answer it again. */
static void duplicate(struct sv_qp *qp, struct sv_conn *conn, const struct sv_opcode_info *op,
		      uint8_t *pkt, uint32_t psn)
{
	if (op->mask & SV_OPF_READ) {
		const struct sv_reth *r = (const void *)(pkt + op->off_reth);

		do_read(qp, conn, psn, be64toh(r->va), ntohl(r->rkey), ntohl(r->dma_len));
	} else if (op->mask & SV_OPF_ATOMIC) {
		for (int i = 0; i < SV_MAX_QP_RD_ATOM; i++)
			if (qp->atomic_cache[i].valid && qp->atomic_cache[i].psn == psn)
				send_atomic_ack(qp, conn, psn, qp->atomic_cache[i].orig);
	} else if (op->mask & SV_OPF_LAST) {
		send_ack(qp, conn, sv_psn_add(qp->epsn, SV_PSN_MASK), SV_AETH_ACK | 0x1f);
	}
}

void sv_responder_rx(struct sv_qp *qp, struct sv_conn *conn, const struct sv_opcode_info *op,
		     uint8_t *pkt, const uint8_t *payload, uint32_t plen)
{
	const struct sv_bth *bth = (const void *)pkt;
	enum ibv_qp_type qpt = qp->ex.qp_base.qp_type;
	uint8_t cls = bth->opcode & 0xe0, low = bth->opcode & 0x1f;
	uint32_t psn = ntohl(bth->psn) & SV_PSN_MASK;
	const struct sv_immdt *imm = op->off_immdt ? (const void *)(pkt + op->off_immdt) : NULL;
	bool rc = qpt == IBV_QPT_RC;
	enum ibv_wc_status st;

	if ((qpt == IBV_QPT_RC && cls != SV_OP_RC) || (qpt == IBV_QPT_UC && cls != SV_OP_UC) ||
	    (qpt == IBV_QPT_UD && cls != SV_OP_UD))
		return; /* wrong transport for this QP: dropped */
	if (qp->state != IBV_QPS_RTR && qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD &&
	    qp->state != IBV_QPS_SQE)
		return; /* not ready to receive: dropped; RC requesters retry */
	if (qp->state == IBV_QPS_RTR && !qp->comm_est_sent) {
		qp->comm_est_sent = true;
		sv_async_event(qp->ctx, IBV_EVENT_COMM_EST, qp, &qp->async, 0);
	}
	if (qpt == IBV_QPT_UD) {
		ud_rx(qp, conn, op, pkt, payload, plen);
		return;
	}
	if (plen > qp->mtu) {
		nak_fatal(qp, conn, psn, SV_NAK_INV_REQ);
		return;
	}

	if (rc) {
		int32_t c = sv_psn_cmp(psn, qp->epsn);

		if (c < 0) {
			sv_stat_count(qp, SV_QPC_DUP_REQ);
			duplicate(qp, conn, op, pkt, psn);
			return;
		}
		if (c > 0) {
			sv_stat_count(qp, SV_QPC_SEQ_ERR);
			return; /* ahead of a gap (after an RNR NAK): the requester resends */
		}
	} else {
		/* UC: a gap loses the current message; resynchronise on the next FIRST */
		if (op->mask & SV_OPF_FIRST) {
			if (qp->resp_in_msg && qp->resp_have_rwqe)
				qp->rwqe_off = 0; /* reuse the WQE for the new message */
			qp->resp_in_msg = false;
			qp->resp_drop_msg = false;
		} else if (psn != qp->epsn) {
			sv_stat_count(qp, SV_QPC_SEQ_ERR);
			qp->resp_drop_msg = true;
		}
		qp->epsn = sv_psn_add(psn, 1);
		if (qp->resp_drop_msg)
			return;
	}

	if (op->mask & SV_OPF_SEND) {
		if (op->mask & SV_OPF_FIRST) {
			if (!qp->resp_have_rwqe && !sv_qp_take_recv(qp)) {
				if (rc)
					send_ack(qp, conn, psn, SV_AETH_RNR_NAK | (qp->attr.min_rnr_timer & 0x1f));
				else
					qp->resp_drop_msg = true;
				return;
			}
			qp->rwqe_off = 0;
			qp->msg_first_psn = psn;
			qp->resp_in_msg = true;
			qp->resp_in_write = false;
		} else if (!qp->resp_in_msg) {
			if (rc)
				nak_fatal(qp, conn, psn, SV_NAK_INV_REQ);
			return;
		}
		st = place(qp, payload, plen);
		if (st != IBV_WC_SUCCESS) {
			complete_recv(qp, st, IBV_WC_RECV, 0, NULL, qp->attr.dest_qp_num, 0, false);
			qp->resp_in_msg = false;
			nak_fatal(qp, conn, psn,
				  st == IBV_WC_LOC_LEN_ERR ? SV_NAK_INV_REQ : SV_NAK_REM_OP);
			return;
		}
		if (packet_done(qp, conn, op, psn)) {
			sv_conn_uncork_now(conn); /* the ACK leaves before the completion */
			complete_recv(qp, IBV_WC_SUCCESS, IBV_WC_RECV, qp->rwqe_off, imm,
				      qp->attr.dest_qp_num, 0, bth->flags & SV_BTH_SE);
		}
		return;
	}

	if (op->mask & SV_OPF_WRITE) {
		uint8_t *mem;
		enum sv_mem_err e = SV_MEM_OK;

		if (op->mask & SV_OPF_FIRST) {
			const struct sv_reth *r = (const void *)(pkt + op->off_reth);

			if (!(qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE)) {
				if (rc)
					nak_fatal(qp, conn, psn, SV_NAK_INV_REQ);
				return;
			}
			qp->wr_va = be64toh(r->va);
			qp->wr_rkey = ntohl(r->rkey);
			qp->wr_left = ntohl(r->dma_len);
			qp->wr_total = qp->wr_left;
			qp->msg_first_psn = psn;
			qp->resp_in_msg = true;
			qp->resp_in_write = true;
			/* check the whole target range before any byte moves */
			if (qp->wr_left) {
				sv_mr_read_lock(qp->ctx);
				e = sv_mr_translate(qp->ctx, qp->wr_rkey, qp->pd, qp->wr_va, qp->wr_left,
						    IBV_ACCESS_REMOTE_WRITE, &mem);
				sv_mr_read_unlock(qp->ctx);
			}
			if (e) {
				qp->resp_in_msg = false;
				if (rc) {
					nak_fatal(qp, conn, psn, SV_NAK_REM_ACCESS);
				} else {
					sv_stat_count(qp, SV_QPC_REM_ACCESS_SENT);
					qp->resp_drop_msg = true;
				}
				return;
			}
		} else if (!qp->resp_in_msg) {
			if (rc)
				nak_fatal(qp, conn, psn, SV_NAK_INV_REQ);
			return;
		}
		if (plen > qp->wr_left || ((op->mask & SV_OPF_LAST) && plen != qp->wr_left)) {
			qp->resp_in_msg = false;
			if (rc)
				nak_fatal(qp, conn, psn, SV_NAK_INV_REQ);
			return;
		}
		if (imm && !qp->resp_have_rwqe && !sv_qp_take_recv(qp)) {
			/* WRITE with immediate needs a receive WQE: back off the whole message */
			if (rc) {
				qp->epsn = qp->msg_first_psn;
				send_ack(qp, conn, qp->msg_first_psn,
					 SV_AETH_RNR_NAK | (qp->attr.min_rnr_timer & 0x1f));
			}
			qp->resp_in_msg = false;
			return;
		}
		if (plen) {
			sv_mr_read_lock(qp->ctx);
			e = sv_mr_translate(qp->ctx, qp->wr_rkey, qp->pd, qp->wr_va, plen,
					    IBV_ACCESS_REMOTE_WRITE, &mem);
			/* a directly received payload (receive.c) is in place already */
			if (!e && mem != payload)
				sv_dma_write(mem, payload, plen);
			sv_mr_read_unlock(qp->ctx);
			if (e) { /* the MR went away mid-message */
				qp->resp_in_msg = false;
				if (rc)
					nak_fatal(qp, conn, psn, SV_NAK_REM_ACCESS);
				return;
			}
		}
		qp->wr_va += plen;
		qp->wr_left -= plen;
		if (packet_done(qp, conn, op, psn) && imm) {
			sv_conn_uncork_now(conn); /* the ACK leaves before the completion */
			qp->rwqe_off = 0;
			complete_recv(qp, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, qp->wr_total, imm,
				      qp->attr.dest_qp_num, 0, bth->flags & SV_BTH_SE);
		}
		return;
	}

	if (!rc)
		return; /* READ/atomics do not exist on UC */

	if (op->mask & SV_OPF_READ) {
		const struct sv_reth *r = (const void *)(pkt + op->off_reth);
		uint32_t dma_len = ntohl(r->dma_len);
		uint32_t npkts = dma_len ? (dma_len + qp->mtu - 1) / qp->mtu : 1;

		qp->epsn = sv_psn_add(psn, npkts);
		qp->msn++;
		do_read(qp, conn, psn, be64toh(r->va), ntohl(r->rkey), dma_len);
		return;
	}
	if (op->mask & SV_OPF_ATOMIC) {
		do_atomic(qp, conn, low, psn, (const void *)(pkt + op->off_atmeth));
		return;
	}
	nak_fatal(qp, conn, psn, SV_NAK_INV_REQ);
}

/*
 * The acceptance test of an RDMA WRITE packet above, for a packet whose
 * payload has not arrived: receive.c then reads the payload straight into
 * place.  It accepts less than sv_responder_rx (in-order packets of a
 * WRITE without immediate data only, whose whole remaining range
 * translates), never more: a packet that passes here is placed where the
 * responder would copy it, and sv_responder_rx still runs for it.
 */
bool sv_responder_direct(struct sv_qp *qp, const struct sv_opcode_info *op, const uint8_t *pkt,
			 uint32_t plen, uint8_t **dst, uint32_t *msg_left)
{
	const struct sv_bth *bth = (const void *)pkt;
	enum ibv_qp_type qpt = qp->ex.qp_base.qp_type;
	uint8_t cls = bth->opcode & 0xe0;
	uint64_t va;
	uint32_t rkey, left;

	if (!(op->mask & SV_OPF_WRITE) || op->off_immdt)
		return false;
	if (!((qpt == IBV_QPT_RC && cls == SV_OP_RC) || (qpt == IBV_QPT_UC && cls == SV_OP_UC)))
		return false;
	if (qp->state != IBV_QPS_RTR && qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD &&
	    qp->state != IBV_QPS_SQE)
		return false;
	if (plen > qp->mtu || (ntohl(bth->psn) & SV_PSN_MASK) != qp->epsn)
		return false;
	if (op->mask & SV_OPF_FIRST) {
		const struct sv_reth *r = (const void *)(pkt + op->off_reth);

		if (!(qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE))
			return false;
		va = be64toh(r->va);
		rkey = ntohl(r->rkey);
		left = ntohl(r->dma_len);
	} else {
		if (!qp->resp_in_msg || !qp->resp_in_write || qp->resp_drop_msg)
			return false;
		va = qp->wr_va;
		rkey = qp->wr_rkey;
		left = qp->wr_left;
	}
	if (!left || plen > left || ((op->mask & SV_OPF_LAST) && plen != left))
		return false;
	if (sv_mr_translate(qp->ctx, rkey, qp->pd, va, left, IBV_ACCESS_REMOTE_WRITE, dst))
		return false;
	*msg_left = left;
	return true;
}
