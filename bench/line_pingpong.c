/*
 * softverbs-bench-line: how long one cache line takes to go from one CPU to
 * another on this machine, the unit a same-host latency is made of.
 *
 * Two threads hand a counter back and forth, each waiting for the other's
 * value before it writes its own: every hand-over is one transfer of the
 * line.  Prints the one-way time in ns (the median of five rounds of
 * 200,000 round trips).  The threads are not pinned: they run where the
 * scheduler puts them, as the benchmarks' processes do.  On a VM the host
 * may move the two vCPUs between near and far places within minutes
 * (docs/PERFORMANCE.md, "The VM under the figures"), so run-shm.sh takes
 * this before and after its measurements.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ROUNDS 5
#define TRIPS 200000L

static _Alignas(64) _Atomic long line;

static void *other(void *arg)
{
	long n = *(long *)arg;

	for (long i = 1; i <= n; i++) {
		while (atomic_load_explicit(&line, memory_order_acquire) != 2 * i - 1)
			;
		atomic_store_explicit(&line, 2 * i, memory_order_release);
	}
	return NULL;
}

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(void)
{
	double one_way[ROUNDS];
	long n = TRIPS;

	for (int r = 0; r < ROUNDS; r++) {
		pthread_t t;
		double t0;

		atomic_store(&line, 0);
		if (pthread_create(&t, NULL, other, &n)) {
			perror("pthread_create");
			return 1;
		}
		t0 = now_ns();
		for (long i = 1; i <= n; i++) {
			atomic_store_explicit(&line, 2 * i - 1, memory_order_release);
			while (atomic_load_explicit(&line, memory_order_acquire) != 2 * i)
				;
		}
		one_way[r] = (now_ns() - t0) / (double)n / 2;
		pthread_join(t, NULL);
	}
	qsort(one_way, ROUNDS, sizeof(one_way[0]), cmp);
	printf("%.1f\n", one_way[ROUNDS / 2]);
	return 0;
}
