/*
 * The engine's side of the direct receive of RDMA WRITE payloads (the
 * stream transports read them straight into target memory; see
 * src/transport/stream.c).  The stream knows frames; what a packet is,
 * whether the responder would accept it, where its payload goes and what
 * the packets after it must look like are answered here.
 */
#include "engine/engine.h"
#include "engine/dma.h"
#include "common/fault_guard.h"

#include <arpa/inet.h>

enum { PLAN_QPN, PLAN_PSN, PLAN_CLASS, PLAN_STEP };

int sv_engine_rx_classify(struct sv_conn *c, const uint8_t *f, size_t have, uint32_t flen,
			  uint32_t *hdr_len)
{
	const struct sv_bth *bth = (const void *)f;
	const struct sv_opcode_info *op;

	(void)c;
	if (have < sizeof(*bth))
		return -1;
	op = sv_opcode_info(bth->opcode);
	/* WRITEs without immediate data only: the others need their receive
	 * WQE or the plain path */
	if (!op || !(op->mask & SV_OPF_WRITE) || op->off_immdt || flen < op->hdr_len ||
	    (bth->flags & SV_BTH_GPUREF))
		return 0;
	if (have < op->hdr_len)
		return -1;
	*hdr_len = op->hdr_len;
	return 1;
}

bool sv_engine_rx_plan(struct sv_conn *c, const uint8_t *f, uint32_t plen, uint32_t have,
		       struct sv_rx_plan *plan)
{
	struct sv_context *ctx = c->eng->ctx;
	const struct sv_bth *bth = (const void *)f;
	const struct sv_opcode_info *op = sv_opcode_info(bth->opcode);
	uint32_t qpn = ntohl(bth->dqpn) & SV_PSN_MASK, msg_left = 0, mtu, seg, npkts;
	struct sv_qp *qp = sv_qp_lookup(ctx, qpn);
	uint8_t *dst = NULL;
	bool ok;

	if (!qp)
		return false;
	/* the pointer stays valid while the MR read lock is held; it is taken
	 * inside qp->lock, as everywhere, and kept until sv_engine_rx_plan_end */
	sv_mutex_lock(&qp->lock);
	sv_mr_read_lock(ctx);
	ok = sv_responder_direct(qp, c, op, f, plen, &dst, &msg_left);
	mtu = qp->mtu;
	npkts = sv_qp_npkts(qp, plen);
	/* the frames that follow carry runs of packets as this one's sender
	 * cuts them (requester.c): a guess that a mismatch only makes the
	 * plain way's (sv_engine_rx_match) */
	seg = sv_conn_run(c, mtu);
	sv_mutex_unlock(&qp->lock);
	sv_qp_put(qp);
	/* the kernel (or the shm ring) writes the rest of the range this read
	 * may take: memory the application unmapped goes the plain way, where
	 * the responder's own copy fails the packet with a NAK */
	if (ok)
		ok = sv_probe_guarded(dst, SV_MIN(msg_left, plen + (uint64_t)SV_RX_PREDICT * seg)) &&
		     sv_dma_write(dst, f + op->hdr_len, have); /* what the buffer holds already */
	if (!ok) {
		sv_mr_read_unlock(ctx);
		return false;
	}
	plan->dst = dst;
	plan->msg_left = msg_left;
	plan->seg = seg;
	plan->next_hdr_len = sizeof(struct sv_bth); /* WRITE MIDDLE and LAST */
	plan->cookie[PLAN_QPN] = qpn;
	/* the PSN of the frame after this one, and how many each covers */
	plan->cookie[PLAN_PSN] = sv_psn_add(ntohl(bth->psn) & SV_PSN_MASK, npkts);
	plan->cookie[PLAN_CLASS] = bth->opcode & 0xe0;
	plan->cookie[PLAN_STEP] = seg / mtu;
	return true;
}

void sv_engine_rx_plan_end(struct sv_conn *c, struct sv_rx_plan *plan)
{
	(void)plan;
	sv_mr_read_unlock(c->eng->ctx);
}

/* Frame k after the planned one: same QP, the PSN after the runs before
 * it, WRITE MIDDLE or LAST. */
bool sv_engine_rx_match(const struct sv_rx_plan *plan, int k, uint32_t plen, bool last,
			const uint8_t *hdr)
{
	const struct sv_bth *bth = (const void *)hdr;

	(void)plen;
	return !(bth->flags & SV_BTH_GPUREF) &&
	       bth->opcode ==
		       (plan->cookie[PLAN_CLASS] | (last ? SV_OP_WRITE_LAST : SV_OP_WRITE_MIDDLE)) &&
	       (ntohl(bth->dqpn) & SV_PSN_MASK) == plan->cookie[PLAN_QPN] &&
	       (ntohl(bth->psn) & SV_PSN_MASK) ==
		       sv_psn_add(plan->cookie[PLAN_PSN], (uint32_t)k * plan->cookie[PLAN_STEP]);
}
