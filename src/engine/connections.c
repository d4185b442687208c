/*
 * The engine's connection table: connections made (to a peer, to a
 * multicast group) and accepted, within the admission caps; their events
 * (connect completion, input, output), the input held while answers back
 * up, failure, redial and burial; and what a connection asks of its owner
 * (struct sv_conn_host).
 */
#include "engine/engine_internal.h"
#include "engine/direct_recv.h"
#include "engine/stats.h"
#include "engine/mem_export.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

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

/* tx_lock held.  While its input waits (rx_held), a socket's data is not
 * asked about (epoll would report it for ever); the peer's end still is,
 * and a ring's bells (which say there is room) still are. */
static int conn_arm(struct sv_conn *c, bool out)
{
	struct epoll_event ev = { .events = sv_conn_watch(c, !to_ec(c)->rx_held, out),
				  .data.ptr = c };

	sv_lock_assert_may_block("epoll_ctl");
	atomic_store_explicit(&to_ec(c)->out_armed, out, memory_order_relaxed);
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
	if (to_ec(c)->polled)
		eng->nconns_polled--;
	to_ec(c)->polled = false;
}

static int conn_register(struct sv_engine *eng, struct sv_conn *c)
{
	struct epoll_event ev = { .data.ptr = c };
	bool kick;
	int err;

	/* the HELLO goes first; EPOLLOUT is armed below, so it is only queued
	 * (on the shared port, only once the peer's says the connection is ours) */
	c->want_out = c->fd >= 0;
	c->hello_gid = &eng->ctx->gid;
	err = c->ops->open(c);
	if (err)
		return err;
	if (c->fd < 0) {
		/* only where packets go: nothing to poll (what arrives for it
		 * comes through a listener) */
		sv_mutex_lock(&eng->lock);
		sv_list_add_tail(&eng->conns, &c->link);
		conns_changed(eng);
		sv_mutex_unlock(&eng->lock);
		return 0;
	}
	ev.events = sv_conn_watch(c, true, true);
	atomic_store_explicit(&to_ec(c)->out_armed, true, memory_order_relaxed);
	/* on the list before epoll can report it: the engine thread may fail
	 * it at once (a refused connect), and a failed connection must leave
	 * the list, not join it afterwards */
	sv_mutex_lock(&eng->lock);
	sv_list_add_tail(&eng->conns, &c->link);
	conns_changed(eng);
	if (!to_ec(c)->mem) {
		to_ec(c)->polled = true;
		eng->nconns_polled++;
	}
	/* its handshake has eng->handshake_ns; the engine looks in time */
	kick = sv_eng_housekeep_by(eng, c->born_ns + eng->handshake_ns);
	sv_mutex_unlock(&eng->lock);
	if (kick && sv_eng_tls_engine_thread != eng)
		sv_eng_wake(eng);
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
		const union ibv_gid *g = sv_conn_group(c);

		if (g && atomic_load(&c->state) != SV_CONN_DEAD && !memcmp(g->raw, mgid->raw, 16)) {
			sv_conn_get(c);
			found = c;
		}
	}
	sv_mutex_unlock(&eng->lock);
	return found;
}

struct sv_conn *sv_engine_conn_mcast(struct sv_engine *eng, const union ibv_gid *mgid, int *err)
{
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
	c = conn_new(eng, -1, false, NULL);
	if (!c) {
		*err = ENOMEM;
		goto out;
	}
	/* no handshake: each datagram proves itself (transport/mcast.c) */
	*err = -sv_transport_group(c, mgid, eng->ctx->dev->ip);
	if (!*err)
		*err = -conn_register(eng, c);
	if (*err) {
		sv_conn_put(c);
		c = NULL;
		goto out;
	}
	sv_conn_get(c); /* the caller's, beside the list's */
out:
	sv_mutex_unlock(&eng->connect_lock);
	return c;
}

/* Any thread, tx_lock held: flush conn when it has room (EPOLLOUT).  The
 * engine thread watches for it at once, not at the end of a lease in
 * which it waits on its doorbell alone (loop.c, socket_lease): the poster
 * may not make progress before then. */
static void want_output(struct sv_conn *conn)
{
	if (conn->fd >= 0) {
		conn_arm(conn, true);
		sv_engine_end_lease(conn->eng);
	}
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
			sv_eng_unpark_first(conn);
		sv_eng_unpark_read(conn); /* it sees the connection dead and ends */
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
	if (buried && sv_eng_tls_engine_thread != eng)
		sv_eng_wake(eng);
}

void sv_eng_bury_dead(struct sv_engine *eng)
{
	sv_mutex_lock(&eng->lock);
	while (!sv_list_empty(&eng->graveyard)) {
		struct sv_conn *c = SV_CONTAINER_OF(eng->graveyard.next, struct sv_conn, link);

		sv_list_del(&c->link);
		sv_mutex_unlock(&eng->lock);
		/* a peer of this host gone inside a SEND it placed into one of
		 * our queues leaves that WQE taken: let go of it */
		if (c->peer_pid && c->hello_seen && !atomic_load(&eng->stop))
			sv_xrq_peer_gone(eng->ctx, c->peer_pid);
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
			sv_eng_unpark_first(c);
		sv_eng_unpark_read(c);
	}
	sv_mutex_unlock(&c->tx_lock);
}


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
 * it asks for cannot make us hold more.  sv_eng_release_held ends the wait.
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

/*
 * Answers after the application's turn.  A receive completion makes the
 * responder write the ACK it owes before the completion becomes visible,
 * because once the application sees its message it may exit (a NIC has
 * put the ACK on the wire by then).  In a pass of the engine thread that
 * order stays: the application runs beside it.  In a pass of the polling
 * thread the application sees nothing until the pass returns, and what it
 * does then is the round trip's next step: the reply to the message it
 * was waiting for.  So there the answers stay corked until that thread
 * posts (sv_engine_posted: right after the posted request's frame) or
 * polls SV_OWED_GRACE_NS later (sv_engine_poll_begins, loop.c), and the
 * reply goes first: between two namespaces each message's ACK was a system
 * call (and the peer's TCP receive, which veth runs in it) on the critical
 * path.  The grace is for middleware that polls once more before it posts
 * the reply (libfabric's rxm).  Bounded: a polling thread flushes them
 * once the grace is over; one that stops polling leaves them to the engine
 * thread, whose lease ends at most SV_POLL_LEASE_NS after the last poll
 * (loop.c), or which is woken when it sleeps without a lease; a QP taken
 * to the error state or destroyed settles them (sv_engine_settle); the
 * exit quiesce flushes them (sv_engine_quiesce).
 */
void sv_eng_answers_for_completion(struct sv_conn *conn)
{
	/* in the polling thread's pass over this connection's input (whose
	 * end uncorks it, sv_eng_conn_event), and the answers would cost a
	 * system call: one written into a ring costs less than keeping it
	 * (same-host ib_send_lat 0.86 us against 0.56 us, as the peer then
	 * waits for the flush after the reply) */
	if (sv_eng_tls_progress == conn->eng && sv_eng_tls_engine_thread != conn->eng &&
	    !to_ec(conn)->mem && atomic_load_explicit(&conn->tx_corked, memory_order_relaxed))
		to_ec(conn)->defer_answers = true;
	else
		sv_conn_uncork_now(conn);
}

bool sv_eng_owe_answers(struct sv_conn *c)
{
	struct sv_engine_conn *ec = to_ec(c);
	struct sv_engine *eng = c->eng;

	if (!ec->defer_answers)
		return false;
	ec->defer_answers = false;
	if (!ec->owed) {
		if (sv_list_empty(&eng->owed_conns))
			eng->owed_since = sv_now_ns();
		ec->owed = true;
		sv_conn_get(c);
		sv_list_add_tail(&eng->owed_conns, &ec->owed_link);
		atomic_store_explicit(&eng->any_owed, true, memory_order_release);
		/* an engine thread asleep without a lease would not look again
		 * by itself; one asleep for the lease does when it ends */
		if (!atomic_load(&eng->lease_wait))
			sv_eng_wake(eng);
	}
	return true;
}

void sv_eng_flush_owed(struct sv_engine *eng)
{
	if (!atomic_load_explicit(&eng->any_owed, memory_order_acquire))
		return;
	while (!sv_list_empty(&eng->owed_conns)) {
		struct sv_engine_conn *ec =
			SV_CONTAINER_OF(eng->owed_conns.next, struct sv_engine_conn, owed_link);

		sv_list_del(&ec->owed_link);
		ec->owed = false;
		if (atomic_load(&ec->c.state) != SV_CONN_DEAD)
			conn_flush(&ec->c);
		sv_conn_put(&ec->c);
	}
	atomic_store_explicit(&eng->any_owed, false, memory_order_relaxed);
}

/* May a held connection's input go on (or is it dead)? */
static bool hold_over(struct sv_engine_conn *ec)
{
	return atomic_load(&ec->c.state) == SV_CONN_DEAD ||
	       (!atomic_load(&ec->reads_left) && !answers_over(&ec->c, SV_CONN_RX_HOLD / 2));
}

/* Progress holder: is a held connection's wait over?  (Its input, taken up
 * again, may have held it anew at once: the next pass must not sleep.) */
bool sv_eng_held_ready(struct sv_engine *eng)
{
	for (struct sv_list *l = eng->held_conns.next; l != &eng->held_conns; l = l->next)
		if (hold_over(SV_CONTAINER_OF(l, struct sv_engine_conn, held_link)))
			return true;
	return false;
}

/* Progress holder: the connections whose input need not wait any more take
 * it up again (what is in their buffers first); true if one did. */
bool sv_eng_release_held(struct sv_engine *eng)
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
			sv_eng_conn_event(c, EPOLLIN);
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
	kick = sv_eng_housekeep_by(eng, when);
	sv_mutex_unlock(&eng->lock);
	if (kick && sv_eng_tls_engine_thread != eng)
		sv_eng_wake(eng);
}

/* An accepted connection refused for the address its HELLO claims. */
static void conn_spoofed(struct sv_conn *c)
{
	sv_stat_ctx_count(c->eng->ctx, SV_CTXC_HELLO_SPOOFED);
}

/* The connection's data waits in memory: progress looks at it there. */
static void conn_in_memory(struct sv_conn *c, const struct sv_mem_poll *poll)
{
	to_ec(c)->mem = poll;
}

static const struct sv_conn_host engine_host = {
	.want_output = want_output,
	.rx_frame = sv_eng_rx_frame,
	.fail = sv_engine_conn_fail,
	.proven = conn_proven,
	.spoofed = conn_spoofed,
	.rx_held = rx_held,
	.rx_classify = sv_engine_rx_classify,
	.rx_plan = sv_engine_rx_plan,
	.rx_plan_end = sv_engine_rx_plan_end,
	.rx_match = sv_engine_rx_match,
	.rx_placed = sv_eng_rx_placed,
	.fault_timer = fault_timer,
	.in_memory = conn_in_memory,
};

void sv_eng_conn_event(struct sv_conn *c, uint32_t events)
{
	if (atomic_load(&c->state) == SV_CONN_DEAD)
		return;
	/* bells and end of stream (the data is in the ring).  Only the engine
	 * thread takes the bells: the socket stays readable until it has seen
	 * them, so a polling thread that takes the data and stops polling
	 * cannot leave the engine thread asleep on a ring it has not looked at */
	if (to_ec(c)->mem && sv_eng_tls_engine_thread == c->eng &&
	    (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
		to_ec(c)->mem->bell(c);
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
		if (!c->outgoing && to_ec(c)->mem)
			sv_eng_answers_first(c->eng);
		sv_mutex_lock(&c->tx_lock);
		atomic_store_explicit(&c->tx_corked, true, memory_order_relaxed);
		sv_mutex_unlock(&c->tx_lock);
		c->ops->input(c, events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR));
		if (atomic_load(&c->state) == SV_CONN_DEAD || sv_eng_owe_answers(c))
			return;
		conn_flush(c); /* uncorks */
		return;
	}
	if (events & EPOLLOUT)
		conn_flush(c);
}

/* Out of descriptors: the listeners are not polled for a while
 * (sv_iface_host.rest). */
void sv_eng_rest_listeners(struct sv_engine *eng)
{
	bool rest;

	sv_mutex_lock(&eng->lock);
	rest = !eng->listeners_resting;
	eng->listeners_resting = true;
	sv_eng_housekeep_by(eng, sv_now_ns() + SV_LISTEN_REST_NS);
	sv_mutex_unlock(&eng->lock);
	/* the progress holder's, as housekeep's polling them again is */
	if (rest) {
		sv_eng_poll_listeners(eng, false);
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

/* A connection of ops for an interface to accept a peer into (sv_iface_host.conn_new). */
struct sv_conn *sv_eng_iface_conn_new(struct sv_engine *eng, const struct sv_transport_ops *ops)
{
	return conn_new(eng, -1, false, ops);
}

/* An interface accepted a peer into c: the engine takes it, and beyond
 * SV_MAX_UNPROVEN connections in their handshake the oldest goes
 * (sv_iface_host.accepted). */
void sv_eng_accepted(struct sv_conn *c)
{
	struct sv_engine *eng = c->eng;
	struct sv_conn *old;

	if (conn_register(eng, c)) {
		sv_conn_put(c); /* closes its fd */
		return;
	}
	if ((old = oldest_over_cap(eng, unproven, c, SV_MAX_UNPROVEN, NULL))) {
		sv_warn_limited("more than %d connections in their handshake: the oldest goes",
				SV_MAX_UNPROVEN);
		sv_engine_conn_fail(old);
		sv_conn_put(old);
	}
}

/* The connection of the peer at address ip, made at its first datagram
 * (sv_iface_host.conn_from). */
struct sv_conn *sv_eng_conn_from(struct sv_engine *eng, const struct in6_addr *ip)
{
	struct sv_endpoint_addr from = { *ip, 0 };

	return sv_engine_conn_to(eng, &from);
}

/* A datagram an interface refused: counted, where it says why
 * (sv_iface_host.refused). */
void sv_eng_refused(struct sv_engine *eng, int why)
{
	if (why == SV_DGRAM_BAD_ICRC)
		sv_stat_ctx_count(eng->ctx, SV_CTXC_RX_BAD_ICRC);
	else if (why == SV_DGRAM_BAD_TAG)
		sv_stat_ctx_count(eng->ctx, SV_CTXC_RX_BAD_TAG);
}

/*
 * Closing a device: each transport sends what is queued and ends the
 * stream.  Frames SOFTVERBS_FAULTS holds back (delayed, reordered) are on
 * the wire as far as the peer knows: they leave now rather than vanish,
 * as a packet in flight still arrives after its sender exits.
 */
void sv_eng_conn_drain(struct sv_conn *c)
{
	if (atomic_load(&c->fault_nheld))
		(void)sv_conn_fault_release(c, UINT64_MAX);
	c->ops->drain(c, sv_now_ns() + 200000000ull);
}

/* Is any connection of eng still connecting, or sending?  A socket's send
 * queue is asked of the kernel (sv_conn_busy): outside eng->lock, on the
 * connections taken from the list a batch at a time, with references. */
bool sv_eng_conns_pending(struct sv_engine *eng)
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
