/*
 * Connection output queue, common to transports: frames are written straight
 * to the transport when it has room, and the remainder is copied into a
 * queue that the engine thread flushes when the transport becomes writable.
 * Posting threads therefore never block on a slow peer, and the engine
 * thread never blocks at all.
 */
#include "transport/transport.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

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
	free(conn->rxbuf);
	pthread_mutex_destroy(&conn->tx_lock);
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
	return atomic_load(&conn->state) == SV_CONN_UP &&
	       atomic_load_explicit(&conn->txq_bytes, memory_order_relaxed) != 0 &&
	       !atomic_load_explicit(&conn->tx_corked, memory_order_relaxed);
}

/* tx_lock held: copy the unsent tail of iov (after `skip` bytes) to the queue */
static int queue_tail(struct sv_conn *conn, const struct iovec *iov, int iovcnt, size_t skip,
		      size_t total)
{
	struct sv_txbuf *b = malloc(sizeof(*b) + (total - skip));
	size_t off = 0;

	if (!b)
		return -ENOMEM;
	for (int i = 0; i < iovcnt; i++) {
		size_t l = iov[i].iov_len;
		const uint8_t *p = iov[i].iov_base;

		if (skip >= l) {
			skip -= l;
			continue;
		}
		memcpy(b->data + off, p + skip, l - skip);
		off += l - skip;
		skip = 0;
	}
	b->len = off;
	b->off = 0;
	b->next = NULL;
	if (conn->txq_tail)
		conn->txq_tail->next = b;
	else
		conn->txq_head = b;
	conn->txq_tail = b;
	atomic_store_explicit(&conn->txq_bytes, conn->txq_bytes + off, memory_order_relaxed);
	return 0;
}

int sv_conn_flush_queue(struct sv_conn *c)
{
	int r;

	pthread_mutex_lock(&c->tx_lock);
	r = sv_conn_txq_write(c);
	pthread_mutex_unlock(&c->tx_lock);
	return r;
}

int sv_conn_txq_write(struct sv_conn *c)
{
	struct iovec v[16];
	int n;
	ssize_t w;

	for (;;) {
		struct sv_txbuf *b = c->txq_head;

		n = 0;
		for (; b && n < 16; b = b->next, n++) {
			v[n].iov_base = b->data + b->off;
			v[n].iov_len = b->len - b->off;
		}
		if (!n)
			return 0;
		w = c->ops->writev(c, v, n);
		if (w < 0)
			return (int)w;
		if (w == 0)
			return 0;
		while (w > 0) {
			size_t left;

			b = c->txq_head;
			left = b->len - b->off;
			if ((size_t)w >= left) {
				w -= (ssize_t)left;
				c->txq_head = b->next;
				if (!c->txq_head)
					c->txq_tail = NULL;
				atomic_store_explicit(&c->txq_bytes, c->txq_bytes - left, memory_order_relaxed);
				free(b);
			} else {
				b->off += (size_t)w;
				atomic_store_explicit(&c->txq_bytes, c->txq_bytes - (size_t)w,
						 memory_order_relaxed);
				w = 0;
			}
		}
	}
}

void sv_conn_uncork_now(struct sv_conn *conn)
{
	pthread_mutex_lock(&conn->tx_lock);
	/* a broken socket is noticed by the engine, which fails the conn;
	 * what the socket refuses now goes with the flush at the pass's end */
	if (atomic_load(&conn->state) == SV_CONN_UP && conn->txq_head)
		(void)sv_conn_txq_write(conn);
	pthread_mutex_unlock(&conn->tx_lock);
}

/* Write what the transport takes now and queue the rest; never blocks. */
static int conn_write(struct sv_conn *conn, const struct iovec *v, int cnt, size_t total,
		      bool ref)
{
	ssize_t n = 0;
	int ret = 0;
	bool up;

	pthread_mutex_lock(&conn->tx_lock);
	up = atomic_load(&conn->state) == SV_CONN_UP;
	if (atomic_load(&conn->state) == SV_CONN_DEAD) {
		ret = -ENOTCONN;
		goto out;
	}
	if (conn->tx_corked && total <= SV_CONN_CORK_MAX) {
		/* small frames wait for the uncork: one write for all of them */
		ret = queue_tail(conn, v, cnt, 0, total);
		goto out;
	}
	if (up && conn->txq_head && conn->tx_corked && sv_conn_txq_write(conn) < 0) {
		/* a big frame goes out at once, after what was corked */
		ret = -ENOTCONN;
		goto out;
	}
	if (up && !conn->txq_head) {
		conn->tx_ref = ref;
		n = conn->ops->writev(conn, v, cnt);
		conn->tx_ref = false;
		if (n < 0) {
			/* the engine notices the broken socket and fails the conn */
			ret = -ENOTCONN;
			goto out;
		}
	}
	if ((size_t)n < total) {
		ret = queue_tail(conn, v, cnt, (size_t)n, total);
		if (!ret && !conn->want_out && !conn->tx_corked) {
			conn->want_out = true;
			conn->host->want_output(conn); /* ask the engine to poll for room */
		}
	}
out:
	pthread_mutex_unlock(&conn->tx_lock);
	return ret;
}

int sv_conn_send(struct sv_conn *conn, const struct iovec *iov, int iovcnt)
{
	struct iovec v[1 + SV_FRAME_MAX_IOV];
	uint32_t flen = 0;
	int cnt = 0;

	if (iovcnt > SV_FRAME_MAX_IOV)
		return -EINVAL;
	for (int i = 0; i < iovcnt; i++)
		flen += (uint32_t)iov[i].iov_len;
	flen = htonl(flen);
	v[cnt].iov_base = &flen;
	v[cnt++].iov_len = sizeof(flen);
	for (int i = 0; i < iovcnt; i++)
		if (iov[i].iov_len)
			v[cnt++] = iov[i];
	return conn_write(conn, v, cnt, sizeof(flen) + ntohl(flen), false);
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
	b->iov[b->niov].iov_base = head;
	b->iov[b->niov++].iov_len = 4 + hdr_len;
	for (int i = 0; i < npayload; i++) {
		if (!payload[i].iov_len)
			continue;
		flen += (uint32_t)payload[i].iov_len;
		b->iov[b->niov++] = payload[i];
	}
	flen = htonl(flen);
	memcpy(head, &flen, 4);
	b->bytes += 4 + ntohl(flen);
	b->nframes++;
}

int sv_txbatch_flush(struct sv_txbatch *b)
{
	bool ref = b->ref;
	int ret;

	if (!b->conn)
		return 0;
	ret = conn_write(b->conn, b->iov, b->niov, b->bytes, b->ref);
	sv_conn_put(b->conn);
	sv_txbatch_init(b);
	b->ref = ref; /* a property of the pass, not of one flush */
	return ret;
}

int sv_conn_send_hello(struct sv_conn *conn, const union ibv_gid *gid)
{
	struct sv_hello h = { .magic = htonl(SV_WIRE_MAGIC), .version = htons(SV_WIRE_VERSION) };
	struct iovec iov = { &h, sizeof(h) };

	memcpy(h.gid, gid->raw, 16);
	return sv_conn_send(conn, &iov, 1);
}

bool sv_conn_take_hello(struct sv_conn *conn, const uint8_t *f, size_t len)
{
	const struct sv_hello *h = (const void *)f;
	union ibv_gid gid;

	if (len != sizeof(*h) || ntohl(h->magic) != SV_WIRE_MAGIC ||
	    ntohs(h->version) != SV_WIRE_VERSION) {
		sv_warn("peer speaks another protocol (or version); closing connection");
		return false;
	}
	memcpy(gid.raw, h->gid, 16);
	memcpy(conn->peer_gid, h->gid, 16);
	/* an incoming connection learns here where its peer listens */
	if (!conn->outgoing)
		sv_gid_decode(&gid, &conn->peer);
	conn->hello_seen = true;
	return true;
}
