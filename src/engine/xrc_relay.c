/*
 * XRC domains shared by the processes of a host.
 *
 * On a NIC, processes that open one file with ibv_open_xrcd share one XRC
 * domain, and an XRC receive QP of one process delivers into an XRC SRQ of
 * another (the NIC does it: ibv_xsrq_pingpong -c N).  Here each process
 * executes its own requests, and no process can take another's receive WQE,
 * write its CQ or check its keys, so the receive QP that takes such a
 * request hands the packet on to the process that owns the SRQ, which
 * executes it in the receive QP's name and answers through it:
 *
 *   requester --request--> receive QP (process A) --RELAY--> SRQ (process B)
 *   requester <--answer--- receive QP (process A) <-answer-- SRQ (process B)
 *
 * A keeps what is the receive QP's own: PSNs, MSN, duplicates (a duplicate
 * READ is relayed again, a duplicate atomic answered from A's replay
 * cache).  B runs the ordinary responder on a proxy of the receive QP:
 * the SRQ's receive WQEs and CQ, its PD for the keys of WRITE, READ and
 * atomics, the receive QP's access flags and MTU.  B's answers (ACK, NAK,
 * RNR NAK, READ responses, atomic ACK) go to A's receive QP, which hands
 * them on: so an ACK still means what it means on a NIC.  An RNR NAK takes
 * A's expected PSN back to that message; B drops what follows of that
 * window until A starts a new one (SV_RELAY_WINDOW).  While answers are
 * awaited, A drops the QP's requests for other SRQs (its own or a third
 * process's) and its duplicates: the requester sends them again, and order
 * between SRQs holds.
 *
 * The relay runs over shm, whose connections are between processes of one
 * user of this host (SO_PEERCRED), or over tcp from a peer at this host's
 * address that proved the job's secret (sv_xrc_peer_id); never over
 * rocev2, whose datagrams say nothing of who sent them.  B checks the
 * domain's inode against its SRQ's.
 *
 * B's proxies are sv_qps outside the QP table, keyed by (process, receive
 * QP), at most SV_XRC_MAX_PROXIES per context.
 */
#include "engine/engine.h"
#include "engine/xrc_relay.h"
#include "engine/gpu.h"
#include "transport/registry.h"

#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define SV_XRC_MAX_PROXIES 4096

/* ---- the receive QP's side (process A) ---- */

bool sv_xrc_relay_possible(const struct sv_qp *qp, uint32_t srqn)
{
	const struct sv_engine *eng = qp->ctx->eng;

	/* a domain of a file, an SRQ number outside our own block, and a
	 * transport that says who its peer is to reach its owner (shm, tcp) */
	return qp->xrcd && qp->xrcd->by_inode && sv_qpn_port(srqn) &&
	       !sv_qpn_ours(qp->ctx, srqn) &&
	       !sv_transport_by_address(eng->mode);
}

/* Marks a peer named by its endpoint port (tcp), not by its pid (shm). */
#define PORT_ID 0x40000000 /* above any pid Linux gives (2^22 at most) */

int32_t sv_xrc_peer_id(const struct sv_conn *conn)
{
	struct in6_addr own = conn->eng->ctx->dev->addr;

	if (conn->peer_pid)
		return conn->peer_pid; /* shm: a process of this host and user */
	/* tcp: a peer that proved the job's secret (or that we dialled and
	 * that proved it to us), at this host's address; a datagram says
	 * nothing of who sent it */
	if (conn->by_address || !conn->peer.port || !sv_ip_eq(&conn->peer.ip, &own) ||
	    (!conn->outgoing && !atomic_load(&conn->peer_authed)))
		return 0;
	return PORT_ID | conn->peer.port;
}

/* Is the process id names still there?  (A port's owner is taken to be.) */
static bool id_alive(int32_t id)
{
	return (id & PORT_ID) || !kill(id, 0) || errno != ESRCH;
}

struct sv_conn *sv_xrc_conn_to(struct sv_context *ctx, uint32_t number)
{
	struct sv_endpoint_addr to = { ctx->dev->addr, sv_qpn_port(number) };
	struct sv_conn *c;

	if (!to.port || sv_transport_by_address(ctx->eng->mode))
		return NULL;
	c = sv_engine_conn_to(ctx->eng, &to);
	if (c && (atomic_load(&c->state) == SV_CONN_DEAD || c->by_address ||
		  !sv_xrc_peer_id(c))) {
		sv_conn_put(c); /* not there, or not a process of this host */
		c = NULL;
	}
	return c;
}

/* qp->lock held: the connection to the process that owns srqn (shm), or NULL. */
static struct sv_conn *relay_conn(struct sv_qp *qp, uint32_t srqn)
{
	struct sv_xrc_qp *r = qp->xrc;
	uint16_t port = sv_qpn_port(srqn);

	if (r->conn && (r->port != port || atomic_load(&r->conn->state) == SV_CONN_DEAD)) {
		sv_conn_put(r->conn);
		r->conn = NULL;
	}
	if (!r->conn) {
		r->conn = sv_xrc_conn_to(qp->ctx, srqn);
		r->port = port;
	}
	return r->conn;
}

int sv_xrc_relay_forward(struct sv_qp *qp, struct sv_conn *from, const uint8_t *pkt,
			 uint32_t hdr_len, const uint8_t *payload, uint32_t plen, uint32_t srqn,
			 bool answered)
{
	const struct sv_bth *rq = (const void *)pkt;
	struct sv_xrc_qp *r = qp->xrc;
	struct {
		struct sv_bth bth;
		struct sv_xrc_relay x;
	} __attribute__((packed)) h;
	struct iovec iov[2] = { { (void *)pkt, hdr_len }, { (void *)payload, plen } };
	uint8_t asking[SV_MAX_HDR_LEN];
	struct sv_conn *c;
	bool window = !r->pending;

	/* B's responder answers only what asks for an answer, and A awaits
	 * one for each message's last packet: a requester that coalesces
	 * its ACKs (requester.c) did not ask on every one */
	if (answered && !(rq->flags & SV_BTH_ACKREQ) && hdr_len <= sizeof(asking)) {
		memcpy(asking, pkt, hdr_len);
		((struct sv_bth *)asking)->flags |= SV_BTH_ACKREQ;
		iov[0].iov_base = asking;
	}
	c = relay_conn(qp, srqn);
	if (!c)
		return -EHOSTUNREACH;
	memset(&h, 0, sizeof(h));
	h.bth.opcode = SV_OP_XRC_RELAY;
	h.bth.pkey = 0xffff;
	h.bth.dqpn = htonl(srqn);
	h.bth.psn = rq->psn;
	h.x.tgt_qpn = htonl(qp->ex.qp_base.qp_num);
	h.x.src_qpn = htonl(qp->attr.dest_qp_num & SV_PSN_MASK);
	h.x.msn = htonl(r->msg_msn);
	h.x.access = htonl(qp->attr.qp_access_flags);
	h.x.mtu = htons((uint16_t)qp->mtu);
	h.x.rnr_timer = qp->attr.min_rnr_timer;
	h.x.flags = window ? SV_RELAY_WINDOW : 0;
	h.x.dev = htobe64((uint64_t)qp->xrcd->dev);
	h.x.ino = htobe64((uint64_t)qp->xrcd->ino);
	if (sv_send_packet(c, &h, sizeof(h), iov, plen ? 2 : 1))
		return -EIO;
	if (window) {
		if (r->reply)
			sv_conn_put(r->reply);
		sv_conn_get(from);
		r->reply = from;
		/* everything before the expected PSN is answered (this one
		 * is that one, or a duplicate READ from before it) */
		r->done_psn = sv_psn_add(qp->resp.epsn, SV_PSN_MASK);
	}
	r->pending += answered;
	return 0;
}

void sv_xrc_relay_idle(struct sv_qp *qp)
{
	struct sv_xrc_qp *r = qp->xrc;

	if (!r)
		return;
	r->pending = 0;
	r->dropped = false;
	if (r->reply) {
		sv_conn_put(r->reply);
		r->reply = NULL;
	}
}

void sv_xrc_relay_free(struct sv_qp *qp)
{
	struct sv_xrc_qp *r = qp->xrc;

	if (!r)
		return;
	sv_xrc_relay_idle(qp);
	if (r->conn)
		sv_conn_put(r->conn);
	if (r->remote)
		sv_conn_put(r->remote);
	free(r->openers);
	free(r);
	qp->xrc = NULL;
}

/* ---- the SRQ's side (process B) ---- */

struct sv_xrc_proxy {
	struct sv_list link; /* ctx->xrc_proxies, under srqt_lock */
	pid_t pid;	     /* the receive QP's process ... */
	uint32_t tgt_qpn;    /* ... and number */
	bool dropping;	     /* a request was refused: until a new window */
	uint32_t users;	     /* srqt_lock: threads about to lock qp (it stays) */
	struct sv_qp *qp;    /* the receive QP as the responder sees it here */
	struct sv_xrcd none; /* the domain of a relay naming no SRQ of ours */
};

static void proxy_free(struct sv_xrc_proxy *x)
{
	struct sv_qp *q = x->qp;

	sv_responder_free(q);
	free(q->xrc);
	sv_mutex_destroy(&q->lock);
	free(q);
	free(x);
}

/* srqt_lock held: the proxy of (pid, qpn), made if new; NULL when full. */
static struct sv_xrc_proxy *proxy_of(struct sv_context *ctx, pid_t pid, uint32_t qpn)
{
	struct sv_xrc_proxy *x;
	uint32_t n = 0;

	for (struct sv_list *l = ctx->xrc_proxies.next; l != &ctx->xrc_proxies; l = l->next) {
		x = SV_CONTAINER_OF(l, struct sv_xrc_proxy, link);
		if (x->pid == pid && x->tgt_qpn == qpn)
			return x;
		n++;
	}
	if (n >= SV_XRC_MAX_PROXIES) {
		/* make room: proxies of processes that are gone */
		for (struct sv_list *l = ctx->xrc_proxies.next, *nx; l != &ctx->xrc_proxies; l = nx) {
			bool idle;

			nx = l->next;
			x = SV_CONTAINER_OF(l, struct sv_xrc_proxy, link);
			if (id_alive(x->pid))
				continue;
			/* (a proxy's READ never waits for its connection: no
			 * engine list holds it) */
			idle = !x->users;
			if (idle) {
				sv_list_del(&x->link);
				proxy_free(x);
				n--;
			}
		}
		if (n >= SV_XRC_MAX_PROXIES)
			return NULL;
	}
	x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	x->qp = calloc(1, sv_qp_size(SV_MAX_SGE));
	if (x->qp)
		x->qp->xrc = calloc(1, sizeof(*x->qp->xrc));
	if (!x->qp || !x->qp->xrc) {
		if (x->qp)
			free(x->qp);
		free(x);
		return NULL;
	}
	x->pid = pid;
	x->tgt_qpn = qpn;
	x->none.ctx = ctx;
	x->qp->xrc->proxy = true;
	x->qp->ctx = ctx;
	x->qp->ti = sv_qp_type_info(IBV_QPT_XRC_RECV);
	x->qp->state = IBV_QPS_RTS;
	x->qp->ex.qp_base.context = &ctx->vctx.context;
	x->qp->ex.qp_base.qp_num = qpn;
	x->qp->ex.qp_base.qp_type = IBV_QPT_XRC_RECV;
	sv_ref_init(&x->qp->ref, 1);
	sv_mutex_init(&x->qp->lock, SV_LOCK_QP);
	sv_list_add_tail(&ctx->xrc_proxies, &x->link);
	return x;
}

void sv_xrc_relay_rx(struct sv_conn *conn, const uint8_t *pkt, const uint8_t *orig,
		     uint32_t len)
{
	struct sv_context *ctx = conn->eng->ctx;
	const struct sv_bth *bth = (const void *)pkt;
	const struct sv_xrc_relay *x = (const void *)(pkt + sizeof(*bth));
	const struct sv_bth *obth = (const void *)orig;
	const struct sv_opcode_info *op;
	uint32_t psn, srqn = ntohl(bth->dqpn) & SV_PSN_MASK;
	uint32_t tgt = ntohl(x->tgt_qpn) & SV_PSN_MASK, mtu = ntohs(x->mtu);
	uint32_t slot = sv_srqn_slot(ctx, srqn);
	struct sv_xrc_proxy *px;
	struct sv_srq *srq = NULL;
	int32_t who = sv_xrc_peer_id(conn);
	struct sv_qp *q;

	if (!who) {
		/* only processes of this host relay (shm, or tcp with the secret) */
		sv_warn_limited("an XRC relay not from a process of this host; dropped");
		return;
	}
	/* the request inside: an XRC request, whole, of a valid path MTU */
	if (len < sizeof(*obth) || !(op = sv_opcode_info(obth->opcode)) ||
	    (obth->opcode & 0xe0) != SV_OP_XRC || !(op->mask & SV_OPF_REQUEST) ||
	    len < op->hdr_len || (obth->flags & SV_BTH_GPUREF) || mtu < 256 || mtu > 4096 ||
	    (mtu & (mtu - 1)) || (ntohl(obth->dqpn) & SV_PSN_MASK) != tgt ||
	    (ntohl(((const struct sv_xrceth *)(orig + op->off_xrceth))->srqn) & SV_PSN_MASK) !=
		    srqn) {
		sv_warn_limited("malformed XRC relay (from %s %d); closing connection",
				who & PORT_ID ? "port" : "pid", (int)(who & ~PORT_ID));
		sv_engine_conn_fail(conn);
		return;
	}
	psn = ntohl(obth->psn) & SV_PSN_MASK;
	sv_mutex_lock(&ctx->srqt_lock);
	px = proxy_of(ctx, who, tgt);
	if (px)
		px->users++;
	sv_mutex_unlock(&ctx->srqt_lock);
	if (!px)
		return; /* no room for its state: the requester tries again */
	q = px->qp;
	/* a proxy's lock comes before srqt_lock, as a QP's does (check_xrc);
	 * an SRQ being destroyed takes every proxy's lock before it goes
	 * (sv_xrc_proxies_detach): with q->lock held, srq stays */
	sv_mutex_lock(&q->lock);
	sv_mutex_lock(&ctx->srqt_lock);
	if (slot < ctx->srqt_size && ctx->srqt[slot] &&
	    ctx->srqt[slot]->xrcd && ctx->srqt[slot]->xrcd->by_inode &&
	    (uint64_t)ctx->srqt[slot]->xrcd->dev == be64toh(x->dev) &&
	    (uint64_t)ctx->srqt[slot]->xrcd->ino == be64toh(x->ino))
		srq = ctx->srqt[slot];
	sv_mutex_unlock(&ctx->srqt_lock);
	if ((x->flags & SV_RELAY_WINDOW) && (op->mask & SV_OPF_FIRST)) {
		/* a new window: whatever was refused before is behind.  A
		 * message left half placed starts again in its receive WQE
		 * if this one is for the same SRQ (as a NIC's would); else
		 * that WQE completes as aborted by its requester */
		px->dropping = false;
		q->state = IBV_QPS_RTS;
		sv_responder_relay_window(q, srq);
	}
	if (px->dropping)
		goto out;
	/* the receive QP as A has it for this packet; its domain here is the
	 * SRQ's (none: check_xrc refuses the number) */
	q->xrcd = srq ? srq->xrcd : NULL;
	q->xrc->src_qpn = ntohl(x->src_qpn) & SV_PSN_MASK;
	q->attr.dest_qp_num = tgt; /* the answers go to it */
	q->attr.qp_access_flags = ntohl(x->access);
	q->attr.min_rnr_timer = x->rnr_timer;
	q->mtu = mtu;
	sv_responder_expect(q, psn, ntohl(x->msn) & SV_PSN_MASK);
	if (!q->xrcd) {
		/* no XRC SRQ of that number in that domain: NAKed as check_xrc
		 * would (the packet needs a domain to be looked up in) */
		q->xrcd = &px->none;
	}
	sv_responder_rx(q, conn, op, (uint8_t *)orig, orig + op->hdr_len, len - op->hdr_len, NULL);
	/* refused (RNR NAK, NAK, dropped): nothing more of this window */
	if (q->state != IBV_QPS_RTS || sv_psn_cmp(q->resp.epsn, psn) <= 0)
		px->dropping = true;
out:
	sv_mutex_unlock(&q->lock);
	sv_mutex_lock(&ctx->srqt_lock);
	px->users--;
	sv_mutex_unlock(&ctx->srqt_lock);
}

void sv_xrc_proxies_detach(struct sv_context *ctx, struct sv_srq *srq)
{
	struct sv_xrc_proxy **held = NULL;
	uint32_t n = 0, cap = 0;

	/* each proxy's lock after srqt_lock is let go (the lock order) */
	sv_mutex_lock(&ctx->srqt_lock);
	for (struct sv_list *l = ctx->xrc_proxies.next; l != &ctx->xrc_proxies; l = l->next)
		cap++;
	held = calloc(cap ? cap : 1, sizeof(*held));
	for (struct sv_list *l = ctx->xrc_proxies.next; held && l != &ctx->xrc_proxies; l = l->next) {
		held[n] = SV_CONTAINER_OF(l, struct sv_xrc_proxy, link);
		held[n++]->users++;
	}
	sv_mutex_unlock(&ctx->srqt_lock);
	for (uint32_t i = 0; i < n; i++) {
		struct sv_qp *q = held[i]->qp;

		sv_mutex_lock(&q->lock);
		if (q->srq == srq) {
			q->srq = NULL;
			sv_responder_srq_gone(q, true);
		}
		sv_mutex_unlock(&q->lock);
	}
	sv_mutex_lock(&ctx->srqt_lock);
	for (uint32_t i = 0; i < n; i++)
		held[i]->users--;
	sv_mutex_unlock(&ctx->srqt_lock);
	free(held);
}

void sv_xrc_proxies_free(struct sv_context *ctx)
{
	while (!sv_list_empty(&ctx->xrc_proxies)) {
		struct sv_xrc_proxy *x =
			SV_CONTAINER_OF(ctx->xrc_proxies.next, struct sv_xrc_proxy, link);

		sv_list_del(&x->link);
		proxy_free(x);
	}
}

/* ---- ibv_open_qp handles of another process's receive QP ---- */

struct xrc_call {
	struct sv_list link; /* ctx->xrc_calls */
	uint32_t id;
	bool done;
	int status;
	struct ibv_qp_attr *attr; /* QUERY: where the answer goes */
};

static bool ctrl_send(struct sv_conn *conn, const struct sv_xrc_ctrl *x,
		      const struct ibv_qp_attr *attr)
{
	struct {
		struct sv_bth bth;
		struct sv_xrc_ctrl x;
	} __attribute__((packed)) h;
	struct iovec iov = { (void *)attr, sizeof(*attr) };

	memset(&h.bth, 0, sizeof(h.bth));
	h.bth.opcode = SV_OP_XRC_CTRL;
	h.bth.pkey = 0xffff;
	h.bth.dqpn = htonl(x->qpn & SV_PSN_MASK);
	h.x = *x;
	return !sv_send_packet(conn, &h, sizeof(h), &iov, attr ? 1 : 0);
}

/*
 * Do frames sent on c still reach the peer?  A connection that ended before
 * the peer's HELLO was dialled again, its queue and later frames going on
 * to the new one (c->next, set under c's tx_lock): it is dead, but what was
 * asked on it is answered on its successor.  (Seen under load: a question
 * asked as the first connection was refused failed at once with EIO.)
 */
static bool conn_goes_on(struct sv_conn *c)
{
	while (atomic_load(&c->state) == SV_CONN_DEAD) {
		struct sv_conn *next;

		sv_mutex_lock(&c->tx_lock);
		next = c->next; /* (c holds its reference, and the caller holds c) */
		sv_mutex_unlock(&c->tx_lock);
		if (!next)
			return false;
		c = next;
	}
	return true;
}

int sv_xrc_ctrl_call(struct sv_context *ctx, struct sv_conn *conn, uint8_t op, uint32_t qpn,
		     const struct sv_xrcd *x, int mask, struct ibv_qp_attr *attr)
{
	struct sv_xrc_ctrl q = { .op = op, .qpn = qpn, .mask = mask,
				 .dev = (uint64_t)x->dev, .ino = (uint64_t)x->ino };
	struct xrc_call c = { .attr = op == SV_XRC_CTRL_QUERY ? attr : NULL };
	struct timespec until;
	int err = 0;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	sv_mutex_lock(&ctx->xrc_call_lock);
	c.id = q.id = ++ctx->xrc_call_next;
	sv_list_add_tail(&ctx->xrc_calls, &c.link);
	sv_mutex_unlock(&ctx->xrc_call_lock);
	if (!ctrl_send(conn, &q, op == SV_XRC_CTRL_MODIFY ? attr : NULL))
		err = EIO;
	sv_mutex_lock(&ctx->xrc_call_lock);
	while (!err && !c.done) {
		struct timespec now, wake;
		bool on;

		/* (tx_lock comes before xrc_call_lock) */
		sv_mutex_unlock(&ctx->xrc_call_lock);
		on = conn_goes_on(conn);
		sv_mutex_lock(&ctx->xrc_call_lock);
		if (c.done || !on)
			break;
		/* the connection is looked at again every 20 ms: its end
		 * signals nothing here */
		clock_gettime(CLOCK_REALTIME, &now);
		wake = now;
		wake.tv_nsec += 20000000;
		if (wake.tv_nsec >= 1000000000) {
			wake.tv_sec++;
			wake.tv_nsec -= 1000000000;
		}
		if (wake.tv_sec > until.tv_sec ||
		    (wake.tv_sec == until.tv_sec && wake.tv_nsec > until.tv_nsec))
			wake = until;
		if (sv_cond_timedwait(&ctx->xrc_call_cond, &ctx->xrc_call_lock, &wake) == ETIMEDOUT &&
		    (now.tv_sec > until.tv_sec ||
		     (now.tv_sec == until.tv_sec && now.tv_nsec >= until.tv_nsec)))
			err = ETIMEDOUT;
	}
	if (!err)
		err = c.done ? c.status : EIO; /* (the process went) */
	sv_list_del(&c.link);
	sv_mutex_unlock(&ctx->xrc_call_lock);
	return err;
}

void sv_xrc_openers_prune(struct sv_qp *qp)
{
	struct sv_xrc_qp *x = qp->xrc;

	for (uint32_t i = 0; x && i < x->nopeners;) {
		if (!id_alive(x->openers[i])) {
			x->openers[i] = x->openers[--x->nopeners];
			x->opens--;
		} else {
			i++;
		}
	}
}

/* ctx->lock held: is pid among qp's openers (and take it out, with take)? */
static bool opener(struct sv_qp *qp, pid_t pid, bool take)
{
	struct sv_xrc_qp *x = qp->xrc;

	for (uint32_t i = 0; x && i < x->nopeners; i++)
		if (x->openers[i] == pid) {
			if (take) {
				x->openers[i] = x->openers[--x->nopeners];
				x->opens--;
			}
			return true;
		}
	return false;
}

struct ctrl_job {
	struct sv_conn *conn; /* a reference */
	int32_t who;	      /* the asker (sv_xrc_peer_id) */
	struct sv_xrc_ctrl q;
	struct ibv_qp_attr attr;
};

/*
 * A question about one of our XRC receive QPs, in a thread of its own (the
 * engine thread that took it must not wait for what ibv_modify_qp waits
 * for): only from a process that opened it (but OPEN), and only for a QP
 * of a domain of that file.
 */
static void *ctrl_job_run(void *arg)
{
	struct ctrl_job *j = arg;
	struct sv_context *ctx = j->conn->eng->ctx;
	struct sv_xrc_ctrl a = j->q;
	struct ibv_qp_init_attr ia;
	struct sv_qp *qp = sv_qp_lookup(ctx, j->q.qpn & SV_PSN_MASK), *last = NULL;
	bool ok = false;

	a.reply = 1;
	a.status = 0;
	if (qp && qp->ti->xrc && qp->ti->receives && qp->xrcd && qp->xrcd->by_inode &&
	    (uint64_t)qp->xrcd->dev == j->q.dev && (uint64_t)qp->xrcd->ino == j->q.ino &&
	    !(qp->xrc && qp->xrc->alias_of)) {
		sv_mutex_lock(&qp->lock);
		if (!qp->xrc)
			qp->xrc = calloc(1, sizeof(*qp->xrc));
		sv_mutex_unlock(&qp->lock);
		sv_mutex_lock(&ctx->lock);
		sv_xrc_openers_prune(qp);
		if (!qp->xrc) {
			a.status = ENOMEM;
		} else if (j->q.op == SV_XRC_CTRL_OPEN) {
			pid_t *o = realloc(qp->xrc->openers,
					   sizeof(*o) * (qp->xrc->nopeners + 1));

			if (o) {
				qp->xrc->openers = o;
				o[qp->xrc->nopeners++] = j->who;
				qp->xrc->opens++;
			} else {
				a.status = ENOMEM;
			}
		} else {
			ok = opener(qp, j->who, j->q.op == SV_XRC_CTRL_CLOSE);
			if (!ok)
				a.status = EINVAL;
			if (ok && j->q.op == SV_XRC_CTRL_CLOSE && !qp->xrc->opens &&
			    qp->xrc->creator_closed)
				last = qp; /* its last handle: it goes */
		}
		sv_mutex_unlock(&ctx->lock);
	} else {
		a.status = EINVAL; /* no XRC receive QP of that number in that domain */
	}
	if (ok && j->q.op == SV_XRC_CTRL_QUERY)
		a.status = ibv_query_qp(&qp->ex.qp_base, &j->attr, -1, &ia);
	else if (ok && j->q.op == SV_XRC_CTRL_MODIFY)
		a.status = ibv_modify_qp(&qp->ex.qp_base, &j->attr, j->q.mask);
	if (qp)
		sv_qp_put(qp);
	if (last)
		ibv_destroy_qp(&last->ex.qp_base);
	ctrl_send(j->conn, &a, j->q.op == SV_XRC_CTRL_QUERY && !a.status ? &j->attr : NULL);
	sv_conn_put(j->conn);
	free(j);
	return NULL;
}

void sv_xrc_ctrl_rx(struct sv_conn *conn, const uint8_t *pkt, const uint8_t *payload,
		    uint32_t plen)
{
	struct sv_context *ctx = conn->eng->ctx;
	struct sv_xrc_ctrl q;
	struct ctrl_job *j;
	pthread_attr_t ta;
	pthread_t t;

	memcpy(&q, pkt + sizeof(struct sv_bth), sizeof(q));
	if (!sv_xrc_peer_id(conn) || (plen && plen != sizeof(struct ibv_qp_attr)) ||
	    (q.op == SV_XRC_CTRL_MODIFY && !q.reply && !plen)) {
		sv_warn_limited("an XRC control packet not from a process of this host, or malformed; "
				"dropped");
		return;
	}
	if (q.reply) {
		/* the answer to one of our questions */
		sv_mutex_lock(&ctx->xrc_call_lock);
		for (struct sv_list *l = ctx->xrc_calls.next; l != &ctx->xrc_calls; l = l->next) {
			struct xrc_call *c = SV_CONTAINER_OF(l, struct xrc_call, link);

			if (c->id != q.id || c->done)
				continue;
			c->status = q.status;
			if (c->attr && plen)
				memcpy(c->attr, payload, plen);
			c->done = true;
			pthread_cond_broadcast(&ctx->xrc_call_cond);
			break;
		}
		sv_mutex_unlock(&ctx->xrc_call_lock);
		return;
	}
	if (q.op < SV_XRC_CTRL_OPEN || q.op > SV_XRC_CTRL_CLOSE || !(j = calloc(1, sizeof(*j))))
		return;
	sv_conn_get(conn);
	j->conn = conn;
	j->who = sv_xrc_peer_id(conn);
	j->q = q;
	if (plen)
		memcpy(&j->attr, payload, plen);
	pthread_attr_init(&ta);
	pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &ta, ctrl_job_run, j)) {
		sv_conn_put(conn);
		free(j);
	}
	pthread_attr_destroy(&ta);
}
