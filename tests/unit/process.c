/*
 * unit_process: two processes, and fork().
 *   - a child process (fork+exec of this binary, its own device) is the
 *     target of RDMA WRITE, READ and atomics, and receives a SEND, while it
 *     is blocked in read() on a pipe: one-sided operations progress without
 *     the target calling into the library; it then checks its memory
 *   - ibv_fork_init(): the parent keeps working across fork(), while the
 *     forked child lives and after it exits
 */
#include "sv_test.h"

#include <sys/wait.h>
#include <unistd.h>

#define TLEN (256 * 1024)
#define HALF (TLEN / 2)

/* Offsets of the atomic words in the page after the target's two halves. */
#define W_FAA 0
#define W_CAS 8

static int target(int rfd, int wfd, int argc, char **argv)
{
	struct svt_dev d;
	struct svt_peer_info me, peer;
	struct svt_qp_init qi;
	struct ibv_wc wc;

	(void)argc;
	(void)argv;
	svt_dev_open(&d);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 16, NULL);

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *qp = svt_create_qp(d.pd, cq, cq, &qi);
	char *buf = svt_alloc(TLEN + 4096);
	char *words = buf + TLEN; /* atomics target */
	struct ibv_mr *mr = svt_reg_mr(d.pd, buf, TLEN + 4096, SVT_ACCESS_ALL);

	svt_fill(buf + HALF, HALF, 2); /* the parent READs this half */
	((uint64_t *)words)[0] = 1000;
	((uint64_t *)words)[1] = 5;

	memset(&me, 0, sizeof(me));
	me.gid = d.gid;
	me.qpn = qp->qp_num;
	me.addr = (uintptr_t)buf;
	me.rkey = mr->rkey;
	me.len = TLEN + 4096;
	svt_send_info(wfd, &me);
	svt_recv_info(rfd, &peer);
	svt_qp_connect(qp, NULL, &peer.gid, peer.qpn);
	/* Receive for the parent's SEND, into the page after the words. */
	SVT_CHECK_OK(svt_post_recv(qp, 7, words + 64, 1024, mr->lkey));
	svt_sync_send(wfd, 'R');

	/* Blocked here, outside the library, while the parent works. */
	char t = svt_sync_recv(rfd, 20000);

	SVT_CHECK_EQ(t, 'C');
	SVT_CHECK_FILL(buf, HALF, 1);            /* parent's WRITE */
	SVT_CHECK_EQ(((uint64_t *)words)[0], 1042); /* FETCH_AND_ADD 42 */
	SVT_CHECK_EQ(((uint64_t *)words)[1], 6); /* CMP_AND_SWP 5 -> 6 */
	wc = svt_poll_one(cq); /* completed while we were not looking */
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.wr_id, 7);
	SVT_CHECK_EQ(wc.byte_len, 100);
	SVT_CHECK_FILL(words + 64, 100, 3);
	svt_sync_send(wfd, 'K');

	SVT_CHECK_OK(ibv_destroy_qp(qp));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	free(buf);
	svt_dev_close(&d);
	return 0;
}

static void test_two_processes(void)
{
	struct svt_child c;
	struct svt_dev d;
	struct svt_peer_info me, peer;
	struct svt_qp_init qi;
	struct ibv_wc wc[5];

	svt_spawn(&c, "target", NULL);
	svt_dev_open(&d);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 16, NULL);

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *qp = svt_create_qp(d.pd, cq, cq, &qi);
	char *buf = svt_alloc(TLEN + 4096);
	struct ibv_mr *mr = svt_reg_mr(d.pd, buf, TLEN + 4096, SVT_ACCESS_ALL);

	svt_recv_info(c.rfd, &peer);
	memset(&me, 0, sizeof(me));
	me.gid = d.gid;
	me.qpn = qp->qp_num;
	svt_send_info(c.wfd, &me);
	/* one host port: the same GID in both processes, QPNs unique on the host */
	SVT_CHECK_MEM(&me.gid, &peer.gid, sizeof(me.gid));
	SVT_CHECK(me.qpn != peer.qpn);
	svt_qp_connect(qp, NULL, &peer.gid, peer.qpn);
	SVT_CHECK_EQ(svt_sync_recv(c.rfd, 0), 'R');

	uint64_t words = peer.addr + TLEN;
	uint64_t *lw = (uint64_t *)(buf + TLEN);

	svt_fill(buf, HALF, 1);
	svt_fill(buf + TLEN + 1024, 100, 3);
	SVT_CHECK_OK(svt_post_send(qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED,
				   buf, HALF, mr->lkey, peer.addr, peer.rkey,
				   0));
	SVT_CHECK_OK(svt_post_send(qp, 2, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED,
				   buf + HALF, HALF, mr->lkey,
				   peer.addr + HALF, peer.rkey, 0));
	SVT_CHECK_OK(svt_post_atomic(qp, 3, IBV_WR_ATOMIC_FETCH_AND_ADD,
				     IBV_SEND_SIGNALED, &lw[0], mr->lkey,
				     words + W_FAA, peer.rkey, 42, 0));
	SVT_CHECK_OK(svt_post_atomic(qp, 4, IBV_WR_ATOMIC_CMP_AND_SWP,
				     IBV_SEND_SIGNALED, &lw[1], mr->lkey,
				     words + W_CAS, peer.rkey, 5, 6));
	SVT_CHECK_OK(svt_post_send(qp, 5, IBV_WR_SEND, IBV_SEND_SIGNALED,
				   buf + TLEN + 1024, 100, mr->lkey, 0, 0, 0));
	svt_poll_ok(cq, 5, wc, 10000);
	for (int i = 0; i < 5; i++)
		SVT_CHECK_EQ(wc[i].wr_id, 1 + i);
	SVT_CHECK_FILL(buf + HALF, HALF, 2);
	SVT_CHECK_EQ(lw[0], 1000);
	SVT_CHECK_EQ(lw[1], 5);

	svt_sync_send(c.wfd, 'C');
	SVT_CHECK_EQ(svt_sync_recv(c.rfd, 10000), 'K');
	SVT_CHECK_EQ(svt_child_wait(&c, 10000), 0);

	SVT_CHECK_OK(ibv_destroy_qp(qp));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	free(buf);
	svt_dev_close(&d);
}

static void traffic(struct svt_pair *p, uint32_t seed)
{
	struct ibv_wc wc;

	svt_fill(p->a.buf, 8192, seed);
	SVT_CHECK_OK(svt_post_recv(p->b.qp, seed, p->b.buf, 8192,
				   p->b.mr->lkey));
	SVT_CHECK_OK(svt_post_send(p->a.qp, seed, IBV_WR_SEND,
				   IBV_SEND_SIGNALED, p->a.buf, 8192,
				   p->a.mr->lkey, 0, 0, 0));
	svt_poll_ok(p->a.send_cq, 1, &wc, 0);
	svt_poll_ok(p->b.recv_cq, 1, &wc, 0);
	SVT_CHECK_FILL(p->b.buf, 8192, seed);
	SVT_CHECK_OK(svt_post_send(p->b.qp, seed, IBV_WR_RDMA_READ,
				   IBV_SEND_SIGNALED, (char *)p->b.buf + 8192,
				   8192, p->b.mr->lkey, (uintptr_t)p->a.buf,
				   p->a.mr->rkey, 0));
	svt_poll_ok(p->b.send_cq, 1, &wc, 0);
	SVT_CHECK_FILL((char *)p->b.buf + 8192, 8192, seed);
}

static void test_fork(void)
{
	struct svt_pair p;
	int status;

	svt_pair_create(&p, IBV_QPT_RC, NULL);
	traffic(&p, 1);

	pid_t pid = fork();

	SVT_CHECK(pid >= 0);
	if (pid == 0) {
		/* The child does not use verbs (nor touch registered memory,
		 * which ibv_fork_init may have kept out of it). */
		svt_sleep_ms(100);
		_exit(0);
	}
	traffic(&p, 2); /* while the child lives */
	SVT_CHECK_EQ(waitpid(pid, &status, 0), pid);
	SVT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	traffic(&p, 3); /* after it exited */

	/* Objects created after the fork work too. */
	struct svt_pair q;

	svt_pair_create(&q, IBV_QPT_RC, NULL);
	traffic(&q, 4);
	svt_pair_destroy(&q);
	svt_pair_destroy(&p);
}

static const struct svt_child_role roles[] = {
	{ "target", target },
	{ NULL, NULL },
};

int main(int argc, char **argv)
{
	svt_child_dispatch(argc, argv, roles);
	svt_watchdog(50);

	/* Before any other verbs call. */
	SVT_CHECK_OK(ibv_fork_init());
	SVT_CHECK(ibv_is_fork_initialized() != IBV_FORK_DISABLED);

	test_two_processes();
	test_fork();
	return 0;
}
