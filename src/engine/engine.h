/*
 * The software HCA of one context.  One engine thread per context waits on
 * its transports' listeners and connections; it runs the responder (executes
 * incoming requests against local memory) and the completer (turns ACKs and
 * responses into completions), and drives timers (RNR back-off, transport
 * retries).  The requester (turns send WQEs into packets) runs in whichever
 * thread has work for it: the posting thread first, for latency, and the
 * engine thread when a connection drains or a timer fires.
 */
#ifndef SV_ENGINE_H
#define SV_ENGINE_H

#include "common/lock_order.h"
#include "engine/objects.h"
#include "transport/registry.h"
#include "wire/wire.h"
#include "wire/opcode.h"


/* A descriptor an interface has the engine watch (sv_iface_host.watch;
 * epoll data points here); fd -1: no longer watched. */
struct sv_watch {
	int fd;
	bool data; /* packets come through it */
	void (*ready)(void *arg);
	void *arg;
};
#define SV_MAX_WATCHES 16

/* One transport's interface of the endpoint (its listeners: iface_open). */
struct sv_iface_slot {
	const struct sv_transport_ops *ops;
	void *iface;
};

/*
 * A connection as the engine holds it: the transport's struct, plus what
 * only the engine uses.  The transport frees the whole at the last put, so
 * its struct comes first.
 */
struct sv_engine_conn {
	struct sv_conn c;
	struct sv_list tx_waiters; /* QPs (sv_qp.txwait_link) waiting for room; c.tx_lock */
	/*
	 * Answers to this peer that wait here are bounded: a READ makes its
	 * responses as the connection drains (responder.c), and while one
	 * waits, or while more than SV_CONN_RX_HOLD bytes are queued, the
	 * connection's input waits too (the peer's requests stay in its
	 * socket or ring, where they press on the peer, not on us).
	 */
	struct sv_qp *rd_waiter;  /* c.tx_lock: a READ waiting for room, with a QP reference */
	atomic_int reads_left;    /* READs whose rest goes here (sv_qp.resp.rd_left) */
	bool rx_held;             /* c.tx_lock, set by the progress holder: input waits */
	struct sv_list held_link; /* engine->held_conns (progress holder), with a reference */
	/* progress holder: a receive completion of this pass owes the peer
	 * the answers corked here (defer_answers); listed on
	 * engine->owed_conns, with a reference, they leave at the polling
	 * thread's next call (sv_eng_flush_owed) */
	bool defer_answers;
	bool owed;
	struct sv_list owed_link;
	int redials;              /* connections before this one that carried its queue */
	bool polled;              /* eng->lock: counted in eng->nconns_polled */
	/* its socket is watched for room (EPOLLOUT): the engine thread must
	 * watch the sockets then, not its doorbell alone (loop.c, socket_lease) */
	atomic_bool out_armed;
	/* its data waits in memory, looked at thus (sv_conn_host.in_memory;
	 * set before it is listed) */
	const struct sv_mem_poll *mem;
};

/* Queued output above which a connection's input waits (and, below half
 * of it, goes on). */
#define SV_CONN_RX_HOLD (1u << 20)

static inline struct sv_list *sv_conn_waiters(struct sv_conn *c)
{
	return &SV_CONTAINER_OF(c, struct sv_engine_conn, c)->tx_waiters;
}

struct sv_engine {
	struct sv_context *ctx;
	enum sv_transport_mode mode;
	pthread_t thread;
	bool thread_started;
	int epfd;
	struct sv_iface_slot ifaces[SV_MAX_TRANSPORTS];
	int nifaces;
	struct sv_watch watches[SV_MAX_WATCHES];
	int nwatches;
	bool data_watched; /* packets come through one of the watches */
	int wake_fd; /* eventfd: doorbell */
	/* epoll set of the doorbell alone: what the engine thread waits on
	 * while an application thread polls and takes the sockets' input
	 * itself (loop.c, lease_wait) */
	int bell_ep;
	/* the engine thread sleeps for the lease (on bell_ep, or on epfd for
	 * a tick while the rings are polled): ending the lease, or leaving
	 * answers owed, needs no doorbell unless it wakes it (loop.c) */
	atomic_bool lease_wait;
	uint16_t port;
	struct sv_qpn_claim qpns; /* this context's block of the host's QP numbers */
	atomic_bool stop;

	struct sv_mutex lock;      /* conns, graveyard, timer_qps, run_qps */
	struct sv_mutex progress_lock; /* whoever processes events holds it */
	/* a thread making a connection (sv_engine_conn_to): one at a time,
	 * so that two first requests to one peer make one connection */
	struct sv_mutex connect_lock;
	struct sv_list conns;
	struct sv_list graveyard;  /* failed conns, released by the engine thread */
	struct sv_list timer_qps;
	struct sv_list run_qps;
	struct sv_list held_conns; /* progress holder: connections whose input waits */
	struct sv_list owed_conns; /* progress holder: corked answers, for the next poll */
	atomic_bool any_owed;      /* owed_conns is not empty (read without the lock) */
	uint64_t owed_since;       /* progress holder: when owed_conns last became non-empty */
	/* QPs on run_qps (written under lock): a pass finds the list empty
	 * without taking the lock */
	atomic_uint nrun;
	/* moves whenever conns changes (written under lock) */
	atomic_uint conns_gen;
	/* progress holder: the in-memory connections of conns at generation
	 * scan_gen, each with a reference, so that a polling thread looks at
	 * their rings without the lock (nscan < 0: too many, the list is walked) */
	unsigned scan_gen;
	bool scan_built;
	int nscan;
	struct sv_conn *scan[32];
	/* progress holder: polls since the clock was last read */
	unsigned polls_unclocked;
	uint64_t poll_now;
	/* when the engine thread next wakes by itself (written under lock;
	 * polling threads read it without, loop.c progress_locked) */
	_Atomic uint64_t sleep_until;
	/* eng->lock: the next look at handshakes that take too long and at
	 * resting listeners (0: nothing to look at) */
	uint64_t housekeep_ns;
	uint64_t handshake_ns; /* a connection's time to prove itself */
	bool listeners_resting; /* out of descriptors: not polled for now */
	atomic_int nconns_polled;      /* connections only epoll can look at (tcp) */
	_Atomic uint64_t last_poll_ns; /* an application thread last made progress */
	/* an application thread last posted to a QP whose peer is behind a
	 * socket: it polls for what it posted, the sockets' lease holds
	 * (loop.c, socket_lease) */
	_Atomic uint64_t last_post_ns;
	/* a one-sided request came by the wire (set by the responder, taken by
	 * the engine thread), and when the engine thread last saw that one had
	 * (0: never; loop.c, one_sided_within) */
	atomic_bool one_sided_seen;
	uint64_t one_sided_at;
	/* the export table's liveness mutex (mem_export.h): handed over by
	 * sv_engine_hold_alive, held by the engine thread until it ends */
	_Atomic(pthread_mutex_t *) alive_give;
	pthread_mutex_t *alive_held;
};

/* The responder executes a WRITE, READ or atomic that came by the wire: an
 * application may be spinning on its memory, waiting for it (arm_in_memory). */
static inline void sv_engine_saw_one_sided(struct sv_engine *eng)
{
	if (!atomic_load_explicit(&eng->one_sided_seen, memory_order_relaxed))
		atomic_store_explicit(&eng->one_sided_seen, true, memory_order_relaxed);
}

int sv_engine_start(struct sv_context *ctx, const struct in6_addr *ip);
void sv_engine_stop(struct sv_engine *eng);
/* An application thread is about to sleep on a completion channel: the
 * engine thread takes the sockets' input again from now on (loop.c). */
void sv_engine_end_lease(struct sv_engine *eng);
void sv_engine_halt(struct sv_engine *eng); /* stop the thread only (library unload) */
/* The engine thread takes m at its next pass and holds it until it ends, so
 * that the kernel marks it when the thread, or the process, is gone. */
void sv_engine_hold_alive(struct sv_engine *eng, pthread_mutex_t *m);
/* Wait, until deadline_ns at most, for connections being set up and queued
 * output to go out; the engine keeps running (used at process exit). */
void sv_engine_quiesce(struct sv_engine *eng, uint64_t deadline_ns);

/* Do pending engine work from the calling thread, if nobody else is. */
void sv_engine_progress(struct sv_engine *eng);
/* A poll, and a post, by an application thread: the answers a pass of
 * its own left go now, after a grace for a poll, at once after a post
 * (connections.c, sv_eng_answers_for_completion). */
void sv_engine_poll_begins(struct sv_engine *eng);
void sv_engine_posted(struct sv_engine *eng);
/* ibv_post_send ran the requester of a QP whose peer is behind conn: if
 * that is a socket (tcp, rocev2), the posting thread holds the sockets'
 * lease as its polls do (loop.c, socket_lease). */
void sv_engine_posted_to(struct sv_engine *eng, struct sv_conn *conn);
/* The responder is about to make a receive completion visible: the
 * answers corked on conn (its ACK) go before, or, in a pass of the polling
 * thread, right after the application had its turn (connections.c). */
void sv_eng_answers_for_completion(struct sv_conn *conn);
/* a blocking pass over what has arrived (before a QP is taken to ERR) */
void sv_engine_settle(struct sv_engine *eng);

/* The (shared) outgoing connection to a peer endpoint, created on demand. */
struct sv_conn *sv_engine_conn_to(struct sv_engine *eng, const struct sv_endpoint_addr *peer);
/* Are QPs other than qp waiting on the deferred requester list? */
bool sv_engine_others_waiting(struct sv_engine *eng, struct sv_qp *qp);
/* Ask the engine thread to run the requester of qp (qp->lock held or not). */
void sv_engine_schedule(struct sv_engine *eng, struct sv_qp *qp);
/* qp->lock held: (re)arm or clear the QP's timers in the engine's list. */
void sv_engine_timer_update(struct sv_engine *eng, struct sv_qp *qp);
/* Forget a QP (destroy): removes it from timer/run/wait lists. */
/* The QP waits on no connection any more (its wait is over or moot). */
void sv_engine_unpark_qp(struct sv_qp *qp);
void sv_engine_forget_qp(struct sv_engine *eng, struct sv_qp *qp);

/* A connection broke or misbehaved: it is gone for good. */
void sv_engine_conn_fail(struct sv_conn *conn);
/* qp->lock held: the READ qp answers on conn waits for its queue to drain;
 * false when it need not (drained meanwhile, or another READ waits there
 * already: then it goes on).  The engine then schedules the QP, whose run
 * calls sv_responder_resume. */
bool sv_engine_read_wait(struct sv_conn *conn, struct sv_qp *qp);
/* qp->lock held: that READ (waiting or not) is over. */
void sv_engine_read_done(struct sv_conn *conn, struct sv_qp *qp);
/* qp->lock held: the READ qp answers on conn, a datagram transport's,
 * goes on in the QP's next scheduled run (sv_responder_resume), after the
 * engine has looked at its listeners; sv_engine_read_done ends it. */
void sv_engine_read_later(struct sv_conn *conn, struct sv_qp *qp);
/* The engine's answers to a stream's direct receive (direct.c; struct sv_conn_host). */
int sv_engine_rx_classify(struct sv_conn *c, const uint8_t *frame, size_t have, uint32_t flen,
			  uint32_t *hdr_len);
bool sv_engine_rx_plan(struct sv_conn *c, const uint8_t *frame, uint32_t plen, uint32_t have,
		       struct sv_rx_plan *plan);
void sv_engine_rx_plan_end(struct sv_conn *c, struct sv_rx_plan *plan);
bool sv_engine_rx_match(const struct sv_rx_plan *plan, int k, uint32_t plen, bool last,
			const uint8_t *hdr);

/* The context's connection for multicast group mgid, made at first use
 * (a reference; NULL with *err set). */
struct sv_conn *sv_engine_conn_mcast(struct sv_engine *eng, const union ibv_gid *mgid, int *err);

/* ---- multicast groups (mcast.c) ---- */
/* ibv_attach_mcast / ibv_detach_mcast: 0 or an errno */
int sv_mcg_attach(struct sv_qp *qp, const union ibv_gid *gid);
int sv_mcg_detach(struct sv_qp *qp, const union ibv_gid *gid);
/* Is the QP attached to any group (it cannot be destroyed)? */
bool sv_mcg_busy(struct sv_qp *qp);
/* Progress holder: a request packet that came to conn's group for the
 * multicast QPN, to every QP of the context attached to that group. */
void sv_mcg_deliver(struct sv_conn *conn, const struct sv_opcode_info *op, uint8_t *hdr,
		      const uint8_t *payload, uint32_t plen);
/* Context closing: leave every group. */
void sv_mcg_table_fini(struct sv_context *ctx);

/* ---- roles ---- */
/* qp->lock held: the transport retry timer restarts from now. */
void sv_requester_arm_ack_timer(struct sv_qp *qp);
/* qp->lock held: send what the send queue and limits allow. */
void sv_requester_run(struct sv_qp *qp);
/* The same, in the thread that posted: long one-sided operations that
 * would be executed in this thread are left to the next progress (the
 * engine thread, or a thread that polls), so the post returns at once. */
void sv_requester_post(struct sv_qp *qp);
/* qp->lock held: rewind to the oldest unacked WQE (retry / RNR). */
void sv_requester_rewind(struct sv_qp *qp, uint32_t to_psn);
/* qp->lock held: complete and retire finished WQEs in order. */
void sv_requester_retire(struct sv_qp *qp);
/* qp->lock held: the completion of a send WR (its wr_id, send_flags,
 * opcode's row and length) that ended with st, pushed when it is owed one:
 * it asked, the QP signals all, or it failed. */
void sv_requester_completion(struct sv_qp *qp, uint64_t wr_id, unsigned int send_flags,
			     const struct sv_wr_opcode_info *op, uint32_t length,
			     enum ibv_wc_status st);
/* qp->lock held: a timer of this QP expired. */
void sv_requester_timeout(struct sv_qp *qp, uint64_t now);
/* qp->lock held: no timer armed (ERR, RESET, destroy); the caller tells
 * the engine (sv_engine_timer_update) when the QP stays. */
void sv_requester_stop_timers(struct sv_qp *qp);
/* qp->lock held, the completer: an answer moved the QP on.  The retry
 * budgets are whole again, the wait starts over, and the ack timer runs
 * while WQEs are outstanding (else it stops). */
void sv_requester_progress(struct sv_qp *qp, bool outstanding);
/* qp->lock held, the completer: a NAK for a sequence error at psn goes
 * back there now, using one of the QP's retries; false: none was left. */
bool sv_requester_seq_nak(struct sv_qp *qp, uint32_t psn);
/* qp->lock held, the completer: an RNR NAK at psn (timer: its code) backs
 * off, then sends psn again, using an RNR retry; false: none was left. */
bool sv_requester_rnr_nak(struct sv_qp *qp, uint32_t psn, uint8_t timer);
/* qp->lock held: RESET; the caller tells the engine of the timers. */
void sv_requester_reset(struct sv_qp *qp);

/* ---- congestion.c: RC over a datagram transport; qp->lock held ---- */
/* SQ PSN set: a fresh window and clock. */
void sv_flow_init(struct sv_qp *qp);
/* Does the requester probe (congestion.c): RC over a datagram transport,
 * or over any under SOFTVERBS_FAULTS? */
bool sv_flow_probing(const struct sv_qp *qp);
/* May the packet with this PSN go on the wire now? */
bool sv_flow_window_open(const struct sv_qp *qp, uint32_t psn);
/* A request packet went out (ackreq: it asks for an ACK). */
void sv_flow_sent(struct sv_qp *qp, uint32_t psn, bool ackreq);
/* comp.una moved on from old_una: a round-trip sample, a larger window. */
void sv_flow_acked(struct sv_qp *qp, uint32_t old_una);
/* The requester went back (go-back-N): what it resends times nothing. */
void sv_flow_rewound(struct sv_qp *qp);
/* How long after the last progress a probe goes back to comp.una. */
uint64_t sv_flow_probe_ns(const struct sv_qp *qp);
/* A CNP from the responder: the window halves (once a round trip). */
void sv_flow_cnp(struct sv_qp *qp);
/* A loss over a datagram transport (a sequence NAK, a probe): the same. */
void sv_flow_lost(struct sv_qp *qp);
/* A request (headers at pkt) arrived marked congested: a CNP to its
 * requester, rate-limited. */
void sv_flow_marked(struct sv_qp *qp, struct sv_conn *conn, const uint8_t *pkt,
		    const struct sv_opcode_info *op);

/* engine thread, qp->lock held: an incoming request packet (headers at pkt) */
/* src_gpu: the payload is GPU memory of that context (a same-host GPU
 * reference, engine/gpu.h), NULL: host bytes */
void sv_responder_rx(struct sv_qp *qp, struct sv_conn *conn, const struct sv_opcode_info *op,
		     uint8_t *pkt, const uint8_t *payload, uint32_t plen, sv_cu_ctx src_gpu);
/*
 * qp->lock and the MR read lock held: would the responder accept this
 * RDMA WRITE packet (headers at pkt, payload not here yet) in order?  If so,
 * *dst is where its payload goes and *msg_left the bytes of the message
 * from there on, contiguous in one MR (direct receive: direct.c, src/transport/stream.c).
 */
bool sv_responder_direct(struct sv_qp *qp, struct sv_conn *conn, const struct sv_opcode_info *op,
			 const uint8_t *pkt, uint32_t plen, uint8_t **dst, uint32_t *msg_left);
/* qp->lock held: send what is left of a READ that waited for room (a
 * scheduled run of the QP); sv_responder_cancel forgets it (destroy, reset,
 * error). */
void sv_responder_resume(struct sv_qp *qp);
void sv_responder_cancel(struct sv_qp *qp);
/* qp->lock held: ERR.  No message is open any more, and the rest of a
 * READ is not sent. */
void sv_responder_halt(struct sv_qp *qp);
/* qp->lock held: ERR.  The receive WQE being filled completes with
 * IBV_WC_WR_FLUSH_ERR. */
void sv_responder_flush_rwqe(struct sv_qp *qp);
/* qp->lock held: RESET.  Nothing of the responder's previous life stays. */
void sv_responder_reset(struct sv_qp *qp);
/* The QP goes (destroy, an XRC proxy): what the responder allocated. */
void sv_responder_free(struct sv_qp *qp);
/* qp->lock held: the XRC SRQ that gave the receive WQE being filled goes
 * (srq.c, xrc_relay.c).  The WQE is the SRQ's, not completed here;
 * end_msg: the message it was taking ends too. */
void sv_responder_srq_gone(struct sv_qp *qp, bool end_msg);
/* qp->lock held, the QP being destroyed: the ACK of what arrived, again,
 * where packets may be lost (responder.c) */
void sv_responder_farewell(struct sv_qp *qp);
/* UD requests name no QP context on the connection beyond dqpn. */
/* engine thread, qp->lock held: an incoming response packet (from conn) */
void sv_completer_rx(struct sv_qp *qp, struct sv_conn *conn, const struct sv_opcode_info *op,
		     uint8_t *pkt, const uint8_t *payload, uint32_t plen, sv_cu_ctx src_gpu);
/* qp->lock held: RESET.  Nothing of the completer's previous life stays. */
void sv_completer_reset(struct sv_qp *qp);

/* Build and queue a response/ACK packet (helper shared by responder). */
int sv_send_packet(struct sv_conn *conn, const void *hdr, size_t hdr_len,
		   const struct iovec *payload, int npayload);

/* Timer code tables (IBA): RNR NAK timer code -> ns; timeout code -> ns */
uint64_t sv_rnr_timer_ns(uint8_t code);
uint64_t sv_timeout_ns(uint8_t code);

/* Connection of a QP (RC/UC), re-established after failure; qp->lock held. */
struct sv_conn *sv_qp_conn(struct sv_qp *qp);

#endif
