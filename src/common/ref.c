/* The slow path of the reference model (ref.h): an owner waiting for the last put. */
#include "common/ref.h"
#include "common/lock_order.h"

struct sv_ref_waiter {
	struct sv_mutex lock;
	pthread_cond_t cond;
	bool done;
};

/*
 * The waiter is published before the owner drops its reference, so the put
 * that takes the count to zero (sequentially consistent, after that drop)
 * finds it.  That put sets `done` under the waiter's lock and never touches
 * the object or the waiter again; the owner sees `done` under the same lock
 * before it frees the object and leaves the frame that holds the waiter.
 */
void sv_ref_drop_and_wait(struct sv_ref *r)
{
	struct sv_ref_waiter w = { SV_MUTEX_INITIALIZER(SV_LOCK_REF_WAIT), PTHREAD_COND_INITIALIZER, false };

	atomic_store(&r->waiter, &w);
	if (atomic_fetch_sub(&r->n, 1) != 1) {
		sv_mutex_lock(&w.lock);
		while (!w.done)
			sv_cond_wait(&w.cond, &w.lock);
		sv_mutex_unlock(&w.lock);
	}
	atomic_store(&r->waiter, NULL);
	pthread_cond_destroy(&w.cond);
	sv_mutex_destroy(&w.lock);
}

void sv_ref_wake(struct sv_ref_waiter *w)
{
	sv_mutex_lock(&w->lock);
	w->done = true;
	pthread_cond_signal(&w->cond);
	sv_mutex_unlock(&w->lock);
}
