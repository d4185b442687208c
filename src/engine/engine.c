/*
 * The engine thread of one context: accepts connections, reads frames and
 * dispatches them to the responder or completer, flushes output queues, runs
 * deferred requester work and fires timers.  It sleeps in epoll_wait when
 * there is nothing to do, so an idle context costs no CPU, and it serves
 * one-sided operations without the application calling into the library.
 */
#include "engine/engine.h"
#include "verbs/stats.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* epoll tags for the non-connection fds */
static int tag_listen, tag_listen_shm, tag_wake;

/*
 * A polling application thread keeps the shm rings' bells unarmed for this
 * long after its last poll, so that a busy pair exchanges messages without a
 * system call.  Meanwhile the engine thread looks at the rings every
 * SV_POLL_TICK_NS by itself: the application may be spinning on memory
 * instead of the CQ, waiting for a one-sided WRITE only the engine serves.
 */
#define SV_POLL_LEASE_NS 1000000ull
#define SV_POLL_TICK_NS 20000ull

/*
 * What the calling thread is doing, so that it does not ring the doorbell
 * for work it is about to do itself: the holder of progress_lock runs the
 * deferred requester list before it lets go, and the engine thread
 * recomputes its timers at the end of each pass.
 */
static __thread struct sv_engine *tls_progress, *tls_engine_thread;

static struct sv_conn *conn_new(struct sv_engine *eng, int fd, bool outgoing,
				const struct sv_transport_ops *ops)
{
	struct sv_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->rxbuf = malloc(SV_RXBUF_CAP);
	if (!c->rxbuf) {
		free(c);
		return NULL;
	}
	c->rx_cap = SV_RXBUF_CAP;
	c->rx_lowat = 1; /* the socket's default */
	c->eng = eng;
	c->ops = ops;
	c->fd = fd;
	c->outgoing = outgoing;
	atomic_init(&c->refcnt, 1); /* the engine's list reference */
	atomic_init(&c->state, outgoing ? SV_CONN_CONNECTING : SV_CONN_UP);
	pthread_mutex_init(&c->tx_lock, NULL);
	sv_list_init(&c->link);
	sv_list_init(&c->tx_waiters);
	return c;
}

static int conn_arm(struct sv_conn *c, bool out)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP |
					    (out && !c->ops->room_by_bell ? EPOLLOUT : 0),
				  .data.ptr = c };

	return epoll_ctl(c->eng->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

/* eng->lock held: take c off the connection list (and the epoll count). */
static void conn_unlist(struct sv_engine *eng, struct sv_conn *c)
{
	sv_list_del(&c->link);
	if (!c->ops->rx_pending)
		eng->nconns_polled--;
}

static int conn_register(struct sv_engine *eng, struct sv_conn *c)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP |
					    (c->ops->room_by_bell ? 0 : EPOLLOUT),
				  .data.ptr = c };
	struct sv_hello h = { .magic = htonl(SV_WIRE_MAGIC), .version = htons(SV_WIRE_VERSION) };
	struct iovec iov = { &h, sizeof(h) };
	int err;

	memcpy(h.gid, eng->ctx->gid.raw, 16);
	/* the HELLO goes first; EPOLLOUT is armed below, so it is only queued */
	c->want_out = true;
	err = sv_conn_send(c, &iov, 1);
	if (err)
		return err;
	/* on the list before epoll can report it: the engine thread may fail
	 * it at once (a refused connect), and a failed connection must leave
	 * the list, not join it afterwards */
	pthread_mutex_lock(&eng->lock);
	sv_list_add_tail(&eng->conns, &c->link);
	if (!c->ops->rx_pending)
		eng->nconns_polled++;
	pthread_mutex_unlock(&eng->lock);
	if (epoll_ctl(eng->epfd, EPOLL_CTL_ADD, c->fd, &ev)) {
		err = -errno;
		pthread_mutex_lock(&eng->lock);
		conn_unlist(eng, c);
		pthread_mutex_unlock(&eng->lock);
		return err;
	}
	return 0;
}

struct sv_conn *sv_engine_conn_to(struct sv_engine *eng, const struct sv_endpoint_addr *peer)
{
	struct sv_conn *c;
	struct sv_list *l;

	pthread_mutex_lock(&eng->lock);
	for (l = eng->conns.next; l != &eng->conns; l = l->next) {
		c = SV_CONTAINER_OF(l, struct sv_conn, link);
		if (c->outgoing && atomic_load(&c->state) != SV_CONN_DEAD &&
		    c->peer.ip.s_addr == peer->ip.s_addr && c->peer.port == peer->port) {
			sv_conn_get(c);
			pthread_mutex_unlock(&eng->lock);
			return c;
		}
	}
	pthread_mutex_unlock(&eng->lock);

	/* same host and namespace: shm, unless told otherwise; an endpoint
	 * that has no shm listener (tcp forced there) is reached by tcp */
	c = conn_new(eng, -1, true, eng->mode == SV_TRANSPORT_TCP ? &sv_tcp_ops : &sv_shm_ops);
	if (!c)
		return NULL;
	c->peer = *peer;
	/* the caller's reference, taken before the engine thread can see the
	 * connection (and fail and release it) */
	sv_conn_get(c);
	if (c->ops == &sv_shm_ops && c->ops->connect(c)) {
		sv_dbg("no shm path to %s:%u", inet_ntoa(peer->ip), peer->port);
		if (eng->mode == SV_TRANSPORT_AUTO)
			c->ops = &sv_tcp_ops;
	}
	if ((c->ops == &sv_tcp_ops && c->ops->connect(c)) ||
	    (c->ops == &sv_shm_ops && c->fd < 0) || conn_register(eng, c)) {
		/* an unreachable peer behaves like a dead link: packets vanish and
		 * the requester's retry timer turns that into RETRY_EXC_ERR */
		sv_dbg("connect to %s:%u failed", inet_ntoa(peer->ip), peer->port);
		sv_stat_ctx_count(eng->ctx, SV_CTXC_CONNECT_FAIL);
		atomic_store(&c->state, SV_CONN_DEAD);
		c->ops->close(c);
		sv_conn_put(c); /* not on the list: only the caller's reference */
		return c;
	}
	return c; /* the caller's reference, beside the engine list's */
}

void sv_engine_want_output(struct sv_conn *conn)
{
	if (conn->fd >= 0)
		conn_arm(conn, true);
}

static void wake(struct sv_engine *eng)
{
	uint64_t one = 1;
	ssize_t r = write(eng->wake_fd, &one, sizeof(one));

	(void)r;
}

bool sv_engine_others_waiting(struct sv_engine *eng, struct sv_qp *qp)
{
	bool waiting;

	pthread_mutex_lock(&eng->lock);
	/* qp itself may be on the list, scheduled while we ran it directly */
	waiting = !sv_list_empty(&eng->run_qps) &&
		  (eng->run_qps.next != &qp->run_link || eng->run_qps.prev != &qp->run_link);
	pthread_mutex_unlock(&eng->lock);
	return waiting;
}

void sv_engine_schedule(struct sv_engine *eng, struct sv_qp *qp)
{
	bool kick = false;

	pthread_mutex_lock(&eng->lock);
	if (!sv_list_linked(&qp->run_link) && !qp->destroyed) {
		atomic_fetch_add(&qp->refcnt, 1);
		sv_list_add_tail(&eng->run_qps, &qp->run_link);
		kick = true;
	}
	pthread_mutex_unlock(&eng->lock);
	if (kick && tls_progress != eng)
		wake(eng);
}

void sv_engine_timer_update(struct sv_engine *eng, struct sv_qp *qp)
{
	uint64_t r = qp->rnr_until, a = qp->ack_deadline;
	uint64_t d = (r && (!a || r < a)) ? r : a;
	bool kick = false;

	pthread_mutex_lock(&eng->lock);
	if (d && !sv_list_linked(&qp->timer_link) && !qp->destroyed)
		sv_list_add_tail(&eng->timer_qps, &qp->timer_link);
	else if (!d && sv_list_linked(&qp->timer_link))
		sv_list_del(&qp->timer_link);
	/* wake the engine only if it would otherwise sleep past this deadline */
	if (d && d < eng->sleep_until) {
		eng->sleep_until = d;
		kick = true;
	}
	pthread_mutex_unlock(&eng->lock);
	if (kick && tls_engine_thread != eng)
		wake(eng);
}

void sv_engine_forget_qp(struct sv_engine *eng, struct sv_qp *qp)
{
	pthread_mutex_lock(&eng->lock);
	if (sv_list_linked(&qp->timer_link))
		sv_list_del(&qp->timer_link);
	if (sv_list_linked(&qp->run_link)) {
		sv_list_del(&qp->run_link);
		atomic_fetch_sub(&qp->refcnt, 1);
	}
	pthread_mutex_unlock(&eng->lock);
	/* parked on a connection (its own, or an AH's for UD): leave its list */
	struct sv_conn *c = atomic_exchange(&qp->txwait_conn, NULL);

	if (c) {
		pthread_mutex_lock(&c->tx_lock);
		if (sv_list_linked(&qp->txwait_link))
			sv_list_del(&qp->txwait_link);
		pthread_mutex_unlock(&c->tx_lock);
		sv_conn_put(c);
	}
}

/* tx_lock held: take the first QP off conn's waiters and reschedule it.
 * The caller holds its own reference to conn, so the one dropped here is
 * never the last. */
static void unpark_first(struct sv_conn *conn)
{
	struct sv_qp *qp = SV_CONTAINER_OF(conn->tx_waiters.next, struct sv_qp, txwait_link);
	struct sv_conn *c = atomic_exchange(&qp->txwait_conn, NULL);

	sv_list_del(&qp->txwait_link);
	sv_engine_schedule(conn->eng, qp);
	if (c)
		sv_conn_put(c);
}

/* A connection broke or misbehaved: it is gone for good (engine thread). */
void sv_engine_conn_fail(struct sv_conn *conn)
{
	struct sv_engine *eng = conn->eng;
	int was = atomic_exchange(&conn->state, SV_CONN_DEAD);

	/* lost, unless this context is closing it */
	if (was == SV_CONN_UP && !atomic_load(&eng->stop))
		sv_stat_ctx_count(eng->ctx, SV_CTXC_CONN_LOST);
	/* the first call closes; every call makes sure it leaves the list */
	if (was != SV_CONN_DEAD || conn->fd >= 0) {
		if (conn->fd >= 0)
			epoll_ctl(eng->epfd, EPOLL_CTL_DEL, conn->fd, NULL);
		pthread_mutex_lock(&conn->tx_lock);
		conn->ops->close(conn);
		/* blocked QPs must not wait for room that never comes: rerun them */
		while (!sv_list_empty(&conn->tx_waiters))
			unpark_first(conn);
		pthread_mutex_unlock(&conn->tx_lock);
	}
	/* the list's reference is dropped later by the engine thread, at a point
	 * where no stale epoll event can still name this connection */
	pthread_mutex_lock(&eng->lock);
	if (sv_list_linked(&conn->link)) {
		conn_unlist(eng, conn);
		sv_list_add_tail(&eng->graveyard, &conn->link);
	}
	pthread_mutex_unlock(&eng->lock);
}

static void bury_dead(struct sv_engine *eng)
{
	pthread_mutex_lock(&eng->lock);
	while (!sv_list_empty(&eng->graveyard)) {
		struct sv_conn *c = SV_CONTAINER_OF(eng->graveyard.next, struct sv_conn, link);

		sv_list_del(&c->link);
		pthread_mutex_unlock(&eng->lock);
		sv_conn_put(c);
		pthread_mutex_lock(&eng->lock);
	}
	pthread_mutex_unlock(&eng->lock);
}

/* Engine thread: write queued output; wake QPs waiting for room. */
static void conn_flush(struct sv_conn *c)
{
	pthread_mutex_lock(&c->tx_lock);
	__atomic_store_n(&c->tx_corked, false, __ATOMIC_RELAXED);
	if (sv_conn_txq_write(c) < 0) {
		pthread_mutex_unlock(&c->tx_lock);
		sv_engine_conn_fail(c);
		return;
	}
	if (!c->txq_head && c->want_out) {
		c->want_out = false;
		conn_arm(c, false);
	} else if (c->txq_head && !c->want_out) {
		c->want_out = true; /* what was corked did not all fit */
		conn_arm(c, true);
	}
	if (!sv_conn_congested(c)) {
		while (!sv_list_empty(&c->tx_waiters))
			unpark_first(c);
	}
	pthread_mutex_unlock(&c->tx_lock);
}

static bool handle_hello(struct sv_conn *c, const uint8_t *f, size_t len)
{
	const struct sv_hello *h = (const void *)f;
	union ibv_gid gid;

	if (len != sizeof(*h) || ntohl(h->magic) != SV_WIRE_MAGIC ||
	    ntohs(h->version) != SV_WIRE_VERSION) {
		sv_warn("peer speaks another protocol (or version); closing connection");
		return false;
	}
	memcpy(gid.raw, h->gid, 16);
	memcpy(c->peer_gid, h->gid, 16);
	if (!c->outgoing)
		sv_gid_decode(&gid, &c->peer);
	c->hello_seen = true;
	return true;
}

static void dispatch(struct sv_conn *conn, const struct sv_opcode_info *op, uint8_t *hdr,
		     const uint8_t *payload, uint32_t plen)
{
	const struct sv_bth *bth = (const void *)hdr;
	struct sv_qp *qp = sv_qp_lookup(conn->eng->ctx, ntohl(bth->dqpn) & SV_PSN_MASK);

	sv_stat_rx(conn->eng->ctx, qp, plen);
	if (!qp)
		return; /* no such QP: dropped, as a NIC drops it */
	pthread_mutex_lock(&qp->lock);
	if (op->mask & SV_OPF_REQUEST)
		sv_responder_rx(qp, conn, op, hdr, payload, plen);
	else
		sv_completer_rx(qp, op, hdr, payload, plen);
	pthread_mutex_unlock(&qp->lock);
	sv_qp_put(qp);
}

void sv_engine_rx_frame(struct sv_conn *conn, uint8_t *f, size_t len)
{
	const struct sv_opcode_info *op;
	const struct sv_bth *bth = (const void *)f;

	if (!conn->hello_seen) {
		if (!handle_hello(conn, f, len))
			sv_engine_conn_fail(conn);
		return;
	}
	if (len < sizeof(*bth) || !(op = sv_opcode_info(bth->opcode)) || len < op->hdr_len) {
		sv_warn("malformed packet (len %zu); closing connection", len);
		sv_engine_conn_fail(conn);
		return;
	}
	dispatch(conn, op, f, f + op->hdr_len, (uint32_t)(len - op->hdr_len));
}

void sv_engine_rx_placed(struct sv_conn *conn, uint8_t *hdr, const uint8_t *payload,
			 uint32_t plen)
{
	dispatch(conn, sv_opcode_info(((const struct sv_bth *)hdr)->opcode), hdr, payload, plen);
}

static void conn_event(struct sv_conn *c, uint32_t events)
{
	if (atomic_load(&c->state) == SV_CONN_DEAD)
		return;
	/* bells and end of stream (the data is in the ring).  Only the engine
	 * thread takes the bells: the socket stays readable until it has seen
	 * them, so a polling thread that takes the data and stops polling
	 * cannot leave the engine thread asleep on a ring it has not looked at */
	if (c->ops->poll_in && tls_engine_thread == c->eng &&
	    (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
		c->ops->poll_in(c);
	if (atomic_load(&c->state) == SV_CONN_CONNECTING && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
		int err = 0;
		socklen_t l = sizeof(err);

		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l) || err) {
			sv_stat_ctx_count(c->eng->ctx, SV_CTXC_CONNECT_FAIL);
			sv_engine_conn_fail(c);
			return;
		}
		atomic_store(&c->state, SV_CONN_UP);
	}
	if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
		pthread_mutex_lock(&c->tx_lock);
		__atomic_store_n(&c->tx_corked, true, __ATOMIC_RELAXED);
		pthread_mutex_unlock(&c->tx_lock);
		sv_conn_input(c, events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR));
		if (atomic_load(&c->state) == SV_CONN_DEAD)
			return;
		conn_flush(c); /* uncorks */
		return;
	}
	if (events & EPOLLOUT)
		conn_flush(c);
}

static void accept_all(struct sv_engine *eng)
{
	for (;;) {
		int fd = sv_tcp_accept(eng->listen_fd);
		struct sv_conn *c;

		if (fd < 0)
			return;
		c = conn_new(eng, fd, false, &sv_tcp_ops);
		if (!c) {
			close(fd);
			continue;
		}
		if (conn_register(eng, c))
			sv_conn_put(c); /* closes fd */
	}
}

static void accept_all_shm(struct sv_engine *eng)
{
	for (;;) {
		struct sv_conn *c = conn_new(eng, -1, false, &sv_shm_ops);
		int err;

		if (!c)
			return;
		err = sv_shm_accept(eng->listen_shm_fd, c);
		if (err) {
			sv_conn_put(c);
			if (err == -EAGAIN || err == -EWOULDBLOCK || err == -EMFILE ||
			    err == -ENFILE || err == -ENOMEM)
				return;
			continue; /* a refused peer: look for the next */
		}
		if (conn_register(eng, c))
			sv_conn_put(c);
	}
}

/* eng->lock held: an established connection whose data is in memory (shm). */
static bool conn_in_memory(struct sv_conn *c)
{
	return c->ops->rx_pending && c->tp && atomic_load(&c->state) == SV_CONN_UP;
}

/*
 * shm connections carry their data in memory: whoever makes progress looks
 * at their rings directly (no epoll, no system call) and handles those that
 * have something.  Holder of progress_lock only.
 */
static void shm_scan(struct sv_engine *eng)
{
	struct sv_conn *ready[32];
	int n = 0;

	pthread_mutex_lock(&eng->lock);
	for (struct sv_list *l = eng->conns.next; l != &eng->conns && n < 32; l = l->next) {
		struct sv_conn *c = SV_CONTAINER_OF(l, struct sv_conn, link);

		if (conn_in_memory(c) && c->ops->rx_pending(c)) {
			sv_conn_get(c);
			ready[n++] = c;
		}
	}
	pthread_mutex_unlock(&eng->lock);
	for (int i = 0; i < n; i++) {
		conn_event(ready[i], EPOLLIN);
		sv_conn_put(ready[i]);
	}
}

/*
 * Engine thread, before it sleeps: arm the bells of the shm rings, unless an
 * application thread polls: then *tick says to sleep one SV_POLL_TICK_NS.  Returns
 * true when a ring already holds data, so it must not sleep at all.
 */
static bool shm_arm_all(struct sv_engine *eng, bool *tick)
{
	uint64_t last = __atomic_load_n(&eng->last_poll_ns, __ATOMIC_RELAXED);
	bool lease = last && sv_now_ns() - last < SV_POLL_LEASE_NS;
	bool pending = false;

	*tick = false;
	pthread_mutex_lock(&eng->lock);
	for (struct sv_list *l = eng->conns.next; l != &eng->conns; l = l->next) {
		struct sv_conn *c = SV_CONTAINER_OF(l, struct sv_conn, link);

		if (!conn_in_memory(c))
			continue;
		if (lease) {
			*tick = true; /* an shm connection, and an application polls */
			break;
		}
		if (c->ops->arm(c))
			pending = true;
	}
	pthread_mutex_unlock(&eng->lock);
	return pending;
}

static void run_deferred(struct sv_engine *eng)
{
	for (;;) {
		struct sv_qp *qp;

		pthread_mutex_lock(&eng->lock);
		if (sv_list_empty(&eng->run_qps)) {
			pthread_mutex_unlock(&eng->lock);
			return;
		}
		qp = SV_CONTAINER_OF(eng->run_qps.next, struct sv_qp, run_link);
		sv_list_del(&qp->run_link);
		pthread_mutex_unlock(&eng->lock);
		pthread_mutex_lock(&qp->lock);
		if (!qp->destroyed)
			sv_requester_run(qp);
		pthread_mutex_unlock(&qp->lock);
		sv_qp_put(qp);
	}
}

/* Fire due timers; returns ms until the next one (-1: none). */
static int run_timers(struct sv_engine *eng)
{
	uint64_t now = sv_now_ns(), next = UINT64_MAX;
	struct sv_qp *due[64];
	int ndue = 0;
	struct sv_list *l;

	pthread_mutex_lock(&eng->lock);
	/*
	 * sleep_until is a lower bound of every armed deadline: the last scan
	 * set it to the earliest one, and sv_engine_timer_update lowers it for
	 * any earlier one armed since.  Before it nothing can be due, so the
	 * passes that traffic causes skip the walk, which costs one cache miss
	 * per QP with a timer armed (10,000 of them in tests/scale).
	 */
	if (now < eng->sleep_until) {
		next = eng->sleep_until;
		pthread_mutex_unlock(&eng->lock);
		return next == UINT64_MAX ? -1 : (int)((next - now) / 1000000u) + 1;
	}
	for (l = eng->timer_qps.next; l != &eng->timer_qps; l = l->next) {
		struct sv_qp *qp = SV_CONTAINER_OF(l, struct sv_qp, timer_link);
		uint64_t r = __atomic_load_n(&qp->rnr_until, __ATOMIC_RELAXED);
		uint64_t a = __atomic_load_n(&qp->ack_deadline, __ATOMIC_RELAXED);
		uint64_t d = (r && (!a || r < a)) ? r : a;

		if (d && d <= now && ndue < (int)SV_ARRAY_SIZE(due)) {
			atomic_fetch_add(&qp->refcnt, 1);
			due[ndue++] = qp;
		} else if (d && d < next) {
			next = d;
		}
	}
	eng->sleep_until = ndue ? now : next;
	pthread_mutex_unlock(&eng->lock);
	for (int i = 0; i < ndue; i++) {
		pthread_mutex_lock(&due[i]->lock);
		if (!due[i]->destroyed)
			sv_requester_timeout(due[i], now);
		pthread_mutex_unlock(&due[i]->lock);
		sv_qp_put(due[i]);
	}
	if (ndue)
		return 0; /* recompute promptly */
	if (next == UINT64_MAX)
		return -1;
	return (int)((next - now) / 1000000u) + 1;
}

static void handle_events(struct sv_engine *eng, struct epoll_event *evs, int n, bool engine_thread)
{
	for (int i = 0; i < n; i++) {
		void *p = evs[i].data.ptr;

		if (p == &tag_wake) {
			/* the doorbell is the engine thread's: it must see it to
			 * recompute its timers, so other threads leave it set */
			if (!engine_thread)
				continue;
			uint64_t v;
			ssize_t r = read(eng->wake_fd, &v, sizeof(v));

			(void)r;
		} else if (p == &tag_listen) {
			accept_all(eng);
		} else if (p == &tag_listen_shm) {
			if (engine_thread)
				accept_all_shm(eng); /* may wait briefly for the setup */
		} else {
			struct sv_conn *c = p;

			/* keep c alive even if it fails while we handle it */
			sv_conn_get(c);
			conn_event(c, evs[i].events);
			sv_conn_put(c);
		}
	}
}

/*
 * Progress from an application thread that polls a CQ and finds it empty:
 * it does the engine's work itself instead of waiting for the engine thread
 * to be scheduled, which on a busy machine is what latency is made of.
 */
void sv_engine_progress(struct sv_engine *eng)
{
	struct epoll_event evs[16];
	int n;

	if (pthread_mutex_trylock(&eng->progress_lock))
		return; /* someone is already making progress */
	tls_progress = eng;
	__atomic_store_n(&eng->last_poll_ns, sv_now_ns(), __ATOMIC_RELAXED);
	shm_scan(eng);
	/* only sockets need a system call to be looked at */
	if (__atomic_load_n(&eng->nconns_polled, __ATOMIC_RELAXED)) {
		n = epoll_wait(eng->epfd, evs, 16, 0);
		if (n > 0)
			handle_events(eng, evs, n, false);
	}
	run_deferred(eng);
	tls_progress = NULL;
	pthread_mutex_unlock(&eng->progress_lock);
}

static void *engine_main(void *arg)
{
	struct sv_engine *eng = arg;
	struct epoll_event evs[64];
	int timeout = -1;
	bool tick = false;

	tls_engine_thread = eng;
	/* the ticks below are tens of microseconds: no 50 us default slack */
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	while (!atomic_load(&eng->stop)) {
		int n;

		pthread_mutex_lock(&eng->progress_lock);
		bury_dead(eng);
		pthread_mutex_unlock(&eng->progress_lock);
		if (tick && timeout != 0) {
			struct timespec ts = { 0, (long)SV_POLL_TICK_NS };

			n = epoll_pwait2(eng->epfd, evs, 64, &ts, NULL);
			if (n < 0 && errno == ENOSYS)
				n = epoll_wait(eng->epfd, evs, 64, 1); /* kernels before 5.11 */
		} else {
			n = epoll_wait(eng->epfd, evs, 64, timeout);
		}
		pthread_mutex_lock(&eng->progress_lock);
		tls_progress = eng;
		if (n > 0)
			handle_events(eng, evs, n, true);
		shm_scan(eng);
		run_deferred(eng);
		tls_progress = NULL; /* timers may schedule: the doorbell brings us back */
		timeout = run_timers(eng);
		if (shm_arm_all(eng, &tick))
			timeout = 0;
		pthread_mutex_unlock(&eng->progress_lock);
	}
	return NULL;
}

/* SOFTVERBS_TRANSPORT: auto (shm to peers on this host, else tcp), tcp, shm. */
static enum sv_transport_mode transport_mode(void)
{
	const char *m = sv_env_str("SOFTVERBS_TRANSPORT", "auto");

	if (!strcmp(m, "tcp"))
		return SV_TRANSPORT_TCP;
	if (!strcmp(m, "shm"))
		return SV_TRANSPORT_SHM;
	if (strcmp(m, "auto"))
		sv_warn("SOFTVERBS_TRANSPORT=%s: expected auto, tcp or shm; using auto", m);
	return SV_TRANSPORT_AUTO;
}

int sv_engine_start(struct sv_context *ctx, struct in_addr ip)
{
	struct sv_engine *eng = calloc(1, sizeof(*eng));
	struct epoll_event ev = { .events = EPOLLIN };
	int fd, err;

	if (!eng)
		return ENOMEM;
	eng->ctx = ctx;
	eng->listen_fd = eng->listen_shm_fd = eng->wake_fd = eng->epfd = -1;
	eng->sleep_until = UINT64_MAX;
	pthread_mutex_init(&eng->lock, NULL);
	pthread_mutex_init(&eng->progress_lock, NULL);
	sv_list_init(&eng->conns);
	sv_list_init(&eng->graveyard);
	sv_list_init(&eng->timer_qps);
	sv_list_init(&eng->run_qps);
	ctx->eng = eng;

	eng->epfd = epoll_create1(EPOLL_CLOEXEC);
	eng->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (eng->epfd < 0 || eng->wake_fd < 0)
		goto fail_errno;
	fd = sv_tcp_listen(ip, &eng->port);
	if (fd < 0) {
		err = -fd;
		sv_err("cannot listen on %s: %s", inet_ntoa(ip), strerror(err));
		goto fail;
	}
	eng->listen_fd = fd;
	ev.data.ptr = &tag_listen;
	if (epoll_ctl(eng->epfd, EPOLL_CTL_ADD, eng->listen_fd, &ev))
		goto fail_errno;
	eng->mode = transport_mode();
	if (eng->mode != SV_TRANSPORT_TCP) {
		/* peers on this host and in this namespace find us here */
		fd = sv_shm_listen(ip, eng->port);
		if (fd < 0) {
			sv_warn("no shm listener for %s:%u (%s): tcp only", inet_ntoa(ip), eng->port,
				strerror(-fd));
		} else {
			eng->listen_shm_fd = fd;
			ev.data.ptr = &tag_listen_shm;
			if (epoll_ctl(eng->epfd, EPOLL_CTL_ADD, fd, &ev))
				goto fail_errno;
		}
	}
	ev.data.ptr = &tag_wake;
	if (epoll_ctl(eng->epfd, EPOLL_CTL_ADD, eng->wake_fd, &ev))
		goto fail_errno;
	sv_gid_encode(&ctx->gid, ip, eng->port);
	err = pthread_create(&eng->thread, NULL, engine_main, eng);
	if (err)
		goto fail;
	eng->thread_started = true;
	return 0;

fail_errno:
	err = errno;
fail:
	sv_engine_stop(eng);
	ctx->eng = NULL;
	return err;
}

/*
 * Closing a device: a connection still being set up comes up, what is still
 * queued (ACKs, READ responses, UD SENDs that completed once queued, as a
 * NIC's complete once on the wire) goes out first, and the peer sees an
 * orderly end of stream, all within one bound.  We then wait for the peer's
 * own end of stream: closing with its data (its HELLO, say) still on the way
 * would make our kernel answer with a reset, and a reset lets the peer's
 * kernel discard what we sent and it has not read yet.
 */
static void conn_drain(struct sv_conn *c)
{
	uint64_t deadline = sv_now_ns() + 200000000ull;
	char sink[4096];

	if (c->fd < 0)
		return;
	if (c->ops->room_by_bell) {
		/* shm: the peer reads the ring (and our memory, for single-copy
		 * payloads) after we are gone only if it was drained before */
		while ((c->txq_head || c->ops->unsent(c)) && sv_now_ns() < deadline &&
		       atomic_load(&c->state) == SV_CONN_UP) {
			conn_flush(c);
			poll(NULL, 0, 1);
		}
		return;
	}
	while (atomic_load(&c->state) == SV_CONN_CONNECTING && sv_now_ns() < deadline) {
		struct pollfd p = { .fd = c->fd, .events = POLLOUT };
		int err = 0;
		socklen_t l = sizeof(err);

		if (poll(&p, 1, 10) <= 0)
			continue;
		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l) || err)
			return;
		atomic_store(&c->state, SV_CONN_UP);
	}
	if (atomic_load(&c->state) != SV_CONN_UP)
		return;
	while (c->txq_head && sv_now_ns() < deadline) {
		struct pollfd p = { .fd = c->fd, .events = POLLOUT };

		conn_flush(c);
		if (atomic_load(&c->state) != SV_CONN_UP)
			return;
		if (c->txq_head)
			poll(&p, 1, 10);
	}
	shutdown(c->fd, SHUT_WR);
	while (sv_now_ns() < deadline) {
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, 10) <= 0)
			continue;
		n = recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			return;
	}
}

void sv_engine_quiesce(struct sv_engine *eng, uint64_t deadline_ns)
{
	while (eng && eng->thread_started && sv_now_ns() < deadline_ns) {
		bool pending = false;

		pthread_mutex_lock(&eng->lock);
		for (struct sv_list *l = eng->conns.next; l != &eng->conns && !pending; l = l->next) {
			struct sv_conn *c = SV_CONTAINER_OF(l, struct sv_conn, link);
			int st = atomic_load(&c->state);

			pending = st == SV_CONN_CONNECTING || (st == SV_CONN_UP && sv_conn_busy(c));
		}
		pthread_mutex_unlock(&eng->lock);
		if (!pending)
			return;
		poll(NULL, 0, 1);
	}
}

/*
 * Stop the engine thread and wait for it, within a bound: at exit, a thread
 * stuck elsewhere must not hang the process.  The engine's state stays as it
 * is; callers of the verbs still make progress themselves.
 */
void sv_engine_halt(struct sv_engine *eng)
{
	struct timespec until;

	if (!eng || !eng->thread_started)
		return;
	atomic_store(&eng->stop, true);
	wake(eng);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	if (pthread_timedjoin_np(eng->thread, NULL, &until)) {
		sv_warn("engine thread did not stop");
		return;
	}
	eng->thread_started = false;
}

void sv_engine_stop(struct sv_engine *eng)
{
	if (!eng)
		return;
	atomic_store(&eng->stop, true);
	if (eng->thread_started) {
		wake(eng);
		pthread_join(eng->thread, NULL);
	}
	while (!sv_list_empty(&eng->conns)) {
		struct sv_conn *c = SV_CONTAINER_OF(eng->conns.next, struct sv_conn, link);

		conn_drain(c);
		sv_engine_conn_fail(c);
	}
	bury_dead(eng);
	if (eng->listen_fd >= 0)
		close(eng->listen_fd);
	if (eng->listen_shm_fd >= 0)
		close(eng->listen_shm_fd);
	if (eng->wake_fd >= 0)
		close(eng->wake_fd);
	if (eng->epfd >= 0)
		close(eng->epfd);
	pthread_mutex_destroy(&eng->lock);
	pthread_mutex_destroy(&eng->progress_lock);
	free(eng);
}

/* ---- IBA timer encodings ---- */

uint64_t sv_rnr_timer_ns(uint8_t code)
{
	/* microseconds for codes 0..31 (code 0 is the longest: 655.36 ms) */
	static const uint32_t us[32] = {
		655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
		2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920,
		122880, 163840, 245760, 327680, 491520,
	};
	return (uint64_t)us[code & 31] * 1000u;
}

uint64_t sv_timeout_ns(uint8_t code)
{
	/* 4.096 us * 2^code; code 0 means "wait forever" (caller handles) */
	return 4096ull << (code & 31);
}
