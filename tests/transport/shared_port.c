/*
 * transport_shared_port: processes leave the host's shared port with
 * connections the kernel gave them.
 *
 * A process that exits (or closes a device) while connections wait in its
 * shared-port listener's queue, or that took one and had not handed it on
 * yet, ends them before the connecting side hears the peer's HELLO.  Here
 * "leavers" stand for such processes: six extra sockets in the shared
 * port's SO_REUSEPORT group (this test's own port, SOFTVERBS_PORT) that
 * accept every connection and close it at once.  The kernel gives most new
 * connections to them.
 *
 * UC has no retransmission: a WRITE that waited on such a connection was
 * lost.  Now a connection that ends before the peer's HELLO takes its queue
 * to a new one, first straight to the endpoint's own port.  Each of 8 fresh
 * pairs of endpoints does a UC WRITE each way, and an RC SEND, which must
 * arrive once.  The test also checks that the leavers did take connections,
 * or it would prove nothing.
 *
 * That is with SOFTVERBS_TCP_OWN_PORT=0 (argv[1] "shared"), under which an
 * endpoint of this host is dialled through the shared port as another
 * host's is.  By default it is dialled at its own port (tcp.c): then the
 * same pairs do the same and the leavers take no connection at all.
 */
#include "sv_test.h"

#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#define NLEAVERS 6
#define NPAIRS 8
#define WLEN 4096

static int leavers[NLEAVERS];
static atomic_int taken;
static atomic_bool stop;

static void *leave_all(void *arg)
{
	struct pollfd p[NLEAVERS];

	(void)arg;
	for (int i = 0; i < NLEAVERS; i++)
		p[i] = (struct pollfd){ .fd = leavers[i], .events = POLLIN };
	while (!atomic_load(&stop)) {
		if (poll(p, NLEAVERS, 50) <= 0)
			continue;
		for (int i = 0; i < NLEAVERS; i++) {
			int fd;

			if (!(p[i].revents & POLLIN))
				continue;
			while ((fd = accept4(leavers[i], NULL, NULL, SOCK_NONBLOCK)) >= 0) {
				atomic_fetch_add(&taken, 1);
				close(fd);
			}
		}
	}
	return NULL;
}

/* The leavers join a port of their own, which the devices then share. */
static uint16_t open_leavers(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	int one = 1;

	for (int i = 0; i < NLEAVERS; i++) {
		leavers[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		SVT_CHECK_GE(leavers[i], 0);
		SVT_CHECK_OK(setsockopt(leavers[i], SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
		SVT_CHECK_OK(setsockopt(leavers[i], SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)));
		SVT_CHECK_OK(bind(leavers[i], (struct sockaddr *)&sa, sizeof(sa)));
		if (i == 0)
			SVT_CHECK_OK(getsockname(leavers[0], (struct sockaddr *)&sa, &sl));
		SVT_CHECK_OK(listen(leavers[i], 64));
	}
	return ntohs(sa.sin_port);
}

/* A UC WRITE from one side to the other, seen in the target's memory. */
static void uc_write(struct svt_side *from, struct svt_side *to, uint32_t seed)
{
	svt_fill(from->buf, WLEN, seed);
	SVT_CHECK_OK(svt_post_send(from->qp, seed, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, from->buf,
				   WLEN, from->mr->lkey, (uintptr_t)to->buf, to->mr->rkey, 0));
	svt_poll_ok(from->send_cq, 1, &(struct ibv_wc){ 0 }, 0);
	svt_wait_fill_at(__FILE__, __LINE__, to->buf, WLEN, seed, 5000);
}

int main(int argc, char **argv)
{
	bool shared = argc > 1 && !strcmp(argv[1], "shared");
	pthread_t th;
	char port[16];

	svt_watchdog(90);
	if (shared)
		setenv("SOFTVERBS_TCP_OWN_PORT", "0", 1);
	snprintf(port, sizeof(port), "%u", open_leavers());
	setenv("SOFTVERBS_PORT", port, 1);
	setenv("SOFTVERBS_TRANSPORT", "tcp", 1);
	SVT_CHECK_OK(pthread_create(&th, NULL, leave_all, NULL));

	for (uint32_t i = 0; i < NPAIRS; i++) {
		struct svt_pair uc, rc;
		struct ibv_wc wc[2];

		svt_pair_create(&uc, IBV_QPT_UC, NULL);
		uc_write(&uc.a, &uc.b, 100 + i);
		uc_write(&uc.b, &uc.a, 200 + i);
		svt_pair_destroy(&uc);

		svt_pair_create(&rc, IBV_QPT_RC, NULL);
		SVT_CHECK_OK(svt_post_recv(rc.b.qp, 1, rc.b.buf, WLEN, rc.b.mr->lkey));
		SVT_CHECK_OK(svt_post_recv(rc.b.qp, 2, rc.b.buf, WLEN, rc.b.mr->lkey));
		svt_fill(rc.a.buf, WLEN, 300 + i);
		SVT_CHECK_OK(svt_post_send(rc.a.qp, 7, IBV_WR_SEND, IBV_SEND_SIGNALED, rc.a.buf,
					   WLEN, rc.a.mr->lkey, 0, 0, 0));
		svt_poll_ok(rc.a.send_cq, 1, wc, 0);
		svt_poll_ok(rc.b.recv_cq, 1, wc, 0);
		SVT_CHECK_EQ(wc[0].wr_id, 1);
		SVT_CHECK_EQ(wc[0].byte_len, WLEN);
		SVT_CHECK_FILL(rc.b.buf, WLEN, 300 + i);
		svt_expect_no_wc(rc.b.recv_cq, 200); /* once */
		svt_pair_destroy(&rc);
	}
	atomic_store(&stop, true);
	SVT_CHECK_OK(pthread_join(th, NULL));
	svt_log("the leavers ended %d connections before their HELLO", atomic_load(&taken));
	if (shared)
		SVT_CHECK_MSG(atomic_load(&taken) > 0,
			      "no connection went to a leaver: nothing was shown");
	else
		SVT_CHECK_MSG(atomic_load(&taken) == 0,
			      "connections to endpoints of this host went through the shared port");
	for (int i = 0; i < NLEAVERS; i++)
		close(leavers[i]);
	return 0;
}
