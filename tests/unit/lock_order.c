/*
 * unit_lock_order: the lock-order checker (src/common/lock_order.h),
 * white-box, built from its sources with SV_LOCK_ORDER on.
 *
 *  - two levelled locks taken in the order abort nothing; taken the other
 *    way round, the child that does it dies of SIGABRT and says which two
 *    locks, their levels and where;
 *  - a trylock against the order is allowed (it cannot wait);
 *  - two locks of one level: refused, unless the code says so
 *    (sv_lock_nest_allow);
 *  - a read lock of an sv_arwlock nests; the MR table's read lock is
 *    refused under a connection's tx_lock;
 *  - a system call's guard fires under the engine lock, not without it.
 */
#include "common/arwlock.h"
#include "common/lock_order.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static struct sv_mutex qp = SV_MUTEX_INITIALIZER(SV_LOCK_QP);
static struct sv_mutex qp2 = SV_MUTEX_INITIALIZER(SV_LOCK_QP);
static struct sv_mutex cq = SV_MUTEX_INITIALIZER(SV_LOCK_CQ);
static struct sv_mutex tx = SV_MUTEX_INITIALIZER(SV_LOCK_CONN_TX);
static struct sv_mutex eng = SV_MUTEX_INITIALIZER(SV_LOCK_ENGINE);
static struct sv_arwlock mrs;

/* Run fn in a child; its status, and what it wrote to stderr in out. */
static int in_child(void (*fn)(void), char *out, size_t cap)
{
	int p[2], st = 0;
	ssize_t n, got = 0;
	pid_t pid;

	CHECK(pipe(p) == 0);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		dup2(p[1], 2);
		close(p[0]);
		fn();
		_exit(0);
	}
	close(p[1]);
	while (got < (ssize_t)cap - 1 && (n = read(p[0], out + got, cap - 1 - (size_t)got)) > 0)
		got += n;
	out[got] = 0;
	close(p[0]);
	CHECK(waitpid(pid, &st, 0) == pid);
	return st;
}

static bool aborted(int st)
{
	return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}

static bool exited_ok(int st)
{
	return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void right_order(void)
{
	sv_mutex_lock(&qp);
	sv_mutex_lock(&tx);
	sv_mutex_lock(&eng);
	sv_mutex_unlock(&eng);
	sv_mutex_unlock(&tx);
	sv_mutex_lock(&cq); /* levels may be skipped */
	sv_mutex_unlock(&cq);
	sv_mutex_unlock(&qp);
	/* and let go of out of order */
	sv_mutex_lock(&qp);
	sv_mutex_lock(&cq);
	sv_mutex_unlock(&qp);
	sv_mutex_unlock(&cq);
}

static void wrong_order(void)
{
	sv_mutex_lock(&cq);
	sv_mutex_lock(&qp); /* the line the message names */
}

static void trylock_against(void)
{
	sv_mutex_lock(&cq);
	if (sv_mutex_trylock(&qp) == 0)
		sv_mutex_unlock(&qp);
	sv_mutex_unlock(&cq);
}

static void same_level(void)
{
	sv_mutex_lock(&qp);
	sv_mutex_lock(&qp2);
}

static void same_level_said(void)
{
	sv_mutex_lock(&qp);
	sv_lock_nest_allow(&qp);
	sv_mutex_lock(&qp2);
	sv_lock_nest_allow(NULL);
	sv_mutex_unlock(&qp2);
	sv_mutex_unlock(&qp);
}

static void read_nests(void)
{
	sv_mutex_lock(&qp);
	sv_arwlock_rdlock(&mrs);
	sv_arwlock_rdlock(&mrs);
	sv_mutex_lock(&tx);
	sv_mutex_unlock(&tx);
	sv_arwlock_rdunlock(&mrs);
	sv_arwlock_rdunlock(&mrs);
	sv_mutex_unlock(&qp);
}

static void read_under_tx(void)
{
	sv_mutex_lock(&tx);
	sv_arwlock_rdlock(&mrs);
}

static void syscall_free(void)
{
	sv_lock_assert_may_block("a test's system call");
	sv_mutex_lock(&tx);
	sv_lock_assert_may_block("a test's system call");
	sv_mutex_unlock(&tx);
}

static void syscall_under_engine(void)
{
	sv_mutex_lock(&eng);
	sv_lock_assert_may_block("a test's system call");
}

int main(void)
{
	char out[4096];
	int st;

	CHECK(sv_arwlock_init(&mrs, SV_LOCK_MR) == 0);

	st = in_child(right_order, out, sizeof(out));
	CHECK(exited_ok(st));
	CHECK(!strstr(out, "lock order"));

	st = in_child(wrong_order, out, sizeof(out));
	CHECK(aborted(st));
	CHECK(strstr(out, "lock order violated"));
	CHECK(strstr(out, "qp->lock") && strstr(out, "cq->lock"));
	CHECK(strstr(out, " QP)"));
	CHECK(strstr(out, " CQ)"));
	CHECK(strstr(out, "tests/unit/lock_order.c:"));

	st = in_child(trylock_against, out, sizeof(out));
	CHECK(exited_ok(st));

	st = in_child(same_level, out, sizeof(out));
	CHECK(aborted(st));
	CHECK(strstr(out, "a second lock of one level"));

	st = in_child(same_level_said, out, sizeof(out));
	CHECK(exited_ok(st));

	st = in_child(read_nests, out, sizeof(out));
	CHECK(exited_ok(st));

	st = in_child(read_under_tx, out, sizeof(out));
	CHECK(aborted(st));
	CHECK(strstr(out, "MR table lock") && strstr(out, "conn->tx_lock"));

	st = in_child(syscall_free, out, sizeof(out));
	CHECK(exited_ok(st));

	st = in_child(syscall_under_engine, out, sizeof(out));
	CHECK(aborted(st));
	CHECK(strstr(out, "eng->lock") && strstr(out, "a test's system call"));

	sv_arwlock_destroy(&mrs);
	printf("unit_lock_order: ok\n");
	return 0;
}
