/* Logging and environment configuration shared by every layer. */
#include "common/util.h"
#include "common/lock_order.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pthread.h>
#include <sys/random.h>
#include <unistd.h>

static int log_level = -1;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

#ifdef SV_FENCE_BY_RMW
_Atomic unsigned sv_fence_word; /* sv_fence under ThreadSanitizer (util.h) */
#endif

static void log_init(void)
{
	const char *v = getenv("SOFTVERBS_LOG");

	log_level = SV_LOG_WARN;
	if (!v)
		return;
	if (!strcasecmp(v, "error"))
		log_level = SV_LOG_ERROR;
	else if (!strcasecmp(v, "warn"))
		log_level = SV_LOG_WARN;
	else if (!strcasecmp(v, "info"))
		log_level = SV_LOG_INFO;
	else if (!strcasecmp(v, "debug"))
		log_level = SV_LOG_DEBUG;
}

bool sv_log_enabled(enum sv_log_level level)
{
	/* never under the engine lock, whether it writes or not (lock_order.h) */
	sv_lock_assert_may_block("logging");
	pthread_once(&log_once, log_init);
	return (int)level <= log_level;
}

bool sv_log_limit_pass(struct sv_log_limit *l, uint32_t *held)
{
	uint64_t now = sv_now_ns(), next = atomic_load_explicit(&l->next_ns, memory_order_relaxed);

	if (now < next ||
	    !atomic_compare_exchange_strong(&l->next_ns, &next, now + 1000000000ull)) {
		atomic_fetch_add_explicit(&l->held, 1, memory_order_relaxed);
		return false;
	}
	*held = atomic_exchange_explicit(&l->held, 0, memory_order_relaxed);
	return true;
}

void sv_log(enum sv_log_level level, const char *fmt, ...)
{
	static const char *names[] = { "error", "warn", "info", "debug" };
	char buf[512];
	va_list ap;
	int n;

	if (!sv_log_enabled(level))
		return;
	n = snprintf(buf, sizeof(buf), "softverbs[%d] %s: ", (int)getpid(),
		     names[level]);
	va_start(ap, fmt);
	vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", buf);
}

uint32_t sv_random_u32(void)
{
	uint32_t v;

	if (getrandom(&v, sizeof(v), 0) == (ssize_t)sizeof(v))
		return v;
	return (uint32_t)sv_now_ns() * 2654435761u;
}

const char *sv_env_str(const char *name, const char *dflt)
{
	const char *v = getenv(name);

	return (v && *v) ? v : dflt;
}

long sv_env_long(const char *name, long dflt)
{
	const char *v = getenv(name);
	char *end;
	long r;

	if (!v || !*v)
		return dflt;
	r = strtol(v, &end, 0);
	if (*end) {
		sv_warn("ignoring %s=%s: not a number", name, v);
		return dflt;
	}
	return r;
}

bool sv_env_switch(_Atomic int *cache, const char *name, bool dflt)
{
	int v = atomic_load_explicit(cache, memory_order_relaxed);

	if (v < 0) {
		v = sv_env_long(name, dflt) != 0;
		atomic_store_explicit(cache, v, memory_order_relaxed);
	}
	return v;
}
