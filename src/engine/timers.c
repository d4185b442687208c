/*
 * The engine's time: QP timers (RNR back-off, transport retries), the
 * requester work deferred to the engine (scheduled QPs, QPs and READs
 * waiting for room on a connection), and housekeeping (handshakes that
 * take too long, resting listeners, frames fault injection held back).
 */
#include "engine/engine_internal.h"

#include <string.h>

/* eng->lock held: look again at handshakes and listeners by `when`; true if
 * the engine thread would otherwise sleep past it (then it must be woken). */
bool sv_eng_housekeep_by(struct sv_engine *eng, uint64_t when)
{
	if (!eng->housekeep_ns || when < eng->housekeep_ns)
		eng->housekeep_ns = when;
	if (when >= eng->sleep_until)
		return false;
	eng->sleep_until = when;
	return true;
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
	if (kick && sv_eng_tls_progress != eng)
		sv_eng_wake(eng);
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
	if (kick && sv_eng_tls_engine_thread != eng)
		sv_eng_wake(eng);
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
void sv_eng_unpark_first(struct sv_conn *conn)
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
void sv_eng_unpark_read(struct sv_conn *conn)
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
	/* the connection's input may go on now (sv_eng_release_held): an application
	 * thread (destroy, reset) has the engine thread look */
	if (atomic_fetch_sub(&ec->reads_left, 1) == 1 && sv_eng_tls_progress != conn->eng)
		sv_eng_wake(conn->eng);
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
 * Handshakes that took too long fail; resting listeners are polled again.
 * progress_lock held: the engine thread's pass, or a polling thread's
 * (progress_locked runs the due timers too).
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
				sv_eng_housekeep_by(eng, now + 1000000ull);
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
		sv_eng_housekeep_by(eng, now + eng->handshake_ns / 10);
	sv_mutex_unlock(&eng->lock);
	if (unrest)
		sv_eng_poll_listeners(eng, true);
	for (int i = 0; i < nheld; i++) {
		uint64_t next = sv_conn_fault_release(held[i], now);

		if (next) {
			sv_mutex_lock(&eng->lock);
			sv_eng_housekeep_by(eng, next);
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

/*
 * The QPs scheduled when it starts, once each: one that schedules itself
 * again (a READ answered a burst at a time over a datagram transport,
 * do_read) runs in the next pass, after the listeners have been looked at,
 * and the doorbell says there is one.
 */
void sv_eng_run_deferred(struct sv_engine *eng)
{
	unsigned left = atomic_load_explicit(&eng->nrun, memory_order_relaxed);

	for (;;) {
		struct sv_qp *qp;

		/* one scheduled by another thread after this look rings the
		 * doorbell (sv_engine_schedule): the engine thread runs it */
		if (!atomic_load_explicit(&eng->nrun, memory_order_relaxed))
			return;
		if (!left--) {
			sv_eng_wake(eng);
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
int sv_eng_run_timers(struct sv_engine *eng)
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
		if (!due[i]->destroyed) {
			if (due[i]->last_wqe_owed) {
				/* in ERR, where the requester has no timer */
				sv_qp_last_wqe_look(due[i], now);
				sv_engine_timer_update(eng, due[i]);
			} else {
				sv_requester_timeout(due[i], now);
			}
		}
		sv_mutex_unlock(&due[i]->lock);
		sv_qp_put(due[i]);
	}
	if (ndue)
		return 0; /* recompute promptly */
	if (next == UINT64_MAX)
		return -1;
	return (int)((next - now) / 1000000u) + 1;
}

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
