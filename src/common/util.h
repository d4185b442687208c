/* Small shared helpers: logging, time, containers, PSN arithmetic. */
#ifndef SV_UTIL_H
#define SV_UTIL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <time.h>

#define SV_CONTAINER_OF(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))
#define SV_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SV_MAX(a, b) ((a) > (b) ? (a) : (b))
#define SV_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* SV_TSAN: built with ThreadSanitizer (gcc says so one way, clang another). */
#if defined(__SANITIZE_THREAD__)
#define SV_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SV_TSAN 1
#endif
#endif

enum sv_log_level { SV_LOG_ERROR, SV_LOG_WARN, SV_LOG_INFO, SV_LOG_DEBUG };

void sv_log(enum sv_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
bool sv_log_enabled(enum sv_log_level level);

/*
 * A warning a peer can provoke at will (a malformed frame, say): at most
 * one line a second per place in the code, so a hostile peer cannot flood
 * the application's stderr; the next line that is written says how many
 * were held back.
 */
struct sv_log_limit {
	_Atomic uint64_t next_ns;
	_Atomic uint32_t held;
};
/* True if this one is written; *held: how many were held back before it. */
bool sv_log_limit_pass(struct sv_log_limit *l, uint32_t *held);
#define sv_warn_limited(...)                                                               \
	do {                                                                               \
		static struct sv_log_limit lim_;                                           \
		uint32_t held_;                                                            \
		if (sv_log_enabled(SV_LOG_WARN) && sv_log_limit_pass(&lim_, &held_)) {     \
			if (held_)                                                         \
				sv_log(SV_LOG_WARN, "(%u more like the next held back)", held_); \
			sv_log(SV_LOG_WARN, __VA_ARGS__);                                  \
		}                                                                          \
	} while (0)

#define sv_err(...) sv_log(SV_LOG_ERROR, __VA_ARGS__)
#define sv_warn(...) sv_log(SV_LOG_WARN, __VA_ARGS__)
#define sv_info(...) sv_log(SV_LOG_INFO, __VA_ARGS__)
#define sv_dbg(...)                                   \
	do {                                          \
		if (sv_log_enabled(SV_LOG_DEBUG))     \
			sv_log(SV_LOG_DEBUG, __VA_ARGS__); \
	} while (0)

static inline uint64_t sv_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* PSNs are 24-bit sequence numbers that wrap; compare them as such. */
#define SV_PSN_MASK 0xffffffu
static inline uint32_t sv_psn_add(uint32_t psn, uint32_t n)
{
	return (psn + n) & SV_PSN_MASK;
}
/* <0 if a is before b, 0 if equal, >0 if after (within half the space). */
static inline int32_t sv_psn_cmp(uint32_t a, uint32_t b)
{
	return (int32_t)((a - b) << 8);
}

/* A random 32-bit value from getrandom(); never fails (falls back to time). */
uint32_t sv_random_u32(void);

/* Configuration from the environment (documented in README.md). */
const char *sv_env_str(const char *name, const char *dflt);
long sv_env_long(const char *name, long dflt);
/* A switch read once: name's number, not 0 meaning on, dflt when unset.
 * *cache (static, initially -1) keeps it; threads that ask first at once
 * each compute the same answer. */
bool sv_env_switch(_Atomic int *cache, const char *name, bool dflt);

/* Intrusive doubly-linked list. */
struct sv_list {
	struct sv_list *next, *prev;
};
static inline void sv_list_init(struct sv_list *l)
{
	l->next = l->prev = l;
}
static inline bool sv_list_empty(const struct sv_list *l)
{
	return l->next == l;
}
static inline void sv_list_add_tail(struct sv_list *head, struct sv_list *n)
{
	n->prev = head->prev;
	n->next = head;
	head->prev->next = n;
	head->prev = n;
}
static inline void sv_list_del(struct sv_list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n->prev = n;
}
static inline bool sv_list_linked(const struct sv_list *n)
{
	return n->next != n;
}

/*
 * A full (sequentially consistent) fence.  gcc refuses atomic_thread_fence
 * under ThreadSanitizer, which does not model fences: there a seq_cst
 * read-modify-write of one shared word stands for it (a total order all
 * such fences take part in, which ThreadSanitizer does see).
 */
#ifdef SV_TSAN
#define SV_FENCE_BY_RMW 1
#endif
#ifdef SV_FENCE_BY_RMW
extern _Atomic unsigned sv_fence_word;
static inline void sv_fence(void)
{
	atomic_fetch_add_explicit(&sv_fence_word, 0, memory_order_seq_cst);
}
#else
static inline void sv_fence(void)
{
	atomic_thread_fence(memory_order_seq_cst);
}
#endif

/*
 * Ask for the line at p to be brought in owned, for a write soon after.
 * A line another core last wrote, read and then written, otherwise comes
 * over twice: shared for the load, then again to be owned for the store.
 * (gcc emits PREFETCHW only with -mprfchw; every x86-64 CPU decodes it,
 * those without it as a no-op.)
 */
static inline void sv_prefetch_for_write(const void *p)
{
#if defined(__x86_64__)
	__asm__ volatile("prefetchw %0" : : "m"(*(const volatile char *)p));
#else
	__builtin_prefetch(p, 1, 3);
#endif
}

#endif
