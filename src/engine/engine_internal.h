/*
 * What the engine's own files share (loop.c, connections.c, dispatch.c,
 * timers.c); nothing outside src/engine/ includes it.  Everything else of
 * theirs is static to the file that has it.
 */
#ifndef SV_ENGINE_INTERNAL_H
#define SV_ENGINE_INTERNAL_H

#include "engine/engine.h"

/*
 * What the calling thread is doing, so that it does not ring the doorbell
 * for work it is about to do itself: the holder of progress_lock runs the
 * deferred requester list before it lets go, and the engine thread
 * recomputes its timers at the end of each pass (loop.c).
 */
/* (initial-exec: a poll reads them; the library is loaded with the
 * program or by dlopen early enough for the static TLS it takes) */
extern __thread struct sv_engine *sv_eng_tls_progress
	__attribute__((tls_model("initial-exec")));
extern __thread struct sv_engine *sv_eng_tls_engine_thread
	__attribute__((tls_model("initial-exec")));

/* The engine's side of a connection (engine.h). */
static inline struct sv_engine_conn *to_ec(struct sv_conn *c)
{
	return SV_CONTAINER_OF(c, struct sv_engine_conn, c);
}

/* ---- loop.c ---- */
/* Ring the doorbell: the engine thread wakes and makes a pass. */
void sv_eng_wake(struct sv_engine *eng);
/* progress_lock held, eng->lock not: the listeners are polled (on) or
 * rest (out of descriptors). */
void sv_eng_poll_listeners(struct sv_engine *eng, bool on);
/* Progress holder, about to take in an accepted in-memory connection's
 * requests: first the answers the connections we opened hold. */
void sv_eng_answers_first(struct sv_engine *eng);

/* ---- connections.c ---- */
/* A connection reported events (epoll's, or EPOLLIN for data seen in
 * memory): connect completion, input, output; the caller holds a reference. */
void sv_eng_conn_event(struct sv_conn *c, uint32_t events);
/* What an interface asks of the engine (struct sv_iface_host; the
 * descriptors it watches are loop.c's): a connection to accept a peer
 * into; one accepted, taken within the admission caps; out of
 * descriptors, the listeners rest; a datagram sender's connection; a
 * refused datagram counted. */
struct sv_conn *sv_eng_iface_conn_new(struct sv_engine *eng, const struct sv_transport_ops *ops);
void sv_eng_accepted(struct sv_conn *c);
void sv_eng_rest_listeners(struct sv_engine *eng);
struct sv_conn *sv_eng_conn_from(struct sv_engine *eng, const struct in6_addr *ip);
void sv_eng_refused(struct sv_engine *eng, int why);
/* Engine thread: release the list references of failed connections. */
void sv_eng_bury_dead(struct sv_engine *eng);
/* Progress holder: is a held connection's input free to go on? */
bool sv_eng_held_ready(struct sv_engine *eng);
/* Progress holder: held connections whose wait is over take their input up
 * again; true if one did. */
bool sv_eng_release_held(struct sv_engine *eng);
/* Progress holder: a connection whose receive pass ends; false when it
 * stays corked, its answers owed to the next poll. */
bool sv_eng_owe_answers(struct sv_conn *c);
/* Progress holder: the owed answers go out. */
void sv_eng_flush_owed(struct sv_engine *eng);
/* Closing a device: a connection's queue (and held frames) go out. */
void sv_eng_conn_drain(struct sv_conn *c);
/* Is any connection still connecting, or sending? */
bool sv_eng_conns_pending(struct sv_engine *eng);

/* ---- dispatch.c: the sv_conn_host upcalls for received frames ---- */
/* One frame after the HELLO: checked, then handed to its role. */
void sv_eng_rx_frame(struct sv_conn *conn, uint8_t *f, size_t len);
/* A packet whose headers were checked, its payload received in place. */
void sv_eng_rx_placed(struct sv_conn *conn, uint8_t *hdr, const uint8_t *payload,
		      uint32_t plen);

/* ---- timers.c ---- */
/* eng->lock held: housekeeping (handshakes, resting listeners, held frames)
 * by `when`; true if the engine thread must be woken for it. */
bool sv_eng_housekeep_by(struct sv_engine *eng, uint64_t when);
/* tx_lock held: the first QP waiting for room on conn is rescheduled. */
void sv_eng_unpark_first(struct sv_conn *conn);
/* tx_lock held: the READ waiting for room on conn goes on. */
void sv_eng_unpark_read(struct sv_conn *conn);
/* Run the QPs scheduled for the engine (each once per call). */
void sv_eng_run_deferred(struct sv_engine *eng);
/* Fire due timers (and housekeeping); ms until the next one (-1: none). */
int sv_eng_run_timers(struct sv_engine *eng);

#endif
