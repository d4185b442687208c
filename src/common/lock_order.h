/*
 * One lock order for the whole library, asserted at run time.
 *
 * Every lock of src/ has a level, fixed when it is initialised
 * (sv_mutex_init(&qp->lock, SV_LOCK_QP)), and SV_LOCK_LEVELS below lists
 * the levels outermost first: that list IS the lock order, and
 * docs/ARCHITECTURE.md §5.2 describes each entry.  A thread may take a lock
 * only at a level above every lock it holds.  Three exceptions, all spelled
 * out here rather than left to chance:
 *  - a trylock never waits, so it cannot close a cycle: it is not checked
 *    (what it takes is still held, and checked against, afterwards);
 *  - a level flagged SV_LF_NEST may be taken again while one of its locks
 *    is held, in ascending address order (none needs it today);
 *  - where the code orders two locks of one level by a rule of its own, it
 *    says so around the nesting: sv_lock_nest_allow(&outer) lets this
 *    thread take one more lock of outer's level while outer is the last it
 *    took, until sv_lock_nest_allow(NULL) (a connection's tx_lock, then its
 *    replacement's, engine/connections.c conn_redial).
 * A read lock of an sv_arwlock that the thread already holds may be taken
 * again (arwlock.h: a read lock nests).
 *
 * Built with SV_LOCK_ORDER (CMake option, on in Debug and sanitizer builds,
 * and so in CI's AddressSanitizer and ThreadSanitizer passes), each thread
 * keeps a stack of what it holds, and a lock taken out of order aborts with
 * both locks' names, levels and where each was taken.  Without it (the
 * release build) every wrapper is the plain pthread call and struct
 * sv_mutex is a pthread_mutex_t: the fast path does not move.
 *
 * The levels flagged SV_LF_NOSYS (the engine lock) are held by the engine
 * thread and every posting and polling thread in turn: nothing that may
 * block or enter the kernel runs under them (wake, epoll_ctl, logging assert
 * it with sv_lock_assert_may_block).
 *
 * librdmacm has its own copy of this checker (it links src/common itself):
 * its three locks come before every lock of libibverbs, whose verbs it
 * calls while holding them; libibverbs never calls back into it.
 */
#ifndef SV_LOCK_ORDER_H
#define SV_LOCK_ORDER_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>

#define SV_LF_NEST 1u  /* same level again, ascending addresses */
#define SV_LF_NOSYS 2u /* no system call, no logging while held */

/* X(level, the lock, flags): outermost first */
#define SV_LOCK_LEVELS(X)                                                        \
	/* librdmacm (src/rdmacm) */                                             \
	X(RSOCKET, "rs->lock", 0)                                                \
	X(CM, "cm_lock", 0)                                                      \
	X(RS_TABLE, "rs_table_lock", 0)                                          \
	/* libibverbs */                                                         \
	X(ALIVE, "export table's liveness mutex", 0)                             \
	X(SYSFS, "sysfs.c lock", 0)                                              \
	X(DEVICES, "devs_lock", 0)                                               \
	X(OPEN, "open_lock", 0)                                                  \
	X(PROGRESS, "eng->progress_lock", 0)                                     \
	X(CTX, "ctx->lock", 0)                                                   \
	X(MCAST, "ctx->mcast.lock", 0)                                           \
	X(QP, "qp->lock", 0)                                                     \
	X(SRQT, "ctx->srqt_lock", 0)                                             \
	X(SRQ, "srq->lock", 0)                                                   \
	X(ARENA, "ctx->arena_lock (direct_recv.c)", 0)                           \
	X(AH, "ah->lock", 0)                                                     \
	X(MR, "MR table lock (ctx->mrs.lock)", 0)                                \
	X(PEER_MAP, "peer mappings lock (pm->lock)", 0)                          \
	X(SHARE, "share_lock (mem_share.c)", 0)                                  \
	X(CONNECT, "eng->connect_lock", 0)                                       \
	X(CONN_TX, "conn->tx_lock", 0)                                           \
	X(ROCE_TX, "rocev2 tx_lock", 0)                                          \
	X(ROCE_FWD, "rocev2 fwd_lock", 0)                                        \
	X(ROCE_ADMIT, "rocev2 admit_lock", 0)                                    \
	X(ROCE_IDS, "roce_wire id_lock", 0)                                      \
	X(QPN_CLAIMED, "registry.c claimed_lock", 0)                             \
	X(ENGINE, "eng->lock", SV_LF_NOSYS)                                      \
	X(CQ, "cq->lock", 0)                                                     \
	X(ASYNC, "ctx->async_lock", 0)                                           \
	X(XRC_CALL, "ctx->xrc_call_lock", 0)                                     \
	X(GPU_ATOMIC, "gpu.c atomic_lock", 0)                                    \
	X(CUDA, "cuda_lock", 0)                                                  \
	X(CQ_EVENTS, "ibv_cq mutex (event counts)", 0)                           \
	X(REF_WAIT, "sv_ref waiter's lock", 0)

enum sv_lock_level {
#define SV_LOCK_ENUM_(l, name, flags) SV_LOCK_##l,
	SV_LOCK_LEVELS(SV_LOCK_ENUM_)
#undef SV_LOCK_ENUM_
	SV_LOCK_NLEVELS
};

#ifdef SV_LOCK_ORDER

struct sv_mutex {
	pthread_mutex_t m;
	unsigned char level;
};
#define SV_MUTEX_INITIALIZER(lvl) { PTHREAD_MUTEX_INITIALIZER, (lvl) }

/* The checker (lock_order.c).  kind: 'm' mutex, 'r' read, 'w' write. */
void sv_lock_check(const void *lock, unsigned level, char kind, const char *file, int line);
void sv_lock_push(const void *lock, unsigned level, char kind, const char *file, int line);
void sv_lock_pop(const void *lock, const char *file, int line);
void sv_lock_forget(const void *lock);
void sv_lock_nest_allow(const void *outer);
bool sv_lock_holds_read(const void *lock);
bool sv_lock_level_held(unsigned level);
void sv_lock_assert_may_block_at(const char *what, const char *file, int line);
#define sv_lock_assert_may_block(what) sv_lock_assert_may_block_at((what), __FILE__, __LINE__)

/* (made again in a fork's child while held: held no more) */
static inline int sv_mutex_init(struct sv_mutex *mx, enum sv_lock_level level)
{
	sv_lock_forget(mx);
	mx->level = (unsigned char)level;
	return pthread_mutex_init(&mx->m, NULL);
}

static inline int sv_mutex_lock_at(struct sv_mutex *mx, const char *f, int l)
{
	int e;

	sv_lock_check(mx, mx->level, 'm', f, l);
	e = pthread_mutex_lock(&mx->m);
	if (!e)
		sv_lock_push(mx, mx->level, 'm', f, l);
	return e;
}

static inline int sv_mutex_trylock_at(struct sv_mutex *mx, const char *f, int l)
{
	int e = pthread_mutex_trylock(&mx->m);

	if (!e)
		sv_lock_push(mx, mx->level, 'm', f, l);
	return e;
}

static inline int sv_mutex_timedlock_at(struct sv_mutex *mx, const struct timespec *t,
					const char *f, int l)
{
	int e;

	sv_lock_check(mx, mx->level, 'm', f, l);
	e = pthread_mutex_timedlock(&mx->m, t);
	if (!e)
		sv_lock_push(mx, mx->level, 'm', f, l);
	return e;
}

static inline int sv_mutex_unlock_at(struct sv_mutex *mx, const char *f, int l)
{
	sv_lock_pop(mx, f, l);
	return pthread_mutex_unlock(&mx->m);
}

/* A mutex whose type is not ours (rdma-core's struct ibv_cq, the robust one
 * in the shared export table): its level is said at each call.  A robust
 * mutex's EOWNERDEAD is a success: it is held. */
static inline int sv_pmutex_lock_at(pthread_mutex_t *m, enum sv_lock_level level,
				    const char *f, int l)
{
	int e;

	sv_lock_check(m, level, 'm', f, l);
	e = pthread_mutex_lock(m);
	if (!e || e == EOWNERDEAD)
		sv_lock_push(m, level, 'm', f, l);
	return e;
}

static inline int sv_pmutex_unlock_at(pthread_mutex_t *m, const char *f, int l)
{
	sv_lock_pop(m, f, l);
	return pthread_mutex_unlock(m);
}

#define sv_mutex_lock(mx) sv_mutex_lock_at((mx), __FILE__, __LINE__)
#define sv_mutex_trylock(mx) sv_mutex_trylock_at((mx), __FILE__, __LINE__)
#define sv_mutex_timedlock(mx, t) sv_mutex_timedlock_at((mx), (t), __FILE__, __LINE__)
#define sv_mutex_unlock(mx) sv_mutex_unlock_at((mx), __FILE__, __LINE__)
#define sv_pmutex_lock(m, level) sv_pmutex_lock_at((m), (level), __FILE__, __LINE__)
#define sv_pmutex_unlock(m) sv_pmutex_unlock_at((m), __FILE__, __LINE__)

#else /* !SV_LOCK_ORDER: the plain calls */

struct sv_mutex {
	pthread_mutex_t m;
};
#define SV_MUTEX_INITIALIZER(lvl) { PTHREAD_MUTEX_INITIALIZER }

static inline void sv_lock_assert_may_block(const char *what)
{
	(void)what;
}
static inline void sv_lock_nest_allow(const void *outer)
{
	(void)outer;
}

static inline int sv_mutex_init(struct sv_mutex *mx, enum sv_lock_level level)
{
	(void)level;
	return pthread_mutex_init(&mx->m, NULL);
}
static inline int sv_mutex_lock(struct sv_mutex *mx)
{
	return pthread_mutex_lock(&mx->m);
}
static inline int sv_mutex_trylock(struct sv_mutex *mx)
{
	return pthread_mutex_trylock(&mx->m);
}
static inline int sv_mutex_timedlock(struct sv_mutex *mx, const struct timespec *t)
{
	return pthread_mutex_timedlock(&mx->m, t);
}
static inline int sv_mutex_unlock(struct sv_mutex *mx)
{
	return pthread_mutex_unlock(&mx->m);
}
static inline int sv_pmutex_lock(pthread_mutex_t *m, enum sv_lock_level level)
{
	(void)level;
	return pthread_mutex_lock(m);
}
static inline int sv_pmutex_unlock(pthread_mutex_t *m)
{
	return pthread_mutex_unlock(m);
}

#endif /* SV_LOCK_ORDER */

static inline int sv_mutex_destroy(struct sv_mutex *mx)
{
	return pthread_mutex_destroy(&mx->m);
}

/* A condition variable's wait lets the mutex go and takes it back: the
 * thread's other locks stay held, so the order is what it was. */
static inline int sv_cond_wait(pthread_cond_t *c, struct sv_mutex *mx)
{
	return pthread_cond_wait(c, &mx->m);
}
static inline int sv_cond_timedwait(pthread_cond_t *c, struct sv_mutex *mx,
				    const struct timespec *t)
{
	return pthread_cond_timedwait(c, &mx->m, t);
}

#endif
