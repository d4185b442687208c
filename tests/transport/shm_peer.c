/*
 * A same-user process that connects to a device's shared-memory socket and
 * hands it ring memory it could shrink later (which would make the
 * device's next access to the rings SIGBUS): refused.  The ring memory
 * must come sealed against shrinking and growing, at the rings' size
 * (src/transport/shm.c, sealed_at_size):
 *   - an unsealed memfd of the right size: the device closes the socket;
 *   - a sealed one of the wrong size: closed;
 *   - a sealed one of the right size (the control, so that this test
 *     cannot pass by getting the setup message wrong): kept;
 * and a peer that then scribbles on the ring's counters (a tail beyond
 * what a ring holds, a record longer than what was published) is cut off
 * at its next doorbell, without a crash.  Eight peers that connect and
 * never send their setup do not hold up the device (each used to stall its
 * engine for a second), and through all of it the device still moves data
 * between two of its QPs over shm.
 */
#include "sv_test.h"
#include "transport/transport.h"
#include "transport/registry.h"
#include "shm_connector.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <stdlib.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* The same; true if the device is still connected 300 ms later. */
static bool offer(uint16_t port, int mfd)
{
	int fd = svt_shm_offer(port, mfd);
	bool open = !svt_shm_closed_within(fd, 300);

	close(fd);
	return open;
}

/*
 * Hand the device good ring memory, then write the connector ring's tail
 * (and the first record header, when rec is not 0) as a broken peer would,
 * and ring: the device must close the connection.
 */
static void scribble(uint16_t port, uint64_t tail, uint64_t rec, const char *what)
{
	int mfd = svt_shm_memory(SVT_SHM_MAP_LEN, true);
	uint8_t *m = mmap(NULL, SVT_SHM_MAP_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	int fd = svt_shm_offer(port, mfd);
	char bell = 0;

	SVT_CHECK(m != MAP_FAILED);
	SVT_CHECK_MSG(!svt_shm_closed_within(fd, 200), "good ring memory refused (%s)", what);
	memcpy(m + SVT_SHM_RING0_DATA, &rec, 8);
	__atomic_store_n((uint64_t *)(m + SVT_SHM_RING0_TAIL), tail, __ATOMIC_SEQ_CST);
	SVT_CHECK_EQ(send(fd, &bell, 1, MSG_NOSIGNAL), 1);
	SVT_CHECK_MSG(svt_shm_closed_within(fd, 3000), "a ring with %s was read on", what);
	svt_log("ok: a ring with %s: connection closed", what);
	close(fd);
	munmap(m, SVT_SHM_MAP_LEN);
	close(mfd);
}

int main(void)
{
	struct svt_dev d;
	struct svt_qp_init qi;
	struct ibv_wc wc[2];
	int mfd;

	svt_watchdog(60);
	setenv("SOFTVERBS_TRANSPORT", "shm", 1);
	svt_dev_open(&d);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 16, NULL);

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *a = svt_create_qp(d.pd, cq, cq, &qi);
	struct ibv_qp *b = svt_create_qp(d.pd, cq, cq, &qi);
	uint16_t port = sv_qpn_port(a->qp_num);

	mfd = svt_shm_memory(SVT_SHM_MAP_LEN, false);
	SVT_CHECK_MSG(!offer(port, mfd), "unsealed ring memory was accepted");
	close(mfd);
	mfd = svt_shm_memory(4096, true);
	SVT_CHECK_MSG(!offer(port, mfd), "ring memory of the wrong size was accepted");
	close(mfd);
	mfd = svt_shm_memory(SVT_SHM_MAP_LEN, true);
	SVT_CHECK_MSG(offer(port, mfd), "sealed ring memory of the right size was refused: "
					"does this test's setup message match shm.c's?");
	close(mfd);
	scribble(port, (4u << 20) + 8, 0, "a tail beyond a ring");
	scribble(port, 12, 0, "a tail inside a record header");
	scribble(port, 16, 1u << 20, "a record longer than what was published");
	scribble(port, 16, (1ull << 40) | 8, "a record header with unknown flags");

	/* peers that connect and never send their setup */
	int silent[8];

	for (int i = 0; i < 8; i++)
		silent[i] = svt_shm_socket(port);
	svt_sleep_ms(50);

	/* the device still moves data over shm, without waiting on them */
	uint8_t *buf = svt_alloc(8192);
	struct ibv_mr *mr = svt_reg_mr(d.pd, buf, 8192, SVT_ACCESS_ALL);

	svt_qp_link(a, &d.gid, b, &d.gid, NULL);
	svt_fill(buf, 4096, 4);
	SVT_CHECK_OK(svt_post_recv(b, 1, buf + 4096, 4096, mr->lkey));
	uint64_t t0 = svt_now_ms();

	SVT_CHECK_OK(svt_post_send(a, 2, IBV_WR_SEND, IBV_SEND_SIGNALED, buf, 4096, mr->lkey, 0, 0,
				   0));
	/* 8 s if each silent peer held the engine for its second */
	svt_poll_ok(cq, 2, wc, 3000);
	SVT_CHECK_FILL(buf + 4096, 4096, 4);
	svt_log("ok: 8 silent connectors, a SEND completed in %llu ms",
		(unsigned long long)(svt_now_ms() - t0));
	for (int i = 0; i < 8; i++)
		close(silent[i]);
	SVT_CHECK_OK(ibv_destroy_qp(a));
	SVT_CHECK_OK(ibv_destroy_qp(b));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&d);
	free(buf);
	return 0;
}
