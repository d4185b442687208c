/* Guarded accesses to application memory; see fault_guard.h. */
#include "common/fault_guard.h"
#include "common/util.h" /* sv_now_ns: clock_gettime, async-signal-safe */

#include <pthread.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

/*
 * x86-64: short copies go through a routine the fault handler knows by
 * address (sv_place_short, below), not a jump buffer.  Not under
 * ThreadSanitizer, whose runtime wraps the handler (it is not protected
 * there anyway: fault_guard.h).
 */
#if defined(__x86_64__) && !defined(SV_TSAN)
#define SV_SHORT_FIXUP 1
#endif
#define SV_SHORT_MAX 64 /* bytes: longer ones are memcpy's, faster */

/*
 * The jump buffer of the guarded access this thread is in, or NULL.  The
 * initial-exec model keeps the handler's read of it free of the lazy TLS
 * allocation a dlopen'ed library could otherwise need (not signal safe).
 */
static __thread sigjmp_buf *armed __attribute__((tls_model("initial-exec")));

static struct sigaction prev_segv, prev_bus;
static pthread_once_t installed = PTHREAD_ONCE_INIT;

/* What would have happened without softverbs' handler. */
static void pass_on(int sig, siginfo_t *si, void *uc)
{
	const struct sigaction *p = sig == SIGSEGV ? &prev_segv : &prev_bus;

	if (p->sa_flags & SA_SIGINFO) {
		p->sa_sigaction(sig, si, uc);
		return;
	}
	if (p->sa_handler != SIG_DFL && p->sa_handler != SIG_IGN) {
		p->sa_handler(sig);
		return;
	}
	/* the default action: a fault repeats as soon as this returns and then
	 * kills (with its core dump, at the right instruction); a signal sent
	 * by someone is sent again */
	signal(sig, SIG_DFL);
	if (si->si_code <= 0)
		raise(sig);
}

/* The range whose pages are being replaced (sv_fault_guard_hold): [0] its
 * start, [1] its end; 0 when none.  One at a time (mem_share.c holds its
 * lock around it). */
static _Atomic uintptr_t held_range[2]; /* the last range held */
static atomic_bool held;                 /* ... and it is held now */
static _Atomic uint64_t released_at;     /* when it was released (ns) */
static _Atomic long held_by;             /* the thread that holds it */

/* How long after a release a fault in the range is still taken for one
 * the hold caused: the signal may be handled after the release. */
#define HELD_GRACE_NS 100000000ull

void sv_fault_guard_hold(void *start, size_t len)
{
	atomic_store(&held_by, (long)syscall(SYS_gettid));
	atomic_store(&held, false);
	atomic_store(&held_range[0], (uintptr_t)start);
	atomic_store(&held_range[1], (uintptr_t)start + len);
	atomic_store(&held, true);
}

void sv_fault_guard_release(void)
{
	atomic_store(&released_at, sv_now_ns());
	atomic_store(&held, false);
}

/*
 * A store into the held range (read-only while its copy is taken) waits
 * for the new pages, then returns: the instruction runs again on them.  A
 * fault raised while the range was held may be handled just after the
 * release: within a grace period it is retried too (a real fault there
 * repeats, and is passed on once the grace period is over).
 */
static bool wait_held(const siginfo_t *si)
{
	uintptr_t a = (uintptr_t)si->si_addr;

	if (si->si_code <= 0 || a < atomic_load(&held_range[0]) ||
	    a >= atomic_load(&held_range[1]))
		return false;
	if (!atomic_load(&held))
		return sv_now_ns() - atomic_load(&released_at) < HELD_GRACE_NS;
	/* the holder itself would wait for ever: a bug, which must show */
	if ((long)syscall(SYS_gettid) == atomic_load(&held_by))
		return false;
	while (atomic_load(&held)) {
		struct timespec ts = { 0, 20000 };

		nanosleep(&ts, NULL); /* async-signal-safe */
	}
	return true;
}

/* ---- ranges frozen across a fork() (sv_fault_guard_freeze) ---- */

static struct sv_frozen *_Atomic fz_ranges;
static _Atomic size_t fz_n;
static void (*_Atomic fz_unhold)(struct sv_frozen *r);
static atomic_bool fz_active, fz_forked;
static _Atomic long fz_pid, fz_tid;
static _Atomic uintptr_t fz_span[2]; /* the last freeze's lowest and highest address */
static _Atomic uint64_t fz_thawed_at;

void sv_fault_guard_freeze(struct sv_frozen *ranges, size_t n, void (*unhold)(struct sv_frozen *r))
{
	uintptr_t lo = UINTPTR_MAX, hi = 0;

	for (size_t i = 0; i < n; i++) {
		lo = ranges[i].start < lo ? ranges[i].start : lo;
		hi = ranges[i].end > hi ? ranges[i].end : hi;
	}
	atomic_store(&fz_active, false);
	atomic_store(&fz_ranges, ranges);
	atomic_store(&fz_n, n);
	atomic_store(&fz_unhold, unhold);
	atomic_store(&fz_pid, (long)syscall(SYS_getpid));
	atomic_store(&fz_tid, (long)syscall(SYS_gettid));
	atomic_store(&fz_forked, false);
	atomic_store(&fz_span[0], lo);
	atomic_store(&fz_span[1], hi);
	atomic_store(&fz_active, true);
}

void sv_fault_guard_forked(void)
{
	atomic_store(&fz_forked, true);
}

void sv_fault_guard_thaw(void)
{
	atomic_store(&fz_thawed_at, sv_now_ns());
	atomic_store(&fz_active, false);
}

/* Whether thread `tid` of this process is asleep (state S: in a futex
 * wait, say), from /proc; false where that cannot be read.  System calls
 * only: this runs in the signal handler. */
static bool thread_asleep(long tid)
{
	char path[64] = "/proc/self/task/", num[24], buf[512];
	size_t n = 0, at = strlen(path);
	ssize_t got;
	int fd;

	do {
		num[n++] = (char)('0' + tid % 10);
		tid /= 10;
	} while (tid && n < sizeof(num));
	while (n && at < sizeof(path) - 8)
		path[at++] = num[--n];
	memcpy(path + at, "/stat", 6);
	fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	got = syscall(SYS_read, fd, buf, sizeof(buf) - 1);
	syscall(SYS_close, fd);
	if (got <= 0)
		return false;
	buf[got] = 0;
	/* "tid (comm) S ...": comm may hold anything, the state follows its
	 * last parenthesis */
	char *p = strrchr(buf, ')');

	return p && p[1] == ' ' && p[2] == 'S';
}

/* How long a thread waits for a frozen range while the forking thread
 * sleeps before fork() has returned, before it takes that for a wait on
 * itself (a lock it holds) and releases the range. */
#define FROZEN_PATIENCE_NS 2000000ull

static bool wait_frozen(const siginfo_t *si)
{
	uintptr_t a = (uintptr_t)si->si_addr;
	struct sv_frozen *r = NULL, *rs = atomic_load(&fz_ranges);
	size_t n = atomic_load(&fz_n);
	uint64_t asleep_since = 0;

	if (si->si_code <= 0 || a < atomic_load(&fz_span[0]) || a >= atomic_load(&fz_span[1]))
		return false;
	for (size_t i = 0; rs && i < n && !r; i++)
		if (a >= rs[i].start && a < rs[i].end)
			r = &rs[i];
	if (!r)
		return false;
	if (!atomic_load(&fz_active)) /* raised while held, handled after? */
		return sv_now_ns() - atomic_load(&fz_thawed_at) < HELD_GRACE_NS;
	if ((long)syscall(SYS_getpid) != atomic_load(&fz_pid)) {
		/* the child: its own copy, now */
		if (atomic_load(&r->state) == SV_FROZEN_PRIVATE)
			return false;
		atomic_load(&fz_unhold)(r);
		return true;
	}
	if (atomic_load(&r->state) != SV_FROZEN_HELD)
		return true; /* released meanwhile: the store runs again */
	if ((long)syscall(SYS_gettid) == atomic_load(&fz_tid)) {
		atomic_load(&fz_unhold)(r); /* the forking thread cannot wait for itself */
		return true;
	}
	for (unsigned i = 1; atomic_load(&fz_active) && atomic_load(&r->state) == SV_FROZEN_HELD;
	     i++) {
		struct timespec ts = { 0, 20000 };

		nanosleep(&ts, NULL);
		/* once the forking thread is back, the child is copying: that
		 * ends.  Before, look at it every 25th time (0.5 ms) */
		if (atomic_load(&fz_forked) || i % 25)
			continue;
		if (!thread_asleep(atomic_load(&fz_tid))) {
			asleep_since = 0;
		} else if (!asleep_since) {
			asleep_since = sv_now_ns();
		} else if (sv_now_ns() - asleep_since > FROZEN_PATIENCE_NS) {
			atomic_load(&fz_unhold)(r);
			break;
		}
	}
	return true;
}

#ifdef SV_SHORT_FIXUP
/*
 * Short guarded copies without a jump buffer: sigsetjmp and the call
 * around it cost more than moving a few bytes (an 8-byte RDMA WRITE's
 * copy, executed by the initiator).  The copy is a routine of its own
 * whose instructions the handler knows by address: a fault inside it
 * resumes at its fix-up, which returns false (the pattern of the kernel's
 * exception table).  The bytes before the last go first, in two
 * overlapping moves of 2, 4 or 8 bytes or 8 at a time, then the last byte:
 * x86 makes stores visible in program order, so the last byte lands last,
 * as sv_place_guarded promises.
 */
bool sv_place_short(void *dst, const void *src, size_t len);
extern const char sv_place_short_fixup[];
__asm__(".pushsection .text.sv_place_short,\"ax\",@progbits\n"
	".globl sv_place_short\n"
	".hidden sv_place_short\n"
	".type sv_place_short,@function\n"
	"sv_place_short:\n"
	/* rcx: the bytes before the last; each size stored in at most two
	 * overlapping moves, or 8 at a time and an overlapping last 8 */
	"	lea -1(%rdx), %rcx\n"
	"	cmp $8, %rcx\n"
	"	jb 4f\n"
	"	mov -8(%rsi,%rcx), %r8\n"
	"1:	cmp $8, %rcx\n"
	"	jb 2f\n"
	"	mov (%rsi), %rax\n"
	"	mov %rax, (%rdi)\n"
	"	add $8, %rsi\n"
	"	add $8, %rdi\n"
	"	sub $8, %rcx\n"
	"	jmp 1b\n"
	"2:	mov %r8, -8(%rdi,%rcx)\n"
	"	jmp 7f\n"
	"4:	cmp $4, %rcx\n"
	"	jb 5f\n"
	"	mov (%rsi), %eax\n"
	"	mov -4(%rsi,%rcx), %r8d\n"
	"	mov %eax, (%rdi)\n"
	"	mov %r8d, -4(%rdi,%rcx)\n"
	"	jmp 7f\n"
	"5:	cmp $2, %rcx\n"
	"	jb 6f\n"
	"	movzwl (%rsi), %eax\n"
	"	movzwl -2(%rsi,%rcx), %r8d\n"
	"	mov %ax, (%rdi)\n"
	"	mov %r8w, -2(%rdi,%rcx)\n"
	"	jmp 7f\n"
	"6:	test %rcx, %rcx\n"
	"	jz 7f\n"
	"	movzbl (%rsi), %eax\n"
	"	mov %al, (%rdi)\n"
	/* the last byte, last */
	"7:	movzbl (%rsi,%rcx), %eax\n"
	"	mov %al, (%rdi,%rcx)\n"
	"	mov $1, %eax\n"
	"	ret\n"
	".globl sv_place_short_fixup\n"
	".hidden sv_place_short_fixup\n"
	"sv_place_short_fixup:\n"
	"	xor %eax, %eax\n"
	"	ret\n"
	".size sv_place_short, .-sv_place_short\n"
	".popsection\n");

/* A fault inside sv_place_short: it returns false from its fix-up. */
static bool short_fixup(const siginfo_t *si, void *uc)
{
	ucontext_t *u = uc;
	uintptr_t pc = (uintptr_t)u->uc_mcontext.gregs[REG_RIP];

	if (si->si_code <= 0 || pc < (uintptr_t)sv_place_short ||
	    pc >= (uintptr_t)sv_place_short_fixup)
		return false;
	u->uc_mcontext.gregs[REG_RIP] = (greg_t)(uintptr_t)sv_place_short_fixup;
	return true;
}
#endif

static void on_fault(int sig, siginfo_t *si, void *uc)
{
	sigjmp_buf *jb = armed;

	if (sig == SIGSEGV && (wait_frozen(si) || wait_held(si)))
		return;
#ifdef SV_SHORT_FIXUP
	if (short_fixup(si, uc))
		return;
#endif

	if (jb && si->si_code > 0) { /* a real fault, in a guarded access */
		armed = NULL;
		siglongjmp(*jb, 1);
	}
	pass_on(sig, si, uc);
}

static void install(void)
{
	struct sigaction sa = { 0 };

	sa.sa_sigaction = on_fault;
	/* SA_NODEFER: the jump leaves the handler without sigreturn, so the
	 * signal must not stay blocked (the jump buffer saves no mask: that
	 * would cost a system call per access) */
	sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, &prev_segv);
	sigaction(SIGBUS, &sa, &prev_bus);
}

bool sv_fault_guard_active(void)
{
	struct sigaction cur;

	return !sigaction(SIGSEGV, NULL, &cur) && (cur.sa_flags & SA_SIGINFO) &&
	       cur.sa_sigaction == on_fault;
}

void sv_fault_guard_init(void)
{
	pthread_once(&installed, install);
}

/* Only while the handler is still ours (never installed: it is not). */
static void restore(int sig, const struct sigaction *prev)
{
	struct sigaction cur;

	if (!sigaction(sig, NULL, &cur) && (cur.sa_flags & SA_SIGINFO) &&
	    cur.sa_sigaction == on_fault)
		sigaction(sig, prev, NULL);
}

/* After a dlclose the handler's code is gone: a fault would jump into
 * unmapped memory instead of reaching the program's handler. */
void sv_fault_guard_fini(void)
{
	restore(SIGSEGV, &prev_segv);
	restore(SIGBUS, &prev_bus);
}

/*
 * The pattern of every guarded access: arm, access, disarm.  The signal
 * fences keep the compiler from moving the access outside the armed window;
 * nothing the access changes is read after a jump back.
 */
#define GUARD_BEGIN()                                                                        \
	sigjmp_buf jb;                                                                       \
	if (sigsetjmp(jb, 0)) {                                                              \
		atomic_signal_fence(memory_order_seq_cst);                                   \
		return false;                                                                \
	}                                                                                    \
	armed = &jb;                                                                         \
	atomic_signal_fence(memory_order_seq_cst)

#define GUARD_END()                                                                          \
	atomic_signal_fence(memory_order_seq_cst);                                           \
	armed = NULL

bool sv_copy_guarded(void *dst, const void *src, size_t len)
{
#ifdef SV_SHORT_FIXUP
	if (len && len <= SV_SHORT_MAX)
		return sv_place_short(dst, src, len);
#endif
	GUARD_BEGIN();
	__builtin_memcpy(dst, src, len);
	GUARD_END();
	return true;
}

bool sv_place_guarded(void *dst, const void *src, size_t len)
{
	const uint8_t *s = src;

	if (!len)
		return true;
#ifdef SV_SHORT_FIXUP
	if (len <= SV_SHORT_MAX)
		return sv_place_short(dst, src, len);
#endif
	GUARD_BEGIN();
	__builtin_memcpy(dst, src, len - 1);
	atomic_thread_fence(memory_order_release);
	__atomic_store_n((uint8_t *)dst + len - 1, s[len - 1], __ATOMIC_RELAXED);
	GUARD_END();
	return true;
}

bool sv_touch_guarded(void *p, size_t len)
{
	uint8_t *b = p;
	size_t page = 4096;

	if (!len)
		return true;
	GUARD_BEGIN();
	/* a compare-and-swap that leaves the byte as it is (and loses no
	 * store of another thread), but writes: an atomic add of 0 may be
	 * turned into a load */
	for (size_t o = 0; o < len; o = o ? o + page : page - ((uintptr_t)b & (page - 1))) {
		uint8_t v = __atomic_load_n(&b[o], __ATOMIC_RELAXED);

		__atomic_compare_exchange_n(&b[o], &v, v, false, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED);
	}
	GUARD_END();
	return true;
}

bool sv_probe_guarded(const void *p, size_t len)
{
	const volatile uint8_t *b = p;
	size_t page = 4096;

	if (!len)
		return true;
	GUARD_BEGIN();
	(void)b[0];
	/* one byte in each further page, and the last */
	for (size_t o = page - ((uintptr_t)b & (page - 1)); o < len; o += page)
		(void)b[o];
	(void)b[len - 1];
	GUARD_END();
	return true;
}

bool sv_cas_guarded(uint64_t *word, uint64_t compare, uint64_t swap, uint64_t *orig)
{
	uint64_t v = compare;

	GUARD_BEGIN();
	__atomic_compare_exchange_n(word, &v, swap, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	GUARD_END();
	*orig = v;
	return true;
}

bool sv_fadd_guarded(uint64_t *word, uint64_t add, uint64_t *orig)
{
	uint64_t v;

	GUARD_BEGIN();
	v = __atomic_fetch_add(word, add, __ATOMIC_SEQ_CST);
	GUARD_END();
	*orig = v;
	return true;
}

bool sv_store_guarded(uint64_t *word, uint64_t v)
{
	GUARD_BEGIN();
	__atomic_store_n(word, v, __ATOMIC_RELEASE);
	GUARD_END();
	return true;
}
