/*
 * unit_copier: the copier, a second core for long copies
 * (src/engine/copier.h), white-box, built from its sources.
 *
 *  - copies of lengths from just under SV_COPY_SPLIT_MIN to 4 MiB, at odd
 *    alignments, with and without the last byte last, arrive whole, and
 *    the copier thread copies parts of them (where two CPUs may be used);
 *  - a thread that sees the last byte of a placement sees every byte of
 *    it, the copier's part included;
 *  - four threads copying at once each get their own bytes;
 *  - a copy whose destination is partly unmapped, in the copier's part or
 *    in the caller's, fails, and the copies after it succeed;
 *  - a forked child copies with a copier of its own, and with
 *    SOFTVERBS_COPIER=0 a process copies alone;
 *  - with more threads spinning than there are CPUs, callers are sent
 *    away to copy alone (the copier would take a CPU from one of them);
 *  - once idle (the process's last device closed), the copier's thread
 *    stops, and the next long copy starts one that copies parts again.
 *
 * All but the last with the copier told never to back off
 * (sv_copier_insist): on a busy machine it would, and copy nothing.
 */
#include "common/fault_guard.h"
#include "engine/copier.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "common/util.h" /* SV_TSAN */

#define MiB (1u << 20)
/* ThreadSanitizer checks each byte the test itself reads: fewer rounds */
#ifdef SV_TSAN
#define ROUNDS 4
#define WATCHED (64u << 10)
#else
#define ROUNDS 40
#define WATCHED MiB
#endif

static bool two_cpus(void)
{
	cpu_set_t s;

	return !sched_getaffinity(0, sizeof(s), &s) && CPU_COUNT(&s) >= 2;
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)((i * 2654435761u + seed) >> 7);
}

/* Copies of many lengths and alignments, each checked, with what lies
 * around the destination untouched. */
static void lengths(void)
{
	static const size_t lens[] = { SV_COPY_SPLIT_MIN - 1, SV_COPY_SPLIT_MIN, 65536 + 7,
				       SV_COPY_WAKE_MIN - 64, SV_COPY_WAKE_MIN, MiB + 13, 4 * MiB };
	size_t room = 4 * MiB + 256;
	uint8_t *src = malloc(room), *dst = malloc(room), *want = malloc(room);

	CHECK(src && dst && want);
	for (int round = 0; round < ROUNDS; round++)
		for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
			size_t so = (size_t)(round * 7 + l) % 64, dof = (size_t)(round * 13 + l * 3) % 64;
			size_t n = lens[l];

			fill(src, room, (uint32_t)(round * 31 + l));
			memset(dst, 0xee, room);
			memset(want, 0xee, room);
			memcpy(want + dof, src + so, n);
			CHECK(sv_copier_copy(dst + dof, src + so, n, round & 1));
			CHECK(memcmp(dst, want, room) == 0);
		}
	free(src);
	free(dst);
	free(want);
}

/* The copier takes parts of back-to-back long copies. */
static void parts_taken(void)
{
	size_t n = MiB;
	uint8_t *src = malloc(n), *dst = malloc(n);
	unsigned long before = sv_copier_parts();

	CHECK(src && dst);
	fill(src, n, 5);
	for (int i = 0; i < 20000 && sv_copier_parts() - before < 50; i++) {
		CHECK(sv_copier_copy(dst, src, n, true));
		if (i % 100 == 99)
			usleep(1000); /* a busy machine's copier gets its turn */
	}
	CHECK(memcmp(dst, src, n) == 0);
	printf("copier: %lu parts\n", sv_copier_parts() - before);
	CHECK(sv_copier_parts() - before >= 50);
	free(src);
	free(dst);
}

/* The threads of this process. */
static int nthreads(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	CHECK(d != NULL);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* sv_copier_idle (the last device closed): the copier's thread is gone, and
 * the next long copy has one again, which takes parts. */
static void idle_and_back(void)
{
	int before = nthreads();

	sv_copier_idle();
	CHECK(nthreads() == before - 1);
	sv_copier_idle(); /* (none running: nothing happens) */
	CHECK(nthreads() == before - 1);
	parts_taken();
	CHECK(nthreads() == before);
	printf("copier: its thread stopped when idle, and came back with the next copy\n");
}

/* The last byte seen means the whole placement is seen. */
static uint8_t *watched;
static size_t watched_len;
static atomic_int acked, torn;

static void *watcher(void *arg)
{
	(void)arg;
	for (int r = 1; r <= ROUNDS * 8; r++) {
		uint8_t v = (uint8_t)(1 + r % 200);

		while (__atomic_load_n(&watched[watched_len - 1], __ATOMIC_ACQUIRE) != v)
			sched_yield();
		for (size_t i = 0; i < watched_len; i++)
			if (__atomic_load_n(&watched[i], __ATOMIC_RELAXED) != v) {
				atomic_fetch_add(&torn, 1);
				break;
			}
		atomic_store(&acked, r);
	}
	return NULL;
}

static void last_byte_last(void)
{
	pthread_t t;
	uint8_t *src = malloc(WATCHED);

	watched_len = WATCHED;
	watched = calloc(1, WATCHED);
	CHECK(src && watched);
	CHECK(pthread_create(&t, NULL, watcher, NULL) == 0);
	for (int r = 1; r <= ROUNDS * 8; r++) {
		memset(src, 1 + r % 200, WATCHED);
		CHECK(sv_copier_copy(watched, src, WATCHED, true));
		while (atomic_load(&acked) != r)
			sched_yield();
	}
	pthread_join(t, NULL);
	CHECK(atomic_load(&torn) == 0);
	free(src);
	free(watched);
}

/* Threads copying at once: one of them has the copier, the others copy
 * alone, and each gets its own bytes. */
static void *copy_loop(void *arg)
{
	uint32_t seed = (uint32_t)(uintptr_t)arg;
	size_t n = SV_COPY_WAKE_MIN + 4096 * seed + seed;
	uint8_t *src = malloc(n), *dst = malloc(n);

	CHECK(src && dst);
	for (int i = 0; i < ROUNDS * 5; i++) {
		fill(src, n, seed * 1000 + (uint32_t)i);
		CHECK(sv_copier_copy(dst, src, n, i & 1));
		CHECK(memcmp(dst, src, n) == 0);
	}
	free(src);
	free(dst);
	return NULL;
}

static void threads(void)
{
	pthread_t t[4];

	for (uintptr_t i = 0; i < 4; i++)
		CHECK(pthread_create(&t[i], NULL, copy_loop, (void *)(i + 1)) == 0);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
}

#ifndef SV_TSAN
/* A hole in the destination: at its start (the copier's part), or at its
 * end (the caller's). */
static void holes(void)
{
	size_t n = 2 * MiB, page = (size_t)sysconf(_SC_PAGESIZE);
	uint8_t *src = malloc(n);

	CHECK(src);
	fill(src, n, 9);
	for (int i = 0; i < 20; i++) {
		uint8_t *dst = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		uint8_t *ok = malloc(n);

		CHECK(dst != MAP_FAILED && ok);
		if (i & 1)
			CHECK(munmap(dst + n - 16 * page, 16 * page) == 0);
		else
			CHECK(munmap(dst, 16 * page) == 0);
		CHECK(!sv_copier_copy(dst, src, n, i & 2));
		/* and the next copy is whole */
		CHECK(sv_copier_copy(ok, src, n, i & 2));
		CHECK(memcmp(ok, src, n) == 0);
		if (i & 1)
			munmap(dst, n - 16 * page);
		else
			munmap(dst + 16 * page, n - 16 * page);
		free(ok);
	}
	free(src);
}
#endif

/* Threads that want every CPU there is, and one more: the copier backs off. */
static atomic_bool spin_stop;

static void *spinner(void *arg)
{
	(void)arg;
	while (!atomic_load_explicit(&spin_stop, memory_order_relaxed))
		;
	return NULL;
}

static void crowded_cpus(void)
{
	cpu_set_t set;
	int n = !sched_getaffinity(0, sizeof(set), &set) ? CPU_COUNT(&set) + 1 : 3;
	pthread_t t[n];
	size_t len = MiB;
	uint8_t *src = malloc(len), *dst = malloc(len);
	unsigned long before = sv_copier_backoffs();

	CHECK(src && dst);
	fill(src, len, 3);
	sv_copier_insist(false);
	for (int i = 0; i < n; i++)
		CHECK(pthread_create(&t[i], NULL, spinner, NULL) == 0);
	usleep(20000);
	/* (it may have backed off already, while the threads started) */
	for (int i = 0; i == 0 || (i < 100000 && sv_copier_backoffs() == before); i++) {
		CHECK(sv_copier_copy(dst, src, len, true));
		if (i % 16 == 15)
			usleep(1000);
	}
	atomic_store(&spin_stop, true);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	CHECK(memcmp(dst, src, len) == 0);
	printf("copier: %lu back-offs beside %d spinning threads\n", sv_copier_backoffs() - before, n);
	CHECK(sv_copier_backoffs() > before);
	sv_copier_insist(true);
	free(src);
	free(dst);
}

/* In a child: copies whole, with or without a copier of its own. */
static void child(bool off)
{
	pid_t pid;
	int status;

	fflush(stdout); /* not written twice by the child */
	pid = fork();

	CHECK(pid >= 0);
	if (pid == 0) {
		if (off)
			setenv("SOFTVERBS_COPIER", "0", 1);
		sv_copier_insist(true);
		unsigned long before = sv_copier_parts();

		lengths();
		if (off)
			CHECK(sv_copier_parts() == before);
		else if (two_cpus())
			parts_taken();
		fflush(stdout);
		_exit(0);
	}
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void)
{
	sv_fault_guard_init();
	/* before anything starts a copier here: the child reads the
	 * switch for the first time */
	child(true);
	sv_copier_insist(true);
	lengths();
	if (two_cpus()) {
		parts_taken();
		idle_and_back();
	} else {
		printf("copier: one CPU, no copier\n");
	}
	last_byte_last();
	threads();
	if (two_cpus())
		crowded_cpus();
#ifndef SV_TSAN
	holes();
	/* (ThreadSanitizer starts no thread in the child of a threaded fork) */
	child(false);
#endif
	printf("unit_copier: ok\n");
	return 0;
}
