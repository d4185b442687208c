/*
 * Connection setup and teardown: rdma_listen, rdma_connect, rdma_accept,
 * rdma_reject, rdma_establish, rdma_disconnect, rdma_notify, rdma_get_request.
 *
 * As with rdma-core's librdmacm, the library moves the QP of an id through
 * INIT→RTR→RTS itself (on accept for the passive side, on the REP for the
 * active side) and to ERR on disconnect; an id without a QP leaves that to
 * the user, who gets CONNECT_RESPONSE and calls rdma_establish.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "rdmacm/cm.h"

int rdma_listen(struct rdma_cm_id *pub, int backlog)
{
	if (!pub)
		return cm_err(EINVAL);
	struct cm_id *id = cm_id_of(pub);
	int err = 0;

	/* the secret's key, made here (the KDF) rather than in the CM thread
	 * at the first peer's HELLO; a failure shows there */
	(void)sv_auth_init();
	sv_mutex_lock(&cm_lock);
	if (id->state == CM_IDLE) {
		/* listening unbound: the IPv4 wildcard (as the kernel's CM), a
		 * port of the system's choice */
		struct sockaddr_in any = { .sin_family = AF_INET };

		err = cm_bind_socket(id, (struct sockaddr *)&any);
		if (!err)
			id->state = CM_BOUND;
	}
	if (!err && id->state != CM_BOUND)
		err = EINVAL;
	if (!err && listen(id->sock, backlog > 0 ? backlog : 128))
		err = errno;
	if (!err) {
		id->backlog = backlog;
		id->state = CM_LISTEN;
		cm_sock_watch(id);
	}
	sv_mutex_unlock(&cm_lock);
	return err ? cm_err(err) : 0;
}

/* RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH ask for "as many as allowed". */
static int rd_atomic(uint8_t asked, uint8_t max, uint8_t *out)
{
	if (asked == 0xff) {
		*out = max;
		return 0;
	}
	if (asked > max)
		return EINVAL;
	*out = asked;
	return 0;
}

/* This side's RDMA read resources, from the parameters and the device's limits. */
static int take_rd_atomic(struct cm_id *id, const struct rdma_conn_param *p)
{
	int err = rd_atomic(p->responder_resources, id->dev->max_dest_rd_atomic, &id->resp_res);

	return err ? err : rd_atomic(p->initiator_depth, id->dev->max_rd_atomic, &id->init_depth);
}

static void take_pdata(struct cm_id *id, const struct rdma_conn_param *p)
{
	id->pending = *p;
	memset(id->pending_pdata, 0, sizeof(id->pending_pdata));
	if (p->private_data && p->private_data_len)
		memcpy(id->pending_pdata, p->private_data, p->private_data_len);
	id->pending.private_data = id->pending_pdata;
}

static int connect_locked(struct cm_id *id, const struct rdma_conn_param *p)
{
	bool ud = cm_ps_is_ud(id->pub.ps);
	int err;

	if (id->state != CM_ROUTE_RESOLVED || !id->dev || id->sock < 0)
		return EINVAL;
	if (p->private_data_len > (ud ? CM_SIDR_REQ_PDATA : CM_REQ_PDATA) ||
	    (p->private_data_len && !p->private_data))
		return EINVAL;
	if (!ud) {
		err = take_rd_atomic(id, p);
		if (err)
			return err;
		id->retry_count = (uint8_t)SV_MIN(p->retry_count, 7);
	}
	take_pdata(id, p);

	id->refused_until_ns = sv_now_ns() + cm_refused_grace_ns();
	cm_set_deadline(id);
	cm_start_connect(id);
	return 0;
}

int rdma_connect(struct rdma_cm_id *pub, struct rdma_conn_param *conn_param)
{
	if (!pub)
		return cm_err(EINVAL);
	struct cm_id *id = cm_id_of(pub);
	struct rdma_conn_param dflt = {
		.responder_resources = RDMA_MAX_RESP_RES,
		.initiator_depth = RDMA_MAX_INIT_DEPTH,
		.retry_count = 7,
		.rnr_retry_count = 7,
	};

	sv_mutex_lock(&cm_lock);
	int err = connect_locked(id, conn_param ? conn_param : &dflt);

	sv_mutex_unlock(&cm_lock);
	if (err)
		return cm_err(err);
	if (!id->sync)
		return 0;
	return cm_wait_sync(id, id->pub.qp || cm_ps_is_ud(pub->ps) ? RDMA_CM_EVENT_ESTABLISHED
								   : RDMA_CM_EVENT_CONNECT_RESPONSE);
}

static int accept_ud(struct cm_id *id, const struct rdma_conn_param *p)
{
	uint32_t qpn = id->pub.qp ? id->pub.qp->qp_num : p->qp_num;
	uint32_t qkey = RDMA_UDP_QKEY;

	if (p->private_data_len > CM_SIDR_REP_PDATA)
		return EINVAL;
	if (id->pub.qp) {
		struct ibv_qp_attr a;
		struct ibv_qp_init_attr ia;

		if (ibv_query_qp(id->pub.qp, &a, IBV_QP_QKEY, &ia) == 0)
			qkey = a.qkey;
	}
	cm_send_sidr_rep(id, 0, qpn, qkey, p->private_data, p->private_data_len);
	id->state = CM_UD_DONE;
	cm_sock_close(id);
	return 0;
}

static int accept_locked(struct cm_id *id, const struct rdma_conn_param *p)
{
	int err;

	if (id->state != CM_REQ_RCVD)
		return EINVAL;
	if (cm_ps_is_ud(id->pub.ps))
		return accept_ud(id, p);
	if (p->private_data_len > CM_REP_PDATA || (p->private_data_len && !p->private_data))
		return EINVAL;
	err = take_rd_atomic(id, p);
	if (err)
		return err;
	if (id->pub.qp) {
		err = cm_qp_to_rtr_rts(id, true);
		if (err)
			return err;
	}
	if (id->sock < 0 || cm_send_rep(id, p)) {
		/* the active side went away after its REQ */
		id->state = CM_FAILED;
		cm_qp_to_err(id);
		cm_post_simple(id, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET);
		return 0;
	}
	id->state = CM_REP_SENT;
	cm_set_deadline(id);
	return 0;
}

int rdma_accept(struct rdma_cm_id *pub, struct rdma_conn_param *conn_param)
{
	if (!pub)
		return cm_err(EINVAL);
	struct cm_id *id = cm_id_of(pub);
	struct rdma_conn_param dflt = {
		.responder_resources = RDMA_MAX_RESP_RES,
		.initiator_depth = RDMA_MAX_INIT_DEPTH,
		.rnr_retry_count = 7,
	};

	sv_mutex_lock(&cm_lock);
	if (!conn_param && id->pub.event) {
		/* no parameters: take what the request offered, within the device's limits */
		dflt.responder_resources = id->pub.event->param.conn.responder_resources;
		dflt.initiator_depth = id->pub.event->param.conn.initiator_depth;
	}
	if (!conn_param && id->dev) {
		dflt.responder_resources = SV_MIN(dflt.responder_resources, id->dev->max_dest_rd_atomic);
		dflt.initiator_depth = SV_MIN(dflt.initiator_depth, id->dev->max_rd_atomic);
	}
	int err = accept_locked(id, conn_param ? conn_param : &dflt);
	bool wait = !err && id->sync && id->state == CM_REP_SENT;

	sv_mutex_unlock(&cm_lock);
	if (err)
		return cm_err(err);
	return wait ? cm_wait_sync(id, RDMA_CM_EVENT_ESTABLISHED) : 0;
}

static int reject(struct rdma_cm_id *pub, const void *pdata, uint8_t len, uint32_t reason)
{
	if (!pub)
		return cm_err(EINVAL);
	struct cm_id *id = cm_id_of(pub);
	bool ud = cm_ps_is_ud(pub->ps);
	int err = 0;

	sv_mutex_lock(&cm_lock);
	if (id->state != CM_REQ_RCVD || len > (ud ? CM_SIDR_REP_PDATA : CM_REJ_PDATA) ||
	    (len && !pdata)) {
		err = EINVAL;
	} else {
		if (ud)
			cm_send_sidr_rep(id, CM_SIDR_REJECT, 0, 0, pdata, len);
		else
			cm_send_simple(id, MSG_REJ, reason, pdata, len);
		id->state = CM_FAILED;
		cm_sock_close(id);
	}
	sv_mutex_unlock(&cm_lock);
	return err ? cm_err(err) : 0;
}

int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	return reject(id, private_data, private_data_len, CM_REJ_CONSUMER_DEFINED);
}

int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	return reject(id, private_data, private_data_len, CM_REJ_VENDOR_OPTION_NOT_SUPPORTED);
}

int rdma_establish(struct rdma_cm_id *pub)
{
	if (!pub)
		return cm_err(EINVAL);
	struct cm_id *id = cm_id_of(pub);
	int err = 0;

	sv_mutex_lock(&cm_lock);
	if (id->state != CM_REP_RCVD)
		err = EINVAL;
	else if (cm_send_simple(id, MSG_RTU, 0, NULL, 0))
		err = ECONNRESET;
	else
		id->state = CM_ESTABLISHED;
	sv_mutex_unlock(&cm_lock);
	return err ? cm_err(err) : 0;
}

int rdma_disconnect(struct rdma_cm_id *pub)
{
	if (!pub)
		return cm_err(EINVAL);
	struct cm_id *id = cm_id_of(pub);
	int err = 0;

	sv_mutex_lock(&cm_lock);
	switch (id->state) {
	case CM_ESTABLISHED:
	case CM_REP_SENT:
	case CM_REP_RCVD:
		cm_qp_to_err(id);
		if (cm_send_simple(id, MSG_DREQ, 0, NULL, 0) == 0) {
			id->state = CM_DREQ_SENT;
			cm_set_deadline(id);
		} else {
			/* the CM connection is gone already: nobody to wait for */
			id->state = CM_DREQ_SENT;
			id->deadline_ns = sv_now_ns();
			cm_timer_kick();
		}
		break;
	case CM_DREQ_SENT:
	case CM_DISCONNECTED:
		cm_qp_to_err(id); /* the peer disconnected first: flush our side too */
		break;
	default:
		err = EINVAL;
	}
	sv_mutex_unlock(&cm_lock);
	return err ? cm_err(err) : 0;
}

int rdma_notify(struct rdma_cm_id *pub, enum ibv_event_type event)
{
	if (!pub)
		return cm_err(EINVAL);
	struct cm_id *id = cm_id_of(pub);
	int err = 0;

	sv_mutex_lock(&cm_lock);
	if (id->state == CM_REP_SENT && event == IBV_EVENT_COMM_EST) {
		/* data arrived before the RTU: the connection is up */
		id->state = CM_ESTABLISHED;
		id->deadline_ns = 0;
		cm_post_simple(id, RDMA_CM_EVENT_ESTABLISHED, 0);
	} else if (id->state != CM_ESTABLISHED && id->state != CM_REP_SENT) {
		err = EINVAL;
	}
	sv_mutex_unlock(&cm_lock);
	return err ? cm_err(err) : 0;
}

int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **out)
{
	if (!listen || !out)
		return cm_err(EINVAL);
	struct cm_id *ls = cm_id_of(listen);
	struct rdma_cm_event *ev;

	if (!ls->sync || ls->state != CM_LISTEN)
		return cm_err(EINVAL);
	for (;;) {
		if (rdma_get_cm_event(listen->channel, &ev))
			return -1;
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
			break;
		rdma_ack_cm_event(ev); /* nothing else is expected on a listener */
	}
	struct rdma_cm_id *nid = ev->id;

	nid->event = ev; /* acked by rdma_accept's wait or rdma_destroy_id, as in librdmacm */
	if (ls->ep_qp_attr) {
		struct ibv_qp_init_attr attr = *ls->ep_qp_attr;

		if (rdma_create_qp(nid, ls->ep_pd, &attr)) {
			int e = errno;

			rdma_reject(nid, NULL, 0);
			rdma_destroy_id(nid);
			return cm_err(e);
		}
	}
	*out = nid;
	return 0;
}
