/*
 * Requester: turns send WQEs into packets, one MTU-sized segment at a time,
 * honouring fences, the outstanding READ/atomic limit, RNR back-off and
 * connection back-pressure; retires finished WQEs into completions in order.
 * All functions run with qp->lock held, from the posting thread or the
 * engine thread.
 */
#include "engine/engine.h"
#include "engine/stats.h"
#include "engine/dma.h"
#include "engine/gpu.h"
#include "engine/direct_exec.h"

#include <arpa/inet.h>
#include <string.h>

/* Packets one requester pass may send before yielding to other QPs; while
 * none waits, it goes on for up to SV_REQ_QUANTA such budgets, since handing
 * the rest to the engine thread costs a wake-up and contention for the QP. */
#define SV_REQ_BUDGET 64
#define SV_REQ_QUANTA 4

/*
 * Over a datagram transport (rocev2) nothing holds a sender back but its
 * peer's ACKs: an RC QP has at most its congestion window of packets
 * unacknowledged (congestion.c), and asks for an ACK every
 * SV_DGRAM_ACK_EVERY packets of a long message so that the window moves
 * before the message ends.  A stream transport's own flow control does
 * this job there.
 */
#define SV_DGRAM_ACK_EVERY 16u

static uint32_t wqe_npkts(const struct sv_qp *qp, const struct sv_send_wqe *w)
{
	/* a READ request is one packet but reserves a PSN per response packet */
	return (w->op->flags & SV_WRF_ATOMIC) ? 1 : sv_qp_npkts(qp, w->length);
}

/* A live connection to use, or false: dead, or silent too long (abandoned;
 * the QP stops waiting on it). */
static bool conn_usable(struct sv_qp *qp, struct sv_conn *c)
{
	if (atomic_load(&c->state) == SV_CONN_DEAD || atomic_load(&c->abandoned))
		return false;
	if (sv_conn_gated(c) && sv_conn_silent(c, sv_now_ns())) {
		atomic_store(&c->abandoned, true);
		if (atomic_load(&qp->txwait_conn) == c)
			sv_engine_unpark_qp(qp);
		sv_dbg("connection to %s:%u unanswered; trying a new one", SV_IP_STR(&c->peer.ip),
		       c->peer.port);
		return false;
	}
	return true;
}

struct sv_conn *sv_qp_conn(struct sv_qp *qp)
{
	if (qp->conn && conn_usable(qp, qp->conn))
		return qp->conn;
	if (qp->conn)
		sv_conn_put(qp->conn);
	qp->conn = sv_engine_conn_to(qp->ctx->eng, &qp->peer);
	return qp->conn;
}

/* A datagram's connection: the AH names the host, the WR's QPN the process. */
static struct sv_conn *ah_conn(struct sv_qp *qp, struct sv_ah *ah, uint32_t remote_qpn)
{
	uint16_t port = sv_qpn_port(remote_qpn);
	struct sv_conn *c;

	sv_mutex_lock(&ah->lock);
	if (ah->mcast) {
		/* a multicast GID: the group's connection, whatever the QPN
		 * (receivers take only the multicast QPN) */
		if (!ah->conn || atomic_load(&ah->conn->state) == SV_CONN_DEAD) {
			int err;

			if (ah->conn)
				sv_conn_put(ah->conn);
			ah->conn = sv_engine_conn_mcast(qp->ctx->eng, &ah->attr.grh.dgid, &err);
		}
	} else if (!ah->conn || !conn_usable(qp, ah->conn) || ah->peer.port != port) {
		if (ah->conn)
			sv_conn_put(ah->conn);
		ah->peer.port = port;
		ah->conn = sv_engine_conn_to(qp->ctx->eng, &ah->peer);
	}
	c = ah->conn;
	if (c)
		sv_conn_get(c);
	sv_mutex_unlock(&ah->lock);
	return c;
}

/* Validate a WQE's local buffers before its first packet: its length, */
static enum ibv_wc_status check_len(const struct sv_send_wqe *w)
{
	if (w->inline_buf)
		return IBV_WC_SUCCESS;
	if (w->length > SV_MAX_MSG_SIZE || w->length < w->op->min_len)
		return IBV_WC_LOC_LEN_ERR;
	return IBV_WC_SUCCESS;
}

/* then its SGEs (inline data was copied at the post: none to check) */
static enum ibv_wc_status check_sgl(struct sv_qp *qp, struct sv_send_wqe *w)
{
	if (w->inline_buf)
		return IBV_WC_SUCCESS;
	/* READ and atomic responses are written into the local buffers */
	return sv_mem_err_to_local_status(
		sv_sgl_check(qp->ctx, qp->pd, w->sge, w->num_sge, w->op->local_access));
}

/*
 * Coalesced ACKs.  Over a stream transport (which loses nothing) the last
 * packet of an unsignaled SEND or WRITE need not ask for an ACK: nobody
 * waits for its completion, and the ACK of a later message that asks
 * covers it (ACKs are cumulative, as IBA lets a responder coalesce them).
 * That saves the responder a write and the requester a read per message,
 * on the round trip of every ping-pong that signals only now and then
 * (UCX, perftest's latency tests).  A message asks anyway when it is
 * signaled, when SV_ACK_UNASKED_MAX before it did not, when half the send
 * queue waits for an answer, or when it is sent again.  The last packet of
 * messages that did not ask is sent again, asking, when no ACK covered it
 * within SV_ACK_UNASKED_NS (sv_requester_timeout): a queue that goes idle
 * is answered that late, using no retry.
 */
#define SV_ACK_UNASKED_MAX 16u
#define SV_ACK_UNASKED_NS 1000000ull

static bool ack_may_wait(const struct sv_qp *qp, const struct sv_send_wqe *w, uint32_t psn)
{
	const struct sv_sq *sq = &qp->sq;

	return !(w->wr.send_flags & IBV_SEND_SIGNALED) && !qp->sq_sig_all &&
	       (w->op->flags & (SV_WRF_SEND | SV_WRF_WRITE)) && !sv_wr_rd_atomic(w->op) &&
	       qp->state == IBV_QPS_RTS && sq->flow.unasked < SV_ACK_UNASKED_MAX &&
	       sv_psn_cmp(psn, sq->flow.hi_psn) >= 0 && (sq->next - sq->head) * 2 < sq->max_wr &&
	       !sv_flow_probing(qp);
}

/*
 * Does packet k of w ask for an ACK?  RC: a message's last, but where it
 * may wait (above); over a datagram transport also every
 * SV_DGRAM_ACK_EVERY-th PSN, or more often while the congestion window is
 * small: every quarter of it at most (a power of two, PSN-aligned), so
 * that any window's worth of PSNs holds at least three that ask, and the
 * window never waits for an ACK nobody asked for.
 */
static bool wants_ack(const struct sv_qp *qp, const struct sv_send_wqe *w, uint32_t k)
{
	uint32_t psn = sv_psn_add(w->first_psn, k), every = SV_DGRAM_ACK_EVERY;

	if (!qp->ti->reliable)
		return false;
	if (k + 1 == w->npkts)
		return !ack_may_wait(qp, w, psn);
	if (!sv_flow_probing(qp))
		return false;
	while (every > 1 && every * 4 > qp->sq.flow.cwnd)
		every /= 2;
	return !((psn + 1) & (every - 1));
}

/* Build the headers of packet k of WQE w into hdr (a run of packets from k,
 * plen bytes, under one header: the opcode says where the run ends, the PSN
 * where it begins); returns header length. */
static size_t build_headers(struct sv_qp *qp, struct sv_send_wqe *w, uint32_t k, uint32_t plen,
			    uint8_t *hdr)
{
	uint32_t kl = k + sv_qp_npkts(qp, plen) - 1; /* the run's last packet */
	bool first = k == 0, last = kl + 1 == w->npkts;
	const struct sv_wr_opcode_info *wo = w->op;
	uint8_t opcode = qp->ti->wire_class | (first && last ? wo->wire_only
					      : first	      ? wo->wire_first
					      : last	      ? wo->wire_last
							      : wo->wire_middle);
	const struct sv_opcode_info *op = sv_opcode_info(opcode);
	struct sv_bth *bth = (void *)hdr;
	uint32_t dqpn = qp->ti->connected ? qp->attr.dest_qp_num : w->wr.wr.ud.remote_qpn;

	memset(hdr, 0, op->hdr_len);
	bth->opcode = opcode;
	bth->flags = 0;
	if (last && (w->wr.send_flags & IBV_SEND_SOLICITED))
		bth->flags |= SV_BTH_SE;
	if (wants_ack(qp, w, kl))
		bth->flags |= SV_BTH_ACKREQ;
	bth->pkey = 0xffff;
	bth->dqpn = htonl(dqpn & SV_PSN_MASK);
	bth->psn = htonl(sv_psn_add(w->first_psn, k));
	if (op->off_deth) {
		struct sv_deth *d = (void *)(hdr + op->off_deth);
		uint32_t qkey = w->wr.wr.ud.remote_qkey;

		/* a qkey with the high bit set means "use the QP's own" */
		if (qkey & 0x80000000u)
			qkey = qp->attr.qkey;
		d->qkey = htonl(qkey);
		d->sqpn = htonl(qp->ex.qp_base.qp_num);
	}
	if (op->off_xrceth) {
		struct sv_xrceth *x = (void *)(hdr + op->off_xrceth);

		x->srqn = htonl(w->wr.qp_type.xrc.remote_srqn & SV_PSN_MASK);
	}
	if (op->off_reth) {
		struct sv_reth *r = (void *)(hdr + op->off_reth);
		/* a READ asked for again from its response k on (rewind): the
		 * rest of it (a WRITE's RETH is on its first packet only) */
		uint32_t done = (w->op->flags & SV_WRF_READ) ? k * qp->mtu : 0;

		r->va = htobe64(w->wr.wr.rdma.remote_addr + done);
		r->rkey = htonl(w->wr.wr.rdma.rkey);
		r->dma_len = htonl(w->length - done);
	}
	if (op->off_atmeth) {
		struct sv_atmeth *a = (void *)(hdr + op->off_atmeth);

		a->va = htobe64(w->wr.wr.atomic.remote_addr);
		a->rkey = htonl(w->wr.wr.atomic.rkey);
		if (w->wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
			a->swap_add = htobe64(w->wr.wr.atomic.swap);
			a->compare = htobe64(w->wr.wr.atomic.compare_add);
		} else {
			a->swap_add = htobe64(w->wr.wr.atomic.compare_add);
		}
	}
	if (op->off_immdt) {
		struct sv_immdt *i = (void *)(hdr + op->off_immdt);

		i->imm = w->wr.imm_data;
	}
	if (op->off_ieth) {
		struct sv_ieth *i = (void *)(hdr + op->off_ieth);

		i->rkey = htonl(w->wr.invalidate_rkey);
	}
	return op->hdr_len;
}

/*
 * A pass of the requester gathers its packets in one batch and writes them
 * with one system call.  The batch's payload pieces point into registered
 * memory, so the MR read lock is held from the first such piece until the
 * flush (a deregistration waits for it, as for any access in progress).
 */
struct req_pass {
	struct sv_txbatch b;
	bool mr_locked;
};

static void pass_flush(struct sv_qp *qp, struct req_pass *p)
{
	sv_txbatch_flush(&p->b); /* a dead conn drops it; the retry timer recovers */
	if (p->mr_locked) {
		sv_mr_read_unlock(qp->ctx);
		p->mr_locked = false;
	}
}

_Static_assert(SV_MAX_HDR_LEN + SV_FRAME_HEAD <= SV_TXBATCH_HEAD, "headers fit a batch slot");

/* Add packet k of w to the pass; returns 0, or a local error status for the WQE. */
/*
 * A payload with pieces in GPU memory leaves from the QP's staging window
 * (engine/gpu.h): packets inside the window point into it; one outside
 * refills it, after the batch whose packets point into it has gone.
 */
static enum sv_mem_err stage_packet(struct sv_qp *qp, struct req_pass *p, struct sv_send_wqe *w,
				    sv_cu_ctx gpu, uint32_t off, uint32_t plen, struct iovec *iov)
{
	uint64_t tag = ((uint64_t)w->first_psn << 32) ^ w->wr.wr_id;
	uint8_t *s = sv_gpu_stage_find(qp->req.gpu_tx, (uintptr_t)w, tag, off, plen);
	enum sv_mem_err e;

	if (!s) {
		sv_txbatch_flush(&p->b);
		s = sv_gpu_stage_claim(&qp->req.gpu_tx, gpu, (uintptr_t)w, tag, off, w->length);
		if (!s)
			return SV_MEM_FAULT;
		e = sv_sgl_copy_out(qp->ctx, qp->pd, w->sge, w->num_sge, off, s,
				    qp->req.gpu_tx->len);
		if (e) {
			sv_gpu_stage_forget(qp->req.gpu_tx);
			return e;
		}
	}
	iov->iov_base = s;
	iov->iov_len = plen;
	return SV_MEM_OK;
}

/*
 * A payload in one piece of GPU memory, to a process of this host that
 * opens it, on RC (the source stays put until the ACK): the packet names
 * it instead of carrying it (gpu.h).  false: it travels.
 */
static bool gpu_ref(struct sv_qp *qp, struct sv_conn *conn, const struct sv_send_wqe *w,
		    uint32_t off, const struct iovec *iov, struct sv_gpu_ref *ref)
{
	uint32_t i = 0;

	if (!qp->ti->reliable || iov->iov_len < SV_GPU_REF_MIN || !sv_gpu_ref_ok(conn))
		return false;
	while (i < w->num_sge && off >= w->sge[i].length)
		off -= w->sge[i++].length;
	return i < w->num_sge &&
	       sv_gpu_ref_make(sv_key_entry(qp->ctx, w->sge[i].lkey), iov->iov_base,
			       (uint32_t)iov->iov_len, ref);
}

static enum ibv_wc_status send_packet(struct sv_qp *qp, struct req_pass *p, struct sv_conn *conn,
				      struct sv_send_wqe *w, uint32_t k, uint32_t off, uint32_t *plenp)
{
	uint32_t plen = *plenp;
	struct iovec iov[SV_FRAME_MAX_IOV];
	sv_cu_ctx gpu[SV_FRAME_MAX_IOV];
	enum sv_mem_err e = SV_MEM_OK;
	struct sv_gpu_ref ref;
	bool by_ref = false;
	size_t hl;
	uint8_t *hdr;
	int n = 0;

	if (plen && w->inline_buf) {
		iov[0].iov_base = w->inline_buf + off;
		iov[0].iov_len = plen;
		n = 1;
	} else if (plen) {
		if (!p->mr_locked) {
			sv_mr_read_lock(qp->ctx);
			p->mr_locked = true;
		}
		n = sv_sgl_iov(qp->ctx, qp->pd, w->sge, w->num_sge, off, plen, 0, iov, gpu,
			       SV_FRAME_MAX_IOV - 1, &e);
		if (n > 0 && plen > qp->mtu && sv_gpu_any(gpu, n)) {
			/* GPU memory goes a packet at a time, through its
			 * windows and references (gpu.h), as over a datagram */
			*plenp = plen = qp->mtu;
			n = sv_sgl_iov(qp->ctx, qp->pd, w->sge, w->num_sge, off, plen, 0, iov, gpu,
				       SV_FRAME_MAX_IOV - 1, &e);
		}
		if (n < 0)
			return sv_mem_err_to_local_status(e);
		/* read later, by the kernel or the peer: memory the application
		 * unmapped fails the WQE here rather than the connection there */
		if (!sv_iov_readable(iov, gpu, n))
			return IBV_WC_LOC_PROT_ERR;
		if (n == 1 && gpu[0] && gpu_ref(qp, conn, w, off, iov, &ref)) {
			by_ref = true;
			n = 0;
		} else if (sv_gpu_any(gpu, n)) {
			/* the window is reused before any ACK: its bytes must
			 * travel, not be read from here later (shm.c) */
			if (p->b.ref) {
				sv_txbatch_flush(&p->b);
				p->b.ref = false;
			}
			for (int i = 0; i < n; i++)
				if (gpu[i]) {
					e = stage_packet(qp, p, w, gpu[i], off, plen, iov);
					break;
				}
			if (e)
				return sv_mem_err_to_local_status(e);
			n = 1;
		}
	}
	if (!sv_txbatch_fits(&p->b, conn, n)) {
		/* keep the lock across the flush: iov may point into an MR */
		sv_txbatch_flush(&p->b);
	}
	hdr = sv_txbatch_hdr(&p->b);
	hl = build_headers(qp, w, k, plen, hdr);
	if (by_ref) {
		((struct sv_bth *)hdr)->flags |= SV_BTH_GPUREF;
		memcpy(hdr + hl, &ref, sizeof(ref));
		hl += sizeof(ref);
	}
	sv_txbatch_add(&p->b, conn, hl, iov, n);
	sv_stat_req_tx(qp, sv_psn_add(w->first_psn, k), plen);
	return IBV_WC_SUCCESS;
}

/*
 * UD datagrams go to many connections, and a UD QP parked on one of them
 * waits for all: UD keeps queueing up to this much before it parks.
 */
#define SV_UD_TXQ_HIGH (4u << 20)

static bool congested(struct sv_qp *qp, struct sv_conn *conn)
{
	if (!qp->ti->connected)
		return atomic_load_explicit(&conn->txq_bytes, memory_order_relaxed) > SV_UD_TXQ_HIGH;
	return sv_conn_congested(conn);
}

/* The connection has bytes waiting: park the QP until the engine drains it.
 * Checked again under tx_lock, since the drain may have just happened. */
static bool park_on(struct sv_qp *qp, struct sv_conn *conn)
{
	bool parked = false;

	sv_mutex_lock(&conn->tx_lock);
	if (congested(qp, conn)) {
		if (!sv_list_linked(&qp->txwait_link)) {
			sv_list_add_tail(sv_conn_waiters(conn), &qp->txwait_link);
			/* a UD QP parks on an AH's connection, not its own:
			 * remember which, for sv_engine_forget_qp */
			sv_conn_get(conn);
			atomic_store(&qp->txwait_conn, conn);
		}
		parked = true;
	}
	sv_mutex_unlock(&conn->tx_lock);
	return parked;
}

void sv_requester_arm_ack_timer(struct sv_qp *qp)
{
	uint64_t t = qp->attr.timeout ? sv_timeout_ns(qp->attr.timeout) : 1000000000ull;
	uint64_t now = sv_now_ns(), d;

	/* below a millisecond the engine's tick cannot honour it anyway */
	if (t < 1000000ull)
		t = 1000000ull;
	if (!atomic_load_explicit(&qp->req.ack_deadline, memory_order_relaxed))
		qp->req.ack_wait_since = now; /* waiting from now (progress_made too) */
	d = qp->sq.flow.ib_deadline = now + t;
	qp->sq.flow.probes = 0;
	if (sv_flow_probing(qp) && now + sv_flow_probe_ns(qp) < d)
		d = now + sv_flow_probe_ns(qp); /* the probe comes first */
	atomic_store_explicit(&qp->req.ack_deadline, d, memory_order_relaxed);
}

void sv_requester_stop_timers(struct sv_qp *qp)
{
	atomic_store_explicit(&qp->req.rnr_until, 0, memory_order_relaxed);
	atomic_store_explicit(&qp->req.ack_deadline, 0, memory_order_relaxed);
}

static void ask_soon(struct sv_qp *qp);

void sv_requester_progress(struct sv_qp *qp, bool outstanding)
{
	qp->req.retries_left = qp->attr.retry_cnt;
	qp->req.rnr_retries_left = qp->attr.rnr_retry;
	qp->req.ack_wait_since = sv_now_ns(); /* the wait for what is left starts over */
	if (!outstanding) {
		atomic_store_explicit(&qp->req.ack_deadline, 0, memory_order_relaxed);
		return;
	}
	sv_requester_arm_ack_timer(qp);
	/* what is left includes messages that did not ask for their ACK:
	 * they are asked for SV_ACK_UNASKED_NS from now, not at the timeout */
	if (qp->sq.flow.unasked && !sv_flow_probing(qp))
		ask_soon(qp);
}

bool sv_requester_seq_nak(struct sv_qp *qp, uint32_t psn)
{
	/* (retry_cnt 7 retries a sequence NAK without end) */
	bool counted = qp->attr.timeout && qp->attr.retry_cnt != 7;

	if (counted && qp->req.retries_left == 0)
		return false;
	if (counted)
		qp->req.retries_left--;
	sv_flow_lost(qp);
	sv_requester_rewind(qp, psn);
	sv_requester_arm_ack_timer(qp);
	return true;
}

bool sv_requester_rnr_nak(struct sv_qp *qp, uint32_t psn, uint8_t timer)
{
	/* (rnr_retry 7 retries without end) */
	if (qp->attr.rnr_retry != 7 && qp->req.rnr_retries_left == 0)
		return false;
	if (qp->attr.rnr_retry != 7)
		qp->req.rnr_retries_left--;
	sv_requester_rewind(qp, psn);
	/* the responder's timer code says how long to back off */
	atomic_store_explicit(&qp->req.rnr_until, sv_now_ns() + sv_rnr_timer_ns(timer),
			      memory_order_relaxed);
	atomic_store_explicit(&qp->req.ack_deadline, 0, memory_order_relaxed);
	return true;
}

void sv_requester_reset(struct sv_qp *qp)
{
	sv_gpu_stage_forget(qp->req.gpu_tx); /* not reused by the next life */
	sv_requester_stop_timers(qp);
}

/*
 * The WQE before sq->next failed (its local checks, a bind): none after it
 * starts while those before it are still unanswered, since retire(), when
 * it reaches the failed one, moves the QP to ERR and flushes the rest, which
 * must not have run on the peer (rxe's requester stops at an error too).
 */
static bool sq_stopped(const struct sv_sq *sq)
{
	const struct sv_send_wqe *w = &sq->wqe[(sq->next - 1) & (sq->size - 1)];

	return sq->next != sq->head && !sq->seg_off && w->state == SV_WQE_DONE &&
	       w->status != IBV_WC_SUCCESS;
}

/* This thread runs the requester from ibv_post_send (sv_requester_post). */
static __thread bool posting __attribute__((tls_model("initial-exec")));

static bool post_alone(struct sv_qp *qp);

/*
 * A post of at least this many bytes to a QP behind a socket holds the
 * sockets' lease (loop.c, socket_lease).  Below it the engine thread's
 * taking the ACKs on another CPU cost the poster less than its taking them
 * itself: tcp on lo, `ib_write_bw -D 1`, the lease held by every post,
 * against none: 8 B 0.81x, 64 B 0.80x, 128 B 0.79x, 256 B 1.19x, 4 KiB
 * 1.16x, 64 KiB 1.4-1.5x.
 */
#define SV_POST_LEASE_MIN 256u

void sv_requester_post(struct sv_qp *qp)
{
	struct sv_sq *sq = &qp->sq;
	/* the WQE just posted, read before the pass may retire it */
	uint32_t len = sq->tail != sq->head ? sq->wqe[(sq->tail - 1) & (sq->size - 1)].length : 0;

	posting = true;
	if (!post_alone(qp))
		sv_requester_run(qp);
	posting = false;
	if (len >= SV_POST_LEASE_MIN)
		sv_engine_posted_to(qp->ctx->eng, qp->conn);
}

/*
 * A pass of sv_requester_run: its batch, its packet budget, and what it
 * did so far.  Each step of the pass on the WQE at sq->next says what comes
 * next: on with that WQE, on with the loop (the next WQE, or the next
 * segment of this one), or the end of the pass.
 */
struct req_run {
	struct req_pass pass;
	uint32_t max_rd; /* READs and atomics it may have outstanding */
	int budget, quanta;
	/* a WQE before this one is still on the wire: what follows it goes
	 * there too (direct_exec.h) */
	bool on_wire;
	bool arm; /* an RC WQE went out whole */
};

enum req_step {
	REQ_GO,	  /* on with this WQE */
	REQ_NEXT, /* on with the loop */
	REQ_STOP, /* the pass ends */
};

static void run_begin(struct sv_qp *qp, struct req_run *r)
{
	sv_txbatch_init(&r->pass.b);
	r->pass.mr_locked = false;
	/* RC payloads stay put until their ACK, which comes after the peer has
	 * read them: a transport may let the peer copy them straight from the SGL */
	r->pass.b.ref = qp->ti->reliable;
	r->max_rd = SV_MAX(1u, qp->attr.max_rd_atomic);
	r->budget = SV_REQ_BUDGET;
	r->quanta = SV_REQ_QUANTA;
	r->on_wire = qp->sq.head != qp->sq.next || qp->sq.seg_off;
	r->arm = false;
}

/* Step: a local operation (bind, invalidate) that a rewind went back over
 * took effect once, uses no PSN, and is not sent; retire() completes it in
 * its turn.  Nothing after a failed one goes out. */
static enum req_step skip_done(struct sv_sq *sq, const struct sv_send_wqe *w)
{
	if (w->state != SV_WQE_DONE || sq->seg_off)
		return REQ_GO;
	sq->next++;
	return w->status != IBV_WC_SUCCESS ? REQ_STOP : REQ_NEXT;
}

/* Must w wait: a fence for the READs and atomics before it, a READ or an
 * atomic for room under max_rd_atomic? */
static bool fenced(const struct sv_sq *sq, const struct sv_send_wqe *w, uint32_t max_rd)
{
	if ((w->wr.send_flags & IBV_SEND_FENCE) && sq->rd_atomic_inflight)
		return true;
	return sv_wr_rd_atomic(w->op) && sq->rd_atomic_inflight >= max_rd;
}

/* A local operation takes effect now, in order; the table's write lock
 * waits for no access of ours (the batch goes first). */
static enum req_step exec_local(struct sv_qp *qp, struct req_run *r, struct sv_send_wqe *w)
{
	pass_flush(qp, &r->pass);
	w->status = w->wr.opcode == IBV_WR_BIND_MW ? sv_mw_bind(qp, w)
						   : sv_mw_local_inv(qp, w->wr.invalidate_rkey);
	w->state = SV_WQE_DONE;
	qp->sq.next++;
	/* a failure: retire() moves the QP to ERR */
	return w->status != IBV_WC_SUCCESS ? REQ_STOP : REQ_NEXT;
}

/* w's local checks, and its execution on the peer's memory where it may
 * have that; REQ_GO: it goes by the wire. */
static enum req_step check_or_direct(struct sv_qp *qp, struct req_run *r, struct sv_send_wqe *w)
{
	bool direct = !w->wired && qp->ti->reliable && qp->ti->connected && qp->conn;
	enum sv_direct d = SV_DIRECT_WIRE;
	enum ibv_wc_status st = check_len(w);

	/* executed on the peer's memory, it has its local buffers
	 * checked there, under the MR lock that takes anyway */
	if (st == IBV_WC_SUCCESS && direct && !r->on_wire)
		d = sv_direct_exec(qp, qp->conn, w, posting);
	if (d == SV_DIRECT_WIRE && st == IBV_WC_SUCCESS)
		st = check_sgl(qp, w);
	if (st != IBV_WC_SUCCESS) {
		w->status = st;
		w->state = SV_WQE_DONE;
		qp->sq.next++;
		return REQ_STOP; /* retire() moves the QP to ERR */
	}
	if (d == SV_DIRECT_DEFER) {
		sv_engine_schedule(qp->ctx->eng, qp);
		return REQ_STOP;
	}
	if (d != SV_DIRECT_WIRE)
		qp->req.direct_went = true;
	if (d == SV_DIRECT_DONE) {
		/* executed on the peer's memory, by this thread (or
		 * refused for its local buffers: w->status) */
		w->state = SV_WQE_DONE;
		qp->sq.next++;
		/* a failure: retire() moves the QP to ERR */
		return w->status != IBV_WC_SUCCESS ? REQ_STOP : REQ_NEXT;
	}
	if (direct && r->on_wire && sv_direct_soon(qp, qp->conn, w))
		return REQ_STOP; /* its completion runs us again (completer.c) */
	return REQ_GO;
}

/* Step: starting w (not started yet, or started again from its first
 * packet after a rewind): the fence and the READ limit, a local operation,
 * the checks and direct execution, then its PSNs. */
static enum req_step start_wqe(struct sv_qp *qp, struct req_run *r, struct sv_send_wqe *w)
{
	struct sv_sq *sq = &qp->sq;
	enum req_step st;

	if (sq->seg_off || w->state != SV_WQE_PENDING || w->npkts)
		return REQ_GO; /* under way */
	if (fenced(sq, w, r->max_rd))
		return REQ_STOP;
	if (w->op->flags & SV_WRF_LOCAL)
		return exec_local(qp, r, w);
	st = check_or_direct(qp, r, w);
	if (st != REQ_GO)
		return st;
	w->first_psn = sq->psn;
	w->npkts = wqe_npkts(qp, w);
	w->last_psn = sv_psn_add(w->first_psn, w->npkts - 1);
	w->resp_psn = w->first_psn;
	return REQ_GO;
}

/* Step: a packet's turn from the pass's budget.  One spent, the rest goes
 * to the engine when other QPs wait or SV_REQ_QUANTA budgets are spent. */
static enum req_step take_turn(struct sv_qp *qp, struct req_run *r)
{
	if (r->budget-- > 0)
		return REQ_GO;
	if (--r->quanta <= 0 || sv_engine_others_waiting(qp->ctx->eng, qp)) {
		sv_engine_schedule(qp->ctx->eng, qp); /* let others have a turn */
		return REQ_STOP;
	}
	/* nobody to be fair to: go on here, rather than hand the rest
	 * to another thread that would contend for this QP */
	pass_flush(qp, &r->pass);
	r->budget = SV_REQ_BUDGET - 1;
	return REQ_GO;
}

/* Step: a datagram longer than the MTU completes, and the wire drops it
 * (as in Soft-RoCE). */
static enum req_step drop_oversize(struct sv_qp *qp, struct sv_send_wqe *w)
{
	if (!qp->ti->ud || w->length <= qp->mtu)
		return REQ_GO;
	w->state = SV_WQE_DONE;
	w->status = IBV_WC_SUCCESS;
	w->npkts = 0;
	qp->sq.next++;
	return REQ_NEXT;
}

/* The connection w's next packet goes on (a datagram's: a reference of
 * its own), or NULL: out of memory (the retry timer tries again), or it
 * has bytes waiting and the QP is parked until the engine has flushed it. */
static struct sv_conn *wqe_conn(struct sv_qp *qp, struct req_run *r, struct sv_send_wqe *w)
{
	bool connected = qp->ti->connected;
	struct sv_conn *conn;

	if (!connected)
		pass_flush(qp, &r->pass); /* each datagram may go elsewhere */
	conn = connected ? sv_qp_conn(qp) : ah_conn(qp, w->ah, w->wr.wr.ud.remote_qpn);
	if (conn && !r->pass.b.nframes && congested(qp, conn) && park_on(qp, conn)) {
		if (!connected)
			sv_conn_put(conn);
		return NULL;
	}
	return conn;
}

/* The whole of w is out: RC awaits its answer, UC and UD complete it. */
static void wqe_out(struct sv_qp *qp, struct req_run *r, struct sv_send_wqe *w)
{
	struct sv_sq *sq = &qp->sq;

	sq->psn = sv_psn_add(w->first_psn, w->npkts);
	sq->seg_off = 0;
	sq->next++;
	if (qp->ti->reliable) {
		w->state = SV_WQE_SENT;
		if (sv_wr_rd_atomic(w->op))
			sq->rd_atomic_inflight++;
		r->arm = true;
	} else {
		w->state = SV_WQE_DONE; /* UC/UD: complete once handed to the wire */
		w->status = IBV_WC_SUCCESS;
	}
}

/* Packet k of w went out (RC): the flow's bookkeeping, and whether the
 * message asked for its ACK. */
static void packet_sent(struct sv_qp *qp, const struct sv_send_wqe *w, uint32_t k)
{
	struct sv_flow *f = &qp->sq.flow;
	uint32_t psn = sv_psn_add(w->first_psn, k);
	bool ask = wants_ack(qp, w, k); /* (before hi_psn moves past it) */

	if (sv_flow_probing(qp))
		sv_flow_sent(qp, psn, ask);
	else if (sv_psn_cmp(psn, f->hi_psn) >= 0)
		f->hi_psn = sv_psn_add(psn, 1);
	if (k + 1 == w->npkts)
		f->unasked = ask ? 0 : f->unasked + 1;
}

/* Messages went without asking for an ACK: the ack timer fires within
 * SV_ACK_UNASKED_NS, to ask then if nothing covered them meanwhile. */
static void ask_soon(struct sv_qp *qp)
{
	uint64_t d = sv_now_ns() + SV_ACK_UNASKED_NS;
	uint64_t a = atomic_load_explicit(&qp->req.ack_deadline, memory_order_relaxed);

	if (!a || d < a)
		atomic_store_explicit(&qp->req.ack_deadline, d, memory_order_relaxed);
}

/* Step: w's next segment into the pass's batch, for conn, if the
 * congestion window has room for it. */
static enum req_step send_segment(struct sv_qp *qp, struct req_run *r, struct sv_send_wqe *w,
				  struct sv_conn *conn)
{
	struct sv_sq *sq = &qp->sq;
	uint32_t k = sq->seg_off / qp->mtu;
	/* a request that carries no payload has none; on a stream, a frame
	 * carries as many whole packets as it holds (not an XRC QP's, whose
	 * packets may be relayed to another process packet by packet) */
	uint32_t plen = sv_wr_sends_payload(w->op)
				? SV_MIN(qp->ti->xrc ? qp->mtu : sv_conn_run(conn, qp->mtu),
					 w->length - sq->seg_off)
				: 0;
	enum ibv_wc_status st;

	if (qp->ti->connected && sv_flow_probing(qp) &&
	    !sv_flow_window_open(qp, sv_psn_add(w->first_psn, k))) {
		/* as many packets unacknowledged as the congestion window
		 * allows: the next ACK runs us again, and if none comes
		 * the probe or the ack timer goes back */
		if (!qp->req.ack_deadline)
			sv_requester_arm_ack_timer(qp);
		return REQ_STOP;
	}
	r->on_wire = true;
	w->wired = true;
	st = send_packet(qp, &r->pass, conn, w, k, sq->seg_off, &plen);
	if (st == IBV_WC_SUCCESS && qp->ti->reliable)
		packet_sent(qp, w, k + sv_qp_npkts(qp, plen) - 1);
	if (!qp->ti->connected)
		sv_conn_put(conn); /* the batch holds its own reference */
	if (st != IBV_WC_SUCCESS) {
		w->status = st;
		w->state = SV_WQE_DONE;
		sq->next++;
		sq->seg_off = 0;
		return REQ_STOP;
	}
	sq->seg_off += plen;
	if (plen && sq->seg_off < w->length)
		return REQ_NEXT; /* more segments of this message */
	wqe_out(qp, r, w);
	return REQ_NEXT;
}

/* The pass's steps on the WQE at sq->next: REQ_NEXT to go on. */
static enum req_step run_step(struct sv_qp *qp, struct req_run *r)
{
	struct sv_send_wqe *w = &qp->sq.wqe[qp->sq.next & (qp->sq.size - 1)];
	struct sv_conn *conn;
	enum req_step st = skip_done(&qp->sq, w);

	if (st == REQ_GO)
		st = start_wqe(qp, r, w);
	if (st == REQ_GO)
		st = take_turn(qp, r);
	if (st == REQ_GO)
		st = drop_oversize(qp, w);
	if (st != REQ_GO)
		return st;
	conn = wqe_conn(qp, r, w);
	if (!conn)
		return REQ_STOP;
	return send_segment(qp, r, w, conn);
}

void sv_requester_run(struct sv_qp *qp)
{
	struct sv_sq *sq = &qp->sq;
	/* no initializer: it would clear the batch's ~20 KB of frame heads
	 * and iovecs on every call, which cost more than the rest of a
	 * direct WRITE; run_begin (sv_txbatch_init) sets what is read */
	struct req_run r;

	if (qp->state != IBV_QPS_RTS || qp->req.rnr_until || sq_stopped(sq))
		goto retire;
	run_begin(qp, &r);
	while (sq->next != sq->tail && run_step(qp, &r) == REQ_NEXT)
		;
	pass_flush(qp, &r.pass);
	/* after the flush: the clock read is not between the post and the wire
	 * (the QP's lock is held: no ACK is taken in before the timer runs) */
	if (r.arm && !qp->req.ack_deadline)
		sv_requester_arm_ack_timer(qp);
	if (r.arm && sq->flow.unasked)
		ask_soon(qp);
	sv_engine_timer_update(qp->ctx->eng, qp);
retire:
	sv_requester_retire(qp);
}

/*
 * sv_requester_post's shortcut: the WQE just posted is the queue's only one,
 * and it executes on the peer's memory at once (or is deferred to the
 * engine thread, or refused for its local buffers), as check_or_direct
 * would have it in a pass, and it is retired here.  What a pass adds to
 * that is for packets (a batch, PSNs, the ack timer), and this one sends
 * none: the same-host 8-byte WRITE rate went from 8.4 to 9.9 M/s.  false:
 * the pass runs, as when the peer's memory is not reachable, or was not
 * for the last WQE tried (then the pass's own try would repeat this one).
 */
static bool post_alone(struct sv_qp *qp)
{
	struct sv_sq *sq = &qp->sq;
	struct sv_send_wqe *w = &sq->wqe[sq->head & (sq->size - 1)];
	enum sv_direct d;

	if (!sv_direct_alone(qp, 1) || w->state != SV_WQE_PENDING || w->npkts || w->wired ||
	    !(w->op->flags & (SV_WRF_DIRECT | SV_WRF_DIRECT_RECV)) ||
	    check_len(w) != IBV_WC_SUCCESS)
		return false;
	/* (an empty queue has no READ or atomic outstanding: no fence holds) */
	d = sv_direct_exec(qp, qp->conn, w, true);
	if (d == SV_DIRECT_WIRE) {
		qp->req.direct_went = false;
		return false;
	}
	if (d == SV_DIRECT_DEFER) {
		sv_engine_schedule(qp->ctx->eng, qp);
		return true;
	}
	w->state = SV_WQE_DONE;
	sq->next++;
	sv_requester_retire(qp); /* a failure moves the QP to ERR */
	return true;
}

void sv_requester_completion(struct sv_qp *qp, uint64_t wr_id, unsigned int send_flags,
			     const struct sv_wr_opcode_info *op, uint32_t length,
			     enum ibv_wc_status st)
{
	struct ibv_wc wc = {
		.wr_id = wr_id,
		.status = st,
		.opcode = op->wc_opcode,
		.qp_num = qp->ex.qp_base.qp_num,
	};

	if (st == IBV_WC_SUCCESS && !qp->sq_sig_all && !(send_flags & IBV_SEND_SIGNALED))
		return;
	if (st == IBV_WC_SUCCESS && (op->flags & SV_WRF_READ))
		wc.byte_len = length;
	else if (st == IBV_WC_SUCCESS && (op->flags & SV_WRF_ATOMIC))
		wc.byte_len = 8;
	if (st != IBV_WC_SUCCESS)
		wc.vendor_err = st;
	sv_cq_push(qp->scq, qp, &wc, false);
}

void sv_requester_retire(struct sv_qp *qp)
{
	struct sv_sq *sq = &qp->sq;

	while (sq->head != sq->next) {
		struct sv_send_wqe *w = &sq->wqe[sq->head & (sq->size - 1)];

		if (w->state != SV_WQE_DONE)
			break;
		sq->head++;
		sv_requester_completion(qp, w->wr.wr_id, w->wr.send_flags, w->op, w->length,
					w->status);
		if (qp->req.gpu_tx && qp->req.gpu_tx->owner == (uintptr_t)w)
			sv_gpu_stage_forget(qp->req.gpu_tx); /* its slot's next WQE is another */
		sv_wqe_release(w);
		if (w->status != IBV_WC_SUCCESS) {
			sv_qp_enter_error(qp);
			return;
		}
	}
}

void sv_requester_rewind(struct sv_qp *qp, uint32_t to_psn)
{
	struct sv_sq *sq = &qp->sq;
	/* a partly sent WQE at sq->next is part of the window too */
	uint32_t end = sq->next + (sq->seg_off ? 1 : 0);
	uint32_t i, target = end;
	uint32_t first_psn = 0, from_pkt = 0;

	sq->rd_atomic_inflight = 0;
	sv_flow_rewound(qp);
	for (i = sq->head; i != end; i++) {
		struct sv_send_wqe *w = &sq->wqe[i & (sq->size - 1)];

		if (w->state == SV_WQE_DONE)
			continue;
		if (target == end && sv_psn_cmp(w->last_psn, to_psn) >= 0) {
			target = i;
			first_psn = w->first_psn;
			/* a SEND or WRITE goes on from the packet asked for (the
			 * responder has the ones before it); a READ from its first
			 * response not placed yet, asked for as a READ of the rest
			 * (PSN, address and length moved on, as rxe does and IBA
			 * allows): asked for whole, a READ longer than the receiving
			 * side can take in at once (a datagram socket's buffer) would
			 * lose its responses at the same place every time and never
			 * complete.  An atomic is asked for whole */
			if (!sv_wr_rd_atomic(w->op) && w->npkts && sv_psn_cmp(to_psn, first_psn) > 0)
				from_pkt = (to_psn - first_psn) & SV_PSN_MASK;
			else if ((w->op->flags & SV_WRF_READ) && w->npkts &&
				 sv_psn_cmp(w->resp_psn, first_psn) > 0 &&
				 sv_psn_cmp(w->resp_psn, w->last_psn) <= 0)
				from_pkt = (w->resp_psn - first_psn) & SV_PSN_MASK;
		}
		if (target != end) {
			w->state = SV_WQE_PENDING;
			if (i != target || !from_pkt)
				w->npkts = 0; /* PSNs are reassigned identically on resend */
		} else if (sv_wr_rd_atomic(w->op)) {
			sq->rd_atomic_inflight++;
		}
	}
	if (target == end)
		return;
	sq->psn = first_psn;
	sq->next = target;
	sq->seg_off = from_pkt * qp->mtu;
}

/*
 * A stream transport (tcp, shm) loses nothing by itself: while its
 * connection lives, no answer yet means the peer process has not got to
 * our packets (a busy host, whose threads wait for a core; a stop), or its
 * responder dropped one on purpose (a QP not in RTR yet, a request behind
 * a READ or an XRC relay, which count on the resend).  For
 * SV_CONN_SILENT_NS from the start of the wait an ack timeout resends as
 * always but uses no retry; from then on retries count as before, so a
 * peer that stays silent still ends in IBV_WC_RETRY_EXC_ERR.  Without this
 * the eight tries of ibv_rc_pingpong (timeout 14, 67 ms each) ran out
 * whenever the peer did not run for 0.6 s.  Under SOFTVERBS_FAULTS packets
 * are lost on purpose, and a datagram transport loses them by itself:
 * there every timeout uses a retry.
 */
static bool stream_patience(const struct sv_qp *qp, uint64_t now)
{
	const struct sv_conn *c = qp->conn;

	return c && !c->lossy && !sv_faults_enabled &&
	       atomic_load(&c->state) != SV_CONN_DEAD && now - qp->req.ack_wait_since < SV_CONN_SILENT_NS;
}

void sv_requester_timeout(struct sv_qp *qp, uint64_t now)
{
	struct sv_sq *sq = &qp->sq;

	if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD) {
		sv_requester_stop_timers(qp);
		sv_engine_timer_update(qp->ctx->eng, qp);
		return;
	}
	if (qp->req.rnr_until && now >= qp->req.rnr_until) {
		atomic_store_explicit(&qp->req.rnr_until, 0, memory_order_relaxed);
		sv_requester_run(qp);
	}
	if (qp->req.ack_deadline && now >= qp->req.ack_deadline) {
		struct sv_send_wqe *oldest = NULL;

		for (uint32_t i = sq->head; i != sq->next; i++) {
			struct sv_send_wqe *w = &sq->wqe[i & (sq->size - 1)];

			if (w->state == SV_WQE_SENT) {
				oldest = w;
				break;
			}
		}
		if (!oldest && sq->seg_off && sq->next != sq->tail)
			oldest = &sq->wqe[sq->next & (sq->size - 1)]; /* partly sent, all unanswered */
		/* from the first packet not acknowledged: a long SEND or WRITE
		 * whose ACKs moved una goes on from there.  A READ or an atomic
		 * is asked for again whole, and an ACK of what came after it
		 * (which moves una) does not bring its data */
		uint32_t from = !oldest ? 0
				: sv_wr_rd_atomic(oldest->op) || sv_psn_cmp(qp->comp.una, oldest->first_psn) <= 0
				? oldest->first_psn
				: qp->comp.una;

		if (!oldest) {
			atomic_store_explicit(&qp->req.ack_deadline, 0, memory_order_relaxed);
		} else if (qp->conn && atomic_load(&qp->conn->state) != SV_CONN_DEAD &&
			   sv_conn_gated(qp->conn) && !conn_usable(qp, qp->conn)) {
			/* its peer never answered (a stopped process took it on
			 * the shared port): again on a new connection, no retry used */
			sv_requester_rewind(qp, oldest->first_psn);
			sv_requester_arm_ack_timer(qp);
			sv_requester_run(qp);
		} else if (qp->conn && sv_conn_busy(qp->conn)) {
			/* still queued behind other traffic: the wire has not lost it,
			 * it has not even carried it yet; wait without using a retry */
			sv_requester_arm_ack_timer(qp);
		} else if (sq->flow.unasked && !sv_flow_probing(qp)) {
			/* the last messages did not ask for their ACK (wants_ack)
			 * and none came: the last packet again, asking, which the
			 * responder answers as a duplicate; no retry used */
			sq->flow.unasked = 0;
			sv_stat_count(qp, SV_QPC_ACK_ASKS);
			sv_requester_rewind(qp, sv_psn_add(sq->psn, SV_PSN_MASK));
			sv_requester_arm_ack_timer(qp);
			sv_requester_run(qp);
		} else if (sv_flow_probing(qp) && now < qp->sq.flow.ib_deadline) {
			/* a round trip and more without progress, before the ack
			 * timeout: go back to una now, using no retry
			 * (congestion.c); the ack timeout keeps its deadline */
			uint64_t d = qp->sq.flow.ib_deadline;

			if (qp->sq.flow.probes < UINT8_MAX)
				qp->sq.flow.probes++;
			sv_stat_count(qp, SV_QPC_PROBES);
			sv_flow_lost(qp);
			sv_requester_rewind(qp, from);
			if (now + sv_flow_probe_ns(qp) < d)
				d = now + sv_flow_probe_ns(qp);
			atomic_store_explicit(&qp->req.ack_deadline, d, memory_order_relaxed);
			sv_requester_run(qp);
		} else if (qp->attr.timeout && qp->req.retries_left == 0) {
			/* transport retries exhausted: the peer is gone */
			oldest->status = IBV_WC_RETRY_EXC_ERR;
			oldest->state = SV_WQE_DONE;
			if (sq->seg_off && oldest == &sq->wqe[sq->next & (sq->size - 1)]) {
				/* partly sent (the window stopped it): none of the rest
				 * goes out, and retire() reaches it; else it sat at
				 * sq->next, DONE and never retired, the QP in RTS with
				 * nothing armed */
				sq->next++;
				sq->seg_off = 0;
			}
			atomic_store_explicit(&qp->req.ack_deadline, 0, memory_order_relaxed);
			sv_requester_retire(qp);
		} else {
			if (qp->attr.timeout && !stream_patience(qp, now))
				qp->req.retries_left--;
			sv_stat_count(qp, SV_QPC_ACK_TIMEOUTS);
			sv_dbg("qp %u: ack timeout, resending from psn %u", qp->ex.qp_base.qp_num, from);
			sv_requester_rewind(qp, from);
			sv_requester_arm_ack_timer(qp);
			sv_requester_run(qp);
		}
	}
	sv_engine_timer_update(qp->ctx->eng, qp);
}
