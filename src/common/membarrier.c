/* membarrier(2)'s global expedited barrier (membarrier.h). */
#include "common/membarrier.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

static int query(void)
{
	return (int)syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
}

bool sv_membarrier_available(void)
{
	static atomic_int avail; /* 0: not asked yet, 1: yes, -1: no */
	int a = atomic_load_explicit(&avail, memory_order_relaxed), q;

	if (!a) {
		q = query();
		a = q >= 0 && (q & MEMBARRIER_CMD_GLOBAL_EXPEDITED) ? 1 : -1;
		atomic_store_explicit(&avail, a, memory_order_relaxed);
	}
	return a > 0;
}

static atomic_int registered; /* 0: not asked yet, 1: yes, -1: no */

static void forget(void)
{
	atomic_store(&registered, 0);
}

static void install_atfork(void)
{
	(void)pthread_atfork(NULL, NULL, forget);
}

bool sv_membarrier_registered(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	int r = atomic_load_explicit(&registered, memory_order_acquire), q;

	if (r)
		return r > 0;
	(void)pthread_once(&once, install_atfork);
	q = query();
	r = q >= 0 && (q & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) &&
			    !syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0)
		    ? 1
		    : -1;
	atomic_store_explicit(&registered, r, memory_order_release);
	return r > 0;
}

bool sv_membarrier_global(void)
{
	return !syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0);
}
