/*
 * Connection output queue, common to transports: frames go straight to the
 * transport when it has room, and those it does not take are copied, whole,
 * into a queue that the engine thread flushes when the transport has room.
 * Posting threads therefore never block on a slow peer, and the engine
 * thread never blocks at all.
 */
#include "transport/transport.h"
#include "common/cuda.h"
#include "transport/auth.h"
#include "wire/wire.h"
#include "wire/opcode.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/socket.h>

void sv_conn_get(struct sv_conn *conn)
{
	sv_ref_get(&conn->ref);
}

void sv_conn_put(struct sv_conn *conn)
{
	if (!sv_ref_put(&conn->ref))
		return;
	conn->ops->close(conn);
	if (conn->ops->destroy)
		conn->ops->destroy(conn);
	while (conn->txq_head) {
		struct sv_txbuf *b = conn->txq_head;

		conn->txq_head = b->next;
		free(b);
	}
	while (conn->fault_held) {
		struct sv_held_frame *h = conn->fault_held;

		conn->fault_held = h->next;
		free(h->b);
		free(h);
	}
	if (conn->peer_mem_free)
		conn->peer_mem_free(atomic_load(&conn->peer_mem));
	sv_mutex_destroy(&conn->tx_lock);
	sv_auth_forget(&conn->auth);
	if (conn->next)
		sv_conn_put(conn->next);
	free(conn);
}

bool sv_conn_busy(struct sv_conn *conn)
{
	if (atomic_load(&conn->state) != SV_CONN_UP)
		return false;
	return atomic_load_explicit(&conn->txq_bytes, memory_order_relaxed) || conn->ops->unsent(conn);
}

bool sv_conn_congested(struct sv_conn *conn)
{
	/* while connecting, frames queue behind the HELLO as on a slow link: the
	 * requester's timers must see them sent, or a dead peer is never noticed */
	/* corked bytes leave as soon as the receive pass ends */
	/* so do they while the peer's HELLO is awaited (gated) */
	return atomic_load(&conn->state) == SV_CONN_UP && !sv_conn_gated(conn) &&
	       atomic_load_explicit(&conn->txq_bytes, memory_order_relaxed) != 0 &&
	       !atomic_load_explicit(&conn->tx_corked, memory_order_relaxed);
}

/* Frames [from, to) of f, whole (length words included), copied into one
 * buffer; NULL when out of memory. */
static struct sv_txbuf *frames_copy(const struct sv_frames *f, int from, int to)
{
	size_t len = 0, off = 0;
	struct sv_txbuf *b;

	for (int i = f->first[from]; i < f->first[to]; i++)
		len += f->iov[i].iov_len;
	b = malloc(sizeof(*b) + len);
	if (!b)
		return NULL;
	for (int i = f->first[from]; i < f->first[to]; i++) {
		memcpy(b->data + off, f->iov[i].iov_base, f->iov[i].iov_len);
		off += f->iov[i].iov_len;
	}
	b->len = len;
	b->off = 0;
	b->next = NULL;
	return b;
}

/* Byte off of frame k of f, or -1 past its end. */
static int frame_byte(const struct sv_frames *f, int k, size_t off)
{
	for (int i = f->first[k]; i < f->first[k + 1]; i++) {
		if (off < f->iov[i].iov_len)
			return ((const uint8_t *)f->iov[i].iov_base)[off];
		off -= f->iov[i].iov_len;
	}
	return -1;
}

/* Frame k is softverbs' own traffic between two processes of a host (an
 * XRC relay and its answers, engine/xrc_relay.c), not the network's: no
 * fault is injected into it. */
static bool frame_is_relay(const struct sv_frames *f, int k)
{
	int opcode = frame_byte(f, k, SV_FRAME_HEAD), flags = frame_byte(f, k, SV_FRAME_HEAD + 1);

	return opcode == SV_OP_XRC_RELAY || opcode == SV_OP_XRC_CTRL ||
	       (flags >= 0 && (flags & SV_BTH_RELAYED));
}

/* tx_lock held: copy frames [from, nframes) of f, whole, to the queue */
static int queue_frames(struct sv_conn *conn, const struct sv_frames *f, int from)
{
	struct sv_txbuf *b;

	if (from == f->nframes)
		return 0;
	b = frames_copy(f, from, f->nframes);
	if (!b)
		return -ENOMEM;
	sv_conn_requeue(conn, b, b->len);
	return 0;
}

int sv_conn_flush_queue(struct sv_conn *c)
{
	int r;

	sv_mutex_lock(&c->tx_lock);
	r = sv_conn_txq_write(c);
	sv_mutex_unlock(&c->tx_lock);
	return r;
}

struct sv_txbuf *sv_conn_take_gated(struct sv_conn *c, size_t *bytes)
{
	struct sv_txbuf **at = &c->txq_head, *prev = NULL, *taken;

	/* each handshake frame has a buffer of its own (queue_handshake) */
	for (int i = 0; i < c->gate_pass && *at; i++) {
		prev = *at;
		at = &prev->next;
	}
	taken = *at;
	*at = NULL;
	c->txq_tail = prev;
	*bytes = 0;
	for (struct sv_txbuf *b = taken; b; b = b->next)
		*bytes += b->len - b->off;
	atomic_store_explicit(&c->txq_bytes, c->txq_bytes - *bytes, memory_order_relaxed);
	return taken;
}

void sv_conn_requeue(struct sv_conn *c, struct sv_txbuf *frames, size_t bytes)
{
	struct sv_txbuf *last = frames;

	if (!frames)
		return;
	while (last->next)
		last = last->next;
	if (c->txq_tail)
		c->txq_tail->next = frames;
	else
		c->txq_head = frames;
	c->txq_tail = last;
	atomic_store_explicit(&c->txq_bytes, c->txq_bytes + bytes, memory_order_relaxed);
}

/* Queued frames handed to the transport in one call (one iovec each). */
#define TXQ_BATCH 256
_Static_assert(TXQ_BATCH <= SV_TXBATCH_IOV, "a queue flush is a batch a transport takes");

int sv_conn_txq_write(struct sv_conn *c)
{
	struct iovec v[TXQ_BATCH];
	uint16_t first[TXQ_BATCH + 1];
	struct sv_frames f = { .iov = v, .first = first };

	for (;;) {
		struct sv_txbuf *b = c->txq_head;
		size_t off = b ? b->off : 0;
		int n = 0, took;

		/* each queued frame lies whole in one buffer, behind its length;
		 * while gated, only the handshake's frames at the head go */
		while (b && n < (sv_conn_gated(c) ? c->gate_pass : TXQ_BATCH)) {
			uint32_t flen;

			if (off == b->len) {
				b = b->next;
				off = b ? b->off : 0;
				continue;
			}
			memcpy(&flen, b->data + off, SV_FRAME_HEAD);
			first[n] = (uint16_t)n;
			v[n].iov_base = b->data + off;
			v[n].iov_len = SV_FRAME_HEAD + ntohl(flen);
			off += v[n++].iov_len;
		}
		if (!n && !c->tx_held)
			return 0;
		first[n] = (uint16_t)n;
		f.nframes = n;
		took = c->ops->send(c, &f);
		if (took < 0)
			return took;
		c->gate_pass = SV_MAX(0, c->gate_pass - took);
		for (int k = 0; k < took; k++) {
			b = c->txq_head;
			b->off += v[k].iov_len;
			atomic_store_explicit(&c->txq_bytes, c->txq_bytes - v[k].iov_len,
					 memory_order_relaxed);
			if (b->off == b->len) {
				c->txq_head = b->next;
				if (!c->txq_head)
					c->txq_tail = NULL;
				free(b);
			}
		}
		if (took < n || !c->txq_head || c->tx_held)
			return 0;
	}
}

void sv_conn_uncork_now(struct sv_conn *conn)
{
	sv_mutex_lock(&conn->tx_lock);
	/* a broken socket is noticed by the engine, which fails the conn;
	 * what the socket refuses now goes with the flush at the pass's end */
	if (atomic_load(&conn->state) == SV_CONN_UP && sv_conn_tx_waiting(conn))
		(void)sv_conn_txq_write(conn);
	sv_mutex_unlock(&conn->tx_lock);
}

/*
 * tx_lock held, fault injection on: each frame of f draws its fate (faults.c).
 * What is sent now goes into out (iov and first, allocated here, the
 * caller frees out->iov), with its bytes in *total; what is held back waits
 * on conn->fault_held for the owner's timer.
 */
static int fault_filter(struct sv_conn *conn, const struct sv_frames *f, struct sv_frames *out,
			size_t *total, struct sv_txbuf **marked)
{
	int niov = f->first[f->nframes] - f->first[0];
	struct iovec *iov = malloc(sizeof(*iov) * (size_t)niov * 2 + 1);
	uint16_t *first = malloc(sizeof(*first) * ((size_t)f->nframes * 2 + 1));
	int n = 0, m = 0;

	if (!iov || !first) {
		free(iov);
		free(first);
		return -ENOMEM;
	}
	*total = 0;
	for (int k = 0; k < f->nframes; k++) {
		uint64_t hold = 0;
		enum sv_fault_kind kind = frame_is_relay(f, k) ? SV_FAULT_NONE
							       : sv_faults_draw(conn, &hold);
		int copies = kind == SV_FAULT_DUP ? 2 : kind == SV_FAULT_NONE ? 1 : 0;

		if (kind == SV_FAULT_CE || (kind == SV_FAULT_CORRUPT && conn->lossy)) {
			/* a copy carries the mark in its BTH flags (wire/wire.h),
			 * which the transport turns into the IP ECN bits or a
			 * flipped bit past the ICRC (rocev2.c), and a stream's
			 * receiver reads as a congestion mark */
			struct sv_txbuf *b = frames_copy(f, k, k + 1);

			if (b && b->len > SV_FRAME_HEAD + 1) {
				b->data[SV_FRAME_HEAD + 1] |= kind == SV_FAULT_CE ? SV_BTH_CE : SV_BTH_CORRUPT;
				b->next = *marked;
				*marked = b;
				first[m++] = (uint16_t)n;
				iov[n++] = (struct iovec){ b->data, b->len };
				*total += b->len;
			} else {
				free(b); /* out of memory: lost, as a dropped one */
			}
			continue;
		}

		if (kind == SV_FAULT_DELAY || kind == SV_FAULT_REORDER) {
			struct sv_held_frame *h = malloc(sizeof(*h)), **at = &conn->fault_held;

			if (h && (h->b = frames_copy(f, k, k + 1))) {
				h->due_ns = sv_now_ns() + hold;
				h->next = NULL;
				while (*at)
					at = &(*at)->next;
				*at = h;
				atomic_fetch_add(&conn->fault_nheld, 1);
				if (conn->host->fault_timer)
					conn->host->fault_timer(conn, h->due_ns);
			} else {
				free(h); /* out of memory: it is lost, as a dropped one */
			}
		}
		for (int c = 0; c < copies; c++) {
			first[m++] = (uint16_t)n;
			for (int i = f->first[k]; i < f->first[k + 1]; i++) {
				*total += f->iov[i].iov_len;
				iov[n++] = f->iov[i];
			}
		}
	}
	first[m] = (uint16_t)n;
	*out = (struct sv_frames){ .iov = iov, .first = first, .nframes = m, .ref = f->ref };
	return 0;
}

uint64_t sv_conn_fault_release(struct sv_conn *conn, uint64_t now)
{
	struct sv_held_frame **at, *h;
	uint64_t next = 0;
	bool dead;

	sv_mutex_lock(&conn->tx_lock);
	dead = atomic_load(&conn->state) == SV_CONN_DEAD;
	for (at = &conn->fault_held; (h = *at);) {
		if (h->due_ns > now && !dead) {
			next = next && next < h->due_ns ? next : h->due_ns;
			at = &h->next;
			continue;
		}
		*at = h->next;
		atomic_fetch_sub(&conn->fault_nheld, 1);
		if (dead)
			free(h->b);
		else
			sv_conn_requeue(conn, h->b, h->b->len);
		free(h);
	}
	/* out now where the transport takes it (a ring has no EPOLLOUT), as
	 * send_handshake does; the rest when there is room */
	if (!dead && atomic_load(&conn->state) == SV_CONN_UP && !sv_conn_gated(conn) &&
	    !conn->tx_corked && sv_conn_tx_waiting(conn)) {
		(void)sv_conn_txq_write(conn);
		if (sv_conn_tx_waiting(conn) && !conn->want_out) {
			conn->want_out = true;
			conn->host->want_output(conn);
		}
	}
	sv_mutex_unlock(&conn->tx_lock);
	return next;
}

/* Hand the frames to the transport as far as it takes them now and queue
 * the rest; never blocks.  total: their bytes, length words included. */
static int conn_write(struct sv_conn *conn, const struct sv_frames *f, size_t total)
{
	int taken = 0, ret = 0;
	struct sv_frames faulted = { .iov = NULL };
	struct sv_txbuf *marked = NULL; /* fault_filter's marked copies */
	struct sv_conn *next = NULL;
	bool up;

	sv_mutex_lock(&conn->tx_lock);
	if (sv_faults_enabled && atomic_load(&conn->state) != SV_CONN_DEAD) {
		ret = fault_filter(conn, f, &faulted, &total, &marked);
		if (ret)
			goto out;
		f = &faulted;
		if (!f->nframes)
			goto out;
	}
	/* gated: frames queue as while connecting, behind the handshake */
	up = atomic_load(&conn->state) == SV_CONN_UP && !sv_conn_gated(conn);
	if (atomic_load(&conn->state) == SV_CONN_DEAD) {
		/* ended before the peer's HELLO: its successor carries on (below) */
		next = conn->next;
		if (next)
			sv_conn_get(next);
		ret = -ENOTCONN;
		goto out;
	}
	if (conn->tx_corked && total <= SV_CONN_CORK_MAX) {
		/* small frames wait for the uncork: one write for all of them */
		ret = queue_frames(conn, f, 0);
		goto out;
	}
	if (up && sv_conn_tx_waiting(conn) && conn->tx_corked && sv_conn_txq_write(conn) < 0) {
		/* a big frame goes out at once, after what was corked */
		ret = -ENOTCONN;
		goto out;
	}
	if (up && !sv_conn_tx_waiting(conn)) {
		taken = conn->ops->send(conn, f);
		if (taken < 0) {
			/* the engine notices the broken connection and fails it */
			ret = -ENOTCONN;
			goto out;
		}
	}
	if (taken < f->nframes)
		ret = queue_frames(conn, f, taken);
	if (!ret && sv_conn_tx_waiting(conn) && !conn->want_out && !conn->tx_corked &&
	    !(sv_conn_gated(conn) && !conn->gate_pass)) {
		conn->want_out = true;
		conn->host->want_output(conn); /* ask the engine to poll for room */
	}
out:
	sv_mutex_unlock(&conn->tx_lock);
	if (next) {
		ret = conn_write(next, f, total);
		sv_conn_put(next);
	}
	free((void *)faulted.iov);
	free((void *)faulted.first);
	while (marked) {
		struct sv_txbuf *b = marked;

		marked = b->next;
		free(b);
	}
	return ret;
}

int sv_conn_send(struct sv_conn *conn, const struct iovec *iov, int iovcnt)
{
	struct iovec v[1 + SV_FRAME_MAX_IOV];
	uint16_t first[2] = { 0, 0 };
	struct sv_frames f = { .iov = v, .first = first, .nframes = 1 };
	uint32_t flen = 0;
	int cnt = 0;

	if (iovcnt > SV_FRAME_MAX_IOV)
		return -EINVAL;
	for (int i = 0; i < iovcnt; i++)
		flen += (uint32_t)iov[i].iov_len;
	if (flen > sv_conn_frame_max(conn))
		return -EMSGSIZE;
	flen = htonl(flen);
	v[cnt].iov_base = &flen;
	v[cnt++].iov_len = SV_FRAME_HEAD;
	for (int i = 0; i < iovcnt; i++)
		if (iov[i].iov_len)
			v[cnt++] = iov[i];
	first[1] = (uint16_t)cnt;
	return conn_write(conn, &f, SV_FRAME_HEAD + ntohl(flen));
}

void sv_txbatch_init(struct sv_txbatch *b)
{
	b->conn = NULL;
	b->ref = false;
	b->nframes = b->niov = 0;
	b->bytes = 0;
}

bool sv_txbatch_fits(const struct sv_txbatch *b, struct sv_conn *conn, int npayload)
{
	return (!b->conn || b->conn == conn) && b->nframes < SV_TXBATCH_FRAMES &&
	       b->niov + 1 + npayload <= SV_TXBATCH_IOV;
}

void sv_txbatch_add(struct sv_txbatch *b, struct sv_conn *conn, size_t hdr_len,
		    const struct iovec *payload, int npayload)
{
	uint8_t *head = b->head[b->nframes];
	uint32_t flen = (uint32_t)hdr_len;

	if (!b->conn) {
		sv_conn_get(conn);
		b->conn = conn;
	}
	b->first[b->nframes] = (uint16_t)b->niov;
	b->iov[b->niov].iov_base = head;
	b->iov[b->niov++].iov_len = SV_FRAME_HEAD + hdr_len;
	for (int i = 0; i < npayload; i++) {
		if (!payload[i].iov_len)
			continue;
		flen += (uint32_t)payload[i].iov_len;
		b->iov[b->niov++] = payload[i];
	}
	flen = htonl(flen);
	memcpy(head, &flen, SV_FRAME_HEAD);
	b->bytes += SV_FRAME_HEAD + ntohl(flen);
	b->nframes++;
}

int sv_txbatch_flush(struct sv_txbatch *b)
{
	struct sv_frames f = { .iov = b->iov, .first = b->first, .nframes = b->nframes,
			       .ref = b->ref };
	bool ref = b->ref;
	int ret;

	if (!b->conn)
		return 0;
	b->first[b->nframes] = (uint16_t)b->niov;
	ret = conn_write(b->conn, &f, b->bytes);
	sv_conn_put(b->conn);
	sv_txbatch_init(b);
	b->ref = ref; /* a property of the pass, not of one flush */
	return ret;
}

/*
 * tx_lock held: a handshake frame joins the queue behind the handshake
 * frames there and ahead of everything else (what waits for the gate).
 */
static int queue_handshake(struct sv_conn *conn, const void *f, size_t len)
{
	struct sv_txbuf *b = malloc(sizeof(*b) + SV_FRAME_HEAD + len), **at = &conn->txq_head;
	uint32_t flen = htonl((uint32_t)len);

	if (!b)
		return -ENOMEM;
	memcpy(b->data, &flen, SV_FRAME_HEAD);
	memcpy(b->data + SV_FRAME_HEAD, f, len);
	b->len = SV_FRAME_HEAD + len;
	b->off = 0;
	/* each handshake frame has a buffer of its own */
	for (int i = 0; i < conn->gate_pass && *at; i++)
		at = &(*at)->next;
	b->next = *at;
	*at = b;
	if (!b->next)
		conn->txq_tail = b;
	conn->gate_pass++;
	atomic_store_explicit(&conn->txq_bytes, conn->txq_bytes + b->len, memory_order_relaxed);
	return 0;
}

/* Queue a handshake frame (f NULL: none) and ask for room to write it;
 * `open`: then let everything behind it go (the peer has proved itself). */
static int send_handshake(struct sv_conn *conn, const void *f, size_t len, bool open)
{
	int err;

	sv_mutex_lock(&conn->tx_lock);
	err = f ? queue_handshake(conn, f, len) : 0;
	if (!err && open)
		atomic_store_explicit(&conn->peer_authed, true, memory_order_release);
	/* out now where the transport takes it (a ring has no EPOLLOUT); in a
	 * receive pass the flush at its end writes it */
	if (!err && atomic_load(&conn->state) == SV_CONN_UP && !conn->tx_corked)
		(void)sv_conn_txq_write(conn);
	if (!err && sv_conn_tx_waiting(conn) && !conn->want_out && !conn->tx_corked) {
		conn->want_out = true;
		conn->host->want_output(conn);
	}
	sv_mutex_unlock(&conn->tx_lock);
	return err;
}

static int send_hello(struct sv_conn *conn)
{
	struct sv_hello *h = &conn->hello_mine;

	memset(h, 0, sizeof(*h));
	h->magic = htonl(SV_WIRE_MAGIC);
	h->version = htons(SV_WIRE_VERSION);
	memcpy(h->gid, conn->hello_gid->raw, 16);
	if (conn->outgoing)
		h->to_port = htons(conn->peer.port);
	h->from_port = htons(conn->local_port);
	if (conn->peer_pid && sv_cuda_can_import() && !sv_cuda_peer_refused(conn->peer_pid))
		h->flags = htons(SV_HELLO_GPU);
	sv_auth_nonce(h->nonce);
	/* our share of the PAKE, for the session the connector's nonce names */
	if (sv_auth_share(&conn->auth, h->share, conn->outgoing ? h->nonce : conn->hello_peer.nonce))
		return -EACCES;
	/* the side that accepts has both HELLOs now: the session key, or no
	 * answer to a share that is no element */
	if (!conn->outgoing && sv_auth_session(&conn->auth, conn->hello_peer.share, false, h,
					       &conn->hello_peer, sizeof(*h))) {
		sv_warn_limited("peer's HELLO carries no valid share; closing connection");
		return -EPROTO;
	}
	return send_handshake(conn, h, sizeof(*h), false);
}

/* Our AUTH.  The side that connects sends it first, once it has the other's
 * HELLO; the side that accepts, only once that AUTH has passed, and opens
 * its gate with it: whoever connects gets nothing keyed before it proved
 * itself. */
static int send_auth(struct sv_conn *conn)
{
	struct sv_auth_frame a = { .magic = htonl(SV_AUTH_MAGIC) };

	sv_auth_mac(a.mac, &conn->auth, conn->outgoing, &conn->hello_mine, &conn->hello_peer,
		    sizeof(struct sv_hello));
	return send_handshake(conn, &a, sizeof(a), !conn->outgoing);
}

/* An accepted connection answers the peer's HELLO with its own (its AUTH
 * waits for the peer's). */
static int answer_hello(struct sv_conn *conn)
{
	return send_hello(conn);
}

int sv_conn_open_unframed(struct sv_conn *conn)
{
	atomic_store(&conn->hello_seen, true);
	atomic_store(&conn->peer_authed, true);
	conn->registered = true;
	return 0;
}

uint32_t sv_conn_watch(const struct sv_conn *conn, bool in, bool out)
{
	if (conn->ops->watch)
		return conn->ops->watch(conn, in, out);
	return (in ? EPOLLIN : 0) | EPOLLRDHUP | (out ? EPOLLOUT : 0);
}

int sv_conn_start(struct sv_conn *conn)
{
	conn->registered = true;
	if (sv_auth_init())
		return -EACCES;
	if (conn->outgoing)
		return send_hello(conn);
	return conn->hello_seen ? answer_hello(conn) : 0;
}

/*
 * Who the peer of an accepted connection is comes from what the network
 * proves, not from what its HELLO says.  Over tcp that is the address the
 * connection comes from: a softverbs peer connects from its endpoint's own
 * address (tcp.c binds it), so an IPv4 HELLO naming another address is a
 * peer claiming an endpoint it is not, and it is refused (counted,
 * host->spoofed).  A peer that came over IPv6 connected from its GID's
 * IPv6 address, which its QPs give ours as their destination and which
 * our QPs connected to it were given for it: that address names it (its
 * HELLO names the endpoint by its IPv4 address).  A transport with no
 * address to prove (shm: a process of this host and user, SO_PEERCRED)
 * has no peer_addr; the HELLO names the peer there.  The port of the
 * endpoint, which of an address's endpoints it is, is the HELLO's word
 * (docs/SECURITY.md).
 */
static bool peer_proven(struct sv_conn *conn, const struct in6_addr *claim)
{
	struct in6_addr from;
	int err;

	if (!conn->ops->peer_addr)
		return true;
	err = conn->ops->peer_addr(conn, &from);
	if (err) {
		sv_warn_limited("a connection whose source address is unknown (%s): closed",
				strerror(-err));
		return false;
	}
	if (!sv_ip_is_v4(&from)) {
		conn->peer.ip = from;
		return true;
	}
	if (sv_ip_eq(&from, claim))
		return true;
	sv_warn_limited("refused a connection from %s: its HELLO says it is the endpoint %s:%u. "
			"A peer connects from its endpoint's own address (no NAT between "
			"peers); see docs/SECURITY.md",
			SV_IP_STR(&from), SV_IP_STR(claim), conn->peer.port);
	if (conn->host && conn->host->spoofed)
		conn->host->spoofed(conn);
	return false;
}

bool sv_conn_take_hello(struct sv_conn *conn, const uint8_t *f, size_t len)
{
	const struct sv_hello *h = (const void *)f;
	struct in6_addr claim;
	union ibv_gid gid;

	if (len != sizeof(*h) || ntohl(h->magic) != SV_WIRE_MAGIC ||
	    ntohs(h->version) != SV_WIRE_VERSION) {
		sv_warn_limited("peer speaks another protocol (or version); closing connection");
		return false;
	}
	memcpy(gid.raw, h->gid, 16);
	if (conn->via_shared) {
		/* accepted on the shared port: ours, or another endpoint's */
		uint16_t to = ntohs(h->to_port);

		conn->via_shared = false;
		if (to != conn->local_port) {
			if (!conn->ops->handoff || conn->ops->handoff(conn, f, len, to))
				sv_dbg("shared port: no endpoint %u here for a connection", to);
			return false; /* ours no more (or nobody's) */
		}
	}
	/* an incoming connection learns here where its peer listens, and
	 * who it is: what its HELLO claims, checked against what the network
	 * proves (before anything is answered) */
	if (!conn->outgoing) {
		if (!sv_gid_decode(&gid, &conn->peer)) {
			/* an endpoint with IPv6 only: its address, and its port
			 * beside it */
			memcpy(&conn->peer.ip, h->gid, 16);
			conn->peer.port = ntohs(h->from_port);
		}
		claim = conn->peer.ip;
		if (!peer_proven(conn, &claim))
			return false;
	}
	memcpy(&conn->hello_peer, h, sizeof(*h));
	/* an accepted connection answers now, or when the engine registers it
	 * (one handed over from the shared port comes with its HELLO) */
	if (!conn->outgoing && conn->registered && answer_hello(conn))
		return false;
	/* the connecting side proves itself first, now that it has the session
	 * key: the other proves itself only to a proven peer */
	if (conn->outgoing) {
		if (sv_auth_session(&conn->auth, h->share, true, &conn->hello_mine, h, sizeof(*h))) {
			sv_warn_limited("peer's HELLO carries no valid share; closing connection");
			return false;
		}
		if (send_auth(conn))
			return false;
	}
	memcpy(conn->peer_gid, h->gid, 16);
	atomic_store_explicit(&conn->peer_gpu, (ntohs(h->flags) & SV_HELLO_GPU) != 0,
			      memory_order_relaxed);
	conn->hello_seen = true;
	return true;
}

/* The first refusal in a process says how to let such peers in; the rest
 * are a peer's to provoke, and rate limited.  `ours`: the peer ended the
 * connection after our AUTH, before proving itself (it refused our proof,
 * since the side that connects proves itself first). */
static void refused(const struct sv_conn *conn, bool ours)
{
	static atomic_bool told;

	if (!atomic_exchange(&told, true))
		sv_warn("%s %s%s (ours: %s). To accept peers from other hosts, give every "
			"process the same SOFTVERBS_SECRET (or SOFTVERBS_SECRET_FILE); see "
			"docs/SECURITY.md",
			ours ? "a connection to" : "refused a connection from",
			SV_IP_STR(&conn->peer.ip),
			ours ? " ended after we proved the secret, before it did: it holds "
			       "another secret, or none"
			     : ": it does not hold this job's secret",
			sv_auth_source());
	else if (ours)
		sv_warn_limited("a connection to %s ended before it proved the secret",
				SV_IP_STR(&conn->peer.ip));
	else
		sv_warn_limited("refused a connection from %s: no proof of the secret",
				SV_IP_STR(&conn->peer.ip));
}

void sv_conn_ended_in_handshake(const struct sv_conn *conn)
{
	if (conn->outgoing && atomic_load(&conn->hello_seen) && sv_conn_gated(conn))
		refused(conn, true);
}

bool sv_conn_take_auth(struct sv_conn *conn, const uint8_t *f, size_t len)
{
	if (!sv_auth_verify(f, len, &conn->auth, conn->outgoing, &conn->hello_mine,
			    &conn->hello_peer, sizeof(struct sv_hello))) {
		refused(conn, false);
		return false;
	}
	/* the side that connects proved itself already: what it queued
	 * meanwhile goes now */
	if (conn->outgoing) {
		sv_auth_forget(&conn->auth);
		return !send_handshake(conn, NULL, 0, true);
	}
	/* the side that accepts proves itself now, to a proven peer, ahead of
	 * everything it queued meanwhile */
	if (send_auth(conn))
		return false;
	sv_auth_forget(&conn->auth);
	if (conn->host->proven)
		conn->host->proven(conn);
	return true;
}
