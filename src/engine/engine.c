/*
 * The engine thread of one context: accepts connections, reads frames and
 * dispatches them to the responder or completer, flushes output queues, runs
 * deferred requester work and fires timers.  It sleeps in epoll_wait when
 * there is nothing to do, so an idle context costs no CPU, and it serves
 * one-sided operations without the application calling into the library.
 */
#include "engine/engine.h"
#include "engine/xrc_relay.h"
#include "engine/gpu.h"
#include "engine/stats.h"
#include "engine/mem_export.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* epoll tag of the doorbell; listeners are tagged with their sv_listener */
static int tag_wake;

/*
 * What a peer that has not proved itself may cost (docs/SECURITY.md): it has
 * eng->handshake_ns (SOFTVERBS_HANDSHAKE_TIMEOUT_MS, 10 s by default) to do
 * it, and at most SV_MAX_UNPROVEN accepted connections wait in their
 * handshake at once (one more pushes the oldest out: a real peer's handshake
 * takes a round trip, a flood's never ends).  Out of file descriptors, the
 * listeners rest for SV_LISTEN_REST_NS instead of waking the engine for a
 * connection they cannot take.
 */
#define SV_MAX_UNPROVEN 64
/*
 * A proven peer (one endpoint: the address and port its HELLO names) needs
 * one connection to us, two when both sides connected at once, and one
 * more for each it gave up as silent (sv_conn_silent): beyond this many,
 * its oldest goes, so that no peer holds more than this much buffer memory
 * here (SECURITY.md).
 */
#define SV_MAX_CONNS_PER_PEER 8
#define SV_LISTEN_REST_NS 100000000ull

/*
 * A polling application thread keeps the bells of in-memory connections
 * (transports whose data is in memory, not behind an fd) unarmed for this
 * long after its last poll, so that a busy pair exchanges messages without a
 * system call.  Meanwhile the engine thread looks at the rings by itself:
 * every SV_POLL_TICK_NS while one-sided requests come by the wire (the
 * application may be spinning on memory instead of the CQ, waiting for a
 * WRITE only a responder serves), every SV_POLL_SLOW_TICK_NS otherwise.
 * Two-sided traffic needs no tick: the polling thread receives it itself.
 * Same-host one-sided operations mostly execute at the initiator
 * (direct_exec.h), and a tick every 20 us is a context switch that, on a
 * machine with few cores, preempts a spinning application (ib_send_lat:
 * 99th percentile 170 us).
 */
#define SV_POLL_LEASE_NS 1000000ull
#define SV_POLL_TICK_NS 20000ull
#define SV_POLL_SLOW_TICK_NS 200000ull

/*
 * What the calling thread is doing, so that it does not ring the doorbell
 * for work it is about to do itself: the holder of progress_lock runs the
 * deferred requester list before it lets go, and the engine thread
 * recomputes its timers at the end of each pass.
 */
static __thread struct sv_engine *tls_progress, *tls_engine_thread;

static const struct sv_conn_host engine_host;

static struct sv_conn *conn_new(struct sv_engine *eng, int fd, bool outgoing,
				const struct sv_transport_ops *ops)
{
	struct sv_engine_conn *ec = calloc(1, sizeof(*ec));
	struct sv_conn *c = ec ? &ec->c : NULL;

	_Static_assert(offsetof(struct sv_engine_conn, c) == 0, "sv_conn_put frees the whole");
	if (!c)
		return NULL;
	c->eng = eng;
	c->host = &engine_host;
	c->ops = ops;
	c->fd = fd;
	c->outgoing = outgoing;
	c->local_port = eng->port;
	c->local_ip = eng->ctx->dev->addr;
	c->local_ifindex = eng->ctx->dev->ifindex;
	c->local_ip6 = eng->ctx->dev->ip6;
	c->has_local_ip6 = eng->ctx->dev->has_ip6;
	c->born_ns = sv_now_ns();
	sv_ref_init(&c->ref, 1); /* the engine's list reference */
	atomic_init(&c->state, outgoing ? SV_CONN_CONNECTING : SV_CONN_UP);
	sv_mutex_init(&c->tx_lock, SV_LOCK_CONN_TX);
	sv_list_init(&c->link);
	sv_list_init(&ec->tx_waiters);
	sv_list_init(&ec->held_link);
	sv_faults_conn_init(c);
	return c;
}

static inline struct sv_engine_conn *to_ec(struct sv_conn *c)
{
	return SV_CONTAINER_OF(c, struct sv_engine_conn, c);
}

/* tx_lock held.  While its input waits (rx_held), a socket's data is not
 * asked about (epoll would report it for ever); the peer's end still is,
 * and a ring's bells (which say there is room) still are. */
static int conn_arm(struct sv_conn *c, bool out)
{
	bool in = !to_ec(c)->rx_held || c->ops->room_by_bell;
	struct epoll_event ev = { .events = (in ? EPOLLIN : 0) | EPOLLRDHUP |
					    (out && !c->ops->room_by_bell ? EPOLLOUT : 0),
				  .data.ptr = c };

	sv_lock_assert_may_block("epoll_ctl");
	return epoll_ctl(c->eng->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

/* eng->lock held: conns changed (scan_in_memory's copy is out of date). */
static void conns_changed(struct sv_engine *eng)
{
	atomic_fetch_add_explicit(&eng->conns_gen, 1, memory_order_release);
}

/* eng->lock held: take c off the connection list (and the epoll count). */
static void conn_unlist(struct sv_engine *eng, struct sv_conn *c)
{
	sv_list_del(&c->link);
	conns_changed(eng);
	if (!c->ops->rx_pending)
		eng->nconns_polled--;
}

static void wake(struct sv_engine *eng);

/* eng->lock held: look again at handshakes and listeners by `when`; true if
 * the engine thread would otherwise sleep past it (then it must be woken). */
static bool housekeep_by(struct sv_engine *eng, uint64_t when)
{
	if (!eng->housekeep_ns || when < eng->housekeep_ns)
		eng->housekeep_ns = when;
	if (when >= eng->sleep_until)
		return false;
	eng->sleep_until = when;
	return true;
}

/* progress_lock held, eng->lock not (a system call each): the listeners
 * are polled (or, resting, not), as eng->listeners_resting last said */
static void poll_listeners(struct sv_engine *eng, bool on)
{
	sv_lock_assert_may_block("epoll_ctl");
	for (int i = 0; i < eng->nlisteners; i++) {
		struct epoll_event ev = { .events = on ? EPOLLIN : 0, .data.ptr = &eng->listeners[i] };

		if (eng->listeners[i].fd >= 0)
			epoll_ctl(eng->epfd, EPOLL_CTL_MOD, eng->listeners[i].fd, &ev);
	}
}

static int conn_register(struct sv_engine *eng, struct sv_conn *c)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP |
					    (c->ops->room_by_bell ? 0 : EPOLLOUT),
				  .data.ptr = c };
	bool kick;
	int err;

	if (c->ops->datagram) {
		/* only where packets go: nothing to poll, no handshake (a
		 * RoCE peer has none, rocev2.c) */
		atomic_store(&c->hello_seen, true);
		atomic_store(&c->peer_authed, true);
		c->registered = true;
		sv_mutex_lock(&eng->lock);
		sv_list_add_tail(&eng->conns, &c->link);
		conns_changed(eng);
		sv_mutex_unlock(&eng->lock);
		return 0;
	}
	if (c->ops->init && (err = c->ops->init(c)))
		return err;
	/* the HELLO goes first; EPOLLOUT is armed below, so it is only queued
	 * (on the shared port, only once the peer's says the connection is ours) */
	c->want_out = true;
	c->hello_gid = &eng->ctx->gid;
	err = sv_conn_start(c);
	if (err)
		return err;
	/* on the list before epoll can report it: the engine thread may fail
	 * it at once (a refused connect), and a failed connection must leave
	 * the list, not join it afterwards */
	sv_mutex_lock(&eng->lock);
	sv_list_add_tail(&eng->conns, &c->link);
	conns_changed(eng);
	if (!c->ops->rx_pending)
		eng->nconns_polled++;
	/* its handshake has eng->handshake_ns; the engine looks in time */
	kick = housekeep_by(eng, c->born_ns + eng->handshake_ns);
	sv_mutex_unlock(&eng->lock);
	if (kick && tls_engine_thread != eng)
		wake(eng);
	if (epoll_ctl(eng->epfd, EPOLL_CTL_ADD, c->fd, &ev)) {
		err = -errno;
		sv_mutex_lock(&eng->lock);
		conn_unlist(eng, c);
		sv_mutex_unlock(&eng->lock);
		return err;
	}
	return 0;
}

/* A live connection we opened to peer, with a reference, or NULL. */
static struct sv_conn *find_outgoing(struct sv_engine *eng, const struct sv_endpoint_addr *peer)
{
	struct sv_conn *c, *found = NULL;

	sv_mutex_lock(&eng->lock);
	for (struct sv_list *l = eng->conns.next; l != &eng->conns && !found; l = l->next) {
		c = SV_CONTAINER_OF(l, struct sv_conn, link);
		if (c->outgoing && atomic_load(&c->state) != SV_CONN_DEAD && !atomic_load(&c->abandoned) &&
		    sv_ip_eq(&c->peer.ip, &peer->ip) && c->peer.port == peer->port) {
			sv_conn_get(c);
			found = c;
		}
	}
	sv_mutex_unlock(&eng->lock);
	return found;
}

/* connect_lock held: a new connection to peer, with the caller's reference
 * (a dead one if it could not be made), or NULL (no memory). */
static struct sv_conn *conn_make(struct sv_engine *eng, const struct sv_endpoint_addr *peer)
{
	struct sv_conn *c = conn_new(eng, -1, true, NULL);

	if (!c)
		return NULL;
	c->peer = *peer;
	/* the caller's reference, taken before the engine thread can see the
	 * connection (and fail and release it) */
	sv_conn_get(c);
	if (sv_transport_connect(c, eng->mode) || conn_register(eng, c)) {
		/* an unreachable peer behaves like a dead link: packets vanish and
		 * the requester's retry timer turns that into RETRY_EXC_ERR */
		sv_dbg("connect to %s:%u failed", SV_IP_STR(&peer->ip), peer->port);
		sv_stat_ctx_count(eng->ctx, SV_CTXC_CONNECT_FAIL);
		atomic_store(&c->state, SV_CONN_DEAD);
		c->ops->close(c);
		sv_conn_put(c); /* not on the list: only the caller's reference */
		return c;
	}
	return c; /* the caller's reference, beside the engine list's */
}

struct sv_conn *sv_engine_conn_to(struct sv_engine *eng, const struct sv_endpoint_addr *to)
{
	struct sv_endpoint_addr at = { to->ip, sv_transport_peer_port(eng->mode, to->port) };
	const struct sv_endpoint_addr *peer = &at;
	struct sv_conn *c = find_outgoing(eng, peer);

	if (c)
		return c;
	/* none yet: make it, one thread at a time, and look again first, as
	 * another thread may have made it meanwhile (two QPs' first requests
	 * to one peer would otherwise make two connections) */
	sv_mutex_lock(&eng->connect_lock);
	c = find_outgoing(eng, peer);
	if (!c)
		c = conn_make(eng, peer);
	sv_mutex_unlock(&eng->connect_lock);
	return c;
}

/* The live connection of group mgid, with a reference, or NULL. */
static struct sv_conn *find_mcast(struct sv_engine *eng, const union ibv_gid *mgid)
{
	struct sv_conn *c, *found = NULL;

	sv_mutex_lock(&eng->lock);
	for (struct sv_list *l = eng->conns.next; l != &eng->conns && !found; l = l->next) {
		c = SV_CONTAINER_OF(l, struct sv_conn, link);
		if (sv_conn_is_mcast(c) && atomic_load(&c->state) != SV_CONN_DEAD &&
		    !memcmp(sv_mcast_mgid(c)->raw, mgid->raw, 16)) {
			sv_conn_get(c);
			found = c;
		}
	}
	sv_mutex_unlock(&eng->lock);
	return found;
}

struct sv_conn *sv_engine_conn_mcast(struct sv_engine *eng, const union ibv_gid *mgid, int *err)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct sv_conn *c = find_mcast(eng, mgid);

	if (c)
		return c;
	/* one connection per group, however many threads ask at once: made
	 * by one thread at a time (as sv_engine_conn_to's), which looks
	 * again first; its socket and epoll registration outside eng->lock */
	sv_mutex_lock(&eng->connect_lock);
	c = find_mcast(eng, mgid);
	if (c)
		goto out;
	c = conn_new(eng, -1, false, &sv_mcast_ops);
	if (!c) {
		*err = ENOMEM;
		goto out;
	}
	/* no handshake: each datagram proves itself (transport/mcast.c) */
	atomic_store(&c->hello_seen, true);
	atomic_store(&c->peer_authed, true);
	c->registered = true;
	*err = -sv_mcast_open(c, mgid, eng->ctx->dev->ip);
	ev.data.ptr = c;
	if (!*err && epoll_ctl(eng->epfd, EPOLL_CTL_ADD, c->fd, &ev))
		*err = errno;
	if (*err) {
		sv_conn_put(c);
		c = NULL;
		goto out;
	}
	sv_mutex_lock(&eng->lock);
	sv_list_add_tail(&eng->conns, &c->link);
	conns_changed(eng);
	eng->nconns_polled++;
	sv_mutex_unlock(&eng->lock);
	sv_conn_get(c); /* the caller's, beside the list's */
out:
	sv_mutex_unlock(&eng->connect_lock);
	return c;
}

/* Any thread, tx_lock held: flush conn when it has room (EPOLLOUT). */
static void want_output(struct sv_conn *conn)
{
	if (conn->fd >= 0)
		conn_arm(conn, true);
}


static void wake(struct sv_engine *eng)
{
	uint64_t one = 1;
	ssize_t r;

	sv_lock_assert_may_block("wake (a write to the doorbell)");
	r = write(eng->wake_fd, &one, sizeof(one));

	(void)r;
}

bool sv_engine_others_waiting(struct sv_engine *eng, struct sv_qp *qp)
{
	bool waiting;

	sv_mutex_lock(&eng->lock);
	/* qp itself may be on the list, scheduled while we ran it directly */
	waiting = !sv_list_empty(&eng->run_qps) &&
		  (eng->run_qps.next != &qp->run_link || eng->run_qps.prev != &qp->run_link);
	sv_mutex_unlock(&eng->lock);
	return waiting;
}

void sv_engine_schedule(struct sv_engine *eng, struct sv_qp *qp)
{
	bool kick = false;

	sv_mutex_lock(&eng->lock);
	if (!sv_list_linked(&qp->run_link) && !qp->destroyed) {
		sv_qp_get(qp);
		sv_list_add_tail(&eng->run_qps, &qp->run_link);
		atomic_fetch_add_explicit(&eng->nrun, 1, memory_order_relaxed);
		kick = true;
	}
	sv_mutex_unlock(&eng->lock);
	if (kick && tls_progress != eng)
		wake(eng);
}

void sv_engine_timer_update(struct sv_engine *eng, struct sv_qp *qp)
{
	uint64_t r = qp->req.rnr_until, a = qp->req.ack_deadline;
	uint64_t d = (r && (!a || r < a)) ? r : a;
	bool kick = false;

	/* the common case of a post whose WQEs all completed at once (executed
	 * on a peer's memory): no engine lock, which the engine thread shares */
	if (!d && !atomic_load_explicit(&qp->timer_linked, memory_order_relaxed))
		return;
	sv_mutex_lock(&eng->lock);
	if (d && !sv_list_linked(&qp->timer_link) && !qp->destroyed) {
		sv_list_add_tail(&eng->timer_qps, &qp->timer_link);
		atomic_store_explicit(&qp->timer_linked, true, memory_order_relaxed);
	} else if (!d && sv_list_linked(&qp->timer_link)) {
		sv_list_del(&qp->timer_link);
		atomic_store_explicit(&qp->timer_linked, false, memory_order_relaxed);
	}
	/* wake the engine only if it would otherwise sleep past this deadline */
	if (d && d < eng->sleep_until) {
		eng->sleep_until = d;
		kick = true;
	}
	sv_mutex_unlock(&eng->lock);
	if (kick && tls_engine_thread != eng)
		wake(eng);
}

void sv_engine_forget_qp(struct sv_engine *eng, struct sv_qp *qp)
{
	bool put = false;

	sv_mutex_lock(&eng->lock);
	if (sv_list_linked(&qp->timer_link)) {
		sv_list_del(&qp->timer_link);
		atomic_store_explicit(&qp->timer_linked, false, memory_order_relaxed);
	}
	if (sv_list_linked(&qp->run_link)) {
		sv_list_del(&qp->run_link);
		atomic_fetch_sub_explicit(&eng->nrun, 1, memory_order_relaxed);
		put = true;
	}
	sv_mutex_unlock(&eng->lock);
	if (put)
		sv_qp_put(qp); /* a last put wakes the destroyer: not under the lock */
	sv_engine_unpark_qp(qp);
}

void sv_engine_unpark_qp(struct sv_qp *qp)
{
	/* parked on a connection (its own, or an AH's for UD): leave its list */
	struct sv_conn *c = atomic_exchange(&qp->txwait_conn, NULL);

	if (c) {
		sv_mutex_lock(&c->tx_lock);
		if (sv_list_linked(&qp->txwait_link))
			sv_list_del(&qp->txwait_link);
		sv_mutex_unlock(&c->tx_lock);
		sv_conn_put(c);
	}
}

/* tx_lock held: take the first QP off conn's waiters and reschedule it.
 * The caller holds its own reference to conn, so the one dropped here is
 * never the last. */
static void unpark_first(struct sv_conn *conn)
{
	struct sv_qp *qp = SV_CONTAINER_OF(sv_conn_waiters(conn)->next, struct sv_qp, txwait_link);
	struct sv_conn *c = atomic_exchange(&qp->txwait_conn, NULL);

	sv_list_del(&qp->txwait_link);
	sv_engine_schedule(conn->eng, qp);
	if (c)
		sv_conn_put(c);
}

/* tx_lock held: the READ waiting for room on conn goes on (in its QP's
 * scheduled run: sv_responder_resume). */
static void unpark_read(struct sv_conn *conn)
{
	struct sv_engine_conn *ec = to_ec(conn);

	if (ec->rd_waiter) {
		sv_engine_schedule(conn->eng, ec->rd_waiter);
		sv_qp_put(ec->rd_waiter);
		ec->rd_waiter = NULL;
	}
}

bool sv_engine_read_wait(struct sv_conn *conn, struct sv_qp *qp)
{
	struct sv_engine_conn *ec = to_ec(conn);
	bool wait = false;

	sv_mutex_lock(&conn->tx_lock);
	if (!ec->rd_waiter && atomic_load(&conn->state) == SV_CONN_UP &&
	    sv_conn_tx_waiting(conn)) {
		sv_qp_get(qp);
		ec->rd_waiter = qp;
		atomic_fetch_add(&ec->reads_left, 1);
		wait = true;
	}
	sv_mutex_unlock(&conn->tx_lock);
	return wait;
}

void sv_engine_read_done(struct sv_conn *conn, struct sv_qp *qp)
{
	struct sv_engine_conn *ec = to_ec(conn);

	sv_mutex_lock(&conn->tx_lock);
	if (ec->rd_waiter == qp) {
		sv_qp_put(qp);
		ec->rd_waiter = NULL;
	}
	sv_mutex_unlock(&conn->tx_lock);
	/* the connection's input may go on now (release_held): an application
	 * thread (destroy, reset) has the engine thread look */
	if (atomic_fetch_sub(&ec->reads_left, 1) == 1 && tls_progress != conn->eng)
		wake(conn->eng);
}

void sv_engine_read_later(struct sv_conn *conn, struct sv_qp *qp)
{
	atomic_fetch_add(&to_ec(conn)->reads_left, 1);
	sv_engine_schedule(conn->eng, qp);
}

/* Is qp's READ still waiting for room on conn (not yet unparked)? */
static bool read_parked(struct sv_conn *conn, struct sv_qp *qp)
{
	bool parked;

	sv_mutex_lock(&conn->tx_lock);
	parked = to_ec(conn)->rd_waiter == qp;
	sv_mutex_unlock(&conn->tx_lock);
	return parked;
}

/*
 * An outgoing connection that ends before the peer's HELLO came has carried
 * nothing of ours but our HELLO: the rest waits behind the gate.  On the
 * host's shared port that is what a process leaving does to the connections
 * the kernel gave it and it had not handed on yet (it closes them, or its
 * listener's queue is reset), and UC and UD would lose those frames for
 * good, RC until its timer.  So such a connection's queue goes on a new
 * connection, up to SV_CONN_REDIALS times in a row.  The first goes straight
 * to the endpoint's own port, where no other process can take it; the
 * others (a host that lets only its shared port through) to the shared
 * port again, which the kernel may give to a process that is still there.
 */
#define SV_CONN_REDIALS 3

static bool redial_wanted(struct sv_conn *c)
{
	return c->outgoing && c->registered && !atomic_load(&c->hello_seen) &&
	       !atomic_load(&c->abandoned) && !atomic_load(&c->eng->stop) &&
	       to_ec(c)->redials < SV_CONN_REDIALS && atomic_load(&c->state) != SV_CONN_DEAD;
}

/* old's tx_lock held: its queue on a new connection, which is returned
 * with a reference (old->next), or NULL. */
static struct sv_conn *conn_redial(struct sv_conn *old)
{
	struct sv_engine *eng = old->eng;
	struct sv_conn *c = conn_new(eng, -1, true, NULL);
	struct sv_txbuf *frames;
	size_t bytes;

	if (!c)
		return NULL; /* the frames go with old */
	/* c's tx_lock is taken (its HELLO queued) under old's: a connection's
	 * before its replacement's.  Nothing takes them the other way: a
	 * frame for old goes on to old->next after old's is let go
	 * (conn_write), and c's other users never take old's
	 * (lock_order.h, sv_lock_nest_allow) */
	sv_lock_nest_allow(&old->tx_lock);
	frames = sv_conn_take_gated(old, &bytes);
	c->peer = old->peer;
	to_ec(c)->redials = to_ec(old)->redials + 1;
	c->direct = to_ec(c)->redials == 1;
	sv_conn_requeue(c, frames, bytes); /* behind the HELLO conn_register queues */
	if (sv_transport_connect(c, eng->mode) || conn_register(eng, c)) {
		sv_lock_nest_allow(NULL);
		atomic_store(&c->state, SV_CONN_DEAD);
		sv_conn_put(c); /* never listed: the frames go with it */
		return NULL;
	}
	sv_lock_nest_allow(NULL);
	sv_dbg("connection to %s:%u ended before the peer's HELLO; %zu bytes go on a new one",
	       SV_IP_STR(&c->peer.ip), c->peer.port, bytes);
	sv_conn_get(c);
	return c;
}

/* A connection broke or misbehaved: it is gone for good (engine thread). */
void sv_engine_conn_fail(struct sv_conn *conn)
{
	struct sv_engine *eng = conn->eng;
	bool buried = false;
	int was;

	if (redial_wanted(conn)) {
		/* the queue moves, and later frames are sent on (conn->next),
		 * under tx_lock: a frame posted meanwhile is never dropped */
		sv_mutex_lock(&conn->tx_lock);
		was = atomic_exchange(&conn->state, SV_CONN_DEAD);
		if (was != SV_CONN_DEAD)
			conn->next = conn_redial(conn);
		sv_mutex_unlock(&conn->tx_lock);
	} else {
		was = atomic_exchange(&conn->state, SV_CONN_DEAD);
	}

	/* lost, unless this context is closing it; one of ours never set up
	 * (a shared port's taker found no endpoint for us: the peer is gone)
	 * is a failed connect, unless it was dialled again (then its last
	 * try counts); one taken on the shared port and handed to another
	 * process, or never ours, is neither */
	if (was == SV_CONN_UP && !atomic_load(&eng->stop) && !conn->keep_socket &&
	    (conn->hello_seen || conn->outgoing) && !conn->next)
		sv_stat_ctx_count(eng->ctx, conn->hello_seen ? SV_CTXC_CONN_LOST
							     : SV_CTXC_CONNECT_FAIL);
	/* the side that connects proves itself first: a peer that then ends
	 * the connection refused the proof, and only this says so here */
	if (was == SV_CONN_UP && !atomic_load(&eng->stop))
		sv_conn_ended_in_handshake(conn);
	/* the first call closes; every call makes sure it leaves the list */
	if (was != SV_CONN_DEAD || conn->fd >= 0) {
		if (conn->fd >= 0)
			epoll_ctl(eng->epfd, EPOLL_CTL_DEL, conn->fd, NULL);
		sv_mutex_lock(&conn->tx_lock);
		conn->ops->close(conn);
		/* blocked QPs must not wait for room that never comes: rerun them */
		while (!sv_list_empty(sv_conn_waiters(conn)))
			unpark_first(conn);
		unpark_read(conn); /* it sees the connection dead and ends */
		sv_mutex_unlock(&conn->tx_lock);
	}
	/* the list's reference is dropped later by the engine thread, at a point
	 * where no stale epoll event can still name this connection */
	sv_mutex_lock(&eng->lock);
	if (sv_list_linked(&conn->link)) {
		conn_unlist(eng, conn);
		sv_list_add_tail(&eng->graveyard, &conn->link);
		buried = true;
	}
	sv_mutex_unlock(&eng->lock);
	/* failed by a polling thread: the engine thread, maybe asleep with no
	 * deadline, releases it (and its memory) now, not at its next wake-up */
	if (buried && tls_engine_thread != eng)
		wake(eng);
}

static void bury_dead(struct sv_engine *eng)
{
	sv_mutex_lock(&eng->lock);
	while (!sv_list_empty(&eng->graveyard)) {
		struct sv_conn *c = SV_CONTAINER_OF(eng->graveyard.next, struct sv_conn, link);

		sv_list_del(&c->link);
		sv_mutex_unlock(&eng->lock);
		sv_conn_put(c);
		sv_mutex_lock(&eng->lock);
	}
	sv_mutex_unlock(&eng->lock);
}

/* Engine thread: write queued output; wake QPs waiting for room. */
static void conn_flush(struct sv_conn *c)
{
	sv_mutex_lock(&c->tx_lock);
	atomic_store_explicit(&c->tx_corked, false, memory_order_relaxed);
	if (sv_conn_txq_write(c) < 0) {
		sv_mutex_unlock(&c->tx_lock);
		sv_engine_conn_fail(c);
		return;
	}
	if (!sv_conn_tx_waiting(c) && c->want_out) {
		c->want_out = false;
		conn_arm(c, false);
	} else if (sv_conn_tx_waiting(c) && !c->want_out && !sv_conn_gated(c)) {
		c->want_out = true; /* what was corked did not all fit */
		conn_arm(c, true);
	} else if (sv_conn_gated(c) && !c->gate_pass && c->want_out) {
		c->want_out = false; /* the rest waits for the peer's HELLO, not for room */
		conn_arm(c, false);
	}
	if (!sv_conn_congested(c)) {
		while (!sv_list_empty(sv_conn_waiters(c)))
			unpark_first(c);
		unpark_read(c);
	}
	sv_mutex_unlock(&c->tx_lock);
}

/*
 * Does a packet on conn come from the endpoint an RC/UC QP is connected to
 * (qp->peer, set at RTR)?  Endpoints, not connections: the peer's packets
 * may come on its connection to us or ours to it.
 */
static bool from_peer(const struct sv_qp *qp, const struct sv_conn *conn)
{
	/* a datagram says only its sender's address (every endpoint of it
	 * sends from the same ones), as rxe checks a packet's addresses */
	return sv_ip_eq(&conn->peer.ip, &qp->peer.ip) &&
	       (conn->ops->datagram || conn->peer.port == qp->peer.port);
}

static void dispatch(struct sv_conn *conn, const struct sv_opcode_info *op, uint8_t *hdr,
		     const uint8_t *payload, uint32_t plen, sv_cu_ctx src_gpu)
{
	const struct sv_bth *bth = (const void *)hdr;
	uint32_t dqpn = ntohl(bth->dqpn) & SV_PSN_MASK;
	struct sv_qp *qp;

	if (sv_conn_is_mcast(conn)) {
		/* a group carries only what was sent to the group */
		if (dqpn == SV_MCAST_QPN && (op->mask & SV_OPF_REQUEST))
			sv_mcast_deliver(conn, op, hdr, payload, plen);
		return;
	}
	if (op->mask & SV_OPF_RELAY) {
		/* for one of our XRC SRQs, from another process's receive QP */
		sv_xrc_relay_rx(conn, hdr, payload, plen);
		return;
	}
	if (op->mask & SV_OPF_CTRL) {
		/* about an XRC receive QP another process opened, or its answer */
		sv_xrc_ctrl_rx(conn, hdr, payload, plen);
		return;
	}
	qp = sv_qp_lookup(conn->eng->ctx, dqpn);
	if (!qp) {
		sv_stat_rx(conn->eng->ctx, NULL, plen);
		return; /* no such QP: dropped, as a NIC drops it */
	}
	sv_mutex_lock(&qp->lock);
	if ((op->mask & SV_OPF_RESPONSE) && qp->ti->xrc && qp->ti->receives) {
		/* an XRC receive QP sends no requests: an answer to it is the
		 * SRQ process's to requests it relayed (it checks that conn is
		 * the one it relayed on) */
		sv_responder_relayed_answer(qp, conn, op, hdr, payload, plen);
		goto out;
	}
	if (qp->ti->connected && !from_peer(qp, conn)) {
		/* a connected QP hears its own peer only: anyone else could
		 * otherwise forge ACKs and READ responses, draw ACKs that tell
		 * the expected PSN, or move the QP to the error state */
		sv_mutex_unlock(&qp->lock);
		sv_stat_ctx_count(conn->eng->ctx, SV_CTXC_RX_WRONG_PEER);
		sv_qp_put(qp);
		return;
	}
	sv_stat_rx(conn->eng->ctx, qp, plen);
	if (op->mask & SV_OPF_CNP) {
		if (qp->ti->sends)
			sv_flow_cnp(qp); /* congestion.c */
	} else if (op->mask & SV_OPF_REQUEST) {
		if (!qp->ti->receives) /* an XRC send QP */
			goto out;
		sv_responder_rx(qp, conn, op, hdr, payload, plen, src_gpu);
		/* congestion on the way: a CNP back, after the request's own
		 * answer, which it must not delay */
		if (bth->flags & SV_BTH_CE)
			sv_flow_marked(qp, conn, hdr, op);
	} else if (qp->ti->sends) { /* not an XRC receive QP */
		sv_completer_rx(qp, op, hdr, payload, plen, src_gpu);
	}
out:
	sv_mutex_unlock(&qp->lock);
	sv_qp_put(qp);
}

_Static_assert(SV_MAX_PACKET_LEN <= SV_MAX_FRAME, "a packet fits a transport frame");

/*
 * A packet that names its payload in the sender's GPU memory (gpu.h): only
 * from a process of this host (the shm transport vouches for it), only the
 * RC packets that carry data, and only a range inside what the sender
 * exported.  One that cannot be opened is dropped (the sender retries, then
 * fails the operation).
 */
static void rx_gpu_ref(struct sv_conn *conn, const struct sv_opcode_info *op, uint8_t *f,
		       size_t len)
{
	const struct sv_bth *bth = (const void *)f;
	struct sv_gpu_ref ref;
	const uint8_t *src;
	sv_cu_ctx ctx = NULL;

	if (!conn->peer_pid || (bth->opcode & 0xe0) != SV_OP_RC ||
	    !(op->mask & (SV_OPF_SEND | SV_OPF_WRITE | SV_OPF_RDRESP)) ||
	    (op->mask & SV_OPF_ATOMIC_WRITE) || len != op->hdr_len + sizeof(ref)) {
		sv_warn_limited("malformed GPU reference (opcode 0x%02x, len %zu); closing connection",
				bth->opcode, len);
		sv_engine_conn_fail(conn);
		return;
	}
	memcpy(&ref, f + op->hdr_len, sizeof(ref));
	src = sv_gpu_ref_open(&ref, &ctx);
	if (!src) {
		/* the peer is told to send the bytes from now on: the connection
		 * starts again with our HELLO saying so, and the sender's
		 * retransmission carries the payload */
		sv_warn_limited("GPU memory process %d named cannot be opened here; "
				"it sends the bytes from now on", (int)conn->peer_pid);
		sv_cuda_refuse_peer(conn->peer_pid);
		sv_engine_conn_fail(conn);
		return;
	}
	dispatch(conn, op, f, src, ntohl(ref.len), ctx);
}

/* Transport upcall: one frame after the HELLO, checked, then dispatched to a role. */
static void rx_frame(struct sv_conn *conn, uint8_t *f, size_t len)
{
	const struct sv_opcode_info *op;
	const struct sv_bth *bth = (const void *)f;

	if (len < sizeof(*bth) || !(op = sv_opcode_info(bth->opcode)) || len < op->hdr_len) {
		sv_warn_limited("malformed packet (len %zu); closing connection", len);
		sv_engine_conn_fail(conn);
		return;
	}
	if (bth->flags & SV_BTH_GPUREF) {
		rx_gpu_ref(conn, op, f, len);
		return;
	}
	dispatch(conn, op, f, f + op->hdr_len, (uint32_t)(len - op->hdr_len), NULL);
}

/* Transport upcall: a packet whose headers were checked, its payload in place. */
static void rx_placed(struct sv_conn *conn, uint8_t *hdr, const uint8_t *payload, uint32_t plen)
{
	dispatch(conn, sv_opcode_info(((const struct sv_bth *)hdr)->opcode), hdr, payload, plen,
		 NULL);
}

static void conn_event(struct sv_conn *c, uint32_t events);

/*
 * Is more than `mark` queued of what we answer on c?  Requests go on the
 * connection their requester opened (sv_engine_conn_to), so on one we
 * accepted we only answer; what we queue on one we opened is our own
 * requests, which wait for room by themselves (requester.c), and whose
 * answers come back on it: holding its input could leave both sides
 * waiting for each other.
 */
static bool answers_over(struct sv_conn *c, size_t mark)
{
	return !c->outgoing && atomic_load_explicit(&c->txq_bytes, memory_order_relaxed) > mark;
}

/*
 * Progress holder, asked by the transport before each frame: does c's input
 * wait?  It starts to while a READ waits for room on c, or while more than
 * SV_CONN_RX_HOLD bytes of answers are queued there: what the peer sends
 * meanwhile stays in its socket or ring, so a peer that does not read what
 * it asks for cannot make us hold more.  release_held ends the wait.
 */
static bool rx_held(struct sv_conn *c)
{
	struct sv_engine_conn *ec = to_ec(c);

	if (ec->rx_held)
		return true;
	if (!atomic_load_explicit(&ec->reads_left, memory_order_relaxed) &&
	    !answers_over(c, SV_CONN_RX_HOLD))
		return false;
	sv_mutex_lock(&c->tx_lock);
	ec->rx_held = true;
	if (c->fd >= 0 && atomic_load(&c->state) != SV_CONN_DEAD)
		conn_arm(c, c->want_out);
	sv_mutex_unlock(&c->tx_lock);
	sv_conn_get(c);
	sv_list_add_tail(&c->eng->held_conns, &ec->held_link);
	return true;
}

/* May a held connection's input go on (or is it dead)? */
static bool hold_over(struct sv_engine_conn *ec)
{
	return atomic_load(&ec->c.state) == SV_CONN_DEAD ||
	       (!atomic_load(&ec->reads_left) && !answers_over(&ec->c, SV_CONN_RX_HOLD / 2));
}

/* Progress holder: is a held connection's wait over?  (Its input, taken up
 * again, may have held it anew at once: the next pass must not sleep.) */
static bool held_ready(struct sv_engine *eng)
{
	for (struct sv_list *l = eng->held_conns.next; l != &eng->held_conns; l = l->next)
		if (hold_over(SV_CONTAINER_OF(l, struct sv_engine_conn, held_link)))
			return true;
	return false;
}

/* Progress holder: the connections whose input need not wait any more take
 * it up again (what is in their buffers first); true if one did. */
static bool release_held(struct sv_engine *eng)
{
	struct sv_list *l, *next;
	bool any = false;

	for (l = eng->held_conns.next; l != &eng->held_conns; l = next) {
		struct sv_engine_conn *ec = SV_CONTAINER_OF(l, struct sv_engine_conn, held_link);
		struct sv_conn *c = &ec->c;
		bool dead = atomic_load(&c->state) == SV_CONN_DEAD;

		next = l->next;
		if (!hold_over(ec))
			continue;
		sv_list_del(&ec->held_link);
		sv_mutex_lock(&c->tx_lock);
		ec->rx_held = false;
		if (!dead && c->fd >= 0)
			conn_arm(c, c->want_out);
		sv_mutex_unlock(&c->tx_lock);
		if (!dead) {
			conn_event(c, EPOLLIN);
			any = true;
		}
		sv_conn_put(c);
	}
	return any;
}

/* What the transports may ask of the engine about a connection. */
static void conn_proven(struct sv_conn *c);

/* tx_lock held: a frame fault injection held back is due at `when`. */
static void fault_timer(struct sv_conn *c, uint64_t when)
{
	struct sv_engine *eng = c->eng;
	bool kick;

	sv_mutex_lock(&eng->lock);
	kick = housekeep_by(eng, when);
	sv_mutex_unlock(&eng->lock);
	if (kick && tls_engine_thread != eng)
		wake(eng);
}

/* An accepted connection refused for the address its HELLO claims. */
static void conn_spoofed(struct sv_conn *c)
{
	sv_stat_ctx_count(c->eng->ctx, SV_CTXC_HELLO_SPOOFED);
}

static const struct sv_conn_host engine_host = {
	.want_output = want_output,
	.rx_frame = rx_frame,
	.fail = sv_engine_conn_fail,
	.proven = conn_proven,
	.spoofed = conn_spoofed,
	.rx_held = rx_held,
	.rx_classify = sv_engine_rx_classify,
	.rx_plan = sv_engine_rx_plan,
	.rx_plan_end = sv_engine_rx_plan_end,
	.rx_match = sv_engine_rx_match,
	.rx_placed = rx_placed,
	.fault_timer = fault_timer,
};

static bool conn_in_memory(struct sv_conn *c);

/* Progress holder: take in what the in-memory connections of eng->conns
 * hold (only those we opened: opened_only), walking the list itself (up to
 * 32 a pass), for when scan_in_memory's copy cannot be used. */
static void take_in_ready(struct sv_engine *eng, bool opened_only)
{
	struct sv_conn *ready[32];
	int n = 0;

	sv_mutex_lock(&eng->lock);
	for (struct sv_list *l = eng->conns.next; l != &eng->conns && n < 32; l = l->next) {
		struct sv_conn *c = SV_CONTAINER_OF(l, struct sv_conn, link);

		if ((c->outgoing || !opened_only) && conn_in_memory(c) && c->ops->rx_pending(c)) {
			sv_conn_get(c);
			ready[n++] = c;
		}
	}
	sv_mutex_unlock(&eng->lock);
	for (int i = 0; i < n; i++) {
		conn_event(ready[i], EPOLLIN);
		sv_conn_put(ready[i]);
	}
}

/* Progress holder: the same from scan_in_memory's copy (nscan >= 0), whose
 * references keep its connections: no lock, no reference taken. */
static void take_in_copy(struct sv_engine *eng, bool opened_only)
{
	for (int i = 0; i < eng->nscan; i++) {
		struct sv_conn *c = eng->scan[i];

		if ((c->outgoing || !opened_only) && conn_in_memory(c) && c->ops->rx_pending(c))
			conn_event(c, EPOLLIN);
	}
}

/*
 * Progress holder, about to take in requests from an in-memory connection
 * we accepted: first what the connections we opened hold, which is answers
 * to our requests.  A peer sends its requests on the connection it opened
 * and its answers (ACKs) on the one we opened, two rings; a NIC sends both
 * on one link, so an ACK it sent before its next request is taken in
 * before that request.  So it is here: the ACK was in its ring before the
 * request was in the other (the peer's application posts the request after
 * the completion that came after the ACK), so a look at the answer rings
 * after the request was seen finds it.  Programs count on that order: old
 * perftest (one completion channel for both CQs, one event per completion)
 * miscounts when a request's completion comes before the ACK's.
 */
static void answers_first(struct sv_engine *eng)
{
	/* scan_in_memory's copy, not rebuilt here: it may be walking it */
	if (eng->scan_built && eng->nscan >= 0 &&
	    atomic_load_explicit(&eng->conns_gen, memory_order_acquire) == eng->scan_gen)
		take_in_copy(eng, true);
	else
		take_in_ready(eng, true);
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
		if (c->ops->finish_connect(c)) {
			sv_engine_conn_fail(c);
			if (!c->next) /* a connect dialled again counts once, at its end */
				sv_stat_ctx_count(c->eng->ctx, SV_CTXC_CONNECT_FAIL);
			return;
		}
		atomic_store(&c->state, SV_CONN_UP);
	}
	if ((events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && to_ec(c)->rx_held) {
		/* the peer ended its side while we held its input: nobody
		 * waits for the answers we still owe it */
		sv_engine_conn_fail(c);
		return;
	}
	if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
		if (!c->outgoing && c->ops->rx_pending)
			answers_first(c->eng);
		sv_mutex_lock(&c->tx_lock);
		atomic_store_explicit(&c->tx_corked, true, memory_order_relaxed);
		sv_mutex_unlock(&c->tx_lock);
		c->ops->input(c, events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR));
		if (atomic_load(&c->state) == SV_CONN_DEAD)
			return;
		conn_flush(c); /* uncorks */
		return;
	}
	if (events & EPOLLOUT)
		conn_flush(c);
}

/* Out of descriptors: the listeners are not polled for a while. */
static void rest_listeners(struct sv_engine *eng)
{
	bool rest;

	sv_mutex_lock(&eng->lock);
	rest = !eng->listeners_resting;
	eng->listeners_resting = true;
	housekeep_by(eng, sv_now_ns() + SV_LISTEN_REST_NS);
	sv_mutex_unlock(&eng->lock);
	/* the progress holder's, as housekeep's polling them again is */
	if (rest) {
		poll_listeners(eng, false);
		sv_warn_limited("out of file descriptors: not accepting connections for %llu ms",
				SV_LISTEN_REST_NS / 1000000ull);
	}
}

/* Which connections a cap counts (`like`: the one that made it count). */
typedef bool (*conn_pick)(const struct sv_conn *o, const struct sv_conn *like);

/*
 * Of the connections `pick` chooses, more than cap: the oldest but `spare`
 * (returned with a reference, to fail), else NULL.  A cap is looked at each
 * time one more connection counts, so one going is always enough.
 */
static struct sv_conn *oldest_over_cap(struct sv_engine *eng, conn_pick pick,
				       const struct sv_conn *like, int cap,
				       const struct sv_conn *spare)
{
	struct sv_conn *oldest = NULL;
	int n = 0;

	sv_mutex_lock(&eng->lock);
	for (struct sv_list *l = eng->conns.next; l != &eng->conns; l = l->next) {
		struct sv_conn *o = SV_CONTAINER_OF(l, struct sv_conn, link);

		if (!pick(o, like))
			continue;
		n++;
		if (o != spare && (!oldest || o->born_ns < oldest->born_ns))
			oldest = o;
	}
	if (n > cap && oldest)
		sv_conn_get(oldest);
	else
		oldest = NULL;
	sv_mutex_unlock(&eng->lock);
	return oldest;
}

/* An accepted connection still in its handshake. */
static bool unproven(const struct sv_conn *o, const struct sv_conn *like)
{
	(void)like;
	return !o->outgoing && sv_conn_gated(o);
}

/* A live accepted connection whose peer proved itself as `like`'s did. */
static bool proven_as(const struct sv_conn *o, const struct sv_conn *like)
{
	return !o->outgoing && !sv_conn_gated(o) && atomic_load(&o->state) != SV_CONN_DEAD &&
	       sv_ip_eq(&o->peer.ip, &like->peer.ip) && o->peer.port == like->peer.port;
}

/* An accepted connection's peer proved itself: beyond SV_MAX_CONNS_PER_PEER
 * connections of that peer, its oldest other one goes. */
static void conn_proven(struct sv_conn *c)
{
	struct sv_conn *old;

	/* a peer of this host (shm): it may reach our MRs without our CPU */
	if (c->peer_pid)
		sv_export_share_all(c->eng->ctx);
	old = oldest_over_cap(c->eng, proven_as, c, SV_MAX_CONNS_PER_PEER, c);

	if (!old)
		return;
	sv_warn_limited("peer %s:%u holds more than %d connections: the oldest goes",
			SV_IP_STR(&c->peer.ip), c->peer.port,
			SV_MAX_CONNS_PER_PEER);
	sv_engine_conn_fail(old);
	sv_conn_put(old);
}

/* A datagram from listener l to receive into the engine's buffer
 * (progress_lock held). */
static struct sv_dgram dgram_slot(struct sv_engine *eng, struct sv_listener *l)
{
	return (struct sv_dgram){ .local_ip = eng->ctx->dev->addr, .local_port = eng->port,
				  .buf = eng->dgram_buf, .cap = SV_MAX_FRAME,
				  .raw = eng->dgram_buf + SV_MAX_FRAME, .raw_cap = SV_DGRAM_RAW_MAX,
				  .rx_state = &l->rx_state };
}

/*
 * A receiver that finds this many datagrams waiting at once asks whether
 * it has fallen behind its senders (its socket over half full): if so it
 * marks what it reads from then on as congested, as a switch marks at a
 * queue threshold, so that their requesters get CNPs and shrink their
 * windows before the socket overflows and drops (congestion.c).
 */
#define SV_DGRAM_BEHIND 32

/* A datagram recv refused: counted, where it says why. */
static void dgram_refused(struct sv_engine *eng, const struct sv_dgram *d)
{
	if (d->refused == SV_DGRAM_BAD_ICRC)
		sv_stat_ctx_count(eng->ctx, SV_CTXC_RX_BAD_ICRC);
	else if (d->refused == SV_DGRAM_BAD_TAG)
		sv_stat_ctx_count(eng->ctx, SV_CTXC_RX_BAD_TAG);
}

/*
 * A datagram listener: each packet goes up on the connection of the address
 * it came from (made on its first packet), as if it had arrived there.  At
 * most SV_DGRAM_PASS a call, and what the transport read ahead of them
 * (less than a batch of its own): epoll reports the rest again, and the
 * caller goes on to its timers and sends in between, so that a flood of
 * datagrams, whatever they are, never keeps a QP's ACKs and retransmissions
 * waiting for more than one pass.  A datagram the transport refuses costs
 * its share of the receive system call and its checks, never a connection,
 * a lookup or a log line of its own (rocev2.c).
 */
#define SV_DGRAM_PASS 64

static void dgram_input(struct sv_engine *eng, struct sv_listener *l)
{
	uint8_t *buf = eng->dgram_buf;
	bool behind = false;

	for (int i = 0;; i++) {
		struct sv_dgram d = dgram_slot(eng, l);
		struct sv_endpoint_addr from;
		struct sv_conn *c;
		int r = l->ops->recv(l->fd, &d);

		if (r == 0)
			return;
		if (r < 0) {
			dgram_refused(eng, &d);
		} else {
			from = (struct sv_endpoint_addr){ d.from, 0 };
			if ((c = sv_engine_conn_to(eng, &from))) {
				if (i == SV_DGRAM_BEHIND && l->ops->backlogged)
					behind = l->ops->backlogged(l->fd);
				if (behind && d.len > 1)
					buf[1] |= SV_BTH_CE;
				if (atomic_load(&c->state) == SV_CONN_UP)
					rx_frame(c, buf, d.len);
				sv_conn_put(c);
			}
		}
		/* what the transport read ahead is not left behind: epoll
		 * says nothing of it */
		if (i >= SV_DGRAM_PASS - 1 && !d.more)
			return;
	}
}

/* Accept every peer waiting on one of the endpoint's listeners. */
static void accept_all(struct sv_engine *eng, const struct sv_listener *l)
{
	for (;;) {
		struct sv_conn *c = conn_new(eng, -1, false, l->ops), *old;
		int err;

		if (!c)
			return;
		err = l->ops->accept(l->fd, c);
		if (err) {
			sv_conn_put(c);
			if (err == -EMFILE)
				rest_listeners(eng);
			if (err == -EAGAIN || err == -EMFILE)
				return;
			continue; /* a refused peer: look for the next */
		}
		if (conn_register(eng, c)) {
			sv_conn_put(c); /* closes its fd */
			continue;
		}
		if ((old = oldest_over_cap(eng, unproven, c, SV_MAX_UNPROVEN, NULL))) {
			sv_warn_limited("more than %d connections in their handshake: the oldest "
					"goes",
					SV_MAX_UNPROVEN);
			sv_engine_conn_fail(old);
			sv_conn_put(old);
		}
	}
}

/*
 * Handshakes that took too long fail; resting listeners are polled again.
 * Engine thread, progress_lock held.
 */
static void housekeep(struct sv_engine *eng, uint64_t now)
{
	struct sv_conn *late[32], *held[32];
	int nlate = 0, nheld = 0;
	bool waiting = false, unrest;

	sv_mutex_lock(&eng->lock);
	eng->housekeep_ns = 0;
	unrest = eng->listeners_resting;
	eng->listeners_resting = false;
	for (struct sv_list *l = eng->conns.next; l != &eng->conns; l = l->next) {
		struct sv_conn *c = SV_CONTAINER_OF(l, struct sv_conn, link);

		/* frames fault injection held back (SOFTVERBS_FAULTS) */
		if (atomic_load(&c->fault_nheld)) {
			if (nheld < (int)SV_ARRAY_SIZE(held)) {
				sv_conn_get(c);
				held[nheld++] = c;
			} else {
				housekeep_by(eng, now + 1000000ull);
			}
		}
		if (!sv_conn_gated(c))
			continue;
		if (now - c->born_ns >= eng->handshake_ns && nlate < (int)SV_ARRAY_SIZE(late)) {
			sv_conn_get(c);
			late[nlate++] = c;
		} else {
			waiting = true;
		}
	}
	if (waiting || nlate == (int)SV_ARRAY_SIZE(late))
		housekeep_by(eng, now + eng->handshake_ns / 10);
	sv_mutex_unlock(&eng->lock);
	if (unrest)
		poll_listeners(eng, true);
	for (int i = 0; i < nheld; i++) {
		uint64_t next = sv_conn_fault_release(held[i], now);

		if (next) {
			sv_mutex_lock(&eng->lock);
			housekeep_by(eng, next);
			sv_mutex_unlock(&eng->lock);
		}
		sv_conn_put(held[i]);
	}
	for (int i = 0; i < nlate; i++) {
		sv_dbg("connection to %s:%u: no handshake in %llu ms; closed",
		       SV_IP_STR(&late[i]->peer.ip), late[i]->peer.port,
		       (unsigned long long)(eng->handshake_ns / 1000000ull));
		sv_engine_conn_fail(late[i]);
		sv_conn_put(late[i]);
	}
}

/* eng->lock held: an established connection whose data is in memory. */
static bool conn_in_memory(struct sv_conn *c)
{
	/* one whose input waits is looked at again by release_held */
	return c->ops->rx_pending && c->tp && atomic_load(&c->state) == SV_CONN_UP &&
	       !to_ec(c)->rx_held;
}

/*
 * In-memory connections carry their data in memory: whoever makes progress looks
 * at their rings directly (no epoll, no system call) and handles those that
 * have something.  Holder of progress_lock only.
 */
/* Progress holder: the references of scan_in_memory's copy go. */
static void scan_drop(struct sv_engine *eng)
{
	for (int i = 0; i < eng->nscan; i++)
		sv_conn_put(eng->scan[i]);
	eng->nscan = 0;
	eng->scan_built = false;
}

/* Progress holder: copy the in-memory connections of conns, as of gen. */
static void scan_build(struct sv_engine *eng, unsigned gen)
{
	struct sv_conn *old[SV_ARRAY_SIZE(eng->scan)];
	int nold = SV_MAX(eng->nscan, 0), n = 0;

	memcpy(old, eng->scan, sizeof(old[0]) * (size_t)nold);
	sv_mutex_lock(&eng->lock);
	for (struct sv_list *l = eng->conns.next; l != &eng->conns; l = l->next) {
		struct sv_conn *c = SV_CONTAINER_OF(l, struct sv_conn, link);

		if (!c->ops->rx_pending)
			continue;
		if (n == (int)SV_ARRAY_SIZE(eng->scan)) {
			n = -1;
			break;
		}
		eng->scan[n++] = c;
	}
	for (int i = 0; i < n; i++)
		sv_conn_get(eng->scan[i]);
	/* the generation read before the walk: a change after it is seen next time */
	eng->scan_gen = gen;
	eng->nscan = n;
	eng->scan_built = true;
	sv_mutex_unlock(&eng->lock);
	/* after the lock: a last reference frees its connection */
	for (int i = 0; i < nold; i++)
		sv_conn_put(old[i]);
}

static void scan_in_memory(struct sv_engine *eng)
{
	unsigned gen = atomic_load_explicit(&eng->conns_gen, memory_order_acquire);

	if (!eng->scan_built || gen != eng->scan_gen)
		scan_build(eng, gen);
	if (eng->nscan >= 0)
		take_in_copy(eng, false);
	else
		take_in_ready(eng, false);
}

/*
 * Engine thread, before it sleeps: arm the bells of in-memory connections, unless an
 * application thread polls: then *tick_ns says how long to sleep before looking
 * again (0: no tick).  Returns true when a ring already holds data, so it must
 * not sleep at all.
 */
static bool arm_in_memory(struct sv_engine *eng, uint64_t *tick_ns)
{
	uint64_t now = sv_now_ns();
	uint64_t last = atomic_load_explicit(&eng->last_poll_ns, memory_order_relaxed);
	bool lease = last && now - last < SV_POLL_LEASE_NS;
	bool pending = false;

	if (atomic_load_explicit(&eng->one_sided_seen, memory_order_relaxed)) {
		atomic_store_explicit(&eng->one_sided_seen, false, memory_order_relaxed);
		eng->one_sided_until = now + SV_POLL_LEASE_NS;
	}
	*tick_ns = 0;
	sv_mutex_lock(&eng->lock);
	for (struct sv_list *l = eng->conns.next; l != &eng->conns; l = l->next) {
		struct sv_conn *c = SV_CONTAINER_OF(l, struct sv_conn, link);

		if (!conn_in_memory(c))
			continue;
		if (lease) {
			/* an in-memory connection, and an application polls */
			*tick_ns = now < eng->one_sided_until ? SV_POLL_TICK_NS
							      : SV_POLL_SLOW_TICK_NS;
			break;
		}
		if (c->ops->arm(c))
			pending = true;
	}
	sv_mutex_unlock(&eng->lock);
	return pending;
}

/*
 * The QPs scheduled when it starts, once each: one that schedules itself
 * again (a READ answered a burst at a time over a datagram transport,
 * do_read) runs in the next pass, after the listeners have been looked at,
 * and the doorbell says there is one.
 */
static void run_deferred(struct sv_engine *eng)
{
	unsigned left = atomic_load_explicit(&eng->nrun, memory_order_relaxed);

	for (;;) {
		struct sv_qp *qp;

		/* one scheduled by another thread after this look rings the
		 * doorbell (sv_engine_schedule): the engine thread runs it */
		if (!atomic_load_explicit(&eng->nrun, memory_order_relaxed))
			return;
		if (!left--) {
			wake(eng);
			return;
		}
		sv_mutex_lock(&eng->lock);
		if (sv_list_empty(&eng->run_qps)) {
			sv_mutex_unlock(&eng->lock);
			return;
		}
		qp = SV_CONTAINER_OF(eng->run_qps.next, struct sv_qp, run_link);
		sv_list_del(&qp->run_link);
		atomic_fetch_sub_explicit(&eng->nrun, 1, memory_order_relaxed);
		sv_mutex_unlock(&eng->lock);
		sv_mutex_lock(&qp->lock);
		if (!qp->destroyed) {
			/* a READ answered as its connection drains, once it has */
			if (qp->resp.rd_left.conn && !read_parked(qp->resp.rd_left.conn, qp))
				sv_responder_resume(qp);
			sv_requester_run(qp);
		}
		sv_mutex_unlock(&qp->lock);
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

	sv_mutex_lock(&eng->lock);
	if (eng->housekeep_ns && now >= eng->housekeep_ns) {
		sv_mutex_unlock(&eng->lock);
		housekeep(eng, now);
		sv_mutex_lock(&eng->lock);
	}
	/*
	 * sleep_until is a lower bound of every armed deadline: the last scan
	 * set it to the earliest one, and sv_engine_timer_update lowers it for
	 * any earlier one armed since.  Before it nothing can be due, so the
	 * passes that traffic causes skip the walk, which costs one cache miss
	 * per QP with a timer armed (10,000 of them in tests/scale).
	 */
	if (now < eng->sleep_until) {
		next = eng->sleep_until;
		sv_mutex_unlock(&eng->lock);
		return next == UINT64_MAX ? -1 : (int)((next - now) / 1000000u) + 1;
	}
	for (l = eng->timer_qps.next; l != &eng->timer_qps; l = l->next) {
		struct sv_qp *qp = SV_CONTAINER_OF(l, struct sv_qp, timer_link);
		uint64_t r = atomic_load_explicit(&qp->req.rnr_until, memory_order_relaxed);
		uint64_t a = atomic_load_explicit(&qp->req.ack_deadline, memory_order_relaxed);
		uint64_t d = (r && (!a || r < a)) ? r : a;

		if (d && d <= now && ndue < (int)SV_ARRAY_SIZE(due)) {
			sv_qp_get(qp);
			due[ndue++] = qp;
		} else if (d && d < next) {
			next = d;
		}
	}
	if (eng->housekeep_ns && eng->housekeep_ns < next)
		next = eng->housekeep_ns;
	eng->sleep_until = ndue ? now : next;
	sv_mutex_unlock(&eng->lock);
	for (int i = 0; i < ndue; i++) {
		sv_mutex_lock(&due[i]->lock);
		if (!due[i]->destroyed)
			sv_requester_timeout(due[i], now);
		sv_mutex_unlock(&due[i]->lock);
		sv_qp_put(due[i]);
	}
	if (ndue)
		return 0; /* recompute promptly */
	if (next == UINT64_MAX)
		return -1;
	return (int)((next - now) / 1000000u) + 1;
}

static bool is_conn_event(struct sv_engine *eng, const void *p)
{
	return p != &tag_wake &&
	       !(p >= (void *)eng->listeners && p < (void *)(eng->listeners + eng->nlisteners));
}

static void handle_events(struct sv_engine *eng, struct epoll_event *evs, int n, bool engine_thread)
{
	/* the connections we opened first: what they bring is answers, which
	 * the peer sent before the requests that came with them on the ones
	 * it opened (answers_first, for rings; here for sockets) */
	for (int i = 0; i < n; i++) {
		struct sv_conn *c = evs[i].data.ptr;

		if (is_conn_event(eng, c) && c->outgoing) {
			sv_conn_get(c);
			conn_event(c, evs[i].events);
			sv_conn_put(c);
			evs[i].data.ptr = NULL;
		}
	}
	for (int i = 0; i < n; i++) {
		void *p = evs[i].data.ptr;

		if (!p)
			continue; /* taken above */
		if (p == &tag_wake) {
			/* the doorbell is the engine thread's: it must see it to
			 * recompute its timers, so other threads leave it set */
			if (!engine_thread)
				continue;
			uint64_t v;
			ssize_t r = read(eng->wake_fd, &v, sizeof(v));

			(void)r;
		} else if (p >= (void *)eng->listeners && p < (void *)(eng->listeners + eng->nlisteners)) {
			struct sv_listener *l = p;

			if (l->ops->recv)
				dgram_input(eng, l);
			else
				accept_all(eng, l);
		} else {
			struct sv_conn *c = p;

			/* keep c alive even if it fails while we handle it */
			sv_conn_get(c);
			conn_event(c, evs[i].events);
			sv_conn_put(c);
		}
	}
}

/* One pass over what has arrived, from a thread other than the engine's, which
 * read the clock at now; progress_lock held. */
static void progress_locked(struct sv_engine *eng, uint64_t now)
{
	struct epoll_event evs[16];
	int n;

	tls_progress = eng;
	scan_in_memory(eng);
	/* only connections behind an fd need a system call to be looked at */
	if (atomic_load_explicit(&eng->nconns_polled, memory_order_relaxed) || eng->dgram_listening) {
		n = epoll_wait(eng->epfd, evs, 16, 0);
		if (n > 0)
			handle_events(eng, evs, n, false);
	}
	/* Due timers too.  A thread that polls in a loop takes progress_lock
	 * again as soon as it lets go, and a mutex is not fair: the engine
	 * thread, waiting for it, could miss every probe and ack deadline for
	 * as long as the polling goes on (hundreds of milliseconds, seen as
	 * ack timeouts where a 4 ms probe was due: RETRY_EXC_ERR under load).
	 * Not due: a comparison.  Fired: the engine thread is told, so that
	 * it waits for the next deadline, not the one it had. */
	if (now >= atomic_load_explicit(&eng->sleep_until, memory_order_relaxed) && run_timers(eng) == 0)
		wake(eng);
	run_deferred(eng);
	if (release_held(eng))
		run_deferred(eng);
	if (held_ready(eng))
		wake(eng); /* the engine thread goes on with it */
	tls_progress = NULL;
}

/*
 * Progress from an application thread that polls a CQ and finds it empty:
 * it does the engine's work itself instead of waiting for the engine thread
 * to be scheduled, which on a busy machine is what latency is made of.
 */
/*
 * A thread that polls in a loop reads the clock every SV_POLLS_PER_CLOCK
 * polls, not every time (a clock read costs a fifth of an empty poll): the
 * poll lease (arm_in_memory) and the due timers below are looked at against
 * a time that many polls old.  A thread that polls seldom thus refreshes the
 * lease seldom; the engine thread then arms the bells, as for one that does
 * not poll, and runs the timers itself.
 */
#define SV_POLLS_PER_CLOCK 8u

void sv_engine_progress(struct sv_engine *eng)
{
	if (sv_mutex_trylock(&eng->progress_lock))
		return; /* someone is already making progress */
	if (++eng->polls_unclocked >= SV_POLLS_PER_CLOCK || !eng->poll_now) {
		eng->polls_unclocked = 0;
		eng->poll_now = sv_now_ns();
		atomic_store_explicit(&eng->last_poll_ns, eng->poll_now, memory_order_relaxed);
	}
	progress_locked(eng, eng->poll_now);
	sv_mutex_unlock(&eng->progress_lock);
}

/*
 * Take in what has reached this host and not been processed yet, waiting for
 * whoever is processing now.  A NIC handles a packet as it arrives; here an
 * ACK can sit in a socket until a thread gets to it (ibv_modify_qp to ERR
 * and ibv_destroy_qp call this first: verbs/qp.c).
 */
void sv_engine_settle(struct sv_engine *eng)
{
	if (!eng || tls_progress == eng || tls_engine_thread == eng)
		return; /* called from within a pass: what is there is being handled */
	sv_mutex_lock(&eng->progress_lock);
	progress_locked(eng, sv_now_ns());
	sv_mutex_unlock(&eng->progress_lock);
}

void sv_engine_hold_alive(struct sv_engine *eng, pthread_mutex_t *m)
{
	atomic_store_explicit(&eng->alive_give, m, memory_order_release);
	wake(eng);
}

/* The engine thread: take the mutex handed over, and hold it (it is robust:
 * EOWNERDEAD, from a process before an exec, is made consistent). */
static void take_alive(struct sv_engine *eng)
{
	pthread_mutex_t *m;
	int e;

	if (!atomic_load_explicit(&eng->alive_give, memory_order_relaxed))
		return;
	m = atomic_exchange_explicit(&eng->alive_give, NULL, memory_order_acquire);
	if (!m || eng->alive_held)
		return;
	e = sv_pmutex_lock(m, SV_LOCK_ALIVE);
	if (e == EOWNERDEAD)
		e = pthread_mutex_consistent(m);
	if (!e)
		eng->alive_held = m;
}

/*
 * The sockets' lease.  While an application thread polls (it did within
 * SV_POLL_LEASE_NS), it takes in what the sockets bring itself
 * (progress_locked), and the engine thread waiting on them too would be
 * woken by every packet only to find it taken, or to take it first and
 * keep the poller waiting for progress_lock: on a machine whose cores the
 * spinning applications fill, each such wake-up is a context switch in the
 * round trip.  So the engine thread waits on its doorbell alone, and ticks
 * (SV_POLL_SLOW_TICK_NS) to see whether the polling goes on; when it has
 * stopped, the thread looks at everything and waits on the sockets again.
 * Not while one-sided requests come by the wire: the application may spin
 * on its memory rather than on a CQ, and a WRITE would wait for the tick.
 * A thread that arms a completion channel ends the lease
 * (sv_engine_end_lease), so that what it sleeps for is not left to a tick.
 * Returns whether to wait on bell_ep; *tick_ns is set for it.
 */
static bool socket_lease(struct sv_engine *eng, uint64_t *tick_ns)
{
	uint64_t now = sv_now_ns();
	uint64_t last = atomic_load_explicit(&eng->last_poll_ns, memory_order_relaxed);

	if (!last || now - last >= SV_POLL_LEASE_NS || now < eng->one_sided_until ||
	    !(atomic_load_explicit(&eng->nconns_polled, memory_order_relaxed) ||
	      eng->dgram_listening))
		return false;
	if (!*tick_ns)
		*tick_ns = SV_POLL_SLOW_TICK_NS;
	return true;
}

/* Wait on the doorbell for a tick (or the next timer, if sooner); true when
 * the tick ended it and an application thread has polled since: nothing
 * for this thread to do. */
static bool lease_wait(struct sv_engine *eng, uint64_t tick, int timeout)
{
	uint64_t ns = timeout > 0 ? SV_MIN(tick, (uint64_t)timeout * 1000000u) : tick;
	struct timespec ts = { 0, (long)ns };
	struct epoll_event ev;
	int n = 0;

	atomic_store(&eng->lease_wait, true);
	/* against sv_engine_end_lease: it clears last_poll_ns, then looks at
	 * lease_wait; this stores lease_wait, then looks at last_poll_ns
	 * (both sequentially consistent): one of the two sees the other */
	if (atomic_load(&eng->last_poll_ns)) {
		n = epoll_pwait2(eng->bell_ep, &ev, 1, &ts, NULL);
		if (n < 0 && errno == ENOSYS)
			n = epoll_wait(eng->bell_ep, &ev, 1, 1); /* kernels before 5.11 */
	}
	atomic_store(&eng->lease_wait, false);
	return n == 0 && atomic_load(&eng->last_poll_ns) &&
	       sv_now_ns() - atomic_load_explicit(&eng->last_poll_ns, memory_order_relaxed) < tick;
}

void sv_engine_end_lease(struct sv_engine *eng)
{
	if (!eng || !atomic_load_explicit(&eng->last_poll_ns, memory_order_relaxed))
		return;
	atomic_store(&eng->last_poll_ns, 0);
	if (atomic_load(&eng->lease_wait))
		wake(eng);
}

static void *engine_main(void *arg)
{
	struct sv_engine *eng = arg;
	struct epoll_event evs[64];
	int timeout = -1;
	uint64_t tick = 0;

	bool leased = false;

	tls_engine_thread = eng;
	/* the ticks below are tens of microseconds: no 50 us default slack */
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	while (!atomic_load(&eng->stop)) {
		unsigned gen;
		int n;

		take_alive(eng);
		if (leased && timeout != 0 && lease_wait(eng, tick, timeout)) {
			/* the tick ended it, and the application still polls */
			continue;
		} else if (leased && timeout != 0) {
			n = epoll_wait(eng->epfd, evs, 64, 0);
		} else if (tick && timeout != 0) {
			/* a timer due before the tick ends it early */
			uint64_t ns = timeout > 0 ? SV_MIN(tick, (uint64_t)timeout * 1000000u) : tick;
			struct timespec ts = { 0, (long)ns };

			n = epoll_pwait2(eng->epfd, evs, 64, &ts, NULL);
			if (n < 0 && errno == ENOSYS)
				n = epoll_wait(eng->epfd, evs, 64, 1); /* kernels before 5.11 */
		} else {
			n = epoll_wait(eng->epfd, evs, 64, timeout);
		}
		/* a signal ended the wait (a stopped and continued process, a
		 * debugger): what has arrived meanwhile goes before the timers,
		 * or a probe or ack timeout fires with its answer unread */
		if (n < 0 && errno == EINTR)
			n = epoll_wait(eng->epfd, evs, 64, 0);
		/* a tick, and an application thread has polled since the last
		 * one: it makes the progress (due timers included), and this
		 * thread would only wait for its lock (a futex wake-up in its
		 * next unlock) and take a CPU from it */
		if (n == 0 && tick && timeout != 0 &&
		    sv_now_ns() - atomic_load_explicit(&eng->last_poll_ns, memory_order_relaxed) < tick)
			continue;
		sv_mutex_lock(&eng->progress_lock);
		tls_progress = eng;
		if (n > 0)
			handle_events(eng, evs, n, true);
		scan_in_memory(eng);
		run_deferred(eng);
		if (release_held(eng))
			run_deferred(eng);
		tls_progress = NULL; /* timers may schedule: the doorbell brings us back */
		timeout = run_timers(eng);
		if (arm_in_memory(eng, &tick) || held_ready(eng))
			timeout = 0;
		leased = socket_lease(eng, &tick);
		/* the connections failed in this pass or a polling thread's: no
		 * event of the wait before can name them any more; nor does the
		 * copy of scan_in_memory keep them (and their rings) while this
		 * thread sleeps */
		bury_dead(eng);
		gen = atomic_load_explicit(&eng->conns_gen, memory_order_acquire);
		if (eng->scan_built && gen != eng->scan_gen)
			scan_build(eng, gen);
		sv_mutex_unlock(&eng->progress_lock);
	}
	/* before the table goes (sv_export_close): glibc keeps a held robust
	 * mutex in the thread's list, which must not point at unmapped memory */
	if (eng->alive_held)
		sv_pmutex_unlock(eng->alive_held);
	return NULL;
}

static void listener_close(struct sv_listener *l)
{
	if (l->rx_state && l->ops->recv_end)
		l->ops->recv_end(l->rx_state);
	l->rx_state = NULL;
	if (l->ops->unlisten)
		l->ops->unlisten(l->fd);
	else
		close(l->fd);
}

/*
 * Every transport listens at (ip, eng->port); 0 or an errno (all closed
 * then).  EADDRINUSE: a port or name of this endpoint is another program's
 * (the caller passes over the block), or, with *held, the host's port is
 * (the device cannot be opened: no block would help).
 */
static int listen_all(struct sv_engine *eng, const struct in6_addr *ip,
		      const struct sv_transport_ops *const *tps, int ntps, bool *held)
{
	struct epoll_event ev = { .events = EPOLLIN };

	for (int i = 0; i < ntps; i++) {
		struct sv_listener *l = &eng->listeners[eng->nlisteners];
		int fd = tps[i]->listen(ip, &eng->port);

		if (fd < 0 && (i == 0 || fd == -EADDRINUSE)) {
			/* the first transport is the endpoint: none without it;
			 * a port or name of it that another program holds (the
			 * tcp port, a unix name of it, its IPv6 port): another
			 * block; the host's port held: no device (never deaf) */
			for (int k = 0; k < eng->nlisteners; k++)
				listener_close(&eng->listeners[k]);
			eng->nlisteners = 0;
			/* (the transport said which port, and what to do) */
			*held = fd == -EADDRINUSE && tps[i]->host_port;
			if (!*held && i > 0)
				sv_info("%s:%u: the %s listener's name or port is another "
					"program's; trying another block",
					SV_IP_STR(ip), eng->port, tps[i]->name);
			return -fd;
		}
		if (fd == -ENOENT)
			continue; /* nothing of this transport's here (no IPv6 address) */
		if (fd < 0) {
			sv_warn("no %s listener for %s:%u (%s)", tps[i]->name, SV_IP_STR(ip),
				eng->port, strerror(-fd));
			continue;
		}
		l->ops = tps[i];
		l->fd = fd;
		if (tps[i]->recv && !eng->dgram_buf &&
		    !(eng->dgram_buf = malloc(SV_MAX_FRAME + SV_DGRAM_RAW_MAX))) {
			listener_close(l);
			sv_warn("no %s listener for %s: out of memory", tps[i]->name, SV_IP_STR(ip));
			continue;
		}
		/* packets come through it: polling threads look at it too */
		eng->dgram_listening |= tps[i]->recv != NULL;
		ev.data.ptr = l;
		if (epoll_ctl(eng->epfd, EPOLL_CTL_ADD, fd, &ev)) {
			int e = errno;

			listener_close(l);
			for (int k = 0; k < eng->nlisteners; k++)
				listener_close(&eng->listeners[k]);
			eng->nlisteners = 0;
			return e;
		}
		eng->nlisteners++;
	}
	return 0;
}

int sv_engine_start(struct sv_context *ctx, const struct in6_addr *ip)
{
	struct sv_engine *eng = calloc(1, sizeof(*eng));
	struct epoll_event ev = { .events = EPOLLIN };
	const struct sv_transport_ops *tps[SV_MAX_TRANSPORTS];
	struct sv_qpn_skip tried = { { 0 } }; /* blocks whose ports another program holds */
	int ntps, err;

	if (!eng)
		return ENOMEM;
	eng->ctx = ctx;
	eng->wake_fd = eng->epfd = eng->bell_ep = -1;
	eng->sleep_until = UINT64_MAX;
	eng->handshake_ns = (uint64_t)SV_MAX(1, sv_env_long("SOFTVERBS_HANDSHAKE_TIMEOUT_MS", 10000)) *
			    1000000ull;
	sv_mutex_init(&eng->lock, SV_LOCK_ENGINE);
	sv_mutex_init(&eng->progress_lock, SV_LOCK_PROGRESS);
	sv_mutex_init(&eng->connect_lock, SV_LOCK_CONNECT);
	sv_list_init(&eng->conns);
	sv_list_init(&eng->graveyard);
	sv_list_init(&eng->timer_qps);
	sv_list_init(&eng->run_qps);
	sv_list_init(&eng->held_conns);
	ctx->eng = eng;

	eng->epfd = epoll_create1(EPOLL_CLOEXEC);
	eng->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	eng->bell_ep = epoll_create1(EPOLL_CLOEXEC);
	if (eng->epfd < 0 || eng->wake_fd < 0 || eng->bell_ep < 0)
		goto fail_errno;
	eng->mode = sv_transport_mode();
	ntps = sv_transports_listening(eng->mode, tps);
	/* the endpoint: a block of the host's QP numbers, whose port it
	 * listens on (registry.h); a block whose port or names another
	 * program holds is passed over */
	for (;;) {
		bool held = false;
		uint32_t b;

		err = sv_qpn_claim(ip, &tried, &eng->qpns);
		if (err) {
			sv_err("no free block of QP numbers (and port) for %s", SV_IP_STR(ip));
			goto fail;
		}
		b = eng->qpns.block;
		eng->port = sv_qpn_block_port(b);
		err = listen_all(eng, ip, tps, ntps, &held);
		if (!err)
			break;
		sv_qpn_release(&eng->qpns);
		sv_qpn_skip_add(&tried, b);
		if (held)
			goto fail; /* EADDRINUSE: the transport said which port */
		if (err != EADDRINUSE) {
			sv_err("cannot listen on %s: %s", SV_IP_STR(ip), strerror(err));
			goto fail;
		}
	}
	sv_qpn_publish(&eng->qpns, eng->port);
	ctx->qpn_base = eng->qpns.block << SV_QPN_BLOCK_SHIFT;
	/* the numbers within the block: a permutation of the slots, keyed at
	 * random (registry.h), one for QPs and one for SRQs */
	ctx->qpn_key = (uint64_t)sv_random_u32() << 32 | sv_random_u32();
	sv_qpn_perm_init(&ctx->qpn_perm, ctx->qpn_key);
	sv_qpn_perm_init(&ctx->srqn_perm, (uint64_t)sv_random_u32() << 32 | sv_random_u32());
	ev.data.ptr = &tag_wake;
	if (epoll_ctl(eng->epfd, EPOLL_CTL_ADD, eng->wake_fd, &ev) ||
	    epoll_ctl(eng->bell_ep, EPOLL_CTL_ADD, eng->wake_fd, &ev))
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
 * Closing a device: each transport sends what is queued and ends the
 * stream.  Frames SOFTVERBS_FAULTS holds back (delayed, reordered) are on
 * the wire as far as the peer knows: they leave now rather than vanish,
 * as a packet in flight still arrives after its sender exits.
 */
static void conn_drain(struct sv_conn *c)
{
	if (atomic_load(&c->fault_nheld))
		(void)sv_conn_fault_release(c, UINT64_MAX);
	if (c->fd >= 0 || c->ops->datagram)
		c->ops->drain(c, sv_now_ns() + 200000000ull);
}

/* Is any connection of eng still connecting, or sending?  A socket's send
 * queue is asked of the kernel (sv_conn_busy): outside eng->lock, on the
 * connections taken from the list a batch at a time, with references. */
static bool conns_pending(struct sv_engine *eng)
{
	struct sv_conn *batch[32];
	unsigned skip = 0;
	bool pending = false, more = true;

	while (!pending && more) {
		unsigned n = 0, i = 0;

		more = false;
		sv_mutex_lock(&eng->lock);
		for (struct sv_list *l = eng->conns.next; l != &eng->conns && !pending; l = l->next) {
			struct sv_conn *c = SV_CONTAINER_OF(l, struct sv_conn, link);
			int st = atomic_load(&c->state);

			if (i++ < skip || st != SV_CONN_UP) {
				pending = st == SV_CONN_CONNECTING;
				continue;
			}
			if (n == SV_ARRAY_SIZE(batch)) {
				i--; /* this one opens the next batch */
				more = true;
				break;
			}
			sv_conn_get(c);
			batch[n++] = c;
		}
		sv_mutex_unlock(&eng->lock);
		skip = i;
		for (unsigned k = 0; k < n; k++) {
			pending = pending || sv_conn_busy(batch[k]);
			sv_conn_put(batch[k]);
		}
	}
	return pending;
}

void sv_engine_quiesce(struct sv_engine *eng, uint64_t deadline_ns)
{
	while (eng && eng->thread_started && sv_now_ns() < deadline_ns) {
		if (!conns_pending(eng))
			return;
		poll(NULL, 0, 1);
	}
}

/* What the kernel gave datagram listener l for the others goes on to them,
 * its recv passing it on (progress_lock held, or nobody else polls). */
static void drain_datagrams(struct sv_engine *eng, struct sv_listener *l)
{
	for (int n = 0; n < 65536; n++) {
		struct sv_dgram d = dgram_slot(eng, l);

		if (!l->ops->recv(l->fd, &d))
			break;
	}
}

/*
 * The engine thread is gone: a datagram listener on a port the host's
 * contexts share (rocev2.c) still holds what the kernel gave it for the
 * others, which its recv passes on to them; then it closes.  What is this
 * endpoint's own goes with it.  (A datagram that arrives between the last
 * look and the close is lost, as on a link that goes down.)
 */
static void leave_datagram_port(struct sv_engine *eng)
{
	for (int i = 0; i < eng->nlisteners; i++) {
		struct sv_listener *l = &eng->listeners[i];

		if (!l->ops->recv || l->fd < 0)
			continue;
		drain_datagrams(eng, l);
		listener_close(l);
		l->fd = -1;
	}
}

/*
 * The engine thread is gone: leave the host's shared port, or the kernel
 * would go on giving this endpoint connections nobody accepts (a library
 * unloaded with devices open, a context closing).
 */
static void leave_shared_port(struct sv_engine *eng)
{
	for (int i = 0; i < eng->nlisteners; i++)
		if (eng->listeners[i].ops == &sv_tcp_shared_ops && eng->listeners[i].fd >= 0) {
			close(eng->listeners[i].fd);
			eng->listeners[i].fd = -1;
		}
}

/*
 * The engine thread stopped at unload or exit (sv_engine_halt), the
 * context still open: leave a datagram port the host's contexts share
 * (rocev2's 4791) as well.  A socket left in its group keeps its share of
 * every flow to the host, and with nobody reading it those datagrams, any
 * process's, are lost for as long as this process lives (a library
 * unloaded with a device open: round 4 of unit_unload.rocev2 found its
 * WRITE's flow there and ended in RETRY_EXC_ERR).  What waits in it for the
 * others goes on to them first.  Application threads may still poll the
 * listener (at exit), so its descriptor is not closed but made another,
 * unbound, socket that never has anything to read: dup3 closes the bound
 * one, which leaves the group, and the descriptor stays valid for whoever
 * looks at it.  Draining takes the progress lock, which a polling thread
 * lets go at each poll; one that keeps it past the deadline is not waited
 * for (then nothing is drained).
 */
static void leave_shared_datagram_port(struct sv_engine *eng)
{
	struct timespec until;
	bool locked;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_nsec += 100000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	locked = !sv_mutex_timedlock(&eng->progress_lock, &until);
	for (int i = 0; i < eng->nlisteners; i++) {
		struct sv_listener *l = &eng->listeners[i];
		int quiet;

		if (!l->ops->shared_port || l->fd < 0)
			continue;
		if (locked)
			drain_datagrams(eng, l);
		quiet = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (quiet < 0 || dup3(quiet, l->fd, O_CLOEXEC) < 0)
			sv_warn("could not leave a shared datagram port: %s", strerror(errno));
		if (quiet >= 0)
			close(quiet);
	}
	if (locked)
		sv_mutex_unlock(&eng->progress_lock);
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
	leave_shared_port(eng);
	leave_shared_datagram_port(eng);
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
	/* before the drain: a connection the kernel gave this closing
	 * endpoint would wait unaccepted behind it */
	leave_shared_port(eng);
	leave_datagram_port(eng);
	while (!sv_list_empty(&eng->conns)) {
		struct sv_conn *c = SV_CONTAINER_OF(eng->conns.next, struct sv_conn, link);

		conn_drain(c);
		sv_engine_conn_fail(c);
	}
	while (!sv_list_empty(&eng->held_conns)) {
		struct sv_engine_conn *ec =
			SV_CONTAINER_OF(eng->held_conns.next, struct sv_engine_conn, held_link);

		sv_list_del(&ec->held_link);
		sv_conn_put(&ec->c);
	}
	scan_drop(eng);
	bury_dead(eng);
	for (int i = 0; i < eng->nlisteners; i++)
		if (eng->listeners[i].fd >= 0)
			listener_close(&eng->listeners[i]);
	sv_qpn_release(&eng->qpns);
	if (eng->wake_fd >= 0)
		close(eng->wake_fd);
	if (eng->epfd >= 0)
		close(eng->epfd);
	if (eng->bell_ep >= 0)
		close(eng->bell_ep);
	sv_mutex_destroy(&eng->lock);
	sv_mutex_destroy(&eng->progress_lock);
	sv_mutex_destroy(&eng->connect_lock);
	free(eng->dgram_buf);
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
