/*
 * XRC domains shared by the processes of a host.
 *
 * On a NIC, processes that open one file with ibv_open_xrcd share one XRC
 * domain, and an XRC receive QP of one process delivers into an XRC SRQ of
 * another (the NIC does it: ibv_xsrq_pingpong -c N).  Here each process
 * executes its own requests, and no process can take another's receive WQE
 * or write its CQ, so the receive QP that takes such a request hands the
 * packet on to the process that owns the SRQ, which places it there and
 * answers with a verdict:
 *
 *   requester --SEND--> receive QP (process A) --RELAY--> SRQ (process B)
 *   requester <--ACK--- receive QP (process A) <-VERDICT- SRQ (process B)
 *
 * A keeps everything that is the receive QP's (PSNs, MSN, duplicates,
 * ACKs); it acknowledges a relayed packet only when B's verdict says it
 * was placed, so an ACK still means what it means on a NIC.  An SRQ with
 * no receive WQE makes B answer RNR; A then takes its expected PSN back to
 * that message and sends the RNR NAK, and B drops what follows of that
 * window until A starts a new one (SV_RELAY_WINDOW).  While packets it
 * relayed wait for their verdict, A drops the QP's requests for other SRQs
 * (its own or a third process's): the requester sends them again, and
 * order between SRQs holds.
 *
 * The relay runs only over the shm transport, whose connections are
 * between processes of one user of this host (SO_PEERCRED), so a relay
 * comes from a process that could open the domain's file: B checks the
 * domain's inode against its SRQ's.  SEND, SEND_WITH_IMM and multi-packet
 * SENDs are relayed; one-sided operations and SEND_WITH_INV naming another
 * process's SRQ are refused (docs/COMPATIBILITY.md §1.7a).
 *
 * B keeps what it needs of each relaying receive QP (its receive WQE being
 * filled) in a proxy: an sv_qp that is not in the QP table, keyed by
 * (process, QPN), at most SV_XRC_MAX_PROXIES per context.
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

	/* a domain of a file, an SRQ number outside our own block, and the
	 * shm transport to reach its owner */
	return qp->xrcd && qp->xrcd->by_inode && sv_qpn_port(srqn) &&
	       (srqn < qp->ctx->qpn_base || srqn - qp->ctx->qpn_base >= SV_QPN_BLOCK) &&
	       (eng->mode == SV_TRANSPORT_AUTO || eng->mode == SV_TRANSPORT_SHM);
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
		struct sv_endpoint_addr to = { sv_ip_from_v4(qp->ctx->dev->ip), port };

		r->conn = sv_engine_conn_to(qp->ctx->eng, &to);
		r->port = port;
	}
	if (!r->conn || atomic_load(&r->conn->state) == SV_CONN_DEAD || !r->conn->peer_pid)
		return NULL; /* not there, or not a process of this host and user */
	return r->conn;
}

int sv_xrc_relay_forward(struct sv_qp *qp, struct sv_conn *from, const struct sv_opcode_info *op,
			 const uint8_t *pkt, const uint8_t *payload, uint32_t plen, uint32_t srqn)
{
	const struct sv_bth *rq = (const void *)pkt;
	struct sv_xrc_qp *r = qp->xrc;
	struct {
		struct sv_bth bth;
		struct sv_xrc_relay x;
	} __attribute__((packed)) h;
	struct iovec iov = { (void *)payload, plen };
	struct sv_conn *c;
	bool window;

	if (!r && !(r = qp->xrc = calloc(1, sizeof(*r))))
		return -ENOMEM;
	c = relay_conn(qp, srqn);
	if (!c)
		return -EHOSTUNREACH;
	window = !r->busy;
	memset(&h, 0, sizeof(h));
	h.bth = *rq;
	h.bth.opcode = SV_OP_XRC_RELAY;
	h.bth.flags &= SV_BTH_SE | SV_BTH_ACKREQ;
	h.bth.dqpn = htonl(srqn);
	h.x.opcode = rq->opcode;
	h.x.flags = window ? SV_RELAY_WINDOW : 0;
	h.x.tgt_qpn = htonl(qp->ex.qp_base.qp_num);
	h.x.src_qpn = htonl(qp->attr.dest_qp_num & SV_PSN_MASK);
	h.x.msn = htonl(r->msg_msn);
	if (op->off_immdt)
		memcpy(&h.x.imm, pkt + op->off_immdt, sizeof(h.x.imm));
	h.x.dev = htobe64((uint64_t)qp->xrcd->dev);
	h.x.ino = htobe64((uint64_t)qp->xrcd->ino);
	if (sv_send_packet(c, &h, sizeof(h), &iov, plen ? 1 : 0))
		return -EIO;
	if (window) {
		if (r->reply)
			sv_conn_put(r->reply);
		sv_conn_get(from);
		r->reply = from;
		r->busy = true;
	}
	r->last_psn = ntohl(rq->psn) & SV_PSN_MASK;
	return 0;
}

void sv_xrc_relay_idle(struct sv_qp *qp)
{
	struct sv_xrc_qp *r = qp->xrc;

	if (!r)
		return;
	r->busy = false;
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
	free(r);
	qp->xrc = NULL;
}

/* ---- the SRQ's side (process B) ---- */

struct sv_xrc_proxy {
	struct sv_list link; /* ctx->xrc_proxies, under srqt_lock */
	pid_t pid;	     /* the receive QP's process ... */
	uint32_t tgt_qpn;    /* ... and number */
	bool dropping;	     /* a verdict other than OK was sent: until a new window */
	struct sv_qp *qp;    /* its receive state, as the responder keeps it */
};

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
			nx = l->next;
			x = SV_CONTAINER_OF(l, struct sv_xrc_proxy, link);
			if (kill(x->pid, 0) && errno == ESRCH) {
				pthread_mutex_lock(&x->qp->lock);
				pthread_mutex_unlock(&x->qp->lock); /* nobody uses it now */
				sv_list_del(&x->link);
				pthread_mutex_destroy(&x->qp->lock);
				free(x->qp);
				free(x);
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
	if (!x->qp) {
		free(x);
		return NULL;
	}
	x->pid = pid;
	x->tgt_qpn = qpn;
	x->qp->ctx = ctx;
	x->qp->ti = sv_qp_type_info(IBV_QPT_XRC_RECV);
	x->qp->ex.qp_base.qp_num = qpn;
	x->qp->ex.qp_base.qp_type = IBV_QPT_XRC_RECV;
	pthread_mutex_init(&x->qp->lock, NULL);
	sv_list_add_tail(&ctx->xrc_proxies, &x->link);
	return x;
}

static void send_verdict(struct sv_conn *conn, uint32_t tgt_qpn, uint32_t psn, uint8_t kind,
			 bool last, uint32_t msn)
{
	struct {
		struct sv_bth bth;
		struct sv_xrc_verdict v;
	} __attribute__((packed)) p;

	memset(&p, 0, sizeof(p));
	p.bth.opcode = SV_OP_XRC_VERDICT;
	p.bth.pkey = 0xffff;
	p.bth.dqpn = htonl(tgt_qpn & SV_PSN_MASK);
	p.bth.psn = htonl(psn & SV_PSN_MASK);
	p.v.kind = kind;
	p.v.last = last;
	p.v.msn = htonl(msn & SV_PSN_MASK);
	sv_send_packet(conn, &p, sizeof(p), NULL, 0);
}

void sv_xrc_relay_rx(struct sv_conn *conn, const uint8_t *pkt, const uint8_t *payload,
		     uint32_t plen)
{
	struct sv_context *ctx = conn->eng->ctx;
	const struct sv_bth *bth = (const void *)pkt;
	const struct sv_xrc_relay *x = (const void *)(pkt + sizeof(*bth));
	const struct sv_opcode_info *op = sv_opcode_info(x->opcode);
	uint32_t psn = ntohl(bth->psn) & SV_PSN_MASK, srqn = ntohl(bth->dqpn) & SV_PSN_MASK;
	uint32_t tgt = ntohl(x->tgt_qpn) & SV_PSN_MASK, msn = ntohl(x->msn) & SV_PSN_MASK;
	struct sv_relay_pkt rp;
	struct sv_xrc_proxy *px;
	struct sv_srq *srq = NULL;
	uint32_t slot = srqn - ctx->qpn_base;
	uint8_t kind;

	if (!conn->peer_pid) {
		/* only processes of this host and user relay (shm) */
		sv_warn_limited("an XRC relay on a connection not from this host's shm; dropped");
		return;
	}
	pthread_mutex_lock(&ctx->srqt_lock);
	px = proxy_of(ctx, conn->peer_pid, tgt);
	if (px)
		pthread_mutex_lock(&px->qp->lock);
	if (srqn >= ctx->qpn_base && slot < ctx->srqt_size && ctx->srqt[slot] &&
	    ctx->srqt[slot]->xrcd && ctx->srqt[slot]->xrcd->by_inode &&
	    (uint64_t)ctx->srqt[slot]->xrcd->dev == be64toh(x->dev) &&
	    (uint64_t)ctx->srqt[slot]->xrcd->ino == be64toh(x->ino))
		srq = ctx->srqt[slot];
	pthread_mutex_unlock(&ctx->srqt_lock);
	if (!px) {
		send_verdict(conn, tgt, psn, SV_VERDICT_REFUSED, false, msn);
		return;
	}
	/* (an SRQ being destroyed takes the proxies' locks before it goes:
	 * sv_xrc_proxies_detach; with px->qp->lock held, srq stays) */
	if ((x->flags & SV_RELAY_WINDOW) && op && (op->mask & SV_OPF_FIRST))
		px->dropping = false;
	if (px->dropping)
		goto out;
	if (!op || (op->mask & (SV_OPF_SEND | SV_OPF_REQUEST)) != (SV_OPF_SEND | SV_OPF_REQUEST) ||
	    (op->mask & SV_HDR_IETH) || (x->opcode & 0xe0) != SV_OP_XRC) {
		kind = SV_VERDICT_REFUSED;
	} else if (!srq) {
		kind = SV_VERDICT_NO_SRQ;
	} else {
		px->qp->attr.dest_qp_num = ntohl(x->src_qpn) & SV_PSN_MASK;
		rp = (struct sv_relay_pkt){
			.op = op,
			.srq = srq,
			.payload = payload,
			.plen = plen,
			.imm = op->off_immdt ? x->imm : 0,
			.has_imm = op->off_immdt != 0,
			.solicited = bth->flags & SV_BTH_SE,
		};
		kind = sv_responder_relayed(px->qp, &rp);
	}
	if (kind != SV_VERDICT_OK) {
		px->dropping = true;
		send_verdict(conn, tgt, psn, kind, false, msn);
	} else if (op->mask & SV_OPF_LAST) {
		send_verdict(conn, tgt, psn, kind, true, msn + 1);
	} else if (bth->flags & SV_BTH_ACKREQ) {
		send_verdict(conn, tgt, psn, kind, false, msn);
	}
out:
	pthread_mutex_unlock(&px->qp->lock);
}

void sv_xrc_proxies_detach(struct sv_context *ctx, struct sv_srq *srq)
{
	pthread_mutex_lock(&ctx->srqt_lock);
	for (struct sv_list *l = ctx->xrc_proxies.next; l != &ctx->xrc_proxies; l = l->next) {
		struct sv_xrc_proxy *x = SV_CONTAINER_OF(l, struct sv_xrc_proxy, link);

		pthread_mutex_lock(&x->qp->lock);
		if (x->qp->srq == srq) {
			x->qp->srq = NULL;
			x->qp->resp_have_rwqe = x->qp->resp_in_msg = false;
		}
		pthread_mutex_unlock(&x->qp->lock);
	}
	pthread_mutex_unlock(&ctx->srqt_lock);
}

void sv_xrc_proxies_free(struct sv_context *ctx)
{
	while (!sv_list_empty(&ctx->xrc_proxies)) {
		struct sv_xrc_proxy *x =
			SV_CONTAINER_OF(ctx->xrc_proxies.next, struct sv_xrc_proxy, link);

		sv_list_del(&x->link);
		sv_gpu_sink_free(&x->qp->gpu_in);
		pthread_mutex_destroy(&x->qp->lock);
		free(x->qp);
		free(x);
	}
}
