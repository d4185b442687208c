/*
 * The engine's loop: the engine thread of one context, which sleeps in
 * epoll_wait when there is nothing to do (an idle context costs no CPU) and
 * serves one-sided operations without the application calling into the
 * library; the passes an application thread makes when it polls
 * (sv_engine_progress, sv_engine_settle) and the leases that keep the two
 * from competing; the endpoint's listeners; starting, halting and stopping.
 */
#include "engine/engine_internal.h"
#include "engine/stats.h"
#include "engine/direct_recv.h"

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

/* epoll tag of the doorbell; an interface's descriptors are tagged with
 * their struct sv_watch, connections with their struct sv_conn */
static int tag_wake;

/*
 * A polling application thread keeps the bells of in-memory connections
 * (transports whose data is in memory, not behind an fd) unarmed for this
 * long after its last poll, so that a busy pair exchanges messages without a
 * system call.  Meanwhile the engine thread looks at the rings by itself:
 * every SV_POLL_TICK_NS while one-sided requests come by the wire (the
 * application may be spinning on memory instead of the CQ, waiting for a
 * WRITE only a responder serves); otherwise it sleeps until the lease would
 * end (lease_tick), and takes over only if nobody polled meanwhile.
 * Two-sided traffic needs no tick: the polling thread receives it itself.
 * Same-host one-sided operations mostly execute at the initiator
 * (direct_exec.h), and every wake-up is a context switch that, on a machine
 * with few cores, preempts a spinning application (ib_send_lat: 99th
 * percentile 170 us with a tick every 20 us; fi_pingpong between two
 * namespaces about 3 us a round trip slower with one every 200 us than
 * with one a lease).
 */
#define SV_POLL_LEASE_NS 1000000ull
#define SV_POLL_TICK_NS 20000ull
/*
 * "While one-sided requests come by the wire", for the sockets
 * (socket_lease): for this long after the engine thread last saw that one
 * had.  Longer than a lease, or it sustains itself: an application that
 * spins on its memory for a WRITE that arrives while the engine thread
 * sleeps for the lease gets it only at the lease's end, so that the next
 * one comes more than a lease after the last, and again finds the thread
 * asleep (ib_write_lat over tcp, 1 MiB: 1.1 ms an iteration in most runs,
 * against 0.3 ms when a run began otherwise).  Watching the sockets costs
 * a wake-up only when something arrives.  The rings' tick (lease_tick)
 * keeps a lease's window: it wakes the thread every SV_POLL_TICK_NS, which
 * preempts a spinning application, and same-host one-sided operations go
 * by the wire only until the initiator executes them itself (with the
 * tick kept for this long, same-host ib_write_lat 8 B's 99th percentile
 * went from 0.17 to 6.6 us: a QP's first WRITEs go by the wire).
 */
#define SV_ONE_SIDED_NS 100000000ull

/* Did a one-sided request come by the wire within the last `window` ns? */
static bool one_sided_within(const struct sv_engine *eng, uint64_t now, uint64_t window)
{
	return eng->one_sided_at && now - eng->one_sided_at < window;
}
/* How long answers owed to a polling thread's next call wait for a post
 * before a poll sends them anyway (connections.c). */
#define SV_OWED_GRACE_NS 20000ull

/*
 * How long the engine thread sleeps, before it looks at what nobody may be
 * polling: SV_POLL_TICK_NS while one-sided requests come by the wire, else
 * until the application thread's lease ends (at least a tick: its last poll
 * may be as old as SV_POLLS_PER_CLOCK polls), or until a timer is due.
 * The price: a thread that stops polling leaves what arrives for it (and
 * for the peers' requests) to this one for up to a lease, where a tick
 * every 200 us took over within a few hundred microseconds; its timers
 * still fire on time (lease_wait).
 */
static uint64_t lease_tick_after(const struct sv_engine *eng, uint64_t now, uint64_t last)
{
	if (one_sided_within(eng, now, SV_POLL_LEASE_NS) || !last ||
	    now - last >= SV_POLL_LEASE_NS - SV_POLL_TICK_NS)
		return SV_POLL_TICK_NS;
	return last + SV_POLL_LEASE_NS - now;
}

/* (the rings': an application thread's last poll) */
static uint64_t lease_tick(const struct sv_engine *eng, uint64_t now)
{
	return lease_tick_after(eng, now,
				atomic_load_explicit(&eng->last_poll_ns, memory_order_relaxed));
}

/*
 * How long after an application thread's last poll (sv_engine_progress)
 * its posts to QPs behind sockets still hold the sockets' lease
 * (socket_lease): a thread that streams requests polls a CQ that seldom
 * is empty, so its polls make progress only now and then.  One that posts
 * and never polls, or no longer does (it spins on its memory, say, for a
 * WRITE that comes by the wire), holds no lease by posting.
 */
#define SV_POSTS_HOLD_NS 20000000ull

/* The sockets': its last poll, or its last post to a QP behind one while
 * it polls (socket_lease). */
static uint64_t socket_active(const struct sv_engine *eng)
{
	uint64_t poll = atomic_load(&eng->last_poll_ns), post = atomic_load(&eng->last_post_ns);

	return poll && post > poll && post - poll < SV_POSTS_HOLD_NS ? post : poll;
}

/* what the calling thread is doing (engine_internal.h) */
__thread struct sv_engine *sv_eng_tls_progress __attribute__((tls_model("initial-exec")));
__thread struct sv_engine *sv_eng_tls_engine_thread __attribute__((tls_model("initial-exec")));

/* progress_lock held, eng->lock not (a system call each): the listeners
 * are polled (or, resting, not), as eng->listeners_resting last said */
void sv_eng_poll_listeners(struct sv_engine *eng, bool on)
{
	sv_lock_assert_may_block("epoll_ctl");
	for (int i = 0; i < eng->nwatches; i++) {
		struct epoll_event ev = { .events = on ? EPOLLIN : 0, .data.ptr = &eng->watches[i] };

		if (eng->watches[i].fd >= 0)
			epoll_ctl(eng->epfd, EPOLL_CTL_MOD, eng->watches[i].fd, &ev);
	}
}

/* sv_iface_host.watch: an interface's descriptor joins the epoll set. */
static int iface_watch(struct sv_engine *eng, int fd, bool data, void (*ready)(void *arg),
		       void *arg)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct sv_watch *w;

	if (eng->nwatches == SV_MAX_WATCHES)
		return -ENOSPC;
	w = &eng->watches[eng->nwatches];
	*w = (struct sv_watch){ .fd = fd, .data = data, .ready = ready, .arg = arg };
	ev.data.ptr = w;
	if (epoll_ctl(eng->epfd, EPOLL_CTL_ADD, fd, &ev))
		return -errno;
	eng->nwatches++;
	/* packets come through it: polling threads look at it too */
	eng->data_watched |= data;
	return 0;
}

/* sv_iface_host.unwatch: the interface closes fd (which leaves the epoll
 * set with it); its number is not looked at again. */
static void iface_unwatch(struct sv_engine *eng, int fd)
{
	for (int i = 0; i < eng->nwatches; i++)
		if (eng->watches[i].fd == fd)
			eng->watches[i].fd = -1;
}

static const struct sv_iface_host iface_host = {
	.watch = iface_watch,
	.unwatch = iface_unwatch,
	.conn_new = sv_eng_iface_conn_new,
	.accepted = sv_eng_accepted,
	.rest = sv_eng_rest_listeners,
	.conn_from = sv_eng_conn_from,
	.refused = sv_eng_refused,
};

void sv_eng_wake(struct sv_engine *eng)
{
	uint64_t one = 1;
	ssize_t r;

	sv_lock_assert_may_block("wake (a write to the doorbell)");
	r = write(eng->wake_fd, &one, sizeof(one));

	(void)r;
}

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

		if ((c->outgoing || !opened_only) && conn_in_memory(c) && to_ec(c)->mem->pending(c)) {
			sv_conn_get(c);
			ready[n++] = c;
		}
	}
	sv_mutex_unlock(&eng->lock);
	for (int i = 0; i < n; i++) {
		sv_eng_conn_event(ready[i], EPOLLIN);
		sv_conn_put(ready[i]);
	}
}

/* Progress holder: the same from scan_in_memory's copy (nscan >= 0), whose
 * references keep its connections: no lock, no reference taken. */
static void take_in_copy(struct sv_engine *eng, bool opened_only)
{
	for (int i = 0; i < eng->nscan; i++) {
		struct sv_conn *c = eng->scan[i];

		if ((c->outgoing || !opened_only) && conn_in_memory(c) && to_ec(c)->mem->pending(c))
			sv_eng_conn_event(c, EPOLLIN);
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
void sv_eng_answers_first(struct sv_engine *eng)
{
	/* scan_in_memory's copy, not rebuilt here: it may be walking it */
	if (eng->scan_built && eng->nscan >= 0 &&
	    atomic_load_explicit(&eng->conns_gen, memory_order_acquire) == eng->scan_gen)
		take_in_copy(eng, true);
	else
		take_in_ready(eng, true);
}

/* eng->lock held: an established connection whose data is in memory. */
static bool conn_in_memory(struct sv_conn *c)
{
	/* one whose input waits is looked at again by sv_eng_release_held */
	return to_ec(c)->mem && atomic_load(&c->state) == SV_CONN_UP &&
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

		if (!to_ec(c)->mem)
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

	sv_xrq_poll(eng->ctx); /* receives peers of this host placed */
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
		eng->one_sided_at = now;
	}
	*tick_ns = 0;
	sv_mutex_lock(&eng->lock);
	for (struct sv_list *l = eng->conns.next; l != &eng->conns; l = l->next) {
		struct sv_conn *c = SV_CONTAINER_OF(l, struct sv_conn, link);

		if (!conn_in_memory(c))
			continue;
		if (lease) {
			/* an in-memory connection, and an application polls */
			*tick_ns = lease_tick(eng, now);
			break;
		}
		if (to_ec(c)->mem->arm(c))
			pending = true;
	}
	sv_mutex_unlock(&eng->lock);
	/* a peer that placed a receive's message rings the bells armed above
	 * (seq_cst both sides: it sees the bell, or this sees its bit) */
	if (!lease && sv_xrq_waiting(eng->ctx))
		pending = true;
	return pending;
}

static bool is_conn_event(struct sv_engine *eng, const void *p)
{
	return p != &tag_wake &&
	       !(p >= (void *)eng->watches && p < (void *)(eng->watches + eng->nwatches));
}

static void handle_events(struct sv_engine *eng, struct epoll_event *evs, int n, bool engine_thread)
{
	/* the connections we opened first: what they bring is answers, which
	 * the peer sent before the requests that came with them on the ones
	 * it opened (sv_eng_answers_first, for rings; here for sockets) */
	for (int i = 0; i < n; i++) {
		struct sv_conn *c = evs[i].data.ptr;

		if (is_conn_event(eng, c) && c->outgoing) {
			sv_conn_get(c);
			sv_eng_conn_event(c, evs[i].events);
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
		} else if (p >= (void *)eng->watches && p < (void *)(eng->watches + eng->nwatches)) {
			struct sv_watch *w = p;

			if (w->fd >= 0)
				w->ready(w->arg);
		} else {
			struct sv_conn *c = p;

			/* keep c alive even if it fails while we handle it */
			sv_conn_get(c);
			sv_eng_conn_event(c, evs[i].events);
			sv_conn_put(c);
		}
	}
}

/* Progress holder: has the grace of the owed answers ended by now (a
 * polling thread's clock may be older than when they became owed)? */
static bool owed_due(const struct sv_engine *eng, uint64_t now)
{
	return (int64_t)(now - eng->owed_since) >= (int64_t)SV_OWED_GRACE_NS;
}

/* One pass over what has arrived, from a thread other than the engine's, which
 * read the clock at now; progress_lock held.  settle: owed answers go
 * whatever their grace (sv_engine_settle). */
static void progress_locked(struct sv_engine *eng, uint64_t now, bool settle)
{
	struct epoll_event evs[16];
	int n;

	sv_eng_tls_progress = eng;
	if (settle || owed_due(eng, now))
		sv_eng_flush_owed(eng); /* the application had its turn */
	scan_in_memory(eng);
	/* only connections behind an fd need a system call to be looked at */
	if (atomic_load_explicit(&eng->nconns_polled, memory_order_relaxed) || eng->data_watched) {
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
	if (now >= atomic_load_explicit(&eng->sleep_until, memory_order_relaxed) && sv_eng_run_timers(eng) == 0)
		sv_eng_wake(eng);
	sv_eng_run_deferred(eng);
	if (sv_eng_release_held(eng))
		sv_eng_run_deferred(eng);
	if (sv_eng_held_ready(eng))
		sv_eng_wake(eng); /* the engine thread goes on with it */
	sv_eng_tls_progress = NULL;
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

/* What the last pass of a polling thread owed goes (the application has
 * had its turn), unless someone else is in a pass: after a post, or at a
 * poll once the grace is over (sv_eng_answers_for_completion). */
static void owed_flush(struct sv_engine *eng, bool posted)
{
	if (!eng || !atomic_load_explicit(&eng->any_owed, memory_order_relaxed) ||
	    sv_mutex_trylock(&eng->progress_lock))
		return;
	if (posted || owed_due(eng, sv_now_ns())) {
		sv_eng_tls_progress = eng;
		sv_eng_flush_owed(eng);
		sv_eng_tls_progress = NULL;
	}
	sv_mutex_unlock(&eng->progress_lock);
}

void sv_engine_poll_begins(struct sv_engine *eng)
{
	owed_flush(eng, false);
}

void sv_engine_posted(struct sv_engine *eng)
{
	owed_flush(eng, true);
}

void sv_engine_posted_to(struct sv_engine *eng, struct sv_conn *conn)
{
	if (conn && !to_ec(conn)->mem)
		atomic_store_explicit(&eng->last_post_ns, sv_now_ns(), memory_order_relaxed);
}

void sv_engine_progress(struct sv_engine *eng)
{
	if (sv_mutex_trylock(&eng->progress_lock))
		return; /* someone is already making progress */
	if (++eng->polls_unclocked >= SV_POLLS_PER_CLOCK || !eng->poll_now) {
		eng->polls_unclocked = 0;
		eng->poll_now = sv_now_ns();
		atomic_store_explicit(&eng->last_poll_ns, eng->poll_now, memory_order_relaxed);
	}
	progress_locked(eng, eng->poll_now, false);
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
	if (!eng || sv_eng_tls_progress == eng || sv_eng_tls_engine_thread == eng)
		return; /* called from within a pass: what is there is being handled */
	sv_mutex_lock(&eng->progress_lock);
	progress_locked(eng, sv_now_ns(), true);
	sv_mutex_unlock(&eng->progress_lock);
}

void sv_engine_hold_alive(struct sv_engine *eng, pthread_mutex_t *m)
{
	atomic_store_explicit(&eng->alive_give, m, memory_order_release);
	sv_eng_wake(eng);
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

/* Does a socket wait for room (EPOLLOUT)?  Its queued frames go when the
 * room comes: the engine thread watches for it (want_output in
 * connections.c ends the lease), or a poster whose polls find completions
 * would leave them queued until the lease's end. */
static bool room_wanted(struct sv_engine *eng)
{
	bool any = false;

	sv_mutex_lock(&eng->lock);
	for (struct sv_list *l = eng->conns.next; l != &eng->conns && !any; l = l->next)
		any = atomic_load_explicit(&to_ec(SV_CONTAINER_OF(l, struct sv_conn, link))->out_armed,
					   memory_order_relaxed);
	sv_mutex_unlock(&eng->lock);
	return any;
}

/*
 * The sockets' lease.  While an application thread polls (it did within
 * SV_POLL_LEASE_NS), it takes in what the sockets bring itself
 * (progress_locked), and the engine thread waiting on them too would be
 * woken by every packet only to find it taken, or to take it first and
 * keep the poller waiting for progress_lock: on a machine whose cores the
 * spinning applications fill, each such wake-up is a context switch in the
 * round trip.  So the engine thread waits on its doorbell alone until the
 * lease would end (lease_tick), to see whether the polling goes on; when it
 * has stopped, the thread looks at everything and waits on the sockets again.
 * Not while one-sided requests come by the wire: the application may spin
 * on its memory rather than on a CQ, and a WRITE would wait for the tick.
 * A thread that arms a completion channel ends the lease
 * (sv_engine_end_lease), so that what it sleeps for is not left to a tick.
 *
 * A post of 256 bytes or more (SV_POST_LEASE_MIN, requester.c) to a QP
 * behind a socket holds the lease too, while its thread polls
 * (socket_active): it will poll for what it posted, and the answers
 * are what its polls take in.  A thread that streams requests polls a CQ
 * that is seldom empty, and so seldom makes progress; with only its polls
 * counted the lease lapsed, and the engine thread took every ACK itself,
 * waiting for the QP's lock and the connection's, which the posting thread
 * holds across its sendmsg, and waking it with a futex at their unlock
 * (`ib_write_bw` 64 KiB over tcp 2.2-2.5 GB/s; with posts counted 3.2-3.6).
 * Posts without a poll for SV_POSTS_HOLD_NS hold nothing: due timers, and
 * what the sockets brought, wait no longer than that.  Nor is there a
 * lease while a socket waits for room (room_wanted): its queued frames go
 * when the engine thread sees the room.
 * Returns whether to wait on bell_ep; *tick_ns is set for it.
 */
static bool socket_lease(struct sv_engine *eng, uint64_t *tick_ns)
{
	uint64_t now = sv_now_ns();
	uint64_t last = socket_active(eng);

	if (!last || now - last >= SV_POLL_LEASE_NS || one_sided_within(eng, now, SV_ONE_SIDED_NS) ||
	    !(atomic_load_explicit(&eng->nconns_polled, memory_order_relaxed) ||
	      eng->data_watched) ||
	    room_wanted(eng))
		return false;
	if (!*tick_ns)
		*tick_ns = lease_tick_after(eng, now, last);
	return true;
}

/* Wait on the doorbell until the lease would end (or the next timer, if
 * sooner); true when that ended it and an application thread polled
 * meanwhile: it makes the progress (due timers included), nothing for this
 * thread to do.  Not merely "the lease still holds": a thread that stopped
 * polling less than a lease ago runs no timers, and an ack timer or probe
 * would then wait for the lease's end.  True too when it only posted
 * (socket_active): its polls find completions, not an empty CQ, and take
 * in nothing; this thread's pass would take the ACKs the poster's next
 * empty poll takes anyway, contending for its locks (socket_lease), and a
 * pass at every lease's end cost `ib_write_bw` 64 KiB over tcp a fifth. */
static bool lease_wait(struct sv_engine *eng, int timeout)
{
	uint64_t begin = sv_now_ns();
	uint64_t tick = lease_tick_after(eng, begin, socket_active(eng));
	uint64_t ns = timeout > 0 ? SV_MIN(tick, (uint64_t)timeout * 1000000u) : tick;
	struct timespec ts = { 0, (long)ns };
	struct epoll_event ev;
	int n = 0;

	atomic_store(&eng->lease_wait, true);
	/* against sv_engine_end_lease: it clears last_poll_ns and last_post_ns,
	 * then looks at lease_wait; this stores lease_wait, then looks at them
	 * (all sequentially consistent): one of the two sees the other */
	if (socket_active(eng)) {
		n = epoll_pwait2(eng->bell_ep, &ev, 1, &ts, NULL);
		if (n < 0 && errno == ENOSYS)
			n = epoll_wait(eng->bell_ep, &ev, 1, 1); /* kernels before 5.11 */
	}
	atomic_store(&eng->lease_wait, false);
	return n == 0 && socket_active(eng) >= begin;
}

void sv_engine_end_lease(struct sv_engine *eng)
{
	if (!eng || (!atomic_load_explicit(&eng->last_poll_ns, memory_order_relaxed) &&
		     !atomic_load_explicit(&eng->last_post_ns, memory_order_relaxed)))
		return;
	atomic_store(&eng->last_poll_ns, 0);
	atomic_store(&eng->last_post_ns, 0);
	if (atomic_load(&eng->lease_wait))
		sv_eng_wake(eng);
}

static void *engine_main(void *arg)
{
	struct sv_engine *eng = arg;
	struct epoll_event evs[64];
	int timeout = -1;
	uint64_t tick = 0;

	bool leased = false;

	sv_eng_tls_engine_thread = eng;
	/* the ticks below are tens of microseconds: no 50 us default slack */
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	while (!atomic_load(&eng->stop)) {
		unsigned gen;
		int n;

		take_alive(eng);
		if (leased && timeout != 0 && lease_wait(eng, timeout) &&
		    !atomic_load_explicit(&eng->any_owed, memory_order_relaxed)) {
			/* the tick ended it, and the application still polls */
			continue;
		} else if (leased && timeout != 0) {
			n = epoll_wait(eng->epfd, evs, 64, 0);
		} else if (tick && timeout != 0) {
			/* a timer due before the tick ends it early */
			uint64_t ns = timeout > 0 ? SV_MIN(tick, (uint64_t)timeout * 1000000u) : tick;
			struct timespec ts = { 0, (long)ns };

			/* as in lease_wait: a thread that ends the lease, or
			 * leaves answers owed, wakes this wait (no poll since:
			 * the test below makes the pass) */
			atomic_store(&eng->lease_wait, true);
			n = 0;
			if (atomic_load(&eng->last_poll_ns) &&
			    !atomic_load_explicit(&eng->any_owed, memory_order_relaxed)) {
				n = epoll_pwait2(eng->epfd, evs, 64, &ts, NULL);
				if (n < 0 && errno == ENOSYS)
					n = epoll_wait(eng->epfd, evs, 64, 1); /* kernels before 5.11 */
			}
			atomic_store(&eng->lease_wait, false);
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
		    !atomic_load_explicit(&eng->any_owed, memory_order_relaxed)) {
			uint64_t now = sv_now_ns();

			if (now - atomic_load_explicit(&eng->last_poll_ns, memory_order_relaxed) < tick) {
				tick = lease_tick(eng, now); /* until the lease now ends */
				continue;
			}
		}
		sv_mutex_lock(&eng->progress_lock);
		sv_eng_tls_progress = eng;
		sv_eng_flush_owed(eng); /* left by a polling thread that stopped */
		if (n > 0)
			handle_events(eng, evs, n, true);
		scan_in_memory(eng);
		sv_eng_run_deferred(eng);
		if (sv_eng_release_held(eng))
			sv_eng_run_deferred(eng);
		sv_eng_tls_progress = NULL; /* timers may schedule: the doorbell brings us back */
		timeout = sv_eng_run_timers(eng);
		if (arm_in_memory(eng, &tick) || sv_eng_held_ready(eng))
			timeout = 0;
		leased = socket_lease(eng, &tick);
		/* the connections failed in this pass or a polling thread's: no
		 * event of the wait before can name them any more; nor does the
		 * copy of scan_in_memory keep them (and their rings) while this
		 * thread sleeps */
		sv_eng_bury_dead(eng);
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

/* Every interface closes (what its listeners hold for other contexts goes
 * on to them first), and nothing is watched for them any more. */
static void close_ifaces(struct sv_engine *eng)
{
	for (int i = 0; i < eng->nifaces; i++)
		eng->ifaces[i].ops->iface_close(eng->ifaces[i].iface);
	eng->nifaces = 0;
	eng->nwatches = 0;
	eng->data_watched = false;
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
	for (int i = 0; i < ntps; i++) {
		struct sv_iface_at at = { .host = &iface_host, .eng = eng, .ip = *ip,
					  .port = eng->port };
		bool host_held = false;
		void *iface = NULL;
		int err = tps[i]->iface_open(&at, &iface, &host_held);

		if (err < 0 && (i == 0 || err == -EADDRINUSE)) {
			/* the first transport is the endpoint: none without it;
			 * a port or name of it that another program holds (the
			 * tcp port, a unix name of it, its IPv6 port): another
			 * block; the host's port held: no device (never deaf) */
			close_ifaces(eng);
			/* (the transport said which port, and what to do) */
			*held = err == -EADDRINUSE && host_held;
			if (!*held && i > 0)
				sv_info("%s:%u: the %s listener's name or port is another "
					"program's; trying another block",
					SV_IP_STR(ip), eng->port, tps[i]->name);
			return -err;
		}
		if (err == -ENOENT)
			continue; /* nothing of this transport's here (no IPv6 address) */
		if (err < 0) {
			sv_warn("no %s listener for %s:%u (%s)", tps[i]->name, SV_IP_STR(ip),
				eng->port, strerror(-err));
			continue;
		}
		eng->ifaces[eng->nifaces++] = (struct sv_iface_slot){ tps[i], iface };
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
	sv_list_init(&eng->owed_conns);
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

void sv_engine_quiesce(struct sv_engine *eng, uint64_t deadline_ns)
{
	if (eng && atomic_load(&eng->any_owed)) {
		sv_mutex_lock(&eng->progress_lock);
		sv_eng_flush_owed(eng);
		sv_mutex_unlock(&eng->progress_lock);
	}
	while (eng && eng->thread_started && sv_now_ns() < deadline_ns) {
		if (!sv_eng_conns_pending(eng))
			return;
		poll(NULL, 0, 1);
	}
}

/*
 * The engine thread stopped at unload or exit (sv_engine_halt), the
 * context still open: each interface leaves what the host's processes
 * share (the shared tcp port, rocev2's 4791), or the kernel would go on
 * giving this endpoint what nobody takes.  What waits there for the others
 * goes on to them first, which takes the progress lock: a polling thread
 * lets go of it at each poll; one that keeps it past the deadline is not
 * waited for (then nothing is passed on).
 */
static void leave_ports_of_host(struct sv_engine *eng)
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
	for (int i = 0; i < eng->nifaces; i++)
		if (eng->ifaces[i].ops->iface_leave)
			eng->ifaces[i].ops->iface_leave(eng->ifaces[i].iface, locked);
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
	sv_eng_wake(eng);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	if (pthread_timedjoin_np(eng->thread, NULL, &until)) {
		sv_warn("engine thread did not stop");
		return;
	}
	eng->thread_started = false;
	leave_ports_of_host(eng);
}

void sv_engine_stop(struct sv_engine *eng)
{
	if (!eng)
		return;
	atomic_store(&eng->stop, true);
	if (eng->thread_started) {
		sv_eng_wake(eng);
		pthread_join(eng->thread, NULL);
	}
	/* before the drain: a connection the kernel gave this closing
	 * endpoint on the shared port would wait unaccepted behind it; what a
	 * datagram listener holds for the others goes on to them */
	close_ifaces(eng);
	while (!sv_list_empty(&eng->conns)) {
		struct sv_conn *c = SV_CONTAINER_OF(eng->conns.next, struct sv_conn, link);

		sv_eng_conn_drain(c);
		sv_engine_conn_fail(c);
	}
	while (!sv_list_empty(&eng->owed_conns)) {
		struct sv_engine_conn *ec =
			SV_CONTAINER_OF(eng->owed_conns.next, struct sv_engine_conn, owed_link);

		sv_list_del(&ec->owed_link);
		sv_conn_put(&ec->c);
	}
	while (!sv_list_empty(&eng->held_conns)) {
		struct sv_engine_conn *ec =
			SV_CONTAINER_OF(eng->held_conns.next, struct sv_engine_conn, held_link);

		sv_list_del(&ec->held_link);
		sv_conn_put(&ec->c);
	}
	scan_drop(eng);
	sv_eng_bury_dead(eng);
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
	free(eng);
}

/* ---- IBA timer encodings ---- */
