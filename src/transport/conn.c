/*
 * Connection output queue, common to transports: frames are written straight
 * to the transport when it has room, and the remainder is copied into a
 * queue that the engine thread flushes when the transport becomes writable.
 * Posting threads therefore never block on a slow peer, and the engine
 * thread never blocks at all.
 */
#include "transport/transport.h"
#include "engine/engine.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

void sv_conn_get(struct sv_conn *conn)
{
	atomic_fetch_add(&conn->refcnt, 1);
}

void sv_conn_put(struct sv_conn *conn)
{
	if (atomic_fetch_sub(&conn->refcnt, 1) != 1)
		return;
	conn->ops->close(conn);
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
	return __atomic_load_n(&conn->txq_bytes, __ATOMIC_RELAXED) || conn->ops->unsent(conn);
}

bool sv_conn_congested(struct sv_conn *conn)
{
	return __atomic_load_n(&conn->txq_bytes, __ATOMIC_RELAXED) > SV_CONN_TXQ_HIGH;
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
	__atomic_store_n(&conn->txq_bytes, conn->txq_bytes + off, __ATOMIC_RELAXED);
	return 0;
}

int sv_conn_send(struct sv_conn *conn, const struct iovec *iov, int iovcnt)
{
	struct iovec v[1 + SV_FRAME_MAX_IOV];
	uint32_t flen = 0;
	size_t total;
	ssize_t n = 0;
	int ret = 0, cnt = 0;

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
	total = sizeof(flen) + ntohl(flen);

	pthread_mutex_lock(&conn->tx_lock);
	if (atomic_load(&conn->state) == SV_CONN_DEAD) {
		ret = -ENOTCONN;
		goto out;
	}
	if (atomic_load(&conn->state) == SV_CONN_UP && !conn->txq_head) {
		n = conn->ops->writev(conn, v, cnt);
		if (n < 0) {
			/* the engine notices the broken socket and fails the conn */
			ret = -ENOTCONN;
			goto out;
		}
	}
	if ((size_t)n < total) {
		ret = queue_tail(conn, v, cnt, (size_t)n, total);
		if (!ret && !conn->want_out) {
			conn->want_out = true;
			sv_engine_want_output(conn); /* ask the engine to poll for room */
		}
	}
out:
	pthread_mutex_unlock(&conn->tx_lock);
	return ret;
}
