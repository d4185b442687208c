/*
 * QPs, SRQs and endpoints made through the CM, and the QP attributes a
 * connection implies (rdma_init_qp_attr).
 *
 * Like rdma-core's librdmacm: rdma_create_qp fills in what the caller left
 * out (the device's default PD, completion queues with their own completion
 * channels whose cq_context is the id, which the rdma_verbs.h helpers rely
 * on) and moves the QP to INIT, or for UD straight to RTS.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rdmacm/cm.h"

/* 14: 4.096 us * 2^14 = 67 ms per try, what the kernel CM derives for RoCE */
#define CM_DEFAULT_ACK_TIMEOUT 14
/* 12: 0.64 ms, so that an early SEND costs little (the kernel CM leaves 0: 655 ms) */
#define CM_MIN_RNR_TIMER 12

static bool remote_known(const struct cm_id *id)
{
	switch (id->state) {
	case CM_REQ_RCVD:
	case CM_REP_SENT:
	case CM_REP_RCVD:
	case CM_REQ_SENT: /* only once learn_peer ran: on_rep calls us after it */
	case CM_ESTABLISHED:
		return id->remote_gid.global.interface_id || id->remote_gid.global.subnet_prefix;
	default:
		return false;
	}
}

static int init_qp_attr(struct cm_id *id, struct ibv_qp_attr *a, int *mask)
{
	enum ibv_qp_state want = a->qp_state;
	bool ud = id->pub.qp_type == IBV_QPT_UD || cm_ps_is_ud(id->pub.ps);
	bool uc = id->pub.qp_type == IBV_QPT_UC;

	if (!id->dev)
		return EINVAL;
	memset(a, 0, sizeof(*a));
	a->qp_state = want;
	switch (want) {
	case IBV_QPS_INIT:
		a->pkey_index = 0;
		a->port_num = 1;
		*mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
		if (ud) {
			a->qkey = RDMA_UDP_QKEY;
			*mask |= IBV_QP_QKEY;
		} else {
			/* rights follow the connection: none until it is negotiated */
			if (remote_known(id))
				a->qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
					(id->resp_res && !uc ? IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC : 0);
			*mask |= IBV_QP_ACCESS_FLAGS;
		}
		return 0;
	case IBV_QPS_RTR:
		*mask = IBV_QP_STATE;
		if (ud)
			return 0;
		if (!remote_known(id))
			return EINVAL;
		a->ah_attr.is_global = 1;
		a->ah_attr.port_num = 1;
		a->ah_attr.grh.dgid = id->remote_gid;
		a->ah_attr.grh.sgid_index = cm_id_gid_index(id);
		a->ah_attr.grh.hop_limit = 64;
		a->ah_attr.grh.traffic_class = id->tos;
		a->path_mtu = id->mtu;
		a->dest_qp_num = id->remote_qpn;
		a->rq_psn = id->remote_psn;
		a->qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
			(id->resp_res && !uc ? IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC : 0);
		*mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			 IBV_QP_ACCESS_FLAGS;
		if (!uc) {
			a->max_dest_rd_atomic = id->resp_res;
			a->min_rnr_timer = CM_MIN_RNR_TIMER;
			*mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		}
		return 0;
	case IBV_QPS_RTS:
		a->sq_psn = id->local_psn; /* random (id.c), UD's too */
		*mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
		if (ud || uc)
			return 0;
		if (!remote_known(id))
			return EINVAL;
		a->timeout = id->ack_timeout_set ? id->ack_timeout : CM_DEFAULT_ACK_TIMEOUT;
		a->retry_cnt = id->retry_count;
		a->rnr_retry = id->rnr_retry;
		a->max_rd_atomic = id->init_depth;
		*mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
		return 0;
	default:
		return EINVAL;
	}
}

int rdma_init_qp_attr(struct rdma_cm_id *pub, struct ibv_qp_attr *qp_attr, int *qp_attr_mask)
{
	if (!pub || !qp_attr || !qp_attr_mask)
		return cm_err(EINVAL);
	sv_mutex_lock(&cm_lock);
	int err = init_qp_attr(cm_id_of(pub), qp_attr, qp_attr_mask);

	sv_mutex_unlock(&cm_lock);
	return err ? cm_err(err) : 0;
}

static int modify(struct cm_id *id, enum ibv_qp_state to)
{
	struct ibv_qp_attr a = { .qp_state = to };
	int mask, err = init_qp_attr(id, &a, &mask);

	return err ? err : ibv_modify_qp(id->pub.qp, &a, mask);
}

int cm_qp_to_rtr_rts(struct cm_id *id, bool rts)
{
	struct ibv_qp_attr cur;
	struct ibv_qp_init_attr init;
	int err;

	if (ibv_query_qp(id->pub.qp, &cur, IBV_QP_STATE, &init))
		return errno ? errno : EINVAL;
	if (cur.qp_state == IBV_QPS_RESET) {
		err = modify(id, IBV_QPS_INIT);
		if (err)
			return err;
		cur.qp_state = IBV_QPS_INIT;
	}
	if (cur.qp_state == IBV_QPS_INIT) {
		err = modify(id, IBV_QPS_RTR);
		if (err)
			return err;
		cur.qp_state = IBV_QPS_RTR;
	}
	if (rts && cur.qp_state == IBV_QPS_RTR)
		return modify(id, IBV_QPS_RTS);
	return 0;
}

void cm_qp_to_err(struct cm_id *id)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	if (id->pub.qp && id->pub.qp_type != IBV_QPT_UD)
		ibv_modify_qp(id->pub.qp, &a, IBV_QP_STATE);
}

/* ---- QP creation ---- */

static struct ibv_cq *make_cq(struct cm_id *id, struct ibv_comp_channel **chp, uint32_t depth)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(id->pub.verbs);
	struct ibv_cq *cq;

	if (!ch)
		return NULL;
	cq = ibv_create_cq(id->pub.verbs, (int)SV_MAX(depth, 1u), id, ch, 0);
	if (!cq) {
		ibv_destroy_comp_channel(ch);
		return NULL;
	}
	*chp = ch;
	return cq;
}

static void drop_cq(struct ibv_cq **cq, struct ibv_comp_channel **ch)
{
	if (*cq)
		ibv_destroy_cq(*cq);
	if (*ch)
		ibv_destroy_comp_channel(*ch);
	*cq = NULL;
	*ch = NULL;
}

void cm_release_qp_resources(struct cm_id *id)
{
	if (id->own_send_cq)
		drop_cq(&id->pub.send_cq, &id->pub.send_cq_channel);
	if (id->own_recv_cq)
		drop_cq(&id->pub.recv_cq, &id->pub.recv_cq_channel);
	id->own_send_cq = id->own_recv_cq = false;
}

int rdma_create_qp_ex(struct rdma_cm_id *pub, struct ibv_qp_init_attr_ex *attr)
{
	if (!pub || !attr || !pub->verbs)
		return cm_err(EINVAL);
	struct cm_id *id = cm_id_of(pub);
	struct ibv_pd *pd = (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : NULL;
	struct ibv_qp *qp;
	int err;

	/* XRC, as rdma-core's CM does it: a receive QP has the device's XRC
	 * domain and no CQs (its messages complete on its SRQ's CQ: an XRC SRQ
	 * made with rdma_create_srq), a send QP no receive CQ */
	bool xrecv = attr->qp_type == IBV_QPT_XRC_RECV, xsend = attr->qp_type == IBV_QPT_XRC_SEND;
	struct ibv_xrcd *xrcd = NULL;

	if (pub->qp)
		return cm_err(EINVAL);
	if (xrecv) {
		sv_mutex_lock(&cm_lock);
		xrcd = cm_device_xrcd(id->dev);
		sv_mutex_unlock(&cm_lock);
		if (!xrcd)
			return cm_err(errno ? errno : ENOMEM);
	}
	if (!pd)
		pd = pub->pd;
	if (!pd) {
		sv_mutex_lock(&cm_lock);
		pd = cm_device_pd(id->dev);
		sv_mutex_unlock(&cm_lock);
		if (!pd)
			return cm_err(ENOMEM);
	}
	if (pd->context != pub->verbs)
		return cm_err(EINVAL);
	if (!xrecv && !attr->send_cq && !pub->send_cq) {
		pub->send_cq = make_cq(id, &pub->send_cq_channel, attr->cap.max_send_wr);
		if (!pub->send_cq)
			goto nomem;
		id->own_send_cq = true;
	}
	if (!xrecv && !xsend && !attr->recv_cq && !pub->recv_cq) {
		pub->recv_cq = make_cq(id, &pub->recv_cq_channel, attr->cap.max_recv_wr);
		if (!pub->recv_cq)
			goto nomem;
		id->own_recv_cq = true;
	}
	if (!attr->send_cq)
		attr->send_cq = pub->send_cq;
	if (!attr->recv_cq)
		attr->recv_cq = pub->recv_cq;
	if (!attr->srq && pub->srq && !xrecv && !xsend)
		attr->srq = pub->srq;
	attr->pd = pd;
	attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
	if (xrecv) {
		attr->xrcd = xrcd;
		attr->comp_mask |= IBV_QP_INIT_ATTR_XRCD;
	}

	qp = ibv_create_qp_ex(pub->verbs, attr);
	if (!qp) {
		err = errno ? errno : ENOMEM;
		cm_release_qp_resources(id);
		return cm_err(err);
	}
	sv_mutex_lock(&cm_lock);
	pub->qp = qp;
	pub->qp_type = attr->qp_type;
	pub->pd = pd;
	err = modify(id, IBV_QPS_INIT);
	if (!err && attr->qp_type == IBV_QPT_UD) {
		err = modify(id, IBV_QPS_RTR);
		if (!err)
			err = modify(id, IBV_QPS_RTS);
	}
	if (err)
		pub->qp = NULL;
	sv_mutex_unlock(&cm_lock);
	if (err) {
		ibv_destroy_qp(qp);
		cm_release_qp_resources(id);
		return cm_err(err);
	}
	return 0;
nomem:
	cm_release_qp_resources(id);
	return cm_err(ENOMEM);
}

int rdma_create_qp(struct rdma_cm_id *pub, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	if (!pub || !qp_init_attr)
		return cm_err(EINVAL);
	struct ibv_qp_init_attr_ex ex = {
		.qp_context = qp_init_attr->qp_context,
		.send_cq = qp_init_attr->send_cq,
		.recv_cq = qp_init_attr->recv_cq,
		.srq = qp_init_attr->srq,
		.cap = qp_init_attr->cap,
		.qp_type = qp_init_attr->qp_type,
		.sq_sig_all = qp_init_attr->sq_sig_all,
		.comp_mask = pd ? IBV_QP_INIT_ATTR_PD : 0,
		.pd = pd,
	};

	if (rdma_create_qp_ex(pub, &ex))
		return -1;
	/* what was chosen for the caller, as rdma-core reports it */
	qp_init_attr->send_cq = ex.send_cq;
	qp_init_attr->recv_cq = ex.recv_cq;
	qp_init_attr->srq = ex.srq;
	qp_init_attr->cap = ex.cap;
	return 0;
}

void rdma_destroy_qp(struct rdma_cm_id *pub)
{
	if (!pub)
		return;
	/* the CM thread moves id->qp (to ERR on a reject or disconnect): take it away under the lock */
	sv_mutex_lock(&cm_lock);
	struct ibv_qp *qp = pub->qp;

	/* a QP still attached to a group cannot be destroyed (EBUSY) */
	cm_mcast_detach_all(cm_id_of(pub), qp);
	pub->qp = NULL;
	sv_mutex_unlock(&cm_lock);
	if (!qp)
		return;
	ibv_destroy_qp(qp);
	cm_release_qp_resources(cm_id_of(pub));
}

/* ---- SRQs ---- */

/*
 * An XRC SRQ for an id, as rdma-core's CM makes it: the device's XRC domain
 * and, unless given, a CQ of the id's own, which becomes its receive CQ
 * (rdma_get_recv_comp polls it).
 */
static int create_xrc_srq(struct rdma_cm_id *pub, struct ibv_pd *pd,
			  struct ibv_srq_init_attr_ex *attr)
{
	struct cm_id *id = cm_id_of(pub);
	struct ibv_srq *srq;
	int err;

	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !attr->xrcd) {
		sv_mutex_lock(&cm_lock);
		attr->xrcd = cm_device_xrcd(id->dev);
		sv_mutex_unlock(&cm_lock);
		if (!attr->xrcd)
			return cm_err(errno ? errno : ENOMEM);
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_XRCD;
	}
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq) {
		if (!pub->recv_cq) {
			pub->recv_cq = make_cq(id, &pub->recv_cq_channel, attr->attr.max_wr);
			if (!pub->recv_cq)
				return cm_err(ENOMEM);
			id->own_recv_cq = true;
		}
		attr->cq = pub->recv_cq;
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_CQ;
	}
	attr->pd = pd;
	attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	srq = ibv_create_srq_ex(pub->verbs, attr);
	if (!srq) {
		err = errno ? errno : ENOMEM;
		return cm_err(err);
	}
	pub->srq = srq;
	pub->pd = pd;
	return 0;
}

int rdma_create_srq_ex(struct rdma_cm_id *pub, struct ibv_srq_init_attr_ex *attr)
{
	if (!pub || !attr || !pub->verbs)
		return cm_err(EINVAL);
	bool xrc = (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type == IBV_SRQT_XRC;

	if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type != IBV_SRQT_BASIC && !xrc)
		return cm_err(EOPNOTSUPP); /* tag matching SRQs are not implemented */
	struct ibv_pd *pd = (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) ? attr->pd : NULL;
	struct ibv_srq_init_attr basic = { .srq_context = attr->srq_context, .attr = attr->attr };
	struct ibv_srq *srq;

	if (!pd)
		pd = pub->pd;
	if (!pd) {
		sv_mutex_lock(&cm_lock);
		pd = cm_device_pd(cm_id_of(pub)->dev);
		sv_mutex_unlock(&cm_lock);
	}
	if (!pd)
		return cm_err(ENOMEM);
	if (xrc)
		return create_xrc_srq(pub, pd, attr);
	srq = ibv_create_srq(pd, &basic);
	if (!srq)
		return -1;
	attr->attr = basic.attr;
	pub->srq = srq;
	pub->pd = pd;
	return 0;
}

int rdma_create_srq(struct rdma_cm_id *pub, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	if (!attr)
		return cm_err(EINVAL);
	struct ibv_srq_init_attr_ex ex = {
		.srq_context = attr->srq_context,
		.attr = attr->attr,
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | (pd ? IBV_SRQ_INIT_ATTR_PD : 0),
		/* an XRC receive id's SRQ is an XRC SRQ, as in rdma-core */
		.srq_type = pub->qp_type == IBV_QPT_XRC_RECV ? IBV_SRQT_XRC : IBV_SRQT_BASIC,
		.pd = pd,
	};

	if (rdma_create_srq_ex(pub, &ex))
		return -1;
	attr->attr = ex.attr;
	return 0;
}

void rdma_destroy_srq(struct rdma_cm_id *pub)
{
	if (!pub || !pub->srq)
		return;
	ibv_destroy_srq(pub->srq);
	pub->srq = NULL;
}

/* ---- endpoints ---- */

int rdma_create_ep(struct rdma_cm_id **out, struct rdma_addrinfo *res, struct ibv_pd *pd,
		   struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *pub;

	if (!out || !res)
		return cm_err(EINVAL);
	if (rdma_create_id(NULL, &pub, NULL, (enum rdma_port_space)res->ai_port_space))
		return -1;
	struct cm_id *id = cm_id_of(pub);

	pub->qp_type = (enum ibv_qp_type)res->ai_qp_type;
	if (qp_init_attr)
		qp_init_attr->qp_type = pub->qp_type; /* the address info decides, as in rdma-core */
	if (res->ai_flags & RAI_PASSIVE) {
		if (rdma_bind_addr(pub, res->ai_src_addr))
			goto fail;
		if (pd)
			pub->pd = pd; /* as rdma-core: the listener's id->pd is the one given */
		if (qp_init_attr) {
			/* rdma_get_request makes each connection's QP from these */
			id->ep_qp_attr = malloc(sizeof(*qp_init_attr));
			if (!id->ep_qp_attr) {
				errno = ENOMEM;
				goto fail;
			}
			*id->ep_qp_attr = *qp_init_attr;
			id->ep_pd = pd;
		}
		*out = pub;
		return 0;
	}
	if (rdma_resolve_addr(pub, res->ai_src_addr, res->ai_dst_addr, 2000) ||
	    rdma_resolve_route(pub, 2000))
		goto fail;
	if (qp_init_attr && rdma_create_qp(pub, pd, qp_init_attr))
		goto fail;
	*out = pub;
	return 0;
fail:;
	int e = errno;

	rdma_destroy_id(pub);
	return cm_err(e);
}

void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (!id)
		return;
	rdma_destroy_qp(id);
	rdma_destroy_srq(id);
	rdma_destroy_id(id);
}
