/*
 * The CM protocol and the thread that runs it.
 *
 * The messages are those of the InfiniBand CM (REQ, REP, RTU, REJ, DREQ,
 * DREP, SIDR REQ/REP), each one fixed-size frame on the TCP connection from
 * the active id to the passive side's rdma_cm port.  What a REQ/REP carries
 * is what two QPs need to reach each other on softverbs: the GID of the
 * device endpoint, the QPN, the starting PSN, the path MTU, RDMA read
 * resources, retry counts and the user's private data.
 *
 * The thread watches listeners and CM connections with epoll and runs the
 * id state machine under cm_lock.  epoll data holds an id's serial number,
 * not its address, so an id destroyed meanwhile is simply not found.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rdmacm/cm.h"
#include "transport/auth.h"

#define CM_MAGIC 0x5356434du /* "SVCM" */
#define CM_VERSION 3 /* 2: the HELLO/AUTH handshake; 3: the PAKE, active end proves first */


/* One frame; multi-byte fields in network order. */
struct cm_wire {
	uint32_t magic;
	uint8_t version;
	uint8_t type;
	uint8_t pdata_len;
	uint8_t mtu;
	uint32_t qpn;
	uint32_t psn;
	uint32_t qkey;
	uint32_t reason;       /* REJ reason, SIDR REP status */
	uint8_t gid[16];
	uint8_t resp_res;
	uint8_t init_depth;
	uint8_t retry_count;
	uint8_t rnr_retry;
	uint8_t srq;
	uint8_t flow_control;
	uint8_t pad[2];
	uint32_t ece_vendor;
	uint32_t ece_options;
	uint8_t pdata[CM_MAX_PDATA];
};
_Static_assert(sizeof(struct cm_wire) == 280, "CM frame layout");

static int epfd = -1;
static int wakefd = -1;

static uint64_t cm_timeout_ns(void)
{
	return (uint64_t)sv_env_long("SOFTVERBS_CM_TIMEOUT_MS", 10000) * 1000000ull;
}

/* ---- sending ---- */

static void wire_init(struct cm_wire *m, enum cm_msg_type type)
{
	memset(m, 0, sizeof(*m));
	m->magic = htonl(CM_MAGIC);
	m->version = CM_VERSION;
	m->type = type;
}

static void wire_pdata(struct cm_wire *m, const void *pdata, uint8_t len)
{
	if (pdata && len) {
		memcpy(m->pdata, pdata, len);
		m->pdata_len = len;
	}
}

static int wire_send(struct cm_id *id, const struct cm_wire *m)
{
	if (id->sock < 0)
		return ENOTCONN;
	ssize_t n = send(id->sock, m, sizeof(*m), MSG_NOSIGNAL | MSG_DONTWAIT);

	if (n == (ssize_t)sizeof(*m))
		return 0;
	/* a 280-byte frame on an idle CM socket: a short write means the peer is gone */
	sv_dbg("cm: send %c failed: %s", m->type, n < 0 ? strerror(errno) : "short write");
	return n < 0 ? errno : EPIPE;
}

/*
 * The handshake of a CM connection, as on the data path's connections
 * (transport/auth.h): the active end sends a HELLO (a fresh nonce, the
 * session's identifier, and its share of the PAKE) as soon as the
 * connection is up; the passive end answers with its own HELLO (a nonce and
 * its share); the active end sends its AUTH (HMAC with the session key over
 * its role and both HELLOs), and the passive end, once that has passed, its
 * own.  No other message counts, and the active end sends its REQ (private
 * data included) only after the other's AUTH has passed.  So whoever
 * connects to an rdma_cm port without the secret gets a HELLO and nothing
 * keyed.
 */
static int send_hello(struct cm_id *id)
{
	uint8_t *h = id->hello_mine;
	struct cm_wire m;

	if (sv_auth_init())
		return EACCES;
	sv_auth_nonce(h);
	/* the session is named by the active end's nonce */
	if (sv_auth_share(&id->auth, h + SV_AUTH_NONCE, id->active ? h : id->hello_peer))
		return EACCES;
	/* the passive end has both HELLOs now: the session key, or no answer
	 * to a share that is no element */
	if (!id->active && sv_auth_session(&id->auth, id->hello_peer + SV_AUTH_NONCE, false, h,
					   id->hello_peer, CM_HELLO_LEN))
		return EPROTO;
	wire_init(&m, MSG_HELLO);
	wire_pdata(&m, h, CM_HELLO_LEN);
	return wire_send(id, &m);
}

static int send_auth(struct cm_id *id)
{
	struct sv_auth_frame a = { .magic = htonl(SV_AUTH_MAGIC) };
	struct cm_wire m;

	sv_auth_mac(a.mac, &id->auth, id->active, id->hello_mine, id->hello_peer, CM_HELLO_LEN);
	wire_init(&m, MSG_AUTH);
	wire_pdata(&m, &a, sizeof(a));
	return wire_send(id, &m);
}

static void wire_conn_param(struct cm_wire *m, struct cm_id *id, uint32_t qpn, bool srq,
			    const struct rdma_conn_param *p)
{
	m->qpn = htonl(qpn);
	m->psn = htonl(id->local_psn);
	memcpy(m->gid, cm_id_gid(id)->raw, 16);
	m->mtu = (uint8_t)id->mtu;
	m->resp_res = id->resp_res;
	m->init_depth = id->init_depth;
	m->retry_count = id->retry_count;
	m->rnr_retry = (uint8_t)SV_MIN(p->rnr_retry_count, 7);
	m->srq = srq;
	m->flow_control = p->flow_control;
	m->ece_vendor = htonl(id->local_ece_vendor);
	m->ece_options = htonl(id->local_ece_options);
}

static uint32_t id_qpn(struct cm_id *id, const struct rdma_conn_param *p, bool *srq)
{
	if (id->pub.qp) {
		*srq = id->pub.qp->srq != NULL;
		return id->pub.qp->qp_num;
	}
	*srq = p->srq;
	return p->qp_num & 0xffffff;
}

int cm_send_req(struct cm_id *id, const struct rdma_conn_param *p)
{
	struct cm_wire m;
	bool srq;
	uint32_t qpn = id_qpn(id, p, &srq);

	wire_init(&m, MSG_REQ);
	wire_conn_param(&m, id, qpn, srq, p);
	wire_pdata(&m, p->private_data, p->private_data_len);
	return wire_send(id, &m);
}

int cm_send_rep(struct cm_id *id, const struct rdma_conn_param *p)
{
	struct cm_wire m;
	bool srq;
	uint32_t qpn = id_qpn(id, p, &srq);

	wire_init(&m, MSG_REP);
	wire_conn_param(&m, id, qpn, srq, p);
	wire_pdata(&m, p->private_data, p->private_data_len);
	return wire_send(id, &m);
}

int cm_send_sidr_req(struct cm_id *id, const struct rdma_conn_param *p)
{
	struct cm_wire m;
	bool srq;

	wire_init(&m, MSG_SIDR_REQ);
	m.qpn = htonl(id_qpn(id, p, &srq));
	memcpy(m.gid, cm_id_gid(id)->raw, 16);
	wire_pdata(&m, p->private_data, p->private_data_len);
	return wire_send(id, &m);
}

int cm_send_sidr_rep(struct cm_id *id, uint32_t status, uint32_t qpn, uint32_t qkey,
		     const void *pdata, uint8_t len)
{
	struct cm_wire m;

	wire_init(&m, MSG_SIDR_REP);
	m.reason = htonl(status);
	m.qpn = htonl(qpn);
	m.qkey = htonl(qkey);
	if (id->dev)
		memcpy(m.gid, cm_id_gid(id)->raw, 16);
	wire_pdata(&m, pdata, len);
	return wire_send(id, &m);
}

int cm_send_simple(struct cm_id *id, enum cm_msg_type type, uint32_t reason, const void *pdata, uint8_t len)
{
	struct cm_wire m;

	wire_init(&m, type);
	m.reason = htonl(reason);
	wire_pdata(&m, pdata, len);
	return wire_send(id, &m);
}

/* ---- the socket set ---- */

void cm_sock_watch(struct cm_id *id)
{
	struct epoll_event ev = {
		.events = EPOLLIN | (id->want_write ? EPOLLOUT : 0),
		.data.u64 = id->serial,
	};

	if (id->sock < 0)
		return;
	if (epoll_ctl(epfd, id->sock_polled ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, id->sock, &ev) == 0)
		id->sock_polled = true;
	else
		sv_err("cm: epoll_ctl: %s", strerror(errno));
}

void cm_sock_close(struct cm_id *id)
{
	if (id->sock < 0)
		return;
	if (id->sock_polled)
		epoll_ctl(epfd, EPOLL_CTL_DEL, id->sock, NULL);
	close(id->sock);
	id->sock = -1;
	id->sock_polled = false;
	id->want_write = false;
	id->rx_len = 0;
	id->deadline_ns = 0;
	id->retry_ns = 0;
}

void cm_timer_kick(void)
{
	uint64_t one = 1;

	if (write(wakefd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		sv_err("cm: wake: %s", strerror(errno));
}

void cm_set_deadline(struct cm_id *id)
{
	id->deadline_ns = sv_now_ns() + cm_timeout_ns();
	cm_timer_kick();
}

/* ---- events with parameters ---- */

static struct cm_event *conn_event(struct cm_id *id, enum rdma_cm_event_type type, int status,
				   const struct cm_wire *m, uint8_t pdata_size)
{
	struct cm_event *ev = cm_event_new(id, type, status);

	if (!ev)
		return NULL;
	if (m) {
		struct rdma_conn_param *c = &ev->pub.param.conn;

		/* as the kernel CM reports them: from the receiver's point of view */
		c->responder_resources = m->init_depth;
		c->initiator_depth = m->resp_res;
		c->flow_control = m->flow_control;
		c->retry_count = m->retry_count;
		c->rnr_retry_count = m->rnr_retry;
		c->srq = m->srq;
		c->qp_num = ntohl(m->qpn);
		if (pdata_size) {
			/* the whole private-data field, zero-padded, as rdma_cm gives it */
			memcpy(ev->pdata, m->pdata, pdata_size);
			c->private_data = ev->pdata;
			c->private_data_len = pdata_size;
		}
	}
	return ev;
}

static void post(struct cm_event *ev)
{
	if (ev)
		cm_event_post(ev);
	else
		sv_err("cm: out of memory: an event is lost");
}

static void disconnected(struct cm_id *id)
{
	id->state = CM_DISCONNECTED;
	cm_sock_close(id);
	cm_post_simple(id, RDMA_CM_EVENT_DISCONNECTED, 0);
	if (id->pub.qp)
		cm_post_simple(id, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0); /* no timewait to sit out here */
}

static void failed(struct cm_id *id, enum rdma_cm_event_type type, int status)
{
	id->state = CM_FAILED;
	cm_sock_close(id);
	cm_post_simple(id, type, status);
}

/* The CM connection ended (EOF, error, timeout) with the id in `state`. */
static void peer_lost(struct cm_id *id, int err)
{
	switch (id->state) {
	case CM_PENDING:
		cm_id_free(id);
		return;
	case CM_CONNECTING:
	case CM_REQ_SENT:
		failed(id, RDMA_CM_EVENT_UNREACHABLE, -err);
		return;
	case CM_REP_SENT:
	case CM_REP_RCVD:
		failed(id, RDMA_CM_EVENT_CONNECT_ERROR, -err);
		return;
	case CM_ESTABLISHED:
	case CM_DREQ_SENT:
		disconnected(id);
		return;
	default:
		/* REQ_RCVD: rdma_accept will find the socket gone */
		cm_sock_close(id);
		return;
	}
}

/* ---- receiving ---- */

static void learn_peer(struct cm_id *id, const struct cm_wire *m)
{
	id->remote_qpn = ntohl(m->qpn) & 0xffffff;
	id->remote_psn = ntohl(m->psn) & SV_PSN_MASK;
	id->remote_qkey = ntohl(m->qkey);
	memcpy(id->remote_gid.raw, m->gid, 16);
	id->remote_srq = m->srq;
	id->remote_ece_vendor = ntohl(m->ece_vendor);
	id->remote_ece_options = ntohl(m->ece_options);
	if (m->mtu >= IBV_MTU_256 && m->mtu <= IBV_MTU_4096 && (!id->mtu || m->mtu < id->mtu))
		id->mtu = m->mtu; /* the smaller of the two ports' MTUs */
	cm_fill_route(id);
}

static void on_req(struct cm_id *id, const struct cm_wire *m, bool ud)
{
	struct cm_id *ls = id->listener;
	struct cm_event *ev;

	if (!ls || ls->state != CM_LISTEN) {
		if (ud)
			cm_send_sidr_rep(id, CM_SIDR_REJECT, 0, 0, NULL, 0);
		else
			cm_send_simple(id, MSG_REJ, CM_REJ_INVALID_SERVICE_ID, NULL, 0);
		cm_id_free(id);
		return;
	}
	learn_peer(id, m);
	id->retry_count = m->retry_count;
	id->rnr_retry = m->rnr_retry;    /* the REQ's count is for this side's QP */
	/*
	 * Until rdma_accept says otherwise, what the request offered (its
	 * initiator depth is our responder resources, and the reverse), as the
	 * kernel's CM has them from the REQ: a program that moves its own QP
	 * with rdma_init_qp_attr before accepting gets them for RTR and RTS.
	 */
	id->resp_res = (uint8_t)SV_MIN(m->init_depth, id->dev->max_dest_rd_atomic);
	id->init_depth = (uint8_t)SV_MIN(m->resp_res, id->dev->max_rd_atomic);
	id->state = CM_REQ_RCVD;
	if (ud) {
		ev = cm_event_new(id, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
		if (ev) {
			struct rdma_ud_param *u = &ev->pub.param.ud;

			memcpy(ev->pdata, m->pdata, CM_SIDR_REQ_PDATA);
			u->private_data = ev->pdata;
			u->private_data_len = CM_SIDR_REQ_PDATA;
			u->qp_num = id->remote_qpn;
		}
	} else {
		ev = conn_event(id, RDMA_CM_EVENT_CONNECT_REQUEST, 0, m, CM_REQ_PDATA);
	}
	if (ev)
		ev->pub.listen_id = &ls->pub;
	post(ev);
	if (ls->sync) {
		/* a synchronous listener's children wait on channels of their own */
		id->own_channel = cm_channel_create();
		if (id->own_channel) {
			id->pub.channel = &id->own_channel->pub;
			id->sync = true;
		}
	}
}

static void on_rep(struct cm_id *id, const struct cm_wire *m)
{
	learn_peer(id, m);
	id->rnr_retry = m->rnr_retry;
	/* the passive side's answer bounds ours: its responder resources are
	 * our initiator depth, its initiator depth our responder resources */
	id->init_depth = SV_MIN(id->init_depth, m->resp_res);
	id->resp_res = SV_MIN(id->resp_res, m->init_depth);
	if (!id->pub.qp) {
		id->state = CM_REP_RCVD;
		id->deadline_ns = 0;
		post(conn_event(id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, m, CM_REP_PDATA));
		return;
	}
	int err = cm_qp_to_rtr_rts(id, true);

	if (err) {
		cm_send_simple(id, MSG_REJ, CM_REJ_CONSUMER_DEFINED, NULL, 0);
		cm_qp_to_err(id);
		failed(id, RDMA_CM_EVENT_CONNECT_ERROR, -err);
		return;
	}
	cm_send_simple(id, MSG_RTU, 0, NULL, 0);
	id->state = CM_ESTABLISHED;
	id->deadline_ns = 0;
	post(conn_event(id, RDMA_CM_EVENT_ESTABLISHED, 0, m, CM_REP_PDATA));
}

static void on_sidr_rep(struct cm_id *id, const struct cm_wire *m)
{
	uint32_t status = ntohl(m->reason);
	struct cm_event *ev;

	if (status) {
		failed(id, RDMA_CM_EVENT_UNREACHABLE, (int)status);
		return;
	}
	learn_peer(id, m);
	id->state = CM_UD_DONE;
	cm_sock_close(id);
	ev = cm_event_new(id, RDMA_CM_EVENT_ESTABLISHED, 0);
	if (ev) {
		struct rdma_ud_param *u = &ev->pub.param.ud;

		memcpy(ev->pdata, m->pdata, CM_SIDR_REP_PDATA);
		u->private_data = ev->pdata;
		u->private_data_len = CM_SIDR_REP_PDATA;
		u->qp_num = id->remote_qpn;
		u->qkey = id->remote_qkey;
		u->ah_attr.is_global = 1;
		u->ah_attr.port_num = 1;
		u->ah_attr.grh.dgid = id->remote_gid;
		u->ah_attr.grh.sgid_index = cm_id_gid_index(id);
		u->ah_attr.grh.hop_limit = 64;
		u->ah_attr.grh.traffic_class = id->tos;
	}
	post(ev);
}

static void on_rej(struct cm_id *id, const struct cm_wire *m)
{
	struct cm_event *ev = conn_event(id, RDMA_CM_EVENT_REJECTED, (int)ntohl(m->reason), NULL, 0);

	if (ev) {
		memcpy(ev->pdata, m->pdata, CM_REJ_PDATA);
		ev->pub.param.conn.private_data = ev->pdata;
		ev->pub.param.conn.private_data_len = CM_REJ_PDATA;
	}
	id->state = CM_FAILED;
	cm_qp_to_err(id);
	cm_sock_close(id);
	post(ev);
}

static void send_pending_req(struct cm_id *id)
{
	int err;

	id->req_due = false;
	err = cm_ps_is_ud(id->pub.ps) ? cm_send_sidr_req(id, &id->pending)
				      : cm_send_req(id, &id->pending);
	if (err)
		peer_lost(id, err);
}

/* A handshake message; false: the connection was dropped. */
static bool on_handshake(struct cm_id *id, const struct cm_wire *m)
{
	static atomic_bool told;
	char peer[CM_SA_STRLEN];

	if (m->type == MSG_HELLO && !id->hello_seen && m->pdata_len == CM_HELLO_LEN) {
		int err;

		memcpy(id->hello_peer, m->pdata, CM_HELLO_LEN);
		id->hello_seen = true;
		/* the passive end answers with its HELLO; the active end proves
		 * itself first */
		if (!id->active)
			err = send_hello(id);
		else if (sv_auth_session(&id->auth, id->hello_peer + SV_AUTH_NONCE, true,
					 id->hello_mine, id->hello_peer, CM_HELLO_LEN))
			err = EPROTO;
		else
			err = send_auth(id);
		if (err) {
			peer_lost(id, err == EACCES ? EACCES : ECONNRESET);
			return false;
		}
		return true;
	}
	if (m->type == MSG_AUTH && id->hello_seen &&
	    sv_auth_verify(m->pdata, m->pdata_len, &id->auth, id->active, id->hello_mine,
			   id->hello_peer, CM_HELLO_LEN)) {
		/* the passive end proves itself only to a proven peer */
		if (!id->active && send_auth(id)) {
			peer_lost(id, ECONNRESET);
			return false;
		}
		sv_auth_forget(&id->auth);
		id->authed = true;
		if (id->req_due)
			send_pending_req(id);
		return true;
	}
	if (m->type == MSG_AUTH && !atomic_exchange(&told, true))
		sv_warn("cm: refused a connection from %s: it does not hold this job's secret "
			"(%s). To accept peers from other hosts, give every process the same "
			"SOFTVERBS_SECRET; see docs/SECURITY.md",
			cm_sa_str(&id->pub.route.addr.dst_addr, peer, sizeof(peer)), sv_auth_source());
	else
		sv_warn_limited("cm: message %c before the peer proved the secret: connection "
				"dropped",
				m->type);
	peer_lost(id, ECONNREFUSED);
	return false;
}

/* One frame arrived on id's CM connection. */
static void on_message(struct cm_id *id, const struct cm_wire *m)
{
	enum cm_state s = id->state;

	if (!id->authed) {
		on_handshake(id, m);
		return;
	}
	switch (m->type) {
	case MSG_REQ:
	case MSG_SIDR_REQ:
		if (s == CM_PENDING)
			return on_req(id, m, m->type == MSG_SIDR_REQ);
		break;
	case MSG_REP:
		if (s == CM_REQ_SENT && !cm_ps_is_ud(id->pub.ps))
			return on_rep(id, m);
		break;
	case MSG_SIDR_REP:
		if (s == CM_REQ_SENT && cm_ps_is_ud(id->pub.ps))
			return on_sidr_rep(id, m);
		break;
	case MSG_RTU:
		if (s == CM_REP_SENT) {
			id->state = CM_ESTABLISHED;
			id->deadline_ns = 0;
			post(cm_event_new(id, RDMA_CM_EVENT_ESTABLISHED, 0));
			return;
		}
		break;
	case MSG_REJ:
		if (s == CM_REQ_SENT || s == CM_REP_SENT)
			return on_rej(id, m);
		break;
	case MSG_DREQ:
		if (s == CM_ESTABLISHED || s == CM_DREQ_SENT || s == CM_REP_SENT || s == CM_REP_RCVD) {
			cm_send_simple(id, MSG_DREP, 0, NULL, 0);
			return disconnected(id);
		}
		if (s == CM_REQ_SENT || s == CM_REQ_RCVD)
			return peer_lost(id, ECONNRESET);
		break;
	case MSG_DREP:
		if (s == CM_DREQ_SENT)
			return disconnected(id);
		return;
	}
	sv_warn_limited("cm: unexpected message %c in state %d: connection dropped", m->type, s);
	peer_lost(id, EPROTO);
}

static void on_readable(struct cm_id *id)
{
	const size_t fsz = sizeof(struct cm_wire);

	for (;;) {
		ssize_t n = recv(id->sock, id->rx + id->rx_len, sizeof(id->rx) - id->rx_len, MSG_DONTWAIT);

		if (n == 0)
			return peer_lost(id, ECONNRESET);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return;
			return peer_lost(id, errno);
		}
		id->rx_len += (size_t)n;
		while (id->rx_len >= fsz) {
			struct cm_wire m;
			uint64_t serial = id->serial;

			memcpy(&m, id->rx, fsz);
			memmove(id->rx, id->rx + fsz, id->rx_len - fsz);
			id->rx_len -= fsz;
			if (ntohl(m.magic) != CM_MAGIC || m.version != CM_VERSION ||
			    m.pdata_len > CM_MAX_PDATA) {
				sv_warn_limited("cm: malformed CM frame: connection dropped");
				return peer_lost(id, EPROTO);
			}
			on_message(id, &m);
			/* the handler may have closed the socket or freed the id */
			if (cm_id_by_serial(serial) != id || id->sock < 0)
				return;
		}
	}
}

static void on_connected(struct cm_id *id)
{
	int err = 0;
	socklen_t len = sizeof(err);

	id->want_write = false;
	if (getsockopt(id->sock, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
		cm_sock_watch(id);
		/* the REQ follows once the peer has proved the secret */
		err = send_hello(id);
		if (!err) {
			id->req_due = true;
			id->state = CM_REQ_SENT;
			return;
		}
	}
	cm_connect_failed(id, err ? err : ECONNRESET);
}

uint64_t cm_refused_grace_ns(void)
{
	return (uint64_t)sv_env_long("SOFTVERBS_CM_REFUSED_RETRY_MS", 1000) * 1000000ull;
}

void cm_start_connect(struct cm_id *id)
{
	int err;

	id->active = true;
	id->hello_seen = id->authed = false;
	if (connect(id->sock, &id->pub.route.addr.dst_addr,
		    cm_sa_len(&id->pub.route.addr.dst_addr)) == 0) {
		err = send_hello(id);
		if (err)
			return cm_connect_failed(id, err);
		id->req_due = true;
		id->state = CM_REQ_SENT;
		cm_sock_watch(id);
	} else if (errno == EINPROGRESS) {
		id->state = CM_CONNECTING;
		id->want_write = true;
		cm_sock_watch(id);
	} else {
		/* refused or unreachable: reported as an event, as a real CM would */
		cm_connect_failed(id, errno);
	}
}

void cm_connect_failed(struct cm_id *id, int err)
{
	/*
	 * Refused: nobody listens on that rdma_cm port yet.  Address and route
	 * resolution are instant here, so a client can be faster than a server
	 * that is about to listen (perftest -R does exactly that); try again
	 * for a moment before reporting the reject a real CM would send.
	 */
	if (err == ECONNREFUSED && sv_now_ns() < id->refused_until_ns) {
		struct sockaddr_storage src = id->pub.route.addr.src_storage;
		uint64_t deadline = id->deadline_ns;

		cm_sock_close(id);
		if (cm_bind_socket(id, (struct sockaddr *)&src) == 0) {
			id->state = CM_CONNECTING;
			id->deadline_ns = deadline;
			id->retry_ns = sv_now_ns() + 20000000ull;
			cm_timer_kick();
			return;
		}
	}
	/* nobody listens on that rdma_cm port: the peer's CM would reject the REQ */
	if (err == ECONNREFUSED && !cm_ps_is_ud(id->pub.ps))
		failed(id, RDMA_CM_EVENT_REJECTED, CM_REJ_INVALID_SERVICE_ID);
	else
		failed(id, RDMA_CM_EVENT_UNREACHABLE, -err);
}

static void on_listener(struct cm_id *ls)
{
	for (;;) {
		struct sockaddr_storage l, p, local, peer;
		socklen_t ll = sizeof(l), pl = sizeof(p);
		int fd = accept4(ls->sock, (struct sockaddr *)&p, &pl, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0)
			return;
		struct cm_device *d = NULL;

		/* an IPv4 peer of a dual-stack listener: its IPv4 addresses,
		 * as the kernel's CM reports such a request */
		cm_sa_from_any(&peer, (struct sockaddr *)&p);
		if (getsockname(fd, (struct sockaddr *)&l, &ll) == 0) {
			cm_sa_from_any(&local, (struct sockaddr *)&l);
			d = ls->dev ? ls->dev : cm_device_for_addr((struct sockaddr *)&local);
		}
		struct cm_id *c = d ? cm_id_alloc(ls->pub.channel, ls->pub.context, ls->pub.ps,
						   ls->pub.qp_type) : NULL;

		if (c && cm_id_set_device(c, d)) {
			cm_id_free(c);
			c = NULL;
		}
		if (!c) {
			close(fd); /* no device serves the address it came in on, or no memory */
			continue;
		}
		c->sync = false;
		c->sock = fd;
		c->listener = ls;
		c->state = CM_PENDING;
		c->tos = ls->tos;
		c->pub.route.addr.src_storage = local;
		c->pub.route.addr.dst_storage = peer;
		cm_fill_route(c);
		cm_sock_watch(c);
		/* its HELLO answers the peer's (on_handshake) */
	}
}

static int next_timeout_ms(void)
{
	struct sv_list *all = cm_all_ids();
	uint64_t now = sv_now_ns(), first = 0;

	for (struct sv_list *p = all->next; p != all; p = p->next) {
		struct cm_id *id = SV_CONTAINER_OF(p, struct cm_id, link);

		if (id->deadline_ns && (!first || id->deadline_ns < first))
			first = id->deadline_ns;
		if (id->retry_ns && (!first || id->retry_ns < first))
			first = id->retry_ns;
	}
	if (!first)
		return -1;
	return first <= now ? 0 : (int)SV_MIN((first - now) / 1000000 + 1, 60000);
}

static void expire_deadlines(void)
{
	struct sv_list *all = cm_all_ids();
	uint64_t now = sv_now_ns();

	for (struct sv_list *p = all->next; p != all;) {
		struct cm_id *id = SV_CONTAINER_OF(p, struct cm_id, link);

		p = p->next;
		if (id->retry_ns && id->retry_ns <= now) {
			id->retry_ns = 0;
			if (id->state == CM_CONNECTING && id->sock >= 0)
				cm_start_connect(id);
			p = all->next; /* it may have freed nothing, but be uniform */
			continue;
		}
		if (!id->deadline_ns || id->deadline_ns > now)
			continue;
		id->deadline_ns = 0;
		sv_dbg("cm: id %p timed out in state %d", (void *)id, id->state);
		if (id->state == CM_DREQ_SENT)
			disconnected(id);
		else
			peer_lost(id, ETIMEDOUT);
		p = all->next; /* peer_lost may free ids: start over */
	}
}

static pthread_t cm_tid;
static pid_t cm_pid; /* the process the thread runs in: a forked child has none */
static atomic_bool cm_stopping;

static void *cm_thread(void *arg)
{
	(void)arg;
	while (!atomic_load(&cm_stopping)) {
		struct epoll_event evs[32];
		int timeout;

		sv_mutex_lock(&cm_lock);
		timeout = next_timeout_ms();
		sv_mutex_unlock(&cm_lock);
		int n = epoll_wait(epfd, evs, SV_ARRAY_SIZE(evs), timeout);

		sv_mutex_lock(&cm_lock);
		for (int i = 0; i < n; i++) {
			if (evs[i].data.u64 == 0) {
				uint64_t v;

				if (read(wakefd, &v, sizeof(v)) < 0 && errno != EAGAIN)
					sv_err("cm: wake read: %s", strerror(errno));
				continue;
			}
			struct cm_id *id = cm_id_by_serial(evs[i].data.u64);

			if (!id || id->sock < 0)
				continue;
			if (id->state == CM_LISTEN)
				on_listener(id);
			else if (id->want_write && (evs[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
				on_connected(id);
			else
				on_readable(id);
		}
		expire_deadlines();
		sv_mutex_unlock(&cm_lock);
	}
	return NULL;
}

int cm_thread_start(void)
{
	static bool started;
	pthread_t t;
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0 };

	if (started)
		return 0;
	epfd = epoll_create1(EPOLL_CLOEXEC);
	wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (epfd < 0 || wakefd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, wakefd, &ev))
		goto fail;
	if (pthread_create(&t, NULL, cm_thread, NULL))
		goto fail;
	cm_tid = t;
	cm_pid = getpid();
	started = true;
	return 0;
fail:
	if (epfd >= 0)
		close(epfd);
	if (wakefd >= 0)
		close(wakefd);
	epfd = wakefd = -1;
	return ENOMEM;
}

/*
 * rdma-core's librdmacm starts no thread of its own, so middleware (Open
 * MPI's components, libfabric's providers) dlcloses it freely; were the CM
 * thread still running when the library's code is unmapped, the process
 * would crash.  So when the library is unloaded (dlclose, or exit) the
 * thread is stopped and joined.  The ids and devices it served stay as the
 * program left them; nothing else runs in their name afterwards.
 */
__attribute__((destructor)) static void cm_thread_stop_at_unload(void)
{
	uint64_t one = 1;
	struct timespec until;

	/* a forked child has no CM thread, and cm_lock may have been held at fork */
	if (!cm_pid || cm_pid != getpid())
		return;
	sv_mutex_lock(&cm_lock);
	bool running = epfd >= 0 && !atomic_load(&cm_stopping);
	if (running)
		atomic_store(&cm_stopping, true);
	sv_mutex_unlock(&cm_lock);
	if (!running)
		return;
	if (write(wakefd, &one, sizeof(one)) < 0)
		sv_err("cm: wake write: %s", strerror(errno));
	/* bounded: an exiting process must not hang on a thread stuck elsewhere */
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	if (pthread_timedjoin_np(cm_tid, NULL, &until)) {
		sv_warn("cm: the CM thread did not stop");
		return;
	}
	close(epfd);
	close(wakefd);
	epfd = wakefd = -1;
}
