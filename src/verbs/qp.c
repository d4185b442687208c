/*
 * Queue pairs: creation, the state machine (modify/query), destruction, and
 * the posting verbs.  post_send validates and copies each WR into the send
 * ring and runs the requester right away in the posting thread; post_recv
 * fills the receive ring the responder consumes.
 */
#include "verbs/verbs.h"
#include "engine/gpu.h"
#include "verbs/qp_state.h"
#include "engine/engine.h"
#include "engine/stats.h"
#include "engine/mem_export.h"
#include "engine/direct_exec.h"
#include "engine/direct_recv.h"
#include "engine/dma.h"
#include "engine/xrc_relay.h"
#include "transport/auth.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

void sv_qp_ex_init(struct sv_qp *qp, uint64_t send_ops_flags);
void sv_qp_ex_free(struct sv_qp *qp);

static uint32_t pow2_at_least(uint32_t v)
{
	uint32_t p = 1;

	while (p < v)
		p <<= 1;
	return p;
}

/*
 * Create, step: the attributes, checked against the device's limits and
 * this context, completed where an XRC QP leaves them out.  0 or an errno.
 */
static int check_init_attr(struct ibv_context *context, struct ibv_qp_init_attr_ex *ia)
{
	struct ibv_qp_cap *cap = &ia->cap;

	if (ia->qp_type == IBV_QPT_XRC_RECV) {
		/* no queues, no CQs, no PD: its requests go to the XRC SRQs of
		 * its domain (what the attributes say of those is ignored, as
		 * providers do) */
		if (!ia->xrcd || to_sv_xrcd(ia->xrcd)->ctx != to_sv_ctx(context))
			return EINVAL;
		memset(cap, 0, sizeof(*cap));
		return 0;
	}
	if (ia->qp_type == IBV_QPT_XRC_SEND) {
		/* a send queue only: no receive CQ, queue or SRQ */
		ia->recv_cq = ia->send_cq;
		ia->srq = NULL;
		cap->max_recv_wr = cap->max_recv_sge = 0;
	}
	if (!ia->pd || !ia->send_cq || (!ia->recv_cq && !ia->srq))
		return EINVAL;
	if (!sv_qp_type_info(ia->qp_type))
		return EOPNOTSUPP;
	if (!ia->recv_cq)
		ia->recv_cq = ia->send_cq;
	if (ia->pd->context != context || ia->send_cq->context != context ||
	    ia->recv_cq->context != context || (ia->srq && ia->srq->context != context))
		return EINVAL;
	if (cap->max_send_wr > SV_MAX_QP_WR || cap->max_recv_wr > SV_MAX_QP_WR ||
	    cap->max_send_sge > SV_MAX_SGE || cap->max_recv_sge > SV_MAX_SGE ||
	    cap->max_inline_data > SV_MAX_INLINE)
		return EINVAL;
	return 0;
}

/* Create, step: what the QP will report of its capacities. */
static void set_caps(struct sv_qp *qp, const struct ibv_qp_cap *cap)
{
	qp->cap = *cap;
	/*
	 * As in Soft-RoCE, a send WQE's slot holds either its SGL or its inline
	 * bytes, so the inline capacity is at least what the SGL takes
	 * (max_send_sge * 16 bytes) and is reported back as such: programs
	 * (rdma_xclient) send small inline messages on QPs created with
	 * max_inline_data 0 and one SGE.
	 */
	qp->cap.max_inline_data = SV_MIN(SV_MAX(cap->max_inline_data,
						(uint32_t)(cap->max_send_sge * sizeof(struct ibv_sge))),
					 (uint32_t)SV_MAX_INLINE);
	if (qp->srq) {
		qp->cap.max_recv_wr = 0;
		qp->cap.max_recv_sge = 0;
	}
}

/* Create, step: the QP's memory, its objects, its lock and its lists (NULL:
 * out of memory). */
static struct sv_qp *qp_alloc(struct sv_context *ctx, const struct ibv_qp_init_attr_ex *ia)
{
	/* a receive WQE taken from the queue or the SRQ is copied whole */
	struct sv_qp *qp = calloc(1, sv_qp_size(ia->srq ? to_sv_srq(ia->srq)->rq.max_sge
							 : ia->cap.max_recv_sge));

	if (!qp)
		return NULL;
	qp->ctx = ctx;
	qp->ti = sv_qp_type_info(ia->qp_type);
	qp->mcast_no_self = (ia->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) &&
			    (ia->create_flags & IBV_QP_CREATE_BLOCK_SELF_MCAST_LB);
	if (ia->qp_type == IBV_QPT_XRC_RECV) {
		qp->xrcd = to_sv_xrcd(ia->xrcd);
	} else {
		qp->pd = to_sv_pd(ia->pd);
		qp->scq = to_sv_cq(ia->send_cq);
		qp->rcq = to_sv_cq(ia->recv_cq);
		qp->srq = ia->srq ? to_sv_srq(ia->srq) : NULL;
	}
	qp->sq_sig_all = ia->sq_sig_all;
	set_caps(qp, &ia->cap);
	qp->mtu = sv_mtu_bytes(SV_PORT_MTU);
	sv_ref_init(&qp->ref, 1);
	sv_mutex_init(&qp->lock, SV_LOCK_QP);
	sv_list_init(&qp->timer_link);
	sv_list_init(&qp->run_link);
	sv_list_init(&qp->txwait_link);
	return qp;
}

/* Create, step: the send ring with its SGE and inline pools, and the
 * receive ring (none with an SRQ).  0 or ENOMEM (queues_free undoes it). */
static int queues_init(struct sv_qp *qp, const struct ibv_qp_cap *cap)
{
	struct sv_sq *sq = &qp->sq;
	uint32_t sges = SV_MAX(cap->max_send_sge, 1u);

	sq->max_wr = cap->max_send_wr;
	sq->size = pow2_at_least(SV_MAX(cap->max_send_wr, 1u));
	sq->wqe = calloc(sq->size, sizeof(*sq->wqe));
	sq->sge_pool = calloc((size_t)sq->size * sges, sizeof(struct ibv_sge));
	if (qp->cap.max_inline_data)
		sq->inline_pool = malloc((size_t)sq->size * qp->cap.max_inline_data);
	if (!sq->wqe || !sq->sge_pool || (qp->cap.max_inline_data && !sq->inline_pool) ||
	    (!qp->srq && sv_rq_init(&qp->rq, cap->max_recv_wr, cap->max_recv_sge)))
		return ENOMEM;
	for (uint32_t i = 0; i < sq->size; i++)
		sq->wqe[i].sge = sq->sge_pool + (size_t)i * sges;
	return 0;
}

static void queues_free(struct sv_qp *qp)
{
	free(qp->sq.wqe);
	free(qp->sq.sge_pool);
	free(qp->sq.inline_pool);
	sv_xrq_free(qp->ctx, &qp->rq);
	sv_rq_free(&qp->rq);
}

/* Create, step: a QP number, the lowest free slot of the context's table
 * (found from the hint), which grows as needed.  0 or ENOMEM. */
static int qpn_register(struct sv_context *ctx, struct sv_qp *qp, uint32_t *slot)
{
	uint32_t idx;

	sv_mutex_lock(&ctx->lock);
	if (ctx->nqp >= SV_MAX_QP) {
		sv_mutex_unlock(&ctx->lock);
		return ENOMEM;
	}
	for (idx = ctx->qpt_hint;
	     idx < ctx->qpt_size && (ctx->qpt[idx] || !sv_export_slot_free(ctx, idx)); idx++)
		;
	if (idx == ctx->qpt_size) {
		uint32_t n = ctx->qpt_size ? ctx->qpt_size * 2 : 64;
		struct sv_qp **t = realloc(ctx->qpt, sizeof(*t) * n);

		if (!t) {
			sv_mutex_unlock(&ctx->lock);
			return ENOMEM;
		}
		memset(t + ctx->qpt_size, 0, sizeof(*t) * (n - ctx->qpt_size));
		ctx->qpt = t;
		ctx->qpt_size = n;
	}
	ctx->qpt[idx] = qp;
	ctx->qpt_hint = idx + 1;
	ctx->nqp++;
	sv_mutex_unlock(&ctx->lock);
	*slot = idx;
	return 0;
}

/* Create, step: the ibv_qp the application sees, in RESET, and the
 * extended QP's functions. */
static void init_base(struct sv_qp *qp, struct ibv_context *context,
		      const struct ibv_qp_init_attr_ex *ia, uint32_t idx)
{
	struct ibv_qp *b = &qp->ex.qp_base;

	b->context = context;
	b->qp_context = ia->qp_context;
	if (ia->qp_type != IBV_QPT_XRC_RECV) {
		b->pd = ia->pd;
		b->send_cq = ia->send_cq;
		b->recv_cq = ia->qp_type == IBV_QPT_XRC_SEND ? NULL : ia->recv_cq;
		b->srq = ia->srq;
	}
	b->handle = idx; /* its slot: engine/stats.h counts by it */
	b->qp_num = sv_qpn_of_slot(qp->ctx, idx);
	b->state = IBV_QPS_RESET;
	b->qp_type = ia->qp_type;
	pthread_mutex_init(&b->mutex, NULL);
	pthread_cond_init(&b->cond, NULL);
	qp->state = IBV_QPS_RESET;
	qp->attr.qp_state = IBV_QPS_RESET;
	qp->attr.path_mtu = SV_PORT_MTU;
	qp->attr.port_num = 1;
	sv_qp_ex_init(qp, (ia->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) ? ia->send_ops_flags : 0);
}

/* Create, step: the QP holds the objects it uses. */
static void hold_objects(struct sv_qp *qp)
{
	if (qp->xrcd) {
		sv_ref_get(&qp->xrcd->users);
	} else {
		sv_ref_get(&qp->pd->users);
		sv_ref_get(&qp->scq->users);
		sv_ref_get(&qp->rcq->users);
	}
	if (qp->srq)
		sv_ref_get(&qp->srq->users);
}

static struct ibv_qp *qp_create(struct ibv_context *context, struct ibv_qp_init_attr_ex *ia)
{
	struct sv_context *ctx = to_sv_ctx(context);
	struct sv_qp *qp;
	uint32_t idx;
	int err = check_init_attr(context, ia);

	if (err)
		goto fail;
	/* a QP is what connects: the secret's key (the KDF, for a secret a
	 * person chose) is made here, once a process, in the caller's thread,
	 * not in the engine's at the first connection (auth.h); a failure
	 * shows at the connection */
	(void)sv_auth_init();

	qp = qp_alloc(ctx, ia);
	if (!qp) {
		err = ENOMEM;
		goto fail;
	}
	err = queues_init(qp, &ia->cap);
	if (!err)
		err = qpn_register(ctx, qp, &idx);
	if (err) {
		queues_free(qp);
		free(qp);
		goto fail;
	}
	init_base(qp, context, ia, idx);
	hold_objects(qp);
	sv_xrq_cq_hold(qp, true);
	sv_stats_qp_create(qp);
	ia->cap = qp->cap;
	return &qp->ex.qp_base;

fail:
	errno = err;
	return NULL;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_init_attr_ex ia;

	if (!pd || !attr) {
		errno = EINVAL;
		return NULL;
	}
	memset(&ia, 0, sizeof(ia));
	memcpy(&ia, attr, sizeof(*attr));
	ia.comp_mask = IBV_QP_INIT_ATTR_PD;
	ia.pd = pd;
	{
		struct ibv_qp *qp = qp_create(pd->context, &ia);

		if (qp)
			attr->cap = ia.cap;
		return qp;
	}
}

struct ibv_qp *sv_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *ia)
{
	/*
	 * A comp_mask bit only says that its field was filled in.  CREATE_FLAGS
	 * and MAX_TSO_HEADER are accepted when their value asks for nothing
	 * (flags 0, no TSO header): a program that always sets the bits gets
	 * its QP, as on Soft-RoCE.  Every other create flag asks for something
	 * this device does not do (raw packet offloads, a fixed source QPN, PCI
	 * padding), so it is EOPNOTSUPP, which is also what rxe answers.
	 */
	const uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
			       IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_MAX_TSO_HEADER |
			       IBV_QP_INIT_ATTR_XRCD;
	const uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
			     IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
			     IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
			     IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_ATOMIC_WRITE |
			     IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
			     IBV_QP_EX_WITH_SEND_WITH_INV;

	/* a UD QP may keep its own multicast datagrams from looping back to
	 * it (engine/mcast.c), as ConnectX allows; rxe refuses every flag */
	const uint32_t self_lb = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;

	/* an XRC receive QP has an XRC domain and no PD; every other QP a PD */
	bool xrc_recv = ia->qp_type == IBV_QPT_XRC_RECV;
	uint32_t need = xrc_recv ? IBV_QP_INIT_ATTR_XRCD : IBV_QP_INIT_ATTR_PD;

	if ((ia->comp_mask & ~known) || (ia->comp_mask & need) != need) {
		errno = (ia->comp_mask & ~known) ? EOPNOTSUPP : EINVAL;
		return NULL;
	}
	if (((ia->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && (ia->send_ops_flags & ~ops)) ||
	    ((ia->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) &&
	     (ia->create_flags & ~(ia->qp_type == IBV_QPT_UD ? self_lb : 0u))) ||
	    ((ia->comp_mask & IBV_QP_INIT_ATTR_MAX_TSO_HEADER) && ia->max_tso_header)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return qp_create(context, ia);
}

/* qp->lock held */
static void reset_qp(struct sv_qp *qp)
{
	struct sv_sq *sq = &qp->sq;

	/*
	 * RESET discards outstanding work without completions (ibv_modify_qp(3)),
	 * and in InfiniBand's Reset state the QP's CQs hold nothing of it either:
	 * the completions it left there (flushes of its ERR state, say) are
	 * taken out, as the hardware providers of rdma-core do (mlx4/mlx5
	 * cq_clean), so a program that brings the QP back never polls its
	 * previous life.  Soft-RoCE leaves them.  Receive WQEs still in an SRQ
	 * belong to the SRQ and stay there.
	 */
	for (; sq->head != sq->tail; sq->head++)
		sv_wqe_release(&sq->wqe[sq->head & (sq->size - 1)]);
	sq->head = sq->next = sq->tail = sq->seg_off = sq->rd_atomic_inflight = 0;
	qp->rq.head = qp->rq.count = 0;
	sv_xrq_reset(qp);
	/* each role forgets its previous life (GPU copies too: none started
	 * later, none reused) */
	sv_responder_reset(qp);
	sv_completer_reset(qp);
	sv_requester_reset(qp);
	qp->last_wqe_owed = false; /* (its previous life's, as its completions) */
	sv_engine_timer_update(qp->ctx->eng, qp);
	if (qp->conn) {
		sv_engine_forget_qp(qp->ctx->eng, qp);
		sv_conn_put(qp->conn);
		qp->conn = NULL;
	}
	if (qp->scq)
		sv_cq_clean(qp->scq, qp->ex.qp_base.qp_num);
	if (qp->rcq && qp->rcq != qp->scq)
		sv_cq_clean(qp->rcq, qp->ex.qp_base.qp_num);
}

static int check_attr_values(struct sv_qp *qp, struct ibv_qp_attr *a, int mask,
			     struct sv_endpoint_addr *peer)
{
	/*
	 * qp_access_flags takes any bits, as Linux's uverbs and rxe do (they
	 * store the word; mlx5 reads the remote bits and ignores the rest):
	 * programs pass their MR access flags here, ON_DEMAND included, and
	 * DAPL's providers MW_BIND on every RC QP.
	 * Only the REMOTE_* bits gate anything (the responder's
	 * check_qp_access); ibv_query_qp returns the word as it was set.
	 */
	if ((mask & IBV_QP_CUR_STATE) && a->cur_qp_state != qp->state)
		return EINVAL;
	if ((mask & IBV_QP_PORT) && a->port_num != 1)
		return EINVAL;
	if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0)
		return EINVAL;
	if ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > SV_PORT_MTU))
		return EINVAL;
	if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31)
		return EINVAL;
	if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7)
		return EINVAL;
	if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7)
		return EINVAL;
	if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31)
		return EINVAL;
	if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > SV_MAX_QP_RD_ATOM)
		return EINVAL;
	if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > SV_MAX_QP_RD_ATOM)
		return EINVAL;
	if ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num > SV_PSN_MASK)
		return EINVAL;
	if ((mask & IBV_QP_ALT_PATH) || (mask & IBV_QP_PATH_MIG_STATE && a->path_mig_state != IBV_MIG_MIGRATED))
		return EINVAL; /* no alternate paths on a software port */
	if (mask & IBV_QP_AV) {
		struct ibv_ah_attr *ah = &a->ah_attr;
		struct ibv_gid_entry src;

		/* RoCE addressing: a GRH with the peer's GID is mandatory; it
		 * names the peer's host, any filled index of ours is a valid
		 * source (an empty one ENODATA, past the table EINVAL, as
		 * Linux's ib_modify_qp answers them) */
		if (!ah->is_global || (ah->port_num && ah->port_num != 1) ||
		    !sv_gid_to_ip(qp->ctx, &ah->grh.dgid, &peer->ip))
			return EINVAL;
		return sv_gid_entry(qp->ctx->dev, qp->ctx, ah->grh.sgid_index, &src);
	}
	return 0;
}

/*
 * Before a QP with sends in flight is flushed or destroyed, the engine takes
 * in what has already reached this host: a NIC would have processed the
 * peer's ACK on arrival, so its WQE completes with success, not a flush.
 * The peer may have answered, closed and disconnected meanwhile, and its
 * disconnect comes on the CM's own connection, which can overtake the ACK
 * on the data one (libfabric's rxm closes an endpoint on that disconnect).
 *
 * So also for an RC QP that takes requests: a pass in progress may have
 * read a WRITE's payload into place (a stream's direct receive), where the
 * application can see its last byte, and not yet answered it; flushed in
 * between, the QP would drop the packet and the peer's WRITE would never
 * complete.  The pass ends first, with its ACK, as a NIC's ACK is out by the
 * time the application can act on the bytes (dtest's WRITE ping-pong over
 * tcp: the side that saw the last WRITE disconnected, and the other's last
 * WRITE completed flushed).
 */
static void settle_qp(struct sv_qp *qp)
{
	bool busy;

	sv_mutex_lock(&qp->lock);
	busy = qp->state != IBV_QPS_ERR &&
	       (qp->sq.head != qp->sq.tail ||
		(qp->ti->reliable && (qp->state == IBV_QPS_RTR || qp->state == IBV_QPS_RTS ||
				      qp->state == IBV_QPS_SQD)));
	sv_mutex_unlock(&qp->lock);
	if (busy)
		sv_engine_settle(qp->ctx->eng);
}

int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask)
{
	struct sv_qp *qp = sv_qp_named(to_sv_qp(ibqp));
	struct sv_endpoint_addr peer = { 0 };
	enum ibv_qp_state cur, next;
	bool settle_export;
	int err;

	if (!attr)
		return EINVAL;
	if (ibqp->handle == SV_QP_HANDLE_OPENED && qp->xrc->remote)
		return sv_xrc_remote_modify(qp, attr, mask); /* another process's */
	if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_ERR)
		settle_qp(qp);
	sv_mutex_lock(&qp->lock);
	cur = qp->state;
	next = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
	err = EINVAL; /* check_attr_values' own answer when it is the one that fails */
	if (next > IBV_QPS_ERR ||
	    !sv_qp_transition_ok(ibqp->qp_type, cur, next, mask) ||
	    (err = check_attr_values(qp, attr, mask, &peer))) {
		sv_mutex_unlock(&qp->lock);
		return err;
	}
	/* apply attributes */
	if (mask & IBV_QP_PKEY_INDEX)
		qp->attr.pkey_index = attr->pkey_index;
	if (mask & IBV_QP_PORT)
		qp->attr.port_num = attr->port_num;
	if (mask & IBV_QP_QKEY)
		qp->attr.qkey = attr->qkey;
	if (mask & IBV_QP_ACCESS_FLAGS)
		qp->attr.qp_access_flags = attr->qp_access_flags;
	if (mask & IBV_QP_PATH_MTU) {
		qp->attr.path_mtu = attr->path_mtu;
		qp->mtu = sv_mtu_bytes(attr->path_mtu);
	}
	if (mask & IBV_QP_AV)
		qp->attr.ah_attr = attr->ah_attr;
	if (mask & IBV_QP_DEST_QPN)
		qp->attr.dest_qp_num = attr->dest_qp_num;
	if (mask & (IBV_QP_AV | IBV_QP_DEST_QPN)) {
		/* the peer's host from its GID, its process from its QPN */
		if (!(mask & IBV_QP_AV))
			peer.ip = qp->peer.ip;
		peer.port = sv_qpn_port(qp->attr.dest_qp_num);
		if (!sv_ip_eq(&peer.ip, &qp->peer.ip) || peer.port != qp->peer.port) {
			if (qp->conn) {
				sv_engine_forget_qp(qp->ctx->eng, qp);
				sv_conn_put(qp->conn);
				qp->conn = NULL;
			}
			qp->peer = peer;
		}
	}
	if (mask & IBV_QP_RQ_PSN) {
		qp->attr.rq_psn = attr->rq_psn & SV_PSN_MASK;
		qp->resp.epsn = qp->attr.rq_psn;
		qp->resp.seq_nak_sent = false;
	}
	if (mask & IBV_QP_SQ_PSN) {
		qp->attr.sq_psn = attr->sq_psn & SV_PSN_MASK;
		qp->sq.psn = qp->attr.sq_psn;
		qp->comp.una = qp->attr.sq_psn;
		sv_flow_init(qp);
	}
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		qp->attr.max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		qp->attr.max_rd_atomic = attr->max_rd_atomic;
	if (mask & IBV_QP_MIN_RNR_TIMER)
		qp->attr.min_rnr_timer = attr->min_rnr_timer;
	if (mask & IBV_QP_TIMEOUT)
		qp->attr.timeout = attr->timeout;
	if (mask & IBV_QP_RETRY_CNT) {
		qp->attr.retry_cnt = attr->retry_cnt;
		qp->req.retries_left = attr->retry_cnt;
	}
	if (mask & IBV_QP_RNR_RETRY) {
		qp->attr.rnr_retry = attr->rnr_retry;
		qp->req.rnr_retries_left = attr->rnr_retry;
	}
	if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY)
		qp->attr.en_sqd_async_notify = attr->en_sqd_async_notify;

	if (next != cur || (mask & IBV_QP_STATE)) {
		switch (next) {
		case IBV_QPS_RESET:
			reset_qp(qp);
			break;
		case IBV_QPS_ERR:
			/* a SEND a peer of this host is placing into a receive
			 * ends before the flush, so that one completes as its
			 * SEND does; flushed under the peer's copy, it would
			 * fail here while the SEND succeeds there (a NIC's
			 * responder in ERR answers nothing, and its requester
			 * fails).  As at RESET (sv_xrq_reset) */
			sv_export_qp_quiet(qp);
			sv_qp_enter_error(qp);
			break;
		default:
			break;
		}
		qp->state = next;
		qp->attr.qp_state = next;
		qp->attr.cur_qp_state = next;
		qp->ex.qp_base.state = next;
		ibqp->state = next; /* (an ibv_open_qp handle's too) */
		if (next == IBV_QPS_SQD && qp->attr.en_sqd_async_notify)
			sv_async_event(qp->ctx, IBV_EVENT_SQ_DRAINED, qp, &qp->async, 0);
		if (next == IBV_QPS_RTS)
			sv_requester_run(qp);
	}
	sv_stats_qp_update(qp);
	settle_export = sv_export_qp(qp);
	sv_mutex_unlock(&qp->lock);
	/* what peers on this host check follows, outside the QP lock: the
	 * engine never waits there for a peer's access to end */
	if (settle_export)
		sv_export_qp_settle(qp);
	return 0;
}

int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int attr_mask,
		 struct ibv_qp_init_attr *init_attr)
{
	struct sv_qp *qp = sv_qp_named(to_sv_qp(ibqp));

	(void)attr_mask; /* everything is cheap to report */
	if (!attr || !init_attr)
		return EINVAL;
	if (ibqp->handle == SV_QP_HANDLE_OPENED && qp->xrc->remote)
		return sv_xrc_remote_query(qp, attr, init_attr); /* another process's */
	sv_mutex_lock(&qp->lock);
	*attr = qp->attr;
	attr->qp_state = qp->state;
	attr->cur_qp_state = qp->state;
	attr->cap = qp->cap;
	attr->sq_draining = 0;
	memset(init_attr, 0, sizeof(*init_attr));
	init_attr->qp_context = ibqp->qp_context;
	init_attr->send_cq = ibqp->send_cq;
	init_attr->recv_cq = ibqp->recv_cq;
	init_attr->srq = ibqp->srq;
	init_attr->cap = qp->cap;
	init_attr->qp_type = ibqp->qp_type;
	init_attr->sq_sig_all = qp->sq_sig_all;
	sv_mutex_unlock(&qp->lock);
	return 0;
}

int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp;
	(void)op;
	(void)flags;
	/* the responder writes each message in order, but only the 0 answer is safe to promise */
	return 0;
}

int ibv_destroy_qp(struct ibv_qp *ibqp)
{
	struct sv_qp *qp = to_sv_qp(ibqp);
	struct sv_context *ctx = qp->ctx;
	bool handled, settle_export;
	struct sv_qp *last = sv_xrc_qp_close(qp, &handled);

	/* an XRC receive QP with ibv_open_qp handles goes with the last one */
	if (handled && !last)
		return 0;
	if (handled) {
		qp = last;
		ibqp = &last->ex.qp_base;
	}

	/* as Linux's uverbs: detach from the multicast groups first */
	if (sv_mcg_busy(qp))
		return EBUSY;
	settle_qp(qp);
	sv_mutex_lock(&ctx->lock);
	ctx->qpt[ibqp->handle] = NULL;
	if (ibqp->handle < ctx->qpt_hint)
		ctx->qpt_hint = ibqp->handle;
	ctx->nqp--;
	sv_mutex_unlock(&ctx->lock);
	sv_mutex_lock(&qp->lock);
	sv_responder_farewell(qp); /* before it stops answering */
	qp->destroyed = true;
	settle_export = sv_export_qp(qp); /* destroyed: peers stop passing their checks */
	sv_responder_cancel(qp);
	sv_requester_stop_timers(qp);
	sv_mutex_unlock(&qp->lock);
	/* no peer's access through it is still in progress; one that has not
	 * ended in the time given is given up on */
	if (settle_export && !sv_export_qp_settle(qp)) {
		sv_mutex_lock(&ctx->lock);
		sv_export_slot_give_up(ctx, ibqp->handle);
		sv_mutex_unlock(&ctx->lock);
	}
	if (!qp->xrcd)
		sv_xrq_srq_leave(qp); /* what peers placed for it completes first */
	sv_xrq_detach(qp); /* a poll that holds it lets go before the wait below */
	sv_engine_forget_qp(ctx->eng, qp);
	/* wait for the engine to let go of it (references are short-lived) */
	sv_ref_drop_and_wait(&qp->ref);
	sv_async_forget(ctx, &qp->async); /* no event can be raised for it any more */
	sv_stats_qp_destroy(qp);
	if (qp->conn)
		sv_conn_put(qp->conn);
	sv_xrq_cq_hold(qp, false);
	if (qp->xrcd) {
		/* pd, rcq and srq were the current XRC SRQ's, not held */
		sv_ref_put(&qp->xrcd->users);
	} else {
		sv_ref_put(&qp->pd->users);
		sv_ref_put(&qp->scq->users);
		sv_ref_put(&qp->rcq->users);
		if (qp->srq)
			sv_ref_put(&qp->srq->users);
	}
	sv_qp_ex_free(qp);
	/* work it never completed lets go of its AHs */
	for (; qp->sq.head != qp->sq.tail; qp->sq.head++)
		sv_wqe_release(&qp->sq.wqe[qp->sq.head & (qp->sq.size - 1)]);
	sv_responder_free(qp);
	sv_xrc_relay_free(qp);
	free(qp->req.xs);
	free(qp->sq.wqe);
	free(qp->sq.sge_pool);
	free(qp->sq.inline_pool);
	sv_xrq_free(ctx, &qp->rq);
	sv_rq_free(&qp->rq);
	sv_gpu_stage_free(&qp->req.gpu_tx);
	sv_gpu_sink_free(&qp->comp.gpu_rd_in);
	sv_mutex_destroy(&qp->lock);
	free(qp);
	return 0;
}

/* qp->lock held: validate and copy one WR into the send ring. */
static int sq_post_one(struct sv_qp *qp, const struct ibv_send_wr *wr)
{
	const struct sv_wr_opcode_info *op = sv_wr_opcode_info(wr->opcode);
	struct sv_sq *sq = &qp->sq;
	struct sv_send_wqe *w;
	uint64_t len;
	bool inl;

	if (!op || !(op->qp_types & SV_QPT_BIT(qp->ti->type)))
		return EINVAL;
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->cap.max_send_sge)
		return EINVAL;
	if (wr->num_sge && !wr->sg_list)
		return EINVAL;
	if (!qp->ti->connected && !wr->wr.ud.ah)
		return EINVAL;
	if (sq->tail - sq->head >= sq->max_wr)
		return ENOMEM;
	len = sv_sgl_len(wr->sg_list, (uint32_t)wr->num_sge);
	/* an atomic write's 8 bytes are taken now, as inline data is (as rxe) */
	if ((op->flags & SV_WRF_ATOMIC_WRITE) && len != 8)
		return EINVAL;
	inl = ((wr->send_flags & IBV_SEND_INLINE) && (op->flags & SV_WRF_INLINE_OK)) ||
	      (op->flags & SV_WRF_ATOMIC_WRITE);
	if (inl && len > qp->cap.max_inline_data)
		return EINVAL;

	if (wr->opcode == IBV_WR_BIND_MW &&
	    (!wr->bind_mw.mw || wr->bind_mw.mw->context != qp->ex.qp_base.context ||
	     (wr->bind_mw.bind_info.mr &&
	      wr->bind_mw.bind_info.mr->context != qp->ex.qp_base.context)))
		return EINVAL;

	w = &sq->wqe[sq->tail & (sq->size - 1)];
	w->wr = *wr;
	w->op = op;
	if (wr->opcode == IBV_WR_BIND_MW) {
		w->bind_mw = &SV_CONTAINER_OF(wr->bind_mw.mw, struct sv_mw, ibmw)->key;
		w->bind_hi = wr->bind_mw.mw->handle; /* its key's upper 24 bits */
		w->bind_lkey = wr->bind_mw.bind_info.mr ? wr->bind_mw.bind_info.mr->lkey : 0;
		wr->bind_mw.mw->rkey = wr->bind_mw.rkey; /* what the bind makes it */
	}
	w->wr.next = NULL;
	w->wr.sg_list = NULL;
	w->num_sge = (uint32_t)wr->num_sge;
	if (w->num_sge)
		memcpy(w->sge, wr->sg_list, sizeof(*w->sge) * w->num_sge);
	w->length = len > UINT32_MAX ? UINT32_MAX : (uint32_t)len;
	w->inline_buf = NULL;
	if (inl) {
		/* the data is copied now: the buffer may be reused on return */
		uint8_t *dst = sq->inline_pool + (size_t)(sq->tail & (sq->size - 1)) * qp->cap.max_inline_data;
		uint32_t off = 0;

		for (uint32_t i = 0; i < w->num_sge; i++) {
			memcpy(dst + off, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
			off += wr->sg_list[i].length;
		}
		w->inline_buf = dst;
	}
	w->ah = qp->ti->connected ? NULL : to_sv_ah(wr->wr.ud.ah);
	if (w->ah)
		sv_ref_get(&w->ah->ref); /* the WQE's, until it leaves the queue */
	w->state = SV_WQE_PENDING;
	w->wired = false;
	w->status = IBV_WC_SUCCESS;
	w->npkts = 0;
	sq->tail++;
	return 0;
}

/*
 * qp->lock held: a chain of WRs into the send queue (up to the first one
 * refused, *bad_wr), then the requester runs them (or ERR flushes them).
 * app: the chain comes from ibv_post_send, which binds no type 1 window
 * (ibv_bind_mw does).
 */
static int post_chain(struct sv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr,
		      bool app)
{
	int err = 0;

	if (qp->state == IBV_QPS_RESET || qp->state == IBV_QPS_INIT || qp->state == IBV_QPS_RTR) {
		*bad_wr = wr;
		return EINVAL;
	}
	for (; wr; wr = wr->next) {
		err = app && wr->opcode == IBV_WR_BIND_MW && wr->bind_mw.mw &&
				      wr->bind_mw.mw->type != IBV_MW_TYPE_2
			      ? EINVAL
			      : sq_post_one(qp, wr);
		if (err) {
			*bad_wr = wr;
			break;
		}
	}
	if (qp->state == IBV_QPS_ERR)
		sv_qp_flush_send(qp); /* accepted, and flushed at once */
	else
		sv_requester_post(qp);
	return err;
}

int sv_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	struct sv_qp *qp = to_sv_qp(ibqp);
	int err;

	sv_mutex_lock(&qp->lock);
	err = sv_direct_post(qp, wr) ? 0 : post_chain(qp, wr, bad_wr, true);
	sv_mutex_unlock(&qp->lock);
	/* the answers owed since this thread's last poll follow its request */
	sv_engine_posted(qp->ctx->eng);
	return err;
}

/*
 * ibv_bind_mw (type 1; libibverbs checked the type, the range and the PDs):
 * a BIND_MW work request with the window's next key, which the window
 * shows from now on (ibv_inc_rkey), as the hardware providers do.
 */
int sv_bind_mw(struct ibv_qp *ibqp, struct ibv_mw *mw, struct ibv_mw_bind *mb)
{
	struct ibv_send_wr wr = { .opcode = IBV_WR_BIND_MW }, *bad;
	struct sv_qp *qp;
	int err;

	if (!ibqp || !mw || !mb)
		return EINVAL;
	wr.wr_id = mb->wr_id;
	wr.send_flags = mb->send_flags;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info = mb->bind_info;
	qp = to_sv_qp(ibqp);
	sv_mutex_lock(&qp->lock);
	err = post_chain(qp, &wr, &bad, false);
	sv_mutex_unlock(&qp->lock);
	return err;
}

int sv_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	struct sv_qp *qp = to_sv_qp(ibqp);
	int err = 0;

	sv_mutex_lock(&qp->lock);
	/* XRC QPs have no receive queue: their receives are an XRC SRQ's */
	if (qp->srq || qp->ti->xrc || qp->state == IBV_QPS_RESET) {
		err = EINVAL;
		*bad_wr = wr;
		goto out;
	}
	for (; wr; wr = wr->next) {
		err = (wr->num_sge && !wr->sg_list) ? EINVAL : sv_rq_post(&qp->rq, wr);
		if (err == ENOMEM && qp->rq.xl) {
			/* receives peers of this host completed free their
			 * places, as a NIC's do, polled or not */
			sv_xrq_drain(qp);
			err = sv_rq_post(&qp->rq, wr);
		}
		if (err) {
			*bad_wr = wr;
			break;
		}
	}
	sv_xrq_consider(qp); /* a peer of this host asked to place into it */
	if (qp->state == IBV_QPS_ERR)
		sv_qp_flush_recv(qp);
out:
	sv_mutex_unlock(&qp->lock);
	return err;
}

struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	return &to_sv_qp(qp)->ex;
}

/* The LID is not looked at: a RoCE port has none (engine/mcast.c). */
int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)lid;
	if (!qp || !gid)
		return EINVAL;
	return sv_mcg_attach(to_sv_qp(qp), gid);
}

int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)lid;
	if (!qp || !gid)
		return EINVAL;
	return sv_mcg_detach(to_sv_qp(qp), gid);
}
