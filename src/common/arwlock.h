/*
 * An asymmetric reader-writer lock: readers take no locked instruction;
 * writers pay for both with membarrier(2).
 *
 * Why: a same-host one-sided operation (engine/direct_exec.c) reads two
 * tables that are written only by rare verbs calls: its own MR table (the
 * local SGEs, against ibv_dereg_mr) and its mappings of the peer's memory
 * (against their munmap).  A pthread rwlock's read lock and unlock are two
 * locked read-modify-writes of the lock's word, about 11 ns for the pair
 * here, and taking both tables' locks was a quarter of an 8-byte RDMA
 * WRITE's cost in the posting thread.
 *
 * How: each thread has a slot of its own (a few words, found through one
 * initial-exec TLS pointer).  A reader stores the lock's address in its
 * slot, then loads the lock's `writing` flag, with no fence in between; if
 * it is clear, it is in.  A writer takes the pthread rwlock (which keeps
 * writers apart, and holds readers that found `writing` set), sets
 * `writing`, and issues MEMBARRIER_CMD_PRIVATE_EXPEDITED: every thread of
 * the process runs a full barrier, so each reader has either made its
 * slot's store visible (and the writer waits until it clears it) or will
 * see `writing` set and wait on the rwlock instead.  This is the pairing
 * liburcu's "memb" flavour uses.  A writer costs a membarrier, about
 * 0.4-12 us on this VM depending on where the other threads run, when
 * another thread of the process has ever read through such a lock (none
 * has: the writer's `writing` is seen by any that comes, reader_claim):
 * MR registration, deregistration, memory-window binds and a peer
 * mapping's replacement pay it.
 *
 * Without membarrier (an old kernel, a seccomp filter that refuses it) and
 * under ThreadSanitizer (which does not model it), every reader takes the
 * rwlock: the old behaviour.  A read lock may be taken again by its holder
 * (nested up to SV_ARW_NEST locks a thread holds at once).
 */
#ifndef SV_ARWLOCK_H
#define SV_ARWLOCK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/lock_order.h"

#define SV_ARW_NEST 8

struct sv_arwlock {
	pthread_rwlock_t rw; /* writers; readers that found a writer about */
	atomic_int writing;  /* a writer holds rw (or is taking it) */
#ifdef SV_LOCK_ORDER
	unsigned char level; /* in the lock order (lock_order.h) */
#endif
};

/* A thread's slot: what it holds, the lock's address (| 1 when held
 * through rw), stacked: held[n] and above are free.  Only its thread
 * writes it; writers read it. */
struct sv_arw_reader {
	_Atomic(uintptr_t) held[SV_ARW_NEST];
	unsigned int n; /* the first free entry above the last held (its thread's) */
	atomic_bool in_use;
	struct sv_arw_reader *next; /* every slot ever made, never freed */
};

extern __thread struct sv_arw_reader *sv_arw_me __attribute__((tls_model("initial-exec")));
extern bool sv_arw_fast; /* membarrier registered: readers may skip rw */

int sv_arwlock_init(struct sv_arwlock *l, enum sv_lock_level level);
void sv_arwlock_destroy(struct sv_arwlock *l);
void sv_arwlock_wrlock_(struct sv_arwlock *l);
void sv_arwlock_wrunlock_(struct sv_arwlock *l);
void sv_arwlock_rdlock_slow(struct sv_arwlock *l);
void sv_arwlock_rdunlock_slow(struct sv_arwlock *l);

static inline __attribute__((always_inline)) void sv_arwlock_rdlock_(struct sv_arwlock *l)
{
	struct sv_arw_reader *r = sv_arw_me;

	/* the common case: a slot, room in it, no writer about */
	if (r && r->n < SV_ARW_NEST && sv_arw_fast) {
		unsigned int i = r->n;

		atomic_store_explicit(&r->held[i], (uintptr_t)l, memory_order_relaxed);
		/* no fence: the writer's membarrier orders this store before its
		 * scan, or its `writing` before this load */
		atomic_signal_fence(memory_order_seq_cst);
		if (!atomic_load_explicit(&l->writing, memory_order_acquire)) {
			r->n = i + 1;
			return;
		}
		atomic_store_explicit(&r->held[i], 0, memory_order_relaxed);
	}
	sv_arwlock_rdlock_slow(l);
}

static inline __attribute__((always_inline)) void sv_arwlock_rdunlock_(struct sv_arwlock *l)
{
	struct sv_arw_reader *r = sv_arw_me;

	/* the common case: the last one taken, taken without rw */
	if (r && r->n &&
	    atomic_load_explicit(&r->held[r->n - 1], memory_order_relaxed) == (uintptr_t)l) {
		atomic_store_explicit(&r->held[--r->n], 0, memory_order_release);
		while (r->n && !atomic_load_explicit(&r->held[r->n - 1], memory_order_relaxed))
			r->n--; /* holes of locks released out of order */
		return;
	}
	sv_arwlock_rdunlock_slow(l);
}

/* The lock order (lock_order.h): checked in SV_LOCK_ORDER builds. */
#ifdef SV_LOCK_ORDER
#define SV_ARW_TAKE_(l, kind, take)                                   \
	(sv_lock_check((l), (l)->level, (kind), __FILE__, __LINE__), take(l), \
	 sv_lock_push((l), (l)->level, (kind), __FILE__, __LINE__))
#define SV_ARW_GIVE_(l, give) (sv_lock_pop((l), __FILE__, __LINE__), give(l))
#define sv_arwlock_rdlock(l) SV_ARW_TAKE_(l, 'r', sv_arwlock_rdlock_)
#define sv_arwlock_rdunlock(l) SV_ARW_GIVE_(l, sv_arwlock_rdunlock_)
#define sv_arwlock_wrlock(l) SV_ARW_TAKE_(l, 'w', sv_arwlock_wrlock_)
#define sv_arwlock_wrunlock(l) SV_ARW_GIVE_(l, sv_arwlock_wrunlock_)
#else
#define sv_arwlock_rdlock(l) sv_arwlock_rdlock_(l)
#define sv_arwlock_rdunlock(l) sv_arwlock_rdunlock_(l)
#define sv_arwlock_wrlock(l) sv_arwlock_wrlock_(l)
#define sv_arwlock_wrunlock(l) sv_arwlock_wrunlock_(l)
#endif

#endif
