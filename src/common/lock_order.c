/* The lock-order checker (lock_order.h), built with SV_LOCK_ORDER only. */
#include "common/lock_order.h"

#ifdef SV_LOCK_ORDER

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const level_lock[SV_LOCK_NLEVELS] = {
#define SV_LOCK_NAME_(l, name, flags) name,
	SV_LOCK_LEVELS(SV_LOCK_NAME_)
#undef SV_LOCK_NAME_
};
static const char *const level_name[SV_LOCK_NLEVELS] = {
#define SV_LOCK_LNAME_(l, name, flags) #l,
	SV_LOCK_LEVELS(SV_LOCK_LNAME_)
#undef SV_LOCK_LNAME_
};
static const unsigned char level_flags[SV_LOCK_NLEVELS] = {
#define SV_LOCK_FLAGS_(l, name, flags) flags,
	SV_LOCK_LEVELS(SV_LOCK_FLAGS_)
#undef SV_LOCK_FLAGS_
};

#define SV_LOCK_DEPTH 32

struct held {
	const void *lock;
	const char *file;
	int line;
	unsigned char level;
	char kind;
};

/* what this thread holds, in the order taken (entries may be let go out of
 * order: the stack closes over them) */
static __thread struct held stack[SV_LOCK_DEPTH];
static __thread unsigned depth;
static __thread const void *nest_ok; /* sv_lock_nest_allow */

static const char *kind_name(char kind)
{
	return kind == 'r' ? "read" : kind == 'w' ? "write" : "mutex";
}

static void describe(char *buf, size_t len, const void *lock, unsigned level, char kind)
{
	snprintf(buf, len, "%s %p (%s, level %u %s)",
		 level < SV_LOCK_NLEVELS ? level_lock[level] : "?", lock, kind_name(kind), level,
		 level < SV_LOCK_NLEVELS ? level_name[level] : "?");
}

__attribute__((noreturn, cold)) static void fail(const char *why, const void *lock, unsigned level,
						char kind, const char *file, int line,
						const struct held *h)
{
	char a[160], b[160];

	describe(a, sizeof(a), lock, level, kind);
	fprintf(stderr, "softverbs: lock order violated (pid %d): %s: %s at %s:%d", (int)getpid(),
		why, a, file, line);
	if (h) {
		describe(b, sizeof(b), h->lock, h->level, h->kind);
		fprintf(stderr, " while holding %s taken at %s:%d", b, h->file, h->line);
	}
	fprintf(stderr, "\n");
	for (unsigned i = 0; i < depth; i++) {
		describe(b, sizeof(b), stack[i].lock, stack[i].level, stack[i].kind);
		fprintf(stderr, "softverbs:   held: %s at %s:%d\n", b, stack[i].file, stack[i].line);
	}
	fflush(stderr);
	abort();
}

bool sv_lock_holds_read(const void *lock)
{
	for (unsigned i = 0; i < depth; i++)
		if (stack[i].lock == lock && stack[i].kind == 'r')
			return true;
	return false;
}

bool sv_lock_level_held(unsigned level)
{
	for (unsigned i = 0; i < depth; i++)
		if (stack[i].level == level)
			return true;
	return false;
}

void sv_lock_check(const void *lock, unsigned level, char kind, const char *file, int line)
{
	const struct held *top = NULL;

	if (level >= SV_LOCK_NLEVELS)
		fail("no such level", lock, level, kind, file, line, NULL);
	/* a read lock held already nests (arwlock.h) */
	if (kind == 'r' && sv_lock_holds_read(lock))
		return;
	for (unsigned i = 0; i < depth; i++) {
		if (stack[i].lock == lock)
			fail("taken again by its holder", lock, level, kind, file, line, &stack[i]);
		if (!top || stack[i].level > top->level ||
		    (stack[i].level == top->level && stack[i].lock > top->lock))
			top = &stack[i];
	}
	if (!top || level > top->level)
		return;
	if (level == top->level && (level_flags[level] & SV_LF_NEST) && lock > top->lock)
		return;
	if (level == top->level && nest_ok && nest_ok == stack[depth - 1].lock && nest_ok == top->lock)
		return;
	fail(level == top->level ? "a second lock of one level" : "taken below a lock held", lock,
	     level, kind, file, line, top);
}

void sv_lock_push(const void *lock, unsigned level, char kind, const char *file, int line)
{
	if (depth == SV_LOCK_DEPTH)
		fail("too many locks held", lock, level, kind, file, line, NULL);
	stack[depth++] = (struct held){ lock, file, line, (unsigned char)level, kind };
}

/* lock's entry off the stack, the last taken first (a nested read lock
 * lets go of its own); false if it is not there */
static bool drop(const void *lock)
{
	for (unsigned i = depth; i-- > 0;) {
		if (stack[i].lock != lock)
			continue;
		memmove(&stack[i], &stack[i + 1], (depth - i - 1) * sizeof(stack[0]));
		depth--;
		return true;
	}
	return false;
}

void sv_lock_pop(const void *lock, const char *file, int line)
{
	if (!drop(lock))
		fail("let go of, not held", lock, SV_LOCK_NLEVELS, 'm', file, line, NULL);
}

void sv_lock_forget(const void *lock)
{
	(void)drop(lock);
}

void sv_lock_nest_allow(const void *outer)
{
	nest_ok = outer;
}

void sv_lock_assert_may_block_at(const char *what, const char *file, int line)
{
	for (unsigned i = 0; i < depth; i++) {
		if (!(level_flags[stack[i].level] & SV_LF_NOSYS))
			continue;
		fprintf(stderr,
			"softverbs: lock order violated (pid %d): %s at %s:%d while holding %s "
			"(level %u %s) taken at %s:%d, under which nothing may enter the kernel\n",
			(int)getpid(), what, file, line, level_lock[stack[i].level], stack[i].level,
			level_name[stack[i].level], stack[i].file, stack[i].line);
		fflush(stderr);
		abort();
	}
}

#else

typedef int sv_lock_order_unused; /* ISO C: no empty translation unit */

#endif
