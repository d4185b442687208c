/*
 * bench/memcpy_bw.c: the memcpy ceiling for bench/run-shm.sh.
 *
 *   softverbs-bench-memcpy [-t SECONDS] [-w BYTES] SIZE...
 *
 * For each SIZE it times glibc's memcpy() from one buffer into another, in
 * one thread, and prints one CSV line "size_bytes,memcpy_MBps,memcpy_hot_MBps"
 * (MB/s = 10^6 bytes/s, bytes copied per second).  Two figures, because the
 * answer depends on where the bytes are:
 *
 *   memcpy      rotating: SIZE-byte copies walk through a source and a
 *               destination area of WS/2 bytes each (WS: -w, default twice the
 *               last-level cache, at most 256 MiB), copy i going from slot i
 *               to slot i of the other area, so every copy reads and writes
 *               bytes that left the caches since their previous use.  This is
 *               the ceiling for moving data an application has just produced
 *               into memory it has not touched, and the figure the brief's
 *               "0.9 x memcpy" target is read against.  With fewer than two
 *               slots per area (SIZE > WS/4) there are still two slots.
 *   memcpy_hot  one source and one destination buffer of SIZE bytes, copied
 *               again and again, as perftest and ucx_perftest do with their
 *               single message buffer: cache-resident up to the cache size,
 *               so the upper bound of what a one-copy transport can show in
 *               those benchmarks.
 *
 * Each figure is the median of 5 timed rounds of -t/5 seconds (default 1 s in
 * all, per size and mode), after one untimed round that faults the pages in
 * and warms the branch predictors: the median, because the machine this runs
 * on is shared and one round may lose the CPU.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 5
#define MAX_WS ((size_t)256 << 20)
#define DEFAULT_WS ((size_t)64 << 20)   /* when the cache size is unknown */

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * Copies `size` bytes `n` times, slot i of src to slot i of dst, i going
 * round `slots` slots.  The empty asm that takes dst and clobbers memory
 * makes the compiler keep every copy (it could otherwise drop copies whose
 * result is overwritten before it is read).
 */
static void copy_n(char *dst, const char *src, size_t size, size_t slots,
		   uint64_t n)
{
	size_t slot = 0;

	for (uint64_t i = 0; i < n; i++) {
		memcpy(dst + slot * size, src + slot * size, size);
		__asm__ volatile("" : : "r"(dst) : "memory");
		if (++slot == slots)
			slot = 0;
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/*
 * Bytes per second of copy_n over `slots` slots, the median of ROUNDS rounds
 * of about `secs` / ROUNDS seconds each.  The number of copies per round is
 * found by doubling a batch until it lasts a tenth of a round, so the clock is
 * read rarely even for 8-byte copies.
 */
static double measure(char *dst, const char *src, size_t size, size_t slots,
		      double secs)
{
	double round_secs = secs / ROUNDS, rates[ROUNDS];
	uint64_t batch = 1;
	double t;

	/* untimed: faults the pages in, warms the caches as each mode wants */
	copy_n(dst, src, size, slots, slots > 1 ? slots : 16);
	for (;;) {
		t = now();
		copy_n(dst, src, size, slots, batch);
		t = now() - t;
		if (t >= round_secs / 10 || batch >= ((uint64_t)1 << 40))
			break;
		batch *= 2;
	}
	for (int r = 0; r < ROUNDS; r++) {
		uint64_t copies = 0;
		double start = now();

		do {
			copy_n(dst, src, size, slots, batch);
			copies += batch;
			t = now() - start;
		} while (t < round_secs);
		rates[r] = (double)copies * (double)size / t;
	}
	qsort(rates, ROUNDS, sizeof(rates[0]), cmp_double);
	return rates[ROUNDS / 2];
}

/* Twice the largest cache the C library reports, within [DEFAULT_WS, MAX_WS]. */
static size_t default_ws(void)
{
	long llc = 0;

#ifdef _SC_LEVEL3_CACHE_SIZE
	llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
#ifdef _SC_LEVEL2_CACHE_SIZE
	if (llc <= 0)
		llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
	if (llc <= 0)
		return DEFAULT_WS;
	if ((size_t)llc * 2 > MAX_WS)
		return MAX_WS;
	return (size_t)llc * 2 < DEFAULT_WS ? DEFAULT_WS : (size_t)llc * 2;
}

static void *map(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		fprintf(stderr, "memcpy_bw: mmap %zu bytes: %s\n", bytes,
			strerror(errno));
		exit(1);
	}
	/* touched now, so no page fault lands in a timed round */
	memset(p, 0x5a, bytes);
	return p;
}

static int usage(void)
{
	fprintf(stderr, "usage: softverbs-bench-memcpy [-t SECONDS] [-w BYTES] SIZE...\n");
	return 2;
}

int main(int argc, char **argv)
{
	double secs = 1.0;
	size_t ws = 0, max_size = 0;
	int opt;

	while ((opt = getopt(argc, argv, "t:w:")) != -1) {
		switch (opt) {
		case 't':
			secs = strtod(optarg, NULL);
			break;
		case 'w':
			ws = strtoull(optarg, NULL, 0);
			break;
		default:
			return usage();
		}
	}
	if (optind >= argc || !(secs > 0))
		return usage();
	if (ws == 0)
		ws = default_ws();
	for (int i = optind; i < argc; i++) {
		size_t size = strtoull(argv[i], NULL, 0);

		if (size == 0)
			return usage();
		if (size > max_size)
			max_size = size;
	}

	/* each area holds WS/2 bytes, and at least two slots of the largest size */
	size_t area = ws / 2 > 2 * max_size ? ws / 2 : 2 * max_size;
	char *src = map(area), *dst = map(area);

	printf("# working set %zu bytes (two areas of %zu), %.2f s per figure\n",
	       2 * area, area, secs);
	printf("size_bytes,memcpy_MBps,memcpy_hot_MBps\n");
	for (int i = optind; i < argc; i++) {
		size_t size = strtoull(argv[i], NULL, 0);
		size_t slots = area / size;
		double cold, hot;

		if (slots < 2)
			slots = 2;
		cold = measure(dst, src, size, slots, secs);
		hot = measure(dst, src, size, 1, secs);
		printf("%zu,%.2f,%.2f\n", size, cold / 1e6, hot / 1e6);
		fflush(stdout);
	}
	munmap(src, area);
	munmap(dst, area);
	return 0;
}
