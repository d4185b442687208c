/*
 * unit_shared_port: over tcp every connection goes to the host's shared
 * port (SOFTVERBS_PORT, all processes listening with SO_REUSEPORT) and is
 * handed to the endpoint its HELLO names (issue 11).  Between endpoints of
 * one host that is with SOFTVERBS_TCP_OWN_PORT=0 (set for .tcp); by
 * default they dial each other's own port.
 *   - with a third process that joined the shared port and is then
 *     stopped (SIGSTOP: it never accepts what the kernel gives it), 24 RC
 *     QP pairs between two contexts of this process still all connect and
 *     complete a WRITE and a SEND with the right data: a connection that
 *     stays unanswered is given up for a new one, which the kernel may
 *     give to a live process
 * Over shm (the default between processes of a host) the same traffic
 * runs without the shared port, as a control.
 */
#include "sv_test.h"

#include <signal.h>

#define PAIRS 24
#define LEN 4096

static int idle_child(int rfd, int wfd, int argc, char **argv)
{
	struct svt_dev d;
	char c;

	(void)argc;
	(void)argv;
	svt_dev_open(&d); /* listening on the shared port from now on */
	svt_chan_write(wfd, "r", 1);
	svt_chan_read(rfd, &c, 1, 600000);
	svt_dev_close(&d);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct svt_child_role roles[] = { { "idle", idle_child }, { NULL, NULL } };
	struct svt_child idle;
	struct svt_pair p[PAIRS];
	char c;

	svt_child_dispatch(argc, argv, roles);
	svt_watchdog(120);
	svt_spawn(&idle, "idle", NULL);
	svt_chan_read(idle.rfd, &c, 1, 0);
	svt_child_kill(&idle, SIGSTOP);
	for (int i = 0; i < PAIRS; i++) {
		svt_pair_create(&p[i], IBV_QPT_RC, NULL);
		svt_fill(p[i].a.buf, LEN, (uint32_t)i);
		SVT_CHECK_OK(svt_post_recv(p[i].b.qp, 1, (uint8_t *)p[i].b.buf + LEN, LEN,
					   p[i].b.mr->lkey));
		SVT_CHECK_OK(svt_post_send(p[i].a.qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED,
					   p[i].a.buf, LEN, p[i].a.mr->lkey, (uintptr_t)p[i].b.buf,
					   p[i].b.mr->rkey, 0));
		SVT_CHECK_OK(svt_post_send(p[i].a.qp, 2, IBV_WR_SEND, IBV_SEND_SIGNALED, p[i].a.buf,
					   LEN, p[i].a.mr->lkey, 0, 0, 0));
	}
	for (int i = 0; i < PAIRS; i++) {
		SVT_CHECK_WC_OK(svt_poll_one(p[i].a.send_cq));
		SVT_CHECK_WC_OK(svt_poll_one(p[i].a.send_cq));
		SVT_CHECK_WC_OK(svt_poll_one(p[i].b.recv_cq));
		SVT_CHECK_FILL(p[i].b.buf, LEN, (uint32_t)i);
		SVT_CHECK_FILL((uint8_t *)p[i].b.buf + LEN, LEN, (uint32_t)i);
		svt_pair_destroy(&p[i]);
	}
	svt_log("%d QP pairs connected and moved data with a stopped process on the shared port",
		PAIRS);
	svt_child_kill(&idle, SIGCONT);
	svt_chan_write(idle.wfd, "q", 1);
	SVT_CHECK_EQ(svt_child_wait(&idle, 0), 0);
	return 0;
}
