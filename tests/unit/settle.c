/*
 * unit_settle: a QP taken to ERR, or destroyed, while a SEND is in flight
 * whose ACK has already reached this host first takes in what has arrived:
 * the SEND completes with IBV_WC_SUCCESS, as on a NIC, which processes the
 * ACK on arrival, not with IBV_WC_WR_FLUSH_ERR (ibv_modify_qp) or with no
 * completion at all (ibv_destroy_qp).  See settle_qp in verbs/qp.c and
 * sv_engine_settle in engine/loop.c.
 *
 * Here an ACK is taken in only when a thread looks: the engine thread, or
 * an application thread that polls a CQ.  Normally the engine thread does
 * so within microseconds, so this test (the requester, in the parent
 * process) stalls its own engine thread(s), each in a SIGUSR1 handler that
 * blocks in read() on a pipe.  A thread is stopped only while it sleeps in
 * epoll_wait, holding no lock of the library's (/proc/self/task/TID/syscall
 * says so before the signal; on x86_64 and aarch64 the handler also reports
 * that the system call it interrupted returned EINTR), so the verbs calls of
 * the main thread meanwhile cannot wait for it.
 *
 * Each round, with the engine stalled:
 *   - the main thread posts a signaled SEND: ibv_post_send writes it to the
 *     connection itself, and the responder (a child process: fork+exec of
 *     this binary, its own device) receives it, checks it and says so;
 *   - 50 ms later the responder's ACK has reached this host, untouched: the
 *     send CQ's completion channel, armed before the post, has no event;
 *   - round 1: ibv_modify_qp(ERR), round 2: ibv_destroy_qp (the CQ lives
 *     on); one ibv_poll_cq then finds exactly the SEND's completion, with
 *     IBV_WC_SUCCESS.  Nothing polls a CQ before that, since a poll that
 *     finds the CQ empty makes progress itself.
 * Then the engine threads are let go and nothing else completes.
 */
#include "sv_test.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define NQP 2     /* round 0: modify to ERR, round 1: destroy */
#define MSG 256   /* bytes of each SEND */
#define MAX_TIDS 64

/* wr_ids and payload seeds: the warm-up SEND of QP i, then its test SEND */
#define WARM_ID(i) (100u + (i))
#define TEST_ID(i) (200u + (i))

/* ---------------------------------------------------------------- responder */

static int responder(int rfd, int wfd, int argc, char **argv)
{
	struct svt_dev d;
	struct svt_qp_init qi;
	struct svt_peer_info me, peer[NQP];
	struct ibv_qp *qp[NQP];
	struct ibv_wc wc;

	(void)argc;
	(void)argv;
	svt_dev_open(&d);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 16, NULL);
	char *buf = svt_alloc(2 * NQP * MSG);
	struct ibv_mr *mr = svt_reg_mr(d.pd, buf, 2 * NQP * MSG, IBV_ACCESS_LOCAL_WRITE);

	svt_qp_init_default(&qi, IBV_QPT_RC);
	for (int i = 0; i < NQP; i++) {
		qp[i] = svt_create_qp(d.pd, cq, cq, &qi);
		memset(&me, 0, sizeof(me));
		me.gid = d.gid;
		me.qpn = qp[i]->qp_num;
		svt_send_info(wfd, &me);
	}
	for (int i = 0; i < NQP; i++) {
		svt_recv_info(rfd, &peer[i]);
		svt_qp_connect(qp[i], NULL, &peer[i].gid, peer[i].qpn);
		/* the warm-up SEND, then the test SEND */
		SVT_CHECK_OK(svt_post_recv(qp[i], WARM_ID(i), buf + (2 * i) * MSG, MSG,
					   mr->lkey));
		SVT_CHECK_OK(svt_post_recv(qp[i], TEST_ID(i), buf + (2 * i + 1) * MSG, MSG,
					   mr->lkey));
	}
	svt_sync_send(wfd, 'R');

	/* warm-ups of QP 0 and 1, then the test SENDs of QP 0 and 1, in order */
	for (int k = 0; k < 2 * NQP; k++) {
		int i = k % NQP;
		uint32_t id = k < NQP ? WARM_ID(i) : TEST_ID(i);

		svt_poll_ok(cq, 1, &wc, 20000);
		SVT_CHECK_EQ(wc.wr_id, id);
		SVT_CHECK_EQ(wc.opcode, IBV_WC_RECV);
		SVT_CHECK_EQ(wc.byte_len, MSG);
		SVT_CHECK_EQ(wc.qp_num, qp[i]->qp_num);
		SVT_CHECK_FILL(buf + (k < NQP ? 2 * i : 2 * i + 1) * MSG, MSG, id);
		svt_sync_send(wfd, 'G'); /* got it (and acknowledged it) */
	}

	SVT_CHECK_EQ(svt_sync_recv(rfd, 20000), 'Q');
	for (int i = 0; i < NQP; i++)
		SVT_CHECK_OK(ibv_destroy_qp(qp[i]));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	free(buf);
	svt_dev_close(&d);
	return 0;
}

/* ------------------------------------------------- stalling the engine */

static int release_pipe[2] = { -1, -1 };
static atomic_int stalled;       /* threads that entered the handler */
static atomic_int let_go;        /* threads that left it */
static atomic_long interrupted;  /* what the last one's system call returned */

/* SIGUSR1: block until the main thread writes a byte to release_pipe. */
static void on_stall(int sig, siginfo_t *si, void *ucv)
{
	int saved = errno;
	long ret = -EINTR; /* architectures not checked below */
	char b;

	(void)sig;
	(void)si;
#if defined(__x86_64__)
	ret = (long)((ucontext_t *)ucv)->uc_mcontext.gregs[REG_RAX];
#elif defined(__aarch64__)
	ret = (long)((ucontext_t *)ucv)->uc_mcontext.regs[0];
#else
	(void)ucv;
#endif
	atomic_store(&interrupted, ret);
	atomic_fetch_add(&stalled, 1);
	while (read(release_pipe[0], &b, 1) < 0 && errno == EINTR)
		;
	atomic_fetch_add(&let_go, 1);
	errno = saved;
}

/* The thread ids of this process. */
static int list_tids(pid_t *tids, int max)
{
	DIR *dir = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	SVT_CHECK_PTR(dir);
	while ((e = readdir(dir))) {
		if (e->d_name[0] == '.')
			continue;
		SVT_CHECK_LT(n, max);
		tids[n++] = (pid_t)atoi(e->d_name);
	}
	closedir(dir);
	return n;
}

static bool epoll_syscall(long nr)
{
#ifdef SYS_epoll_wait
	if (nr == SYS_epoll_wait)
		return true;
#endif
#ifdef SYS_epoll_pwait2
	if (nr == SYS_epoll_pwait2)
		return true;
#endif
	return nr == SYS_epoll_pwait;
}

/* Is thread tid asleep in epoll_wait (the engine thread when idle)? */
static bool in_epoll_wait(pid_t tid)
{
	char path[64], line[256];
	FILE *f;
	bool yes = false;

	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
	f = fopen(path, "r");
	SVT_CHECK_PTR(f);
	/* "NR args... sp pc" while in a system call, "running" or "-1 ..." otherwise */
	if (fgets(line, sizeof(line), f)) {
		char *end;
		long nr = strtol(line, &end, 10);

		yes = end != line && epoll_syscall(nr);
	}
	fclose(f);
	return yes;
}

static void wait_count(atomic_int *c, int want, const char *what)
{
	uint64_t deadline = svt_now_ms() + SVT_TIMEOUT_MS;

	while (atomic_load(c) < want) {
		if (svt_now_ms() > deadline)
			SVT_FAIL("%s: %d of %d threads after %d ms", what, atomic_load(c), want,
				 SVT_TIMEOUT_MS);
		svt_sleep_ms(1);
	}
}

/* Let every stalled thread go, and wait until they have left the handler. */
static void release(int n)
{
	int base = atomic_load(&let_go);

	for (int i = 0; i < n; i++)
		SVT_CHECK_EQ(write(release_pipe[1], "x", 1), 1);
	wait_count(&let_go, base + n, "stalled threads let go");
}

/*
 * Stall the library's threads, each while it sleeps in epoll_wait.  A
 * thread that wakes between the look and the signal is let go and the whole
 * attempt is made again.
 */
static void stall(const pid_t *tids, int n)
{
	for (int attempt = 0; attempt < 200; attempt++) {
		int done = 0;

		/* an application poll keeps the engine ticking for a millisecond */
		svt_sleep_ms(attempt ? 5 : 20);
		for (; done < n; done++) {
			int before = atomic_load(&stalled);

			if (!in_epoll_wait(tids[done]))
				break;
			SVT_CHECK_EQ(syscall(SYS_tgkill, getpid(), tids[done], SIGUSR1), 0);
			wait_count(&stalled, before + 1, "threads stalled");
			if (atomic_load(&interrupted) != -EINTR) {
				done++; /* stalled, but not in its epoll_wait: let go */
				break;
			}
		}
		if (done == n && atomic_load(&interrupted) == -EINTR)
			return;
		release(done);
	}
	SVT_FAIL("the library's threads never all slept in epoll_wait");
}

/* ------------------------------------------------------------- requester */

static bool channel_has_event(struct ibv_comp_channel *ch)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

static void take_event(struct ibv_comp_channel *ch, struct ibv_cq *cq)
{
	struct ibv_cq *ev_cq;
	void *ev_ctx;

	SVT_CHECK_OK(svt_wait_cq_event(ch, 1000, &ev_cq, &ev_ctx));
	SVT_CHECK(ev_cq == cq);
	ibv_ack_cq_events(cq, 1);
}

static const struct svt_child_role roles[] = {
	{ "responder", responder },
	{ NULL, NULL },
};

int main(int argc, char **argv)
{
	struct svt_child c;
	struct svt_dev d;
	struct svt_qp_init qi;
	struct svt_peer_info me, peer;
	struct ibv_qp *qp[NQP];
	struct ibv_wc wc[4];
	pid_t before[MAX_TIDS], after[MAX_TIDS], lib[MAX_TIDS];
	int nbefore, nafter, nlib = 0;
	struct sigaction sa;

	/* the SENDs go by the wire, whose ACKs this is about: between
	 * processes of one host with shared pages the sender places a SEND
	 * into the receive itself and completes it in its post, as unit_direct_send
	 * shows (the child inherits this) */
	setenv("SOFTVERBS_SHARED_MR", "0", 1);
	svt_child_dispatch(argc, argv, roles);
	svt_watchdog(50);

	SVT_CHECK(pipe2(release_pipe, O_CLOEXEC) == 0);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_stall;
	sa.sa_flags = SA_SIGINFO; /* no SA_RESTART: epoll_wait returns EINTR anyway */
	sigemptyset(&sa.sa_mask);
	SVT_CHECK_OK(sigaction(SIGUSR1, &sa, NULL));

	svt_spawn(&c, "responder", NULL);

	/* the threads ibv_open_device starts are the library's */
	nbefore = list_tids(before, MAX_TIDS);
	svt_dev_open(&d);
	nafter = list_tids(after, MAX_TIDS);
	for (int i = 0; i < nafter; i++) {
		bool old = false;

		for (int j = 0; j < nbefore; j++)
			old |= after[i] == before[j];
		if (!old)
			lib[nlib++] = after[i];
	}
	SVT_CHECK_MSG(nlib >= 1, "ibv_open_device started no thread (%d before, %d after)",
		      nbefore, nafter);
	svt_log("%d library thread(s) to stall", nlib);

	struct ibv_comp_channel *ch = ibv_create_comp_channel(d.ctx);

	SVT_CHECK_PTR(ch);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 16, ch);
	char *buf = svt_alloc(2 * NQP * MSG);
	struct ibv_mr *mr = svt_reg_mr(d.pd, buf, 2 * NQP * MSG, IBV_ACCESS_LOCAL_WRITE);

	svt_qp_init_default(&qi, IBV_QPT_RC);
	for (int i = 0; i < NQP; i++)
		qp[i] = svt_create_qp(d.pd, cq, cq, &qi);
	for (int i = 0; i < NQP; i++) {
		svt_recv_info(c.rfd, &peer);
		memset(&me, 0, sizeof(me));
		me.gid = d.gid;
		me.qpn = qp[i]->qp_num;
		svt_send_info(c.wfd, &me);
		svt_qp_connect(qp[i], NULL, &peer.gid, peer.qpn);
	}
	SVT_CHECK_EQ(svt_sync_recv(c.rfd, 0), 'R');

	/* warm-up: the connection to the responder is up, its handshake done */
	for (int i = 0; i < NQP; i++) {
		char *p = buf + (2 * i) * MSG;

		svt_fill(p, MSG, WARM_ID(i));
		SVT_CHECK_OK(svt_post_send(qp[i], WARM_ID(i), IBV_WR_SEND, IBV_SEND_SIGNALED, p,
					   MSG, mr->lkey, 0, 0, 0));
		svt_poll_ok(cq, 1, wc, 10000);
		SVT_CHECK_EQ(wc[0].wr_id, WARM_ID(i));
		SVT_CHECK_EQ(svt_sync_recv(c.rfd, 10000), 'G');
	}

	for (int i = 0; i < NQP; i++) {
		const char *how = i == 0 ? "ibv_modify_qp(ERR)" : "ibv_destroy_qp";
		char *p = buf + (2 * i + 1) * MSG;
		uint32_t qpn = qp[i]->qp_num;
		int n;

		svt_fill(p, MSG, TEST_ID(i));
		SVT_CHECK_OK(ibv_req_notify_cq(cq, 0));
		SVT_CHECK(!channel_has_event(ch));
		stall(lib, nlib);

		/* from this thread, with nobody else to send it */
		SVT_CHECK_OK(svt_post_send(qp[i], TEST_ID(i), IBV_WR_SEND, IBV_SEND_SIGNALED, p,
					   MSG, mr->lkey, 0, 0, 0));
		SVT_CHECK_MSG(svt_sync_recv(c.rfd, 10000) == 'G',
			      "the SEND did not reach the responder");
		svt_sleep_ms(50); /* its ACK is here by now */
		SVT_CHECK_MSG(!channel_has_event(ch),
			      "the SEND completed while the engine was stalled");

		if (i == 0)
			SVT_CHECK_OK(svt_qp_to_state(qp[i], IBV_QPS_ERR));
		else
			SVT_CHECK_OK(ibv_destroy_qp(qp[i]));
		n = ibv_poll_cq(cq, 4, wc);
		SVT_CHECK_MSG(n == 1, "%s: %d completions right after it, expected the SEND's",
			      how, n);
		SVT_CHECK_EQ(wc[0].wr_id, TEST_ID(i));
		SVT_CHECK_EQ(wc[0].qp_num, qpn);
		SVT_CHECK_WC_OK(wc[0]);
		SVT_CHECK_EQ(wc[0].opcode, IBV_WC_SEND);
		SVT_CHECK(channel_has_event(ch));
		take_event(ch, cq);

		release(nlib);
		svt_expect_no_wc(cq, 50);
		svt_log("%s: the acknowledged SEND completed with success", how);
	}

	svt_sync_send(c.wfd, 'Q');
	SVT_CHECK_EQ(svt_child_wait(&c, 10000), 0);

	SVT_CHECK_OK(ibv_destroy_qp(qp[0]));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	SVT_CHECK_OK(ibv_destroy_comp_channel(ch));
	free(buf);
	svt_dev_close(&d);
	close(release_pipe[0]);
	close(release_pipe[1]);
	return 0;
}
