/*
 * One lifetime model for the objects the engine can reach.  An object
 * carries a struct sv_ref: its owner's reference, plus one for every
 * engine list or thread that holds it for a moment (a QP on the run list,
 * a connection held by a QP or an AH).
 *
 *  - An object freed by whoever lets go of it last (a connection): the put
 *    that returns true frees it.
 *  - An object destroyed by its owner (a QP): sv_ref_drop_and_wait() drops
 *    the owner's reference and sleeps, on a condition variable, until the
 *    last other reference is put; then the owner frees it.  No spinning,
 *    and no put touches the object after it has let go of it.
 *  - A count of dependants (the QPs using a CQ: EBUSY on destroy) is the
 *    same type, with no owner's reference.
 *
 * Gets are relaxed (the getter already knows the object alive: it holds a
 * lock or a reference through which it found it); puts are sequentially
 * consistent.
 */
#ifndef SV_REF_H
#define SV_REF_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

struct sv_ref_waiter; /* on the destroyer's stack (ref.c) */

struct sv_ref {
	atomic_uint n;
	_Atomic(struct sv_ref_waiter *) waiter; /* set by sv_ref_drop_and_wait */
};

static inline void sv_ref_init(struct sv_ref *r, unsigned int n)
{
	atomic_init(&r->n, n);
	atomic_init(&r->waiter, NULL);
}

static inline void sv_ref_get(struct sv_ref *r)
{
	atomic_fetch_add_explicit(&r->n, 1, memory_order_relaxed);
}

static inline unsigned int sv_ref_count(struct sv_ref *r)
{
	return atomic_load(&r->n);
}

void sv_ref_wake(struct sv_ref_waiter *w);

/*
 * Drop one reference.  True when it was the last and nobody waits: the
 * caller frees the object.  The last put of an object whose owner waits
 * wakes the owner instead, and the object must not be touched afterwards.
 */
static inline bool sv_ref_put(struct sv_ref *r)
{
	struct sv_ref_waiter *w;

	if (atomic_fetch_sub(&r->n, 1) != 1)
		return false;
	w = atomic_load(&r->waiter);
	if (!w)
		return true;
	sv_ref_wake(w);
	return false;
}

/* The owner's destroy: drop its reference, return once no other is left. */
void sv_ref_drop_and_wait(struct sv_ref *r);

#endif
