/*
 * rsockets (rdma/rsocket.h): SOCK_STREAM sockets over an RC QP and
 * SOCK_DGRAM sockets over a UD QP (the end of this comment), built only on
 * the public rdma_cm and verbs API.
 *
 * Each rsocket owns
 *   - an eventfd, whose number is the socket number rsocket() returns: a real
 *     descriptor, unique while the rsocket lives, which librspreload maps the
 *     application's descriptors onto (its value is never read or written);
 *   - an rdma_cm id on an event channel of its own (O_NONBLOCK);
 *   - once connected: a PD, one CQ (sends and receives) with a completion
 *     channel (O_NONBLOCK), an RC QP made with rdma_create_qp, a receive area
 *     of RS_NBUF buffers of RS_BUFSZ bytes, all posted as receives, and a
 *     send staging area of RS_NBUF slots of RS_BUFSZ bytes.
 *
 * Wire protocol between two rsockets (both ends are this file; it is not
 * rdma-core's, and does not talk to it):
 *   - Connection: rdma_connect/rdma_accept on RDMA_PS_TCP carry as private
 *     data a struct rs_hello {magic "RSv1" (be32), nbuf (be16), pad (16
 *     bits), bufsz (be32)}: how many receive buffers of what size the sender
 *     posted.  The peer's nbuf is the initial number of credits; a missing or
 *     unknown hello means RS_NBUF x RS_BUFSZ.  A message is never longer than
 *     the peer's bufsz.
 *   - Every message is an IBV_WR_SEND_WITH_IMM of 0..bufsz bytes.  The
 *     immediate (big endian on the wire) holds
 *       bits 0..15  credits returned: receive buffers the sender of the
 *                   message consumed and posted again since its last message;
 *       bit 30      CTRL: the payload is a struct rs_ctrl (below), not stream
 *                   data;
 *       bit 31      FIN: the sender will send no more data (shutdown SHUT_WR
 *                   or close); the stream ends after this message's data.
 *   - Flow control: a side sends a message only while it holds a credit.  A
 *     data (or CTRL) message needs two credits: the last one is kept for a
 *     credit or FIN message, so that credits can always flow back.  Every
 *     message returns the credits owed so far; a side with no data to send
 *     returns them in a zero-length message once half of its buffers are
 *     owed, or as soon as the peer may hold fewer than two (it holds at most
 *     nbuf - unread - owed).  A zero-length or CTRL message is consumed (and
 *     its buffer posted again) when it is polled, so it is itself owed back.
 *   - riomap: the mapping side registers the region (REMOTE_WRITE) and sends
 *     a CTRL message {type 1 (be32), rkey (be32), offset, addr, len (be64)};
 *     riounmap sends {type 2, offset}.  riowrite is an IBV_WR_RDMA_WRITE
 *     into the announced region at (offset - region offset); it uses no
 *     credit, and RC ordering keeps it ahead of later messages.
 *   - Close: FIN, then, once the sends completed (at most RS_CLOSE_MS),
 *     rdma_disconnect.  The peer reads EOF after all data; its writes then
 *     fail with EPIPE (no SIGPIPE, as rdma-core's rsockets).
 *
 * Locking: one global table (socket number -> rsocket) under a mutex, one
 * mutex per rsocket for its state, queues and CQ.  A blocked call drops the
 * rsocket's mutex while it sleeps, so one thread may read while another
 * writes: one thread at a time sleeps in poll(2) on the completion channel,
 * the CM channel and the eventfd, the others on a condition variable; any
 * thread that handles events or completions broadcasts the condition and, if
 * a thread sleeps in poll, writes the eventfd.  Closing an rsocket while
 * another thread uses it is not supported.
 *
 * SOCK_DGRAM (again this file's own protocol, not rdma-core's):
 *   - A datagram rsocket owns one UD QP (ibv_create_qp, moved to RTS here,
 *     qkey RDMA_UDP_QKEY; no CM id owns it), RS_DG_NBUF receive buffers of
 *     GRH + RS_DG_MTU bytes, always posted, and RS_DG_NSEND send slots; the
 *     PD, CQ and completion channel sit in the stream fields, so
 *     rs_progress, rs_block and rpoll serve both kinds.  Its rdma_cm id is
 *     RDMA_PS_UDP, bound and listening: by rbind, or else by the first
 *     rsendto/rconnect, to the route's source address with port 0.  The QP
 *     is made on the device of the first bind, SIDR request or route; one
 *     device per datagram rsocket (another one: EHOSTUNREACH).
 *   - Finding the peer's QP from an IP:port is SIDR: the first send to an
 *     address makes a child RDMA_PS_UDP id on the rsocket's channel,
 *     resolves address and route and rdma_connect's with our QP number; the
 *     peer's listening id accepts the request with its QP number
 *     (rdma_accept's qp_num) and destroys the request id; ESTABLISHED
 *     gives the AH attributes, QPN and qkey.  The destination (AH) is kept
 *     until rclose; a failed resolution is dropped and retried by the next
 *     send.  rconnect sets the default destination (and, blocking, waits
 *     for its resolution).
 *   - Each datagram is one IBV_WR_SEND of struct rs_dg_hdr {magic "RSd1"
 *     (be32), family (4 or 6), port (be16), address (16 bytes)}, the
 *     sender's address as the peer can reach it (its bound address, or the
 *     route's source with its port), then the payload: at most the MTU
 *     (<= RS_DG_MTU) less the header, else EMSGSIZE.  rrecvfrom reports
 *     that address; a reply to it resolves it the same way.  Receives that
 *     are not ours (short, bad magic) are dropped.  No flow control or
 *     acknowledgement: a datagram that finds no posted buffer is lost, as
 *     over UDP.  A receive buffer shorter than the datagram truncates it
 *     (MSG_TRUNC in rrecvmsg's msg_flags; MSG_TRUNC in flags returns the
 *     full length).
 *
 * Not here: SO_LINGER and TCP_NODELAY are stored, not applied; fork
 * support (librspreload's RDMAV_FORK_SAFE mode) is not.
 */

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include "common/lock_order.h"
#include <rdma/rsocket.h>

#define RS_NBUF 16
#define RS_BUFSZ (64 * 1024)
#define RS_SQ_DEPTH (2 * RS_NBUF + 4)
#define RS_CQ_DEPTH (RS_SQ_DEPTH + RS_NBUF + 4)
#define RS_IMM_FIN 0x80000000u
#define RS_IMM_CTRL 0x40000000u
#define RS_IMM_CREDITS 0xffffu
#define RS_MAXMAP 16
#define RS_MAGIC 0x52537631u /* "RSv1" */
#define RS_WR_RECV 0x1000000000ull /* wr_id: RS_WR_RECV | buffer index */
#define RS_WR_DATA 0x2000000000ull /* a send that holds a staging slot */
#define RS_CONNECT_MS 5000
#define RS_CLOSE_MS 2000

struct rs_hello {
	uint32_t magic;
	uint16_t nbuf;
	uint16_t pad;
	uint32_t bufsz;
} __attribute__((packed));

enum rs_state {
	RS_INIT,      /* made, maybe bound */
	RS_LISTENING,
	RS_RESOLVING, /* rconnect: address or route resolution running */
	RS_CONNECTING, /* rdma_connect / rdma_accept sent */
	RS_CONNECTED,
	RS_DISCONNECTED, /* the connection ended (peer or local disconnect) */
	RS_FAILED,       /* connect failed; err says why */
};

struct rs_rx {
	uint32_t idx, len, off;
};

enum { RS_DEST_RESOLVING, RS_DEST_READY, RS_DEST_FAILED };

struct rs_dest {
	struct sockaddr_storage addr; /* the peer's rsocket */
	struct sockaddr_storage src;  /* ours, as the peer sees it */
	struct rdma_cm_id *id;        /* SIDR resolution */
	struct ibv_ah *ah;
	uint32_t qpn, qkey;
	int state, err;
};

struct rsock {
	int fd; /* the socket number */
	int domain;
	struct sv_mutex lock;
	pthread_cond_t progressed; /* broadcast when events or completions were handled */
	bool polling;              /* a thread sleeps in rs_block's poll */
	unsigned rpolling;         /* threads asleep in rpoll on this rsocket */
	enum rs_state state;
	bool nonblock;
	int err;  /* pending error, SO_ERROR */
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	/* data path */
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	struct ibv_mr *rmr, *smr;
	uint8_t *rbuf, *sbuf;
	struct rs_rx rxq[RS_NBUF]; /* received data, oldest first */
	unsigned rx_head, rx_cnt;
	unsigned credits;     /* messages we may still send */
	unsigned owed;        /* credits to return to the peer */
	unsigned peer_bufsz;
	unsigned slot_head, slot_tail; /* staging slots: posted / completed */
	unsigned wr_out;      /* sends posted, not completed */
	bool fin_rcvd, fin_sent, fin_want, rd_shut, wr_shut, disconnect_sent;
	/* listener backlog */
	struct rdma_cm_id **bl;
	unsigned bl_cnt, bl_cap, bl_max;
	/* riomap: what this side mapped, what the peer mapped */
	struct rs_map {
		uint64_t off, addr, len;
		uint32_t rkey;
		struct ibv_mr *mr;
		bool used;
	} lmap[RS_MAXMAP], rmap[RS_MAXMAP];
	uint64_t next_off;
	/* options */
	int reuseaddr, keepalive, nodelay, rcvbuf, sndbuf, v6only;
	struct linger linger;
	/* SOCK_DGRAM */
	bool dgram, dg_bound, dg_connected;
	struct ibv_qp *dqp;
	unsigned dg_max; /* largest payload, once the device is known */
	struct rs_rx drxq[64]; /* received datagrams (rx_head, rx_cnt) */
	struct rs_dest **dests;
	unsigned ndest, capdest;
	struct sockaddr_storage dg_peer; /* rconnect's default destination */
};

/* ---- the table: socket number -> rsocket ---- */

static struct sv_mutex rs_table_lock = SV_MUTEX_INITIALIZER(SV_LOCK_RS_TABLE);
static struct rsock **rs_table;
static int rs_table_len;

static int rs_insert(struct rsock *rs)
{
	sv_mutex_lock(&rs_table_lock);
	if (rs->fd >= rs_table_len) {
		int n = rs_table_len ? rs_table_len : 64;
		while (n <= rs->fd)
			n *= 2;
		struct rsock **t = realloc(rs_table, (size_t)n * sizeof(*t));
		if (!t) {
			sv_mutex_unlock(&rs_table_lock);
			return -1;
		}
		memset(t + rs_table_len, 0, (size_t)(n - rs_table_len) * sizeof(*t));
		rs_table = t;
		rs_table_len = n;
	}
	rs_table[rs->fd] = rs;
	sv_mutex_unlock(&rs_table_lock);
	return 0;
}

static struct rsock *rs_get(int s)
{
	struct rsock *rs = NULL;
	sv_mutex_lock(&rs_table_lock);
	if (s >= 0 && s < rs_table_len)
		rs = rs_table[s];
	sv_mutex_unlock(&rs_table_lock);
	if (!rs)
		errno = EBADF;
	return rs;
}

static void rs_remove(struct rsock *rs)
{
	sv_mutex_lock(&rs_table_lock);
	if (rs->fd >= 0 && rs->fd < rs_table_len && rs_table[rs->fd] == rs)
		rs_table[rs->fd] = NULL;
	sv_mutex_unlock(&rs_table_lock);
}

#define RS_GET(rs, s, type)                                                    \
	struct rsock *rs = rs_get(s);                                          \
	if (!rs)                                                               \
		return (type)-1

static int rs_errno(int e)
{
	errno = e;
	return -1;
}

static long rs_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* ---- allocation ---- */

static struct rsock *rs_alloc(int domain)
{
	struct rsock *rs = calloc(1, sizeof(*rs));
	if (!rs)
		return NULL;
	rs->domain = domain;
	rs->fd = -1;
	sv_mutex_init(&rs->lock, SV_LOCK_RSOCKET);
	pthread_cond_init(&rs->progressed, NULL);
	rs->peer_bufsz = RS_BUFSZ;
	rs->rcvbuf = rs->sndbuf = RS_NBUF * RS_BUFSZ;
	rs->nodelay = 1;
	rs->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (rs->fd < 0)
		goto fail;
	rs->ch = rdma_create_event_channel();
	if (!rs->ch)
		goto fail;
	int fl = fcntl(rs->ch->fd, F_GETFL);
	fcntl(rs->ch->fd, F_SETFL, fl | O_NONBLOCK);
	return rs;
fail:
	if (rs->fd >= 0)
		close(rs->fd);
	free(rs);
	return NULL;
}

static void rs_free_qp(struct rsock *rs)
{
	for (int i = 0; i < RS_MAXMAP; i++) {
		if (rs->lmap[i].mr)
			ibv_dereg_mr(rs->lmap[i].mr);
		rs->lmap[i].mr = NULL;
		rs->lmap[i].used = false;
	}
	if (rs->id && rs->id->qp)
		rdma_destroy_qp(rs->id);
	if (rs->dqp)
		ibv_destroy_qp(rs->dqp);
	rs->dqp = NULL;
	if (rs->rmr)
		ibv_dereg_mr(rs->rmr);
	if (rs->smr)
		ibv_dereg_mr(rs->smr);
	if (rs->cq)
		ibv_destroy_cq(rs->cq);
	if (rs->cc)
		ibv_destroy_comp_channel(rs->cc);
	if (rs->pd)
		ibv_dealloc_pd(rs->pd);
	free(rs->rbuf);
	free(rs->sbuf);
	rs->rmr = rs->smr = NULL;
	rs->cq = NULL;
	rs->cc = NULL;
	rs->pd = NULL;
	rs->rbuf = rs->sbuf = NULL;
}

static void rs_free(struct rsock *rs)
{
	for (unsigned i = 0; i < rs->ndest; i++) {
		if (rs->dests[i]->ah)
			ibv_destroy_ah(rs->dests[i]->ah);
		if (rs->dests[i]->id)
			rdma_destroy_id(rs->dests[i]->id);
		free(rs->dests[i]);
	}
	free(rs->dests);
	rs_free_qp(rs);
	for (unsigned i = 0; i < rs->bl_cnt; i++) {
		rdma_reject(rs->bl[i], NULL, 0);
		rdma_destroy_id(rs->bl[i]);
	}
	free(rs->bl);
	if (rs->id)
		rdma_destroy_id(rs->id);
	if (rs->ch)
		rdma_destroy_event_channel(rs->ch);
	if (rs->fd >= 0)
		close(rs->fd);
	pthread_cond_destroy(&rs->progressed);
	sv_mutex_destroy(&rs->lock);
	free(rs);
}

static int rs_post_recv(struct rsock *rs, uint32_t idx)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(rs->rbuf + (size_t)idx * RS_BUFSZ),
		.length = RS_BUFSZ,
		.lkey = rs->rmr->lkey,
	};
	struct ibv_recv_wr wr = {.wr_id = RS_WR_RECV | idx, .sg_list = &sge, .num_sge = 1}, *bad;
	return ibv_post_recv(rs->id->qp, &wr, &bad);
}

/* PD, CQ, QP, buffers on rs->id (address resolved); receives posted. */
/*
 * A socket's PD, CQ (its completion channel non-blocking), and its receive
 * and send areas, registered: the same for the stream (RC) and datagram (UD)
 * kinds.  0, or -1 with what was made left in rs for the caller's cleanup.
 */
static int rs_alloc_buffers(struct rsock *rs, struct ibv_context *ctx, int cqe, size_t rlen,
			    size_t slen)
{
	rs->pd = ibv_alloc_pd(ctx);
	rs->cc = rs->pd ? ibv_create_comp_channel(ctx) : NULL;
	rs->cq = rs->cc ? ibv_create_cq(ctx, cqe, rs, rs->cc, 0) : NULL;
	if (!rs->cq)
		return -1;
	int fl = fcntl(rs->cc->fd, F_GETFL);
	fcntl(rs->cc->fd, F_SETFL, fl | O_NONBLOCK);
	rs->rbuf = malloc(rlen);
	rs->sbuf = malloc(slen);
	if (!rs->rbuf || !rs->sbuf)
		return -1;
	rs->rmr = ibv_reg_mr(rs->pd, rs->rbuf, rlen, IBV_ACCESS_LOCAL_WRITE);
	rs->smr = ibv_reg_mr(rs->pd, rs->sbuf, slen, 0);
	return rs->rmr && rs->smr ? 0 : -1;
}

static int rs_create_qp(struct rsock *rs)
{
	struct ibv_context *ctx = rs->id->verbs;
	if (!ctx)
		return ENODEV;
	if (rs_alloc_buffers(rs, ctx, RS_CQ_DEPTH, (size_t)RS_NBUF * RS_BUFSZ,
			     (size_t)RS_NBUF * RS_BUFSZ))
		goto fail;
	struct ibv_qp_init_attr a = {
		.send_cq = rs->cq,
		.recv_cq = rs->cq,
		.cap = {.max_send_wr = RS_SQ_DEPTH, .max_recv_wr = RS_NBUF,
			.max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1,
	};
	if (rdma_create_qp(rs->id, rs->pd, &a))
		goto fail;
	for (uint32_t i = 0; i < RS_NBUF; i++)
		if (rs_post_recv(rs, i))
			goto fail;
	if (ibv_req_notify_cq(rs->cq, 0))
		goto fail;
	rs->credits = RS_NBUF;
	return 0;
fail:;
	int e = errno ? errno : ENOMEM;
	rs_free_qp(rs);
	return e;
}

static void rs_hello(struct rdma_conn_param *p, struct rs_hello *h)
{
	h->magic = htonl(RS_MAGIC);
	h->nbuf = htons(RS_NBUF);
	h->pad = 0;
	h->bufsz = htonl(RS_BUFSZ);
	memset(p, 0, sizeof(*p));
	p->private_data = h;
	p->private_data_len = sizeof(*h);
	p->responder_resources = 1;
	p->initiator_depth = 1;
	p->retry_count = 7;
	p->rnr_retry_count = 7;
}

static void rs_learn_hello(struct rsock *rs, const void *pd, uint8_t len)
{
	struct rs_hello h;
	if (!pd || len < sizeof(h))
		return;
	memcpy(&h, pd, sizeof(h));
	if (ntohl(h.magic) != RS_MAGIC)
		return;
	unsigned n = ntohs(h.nbuf), sz = ntohl(h.bufsz);
	if (n >= 2 && n <= RS_NBUF)
		rs->credits = n;
	if (sz && sz < RS_BUFSZ)
		rs->peer_bufsz = sz;
}

/* ---- progress: CM events and completions; rs->lock held ---- */

static int rs_post_send(struct rsock *rs, const uint8_t *slot, uint32_t len, uint32_t bits);

static void rs_cm_event(struct rsock *rs, struct rdma_cm_event *ev)
{
	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rdma_resolve_route(rs->id, RS_CONNECT_MS)) {
			rs->state = RS_FAILED;
			rs->err = errno;
		}
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED: {
		int e = rs_create_qp(rs);
		struct rdma_conn_param p;
		struct rs_hello h;
		rs_hello(&p, &h);
		if (!e && rdma_connect(rs->id, &p))
			e = errno;
		if (e) {
			rs->state = RS_FAILED;
			rs->err = e;
		} else {
			rs->state = RS_CONNECTING;
		}
		break;
	}
	case RDMA_CM_EVENT_ESTABLISHED:
		if (rs->state == RS_CONNECTING) {
			rs_learn_hello(rs, ev->param.conn.private_data, ev->param.conn.private_data_len);
			rs->state = RS_CONNECTED;
		}
		break;
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		rs->state = RS_FAILED;
		rs->err = ECONNREFUSED;
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		rs->state = RS_FAILED;
		rs->err = EHOSTUNREACH;
		break;
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		/* (one the socket cannot take was refused by rs_cm_one) */
		if (rs->bl_cnt == rs->bl_cap) {
			unsigned n = rs->bl_cap ? rs->bl_cap * 2 : 8;
			struct rdma_cm_id **b = realloc(rs->bl, n * sizeof(*b));
			if (!b) {
				rdma_reject(ev->id, NULL, 0);
				break;
			}
			rs->bl = b;
			rs->bl_cap = n;
		}
		rs->bl[rs->bl_cnt++] = ev->id;
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		if (rs->state == RS_CONNECTED || rs->state == RS_CONNECTING) {
			rs->state = RS_DISCONNECTED;
			if (!rs->disconnect_sent) {
				rs->disconnect_sent = true;
				rdma_disconnect(rs->id);
			}
		}
		break;
	default:
		break;
	}
}

/* A CM event of a stream socket, handled and acknowledged. */
static void rs_cm_one(struct rsock *rs, struct rdma_cm_event *ev)
{
	struct rdma_cm_event copy = *ev;
	bool reject = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST &&
		      (rs->state != RS_LISTENING || rs->bl_cnt >= rs->bl_max);

	if (reject) {
		rdma_reject(ev->id, NULL, 0);
		rdma_ack_cm_event(ev);
		rdma_destroy_id(copy.id);
		return;
	}
	rs_cm_event(rs, ev);
	rdma_ack_cm_event(ev);
}

/* Every CM event waiting on rs's channel, handed to fn (which acknowledges it); how many. */
static int rs_cm_each(struct rsock *rs, void (*fn)(struct rsock *, struct rdma_cm_event *))
{
	struct rdma_cm_event *ev;
	int seen = 0;

	while (rdma_get_cm_event(rs->ch, &ev) == 0) {
		seen++;
		fn(rs, ev);
	}
	return seen;
}

/*
 * A zero-length message: returns owed credits, maybe FIN.  Credits go back
 * once half the buffers are owed, or sooner when the peer may be starved:
 * it holds at most RS_NBUF - (unread + owed) credits, and data needs two.
 */
static void rs_send_ctrl(struct rsock *rs)
{
	if (rs->state != RS_CONNECTED || rs->credits < 1 || rs->wr_out >= RS_SQ_DEPTH)
		return;
	bool fin = rs->fin_want && !rs->fin_sent;
	bool starved = rs->owed && rs->rx_cnt + rs->owed >= RS_NBUF - 1;
	if (fin || starved || rs->owed >= RS_NBUF / 2)
		rs_post_send(rs, NULL, 0, fin ? RS_IMM_FIN : 0);
}

/* A control message: the peer mapped (type 1) or unmapped (2) a region. */
struct rs_ctrl {
	uint32_t type;
	uint32_t rkey;
	uint64_t off, addr, len;
} __attribute__((packed));

static void rs_ctrl_msg(struct rsock *rs, const uint8_t *p, uint32_t len)
{
	struct rs_ctrl c;
	if (len < sizeof(c))
		return;
	memcpy(&c, p, sizeof(c));
	uint64_t off = be64toh(c.off);
	if (ntohl(c.type) == 1) {
		for (int i = 0; i < RS_MAXMAP; i++) {
			struct rs_map *m = &rs->rmap[i];
			if (!m->used) {
				*m = (struct rs_map){.off = off, .addr = be64toh(c.addr),
						     .len = be64toh(c.len), .rkey = ntohl(c.rkey),
						     .used = true};
				return;
			}
		}
	} else if (ntohl(c.type) == 2) {
		for (int i = 0; i < RS_MAXMAP; i++)
			if (rs->rmap[i].used && rs->rmap[i].off == off)
				rs->rmap[i].used = false;
	}
}

/*
 * The completion channel's events acknowledged, then every completion of
 * rs's CQ handed to fn (of the stream or the datagram kind); how many.
 */
static int rs_cq_each(struct rsock *rs, void (*fn)(struct rsock *, const struct ibv_wc *))
{
	int seen = 0;
	if (!rs->cq)
		return 0;
	struct ibv_cq *evcq;
	void *evctx;
	while (ibv_get_cq_event(rs->cc, &evcq, &evctx) == 0)
		ibv_ack_cq_events(evcq, 1);
	struct ibv_wc wc[16];
	int n;
	while ((n = ibv_poll_cq(rs->cq, 16, wc)) > 0) {
		seen += n;
		for (int i = 0; i < n; i++)
			fn(rs, &wc[i]);
	}
	return seen;
}

/* A completion of a stream socket: a message in, or a send done. */
static void rs_stream_wc(struct rsock *rs, const struct ibv_wc *w)
{
	if (w->wr_id & RS_WR_RECV) {
		if (w->status != IBV_WC_SUCCESS) {
			if (w->status != IBV_WC_WR_FLUSH_ERR && !rs->err)
				rs->err = ECONNRESET;
			return;
		}
		uint32_t imm = ntohl(w->imm_data);
		rs->credits += imm & RS_IMM_CREDITS;
		if (imm & RS_IMM_FIN)
			rs->fin_rcvd = true;
		uint32_t idx = (uint32_t)(w->wr_id & 0xffff);
		if (imm & RS_IMM_CTRL)
			rs_ctrl_msg(rs, rs->rbuf + (size_t)idx * RS_BUFSZ, w->byte_len);
		if (w->byte_len == 0 || rs->rd_shut || (imm & RS_IMM_CTRL)) {
			if (rs_post_recv(rs, idx) == 0)
				rs->owed++;
		} else {
			struct rs_rx *r = &rs->rxq[(rs->rx_head + rs->rx_cnt) % RS_NBUF];
			r->idx = idx;
			r->len = w->byte_len;
			r->off = 0;
			rs->rx_cnt++;
		}
	} else {
		rs->wr_out--;
		if (w->wr_id & RS_WR_DATA)
			rs->slot_tail++;
		if (w->status != IBV_WC_SUCCESS && w->status != IBV_WC_WR_FLUSH_ERR) {
			if (!rs->err)
				rs->err = ECONNRESET;
			if (rs->state == RS_CONNECTED)
				rs->state = RS_DISCONNECTED;
		}
	}
}

static int rs_cq_drain(struct rsock *rs)
{
	if (!rs->cq)
		return 0;
	int seen = rs_cq_each(rs, rs_stream_wc);
	rs_send_ctrl(rs);
	return seen;
}

/*
 * CM events and completions handled; how many.  What one thread handles may
 * be what another waits for: the waiters on the condition variable are
 * woken, and a thread asleep in poll(2) through the eventfd.
 */
static void rs_dg_cm_one(struct rsock *rs, struct rdma_cm_event *ev);
static int rs_dg_cq_drain(struct rsock *rs);

static int rs_progress(struct rsock *rs)
{
	int n = rs_cm_each(rs, rs->dgram ? rs_dg_cm_one : rs_cm_one);
	n += rs->dgram ? rs_dg_cq_drain(rs) : rs_cq_drain(rs);
	if (n) {
		pthread_cond_broadcast(&rs->progressed);
		if (rs->polling || rs->rpolling)
			eventfd_write(rs->fd, 1);
	}
	return n;
}

static void rs_clear_wake(struct rsock *rs)
{
	eventfd_t v;
	eventfd_read(rs->fd, &v); /* non-blocking: EAGAIN when not woken */
}

/*
 * Sleep until something may have changed for rs (a completion or CM event),
 * at most timeout_ms (< 0: 1 s, then the caller looks again).  Drops the
 * lock while it sleeps.  One thread at a time sleeps in poll(2) on the
 * completion channel, the CM channel and the eventfd; the others wait on
 * the condition variable, which any thread that handles something
 * broadcasts.
 */
static void rs_block(struct rsock *rs, int timeout_ms)
{
	int ms = timeout_ms < 0 || timeout_ms > 1000 ? 1000 : timeout_ms;
	if (rs->polling) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += ms / 1000;
		ts.tv_nsec += (long)(ms % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		sv_cond_timedwait(&rs->progressed, &rs->lock, &ts);
		rs_progress(rs);
		return;
	}
	struct pollfd p[3];
	nfds_t n = 0;
	if (rs->cq) {
		ibv_req_notify_cq(rs->cq, 0);
		/* look again after arming: what came in before raises no event */
		if (rs_progress(rs))
			return;
		p[n++] = (struct pollfd){.fd = rs->cc->fd, .events = POLLIN};
	}
	p[n++] = (struct pollfd){.fd = rs->ch->fd, .events = POLLIN};
	p[n++] = (struct pollfd){.fd = rs->fd, .events = POLLIN};
	rs->polling = true;
	sv_mutex_unlock(&rs->lock);
	poll(p, n, ms);
	sv_mutex_lock(&rs->lock);
	rs->polling = false;
	rs_clear_wake(rs);
	rs_progress(rs);
	pthread_cond_broadcast(&rs->progressed); /* another thread may poll now */
}

/* ---- sending ---- */

static int rs_post_send(struct rsock *rs, const uint8_t *slot, uint32_t len, uint32_t bits)
{
	bool fin = bits & RS_IMM_FIN;
	struct ibv_sge sge = {.addr = (uintptr_t)slot, .length = len, .lkey = rs->smr->lkey};
	uint32_t imm = (rs->owed > RS_IMM_CREDITS ? RS_IMM_CREDITS : rs->owed) | bits;
	struct ibv_send_wr wr = {
		.wr_id = slot ? RS_WR_DATA : 0,
		.sg_list = len ? &sge : NULL,
		.num_sge = len ? 1 : 0,
		.opcode = IBV_WR_SEND_WITH_IMM,
		.send_flags = IBV_SEND_SIGNALED,
		.imm_data = htonl(imm),
	}, *bad;
	int r = ibv_post_send(rs->id->qp, &wr, &bad);
	if (r)
		return r;
	rs->owed -= imm & RS_IMM_CREDITS;
	rs->credits--;
	rs->wr_out++;
	if (slot)
		rs->slot_head++;
	if (fin)
		rs->fin_sent = true;
	return 0;
}

static bool rs_can_send(struct rsock *rs)
{
	return rs->credits >= 2 && rs->slot_head - rs->slot_tail < RS_NBUF &&
	       rs->wr_out < RS_SQ_DEPTH - 1;
}

/* Waits for an rconnect in progress; rs->lock held. */
static int rs_wait_connected(struct rsock *rs, bool nonblock)
{
	long end = rs_now_ms() + RS_CONNECT_MS * 3;
	rs_progress(rs);
	while (rs->state == RS_RESOLVING || rs->state == RS_CONNECTING) {
		if (nonblock)
			return EAGAIN;
		if (rs_now_ms() > end)
			return ETIMEDOUT;
		rs_block(rs, -1);
	}
	return 0;
}

static size_t iov_total(const struct iovec *iov, int cnt)
{
	size_t t = 0;
	for (int i = 0; i < cnt; i++)
		t += iov[i].iov_len;
	return t;
}

static ssize_t rs_dg_sendv(struct rsock *rs, const struct sockaddr *to, const struct iovec *iov,
			   int cnt, int flags);
static ssize_t rs_dg_recvv(struct rsock *rs, const struct iovec *iov, int cnt, int flags,
			   struct sockaddr *from, socklen_t *flen, int *mflags);

static ssize_t rs_sendv(int s, const struct iovec *iov, int cnt, int flags)
{
	RS_GET(rs, s, ssize_t);
	if (cnt < 0)
		return rs_errno(EINVAL);
	if (rs->dgram)
		return rs_dg_sendv(rs, NULL, iov, cnt, flags);
	sv_mutex_lock(&rs->lock);
	bool nb = rs->nonblock || (flags & MSG_DONTWAIT);
	int e = rs_wait_connected(rs, nb);
	size_t total = iov_total(iov, cnt), done = 0;
	int vi = 0;
	size_t voff = 0;
	if (e)
		goto out;
	while (done < total || total == 0) {
		if (rs->state == RS_FAILED) {
			e = rs->err ? rs->err : ECONNREFUSED;
			break;
		}
		if (rs->state != RS_CONNECTED || rs->wr_shut) {
			e = rs->state == RS_INIT || rs->state == RS_LISTENING ? ENOTCONN : EPIPE;
			break;
		}
		if (rs->err) {
			e = rs->err;
			break;
		}
		if (total == 0)
			break;
		if (!rs_can_send(rs)) {
			if (nb) {
				if (!done)
					e = EAGAIN;
				break;
			}
			rs_block(rs, -1);
			continue;
		}
		uint8_t *slot = rs->sbuf + (size_t)(rs->slot_head % RS_NBUF) * RS_BUFSZ;
		size_t len = 0, room = rs->peer_bufsz;
		while (len < room && vi < cnt) {
			size_t n = iov[vi].iov_len - voff;
			if (n > room - len)
				n = room - len;
			memcpy(slot + len, (const uint8_t *)iov[vi].iov_base + voff, n);
			len += n;
			voff += n;
			if (voff == iov[vi].iov_len) {
				vi++;
				voff = 0;
			}
		}
		if (rs_post_send(rs, slot, (uint32_t)len, 0)) {
			e = EPIPE;
			break;
		}
		done += len;
		rs_progress(rs); /* wakes other threads for what it handled */
	}
out:
	sv_mutex_unlock(&rs->lock);
	if (done)
		return (ssize_t)done;
	if (e)
		return rs_errno(e);
	return 0;
}

/* ---- receiving ---- */

static ssize_t rs_recvv(int s, const struct iovec *iov, int cnt, int flags)
{
	RS_GET(rs, s, ssize_t);
	if (cnt < 0)
		return rs_errno(EINVAL);
	if (rs->dgram)
		return rs_dg_recvv(rs, iov, cnt, flags, NULL, NULL, NULL);
	sv_mutex_lock(&rs->lock);
	bool nb = rs->nonblock || (flags & MSG_DONTWAIT);
	bool peek = flags & MSG_PEEK, waitall = (flags & MSG_WAITALL) && !peek && !nb;
	size_t total = iov_total(iov, cnt), done = 0;
	int e = rs_wait_connected(rs, nb);
	if (e)
		goto out;
	for (;;) {
		if (rs->state == RS_INIT || rs->state == RS_LISTENING) {
			e = ENOTCONN;
			break;
		}
		if (rs->state == RS_FAILED) {
			e = rs->err ? rs->err : ECONNREFUSED;
			break;
		}
		if (rs->rd_shut)
			break;
		/* the iov cursor after `done` bytes */
		int vi = 0;
		size_t voff = done;
		while (vi < cnt && voff >= iov[vi].iov_len) {
			voff -= iov[vi].iov_len;
			vi++;
		}
		unsigned q = 0;
		size_t poff = 0;
		while (q < rs->rx_cnt && vi < cnt) {
			struct rs_rx *r = &rs->rxq[(rs->rx_head + q) % RS_NBUF];
			size_t off = peek ? r->off + poff : r->off;
			size_t avail = r->len - off;
			size_t want = iov[vi].iov_len - voff;
			size_t n = avail < want ? avail : want;
			memcpy((uint8_t *)iov[vi].iov_base + voff,
			       rs->rbuf + (size_t)r->idx * RS_BUFSZ + off, n);
			voff += n;
			if (voff == iov[vi].iov_len) {
				vi++;
				voff = 0;
			}
			done += n;
			if (peek) {
				poff += n;
				if (n == avail) {
					q++;
					poff = 0;
				}
				continue;
			}
			r->off += (uint32_t)n;
			if (r->off == r->len) {
				uint32_t idx = r->idx;
				rs->rx_head = (rs->rx_head + 1) % RS_NBUF;
				rs->rx_cnt--;
				if (rs_post_recv(rs, idx) == 0)
					rs->owed++;
			}
		}
		if (done && !peek)
			rs_send_ctrl(rs);
		if (done == total || (done && !waitall))
			break;
		if (rs->fin_rcvd || rs->state == RS_DISCONNECTED)
			break; /* EOF (after what was copied) */
		if (rs->err) {
			e = rs->err;
			break;
		}
		if (nb) {
			e = EAGAIN;
			break;
		}
		rs_block(rs, -1);
	}
out:
	sv_mutex_unlock(&rs->lock);
	if (done)
		return (ssize_t)done;
	if (e)
		return rs_errno(e);
	return 0;
}

static void rs_copy_addr(struct sockaddr *dst, socklen_t *len, const struct sockaddr *src);

/* ---- SOCK_DGRAM: datagrams over one UD QP (see the header comment) ---- */

#define RS_DG_MAGIC 0x52536431u /* "RSd1" */
#define RS_DG_NBUF 64
#define RS_DG_NSEND 32
#define RS_DG_MTU 4096
#define RS_DG_GRH 40
#define RS_DG_SLOT (RS_DG_GRH + RS_DG_MTU)

/* Precedes every datagram's payload: the sender's socket address. */
struct rs_dg_hdr {
	uint32_t magic;
	uint16_t family; /* 4 or 6 */
	uint16_t port;   /* network order */
	uint8_t addr[16];
} __attribute__((packed));

#define RS_DG_MAX (RS_DG_MTU - (int)sizeof(struct rs_dg_hdr))
_Static_assert(RS_DG_NBUF == sizeof(((struct rsock *)0)->drxq) / sizeof(struct rs_rx),
	       "drxq holds every receive buffer");

static bool rs_sa_eq(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
	return x->sin6_port == y->sin6_port && !memcmp(&x->sin6_addr, &y->sin6_addr, 16);
}

static socklen_t rs_sa_len(const struct sockaddr *a)
{
	return a->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static bool rs_sa_any(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)(const void *)a)->sin_addr.s_addr == htonl(INADDR_ANY);
	if (a->sa_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)(const void *)a)->sin6_addr, &in6addr_any, 16);
	return true;
}

static void rs_sa_set_port(struct sockaddr *a, uint16_t port_be)
{
	if (a->sa_family == AF_INET)
		((struct sockaddr_in *)(void *)a)->sin_port = port_be;
	else if (a->sa_family == AF_INET6)
		((struct sockaddr_in6 *)(void *)a)->sin6_port = port_be;
}

static void rs_dg_post_recv(struct rsock *rs, uint32_t idx)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(rs->rbuf + (size_t)idx * RS_DG_SLOT),
		.length = RS_DG_SLOT,
		.lkey = rs->rmr->lkey,
	};
	struct ibv_recv_wr wr = {.wr_id = RS_WR_RECV | idx, .sg_list = &sge, .num_sge = 1}, *bad;
	ibv_post_recv(rs->dqp, &wr, &bad);
}

/* The UD QP and its buffers on ctx (one device per datagram rsocket). */
static int rs_dg_setup(struct rsock *rs, struct ibv_context *ctx, uint8_t port)
{
	if (!ctx)
		return ENODEV;
	if (rs->dqp)
		return rs->pd->context == ctx ? 0 : EHOSTUNREACH;
	struct ibv_port_attr pa;
	if (ibv_query_port(ctx, port ? port : 1, &pa))
		return errno ? errno : ENODEV;
	unsigned mtu = 128u << pa.active_mtu;
	rs->dg_max = (mtu > RS_DG_MTU ? RS_DG_MTU : mtu) - (unsigned)sizeof(struct rs_dg_hdr);
	if (rs_alloc_buffers(rs, ctx, RS_DG_NBUF + RS_DG_NSEND + 4, (size_t)RS_DG_NBUF * RS_DG_SLOT,
			     (size_t)RS_DG_NSEND * RS_DG_MTU))
		goto fail;
	struct ibv_qp_init_attr a = {
		.send_cq = rs->cq,
		.recv_cq = rs->cq,
		.cap = {.max_send_wr = RS_DG_NSEND, .max_recv_wr = RS_DG_NBUF,
			.max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_UD,
		.sq_sig_all = 1,
	};
	rs->dqp = ibv_create_qp(rs->pd, &a);
	if (!rs->dqp)
		goto fail;
	struct ibv_qp_attr m = {.qp_state = IBV_QPS_INIT, .pkey_index = 0,
				.port_num = port ? port : 1, .qkey = RDMA_UDP_QKEY};
	if (ibv_modify_qp(rs->dqp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		goto fail;
	m = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR};
	if (ibv_modify_qp(rs->dqp, &m, IBV_QP_STATE))
		goto fail;
	/* a random first PSN, as everywhere softverbs picks one (SECURITY.md) */
	uint32_t psn = 0;

	if (getrandom(&psn, sizeof(psn), 0) != (ssize_t)sizeof(psn))
		psn = (uint32_t)time(NULL) * 2654435761u;
	m = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .sq_psn = psn & 0xffffff};
	if (ibv_modify_qp(rs->dqp, &m, IBV_QP_STATE | IBV_QP_SQ_PSN))
		goto fail;
	for (uint32_t i = 0; i < RS_DG_NBUF; i++)
		rs_dg_post_recv(rs, i);
	if (ibv_req_notify_cq(rs->cq, 0))
		goto fail;
	return 0;
fail:;
	int e = errno ? errno : ENOMEM;
	rs_free_qp(rs);
	return e;
}

/* Binds the service id (port 0: any) to local address a and listens. */
static int rs_dg_bind(struct rsock *rs, const struct sockaddr *a)
{
	if (rdma_bind_addr(rs->id, (struct sockaddr *)a) || rdma_listen(rs->id, 64))
		return errno;
	rs->dg_bound = true;
	if (rs->id->verbs)
		return rs_dg_setup(rs, rs->id->verbs, rs->id->port_num);
	return 0;
}

static struct rs_dest *rs_dg_find(struct rsock *rs, const struct sockaddr *a)
{
	for (unsigned i = 0; i < rs->ndest; i++)
		if (rs_sa_eq((struct sockaddr *)&rs->dests[i]->addr, a))
			return rs->dests[i];
	return NULL;
}

static void rs_dg_drop(struct rsock *rs, struct rs_dest *d)
{
	for (unsigned i = 0; i < rs->ndest; i++)
		if (rs->dests[i] == d) {
			rs->dests[i] = rs->dests[--rs->ndest];
			break;
		}
	if (d->ah)
		ibv_destroy_ah(d->ah);
	if (d->id)
		rdma_destroy_id(d->id);
	free(d);
}

/* A destination, found or (its SIDR resolution started) made. */
static int rs_dg_dest(struct rsock *rs, const struct sockaddr *a, struct rs_dest **out)
{
	struct rs_dest *d = rs_dg_find(rs, a);
	if (d) {
		*out = d;
		return 0;
	}
	if (rs->ndest == rs->capdest) {
		unsigned n = rs->capdest ? rs->capdest * 2 : 8;
		struct rs_dest **t = realloc(rs->dests, n * sizeof(*t));
		if (!t)
			return ENOMEM;
		rs->dests = t;
		rs->capdest = n;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		return ENOMEM;
	memcpy(&d->addr, a, rs_sa_len(a));
	if (rdma_create_id(rs->ch, &d->id, d, RDMA_PS_UDP)) {
		int e = errno;
		free(d);
		return e;
	}
	struct sockaddr *src = NULL;
	struct sockaddr_storage ls;
	if (rs->dg_bound) {
		memcpy(&ls, rdma_get_local_addr(rs->id), sizeof(ls));
		rs_sa_set_port((struct sockaddr *)&ls, 0);
		if (!rs_sa_any((struct sockaddr *)&ls))
			src = (struct sockaddr *)&ls;
	}
	if (rdma_resolve_addr(d->id, src, (struct sockaddr *)a, RS_CONNECT_MS)) {
		int e = errno;
		rdma_destroy_id(d->id);
		free(d);
		return e;
	}
	rs->dests[rs->ndest++] = d;
	*out = d;
	return 0;
}

static void rs_dg_fail(struct rs_dest *d, int e)
{
	if (d->state == RS_DEST_RESOLVING) {
		d->state = RS_DEST_FAILED;
		d->err = e;
	}
}

static void rs_dg_event(struct rsock *rs, struct rdma_cm_event *ev)
{
	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		int e = rs_dg_setup(rs, ev->id->verbs, ev->id->port_num);
		struct rdma_conn_param p = {.qp_num = e ? 0 : rs->dqp->qp_num};
		if (e || rdma_accept(ev->id, &p))
			rdma_reject(ev->id, NULL, 0);
		return;
	}
	if (ev->id == rs->id)
		return;
	struct rs_dest *d = ev->id->context;
	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rdma_resolve_route(d->id, RS_CONNECT_MS))
			rs_dg_fail(d, errno);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED: {
		int e = 0;
		struct sockaddr *la = rdma_get_local_addr(d->id);
		if (!rs->dg_bound) {
			struct sockaddr_storage b;
			memcpy(&b, la, sizeof(b));
			rs_sa_set_port((struct sockaddr *)&b, 0);
			e = rs_dg_bind(rs, (struct sockaddr *)&b);
		}
		if (!e)
			e = rs_dg_setup(rs, d->id->verbs, d->id->port_num);
		if (!e) {
			/* our address as the peer sees it: the route's source, our port */
			struct sockaddr *ours = rdma_get_local_addr(rs->id);
			memcpy(&d->src, rs_sa_any(ours) ? la : ours, sizeof(d->src));
			rs_sa_set_port((struct sockaddr *)&d->src, rdma_get_src_port(rs->id));
			struct rdma_conn_param p = {.qp_num = rs->dqp->qp_num};
			if (rdma_connect(d->id, &p))
				e = errno;
		}
		if (e)
			rs_dg_fail(d, e);
		break;
	}
	case RDMA_CM_EVENT_ESTABLISHED:
		if (d->state != RS_DEST_RESOLVING)
			break;
		d->ah = ibv_create_ah(rs->pd, &ev->param.ud.ah_attr);
		if (!d->ah) {
			rs_dg_fail(d, errno ? errno : ENOMEM);
			break;
		}
		d->qpn = ev->param.ud.qp_num;
		d->qkey = ev->param.ud.qkey;
		d->state = RS_DEST_READY;
		break;
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		rs_dg_fail(d, ECONNREFUSED);
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		rs_dg_fail(d, EHOSTUNREACH);
		break;
	default:
		break;
	}
}

/* A CM event of a datagram socket, handled and acknowledged. */
static void rs_dg_cm_one(struct rsock *rs, struct rdma_cm_event *ev)
{
	struct rdma_cm_id *req = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST ? ev->id : NULL;

	rs_dg_event(rs, ev);
	rdma_ack_cm_event(ev);
	if (req)
		rdma_destroy_id(req); /* the SIDR reply went out in rdma_accept */
}

/* A completion of a datagram socket: a datagram in, or a send done. */
static void rs_dg_wc(struct rsock *rs, const struct ibv_wc *w)
{
	if (!(w->wr_id & RS_WR_RECV)) {
		rs->wr_out--;
		rs->slot_tail++;
		return;
	}
	uint32_t idx = (uint32_t)(w->wr_id & 0xffff);
	if (w->status == IBV_WC_WR_FLUSH_ERR)
		return;
	struct rs_dg_hdr h;
	const uint8_t *b = rs->rbuf + (size_t)idx * RS_DG_SLOT + RS_DG_GRH;
	if (w->status != IBV_WC_SUCCESS || w->byte_len < RS_DG_GRH + sizeof(h) ||
	    (memcpy(&h, b, sizeof(h)), ntohl(h.magic) != RS_DG_MAGIC)) {
		rs_dg_post_recv(rs, idx); /* not ours: dropped */
		return;
	}
	struct rs_rx *r = &rs->drxq[(rs->rx_head + rs->rx_cnt) % RS_DG_NBUF];
	r->idx = idx;
	r->len = w->byte_len - RS_DG_GRH - (uint32_t)sizeof(h);
	r->off = 0;
	rs->rx_cnt++;
}

static int rs_dg_cq_drain(struct rsock *rs)
{
	return rs_cq_each(rs, rs_dg_wc);
}

static ssize_t rs_dg_sendv(struct rsock *rs, const struct sockaddr *to, const struct iovec *iov,
			   int cnt, int flags)
{
	sv_mutex_lock(&rs->lock);
	bool nb = rs->nonblock || (flags & MSG_DONTWAIT);
	size_t total = iov_total(iov, cnt);
	long end = rs_now_ms() + RS_CONNECT_MS * 3;
	int e = 0;
	struct rs_dest *d = NULL;
	if (!to) {
		if (!rs->dg_connected) {
			e = EDESTADDRREQ;
			goto out;
		}
		to = (struct sockaddr *)&rs->dg_peer;
	}
	if (to->sa_family != AF_INET && to->sa_family != AF_INET6) {
		e = EAFNOSUPPORT;
		goto out;
	}
	if (total > (rs->dg_max ? rs->dg_max : (size_t)RS_DG_MAX)) {
		e = EMSGSIZE;
		goto out;
	}
	e = rs_dg_dest(rs, to, &d);
	if (e)
		goto out;
	for (;;) {
		rs_progress(rs);
		if (d->state == RS_DEST_FAILED) {
			e = d->err ? d->err : ECONNREFUSED;
			rs_dg_drop(rs, d); /* the next send tries again */
			goto out;
		}
		if (d->state == RS_DEST_READY && rs->slot_head - rs->slot_tail < RS_DG_NSEND)
			break;
		if (nb) {
			e = EAGAIN;
			goto out;
		}
		if (d->state == RS_DEST_RESOLVING && rs_now_ms() > end) {
			e = ETIMEDOUT;
			rs_dg_drop(rs, d);
			goto out;
		}
		rs_block(rs, -1);
	}
	if (total > rs->dg_max) {
		e = EMSGSIZE;
		goto out;
	}
	uint8_t *slot = rs->sbuf + (size_t)(rs->slot_head % RS_DG_NSEND) * RS_DG_MTU;
	struct rs_dg_hdr h = {.magic = htonl(RS_DG_MAGIC)};
	const struct sockaddr *src = (struct sockaddr *)&d->src;
	if (src->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const void *)src;
		h.family = 6;
		h.port = s6->sin6_port;
		memcpy(h.addr, &s6->sin6_addr, 16);
	} else {
		const struct sockaddr_in *s4 = (const void *)src;
		h.family = 4;
		h.port = s4->sin_port;
		memcpy(h.addr, &s4->sin_addr, 4);
	}
	memcpy(slot, &h, sizeof(h));
	size_t off = sizeof(h);
	for (int i = 0; i < cnt; i++) {
		memcpy(slot + off, iov[i].iov_base, iov[i].iov_len);
		off += iov[i].iov_len;
	}
	struct ibv_sge sge = {.addr = (uintptr_t)slot, .length = (uint32_t)off, .lkey = rs->smr->lkey};
	struct ibv_send_wr wr = {
		.wr_id = RS_WR_DATA,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.ud = {.ah = d->ah, .remote_qpn = d->qpn, .remote_qkey = d->qkey},
	}, *bad;
	e = ibv_post_send(rs->dqp, &wr, &bad);
	if (!e) {
		rs->slot_head++;
		rs->wr_out++;
	}
out:
	sv_mutex_unlock(&rs->lock);
	return e ? rs_errno(e) : (ssize_t)total;
}

static ssize_t rs_dg_recvv(struct rsock *rs, const struct iovec *iov, int cnt, int flags,
			   struct sockaddr *from, socklen_t *flen, int *mflags)
{
	sv_mutex_lock(&rs->lock);
	bool nb = rs->nonblock || (flags & MSG_DONTWAIT);
	int e = 0;
	ssize_t ret = 0;
	for (;;) {
		rs_progress(rs);
		if (rs->rx_cnt)
			break;
		if (nb) {
			e = EAGAIN;
			goto out;
		}
		rs_block(rs, -1);
	}
	struct rs_rx *r = &rs->drxq[rs->rx_head];
	const uint8_t *b = rs->rbuf + (size_t)r->idx * RS_DG_SLOT + RS_DG_GRH;
	struct rs_dg_hdr h;
	memcpy(&h, b, sizeof(h));
	b += sizeof(h);
	size_t done = 0;
	for (int i = 0; i < cnt && done < r->len; i++) {
		size_t n = r->len - done < iov[i].iov_len ? r->len - done : iov[i].iov_len;
		memcpy(iov[i].iov_base, b + done, n);
		done += n;
	}
	if (mflags)
		*mflags = done < r->len ? MSG_TRUNC : 0;
	ret = (flags & MSG_TRUNC) ? (ssize_t)r->len : (ssize_t)done;
	if (from && flen) {
		struct sockaddr_storage ss = {0};
		if (h.family == 6) {
			struct sockaddr_in6 *s6 = (void *)&ss;
			s6->sin6_family = AF_INET6;
			s6->sin6_port = h.port;
			memcpy(&s6->sin6_addr, h.addr, 16);
		} else {
			struct sockaddr_in *s4 = (void *)&ss;
			s4->sin_family = AF_INET;
			s4->sin_port = h.port;
			memcpy(&s4->sin_addr, h.addr, 4);
		}
		rs_copy_addr(from, flen, (struct sockaddr *)&ss);
	}
	if (!(flags & MSG_PEEK)) {
		rs_dg_post_recv(rs, r->idx);
		rs->rx_head = (rs->rx_head + 1) % RS_DG_NBUF;
		rs->rx_cnt--;
	}
out:
	sv_mutex_unlock(&rs->lock);
	if (e == EAGAIN)
		sched_yield(); /* a caller spinning on EAGAIN leaves the CPU to the engine */
	return e ? rs_errno(e) : ret;
}

static int rs_dg_connect(struct rsock *rs, const struct sockaddr *addr)
{
	sv_mutex_lock(&rs->lock);
	struct rs_dest *d;
	long end = rs_now_ms() + RS_CONNECT_MS * 3;
	int e = rs_dg_dest(rs, addr, &d);
	if (!e) {
		memcpy(&rs->dg_peer, addr, rs_sa_len(addr));
		rs->dg_connected = true;
	}
	/* blocking: the peer resolved now, so that errors show here */
	while (!e && !rs->nonblock) {
		rs_progress(rs);
		if (d->state == RS_DEST_READY)
			break;
		if (d->state == RS_DEST_FAILED || rs_now_ms() > end) {
			e = d->state == RS_DEST_FAILED ? d->err : ETIMEDOUT;
			rs_dg_drop(rs, d);
			break;
		}
		rs_block(rs, -1);
	}
	sv_mutex_unlock(&rs->lock);
	return e ? rs_errno(e) : 0;
}

/* ---- the API ---- */

int rsocket(int domain, int type, int protocol)
{
	if (domain != AF_INET && domain != AF_INET6)
		return rs_errno(EAFNOSUPPORT);
	/*
	 * As rdma-core's: the type is SOCK_STREAM exactly; SOCK_NONBLOCK or
	 * SOCK_CLOEXEC in it fail (O_NONBLOCK goes through rfcntl).  This also
	 * matters under librspreload: softverbs' own sockets (the CM's TCP port,
	 * the tcp transport) are made with those flags, so the preload's
	 * socket() falls back to a kernel socket for them instead of re-entering
	 * the CM from inside it.
	 */
	if (type == SOCK_DGRAM) {
		if (protocol && protocol != IPPROTO_UDP)
			return rs_errno(EPROTONOSUPPORT);
		struct rsock *rs = rs_alloc(domain);
		if (!rs)
			return -1;
		rs->dgram = true;
		if (rdma_create_id(rs->ch, &rs->id, rs, RDMA_PS_UDP)) {
			int e = errno;
			rs_free(rs);
			return rs_errno(e);
		}
		if (rs_insert(rs)) {
			rs_free(rs);
			return rs_errno(ENOMEM);
		}
		return rs->fd;
	}
	int base = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (type != SOCK_STREAM)
		return rs_errno(base == SOCK_STREAM || base == SOCK_DGRAM ? EOPNOTSUPP : ESOCKTNOSUPPORT);
	if (protocol && protocol != IPPROTO_TCP)
		return rs_errno(EPROTONOSUPPORT);
	struct rsock *rs = rs_alloc(domain);
	if (!rs)
		return -1;
	if (rdma_create_id(rs->ch, &rs->id, rs, RDMA_PS_TCP)) {
		int e = errno;
		rs_free(rs);
		return rs_errno(e);
	}
	if (rs_insert(rs)) {
		rs_free(rs);
		return rs_errno(ENOMEM);
	}
	return rs->fd;
}

/* An address of len bytes is a whole sockaddr_in or sockaddr_in6. */
static bool rs_addr_len_ok(const struct sockaddr *a, socklen_t len)
{
	return a && len >= sizeof(struct sockaddr_in) &&
	       (a->sa_family != AF_INET6 || len >= sizeof(struct sockaddr_in6));
}

int rbind(int s, const struct sockaddr *addr, socklen_t len)
{
	RS_GET(rs, s, int);
	if (!rs_addr_len_ok(addr, len))
		return rs_errno(EINVAL);
	sv_mutex_lock(&rs->lock);
	if (rs->dgram) {
		int e = rs->dg_bound ? EINVAL : rs_dg_bind(rs, addr);
		sv_mutex_unlock(&rs->lock);
		return e ? rs_errno(e) : 0;
	}
	int r = rs->state == RS_INIT ? rdma_bind_addr(rs->id, (struct sockaddr *)addr) : rs_errno(EINVAL);
	sv_mutex_unlock(&rs->lock);
	return r;
}

int rlisten(int s, int backlog)
{
	RS_GET(rs, s, int);
	if (rs->dgram)
		return rs_errno(EOPNOTSUPP);
	sv_mutex_lock(&rs->lock);
	int r = 0;
	if (rs->state == RS_LISTENING) {
		rs->bl_max = backlog > 0 ? (unsigned)backlog : 1;
	} else if (rs->state != RS_INIT) {
		r = rs_errno(EINVAL);
	} else if (rdma_listen(rs->id, backlog) == 0) {
		rs->state = RS_LISTENING;
		rs->bl_max = backlog > 0 ? (unsigned)backlog : 1;
		if (rs->bl_max < 8)
			rs->bl_max = 8; /* SOMAXCONN-ish slack: backlog is a hint */
	} else {
		r = -1;
	}
	sv_mutex_unlock(&rs->lock);
	return r;
}

static void rs_copy_addr(struct sockaddr *dst, socklen_t *len, const struct sockaddr *src)
{
	if (!dst || !len)
		return;
	socklen_t n = src->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	memcpy(dst, src, *len < n ? *len : n);
	*len = n;
}

int raccept(int s, struct sockaddr *addr, socklen_t *len)
{
	RS_GET(ls, s, int);
	if (ls->dgram)
		return rs_errno(EOPNOTSUPP);
	sv_mutex_lock(&ls->lock);
	if (ls->state != RS_LISTENING) {
		sv_mutex_unlock(&ls->lock);
		return rs_errno(EINVAL);
	}
	rs_progress(ls);
	while (!ls->bl_cnt) {
		if (ls->nonblock) {
			sv_mutex_unlock(&ls->lock);
			return rs_errno(EAGAIN);
		}
		rs_block(ls, -1);
		if (ls->state != RS_LISTENING) {
			sv_mutex_unlock(&ls->lock);
			return rs_errno(EINVAL);
		}
	}
	struct rdma_cm_id *id = ls->bl[0];
	memmove(ls->bl, ls->bl + 1, (ls->bl_cnt - 1) * sizeof(*ls->bl));
	ls->bl_cnt--;
	sv_mutex_unlock(&ls->lock);

	struct rsock *rs = rs_alloc(ls->domain);
	int e = 0;
	if (!rs) {
		e = errno;
		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		return rs_errno(e ? e : ENOMEM);
	}
	rs->id = id;
	id->context = rs;
	sv_mutex_lock(&rs->lock);
	if (rdma_migrate_id(id, rs->ch))
		e = errno;
	if (!e)
		e = rs_create_qp(rs);
	if (!e) {
		struct rdma_conn_param p;
		struct rs_hello h;
		rs_hello(&p, &h);
		rs->state = RS_CONNECTING;
		if (rdma_accept(id, &p))
			e = errno;
	} else {
		rdma_reject(id, NULL, 0);
	}
	if (!e) {
		long end = rs_now_ms() + RS_CONNECT_MS;
		rs_progress(rs);
		while (rs->state == RS_CONNECTING && rs_now_ms() < end)
			rs_block(rs, -1);
		if (rs->state == RS_CONNECTING)
			e = ETIMEDOUT;
		else if (rs->state != RS_CONNECTED && !(rs->state == RS_DISCONNECTED))
			e = ECONNABORTED;
	}
	sv_mutex_unlock(&rs->lock);
	if (e || rs_insert(rs)) {
		rs_free(rs);
		return rs_errno(e ? e : ENOMEM);
	}
	rs->nonblock = false;
	rs_copy_addr(addr, len, rdma_get_peer_addr(rs->id));
	return rs->fd;
}

int rconnect(int s, const struct sockaddr *addr, socklen_t len)
{
	RS_GET(rs, s, int);
	if (!rs_addr_len_ok(addr, len))
		return rs_errno(EINVAL);
	if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)
		return rs_errno(EAFNOSUPPORT);
	if (rs->dgram)
		return rs_dg_connect(rs, addr);
	sv_mutex_lock(&rs->lock);
	int e = 0;
	switch (rs->state) {
	case RS_INIT:
		if (rdma_resolve_addr(rs->id, NULL, (struct sockaddr *)addr, RS_CONNECT_MS)) {
			e = errno;
			break;
		}
		rs->state = RS_RESOLVING;
		if (rs->nonblock) {
			rs_progress(rs);
			e = rs->state == RS_CONNECTED ? 0 : rs->state == RS_FAILED ? rs->err : EINPROGRESS;
			break;
		}
		e = rs_wait_connected(rs, false);
		if (!e && rs->state == RS_FAILED)
			e = rs->err ? rs->err : ECONNREFUSED;
		if (e == rs->err)
			rs->err = 0; /* reported here, not again by SO_ERROR */
		break;
	case RS_RESOLVING:
	case RS_CONNECTING:
		e = rs->nonblock ? EALREADY : rs_wait_connected(rs, false);
		break;
	case RS_CONNECTED:
		e = EISCONN;
		break;
	case RS_FAILED:
		e = rs->err ? rs->err : ECONNREFUSED;
		rs->err = 0;
		break;
	default:
		e = EINVAL;
	}
	sv_mutex_unlock(&rs->lock);
	return e ? rs_errno(e) : 0;
}

/* FIN, the sends completed (bounded), rdma_disconnect; rs->lock held. */
static void rs_close_write(struct rsock *rs, bool disconnect)
{
	rs->wr_shut = true;
	if (rs->state != RS_CONNECTED)
		return;
	rs->fin_want = true;
	long end = rs_now_ms() + RS_CLOSE_MS;
	rs_progress(rs);
	if (!disconnect)
		return;
	while (rs->state == RS_CONNECTED && (!rs->fin_sent || rs->wr_out) && rs_now_ms() < end)
		rs_block(rs, 50);
	if (!rs->disconnect_sent) {
		rs->disconnect_sent = true;
		rdma_disconnect(rs->id);
	}
	if (rs->state == RS_CONNECTED)
		rs->state = RS_DISCONNECTED;
}

int rshutdown(int s, int how)
{
	RS_GET(rs, s, int);
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return rs_errno(EINVAL);
	sv_mutex_lock(&rs->lock);
	int r = 0;
	if (rs->state != RS_CONNECTED && rs->state != RS_DISCONNECTED) {
		r = rs_errno(ENOTCONN);
	} else {
		if (how != SHUT_WR)
			rs->rd_shut = true;
		if (how != SHUT_RD)
			rs_close_write(rs, how == SHUT_RDWR);
	}
	sv_mutex_unlock(&rs->lock);
	return r;
}

int rclose(int s)
{
	RS_GET(rs, s, int);
	rs_remove(rs);
	sv_mutex_lock(&rs->lock);
	if (!rs->dgram)
		rs_close_write(rs, true);
	sv_mutex_unlock(&rs->lock);
	rs_free(rs);
	return 0;
}

ssize_t rrecv(int s, void *buf, size_t len, int flags)
{
	struct iovec v = {.iov_base = buf, .iov_len = len};
	return rs_recvv(s, &v, 1, flags);
}

ssize_t rrecvfrom(int s, void *buf, size_t len, int flags, struct sockaddr *src, socklen_t *alen)
{
	struct rsock *d = rs_get(s);
	if (d && d->dgram) {
		struct iovec v = {.iov_base = buf, .iov_len = len};
		return rs_dg_recvv(d, &v, 1, flags, src, alen, NULL);
	}
	ssize_t r = rrecv(s, buf, len, flags);
	if (r >= 0 && src && alen) {
		int e = errno;
		rgetpeername(s, src, alen);
		errno = e;
	}
	return r;
}

ssize_t rrecvmsg(int s, struct msghdr *msg, int flags)
{
	if (!msg)
		return rs_errno(EINVAL);
	msg->msg_controllen = 0;
	msg->msg_flags = 0;
	struct rsock *d = rs_get(s);
	if (d && d->dgram)
		return rs_dg_recvv(d, msg->msg_iov, (int)msg->msg_iovlen, flags,
				   msg->msg_name, msg->msg_name ? &msg->msg_namelen : NULL,
				   &msg->msg_flags);
	return rs_recvv(s, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

ssize_t rsend(int s, const void *buf, size_t len, int flags)
{
	struct iovec v = {.iov_base = (void *)buf, .iov_len = len};
	return rs_sendv(s, &v, 1, flags);
}

ssize_t rsendto(int s, const void *buf, size_t len, int flags, const struct sockaddr *to, socklen_t tl)
{
	struct rsock *d = rs_get(s);
	if (d && d->dgram && to) {
		if (tl < sizeof(struct sockaddr_in) ||
		    (to->sa_family == AF_INET6 && tl < sizeof(struct sockaddr_in6)))
			return rs_errno(EINVAL);
		struct iovec v = {.iov_base = (void *)buf, .iov_len = len};
		return rs_dg_sendv(d, to, &v, 1, flags);
	}
	(void)tl; /* a connected stream ignores the address, as TCP */
	return rsend(s, buf, len, flags);
}

ssize_t rsendmsg(int s, const struct msghdr *msg, int flags)
{
	if (!msg)
		return rs_errno(EINVAL);
	struct rsock *d = rs_get(s);
	if (d && d->dgram && msg->msg_name) {
		if (msg->msg_namelen < sizeof(struct sockaddr_in))
			return rs_errno(EINVAL);
		return rs_dg_sendv(d, msg->msg_name, msg->msg_iov, (int)msg->msg_iovlen, flags);
	}
	return rs_sendv(s, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

ssize_t rread(int s, void *buf, size_t count)
{
	return rrecv(s, buf, count, 0);
}

ssize_t rreadv(int s, const struct iovec *iov, int iovcnt)
{
	return rs_recvv(s, iov, iovcnt, 0);
}

ssize_t rwrite(int s, const void *buf, size_t count)
{
	return rsend(s, buf, count, 0);
}

ssize_t rwritev(int s, const struct iovec *iov, int iovcnt)
{
	return rs_sendv(s, iov, iovcnt, 0);
}

/* ---- readiness ---- */

static short rs_revents(struct rsock *rs, short events)
{
	short r = 0;
	if (rs->dgram) {
		if (rs->rx_cnt)
			r |= POLLIN;
		if (rs->slot_head - rs->slot_tail < RS_DG_NSEND)
			r |= POLLOUT;
		return r & (events | POLLERR | POLLHUP | POLLNVAL);
	}
	switch (rs->state) {
	case RS_LISTENING:
		if (rs->bl_cnt)
			r |= POLLIN;
		break;
	case RS_CONNECTED:
		if (rs->rx_cnt || rs->fin_rcvd || rs->rd_shut)
			r |= POLLIN;
		if (rs_can_send(rs) && !rs->wr_shut)
			r |= POLLOUT;
		if (rs->fin_rcvd && rs->wr_shut)
			r |= POLLHUP;
		if (rs->err)
			r |= POLLERR;
		break;
	case RS_DISCONNECTED:
		/* as a TCP socket whose peer closed: what it sent before is
		 * read first (POLLIN), and only then is the socket hung up.
		 * The peer's close waits for its last data to be acknowledged,
		 * not read, so the disconnect often comes while some is left:
		 * a program that stops at POLLHUP (rstream) would lose it.
		 * After SHUT_RD nothing is read any more */
		r |= POLLIN;
		if (!rs->rx_cnt || rs->rd_shut || rs->err)
			r |= POLLHUP | (rs->err ? POLLERR : 0);
		break;
	case RS_FAILED:
		r |= POLLOUT | POLLERR | POLLHUP;
		break;
	case RS_INIT:
		r |= POLLOUT | POLLHUP; /* as an unconnected TCP socket */
		break;
	default:
		break;
	}
	return r & (events | POLLERR | POLLHUP | POLLNVAL);
}

int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	long end = timeout > 0 ? rs_now_ms() + timeout : 0;
	struct pollfd *p = calloc(nfds * 3 + 1, sizeof(*p));
	unsigned char *used = calloc(nfds + 1, 1); /* p entries per fds entry */
	if (!p || !used) {
		free(p);
		free(used);
		return rs_errno(ENOMEM);
	}
	int ready;
	for (;;) {
		ready = 0;
		nfds_t np = 0;
		for (nfds_t i = 0; i < nfds; i++) {
			fds[i].revents = 0;
			if (fds[i].fd < 0)
				continue;
			struct rsock *rs = rs_get(fds[i].fd);
			used[i] = 0;
			if (!rs) {
				/* not an rsocket: polled as it is */
				p[np++] = (struct pollfd){.fd = fds[i].fd, .events = fds[i].events};
				used[i] = 1;
				continue;
			}
			sv_mutex_lock(&rs->lock);
			rs_progress(rs);
			fds[i].revents = rs_revents(rs, fds[i].events);
			if (!fds[i].revents) {
				if (rs->cq) {
					ibv_req_notify_cq(rs->cq, 0);
					rs_progress(rs);
					fds[i].revents = rs_revents(rs, fds[i].events);
					p[np++] = (struct pollfd){.fd = rs->cc->fd, .events = POLLIN};
					used[i]++;
				}
				p[np++] = (struct pollfd){.fd = rs->ch->fd, .events = POLLIN};
				p[np++] = (struct pollfd){.fd = rs->fd, .events = POLLIN};
				used[i] += 2;
				rs->rpolling++;
			}
			sv_mutex_unlock(&rs->lock);
			if (fds[i].revents)
				ready++;
		}
		int wait = ready ? 0 : timeout < 0 ? 1000 : timeout == 0 ? 0 : (int)(end - rs_now_ms());
		if (wait < 0)
			wait = 0;
		if (wait > 1000)
			wait = 1000;
		int r = poll(p, np, wait);
		int perr = errno;
		for (nfds_t i = 0; i < nfds; i++) {
			if (fds[i].fd < 0 || used[i] < 2)
				continue;
			struct rsock *rs = rs_get(fds[i].fd);
			if (rs) {
				sv_mutex_lock(&rs->lock);
				rs->rpolling--;
				rs_clear_wake(rs);
				sv_mutex_unlock(&rs->lock);
			}
		}
		errno = perr;
		if (r < 0 && errno != EINTR) {
			free(p);
			free(used);
			return -1;
		}
		/* the plain fds' results */
		nfds_t k = 0;
		for (nfds_t i = 0; i < nfds; i++) {
			if (fds[i].fd < 0)
				continue;
			if (used[i] != 1 || p[k].fd != fds[i].fd) {
				k += used[i]; /* an rsocket's own fds */
				continue;
			}
			fds[i].revents = p[k++].revents;
			if (fds[i].revents)
				ready++;
		}
		if (ready || timeout == 0 || (timeout > 0 && rs_now_ms() >= end))
			break;
		if (r < 0) {
			free(p);
			free(used);
			return -1; /* EINTR */
		}
	}
	free(p);
	free(used);
	if (!ready && timeout == 0)
		sched_yield(); /* a caller spinning on rpoll(0) leaves the CPU to the engine */
	errno = 0;
	return ready;
}

int rselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *timeout)
{
	if (nfds < 0 || nfds > FD_SETSIZE)
		return rs_errno(EINVAL);
	struct pollfd *p = calloc((size_t)nfds + 1, sizeof(*p));
	if (!p)
		return rs_errno(ENOMEM);
	nfds_t n = 0;
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;
		if (rd && FD_ISSET(fd, rd))
			ev |= POLLIN;
		if (wr && FD_ISSET(fd, wr))
			ev |= POLLOUT;
		if (ex && FD_ISSET(fd, ex))
			ev |= POLLPRI;
		if (ev)
			p[n++] = (struct pollfd){.fd = fd, .events = ev};
	}
	int ms = timeout ? (int)(timeout->tv_sec * 1000 + timeout->tv_usec / 1000) : -1;
	int r = rpoll(p, n, ms);
	if (r < 0) {
		free(p);
		return -1;
	}
	if (rd)
		FD_ZERO(rd);
	if (wr)
		FD_ZERO(wr);
	if (ex)
		FD_ZERO(ex);
	int cnt = 0;
	for (nfds_t i = 0; i < n; i++) {
		short re = p[i].revents;
		if (rd && (p[i].events & POLLIN) && (re & (POLLIN | POLLHUP | POLLERR))) {
			FD_SET(p[i].fd, rd);
			cnt++;
		}
		if (wr && (p[i].events & POLLOUT) && (re & (POLLOUT | POLLERR))) {
			FD_SET(p[i].fd, wr);
			cnt++;
		}
		if (ex && (p[i].events & POLLPRI) && (re & POLLPRI)) {
			FD_SET(p[i].fd, ex);
			cnt++;
		}
	}
	free(p);
	return cnt;
}

/* ---- names, options ---- */

int rgetpeername(int s, struct sockaddr *addr, socklen_t *len)
{
	RS_GET(rs, s, int);
	if (!addr || !len)
		return rs_errno(EFAULT);
	sv_mutex_lock(&rs->lock);
	int r = 0;
	if (rs->dgram) {
		if (rs->dg_connected)
			rs_copy_addr(addr, len, (struct sockaddr *)&rs->dg_peer);
		else
			r = rs_errno(ENOTCONN);
	} else if (rs->state != RS_CONNECTED && rs->state != RS_DISCONNECTED)
		r = rs_errno(ENOTCONN);
	else
		rs_copy_addr(addr, len, rdma_get_peer_addr(rs->id));
	sv_mutex_unlock(&rs->lock);
	return r;
}

int rgetsockname(int s, struct sockaddr *addr, socklen_t *len)
{
	RS_GET(rs, s, int);
	if (!addr || !len)
		return rs_errno(EFAULT);
	sv_mutex_lock(&rs->lock);
	struct sockaddr *src = rdma_get_local_addr(rs->id);
	if (src->sa_family != AF_INET && src->sa_family != AF_INET6) {
		struct sockaddr_storage any = {.ss_family = (sa_family_t)rs->domain};
		rs_copy_addr(addr, len, (struct sockaddr *)&any);
	} else {
		rs_copy_addr(addr, len, src);
	}
	sv_mutex_unlock(&rs->lock);
	return 0;
}

static int *rs_int_opt(struct rsock *rs, int level, int name)
{
	if (level == SOL_SOCKET) {
		switch (name) {
		case SO_REUSEADDR: return &rs->reuseaddr;
		case SO_KEEPALIVE: return &rs->keepalive;
		case SO_RCVBUF: return &rs->rcvbuf;
		case SO_SNDBUF: return &rs->sndbuf;
		default: return NULL;
		}
	}
	if (level == IPPROTO_TCP && name == TCP_NODELAY)
		return &rs->nodelay;
	if (level == IPPROTO_IPV6 && name == IPV6_V6ONLY)
		return &rs->v6only;
	return NULL;
}

int rsetsockopt(int s, int level, int optname, const void *optval, socklen_t optlen)
{
	RS_GET(rs, s, int);
	if (!optval && optlen)
		return rs_errno(EFAULT);
	sv_mutex_lock(&rs->lock);
	int r = 0;
	int *ip = rs_int_opt(rs, level, optname);
	if (ip && level == IPPROTO_IPV6) {
		/* IPV6_V6ONLY: whether an IPv6 wildcard rsocket takes IPv4 peers,
		 * which the CM id decides (before it listens), as in rdma-core */
		int v;
		if (optlen < sizeof(int)) {
			r = rs_errno(EINVAL);
		} else {
			memcpy(&v, optval, sizeof(v));
			v = v != 0;
			r = rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &v, sizeof(v));
			if (!r)
				*ip = v;
		}
	} else if (ip) {
		if (optlen < sizeof(int))
			r = rs_errno(EINVAL);
		else
			memcpy(ip, optval, sizeof(int));
		if (!r && level == SOL_SOCKET && optname == SO_REUSEADDR && *ip) {
			int one = 1;
			rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one));
		}
	} else if (level == SOL_SOCKET && optname == SO_LINGER) {
		if (optlen < sizeof(struct linger))
			r = rs_errno(EINVAL);
		else
			memcpy(&rs->linger, optval, sizeof(rs->linger));
	} else if (level == IPPROTO_TCP && optname == TCP_MAXSEG) {
		/* accepted; messages are always up to the peer's buffer size */
	} else if (level == SOL_RDMA) {
		switch (optname) {
		case RDMA_SQSIZE:
		case RDMA_RQSIZE:
		case RDMA_INLINE:
		case RDMA_IOMAPSIZE:
		case RDMA_ROUTE:
			break; /* harmless: the queue and buffer sizes are fixed here */
		default:
			r = rs_errno(ENOPROTOOPT);
		}
	} else {
		r = rs_errno(ENOPROTOOPT);
	}
	sv_mutex_unlock(&rs->lock);
	return r;
}

int rgetsockopt(int s, int level, int optname, void *optval, socklen_t *optlen)
{
	RS_GET(rs, s, int);
	if (!optval || !optlen)
		return rs_errno(EFAULT);
	sv_mutex_lock(&rs->lock);
	rs_progress(rs);
	int r = 0, v = 0;
	const void *src = &v;
	socklen_t n = sizeof(int);
	int *ip = rs_int_opt(rs, level, optname);
	if (ip) {
		v = *ip;
	} else if (level == SOL_SOCKET && optname == SO_ERROR) {
		v = rs->err;
		rs->err = 0;
	} else if (level == SOL_SOCKET && optname == SO_LINGER) {
		src = &rs->linger;
		n = sizeof(rs->linger);
	} else if (level == SOL_SOCKET && optname == SO_TYPE) {
		v = rs->dgram ? SOCK_DGRAM : SOCK_STREAM;
	} else if (level == IPPROTO_TCP && optname == TCP_MAXSEG) {
		v = (int)rs->peer_bufsz;
	} else if (level == SOL_RDMA && (optname == RDMA_SQSIZE || optname == RDMA_RQSIZE)) {
		v = RS_NBUF;
	} else if (level == SOL_RDMA && optname == RDMA_INLINE) {
		v = 0;
	} else {
		r = rs_errno(ENOPROTOOPT);
	}
	if (!r) {
		if (*optlen < n)
			n = *optlen;
		memcpy(optval, src, n);
		*optlen = n;
	}
	sv_mutex_unlock(&rs->lock);
	return r;
}

int rfcntl(int s, int cmd, ...)
{
	RS_GET(rs, s, int);
	va_list ap;
	int r = 0;
	va_start(ap, cmd);
	sv_mutex_lock(&rs->lock);
	switch (cmd) {
	case F_GETFL:
		r = O_RDWR | (rs->nonblock ? O_NONBLOCK : 0);
		break;
	case F_SETFL:
		rs->nonblock = (va_arg(ap, int) & O_NONBLOCK) != 0;
		break;
	default:
		r = rs_errno(ENOSYS);
	}
	sv_mutex_unlock(&rs->lock);
	va_end(ap);
	return r;
}

/* ---- riomap / riounmap / riowrite: one-sided writes into a peer's region ---- */

/* Sends a control message (a staging slot and a data credit); lock held. */
static int rs_send_ctrl_msg(struct rsock *rs, const struct rs_ctrl *c)
{
	long end = rs_now_ms() + RS_CONNECT_MS;
	for (;;) {
		rs_progress(rs);
		if (rs->state != RS_CONNECTED || rs->wr_shut)
			return rs->state == RS_CONNECTED || rs->state == RS_DISCONNECTED ? EPIPE : ENOTCONN;
		if (rs_can_send(rs))
			break;
		if (rs_now_ms() > end)
			return ETIMEDOUT;
		rs_block(rs, -1);
	}
	uint8_t *slot = rs->sbuf + (size_t)(rs->slot_head % RS_NBUF) * RS_BUFSZ;
	memcpy(slot, c, sizeof(*c));
	return rs_post_send(rs, slot, sizeof(*c), RS_IMM_CTRL) ? EPIPE : 0;
}

off_t riomap(int s, void *buf, size_t len, int prot, int flags, off_t offset)
{
	RS_GET(rs, s, off_t);
	if (!buf || !len || prot != PROT_WRITE)
		return rs_errno(EINVAL);
	(void)flags;
	sv_mutex_lock(&rs->lock);
	int e = 0;
	struct rs_map *m = NULL;
	if (rs->state != RS_CONNECTED) {
		e = ENOTCONN;
		goto out;
	}
	for (int i = 0; i < RS_MAXMAP && !m; i++)
		if (!rs->lmap[i].used)
			m = &rs->lmap[i];
	if (!m) {
		e = ENOMEM;
		goto out;
	}
	m->mr = ibv_reg_mr(rs->pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!m->mr) {
		e = errno ? errno : ENOMEM;
		goto out;
	}
	m->off = offset == -1 ? rs->next_off : (uint64_t)offset;
	if (m->off + len > rs->next_off)
		rs->next_off = m->off + len;
	m->addr = (uintptr_t)buf;
	m->len = len;
	m->used = true;
	struct rs_ctrl c = {.type = htonl(1), .rkey = htonl(m->mr->rkey), .off = htobe64(m->off),
			    .addr = htobe64(m->addr), .len = htobe64(len)};
	e = rs_send_ctrl_msg(rs, &c);
	if (e) {
		ibv_dereg_mr(m->mr);
		m->mr = NULL;
		m->used = false;
	}
out:
	sv_mutex_unlock(&rs->lock);
	return e ? rs_errno(e) : (off_t)m->off;
}

int riounmap(int s, void *buf, size_t len)
{
	RS_GET(rs, s, int);
	sv_mutex_lock(&rs->lock);
	int e = EINVAL;
	for (int i = 0; i < RS_MAXMAP; i++) {
		struct rs_map *m = &rs->lmap[i];
		if (m->used && m->addr == (uintptr_t)buf && m->len == len) {
			struct rs_ctrl c = {.type = htonl(2), .off = htobe64(m->off)};
			if (rs->state == RS_CONNECTED && !rs->wr_shut)
				rs_send_ctrl_msg(rs, &c); /* best effort */
			ibv_dereg_mr(m->mr);
			m->mr = NULL;
			m->used = false;
			e = 0;
			break;
		}
	}
	sv_mutex_unlock(&rs->lock);
	return e ? rs_errno(e) : 0;
}

size_t riowrite(int s, const void *buf, size_t count, off_t offset, int flags)
{
	RS_GET(rs, s, size_t);
	sv_mutex_lock(&rs->lock);
	bool nb = rs->nonblock || (flags & MSG_DONTWAIT);
	size_t done = 0;
	int e = rs_wait_connected(rs, nb);
	while (!e && done < count) {
		rs_progress(rs);
		if (rs->state != RS_CONNECTED || rs->wr_shut) {
			e = rs->state == RS_CONNECTED || rs->state == RS_DISCONNECTED ? EPIPE : ENOTCONN;
			break;
		}
		if (rs->err) {
			e = rs->err;
			break;
		}
		uint64_t at = (uint64_t)offset + done;
		struct rs_map *m = NULL;
		for (int i = 0; i < RS_MAXMAP && !m; i++)
			if (rs->rmap[i].used && at >= rs->rmap[i].off &&
			    at < rs->rmap[i].off + rs->rmap[i].len)
				m = &rs->rmap[i];
		if (!m) {
			e = EINVAL;
			break;
		}
		if (rs->slot_head - rs->slot_tail >= RS_NBUF || rs->wr_out >= RS_SQ_DEPTH - 1) {
			if (nb) {
				if (!done)
					e = EAGAIN;
				break;
			}
			rs_block(rs, -1);
			continue;
		}
		size_t n = count - done;
		if (n > RS_BUFSZ)
			n = RS_BUFSZ;
		if (n > m->off + m->len - at)
			n = m->off + m->len - at;
		uint8_t *slot = rs->sbuf + (size_t)(rs->slot_head % RS_NBUF) * RS_BUFSZ;
		memcpy(slot, (const uint8_t *)buf + done, n);
		struct ibv_sge sge = {.addr = (uintptr_t)slot, .length = (uint32_t)n,
				      .lkey = rs->smr->lkey};
		struct ibv_send_wr wr = {
			.wr_id = RS_WR_DATA,
			.sg_list = &sge,
			.num_sge = 1,
			.opcode = IBV_WR_RDMA_WRITE,
			.send_flags = IBV_SEND_SIGNALED,
			.wr.rdma = {.remote_addr = m->addr + (at - m->off), .rkey = m->rkey},
		}, *bad;
		if (ibv_post_send(rs->id->qp, &wr, &bad)) {
			e = EPIPE;
			break;
		}
		rs->wr_out++;
		rs->slot_head++;
		done += n;
	}
	sv_mutex_unlock(&rs->lock);
	if (done)
		return done;
	if (e)
		errno = e;
	return (size_t)-1;
}
