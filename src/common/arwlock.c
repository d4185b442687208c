/* The asymmetric reader-writer lock; see arwlock.h. */
#include "common/arwlock.h"
#include "common/util.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

__thread struct sv_arw_reader *sv_arw_me __attribute__((tls_model("initial-exec")));
bool sv_arw_fast;

static _Atomic(struct sv_arw_reader *) readers; /* pushed at the head */
static pthread_key_t reader_key;
static bool key_made;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int membarrier(int cmd)
{
	return (int)syscall(SYS_membarrier, cmd, 0, 0);
}

/* The slot holds nothing, and is free for the next thread to claim. */
static void slot_free(struct sv_arw_reader *r)
{
	for (int i = 0; i < SV_ARW_NEST; i++)
		atomic_store(&r->held[i], 0);
	r->n = 0;
	atomic_store(&r->in_use, false);
}

/* A thread ends: its slot is free for the next thread. */
static void reader_release(void *p)
{
	if (sv_arw_me == p)
		sv_arw_me = NULL;
	slot_free(p);
}

/* The child of a fork has one thread, this one: the other slots describe
 * threads it does not have, and would hold its writers forever. */
static void after_fork_child(void)
{
	for (struct sv_arw_reader *r = atomic_load(&readers); r; r = r->next)
		if (r != sv_arw_me)
			slot_free(r);
}

static void init_once(void)
{
	if (pthread_key_create(&reader_key, reader_release) != 0)
		return;
	key_made = true;
	pthread_atfork(NULL, NULL, after_fork_child);
#ifndef SV_TSAN
	{
		int q = membarrier(MEMBARRIER_CMD_QUERY);

		/* registration is the process's (its mm's), kept across fork */
		sv_arw_fast = q > 0 && (q & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
			      membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
		if (!sv_arw_fast)
			sv_dbg("membarrier(2) unavailable: MR and peer-memory readers take the rwlock");
	}
#endif
}

/*
 * At load time, while the process most likely has one thread: registering
 * for expedited membarriers then costs nothing, where once other threads
 * exist the kernel makes it wait for an RCU grace period (about 15 ms
 * here, in the first verbs call of every process, both ends of every
 * rdma_cm connection included).
 */
__attribute__((constructor)) static void arw_load(void)
{
	pthread_once(&once, init_once);
}

/* The library is unloaded (dlclose), or the process exits: a thread that
 * ends after this must not be sent to reader_release, whose code may be
 * gone.  (Its slot then stays taken: a writer finds it empty.) */
__attribute__((destructor)) static void arw_unload(void)
{
	if (key_made)
		pthread_key_delete(reader_key);
}

int sv_arwlock_init(struct sv_arwlock *l, enum sv_lock_level level)
{
#ifdef SV_LOCK_ORDER
	l->level = (unsigned char)level;
#else
	(void)level;
#endif
	pthread_once(&once, init_once);
	atomic_init(&l->writing, 0);
	return pthread_rwlock_init(&l->rw, NULL);
}

void sv_arwlock_destroy(struct sv_arwlock *l)
{
	pthread_rwlock_destroy(&l->rw);
}

/* This thread's slot, claimed at its first read lock; NULL without memory
 * (then it reads through rw alone). */
static struct sv_arw_reader *reader_claim(void)
{
	struct sv_arw_reader *r;

	for (r = atomic_load(&readers); r; r = r->next) {
		bool free_slot = false;

		if (!atomic_load_explicit(&r->in_use, memory_order_relaxed) &&
		    atomic_compare_exchange_strong(&r->in_use, &free_slot, true))
			goto claimed;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	atomic_init(&r->in_use, true);
	r->next = atomic_load(&readers);
	while (!atomic_compare_exchange_weak(&readers, &r->next, r))
		;
claimed:
	sv_arw_me = r;
	pthread_setspecific(reader_key, r); /* reader_release at the thread's end */
	/* the claim before this thread's first look at a lock's `writing`: a
	 * writer that did not see the slot taken (others_read) has set it.
	 * (Under ThreadSanitizer readers take the rwlock, and gcc refuses
	 * the fence there.) */
#ifndef SV_TSAN
	atomic_thread_fence(memory_order_seq_cst);
#endif
	return r;
}

void sv_arwlock_rdlock_slow(struct sv_arwlock *l)
{
	struct sv_arw_reader *r = sv_arw_me ? sv_arw_me : reader_claim();
	bool nested = false;
	unsigned int slot;

	if (!r) {
		pthread_rwlock_rdlock(&l->rw);
		return;
	}
	if (r->n == SV_ARW_NEST) {
		/* more nested read locks than any path of softverbs takes */
		sv_err("arwlock: more than %d read locks held by one thread", SV_ARW_NEST);
		abort();
	}
	slot = r->n;
	for (unsigned int i = 0; i < slot; i++)
		if (atomic_load_explicit(&r->held[i], memory_order_relaxed) == (uintptr_t)l)
			nested = true;
	if (sv_arw_fast) {
		atomic_store_explicit(&r->held[slot], (uintptr_t)l, memory_order_relaxed);
		atomic_signal_fence(memory_order_seq_cst);
		/* held already: a writer waits for this thread anyway, and must
		 * not find it blocked on rw behind itself */
		if (nested || !atomic_load_explicit(&l->writing, memory_order_acquire)) {
			r->n = slot + 1;
			return;
		}
		atomic_store_explicit(&r->held[slot], 0, memory_order_relaxed);
	}
	pthread_rwlock_rdlock(&l->rw);
	atomic_store_explicit(&r->held[slot], (uintptr_t)l | 1, memory_order_relaxed);
	r->n = slot + 1;
}

void sv_arwlock_rdunlock_slow(struct sv_arwlock *l)
{
	struct sv_arw_reader *r = sv_arw_me;
	uintptr_t v = 0;
	int i = -1;

	if (r)
		for (i = (int)r->n - 1; i >= 0; i--) {
			v = atomic_load_explicit(&r->held[i], memory_order_relaxed);
			if ((v & ~(uintptr_t)1) == (uintptr_t)l)
				break;
		}
	if (i < 0) { /* taken without a slot */
		pthread_rwlock_unlock(&l->rw);
		return;
	}
	atomic_store_explicit(&r->held[i], 0, memory_order_release);
	while (r->n && !atomic_load_explicit(&r->held[r->n - 1], memory_order_relaxed))
		r->n--;
	if (v & 1)
		pthread_rwlock_unlock(&l->rw);
}

/* Every thread of the process runs a full memory barrier. */
static void barrier_all(void)
{
	if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
		return;
	/* registered at the first lock, kept across fork: not expected.  A
	 * store waits in a store buffer for nanoseconds, not a millisecond */
	sv_warn_limited("arwlock: membarrier failed: %s", strerror(errno));
	usleep(1000);
}

/* Another thread has a slot: it may be inside a read lock, or entering one
 * without a fence.  A thread with none has yet to claim one, and sees
 * `writing` once it has (reader_claim). */
static bool others_read(void)
{
	for (struct sv_arw_reader *r = atomic_load(&readers); r; r = r->next)
		if (r != sv_arw_me && atomic_load(&r->in_use))
			return true;
	return false;
}

void sv_arwlock_wrlock_(struct sv_arwlock *l)
{
	unsigned int spins = 0;

	pthread_rwlock_wrlock(&l->rw);
	if (!sv_arw_fast)
		return;
	atomic_store(&l->writing, 1);
	/* the barrier interrupts every CPU that runs a thread of the process
	 * (8-10 us here when one is busy): only when a reader may be about */
	if (!others_read())
		return;
	barrier_all();
	for (struct sv_arw_reader *r = atomic_load(&readers); r; r = r->next)
		for (int i = 0; i < SV_ARW_NEST; i++)
			while (atomic_load_explicit(&r->held[i], memory_order_acquire) ==
			       (uintptr_t)l) {
				/* a reader is a copy at most: yield, then sleep */
				if (++spins < 64) {
					sched_yield();
				} else {
					struct timespec ts = { 0, 50000 };

					nanosleep(&ts, NULL);
				}
			}
}

void sv_arwlock_wrunlock_(struct sv_arwlock *l)
{
	if (sv_arw_fast)
		atomic_store_explicit(&l->writing, 0, memory_order_release);
	pthread_rwlock_unlock(&l->rw);
}
