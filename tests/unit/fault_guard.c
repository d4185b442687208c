/*
 * unit_fault_guard: guarded copies of application memory
 * (src/common/fault_guard.h), white-box, built from their sources.
 *
 *  - sv_place_guarded and sv_copy_guarded of every length from 0 to 80
 *    bytes (the short ones through the routine the fault handler knows by
 *    address, the longer ones through memcpy under a jump buffer), at
 *    every alignment of source and destination from 0 to 8: the bytes of
 *    memcpy, nothing around them written;
 *  - each length up to 80 into and out of memory that ends in an unmapped
 *    page (SIGSEGV), at every offset that crosses into it and some that do
 *    not: false exactly when a byte lies beyond the end, and the process
 *    lives on; the same past the end of a file mapping (SIGBUS);
 *  - a thread that sees the last byte of a placement (8 to 64 bytes, the
 *    short routine) sees every byte before it (20,000 placements, or
 *    those of 2 s but at least 500 on a busy machine).
 * Under ThreadSanitizer only the first (faults cannot be survived there,
 * and the short routine is not built).
 */
#include "common/fault_guard.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "common/util.h" /* SV_TSAN */

#define MAXLEN 80
#define AROUND 16 /* bytes either side that must stay as they were */

static void whole_copies(void)
{
	uint8_t src[MAXLEN + 2 * AROUND], dst[MAXLEN + 2 * AROUND], want[sizeof(dst)];

	for (size_t len = 0; len <= MAXLEN; len++)
		for (int so = 0; so <= 8; so++)
			for (int doff = 0; doff <= 8; doff++)
				for (int place = 0; place < 2; place++) {
					for (size_t i = 0; i < sizeof(dst); i++) {
						src[i] = (uint8_t)(i * 7 + len + (size_t)so + 1);
						dst[i] = want[i] = (uint8_t)(0xa5 ^ i);
					}
					memcpy(want + AROUND + doff, src + so, len);
					CHECK(place ? sv_place_guarded(dst + AROUND + doff, src + so, len)
						    : sv_copy_guarded(dst + AROUND + doff, src + so, len));
					if (memcmp(dst, want, sizeof(dst))) {
						fprintf(stderr, "%s of %zu bytes (source +%d, destination +%d) "
								"differs from memcpy\n",
							place ? "sv_place_guarded" : "sv_copy_guarded", len,
							so, doff);
						CHECK(0);
					}
				}
	printf("unit_fault_guard: copies of 0 to %d bytes at every alignment equal memcpy's\n",
	       MAXLEN);
}

/* p: a readable and writable page followed by one that faults (why). */
static void holes(uint8_t *p, const char *why)
{
	uint8_t buf[MAXLEN];

	for (size_t len = 1; len <= MAXLEN; len++)
		for (size_t k = len > 4 ? len - 4 : 0; k <= len + 2; k++) {
			uint8_t *at = p + 4096 - k;
			bool fits = k >= len;

			memset(buf, 0x5c, sizeof(buf));
			CHECK(sv_place_guarded(at, buf, len) == fits);
			CHECK(sv_copy_guarded(buf, at, len) == fits);
			if (fits)
				CHECK(!memcmp(buf, at, len));
		}
	/* and the next one, whole, succeeds */
	memset(buf, 0x3e, sizeof(buf));
	CHECK(sv_place_guarded(p, buf, 8) && !memcmp(p, buf, 8));
	printf("unit_fault_guard: copies of 1 to %d bytes crossing into %s fail, the others "
	       "succeed\n",
	       MAXLEN, why);
}

static void unmapped(void)
{
	uint8_t *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	CHECK(p != MAP_FAILED);
	CHECK(!munmap(p + 4096, 4096));
	holes(p, "an unmapped page (SIGSEGV)");
	CHECK(!munmap(p, 4096));
}

static void past_file_end(void)
{
	int fd = memfd_create("unit_fault_guard", 0);
	uint8_t *p;

	CHECK(fd >= 0);
	CHECK(!ftruncate(fd, 8192));
	p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(p != MAP_FAILED);
	CHECK(!ftruncate(fd, 4096));
	holes(p, "a page past a file's end (SIGBUS)");
	CHECK(!munmap(p, 8192));
	close(fd);
}

/* ---- the last byte last ---- */

/* Rounds, each a hand-over between the two threads: up to ROUNDS, or as
 * many as ROUNDS_MS allow but at least MIN_ROUNDS (on a busy machine a
 * hand-over can take a time slice: the part's length must not grow with
 * the load, only its count shrink) */
#define ROUNDS 20000
#define MIN_ROUNDS 500
#define ROUNDS_MS 2000

static uint8_t target[64] __attribute__((aligned(64)));
static atomic_int seen_bad, rounds_seen, rounds_done;

static void *watcher(void *arg)
{
	(void)arg;
	for (int r = 1;; r++) {
		uint8_t mark = (uint8_t)(r & 0x7f) | 0x80;
		size_t len = 8 + (size_t)(r % 57);

		/* wait for round r's last byte, then look at the rest; or the
		 * placer stopped before round r */
		for (unsigned spin = 0;
		     __atomic_load_n(&target[len - 1], __ATOMIC_ACQUIRE) != mark; spin++) {
			int done = atomic_load(&rounds_done);

			if (done && r > done)
				return NULL;
			if (spin % 64 == 63)
				sched_yield(); /* one CPU for the two of us, maybe */
		}
		for (size_t i = 0; i + 1 < len; i++)
			if (__atomic_load_n(&target[i], __ATOMIC_RELAXED) != mark)
				atomic_fetch_add(&seen_bad, 1);
		atomic_store(&rounds_seen, r);
	}
	return NULL;
}

static void last_byte_last(void)
{
	struct timespec t0, now;
	uint8_t src[64];
	pthread_t t;
	int r;

	CHECK(!clock_gettime(CLOCK_MONOTONIC, &t0));
	CHECK(!pthread_create(&t, NULL, watcher, NULL));
	for (r = 1; r <= ROUNDS; r++) {
		uint8_t mark = (uint8_t)(r & 0x7f) | 0x80;
		size_t len = 8 + (size_t)(r % 57);

		/* the watcher is done with round r - 1: clear, then place */
		for (unsigned spin = 0; atomic_load(&rounds_seen) != r - 1; spin++)
			if (spin % 64 == 63)
				sched_yield();
		for (size_t i = 0; i < sizeof(target); i++)
			__atomic_store_n(&target[i], 0, __ATOMIC_RELAXED);
		memset(src, mark, sizeof(src));
		CHECK(sv_place_guarded(target, src, len));
		CHECK(!clock_gettime(CLOCK_MONOTONIC, &now));
		if (r >= MIN_ROUNDS && (now.tv_sec - t0.tv_sec) * 1000 +
						(now.tv_nsec - t0.tv_nsec) / 1000000 >= ROUNDS_MS)
			break;
	}
	atomic_store(&rounds_done, r > ROUNDS ? ROUNDS : r);
	CHECK(!pthread_join(t, NULL));
	CHECK(atomic_load(&rounds_seen) == atomic_load(&rounds_done));
	CHECK(atomic_load(&seen_bad) == 0);
	printf("unit_fault_guard: %d placements of 8 to 64 bytes, each seen whole once its last "
	       "byte was\n",
	       atomic_load(&rounds_done));
}

int main(void)
{
	alarm(100);
	sv_fault_guard_init();
	whole_copies();
#ifndef SV_TSAN
	unmapped();
	past_file_end();
	last_byte_last();
#else
	/* a fault cannot be survived there (fault_guard.h), and the short
	 * routine is not used: memcpy's plain stores, watched, are a race */
	(void)unmapped;
	(void)past_file_end;
	(void)last_byte_last;
#endif
	return 0;
}
