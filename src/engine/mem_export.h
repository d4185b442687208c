/*
 * What a context tells the processes of its host about its QPs and the
 * memory they may reach, so that a peer executes RDMA WRITE, READ and
 * atomics itself (ARCHITECTURE.md §4.6): the export table, a sealed memfd
 * per context that peers of the same uid take with pidfd_getfd(2) (the
 * QPN registry names its descriptor and inode) and map.
 *
 * The owner writes it; peers only read it, but for each QP's `busy`
 * counter.  Revocation (deregistration, a QP leaving the states that
 * receive, its destruction) is a Dekker handshake with the peers: the owner
 * publishes the change, fences, then waits until every QP's busy count has
 * been 0; a peer raises busy (a sequentially consistent RMW), then reads
 * what it checks.  Either the peer sees the change, or the owner sees it
 * busy and waits until its access is over.
 *
 * The owner waits on the count as on a futex (process-shared: the table is
 * a shared mapping): it sets SV_XQP_WAITER in it and sleeps; the peer whose
 * decrement takes the count to 0 with the flag set clears the flag, if the
 * count is still 0, and wakes it (sv_xqp_leave).  A flag cleared after the
 * waiter looked is proof that the count has been 0 since, so a stream of
 * accesses does not keep a waiter waiting; without a waiter, leaving is one
 * RMW, as before.
 */
#ifndef SV_MEM_EXPORT_H
#define SV_MEM_EXPORT_H

#include "transport/registry.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SV_XSEG_MAGIC 0x53565845u /* "SVXE" */
#define SV_XSEG_VERSION 4u /* 3: QPs by slot, qpn_key; 4: receive queues (direct_recv.h) */
#define SV_XMR_SLOTS 4096 /* MRs a context exports; more go through its engine */

/* A QP, at the index of its slot: sv_qpn_unpermute of its number's low
 * bits, by the permutation made from qpn_key (transport/registry.h). */
struct sv_xqp {
	/* peers' accesses through it in progress, and SV_XQP_WAITER */
	_Atomic uint32_t busy;
	_Atomic uint32_t open; /* 1: RC, in a state that executes requests */
	_Atomic uint32_t pd;     /* its PD's handle */
	_Atomic uint32_t access; /* qp_access_flags */
	_Atomic uint32_t dest_qpn;
	/* its receive queue in the receive arena (direct_recv.h), read by
	 * peers that place SENDs themselves: the offset of its struct sv_xrq
	 * (0: none, the QP's receives are private), and its capacity << 8 |
	 * SV_XRQ_NOTIFY | SGEs per receive (written first) */
	_Atomic uint32_t rq_off;
	_Atomic uint32_t rq_shape;
	/* set by a peer that would place SENDs: the owner moves the queue
	 * into the arena at its next post (a queue nobody asks for stays
	 * private and costs the arena nothing) */
	_Atomic uint32_t rq_want;
};

/* In rq_shape: a peer that places into the queue marks the QP's slot in
 * the ready map and rings the owner's bell (direct_recv.h); without it,
 * the owner's polls find what was placed, and nothing else needs to. */
#define SV_XRQ_NOTIFY 0x80u

/* In busy: the owner waits for the count to be 0 (mem_export.c). */
#define SV_XQP_WAITER 0x80000000u

/* A peer's access through q begins: before it reads anything it checks. */
static inline void sv_xqp_enter(struct sv_xqp *q)
{
	atomic_fetch_add(&q->busy, 1);
}

/* The owner waits: its flag is cleared and it is woken (mem_export.c). */
void sv_xqp_wake(struct sv_xqp *q);

/* A peer's access through q is over. */
static inline void sv_xqp_leave(struct sv_xqp *q)
{
	if (atomic_fetch_sub(&q->busy, 1) == (SV_XQP_WAITER | 1))
		sv_xqp_wake(q);
}

/* An exported MR.  seq is odd while the owner rewrites the slot. */
struct sv_xmr {
	_Atomic uint32_t seq;
	_Atomic uint32_t rkey; /* 0: free */
	_Atomic uint32_t pd;
	_Atomic uint32_t access;
	_Atomic uint64_t iova, len;
	_Atomic uint64_t ino;  /* the extent's memfd (engine/mem_share.h) */
	_Atomic uint64_t size; /* its size */
	_Atomic uint64_t off;  /* of iova's byte in it */
	_Atomic int32_t fd;    /* its descriptor in the owner */
	uint32_t pad;
};

struct sv_xseg {
	uint32_t magic, version;
	uint32_t qpn_base;
	_Atomic uint32_t nmr; /* slots in use or used: peers search [0, nmr) */
	uint64_t qpn_key; /* the key of the permutation of its QP numbers */
	/* where in the table the kernel keeps the lock word of `alive` (0:
	 * not known; then peers ask the process itself) */
	uint32_t alive_off;
	/* the receive arena (direct_recv.h): a memfd of the owner, its inode
	 * and size; fd -1: none */
	int32_t arena_fd;
	uint64_t arena_ino;
	uint64_t arena_size;
	uint32_t pad[4];
	/*
	 * A robust, process-shared mutex that the owner's engine thread holds
	 * for as long as it runs.  When that thread ends (the process exits,
	 * is killed or execs) the kernel marks its lock word FUTEX_OWNER_DIED
	 * before the process can be reaped (the robust futex ABI), so a peer
	 * learns that the owner is alive from one load of that word, without a
	 * system call or a clock read (direct_exec.c).  The word's place,
	 * alive_off, is found as the kernel finds it: through the owner's
	 * robust list (get_robust_list(2)), not from the C library's layout
	 * of the mutex.  Alone on its cache line: nobody writes it while it is
	 * held.
	 */
	union {
		pthread_mutex_t m;
		uint8_t line[64];
	} alive;
	/* QP slots with receive completions that peers placed and the owner
	 * has not taken in yet: a bit per slot, and a bit per word of those
	 * (direct_recv.h) */
	_Alignas(64) _Atomic uint64_t rq_ready_sum[SV_QPN_BLOCK / 64 / 64];
	_Alignas(64) _Atomic uint64_t rq_ready[SV_QPN_BLOCK / 64];
	struct sv_xqp qp[SV_QPN_BLOCK];
	struct sv_xmr mr[SV_XMR_SLOTS];
};

struct sv_context;
struct sv_mr;
struct sv_qp;

/* The context's table, made at open and published in the registry; false
 * when it cannot be (peers then use the engine). */
bool sv_export_open(struct sv_context *ctx);
/* After the engine thread has ended (it held the table's liveness mutex). */
void sv_export_close(struct sv_context *ctx);
/*
 * The extent an MR of [addr, addr+len) with these access flags lies in, its
 * pages shared now if needed (engine/mem_share.h); NULL when peers of this
 * host cannot reach it directly.  Pages are shared only once a peer of this
 * host has connected to the context (sv_export_share_all): a process whose
 * peers are all elsewhere keeps private pages.
 */
struct sv_extent *sv_export_share(struct sv_context *ctx, void *addr, size_t len,
				  unsigned int access, bool gpu);
/* A peer of this host has connected and proved itself: the MRs registered
 * before share their pages and are exported (once per context). */
void sv_export_share_all(struct sv_context *ctx);
/* An MR after its registration (MR table write lock held): exported when
 * peers may reach it and its pages can be shared. */
void sv_export_mr(struct sv_context *ctx, struct sv_mr *mr);
/* Before an MR goes or changes (write lock held): peers stop using it.
 * True if it was exported: then, once the lock is dropped and before the
 * MR's memory goes or the verb returns, sv_export_quiesce waits out the
 * accesses in progress. */
bool sv_export_mr_revoke(struct sv_context *ctx, struct sv_mr *mr);
/* No lock held: every peer access through a QP of the context that had
 * begun when this was called has ended (at most 1 s: a peer stopped inside
 * an access is not waited for longer). */
void sv_export_quiesce(struct sv_context *ctx);
/* A QP's state or attributes changed, or it is being destroyed
 * (qp->destroyed; qp->lock held): where what peers check no longer holds,
 * they stop passing their checks now.  Nothing waits here (the engine
 * calls it when a QP enters the error state).  True when the record is
 * closed: then the verb, once it has dropped qp->lock and before it
 * returns, calls sv_export_qp_settle. */
bool sv_export_qp(struct sv_qp *qp);
/* qp->lock held: the record closes, and no peer access through it is in
 * progress when this returns (at most 1 s); a peer's access needs no lock
 * of ours, so it ends meanwhile.  For what must not change under a peer
 * that has passed its checks (the receive queue's counters at RESET);
 * sv_export_qp then finds the record closed, and settle reopens it. */
void sv_export_qp_quiet(struct sv_qp *qp);
/* No lock held: no peer access through qp that had begun when the record
 * was closed is in progress any more (a sleep on its busy count, at most
 * 1 s: a peer stopped inside an access is not waited for longer); then,
 * under qp->lock, the record shows the QP's present attributes again if
 * it executes requests.  False when the wait gave up. */
bool sv_export_qp_settle(struct sv_qp *qp);
/* ctx->lock held: the QP of slot was destroyed, and a peer's access
 * through its record had not ended (sv_export_qp_settle false): a peer
 * killed inside one never ends it, so revocations stop waiting for that
 * record (sv_export_quiesce), and the slot is not given to a new QP while
 * the count stays raised. */
void sv_export_slot_give_up(struct sv_context *ctx, uint32_t slot);
/* ctx->lock held: whether a new QP may take slot (no peer access through
 * its record in progress: else a count a dead peer left raised would
 * make every wait on the new QP's record last its full second). */
bool sv_export_slot_free(struct sv_context *ctx, uint32_t slot);
/* qp->lock held, its record closed (sv_export_qp): whether a peer access
 * through it is still in progress (its busy count raised).  A look, no
 * wait: the engine asks it. */
bool sv_export_qp_entered(struct sv_qp *qp);
/* The record peers check for qp, or NULL (no shared table, or another
 * process's XRC receive QP, whose requests we execute, has none here). */
struct sv_xqp *sv_export_qp_record(struct sv_qp *qp);
/* Any lock: the peer accesses through qp's record in progress end (at
 * most 1 s); the record stays as it is (a resize of its SRQ's queue,
 * which the record no longer names, waits for those still placing). */
void sv_export_qp_wait_peers(struct sv_qp *qp);

#endif
