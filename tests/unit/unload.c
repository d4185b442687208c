/*
 * unit_unload: the library's threads and descriptors end with what they
 * serve, at dlclose, at ibv_close_device and at exit.  rdma-core's
 * libibverbs and librdmacm start no threads, so middleware (Open MPI's
 * components, libfabric's providers) dlcloses them freely and programs exit
 * with devices open; softverbs' engine and CM threads must not outlive the
 * code they run, nor hang an exit.  Each case runs in a process of its own,
 * so that a crash or a hang is reported as that case failing:
 *   - unload_helper (a program that does not link libibverbs, so that
 *     dlclose really unmaps it) dlopens libibverbs.so.1, moves data with an
 *     RDMA WRITE, and dlcloses it with the device closed, or with the device,
 *     QPs and WRITEs in flight left as they are; then librdmacm.so.1 with a
 *     listener and a resolved id, destroyed or not: each time the library is
 *     really gone, one thread is left and the process lives on
 *   - 50 ibv_open_device/ibv_close_device (with a PD, a CQ on a completion
 *     channel, a QP; every 10th round a connected pair that moves data): the
 *     thread count and the open descriptors return to what they were before
 *   - exit(0) with devices, QPs and CQs open and RDMA WRITEs outstanding, and
 *     again with one thread blocked in ibv_get_cq_event and another posting
 *     and polling: exit status 0, and within 1.5 s of the call to exit
 *
 * Arguments (from CMake): the unload_helper program and the folder of the
 * libibverbs.so.1 / librdmacm.so.1 this build made.
 */
#include "sv_test.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define OPEN_CLOSE_ROUNDS 50
#define UNLOAD_ROUNDS 4

static int count_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	SVT_CHECK_PTR(d);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

static int count_threads(void)
{
	return count_dir("/proc/self/task");
}

/* Open descriptors, less the one opendir holds while counting. */
static int count_fds(void)
{
	return count_dir("/proc/self/fd") - 1;
}

/*
 * The thread count once it has settled to `want`, within 2 s: pthread_join
 * returns when the kernel wakes the joiner, which is a moment before the
 * exited thread leaves /proc/self/task.
 */
static int threads_settle(int want)
{
	uint64_t end = svt_now_ms() + 2000;
	int n;

	while ((n = count_threads()) != want && svt_now_ms() < end)
		svt_sleep_ms(5);
	return n;
}

/* ---- dlopen / dlclose, in unload_helper ---- */

static void run_helper(const char *helper, const char *mode, const char *libdir)
{
	char rounds[16];
	pid_t pid;
	int st = 0;

	snprintf(rounds, sizeof(rounds), "%d", UNLOAD_ROUNDS);
	pid = fork();
	SVT_CHECK(pid >= 0);
	if (pid == 0) {
		execl(helper, helper, mode, libdir, rounds, (char *)NULL);
		fprintf(stderr, "exec %s: %s\n", helper, strerror(errno));
		_exit(127);
	}
	/* bounded: an unload that hangs (a thread that does not stop) fails here */
	uint64_t end = svt_now_ms() + 20000;
	pid_t r;

	while ((r = waitpid(pid, &st, WNOHANG)) == 0 && svt_now_ms() < end)
		svt_sleep_ms(10);
	if (r == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		SVT_FAIL("unload_helper %s: still running after 20 s (killed)", mode);
	}
	SVT_CHECK_EQ(r, pid);
	if (WIFSIGNALED(st))
		SVT_FAIL("unload_helper %s: killed by signal %d (%s): a thread outlived the "
			 "library's code?",
			 mode, WTERMSIG(st), strsignal(WTERMSIG(st)));
	SVT_CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "unload_helper %s exited %d", mode,
		      WEXITSTATUS(st));
	svt_log("dlclose of %s: %d rounds passed", mode, UNLOAD_ROUNDS);
}

/* ---- open/close in a loop ---- */

static struct ibv_device *find_device(struct ibv_device **list)
{
	for (int i = 0; list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), svt_device_name()))
			return list[i];
	SVT_FAIL("device %s not found", svt_device_name());
}

/* A pair of connected RC QPs on two contexts, and one WRITE between them. */
static void pair_round(void)
{
	struct svt_pair p;
	struct ibv_wc wc;

	svt_pair_create(&p, IBV_QPT_RC, NULL);
	svt_fill(p.a.buf, 4096, 5);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, p.a.buf,
				   4096, p.a.mr->lkey, (uintptr_t)p.b.buf, p.b.mr->rkey, 0));
	svt_poll_ok(p.a.send_cq, 1, &wc, 0);
	SVT_CHECK_FILL(p.b.buf, 4096, 5);
	svt_pair_destroy(&p);
}

static int role_open_close(int rfd, int wfd, int argc, char **argv)
{
	(void)rfd, (void)wfd, (void)argc, (void)argv;
	/* the device list is kept for the life of the process: taken before the baseline */
	struct ibv_device **list = ibv_get_device_list(NULL);

	SVT_CHECK_PTR(list);
	struct ibv_device *dev = find_device(list);
	const int threads0 = count_threads(), fds0 = count_fds();

	for (int i = 0; i < OPEN_CLOSE_ROUNDS; i++) {
		struct ibv_context *ctx = ibv_open_device(dev);
		struct svt_qp_init qi;

		SVT_CHECK_PTR(ctx);
		SVT_CHECK_GT(count_threads(), threads0); /* the engine thread */
		struct ibv_pd *pd = ibv_alloc_pd(ctx);

		SVT_CHECK_PTR(pd);
		struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);

		SVT_CHECK_PTR(ch);
		struct ibv_cq *cq = svt_create_cq(ctx, 16, ch);

		svt_qp_init_default(&qi, IBV_QPT_RC);
		struct ibv_qp *qp = svt_create_qp(pd, cq, cq, &qi);

		SVT_CHECK_OK(svt_qp_to_init(qp, NULL));
		SVT_CHECK_OK(ibv_destroy_qp(qp));
		SVT_CHECK_OK(ibv_destroy_cq(cq));
		SVT_CHECK_OK(ibv_destroy_comp_channel(ch));
		SVT_CHECK_OK(ibv_dealloc_pd(pd));
		SVT_CHECK_OK(ibv_close_device(ctx));
		/* connections (sockets, shared-memory rings) must go with the contexts too */
		if (i % 10 == 9)
			pair_round();
		int n = threads_settle(threads0);

		SVT_CHECK_MSG(n == threads0, "round %d: %d threads after close, %d before", i, n,
			      threads0);
		n = count_fds();
		SVT_CHECK_MSG(n == fds0, "round %d: %d descriptors open after close, %d before", i,
			      n, fds0);
	}
	ibv_free_device_list(list);
	return 0;
}

static void test_open_close_loop(void)
{
	struct svt_child c;

	svt_spawn(&c, "open_close", NULL);
	SVT_CHECK_EQ(svt_child_wait(&c, 30000), 0);
	svt_log("%d open/close rounds: threads and descriptors back each time",
		OPEN_CLOSE_ROUNDS);
}

/* ---- exit with everything open ---- */

#define WLEN (512 * 1024)
#define NWRITES 16

/* A connected RC pair whose buffers hold NWRITES WRITEs of WLEN, none polled. */
static void start_writes(struct svt_pair *p)
{
	struct svt_pair_opts o;

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.buf_len = 2 * WLEN;
	o.comp_channel = true;
	svt_pair_create(p, IBV_QPT_RC, &o);
	svt_fill(p->a.buf, WLEN, 9);
	for (int i = 0; i < NWRITES; i++)
		SVT_CHECK_OK(svt_post_send(p->a.qp, (uint64_t)i, IBV_WR_RDMA_WRITE,
					   IBV_SEND_SIGNALED, p->a.buf, WLEN, p->a.mr->lkey,
					   (uintptr_t)p->b.buf + WLEN, p->b.mr->rkey, 0));
}

static int role_exit_busy(int rfd, int wfd, int argc, char **argv)
{
	struct svt_pair p;

	(void)rfd, (void)argc, (void)argv;
	start_writes(&p);
	svt_sync_send(wfd, 'X');
	exit(0); /* destructors: bounded quiesce, then the engine threads stop */
}

static struct svt_pair busy_pair;

/* Blocked in the library for a completion event that never comes. */
static void *blocked_thread(void *arg)
{
	struct ibv_cq *cq;
	void *cq_ctx;

	(void)arg;
	ibv_req_notify_cq(busy_pair.b.recv_cq, 0);
	if (ibv_get_cq_event(busy_pair.b.channel, &cq, &cq_ctx) == 0)
		ibv_ack_cq_events(cq, 1);
	return NULL;
}

/*
 * Posting and polling without pause, including while the process exits:
 * errors are ignored here (the test is that the process exits cleanly).
 */
static void *spinning_thread(void *arg)
{
	struct svt_side *a = &busy_pair.a, *b = &busy_pair.b;
	int outstanding = NWRITES;

	(void)arg;
	for (;;) {
		struct ibv_wc wc[8];
		int n = ibv_poll_cq(a->send_cq, 8, wc);

		if (n > 0)
			outstanding -= n;
		while (outstanding < NWRITES &&
		       svt_post_send(a->qp, 0, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, a->buf,
				     4096, a->mr->lkey, (uintptr_t)b->buf + WLEN, b->mr->rkey,
				     0) == 0)
			outstanding++;
	}
	return NULL;
}

static int role_exit_threads(int rfd, int wfd, int argc, char **argv)
{
	pthread_t t1, t2;

	(void)rfd, (void)argc, (void)argv;
	start_writes(&busy_pair);
	SVT_CHECK_EQ(pthread_create(&t1, NULL, blocked_thread, NULL), 0);
	SVT_CHECK_EQ(pthread_create(&t2, NULL, spinning_thread, NULL), 0);
	svt_sleep_ms(50); /* both are inside the library now */
	svt_sync_send(wfd, 'X');
	exit(0);
}

static void test_exit_open(const char *role)
{
	struct svt_child c;

	svt_spawn(&c, role, NULL);
	SVT_CHECK_EQ(svt_sync_recv(c.rfd, 20000), 'X');
	uint64_t t0 = svt_now_ms();
	int st = svt_child_wait(&c, 10000);
	uint64_t ms = svt_now_ms() - t0;

	SVT_CHECK_MSG(st == 0, "%s: exit status %d (128+N: signal N)", role, st);
	/*
	 * The destructor waits 200 ms at most for output to go out, then 2 s
	 * at most per engine thread that does not stop: 1.5 s tells the two
	 * apart with room for a slow machine.
	 */
	SVT_CHECK_MSG(ms < 1500, "%s: exit took %llu ms", role, (unsigned long long)ms);
	svt_log("%s: exited 0 in %llu ms", role, (unsigned long long)ms);
}

/*
 * fork() while the engine threads work, and the child exit()s: the child
 * inherits the parent's contexts but none of their threads, and their locks
 * may have been held at the fork.  Its destructors must leave them alone
 * (before, about one child in ten hung for ever in sv_engine_quiesce).
 */
#define FORKS 60

/*
 * LeakSanitizer (sanitizer builds) cannot examine a forked child of a
 * threaded process: the parent's threads are not there to suspend, and it
 * fails the exit.  The children below turn it off through its documented
 * hook; without a sanitizer nothing calls this.
 */
static volatile int lsan_off;
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void)
{
	return lsan_off;
}

static int role_fork_exit(int rfd, int wfd, int argc, char **argv)
{
	pthread_t t;
	int slow = 0;

	(void)rfd, (void)wfd, (void)argc, (void)argv;
	start_writes(&busy_pair);
	SVT_CHECK_EQ(pthread_create(&t, NULL, spinning_thread, NULL), 0);
	svt_sleep_ms(20);
	for (int i = 0; i < FORKS; i++) {
		uint64_t t0 = svt_now_ms();
		pid_t c = fork();
		int st;
		pid_t r;

		if (c == 0) {
			lsan_off = 1;
			exit(0); /* runs the libraries' destructors */
		}
		SVT_CHECK(c > 0);
		while ((r = waitpid(c, &st, WNOHANG)) == 0 && svt_now_ms() - t0 < 3000)
			svt_sleep_ms(1);
		if (r == 0) {
			kill(c, SIGKILL);
			waitpid(c, &st, 0);
			SVT_FAIL("forked child %d of %d did not exit within 3 s", i + 1, FORKS);
		}
		SVT_CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
		if (svt_now_ms() - t0 > 150)
			slow++;
	}
	/* a child has no connection of its own to wait for: exits are prompt */
	SVT_CHECK_MSG(slow <= FORKS / 10, "%d of %d children took over 150 ms to exit", slow,
		      FORKS);
	svt_log("%d forked children exited at once (%d over 150 ms)", FORKS, slow);
	_exit(0); /* the spinning thread keeps going: leave without destructors */
}

int main(int argc, char **argv)
{
	static const struct svt_child_role roles[] = {
		{ "fork_exit", role_fork_exit },
		{ "open_close", role_open_close },
		{ "exit_busy", role_exit_busy },
		{ "exit_threads", role_exit_threads },
		{ NULL, NULL },
	};

	svt_child_dispatch(argc, argv, roles);
	svt_watchdog(55);
	if (argc != 3) {
		fprintf(stderr, "usage: %s UNLOAD_HELPER LIBDIR\n", argv[0]);
		return 2;
	}
	run_helper(argv[1], "verbs", argv[2]);
	run_helper(argv[1], "rdmacm", argv[2]);
	test_open_close_loop();
	test_exit_open("exit_busy");
	test_exit_open("exit_threads");
	{
		struct svt_child c;

		svt_spawn(&c, "fork_exit", NULL);
		SVT_CHECK_EQ(svt_child_wait(&c, 30000), 0);
	}
	return 0;
}
