/*
 * The copier (copier.h): a second core for long copies.
 *
 * A NIC moves the bytes of a WRITE or READ with DMA engines of its own.
 * The direct executor (direct_exec.c) moves them with the core of the
 * thread that posts, and one core's memcpy is about half of what two do
 * on memory in cache (PERFORMANCE.md, "A second core for long copies").
 * So a copy of SV_COPY_SPLIT_MIN bytes or more is offered to the copier
 * thread in chunks (eight or so, from SV_COPY_CHUNK_MIN to
 * SV_COPY_CHUNK_MAX bytes, each beginning on a cache line of the
 * destination), which the copier takes one at a time from the front and
 * the caller from the back, and the caller returns once every chunk is
 * copied.  The caller never waits for the copier to arrive: one that
 * comes late takes fewer chunks, or none; and at the end the caller waits
 * at most for the chunk the copier is copying.
 *
 * One copier per process, started by the first long copy where the
 * process may run on two CPUs or more (SOFTVERBS_COPIER=0: never).  After
 * a copy it spins for SV_COPY_SPIN_NS, waiting for the next, then sleeps on
 * a futex; a caller that finds it asleep wakes it (one system call per
 * burst of copies), and makes an offer only of a copy long enough to pay
 * for the wake-up (SV_COPY_WAKE_MIN); a shorter copy wakes it only when
 * it follows the one before closely enough to keep it busy.  There is one
 * offer at a time: a second caller meanwhile copies alone.  The copier
 * helps only with a CPU of its own (back_off, crowded).
 *
 * A fault in a chunk of the copier's (a peer's memfd cut short under it)
 * is reported to the caller, whose copy then fails as its own would.
 */
#include "engine/copier.h"
#include "common/fault_guard.h"
#include "common/util.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/*
 * The claim word: the offer's generation, and the chunks not taken yet,
 * [lo, hi).  The copier takes them from the front, the caller from the
 * back: when both go at one pace each copies the same half of a buffer
 * copied again and again, which stays in its own core's cache.  Closed:
 * lo > hi, no chunk to take.
 */
#define CLAIM_GEN(w) ((uint32_t)((w) >> 32))
#define CLAIM_LO(w) ((uint32_t)((w) >> 16) & 0xffffu)
#define CLAIM_HI(w) ((uint32_t)(w)&0xffffu)
#define CLAIM_CLOSED 0xffff0000u
#define CLAIM_MAX_CHUNKS 0xfffeu

enum copier_run {
	COPIER_UNSTARTED,
	COPIER_STARTING,
	COPIER_RUNNING,
	COPIER_NEVER, /* one CPU, switched off, no thread to be had, or unloaded */
};

static struct {
	_Atomic int run;         /* enum copier_run */
	atomic_bool stop;
	pthread_t thread;
	pid_t pid;               /* the process that started it */
	atomic_bool owned;       /* a caller holds the offer below */
	/* the offer: chunks of [dst, dst+len), taken one at a time by
	 * compare-and-swap on claim, by the caller and the copier */
	_Atomic uint64_t claim;
	uint8_t *dst;            /* written before claim opens the offer */
	const uint8_t *src;
	size_t len, chunk;
	uint32_t nchunks;
	_Atomic uint32_t active; /* the copier is in the offer */
	atomic_bool failed;      /* a chunk of the copier's could not be copied */
	_Atomic uint32_t asleep; /* the copier waits on bell */
	_Atomic uint32_t bell;   /* futex word: moves to wake it */
	atomic_ulong parts;      /* chunks copied by it */
	_Atomic uint64_t last_ns; /* when the last long copy began */
	_Atomic uint64_t backoff_until; /* callers copy alone until then */
	_Atomic uint64_t backoff_ns;    /* the last back-off's length */
	int ncpu;                /* CPUs the process may use, when it started */
	int loadfd;              /* /proc/loadavg, or -1 */
	_Atomic uint64_t crowd_at; /* when a caller last asked crowded() */
	atomic_bool crowd;         /* and what it said */
	atomic_ulong backoffs;   /* back-offs so far */
	atomic_bool insist;      /* never back off (unit_copier) */
} cp = { .claim = CLAIM_CLOSED, .loadfd = -1 };

static void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

static void ring(void)
{
	if (atomic_exchange(&cp.asleep, 0)) {
		atomic_fetch_add(&cp.bell, 1);
		syscall(SYS_futex, &cp.bell, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	}
}

/* Where chunk k of the offer begins: on a cache line of dst (the two
 * cores never write one line), the first at 0, the last's end at len. */
static size_t chunk_at(uint32_t k)
{
	uintptr_t d = (uintptr_t)cp.dst;

	if (k == 0)
		return 0;
	if (k >= cp.nchunks)
		return cp.len;
	return (size_t)(((d + (uintptr_t)k * cp.chunk) & ~(uintptr_t)63) - d);
}

/* A chunk of the offer of generation gen taken, from its front or its
 * back: its index, or -1 when none is left (or the offer is over). */
static int64_t take_chunk(uint32_t gen, bool front)
{
	uint64_t w = atomic_load(&cp.claim);

	while (CLAIM_GEN(w) == gen && CLAIM_LO(w) < CLAIM_HI(w))
		if (atomic_compare_exchange_weak(&cp.claim, &w, front ? w + (1u << 16) : w - 1))
			return front ? CLAIM_LO(w) : CLAIM_HI(w) - 1;
	return -1;
}

static bool copy_chunk(uint32_t k)
{
	size_t a = chunk_at(k), b = chunk_at(k + 1);

	return sv_copy_guarded(cp.dst + a, cp.src + a, b - a);
}

/*
 * The copier in an offer (gen): it counts itself in before it looks, and
 * out when it has no chunk left, so that the caller, which closes the
 * offer and then waits for it to be out, never returns while a chunk of
 * its is being copied.  The offer's fields are read only after a chunk is
 * taken: while one is, the offer is open and its caller waits.
 */
static void join_offer(uint32_t gen)
{
	int64_t k;

	atomic_fetch_add(&cp.active, 1);
	while ((k = take_chunk(gen, true)) >= 0) {
		if (!copy_chunk((uint32_t)k))
			atomic_store_explicit(&cp.failed, true, memory_order_relaxed);
		atomic_fetch_add_explicit(&cp.parts, 1, memory_order_relaxed);
	}
	atomic_fetch_sub_explicit(&cp.active, 1, memory_order_release);
}

/*
 * The copier lost its CPU: the process's other threads, or others, want
 * every CPU there is.  A chunk it then takes keeps its caller waiting, and
 * its spinning takes a CPU from a thread with work (the receiver that
 * polls, in a SEND stream between two processes of a 2-CPU host): callers
 * copy alone for a while, twice as long each time it happens again soon
 * (within SV_COPY_BACKOFF_MAX_NS of the last back-off's end).
 */
static void back_off(uint64_t now)
{
	uint64_t len = atomic_load_explicit(&cp.backoff_ns, memory_order_relaxed);
	uint64_t last = atomic_load_explicit(&cp.backoff_until, memory_order_relaxed);

	if (atomic_load_explicit(&cp.insist, memory_order_relaxed))
		return;
	atomic_fetch_add_explicit(&cp.backoffs, 1, memory_order_relaxed);
	/* again soon after the last one ended: longer */
	len = len && now - last < SV_COPY_BACKOFF_MAX_NS ? SV_MIN(2 * len, SV_COPY_BACKOFF_MAX_NS)
							 : SV_COPY_BACKOFF_MIN_NS;
	atomic_store_explicit(&cp.backoff_ns, len, memory_order_relaxed);
	atomic_store_explicit(&cp.backoff_until, now + len, memory_order_relaxed);
}

/*
 * More threads of the host are runnable than there are CPUs for this
 * process: the kernel's count (the fourth field of /proc/loadavg), which
 * includes the copier and its caller.  Asked before the copier is woken
 * and when it wakes, so that it does not first take a CPU from a thread
 * with work for a time slice before it finds it has lost its own.
 */
static bool crowded(int fd)
{
	char buf[128], *p = buf;
	ssize_t n = fd >= 0 ? pread(fd, buf, sizeof(buf) - 1, 0) : -1;

	if (n <= 0)
		return false;
	buf[n] = 0;
	for (int i = 0; i < 3 && p; i++)
		if ((p = strchr(p, ' ')))
			p++;
	return p && strtol(p, NULL, 10) > cp.ncpu;
}

/* An offer with chunks left, and not one it has been in. */
static bool new_offer(uint32_t done_gen)
{
	uint64_t w = atomic_load(&cp.claim);

	return CLAIM_LO(w) < CLAIM_HI(w) && CLAIM_GEN(w) != done_gen;
}

/* crowded(), asked by a caller before it wakes the copier and by the
 * copier when it wakes, at most once per SV_COPY_CROWD_NS. */
static bool crowded_now(uint64_t now)
{
	bool c;

	if (now - atomic_load_explicit(&cp.crowd_at, memory_order_relaxed) < SV_COPY_CROWD_NS)
		return atomic_load_explicit(&cp.crowd, memory_order_relaxed);
	atomic_store_explicit(&cp.crowd_at, now, memory_order_relaxed);
	c = crowded(cp.loadfd) && !atomic_load_explicit(&cp.insist, memory_order_relaxed);
	atomic_store_explicit(&cp.crowd, c, memory_order_relaxed);
	return c;
}

static void *copier_main(void *arg)
{
	uint64_t idle_since = sv_now_ns(), seen = idle_since, now;
	bool woken = true, away = false;
	uint32_t done_gen = 0; /* the last offer it has been in */
	unsigned spins = 0;

	(void)arg;
	while (!atomic_load_explicit(&cp.stop, memory_order_relaxed)) {
		uint32_t b;

		if (woken) {
			woken = false;
			/* (its waker has just looked, mostly: then no second read) */
			now = sv_now_ns();
			if (crowded_now(now)) {
				back_off(now);
				away = true;
				goto sleep;
			}
		}
		if (new_offer(done_gen)) {
			done_gen = CLAIM_GEN(atomic_load(&cp.claim));
			join_offer(done_gen);
			idle_since = seen = sv_now_ns();
			continue;
		}
		relax();
		/* the clock every few spins: a read costs tens of nanoseconds */
		if (++spins % 64)
			continue;
		now = sv_now_ns();
		if (now - seen > SV_COPY_PREEMPT_NS) {
			back_off(now); /* those spins took far too long */
			away = !atomic_load_explicit(&cp.insist, memory_order_relaxed);
		} else if (now - idle_since < SV_COPY_SPIN_NS) {
			seen = now;
			continue;
		}
sleep:
		/* asleep, as a caller must see before it offers (both seq_cst:
		 * either the caller sees asleep, or this sees the offer).  Sent
		 * away, it leaves an offer to its caller, who makes no other
		 * until the back-off is over and then wakes it */
		b = atomic_load(&cp.bell);
		atomic_store(&cp.asleep, 1);
		if ((away || !new_offer(done_gen)) && !atomic_load(&cp.stop))
			syscall(SYS_futex, &cp.bell, FUTEX_WAIT_PRIVATE, b, NULL, NULL, 0);
		atomic_store(&cp.asleep, 0);
		idle_since = seen = sv_now_ns();
		woken = true;
		away = false;
	}
	return NULL;
}

/* Can it take chunks: started, or started now? */
static bool copier_ready(void)
{
	static _Atomic int enabled = -1;
	int r = atomic_load_explicit(&cp.run, memory_order_acquire);
	sigset_t all, old;
	cpu_set_t cpus;
	int err;

	if (r == COPIER_RUNNING)
		return true;
	if (r != COPIER_UNSTARTED || !atomic_compare_exchange_strong(&cp.run, &r, COPIER_STARTING))
		return false;
	if (!sv_env_switch(&enabled, "SOFTVERBS_COPIER", true) ||
	    sched_getaffinity(0, sizeof(cpus), &cpus) || (cp.ncpu = CPU_COUNT(&cpus)) < 2) {
		atomic_store(&cp.run, COPIER_NEVER);
		return false;
	}
	/* no signal of the program's is delivered to it; the faults of its
	 * own copies are (a fault blocked kills the process) */
	sigfillset(&all);
	sigdelset(&all, SIGSEGV);
	sigdelset(&all, SIGBUS);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	cp.pid = getpid();
	if (cp.loadfd < 0)
		cp.loadfd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
	err = pthread_create(&cp.thread, NULL, copier_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		atomic_store(&cp.run, COPIER_NEVER);
		return false;
	}
	atomic_store_explicit(&cp.run, COPIER_RUNNING, memory_order_release);
	return true;
}

/* One core's copy, the last byte last when asked. */
static bool copy_alone(void *dst, const void *src, size_t len, bool last_last)
{
	return last_last ? sv_place_guarded(dst, src, len) : sv_copy_guarded(dst, src, len);
}

bool sv_copier_copy(void *dst, const void *src, size_t len, bool last_last)
{
	uint8_t *d = dst;
	const uint8_t *s = src;
	size_t tail;
	uint64_t now;
	uint32_t gen;
	int64_t k;
	bool ok, burst, lost = false;

	if (len < SV_COPY_SPLIT_MIN || !copier_ready())
		return copy_alone(dst, src, len, last_last);
	now = sv_now_ns();
	if (now < atomic_load_explicit(&cp.backoff_until, memory_order_relaxed) ||
	    atomic_exchange_explicit(&cp.owned, true, memory_order_acquire))
		return copy_alone(dst, src, len, last_last);
	burst = now - atomic_exchange_explicit(&cp.last_ns, now, memory_order_relaxed) <
		SV_COPY_SPIN_NS;
	if (atomic_load(&cp.asleep)) {
		/* a CPU for it?  Woken where there is none, it would take the
		 * CPU of a thread with work (its waker's, for a time slice,
		 * waiting for its own check) */
		bool busy = crowded_now(now);

		if (busy)
			back_off(now);
		if (busy || len < SV_COPY_WAKE_MIN) {
			/* too short to wait for it.  Woken for the copies that
			 * follow when they come close enough to keep it awake;
			 * for one now and then, the wake-up would cost more than
			 * it saves */
			atomic_store_explicit(&cp.owned, false, memory_order_release);
			if (burst && !busy)
				ring();
			return copy_alone(dst, src, len, last_last);
		}
	}
	/* the offer: chunks of what comes before the last byte (stored
	 * after every other, below), about an eighth of it each, from
	 * SV_COPY_CHUNK_MIN to SV_COPY_CHUNK_MAX */
	tail = len - (last_last ? 1 : 0);
	cp.dst = d;
	cp.src = s;
	cp.len = tail;
	cp.chunk = SV_MIN(SV_MAX((tail / 8) & ~(size_t)63, SV_COPY_CHUNK_MIN), SV_COPY_CHUNK_MAX);
	/* (a copy of many GiB: longer chunks, as many as the word counts) */
	cp.chunk = SV_MAX(cp.chunk, ((tail / CLAIM_MAX_CHUNKS) | 63) + 1);
	cp.nchunks = (uint32_t)((tail + cp.chunk - 1) / cp.chunk);
	atomic_store_explicit(&cp.failed, false, memory_order_relaxed);
	gen = CLAIM_GEN(atomic_load(&cp.claim)) + 1;
	if (gen == 0)
		gen = 1; /* 0: the copier has been in none */
	atomic_store(&cp.claim, (uint64_t)gen << 32 | cp.nchunks);
	ring();
	ok = true;
	while ((k = take_chunk(gen, false)) >= 0)
		ok = copy_chunk((uint32_t)k) && ok;
	/* closed, then the copier out of it: its chunks are copied */
	atomic_store(&cp.claim, (uint64_t)gen << 32 | CLAIM_CLOSED);
	for (unsigned n = 1; atomic_load(&cp.active); n++) {
		/* a chunk at most, unless it lost its CPU */
		if (lost) {
			sched_yield();
		} else {
			uint64_t t;

			relax();
			if (n % 64 == 0 && (t = sv_now_ns()) - now > SV_COPY_PREEMPT_NS) {
				back_off(t);
				lost = true;
			}
		}
	}
	ok = ok && !atomic_load_explicit(&cp.failed, memory_order_relaxed);
	atomic_store_explicit(&cp.owned, false, memory_order_release);
	/* the last byte (sv_place_guarded: every byte before it visible
	 * first, the copier's too, which the acquire above saw done) */
	if (ok && last_last)
		ok = sv_place_guarded(d + len - 1, s + len - 1, 1);
	return ok;
}

unsigned long sv_copier_parts(void)
{
	return atomic_load_explicit(&cp.parts, memory_order_relaxed);
}

unsigned long sv_copier_backoffs(void)
{
	return atomic_load_explicit(&cp.backoffs, memory_order_relaxed);
}

void sv_copier_insist(bool on)
{
	atomic_store(&cp.insist, on);
}

/* A forked child has no copier thread: the first long copy starts one. */
static void copier_after_fork(void)
{
	int r = atomic_load(&cp.run);

	if (r == COPIER_RUNNING || r == COPIER_STARTING)
		atomic_store(&cp.run, COPIER_UNSTARTED);
	atomic_store(&cp.owned, false);
	atomic_store(&cp.claim, (uint64_t)CLAIM_CLOSED);
	atomic_store(&cp.active, 0);
	atomic_store(&cp.asleep, 0);
}

__attribute__((constructor)) static void copier_load(void)
{
	pthread_atfork(NULL, NULL, copier_after_fork);
}

/* The thread, if this process runs one, stops (at most a second); the
 * copier is then `after`: never again (unloaded), or started by the next
 * long copy. */
static void copier_stop(int after)
{
	struct timespec until;
	int r = COPIER_RUNNING;

	/* from here no offer is made (copier_ready wants it running) */
	if (!atomic_compare_exchange_strong(&cp.run, &r, COPIER_NEVER)) {
		if (after == COPIER_NEVER)
			atomic_store(&cp.run, COPIER_NEVER);
		return;
	}
	if (cp.pid != getpid()) {
		atomic_store(&cp.run, after); /* (a forked child's: no thread here) */
		return;
	}
	atomic_store(&cp.stop, true);
	atomic_store(&cp.asleep, 1); /* so that ring() wakes it whatever it is doing */
	ring();
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 1;
	if (pthread_timedjoin_np(cp.thread, NULL, &until)) {
		sv_warn("copier thread did not stop");
		return; /* (never started again: it may still be in an offer) */
	}
	atomic_store(&cp.stop, false);
	atomic_store(&cp.asleep, 0);
	atomic_store(&cp.run, after);
}

void sv_copier_idle(void)
{
	copier_stop(COPIER_UNSTARTED);
}

/* Not left running in unmapped code when the library is unloaded
 * (verbs/device.c, stop_engines_at_unload, says why that happens). */
__attribute__((destructor)) static void copier_unload(void)
{
	copier_stop(COPIER_NEVER);
}
